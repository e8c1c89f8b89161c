//! `--record tape.jsonl`: every upstream exchange, one JSON line each, in the
//! format `levee mock --replay` reads (crates/levee-mock/TAPE.md) — "record
//! the bad day once, replay it for free" (seed 004).
//!
//! Lines are written by a background thread; the request path only hands over
//! a string and never waits (when the writer falls behind, lines are dropped
//! and counted rather than slowing requests down). Request headers — and so
//! credentials — are never recorded; only the provider's answers are.

use bytes::Bytes;
use http::HeaderMap;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};

/// One exchange, as a tape line.
#[derive(Debug, Default, Serialize)]
pub struct TapeLine {
    pub status: u16,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Vec<String>>,
    #[serde(skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    #[serde(skip_serializing_if = "is_false")]
    pub reset: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub stall: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub cut: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}
fn is_false(v: &bool) -> bool {
    !*v
}

impl TapeLine {
    /// Response headers worth replaying (not framing, not cookies).
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

/// Appends tape lines to a file from a background thread.
#[derive(Debug)]
pub struct Recorder {
    tx: SyncSender<String>,
    pub dropped: AtomicU64,
}

impl Recorder {
    /// Opens (creates or truncates) the tape.
    pub fn open(path: &Path) -> std::io::Result<Recorder> {
        let file = std::fs::File::create(path)?;
        let (tx, rx) = sync_channel::<String>(8192);
        std::thread::Builder::new()
            .name("levee-record".into())
            .spawn(move || {
                let mut w = std::io::BufWriter::new(file);
                while let Ok(line) = rx.recv() {
                    let _ = w.write_all(line.as_bytes());
                    let _ = w.write_all(b"\n");
                    while let Ok(more) = rx.try_recv() {
                        let _ = w.write_all(more.as_bytes());
                        let _ = w.write_all(b"\n");
                    }
                    // Flush whenever the queue is empty: the tape stays usable if the process is killed.
                    let _ = w.flush();
                }
                let _ = w.flush();
            })?;
        Ok(Recorder {
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    /// Hands a line to the writer; never blocks.
    pub fn record(&self, line: &TapeLine) {
        let Ok(text) = serde_json::to_string(line) else {
            return;
        };
        if let Err(TrySendError::Full(_)) = self.tx.try_send(text) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
