//! One logical request's progress through the plan: its deadline, its
//! attempts, the attempt in flight, the last answer and any pending wait.

use super::{AttemptKind, PrimaryRefusal, Reason};
use crate::classify::{Class, Outcome};
use crate::provider::Permit;
use crate::time::Instant;
use std::time::Duration;

#[derive(Clone, Copy, Debug)]
pub(super) struct InFlight {
    pub(super) target: usize,
    pub(super) permit: Permit,
    pub(super) cut_by_deadline: bool,
    /// What a retry on this target would need besides its wait (an
    /// expected attempt, the fallback reserve, the margin), as learned at
    /// dispatch.
    pub(super) retry_needs: Duration,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Last {
    pub(super) class: Class,
    pub(super) status: Option<u16>,
    pub(super) outcome: Outcome,
    /// Whether retries on its target were winning when it came back
    /// (`None`: too few retries to tell).
    pub(super) winning: Option<bool>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
    pub(super) target: usize,
    pub(super) at: Instant,
    pub(super) kind: AttemptKind,
}

/// One logical request's progress. Create with [`RequestState::new`].
#[derive(Clone, Debug)]
pub struct RequestState {
    pub(super) deadline: Instant,
    pub(super) target: usize,
    pub(super) attempts_on_target: u32,
    pub(super) attempts: u32,
    pub(super) committed: bool,
    pub(super) in_flight: Option<InFlight>,
    pub(super) last: Option<Last>,
    pub(super) pending: Option<Pending>,
    /// Why the last try to go on was refused, for the final answer.
    pub(super) blocked: Option<(Reason, Option<Duration>)>,
    /// The driver could not send the last dispatch (see
    /// [`RoutePolicy::refuse`](super::RoutePolicy::refuse)): go on from the
    /// target after this one.
    pub(super) refused: Option<usize>,
    /// Tokens spent on the current target by retries after transient faults:
    /// refunded if the request succeeds there.
    pub(super) refundable: u32,
    /// The caller marked this request as its own retry.
    pub(super) caller_retry: bool,
    /// When the first attempt was sent.
    pub(super) started: Option<Instant>,
    /// Why the primary refused the request without an attempt.
    pub(super) primary_refused: Option<PrimaryRefusal>,
    /// The latest it may still wait for the allowance: its first slot when
    /// first refused, plus [`ALLOWANCE_PATIENCE`].
    pub(super) allowance_by: Option<Instant>,
    /// The pending retry has not been paid for: the budget was empty
    /// while the evidence on its target was still out.
    pub(super) unpaid: bool,
    /// The latest it may still wait for a retry token: its first budget
    /// refusal plus [`BUDGET_PATIENCE`].
    pub(super) budget_by: Option<Instant>,
    /// The request's order of its route's targets (slots); the identity
    /// unless the route has balanced groups.
    pub(super) order: super::balance::Order,
}

/// How long a retry after a transient fault waits for a token of an empty
/// retry budget while the evidence on its target is still out (too few
/// retries and too little load to tell random loss from overload). The
/// wait paces retries to the budget instead of failing them: at a 60 %
/// random brownout's onset, 20 calls/s need 29 retries a second against a
/// budget of 6, and failing the rest lost 5 % of calls in the seconds
/// before the evidence came in. An overload meets the same pace, so it
/// gets no more retries than the budget allows.
pub const BUDGET_PATIENCE: Duration = Duration::from_secs(1);

/// How often a retry waiting for a token asks the budget again.
pub(super) const BUDGET_RECHECK: Duration = Duration::from_millis(100);

/// How much longer than its first slot a request waits for the allowance.
/// Past it, the slots keep going to others (the account is oversubscribed:
/// waiting adds no answers, only latency) and it is refused at once, with
/// a `retry-after`. At twice a provider's limit and the SDK's 600 s timeout,
/// waiting without a bound held callers 21 s at the median, 99 s at p99.
pub const ALLOWANCE_PATIENCE: Duration = Duration::from_secs(1);

impl RequestState {
    /// A request that must be answered by `deadline`.
    pub fn new(deadline: Instant) -> Self {
        RequestState {
            deadline,
            target: 0,
            attempts_on_target: 0,
            attempts: 0,
            committed: false,
            in_flight: None,
            last: None,
            pending: None,
            blocked: None,
            refused: None,
            refundable: 0,
            caller_retry: false,
            started: None,
            primary_refused: None,
            allowance_by: None,
            unpaid: false,
            budget_by: None,
            order: super::balance::Order::default(),
        }
    }

    /// Marks the request as a caller's retry (an SDK's retry counter above
    /// zero): its first attempt spends a retry token like any retry.
    pub fn caller_retry(mut self, yes: bool) -> Self {
        self.caller_retry = yes;
        self
    }

    /// The deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Attempts made so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The target of the current or last attempt.
    pub fn target(&self) -> usize {
        self.order.at(self.target)
    }

    /// Marks that a body byte has reached the caller: from now on, no retry.
    pub fn commit(&mut self) {
        self.committed = true;
    }

    /// Whether an attempt is in flight (admitted, not yet recorded).
    pub fn has_in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// The permit of the attempt in flight.
    pub fn permit(&self) -> Option<Permit> {
        self.in_flight.as_ref().map(|f| f.permit)
    }
}
