//! The provider model: what the requests are sent to.
//!
//! A bounded pool of workers with a FIFO queue in front, a service-time
//! distribution, an organisation allowance (token bucket, spent by every
//! request it admits, refused ones not), scripted fault windows, and overload:
//! when every worker is busy and the queue is full, a request is refused at
//! once with 503/529. A request whose sender gave up stays in the queue and is
//! served anyway — the provider cannot know nobody is listening — which is the
//! wasted work that keeps a retry storm going after its trigger is gone
//! ("every term feeds the term that caused it").

use crate::Dist;
use rand::Rng;
use std::collections::VecDeque;
use std::time::Duration;

/// An organisation allowance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: f64,
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
    pub faults: Vec<Fault>,
    /// How long a refusal (overload, allowance) takes to come back.
    pub reject_latency: Duration,
}

/// What happens to an arriving request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
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
            peak_queue: 0,
        }
    }

    /// A request for `model` arrives at `now` (nanoseconds since the start).
    pub fn arrive<R: Rng + ?Sized>(
        &mut self,
        m: &ProviderModel,
        now_ns: u64,
        model: &str,
        item: T,
        rng: &mut R,
    ) -> Admission {
        if let Some(rl) = m.rate_limit {
            let dt = now_ns.saturating_sub(self.refilled_ns) as f64 / 1e9;
            self.tokens = (self.tokens + dt * rl.per_second).min(rl.burst);
            self.refilled_ns = now_ns;
            if self.tokens < 1.0 {
                // Providers answer whole seconds.
                let wait = ((1.0 - self.tokens) / rl.per_second).ceil().max(1.0);
                return Admission::Answer {
                    status: 429,
                    retry_after: Some(Duration::from_secs_f64(wait)),
                    after: m.reject_latency,
                };
            }
            self.tokens -= 1.0;
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
        let a: Vec<Admission> = (0..4).map(|i| p.arrive(&m, 0, "ok", i, &mut rng)).collect();
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
            p.arrive(&m, 0, "svc/broken", 0, &mut rng),
            Admission::Answer { status: 400, .. }
        ));
        assert!(matches!(
            p.arrive(&m, 0, "notbroken", 1, &mut rng),
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
        let statuses: Vec<Admission> = (0..3).map(|i| p.arrive(&m, 0, "ok", i, &mut rng)).collect();
        assert!(matches!(statuses[1], Admission::Serve(_)));
        assert_eq!(
            statuses[2],
            Admission::Answer {
                status: 429,
                retry_after: Some(Duration::from_secs(1)),
                after: Duration::from_millis(5)
            }
        );
        // Half a second later one token has come back.
        assert!(matches!(
            p.arrive(&m, 500_000_000, "ok", 9, &mut rng),
            Admission::Serve(_)
        ));
    }
}
