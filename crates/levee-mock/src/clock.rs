//! The crate's only clock reads.
//!
//! The workspace bans `Instant::now` / `SystemTime::now` so that the policy
//! core stays deterministic. The mock is an I/O edge: its fault windows are
//! wall-clock by design, and OpenAI bodies carry a unix `created` time. Every
//! read goes through here so there is one place to audit.

use std::time::{Duration, Instant, UNIX_EPOCH};

/// Monotonic now, for fault windows (`from` / `to`): tokio's clock, which
/// is the wall clock except in tests that pause tokio time, where the
/// windows then follow the paused clock like every delay the mock sleeps.
#[allow(clippy::disallowed_methods)] // the mock's fault clock is wall time by design
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Seconds since the unix epoch, for `created` fields in response bodies.
#[allow(clippy::disallowed_methods)] // response bodies carry a realistic timestamp
pub(crate) fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

/// Milliseconds since the unix epoch, for reset times in rate-limit fields.
#[allow(clippy::disallowed_methods)] // Anthropic's resets are wall-clock times
pub(crate) fn unix_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}
