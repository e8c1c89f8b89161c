//! Sending an attempt: its admission, its timeout (cut to the deadline and
//! the next target's reserve), its stall mark, and the request's count.

use super::request::{InFlight, RequestState};
use super::{AttemptKind, Dependencies, Dispatch, RoutePolicy};
use crate::provider::Refusal;
use crate::time::Instant;
use std::time::Duration;

/// The earliest an attempt with no first byte is stall evidence, however
/// fast its target has been. A provider that answers in 2 ms (a model
/// behind a fast cache, a local server) had its stall mark at 4 ms: on a
/// gateway whose own CPUs were saturated, heads read a few milliseconds
/// late opened the breaker on a healthy upstream and refused 22 % of
/// requests `circuit_open`. A stall a caller notices is a quarter of a
/// second or more.
pub const STALL_FLOOR: Duration = Duration::from_millis(250);

impl RoutePolicy {
    pub(super) fn dispatch<D: Dependencies>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
        t: usize,
        kind: AttemptKind,
    ) -> Result<Dispatch, Refusal> {
        // Each target's learned time is looked up once, with the admission
        // (the gateway locks its provider once for both).
        let (mut permit, learned) = deps.admit_expecting(t, now, kind)?;
        let configured = self.expected[deps.target_at(t)];
        let expected = learned.map_or(configured, |l| l.min(configured));
        let mut later = (t + 1..self.expected.len()).map(|u| self.expected_now(deps, u, now));
        let next = later.next();
        let reserve = next.unwrap_or_default() + later.sum::<Duration>();
        let (timeout, cut_by_deadline) = self.attempt_timeout(req, now, expected, next);
        if kind == AttemptKind::Retry && t == req.target {
            permit = permit.retry();
        }
        // Twice the p99: a healthy attempt a little past it (1 % are) is
        // not evidence; one with no first byte at twice it is, once that
        // is past `STALL_FLOOR`.
        let stall_after = learned
            .map(|p99| (p99 * 2).max(STALL_FLOOR))
            .filter(|mark| *mark < timeout);
        let retry_needs = expected + reserve + self.margin;
        req.in_flight = Some(InFlight {
            target: t,
            permit,
            cut_by_deadline,
            retry_needs,
        });
        if kind == AttemptKind::Retry && t == req.target {
            req.attempts_on_target += 1;
        } else {
            if t != req.target {
                req.refundable = 0;
            }
            req.target = t;
            req.attempts_on_target = 1;
        }
        req.attempts += 1;
        req.started.get_or_insert(now);
        let primary_refused = if t > 0 && req.last.is_none() {
            req.primary_refused
        } else {
            None
        };
        Ok(Dispatch {
            target: deps.target_at(t),
            timeout,
            attempt: req.attempts,
            kind,
            stall_after,
            primary_refused,
        })
    }

    /// An attempt at `now` expected to take `expected`, with `next` the next
    /// target's expected attempt: its timeout, and whether the deadline (not
    /// the route's `attempt_timeout`) made it shorter than `expected`.
    fn attempt_timeout(
        &self,
        req: &RequestState,
        now: Instant,
        expected: Duration,
        next: Option<Duration>,
    ) -> (Duration, bool) {
        let mut budget = req
            .deadline
            .saturating_since(now)
            .saturating_sub(self.margin);
        if let Some(next) = next {
            // Leave the next target a full attempt and its margin, when the
            // deadline holds more than that.
            let reserve = next + self.margin;
            if budget > reserve {
                budget -= reserve;
            }
        }
        match self.attempt_timeout {
            Some(cap) if cap <= budget => (cap, false),
            _ => (budget, budget < expected),
        }
    }
}
