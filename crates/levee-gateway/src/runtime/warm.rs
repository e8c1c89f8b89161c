//! A timer each busy worker keeps due within 100 ms, so that registering an
//! attempt's timer costs no system call.
//!
//! tokio's timer driver writes to its runtime's eventfd whenever a timer is
//! registered earlier than the wake-up the driver planned when it last
//! parked, even from the runtime's own thread. After any quiet moment the
//! driver has planned only for its idle connections' header timeouts
//! (seconds away), so the first attempt of the next request (whose timer is
//! due in 250 ms or more) cost a `write(2)` and an extra `epoll_wait`
//! return: 0.31–0.37 eventfd writes per request in the proxy benchmark,
//! against 0.001 with this timer.
//!
//! The timer ticks only while attempts are being sent: a worker that sent
//! none for a second stops it, and the next attempt starts it again.

use std::cell::{Cell, RefCell};
use std::task::{Poll, Waker};
use std::time::Duration;

/// How far ahead the worker's timer is always due while it is busy: less
/// than the earliest timer an attempt registers (250 ms).
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// Ticks with no attempt before the timer stops.
pub(crate) const IDLE_TICKS: u32 = 10;

thread_local! {
    /// An attempt was sent on this thread since the last tick.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// The stopped ticker of this thread's worker, to wake.
    static STOPPED: RefCell<Option<Waker>> = const { RefCell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// Ticks taken on this thread.
    static TICKS: Cell<u64> = const { Cell::new(0) };
}

/// An attempt is about to register its timer on this thread: keeps the
/// worker's timer ticking (a waker's wake on its own thread, no system
/// call). Outside a worker it only sets a flag.
pub(crate) fn attempt_starting() {
    BUSY.with(|b| b.set(true));
    if let Some(w) = STOPPED.with(|s| s.borrow_mut().take()) {
        w.wake();
    }
}

/// Ticks taken on this thread so far.
#[cfg(test)]
pub(crate) fn ticks() -> u64 {
    TICKS.with(Cell::get)
}

/// The worker's ticker: spawned once on each worker's (single-threaded)
/// runtime, it runs for the runtime's life.
pub(crate) async fn ticker() {
    loop {
        let mut idle = 0;
        while idle < IDLE_TICKS {
            tokio::time::sleep(TICK).await;
            #[cfg(test)]
            TICKS.with(|t| t.set(t.get() + 1));
            if BUSY.with(|b| b.replace(false)) {
                idle = 0;
            } else {
                idle += 1;
            }
        }
        // Stopped until the next attempt on this thread.
        std::future::poll_fn(|cx| {
            if BUSY.with(Cell::get) {
                return Poll::Ready(());
            }
            STOPPED.with(|s| *s.borrow_mut() = Some(cx.waker().clone()));
            Poll::Pending
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` beside a ticker on a paused single-threaded runtime.
    fn paused<F: std::future::Future<Output = ()>>(f: F) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            tokio::task::spawn_local(ticker());
            tokio::time::timeout(Duration::from_secs(600), f)
                .await
                .expect("watchdog");
        });
    }

    #[test]
    fn it_ticks_while_attempts_come_stops_after_a_quiet_second_and_starts_again() {
        paused(async {
            let start = ticks();
            // No attempt yet: it stops after a second's ticks.
            tokio::time::sleep(Duration::from_secs(5)).await;
            assert_eq!(ticks() - start, u64::from(IDLE_TICKS));
            // An attempt every 50 ms for 3 s: it ticks all along.
            let before = ticks();
            for _ in 0..60 {
                attempt_starting();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(ticks() - before >= 29, "ticked {}", ticks() - before);
            // Quiet again: a second more of ticks, then none.
            let quiet = ticks();
            tokio::time::sleep(Duration::from_secs(60)).await;
            assert!(ticks() - quiet <= u64::from(IDLE_TICKS) + 1);
            // The next attempt starts it again.
            let again = ticks();
            attempt_starting();
            tokio::time::sleep(Duration::from_millis(250)).await;
            assert!(ticks() - again >= 2, "ticked {}", ticks() - again);
        });
    }
}
