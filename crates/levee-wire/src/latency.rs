//! A log-normal service time fitted to a median and a 99th percentile, as
//! the mock and the simulator both draw latencies (service times have a
//! long right tail: a few requests pass their callers' timeouts).

use std::time::Duration;

/// z-score of the 99th percentile of the standard normal.
pub const Z99: f64 = 2.326_347_874;

/// Why a median and a p99 fit no distribution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FitError {
    Percentiles,
}

impl std::fmt::Display for FitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("`p99` must be at least `p50`, and both positive")
    }
}

impl std::error::Error for FitError {}

/// `(mu, sigma)` of the log-normal whose median is `p50` and 99th
/// percentile `p99`, `mu` the log of seconds (`sigma` 0 when they are
/// equal: a fixed time).
pub fn lognormal_fit(p50: Duration, p99: Duration) -> Result<(f64, f64), FitError> {
    if p50.is_zero() || p99 < p50 {
        return Err(FitError::Percentiles);
    }
    let mu = p50.as_secs_f64().ln();
    let sigma = (p99.as_secs_f64().ln() - mu) / Z99;
    Ok((mu, sigma))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_gives_back_its_percentiles_and_refuses_what_fits_nothing() {
        let (mu, sigma) =
            lognormal_fit(Duration::from_millis(200), Duration::from_millis(900)).unwrap();
        assert!((mu.exp() - 0.2).abs() < 1e-9);
        assert!(((mu + sigma * Z99).exp() - 0.9).abs() < 1e-9);
        assert_eq!(
            lognormal_fit(Duration::ZERO, Duration::from_millis(1)),
            Err(FitError::Percentiles)
        );
        assert_eq!(
            lognormal_fit(Duration::from_millis(2), Duration::from_millis(1)),
            Err(FitError::Percentiles)
        );
        let (_, sigma) = lognormal_fit(Duration::from_millis(5), Duration::from_millis(5)).unwrap();
        assert_eq!(sigma, 0.0);
    }
}
