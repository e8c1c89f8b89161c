//! Timeouts without a timer of their own: one tokio timer, kept armed
//! across the waits it guards one after another, moved only when a wait
//! needs it earlier or it fires before the wait it now guards is due. A
//! leaf but for `wake`, whose waker check it shares.
//!
//! A `tokio::time::timeout_at` inserts a timer into the runtime's wheel and
//! removes it again, each under the wheel's lock, and registers the task's
//! waker at each poll: ~460 instructions and 13 atomic read-modify-writes a
//! proxied request (callgrind), for a timeout that almost never fires. A
//! caller connection's requests follow one another, and so do their
//! attempts: the connection's task lends one [`LazyTimer`] ([`lending`]),
//! and each attempt's wait for its answer ([`within`]) holds it while it
//! waits. While each wait's deadline is no earlier than the last one's (a
//! route's timeouts are fixed lengths from each attempt's start), a wait
//! costs a comparison of deadlines and of wakers. A wait polled where no
//! timer is lent (the in-process gateway, a background task, a second wait
//! while the first holds it) arms a timer of its own, as before.

use crate::wake::poll_on_new_waker;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tokio::time::{Instant, Sleep};

/// One tokio timer serving a run of waits, each with its own deadline.
/// Its deadline is never later than the deadline of the wait it guards
/// now; it may be earlier (set for an earlier wait), and then, when it
/// fires, it is moved on to the wait's own.
#[derive(Default)]
pub(crate) struct LazyTimer {
    sleep: Option<Pin<Box<Sleep>>>,
    /// The waker the timer is registered under, while it is armed.
    seen: Option<Waker>,
}

impl LazyTimer {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Ready once `due` has passed; else registers `cx`'s task to be woken
    /// by then (at `due`, or earlier to look again).
    pub(crate) fn poll_late(&mut self, cx: &mut Context<'_>, due: Instant) -> Poll<()> {
        let sleep = match &mut self.sleep {
            Some(s) => s,
            None => {
                #[cfg(test)]
                SLEEPS_MADE.set(SLEEPS_MADE.get() + 1);
                self.seen = None;
                self.sleep.insert(Box::pin(tokio::time::sleep_until(due)))
            }
        };
        if sleep.deadline() > due {
            // Armed for a later wait: this one is due first. The wheel
            // keeps the registered waker.
            sleep.as_mut().reset(due);
        }
        loop {
            if !sleep.is_elapsed() && !poll_on_new_waker(sleep.as_mut(), &mut self.seen, cx) {
                return Poll::Pending;
            }
            // Fired: firing took the registered waker.
            self.seen = None;
            if sleep.deadline() >= due {
                return Poll::Ready(());
            }
            // Fired for an earlier wait: this one is due later.
            sleep.as_mut().reset(due);
        }
    }
}

thread_local! {
    /// The timer the task being polled on this thread lends, while no wait
    /// holds it.
    static LENT: Cell<Option<LazyTimer>> = const { Cell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// The waits on this thread that armed a timer of their own.
    static OWN_ARMED: Cell<u32> = const { Cell::new(0) };
    /// The tokio timers lazy timers on this thread made.
    static SLEEPS_MADE: Cell<u32> = const { Cell::new(0) };
}

/// `fut`, lending a [`LazyTimer`] of its own to the waits ([`within`])
/// polled inside it: a caller connection's, whose requests take turns.
/// Pinned by the caller where it is made: an `async fn` keeps an argument
/// moved into a local twice, and a connection's future is ~1.5 KiB (an
/// open stream's heap grew by as much when this took it by value).
pub(crate) async fn lending<F: Future>(mut fut: Pin<&mut F>) -> F::Output {
    let mut timer: Option<LazyTimer> = None;
    std::future::poll_fn(|cx| {
        // A wait cancelled while it held the timer dropped it: a new one.
        let outer = LENT.replace(Some(timer.take().unwrap_or_default()));
        let polled = fut.as_mut().poll(cx);
        timer = LENT.replace(outer);
        polled
    })
    .await
}

/// `fut` did not end by its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Late;

/// `fut`'s output, or [`Late`] once `due` has passed first: as
/// `tokio::time::timeout_at`, on the task's lent timer when it lends one.
/// The wait holds the timer until it ends, so that waits that overlap
/// (one inside another, or side by side) never share one: the second
/// arms a timer of its own.
pub(crate) async fn within<F: Future>(due: Instant, fut: F) -> Result<F::Output, Late> {
    let mut fut = std::pin::pin!(fut);
    let mut held: Option<LazyTimer> = None;
    let mut own: Pin<&mut Option<Sleep>> = std::pin::pin!(None);
    let out = std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        if held.is_none() && own.is_none() {
            held = LENT.take();
            if held.is_none() {
                #[cfg(test)]
                OWN_ARMED.set(OWN_ARMED.get() + 1);
                own.set(Some(tokio::time::sleep_until(due)));
            }
        }
        let late = match (held.as_mut(), own.as_mut().as_pin_mut()) {
            (Some(timer), _) => timer.poll_late(cx, due),
            (None, Some(sleep)) => sleep.poll(cx),
            (None, None) => Poll::Pending,
        };
        late.map(|()| Err(Late))
    })
    .await;
    // Ended inside the lending task's poll: the timer goes back for the
    // next wait (a new one the task made meanwhile is dropped).
    if let Some(timer) = held {
        LENT.set(Some(timer));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::pending;
    use std::time::Duration;
    use tokio::time::sleep;

    const S: Duration = Duration::from_secs(1);

    fn now() -> Instant {
        crate::clock::Clock::tokio_now()
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_due_before_the_lent_timer_is_armed_ends_at_its_own_deadline() {
        let t0 = now();
        lending(std::pin::pin!(async move {
            // Arms the timer for +100 s, and ends at +1 s.
            assert_eq!(within(t0 + 100 * S, sleep(S)).await, Ok(()));
            assert_eq!(within(now() + 5 * S, pending::<()>()).await, Err(Late));
            assert_eq!(t0.elapsed(), 6 * S);
        }))
        .await;
        assert_eq!(OWN_ARMED.get(), 0, "both waits were on the lent timer");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_due_after_the_lent_timer_fires_is_not_late_until_its_own_deadline() {
        let t0 = now();
        lending(std::pin::pin!(async move {
            // Arms the timer for +5 s, and ends at +1 s: the timer fires at
            // +5 s in the second wait, which is due at +51 s.
            assert_eq!(within(t0 + 5 * S, sleep(S)).await, Ok(()));
            assert_eq!(within(now() + 50 * S, pending::<()>()).await, Err(Late));
            assert_eq!(t0.elapsed(), 51 * S);
            // And again, on the same timer.
            let due = now() + 7 * S;
            assert_eq!(within(due, sleep(2 * S)).await, Ok(()));
            assert_eq!(within(due + 10 * S, pending::<()>()).await, Err(Late));
            assert_eq!(t0.elapsed(), 68 * S);
        }))
        .await;
        assert_eq!(OWN_ARMED.get(), 0, "every wait was on the lent timer");
        assert_eq!(SLEEPS_MADE.get(), 1, "one timer served the four waits");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_where_no_timer_is_lent_arms_its_own() {
        let t0 = now();
        assert_eq!(within(t0 + 3 * S, pending::<()>()).await, Err(Late));
        assert_eq!(t0.elapsed(), 3 * S);
        assert_eq!(within(t0 + 10 * S, sleep(S)).await, Ok(()));
        assert_eq!(OWN_ARMED.get(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn waits_that_overlap_do_not_share_the_lent_timer() {
        let t0 = now();
        lending(std::pin::pin!(async move {
            // The inner wait holds the lent timer; the outer arms its own.
            let outer = within(t0 + 10 * S, within(t0 + 4 * S, pending::<()>())).await;
            assert_eq!(outer, Ok(Err(Late)));
            assert_eq!(t0.elapsed(), 4 * S);
            let outer = within(t0 + 8 * S, within(t0 + 40 * S, pending::<()>())).await;
            assert_eq!(outer, Err(Late));
            assert_eq!(t0.elapsed(), 8 * S);
        }))
        .await;
        assert_eq!(OWN_ARMED.get(), 2, "each outer wait armed one");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_cancelled_while_it_holds_the_lent_timer_leaves_the_next_one_a_timer() {
        let t0 = now();
        lending(std::pin::pin!(async move {
            tokio::select! {
                _ = within(t0 + 100 * S, pending::<()>()) => panic!("not due"),
                () = sleep(S) => {}
            }
            assert_eq!(within(now() + 5 * S, pending::<()>()).await, Err(Late));
            assert_eq!(t0.elapsed(), 6 * S);
        }))
        .await;
        assert_eq!(OWN_ARMED.get(), 0);
    }
}
