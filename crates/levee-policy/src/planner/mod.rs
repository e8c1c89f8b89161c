//! The attempt planner: the one decision function the gateway and the
//! simulator both call.
//!
//! The driver (gateway on tokio time, simulator on virtual time) loops:
//! ask [`RoutePolicy::decide`]; on [`Decision::Dispatch`] send the attempt and
//! hand its [`Outcome`] to [`RoutePolicy::record`]; on [`Decision::Wait`] sleep
//! until then and ask again; on [`Decision::Fail`] answer the caller. Every rule
//! about *whether* and *when* lives here; the driver only does I/O.
//!
//! The rules:
//! - the first attempt on the first target starts whenever more than the return
//!   margin (50 ms) remains, its timeout cut to the deadline;
//! - a retry starts only if the remaining time covers the wait, a full attempt
//!   (`expected_attempt`) on that target, a full attempt on each later target
//!   (the fallback reserve — derived, not chosen) and the margin;
//! - a fallback starts only if the remaining time covers its own
//!   `expected_attempt` and the margin. It spends no retry budget: a fallback
//!   to a healthy backup is not a retry storm, and what protects the backup
//!   is its own allowance, in-flight cap and breaker;
//! - while a later target exists, an attempt's timeout leaves that target's
//!   `expected_attempt` and the margin, so a stalled primary still leaves time
//!   to ask the backup (and a route may cap every attempt at `attempt_timeout`);
//! - a Retry-After longer than the route's `retry_after_cap` is not waited
//!   on, and holds the provider (or the model) closed for at most the cap;
//! - a request the caller marks as its own retry (an SDK's retry counter)
//!   spends a retry token on its first attempt, so callers that ignore
//!   `x-should-retry` are held to the same budget;
//! - a request that succeeds after retries on transient faults refunds those
//!   retries' tokens (see [`crate::budget`]);
//! - a Retry-After longer than what remains fails now instead of waiting;
//! - nothing is retried once a byte has reached the caller;
//! - retries spend the target's retry budget; every attempt goes through the
//!   provider's breaker, throttle, allowance and in-flight cap;
//! - an attempt whose timeout was cut short by the caller's deadline and then
//!   timed out is [`Outcome::SkippedNoDeadline`]: not a provider fault.
//! - every "expected attempt" is the target's learned p99 when there is one
//!   (see [`crate::learn`]), never above its configured value;
//! - the first attempt, and a fallback after an answer that came back with
//!   nine tenths of the caller's patience left, need only the margin;
//! - a first attempt refused by a model's pace, the allowance or a recovery
//!   ramp waits for the slot when the deadline holds it, the route's primary
//!   first;
//! - a retry after a 429 spends no budget (the pace bounds it); while a
//!   target's retries are proven winning, neither does one after a transient
//!   fault, and it waits only the first backoff step's jitter; while they
//!   lose, a target gets at most [`LOSING_ATTEMPTS`] and nothing is refunded;
//! - an overload answer left unretried only for lack of deadline does not
//!   count against the breaker.

pub mod balance;
mod decision;
mod deps;
mod dispatch;
mod failure;
mod fallback;
mod first;
mod record;
mod request;
mod retry;
mod schedule;

pub use decision::{AttemptKind, Decision, Dispatch, PrimaryRefusal};
pub use deps::{Dependencies, Deps};
pub use dispatch::STALL_FLOOR;
pub use failure::{Failure, Reason};
pub use request::{RequestState, ALLOWANCE_PATIENCE};
pub use retry::LOSING_ATTEMPTS;
pub use schedule::{CensusRow, Step};

use crate::backoff::Backoff;
use crate::classify::{self, Classifier, Outcome};
use crate::time::Instant;
use failure::{non_retry_reason, refusal_reason};
use first::wait_for;
use rand::Rng;
use request::Pending;
use std::time::Duration;

/// The least spread added to a Retry-After wait (or the first backoff cap,
/// when larger), so that clients told "1 s" together do not return together.
pub const RETRY_AFTER_SPREAD: Duration = Duration::from_millis(250);

/// The return margin: time kept to send our own answer before the deadline.
pub const DEFAULT_MARGIN: Duration = Duration::from_millis(50);

/// Why a route policy was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("a route needs at least one target")]
    NoTargets,
    #[error("`max_attempts` must be between 1 and 20 (got {0})")]
    MaxAttempts(u32),
    #[error("`expected_attempt_ms` must be positive")]
    ExpectedAttempt,
    #[error("a route may have at most {max} targets, its groups' members counted (got {0})", max = balance::MAX_TARGETS)]
    TooManyTargets(usize),
    #[error("a balanced group must have members with weights above 0, inside the route's targets, apart from the other groups")]
    Group,
}

/// A route's immutable retry policy.
#[derive(Clone, Debug)]
pub struct RoutePolicy {
    expected: Vec<Duration>,
    /// `reserve_after[t]` = Σ expected of targets after `t`.
    reserve_after: Vec<Duration>,
    max_attempts: u32,
    classifier: Classifier,
    backoff: Backoff,
    respect_retry_after: bool,
    retry_after_cap: Duration,
    attempt_timeout: Option<Duration>,
    margin: Duration,
    /// The balanced groups, in target order.
    groups: Vec<balance::Group>,
    /// `group_end[t]`: the end of the group that holds `t` (`t + 1` for a
    /// target in no group). Slots and targets agree on it: a request
    /// orders only within groups.
    group_end: Vec<usize>,
}

impl RoutePolicy {
    /// Validates and builds. `expected` holds each target's `expected_attempt`,
    /// in fallback order.
    pub fn new(
        expected: &[Duration],
        max_attempts: u32,
        classifier: Classifier,
        backoff: Backoff,
        respect_retry_after: bool,
    ) -> Result<Self, PlanError> {
        if expected.is_empty() {
            return Err(PlanError::NoTargets);
        }
        if !(1..=20).contains(&max_attempts) {
            return Err(PlanError::MaxAttempts(max_attempts));
        }
        if expected.iter().any(|d| d.is_zero()) {
            return Err(PlanError::ExpectedAttempt);
        }
        if expected.len() > balance::MAX_TARGETS {
            return Err(PlanError::TooManyTargets(expected.len()));
        }
        let reserve_after = (0..expected.len())
            .map(|t| expected[t + 1..].iter().sum())
            .collect();
        Ok(RoutePolicy {
            expected: expected.to_vec(),
            reserve_after,
            max_attempts,
            classifier,
            backoff,
            respect_retry_after,
            retry_after_cap: crate::retry_after::DEFAULT_RETRY_AFTER_CAP,
            attempt_timeout: None,
            margin: DEFAULT_MARGIN,
            groups: Vec::new(),
            group_end: (1..=expected.len()).collect(),
        })
    }

    /// Makes runs of targets balanced groups: each request orders a
    /// group's members for itself (see [`balance`]).
    pub fn with_groups(mut self, groups: Vec<balance::Group>) -> Result<Self, PlanError> {
        let mut end = 0;
        for g in &groups {
            let members = g.start..g.start + g.weights.len();
            let weights_ok = g.weights.iter().all(|w| w.is_finite() && *w > 0.0);
            if g.weights.is_empty()
                || !weights_ok
                || g.start < end
                || members.end > self.expected.len()
            {
                return Err(PlanError::Group);
            }
            for t in members.clone() {
                self.group_end[t] = members.end;
            }
            end = members.end;
        }
        self.groups = groups;
        Ok(self)
    }

    /// The balanced groups.
    pub fn groups(&self) -> &[balance::Group] {
        &self.groups
    }

    /// Caps how long a Retry-After may hold a request, a model or a provider
    /// (default 60 s). A longer one is not waited on.
    pub fn with_retry_after_cap(mut self, cap: Duration) -> Self {
        self.retry_after_cap = cap;
        self
    }

    /// Caps every attempt's timeout (a stalled provider is given up on after
    /// this, whatever the deadline).
    pub fn with_attempt_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.attempt_timeout = timeout.filter(|d| !d.is_zero());
        self
    }

    /// Number of targets.
    pub fn targets(&self) -> usize {
        self.expected.len()
    }

    /// The classifier in force.
    pub fn classifier(&self) -> &Classifier {
        &self.classifier
    }

    /// The return margin.
    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// Max attempts per target.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The next step for `req` at `now`.
    pub fn decide<D: Dependencies, R: Rng + ?Sized>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
        rng: &mut R,
    ) -> Decision {
        if !self.groups.is_empty() && req.attempts == 0 && req.last.is_none() && !req.order.is_set()
        {
            req.order = balance::order(&self.groups, self.expected.len(), &*deps, now, rng);
        }
        // The planner speaks of the request's slots; the world of targets
        // (the same while the route has no balanced group).
        let order = req.order;
        let mut deps = balance::Ordered { inner: deps, order };
        self.decide_slots(req, &mut deps, now, rng)
    }

    /// [`RoutePolicy::decide`] in the request's slots.
    fn decide_slots<D: Dependencies, R: Rng + ?Sized>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
        rng: &mut R,
    ) -> Decision {
        if req.in_flight.is_some() {
            // The driver asked again without recording: treat the attempt as abandoned.
            self.abandon_slots(req, deps, now);
        }
        let remaining = req.deadline.saturating_since(now);
        if let Some(t) = req.refused.take() {
            return self.fall_back(Inputs(req, deps, now, rng), t + 1);
        }
        if let Some(p) = req.pending {
            return self.resume(Inputs(req, deps, now, rng), p);
        }
        let Some(last) = req.last else {
            return self.first(Inputs(req, deps, now, rng));
        };
        let t = req.target;
        if !req.committed && last.outcome == Outcome::SkippedNoDeadline {
            // The deadline cut this attempt short (to keep the fallback's
            // reserve, or because it was all that was left): no retry here,
            // but the next target may still fit.
            req.blocked = Some((Reason::DeadlineExceeded, None));
            return self.fall_back(Inputs(req, deps, now, rng), t + 1);
        }
        if req.committed || !last.class.is_retryable() {
            return self.fail(req, now, non_retry_reason(last.class));
        }
        if self.peer_can_take(deps, t, now) {
            // In a balanced group, a retryable failure goes to another
            // member first: another deployment of the same model, asked
            // as a fallback is (no retry budget spent).
            req.blocked = Some(non_retry_reason(last.class));
            return self.fall_back(Inputs(req, deps, now, rng), t + 1);
        }
        if overload_answer(last) && last.winning != Some(true) && self.backup_can_take(deps, t, now)
        {
            // A backup is asked at once after an overload answer, whatever
            // the budget's state, unless the target's retries are proven
            // winning (a lost race, a random brownout: the primary's vendor
            // keeps its traffic). Eight retries on an overloaded primary
            // kept a call 8.25 s from a healthy backup.
            req.blocked = Some(non_retry_reason(last.class));
            return self.fall_back(Inputs(req, deps, now, rng), t + 1);
        }
        let cap = if last.winning != Some(false) {
            self.max_attempts
        } else {
            self.max_attempts.min(LOSING_ATTEMPTS)
        };
        if req.attempts_on_target < cap {
            match self.plan_retry(Inputs(req, deps, now, rng), t, remaining, last) {
                Ok(d) => return d,
                Err(blocked) => req.blocked = Some(blocked),
            }
        } else {
            req.blocked = Some((Reason::UpstreamError, None));
        }
        self.fall_back(Inputs(req, deps, now, rng), t + 1)
    }

    /// A pending attempt whose wait is over (or not yet): a first attempt
    /// tries again from the primary; a retry or fallback is paid for,
    /// sent, waits for the next slot, or gives way to the next target.
    fn resume<D: Dependencies, R: Rng + ?Sized>(
        &self,
        inputs: Inputs<'_, D, R>,
        p: Pending,
    ) -> Decision {
        let Inputs(req, deps, now, rng) = inputs;
        if now < p.at {
            return Decision::Wait { until: p.at };
        }
        req.pending = None;
        if p.kind == AttemptKind::First {
            // It waited for a throttled or ramping model's slot.
            return self.first(Inputs(req, deps, now, rng));
        }
        let remaining = req.deadline.saturating_since(now);
        let needed =
            self.expected_now(deps, p.target, now) + self.reserve_for(deps, p.target, p.kind, now);
        if remaining < needed + self.margin {
            req.unpaid = false;
            req.blocked = Some((Reason::DeadlineExceeded, None));
            return self.fall_back(Inputs(req, deps, now, rng), p.target + 1);
        }
        match self.pay_pending(req, deps, now, p.target) {
            Ok(Some(at)) => {
                req.pending = Some(Pending { at, ..p });
                return Decision::Wait { until: at };
            }
            Err(blocked) => req.blocked = Some(blocked),
            Ok(None) => match self.dispatch(req, deps, now, p.target, p.kind) {
                Ok(d) => return Decision::Dispatch(d),
                Err(r) => {
                    // Another waiter took the slot it waited for: wait
                    // for the next one while the deadline holds it.
                    if let Some(until) = self.waitable(deps, r, p.target, now, remaining, req) {
                        return wait_for(req, Pending { at: until, ..p }, rng);
                    }
                    req.blocked = Some(refusal_reason(r, now));
                }
            },
        }
        self.fall_back(Inputs(req, deps, now, rng), p.target + 1)
    }

    /// Whether a later member of `t`'s balanced group would admit a
    /// fallback now.
    fn peer_can_take<D: Dependencies>(&self, deps: &D, t: usize, now: Instant) -> bool {
        (t + 1..self.group_end[t]).any(|u| deps.check_kind(u, now, AttemptKind::Fallback).is_ok())
    }

    /// Whether a later target than `t` would admit a fallback now.
    fn backup_can_take<D: Dependencies>(&self, deps: &D, t: usize, now: Instant) -> bool {
        (t + 1..self.expected.len()).any(|u| deps.check_kind(u, now, AttemptKind::Fallback).is_ok())
    }

    fn reserve_for<D: Dependencies>(
        &self,
        deps: &D,
        t: usize,
        kind: AttemptKind,
        now: Instant,
    ) -> Duration {
        match kind {
            AttemptKind::Retry => self.reserve_after_now(deps, t, now),
            AttemptKind::First | AttemptKind::Fallback => Duration::ZERO,
        }
    }

    /// What an attempt on `t` is expected to take now: the target's learned
    /// p99, never above its configured `expected_attempt` (the starting
    /// value and the cap).
    fn expected_now<D: Dependencies>(&self, deps: &D, t: usize, now: Instant) -> Duration {
        let configured = self.expected[deps.target_at(t)];
        deps.expected(t, now)
            .map_or(configured, |learned| learned.min(configured))
    }

    /// The fallback reserve after `t`: each later target's expected attempt.
    fn reserve_after_now<D: Dependencies>(&self, deps: &D, t: usize, now: Instant) -> Duration {
        if self.reserve_after[t].is_zero() {
            return Duration::ZERO;
        }
        (t + 1..self.expected.len())
            .map(|u| self.expected_now(deps, u, now))
            .sum()
    }
}

/// Whether `status` says the provider is overloaded: 429, 503 or 529.
fn overload_status(status: u16) -> bool {
    matches!(status, 429 | 503 | 529)
}

/// Whether `last` is an overload answer: an overload status, or any fault
/// that came with a Retry-After.
fn overload_answer(last: request::Last) -> bool {
    last.status.is_some_and(overload_status)
        || matches!(last.class, classify::Class::Throttled { .. })
        || matches!(last.class, classify::Class::Fault { wait: Some(_), .. })
}

/// What one [`RoutePolicy::decide`] decides with, as it hands it on to each
/// step of the plan: the request, its dependencies, the time of the
/// decision and the randomness its waits are spread with, in that order.
struct Inputs<'a, D: ?Sized, R: ?Sized>(&'a mut RequestState, &'a mut D, Instant, &'a mut R);
