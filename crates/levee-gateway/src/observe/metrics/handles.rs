//! Counter handles by label values, built once per pair of values (a family
//! with one label uses `""` as the second): the hot path (every request
//! counts an outcome and an attempt) then costs a scan of short lists, not
//! a label set of `String`s allocated, hashed and dropped per request. The
//! values are route and provider names from the config and fixed outcome
//! words, so the lists stay as short as the metric families; comparing a
//! few short strings costs less than hashing the two keys (SipHash, ~100
//! instructions each).
//!
//! Each thread scans a copy of its own, made when it first misses: the
//! shared list's read lock is two atomic read-modify-writes a count (~17 ns
//! of CPU; four a request), and a handle, once made, is never removed, so
//! a copy never holds one that is gone.

use prometheus_client::metrics::counter::Counter;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// Counters by their second label value.
type BySecond = Vec<(Box<str>, Counter)>;

/// Counters by their first label value, then their second.
type List = Vec<(Box<str>, BySecond)>;

/// A family's handles, shared by every thread.
#[derive(Debug)]
pub(super) struct Handles {
    /// Which handles these are, in a thread's copies.
    id: u64,
    list: RwLock<List>,
}

impl Default for Handles {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Handles {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            list: RwLock::default(),
        }
    }
}

/// The most handle lists a thread keeps copies of: a gateway has four;
/// a test process makes many, and a thread's oldest copies go.
const COPIES: usize = 16;

thread_local! {
    /// This thread's copies, by the handles' id.
    static COPY: RefCell<Vec<(u64, List)>> = const { RefCell::new(Vec::new()) };
}

/// The counter for `(a, b)` in `list`.
fn lookup<'l>(list: &'l [(Box<str>, BySecond)], a: &str, b: &str) -> Option<&'l Counter> {
    let (_, by) = list.iter().find(|(k, _)| **k == *a)?;
    by.iter().find(|(k, _)| **k == *b).map(|(_, c)| c)
}

impl Handles {
    /// Adds one to the counter for `(a, b)`, made by `make` the first time.
    pub(super) fn inc(&self, a: &str, b: &str, make: impl FnOnce() -> Counter) {
        let counted = COPY.with(|copies| {
            let copies = copies.borrow();
            let copy = copies.iter().find(|(id, _)| *id == self.id)?;
            lookup(&copy.1, a, b).map(Counter::inc)
        });
        if counted.is_some() {
            return;
        }
        self.inc_shared(a, b, make);
        // This thread's copy, made again with what the list holds now.
        let now = self.list.read().unwrap_or_else(|e| e.into_inner()).clone();
        COPY.with(|copies| {
            let mut copies = copies.borrow_mut();
            copies.retain(|(id, _)| *id != self.id);
            if copies.len() == COPIES {
                copies.remove(0);
            }
            copies.push((self.id, now));
        });
    }

    fn inc_shared(&self, a: &str, b: &str, make: impl FnOnce() -> Counter) {
        if let Some(c) = lookup(&self.list.read().unwrap_or_else(|e| e.into_inner()), a, b) {
            c.inc();
            return;
        }
        let mut list = self.list.write().unwrap_or_else(|e| e.into_inner());
        // Another request may have added it since the read.
        if let Some(c) = lookup(&list, a, b) {
            c.inc();
            return;
        }
        let c = make();
        c.inc();
        match list.iter_mut().find(|(k, _)| **k == *a) {
            Some((_, by)) => by.push((b.into(), c)),
            None => list.push((a.into(), vec![(b.into(), c)])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_counts_through_its_copy_and_every_count_is_kept() {
        let h = Handles::default();
        let made = Counter::default();
        let other = Counter::default();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        h.inc("route", "ok", || made.clone());
                        h.inc("route", "failed", || other.clone());
                    }
                });
            }
        });
        assert_eq!(made.get(), 400);
        assert_eq!(other.get(), 400);
        // A second family's handles are its own, in the same thread.
        let h2 = Handles::default();
        let mine = Counter::default();
        h.inc("route", "ok", || unreachable!("made once"));
        h2.inc("route", "ok", || mine.clone());
        assert_eq!((made.get(), mine.get()), (401, 1));
    }
}
