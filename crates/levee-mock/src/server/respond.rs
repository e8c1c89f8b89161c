//! The answers' heads and bodies as the request path sends them: a JSON
//! body, an SSE stream, and errors in a dialect's shape (the status's own,
//! an injected fault's with its `retry-after`, an invalid body's 400).
//! Each counts its status in the stats.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};
use levee_wire::Dialect;

use crate::answer;
use crate::body::MockBody;
use crate::faults::ErrorSpec;
use crate::request;
use crate::stats::RequestGuard;

pub(super) fn json_answer(
    status: StatusCode,
    body: Bytes,
    guard: RequestGuard,
) -> Response<MockBody> {
    guard.stats().status(status.as_u16());
    let mut res = Response::new(MockBody::full(body, guard));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

pub(super) fn stream_answer(
    chunks: Vec<Bytes>,
    chunk_delay: Option<Duration>,
    cut_after: Option<usize>,
    guard: RequestGuard,
) -> Response<MockBody> {
    guard.stats().status(200);
    let mut res = Response::new(MockBody::stream(chunks, chunk_delay, cut_after, guard));
    let headers = res.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

/// An error in `dialect`'s shape with the status's own `type` and `code`.
pub(super) fn error_json(
    dialect: Dialect,
    status: StatusCode,
    message: &str,
    param: Option<&str>,
    guard: RequestGuard,
) -> Response<MockBody> {
    let body = levee_wire::error::body(dialect, status.as_u16(), message, param, None);
    json_answer(status, body, guard)
}

pub(super) fn error_answer(
    dialect: Dialect,
    spec: ErrorSpec,
    guard: RequestGuard,
) -> Response<MockBody> {
    let message = answer::injected_message(dialect, spec.status);
    let mut res = error_json(dialect, spec.status, &message, None, guard);
    let headers = res.headers_mut();
    if let Some(secs) = spec.retry_after {
        headers.insert("retry-after", HeaderValue::from(secs));
    }
    if let Some(ms) = spec.retry_after_ms {
        headers.insert("retry-after-ms", HeaderValue::from(ms));
    }
    res
}

/// The 400 of a body that did not pass the dialect's checks.
pub(super) fn invalid_answer(
    dialect: Dialect,
    invalid: request::Invalid,
    guard: RequestGuard,
) -> Response<MockBody> {
    let status = StatusCode::BAD_REQUEST;
    let body = levee_wire::error::body(
        dialect,
        status.as_u16(),
        &invalid.message,
        invalid.param,
        invalid.code,
    );
    json_answer(status, body, guard)
}
