//! The counters the mock reports at `GET /_mock/stats`: read by tests and
//! by the drill, written by the mock.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Snapshot of `GET /_mock/stats`. Requests to `/_mock/*` are not counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Provider requests received (any path outside `/_mock/`).
    pub requests_total: u64,
    /// Answers sent, by HTTP status ("200", "503", ...). Resets, stalls and
    /// requests the client abandoned have no status and are not here.
    pub by_status: BTreeMap<String, u64>,
    /// Requests by the `model` in their body (requests without one are not here).
    pub by_model: BTreeMap<String, u64>,
    /// Requests by path (`/v1/chat/completions`, ...; anything else is "other").
    pub by_path: BTreeMap<String, u64>,
    /// Requests being handled right now.
    pub in_flight: u64,
    /// Highest `in_flight` seen since start or the last reset.
    pub max_in_flight: u64,
    /// For each `idempotency-key` header value, how many requests carried it.
    pub idempotency_keys: BTreeMap<String, u64>,
    /// The `x-timeout-ms` header values received.
    pub timeout_ms_seen: TimeoutSeen,
    /// Requests whose client went away before the answer was complete
    /// (including stalled requests the client gave up on and streams it left).
    pub client_closed: u64,
    /// How often each fault effect was applied.
    pub faults: FaultCounts,
    /// Answers taken from the replay tape.
    pub replayed: u64,
    /// Connections accepted (HTTP/1.1 and HTTP/2 alike).
    #[serde(default)]
    pub connections_total: u64,
    /// Provider requests that came over HTTP/2.
    #[serde(default)]
    pub http2_requests: u64,
    /// Requests the mock's own rate limits (`rate_limit:` in the fault
    /// document) refused with a 429 (also counted in `by_status`; an
    /// injected `status: 429` fault is counted in `faults.status` instead).
    #[serde(default)]
    pub rate_limited: u64,
    /// Requests a cloud mock (`--api azure|bedrock|vertex`) refused before
    /// answering: a missing or bad key, signature or token (each is also
    /// counted in `by_status`, not in `requests_total`).
    #[serde(default)]
    pub unauthorized: u64,
    /// Access tokens a cloud mock's token endpoint issued (`--api vertex`:
    /// `POST /token`).
    #[serde(default)]
    pub tokens_issued: u64,
}

/// Count and range of `x-timeout-ms` values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeoutSeen {
    pub count: u64,
    /// Smallest value seen; `null` when none.
    pub min: Option<u64>,
    /// Largest value seen; `null` when none.
    pub max: Option<u64>,
}

/// Fault effects applied, by kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultCounts {
    /// Error answers from a `status` fault.
    pub status: u64,
    /// Requests refused by the `capacity` limit.
    pub capacity: u64,
    pub reset: u64,
    pub stall: u64,
    pub cut_stream: u64,
    /// Requests delayed by a `latency` / `chunk_delay` fault.
    pub delayed: u64,
}
