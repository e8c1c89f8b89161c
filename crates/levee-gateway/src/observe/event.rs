//! What happens to a request, as values the request's observer turns into
//! metrics, the summary log line, trace spans, the census and the tape.

use crate::http::respond::Why;
use crate::observe::outcome::{AttemptResult, RequestOutcome, SkipReason};
use bytes::Bytes;
use http::HeaderMap;
use levee_policy::planner::Dispatch;
use levee_policy::{Class, Failure, Instant, Outcome, Reason, RequestState};
use std::time::Duration;

/// The last upstream error answer, kept to pass on or log once.
pub(crate) struct LastError {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// A 4xx without the provider's JSON error shape (a proxy in between).
    pub foreign: bool,
}

/// How one failed attempt ended.
#[derive(Clone, Copy)]
pub(crate) struct Finished<'a> {
    pub target: usize,
    pub started: Instant,
    pub outcome: Outcome,
    pub result: AttemptResult,
    pub class: Class,
    /// The error answer the attempt got, when it got one.
    pub error: Option<&'a LastError>,
}

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
    /// The gateway's shutdown grace period ended mid-stream.
    ShuttingDown,
}

impl StreamOutcome {
    /// The request's outcome: `success`, the `upstream_error`,
    /// `deadline_exceeded` or `shutting_down` its error event names, or
    /// `client_closed`.
    pub(crate) fn outcome(self) -> RequestOutcome {
        match self {
            StreamOutcome::Completed => RequestOutcome::Success,
            StreamOutcome::BrokeOff | StreamOutcome::Stalled => Reason::UpstreamError.into(),
            StreamOutcome::DeadlineExceeded => Reason::DeadlineExceeded.into(),
            StreamOutcome::CallerLeft => RequestOutcome::ClientClosed,
            StreamOutcome::ShuttingDown => RequestOutcome::Failed(Why::ShuttingDown),
        }
    }

    /// Whether the provider failed the stream (`levee_streams_failed`).
    pub(crate) fn provider_failed(self) -> bool {
        matches!(self, StreamOutcome::BrokeOff | StreamOutcome::Stalled)
    }
}

/// The tokens an answer from one of the route's targets used, by its
/// usage: `levee_tokens_total`'s input and output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokensUsed {
    /// The route's target that answered.
    pub target: usize,
    /// The fault domain (model) the attempt was admitted in, at the provider.
    pub domain: u16,
    pub used: levee_policy::allowance::Cost,
    /// A partial count: what arrived of an attempt cut short (a stream
    /// the caller left or that broke off, an attempt given up at its
    /// deadline), its input estimated from the request when the provider
    /// had not said it.
    pub partial: bool,
    /// Input read from or written to the provider's prompt cache.
    pub cached: levee_config::prices::Cached,
    /// When the count was settled: the hour the spend ledger books it in.
    pub at: Instant,
    /// The price of the model the attempt was admitted for (`prices:`,
    /// else the built-in list price; `None`: unknown), looked up when the
    /// count was settled, under the provider's lock the settling takes.
    pub price: Option<levee_config::prices::Price>,
}

/// One thing that happened to a request. Before the request is admitted
/// (it has no observer yet) it is reported with `observe::report`; from
/// admission on, to its `observe::Observer`.
#[derive(Clone, Copy)]
pub(crate) enum RequestEvent<'a> {
    /// The planner chose `target` and passed it over: it cannot carry the
    /// request, for `reason`.
    Skipped { target: usize, reason: SkipReason },
    /// A backoff (or Retry-After) wait from `now` until `until` begins.
    Waiting { now: Instant, until: Instant },
    /// The wait that began at `since` is over.
    Waited { since: Instant },
    /// Attempt `n` (the planner's `dispatch`) is about to be sent at `now`,
    /// the request's deadline `deadline`.
    AttemptStarted {
        dispatch: &'a Dispatch,
        n: u32,
        deadline: Instant,
        now: Instant,
    },
    /// The attempt ended without an answer to relay.
    AttemptFinished(Finished<'a>),
    /// A 2xx answer from the request's target (attempt begun at `started`)
    /// is being relayed: buffered whole (`body`), or a stream from its
    /// commit point (`body` is `None`).
    Delivered {
        req: &'a RequestState,
        started: Instant,
        /// Now: the clock as the deliverer last read it, once the answer
        /// (or a stream's first event) was in.
        at: Instant,
        head: &'a http::response::Parts,
        body: Option<&'a Bytes>,
        model: &'a str,
    },
    /// The planner gave up with `failure`, the provider's last error answer
    /// `last_error`.
    Failed {
        req: &'a RequestState,
        failure: &'a Failure,
        last_error: Option<&'a LastError>,
        model: &'a str,
    },
    /// An answer's usage settled its tokens. Only an admitted request's
    /// observer knows the route they count on.
    TokensUsed(TokensUsed),
    /// A committed stream ended: `bytes` relayed to the caller over
    /// `duration` from the commit point. Only an admitted request's
    /// observer has a stream to end.
    StreamEnded {
        outcome: StreamOutcome,
        bytes: u64,
        duration: Duration,
        /// The events the provider sent, as relayed, when the exchange is
        /// recorded (`--record`).
        chunks: Option<&'a [String]>,
    },
    /// The handler refused the request before admitting it.
    Rejected(Why),
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
