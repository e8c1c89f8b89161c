//! A committed stream's end closes its request's books: a stream that
//! breaks off after its first event is counted and logged as failed, once,
//! when it ends. Alone in its test binary: a log subscriber set for one
//! test's thread misses lines when other tests register the same log
//! call sites from their threads at the same time.

mod support;
use support::*;

#[tokio::test(start_paused = true)]
async fn a_stream_that_breaks_off_after_its_first_event_is_counted_and_logged_as_failed() {
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    let (env, r, _) = one_chat(
        "faults:\n  - { cut_stream_after: 1 }\n",
        "",
        CHAT_STREAM,
        20000,
    )
    .await;
    assert_eq!(r.status, 200, "committed: the head was relayed");
    let text = r.text();
    assert!(text.contains("broke off"), "{text}");
    assert_eq!(env.stats(0).requests_total, 1, "never restarted");
    let m = env.metrics();
    let outcome = |o: &str| metric(&m, "levee_requests_total", &[&format!("outcome=\"{o}\"")]);
    assert_eq!(outcome("upstream_error"), 1.0, "{m}");
    assert_eq!(outcome("success"), 0.0, "{m}");
    assert_eq!(metric(&m, "levee_streams_failed_total", &[]), 1.0, "{m}");
    let log = logs.text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("levee::request"))
        .collect();
    assert_eq!(lines.len(), 1, "one line per request, at its end: {log}");
    assert!(lines[0].contains("WARN"), "{log}");
    assert!(lines[0].contains("outcome=\"upstream_error\""), "{log}");
}
