//! Waiting on a signal many tasks share (a tokio `Notify` or `watch`)
//! without taking its lock on every poll. A leaf: it imports nothing of
//! the crate.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};

/// Polls `wait`, a waiter on a shared signal, only when `cx`'s waker is not
/// `seen`, the one it was last polled with and is registered under (a
/// tokio `Notify` or `watch` waiter takes its list's lock on every poll);
/// `true` when it was polled and is ready. A caller with the same waker
/// reads the signal's own state instead.
pub(crate) fn poll_on_new_waker<W: Future + ?Sized>(
    wait: Pin<&mut W>,
    seen: &mut Option<Waker>,
    cx: &mut Context<'_>,
) -> bool {
    if seen.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
        return false;
    }
    if wait.poll(cx).is_ready() {
        return true;
    }
    *seen = Some(cx.waker().clone());
    false
}
