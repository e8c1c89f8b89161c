//! Which of a per-thread structure's shards this thread writes, and
//! whether it writes it alone. A shard one thread owns is written with
//! plain loads and stores of its atomics: an atomic read-modify-write costs
//! ~8 ns of a worker's CPU (a `lock`-prefixed instruction waits for every
//! earlier store to reach the cache), a store well under one. A gateway's
//! threads that record live as long as the process (a worker each), so a
//! shard's owner never hands it on.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Shards per structure: the first `SHARDS - 1` threads to record own one
/// each, in turn; every later thread shares the last (correct, with atomic
/// adds or a lock; only slower).
pub(crate) const SHARDS: usize = 16;

/// This thread's shard, and whether the thread owns it.
pub(crate) fn this_thread() -> (usize, bool) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: (usize, bool) = {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            if n < SHARDS - 1 {
                (n, true)
            } else {
                (SHARDS - 1, false)
            }
        };
    }
    SHARD.with(|s| *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_threads_own_a_shard_and_the_rest_share_the_last() {
        let got: Vec<(usize, bool)> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..2 * SHARDS).map(|_| s.spawn(this_thread)).collect();
            threads.into_iter().filter_map(|t| t.join().ok()).collect()
        });
        let mut owned: Vec<usize> = got.iter().filter(|g| g.1).map(|g| g.0).collect();
        owned.sort_unstable();
        owned.dedup();
        assert_eq!(owned.len(), got.iter().filter(|g| g.1).count(), "{got:?}");
        assert!(owned.iter().all(|&i| i < SHARDS - 1), "{got:?}");
        // More threads than shards: some share, all on the last.
        let shared: Vec<_> = got.iter().filter(|g| !g.1).collect();
        assert!(!shared.is_empty());
        assert!(shared.iter().all(|g| g.0 == SHARDS - 1), "{got:?}");
    }
}
