//! Where a provider's answer ends, Levee's provider side against a
//! reference framer.
//!
//! Input: byte 0 picks the request the answer is to (odd: `HEAD`, even:
//! `POST`); the rest is what the provider sends on the connection. Levee's
//! view is `framing_view::answer`; the reference is `rfc9112.rs` plus the
//! response rules of RFC 9112 §6.3 and §9.3, written here:
//! - interim (1xx) heads are skipped and have no content (rule 1); a 101
//!   that was not asked for is refused;
//! - an answer to HEAD, a 204 and a 304 end with their head (rules 1-2);
//! - a `transfer-encoding` whose final coding is `chunked` is decoded
//!   (codings under it are content the gateway relays); one with another
//!   final coding is read until the close (rule 4); with a
//!   `content-length` too, `transfer-encoding` wins and the connection is
//!   not reused (rule 3), nor after an HTTP/1.0 answer with
//!   `transfer-encoding` (§6.1: its framing is faulty, close after it);
//! - else a valid `content-length` (1*DIGIT, or a list of one repeated
//!   value; anything else is an unrecoverable error, rule 5);
//! - else the body runs to the close (rule 8), and the connection is not
//!   reused;
//! - reusable: as §9.3 says for the version and `connection` tokens.
//!
//! Property: Levee may refuse an answer (strictness: the caller gets a
//! 502) or wait for more where the reference refuses; otherwise Levee's
//! answer is the reference's — status, decoded body, reusable — and Levee
//! never waits where the reference's answer is complete or the reverse.
#![no_main]

#[path = "rfc9112.rs"]
mod rfc9112;

use levee_gateway::framing_view::answer;
use libfuzzer_sys::fuzz_target;
use rfc9112::{chunked, content_length, persistent, Chunked};

#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    body: Vec<u8>,
    reusable: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Ref {
    Whole(Answer),
    Partial,
    Refused(&'static str),
}

fn reference(input: &[u8], head_request: bool) -> Ref {
    let mut at = 0;
    loop {
        let buf = &input[at..];
        let mut headers = [httparse::EMPTY_HEADER; 100];
        let mut resp = httparse::Response::new(&mut headers);
        let head_len = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Ref::Partial,
            Err(_) => return Ref::Refused("invalid head (httparse)"),
        };
        at += head_len;
        let status = resp.code.unwrap_or(0);
        if status == 101 {
            return Ref::Refused("101 not asked for");
        }
        if (100..200).contains(&status) {
            continue;
        }
        let minor = resp.version.unwrap_or(1);
        let fields = |name: &str| -> Vec<&[u8]> {
            resp.headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value)
                .collect()
        };
        let keep = persistent(minor, &fields("connection"));
        let rest = &input[at..];
        if head_request || status == 204 || status == 304 {
            return Ref::Whole(Answer {
                status,
                body: Vec::new(),
                reusable: keep,
            });
        }
        let te = fields("transfer-encoding");
        let cl = fields("content-length");
        if !te.is_empty() {
            // Only the final coding matters: anything but `chunked` (a
            // coding the gateway relays as content, or no valid coding at
            // all) leaves the close as the only end.
            let chunked_last = rfc9112::list(&te)
                .last()
                .is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"));
            if !chunked_last {
                return Ref::Whole(Answer {
                    status,
                    body: rest.to_vec(),
                    reusable: false,
                });
            }
            // HTTP/1.0 has no transfer codings: the connection closes.
            let faulty = minor == 0;
            return match chunked(rest) {
                Chunked::Whole(body, _) => Ref::Whole(Answer {
                    status,
                    body,
                    reusable: keep && cl.is_empty() && !faulty,
                }),
                Chunked::Partial => Ref::Partial,
                Chunked::Refused(e) => Ref::Refused(e),
            };
        }
        return match content_length(&cl) {
            Err(e) => Ref::Refused(e),
            Ok(Some(n)) if (rest.len() as u64) < n => Ref::Partial,
            Ok(Some(n)) => Ref::Whole(Answer {
                status,
                body: rest[..n as usize].to_vec(),
                reusable: keep,
            }),
            Ok(None) => Ref::Whole(Answer {
                status,
                body: rest.to_vec(),
                reusable: false,
            }),
        };
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, stream)) = data.split_first() else {
        return;
    };
    let head_request = pick & 1 == 1;
    let levee = answer(stream, head_request);
    let theirs = reference(stream, head_request);
    let show = || {
        format!(
            "\nto HEAD: {head_request}\ninput: {:?}\nLevee: {levee:?}\nreference: {theirs:?}",
            String::from_utf8_lossy(stream)
        )
    };
    match (&levee, &theirs) {
        // Strictness.
        (Err(_), _) => {}
        (Ok(None), Ref::Partial | Ref::Refused(_)) => {}
        (Ok(None), Ref::Whole(_)) => {
            panic!(
                "Levee waits for more, the reference's answer is whole{}",
                show()
            )
        }
        (Ok(Some(_)), Ref::Partial) => {
            panic!(
                "Levee's answer is whole, the reference waits for more{}",
                show()
            )
        }
        (Ok(Some(_)), Ref::Refused(why)) => {
            panic!(
                "Levee accepts an answer the reference refuses ({why}){}",
                show()
            )
        }
        (Ok(Some(l)), Ref::Whole(r)) => assert!(
            l.status == r.status && l.body == r.body && l.reusable == r.reusable,
            "the answers differ{}",
            show()
        ),
    }
});
