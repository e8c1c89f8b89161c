//! HTTP/1.1 framing shared by both directions: the caller's requests
//! (`front`) and the providers' answers (`h1conn`). Reading the framing
//! fields (`content-length`, `transfer-encoding`, `connection`), a head's
//! header map, decimal lengths, and the chunked decoder. Errors are short
//! static phrases or [`BadField`]; each side wraps them in its own error
//! type.

use crate::http::fieldname::same_name;
use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::Version;
use std::future::Future;
use std::io;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Most header lines in a head (hyper's default too).
pub(crate) const MAX_HEADERS: usize = 100;
/// Longest chunk-size line, extensions included.
pub(crate) const MAX_CHUNK_LINE: usize = 4096;
/// Most bytes of trailer fields after the last chunk.
pub(crate) const MAX_TRAILERS: usize = 16 * 1024;
/// Most bytes of chunk extensions in one body (hyper's bound too): each
/// chunk-size line may carry up to `MAX_CHUNK_LINE`, and a body of a
/// million one-byte chunks would otherwise make the reader parse ~4 GiB of
/// extensions it ignores.
pub(crate) const MAX_CHUNK_EXTENSIONS: usize = 16 * 1024;

/// A connection's read buffer: bytes read and not yet consumed, and how
/// much the next read asks for. It starts small (a head and a small body
/// fit in 2 KiB; 10,000 open streams with 8 KiB each would be 80 MiB) and a
/// read that fills it doubles the next one, up to `max`, so that a large
/// body is read in fewer system calls.
pub(crate) struct InBuf {
    pub buf: BytesMut,
    read_size: usize,
    first: usize,
    max: usize,
}

impl InBuf {
    pub(crate) fn new(first: usize, max: usize) -> InBuf {
        InBuf {
            buf: BytesMut::new(),
            read_size: first,
            first,
            max,
        }
    }

    /// Reads more bytes from `io`; `Ok(0)` at the end of the stream.
    pub(crate) fn poll_fill<IO: AsyncRead + Unpin>(
        &mut self,
        io: &mut IO,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < self.read_size / 4 {
            self.buf.reserve(self.read_size);
        }
        let spare = self.buf.capacity() - self.buf.len();
        let read = io.read_buf(&mut self.buf);
        let n = ready!(std::pin::pin!(read).poll(cx))?;
        if n == spare && self.read_size < self.max {
            self.read_size *= 2;
        }
        Poll::Ready(Ok(n))
    }

    /// Lets go of a large buffer once it is empty (a slow stream should not
    /// keep a 64 KiB buffer for its life).
    pub(crate) fn shrink(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > self.max {
            self.buf = BytesMut::new();
            self.read_size = self.first;
        }
    }
}

/// Where a header's name and value lie in the head (offsets and lengths;
/// they fit 32 bits).
#[derive(Clone, Copy, Default)]
pub(crate) struct Span {
    pub name: (u32, u32),
    pub value: (u32, u32),
}

/// The spans of a head's fields, kept while the parser still borrows the
/// buffer: sixteen in place (a chat request or answer has three to eight;
/// zeroed room for all a head may have cost ~100 instructions a head), any
/// more on the heap.
pub(crate) struct Spans {
    inline: [Span; INLINE_SPANS],
    len: usize,
    more: Vec<Span>,
}

const INLINE_SPANS: usize = 16;

impl Spans {
    pub(crate) fn new() -> Self {
        Spans {
            inline: [Span::default(); INLINE_SPANS],
            len: 0,
            more: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, span: Span) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = span,
            None => self.more.push(span),
        }
        self.len += 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Span> {
        self.inline[..self.len.min(INLINE_SPANS)]
            .iter()
            .chain(self.more.iter())
    }
}

/// What a head's framing and connection fields say.
#[derive(Default)]
pub(crate) struct Framing {
    pub content_length: Option<u64>,
    pub transfer_encoding: bool,
    pub chunked_last: bool,
    /// `transfer-encoding` fields seen.
    pub te_fields: u8,
    /// Every `transfer-encoding` value was exactly one coding, `chunked`.
    pub te_only_chunked: bool,
    pub close: bool,
    pub keep_alive: bool,
}

impl Framing {
    /// Reads one header field; `Ok(true)` when it concerns only this
    /// connection (framing and `connection` fields, which the gateway never
    /// passes on), so the head's header map can leave it out.
    pub(crate) fn see(&mut self, name: &str, value: &[u8]) -> Result<bool, &'static str> {
        // Told apart by length first: most fields are none of these.
        let len = name.len();
        if len == 14 && same_name(name.as_bytes(), b"content-length") {
            // Nearly always one number: read as it is, not as a list.
            if let Some(n) = parse_decimal(value) {
                self.length(n)?;
            } else {
                for part in value.split(|&b| b == b',') {
                    self.length(parse_decimal(part.trim_ascii()).ok_or("invalid content-length")?)?;
                }
            }
        } else if len == 17 && same_name(name.as_bytes(), b"transfer-encoding") {
            self.te_only_chunked = (self.te_fields == 0 || self.te_only_chunked)
                && value.trim_ascii().eq_ignore_ascii_case(b"chunked");
            self.te_fields = self.te_fields.saturating_add(1);
            self.transfer_encoding = true;
            if let Some(last) = value
                .split(|&b| b == b',')
                .map(<[u8]>::trim_ascii)
                .rfind(|t| !t.is_empty())
            {
                self.chunked_last = last.eq_ignore_ascii_case(b"chunked");
            }
        } else if len != 10 {
            return Ok(false);
        } else if same_name(name.as_bytes(), b"connection") {
            // Nearly always one token: told at once, not split as a list.
            if value.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if value.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else {
                for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    self.close |= token.eq_ignore_ascii_case(b"close");
                    self.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            }
        } else {
            return Ok(same_name(name.as_bytes(), b"keep-alive"));
        }
        Ok(true)
    }

    /// One `content-length` value: a second that differs is refused.
    fn length(&mut self, n: u64) -> Result<(), &'static str> {
        if self.content_length.is_some_and(|m| m != n) {
            return Err("two different content-lengths");
        }
        self.content_length = Some(n);
        Ok(())
    }

    /// How the body is framed, and whether the connection stays open after it.
    pub(crate) fn decide(&self, version: Version, no_body: bool) -> (Kind, bool) {
        let keep_alive = !self.close && (version == Version::HTTP_11 || self.keep_alive);
        if no_body {
            return (Kind::Done, keep_alive);
        }
        if self.transfer_encoding {
            // Both framings at once, or a transfer coding on HTTP/1.0 (which
            // has none): never reuse the connection.
            let reuse = keep_alive && self.content_length.is_none() && version == Version::HTTP_11;
            return if self.chunked_last {
                (Kind::Chunked(Chunked::START), reuse)
            } else {
                (Kind::Eof, false)
            };
        }
        match self.content_length {
            Some(n) => (Kind::Length(n), keep_alive),
            None => (Kind::Eof, false),
        }
    }
}

/// The field names a `connection` value lists besides `close` and
/// `keep-alive`: hop-by-hop fields, never passed on by a proxy.
pub(crate) fn listed_names(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| {
            !(t.is_empty()
                || t.eq_ignore_ascii_case(b"close")
                || t.eq_ignore_ascii_case(b"keep-alive"))
        })
}

/// Most fields a map may hold for [`field`] to scan it rather than hash.
const SCAN_MAX: usize = 8;

/// The first value of `name` in `h`, as `HeaderMap::get` gives it. The maps
/// built here hold only the fields Levee reads, one or two for most
/// requests and answers (their `content-type`): there a scan comparing
/// names is cheaper than `get`, which hashes the name first. The three
/// lookups a request makes cost 173 instructions so, 382 by `get`
/// (callgrind).
pub(crate) fn field<'a>(h: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if h.keys_len() <= SCAN_MAX {
        h.iter().find_map(|(n, v)| (n == name).then_some(v))
    } else {
        h.get(name)
    }
}

/// Which part of a header field is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadField {
    Name,
    Value,
}

/// The header map of the fields `spans` locates in `head`, but for those
/// named in `listed` (the names a `connection` field lists) and those
/// `skip` marks (bit `i`: the `i`th span), with room for `room` fields.
pub(crate) fn header_map(
    head: &Bytes,
    spans: &Spans,
    listed: &[(u32, u32)],
    skip: u64,
    room: usize,
) -> Result<HeaderMap, BadField> {
    let mut headers = HeaderMap::with_capacity(room);
    for (i, span) in spans.iter().enumerate() {
        if i < 64 && skip & (1 << i) != 0 {
            continue;
        }
        let (n, nl) = (span.name.0 as usize, span.name.1 as usize);
        let (v, vl) = (span.value.0 as usize, span.value.1 as usize);
        let name_bytes = &head[n..n + nl];
        if is_listed(head, listed, name_bytes) {
            continue;
        }
        let name = crate::http::fieldname::field_name(name_bytes).map_err(|_| BadField::Name)?;
        let value = match known_value(&head[v..v + vl]) {
            Some(known) => known.clone(),
            None => HeaderValue::from_maybe_shared(head.slice(v..v + vl))
                .map_err(|_| BadField::Value)?,
        };
        headers.append(name, value);
    }
    Ok(headers)
}

/// Values nearly every chat request and answer carries (their content
/// types, as SDKs and providers spell them), made once: taken from here, a
/// value is neither checked byte by byte nor a counted share of the head
/// (an atomic increment, and a decrement when it is dropped).
static KNOWN_VALUES: [HeaderValue; 5] = [
    HeaderValue::from_static("application/json"),
    HeaderValue::from_static("text/event-stream"),
    HeaderValue::from_static("application/json; charset=utf-8"),
    HeaderValue::from_static("text/event-stream; charset=utf-8"),
    HeaderValue::from_static("*/*"),
];

/// The ready-made value with exactly the bytes `v`, if there is one.
fn known_value(v: &[u8]) -> Option<&'static HeaderValue> {
    KNOWN_VALUES.iter().find(|k| k.as_bytes() == v)
}

/// Whether `name` is one of the names `listed` spans (offset, length) in
/// `head`.
pub(crate) fn is_listed(head: &[u8], listed: &[(u32, u32)], name: &[u8]) -> bool {
    listed
        .iter()
        .any(|&(t, tl)| head[t as usize..(t + tl) as usize].eq_ignore_ascii_case(name))
}

/// One header field line, `name: value\r\n`, as an answer's head, a
/// refusal and the relayed fields write it.
pub(crate) fn line(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Digits only (no sign, no space); leading zeros allowed, overflow refused.
pub(crate) fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// How much of the body is left to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Length(u64),
    Chunked(Chunked),
    /// Until the provider closes the connection.
    Eof,
    Done,
}

/// A chunked body's decoder: where it is, and the extension bytes seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunked {
    pub at: Chunk,
    extensions: usize,
}

impl Chunked {
    /// Before the first chunk-size line.
    pub(crate) const START: Chunked = Chunked {
        at: Chunk::Size,
        extensions: 0,
    };

    /// Bytes the current chunk declared and the decoder has not yet
    /// passed on: the body is at least this much longer.
    pub(crate) fn declared_ahead(&self) -> u64 {
        match self.at {
            Chunk::Data(left) => left,
            _ => 0,
        }
    }
}

/// Where a chunked body's decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chunk {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk's data, with this many bytes left.
    Data(u64),
    /// After a chunk's data, before its CRLF.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one (bytes seen).
    Trailers(usize),
}

/// What one step of decoding found in the buffer.
pub(crate) enum Step {
    Data(Bytes),
    /// Nothing more can be decoded without reading.
    More,
    Done,
}

/// One step of a chunked body's decoder over `buf`.
pub(crate) fn decode_chunked(
    chunked: &mut Chunked,
    buf: &mut BytesMut,
) -> Result<Step, &'static str> {
    loop {
        match chunked.at {
            Chunk::Size => {
                let Some(end) = buf.iter().position(|&b| b == b'\n') else {
                    if buf.len() > MAX_CHUNK_LINE {
                        return Err("chunk-size line too long");
                    }
                    return Ok(Step::More);
                };
                let (size, extensions) = chunk_line(&buf[..end])?;
                chunked.extensions += extensions;
                if chunked.extensions > MAX_CHUNK_EXTENSIONS {
                    return Err("chunk extensions too long");
                }
                buf.advance(end + 1);
                chunked.at = if size == 0 {
                    Chunk::Trailers(0)
                } else {
                    Chunk::Data(size)
                };
            }
            Chunk::Data(_) if buf.is_empty() => return Ok(Step::More),
            Chunk::Data(left) => {
                let take = left.min(buf.len() as u64);
                chunked.at = if take == left {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(left - take)
                };
                return Ok(Step::Data(buf.split_to(take as usize).freeze()));
            }
            Chunk::DataEnd => match buf.first() {
                None => return Ok(Step::More),
                Some(b'\n') => {
                    buf.advance(1);
                    chunked.at = Chunk::Size;
                }
                Some(b'\r') if buf.len() < 2 => return Ok(Step::More),
                Some(b'\r') if buf[1] == b'\n' => {
                    buf.advance(2);
                    chunked.at = Chunk::Size;
                }
                Some(_) => return Err("chunk data longer than its size"),
            },
            Chunk::Trailers(seen) => {
                let Some(end) = buf.iter().position(|&b| b == b'\n') else {
                    if seen + buf.len() > MAX_TRAILERS {
                        return Err("trailers too long");
                    }
                    return Ok(Step::More);
                };
                // Only an empty line ends the trailers. A line of spaces, tabs
                // or a lone CR is not one: taken as the end, it made the next
                // lines a new request on the same connection (a request
                // smuggled past a front that framed the body as nginx does).
                let line = &buf[..end];
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let empty = line.is_empty();
                if !empty && !is_field_line(line) {
                    return Err("invalid trailer line");
                }
                buf.advance(end + 1);
                if empty {
                    return Ok(Step::Done);
                }
                if seen + end + 1 > MAX_TRAILERS {
                    return Err("trailers too long");
                }
                chunked.at = Chunk::Trailers(seen + end + 1);
            }
        }
    }
}

/// Whether `line` (without its line end) is a header field line:
/// a token, `:`, then a value of visible characters, spaces and tabs.
fn is_field_line(line: &[u8]) -> bool {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return false;
    };
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    !name.is_empty()
        && name.iter().all(|&b| tchar(b))
        && value
            .iter()
            .all(|&b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80)
}

/// The size on a chunk-size line (`1a;ext=v\r`): hex digits, then
/// optional whitespace and extensions, which are ignored.
#[cfg(test)]
pub(crate) fn chunk_size(line: &[u8]) -> Result<u64, &'static str> {
    chunk_line(line).map(|(size, _)| size)
}

/// A chunk-size line's size and the length of its extensions.
fn chunk_line(line: &[u8]) -> Result<(u64, usize), &'static str> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // A CR anywhere but before the LF: parsers disagree on where such a
    // line ends, so it is refused, as hyper does.
    if line.contains(&b'\r') {
        return Err("invalid chunk size");
    }
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err("invalid chunk size");
    }
    // Only spaces and tabs (BWS) may stand between the size and `;`: a form
    // feed or a vertical tab there is read as part of the size by some
    // parsers and refused by others.
    let rest = &line[digits..];
    let rest = &rest[rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count()..];
    if !(rest.is_empty() || rest.starts_with(b";")) {
        return Err("invalid chunk size");
    }
    let hex = std::str::from_utf8(&line[..digits]).map_err(|_| "invalid chunk size")?;
    let size = u64::from_str_radix(hex, 16).map_err(|_| "invalid chunk size")?;
    Ok((size, rest.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_the_first_value_the_map_gives_however_many_fields_it_holds() {
        let names = ["content-type", "x-request-id", "retry-after", "x-a", "x-b"];
        for size in [0usize, 1, 2, SCAN_MAX, SCAN_MAX + 1, 3 * SCAN_MAX] {
            let mut h = HeaderMap::new();
            for i in 0..size {
                let name = HeaderName::from_bytes(format!("x-f{i}").as_bytes()).unwrap();
                h.append(name, HeaderValue::from(i));
            }
            // Repeated, the second value after the first.
            for (i, n) in names.iter().enumerate().take(size.min(names.len())) {
                let name = HeaderName::from_static(n);
                h.append(name.clone(), HeaderValue::from(100 + i));
                h.append(name, HeaderValue::from(200 + i));
            }
            let asked = names.iter().map(|n| HeaderName::from_static(n)).chain(
                (0..size + 2)
                    .map(|i| HeaderName::from_bytes(format!("x-f{i}").as_bytes()).unwrap()),
            );
            for name in asked {
                assert_eq!(field(&h, &name), h.get(&name), "{name} in a map of {size}");
            }
        }
    }

    /// The spans of `name: value\r\n` lines.
    fn spans_of(head: &[u8]) -> Spans {
        let mut spans = Spans::new();
        let mut at = 0;
        for line in head.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let colon = line.iter().position(|&b| b == b':').unwrap();
            let value = line[colon + 1..].trim_ascii();
            let v = at + (value.as_ptr() as usize - line.as_ptr() as usize);
            spans.push(Span {
                name: (at as u32, colon as u32),
                value: (v as u32, value.len() as u32),
            });
            at += line.len() + 1;
        }
        spans
    }

    #[test]
    fn a_known_value_is_the_same_value_and_no_share_of_the_head() {
        let known = b"content-type: application/json\r\naccept: */*\r\nx-b: text/event-stream; charset=utf-8\r\n";
        let other = b"content-type: application/JSON\r\naccept: */*\r\n";
        for (text, shared) in [(&known[..], false), (&other[..], true)] {
            let head = Bytes::from(text.to_vec());
            let spans = spans_of(&head);
            let map = header_map(&head, &spans, &[], 0, 4).unwrap();
            for span in spans.iter() {
                let (n, v) = (span.name, span.value);
                let name = std::str::from_utf8(&head[n.0 as usize..(n.0 + n.1) as usize]).unwrap();
                let value = &head[v.0 as usize..(v.0 + v.1) as usize];
                assert_eq!(map.get(name).unwrap().as_bytes(), value, "{name}");
                assert!(!map.get(name).unwrap().is_sensitive());
            }
            // A value sliced from the head holds a count of it.
            assert_eq!(
                !head.is_unique(),
                shared,
                "{}",
                String::from_utf8_lossy(text)
            );
            drop(map);
            assert!(head.is_unique());
        }
    }

    #[test]
    fn spans_past_the_inline_room_are_kept_in_order() {
        let mut spans = Spans::new();
        for i in 0..40u32 {
            spans.push(Span {
                name: (i, 1),
                value: (i, 2),
            });
        }
        assert_eq!(spans.len(), 40);
        let names: Vec<u32> = spans.iter().map(|s| s.name.0).collect();
        assert_eq!(names, (0..40).collect::<Vec<_>>());
    }

    #[test]
    fn chunk_size_lines() {
        assert_eq!(chunk_size(b"0").unwrap(), 0);
        assert_eq!(chunk_size(b"1a\r").unwrap(), 26);
        assert_eq!(chunk_size(b"FF ; name=value\r").unwrap(), 255);
        assert_eq!(chunk_size(b"ffffffffffffffff").unwrap(), u64::MAX);
        assert_eq!(chunk_size(b"00000000000000001").unwrap(), 1);
        assert_eq!(parse_decimal(b"000000000000000000002"), Some(2));
        assert_eq!(parse_decimal(b"18446744073709551616"), None);
        for bad in [
            &b""[..],
            b"1\r;a=b\r",
            b"1;a=\rb",
            b"\r",
            b"g",
            b"-1",
            b"1 2",
            b"1x",
            b"10\x0c",
            b"10\x0b;a=b",
            b"10000000000000000",
        ] {
            assert!(chunk_size(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    fn trailers(bytes: &[u8]) -> (Result<Step, &'static str>, usize) {
        let mut state = Chunked {
            at: Chunk::Trailers(0),
            extensions: 0,
        };
        let mut buf = BytesMut::from(bytes);
        let r = decode_chunked(&mut state, &mut buf);
        (r, buf.len())
    }

    #[test]
    fn only_an_empty_line_ends_the_trailers() {
        // Ends here, leaving what follows for the next request.
        for ok in [
            &b"\r\nGET"[..],
            b"\nGET",
            b"a: b\r\n\r\nGET",
            b"x-t:\t1 \r\n\r\nGET",
        ] {
            let (r, left) = trailers(ok);
            assert!(
                matches!(r, Ok(Step::Done)),
                "{}",
                String::from_utf8_lossy(ok)
            );
            assert_eq!(left, 3, "{}", String::from_utf8_lossy(ok));
        }
        // A line of only whitespace (or a lone CR) is no end and no field:
        // the message is refused, nothing after it is read as a request.
        for bad in [
            &b" \r\nGET"[..],
            b"\t\r\nGET",
            b"\x0c\r\nGET",
            b"\r\r\nGET",
            b" a: b\r\n\r\n",
            b"no colon\r\n\r\n",
            b": empty name\r\n\r\n",
            b"a b: c\r\n\r\n",
            b"a: b\x00\r\n\r\n",
        ] {
            let (r, _) = trailers(bad);
            assert_eq!(
                r.err(),
                Some("invalid trailer line"),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
