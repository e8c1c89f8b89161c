//! Retries settled in one layer, against the mock provider. Most run
//! in-process under paused time (`local`), where elapsed times are exact;
//! the last two need the listener's sockets.

mod support;
use std::time::Duration;
use support::*;

/// Longer than any deadline below: under paused time it trips at once (in
/// real time) when the gateway waits on a timer it should not.
const WATCHDOG: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn success_passes_through_with_attempts_target_and_timeout_header() {
    let env = local_one("faults: []", "");
    let r = env
        .post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "20000")])
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "1");
    assert_eq!(r.header("x-levee-target"), "p");
    assert_eq!(r.json()["model"], "m");
    let s = env.stats(0);
    assert_eq!(s.requests_total, 1);
    let seen = s
        .timeout_ms_seen
        .min
        .expect("x-timeout-ms reached the provider");
    assert!(seen <= 20_000 && seen > 19_000, "{seen}");
    assert_eq!(s.idempotency_keys.len(), 1, "a generated idempotency key");
}

#[tokio::test(start_paused = true)]
async fn deterministic_400_is_answered_after_one_attempt_with_the_providers_body() {
    let env = local_one("faults:\n  - { status: 400 }\n", "");
    let r = env.chat().await;
    assert_eq!(r.status, 400);
    assert_eq!(r.header("x-should-retry"), "false");
    assert_eq!(r.header("x-levee-attempts"), "1");
    assert!(
        r.json()["error"].is_object(),
        "provider's own error shape: {}",
        r.text()
    );
    assert_eq!(env.stats(0).requests_total, 1);
}

/// A request whose caller named it not: Levee's id for it is its
/// idempotency key too, on every attempt. One the caller named: the
/// caller's id is never the key (two requests may share one).
#[tokio::test(start_paused = true)]
async fn a_request_levee_names_sends_its_id_as_its_idempotency_key() {
    let env = local_one(
        "faults:\n  - { status: 503 }\n",
        "    retry: { max_attempts: 2, backoff: { base_ms: 1, max_ms: 5 } }\n",
    );
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &[])).await;
    assert_eq!(r.header("x-levee-attempts"), "2");
    let id = r.header("x-request-id").to_string();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let keys = env.stats(0).idempotency_keys;
    assert_eq!(keys.get(&id), Some(&2), "the id on both attempts: {keys:?}");
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &[("x-request-id", "mine")]),
    )
    .await;
    assert_eq!(r.header("x-request-id"), "mine");
    let keys = env.stats(0).idempotency_keys;
    assert!(!keys.contains_key("mine"), "{keys:?}");
    assert_eq!(keys.len(), 2, "a new key of Levee's: {keys:?}");
}

#[tokio::test(start_paused = true)]
async fn a_503_window_is_retried_up_to_max_attempts_with_one_idempotency_key() {
    let env = local_one(
        "faults:\n  - { status: 503 }\n",
        "    retry: { max_attempts: 3, backoff: { base_ms: 1, max_ms: 5 } }\n",
    );
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &[("idempotency-key", "abc")]),
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-should-retry"), "false");
    assert_eq!(r.header("x-levee-reason"), "upstream_error");
    assert_eq!(r.header("x-levee-attempts"), "3");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("upstream_error"));
    let s = env.stats(0);
    assert_eq!(s.requests_total, 3);
    assert_eq!(
        s.idempotency_keys.values().collect::<Vec<_>>(),
        [&3],
        "one key on every attempt: {:?}",
        s.idempotency_keys
    );
    let m = env.metrics();
    assert_eq!(attempts_labelled(&m, "http_5xx"), 3.0);
    assert_eq!(metric(&m, "levee_attempts_per_request_sum", &[]), 3.0);
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_stops_retries_and_says_budget_exhausted() {
    let env = local_one(
        "faults:\n  - { status: 503 }\n",
        "    retry: { max_attempts: 3, budget: { ratio: 0.1, min_per_second: 0 } }\n",
    );
    let r = env.chat().await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-levee-reason"), "budget_exhausted");
    assert_eq!(env.stats(0).requests_total, 1);
    let m = env.metrics();
    assert_eq!(metric(&m, "levee_retry_budget_exhausted_total", &[]), 1.0);
}

#[tokio::test(start_paused = true)]
async fn retry_after_longer_than_the_deadline_fails_now_instead_of_waiting() {
    // A long deadline (20 s) and a longer Retry-After (30 s): code that waits
    // trips the watchdog; code that gives up answers at once.
    let (env, r, took) = one_chat(
        "faults:\n  - { status: 503, retry_after: 30 }\n",
        "",
        CHAT,
        20000,
    )
    .await;
    assert_eq!(took, Duration::ZERO, "answered without waiting");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-levee-reason"), "deadline_exceeded");
    assert_eq!(r.header("retry-after"), "30");
    assert_eq!(env.stats(0).requests_total, 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_when_the_deadline_holds_it() {
    let (_env, r, took) = one_chat(
        "faults:\n  - { status: 429, retry_after_ms: 400, to: 150ms }\n",
        "    retry: { on: [429, 503] }\n",
        CHAT,
        20000,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(took >= Duration::from_millis(400), "waited {:?}", took);
    assert_eq!(r.header("x-levee-attempts"), "2");
}

#[tokio::test(start_paused = true)]
async fn malformed_and_expired_deadlines_never_reach_the_provider() {
    let env = local_one("faults: []", "");
    let r = env
        .post("/v1/chat/completions", CHAT, &[("x-deadline-ms", "abc")])
        .await;
    assert_eq!(r.status, 400);
    assert!(r.text().contains("x-deadline-ms"), "{}", r.text());
    let r = env
        .post("/v1/messages", MESSAGES, &[("x-timeout-ms", "-5")])
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["type"],
        "error",
        "Anthropic dialect on /v1/messages"
    );
    let r = env
        .post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "0")])
        .await;
    assert_eq!(r.status, 504);
    assert_eq!(r.header("x-levee-reason"), "deadline_exceeded");
    assert_eq!(r.header("x-levee-attempts"), "0");
    assert_eq!(env.stats(0).requests_total, 0);
}

#[tokio::test(start_paused = true)]
async fn bad_requests_are_answered_in_dialect_without_touching_a_provider() {
    let env = local_one("faults: []", "");
    for (path, body, status) in [
        ("/v1/chat/completions", "{not json", 400),
        ("/v1/chat/completions", r#"{"messages":[]}"#, 400),
        ("/v1/nope", CHAT, 404),
        // A dot segment is refused as such (400), not looked up (404).
        ("/../../etc/passwd", CHAT, 400),
    ] {
        let r = env.post(path, body, &[]).await;
        assert_eq!(r.status, status, "{path} {body}");
        assert_eq!(r.header("x-should-retry"), "false");
        assert!(r.json()["error"].is_object(), "{}", r.text());
    }
    assert_eq!(env.stats(0).requests_total, 0);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_cut_short_by_the_callers_deadline_is_not_retried() {
    // The attempt's timeout is the caller's 1 s, far below expected_attempt_ms:
    // when it times out nothing can follow and the breaker is not told.
    let (env, r, took) = one_chat(
        "faults:\n  - { stall: true }\n",
        "    expected_attempt_ms: 30000\n",
        CHAT,
        1000,
    )
    .await;
    assert_eq!(r.status, 504);
    assert_eq!(r.header("x-levee-reason"), "deadline_exceeded");
    assert!(
        took <= Duration::from_millis(1000),
        "answered by the caller's deadline, not after it: {:?}",
        took
    );
    assert_eq!(env.stats(0).requests_total, 1);
    let m = env.metrics();
    assert_eq!(
        metric(&m, "levee_upstream_attempts_total", &["deadline_cut"]),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn an_sdks_read_timeout_is_the_callers_patience_for_plain_calls() {
    let env = local_one("faults: []", "");
    // The OpenAI SDK sends only x-stainless-read-timeout; Anthropic's may say NOT_GIVEN.
    env.post(
        "/v1/chat/completions",
        CHAT,
        &[
            ("x-stainless-timeout", "NOT_GIVEN"),
            ("x-stainless-read-timeout", "5.0"),
        ],
    )
    .await;
    let seen = env.stats(0).timeout_ms_seen.min.unwrap_or(0);
    assert!((4000..=5000).contains(&seen), "{seen}");
}

#[tokio::test]
async fn a_request_too_long_to_forward_is_refused_without_blaming_the_provider() {
    let env = start(
        &["faults: []"],
        "limits: { max_header_bytes: 131072 }\nproviders:\n  p: { api: openai, base_url: \"{mock0}\", circuit_breaker: { min_requests: 2 } }\nroutes:\n  - targets: [p]\n",
    )
    .await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Short enough for the gateway to accept (its head limit raised past
    // the target's 65 KB), too long once the provider's base URL is put in
    // front of it.
    let target = format!("/v1/chat/completions?{}", "a".repeat(65_520 - 21));
    for _ in 0..4 {
        let mut s = tokio::net::TcpStream::connect(env.gw.addr).await.unwrap();
        let req = format!(
            "POST {target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{CHAT}",
            CHAT.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        watchdog(WATCHDOG, s.read_to_end(&mut out)).await.unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("HTTP/1.1 414"),
            "{}",
            &text[..text.len().min(200)]
        );
        assert!(text.contains("x-levee-attempts: 0"));
    }
    assert_eq!(env.stats(0).requests_total, 0);
    // The breaker never heard of it: normal callers are served.
    assert_eq!(env.chat().await.status, 200);
    env.stop().await;
}

#[tokio::test(start_paused = true)]
async fn arrays_unrewritable_bodies_and_odd_keys_are_bad_requests() {
    let env = local(
        &["faults: []"],
        "providers:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - match: { model_prefix: \"x/\" }\n    targets: [p]\n",
    );
    let r = env
        .post("/v1/chat/completions", r#"["x/m", true]"#, &[])
        .await;
    assert_eq!(r.status, 400);
    // Accepted by the quick peek, but the prefix cannot be stripped: refused,
    // never sent on with the caller's model name.
    let r = env
        .post("/v1/chat/completions", r#"{"model":"x/m","n":1e400}"#, &[])
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let r = env
        .post(
            "/v1/chat/completions",
            r#"{"model":"x/m","messages":[]}"#,
            &[("idempotency-key", "   ")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(env.stats(0).requests_total, 0);
}

#[tokio::test]
async fn a_body_that_never_arrives_is_timed_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = start(
        &["faults: []"],
        "limits: { body_read_timeout: 300ms }\nproviders:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [p]\n",
    )
    .await;
    let mut s = tokio::net::TcpStream::connect(env.gw.addr).await.unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
        .await
        .unwrap();
    let mut buf = vec![0u8; 512];
    let n = watchdog(Duration::from_secs(5), s.read(&mut buf))
        .await
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert_eq!(env.chat().await.status, 200);
    assert_eq!(env.stats(0).requests_total, 1);
    env.stop().await;
}

/// The caller's deadline counts from when its body was whole, not from its
/// head: a 300 ms deadline on a body that takes 600 ms to upload still
/// leaves the attempt its 300 ms (counted from the head, the request would
/// be past its deadline before admission and answered 504 unsent).
#[tokio::test]
async fn a_slow_uploads_time_is_not_taken_from_its_deadline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = start(
        &["faults: []"],
        "limits: { body_read_timeout: 60s }\nproviders:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [p]\n",
    )
    .await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-timeout-ms: 300\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        CHAT.len()
    );
    let (first, rest) = CHAT.split_at(10);
    let got = watchdog(Duration::from_secs(10), async {
        let mut s = tokio::net::TcpStream::connect(env.gw.addr).await.unwrap();
        s.write_all(format!("{head}{first}").as_bytes())
            .await
            .unwrap();
        // The caller's upload is slow: the rest comes 600 ms later.
        tokio::time::sleep(Duration::from_millis(600)).await;
        s.write_all(rest.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        String::from_utf8_lossy(&got).into_owned()
    })
    .await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert_eq!(env.stats(0).requests_total, 1);
    env.stop().await;
}

#[tokio::test(start_paused = true)]
async fn added_latency_leaves_out_the_attempts_and_the_wait_between_them() {
    // A 503 with `retry-after: 1`, then an answer after 200 ms: the request
    // takes over 1.2 s, all of it the provider's or the wait it asked for.
    let env = local_one(
        "faults:\n  - { status: 503, retry_after: 1, to: 100ms }\n  - { latency: 200ms, from: 100ms }\n",
        "",
    );
    let start = paused_now();
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "20000")]),
    )
    .await;
    assert_eq!(
        (r.status, r.header("x-levee-attempts")),
        (200, "2"),
        "{}",
        r.text()
    );
    assert!(start.elapsed() >= Duration::from_millis(1_200));
    let m = env.metrics();
    let added = metric(&m, "levee_added_latency_seconds_sum", &[]);
    let count = metric(&m, "levee_added_latency_seconds_count", &[]);
    assert_eq!(count, 1.0, "{m}");
    // Under paused time the gateway's own work takes no time at all.
    assert!(
        added < 0.01,
        "added latency {added} s counts the provider's time: {m}"
    );
}
