//! A variant's stack, checked: its callers' retry layers (shared, or per
//! stream under `stacks:`), and the gateway in front of the providers —
//! none, a naive retry layer, or a Levee config block resolved by
//! `levee-config`.

use super::raw::{RawGateway, RawLayer, RawVariant};
use super::{join, LeveeGateway, Variant};
use crate::arrivals::Stream;
use crate::error::SimError;
use crate::layers::{Layer, RetryRule};
use levee_config::locate::{locate, Seg};
use levee_config::raw::RawConfig;
use levee_config::{Config, ConfigError};
use levee_policy::backoff::{Backoff, Jitter};

/// One variant: its callers' retry layers and the gateway in front of the
/// providers (none, a naive retry layer, or Levee).
pub(super) fn resolve_variant(
    v: RawVariant,
    i: usize,
    text: &str,
    names: &[&String],
    streams: &[Stream],
) -> Result<Variant, SimError> {
    use Seg::*;
    let (mut layers, mut stacks) = caller_stacks(&v, i, text, streams)?;
    if layers.len() > usize::from(u8::MAX) {
        let path = [Key("variants"), Index(i)];
        return Err(SimError::at(
            locate(text, &path),
            format!("variant `{}`: at most 254 caller layers", v.name),
        ));
    }
    let levee = resolve_gateway(v.gateway, &v.name, i, text, names, &mut layers, &mut stacks)?;
    Ok(Variant {
        name: v.name,
        layers,
        stacks,
        levee,
    })
}

/// The variant's caller layers, `callers:` first, then each stream's own
/// under `stacks:`; and per stream, the layers its requests pass through
/// (indices into the first).
fn caller_stacks(
    v: &RawVariant,
    i: usize,
    text: &str,
    streams: &[Stream],
) -> Result<(Vec<Layer>, Vec<Vec<u8>>), SimError> {
    use Seg::*;
    let mut layers = Vec::new();
    for (j, l) in v.callers.iter().enumerate() {
        let path = [Key("variants"), Index(i), Key("callers"), Index(j)];
        layers.push(resolve_layer(
            l,
            &format!("caller {}", j + 1),
            false,
            text,
            &path,
        )?);
    }
    let shared: Vec<u8> = (0..layers.len() as u8).collect();
    let mut stacks = vec![shared; streams.len()];
    for (stream, own) in &v.stacks {
        let path = [
            Key("variants"),
            Index(i),
            Key("stacks"),
            Key(stream.as_str()),
        ];
        let Some(k) = streams.iter().position(|s| &s.name == stream) else {
            let known: Vec<&String> = streams.iter().map(|s| &s.name).collect();
            return Err(SimError::at(
                locate(text, &path),
                format!(
                    "variant `{}`: `stacks` names `{stream}`, not a stream of `arrivals:` (known: {})",
                    v.name,
                    join(&known)
                ),
            ));
        };
        let mut stack = Vec::new();
        for (j, l) in own.iter().enumerate() {
            let mut lp = path.to_vec();
            lp.push(Index(j));
            let name = format!("{stream} caller {}", j + 1);
            layers.push(resolve_layer(l, &name, false, text, &lp)?);
            stack.push((layers.len() - 1) as u8);
        }
        stacks[k] = stack;
    }
    Ok((layers, stacks))
}

/// The variant's `gateway:`: a naive one is a last caller layer every stack
/// passes through; Levee's is its resolved config (`None` without one).
fn resolve_gateway(
    gateway: Option<RawGateway>,
    variant: &str,
    i: usize,
    text: &str,
    names: &[&String],
    layers: &mut Vec<Layer>,
    stacks: &mut [Vec<u8>],
) -> Result<Option<Box<LeveeGateway>>, SimError> {
    use Seg::*;
    match gateway.map(|g| (g.naive, g.levee)) {
        None => Ok(None),
        Some((Some(l), None)) => {
            let path = [Key("variants"), Index(i), Key("gateway"), Key("naive")];
            layers.push(resolve_layer(&l, "gateway", true, text, &path)?);
            let gw = (layers.len() - 1) as u8;
            for stack in stacks {
                stack.push(gw);
            }
            Ok(None)
        }
        Some((None, Some(cfg))) => Ok(Some(Box::new(resolve_levee(*cfg, i, text, names)?))),
        Some(_) => {
            let path = [Key("variants"), Index(i), Key("gateway")];
            Err(SimError::at(
                locate(text, &path),
                format!(
                    "variant `{variant}`: `gateway` takes exactly one of `naive:` (a retry layer) or `levee:` (a Levee config block); leave it out to call the provider directly"
                ),
            ))
        }
    }
}

/// One retry layer at `path`, named `default_name` unless it names itself;
/// `gateway` when it is a naive gateway.
fn resolve_layer(
    l: &RawLayer,
    default_name: &str,
    gateway: bool,
    text: &str,
    path: &[Seg<'_>],
) -> Result<Layer, SimError> {
    use Seg::*;
    let name = l.name.clone().unwrap_or_else(|| default_name.to_string());
    let at = |key: Option<&'static str>, msg: String| {
        let mut p = path.to_vec();
        if let Some(k) = key {
            p.push(Key(k));
        }
        SimError::at(locate(text, &p), format!("layer `{name}`: {msg}"))
    };
    if !(1..=100).contains(&l.attempts) {
        return Err(at(
            Some("attempts"),
            "`attempts` counts the first try too: 1 to 100".into(),
        ));
    }
    let backoff = match &l.backoff {
        None => Backoff::exponential(500, 2.0, 8000, Jitter::Full),
        Some(b) => {
            let jitter: Jitter = b.jitter.as_deref().unwrap_or("none").parse().map_err(
                |e: levee_policy::backoff::BackoffError| at(Some("backoff"), e.to_string()),
            )?;
            match &b.schedule_ms {
                Some(s) => Backoff::schedule(s, jitter),
                None => {
                    let base = b.base_ms.unwrap_or(500);
                    Backoff::exponential(
                        base,
                        b.multiplier.unwrap_or(2.0),
                        b.max_ms.unwrap_or(60_000.max(base)),
                        jitter,
                    )
                }
            }
        }
    }
    .map_err(|e| at(Some("backoff"), e.to_string()))?;
    let retry = match &l.retry_on {
        None => RetryRule::sdk_default(),
        Some(on) => RetryRule::parse(on).map_err(|m| at(Some("retry_on"), m))?,
    };
    if l.workers == Some(0) {
        return Err(at(Some("workers"), "`workers` must be at least 1".into()));
    }
    if l.timeout.is_some_and(|t| t.0.is_zero()) {
        return Err(at(Some("timeout"), "`timeout` must be positive".into()));
    }
    Ok(Layer {
        name,
        attempts: l.attempts,
        backoff,
        timeout: l.timeout.map(|d| d.0),
        retry,
        honours_should_retry: l.honours_should_retry.unwrap_or(false),
        honours_retry_after: l.honours_retry_after.unwrap_or(false),
        workers: l.workers,
        stops_when_caller_leaves: l.stops_when_caller_leaves.unwrap_or(false),
        sends_timeout: l.sends_timeout.unwrap_or(true),
        marks_retries: l.marks_retries.unwrap_or(false),
        gateway,
    })
}

/// Resolves a variant's `gateway: { levee: … }` block through `levee-config`.
/// Validation errors carry the scenario file's lines (the parser locates them).
fn resolve_levee(
    raw: RawConfig,
    variant: usize,
    text: &str,
    sim_names: &[&String],
) -> Result<LeveeGateway, SimError> {
    use Seg::*;
    let path = [
        Key("variants"),
        Index(variant),
        Key("gateway"),
        Key("levee"),
    ];
    let key_line = locate(text, &path);
    let config = Config::from_raw_in(raw, text, &path).map_err(|e| match e {
        ConfigError::AtLine { line, message } => SimError::AtLine {
            line,
            message: format!("levee config: {message}"),
        },
        other => SimError::at(key_line, format!("levee {other}")),
    })?;
    let mut sim_provider = Vec::new();
    for p in &config.providers {
        let i = if sim_names.len() == 1 {
            0
        } else {
            sim_names
                .iter()
                .position(|n| n.as_str() == p.name)
                .ok_or_else(|| {
                    SimError::at(
                        key_line,
                        format!(
                            "levee provider `{}` has no simulated provider of the same name (known: {})",
                            p.name,
                            join(sim_names)
                        ),
                    )
                })?
        };
        sim_provider.push(i);
    }
    Ok(LeveeGateway {
        config,
        sim_provider,
    })
}
