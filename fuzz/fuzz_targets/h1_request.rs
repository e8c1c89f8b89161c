//! Where a request ends, Levee's caller side against a reference framer.
//!
//! Input: the bytes one caller connection carries. Levee's view is
//! `framing_view::requests` (the front's own head parser and chunked
//! decoder, head limit 64 KiB); the reference is `rfc9112.rs` plus the
//! request rules of RFC 9112 §6.3 and §9.3, written here:
//! - a `transfer-encoding` field: refused on HTTP/1.0 (§6.1: faulty
//!   framing), refused with a `content-length` (§6.3 rule 3: the smuggling
//!   shape; Levee refuses it and closes), the final coding must be
//!   `chunked` (§6.3 rule 4: else 400) and the only one (§6.1: a server
//!   answers 501 to codings it does not implement; `chunked` twice is
//!   forbidden) — the codings of every field combined as one list;
//! - else `content-length` (1*DIGIT, or a list of one repeated value), else
//!   no body (§6.3 rule 7);
//! - host: exactly one on HTTP/1.1, never two, `uri-host [":" port]`
//!   (§3.2);
//! - the connection stays open unless `close` is listed, and on HTTP/1.0
//!   only with `keep-alive` (§9.3).
//!
//! Property: Levee may refuse (`End::Refused`) where the reference accepts
//! — strictness — but every request Levee accepted is the reference's
//! request at the same position (method, target, decoded body, chunked,
//! keep-alive), so a request Levee serves never starts where the reference
//! sees body bytes or the reverse. If Levee does not refuse, the requests
//! are the same and the stream ends the same way: Partial, Clean, or
//! Closed with the same number of unread bytes. Levee waiting for more
//! (Partial) where the reference already refuses the next message is
//! allowed: Levee has not accepted it.
#![no_main]

#[path = "rfc9112.rs"]
mod rfc9112;

use levee_gateway::framing_view::{requests, End, SeenRequest};
use libfuzzer_sys::fuzz_target;
use rfc9112::{chunked, codings, content_length, persistent, valid_host, Chunked};

const MAX_HEADER_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Request {
    method: String,
    target: Vec<u8>,
    body: Vec<u8>,
    chunked: bool,
    keep_alive: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum RefEnd {
    Refused(&'static str),
    Partial,
    Clean,
    Closed(usize),
}

/// The request target as Levee reports it (the path and query of its
/// `http::Uri`): an origin-form target as it is and an absolute-form one's
/// path and query as they are (`/` when both are empty), a fragment (which no request target
/// may carry) cut; `*` and an authority-form target as they are.
fn normalise_target(t: &[u8]) -> Vec<u8> {
    let t = match t.iter().position(|&b| b == b'#') {
        Some(i) => &t[..i],
        None => t,
    };
    // Absolute-form: a scheme, `://`, an authority. (The `http` crate's
    // idea of a scheme is looser than RFC 3986's; the target is not what
    // this target checks, so any prefix before `://` counts.)
    let absolute = match t.first() {
        Some(b'/') | None => None,
        Some(_) => t.windows(3).position(|w| w == b"://"),
    };
    if let Some(scheme_end) = absolute {
        let after = &t[scheme_end + 3..];
        let path_at = after
            .iter()
            .position(|&b| b == b'/' || b == b'?')
            .unwrap_or(after.len());
        let pq = &after[path_at..];
        if pq.is_empty() {
            return b"/".to_vec();
        }
        return pq.to_vec();
    }
    t.to_vec()
}

/// One request at the front of `buf`: the request and the bytes it took.
fn one(buf: &[u8]) -> Result<Option<(Request, usize)>, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err("invalid head (httparse)"),
    };
    let minor = req.version.unwrap_or(1);
    let fields = |name: &str| -> Vec<&[u8]> {
        req.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
            .collect()
    };
    let hosts = fields("host");
    if hosts.len() > 1 {
        return Err("more than one host");
    }
    if minor == 1 && hosts.is_empty() {
        return Err("HTTP/1.1 without host");
    }
    if hosts.first().is_some_and(|h| !valid_host(h)) {
        return Err("invalid host");
    }
    let te = fields("transfer-encoding");
    let cl = fields("content-length");
    let keep_alive = persistent(minor, &fields("connection"));
    let rest = &buf[head_len..];
    let (body, used, is_chunked) = if !te.is_empty() {
        if minor == 0 {
            return Err("transfer-encoding on HTTP/1.0");
        }
        if !cl.is_empty() {
            return Err("transfer-encoding and content-length");
        }
        let list = codings(&te)?;
        match list.last() {
            Some((name, false)) if name == b"chunked" => {}
            _ => return Err("final transfer coding is not chunked"),
        }
        if list.len() != 1 {
            return Err("transfer codings other than one chunked");
        }
        match chunked(rest) {
            Chunked::Whole(body, used) => (body, used, true),
            Chunked::Partial => return Ok(None),
            Chunked::Refused(e) => return Err(e),
        }
    } else {
        let n = content_length(&cl)?.unwrap_or(0);
        if (rest.len() as u64) < n {
            return Ok(None);
        }
        let n = n as usize;
        (rest[..n].to_vec(), n, false)
    };
    let request = Request {
        method: req.method.unwrap_or("").to_string(),
        target: normalise_target(req.path.unwrap_or("").as_bytes()),
        body,
        chunked: is_chunked,
        keep_alive,
    };
    Ok(Some((request, head_len + used)))
}

/// The reference's requests on one connection, and how the stream ends.
fn reference(input: &[u8]) -> (Vec<Request>, RefEnd) {
    let mut at = 0;
    let mut seen = Vec::new();
    loop {
        if at == input.len() {
            return (seen, RefEnd::Clean);
        }
        match one(&input[at..]) {
            Err(e) => return (seen, RefEnd::Refused(e)),
            Ok(None) => return (seen, RefEnd::Partial),
            Ok(Some((r, used))) => {
                at += used;
                let keep = r.keep_alive;
                seen.push(r);
                if !keep {
                    return (seen, RefEnd::Closed(input.len() - at));
                }
            }
        }
    }
}

fn same(levee: &SeenRequest, reference: &Request) -> bool {
    levee.method == reference.method
        && levee.target == reference.target
        && levee.body == reference.body
        && levee.chunked == reference.chunked
        && levee.keep_alive == reference.keep_alive
}

fuzz_target!(|data: &[u8]| {
    let (levee, levee_end) = requests(data, MAX_HEADER_BYTES);
    let (refs, ref_end) = reference(data);
    let show = || {
        format!(
            "\ninput: {:?}\nLevee: {levee:?} {levee_end:?}\nreference: {refs:?} {ref_end:?}",
            String::from_utf8_lossy(data)
        )
    };
    for (i, l) in levee.iter().enumerate() {
        match refs.get(i) {
            Some(r) => assert!(same(l, r), "request {i} differs{}", show()),
            None => panic!(
                "Levee accepted request {i}, the reference did not ({ref_end:?}){}",
                show()
            ),
        }
    }
    match levee_end {
        // Strictness: whatever Levee accepted before it is checked above.
        End::Refused(_) => {}
        End::Partial => assert!(
            refs.len() == levee.len() && matches!(ref_end, RefEnd::Partial | RefEnd::Refused(_)),
            "Levee waits for more bytes, the reference does not{}",
            show()
        ),
        End::Clean => assert!(
            refs.len() == levee.len() && ref_end == RefEnd::Clean,
            "Levee ends cleanly, the reference does not{}",
            show()
        ),
        End::Closed(n) => assert!(
            refs.len() == levee.len() && ref_end == RefEnd::Closed(n),
            "Levee closes with {n} bytes unread, the reference does not{}",
            show()
        ),
    }
});
