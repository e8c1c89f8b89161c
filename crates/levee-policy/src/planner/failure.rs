//! Giving up: the reasons Levee fails a request for, and the answer it
//! sends (status, whether it is the provider's, `retry-after`).

use super::request::RequestState;
use super::{Decision, RoutePolicy};
use crate::classify::{Class, Outcome};
use crate::provider::Refusal;
use crate::time::Instant;
use std::time::Duration;

/// Why Levee gave up; also the `x-levee-reason` header value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    DeadlineExceeded,
    Shed,
    CircuitOpen,
    BudgetExhausted,
    RateLimited,
    UpstreamError,
    BadRequest,
    /// A model's breaker closed after an outage and is ramping back (at
    /// most 1.4× the rate before it tripped): the provider is answering,
    /// the ramp refused this one.
    CircuitRecovering,
    /// Every connection to the provider (`max_connections`) stayed busy
    /// for the attempt's share of its time: refused, never queued longer.
    PoolExhausted,
}

impl Reason {
    /// The header / metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::DeadlineExceeded => "deadline_exceeded",
            Reason::Shed => "shed",
            Reason::CircuitOpen => "circuit_open",
            Reason::BudgetExhausted => "budget_exhausted",
            Reason::RateLimited => "rate_limited",
            Reason::UpstreamError => "upstream_error",
            Reason::BadRequest => "bad_request",
            Reason::CircuitRecovering => "circuit_recovering",
            Reason::PoolExhausted => "pool_exhausted",
        }
    }

    /// The status Levee answers with when no upstream status is passed on.
    pub fn status(self) -> u16 {
        match self {
            Reason::DeadlineExceeded => 504,
            Reason::Shed
            | Reason::CircuitOpen
            | Reason::CircuitRecovering
            | Reason::PoolExhausted => 503,
            Reason::RateLimited => 429,
            Reason::BadRequest => 400,
            Reason::BudgetExhausted | Reason::UpstreamError => 502,
        }
    }

    /// All reasons, for pre-registering metric labels.
    pub const ALL: [Reason; 9] = [
        Reason::DeadlineExceeded,
        Reason::Shed,
        Reason::CircuitOpen,
        Reason::BudgetExhausted,
        Reason::RateLimited,
        Reason::UpstreamError,
        Reason::BadRequest,
        Reason::CircuitRecovering,
        Reason::PoolExhausted,
    ];
}

/// Give up, and how to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// `x-levee-reason`.
    pub reason: Reason,
    /// The status to answer with: the last upstream status when there was one.
    pub status: u16,
    /// Whether `status` is the provider's (its body may be passed on).
    pub upstream_status: bool,
    /// `retry-after` to send, when a wait is known.
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// How long a shed caller is told to wait.
    pub const SHED_RETRY_AFTER: Duration = Duration::from_secs(1);

    /// The answer to a request refused for capacity (a route bulkhead or a
    /// provider's in-flight cap): 503 at once, never queued, with a short
    /// `retry-after`. The one definition the gateway and the simulator use.
    pub const fn shed() -> Failure {
        Failure {
            reason: Reason::Shed,
            status: 503,
            upstream_status: false,
            retry_after: Some(Self::SHED_RETRY_AFTER),
        }
    }
}

impl RoutePolicy {
    pub(super) fn fail(
        &self,
        req: &RequestState,
        now: Instant,
        blocked: (Reason, Option<Duration>),
    ) -> Decision {
        let (reason, retry_after) = blocked;
        let _ = now;
        let status = req.last.and_then(|l| l.status);
        let (status, upstream_status) = match (status, reason) {
            // Levee's own refusals before any answer keep Levee's status.
            (Some(s), _) => (s, true),
            (None, Reason::UpstreamError | Reason::BudgetExhausted) => {
                match req.last.map(|l| l.outcome) {
                    Some(Outcome::Timeout) | Some(Outcome::SkippedNoDeadline) => (504, false),
                    _ => (502, false),
                }
            }
            (None, r) => (r.status(), false),
        };
        let retry_after = retry_after
            .or(match reason {
                Reason::Shed | Reason::PoolExhausted => Failure::shed().retry_after,
                _ => None,
            })
            .map(|d| d.min(self.retry_after_cap));
        Decision::Fail(Failure {
            reason,
            status,
            upstream_status,
            retry_after,
        })
    }
}

pub(super) fn refusal_reason(r: Refusal, now: Instant) -> (Reason, Option<Duration>) {
    let reason = match r {
        Refusal::CircuitOpen { .. } => Reason::CircuitOpen,
        Refusal::Throttled { .. } | Refusal::RateLimited { .. } => Reason::RateLimited,
        Refusal::Recovering { .. } => Reason::CircuitRecovering,
        Refusal::Shed => Reason::Shed,
        Refusal::PoolExhausted => Reason::PoolExhausted,
    };
    (reason, r.retry_after(now))
}

pub(super) fn non_retry_reason(class: Class) -> (Reason, Option<Duration>) {
    match class {
        Class::Throttled { wait, .. } => (Reason::RateLimited, wait),
        Class::NotProviderFault => (Reason::DeadlineExceeded, None),
        _ => (Reason::UpstreamError, class.wait()),
    }
}
