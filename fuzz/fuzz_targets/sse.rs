//! The relay's SSE framer, fed a stream cut at fuzzer-chosen points.
//!
//! Input layout: byte 0 = k (number of chunk lengths, `b0 % 16 + 1`), the next
//! k bytes are chunk lengths used in turn (0 pushes an empty chunk), the rest
//! is the upstream byte stream.
//!
//! Properties:
//! - the concatenated output (every push, then the flush) is exactly the input:
//!   nothing lost, duplicated or reordered;
//! - every non-empty push output ends on an event boundary: an empty line,
//!   where lines end with `\r\n`, `\n` or `\r` (the SSE spec's three);
//! - `has_partial()` is true exactly when bytes are held back;
//! - only a partial event is held back: the held-back bytes never contain a
//!   complete event with content (a stray blank line may wait, and so may an
//!   event whose last byte is a `\r` not yet known not to start a `\r\n`).
#![no_main]

use levee_gateway::fuzz::EventFramer;
use libfuzzer_sys::fuzz_target;

/// A reference check, written independently of the framer: `prefix` ends
/// with a line terminator that ends an empty line (or the stream's first line).
fn ends_on_boundary(prefix: &[u8]) -> bool {
    let rest = if prefix.ends_with(b"\r\n") {
        &prefix[..prefix.len() - 2]
    } else if prefix.ends_with(b"\n") || prefix.ends_with(b"\r") {
        &prefix[..prefix.len() - 1]
    } else {
        return false;
    };
    rest.is_empty() || rest.ends_with(b"\n") || rest.ends_with(b"\r")
}

fuzz_target!(|data: &[u8]| {
    let Some((&k, rest)) = data.split_first() else {
        return;
    };
    let k = usize::from(k % 16) + 1;
    let k = k.min(rest.len());
    let (lens, stream) = rest.split_at(k);

    let mut f = EventFramer::new();
    let mut out: Vec<u8> = Vec::with_capacity(stream.len());
    let mut consumed = 0usize;
    let mut li = 0usize;
    // Bounded: each round consumes at least one byte, or pushes one empty chunk
    // per zero length (at most 16 in a row).
    let mut empties = 0usize;
    let (mut held_start, mut scanned, mut content) = (0usize, 0usize, false);
    while consumed < stream.len() {
        let want = lens
            .get(li % lens.len().max(1))
            .copied()
            .map_or(stream.len(), usize::from);
        li += 1;
        if want == 0 {
            empties += 1;
            if empties > 16 {
                break;
            }
        } else {
            empties = 0;
        }
        let end = (consumed + want).min(stream.len());
        let chunk = &stream[consumed..end];
        consumed = end;
        let got = f.push(chunk);
        let start = out.len();
        out.extend_from_slice(&got);
        assert!(
            out.len() <= consumed && out[start..] == stream[start..out.len()],
            "output is not a prefix of the input"
        );
        if !got.is_empty() {
            assert!(
                ends_on_boundary(&out),
                "push output ends mid-event: {:?}",
                String::from_utf8_lossy(&got)
            );
        }
        assert_eq!(
            f.has_partial(),
            out.len() < consumed,
            "has_partial() disagrees with the bytes held back"
        );
        // Nothing complete is held back (scanned incrementally: each byte
        // once per position of the held-back start).
        if out.len() != held_start {
            held_start = out.len();
            scanned = held_start;
            content = false;
        }
        while scanned < consumed {
            content |= !matches!(stream[scanned], b'\n' | b'\r');
            scanned += 1;
            let undecided = scanned == consumed && stream[scanned - 1] == b'\r';
            if content && !undecided && ends_on_boundary(&stream[..scanned]) {
                panic!(
                    "a complete event is held back: {:?}",
                    String::from_utf8_lossy(&stream[held_start..scanned])
                );
            }
        }
    }
    if consumed < stream.len() {
        let got = f.push(&stream[consumed..]);
        out.extend_from_slice(&got);
        assert!(
            got.is_empty() || ends_on_boundary(&out),
            "push output ends mid-event"
        );
    }
    out.extend_from_slice(&f.flush());
    assert!(!f.has_partial(), "flush left bytes behind");
    assert_eq!(out, stream, "framer lost, duplicated or reordered bytes");
});
