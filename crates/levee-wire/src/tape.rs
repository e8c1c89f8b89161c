//! The tape line: one recorded exchange with a provider, as the gateway's
//! `--record` writes it and `levee mock --replay` serves it back (JSON
//! Lines, one entry a line).

use std::collections::BTreeMap;

use bytes::Bytes;
use http::HeaderMap;
use serde::{Deserialize, Serialize};

/// One recorded exchange: a line of the tape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapeEntry {
    /// Status to answer with (100–999). Default 200.
    #[serde(default = "ok")]
    pub status: u16,
    /// Response headers. `content-length`, `transfer-encoding`, `connection`
    /// and `keep-alive` are ignored (the mock frames the body itself).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Whole body: a string is sent as is; any other JSON value is sent
    /// serialized. Default content type `application/json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
    /// Streamed body: each string is sent as one chunk, byte for byte
    /// (e.g. `"data: {...}\n\n"`). Default content type `text/event-stream`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<String>>,
    /// Wait between chunks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunk_delay_ms: u64,
    /// Wait before the response head (time to first byte).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// Close the connection without answering (after `delay_ms`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub reset: bool,
    /// Never answer; hold the request until the client leaves.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stall: bool,
    /// After the last chunk, drop the connection instead of ending the stream.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cut: bool,
    /// Informational (what was requested; not matched against requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Informational: when the exchange happened, ms since the recording began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
    /// Informational free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn ok() -> u16 {
    200
}
fn is_zero(n: &u64) -> bool {
    *n == 0
}
fn is_false(b: &bool) -> bool {
    !*b
}

impl Default for TapeEntry {
    fn default() -> Self {
        TapeEntry {
            status: ok(),
            headers: BTreeMap::new(),
            body: None,
            chunks: None,
            chunk_delay_ms: 0,
            delay_ms: 0,
            reset: false,
            stall: false,
            cut: false,
            path: None,
            model: None,
            at_ms: None,
            note: None,
        }
    }
}

impl TapeEntry {
    /// Response headers worth replaying (not framing, not cookies, not the date).
    pub fn headers_from(h: &HeaderMap) -> BTreeMap<String, String> {
        h.iter()
            .filter(|(n, _)| {
                !matches!(
                    n.as_str(),
                    "content-length"
                        | "transfer-encoding"
                        | "connection"
                        | "keep-alive"
                        | "set-cookie"
                        | "date"
                )
            })
            .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect()
    }

    /// A body as JSON when it is JSON, else as a string.
    pub fn body_from(b: &Bytes) -> serde_json::Value {
        serde_json::from_slice(b)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(b).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_line_reads_back_the_same() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        h.insert("content-length", "9".parse().unwrap());
        let entry = TapeEntry {
            status: 503,
            headers: TapeEntry::headers_from(&h),
            body: Some(TapeEntry::body_from(&Bytes::from_static(b"not json"))),
            delay_ms: 40,
            ..TapeEntry::default()
        };
        let line = serde_json::to_string(&entry).unwrap();
        assert_eq!(
            line,
            r#"{"status":503,"headers":{"retry-after":"2"},"body":"not json","delay_ms":40}"#
        );
        let back: TapeEntry = serde_json::from_str(&line).unwrap();
        assert_eq!(back, entry);
        assert!(serde_json::from_str::<TapeEntry>(r#"{"retry":1}"#).is_err());
    }
}
