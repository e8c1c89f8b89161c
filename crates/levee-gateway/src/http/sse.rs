//! Server-sent-event framing for the relay: pass on whole events only.
//!
//! Chunks from upstream are forwarded as soon as they complete an event — an
//! empty line, where a line ends with `\r\n`, `\n` or `\r` as the SSE spec
//! allows — and only a partial event's tail is held back. That way, if the
//! upstream breaks off mid-event, the error event Levee appends starts on a
//! clean boundary and every event the caller parsed was whole.
//!
//! Scanning is incremental (each byte is looked at once) and the held tail is
//! capped: an "event" that grows past [`MAX_PENDING`] without ending is passed
//! on as it is rather than buffered without bound.

use bytes::{Bytes, BytesMut};

/// The most a partial event may hold back before it is passed on anyway.
pub const MAX_PENDING: usize = 1 << 20;

/// Splits a byte stream at complete SSE event boundaries.
#[derive(Debug, Default)]
pub struct EventFramer {
    pending: BytesMut,
    /// How far `pending` has been scanned.
    scanned: usize,
    /// Where the current line starts in `pending`.
    line_start: usize,
    /// End of the last complete event in `pending`.
    boundary: usize,
}

impl EventFramer {
    /// A framer with nothing pending.
    pub fn new() -> Self {
        EventFramer::default()
    }

    /// Scans new bytes for line ends; a line that is empty ends an event.
    fn scan(&mut self) {
        let buf = &self.pending;
        let mut i = self.scanned;
        while i < buf.len() {
            let end = match buf[i] {
                b'\n' => i + 1,
                b'\r' => match buf.get(i + 1) {
                    Some(b'\n') => i + 2,
                    Some(_) => i + 1,
                    // A trailing `\r` may be half of `\r\n`: decide when more arrives.
                    None => break,
                },
                _ => {
                    i += 1;
                    continue;
                }
            };
            if i == self.line_start {
                self.boundary = end;
            }
            self.line_start = end;
            i = end;
        }
        self.scanned = i;
    }

    /// Adds a chunk; returns the complete events now available (possibly empty).
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.pending.extend_from_slice(chunk);
        self.scan();
        if self.boundary == 0 {
            if self.pending.len() > MAX_PENDING {
                return self.flush();
            }
            return Bytes::new();
        }
        let end = self.boundary;
        let out = self.pending.split_to(end).freeze();
        self.scanned -= end;
        self.line_start -= end;
        self.boundary = 0;
        out
    }

    /// Takes whatever is pending (the stream ended without a final blank line).
    pub fn flush(&mut self) -> Bytes {
        self.scanned = 0;
        self.line_start = 0;
        self.boundary = 0;
        self.pending.split().freeze()
    }

    /// Whether a partial event is held back.
    pub fn has_partial(&self) -> bool {
        !self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_events_pass_at_once_partial_tails_wait() {
        let mut f = EventFramer::new();
        assert_eq!(&f.push(b"data: 1\n\n")[..], b"data: 1\n\n");
        assert_eq!(&f.push(b"data: 2\n\ndata: 3")[..], b"data: 2\n\n");
        assert!(f.has_partial());
        assert_eq!(&f.push(b"\n")[..], b"");
        assert_eq!(
            &f.push(b"\nevent: x\r\n\r\n")[..],
            b"data: 3\n\nevent: x\r\n\r\n"
        );
        assert!(!f.has_partial());
        assert_eq!(&f.push(b"data: [DONE]")[..], b"");
        assert_eq!(&f.flush()[..], b"data: [DONE]");
    }

    #[test]
    fn every_line_ending_the_spec_allows_ends_an_event() {
        for stream in [
            &b"data: a\r\rdata: b\r\r"[..],
            b"data: a\n\r\ndata: b\r\n\n",
            b"data: a\r\n\rdata: b\r\r\n",
        ] {
            let mut f = EventFramer::new();
            let mut out = f.push(stream).to_vec();
            assert!(
                out.starts_with(b"data: a"),
                "the first event passes at once: {stream:?}"
            );
            assert!(out.len() >= 9, "{stream:?}");
            out.extend_from_slice(&f.flush());
            assert_eq!(&out[..], stream);
        }
        // A trailing CR waits to see whether LF follows.
        let mut f = EventFramer::new();
        assert_eq!(&f.push(b"data: a\r\n\r")[..], b"");
        assert_eq!(&f.push(b"\ndata: b")[..], b"data: a\r\n\r\n");
    }

    #[test]
    fn any_split_of_a_stream_yields_the_same_bytes() {
        let stream =
            b"event: a\ndata: {\"x\":1}\n\nevent: b\r\ndata: 2\r\n\r\ndata: 3\r\rdata: 4\n\n";
        for cut in 0..stream.len() {
            for cut2 in cut..stream.len() {
                let mut f = EventFramer::new();
                let mut out = Vec::new();
                for part in [&stream[..cut], &stream[cut..cut2], &stream[cut2..]] {
                    let got = f.push(part);
                    if !got.is_empty() {
                        let last = got[got.len() - 1];
                        assert!(last == b'\n' || last == b'\r');
                    }
                    out.extend_from_slice(&got);
                }
                out.extend_from_slice(&f.flush());
                assert_eq!(out, stream, "cuts at {cut}, {cut2}");
            }
        }
    }

    #[test]
    fn an_endless_event_is_passed_on_not_buffered_without_bound() {
        let mut f = EventFramer::new();
        let chunk = vec![b'x'; 64 * 1024];
        let mut out = 0;
        for _ in 0..40 {
            out += f.push(&chunk).len();
        }
        assert!(out > 0);
        assert!(f.pending.len() <= MAX_PENDING);
    }
}

/// The data of the first event in `events` (its `data:` lines joined by
/// newlines, one leading space dropped from each), if it has any.
pub fn data_of(events: &[u8]) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::new();
    let mut any = false;
    for line in events.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if any {
                break;
            }
            continue;
        }
        if let Some(d) = line.strip_prefix(b"data:") {
            if any {
                out.push(b'\n');
            }
            out.extend_from_slice(d.strip_prefix(b" ").unwrap_or(d));
            any = true;
        }
    }
    any.then_some(out)
}

#[cfg(test)]
mod data_tests {
    #[test]
    fn the_first_events_data_is_read() {
        let events = b"event: response.created\ndata: {\"a\":1}\n\ndata: x\n\n";
        assert_eq!(super::data_of(events).as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(super::data_of(b"event: ping\n\n"), None);
    }
}

/// `events` (whole SSE events) as OpenAI sends them to a caller that did
/// not ask for usage: without the usage-only chunk (no choices,
/// `"choices":[]`, and a `usage` object) and without the `"usage":null`
/// that every other chunk carries once usage is asked for. Levee asks for
/// it when the caller did not (`stream_options.include_usage`) to count the
/// stream's tokens; the caller's stream is then byte for byte what it would
/// have been. (Azure's first chunk also has no choices, but no usage: it
/// stays. `,"usage":null` cannot occur inside a JSON string, where every
/// quote is escaped.)
pub fn without_usage_chunk(events: Bytes) -> Bytes {
    const NULL: &[u8] = b",\"usage\":null";
    fn find(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }
    fn usage_only(event: &[u8]) -> bool {
        find(event, b"\"choices\":[]") && find(event, b"\"usage\":{")
    }
    if !usage_only(&events) && !find(&events, NULL) {
        return events;
    }
    let mut out = Vec::with_capacity(events.len());
    let mut rest = &events[..];
    while !rest.is_empty() {
        // One event: up to and including its blank line (`\n\n`, or the
        // same with `\r\n`).
        let end = rest
            .windows(2)
            .position(|w| w == b"\n\n")
            .map_or(rest.len(), |i| i + 2);
        let (event, tail) = rest.split_at(end);
        if !usage_only(event) {
            let mut e = event;
            while let Some(i) = e.windows(NULL.len()).position(|w| w == NULL) {
                out.extend_from_slice(&e[..i]);
                e = &e[i + NULL.len()..];
            }
            out.extend_from_slice(e);
        }
        rest = tail;
    }
    Bytes::from(out)
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn only_the_usage_chunk_is_left_out() {
        let stream = "data: {\"choices\":[],\"prompt_filter_results\":[]}\n\n\
             data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n\
             data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n\
             data: [DONE]\n\n";
        let out = without_usage_chunk(Bytes::from(stream));
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "data: {\"choices\":[],\"prompt_filter_results\":[]}\n\n\
             data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n\
             data: [DONE]\n\n"
        );
        let plain = Bytes::from_static(b"data: {\"choices\":[{\"delta\":{}}]}\n\n");
        assert_eq!(without_usage_chunk(plain.clone()), plain);
    }
}
