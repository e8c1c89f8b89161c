//! Backoff: how long to wait before retry `n`.
//!
//! Exponential (`base_ms * multiplier^n`, capped at `max_ms`) or an explicit
//! schedule (e.g. "7 s, then 11 s"), with jitter. Full jitter (uniform in
//! `[0, cap]`) is the default because a schedule every client computes
//! identically puts every client back on the wire at the same instant (an
//! incident: 24 workers rate-limited in the same second, back together one second later).

use rand::Rng;
use std::time::Duration;

/// How the computed delay is randomised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Jitter {
    /// Uniform in `[0, cap]`.
    #[default]
    Full,
    /// `cap/2 + uniform[0, cap/2]`.
    Equal,
    /// Exactly `cap`.
    None,
}

impl std::str::FromStr for Jitter {
    type Err = BackoffError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "full" => Ok(Jitter::Full),
            "equal" => Ok(Jitter::Equal),
            "none" => Ok(Jitter::None),
            other => Err(BackoffError::UnknownJitter(other.to_string())),
        }
    }
}

/// Why a backoff configuration was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BackoffError {
    #[error("`jitter` must be one of full, equal, none (got `{0}`)")]
    UnknownJitter(String),
    #[error("`multiplier` must be a finite number ≥ 1 (got {0})")]
    Multiplier(f64),
    #[error("`max_ms` ({max_ms}) must be at least `base_ms` ({base_ms})")]
    MaxBelowBase { base_ms: u64, max_ms: u64 },
    #[error("`schedule_ms` must list at least one wait")]
    EmptySchedule,
    #[error("waits longer than one hour are not backoff (got {0} ms)")]
    TooLong(u64),
}

#[derive(Clone, Debug, PartialEq)]
enum Shape {
    Exponential {
        base: Duration,
        multiplier: f64,
        max: Duration,
    },
    Schedule(Vec<Duration>),
}

/// A validated backoff policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Backoff {
    shape: Shape,
    jitter: Jitter,
}

const HOUR_MS: u64 = 3_600_000;

/// The default first backoff cap, in milliseconds.
pub const DEFAULT_BASE_MS: u64 = 100;
/// The default growth of the cap per retry.
pub const DEFAULT_MULTIPLIER: f64 = 2.0;
/// The default longest cap, in milliseconds.
pub const DEFAULT_MAX_MS: u64 = 10_000;

impl Default for Backoff {
    /// 100 ms × 2ⁿ, capped at 10 s, full jitter: the second retry starts
    /// within 300 ms, so a transient fault costs a caller well under half a
    /// second at the 99th percentile. Overload is held off by the budget and
    /// the breaker, not by a long first wait.
    fn default() -> Self {
        Backoff {
            shape: Shape::Exponential {
                base: Duration::from_millis(DEFAULT_BASE_MS),
                multiplier: DEFAULT_MULTIPLIER,
                max: Duration::from_millis(DEFAULT_MAX_MS),
            },
            jitter: Jitter::Full,
        }
    }
}

impl Backoff {
    /// `base_ms * multiplier^n`, capped at `max_ms`.
    pub fn exponential(
        base_ms: u64,
        multiplier: f64,
        max_ms: u64,
        jitter: Jitter,
    ) -> Result<Self, BackoffError> {
        if !multiplier.is_finite() || multiplier < 1.0 {
            return Err(BackoffError::Multiplier(multiplier));
        }
        if max_ms < base_ms {
            return Err(BackoffError::MaxBelowBase { base_ms, max_ms });
        }
        if max_ms > HOUR_MS {
            return Err(BackoffError::TooLong(max_ms));
        }
        Ok(Backoff {
            shape: Shape::Exponential {
                base: Duration::from_millis(base_ms),
                multiplier,
                max: Duration::from_millis(max_ms),
            },
            jitter,
        })
    }

    /// An explicit list of waits; retries past its end reuse the last one.
    pub fn schedule(waits_ms: &[u64], jitter: Jitter) -> Result<Self, BackoffError> {
        if waits_ms.is_empty() {
            return Err(BackoffError::EmptySchedule);
        }
        if let Some(&w) = waits_ms.iter().find(|&&w| w > HOUR_MS) {
            return Err(BackoffError::TooLong(w));
        }
        Ok(Backoff {
            shape: Shape::Schedule(waits_ms.iter().map(|&w| Duration::from_millis(w)).collect()),
            jitter,
        })
    }

    /// The jitter mode.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The un-jittered wait before retry `n` (0 = the first retry): the most
    /// any jitter mode can wait.
    pub fn cap(&self, n: u32) -> Duration {
        match &self.shape {
            Shape::Exponential {
                base,
                multiplier,
                max,
            } => {
                let factor = multiplier.powi(i32::try_from(n).unwrap_or(i32::MAX));
                let ms = base.as_secs_f64() * 1000.0 * factor;
                if !ms.is_finite() || ms >= max.as_secs_f64() * 1000.0 {
                    *max
                } else {
                    Duration::from_secs_f64(ms / 1000.0)
                }
            }
            Shape::Schedule(waits) => {
                let i = usize::try_from(n)
                    .unwrap_or(usize::MAX)
                    .min(waits.len() - 1);
                waits[i]
            }
        }
    }

    /// The least wait before retry `n` that the jitter mode can pick.
    pub fn floor(&self, n: u32) -> Duration {
        match self.jitter {
            Jitter::Full => Duration::ZERO,
            Jitter::Equal => self.cap(n) / 2,
            Jitter::None => self.cap(n),
        }
    }

    /// The wait before retry `n`, drawn from `rng` per the jitter mode.
    pub fn delay<R: Rng + ?Sized>(&self, n: u32, rng: &mut R) -> Duration {
        let cap = self.cap(n);
        let cap_ns = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        match self.jitter {
            Jitter::None => cap,
            Jitter::Full => Duration::from_nanos(rng.gen_range(0..=cap_ns)),
            Jitter::Equal => {
                let half = cap_ns / 2;
                Duration::from_nanos(half + rng.gen_range(0..=cap_ns - half))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn seed_003_five_attempts_sleep_fifteen_seconds_before_the_last() {
        // Five attempts, base 1 s, multiplier 2, no jitter: 1 + 2 + 4 + 8.
        let b = Backoff::exponential(1000, 2.0, 60_000, Jitter::None).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let total: Duration = (0..4).map(|n| b.delay(n, &mut rng)).sum();
        assert_eq!(total, Duration::from_secs(15));
    }

    #[test]
    fn exponential_is_capped_at_max() {
        let b = Backoff::exponential(250, 2.0, 1000, Jitter::None).unwrap();
        let caps: Vec<u128> = (0..5).map(|n| b.cap(n).as_millis()).collect();
        assert_eq!(caps, [250, 500, 1000, 1000, 1000]);
        assert_eq!(b.cap(u32::MAX), Duration::from_millis(1000));
    }

    #[test]
    fn schedule_reuses_its_last_wait() {
        let b = Backoff::schedule(&[7000, 11_000], Jitter::None).unwrap();
        assert_eq!(b.cap(0), Duration::from_secs(7));
        assert_eq!(b.cap(1), Duration::from_secs(11));
        assert_eq!(b.cap(5), Duration::from_secs(11));
    }

    #[test]
    fn construction_validates() {
        assert_eq!(
            Backoff::exponential(100, 0.5, 1000, Jitter::Full),
            Err(BackoffError::Multiplier(0.5))
        );
        assert!(Backoff::exponential(100, f64::NAN, 1000, Jitter::Full).is_err());
        assert_eq!(
            Backoff::exponential(500, 2.0, 100, Jitter::Full),
            Err(BackoffError::MaxBelowBase {
                base_ms: 500,
                max_ms: 100
            })
        );
        assert_eq!(
            Backoff::schedule(&[], Jitter::None),
            Err(BackoffError::EmptySchedule)
        );
        assert!("sideways".parse::<Jitter>().is_err());
    }

    proptest! {
        #[test]
        fn jitter_is_always_in_range_and_reproducible_from_the_seed(
            seed in any::<u64>(), n in 0u32..20, base in 1u64..5000, mult in 1.0f64..4.0,
            mode in prop_oneof![Just(Jitter::Full), Just(Jitter::Equal), Just(Jitter::None)],
        ) {
            let b = Backoff::exponential(base, mult, 30_000.max(base), mode).unwrap();
            let mut r1 = SmallRng::seed_from_u64(seed);
            let mut r2 = SmallRng::seed_from_u64(seed);
            let d1 = b.delay(n, &mut r1);
            let d2 = b.delay(n, &mut r2);
            prop_assert_eq!(d1, d2);
            prop_assert!(d1 <= b.cap(n));
            prop_assert!(d1 >= b.floor(n));
        }
    }
}
