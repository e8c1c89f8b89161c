//! The status line on stderr while the drill runs, and the counters it reads.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::clock;

/// Progress counters shared with the progress printer.
#[derive(Default)]
pub(super) struct Progress {
    pub(super) sent: AtomicU64,
    pub(super) answered: AtomicU64,
    pub(super) upstream: AtomicU64,
}

/// Every second until told to stop: the time, requests sent and answered,
/// and the provider's requests in that second.
pub(super) async fn print_progress(
    t0: Instant,
    total: u64,
    counters: Arc<Progress>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_upstream = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        let up = counters.upstream.load(Relaxed);
        eprint!(
            "\r  {:6.1} s  sent {}/{}  answered {}  upstream {}/s     ",
            clock::now().duration_since(t0).as_secs_f64(),
            counters.sent.load(Relaxed),
            total,
            counters.answered.load(Relaxed),
            up.saturating_sub(last_upstream),
        );
        last_upstream = up;
    }
    eprintln!();
}
