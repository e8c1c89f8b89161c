//! Shared state across replicas: the providers' per-minute allowance and the
//! idempotency store, on Redis (`state: { backend: redis }`).
//!
//! Retry budgets stay per process (funded by local successes, no
//! coordination needed); what must be shared is what the provider meters per
//! organisation (every replica's attempts spend the same allowance)
//! and the idempotency keys (a caller's last-resort retry lands on another
//! replica and must not run twice).
//!
//! Every Redis call has a small time budget (default 5 ms). When Redis is slow
//! or down, Levee keeps serving: the allowance falls back to a local limiter at
//! 1/N of the rate (N = `state.replicas`), idempotency to the local store; a
//! metric counts each fallback and one warning per minute is logged. After
//! three failures in a row Redis is skipped for a second (so a dead Redis
//! costs nothing per request), then tried again: sharing resumes by itself
//! when it returns. A single slow call falls back for that call only.

use crate::clock::Clock;
use crate::idempotency::Stored;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use redis::aio::ConnectionManager;
use redis::Script;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const GCRA: &str = r#"
local key = KEYS[1]
local emission = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', key) or now)
if tat < now then tat = now end
local allow_at = tat - tolerance
if allow_at > now then return allow_at - now end
local new_tat = tat + emission
redis.call('SET', key, string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1000)
return 0
"#;

const BEGIN: &str = r#"
local k = KEYS[1]
local st = redis.call('HGET', k, 'state')
if not st then
  redis.call('HSET', k, 'state', 'inflight', 'hash', ARGV[1], 'lease', ARGV[2])
  redis.call('PEXPIRE', k, ARGV[3])
  return {'lead'}
end
if redis.call('HGET', k, 'hash') ~= ARGV[1] then return {'conflict'} end
if st == 'inflight' then return {'follow'} end
local n = redis.call('HSTRLEN', k, 'body')
if n > tonumber(ARGV[4]) then
  return {'big', redis.call('HGET', k, 'status'), redis.call('HGET', k, 'headers'), tostring(n)}
end
return {'done', redis.call('HGET', k, 'status'), redis.call('HGET', k, 'headers'), redis.call('HGET', k, 'body')}
"#;

// KEYS[2] counts the bytes a caller has stored (expiring with its newest
// answer): an answer over the per-answer limit (ARGV[6]), or one that would
// take the caller past its share (ARGV[7]), is not stored and the key is freed.
const COMPLETE: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'lease') ~= ARGV[1] then return 0 end
local size = string.len(ARGV[4]) + string.len(ARGV[3]) + 128
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
if size > tonumber(ARGV[6]) or used + size > tonumber(ARGV[7]) then
  redis.call('DEL', k)
  return 2
end
redis.call('HSET', k, 'state', 'done', 'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4])
redis.call('PEXPIRE', k, ARGV[5])
redis.call('INCRBY', KEYS[2], size)
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
"#;

/// Answers up to this size come back with the lookup itself; larger ones
/// are fetched by a second call whose time budget grows with their size.
const INLINE_BODY: u64 = 64 * 1024;

/// The budget per byte, beyond the base timeout, for writing or reading a
/// stored answer: 1 ms per 8 KiB (a 6.5 MB answer gets 800 ms more). Writing
/// a 6.5 MB answer to loopback Redis took 114 ms in a debug build on a loaded
/// 2-core machine; with 1 ms per 64 KiB it timed out, and the other replica's
/// lookup, queued behind the write, fell back to running the request again.
/// Only a lookup that found a large answer waits this long: an unreachable
/// Redis still fails within the base timeout.
const BYTES_PER_MS: u64 = 8 * 1024;

const RELEASE: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'lease') == ARGV[1] and redis.call('HGET', k, 'state') == 'inflight' then
  redis.call('DEL', k)
  return 1
end
return 0
"#;

const RENEW: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'lease') == ARGV[1] and redis.call('HGET', k, 'state') == 'inflight' then
  return redis.call('PEXPIRE', k, ARGV[2])
end
return 0
"#;

/// How long an in-flight marker lives without renewal: a crashed replica's
/// keys free themselves after this.
pub const LEASE: Duration = Duration::from_secs(10);

/// What `begin` found in Redis.
#[derive(Debug)]
pub enum RemoteBegin {
    Lead,
    Follow,
    Conflict,
    Done(Stored),
}

/// The Redis connection and scripts, with the degradation logic.
pub struct RedisState {
    conn: ConnectionManager,
    prefix: String,
    timeout: Duration,
    pub replicas: u32,
    clock: Clock,
    skip_until_ns: AtomicU64,
    failures_in_a_row: AtomicU64,
    last_warn_ns: AtomicU64,
    fallbacks: Family<crate::metrics::WhatLabel, Counter>,
    gcra: Script,
    begin: Script,
    complete: Script,
    release: Script,
    renew: Script,
    /// Leases this replica holds in Redis (lease id → caller, key), released
    /// at shutdown.
    held: std::sync::Mutex<std::collections::HashMap<String, ([u8; 32], String)>>,
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
#[error("state.url `{url}` is not a Redis URL like `redis://127.0.0.1:6379`: {source}")]
pub struct RedisSetupError {
    url: String,
    source: redis::RedisError,
}

impl RedisState {
    /// Connects lazily: a Redis that is down at start is a fallback, not a failure.
    pub fn new(
        url: &str,
        prefix: &str,
        replicas: u32,
        timeout: Duration,
        clock: Clock,
        fallbacks: Family<crate::metrics::WhatLabel, Counter>,
    ) -> Result<Self, RedisSetupError> {
        let err = |source| RedisSetupError {
            url: levee_config::redact_url(url),
            source,
        };
        let client = redis::Client::open(url).map_err(err)?;
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
            clock,
            skip_until_ns: AtomicU64::new(0),
            failures_in_a_row: AtomicU64::new(0),
            last_warn_ns: AtomicU64::new(0),
            fallbacks,
            gcra: Script::new(GCRA),
            begin: Script::new(BEGIN),
            complete: Script::new(COMPLETE),
            release: Script::new(RELEASE),
            renew: Script::new(RENEW),
            held: std::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    fn held(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, ([u8; 32], String)>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a lease this replica holds.
    pub fn hold(&self, lease_id: &str, caller: [u8; 32], key: &str) {
        self.held()
            .insert(lease_id.to_string(), (caller, key.to_string()));
    }

    /// Forgets a lease (completed or released).
    pub fn unhold(&self, lease_id: &str) {
        self.held().remove(lease_id);
    }

    /// Releases every lease still held (at shutdown, so other replicas run
    /// those keys at once instead of waiting out the lease). Returns how
    /// many were released.
    pub async fn release_held(&self) -> usize {
        let held: Vec<(String, ([u8; 32], String))> = self.held().drain().collect();
        let mut released = 0;
        for (id, (caller, key)) in held {
            let mut inv = self.release.prepare_invoke();
            inv.key(self.idem_key(&caller, &key)).arg(&id);
            let mut conn = self.conn.clone();
            let call = inv.invoke_async::<i64>(&mut conn);
            if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(500), call).await {
                released += usize::try_from(n).unwrap_or(0);
            }
        }
        released
    }

    fn available(&self) -> bool {
        self.clock.now().as_nanos() >= self.skip_until_ns.load(Ordering::Relaxed)
    }

    fn degraded(&self, what: &'static str, why: &str) {
        let now = self.clock.now().as_nanos();
        if self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1 >= 3 {
            self.failures_in_a_row.store(0, Ordering::Relaxed);
            self.skip_until_ns
                .store(now + 1_000_000_000, Ordering::Relaxed);
        }
        self.fallbacks
            .get_or_create(&crate::metrics::WhatLabel {
                what: what.to_string(),
            })
            .inc();
        let last = self.last_warn_ns.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= 60_000_000_000)
            && self
                .last_warn_ns
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(target: "levee::state", what, why, "Redis unavailable: using local state (allowance at 1/N of the rate, local idempotency) until it returns");
        }
    }

    /// Counts a fallback taken without trying Redis (it is being skipped).
    fn skipped(&self, what: &'static str) {
        self.fallbacks
            .get_or_create(&crate::metrics::WhatLabel {
                what: what.to_string(),
            })
            .inc();
    }

    /// Runs one script invocation within the time budget; `None` when Redis
    /// is down, slow or skipped.
    async fn run<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        inv: redis::ScriptInvocation<'_>,
    ) -> Option<T> {
        self.run_within(what, inv, self.timeout).await
    }

    /// [`Self::run`] with a given time budget.
    async fn run_within<T: redis::FromRedisValue>(
        &self,
        what: &'static str,
        inv: redis::ScriptInvocation<'_>,
        budget: Duration,
    ) -> Option<T> {
        if !self.available() {
            self.skipped(what);
            return None;
        }
        let mut conn = self.conn.clone();
        match tokio::time::timeout(budget, inv.invoke_async::<T>(&mut conn)).await {
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

    /// One request of `provider`'s shared allowance: `Some(Ok)` allowed,
    /// `Some(Err(wait))` refused until then, `None` Redis unavailable.
    pub async fn allowance(
        &self,
        provider: &str,
        rpm: u32,
        burst: u32,
    ) -> Option<Result<(), Duration>> {
        let emission_us = 60_000_000u64 / u64::from(rpm.max(1));
        let tolerance_us = emission_us * u64::from(burst.max(1) - 1);
        let mut inv = self.gcra.prepare_invoke();
        inv.key(format!("{}:rl:{}", self.prefix, provider))
            .arg(emission_us)
            .arg(tolerance_us);
        let wait_us: u64 = self.run("allowance", inv).await?;
        Some(if wait_us == 0 {
            Ok(())
        } else {
            Err(Duration::from_micros(wait_us))
        })
    }

    fn idem_key(&self, caller: &[u8; 32], key: &str) -> String {
        let mut k = format!("{}:idem:", self.prefix);
        for b in &caller[..16] {
            k.push_str(&format!("{b:02x}"));
        }
        k.push(':');
        k.push_str(key);
        k
    }

    /// Claims, follows or replays a key. `None` when Redis is unavailable.
    pub async fn begin(
        &self,
        caller: &[u8; 32],
        key: &str,
        body_hash: &[u8; 32],
        lease_id: &str,
    ) -> Option<RemoteBegin> {
        let mut inv = self.begin.prepare_invoke();
        let k = self.idem_key(caller, key);
        inv.key(&k)
            .arg(hex(body_hash))
            .arg(lease_id)
            .arg(u64::try_from(LEASE.as_millis()).unwrap_or(10_000))
            .arg(INLINE_BODY);
        let mut parts: Vec<Vec<u8>> = self.run("idempotency", inv).await?;
        if parts.first().map(Vec::as_slice) == Some(b"big") && parts.len() >= 4 {
            let len: u64 = std::str::from_utf8(&parts[3]).ok()?.parse().ok()?;
            parts[3] = self.read_body(&k, len).await?;
            parts[0] = b"done".to_vec();
        }
        Some(match parts.first().map(Vec::as_slice) {
            Some(b"lead") => RemoteBegin::Lead,
            Some(b"follow") => RemoteBegin::Follow,
            Some(b"done") if parts.len() >= 4 => {
                let status = std::str::from_utf8(&parts[1])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(200);
                let map: BTreeMap<String, String> =
                    serde_json::from_slice(&parts[2]).unwrap_or_default();
                let mut headers = HeaderMap::new();
                for (k, v) in map {
                    if let (Ok(n), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) {
                        headers.append(n, v);
                    }
                }
                RemoteBegin::Done(Stored {
                    status,
                    headers,
                    body: Bytes::from(parts[3].clone()),
                })
            }
            _ => RemoteBegin::Conflict,
        })
    }

    /// A stored answer's body of `len` bytes, within a budget sized by it.
    async fn read_body(&self, key: &str, len: u64) -> Option<Vec<u8>> {
        let budget = self.timeout + Duration::from_millis(len / BYTES_PER_MS + 1);
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("HGET");
        cmd.arg(key).arg("body");
        match tokio::time::timeout(budget, cmd.query_async::<Option<Vec<u8>>>(&mut conn)).await {
            Ok(Ok(body)) => {
                self.failures_in_a_row.store(0, Ordering::Relaxed);
                body
            }
            Ok(Err(e)) => {
                self.degraded("idempotency", &e.to_string());
                None
            }
            Err(_) => {
                self.degraded("idempotency", "timed out reading a stored answer");
                None
            }
        }
    }

    /// Stores the leader's answer for replay (`ttl`), unless it is over
    /// `max_bytes` or would take the caller past `max_bytes` stored: then the
    /// key is freed (a later request runs again).
    pub async fn complete(
        &self,
        caller: &[u8; 32],
        key: &str,
        lease_id: &str,
        stored: &Stored,
        ttl: Duration,
        max_bytes: u64,
    ) {
        let headers: BTreeMap<&str, &str> = stored
            .headers
            .iter()
            .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
            .collect();
        let mut inv = self.complete.prepare_invoke();
        let mut used = format!("{}:idem-bytes:", self.prefix);
        for b in &caller[..16] {
            used.push_str(&format!("{b:02x}"));
        }
        inv.key(self.idem_key(caller, key))
            .key(used)
            .arg(lease_id)
            .arg(stored.status)
            .arg(serde_json::to_string(&headers).unwrap_or_else(|_| "{}".into()))
            .arg(stored.body.as_ref())
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            .arg(max_bytes)
            .arg(max_bytes.saturating_mul(4));
        // Writing a large answer takes longer than a lookup: size the budget.
        let len = stored.body.len() as u64;
        let budget = self.timeout + Duration::from_millis(len / BYTES_PER_MS + 1);
        let _: Option<i64> = self.run_within("idempotency", inv, budget).await;
    }

    /// Drops the leader's in-flight marker (it failed or was cancelled).
    pub async fn release(&self, caller: &[u8; 32], key: &str, lease_id: &str) {
        let mut inv = self.release.prepare_invoke();
        inv.key(self.idem_key(caller, key)).arg(lease_id);
        let _: Option<i64> = self.run("idempotency", inv).await;
    }

    /// Extends the leader's in-flight marker.
    pub async fn renew(&self, caller: &[u8; 32], key: &str, lease_id: &str) {
        let mut inv = self.renew.prepare_invoke();
        inv.key(self.idem_key(caller, key))
            .arg(lease_id)
            .arg(u64::try_from(LEASE.as_millis()).unwrap_or(10_000));
        let _: Option<i64> = self.run("idempotency", inv).await;
    }
}

fn hex(b: &[u8; 32]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
