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
//!
//! The parts: reading and checking a request head (`head`), the request
//! body fed from the connection (`body`), writing the answer (`answer`),
//! refusing a head that cannot be taken (`refuse`), and the `date` field
//! formatted once a second (`date`). This file holds the connection loop
//! and the header field line the parts write.

mod answer;
mod body;
mod date;
mod head;
mod refuse;
mod wait;

pub(crate) use body::FrontBody;
pub(crate) use head::parse_head;

use crate::http::h1wire::{line, InBuf};
use crate::http::respond::Body;
use crate::wake::{Registered, Signal};
use body::Feed;
use bytes::{Bytes, BytesMut};
use head::{Head, Refusal, HEAD_TOO_LARGE};
use http::{Method, Request, Response};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use wait::{ClosingWatch, HeadTimer};

/// First read buffer of a connection: a chat request's head and body are
/// usually under 2 KiB.
const READ_BUF: usize = 2048;
/// A read that fills the buffer doubles the next one, up to this.
const MAX_READ_BUF: usize = 64 * 1024;

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
///
/// `in_flight` fires when every request in flight must be polled again:
/// the end of the shutdown grace period, after which the gateway answers
/// each one. Each exchange keeps the connection's task registered with it,
/// one waiter for the connection's life, so that `svc`'s requests need not
/// register one each and only read the period's flag. One waiter a request,
/// added to and removed from a list every worker thread locks, was ~180
/// instructions and four atomic read-modify-writes on a cache line the
/// workers share: 0.5 % of the gateway's CPU samples under load. A service
/// whose requests do not rely on it is served with none.
pub(crate) async fn serve<IO, S, F>(
    io: IO,
    settings: Settings,
    mut svc: S,
    closing: Closing,
    in_flight: Option<Signal>,
) where
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
        head_timer: HeadTimer::new(),
        in_flight: Registered::new(in_flight),
    };
    let mut closing = ClosingWatch::new(closing);
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
        let keep_alive = keep_alive && !unread && !closing.is_closing();
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
    head_timer: HeadTimer,
    /// The grace period's end (`serve`'s `in_flight`).
    in_flight: Registered,
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
        closing: &mut ClosingWatch,
    ) -> Result<Option<Head>, Refusal> {
        let limit = settings.max_header_bytes;
        self.head_timer.start(settings.header_read_timeout);
        loop {
            if !self.read.buf.is_empty() {
                if let Some(head) = parse_head(&mut self.read.buf, limit)? {
                    return Ok(Some(head));
                }
                if self.read.buf.len() > limit {
                    return Err(HEAD_TOO_LARGE);
                }
            } else if closing.is_closing() || self.read_closed {
                return Ok(None);
            }
            let idle = self.read.buf.is_empty();
            // The caller's bytes first, then the timeout; the listener's
            // closing ends only a connection with no request begun.
            let go_on = std::future::poll_fn(|cx| {
                if let Poll::Ready(read) = self.poll_fill(cx) {
                    return Poll::Ready(matches!(read, Ok(n) if n > 0));
                }
                if self.head_timer.poll_late(cx).is_ready() || idle && closing.poll_closing(cx) {
                    return Poll::Ready(false);
                }
                Poll::Pending
            })
            .await;
            if !go_on {
                return Ok(None);
            }
        }
    }

    /// Drives the gateway's answer, reading the body into it as it asks;
    /// `None` when the caller left first.
    async fn exchange<F>(&mut self, mut fut: Pin<&mut F>, feed: &mut Feed) -> Option<Response<Body>>
    where
        F: Future<Output = Response<Body>>,
    {
        std::future::poll_fn(|cx| loop {
            // Registered first: a signal that fires after this wakes the
            // task, and one that fired before is seen by the answer.
            self.in_flight.register(cx);
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

#[cfg(test)]
mod tests;
