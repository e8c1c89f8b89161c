//! Worker threads bound to CPUs of their own.
//!
//! Each worker is one thread with its own single-threaded runtime. Left to
//! the scheduler, two of them can share a CPU for a while and take turns
//! by time slice, and every connection of the one waiting waits with it:
//! on a 2-CPU machine shared with the load generator and the upstream,
//! two workers answered at p99 3.7–3.9 ms unbound and 0.46–0.48 ms with
//! one CPU each (and 57–59k against 62.5–63k requests a second; wrk
//! -c16, one small chat completion through Levee to a static nginx).
//!
//! Bound only when there are exactly as many workers as CPUs this process
//! may run on (the default count): with fewer, the scheduler's freedom is
//! worth more than a fixed placement, and a CPU quota (a container's
//! limit) makes fewer workers than allowed CPUs.

/// The CPUs this thread may run on (its affinity mask), ascending; empty
/// where that cannot be read.
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        use rustix::thread::{sched_getaffinity, CpuSet};
        match sched_getaffinity(None) {
            Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
            Err(_) => Vec::new(),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}

/// The CPU each of `workers` workers is bound to, by worker index: the
/// `allowed` CPUs in order when there are exactly as many workers as
/// allowed CPUs and more than one; none otherwise.
pub fn plan(allowed: &[usize], workers: usize) -> Vec<usize> {
    if workers > 1 && workers == allowed.len() {
        allowed.to_vec()
    } else {
        Vec::new()
    }
}

/// Binds the calling thread to `cpus`.
pub fn bind_current(cpus: &[usize]) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::thread::{sched_setaffinity, CpuSet};
        let mut set = CpuSet::new();
        for &c in cpus.iter().filter(|&&c| c < CpuSet::MAX_CPU) {
            set.set(c);
        }
        sched_setaffinity(None, &set).map_err(std::io::Error::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpus;
        Ok(())
    }
}

/// Binds the calling thread, worker `worker`, to `cpu`; where it cannot
/// (a mask changed since), says so and leaves it to the scheduler.
pub fn bind_worker(worker: usize, cpu: usize) {
    if let Err(e) = bind_current(&[cpu]) {
        tracing::warn!(target: "levee", worker, cpu, error = %e, "worker not bound to its CPU; the scheduler places it");
    }
}

/// Lets the threads `builder`'s runtime starts (its blocking threads) run
/// on every CPU this process may run on now, not only on the CPU of the
/// bound worker that starts them (a thread inherits its starter's mask).
pub fn unbind_started_threads(
    builder: &mut tokio::runtime::Builder,
) -> &mut tokio::runtime::Builder {
    let allowed = allowed_cpus();
    builder.on_thread_start(move || {
        let _ = bind_current(&allowed);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_bound_one_to_a_cpu_only_when_they_match_the_cpus() {
        assert_eq!(plan(&[0, 1], 2), vec![0, 1]);
        assert_eq!(plan(&[2, 5, 7], 3), vec![2, 5, 7]);
        // Fewer workers than CPUs (a CPU quota, or `--workers`): unbound.
        assert!(plan(&[0, 1, 2, 3], 2).is_empty());
        // More workers than CPUs: they share, unbound.
        assert!(plan(&[0, 1], 4).is_empty());
        // One worker: nothing to keep apart.
        assert!(plan(&[3], 1).is_empty());
        assert!(plan(&[], 0).is_empty());
    }

    #[test]
    fn the_mask_is_read_and_a_thread_bound_to_it_keeps_it() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty(), "no CPU read from the affinity mask");
        // Binding a fresh thread to its own mask changes nothing else.
        let again =
            std::thread::spawn(move || bind_current(&allowed).map(|()| (allowed, allowed_cpus())))
                .join()
                .expect("thread");
        let (before, after) = again.expect("bind to the mask");
        assert_eq!(before, after);
    }
}
