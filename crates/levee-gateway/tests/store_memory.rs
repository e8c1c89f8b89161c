//! The in-process idempotency store's byte bound holds for the heap it
//! really uses: many small answers, each relayed as slices of a larger read
//! buffer (as the HTTP/1 client hands them over), stay within
//! `max_bytes` plus a small margin, however many are offered.
//!
//! Not a timing test: it measures bytes held, on one thread.

#[path = "../../levee-policy/tests/kit/counting.rs"]
mod counting;
use bytes::Bytes;
use counting::{live_bytes, Counting};
use http::{HeaderMap, HeaderValue};
use levee_gateway::idempotency::{Claimed, IdempotencyStore, Lease, Stored};
use levee_policy::Instant;
use std::sync::Arc;
use std::time::Duration;

#[global_allocator]
static GLOBAL: Counting = Counting;

const MAX_BYTES: u64 = 4 * 1024 * 1024;

/// An answer whose head and body are slices of one 16 KiB buffer, as a
/// connection's read buffer holds them.
fn answer(i: usize) -> Stored {
    let mut buf = vec![b' '; 16 * 1024];
    let body = format!(r#"{{"id":"c{i}","object":"chat.completion","choices":[]}}"#);
    buf[..body.len()].copy_from_slice(body.as_bytes());
    buf[1000..1010].copy_from_slice(b"req-000001");
    let buf = Bytes::from(buf);
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert(
        "x-request-id",
        HeaderValue::from_maybe_shared(buf.slice(1000..1010))
            .unwrap_or(HeaderValue::from_static("r")),
    );
    Stored {
        status: 200,
        headers,
        body: buf.slice(..body.len()),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn small_answers_stay_within_the_byte_bound() {
    let now = Instant::from_millis(0);
    let before = live_bytes();
    let store = Arc::new(IdempotencyStore::new(
        Duration::from_secs(600),
        1_000_000,
        MAX_BYTES,
    ));
    let mut stored = 0usize;
    for i in 0..60_000usize {
        let key = format!("key-{i:08}");
        if let Claimed::Lead(lease) = store.claim([7; 32], &key, [1; 32], now) {
            Lease::complete(lease, answer(i), now).await;
            stored += 1;
        }
    }
    let held = live_bytes() - before;
    let counted = store.bytes();
    println!(
        "{stored} answers offered, {} kept, {counted} bytes counted, {held} bytes held",
        store.len()
    );
    assert!(counted <= MAX_BYTES, "{counted}");
    // The store's own bookkeeping (the maps grow by doubling) comes on top:
    // a quarter of the bound at most.
    assert!(
        held <= (MAX_BYTES + MAX_BYTES / 4) as i64,
        "{held} bytes held against a bound of {MAX_BYTES} ({} kept)",
        store.len()
    );
    drop(store);
}
