//! The life of one request: admit, route, resolve the deadline, then drive
//! the policy core's planner until it dispatches a success or gives up.
//!
//! Every rule about whether, when and where to send an attempt is the
//! planner's; this module only does the I/O the planner asks for and turns
//! its verdicts into HTTP.

use crate::attempt::{AttemptFinisher, GatewayDeps};
use crate::dialect::Dialect;
use crate::idempotency::{Claim, Claimed, Follow, Stored};
use crate::inspect::{inspect, rewrite_model};
use crate::record::TapeLine;
use crate::respond::{copy_headers, error_headers, full, levee_error, Body};
use crate::shared::Shared;
use crate::stream::RelayBody;
use crate::upstream::build_request;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use levee_policy::deadline::DeadlineHeaders;
use levee_policy::planner::{AttemptKind, Decision};
use levee_policy::{Class, Outcome, Reason};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// Most of an upstream error body we keep to pass on or log.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Most of an upstream success body we buffer (non-streaming).
const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

const PATHS: [&str; 4] = [
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/embeddings",
    "/v1/responses",
];

/// Handles one inbound request. Never panics, never answers 500 without a reason.
pub async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let dialect = Dialect::from_path(&path);
    if req.method() == Method::GET && path == "/v1/models" {
        return models(&shared);
    }
    if !PATHS.contains(&path.as_str()) {
        shared.metrics.reject("not_found");
        return levee_error(
            dialect,
            404,
            "bad_request",
            &format!(
                "levee: no such endpoint `{}`; use one of {}",
                printable(&path),
                PATHS.join(", ")
            ),
            0,
            None,
        );
    }
    if req.method() != Method::POST {
        shared.metrics.reject("bad_request");
        return levee_error(dialect, 405, "bad_request", "levee: use POST", 0, None);
    }
    let caller = match authenticate(&shared, req.headers()) {
        Ok(c) => c,
        Err(()) => {
            shared.metrics.reject("unauthorized");
            return levee_error(
                dialect,
                401,
                "bad_request",
                "levee: missing or invalid API key for this gateway",
                0,
                None,
            );
        }
    };
    let max_body = shared.config.limits.max_body_bytes;
    if let Some(len) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > max_body {
            shared.metrics.reject("payload_too_large");
            return levee_error(
                dialect,
                413,
                "bad_request",
                &format!("levee: request body of {len} bytes exceeds the limit of {max_body}"),
                0,
                None,
            );
        }
    }
    let (parts, incoming) = req.into_parts();
    let limit = usize::try_from(max_body).unwrap_or(usize::MAX);
    let body = match Limited::new(incoming, limit).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                shared.metrics.reject("payload_too_large");
                return levee_error(
                    dialect,
                    413,
                    "bad_request",
                    &format!("levee: request body exceeds the limit of {max_body} bytes"),
                    0,
                    None,
                );
            }
            shared.metrics.reject("bad_request");
            return levee_error(
                dialect,
                400,
                "bad_request",
                "levee: could not read the request body",
                0,
                None,
            );
        }
    };
    let inspected = match inspect(&body) {
        Ok(i) => i,
        Err(e) => {
            shared.metrics.reject("bad_request");
            return levee_error(dialect, 400, "bad_request", &format!("levee: {e}"), 0, None);
        }
    };
    let Some(route_ix) = shared.config.route_for(&path, &inspected.model) else {
        shared.metrics.reject("no_route");
        return levee_error(
            dialect,
            404,
            "bad_request",
            &format!(
                "levee: no route for model `{}`",
                printable(&inspected.model)
            ),
            0,
            None,
        );
    };
    let route = &shared.config.routes[route_ix];
    let arrived = shared.clock.now();
    let h = &parts.headers;
    // The SDK's own patience, for non-streaming calls: the Anthropic SDK sends
    // `x-stainless-timeout` (or `NOT_GIVEN`), the OpenAI SDK only
    // `x-stainless-read-timeout`. The first that is a number wins.
    let patience = if inspected.stream {
        None
    } else {
        ["x-stainless-timeout", "x-stainless-read-timeout"]
            .iter()
            .filter_map(|n| h.get(*n))
            .map(|v| v.as_bytes())
            .find(|v| {
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .is_some_and(|x| x.is_finite() && x > 0.0)
            })
    };
    let deadline = match route.deadline.resolve(
        DeadlineHeaders {
            timeout_ms: h.get("x-timeout-ms").map(|v| v.as_bytes()),
            deadline_ms: h.get("x-deadline-ms").map(|v| v.as_bytes()),
            patience_secs: patience,
        },
        arrived,
        shared.clock.unix_ms(),
    ) {
        Ok(d) => d,
        Err(e) => {
            shared.metrics.reject("bad_request");
            return levee_error(dialect, 400, "bad_request", &format!("levee: {e}"), 0, None);
        }
    };

    // Cross-layer accounting: is a caller layer still retrying?
    let key_header = h
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let sdk_retry = h
        .get("x-stainless-retry-count")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|n| n > 0);
    if sdk_retry {
        shared.metrics.caller_retries.inc();
    }

    let Some(bulkhead) = shared.routes[route_ix].bulkhead.try_acquire() else {
        shared.metrics.reject("shed");
        shared.metrics.request(&route.name, "shed");
        return levee_error(
            dialect,
            503,
            "shed",
            &format!(
                "levee: route `{}` is at its max_in_flight; rejected at once rather than queued",
                route.name
            ),
            0,
            Some(Duration::from_secs(1)),
        );
    };

    // Idempotency: the caller's key, or one Levee makes for this request.
    let mut lease = None;
    if let Some(k) = key_header.as_deref() {
        let body_hash: [u8; 32] = Sha256::digest(&body).into();
        let mut counted = sdk_retry;
        loop {
            let claimed = shared
                .idempotency
                .claim(caller, k, body_hash, shared.clock.now())
                .await;
            if !counted && !matches!(claimed, Claimed::Lead(_) | Claimed::Untracked) {
                // A repeated key: a caller layer is still retrying.
                shared.metrics.caller_retries.inc();
                counted = true;
            }
            let until = shared.clock.to_tokio(deadline);
            match claimed {
                Claimed::Lead(l) => {
                    lease = Some(l);
                    break;
                }
                Claimed::Untracked => break,
                Claimed::Replay(stored) => return replay(&shared, &route.name, &stored),
                Claimed::Conflict => {
                    shared.metrics.reject("bad_request");
                    return levee_error(
                        dialect,
                        422,
                        "bad_request",
                        "levee: this idempotency-key was used with a different request body",
                        0,
                        None,
                    );
                }
                Claimed::Follow(follow) => {
                    let waited = match follow {
                        Follow::Local(mut rx) => {
                            match tokio::time::timeout_at(until, rx.wait_for(|v| v.is_some())).await
                            {
                                Ok(Ok(v)) => match v.clone() {
                                    Some(stored) => return replay(&shared, &route.name, &stored),
                                    None => true,
                                },
                                // The leader gave up without an answer: try to lead.
                                Ok(Err(_)) => true,
                                Err(_) => false,
                            }
                        }
                        // Another replica leads: look again shortly.
                        Follow::Poll => {
                            let next = shared.clock.to_tokio(shared.clock.now())
                                + Duration::from_millis(20);
                            tokio::time::sleep_until(next.min(until)).await;
                            next < until
                        }
                    };
                    if !waited {
                        shared.metrics.request(&route.name, "deadline_exceeded");
                        return levee_error(dialect, 504, "deadline_exceeded", "levee: deadline passed while waiting for an earlier request with the same idempotency-key", 0, None);
                    }
                }
            }
        }
    }
    let idem_value = match key_header
        .as_deref()
        .and_then(|k| HeaderValue::from_str(k).ok())
    {
        Some(v) => v,
        None => HeaderValue::from_str(&uuid::Uuid::now_v7().to_string())
            .unwrap_or(HeaderValue::from_static("levee")),
    };

    let ctx = Ctx {
        shared: Arc::clone(&shared),
        bulkhead: std::sync::Mutex::new(Some(bulkhead)),
        route: route_ix,
        dialect,
        parts_headers: parts.headers,
        path_and_query: parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or(path),
        body,
        model: inspected.model,
        stream: inspected.stream,
        idem: idem_value,
        arrived,
    };
    run(ctx, deadline, lease).await
}

struct Ctx {
    shared: Arc<Shared>,
    /// The route bulkhead slot; a committed stream carries it until it ends.
    bulkhead: std::sync::Mutex<Option<levee_policy::ConcurrencyGuard>>,
    route: usize,
    dialect: Dialect,
    parts_headers: HeaderMap,
    path_and_query: String,
    body: Bytes,
    model: String,
    stream: bool,
    idem: HeaderValue,
    arrived: levee_policy::Instant,
}

/// The last upstream error answer, kept to pass on or log once.
struct LastError {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
    foreign: bool,
}

async fn run(
    ctx: Ctx,
    deadline: levee_policy::Instant,
    mut lease: Option<Claim>,
) -> Response<Body> {
    let shared = Arc::clone(&ctx.shared);
    let route = &shared.config.routes[ctx.route];
    let policy = &route.policy;
    let mut rng = shared.rng();
    let mut fin = AttemptFinisher {
        shared: Arc::clone(&shared),
        route: ctx.route,
        req: levee_policy::RequestState::new(deadline),
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
            };
            policy.decide(&mut fin.req, &mut deps, now, &mut rng)
        };
        match decision {
            Decision::Wait { until } => {
                tokio::time::sleep_until(shared.clock.to_tokio(until)).await;
                outside += shared.clock.since(now);
            }
            Decision::Fail(f) => {
                let attempts = fin.req.attempts();
                shared
                    .metrics
                    .attempts_per_request
                    .observe(f64::from(attempts.max(1)));
                return fail(&ctx, &fin, f, last_error, outside, attempts);
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
                }
                shared
                    .metrics
                    .deadline_remaining_at_dispatch
                    .observe(deadline.saturating_since(now).as_secs_f64());
                let model = route.rewrite_model(d.target, &ctx.model);
                let body = rewrite_model(&ctx.body, &ctx.model, model);
                let Some(uri) = provider.uri_for(&ctx.path_and_query) else {
                    fin.record(Outcome::ConnectError);
                    continue;
                };
                let upstream_req = build_request(
                    provider,
                    &ctx.parts_headers,
                    uri,
                    body,
                    d.timeout,
                    &ctx.idem,
                );
                let attempt_deadline = shared.clock.to_tokio(now + d.timeout);
                // A stream must show its first event within first_byte_timeout
                // of dispatch; until then a failure can still be retried.
                let head_deadline = match (ctx.stream, route.first_byte_timeout) {
                    (true, Some(t)) => attempt_deadline.min(shared.clock.to_tokio(now + t)),
                    _ => attempt_deadline,
                };
                let result =
                    tokio::time::timeout_at(head_deadline, provider.client.request(upstream_req))
                        .await;
                let (outcome, label) = match result {
                    Err(_) => (Outcome::Timeout, "timeout"),
                    Ok(Err(_)) => (Outcome::ConnectError, "connect_error"),
                    Ok(Ok(resp)) => {
                        let status = resp.status().as_u16();
                        if status < 300 {
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
                                Delivered::Done(r) => return r,
                                Delivered::Failed(o, l, back) => {
                                    lease = back;
                                    (o, l)
                                }
                            }
                        } else {
                            let retry_after = levee_policy::retry_after::parse(
                                resp.headers().get("retry-after").map(|v| v.as_bytes()),
                                resp.headers().get("retry-after-ms").map(|v| v.as_bytes()),
                                shared.clock.unix_ms(),
                                route.retry_after_cap,
                            );
                            let headers = resp.headers().clone();
                            let body =
                                read_capped(resp.into_body(), MAX_ERROR_BODY, attempt_deadline)
                                    .await;
                            let foreign = (400..500).contains(&status)
                                && !Dialect::is_provider_error_shape(&body);
                            let label = status_label(status, foreign);
                            last_error = Some(LastError {
                                status,
                                headers,
                                body,
                                foreign,
                            });
                            let outcome = match retry_after {
                                // Longer than we would ever wait: record it as a
                                // wait the deadline cannot hold.
                                Some(levee_policy::retry_after::RetryAfter::TooLong(d)) => {
                                    Outcome::Status {
                                        status,
                                        retry_after: Some(d),
                                    }
                                }
                                Some(levee_policy::retry_after::RetryAfter::Wait(d)) => {
                                    Outcome::Status {
                                        status,
                                        retry_after: Some(d),
                                    }
                                }
                                None => Outcome::Status {
                                    status,
                                    retry_after: None,
                                },
                            };
                            (outcome, label)
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
                let label = if class == Class::NotProviderFault && label == "timeout" {
                    "deadline_cut"
                } else {
                    label
                };
                shared.metrics.attempt(&provider.name, label);
                last_label = label;
            }
        }
    }
}

enum Delivered {
    Done(Response<Body>),
    Failed(Outcome, &'static str, Option<Claim>),
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
    lease: Option<Claim>,
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
                Ok(None) | Ok(Some(Err(_))) => {
                    return Delivered::Failed(Outcome::ConnectError, "connect_error", lease)
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
        // Commit: from here on, no retry.
        *outside += shared.clock.since(started);
        fin.req.commit();
        shared.metrics.attempt(&provider_name, "success");
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
            dialect: ctx.dialect,
            clock: shared.clock,
        };
        let relay = RelayBody::new(start, body, finisher, recording, holds);
        let mut out = Response::new(http_body_util::BodyExt::boxed_unsync(relay));
        *out.status_mut() = parts.status;
        copy_headers(&parts.headers, out.headers_mut());
        success_headers(out.headers_mut(), attempts, &provider_name);
        return Delivered::Done(out);
    }
    let bytes = match read_limited(body, MAX_RESPONSE_BODY, attempt_deadline).await {
        Ok(b) => b,
        Err(timed_out) => {
            let o = if timed_out {
                Outcome::Timeout
            } else {
                Outcome::ConnectError
            };
            return Delivered::Failed(
                o,
                if timed_out {
                    "timeout"
                } else {
                    "connect_error"
                },
                lease,
            );
        }
    };
    *outside += shared.clock.since(started);
    let status = parts.status.as_u16();
    fin.record(Outcome::Status {
        status,
        retry_after: None,
    });
    shared.metrics.attempt(&provider_name, "success");
    let attempts = fin.req.attempts();
    shared
        .metrics
        .attempts_per_request
        .observe(f64::from(attempts));
    let total = shared.clock.since(ctx.arrived);
    let added = total.saturating_sub(*outside);
    shared.metrics.added_latency.observe(added.as_secs_f64());
    shared.metrics.request(&route.name, "success");
    log_summary(ctx, fin, "success", None, added, None);
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
    log_summary(ctx, fin, reason, Some(f.status), added, last_error.as_ref());
    match last_error {
        // A deterministic client error: the provider's own verdict, unchanged.
        Some(e) if f.upstream_status && (400..500).contains(&e.status) && e.status != 429 => {
            let mut out = Response::new(full(e.body));
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
) {
    let shared = &ctx.shared;
    let route = &shared.config.routes[ctx.route];
    let t = fin.req.target().min(route.targets.len().saturating_sub(1));
    let target = &shared.providers[route.targets[t].provider].name;
    let left = fin.req.deadline().saturating_since(shared.clock.now());
    // The provider's error body, once per logical request (seed 003).
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

fn replay(shared: &Shared, route: &str, stored: &Stored) -> Response<Body> {
    shared.metrics.replayed.inc();
    shared.metrics.request(route, "replayed");
    let mut out = Response::new(full(stored.body.clone()));
    *out.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    *out.headers_mut() = stored.headers.clone();
    out.headers_mut()
        .insert("x-levee-replayed", HeaderValue::from_static("true"));
    out.headers_mut()
        .insert("x-levee-attempts", HeaderValue::from(0u32));
    out
}

fn models(shared: &Shared) -> Response<Body> {
    let data: Vec<serde_json::Value> = shared
        .config
        .routes
        .iter()
        .map(|r| serde_json::json!({"id": r.matcher.model_prefix.clone().unwrap_or_else(|| r.name.clone()), "object": "model", "created": 0, "owned_by": "levee"}))
        .collect();
    let body = serde_json::json!({"object": "list", "data": data}).to_string();
    let mut out = Response::new(full(body));
    out.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    out
}

/// The caller's identity for idempotency: its gateway key, else a digest of
/// the credentials it sent, else anonymous. `Err` when gateway keys are
/// configured and none matches.
fn authenticate(shared: &Shared, h: &HeaderMap) -> Result<[u8; 32], ()> {
    let presented = h.get("x-api-key").map(|v| v.as_bytes()).or_else(|| {
        h.get(http::header::AUTHORIZATION).map(|v| {
            let b = v.as_bytes();
            b.strip_prefix(b"Bearer ").unwrap_or(b)
        })
    });
    let digest: Option<[u8; 32]> = presented.map(|p| Sha256::digest(p).into());
    if shared.keys.is_empty() {
        return Ok(digest.unwrap_or([0; 32]));
    }
    match digest {
        Some(d) if shared.keys.iter().any(|k| constant_time_eq(k, &d)) => Ok(d),
        _ => Err(()),
    }
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn printable(s: &str) -> String {
    s.chars().take(100).filter(|c| !c.is_control()).collect()
}

async fn read_capped(body: Incoming, cap: usize, until: tokio::time::Instant) -> Bytes {
    read_limited(body, cap, until).await.unwrap_or_default()
}

/// Reads a whole body up to `cap` bytes before `until`. `Err(true)` on timeout.
async fn read_limited(
    body: Incoming,
    cap: usize,
    until: tokio::time::Instant,
) -> Result<Bytes, bool> {
    match tokio::time::timeout_at(until, Limited::new(body, cap).collect()).await {
        Err(_) => Err(true),
        Ok(Err(_)) => Err(false),
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
    line.path = Some(ctx.path_and_query.clone());
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
