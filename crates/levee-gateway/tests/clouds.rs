//! The failover most asked for, across clouds: Anthropic's own API, then
//! Claude on Amazon Bedrock, then Claude on Google Vertex AI, one route in
//! one dialect, each target naming its cloud's model ID. An Anthropic 529
//! storm is answered by Bedrock; with Bedrock throttled too, by Vertex; the
//! metrics and the status page name each provider.

mod support;
use std::path::PathBuf;
use std::time::Duration;

use levee_mock::bedrock_keys::{TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY};
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);
const VERTEX_KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../levee-mock/testdata/vertex-test-service-account.json"
);
const BODY: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
const STREAM: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// The AWS shared credentials file for the Bedrock target, removed on drop.
struct Credentials(PathBuf);

impl Credentials {
    fn new(test: &str) -> Credentials {
        let dir = std::env::temp_dir().join(format!("levee-clouds-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("credentials");
        std::fs::write(
            &path,
            format!("[default]\naws_access_key_id = {TEST_ACCESS_KEY_ID}\naws_secret_access_key = {TEST_SECRET_ACCESS_KEY}\n"),
        )
        .unwrap();
        Credentials(dir)
    }
}

impl Drop for Credentials {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(creds: &Credentials) -> String {
    std::env::set_var("LEVEE_TEST_CLOUDS_ANTHROPIC_KEY", "sk-ant-clouds-0001");
    format!(
        "providers:
  anthropic: {{ api: anthropic, base_url: \"{{mock0}}\", api_key_env: LEVEE_TEST_CLOUDS_ANTHROPIC_KEY }}
  bedrock: {{ api: bedrock, base_url: \"{{mock1}}\", region: us-east-1, credentials_file: \"{}\" }}
  vertex: {{ api: vertex, base_url: \"{{mock2}}\", region: us-east5, project: levee-test, credentials_file: \"{VERTEX_KEY}\", token_url: \"{{mock2}}/token\" }}
routes:
  - match: {{ model_prefix: \"claude-\" }}
    targets:
      - anthropic
      - {{ provider: bedrock, model: \"us.anthropic.claude-sonnet-4-5-20250929-v1:0\" }}
      - {{ provider: vertex, model: \"claude-sonnet-4-5@20250929\" }}
",
        creds.0.join("credentials").display()
    )
}

async fn messages(env: &Local, body: &str) -> Resp {
    let headers = [("anthropic-version", "2023-06-01")];
    watchdog(WATCHDOG, env.post("/v1/messages", body, &headers)).await
}

fn attempts(metrics: &str, provider: &str, result: &str) -> f64 {
    metric(
        metrics,
        "levee_upstream_attempts_total",
        &[
            &format!("provider=\"{provider}\""),
            &format!("result=\"{result}\""),
        ],
    )
}

#[tokio::test(start_paused = true)]
async fn an_anthropic_storm_is_answered_by_bedrock_and_a_throttled_bedrock_by_vertex() {
    let creds = Credentials::new("three-way");
    let storm = "faults:\n  - { status: 529 }\n";
    // Bedrock throttled for 20 s with a wait longer than Levee holds a request.
    let throttled = "faults:\n  - { status: 429, retry_after: 120, from: 10s, to: 30s }\n";
    let env = local(&[storm, throttled, "faults: []"], &config(&creds));

    // The primary's storm: Claude on Bedrock answers, JSON and stream.
    for body in [BODY, STREAM] {
        let r = messages(&env, body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-levee-target"), "bedrock");
    }
    assert_eq!(env.stats(2).requests_total, 0, "Vertex not needed yet");

    // Bedrock throttled as well: Vertex answers.
    tokio::time::sleep(Duration::from_secs(12)).await;
    for body in [BODY, STREAM] {
        let r = messages(&env, body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-levee-target"), "vertex");
    }
    let vertex = env.stats(2);
    assert_eq!(
        vertex.by_model.get("claude-sonnet-4-5@20250929"),
        Some(&2),
        "{vertex:?}"
    );
    assert_eq!(vertex.unauthorized, 0);

    let m = env.metrics();
    assert!(attempts(&m, "anthropic", "http_5xx") >= 4.0, "{m}");
    assert_eq!(attempts(&m, "bedrock", "success"), 2.0, "{m}");
    assert!(attempts(&m, "bedrock", "throttled") >= 1.0, "{m}");
    assert_eq!(attempts(&m, "vertex", "success"), 2.0, "{m}");

    // The status page names each provider.
    let page = levee_gateway::status::render(env.app.shared());
    for p in ["anthropic", "bedrock", "vertex"] {
        assert!(
            page.contains(&format!("data-provider=\"{p}\"")),
            "{p} missing"
        );
    }
}
