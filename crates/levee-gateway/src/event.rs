//! What happens to a request, as values the request's observer turns into
//! metrics, the summary log line, trace spans, the census and the tape.

use crate::outcome::{Rejection, RequestOutcome, SkipReason};
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
    /// The request's outcome: `success`, the `upstream_error` or
    /// `deadline_exceeded` its error event names, or `client_closed`.
    pub(crate) fn outcome(self) -> RequestOutcome {
        match self {
            StreamOutcome::Completed => RequestOutcome::Success,
            StreamOutcome::BrokeOff | StreamOutcome::Stalled => Reason::UpstreamError.into(),
            StreamOutcome::DeadlineExceeded => Reason::DeadlineExceeded.into(),
            StreamOutcome::CallerLeft => RequestOutcome::ClientClosed,
        }
    }

    /// Whether the provider failed the stream (`levee_streams_failed`).
    pub(crate) fn provider_failed(self) -> bool {
        matches!(self, StreamOutcome::BrokeOff | StreamOutcome::Stalled)
    }
}

/// One thing that happened to a request. Before the request is admitted
/// (it has no observer yet) it is reported with `observe::report`; from
/// admission on, to its `observe::Observer`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RequestEvent<'a> {
    /// A committed stream ended: `bytes` relayed to the caller over
    /// `duration` from the commit point. Only an admitted request's
    /// observer has a stream to end.
    StreamEnded {
        outcome: StreamOutcome,
        bytes: u64,
        duration: Duration,
    },
    /// The handler refused the request before admitting it.
    Rejected(Rejection),
    /// The route's bulkhead was full: shed at once, with `reason`.
    Shed { route: &'a str, reason: Reason },
    /// A keyed request could not be deduplicated across replicas and was
    /// refused.
    StateUnavailable { route: &'a str },
    /// The deadline passed while following an earlier request with the
    /// same key.
    FollowTimedOut { route: &'a str },
    /// Answered from the idempotency store.
    Replayed { route: &'a str },
    /// A caller layer is retrying (its SDK's retry count, or a repeated key).
    CallerRetry,
    /// A keyed request was deduplicated on this replica only.
    IdempotencyLocal,
    /// A target of the other dialect cannot carry the request: skipped.
    TranslationRefused {
        route: &'a str,
        provider: &'a str,
        reason: SkipReason,
    },
    /// The shutdown grace period ended before the answer.
    ShuttingDown,
    /// A retry on `provider` found the route's retry budget empty.
    BudgetExhausted { provider: &'a str },
}
