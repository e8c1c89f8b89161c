//! The request body: whole when its bytes arrived with the head, else fed
//! from the connection while the gateway works on the request (`Feed`, the
//! connection's side; `Inflow`, the bytes between the two), and read by the
//! gateway as a [`FrontBody`].

use super::head::Head;
use super::Conn;
use crate::http::h1wire::{decode_chunked, Kind, Step};
use bytes::Bytes;
use http::Request;
use http_body::{Frame, SizeHint};
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite};

/// Body bytes read ahead of the gateway, at most.
const READ_AHEAD: usize = 64 * 1024;

impl<IO: AsyncRead + AsyncWrite + Unpin> Conn<IO> {
    /// Gives the request its body: whole when the buffer already holds it,
    /// else fed from this connection while the gateway works on it.
    pub(super) fn attach_body(&mut self, head: Head) -> (Request<FrontBody>, Feed) {
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

    /// Moves body bytes from the connection to the request's body.
    pub(super) fn poll_feed(&mut self, cx: &mut Context<'_>, feed: &mut Feed) -> Poll<()> {
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
}

/// The connection's side of a body being read while the gateway works.
pub(super) struct Feed {
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
    pub(super) fn is_done(&self) -> bool {
        self.kind == Kind::Done
    }

    /// The whole body was read: the next bytes are the next request.
    pub(super) fn read_whole(&self) -> bool {
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
