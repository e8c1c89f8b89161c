//! How a request and each of its upstream attempts ended, why a request was
//! refused, sent to a later target or skipped one, as values. Each value's
//! metric and log label comes from the value itself (`label()`), and the
//! metrics take these values, not strings; the label strings are exported
//! (dashboards, alerts and tests match them) and must not change.

use crate::http::respond::Why;
use levee_policy::planner::PrimaryRefusal;
use levee_policy::Reason;

/// How one upstream attempt ended: the `levee_upstream_attempts_total{result}`
/// label, the log's `last_attempt` and `attempt_list`, the attempt span's
/// result, and the `levee_fallbacks_total{reason}` of the attempt after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    /// A 2xx (or other answer the caller is given) relayed.
    Success,
    /// A 4xx other than 429, in the provider's JSON error shape.
    Http4xx,
    /// A 4xx other than 429, not in the provider's JSON error shape (a
    /// proxy in between).
    Http4xxForeignBody,
    /// A 5xx.
    Http5xx,
    /// A 429.
    Throttled,
    /// No response: refused, unreachable, DNS, reset before a response.
    ConnectError,
    /// No response: no connection opened within the provider's
    /// `connect_timeout` (SYNs dropped: a firewall, an address nothing
    /// routes to, a listen queue full).
    ConnectTimeout,
    /// No response: the TLS handshake failed.
    Tls,
    /// No response head within the attempt's time.
    Timeout,
    /// A timeout (head or body) caused by the caller's deadline rather than
    /// the provider's slowness.
    DeadlineCut,
    /// A stream's 2xx head, then nothing before its first event.
    CutBeforeFirstEvent,
    /// A plain 2xx whose body broke off.
    BodyCut,
    /// A plain 2xx whose body stalled.
    BodyTimeout,
    /// An answer over Levee's response size limit.
    ResponseTooLarge,
    /// The cloud platform's signature or token could not be made: the
    /// attempt was never sent.
    Credentials,
}

impl AttemptResult {
    /// The metric and log label.
    pub fn label(self) -> &'static str {
        match self {
            AttemptResult::Success => "success",
            AttemptResult::Http4xx => "http_4xx",
            AttemptResult::Http4xxForeignBody => "http_4xx_foreign_body",
            AttemptResult::Http5xx => "http_5xx",
            AttemptResult::Throttled => "throttled",
            AttemptResult::ConnectError => "connect_error",
            AttemptResult::ConnectTimeout => "connect_timeout",
            AttemptResult::Tls => "tls",
            AttemptResult::Timeout => "timeout",
            AttemptResult::DeadlineCut => "deadline_cut",
            AttemptResult::CutBeforeFirstEvent => "cut_before_first_event",
            AttemptResult::BodyCut => "body_cut",
            AttemptResult::BodyTimeout => "body_timeout",
            AttemptResult::ResponseTooLarge => "response_too_large",
            AttemptResult::Credentials => "credentials",
        }
    }

    /// An error answer's result: `throttled` for a 429, a 4xx by whether
    /// its body has the provider's JSON error shape (`foreign`: it has
    /// not), else `http_5xx`.
    pub fn of_error_status(status: u16, foreign: bool) -> Self {
        match status {
            429 => AttemptResult::Throttled,
            400..=499 if foreign => AttemptResult::Http4xxForeignBody,
            400..=499 => AttemptResult::Http4xx,
            _ => AttemptResult::Http5xx,
        }
    }

    /// The result when the caller's deadline, not the provider, cut the
    /// attempt short: a timeout becomes `deadline_cut`; anything else is
    /// unchanged.
    pub fn cut_by_deadline(self) -> Self {
        match self {
            AttemptResult::Timeout | AttemptResult::BodyTimeout => AttemptResult::DeadlineCut,
            other => other,
        }
    }

    /// Whether the attempt's duration says how long the provider takes:
    /// not for a connection failure or an attempt the caller's deadline cut.
    pub fn is_timed(self) -> bool {
        !matches!(
            self,
            AttemptResult::ConnectError
                | AttemptResult::ConnectTimeout
                | AttemptResult::Tls
                | AttemptResult::DeadlineCut
        )
    }
}

/// How a logical request ended: the `levee_requests_total{outcome}` label,
/// the route's recent success window and the log line's `outcome`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestOutcome {
    /// A provider's answer relayed (a stream: relayed to its end).
    Success,
    /// Answered from the idempotency store.
    Replayed,
    /// The caller stopped reading a committed stream before its end.
    ClientClosed,
    /// Levee answered with an error of its own, for this reason.
    Failed(Why),
}

impl RequestOutcome {
    /// The metric and log label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            RequestOutcome::Success => "success",
            RequestOutcome::Replayed => "replayed",
            RequestOutcome::ClientClosed => "client_closed",
            RequestOutcome::Failed(why) => why.as_str(),
        }
    }

    /// Whether the caller got what it asked for: a provider's answer or
    /// the stored answer of an earlier success.
    pub(crate) fn is_success(self) -> bool {
        matches!(self, RequestOutcome::Success | RequestOutcome::Replayed)
    }

    /// Whether the outcome says anything of the route's health: a caller
    /// that stopped reading a stream says nothing.
    pub(crate) fn says_of_route(self) -> bool {
        self != RequestOutcome::ClientClosed
    }
}

/// Why a request failed, as its answer and its books say it: the
/// planner's reason, or `credentials_unavailable` when the last attempt
/// was never sent for want of its target's credentials.
pub(crate) fn failure_why(reason: Reason, last: Option<AttemptResult>) -> Why {
    match last {
        Some(AttemptResult::Credentials) if reason == Reason::UpstreamError => {
            Why::CredentialsUnavailable
        }
        _ => Why::Policy(reason),
    }
}

impl From<Reason> for RequestOutcome {
    fn from(r: Reason) -> Self {
        RequestOutcome::Failed(Why::Policy(r))
    }
}

/// Why an attempt went to a later target of the route: the
/// `levee_fallbacks_total{reason}` label and the status page's recent
/// fallbacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FallbackReason {
    /// A first attempt sent past a primary that refused it without an
    /// attempt, for this refusal.
    PrimaryRefused(PrimaryRefusal),
    /// A first attempt sent past a primary that refused it, the refusal
    /// not known.
    PrimaryRefusedUnsaid,
    /// The attempt before this one ended so.
    After(AttemptResult),
    /// The target before refused the request before any attempt.
    NoAttempt,
    /// The route's first entry cannot carry the request (a parameter or
    /// an endpoint its dialect or platform has no way to say).
    Untranslatable,
}

impl FallbackReason {
    /// The metric label: `primary_` and the refusal, or the previous
    /// attempt's result.
    pub(crate) fn label(self) -> &'static str {
        match self {
            FallbackReason::PrimaryRefused(r) => match r {
                PrimaryRefusal::CircuitOpen => "primary_circuit_open",
                PrimaryRefusal::Throttled => "primary_throttled",
                PrimaryRefusal::RateLimited => "primary_rate_limited",
                PrimaryRefusal::Recovering => "primary_circuit_recovering",
                PrimaryRefusal::Shed => "primary_shed",
                PrimaryRefusal::BudgetExhausted => "primary_budget_exhausted",
            },
            FallbackReason::PrimaryRefusedUnsaid => "primary_refused",
            FallbackReason::Untranslatable => "untranslatable",
            FallbackReason::After(r) => r.label(),
            FallbackReason::NoAttempt => "none",
        }
    }

    /// The reason in words, as the status page says it.
    pub(crate) fn words(self) -> &'static str {
        match self {
            FallbackReason::PrimaryRefused(r) => match r {
                PrimaryRefusal::CircuitOpen => "primary's circuit open",
                PrimaryRefusal::Throttled => "primary throttled (paced after a 429)",
                PrimaryRefusal::RateLimited => "primary's rate_limit allowance spent",
                PrimaryRefusal::Recovering => "primary recovering from an outage (ramping back)",
                PrimaryRefusal::Shed => "primary at its max_in_flight",
                PrimaryRefusal::BudgetExhausted => "caller's retry: primary's retry budget spent",
            },
            FallbackReason::PrimaryRefusedUnsaid => "primary refused it",
            FallbackReason::Untranslatable => {
                "primary cannot carry the request (a parameter or endpoint it has no way to say)"
            }
            FallbackReason::NoAttempt => "previous target refused it before an attempt",
            FallbackReason::After(r) => match r {
                AttemptResult::Success => "previous target answered",
                AttemptResult::Http5xx => "previous target answered 5xx",
                AttemptResult::Http4xx => "previous target answered 4xx (retryable by config)",
                AttemptResult::Http4xxForeignBody => {
                    "previous target answered 4xx, not in its JSON error shape (a proxy?)"
                }
                AttemptResult::Throttled => "previous target answered 429",
                AttemptResult::Timeout => "previous target timed out",
                AttemptResult::DeadlineCut => {
                    "previous attempt cut short to keep the fallback's time"
                }
                AttemptResult::ConnectError => "could not connect to the previous target",
                AttemptResult::ConnectTimeout => {
                    "no connection to the previous target opened in time"
                }
                AttemptResult::Tls => "TLS handshake with the previous target failed",
                AttemptResult::CutBeforeFirstEvent => {
                    "previous target's stream ended before its first event"
                }
                AttemptResult::BodyTimeout => "previous target's answer stalled mid-body",
                AttemptResult::BodyCut => "previous target's answer broke off mid-body",
                AttemptResult::ResponseTooLarge => {
                    "previous target's answer was over the size limit"
                }
                AttemptResult::Credentials => {
                    "previous target's signature or token could not be made"
                }
            },
        }
    }
}

/// Why a target was passed over for a request it cannot carry: the
/// `levee_translation_refused_total{reason}` label and `x-levee-skipped`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SkipReason {
    /// The request cannot be translated into the target's dialect.
    Untranslatable(levee_translate::Reason),
    /// The target's cloud platform does not serve this request.
    PlatformUnsupported,
}

impl SkipReason {
    /// The metric and header label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            SkipReason::Untranslatable(r) => r.label(),
            SkipReason::PlatformUnsupported => "platform_unsupported",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_statuses_are_classified_as_before() {
        let cases = [
            (429, false, "throttled"),
            (429, true, "throttled"),
            (400, false, "http_4xx"),
            (404, true, "http_4xx_foreign_body"),
            (500, true, "http_5xx"),
            (503, false, "http_5xx"),
        ];
        for (status, foreign, label) in cases {
            assert_eq!(
                AttemptResult::of_error_status(status, foreign).label(),
                label
            );
        }
    }

    #[test]
    fn only_timeouts_become_deadline_cuts() {
        assert_eq!(
            AttemptResult::Timeout.cut_by_deadline(),
            AttemptResult::DeadlineCut
        );
        assert_eq!(
            AttemptResult::BodyTimeout.cut_by_deadline(),
            AttemptResult::DeadlineCut
        );
        assert_eq!(
            AttemptResult::Http5xx.cut_by_deadline(),
            AttemptResult::Http5xx
        );
        assert!(!AttemptResult::DeadlineCut.is_timed());
        assert!(!AttemptResult::Tls.is_timed());
        assert!(AttemptResult::Timeout.is_timed());
    }
}
