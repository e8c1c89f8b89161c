//! The front of one request: admit, route, resolve the deadline, claim the
//! idempotency key; then hand it to [`crate::drive`], which drives the
//! policy core's planner until it dispatches a success or gives up.

use crate::crossing;
use crate::drive::Ctx;
use crate::idempotency::{Claimed, Follow, Lease, Scope, Stored};
use crate::inspect::{inspect, rewrite_model};
use crate::respond::{full, levee_error, Body};
use crate::shared::Shared;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use levee_policy::deadline::DeadlineHeaders;
use levee_wire::Dialect;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

const PATHS: [&str; 4] = levee_wire::paths::POST;

/// Handles one inbound request. Never panics, never answers 500 without a
/// reason; when the shutdown grace period ends first, answers 503 (or ends
/// the stream with an error event) in the caller's dialect.
pub async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let dialect = Dialect::of_request(req.uri().path(), req.headers());
    let guard = Arc::clone(&shared);
    guard
        .grace_over
        .guard(dialect, &guard.metrics, handle_request(shared, req))
        .await
}

async fn handle_request(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let dialect = Dialect::of_request(&path, req.headers());
    if req.method() == Method::GET && path == "/v1/models" {
        // The route names are the deployment's map: as private as the routes.
        if authenticate(&shared, req.headers()).is_err() {
            return unauthorized(&shared, dialect);
        }
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
        Err(()) => return unauthorized(&shared, dialect),
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
    let read = tokio::time::timeout(
        shared.config.limits.body_read_timeout,
        Limited::new(incoming, limit).collect(),
    );
    let body = match read.await {
        Err(_) => {
            shared.metrics.reject("bad_request");
            return levee_error(
                dialect,
                408,
                "bad_request",
                "levee: the request body did not arrive within limits.body_read_timeout",
                0,
                None,
            );
        }
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) => {
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
    shared.census.admitted(
        crate::census::key_index(&shared.keys, &caller),
        h.get(crate::census::CALLER_HEADER).map(|v| v.as_bytes()),
        route_ix,
        deadline.saturating_since(arrived),
        arrived,
    );

    // What each target will be sent, checked now so that nothing about the
    // request itself can fail later and be blamed on a provider.
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| path.clone());
    let Targets {
        bodies,
        uris,
        crossings,
        skip,
        foreign_headers,
    } = match prepare_targets(
        &shared,
        route,
        dialect,
        &parts.headers,
        &path,
        &path_and_query,
        &body,
        &inspected.model,
    ) {
        Ok(t) => t,
        Err((status, msg)) => {
            shared.metrics.reject("bad_request");
            return levee_error(dialect, status, "bad_request", &msg, 0, None);
        }
    };
    // Cross-layer accounting: is a caller layer still retrying?
    let key_header = match h.get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(k)) if !k.trim().is_empty() && k.len() <= 256 => Some(k.to_string()),
        Some(_) => {
            shared.metrics.reject("bad_request");
            return levee_error(
                dialect,
                400,
                "bad_request",
                "levee: header `idempotency-key` must be 1 to 256 visible ASCII characters",
                0,
                None,
            );
        }
    };
    let sdk_retry = h
        .get("x-stainless-retry-count")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|n| n > 0);
    if sdk_retry {
        shared.metrics.caller_retries.inc();
    }

    let Some(bulkhead) = shared.routes[route_ix].bulkhead.try_acquire() else {
        let shed = levee_policy::Failure::shed();
        let reason = shed.reason.as_str();
        shared.metrics.reject(reason);
        shared.metrics.request(&route.name, reason);
        shared.metrics.attempts_per_request.observe(0.0);
        return levee_error(
            dialect,
            shed.status,
            reason,
            &format!(
                "levee: route `{}` is at its max_in_flight; rejected at once rather than queued",
                route.name
            ),
            0,
            shed.retry_after,
        );
    };

    // Idempotency: the caller's key, or one Levee makes for this request.
    let mut note = None;
    let lease = match key_header.as_deref() {
        None => None,
        Some(k) => {
            let body_hash: [u8; 32] = Sha256::digest(&body).into();
            let key = KeyClaim {
                caller,
                key: k,
                body_hash,
                counted: sdk_retry,
            };
            match claim_key(&shared, key, &route.name, dialect, deadline, &mut note).await {
                Ok(lease) => lease,
                Err(answer) => return noted(&shared, answer, note),
            }
        }
    };
    let idem_value = match key_header
        .as_deref()
        .and_then(|k| HeaderValue::from_str(k).ok())
    {
        Some(v) => v,
        None => HeaderValue::from_str(&shared.uuid_v7().to_string())
            .unwrap_or(HeaderValue::from_static("levee")),
    };

    let trace = match &shared.telemetry {
        Some(t) => t.request(&parts.headers, &route.name),
        None => crate::telemetry::RequestTrace::off(),
    };
    let ctx = Ctx {
        shared: Arc::clone(&shared),
        bulkhead: std::sync::Mutex::new(Some(bulkhead)),
        route: route_ix,
        dialect,
        parts_headers: parts.headers,
        path_and_query,
        bodies,
        uris,
        crossings,
        skip,
        foreign_headers,
        model: inspected.model,
        stream: inspected.stream,
        idem: idem_value,
        arrived,
        caller_retry: sdk_retry,
    };
    let resp = crate::drive::run(ctx, deadline, lease, &trace).await;
    let h = resp.headers();
    let text = |n: &str| h.get(n).and_then(|v| v.to_str().ok());
    trace.finish(
        resp.status().as_u16(),
        text("x-levee-reason"),
        text("x-levee-target"),
    );
    noted(&shared, resp, note)
}

/// What `x-levee-idempotency` says about a keyed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IdemNote {
    /// The shared store could not be consulted: deduplicated on this replica only.
    Local,
    /// An earlier request with the key ended without a stored answer (a
    /// stream, an answer too large to store, or a failure): this one waited
    /// for it, then ran.
    Rerun,
}

fn noted(shared: &Shared, mut answer: Response<Body>, note: Option<IdemNote>) -> Response<Body> {
    let value = match note {
        None => return answer,
        Some(IdemNote::Local) => {
            shared.metrics.idempotency_local.inc();
            "local"
        }
        Some(IdemNote::Rerun) => "rerun",
    };
    answer
        .headers_mut()
        .insert("x-levee-idempotency", HeaderValue::from_static(value));
    answer
}

/// What each target of a route is sent, prepared at admission.
struct Targets {
    bodies: Vec<Bytes>,
    uris: Vec<http::Uri>,
    crossings: Vec<Option<crossing::Crossing>>,
    skip: Vec<bool>,
    foreign_headers: Option<HeaderMap>,
}

/// Each target's body and URI — the model rewritten, or the request
/// translated for a target of the other dialect, or the target skipped when
/// it cannot carry the request — checked now so that nothing about the
/// request itself can fail later and be blamed on a provider. `Err` is the
/// status and message of a 400-class answer when no target can take the
/// request as sent.
#[allow(clippy::too_many_arguments)]
fn prepare_targets(
    shared: &Shared,
    route: &levee_config::Route,
    caller: Dialect,
    headers: &HeaderMap,
    path: &str,
    path_and_query: &str,
    body: &Bytes,
    model: &str,
) -> Result<Targets, (u16, String)> {
    let bad = |status: u16, msg: &str| Err((status, msg.to_string()));
    let n = route.targets.len();
    let (mut bodies, mut uris, mut crossings, mut skip) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut refused: Option<levee_translate::Untranslatable> = None;
    for (t, target) in route.targets.iter().enumerate() {
        let to = route.rewrite_model(t, model);
        let provider = &shared.providers[target.provider];
        let mut upstream_path = path_and_query;
        let mut crossed = None;
        let mut skipped = false;
        match crossing::prepare(caller, provider.api, path, body, to) {
            crossing::Prepared::Same => match rewrite_model(body, model, to) {
                Ok(b) => bodies.push(b),
                Err(e) => return bad(400, &format!("levee: {e}")),
            },
            crossing::Prepared::Crossed {
                body,
                path,
                crossing,
            } => {
                bodies.push(body);
                upstream_path = path;
                crossed = Some(crossing);
            }
            crossing::Prepared::Skip(why) => {
                shared
                    .metrics
                    .translation_refused(&route.name, &provider.name, why.reason.label());
                refused.get_or_insert(why);
                bodies.push(Bytes::new());
                skipped = true;
            }
        }
        skip.push(skipped);
        crossings.push(crossed);
        match provider.uri_for(upstream_path) {
            Some(u) => uris.push(u),
            None => return bad(414, "levee: the request URI is too long to forward"),
        }
    }
    if let (true, Some(why)) = (skip.iter().all(|s| *s), &refused) {
        let msg = format!(
            "levee: no target of route `{}` can carry this request: {why}",
            route.name
        );
        return bad(400, &msg);
    }
    let foreign_headers = crossings
        .iter()
        .flatten()
        .next()
        .map(|c: &crossing::Crossing| crossing::headers_for(headers, c.upstream));
    Ok(Targets {
        bodies,
        uris,
        crossings,
        skip,
        foreign_headers,
    })
}

/// A request's idempotency key, ready to claim.
struct KeyClaim<'a> {
    caller: [u8; 32],
    key: &'a str,
    body_hash: [u8; 32],
    /// Already counted as a caller-layer retry.
    counted: bool,
}

/// Leads, follows or replays the key. `Ok(None)`: run without deduplication;
/// `Err`: the answer is already known (a replay, a conflict, or the deadline
/// passed while following).
async fn claim_key(
    shared: &Arc<Shared>,
    k: KeyClaim<'_>,
    route: &str,
    dialect: Dialect,
    deadline: levee_policy::Instant,
    note: &mut Option<IdemNote>,
) -> Result<Option<Lease>, Response<Body>> {
    let mut counted = k.counted;
    let mut waited = false;
    let until = shared.clock.to_tokio(deadline);
    loop {
        let (claimed, scope) = shared
            .idempotency
            .claim(k.caller, k.key, k.body_hash, shared.clock.now())
            .await;
        if scope == Scope::Local {
            *note = Some(IdemNote::Local);
        } else if waited && matches!(claimed, Claimed::Lead(_)) {
            *note = Some(IdemNote::Rerun);
        }
        if !counted
            && !matches!(
                claimed,
                Claimed::Lead(_) | Claimed::Untracked | Claimed::Unavailable
            )
        {
            // A repeated key: a caller layer is still retrying.
            shared.metrics.caller_retries.inc();
            counted = true;
        }
        let follow = match claimed {
            Claimed::Lead(l) => return Ok(Some(l)),
            Claimed::Untracked => return Ok(None),
            Claimed::Unavailable => {
                *note = None;
                shared.metrics.reject("state_unavailable");
                shared.metrics.request(route, "state_unavailable");
                return Err(levee_error(
                    dialect,
                    503,
                    "state_unavailable",
                    "levee: the shared idempotency store is unavailable and state.on_unavailable is `refuse`: this keyed request was not sent (it could run twice across replicas)",
                    0,
                    None,
                ));
            }
            Claimed::Replay(stored) => return Err(replay(shared, route, &stored)),
            Claimed::Conflict => {
                shared.metrics.reject("bad_request");
                return Err(levee_error(
                    dialect,
                    422,
                    "bad_request",
                    "levee: this idempotency-key was used with a different request body",
                    0,
                    None,
                ));
            }
            Claimed::Follow(f) => f,
        };
        waited = true;
        let in_time = match follow {
            Follow::Local(mut rx) => {
                match tokio::time::timeout_at(until, rx.wait_for(|v| v.is_some())).await {
                    Ok(Ok(v)) => match v.clone() {
                        Some(stored) => return Err(replay(shared, route, &stored)),
                        None => true,
                    },
                    // The leader gave up without an answer: try to lead.
                    Ok(Err(_)) => true,
                    Err(_) => false,
                }
            }
            // Another replica leads: look again shortly.
            Follow::Poll => {
                let next = shared.clock.to_tokio(shared.clock.now()) + Duration::from_millis(20);
                tokio::time::sleep_until(next.min(until)).await;
                next < until
            }
        };
        if !in_time {
            shared.metrics.request(route, "deadline_exceeded");
            return Err(levee_error(
                dialect,
                504,
                "deadline_exceeded",
                "levee: deadline passed while waiting for an earlier request with the same idempotency-key",
                0,
                None,
            ));
        }
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

fn unauthorized(shared: &Shared, dialect: Dialect) -> Response<Body> {
    shared.metrics.reject("unauthorized");
    levee_error(
        dialect,
        401,
        "bad_request",
        "levee: missing or invalid API key for this gateway",
        0,
        None,
    )
}

/// The token of an `authorization` value: the auth scheme is
/// case-insensitive (`Bearer`, `bearer`, `BEARER`).
fn bearer_token(v: &[u8]) -> &[u8] {
    match v.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => v[7..].trim_ascii_start(),
        _ => v,
    }
}

/// The caller's identity for idempotency: its gateway key, else a digest of
/// the credentials it sent, else anonymous. `Err` when gateway keys are
/// configured and none matches.
fn authenticate(shared: &Shared, h: &HeaderMap) -> Result<[u8; 32], ()> {
    let presented = h.get("x-api-key").map(|v| v.as_bytes()).or_else(|| {
        h.get(http::header::AUTHORIZATION)
            .map(|v| bearer_token(v.as_bytes()))
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

/// Compares key digests in time independent of where they differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    subtle::ConstantTimeEq::ct_eq(&a[..], &b[..]).into()
}

fn printable(s: &str) -> String {
    s.chars().take(100).filter(|c| !c.is_control()).collect()
}
