//! Heap held per open stream.
//!
//! A slow SSE stream can stay open for minutes, so what the gateway keeps
//! per open stream bounds how many it can hold. The counting global
//! allocator tracks the heap bytes allocated and not yet freed on this
//! thread; the test runs on a single-threaded runtime, so the client, the
//! gateway (full policy, real sockets) and the mock provider all allocate
//! here. The same client opens the same number of slow streams straight to
//! the mock and then through the gateway, and reads each up to its first
//! event; the difference per stream in the heap still held while they are
//! all open is the gateway's own, and it must stay within the budget below.
//!
//! Not a timing test: it counts bytes, it does not measure time.

mod support;

#[path = "../../levee-policy/tests/kit/counting.rs"]
mod counting;
use bytes::Bytes;
use counting::{live_bytes, Counting};
use http_body_util::{BodyExt, Full};
use std::time::Duration;
use support::{one, until, CHAT_STREAM};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Most heap bytes the gateway may hold per open stream (its caller
/// connection, its upstream connection and the relay), measured at
/// 46.4 KiB when this budget was set. The request's future (every await on
/// the request path) is freed when the response head is sent; kept for the
/// connection's life, as it was before, it held 62.4 KiB per stream here
/// and fails this budget.
const BUDGET: i64 = 52 * 1024;
const STREAMS: usize = 64;

/// Heap bytes still held per stream while `STREAMS` streams to `url` are
/// open, each read to its first event.
async fn held_per_stream(env: &support::Env, url: &str) -> i64 {
    let before = live_bytes();
    let mut open = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        let req = http::Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(CHAT_STREAM.as_bytes())))
            .unwrap();
        open.push(env.client.request(req));
    }
    let mut bodies = Vec::with_capacity(STREAMS);
    for resp in futures_util::future::join_all(open).await {
        let resp = resp.expect("answers");
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let first = body.frame().await.expect("a first event").expect("body");
        assert!(first.data_ref().is_some_and(|d| d.starts_with(b"data: ")));
        bodies.push(body);
    }
    let held = live_bytes() - before;
    drop(bodies);
    // Closed streams are freed as each side notices: the mock sees its
    // last stream end once the gateway has let go of both connections.
    until(Duration::from_secs(20), "every stream closed", || {
        env.stats(0).in_flight == 0
    })
    .await;
    held / STREAMS as i64
}

#[tokio::test]
async fn an_open_stream_holds_little_of_the_gateways_heap() {
    // Every event after the first comes a minute later: the streams stay
    // open while they are counted, then are dropped.
    let env = one("faults:\n  - { chunk_delay: 60s }\n", "").await;
    // Warm-up: lazily built state (metric families, pools, tables).
    held_per_stream(&env, &env.url("/v1/chat/completions")).await;
    let direct =
        held_per_stream(&env, &format!("{}/v1/chat/completions", env.mocks[0].url())).await;
    let via = held_per_stream(&env, &env.url("/v1/chat/completions")).await;
    let own = via - direct;
    eprintln!(
        "heap held per open stream: direct {direct} B, through the gateway {via} B, the gateway's own {own} B"
    );
    // A gateway whose work left this thread would count almost nothing.
    assert!(
        own >= BUDGET / 4,
        "only {own} bytes per stream counted: the gateway's work is not on this thread"
    );
    assert!(
        own <= BUDGET,
        "the gateway holds {own} heap bytes per open stream, over its budget of {BUDGET}"
    );
    env.gw.shutdown().await;
}
