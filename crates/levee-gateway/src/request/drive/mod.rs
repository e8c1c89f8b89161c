//! Driving the planner for one admitted request: dispatch the attempts it asks
//! for, sleep through its waits, deliver a success (buffered, or relayed as a
//! stream from its commit point) or turn its verdict into a [`LeveeError`].
//! Every rule about whether, when and where to send is the planner's; this
//! module only does the I/O and reports each step to the request's
//! [`Observer`], which keeps the books (metrics, census, log line, traces,
//! tape).

use crate::http::collect::{collect_until, CollectError};
use crate::http::rawfields::RawFields;
use crate::http::respond::{copy_headers, relayed, Body, LeveeError, Stamp, Verdict, Why};
use crate::observe::event::RequestEvent;
use crate::observe::event::{Finished, LastError};
use crate::observe::outcome::AttemptResult;
use crate::request::attempt::{AttemptFinisher, GatewayDeps, Seen};
use crate::request::observer::{is_foreign, Observer};
use crate::request::plan::Plan;
use crate::request::stream::RelayBody;
use crate::runtime::shared::Shared;
use crate::state::idempotency::{Lease, Stored};
use crate::upstream::build_request_with;
use crate::upstream::UpstreamBody;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use http::Response;
use http_body_util::BodyExt;
use levee_policy::planner::{Decision, Dispatch};
use levee_policy::{Class, Failure, Outcome, Reason};
use levee_wire::{headers, Dialect};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

mod deliver;
mod dispatch;
use deliver::*;

/// Most of an upstream error body we keep to pass on or log.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Most of an upstream success body we buffer (non-streaming).
const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

/// One admitted request, as the driver needs it.
pub(crate) struct Ctx {
    pub(crate) shared: Arc<Shared>,
    /// The route bulkhead slot; a committed stream carries it until it ends.
    pub(crate) bulkhead: Option<levee_policy::ConcurrencyGuard>,
    pub(crate) route: usize,
    pub(crate) dialect: Dialect,
    /// The caller's method, sent upstream as it came.
    pub(crate) method: http::Method,
    /// Sent at most once: the route's one-attempt policy applies.
    pub(crate) once: bool,
    pub(crate) parts_headers: HeaderMap,
    /// What each target is sent, prepared at admission (one list: one
    /// allocation per request, where a list per field took four).
    pub(crate) plans: Vec<Plan>,
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) idem: HeaderValue,
    /// The caller's SDK says this is its own retry: it spends a retry token.
    pub(crate) caller_retry: bool,
    /// A stream's caller's own deadline, unclamped by the route: after the
    /// first byte only it (and the idle timer) ends the stream.
    pub(crate) stream_deadline: Option<levee_policy::Instant>,
    /// Its place in the providers' allowances (tokens, priority, share).
    pub(crate) ask: levee_policy::allowance::Ask,
    /// It creates an object the provider stores (`POST /v1/responses`):
    /// the answer's id is noted with the provider that answered.
    pub(crate) creates_stored: bool,
}

/// How long a committed stream whose caller set no deadline may run (the
/// idle timer still ends a stalled one): a day.
const NO_DEADLINE: std::time::Duration = std::time::Duration::from_secs(86_400);

/// The driver's state for one request: the request's policy state (inside
/// the finisher), its books, the last upstream error and the idempotency
/// lease, which a delivered answer completes.
struct Driver<'a> {
    ctx: Ctx,
    /// The generation `ctx` holds too, borrowed from the request's answer
    /// for as long as the driver runs: a method that changes the driver
    /// reads the config through it without cloning `ctx`'s `Arc` (two
    /// atomic read-modify-writes a clone, six clones a request).
    shared: &'a Shared,
    /// What the core's dependencies saw in a decision, for the observer.
    seen: Seen,
    /// How many attempts the request has sent, for the 503 its answer
    /// becomes if the shutdown grace period ends first (a count the
    /// request's answer owns; the driver writes it at each dispatch).
    sent: &'a AtomicU32,
    fin: AttemptFinisher,
    obs: Observer,
    last_error: Option<LastError>,
    lease: Option<Lease>,
}

/// Holds the driver while it drives: dropped with an attempt in flight (the
/// request's future dropped: its caller left, or the grace period ended),
/// it charges that attempt's prompt, which the provider has read and bills.
struct Leaving<'d, 'a>(&'d mut Driver<'a>);

impl Drop for Leaving<'_, '_> {
    fn drop(&mut self) {
        let d = &mut *self.0;
        if d.fin.req.has_in_flight() {
            if let Some(t) = d.fin.settle_partial(None) {
                d.obs.report(RequestEvent::TokensUsed(t));
            }
        }
    }
}

/// Drives the planner until it delivers an answer or gives up.
///
/// The loop's future (the driver, ~0.8 KiB, and an attempt's, ~2.1 KiB)
/// has an allocation of its own. Inline, it was part of every future above
/// it on the request path, and each of those is copied whole into its
/// caller when first awaited: 5.0 KiB copied four times over per request,
/// against one allocation (boxing it cut 536 of 39,920 instructions). Not an `async fn`: its
/// arguments would stay in the future next to the driver they are moved
/// into (~850 bytes more per request); and the driver is borrowed by the
/// loop, not moved into it, which would keep it twice (an `async fn`'s
/// arguments keep their slot after they are moved).
pub(crate) fn run<'a>(
    shared: &'a Shared,
    ctx: Ctx,
    deadline: levee_policy::Instant,
    lease: Option<Lease>,
    obs: Observer,
    sent: &'a AtomicU32,
) -> Pin<Box<impl Future<Output = Result<Response<Body>, LeveeError>> + 'a>> {
    let fin = AttemptFinisher {
        shared: Arc::clone(&ctx.shared),
        route: ctx.route,
        once: ctx.once,
        req: levee_policy::RequestState::new(deadline).caller_retry(ctx.caller_retry),
    };
    let mut driver = Driver {
        ctx,
        shared,
        seen: Seen::default(),
        sent,
        fin,
        obs,
        last_error: None,
        lease,
    };
    // Written into its allocation, not moved there: `Box::pin` built the
    // future on the stack and copied it whole into the box.
    let run = Box::into_pin(Box::write(Box::new_uninit(), async move {
        let mut answer = {
            let leaving = Leaving(&mut driver);
            leaving.0.drive().await
        };
        // Answered by another target than the caller would expect, or not
        // at all: the answer says which target was passed over and why, so
        // a vendor switch is never silent.
        let skipped = driver.obs.skipped();
        if let Some(v) = skipped.and_then(|s| http::HeaderValue::from_str(s).ok()) {
            match &mut answer {
                Ok(a) => {
                    a.headers_mut().insert(headers::X_LEVEE_SKIPPED, v);
                }
                Err(e) => e.skipped = Some(v),
            }
        }
        // Answered without some of the caller's parameters: said, never silent.
        let dropped = driver.fin.req.attempts() > 0;
        let dropped = dropped
            .then(|| driver.ctx.plans.get(driver.fin.req.target()))
            .flatten()
            .and_then(|p| p.dropped.as_deref());
        if let (Some(d), Ok(a)) = (dropped, &mut answer) {
            if let Ok(v) = http::HeaderValue::from_str(d) {
                a.headers_mut().insert(headers::X_LEVEE_DROPPED_PARAMS, v);
            }
            driver.obs.dropped(d);
        }
        let answer = match answer {
            Ok(Answer::Stream(resp, raw, stamp)) => {
                // From the commit point the relay owns the request's books:
                // the stream's end closes them, not its head.
                let (head, mut relay) = resp.into_parts();
                relay.observed_by(driver.obs);
                let mut body = Body::relaying(relay, raw);
                *body.stamp_mut() = *stamp;
                return Ok(Response::from_parts(head, body));
            }
            Ok(Answer::Whole(resp)) => Ok(resp),
            Err(e) => Err(e),
        };
        driver.obs.answered(&answer);
        answer
    }));
    crate::request::fits_fast_path(&*run);
    run
}

impl Driver<'_> {
    /// The planner loop: wait, dispatch, or fail, until an answer.
    async fn drive(&mut self) -> Result<Answer, LeveeError> {
        let shared = self.shared;
        let policy = shared.config.routes[self.ctx.route].policy_for(self.ctx.once);
        let mut rng = shared.lazy_rng();
        loop {
            let now = shared.clock.now();
            let decision = {
                let mut deps = GatewayDeps {
                    shared,
                    route: self.ctx.route,
                    model: &self.ctx.model,
                    plans: &self.ctx.plans,
                    ask: self.ctx.ask,
                    seen: &self.seen,
                };
                policy.decide(&mut self.fin.req, &mut deps, now, &mut rng)
            };
            self.note_seen();
            match decision {
                Decision::Wait { until } => {
                    self.obs.report(RequestEvent::Waiting { now, until });
                    // A sleeping request gives its bulkhead slot back (a
                    // 30 % brownout with `retry-after: 10` shed 261 of 400
                    // fresh requests the provider would have answered,
                    // because waiters held the slots) and holds a waiting
                    // slot instead; when those are full too, it keeps its own.
                    let rt = &shared.routes[self.ctx.route];
                    let waiting = match self.ctx.bulkhead.is_some() {
                        true => rt.waiting.try_acquire(),
                        false => None,
                    };
                    if waiting.is_some() {
                        self.ctx.bulkhead = None;
                    }
                    tokio::time::sleep_until(shared.clock.to_tokio(until)).await;
                    self.obs.report(RequestEvent::Waited { since: now });
                    if let Some(w) = waiting {
                        drop(w);
                        match rt.bulkhead.try_acquire() {
                            Some(slot) => self.ctx.bulkhead = Some(slot),
                            None => break Err(self.fail(&levee_policy::Failure::shed())),
                        }
                    }
                }
                Decision::Fail(f) => break Err(self.fail(&f)),
                Decision::Dispatch(dispatch) => {
                    if let Some(answer) = self.attempt(dispatch, now).await {
                        break answer;
                    }
                }
            }
        }
    }

    /// Reports what the core's dependencies saw in the last decision: each
    /// skipped target the planner chose (counted and named once), and each
    /// retry its target's budget refused.
    fn note_seen(&mut self) {
        for t in self.seen.take_chosen_skipped() {
            if let Some(reason) = self.ctx.plans.get(t).and_then(|p| p.skip) {
                self.obs.report(RequestEvent::Skipped { target: t, reason });
            }
        }
        let mut refused = self.seen.take_budget_refused().peekable();
        if refused.peek().is_none() {
            return;
        }
        let shared = self.shared;
        let targets = &shared.config.routes[self.ctx.route].targets;
        for t in refused {
            if let Some(target) = targets.get(t) {
                let provider = &shared.providers[target.provider].name;
                self.obs.report(RequestEvent::BudgetExhausted { provider });
            }
        }
    }

    /// The planner gave up: the provider's own verdict for a deterministic
    /// client error, else Levee's error saying why.
    fn fail(&mut self, f: &Failure) -> LeveeError {
        let last_error = self.last_error.take();
        self.obs.report(RequestEvent::Failed {
            req: &self.fin.req,
            failure: f,
            last_error: last_error.as_ref(),
            model: &self.ctx.model,
        });
        let attempts = self.fin.req.attempts();
        let provider_said = last_error
            .as_ref()
            .and_then(|e| Dialect::provider_message(&e.body));
        let message = failure_message(f, attempts, self.obs.last_result(), provider_said);
        let why = crate::observe::outcome::failure_why(f.reason, self.obs.last_result());
        let mut err = match why {
            Why::Policy(_) => LeveeError::failure(f, message),
            other => LeveeError::of(
                other,
                format!("levee: {} after {attempts} attempt(s): the target's credentials could not be had, so nothing was sent; the gateway's log says why", other.as_str()),
            ),
        }
        .attempts(attempts);
        match last_error {
            // A deterministic client error: the provider's own verdict, unchanged.
            Some(e) if f.upstream_status && (400..500).contains(&e.status) && e.status != 429 => {
                // The target of the attempt that got the error.
                let body = match self.ctx.plans[self.fin.req.target()].crossing {
                    Some(c) => c.error(e.status, &e.body),
                    None => e.body,
                };
                err.verdict = Some(Box::new(Verdict {
                    status: e.status,
                    headers: e.headers,
                    body,
                }));
                err
            }
            _ => err,
        }
    }
}

enum Delivered {
    Done(Result<Answer, LeveeError>),
    Failed(Outcome, AttemptResult),
}

/// A provider's answer to relay: read whole, or a stream past its commit
/// point, whose relay takes the request's observer once the driver is done
/// with it. The relay is boxed (856 bytes): inline, it made every
/// request's answer, and the futures that carry it, that large.
pub(crate) enum Answer {
    Whole(Response<Body>),
    /// The stream's head, the head's fields relayed as bytes, and Levee's
    /// success fields (boxed: ~90 bytes, which every answer's enum and the
    /// futures that carry it would hold).
    Stream(Response<Box<RelayBody>>, RawFields, Box<Stamp>),
}

impl Answer {
    fn headers_mut(&mut self) -> &mut HeaderMap {
        match self {
            Answer::Whole(r) => r.headers_mut(),
            Answer::Stream(r, _, _) => r.headers_mut(),
        }
    }
}

/// What Levee says when it gives up: the reason, the attempts, why (the
/// reason's meaning, the last attempt's result) and what the provider said.
fn failure_message(
    f: &Failure,
    attempts: u32,
    last_result: Option<AttemptResult>,
    provider_said: Option<String>,
) -> String {
    let reason = f.reason.as_str();
    let mut msg = format!("levee: {reason} after {attempts} attempt(s)");
    match f.reason {
        Reason::DeadlineExceeded if attempts == 0 => msg = "levee: deadline_exceeded: no time left to start an attempt".into(),
        Reason::DeadlineExceeded => msg.push_str("; the caller's deadline cannot hold another attempt"),
        Reason::BudgetExhausted => msg.push_str("; the retry budget is spent (retries may add at most a fraction of successful traffic)"),
        Reason::CircuitOpen => msg.push_str("; the provider is failing for everyone, so Levee is failing fast"),
        Reason::CircuitRecovering => msg.push_str("; the provider is answering again after an outage, and Levee is ramping traffic back (at most 1.4x the rate before it) so the backlog does not knock it over"),
        Reason::Shed => msg.push_str("; the provider's max_in_flight is reached: rejected at once rather than queued"),
        Reason::RateLimited => msg.push_str("; the provider's request allowance is spent for now"),
        Reason::PoolExhausted => msg.push_str("; every connection to the provider (its max_connections) stayed busy for this attempt's share of its time: refused rather than queued"),
        _ => {}
    }
    match last_result {
        Some(AttemptResult::BodyCut) => msg.push_str("; the provider's 2xx answer broke off mid-body: it has already run the generation, so Levee does not run it again"),
        Some(AttemptResult::ResponseTooLarge) => msg.push_str(&format!("; the provider's answer is over Levee's {} MiB response limit, and a second attempt would be as large", MAX_RESPONSE_BODY >> 20)),
        _ => {}
    }
    if let Some(p) = provider_said {
        msg.push_str("; provider said: ");
        msg.push_str(&p);
    }
    msg
}
