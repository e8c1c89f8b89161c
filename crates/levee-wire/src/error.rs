//! Each dialect's error body, and the error `type` (and OpenAI `code`) it
//! gives each HTTP status, as the providers send them:
//!
//! - OpenAI: `{"error":{"message","type","param","code"}}`; 401 is
//!   `invalid_request_error` / `invalid_api_key`, 429 is `requests` /
//!   `rate_limit_exceeded`, other 4xx `invalid_request_error`, 5xx
//!   `server_error`.
//! - Anthropic: `{"type":"error","error":{"type","message"}}`; 401
//!   `authentication_error`, 402 `billing_error`, 403 `permission_error`,
//!   404 `not_found_error`, 413 `request_too_large`, 429 `rate_limit_error`,
//!   503/529 `overloaded_error`, 504 `timeout_error`, other 4xx
//!   `invalid_request_error`, 5xx `api_error`.
//!
//! The official SDKs pick their exception class by status; the `type` is what
//! a caller's code reads next, so Levee, the mock and the translator all take
//! it from this one table.

use std::fmt::Write as _;

use bytes::Bytes;

use crate::Dialect;

/// `(type, code)` as the provider labels an error status; `code` is OpenAI's
/// default for the status (Anthropic bodies have none).
pub fn labels(dialect: Dialect, status: u16) -> (&'static str, Option<&'static str>) {
    match dialect {
        Dialect::OpenAi => match status {
            401 => ("invalid_request_error", Some("invalid_api_key")),
            403 => (
                "invalid_request_error",
                Some("unsupported_country_region_territory"),
            ),
            404 => ("invalid_request_error", Some("model_not_found")),
            429 => ("requests", Some("rate_limit_exceeded")),
            400..=499 => ("invalid_request_error", None),
            _ => ("server_error", None),
        },
        Dialect::Anthropic => match status {
            401 => ("authentication_error", None),
            402 => ("billing_error", None),
            403 => ("permission_error", None),
            404 => ("not_found_error", None),
            413 => ("request_too_large", None),
            429 => ("rate_limit_error", None),
            504 => ("timeout_error", None),
            503 | 529 => ("overloaded_error", None),
            400..=499 => ("invalid_request_error", None),
            _ => ("api_error", None),
        },
    }
}

/// The HTTP status an error `type` of `dialect` stands for: the way back
/// from a type met without a status (an error event in a stream). OpenAI's
/// `tokens` (a token-rate 429) and a type either dialect does not know are
/// mapped too (429; 500).
pub fn status_of_type(dialect: Dialect, kind: &str) -> u16 {
    match (dialect, kind) {
        (_, "invalid_request_error") => 400,
        (_, "authentication_error") => 401,
        (_, "permission_error") => 403,
        (_, "rate_limit_error") => 429,
        (Dialect::OpenAi, "requests" | "tokens") => 429,
        (Dialect::Anthropic, "billing_error") => 402,
        (Dialect::Anthropic, "not_found_error") => 404,
        (Dialect::Anthropic, "request_too_large") => 413,
        (Dialect::Anthropic, "timeout_error") => 504,
        (Dialect::Anthropic, "overloaded_error") => 529,
        _ => 500,
    }
}

fn json_str(out: &mut String, s: &str) {
    // A str always serializes.
    if let Ok(quoted) = serde_json::to_string(s) {
        out.push_str(&quoted);
    }
}

/// An error body in `dialect`'s shape. `param` and `code` appear in OpenAI
/// bodies only; `code` replaces the status's default.
pub fn body(
    dialect: Dialect,
    status: u16,
    message: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Bytes {
    let (kind, default_code) = labels(dialect, status);
    let mut out = String::with_capacity(160 + message.len());
    match dialect {
        Dialect::OpenAi => {
            out.push_str(r#"{"error":{"message":"#);
            json_str(&mut out, message);
            let _ = write!(out, r#","type":"{kind}","param":"#);
            match param {
                Some(p) => json_str(&mut out, p),
                None => out.push_str("null"),
            }
            out.push_str(r#","code":"#);
            match code.or(default_code) {
                Some(c) => json_str(&mut out, c),
                None => out.push_str("null"),
            }
            out.push_str("}}");
        }
        Dialect::Anthropic => {
            let _ = write!(
                out,
                r#"{{"type":"error","error":{{"type":"{kind}","message":"#
            );
            json_str(&mut out, message);
            out.push_str("}}");
        }
    }
    Bytes::from(out)
}

impl Dialect {
    /// The error `type` this dialect gives `status`.
    pub fn error_type(self, status: u16) -> &'static str {
        labels(self, status).0
    }

    /// An error Levee generates, in this dialect: `code` is Levee's reason
    /// (in OpenAI bodies; Anthropic bodies carry none).
    pub fn error_body(self, status: u16, code: &str, message: &str) -> Bytes {
        body(self, status, message, None, Some(code))
    }

    /// The event that ends a stream which failed after its first byte.
    pub fn stream_error_event(self, message: &str) -> Bytes {
        self.stream_error(502, "upstream_error", message)
    }

    /// The event that ends a committed stream Levee had to cut, as each
    /// official SDK recognises it mid-stream: OpenAI's raises `APIError` on a
    /// `data:` event whose JSON has `error`; Anthropic's raises a status error
    /// on `event: error` carrying its error body. `status` picks the error
    /// type (504: Anthropic's `timeout_error`); `code` is Levee's reason.
    pub fn stream_error(self, status: u16, code: &str, message: &str) -> Bytes {
        let prefix: &[u8] = match self {
            Dialect::OpenAi => b"data: ",
            Dialect::Anthropic => b"event: error\ndata: ",
        };
        let json = body(self, status, message, None, Some(code));
        let mut event = Vec::with_capacity(prefix.len() + json.len() + 2);
        event.extend_from_slice(prefix);
        event.extend_from_slice(&json);
        event.extend_from_slice(b"\n\n");
        Bytes::from(event)
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

    /// The message inside a provider error body (its first 500 characters),
    /// if it has one.
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

    fn parse(b: &[u8]) -> serde_json::Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn levee_errors_carry_the_reason_as_openai_code() {
        let o = parse(&Dialect::OpenAi.error_body(503, "shed", "m"));
        assert_eq!(o["error"]["code"], "shed");
        assert_eq!(o["error"]["type"], "server_error");
        assert_eq!(o["error"]["param"], serde_json::Value::Null);
        let a = parse(&Dialect::Anthropic.error_body(429, "rate_limited", "m"));
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "rate_limit_error");
        assert!(a["error"].get("code").is_none());
    }

    #[test]
    fn a_bad_key_is_labelled_as_each_provider_labels_it() {
        let o = parse(&body(Dialect::OpenAi, 401, "Incorrect API key", None, None));
        assert_eq!(o["error"]["type"], "invalid_request_error");
        assert_eq!(o["error"]["code"], "invalid_api_key");
        let a = parse(&body(
            Dialect::Anthropic,
            401,
            "invalid x-api-key",
            None,
            None,
        ));
        assert_eq!(a["error"]["type"], "authentication_error");
    }

    #[test]
    fn anthropic_types_follow_the_sdk_error_types() {
        for (status, kind) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (402, "billing_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (504, "timeout_error"),
            (529, "overloaded_error"),
            (500, "api_error"),
        ] {
            assert_eq!(Dialect::Anthropic.error_type(status), kind, "{status}");
        }
        assert_eq!(Dialect::OpenAi.error_type(429), "requests");
        assert_eq!(Dialect::OpenAi.error_type(400), "invalid_request_error");
    }

    #[test]
    fn every_type_leads_back_to_a_status_of_that_type() {
        for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
            for status in [
                400, 401, 402, 403, 404, 413, 422, 429, 500, 502, 503, 504, 529,
            ] {
                let kind = dialect.error_type(status);
                assert_eq!(
                    dialect.error_type(status_of_type(dialect, kind)),
                    kind,
                    "{dialect:?} {status}"
                );
            }
        }
    }

    #[test]
    fn stream_errors_are_sse_events() {
        let o = Dialect::OpenAi.stream_error(504, "deadline_exceeded", "late");
        let text = std::str::from_utf8(&o).unwrap();
        let json = text.strip_prefix("data: ").unwrap().trim_end();
        assert_eq!(parse(json.as_bytes())["error"]["code"], "deadline_exceeded");
        let a = Dialect::Anthropic.stream_error(504, "deadline_exceeded", "late");
        let text = std::str::from_utf8(&a).unwrap();
        let json = text
            .strip_prefix("event: error\ndata: ")
            .unwrap()
            .trim_end();
        assert_eq!(parse(json.as_bytes())["error"]["type"], "timeout_error");
    }

    #[test]
    fn only_json_with_an_error_object_is_a_provider_error() {
        assert!(Dialect::is_provider_error_shape(
            br#"{"error":{"message":"x"}}"#
        ));
        assert!(!Dialect::is_provider_error_shape(
            b"<html>400 Bad Request</html>"
        ));
        assert_eq!(
            Dialect::provider_message(br#"{"error":{"message":"x"}}"#).as_deref(),
            Some("x")
        );
    }
}
