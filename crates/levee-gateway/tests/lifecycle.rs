//! Cancellation, shutdown, and secrets.

mod support;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WATCHDOG: Duration = Duration::from_secs(20);

fn raw_request(body: &str, extra: &str) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn a_caller_that_leaves_drops_the_upstream_request_at_once() {
    let env = one("faults:\n  - { stall: true }\n", "").await;
    let mut s = tokio::net::TcpStream::connect(env.gw.addr).await.unwrap();
    s.write_all(raw_request(CHAT, "x-timeout-ms: 60000\r\n").as_bytes())
        .await
        .unwrap();
    until(WATCHDOG, "the attempt reaches the provider", || {
        env.stats(0).in_flight == 1
    })
    .await;
    drop(s);
    // The caller allowed 60 s: an upstream request still open when the
    // watchdog (5 s) trips outlived its caller.
    until(
        Duration::from_secs(5),
        "the upstream request is dropped",
        || env.stats(0).client_closed == 1,
    )
    .await;
    assert_eq!(
        env.stats(0).requests_total,
        1,
        "no attempt after the caller left"
    );
    // The provider slot was given back.
    let m = env.metrics().await;
    assert_eq!(metric(&m, "levee_in_flight", &["provider=\"p\""]), 0.0);
    // And the request has its outcome: the caller went away.
    assert_eq!(
        metric(&m, "levee_requests_total", &["outcome=\"client_closed\""]),
        1.0,
        "{m}"
    );
    env.stop().await;
}

#[tokio::test]
async fn shutdown_lets_in_flight_requests_finish() {
    let env = one("faults:\n  - { latency: 600ms }\n", "").await;
    let client = env.client.clone();
    let url = env.url("/v1/chat/completions");
    let inflight = tokio::spawn(async move {
        let req = http::Request::post(url)
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(CHAT)))
            .unwrap();
        client.request(req).await.map(|r| r.status().as_u16())
    });
    until(WATCHDOG, "the request reaches the provider", || {
        env.stats(0).in_flight == 1
    })
    .await;
    let support::Env { mocks, gw, .. } = env;
    let stopping = tokio::spawn(gw.shutdown());
    let status = watchdog(WATCHDOG, inflight).await.unwrap();
    assert_eq!(
        status.ok(),
        Some(200),
        "the in-flight request was not cut off"
    );
    watchdog(WATCHDOG, stopping).await.unwrap();
    for m in mocks {
        m.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_503_at_the_end_of_the_grace_period_counts_the_attempts_sent() {
    // The first attempt fails, the second is held by the provider.
    let env = std::sync::Arc::new(local_one(
        "faults:\n  - { status: 503, to: 1ms }\n  - { stall: true }\n",
        "    retry: { max_attempts: 3, backoff: { base_ms: 5, max_ms: 5 } }\n",
    ));
    let e2 = std::sync::Arc::clone(&env);
    let waiting = tokio::spawn(async move {
        e2.post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "60000")])
            .await
    });
    until(
        WATCHDOG,
        "the second attempt is held at the provider",
        || {
            let s = env.stats(0);
            s.requests_total == 2 && s.in_flight == 1
        },
    )
    .await;
    env.app.shared().grace_over().fire();
    let r = watchdog(WATCHDOG, waiting).await.unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "shutting_down");
    assert_eq!(r.header("x-levee-attempts"), "2", "both attempts were sent");
}

#[tokio::test]
async fn provider_keys_never_appear_in_answers_metrics_or_logs() {
    std::env::set_var("LEVEE_TEST_SECRET_KEY", "sk-very-secret-4242");
    let env = start(
        &["faults:\n  - { status: 503 }\n"],
        "providers:\n  p: { api: openai, base_url: \"{mock0}\", api_key_env: LEVEE_TEST_SECRET_KEY }\nroutes:\n  - targets: [p]\n    retry: { backoff: { base_ms: 1, max_ms: 2 } }\n",
    )
    .await;
    let r = env.chat().await;
    assert!(!r.text().contains("very-secret"));
    assert!(!format!("{:?}", r.headers).contains("very-secret"));
    assert!(!env.metrics().await.contains("very-secret"));
    env.stop().await;
}

#[tokio::test]
async fn slow_and_oversized_clients_get_a_clear_answer() {
    let env = one("faults: []", "").await;
    // 1,000 headers: refused with a 431, not a panic.
    let mut s = tokio::net::TcpStream::connect(env.gw.addr).await.unwrap();
    let many: String = (0..1000).map(|i| format!("x-h{i}: v\r\n")).collect();
    s.write_all(raw_request(CHAT, &many).as_bytes())
        .await
        .unwrap();
    // The answer is read to the end of the connection; a connection closed
    // (or reset) without it fails, as does no answer before the watchdog.
    let mut buf = Vec::new();
    let read = watchdog(WATCHDOG, s.read_to_end(&mut buf)).await;
    let head = String::from_utf8_lossy(&buf);
    assert!(
        head.starts_with("HTTP/1.1 431"),
        "want a 431, got {read:?}: {head}"
    );
    // A body over the limit: 413 in dialect.
    let big = format!(
        r#"{{"model":"m","pad":"{}"}}"#,
        "x".repeat(11 * 1024 * 1024)
    );
    let r = env.post("/v1/chat/completions", &big, &[]).await;
    assert_eq!(r.status, 413);
    assert!(r.json()["error"].is_object());
    // Refused on its declared length, before a byte of it was read.
    let said = r.json()["error"]["message"].to_string();
    assert!(said.contains("request body of 11534"), "{said}");
    // Still serving.
    assert_eq!(env.chat().await.status, 200);
    assert_eq!(env.stats(0).requests_total, 1);
    env.stop().await;
}

#[tokio::test]
async fn record_writes_a_tape_that_levee_mock_replays() {
    let mock = support::mock("faults:\n  - { status: 503, retry_after: 0 }\n").await;
    let tape_path = std::env::temp_dir().join(format!("levee-tape-{}.jsonl", std::process::id()));
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nproviders:\n  p: {{ api: openai, base_url: \"{}\" }}\nroutes:\n  - targets: [p]\n    retry: {{ max_attempts: 1 }}\n",
        mock.url()
    );
    let config = levee_config::Config::parse(&text).unwrap();
    let opts = levee_gateway::Options {
        seed: 1,
        record: Some(tape_path.clone()),
        ..Default::default()
    };
    let gw = levee_gateway::spawn_with(config, opts, std::future::pending())
        .await
        .unwrap();
    let env = support::Env {
        mocks: vec![mock],
        gw,
        client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http(),
    };
    assert_eq!(env.chat().await.status, 503);
    env.mocks[0].set_faults(levee_mock::parse_faults("faults: []").unwrap());
    assert_eq!(env.chat().await.status, 200);
    assert_eq!(
        env.post("/v1/chat/completions", CHAT_STREAM, &[])
            .await
            .status,
        200
    );
    // The tape is written by its own thread.
    let read = || std::fs::read_to_string(&tape_path).unwrap_or_default();
    until(WATCHDOG, "three tape lines", || read().lines().count() >= 3).await;
    let text = read();
    let tape = levee_mock::Tape::parse(&text).expect("the mock reads the gateway's tape");
    let statuses: Vec<u16> = tape.entries().iter().map(|e| e.status).collect();
    assert_eq!(statuses, [503, 200, 200]);
    assert!(tape.entries()[2]
        .chunks
        .as_ref()
        .is_some_and(|c| c.len() > 2));
    // Replay the bad day: the same answers, in order, for free.
    let replay = levee_mock::spawn(
        "127.0.0.1:0".parse().unwrap(),
        levee_mock::MockOptions {
            replay: Some(tape),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let client = &env.client;
    for want in [503u16, 200] {
        let req = http::Request::post(format!("{}/v1/chat/completions", replay.url()))
            .body(http_body_util::Full::new(bytes::Bytes::from(CHAT)))
            .unwrap();
        assert_eq!(client.request(req).await.unwrap().status().as_u16(), want);
    }
    replay.shutdown().await;
    let _ = std::fs::remove_file(&tape_path);
    env.stop().await;
}
