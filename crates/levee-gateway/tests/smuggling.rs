//! Request smuggling through a byte-forwarding front.
//!
//! The front is a naive load balancer on 127.0.0.1: callers take turns;
//! it frames each caller's request itself, the way nginx-like fronts do
//! (`content-length`, or chunked ended by the last chunk and a trailer
//! section that an empty line ends), forwards that request's bytes
//! unchanged over ONE shared connection to a real Levee gateway, reads
//! exactly one answer back (status line, fields, then `content-length` or
//! chunked framing) and hands it to the caller whose turn it is. Bytes it
//! did not ask for stay on the shared connection for the next caller, as
//! they would in such a front. When Levee closes the connection (after an
//! answer saying `connection: close`, or before answering) the front
//! reconnects, and resends a request that got no answer byte at all.
//!
//! An attacker sends a payload the front reads as ONE request but a
//! parser that frames it differently would read as two — the classic
//! CL.TE, TE.CL and TE.TE shapes, a trailer section ended by a line of a
//! space, a bare CR in a chunk-size line, two hosts — and a victim sends
//! an ordinary chat completion right after. Each caller must get exactly
//! one answer, its own: the victim a 200 chat completion for its model,
//! never the answer to a request the attacker hid in its payload; no
//! answer may be left over on the shared connection; and the provider
//! never sees the hidden request.

mod support;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WATCHDOG: Duration = Duration::from_secs(30);
/// How long the front waits, after the last turn, for answers nobody
/// asked for.
const LEFTOVER_WAIT: Duration = Duration::from_millis(300);
/// The most a framed body may declare (the front gives up past it).
const MAX_BODY: u64 = 1 << 20;

/// How the front frames a caller's request.
#[derive(Clone, Copy, Debug)]
struct Policy {
    /// With both, `content-length` frames the body (a front that ignores
    /// `transfer-encoding` when a length is given); else `chunked` does
    /// (RFC 9112 §6.3, nginx).
    length_first: bool,
    /// `transfer-encoding` recognised loosely: the field name trimmed of
    /// whitespace on both sides and `chunked` anywhere in its value.
    /// Otherwise the name exactly and `chunked` as the last coding.
    lenient_te: bool,
}

const RFC: Policy = Policy {
    length_first: false,
    lenient_te: false,
};
const LENGTH_FIRST: Policy = Policy {
    length_first: true,
    lenient_te: false,
};
const LENIENT_TE: Policy = Policy {
    length_first: false,
    lenient_te: true,
};

/// A connection with the bytes read from it and not yet used.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    eof: bool,
    /// Bytes read from it so far.
    read: usize,
}

impl Conn {
    fn new(s: TcpStream) -> Conn {
        Conn {
            s,
            buf: Vec::new(),
            eof: false,
            read: 0,
        }
    }

    /// Reads more; false at the end of the stream (or on an error).
    async fn fill(&mut self) -> bool {
        if self.eof {
            return false;
        }
        let mut chunk = [0u8; 16 * 1024];
        match self.s.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                self.eof = true;
                false
            }
            Ok(n) => {
                self.read += n;
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        self.buf.drain(..n).collect()
    }

    /// The bytes up to and including the first `\r\n\r\n`.
    async fn head(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                return Some(self.take(i + 4));
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// The bytes up to and including the next LF.
    async fn line(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                return Some(self.take(i + 1));
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    async fn exact(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill().await {
                return None;
            }
        }
        Some(self.take(n))
    }

    async fn rest_until_close(&mut self) -> Vec<u8> {
        while self.fill().await {}
        self.take(self.buf.len())
    }
}

/// What a head's fields say about the body after it.
#[derive(Debug, PartialEq)]
enum Body {
    None,
    Length(u64),
    Chunked,
    ToClose,
}

struct Head {
    status: u16,
    body: Body,
    close: bool,
}

/// Reads a head's framing fields as the front does.
fn read_head(head: &[u8], policy: Policy, response: bool) -> Head {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or("");
    let status = if response {
        first.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
    } else {
        0
    };
    let (mut length, mut chunked, mut close) = (None, false, false);
    for l in lines {
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let name = if policy.lenient_te { name.trim() } else { name };
        let value = value.trim().to_ascii_lowercase();
        if name.eq_ignore_ascii_case("content-length") && length.is_none() {
            length = value.parse::<u64>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = if policy.lenient_te {
                chunked || value.contains("chunked")
            } else {
                value.rsplit(',').next().map(str::trim) == Some("chunked")
            };
        } else if name.eq_ignore_ascii_case("connection") {
            close |= value.split(',').any(|t| t.trim() == "close");
        }
    }
    let body = if response && (status < 200 || status == 204 || status == 304) {
        Body::None
    } else if chunked && !(policy.length_first && length.is_some()) {
        Body::Chunked
    } else if let Some(n) = length {
        Body::Length(n)
    } else if response {
        Body::ToClose
    } else {
        Body::None
    };
    Head {
        status,
        body,
        close,
    }
}

/// A chunked body's bytes as they came: chunk-size lines read to their LF
/// with the size from the leading hex digits (whatever follows them is
/// ignored), each chunk's data and line end, then trailer lines until one
/// that is empty once its CR is dropped.
async fn chunked_raw(c: &mut Conn) -> Option<Vec<u8>> {
    let mut raw = Vec::new();
    loop {
        let line = c.line().await?;
        raw.extend_from_slice(&line);
        let digits: String = line
            .iter()
            .take_while(|b| b.is_ascii_hexdigit())
            .map(|&b| b as char)
            .collect();
        let size = u64::from_str_radix(&digits, 16).ok()?;
        if size == 0 {
            loop {
                let t = c.line().await?;
                raw.extend_from_slice(&t);
                let t = t.strip_suffix(b"\n").unwrap_or(&t);
                if t.strip_suffix(b"\r").unwrap_or(t).is_empty() {
                    return Some(raw);
                }
            }
        }
        if size > MAX_BODY {
            return None;
        }
        raw.extend_from_slice(&c.exact(size as usize).await?);
        raw.extend_from_slice(&c.line().await?);
    }
}

/// One message (head and body) from `c`, framed as the front frames it.
async fn message(c: &mut Conn, policy: Policy, response: bool) -> Option<(Vec<u8>, Head)> {
    let mut raw = c.head().await?;
    let mut head = read_head(&raw, policy, response);
    // Interim answers are not the answer.
    while response && (100..200).contains(&head.status) {
        raw = c.head().await?;
        head = read_head(&raw, policy, response);
    }
    match head.body {
        Body::None => {}
        Body::Length(n) if n > MAX_BODY => return None,
        Body::Length(n) => raw.extend_from_slice(&c.exact(n as usize).await?),
        Body::Chunked => raw.extend_from_slice(&chunked_raw(c).await?),
        Body::ToClose => {
            raw.extend_from_slice(&c.rest_until_close().await);
            head.close = true;
        }
    }
    Some((raw, head))
}

/// What the front did, for the test to check.
#[derive(Debug, Default)]
struct Log {
    /// The bytes of each caller's request forwarded, in turn order.
    forwarded: Vec<usize>,
    /// Backend connections opened.
    connections: usize,
    /// What came back on the shared connection after the last turn.
    leftover: String,
}

const FRONT_GAVE_UP: &[u8] =
    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// The front: serves `turns` callers, one after the other, in the order
/// they connect, then reports.
async fn front(listener: TcpListener, backend: SocketAddr, policy: Policy, turns: usize) -> Log {
    let mut log = Log::default();
    let mut shared: Option<Conn> = None;
    for _ in 0..turns {
        let (caller, _) = listener.accept().await.expect("accept");
        let mut caller = Conn::new(caller);
        let Some((request, _)) = message(&mut caller, policy, false).await else {
            log.forwarded.push(0);
            let _ = caller.s.write_all(FRONT_GAVE_UP).await;
            continue;
        };
        log.forwarded.push(request.len());
        let mut answer = None;
        // A connection that closed before any answer byte: once more on a
        // new one.
        for _ in 0..2 {
            if shared.is_none() {
                let s = TcpStream::connect(backend).await.expect("backend");
                log.connections += 1;
                shared = Some(Conn::new(s));
            }
            let conn = shared.as_mut().expect("connected");
            let (before, held) = (conn.read, !conn.buf.is_empty());
            let sent = conn.s.write_all(&request).await.is_ok();
            let got = if sent {
                message(conn, RFC, true).await
            } else {
                None
            };
            let untouched = !held && conn.read == before;
            match got {
                Some((bytes, head)) => {
                    if head.close {
                        shared = None;
                    }
                    answer = Some(bytes);
                    break;
                }
                None => {
                    shared = None;
                    if !untouched {
                        break;
                    }
                }
            }
        }
        let answer = answer.unwrap_or_else(|| FRONT_GAVE_UP.to_vec());
        let _ = caller.s.write_all(&answer).await;
        let _ = caller.s.shutdown().await;
    }
    if let Some(mut conn) = shared {
        let _ = tokio::time::timeout(LEFTOVER_WAIT, async { while conn.fill().await {} }).await;
        log.leftover = String::from_utf8_lossy(&conn.buf).into_owned();
    }
    log
}

/// A caller's turn: connects and sends `bytes` (the answer is read later).
async fn send(front: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(front)
        .await
        .expect("connect to the front");
    s.write_all(bytes).await.expect("write to the front");
    s
}

/// Everything the front sent a caller, to its close.
async fn answers_to(mut s: TcpStream) -> String {
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// How many answers `bytes` hold, one after the other, each framed by its
/// `content-length` or chunked coding; bytes after the last whole answer
/// that are not one count as one more.
fn count_answers(mut bytes: &[u8]) -> usize {
    let mut n = 0;
    while !bytes.is_empty() {
        n += 1;
        let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
            break;
        };
        let head = read_head(&bytes[..end + 4], RFC, true);
        bytes = &bytes[end + 4..];
        match head.body {
            Body::None => {}
            Body::Length(len) => bytes = &bytes[(len as usize).min(bytes.len())..],
            Body::Chunked => loop {
                let Some(lf) = bytes.iter().position(|&b| b == b'\n') else {
                    return n;
                };
                let size = std::str::from_utf8(&bytes[..lf])
                    .ok()
                    .and_then(|l| u64::from_str_radix(l.trim(), 16).ok())
                    .unwrap_or(0) as usize;
                bytes = &bytes[lf + 1..];
                if size == 0 {
                    bytes = bytes.strip_prefix(b"\r\n").unwrap_or(bytes);
                    break;
                }
                bytes = &bytes[(size + 2).min(bytes.len())..];
            },
            Body::ToClose => bytes = &[],
        }
    }
    n
}

fn status_of(answer: &str) -> &str {
    answer.get(9..12).unwrap_or("")
}

/// A chat completion request for `model`, framed by its length.
fn chat_for(model: &str) -> String {
    let body = format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#);
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The request attackers hide: a chat completion the provider would see
/// with the model `smuggled`.
fn hidden() -> String {
    chat_for("smuggled")
}

/// Sends `payload` as the attacker under `policy`, then a victim's chat
/// completion, and checks that each got one answer, its own — Levee
/// refuses every payload here — that nothing was left on the shared
/// connection and that the provider saw the victim's request alone.
async fn attack(name: &str, policy: Policy, payload: &[u8]) {
    let env = one("", "").await;
    watchdog(WATCHDOG, async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let at = listener.local_addr().expect("front address");
        let front = tokio::spawn(front(listener, env.gw.addr, policy, 2));
        let attacker = send(at, payload).await;
        let victim = send(at, chat_for("victim").as_bytes()).await;
        let theirs = answers_to(attacker).await;
        let mine = answers_to(victim).await;
        let log = front.await.expect("the front ran");
        let why = format!("{name}\nattacker got: {theirs}\nvictim got: {mine}\nfront: {log:?}");

        // The front read the whole payload as one request: what a parser
        // framing it differently would take for a second request went to
        // the gateway.
        assert_eq!(
            log.forwarded,
            vec![payload.len(), chat_for("victim").len()],
            "the payload is one request to the front: {why}"
        );
        // One answer each.
        assert_eq!(count_answers(theirs.as_bytes()), 1, "{why}");
        assert_eq!(count_answers(mine.as_bytes()), 1, "{why}");
        // The attacker's answer is a refusal of its own request.
        assert!(
            matches!(status_of(&theirs).as_bytes().first(), Some(b'4' | b'5')),
            "{why}"
        );
        assert!(
            !theirs.contains("\"model\":\"smuggled\"")
                && !theirs.contains("\"model\":\"victim\"")
                && !theirs.contains("\"object\":\"list\""),
            "{why}"
        );
        // The victim's is its own chat completion.
        assert_eq!(status_of(&mine), "200", "{why}");
        assert!(mine.contains("\"object\":\"chat.completion\""), "{why}");
        assert!(mine.contains("\"model\":\"victim\""), "{why}");
        // No answer left over for a next caller.
        assert!(log.leftover.is_empty(), "an answer nobody asked for: {why}");
        // The provider never saw the hidden request.
        let stats = env.mocks[0].stats();
        assert_eq!(stats.by_model.get("smuggled"), None, "{why}");
        assert_eq!(stats.by_model.get("victim"), Some(&1), "{why}");
        assert_eq!(stats.requests_total, 1, "{why}\n{stats:?}");
    })
    .await;
    env.stop().await;
}

fn post(fields: &str, body: &[u8]) -> Vec<u8> {
    let mut out =
        format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n{fields}\r\n")
            .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A chunked body that holds `inner` as one chunk.
fn one_chunk(inner: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", inner.len()).into_bytes();
    out.extend_from_slice(inner);
    out.extend_from_slice(b"\r\n0\r\n\r\n");
    out
}

/// TE.CL shape: a chunked body holding the hidden request as its data,
/// and a length that covers only the first chunk-size line, so a parser
/// that frames by the length reads the hidden request as the next one.
fn te_cl(te_field: &str) -> Vec<u8> {
    let h = hidden();
    let body = one_chunk(h.as_bytes());
    let first_line = format!("{:x}\r\n", h.len()).len();
    post(
        &format!("content-length: {first_line}\r\n{te_field}\r\n"),
        &body,
    )
}

#[tokio::test]
async fn a_trailer_section_ended_by_a_line_of_a_space_hides_no_request() {
    // As written: the front reads `GET /v1/models` as a trailer field.
    let verbatim = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"model\":\"demo\"}\r\n0\r\n \r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
    attack("trailer ended by a space", RFC, verbatim).await;
    // A line of a tab, of a lone CR, of spaces. (The hidden request has
    // no body: the front's trailer section ends at the empty line that
    // ends its head.)
    for blank in [&b"\t"[..], b"\r", b"  "] {
        let mut body = b"10\r\n{\"model\":\"demo\"}\r\n0\r\n".to_vec();
        body.extend_from_slice(blank);
        body.extend_from_slice(b"\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
        let payload = post("transfer-encoding: chunked\r\n", &body);
        attack(&format!("trailer ended by {blank:?}"), RFC, &payload).await;
    }
}

#[tokio::test]
async fn cl_te_hides_no_request() {
    // The front frames by the length; the chunked body ends early and the
    // hidden request follows it.
    let mut body = b"0\r\n\r\n".to_vec();
    body.extend_from_slice(hidden().as_bytes());
    let payload = post(
        &format!(
            "content-length: {}\r\ntransfer-encoding: chunked\r\n",
            body.len()
        ),
        &body,
    );
    attack("CL.TE", LENGTH_FIRST, &payload).await;
}

#[tokio::test]
async fn te_cl_hides_no_request() {
    attack("TE.CL", RFC, &te_cl("transfer-encoding: chunked")).await;
}

#[tokio::test]
async fn te_te_obfuscations_hide_no_request() {
    // A front that takes each of these for `chunked`, and a length for a
    // parser that does not.
    for te in [
        "Transfer-Encoding: xchunked",
        "Transfer-Encoding:  chunked",
        "X-Pad: 1\r\n Transfer-Encoding: chunked",
        "Transfer-Encoding: chunked, identity",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
        "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding:\tchunked",
        "Transfer-Encoding : chunked",
        "Transfer-Encoding: CHUNKED",
    ] {
        attack(&format!("TE.TE {te:?}"), LENIENT_TE, &te_cl(te)).await;
    }
}

#[tokio::test]
async fn two_hosts_hide_no_request() {
    // Two hosts route a request past a front's checks; the body carries a
    // hidden request too.
    let body = hidden();
    let payload = post(
        &format!("Host: evil\r\ncontent-length: {}\r\n", body.len()),
        body.as_bytes(),
    );
    attack("two hosts", RFC, &payload).await;
}

#[tokio::test]
async fn a_bare_cr_in_a_chunk_size_line_hides_no_request() {
    // The front ends chunk-size lines at LF and ignores what follows the
    // digits. A parser ending them at a bare CR reads `5;` (size 5), data
    // `0\r\nxx`, then a last chunk, a trailer field `<hex>: b`, the empty
    // line — and the hidden request. The front reads `5;\r0` (size 5),
    // data `xx\r\n0`, then a chunk of <hex> bytes holding the hidden
    // request, then the last chunk.
    let inner = format!("\r\n{}", hidden());
    let mut body = format!("5;\r0\r\nxx\r\n0\r\n{:x}: b\r\n", inner.len()).into_bytes();
    body.extend_from_slice(inner.as_bytes());
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let payload = post("transfer-encoding: chunked\r\n", &body);
    attack("bare CR in a chunk-size line", RFC, &payload).await;
}

#[tokio::test]
async fn the_front_itself_serves_ordinary_callers_in_turn() {
    // The harness: an ordinary chunked request and then the victim share
    // the backend connection, both answered, nothing left over.
    let env = one("", "").await;
    watchdog(WATCHDOG, async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let at = listener.local_addr().expect("front address");
        let front = tokio::spawn(front(listener, env.gw.addr, RFC, 3));
        let plain = post(
            "transfer-encoding: chunked\r\n",
            &one_chunk(CHAT.as_bytes()),
        );
        let a = send(at, &plain).await;
        let b = send(at, chat_for("victim").as_bytes()).await;
        let c = send(at, chat_for("third").as_bytes()).await;
        let (a, b, c) = (
            answers_to(a).await,
            answers_to(b).await,
            answers_to(c).await,
        );
        let log = front.await.expect("the front ran");
        assert_eq!(status_of(&a), "200", "{a}");
        assert!(a.contains("\"model\":\"m\""), "{a}");
        assert!(b.contains("\"model\":\"victim\""), "{b}");
        assert!(c.contains("\"model\":\"third\""), "{c}");
        assert_eq!(log.connections, 1, "one shared connection: {log:?}");
        assert!(log.leftover.is_empty(), "{log:?}");
    })
    .await;
    assert_eq!(env.mocks[0].stats().requests_total, 3);
    env.stop().await;
}
