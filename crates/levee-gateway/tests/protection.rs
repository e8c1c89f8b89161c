//! Load shedding, the breaker, fallback, idempotency and streams: in-process
//! under paused time, where elapsed times are exact.

mod support;
use std::time::Duration;
use support::*;

/// Longer than any deadline below: under paused time it trips at once (in
/// real time) when the gateway waits on a timer it should not.
const WATCHDOG: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn a_full_route_sheds_at_once_instead_of_queueing() {
    let env = std::sync::Arc::new(local_one(
        "faults:\n  - { stall: true }\n",
        "    max_in_flight: 1\n",
    ));
    let e2 = env.clone();
    let held = tokio::spawn(async move {
        e2.post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "3000")])
            .await
    });
    until(
        WATCHDOG,
        "the first request holds the slot at the provider",
        || env.stats(0).in_flight == 1,
    )
    .await;
    let t = paused_now();
    let r = env.chat().await;
    assert_eq!(t.elapsed(), Duration::ZERO, "shed at once, not queued");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-levee-reason"), "shed");
    assert_eq!(r.header("retry-after"), "1");
    let _ = held.await;
    let m = env.metrics();
    assert_eq!(
        metric(&m, "levee_rejected_total", &["reason=\"shed\""]),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn the_breaker_opens_on_provider_faults_and_fails_fast() {
    let env = local(
        &["faults:\n  - { status: 500 }\n"],
        "providers:\n  p: { api: openai, base_url: \"{mock0}\", circuit_breaker: { min_requests: 4, error_ratio: 0.5, window: 10s, open_for: 30s } }\nroutes:\n  - targets: [p]\n",
    );
    for _ in 0..4 {
        assert_eq!(env.chat().await.status, 500);
    }
    let r = env.chat().await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-levee-reason"), "circuit_open");
    assert!(!r.header("retry-after").is_empty());
    assert_eq!(env.stats(0).requests_total, 4);
    let m = env.metrics();
    assert_eq!(
        metric(&m, "levee_circuit_state", &["provider=\"p\"", "model=\"\""]),
        1.0
    );
    assert_eq!(
        metric(
            &m,
            "levee_circuit_state",
            &["provider=\"p\"", "model=\"m\""]
        ),
        1.0,
        "and the model's own"
    );
    assert_eq!(metric(&m, "levee_admitted_fraction", &["model=\"m\""]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_ignores_deterministic_400s() {
    let env = local(
        &["faults:\n  - { status: 400 }\n"],
        "providers:\n  p: { api: openai, base_url: \"{mock0}\", circuit_breaker: { min_requests: 2 } }\nroutes:\n  - targets: [p]\n",
    );
    for _ in 0..6 {
        assert_eq!(env.chat().await.status, 400);
    }
    assert_eq!(env.stats(0).requests_total, 6);
}

#[tokio::test(start_paused = true)]
async fn a_failing_primary_falls_back_to_the_backup_with_its_model() {
    let env = local(
        &["faults:\n  - { status: 503 }\n", "faults: []"],
        "providers:\n  a: { api: openai, base_url: \"{mock0}\" }\n  b: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - match: { model_prefix: \"x/\" }\n    targets:\n      - { provider: a, expected_attempt_ms: 1000 }\n      - { provider: b, model: backup-model, expected_attempt_ms: 1000 }\n    retry: { max_attempts: 2, backoff: { base_ms: 1, max_ms: 2 } }\n",
    );
    let body = r#"{"model":"x/primary","messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", body, &[("idempotency-key", "k1")]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "b");
    // A 503 is an overload answer: with a backup that can take the request,
    // it goes there at once instead of to a second attempt on `a`.
    assert_eq!(r.header("x-levee-attempts"), "2");
    assert_eq!(r.json()["model"], "backup-model");
    assert_eq!(
        env.stats(0).by_model.get("primary"),
        Some(&1),
        "prefix stripped for a"
    );
    assert_eq!(
        env.stats(1).idempotency_keys,
        env.stats(0)
            .idempotency_keys
            .keys()
            .map(|k| (k.clone(), 1))
            .collect(),
        "same key on the fallback"
    );
    let m = env.metrics();
    assert_eq!(metric(&m, "levee_fallbacks_total", &[]), 1.0);
}

#[tokio::test(start_paused = true)]
async fn the_same_idempotency_key_runs_once_and_is_replayed() {
    let env = local_one("faults:\n  - { latency: 300ms }\n", "");
    let h = [("idempotency-key", "once")];
    let (a, b) = tokio::join!(
        env.post("/v1/chat/completions", CHAT, &h),
        env.post("/v1/chat/completions", CHAT, &h)
    );
    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!(a.body, b.body, "both callers get the same answer");
    let c = env.post("/v1/chat/completions", CHAT, &h).await;
    assert_eq!(c.header("x-levee-replayed"), "true");
    assert_eq!(c.body, a.body);
    assert_eq!(env.stats(0).requests_total, 1, "nothing ran twice");
    let d = env.post("/v1/chat/completions", MESSAGES, &h).await;
    assert_eq!(d.status, 422, "same key, different body");
    let other = env
        .post(
            "/v1/chat/completions",
            CHAT,
            &[
                ("idempotency-key", "once"),
                ("authorization", "Bearer other-caller"),
            ],
        )
        .await;
    assert_ne!(
        other.header("x-levee-replayed"),
        "true",
        "another caller never gets this caller's answer"
    );
    let m = env.metrics();
    assert!(metric(&m, "levee_caller_retries_total", &[]) >= 2.0);
}

#[tokio::test(start_paused = true)]
async fn an_idempotency_key_is_scoped_by_endpoint() {
    let env = local_one("faults: []", "");
    let h = [("idempotency-key", "same")];
    let chat = env.post("/v1/chat/completions", CHAT, &h).await;
    assert_eq!(chat.status, 200, "{}", chat.text());
    let again = env.post("/v1/chat/completions", CHAT, &h).await;
    assert_eq!(again.header("x-levee-replayed"), "true", "stored");
    // The same key and body to another endpoint reach the provider, which
    // answers for that endpoint (here: embeddings need `input`).
    let emb = env.post("/v1/embeddings", CHAT, &h).await;
    assert_ne!(
        emb.header("x-levee-replayed"),
        "true",
        "a chat completion is never replayed to /v1/embeddings"
    );
    assert_ne!(emb.body, chat.body);
    assert_eq!(emb.status, 400, "{}", emb.text());
    assert!(emb.text().contains("input"), "{}", emb.text());
    let s = env.stats(0);
    assert_eq!(s.by_path.get("/v1/chat/completions"), Some(&1), "{s:?}");
    assert_eq!(s.by_path.get("/v1/embeddings"), Some(&1), "{s:?}");
}

/// The one idempotency key a provider has seen, and how many requests
/// carried it.
fn only_key(env: &Local) -> (String, u64) {
    let keys = env.stats(0).idempotency_keys;
    assert_eq!(keys.len(), 1, "{keys:?}");
    keys.into_iter().next().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn the_idempotency_key_a_provider_sees_is_derived_from_the_caller_and_its_key() {
    // Two replicas of one deployment; the first one's provider fails the
    // first attempt, so the request is retried.
    let retry = "    retry: { max_attempts: 3, backoff: { base_ms: 5, max_ms: 5 } }\n";
    let a = local_one("faults:\n  - { status: 503, to: 1ms }\n", retry);
    let b = local_one("faults: []", retry);
    let as_caller = |who: &'static str| [("idempotency-key", "shared"), ("authorization", who)];
    let x = watchdog(
        WATCHDOG,
        a.post("/v1/chat/completions", CHAT, &as_caller("Bearer tenant-x")),
    )
    .await;
    assert_eq!((x.status, x.header("x-levee-attempts")), (200, "2"));
    let (sent_x, n) = only_key(&a);
    assert_eq!(n, 2, "one value on every attempt");
    assert_ne!(sent_x, "shared", "not the caller's key as sent");
    assert!(
        sent_x.len() == 64 && sent_x.bytes().all(|c| c.is_ascii_hexdigit()),
        "{sent_x}"
    );

    // Another tenant with the same key and body: another value.
    let y = a
        .post("/v1/chat/completions", CHAT, &as_caller("Bearer tenant-y"))
        .await;
    assert_eq!(y.status, 200);
    assert_ne!(y.header("x-levee-replayed"), "true");
    let keys = a.stats(0).idempotency_keys;
    assert_eq!(keys.len(), 2, "two tenants, two values: {keys:?}");
    assert!(!keys.contains_key("shared"), "{keys:?}");

    // The first tenant again, through the other replica: the same value.
    let again = b
        .post("/v1/chat/completions", CHAT, &as_caller("Bearer tenant-x"))
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(
        only_key(&b),
        (sent_x, 1),
        "the same value from every replica"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_request_releases_its_idempotency_key() {
    let env = local_one("faults:\n  - { status: 400, to: 200ms }\n", "");
    let h = [("idempotency-key", "retry-me")];
    assert_eq!(env.post("/v1/chat/completions", CHAT, &h).await.status, 400);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let r = env.post("/v1/chat/completions", CHAT, &h).await;
    assert_eq!(r.status, 200);
    assert_ne!(r.header("x-levee-replayed"), "true");
    assert_eq!(env.stats(0).requests_total, 2);
}

#[tokio::test(start_paused = true)]
async fn streams_pass_through_in_both_dialects() {
    let env = local_one("faults: []", "");
    let r = env.post("/v1/chat/completions", CHAT_STREAM, &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").starts_with("text/event-stream"));
    assert!(
        r.text().trim_end().ends_with("data: [DONE]"),
        "{}",
        r.text()
    );
    let body = r#"{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = env.post("/v1/messages", body, &[]).await;
    assert!(r.text().contains("event: message_stop"), "{}", r.text());
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_the_first_byte_ends_with_an_error_event_and_is_never_restarted() {
    let env = local_one("faults:\n  - { cut_stream_after: 2 }\n", "");
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT_STREAM, &[])).await;
    assert_eq!(r.status, 200);
    let text = r.text();
    assert!(text.contains("\"error\""), "{text}");
    assert!(!text.contains("[DONE]"));
    assert_eq!(env.stats(0).requests_total, 1, "no restart");
    let body = r#"{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = env.post("/v1/messages", body, &[]).await;
    assert!(r.text().contains("event: error"), "{}", r.text());
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_before_its_first_byte_is_retried() {
    let env = local_one(
        "faults:\n  - { status: 503, to: 100ms }\n",
        "    retry: { backoff: { base_ms: 150, max_ms: 200, jitter: none } }\n",
    );
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT_STREAM, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "2");
    assert!(r.text().contains("[DONE]"));
}

#[tokio::test(start_paused = true)]
async fn a_stream_with_no_first_event_in_time_falls_back_before_committing() {
    // The primary never answers; first_byte_timeout (300 ms) lets the backup
    // answer well inside the caller's 20 s deadline.
    let env = local(
        &["faults:\n  - { stall: true }\n", "faults: []"],
        "providers:\n  a: { api: openai, base_url: \"{mock0}\" }\n  b: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - targets:\n      - { provider: a, expected_attempt_ms: 1000 }\n      - { provider: b, expected_attempt_ms: 1000 }\n    retry: { max_attempts: 1 }\n    first_byte_timeout: 300ms\n",
    );
    let (r, took) = env.timed_chat(CHAT_STREAM, 20000).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "b");
    assert_eq!(
        took,
        Duration::from_millis(300),
        "the backup is asked at first_byte_timeout"
    );
    assert!(r.text().contains("[DONE]"));
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_stalls_after_its_first_byte_ends_with_an_error_event() {
    let (env, r, took) = one_chat(
        "faults:\n  - { chunk_delay: 2s }\n",
        "    stream_idle_timeout: 200ms\n",
        CHAT_STREAM,
        60000,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        took,
        Duration::from_millis(200),
        "ended at stream_idle_timeout"
    );
    let text = r.text();
    assert!(text.contains("stalled"), "{text}");
    assert!(!text.contains("[DONE]"));
    assert_eq!(env.stats(0).requests_total, 1, "never restarted");
    let m = env.metrics();
    assert_eq!(metric(&m, "levee_streams_failed_total", &[]), 1.0);
}

#[tokio::test(start_paused = true)]
async fn callers_with_short_deadlines_leave_no_orphaned_work_behind() {
    // Slow and flaky provider, callers with 300 ms deadlines: every request the
    // provider sees carries a positive x-timeout-ms, nothing arrives after the
    // callers are gone, and nothing is left running there.
    let env = std::sync::Arc::new(
        local_one(
            "faults:\n  - { status: 503, probability: 0.5 }\n  - { latency: { p50: 150ms, p99: 600ms } }\n",
            "    expected_attempt_ms: 100\n    retry: { max_attempts: 3, budget: { ratio: 1.0, min_per_second: 1000 }, backoff: { base_ms: 10, max_ms: 50 } }\n",
        ),
    );
    let mut calls = Vec::new();
    for _ in 0..60 {
        let e = env.clone();
        calls.push(tokio::spawn(async move {
            let t = paused_now();
            let r = e
                .post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "300")])
                .await;
            (r.status, t.elapsed())
        }));
    }
    for c in calls {
        let (status, took) = watchdog(Duration::from_secs(10), c).await.unwrap();
        assert!(
            took <= Duration::from_millis(300),
            "answered after {took:?} (status {status})"
        );
    }
    let after = env.stats(0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = env.stats(0);
    assert_eq!(
        later.requests_total, after.requests_total,
        "no attempt after the callers left"
    );
    assert_eq!(later.in_flight, 0, "nothing left running at the provider");
    assert_eq!(later.timeout_ms_seen.count, later.requests_total);
    assert!(later.timeout_ms_seen.min.unwrap_or(0) > 0);
    assert!(later.timeout_ms_seen.max.unwrap_or(u64::MAX) <= 300);
}

#[tokio::test(start_paused = true)]
async fn gateway_keys_turn_away_unknown_callers_in_their_dialect() {
    // sha256("caller-secret")
    let env = local(
        &["faults: []"],
        "keys:\n  - { name: svc, sha256: \"ef463420edc797e78fe3cdfcaddb67f822b4482788cb1009d0467eea8694736f\" }\nproviders:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [p]\n",
    );
    let r = env.post("/v1/messages", MESSAGES, &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    let r = env
        .post(
            "/v1/chat/completions",
            CHAT,
            &[("authorization", "Bearer wrong")],
        )
        .await;
    assert_eq!(r.status, 401);
    // OpenAI labels a bad key 401 `invalid_request_error`.
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert_eq!(env.stats(0).requests_total, 0);
    let r = env
        .post(
            "/v1/chat/completions",
            CHAT,
            &[("authorization", "Bearer caller-secret")],
        )
        .await;
    assert_eq!(r.status, 200);
    let r = env
        .post("/v1/messages", MESSAGES, &[("x-api-key", "caller-secret")])
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test(start_paused = true)]
async fn the_per_minute_allowance_is_spent_per_attempt_and_refuses_before_sending() {
    let env = local(
        &["faults:\n  - { status: 503 }\n"],
        "providers:\n  p: { api: openai, base_url: \"{mock0}\", rate_limit: { requests_per_minute: 60, burst: 3 } }\nroutes:\n  - targets: [p]\n    retry: { max_attempts: 3, backoff: { base_ms: 1, max_ms: 2 } }\n",
    );
    // One request, three attempts: the whole burst.
    let r = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(r.header("x-levee-attempts"), "3");
    // A caller whose deadline cannot hold the wait for the next slot (1 s
    // at 60/min) is refused at once; one whose deadline can hold it waits.
    let r = env
        .post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "800")])
        .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("x-levee-reason"), "rate_limited");
    assert!(!r.header("retry-after").is_empty());
    assert_eq!(
        env.stats(0).requests_total,
        3,
        "the refused request never reached the provider"
    );
}

#[tokio::test(start_paused = true)]
async fn a_4xx_that_is_not_the_providers_json_error_is_labelled_as_such() {
    // A proxy in between answering with an HTML page.
    let tape = levee_mock::Tape::parse(
        r#"{"status":400,"headers":{"content-type":"text/html"},"body":"<html><body>400 Bad Request</body></html>"}"#,
    )
    .unwrap();
    let mock = levee_mock::InProcess::new(levee_mock::MockOptions {
        replay: Some(tape),
        ..Default::default()
    });
    let env = local_with(vec![mock], &one_route(""));
    let r = env.chat().await;
    assert_eq!(r.status, 400);
    assert_eq!(r.header("x-levee-attempts"), "1");
    let m = env.metrics();
    assert_eq!(
        metric(
            &m,
            "levee_upstream_attempts_total",
            &["http_4xx_foreign_body"]
        ),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_holds_its_route_slot_until_it_ends() {
    let env = std::sync::Arc::new(local_one(
        "faults:\n  - { chunk_delay: 100ms }\n",
        "    max_in_flight: 1\n",
    ));
    let e2 = env.clone();
    let stream =
        tokio::spawn(async move { e2.post("/v1/chat/completions", CHAT_STREAM, &[]).await });
    until(WATCHDOG, "the stream reaches the provider", || {
        env.stats(0).in_flight == 1
    })
    .await;
    // Past the commit point, the stream is still running: the slot is taken.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let r = env.chat().await;
    assert_eq!(r.header("x-levee-reason"), "shed");
    let done = watchdog(WATCHDOG, stream).await.unwrap();
    assert!(done.text().contains("[DONE]"));
    assert_eq!(env.chat().await.status, 200);
}
