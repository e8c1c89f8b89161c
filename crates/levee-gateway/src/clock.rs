//! The gateway's one clock: every read of time goes through here.
//!
//! It reads tokio's clock, so tests that pause tokio time control it, and
//! converts to the policy core's [`levee_policy::Instant`].

use std::time::Duration;

/// Monotonic time since the gateway started, plus the wall clock for headers.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: tokio::time::Instant,
    /// The wall clock at the origin (unix ms).
    origin_unix_ms: u64,
}

impl Clock {
    /// A clock whose origin is now.
    #[allow(clippy::disallowed_methods)] // the one place the gateway reads the clock
    pub fn new() -> Self {
        Clock {
            origin: tokio::time::Instant::now(),
            origin_unix_ms: unix_ms(),
        }
    }

    /// Now, on the policy core's timeline.
    #[allow(clippy::disallowed_methods)]
    pub fn now(&self) -> levee_policy::Instant {
        levee_policy::Instant::from_duration(tokio::time::Instant::now() - self.origin)
    }

    /// Now on tokio's timeline (for a timer's deadline).
    #[allow(clippy::disallowed_methods)]
    pub fn tokio_now() -> tokio::time::Instant {
        tokio::time::Instant::now()
    }

    /// The tokio instant of a policy instant (for sleeping until it).
    pub fn to_tokio(self, t: levee_policy::Instant) -> tokio::time::Instant {
        self.origin + t.since_origin()
    }

    /// Wall-clock unix milliseconds (for `x-deadline-ms` and HTTP dates).
    pub fn unix_ms(&self) -> u64 {
        unix_ms()
    }

    /// Calendar time (unix ms) for what is counted by the minute, the hour
    /// and the day (callers' limits, budgets, the spend ledger): the wall
    /// clock at start moved on by the monotonic clock, so a stepped system
    /// clock does not move a minute's count back, and tests that pause time
    /// move it.
    pub fn calendar_ms(&self) -> u64 {
        self.calendar_at(self.now())
    }

    /// The calendar time (unix ms, as [`Clock::calendar_ms`] counts it) of
    /// instant `t`: for a request that has read the clock once already.
    pub fn calendar_at(&self, t: levee_policy::Instant) -> u64 {
        let since = t.since_origin().as_millis();
        self.origin_unix_ms
            .saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
    }

    /// Time elapsed since `t`.
    pub fn since(&self, t: levee_policy::Instant) -> Duration {
        self.now().saturating_since(t)
    }
}

/// Wall-clock unix milliseconds (for `x-deadline-ms` and HTTP dates).
#[allow(clippy::disallowed_methods)]
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
