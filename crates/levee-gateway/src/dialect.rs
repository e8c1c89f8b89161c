//! The caller's dialect: OpenAI or Anthropic, chosen by path. Every error Levee
//! generates is written in it, so the caller's SDK raises its own typed error.

use bytes::Bytes;
use serde_json::json;

/// Which provider API the caller speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Anthropic,
}

impl Dialect {
    /// `/v1/messages` is Anthropic's; everything else OpenAI's.
    pub fn from_path(path: &str) -> Self {
        if path.starts_with("/v1/messages") {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }
    }

    fn error_type(self, status: u16) -> &'static str {
        match (self, status) {
            (_, 401) => "authentication_error",
            (_, 403) => "permission_error",
            (Dialect::Anthropic, 404) => "not_found_error",
            (Dialect::OpenAi, 404) => "invalid_request_error",
            (Dialect::Anthropic, 413) => "request_too_large",
            (_, 429) => "rate_limit_error",
            (Dialect::Anthropic, 503) | (Dialect::Anthropic, 529) => "overloaded_error",
            (Dialect::Anthropic, 504) => "timeout_error",
            (Dialect::Anthropic, s) if s >= 500 => "api_error",
            (Dialect::OpenAi, s) if s >= 500 => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// An error body in this dialect. `code` is Levee's reason.
    pub fn error_body(self, status: u16, code: &str, message: &str) -> Bytes {
        let v = match self {
            Dialect::OpenAi => json!({
                "error": { "message": message, "type": self.error_type(status), "param": null, "code": code }
            }),
            Dialect::Anthropic => json!({
                "type": "error",
                "error": { "type": self.error_type(status), "message": message }
            }),
        };
        Bytes::from(v.to_string())
    }

    /// The event that ends a stream which failed after its first byte.
    pub fn stream_error_event(self, message: &str) -> Bytes {
        self.stream_error(502, "upstream_error", message)
    }

    /// The event that ends a committed stream Levee had to cut, as each
    /// official SDK recognises it mid-stream: OpenAI's raises `APIError` on a
    /// `data:` event whose JSON has `error`; Anthropic's raises a status error
    /// on `event: error` carrying its error envelope. `status` picks the error
    /// type (504: Anthropic's `timeout_error`); `code` is Levee's reason.
    pub fn stream_error(self, status: u16, code: &str, message: &str) -> Bytes {
        match self {
            Dialect::OpenAi => {
                let v = json!({"error": {"message": message, "type": self.error_type(status), "param": null, "code": code}});
                Bytes::from(format!("data: {v}\n\n"))
            }
            Dialect::Anthropic => {
                let v = json!({"type": "error", "error": {"type": self.error_type(status), "message": message}});
                Bytes::from(format!("event: error\ndata: {v}\n\n"))
            }
        }
    }

    /// Whether `body` has this family's JSON error shape (either dialect's).
    /// A 4xx without it came from something in between (an HTML page from a
    /// proxy, say), not from the provider's validator.
    pub fn is_provider_error_shape(body: &[u8]) -> bool {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
            return false;
        };
        v.get("error").is_some_and(|e| e.is_object())
    }

    /// The message inside a provider error body, if it has one.
    pub fn provider_message(body: &[u8]) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        v.get("error")?
            .get("message")?
            .as_str()
            .map(|s| s.chars().take(500).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shapes_per_dialect() {
        let o: serde_json::Value =
            serde_json::from_slice(&Dialect::OpenAi.error_body(503, "shed", "m")).unwrap();
        assert_eq!(o["error"]["code"], "shed");
        assert_eq!(o["error"]["type"], "server_error");
        let a: serde_json::Value =
            serde_json::from_slice(&Dialect::Anthropic.error_body(429, "rate_limited", "m"))
                .unwrap();
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "rate_limit_error");
        assert!(Dialect::is_provider_error_shape(
            br#"{"error":{"message":"x"}}"#
        ));
        assert!(!Dialect::is_provider_error_shape(
            b"<html>400 Bad Request</html>"
        ));
    }
}
