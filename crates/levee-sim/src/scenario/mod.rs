//! The scenario file: what the user writes (serde, unknown keys refused) and
//! the typed, validated [`Scenario`] the engine runs.
//!
//! A scenario describes the world once — traffic, the provider — and then a
//! list of variants, each a different stack of retry layers in front of that
//! same world, so their results can be compared side by side. A variant's
//! gateway is either a naive retry layer or a Levee config block (`providers:`
//! and `routes:` exactly as in `levee.yaml`), resolved by `levee-config`, so
//! the simulated gateway runs the policy a real config would.

use crate::arrivals::{Process, Shape, Stream, Tokens};
use crate::dist::Dist;
use crate::error::SimError;
use crate::layers::{Layer, RetryRule};
use crate::provider::{Fault, ProviderModel, RateLimit, TokenLimits};
use levee_config::duration::Dur;
use levee_config::locate::{locate, Seg};
use levee_config::raw::{RawBackoff, RawConfig, RawOn};
use levee_config::{Config, ConfigError};
use levee_policy::backoff::{Backoff, Jitter};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

// ---------------------------------------------------------------- raw (stage one)

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    #[allow(dead_code)]
    description: Option<String>,
    duration: Dur,
    resolution: Option<Dur>,
    drain: Option<Dur>,
    arrivals: Vec<RawStream>,
    providers: BTreeMap<String, RawProviderModel>,
    variants: Vec<RawVariant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStream {
    name: String,
    rate: Option<f64>,
    per_minute: Option<f64>,
    trace: Option<String>,
    burst: Option<u64>,
    at: Option<Dur>,
    process: Option<String>,
    from: Option<Dur>,
    to: Option<Dur>,
    model: Option<String>,
    path: Option<String>,
    provider: Option<String>,
    caller: Option<String>,
    input_tokens: Option<u32>,
    max_tokens: Option<u32>,
    output_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawDist {
    Fixed(Dur),
    Shape(RawDistShape),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDistShape {
    p50: Option<Dur>,
    p99: Option<Dur>,
    min: Option<Dur>,
    max: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProviderModel {
    workers: u32,
    queue: Option<u32>,
    latency: RawDist,
    overload: Option<RawOverload>,
    reject_latency: Option<Dur>,
    rate_limit: Option<RawRate>,
    reports_remaining: Option<bool>,
    #[serde(default)]
    faults: Vec<RawFault>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverload {
    status: u16,
    retry_after: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRate {
    requests_per_minute: Option<u32>,
    burst: Option<u32>,
    tokens_per_minute: Option<u64>,
    input_tokens_per_minute: Option<u64>,
    output_tokens_per_minute: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFault {
    status: u16,
    retry_after: Option<Dur>,
    from: Option<Dur>,
    to: Option<Dur>,
    rate: Option<f64>,
    model: Option<String>,
    latency: Option<RawDist>,
    occupies_worker: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVariant {
    name: String,
    #[serde(default)]
    callers: Vec<RawLayer>,
    /// Per stream name: its own caller layers, in place of `callers:`.
    #[serde(default)]
    stacks: BTreeMap<String, Vec<RawLayer>>,
    gateway: Option<RawGateway>,
}

/// `naive:` or `levee:` (exactly one).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    naive: Option<RawLayer>,
    levee: Option<Box<RawConfig>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayer {
    name: Option<String>,
    attempts: u32,
    backoff: Option<RawBackoff>,
    timeout: Option<Dur>,
    retry_on: Option<Vec<RawOn>>,
    honours_should_retry: Option<bool>,
    honours_retry_after: Option<bool>,
    workers: Option<u32>,
    stops_when_caller_leaves: Option<bool>,
    sends_timeout: Option<bool>,
    marks_retries: Option<bool>,
}

// ---------------------------------------------------------------- typed (stage two)

/// A validated scenario.
#[derive(Debug)]
pub struct Scenario {
    pub name: String,
    /// How long traffic arrives.
    pub duration: Duration,
    /// Width of one bucket of the time series (peak rps is measured per bucket).
    pub resolution: Duration,
    /// How long after `duration` in-flight work may still finish.
    pub drain: Duration,
    pub streams: Vec<Stream>,
    pub providers: Vec<ProviderModel>,
    pub variants: Vec<Variant>,
}

/// One stack of retry layers in front of the scenario's world.
#[derive(Debug)]
pub struct Variant {
    pub name: String,
    /// Every caller layer of the variant (a naive gateway is the last one).
    pub layers: Vec<Layer>,
    /// Per stream: the layers its requests pass through, outermost first
    /// (indices into `layers`; a naive gateway's is shared by all).
    pub stacks: Vec<Vec<u8>>,
    pub levee: Option<Box<LeveeGateway>>,
}

/// A Levee gateway: a config resolved by `levee-config`, and which simulated
/// provider each config provider stands for.
#[derive(Debug)]
pub struct LeveeGateway {
    pub config: Config,
    /// `config.providers[i]` is simulated by `providers[sim_provider[i]]`.
    pub sim_provider: Vec<usize>,
}

impl Scenario {
    /// Reads and validates a scenario file (traces are read relative to it).
    pub fn load(path: &Path) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Scenario::parse(&text, path.parent())
    }

    /// Parses and validates scenario text; `base` is where traces are looked up.
    pub fn parse(text: &str, base: Option<&Path>) -> Result<Scenario, SimError> {
        let raw: RawScenario = serde_norway::from_str(text).map_err(|e| {
            let msg = e.to_string();
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            SimError::at(e.location().map(|l| l.line()), msg)
        })?;
        resolve(raw, text, base)
    }

    /// The fault windows' span: (first start, last end); `None` without
    /// faults or when one never ends.
    pub fn fault_span(&self) -> Option<(Duration, Duration)> {
        let faults = self.providers.iter().flat_map(|p| p.faults.iter());
        let mut span: Option<(Duration, Duration)> = None;
        for f in faults {
            let to = f.to?;
            span = Some(match span {
                None => (f.from, to),
                Some((a, b)) => (a.min(f.from), b.max(to)),
            });
        }
        span
    }
}

fn resolve(raw: RawScenario, text: &str, base: Option<&Path>) -> Result<Scenario, SimError> {
    use Seg::*;
    let at = |path: &[Seg<'_>], msg: String| SimError::at(locate(text, path), msg);
    let (duration, resolution, drain) = resolve_times(&raw, text)?;
    if raw.providers.is_empty() {
        return Err(at(
            &[Key("providers")],
            "list at least one provider model under `providers:`".into(),
        ));
    }
    let names: Vec<&String> = raw.providers.keys().collect();
    let mut providers = Vec::new();
    for (name, p) in &raw.providers {
        providers.push(resolve_provider(name, p, text)?);
    }
    let find_provider = |n: Option<&str>, path: &[Seg<'_>]| -> Result<usize, SimError> {
        match n {
            Some(n) => names.iter().position(|x| x.as_str() == n).ok_or_else(|| {
                at(
                    path,
                    format!(
                        "`{n}` is not a provider of this scenario (known: {})",
                        join(&names)
                    ),
                )
            }),
            None if names.len() == 1 => Ok(0),
            None => Err(at(
                path,
                format!(
                    "this scenario has several providers: name one with `provider:` (known: {})",
                    join(&names)
                ),
            )),
        }
    };

    if raw.arrivals.is_empty() {
        return Err(at(
            &[Key("arrivals")],
            "list at least one stream under `arrivals:`".into(),
        ));
    }
    let mut streams = Vec::new();
    for (i, s) in raw.arrivals.iter().enumerate() {
        let path = [Key("arrivals"), Index(i)];
        let provider = find_provider(s.provider.as_deref(), &path)?;
        streams.push(resolve_stream(s, i, text, base, duration, provider)?);
    }

    if raw.variants.is_empty() {
        return Err(at(
            &[Key("variants")],
            "list at least one variant under `variants:`".into(),
        ));
    }
    let variants = raw
        .variants
        .into_iter()
        .enumerate()
        .map(|(i, v)| resolve_variant(v, i, text, &names, &streams))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Scenario {
        name: raw.name.unwrap_or_else(|| "scenario".to_string()),
        duration,
        resolution,
        drain,
        streams,
        providers,
        variants,
    })
}

/// `duration`, `resolution` and `drain`, checked against each other.
fn resolve_times(
    raw: &RawScenario,
    text: &str,
) -> Result<(Duration, Duration, Duration), SimError> {
    use Seg::*;
    let at = |key: &str, msg: &str| SimError::at(locate(text, &[Key(key)]), msg.to_string());
    let duration = raw.duration.0;
    if duration.is_zero() || duration > Duration::from_secs(7 * 24 * 3600) {
        return Err(at("duration", "`duration` must be between 1ms and 7 days"));
    }
    let resolution = raw
        .resolution
        .map(|d| d.0)
        .unwrap_or(Duration::from_secs(1));
    if resolution < Duration::from_millis(10) || resolution > duration {
        return Err(at(
            "resolution",
            "`resolution` must be at least 10ms and at most `duration`",
        ));
    }
    let drain = raw.drain.map(|d| d.0).unwrap_or(Duration::from_secs(120));
    if drain > Duration::from_secs(24 * 3600) {
        return Err(at("drain", "`drain` is at most 24h"));
    }
    if (duration + drain).as_nanos() / resolution.as_nanos() > 5_000_000 {
        return Err(at(
            "resolution",
            "`resolution` is too fine for `duration` + `drain`: at most 5,000,000 buckets; use a coarser resolution",
        ));
    }
    Ok((duration, resolution, drain))
}

/// One variant: its callers' retry layers and the gateway in front of the
/// providers (none, a naive retry layer, or Levee).
fn resolve_variant(
    v: RawVariant,
    i: usize,
    text: &str,
    names: &[&String],
    streams: &[Stream],
) -> Result<Variant, SimError> {
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
    if layers.len() > usize::from(u8::MAX) {
        let path = [Key("variants"), Index(i)];
        return Err(SimError::at(
            locate(text, &path),
            format!("variant `{}`: at most 254 caller layers", v.name),
        ));
    }
    let mut levee = None;
    match v.gateway.map(|g| (g.naive, g.levee)) {
        None => {}
        Some((Some(l), None)) => {
            let path = [Key("variants"), Index(i), Key("gateway"), Key("naive")];
            layers.push(resolve_layer(&l, "gateway", true, text, &path)?);
            let gw = (layers.len() - 1) as u8;
            for stack in &mut stacks {
                stack.push(gw);
            }
        }
        Some((None, Some(cfg))) => {
            levee = Some(Box::new(resolve_levee(*cfg, i, text, names)?));
        }
        Some(_) => {
            let path = [Key("variants"), Index(i), Key("gateway")];
            return Err(SimError::at(
                locate(text, &path),
                format!(
                    "variant `{}`: `gateway` takes exactly one of `naive:` (a retry layer) or `levee:` (a Levee config block); leave it out to call the provider directly",
                    v.name
                ),
            ));
        }
    }
    Ok(Variant {
        name: v.name,
        layers,
        stacks,
        levee,
    })
}

fn join(names: &[&String]) -> String {
    names
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn dist(d: &RawDist) -> Result<Dist, String> {
    match d {
        RawDist::Fixed(d) => Ok(Dist::fixed(d.0)),
        RawDist::Shape(s) => Dist::from_keys(
            s.p50.map(|d| d.0),
            s.p99.map(|d| d.0),
            s.min.map(|d| d.0),
            s.max.map(|d| d.0),
        )
        .map_err(|e| e.to_string()),
    }
}

fn resolve_provider(
    name: &str,
    p: &RawProviderModel,
    text: &str,
) -> Result<ProviderModel, SimError> {
    use Seg::*;
    let at = |key: &[Seg<'_>], msg: String| {
        let mut path = vec![Key("providers"), Key(name)];
        path.extend_from_slice(key);
        SimError::at(locate(text, &path), format!("provider `{name}`: {msg}"))
    };
    if p.workers == 0 {
        return Err(at(&[Key("workers")], "`workers` must be at least 1".into()));
    }
    let latency = dist(&p.latency).map_err(|m| at(&[Key("latency")], m))?;
    let overload_status = p.overload.as_ref().map(|o| o.status).unwrap_or(503);
    if !(400..=599).contains(&overload_status) {
        return Err(at(
            &[Key("overload")],
            "`overload.status` must be an error status such as 503 or 529".into(),
        ));
    }
    let (rate_limit, token_limits) = match &p.rate_limit {
        None => (None, TokenLimits::default()),
        Some(r) => rate_limits(r).map_err(|m| at(&[Key("rate_limit")], m.into()))?,
    };
    let faults = p
        .faults
        .iter()
        .enumerate()
        .map(|(i, f)| resolve_fault(f).map_err(|m| at(&[Key("faults"), Index(i)], m)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ProviderModel {
        name: name.to_string(),
        workers: p.workers,
        queue: p.queue.unwrap_or(0),
        latency,
        overload_status,
        overload_retry_after: p.overload.as_ref().and_then(|o| o.retry_after.map(|d| d.0)),
        reject_latency: p
            .reject_latency
            .map(|d| d.0)
            .unwrap_or(Duration::from_millis(5)),
        rate_limit,
        token_limits,
        reports_remaining: p.reports_remaining.unwrap_or(true),
        faults,
    })
}

/// A provider's `rate_limit:`: its request bucket (none without
/// `requests_per_minute`) and its token limits. `Err` is the message.
fn rate_limits(r: &RawRate) -> Result<(Option<RateLimit>, TokenLimits), &'static str> {
    let tokens = [
        r.tokens_per_minute,
        r.input_tokens_per_minute,
        r.output_tokens_per_minute,
    ];
    if r.requests_per_minute == Some(0) || r.burst == Some(0) || tokens.contains(&Some(0)) {
        return Err("every limit of `rate_limit` (and `burst`) must be at least 1");
    }
    if r.burst.is_some() && r.requests_per_minute.is_none() {
        return Err("`burst` is a burst of requests: it needs `requests_per_minute`");
    }
    if r.requests_per_minute.is_none() && tokens.iter().all(Option::is_none) {
        return Err("give `requests_per_minute` or a token limit (`tokens_per_minute`, `input_tokens_per_minute`, `output_tokens_per_minute`)");
    }
    let token_limits = TokenLimits {
        tokens_per_minute: r.tokens_per_minute.map(|n| n as f64),
        input_tokens_per_minute: r.input_tokens_per_minute.map(|n| n as f64),
        output_tokens_per_minute: r.output_tokens_per_minute.map(|n| n as f64),
    };
    let rate_limit = r.requests_per_minute.map(|rpm| RateLimit {
        per_second: f64::from(rpm) / 60.0,
        burst: f64::from(r.burst.unwrap_or((rpm / 60).max(1))),
    });
    Ok((rate_limit, token_limits))
}

/// One of a provider's `faults:`. `Err` is the message.
fn resolve_fault(f: &RawFault) -> Result<Fault, String> {
    // 3xx included: a proxy in front of a provider may answer a redirect.
    if !(300..=599).contains(&f.status) {
        return Err("`status` must be a redirect or an error status (300–599)".into());
    }
    let rate = f.rate.unwrap_or(1.0);
    if !rate.is_finite() || !(0.0..=1.0).contains(&rate) {
        return Err(
            "`rate` is the share of requests that get the fault: a number from 0 to 1".into(),
        );
    }
    let from = f.from.map(|d| d.0).unwrap_or(Duration::ZERO);
    let to = f.to.map(|d| d.0);
    if to.is_some_and(|t| t <= from) {
        return Err("`to` must be after `from`".into());
    }
    let latency = match &f.latency {
        Some(d) => dist(d)?,
        None => Dist::fixed(Duration::from_millis(20)),
    };
    Ok(Fault {
        status: f.status,
        retry_after: f.retry_after.map(|d| d.0),
        from,
        to,
        rate,
        model: f.model.clone(),
        latency,
        occupies_worker: f.occupies_worker.unwrap_or(false),
    })
}

fn resolve_stream(
    s: &RawStream,
    i: usize,
    text: &str,
    base: Option<&Path>,
    duration: Duration,
    provider: usize,
) -> Result<Stream, SimError> {
    use Seg::*;
    let at = |msg: String| {
        SimError::at(
            locate(text, &[Key("arrivals"), Index(i)]),
            format!("stream `{}`: {msg}", s.name),
        )
    };
    let given = [
        s.rate.is_some(),
        s.per_minute.is_some(),
        s.trace.is_some(),
        s.burst.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if given != 1 {
        return Err(at(
            "give exactly one of `rate` (per second), `per_minute`, `trace` (a CSV of `t_seconds,rate`) or `burst` (a count at `at`)".into(),
        ));
    }
    let check_rate = |r: f64| {
        if r.is_finite() && (0.0..=1e6).contains(&r) {
            Ok(r)
        } else {
            Err(at(format!(
                "a rate must be a number from 0 to 1,000,000 per second (got {r})"
            )))
        }
    };
    let shape = if let Some(r) = s.rate {
        Shape::Rate(vec![(Duration::ZERO, check_rate(r)?)])
    } else if let Some(m) = s.per_minute {
        Shape::Rate(vec![(Duration::ZERO, check_rate(m / 60.0)?)])
    } else if let Some(t) = &s.trace {
        let path = match base {
            Some(b) => b.join(t),
            None => Path::new(t).to_path_buf(),
        };
        Shape::Rate(crate::arrivals::read_trace(&path)?)
    } else {
        let count = s.burst.unwrap_or(0);
        if count > 10_000_000 {
            return Err(at("`burst` is at most 10,000,000 requests".into()));
        }
        Shape::Burst {
            count,
            at: s.at.map(|d| d.0).unwrap_or(Duration::ZERO),
        }
    };
    let process = match s.process.as_deref() {
        None | Some("constant") => Process::Constant,
        Some("poisson") => Process::Poisson,
        Some(other) => {
            return Err(at(format!(
                "`process` must be `constant` or `poisson` (got `{other}`)"
            )))
        }
    };
    if let (Some(out), Some(max)) = (s.output_tokens, s.max_tokens) {
        if out > max {
            return Err(at(format!(
                "`output_tokens` ({out}) is what an answer uses of `max_tokens` ({max}): at most that"
            )));
        }
    }
    let from = s.from.map(|d| d.0).unwrap_or(Duration::ZERO);
    let to = s.to.map(|d| d.0).unwrap_or(duration).min(duration);
    if to < from {
        return Err(at("`to` must not be before `from`".into()));
    }
    Ok(Stream {
        name: s.name.clone(),
        shape,
        process,
        from,
        to,
        model: s.model.clone().unwrap_or_else(|| "model".to_string()),
        path: s
            .path
            .clone()
            .unwrap_or_else(|| "/v1/chat/completions".to_string()),
        provider,
        caller: s.caller.clone(),
        tokens: Tokens {
            input: s.input_tokens.unwrap_or(0),
            max: s.max_tokens.unwrap_or(0),
            output: s.output_tokens.unwrap_or(s.max_tokens.unwrap_or(0)),
        },
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "\
duration: 10s
arrivals:
  - { name: chat, rate: 10 }
providers:
  p: { workers: 10, latency: 100ms }
variants:
  - name: direct
";

    #[test]
    fn a_minimal_scenario_loads() {
        let s = Scenario::parse(MINIMAL, None).unwrap();
        assert_eq!(s.variants.len(), 1);
        assert_eq!(s.streams[0].provider, 0);
        assert!(s.fault_span().is_none());
    }

    #[test]
    fn unknown_keys_name_their_line() {
        let bad = MINIMAL.replace("  p: { workers: 10,", "  p: { wrokers: 10,");
        let e = Scenario::parse(&bad, None).unwrap_err().to_string();
        assert!(e.contains("line 5"), "{e}");
        assert!(e.contains("wrokers"), "{e}");
    }

    #[test]
    fn validation_errors_name_their_line() {
        let bad = MINIMAL.replace("rate: 10", "rate: 10, per_minute: 5");
        let e = Scenario::parse(&bad, None).unwrap_err().to_string();
        assert!(e.starts_with("scenario line 3:"), "{e}");
        assert!(e.contains("exactly one of"), "{e}");
    }

    #[test]
    fn levee_config_errors_are_shifted_to_file_lines() {
        let text = format!(
            "{MINIMAL}  - name: levee\n    gateway:\n      levee:\n        routes:\n          - retry:\n              max_attempts: 0\n"
        );
        let e = Scenario::parse(&text, None).unwrap_err().to_string();
        assert!(e.starts_with("scenario line 13:"), "{e}");
        assert!(e.contains("max_attempts"), "{e}");
    }
}
