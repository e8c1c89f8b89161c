//! What happens after a provider's 2xx head: a committed stream bounded by
//! the caller's deadline, a plain answer whose body breaks off or is too
//! large, and the metrics that describe them.

mod support;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longer than any deadline below: under paused time it trips at once (in
/// real time) when the gateway waits on a timer it should not.
const WATCHDOG: Duration = Duration::from_secs(60);

/// How the hand-written upstream answers every request.
#[derive(Clone, Copy)]
enum Fake {
    /// A 200 head announcing 1,000 bytes, 12 of them, then the connection closes.
    CutBody,
    /// A chunked 200 body that goes on past 64 MiB.
    HugeChunked,
    /// A 200 head whose content-length is already over 64 MiB, 1 MiB of it,
    /// then nothing more: only refusing it unread answers before the deadline.
    HugeDeclared,
    /// A 200 head announcing 1,000 bytes, 12 of them, then nothing more.
    StalledBody,
}

/// A hand-written HTTP/1.1 upstream (the mock cannot break a plain answer
/// off mid-body) at `http://fake.test`, in-process: answers every request
/// as `kind` says, counts the requests, closes each connection after one
/// answer. Returns the count and the dial that reaches it.
fn fake_upstream(kind: Fake) -> (Arc<AtomicUsize>, levee_gateway::transport::Dial) {
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    let dial: levee_gateway::transport::Dial = Arc::new(move |uri: &http::Uri| {
        if uri.host() != Some("fake.test") {
            return None;
        }
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            // `None`: the gateway hung up first.
            let _ = answer(&mut server, kind, &seen).await;
        });
        Some(client)
    });
    (count, dial)
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    kind: Fake,
    seen: &AtomicUsize,
) -> Option<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    seen.fetch_add(1, Ordering::SeqCst);
    let mib = vec![b' '; 1 << 20];
    match kind {
        Fake::CutBody | Fake::StalledBody => {
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"id\":\"cut\",")
                .await
                .ok()?;
            if matches!(kind, Fake::StalledBody) {
                conn.flush().await.ok()?;
                // Hold the connection until the gateway drops it.
                let _ = conn.read(&mut chunk).await;
            }
        }
        Fake::HugeChunked => {
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                .await
                .ok()?;
            for _ in 0..80 {
                conn.write_all(b"100000\r\n").await.ok()?;
                conn.write_all(&mib).await.ok()?;
                conn.write_all(b"\r\n").await.ok()?;
            }
            conn.write_all(b"0\r\n\r\n").await.ok()?;
        }
        Fake::HugeDeclared => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                80 << 20
            );
            conn.write_all(head.as_bytes()).await.ok()?;
            conn.write_all(&mib).await.ok()?;
            conn.flush().await.ok()?;
            let _ = conn.read(&mut chunk).await;
        }
    }
    conn.flush().await.ok()?;
    Some(())
}

/// A gateway whose one provider is the fake behind `dial`.
fn gateway_before(dial: levee_gateway::transport::Dial) -> Local {
    local_dial(
        vec![],
        "providers:\n  p: { api: openai, base_url: \"http://fake.test\" }\nroutes:\n  - targets: [p]\n    retry: { max_attempts: 3, backoff: { base_ms: 1, max_ms: 2 } }\n",
        dial,
    )
}

#[tokio::test(start_paused = true)]
async fn a_plain_answer_that_breaks_off_after_its_2xx_head_is_not_run_again() {
    let (count, dial) = fake_upstream(Fake::CutBody);
    let env = gateway_before(dial);
    let (r, _) = env.timed_chat(CHAT, 20000).await;
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "the provider already ran the generation once"
    );
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "upstream_error");
    assert_eq!(r.header("x-should-retry"), "false");
    assert_eq!(r.header("x-levee-attempts"), "1");
    assert!(r.text().contains("broke off"), "{}", r.text());
    let m = env.metrics();
    assert_eq!(attempts_labelled(&m, "body_cut"), 1.0, "{m}");
    assert_eq!(attempts_labelled(&m, "connect_error"), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_plain_answer_whose_body_stalls_after_its_2xx_head_is_not_sent_to_the_backup() {
    // The head arrived, so the primary has run the generation: its body is
    // awaited until the caller's deadline, and the backup is never asked
    // even though its expected attempt (1 s) fits in the 4 s deadline.
    let (count, dial) = fake_upstream(Fake::StalledBody);
    let mock = levee_mock::InProcess::new(levee_mock::MockOptions::default());
    let env = local_dial(
        vec![mock],
        "providers:\n  a: { api: openai, base_url: \"http://fake.test\" }\n  b: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets:\n      - { provider: a, expected_attempt_ms: 1000 }\n      - { provider: b, expected_attempt_ms: 1000 }\n",
        dial,
    );
    let (r, took) = env.timed_chat(CHAT, 4000).await;
    assert!(
        took <= Duration::from_secs(4),
        "answered by the caller's deadline: {:?}",
        took
    );
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "deadline_exceeded");
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert_eq!(env.stats(0).requests_total, 0, "the backup was not asked");
}

#[tokio::test(start_paused = true)]
async fn an_answer_over_the_size_limit_is_fetched_once_and_never_retried() {
    for kind in [Fake::HugeChunked, Fake::HugeDeclared] {
        let (count, dial) = fake_upstream(kind);
        let env = gateway_before(dial);
        let t = paused_now();
        let r = watchdog(
            WATCHDOG,
            env.post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "20000")]),
        )
        .await;
        assert_eq!(
            t.elapsed(),
            Duration::ZERO,
            "refused without waiting for more"
        );
        assert_eq!(count.load(Ordering::SeqCst), 1, "fetched once");
        assert_eq!(r.status, 502, "{}", r.text());
        assert_eq!(r.header("x-levee-reason"), "upstream_error");
        assert_eq!(r.header("x-should-retry"), "false");
        assert!(r.text().contains("64 MiB"), "{}", r.text());
        let m = env.metrics();
        assert_eq!(attempts_labelled(&m, "response_too_large"), 1.0, "{m}");
        // Not the provider's fault: the breaker does not count it.
        assert_eq!(metric(&m, "levee_circuit_state", &["provider=\"p\""]), 0.0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_committed_stream_ends_at_the_callers_deadline_with_an_error_event_in_its_dialect() {
    // About ten events a second apart: a 10 s stream, well inside the 60 s
    // idle timer. The callers allow 3 s.
    let env = local_one("faults:\n  - { chunk_delay: 1s }\n", "");
    let anthropic = r#"{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
    let deadline = [("x-timeout-ms", "3000")];
    let t = paused_now();
    let (o, a) = watchdog(WATCHDOG, async {
        tokio::join!(
            env.post("/v1/chat/completions", CHAT_STREAM, &deadline),
            env.post("/v1/messages", anthropic, &deadline),
        )
    })
    .await;
    let took = t.elapsed();
    assert!(
        took <= Duration::from_secs(3),
        "both streams end by the deadline, not after ~10 s: {took:?}"
    );
    assert_eq!(o.status, 200);
    assert_eq!(a.status, 200);
    // OpenAI: a `data:` line whose JSON has `error` (the SDK raises APIError).
    let text = o.text();
    assert!(!text.contains("[DONE]"), "{text}");
    let last = text
        .trim_end()
        .rsplit("\n\n")
        .next()
        .and_then(|e| e.strip_prefix("data: "))
        .unwrap_or("");
    let v: serde_json::Value = serde_json::from_str(last).unwrap_or_default();
    assert_eq!(v["error"]["code"], "deadline_exceeded", "{text}");
    assert!(v["error"]["message"].is_string());
    // Anthropic: `event: error` with the error envelope (the SDK raises a
    // status error from it); a gateway timeout is `timeout_error`.
    let text = a.text();
    assert!(!text.contains("message_stop"), "{text}");
    let last = text.trim_end().rsplit("\n\n").next().unwrap_or("");
    let data = last
        .strip_prefix("event: error\ndata: ")
        .unwrap_or_else(|| panic!("no error event last: {text}"));
    let v: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "timeout_error", "{text}");
    assert_eq!(env.stats(0).requests_total, 2, "never restarted");
    // The caller's deadline says nothing about the provider.
    let m = env.metrics();
    assert_eq!(metric(&m, "levee_streams_failed_total", &[]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_made_no_attempt_is_observed_as_zero_attempts() {
    // One request a minute: the second is refused before any attempt.
    let env = local(
        &["faults: []"],
        "providers:\n  p: { api: openai, base_url: \"{mock0}\", rate_limit: { requests_per_minute: 1, burst: 1 } }\nroutes:\n  - targets: [p]\n",
    );
    assert_eq!(env.chat().await.status, 200);
    let r = env.chat().await;
    assert_eq!(r.header("x-levee-attempts"), "0", "{}", r.text());
    assert_eq!(env.stats(0).requests_total, 1);
    let m = env.metrics();
    assert_eq!(metric(&m, "levee_attempts_per_request_count", &[]), 2.0);
    assert_eq!(
        metric(&m, "levee_attempts_per_request_sum", &[]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "levee_attempts_per_request_bucket", &["le=\"0.0\""]),
        1.0,
        "{m}"
    );
}

#[tokio::test(start_paused = true)]
async fn every_attempt_observes_the_time_to_obtain_a_connection_pooled_or_new() {
    let env = local_one("faults: []", "");
    for _ in 0..3 {
        let r = env.chat().await;
        assert_eq!(r.status, 200);
    }
    // One new connection, then two taken from the pool: three observations.
    let m = env.metrics();
    assert_eq!(
        metric(&m, "levee_upstream_connect_seconds_count", &[]),
        3.0,
        "{m}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_its_2xx_head_before_any_event_is_labelled_as_such() {
    let (env, r, _) = one_chat(
        "faults:\n  - { cut_stream_after: 0 }\n",
        "    retry: { max_attempts: 2, backoff: { base_ms: 1, max_ms: 2 } }\n",
        CHAT_STREAM,
        20000,
    )
    .await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(
        env.stats(0).requests_total,
        2,
        "retryable before the commit point"
    );
    let m = env.metrics();
    assert_eq!(attempts_labelled(&m, "cut_before_first_event"), 2.0, "{m}");
    assert_eq!(attempts_labelled(&m, "connect_error"), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_three_minute_stream_with_sdk_defaults_completes() {
    // A slow reasoning model: an event every 20 s, ~200 s in all (inside
    // the 60 s idle timer). The route sets no deadline (30 s default, 120 s
    // max): those bound the attempts before the first byte, not the
    // stream. The OpenAI SDK's default patience is 600 s; a caller that
    // says nothing has no deadline after the first byte.
    let env = local_one("faults:\n  - { chunk_delay: 20s }\n", "");
    let sdk = [("x-stainless-read-timeout", "600")];
    let t = paused_now();
    let (with_sdk, silent) = watchdog(Duration::from_secs(400), async {
        tokio::join!(
            env.post("/v1/chat/completions", CHAT_STREAM, &sdk),
            env.post("/v1/chat/completions", CHAT_STREAM, &[]),
        )
    })
    .await;
    assert!(t.elapsed() >= Duration::from_secs(180), "{:?}", t.elapsed());
    for r in [with_sdk, silent] {
        let text = r.text();
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_the_caller_stops_reading_is_counted_as_client_closed_when_it_goes() {
    use http_body_util::BodyExt;
    // An event a second: the caller leaves after the first.
    let env = local_one("faults:\n  - { chunk_delay: 1s }\n", "");
    let resp = env
        .app
        .call(post_request("/v1/chat/completions", CHAT_STREAM, &[]))
        .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = watchdog(WATCHDOG, body.frame()).await;
    assert!(first.is_some_and(|f| f.is_ok_and(|f| f.is_data())));
    let outcome =
        |m: &str, o: &str| metric(m, "levee_requests_total", &[&format!("outcome=\"{o}\"")]);
    let m = env.metrics();
    assert_eq!(
        outcome(&m, "success") + outcome(&m, "client_closed"),
        0.0,
        "open: {m}"
    );
    drop(body);
    let m = env.metrics();
    assert_eq!(outcome(&m, "client_closed"), 1.0, "{m}");
    assert_eq!(outcome(&m, "success"), 0.0, "{m}");
    assert_eq!(metric(&m, "levee_streams_failed_total", &[]), 0.0, "{m}");
}
