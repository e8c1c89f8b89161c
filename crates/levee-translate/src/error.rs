//! Error bodies, both ways: a backup's error reaches the caller in the
//! caller's own dialect, with the same status and the provider's message, so
//! the caller's SDK raises its usual typed error.

use crate::anthropic as a;
use crate::openai as o;
use crate::Dialect;
use bytes::Bytes;
use serde_json::Value;

/// Anthropic's error `type` for an HTTP status.
pub fn anthropic_type_for_status(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// OpenAI's error `type` for an HTTP status.
pub fn openai_type_for_status(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

/// Anthropic's error `type` for an OpenAI one (mid-stream errors carry no status).
pub fn anthropic_type_for_openai(kind: Option<&str>) -> &'static str {
    match kind {
        Some("invalid_request_error") => "invalid_request_error",
        Some("authentication_error") => "authentication_error",
        Some("permission_error") => "permission_error",
        Some("rate_limit_error" | "requests" | "tokens") => "rate_limit_error",
        _ => "api_error",
    }
}

/// OpenAI's error `type` for an Anthropic one.
pub fn openai_type_for_anthropic(kind: &str) -> &'static str {
    match kind {
        "invalid_request_error" | "not_found_error" | "request_too_large" => {
            "invalid_request_error"
        }
        "authentication_error" => "authentication_error",
        "permission_error" => "permission_error",
        "rate_limit_error" => "rate_limit_error",
        _ => "server_error",
    }
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
    let message = message_of(body);
    let out = match caller {
        Dialect::OpenAi => serde_json::to_vec(&o::ErrorBody {
            error: o::ErrorObject {
                message,
                kind: Some(openai_type_for_status(status).into()),
                param: None,
                code: None::<Value>,
            },
        }),
        Dialect::Anthropic => serde_json::to_vec(&a::ErrorBody {
            kind: "error".into(),
            error: a::ErrorObject {
                kind: anthropic_type_for_status(status).into(),
                message,
            },
        }),
    };
    out.map(Bytes::from).unwrap_or_default()
}
