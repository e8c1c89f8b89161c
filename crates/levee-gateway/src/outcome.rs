//! How an upstream attempt ended and why the handler refused a request, as
//! values. Each value's metric and log label comes from the value itself
//! ([`AttemptResult::label`], [`Rejection::label`]); the label strings are
//! exported (dashboards, alerts and tests match them) and must not change.

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
            AttemptResult::ConnectError | AttemptResult::Tls | AttemptResult::DeadlineCut
        )
    }
}

/// Why the handler refused a request before admitting it: the
/// `levee_rejected{reason}` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// No such endpoint.
    NotFound,
    /// No route for the model asked for.
    NoRoute,
    /// A missing or invalid gateway key.
    Unauthorized,
    /// A request body over `limits.max_body_bytes`.
    PayloadTooLarge,
    /// Anything else about the request itself.
    BadRequest,
}

impl Rejection {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Rejection::NotFound => "not_found",
            Rejection::NoRoute => "no_route",
            Rejection::Unauthorized => "unauthorized",
            Rejection::PayloadTooLarge => "payload_too_large",
            Rejection::BadRequest => "bad_request",
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
