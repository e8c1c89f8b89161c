//! The secrets a running gateway redacts: the configured keys, and every
//! credential a platform obtains while it runs — a cloud's access token,
//! a bearer re-read from a token file, keys re-read after a rotation —
//! each kept for as long as it could appear. Built once at start, the
//! redaction knew only the keys loaded then: a Vertex access token a
//! provider's 403 echoed reached the caller, the request log and the tape
//! in clear.
//!
//! A platform holds a [`Learned`] and tells it each credential it obtains
//! with how long to keep it; [`LiveSecrets::get`] rebuilds the one
//! automaton when any source has learned something new (a sum of version
//! counters per call: one atomic load a source on the path).

use crate::observe::redact::Secrets;
use arc_swap::ArcSwap;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Most credentials one source keeps at once: the oldest go first.
const MAX_LEARNED: usize = 64;

/// Credentials one platform obtained at run time, each with the unix
/// millisecond until which it is redacted.
#[derive(Debug, Default)]
pub struct Learned {
    version: AtomicU64,
    items: Mutex<Vec<(String, u64)>>,
}

impl Learned {
    /// Redacts `secret` until `until_unix_ms` (a secret learned again is
    /// kept until the later of the two).
    pub fn learn(&self, secret: &str, until_unix_ms: u64) {
        if secret.is_empty() {
            return;
        }
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(item) = items.iter_mut().find(|(s, _)| s == secret) {
            item.1 = item.1.max(until_unix_ms);
            return;
        }
        if items.len() >= MAX_LEARNED {
            if let Some(oldest) = items
                .iter()
                .enumerate()
                .min_by_key(|(_, (_, until))| *until)
                .map(|(i, _)| i)
            {
                items.swap_remove(oldest);
            }
        }
        items.push((secret.to_string(), until_unix_ms));
        self.version.fetch_add(1, Ordering::Release);
    }

    fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The credentials still to redact at `now_unix_ms` (the expired ones
    /// dropped).
    fn current(&self, now_unix_ms: u64) -> Vec<String> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.retain(|(_, until)| *until > now_unix_ms);
        items.iter().map(|(s, _)| s.clone()).collect()
    }
}

/// The configured keys and what every source has learned, as one
/// [`Secrets`] rebuilt when a source learns something.
#[derive(Debug)]
pub struct LiveSecrets {
    base: Vec<String>,
    sources: Vec<Arc<Learned>>,
    seen: AtomicU64,
    current: ArcSwap<Secrets>,
    /// Which set of secrets this is, in a thread's copies.
    id: u64,
    /// Counts the rebuilds: a thread's copy older than this is read again.
    generation: AtomicU64,
    rebuilding: Mutex<()>,
}

/// The most live sets of secrets a thread keeps copies of: a gateway has
/// one a config generation; a test process makes many, and a thread's
/// oldest copies go.
const COPIES: usize = 8;

thread_local! {
    /// This thread's copy of each live set's current secrets: its id, the
    /// generation copied, the secrets.
    static COPY: RefCell<Vec<(u64, u64, Arc<Secrets>)>> = const { RefCell::new(Vec::new()) };
}

impl LiveSecrets {
    /// `base` (the configured keys) and the platforms' `sources`.
    pub fn new(base: Vec<String>, sources: Vec<Arc<Learned>>) -> Self {
        // Built once here: the base, and what kept sources learned under
        // an earlier generation.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let live = LiveSecrets {
            current: ArcSwap::from_pointee(Secrets::default()),
            base,
            sources,
            seen: AtomicU64::new(u64::MAX),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            rebuilding: Mutex::new(()),
        };
        live.rebuild(live.versions());
        live
    }

    fn versions(&self) -> u64 {
        self.sources.iter().map(|s| s.version()).sum()
    }

    /// The secrets to redact now.
    pub fn get(&self) -> arc_swap::Guard<Arc<Secrets>> {
        self.refresh();
        self.current.load()
    }

    /// Rebuilds the secrets when a source learned something since.
    fn refresh(&self) {
        let v = self.versions();
        if v != self.seen.load(Ordering::Acquire) {
            self.rebuild(v);
        }
    }

    /// `f` on the secrets to redact now, read from this thread's copy while
    /// no source has learned anything since: atomic loads, where
    /// [`LiveSecrets::get`]'s guard is two atomic read-modify-writes (a
    /// relayed answer reads the secrets twice).
    pub fn with<R>(&self, f: impl FnOnce(&Secrets) -> R) -> R {
        self.refresh();
        let generation = self.generation.load(Ordering::Acquire);
        COPY.with(|cell| {
            let fresh = |c: &&(u64, u64, Arc<Secrets>)| c.0 == self.id && c.1 == generation;
            if let Some(c) = cell.borrow().iter().find(fresh) {
                return f(&c.2);
            }
            // `f` borrows the copies while it runs: a `with` inside it
            // that finds no copy reads the shared secrets instead.
            let Ok(mut copies) = cell.try_borrow_mut() else {
                return f(&self.current.load());
            };
            let current = self.current.load_full();
            // An older copy of these, and the copies of sets no longer
            // live (this thread holds their last reference), go.
            copies.retain(|c| c.0 != self.id && Arc::strong_count(&c.2) > 1);
            if copies.len() >= COPIES {
                copies.remove(0);
            }
            copies.push((self.id, generation, Arc::clone(&current)));
            drop(copies);
            f(&current)
        })
    }

    /// Every secret now, the learned ones included: what a tape of
    /// several generations keeps redacting.
    pub fn snapshot(&self) -> Secrets {
        Secrets::clone(&self.get())
    }

    fn rebuild(&self, v: u64) {
        let _one = self
            .rebuilding
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.seen.load(Ordering::Acquire) == v {
            return;
        }
        let now = crate::clock::unix_ms();
        let learned = self.sources.iter().flat_map(|s| s.current(now));
        let all: Vec<String> = self.base.iter().cloned().chain(learned).collect();
        self.current.store(Arc::new(Secrets::new(&all)));
        self.generation.fetch_add(1, Ordering::Release);
        self.seen.store(v, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_learned_at_run_time_is_redacted_until_it_expires() {
        let vertex = Arc::new(Learned::default());
        let live = LiveSecrets::new(
            vec!["sk-configured-key-1".into()],
            vec![Arc::clone(&vertex)],
        );
        let text = "echo: ya29.issued-token-000111 and sk-configured-key-1".to_string();
        assert_eq!(
            live.get().text(text.clone()),
            "echo: ya29.issued-token-000111 and [redacted]"
        );
        let far = crate::clock::unix_ms() + 3_600_000;
        vertex.learn("ya29.issued-token-000111", far);
        assert_eq!(
            live.get().text(text.clone()),
            "echo: [redacted] and [redacted]"
        );
        // Rotated: the new one joins, the old one stays for its lifetime.
        vertex.learn("ya29.issued-token-222333", far);
        let both = "ya29.issued-token-000111 ya29.issued-token-222333".to_string();
        assert_eq!(live.get().text(both), "[redacted] [redacted]");
        // Expired: dropped at the next rebuild.
        vertex.learn("ya29.short-lived-token-9", 1);
        assert_eq!(
            live.get().text("ya29.issued-token-000111".into()),
            "[redacted]"
        );
    }

    #[test]
    fn a_threads_copy_is_read_again_once_a_source_learns() {
        let vertex = Arc::new(Learned::default());
        let live = LiveSecrets::new(
            vec!["sk-configured-key-1".into()],
            vec![Arc::clone(&vertex)],
        );
        let other = LiveSecrets::new(vec!["sk-other-key-22".into()], vec![]);
        let redact = |live: &LiveSecrets, t: &str| live.with(|s| s.text(t.to_string()));
        // Two live sets on one thread, of one generation, keep copies of
        // their own.
        let both = "sk-other-key-22 sk-configured-key-1";
        assert_eq!(redact(&live, both), "sk-other-key-22 [redacted]");
        assert_eq!(redact(&other, both), "[redacted] sk-configured-key-1");
        assert_eq!(redact(&live, both), "sk-other-key-22 [redacted]");
        // Copied on this thread now; a credential learned since is seen.
        let text = "ya29.issued-token-000111 sk-configured-key-1";
        assert_eq!(redact(&live, text), "ya29.issued-token-000111 [redacted]");
        let far = crate::clock::unix_ms() + 3_600_000;
        vertex.learn("ya29.issued-token-000111", far);
        assert_eq!(redact(&live, text), "[redacted] [redacted]");
        // A `with` inside another reads the same secrets.
        let nested = live.with(|outer| (outer.occurs(b"sk-configured-key-1"), redact(&live, text)));
        assert_eq!(nested, (true, "[redacted] [redacted]".to_string()));
        // A set no longer live leaves no copy behind at the next miss.
        let gone = Arc::downgrade(&other.current.load_full());
        drop(other);
        vertex.learn("ya29.issued-token-999", far);
        assert_eq!(redact(&live, "ya29.issued-token-999"), "[redacted]");
        assert!(
            gone.upgrade().is_none(),
            "the dropped set's copy was let go"
        );
    }
}
