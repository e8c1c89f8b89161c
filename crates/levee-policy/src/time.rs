//! Time as the core sees it: a monotonic [`Instant`] of the crate's own.
//!
//! The core never reads a clock. Callers pass `now` into every function that
//! needs it: the gateway from tokio's clock, the simulator from its virtual
//! clock, tests from a number. An `Instant` is a count of nanoseconds since an
//! arbitrary origin chosen by whoever drives the core.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point on a monotonic timeline, in nanoseconds since the driver's origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The origin of the timeline.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// An instant `d` after the origin (saturating at the far end).
    pub fn from_duration(d: Duration) -> Self {
        Instant(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// An instant `ms` milliseconds after the origin.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time since the origin.
    pub const fn since_origin(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        let add = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(add))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        let sub = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(sub))
    }
}

/// Milliseconds as a `Duration`, for readable tests and configs.
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let t = Instant::from_millis(10);
        assert_eq!(t - ms(20), Instant::ZERO);
        assert_eq!(
            Instant::from_nanos(u64::MAX) + ms(1),
            Instant::from_nanos(u64::MAX)
        );
        assert_eq!(t.saturating_since(Instant::from_millis(30)), Duration::ZERO);
        assert_eq!((t + ms(5)).saturating_since(t), ms(5));
    }
}
