//! A route's traffic per second over the last [`WINDOW_SECS`]: requests,
//! attempts and answers, summed into what its attempts per request and the
//! success ratio its callers see are computed from.

use super::WINDOW_SECS;
use crate::observe::shard::{this_thread, SHARDS};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// What a request adds to the second it is counted in, and a second's
/// counts.
#[derive(Clone, Copy)]
pub(super) struct Count {
    pub(super) requests: u32,
    pub(super) attempts: u32,
    pub(super) answered: u32,
    pub(super) succeeded: u32,
}

impl Count {
    const ZERO: Count = Count {
        requests: 0,
        attempts: 0,
        answered: 0,
        succeeded: 0,
    };
    /// A request admitted.
    pub(super) const REQUEST: Count = Count {
        requests: 1,
        ..Count::ZERO
    };
    /// An attempt finished.
    pub(super) const ATTEMPT: Count = Count {
        attempts: 1,
        ..Count::ZERO
    };

    /// A request answered, with success or not.
    pub(super) fn answered(success: bool) -> Count {
        Count {
            answered: 1,
            succeeded: u32::from(success),
            ..Count::ZERO
        }
    }

    fn fields(self) -> [u32; 4] {
        [self.requests, self.attempts, self.answered, self.succeeded]
    }

    fn of(f: [u32; 4]) -> Count {
        let [requests, attempts, answered, succeeded] = f;
        Count {
            requests,
            attempts,
            answered,
            succeeded,
        }
    }

    fn add(&mut self, c: Count) {
        self.requests = self.requests.saturating_add(c.requests);
        self.attempts = self.attempts.saturating_add(c.attempts);
        self.answered = self.answered.saturating_add(c.answered);
        self.succeeded = self.succeeded.saturating_add(c.succeeded);
    }
}

/// One second of a route's traffic.
#[derive(Clone, Copy)]
pub(super) struct Second {
    /// Which second since the clock's origin; `u64::MAX` before any.
    sec: u64,
    pub(super) count: Count,
}

impl Second {
    const EMPTY: Second = Second {
        sec: u64::MAX,
        count: Count::ZERO,
    };
}

/// A route's traffic over the last [`WINDOW_SECS`]: what its attempts per
/// request and the success ratio its callers see are computed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recent {
    /// Requests admitted (the attempts' denominator).
    pub requests: u64,
    /// Upstream attempts finished.
    pub attempts: u64,
    /// Requests answered, each counted once in `levee_requests_total`
    /// under its outcome: successes, failures and refusals alike.
    pub answered: u64,
    /// Of those, answered with success (`success` or `replayed`).
    pub succeeded: u64,
}

impl Recent {
    /// These and `c`.
    fn plus(self, c: Count) -> Recent {
        Recent {
            requests: self.requests + u64::from(c.requests),
            attempts: self.attempts + u64::from(c.attempts),
            answered: self.answered + u64::from(c.answered),
            succeeded: self.succeeded + u64::from(c.succeeded),
        }
    }

    /// The share of answered requests that succeeded; `None` when none was
    /// answered.
    pub fn success_ratio(&self) -> Option<f64> {
        (self.answered > 0).then(|| self.succeeded as f64 / self.answered as f64)
    }
}

/// A route's traffic per second over the last [`WINDOW_SECS`].
#[derive(Clone)]
pub(super) struct Window {
    slots: Vec<Second>,
}

impl Window {
    pub(super) fn new() -> Self {
        Window {
            slots: vec![Second::EMPTY; usize::try_from(WINDOW_SECS).unwrap_or(60)],
        }
    }

    pub(super) fn slot(&mut self, sec: u64) -> &mut Second {
        let n = self.slots.len() as u64;
        let s = &mut self.slots[usize::try_from(sec % n).unwrap_or(0)];
        if s.sec != sec {
            *s = Second {
                sec,
                ..Second::EMPTY
            };
        }
        s
    }

    /// The traffic in the window ending at `sec`.
    pub(super) fn sum(&self, sec: u64) -> Recent {
        self.slots
            .iter()
            .filter(|s| s.sec <= sec && sec - s.sec < WINDOW_SECS)
            .fold(Recent::default(), |r, s| r.plus(s.count))
    }
}

/// One second of a route's traffic as one thread counts it: atomics only
/// their owner writes, with plain loads and stores.
struct OwnedSecond {
    /// Which second; `u64::MAX` before any.
    sec: AtomicU64,
    requests: AtomicU32,
    attempts: AtomicU32,
    answered: AtomicU32,
    succeeded: AtomicU32,
}

impl OwnedSecond {
    fn new() -> Self {
        OwnedSecond {
            sec: AtomicU64::new(u64::MAX),
            requests: AtomicU32::new(0),
            attempts: AtomicU32::new(0),
            answered: AtomicU32::new(0),
            succeeded: AtomicU32::new(0),
        }
    }

    fn counts(&self) -> [&AtomicU32; 4] {
        [
            &self.requests,
            &self.attempts,
            &self.answered,
            &self.succeeded,
        ]
    }
}

/// A route's traffic per second over the last [`WINDOW_SECS`], counted
/// apart by each thread that owns a shard ([`crate::observe::shard`]), and
/// under a lock by the threads that share the last. A request counts three
/// times (admitted, its attempts, answered): under one lock those were six
/// atomic read-modify-writes a request on a cache line every worker
/// writes. A reader adds the shards up; one that reads while a thread
/// starts a new second may miss that thread's last count of it.
pub(super) struct Windows {
    owned: Box<[Box<[OwnedSecond]>]>,
    shared: Mutex<Window>,
}

impl Windows {
    pub(super) fn new() -> Self {
        let slots = usize::try_from(WINDOW_SECS).unwrap_or(60);
        Windows {
            owned: (0..SHARDS - 1)
                .map(|_| (0..slots).map(|_| OwnedSecond::new()).collect())
                .collect(),
            shared: Mutex::new(Window::new()),
        }
    }

    /// Adds `c` to second `sec`, on this thread's shard.
    pub(super) fn count(&self, sec: u64, c: Count) {
        let (shard, owned) = this_thread();
        self.count_on(shard, owned, sec, c);
    }

    /// [`Windows::count`] on `shard`, which the calling thread `owned`.
    fn count_on(&self, shard: usize, owned: bool, sec: u64, c: Count) {
        let Some(slots) = self.owned.get(shard).filter(|_| owned) else {
            let mut w = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
            w.slot(sec).count.add(c);
            return;
        };
        let n = slots.len() as u64;
        let s = &slots[usize::try_from(sec % n).unwrap_or(0)];
        if s.sec.load(Ordering::Relaxed) != sec {
            // A new second: its counts start over, then it is marked, so a
            // reader that sees the mark sees the counts cleared.
            for a in s.counts() {
                a.store(0, Ordering::Relaxed);
            }
            s.sec.store(sec, Ordering::Release);
        }
        for (a, add) in s.counts().into_iter().zip(c.fields()) {
            if add > 0 {
                a.store(
                    a.load(Ordering::Relaxed).saturating_add(add),
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// The traffic in the window ending at `sec`, every shard's.
    pub(super) fn sum(&self, sec: u64) -> Recent {
        let shared = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sum(sec);
        self.owned
            .iter()
            .flat_map(|slots| slots.iter())
            .filter(|s| {
                let at = s.sec.load(Ordering::Acquire);
                at <= sec && sec - at < WINDOW_SECS
            })
            .fold(shared, |r, s| {
                r.plus(Count::of(s.counts().map(|c| c.load(Ordering::Relaxed))))
            })
    }

    /// `from`'s counts, for the same route in a reloaded census (no thread
    /// counts in `self` yet).
    pub(super) fn copy_from(&self, from: &Windows) {
        for (to, from) in self.owned.iter().zip(from.owned.iter()) {
            for (t, f) in to.iter().zip(from.iter()) {
                for (a, b) in t.counts().into_iter().zip(f.counts()) {
                    a.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                t.sec
                    .store(f.sec.load(Ordering::Acquire), Ordering::Release);
            }
        }
        let w = from
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) = w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The traffic of `r` requests, `a` attempts, `n` answered, `s` succeeded.
    fn sum(r: u64, a: u64, n: u64, s: u64) -> Recent {
        Recent {
            requests: r,
            attempts: a,
            answered: n,
            succeeded: s,
        }
    }

    #[test]
    fn the_window_counts_the_last_minute_only() {
        let mut w = Window::new();
        assert_eq!(w.sum(0), Recent::default());
        w.slot(0).count.requests += 1;
        w.slot(0).count.attempts += 2;
        w.slot(0).count.answered += 1;
        w.slot(59).count.requests += 1;
        w.slot(59).count.answered += 1;
        w.slot(59).count.succeeded += 1;
        assert_eq!(w.sum(59), sum(2, 2, 2, 1));
        assert_eq!(w.sum(59).success_ratio(), Some(0.5));
        assert_eq!(w.sum(60), sum(1, 0, 1, 1));
        w.slot(60).count.requests += 5;
        assert_eq!(w.sum(60), sum(6, 0, 1, 1));
        assert_eq!(w.sum(200), Recent::default());
        assert_eq!(w.sum(200).success_ratio(), None);
    }

    #[test]
    fn every_shards_counts_add_up_start_over_each_minute_and_carry_over() {
        let w = Windows::new();
        let add = |shard, owned, sec, requests, answered| {
            let c = Count {
                requests,
                attempts: 2 * requests,
                answered,
                succeeded: answered,
            };
            w.count_on(shard, owned, sec, c);
        };
        // Two owners and two threads sharing the last shard.
        add(0, true, 10, 1, 0);
        add(3, true, 10, 2, 0);
        add(SHARDS - 1, false, 10, 4, 0);
        add(SHARDS - 1, false, 11, 0, 3);
        add(0, true, 11, 0, 1);
        assert_eq!(w.sum(11), sum(7, 14, 4, 4));
        // Sixty seconds on, second 10's slot is second 70's: it starts over.
        add(0, true, 70, 5, 0);
        assert_eq!(w.sum(70), sum(5, 10, 4, 4));
        let next = Windows::new();
        next.copy_from(&w);
        assert_eq!(next.sum(70), w.sum(70));
        // The threads' own counts go on in the reloaded census.
        next.count(70, Count::REQUEST);
        assert_eq!(next.sum(70), sum(6, 10, 4, 4));
        assert_eq!(next.sum(71), sum(6, 10, 0, 0), "second 11 is out");
    }
}
