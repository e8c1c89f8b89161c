//! Outcome classification: which failures a second attempt can fix.
//!
//! A deterministic 4xx (the provider's validator rejected the payload) gets the
//! same answer on every attempt, so retrying it only spends the organisation's
//! allowance and a worker's time (a 400 retried five times costs 37.5 workers
//! of a pool of 24 at 140 requests/min). Connection errors, timeouts before
//! the first byte and overload statuses are the failures a second attempt can
//! fix. The set is configurable with the names operators already write
//! (`on: [502, 503, 504, connect_error]`), but it can never contain a
//! deterministic 4xx.

use std::fmt;
use std::time::Duration;

/// What happened to one attempt, as the driver observed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The provider answered with this status. `retry_after` is the parsed,
    /// capped wait it asked for (see [`crate::retry_after`]).
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No connection could be made (refused, reset before a response, TLS failure).
    ConnectError,
    /// No response head before the attempt's timeout.
    Timeout,
    /// The upstream failed after its 2xx head: a committed stream broke off
    /// or stalled, or a plain answer's body broke off. The provider has
    /// already run the generation, so it is never run again.
    FailedAfterFirstByte,
    /// The provider answered 2xx with a body over the gateway's response
    /// limit. The provider did its job (not a fault), and a second attempt
    /// would be as large: never retried.
    ResponseTooLarge,
    /// The caller went away; nothing about the provider was learned.
    CallerCancelled,
    /// The attempt was not made, or was cut, because the caller's deadline
    /// could not cover it: its own kind, never a provider fault.
    SkippedNoDeadline,
}

/// What an outcome means for the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// 1xx–3xx: done.
    Success,
    /// A provider fault. `retryable` says whether the route's `on:` set lets a
    /// second attempt try to fix it. Counts against the circuit breaker of the
    /// model it was sent for; `provider_wide` (no connection could be made)
    /// also against the provider's own.
    Fault {
        retryable: bool,
        wait: Option<Duration>,
        provider_wide: bool,
    },
    /// 429: the provider asks us to slow down. Does not open the breaker; sets
    /// the provider's "throttled until" from `wait`.
    Throttled {
        retryable: bool,
        wait: Option<Duration>,
    },
    /// A deterministic 4xx (the same bytes get the same answer), or an answer
    /// too large to pass on. Never retried; not a provider fault.
    Permanent,
    /// Caller cancelled or deadline skip: says nothing about the provider.
    NotProviderFault,
}

impl Class {
    /// Whether the planner may try again (same target or a fallback).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Class::Fault {
                retryable: true,
                ..
            } | Class::Throttled {
                retryable: true,
                ..
            }
        )
    }

    /// The same class with any server-requested wait cut to `cap`.
    pub fn capped(self, cap: Duration) -> Class {
        match self {
            Class::Fault {
                retryable,
                wait,
                provider_wide,
            } => Class::Fault {
                retryable,
                wait: wait.map(|w| w.min(cap)),
                provider_wide,
            },
            Class::Throttled { retryable, wait } => Class::Throttled {
                retryable,
                wait: wait.map(|w| w.min(cap)),
            },
            c => c,
        }
    }

    /// The server-requested wait, if any.
    pub fn wait(self) -> Option<Duration> {
        match self {
            Class::Fault { wait, .. } | Class::Throttled { wait, .. } => wait,
            _ => None,
        }
    }
}

/// The statuses that are deterministic for an unchanged request: never retryable.
pub const DETERMINISTIC_4XX: [u16; 6] = [400, 401, 403, 404, 413, 422];

/// One entry of a route's `retry.on` list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryOn {
    /// One HTTP status (`503`).
    Status(u16),
    /// Every 5xx (`5xx`).
    Any5xx,
    /// `connect_error`.
    ConnectError,
    /// `timeout` (before the first byte).
    Timeout,
}

/// Why a `retry.on` entry was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RetryOnError {
    #[error("`{0}` is not a retry condition: use a status like `503`, `5xx`, `429`, `connect_error` or `timeout`")]
    Unknown(String),
    #[error("status {0} is a deterministic client error: a second attempt gets the same answer, so it cannot be retried (remove it from `on:`)")]
    Deterministic(u16),
    #[error("status {0} is not a failure: only 4xx/5xx statuses can be retried")]
    NotAFailure(u16),
}

impl std::str::FromStr for RetryOn {
    type Err = RetryOnError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "connect_error" | "connect-error" => return Ok(RetryOn::ConnectError),
            "timeout" => return Ok(RetryOn::Timeout),
            "5xx" => return Ok(RetryOn::Any5xx),
            _ => {}
        }
        let status: u16 = t
            .parse()
            .map_err(|_| RetryOnError::Unknown(t.to_string()))?;
        RetryOn::status(status)
    }
}

impl RetryOn {
    /// A status entry, validated.
    pub fn status(status: u16) -> Result<Self, RetryOnError> {
        if DETERMINISTIC_4XX.contains(&status) {
            Err(RetryOnError::Deterministic(status))
        } else if !(400..=599).contains(&status) {
            Err(RetryOnError::NotAFailure(status))
        } else {
            Ok(RetryOn::Status(status))
        }
    }
}

impl fmt::Display for RetryOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryOn::Status(s) => write!(f, "{s}"),
            RetryOn::Any5xx => f.write_str("5xx"),
            RetryOn::ConnectError => f.write_str("connect_error"),
            RetryOn::Timeout => f.write_str("timeout"),
        }
    }
}

/// The route's retryable set, as a value that cannot hold a deterministic 4xx.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classifier {
    /// Bit per status 400..=599.
    statuses: [u64; 4],
    any_5xx: bool,
    connect_error: bool,
    timeout: bool,
}

impl Default for Classifier {
    /// `on: [429, 502, 503, 504, 529, connect_error, timeout]` (529 is
    /// Anthropic's "overloaded").
    fn default() -> Self {
        let on = [
            RetryOn::Status(429),
            RetryOn::Status(502),
            RetryOn::Status(503),
            RetryOn::Status(504),
            RetryOn::Status(529),
            RetryOn::ConnectError,
            RetryOn::Timeout,
        ];
        Classifier::new(&on)
    }
}

impl Classifier {
    /// Builds the set from validated entries (see [`RetryOn::from_str`]).
    pub fn new(on: &[RetryOn]) -> Self {
        let mut c = Classifier {
            statuses: [0; 4],
            any_5xx: false,
            connect_error: false,
            timeout: false,
        };
        for entry in on {
            match *entry {
                RetryOn::Status(s) => {
                    let i = usize::from(s.saturating_sub(400));
                    if i < 256 {
                        c.statuses[i / 64] |= 1 << (i % 64);
                    }
                }
                RetryOn::Any5xx => c.any_5xx = true,
                RetryOn::ConnectError => c.connect_error = true,
                RetryOn::Timeout => c.timeout = true,
            }
        }
        c
    }

    fn status_listed(&self, status: u16) -> bool {
        if DETERMINISTIC_4XX.contains(&status) {
            return false;
        }
        if self.any_5xx && (500..=599).contains(&status) {
            return true;
        }
        let Some(i) = status.checked_sub(400).map(usize::from) else {
            return false;
        };
        i < 256 && self.statuses[i / 64] & (1 << (i % 64)) != 0
    }

    /// Classifies one attempt's outcome.
    pub fn classify(&self, outcome: Outcome) -> Class {
        match outcome {
            Outcome::Status { status, .. } if status < 400 => Class::Success,
            Outcome::Status {
                status: 429,
                retry_after,
            } => Class::Throttled {
                retryable: self.status_listed(429),
                wait: retry_after,
            },
            Outcome::Status {
                status,
                retry_after,
            } if status >= 500 => Class::Fault {
                retryable: self.status_listed(status),
                wait: retry_after,
                provider_wide: false,
            },
            Outcome::Status { status, .. } => {
                if self.status_listed(status) {
                    // A non-deterministic 4xx the operator chose to retry (408, 409…).
                    Class::Fault {
                        retryable: true,
                        wait: None,
                        provider_wide: false,
                    }
                } else {
                    Class::Permanent
                }
            }
            Outcome::ConnectError => Class::Fault {
                retryable: self.connect_error,
                wait: None,
                provider_wide: true,
            },
            Outcome::Timeout => Class::Fault {
                retryable: self.timeout,
                wait: None,
                provider_wide: false,
            },
            Outcome::FailedAfterFirstByte => Class::Fault {
                retryable: false,
                wait: None,
                provider_wide: false,
            },
            Outcome::ResponseTooLarge => Class::Permanent,
            Outcome::CallerCancelled | Outcome::SkippedNoDeadline => Class::NotProviderFault,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(s: u16) -> Outcome {
        Outcome::Status {
            status: s,
            retry_after: None,
        }
    }

    fn seed_000() -> Classifier {
        let on: Vec<RetryOn> = ["502", "503", "504", "connect_error"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        Classifier::new(&on)
    }

    #[test]
    fn deterministic_4xx_is_never_retried_by_default() {
        let c = Classifier::default();
        for s in DETERMINISTIC_4XX {
            assert_eq!(c.classify(status(s)), Class::Permanent, "{s}");
        }
    }

    #[test]
    fn deterministic_4xx_cannot_be_configured_retryable() {
        for s in ["400", "401", "403", "404", "413", "422"] {
            assert!(matches!(
                s.parse::<RetryOn>(),
                Err(RetryOnError::Deterministic(_))
            ));
        }
        assert!(matches!(
            "200".parse::<RetryOn>(),
            Err(RetryOnError::NotAFailure(200))
        ));
        assert!(matches!(
            "bogus".parse::<RetryOn>(),
            Err(RetryOnError::Unknown(_))
        ));
    }

    #[test]
    fn seed_000_set_retries_listed_statuses_and_connect_errors_only() {
        let c = seed_000();
        assert!(c.classify(status(503)).is_retryable());
        assert!(c.classify(status(502)).is_retryable());
        assert!(c.classify(Outcome::ConnectError).is_retryable());
        assert!(!c.classify(status(500)).is_retryable());
        assert!(!c.classify(Outcome::Timeout).is_retryable());
        // 429 not listed: throttled, not retried, but still not a breaker fault.
        assert_eq!(
            c.classify(status(429)),
            Class::Throttled {
                retryable: false,
                wait: None
            }
        );
    }

    #[test]
    fn any_5xx_and_timeouts_and_non_provider_outcomes() {
        let c = Classifier::new(&[RetryOn::Any5xx, RetryOn::Timeout]);
        assert!(c.classify(status(500)).is_retryable());
        assert!(c.classify(status(529)).is_retryable());
        assert!(c.classify(Outcome::Timeout).is_retryable());
        assert!(!c.classify(Outcome::FailedAfterFirstByte).is_retryable());
        assert_eq!(
            c.classify(Outcome::CallerCancelled),
            Class::NotProviderFault
        );
        assert_eq!(
            c.classify(Outcome::SkippedNoDeadline),
            Class::NotProviderFault
        );
        assert_eq!(c.classify(status(200)), Class::Success);
        assert_eq!(c.classify(status(409)), Class::Permanent);
    }

    #[test]
    fn failures_after_a_2xx_head_are_never_retried_whatever_on_lists() {
        let c = Classifier::new(&[RetryOn::Any5xx, RetryOn::ConnectError, RetryOn::Timeout]);
        // Broke off mid-answer: the provider's fault, but the generation ran.
        assert_eq!(
            c.classify(Outcome::FailedAfterFirstByte),
            Class::Fault {
                retryable: false,
                wait: None,
                provider_wide: false
            }
        );
        // Too large: the provider did its job; the next answer is as large.
        assert_eq!(c.classify(Outcome::ResponseTooLarge), Class::Permanent);
    }

    #[test]
    fn retry_after_travels_with_the_class() {
        let c = Classifier::default();
        let w = Some(Duration::from_secs(2));
        let class = c.classify(Outcome::Status {
            status: 503,
            retry_after: w,
        });
        assert_eq!(class.wait(), w);
        assert!(class.is_retryable());
    }
}
