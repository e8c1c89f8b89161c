//! Fault injection: the validated fault set and the per-request decision
//! (which effect applies, how long to wait). Parsing the document lives in
//! `parse`.

mod parse;

use std::sync::Mutex;
use std::time::Duration;

use http::StatusCode;
use rand::rngs::SmallRng;
use rand::Rng;
use rand_distr::LogNormal;

pub use parse::{parse_faults, FaultError};

use crate::ratelimit::RateLimit;

/// A validated fault document: the faults in order plus an optional capacity
/// limit and optional rate limits. Build one with [`parse_faults`];
/// `FaultSet::default()` has no faults.
#[derive(Debug, Clone, Default)]
pub struct FaultSet {
    faults: Vec<Fault>,
    capacity: Option<Capacity>,
    rate_limit: Option<RateLimit>,
    /// The only models served (`models:`); a request for another is 404
    /// `model_not_found`, as the real APIs answer. `None`: any model.
    models: Option<Vec<String>>,
}

impl FaultSet {
    /// Number of faults (the capacity limit is not counted).
    pub fn len(&self) -> usize {
        self.faults.len()
    }

    /// True when there are no faults, no capacity limit and no rate limits.
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty() && self.capacity.is_none() && self.rate_limit.is_none()
    }

    /// The rate limits (`rate_limit:`), if any: requests, tokens, input
    /// tokens and output tokens per minute, `None` for a limit not given.
    pub fn rate_limits(&self) -> Option<[Option<u64>; 4]> {
        self.rate_limit.map(|r| {
            [
                r.requests_per_minute,
                r.tokens_per_minute,
                r.input_tokens_per_minute,
                r.output_tokens_per_minute,
            ]
        })
    }

    pub(crate) fn rate_limit(&self) -> Option<RateLimit> {
        self.rate_limit
    }

    /// The models served, when the set names them (`models:`).
    pub fn served_models(&self) -> Option<&[String]> {
        self.models.as_deref()
    }

    /// The set serving only `models` (`--models`), unless it names its own.
    pub fn serving(mut self, models: Option<Vec<String>>) -> Self {
        if self.models.is_none() {
            self.models = models;
        }
        self
    }

    /// The capacity limit, if any: `(max_in_flight, status)`.
    pub fn capacity_limit(&self) -> Option<(u64, u16)> {
        self.capacity
            .as_ref()
            .map(|c| (c.max_in_flight, c.error.status.as_u16()))
    }

    pub(crate) fn capacity(&self) -> Option<&Capacity> {
        self.capacity.as_ref()
    }

    pub(crate) fn has_faults(&self) -> bool {
        !self.faults.is_empty()
    }

    /// Whether any fault is a `blackhole`.
    pub(crate) fn has_blackhole(&self) -> bool {
        self.faults
            .iter()
            .any(|f| matches!(f.effect, Effect::Blackhole(_)))
    }

    /// Whether a `blackhole` or `syn_blackhole` fault holds at `elapsed`:
    /// which, and until when (`None` for an open end).
    pub(crate) fn blackholed(&self, elapsed: Duration) -> Option<(Hole, Option<Duration>)> {
        self.faults.iter().find_map(|f| match f.effect {
            Effect::Blackhole(hole)
                if f.from.is_none_or(|from| elapsed >= from)
                    && f.to.is_none_or(|to| elapsed < to) =>
            {
                Some((hole, f.to))
            }
            _ => None,
        })
    }

    /// Decides what happens to one request. `elapsed` is the time since the
    /// fault clock started; `rng` is only locked when a probability or a
    /// latency distribution needs a draw, so a seeded run is reproducible for
    /// a given request order.
    pub(crate) fn decide(
        &self,
        elapsed: Duration,
        model: Option<&str>,
        streaming: bool,
        rng: &Mutex<SmallRng>,
    ) -> Decision {
        let mut decision = Decision::default();
        let mut delay_found = false;
        for fault in &self.faults {
            let is_delay = matches!(fault.effect, Effect::Delay { .. });
            if (is_delay && delay_found) || (!is_delay && decision.outcome != Outcome::Normal) {
                continue;
            }
            if !fault.applies(elapsed, model, streaming, rng) {
                continue;
            }
            match &fault.effect {
                Effect::Delay {
                    latency,
                    chunk_delay,
                } => {
                    delay_found = true;
                    if let Some(latency) = latency {
                        decision.delay = latency.sample(rng);
                    }
                    decision.chunk_delay = *chunk_delay;
                }
                Effect::Status(spec) => decision.outcome = Outcome::Status(*spec),
                Effect::Reset => decision.outcome = Outcome::Reset,
                Effect::Stall | Effect::Blackhole(_) => decision.outcome = Outcome::Stall,
                Effect::CutStreamAfter(n) => decision.outcome = Outcome::CutStreamAfter(*n),
            }
            if delay_found && decision.outcome != Outcome::Normal {
                break;
            }
        }
        decision
    }
}

/// What the faults decided for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Decision {
    pub outcome: Outcome,
    /// Wait before the answer (time to first byte).
    pub delay: Duration,
    /// Wait between stream chunks.
    pub chunk_delay: Option<Duration>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) enum Outcome {
    #[default]
    Normal,
    Status(ErrorSpec),
    Reset,
    Stall,
    CutStreamAfter(u32),
}

/// An error answer: status plus optional retry hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ErrorSpec {
    pub status: StatusCode,
    pub retry_after: Option<u64>,
    pub retry_after_ms: Option<u64>,
}

#[derive(Debug, Clone)]
pub(crate) struct Capacity {
    pub max_in_flight: u64,
    pub error: ErrorSpec,
}

#[derive(Debug, Clone)]
struct Fault {
    from: Option<Duration>,
    to: Option<Duration>,
    probability: Option<f64>,
    model: Option<ModelMatch>,
    effect: Effect,
}

impl Fault {
    fn applies(
        &self,
        elapsed: Duration,
        model: Option<&str>,
        streaming: bool,
        rng: &Mutex<SmallRng>,
    ) -> bool {
        if self.from.is_some_and(|from| elapsed < from) || self.to.is_some_and(|to| elapsed >= to) {
            return false;
        }
        if let Some(want) = &self.model {
            if !model.is_some_and(|m| want.matches(m)) {
                return false;
            }
        }
        if matches!(self.effect, Effect::CutStreamAfter(_)) && !streaming {
            return false;
        }
        match self.probability {
            None => true,
            Some(p) if p >= 1.0 => true,
            Some(p) if p <= 0.0 => false,
            Some(p) => lock(rng).gen_bool(p),
        }
    }
}

fn lock(rng: &Mutex<SmallRng>) -> std::sync::MutexGuard<'_, SmallRng> {
    // A panic while holding the RNG cannot leave it inconsistent; keep going.
    rng.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Clone)]
enum ModelMatch {
    Exact(String),
    Prefix(String),
}

impl ModelMatch {
    fn new(pattern: &str) -> Self {
        match pattern.strip_suffix('*') {
            Some(prefix) => ModelMatch::Prefix(prefix.to_owned()),
            None => ModelMatch::Exact(pattern.to_owned()),
        }
    }

    fn matches(&self, model: &str) -> bool {
        match self {
            ModelMatch::Exact(m) => m == model,
            ModelMatch::Prefix(p) => model.starts_with(p.as_str()),
        }
    }
}

/// How a host off the network refuses new connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hole {
    /// The handshake completes (the kernel accepts), and the connection is
    /// held unread: the request is sent into a void (`blackhole`).
    Held,
    /// The handshake never completes: the kernel drops every SYN, and a
    /// client's connect waits out its own timeout (`syn_blackhole`).
    Syn,
}

#[derive(Debug, Clone)]
enum Effect {
    Status(ErrorSpec),
    Reset,
    Stall,
    /// The host is off the network: no connection gets through (how, the
    /// [`Hole`] says), and a request on one already open is never answered.
    Blackhole(Hole),
    CutStreamAfter(u32),
    Delay {
        latency: Option<Latency>,
        chunk_delay: Option<Duration>,
    },
}

/// Time to first byte: fixed, or lognormal fitted to a median and a p99.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Latency {
    Fixed(Duration),
    LogNormal { mu: f64, sigma: f64 },
}

/// No sampled delay exceeds this, whatever the tail does.
const MAX_DELAY_SECS: f64 = 3600.0;

impl Latency {
    /// The log-normal with this median and p99 (as the simulator fits
    /// it); `Err` for a median of zero or a p99 below it.
    pub(crate) fn from_quantiles(
        p50: Duration,
        p99: Duration,
    ) -> Result<Self, levee_wire::latency::FitError> {
        let (mu, sigma) = levee_wire::latency::lognormal_fit(p50, p99)?;
        Ok(if sigma == 0.0 {
            Latency::Fixed(p50)
        } else {
            Latency::LogNormal { mu, sigma }
        })
    }

    pub(crate) fn sample(&self, rng: &Mutex<SmallRng>) -> Duration {
        match *self {
            Latency::Fixed(d) => d,
            Latency::LogNormal { mu, sigma } => {
                let secs = match LogNormal::new(mu, sigma) {
                    Ok(d) => lock(rng).sample(d),
                    Err(_) => mu.exp(),
                };
                Duration::from_secs_f64(secs.clamp(0.0, MAX_DELAY_SECS))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> Mutex<SmallRng> {
        Mutex::new(SmallRng::seed_from_u64(7))
    }

    #[test]
    fn first_matching_effect_wins_and_latency_combines() {
        let set = parse_faults(
            "faults:\n\
             \x20 - { latency: 10ms }\n\
             \x20 - { status: 400, model: \"broken-*\" }\n\
             \x20 - { status: 503, from: 10s, to: 20s }\n\
             \x20 - { status: 429 }\n",
        )
        .unwrap();
        let r = rng();
        let d = set.decide(Duration::from_secs(1), Some("broken-model"), false, &r);
        assert_eq!(d.delay, Duration::from_millis(10));
        assert!(matches!(d.outcome, Outcome::Status(s) if s.status == 400));
        let d = set.decide(Duration::from_secs(15), Some("gpt"), false, &r);
        assert!(matches!(d.outcome, Outcome::Status(s) if s.status == 503));
        let d = set.decide(Duration::from_secs(20), None, false, &r);
        assert!(matches!(d.outcome, Outcome::Status(s) if s.status == 429));
    }

    #[test]
    fn cut_stream_only_matches_streams() {
        let set = parse_faults("faults:\n  - { cut_stream_after: 2 }\n").unwrap();
        let r = rng();
        assert_eq!(
            set.decide(Duration::ZERO, None, false, &r).outcome,
            Outcome::Normal
        );
        assert_eq!(
            set.decide(Duration::ZERO, None, true, &r).outcome,
            Outcome::CutStreamAfter(2)
        );
    }

    #[test]
    fn lognormal_latency_fits_its_quantiles() {
        let lat = Latency::from_quantiles(Duration::from_millis(200), Duration::from_millis(900))
            .unwrap();
        let r = rng();
        let mut samples: Vec<f64> = (0..20_000).map(|_| lat.sample(&r).as_secs_f64()).collect();
        samples.sort_by(f64::total_cmp);
        let p50 = samples[10_000];
        let p99 = samples[19_800];
        assert!((0.18..0.22).contains(&p50), "p50 {p50}");
        assert!((0.8..1.0).contains(&p99), "p99 {p99}");
    }

    #[test]
    fn probability_is_reproducible_with_a_seed() {
        let set = parse_faults("faults:\n  - { reset: true, probability: 0.5 }\n").unwrap();
        let run = || {
            let r = rng();
            (0..64)
                .map(|_| set.decide(Duration::ZERO, None, false, &r).outcome == Outcome::Reset)
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let hits = a.iter().filter(|h| **h).count();
        assert!((16..48).contains(&hits), "{hits}");
    }
}
