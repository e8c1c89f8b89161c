//! The end of the shutdown grace period. Requests still running when it is
//! over are not simply cut: a request still waiting for its answer gets a 503
//! in its dialect (`x-levee-reason: shutting_down`, `x-should-retry: false`),
//! and a stream still relaying gets an error event in its dialect and its
//! terminating chunk, so every caller can tell what happened. The 503 says in
//! `x-levee-attempts` how many attempts the request had sent.

use crate::http::respond::{Body, LeveeError, Why};
use crate::wake::{Registered, Signal};
use http::Response;
use levee_wire::Dialect;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::sync::Notify;

/// The grace-over signal: set once, when the shutdown grace period ends.
///
/// Every request waits on it beside its answer, and is polled on each of its
/// wake-ups (three or more per request). A `Notify` waiter takes the
/// `Notify`'s lock on every poll (a `watch` receiver takes two), so the
/// waiter is polled only when the task's waker is new, which registers it,
/// and otherwise the flag is read: one atomic load. A request served on a
/// caller's connection registers nothing: the connection's task holds one
/// waiter for its life ([`Watcher::Connection`]).
#[derive(Debug, Default)]
pub struct GraceOver {
    over: AtomicBool,
    notify: Notify,
}

/// Who has the request's task woken when the grace period ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watcher {
    /// The request registers its task itself, for as long as it waits.
    Request,
    /// The task serving the request (a caller's connection) holds a waiter
    /// ([`GraceOver::wait`]) registered for its life, and polls the request
    /// when it is woken: the request only reads the flag.
    Connection,
}

impl GraceOver {
    /// Ends the grace period for every request.
    pub fn fire(&self) {
        // Set before the wake-ups: a woken request reads it as set.
        self.over.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether the grace period has ended.
    pub fn is_over(&self) -> bool {
        self.over.load(Ordering::Acquire)
    }

    /// Resolves when the grace period ends.
    pub(crate) fn wait(self: &Arc<Self>) -> Signal {
        let grace = Arc::clone(self);
        Box::pin(async move { grace.notify.notified().await })
    }

    /// Whether the grace period is over, registering `cx`'s task to be woken
    /// when it ends: `wait` (from `notified()` or [`GraceOver::wait`]) is
    /// polled only when the waker differs from `seen`, the one it was last
    /// polled with.
    fn poll_over<W: Future<Output = ()> + ?Sized>(
        &self,
        wait: Pin<&mut W>,
        seen: &mut Option<Waker>,
        cx: &mut Context<'_>,
    ) -> bool {
        if crate::wake::poll_on_new_waker(wait, seen, cx) {
            return true;
        }
        // Read after registering: a `fire` before the registration set it.
        self.over.load(Ordering::Acquire)
    }

    /// Runs `answer` to its end, or until the grace period ends first
    /// (`None`: `answer` is dropped there), the task woken then by
    /// `watcher`. A streaming response's relay watches the period itself
    /// ([`GraceWatch`]).
    pub async fn race<F: Future>(
        &self,
        mut answer: Pin<&mut F>,
        watcher: Watcher,
    ) -> Option<F::Output> {
        if watcher == Watcher::Connection {
            return std::future::poll_fn(|cx| match answer.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(Some(r)),
                Poll::Pending if self.is_over() => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            })
            .await;
        }
        // Waited on in place (not `self.wait()`): no allocation per request.
        let mut wait = std::pin::pin!(self.notify.notified());
        let mut seen = None;
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = answer.as_mut().poll(cx) {
                return Poll::Ready(Some(r));
            }
            if self.poll_over(wait.as_mut(), &mut seen, cx) {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await
    }
}

/// The 503 a request gets when the grace period ends before its answer:
/// in its dialect, saying how many attempts it had sent.
pub(crate) fn cut_short(dialect: Dialect, sent: u32) -> Response<Body> {
    let msg = "levee: the gateway is shutting down and its grace period is over; this request was not answered in time";
    LeveeError::of(Why::ShuttingDown, msg)
        .attempts(sent)
        .into_response(dialect)
}

/// A committed stream's watch on the grace period: its relay ends the
/// stream with an error event when the period ends. The relay yields whole
/// SSE events per frame, so the event never lands inside another.
pub(crate) struct GraceWatch {
    grace: Arc<GraceOver>,
    waiter: Registered,
}

impl GraceWatch {
    pub(crate) fn new(grace: &Arc<GraceOver>) -> Self {
        GraceWatch {
            grace: Arc::clone(grace),
            waiter: Registered::new(Some(grace.wait())),
        }
    }

    /// Whether the grace period is over, registering `cx`'s task to be
    /// woken when it ends.
    pub(crate) fn over(&mut self, cx: &mut Context<'_>) -> bool {
        self.waiter.register(cx);
        // Read after registering: a `fire` before the registration set it.
        self.grace.is_over()
    }
}
