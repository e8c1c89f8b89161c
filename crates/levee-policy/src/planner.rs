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

use crate::backoff::{Backoff, Jitter};
use crate::budget::RetryBudget;
use crate::classify::{Class, Classifier, Outcome};
use crate::provider::{Permit, ProviderState, Refusal};
use crate::time::Instant;
use rand::Rng;
use std::time::Duration;

/// The least spread added to a Retry-After wait (or the first backoff cap,
/// when larger), so that clients told "1 s" together do not return together.
pub const RETRY_AFTER_SPREAD: Duration = Duration::from_millis(250);

/// The return margin: time kept to send our own answer before the deadline.
pub const DEFAULT_MARGIN: Duration = Duration::from_millis(50);

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
        }
    }

    /// The status Levee answers with when no upstream status is passed on.
    pub fn status(self) -> u16 {
        match self {
            Reason::DeadlineExceeded => 504,
            Reason::Shed | Reason::CircuitOpen | Reason::CircuitRecovering => 503,
            Reason::RateLimited => 429,
            Reason::BadRequest => 400,
            Reason::BudgetExhausted | Reason::UpstreamError => 502,
        }
    }

    /// All reasons, for pre-registering metric labels.
    pub const ALL: [Reason; 8] = [
        Reason::DeadlineExceeded,
        Reason::Shed,
        Reason::CircuitOpen,
        Reason::BudgetExhausted,
        Reason::RateLimited,
        Reason::UpstreamError,
        Reason::BadRequest,
        Reason::CircuitRecovering,
    ];
}

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
    /// evidence, which the driver reports with [`RoutePolicy::stalled`].
    pub stall_after: Option<Duration>,
    /// Why the primary refused the request, when this attempt goes to a
    /// later target and no attempt has been answered yet: the first attempt
    /// sent past a refusing primary, or the fallback after the driver could
    /// not send the primary's dispatch ([`RoutePolicy::refuse`]).
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

    fn of(r: Refusal) -> Self {
        match r {
            Refusal::CircuitOpen { .. } => PrimaryRefusal::CircuitOpen,
            Refusal::Throttled { .. } => PrimaryRefusal::Throttled,
            Refusal::RateLimited { .. } => PrimaryRefusal::RateLimited,
            Refusal::Recovering { .. } => PrimaryRefusal::Recovering,
            Refusal::Shed => PrimaryRefusal::Shed,
        }
    }
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

/// Why a route policy was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("a route needs at least one target")]
    NoTargets,
    #[error("`max_attempts` must be between 1 and 20 (got {0})")]
    MaxAttempts(u32),
    #[error("`expected_attempt_ms` must be positive")]
    ExpectedAttempt,
}

/// What the planner needs from the world: provider admission and per-target
/// retry budgets. [`Deps`] implements it over plain structs (simulator, tests);
/// the gateway implements it over its shared, locked state.
pub trait Dependencies {
    /// Whether target `t`'s provider would admit an attempt now (takes nothing).
    fn check(&self, t: usize, now: Instant) -> Result<(), Refusal>;
    /// Admits an attempt to target `t`'s provider.
    fn admit(&mut self, t: usize, now: Instant) -> Result<Permit, Refusal>;
    /// [`Dependencies::check`] for an attempt of `kind`: its place in the
    /// provider's allowance (retries and fallback traffic leave a floor for
    /// first attempts).
    fn check_kind(&self, t: usize, now: Instant, kind: AttemptKind) -> Result<(), Refusal> {
        let _ = kind;
        self.check(t, now)
    }
    /// [`Dependencies::admit`] for an attempt of `kind`.
    fn admit_kind(&mut self, t: usize, now: Instant, kind: AttemptKind) -> Result<Permit, Refusal> {
        let _ = kind;
        self.admit(t, now)
    }
    /// Records an admitted attempt's result on target `t`'s provider;
    /// returns whether retries on its model were winning before it (see
    /// [`crate::learn::Retries`]; `None`: too few to tell).
    fn finish(&mut self, t: usize, now: Instant, permit: Permit, class: Class) -> Option<bool>;
    /// Withdraws one retry from target `t`'s budget.
    fn withdraw(&mut self, t: usize, now: Instant) -> bool;
    /// Deposits a success into target `t`'s budget.
    fn deposit(&mut self, t: usize, now: Instant);
    /// Refunds `tokens` retries that worked into target `t`'s budget.
    fn refund(&mut self, t: usize, now: Instant, tokens: u32);
    /// Target `t`'s learned attempt time (a recent p99), if known.
    fn expected(&self, t: usize, now: Instant) -> Option<Duration> {
        let _ = (t, now);
        None
    }
    /// The attempt on target `t` behind `permit` is past its learned p99
    /// with no first byte: count the stall against its model's breaker.
    fn stalled(&mut self, t: usize, now: Instant, permit: &mut Permit) {
        let _ = (t, now, permit);
    }
}

/// [`Dependencies`] over plain mutable state: `providers[target_provider[t]]`
/// for model `target_model[t]` (`""` where the slice is short), and `budgets[t]`.
#[derive(Debug)]
pub struct Deps<'a> {
    pub providers: &'a mut [ProviderState],
    pub target_provider: &'a [usize],
    pub target_model: &'a [&'a str],
    pub budgets: &'a mut [RetryBudget],
}

impl Deps<'_> {
    fn model(&self, t: usize) -> &str {
        self.target_model.get(t).copied().unwrap_or("")
    }
}

impl Dependencies for Deps<'_> {
    fn check(&self, t: usize, now: Instant) -> Result<(), Refusal> {
        self.providers[self.target_provider[t]].check(now, self.model(t))
    }
    fn admit(&mut self, t: usize, now: Instant) -> Result<Permit, Refusal> {
        let model = self.target_model.get(t).copied().unwrap_or("");
        self.providers[self.target_provider[t]].admit(now, model)
    }
    fn finish(&mut self, t: usize, now: Instant, permit: Permit, class: Class) -> Option<bool> {
        self.providers[self.target_provider[t]].finish(now, permit, class)
    }
    fn withdraw(&mut self, t: usize, now: Instant) -> bool {
        self.budgets[t].try_withdraw(now)
    }
    fn deposit(&mut self, t: usize, now: Instant) {
        self.budgets[t].deposit(now)
    }
    fn refund(&mut self, t: usize, now: Instant, tokens: u32) {
        self.budgets[t].refund(now, tokens)
    }
    fn expected(&self, t: usize, now: Instant) -> Option<Duration> {
        self.providers[self.target_provider[t]].expected(now, self.model(t))
    }
    fn stalled(&mut self, t: usize, now: Instant, permit: &mut Permit) {
        self.providers[self.target_provider[t]].stalled(now, permit)
    }
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
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    target: usize,
    permit: Permit,
    cut_by_deadline: bool,
    /// What a retry on this target would need besides its wait (an
    /// expected attempt, the fallback reserve, the margin), as learned at
    /// dispatch.
    retry_needs: Duration,
}

#[derive(Clone, Copy, Debug)]
struct Last {
    class: Class,
    status: Option<u16>,
    outcome: Outcome,
    /// Whether retries on its target were winning when it came back
    /// (`None`: too few retries to tell).
    winning: Option<bool>,
}

/// Attempts on one target while its retries are not winning, when
/// `max_attempts` allows more: the official SDKs' own count (1 + 2
/// retries). Retries that lose at a 60 % rate cost 1.96 requests a call at
/// three attempts and 2.34 at five, for answers the provider was refusing.
pub const LOSING_ATTEMPTS: u32 = 3;

#[derive(Clone, Copy, Debug)]
struct Pending {
    target: usize,
    at: Instant,
    kind: AttemptKind,
}

/// One logical request's progress. Create with [`RequestState::new`].
#[derive(Clone, Debug)]
pub struct RequestState {
    deadline: Instant,
    target: usize,
    attempts_on_target: u32,
    attempts: u32,
    committed: bool,
    in_flight: Option<InFlight>,
    last: Option<Last>,
    pending: Option<Pending>,
    /// Why the last try to go on was refused, for the final answer.
    blocked: Option<(Reason, Option<Duration>)>,
    /// The driver could not send the last dispatch (see [`RoutePolicy::refuse`]):
    /// go on from the target after this one.
    refused: Option<usize>,
    /// Tokens spent on the current target by retries after transient faults:
    /// refunded if the request succeeds there.
    refundable: u32,
    /// The caller marked this request as its own retry.
    caller_retry: bool,
    /// When the first attempt was sent.
    started: Option<Instant>,
    /// Why the primary refused the request without an attempt.
    primary_refused: Option<PrimaryRefusal>,
    /// The latest it may still wait for the allowance: its first slot when
    /// first refused, plus [`ALLOWANCE_PATIENCE`].
    allowance_by: Option<Instant>,
}

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
        self.target
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

/// A step of a route's retry schedule, for `levee check` and the census.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// 1-based attempt number within the request.
    pub attempt: u32,
    pub target: usize,
    pub kind: AttemptKind,
    /// The longest wait before it (the backoff cap).
    pub wait: Duration,
    /// When it starts at the latest, counting only waits (failures assumed instant).
    pub start_after: Duration,
    /// Remaining deadline needed at the moment the decision is made.
    pub needs_remaining: Duration,
    /// Least caller deadline (from arrival) for this step to start.
    pub needs_deadline: Duration,
}

/// What one caller's deadline allows on a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CensusRow {
    /// Attempts on the first target that can start.
    pub attempts_can_start: u32,
    pub retry_can_start: bool,
    /// `None` when the route has no fallback target.
    pub fallback_reachable: Option<bool>,
    /// The deadline is shorter than the first target's `expected_attempt`:
    /// slow answers become failures with no fallback.
    pub shorter_than_expected_attempt: bool,
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
        })
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
        if req.in_flight.is_some() {
            // The driver asked again without recording: treat the attempt as abandoned.
            self.abandon(req, deps, now);
        }
        let remaining = req.deadline.saturating_since(now);
        if let Some(t) = req.refused.take() {
            return self.fall_back(Inputs(req, deps, now, rng), t + 1);
        }
        if let Some(p) = req.pending {
            if now < p.at {
                return Decision::Wait { until: p.at };
            }
            req.pending = None;
            if p.kind == AttemptKind::First {
                // It waited for a throttled or ramping model's slot.
                return self.first(Inputs(req, deps, now, rng));
            }
            let needed = self.expected_now(deps, p.target, now)
                + self.reserve_for(deps, p.target, p.kind, now);
            if remaining >= needed + self.margin {
                match self.dispatch(req, deps, now, p.target, p.kind) {
                    Ok(d) => return Decision::Dispatch(d),
                    Err(r) => {
                        // Another waiter took the slot it waited for: wait
                        // for the next one while the deadline holds it.
                        if let Some(until) = self.waitable(deps, r, p.target, now, remaining, req) {
                            return wait_for(req, Pending { at: until, ..p }, rng);
                        }
                        req.blocked = Some(refusal_reason(r, now));
                    }
                }
            } else {
                req.blocked = Some((Reason::DeadlineExceeded, None));
            }
            return self.fall_back(Inputs(req, deps, now, rng), p.target + 1);
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
        let configured = self.expected[t];
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

    /// The request's first attempt: on the first target that admits it, or,
    /// when the primary is only pacing (a 429's throttle, the allowance, a
    /// recovery ramp) and the deadline holds the wait for its next slot,
    /// after that wait — the primary's vendor keeps its traffic. A first
    /// attempt needs only more than the return margin, on any target: the
    /// expected attempt is the slow end of a call, not its usual time, and
    /// a caller whose deadline is shorter than a backup's slow end still
    /// gets most of its answers from it.
    fn first<D: Dependencies, R: Rng + ?Sized>(&self, inputs: Inputs<'_, D, R>) -> Decision {
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
    fn waitable<D: Dependencies>(
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
            Refusal::CircuitOpen { .. } | Refusal::Shed => return None,
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

    fn plan_retry<D: Dependencies, R: Rng + ?Sized>(
        &self,
        inputs: Inputs<'_, D, R>,
        t: usize,
        remaining: Duration,
        last: Last,
    ) -> Result<Decision, (Reason, Option<Duration>)> {
        let Inputs(req, deps, now, rng) = inputs;
        // While retries on this target win, a transient fault (no
        // Retry-After, not an overload status) is retried after the first
        // step's jitter, not an exponential one: a second attempt is as good
        // now as later, and waiting only delays the answer (a 30 % brownout's
        // p99 went from 0.53 s to under 0.3 s). Retries that lose back off
        // exponentially, and pay for themselves from the budget.
        let winning_transient = last.winning == Some(true) && transient(last);
        let n = if winning_transient {
            0
        } else {
            req.attempts_on_target.saturating_sub(1)
        };
        let mut wait = self.backoff.delay(n, rng);
        let spread = |rng: &mut R| match self.backoff.jitter() {
            Jitter::None => Duration::ZERO,
            _ => {
                let width = self.backoff.cap(0).max(RETRY_AFTER_SPREAD);
                let cap = u64::try_from(width.as_nanos()).unwrap_or(u64::MAX);
                Duration::from_nanos(rng.gen_range(0..=cap))
            }
        };
        if self.respect_retry_after {
            if let Some(ra) = last.class.wait() {
                if ra > self.retry_after_cap {
                    // Longer than we hold a request: not waited on here.
                    return Err((non_retry_reason(last.class).0, Some(self.retry_after_cap)));
                }
                // Not before the server asked, and spread so that 24 workers
                // told "2 s" do not all come back in the same millisecond.
                wait = wait.max(ra + spread(rng));
            }
        }
        match deps.check_kind(t, now, AttemptKind::Retry) {
            Ok(()) => {}
            Err(Refusal::Throttled { until })
            | Err(Refusal::CircuitOpen { until })
            | Err(Refusal::Recovering { until }) => {
                wait = wait.max(until.saturating_since(now) + spread(rng));
            }
            // Shed / rate limit may clear by the time the wait is over.
            Err(_) => {}
        }
        let needed = wait
            + self.expected_now(deps, t, now)
            + self.reserve_after_now(deps, t, now)
            + self.margin;
        if remaining < needed {
            let ra = last.class.wait();
            return Err((Reason::DeadlineExceeded, ra));
        }
        // A retry after a 429 spends no retry budget: the model's pace
        // (what the provider accepts) bounds it, with `max_attempts`. Nor
        // does a retry after a transient fault while retries win: it would
        // be refunded when it works, and the budget held 11 of 800 calls of
        // a 30 % brownout from attempts that would have worked. An outage
        // (nothing wins) is the breaker's: 20 faults in a row open it.
        let paced = matches!(last.class, Class::Throttled { wait: Some(_), .. });
        if !paced && !winning_transient {
            if !deps.withdraw(t, now) {
                return Err((Reason::BudgetExhausted, None));
            }
            if transient(last) {
                req.refundable += 1;
            }
        }
        if wait.is_zero() {
            return self
                .dispatch(req, deps, now, t, AttemptKind::Retry)
                .map(Decision::Dispatch)
                .map_err(|r| refusal_reason(r, now));
        }
        let at = now + wait;
        req.pending = Some(Pending {
            target: t,
            at,
            kind: AttemptKind::Retry,
        });
        Ok(Decision::Wait { until: at })
    }

    fn fall_back<D: Dependencies, R: Rng + ?Sized>(
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

    fn dispatch<D: Dependencies>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
        t: usize,
        kind: AttemptKind,
    ) -> Result<Dispatch, Refusal> {
        // Each target's learned time is looked up once (the gateway locks
        // its provider for it).
        let learned = deps.expected(t, now);
        let expected = learned.map_or(self.expected[t], |l| l.min(self.expected[t]));
        let mut later = (t + 1..self.expected.len()).map(|u| self.expected_now(deps, u, now));
        let next = later.next();
        let reserve = next.unwrap_or_default() + later.sum::<Duration>();
        let (timeout, cut_by_deadline) = self.attempt_timeout(req, now, expected, next);
        let mut permit = deps.admit_kind(t, now, kind)?;
        if kind == AttemptKind::Retry && t == req.target {
            permit = permit.retry();
        }
        // Twice the p99: a healthy attempt a little past it (1 % are) is
        // not evidence; one with no first byte at twice it is.
        let stall_after = learned.map(|p99| p99 * 2).filter(|mark| *mark < timeout);
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
            target: t,
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

    fn fail(
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
                Reason::Shed => Failure::shed().retry_after,
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

    /// Records the in-flight attempt's outcome; returns its class.
    pub fn record<D: Dependencies>(
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
        // could have started (or the schedule was spent).
        let for_breaker = match (class, outcome) {
            (
                Class::Fault {
                    retryable: true,
                    wait,
                    provider_wide: false,
                },
                Outcome::Status { .. },
            ) if req.attempts_on_target < self.max_attempts && !req.committed => {
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
    pub fn refuse<D: Dependencies>(
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
    /// ([`Dispatch::stall_after`]) with no first byte while the caller still
    /// waits: stall evidence for the model's breaker, counted once. The
    /// attempt goes on until its timeout.
    pub fn stalled<D: Dependencies>(&self, req: &mut RequestState, deps: &mut D, now: Instant) {
        if let Some(f) = req.in_flight.as_mut() {
            deps.stalled(f.target, now, &mut f.permit);
        }
    }

    /// Gives back an in-flight attempt's permit without learning anything
    /// (caller left, driver dropped the attempt).
    pub fn abandon<D: Dependencies>(&self, req: &mut RequestState, deps: &mut D, now: Instant) {
        if let Some(f) = req.in_flight.take() {
            let _ = deps.finish(f.target, now, f.permit, Class::NotProviderFault);
        }
    }

    /// The route's schedule: each attempt the policy can make, with the least
    /// deadline that lets it start (failures assumed to come back at once;
    /// waits at their cap, so "can start" means "can always start").
    pub fn schedule(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut start = Duration::ZERO;
        for a in 0..self.max_attempts {
            let (wait, needs) = if a == 0 {
                (Duration::ZERO, self.margin + Duration::from_millis(1))
            } else {
                let w = self.backoff.cap(a - 1);
                (
                    w,
                    w + self.expected[0] + self.reserve_after[0] + self.margin,
                )
            };
            start += wait;
            steps.push(Step {
                attempt: a + 1,
                target: 0,
                kind: if a == 0 {
                    AttemptKind::First
                } else {
                    AttemptKind::Retry
                },
                wait,
                start_after: start,
                needs_remaining: needs,
                needs_deadline: start - wait + needs,
            });
        }
        for t in 1..self.expected.len() {
            let needs = self.expected[t] + self.margin;
            steps.push(Step {
                attempt: self.max_attempts + u32::try_from(t).unwrap_or(u32::MAX),
                target: t,
                kind: AttemptKind::Fallback,
                wait: Duration::ZERO,
                start_after: Duration::ZERO,
                needs_remaining: needs,
                needs_deadline: needs,
            });
        }
        steps
    }

    /// What a caller with this deadline gets from the route.
    pub fn census(&self, deadline: Duration) -> CensusRow {
        let steps = self.schedule();
        let primary: Vec<&Step> = steps.iter().filter(|s| s.target == 0).collect();
        let attempts_can_start = u32::try_from(
            primary
                .iter()
                .take_while(|s| deadline >= s.needs_deadline)
                .count(),
        )
        .unwrap_or(u32::MAX);
        let fallback_reachable = steps
            .iter()
            .find(|s| s.kind == AttemptKind::Fallback)
            .map(|s| deadline >= s.needs_deadline);
        CensusRow {
            attempts_can_start,
            retry_can_start: attempts_can_start >= 2,
            fallback_reachable,
            shorter_than_expected_attempt: deadline < self.expected[0],
        }
    }
}

/// What one [`RoutePolicy::decide`] decides with, as it hands it on to each
/// step of the plan: the request, its dependencies, the time of the
/// decision and the randomness its waits are spread with, in that order.
struct Inputs<'a, D: ?Sized, R: ?Sized>(&'a mut RequestState, &'a mut D, Instant, &'a mut R);

/// Waits for `p`'s slot, spread over [`RETRY_AFTER_SPREAD`] so that waiters
/// told the same slot do not all wake at once.
fn wait_for<R: Rng + ?Sized>(req: &mut RequestState, p: Pending, rng: &mut R) -> Decision {
    let spread = u64::try_from(RETRY_AFTER_SPREAD.as_nanos()).unwrap_or(0);
    let at = p.at + Duration::from_nanos(rng.gen_range(0..=spread));
    req.pending = Some(Pending { at, ..p });
    Decision::Wait { until: at }
}

fn refusal_reason(r: Refusal, now: Instant) -> (Reason, Option<Duration>) {
    let reason = match r {
        Refusal::CircuitOpen { .. } => Reason::CircuitOpen,
        Refusal::Throttled { .. } | Refusal::RateLimited { .. } => Reason::RateLimited,
        Refusal::Recovering { .. } => Reason::CircuitRecovering,
        Refusal::Shed => Reason::Shed,
    };
    (reason, r.retry_after(now))
}

/// Whether a retry after `last` may be refunded when it works: a transient
/// fault, not an overload signal (429, 529, or any Retry-After).
fn transient(last: Last) -> bool {
    matches!(last.class, Class::Fault { wait: None, .. }) && last.status != Some(529)
}

fn non_retry_reason(class: Class) -> (Reason, Option<Duration>) {
    match class {
        Class::Throttled { wait, .. } => (Reason::RateLimited, wait),
        Class::NotProviderFault => (Reason::DeadlineExceeded, None),
        _ => (Reason::UpstreamError, class.wait()),
    }
}
