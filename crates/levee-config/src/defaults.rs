//! The defaults the configuration owns: each written once, here. Defaults of
//! the policy core's objects (breaker, budget, backoff, deadline, retryable
//! set, Retry-After cap, burst) are not: they come from the core's own
//! `Default`s and constants.

use std::time::Duration;

/// `listen`.
pub const LISTEN: ([u8; 4], u16) = ([127, 0, 0, 1], 8080);
/// `admin.listen`.
pub const ADMIN_LISTEN: ([u8; 4], u16) = ([127, 0, 0, 1], 9090);
/// `shutdown_grace`: how long in-flight requests may finish after SIGTERM.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// A route's bulkhead when the config sets none.
pub const ROUTE_MAX_IN_FLIGHT: u32 = 1024;
/// `expected_attempt_ms`: what the census and fallback reserve assume one
/// attempt takes.
pub const EXPECTED_ATTEMPT_MS: u64 = 8000;
/// `retry.max_attempts`, counting the first. Eight, because in a random
/// brownout retries that win cost almost nothing (at 30 % faults: 1.43
/// requests a call however many are allowed; 99.99 % answered with eight,
/// 99.8 % with five, 97.3 % with three), and where they stop winning a
/// target gets three at most (`levee_policy::planner::LOSING_ATTEMPTS`)
/// and the budget holds them to a tenth of the successes. At a 60 % random
/// loss eight answer 98.3 % at 2.46 requests a call (measured live 97.8–
/// 98.5 % at 2.47–2.49); nine would answer 99.0 % at 2.48, ten 99.4 % at
/// 2.49 but put a 60 % 429 storm's p99 past 8 s (each retry waits up to its
/// `retry-after`). Routes with a backup keep the same eight: an overload
/// answer (429, 503, 529) goes to the backup at once unless the target's
/// retries are proven winning, so the count only matters there for faults
/// a retry on the same target fixes (500, 502, 504, timeouts, connection
/// errors) and for random loss, where it buys the same as without one.
pub const MAX_ATTEMPTS: u32 = 8;
/// `retry.respect_retry_after`.
pub const RESPECT_RETRY_AFTER: bool = true;
/// `stream_idle_timeout`: the longest gap between two stream events.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A provider's `connect_timeout`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A provider's `http2_max_streams`: the most streams on one HTTP/2
/// connection (100 is also the fewest a server should allow at once).
pub const HTTP2_MAX_STREAMS: u32 = 100;

/// `state.url` with `backend: redis`.
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";
/// `state.key_prefix`.
pub const REDIS_KEY_PREFIX: &str = "levee";
/// `state.replicas`.
pub const REDIS_REPLICAS: u32 = 1;
/// `state.timeout`: a shared-state call slower than this falls back.
pub const REDIS_TIMEOUT: Duration = Duration::from_millis(5);
/// `state.max_bytes`: stored answers in Redis, over every replica and
/// caller (four callers' full shares of the default `idempotency.max_bytes`).
pub const REDIS_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The built-in mock provider, used when no providers are configured.
pub mod mock {
    use std::time::Duration;
    /// Its address until the caller points it at a running mock.
    pub const BASE_URL: &str = "http://127.0.0.1:9100";
    pub const MAX_IN_FLIGHT: u32 = 10_000;
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
}

/// The most HTTP/1 connections to one provider at once: past it, an
/// attempt waits for one to come free for a quarter of its time, then is
/// refused (`pool_exhausted`). A provider at 1,024 answers in flight with
/// HTTP/1 needs that many; HTTP/2 carries many on one.
pub const MAX_CONNECTIONS: u32 = 1024;
