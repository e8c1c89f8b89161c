//! Heap held per open stream.
//!
//! A slow SSE stream can stay open for minutes, so what the gateway keeps
//! per open stream bounds how many it can hold. The counting global
//! allocator tracks the heap bytes allocated and not yet freed on this
//! thread. The client and the gateway (full policy, real sockets) run on
//! this thread's runtime; the mock provider runs on a runtime of its own
//! thread, so its allocations are not counted. The same client opens the
//! same number of slow streams straight to the mock and then through the
//! gateway, and reads each up to its first event; the difference per stream
//! in the heap still held while they are all open is the gateway's own, and
//! it must stay within the budget.
//!
//! Not a timing test: it counts bytes, it does not measure time.

mod support;

#[path = "../../levee-policy/tests/kit/counting.rs"]
mod counting;
use bytes::Bytes;
use counting::{live_bytes, Counting};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use levee_mock::MockHandle;
use std::sync::Arc;
use std::time::Duration;
use support::{until, CHAT_STREAM};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Most heap bytes the gateway may hold per open stream, over HTTP/1.1 or
/// HTTP/2 to the provider: its caller connection, its share of the
/// upstream connection and the relay. Measured when this budget was set:
/// 9.6 KiB over HTTP/1.1 (a connection per stream, driven inside the
/// request's task), 9.7 KiB over HTTP/2 (one connection for all streams;
/// the figure moves with how full h2's shared buffers happen to be in a
/// build); since the connection's service future no longer wraps the
/// handler in two more layers (each kept the request beside the future
/// that took it), 8.6 and 8.8 KiB. Each of these fails it: hyper's HTTP/1 server on the caller side
/// (its connection's 8 KiB read and write buffers, its body channel:
/// 22.7-24.5 KiB); hyper's HTTP/1 client, whose connection is a task of its
/// own with a dispatch channel and an 8 KiB write buffer (46.5-47.7 KiB
/// with hyper's server); the request's future (every await on the request
/// path) kept for the caller connection's life instead of freed when the
/// response head is sent (62.4 KiB with hyper's server).
const BUDGET: i64 = 14 * 1024;

const STREAMS: usize = 64;

/// Every event after the first comes a minute later: the streams stay open
/// while they are counted, then are dropped.
const SLOW: &str = "faults:\n  - { chunk_delay: 60s }\n";

/// A mock served by a runtime on a thread of its own, stopped on drop.
struct RemoteMock {
    mock: Arc<MockHandle>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RemoteMock {
    fn start(faults: &'static str) -> RemoteMock {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the mock");
            rt.block_on(async move {
                let mock = Arc::new(support::mock(faults).await);
                tx.send(Arc::clone(&mock))
                    .expect("the test waits for the mock");
                let _ = stopped.await;
            });
        });
        let mock = rx.recv().expect("the mock starts");
        RemoteMock {
            mock,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for RemoteMock {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Heap bytes still held on this thread per stream while `STREAMS` streams
/// to `url` are open, each read to its first event.
async fn held_per_stream(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
    mock: &MockHandle,
) -> i64 {
    let before = live_bytes();
    let mut open = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        let req = http::Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(CHAT_STREAM.as_bytes())))
            .unwrap();
        open.push(client.request(req));
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
        mock.stats().in_flight == 0
    })
    .await;
    held / STREAMS as i64
}

/// The gateway's own heap per open stream, its provider speaking `http2`.
async fn gateways_own(http2: &str) -> i64 {
    let remote = RemoteMock::start(SLOW);
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nproviders:\n  p: {{ api: openai, base_url: \"{}\", http2: {http2} }}\nroutes:\n  - targets: [p]\n",
        remote.mock.url()
    );
    let gw = support::spawn_text(&text, 42).await;
    let client = support::http_client();
    let via = format!("http://{}/v1/chat/completions", gw.addr);
    let direct = format!("{}/v1/chat/completions", remote.mock.url());
    // Warm-up: lazily built state (metric families, pools, tables).
    held_per_stream(&client, &via, &remote.mock).await;
    let measure = async || {
        let direct = held_per_stream(&client, &direct, &remote.mock).await;
        let through = held_per_stream(&client, &via, &remote.mock).await;
        (direct, through)
    };
    let (mut direct, mut through) = measure().await;
    if through - direct < BUDGET / 4 {
        // One CI run in four counted 29.7 KiB per stream through the
        // gateway where every other run counts 37.0 (part of the gateway's
        // heap not seen on this thread that once; cause not found): it is
        // measured again before it counts as a failure.
        (direct, through) = measure().await;
    }
    let own = through - direct;
    eprintln!(
        "http2: {http2}: heap held per open stream: the client alone {direct} B, through the gateway {through} B, the gateway's own {own} B"
    );
    gw.shutdown().await;
    own
}

fn within(own: i64, budget: i64, how: &str) {
    // A gateway whose work left this thread would count almost nothing.
    assert!(
        own >= budget / 4,
        "only {own} bytes per stream counted: the gateway's work is not on this thread"
    );
    assert!(
        own <= budget,
        "{how}: the gateway holds {own} heap bytes per open stream, over its budget of {budget}"
    );
}

#[tokio::test]
async fn an_open_stream_holds_little_of_the_gateways_heap() {
    within(gateways_own("never").await, BUDGET, "over HTTP/1.1");
}

#[tokio::test]
async fn over_http2_an_open_stream_holds_as_little() {
    within(gateways_own("always").await, BUDGET, "over HTTP/2");
}
