//! Admission: reject fast, never queue.
//!
//! Two limiters. [`ConcurrencyLimiter`] caps work in flight (a route's bulkhead,
//! so one broken endpoint cannot take every slot) and answers at once: a guard or
//! "shed" — a caller that gets a 503 in 2 ms can fall back; one whose request sits
//! in a queue for 30 s has already lost its user. [`Gcra`] spaces
//! requests to a per-minute allowance (the provider meters the organisation, and
//! refused attempts spend it just as successful ones do): it says
//! "allowed now" or the earliest instant it would be.

use crate::time::Instant;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A non-blocking cap on concurrent work, shareable across threads.
#[derive(Debug)]
pub struct ConcurrencyLimiter {
    max: u32,
    current: AtomicU32,
}

/// Holds one slot of a [`ConcurrencyLimiter`]; gives it back on drop.
#[derive(Debug)]
pub struct ConcurrencyGuard {
    limiter: Arc<ConcurrencyLimiter>,
}

impl Drop for ConcurrencyGuard {
    fn drop(&mut self) {
        self.limiter.current.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConcurrencyLimiter {
    /// A limiter admitting at most `max` at once (`max` ≥ 1; 0 is read as 1).
    pub fn new(max: u32) -> Arc<Self> {
        Arc::new(ConcurrencyLimiter {
            max: max.max(1),
            current: AtomicU32::new(0),
        })
    }

    /// A slot, or `None` when full ("shed").
    pub fn try_acquire(self: &Arc<Self>) -> Option<ConcurrencyGuard> {
        self.current
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (c < self.max).then_some(c + 1)
            })
            .ok()
            .map(|_| ConcurrencyGuard {
                limiter: Arc::clone(self),
            })
    }

    /// Slots in use now.
    pub fn in_use(&self) -> u32 {
        self.current.load(Ordering::Acquire)
    }

    /// The cap.
    pub fn max(&self) -> u32 {
        self.max
    }
}

/// Why a rate-limit configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("`requests_per_minute` must be at least 1")]
    Zero,
    #[error("`burst` must be at least 1")]
    Burst,
}

/// The generic cell rate algorithm: a requests-per-minute allowance with a burst.
#[derive(Clone, Debug)]
pub struct Gcra {
    /// Time one request "costs".
    emission: Duration,
    /// How far ahead of now the theoretical arrival time may run (burst − 1 requests).
    tolerance: Duration,
    tat: Instant,
}

impl Gcra {
    /// `requests_per_minute` with up to `burst` requests at once.
    pub fn per_minute(requests_per_minute: u32, burst: u32) -> Result<Self, RateError> {
        if requests_per_minute == 0 {
            return Err(RateError::Zero);
        }
        if burst == 0 {
            return Err(RateError::Burst);
        }
        let emission = Duration::from_secs(60) / requests_per_minute;
        Ok(Gcra {
            emission,
            tolerance: emission * (burst - 1),
            tat: Instant::ZERO,
        })
    }

    /// The default burst for an allowance: one second's worth, at least 1.
    pub fn default_burst(requests_per_minute: u32) -> u32 {
        (requests_per_minute / 60).max(1)
    }

    /// The rate (requests a minute) and burst this allowance was built with.
    pub fn rate(&self) -> (f64, u32) {
        let emission = self.emission.as_secs_f64().max(f64::MIN_POSITIVE);
        let burst = (self.tolerance.as_secs_f64() / emission).round() as u32 + 1;
        (60.0 / emission, burst)
    }

    /// Whether a request would conform now, without spending the allowance.
    pub fn peek(&self, now: Instant) -> Result<(), Instant> {
        let tat = self.tat.max(now);
        let earliest = tat - self.tolerance;
        if earliest > now {
            Err(earliest)
        } else {
            Ok(())
        }
    }

    /// Spends one request of the allowance, or says the earliest instant it would conform.
    pub fn check(&mut self, now: Instant) -> Result<(), Instant> {
        self.peek(now)?;
        self.tat = self.tat.max(now) + self.emission;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_limiter_sheds_at_the_cap_and_frees_on_drop() {
        let l = ConcurrencyLimiter::new(2);
        let a = l.try_acquire().unwrap();
        let _b = l.try_acquire().unwrap();
        assert!(l.try_acquire().is_none());
        drop(a);
        assert!(l.try_acquire().is_some());
        assert_eq!(l.in_use(), 1);
    }

    #[test]
    fn gcra_allows_the_burst_then_spaces_requests() {
        let mut g = Gcra::per_minute(600, 5).unwrap(); // one per 100 ms
        let t = Instant::from_millis(10_000);
        for _ in 0..5 {
            assert!(g.check(t).is_ok());
        }
        assert_eq!(g.check(t), Err(t + Duration::from_millis(100)));
        assert!(g.check(t + Duration::from_millis(100)).is_ok());
        assert!(g.check(t + Duration::from_millis(100)).is_err());
    }

    #[test]
    fn gcra_over_a_minute_never_exceeds_rate_plus_burst() {
        let mut g = Gcra::per_minute(2000, Gcra::default_burst(2000)).unwrap();
        let allowed = (0..60_000u64)
            .filter(|ms| g.check(Instant::from_millis(100_000 + ms)).is_ok())
            .count();
        assert!(allowed <= 2000 + 33, "{allowed}");
        assert!(allowed >= 1990, "{allowed}");
        assert_eq!(Gcra::per_minute(0, 1).unwrap_err(), RateError::Zero);
    }
}
