//! HTTP/1.1 to providers, driven inside the attempt's own task.
//!
//! hyper's HTTP/1 client runs every connection as a task of its own: an
//! attempt hands its request to that task through a channel, the task
//! writes it, reads the answer and hands the head back through a oneshot,
//! then the body through another channel — two or more task wake-ups per
//! request that a proxy like nginx does not have, and per open stream the
//! task, its dispatch channel and an 8 KiB write buffer. Here the attempt
//! writes its request and parses the answer's head itself (httparse, the
//! parser hyper uses), and the response body reads the socket directly when
//! the relay polls it. When the body's last byte is read the connection goes
//! back to its pool from inside that poll; a body dropped before its end
//! closes the connection (its remaining bytes would otherwise be read as
//! the next answer).
//!
//! What it speaks: `POST` (any method) with a `content-length` body; answers
//! framed by `content-length`, `transfer-encoding: chunked` (extensions and
//! trailers read and dropped) or the connection's close; `1xx` heads
//! skipped (at most 8); keep-alive unless the provider says `connection: close` or
//! answers HTTP/1.0 without `keep-alive`. It does not pipeline, upgrade or
//! send `expect: 100-continue`. Both `transfer-encoding` and
//! `content-length` on one answer: `transfer-encoding` frames it, and the
//! connection is not reused (the pair is how a response is smuggled). The
//! framing and `connection` fields, and the fields `connection` names, are
//! read here and left out of the answer's header map: they describe this
//! connection, and a proxy never passes them on.

use crate::http::h1wire::{
    decode_chunked, header_map, is_listed, BadField, Framing, InBuf, Kind, Span, Spans, Step,
    MAX_HEADERS,
};
use crate::http::outbound::Outbound;
use crate::http::rawfields::{self, RawFields};
use crate::http::respond::is_hop_by_hop;
use crate::upstream::transport::Conn;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode, Version};
use http_body::{Frame, SizeHint};
use hyper_util::rt::TokioIo;
use levee_wire::headers::X_TIMEOUT_MS;
use std::io;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{ready, Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// Most interim (`1xx`) heads before an answer's own.
pub(crate) const MAX_INTERIM: usize = 8;

/// First read buffer of a connection: answers arrive in small pieces (a
/// chat completion is ~600 bytes, an SSE event ~300).
const READ_BUF: usize = 2048;
/// Largest read, once reads fill the buffer.
const MAX_READ_BUF: usize = 16 * 1024;
/// Longest response head accepted (a provider's is 1-2 KiB).
const MAX_HEAD: usize = 64 * 1024;
/// Request bodies up to this size are copied behind the head and written
/// with it in one system call; larger ones are written after it.
const INLINE_BODY: usize = 16 * 1024;

/// Where a connection goes when an answer on it is over and it can take
/// the next request: its provider's pool.
pub(crate) trait Home: Send + Sync {
    fn checkin(&self, conn: H1Conn);
}

/// An HTTP/1.1 connection to a provider, idle or carrying one exchange.
/// Boxed: the TLS state inside is large, and a connection moves between the
/// pool, the attempt and the body on every request.
pub(crate) struct H1Conn(Box<Inner>);

struct Inner {
    io: TokioIo<Conn>,
    read: InBuf,
    /// Its place among the provider's `max_connections`, given back when
    /// the connection closes.
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum H1Error {
    #[error("provider connection: {0}")]
    Io(#[from] io::Error),
    #[error("the provider closed the connection before its answer was complete")]
    Closed,
    #[error("the provider's response head is over {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("the provider's response head is malformed: {0}")]
    Parse(#[from] httparse::Error),
    #[error("the provider's answer is framed wrong: {0}")]
    Framing(&'static str),
}

/// A failed exchange, and whether none of the request reached the
/// connection (it may then go on another connection unchanged).
#[derive(Debug)]
pub(crate) struct Failed {
    pub error: H1Error,
    pub unsent: bool,
}

impl From<H1Error> for Failed {
    fn from(error: H1Error) -> Self {
        Failed {
            error,
            unsent: false,
        }
    }
}

impl H1Conn {
    pub(crate) fn new(io: Conn) -> Self {
        H1Conn(Box::new(Inner {
            io: TokioIo::new(io),
            read: InBuf::new(READ_BUF, MAX_READ_BUF),
            _slot: None,
        }))
    }

    /// The connection, holding `slot` (one of the provider's
    /// `max_connections`) for as long as it is open.
    pub(crate) fn holding(mut self, slot: tokio::sync::OwnedSemaphorePermit) -> Self {
        self.0._slot = Some(slot);
        self
    }

    /// Whether an idle connection can take a request: nothing arrived on it
    /// while it was idle (the provider closing it, or stray bytes). Polls
    /// the socket once without waiting; tokio keeps the socket's readiness
    /// from its last event, so this makes a system call only when something
    /// did arrive.
    pub(crate) fn is_open(&mut self) -> bool {
        if !self.0.read.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        Pin::new(&mut self.0.io)
            .poll_read(&mut cx, &mut probe)
            .is_pending()
    }

    /// Writes `req` (its `host` header defaulting to `host`) and reads the
    /// answer's head; the body reads on from this connection and returns it
    /// to `home` at its end.
    pub(crate) async fn send<B: AsRef<[u8]>>(
        mut self,
        req: &Outbound<B>,
        host: &HeaderValue,
        home: Weak<dyn Home>,
    ) -> Result<Response<H1Body>, Failed> {
        let answered_early = self.write_request(req, host).await?;
        let no_body = req.method == http::Method::HEAD;
        let mut interim = 0;
        let head = loop {
            let head = self.0.read_head(no_body).await?;
            if !head.informational {
                break head;
            }
            // An endless run of `1xx` heads would hold the attempt with
            // bytes arriving and no answer.
            interim += 1;
            if interim > MAX_INTERIM {
                return Err(H1Error::Framing("too many interim (1xx) answers").into());
            }
        };
        let mut body = H1Body {
            conn: Some(self),
            kind: head.framing,
            // The rest of an interrupted request would be read as the next
            // request: the connection ends with this answer.
            keep_alive: head.keep_alive && !answered_early,
            home,
            raw: head.raw,
        };
        if matches!(body.kind, Kind::Length(0) | Kind::Done) {
            body.finish();
        }
        let mut resp = Response::new(body);
        *resp.status_mut() = head.status;
        *resp.version_mut() = head.version;
        *resp.headers_mut() = head.headers;
        Ok(resp)
    }

    /// Writes the request; `Ok(true)` when the provider began to answer
    /// before all of it was written (the rest is then not sent).
    async fn write_request<B: AsRef<[u8]>>(
        &mut self,
        req: &Outbound<B>,
        host: &HeaderValue,
    ) -> Result<bool, Failed> {
        let body = req.body.as_ref();
        let inline = body.len() <= INLINE_BODY;
        let mut out = Vec::with_capacity(256 + if inline { body.len() } else { 0 });
        encode_head(&mut out, req, host);
        if inline {
            out.extend_from_slice(body);
        }
        let mut sent = false;
        let mut written = self.0.write_watching(&out, &mut sent).await;
        if matches!(written, Ok(false)) && !inline {
            written = self.0.write_watching(body, &mut sent).await;
        }
        if matches!(written, Ok(false)) {
            written = self.0.io.flush().await.map(|()| false);
        }
        written.map_err(|e| Failed {
            error: H1Error::Io(e),
            unsent: !sent,
        })
    }
}

impl Inner {
    /// Writes all of `bytes` while watching for an answer; `sent` turns
    /// true once any byte is taken. A provider may answer a request it
    /// refuses (413, 400) before reading all of its body and then read no
    /// more: a write that only waited for the socket would wait for the
    /// deadline and answer the caller 504 instead of the provider's 413.
    /// Returns `Ok(true)` when answer bytes arrived first (they stay in the
    /// buffer for `read_head`).
    async fn write_watching(&mut self, mut bytes: &[u8], sent: &mut bool) -> io::Result<bool> {
        // The provider closed its side without answering: only the write
        // can tell what happens next (a reset, or the rest being read).
        let mut read_closed = false;
        std::future::poll_fn(|cx| {
            while !bytes.is_empty() {
                match Pin::new(&mut self.io).poll_write(cx, bytes) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => {
                        *sent = true;
                        bytes = &bytes[n..];
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending if read_closed => return Poll::Pending,
                    Poll::Pending => {
                        return match self.poll_fill(cx) {
                            // The pending write has registered the waker.
                            Poll::Ready(Ok(0)) => {
                                read_closed = true;
                                Poll::Pending
                            }
                            Poll::Ready(Ok(_)) => Poll::Ready(Ok(true)),
                            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                            Poll::Pending => Poll::Pending,
                        };
                    }
                }
            }
            Poll::Ready(Ok(false))
        })
        .await
    }
}

/// The request line and header section, with `content-length` for the
/// body. Framing and hop-by-hop fields in `req` are left out: this
/// connection's own framing is the only one sent.
fn encode_head<B: AsRef<[u8]>>(out: &mut Vec<u8>, req: &Outbound<B>, host: &HeaderValue) {
    let target = req
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !req.fields.contains(&header::HOST) {
        line(out, header::HOST.as_str(), host.as_bytes());
    }
    for (name, value) in req.fields.iter() {
        if !is_hop_by_hop(name.as_str()) {
            line(out, name.as_str(), value.as_bytes());
        }
    }
    let mut digits = itoa::Buffer::new();
    if let Some(ms) = req.timeout_ms {
        line(out, X_TIMEOUT_MS.as_str(), digits.format(ms).as_bytes());
    }
    let len = digits.format(req.body.as_ref().len());
    line(out, header::CONTENT_LENGTH.as_str(), len.as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn line(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A parsed response head.
struct Head {
    status: StatusCode,
    version: Version,
    /// The fields Levee reads.
    headers: HeaderMap,
    /// The fields it only relays.
    raw: RawFields,
    framing: Kind,
    keep_alive: bool,
    /// A `1xx` head: another head follows.
    informational: bool,
}

impl Inner {
    /// Reads more bytes into the buffer; `Ok(0)` at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.read.poll_fill(&mut self.io, cx)
    }

    async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }

    /// Reads until a whole head is buffered and parses it (the head's bytes
    /// leave the buffer; header values share them).
    async fn read_head(&mut self, no_body: bool) -> Result<Head, H1Error> {
        loop {
            if !self.read.buf.is_empty() {
                if let Some(head) = parse_head(&mut self.read.buf, no_body)? {
                    return Ok(head);
                }
                if self.read.buf.len() > MAX_HEAD {
                    return Err(H1Error::HeadTooLarge);
                }
            }
            if self.fill().await? == 0 {
                return Err(H1Error::Closed);
            }
        }
    }
}

/// [`parse_head`]'s status, whether it is interim, the body's framing and
/// whether the connection can be reused, for a framing comparison.
pub(crate) fn parse_head_view(
    buf: &mut BytesMut,
    no_body: bool,
) -> Result<Option<(u16, bool, Kind, bool)>, &'static str> {
    match parse_head(buf, no_body) {
        Ok(Some(h)) => Ok(Some((
            h.status.as_u16(),
            h.informational,
            h.framing,
            h.keep_alive,
        ))),
        Ok(None) => Ok(None),
        Err(H1Error::Framing(why)) => Err(why),
        Err(_) => Err("invalid answer head"),
    }
}

/// Parses one response head from the front of `buf`: `None` while it is
/// incomplete.
fn parse_head(buf: &mut BytesMut, no_body: bool) -> Result<Option<Head>, H1Error> {
    // Left uninitialised: httparse writes only the slots it fills (zeroed,
    // they would be 3.2 KiB written for every answer).
    let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut spans = Spans::new();
    let mut resp = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots)?
    {
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(n) if n > MAX_HEAD => return Err(H1Error::HeadTooLarge),
        httparse::Status::Complete(n) => n,
    };
    let code = resp.code.unwrap_or(0);
    let version = if resp.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| ((s.as_ptr() as usize - base) as u32, s.len() as u32);
    let mut framing = Framing::default();
    // Field names the provider's `connection` field lists: hop-by-hop, so
    // never relayed to the caller. Rare: no allocation unless there are some.
    let mut listed: Vec<(u32, u32)> = Vec::new();
    // Building a header map costs ~700 instructions a field; the fields
    // about this connection are read here and left out of it, and the
    // fields Levee never reads are relayed as bytes.
    let mut raw = RawFields::builder();
    for h in resp.headers.iter() {
        if crate::http::fieldname::same_name(h.name.as_bytes(), b"connection") {
            listed.extend(crate::http::h1wire::listed_names(h.value).map(at));
        }
        if framing.see(h.name, h.value).map_err(H1Error::Framing)? {
            continue;
        }
        if rawfields::levee_reads(h.name.as_bytes()) {
            spans.push(Span {
                name: at(h.name.as_bytes()),
                value: at(h.value),
            });
        } else {
            raw.push(buf, h.name.as_bytes(), h.value);
        }
    }
    if code == 101 {
        return Err(H1Error::Framing(
            "101 Switching Protocols was not asked for",
        ));
    }
    let head = buf.split_to(len).freeze();
    let status =
        StatusCode::from_u16(code).map_err(|_| H1Error::Framing("status code out of range"))?;
    // Room for one field more: a map that grows moves every field (~1,000
    // instructions). Levee's own fields on a relayed answer travel beside
    // the map; what it adds to the map is rare (`x-levee-skipped`) or takes
    // a field's place (`x-levee-upstream-request-id` for `x-request-id`).
    let headers = header_map(&head, &spans, &listed, 0, spans.len() + 1).map_err(bad_field)?;
    let mut raw = raw.finish(&head);
    if !listed.is_empty() {
        raw = raw.without(|n| is_listed(&head, &listed, n));
    }
    let informational = (100..200).contains(&code);
    let (kind, keep_alive) = framing.decide(version, no_body || code == 204 || code == 304);
    Ok(Some(Head {
        status,
        version,
        headers,
        raw,
        framing: kind,
        keep_alive,
        informational,
    }))
}

fn bad_field(e: BadField) -> H1Error {
    H1Error::Framing(match e {
        BadField::Name => "invalid header name",
        BadField::Value => "invalid header value",
    })
}

/// An answer's body, read from the connection as it is polled.
pub struct H1Body {
    /// `None` once the body is over.
    conn: Option<H1Conn>,
    kind: Kind,
    keep_alive: bool,
    home: Weak<dyn Home>,
    /// The head's fields Levee does not read, relayed as they came.
    raw: RawFields,
}

impl H1Body {
    /// Takes the head's fields relayed as bytes, leaving none.
    pub(crate) fn take_raw(&mut self) -> RawFields {
        std::mem::take(&mut self.raw)
    }

    /// The body is over: the connection goes home if it can take another
    /// request (nothing unread on it), else it is closed.
    fn finish(&mut self) {
        self.kind = Kind::Done;
        if let Some(conn) = self.conn.take() {
            if self.keep_alive && conn.0.read.buf.is_empty() {
                if let Some(home) = self.home.upgrade() {
                    home.checkin(conn);
                }
            }
        }
    }

    /// The body broke off: the connection is closed.
    fn fail(&mut self, e: H1Error) -> Poll<Option<Result<Frame<Bytes>, H1Error>>> {
        self.conn = None;
        self.kind = Kind::Done;
        Poll::Ready(Some(Err(e)))
    }

    /// Decodes what the buffer holds.
    fn step(&mut self) -> Result<Step, H1Error> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(Step::Done);
        };
        let buf = &mut conn.0.read.buf;
        match &mut self.kind {
            Kind::Done => Ok(Step::Done),
            Kind::Eof if buf.is_empty() => Ok(Step::More),
            Kind::Eof => Ok(Step::Data(buf.split().freeze())),
            Kind::Length(_) if buf.is_empty() => Ok(Step::More),
            Kind::Length(left) => {
                let take = (*left).min(buf.len() as u64);
                *left -= take;
                let data = buf.split_to(take as usize).freeze();
                if *left == 0 {
                    self.finish();
                }
                Ok(Step::Data(data))
            }
            Kind::Chunked(state) => {
                let step = decode_chunked(state, buf).map_err(H1Error::Framing)?;
                if matches!(step, Step::Done) {
                    self.finish();
                }
                Ok(step)
            }
        }
    }
}

impl http_body::Body for H1Body {
    type Data = Bytes;
    type Error = H1Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, H1Error>>> {
        let this = self.get_mut();
        loop {
            match this.step() {
                Err(e) => return this.fail(e),
                Ok(Step::Data(d)) => return Poll::Ready(Some(Ok(Frame::data(d)))),
                Ok(Step::Done) => return Poll::Ready(None),
                Ok(Step::More) => {}
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match ready!(conn.0.poll_fill(cx)) {
                // The end of an answer framed by the close (never kept alive).
                Ok(0) if this.kind == Kind::Eof => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(H1Error::Closed),
                Ok(_) => {}
                Err(e) => return this.fail(H1Error::Io(e)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.kind == Kind::Done
    }

    fn size_hint(&self) -> SizeHint {
        match self.kind {
            Kind::Length(n) => SizeHint::with_exact(n),
            Kind::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderName;
    use http_body_util::BodyExt;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// A pool of one provider's idle connections, as the gateway's is.
    #[derive(Default)]
    struct Shelf(Mutex<Vec<H1Conn>>);

    impl Home for Shelf {
        fn checkin(&self, conn: H1Conn) {
            self.0.lock().unwrap().push(conn);
        }
    }

    impl Shelf {
        fn len(&self) -> usize {
            self.0.lock().unwrap().len()
        }
    }

    const REQUEST: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nhost: mock.test\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";

    fn request() -> Outbound<Bytes> {
        let mut req = Outbound::post(
            "http://mock.test/v1/chat/completions".parse().unwrap(),
            Bytes::from_static(b"{}"),
        );
        req.fields.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        req
    }

    /// A connection over a pipe that carries at most `window` bytes per
    /// read, and the provider's end of it.
    fn pipe(window: usize) -> (H1Conn, DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(window);
        (H1Conn::new(Conn::Memory(TokioIo::new(ours))), theirs)
    }

    /// Reads one whole request (the fixed one of [`request`]) off the
    /// provider's end.
    async fn read_request(theirs: &mut DuplexStream) -> Vec<u8> {
        let mut got = vec![0; REQUEST.len()];
        theirs.read_exact(&mut got).await.unwrap();
        got
    }

    /// Fails a test that hangs (a body read waiting for bytes that never
    /// come) instead of letting it wait forever; nothing here takes long.
    const WATCHDOG: std::time::Duration = std::time::Duration::from_secs(20);

    /// One exchange: the provider answers `answer` (then closes when
    /// `close`); returns the answer's status, headers and body, and what the
    /// connection's home holds after the body is read.
    async fn exchange(
        window: usize,
        answer: &[u8],
        close: bool,
    ) -> (Result<(Response<()>, Bytes), String>, Arc<Shelf>) {
        tokio::time::timeout(WATCHDOG, exchange_unguarded(window, answer, close))
            .await
            .expect("the exchange hung")
    }

    async fn exchange_unguarded(
        window: usize,
        answer: &[u8],
        close: bool,
    ) -> (Result<(Response<()>, Bytes), String>, Arc<Shelf>) {
        let (conn, mut theirs) = pipe(window);
        let answer = answer.to_vec();
        let provider = tokio::spawn(async move {
            let got = read_request(&mut theirs).await;
            // A connection that gives up part way closes its end.
            let _ = theirs.write_all(&answer).await;
            if close {
                drop(theirs);
                None
            } else {
                Some((theirs, got))
            }
        });
        let shelf = Arc::new(Shelf::default());
        let home: Weak<dyn Home> = Arc::downgrade(&shelf) as Weak<dyn Home>;
        let host = HeaderValue::from_static("mock.test");
        let result = match conn.send(&request(), &host, home).await {
            Err(f) => Err(f.error.to_string()),
            Ok(resp) => {
                let (parts, body) = resp.into_parts();
                match body.collect().await {
                    Ok(b) => Ok((Response::from_parts(parts, ()), b.to_bytes())),
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        if let Some((_theirs, got)) = provider.await.unwrap() {
            assert_eq!(got, REQUEST);
        }
        (result, shelf)
    }

    /// Every pipe window: 1 byte per read exercises every split of the
    /// answer between reads.
    const WINDOWS: [usize; 4] = [1, 3, 64, 4096];

    #[tokio::test]
    async fn the_request_is_written_as_http_1_1_with_its_length() {
        let (conn, mut theirs) = pipe(4096);
        let shelf = Arc::new(Shelf::default());
        let home = Arc::downgrade(&shelf) as Weak<dyn Home>;
        let host = HeaderValue::from_static("mock.test");
        let mut req = request();
        // Framing and hop-by-hop fields from the request are never sent.
        req.fields
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("99"));
        req.fields
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        req.timeout_ms = Some(2500);
        let sending = tokio::spawn(async move {
            conn.send(&req, &host, home)
                .await
                .map(|_| ())
                .map_err(|f| f.error.to_string())
        });
        let want = String::from_utf8_lossy(REQUEST).replace(
            "content-length: 2",
            "x-timeout-ms: 2500\r\ncontent-length: 2",
        );
        let mut got = vec![0; want.len()];
        theirs.read_exact(&mut got).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want);
        theirs
            .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .await
            .unwrap();
        sending.await.unwrap().unwrap();
        assert_eq!(
            shelf.len(),
            1,
            "a 204 has no body: the connection is free at once"
        );
    }

    #[tokio::test]
    async fn a_content_length_answer_is_read_whole_and_the_connection_goes_home() {
        for w in WINDOWS {
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nx-request-id: r1\r\n\r\nhello";
            let (r, shelf) = exchange(w, answer, false).await;
            let (head, body) = r.unwrap();
            assert_eq!(head.status(), 200);
            assert_eq!(head.headers()["x-request-id"], "r1");
            // The connection's own fields are read, not passed on.
            assert_eq!(head.headers().len(), 1, "{:?}", head.headers());
            assert_eq!(body, "hello", "window {w}");
            assert_eq!(shelf.len(), 1, "window {w}");
        }
    }

    #[tokio::test]
    async fn a_chunked_answer_is_decoded_at_every_split() {
        for w in WINDOWS {
            let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\nA \r\n, world!!!\r\n0\r\nx-trailer: t\r\n\r\n";
            let (r, shelf) = exchange(w, answer, false).await;
            assert_eq!(r.unwrap().1, "hello, world!!!", "window {w}");
            assert_eq!(shelf.len(), 1, "window {w}");
        }
    }

    #[tokio::test]
    async fn an_answer_framed_by_close_is_read_to_the_end_and_not_reused() {
        for w in WINDOWS {
            let (r, shelf) = exchange(w, b"HTTP/1.1 200 OK\r\n\r\nuntil the end", true).await;
            assert_eq!(r.unwrap().1, "until the end", "window {w}");
            assert_eq!(shelf.len(), 0, "window {w}");
        }
    }

    #[tokio::test]
    async fn a_connection_the_provider_will_close_is_not_reused() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"[..],
            b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
            // Both framings: chunked wins, the connection is closed after.
            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        ] {
            let (r, shelf) = exchange(64, answer, false).await;
            assert_eq!(r.unwrap().1, "ok");
            assert_eq!(shelf.len(), 0, "{}", String::from_utf8_lossy(answer));
        }
        let (r, shelf) = exchange(
            64,
            b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok",
            false,
        )
        .await;
        assert_eq!(r.unwrap().1, "ok");
        assert_eq!(shelf.len(), 1, "HTTP/1.0 asking to keep the connection");
        // HTTP/1.0 has no transfer codings: such an answer is read, and its
        // connection closed, whatever it asks.
        let (r, shelf) = exchange(
            64,
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
            false,
        )
        .await;
        assert_eq!(r.unwrap().1, "hi");
        assert_eq!(shelf.len(), 0, "reused after an HTTP/1.0 chunked answer");
    }

    #[tokio::test]
    async fn interim_heads_are_skipped() {
        let (r, shelf) = exchange(
            3,
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok",
            false,
        )
        .await;
        let (head, body) = r.unwrap();
        assert_eq!((head.status().as_u16(), &body[..]), (201, &b"ok"[..]));
        assert!(head.headers().get("link").is_none());
        assert_eq!(shelf.len(), 1);
    }

    #[tokio::test]
    async fn interim_heads_are_bounded() {
        let interim = b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n";
        let last = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let answer = |n: usize| [interim.repeat(n), last.to_vec()].concat();
        let (r, _) = exchange(64, &answer(MAX_INTERIM), false).await;
        assert_eq!(
            r.unwrap().1,
            "ok",
            "{MAX_INTERIM} interim heads are skipped"
        );
        let (r, shelf) = exchange(64, &answer(MAX_INTERIM + 1), false).await;
        let err = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("interim"), "{err}");
        assert_eq!(
            shelf.len(),
            0,
            "a connection that sent too many is not reused"
        );
    }

    /// The fields relayed as bytes are checked only by httparse: what it
    /// accepts in a name or a value, byte by byte, is written to the caller
    /// as lines a parser reads back as fields a header map accepts.
    #[test]
    fn a_field_relayed_as_bytes_is_one_a_header_map_would_take() {
        for b in 0..=255u8 {
            let mut name = b"x-f".to_vec();
            name.push(b);
            let mut value = b"a".to_vec();
            value.push(b);
            value.push(b'z');
            for (n, v) in [(&name, &b"v".to_vec()), (&b"x-f".to_vec(), &value)] {
                let mut text = b"HTTP/1.1 200 OK\r\n".to_vec();
                for part in [&n[..], b": ", &v[..], b"\r\ncontent-length: 0\r\n\r\n"] {
                    text.extend_from_slice(part);
                }
                let Ok(Some(head)) = parse_head(&mut BytesMut::from(&text[..]), false) else {
                    continue;
                };
                // As the caller reads the lines written for it.
                let mut wire = b"HTTP/1.1 200 OK\r\n".to_vec();
                wire.extend_from_slice(head.raw.lines());
                wire.extend_from_slice(b"\r\n");
                let mut slots = [httparse::EMPTY_HEADER; 4];
                let mut read = httparse::Response::new(&mut slots);
                let parsed = read.parse(&wire);
                assert!(
                    matches!(parsed, Ok(httparse::Status::Complete(_))),
                    "byte {b:#04x}: {:?} read back as {parsed:?}",
                    String::from_utf8_lossy(&wire)
                );
                assert_eq!(read.headers.len(), 1, "byte {b:#04x}: {:?}", head.raw);
                for h in read.headers.iter() {
                    assert!(
                        HeaderName::from_bytes(h.name.as_bytes()).is_ok()
                            && HeaderValue::from_bytes(h.value).is_ok(),
                        "byte {b:#04x}: httparse took {:?}: {:?}",
                        h.name,
                        h.value
                    );
                }
            }
        }
    }

    #[test]
    fn an_answers_map_has_room_for_a_field_more() {
        for n in 0..40 {
            // Fields Levee reads: the map holds only those.
            let fields: String = (0..n).map(|i| format!("x-ratelimit-f{i}: v\r\n")).collect();
            let text = format!("HTTP/1.1 200 OK\r\n{fields}content-length: 0\r\n\r\n");
            let mut buf = BytesMut::from(text.as_bytes());
            let head = parse_head(&mut buf, false)
                .expect("a valid head")
                .expect("a whole head");
            assert_eq!(head.headers.len(), n);
            assert!(
                head.headers.capacity() > n,
                "{n} fields: room for {} in all",
                head.headers.capacity()
            );
        }
    }

    #[tokio::test]
    async fn fields_the_providers_connection_field_names_are_not_relayed() {
        let answer = b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Hop, x-other\r\nx-hop: 1\r\nX-Other: 2\r\nx-request-id: r1\r\ncontent-length: 2\r\n\r\nok";
        let (r, _) = exchange(64, answer, false).await;
        let (head, _) = r.unwrap();
        let names: Vec<&str> = head.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-request-id"]);
    }

    #[tokio::test]
    async fn misframed_answers_are_errors_and_never_reused() {
        let cases: [(&[u8], &str); 8] = [
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",
                "two different",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: -2\r\n\r\nok",
                "invalid content-length",
            ),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
                "invalid content-length",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
                "invalid chunk size",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n11111111111111111\r\n",
                "invalid chunk size",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokX\r\n",
                "longer than its size",
            ),
            (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "101"),
            (b"HTTP/1.1 2000 OK\r\n\r\n", "malformed"),
        ];
        for (answer, says) in cases {
            let (r, shelf) = exchange(64, answer, false).await;
            let e = r.expect_err(&String::from_utf8_lossy(answer));
            assert!(e.contains(says), "{e}");
            assert_eq!(shelf.len(), 0);
        }
    }

    #[tokio::test]
    async fn a_body_cut_short_is_an_error() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab",
            b"HTTP/1.1 200 OK\r\ncontent-le",
        ] {
            let (r, shelf) = exchange(64, answer, true).await;
            let e = r.expect_err("cut");
            assert!(e.contains("closed the connection"), "{e}");
            assert_eq!(shelf.len(), 0);
        }
    }

    #[tokio::test]
    async fn a_head_over_the_limit_is_refused() {
        let mut answer = b"HTTP/1.1 200 OK\r\n".to_vec();
        let filler = format!("x-filler: {}\r\n", "f".repeat(1000));
        while answer.len() <= MAX_HEAD {
            answer.extend_from_slice(filler.as_bytes());
        }
        // Fewer lines than MAX_HEADERS allows: the byte limit refuses it.
        let (conn, mut theirs) = pipe(4096);
        tokio::spawn(async move {
            read_request(&mut theirs).await;
            let _ = theirs.write_all(&answer).await;
            // Hold the connection open: the limit, not the close, must end it.
            std::future::pending::<()>().await;
        });
        let shelf = Arc::new(Shelf::default());
        let host = HeaderValue::from_static("mock.test");
        let e = conn
            .send(&request(), &host, Arc::downgrade(&shelf) as Weak<dyn Home>)
            .await
            .err()
            .expect("refused");
        assert!(matches!(e.error, H1Error::HeadTooLarge), "{}", e.error);
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_closes_the_connection() {
        let (conn, mut theirs) = pipe(4096);
        let shelf = Arc::new(Shelf::default());
        let host = HeaderValue::from_static("mock.test");
        let sending = {
            let home = Arc::downgrade(&shelf) as Weak<dyn Home>;
            tokio::spawn(async move {
                conn.send(&request(), &host, home)
                    .await
                    .map_err(|f| f.error.to_string())
            })
        };
        read_request(&mut theirs).await;
        theirs
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
            .await
            .unwrap();
        let resp = sending.await.unwrap().unwrap();
        drop(resp);
        assert_eq!(shelf.len(), 0);
        let mut rest = Vec::new();
        theirs.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "the provider sees the connection closed");
    }

    #[tokio::test]
    async fn an_idle_connection_is_open_until_the_provider_closes_it_or_writes() {
        let (mut conn, theirs) = pipe(64);
        assert!(conn.is_open());
        drop(theirs);
        assert!(!conn.is_open(), "closed by the provider");
        let (mut conn, mut theirs) = pipe(64);
        theirs
            .write_all(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
            .await
            .unwrap();
        assert!(!conn.is_open(), "an answer nobody asked for");
    }

    #[tokio::test]
    async fn a_request_the_connection_took_none_of_is_unsent() {
        let (conn, theirs) = pipe(64);
        drop(theirs);
        let shelf = Arc::new(Shelf::default());
        let host = HeaderValue::from_static("mock.test");
        let f = conn
            .send(&request(), &host, Arc::downgrade(&shelf) as Weak<dyn Home>)
            .await
            .err()
            .expect("the provider is gone");
        assert!(f.unsent, "{}", f.error);
    }

    /// A request whose body is larger than the inline limit (written after
    /// its head) and larger than the pipe takes without being read.
    fn large_request() -> Outbound<Bytes> {
        let mut req = request();
        req.body = Bytes::from(vec![b'x'; 4 * INLINE_BODY]);
        req
    }

    /// Reads the provider's end up to the end of the request's head.
    async fn read_head_only(theirs: &mut DuplexStream) -> Vec<u8> {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            theirs.read_exact(&mut byte).await.unwrap();
            got.push(byte[0]);
        }
        got
    }

    #[tokio::test]
    async fn a_large_body_is_written_whole_and_the_connection_goes_home() {
        let (conn, mut theirs) = pipe(64);
        let provider = tokio::spawn(async move {
            let head = read_head_only(&mut theirs).await;
            let mut body = vec![0; 4 * INLINE_BODY];
            theirs.read_exact(&mut body).await.unwrap();
            theirs
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            (theirs, head, body)
        });
        let shelf = Arc::new(Shelf::default());
        let host = HeaderValue::from_static("mock.test");
        let home = Arc::downgrade(&shelf) as Weak<dyn Home>;
        let exchange = async {
            let resp = conn.send(&large_request(), &host, home).await.unwrap();
            resp.into_body().collect().await.unwrap().to_bytes()
        };
        let got = tokio::time::timeout(WATCHDOG, exchange)
            .await
            .expect("the exchange hung");
        assert_eq!(&got[..], b"ok");
        let (_theirs, head, body) = provider.await.unwrap();
        let head = String::from_utf8(head).unwrap();
        assert!(head.contains("content-length: 65536\r\n"), "{head}");
        assert!(body.iter().all(|&b| b == b'x'));
        assert_eq!(shelf.len(), 1, "the connection went home");
    }

    #[tokio::test]
    async fn an_answer_before_the_body_is_written_is_read_and_ends_the_connection() {
        let (conn, mut theirs) = pipe(64);
        // The provider refuses on the head alone and reads nothing more,
        // keeping the connection open (as a server with a body limit does).
        let provider = tokio::spawn(async move {
            read_head_only(&mut theirs).await;
            theirs
                .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\n\r\ntoo long")
                .await
                .unwrap();
            theirs
        });
        let shelf = Arc::new(Shelf::default());
        let host = HeaderValue::from_static("mock.test");
        let home = Arc::downgrade(&shelf) as Weak<dyn Home>;
        let exchange = async {
            let resp = conn.send(&large_request(), &host, home).await.unwrap();
            let status = resp.status();
            (status, resp.into_body().collect().await.unwrap().to_bytes())
        };
        let (status, body) = tokio::time::timeout(WATCHDOG, exchange)
            .await
            .expect("the write waited for a provider that had answered");
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(&body[..], b"too long");
        assert_eq!(
            shelf.len(),
            0,
            "the rest of the body would be read as a request"
        );
        drop(provider.await.unwrap());
    }

    /// An HTTPS provider (a fresh self-signed certificate the client is
    /// told to trust) answering every request on one connection.
    async fn tls_provider() -> (
        std::net::SocketAddr,
        rustls::pki_types::CertificateDer<'static>,
    ) {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let der = cert.cert.der().clone();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            let mut got = vec![0; REQUEST.len()];
            while tls.read_exact(&mut got).await.is_ok() {
                assert_eq!(got, REQUEST);
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                tls.write_all(answer).await.unwrap();
                tls.flush().await.unwrap();
            }
        });
        (addr, der)
    }

    #[tokio::test]
    async fn over_tls_answers_are_read_and_the_connection_is_reused() {
        let (addr, cert) = tokio::time::timeout(WATCHDOG, tls_provider())
            .await
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, TokioIo::new(TokioIo::new(tcp)))
            .await
            .unwrap();
        let mut conn = H1Conn::new(Conn::from(hyper_rustls::MaybeHttpsStream::from(tls)));
        let shelf = Arc::new(Shelf::default());
        let host = HeaderValue::from_static("mock.test");
        for n in 1..=3 {
            let home = Arc::downgrade(&shelf) as Weak<dyn Home>;
            let sent = tokio::time::timeout(WATCHDOG, async {
                let resp = conn
                    .send(&request(), &host, home)
                    .await
                    .map_err(|f| f.error)?;
                resp.into_body().collect().await.map(|b| b.to_bytes())
            });
            assert_eq!(sent.await.expect("watchdog").unwrap(), "ok", "request {n}");
            // Back home after its answer, and still open (TLS 1.3 session
            // tickets the provider sent after the handshake carry no answer).
            conn = shelf.0.lock().unwrap().pop().expect("went home");
            assert!(conn.is_open(), "request {n}");
        }
    }
}
