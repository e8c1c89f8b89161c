//! Building responses: Levee's own errors in the caller's dialect, and the
//! headers every response carries.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use levee_wire::Dialect;
use std::convert::Infallible;
use std::time::Duration;

/// The body type of every response.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A complete body.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed_unsync()
}

/// Sets `x-should-retry: false`, `x-levee-reason`, `x-levee-attempts` and `retry-after`.
pub fn error_headers(
    h: &mut HeaderMap,
    reason: &str,
    attempts: u32,
    retry_after: Option<Duration>,
) {
    h.insert("x-should-retry", HeaderValue::from_static("false"));
    if let Ok(v) = HeaderValue::from_str(reason) {
        h.insert("x-levee-reason", v);
    }
    h.insert("x-levee-attempts", HeaderValue::from(attempts));
    if let Some(ra) = retry_after {
        // Whole seconds, rounded up, so a caller that honours it is never early.
        let secs = ra.as_millis().div_ceil(1000).max(1);
        h.insert(
            RETRY_AFTER,
            HeaderValue::from(u64::try_from(secs).unwrap_or(u64::MAX)),
        );
    }
}

/// An error Levee generates, in the caller's dialect.
pub fn levee_error(
    dialect: Dialect,
    status: u16,
    reason: &str,
    message: &str,
    attempts: u32,
    retry_after: Option<Duration>,
) -> Response<Body> {
    let mut resp = Response::new(full(dialect.error_body(status, reason, message)));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    error_headers(resp.headers_mut(), reason, attempts, retry_after);
    resp
}

/// Response headers from upstream that are not passed back.
pub fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "content-length"
    )
}

/// Copies an upstream response's end-to-end headers.
pub fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (n, v) in from {
        if !is_hop_by_hop(n.as_str()) {
            to.append(n.clone(), v.clone());
        }
    }
}
