//! Heap allocations per request on the whole request path.
//!
//! A counting global allocator (wrapping the system allocator) counts every
//! allocation made on the current thread. The test runs on a single-threaded
//! runtime, so the client, the gateway (full policy: deadline, retry budget,
//! breaker, admission caps, idempotency key, metrics) and the mock provider
//! all allocate on this thread. The same client sends the same chat
//! completion straight to the mock and then through the gateway; the
//! difference per request is the gateway's own count, and it must stay within
//! the budget below, so that a change that adds allocations per request shows
//! up here rather than only in a benchmark.
//!
//! Not a timing test: it counts, it does not measure.

mod support;

#[path = "../../levee-policy/tests/kit/counting.rs"]
mod counting;
use bytes::Bytes;
use counting::{allocations, Counting};
use http_body_util::{BodyExt, Full};
use support::{one, CHAT};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Most heap allocations the gateway may make per plain (non-streaming)
/// request, measured at 18 when this budget was set (an attempt's header
/// fields in a `HeaderMap` and `x-timeout-ms` made as a header value made
/// it 19; hyper's HTTP/1 server on the caller side, 21; hyper-util's legacy client and metric label `String`s built per request made it 60; hyper's
/// HTTP/1 client connection driven as a task of its own, 42; each
/// provider's endpoint URIs built per request and the generated
/// idempotency key made from a `String`, 39; the answer's headers copied
/// into a new map and `x-levee-*` values made per request, 32; request and
/// answer bodies gathered in `http_body_util`'s frame list, 30; four lists
/// of what each target is sent, 24; a request id made for every answer's
/// `x-request-id` and log line, 17 before it).
const BUDGET: u64 = 19;
const REQUESTS: u64 = 200;

/// Allocations for `REQUESTS` POSTs of `CHAT` to `url`, after a warm-up.
async fn count_requests(env: &support::Env, url: &str) -> u64 {
    let send = || async {
        let req = http::Request::post(url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(CHAT.as_bytes())))
            .unwrap();
        let resp = env.client.request(req).await.expect("answers");
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.expect("body").to_bytes()
    };
    for _ in 0..20 {
        send().await;
    }
    let before = allocations();
    for _ in 0..REQUESTS {
        send().await;
    }
    allocations() - before
}

#[tokio::test]
async fn a_request_through_the_gateway_stays_within_its_allocation_budget() {
    let env = one("", "").await;
    let direct = count_requests(&env, &format!("{}/v1/chat/completions", env.mocks[0].url())).await;
    let via = count_requests(&env, &env.url("/v1/chat/completions")).await;
    let per_request = via.saturating_sub(direct) / REQUESTS;
    eprintln!(
        "allocations per request: direct {}, through the gateway {}, the gateway's own {per_request}",
        direct / REQUESTS,
        via / REQUESTS
    );
    // The count is this thread's: a gateway whose work left the thread would
    // count almost nothing and pass. It has work of its own to count.
    assert!(
        per_request >= BUDGET / 4,
        "only {per_request} allocations per request counted: the gateway's work is not on this thread"
    );
    assert!(
        per_request <= BUDGET,
        "the gateway made {per_request} heap allocations per request, over its budget of {BUDGET}"
    );
    env.gw.shutdown().await;
}
