//! One table of incidents, run through the gateway (in-process, against the
//! mock, under paused time)
//! and through the simulator (against a modelled provider). Both drive the
//! same decision function, so they must agree on what happened: how many
//! attempts the request made and why Levee gave up, if it did.

mod support;
use levee_sim::{simulate, Scenario, DEFAULT_SEED};
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(30);

/// One provider of a case: the mock's faults and the simulated provider.
struct Side {
    mock: &'static str,
    sim: &'static str,
}

struct Case {
    name: &'static str,
    /// `p` and, when given, `b`.
    providers: &'static [Side],
    /// The route's body (YAML, indented for a list item), shared by both.
    route: &'static str,
    timeout_ms: u64,
    /// Requests sent together at 0 s before the one measured, which is
    /// sent at `at_ms` (they must all succeed): history the gateway learns.
    warmup: u32,
    at_ms: u64,
    /// Attempts, and `x-levee-reason` when Levee gave up.
    want: (u32, Option<&'static str>),
}

const HEALTHY: Side = Side {
    mock: "faults: []",
    sim: "{ workers: 100, latency: 20ms }",
};
const STALLED: Side = Side {
    mock: "faults:\n  - { stall: true }\n",
    sim: "{ workers: 100, latency: 120s }",
};

const CASES: &[Case] = &[
    Case {
        name: "3xx is an answer, passed on",
        providers: &[Side {
            mock: "faults:\n  - { status: 302 }\n",
            sim: "{ workers: 100, latency: 20ms, faults: [ { status: 302, latency: 10ms } ] }",
        }],
        route: "    targets: [p]\n",
        timeout_ms: 20_000,
        warmup: 0,
        at_ms: 0,
        want: (1, None),
    },
    Case {
        name: "a Retry-After over the cap is not waited on",
        providers: &[Side {
            mock: "faults:\n  - { status: 429, retry_after: 86400 }\n",
            sim: "{ workers: 100, latency: 20ms, faults: [ { status: 429, retry_after: 86400s, latency: 10ms } ] }",
        }],
        route: "    targets: [p]\n    retry: { retry_after_cap: 30s }\n",
        timeout_ms: 60_000,
        warmup: 0,
        at_ms: 0,
        want: (1, Some("rate_limited")),
    },
    Case {
        name: "an attempt cut by the deadline",
        providers: &[STALLED],
        route: "    targets: [ { provider: p, expected_attempt_ms: 2000 } ]\n",
        timeout_ms: 1_000,
        warmup: 0,
        at_ms: 0,
        want: (1, Some("deadline_exceeded")),
    },
    Case {
        name: "a stalled primary with a healthy backup",
        providers: &[STALLED, HEALTHY],
        route: "    targets:\n      - { provider: p, expected_attempt_ms: 8000 }\n      - { provider: b, expected_attempt_ms: 1000 }\n",
        timeout_ms: 3_000,
        warmup: 0,
        at_ms: 0,
        want: (2, None),
    },
    Case {
        name: "a 429 with a wait the deadline cannot hold",
        providers: &[Side {
            mock: "faults:\n  - { status: 429, retry_after: 3 }\n",
            sim: "{ workers: 100, latency: 20ms, faults: [ { status: 429, retry_after: 3s, latency: 10ms } ] }",
        }],
        route: "    targets: [p]\n",
        timeout_ms: 2_000,
        warmup: 0,
        at_ms: 0,
        // The retry is not started: the deadline, not the provider, ends it.
        want: (1, Some("deadline_exceeded")),
    },
    Case {
        name: "529 overloaded, retried to exhaustion",
        providers: &[Side {
            mock: "faults:\n  - { status: 529 }\n",
            sim: "{ workers: 100, latency: 20ms, faults: [ { status: 529, latency: 10ms } ] }",
        }],
        route: "    targets: [p]\n    retry: { backoff: { base_ms: 1, max_ms: 2 } }\n",
        timeout_ms: 20_000,
        warmup: 0,
        at_ms: 0,
        // The default `max_attempts` is 8, but retries after an overload
        // status are not refunded: the budget's 5 a second always allowed
        // pays for five, then it is spent.
        want: (6, Some("budget_exhausted")),
    },
    Case {
        name: "a 429 paces the model and its retry waits the Retry-After",
        providers: &[Side {
            mock: "faults:\n  - { status: 429, retry_after: 1, to: 500ms }\n",
            sim: "{ workers: 100, latency: 20ms, faults: [ { status: 429, retry_after: 1s, latency: 10ms, to: 500ms } ] }",
        }],
        route: "    targets: [p]\n",
        timeout_ms: 20_000,
        warmup: 0,
        at_ms: 0,
        want: (2, None),
    },
    Case {
        name: "a learned attempt time lets a retry fit a deadline the configured one cannot",
        providers: &[Side {
            mock: "faults:\n  - { status: 529, from: 990ms, to: 1050ms }\n",
            sim: "{ workers: 100, latency: 20ms, faults: [ { status: 529, from: 990ms, to: 1050ms, latency: 10ms } ] }",
        }],
        // Configured at 20 s, the attempt is learned at ~20 ms from the
        // warm-up: the retry 100 ms after the 529 fits the 8 s deadline.
        route: "    targets: [ { provider: p, expected_attempt_ms: 20000 } ]\n    retry: { backoff: { schedule_ms: [100], jitter: none } }\n",
        timeout_ms: 8_000,
        warmup: 25,
        at_ms: 1_000,
        want: (2, None),
    },
    Case {
        name: "a 503 at a provider saturated by a burst gets three attempts",
        providers: &[Side {
            mock: "faults:\n  - { status: 503, from: 1200ms }\n  - { latency: 20ms }\ncapacity: { max_in_flight: 70, status: 503 }\n",
            sim: "{ workers: 70, queue: 0, latency: 20ms, overload: { status: 503 }, reject_latency: 1ms, faults: [ { status: 503, from: 1200ms, latency: 10ms } ] }",
        }],
        // 140 at once against room for 70: the 70 beyond it get a 503 at
        // once, sent while the model was busy (more attempts in flight
        // than their running average). Their retries, spread over a second
        // by the jitter, go out while it is quiet and nearly all succeed.
        // Retries win, yet the faults came with load: the model is
        // saturated, its retries count as losing, and the 503 met at 1.5 s
        // gets three attempts where a brownout's winning retries get the
        // default eight. The budget and the breaker are set out of the
        // way: the burst's retries need more than 5 a second, and its 70
        // faults in a row would open the breaker.
        route: "    targets: [p]\n    retry: { backoff: { base_ms: 1000, max_ms: 1000, jitter: full }, budget: { min_per_second: 1000 } }\n    circuit_breaker: { min_requests: 1000 }\n",
        timeout_ms: 20_000,
        warmup: 140,
        at_ms: 1_500,
        want: (3, Some("upstream_error")),
    },
];

const NAMES: [&str; 2] = ["p", "b"];

fn levee_providers(case: &Case, url: impl Fn(usize) -> String) -> String {
    let mut out = String::from("providers:\n");
    for (i, name) in NAMES.iter().enumerate().take(case.providers.len()) {
        out += &format!("  {name}: {{ api: openai, base_url: \"{}\" }}\n", url(i));
    }
    out
}

async fn live(case: &Case) -> (u32, Option<String>) {
    let faults: Vec<&str> = case.providers.iter().map(|s| s.mock).collect();
    let config = levee_providers(case, |i| format!("{{mock{i}}}")) + "routes:\n  -\n" + case.route;
    let env = local(&faults, &config);
    let timeout = case.timeout_ms.to_string();
    let start = paused_now();
    let fields = [("x-timeout-ms", timeout.as_str())];
    let warm = (0..case.warmup).map(|_| env.post("/v1/chat/completions", CHAT, &fields));
    for r in watchdog(WATCHDOG, futures_util::future::join_all(warm)).await {
        assert_eq!(r.status, 200, "warm-up: {}", case.name);
    }
    tokio::time::sleep_until(start + Duration::from_millis(case.at_ms)).await;
    let r = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &[("x-timeout-ms", &timeout)]),
    )
    .await;
    let attempts = r.header("x-levee-attempts").parse().unwrap_or(u32::MAX);
    let reason = Some(r.header("x-levee-reason").to_string()).filter(|s| !s.is_empty());
    (attempts, reason)
}

fn simulated(case: &Case) -> (u32, Option<String>) {
    let mut providers = String::new();
    for (i, side) in case.providers.iter().enumerate() {
        providers += &format!("  {}: {}\n", NAMES[i], side.sim);
    }
    let levee = levee_providers(case, |_| "http://127.0.0.1:9".into())
        .lines()
        .map(|l| format!("        {l}\n"))
        .collect::<String>();
    let route = case
        .route
        .lines()
        .map(|l| format!("          {l}\n"))
        .collect::<String>();
    let warm = match case.warmup {
        0 => String::new(),
        n => format!("  - {{ name: warm, burst: {n}, at: 0s, model: m, provider: p }}\n"),
    };
    let text = format!(
        "name: {name}\nduration: 2s\ndrain: 180s\narrivals:\n{warm}  - {{ name: one, burst: 1, at: {at}ms, model: m, provider: p }}\nproviders:\n{providers}variants:\n  - name: levee\n    callers:\n      - {{ name: sdk, attempts: 1, timeout: {t}ms, honours_should_retry: true }}\n    gateway:\n      levee:\n{levee}        routes:\n          -\n{route}",
        name = case.name,
        t = case.timeout_ms,
        at = case.at_ms,
    );
    let sc = Scenario::parse(&text, None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let report = simulate(&sc, DEFAULT_SEED);
    let v = &report.variants[0];
    let reason = v.detail.levee_reasons.keys().next().cloned();
    // With one stream of arrivals the report has no per-stream rows.
    let attempts = match v.endpoints.iter().find(|e| e.name == "one") {
        Some(one) => {
            assert_eq!(one.requests, 1, "{}", case.name);
            one.attempts_per_request_mean.round() as u32
        }
        None => v.attempts_per_request_max,
    };
    (attempts, reason)
}

#[tokio::test(start_paused = true)]
async fn the_gateway_and_the_simulator_agree_on_every_case() {
    for case in CASES {
        let want = (case.want.0, case.want.1.map(str::to_string));
        let live = live(case).await;
        let sim = simulated(case);
        assert_eq!(live, want, "live gateway: {}", case.name);
        assert_eq!(sim, want, "simulator: {}", case.name);
    }
}
