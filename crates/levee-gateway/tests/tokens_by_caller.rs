//! Tokens are counted by a bounded caller name, listed in `callers:` or
//! not, priced, and logged with the request. Its own binary, each test
//! under a capturing subscriber: it reads the log, and a log callsite
//! first reached by a test without a subscriber can stay silenced for the
//! whole binary.

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(30);
const CONFIG: &str =
    "providers:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [p]\n";

/// `levee_tokens_total` names every caller, listed in `callers:` or not:
/// the name it gave in `x-levee-caller`, `anonymous` when it gave none, and
/// `other` past the 64 names the census keeps apart. The request log line
/// carries the answer's tokens.
#[tokio::test(start_paused = true)]
async fn tokens_are_counted_by_a_bounded_caller_name_and_logged() {
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    let env = local(&["faults: []"], CONFIG);
    let post = |caller: Option<String>| {
        let env = &env;
        async move {
            let h: Vec<(&str, &str)> = caller
                .as_deref()
                .map(|c| vec![("x-levee-caller", c)])
                .unwrap_or_default();
            watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &h)).await
        }
    };
    assert_eq!(post(Some("billing".into())).await.status, 200);
    assert_eq!(post(None).await.status, 200);
    for i in 0..100 {
        assert_eq!(post(Some(format!("svc-{i}"))).await.status, 200);
    }
    let m = env.metrics();
    let input = |caller: &str| {
        metric(
            &m,
            "levee_tokens_total",
            &[
                &format!("caller=\"{caller}\""),
                "kind=\"input\"",
                "outcome=\"delivered\"",
            ],
        )
    };
    assert!(input("billing") > 0.0, "{m}");
    assert!(input("anonymous") > 0.0, "{m}");
    assert!(
        input("other") > 0.0,
        "names past the 64th share one label: {m}"
    );
    let callers: std::collections::BTreeSet<&str> = m
        .lines()
        .filter(|l| l.starts_with("levee_tokens_total{"))
        .filter_map(|l| l.split("caller=\"").nth(1)?.split('"').next())
        .collect();
    assert!(callers.len() <= 64 + 2, "{} caller labels", callers.len());
    let text = logs.text();
    assert!(
        text.contains("caller=\"billing\"")
            && text.contains("input_tokens=14")
            && text.contains("output_tokens=8"),
        "{text}"
    );
}

/// An OpenAI stream whose caller did not ask for usage (the SDKs' default)
/// is counted all the same: Levee asks the provider for the usage chunk
/// and leaves it, and every chunk's `"usage":null`, out of the caller's
/// stream. A caller that asked gets its usage as before.
#[tokio::test(start_paused = true)]
async fn a_stream_that_did_not_ask_for_usage_is_counted_and_unchanged() {
    // Every test of this binary logs under a subscriber: a log callsite
    // first reached without one can stay silenced for the whole binary.
    let (_logs, _guard) = capture_logs(tracing::Level::INFO);
    let env = local(&["faults: []"], CONFIG);
    let plain = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", plain, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(
        !text.contains("usage"),
        "the caller's stream has no usage: {text}"
    );
    assert!(
        text.contains("\"choices\":[{") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    for event in text.split("\n\n").filter(|e| e.starts_with("data: {")) {
        assert!(
            event.ends_with("]}"),
            "as the provider sends it without usage: {event}"
        );
    }
    let m = env.metrics();
    let output = metric(&m, "levee_tokens_total", &["kind=\"output\""]);
    assert!(output > 0.0, "the stream's tokens were counted: {m}");

    let asked = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", asked, &[])).await;
    let text = r.text();
    assert!(
        text.contains("\"usage\":{") && text.contains("\"usage\":null"),
        "{text}"
    );
    let m = env.metrics();
    assert!(
        metric(&m, "levee_tokens_total", &["kind=\"output\""]) > output,
        "{m}"
    );
}

/// With a price for the model, every answer's tokens are spend:
/// `levee_spend_usd_total` is tokens × price, and the log line says
/// `cost_usd`. A model without a price has tokens and no spend (unknown,
/// never 0).
#[tokio::test(start_paused = true)]
async fn spend_is_tokens_times_the_price_and_unknown_without_one() {
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    let priced = format!(
        "{CONFIG}prices:\n  - {{ provider: p, model: m, input_per_mtok: 2.00, output_per_mtok: 8.00 }}\n"
    );
    let env = local(&["faults: []"], &priced);
    for _ in 0..40 {
        let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &[])).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let m = env.metrics();
    let tokens = |kind: &str| metric(&m, "levee_tokens_total", &[&format!("kind=\"{kind}\"")]);
    let spend = metric(&m, "levee_spend_usd_total", &["outcome=\"delivered\""]);
    let expected = (tokens("input") * 2.0 + tokens("output") * 8.0) / 1e6;
    assert!(expected > 0.0, "{m}");
    assert!(
        (spend - expected).abs() < 1e-9,
        "spend {spend} vs {expected}: {m}"
    );
    assert!(logs.text().contains("cost_usd="), "{}", logs.text());

    let env = local(&["faults: []"], CONFIG);
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &[])).await;
    assert_eq!(r.status, 200);
    let m = env.metrics();
    assert!(metric(&m, "levee_tokens_total", &[]) > 0.0, "{m}");
    assert!(
        !m.contains("levee_spend_usd_total{"),
        "no price, no spend series: {m}"
    );
}

/// The Responses API and embeddings report their usage in their own
/// shapes (`input_tokens`/`output_tokens`; `prompt_tokens` alone): both
/// are counted, a stream of the Responses API from its last event.
#[tokio::test(start_paused = true)]
async fn responses_and_embeddings_are_counted() {
    let (_logs, _guard) = capture_logs(tracing::Level::INFO);
    let env = local(&["faults: []"], CONFIG);
    let tokens = |kind: &str| {
        let m = env.metrics();
        metric(&m, "levee_tokens_total", &[&format!("kind=\"{kind}\"")])
    };
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/responses", r#"{"model":"m","input":"hi"}"#, &[]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (input, output) = (tokens("input"), tokens("output"));
    assert!(input > 0.0 && output > 0.0, "{}", env.metrics());
    let r = watchdog(
        WATCHDOG,
        env.post(
            "/v1/responses",
            r#"{"model":"m","input":"hi","stream":true}"#,
            &[],
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(tokens("output") > output, "{}", r.text());
    let input = tokens("input");
    let r = watchdog(
        WATCHDOG,
        env.post(
            "/v1/embeddings",
            r#"{"model":"m","input":"hello there"}"#,
            &[],
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(tokens("input") > input, "{}", r.text());
}

/// A passthrough request's log line names its path's template, so files
/// and batches are told apart: `/v1/files`, `/v1/batches/{id}/cancel`.
#[tokio::test(start_paused = true)]
async fn a_passthrough_is_logged_by_its_paths_template() {
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    let config = format!("{CONFIG}    passthrough: [\"/v1/files\", \"/v1/batches/\"]\n");
    let env = local(&["faults: []"], &config);
    for path in ["/v1/files", "/v1/batches/batch_abc/cancel"] {
        let _ = watchdog(WATCHDOG, env.post(path, "{}", &[])).await;
    }
    let text = logs.text();
    assert!(text.contains("path=\"/v1/files\""), "{text}");
    assert!(text.contains("path=\"/v1/batches/{id}/cancel\""), "{text}");
    assert!(!text.contains("(passthrough)"), "{text}");
}
