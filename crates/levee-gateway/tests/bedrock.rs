//! Amazon Bedrock targets (Anthropic models) through the in-process gateway
//! against the strict Bedrock mock (`levee mock --api bedrock`), which
//! verifies every SigV4 signature: JSON and streams, tool use, a throttle
//! retried after its Retry-After, an exception mid-stream, a wrong secret
//! refused and counted, a credentials file read again when it changes,
//! temporary credentials, a failover from Anthropic's own API, and the
//! credentials kept out of answers, metrics and logs.

mod support;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use levee_mock::bedrock_keys::{
    TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, TEST_SESSION_ACCESS_KEY_ID, TEST_SESSION_TOKEN,
};
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);
const MODEL: &str = "anthropic.claude-3-5-sonnet-20241022-v2:0";
const MESSAGES: &str =
    r#"{"model":"claude-sonnet","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
const STREAM: &str = r#"{"model":"claude-sonnet","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
const WRONG_SECRET: &str = "wrong/secret/key/0000000000000000000000000";

/// A shared credentials file of its own for one test, removed on drop.
struct CredentialsFile {
    dir: PathBuf,
    path: PathBuf,
}

impl CredentialsFile {
    fn new(test: &str, text: &str) -> CredentialsFile {
        let dir = std::env::temp_dir().join(format!("levee-bedrock-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("credentials");
        let f = CredentialsFile { dir, path };
        f.write(text);
        f
    }

    fn write(&self, text: &str) {
        std::fs::write(&self.path, text).unwrap();
    }
}

impl Drop for CredentialsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn profile(id: &str, secret: &str, token: Option<&str>) -> String {
    let mut s = format!("[default]\naws_access_key_id = {id}\naws_secret_access_key = {secret}\n");
    if let Some(t) = token {
        s.push_str(&format!("aws_session_token = {t}\n"));
    }
    s
}

fn test_keys() -> String {
    profile(TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, None)
}

/// One Bedrock provider (`{mock0}`) reading `file`, and one route to it.
fn config(file: &CredentialsFile, route_extra: &str) -> String {
    format!(
        "providers:\n  br: {{ api: bedrock, base_url: \"{{mock0}}\", region: us-east-1, credentials_file: \"{}\" }}\nroutes:\n  - targets:\n      - {{ provider: br, model: \"{MODEL}\" }}\n{route_extra}",
        file.path.display()
    )
}

async fn messages(env: &Local, body: &str) -> Resp {
    let headers = [("anthropic-version", "2023-06-01")];
    watchdog(WATCHDOG, env.post("/v1/messages", body, &headers)).await
}

/// Every secret of the test key pairs, in the forms a leak would take.
fn assert_no_secret(what: &str, text: &str) {
    for s in [TEST_SECRET_ACCESS_KEY, TEST_SESSION_TOKEN, WRONG_SECRET] {
        assert!(!text.contains(s), "{what} holds a secret:\n{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn json_and_streams_are_served_by_a_bedrock_target() {
    let file = CredentialsFile::new("serve", &test_keys());
    let env = local(&["faults: []"], &config(&file, ""));
    let r = messages(&env, MESSAGES).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "br");
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["model"], MODEL);
    // InvokeModel's answer carries its usage: counted.
    let output = |m: &str| metric(m, "levee_tokens_total", &["kind=\"output\""]);
    let after_json = output(&env.metrics());
    assert!(after_json > 0.0);

    let r = messages(&env, STREAM).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").starts_with("text/event-stream"));
    let events = levee_wire::sse::events(&r.text());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(names.last(), Some(&"message_stop"), "{names:?}");
    assert!(names.contains(&"content_block_delta"), "{names:?}");
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "event and data agree");
    }

    let s = env.stats(0);
    assert_eq!((s.requests_total, s.unauthorized), (2, 0), "{s:?}");
    assert_eq!(s.by_model.get(MODEL), Some(&2), "{s:?}");
    assert_eq!(s.by_path.get("/v1/messages"), Some(&2), "{s:?}");
    let metrics = env.metrics();
    assert_eq!(attempts_labelled(&metrics, "success"), 2.0, "{metrics}");
    assert_no_secret("the metrics", &metrics);
    // And the stream's, from its events.
    assert!(output(&metrics) > after_json, "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn tool_use_reaches_bedrock_and_comes_back_as_a_tool_call() {
    let file = CredentialsFile::new("tools", &test_keys());
    let env = local(&["faults: []"], &config(&file, ""));
    let tools = r#""tools":[{"name":"get_weather","description":"weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],"tool_choice":{"type":"tool","name":"get_weather"}"#;
    let body = format!(
        r#"{{"model":"claude-sonnet","max_tokens":64,{tools},"messages":[{{"role":"user","content":"weather?"}}]}}"#
    );
    let r = messages(&env, &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    assert_eq!(v["content"][0]["type"], "tool_use", "{v}");
    assert_eq!(v["content"][0]["name"], "get_weather", "{v}");

    let body = body.replacen("\"max_tokens\"", "\"stream\":true,\"max_tokens\"", 1);
    let r = messages(&env, &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = levee_wire::sse::events(&r.text());
    let start = events
        .iter()
        .find(|(n, _)| n == "content_block_start")
        .expect("a content block");
    assert_eq!(start.1["content_block"]["type"], "tool_use");
    assert!(events
        .iter()
        .any(|(_, d)| d["delta"]["type"] == "input_json_delta"));
}

#[tokio::test(start_paused = true)]
async fn a_throttling_exception_is_retried_after_its_retry_after() {
    let file = CredentialsFile::new("throttle", &test_keys());
    let faults = "faults:\n  - { status: 429, retry_after: 2, to: 500ms }\n";
    let env = local(&[faults], &config(&file, ""));
    let t = paused_now();
    let r = messages(&env, MESSAGES).await;
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "2");
    assert!(took >= Duration::from_secs(2), "waited {took:?}");
    assert!(took < Duration::from_secs(3), "waited {took:?}");
    let s = env.stats(0);
    assert_eq!(s.by_status.get("429"), Some(&1), "{s:?}");
    let metrics = env.metrics();
    assert_eq!(attempts_labelled(&metrics, "success"), 1.0, "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn a_model_timeout_is_retried_as_the_timeout_it_is() {
    // Bedrock's ModelTimeoutException is a 408; Anthropic says the same with
    // a 504 timeout_error, which the default retry set retries.
    let file = CredentialsFile::new("model-timeout", &test_keys());
    let faults = "faults:\n  - { status: 408, to: 100ms }\n";
    let env = local(&[faults], &config(&file, ""));
    let r = messages(&env, MESSAGES).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_ne!(r.header("x-levee-attempts"), "1");
    assert!(env.stats(0).by_status.get("408").is_some_and(|n| *n >= 1));
}

#[tokio::test(start_paused = true)]
async fn bedrocks_throttle_reaches_the_caller_as_an_anthropic_rate_limit_error() {
    let file = CredentialsFile::new("throttle-out", &test_keys());
    let faults = "faults:\n  - { status: 429 }\n";
    let env = local(
        &[faults],
        &config(&file, "    retry: { max_attempts: 1 }\n"),
    );
    let r = messages(&env, MESSAGES).await;
    assert_eq!(r.status, 429, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("ThrottlingException"), "{msg}");
}

#[tokio::test(start_paused = true)]
async fn an_exception_mid_stream_ends_the_stream_with_an_anthropic_error_event() {
    let file = CredentialsFile::new("midstream", &test_keys());
    let faults = "faults:\n  - { cut_stream_after: 2 }\n";
    let env = local(&[faults], &config(&file, ""));
    let r = messages(&env, STREAM).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = levee_wire::sse::events(&r.text());
    assert_eq!(events.len(), 3, "{}", r.text());
    assert_eq!(events[0].0, "message_start");
    let (name, data) = &events[2];
    assert_eq!(name, "error", "{}", r.text());
    assert_eq!(data["error"]["type"], "api_error");
    let msg = data["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("modelStreamErrorException"), "{msg}");
    // Committed at the first event: never sent again.
    assert_eq!(env.stats(0).requests_total, 1);
}

#[tokio::test(start_paused = true)]
async fn a_wrong_secret_is_refused_by_bedrock_counted_and_not_retried() {
    let file = CredentialsFile::new("wrong", &profile(TEST_ACCESS_KEY_ID, WRONG_SECRET, None));
    let env = local(&["faults: []"], &config(&file, ""));
    let r = messages(&env, MESSAGES).await;
    assert_eq!(r.status, 403, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("InvalidSignatureException"), "{msg}");
    assert_eq!(r.header("x-levee-attempts"), "1");
    let s = env.stats(0);
    assert_eq!((s.unauthorized, s.requests_total), (1, 0), "{s:?}");
    assert_no_secret("the answer", &format!("{:?}{}", r.headers, r.text()));
}

#[tokio::test(start_paused = true)]
async fn a_credentials_file_that_changes_is_read_again() {
    let file = CredentialsFile::new("reread", &profile(TEST_ACCESS_KEY_ID, WRONG_SECRET, None));
    let env = local(&["faults: []"], &config(&file, ""));
    assert_eq!(messages(&env, MESSAGES).await.status, 403);
    // The keys are rotated in place: the next request signs with them.
    file.write(&test_keys());
    let r = messages(&env, MESSAGES).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Temporary credentials: the session token is sent and signed.
    file.write(&profile(
        TEST_SESSION_ACCESS_KEY_ID,
        TEST_SECRET_ACCESS_KEY,
        Some(TEST_SESSION_TOKEN),
    ));
    let r = messages(&env, STREAM).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // A file that is gone fails the attempt as `credentials`, saying what to fix.
    std::fs::remove_file(&file.path).unwrap();
    let r = messages(&env, MESSAGES).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "credentials_unavailable");
    let metrics = env.metrics();
    assert!(
        attempts_labelled(&metrics, "credentials") >= 1.0,
        "{metrics}"
    );
    let s = env.stats(0);
    assert_eq!((s.unauthorized, s.requests_total), (1, 2), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn what_bedrock_does_not_serve_is_refused_before_it_is_sent() {
    let file = CredentialsFile::new("unserved", &test_keys());
    let env = local(&["faults: []"], &config(&file, ""));
    let r = watchdog(
        WATCHDOG,
        env.post(
            "/v1/messages/count_tokens",
            r#"{"model":"claude-sonnet","messages":[{"role":"user","content":"hi"}]}"#,
            &[("anthropic-version", "2023-06-01")],
        ),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("does not count tokens"), "{}", r.text());
    assert_eq!(env.stats(0).requests_total, 0);
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_anthropic_api_fails_over_to_claude_on_bedrock() {
    let file = CredentialsFile::new("failover", &test_keys());
    std::env::set_var("LEVEE_TEST_BEDROCK_ANTHROPIC_KEY", "sk-ant-failover-0001");
    let text = format!(
        "providers:\n  anthropic: {{ api: anthropic, base_url: \"{{mock0}}\", api_key_env: LEVEE_TEST_BEDROCK_ANTHROPIC_KEY }}\n  bedrock: {{ api: bedrock, base_url: \"{{mock1}}\", region: us-east-1, credentials_file: \"{}\" }}\nroutes:\n  - targets:\n      - {{ provider: anthropic }}\n      - {{ provider: bedrock, model: \"{MODEL}\" }}\n",
        file.path.display()
    );
    let env = local(&["faults:\n  - { status: 529 }\n", "faults: []"], &text);
    for body in [MESSAGES, STREAM] {
        let r = messages(&env, body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-levee-target"), "bedrock");
    }
    assert!(env.stats(0).by_status.get("529").is_some_and(|n| *n >= 2));
    assert_eq!(env.stats(1).requests_total, 2);
    let metrics = env.metrics();
    let per = |p: &str, result: &str| attempts_of(&metrics, p, result);
    assert_eq!(per("bedrock", "success"), 2.0, "{metrics}");
    assert!(per("anthropic", "http_5xx") >= 2.0, "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn no_secret_reaches_the_logs_answers_or_metrics() {
    let (logs, _guard) = capture_logs(tracing::Level::TRACE);

    let file = CredentialsFile::new(
        "secrets",
        &profile(
            TEST_SESSION_ACCESS_KEY_ID,
            TEST_SECRET_ACCESS_KEY,
            Some(TEST_SESSION_TOKEN),
        ),
    );
    let faults = "faults:\n  - { status: 503, retry_after: 1, to: 500ms }\n  - { cut_stream_after: 1, from: 500ms }\n";
    let env = local(&[faults], &config(&file, ""));
    let ok = messages(&env, MESSAGES).await;
    let cut = messages(&env, STREAM).await;
    file.write(&profile(TEST_ACCESS_KEY_ID, WRONG_SECRET, None));
    let refused = messages(&env, MESSAGES).await;
    std::fs::remove_file(&file.path).unwrap();
    let unsigned = messages(&env, MESSAGES).await;
    assert_eq!(
        (ok.status, cut.status, refused.status, unsigned.status),
        (200, 200, 403, 503)
    );
    for r in [&ok, &cut, &refused, &unsigned] {
        assert_no_secret("an answer", &format!("{:?}{}", r.headers, r.text()));
    }
    assert_no_secret("the metrics", &env.metrics());
    let _ = std::io::stderr().flush();
    let text = logs.text();
    assert!(text.contains("attempt not authorised"), "{text}");
    assert_no_secret("the logs", &text);
}
