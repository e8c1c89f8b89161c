//! The bodies of an upstream exchange: the attempt's request body, which
//! times how long the attempt waited for a connection, and the provider's
//! answer body in whichever protocol the attempt used, or as a platform
//! re-frames it ([`Reframe`]).

use crate::clock::Clock;
use crate::error::BoxError;
use crate::http::rawfields::RawFields;
use crate::observe::histogram::Histogram;
use crate::upstream::h1conn::H1Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

/// An attempt's request body that times how long the attempt waited for a
/// connection: taken from the pool at once, after waiting for one, or newly
/// connected (TCP plus TLS). Counting only new connections would leave out
/// the pool wait, where a starved gateway shows first. The attempt marks
/// the moment a connection is handed to it ([`ConnTimed::connected`]), once:
/// a request sent once more on another connection (refused unprocessed) is
/// not timed twice.
#[derive(Debug, Clone)]
pub struct ConnTimed {
    bytes: Bytes,
    /// Whether the body's one frame has been polled.
    sent: bool,
    /// The attempt's reading of the clock, until the pool first has to
    /// wait for a connection; from then on the clock's reading there.
    started: levee_policy::Instant,
    /// `started` is the pool's own reading.
    waiting: bool,
    clock: Clock,
    /// Taken when a connection is obtained: observed once.
    hist: Option<Histogram>,
}

impl ConnTimed {
    /// A request body of the attempt that read the clock at `started`,
    /// whose wait for a connection `hist` observes.
    pub(crate) fn new(
        bytes: Bytes,
        started: levee_policy::Instant,
        clock: Clock,
        hist: Histogram,
    ) -> ConnTimed {
        ConnTimed {
            bytes,
            sent: false,
            started,
            waiting: false,
            clock,
            hist: Some(hist),
        }
    }

    /// When the attempt started waiting for a connection.
    pub(crate) fn started(&self) -> levee_policy::Instant {
        self.started
    }

    /// The pool found no connection at hand: the wait is timed from now
    /// (the attempt's own reading may be older by a Redis check or a
    /// cloud's signing). Only the first call reads the clock.
    pub(crate) fn waiting(&mut self) {
        if !self.waiting {
            self.waiting = true;
            self.started = self.clock.now();
        }
    }

    /// A connection was obtained for the request (observed once).
    pub(crate) fn connected(&mut self) {
        if self.hist.is_some() {
            self.connected_at(self.clock.now());
        }
    }

    /// A connection was obtained for the request at `now` (observed once).
    pub(crate) fn connected_at(&mut self, now: levee_policy::Instant) {
        if let Some(hist) = self.hist.take() {
            hist.observe(now.saturating_since(self.started).as_secs_f64());
        }
    }
}

impl AsRef<[u8]> for ConnTimed {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl HttpBody for ConnTimed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if std::mem::replace(&mut this.sent, true) {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Frame::data(this.bytes.clone()))))
    }

    fn is_end_stream(&self) -> bool {
        self.sent
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(if self.sent {
            0
        } else {
            self.bytes.len() as u64
        })
    }
}

/// A provider's answer body, in the protocol the attempt used.
pub enum UpstreamBody {
    H1(H1Body),
    H2(Incoming),
    /// An answer a platform re-frames as it is read (Bedrock's event
    /// stream as SSE, an error in the dialect's shape).
    Reframed(Box<Reframed>),
    /// A body a unit test makes (frames it chooses); production answers
    /// are only the three above.
    #[cfg(test)]
    Mapped(Pin<Box<dyn HttpBody<Data = Bytes, Error = BoxError> + Send>>),
}

impl UpstreamBody {
    /// Takes the answer's fields relayed as bytes, leaving none. Only an
    /// HTTP/1 answer has any: an HTTP/2 answer's are all in its map, and a
    /// platform puts them there before it re-frames a body.
    pub(crate) fn take_raw(&mut self) -> RawFields {
        match self {
            UpstreamBody::H1(b) => b.take_raw(),
            _ => RawFields::default(),
        }
    }

    /// This body's data as `by` rewrites it.
    pub(crate) fn reframed(self, by: impl Reframe + 'static) -> UpstreamBody {
        UpstreamBody::Reframed(Box::new(Reframed {
            inner: Some(self),
            by: Box::new(by),
            passing: false,
        }))
    }
}

impl HttpBody for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            UpstreamBody::H1(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            UpstreamBody::H2(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            UpstreamBody::Reframed(r) => r.poll_frame(cx),
            #[cfg(test)]
            UpstreamBody::Mapped(b) => b.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::H1(b) => b.is_end_stream(),
            UpstreamBody::H2(b) => b.is_end_stream(),
            UpstreamBody::Reframed(r) => r.inner.is_none(),
            #[cfg(test)]
            UpstreamBody::Mapped(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::H1(b) => b.size_hint(),
            UpstreamBody::H2(b) => b.size_hint(),
            UpstreamBody::Reframed(_) => SizeHint::default(),
            #[cfg(test)]
            UpstreamBody::Mapped(b) => b.size_hint(),
        }
    }
}

/// What a [`Reframe`] makes of what the body under it gave.
pub(crate) enum Step {
    /// Nothing to give yet: read on.
    More,
    /// A frame to give; then read on.
    Give(Bytes),
    /// The last frame, if any: the body ends with it.
    Last(Option<Bytes>),
    /// An error: the body ends with it.
    Fail(BoxError),
    /// A frame to give, then the rest of the body under it as it comes.
    Pass(Bytes),
}

/// A rewriting of an answer body's data as it is read, one step for each
/// data frame of the body under it (other frames are dropped) and one at
/// its end.
pub(crate) trait Reframe: Send {
    /// The body under it gave `data`.
    fn data(&mut self, data: Bytes) -> Step;

    /// The body under it ended.
    fn end(&mut self) -> Step;

    /// The body under it failed with `e`; by default this body fails with
    /// it.
    fn failed(&mut self, e: BoxError) -> Step {
        Step::Fail(e)
    }
}

/// An answer body read through a [`Reframe`] ([`UpstreamBody::reframed`]).
pub struct Reframed {
    /// `None` once the body is over: the body under it is dropped then.
    inner: Option<UpstreamBody>,
    by: Box<dyn Reframe>,
    /// The reframing gave [`Step::Pass`]: the body under it is relayed as
    /// it comes.
    passing: bool,
}

impl Reframed {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        loop {
            let Some(inner) = self.inner.as_mut() else {
                return Poll::Ready(None);
            };
            let polled = Pin::new(inner).poll_frame(cx);
            if self.passing {
                return polled;
            }
            let step = match polled {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => self.by.data(data),
                    Err(_) => continue,
                },
                Poll::Ready(Some(Err(e))) => self.by.failed(e),
                Poll::Ready(None) => self.by.end(),
            };
            return Poll::Ready(match step {
                Step::More => continue,
                Step::Give(data) => Some(Ok(Frame::data(data))),
                Step::Pass(data) => {
                    self.passing = true;
                    Some(Ok(Frame::data(data)))
                }
                Step::Last(data) => {
                    self.inner = None;
                    data.map(|d| Ok(Frame::data(d)))
                }
                Step::Fail(e) => {
                    self.inner = None;
                    Some(Err(e))
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The histogram's `_sum` as Prometheus text shows it.
    fn sum_of(h: &Histogram) -> f64 {
        let mut r = prometheus_client::registry::Registry::default();
        r.register("w", "help", h.clone());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).expect("encode");
        out.lines()
            .find_map(|l| l.strip_prefix("w_sum "))
            .and_then(|v| v.parse().ok())
            .expect("a _sum line")
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_is_timed_from_the_pools_first_look_not_the_attempts_reading() {
        let clock = Clock::new();
        let hist = Histogram::new([1.0, 10.0]);
        let mut body = ConnTimed::new(Bytes::new(), clock.now(), clock, hist.clone());
        // The attempt waited 5 s for something else (a Redis check, a
        // cloud's signing) before the pool found no connection at hand.
        tokio::time::advance(Duration::from_secs(5)).await;
        body.waiting();
        tokio::time::advance(Duration::from_secs(1)).await;
        body.waiting(); // a second look does not move the start
        tokio::time::advance(Duration::from_secs(1)).await;
        body.connected();
        assert_eq!(sum_of(&hist), 2.0);
    }
}
