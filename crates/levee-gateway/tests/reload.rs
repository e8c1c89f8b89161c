//! Config reload: a valid file serves new requests, an invalid one is
//! refused while the running config keeps serving, a request in flight
//! finishes under the config it started with, and a provider whose definition
//! did not change keeps its breaker.

mod support;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(20);

const HEAD: &str = "listen: 127.0.0.1:0\nadmin: { listen: 127.0.0.1:0 }\nshutdown_grace: 5s\n";

/// Writes `config` (with `{mockN}` replaced) to a file of its own.
fn write_config(env: &Env, name: &str, config: &str) -> PathBuf {
    let mut text = format!("{HEAD}{config}");
    for (i, m) in env.mocks.iter().enumerate() {
        text = text.replace(&format!("{{mock{i}}}"), &m.url());
    }
    let dir = std::env::temp_dir().join(format!("levee-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn reload(env: &Env, path: &Path) -> Result<(), String> {
    env.gw
        .reloader
        .reload_file(path, |_| Ok(()))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

const TO_A: &str = "providers:\n  a: { api: openai, base_url: \"{mock0}\" }\n  b: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - targets: [a]\n    retry: { max_attempts: 1 }\n";
const TO_B: &str = "providers:\n  a: { api: openai, base_url: \"{mock0}\" }\n  b: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - targets: [b]\n    retry: { max_attempts: 1 }\n";

/// `levee_config_reloads_total{result="RESULT"}` in the metrics text `m`.
fn reloads(m: &str, result: &str) -> f64 {
    metric(
        m,
        "levee_config_reloads_total",
        &[&format!("result=\"{result}\"")],
    )
}

#[tokio::test]
async fn a_valid_reload_serves_new_requests_with_the_new_config() {
    let env = start(&["faults: []", "faults: []"], TO_A).await;
    let r = env.chat().await;
    assert_eq!(r.header("x-levee-target"), "a");
    let before = env.admin("/readyz").await.text();
    assert!(before.contains("generation 1"), "{before}");

    let path = write_config(&env, "valid", TO_B);
    reload(&env, &path).expect("a valid file is accepted");

    // The same client (its pooled keep-alive connection kept) now reaches b.
    let r = env.chat().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "b");
    assert_eq!(env.stats(0).requests_total, 1);
    assert_eq!(env.stats(1).requests_total, 1);
    let after = env.admin("/readyz").await.text();
    let hash = levee_gateway::reload::hash_of(&std::fs::read(&path).unwrap());
    assert!(
        after.contains(&format!("config {hash} generation 2")),
        "{after}"
    );
    assert!(env.admin("/").await.text().contains(&hash));
    let m = env.metrics().await;
    assert_eq!(reloads(&m, "ok"), 1.0);
    env.stop().await;
}

#[tokio::test]
async fn an_invalid_reload_is_refused_and_the_running_config_keeps_serving() {
    let env = start(&["faults: []", "faults: []"], TO_A).await;
    let bad_yaml = write_config(&env, "bad-yaml", "routes: [ { targets: [b] \n");
    let unknown = write_config(
        &env,
        "unknown-provider",
        "providers:\n  a: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [nowhere]\n",
    );
    let missing_key = write_config(
        &env,
        "missing-key",
        "providers:\n  b: { api: openai, base_url: \"{mock1}\", api_key_env: LEVEE_RELOAD_TEST_UNSET_KEY }\nroutes:\n  - targets: [b]\n",
    );
    for path in [&bad_yaml, &unknown, &missing_key] {
        let e = reload(&env, path).expect_err("refused");
        assert!(e.contains("running config is kept"), "{e}");
    }
    assert!(reload(&env, &PathBuf::from("/nonexistent/levee.yaml")).is_err());
    let e = reload(&env, &missing_key).unwrap_err();
    assert!(e.contains("LEVEE_RELOAD_TEST_UNSET_KEY"), "{e}");

    let r = env.chat().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "a", "the old config serves");
    assert_eq!(env.stats(1).requests_total, 0);
    assert!(env.admin("/readyz").await.text().contains("generation 1"));
    let m = env.metrics().await;
    assert_eq!(reloads(&m, "error"), 5.0);
    assert_eq!(reloads(&m, "ok"), 0.0);
    env.stop().await;
}

#[tokio::test]
async fn a_stream_in_flight_finishes_under_the_config_it_started_with() {
    // Six chunks 150 ms apart: the reload lands in the middle of the stream.
    let env = start(
        &["faults:\n  - { chunk_delay: 150ms }\n", "faults: []"],
        TO_A,
    )
    .await;
    let client = env.client.clone();
    let url = env.url("/v1/chat/completions");
    let inflight = tokio::spawn(async move {
        let req = http::Request::post(url)
            .header("content-type", "application/json")
            .header("x-timeout-ms", "30000")
            .body(http_body_util::Full::new(bytes::Bytes::from(CHAT_STREAM)))
            .unwrap();
        let resp = client.request(req).await.expect("answers");
        let target = resp.headers()["x-levee-target"]
            .to_str()
            .unwrap()
            .to_string();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        (target, String::from_utf8_lossy(&body).into_owned())
    });
    watchdog(WATCHDOG, async {
        while env.stats(0).in_flight < 1 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    // The new config drops provider a altogether and moves the route to b.
    let path = write_config(
        &env,
        "in-flight",
        "providers:\n  b: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - targets: [b]\n    retry: { max_attempts: 1 }\n",
    );
    reload(&env, &path).expect("accepted");
    assert_eq!(env.stats(0).in_flight, 1, "the stream is still running");
    let r = env.chat().await;
    assert_eq!(
        r.header("x-levee-target"),
        "b",
        "a new request uses the new config"
    );

    let (target, body) = watchdog(WATCHDOG, inflight).await.unwrap();
    assert_eq!(target, "a");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    assert!(!body.contains("error"), "the stream was not cut: {body}");
    let m = env.metrics().await;
    assert_eq!(
        metric(&m, "levee_requests_total", &["outcome=\"success\""]),
        2.0,
        "{m}"
    );
    env.stop().await;
}

#[tokio::test]
async fn a_provider_whose_definition_did_not_change_keeps_its_open_breaker() {
    let a = "  a: { api: openai, base_url: \"{mock0}\", circuit_breaker: { min_requests: 2, open_for: 10m } }\n";
    let env = start(
        &["faults:\n  - { status: 503 }\n", "faults: []"],
        &format!("providers:\n{a}routes:\n  - targets: [a]\n    retry: {{ max_attempts: 1 }}\n"),
    )
    .await;
    for _ in 0..2 {
        assert_eq!(env.chat().await.status, 503);
    }
    let r = env.chat().await;
    assert_eq!(r.header("x-levee-reason"), "circuit_open", "{}", r.text());
    let sent = env.stats(0).requests_total;

    // A new provider and a new route; a's block and its route are as before.
    let path = write_config(
        &env,
        "unchanged-a",
        &format!("providers:\n{a}  b: {{ api: openai, base_url: \"{{mock1}}\" }}\nroutes:\n  - targets: [a]\n    retry: {{ max_attempts: 1 }}\n  - match: {{ model_prefix: \"b/\" }}\n    targets: [b]\n"),
    );
    reload(&env, &path).expect("accepted");
    let r = env.chat().await;
    assert_eq!(r.header("x-levee-reason"), "circuit_open", "{}", r.text());
    assert_eq!(env.stats(0).requests_total, sent, "nothing reached a");

    // Changing a's definition gives it fresh state: its breaker starts closed.
    let changed = a.replace("open_for: 10m", "open_for: 9m");
    let path = write_config(
        &env,
        "changed-a",
        &format!(
            "providers:\n{changed}routes:\n  - targets: [a]\n    retry: {{ max_attempts: 1 }}\n"
        ),
    );
    reload(&env, &path).expect("accepted");
    let r = env.chat().await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-levee-reason"), "upstream_error", "{}", r.text());
    assert_eq!(env.stats(0).requests_total, sent + 1);
    env.stop().await;
}
