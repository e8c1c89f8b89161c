//! The request's first attempt, and the waits for a paced slot (a throttled
//! model, the allowance, a recovery ramp) that it or a pending attempt takes.

use super::failure::refusal_reason;
use super::request::{Pending, RequestState};
use super::{
    AttemptKind, Decision, Dependencies, Inputs, PrimaryRefusal, Reason, RoutePolicy,
    ALLOWANCE_PATIENCE, RETRY_AFTER_SPREAD,
};
use crate::provider::Refusal;
use crate::time::Instant;
use rand::Rng;
use std::time::Duration;

impl RoutePolicy {
    /// The request's first attempt: on the first target that admits it, or,
    /// when the primary is only pacing (a 429's throttle, the allowance, a
    /// recovery ramp) and the deadline holds the wait for its next slot,
    /// after that wait — the primary's vendor keeps its traffic. A first
    /// attempt needs only more than the return margin, on any target: the
    /// expected attempt is the slow end of a call, not its usual time, and
    /// a caller whose deadline is shorter than a backup's slow end still
    /// gets most of its answers from it.
    pub(super) fn first<D: Dependencies, R: Rng + ?Sized>(
        &self,
        inputs: Inputs<'_, D, R>,
    ) -> Decision {
        let Inputs(req, deps, now, rng) = inputs;
        let remaining = req.deadline.saturating_since(now);
        if remaining <= self.margin {
            return self.fail(req, now, (Reason::DeadlineExceeded, None));
        }
        let mut first_refusal = None;
        let mut soonest: Option<Instant> = None;
        for t in 0..self.expected.len() {
            if req.caller_retry
                && deps.check_kind(t, now, AttemptKind::First).is_ok()
                && !deps.withdraw(t, now)
            {
                deps.budget_refused(t);
                first_refusal.get_or_insert((Reason::BudgetExhausted, None));
                if t == 0 {
                    req.primary_refused = Some(PrimaryRefusal::BudgetExhausted);
                }
                continue;
            }
            match self.dispatch(req, deps, now, t, AttemptKind::First) {
                Ok(d) => {
                    if req.caller_retry {
                        req.refundable = 1;
                    }
                    return Decision::Dispatch(d);
                }
                Err(r) => {
                    if let Some(until) = self.waitable(deps, r, t, now, remaining, req) {
                        if t == 0 {
                            return self.wait_first(req, until, rng);
                        }
                        soonest = Some(soonest.map_or(until, |s| s.min(until)));
                    }
                    if t == 0 {
                        req.primary_refused = Some(PrimaryRefusal::of(r));
                    }
                    first_refusal.get_or_insert(refusal_reason(r, now));
                }
            }
        }
        if let Some(until) = soonest {
            return self.wait_first(req, until, rng);
        }
        let blocked = first_refusal.unwrap_or((Reason::DeadlineExceeded, None));
        self.fail(req, now, blocked)
    }

    /// When a refusal is a slot to wait for — a throttled model's pace, the
    /// allowance, a recovery ramp — that comes within the Retry-After cap
    /// and leaves the deadline an expected attempt and the margin. The
    /// allowance's slots are waited for only up to [`ALLOWANCE_PATIENCE`]
    /// past the first one.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn waitable<D: Dependencies>(
        &self,
        deps: &D,
        r: Refusal,
        t: usize,
        now: Instant,
        remaining: Duration,
        req: &mut RequestState,
    ) -> Option<Instant> {
        let until = match r {
            Refusal::Throttled { until } | Refusal::Recovering { until } => until,
            Refusal::RateLimited { until } => {
                let by = *req.allowance_by.get_or_insert(until + ALLOWANCE_PATIENCE);
                if until > by {
                    return None;
                }
                until
            }
            Refusal::CircuitOpen { .. } | Refusal::Shed | Refusal::PoolExhausted => return None,
        };
        let wait = until.saturating_since(now) + RETRY_AFTER_SPREAD;
        let fits = wait <= self.retry_after_cap
            && remaining >= wait + self.expected_now(deps, t, now) + self.margin;
        fits.then_some(until)
    }

    /// Waits for a slot for the first attempt.
    fn wait_first<R: Rng + ?Sized>(
        &self,
        req: &mut RequestState,
        until: Instant,
        rng: &mut R,
    ) -> Decision {
        let first = Pending {
            target: 0,
            at: until,
            kind: AttemptKind::First,
        };
        wait_for(req, first, rng)
    }
}

/// Waits for `p`'s slot, spread over [`RETRY_AFTER_SPREAD`] so that waiters
/// told the same slot do not all wake at once.
pub(super) fn wait_for<R: Rng + ?Sized>(
    req: &mut RequestState,
    p: Pending,
    rng: &mut R,
) -> Decision {
    let spread = u64::try_from(RETRY_AFTER_SPREAD.as_nanos()).unwrap_or(0);
    let at = p.at + Duration::from_nanos(rng.gen_range(0..=spread));
    req.pending = Some(Pending { at, ..p });
    Decision::Wait { until: at }
}
