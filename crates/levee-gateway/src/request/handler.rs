//! The front of one request: admit, route, resolve the deadline, claim the
//! idempotency key; then hand it to [`crate::request::drive`], which drives the
//! policy core's planner until it dispatches a success or gives up.

use crate::error::BoxError;
use crate::http::collect::{collect_limited, CollectError};
use crate::http::inspect::{self, inspect, rewrite_model};
use crate::http::respond::{full, Body, LeveeError, Why};
use crate::observe::event::RequestEvent;
use crate::observe::outcome::SkipReason;
use crate::request::crossing;
use crate::request::drive::Ctx;
use crate::request::observer::{self, Observer};
use crate::request::plan::Plan;
use crate::runtime::shared::Shared;
use crate::state::idempotency::{Claim, Claimed, Follow, Lease, Scope, Stored};
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use levee_config::{Api, CallerKey};
use levee_policy::deadline::DeadlineHeaders;
use levee_wire::{headers, paths, Dialect};
use sha2::{Digest, Sha256};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

const PATHS: [&str; 4] = levee_wire::paths::POST;

/// Handles one inbound request. Never panics, never answers 500 without a
/// reason; when the shutdown grace period ends first, answers 503 (or ends
/// the stream with an error event) in the caller's dialect.
///
/// Generic over the request body, so that the whole gateway runs in-process
/// (tests drive it with in-memory bodies under paused time) as well as
/// behind the listener.
pub fn handle<B>(
    shared: Arc<Shared>,
    req: Request<B>,
) -> impl std::future::Future<Output = Response<Body>>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let dialect = Dialect::of_request(req.uri().path(), req.headers());
    // The answer's future (every await on the request path, ~2.5 KiB) has
    // an allocation of its own, freed as soon as the response head is
    // ready. Held inline it would be part of the connection's service
    // future, which the connection's task holds for the connection's
    // life: a slow stream would hold it to the end (44.7 KiB
    // of RSS per open stream with it inline, 30.5 KiB boxed, at 2,000
    // streams), for one more allocation per request. Not an `async fn`:
    // one would keep the request (264 bytes) in its future beside the
    // answer that took it. The box is awaited inside a future of its own,
    // so that it is freed when the answer is ready, even while the
    // connection still holds the finished future through a stream's life.
    let answer = Box::pin(answer(shared, req, dialect));
    #[allow(clippy::redundant_async_block)]
    async move {
        answer.await
    }
}

/// The request's answer: a provider's, Levee's, or the one place a
/// [`LeveeError`] becomes a response.
async fn answer<B>(shared: Arc<Shared>, req: Request<B>, dialect: Dialect) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut note = None;
    let id = request_id(&shared, req.headers());
    // The path and method as the refusal's log line names them (no copy).
    let path = path_label(req.uri().path());
    let method = req.method().clone();
    let arrived = shared.clock.now();
    let mut admitted = false;
    let sent = AtomicU32::new(0);
    let served = serve(&shared, req, dialect, &mut note, &id, &mut admitted, &sent);
    let Some(served) = shared.grace_over.race(served).await else {
        // The grace period ended first: a request still waiting for its
        // answer (admitted or not) is answered 503 rather than cut.
        observer::report(&shared, RequestEvent::ShuttingDown);
        let mut resp = crate::runtime::shutdown::cut_short(dialect, sent.into_inner());
        with_request_id(resp.headers_mut(), id);
        return resp;
    };
    let resp = match served {
        Ok(r) => r,
        Err(e) => {
            if !admitted {
                // Refused before admission (an unknown path, a refused key,
                // a body that cannot be read, a full bulkhead): counted
                // here, under the answer's own label, and logged; no
                // observer has it.
                observer::report(&shared, RequestEvent::Rejected(e.why));
                let elapsed = shared.clock.since(arrived);
                tracing::warn!(
                    target: "levee::request",
                    request_id = id.to_str().unwrap_or(""),
                    method = method.as_str(),
                    path,
                    dialect = dialect.name(),
                    status = e.status(),
                    outcome = e.why.as_str(),
                    duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                    reason = %e.message,
                    "request refused"
                );
            }
            e.into_response(dialect)
        }
    };
    let mut resp = noted(&shared, resp, note);
    with_request_id(resp.headers_mut(), id);
    resp
}

/// The request's id: the caller's `x-request-id` when it sent a usable one
/// (1 to 128 visible characters), else a new UUIDv7.
fn request_id(shared: &Shared, h: &HeaderMap) -> HeaderValue {
    if let Some(v) = h.get(headers::X_REQUEST_ID) {
        let b = v.as_bytes();
        if !b.is_empty() && b.len() <= 128 && b.iter().all(|c| c.is_ascii_graphic()) {
            return v.clone();
        }
    }
    let mut text = [0u8; 36];
    shared.uuid_v7().hyphenated().encode_lower(&mut text);
    HeaderValue::from_maybe_shared(Bytes::from_owner(text)).unwrap_or(HeaderValue::from_static("-"))
}

/// Sets `x-request-id`; a provider's own id moves to
/// `x-levee-upstream-request-id` (quote it to the provider's support).
fn with_request_id(h: &mut HeaderMap, id: HeaderValue) {
    if let Some(theirs) = h.insert(headers::X_REQUEST_ID, id) {
        if h.get(headers::X_REQUEST_ID) != Some(&theirs) {
            h.insert(headers::X_LEVEE_UPSTREAM_REQUEST_ID, theirs);
        }
    }
}

async fn serve<B>(
    shared: &Arc<Shared>,
    req: Request<B>,
    dialect: Dialect,
    note: &mut Option<IdemNote>,
    id: &HeaderValue,
    admitted: &mut bool,
    sent: &AtomicU32,
) -> Result<Response<Body>, LeveeError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let asked = req.uri().path();
    if asked == paths::MODELS || asked.starts_with("/v1/models/") {
        if req.method() != Method::GET {
            return Err(LeveeError::of(Why::MethodNotAllowed, "levee: use GET"));
        }
        // The models are the deployment's map: as private as the routes.
        authenticate(shared, &Said::of(req.headers()))?;
        let query = req.uri().query();
        return crate::request::models::answer(shared, dialect, asked, query).await;
    }
    let kind = match PATHS.iter().copied().find(|p| *p == asked) {
        Some(path) => Kind::Served(path),
        None => match pass_through(shared, req.method(), asked) {
            Some(kind) => kind,
            None => {
                let msg = format!(
                    "levee: no such endpoint `{}`; use one of {}, {} or a path a route lists in `passthrough`",
                    printable(asked),
                    PATHS.join(", "),
                    PASSED_THROUGH,
                );
                return Err(LeveeError::of(Why::NotFound, msg));
            }
        },
    };
    let post_only = matches!(kind, Kind::Served(_) | Kind::CountTokens);
    if post_only && req.method() != Method::POST {
        return Err(LeveeError::of(Why::MethodNotAllowed, "levee: use POST"));
    }
    let caller = authenticate(shared, &Said::of(req.headers()))?;
    let (parts, body) = read_body(shared, req).await?;
    let once = !post_only && !idempotent(&parts.method);
    let (route, path, model, stream, rewrite) = match kind {
        Kind::Served(_) | Kind::CountTokens => {
            let inspected =
                inspect(&body).map_err(|e| LeveeError::bad_request(format!("levee: {e}")))?;
            // A token count is routed as the Messages request it counts.
            let (routed_as, path) = match kind {
                Kind::Served(path) => (path, path),
                _ => (paths::MESSAGES, paths::COUNT_TOKENS),
            };
            let Some(route) = shared.config.route_for(routed_as, &inspected.model) else {
                let msg = format!(
                    "levee: no route for model `{}`",
                    printable(&inspected.model)
                );
                return Err(LeveeError::of(Why::NoRoute, msg));
            };
            let stream = inspected.stream && kind != Kind::CountTokens;
            (route, path, inspected.model, stream, true)
        }
        Kind::Stored { route, label } | Kind::Listed { route, label } => {
            let stream = streams(&parts, &body);
            (route, label, String::new(), stream, false)
        }
    };
    let request = Inbound {
        parts,
        body,
        path,
        model,
        stream,
        caller,
        route,
        dialect,
        rewrite,
        once,
    };
    admit(shared, request, note, id, admitted, sent).await
}

/// The pass-through endpoints Levee knows, for a 404's message.
const PASSED_THROUGH: &str = "/v1/messages/count_tokens, /v1/responses/{id}, /v1/responses/{id}/input_items, /v1/responses/{id}/cancel";

/// What a request asks of Levee.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// One of the endpoints Levee serves in full ([`PATHS`]).
    Served(&'static str),
    /// Anthropic's token count, routed by its model as `/v1/messages` is.
    CountTokens,
    /// A response OpenAI stored, on the route that keeps responses
    /// ([`responses_route`]); `label` names the endpoint in logs.
    Stored { route: usize, label: &'static str },
    /// A path a route lists in `passthrough`: the first such route.
    Listed { route: usize, label: &'static str },
}

/// The pass-through a request to `path` with `method` is, if any: a token
/// count, a stored response (`GET` or `DELETE /v1/responses/{id}`, `GET
/// …/input_items`, `POST …/cancel`), or a path a route lists.
fn pass_through(shared: &Shared, method: &Method, path: &str) -> Option<Kind> {
    if path == paths::COUNT_TOKENS {
        return Some(Kind::CountTokens);
    }
    let stored = path.strip_prefix(paths::RESPONSE_ITEM).and_then(|rest| {
        let (id, tail) = match rest.split_once('/') {
            Some((id, tail)) => (id, Some(tail)),
            None => (rest, None),
        };
        let (get, post, delete) = (
            method == Method::GET,
            method == Method::POST,
            method == Method::DELETE,
        );
        match tail {
            _ if id.is_empty() => None,
            None if get || delete => Some("/v1/responses/{id}"),
            Some("input_items") if get => Some("/v1/responses/{id}/input_items"),
            Some("cancel") if post => Some("/v1/responses/{id}/cancel"),
            _ => None,
        }
    });
    if let Some(label) = stored {
        if let Some(route) = responses_route(shared) {
            return Some(Kind::Stored { route, label });
        }
    }
    let route = shared
        .config
        .routes
        .iter()
        .position(|r| r.passes_through(path))?;
    Some(Kind::Listed {
        route,
        label: "(passthrough)",
    })
}

/// The route that keeps OpenAI's stored responses: the one a Responses
/// request without a model prefix takes (the first route with no
/// `model_prefix` whose `match.path` is absent or `/v1/responses`) when it
/// has an OpenAI target; else the first route whose primary speaks OpenAI.
/// A response lives at the provider (and key) that created it, so its
/// reads go where its creation went.
pub fn responses_route(shared: &Shared) -> Option<usize> {
    let routes = &shared.config.routes;
    let openai = |t: &levee_config::Target| shared.config.providers[t.provider].api == Api::OpenAi;
    routes
        .iter()
        .position(|r| {
            r.matcher.model_prefix.as_deref().is_none_or(str::is_empty)
                && r.matcher
                    .path
                    .as_deref()
                    .is_none_or(|p| p == paths::RESPONSES)
        })
        .filter(|&i| routes[i].targets.iter().any(openai))
        .or_else(|| {
            routes
                .iter()
                .position(|r| r.targets.first().is_some_and(openai))
        })
}

/// Whether a request may be sent twice: RFC 9110's idempotent methods.
fn idempotent(m: &Method) -> bool {
    [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::PUT,
        Method::DELETE,
    ]
    .contains(m)
}

/// Whether a pass-through request asks for a stream: `stream=true` in its
/// query (a stored response read as events), or `"stream": true` in a JSON
/// body.
fn streams(parts: &http::request::Parts, body: &[u8]) -> bool {
    let in_query = parts
        .uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "stream=true"));
    if in_query {
        return true;
    }
    let json = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    json && inspect::stream_flag(body)
}

/// The path as logs name it: an endpoint, a template for one with an id,
/// or `(another path)`; never the caller's own text.
fn path_label(asked: &str) -> &'static str {
    if let Some(p) = PATHS
        .iter()
        .chain(&[paths::MODELS, paths::COUNT_TOKENS])
        .find(|p| **p == asked)
    {
        return p;
    }
    if asked.starts_with("/v1/models/") {
        "/v1/models/{id}"
    } else if asked.starts_with(paths::RESPONSE_ITEM) {
        "/v1/responses/{id}"
    } else {
        "(another path)"
    }
}

/// A request whose body is read and whose route is known.
struct Inbound {
    parts: http::request::Parts,
    body: Bytes,
    /// The endpoint: one Levee serves, or a pass-through's label.
    path: &'static str,
    /// The caller's model (empty for a pass-through that has none).
    model: String,
    stream: bool,
    caller: Caller,
    route: usize,
    dialect: Dialect,
    /// The body's `model` is rewritten for each target (else the body goes
    /// as it came).
    rewrite: bool,
    /// Sent at most once: one attempt, no fallback (a pass-through whose
    /// method is not idempotent).
    once: bool,
}

/// Reads the whole body within `limits.max_body_bytes` and
/// `limits.body_read_timeout`.
async fn read_body<B>(
    shared: &Shared,
    req: Request<B>,
) -> Result<(http::request::Parts, Bytes), LeveeError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let max_body = shared.config.limits.max_body_bytes;
    let too_large = |msg: String| LeveeError::of(Why::PayloadTooLarge, msg);
    if let Some(len) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > max_body {
            let msg = format!("levee: request body of {len} bytes exceeds the limit of {max_body}");
            return Err(too_large(msg));
        }
    }
    let (parts, incoming) = req.into_parts();
    let limit = usize::try_from(max_body).unwrap_or(usize::MAX);
    let read = tokio::time::timeout(
        shared.config.limits.body_read_timeout,
        collect_limited(incoming, limit),
    );
    match read.await {
        Err(_) => Err(LeveeError::of(
            Why::RequestTimeout,
            "levee: the request body did not arrive within limits.body_read_timeout",
        )),
        Ok(Ok(body)) => Ok((parts, body)),
        Ok(Err(CollectError::TooLarge)) => Err(too_large(format!(
            "levee: request body exceeds the limit of {max_body} bytes"
        ))),
        Ok(Err(CollectError::Broken)) => Err(LeveeError::bad_request(
            "levee: could not read the request body",
        )),
    }
}

/// The SDK's own patience, for non-streaming calls: the Anthropic SDK sends
/// `x-stainless-timeout` (or `NOT_GIVEN`), the OpenAI SDK only
/// `x-stainless-read-timeout`. The first that is a number wins.
fn sdk_patience<'a>(said: &Said<'a>) -> Option<&'a [u8]> {
    [said.stainless_timeout, said.stainless_read_timeout]
        .into_iter()
        .flatten()
        .map(HeaderValue::as_bytes)
        .find(|v| {
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
                .is_some_and(|x| x.is_finite() && x > 0.0)
        })
}

/// The request's header fields Levee reads, found in one pass over its
/// header map. A lookup by name hashes the name (~150 instructions) and
/// most of these fields are absent from most requests: nine lookups cost
/// more than one walk over the three to six fields a request has. The
/// first value of a repeated field counts, as with a lookup.
#[derive(Default)]
struct Said<'a> {
    api_key: Option<&'a HeaderValue>,
    authorization: Option<&'a HeaderValue>,
    idempotency_key: Option<&'a HeaderValue>,
    stainless_retry_count: Option<&'a HeaderValue>,
    stainless_timeout: Option<&'a HeaderValue>,
    stainless_read_timeout: Option<&'a HeaderValue>,
    timeout_ms: Option<&'a HeaderValue>,
    deadline_ms: Option<&'a HeaderValue>,
    caller: Option<&'a HeaderValue>,
}

impl<'a> Said<'a> {
    /// The credentials sent: the `x-api-key` value, else the
    /// `authorization` value (`true`: its token follows a scheme).
    fn credentials(&self) -> Option<(HeaderValue, bool)> {
        self.api_key
            .map(|v| (v.clone(), false))
            .or_else(|| self.authorization.map(|v| (v.clone(), true)))
    }

    fn of(h: &'a HeaderMap) -> Said<'a> {
        let mut said = Said::default();
        for (name, value) in h {
            let slot = match name.as_str() {
                n if n == headers::X_API_KEY.as_str() => &mut said.api_key,
                "authorization" => &mut said.authorization,
                n if n == headers::IDEMPOTENCY_KEY.as_str() => &mut said.idempotency_key,
                n if n == headers::X_STAINLESS_RETRY_COUNT.as_str() => {
                    &mut said.stainless_retry_count
                }
                n if n == headers::X_STAINLESS_TIMEOUT.as_str() => &mut said.stainless_timeout,
                n if n == headers::X_STAINLESS_READ_TIMEOUT.as_str() => {
                    &mut said.stainless_read_timeout
                }
                n if n == headers::X_TIMEOUT_MS.as_str() => &mut said.timeout_ms,
                n if n == headers::X_DEADLINE_MS.as_str() => &mut said.deadline_ms,
                crate::observe::census::CALLER_HEADER => &mut said.caller,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value);
            }
        }
        said
    }
}

/// The caller's `idempotency-key`, checked; and whether its SDK says this
/// is its own retry (counted as a caller-layer retry).
fn caller_layer(shared: &Shared, said: &Said) -> Result<(Option<String>, bool), LeveeError> {
    let key = match said.idempotency_key.map(|v| v.to_str()) {
        None => None,
        Some(Ok(k)) if !k.trim().is_empty() && k.len() <= 256 => Some(k.to_string()),
        Some(_) => {
            let msg = "levee: header `idempotency-key` must be 1 to 256 visible ASCII characters";
            return Err(LeveeError::bad_request(msg));
        }
    };
    let sdk_retry = said
        .stainless_retry_count
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|n| n > 0);
    if sdk_retry {
        observer::report(shared, RequestEvent::CallerRetry);
    }
    Ok((key, sdk_retry))
}

/// The request's deadline: its headers (or its SDK's patience) within the
/// route's bounds, for a stream as for a plain request; and, for a stream,
/// the caller's own deadline unclamped (`None` when it said nothing),
/// which alone bounds the stream after its first byte.
fn resolve_deadline(
    shared: &Shared,
    route: &levee_config::Route,
    r: &Inbound,
    said: &Said,
    arrived: levee_policy::Instant,
) -> Result<(levee_policy::Instant, Option<levee_policy::Instant>), LeveeError> {
    let headers = DeadlineHeaders {
        timeout_ms: said.timeout_ms.map(HeaderValue::as_bytes),
        deadline_ms: said.deadline_ms.map(HeaderValue::as_bytes),
        patience_secs: sdk_patience(said),
    };
    // The wall clock matters only to an absolute deadline (`x-deadline-ms`).
    let unix_ms = said.deadline_ms.map_or(0, |_| shared.clock.unix_ms());
    let wants = levee_policy::DeadlinePolicy::caller_wants(headers, unix_ms)
        .map_err(|e| LeveeError::bad_request(format!("levee: {e}")))?;
    let deadline = route.deadline.resolve_remaining(wants, arrived);
    let own = if r.stream {
        wants.map(|w| arrived + w)
    } else {
        None
    };
    Ok((deadline, own))
}

/// The idempotency key Levee sends for a request that has none: a UUIDv7,
/// in one allocation that every attempt's copy shares (a `String` turned
/// into a header value took three: the string, its copy, and a shared
/// header made at the first clone).
fn generated_key(shared: &Shared) -> HeaderValue {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    shared.uuid_v7().hyphenated().encode_lower(&mut text);
    HeaderValue::from_maybe_shared(Bytes::from_owner(text))
        .unwrap_or(HeaderValue::from_static("levee"))
}

/// The idempotency key Levee sends a provider for a request with a key of
/// its own: the hex SHA-256 of a fixed label, the caller's identity digest
/// and the store key (endpoint path and caller's key). Two callers using the
/// same key send the provider two different values, so one caller cannot
/// make the provider answer another caller's request from its own cache;
/// the same caller with the same key sends the same value on every attempt
/// and from every replica, so a provider deduplicates its retries.
fn forwarded_key(caller: &[u8; 32], store_key: &str) -> HeaderValue {
    let digest = Sha256::new()
        .chain_update(b"levee idempotency-key v1\n")
        .chain_update(caller)
        .chain_update(store_key.as_bytes())
        .finalize();
    let mut text = [0u8; 64];
    for (pair, b) in text.chunks_exact_mut(2).zip(digest) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 0xf)];
    }
    HeaderValue::from_maybe_shared(Bytes::from_owner(text))
        .unwrap_or(HeaderValue::from_static("levee"))
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The idempotency store's one bucket for every caller of a keyless gateway.
const KEYLESS: [u8; 32] = [0xff; 32];

/// Admission: the deadline, what each target is sent, the bulkhead slot and
/// the idempotency key; then the driver.
async fn admit(
    shared: &Arc<Shared>,
    r: Inbound,
    note: &mut Option<IdemNote>,
    id: &HeaderValue,
    admitted: &mut bool,
    sent: &AtomicU32,
) -> Result<Response<Body>, LeveeError> {
    let route = &shared.config.routes[r.route];
    let arrived = shared.clock.now();
    let said = Said::of(&r.parts.headers);
    let (deadline, stream_deadline) = resolve_deadline(shared, route, &r, &said, arrived)?;
    shared.census.admitted(
        r.caller.key_index(&shared.keys),
        said.caller.map(HeaderValue::as_bytes),
        r.route,
        deadline.saturating_since(arrived),
        arrived,
    );
    // What each target will be sent, checked now so that nothing about the
    // request itself can fail later and be blamed on a provider.
    let path_and_query: &str = r.parts.uri.path_and_query().map_or(r.path, |p| p.as_str());
    let plans = prepare_targets(shared, route, &r, path_and_query)?;
    // Cross-layer accounting: is a caller layer still retrying?
    let (key_header, sdk_retry) = caller_layer(shared, &said)?;
    let Some(bulkhead) = shared.routes[r.route].bulkhead.try_acquire() else {
        return Err(shed(shared, route));
    };
    // Idempotency: the caller's key, or one Levee makes for this request.
    // The store keys it by endpoint too: an answer is replayed only to the
    // endpoint (and dialect) that produced it.
    let store_key = key_header
        .as_deref()
        .map(|k| crate::state::idempotency::store_key(r.parts.uri.path(), k));
    let (lease, idem) = match store_key.as_deref() {
        None => (None, generated_key(shared)),
        Some(k) => {
            let caller = r.caller.digest();
            let (bucket, scoped) = r.caller.store_scope(caller, k);
            let key = KeyClaim {
                caller: bucket,
                key: &scoped,
                body_hash: Sha256::digest(&r.body).into(),
                counted: sdk_retry,
            };
            match claim_key(shared, key, &route.name, deadline, note).await? {
                Led::Lead(lease) => (lease, forwarded_key(&caller, k)),
                Led::Replayed(resp) => return Ok(resp),
            }
        }
    };
    let trace = match &shared.telemetry {
        Some(t) => t.request(&r.parts.headers, &route.name),
        None => crate::observe::telemetry::RequestTrace::off(),
    };
    let obs = Observer::admitted(
        Arc::clone(shared),
        r.route,
        trace,
        arrived,
        // Only a `--record` tape needs them (the path and the caller's model).
        shared
            .recorder
            .is_some()
            .then(|| (path_and_query.to_string(), r.model.clone())),
        observer::Asked {
            id: id.clone(),
            key: r.caller.key_index(&shared.keys),
            caller: said.caller.cloned(),
            path: r.path,
            dialect: r.dialect,
            stream: r.stream,
        },
    );
    *admitted = true;
    // The caller's place in the providers' allowances: its key's name, or
    // without keys the name it gives; the tokens the request may cost.
    let key_name = r
        .caller
        .key_index(&shared.keys)
        .and_then(|i| shared.config.keys.get(i));
    let named = key_name
        .map(CallerKey::name)
        .or_else(|| said.caller.and_then(|v| v.to_str().ok()));
    let ask = crate::upstream::allowance::ask_for(
        &shared.config,
        named,
        crate::upstream::allowance::estimate(&r.body),
    );
    let ctx = Ctx {
        shared: Arc::clone(shared),
        bulkhead: Some(bulkhead),
        route: r.route,
        dialect: r.dialect,
        method: r.parts.method,
        once: r.once,
        parts_headers: r.parts.headers,
        plans,
        model: r.model,
        stream: r.stream,
        idem,
        caller_retry: sdk_retry,
        stream_deadline,
        ask,
    };
    crate::request::drive::run(ctx, deadline, lease, obs, sent).await
}

/// The route's bulkhead is full: the request is shed at once, never queued.
fn shed(shared: &Shared, route: &levee_config::Route) -> LeveeError {
    let shed = levee_policy::Failure::shed();
    observer::report(
        shared,
        RequestEvent::Shed {
            route: &route.name,
            reason: shed.reason,
        },
    );
    let msg = format!(
        "levee: route `{}` is at its max_in_flight; rejected at once rather than queued",
        route.name
    );
    LeveeError::failure(&shed, msg)
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
            observer::report(shared, RequestEvent::IdempotencyLocal);
            "local"
        }
        Some(IdemNote::Rerun) => "rerun",
    };
    answer.headers_mut().insert(
        headers::X_LEVEE_IDEMPOTENCY,
        HeaderValue::from_static(value),
    );
    answer
}

/// Each target's body and URI — the model rewritten, or the request
/// translated for a target of the other dialect, or the target skipped when
/// it cannot carry the request — checked now so that nothing about the
/// request itself can fail later and be blamed on a provider. `Err` is the
/// status and message of a 400-class answer when no target can take the
/// request as sent.
fn prepare_targets(
    shared: &Shared,
    route: &levee_config::Route,
    r: &Inbound,
    path_and_query: &str,
) -> Result<Vec<Plan>, LeveeError> {
    let (caller, path, body, model) = (r.dialect, &r.path, &r.body, &r.model);
    let mut plans = Vec::with_capacity(route.targets.len());
    let mut refused: Option<levee_translate::Untranslatable> = None;
    let mut platform_refused: Option<String> = None;
    for (t, target) in route.targets.iter().enumerate() {
        let to = route.rewrite_model(t, model);
        let provider = &shared.providers[target.provider];
        let mut upstream_path = path_and_query;
        let (body, crossing, skip) = match crossing::prepare(caller, provider.api, path, body, to) {
            crossing::Prepared::Same if !r.rewrite => (body.clone(), None, None),
            crossing::Prepared::Same => match rewrite_model(body, model, to) {
                Ok(b) => (b, None, None),
                Err(e) => return Err(LeveeError::bad_request(format!("levee: {e}"))),
            },
            crossing::Prepared::Crossed {
                body,
                path,
                crossing,
            } => {
                upstream_path = path;
                (body, Some(crossing), None)
            }
            crossing::Prepared::Skip(why) => {
                // Counted when the planner chooses this target, or below
                // when no target can take the request: a backup that cannot
                // carry embeddings changes nothing while the primary answers.
                let skip = SkipReason::Untranslatable(why.reason);
                refused.get_or_insert(why);
                (Bytes::new(), None, Some(skip))
            }
        };
        // A cloud platform may move the model into the path and reshape
        // the body; a request it cannot serve skips the target.
        let (body, uri, skip) = match provider.platform.target(upstream_path, &body) {
            _ if skip.is_some() => (body, provider.uri_for(upstream_path), skip),
            Ok(None) => (body, provider.uri_for(upstream_path), skip),
            Ok(Some((path, body))) => (body, provider.platform_uri(&path), skip),
            Err(msg) => {
                platform_refused.get_or_insert(msg);
                (
                    Bytes::new(),
                    provider.uri_for(upstream_path),
                    Some(SkipReason::PlatformUnsupported),
                )
            }
        };
        let Some(uri) = uri else {
            let msg = "levee: the request URI is too long to forward";
            return Err(LeveeError::of(Why::UriTooLong, msg));
        };
        // A request sent at most once has one target: the first that can
        // carry it; the others are held back (not a retry, not a fallback).
        let held = r.once && skip.is_none() && plans.iter().any(|p: &Plan| !p.skipped());
        plans.push(Plan {
            body,
            uri,
            crossing,
            skip,
            held,
        });
    }
    if let (true, None, Some(why)) = (plans.iter().all(Plan::skipped), &refused, &platform_refused)
    {
        let msg = format!(
            "levee: no target of route `{}` can carry this request: {why}",
            route.name
        );
        return Err(LeveeError::bad_request(msg));
    }
    if let (true, Some(why)) = (plans.iter().all(Plan::skipped), &refused) {
        for (t, plan) in plans.iter().enumerate() {
            let provider = &shared.providers[route.targets[t].provider];
            if let Some(label) = plan.skip {
                observer::report(
                    shared,
                    RequestEvent::TranslationRefused {
                        route: &route.name,
                        provider: &provider.name,
                        reason: label,
                    },
                );
            }
        }
        let msg = format!(
            "levee: no target of route `{}` can carry this request: {why}",
            route.name
        );
        return Err(LeveeError::bad_request(msg));
    }
    Ok(plans)
}

/// A request's idempotency key, ready to claim.
struct KeyClaim<'a> {
    caller: [u8; 32],
    key: &'a str,
    body_hash: [u8; 32],
    /// Already counted as a caller-layer retry.
    counted: bool,
}

/// What claiming a key gave: the lease to lead with (`None`: run without
/// deduplication), or the stored answer replayed.
enum Led {
    Lead(Option<Lease>),
    Replayed(Response<Body>),
}

/// Leads, follows or replays the key. `Err`: a conflict, the shared store
/// refused, or the deadline passed while following.
async fn claim_key(
    shared: &Arc<Shared>,
    k: KeyClaim<'_>,
    route: &str,
    deadline: levee_policy::Instant,
    note: &mut Option<IdemNote>,
) -> Result<Led, LeveeError> {
    let mut counted = k.counted;
    let mut waited = false;
    let until = shared.clock.to_tokio(deadline);
    loop {
        let claim = Claim {
            caller: k.caller,
            key: k.key,
            body_hash: k.body_hash,
            now: shared.clock.now(),
            following: waited,
        };
        let (claimed, scope) = shared.idempotency.claim(claim).await;
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
            observer::report(shared, RequestEvent::CallerRetry);
            counted = true;
        }
        let follow = match claimed {
            Claimed::Lead(l) => return Ok(Led::Lead(Some(l))),
            Claimed::Untracked => return Ok(Led::Lead(None)),
            Claimed::Unavailable => {
                *note = None;
                observer::report(shared, RequestEvent::StateUnavailable { route });
                let msg = "levee: the shared idempotency store is unavailable and state.on_unavailable is `refuse`: this keyed request was not sent (it could run twice across replicas)";
                return Err(LeveeError::of(Why::StateUnavailable, msg));
            }
            Claimed::Replay(stored) => return Ok(Led::Replayed(replay(shared, route, &stored))),
            Claimed::Conflict => {
                let msg = "levee: this idempotency-key was used with a different request body";
                return Err(LeveeError::of(Why::KeyReused, msg));
            }
            Claimed::Follow(f) => f,
        };
        waited = true;
        let in_time = match follow {
            Follow::Local(mut rx) => {
                match tokio::time::timeout_at(until, rx.wait_for(|v| v.is_some())).await {
                    Ok(Ok(v)) => match v.clone() {
                        Some(stored) => return Ok(Led::Replayed(replay(shared, route, &stored))),
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
            observer::report(shared, RequestEvent::FollowTimedOut { route });
            let msg = "levee: deadline passed while waiting for an earlier request with the same idempotency-key";
            return Err(LeveeError::deadline_exceeded(msg));
        }
    }
}

fn replay(shared: &Shared, route: &str, stored: &Stored) -> Response<Body> {
    observer::report(shared, RequestEvent::Replayed { route });
    let mut out = Response::new(full(stored.body.clone()));
    *out.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    *out.headers_mut() = stored.headers.clone();
    out.headers_mut()
        .insert(headers::X_LEVEE_REPLAYED, HeaderValue::from_static("true"));
    out.headers_mut()
        .insert(headers::X_LEVEE_ATTEMPTS, HeaderValue::from(0u32));
    out
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
/// the credentials it sent, else anonymous. `Err` (401) when gateway keys
/// are configured and none matches.
fn authenticate(shared: &Shared, said: &Said) -> Result<Caller, LeveeError> {
    let presented = said.credentials();
    if shared.keys.is_empty() {
        return Ok(Caller::Presented(presented));
    }
    let digest = presented
        .as_ref()
        .map(|(v, bearer)| credential_digest(v, *bearer));
    match digest {
        Some(d) if crate::observe::census::key_index(&shared.keys, &d).is_some() => {
            Ok(Caller::Checked(d))
        }
        _ => {
            let msg = "levee: missing or invalid API key for this gateway";
            Err(LeveeError::of(Why::Unauthorized, msg))
        }
    }
}

/// Who sent a request. The SHA-256 digest of its credentials (~3,600
/// instructions for an OpenAI key, 5 % of a whole proxied request from an
/// SDK) is
/// made only when something needs it: checking it against the gateway's
/// keys, or claiming an idempotency key the caller brought.
enum Caller {
    /// Matched one of the gateway's keys: this digest.
    Checked([u8; 32]),
    /// No gateway keys to check against: the `x-api-key` value, or the
    /// `authorization` value (`true`: its token is after the scheme), if any.
    Presented(Option<(HeaderValue, bool)>),
}

impl Caller {
    /// The digest of the credentials sent; all zero for none.
    fn digest(&self) -> [u8; 32] {
        match self {
            Caller::Checked(d) => *d,
            Caller::Presented(Some((v, bearer))) => credential_digest(v, *bearer),
            Caller::Presented(None) => [0; 32],
        }
    }

    /// Where a keyed request lives in the idempotency store: the bucket it
    /// shares the store's room with, and its key there. Fair shares go to
    /// the callers the operator named (the gateway's keys). On a keyless
    /// gateway anyone can make up credentials (100 made-up `authorization`
    /// values once took 100 shares and evicted another caller's answers),
    /// so keyless callers share one bucket; each still finds only its own
    /// answers, its credentials' digest being part of its key.
    fn store_scope(&self, digest: [u8; 32], store_key: &str) -> ([u8; 32], String) {
        match self {
            Caller::Checked(_) => (digest, store_key.to_string()),
            Caller::Presented(_) => {
                let mut scoped = String::with_capacity(65 + store_key.len());
                for b in digest {
                    scoped.push(char::from(HEX[usize::from(b >> 4)]));
                    scoped.push(char::from(HEX[usize::from(b & 0xf)]));
                }
                scoped.push(' ');
                scoped.push_str(store_key);
                (KEYLESS, scoped)
            }
        }
    }

    /// Which of the gateway's keys the caller used.
    fn key_index(&self, keys: &[[u8; 32]]) -> Option<usize> {
        match self {
            Caller::Checked(d) => crate::observe::census::key_index(keys, d),
            Caller::Presented(_) => None,
        }
    }
}

fn credential_digest(v: &HeaderValue, bearer: bool) -> [u8; 32] {
    let token = if bearer {
        bearer_token(v.as_bytes())
    } else {
        v.as_bytes()
    };
    Sha256::digest(token).into()
}

fn printable(s: &str) -> String {
    s.chars().take(100).filter(|c| !c.is_control()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderName;

    /// The digest made late is the one made at once: the `x-api-key`
    /// value, else the `authorization` token, else all zero; and a caller
    /// not checked against gateway keys has none of them.
    #[test]
    fn a_callers_digest_made_when_needed_is_the_credentials_digest() {
        type Case = (&'static [(&'static str, &'static str)], &'static [u8]);
        let cases: [Case; 6] = [
            (&[], b""),
            (&[("x-api-key", "k1")], b"k1"),
            (&[("authorization", "Bearer k2")], b"k2"),
            (&[("authorization", "bearer   k2")], b"k2"),
            (&[("authorization", "Basic k3")], b"Basic k3"),
            (
                &[("authorization", "Bearer k2"), ("x-api-key", "k1")],
                b"k1",
            ),
        ];
        for (fields, token) in cases {
            let mut h = HeaderMap::new();
            for (n, v) in fields {
                h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
            }
            let caller = Caller::Presented(Said::of(&h).credentials());
            let want: [u8; 32] = if token.is_empty() {
                [0; 32]
            } else {
                Sha256::digest(token).into()
            };
            assert_eq!(caller.digest(), want, "{fields:?}");
            assert_eq!(caller.key_index(&[want]), None, "{fields:?}");
            assert_eq!(Caller::Checked(want).key_index(&[[9; 32], want]), Some(1));
        }
    }

    #[test]
    fn the_one_pass_reads_each_field_as_a_lookup_would() {
        let mut h = HeaderMap::new();
        let fields = [
            (headers::X_API_KEY, "k1"),
            (http::header::AUTHORIZATION, "Bearer k2"),
            (headers::IDEMPOTENCY_KEY, "idem"),
            (headers::X_STAINLESS_RETRY_COUNT, "2"),
            (headers::X_STAINLESS_TIMEOUT, "60"),
            (headers::X_STAINLESS_READ_TIMEOUT, "30"),
            (headers::X_TIMEOUT_MS, "5000"),
            (headers::X_DEADLINE_MS, "1700000000000"),
            (
                HeaderName::from_static(crate::observe::census::CALLER_HEADER),
                "billing",
            ),
        ];
        for (name, value) in &fields {
            h.append(name.clone(), HeaderValue::from_static(value));
            // A repeated field: the first value counts, as with `get`.
            h.append(name.clone(), HeaderValue::from_static("second"));
        }
        h.append("x-other", HeaderValue::from_static("ignored"));
        let said = Said::of(&h);
        let read = [
            said.api_key,
            said.authorization,
            said.idempotency_key,
            said.stainless_retry_count,
            said.stainless_timeout,
            said.stainless_read_timeout,
            said.timeout_ms,
            said.deadline_ms,
            said.caller,
        ];
        for ((name, _), got) in fields.iter().zip(read) {
            assert_eq!(got, h.get(name), "{name}");
        }
        let empty = HeaderMap::new();
        let none = Said::of(&empty);
        assert!(none.api_key.is_none() && none.caller.is_none());
    }
}
