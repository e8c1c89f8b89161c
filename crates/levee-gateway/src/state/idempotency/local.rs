//! The in-process store: keys, in-flight markers and stored answers in one
//! map, bounded in count and bytes and shared fairly among callers.

use super::{Claim, Claimed, Follow, IdempotencyBackend, Scope, Stored};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue};
use levee_policy::Instant;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

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

    /// Claims `key` for a request from `caller` whose body hashes to `body_hash`.
    pub fn claim(
        self: &Arc<Self>,
        caller: [u8; 32],
        key: &str,
        body_hash: [u8; 32],
        now: Instant,
    ) -> Claimed {
        let mut g = self.lock();
        let k: Key = (caller, key.to_string());
        match g.map.get(&k) {
            Some(Entry::InFlight {
                body_hash: h, done, ..
            }) => {
                return if *h == body_hash {
                    Claimed::Follow(Follow::Local(done.clone()))
                } else {
                    Claimed::Conflict
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
                        Claimed::Replay(Arc::clone(stored))
                    } else {
                        Claimed::Conflict
                    };
                }
                g.remove(&k);
            }
            None => {}
        }
        if !g.make_room(caller, Need::Entry, now, self.max_entries, self.max_bytes) {
            return Claimed::Untracked;
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
        Claimed::Lead(super::Lease::Local(Lease {
            store: Arc::clone(self),
            key: Some(k),
            id,
            tx,
        }))
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

/// The answer as kept: its body and header values copied into allocations
/// of their own. As relayed, they are slices of the connection's read
/// buffers (up to 64 KiB each), and a stored slice keeps its whole buffer
/// alive: 110,000 small answers held 207 MB against a 64 MiB bound.
fn compact(stored: Stored) -> Stored {
    let mut headers = HeaderMap::with_capacity(stored.headers.len());
    for (name, value) in &stored.headers {
        // Both copied: a name that is not a standard one is a slice too.
        let name = HeaderName::from_bytes(name.as_str().as_bytes());
        let value = HeaderValue::from_bytes(value.as_bytes());
        if let (Ok(n), Ok(v)) = (name, value) {
            headers.append(n, v);
        }
    }
    Stored {
        status: stored.status,
        headers,
        body: Bytes::copy_from_slice(&stored.body),
    }
}

/// What the allocator adds to each allocation (its header and rounding),
/// on average for the small ones a stored answer is made of.
const PER_ALLOCATION: usize = 16;

/// What an answer costs the store in heap bytes: the body and each header
/// field (its slot in the map, its value and a name of its own), the key
/// (held twice: in the map and in its caller's queue), the map's slot (at
/// hashbrown's 7/8 load), the shared answer and its allocations.
fn size_of(stored: &Stored, key: &str) -> u64 {
    use std::mem::size_of;
    let slot = size_of::<HeaderName>() + size_of::<HeaderValue>() + 16;
    let headers: usize = stored
        .headers
        .iter()
        .map(|(n, v)| slot + 4 + n.as_str().len() + v.len() + 2 * PER_ALLOCATION)
        .sum::<usize>()
        + 2 * PER_ALLOCATION;
    let map_slot = (size_of::<(Key, Entry)>() * 8).div_ceil(7);
    let queue_slot = size_of::<(String, Instant)>();
    let shared = size_of::<Stored>() + 16 + PER_ALLOCATION;
    let keys = 2 * (key.len() + PER_ALLOCATION);
    (stored.body.len() + PER_ALLOCATION + headers + map_slot + queue_slot + shared + keys) as u64
}

impl Lease {
    /// Stores a successful answer for replay and wakes the followers. An
    /// answer that does not fit (larger than a quarter of `max_bytes`, or no
    /// room can be made fairly) wakes the followers with it but is not kept.
    pub fn complete(mut self, stored: Stored, now: Instant) {
        let Some(key) = self.key.take() else { return };
        let stored = Arc::new(compact(stored));
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

/// The in-process backend.
#[derive(Debug)]
pub struct MemoryBackend(pub Arc<IdempotencyStore>);

impl IdempotencyBackend for MemoryBackend {
    fn claim<'a>(&'a self, claim: Claim<'a>) -> BoxFuture<'a, (Claimed, Scope)> {
        let claimed = self
            .0
            .claim(claim.caller, claim.key, claim.body_hash, claim.now);
        Box::pin(std::future::ready((claimed, Scope::Shared)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::HeaderMap;

    /// The local lease of a claim that leads.
    fn led(c: Claimed) -> Lease {
        match c {
            Claimed::Lead(super::super::Lease::Local(l)) => l,
            other => panic!("{other:?}"),
        }
    }

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
        let lease = led(s.claim([1; 32], "k", [9; 32], t));
        assert!(matches!(
            s.claim([1; 32], "k", [9; 32], t),
            Claimed::Follow(_)
        ));
        assert!(matches!(
            s.claim([1; 32], "k", [8; 32], t),
            Claimed::Conflict
        ));
        assert!(
            matches!(s.claim([2; 32], "k", [9; 32], t), Claimed::Lead(_)),
            "another caller's key is its own"
        );
        lease.complete(stored(), t);
        assert!(matches!(
            s.claim([1; 32], "k", [9; 32], t),
            Claimed::Replay(_)
        ));
        let later = t + Duration::from_secs(11);
        assert!(matches!(
            s.claim([1; 32], "k", [9; 32], later),
            Claimed::Lead(_)
        ));
    }

    #[test]
    fn a_dropped_lease_releases_the_key() {
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(10), 10, 1 << 20));
        let t = Instant::from_millis(1000);
        let lease = led(s.claim([1; 32], "k", [9; 32], t));
        let Claimed::Follow(Follow::Local(rx)) = s.claim([1; 32], "k", [9; 32], t) else {
            panic!()
        };
        drop(lease);
        assert!(s.is_empty());
        assert!(rx.has_changed().is_err(), "follower sees the leader gone");
        assert!(matches!(
            s.claim([1; 32], "k", [9; 32], t),
            Claimed::Lead(_)
        ));
    }

    fn answer(n: usize) -> Stored {
        Stored {
            status: 200,
            headers: HeaderMap::new(),
            body: Bytes::from(vec![b'x'; n]),
        }
    }

    fn lead(s: &Arc<IdempotencyStore>, caller: u8, key: &str, t: Instant) -> Lease {
        led(s.claim([caller; 32], key, [0; 32], t))
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
            s.claim([2; 32], "b", [0; 32], t),
            Claimed::Replay(_)
        ));
        // A's newest answers are kept, its oldest gave way.
        assert!(matches!(
            s.claim([1; 32], "a29", [0; 32], t),
            Claimed::Replay(_)
        ));
        assert!(matches!(
            s.claim([1; 32], "a0", [0; 32], t),
            Claimed::Lead(_)
        ));
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
            s.claim([1; 32], "k19", [0; 32], t),
            Claimed::Replay(_)
        ));
        assert!(matches!(
            s.claim([1; 32], "k0", [0; 32], t),
            Claimed::Lead(_)
        ));
        // Over a quarter of max_bytes: followers get it, nobody later does.
        let l = lead(&s, 3, "big", t);
        let Claimed::Follow(Follow::Local(mut rx)) = s.claim([3; 32], "big", [0; 32], t) else {
            panic!()
        };
        l.complete(answer(20_000), t);
        assert!(
            rx.borrow_and_update().is_some(),
            "the waiting request gets it"
        );
        assert!(matches!(
            s.claim([3; 32], "big", [0; 32], t),
            Claimed::Lead(_)
        ));
    }

    #[test]
    fn bounded_in_size() {
        let s = Arc::new(IdempotencyStore::new(Duration::from_secs(10), 2, 1 << 20));
        let t = Instant::from_millis(1000);
        let _a = s.claim([1; 32], "a", [0; 32], t);
        let _b = s.claim([1; 32], "b", [0; 32], t);
        assert!(matches!(
            s.claim([1; 32], "c", [0; 32], t),
            Claimed::Untracked
        ));
    }
}
