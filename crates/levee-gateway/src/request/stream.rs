//! Relaying a committed SSE stream: event by event, no buffering beyond the event being framed, and an
//! error event in the caller's dialect if the upstream fails or stalls after
//! the first byte, or the caller's deadline comes — never a restart (a
//! retried stream duplicates text).

use crate::clock::Clock;
use crate::http::sse::EventFramer;
use crate::observe::event::{RequestEvent, StreamOutcome, TokensUsed};
use crate::request::attempt::AttemptFinisher;
use crate::request::observer::Observer;
use crate::upstream::UpstreamBody;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use levee_policy::Outcome;
use levee_wire::Dialect;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// What the relay starts from: the first whole event(s) already read (the
/// commit point), the framer holding any partial tail, and the stream's settings.
pub struct RelayStart {
    pub first: Bytes,
    pub framer: EventFramer,
    pub idle: Duration,
    /// When the caller stops waiting (its deadline less the return margin):
    /// the stream ends there with a `deadline_exceeded` error event.
    pub deadline: tokio::time::Instant,
    pub dialect: Dialect,
    pub clock: Clock,
    /// Translates the upstream's events into the caller's dialect, event by
    /// event, when the target speaks the other dialect.
    pub translate: Option<levee_translate::StreamTranslator>,
    /// Leave OpenAI's usage chunk out (Levee asked for it, the caller did
    /// not).
    pub strip_usage: bool,
}

/// The body of a committed stream.
pub struct RelayBody {
    first: Option<Bytes>,
    upstream: UpstreamBody,
    idle: Duration,
    stall: Pin<Box<Sleep>>,
    deadline: Pin<Box<Sleep>>,
    dialect: Dialect,
    done: bool,
    framer: EventFramer,
    clock: Clock,
    /// Boxed: a translated stream is rare, and inline the translator (with
    /// the tape line the relay once held, 432 bytes) was carried by every
    /// open stream.
    translate: Option<Box<levee_translate::StreamTranslator>>,
    finisher: Option<AttemptFinisher>,
    /// `--record`: the provider's events so far, as relayed, for the
    /// request's observer to finish the tape line with.
    chunks: Option<Vec<String>>,
    /// The tokens the provider's events reported, to settle the allowance.
    usage: crate::upstream::allowance::StreamUsage,
    /// The request's observer, given to the relay with the answer's head
    /// ([`RelayBody::observed_by`]); told how the stream ended. Boxed: held
    /// inline, its 1.2 KiB were part of every request's future (the
    /// driver's future holds a relay being built), and a plain request
    /// paid for copying them.
    observer: Option<Box<Observer>>,
    /// The shutdown grace period, which ends the stream when it is over.
    grace: crate::runtime::shutdown::GraceWatch,
    /// The tokens the stream's usage settled, reported with its end.
    tokens: Option<crate::observe::event::TokensUsed>,
    /// Bytes relayed to the caller so far.
    bytes: u64,
    /// How the stream ended, reported once its last frame is counted.
    end: Option<StreamOutcome>,
    /// The commit point.
    committed_at: levee_policy::Instant,
    _holds: Holds,
    /// Leave OpenAI's usage chunk out of what the caller gets.
    strip_usage: bool,
}

/// What a committed stream keeps until it ends: its route bulkhead slot and
/// its idempotency key.
pub struct Holds {
    pub _bulkhead: Option<levee_policy::ConcurrencyGuard>,
    pub _lease: Option<crate::state::idempotency::Lease>,
}

impl RelayBody {
    /// Starts relaying after the commit point.
    pub fn new(
        start: RelayStart,
        upstream: UpstreamBody,
        finisher: AttemptFinisher,
        recording: bool,
        holds: Holds,
        grace: crate::runtime::shutdown::GraceWatch,
    ) -> Self {
        let RelayStart {
            first,
            framer,
            idle,
            deadline,
            dialect,
            clock,
            mut translate,
            strip_usage,
        } = start;
        let chunks = recording.then(|| vec![String::from_utf8_lossy(&first).into_owned()]);
        let mut usage = crate::upstream::allowance::StreamUsage::default();
        usage.push(&first);
        // The tape keeps what the provider sent; the caller gets it translated.
        let first = match translate.as_mut() {
            Some(t) => t.push(&first),
            None if strip_usage => crate::http::sse::without_usage_chunk(first),
            None => first,
        };
        RelayBody {
            clock,
            translate: translate.map(Box::new),
            first: Some(first),
            upstream,
            idle,
            stall: Box::pin(tokio::time::sleep_until(clock.to_tokio(clock.now()) + idle)),
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            dialect,
            done: false,
            framer,
            finisher: Some(finisher),
            chunks,
            usage,
            observer: None,
            grace,
            tokens: None,
            bytes: 0,
            end: None,
            committed_at: clock.now(),
            strip_usage,
            _holds: holds,
        }
    }

    /// The request's observer, which the stream's end reports to: from the
    /// commit point the relay owns the request's books.
    pub fn observed_by(&mut self, observer: Observer) {
        self.observer = Some(Box::new(observer));
    }

    /// The stream was cut short before its end: what arrived settles the
    /// attempt's estimate and is counted, as a partial count.
    fn settle_cut(&mut self) {
        if let Some(f) = self.finisher.as_mut() {
            let cached = self.usage.cached();
            self.tokens = f
                .settle_partial(Some(self.usage.arrived()))
                .map(|t| TokensUsed { cached, ..t });
        }
    }

    /// Tells the request's observer how the stream ended (once).
    fn report_end(&mut self, outcome: StreamOutcome) {
        let Some(mut obs) = self.observer.take() else {
            return;
        };
        if let Some(tokens) = self.tokens.take() {
            obs.report(RequestEvent::TokensUsed(tokens));
        }
        obs.report(RequestEvent::StreamEnded {
            outcome,
            bytes: self.bytes,
            duration: self.clock.since(self.committed_at),
            chunks: self.chunks.as_deref(),
        });
    }

    /// The shutdown grace period ended mid-stream: end it (dropping the
    /// upstream request) with an error event. Not the provider's fault.
    fn cut_at_grace(&mut self) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.done = true;
        self.settle_cut();
        if let Some(f) = self.finisher.take() {
            f.finish(Outcome::SkippedNoDeadline, true);
        }
        self.end = Some(StreamOutcome::ShuttingDown);
        let msg = "levee: shutting_down: the gateway is shutting down and its grace period is over; the stream ends here (the partial answer above is all there is)";
        Poll::Ready(Some(Ok(Frame::data(self.dialect.stream_error_event(msg)))))
    }

    fn fail(&mut self, outcome: StreamOutcome) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.done = true;
        self.settle_cut();
        if let Some(f) = self.finisher.take() {
            f.finish(Outcome::FailedAfterFirstByte, true);
        }
        self.end = Some(outcome);
        let why = if outcome == StreamOutcome::Stalled {
            "stalled"
        } else {
            "broke off"
        };
        let msg = format!("levee: upstream_error: the provider's stream {why}; the partial answer above is all there is (streams are never restarted)");
        Poll::Ready(Some(Ok(Frame::data(self.dialect.stream_error_event(&msg)))))
    }

    /// The caller's deadline came mid-stream: end it (dropping the upstream
    /// request) with an error event. Not the provider's fault: the breaker
    /// does not count it.
    fn cut_at_deadline(&mut self) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.done = true;
        self.settle_cut();
        if let Some(f) = self.finisher.take() {
            f.finish(Outcome::SkippedNoDeadline, true);
        }
        self.end = Some(StreamOutcome::DeadlineExceeded);
        let msg = "levee: deadline_exceeded: the caller's deadline passed mid-stream; the partial answer above is all there is (streams are never restarted)";
        let event = self.dialect.stream_error(504, "deadline_exceeded", msg);
        Poll::Ready(Some(Ok(Frame::data(event))))
    }
}

impl Drop for RelayBody {
    fn drop(&mut self) {
        // Dropped before its end: the caller stopped reading.
        self.settle_cut();
        self.report_end(StreamOutcome::CallerLeft);
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
        let polled = this.poll_next(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(d) = frame.data_ref() {
                this.bytes += d.len() as u64;
            }
        }
        if let Some(end) = this.end.take() {
            this.report_end(end);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.first.is_none()
    }
}

impl RelayBody {
    /// The provider ended the stream: its last partial event and the
    /// translator's closing events go out, the attempt is recorded as the
    /// answer (its usage settling the allowance), and the stream completes.
    fn complete(&mut self) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.done = true;
        let tail = self.framer.flush();
        if let Some(chunks) = self.chunks.as_mut() {
            if !tail.is_empty() {
                chunks.push(String::from_utf8_lossy(&tail).into_owned());
            }
        }
        // The translator's last events (or its error event if the
        // upstream stopped before its final one) end the stream.
        let last = self.translate.as_mut().map(|t| {
            let mut b = t.push(&tail).to_vec();
            b.extend_from_slice(&t.finish());
            Bytes::from(b)
        });
        self.usage.push(&tail);
        if let Some(mut f) = self.finisher.take() {
            if let Some(used) = self.usage.get() {
                let cached = self.usage.cached();
                self.tokens = f.settle(used).map(|t| TokensUsed { cached, ..t });
            }
            f.finish(
                Outcome::Status {
                    status: 200,
                    retry_after: None,
                },
                true,
            );
        }
        self.end = Some(StreamOutcome::Completed);
        match last.filter(|b| !b.is_empty()) {
            Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            None => Poll::Ready(None),
        }
    }

    /// The next frame for the caller.
    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self;
        if let Some(b) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        if this.grace.over(cx) {
            return this.cut_at_grace();
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            return this.cut_at_deadline();
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
                        this.usage.push(&whole);
                        if let Some(chunks) = this.chunks.as_mut() {
                            chunks.push(String::from_utf8_lossy(&whole).into_owned());
                        }
                        let whole = match this.translate.as_mut() {
                            Some(t) => t.push(&whole),
                            None if this.strip_usage => {
                                crate::http::sse::without_usage_chunk(whole)
                            }
                            None => whole,
                        };
                        if whole.is_empty() {
                            continue;
                        }
                        return Poll::Ready(Some(Ok(Frame::data(whole))));
                    }
                    // Trailers: SSE has none worth relaying.
                }
                Poll::Ready(Some(Err(_))) => return this.fail(StreamOutcome::BrokeOff),
                Poll::Ready(None) => return this.complete(),
                Poll::Pending => {
                    if this.stall.as_mut().poll(cx).is_ready() {
                        return this.fail(StreamOutcome::Stalled);
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}
