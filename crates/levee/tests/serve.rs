//! The real binary: `levee serve` stops cleanly on SIGTERM without cutting
//! off a request in flight.
#![allow(clippy::disallowed_methods)] // black-box timing of real processes

mod kit;
use kit::{free_port, http, start_mock, test_dir, wait_until, Proc, BIN};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigterm_lets_the_request_in_flight_finish_then_exits_zero() {
    let dir = test_dir("levee-serve-test");
    let faults = dir.join("faults.yaml");
    std::fs::write(&faults, "faults:\n  - { latency: 800ms }\n").unwrap();
    let (mock, mock_addr) = start_mock(&["--faults", faults.to_str().unwrap()]);
    let config = dir.join("levee.yaml");
    std::fs::write(
        &config,
        format!("providers:\n  p: {{ api: openai, base_url: \"http://{mock_addr}\" }}\nroutes:\n  - targets: [p]\n"),
    )
    .unwrap();
    let (port, admin) = (free_port(), free_port());
    let addr = format!("127.0.0.1:{port}");
    let gw = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", &addr, "--admin", &format!("127.0.0.1:{admin}")])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut gw = Proc(gw);
    wait_until(Duration::from_secs(10), || {
        http(&format!("127.0.0.1:{admin}"), "GET", "/healthz", "").is_ok_and(|(s, _)| s == 200)
    });
    let a = addr.clone();
    let inflight = std::thread::spawn(move || {
        http(
            &a,
            "POST",
            "/v1/chat/completions",
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        )
    });
    wait_until(Duration::from_secs(10), || {
        http(&mock_addr, "GET", "/_mock/stats", "")
            .is_ok_and(|(_, b)| b.contains("\"in_flight\":1"))
    });
    let pid = gw.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let (status, body) = inflight.join().unwrap().unwrap();
    assert_eq!(status, 200, "the in-flight request was cut off: {body}");
    let t = Instant::now();
    let code = loop {
        if let Some(s) = gw.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(code.code(), Some(0));
    assert!(TcpStream::connect(&addr).is_err(), "no longer accepting");
    drop(mock);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_rereads_the_config_and_keeps_it_when_the_new_file_is_invalid() {
    let dir = test_dir("levee-sighup-test");
    let (mock, mock_addr) = start_mock(&[]);
    let config = dir.join("levee.yaml");
    let routed = |prefix: &str| {
        format!("providers:\n  p: {{ api: openai, base_url: \"http://{mock_addr}\" }}\nroutes:\n  - match: {{ model_prefix: \"{prefix}\" }}\n    targets: [p]\n")
    };
    std::fs::write(&config, routed("a/")).unwrap();
    let (port, admin) = (free_port(), free_port());
    let (addr, admin) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{admin}"));
    let log = dir.join("gw.log");
    let gw = Command::new(BIN)
        .args(["serve", "--log-format", "json", "--config"])
        .arg(&config)
        .args(["--listen", &addr, "--admin", &admin])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let gw = Proc(gw);
    wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("levee gateway listening"))
    });
    let chat = r#"{"model":"b/x","messages":[{"role":"user","content":"hi"}]}"#;
    let post = || http(&addr, "POST", "/v1/chat/completions", chat).unwrap().0;
    let hup = || {
        assert!(Command::new("kill")
            .args(["-HUP", &gw.0.id().to_string()])
            .status()
            .unwrap()
            .success())
    };
    let readyz = || {
        http(&admin, "GET", "/readyz", "")
            .map(|r| r.1)
            .unwrap_or_default()
    };
    assert_eq!(post(), 404, "no route for b/ yet");

    std::fs::write(&config, routed("b/")).unwrap();
    hup();
    wait_until(Duration::from_secs(10), || {
        readyz().contains("generation 2")
    });
    assert_eq!(post(), 200, "the reloaded route serves");

    std::fs::write(&config, "routes: [ { targets: [p] \n").unwrap();
    hup();
    wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("config reload refused"))
    });
    let logged = std::fs::read_to_string(&log).unwrap();
    let refusal = logged
        .lines()
        .find(|l| l.contains("config reload refused"))
        .unwrap();
    assert!(refusal.contains("\"level\":\"ERROR\""), "{refusal}");
    assert_eq!(post(), 200, "the running config keeps serving");
    assert!(readyz().contains("generation 2"));
    let (_, metrics) = http(&admin, "GET", "/metrics", "").unwrap();
    assert!(
        metrics.contains("levee_config_reloads_total{result=\"error\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("levee_config_reloads_total{result=\"ok\"} 1"),
        "{metrics}"
    );
    drop(gw);
    drop(mock);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under `--log-format json` the reason the gateway cannot start is a JSON
/// record like every other line (a log pipeline keeps it), naming the line.
#[test]
fn a_start_up_error_under_json_logging_is_a_json_record() {
    let dir = test_dir("levee-serve-json-error");
    let config = dir.join("levee.yaml");
    std::fs::write(&config, "routes:\n  - retry: { max_attempts: 0 }\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--log-format", "json", "--config"])
        .arg(&config)
        .output()
        .expect("levee runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(v["level"], "ERROR", "{line}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("config line 2"),
        "{line}"
    );
}
