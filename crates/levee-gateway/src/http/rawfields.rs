//! The fields of a provider's answer that Levee never reads, kept as the
//! bytes they arrived in and written to the caller as they are.
//!
//! Putting a field into an `http::HeaderMap` costs ~500 instructions
//! (hashing, a name lookup, a shared slice of the head) and taking it out
//! again to write it costs more; OpenAI's answers carry 22 fields, of which
//! Levee reads the content type, the request id and the rate-limit reports
//! and only passes the rest on (`date`, `server`, `openai-*`, `cf-ray`,
//! `strict-transport-security`, ...). Those go here instead: a slice of the
//! head (or one copy of the lines), written out with one copy.
//!
//! [`levee_reads`] is the contract: every field name any part of Levee
//! reads, removes or rewrites in a provider's answer head must be listed
//! there, or that part sees an answer without it. What is here is relayed
//! only where the answer itself is (a success relayed whole or streamed);
//! every other use of an answer's head (an error passed on, a stored replay,
//! the tape, a platform's re-framing) puts the fields back into the map
//! first ([`RawFields::move_into`]).

use crate::http::fieldname::{has_prefix, same_name};
use crate::http::h1wire::line;
use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Answer fields relayed as bytes: whole `name: value\r\n` lines of the
/// provider's head, each field as the provider wrote it (the name's case
/// too) and as httparse took it (what a header map would take). Where the
/// lines are one run of the head (nginx's `server` and `date`), they are a
/// slice of it: no allocation and no copy; else they are copied into one
/// buffer (OpenAI's 17 such fields lie in three runs). Small on purpose
/// (one `Bytes`): it travels inside the answer's body, which moves often.
#[derive(Clone, Debug, Default)]
pub struct RawFields {
    lines: Bytes,
    /// Whether one of the lines is a `date` field.
    dated: bool,
}

/// Prefixes of the names Levee reads: the rate-limit reports of OpenAI and
/// Anthropic, and Levee's own fields (a provider's are dropped, so only
/// Levee speaks for Levee).
const READ_PREFIXES: [&[u8]; 3] = [b"x-ratelimit-", b"anthropic-ratelimit-", b"x-levee-"];

/// Whether Levee reads the answer field `name` (any case): such fields go
/// into the answer's header map, all others are relayed as bytes.
///
/// The names read, each told from the others by its length and first
/// letter (and one more letter where two share both): framing and
/// hop-by-hop fields (dropped), the content type (a stream or not, a
/// platform's event stream), the retry advice (`retry-after`,
/// `retry-after-ms`, `x-should-retry`), the request ids (echoed or
/// renamed), the encoding, and the AWS fields Bedrock's answers are read
/// by or that Levee writes into an answer it reshapes for AWS clients. A
/// name Levee writes into a relayed answer must be here too, or the caller
/// would get the provider's field beside Levee's. One comparison a field,
/// eight bytes a step: OpenAI's answers carry 22 fields, each looked up.
/// The tests hold the same names as a plain list and check that the two
/// answer alike: a name is added to both.
pub fn levee_reads(name: &[u8]) -> bool {
    let Some(&first) = name.first() else {
        return false;
    };
    let at = |i: usize| name.get(i).map_or(0, |b| b | 0x20);
    let named: &[u8] = match (name.len(), first | 0x20) {
        (2, b't') => b"te",
        (7, b't') => b"trailer",
        (7, b'u') => b"upgrade",
        (10, b'c') => b"connection",
        (10, b'k') => b"keep-alive",
        (10, b'r') => b"request-id",
        (11, b'r') => b"retry-after",
        (12, b'c') => b"content-type",
        (12, b'x') => b"x-request-id",
        (14, b'c') => b"content-length",
        (14, b'r') => b"retry-after-ms",
        (14, b'x') => b"x-should-retry",
        (16, b'c') => b"content-encoding",
        (16, b'p') => b"proxy-connection",
        (16, b'x') if at(7) == b'r' => b"x-amzn-requestid",
        (16, b'x') => b"x-amzn-errortype",
        (17, b't') => b"transfer-encoding",
        (27, b'x') => b"x-amzn-bedrock-content-type",
        (32, b'x') => b"x-amzn-bedrock-input-token-count",
        (33, b'x') if at(15) == b'o' => b"x-amzn-bedrock-output-token-count",
        (33, b'x') => b"x-amzn-bedrock-invocation-latency",
        _ => b"",
    };
    same_name(name, named)
        || (matches!(first | 0x20, b'x' | b'a')
            && READ_PREFIXES.iter().any(|p| has_prefix(name, p)))
}

impl RawFields {
    /// Fields taken from a head as it is parsed.
    pub fn builder() -> RawBuilder {
        RawBuilder {
            run: (0, 0),
            copied: None,
            dated: false,
        }
    }

    /// No fields.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The lines, to be written as they are.
    pub fn lines(&self) -> &[u8] {
        &self.lines
    }

    /// Whether a `date` field is among them (the answer writer adds its own
    /// only when there is none).
    pub fn dated(&self) -> bool {
        self.dated
    }

    /// Each field's name and value, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        fields(&self.lines)
    }

    /// These fields but for those `drop` names (the names a `connection`
    /// field lists).
    pub fn without(self, drop: impl Fn(&[u8]) -> bool) -> RawFields {
        if !self.iter().any(|(n, _)| drop(n)) {
            return self;
        }
        let mut kept = RawBuilder {
            run: (0, 0),
            copied: Some(BytesMut::with_capacity(self.lines.len())),
            dated: false,
        };
        for (n, v) in self.iter().filter(|(n, _)| !drop(n)) {
            kept.push(&self.lines, n, v);
        }
        kept.finish(&self.lines)
    }

    /// Appends the fields to `h` (after its own: the order within a name
    /// is kept), leaving none here.
    pub fn move_into(&mut self, h: &mut HeaderMap) {
        if self.is_empty() {
            return;
        }
        let raw = std::mem::take(self);
        let base = raw.lines.as_ptr() as usize;
        for (name, value) in raw.iter() {
            let at = value.as_ptr() as usize - base;
            // Checked when they were taken in: neither fails.
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name),
                HeaderValue::from_maybe_shared(raw.lines.slice(at..at + value.len())),
            ) {
                h.append(n, v);
            }
        }
    }
}

/// The name and value of each `name:value\r\n` line (optional white space
/// around the value).
fn fields(lines: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    lines.split(|&b| b == b'\n').filter_map(|l| {
        let l = l.strip_suffix(b"\r")?;
        let colon = l.iter().position(|&b| b == b':')?;
        let value = l[colon + 1..].trim_ascii();
        Some((&l[..colon], value))
    })
}

/// Builds [`RawFields`] one field of a head at a time, while the parser
/// still holds the head: fields as httparse has checked them (a name of
/// token characters, a value of visible characters, spaces and tabs: what
/// a header map accepts, as a test over every byte shows).
pub struct RawBuilder {
    /// The lines so far (offsets in the head), while they are one run.
    run: (usize, usize),
    /// The lines copied out once they are not.
    copied: Option<BytesMut>,
    dated: bool,
}

impl RawBuilder {
    /// Adds the field whose name and value are these slices of `head`.
    pub(crate) fn push(&mut self, head: &[u8], name: &[u8], value: &[u8]) {
        self.dated |= name.eq_ignore_ascii_case(b"date");
        if let Some(out) = &mut self.copied {
            line(out, name, value);
            return;
        }
        let base = head.as_ptr() as usize;
        let n = name.as_ptr() as usize - base;
        let value_end = value.as_ptr() as usize - base + value.len();
        let end = value_end + 2;
        let whole_line = head.get(value_end..end) == Some(b"\r\n");
        if whole_line && self.run.1 == self.run.0 {
            self.run = (n, end);
        } else if whole_line && self.run.1 == n {
            // This line follows the last one: the run grows.
            self.run.1 = end;
        } else {
            // A second run, or a line ended by a bare `\n`: copied.
            let mut out = BytesMut::with_capacity(self.run.1 - self.run.0 + 512);
            out.extend_from_slice(&head[self.run.0..self.run.1]);
            line(&mut out, name, value);
            self.copied = Some(out);
        }
    }

    /// The fields, `head` being the head they were pushed from.
    pub fn finish(self, head: &Bytes) -> RawFields {
        let lines = match self.copied {
            Some(out) => out.freeze(),
            None if self.run.0 == self.run.1 => Bytes::new(),
            None => head.slice(self.run.0..self.run.1),
        };
        RawFields {
            lines,
            dated: self.dated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names Levee reads in a provider's answer, as a plain list:
    /// what [`levee_reads`] must answer.
    const READ: [&[u8]; 21] = [
        b"te",
        b"trailer",
        b"upgrade",
        b"connection",
        b"keep-alive",
        b"request-id",
        b"retry-after",
        b"content-type",
        b"x-request-id",
        b"content-length",
        b"retry-after-ms",
        b"x-should-retry",
        b"content-encoding",
        b"proxy-connection",
        b"x-amzn-requestid",
        b"x-amzn-errortype",
        b"transfer-encoding",
        b"x-amzn-bedrock-content-type",
        b"x-amzn-bedrock-input-token-count",
        b"x-amzn-bedrock-output-token-count",
        b"x-amzn-bedrock-invocation-latency",
    ];

    /// The one-comparison lookup answers as the plain list does.
    #[test]
    fn the_lookup_answers_as_the_list_does() {
        let unread: [&[u8]; 4] = [b"server", b"date", b"openai-version", b"x"];
        crate::http::fieldname::agrees_near(levee_reads, &READ, &READ_PREFIXES, &unread);
    }

    /// The spans of each `name:value` line of `text` (value trimmed as
    /// httparse trims it), and the head.
    type FieldSpans = Vec<((u32, u32), (u32, u32))>;

    fn spans(text: &str) -> (Bytes, FieldSpans) {
        let head = Bytes::copy_from_slice(text.as_bytes());
        let mut out = Vec::new();
        let mut at = 0;
        for l in text.split_inclusive('\n') {
            if let Some(colon) = l.find(':') {
                let rest = &l[colon + 1..];
                let value = rest.trim_matches(|c| c == ' ' || c == '\t' || c == '\r' || c == '\n');
                let v = at + colon + 1 + rest.find(value).unwrap_or(0);
                out.push(((at as u32, colon as u32), (v as u32, value.len() as u32)));
            }
            at += l.len();
        }
        (head, out)
    }

    /// The fields of `text`, all of them relayed.
    fn raw(text: &str) -> RawFields {
        pushed(text, |_| true)
    }

    /// The fields of `text` whose index `take` says, relayed.
    fn pushed(text: &str, take: impl Fn(usize) -> bool) -> RawFields {
        let (head, spans) = spans(text);
        let mut b = RawFields::builder();
        for (_, (n, v)) in spans.into_iter().enumerate().filter(|(i, _)| take(*i)) {
            let name = &head[n.0 as usize..(n.0 + n.1) as usize];
            let value = &head[v.0 as usize..(v.0 + v.1) as usize];
            b.push(&head, name, value);
        }
        b.finish(&head)
    }

    fn written(r: &RawFields) -> Vec<u8> {
        r.lines().to_vec()
    }

    #[test]
    fn one_run_of_lines_is_a_slice_of_the_head_as_the_provider_wrote_it() {
        let text = "HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Sun, 06 Dec 2026 20:00:00 GMT\r\nx-a:b\r\n\r\n";
        let r = raw(text);
        assert_eq!(
            written(&r),
            b"Server: nginx\r\nDate: Sun, 06 Dec 2026 20:00:00 GMT\r\nx-a:b\r\n"
        );
        assert!(r.dated());
        assert!(!raw("x: y\r\nx-date: z\r\n").dated());
        assert!(raw("").is_empty());
    }

    #[test]
    fn lines_apart_or_ended_by_a_bare_newline_are_copied_and_written_anew() {
        let text = "a:  1\r\nkept: x\r\nb: 2 \r\nc: 3\r\nkept: x\r\nd:4\r\n";
        let r = pushed(text, |i| i != 1 && i != 4);
        // The first run as written; the lines after it written anew.
        assert_eq!(written(&r), b"a:  1\r\nb: 2\r\nc: 3\r\nd: 4\r\n");
        let fields: Vec<_> = r.iter().collect();
        assert_eq!(
            fields,
            [
                (&b"a"[..], &b"1"[..]),
                (b"b", b"2"),
                (b"c", b"3"),
                (b"d", b"4")
            ]
        );
        let r = raw("a: 1\nb: 2\r\n");
        assert_eq!(
            written(&r),
            b"a: 1\r\nb: 2\r\n",
            "a bare newline is not relayed"
        );
    }

    #[test]
    fn without_leaves_out_the_fields_named() {
        let r = raw("Date: d\r\nx-hop: 1\r\nServer: s\r\n");
        let kept = r.clone().without(|n| n.eq_ignore_ascii_case(b"X-Hop"));
        assert_eq!(written(&kept), b"Date: d\r\nServer: s\r\n");
        assert!(kept.dated());
        let none = r.without(|n| n == b"Date");
        assert!(!none.dated());
    }

    #[test]
    fn move_into_puts_every_field_back_in_order_and_leaves_none() {
        let mut r = raw(
            "set-cookie: a=1\r\nServer:nginx\r\nset-cookie: b=2\r\nx-empty:\r\nx-colon: a: b\r\n",
        );
        let mut h = HeaderMap::new();
        h.insert("set-cookie", HeaderValue::from_static("z=0"));
        r.move_into(&mut h);
        assert!(r.is_empty());
        let cookies: Vec<_> = h.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["z=0", "a=1", "b=2"]);
        assert_eq!(h["server"], "nginx");
        assert_eq!(h["x-empty"], "");
        assert_eq!(h["x-colon"], "a: b");
        assert_eq!(h.len(), 6);
    }

    #[test]
    fn what_levee_reads_is_kept_out_whatever_its_case() {
        for name in [
            "Content-Type",
            "retry-after",
            "Retry-After-Ms",
            "x-should-retry",
            "X-Request-Id",
            "request-id",
            "x-ratelimit-remaining-tokens",
            "Anthropic-Ratelimit-Requests-Reset",
            "x-levee-replayed",
            "connection",
            "Keep-Alive",
            "x-amzn-ErrorType",
        ] {
            assert!(levee_reads(name.as_bytes()), "{name}");
        }
        for name in [
            "date",
            "server",
            "openai-processing-ms",
            "cf-ray",
            "x-levee",
            "te-x",
        ] {
            assert!(!levee_reads(name.as_bytes()), "{name}");
        }
    }
}
