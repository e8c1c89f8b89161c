//! What a connection waits on between requests besides its caller's bytes:
//! the header read timeout and the listener's closing signal, each
//! registered once for the connection's life rather than once per request.
//!
//! A `tokio::time::sleep` per head and a `watch::Receiver::changed` per wait
//! cost ~1,000 instructions a keep-alive request (a timer inserted into and
//! removed from the wheel, a waiter added to and removed from the watch's
//! list, each under a lock). Here the timer is armed once and moved on only
//! when it fires before the head it now guards was due, and the closing
//! waiter is polled only when the connection's task has a new waker; a
//! request's waits read a field and an atomic.

use super::Closing;
use crate::timer::LazyTimer;
use crate::wake::{poll_on_new_waker, Signal};
use std::task::{Context, Poll, Waker};
use tokio::time::Instant;

/// The header read timeout of one connection: a head must be whole by
/// `due`, set when its wait begins.
pub(super) struct HeadTimer {
    due: Instant,
    /// Armed at the connection's first wait, and polled again only when it
    /// fired or the task's waker changed.
    timer: LazyTimer,
}

impl HeadTimer {
    pub(super) fn new() -> Self {
        HeadTimer {
            due: crate::clock::Clock::tokio_now(),
            timer: LazyTimer::new(),
        }
    }

    /// A head's wait begins: it must be whole `within` from now.
    pub(super) fn start(&mut self, within: std::time::Duration) {
        self.due = crate::clock::Clock::tokio_now() + within;
    }

    /// Ready once the head being waited for is late.
    pub(super) fn poll_late(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.timer.poll_late(cx, self.due)
    }
}

/// The listener's closing signal as one connection watches it.
pub(super) struct ClosingWatch {
    rx: Closing,
    /// Resolves on the signal's next change; registered with the task's
    /// waker it was last polled with (`seen`).
    wait: Option<Signal>,
    seen: Option<Waker>,
    /// The listener is closing (or gone): it stays so.
    closed: bool,
}

impl ClosingWatch {
    pub(super) fn new(rx: Closing) -> Self {
        ClosingWatch {
            rx,
            wait: None,
            seen: None,
            closed: false,
        }
    }

    /// Whether the listener is closing: an atomic load while nothing changed.
    pub(super) fn is_closing(&mut self) -> bool {
        if !self.closed {
            match self.rx.has_changed() {
                Ok(false) => {}
                Ok(true) => self.closed = *self.rx.borrow_and_update(),
                Err(_) => self.closed = true,
            }
        }
        self.closed
    }

    /// Whether the listener is closing, registering `cx`'s task to be woken
    /// when that changes.
    pub(super) fn poll_closing(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.is_closing() {
                return true;
            }
            let wait = self.wait.get_or_insert_with(|| {
                // A receiver of its own, as up to date as `rx`.
                let mut rx = self.rx.clone();
                Box::pin(async move {
                    let _ = rx.changed().await;
                })
            });
            if !poll_on_new_waker(wait.as_mut(), &mut self.seen, cx) {
                return false;
            }
            // It changed since: read it, and wait on a new receiver.
            self.wait = None;
            self.seen = None;
        }
    }
}
