//! A provider account's token allowance through the in-process gateway:
//! a request spends its estimate (input and `max_tokens`) at admission and
//! gets back what its answer's `usage` shows it did not use; over the
//! allowance, a request is refused at once with `rate_limited` and a
//! `retry-after`, never sent. Streams settle from their last event's usage.

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);

fn chat_with_max(max_tokens: u32, stream: bool) -> String {
    format!(
        r#"{{"model":"gpt-x","max_tokens":{max_tokens},"stream":{stream},"stream_options":{{"include_usage":true}},"messages":[{{"role":"user","content":"hi"}}]}}"#
    )
}

/// Anthropic-style meters: output (and input) settle from usage, where
/// OpenAI's total keeps its estimate.
const CONFIG: &str = "providers:\n  p: { api: openai, base_url: \"{mock0}\", rate_limit: { output_tokens_per_minute: 1000 } }\nroutes:\n  - targets: [p]\n";

async fn chat(env: &Local, body: &str) -> Resp {
    watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &[])).await
}

/// With a 3 s deadline: too short to wait for 600 tokens of refill (36 s).
async fn chat_now(env: &Local, body: &str) -> Resp {
    let h = [("x-timeout-ms", "3000")];
    watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &h)).await
}

#[tokio::test(start_paused = true)]
async fn an_answer_gives_back_the_tokens_its_estimate_held_beyond_its_usage() {
    let env = local(&["faults: []"], CONFIG);
    // Each asks for 600 tokens of output: two would not fit in 1,000 at
    // once, but the mock's answers use a few dozen, and the rest comes back.
    let output = |m: &str| {
        metric(
            m,
            "levee_tokens_total",
            &["provider=\"p\"", "kind=\"output\""],
        )
    };
    for i in 0..3 {
        let r = chat_now(&env, &chat_with_max(600, false)).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    let answers = output(&env.metrics());
    // Streams settle from the usage in their last chunk, and count it.
    for i in 0..2 {
        let r = chat_now(&env, &chat_with_max(600, true)).await;
        assert_eq!(r.status, 200, "stream {i}: {}", r.text());
    }
    assert_eq!(env.stats(0).requests_total, 5);
    let m = env.metrics();
    assert!(answers > 0.0, "{m}");
    assert!(output(&m) > answers, "the streams' tokens: {m}");
    assert!(
        metric(&m, "levee_allowance_limit", &["meter=\"output_tokens\""]) == 1000.0,
        "{m}"
    );
}

#[tokio::test(start_paused = true)]
async fn over_the_allowance_a_request_is_refused_at_once_and_never_sent() {
    let env = local(&["faults: []"], CONFIG);
    // 900 of 1,000 held while it runs; a second one at once does not fit.
    let r = chat(&env, &chat_with_max(900, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // Its usage gave most back; a request asking for more than is left
    // (the refill is 1,000 a minute) waits for it or is refused.
    let big = chat_with_max(990, false);
    let r = chat(&env, &big).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", &big, &[("x-timeout-ms", "2000")]),
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "rate_limited");
    assert!(
        !r.header("retry-after").is_empty(),
        "a retry-after says when"
    );
    assert_eq!(
        env.stats(0).requests_total,
        2,
        "the refused one was never sent"
    );
}

/// Offered `per_second` for `seconds` to the gateway, each request with a
/// `timeout_ms` deadline: (answered, refused rate_limited with a
/// retry-after, other, the slowest answer).
async fn offer(
    env: &std::sync::Arc<Local>,
    per_second: u64,
    seconds: u64,
    timeout_ms: u64,
) -> (u32, u32, u32, Duration) {
    let body = chat_with_max(16, false);
    let mut tasks = Vec::new();
    let gap = Duration::from_millis(1000 / per_second);
    for _ in 0..per_second * seconds {
        let env = std::sync::Arc::clone(env);
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let t = paused_now();
            let timeout = timeout_ms.to_string();
            let r = env
                .post("/v1/chat/completions", &body, &[("x-timeout-ms", &timeout)])
                .await;
            let reason = r.header("x-levee-reason").to_string();
            (
                r.status,
                reason,
                r.header("retry-after").to_string(),
                t.elapsed(),
            )
        }));
        tokio::time::sleep(gap).await;
    }
    let (mut ok, mut limited, mut other, mut slowest) = (0, 0, 0, Duration::ZERO);
    for t in tasks {
        let (status, reason, retry_after, took) = watchdog(WATCHDOG, t).await.unwrap();
        slowest = slowest.max(took);
        match status {
            200 => ok += 1,
            429 if reason == "rate_limited" && !retry_after.is_empty() => limited += 1,
            _ => other += 1,
        }
    }
    (ok, limited, other, slowest)
}

/// The provider allows `limit` (its `rate_limit:`, worth 600 of these
/// requests a minute) and says so on every answer; Levee is told nothing of
/// it. Offered 20 a second for two minutes (twice the limit; the provider's
/// bucket starts full, a minute's worth, so only past the first minute does
/// sending everything draw its 429s).
async fn twice_the_limit(limit: &str, timeout_ms: u64) {
    let mock = format!("rate_limit: {limit}\nfaults: []\n");
    let config = "providers:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [p]\n    retry: { max_attempts: 1 }\n";
    let env = std::sync::Arc::new(local(&[mock.as_str()], config));
    let (ok, limited, other, slowest) = offer(&env, 20, 120, timeout_ms).await;
    let s = env.stats(0);
    let provider_429 = s.rate_limited;
    eprintln!(
        "{limit}: answered {ok}, rate_limited by Levee {limited}, other {other}, slowest {slowest:?}; provider: {} requests, {provider_429} 429s",
        s.requests_total
    );
    // The excess is told at once: no caller waits long for a slot that
    // others keep taking, whatever its own deadline.
    assert!(
        slowest < Duration::from_secs(3),
        "a caller waited {slowest:?}"
    );
    // The provider's own 429s: at most 1 % of what it was sent.
    assert!(
        provider_429 * 100 <= s.requests_total,
        "{provider_429} of {} requests got the provider's 429",
        s.requests_total
    );
    // The allowance is used: its first minute's full bucket and 600 a
    // minute for two minutes, 1,800 (95 % of it at least).
    assert!(
        ok >= 1710,
        "answered {ok} of the 1,800 the two minutes allow"
    );
    assert!(limited >= 500, "the excess is refused by Levee: {limited}");
    assert_eq!(
        u64::from(other),
        provider_429,
        "every other refusal is Levee's own, truthful rate_limited"
    );
}

#[tokio::test(start_paused = true)]
async fn at_twice_the_providers_request_limit_levee_paces_by_its_headers() {
    twice_the_limit("{ requests_per_minute: 600 }", 1_000).await;
    // The SDKs' own timeout is 600 s: the excess is still told at once.
    twice_the_limit("{ requests_per_minute: 600 }", 600_000).await;
}

#[tokio::test(start_paused = true)]
async fn at_twice_the_providers_token_limit_levee_paces_by_its_headers() {
    // A request costs the provider its input (a token per 4 bytes) and its
    // max_tokens: 600 of them a minute.
    let per_request = chat_with_max(16, false).len() as u64 / 4 + 16;
    let limit = format!("{{ tokens_per_minute: {} }}", 600 * per_request);
    twice_the_limit(&limit, 600_000).await;
}

/// Every meter is exported per minute: a request allowance of 120 a
/// minute with a burst of 2 is a limit of 120 (not the burst of 2), a
/// token allowance of 1,000 a minute a limit of 1,000; remaining is the
/// minute's allowance at the bucket's fill, so `LeveeAllowanceLow`
/// (remaining under a tenth of the limit) reads both alike.
#[tokio::test(start_paused = true)]
async fn every_meter_is_exported_per_minute() {
    let config = "providers:\n  p: { api: openai, base_url: \"{mock0}\", rate_limit: { requests_per_minute: 120, burst: 2, output_tokens_per_minute: 1000 } }\nroutes:\n  - targets: [p]\n";
    let env = local(&["faults: []"], config);
    let r = chat(&env, &chat_with_max(10, false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let m = env.metrics();
    let limit = |meter: &str| {
        metric(
            &m,
            "levee_allowance_limit",
            &[&format!("meter=\"{meter}\"")],
        )
    };
    let left = |meter: &str| {
        metric(
            &m,
            "levee_allowance_remaining",
            &[&format!("meter=\"{meter}\"")],
        )
    };
    assert_eq!(limit("requests"), 120.0, "{m}");
    assert_eq!(limit("output_tokens"), 1000.0, "{m}");
    // One of the burst of 2 spent: half the minute's allowance left.
    assert!((left("requests") - 60.0).abs() < 2.0, "{m}");
    assert!(left("output_tokens") > 900.0, "{m}");
}

/// No `callers:` block: every active caller has an implicit equal share of
/// the allowance. A greedy caller asking four times its part cannot take a
/// steady caller's: after its first ask (before it was known), the steady
/// one is answered every time.
#[tokio::test(start_paused = true)]
async fn without_a_callers_block_a_greedy_caller_cannot_take_a_steady_ones_share() {
    let config = "providers:\n  p: { api: openai, base_url: \"{mock0}\", rate_limit: { requests_per_minute: 60, burst: 4 } }\nroutes:\n  - targets: [p]\n";
    let env = local(&["faults: []"], config);
    let as_caller = |who: &'static str| {
        let env = &env;
        async move {
            let h = [("x-levee-caller", who), ("x-timeout-ms", "100")];
            watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &h)).await
        }
    };
    let (mut steady_ok, mut steady_asked, mut greedy_ok) = (0, 0, 0);
    for tick in 0..240u32 {
        // Four a second from the greedy caller (240/min against 60).
        if as_caller("greedy").await.status == 200 {
            greedy_ok += 1;
        }
        if tick % 8 == 4 {
            // One every two seconds from the steady one (its share: 30/min).
            steady_asked += 1;
            if as_caller("steady").await.status == 200 {
                steady_ok += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        steady_ok >= steady_asked - 1,
        "steady answered {steady_ok} of {steady_asked}; greedy {greedy_ok}"
    );
    assert!(
        greedy_ok > steady_ok,
        "greedy still gets the rest: {greedy_ok}"
    );
}
