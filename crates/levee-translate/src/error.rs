//! Error bodies, both ways: a backup's error reaches the caller in the
//! caller's own dialect, with the same status and the provider's message, so
//! the caller's SDK raises its usual typed error.

use crate::Dialect;
use bytes::Bytes;
use levee_wire::error;

/// Anthropic's error `type` for an OpenAI one (mid-stream errors carry no
/// status): the type Anthropic gives the status OpenAI's type stands for.
pub fn anthropic_type_for_openai(kind: Option<&str>) -> &'static str {
    let status = kind.map_or(500, |k| error::status_of_type(Dialect::OpenAi, k));
    Dialect::Anthropic.error_type(status)
}

/// OpenAI's error `type` for an Anthropic one.
pub fn openai_type_for_anthropic(kind: &str) -> &'static str {
    Dialect::OpenAi.error_type(error::status_of_type(Dialect::Anthropic, kind))
}

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
