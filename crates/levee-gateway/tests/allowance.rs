//! A provider account's token allowance through the in-process gateway:
//! a request spends its estimate (input and `max_tokens`) at admission and
//! gets back what its answer's `usage` shows it did not use; over the
//! allowance, a request is refused at once with `rate_limited` and a
//! `retry-after`, never sent. Streams settle from their last event's usage.

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);

fn chat_with_max(max_tokens: u32, stream: bool) -> String {
    format!(
        r#"{{"model":"gpt-x","max_tokens":{max_tokens},"stream":{stream},"stream_options":{{"include_usage":true}},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

const CONFIG: &str = "providers:\n  p: { api: openai, base_url: \"{mock0}\", rate_limit: { tokens_per_minute: 1000 } }\nroutes:\n  - targets: [p]\n";

async fn chat(env: &Local, body: &str) -> Resp {
    watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &[])).await
}

/// With a 3 s deadline: too short to wait for 600 tokens of refill (36 s).
async fn chat_now(env: &Local, body: &str) -> Resp {
    let h = [("x-timeout-ms", "3000")];
    watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &h)).await
}

#[tokio::test(start_paused = true)]
async fn an_answer_gives_back_the_tokens_its_estimate_held_beyond_its_usage() {
    let env = local(&["faults: []"], CONFIG);
    // Each asks for 600 tokens of output: two would not fit in 1,000 at
    // once, but the mock's answers use a few dozen, and the rest comes back.
    for i in 0..3 {
        let r = chat_now(&env, &chat_with_max(600, false)).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    // Streams settle from the usage in their last chunk.
    for i in 0..2 {
        let r = chat_now(&env, &chat_with_max(600, true)).await;
        assert_eq!(r.status, 200, "stream {i}: {}", r.text());
    }
    assert_eq!(env.stats(0).requests_total, 5);
    let m = env.metrics();
    assert!(
        metric(
            &m,
            "levee_tokens_total",
            &["provider=\"p\"", "kind=\"output\""]
        ) > 0.0,
        "{m}"
    );
    assert!(
        metric(&m, "levee_allowance_limit", &["meter=\"tokens\""]) == 1000.0,
        "{m}"
    );
}

#[tokio::test(start_paused = true)]
async fn over_the_allowance_a_request_is_refused_at_once_and_never_sent() {
    let env = local(&["faults: []"], CONFIG);
    // 900 of 1,000 held while it runs; a second one at once does not fit.
    let r = chat(&env, &chat_with_max(900, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Its usage gave most back; a request asking for more than is left
    // (the refill is 1,000 a minute) waits for it or is refused.
    let big = chat_with_max(990, false);
    let r = chat(&env, &big).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", &big, &[("x-timeout-ms", "2000")]),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "rate_limited");
    assert!(
        !r.header("retry-after").is_empty(),
        "a retry-after says when"
    );
    assert_eq!(
        env.stats(0).requests_total,
        2,
        "the refused one was never sent"
    );
}
