//! Latency distributions for the provider model: fixed, uniform, or log-normal
//! fitted to a median and a 99th percentile (service times have a long right
//! tail, which is what pushes a few requests past their callers' timeouts).

use rand::Rng;
use rand_distr::LogNormal;
use std::time::Duration;

/// A distribution of durations, sampled in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    Fixed(u64),
    Uniform {
        min: u64,
        max: u64,
    },
    /// `exp(mu + sigma * z)` nanoseconds.
    LogNormal {
        mu: f64,
        sigma: f64,
    },
}

/// Why a distribution was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DistError {
    #[error(
        "write a latency as `200ms`, `{{ p50: 800ms, p99: 2s }}` or `{{ min: 100ms, max: 300ms }}`"
    )]
    Shape,
    #[error("`p99` must be at least `p50`, and both positive")]
    Percentiles,
    #[error("`max` must be at least `min`")]
    Range,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Dist {
    pub fn fixed(d: Duration) -> Self {
        Dist::Fixed(nanos(d))
    }

    /// Builds from the optional keys a user wrote.
    pub fn from_keys(
        p50: Option<Duration>,
        p99: Option<Duration>,
        min: Option<Duration>,
        max: Option<Duration>,
    ) -> Result<Self, DistError> {
        match (p50, p99, min, max) {
            (Some(p50), Some(p99), None, None) => {
                let (mu_secs, sigma) = levee_wire::latency::lognormal_fit(p50, p99)
                    .map_err(|_| DistError::Percentiles)?;
                // Sampled in nanoseconds.
                let mu = mu_secs + 1e9_f64.ln();
                Ok(Dist::LogNormal { mu, sigma })
            }
            (Some(p50), None, None, None) => Ok(Dist::fixed(p50)),
            (None, None, Some(min), Some(max)) => {
                if max < min {
                    return Err(DistError::Range);
                }
                Ok(Dist::Uniform {
                    min: nanos(min),
                    max: nanos(max),
                })
            }
            _ => Err(DistError::Shape),
        }
    }

    /// One sample.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        Duration::from_nanos(match *self {
            Dist::Fixed(n) => n,
            Dist::Uniform { min, max } => rng.gen_range(min..=max),
            Dist::LogNormal { mu, sigma } => match LogNormal::new(mu, sigma) {
                // At most an hour, whatever the tail does.
                Ok(d) if sigma > 0.0 => rng.sample(d).min(3.6e12) as u64,
                _ => mu.exp() as u64,
            },
        })
    }

    /// The mean, for documentation and capacity arithmetic.
    pub fn mean(&self) -> Duration {
        Duration::from_nanos(match *self {
            Dist::Fixed(n) => n,
            Dist::Uniform { min, max } => min / 2 + max / 2,
            Dist::LogNormal { mu, sigma } => (mu + sigma * sigma / 2.0).exp() as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn lognormal_matches_the_percentiles_it_was_fitted_to() {
        let d = Dist::from_keys(
            Some(Duration::from_millis(800)),
            Some(Duration::from_secs(2)),
            None,
            None,
        )
        .unwrap();
        let mut rng = SmallRng::seed_from_u64(7);
        let mut xs: Vec<Duration> = (0..20_000).map(|_| d.sample(&mut rng)).collect();
        xs.sort();
        let p50 = xs[10_000].as_millis();
        let p99 = xs[19_800].as_millis();
        assert!((760..=840).contains(&p50), "p50 {p50}");
        assert!((1800..=2200).contains(&p99), "p99 {p99}");
    }

    #[test]
    fn shapes_are_validated() {
        let s = Some(Duration::from_secs(1));
        let l = Some(Duration::from_secs(2));
        assert_eq!(
            Dist::from_keys(l, s, None, None),
            Err(DistError::Percentiles)
        );
        assert_eq!(Dist::from_keys(None, None, l, s), Err(DistError::Range));
        assert_eq!(Dist::from_keys(s, None, s, None), Err(DistError::Shape));
    }
}
