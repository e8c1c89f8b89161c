//! `--record tape.jsonl`: every upstream exchange, one JSON line each, in the
//! format `levee mock --replay` reads (crates/levee-mock/TAPE.md) — "record
//! the bad day once, replay it for free".
//!
//! Lines are written by a background thread; the request path only hands over
//! a string and never waits (when the writer falls behind, lines are dropped
//! and counted rather than slowing requests down). Request headers — and so
//! credentials — are never recorded; only the provider's answers are, with
//! the provider keys redacted. A request's query string is recorded by
//! parameter name only (values may carry tokens). The tape is bounded
//! (`--record-max-bytes`, default 256 MiB): the line that would pass the
//! bound is not written, recording stops, and one warning says so.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

/// One exchange, as a tape line (the line `levee mock --replay` reads).
pub use levee_wire::tape::TapeEntry as TapeLine;

/// The tape's default bound in bytes.
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// A request path for the tape: query parameters keep their names, lose
/// their values (`/v1/x?key=SECRET&a=1` → `/v1/x?key&a`).
pub fn tape_path(path_and_query: &str) -> String {
    match path_and_query.split_once('?') {
        None => path_and_query.to_string(),
        Some((path, query)) => {
            let names: Vec<&str> = query
                .split('&')
                .map(|p| p.split_once('=').map_or(p, |(n, _)| n))
                .collect();
            format!("{path}?{}", names.join("&"))
        }
    }
}

/// Appends tape lines to a file from a background thread.
#[derive(Debug)]
pub struct Recorder {
    tx: SyncSender<String>,
    pub dropped: AtomicU64,
    /// Set once the tape reached its bound: nothing more is recorded.
    full: Arc<AtomicBool>,
    /// Swapped when a config reload brings new provider keys.
    secrets: arc_swap::ArcSwap<crate::observe::redact::Secrets>,
    /// The writer thread, joined on drop so that every line handed over is
    /// on disk when the recorder is gone.
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Recorder {
    /// Opens (creates or truncates) the tape, to hold at most `max_bytes`.
    pub fn open(path: &Path, max_bytes: u64) -> std::io::Result<Recorder> {
        let file = std::fs::File::create(path)?;
        let (tx, rx) = sync_channel::<String>(8192);
        let full = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&full);
        let shown = path.display().to_string();
        let writer = std::thread::Builder::new()
            .name("levee-record".into())
            .spawn(move || {
                let mut w = std::io::BufWriter::new(file);
                let mut written = 0u64;
                let mut put = |w: &mut std::io::BufWriter<std::fs::File>, line: String| {
                    let n = line.len() as u64 + 1;
                    if written + n > max_bytes {
                        if !stop.swap(true, Ordering::Relaxed) {
                            tracing::warn!(target: "levee::record", tape = %shown, max_bytes, "--record: the tape reached its size limit (--record-max-bytes); recording stopped, requests are served as before");
                        }
                        return;
                    }
                    written += n;
                    let _ = w.write_all(line.as_bytes());
                    let _ = w.write_all(b"\n");
                };
                while let Ok(line) = rx.recv() {
                    put(&mut w, line);
                    while let Ok(more) = rx.try_recv() {
                        put(&mut w, more);
                    }
                    // Flush whenever the queue is empty: the tape stays usable if the process is killed.
                    let _ = w.flush();
                }
                let _ = w.flush();
            })?;
        Ok(Recorder {
            tx,
            dropped: AtomicU64::new(0),
            full,
            secrets: arc_swap::ArcSwap::default(),
            writer: Some(writer),
        })
    }

    /// Sets the provider keys to redact from every line.
    pub fn set_secrets(&mut self, secrets: crate::observe::redact::Secrets) {
        self.secrets.store(Arc::new(secrets));
    }

    /// Adds the keys of a reloaded config; the earlier ones stay redacted
    /// (requests that started under the earlier config still record).
    pub fn add_secrets(&self, more: &crate::observe::redact::Secrets) {
        let merged = self.secrets.load().merged(more);
        self.secrets.store(Arc::new(merged));
    }

    /// Whether the tape stopped at its bound.
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }

    /// Hands a line to the writer; never blocks. `live`: the credentials
    /// the running generation holds now (tokens issued since the tape
    /// started), redacted too.
    pub fn record(&self, line: &TapeLine, live: &crate::observe::redact::Secrets) {
        if self.is_full() {
            return;
        }
        let Ok(text) = serde_json::to_string(line) else {
            return;
        };
        let text = live.text(self.secrets.load().text(text));
        if let Err(TrySendError::Full(_)) = self.tx.try_send(text) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Closing the queue ends the writer once it has written what is queued.
        let (closed, _) = sync_channel(0);
        drop(std::mem::replace(&mut self.tx, closed));
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_not_recorded() {
        assert_eq!(tape_path("/v1/chat/completions"), "/v1/chat/completions");
        assert_eq!(
            tape_path("/v1/chat/completions?key=SECRET&api-version=1&flag"),
            "/v1/chat/completions?key&api-version&flag"
        );
    }

    #[test]
    fn keys_added_by_a_reload_are_redacted_beside_the_first_ones() {
        let dir = std::env::temp_dir().join(format!("levee-record-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tape.jsonl");
        let mut r = Recorder::open(&path, 1 << 20).unwrap();
        r.set_secrets(crate::observe::redact::Secrets::new(["sk-first-key-1111"]));
        r.add_secrets(&crate::observe::redact::Secrets::new([
            "sk-rotated-key-2222",
        ]));
        let line = TapeLine {
            body: Some(serde_json::json!(
                "sk-first-key-1111 and sk-rotated-key-2222"
            )),
            ..TapeLine::default()
        };
        r.record(&line, &crate::observe::redact::Secrets::default());
        // Dropping the recorder waits for its writer to finish the tape.
        drop(r);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(text.ends_with('\n'), "the whole line was written: {text:?}");
        assert!(
            !text.contains("first-key") && !text.contains("rotated-key"),
            "{text}"
        );
        assert_eq!(
            text.matches(crate::observe::redact::REDACTED).count(),
            2,
            "both keys replaced, the text around them kept: {text}"
        );
        assert!(text.contains(" and "), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
