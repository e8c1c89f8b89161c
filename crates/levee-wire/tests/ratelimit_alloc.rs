//! `ratelimit::read` runs on every answer the gateway receives: it makes no
//! heap allocation, whether the answer carries rate-limit fields or not.
//! A counting global allocator (the policy core's test kit) counts them.

#[path = "../../levee-policy/tests/kit/counting.rs"]
mod counting;

#[path = "kit/headers.rs"]
mod kit;

use counting::{allocations, Counting};
use kit::headers;
use levee_wire::ratelimit::read;

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn reading_allocates_nothing() {
    let plain = headers(&[
        ("content-type", "application/json"),
        ("x-request-id", "req_1"),
        ("anthropic-version", "2023-06-01"),
        ("date", "Wed, 15 Jan 2025 14:23:00 GMT"),
    ]);
    let openai = headers(&[
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-remaining-requests", "59"),
        ("x-ratelimit-reset-requests", "1s"),
        ("x-ratelimit-limit-tokens", "150000"),
        ("x-ratelimit-remaining-tokens", "149984"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ]);
    let anthropic = headers(&[
        ("anthropic-ratelimit-requests-limit", "4000"),
        ("anthropic-ratelimit-requests-remaining", "3999"),
        ("anthropic-ratelimit-requests-reset", "2025-01-15T14:24:00Z"),
        (
            "anthropic-ratelimit-output-tokens-reset",
            "2025-01-15T14:23:01.5Z",
        ),
    ]);
    let now = 1_736_950_980_000;
    let before = allocations();
    let got = (read(&plain, now), read(&openai, now), read(&anthropic, now));
    let made = allocations() - before;
    assert!(got.0.is_none() && got.1.is_some() && got.2.is_some());
    assert_eq!(made, 0, "read allocated {made} times");
}
