//! The idempotency store: nothing runs twice.
//!
//! Keyed by (caller identity, `idempotency-key`). The first request with a key
//! leads; a second one while it is in flight waits for its result instead of
//! calling the provider; after completion a non-streaming success is replayed
//! (`x-levee-replayed: true`) until the TTL expires. The same key with a
//! different body is refused (422). A lease that is dropped — the request
//! failed, was cancelled or timed out — releases the entry at once, so a later
//! retry runs again instead of finding it stuck "in progress".
//! Bounded in count (`max_entries`) and in bytes of stored answers
//! (`max_bytes`), shared fairly among callers: when the store is full, the
//! caller holding the most gives way first (its oldest answer is evicted), so
//! one caller's burst of keys can never evict another caller's answer while it
//! holds more than that caller. Expired answers are evicted before anything
//! else. When nothing can be evicted fairly, a new key is not deduplicated
//! (`Untracked`). An answer larger than a quarter of `max_bytes` is delivered
//! and handed to the requests waiting on it, but not stored: a later request
//! with that key runs again.
//!
//! Streams are not stored: they are relayed event by event as generated, and
//! SDKs retry a stream only before its first event. A request with the key of
//! a running stream waits for it to end, then runs (its response says
//! `x-levee-idempotency: rerun`).
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
        size: u64,
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
    max_bytes: u64,
}

/// One caller's holdings.
#[derive(Debug, Default)]
struct Usage {
    entries: usize,
    bytes: u64,
    /// Its stored answers, oldest first (stale items are skipped when popped).
    done: VecDeque<(String, Instant)>,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Key, Entry>,
    callers: HashMap<[u8; 32], Usage>,
    bytes: u64,
    next_lease: u64,
}

/// What is being made room for.
#[derive(Clone, Copy)]
enum Need {
    Entry,
    Bytes(u64),
}

impl Inner {
    fn remove(&mut self, k: &Key) {
        let Some(e) = self.map.remove(k) else { return };
        let size = match e {
            Entry::Done { size, .. } => size,
            Entry::InFlight { .. } => 0,
        };
        self.bytes = self.bytes.saturating_sub(size);
        if let Some(u) = self.callers.get_mut(&k.0) {
            u.entries = u.entries.saturating_sub(1);
            u.bytes = u.bytes.saturating_sub(size);
            if u.entries == 0 {
                self.callers.remove(&k.0);
            }
        }
    }

    /// Evicts `caller`'s oldest stored answer (expired ones only, unless
    /// `any`); whether one was evicted.
    fn evict_oldest(&mut self, caller: [u8; 32], now: Instant, any: bool) -> bool {
        loop {
            let Some(u) = self.callers.get_mut(&caller) else {
                return false;
            };
            let Some((key, expires)) = u.done.front().cloned() else {
                return false;
            };
            if !any && expires > now {
                return false;
            }
            u.done.pop_front();
            let k = (caller, key);
            if matches!(self.map.get(&k), Some(Entry::Done { expires: e, .. }) if *e == expires) {
                self.remove(&k);
                return true;
            }
        }
    }

    fn evict_expired(&mut self, now: Instant) {
        let callers: Vec<[u8; 32]> = self.callers.keys().copied().collect();
        for c in callers {
            while self.evict_oldest(c, now, false) {}
        }
    }

    fn fits(&self, need: Need, max_entries: usize, max_bytes: u64) -> bool {
        match need {
            Need::Entry => self.map.len() < max_entries,
            Need::Bytes(n) => self.bytes + n <= max_bytes,
        }
    }

    /// Makes room for `caller`'s `need`, evicting expired answers, then the
    /// oldest answer of whoever holds the most (never someone holding less
    /// than `caller` would). Whether there is room.
    fn make_room(
        &mut self,
        caller: [u8; 32],
        need: Need,
        now: Instant,
        max_entries: usize,
        max_bytes: u64,
    ) -> bool {
        if self.fits(need, max_entries, max_bytes) {
            return true;
        }
        self.evict_expired(now);
        while !self.fits(need, max_entries, max_bytes) {
            let held = |c: &[u8; 32], u: &Usage| match need {
                Need::Entry => u.entries as u64 + u64::from(*c == caller),
                Need::Bytes(n) => u.bytes + if *c == caller { n } else { 0 },
            };
            let mine = match (self.callers.get(&caller), need) {
                (Some(u), _) => held(&caller, u),
                (None, Need::Entry) => 1,
                (None, Need::Bytes(n)) => n,
            };
            let victim = self
                .callers
                .iter()
                .filter(|(_, u)| !u.done.is_empty())
                .map(|(c, u)| (held(c, u), *c))
                .max();
            match victim {
                Some((theirs, c)) if theirs >= mine => {
                    self.evict_oldest(c, now, true);
                }
                _ => return false,
            }
        }
        true
    }
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
    /// A store keeping answers for `ttl`, at most `max_entries` keys and
    /// `max_bytes` of answers.
    pub fn new(ttl: Duration, max_entries: usize, max_bytes: u64) -> Self {
        IdempotencyStore {
            inner: Mutex::new(Inner::default()),
            ttl,
            max_entries: max_entries.max(1),
            max_bytes: max_bytes.max(1),
        }
    }

    /// The largest answer that is stored for replay.
    pub fn max_answer_bytes(&self) -> u64 {
        self.max_bytes / 4
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
                ..
            }) => {
                if *expires > now {
                    return if *h == body_hash {
                        Begin::Replay(Arc::clone(stored))
                    } else {
                        Begin::Conflict
                    };
                }
                g.remove(&k);
            }
            None => {}
        }
        if !g.make_room(caller, Need::Entry, now, self.max_entries, self.max_bytes) {
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
        g.callers.entry(caller).or_default().entries += 1;
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

    /// Bytes of stored answers now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }
}

/// What an answer costs the store: its body, headers and key.
fn size_of(stored: &Stored, key: &str) -> u64 {
    let headers: usize = stored
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 32)
        .sum();
    (stored.body.len() + headers + key.len() + 128) as u64
}

impl Lease {
    /// Stores a successful answer for replay and wakes the followers. An
    /// answer that does not fit (larger than a quarter of `max_bytes`, or no
    /// room can be made fairly) wakes the followers with it but is not kept.
    pub fn complete(mut self, stored: Stored, now: Instant) {
        let Some(key) = self.key.take() else { return };
        let stored = Arc::new(stored);
        let expires = now + self.store.ttl;
        let size = size_of(&stored, &key.1);
        {
            let store = &self.store;
            let mut g = store.lock();
            let body_hash = match g.map.get(&key) {
                Some(Entry::InFlight {
                    body_hash, lease, ..
                }) if *lease == self.id => *body_hash,
                _ => return,
            };
            let fits = size <= store.max_answer_bytes()
                && g.make_room(
                    key.0,
                    Need::Bytes(size),
                    now,
                    store.max_entries,
                    store.max_bytes,
                );
            if fits {
                g.map.insert(
                    key.clone(),
                    Entry::Done {
                        body_hash,
                        stored: Arc::clone(&stored),
                        expires,
                        size,
                    },
                );
                g.bytes += size;
                let u = g.callers.entry(key.0).or_default();
                u.bytes += size;
                u.done.push_back((key.1, expires));
            } else {
                tracing::debug!(target: "levee::idempotency", size, "answer not stored for replay: larger than the store allows");
                g.remove(&key);
            }
        }
        let _ = self.tx.send(Some(stored));
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut g = self.store.lock();
            if matches!(g.map.get(&key), Some(Entry::InFlight { lease, .. }) if *lease == self.id) {
                g.remove(&key);
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
    ) -> BoxFuture<'a, (Claimed, Scope)>;
}

/// Where a claim was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The backend's own store (shared by replicas, for Redis).
    Shared,
    /// The shared store could not be consulted: this replica's local store
    /// decided, so the key is not deduplicated across replicas.
    Local,
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
    /// The shared store could not be consulted and `state.on_unavailable`
    /// is `refuse`: the request must not run.
    Unavailable,
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
    ) -> BoxFuture<'a, (Claimed, Scope)> {
        let b = self.0.begin(caller, key, body_hash, now);
        Box::pin(std::future::ready((from_local(b), Scope::Shared)))
    }
}

/// Keys in Redis, shared by every replica; the local store when Redis is down.
#[derive(Debug)]
pub struct RedisBackend {
    pub redis: Arc<RedisState>,
    pub local: Arc<IdempotencyStore>,
    pub ttl: Duration,
    /// `state.on_unavailable: refuse`: no local fallback for keyed requests.
    pub refuse_unshared: bool,
}

impl IdempotencyBackend for RedisBackend {
    fn claim<'a>(
        &'a self,
        caller: [u8; 32],
        key: &'a str,
        body_hash: [u8; 32],
        now: Instant,
    ) -> BoxFuture<'a, (Claimed, Scope)> {
        Box::pin(async move {
            let id = uuid::Uuid::now_v7().to_string();
            let claimed = match self.redis.begin(&caller, key, &body_hash, &id).await {
                None if self.refuse_unshared => return (Claimed::Unavailable, Scope::Local),
                None => {
                    let b = self.local.begin(caller, key, body_hash, now);
                    return (from_local(b), Scope::Local);
                }
                Some(RemoteBegin::Lead) => {
                    let redis = Arc::clone(&self.redis);
                    let (k, lease) = (key.to_string(), id.clone());
                    let renew = tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(crate::state::LEASE / 3).await;
                            redis.renew(&caller, &k, &lease).await;
                        }
                    });
                    self.redis.hold(&id, caller, key);
                    Claimed::Lead(Claim::Remote(RemoteLease {
                        redis: Arc::clone(&self.redis),
                        caller,
                        key: key.to_string(),
                        id,
                        ttl: self.ttl,
                        max_bytes: self.local.max_answer_bytes(),
                        renew,
                        done: false,
                    }))
                }
                Some(RemoteBegin::Follow) => Claimed::Follow(Follow::Poll),
                Some(RemoteBegin::Conflict) => Claimed::Conflict,
                Some(RemoteBegin::Done(s)) => Claimed::Replay(Arc::new(s)),
            };
            (claimed, Scope::Shared)
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
    /// The largest answer stored for replay.
    max_bytes: u64,
    renew: tokio::task::JoinHandle<()>,
    done: bool,
}

impl RemoteLease {
    async fn complete(mut self, stored: Stored) {
        self.done = true;
        self.renew.abort();
        self.redis
            .complete(
                &self.caller,
                &self.key,
                &self.id,
                &stored,
                self.ttl,
                self.max_bytes,
            )
            .await;
        self.redis.unhold(&self.id);
    }
}

impl Drop for RemoteLease {
    fn drop(&mut self) {
        self.renew.abort();
        if !self.done {
            // Release on a fresh task: the request that held it may be gone
            // (cleanup after a timeout must still happen).
            let (redis, caller, key, id) = (
                Arc::clone(&self.redis),
                self.caller,
                std::mem::take(&mut self.key),
                std::mem::take(&mut self.id),
            );
            // Shutdown releases whatever is still held (this task may never
            // run on a runtime that is stopping).
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                h.spawn(async move {
                    redis.release(&caller, &key, &id).await;
                    redis.unhold(&id);
                });
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
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(10), 10, 1 << 20));
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
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(10), 10, 1 << 20));
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

    fn answer(n: usize) -> Stored {
        Stored {
            status: 200,
            headers: HeaderMap::new(),
            body: Bytes::from(vec![b'x'; n]),
        }
    }

    fn lead(s: &Arc<IdempotencyStore>, caller: u8, key: &str, t: Instant) -> Lease {
        match s.begin([caller; 32], key, [0; 32], t) {
            Begin::Lead(l) => l,
            other => panic!("{key}: {other:?}"),
        }
    }

    #[test]
    fn one_callers_burst_never_evicts_a_smaller_callers_answer() {
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(60), 10, 1 << 20));
        let t = Instant::from_millis(1000);
        lead(&s, 2, "b", t).complete(answer(10), t);
        for i in 0..30 {
            lead(&s, 1, &format!("a{i}"), t).complete(answer(10), t);
        }
        assert!(s.len() <= 10);
        assert!(matches!(
            s.begin([2; 32], "b", [0; 32], t),
            Begin::Replay(_)
        ));
        // A's newest answers are kept, its oldest gave way.
        assert!(matches!(
            s.begin([1; 32], "a29", [0; 32], t),
            Begin::Replay(_)
        ));
        assert!(matches!(s.begin([1; 32], "a0", [0; 32], t), Begin::Lead(_)));
    }

    #[test]
    fn bounded_in_bytes_and_big_answers_are_not_stored() {
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(60), 1000, 40_000));
        let t = Instant::from_millis(1000);
        for i in 0..20 {
            lead(&s, 1, &format!("k{i}"), t).complete(answer(5_000), t);
            assert!(s.bytes() <= 40_000, "{}", s.bytes());
        }
        assert!(matches!(
            s.begin([1; 32], "k19", [0; 32], t),
            Begin::Replay(_)
        ));
        assert!(matches!(s.begin([1; 32], "k0", [0; 32], t), Begin::Lead(_)));
        // Over a quarter of max_bytes: followers get it, nobody later does.
        let l = lead(&s, 3, "big", t);
        let Begin::Follow(mut rx) = s.begin([3; 32], "big", [0; 32], t) else {
            panic!()
        };
        l.complete(answer(20_000), t);
        assert!(
            rx.borrow_and_update().is_some(),
            "the waiting request gets it"
        );
        assert!(matches!(
            s.begin([3; 32], "big", [0; 32], t),
            Begin::Lead(_)
        ));
    }

    #[test]
    fn bounded_in_size() {
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(10), 2, 1 << 20));
        let t = Instant::from_millis(1000);
        let _a = s.begin([1; 32], "a", [0; 32], t);
        let _b = s.begin([1; 32], "b", [0; 32], t);
        assert!(matches!(
            s.begin([1; 32], "c", [0; 32], t),
            Begin::Untracked
        ));
    }
}
