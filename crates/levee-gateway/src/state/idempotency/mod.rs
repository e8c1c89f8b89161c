//! The idempotency store: nothing runs twice.
//!
//! Keyed by (caller identity, endpoint path, `idempotency-key`): the same key
//! sent to `/v1/chat/completions` and to `/v1/embeddings` names two entries,
//! so an answer is only ever replayed to the endpoint (and so the dialect)
//! that produced it. The first request with a key leads; a second one while
//! it is in flight waits for its result instead of calling the provider;
//! after completion a non-streaming success is replayed
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
//! Where keys live is an [`IdempotencyBackend`]: [`MemoryBackend`] over the
//! in-process store (`local`, the default) or [`RedisBackend`] (`redis`,
//! shared by replicas, falling back to the local store when Redis is
//! unavailable). Both answer a claim with one [`Claimed`].

mod local;
mod redis;

pub use local::{IdempotencyStore, MemoryBackend};
pub use redis::RedisBackend;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::HeaderMap;
use levee_policy::Instant;
use std::sync::Arc;
use tokio::sync::watch;

/// The key a request claims in the store: its endpoint path and its
/// `idempotency-key`, joined by a space. An endpoint path has no space, so
/// two different (path, key) pairs never give the same store key.
pub fn store_key(path: &str, key: &str) -> String {
    let mut out = String::with_capacity(path.len() + 1 + key.len());
    out.push_str(path);
    out.push(' ');
    out.push_str(key);
    out
}

/// A stored successful response.
#[derive(Debug)]
pub struct Stored {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A request's claim on a key: `key` for a request from `caller` whose
/// body hashes to `body_hash`, at `now`.
#[derive(Clone, Copy, Debug)]
pub struct Claim<'a> {
    pub caller: [u8; 32],
    pub key: &'a str,
    pub body_hash: [u8; 32],
    pub now: Instant,
    /// This request was told to follow and is looking again, so the leader
    /// may be writing its answer right now.
    pub following: bool,
}

/// Where idempotency keys live.
pub trait IdempotencyBackend: Send + Sync {
    /// Claims the key `claim` names.
    fn claim<'a>(&'a self, claim: Claim<'a>) -> BoxFuture<'a, (Claimed, Scope)>;
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

/// Who runs a request that carries a key: this request (it leads), another
/// one already running (follow it), or nobody any more (replay the answer).
#[derive(Debug)]
pub enum Claimed {
    /// Run it; hand the result to the lease.
    Lead(Lease),
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
pub enum Lease {
    /// In this process's store.
    Local(local::Lease),
    /// In Redis, renewed while the request runs.
    Redis(redis::Lease),
}

impl Lease {
    /// Stores a successful answer for replay and wakes the followers.
    pub async fn complete(self, stored: Stored, now: Instant) {
        match self {
            Lease::Local(l) => l.complete(stored, now),
            Lease::Redis(r) => r.complete(stored).await,
        }
    }
}
