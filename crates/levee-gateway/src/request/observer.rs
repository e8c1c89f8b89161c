//! The request's observer: what happens to a request — refused, shed,
//! replayed, admitted, waiting, an attempt started or finished, delivered,
//! tokens used, failed, a stream ended — reaches it as one stream of
//! [`RequestEvent`] values, and it alone turns them into everything that
//! watches requests: the metrics, the census, the summary log line, the
//! trace spans and the `--record` tape. The driver decides; the observer
//! keeps the books.
//!
//! Events before a request has a route (or before it is admitted) are
//! booked by [`report`] over [`Shared`]; from admission on, one
//! [`Observer`] per request takes them in [`Observer::report`] and carries
//! what the books need (the route, the trace, the time spent outside the
//! gateway). A committed stream's relay owns the request's observer and
//! reports its tokens and its end to it, with the events it relayed when
//! the exchange is recorded. One read goes the other way: an attempt's
//! trace fields ([`Observer::trace_attempt`]).

use crate::http::respond::{Body, LeveeError, Why};
use crate::observe::event::{Finished, LastError, RequestEvent, StreamOutcome, TokensUsed};
use crate::observe::outcome::{AttemptResult, FallbackReason, RequestOutcome, SkipReason};
use crate::observe::record::TapeLine;
use crate::observe::telemetry::{AttemptTrace, RequestTrace};
use crate::runtime::shared::Shared;
use bytes::Bytes;
use http::Response;
use levee_policy::planner::{AttemptKind, Dispatch};
use levee_policy::{Class, Failure, Instant, Outcome, Reason, RequestState};
use levee_wire::Dialect;
use std::sync::Arc;
use std::time::Duration;

/// Books an event of a request without an observer (not admitted, or not
/// yet): counted over [`Shared`].
pub(crate) fn report(shared: &Shared, event: RequestEvent<'_>) {
    let m = &shared.metrics;
    match event {
        // Only an admitted request's observer has attempts, a stream to
        // end or a route to count tokens on.
        RequestEvent::Skipped { .. }
        | RequestEvent::Waiting { .. }
        | RequestEvent::Waited { .. }
        | RequestEvent::AttemptStarted { .. }
        | RequestEvent::AttemptFinished(_)
        | RequestEvent::Delivered { .. }
        | RequestEvent::Failed { .. }
        | RequestEvent::StreamEnded { .. }
        | RequestEvent::TokensUsed(_) => {}
        RequestEvent::Rejected(why) => m.reject(why),
        RequestEvent::Shed { route, reason } => {
            answered_by_name(shared, route, reason.into());
            m.attempts_per_request.observe(0.0);
        }
        RequestEvent::StateUnavailable { route } => {
            answered_by_name(shared, route, RequestOutcome::Failed(Why::StateUnavailable));
        }
        RequestEvent::FollowTimedOut { route } => {
            answered_by_name(shared, route, Reason::DeadlineExceeded.into());
        }
        RequestEvent::Replayed { route } => {
            m.replayed.inc();
            answered_by_name(shared, route, RequestOutcome::Replayed);
        }
        RequestEvent::CallerRetry => {
            m.caller_retries.inc();
        }
        RequestEvent::IdempotencyLocal => {
            m.idempotency_local.inc();
        }
        RequestEvent::TranslationRefused {
            route,
            provider,
            reason,
        } => m.translation_refused(route, provider, reason),
        RequestEvent::ShuttingDown => m.reject(Why::ShuttingDown),
        RequestEvent::BudgetExhausted { provider } => {
            m.budget_exhausted
                .get_or_create(&crate::observe::metrics::ProviderLabel {
                    provider: provider.to_string(),
                })
                .inc();
        }
    }
}

/// A request on the route named `route` was answered with `outcome`:
/// counted in `levee_requests_total` and in the route's recent window (the
/// status page's success ratio), alike.
fn answered_by_name(shared: &Shared, route: &str, outcome: RequestOutcome) {
    shared.metrics.request(route, outcome);
    if let Some(ri) = shared.census.route_index(route) {
        shared.census.answered(ri, outcome, shared.clock.now());
    }
}

/// Who sent a request and what it asked, for its log line.
pub(crate) struct Asked {
    /// `x-request-id`: the caller's, or one Levee made.
    pub id: http::HeaderValue,
    /// The gateway key the caller used (an index into `keys:`).
    pub key: Option<usize>,
    /// `x-levee-caller`, as the caller named itself.
    pub caller: Option<http::HeaderValue>,
    pub path: &'static str,
    pub dialect: Dialect,
    pub stream: bool,
}

/// One attempt, as the request's log line lists it.
#[derive(Clone, Copy)]
struct AttemptNote {
    target: usize,
    /// The provider's status, or 0 when it gave none.
    status: u16,
    result: AttemptResult,
    ms: u64,
}

/// The attempts a log line lists one by one; later ones are counted only.
const NOTED_ATTEMPTS: usize = 8;

/// How a request ended, for its log line; `failure` is the status Levee
/// answered with and the provider's last error, if any.
struct Summary<'a> {
    outcome: RequestOutcome,
    failure: Option<(u16, Option<&'a LastError>)>,
    added: Duration,
    last_result: Option<AttemptResult>,
    model: &'a str,
    /// A committed stream's bytes relayed and time from its commit point.
    stream: Option<(u64, Duration)>,
}

/// What the log line says of the request's policy state.
#[derive(Clone, Copy)]
struct ReqView {
    target: usize,
    attempts: u32,
    deadline: Instant,
}

impl ReqView {
    fn of(req: &RequestState) -> Self {
        ReqView {
            target: req.target(),
            attempts: req.attempts(),
            deadline: req.deadline(),
        }
    }
}

/// A stream past its commit point, kept until it ends: what its books
/// need then.
struct Committed {
    req: ReqView,
    status: u16,
    added: Duration,
    model: String,
    /// Its `--record` tape line, finished with the events relayed when the
    /// stream ends (`None` without `--record`).
    tape: Option<TapeLine>,
}

/// One admitted request's books.
pub(crate) struct Observer {
    shared: Arc<Shared>,
    route: usize,
    trace: RequestTrace,
    arrived: Instant,
    /// Time in upstream attempts and backoff waits: not the gateway's own cost.
    outside: Duration,
    /// The last attempt's result (why a fallback happens); `None` before
    /// the first attempt ends.
    last_result: Option<AttemptResult>,
    /// The attempt in flight's span.
    span: Option<AttemptTrace>,
    /// The request's path and query and the caller's model, for the
    /// `--record` tape; `None` without one.
    tape_origin: Option<(String, String)>,
    /// Targets the planner chose and passed over because they cannot carry
    /// the request, as `x-levee-skipped` says them: `provider=reason, …`.
    skipped: String,
    asked: Asked,
    /// The first attempts, in order (no allocation: most requests make one).
    attempts: [Option<AttemptNote>; NOTED_ATTEMPTS],
    /// The number of the attempt in flight.
    attempt_n: u32,
    /// A committed stream, until it ends.
    committed: Option<Box<Committed>>,
    /// The request's outcome has been counted (once per request).
    counted: bool,
    /// The target whose answer was delivered.
    answered_by: Option<usize>,
}

impl Observer {
    /// The request was admitted to `route`.
    pub fn admitted(
        shared: Arc<Shared>,
        route: usize,
        trace: RequestTrace,
        arrived: Instant,
        tape_origin: Option<(String, String)>,
        asked: Asked,
    ) -> Self {
        Observer {
            shared,
            route,
            trace,
            arrived,
            outside: Duration::ZERO,
            last_result: None,
            span: None,
            tape_origin,
            skipped: String::new(),
            asked,
            attempts: [None; NOTED_ATTEMPTS],
            attempt_n: 0,
            committed: None,
            counted: false,
            answered_by: None,
        }
    }

    /// Notes an attempt for the log line.
    fn note_attempt(&mut self, n: u32, note: AttemptNote) {
        let i = (n as usize).saturating_sub(1);
        if let Some(slot) = self.attempts.get_mut(i) {
            *slot = Some(note);
        }
    }

    /// The attempts as the log line says them: `provider status|result ms`.
    fn attempt_list(&self) -> String {
        let mut out = String::new();
        for a in self.attempts.iter().flatten() {
            if !out.is_empty() {
                out.push_str(", ");
            }
            out.push_str(self.provider_name(a.target));
            out.push(' ');
            if a.status != 0 {
                out.push_str(&a.status.to_string());
            } else {
                out.push_str(a.result.label());
            }
            out.push(' ');
            out.push_str(&a.ms.to_string());
            out.push_str("ms");
        }
        out
    }

    /// Who the caller is, for the log line: its gateway key's name, else
    /// the name it gave in `x-levee-caller`, else `-`.
    fn caller_name(&self) -> &str {
        if let Some(key) = self.asked.key.and_then(|i| self.shared.config.keys.get(i)) {
            return key.name();
        }
        self.asked
            .caller
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
    }

    /// The planner chose `target` and passed it over: it cannot carry the
    /// request (`reason`). Counted, logged with the request, and said in
    /// the answer's `x-levee-skipped`.
    fn skipped_target(&mut self, target: usize, reason: SkipReason) {
        let provider = self.provider_name(target).to_string();
        report(
            &self.shared,
            RequestEvent::TranslationRefused {
                route: self.route_name(),
                provider: &provider,
                reason,
            },
        );
        if !self.skipped.is_empty() {
            self.skipped.push_str(", ");
        }
        self.skipped.push_str(&provider);
        self.skipped.push('=');
        self.skipped.push_str(reason.label());
    }

    /// `x-levee-skipped`'s value, when a target was passed over.
    pub(crate) fn skipped(&self) -> Option<&str> {
        (!self.skipped.is_empty()).then_some(self.skipped.as_str())
    }

    fn route_name(&self) -> &str {
        &self.shared.config.routes[self.route].name
    }

    /// The request was answered with `outcome`: counted in
    /// `levee_requests_total` and the route's recent window alike.
    fn count_outcome(&mut self, outcome: RequestOutcome, at: Instant) {
        self.counted = true;
        self.shared.metrics.request(self.route_name(), outcome);
        self.shared.census.answered(self.route, outcome, at);
    }

    fn provider_name(&self, target: usize) -> &str {
        // A request's target is always one the planner dispatched (it
        // starts at the first): a valid index.
        let route = &self.shared.config.routes[self.route];
        &self.shared.providers[route.targets[target].provider].name
    }

    /// A backoff (or Retry-After) wait from `now` until `until` begins.
    fn waiting(&self, now: Instant, until: Instant) {
        self.trace.wait(until.saturating_since(now));
    }

    /// The wait that began at `since` is over.
    fn waited(&mut self, since: Instant) {
        self.outside += self.shared.clock.since(since);
    }

    /// Attempt `n` (the planner's dispatch `d`) is about to be sent: its
    /// span begins (its trace fields are then [`Self::trace_attempt`]'s).
    fn attempt_started(&mut self, d: &Dispatch, n: u32, deadline: Instant, now: Instant) {
        let shared = &self.shared;
        if d.kind == AttemptKind::Fallback || (d.kind == AttemptKind::First && d.target > 0) {
            // Past a primary that refused without an attempt: what refused
            // it. After an answered attempt: that attempt's result.
            let reason = match d.primary_refused {
                Some(r) => FallbackReason::PrimaryRefused(r),
                None if d.kind == AttemptKind::First => FallbackReason::PrimaryRefusedUnsaid,
                None => self
                    .last_result
                    .map_or(FallbackReason::NoAttempt, FallbackReason::After),
            };
            shared.metrics.fallback(self.route_name(), reason);
            shared
                .census
                .fallback(self.route, d.target, reason, &shared.clock);
        }
        shared
            .metrics
            .deadline_remaining_at_dispatch
            .observe(deadline.saturating_since(now).as_secs_f64());
        self.attempt_n = n;
        let span = self
            .trace
            .attempt(self.route_name(), self.provider_name(d.target), n);
        self.span = Some(span);
    }

    /// Sets the attempt in flight's trace fields on its upstream request.
    pub fn trace_attempt(&self, fields: &mut crate::http::outbound::Fields) {
        if let Some(span) = &self.span {
            span.inject(fields);
        }
    }

    /// The attempt ended without an answer to relay.
    fn attempt_finished(&mut self, f: Finished<'_>) {
        let shared = Arc::clone(&self.shared);
        let at = shared.clock.now();
        self.outside += at.saturating_since(f.started);
        if shared.recorder.is_some() {
            let mut line = TapeLine {
                delay_ms: ms(at.saturating_since(f.started)),
                ..TapeLine::default()
            };
            match f.outcome {
                Outcome::Timeout => line.stall = true,
                Outcome::Status { status, .. } => {
                    line.status = status;
                    if let Some(e) = f.error {
                        line.headers = TapeLine::headers_from(&e.headers);
                        line.body = Some(TapeLine::body_from(&e.body));
                    }
                }
                _ => line.reset = true,
            }
            self.tape(f.target, line);
        }
        // An attempt the caller's deadline cut short is not the provider's slowness.
        let result = if f.class == Class::NotProviderFault {
            f.result.cut_by_deadline()
        } else {
            f.result
        };
        shared.metrics.attempt(self.provider_name(f.target), result);
        let status = match f.outcome {
            Outcome::Status { status, .. } => Some(status),
            _ => None,
        };
        if let Some(span) = self.span.take() {
            span.finish(status, Some(result.label()));
        }
        self.note_attempt(
            self.attempt_n,
            AttemptNote {
                target: f.target,
                status: status.unwrap_or(0),
                result,
                ms: ms(at.saturating_since(f.started)),
            },
        );
        shared.census.attempt(
            self.route,
            f.target,
            at.saturating_since(f.started),
            result,
            at,
        );
        self.last_result = Some(result);
    }

    /// A 2xx answer from `target` (attempt begun at `started`) is being
    /// relayed: buffered whole (`body`), or a stream from its commit point
    /// (`body` is `None`; its tape line is kept until the stream ends).
    fn delivered(
        &mut self,
        req: &RequestState,
        started: Instant,
        head: &http::response::Parts,
        body: Option<&Bytes>,
        model: &str,
    ) {
        let shared = Arc::clone(&self.shared);
        let target = req.target();
        self.answered_by = Some(target);
        // One reading of the clock for the whole account (each is ~100
        // instructions, and a request took twelve).
        let at = shared.clock.now();
        self.outside += at.saturating_since(started);
        shared
            .metrics
            .attempt(self.provider_name(target), AttemptResult::Success);
        shared.census.attempt(
            self.route,
            target,
            at.saturating_since(started),
            AttemptResult::Success,
            at,
        );
        shared
            .metrics
            .attempts_per_request
            .observe(f64::from(req.attempts()));
        let total = at.saturating_since(self.arrived);
        if body.is_none() {
            shared
                .metrics
                .time_to_first_byte
                .observe(total.as_secs_f64());
        }
        let added = total.saturating_sub(self.outside);
        shared.metrics.added_latency.observe(added.as_secs_f64());
        self.note_attempt(
            self.attempt_n,
            AttemptNote {
                target,
                status: head.status.as_u16(),
                result: AttemptResult::Success,
                ms: ms(at.saturating_since(started)),
            },
        );
        if body.is_some() {
            self.count_outcome(RequestOutcome::Success, at);
            let summary = Summary {
                outcome: RequestOutcome::Success,
                failure: None,
                added,
                last_result: Some(AttemptResult::Success),
                model,
                stream: None,
            };
            self.log_summary(ReqView::of(req), at, summary);
            if let Some(span) = self.span.take() {
                span.finish(Some(head.status.as_u16()), None);
            }
        } else {
            // A stream's outcome, log line and spans wait for its end.
            let tape = self.tape_line(target, head, None, at.saturating_since(started));
            self.committed = Some(Box::new(Committed {
                req: ReqView::of(req),
                status: head.status.as_u16(),
                added,
                model: model.to_string(),
                tape,
            }));
            return;
        }
        if let Some(line) = self.tape_line(target, head, body, at.saturating_since(started)) {
            self.record(&line);
        }
    }

    /// The `--record` tape line of an answer from `target`, its head
    /// `delay` after its attempt began; `None` without `--record` (no tape
    /// line is built: its copies of the head and body were half of a plain
    /// request's heap allocations).
    fn tape_line(
        &self,
        target: usize,
        head: &http::response::Parts,
        body: Option<&Bytes>,
        delay: Duration,
    ) -> Option<TapeLine> {
        self.shared.recorder.as_ref()?;
        let mut line = TapeLine {
            status: head.status.as_u16(),
            headers: TapeLine::headers_from(&head.headers),
            body: body.map(TapeLine::body_from),
            delay_ms: ms(delay),
            ..TapeLine::default()
        };
        self.fill_tape(target, &mut line);
        Some(line)
    }

    /// The planner gave up with `f` after `req.attempts()` attempts.
    fn failed(
        &mut self,
        req: &RequestState,
        f: &Failure,
        last_error: Option<&LastError>,
        model: &str,
    ) {
        let shared = Arc::clone(&self.shared);
        let attempts = req.attempts();
        shared
            .metrics
            .attempts_per_request
            .observe(f64::from(attempts));
        let at = shared.clock.now();
        self.count_outcome(f.reason.into(), at);
        if attempts == 0 || !f.upstream_status {
            shared.metrics.reject(f.reason);
        }
        let added = at
            .saturating_since(self.arrived)
            .saturating_sub(self.outside);
        shared.metrics.added_latency.observe(added.as_secs_f64());
        let summary = Summary {
            outcome: f.reason.into(),
            failure: Some((f.status, last_error)),
            added,
            last_result: self.last_result,
            model,
            stream: None,
        };
        self.log_summary(ReqView::of(req), at, summary);
    }

    /// Something happened to the request: the books take it in.
    pub fn report(&mut self, event: RequestEvent<'_>) {
        match event {
            RequestEvent::Skipped { target, reason } => self.skipped_target(target, reason),
            RequestEvent::Waiting { now, until } => self.waiting(now, until),
            RequestEvent::Waited { since } => self.waited(since),
            RequestEvent::AttemptStarted {
                dispatch,
                n,
                deadline,
                now,
            } => self.attempt_started(dispatch, n, deadline, now),
            RequestEvent::AttemptFinished(f) => self.attempt_finished(f),
            RequestEvent::Delivered {
                req,
                started,
                head,
                body,
                model,
            } => self.delivered(req, started, head, body, model),
            RequestEvent::Failed {
                req,
                failure,
                last_error,
                model,
            } => self.failed(req, failure, last_error, model),
            RequestEvent::StreamEnded {
                outcome,
                bytes,
                duration,
                chunks,
            } => self.stream_ended(outcome, bytes, duration, chunks),
            RequestEvent::TokensUsed(t) => self.tokens_used(t),
            other => report(&self.shared, other),
        }
    }

    /// An answer's tokens: counted in `levee_tokens_total` by route,
    /// provider, model, caller and kind.
    fn tokens_used(&self, t: TokensUsed) {
        let shared = &self.shared;
        let route = &shared.config.routes[self.route];
        let p = route.targets[t.target].provider;
        let provider = &shared.providers[p];
        let key = |output| {
            (
                u32::try_from(self.route).unwrap_or(u32::MAX),
                u32::try_from(p).unwrap_or(u32::MAX),
                t.domain,
                t.caller.map_or(u32::MAX, u32::from),
                output,
            )
        };
        let kinds = [
            (false, "input", t.used.input),
            (true, "output", t.used.output),
        ];
        for (output, kind, n) in kinds {
            // The labels' strings are made once per series, not per request.
            shared.metrics.tokens(key(output), u64::from(n), || {
                let model = match provider.lock().domain_model(t.domain) {
                    "" => "other".to_string(),
                    m => m.to_string(),
                };
                crate::observe::metrics::TokensLabel {
                    route: route.name.clone(),
                    provider: provider.name.clone(),
                    model,
                    caller: t
                        .caller
                        .and_then(|c| shared.config.callers.get(usize::from(c)))
                        .map_or(String::new(), |c| c.name.clone()),
                    kind,
                }
            });
        }
    }

    /// A committed stream ended: its request's outcome is counted, its log
    /// line written and its spans ended.
    fn stream_ended(
        &mut self,
        outcome: StreamOutcome,
        bytes: u64,
        duration: Duration,
        chunks: Option<&[String]>,
    ) {
        let Some(mut c) = self.committed.take() else {
            return;
        };
        // A stream the caller stopped reading is not recorded: its events
        // are the provider's, and the caller did not see them end.
        if let Some(mut line) = c
            .tape
            .take()
            .filter(|_| outcome != StreamOutcome::CallerLeft)
        {
            line.chunks = chunks.map(<[String]>::to_vec);
            line.cut = outcome != StreamOutcome::Completed;
            self.record(&line);
        }
        let shared = Arc::clone(&self.shared);
        let at = shared.clock.now();
        if outcome.provider_failed() {
            shared
                .metrics
                .streams_failed
                .get_or_create(&crate::observe::metrics::ProviderLabel {
                    provider: self.provider_name(c.req.target).to_string(),
                })
                .inc();
        }
        let counted = outcome.outcome();
        self.count_outcome(counted, at);
        let reason = (outcome != StreamOutcome::Completed).then_some(counted.label());
        if let Some(span) = self.span.take() {
            span.finish(Some(c.status), reason);
        }
        let summary = Summary {
            outcome: counted,
            // The caller already has the head: a stream that did not end
            // well is a failure logged under the status it was given.
            failure: reason.map(|_| (c.status, None)),
            added: c.added,
            last_result: Some(AttemptResult::Success),
            model: &c.model,
            stream: Some((bytes, duration)),
        };
        self.log_summary(c.req, at, summary);
        if self.trace.is_on() {
            self.trace
                .finish(c.status, reason, Some(self.provider_name(c.req.target)));
        }
    }

    /// The last attempt's result; `None` before the first attempt ends.
    pub fn last_result(&self) -> Option<AttemptResult> {
        self.last_result
    }

    /// The answer is known: ends the request's span.
    pub fn answered(self, answer: &Result<Response<Body>, LeveeError>) {
        if !self.trace.is_on() {
            return;
        }
        match answer {
            Ok(resp) => {
                let target = self.answered_by.map(|t| self.provider_name(t));
                self.trace.finish(resp.status().as_u16(), None, target);
            }
            Err(e) => self.trace.finish(e.status(), Some(e.why.as_str()), None),
        }
    }

    /// The summary log line, once per logical request: at INFO for a
    /// success, WARN for a failure. Levee's name for the provider is
    /// `provider` (tracing's own `target` is the log's source, and a log
    /// pipeline keeping one of two `target` keys lost the provider).
    fn log_summary(&self, req: ReqView, at: Instant, s: Summary<'_>) {
        let failed = s.failure.is_some();
        let enabled = if failed {
            tracing::enabled!(target: "levee::request", tracing::Level::WARN)
        } else {
            tracing::enabled!(target: "levee::request", tracing::Level::INFO)
        };
        if !enabled {
            return;
        }
        let Summary {
            outcome,
            failure,
            added,
            last_result,
            model,
            stream,
        } = s;
        let left = req.deadline.saturating_since(at);
        let (stream_bytes, stream_ms) = stream.map_or((0, 0), |(b, d)| (b, ms(d)));
        let (status, err) = failure.map_or((None, None), |(s, e)| (Some(s), e));
        // The provider's error body, once per logical request (five copies of
        // one validator complaint bury it).
        let upstream_error = err.map(|e| {
            let s = String::from_utf8_lossy(&e.body[..e.body.len().min(512)]).into_owned();
            if e.foreign {
                format!("(not the provider's JSON error shape: a proxy in between?) {s}")
            } else {
                s
            }
        });
        let route = &self.shared.config.routes[self.route];
        let answered = route.rewrite_model(req.target, model);
        let id = self.asked.id.to_str().unwrap_or("");
        let attempt_list = self.attempt_list();
        let duration_ms = ms(at.saturating_since(self.arrived));
        macro_rules! line {
            ($level:ident) => {
                tracing::$level!(
                    target: "levee::request",
                    request_id = id,
                    caller = self.caller_name(),
                    route = %route.name,
                    provider = %self.provider_name(req.target),
                    model,
                    model_answered = answered,
                    path = self.asked.path,
                    dialect = self.asked.dialect.name(),
                    stream = self.asked.stream,
                    duration_ms,
                    attempts = req.attempts,
                    attempt_list = attempt_list.as_str(),
                    skipped = self.skipped.as_str(),
                    outcome = outcome.label(),
                    last_attempt = last_result.map_or("none", AttemptResult::label),
                    status = status.unwrap_or(200),
                    added_latency_us = u64::try_from(added.as_micros()).unwrap_or(u64::MAX),
                    deadline_left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                    upstream_error = upstream_error.as_deref().unwrap_or(""),
                    stream_bytes,
                    stream_ms,
                    "request"
                )
            };
        }
        if failed {
            line!(warn);
        } else {
            line!(info);
        }
    }

    fn fill_tape(&self, target: usize, line: &mut TapeLine) {
        if let Some((path_and_query, model)) = &self.tape_origin {
            let model = self.shared.config.routes[self.route].rewrite_model(target, model);
            line.path = Some(crate::observe::record::tape_path(path_and_query));
            line.model = Some(model.to_string());
        }
        line.at_ms = Some(ms(self.shared.clock.now().since_origin()));
    }

    /// Writes one exchange with `target` to the `--record` tape.
    fn tape(&self, target: usize, mut line: TapeLine) {
        if self.shared.recorder.is_some() {
            self.fill_tape(target, &mut line);
            self.record(&line);
        }
    }

    /// Writes a finished tape line.
    fn record(&self, line: &TapeLine) {
        if let Some(r) = &self.shared.recorder {
            r.record(line);
        }
    }
}

impl Drop for Observer {
    /// A request dropped before its outcome was counted still gets one: its
    /// answer was cut off by the end of the shutdown grace period (the 503
    /// the grace guard sends), or its caller went away before the answer.
    fn drop(&mut self) {
        if self.counted {
            return;
        }
        let outcome = if self.shared.grace_over.is_over() {
            RequestOutcome::Failed(Why::ShuttingDown)
        } else {
            RequestOutcome::ClientClosed
        };
        let at = self.shared.clock.now();
        self.count_outcome(outcome, at);
    }
}

/// Whether a provider's 4xx body has its JSON error shape.
pub(crate) fn is_foreign(status: u16, body: &[u8]) -> bool {
    (400..500).contains(&status) && !Dialect::is_provider_error_shape(body)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
