//! The one place the drill reads the clock. A drill measures real time by
//! definition; everything else takes instants from here.

use std::time::Instant;

/// Now, on the monotonic clock.
#[allow(clippy::disallowed_methods)] // the drill's single clock read
pub fn now() -> Instant {
    Instant::now()
}

/// Sleeps until `at` (returns at once if it has passed).
pub async fn sleep_until(at: Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
}
