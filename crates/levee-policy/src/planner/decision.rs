//! What the planner answers: send an attempt (and what kind), wait, or
//! fail; and what refused a request's primary target before it went on.

use super::failure::Failure;
use crate::provider::Refusal;
use crate::time::Instant;
use std::time::Duration;

/// What kind of attempt a dispatch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptKind {
    /// The request's first attempt (possibly rerouted past a refusing target).
    First,
    /// Another attempt on the same target.
    Retry,
    /// The first attempt on a later target after a failure.
    Fallback,
}

impl AttemptKind {
    /// What an attempt of this kind asks of the provider's allowance, for
    /// a request that asks `request`, on a target of the route's first
    /// entry (`primary`: the primary, or a member of a balanced group in
    /// first place) or a later one: the one admission rule the gateway and
    /// the simulator both apply.
    pub fn ask(self, request: crate::allowance::Ask, primary: bool) -> crate::allowance::Ask {
        request.for_attempt(primary, self == AttemptKind::Retry)
    }
}

/// Send an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatch {
    /// Index into the route's targets.
    pub target: usize,
    /// The attempt's timeout (never past the deadline minus the margin).
    pub timeout: Duration,
    /// 1-based count of attempts this request has made, this one included.
    pub attempt: u32,
    /// First, retry or fallback.
    pub kind: AttemptKind,
    /// Twice the target's learned p99 attempt time, when it is shorter than
    /// the timeout: an attempt still without a first byte then is stall
    /// evidence, which the driver reports with
    /// [`RoutePolicy::stalled`](super::RoutePolicy::stalled).
    pub stall_after: Option<Duration>,
    /// Why the primary refused the request, when this attempt goes to a
    /// later target and no attempt has been answered yet: the first attempt
    /// sent past a refusing primary, or the fallback after the driver could
    /// not send the primary's dispatch
    /// ([`RoutePolicy::refuse`](super::RoutePolicy::refuse)).
    pub primary_refused: Option<PrimaryRefusal>,
}

/// What refused the primary target of a request that went on to a later one
/// without an answer from the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryRefusal {
    /// Its breaker (the model's or the provider-wide one) is open.
    CircuitOpen,
    /// A 429 throttled its model: its paced slot is not yet due.
    Throttled,
    /// The provider's allowance (`rate_limit`) is spent for now.
    RateLimited,
    /// Its breaker closed after an outage and the ramp back refused this one.
    Recovering,
    /// Its provider's `max_in_flight` is reached.
    Shed,
    /// A caller's own retry found the primary's retry budget empty.
    BudgetExhausted,
}

impl PrimaryRefusal {
    /// The refusal's label: `circuit_open`, `throttled`, `rate_limited`,
    /// `circuit_recovering`, `shed` or `budget_exhausted`.
    pub fn as_str(self) -> &'static str {
        match self {
            PrimaryRefusal::CircuitOpen => "circuit_open",
            PrimaryRefusal::Throttled => "throttled",
            PrimaryRefusal::RateLimited => "rate_limited",
            PrimaryRefusal::Recovering => "circuit_recovering",
            PrimaryRefusal::Shed => "shed",
            PrimaryRefusal::BudgetExhausted => "budget_exhausted",
        }
    }

    pub(super) fn of(r: Refusal) -> Self {
        match r {
            Refusal::CircuitOpen { .. } => PrimaryRefusal::CircuitOpen,
            Refusal::Throttled { .. } => PrimaryRefusal::Throttled,
            Refusal::RateLimited { .. } => PrimaryRefusal::RateLimited,
            Refusal::Recovering { .. } => PrimaryRefusal::Recovering,
            Refusal::Shed | Refusal::PoolExhausted => PrimaryRefusal::Shed,
        }
    }
}

/// The planner's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Dispatch(Dispatch),
    /// Sleep until then, then ask again.
    Wait {
        until: Instant,
    },
    Fail(Failure),
}
