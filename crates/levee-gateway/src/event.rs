//! What happens to a request, as values the request's observer turns into
//! metrics, the summary log line, trace spans, the census and the tape.

use levee_policy::Reason;
use std::time::Duration;

/// How a committed stream ended: its request's outcome (the
/// `levee_requests_total{outcome}` label and the log line's `outcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamOutcome {
    /// The provider ended the stream.
    Completed,
    /// The provider's stream broke off after the commit point.
    BrokeOff,
    /// The provider's stream sent nothing for the route's idle timeout.
    Stalled,
    /// The caller's deadline came mid-stream.
    DeadlineExceeded,
    /// The caller stopped reading (it disconnected) before the end.
    CallerLeft,
}

impl StreamOutcome {
    /// The request's outcome label: `success`, the `upstream_error` or
    /// `deadline_exceeded` its error event names, or `client_closed`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            StreamOutcome::Completed => "success",
            StreamOutcome::BrokeOff | StreamOutcome::Stalled => Reason::UpstreamError.as_str(),
            StreamOutcome::DeadlineExceeded => Reason::DeadlineExceeded.as_str(),
            StreamOutcome::CallerLeft => "client_closed",
        }
    }

    /// Whether the provider failed the stream (`levee_streams_failed`).
    pub(crate) fn provider_failed(self) -> bool {
        matches!(self, StreamOutcome::BrokeOff | StreamOutcome::Stalled)
    }
}

/// One thing that happened to an admitted request, reported to its observer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RequestEvent {
    /// A committed stream ended: `bytes` relayed to the caller over
    /// `duration` from the commit point.
    StreamEnded {
        outcome: StreamOutcome,
        bytes: u64,
        duration: Duration,
    },
}
