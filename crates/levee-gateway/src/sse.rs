//! Server-sent-event framing for the relay: pass on whole events only.
//!
//! Chunks from upstream are forwarded as soon as they complete an event
//! (`\n\n` or `\r\n\r\n`); only a partial event's tail is held back. That way,
//! if the upstream breaks off mid-event, the error event Levee appends starts
//! on a clean boundary and every event the caller parsed was whole.

use bytes::{Bytes, BytesMut};

/// Splits a byte stream at the last complete SSE event boundary.
#[derive(Debug, Default)]
pub struct EventFramer {
    pending: BytesMut,
}

/// The end of the last complete event in `buf`, if any.
fn last_boundary(buf: &[u8]) -> Option<usize> {
    let mut i = buf.len();
    while i >= 2 {
        if buf[i - 1] == b'\n' {
            if buf[i - 2] == b'\n' {
                return Some(i);
            }
            if i >= 4 && buf[i - 2] == b'\r' && buf[i - 3] == b'\n' && buf[i - 4] == b'\r' {
                return Some(i);
            }
        }
        i -= 1;
    }
    None
}

impl EventFramer {
    /// A framer with nothing pending.
    pub fn new() -> Self {
        EventFramer::default()
    }

    /// Adds a chunk; returns the complete events now available (possibly empty).
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        if self.pending.is_empty() {
            // Fast path: the common case is one or more whole events per chunk.
            return match last_boundary(chunk) {
                Some(end) if end == chunk.len() => Bytes::copy_from_slice(chunk),
                Some(end) => {
                    self.pending.extend_from_slice(&chunk[end..]);
                    Bytes::copy_from_slice(&chunk[..end])
                }
                None => {
                    self.pending.extend_from_slice(chunk);
                    Bytes::new()
                }
            };
        }
        self.pending.extend_from_slice(chunk);
        match last_boundary(&self.pending) {
            Some(end) => self.pending.split_to(end).freeze(),
            None => Bytes::new(),
        }
    }

    /// Takes whatever is pending (the stream ended without a final blank line).
    pub fn flush(&mut self) -> Bytes {
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
    fn any_split_of_a_stream_yields_the_same_bytes() {
        let stream = b"event: a\ndata: {\"x\":1}\n\nevent: b\r\ndata: 2\r\n\r\ndata: 3\n\n";
        for cut in 0..stream.len() {
            let mut f = EventFramer::new();
            let mut out = Vec::new();
            out.extend_from_slice(&f.push(&stream[..cut]));
            out.extend_from_slice(&f.push(&stream[cut..]));
            out.extend_from_slice(&f.flush());
            assert_eq!(out, stream, "cut at {cut}");
        }
    }
}
