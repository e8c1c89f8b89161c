//! Routing through the in-process gateway: balanced groups that spread by
//! weight and move off a member that fails, `on_untranslatable` (skip,
//! fail, drop), and stored responses read where they were created.

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);
const DOWN: &str = "faults:\n  - { status: 503 }\n";

fn chat(model: &str) -> String {
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#)
}

/// Two OpenAI deployments of one model in a group (weights 3 and 1).
const GROUP: &str = "providers:\n  east: { api: openai, base_url: \"{mock0}\" }\n  west: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - match: { model: gpt-4o }\n    targets:\n      - balance:\n          - { provider: east, weight: 3 }\n          - { provider: west }\n";

#[tokio::test(start_paused = true)]
async fn a_group_spreads_by_weight_and_leaves_a_member_that_fails() {
    let env = local(&["faults: []", "faults: []"], GROUP);
    for _ in 0..400 {
        let r = watchdog(
            WATCHDOG,
            env.post("/v1/chat/completions", &chat("gpt-4o"), &[]),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let (east, west) = (env.stats(0).requests_total, env.stats(1).requests_total);
    assert_eq!(east + west, 400);
    assert!(
        (270..=330).contains(&east),
        "3:1 within 10 %: east {east}, west {west}"
    );
    // East fails every request: each is answered by west (the retry goes to
    // the other member), and east is soon left out.
    env.mocks[0].set_faults(levee_mock::parse_faults(DOWN).unwrap());
    for _ in 0..400 {
        let r = watchdog(
            WATCHDOG,
            env.post("/v1/chat/completions", &chat("gpt-4o"), &[]),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-levee-target"), "west");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let sent_east = env.stats(0).requests_total - east;
    assert!(
        sent_east < 100,
        "east, failing, is left out: {sent_east} of 400 sent there"
    );
    let m = env.metrics();
    assert_eq!(
        metric(&m, "levee_requests_total", &["outcome=\"success\""]),
        800.0
    );
}

/// An Anthropic primary and an OpenAI backup, for OpenAI callers.
fn a_to_o(on: &str) -> String {
    format!("providers:\n  anthropic: {{ api: anthropic, base_url: \"{{mock0}}\" }}\n  openai: {{ api: openai, base_url: \"{{mock1}}\" }}\nroutes:\n  - match: {{ model_prefix: \"anthropic/\" }}\n    targets:\n      - {{ provider: anthropic }}\n      - {{ provider: openai, model: gpt-4.1 }}\n    on_untranslatable: {on}\n")
}

const HOT: &str = r#"{"model":"anthropic/claude-x","temperature":1.5,"messages":[{"role":"user","content":"hi"}]}"#;

#[tokio::test(start_paused = true)]
async fn an_untranslatable_request_is_skipped_refused_or_stripped_as_the_route_says() {
    // skip: the backup answers; the fallback is `untranslatable`, not a shed.
    let env = local(&["faults: []", "faults: []"], &a_to_o("skip"));
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", HOT, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "openai");
    assert_eq!(r.header("x-levee-skipped"), "anthropic=sampling");
    let m = env.metrics();
    assert_eq!(
        metric(&m, "levee_fallbacks_total", &["reason=\"untranslatable\""]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "levee_fallbacks_total", &["reason=\"primary_shed\""]),
        0.0
    );

    // fail: 400 naming the parameter and the target; nothing sent.
    let env = local(&["faults: []", "faults: []"], &a_to_o("fail"));
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", HOT, &[])).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let text = r.text();
    assert!(
        text.contains("temperature") && text.contains("`anthropic`"),
        "{text}"
    );
    assert_eq!(env.stats(0).requests_total + env.stats(1).requests_total, 0);
    // A request the primary can carry goes there as ever.
    let ok = r#"{"model":"anthropic/claude-x","temperature":0.5,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", ok, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "anthropic");

    // fail, with a group first: refused only when no member can carry it.
    let group = "providers:\n  anthropic: { api: anthropic, base_url: \"{mock0}\" }\n  openai: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - targets:\n      - balance: [anthropic, { provider: openai, model: gpt-4.1 }]\n    on_untranslatable: fail\n";
    let env = local(&["faults: []", "faults: []"], group);
    for _ in 0..4 {
        let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", HOT, &[])).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-levee-target"), "openai");
    }
    assert_eq!(env.stats(0).requests_total, 0);

    // drop: the primary answers without the parameter, and says so.
    let env = local(&["faults: []", "faults: []"], &a_to_o("drop"));
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", HOT, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "anthropic");
    assert_eq!(r.header("x-levee-dropped-params"), "temperature");
    assert_eq!(r.header("x-levee-skipped"), "");
    assert_eq!(env.stats(1).requests_total, 0);
}

/// Two OpenAI accounts: `first` down at the start, so a response is
/// created at `second`.
const TWO_ACCOUNTS: &str = "providers:\n  first: { api: openai, base_url: \"{mock0}\" }\n  second: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - targets:\n      - { provider: first, expected_attempt_ms: 1000 }\n      - { provider: second, expected_attempt_ms: 1000 }\n";

async fn send(env: &Local, method: &str, path: &str, body: &str) -> Resp {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    watchdog(WATCHDOG, async {
        Resp::read(env.app.call(req).await).await
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_stored_response_is_read_where_it_was_created() {
    let env = local(&[DOWN, "faults: []"], TWO_ACCOUNTS);
    let create = r#"{"model":"gpt-4.1","input":"hi"}"#;
    let r = send(&env, "POST", "/v1/responses", create).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "second");
    let id = r.json()["id"].as_str().unwrap().to_string();
    // The first account is healthy again: reads still go to the second,
    // which holds the response.
    env.mocks[0].set_faults(levee_mock::parse_faults("faults: []").unwrap());
    let before = env.stats(0).requests_total;
    let fallbacks = |env: &Local| metric(&env.metrics(), "levee_fallbacks_total", &[]);
    let created_by_fallback = fallbacks(&env);
    assert_eq!(created_by_fallback, 1.0);
    let r = send(&env, "GET", &format!("/v1/responses/{id}"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["id"], id.as_str());
    assert_eq!(r.header("x-levee-target"), "second");
    let r = send(&env, "GET", &format!("/v1/responses/{id}/input_items"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(&env, "DELETE", &format!("/v1/responses/{id}"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        env.stats(0).requests_total,
        before,
        "the first account is never asked"
    );
    assert_eq!(
        fallbacks(&env),
        created_by_fallback,
        "a read sent where the response lives is no fallback"
    );
    // A stream's first event names the response too.
    let stream = r#"{"model":"gpt-4.1","input":"hi","stream":true}"#;
    env.mocks[0].set_faults(levee_mock::parse_faults(DOWN).unwrap());
    let r = send(&env, "POST", "/v1/responses", stream).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text().to_string();
    let id = text
        .split("\"id\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_else(|| panic!("{text}"))
        .to_string();
    env.mocks[0].set_faults(levee_mock::parse_faults("faults: []").unwrap());
    let r = send(&env, "GET", &format!("/v1/responses/{id}"), "").await;
    assert_eq!(r.status, 200, "{id}: {}", r.text());
    assert_eq!(r.header("x-levee-target"), "second");
}
