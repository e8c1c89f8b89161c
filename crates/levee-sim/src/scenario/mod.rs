//! The scenario file: what the user writes (serde, unknown keys refused) and
//! the typed, validated [`Scenario`] the engine runs.
//!
//! A scenario describes the world once — traffic, the provider — and then a
//! list of variants, each a different stack of retry layers in front of that
//! same world, so their results can be compared side by side. A variant's
//! gateway is either a naive retry layer or a Levee config block (`providers:`
//! and `routes:` exactly as in `levee.yaml`), resolved by `levee-config`, so
//! the simulated gateway runs the policy a real config would.
//!
//! Stage one, the file as written, is [`raw`]; stage two checks it here and
//! in one module per part: [`providers`], [`streams`] and [`variants`].

mod providers;
mod raw;
mod streams;
mod variants;

use crate::arrivals::Stream;
use crate::error::SimError;
use crate::layers::Layer;
use crate::provider::ProviderModel;
use levee_config::locate::{locate, Seg};
use levee_config::Config;
use providers::resolve_provider;
use raw::RawScenario;
use std::path::Path;
use std::time::Duration;
use streams::resolve_stream;
use variants::resolve_variant;

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
    /// What each stream's answer costs (US dollars): its tokens at the
    /// scenario's `price`.
    pub answer_usd: Vec<f64>,
}

/// The price a scenario bills at when it names none: gpt-4.1's list
/// price, US dollars per million input and output tokens.
pub const DEFAULT_PRICE: (f64, f64) = (2.00, 8.00);

/// The tokens an answer is billed for when its stream gives none: a chat
/// turn of 1,000 input and 500 output tokens ($0.006 at the default price).
pub const DEFAULT_ANSWER_TOKENS: (u32, u32) = (1000, 500);

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
    let answer_usd = answer_prices(raw.price.as_ref(), &streams, text)?;
    Ok(Scenario {
        answer_usd,
        name: raw.name.unwrap_or_else(|| "scenario".to_string()),
        duration,
        resolution,
        drain,
        streams,
        providers,
        variants,
    })
}

/// What each stream's answer costs: its tokens (else
/// [`DEFAULT_ANSWER_TOKENS`]) at `price` (else [`DEFAULT_PRICE`]).
fn answer_prices(
    price: Option<&raw::RawAnswerPrice>,
    streams: &[Stream],
    text: &str,
) -> Result<Vec<f64>, SimError> {
    let price = match price {
        None => DEFAULT_PRICE,
        Some(p)
            if [p.input_per_mtok, p.output_per_mtok]
                .iter()
                .all(|x| x.is_finite() && *x >= 0.0) =>
        {
            (p.input_per_mtok, p.output_per_mtok)
        }
        Some(_) => {
            return Err(SimError::at(
                locate(text, &[Seg::Key("price")]),
                "`price` takes US dollars per million tokens, 0 or more: `{ input_per_mtok: 2.00, output_per_mtok: 8.00 }`".to_string(),
            ))
        }
    };
    Ok(streams
        .iter()
        .map(|s| {
            let t = s.tokens;
            let (input, output) = if t.input == 0 && t.output == 0 {
                DEFAULT_ANSWER_TOKENS
            } else {
                (t.input, t.output)
            };
            (f64::from(input) * price.0 + f64::from(output) * price.1) / 1e6
        })
        .collect())
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

fn join(names: &[&String]) -> String {
    names
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
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
