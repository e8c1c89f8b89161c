//! Pass-through endpoints through the in-process gateway against strict
//! one-dialect mocks: Anthropic's token count, OpenAI's stored responses,
//! and the paths a route lists in `passthrough` reach their provider
//! unchanged, behind the same keys, deadline and breakers as any request;
//! a request whose method is not idempotent is sent once, never retried.

mod support;
use bytes::Bytes;
use http_body_util::Full;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);
const ANTHROPIC_VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

/// An OpenAI provider (mock0) and an Anthropic one (mock1). Messages go to
/// Anthropic; everything else, Responses included, to OpenAI.
const BOTH: &str = "providers:\n  oa: { api: openai, base_url: \"{mock0}\" }\n  an: { api: anthropic, base_url: \"{mock1}\" }\nroutes:\n  - match: { path: /v1/messages }\n    targets: [an]\n  - targets: [oa]\n";

/// A count_tokens body: a Messages request without `max_tokens`.
const COUNT: &str = r#"{"model":"claude-x","system":"Be brief.","messages":[{"role":"user","content":"how many tokens is this?"}]}"#;

async fn send(env: &Local, method: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> Resp {
    let mut b = http::Request::builder().method(method).uri(path);
    if !body.is_empty() {
        b = b.header("content-type", "application/json");
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    watchdog(WATCHDOG, async {
        Resp::read(env.app.call(req).await).await
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn count_tokens_reaches_the_anthropic_provider_unchanged() {
    let env = local(&["faults: []", "faults: []"], BOTH);
    let r = send(
        &env,
        "POST",
        "/v1/messages/count_tokens",
        COUNT,
        &[ANTHROPIC_VERSION],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The mock counts a token per four bytes it received: the body arrived
    // at its length (and the strict mock refuses any field it does not know).
    assert_eq!(r.json()["input_tokens"], COUNT.len() as u64 / 4);
    assert_eq!(r.header("x-levee-target"), "an");
    assert_eq!(r.header("x-levee-attempts"), "1");
    let s = env.stats(1);
    assert_eq!(
        (s.requests_total, s.by_model.get("claude-x")),
        (1, Some(&1))
    );
    assert_eq!(env.stats(0).requests_total, 0);
    // A body the provider refuses comes back as its verdict.
    let with_max =
        r#"{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = send(
        &env,
        "POST",
        "/v1/messages/count_tokens",
        with_max,
        &[ANTHROPIC_VERSION],
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "max_tokens: Extra inputs are not permitted"
    );
    // A token count is a POST: a GET is refused before any provider.
    let r = send(&env, "GET", "/v1/messages/count_tokens", "", &[]).await;
    assert_eq!(r.status, 405, "{}", r.text());
    assert_eq!(env.stats(1).requests_total, 2);
}

#[tokio::test(start_paused = true)]
async fn count_tokens_is_routed_by_its_model_and_skips_a_target_of_the_other_dialect() {
    // `claude/` models: an OpenAI primary (no token count to give) and an
    // Anthropic backup; the prefix is stripped as for /v1/messages.
    let config = "providers:\n  oa: { api: openai, base_url: \"{mock0}\" }\n  an: { api: anthropic, base_url: \"{mock1}\" }\nroutes:\n  - match: { model_prefix: \"claude/\" }\n    targets: [oa, an]\n";
    let env = local(&["faults: []", "faults: []"], config);
    let body = COUNT.replace("claude-x", "claude/claude-x");
    let r = send(&env, "POST", "/v1/messages/count_tokens", &body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "an");
    assert_eq!(r.json()["input_tokens"], COUNT.len() as u64 / 4);
    assert_eq!(env.stats(1).by_model.get("claude-x"), Some(&1));
    assert_eq!(
        env.stats(0).requests_total,
        0,
        "never sent in the wrong dialect"
    );
    // No route for the model: 404, as for /v1/messages.
    let r = send(&env, "POST", "/v1/messages/count_tokens", COUNT, &[]).await;
    assert_eq!(r.status, 404, "{}", r.text());
}

#[tokio::test(start_paused = true)]
async fn a_stored_response_is_read_listed_and_deleted_at_the_openai_provider() {
    let env = local(&["faults: []", "faults: []"], BOTH);
    let created = env
        .post("/v1/responses", r#"{"model":"gpt-4.1","input":"hi"}"#, &[])
        .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.json()["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let r = send(&env, "GET", &format!("/v1/responses/{id}"), "", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), created.json());
    assert_eq!(r.header("x-levee-target"), "oa");
    let r = send(
        &env,
        "GET",
        &format!("/v1/responses/{id}/input_items?limit=5&order=asc"),
        "",
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["object"], "list");
    assert_eq!(r.json()["data"][0]["content"][0]["text"], "hi");
    // Cancelling a response not run in the background: the provider's 400.
    let r = send(&env, "POST", &format!("/v1/responses/{id}/cancel"), "", &[]).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("background"), "{}", r.text());
    let r = send(&env, "DELETE", &format!("/v1/responses/{id}"), "", &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["deleted"], true);
    let r = send(&env, "GET", &format!("/v1/responses/{id}"), "", &[]).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("not found"), "{}", r.text());
    assert_eq!(env.stats(0).requests_total, 6);
    assert_eq!(env.stats(1).requests_total, 0);
}

#[tokio::test(start_paused = true)]
async fn a_post_that_gets_a_503_is_sent_once_while_a_get_is_retried() {
    // Two OpenAI providers for the same route, both down.
    let config = "providers:\n  oa: { api: openai, base_url: \"{mock0}\" }\n  ob: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - targets:\n      - { provider: oa, expected_attempt_ms: 1000 }\n      - { provider: ob, expected_attempt_ms: 1000 }\n    passthrough: [\"/v1/files\"]\n";
    let down = "faults:\n  - { status: 503 }\n";
    let env = local(&[down, down], config);
    let timeout = [("x-timeout-ms", "10000")];
    let sent = |env: &Local| env.stats(0).requests_total + env.stats(1).requests_total;

    let r = send(
        &env,
        "POST",
        "/v1/files",
        r#"{"purpose":"batch"}"#,
        &timeout,
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "1");
    assert_eq!(r.header("x-levee-reason"), "upstream_error");
    assert_eq!(sent(&env), 1, "a POST is not sent twice, nor to the backup");

    let r = send(&env, "GET", "/v1/files", "", &timeout).await;
    assert_eq!(r.status, 503, "{}", r.text());
    let attempts: u64 = r.header("x-levee-attempts").parse().unwrap_or(0);
    assert!(attempts >= 2, "a GET is retried: {attempts} attempt(s)");
    assert_eq!(sent(&env), 1 + attempts);

    // A stored response no one noted, with two providers that could hold
    // it: a 404 that says why, no provider asked.
    let r = send(&env, "GET", "/v1/responses/resp_1", "", &timeout).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("no record"), "{}", r.text());
    assert_eq!(sent(&env), 1 + attempts);
}

#[tokio::test(start_paused = true)]
async fn a_listed_path_passes_through_and_an_unlisted_one_is_404() {
    let config = "providers:\n  oa: { api: openai, base_url: \"{mock0}\" }\n  an: { api: anthropic, base_url: \"{mock1}\" }\nroutes:\n  - match: { path: /v1/messages }\n    targets: [an]\n  - targets: [oa]\n    passthrough: [\"/v1/responses/\"]\n";
    let env = local(&["faults: []", "faults: []"], config);
    // OpenAI's `/v1/responses/compact` is no endpoint Levee knows; the
    // route lists the prefix: the provider answers it (the mock has no
    // compaction, and says so).
    let r = send(
        &env,
        "POST",
        "/v1/responses/compact",
        r#"{"model":"gpt-4.1","input":"hi"}"#,
        &[],
    )
    .await;
    assert_eq!(r.status, 405, "the provider's own answer: {}", r.text());
    assert!(r.text().contains("levee mock answers"), "{}", r.text());
    assert_eq!(env.stats(0).requests_total, 1);
    // Not listed anywhere: 404 from Levee, no provider asked.
    for (method, path) in [
        ("GET", "/v1/files"),
        ("POST", "/v1/batches"),
        ("GET", "/v2/models"),
    ] {
        let r = send(&env, method, path, "", &[]).await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
        assert_eq!(r.header("x-levee-reason"), "not_found");
        assert_eq!(r.json()["error"]["code"], "not_found", "{}", r.text());
    }
    let m = env.metrics();
    assert_eq!(
        metric(&m, "levee_rejected_total", &["reason=\"not_found\""]),
        3.0
    );
    assert_eq!(env.stats(0).requests_total + env.stats(1).requests_total, 1);
}

#[tokio::test(start_paused = true)]
async fn a_wrong_method_is_method_not_allowed_in_the_header_the_body_and_the_metric() {
    let env = local(&["faults: []", "faults: []"], BOTH);
    for path in ["/v1/chat/completions", "/v1/messages", "/v1/models"] {
        let method = if path == "/v1/models" { "POST" } else { "GET" };
        let r = send(&env, method, path, "", &[]).await;
        assert_eq!(r.status, 405, "{method} {path}: {}", r.text());
        assert_eq!(r.header("x-levee-reason"), "method_not_allowed");
        assert_eq!(r.header("x-should-retry"), "false");
        if path != "/v1/messages" {
            assert_eq!(
                r.json()["error"]["code"],
                "method_not_allowed",
                "{}",
                r.text()
            );
        }
    }
    let m = env.metrics();
    let counted = |reason: &str| {
        metric(
            &m,
            "levee_rejected_total",
            &[&format!("reason=\"{reason}\"")],
        )
    };
    assert_eq!(counted("method_not_allowed"), 3.0, "{m}");
    assert_eq!(counted("bad_request"), 0.0, "{m}");
    assert_eq!(env.stats(0).requests_total + env.stats(1).requests_total, 0);
}

#[tokio::test(start_paused = true)]
async fn pass_through_needs_a_gateway_key_and_keeps_the_deadline() {
    let digest = {
        use sha2::Digest;
        sha2::Sha256::digest(b"key-a")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let config = format!("keys:\n  - {{ name: a, sha256: \"{digest}\" }}\n{BOTH}");
    let env = local(&["faults:\n  - { stall: true }\n", "faults: []"], &config);
    let r = send(&env, "POST", "/v1/messages/count_tokens", COUNT, &[]).await;
    assert_eq!(r.status, 401, "{}", r.text());
    let r = send(&env, "GET", "/v1/responses/resp_1", "", &[]).await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(env.stats(0).requests_total + env.stats(1).requests_total, 0);
    let key = ("x-api-key", "key-a");
    let r = send(&env, "POST", "/v1/messages/count_tokens", COUNT, &[key]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // A stalled provider: the caller's deadline ends the request.
    let t = paused_now();
    let r = send(
        &env,
        "GET",
        "/v1/responses/resp_1",
        "",
        &[key, ("x-timeout-ms", "1500")],
    )
    .await;
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "deadline_exceeded");
    assert!(
        t.elapsed() <= Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
}

/// A route passing `/v1/batches/` and `/v1/files` through to OpenAI.
const LISTED: &str = "providers:\n  oa: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [oa]\n    passthrough: [\"/v1/batches/\", \"/v1/files\"]\n";

#[tokio::test(start_paused = true)]
async fn a_path_that_could_leave_its_prefix_is_refused_before_any_provider_sees_it() {
    let env = local(&["faults: []"], LISTED);
    for path in [
        "/v1/batches/../files",
        "/v1/batches/./b1",
        "/v1/batches/%2e%2e/files",
        "/v1/batches/%2E%2E/files",
        "/v1/batches/..%2ffiles",
        "/v1/batches/b1%5C..%5Cfiles",
        "/v1/batches/a;/../../files",
        "/v1/batches//b1",
        "/v1/batches/b1/",
        "/v1/responses/resp_1/../../files",
        "/v1/responses/%2e%2e",
    ] {
        let r = send(&env, "GET", path, "", &[]).await;
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert_eq!(r.header("x-levee-reason"), "bad_request", "{path}");
        assert!(r.text().contains("plain form"), "{path}: {}", r.text());
    }
    assert_eq!(env.stats(0).requests_total, 0);
    // The plain forms pass.
    let r = send(&env, "GET", "/v1/batches/b1", "", &[]).await;
    assert_ne!(r.status, 400, "{}", r.text());
    assert_eq!(env.stats(0).requests_total, 1);
}

#[tokio::test(start_paused = true)]
async fn passthrough_takes_only_the_methods_the_route_lists() {
    let env = local(&["faults: []"], LISTED);
    for method in ["TRACE", "FOO", "PUT", "PATCH"] {
        let r = send(&env, method, "/v1/files", "", &[]).await;
        assert_eq!(r.status, 405, "{method}: {}", r.text());
        assert_eq!(r.header("x-levee-reason"), "method_not_allowed");
        assert!(r.text().contains("GET, POST, DELETE"), "{}", r.text());
    }
    assert_eq!(env.stats(0).requests_total, 0);
    let put = LISTED.replace(
        "passthrough: [",
        "passthrough_methods: [GET, PUT]\n    passthrough: [",
    );
    let env = local(&["faults: []"], &put);
    let r = send(&env, "PUT", "/v1/files", "{}", &[]).await;
    assert_ne!(r.status, 405, "{}", r.text());
    assert_eq!(env.stats(0).requests_total, 1);
    let r = send(&env, "POST", "/v1/files", "{}", &[]).await;
    assert_eq!(r.status, 405, "{}", r.text());
}
