//! An arrival stream, checked: how its requests arrive (a rate, a trace, or
//! a burst; evenly or as a Poisson process), when, what they ask for and
//! which provider serves them.

use super::raw::RawStream;
use crate::arrivals::{read_trace, Process, Shape, Stream, Tokens};
use crate::error::SimError;
use levee_config::locate::{locate, Seg};
use std::path::Path;
use std::time::Duration;

/// One stream of `arrivals:` (the `i`th), served by provider `provider`;
/// its trace, if any, is read relative to `base`.
pub(super) fn resolve_stream(
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
    let shape = arrival_shape(s, base, &at)?;
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

/// The stream's shape from exactly one of `rate`, `per_minute`, `trace`
/// and `burst`; `at` turns a message into the stream's error.
fn arrival_shape(
    s: &RawStream,
    base: Option<&Path>,
    at: &impl Fn(String) -> SimError,
) -> Result<Shape, SimError> {
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
    Ok(if let Some(r) = s.rate {
        Shape::Rate(vec![(Duration::ZERO, check_rate(r)?)])
    } else if let Some(m) = s.per_minute {
        Shape::Rate(vec![(Duration::ZERO, check_rate(m / 60.0)?)])
    } else if let Some(t) = &s.trace {
        let path = match base {
            Some(b) => b.join(t),
            None => Path::new(t).to_path_buf(),
        };
        Shape::Rate(read_trace(&path)?)
    } else {
        let count = s.burst.unwrap_or(0);
        if count > 10_000_000 {
            return Err(at("`burst` is at most 10,000,000 requests".into()));
        }
        Shape::Burst {
            count,
            at: s.at.map(|d| d.0).unwrap_or(Duration::ZERO),
        }
    })
}
