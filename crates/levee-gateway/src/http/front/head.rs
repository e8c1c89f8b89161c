//! Reading a request head: httparse's parse of the bytes buffered, each
//! field checked as it is seen (`host`, the framing fields, `connection`,
//! `expect`), the body's framing decided, and the `Request` the gateway
//! sees built on the head's own bytes; and why a head is refused.

use crate::http::callerfields;
use crate::http::fieldname::same_name;
use crate::http::h1wire::{
    header_map, listed_names, BadField, Chunked, Framing, Kind, Span, Spans, MAX_HEADERS,
};
use crate::http::respond::Why;
use bytes::{Bytes, BytesMut};
use http::header::HeaderMap;
use http::{Method, Request, Uri, Version};

/// A request head read and checked, its body not attached yet.
pub(crate) struct Head {
    pub(super) req: Request<()>,
    /// What is left of the body to read.
    pub(super) kind: Kind,
    pub(super) keep_alive: bool,
    pub(super) expect_continue: bool,
}

impl Head {
    /// How the body is framed, whether the connection stays open, the
    /// method and the target: what a framing comparison needs.
    pub(crate) fn view(&self) -> (Kind, bool, String, Vec<u8>) {
        let target = self
            .req
            .uri()
            .path_and_query()
            .map_or_else(|| self.req.uri().to_string(), |p| p.as_str().to_string());
        (
            self.kind,
            self.keep_alive,
            self.req.method().as_str().to_string(),
            target.into_bytes(),
        )
    }
}

/// Why a head is refused: the answer's row of Levee's table (its status
/// and label) and what was wrong, for the answer.
pub(crate) type Refusal = (Why, &'static str);

pub(super) const HEAD_TOO_LARGE: Refusal = (Why::HeadersTooLarge, "the request head is too large");

fn bad(why: &'static str) -> Refusal {
    (Why::Policy(levee_policy::Reason::BadRequest), why)
}

/// Parses one request head from the front of `buf`: `None` while it is
/// incomplete. The head's bytes leave the buffer; header values share them.
/// A head longer than `limit` bytes is refused even when it arrived whole.
pub(crate) fn parse_head(buf: &mut BytesMut, limit: usize) -> Result<Option<Head>, Refusal> {
    // Left uninitialised: httparse writes only the slots it fills.
    let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let Some(len) = head_len(req.parse_with_uninit_headers(buf, &mut slots), limit)? else {
        return Ok(None);
    };
    let version = if req.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let method = Method::from_bytes(req.method.unwrap_or("").as_bytes())
        .map_err(|_| bad("invalid method"))?;
    let base = buf.as_ptr() as usize;
    let path = at(base, req.path.unwrap_or("").as_bytes());
    let mut fields = Fields::new();
    for h in req.headers.iter() {
        fields.see(h, base)?;
    }
    if fields.hosts == 0 && version == Version::HTTP_11 {
        return Err(bad("an HTTP/1.1 request must have a host field"));
    }
    let kind = request_body(&fields.framing, version)?;
    let head = buf.split_to(len).freeze();
    let uri = target_uri(&head, path)?;
    let headers = fields.header_map(&head)?;
    let keep_alive =
        !fields.framing.close && (version == Version::HTTP_11 || fields.framing.keep_alive);
    Ok(Some(Head {
        req: request(method, uri, version, headers),
        kind,
        keep_alive,
        expect_continue: fields.expect_continue && version == Version::HTTP_11,
    }))
}

/// The length of the head httparse parsed: `None` while it is incomplete.
fn head_len(parsed: httparse::Result<usize>, limit: usize) -> Result<Option<usize>, Refusal> {
    match parsed {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(n)) if n > limit => Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Complete(n)) => Ok(Some(n)),
        Err(httparse::Error::TooManyHeaders) => {
            Err((Why::HeadersTooLarge, "the request head has too many fields"))
        }
        Err(_) => Err(bad("the request head is not valid HTTP/1.1")),
    }
}

/// Where `s` lies in the buffer starting at address `base`: its offset and
/// length.
fn at(base: usize, s: &[u8]) -> (u32, u32) {
    ((s.as_ptr() as usize - base) as u32, s.len() as u32)
}

/// What a head's fields say, gathered while the parser still borrows the
/// buffer.
struct Fields {
    framing: Framing,
    expect_continue: bool,
    /// Field names a `connection` field lists (besides close/keep-alive):
    /// hop-by-hop, so never part of the request the gateway sees. Rare: no
    /// allocation unless there are some.
    listed: Vec<(u32, u32)>,
    hosts: u8,
    /// The fields, in order.
    spans: Spans,
    /// Which of the first 64 fields no part of the gateway reads (bit `i`:
    /// the `i`th span), left out of the request's map.
    unread: u64,
    /// The request is SigV4-signed: its signature may cover any field, so
    /// every one is kept.
    signed: bool,
}

impl Fields {
    fn new() -> Fields {
        Fields {
            framing: Framing::default(),
            expect_continue: false,
            listed: Vec::new(),
            hosts: 0,
            spans: Spans::new(),
            unread: 0,
            signed: false,
        }
    }

    /// Takes one field of a head whose buffer starts at address `base`.
    fn see(&mut self, h: &httparse::Header<'_>, base: usize) -> Result<(), Refusal> {
        let connection_only = self.framing.see(h.name, h.value).map_err(bad)?;
        if same_name(h.name.as_bytes(), b"host") {
            see_host(&mut self.hosts, h.value)?;
        }
        if same_name(h.name.as_bytes(), b"connection") {
            self.listed
                .extend(listed_names(h.value).map(|name| at(base, name)));
        }
        if same_name(h.name.as_bytes(), b"expect") {
            self.expect_continue = h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
        }
        // The request's length is kept for a signed request (its
        // signature may cover it); else the body's size hint carries it.
        if !connection_only || same_name(h.name.as_bytes(), b"content-length") {
            let name = h.name.as_bytes();
            if !callerfields::levee_reads(name) {
                self.unread |= 1u64.checked_shl(self.spans.len() as u32).unwrap_or(0);
            } else if same_name(name, b"authorization") && callerfields::is_sigv4(h.value) {
                self.signed = true;
            }
            self.spans.push(Span {
                name: at(base, h.name.as_bytes()),
                value: at(base, h.value),
            });
        }
        Ok(())
    }

    /// The fields the gateway sees, as values sharing `head`'s bytes.
    fn header_map(&self, head: &Bytes) -> Result<HeaderMap, Refusal> {
        let unread = if self.signed { 0 } else { self.unread };
        let room = self.spans.len() - unread.count_ones() as usize;
        header_map(head, &self.spans, &self.listed, unread, room).map_err(|e| {
            bad(match e {
                BadField::Name => "invalid header field name",
                BadField::Value => "invalid header field value",
            })
        })
    }
}

/// The request target at `path` in `head` as a `Uri`.
fn target_uri(head: &Bytes, path: (u32, u32)) -> Result<Uri, Refusal> {
    let target = path.0 as usize..(path.0 + path.1) as usize;
    match served_uri(&head[target.clone()]) {
        Some(uri) => Ok(uri),
        None => Uri::from_maybe_shared(head.slice(target))
            .map_err(|_| bad("the request target is not a valid URI")),
    }
}

/// The request the gateway sees, its body not attached yet.
fn request(method: Method, uri: Uri, version: Version, headers: HeaderMap) -> Request<()> {
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = version;
    *req.headers_mut() = headers;
    req
}

/// The paths the gateway serves, parsed once: a clone of one of these
/// costs ~190 instructions less than parsing the request target into a
/// `Uri` byte by byte (0.6 % of a whole proxied chat completion). Another
/// target (a query string, a path served nowhere) is parsed as it comes.
static SERVED: std::sync::LazyLock<Vec<(&str, Uri)>> = std::sync::LazyLock::new(|| {
    use levee_wire::paths::{MODELS, POST};
    POST.into_iter()
        .chain([MODELS])
        .map(|p| (p, Uri::from_static(p)))
        .collect()
});

/// The `Uri` of a served path, when `target` is one exactly.
fn served_uri(target: &[u8]) -> Option<Uri> {
    SERVED
        .iter()
        .find(|(p, _)| p.as_bytes() == target)
        .map(|(_, uri)| uri.clone())
}

/// How a request's body is framed. A length together with `chunked` is
/// how requests are smuggled past one proxy to the next: refused, as is
/// any coding on HTTP/1.0 and more than one `transfer-encoding` field.
/// The one field must say exactly `chunked`: another coding before it
/// (`gzip, chunked`) is one Levee does not implement (501), and one it
/// would silently drop, `identity, chunked`, is refused too.
fn request_body(framing: &Framing, version: Version) -> Result<Kind, Refusal> {
    if framing.transfer_encoding {
        if version == Version::HTTP_10 {
            return Err(bad("transfer-encoding on an HTTP/1.0 request"));
        }
        if framing.content_length.is_some() {
            return Err(bad("both content-length and transfer-encoding"));
        }
        if framing.te_fields > 1 {
            return Err(bad("more than one transfer-encoding field"));
        }
        if !framing.chunked_last {
            return Err(bad("transfer-encoding does not end with chunked"));
        }
        if !framing.te_only_chunked {
            return Err((
                Why::NotImplemented,
                "transfer codings other than chunked are not implemented",
            ));
        }
        return Ok(Kind::Chunked(Chunked::START));
    }
    Ok(match framing.content_length {
        Some(0) | None => Kind::Done,
        Some(n) => Kind::Length(n),
    })
}

/// Whether a `host` field's value is `uri-host [":" port]` (RFC 9112 3.2):
/// a registered name, an IPv4 address or a bracketed IPv6 literal, with an
/// optional decimal port, and no user information. An empty value is
/// valid (a target with no authority).
fn valid_host(value: &[u8]) -> bool {
    let (host, port) = match value.strip_prefix(b"[") {
        Some(rest) => {
            let Some(close) = rest.iter().position(|&b| b == b']') else {
                return false;
            };
            let literal = &rest[..close];
            let ip =
                std::str::from_utf8(literal).is_ok_and(|s| s.parse::<std::net::Ipv6Addr>().is_ok());
            if !ip {
                return false;
            }
            match &rest[close + 1..] {
                [] => (&[][..], None),
                [b':', port @ ..] => (&[][..], Some(port)),
                _ => return false,
            }
        }
        None => match value.iter().position(|&b| b == b':') {
            Some(colon) => (&value[..colon], Some(&value[colon + 1..])),
            None => (value, None),
        },
    };
    // reg-name: unreserved, percent-encoded and sub-delims characters
    // (an IPv4 address is one too).
    let mut i = 0;
    let mut reg_name = true;
    while i < host.len() && reg_name {
        let b = host[i];
        if b == b'%' {
            // A percent sign starts two hex digits.
            reg_name = host
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
            i += 3;
        } else {
            reg_name = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b);
            i += 1;
        }
    }
    reg_name && port.is_none_or(|p| p.iter().all(u8::is_ascii_digit))
}

/// Counts a `host` field and checks its value. Two hosts, or one a front
/// and Levee could read differently, is how requests are routed past a
/// front's checks.
fn see_host(hosts: &mut u8, value: &[u8]) -> Result<(), Refusal> {
    *hosts = hosts.saturating_add(1);
    if *hosts > 1 {
        return Err(bad("more than one host field"));
    }
    if !valid_host(value) {
        return Err(bad("the host field is not a valid host[:port]"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A served path comes out as the `Uri` parsing would give, made once
    /// (a lookup that always parsed would give equal values and fail the
    /// pointer test); anything else is parsed as it comes.
    #[test]
    fn served_paths_are_parsed_once_and_other_targets_as_they_come() {
        for (path, made) in SERVED.iter() {
            let mut buf =
                BytesMut::from(format!("POST {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_str());
            let head = parse_head(&mut buf, 64 * 1024)
                .expect("valid")
                .expect("whole");
            let uri = head.req.uri();
            assert_eq!(uri, &Uri::from_static(path));
            assert_eq!(uri.path(), *path);
            assert!(
                std::ptr::eq(uri.path().as_ptr(), made.path().as_ptr()),
                "{path} was parsed again"
            );
        }
        for target in [
            "/v1/chat/completions?x=1",
            "/v1/chat/completion",
            "/V1/messages",
            "*",
        ] {
            let mut buf =
                BytesMut::from(format!("POST {target} HTTP/1.1\r\nhost: x\r\n\r\n").as_str());
            let head = parse_head(&mut buf, 64 * 1024)
                .expect("valid")
                .expect("whole");
            assert_eq!(head.req.uri().to_string(), target);
        }
        let mut buf = BytesMut::from("POST /v1/chat/\x01completions HTTP/1.1\r\nhost: x\r\n\r\n");
        assert!(parse_head(&mut buf, 64 * 1024).is_err());
    }

    fn names_kept(head: &str) -> Vec<String> {
        let mut buf = BytesMut::from(head);
        let head = parse_head(&mut buf, 64 * 1024)
            .expect("valid")
            .expect("whole");
        head.req.headers().keys().map(|n| n.to_string()).collect()
    }

    /// The SDKs' descriptions of their platform are left out of the map;
    /// what the gateway reads stays, in order, and a signed request keeps
    /// every field its signature may cover.
    #[test]
    fn fields_no_part_of_the_gateway_reads_are_left_out_unless_signed() {
        let sdk = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\
            Accept-Encoding: gzip\r\nx-stainless-lang: python\r\n\
            authorization: Bearer sk-1\r\nx-stainless-os: Linux\r\n\
            x-stainless-retry-count: 0\r\nx-stainless-read-timeout: 600\r\n\
            x-levee-caller: batch\r\ncontent-length: 2\r\n\r\n";
        assert_eq!(
            names_kept(sdk),
            [
                "authorization",
                "x-stainless-retry-count",
                "x-stainless-read-timeout",
                "x-levee-caller",
            ]
        );
        let signed = "POST /model/m/invoke HTTP/1.1\r\nhost: x\r\nx-custom: 1\r\n\
            authorization: AWS4-HMAC-SHA256 Credential=AK/20250101/us-east-1/bedrock/aws4_request\r\n\
            x-stainless-os: Linux\r\ncontent-length: 2\r\n\r\n";
        assert_eq!(
            names_kept(signed),
            [
                "host",
                "x-custom",
                "authorization",
                "x-stainless-os",
                "content-length"
            ]
        );
        // Past the 64 fields the mask covers, every field is kept.
        let mut many = String::from("GET / HTTP/1.1\r\nhost: x\r\n");
        for i in 0..70 {
            many.push_str(&format!("x-unread-{i}: 1\r\n"));
        }
        many.push_str("\r\n");
        let kept = names_kept(&many);
        assert_eq!(kept.len(), 70 - 63, "{kept:?}");
        assert_eq!(kept[0], "x-unread-63");
    }
}
