//! Azure OpenAI targets through the in-process gateway against the strict
//! Azure mock (`levee mock --api azure`): both URL shapes, the `api-key`
//! and a token file read again when it changes, Azure's 429 with
//! `retry-after-ms` retried, and a content-filter 400 never retried.

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);
const CHAT: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;

fn config(extra: &str) -> String {
    format!(
        "providers:\n  az: {{ api: azure, base_url: \"{{mock0}}\"{extra} }}\nroutes:\n  - targets: [az]\n"
    )
}

async fn chat(env: &Local, body: &str) -> Resp {
    watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &[])).await
}

#[tokio::test(start_paused = true)]
async fn the_v1_api_is_served_with_the_api_key() {
    std::env::set_var("LEVEE_TEST_AZURE_KEY", "az-secret-1");
    let env = local(
        &["faults: []"],
        &config(", api_key_env: LEVEE_TEST_AZURE_KEY"),
    );
    let r = chat(&env, CHAT).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "az");
    let m = env.metrics();
    assert!(
        metric(&m, "levee_tokens_total", &["kind=\"output\""]) > 0.0,
        "{m}"
    );
    let s = env.stats(0);
    assert_eq!((s.requests_total, s.unauthorized), (1, 0));
    assert_eq!(s.by_path.get("/v1/chat/completions"), Some(&1), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn without_a_key_or_an_identity_nothing_is_sent_and_the_answer_says_why() {
    // No `api_key_env`, no `token_file`: the environment's managed
    // identity is asked for a token (here, no metadata service answers),
    // and the resource is never sent a request without credentials.
    let env = local(&["faults: []"], &config(""));
    let r = chat(&env, CHAT).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "credentials_unavailable");
    let s = env.stats(0);
    assert_eq!((s.requests_total, s.unauthorized), (0, 0), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn a_deployment_is_named_by_the_model_and_carries_the_api_version() {
    std::env::set_var("LEVEE_TEST_AZURE_KEY", "az-secret-1");
    let env = local(
        &["faults: []"],
        &config(", api_key_env: LEVEE_TEST_AZURE_KEY, api_version: \"2024-10-21\""),
    );
    let r = chat(&env, CHAT).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Streams too: the first event commits, the rest is relayed.
    let body = r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = chat(&env, body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("data: [DONE]"), "{}", r.text());
    let s = env.stats(0);
    assert_eq!((s.requests_total, s.unauthorized), (2, 0), "{s:?}");
    assert_eq!(s.by_model.get("gpt-4o"), Some(&2), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn an_entra_token_file_is_read_again_when_it_changes() {
    let dir = std::env::temp_dir().join(format!("levee-azure-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "entra-token-one").unwrap();
    let env = local(
        &["faults: []"],
        &config(&format!(", token_file: \"{}\"", file.display())),
    );
    assert_eq!(chat(&env, CHAT).await.status, 200);
    std::fs::write(&file, "").unwrap();
    // An empty file: the attempt cannot be authorised, and says so.
    let r = chat(&env, CHAT).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "credentials_unavailable");
    assert!(
        attempts_labelled(&env.metrics(), "credentials") >= 1.0,
        "{}",
        env.metrics()
    );
    std::fs::write(&file, "entra-token-two").unwrap();
    assert_eq!(chat(&env, CHAT).await.status, 200);
    assert_eq!(env.stats(0).requests_total, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(start_paused = true)]
async fn azures_429_is_retried_after_its_retry_after_ms() {
    std::env::set_var("LEVEE_TEST_AZURE_KEY", "az-secret-1");
    let faults = "faults:\n  - { status: 429, retry_after: 1, to: 500ms }\n";
    let env = local(&[faults], &config(", api_key_env: LEVEE_TEST_AZURE_KEY"));
    let r = chat(&env, CHAT).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "2");
}
