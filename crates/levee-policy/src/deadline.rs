//! Deadlines travel with the request.
//!
//! The caller says how long it will wait — `x-timeout-ms` (remaining
//! milliseconds) or `x-deadline-ms` (absolute unix milliseconds); when both are
//! present the earlier wins. The official SDKs send their own timeout as
//! `x-stainless-timeout` (seconds), used as the caller's patience when neither
//! header is present. The result is clamped to the route's `deadline.max`, and
//! defaults to `deadline.default`. A malformed or negative value is an error the
//! gateway answers with 400 naming the header — never silently ignored, because
//! an ignored deadline is how a gateway ends up doing work nobody will read.

use crate::time::Instant;
use std::time::Duration;

/// Header names, as sent on the wire.
pub const TIMEOUT_MS: &str = "x-timeout-ms";
/// Absolute deadline header.
pub const DEADLINE_MS: &str = "x-deadline-ms";

/// A deadline header that could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeadlineError {
    #[error("header `{header}` must be a whole number of milliseconds (got `{value}`)")]
    Malformed { header: &'static str, value: String },
    #[error("header `{header}` must not be negative (got `{value}`)")]
    Negative { header: &'static str, value: String },
}

/// Why a deadline policy was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeadlinePolicyError {
    #[error(
        "`deadline.default` ({default:?}) must be positive and at most `deadline.max` ({max:?})"
    )]
    DefaultAboveMax { default: Duration, max: Duration },
}

/// A route's deadline rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadlinePolicy {
    default: Duration,
    max: Duration,
}

impl Default for DeadlinePolicy {
    /// 30 s default, 120 s max.
    fn default() -> Self {
        DeadlinePolicy {
            default: Duration::from_secs(30),
            max: Duration::from_secs(120),
        }
    }
}

/// The inbound header values, raw.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeadlineHeaders<'a> {
    /// `x-timeout-ms`.
    pub timeout_ms: Option<&'a [u8]>,
    /// `x-deadline-ms`.
    pub deadline_ms: Option<&'a [u8]>,
    /// The SDK's own timeout in seconds (`x-stainless-timeout`), if the caller's
    /// patience should be read from it. Malformed values are ignored: the SDK,
    /// not the user, wrote it.
    pub patience_secs: Option<&'a [u8]>,
}

impl DeadlinePolicy {
    /// Validates and builds.
    pub fn new(default: Duration, max: Duration) -> Result<Self, DeadlinePolicyError> {
        if default.is_zero() || default > max {
            return Err(DeadlinePolicyError::DefaultAboveMax { default, max });
        }
        Ok(DeadlinePolicy { default, max })
    }

    /// The default deadline.
    pub fn default_deadline(&self) -> Duration {
        self.default
    }

    /// The ceiling.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The request's deadline as an instant on the driver's clock. A deadline
    /// already passed resolves to `now` (the planner then rejects with no attempt).
    pub fn resolve(
        &self,
        h: DeadlineHeaders<'_>,
        now: Instant,
        now_unix_ms: u64,
    ) -> Result<Instant, DeadlineError> {
        Ok(self.resolve_remaining(Self::caller_wants(h, now_unix_ms)?, now))
    }

    /// How long the caller itself will wait, unclamped (`None`: it did not
    /// say). A committed stream runs until this, not the route's bounds:
    /// they bound the attempts before the first byte, while a 3-minute
    /// answer from a slow reasoning model is what its caller waits for.
    pub fn caller_wants(
        h: DeadlineHeaders<'_>,
        now_unix_ms: u64,
    ) -> Result<Option<Duration>, DeadlineError> {
        let relative = match h.timeout_ms {
            Some(v) => Some(parse_ms(TIMEOUT_MS, v)?),
            None => None,
        };
        let absolute = match h.deadline_ms {
            Some(v) => Some(Duration::from_millis(
                parse_ms(DEADLINE_MS, v)?
                    .as_millis()
                    .try_into()
                    .map(|abs: u64| abs.saturating_sub(now_unix_ms))
                    .unwrap_or(u64::MAX),
            )),
            None => None,
        };
        Ok(match (relative, absolute) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (Some(a), None) | (None, Some(a)) => Some(a),
            (None, None) => h.patience_secs.and_then(parse_secs),
        })
    }

    /// The deadline for a caller that has `remaining` time (none said: the
    /// route's default), clamped to the route's max. The typed entry point
    /// for drivers that hold a duration rather than headers (the simulator).
    pub fn resolve_remaining(&self, remaining: Option<Duration>, now: Instant) -> Instant {
        now + remaining.unwrap_or(self.default).min(self.max)
    }
}

/// Parses a non-negative decimal number of milliseconds; saturates huge values.
pub fn parse_ms(header: &'static str, v: &[u8]) -> Result<Duration, DeadlineError> {
    let text = || {
        String::from_utf8_lossy(v)
            .chars()
            .take(64)
            .collect::<String>()
    };
    let s = std::str::from_utf8(v)
        .map_err(|_| DeadlineError::Malformed {
            header,
            value: text(),
        })?
        .trim();
    if let Some(rest) = s.strip_prefix('-') {
        if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(DeadlineError::Negative {
                header,
                value: text(),
            });
        }
    }
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits_ok = !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
        && !(s.contains('.') && frac.is_empty());
    if !digits_ok {
        return Err(DeadlineError::Malformed {
            header,
            value: text(),
        });
    }
    // Saturate rather than fail: "wait forever" is clamped to the route max anyway.
    let whole = int.parse::<u64>().unwrap_or(u64::MAX);
    let micros = frac
        .bytes()
        .take(3)
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0u64, |acc, b| acc * 10 + u64::from(b - b'0'));
    Ok(Duration::from_millis(whole).saturating_add(Duration::from_micros(micros)))
}

fn parse_secs(v: &[u8]) -> Option<Duration> {
    let secs: f64 = std::str::from_utf8(v).ok()?.trim().parse().ok()?;
    (secs.is_finite() && secs > 0.0 && secs < 1e9).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIX: u64 = 1_700_000_000_000;
    fn now() -> Instant {
        Instant::from_millis(5_000)
    }
    fn policy() -> DeadlinePolicy {
        DeadlinePolicy::new(Duration::from_secs(30), Duration::from_secs(120)).unwrap()
    }
    fn resolve(h: DeadlineHeaders<'_>) -> Result<Duration, DeadlineError> {
        policy()
            .resolve(h, now(), UNIX)
            .map(|d| d.saturating_since(now()))
    }

    #[test]
    fn the_policy_says_its_default_and_its_ceiling() {
        assert_eq!(policy().default_deadline(), Duration::from_secs(30));
        assert_eq!(policy().max(), Duration::from_secs(120));
    }

    #[test]
    fn a_minus_sign_before_a_number_is_negative_anything_else_malformed() {
        let negative = |v: &[u8]| {
            matches!(
                parse_ms("x-timeout-ms", v),
                Err(DeadlineError::Negative { .. })
            )
        };
        let malformed = |v: &[u8]| {
            matches!(
                parse_ms("x-timeout-ms", v),
                Err(DeadlineError::Malformed { .. })
            )
        };
        assert!(negative(b"-1500"));
        assert!(negative(b"-1.5"));
        assert!(malformed(b"-"), "a sign alone is no number");
        assert!(malformed(b"-1x"));
        assert!(malformed(b"-abc"));
        assert_eq!(
            parse_ms("x-timeout-ms", b"1.5"),
            Ok(Duration::from_micros(1500))
        );
    }

    #[test]
    fn an_sdk_timeout_counts_only_above_zero_and_below_a_billion_seconds() {
        assert_eq!(parse_secs(b"0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_secs(b" 600 "), Some(Duration::from_secs(600)));
        for v in [&b"0"[..], b"-1", b"1e9", b"inf", b"NaN", b"x"] {
            assert_eq!(parse_secs(v), None, "{}", String::from_utf8_lossy(v));
        }
        assert!(parse_secs(b"999999999").is_some());
    }

    #[test]
    fn default_applies_without_headers_and_max_clamps() {
        assert_eq!(
            resolve(DeadlineHeaders::default()),
            Ok(Duration::from_secs(30))
        );
        let h = DeadlineHeaders {
            timeout_ms: Some(b"600000"),
            ..Default::default()
        };
        assert_eq!(resolve(h), Ok(Duration::from_secs(120)));
        let h = DeadlineHeaders {
            timeout_ms: Some(b"99999999999999999999999999"),
            ..Default::default()
        };
        assert_eq!(resolve(h), Ok(Duration::from_secs(120)));
    }

    #[test]
    fn the_earlier_of_relative_and_absolute_wins() {
        let abs = (UNIX + 8_000).to_string();
        let h = DeadlineHeaders {
            timeout_ms: Some(b"20000"),
            deadline_ms: Some(abs.as_bytes()),
            ..Default::default()
        };
        assert_eq!(resolve(h), Ok(Duration::from_secs(8)));
        let h = DeadlineHeaders {
            timeout_ms: Some(b"2500"),
            deadline_ms: Some(abs.as_bytes()),
            ..Default::default()
        };
        assert_eq!(resolve(h), Ok(Duration::from_millis(2500)));
    }

    #[test]
    fn sdk_patience_is_used_only_without_explicit_headers() {
        let h = DeadlineHeaders {
            patience_secs: Some(b"12.5"),
            ..Default::default()
        };
        assert_eq!(resolve(h), Ok(Duration::from_millis(12_500)));
        let h = DeadlineHeaders {
            timeout_ms: Some(b"1000"),
            patience_secs: Some(b"600"),
            ..Default::default()
        };
        assert_eq!(resolve(h), Ok(Duration::from_secs(1)));
        let h = DeadlineHeaders {
            patience_secs: Some(b"garbage"),
            ..Default::default()
        };
        assert_eq!(resolve(h), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn expired_on_arrival_resolves_to_now() {
        let past = (UNIX - 1).to_string();
        let h = DeadlineHeaders {
            deadline_ms: Some(past.as_bytes()),
            ..Default::default()
        };
        assert_eq!(resolve(h), Ok(Duration::ZERO));
        let h = DeadlineHeaders {
            timeout_ms: Some(b"0"),
            ..Default::default()
        };
        assert_eq!(resolve(h), Ok(Duration::ZERO));
    }

    #[test]
    fn malformed_and_negative_values_are_typed_errors_naming_the_header() {
        let h = DeadlineHeaders {
            timeout_ms: Some(b"-5"),
            ..Default::default()
        };
        assert!(matches!(
            resolve(h),
            Err(DeadlineError::Negative {
                header: "x-timeout-ms",
                ..
            })
        ));
        for bad in [
            &b"abc"[..],
            b"",
            b"1.",
            b"1e3",
            b"\xff",
            b"12 34",
            b"+5",
            b"NaN",
        ] {
            let h = DeadlineHeaders {
                deadline_ms: Some(bad),
                ..Default::default()
            };
            assert!(
                matches!(
                    resolve(h),
                    Err(DeadlineError::Malformed {
                        header: "x-deadline-ms",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_ms(TIMEOUT_MS, b"1.5"),
            Ok(Duration::from_micros(1500))
        );
    }

    #[test]
    fn policy_validates() {
        assert!(DeadlinePolicy::new(Duration::from_secs(200), Duration::from_secs(120)).is_err());
        assert!(DeadlinePolicy::new(Duration::ZERO, Duration::from_secs(120)).is_err());
    }
}
