//! The real binary's worker threads and CPUs: with as many workers as CPUs
//! it may run on, each worker thread (the main thread is the first) is
//! bound to a CPU of its own; with `--cpu-affinity off`, none is. Linux
//! only (`/proc`), on a machine with two CPUs or more.
#![cfg(target_os = "linux")]
#![allow(clippy::disallowed_methods)] // black-box timing of real processes

mod kit;
use kit::{free_port, Proc, BIN};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const WATCHDOG: Duration = Duration::from_secs(20);

/// The CPUs in a `Cpus_allowed_list` value (`0-3,6`).
fn cpu_list(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().expect("cpu"), b.parse().expect("cpu"));
        cpus.extend(a..=b);
    }
    cpus
}

/// `Cpus_allowed_list` of a `/proc/.../status` file.
fn allowed_in(status_path: &std::path::Path) -> Vec<usize> {
    let status = std::fs::read_to_string(status_path).expect("read status");
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    cpu_list(line)
}

/// A running `levee serve` (the built-in mock) with `flags`.
fn serve(flags: &[&str]) -> Proc {
    let (port, admin) = (free_port(), free_port());
    let mut child = Proc(
        Command::new(BIN)
            .args(["serve", "--log-format", "json"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .args(flags)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start levee serve"),
    );
    let stderr = child.0.stderr.take().expect("stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stderr).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if line.contains("levee gateway listening") {
                let _ = tx.send(());
                break;
            }
        }
        for _ in lines {}
    });
    rx.recv_timeout(WATCHDOG)
        .expect("watchdog: the gateway did not print its listening line");
    child
}

/// The CPUs each worker thread of `child` may run on: the main thread's
/// first, then the `levee-worker-N` threads' (a thread starting may not
/// carry its name yet).
fn worker_cpus(child: &Proc) -> Vec<Vec<usize>> {
    let pid = child.0.id();
    let tasks = std::path::PathBuf::from(format!("/proc/{pid}/task"));
    let mut main = Vec::new();
    let mut workers = Vec::new();
    for t in std::fs::read_dir(&tasks).expect("read task dir") {
        let t = t.expect("task").path();
        let (Ok(name), Some(tid)) = (
            std::fs::read_to_string(t.join("comm")),
            t.file_name().and_then(|n| n.to_str()).map(str::to_string),
        ) else {
            continue; // a thread that ended meanwhile
        };
        if tid == pid.to_string() {
            main.push(allowed_in(&t.join("status")));
        } else if name.trim().starts_with("levee-worker-") {
            workers.push((name.trim().to_string(), allowed_in(&t.join("status"))));
        }
    }
    workers.sort();
    main.into_iter()
        .chain(workers.into_iter().map(|(_, c)| c))
        .collect()
}

#[test]
fn each_worker_has_a_cpu_of_its_own_unless_told_otherwise() {
    let allowed = allowed_in(std::path::Path::new("/proc/self/status"));
    if allowed.len() < 2 {
        eprintln!("one CPU allowed ({allowed:?}): no workers to keep apart; nothing to check");
        return;
    }
    let n = allowed.len().to_string();

    // Each worker binds itself as it starts: waited for, within the watchdog.
    let bound = serve(&["--workers", &n]);
    let mut seen = Vec::new();
    let one_each = |cpus: &[Vec<usize>]| {
        let mut each: Vec<usize> = cpus.iter().filter(|c| c.len() == 1).map(|c| c[0]).collect();
        each.sort_unstable();
        cpus.len() == allowed.len() && each == allowed
    };
    kit::wait_for(WATCHDOG, "every worker bound to a CPU of its own", || {
        seen = worker_cpus(&bound);
        one_each(&seen)
    });
    drop(bound);

    let unbound = serve(&["--workers", &n, "--cpu-affinity", "off"]);
    kit::wait_for(WATCHDOG, "every worker thread started", || {
        seen = worker_cpus(&unbound);
        seen.len() == allowed.len()
    });
    for cpus in &seen {
        assert_eq!(
            cpus, &allowed,
            "a worker bound with --cpu-affinity off: {seen:?}"
        );
    }
}
