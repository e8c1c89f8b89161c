//! A provider model, checked: its workers and queue, latency, overload
//! answer, allowance (`rate_limit:`) and fault windows.

use super::raw::{RawDist, RawFault, RawProviderModel, RawRate};
use crate::dist::Dist;
use crate::error::SimError;
use crate::provider::{Fault, ProviderModel, RateLimit, TokenLimits};
use levee_config::locate::{locate, Seg};
use std::time::Duration;

/// A latency distribution: a fixed duration, or its quantiles and bounds.
/// `Err` is the message.
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

/// The provider model `name` of `providers:`.
pub(super) fn resolve_provider(
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
