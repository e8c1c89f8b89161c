//! What the driver reports back about an attempt: its outcome, that it
//! could not be sent, that it stalled, or that it was dropped.

use super::balance::Ordered;
use super::failure::refusal_reason;
use super::request::{Last, RequestState};
use super::{overload_status, Dependencies, PrimaryRefusal, RoutePolicy};
use crate::classify::{Class, Outcome};
use crate::provider::Refusal;
use crate::time::Instant;

impl RoutePolicy {
    /// Records the in-flight attempt's outcome; returns its class.
    pub fn record<D: Dependencies>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
        outcome: Outcome,
    ) -> Class {
        let order = req.order;
        self.record_slots(req, &mut Ordered { inner: deps, order }, now, outcome)
    }

    /// The driver could not send the attempt it was told to dispatch (see
    /// `refuse_slots` for what follows).
    pub fn refuse<D: Dependencies>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
        refusal: Refusal,
    ) {
        let order = req.order;
        self.refuse_slots(req, &mut Ordered { inner: deps, order }, now, refusal)
    }

    /// The attempt in flight is past its target's learned p99 with no first
    /// byte: stall evidence for the model's breaker, counted once.
    pub fn stalled<D: Dependencies>(&self, req: &mut RequestState, deps: &mut D, now: Instant) {
        let order = req.order;
        self.stalled_slots(req, &mut Ordered { inner: deps, order }, now)
    }

    /// Gives back an in-flight attempt's permit without learning anything
    /// (caller left, driver dropped the attempt).
    pub fn abandon<D: Dependencies>(&self, req: &mut RequestState, deps: &mut D, now: Instant) {
        let order = req.order;
        self.abandon_slots(req, &mut Ordered { inner: deps, order }, now)
    }

    /// Records the in-flight attempt's outcome; returns its class.
    fn record_slots<D: Dependencies>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
        outcome: Outcome,
    ) -> Class {
        let Some(f) = req.in_flight.take() else {
            return self.classifier.classify(outcome);
        };
        let outcome = match outcome {
            Outcome::Timeout if f.cut_by_deadline => Outcome::SkippedNoDeadline,
            o => o,
        };
        let class = self.classifier.classify(outcome);
        // An overload answer that could not be retried only because the
        // caller's deadline cannot hold another attempt says as much about
        // the caller as about the provider: twenty callers with 1 s
        // deadlines meeting 503s must not switch the model off for a
        // caller with 30 s. It counts for the breaker only when a retry
        // could have started (or the schedule was spent), or when a backup
        // exists (then an overload answer goes to the backup, not to a
        // retry, whatever the deadline).
        let for_breaker = match (class, outcome) {
            (
                Class::Fault {
                    retryable: true,
                    wait,
                    provider_wide: false,
                },
                Outcome::Status { status, .. },
            ) if req.attempts_on_target < self.max_attempts
                && !req.committed
                && !(f.target + 1 < self.expected.len() && overload_status(status)) =>
            {
                let remaining = req.deadline.saturating_since(now);
                let needs = wait.unwrap_or_default().min(self.retry_after_cap) + f.retry_needs;
                if remaining < needs {
                    Class::NotProviderFault
                } else {
                    class
                }
            }
            _ => class,
        };
        // However long the provider asked, it holds the model (or provider)
        // closed for at most the cap.
        let winning = deps.finish(
            f.target,
            now,
            f.permit,
            for_breaker.capped(self.retry_after_cap),
        );
        if class == Class::Success {
            deps.deposit(f.target, now);
            // Retries are paid back only while they win: at a saturated
            // provider each one took another caller's place.
            if req.refundable > 0 && winning != Some(false) {
                deps.refund(f.target, now, req.refundable);
                req.refundable = 0;
            }
        }
        let status = match outcome {
            Outcome::Status { status, .. } => Some(status),
            _ => None,
        };
        req.last = Some(Last {
            class,
            status,
            outcome,
            winning,
        });
        class
    }

    /// The driver could not send the attempt it was told to dispatch: a check
    /// outside the core (a shared, cross-replica allowance) refused it. The
    /// attempt does not count, its permit is given back, the provider is
    /// treated as throttled until the refusal lifts, and the next
    /// [`decide`](Self::decide) falls back to a later target or fails with
    /// the refusal's reason.
    fn refuse_slots<D: Dependencies>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
        refusal: Refusal,
    ) {
        let Some(f) = req.in_flight.take() else {
            return;
        };
        let wait = refusal.retry_after(now);
        let _ = deps.finish(
            f.target,
            now,
            f.permit,
            Class::Throttled {
                retryable: false,
                wait,
            },
        );
        req.attempts = req.attempts.saturating_sub(1);
        req.attempts_on_target = req.attempts_on_target.saturating_sub(1);
        req.blocked = Some(refusal_reason(refusal, now));
        req.refused = Some(f.target);
        if f.target == 0 && req.last.is_none() {
            req.primary_refused = Some(PrimaryRefusal::of(refusal));
        }
    }

    /// The in-flight attempt has passed its target's learned p99
    /// ([`Dispatch::stall_after`](super::Dispatch::stall_after)) with no
    /// first byte while the caller still waits: stall evidence for the
    /// model's breaker, counted once. The attempt goes on until its timeout.
    fn stalled_slots<D: Dependencies>(&self, req: &mut RequestState, deps: &mut D, now: Instant) {
        if let Some(f) = req.in_flight.as_mut() {
            deps.stalled(f.target, now, &mut f.permit);
        }
    }

    /// Gives back an in-flight attempt's permit without learning anything
    /// (caller left, driver dropped the attempt).
    pub(super) fn abandon_slots<D: Dependencies>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
    ) {
        if let Some(f) = req.in_flight.take() {
            let _ = deps.finish(f.target, now, f.permit, Class::NotProviderFault);
        }
    }
}
