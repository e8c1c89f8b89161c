//! The request log an on-call engineer reads, from the real binary with
//! `--log-format json`: one line per request with its id (also on the
//! answer), who called, where it went and how each attempt ended; failures
//! and refusals at WARN; one `target` key per line (tracing's), the provider
//! under `provider`.
#![allow(clippy::disallowed_methods)] // black-box timing of real processes

mod kit;
use kit::{free_port, start_mock, test_dir, wait_until, Proc, BIN};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn post(addr: &str, path: &str, fields: &str, body: &str) -> (u16, String) {
    kit::http_with(addr, "POST", path, fields, body).expect("exchange")
}

fn header<'a>(answer: &'a str, name: &str) -> &'a str {
    answer
        .split("\r\n\r\n")
        .next()
        .unwrap_or("")
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
        .unwrap_or("")
}

/// The JSON log lines whose message is `msg`.
fn lines(log: &str, msg: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == msg || v["message"] == msg)
        .collect()
}

/// A field of a log line, wherever the formatter put it.
fn field<'a>(line: &'a Value, name: &str) -> &'a Value {
    if line["fields"].is_object() {
        &line["fields"][name]
    } else {
        &line[name]
    }
}

#[test]
fn every_request_has_one_line_with_its_id_caller_attempts_and_outcome() {
    let dir = test_dir("levee-logs-test");
    let (mock, mock_addr) = start_mock(&[]);
    let (gw, addr, log_path) = serve_with_json_log(&dir, &mock_addr);
    let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let (id, failed_id) = send_each_kind_of_request(&addr, &mock_addr);

    wait_until(Duration::from_secs(10), || {
        lines(&read(), "request").len() >= 3 && !lines(&read(), "request refused").is_empty()
    });
    drop(gw);
    drop(mock);
    let text = read();
    for raw in text.lines().filter(|l| l.contains("\"request")) {
        assert_eq!(
            raw.matches("\"target\":").count(),
            1,
            "two target keys: {raw}"
        );
    }
    let requests = lines(&text, "request");
    assert_answered_line(&requests, &id, &text);
    assert!(requests
        .iter()
        .any(|l| field(l, "request_id") == "trace-42"));
    assert_failed_and_refused_lines(&requests, &failed_id, &text);
    assert!(
        !text.contains("sk-wrong-key-123456"),
        "the refused key is in the log"
    );
    assert!(
        !text.contains("key-of-search"),
        "a caller's key is in the log"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `levee serve --log-format json` in `dir`, its log in `levee.log`, with
/// two caller keys (`billing`, and `search` from an environment variable)
/// and one provider `p`, the mock at `mock_addr`, whose answers name model
/// `gpt-answered`, two attempts each; returns once it is listening, with
/// its address and the log's path.
fn serve_with_json_log(dir: &Path, mock_addr: &str) -> (Proc, String, PathBuf) {
    let config = dir.join("levee.yaml");
    let sha = "a9f3c7e4d3b7a6d1f4c1a5d2b6e6e0f8c9a3e1b7d5f2c4a6e8b0d2f4a6c8e0b2";
    std::fs::write(
        &config,
        format!(
            "keys:\n  - {{ name: billing, sha256: \"{sha}\" }}\n  - {{ name: search, env: LEVEE_LOGS_TEST_KEY }}\nproviders:\n  p: {{ api: openai, base_url: \"http://{mock_addr}\" }}\nroutes:\n  - targets: [{{ provider: p, model: gpt-answered }}]\n    retry: {{ max_attempts: 2 }}\n"
        ),
    )
    .expect("config");
    let log_path = dir.join("levee.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let (port, admin) = (free_port(), free_port());
    let (addr, admin) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{admin}"));
    let gw = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", &addr, "--admin", &admin, "--log-format", "json"])
        .env("LEVEE_LOGS_TEST_KEY", "key-of-search")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("levee serve starts");
    let gw = Proc(gw);
    let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_until(Duration::from_secs(20), || read().contains("listening"));
    (gw, addr, log_path)
}

/// One request answered (its id made by the gateway), one with the
/// caller's own id, one refused for its key, and one that fails after two
/// attempts; returns the first's and the last's ids.
fn send_each_kind_of_request(addr: &str, mock_addr: &str) -> (String, String) {
    let chat = r#"{"model":"asked-model","messages":[{"role":"user","content":"hi"}]}"#;
    let auth = "authorization: Bearer key-of-search\r\nx-levee-caller: search-api\r\n";
    let (status, ok) = post(addr, "/v1/chat/completions", auth, chat);
    assert_eq!(status, 200, "{ok}");
    let id = header(&ok, "x-request-id").to_string();
    assert_eq!(id.len(), 36, "a UUID: {ok}");
    // The caller's own id is echoed.
    let mine = format!("{auth}x-request-id: trace-42\r\n");
    let (_, echoed) = post(addr, "/v1/chat/completions", &mine, chat);
    assert_eq!(header(&echoed, "x-request-id"), "trace-42");
    // A refused key, logged without the key.
    let wrong = "authorization: Bearer sk-wrong-key-123456\r\n";
    let (status, _) = post(addr, "/v1/chat/completions", wrong, chat);
    assert_eq!(status, 401);
    // A failure after attempts: the provider answers 503 twice.
    let faults = r#"{"faults":[{"status":503}]}"#;
    let (s, _) = post(mock_addr, "/_mock/faults", "", faults);
    assert_eq!(s, 200);
    let (status, failed) = post(addr, "/v1/chat/completions", auth, chat);
    assert_eq!(status, 503, "{failed}");
    let failed_id = header(&failed, "x-request-id").to_string();
    (id, failed_id)
}

/// The answered request's line, at INFO: who called (the key's name),
/// where it went, what was asked and answered, and its one attempt.
fn assert_answered_line(requests: &[Value], id: &str, text: &str) {
    let first = requests
        .iter()
        .find(|l| field(l, "request_id") == id)
        .unwrap_or_else(|| panic!("no line for {id}: {text}"));
    assert_eq!(first["level"], "INFO", "{first}");
    assert_eq!(field(first, "caller"), "search", "the key's name: {first}");
    assert_eq!(field(first, "provider"), "p");
    assert_eq!(field(first, "model"), "asked-model");
    assert_eq!(field(first, "model_answered"), "gpt-answered");
    assert_eq!(field(first, "path"), "/v1/chat/completions");
    assert_eq!(field(first, "dialect"), "openai");
    assert_eq!(field(first, "stream"), false);
    assert_eq!(field(first, "outcome"), "success");
    assert!(field(first, "duration_ms").is_u64(), "{first}");
    assert!(
        field(first, "attempt_list")
            .as_str()
            .is_some_and(|a| a.starts_with("p 200 ")),
        "{first}"
    );
}

/// The failed request's line and the refused one's, both at WARN: the
/// failure with its two attempts, the refusal with its status.
fn assert_failed_and_refused_lines(requests: &[Value], failed_id: &str, text: &str) {
    let bad = requests
        .iter()
        .find(|l| field(l, "request_id") == failed_id)
        .unwrap_or_else(|| panic!("no line for {failed_id}: {text}"));
    assert_eq!(bad["level"], "WARN", "{bad}");
    assert_eq!(field(bad, "attempts"), 2, "{bad}");
    assert!(
        field(bad, "attempt_list")
            .as_str()
            .is_some_and(|a| a.starts_with("p 503 ") && a.contains(", p 503 ")),
        "{bad}"
    );
    let refused = lines(text, "request refused");
    assert_eq!(refused[0]["level"], "WARN");
    assert_eq!(field(&refused[0], "status"), 401);
}
