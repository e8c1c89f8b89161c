//! Levee's retry-policy core: every rule about whether, when and where to send
//! an attempt, as pure functions and plain structs.
//!
//! It is the one place those rules live. The gateway drives it on tokio's
//! clock, the simulator on a virtual clock, the tests on numbers; all three
//! call the same [`planner::RoutePolicy::decide`]. It does no I/O, reads no
//! clock (time comes in as [`Instant`] and wall-clock unix milliseconds) and no
//! global RNG (a seeded [`rand::Rng`] is passed in); `clippy.toml` bans the
//! calls that would. It is not a client or a server: it never sees a socket, a
//! future or a header map — only the values a driver extracts from them.
#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod admission;
pub mod allowance;
pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod civil;
pub mod classify;
pub mod deadline;
pub mod graded;
pub mod learn;
pub mod planner;
pub mod provider;
pub mod retry_after;
pub mod spend;
pub mod time;

pub use admission::{ConcurrencyGuard, ConcurrencyLimiter, Gcra};
pub use backoff::{Backoff, Jitter};
pub use breaker::{BreakerSettings, BreakerState, CircuitBreaker};
pub use budget::{BudgetSettings, RetryBudget};
pub use classify::{Class, Classifier, Outcome, RetryOn};
pub use deadline::{DeadlineError, DeadlineHeaders, DeadlinePolicy};
pub use planner::{
    AttemptKind, CensusRow, Decision, Dependencies, Deps, Dispatch, Failure, PrimaryRefusal,
    Reason, RequestState, RoutePolicy, Step,
};
pub use provider::{Permit, ProviderState, Refusal};
pub use time::Instant;
