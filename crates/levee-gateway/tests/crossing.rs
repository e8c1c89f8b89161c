//! Fallback across dialects, against strict one-dialect mocks: each provider
//! only ever sees its own dialect's path and body, and the caller only ever
//! sees its own dialect — answers, streams and errors.

mod support;
use serde_json::{json, Value};
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(20);

/// Anthropic primary that always fails, OpenAI backup (mock1).
const A_TO_O: &str = "providers:\n  anthropic: { api: anthropic, base_url: \"{mock0}\" }\n  openai: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - match: { model_prefix: \"anthropic/\" }\n    targets:\n      - { provider: anthropic, expected_attempt_ms: 1000 }\n      - { provider: openai, model: gpt-4.1, expected_attempt_ms: 1000 }\n    retry: { max_attempts: 1 }\n";

/// OpenAI primary that always fails, Anthropic backup (mock1).
const O_TO_A: &str = "providers:\n  openai: { api: openai, base_url: \"{mock0}\" }\n  anthropic: { api: anthropic, base_url: \"{mock1}\" }\nroutes:\n  - targets:\n      - { provider: openai, expected_attempt_ms: 1000 }\n      - { provider: anthropic, model: claude-backup, expected_attempt_ms: 1000 }\n    retry: { max_attempts: 1 }\n";

const DOWN: &str = "faults:\n  - { status: 503 }\n";

fn sse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = Value::Null;
            for l in e.lines() {
                if let Some(v) = l.strip_prefix("event: ") {
                    name = v.into();
                } else if let Some(v) = l.strip_prefix("data: ") {
                    data = serde_json::from_str(v).unwrap_or(Value::String(v.into()));
                }
            }
            (name, data)
        })
        .collect()
}

/// A streamed Anthropic request on the route that crosses to OpenAI.
const A_STREAM: &str = r#"{"model":"anthropic/claude-x","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

#[tokio::test(start_paused = true)]
async fn an_anthropic_caller_is_answered_by_an_openai_backup() {
    let env = local(&[DOWN, "faults: []"], A_TO_O);
    let body = r#"{"model":"anthropic/claude-x","max_tokens":16,"system":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(
        WATCHDOG,
        env.post(
            "/v1/messages",
            body,
            &[
                ("anthropic-version", "2023-06-01"),
                ("idempotency-key", "k"),
            ],
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "openai");
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "gpt-4.1");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"), "{v}");
    assert!(!v["content"][0]["text"].as_str().unwrap().is_empty());
    assert_eq!(v["stop_reason"], "end_turn");
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0);
    let (a, o) = (env.stats(0), env.stats(1));
    assert_eq!(a.by_path.get("/v1/messages"), Some(&1));
    assert_eq!(o.by_path.get("/v1/chat/completions"), Some(&1), "{o:?}");
    assert_eq!(o.requests_total, 1, "only its own path");
    assert_eq!(
        o.by_status.get("200"),
        Some(&1),
        "a body the strict mock accepts"
    );
    // The caller's key, turned into the value for this caller.
    assert_eq!(o.idempotency_keys.len(), 1, "{o:?}");
    assert!(!o.idempotency_keys.contains_key("k"), "{o:?}");
}

#[tokio::test(start_paused = true)]
async fn an_anthropic_stream_is_translated_event_by_event() {
    let env = local(&[DOWN, "faults: []"], A_TO_O);
    let r = watchdog(WATCHDOG, env.post("/v1/messages", A_STREAM, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").starts_with("text/event-stream"));
    let ev = sse(&r.text());
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{}", r.text());
    assert_eq!(names.last(), Some(&"message_stop"), "{}", r.text());
    let text: String = ev
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "This is a mock response from Levee.");
    let delta = &ev[ev.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert!(delta["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test(start_paused = true)]
async fn an_openai_caller_is_answered_by_an_anthropic_backup_plain_and_streamed() {
    let env = local(&[DOWN, "faults: []"], O_TO_A);
    let r = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "claude-backup");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );

    let body = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = sse(&r.text());
    assert_eq!(ev.last().unwrap().1, Value::String("[DONE]".into()));
    let text: String = ev
        .iter()
        .filter_map(|(_, d)| d["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "This is a mock response from Levee.");
    let usage = &ev[ev.len() - 2].1;
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let s = env.stats(1);
    assert_eq!(s.by_path.get("/v1/messages"), Some(&2));
    assert_eq!(s.by_status.get("200"), Some(&2), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn a_forced_tool_crosses_both_ways() {
    let env = local(&[DOWN, "faults: []"], A_TO_O);
    let body = r#"{"model":"anthropic/c","max_tokens":64,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"lookup","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"lookup"}}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/messages", body, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["content"][0]["type"], "tool_use");
    assert_eq!(v["content"][0]["name"], "lookup");
    assert_eq!(v["content"][0]["input"], json!({}));

    let env = local(&[DOWN, "faults: []"], O_TO_A);
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"lookup"}}}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = sse(&r.text());
    let calls: Vec<&Value> = ev
        .iter()
        .filter_map(|(_, d)| d["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert_eq!(calls[0]["function"]["name"], "lookup");
    let args: String = calls
        .iter()
        .filter_map(|c| c["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, "{}");
    let finish: Vec<&str> = ev
        .iter()
        .filter_map(|(_, d)| d["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["tool_calls"]);
}

#[tokio::test(start_paused = true)]
async fn a_backup_that_cannot_carry_the_request_is_skipped_and_counted() {
    let env = local(&[DOWN, "faults: []"], O_TO_A);
    let body = r#"{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &[])).await;
    assert_eq!(r.status, 503, "the primary's answer: {}", r.text());
    assert!(r.json()["error"].is_object());
    assert_eq!(
        env.stats(1).requests_total,
        0,
        "the backup is never sent it"
    );
    let m = env.metrics();
    assert_eq!(
        metric(
            &m,
            "levee_translation_refused_total",
            &["provider=\"anthropic\"", "reason=\"several_choices\""]
        ),
        1.0,
        "{m}"
    );
    assert_eq!(r.header("x-levee-skipped"), "anthropic=several_choices");
}

#[tokio::test(start_paused = true)]
async fn sampling_parameters_reach_an_anthropic_primary_and_a_skip_is_never_silent() {
    let env = local(&["faults: []", "faults: []"], A_TO_O);
    // The OpenAI SDK's sampling parameters: carried to the Anthropic primary.
    let body = r#"{"model":"anthropic/claude-x","temperature":0.7,"top_p":0.9,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "anthropic");
    assert_eq!(r.header("x-levee-skipped"), "");
    assert_eq!(r.json()["object"], "chat.completion");
    assert_eq!(env.stats(1).requests_total, 0);
    // A temperature Anthropic cannot take: the backup answers, and the
    // answer says the primary was passed over and why.
    let hot = r#"{"model":"anthropic/claude-x","temperature":1.5,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", hot, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "openai");
    assert_eq!(r.header("x-levee-skipped"), "anthropic=sampling");
    assert_eq!(
        env.stats(0).requests_total,
        1,
        "the primary was never sent it"
    );
    let m = env.metrics();
    assert_eq!(
        metric(
            &m,
            "levee_translation_refused_total",
            &["provider=\"anthropic\"", "reason=\"sampling\""]
        ),
        1.0,
        "{m}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_backup_that_could_not_carry_a_request_the_primary_answered_is_not_counted() {
    let env = local(&["faults: []", "faults: []"], O_TO_A);
    for _ in 0..3 {
        let r = watchdog(
            WATCHDOG,
            env.post("/v1/embeddings", r#"{"model":"m","input":"x"}"#, &[]),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-levee-skipped"), "");
    }
    let m = env.metrics();
    assert!(
        !m.lines()
            .any(|l| l.starts_with("levee_translation_refused_total{")),
        "counted though nothing went elsewhere: {m}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_no_target_can_carry_is_a_400_in_the_callers_dialect() {
    let config = "providers:\n  anthropic: { api: anthropic, base_url: \"{mock0}\" }\nroutes:\n  - targets: [anthropic]\n";
    let env = local(&["faults: []"], config);
    let body = r#"{"model":"m","logprobs":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = env.post("/v1/chat/completions", body, &[]).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "bad_request");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("logprobs"), "{msg}");
    let r = env
        .post("/v1/embeddings", r#"{"model":"m","input":"x"}"#, &[])
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(env.stats(0).requests_total, 0);
}

#[tokio::test(start_paused = true)]
async fn the_backups_error_reaches_the_caller_in_the_callers_dialect() {
    let env = local(&[DOWN, "faults:\n  - { status: 400 }\n"], A_TO_O);
    let body =
        r#"{"model":"anthropic/c","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/messages", body, &[])).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "error", "Anthropic's shape: {v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

#[tokio::test(start_paused = true)]
async fn a_translated_stream_cut_by_the_backup_ends_with_an_error_event_in_the_callers_dialect() {
    let env = local(&[DOWN, "faults:\n  - { cut_stream_after: 3 }\n"], A_TO_O);
    let r = watchdog(WATCHDOG, env.post("/v1/messages", A_STREAM, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = sse(&r.text());
    assert_eq!(ev.first().map(|e| e.0.as_str()), Some("message_start"));
    let (name, data) = ev.last().unwrap();
    assert_eq!(name, "error", "{}", r.text());
    assert_eq!(data["type"], "error");
    assert!(!ev.iter().any(|(n, _)| n == "message_stop"));
    assert_eq!(env.stats(1).requests_total, 1, "never restarted");
}
