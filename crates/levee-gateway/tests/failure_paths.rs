//! The incidents Levee exists for: a stalled primary with a healthy backup,
//! a throttle on one model, a dead primary before its breaker opens.

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(20);

fn chat(model: &str) -> String {
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#)
}

/// One chat request for `model` with a 2 s deadline, under the watchdog.
async fn ask(env: &Local, model: &str) -> Resp {
    watchdog(
        WATCHDOG,
        env.post(
            "/v1/chat/completions",
            &chat(model),
            &[("x-timeout-ms", "2000")],
        ),
    )
    .await
}

/// Primary `p` (expected 8 s) and backup `b` (expected 1 s).
fn primary_and_backup(route_extra: &str) -> String {
    format!(
        "providers:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\n  b: {{ api: openai, base_url: \"{{mock1}}\" }}\nroutes:\n  - targets:\n      - {{ provider: p, expected_attempt_ms: 8000 }}\n      - {{ provider: b, expected_attempt_ms: 1000 }}\n{route_extra}"
    )
}

#[tokio::test(start_paused = true)]
async fn a_stalled_primary_leaves_time_to_ask_the_backup() {
    let env = local(
        &["faults:\n  - { stall: true }\n", "faults: []"],
        &primary_and_backup(""),
    );
    // 3 s: the primary may run until the backup's 1 s + margin are left.
    let (r, _) = env.timed_chat(CHAT, 3000).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "b");
    assert_eq!(r.header("x-levee-attempts"), "2");
    assert_eq!(env.stats(1).requests_total, 1, "the backup was asked");
}

#[tokio::test(start_paused = true)]
async fn a_dead_primary_with_a_healthy_backup_answers_everyone_before_its_breaker_opens() {
    // The primary's breaker never opens here: every request meets the dead
    // primary, retries within the budget, and falls back.
    let env = local(
        &["faults:\n  - { status: 503 }\n", "faults: []"],
        &primary_and_backup(
            "    retry: { max_attempts: 2, backoff: { base_ms: 1, max_ms: 2 } }\n    circuit_breaker: { min_requests: 100000 }\n",
        ),
    );
    let mut ok = 0;
    for _ in 0..30 {
        let r = watchdog(
            WATCHDOG,
            env.post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "10000")]),
        )
        .await;
        if r.status == 200 {
            assert_eq!(r.header("x-levee-target"), "b");
            ok += 1;
        }
    }
    assert_eq!(
        ok, 30,
        "a fallback to a healthy backup spends no retry budget"
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_on_one_model_leaves_the_providers_other_models_alone() {
    let env = local_one(
        "faults:\n  - { status: 429, retry_after: 3, model: hot }\n",
        "",
    );
    let r = ask(&env, "hot").await;
    assert_eq!(r.status, 429, "{}", r.text());
    let r = ask(&env, "cool").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "1");
    // `hot` itself is paced, never shut: the next request is sent, and
    // the provider's own 429 answers it.
    let r = ask(&env, "hot").await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_ne!(r.header("x-levee-attempts"), "0");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_of_a_day_holds_the_model_for_the_cap_only() {
    let (_env, r, _) = one_chat(
        "faults:\n  - { status: 429, retry_after: 86400 }\n",
        "    retry: { retry_after_cap: 30s }\n",
        CHAT,
        60000,
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "1", "a day is not waited on");
    assert_eq!(
        r.header("retry-after"),
        "30",
        "the caller hears the capped hold"
    );
}

#[tokio::test(start_paused = true)]
async fn anthropic_overloaded_529_is_retried_by_default() {
    let (env, r, _) = one_chat(
        "faults:\n  - { status: 529 }\n",
        "    retry: { backoff: { base_ms: 1, max_ms: 2 } }\n",
        CHAT,
        20000,
    )
    .await;
    assert_eq!(r.status, 529);
    // The default `max_attempts` is 8; retries after an overload status are
    // never refunded, so the budget's 5 a second always allowed pays for
    // five of them.
    assert_eq!(r.header("x-levee-attempts"), "6");
    assert_eq!(env.stats(0).requests_total, 6);
}

#[tokio::test(start_paused = true)]
async fn requests_waiting_out_a_retry_after_do_not_hold_the_routes_slots() {
    // A route with two slots; two requests for `hot` meet 503 +
    // `retry-after: 1` and wait it out. A request for `cool` arriving
    // meanwhile is on the wire at once, not shed.
    let env = local_one(
        "faults:\n  - { status: 503, retry_after: 1, model: hot, to: 1s }\n",
        "    max_in_flight: 2\n",
    );
    let patient = |model: &'static str| {
        env.post(
            "/v1/chat/completions",
            Box::leak(chat(model).into_boxed_str()),
            &[("x-timeout-ms", "60000")],
        )
    };
    let (a, b, c) = watchdog(WATCHDOG, async {
        tokio::join!(patient("hot"), patient("hot"), async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            ask(&env, "cool").await
        })
    })
    .await;
    assert_eq!(c.status, 200, "{}", c.text());
    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!(a.header("x-levee-attempts"), "2");
}
