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
mod link;
pub(crate) mod origins;
pub(crate) mod replicas;
mod spend;
pub use allowance::SharedMeter;
pub use link::{check_backend, RedisSetupError};

use crate::clock::Clock;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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
    /// Callers' spend, budgets and limits, and the hourly spend ledger.
    Spend,
}

impl StateUse {
    /// The metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            StateUse::Allowance => "allowance",
            StateUse::Idempotency => "idempotency",
            StateUse::StoredObjects => "stored_objects",
            StateUse::Replicas => "replicas",
            StateUse::Spend => "spend",
        }
    }
}

/// The Redis connection, with its time budget and the degradation logic
/// both jobs share.
pub struct RedisState {
    conn: link::Link,
    prefix: String,
    timeout: Duration,
    /// `state.replicas`: the floor of N, and N before a count is seen.
    pub replicas: u32,
    /// This replica's id in the leases.
    id: String,
    /// The live replicas last counted (0: none yet).
    live: std::sync::atomic::AtomicU32,
    /// The primary has Redis replicas: writes that must survive a failover
    /// wait for one to acknowledge.
    replicated: std::sync::atomic::AtomicBool,
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
        let conn = link::link(url, connect)?;
        Ok(RedisState {
            conn,
            prefix: prefix.to_string(),
            timeout,
            replicas: replicas.max(1),
            id: uuid::Uuid::now_v7().to_string(),
            live: std::sync::atomic::AtomicU32::new(0),
            replicated: std::sync::atomic::AtomicBool::new(false),
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
        let called = tokio::time::timeout(budget, async {
            let mut conn = self.conn.get().await?;
            inv.invoke_async::<T>(&mut conn).await
        })
        .await;
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
        let called = tokio::time::timeout(budget, async {
            let mut conn = self.conn.get().await?;
            cmd.query_async::<T>(&mut conn).await
        })
        .await;
        self.settle(what, called)
    }

    /// One pipeline of commands within the base time budget; `None` when
    /// Redis is down, slow or skipped.
    pub(crate) async fn pipe<T: redis::FromRedisValue>(
        &self,
        what: StateUse,
        pipe: &redis::Pipeline,
    ) -> Option<T> {
        if !self.available() {
            self.skipped(what);
            return None;
        }
        let called = tokio::time::timeout(self.timeout, async {
            let mut conn = self.conn.get().await?;
            pipe.query_async::<T>(&mut conn).await
        })
        .await;
        self.settle(what, called)
    }

    /// Opens the (lazy) connection from the calling runtime, within
    /// `budget`; best effort. The connection's driver task lives on the
    /// runtime that first uses it: opened from the main runtime at start, it
    /// outlives the per-CPU worker runtimes, which stop first at shutdown —
    /// when the leases still held are released.
    pub(crate) async fn connect_here(&self, budget: Duration) {
        let _ = tokio::time::timeout(budget, async {
            let mut conn = self.conn.get().await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        })
        .await;
    }

    /// One script invocation within `budget`, outside the degradation logic
    /// (at shutdown: Redis is tried even if skipped, and a failure counts
    /// for nothing).
    pub(crate) async fn run_once<T: redis::FromRedisValue>(
        &self,
        inv: redis::ScriptInvocation<'_>,
        budget: Duration,
    ) -> Option<T> {
        let called = tokio::time::timeout(budget, async {
            let mut conn = self.conn.get().await?;
            inv.invoke_async::<T>(&mut conn).await
        });
        match called.await {
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
                self.conn.failed(Some(&e));
                self.degraded(what, &e.to_string());
                None
            }
            Err(_) => {
                self.conn.failed(None);
                self.degraded(what, "timed out");
                None
            }
        }
    }
}
