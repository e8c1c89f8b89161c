//! A provider's `max_connections`: at the limit an attempt waits for a
//! connection to come free (timed in `levee_upstream_pool_wait_seconds`)
//! for a quarter of its time, then is refused (`pool_exhausted`) rather
//! than queued past its share; a connection that comes back in time is
//! taken.

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);

fn config() -> String {
    "providers:\n  p: { api: openai, base_url: \"{mock0}\", max_connections: 1 }\nroutes:\n  - targets: [p]\n    retry: { max_attempts: 1 }\n".to_string()
}

/// One connection, held 5 s by the first request: the second waits its
/// quarter (2 s of an 8 s attempt) and is refused with `pool_exhausted`,
/// sent nowhere.
#[tokio::test(start_paused = true)]
async fn at_max_connections_an_attempt_waits_its_share_then_is_refused() {
    let env = local(&["faults: [ { latency: 5s } ]"], &config());
    let headers = [("x-timeout-ms", "8000")];
    let first = env.post("/v1/chat/completions", CHAT, &headers);
    let second = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let t = paused_now();
        let r = env.post("/v1/chat/completions", CHAT, &headers).await;
        (r, t.elapsed())
    };
    let (a, (b, waited)) = watchdog(WATCHDOG, async { tokio::join!(first, second) }).await;
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(b.status, 503, "{}", b.text());
    assert_eq!(b.header("x-levee-reason"), "pool_exhausted", "{}", b.text());
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_millis(3000),
        "waited {waited:?}"
    );
    assert_eq!(
        env.stats(0).requests_total,
        1,
        "the refused one was sent nowhere"
    );
    let m = env.metrics();
    assert!(
        metric(&m, "levee_upstream_pool_wait_seconds_count", &[]) >= 1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "levee_requests_total", &["outcome=\"pool_exhausted\""]),
        1.0,
        "{m}"
    );
}

/// The connection comes back within the second request's share: it is
/// taken, and the wait (about 1 s) is what the histogram shows.
#[tokio::test(start_paused = true)]
async fn a_connection_that_comes_back_in_time_is_taken() {
    let env = local(&["faults: [ { latency: 1s } ]"], &config());
    let headers = [("x-timeout-ms", "8000")];
    let first = env.post("/v1/chat/completions", CHAT, &headers);
    let second = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        env.post("/v1/chat/completions", CHAT, &headers).await
    };
    let (a, b) = watchdog(WATCHDOG, async { tokio::join!(first, second) }).await;
    assert_eq!((a.status, b.status), (200, 200), "{}", b.text());
    assert_eq!(env.stats(0).requests_total, 2);
    let m = env.metrics();
    let waited = metric(&m, "levee_upstream_pool_wait_seconds_sum", &[]);
    assert!((0.9..1.2).contains(&waited), "waited {waited} s: {m}");
}
