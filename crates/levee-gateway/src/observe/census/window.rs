//! A route's traffic per second over the last [`WINDOW_SECS`]: requests,
//! attempts and answers, summed into what its attempts per request and the
//! success ratio its callers see are computed from.

use super::WINDOW_SECS;

/// One second of a route's traffic.
#[derive(Clone, Copy)]
pub(super) struct Second {
    /// Which second since the clock's origin; `u64::MAX` before any.
    sec: u64,
    pub(super) requests: u32,
    pub(super) attempts: u32,
    pub(super) answered: u32,
    pub(super) succeeded: u32,
}

impl Second {
    const EMPTY: Second = Second {
        sec: u64::MAX,
        requests: 0,
        attempts: 0,
        answered: 0,
        succeeded: 0,
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
            .fold(Recent::default(), |r, s| Recent {
                requests: r.requests + u64::from(s.requests),
                attempts: r.attempts + u64::from(s.attempts),
                answered: r.answered + u64::from(s.answered),
                succeeded: r.succeeded + u64::from(s.succeeded),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_counts_the_last_minute_only() {
        let mut w = Window::new();
        assert_eq!(w.sum(0), Recent::default());
        w.slot(0).requests += 1;
        w.slot(0).attempts += 2;
        w.slot(0).answered += 1;
        w.slot(59).requests += 1;
        w.slot(59).answered += 1;
        w.slot(59).succeeded += 1;
        let sum = |r, a, n, s| Recent {
            requests: r,
            attempts: a,
            answered: n,
            succeeded: s,
        };
        assert_eq!(w.sum(59), sum(2, 2, 2, 1));
        assert_eq!(w.sum(59).success_ratio(), Some(0.5));
        assert_eq!(w.sum(60), sum(1, 0, 1, 1));
        w.slot(60).requests += 5;
        assert_eq!(w.sum(60), sum(6, 0, 1, 1));
        assert_eq!(w.sum(200), Recent::default());
        assert_eq!(w.sum(200).success_ratio(), None);
    }
}
