//! What the amplification and deadline metrics record: a request whose
//! caller left is in `levee_attempts_per_request` like any other, and a
//! deadline at dispatch says where it came from (the caller's header, its
//! SDK's timeout, or the route's default), with callers that send none
//! counted by name.

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(30);

/// The caller leaves while its attempt is in flight (the provider takes
/// 5 s, the caller 1 s): the request is `client_closed`, and its one
/// attempt is in the amplification histogram.
#[tokio::test(start_paused = true)]
async fn a_request_whose_caller_left_counts_its_attempts() {
    let env = local(&["faults: [ { latency: 5s } ]"], &one_route(""));
    let gone = tokio::time::timeout(
        Duration::from_secs(1),
        env.post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "30000")]),
    )
    .await;
    assert!(gone.is_err(), "the caller left first");
    let m = env.metrics();
    assert_eq!(
        metric(&m, "levee_requests_total", &["outcome=\"client_closed\""]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "levee_attempts_per_request_count", &[]),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "levee_attempts_per_request_bucket", &["le=\"0.0\""]),
        0.0,
        "its attempt is counted: {m}"
    );
}

/// `deadline_source` tells a deadline the caller sent from its SDK's
/// timeout and from the route's default; a caller that sends none is
/// counted by name.
#[tokio::test(start_paused = true)]
async fn the_deadline_at_dispatch_says_where_it_came_from() {
    let env = local(&["faults: []"], &one_route(""));
    let sent = [
        vec![("x-timeout-ms", "20000"), ("x-levee-caller", "a")],
        vec![("x-stainless-timeout", "600"), ("x-levee-caller", "b")],
        vec![("x-levee-caller", "c")],
        vec![("x-levee-caller", "c")],
    ];
    for headers in &sent {
        let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, headers)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let m = env.metrics();
    let at_dispatch = |source: &str| {
        metric(
            &m,
            "levee_deadline_remaining_at_dispatch_seconds_count",
            &[&format!("deadline_source=\"{source}\"")],
        )
    };
    assert_eq!(
        (
            at_dispatch("header"),
            at_dispatch("sdk_timeout"),
            at_dispatch("default")
        ),
        (1.0, 1.0, 2.0),
        "{m}"
    );
    let none = |who: &str| {
        metric(
            &m,
            "levee_requests_without_deadline_total",
            &[&format!("caller=\"{who}\"")],
        )
    };
    assert_eq!((none("a"), none("b"), none("c")), (0.0, 0.0, 2.0), "{m}");
    // Every request's whole duration is in its own histogram.
    assert_eq!(
        metric(&m, "levee_request_duration_seconds_count", &[]),
        4.0,
        "{m}"
    );
}
