//! `levee drill --stop-pid` on real processes: two `levee serve` replicas in
//! front of one `levee mock`; the drill sends SIGTERM to the first one second
//! in, and its callers fail over to the second.
#![allow(clippy::disallowed_methods)] // black-box timing of real processes

mod kit;
use kit::{start_mock, test_dir, wait_until, Proc, BIN};
use std::process::Command;
use std::time::Duration;

/// A replica on an ephemeral port; returns it and its URL.
fn replica(config: &std::path::Path, log: &std::path::Path) -> (Proc, String) {
    // Owned (killed and waited for on drop) from the start.
    let child = Proc(
        Command::new(BIN)
            .args(["serve", "--log-format", "json", "--config"])
            .arg(config)
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    );
    let listening = || {
        let text = std::fs::read_to_string(log).ok()?;
        let line = text
            .lines()
            .find(|l| l.contains("levee gateway listening"))?;
        serde_json::from_str::<serde_json::Value>(line).ok()
    };
    wait_until(Duration::from_secs(10), || listening().is_some());
    let v = listening().expect("a listening line");
    let url = format!("http://{}", v["listen"].as_str().unwrap());
    (child, url)
}

#[test]
fn drill_stops_a_replica_by_pid_and_its_callers_fail_over() {
    let dir = test_dir("levee-drill-cli");
    let (mock, mock_addr) = start_mock(&[]);
    let config = dir.join("levee.yaml");
    std::fs::write(
        &config,
        format!("listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nproviders:\n  p: {{ api: openai, base_url: \"http://{mock_addr}\" }}\nroutes:\n  - targets: [p]\n"),
    )
    .unwrap();
    let (a, a_url) = replica(&config, &dir.join("a.log"));
    let (b, b_url) = replica(&config, &dir.join("b.log"));
    let out = Command::new(BIN)
        .args(["drill", "--gateway", &a_url, "--failover", &b_url])
        .args(["--mock", &format!("http://{mock_addr}")])
        .args(["--rate", "50", "--duration", "3s", "--timeout-ms", "5000"])
        .args([
            "--stop-pid",
            &a.0.id().to_string(),
            "--stop-at",
            "1s",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&out.stderr)));
    let stop = &report["replica_stop"];
    assert!(stop["stopped_at_seconds"].is_number(), "{report}");
    assert_eq!(stop["signal"], "term", "{report}");
    assert_eq!(stop["failed_calls"], 0, "{report}");
    assert_eq!(report["outcomes"]["success"], 150, "{report}");
    assert_eq!(out.status.code(), Some(0), "{report}");
    drop((a, b, mock));
    let _ = std::fs::remove_dir_all(&dir);
}
