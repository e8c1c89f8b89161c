//! Idempotency keys in Redis, shared by every replica: the first replica to
//! claim a key leads and holds a lease on it (renewed every third of
//! [`LEASE`] while the request runs); the others follow by polling until the
//! answer is stored, then replay it. When Redis cannot be consulted the
//! replica's local store decides (or, with `state.on_unavailable: refuse`,
//! the request is refused).

use super::{Claim, Claimed, Follow, IdempotencyBackend, IdempotencyStore, Scope, Stored};
use crate::state::RedisState;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue};
use redis::Script;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

const BEGIN_SCRIPT: &str = r#"
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

// Bytes stored are counted per time window of one TTL (`ARGV[8]` for the
// caller's bucket, `ARGV[9]` for the whole store, each followed by the
// window's number on Redis's own clock): every answer still alive was stored
// in this window or the one before, so the two together bound what is held,
// and the count falls as answers expire (a counter that only grew would
// stop storing a busy caller's answers for good). An answer over the
// per-answer limit (ARGV[6]), or one that would take its bucket past its
// share (ARGV[7]) or the store past its bound (ARGV[10]), is not stored and
// the key is freed. The counters' names are made here: they share the
// entry's hash tag, so a Redis Cluster serves them from the entry's slot.
const COMPLETE_SCRIPT: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'lease') ~= ARGV[1] then return 0 end
local size = string.len(ARGV[4]) + string.len(ARGV[3]) + 128
local ttl = tonumber(ARGV[5])
local t = redis.call('TIME')
local w = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / ttl)
local function used(prefix)
  return tonumber(redis.call('GET', prefix .. ':' .. w) or '0')
    + tonumber(redis.call('GET', prefix .. ':' .. (w - 1)) or '0')
end
if size > tonumber(ARGV[6]) or used(ARGV[8]) + size > tonumber(ARGV[7])
    or used(ARGV[9]) + size > tonumber(ARGV[10]) then
  redis.call('DEL', k)
  return 2
end
redis.call('HSET', k, 'state', 'done', 'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4])
redis.call('PEXPIRE', k, ttl)
for _, prefix in ipairs({ARGV[8], ARGV[9]}) do
  redis.call('INCRBY', prefix .. ':' .. w, size)
  redis.call('PEXPIRE', prefix .. ':' .. w, 2 * ttl)
end
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

const RELEASE_SCRIPT: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'lease') == ARGV[1] and redis.call('HGET', k, 'state') == 'inflight' then
  redis.call('DEL', k)
  return 1
end
return 0
"#;

const RENEW_SCRIPT: &str = r#"
local k = KEYS[1]
if redis.call('HGET', k, 'lease') == ARGV[1] and redis.call('HGET', k, 'state') == 'inflight' then
  return redis.call('PEXPIRE', k, ARGV[2])
end
return 0
"#;

static BEGIN: LazyLock<Script> = LazyLock::new(|| Script::new(BEGIN_SCRIPT));
static COMPLETE: LazyLock<Script> = LazyLock::new(|| Script::new(COMPLETE_SCRIPT));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SCRIPT));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_SCRIPT));

/// How long an in-flight marker lives without renewal: a crashed replica's
/// keys free themselves after this.
pub const LEASE: Duration = Duration::from_secs(10);

fn lease_ms() -> u64 {
    u64::try_from(LEASE.as_millis()).unwrap_or(10_000)
}

/// `{prefix}:idem:<caller>:<key>`; the caller is its digest's first 16
/// bytes. Every idempotency key and byte counter shares the hash tag
/// `{prefix}`: the store's bound is counted over all of them in the same
/// script that stores an answer, so a Redis Cluster must keep them in one
/// slot (one shard holds the idempotency store; the allowances spread).
fn idem_key(redis: &RedisState, caller: &[u8; 32], key: &str) -> String {
    format!("{{{}}}:idem:{}:{key}", redis.prefix(), hex(&caller[..16]))
}

/// `{prefix}:idem-bytes:<caller>`: the prefix of the counters of the bytes
/// a caller's bucket has stored (one per window, see the complete script).
fn bytes_key(redis: &RedisState, caller: &[u8; 32]) -> String {
    format!("{{{}}}:idem-bytes:{}", redis.prefix(), hex(&caller[..16]))
}

/// `{prefix}:idem-bytes-all`: the prefix of the whole store's counters.
fn all_bytes_key(redis: &RedisState) -> String {
    format!("{{{}}}:idem-bytes-all", redis.prefix())
}

fn hex(b: &[u8]) -> String {
    hex::encode(b)
}

/// Keys in Redis, shared by every replica; the local store when Redis is down.
#[derive(Debug)]
pub struct RedisBackend {
    pub redis: Arc<RedisState>,
    pub local: Arc<IdempotencyStore>,
    pub ttl: Duration,
    /// `state.on_unavailable: refuse`: no local fallback for keyed requests.
    pub refuse_unshared: bool,
    /// The most bytes of answers the shared store holds, over every
    /// replica and caller (`state.max_bytes`).
    pub max_bytes: u64,
}

impl IdempotencyBackend for RedisBackend {
    fn claim<'a>(&'a self, claim: Claim<'a>) -> BoxFuture<'a, (Claimed, Scope)> {
        let Claim {
            caller,
            key,
            body_hash,
            now,
            following,
        } = claim;
        Box::pin(async move {
            match self.claim_shared(caller, key, &body_hash, following).await {
                Some(claimed) => (claimed, Scope::Shared),
                None if self.refuse_unshared => (Claimed::Unavailable, Scope::Local),
                None => (self.local.claim(caller, key, body_hash, now), Scope::Local),
            }
        })
    }
}

impl RedisBackend {
    /// Claims the key in Redis: leads (taking a lease), follows or replays.
    /// `None` when Redis is unavailable.
    async fn claim_shared(
        &self,
        caller: [u8; 32],
        key: &str,
        body_hash: &[u8; 32],
        following: bool,
    ) -> Option<Claimed> {
        let id = uuid::Uuid::now_v7().to_string();
        let k = idem_key(&self.redis, &caller, key);
        let mut inv = BEGIN.prepare_invoke();
        inv.key(&k)
            .arg(hex(body_hash))
            .arg(&id)
            .arg(lease_ms())
            .arg(INLINE_BODY);
        // A follower looks while the leader may be writing its answer, and
        // Redis runs one command at a time: a look queued behind an 8 MB
        // write waited longer than the base budget, was taken for Redis
        // being down, and ran the request again (5 of 6 runs). It gets the
        // time the largest answer the store keeps takes to write.
        let budget = if following {
            self.redis.timeout()
                + Duration::from_millis(self.local.max_answer_bytes() / BYTES_PER_MS + 1)
        } else {
            self.redis.timeout()
        };
        let mut parts: Vec<Vec<u8>> = self
            .redis
            .run_within(crate::state::StateUse::Idempotency, inv, budget)
            .await?;
        if parts.first().map(Vec::as_slice) == Some(b"big") && parts.len() >= 4 {
            let len: u64 = std::str::from_utf8(&parts[3]).ok()?.parse().ok()?;
            parts[3] = self.read_body(&k, len).await?;
            parts[0] = b"done".to_vec();
        }
        if parts.first().map(Vec::as_slice) == Some(b"lead") {
            // The claim must outlive a failover before the request goes out.
            self.redis.wait_replicated().await;
        }
        Some(match parts.first().map(Vec::as_slice) {
            Some(b"lead") => Claimed::Lead(super::Lease::Redis(self.lease(caller, k, id))),
            Some(b"follow") => Claimed::Follow(Follow::Poll),
            Some(b"done") if parts.len() >= 4 => Claimed::Replay(Arc::new(stored_from(&parts))),
            _ => Claimed::Conflict,
        })
    }

    /// The lead's lease on `key`, renewed until it completes or is dropped.
    fn lease(&self, caller: [u8; 32], key: String, id: String) -> Lease {
        let redis = Arc::clone(&self.redis);
        let (k, lease) = (key.clone(), id.clone());
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(LEASE / 3).await;
                let mut inv = RENEW.prepare_invoke();
                inv.key(&k).arg(&lease).arg(lease_ms());
                let _: Option<i64> = redis.run(crate::state::StateUse::Idempotency, inv).await;
            }
        });
        self.redis.hold(&id, &key);
        Lease {
            redis: Arc::clone(&self.redis),
            caller,
            key,
            id,
            ttl: self.ttl,
            max_bytes: self.local.max_answer_bytes(),
            store_max_bytes: self.max_bytes,
            renew,
            done: false,
        }
    }

    /// A stored answer's body of `len` bytes, within a budget sized by it.
    async fn read_body(&self, key: &str, len: u64) -> Option<Vec<u8>> {
        let budget = self.redis.timeout() + Duration::from_millis(len / BYTES_PER_MS + 1);
        let mut cmd = redis::cmd("HGET");
        cmd.arg(key).arg("body");
        self.redis
            .query_within::<Option<Vec<u8>>>(crate::state::StateUse::Idempotency, cmd, budget)
            .await?
    }
}

/// A stored answer's fields as JSON: `[name, value]` pairs in order, so a
/// name the answer repeats (two `set-cookie`s) is replayed twice. Entries
/// written as an object (one value per name) by earlier releases are still
/// read.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum StoredFields {
    Pairs(Vec<(String, String)>),
    Map(BTreeMap<String, String>),
}

/// The answer in a `done` reply: status, headers (JSON) and body.
fn stored_from(parts: &[Vec<u8>]) -> Stored {
    let status = std::str::from_utf8(&parts[1])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let fields = match serde_json::from_slice(&parts[2]) {
        Ok(StoredFields::Pairs(pairs)) => pairs,
        Ok(StoredFields::Map(map)) => map.into_iter().collect(),
        Err(_) => Vec::new(),
    };
    let mut headers = HeaderMap::with_capacity(fields.len());
    for (k, v) in fields {
        if let (Ok(n), Ok(v)) = (HeaderName::try_from(k), HeaderValue::try_from(v)) {
            headers.append(n, v);
        }
    }
    Stored {
        status,
        headers,
        body: Bytes::from(parts[3].clone()),
    }
}

/// A key held in Redis, its lease renewed while the request runs. Dropping
/// it without completing releases the key.
#[derive(Debug)]
pub struct Lease {
    redis: Arc<RedisState>,
    caller: [u8; 32],
    /// The Redis key.
    key: String,
    id: String,
    ttl: Duration,
    /// The largest answer stored for replay.
    max_bytes: u64,
    /// The most bytes the whole store holds (`state.max_bytes`).
    store_max_bytes: u64,
    renew: tokio::task::JoinHandle<()>,
    done: bool,
}

impl Lease {
    /// Stores the answer for replay (`ttl`), unless it is over `max_bytes`,
    /// would take the caller's bucket past four times that stored, or the
    /// whole store past `store_max_bytes`: then the key is freed (a later
    /// request runs again).
    pub(super) async fn complete(mut self, stored: Stored) {
        self.done = true;
        self.renew.abort();
        let headers: Vec<(&str, &str)> = stored
            .headers
            .iter()
            .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?)))
            .collect();
        let mut inv = COMPLETE.prepare_invoke();
        inv.key(&self.key)
            .arg(&self.id)
            .arg(stored.status)
            .arg(serde_json::to_string(&headers).unwrap_or_else(|_| "[]".into()))
            .arg(stored.body.as_ref())
            .arg(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX))
            .arg(self.max_bytes)
            .arg(self.max_bytes.saturating_mul(4))
            .arg(bytes_key(&self.redis, &self.caller))
            .arg(all_bytes_key(&self.redis))
            .arg(self.store_max_bytes);
        // Writing a large answer takes longer than a lookup: size the budget.
        let len = stored.body.len() as u64;
        let budget = self.redis.timeout() + Duration::from_millis(len / BYTES_PER_MS + 1);
        let stored: Option<i64> = self
            .redis
            .run_within(crate::state::StateUse::Idempotency, inv, budget)
            .await;
        if stored == Some(1) {
            // The answer is served after this returns: stored where a
            // promoted replica has it too.
            self.redis.wait_replicated().await;
        }
        self.redis.unhold(&self.id);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renew.abort();
        if !self.done {
            // Release on a fresh task: the request that held it may be gone
            // (cleanup after a timeout must still happen).
            let (redis, key, id) = (
                Arc::clone(&self.redis),
                std::mem::take(&mut self.key),
                std::mem::take(&mut self.id),
            );
            // Shutdown releases whatever is still held (this task may never
            // run on a runtime that is stopping).
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                h.spawn(async move {
                    let mut inv = RELEASE.prepare_invoke();
                    inv.key(&key).arg(&id);
                    let _: Option<i64> = redis.run(crate::state::StateUse::Idempotency, inv).await;
                    redis.unhold(&id);
                });
            }
        }
    }
}

impl RedisState {
    /// Releases every idempotency lease still held (at shutdown, so other
    /// replicas run those keys at once instead of waiting out the lease).
    /// Returns how many were released.
    pub async fn release_held(&self) -> usize {
        let mut released = 0;
        for (id, key) in self.take_held() {
            // Twice: a connection whose driver ran on a worker runtime that
            // has stopped fails once, and the next call reconnects from here.
            for _ in 0..2 {
                let mut inv = RELEASE.prepare_invoke();
                inv.key(&key).arg(&id);
                if let Some(n) = self.run_once::<i64>(inv, Duration::from_millis(500)).await {
                    released += usize::try_from(n).unwrap_or(0);
                    break;
                }
            }
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(fields: &str) -> Vec<Vec<u8>> {
        vec![
            b"done".to_vec(),
            b"200".to_vec(),
            fields.as_bytes().to_vec(),
            b"{}".to_vec(),
        ]
    }

    #[test]
    fn a_repeated_field_is_stored_and_read_back_in_order() {
        let s = stored_from(&done(
            r#"[["set-cookie","a=1"],["server","s"],["set-cookie","b=2"]]"#,
        ));
        let cookies: Vec<_> = s.headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(s.headers["server"], "s");
    }

    #[test]
    fn an_entry_an_earlier_release_wrote_is_still_read() {
        let s = stored_from(&done(r#"{"server":"s","set-cookie":"a=1"}"#));
        assert_eq!(s.headers["server"], "s");
        assert_eq!(s.headers["set-cookie"], "a=1");
        assert!(stored_from(&done("not json")).headers.is_empty());
    }
}
