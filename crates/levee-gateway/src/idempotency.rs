//! The idempotency store: nothing runs twice.
//!
//! Keyed by (caller identity, `idempotency-key`). The first request with a key
//! leads; a second one while it is in flight waits for its result instead of
//! calling the provider; after completion a non-streaming success is replayed
//! (`x-levee-replayed: true`) until the TTL expires. The same key with a
//! different body is refused (422). A lease that is dropped — the request
//! failed, was cancelled or timed out — releases the entry at once, so a later
//! retry runs again instead of finding it stuck "in progress" (seed 004).
//! Bounded: at most `max_entries`; expired entries are evicted first, and when
//! the store is full of live entries a new key simply is not stored.
//!
//! Where keys live is an [`IdempotencyBackend`]: [`MemoryBackend`] (the
//! default, one process) or [`RedisBackend`] (shared by replicas, falling back
//! to the local store when Redis is unavailable).

use crate::state::{RedisState, RemoteBegin};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::HeaderMap;
use levee_policy::Instant;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// A stored successful response.
#[derive(Debug)]
pub struct Stored {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

type Key = ([u8; 32], String);

#[derive(Debug)]
enum Entry {
    InFlight {
        body_hash: [u8; 32],
        done: watch::Receiver<Option<Arc<Stored>>>,
        lease: u64,
    },
    Done {
        body_hash: [u8; 32],
        stored: Arc<Stored>,
        expires: Instant,
    },
}

/// What to do with a request that carries a key.
#[derive(Debug)]
pub enum Begin {
    /// Run it; hand the result to the lease.
    Lead(Lease),
    /// Another request with this key is running: wait for its result.
    Follow(watch::Receiver<Option<Arc<Stored>>>),
    /// Already answered: replay.
    Replay(Arc<Stored>),
    /// Same key, different body.
    Conflict,
    /// The store is full of live entries: run without deduplication.
    Untracked,
}

/// The in-memory store.
#[derive(Debug)]
pub struct IdempotencyStore {
    inner: Mutex<Inner>,
    ttl: Duration,
    max_entries: usize,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Key, Entry>,
    order: VecDeque<(Key, Instant)>,
    next_lease: u64,
}

/// The leader's handle. Dropping it without [`Lease::complete`] releases the key.
#[derive(Debug)]
pub struct Lease {
    store: Arc<IdempotencyStore>,
    key: Option<Key>,
    id: u64,
    tx: watch::Sender<Option<Arc<Stored>>>,
}

impl IdempotencyStore {
    /// A store keeping answers for `ttl`, at most `max_entries` keys.
    pub fn new(ttl: Duration, max_entries: usize) -> Self {
        IdempotencyStore {
            inner: Mutex::new(Inner::default()),
            ttl,
            max_entries: max_entries.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this key was seen recently (a caller layer is retrying).
    pub fn seen(&self, caller: [u8; 32], key: &str, now: Instant) -> bool {
        let g = self.lock();
        match g.map.get(&(caller, key.to_string())) {
            Some(Entry::InFlight { .. }) => true,
            Some(Entry::Done { expires, .. }) => *expires > now,
            None => false,
        }
    }

    /// Starts a request with `key` from `caller` whose body hashes to `body_hash`.
    pub fn begin(
        self: &Arc<Self>,
        caller: [u8; 32],
        key: &str,
        body_hash: [u8; 32],
        now: Instant,
    ) -> Begin {
        let mut g = self.lock();
        let k: Key = (caller, key.to_string());
        match g.map.get(&k) {
            Some(Entry::InFlight {
                body_hash: h, done, ..
            }) => {
                return if *h == body_hash {
                    Begin::Follow(done.clone())
                } else {
                    Begin::Conflict
                };
            }
            Some(Entry::Done {
                body_hash: h,
                stored,
                expires,
            }) if *expires > now => {
                return if *h == body_hash {
                    Begin::Replay(Arc::clone(stored))
                } else {
                    Begin::Conflict
                };
            }
            _ => {}
        }
        // Evict expired answers (oldest first), then refuse to grow past the cap.
        while let Some((old, exp)) = g.order.front().cloned() {
            if exp > now && g.map.len() < self.max_entries {
                break;
            }
            g.order.pop_front();
            if let Some(Entry::Done { expires, .. }) = g.map.get(&old) {
                if *expires <= now || g.map.len() >= self.max_entries {
                    g.map.remove(&old);
                }
            }
        }
        if g.map.len() >= self.max_entries {
            return Begin::Untracked;
        }
        let (tx, rx) = watch::channel(None);
        g.next_lease += 1;
        let id = g.next_lease;
        g.map.insert(
            k.clone(),
            Entry::InFlight {
                body_hash,
                done: rx,
                lease: id,
            },
        );
        Begin::Lead(Lease {
            store: Arc::clone(self),
            key: Some(k),
            id,
            tx,
        })
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Lease {
    /// Stores a successful answer for replay and wakes the followers.
    pub fn complete(mut self, stored: Stored, now: Instant) {
        let Some(key) = self.key.take() else { return };
        let stored = Arc::new(stored);
        let expires = now + self.store.ttl;
        {
            let mut g = self.store.lock();
            let body_hash = match g.map.get(&key) {
                Some(Entry::InFlight {
                    body_hash, lease, ..
                }) if *lease == self.id => *body_hash,
                _ => return,
            };
            g.map.insert(
                key.clone(),
                Entry::Done {
                    body_hash,
                    stored: Arc::clone(&stored),
                    expires,
                },
            );
            g.order.push_back((key, expires));
        }
        let _ = self.tx.send(Some(stored));
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut g = self.store.lock();
            if matches!(g.map.get(&key), Some(Entry::InFlight { lease, .. }) if *lease == self.id) {
                g.map.remove(&key);
            }
        }
        // Followers see the sender close with no answer and run themselves.
    }
}

/// Where idempotency keys live.
pub trait IdempotencyBackend: Send + Sync {
    /// Starts a request with `key` from `caller` whose body hashes to `body_hash`.
    fn claim<'a>(
        &'a self,
        caller: [u8; 32],
        key: &'a str,
        body_hash: [u8; 32],
        now: Instant,
    ) -> BoxFuture<'a, Claimed>;
}

/// What to do with a request that carries a key.
#[derive(Debug)]
pub enum Claimed {
    /// Run it; hand the result to the claim.
    Lead(Claim),
    /// Another request with this key is running: wait for its result.
    Follow(Follow),
    /// Already answered: replay.
    Replay(Arc<Stored>),
    /// Same key, different body.
    Conflict,
    /// Not deduplicated (store full).
    Untracked,
}

/// How a follower learns the leader's result.
#[derive(Debug)]
pub enum Follow {
    /// Same process: woken when the leader finishes (or gives up).
    Local(watch::Receiver<Option<Arc<Stored>>>),
    /// Another replica leads: ask again shortly.
    Poll,
}

/// The leader's hold on a key; dropping it without completing releases the key.
#[derive(Debug)]
pub enum Claim {
    Local(Lease),
    Remote(RemoteLease),
}

impl Claim {
    /// Stores a successful answer for replay and wakes the followers.
    pub async fn complete(self, stored: Stored, now: Instant) {
        match self {
            Claim::Local(l) => l.complete(stored, now),
            Claim::Remote(r) => r.complete(stored).await,
        }
    }
}

/// The in-process backend.
#[derive(Debug)]
pub struct MemoryBackend(pub Arc<IdempotencyStore>);

fn from_local(b: Begin) -> Claimed {
    match b {
        Begin::Lead(l) => Claimed::Lead(Claim::Local(l)),
        Begin::Follow(rx) => Claimed::Follow(Follow::Local(rx)),
        Begin::Replay(s) => Claimed::Replay(s),
        Begin::Conflict => Claimed::Conflict,
        Begin::Untracked => Claimed::Untracked,
    }
}

impl IdempotencyBackend for MemoryBackend {
    fn claim<'a>(
        &'a self,
        caller: [u8; 32],
        key: &'a str,
        body_hash: [u8; 32],
        now: Instant,
    ) -> BoxFuture<'a, Claimed> {
        let b = self.0.begin(caller, key, body_hash, now);
        Box::pin(std::future::ready(from_local(b)))
    }
}

/// Keys in Redis, shared by every replica; the local store when Redis is down.
#[derive(Debug)]
pub struct RedisBackend {
    pub redis: Arc<RedisState>,
    pub local: Arc<IdempotencyStore>,
    pub ttl: Duration,
}

impl IdempotencyBackend for RedisBackend {
    fn claim<'a>(
        &'a self,
        caller: [u8; 32],
        key: &'a str,
        body_hash: [u8; 32],
        now: Instant,
    ) -> BoxFuture<'a, Claimed> {
        Box::pin(async move {
            let id = uuid::Uuid::now_v7().to_string();
            match self.redis.begin(&caller, key, &body_hash, &id).await {
                None => from_local(self.local.begin(caller, key, body_hash, now)),
                Some(RemoteBegin::Lead) => {
                    let redis = Arc::clone(&self.redis);
                    let (k, lease) = (key.to_string(), id.clone());
                    let renew = tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(crate::state::LEASE / 3).await;
                            redis.renew(&caller, &k, &lease).await;
                        }
                    });
                    Claimed::Lead(Claim::Remote(RemoteLease {
                        redis: Arc::clone(&self.redis),
                        caller,
                        key: key.to_string(),
                        id,
                        ttl: self.ttl,
                        renew,
                        done: false,
                    }))
                }
                Some(RemoteBegin::Follow) => Claimed::Follow(Follow::Poll),
                Some(RemoteBegin::Conflict) => Claimed::Conflict,
                Some(RemoteBegin::Done(s)) => Claimed::Replay(Arc::new(s)),
            }
        })
    }
}

/// A key held in Redis, its lease renewed while the request runs.
#[derive(Debug)]
pub struct RemoteLease {
    redis: Arc<RedisState>,
    caller: [u8; 32],
    key: String,
    id: String,
    ttl: Duration,
    renew: tokio::task::JoinHandle<()>,
    done: bool,
}

impl RemoteLease {
    async fn complete(mut self, stored: Stored) {
        self.done = true;
        self.renew.abort();
        self.redis
            .complete(&self.caller, &self.key, &self.id, &stored, self.ttl)
            .await;
    }
}

impl Drop for RemoteLease {
    fn drop(&mut self) {
        self.renew.abort();
        if !self.done {
            // Release on a fresh task: the request that held it may be gone
            // (seed 004: cleanup after a timeout must still happen).
            let (redis, caller, key, id) = (
                Arc::clone(&self.redis),
                self.caller,
                std::mem::take(&mut self.key),
                std::mem::take(&mut self.id),
            );
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                h.spawn(async move { redis.release(&caller, &key, &id).await });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> Stored {
        Stored {
            status: 200,
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"{}"),
        }
    }

    #[test]
    fn lead_follow_replay_conflict_and_expiry() {
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(10), 10));
        let t = Instant::from_millis(1000);
        let Begin::Lead(lease) = s.begin([1; 32], "k", [9; 32], t) else {
            panic!()
        };
        assert!(matches!(
            s.begin([1; 32], "k", [9; 32], t),
            Begin::Follow(_)
        ));
        assert!(matches!(s.begin([1; 32], "k", [8; 32], t), Begin::Conflict));
        assert!(
            matches!(s.begin([2; 32], "k", [9; 32], t), Begin::Lead(_)),
            "another caller's key is its own"
        );
        lease.complete(stored(), t);
        assert!(matches!(
            s.begin([1; 32], "k", [9; 32], t),
            Begin::Replay(_)
        ));
        let later = t + Duration::from_secs(11);
        assert!(matches!(
            s.begin([1; 32], "k", [9; 32], later),
            Begin::Lead(_)
        ));
    }

    #[test]
    fn a_dropped_lease_releases_the_key() {
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(10), 10));
        let t = Instant::from_millis(1000);
        let Begin::Lead(lease) = s.begin([1; 32], "k", [9; 32], t) else {
            panic!()
        };
        let Begin::Follow(rx) = s.begin([1; 32], "k", [9; 32], t) else {
            panic!()
        };
        drop(lease);
        assert!(s.is_empty());
        assert!(rx.has_changed().is_err(), "follower sees the leader gone");
        assert!(matches!(s.begin([1; 32], "k", [9; 32], t), Begin::Lead(_)));
    }

    #[test]
    fn bounded_in_size() {
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(10), 2));
        let t = Instant::from_millis(1000);
        let _a = s.begin([1; 32], "a", [0; 32], t);
        let _b = s.begin([1; 32], "b", [0; 32], t);
        assert!(matches!(
            s.begin([1; 32], "c", [0; 32], t),
            Begin::Untracked
        ));
    }
}
