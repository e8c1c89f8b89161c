//! Shared state across replicas on Redis (`state: { backend: redis }`): the
//! connection with its time budget and fallback accounting, used by two
//! jobs — the providers' per-minute allowance (`allowance`, here) and the
//! idempotency keys (`crate::state::idempotency::redis`).
//!
//! Retry budgets stay per process (funded by local successes, no
//! coordination needed); what must be shared is what the provider meters per
//! organisation (every replica's attempts spend the same allowance)
//! and the idempotency keys (a caller's last-resort retry lands on another
//! replica and must not run twice).
//!
//! Every Redis call has a small time budget (default 5 ms). When Redis is slow
//! or down, Levee keeps serving: the allowance falls back to a local limiter at
//! 1/N of the rate (N = the replicas last counted by their leases in Redis,
//! `replicas`, never below `state.replicas`), idempotency to the local store; a
//! metric counts each fallback and one warning per minute is logged. After
//! three failures in a row Redis is skipped for a second (so a dead Redis
//! costs nothing per request), then tried again: sharing resumes by itself
//! when it returns. A single slow call falls back for that call only.

mod allowance;
pub(crate) mod idempotency;
pub(crate) mod origins;
pub(crate) mod replicas;
pub use allowance::SharedMeter;

use crate::clock::Clock;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use redis::aio::ConnectionManager;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// What a call to Redis was for: the `levee_state_fallbacks_total{what}`
/// label and the warning's `what`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StateUse {
    /// A provider's allowance shared by the replicas.
    Allowance,
    /// The idempotency store shared by the replicas.
    Idempotency,
    /// Where each stored response was created.
    StoredObjects,
    /// The replicas' leases (how many share each allowance).
    Replicas,
}

impl StateUse {
    /// The metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            StateUse::Allowance => "allowance",
            StateUse::Idempotency => "idempotency",
            StateUse::StoredObjects => "stored_objects",
            StateUse::Replicas => "replicas",
        }
    }
}

/// The Redis connection, with its time budget and the degradation logic
/// both jobs share.
pub struct RedisState {
    conn: ConnectionManager,
    prefix: String,
    timeout: Duration,
    /// `state.replicas`: the floor of N, and N before a count is seen.
    pub replicas: u32,
    /// This replica's id in the leases.
    id: String,
    /// The live replicas last counted (0: none yet).
    live: std::sync::atomic::AtomicU32,
    clock: Clock,
    skip_until_ns: AtomicU64,
    failures_in_a_row: AtomicU64,
    last_warn_ns: AtomicU64,
    fallbacks: Family<crate::observe::metrics::WhatLabel, Counter>,
    /// Idempotency leases this replica holds in Redis (lease id → Redis
    /// key), released at shutdown.
    held: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for RedisState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisState")
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// Why the Redis backend could not be set up (the URL shown redacted).
#[derive(Debug, thiserror::Error)]
pub enum RedisSetupError {
    #[error("state.url `{url}` is not a Redis URL like `redis://127.0.0.1:6379`: {source}")]
    Url {
        url: String,
        source: redis::RedisError,
    },
    #[error("state.tls: {what} `{path}` cannot be read: {source}")]
    File {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("state.tls: the certificates for `{url}` cannot be used: {source}")]
    Tls {
        url: String,
        source: redis::RedisError,
    },
    #[error("state.password_env: environment variable `{0}` is not set; export it, or put the password in the URL")]
    Password(String),
}

impl RedisSetupError {
    /// The `state` key at fault.
    pub fn key(&self) -> &'static str {
        match self {
            RedisSetupError::Url { .. } => "url",
            RedisSetupError::File { .. } | RedisSetupError::Tls { .. } => "tls",
            RedisSetupError::Password(_) => "password_env",
        }
    }

    /// Whether this is a value missing from the environment (`levee check
    /// --allow-missing-env` warns).
    pub fn is_missing(&self) -> bool {
        matches!(self, RedisSetupError::Password(_))
    }
}

/// `levee check`: the Redis client `state` would make can be made (its TLS
/// files read and parsed, its password variable set); nothing is
/// connected. `Ok` for the memory backend.
pub fn check_backend(state: &levee_config::StateBackend) -> Result<(), RedisSetupError> {
    match state {
        levee_config::StateBackend::Memory => Ok(()),
        levee_config::StateBackend::Redis { url, connect, .. } => client(url, connect).map(|_| ()),
    }
}

/// The Redis client for `url`: its password from `connect.password_env`
/// when set, and for a `rediss://` URL TLS by rustls, trusting the web PKI
/// or `tls.ca_file`, with `tls.cert_file` and `key_file` for mutual TLS.
fn client(
    url: &str,
    connect: &levee_config::RedisConnect,
) -> Result<redis::Client, RedisSetupError> {
    use redis::IntoConnectionInfo;
    let shown = || levee_config::redact_url(url);
    let mut info = url
        .into_connection_info()
        .map_err(|source| RedisSetupError::Url {
            url: shown(),
            source,
        })?;
    if let Some(var) = &connect.password_env {
        let password = std::env::var(var).map_err(|_| RedisSetupError::Password(var.clone()))?;
        let settings = info.redis_settings().clone().set_password(password);
        info = info.set_redis_settings(settings);
    }
    if url.starts_with("rediss://") {
        // The one crypto provider Levee builds (ring); the Redis client asks
        // for the process default.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let Some(tls) = &connect.tls else {
        return redis::Client::open(info).map_err(|source| RedisSetupError::Url {
            url: shown(),
            source,
        });
    };
    let read = |what: &'static str, path: &std::path::Path| {
        std::fs::read(path).map_err(|source| RedisSetupError::File {
            what,
            path: path.display().to_string(),
            source,
        })
    };
    let root_cert = tls
        .ca_file
        .as_deref()
        .map(|p| read("ca_file", p))
        .transpose()?;
    if let (Some(pem), Some(path)) = (&root_cert, &tls.ca_file) {
        if !pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
            return Err(RedisSetupError::File {
                what: "ca_file",
                path: path.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                ),
            });
        }
    }
    let client_tls = match &tls.client {
        Some((cert, key)) => Some(redis::ClientTlsConfig {
            client_cert: read("cert_file", cert)?,
            client_key: read("key_file", key)?,
        }),
        None => None,
    };
    let certs = redis::TlsCertificates {
        client_tls,
        root_cert,
    };
    redis::Client::build_with_tls(info, certs).map_err(|source| RedisSetupError::Tls {
        url: shown(),
        source,
    })
}

impl RedisState {
    /// Connects lazily: a Redis that is down at start is a fallback, not a failure.
    pub fn new(
        url: &str,
        connect: &levee_config::RedisConnect,
        prefix: &str,
        replicas: u32,
        timeout: Duration,
        clock: Clock,
        fallbacks: Family<crate::observe::metrics::WhatLabel, Counter>,
    ) -> Result<Self, RedisSetupError> {
        let err = |source| RedisSetupError::Url {
            url: levee_config::redact_url(url),
            source,
        };
        let client = client(url, connect)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(250)))
            .set_response_timeout(Some(Duration::from_millis(250)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(err)?;
        Ok(RedisState {
            conn,
            prefix: prefix.to_string(),
            timeout,
            replicas: replicas.max(1),
            id: uuid::Uuid::now_v7().to_string(),
            live: std::sync::atomic::AtomicU32::new(0),
            clock,
            skip_until_ns: AtomicU64::new(0),
            failures_in_a_row: AtomicU64::new(0),
            last_warn_ns: AtomicU64::new(0),
            fallbacks,
            held: Mutex::new(HashMap::new()),
        })
    }

    fn held(&self) -> MutexGuard<'_, HashMap<String, String>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a lease this replica holds on the Redis key `key`.
    pub fn hold(&self, lease_id: &str, key: &str) {
        self.held().insert(lease_id.to_string(), key.to_string());
    }

    /// Takes every lease still held (to release them at shutdown).
    pub(crate) fn take_held(&self) -> Vec<(String, String)> {
        self.held().drain().collect()
    }

    /// Forgets a lease (completed or released).
    pub fn unhold(&self, lease_id: &str) {
        self.held().remove(lease_id);
    }

    fn available(&self) -> bool {
        self.clock.now().as_nanos() >= self.skip_until_ns.load(Ordering::Relaxed)
    }

    fn degraded(&self, what: StateUse, why: &str) {
        let now = self.clock.now().as_nanos();
        if self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1 >= 3 {
            self.failures_in_a_row.store(0, Ordering::Relaxed);
            self.skip_until_ns
                .store(now + 1_000_000_000, Ordering::Relaxed);
        }
        self.fallbacks
            .get_or_create(&crate::observe::metrics::WhatLabel {
                what: what.label().to_string(),
            })
            .inc();
        let last = self.last_warn_ns.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= 60_000_000_000)
            && self
                .last_warn_ns
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(target: "levee::state", what = what.label(), why, "Redis unavailable: using local state (allowance at 1/N of the rate, local idempotency) until it returns");
        }
    }

    /// Counts a fallback taken without trying Redis (it is being skipped).
    fn skipped(&self, what: StateUse) {
        self.fallbacks
            .get_or_create(&crate::observe::metrics::WhatLabel {
                what: what.label().to_string(),
            })
            .inc();
    }

    /// The prefix of every key this gateway keeps in Redis.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The base time budget of one call.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs one script invocation within the time budget; `None` when Redis
    /// is down, slow or skipped.
    pub(crate) async fn run<T: redis::FromRedisValue>(
        &self,
        what: StateUse,
        inv: redis::ScriptInvocation<'_>,
    ) -> Option<T> {
        self.run_within(what, inv, self.timeout).await
    }

    /// [`Self::run`] with a given time budget.
    pub(crate) async fn run_within<T: redis::FromRedisValue>(
        &self,
        what: StateUse,
        inv: redis::ScriptInvocation<'_>,
        budget: Duration,
    ) -> Option<T> {
        if !self.available() {
            self.skipped(what);
            return None;
        }
        let mut conn = self.conn.clone();
        let called = tokio::time::timeout(budget, inv.invoke_async::<T>(&mut conn)).await;
        self.settle(what, called)
    }

    /// One command within `budget` (Redis is not skipped: the caller has
    /// just reached it).
    pub(crate) async fn query_within<T: redis::FromRedisValue>(
        &self,
        what: StateUse,
        cmd: redis::Cmd,
        budget: Duration,
    ) -> Option<T> {
        let mut conn = self.conn.clone();
        let called = tokio::time::timeout(budget, cmd.query_async::<T>(&mut conn)).await;
        self.settle(what, called)
    }

    /// Opens the (lazy) connection from the calling runtime, within
    /// `budget`; best effort. The connection's driver task lives on the
    /// runtime that first uses it: opened from the main runtime at start, it
    /// outlives the per-CPU worker runtimes, which stop first at shutdown —
    /// when the leases still held are released.
    pub(crate) async fn connect_here(&self, budget: Duration) {
        let mut conn = self.conn.clone();
        let _ =
            tokio::time::timeout(budget, redis::cmd("PING").query_async::<String>(&mut conn)).await;
    }

    /// One script invocation within `budget`, outside the degradation logic
    /// (at shutdown: Redis is tried even if skipped, and a failure counts
    /// for nothing).
    pub(crate) async fn run_once<T: redis::FromRedisValue>(
        &self,
        inv: redis::ScriptInvocation<'_>,
        budget: Duration,
    ) -> Option<T> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(budget, inv.invoke_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Some(v),
            _ => None,
        }
    }

    /// Counts a call's outcome: a success resets the failure run, a failure
    /// or timeout degrades.
    fn settle<T>(
        &self,
        what: StateUse,
        called: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
    ) -> Option<T> {
        match called {
            Ok(Ok(v)) => {
                self.failures_in_a_row.store(0, Ordering::Relaxed);
                Some(v)
            }
            Ok(Err(e)) => {
                self.degraded(what, &e.to_string());
                None
            }
            Err(_) => {
                self.degraded(what, "timed out");
                None
            }
        }
    }
}
