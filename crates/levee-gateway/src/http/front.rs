//! HTTP/1.1 from callers, served inside each connection's own task.
//!
//! hyper's server reads a request body through a channel its dispatcher
//! fills and encodes every answer through its own buffers: ~10,000
//! instructions a request in the proxy benchmark, a fifth of the whole
//! request path, and an 8 KiB read and an 8 KiB write buffer per
//! connection. Here the connection task parses the head itself (httparse,
//! the parser hyper uses), hands the gateway a body that is usually
//! already whole (a chat request arrives with its head), and writes the
//! answer's head and body in one system call when the body is ready with
//! it: ~6,000 instructions, and 9.6 KiB of heap per open stream in all
//! (22.7 KiB with hyper's server).
//!
//! What it speaks: HTTP/1.1 and HTTP/1.0 requests framed by
//! `content-length`, `transfer-encoding: chunked` or nothing; keep-alive
//! (HTTP/1.0 only when asked); `expect: 100-continue` (the `100` is sent
//! when the gateway first reads the body); pipelined requests answered in
//! order. Answers are framed by their `content-length`, by the body's exact
//! size, else chunked (HTTP/1.0: by the close). Refused, with Levee's error
//! body in the dialect the request line names: a head over the byte limit
//! (exactly, however it arrived) or with more than 100 fields (`431`), a
//! malformed head, a missing, repeated or invalid `host`, or ambiguous
//! framing (`400`: two different lengths, a length with `chunked`, a
//! `transfer-encoding` other than one `chunked`); each closes the connection.
//! A head that is not whole within the header read timeout closes the
//! connection, and so does an idle keep-alive connection after it. A caller
//! that closes its side while its request is in flight cancels the request
//! (it can no longer read the answer); so does a failed write.

use crate::http::h1wire::{
    decode_chunked, header_map, BadField, Chunked, Framing, InBuf, Kind, Span, Spans, Step,
    MAX_HEADERS,
};
use crate::http::respond::{should_retry, Body, Why};
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::{Body as _, Frame, SizeHint};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

/// First read buffer of a connection: a chat request's head and body are
/// usually under 2 KiB.
const READ_BUF: usize = 2048;
/// A read that fills the buffer doubles the next one, up to this.
const MAX_READ_BUF: usize = 64 * 1024;
/// Body bytes read ahead of the gateway, at most.
const READ_AHEAD: usize = 64 * 1024;
/// Answer data up to this size is copied behind what is already queued and
/// written with it; larger pieces are written from their own buffer.
const INLINE: usize = 16 * 1024;

/// Longest a connection closing with its request's body unread keeps
/// reading (and dropping) that body, so the caller can read the answer.
const LINGER_FOR: Duration = Duration::from_secs(2);
/// Most bytes of an unread body dropped before the connection closes: a
/// body over the gateway's limit is not read to its end (a 50 MiB upload
/// refused at 10 MiB stops there), so a caller sending more than this
/// after its answer may still see the close as a reset.
const LINGER_BYTES: usize = 1024 * 1024;

/// Limits a connection serves under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// A head must be whole within this; an idle connection closes after it.
    pub header_read_timeout: Duration,
    /// A head still incomplete after this many bytes is refused (as
    /// hyper's server does, a head whose end arrives in the read that
    /// crosses the limit is taken).
    pub max_header_bytes: usize,
}

/// Turns `true` when the listener is shutting down: each connection ends
/// after its current exchange, or at once when it has none.
pub(crate) type Closing = watch::Receiver<bool>;

/// Serves requests on `io` with `svc` until the caller closes, a limit is
/// broken, or `closing` turns true.
pub(crate) async fn serve<IO, S, F>(io: IO, settings: Settings, mut svc: S, mut closing: Closing)
where
    IO: AsyncRead + AsyncWrite + Unpin,
    S: FnMut(Request<FrontBody>) -> F,
    F: Future<Output = Response<Body>>,
{
    let mut conn = Conn {
        io,
        read: InBuf::new(READ_BUF, MAX_READ_BUF),
        out: BytesMut::new(),
        queue: VecDeque::new(),
        read_closed: false,
    };
    loop {
        let head = match conn.next_head(&settings, &mut closing).await {
            Ok(Some(head)) => head,
            Ok(None) => return,
            Err(refusal) => {
                conn.refuse(refusal, &settings).await;
                return conn.linger().await;
            }
        };
        let keep_alive = head.keep_alive;
        let head_only = head.req.method() == Method::HEAD;
        let version = head.req.version();
        let (req, mut feed) = conn.attach_body(head);
        let fut = std::pin::pin!(svc(req));
        let Some(resp) = conn.exchange(fut, &mut feed).await else {
            return; // the caller left: the request is cancelled
        };
        let unread = !feed.read_whole();
        let keep_alive = keep_alive && !unread && !*closing.borrow();
        drop(feed);
        match conn.answer(resp, version, head_only, keep_alive).await {
            Ok(true) => {}
            Ok(false) if unread => return conn.linger().await,
            Ok(false) | Err(_) => return,
        }
        conn.shrink();
    }
}

/// One caller connection.
struct Conn<IO> {
    io: IO,
    read: InBuf,
    /// Small answer bytes, written after `queue`.
    out: BytesMut,
    /// Answer pieces to write before `out`, in order.
    queue: VecDeque<Bytes>,
    /// The caller has closed its side.
    read_closed: bool,
}

/// A request head read and checked, its body not attached yet.
pub(crate) struct Head {
    req: Request<()>,
    /// What is left of the body to read.
    kind: Kind,
    keep_alive: bool,
    expect_continue: bool,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Conn<IO> {
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let n = ready!(self.read.poll_fill(&mut self.io, cx))?;
        if n == 0 {
            self.read_closed = true;
        }
        Poll::Ready(Ok(n))
    }

    /// Reads until a whole head is buffered and parses it. `Ok(None)`: the
    /// connection ends quietly (the caller closed it, the head did not
    /// arrive in time, or the listener is closing and no request began);
    /// `Err(status)`: refuse with `status`, then close.
    async fn next_head(
        &mut self,
        settings: &Settings,
        closing: &mut Closing,
    ) -> Result<Option<Head>, Refusal> {
        let limit = settings.max_header_bytes;
        let timer = tokio::time::sleep(settings.header_read_timeout);
        tokio::pin!(timer);
        loop {
            if !self.read.buf.is_empty() {
                if let Some(head) = parse_head(&mut self.read.buf, limit)? {
                    return Ok(Some(head));
                }
                if self.read.buf.len() > limit {
                    return Err(HEAD_TOO_LARGE);
                }
            } else if *closing.borrow() || self.read_closed {
                return Ok(None);
            }
            let idle = self.read.buf.is_empty();
            tokio::select! {
                biased;
                read = std::future::poll_fn(|cx| self.poll_fill(cx)) => match read {
                    Ok(0) | Err(_) => return Ok(None),
                    Ok(_) => {}
                },
                () = &mut timer => return Ok(None),
                changed = closing.changed(), if idle => if changed.is_err() {
                    return Ok(None); // the listener is gone
                },
            }
        }
    }

    /// Gives the request its body: whole when the buffer already holds it,
    /// else fed from this connection while the gateway works on it.
    fn attach_body(&mut self, head: Head) -> (Request<FrontBody>, Feed) {
        let (parts, ()) = head.req.into_parts();
        let (body, feed) = match head.kind {
            Kind::Length(n) if n <= self.read.buf.len() as u64 => {
                let data = self.read.buf.split_to(n as usize).freeze();
                (FrontBody::whole(data), Feed::done())
            }
            Kind::Done | Kind::Length(0) => (FrontBody::whole(Bytes::new()), Feed::done()),
            kind => {
                let flow = Arc::new(Mutex::new(Inflow::default()));
                let exact = match kind {
                    Kind::Length(n) => Some(n),
                    _ => None,
                };
                let body = FrontBody(Inner::Flow(Arc::clone(&flow), exact));
                let feed = Feed {
                    kind,
                    broken: false,
                    flow: Some(flow),
                    continue_due: head.expect_continue,
                };
                (body, feed)
            }
        };
        (Request::from_parts(parts, body), feed)
    }

    /// Drives the gateway's answer, reading the body into it as it asks;
    /// `None` when the caller left first.
    async fn exchange<F>(&mut self, mut fut: Pin<&mut F>, feed: &mut Feed) -> Option<Response<Body>>
    where
        F: Future<Output = Response<Body>>,
    {
        std::future::poll_fn(|cx| loop {
            if let Poll::Ready(resp) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(resp));
            }
            if feed.is_done() {
                // Watch for the caller leaving; bytes of a next request
                // (pipelined) wait in the buffer.
                if self.read.buf.is_empty() && !self.read_closed {
                    match self.poll_fill(cx) {
                        Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(None),
                        Poll::Ready(Ok(_)) | Poll::Pending => {}
                    }
                }
                return Poll::Pending;
            }
            match self.poll_feed(cx, feed) {
                Poll::Ready(()) => {} // the body moved on: poll the gateway again
                Poll::Pending => return Poll::Pending,
            }
        })
        .await
    }

    /// Moves body bytes from the connection to the request's body.
    fn poll_feed(&mut self, cx: &mut Context<'_>, feed: &mut Feed) -> Poll<()> {
        let Some(flow) = feed.flow.clone() else {
            return Poll::Pending;
        };
        if Arc::strong_count(&flow) == 1 {
            // The gateway dropped the body unread: the rest stays unread and
            // the connection closes after the answer.
            feed.flow = None;
            return Poll::Pending;
        }
        let mut inflow = flow.lock().unwrap_or_else(|p| p.into_inner());
        if feed.continue_due {
            if !inflow.asked {
                inflow.conn_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            feed.continue_due = false;
            self.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        if !self.out.is_empty() || !self.queue.is_empty() {
            if let Poll::Ready(Err(_)) = self.poll_flush(cx) {
                feed.fail(&mut inflow, BodyError::Closed, cx);
                return Poll::Ready(());
            }
        }
        if inflow.queued >= READ_AHEAD {
            inflow.conn_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let step = match &mut feed.kind {
            Kind::Length(left) if !self.read.buf.is_empty() => {
                let take = (*left).min(self.read.buf.len() as u64);
                *left -= take;
                Ok(Step::Data(self.read.buf.split_to(take as usize).freeze())).map(|s| {
                    if *left == 0 {
                        (s, true)
                    } else {
                        (s, false)
                    }
                })
            }
            Kind::Chunked(state) if !self.read.buf.is_empty() => {
                decode_chunked(state, &mut self.read.buf).map(|s| (s, false))
            }
            _ => Ok((Step::More, false)),
        };
        if let Kind::Chunked(chunked) = &feed.kind {
            // What the current chunk declared is the body's too: a reader
            // with a limit can refuse a 1 GiB chunk at its size line,
            // without waiting for bytes that may never come.
            let ahead = chunked.declared_ahead();
            if ahead > inflow.ahead {
                inflow.ahead = ahead;
                inflow.wake(cx);
            }
            inflow.ahead = ahead;
        }
        match step {
            Err(e) => feed.fail(&mut inflow, BodyError::Framing(e), cx),
            Ok((Step::Data(data), last)) => {
                inflow.push(data, cx);
                if last {
                    feed.kind = Kind::Done;
                    inflow.finish(cx);
                }
            }
            Ok((Step::Done, _)) => {
                feed.kind = Kind::Done;
                inflow.finish(cx);
            }
            Ok((Step::More, _)) => match ready!(self.poll_fill(cx)) {
                Ok(0) => feed.fail(&mut inflow, BodyError::Closed, cx),
                Ok(_) => {}
                Err(e) => feed.fail(&mut inflow, BodyError::Io(e.kind()), cx),
            },
        }
        Poll::Ready(())
    }

    /// Writes everything queued.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(front) = self.queue.front_mut() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, front))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n == front.len() {
                self.queue.pop_front();
            } else {
                bytes::Buf::advance(front, n);
            }
        }
        while !self.out.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            bytes::Buf::advance(&mut self.out, n);
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Queues answer bytes: copied behind `out` when small, else as a piece
    /// of their own (an 8.7 MB replayed answer is not copied).
    fn put(&mut self, data: Bytes) {
        if data.len() <= INLINE {
            self.out.extend_from_slice(&data);
        } else {
            if !self.out.is_empty() {
                self.queue.push_back(self.out.split().freeze());
            }
            self.queue.push_back(data);
        }
    }

    /// Writes the answer; `Ok(true)` when the connection can take another
    /// request.
    async fn answer(
        &mut self,
        resp: Response<Body>,
        version: Version,
        head_only: bool,
        keep_alive: bool,
    ) -> io::Result<bool> {
        let (parts, body) = resp.into_parts();
        let no_body = head_only
            || parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        let framing = if no_body {
            // A `HEAD` answer declares the length a `GET` would have had.
            let length = declared_length(&parts.headers).or(body.size_hint().exact());
            Out::Nothing(length.filter(|_| head_only))
        } else {
            Out::choose(&parts.headers, &body, version)
        };
        let keep_alive = keep_alive && !matches!(framing, Out::Close);
        self.encode_head(&parts, framing, version, keep_alive);
        if no_body {
            std::future::poll_fn(|cx| self.poll_flush(cx)).await?;
            return Ok(keep_alive);
        }
        let mut body = std::pin::pin!(body);
        let mut framing = framing;
        let mut finished = false;
        std::future::poll_fn(|cx| loop {
            if finished || self.out.len() >= INLINE || !self.queue.is_empty() {
                ready!(self.poll_flush(cx))?;
                if finished {
                    return Poll::Ready(Ok(()));
                }
            }
            match body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.frame(&mut framing, data)?;
                    }
                }
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => {
                    framing.end(&mut self.out)?;
                    finished = true;
                }
                Poll::Pending => {
                    if let Poll::Ready(Err(e)) = self.poll_flush(cx) {
                        return Poll::Ready(Err(e));
                    }
                    // The caller leaving ends a stream it can no longer read.
                    if self.read.buf.is_empty() && !self.read_closed {
                        match self.poll_fill(cx) {
                            Poll::Ready(Ok(0)) => {
                                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()))
                            }
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Ready(Ok(_)) | Poll::Pending => {}
                        }
                    }
                    return Poll::Pending;
                }
            }
        })
        .await?;
        Ok(keep_alive)
    }

    /// Queues one data frame of the answer in its framing.
    fn frame(&mut self, framing: &mut Out, data: Bytes) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        match framing {
            Out::Length(left) => {
                if data.len() as u64 > *left {
                    // More than the answer declared: the caller would read
                    // the excess as the next answer.
                    return Err(io::Error::other(
                        "answer body longer than its content-length",
                    ));
                }
                *left -= data.len() as u64;
                self.put(data);
            }
            Out::Chunked => {
                let mut line = [0u8; 18];
                let hex = hex_line(data.len(), &mut line);
                self.out.extend_from_slice(hex);
                self.put(data);
                self.out.extend_from_slice(b"\r\n");
            }
            Out::Close => self.put(data),
            Out::Nothing(_) => {}
        }
        Ok(())
    }

    /// The status line and header section.
    fn encode_head(
        &mut self,
        parts: &http::response::Parts,
        framing: Out,
        version: Version,
        keep_alive: bool,
    ) {
        let out = &mut self.out;
        out.reserve(256);
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(parts.status.as_str().as_bytes());
        out.extend_from_slice(b" ");
        out.extend_from_slice(
            parts
                .status
                .canonical_reason()
                .unwrap_or("<unknown status code>")
                .as_bytes(),
        );
        out.extend_from_slice(b"\r\n");
        let mut dated = false;
        for (name, value) in &parts.headers {
            if !is_framing(name) {
                line(out, name.as_str().as_bytes(), value.as_bytes());
                dated |= name == header::DATE;
            }
        }
        if !dated {
            date::put(out);
        }
        match framing {
            Out::Length(n) | Out::Nothing(Some(n)) => {
                let mut digits = itoa::Buffer::new();
                line(out, b"content-length", digits.format(n).as_bytes());
            }
            Out::Chunked => line(out, b"transfer-encoding", b"chunked"),
            Out::Close | Out::Nothing(None) => {}
        }
        if !keep_alive {
            line(out, b"connection", b"close");
        } else if version == Version::HTTP_10 {
            line(out, b"connection", b"keep-alive");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// Answers a request the head of which could not be taken, and closes:
    /// Levee's JSON error in the dialect the request line's path (or an
    /// `anthropic-version` field in what arrived) names, so an SDK shows
    /// what was wrong instead of an empty body.
    async fn refuse(&mut self, (status, why): Refusal, settings: &Settings) {
        let dialect = sniff_dialect(&self.read.buf);
        let message = if status == StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE {
            format!(
                "levee: {why}: the limit is {} bytes (limits.max_header_bytes) and {MAX_HEADERS} fields",
                settings.max_header_bytes
            )
        } else {
            format!("levee: {why}")
        };
        let row = Why::of_head(status).row();
        let body = dialect.error_body(status.as_u16(), row.label, &message);
        self.out.clear();
        self.queue.clear();
        self.out.extend_from_slice(b"HTTP/1.1 ");
        self.out.extend_from_slice(status.as_str().as_bytes());
        self.out.extend_from_slice(b" ");
        self.out
            .extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        self.out.extend_from_slice(b"\r\n");
        date::put(&mut self.out);
        line(&mut self.out, b"content-type", b"application/json");
        line(
            &mut self.out,
            b"x-should-retry",
            should_retry(row).as_bytes(),
        );
        line(&mut self.out, b"x-levee-reason", row.label.as_bytes());
        line(&mut self.out, b"x-levee-attempts", b"0");
        line(
            &mut self.out,
            b"content-length",
            body.len().to_string().as_bytes(),
        );
        self.out.extend_from_slice(b"connection: close\r\n\r\n");
        self.out.extend_from_slice(&body);
        let _ = std::future::poll_fn(|cx| self.poll_flush(cx)).await;
    }

    /// Closes after an answer given before the request was read whole
    /// (a `413`, a `401`, a refused head): the write side first, then the rest of the body
    /// is read and dropped until the caller closes, for at most
    /// `LINGER_FOR` and `LINGER_BYTES`. Closing with the body still
    /// arriving would reset the connection, and a reset can destroy the
    /// answer before the caller reads it: an SDK still sending its body
    /// would see a connection error instead of the `413`, and retry it.
    async fn linger(&mut self) {
        let _ = std::future::poll_fn(|cx| Pin::new(&mut self.io).poll_shutdown(cx)).await;
        let mut dropped = 0;
        let drain = async {
            while dropped < LINGER_BYTES {
                self.read.buf.clear();
                match std::future::poll_fn(|cx| self.poll_fill(cx)).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => dropped += n,
                }
            }
        };
        let _ = tokio::time::timeout(LINGER_FOR, drain).await;
    }

    /// Lets go of buffer space a large exchange left behind (a slow stream
    /// should not keep a 64 KiB buffer for its life).
    fn shrink(&mut self) {
        if self.out.capacity() > MAX_READ_BUF {
            self.out = BytesMut::new();
        }
        self.read.shrink();
    }
}

fn line(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A chunk-size line for `len` bytes (`1a2b\r\n`).
fn hex_line(len: usize, line: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut at = 16;
    let mut n = len;
    loop {
        at -= 1;
        line[at] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    line[16] = b'\r';
    line[17] = b'\n';
    &line[at..]
}

/// The answer's fields the connection writes itself.
fn is_framing(name: &HeaderName) -> bool {
    name == header::CONTENT_LENGTH
        || name == header::TRANSFER_ENCODING
        || name == header::CONNECTION
        || name.as_str() == "keep-alive"
}

/// How an answer's body is framed on the wire.
#[derive(Debug, Clone, Copy)]
enum Out {
    /// This many bytes still to come (`content-length`).
    Length(u64),
    Chunked,
    /// Until the connection closes (HTTP/1.0 callers, length unknown).
    Close,
    /// No body (`HEAD`, `204`, `304`, `1xx`); a `HEAD` answer's length.
    Nothing(Option<u64>),
}

impl Out {
    fn choose(headers: &HeaderMap, body: &Body, version: Version) -> Out {
        if let Some(n) = declared_length(headers) {
            return Out::Length(n);
        }
        if let Some(n) = body.size_hint().exact() {
            return Out::Length(n);
        }
        if version == Version::HTTP_11 {
            Out::Chunked
        } else {
            Out::Close
        }
    }

    /// The end of the body: the chunked terminator, or a check that the
    /// declared length was all sent.
    fn end(self, out: &mut BytesMut) -> io::Result<()> {
        match self {
            Out::Chunked => out.extend_from_slice(b"0\r\n\r\n"),
            Out::Length(left) if left > 0 => {
                return Err(io::Error::other(
                    "answer body shorter than its content-length",
                ))
            }
            _ => {}
        }
        Ok(())
    }
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| crate::http::h1wire::parse_decimal(v.as_bytes()))
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

/// Why a head is refused: the status and what was wrong, for the answer.
pub(crate) type Refusal = (StatusCode, &'static str);

const HEAD_TOO_LARGE: Refusal = (
    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
    "the request head is too large",
);

fn bad(why: &'static str) -> Refusal {
    (StatusCode::BAD_REQUEST, why)
}

/// The dialect of a request whose head was refused, from the bytes that
/// arrived: the request line's path, else an `anthropic-version` field.
fn sniff_dialect(buf: &[u8]) -> levee_wire::Dialect {
    use levee_wire::Dialect;
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let path = line.split(|&b| b == b' ').nth(1).unwrap_or_default();
    let path = std::str::from_utf8(path).unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    Dialect::of_path(path).unwrap_or_else(|| {
        let named = buf
            .windows(b"\nanthropic-version:".len())
            .any(|w| w.eq_ignore_ascii_case(b"\nanthropic-version:"));
        if named {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }
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

/// Parses one request head from the front of `buf`: `None` while it is
/// incomplete. The head's bytes leave the buffer; header values share them.
/// A head longer than `limit` bytes is refused even when it arrived whole.
pub(crate) fn parse_head(buf: &mut BytesMut, limit: usize) -> Result<Option<Head>, Refusal> {
    // Left uninitialised: httparse writes only the slots it fills.
    let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut spans = Spans::new();
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(n)) if n > limit => return Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Complete(n)) => n,
        Err(httparse::Error::TooManyHeaders) => {
            return Err((
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "the request head has too many fields",
            ))
        }
        Err(_) => return Err(bad("the request head is not valid HTTP/1.1")),
    };
    let version = if req.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let method = Method::from_bytes(req.method.unwrap_or("").as_bytes())
        .map_err(|_| bad("invalid method"))?;
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| ((s.as_ptr() as usize - base) as u32, s.len() as u32);
    let path = at(req.path.unwrap_or("").as_bytes());
    let mut framing = Framing::default();
    let mut expect_continue = false;
    // Field names a `connection` field lists (besides close/keep-alive):
    // hop-by-hop, so never part of the request the gateway sees. Rare: no
    // allocation unless there are some.
    let mut listed: Vec<(u32, u32)> = Vec::new();
    let mut hosts = 0u8;
    for h in req.headers.iter() {
        let connection_only = framing.see(h.name, h.value).map_err(bad)?;
        if h.name.len() == 4 && h.name.eq_ignore_ascii_case("host") {
            see_host(&mut hosts, h.value)?;
        }
        if h.name.eq_ignore_ascii_case("connection") {
            listed.extend(crate::http::h1wire::listed_names(h.value).map(at));
        }
        if h.name.eq_ignore_ascii_case("expect") {
            expect_continue = h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
        }
        // The request's length stays in its map: the gateway refuses a
        // body declared over its limit before reading it.
        if !connection_only || h.name.eq_ignore_ascii_case("content-length") {
            spans.push(Span {
                name: at(h.name.as_bytes()),
                value: at(h.value),
            });
        }
    }
    if hosts == 0 && version == Version::HTTP_11 {
        return Err(bad("an HTTP/1.1 request must have a host field"));
    }
    let kind = request_body(&framing, version)?;
    let head = buf.split_to(len).freeze();
    let target = path.0 as usize..(path.0 + path.1) as usize;
    let uri = match served_uri(&head[target.clone()]) {
        Some(uri) => uri,
        None => Uri::from_maybe_shared(head.slice(target))
            .map_err(|_| bad("the request target is not a valid URI"))?,
    };
    let headers = header_map(&head, &spans, &listed, spans.len()).map_err(|e| {
        bad(match e {
            BadField::Name => "invalid header field name",
            BadField::Value => "invalid header field value",
        })
    })?;
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = version;
    *req.headers_mut() = headers;
    let keep_alive = !framing.close && (version == Version::HTTP_11 || framing.keep_alive);
    Ok(Some(Head {
        req,
        kind,
        keep_alive,
        expect_continue: expect_continue && version == Version::HTTP_11,
    }))
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
                StatusCode::NOT_IMPLEMENTED,
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

/// The connection's side of a body being read while the gateway works.
struct Feed {
    kind: Kind,
    /// The body broke off (the caller left, a framing error): what follows
    /// on the connection is not a request.
    broken: bool,
    /// `None` once the body is whole or the gateway dropped it.
    flow: Option<Arc<Mutex<Inflow>>>,
    /// `expect: 100-continue` asked for, and not sent yet.
    continue_due: bool,
}

impl Feed {
    fn done() -> Feed {
        Feed {
            kind: Kind::Done,
            broken: false,
            flow: None,
            continue_due: false,
        }
    }

    /// Nothing more of the body will be read.
    fn is_done(&self) -> bool {
        self.kind == Kind::Done
    }

    /// The whole body was read: the next bytes are the next request.
    fn read_whole(&self) -> bool {
        self.kind == Kind::Done && !self.broken
    }

    fn fail(&mut self, inflow: &mut Inflow, e: BodyError, cx: &Context<'_>) {
        self.kind = Kind::Done;
        self.broken = true;
        inflow.fail(e, cx);
    }
}

/// Body bytes read from the connection and not yet taken by the gateway.
#[derive(Default)]
struct Inflow {
    data: VecDeque<Bytes>,
    queued: usize,
    /// Bytes the current chunk declared that are not read yet.
    ahead: u64,
    /// The body is over: `Some(Ok)` at its end, `Some(Err)` broken off.
    end: Option<Result<(), BodyError>>,
    /// The gateway polled the body and found nothing.
    asked: bool,
    waker: Option<Waker>,
    /// The connection, waiting for the gateway to take bytes or ask.
    conn_waker: Option<Waker>,
}

impl Inflow {
    fn push(&mut self, data: Bytes, cx: &Context<'_>) {
        if !data.is_empty() {
            self.queued += data.len();
            self.data.push_back(data);
        }
        self.wake(cx);
    }

    fn finish(&mut self, cx: &Context<'_>) {
        self.end = Some(Ok(()));
        self.wake(cx);
    }

    fn fail(&mut self, e: BodyError, cx: &Context<'_>) {
        self.end = Some(Err(e));
        self.wake(cx);
    }

    /// Wakes the body's reader unless it is this task, which polls the
    /// gateway again next anyway.
    fn wake(&mut self, cx: &Context<'_>) {
        if let Some(w) = self.waker.take() {
            if !w.will_wake(cx.waker()) {
                w.wake();
            }
        }
    }
}

/// Why a request body could not be read to its end.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub enum BodyError {
    #[error("the caller closed the connection before the request body was complete")]
    Closed,
    #[error("caller connection: {0}")]
    Io(io::ErrorKind),
    #[error("the request body is framed wrong: {0}")]
    Framing(&'static str),
}

/// A caller's request body.
pub struct FrontBody(Inner);

enum Inner {
    Whole(Option<Bytes>),
    /// Read from the connection as the gateway polls; the exact length
    /// when the head declared one.
    Flow(Arc<Mutex<Inflow>>, Option<u64>),
}

impl FrontBody {
    fn whole(data: Bytes) -> FrontBody {
        FrontBody(Inner::Whole((!data.is_empty()).then_some(data)))
    }
}

impl http_body::Body for FrontBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match &mut self.get_mut().0 {
            Inner::Whole(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            Inner::Flow(flow, exact) => {
                let mut inflow = flow.lock().unwrap_or_else(|p| p.into_inner());
                // The connection waits for the body to be taken or asked
                // for (when it is polled from another task).
                if let Some(w) = inflow.conn_waker.take() {
                    if !w.will_wake(cx.waker()) {
                        w.wake();
                    }
                }
                if let Some(data) = inflow.data.pop_front() {
                    inflow.queued -= data.len();
                    if let Some(n) = exact {
                        *n = n.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                match inflow.end {
                    Some(Ok(())) => Poll::Ready(None),
                    Some(Err(e)) => Poll::Ready(Some(Err(e))),
                    None => {
                        inflow.asked = true;
                        inflow.waker = Some(cx.waker().clone());
                        Poll::Pending
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.0, Inner::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Whole(data) => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
            Inner::Flow(_, Some(n)) => SizeHint::with_exact(*n),
            Inner::Flow(flow, None) => {
                let inflow = flow.lock().unwrap_or_else(|p| p.into_inner());
                let mut hint = SizeHint::default();
                hint.set_lower(inflow.queued as u64 + inflow.ahead);
                hint
            }
        }
    }
}

/// The `date` field, formatted once a second per thread.
mod date {
    use bytes::BytesMut;
    use std::cell::RefCell;
    use std::time::{Duration, UNIX_EPOCH};

    thread_local! {
        static CACHE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }

    pub(super) fn put(out: &mut BytesMut) {
        let secs = crate::clock::unix_ms() / 1000;
        CACHE.with(|cache| {
            let mut cache = cache.borrow_mut();
            if cache.0 != secs {
                let now = UNIX_EPOCH + Duration::from_secs(secs);
                *cache = (secs, httpdate::fmt_http_date(now));
            }
            super::line(out, b"date", cache.1.as_bytes());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::respond::full;
    use http::header::HeaderValue;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
    use tokio::sync::mpsc;
    use tokio::task::JoinHandle;

    const WATCHDOG: Duration = Duration::from_secs(20);

    const SETTINGS: Settings = Settings {
        header_read_timeout: Duration::from_secs(10),
        max_header_bytes: 8192,
    };

    /// A connection served by `svc` over an in-memory pipe of `pipe` bytes.
    fn start<S, F>(pipe: usize, svc: S) -> (DuplexStream, JoinHandle<()>, watch::Sender<bool>)
    where
        S: FnMut(Request<FrontBody>) -> F + Send + 'static,
        F: Future<Output = Response<Body>> + Send + 'static,
    {
        let (client, server) = tokio::io::duplex(pipe);
        let (closing, watching) = watch::channel(false);
        let task = tokio::spawn(serve(server, SETTINGS, svc, watching));
        (client, task, closing)
    }

    /// Echoes the request body, with how many bytes it was in a header.
    fn echo(
    ) -> impl FnMut(Request<FrontBody>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>>
    {
        |req: Request<FrontBody>| {
            Box::pin(async move {
                let body = req.into_body().collect().await.map(|c| c.to_bytes());
                match body {
                    Ok(b) => {
                        let mut r = Response::new(full(b.clone()));
                        r.headers_mut()
                            .insert("x-len", HeaderValue::from(b.len() as u64));
                        r
                    }
                    Err(e) => {
                        let mut r = Response::new(full(e.to_string()));
                        *r.status_mut() = StatusCode::BAD_REQUEST;
                        r
                    }
                }
            })
        }
    }

    #[tokio::test]
    async fn an_answer_with_its_own_date_gets_no_second_one() {
        let dated = answering_with("x", header::DATE, "Tue, 01 Dec 2026 00:00:00 GMT");
        let got = exchange(
            64 * 1024,
            dated,
            b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        let text = String::from_utf8_lossy(&got);
        assert_eq!(text.matches("\r\ndate: ").count(), 1, "{text}");
        assert!(
            text.contains("\r\ndate: Tue, 01 Dec 2026 00:00:00 GMT\r\n"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_of_a_hundred_fields_reaches_the_gateway_whole() {
        let fields = |req: Request<FrontBody>| {
            let names: Vec<String> = req
                .headers()
                .iter()
                .map(|(n, v)| format!("{n}={}", v.to_str().unwrap_or("?")))
                .collect();
            async move { Response::new(full(names.join(","))) }
        };
        // `host`, ninety-eight and `connection`: the most a head may have.
        let head: String = (0..98).map(|i| format!("x-f{i}: v{i}\r\n")).collect();
        let request = format!("GET / HTTP/1.1\r\nhost: x\r\n{head}connection: close\r\n\r\n");
        let got = exchange(64 * 1024, fields, request.as_bytes()).await;
        let text = String::from_utf8_lossy(&got);
        let want: Vec<String> = std::iter::once("host=x".to_string())
            .chain((0..98).map(|i| format!("x-f{i}=v{i}")))
            .collect();
        assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
        assert!(text.ends_with(&want.join(",")), "{text}");
    }

    async fn watchdog<T>(f: impl Future<Output = T>) -> T {
        tokio::time::timeout(WATCHDOG, f)
            .await
            .expect("watchdog: the connection stalled")
    }

    /// A service answering `body` with the field `name: value` set.
    fn answering_with(
        body: &'static str,
        name: header::HeaderName,
        value: &'static str,
    ) -> impl FnMut(Request<FrontBody>) -> std::future::Ready<Response<Body>> + Send + 'static {
        move |_req| {
            let mut r = Response::new(full(body));
            r.headers_mut()
                .insert(name.clone(), HeaderValue::from_static(value));
            std::future::ready(r)
        }
    }

    /// Writes `request` on a fresh connection to `svc`, reads until the
    /// connection closes and waits for its task: all the caller received.
    async fn exchange<S, F>(pipe: usize, svc: S, request: &[u8]) -> Vec<u8>
    where
        S: FnMut(Request<FrontBody>) -> F + Send + 'static,
        F: Future<Output = Response<Body>> + Send + 'static,
    {
        let (mut c, task, _closing) = start(pipe, svc);
        c.write_all(request).await.unwrap();
        let mut got = Vec::new();
        watchdog(c.read_to_end(&mut got)).await.unwrap();
        drop(c);
        watchdog(task).await.unwrap();
        got
    }

    /// Reads until `n` answers' heads and bodies (content-length framed)
    /// or the close; returns the text.
    async fn read_answers(c: &mut DuplexStream, n: usize) -> String {
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&got).to_string();
            if complete_answers(&text) >= n {
                return text;
            }
            let k = watchdog(c.read(&mut chunk)).await.expect("read");
            if k == 0 {
                return text;
            }
            got.extend_from_slice(&chunk[..k]);
        }
    }

    fn complete_answers(mut text: &str) -> usize {
        let mut n = 0;
        while let Some(end) = text.find("\r\n\r\n") {
            let head = &text[..end];
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if text.len() < end + 4 + len {
                break;
            }
            text = &text[end + 4 + len..];
            n += 1;
        }
        n
    }

    #[tokio::test]
    async fn requests_on_one_connection_are_answered_in_order_with_their_bodies() {
        let (mut c, task, _closing) = start(64 * 1024, echo());
        c.write_all(b"POST /a HTTP/1.1\r\nhost: l\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let first = read_answers(&mut c, 1).await;
        assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
        assert!(first.contains("\r\ndate: "), "{first}");
        assert!(first.ends_with("content-length: 5\r\n\r\nhello"), "{first}");
        // Two pipelined requests in one write: two answers, in order.
        c.write_all(b"POST /b HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nonePOST /c HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\ntwo")
            .await
            .unwrap();
        let two = read_answers(&mut c, 2).await;
        let one_at = two.find("\r\n\r\none").expect("first answer");
        let two_at = two.find("\r\n\r\ntwo").expect("second answer");
        assert!(one_at < two_at, "{two}");
        assert!(!two.contains("connection: close"), "{two}");
        drop(c);
        watchdog(task).await.unwrap();
    }

    #[tokio::test]
    async fn a_body_that_arrives_later_and_chunked_is_read_whole() {
        let (mut c, task, _closing) = start(64 * 1024, echo());
        c.write_all(
            b"POST /a HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
        )
        .await
        .unwrap();
        tokio::task::yield_now().await;
        c.write_all(b"4;ext=1\r\ndefg\r\n0\r\ntrailer: x\r\n\r\n")
            .await
            .unwrap();
        let got = read_answers(&mut c, 1).await;
        assert!(got.contains("x-len: 7\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\nabcdefg"), "{got}");
        // A length whose bytes come in pieces.
        c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 6\r\n\r\nab")
            .await
            .unwrap();
        tokio::task::yield_now().await;
        c.write_all(b"cdef").await.unwrap();
        let got = read_answers(&mut c, 1).await;
        assert!(got.ends_with("\r\n\r\nabcdef"), "{got}");
        drop(c);
        watchdog(task).await.unwrap();
    }

    #[tokio::test]
    async fn a_trailer_section_ended_by_a_blank_looking_line_smuggles_no_second_request() {
        // A line of one space after the last chunk is not the empty line
        // that ends the trailers: taken as one, the GET after it was served
        // as a second request on the connection (nginx gives one answer).
        let got = exchange(
            64 * 1024,
            echo(),
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"model\":\"demo\"}\r\n0\r\n \r\nGET /v1/models HTTP/1.1\r\nhost: x\r\nHost: x\r\n\r\n",
        )
        .await;
        let text = String::from_utf8_lossy(&got);
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    }

    #[tokio::test]
    async fn transfer_encoding_is_one_field_saying_exactly_chunked() {
        let body = "\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /x HTTP/1.1\r\nhost: x\r\n\r\n";
        for (te, status) in [
            (
                "transfer-encoding: chunked\r\ntransfer-encoding: chunked",
                "400",
            ),
            (
                "transfer-encoding: chunked\r\ntransfer-encoding: gzip",
                "400",
            ),
            ("transfer-encoding: identity, chunked", "501"),
            ("transfer-encoding: gzip, chunked", "501"),
            ("transfer-encoding: chunked, gzip", "400"),
        ] {
            let request = format!("POST /a HTTP/1.1\r\nhost: x\r\n{te}{body}");
            let got = exchange(64 * 1024, echo(), request.as_bytes()).await;
            let text = String::from_utf8_lossy(&got);
            assert!(
                text.starts_with(&format!("HTTP/1.1 {status}")),
                "{te}: {text}"
            );
            assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{te}: {text}");
        }
        // One field, any case, surrounding whitespace: read.
        let request =
            format!("POST /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\ntransfer-encoding:  Chunked {body}");
        let got = exchange(64 * 1024, echo(), request.as_bytes()).await;
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    }

    #[tokio::test]
    async fn fields_the_callers_connection_field_names_never_reach_the_gateway() {
        let svc = |req: Request<FrontBody>| {
            let saw = |name: &str| {
                if req.headers().contains_key(name) {
                    "yes"
                } else {
                    "no"
                }
            };
            let mut r = Response::new(full(""));
            for (name, out) in [("user-agent", "x-saw-ua"), ("accept", "x-saw-accept")] {
                r.headers_mut()
                    .insert(out, HeaderValue::from_static(saw(name)));
            }
            std::future::ready(r)
        };
        let got = exchange(
            64 * 1024,
            svc,
            b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close, User-Agent\r\nuser-agent: x\r\naccept: y\r\n\r\n",
        )
        .await;
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("x-saw-ua: no\r\n"), "{text}");
        assert!(text.contains("x-saw-accept: yes\r\n"), "{text}");
    }

    #[tokio::test]
    async fn continue_is_sent_when_the_body_is_read_and_not_when_it_is_refused_unread() {
        // The body is read: `100 Continue`, then the answer.
        let (mut c, _task, _closing) = start(64 * 1024, echo());
        c.write_all(
            b"POST /a HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
        )
        .await
        .unwrap();
        let mut head = [0u8; 25];
        watchdog(c.read_exact(&mut head)).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 100 Continue\r\n\r\n");
        c.write_all(b"ok").await.unwrap();
        let got = read_answers(&mut c, 1).await;
        assert!(got.ends_with("\r\n\r\nok"), "{got}");

        // Refused before its body is read: no `100`, and the connection
        // closes after the answer (the body's bytes would be read as the
        // next request).
        let refuse = |_req: Request<FrontBody>| async {
            let mut r = Response::new(full("no"));
            *r.status_mut() = StatusCode::UNAUTHORIZED;
            r
        };
        let (mut c, task, _closing) = start(64 * 1024, refuse);
        c.write_all(
            b"POST /a HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
        )
        .await
        .unwrap();
        let got = read_answers(&mut c, 1).await;
        assert!(got.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{got}");
        assert!(got.contains("connection: close\r\n"), "{got}");
        drop(c);
        watchdog(task).await.unwrap();
    }

    #[tokio::test]
    async fn a_caller_still_sending_a_body_refused_unread_can_finish_and_read_the_answer() {
        let refuse = |_req: Request<FrontBody>| async {
            let mut r = Response::new(full("too large"));
            *r.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
            r
        };
        // A pipe far smaller than the body: without the linger the server
        // closes while the body is still being written, and the write fails.
        let (c, task, _closing) = start(16 * 1024, refuse);
        let (mut rd, mut wr) = tokio::io::split(c);
        let body = vec![b' '; 512 * 1024];
        let writer = tokio::spawn(async move {
            wr.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 524288\r\n\r\n")
                .await?;
            wr.write_all(&body).await?;
            wr.shutdown().await
        });
        let mut got = Vec::new();
        watchdog(rd.read_to_end(&mut got)).await.unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("HTTP/1.1 413 Payload Too Large\r\n"),
            "{text}"
        );
        assert!(text.ends_with("too large"), "{text}");
        watchdog(writer)
            .await
            .unwrap()
            .expect("the whole body was taken");
        watchdog(task).await.unwrap();
    }

    #[tokio::test]
    async fn after_a_body_framed_wrong_what_follows_is_not_served_as_a_request() {
        // Three bytes of chunk data, then no CRLF but a request: the body is
        // broken, and the bytes after it must not be read as a request
        // (that is how a request is smuggled past the gateway).
        let (mut c, task, _closing) = start(64 * 1024, echo());
        c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc")
            .await
            .unwrap();
        tokio::task::yield_now().await;
        c.write_all(b"GET /smuggled HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        let got = read_answers(&mut c, 2).await;
        assert_eq!(got.matches("HTTP/1.1 ").count(), 1, "{got}");
        assert!(got.starts_with("HTTP/1.1 400 "), "{got}");
        assert!(got.contains("connection: close\r\n"), "{got}");
        drop(c);
        watchdog(task).await.unwrap();
    }

    /// A body fed through a channel: an answer of unknown length.
    struct Feeder(mpsc::Receiver<Bytes>);

    impl http_body::Body for Feeder {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|d| d.map(|d| Ok(Frame::data(d))))
        }
    }

    fn streaming(
        rx: Arc<Mutex<Option<mpsc::Receiver<Bytes>>>>,
    ) -> impl FnMut(Request<FrontBody>) -> std::future::Ready<Response<Body>> {
        move |_req| {
            let rx = rx.lock().unwrap().take().expect("one request");
            std::future::ready(Response::new(Feeder(rx).boxed_unsync()))
        }
    }

    #[tokio::test]
    async fn an_answer_of_unknown_length_is_chunked_and_each_piece_sent_as_it_comes() {
        let (tx, rx) = mpsc::channel(4);
        let (mut c, task, _closing) = start(64 * 1024, streaming(Arc::new(Mutex::new(Some(rx)))));
        c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        tx.send(Bytes::from_static(b"data: one\n\n")).await.unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 1024];
        while !String::from_utf8_lossy(&got).contains("data: one") {
            let n = watchdog(c.read(&mut chunk)).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&got).to_string();
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nb\r\ndata: one\n\n\r\n"), "{text}");
        drop(tx);
        let mut rest = [0u8; 5];
        watchdog(c.read_exact(&mut rest)).await.unwrap();
        assert_eq!(&rest, b"0\r\n\r\n");
        drop(c);
        watchdog(task).await.unwrap();
    }

    #[tokio::test]
    async fn an_http_1_0_caller_gets_the_answer_framed_by_the_close() {
        let (tx, rx) = mpsc::channel(4);
        let (mut c, task, _closing) = start(64 * 1024, streaming(Arc::new(Mutex::new(Some(rx)))));
        c.write_all(b"POST /a HTTP/1.0\r\n\r\n").await.unwrap();
        tx.send(Bytes::from_static(b"abc")).await.unwrap();
        drop(tx);
        let mut got = Vec::new();
        watchdog(c.read_to_end(&mut got)).await.unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("connection: close\r\n"), "{text}");
        assert!(!text.contains("chunked"), "{text}");
        assert!(text.ends_with("\r\n\r\nabc"), "{text}");
        watchdog(task).await.unwrap();
    }

    /// Drops to `true` when the request's future is dropped.
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_caller_that_leaves_cancels_its_request_in_flight() {
        let dropped = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&dropped);
        let svc = move |_req: Request<FrontBody>| {
            let guard = Dropped(Arc::clone(&seen));
            async move {
                std::future::pending::<()>().await;
                drop(guard);
                Response::new(full(""))
            }
        };
        let (mut c, task, _closing) = start(64 * 1024, svc);
        c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhi")
            .await
            .unwrap();
        tokio::task::yield_now().await;
        assert!(!dropped.load(Ordering::SeqCst));
        drop(c);
        watchdog(task).await.unwrap();
        assert!(dropped.load(Ordering::SeqCst), "the request kept running");
    }

    #[tokio::test]
    async fn misframed_and_oversized_heads_are_refused_and_closed() {
        let cases: [(&str, Vec<u8>, &str); 6] = [
            (
                "length and chunked",
                b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
                "400",
            ),
            (
                "two lengths",
                b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd".to_vec(),
                "400",
            ),
            (
                "a coding that is not chunked last",
                b"POST /a HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked, gzip\r\n\r\n".to_vec(),
                "400",
            ),
            ("not HTTP", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(), "400"),
            (
                "101 fields",
                [
                    &b"GET / HTTP/1.1\r\nhost: x\r\n"[..],
                    &b"x: y\r\n".repeat(101),
                    &b"\r\n"[..],
                ]
                .concat(),
                "431",
            ),
            (
                "a head over the limit",
                [&b"GET / HTTP/1.1\r\nhost: x\r\nx: "[..], &b"y".repeat(20_000)].concat(),
                "431",
            ),
        ];
        for (what, raw, status) in cases {
            let got = exchange(64 * 1024, echo(), &raw).await;
            let text = String::from_utf8_lossy(&got);
            assert!(
                text.starts_with(&format!("HTTP/1.1 {status} ")),
                "{what}: {text}"
            );
            assert!(text.contains("connection: close"), "{what}: {text}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_not_whole_in_time_closes_the_connection_and_so_does_idleness() {
        let (mut c, task, _closing) = start(64 * 1024, echo());
        c.write_all(b"POST /a HTTP/1.1\r\nhost: ").await.unwrap();
        let clock = crate::clock::Clock::new();
        let started = clock.now();
        let mut got = Vec::new();
        watchdog(c.read_to_end(&mut got)).await.unwrap();
        assert_eq!(clock.since(started), SETTINGS.header_read_timeout);
        assert!(got.is_empty());
        watchdog(task).await.unwrap();

        let (mut c, task, _closing) = start(64 * 1024, echo());
        c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        read_answers(&mut c, 1).await;
        let idle = clock.now();
        let mut rest = Vec::new();
        watchdog(c.read_to_end(&mut rest)).await.unwrap();
        assert_eq!(clock.since(idle), SETTINGS.header_read_timeout);
        watchdog(task).await.unwrap();
    }

    #[tokio::test]
    async fn closing_ends_an_idle_connection_at_once_and_a_busy_one_after_its_answer() {
        let (mut idle, idle_task, closing) = start(64 * 1024, echo());
        idle.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        read_answers(&mut idle, 1).await;

        let release = Arc::new(tokio::sync::Notify::new());
        let wait = Arc::clone(&release);
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let svc = move |_req: Request<FrontBody>| {
            let wait = Arc::clone(&wait);
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                wait.notified().await;
                Response::new(full("done"))
            }
        };
        let (mut busy, busy_task, busy_closing) = start(64 * 1024, svc);
        busy.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        while calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        closing.send(true).unwrap();
        busy_closing.send(true).unwrap();
        let mut rest = Vec::new();
        watchdog(idle.read_to_end(&mut rest)).await.unwrap();
        assert!(rest.is_empty());
        watchdog(idle_task).await.unwrap();
        assert!(!busy_task.is_finished());
        release.notify_one();
        let mut got = Vec::new();
        watchdog(busy.read_to_end(&mut got)).await.unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("connection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\ndone"), "{text}");
        watchdog(busy_task).await.unwrap();
    }

    #[tokio::test]
    async fn a_large_answer_arrives_whole_through_a_small_pipe() {
        let big = Bytes::from(
            (0..200_000u32)
                .map(|i| (i % 251) as u8)
                .collect::<Vec<u8>>(),
        );
        let sent = big.clone();
        let svc =
            move |_req: Request<FrontBody>| std::future::ready(Response::new(full(sent.clone())));
        let got = exchange(
            1024,
            svc,
            b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(String::from_utf8_lossy(&got[..end]).contains("content-length: 200000\r\n"));
        assert!(got[end..] == big[..], "the body differs");
    }

    #[tokio::test]
    async fn an_answer_longer_than_it_declared_ends_the_connection() {
        let svc = answering_with("too long", header::CONTENT_LENGTH, "3");
        let got = exchange(
            64 * 1024,
            svc,
            b"GET / HTTP/1.1\r\nhost: x\r\n\r\nGET / HTTP/1.1\r\nhost: x\r\n\r\n",
        )
        .await;
        let text = String::from_utf8_lossy(&got);
        assert!(text.matches("HTTP/1.1 200").count() <= 1, "{text}");
        assert!(!text.contains("too long"), "{text}");
    }

    #[tokio::test]
    async fn a_head_request_gets_the_length_and_no_body_and_the_connection_goes_on() {
        let svc =
            |_req: Request<FrontBody>| std::future::ready(Response::new(full("twelve bytes")));
        let request = b"HEAD / HTTP/1.1\r\nhost: x\r\n\r\nGET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
        let got = exchange(64 * 1024, svc, request).await;
        let text = String::from_utf8_lossy(&got);
        let (head, get) = text.split_once("\r\n\r\n").expect("the HEAD answer");
        assert!(head.contains("content-length: 12"), "{text}");
        assert!(get.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(get.ends_with("\r\n\r\ntwelve bytes"), "{text}");
    }

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

    #[test]
    fn chunk_size_lines_are_lowercase_hex() {
        let mut line = [0u8; 18];
        assert_eq!(hex_line(0, &mut line), b"0\r\n");
        assert_eq!(hex_line(26, &mut line), b"1a\r\n");
        assert_eq!(hex_line(usize::MAX, &mut line), b"ffffffffffffffff\r\n");
    }
}
