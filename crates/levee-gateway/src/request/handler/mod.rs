//! The front of one request: admit, route, resolve the deadline, claim the
//! idempotency key; then hand it to [`crate::request::drive`], which drives the
//! policy core's planner until it dispatches a success or gives up.

use crate::error::BoxError;
use crate::http::collect::{collect_limited, collect_until, CollectError};
use crate::http::inspect::{self, inspect, rewrite_model};
use crate::http::respond::{full, Body, LeveeError, Why};
use crate::observe::event::RequestEvent;
use crate::observe::outcome::SkipReason;
use crate::request::crossing;
use crate::request::drive::Ctx;
use crate::request::observer::{self, Observer};
use crate::request::plan::Plan;
use crate::runtime::shared::Shared;
use crate::runtime::shutdown::Watcher;
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

mod admit;
mod aws_answer;
mod caller;
mod keys;
pub(crate) mod native;
mod origin;
pub(crate) mod sigv4;
use admit::*;
use caller::*;
use keys::*;
use origin::*;

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
    handle_watched(shared, req, Watcher::Request)
}

/// [`handle`], with `watcher` saying who wakes the request's task when the
/// shutdown grace period ends: the request itself, or the caller's
/// connection, which holds one waiter for its life.
pub(crate) fn handle_watched<B>(
    shared: Arc<Shared>,
    req: Request<B>,
    watcher: Watcher,
) -> impl std::future::Future<Output = Response<Body>>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let dialect = Dialect::of_request(native::canonical(req.uri().path()), req.headers());
    // The answer's future (every await on the request path: 3,584 bytes by
    // `-Zprint-type-sizes`, the driver's another 3,864) has
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
    // Written into its allocation, not moved there: `Box::pin` built the
    // future on the stack and copied all of it into the box (~440
    // instructions a request by callgrind).
    let answer = Box::into_pin(Box::write(
        Box::new_uninit(),
        answer(shared, req, dialect, watcher),
    ));
    crate::request::fits_fast_path(&*answer);
    #[allow(clippy::redundant_async_block)]
    async move {
        answer.await
    }
}

/// The request's answer: a provider's, Levee's, or the one place a
/// [`LeveeError`] becomes a response. An `async` block, not an `async fn`:
/// an `async fn` keeps each argument twice in its future (the argument's
/// slot, and the local it is moved to), and the request is 264 bytes.
#[allow(clippy::manual_async_fn)]
fn answer<B>(
    shared: Arc<Shared>,
    req: Request<B>,
    dialect: Dialect,
    watcher: Watcher,
) -> impl std::future::Future<Output = Response<Body>>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    async move {
        let mut note = None;
        let aws = native::aws_shape(req.uri().path());
        let arrived = shared.clock.now();
        let id = request_id(&shared, req.headers(), arrived);
        // The path and method as the refusal's log line names them (no copy).
        let path = path_label(native::canonical(req.uri().path()));
        let method = req.method().clone();
        let mut admitted = false;
        let sent = AtomicU32::new(0);
        // Pinned where it is made: moved into the race, the whole request's
        // future (kilobytes) was copied twice per request.
        let served = {
            let serving = std::pin::pin!(serve(
                &shared,
                req,
                dialect,
                &mut note,
                &id,
                &mut admitted,
                &sent,
            ));
            shared.grace_over.race(serving, watcher).await
        };
        let Some(served) = served else {
            // The grace period ended first: a request still waiting for its
            // answer (admitted or not) is answered 503 rather than cut.
            observer::report(&shared, RequestEvent::ShuttingDown);
            let mut resp = crate::runtime::shutdown::cut_short(dialect, sent.into_inner());
            if let Some(shape) = aws {
                resp = aws_answer::reshape(resp, shape).await;
            }
            with_request_id(&mut resp, id.value);
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
                        request_id = id.value.to_str().unwrap_or(""),
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
        if let Some(shape) = aws {
            resp = aws_answer::reshape(resp, shape).await;
        }
        with_request_id(&mut resp, id.value);
        resp
    }
}

/// A request's id, and whether Levee made it.
pub(super) struct RequestId {
    pub(super) value: HeaderValue,
    /// Made by Levee (the caller sent none it could use): a new UUIDv7, so
    /// it also serves as the idempotency key the request's attempts send a
    /// provider (making a second cost ~240 instructions and an allocation).
    pub(super) made: bool,
    /// When the request's head was in (the clock read that stamped it).
    pub(super) arrived: levee_policy::Instant,
}

/// The request's id: the caller's `x-request-id` when it sent a usable one
/// (1 to 128 visible characters), else a new UUIDv7.
fn request_id(shared: &Shared, h: &HeaderMap, arrived: levee_policy::Instant) -> RequestId {
    if let Some(v) = crate::http::h1wire::field(h, &headers::X_REQUEST_ID) {
        let b = v.as_bytes();
        if !b.is_empty() && b.len() <= 128 && b.iter().all(|c| c.is_ascii_graphic()) {
            return RequestId {
                value: v.clone(),
                made: false,
                arrived,
            };
        }
    }
    RequestId {
        value: admit::generated_key(shared, arrived),
        made: true,
        arrived,
    }
}

/// Sets `x-request-id` (on the answer's stamp); a provider's own id moves
/// to `x-levee-upstream-request-id` (quote it to the provider's support).
fn with_request_id(resp: &mut Response<Body>, id: HeaderValue) {
    let h = resp.headers_mut();
    if let Some(theirs) = h.remove(headers::X_REQUEST_ID) {
        if theirs != id {
            h.insert(headers::X_LEVEE_UPSTREAM_REQUEST_ID, theirs);
        }
    }
    resp.body_mut().stamp_mut().request_id = Some(id);
}

/// The request, read and routed, then admitted and answered. Two futures
/// in turn, not one: everything that reads the request (its head, its
/// body as it was read and as it is served, the route's inspection) lives
/// in the first and is gone before admission, so the admitted request's
/// future holds only what admission took. As one `async fn` those locals
/// stayed in every later state (~1 KiB), and the answer's future, boxed
/// once a request, was over the 4 KiB up to which jemalloc allocates and
/// frees from its thread cache's fast path (~250 instructions more for
/// each of the two calls).
async fn serve<B>(
    shared: &Arc<Shared>,
    req: Request<B>,
    dialect: Dialect,
    note: &mut Option<IdemNote>,
    id: &RequestId,
    admitted: &mut bool,
    sent: &AtomicU32,
) -> Result<Response<Body>, LeveeError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    // Bound in a statement of its own: the `?`'s temporaries would
    // otherwise keep two slots (~390 bytes each) through admission.
    let asked = inbound(shared, req, id.arrived, dialect).await?;
    match asked {
        Asked::Models(resp) => Ok(resp),
        Asked::Served(request) => admit(shared, request, note, id, admitted, sent).await,
    }
}

/// What a request asks once read: the model list (answered here), or
/// an endpoint served by a route. Every request but a model list's is
/// `Served`: boxing it would cost each request an allocation.
#[allow(clippy::large_enum_variant)]
enum Asked {
    Models(Response<Body>),
    Served(Inbound),
}

/// The request read and routed: its endpoint, method and caller key
/// checked, its body read (and its signature, when signed, checked over
/// it), its model and route found.
async fn inbound<B>(
    shared: &Arc<Shared>,
    req: Request<B>,
    arrived: levee_policy::Instant,
    dialect: Dialect,
) -> Result<Asked, LeveeError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let native = native::of(req.uri().path());
    let asked = native.as_ref().map_or(req.uri().path(), |n| n.path);
    let models = asked == paths::MODELS || asked.starts_with("/v1/models/");
    if models {
        let asked = asked.to_string();
        if req.method() != Method::GET {
            return Err(LeveeError::of(Why::MethodNotAllowed, "levee: use GET"));
        }
        // The models are the deployment's map: as private as the routes.
        authenticate(shared, &Said::of(req.headers()))?;
        let (parts, _) = req.into_parts();
        sigv4::verify(shared, &parts, &[])?;
        let query = parts.uri.query();
        // Boxed: a rare request's future (~2.2 KiB) is not part of every
        // request's.
        let resp = Box::pin(crate::request::models::answer(
            shared, dialect, &asked, query,
        ))
        .await?;
        return Ok(Asked::Models(resp));
    }
    let kind = endpoint(shared, req.method(), asked)?;
    let post_only = matches!(kind, Kind::Served(_) | Kind::CountTokens);
    if post_only && req.method() != Method::POST {
        return Err(LeveeError::of(Why::MethodNotAllowed, "levee: use POST"));
    }
    let caller = authenticate(shared, &Said::of(req.headers()))?;
    let (kind, only_provider) = origin_of(shared, kind, asked).await?;
    let (parts, body, read_at) = read_body(shared, req, arrived).await?;
    // A signed request's signature covers its body: checked once it is read.
    sigv4::verify(shared, &parts, &body)?;
    let (parts, body) = as_served(native.as_ref(), parts, body)?;
    let once = !post_only && !idempotent(&parts.method);
    let r = routed(shared, kind, &parts, &body)?;
    Ok(Asked::Served(Inbound {
        parts,
        body,
        path: r.path,
        model: r.model,
        stream: r.stream,
        output_cap: r.output_cap,
        caller,
        route: r.route,
        dialect,
        rewrite: r.rewrite,
        once,
        only_provider,
        read_at,
    }))
}

/// Where a request goes, and what its body tells admission.
struct Routed {
    route: usize,
    path: &'static str,
    model: String,
    stream: bool,
    rewrite: bool,
    output_cap: Option<u64>,
}

/// An endpoint Levee serves is routed by the model its body names; a
/// pass-through goes by the route it was found on, its body as it came.
fn routed(
    shared: &Shared,
    kind: Kind,
    parts: &http::request::Parts,
    body: &Bytes,
) -> Result<Routed, LeveeError> {
    Ok(match kind {
        Kind::Served(_) | Kind::CountTokens => {
            let inspected =
                inspect(body).map_err(|e| LeveeError::bad_request(format!("levee: {e}")))?;
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
            Routed {
                route,
                path,
                stream: inspected.stream && kind != Kind::CountTokens,
                model: inspected.model,
                rewrite: true,
                output_cap: inspected.max_output,
            }
        }
        Kind::Stored { route, label } | Kind::Listed { route, label } => Routed {
            route,
            path: label,
            model: String::new(),
            stream: streams(parts, body),
            rewrite: false,
            output_cap: crate::upstream::allowance::output_cap(body),
        },
    })
}

/// A cloud client's request as the endpoint it names: that path (no
/// query), its body with the path's model and without the cloud's fields.
fn as_served(
    native: Option<&native::Native>,
    mut parts: http::request::Parts,
    body: Bytes,
) -> Result<(http::request::Parts, Bytes), LeveeError> {
    let Some(n) = native else {
        return Ok((parts, body));
    };
    parts.uri = http::Uri::from_static(n.path);
    let body = native::body(n, &body, &mut parts.headers)
        .map_err(|e| LeveeError::bad_request(format!("levee: {e}")))?;
    Ok((parts, body))
}

/// Why `path` could be read as another path by whatever normalises it
/// after Levee (`None`: it is plain).
fn ambiguous_path(path: &str) -> Option<&'static str> {
    if path.contains('\\') {
        return Some("a backslash");
    }
    if path.contains(';') {
        return Some("a `;` parameter");
    }
    let lower = path.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c"].iter().any(|e| lower.contains(e)) {
        return Some("an escaped dot, slash or backslash");
    }
    let mut segments = path.split('/').skip(1);
    if segments.any(|s| s.is_empty() || s == "." || s == "..") {
        return Some("an empty, `.` or `..` segment");
    }
    None
}

/// What the path asks of Levee: an endpoint it serves, or a provider path
/// a route passes through; else a 404 that lists what it serves.
fn endpoint(shared: &Shared, method: &Method, asked: &str) -> Result<Kind, LeveeError> {
    if let Some(path) = PATHS.iter().copied().find(|p| *p == asked) {
        return Ok(Kind::Served(path));
    }
    // A path that a proxy or a provider could read as another (a dot
    // segment, an escaped dot, slash or backslash, a backslash, an empty
    // segment, a `;` parameter) is refused, never matched: matched on its
    // raw form and normalised further on, `/v1/batches/../files` would
    // leave the prefix it was let in by.
    if let Some(why) = ambiguous_path(asked) {
        let msg = format!(
            "levee: the path `{}` has {why}: send the path in its plain form",
            printable(asked)
        );
        return Err(LeveeError::bad_request(msg));
    }
    let kind = pass_through(shared, method, asked);
    if let Some(Kind::Listed { route, .. }) = kind {
        let allowed = &shared.config.routes[route].passthrough_methods;
        if !allowed.contains(method) {
            let names: Vec<&str> = allowed.iter().map(Method::as_str).collect();
            let msg = format!(
                "levee: this path is passed through for {} only (the route's passthrough_methods)",
                names.join(", ")
            );
            return Err(LeveeError::of(Why::MethodNotAllowed, msg));
        }
    }
    kind.ok_or_else(|| {
        let msg = format!(
            "levee: no such endpoint `{}`; use one of {}, {} or a path a route lists in `passthrough`",
            printable(asked),
            PATHS.join(", "),
            PASSED_THROUGH,
        );
        LeveeError::of(Why::NotFound, msg)
    })
}

/// How logs name a path a route lists in `passthrough`.
pub(super) const PASSTHROUGH_LABEL: &str = "(passthrough)";

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
        label: PASSTHROUGH_LABEL,
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
    /// The output the body caps the answer at (`max_tokens` and its
    /// kin), for the admission estimate.
    output_cap: Option<u64>,
    caller: Caller,
    route: usize,
    dialect: Dialect,
    /// The body's `model` is rewritten for each target (else the body goes
    /// as it came).
    rewrite: bool,
    /// Sent at most once: one attempt, no fallback (a pass-through whose
    /// method is not idempotent).
    once: bool,
    /// Sent only to this provider's targets (a stored object's reads go
    /// where it was created).
    only_provider: Option<usize>,
    /// When the body was whole: admission counts the deadline and Levee's
    /// own time from here, not from the caller's upload.
    read_at: levee_policy::Instant,
}

/// Reads the whole body within `limits.max_body_bytes` and
/// `limits.body_read_timeout` (from the head's arrival, `arrived`), and
/// says when it was whole: `arrived` when it came with the head, which a
/// small request's body does (no clock read, no timer armed: each read of
/// the clock costs ~22 ns and ~100 instructions), else the clock once it is
/// in.
async fn read_body<B>(
    shared: &Shared,
    req: Request<B>,
    arrived: levee_policy::Instant,
) -> Result<(http::request::Parts, Bytes, levee_policy::Instant), LeveeError>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let max_body = shared.config.limits.max_body_bytes;
    let too_large = |msg: String| LeveeError::of(Why::PayloadTooLarge, msg);
    // The length the body declared: its framing (the front leaves the
    // `content-length` field out of the map), else the field.
    let declared = req.body().size_hint().exact().or_else(|| {
        req.headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
    });
    if let Some(len) = declared {
        if len > max_body {
            let msg = format!("levee: request body of {len} bytes exceeds the limit of {max_body}");
            return Err(too_large(msg));
        }
    }
    let (parts, incoming) = req.into_parts();
    let limit = usize::try_from(max_body).unwrap_or(usize::MAX);
    let until = shared.clock.to_tokio(arrived) + shared.config.limits.body_read_timeout;
    let Ok((read, waited)) = collect_until(incoming, limit, until).await else {
        return Err(LeveeError::of(
            Why::RequestTimeout,
            "levee: the request body did not arrive within limits.body_read_timeout",
        ));
    };
    match read {
        Ok(body) => Ok((
            parts,
            body,
            if waited { shared.clock.now() } else { arrived },
        )),
        Err(CollectError::TooLarge) => Err(too_large(format!(
            "levee: request body exceeds the limit of {max_body} bytes"
        ))),
        Err(CollectError::Broken) => Err(LeveeError::bad_request(
            "levee: could not read the request body",
        )),
    }
}

fn printable(s: &str) -> String {
    s.chars().take(100).filter(|c| !c.is_control()).collect()
}

#[cfg(test)]
mod tests;
