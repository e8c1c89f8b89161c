//! Callers' rules and what spend shows: a `models` list refuses other
//! models (403), a budget stops its caller at the call after the one that
//! spent it (429 `spend_limit`, here and across two replicas sharing
//! Redis), a request limit per minute holds (429 `caller_limit`), work
//! nobody received is undelivered spend, and `GET /admin/spend` answers
//! JSON. The mock answers the chat request with 14 input and 8 output
//! tokens; at $1,000 per million each, a call costs $0.022.

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(30);
const PRICED: &str = "providers:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [p]\nprices:\n  - { provider: p, model: m, input_per_mtok: 1000, output_per_mtok: 1000 }\n";

fn as_caller(who: &str) -> [(&str, &str); 1] {
    [("x-levee-caller", who)]
}

/// A budget of $0.05 a day: calls of $0.022 leave $0.044 spent after two,
/// so the third is answered (its cost is known only after it) and the
/// fourth is refused, saying when the budget resets and not to retry.
/// Another caller is not stopped.
#[tokio::test(start_paused = true)]
async fn a_budget_stops_its_caller_at_the_call_after_it_is_spent() {
    let config =
        format!("{PRICED}callers:\n  - {{ name: team-a, budget: {{ usd: 0.05, per: day }} }}\n");
    let env = local(&["faults: []"], &config);
    let mut answered = 0;
    let refused = loop {
        let r = watchdog(
            WATCHDOG,
            env.post("/v1/chat/completions", CHAT, &as_caller("team-a")),
        )
        .await;
        if r.status != 200 {
            break r;
        }
        answered += 1;
        assert!(answered < 10, "never stopped");
    };
    assert_eq!(answered, 3, "{}", refused.text());
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.header("x-levee-reason"), "spend_limit");
    assert_eq!(refused.header("x-should-retry"), "false");
    assert!(!refused.header("retry-after").is_empty());
    let text = refused.text();
    assert!(
        text.contains("team-a") && text.contains("$0.05") && text.contains("resets at"),
        "{text}"
    );
    assert_eq!(
        env.stats(0).requests_total,
        3,
        "the refused call reached no provider"
    );
    let other = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &as_caller("team-b")),
    )
    .await;
    assert_eq!(other.status, 200);
    let m = env.metrics();
    assert!(
        metric(&m, "levee_rejected_total", &["reason=\"spend_limit\""]) >= 1.0,
        "{m}"
    );
}

/// A key's `models` list: another model is refused with 403, naming the
/// caller and the model, before any provider is asked.
#[tokio::test(start_paused = true)]
async fn a_models_list_refuses_other_models() {
    let config =
        format!("{PRICED}callers:\n  - {{ name: batch, models: [\"m\", \"gpt-4o-mini*\"] }}\n");
    let env = local(&["faults: []"], &config);
    let ok = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &as_caller("batch")),
    )
    .await;
    assert_eq!(ok.status, 200);
    let prefixed = CHAT.replace("\"m\"", "\"gpt-4o-mini-2024-07-18\"");
    let ok = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", &prefixed, &as_caller("batch")),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    let other = CHAT.replace("\"m\"", "\"gpt-4o\"");
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", &other, &as_caller("batch")),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "model_not_allowed");
    assert!(
        r.text().contains("`batch`") && r.text().contains("`gpt-4o`"),
        "{}",
        r.text()
    );
    assert_eq!(env.stats(0).requests_total, 2);
    // Callers without rules are not limited.
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", &other, &as_caller("web")),
    )
    .await;
    assert_eq!(r.status, 200);
}

/// `requests_per_minute: 3`: the fourth request within the minute is
/// refused with `caller_limit` and a `retry-after`; a minute and a half
/// later, the caller is under its limit again.
#[tokio::test(start_paused = true)]
async fn a_request_limit_per_minute_holds_and_frees_up() {
    let config =
        format!("{PRICED}callers:\n  - {{ name: cron, limits: {{ requests_per_minute: 3 }} }}\n");
    let env = local(&["faults: []"], &config);
    let post = || env.post("/v1/chat/completions", CHAT, &[("x-levee-caller", "cron")]);
    for _ in 0..3 {
        assert_eq!(watchdog(WATCHDOG, post()).await.status, 200);
    }
    let r = watchdog(WATCHDOG, post()).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "caller_limit");
    let wait: u64 = r.header("retry-after").parse().unwrap_or(0);
    assert!((1..=121).contains(&wait), "retry-after {wait}");
    assert!(r.text().contains("requests_per_minute"), "{}", r.text());
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(watchdog(WATCHDOG, post()).await.status, 200);
}

/// The orphaned-work story: the provider takes 5 s, the caller waits 1 s.
/// The provider had read the prompt when the attempt was given up: its
/// input, estimated from the request, is undelivered spend, marked
/// partial; nothing is delivered spend.
#[tokio::test(start_paused = true)]
async fn work_nobody_received_is_undelivered_spend() {
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    let env = local(&["faults: [ { latency: 5s } ]"], PRICED);
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "1000")]),
    )
    .await;
    assert_eq!(r.status, 504, "{}", r.text());
    let m = env.metrics();
    let undelivered = metric(&m, "levee_spend_usd_total", &["outcome=\"undelivered\""]);
    let expected = (CHAT.len() / 4) as f64 * 1000.0 / 1e6;
    assert!(
        (undelivered - expected).abs() < 1e-9,
        "{undelivered} vs {expected}: {m}"
    );
    assert!(
        !m.contains("levee_spend_usd_total{") || !m.contains("outcome=\"delivered\"} "),
        "{m}"
    );
    let text = logs.text();
    assert!(text.contains("usage_partial=true"), "{text}");
}

/// A stream cut at the caller's deadline: what arrived (a token per delta
/// event at least) and the prompt are undelivered spend.
#[tokio::test(start_paused = true)]
async fn a_stream_cut_short_is_undelivered_spend() {
    let env = local(&["faults: [ { chunk_delay: 400ms } ]"], PRICED);
    let r = watchdog(
        WATCHDOG,
        env.post(
            "/v1/chat/completions",
            CHAT_STREAM,
            &[("x-timeout-ms", "1000")],
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("deadline_exceeded"), "{}", r.text());
    let m = env.metrics();
    let out = metric(
        &m,
        "levee_tokens_total",
        &["kind=\"output\"", "outcome=\"undelivered\""],
    );
    assert!(out >= 1.0, "{m}");
    assert!(
        metric(&m, "levee_spend_usd_total", &["outcome=\"undelivered\""]) > 0.0,
        "{m}"
    );
}

/// `limits.caller_names: 5`: forty callers' names leave five names and
/// `other` in the caller label.
#[tokio::test(start_paused = true)]
async fn the_caller_label_keeps_n_names_and_other() {
    let config = format!("limits: {{ caller_names: 5 }}\n{PRICED}");
    let env = local(&["faults: []"], &config);
    for i in 0..40 {
        let who = format!("svc-{i}");
        let r = watchdog(
            WATCHDOG,
            env.post("/v1/chat/completions", CHAT, &as_caller(&who)),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &[])).await;
    assert_eq!(r.status, 200);
    let m = env.metrics();
    for family in [
        "levee_tokens_total{",
        "levee_spend_usd_total{",
        "levee_caller_requests_total{",
    ] {
        let callers: std::collections::BTreeSet<&str> = m
            .lines()
            .filter(|l| l.starts_with(family))
            .filter_map(|l| l.split("caller=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(callers.len(), 5 + 1, "{family}: {callers:?}");
        assert!(callers.contains("other"), "{callers:?}");
    }
}

async fn admin_get(env: &Env, path: &str) -> (u16, serde_json::Value) {
    let r = env.admin(path).await;
    let json = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
    (r.status, json)
}

/// `GET /admin/spend?by=caller&since=24h`: a row per caller with its
/// dollars, delivered and undelivered, and its tokens; the total adds up.
#[tokio::test]
async fn admin_spend_answers_json_by_caller() {
    let env = start(&["faults: []"], PRICED).await;
    for who in ["a", "a", "b"] {
        let r = watchdog(
            WATCHDOG,
            env.post("/v1/chat/completions", CHAT, &as_caller(who)),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    let (status, j) = watchdog(
        WATCHDOG,
        admin_get(&env, "/admin/spend?by=caller&since=24h"),
    )
    .await;
    assert_eq!(status, 200, "{j}");
    assert_eq!(j["by"], "caller");
    assert_eq!(j["source"], "local");
    let rows = j["rows"].as_array().expect("rows");
    let row = |name: &str| rows.iter().find(|r| r["caller"] == name).cloned();
    let a = row("a").expect("caller a");
    assert!(
        (a["usd"].as_f64().unwrap_or(0.0) - 0.044).abs() < 1e-6,
        "{j}"
    );
    assert_eq!(a["input_tokens"], 28);
    assert_eq!(a["undelivered_usd"].as_f64(), Some(0.0));
    assert!(
        (j["total"]["usd"].as_f64().unwrap_or(0.0) - 0.066).abs() < 1e-6,
        "{j}"
    );
    let (status, j) = watchdog(WATCHDOG, admin_get(&env, "/admin/spend?by=model")).await;
    assert_eq!(status, 200);
    assert_eq!(j["rows"][0]["model"], "m", "{j}");
    let (status, _) = watchdog(WATCHDOG, admin_get(&env, "/admin/spend?since=forever")).await;
    assert_eq!(status, 400);
    env.stop().await;
}

/// Two replicas sharing Redis: the caller's budget is spent wherever its
/// calls land, and the stop holds on both.
#[tokio::test]
async fn a_budget_stop_holds_across_two_replicas() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    redis.ready(WATCHDOG).await;
    let config = format!(
        "state: {{ backend: redis, url: \"redis://127.0.0.1:{p}\", key_prefix: \"sp{p}\", timeout: 200ms }}\n{PRICED}callers:\n  - {{ name: team-a, budget: {{ usd: 0.05, per: day }} }}\n",
        p = redis.port
    );
    let a = start(&["faults: []"], &config).await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\n{}",
        config.replace("{mock0}", &a.mocks[0].url())
    );
    let b = spawn_text(&text, 7).await;
    let mut statuses = Vec::new();
    for i in 0..6 {
        let addr = if i % 2 == 0 { a.gw.addr } else { b.addr };
        let req = post_request(
            &format!("http://{addr}/v1/chat/completions"),
            CHAT,
            &as_caller("team-a"),
        );
        let r = watchdog(WATCHDOG, async {
            Resp::read(a.client.request(req).await.expect("answers")).await
        })
        .await;
        if r.status == 429 {
            assert_eq!(r.header("x-levee-reason"), "spend_limit", "{}", r.text());
        }
        statuses.push(r.status);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429, 429, 429],
        "replicas A, B, A, B, A, B"
    );
    let (status, j) = watchdog(WATCHDOG, admin_get(&a, "/admin/spend?by=caller")).await;
    assert_eq!(status, 200);
    assert_eq!(j["source"], "shared", "{j}");
    assert!(
        (j["total"]["usd"].as_f64().unwrap_or(0.0) - 0.066).abs() < 1e-6,
        "{j}"
    );
    b.shutdown().await;
    a.stop().await;
}

/// The caller label keeps the busiest names: a caller that arrives after
/// the N names are taken, and outsends the quietest of them, takes its
/// name's place at the end of the minute; the label never has more than N
/// names and `other`.
#[tokio::test(start_paused = true)]
async fn a_busy_caller_that_came_late_takes_the_quietest_name() {
    let config = format!("limits: {{ caller_names: 3 }}\n{PRICED}");
    let env = local(&["faults: []"], &config);
    let post = |who: &'static str| {
        let env = &env;
        async move {
            let r = watchdog(
                WATCHDOG,
                env.post("/v1/chat/completions", CHAT, &as_caller(who)),
            )
            .await;
            assert_eq!(r.status, 200);
        }
    };
    for who in ["a", "b", "c", "b", "c"] {
        post(who).await;
    }
    for _ in 0..20 {
        post("big").await;
    }
    let labels = |m: &str| -> std::collections::BTreeSet<String> {
        m.lines()
            .filter(|l| {
                l.starts_with("levee_tokens_total{")
                    || l.starts_with("levee_caller_requests_total{")
            })
            .filter_map(|l| Some(l.split("caller=\"").nth(1)?.split('"').next()?.to_string()))
            .collect()
    };
    let before = labels(&env.metrics());
    assert!(
        before.contains("other") && !before.contains("big"),
        "{before:?}"
    );
    tokio::time::sleep(Duration::from_secs(61)).await;
    post("big").await;
    let after = labels(&env.metrics());
    assert!(after.contains("big"), "{after:?}");
    assert!(
        !after.contains("a"),
        "the quietest gave up its name: {after:?}"
    );
    assert!(after.len() <= 3 + 1, "{after:?}");
}
