//! Relaying a committed SSE stream: chunk by chunk, no buffering, and an
//! error event in the caller's dialect if the upstream fails or stalls after
//! the first byte — never a restart (seed 000: a retried stream duplicates text).

use crate::attempt::AttemptFinisher;
use crate::clock::Clock;
use crate::dialect::Dialect;
use crate::sse::EventFramer;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use hyper::body::Incoming;
use levee_policy::Outcome;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// The body of a committed stream.
pub struct RelayBody {
    first: Option<Bytes>,
    upstream: Incoming,
    idle: Duration,
    stall: Pin<Box<Sleep>>,
    dialect: Dialect,
    done: bool,
    framer: EventFramer,
    clock: Clock,
    finisher: Option<AttemptFinisher>,
}

impl RelayBody {
    /// `first` is the chunk already read (the commit point).
    pub fn new(
        first: Bytes,
        framer: EventFramer,
        upstream: Incoming,
        idle: Duration,
        dialect: Dialect,
        clock: Clock,
        finisher: AttemptFinisher,
    ) -> Self {
        RelayBody {
            clock,
            first: Some(first),
            upstream,
            idle,
            stall: Box::pin(tokio::time::sleep_until(clock.to_tokio(clock.now()) + idle)),
            dialect,
            done: false,
            framer,
            finisher: Some(finisher),
        }
    }

    fn fail(&mut self, why: &str) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.done = true;
        if let Some(f) = self.finisher.take() {
            f.finish(Outcome::FailedAfterFirstByte, true);
        }
        let msg = format!("levee: upstream_error: the provider's stream {why}; the partial answer above is all there is (streams are never restarted)");
        Poll::Ready(Some(Ok(Frame::data(self.dialect.stream_error_event(&msg)))))
    }
}

impl HttpBody for RelayBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if let Some(b) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match Pin::new(&mut this.upstream).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        let deadline = this.clock.to_tokio(this.clock.now()) + this.idle;
                        this.stall.as_mut().reset(deadline);
                        let whole = this.framer.push(&data);
                        if whole.is_empty() {
                            continue;
                        }
                        return Poll::Ready(Some(Ok(Frame::data(whole))));
                    }
                    // Trailers: SSE has none worth relaying.
                }
                Poll::Ready(Some(Err(_))) => return this.fail("broke off"),
                Poll::Ready(None) => {
                    this.done = true;
                    if let Some(f) = this.finisher.take() {
                        f.finish(
                            Outcome::Status {
                                status: 200,
                                retry_after: None,
                            },
                            true,
                        );
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    if this.stall.as_mut().poll(cx).is_ready() {
                        return this.fail("stalled");
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.first.is_none()
    }
}
