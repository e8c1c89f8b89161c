//! Replay tapes (`--replay tape.jsonl`): recorded answers served in order,
//! one per provider request. The format is documented in `TAPE.md`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, StatusCode};
use levee_wire::tape::TapeEntry;

/// Why a tape was rejected: "tape line 4: ...".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tape line {line}: {message}")]
pub struct TapeError {
    /// 1-based line in the file (entry number for [`Tape::from_entries`]).
    pub line: usize,
    pub message: String,
}

/// A validated tape, ready to replay.
#[derive(Debug, Clone, Default)]
pub struct Tape {
    entries: Vec<TapeEntry>,
    compiled: Vec<Compiled>,
}

impl Tape {
    /// Parses JSON Lines: one entry per line; blank lines and lines starting
    /// with `#` are skipped.
    pub fn parse(text: &str) -> Result<Tape, TapeError> {
        let mut tape = Tape::default();
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let entry: TapeEntry = serde_json::from_str(trimmed).map_err(|e| TapeError {
                line: i + 1,
                message: e.to_string(),
            })?;
            tape.push(entry, i + 1)?;
        }
        Ok(tape)
    }

    /// Builds a tape from entries (for in-process use); errors name the
    /// 1-based entry number as `line`.
    pub fn from_entries(entries: Vec<TapeEntry>) -> Result<Tape, TapeError> {
        let mut tape = Tape::default();
        for (i, entry) in entries.into_iter().enumerate() {
            tape.push(entry, i + 1)?;
        }
        Ok(tape)
    }

    fn push(&mut self, entry: TapeEntry, line: usize) -> Result<(), TapeError> {
        let compiled = Compiled::new(&entry).map_err(|message| TapeError { line, message })?;
        self.entries.push(entry);
        self.compiled.push(compiled);
        Ok(())
    }

    pub fn entries(&self) -> &[TapeEntry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What to do with a request, prepared once at load time.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
    pub delay: Duration,
    pub chunk_delay: Option<Duration>,
}

#[derive(Debug, Clone)]
pub(crate) enum Body {
    Full(Bytes),
    Chunks { chunks: Vec<Bytes>, cut: bool },
    Reset,
    Stall,
}

const FRAMING: [&str; 4] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
];

impl Compiled {
    fn new(e: &TapeEntry) -> Result<Compiled, String> {
        let status = StatusCode::from_u16(e.status)
            .map_err(|_| format!("`status` {} is not an HTTP status (100–999)", e.status))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &e.headers {
            if FRAMING.contains(&name.to_ascii_lowercase().as_str()) {
                continue;
            }
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("header name {name:?} is not a valid HTTP header name"))?;
            let v = HeaderValue::from_str(value).map_err(|_| {
                format!("header {name:?} has a value that cannot be sent: {value:?}")
            })?;
            headers.append(n, v);
        }
        let given: Vec<String> = [
            ("body", e.body.is_some()),
            ("chunks", e.chunks.is_some()),
            ("reset", e.reset),
            ("stall", e.stall),
        ]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(k, _)| format!("`{k}`"))
        .collect();
        if given.len() > 1 {
            return Err(format!(
                "an entry has one of `body`, `chunks`, `reset`, `stall`; this one has {}",
                given.join(" and ")
            ));
        }
        if e.cut && e.chunks.is_none() {
            return Err("`cut` only goes with `chunks`".to_owned());
        }
        let body = if e.reset {
            Body::Reset
        } else if e.stall {
            Body::Stall
        } else if let Some(chunks) = &e.chunks {
            default_type(&mut headers, "text/event-stream");
            Body::Chunks {
                chunks: chunks.iter().map(|c| Bytes::from(c.clone())).collect(),
                cut: e.cut,
            }
        } else {
            let bytes = match &e.body {
                None => Bytes::new(),
                Some(serde_json::Value::String(s)) => Bytes::from(s.clone()),
                Some(v) => Bytes::from(v.to_string()),
            };
            if e.body.is_some() {
                default_type(&mut headers, "application/json");
            }
            Body::Full(bytes)
        };
        Ok(Compiled {
            status,
            headers,
            body,
            delay: Duration::from_millis(e.delay_ms),
            chunk_delay: (e.chunk_delay_ms > 0).then(|| Duration::from_millis(e.chunk_delay_ms)),
        })
    }
}

fn default_type(headers: &mut HeaderMap, content_type: &'static str) {
    if !headers.contains_key(CONTENT_TYPE) {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
}

/// Hands out tape entries in order, once each, across all connections.
pub(crate) struct Player {
    tape: Tape,
    next: AtomicUsize,
}

impl Player {
    pub(crate) fn new(tape: Tape) -> Player {
        Player {
            tape,
            next: AtomicUsize::new(0),
        }
    }

    /// The next entry, or `None` once the tape has run out.
    pub(crate) fn next(&self) -> Option<&Compiled> {
        if self.next.load(Ordering::Relaxed) >= self.tape.compiled.len() {
            return None;
        }
        self.tape
            .compiled
            .get(self.next.fetch_add(1, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_skips_comments() {
        let tape = Tape::parse(
            "# a bad minute\n\
             {\"status\":503,\"headers\":{\"retry-after\":\"2\"},\"body\":{\"error\":{\"message\":\"x\"}},\"delay_ms\":120}\n\
             \n\
             {\"chunks\":[\"data: 1\\n\\n\",\"data: [DONE]\\n\\n\"],\"chunk_delay_ms\":5,\"cut\":true}\n\
             {\"reset\":true}\n",
        )
        .unwrap();
        assert_eq!(tape.len(), 3);
        assert_eq!(tape.entries()[0].status, 503);
        let player = Player::new(tape);
        let first = player.next().unwrap();
        assert_eq!(first.headers["content-type"], "application/json");
        assert!(matches!(
            player.next().unwrap().body,
            Body::Chunks { cut: true, .. }
        ));
        assert!(matches!(player.next().unwrap().body, Body::Reset));
        assert!(player.next().is_none());
        assert!(player.next().is_none());
    }

    #[test]
    fn errors_name_the_line() {
        let e = Tape::parse("{\"status\":200}\n{\"status\":503,\"retry\":1}\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(
            e.to_string()
                .starts_with("tape line 2: unknown field `retry`"),
            "{e}"
        );
        let e = Tape::parse("{\"body\":\"x\",\"reset\":true}").unwrap_err();
        assert!(e.message.contains("`body` and `reset`"), "{e}");
        let e = Tape::parse("{\"status\":42}").unwrap_err();
        assert!(e.message.contains("not an HTTP status"), "{e}");
        let e = Tape::parse("{\"headers\":{\"bad name\":\"x\"}}").unwrap_err();
        assert!(e.message.contains("not a valid HTTP header name"), "{e}");
    }

    #[test]
    fn entries_round_trip_through_json() {
        let entry = TapeEntry {
            status: 429,
            headers: [("retry-after-ms".to_owned(), "1500".to_owned())].into(),
            body: Some(serde_json::json!({"error": {"type": "rate_limit_error"}})),
            ..TapeEntry::default()
        };
        let line = serde_json::to_string(&entry).unwrap();
        assert_eq!(Tape::parse(&line).unwrap().entries(), &[entry]);
    }

    #[test]
    fn the_documented_example_parses() {
        let doc = include_str!("../TAPE.md");
        let start = doc.find("```jsonl\n").unwrap() + "```jsonl\n".len();
        let end = start + doc[start..].find("```").unwrap();
        let tape = Tape::parse(&doc[start..end]).unwrap();
        assert_eq!(tape.len(), 5);
        assert!(tape.entries()[3].reset);
    }
}
