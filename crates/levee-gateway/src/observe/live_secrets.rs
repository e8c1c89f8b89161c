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
    rebuilding: Mutex<()>,
}

impl LiveSecrets {
    /// `base` (the configured keys) and the platforms' `sources`.
    pub fn new(base: Vec<String>, sources: Vec<Arc<Learned>>) -> Self {
        // Built once here: the base, and what kept sources learned under
        // an earlier generation.
        let live = LiveSecrets {
            current: ArcSwap::from_pointee(Secrets::default()),
            base,
            sources,
            seen: AtomicU64::new(u64::MAX),
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
        let v = self.versions();
        if v != self.seen.load(Ordering::Acquire) {
            self.rebuild(v);
        }
        self.current.load()
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
}
