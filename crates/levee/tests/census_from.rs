//! `levee check --census-from`: the real binary prints the census a running
//! gateway measured from its traffic.

mod kit;
use kit::CENSUS_ROUTES;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::Duration;

/// The two providers of the census route, both the mock at `{mock}`.
const PROVIDERS: &str = r#"listen: 127.0.0.1:0
admin: { listen: 127.0.0.1:0 }
providers:
  primary: { api: openai, base_url: "{mock}" }
  backup: { api: openai, base_url: "{mock}" }
"#;

fn post(addr: &str, caller: &str, timeout_ms: u32) -> u16 {
    let body = r#"{"model":"claude/x","messages":[{"role":"user","content":"hi"}]}"#;
    let mut s = TcpStream::connect(addr).expect("gateway listens");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-levee-caller: {caller}\r\nx-timeout-ms: {timeout_ms}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0)
}

fn row<'a>(out: &'a str, caller: &str) -> Vec<&'a str> {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(caller))
        .unwrap_or_else(|| panic!("no row for {caller} in:\n{out}"));
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn census_from_a_running_gateway() {
    let mock = levee_mock::spawn("127.0.0.1:0".parse().unwrap(), Default::default())
        .await
        .expect("mock starts");
    let config = levee_config::Config::parse(
        &format!("{PROVIDERS}{CENSUS_ROUTES}").replace("{mock}", &mock.url()),
    )
    .unwrap();
    let gw = levee_gateway::spawn(config, 1, std::future::pending())
        .await
        .expect("gateway starts");
    let (addr, admin) = (gw.addr.to_string(), gw.admin_addr.to_string());
    let out = tokio::task::spawn_blocking(move || {
        for _ in 0..3 {
            assert_eq!(post(&addr, "queue-worker", 40_000), 200);
            assert_eq!(post(&addr, "interactive", 100_000), 200);
            assert_eq!(post(&addr, "batch-job", 22_000), 200);
        }
        check_census_from(&admin)
    });
    let (live, strict, listed) = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("watchdog")
        .expect("client thread");
    gw.shutdown().await;
    mock.shutdown().await;

    assert_live_census(&live);
    assert_strict_fails_the_stranded_callers(&strict);
    assert_a_callers_list_fails_the_callers_it_does_not_name(&listed);
}

/// `levee check --census-from` the admin address `admin`: plain, with
/// `--strict`, and with `--strict` and a callers list that names only
/// `interactive`.
fn check_census_from(admin: &str) -> (Output, Output, Output) {
    let live = Command::new(env!("CARGO_BIN_EXE_levee"))
        .args(["check", "--census-from", &format!("http://{admin}")])
        .output()
        .expect("run levee");
    let strict = Command::new(env!("CARGO_BIN_EXE_levee"))
        .args([
            "check",
            "--strict",
            "--census-from",
            &format!("http://{admin}/"),
        ])
        .output()
        .expect("run levee");
    // A list that names only `interactive`: the other two are new.
    let list = std::env::temp_dir().join(format!("levee-census-list-{}.yaml", std::process::id()));
    std::fs::write(&list, "- { name: interactive, deadline: 100s }\n").expect("list");
    let listed = Command::new(env!("CARGO_BIN_EXE_levee"))
        .args([
            "check",
            "--strict",
            "--census-from",
            &format!("http://{admin}"),
        ])
        .arg("--callers")
        .arg(&list)
        .output()
        .expect("run levee");
    let _ = std::fs::remove_file(&list);
    (live, strict, listed)
}

/// The live census: each caller's requests, observed deadlines and what
/// its route can start, and the targets with their observed p99.
fn assert_live_census(live: &Output) {
    let text = String::from_utf8_lossy(&live.stdout).into_owned();
    assert!(
        live.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&live.stderr)
    );
    // caller, requests, p5, p50, route, retry?, fallback?
    assert_eq!(
        row(&text, "queue-worker"),
        ["queue-worker", "3", "40s", "40s", "claude/", "no", "yes"],
        "{text}"
    );
    assert_eq!(
        row(&text, "interactive"),
        ["interactive", "3", "100s", "100s", "claude/", "yes", "yes"],
        "{text}"
    );
    assert_eq!(
        row(&text, "batch-job"),
        ["batch-job", "3", "22s", "22s", "claude/", "no", "no"],
        "{text}"
    );
    let targets = text.split("\ntargets").nth(1).expect("a targets table");
    assert!(
        targets.contains("primary") && targets.contains("35s"),
        "{text}"
    );
    // The backup saw no traffic: no observed p99 yet.
    let backup_row = targets
        .lines()
        .find(|l| l.contains("backup"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        backup_row.contains("30s") && backup_row.trim_end().ends_with('-'),
        "{text}"
    );
}

/// --strict: batch-job can neither retry nor fall back, and queue-worker
/// cannot retry though its fallback can: both fail it.
fn assert_strict_fails_the_stranded_callers(strict: &Output) {
    assert_eq!(strict.status.code(), Some(1));
    let err = String::from_utf8_lossy(&strict.stderr);
    assert!(
        err.contains("`batch-job`") && err.contains("`claude/`"),
        "{err}"
    );
    assert!(
        err.contains("caller `queue-worker` (observed p50 deadline) cannot retry (only its fallback can start)"),
        "{err}"
    );
    assert!(!err.contains("`interactive`"), "{err}");
}

/// With a callers list, live callers it does not name fail it too.
fn assert_a_callers_list_fails_the_callers_it_does_not_name(listed: &Output) {
    assert_eq!(listed.status.code(), Some(1));
    let err = String::from_utf8_lossy(&listed.stderr);
    for name in ["queue-worker", "batch-job"] {
        assert!(
            err.contains(&format!(
                "caller `{name}` sends traffic but is not on the callers list"
            )),
            "{err}"
        );
    }
    assert!(!err.contains("caller `interactive` sends"), "{err}");
}

#[test]
fn census_from_an_address_that_is_not_a_gateway_says_what_to_check() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(env!("CARGO_BIN_EXE_levee"))
        .args([
            "check",
            "--census-from",
            &format!("http://127.0.0.1:{port}"),
        ])
        .output()
        .expect("run levee");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach") && err.contains("admin"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_levee"))
        .args(["check", "--census-from", "ftp://x"])
        .output()
        .expect("run levee");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an http:// address"));
}
