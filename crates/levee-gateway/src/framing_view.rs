//! Where Levee's HTTP/1 code says each message in a byte stream ends, as
//! plain data: the caller-side parser (`front`) and the provider-side
//! answer parser (`h1conn`) run over a whole buffer, with no socket and no
//! gateway behind them. For differential fuzzing against a reference
//! parser and for tests that compare framings; not a parser to build on.

use crate::http::h1wire::{decode_chunked, Kind, Step};
use bytes::BytesMut;

/// One request as the caller side frames it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRequest {
    pub method: String,
    pub target: Vec<u8>,
    /// The body as decoded (chunked bodies without their framing).
    pub body: Vec<u8>,
    pub chunked: bool,
    /// The connection stays open after this request.
    pub keep_alive: bool,
}

/// How a stream of bytes ended for the parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// A message was refused with this status; the connection closes.
    Refused(u16),
    /// The last message is incomplete: more bytes were awaited.
    Partial,
    /// Every message is complete and nothing is left.
    Clean,
    /// A message asked to close the connection; this many bytes after it
    /// are never read.
    Closed(usize),
}

/// The requests `input` holds on one connection, in order, and how the
/// stream ended, under the given head limit.
pub fn requests(input: &[u8], max_header_bytes: usize) -> (Vec<SeenRequest>, End) {
    let mut buf = BytesMut::from(input);
    let mut seen = Vec::new();
    loop {
        if buf.is_empty() {
            return (seen, End::Clean);
        }
        let head = match crate::http::front::parse_head(&mut buf, max_header_bytes) {
            Ok(Some(head)) => head,
            Ok(None) if buf.len() > max_header_bytes => {
                return (seen, End::Refused(431));
            }
            Ok(None) => return (seen, End::Partial),
            Err((refusal, _)) => return (seen, End::Refused(refusal.row().status.as_u16())),
        };
        let (kind, keep_alive, method, target) = head.view();
        let mut body = Vec::new();
        let chunked = matches!(kind, Kind::Chunked(_));
        match kind {
            Kind::Length(n) => {
                if (buf.len() as u64) < n {
                    return (seen, End::Partial);
                }
                body.extend_from_slice(&buf.split_to(n as usize));
            }
            Kind::Chunked(mut state) => loop {
                match decode_chunked(&mut state, &mut buf) {
                    Ok(Step::Data(d)) => body.extend_from_slice(&d),
                    Ok(Step::Done) => break,
                    Ok(Step::More) => return (seen, End::Partial),
                    Err(_) => return (seen, End::Refused(400)),
                }
            },
            Kind::Done | Kind::Eof => {}
        }
        seen.push(SeenRequest {
            method,
            target,
            body,
            chunked,
            keep_alive,
        });
        if !keep_alive {
            return (seen, End::Closed(buf.len()));
        }
    }
}

/// One answer as the provider side frames it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenAnswer {
    pub status: u16,
    pub body: Vec<u8>,
    /// The connection could carry another exchange after this answer.
    pub reusable: bool,
}

/// The answer `input` holds for a request (`head_request`: to `HEAD`),
/// interim heads skipped as `h1conn` skips them; `Err` when the answer is
/// refused as misframed, `Ok(None)` when it is incomplete. An answer
/// framed by the close takes every byte left.
pub fn answer(input: &[u8], head_request: bool) -> Result<Option<SeenAnswer>, &'static str> {
    let mut buf = BytesMut::from(input);
    let mut interim = 0;
    loop {
        let Some(head) = crate::upstream::h1conn::parse_head_view(&mut buf, head_request)? else {
            return Ok(None);
        };
        let (status, informational, kind, keep_alive) = head;
        if informational {
            interim += 1;
            if interim > crate::upstream::h1conn::MAX_INTERIM {
                return Err("too many interim (1xx) answers");
            }
            continue;
        }
        let mut body = Vec::new();
        let mut reusable = keep_alive;
        match kind {
            Kind::Length(n) => {
                if (buf.len() as u64) < n {
                    return Ok(None);
                }
                body.extend_from_slice(&buf.split_to(n as usize));
            }
            Kind::Chunked(mut state) => loop {
                match decode_chunked(&mut state, &mut buf)? {
                    Step::Data(d) => body.extend_from_slice(&d),
                    Step::Done => break,
                    Step::More => return Ok(None),
                }
            },
            Kind::Eof => {
                body.extend_from_slice(&buf.split());
                reusable = false;
            }
            Kind::Done => {}
        }
        return Ok(Some(SeenAnswer {
            status,
            body,
            reusable,
        }));
    }
}
