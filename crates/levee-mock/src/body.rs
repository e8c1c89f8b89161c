//! The response body type: a whole buffer, or a stream of chunks with an
//! optional delay between them and an optional cut (the connection is dropped
//! mid-stream), each chunk optionally re-framed into a cloud's framing. It carries the request's stats guard, so a client that leaves
//! before the last byte is counted as `client_closed`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use crate::stats::RequestGuard;

/// Returned by a stream body to make hyper abort the connection.
#[derive(Debug, thiserror::Error)]
#[error("levee mock cut the stream on purpose (cut_stream_after)")]
pub(crate) struct StreamCut;

pub(crate) struct MockBody {
    kind: Kind,
    guard: Option<RequestGuard>,
}

enum Kind {
    Full(Option<Bytes>),
    Stream(Stream),
}

/// Re-frames a stream's chunks: a cloud's framing over the dialect's SSE
/// (Bedrock's event stream).
pub(crate) trait Reframe: Send + 'static {
    /// The bytes sent for one chunk of the dialect's answer.
    fn chunk(&mut self, chunk: &[u8]) -> Bytes;
    /// What is sent in place of a deliberate cut (the stream then ends
    /// normally); `None` cuts the connection as usual.
    fn cut(&mut self) -> Option<Bytes>;
}

struct Stream {
    chunks: std::vec::IntoIter<Bytes>,
    reframe: Option<Box<dyn Reframe>>,
    delay: Option<Duration>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// Drop the connection once this many chunks are out.
    cut_after: Option<usize>,
    sent: usize,
    /// One `Pending` before cutting, so hyper flushes the chunks already sent.
    flushed: bool,
}

impl MockBody {
    /// A body for `/_mock/*` answers: not tracked in stats.
    pub(crate) fn untracked(bytes: Bytes) -> MockBody {
        MockBody {
            kind: Kind::Full(Some(bytes)),
            guard: None,
        }
    }

    pub(crate) fn full(bytes: Bytes, mut guard: RequestGuard) -> MockBody {
        if bytes.is_empty() {
            // hyper will not poll an empty body; it is complete already.
            guard.done();
            return MockBody {
                kind: Kind::Full(None),
                guard: Some(guard),
            };
        }
        MockBody {
            kind: Kind::Full(Some(bytes)),
            guard: Some(guard),
        }
    }

    /// `cut_after: Some(n)` sends `min(n, len)` chunks, then aborts.
    pub(crate) fn stream(
        chunks: Vec<Bytes>,
        delay: Option<Duration>,
        cut_after: Option<usize>,
        guard: RequestGuard,
    ) -> MockBody {
        let cut_after = cut_after.map(|n| n.min(chunks.len()));
        MockBody {
            kind: Kind::Stream(Stream {
                chunks: chunks.into_iter(),
                reframe: None,
                delay,
                sleep: None,
                cut_after,
                sent: 0,
                flushed: false,
            }),
            guard: Some(guard),
        }
    }

    /// The same body with each chunk re-framed by `reframe` (a whole body is
    /// one chunk).
    pub(crate) fn reframed(mut self, mut reframe: Box<dyn Reframe>) -> MockBody {
        match &mut self.kind {
            Kind::Full(Some(bytes)) => *bytes = reframe.chunk(bytes),
            Kind::Full(None) => {}
            Kind::Stream(stream) => stream.reframe = Some(reframe),
        }
        self
    }

    /// The same body with a whole body's bytes replaced by `f` of them (a
    /// cloud's error shape); a stream is left as it is.
    /// The whole body, when it is one piece.
    pub(crate) fn full_bytes(&self) -> Option<&Bytes> {
        match &self.kind {
            Kind::Full(b) => b.as_ref(),
            Kind::Stream(_) => None,
        }
    }

    pub(crate) fn map_full(mut self, f: impl FnOnce(&[u8]) -> Bytes) -> MockBody {
        if let Kind::Full(Some(bytes)) = &mut self.kind {
            *bytes = f(bytes);
        }
        self
    }

    fn done(&mut self) {
        if let Some(g) = &mut self.guard {
            g.done();
        }
    }
}

impl Body for MockBody {
    type Data = Bytes;
    type Error = StreamCut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamCut>>> {
        let this = self.get_mut();
        let stream = match &mut this.kind {
            Kind::Full(data) => {
                let frame = data.take().map(|b| Ok(Frame::data(b)));
                this.done();
                return Poll::Ready(frame);
            }
            Kind::Stream(stream) => stream,
        };
        if let Some(sleep) = &mut stream.sleep {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            stream.sleep = None;
        }
        if stream.cut_after == Some(stream.sent) {
            if let Some(last) = stream.reframe.as_mut().and_then(|r| r.cut()) {
                // The cloud reports the fault in its own framing and ends
                // the stream: what was left is not sent.
                stream.cut_after = None;
                stream.chunks = Vec::new().into_iter();
                return Poll::Ready(Some(Ok(Frame::data(last))));
            }
            if !stream.flushed {
                stream.flushed = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if let Some(g) = &mut this.guard {
                g.intentional_close();
            }
            return Poll::Ready(Some(Err(StreamCut)));
        }
        match stream.chunks.next() {
            Some(chunk) => {
                stream.sent += 1;
                let chunk = match &mut stream.reframe {
                    Some(r) => r.chunk(&chunk),
                    None => chunk,
                };
                let more = stream.chunks.len() > 0 || stream.cut_after.is_some();
                if let (Some(delay), true) = (stream.delay, more) {
                    stream.sleep = Some(Box::pin(tokio::time::sleep(delay)));
                }
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            None => {
                this.done();
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.kind, Kind::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            Kind::Full(None) => SizeHint::with_exact(0),
            Kind::Stream(_) => SizeHint::default(),
        }
    }
}
