//! Google's error bodies (`{"error":{"code":429,"message":…,"status":
//! "RESOURCE_EXHAUSTED"}}`, or a JSON array of them), as Google's cloud APIs
//! answer them, turned into the dialect's own error body with the same status,
//! so the core's classifier and the caller's SDK read them as their own.

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::Response;
use levee_wire::Dialect;
use serde_json::Value;

use crate::upstream::body::{Reframe, Step, UpstreamBody};

/// The largest error body turned into the dialect's shape; a longer one is
/// passed on as it came.
const MAX_ERROR_BODY: usize = 256 * 1024;

/// An answer whose error body, if Google's shape (Vertex AI, the Gemini
/// API), is turned into `dialect`'s with the same status; any other answer
/// as it is.
pub(super) fn errors(resp: Response<UpstreamBody>, dialect: Dialect) -> Response<UpstreamBody> {
    let status = resp.status();
    if status.as_u16() < 400 {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    let mapped = body.reframed(ErrorAnswer {
        buf: Vec::new(),
        dialect,
        status: status.as_u16(),
    });
    Response::from_parts(parts, mapped)
}

/// A Google error body (`{"error":{"code","message","status"}}` or an
/// array of them) as `dialect`'s error body with the same status; `None`
/// for anything else (already the dialect's shape, or not JSON).
pub(super) fn dialect_error(body: &[u8], dialect: Dialect, status: u16) -> Option<Bytes> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let first = match &v {
        Value::Array(items) => items.first()?,
        other => other,
    };
    let e = first.get("error")?.as_object()?;
    if e.contains_key("type") {
        return None;
    }
    let google = e.get("status").and_then(Value::as_str);
    if google.is_none() && !e.contains_key("code") {
        return None;
    }
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("Vertex AI gave no message");
    let message = match google {
        Some(s) => format!("{message} ({s})"),
        None => message.to_string(),
    };
    Some(levee_wire::error::body(
        dialect, status, &message, None, None,
    ))
}

/// An error answer's body, read whole and turned into the dialect's shape;
/// one over [`MAX_ERROR_BODY`] passes as it is.
struct ErrorAnswer {
    buf: Vec<u8>,
    dialect: Dialect,
    status: u16,
}

impl Reframe for ErrorAnswer {
    fn data(&mut self, data: Bytes) -> Step {
        self.buf.extend_from_slice(&data);
        if self.buf.len() > MAX_ERROR_BODY {
            return Step::Pass(Bytes::from(std::mem::take(&mut self.buf)));
        }
        Step::More
    }

    fn end(&mut self) -> Step {
        let held = std::mem::take(&mut self.buf);
        let out =
            dialect_error(&held, self.dialect, self.status).unwrap_or_else(|| Bytes::from(held));
        Step::Last((!out.is_empty()).then_some(out))
    }
}
