//! One meter of an allowance: a bucket refilled continuously at its
//! per-minute rate, as the providers refill theirs.

use crate::time::Instant;
use std::time::Duration;

/// A bucket refilled continuously at its per-minute rate.
#[derive(Clone, Debug)]
pub(super) struct Bucket {
    pub(super) per_sec: f64,
    pub(super) capacity: f64,
    pub(super) level: f64,
    pub(super) at: Instant,
    /// Configured (`false`: learned from what the provider reported).
    pub(super) configured: bool,
}

impl Bucket {
    pub(super) fn new(per_minute: f64, capacity: f64, configured: bool) -> Self {
        let capacity = capacity.max(1.0);
        Bucket {
            per_sec: (per_minute / 60.0).max(f64::MIN_POSITIVE),
            capacity,
            level: capacity,
            at: Instant::ZERO,
            configured,
        }
    }

    pub(super) fn level(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_since(self.at).as_secs_f64();
        (self.level + elapsed * self.per_sec).min(self.capacity)
    }

    pub(super) fn advance(&mut self, now: Instant) {
        if now > self.at {
            self.level = self.level(now);
            self.at = now;
        }
    }

    /// Whether `need` fits above `floor` (a fraction of the capacity) now;
    /// else when it will. A need larger than the bucket can ever hold above
    /// the floor goes when the bucket is full there (the provider decides).
    pub(super) fn ready(&self, now: Instant, need: f64, floor: f64) -> Result<(), Instant> {
        let floor = floor * self.capacity;
        let need = need.min(self.capacity - floor);
        let have = self.level(now) - floor;
        if have >= need - 1e-9 {
            return Ok(());
        }
        let secs = (need - have) / self.per_sec;
        Err(now + Duration::from_secs_f64(secs.clamp(0.0, 86_400.0)))
    }
}
