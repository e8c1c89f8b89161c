//! Driving the planner for one admitted request: dispatch the attempts it asks
//! for, sleep through its waits, deliver a success (buffered, or relayed as a
//! stream from its commit point) or turn its verdict into a [`LeveeError`].
//! Every rule about whether, when and where to send is the planner's; this
//! module only does the I/O and reports each step to the request's
//! [`Observer`], which keeps the books (metrics, census, log line, traces,
//! tape).

use crate::http::collect::{collect_limited, CollectError};
use crate::http::respond::{copy_headers, full, relayed, Body, LeveeError, Verdict};
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
}

/// How long a committed stream whose caller set no deadline may run (the
/// idle timer still ends a stalled one): a day.
const NO_DEADLINE: std::time::Duration = std::time::Duration::from_secs(86_400);

/// The driver's state for one request: the request's policy state (inside
/// the finisher), its books, the last upstream error and the idempotency
/// lease, which a delivered answer completes.
struct Driver<'a> {
    ctx: Ctx,
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
        seen: Seen::default(),
        sent,
        fin,
        obs,
        last_error: None,
        lease,
    };
    Box::pin(async move {
        let answer = driver.drive().await;
        // Answered by another target than the caller would expect, or not
        // at all: the answer says which target was passed over and why, so
        // a vendor switch is never silent.
        let skipped = driver
            .obs
            .skipped()
            .and_then(|s| http::HeaderValue::from_str(s).ok());
        let mut answer = match answer {
            Ok(Answer::Stream(resp)) => {
                let (mut head, relay) = resp.into_parts();
                if let Some(v) = skipped {
                    head.headers.insert(headers::X_LEVEE_SKIPPED, v);
                }
                // From the commit point the relay owns the request's books:
                // the stream's end closes them, not its head.
                let relay = relay.observed_by(driver.obs);
                return Ok(Response::from_parts(head, relay.boxed_unsync()));
            }
            Ok(Answer::Whole(resp)) => Ok(resp),
            Err(e) => Err(e),
        };
        if let Some(v) = skipped {
            match &mut answer {
                Ok(resp) => {
                    resp.headers_mut().insert(headers::X_LEVEE_SKIPPED, v);
                }
                Err(e) => e.skipped = Some(v),
            }
        }
        driver.obs.answered(&answer);
        answer
    })
}

impl Driver<'_> {
    /// The planner loop: wait, dispatch, or fail, until an answer.
    async fn drive(&mut self) -> Result<Answer, LeveeError> {
        let shared = Arc::clone(&self.ctx.shared);
        let policy = shared.config.routes[self.ctx.route].policy_for(self.ctx.once);
        let mut rng = shared.rng();
        loop {
            let now = shared.clock.now();
            let decision = {
                let mut deps = GatewayDeps {
                    shared: &shared,
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
        let shared = Arc::clone(&self.ctx.shared);
        let targets = &shared.config.routes[self.ctx.route].targets;
        for t in self.seen.take_budget_refused() {
            if let Some(target) = targets.get(t) {
                let provider = &shared.providers[target.provider].name;
                self.obs.report(RequestEvent::BudgetExhausted { provider });
            }
        }
    }

    /// Sends one attempt; `Some` when it produced the request's answer. Its
    /// head must come by the route's `first_byte_timeout` (a stream's first
    /// event is waited for within it too): until then a failure can still
    /// be retried, so a stalled provider is given up on while a retry or
    /// the backup can still use the time.
    async fn attempt(
        &mut self,
        d: Dispatch,
        now: levee_policy::Instant,
    ) -> Option<Result<Answer, LeveeError>> {
        let shared = Arc::clone(&self.ctx.shared);
        let route = &shared.config.routes[self.ctx.route];
        let provider = &shared.providers[route.targets[d.target].provider];
        if self.refused_by_shared_allowance(provider, now).await {
            return None;
        }
        let ctx = &self.ctx;
        // `build_request_with` forwards an allow-list per provider API: the
        // caller's vendor headers never reach a provider of the other dialect.
        let mut upstream_req = build_request_with(
            provider,
            ctx.method.clone(),
            &ctx.parts_headers,
            ctx.plans[d.target].uri.clone(),
            ctx.plans[d.target].body.clone(),
            d.timeout,
            Some(&ctx.idem),
        );
        self.started(&d, now, &mut upstream_req.fields);
        // A cloud's signature or token goes on last: it covers the fields above.
        if provider.platform.authorizes() {
            if let Err(e) = provider
                .platform
                .authorize(&mut upstream_req, shared.clock.unix_ms())
                .await
            {
                tracing::warn!(provider = %provider.name, error = %e, "attempt not authorised");
                self.finished(&d, now, Outcome::ConnectError, AttemptResult::Credentials);
                return None;
            }
        }
        let attempt_deadline = shared.clock.to_tokio(now + d.timeout);
        let head_deadline = match route.first_byte_timeout {
            Some(t) => attempt_deadline.min(shared.clock.to_tokio(now + t)),
            None => attempt_deadline,
        };
        let send = provider.send(upstream_req);
        // Past the target's learned p99 with no head while the caller still
        // waits: stall evidence for its breaker; the attempt goes on.
        let stall_at = d
            .stall_after
            .map(|after| shared.clock.to_tokio(now + after));
        let result = match stall_at.filter(|at| *at < head_deadline) {
            Some(stall_at) => {
                let mut send = std::pin::pin!(send);
                match tokio::time::timeout_at(stall_at, send.as_mut()).await {
                    Ok(r) => Ok(r),
                    Err(_) => {
                        self.fin.stalled();
                        tokio::time::timeout_at(head_deadline, send).await
                    }
                }
            }
            None => tokio::time::timeout_at(head_deadline, send).await,
        };
        let (outcome, result) = match result {
            Err(_) => (Outcome::Timeout, AttemptResult::Timeout),
            Ok(Err(e)) => (Outcome::ConnectError, crate::upstream::failure_result(&e)),
            Ok(Ok(resp)) => {
                let resp = if provider.platform.maps_answers() {
                    provider.platform.answer(resp, self.ctx.stream)
                } else {
                    resp
                };
                note_reported(&shared, provider, resp.headers());
                let status = resp.status().as_u16();
                // The core's classifier says what is an answer (1xx–3xx
                // included: a provider's redirect is passed on, never
                // retried); the driver only acts on it.
                let answer = route.policy.classifier().classify(Outcome::Status {
                    status,
                    retry_after: None,
                }) == Class::Success;
                if answer {
                    match self.deliver(resp, attempt_deadline, now).await {
                        Delivered::Done(r) => return Some(r),
                        Delivered::Failed(o, l) => {
                            // The answer describes this attempt, not an earlier error.
                            self.last_error = None;
                            (o, l)
                        }
                    }
                } else {
                    self.upstream_error(resp, attempt_deadline).await
                }
            }
        };
        self.finished(&d, now, outcome, result);
        None
    }

    /// A shared (cross-replica) allowance is checked here, outside the
    /// core: it needs a Redis round trip. A refusal is the core's to book.
    async fn refused_by_shared_allowance(
        &mut self,
        provider: &crate::upstream::ProviderRuntime,
        now: levee_policy::Instant,
    ) -> bool {
        let shared = &self.ctx.shared;
        let (Some(rate), Some(redis)) = (&provider.shared_rate, &shared.redis) else {
            return false;
        };
        match rate
            .check(redis, &provider.name, now, self.ctx.ask.cost)
            .await
        {
            Ok(()) => false,
            Err(wait) => {
                self.fin
                    .refuse(levee_policy::Refusal::RateLimited { until: now + wait });
                true
            }
        }
    }

    /// The attempt `d` is about to be sent at `now`: counted for the 503
    /// the answer becomes if the grace period ends first, reported, and its trace fields set on `fields`.
    fn started(
        &mut self,
        d: &Dispatch,
        now: levee_policy::Instant,
        fields: &mut crate::http::outbound::Fields,
    ) {
        let (n, deadline) = (self.fin.req.attempts(), self.fin.req.deadline());
        self.sent.store(n, Ordering::Relaxed);
        self.obs.report(RequestEvent::AttemptStarted {
            dispatch: d,
            n,
            deadline,
            now,
        });
        self.obs.trace_attempt(fields);
    }

    /// The attempt `d`, sent at `started`, ended without an answer to
    /// relay: recorded in the core and reported to the observer.
    fn finished(
        &mut self,
        d: &Dispatch,
        started: levee_policy::Instant,
        outcome: Outcome,
        result: AttemptResult,
    ) {
        let class = self.fin.record(outcome);
        self.obs.report(RequestEvent::AttemptFinished(Finished {
            target: d.target,
            started,
            outcome,
            result,
            class,
            error: self.last_error.as_ref(),
        }));
    }

    /// A provider's error answer: read (capped, redacted) and kept as the
    /// last error; returns the attempt's outcome and result.
    async fn upstream_error(
        &mut self,
        resp: Response<UpstreamBody>,
        until: tokio::time::Instant,
    ) -> (Outcome, AttemptResult) {
        let shared = &self.ctx.shared;
        let status = resp.status().as_u16();
        // What the provider asked for, uncapped: the core applies the
        // route's cap to the request, the model and the provider alike.
        let retry_after = levee_policy::retry_after::requested(
            resp.headers()
                .get(headers::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            resp.headers()
                .get(headers::RETRY_AFTER_MS)
                .map(|v| v.as_bytes()),
            shared.clock.unix_ms(),
        );
        let mut headers = resp.headers().clone();
        shared.secrets.headers(&mut headers);
        let body = shared
            .secrets
            .bytes(read_capped(resp.into_body(), MAX_ERROR_BODY, until).await);
        let foreign = is_foreign(status, &body);
        self.last_error = Some(LastError {
            status,
            headers,
            body,
            foreign,
        });
        let outcome = Outcome::Status {
            status,
            retry_after,
        };
        (outcome, AttemptResult::of_error_status(status, foreign))
    }

    /// A 2xx head arrived: buffer a plain answer, or hold a stream's head
    /// until its first chunk (the commit point) and relay the rest.
    async fn deliver(
        &mut self,
        resp: Response<UpstreamBody>,
        attempt_deadline: tokio::time::Instant,
        started: levee_policy::Instant,
    ) -> Delivered {
        let (parts, body) = resp.into_parts();
        let is_sse = parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if self.ctx.stream && is_sse {
            self.deliver_stream(parts, body, attempt_deadline, started)
                .await
        } else {
            self.deliver_buffered(parts, body, attempt_deadline, started)
                .await
        }
    }

    /// Holds a stream's head until its first whole event (the commit
    /// point), then relays it to the caller.
    async fn deliver_stream(
        &mut self,
        parts: http::response::Parts,
        mut body: UpstreamBody,
        attempt_deadline: tokio::time::Instant,
        started: levee_policy::Instant,
    ) -> Delivered {
        let shared = Arc::clone(&self.ctx.shared);
        let route = &shared.config.routes[self.ctx.route];
        let first_deadline = match route.first_byte_timeout {
            Some(t) => attempt_deadline.min(shared.clock.to_tokio(started + t)),
            None => attempt_deadline,
        };
        let mut framer = crate::http::sse::EventFramer::new();
        let first = loop {
            match tokio::time::timeout_at(first_deadline, body.frame()).await {
                Err(_) => return Delivered::Failed(Outcome::Timeout, AttemptResult::Timeout),
                // The stream ended before a blank line: what it sent is the
                // answer (a retry would run the generation again).
                Ok(None) if framer.has_partial() => break framer.flush(),
                // Cut before the commit point: nothing reached the caller, so
                // it may be retried as a connection failure (`connect_error`
                // in `retry.on`), but it is not one: labelled as what it is.
                Ok(None) | Ok(Some(Err(_))) => {
                    return Delivered::Failed(
                        Outcome::ConnectError,
                        AttemptResult::CutBeforeFirstEvent,
                    )
                }
                Ok(Some(Ok(frame))) => {
                    if let Ok(d) = frame.into_data() {
                        let whole = framer.push(&d);
                        if !whole.is_empty() {
                            break whole;
                        }
                    }
                }
            }
        };
        // Commit: from here on, no retry; the stream ends by the caller's deadline.
        self.fin.req.commit();
        let target = self.fin.req.target();
        let attempts = self.fin.req.attempts();
        self.obs.report(RequestEvent::Delivered {
            req: &self.fin.req,
            started,
            head: &parts,
            body: None,
            model: &self.ctx.model,
        });
        let recording = shared.recorder.is_some();
        // A stream is not stored for replay, but its key stays held (and its
        // bulkhead slot taken) until the stream ends.
        let holds = crate::request::stream::Holds {
            _bulkhead: self.ctx.bulkhead.take(),
            _lease: self.lease.take(),
        };
        let finisher = AttemptFinisher {
            shared: Arc::clone(&shared),
            route: self.ctx.route,
            once: self.ctx.once,
            req: std::mem::replace(
                &mut self.fin.req,
                levee_policy::RequestState::new(levee_policy::Instant::ZERO),
            ),
        };
        let start = crate::request::stream::RelayStart {
            first,
            framer,
            idle: route.stream_idle_timeout,
            // After the commit point only the caller's own deadline (and the
            // idle timer) applies: the route's deadline bounds the attempts.
            deadline: match self.ctx.stream_deadline {
                Some(d) => shared.clock.to_tokio(d - route.policy.margin()),
                None => shared.clock.to_tokio(started) + NO_DEADLINE,
            },
            dialect: self.ctx.dialect,
            clock: shared.clock,
            translate: self.ctx.plans[target]
                .crossing
                .and_then(|c| c.stream(shared.clock.unix_ms() / 1000)),
        };
        let grace = crate::runtime::shutdown::GraceWatch::new(&shared.grace_over);
        let relay = RelayBody::new(start, body, finisher, recording, holds, grace);
        let provider = &shared.providers[route.targets[target].provider];
        let mut headers = parts.headers;
        // A provider may echo the key in a successful answer's head too.
        shared.secrets.headers(&mut headers);
        Delivered::Done(Ok(Answer::Stream(relayed(
            parts.status,
            headers,
            relay,
            attempts,
            provider.name_header.as_ref(),
        ))))
    }

    /// A plain answer's 2xx head means the provider has run the generation:
    /// the body is read until the caller's deadline, and a body that fails
    /// is never fetched again (a too-large one would be as large again; a
    /// broken one would run the generation twice). Only the planner's
    /// deadline rule applies to a body that has not arrived by then.
    async fn deliver_buffered(
        &mut self,
        parts: http::response::Parts,
        body: UpstreamBody,
        attempt_deadline: tokio::time::Instant,
        started: levee_policy::Instant,
    ) -> Delivered {
        let shared = Arc::clone(&self.ctx.shared);
        let route = &shared.config.routes[self.ctx.route];
        let declared = http_body::Body::size_hint(&body).exact();
        if declared.is_some_and(|n| n > MAX_RESPONSE_BODY as u64) {
            return Delivered::Failed(Outcome::ResponseTooLarge, AttemptResult::ResponseTooLarge);
        }
        let body_deadline = shared
            .clock
            .to_tokio(self.fin.req.deadline() - route.policy.margin())
            .max(attempt_deadline);
        let bytes = match read_limited(body, MAX_RESPONSE_BODY, body_deadline).await {
            Ok(b) => b,
            Err(BodyError::TimedOut) => {
                return Delivered::Failed(Outcome::Timeout, AttemptResult::BodyTimeout)
            }
            Err(BodyError::TooLarge) => {
                return Delivered::Failed(
                    Outcome::ResponseTooLarge,
                    AttemptResult::ResponseTooLarge,
                )
            }
            Err(BodyError::Broken) => {
                return Delivered::Failed(Outcome::FailedAfterFirstByte, AttemptResult::BodyCut)
            }
        };
        let status = parts.status.as_u16();
        // The tokens the answer used settle what its admission estimated.
        if let Some(used) = crate::upstream::allowance::usage(&bytes) {
            if let Some(tokens) = self.fin.settle(used) {
                self.obs.report(RequestEvent::TokensUsed(tokens));
            }
        }
        self.fin.record(Outcome::Status {
            status,
            retry_after: None,
        });
        self.obs.report(RequestEvent::Delivered {
            req: &self.fin.req,
            started,
            head: &parts,
            body: Some(&bytes),
            model: &self.ctx.model,
        });
        let target = self.fin.req.target();
        let attempts = self.fin.req.attempts();
        // The backup's answer in the caller's dialect.
        let bytes = match self.ctx.plans[target]
            .crossing
            .map(|c| c.response(&bytes, shared.clock.unix_ms() / 1000))
        {
            None => bytes,
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                let msg = format!("levee: upstream_error: {e}");
                return Delivered::Done(Err(LeveeError::upstream_error(msg).attempts(attempts)));
            }
        };
        let provider = &shared.providers[route.targets[target].provider];
        let mut parts = parts;
        shared.secrets.headers(&mut parts.headers);
        let stored_headers = self.lease.is_some().then(|| {
            let mut headers = HeaderMap::new();
            copy_headers(&parts.headers, &mut headers);
            headers
        });
        let out = relayed(
            parts.status,
            parts.headers,
            full(bytes.clone()),
            attempts,
            provider.name_header.as_ref(),
        );
        if let (Some(l), Some(headers)) = (self.lease.take(), stored_headers) {
            let stored = Stored {
                status,
                headers,
                body: bytes,
            };
            // Boxed: only keyed requests get here, and held inline its
            // future (~1.7 KiB) would enlarge every request's future.
            Box::pin(l.complete(stored, shared.clock.now())).await;
        }
        Delivered::Done(Ok(Answer::Whole(out)))
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
        let mut err = LeveeError::failure(
            f,
            failure_message(f, attempts, self.obs.last_result(), provider_said),
        )
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

// A stream's answer holds its relay, the request's observer inside it
// (1.3 KiB): moved once from the attempt to the answer, never held across
// an await, and boxed with the relay as the response body; boxing it here
// would cost every stream an allocation.
#[allow(clippy::large_enum_variant)]
enum Delivered {
    Done(Result<Answer, LeveeError>),
    Failed(Outcome, AttemptResult),
}

/// A provider's answer to relay: read whole, or a stream past its commit
/// point, whose relay takes the request's observer once the driver is done
/// with it.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Answer {
    Whole(Response<Body>),
    Stream(Response<RelayBody>),
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

async fn read_capped(body: UpstreamBody, cap: usize, until: tokio::time::Instant) -> Bytes {
    read_limited(body, cap, until).await.unwrap_or_default()
}

/// Why a body could not be read whole.
#[derive(Debug)]
enum BodyError {
    /// Not complete by the given instant.
    TimedOut,
    /// Over the cap.
    TooLarge,
    /// The connection broke off (or the framing was invalid) mid-body.
    Broken,
}

/// Reads a whole body up to `cap` bytes before `until`.
async fn read_limited(
    body: UpstreamBody,
    cap: usize,
    until: tokio::time::Instant,
) -> Result<Bytes, BodyError> {
    match tokio::time::timeout_at(until, collect_limited(body, cap)).await {
        Err(_) => Err(BodyError::TimedOut),
        Ok(Err(CollectError::TooLarge)) => Err(BodyError::TooLarge),
        Ok(Err(CollectError::Broken)) => Err(BodyError::Broken),
        Ok(Ok(b)) => Ok(b),
    }
}

/// What a provider's answer says is left of its allowance corrects Levee's
/// view of it, before the provider has to say 429.
fn note_reported(
    shared: &Shared,
    provider: &crate::upstream::ProviderRuntime,
    headers: &http::HeaderMap,
) {
    let mut reported =
        crate::upstream::allowance::reported(headers, shared.clock.unix_ms()).peekable();
    if reported.peek().is_some() {
        let now = shared.clock.now();
        let mut state = provider.lock();
        for (meter, r) in reported {
            state.reported(now, meter, r);
        }
    }
}
