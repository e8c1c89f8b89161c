//! Driving the planner for one admitted request: dispatch the attempts it asks
//! for, sleep through its waits, deliver a success (buffered, or relayed as a
//! stream from its commit point) or turn its verdict into an answer. Every
//! rule about whether, when and where to send is the planner's; this module
//! only does the I/O and the bookkeeping (metrics, the summary log line, the
//! `--record` tape).

use crate::attempt::{AttemptFinisher, GatewayDeps};
use crate::idempotency::{Lease, Stored};
use crate::record::TapeLine;
use crate::respond::{copy_headers, error_headers, full, levee_error, Body};
use crate::shared::Shared;
use crate::stream::RelayBody;
use crate::upstream::build_request;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use levee_policy::planner::{AttemptKind, Decision};
use levee_policy::{Class, Outcome, Reason};
use levee_wire::Dialect;
use std::sync::Arc;
use std::time::Duration;

/// Most of an upstream error body we keep to pass on or log.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Most of an upstream success body we buffer (non-streaming).
const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

/// One admitted request, as the driver needs it.
pub(crate) struct Ctx {
    pub(crate) shared: Arc<Shared>,
    /// The route bulkhead slot; a committed stream carries it until it ends.
    pub(crate) bulkhead: std::sync::Mutex<Option<levee_policy::ConcurrencyGuard>>,
    pub(crate) route: usize,
    pub(crate) dialect: Dialect,
    pub(crate) parts_headers: HeaderMap,
    pub(crate) path_and_query: String,
    /// The body and URI for each target (model rewritten, prepared at admission).
    pub(crate) bodies: Vec<Bytes>,
    pub(crate) uris: Vec<http::Uri>,
    /// Per target: how its exchange crosses dialects (`None`: same dialect).
    pub(crate) crossings: Vec<Option<crate::crossing::Crossing>>,
    /// Per target: skipped for this request (it cannot carry it).
    pub(crate) skip: Vec<bool>,
    /// The caller's headers without its dialect's vendor headers, for
    /// targets of the other dialect.
    pub(crate) foreign_headers: Option<HeaderMap>,
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) idem: HeaderValue,
    pub(crate) arrived: levee_policy::Instant,
    /// The caller's SDK says this is its own retry: it spends a retry token.
    pub(crate) caller_retry: bool,
}

/// The last upstream error answer, kept to pass on or log once.
struct LastError {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
    foreign: bool,
}

pub(crate) async fn run(
    ctx: Ctx,
    deadline: levee_policy::Instant,
    mut lease: Option<Lease>,
    trace: &crate::telemetry::RequestTrace,
) -> Response<Body> {
    let shared = Arc::clone(&ctx.shared);
    let route = &shared.config.routes[ctx.route];
    let policy = &route.policy;
    let mut rng = shared.rng();
    let mut fin = AttemptFinisher {
        shared: Arc::clone(&shared),
        route: ctx.route,
        req: levee_policy::RequestState::new(deadline).caller_retry(ctx.caller_retry),
    };
    let mut outside = Duration::ZERO; // time in upstream attempts and backoff waits
    let mut last_error: Option<LastError> = None;
    let mut last_label = "none";
    loop {
        let now = shared.clock.now();
        let decision = {
            let mut deps = GatewayDeps {
                shared: &shared,
                route: ctx.route,
                model: &ctx.model,
                skip: &ctx.skip,
            };
            policy.decide(&mut fin.req, &mut deps, now, &mut rng)
        };
        match decision {
            Decision::Wait { until } => {
                trace.wait(until.saturating_since(now));
                tokio::time::sleep_until(shared.clock.to_tokio(until)).await;
                outside += shared.clock.since(now);
            }
            Decision::Fail(f) => {
                let attempts = fin.req.attempts();
                shared
                    .metrics
                    .attempts_per_request
                    .observe(f64::from(attempts));
                return fail(&ctx, &fin, f, last_error, outside, attempts, last_label);
            }
            Decision::Dispatch(d) => {
                let target = &route.targets[d.target];
                let provider = &shared.providers[target.provider];
                // A shared (cross-replica) allowance is checked here, outside
                // the core: it needs a Redis round trip.
                if let (Some(rate), Some(redis)) = (&provider.shared_rate, &shared.redis) {
                    if let Err(wait) = rate.check(redis, &provider.name, now).await {
                        fin.refuse(levee_policy::Refusal::RateLimited { until: now + wait });
                        continue;
                    }
                }
                if d.kind == AttemptKind::Fallback || (d.kind == AttemptKind::First && d.target > 0)
                {
                    let reason = if d.kind == AttemptKind::First {
                        "primary_refused"
                    } else {
                        last_label
                    };
                    shared
                        .metrics
                        .fallbacks
                        .get_or_create(&crate::metrics::RouteReason {
                            route: route.name.clone(),
                            reason: reason.to_string(),
                        })
                        .inc();
                    shared
                        .census
                        .fallback(ctx.route, d.target, reason, &shared.clock);
                }
                shared
                    .metrics
                    .deadline_remaining_at_dispatch
                    .observe(deadline.saturating_since(now).as_secs_f64());
                let headers = match (&ctx.crossings[d.target], &ctx.foreign_headers) {
                    (Some(_), Some(h)) => h,
                    _ => &ctx.parts_headers,
                };
                let span = trace.attempt(&route.name, &provider.name, fin.req.attempts());
                let mut upstream_req = build_request(
                    provider,
                    headers,
                    ctx.uris[d.target].clone(),
                    ctx.bodies[d.target].clone(),
                    d.timeout,
                    &ctx.idem,
                );
                span.inject(upstream_req.headers_mut());
                let attempt_deadline = shared.clock.to_tokio(now + d.timeout);
                // A stream must show its first event within first_byte_timeout
                // of dispatch; until then a failure can still be retried.
                // A plain answer's head too: a stalled provider is given up on
                // while a retry or the backup can still use the time.
                let head_deadline = match route.first_byte_timeout {
                    Some(t) => attempt_deadline.min(shared.clock.to_tokio(now + t)),
                    None => attempt_deadline,
                };
                let result =
                    tokio::time::timeout_at(head_deadline, provider.send(upstream_req)).await;
                let (outcome, label) = match result {
                    Err(_) => (Outcome::Timeout, "timeout"),
                    Ok(Err(e)) => (Outcome::ConnectError, crate::upstream::failure_label(&e)),
                    Ok(Ok(resp)) => {
                        let status = resp.status().as_u16();
                        // The core's classifier says what is an answer (1xx–3xx
                        // included: a provider's redirect is passed on, never
                        // retried); the driver only acts on it.
                        let answer = policy.classifier().classify(Outcome::Status {
                            status,
                            retry_after: None,
                        }) == Class::Success;
                        if answer {
                            match deliver(
                                &ctx,
                                &mut fin,
                                resp,
                                attempt_deadline,
                                &mut outside,
                                now,
                                lease,
                            )
                            .await
                            {
                                Delivered::Done(r) => {
                                    span.finish(Some(r.status().as_u16()), None);
                                    return r;
                                }
                                Delivered::Failed(o, l, back) => {
                                    // The answer describes this attempt, not an earlier error.
                                    last_error = None;
                                    lease = back;
                                    (o, l)
                                }
                            }
                        } else {
                            // What the provider asked for, uncapped: the core
                            // applies the route's cap to the request, the model
                            // and the provider alike.
                            let retry_after = levee_policy::retry_after::requested(
                                resp.headers().get("retry-after").map(|v| v.as_bytes()),
                                resp.headers().get("retry-after-ms").map(|v| v.as_bytes()),
                                shared.clock.unix_ms(),
                            );
                            let mut headers = resp.headers().clone();
                            shared.secrets.headers(&mut headers);
                            let body = shared.secrets.bytes(
                                read_capped(resp.into_body(), MAX_ERROR_BODY, attempt_deadline)
                                    .await,
                            );
                            let foreign = (400..500).contains(&status)
                                && !Dialect::is_provider_error_shape(&body);
                            let label = status_label(status, foreign);
                            last_error = Some(LastError {
                                status,
                                headers,
                                body,
                                foreign,
                            });
                            (
                                Outcome::Status {
                                    status,
                                    retry_after,
                                },
                                label,
                            )
                        }
                    }
                };
                outside += shared.clock.since(now);
                if shared.recorder.is_some() {
                    let mut line = TapeLine {
                        delay_ms: ms(shared.clock.since(now)),
                        ..TapeLine::default()
                    };
                    match outcome {
                        Outcome::Timeout => line.stall = true,
                        Outcome::Status { status, .. } => {
                            line.status = status;
                            if let Some(e) = &last_error {
                                line.headers = TapeLine::headers_from(&e.headers);
                                line.body = Some(TapeLine::body_from(&e.body));
                            }
                        }
                        _ => line.reset = true,
                    }
                    tape(&ctx, model_sent(&ctx, fin.req.target()), line);
                }
                let class = fin.record(outcome);
                let label = if class == Class::NotProviderFault
                    && (label == "timeout" || label == "body_timeout")
                {
                    "deadline_cut"
                } else {
                    label
                };
                shared.metrics.attempt(&provider.name, label);
                let status = match outcome {
                    Outcome::Status { status, .. } => Some(status),
                    _ => None,
                };
                span.finish(status, Some(label));
                let at = shared.clock.now();
                let took = at.saturating_since(now);
                shared.census.attempt(ctx.route, d.target, took, label, at);
                last_label = label;
            }
        }
    }
}

enum Delivered {
    Done(Response<Body>),
    Failed(Outcome, &'static str, Option<Lease>),
}

/// A 2xx head arrived: buffer a plain answer, or hold a stream's head until
/// its first chunk (the commit point) and relay the rest.
async fn deliver(
    ctx: &Ctx,
    fin: &mut AttemptFinisher,
    resp: Response<Incoming>,
    attempt_deadline: tokio::time::Instant,
    outside: &mut Duration,
    started: levee_policy::Instant,
    lease: Option<Lease>,
) -> Delivered {
    let shared = &ctx.shared;
    let route = &shared.config.routes[ctx.route];
    let (parts, mut body) = resp.into_parts();
    let is_sse = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let target = fin.req.target();
    let provider_ix = route.targets[target].provider;
    let provider_name = shared.providers[provider_ix].name.clone();
    if ctx.stream && is_sse {
        let first_deadline = match route.first_byte_timeout {
            Some(t) => attempt_deadline.min(shared.clock.to_tokio(started + t)),
            None => attempt_deadline,
        };
        // Hold the head until the first whole event: the commit point.
        let mut framer = crate::sse::EventFramer::new();
        let first = loop {
            match tokio::time::timeout_at(first_deadline, body.frame()).await {
                Err(_) => return Delivered::Failed(Outcome::Timeout, "timeout", lease),
                // The stream ended before a blank line: what it sent is the
                // answer (a retry would run the generation again).
                Ok(None) if framer.has_partial() => break framer.flush(),
                // Cut before the commit point: nothing reached the caller, so
                // it may be retried as a connection failure (`connect_error`
                // in `retry.on`), but it is not one: labelled as what it is.
                Ok(None) | Ok(Some(Err(_))) => {
                    return Delivered::Failed(
                        Outcome::ConnectError,
                        "cut_before_first_event",
                        lease,
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
        *outside += shared.clock.since(started);
        fin.req.commit();
        let ends_at = shared
            .clock
            .to_tokio(fin.req.deadline() - route.policy.margin());
        shared.metrics.attempt(&provider_name, "success");
        let at = shared.clock.now();
        let took = at.saturating_since(started);
        shared
            .census
            .attempt(ctx.route, target, took, "success", at);
        let attempts = fin.req.attempts();
        shared
            .metrics
            .attempts_per_request
            .observe(f64::from(attempts));
        let total = shared.clock.since(ctx.arrived);
        shared
            .metrics
            .time_to_first_byte
            .observe(total.as_secs_f64());
        shared
            .metrics
            .added_latency
            .observe(total.saturating_sub(*outside).as_secs_f64());
        shared.metrics.request(&route.name, "success");
        log_summary(
            ctx,
            fin,
            "success",
            None,
            total.saturating_sub(*outside),
            None,
            "success",
        );
        // A stream is not stored for replay, but its key stays held (and its
        // bulkhead slot taken) until the stream ends.
        let holds = crate::stream::Holds {
            _bulkhead: ctx.bulkhead.lock().ok().and_then(|mut g| g.take()),
            _lease: lease,
        };
        let finisher = AttemptFinisher {
            shared: Arc::clone(shared),
            route: ctx.route,
            req: std::mem::replace(
                &mut fin.req,
                levee_policy::RequestState::new(levee_policy::Instant::ZERO),
            ),
        };
        let recording = shared.recorder.is_some().then(|| {
            let mut line = TapeLine {
                status: parts.status.as_u16(),
                headers: TapeLine::headers_from(&parts.headers),
                delay_ms: ms(shared.clock.since(started)),
                ..TapeLine::default()
            };
            fill_tape(ctx, model_sent(ctx, target), &mut line);
            line
        });
        let start = crate::stream::RelayStart {
            first,
            framer,
            idle: route.stream_idle_timeout,
            deadline: ends_at,
            dialect: ctx.dialect,
            clock: shared.clock,
            translate: ctx.crossings[target].and_then(|c| c.stream(shared.clock.unix_ms() / 1000)),
        };
        let relay = RelayBody::new(start, body, finisher, recording, holds);
        let mut out = Response::new(http_body_util::BodyExt::boxed_unsync(relay));
        *out.status_mut() = parts.status;
        copy_headers(&parts.headers, out.headers_mut());
        success_headers(out.headers_mut(), attempts, &provider_name);
        return Delivered::Done(out);
    }
    // A plain answer's 2xx head means the provider has run the generation:
    // the body is read until the caller's deadline, and a body that fails is
    // never fetched again (a too-large one would be as large again; a broken
    // one would run the generation twice). Only the planner's deadline rule
    // applies to a body that has not arrived by then.
    let declared = http_body::Body::size_hint(&body).exact();
    if declared.is_some_and(|n| n > MAX_RESPONSE_BODY as u64) {
        return Delivered::Failed(Outcome::ResponseTooLarge, "response_too_large", lease);
    }
    let body_deadline = shared
        .clock
        .to_tokio(fin.req.deadline() - route.policy.margin())
        .max(attempt_deadline);
    let bytes = match read_limited(body, MAX_RESPONSE_BODY, body_deadline).await {
        Ok(b) => b,
        Err(BodyError::TimedOut) => {
            return Delivered::Failed(Outcome::Timeout, "body_timeout", lease)
        }
        Err(BodyError::TooLarge) => {
            return Delivered::Failed(Outcome::ResponseTooLarge, "response_too_large", lease)
        }
        Err(BodyError::Broken) => {
            return Delivered::Failed(Outcome::FailedAfterFirstByte, "body_cut", lease)
        }
    };
    *outside += shared.clock.since(started);
    let status = parts.status.as_u16();
    fin.record(Outcome::Status {
        status,
        retry_after: None,
    });
    shared.metrics.attempt(&provider_name, "success");
    let at = shared.clock.now();
    let took = at.saturating_since(started);
    shared
        .census
        .attempt(ctx.route, target, took, "success", at);
    let attempts = fin.req.attempts();
    shared
        .metrics
        .attempts_per_request
        .observe(f64::from(attempts));
    let total = shared.clock.since(ctx.arrived);
    let added = total.saturating_sub(*outside);
    shared.metrics.added_latency.observe(added.as_secs_f64());
    shared.metrics.request(&route.name, "success");
    log_summary(ctx, fin, "success", None, added, None, "success");
    if shared.recorder.is_some() {
        let line = TapeLine {
            status,
            headers: TapeLine::headers_from(&parts.headers),
            body: Some(TapeLine::body_from(&bytes)),
            delay_ms: ms(shared.clock.since(started)),
            ..TapeLine::default()
        };
        tape(ctx, model_sent(ctx, target), line);
    }
    // The backup's answer in the caller's dialect.
    let bytes =
        match ctx.crossings[target].map(|c| c.response(&bytes, shared.clock.unix_ms() / 1000)) {
            None => bytes,
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                let msg = format!("levee: upstream_error: {e}");
                return Delivered::Done(levee_error(
                    ctx.dialect,
                    502,
                    "upstream_error",
                    &msg,
                    attempts,
                    None,
                ));
            }
        };
    let mut out = Response::new(full(bytes.clone()));
    *out.status_mut() = parts.status;
    copy_headers(&parts.headers, out.headers_mut());
    success_headers(out.headers_mut(), attempts, &provider_name);
    if let Some(l) = lease {
        let mut headers = HeaderMap::new();
        copy_headers(&parts.headers, &mut headers);
        l.complete(
            Stored {
                status,
                headers,
                body: bytes,
            },
            shared.clock.now(),
        )
        .await;
    }
    Delivered::Done(out)
}

fn success_headers(h: &mut HeaderMap, attempts: u32, target: &str) {
    h.insert("x-levee-attempts", HeaderValue::from(attempts));
    if let Ok(v) = HeaderValue::from_str(target) {
        h.insert("x-levee-target", v);
    }
}

fn fail(
    ctx: &Ctx,
    fin: &AttemptFinisher,
    f: levee_policy::Failure,
    last_error: Option<LastError>,
    outside: Duration,
    attempts: u32,
    last_result: &str,
) -> Response<Body> {
    let shared = &ctx.shared;
    let route = &shared.config.routes[ctx.route];
    let reason = f.reason.as_str();
    shared.metrics.request(&route.name, reason);
    if attempts == 0 || !f.upstream_status {
        shared.metrics.reject(reason);
    }
    let total = shared.clock.since(ctx.arrived);
    let added = total.saturating_sub(outside);
    shared.metrics.added_latency.observe(added.as_secs_f64());
    let provider_said = last_error
        .as_ref()
        .and_then(|e| Dialect::provider_message(&e.body));
    log_summary(
        ctx,
        fin,
        reason,
        Some(f.status),
        added,
        last_error.as_ref(),
        last_result,
    );
    match last_error {
        // A deterministic client error: the provider's own verdict, unchanged.
        Some(e) if f.upstream_status && (400..500).contains(&e.status) && e.status != 429 => {
            let t = fin.req.target().min(ctx.crossings.len().saturating_sub(1));
            let body = match ctx.crossings.get(t).copied().flatten() {
                Some(c) => c.error(e.status, &e.body),
                None => e.body,
            };
            let mut out = Response::new(full(body));
            *out.status_mut() = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
            copy_headers(&e.headers, out.headers_mut());
            error_headers(out.headers_mut(), reason, attempts, f.retry_after);
            out
        }
        _ => {
            let mut msg = format!("levee: {reason} after {attempts} attempt(s)");
            match f.reason {
                Reason::DeadlineExceeded if attempts == 0 => msg = "levee: deadline_exceeded: no time left to start an attempt".into(),
                Reason::DeadlineExceeded => msg.push_str("; the caller's deadline cannot hold another attempt"),
                Reason::BudgetExhausted => msg.push_str("; the retry budget is spent (retries may add at most a fraction of successful traffic)"),
                Reason::CircuitOpen => msg.push_str("; the provider is failing for everyone, so Levee is failing fast"),
                Reason::Shed => msg.push_str("; the provider's max_in_flight is reached: rejected at once rather than queued"),
                Reason::RateLimited => msg.push_str("; the provider's request allowance is spent for now"),
                _ => {}
            }
            match last_result {
                "body_cut" => msg.push_str("; the provider's 2xx answer broke off mid-body: it has already run the generation, so Levee does not run it again"),
                "response_too_large" => msg.push_str(&format!("; the provider's answer is over Levee's {} MiB response limit, and a second attempt would be as large", MAX_RESPONSE_BODY >> 20)),
                _ => {}
            }
            if let Some(p) = provider_said {
                msg.push_str("; provider said: ");
                msg.push_str(&p);
            }
            levee_error(ctx.dialect, f.status, reason, &msg, attempts, f.retry_after)
        }
    }
}

fn log_summary(
    ctx: &Ctx,
    fin: &AttemptFinisher,
    outcome: &str,
    status: Option<u16>,
    added: Duration,
    err: Option<&LastError>,
    last_result: &str,
) {
    let shared = &ctx.shared;
    let route = &shared.config.routes[ctx.route];
    let t = fin.req.target().min(route.targets.len().saturating_sub(1));
    let target = &shared.providers[route.targets[t].provider].name;
    let left = fin.req.deadline().saturating_since(shared.clock.now());
    // The provider's error body, once per logical request (five copies of one
    // validator complaint bury it).
    let upstream_error = err.map(|e| {
        let s = String::from_utf8_lossy(&e.body[..e.body.len().min(512)]).into_owned();
        if e.foreign {
            format!("(not the provider's JSON error shape: a proxy in between?) {s}")
        } else {
            s
        }
    });
    tracing::info!(
        target: "levee::request",
        route = %route.name,
        target = %target,
        attempts = fin.req.attempts(),
        outcome,
        last_attempt = last_result,
        status = status.unwrap_or(200),
        added_latency_us = u64::try_from(added.as_micros()).unwrap_or(u64::MAX),
        deadline_left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
        upstream_error = upstream_error.as_deref().unwrap_or(""),
        "request"
    );
}

fn status_label(status: u16, foreign: bool) -> &'static str {
    match status {
        429 => "throttled",
        400..=499 if foreign => "http_4xx_foreign_body",
        400..=499 => "http_4xx",
        _ => "http_5xx",
    }
}

async fn read_capped(body: Incoming, cap: usize, until: tokio::time::Instant) -> Bytes {
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
    body: Incoming,
    cap: usize,
    until: tokio::time::Instant,
) -> Result<Bytes, BodyError> {
    match tokio::time::timeout_at(until, Limited::new(body, cap).collect()).await {
        Err(_) => Err(BodyError::TimedOut),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Ok(Err(_)) => Err(BodyError::Broken),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn model_sent(ctx: &Ctx, target: usize) -> String {
    ctx.shared.config.routes[ctx.route]
        .rewrite_model(target, &ctx.model)
        .to_string()
}

fn fill_tape(ctx: &Ctx, model: String, line: &mut TapeLine) {
    line.path = Some(crate::record::tape_path(&ctx.path_and_query));
    line.model = Some(model);
    line.at_ms = Some(ms(ctx.shared.clock.now().since_origin()));
}

/// Writes one exchange to the `--record` tape.
fn tape(ctx: &Ctx, model: String, mut line: TapeLine) {
    if let Some(r) = &ctx.shared.recorder {
        fill_tape(ctx, model, &mut line);
        r.record(&line);
    }
}
