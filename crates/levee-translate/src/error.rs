//! Error bodies, both ways: a backup's error reaches the caller in the
//! caller's own dialect, with the same status and the provider's message, so
//! the caller's SDK raises its usual typed error.

use crate::Dialect;
use bytes::Bytes;
use levee_wire::error;

/// The provider's message in either dialect's error shape, or the body's
/// first 500 characters when it has neither (a proxy's HTML page, say).
fn message_of(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Any {
        error: Inner,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        message: String,
    }
    match serde_json::from_slice::<Any>(body) {
        Ok(a) => a.error.message,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned(),
    }
}

/// An upstream error body in the caller's dialect (the same body when the
/// dialects match).
pub fn translate(upstream: Dialect, caller: Dialect, status: u16, body: &[u8]) -> Bytes {
    if upstream == caller {
        return Bytes::copy_from_slice(body);
    }
    error::body(caller, status, &message_of(body), None, None)
}
