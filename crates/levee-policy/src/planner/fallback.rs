//! Falling back: the first attempt on a later target after the current one
//! failed, was refused or ran out of attempts.

use super::failure::refusal_reason;
use super::{AttemptKind, Decision, Dependencies, Inputs, Reason, RoutePolicy};
use crate::classify::Outcome;
use rand::Rng;

impl RoutePolicy {
    pub(super) fn fall_back<D: Dependencies, R: Rng + ?Sized>(
        &self,
        inputs: Inputs<'_, D, R>,
        from: usize,
    ) -> Decision {
        let Inputs(req, deps, now, _) = inputs;
        let remaining = req.deadline.saturating_since(now);
        // A failure that came back fast (an overload answer in 50 ms) left
        // the caller nine tenths of its patience or more: the backup is then
        // asked as a first attempt would be, whatever its slow end. A caller
        // with 10 s behind a backup expected at 15 s otherwise never reached
        // it after a 529.
        let answered = req
            .last
            .is_some_and(|l| matches!(l.outcome, Outcome::Status { .. } | Outcome::ConnectError));
        let fast = answered
            && req.started.is_some_and(|s| {
                let patience = req.deadline.saturating_since(s);
                remaining >= patience - patience / 10 && remaining > self.margin
            });
        for t in from..self.expected.len() {
            if !fast && remaining < self.expected_now(deps, t, now) + self.margin {
                continue;
            }
            if let Err(r) = deps.check_kind(t, now, AttemptKind::Fallback) {
                req.blocked.get_or_insert(refusal_reason(r, now));
                continue;
            }
            match self.dispatch(req, deps, now, t, AttemptKind::Fallback) {
                Ok(d) => {
                    // A new target answers for the request from here on.
                    req.blocked = None;
                    return Decision::Dispatch(d);
                }
                Err(r) => {
                    req.blocked.get_or_insert(refusal_reason(r, now));
                }
            }
        }
        let blocked = req.blocked.unwrap_or((Reason::UpstreamError, None));
        self.fail(req, now, blocked)
    }
}
