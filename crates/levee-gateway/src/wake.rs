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

/// A boxed wait on a shared signal: resolves when it fires.
pub(crate) type Signal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A task's waiter on a signal that fires once, kept registered across the
/// task's polls: polled only when the task's waker is new
/// ([`poll_on_new_waker`]), and never again once the signal fired. Whoever
/// holds one reads the signal's own flag to learn that it fired.
pub(crate) struct Registered {
    /// `None` once the signal fired, or when there is nothing to wait on.
    wait: Option<Signal>,
    seen: Option<Waker>,
}

impl Registered {
    pub(crate) fn new(wait: Option<Signal>) -> Self {
        Registered { wait, seen: None }
    }

    /// Registers `cx`'s task to be woken when the signal fires: a waker
    /// comparison while the task's waker is the one registered.
    pub(crate) fn register(&mut self, cx: &mut Context<'_>) {
        if let Some(wait) = self.wait.as_mut() {
            if poll_on_new_waker(wait.as_mut(), &mut self.seen, cx) {
                self.wait = None;
                self.seen = None;
            }
        }
    }
}
