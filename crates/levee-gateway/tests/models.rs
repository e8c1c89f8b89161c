//! `GET /v1/models` and `GET /v1/models/{id}` through the in-process
//! gateway against strict one-dialect mocks: the list holds the names a
//! caller can send (each route's configured models and its primary
//! provider's own list, with the route's prefix), in the caller's dialect,
//! fetched from the providers with a cache, and a provider that fails is
//! left out.

mod support;
use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(20);
const ANTHROPIC_VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

/// An OpenAI provider (mock0) and an Anthropic one (mock1); a route per
/// prefix (one with an OpenAI fallback model, one with a fixed model), an
/// exact name, and a default route to OpenAI.
const CONFIG: &str = "providers:\n  oa: { api: openai, base_url: \"{mock0}\" }\n  an: { api: anthropic, base_url: \"{mock1}\" }\nroutes:\n  - match: { model_prefix: \"claude/\" }\n    targets: [an, { provider: oa, model: gpt-4.1 }]\n  - match: { model_prefix: \"fast\" }\n    targets: [{ provider: oa, model: gpt-4o-mini }]\n  - match: { models: [house-model] }\n    targets: [{ provider: oa, model: gpt-4o }]\n  - targets: [oa]\n";

async fn get(env: &Local, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut b = http::Request::get(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::new())).unwrap();
    watchdog(WATCHDOG, async {
        Resp::read(env.app.call(req).await).await
    })
    .await
}

fn ids(v: &Value) -> Vec<String> {
    v["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {v}"))
        .iter()
        .map(|m| m["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// How often the mock was asked for its model list.
fn lists_asked(env: &Local, i: usize) -> u64 {
    env.stats(i).by_path.get("/v1/models").copied().unwrap_or(0)
}

#[tokio::test(start_paused = true)]
async fn the_list_names_models_a_caller_can_send_and_each_one_is_carried() {
    let env = local(&["faults: []", "faults: []"], CONFIG);
    let r = get(&env, "/v1/models", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "list");
    let listed = ids(&v);
    for want in [
        "claude/claude-sonnet-4-5",
        "claude/claude-haiku-4-5",
        "fast/gpt-4o-mini",
        "house-model",
        "gpt-4.1",
        "text-embedding-3-small",
    ] {
        assert!(listed.iter().any(|id| id == want), "{want} in {listed:?}");
    }
    // A fallback's model is not listed under its primary's prefix: asked
    // for, `claude/gpt-4.1` would go to Anthropic as `gpt-4.1`.
    assert!(
        !listed
            .iter()
            .any(|id| id == "claude/gpt-4.1" || id == "fastgpt-4o-mini"),
        "{listed:?}"
    );
    assert!(
        !listed
            .iter()
            .any(|id| id == "claude/" || id == "fast" || id == "default"),
        "a route's prefix or name is not a model: {listed:?}"
    );
    for m in v["data"].as_array().unwrap() {
        assert_eq!(m["object"], "model", "{m}");
        assert!(m["created"].is_i64() && m["owned_by"].is_string(), "{m}");
    }
    // Every name listed is carried: a chat request naming it is answered.
    for id in listed.iter().filter(|id| !id.contains("embedding")) {
        let body = format!(r#"{{"model":"{id}","messages":[{{"role":"user","content":"hi"}}]}}"#);
        let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", &body, &[])).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
    }
}

#[tokio::test(start_paused = true)]
async fn an_anthropic_caller_gets_anthropics_list_shape_and_pages() {
    let env = local(&["faults: []", "faults: []"], CONFIG);
    let r = get(&env, "/v1/models", &[ANTHROPIC_VERSION]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(v.get("object").is_none(), "{v}");
    let listed = ids(&v);
    assert_eq!(v["has_more"], false);
    assert_eq!(v["first_id"].as_str(), listed.first().map(String::as_str));
    assert_eq!(v["last_id"].as_str(), listed.last().map(String::as_str));
    let claude = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "claude/claude-sonnet-4-5")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(claude["type"], "model");
    assert_eq!(claude["display_name"], "claude-sonnet-4-5");
    assert_eq!(claude["created_at"], "2025-01-01T00:00:00Z");
    assert_eq!(claude["lifecycle"], "active");
    let fixed = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "fast/gpt-4o-mini")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(fixed["display_name"], "gpt-4o-mini");
    // A page at a time, as Anthropic's SDK asks.
    let first = get(&env, "/v1/models?limit=2", &[ANTHROPIC_VERSION])
        .await
        .json();
    assert_eq!(ids(&first), listed[..2]);
    assert_eq!(first["has_more"], true);
    let after = format!("/v1/models?limit=2&after_id={}", listed[1]);
    let next = get(&env, &after, &[ANTHROPIC_VERSION]).await.json();
    assert_eq!(ids(&next), listed[2..4]);
    let r = get(&env, "/v1/models?limit=0", &[ANTHROPIC_VERSION]).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["type"], "error");
}

#[tokio::test(start_paused = true)]
async fn one_model_is_retrieved_and_an_unknown_one_is_404_in_the_callers_dialect() {
    let env = local(&["faults: []", "faults: []"], CONFIG);
    let r = get(&env, "/v1/models/gpt-4.1", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["id"], "gpt-4.1");
    assert_eq!(r.json()["object"], "model");
    // The SDKs escape a `/` inside the id.
    let r = get(
        &env,
        "/v1/models/claude%2Fclaude-haiku-4-5",
        &[ANTHROPIC_VERSION],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["type"], "model");
    assert_eq!(r.json()["id"], "claude/claude-haiku-4-5");
    let r = get(&env, "/v1/models/claude/claude-haiku-4-5", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());

    let r = get(&env, "/v1/models/nope", &[]).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    let r = get(&env, "/v1/models/nope", &[ANTHROPIC_VERSION]).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    // A route's prefix is no model.
    assert_eq!(get(&env, "/v1/models/claude%2F", &[]).await.status, 404);
}

#[tokio::test(start_paused = true)]
async fn provider_lists_are_kept_a_minute_and_a_failing_provider_is_left_out() {
    let env = local(&["faults: []", "faults:\n  - { status: 500 }\n"], CONFIG);
    let r = get(&env, "/v1/models", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let listed = ids(&r.json());
    assert!(listed.iter().any(|id| id == "gpt-4.1"), "{listed:?}");
    assert!(
        !listed.iter().any(|id| id.starts_with("claude/")),
        "the failing provider is left out: {listed:?}"
    );
    assert_eq!((lists_asked(&env, 0), lists_asked(&env, 1)), (1, 1));
    // Asked again within the minute: from the cache (the failed provider
    // too, for its shorter while).
    get(&env, "/v1/models", &[]).await;
    get(&env, "/v1/models/gpt-4.1", &[]).await;
    assert_eq!((lists_asked(&env, 0), lists_asked(&env, 1)), (1, 1));
    // The failed provider recovers and is asked again after 10 s; the
    // good one's list is still fresh.
    env.mocks[1].set_faults(levee_mock::parse_faults("faults: []").unwrap());
    tokio::time::sleep(Duration::from_secs(11)).await;
    let listed = ids(&get(&env, "/v1/models", &[]).await.json());
    assert!(
        listed.iter().any(|id| id.starts_with("claude/")),
        "{listed:?}"
    );
    assert_eq!((lists_asked(&env, 0), lists_asked(&env, 1)), (1, 2));
    tokio::time::sleep(Duration::from_secs(60)).await;
    get(&env, "/v1/models", &[]).await;
    assert_eq!((lists_asked(&env, 0), lists_asked(&env, 1)), (2, 3));
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_does_not_answer_is_left_out_within_the_fetch_timeout() {
    let env = local(&["faults: []", "faults:\n  - { stall: true }\n"], CONFIG);
    let t = paused_now();
    let r = get(&env, "/v1/models", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // A provider that does not answer its model list is waited on 5 s.
    assert_eq!(t.elapsed(), std::time::Duration::from_secs(5));
    let listed = ids(&r.json());
    assert!(listed.iter().any(|id| id == "gpt-4.1"), "{listed:?}");
    assert!(
        !listed.iter().any(|id| id.starts_with("claude/")),
        "{listed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn with_gateway_keys_the_list_and_a_model_need_a_key() {
    let digest = {
        use sha2::Digest;
        sha2::Sha256::digest(b"key-a")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let config = format!("keys:\n  - {{ name: a, sha256: \"{digest}\" }}\n{CONFIG}");
    let env = local(&["faults: []", "faults: []"], &config);
    for path in ["/v1/models", "/v1/models/gpt-4.1"] {
        let r = get(&env, path, &[]).await;
        assert_eq!(r.status, 401, "{path}: {}", r.text());
        let r = get(&env, path, &[("authorization", "Bearer key-a")]).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    assert_eq!(
        lists_asked(&env, 0),
        1,
        "a refused caller does not reach a provider"
    );
}
