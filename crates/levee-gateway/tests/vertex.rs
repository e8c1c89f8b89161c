//! Google Vertex AI targets through the in-process gateway against the
//! strict Vertex mock (`levee mock --api vertex`): Anthropic models through
//! `rawPredict` / `streamRawPredict` (JSON, stream, tool use), Gemini
//! through the OpenAI-compatible endpoint, access tokens from the mock's
//! own token endpoint for the test service account's key (cached,
//! refreshed before they expire, never failing a request while the old
//! one is valid), a `RESOURCE_EXHAUSTED` 429 throttled and retried, and a
//! token endpoint that is down failing the attempt as `credentials`.

mod support;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);
const KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../levee-mock/testdata/vertex-test-service-account.json"
);
const MODEL: &str = "claude-sonnet-4@20250514";
const ANTHROPIC: &[(&str, &str)] = &[("anthropic-version", "2023-06-01")];

fn message(stream: bool) -> String {
    format!(
        r#"{{"model":"{MODEL}","max_tokens":32,"stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

/// One Vertex provider (`api`) on the mock, its tokens from `token_url`.
fn config(api: &str, token_url: &str) -> String {
    format!(
        "providers:\n  vx: {{ api: {api}, region: us-east5, project: levee-test, base_url: \"{{mock0}}\", credentials_file: \"{KEY}\", token_url: \"{token_url}\" }}\nroutes:\n  - targets: [vx]\n"
    )
}

fn vertex(faults: &str) -> Local {
    local(&[faults], &config("vertex", "{mock0}/token"))
}

async fn post(env: &Local, path: &str, body: &str) -> Resp {
    watchdog(WATCHDOG, env.post(path, body, ANTHROPIC)).await
}

#[tokio::test(start_paused = true)]
async fn a_message_and_a_stream_go_through_raw_predict_with_one_token() {
    let env = vertex("faults: []");
    let r = post(&env, "/v1/messages", &message(false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "vx");
    assert_eq!(r.json()["type"], "message");
    assert_eq!(r.json()["model"], MODEL);
    let output = |m: &str| metric(m, "levee_tokens_total", &["kind=\"output\""]);
    let after_json = output(&env.metrics());
    assert!(after_json > 0.0, "rawPredict's usage is counted");
    let r = post(&env, "/v1/messages", &message(true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").starts_with("text/event-stream"));
    assert!(r.text().contains("event: message_stop"), "{}", r.text());
    assert!(
        output(&env.metrics()) > after_json,
        "and streamRawPredict's"
    );
    let s = env.stats(0);
    // One token for both: it is cached.
    assert_eq!((s.tokens_issued, s.unauthorized), (1, 0), "{s:?}");
    assert_eq!(s.by_path.get("/v1/messages"), Some(&2), "{s:?}");
    assert_eq!(s.by_model.get(MODEL), Some(&2), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn tool_use_and_a_token_count_go_through() {
    let env = vertex("faults: []");
    let body = format!(
        r#"{{"model":"{MODEL}","max_tokens":64,"tools":[{{"name":"get_weather","description":"Weather","input_schema":{{"type":"object","properties":{{"city":{{"type":"string"}}}}}}}}],"tool_choice":{{"type":"tool","name":"get_weather"}},"messages":[{{"role":"user","content":"Weather in Paris?"}}]}}"#
    );
    let r = post(&env, "/v1/messages", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let content = r.json()["content"].clone();
    assert!(
        content.as_array().is_some_and(|c| c
            .iter()
            .any(|b| b["type"] == "tool_use" && b["name"] == "get_weather")),
        "{content}"
    );
    assert_eq!(r.json()["stop_reason"], "tool_use");
    let count = format!(r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"hi"}}]}}"#);
    let r = post(&env, "/v1/messages/count_tokens", &count).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["input_tokens"].is_u64(), "{}", r.text());
}

#[tokio::test(start_paused = true)]
async fn a_resource_exhausted_429_is_a_throttle_and_is_retried() {
    let env = vertex("faults:\n  - { status: 429, retry_after: 1, to: 500ms }\n");
    let r = post(&env, "/v1/messages", &message(false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "2");
    let m = env.metrics();
    assert_eq!(attempts_labelled(&m, "throttled"), 1.0, "{m}");
    let s = env.stats(0);
    assert_eq!(s.by_status.get("429"), Some(&1), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn googles_error_shape_reaches_the_caller_in_its_own_dialect() {
    // Throttled on every attempt: the caller gets Anthropic's rate_limit_error.
    let env = vertex("faults:\n  - { status: 429 }\n");
    let r = post(&env, "/v1/messages", &message(false)).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["type"], "error", "{}", r.text());
    assert_eq!(
        r.json()["error"]["type"],
        "rate_limit_error",
        "{}",
        r.text()
    );
    assert!(r.text().contains("RESOURCE_EXHAUSTED"), "{}", r.text());
    // An invalid request (Google's 400 INVALID_ARGUMENT) is permanent: one attempt.
    let env = vertex("faults: []");
    let body = format!(r#"{{"model":"{MODEL}","messages":[]}}"#);
    let r = post(&env, "/v1/messages", &body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["type"],
        "invalid_request_error",
        "{}",
        r.text()
    );
    assert_eq!(r.header("x-levee-attempts"), "1");
}

#[tokio::test(start_paused = true)]
async fn gemini_goes_through_the_openai_compatible_endpoint() {
    let env = local(&["faults: []"], &config("vertex-openai", "{mock0}/token"));
    let chat = r#"{"model":"google/gemini-2.0-flash","messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", chat, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["object"], "chat.completion");
    let stream = r#"{"model":"google/gemini-2.0-flash","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", stream, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("data: [DONE]"), "{}", r.text());
    let s = env.stats(0);
    assert_eq!(s.by_path.get("/v1/chat/completions"), Some(&2), "{s:?}");
    assert_eq!(s.by_model.get("google/gemini-2.0-flash"), Some(&2), "{s:?}");
    assert_eq!((s.tokens_issued, s.unauthorized), (1, 0), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn an_access_token_from_api_key_env_is_sent_as_a_bearer_token() {
    let mock = levee_mock::InProcess::new(levee_mock::MockOptions {
        api: levee_mock::MockApi::Vertex,
        ..Default::default()
    });
    // A token from the mock's endpoint, as `gcloud auth print-access-token`
    // would give one.
    let token = watchdog(WATCHDOG, mock_token(&mock)).await;
    std::env::set_var("LEVEE_TEST_VERTEX_TOKEN", &token);
    let env = local_with(
        vec![mock],
        "providers:\n  vx: { api: vertex, region: us-east5, project: levee-test, base_url: \"{mock0}\", api_key_env: LEVEE_TEST_VERTEX_TOKEN }\nroutes:\n  - targets: [vx]\n",
    );
    let r = post(&env, "/v1/messages", &message(false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = env.stats(0);
    assert_eq!((s.tokens_issued, s.unauthorized), (1, 0), "{s:?}");
}

/// A token from `mock`'s `/token` for the test key (a JWT bearer grant
/// made here, as any client of Google's token endpoint makes it).
async fn mock_token(mock: &levee_mock::InProcess) -> String {
    use http_body_util::BodyExt;
    let key: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(KEY).unwrap()).unwrap();
    #[allow(clippy::disallowed_methods)] // the assertion's iat is wall-clock time
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = serde_json::json!({
        "iss": key["client_email"], "aud": "http://tokens.localhost/token",
        "scope": "https://www.googleapis.com/auth/cloud-platform", "iat": now, "exp": now + 3600,
    });
    let jwt = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_rsa_pem(key["private_key"].as_str().unwrap().as_bytes())
            .unwrap(),
    )
    .unwrap();
    let (dial, _) = switched_token_endpoint(mock.clone());
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(levee_gateway::transport::Connector::Memory(dial));
    let form =
        format!("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={jwt}");
    let req = http::Request::post("http://tokens.localhost/token")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(http_body_util::Full::new(bytes::Bytes::from(form)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["access_token"].as_str().unwrap().to_string()
}

/// The token endpoint `tokens.localhost`, reached through a switch: while it is
/// off, connections to it fail as a host that is down does.
fn switched_token_endpoint(
    mock: levee_mock::InProcess,
) -> (levee_gateway::transport::Dial, Arc<AtomicBool>) {
    let up = Arc::new(AtomicBool::new(true));
    let on = Arc::clone(&up);
    let dial: levee_gateway::transport::Dial = Arc::new(move |uri: &http::Uri| {
        (uri.host() == Some("tokens.localhost") && on.load(Ordering::SeqCst))
            .then(|| mock.connect())
    });
    (dial, up)
}

#[tokio::test(start_paused = true)]
async fn a_token_that_expires_mid_run_is_refreshed_without_a_failed_request() {
    let mock = levee_mock::InProcess::new(levee_mock::MockOptions {
        api: levee_mock::MockApi::Vertex,
        ..Default::default()
    });
    // Ten minutes: refreshed from its last minute on (a tenth of its life).
    mock.set_token_lifetime(Duration::from_secs(600));
    let (dial, up) = switched_token_endpoint(mock.clone());
    let env = local_dial(
        vec![mock],
        &config("vertex", "http://tokens.localhost/token"),
        dial,
    );
    let ok = |r: &Resp, when: &str| assert_eq!(r.status, 200, "{when}: {}", r.text());
    ok(&post(&env, "/v1/messages", &message(false)).await, "first");
    assert_eq!(env.stats(0).tokens_issued, 1);

    // Inside the last minute the refresh is due; the token endpoint is down,
    // and requests still go out with the valid token.
    up.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(550)).await;
    for i in 0..3 {
        ok(
            &post(&env, "/v1/messages", &message(false)).await,
            &format!("due, endpoint down, #{i}"),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(env.stats(0).tokens_issued, 1);

    // The endpoint is back: the next request's background refresh gets a
    // new token before the old one expires, and everything after uses it.
    up.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(15)).await;
    ok(
        &post(&env, "/v1/messages", &message(false)).await,
        "due, endpoint up",
    );
    until(WATCHDOG, "the background refresh", || {
        env.stats(0).tokens_issued == 2
    })
    .await;
    // Past the first token's expiry, and through two more lifetimes, a
    // request a minute: none is refused.
    for minute in 0..25 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        ok(
            &post(&env, "/v1/messages", &message(minute % 2 == 1)).await,
            &format!("minute {minute}"),
        );
    }
    let s = env.stats(0);
    assert_eq!(s.unauthorized, 0, "{s:?}");
    assert!(s.tokens_issued >= 4, "{s:?}");
    let m = env.metrics();
    assert_eq!(attempts_labelled(&m, "credentials"), 0.0, "{m}");
}

#[tokio::test(start_paused = true)]
async fn concurrent_first_requests_share_one_token_request() {
    let env = vertex("faults: []");
    let body = message(false);
    let requests: Vec<_> = (0..8)
        .map(|_| env.post("/v1/messages", &body, ANTHROPIC))
        .collect();
    let answers = watchdog(WATCHDOG, futures_util::future::join_all(requests)).await;
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(env.stats(0).tokens_issued, 1);
}

#[tokio::test(start_paused = true)]
async fn a_token_endpoint_that_is_down_fails_the_attempt_as_credentials_without_secrets() {
    let mock = levee_mock::InProcess::new(levee_mock::MockOptions {
        api: levee_mock::MockApi::Vertex,
        ..Default::default()
    });
    let (dial, up) = switched_token_endpoint(mock.clone());
    up.store(false, Ordering::SeqCst);
    let env = local_dial(
        vec![mock],
        &config("vertex", "http://tokens.localhost/token"),
        dial,
    );
    let r = post(&env, "/v1/messages", &message(false)).await;
    assert!(r.status >= 500, "{} {}", r.status, r.text());
    let m = env.metrics();
    assert!(attempts_labelled(&m, "credentials") >= 1.0, "{m}");
    // Nothing reached the model without a token.
    let s = env.stats(0);
    assert_eq!((s.requests_total, s.unauthorized), (0, 0), "{s:?}");
    let key = std::fs::read_to_string(KEY).unwrap();
    let pem: serde_json::Value = serde_json::from_str(&key).unwrap();
    let private = pem["private_key"].as_str().unwrap();
    let a_line = private.lines().nth(5).unwrap();
    for text in [r.text(), m] {
        assert!(
            !text.contains(a_line) && !text.contains("PRIVATE KEY"),
            "{text}"
        );
        assert!(!text.contains("ya29."), "{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn requests_waiting_on_a_token_endpoint_that_does_not_answer_share_its_failure() {
    let mock = levee_mock::InProcess::new(levee_mock::MockOptions {
        api: levee_mock::MockApi::Vertex,
        ..Default::default()
    });
    // Connections to `tokens.localhost` open and are never answered.
    let dials = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (counted, kept) = (Arc::clone(&dials), Arc::clone(&held));
    let dial: levee_gateway::transport::Dial = Arc::new(move |uri: &http::Uri| {
        (uri.host() == Some("tokens.localhost")).then(|| {
            counted.fetch_add(1, Ordering::SeqCst);
            let (client, server) = tokio::io::duplex(1024);
            kept.lock().unwrap().push(server);
            client
        })
    });
    let config = format!(
        "{}    retry: {{ max_attempts: 1 }}\n    deadline: {{ default: 60s, max: 60s }}\n",
        config("vertex", "http://tokens.localhost/token")
    );
    let env = local_dial(vec![mock], &config, dial);
    let t = paused_now();
    let body = message(false);
    let requests: Vec<_> = (0..4)
        .map(|_| env.post("/v1/messages", &body, ANTHROPIC))
        .collect();
    let answers = watchdog(WATCHDOG, futures_util::future::join_all(requests)).await;
    for r in &answers {
        assert!(r.status >= 500, "{} {}", r.status, r.text());
    }
    // One token request, its 10 s timeout shared by all four.
    assert_eq!(dials.load(Ordering::SeqCst), 1);
    assert!(t.elapsed() < Duration::from_secs(11), "{:?}", t.elapsed());
    let m = env.metrics();
    assert_eq!(attempts_labelled(&m, "credentials"), 4.0, "{m}");
}

#[tokio::test(start_paused = true)]
async fn anthropic_overloaded_then_bedrock_throttled_is_answered_by_claude_on_vertex() {
    use levee_mock::bedrock_keys::{TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY};
    let dir = std::env::temp_dir().join(format!("levee-vertex-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let aws = dir.join("credentials");
    std::fs::write(
        &aws,
        format!("[default]\naws_access_key_id = {TEST_ACCESS_KEY_ID}\naws_secret_access_key = {TEST_SECRET_ACCESS_KEY}\n"),
    )
    .unwrap();
    std::env::set_var("LEVEE_TEST_VERTEX_ANTHROPIC_KEY", "sk-ant-failover-0002");
    let text = format!(
        "providers:\n  anthropic: {{ api: anthropic, base_url: \"{{mock0}}\", api_key_env: LEVEE_TEST_VERTEX_ANTHROPIC_KEY }}\n  bedrock: {{ api: bedrock, base_url: \"{{mock1}}\", region: us-east-1, credentials_file: \"{}\" }}\n  vertex: {{ api: vertex, region: us-east5, project: levee-test, base_url: \"{{mock2}}\", credentials_file: \"{KEY}\", token_url: \"{{mock2}}/token\" }}\nroutes:\n  - targets:\n      - {{ provider: anthropic }}\n      - {{ provider: bedrock, model: \"anthropic.claude-sonnet-4-20250514-v1:0\" }}\n      - {{ provider: vertex, model: \"{MODEL}\" }}\n",
        aws.display()
    );
    let env = local(
        &[
            "faults:\n  - { status: 529 }\n",
            "faults:\n  - { status: 429 }\n",
            "faults: []",
        ],
        &text,
    );
    let body = r#"{"model":"claude-sonnet-4","max_tokens":32,"messages":[{"role":"user","content":"hi"}]}"#;
    let stream = r#"{"model":"claude-sonnet-4","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    for b in [body, stream] {
        let r = post(&env, "/v1/messages", b).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-levee-target"), "vertex");
    }
    assert!(env.stats(0).by_status.get("529").is_some_and(|n| *n >= 2));
    assert!(env.stats(1).by_status.get("429").is_some_and(|n| *n >= 2));
    assert_eq!(env.stats(2).by_model.get(MODEL), Some(&2));
    let metrics = env.metrics();
    let per = |p: &str, result: &str| attempts_of(&metrics, p, result);
    assert!(per("anthropic", "http_5xx") >= 2.0, "{metrics}");
    assert!(per("bedrock", "throttled") >= 2.0, "{metrics}");
    assert_eq!(per("vertex", "success"), 2.0, "{metrics}");
    let page = env.app.status_page();
    for name in ["anthropic", "bedrock", "vertex"] {
        assert!(
            page.contains(&format!("data-provider=\"{name}\"")),
            "{page}"
        );
    }
    // The recent fallbacks name each step and why.
    let fallbacks = &page[page.find("id=\"fallbacks\"").unwrap()..];
    for (reason, to) in [
        (
            "http_5xx",
            "bedrock (anthropic.claude-sonnet-4-20250514-v1:0)",
        ),
        ("throttled", "vertex (claude-sonnet-4@20250514)"),
    ] {
        let row = format!("<tr data-reason=\"{reason}\"><td class=\"num\">");
        let named = fallbacks
            .split(row.as_str())
            .skip(1)
            .any(|r| r.contains(&format!("<td>{to}</td>")));
        assert!(named, "{reason} -> {to}: {fallbacks}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
