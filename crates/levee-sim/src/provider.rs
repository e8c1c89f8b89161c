//! The provider model: what the requests are sent to.
//!
//! A bounded pool of workers with a FIFO queue in front, a service-time
//! distribution, an organisation allowance (requests, and tokens as the
//! providers meter them: each a bucket refilled continuously over the
//! minute, spent by every request it admits, refused ones not; a request's
//! tokens reserved as it arrives — its input and `max_tokens` — a total
//! meter keeping them as OpenAI's does, input and output meters settled
//! from its answer's usage as Anthropic's are; what is left reported on every answer, as the
//! providers' `x-ratelimit-remaining-*` fields do), scripted fault windows, and overload:
//! when every worker is busy and the queue is full, a request is refused at
//! once with 503/529. A request whose sender gave up stays in the queue and is
//! served anyway — the provider cannot know nobody is listening — which is the
//! wasted work that keeps a retry storm going after its trigger is gone
//! ("every term feeds the term that caused it").

use crate::arrivals::Tokens;
use crate::dist::Dist;
use levee_policy::allowance::{Meter, Reported};
use rand::Rng;
use std::collections::VecDeque;
use std::time::Duration;

/// An organisation allowance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: f64,
}

/// An organisation's token meters, per minute (`None`: not metered): a
/// total (OpenAI's TPM), or input and output apart (Anthropic's ITPM and
/// OTPM). Each bucket holds a minute's worth.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TokenLimits {
    pub tokens_per_minute: Option<f64>,
    pub input_tokens_per_minute: Option<f64>,
    pub output_tokens_per_minute: Option<f64>,
}

impl TokenLimits {
    /// Each metered token meter and its limit per minute.
    fn meters(&self) -> impl Iterator<Item = (usize, Meter, f64)> + '_ {
        [
            (Meter::Tokens, self.tokens_per_minute),
            (Meter::InputTokens, self.input_tokens_per_minute),
            (Meter::OutputTokens, self.output_tokens_per_minute),
        ]
        .into_iter()
        .enumerate()
        .filter_map(|(i, (m, l))| Some((i, m, l?)))
    }
}

/// What a request reserves of token meter `i` (total, input, output).
fn reserve(i: usize, t: Tokens) -> f64 {
    match i {
        0 => f64::from(t.input) + f64::from(t.max),
        1 => f64::from(t.input),
        _ => f64::from(t.max),
    }
}

/// What an answer used of token meter `i`.
fn used(i: usize, t: Tokens) -> f64 {
    match i {
        0 => f64::from(t.input) + f64::from(t.output),
        1 => f64::from(t.input),
        _ => f64::from(t.output),
    }
}

/// A scripted fault window.
#[derive(Clone, Debug)]
pub struct Fault {
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub from: Duration,
    /// `None`: never ends.
    pub to: Option<Duration>,
    /// Share of matching requests that get it.
    pub rate: f64,
    /// Only requests for this model (or a model ending in `/` + it).
    pub model: Option<String>,
    /// How long the error takes to come back.
    pub latency: Dist,
    /// The error is produced by a worker (a browned-out provider still spends
    /// capacity on the requests it fails); otherwise it bypasses the pool.
    pub occupies_worker: bool,
}

impl Fault {
    fn applies(&self, t: Duration, model: &str) -> bool {
        t >= self.from
            && self.to.is_none_or(|to| t < to)
            && self.model.as_deref().is_none_or(|m| {
                model == m
                    || model
                        .strip_suffix(m)
                        .is_some_and(|head| head.ends_with('/'))
            })
    }
}

/// A simulated provider.
#[derive(Clone, Debug)]
pub struct ProviderModel {
    pub name: String,
    /// Requests served at once, each for a draw of `latency`.
    pub workers: u32,
    pub latency: Dist,
    /// Requests that may wait for a worker; beyond, refuse with
    /// `overload_status` (and `overload_retry_after`).
    pub queue: u32,
    pub overload_status: u16,
    pub overload_retry_after: Option<Duration>,
    /// The organisation's allowance (429 beyond it) and the fault windows.
    pub rate_limit: Option<RateLimit>,
    /// Its token meters (429 beyond them).
    pub token_limits: TokenLimits,
    /// Whether every answer reports what is left of each meter.
    pub reports_remaining: bool,
    pub faults: Vec<Fault>,
    /// How long a refusal (overload, allowance) takes to come back.
    pub reject_latency: Duration,
}

/// What happens to an arriving request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Refused with 429 over the organisation's allowance after `after`:
    /// nothing of it was spent.
    Limited {
        retry_after: Duration,
        after: Duration,
    },
    /// Answered without a worker after `after`.
    Answer {
        status: u16,
        retry_after: Option<Duration>,
        after: Duration,
    },
    /// A worker took it.
    Serve(Served),
    /// Waiting for a worker.
    Queued,
}

/// A request a worker has started on: how long it takes and how it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    pub after: Duration,
    pub status: u16,
    pub retry_after: Option<Duration>,
}

/// A provider's runtime state; `T` names a queued request.
#[derive(Debug)]
pub struct ProviderRt<T> {
    busy: u32,
    queue: VecDeque<T>,
    tokens: f64,
    refilled_ns: u64,
    /// The token meters' levels (total, input, output), as of `refilled_ns`.
    token_levels: [f64; 3],
    /// Most requests ever waiting at once.
    pub peak_queue: usize,
}

impl<T> ProviderRt<T> {
    pub fn new(m: &ProviderModel) -> Self {
        ProviderRt {
            busy: 0,
            queue: VecDeque::new(),
            tokens: m.rate_limit.map(|r| r.burst).unwrap_or(0.0),
            refilled_ns: 0,
            token_levels: [
                m.token_limits.tokens_per_minute.unwrap_or(0.0),
                m.token_limits.input_tokens_per_minute.unwrap_or(0.0),
                m.token_limits.output_tokens_per_minute.unwrap_or(0.0),
            ],
            peak_queue: 0,
        }
    }

    /// Refills every meter up to `now_ns`.
    fn refill(&mut self, m: &ProviderModel, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.refilled_ns) as f64 / 1e9;
        if let Some(rl) = m.rate_limit {
            self.tokens = (self.tokens + dt * rl.per_second).min(rl.burst);
        }
        for (i, _, per_minute) in m.token_limits.meters() {
            self.token_levels[i] = (self.token_levels[i] + dt * per_minute / 60.0).min(per_minute);
        }
        self.refilled_ns = self.refilled_ns.max(now_ns);
    }

    /// A request for `model` with `tokens` arrives at `now` (nanoseconds
    /// since the start).
    pub fn arrive<R: Rng + ?Sized>(
        &mut self,
        m: &ProviderModel,
        now_ns: u64,
        model: &str,
        tokens: Tokens,
        item: T,
        rng: &mut R,
    ) -> Admission {
        self.refill(m, now_ns);
        // The longest wait of any meter short of what the request needs
        // (a need larger than a whole bucket waits for a full one).
        let mut short: Option<f64> = None;
        if let Some(rl) = m.rate_limit {
            if self.tokens < 1.0 {
                short = Some((1.0 - self.tokens) / rl.per_second);
            }
        }
        for (i, _, per_minute) in m.token_limits.meters() {
            let need = reserve(i, tokens).min(per_minute);
            if self.token_levels[i] < need {
                let wait = (need - self.token_levels[i]) / (per_minute / 60.0);
                short = Some(short.map_or(wait, |s| s.max(wait)));
            }
        }
        if let Some(wait) = short {
            // Providers answer whole seconds.
            let wait = wait.ceil().max(1.0);
            return Admission::Limited {
                retry_after: Duration::from_secs_f64(wait),
                after: m.reject_latency,
            };
        }
        if m.rate_limit.is_some() {
            self.tokens -= 1.0;
        }
        for (i, _, _) in m.token_limits.meters() {
            self.token_levels[i] -= reserve(i, tokens);
        }
        let t = Duration::from_nanos(now_ns);
        if let Some(f) = hit(m, t, model, false, rng) {
            return Admission::Answer {
                status: f.status,
                retry_after: f.retry_after,
                after: f.latency.sample(rng),
            };
        }
        if self.busy < m.workers {
            self.busy += 1;
            Admission::Serve(serve(m, now_ns, model, rng))
        } else if self.queue.len() < m.queue as usize {
            self.queue.push_back(item);
            self.peak_queue = self.peak_queue.max(self.queue.len());
            Admission::Queued
        } else {
            Admission::Answer {
                status: m.overload_status,
                retry_after: m.overload_retry_after,
                after: m.reject_latency,
            }
        }
    }

    /// The answer to a request that reserved `tokens` is sent at `now_ns`.
    /// A total meter keeps what was reserved (OpenAI's tokens per minute
    /// count `max_tokens` and give nothing back); input and output meters
    /// are settled from a 2xx's usage, and get everything back from any
    /// other answer (nothing was generated), as Anthropic's are.
    pub fn settle(&mut self, m: &ProviderModel, now_ns: u64, tokens: Tokens, success: bool) {
        self.refill(m, now_ns);
        for (i, _, per_minute) in m.token_limits.meters().filter(|&(i, ..)| i > 0) {
            let spent = if success { used(i, tokens) } else { 0.0 };
            let back = reserve(i, tokens) - spent;
            self.token_levels[i] = (self.token_levels[i] + back).min(per_minute);
        }
    }

    /// What an answer sent at `now_ns` reports left of each meter (none
    /// when the provider does not report, or meters nothing).
    pub fn remaining(&mut self, m: &ProviderModel, now_ns: u64) -> [Option<(Meter, Reported)>; 4] {
        let mut out = [None; 4];
        if !m.reports_remaining {
            return out;
        }
        self.refill(m, now_ns);
        let left = |level: f64| Some(level.max(0.0).floor() as u64);
        if let Some(rl) = m.rate_limit {
            let limit = Some((rl.per_second * 60.0).round() as u64);
            let r = Reported {
                limit,
                remaining: left(self.tokens),
            };
            out[0] = Some((Meter::Requests, r));
        }
        for (i, meter, per_minute) in m.token_limits.meters() {
            let r = Reported {
                limit: Some(per_minute.round() as u64),
                remaining: left(self.token_levels[i]),
            };
            out[i + 1] = Some((meter, r));
        }
        out
    }

    /// A worker finished; the next queued request (if any) takes it (start
    /// it with [`serve`]).
    pub fn finish(&mut self) -> Option<T> {
        match self.queue.pop_front() {
            Some(item) => Some(item),
            None => {
                self.busy = self.busy.saturating_sub(1);
                None
            }
        }
    }
}

fn hit<'m, R: Rng + ?Sized>(
    m: &'m ProviderModel,
    t: Duration,
    model: &str,
    in_pool: bool,
    rng: &mut R,
) -> Option<&'m Fault> {
    m.faults.iter().find(|f| {
        f.occupies_worker == in_pool
            && f.applies(t, model)
            && (f.rate >= 1.0 || rng.gen::<f64>() < f.rate)
    })
}

/// A worker starts on a request for `model` at `now_ns`: a fault window that
/// occupies workers decides its answer now, else it succeeds.
pub fn serve<R: Rng + ?Sized>(m: &ProviderModel, now_ns: u64, model: &str, rng: &mut R) -> Served {
    match hit(m, Duration::from_nanos(now_ns), model, true, rng) {
        Some(f) => Served {
            after: f.latency.sample(rng),
            status: f.status,
            retry_after: f.retry_after,
        },
        None => Served {
            after: m.latency.sample(rng),
            status: 200,
            retry_after: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn model() -> ProviderModel {
        ProviderModel {
            name: "p".into(),
            workers: 2,
            queue: 1,
            latency: Dist::fixed(Duration::from_secs(1)),
            overload_status: 529,
            overload_retry_after: None,
            reject_latency: Duration::from_millis(5),
            rate_limit: None,
            token_limits: TokenLimits::default(),
            reports_remaining: true,
            faults: vec![Fault {
                status: 400,
                retry_after: None,
                from: Duration::ZERO,
                to: None,
                rate: 1.0,
                model: Some("broken".into()),
                latency: Dist::fixed(Duration::from_millis(210)),
                occupies_worker: false,
            }],
        }
    }

    #[test]
    fn beyond_workers_and_queue_it_refuses_at_once() {
        let m = model();
        let mut p = ProviderRt::new(&m);
        let mut rng = SmallRng::seed_from_u64(1);
        let a: Vec<Admission> = (0..4)
            .map(|i| p.arrive(&m, 0, "ok", Tokens::default(), i, &mut rng))
            .collect();
        assert!(matches!(a[0], Admission::Serve(_)));
        assert!(matches!(a[1], Admission::Serve(_)));
        assert_eq!(a[2], Admission::Queued);
        assert!(matches!(a[3], Admission::Answer { status: 529, .. }));
        // The queued one is served by the first worker to finish, abandoned or not.
        assert_eq!(p.finish(), Some(2));
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn a_model_fault_hits_only_that_model() {
        let m = model();
        let mut p = ProviderRt::new(&m);
        let mut rng = SmallRng::seed_from_u64(1);
        assert!(matches!(
            p.arrive(&m, 0, "svc/broken", Tokens::default(), 0, &mut rng),
            Admission::Answer { status: 400, .. }
        ));
        assert!(matches!(
            p.arrive(&m, 0, "notbroken", Tokens::default(), 1, &mut rng),
            Admission::Serve(_)
        ));
    }

    #[test]
    fn the_allowance_refuses_with_429_and_a_whole_second_wait() {
        let mut m = model();
        m.rate_limit = Some(RateLimit {
            per_second: 2.0,
            burst: 2.0,
        });
        m.workers = 100;
        let mut p = ProviderRt::new(&m);
        let mut rng = SmallRng::seed_from_u64(1);
        let statuses: Vec<Admission> = (0..3)
            .map(|i| p.arrive(&m, 0, "ok", Tokens::default(), i, &mut rng))
            .collect();
        assert!(matches!(statuses[1], Admission::Serve(_)));
        assert_eq!(
            statuses[2],
            Admission::Limited {
                retry_after: Duration::from_secs(1),
                after: Duration::from_millis(5)
            }
        );
        // Half a second later one token has come back.
        assert!(matches!(
            p.arrive(&m, 500_000_000, "ok", Tokens::default(), 9, &mut rng),
            Admission::Serve(_)
        ));
    }

    #[test]
    fn tokens_are_reserved_on_arrival_settled_by_usage_and_reported() {
        let mut m = model();
        m.workers = 100;
        m.token_limits.tokens_per_minute = Some(6_000.0);
        m.token_limits.output_tokens_per_minute = Some(4_000.0);
        let mut p = ProviderRt::new(&m);
        let mut rng = SmallRng::seed_from_u64(1);
        let t = Tokens {
            input: 1_000,
            max: 2_000,
            output: 500,
        };
        assert!(matches!(
            p.arrive(&m, 0, "ok", t, 0, &mut rng),
            Admission::Serve(_)
        ));
        assert!(matches!(
            p.arrive(&m, 0, "ok", t, 1, &mut rng),
            Admission::Serve(_)
        ));
        // 6,000 reserved: the third waits 30 s (3,000 at 100 a second).
        assert_eq!(
            p.arrive(&m, 0, "ok", t, 2, &mut rng),
            Admission::Limited {
                retry_after: Duration::from_secs(30),
                after: Duration::from_millis(5)
            }
        );
        // The total meter keeps both estimates; the output meter keeps the
        // 500 one answer used, and all of an error's comes back.
        p.settle(&m, 0, t, true);
        p.settle(&m, 0, t, false);
        let reported = p.remaining(&m, 0);
        assert_eq!(reported[0], None, "requests are not metered");
        let left =
            |r: [Option<(Meter, Reported)>; 4], i: usize| r[i].and_then(|(_, r)| r.remaining);
        assert_eq!(left(reported, 1), Some(0));
        assert_eq!(
            reported[3],
            Some((
                Meter::OutputTokens,
                Reported {
                    limit: Some(4_000),
                    remaining: Some(3_500)
                }
            ))
        );
        // It refills continuously: 100 a second.
        assert_eq!(left(p.remaining(&m, 1_000_000_000), 1), Some(100));
        m.reports_remaining = false;
        assert_eq!(p.remaining(&m, 0), [None; 4]);
    }
}
