//! HTTP/2 to providers: `http2: always` speaks h2 with prior knowledge to
//! the mock (over in-memory pipes, under paused time), many streams share
//! one connection up to `http2_max_streams`, and retries, timeouts and
//! labels behave as over HTTP/1.1. The mock's stats are the oracle: it
//! counts connections and the requests that came over HTTP/2.

mod support;
use std::time::Duration;
use support::*;

/// Longer than any deadline below: under paused time it trips at once (in
/// real time) when the gateway waits on a timer it should not.
const WATCHDOG: Duration = Duration::from_secs(60);

/// One OpenAI provider (`{mock0}`) with `provider_extra` keys, and one
/// route with `route_extra`.
fn config(provider_extra: &str, route_extra: &str) -> String {
    format!(
        "providers:\n  p: {{ api: openai, base_url: \"{{mock0}}\"{provider_extra} }}\nroutes:\n  - targets: [p]\n{route_extra}"
    )
}

fn h2_one(faults: &str, route_extra: &str) -> Local {
    local(&[faults], &config(", http2: always", route_extra))
}

#[tokio::test(start_paused = true)]
async fn a_plain_answer_and_a_stream_come_over_http2() {
    let env = h2_one("faults: []", "");
    let r = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["object"], "chat.completion", "{}", r.text());
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT_STREAM, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").starts_with("text/event-stream"));
    assert!(r.text().contains("data: [DONE]"), "{}", r.text());
    let s = env.stats(0);
    assert_eq!(s.http2_requests, 2, "both over HTTP/2: {s:?}");
    assert_eq!(s.connections_total, 1, "one connection for both: {s:?}");
    // The idempotency key and the attempt's timeout travel as over HTTP/1.1.
    assert_eq!(s.idempotency_keys.len(), 2, "{s:?}");
    assert_eq!(s.timeout_ms_seen.count, 2, "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn http2_never_and_auto_on_plain_http_speak_http1() {
    for extra in [", http2: never", ""] {
        let env = local(&["faults: []"], &config(extra, ""));
        let r = watchdog(WATCHDOG, env.chat()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(env.stats(0).http2_requests, 0, "`{extra}`");
    }
}

/// `n` streams at once, each held open by slow chunks, over `http2: always`
/// with `http2_max_streams: cap`; returns the mock's stats.
async fn streams_at_once(n: usize, cap: u32) -> levee_mock::Stats {
    let env = local(
        &["faults:\n  - { chunk_delay: 200ms }\n"],
        &config(&format!(", http2: always, http2_max_streams: {cap}"), ""),
    );
    let all = (0..n).map(|_| env.post("/v1/chat/completions", CHAT_STREAM, &[]));
    let answers = watchdog(WATCHDOG, futures_util::future::join_all(all)).await;
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains("data: [DONE]"), "{}", r.text());
    }
    let s = env.stats(0);
    assert_eq!(s.max_in_flight, n as u64, "all open at once: {s:?}");
    assert_eq!(s.http2_requests, n as u64, "{s:?}");
    s
}

#[tokio::test(start_paused = true)]
async fn streams_share_one_connection_up_to_the_cap() {
    let s = streams_at_once(4, 4).await;
    assert_eq!(s.connections_total, 1, "{s:?}");
    let s = streams_at_once(5, 4).await;
    assert_eq!(
        s.connections_total, 2,
        "the fifth stream opens another: {s:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_finished_stream_frees_its_place_on_the_connection() {
    // Streams one after another under a cap of 1: each finds the
    // connection free again, so one connection carries them all.
    let env = local(
        &["faults:\n  - { chunk_delay: 10ms }\n"],
        &config(", http2: always, http2_max_streams: 1", ""),
    );
    for _ in 0..3 {
        let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT_STREAM, &[])).await;
        assert_eq!(r.status, 200, "{}", r.text());
        // The end of the stream reaches the connection's frame count a
        // moment after the caller's last byte.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let s = env.stats(0);
    assert_eq!(s.connections_total, 1, "{s:?}");
    assert_eq!(s.http2_requests, 3, "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn a_retryable_503_is_retried_over_http2_with_one_idempotency_key() {
    let env = h2_one(
        "faults:\n  - { status: 503, to: 1ms }\n",
        "    retry: { max_attempts: 3, backoff: { base_ms: 5, max_ms: 5 } }\n",
    );
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &[("idempotency-key", "abc")]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "2");
    let s = env.stats(0);
    assert_eq!(
        s.idempotency_keys.values().collect::<Vec<_>>(),
        [&2],
        "one key on both attempts: {s:?}"
    );
    assert_eq!(s.http2_requests, 2, "{s:?}");
    assert_eq!(s.connections_total, 1, "{s:?}");
    let m = env.metrics();
    assert_eq!(attempts_labelled(&m, "http_5xx"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_ends_a_stalled_http2_attempt() {
    let env = h2_one(
        "faults:\n  - { stall: true }\n",
        "    retry: { max_attempts: 1 }\n    attempt_timeout: 700ms\n",
    );
    let (r, took) = env.timed_chat(CHAT, 20000).await;
    assert_eq!(took, Duration::from_millis(700));
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(attempts_labelled(&env.metrics(), "timeout"), 1.0);
    // The given-up stream is reset (RST_STREAM): the mock sees its client
    // leave while the connection stays.
    until(WATCHDOG, "the mock sees the stream end", || {
        env.stats(0).client_closed == 1
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn first_byte_timeout_gives_up_on_a_silent_http2_stream() {
    let env = h2_one(
        "faults:\n  - { stall: true }\n",
        "    retry: { max_attempts: 1 }\n    first_byte_timeout: 300ms\n",
    );
    let (r, took) = env.timed_chat(CHAT_STREAM, 20000).await;
    assert_eq!(took, Duration::from_millis(300));
    assert_ne!(r.status, 200, "{}", r.text());
    assert_eq!(attempts_labelled(&env.metrics(), "timeout"), 1.0);
    assert_eq!(env.stats(0).http2_requests, 1);
}

/// A hand-written HTTP/2-only provider at `http://h2only.test` (h2 with
/// prior knowledge, nothing else): refuses the first `refuse` streams with
/// `REFUSED_STREAM`, answers the rest with a chat completion. Counts the
/// connections opened and the streams received.
#[derive(Clone, Default)]
struct H2Only {
    conns: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    streams: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;

impl H2Only {
    fn dial(&self, refuse: usize) -> levee_gateway::transport::Dial {
        self.dial_with(refuse, None, Duration::ZERO)
    }

    /// [`H2Only::dial`] whose first connection is shut down (`GOAWAY` with
    /// `NO_ERROR`, last stream 0) as soon as it opens, before any stream.
    fn dial_going_away(&self) -> levee_gateway::transport::Dial {
        use std::sync::atomic::Ordering::SeqCst;
        let serve = self.dial(0);
        let this = self.clone();
        std::sync::Arc::new(move |uri: &http::Uri| {
            if this.conns.load(SeqCst) > 0 {
                return serve(uri);
            }
            this.conns.fetch_add(1, SeqCst);
            let (client, server) = tokio::io::duplex(64 * 1024);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(server).await else {
                    return;
                };
                conn.abrupt_shutdown(h2::Reason::NO_ERROR);
                while let Some(Ok(_)) = conn.accept().await {}
            });
            Some(client)
        })
    }

    /// [`H2Only::dial`] with the server's `SETTINGS_MAX_CONCURRENT_STREAMS`
    /// and each answer held for `hold`.
    fn dial_with(
        &self,
        refuse: usize,
        max_streams: Option<u32>,
        hold: Duration,
    ) -> levee_gateway::transport::Dial {
        use std::sync::atomic::Ordering::SeqCst;
        let this = self.clone();
        std::sync::Arc::new(move |uri: &http::Uri| {
            if uri.host() != Some("h2only.test") {
                return None;
            }
            let (client, server) = tokio::io::duplex(64 * 1024);
            this.conns.fetch_add(1, SeqCst);
            let streams = std::sync::Arc::clone(&this.streams);
            tokio::spawn(async move {
                let mut builder = h2::server::Builder::new();
                if let Some(n) = max_streams {
                    builder.max_concurrent_streams(n);
                }
                let Ok(mut conn) = builder.handshake(server).await else {
                    return;
                };
                while let Some(Ok((_req, mut respond))) = conn.accept().await {
                    if streams.fetch_add(1, SeqCst) < refuse {
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                        continue;
                    }
                    tokio::spawn(async move {
                        tokio::time::sleep(hold).await;
                        let head = http::Response::builder()
                            .header("content-type", "application/json")
                            .body(())
                            .unwrap();
                        if let Ok(mut body) = respond.send_response(head, false) {
                            let answer = bytes::Bytes::from_static(ANSWER.as_bytes());
                            let _ = body.send_data(answer, true);
                        }
                    });
                }
            });
            Some(client)
        })
    }

    fn count(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::SeqCst;
        (self.conns.load(SeqCst), self.streams.load(SeqCst))
    }
}

fn h2only_config(http2: &str) -> String {
    format!(
        "providers:\n  p: {{ api: openai, base_url: \"http://h2only.test\", http2: {http2} }}\nroutes:\n  - targets: [p]\n    retry: {{ max_attempts: 1 }}\n"
    )
}

#[tokio::test(start_paused = true)]
async fn a_refused_stream_goes_once_more_on_a_new_connection() {
    let server = H2Only::default();
    let env = local_dial(vec![], &h2only_config("always"), server.dial(1));
    let r = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Unprocessed, so not an attempt of the retry policy (max_attempts: 1).
    assert_eq!(r.header("x-levee-attempts"), "1");
    assert_eq!(server.count(), (2, 2), "(connections, streams)");
    // One attempt's wait for a connection, timed once though it took two.
    let m = env.metrics();
    assert_eq!(
        metric(&m, "levee_upstream_connect_seconds_count", &[]),
        1.0,
        "{m}"
    );

    // Refused twice: the one resend is all, and the attempt fails.
    let server = H2Only::default();
    let env = local_dial(vec![], &h2only_config("always"), server.dial(2));
    let r = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(server.count(), (2, 2), "(connections, streams)");
    assert_eq!(attempts_labelled(&env.metrics(), "connect_error"), 1.0);
}

#[tokio::test(start_paused = true)]
async fn http1_to_an_http2_only_server_fails_as_a_connection_error() {
    let server = H2Only::default();
    let env = local_dial(vec![], &h2only_config("never"), server.dial(0));
    let r = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(attempts_labelled(&env.metrics(), "connect_error"), 1.0);
    assert_eq!(server.count(), (1, 0), "(connections, streams)");
}

#[tokio::test(start_paused = true)]
async fn the_servers_own_stream_limit_caps_a_connection_below_http2_max_streams() {
    // The server allows 2 streams at once; `http2_max_streams` is 100. A
    // third stream on the same connection would wait inside h2 for one of
    // the first two to end: it goes on a new connection instead.
    let server = H2Only::default();
    let dial = server.dial_with(0, Some(2), Duration::from_secs(1));
    let env = local_dial(vec![], &h2only_config("always"), dial);
    let first = env.chat();
    let rest = async {
        until(WATCHDOG, "the first stream reaches the server", || {
            server.count().1 == 1
        })
        .await;
        futures_util::future::join(env.chat(), env.chat()).await
    };
    let t = paused_now();
    let (a, (b, c)) = watchdog(WATCHDOG, futures_util::future::join(first, rest)).await;
    for r in [a, b, c] {
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "none waited for a slot"
    );
    assert_eq!(server.count(), (2, 3), "(connections, streams)");
}

#[tokio::test(start_paused = true)]
async fn auto_on_https_with_an_http1_provider_settles_on_http1_for_requests_that_came_together() {
    // In-process pipes carry no TLS, so no ALPN: the provider "picks"
    // HTTP/1.1. Requests arriving before the first connection negotiated
    // wait for it, then go to the HTTP/1.1 pool, each on its own connection.
    let mock = levee_mock::InProcess::new(levee_mock::MockOptions::default());
    let served = mock.clone();
    let dial: levee_gateway::transport::Dial = std::sync::Arc::new(move |uri: &http::Uri| {
        (uri.host() == Some("h1tls.test")).then(|| served.connect())
    });
    let config = "providers:\n  p: { api: openai, base_url: \"https://h1tls.test\" }\nroutes:\n  - targets: [p]\n";
    let env = local_dial(vec![], config, dial);
    let all = (0..4).map(|_| env.post("/v1/chat/completions", CHAT_STREAM, &[]));
    for r in watchdog(WATCHDOG, futures_util::future::join_all(all)).await {
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let r = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let s = mock.stats();
    assert_eq!((s.requests_total, s.http2_requests), (5, 0), "{s:?}");
    assert_eq!(s.connections_total, 4, "the fifth reused one: {s:?}");
}

/// The connection is gone before the request was written: hyper hands the
/// request back, and it goes once more on a new connection (as a request an
/// idle HTTP/1.1 connection refused does).
#[tokio::test(start_paused = true)]
async fn a_request_the_server_shut_the_connection_down_before_goes_on_a_new_one() {
    let server = H2Only::default();
    let env = local_dial(vec![], &h2only_config("always"), server.dial_going_away());
    let r = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-attempts"), "1");
    assert_eq!(server.count(), (2, 1), "(connections, streams answered)");
}

/// A provider that takes the connection and then says nothing, ever: gone
/// without a FIN or a reset, as behind a NAT that dropped the flow.
#[tokio::test(start_paused = true)]
async fn a_silent_http2_connection_is_given_up_when_its_ping_goes_unanswered() {
    let dial: levee_gateway::transport::Dial = std::sync::Arc::new(|_: &http::Uri| {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let _held_open = theirs;
            std::future::pending::<()>().await
        });
        Some(ours)
    });
    let config = "providers:\n  p: { api: openai, base_url: \"http://silent.test\", http2: always }\nroutes:\n  - targets: [p]\n    retry: { max_attempts: 1 }\n    deadline: { default: 600s, max: 600s }\n    attempt_timeout: 600s\n";
    let env = local_dial(vec![], config, dial);
    let (r, took) = env.timed_chat(CHAT, 600_000).await;
    assert_eq!(r.status, 502, "{}", r.text());
    // A ping after 20 s of silence, unanswered for 10 s: the connection is
    // closed at 30 s, long before the attempt's 600 s.
    assert!(
        took >= Duration::from_secs(20) && took <= Duration::from_secs(35),
        "gave up after {took:?}"
    );
    assert_eq!(attempts_labelled(&env.metrics(), "connect_error"), 1.0);
}
