//! The README's first command, `levee serve` with no config, as a new user
//! meets it: the built-in mock answers both dialects natively, so an
//! Anthropic caller's `thinking`, server tools and `is_error` tool results
//! reach it untranslated, and an OpenAI caller's chat completion too.
#![allow(clippy::disallowed_methods)] // black-box timing of real processes

mod kit;
use kit::{free_port, wait_until, Proc, BIN};
use std::process::{Command, Stdio};
use std::time::Duration;

fn post(addr: &str, path: &str, fields: &str, body: &str) -> (u16, String) {
    kit::http_with(addr, "POST", path, fields, body).expect("exchange")
}

fn healthy(admin: &str) -> bool {
    kit::http(admin, "GET", "/healthz", "").is_ok_and(|(s, _)| s == 200)
}

#[test]
fn with_no_config_both_dialects_are_answered_natively() {
    let (port, admin) = (free_port(), free_port());
    let (addr, admin) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{admin}"));
    let gw = Command::new(BIN)
        .args(["serve", "--listen", &addr, "--admin", &admin])
        .stderr(Stdio::null())
        .spawn()
        .expect("levee serve starts");
    let _gw = Proc(gw);
    wait_until(Duration::from_secs(20), || healthy(&admin));

    // What the Anthropic SDK sends for extended thinking with a server tool
    // after a failed tool call: none of it has an OpenAI counterpart.
    let messages = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,
        "thinking":{"type":"enabled","budget_tokens":512},
        "tools":[{"type":"web_search_20250305","name":"web_search","max_uses":2}],
        "messages":[
          {"role":"user","content":"What is the weather?"},
          {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","is_error":true,"content":"timeout"}]}
        ]}"#;
    let (status, text) = post(
        &addr,
        "/v1/messages",
        "anthropic-version: 2023-06-01\r\nx-api-key: test\r\n",
        messages,
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("x-levee-target: mock-anthropic"), "{text}");
    assert!(text.contains("\"type\":\"message\""), "{text}");
    assert!(!text.contains("x-levee-skipped"), "{text}");

    let chat = r#"{"model":"demo","temperature":0.2,"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, text) = post(&addr, "/v1/chat/completions", "", chat);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("x-levee-target: mock\r\n"), "{text}");
    assert!(text.contains("\"chat.completion\""), "{text}");
}
