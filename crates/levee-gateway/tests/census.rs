//! The live census: callers identified from traffic, their observed
//! deadlines, what those deadlines allow on each route, and each target's
//! observed p99 beside its `expected_attempt_ms`.

mod support;

use levee_gateway::census::CensusReport;
use std::time::Duration;
use support::*;

const LIMIT: Duration = Duration::from_secs(30);

async fn census(env: &Env) -> CensusReport {
    let r = env.admin("/census").await;
    let (status, body) = (r.status, r.text());
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/census is not the census: {e}: {body}"))
}

/// A route like the example config's: a slow primary (30 s at the slow end)
/// and a backup (15 s). A retry needs ~45 s of deadline, the fallback ~15 s.
const TWO_TARGETS: &str = "providers:\n  a: { api: openai, base_url: \"{mock0}\" }\n  b: { api: openai, base_url: \"{mock1}\" }\nroutes:\n  - match: { model_prefix: \"x/\" }\n    targets:\n      - { provider: a, expected_attempt_ms: 30000 }\n      - { provider: b, model: backup, expected_attempt_ms: 15000 }\n    deadline: { default: 60s, max: 120s }\n    retry: { max_attempts: 3 }\n";

const X_CHAT: &str = r#"{"model":"x/m","messages":[{"role":"user","content":"hi"}]}"#;

#[tokio::test]
async fn census_from_mixed_traffic_of_two_callers() {
    let env = start(&["", ""], TWO_TARGETS).await;
    watchdog(LIMIT, async {
        for i in 0..20 {
            let (who, timeout) = if i % 2 == 0 {
                ("queue-worker", "40000")
            } else {
                ("interactive", "100000")
            };
            let r = env.chat_as(X_CHAT, who, timeout).await;
            assert_eq!(r.status, 200, "{}", r.text());
        }
        // One caller that does not name itself.
        let r = env.post("/v1/chat/completions", X_CHAT, &[]).await;
        assert_eq!(r.status, 200);

        let c = census(&env).await;
        let find = |name: &str| {
            c.callers
                .iter()
                .find(|x| x.name == name)
                .unwrap_or_else(|| panic!("no caller {name} in {c:?}"))
        };
        let q = find("queue-worker");
        assert_eq!(q.requests, 10);
        assert_eq!(q.deadline_ms.p50, Some(40_000));
        assert_eq!(q.deadline_ms.p5, Some(40_000));
        assert_eq!(q.routes.len(), 1);
        assert_eq!(q.routes[0].route, "x/");
        assert!(!q.routes[0].retry_can_start, "{q:?}");
        assert_eq!(q.routes[0].fallback_can_start, Some(true), "{q:?}");

        let i = find("interactive");
        assert_eq!(i.requests, 10);
        assert_eq!(i.deadline_ms.p50, Some(100_000));
        assert!(i.routes[0].retry_can_start, "{i:?}");
        assert_eq!(i.routes[0].fallback_can_start, Some(true));

        // No header: the route's default deadline.
        let a = find("anonymous");
        assert_eq!((a.requests, a.deadline_ms.p50), (1, Some(60_000)));

        assert_eq!(c.targets.len(), 2);
        assert_eq!(c.targets[0].provider, "a");
        assert_eq!(c.targets[0].expected_attempt_ms, 30_000);
        assert!(c.targets[0].observed_p99_ms.is_some_and(|p| p < 30_000));
        // The backup had no traffic yet.
        assert_eq!(c.targets[1].observed_p99_ms, None);

        let m = env.metrics().await;
        assert_eq!(
            metric(&m, "levee_caller_requests_total", &["queue-worker"]),
            10.0
        );
        assert_eq!(
            metric(&m, "levee_expected_attempt_exceeded", &["route=\"x/\""]),
            0.0
        );
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn census_serves_json_with_the_documented_field_names() {
    let env = start(&["", ""], TWO_TARGETS).await;
    watchdog(LIMIT, async {
        let empty = env.admin("/census").await.text();
        let v: serde_json::Value = serde_json::from_str(&empty).unwrap();
        assert_eq!(v["callers"], serde_json::json!([]));
        assert!(v["targets"][0]["observed_p99_ms"].is_null(), "{v}");
        env.post("/v1/chat/completions", X_CHAT, &[("x-levee-caller", "svc")])
            .await;
        let body = env.admin("/census").await.text();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let c = &v["callers"][0];
        for field in ["name", "requests", "deadline_ms", "routes"] {
            assert!(!c[field].is_null(), "{field} missing: {body}");
        }
        assert!(c["deadline_ms"]["p5"].is_u64() && c["deadline_ms"]["p50"].is_u64());
        let r = &c["routes"][0];
        assert!(r["route"].is_string() && r["retry_can_start"].is_boolean());
        assert!(r["fallback_can_start"].is_boolean(), "{body}");
        let t = &v["targets"][0];
        for field in [
            "route",
            "provider",
            "expected_attempt_ms",
            "observed_p99_ms",
        ] {
            assert!(!t[field].is_null(), "{field} missing: {body}");
        }
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn caller_names_come_from_gateway_keys_before_the_header() {
    let digest: String = {
        use sha2::Digest;
        let d: [u8; 32] = sha2::Sha256::digest(b"k1").into();
        d.iter().map(|b| format!("{b:02x}")).collect()
    };
    let config = format!("keys:\n  - {{ name: billing, sha256: \"{digest}\" }}\nproviders:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\nroutes:\n  - targets: [p]\n");
    let env = start(&[""], &config).await;
    watchdog(LIMIT, async {
        let r = env
            .post(
                "/v1/chat/completions",
                CHAT,
                &[("authorization", "Bearer k1"), ("x-levee-caller", "liar")],
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let c = census(&env).await;
        let names: Vec<&str> = c.callers.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["billing"]);
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn a_p99_above_expected_attempt_ms_is_flagged() {
    // Every answer takes 150 ms; route `slow/` expects 100 ms, `ok/` 2 s.
    let config = "providers:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - match: { model_prefix: \"slow/\" }\n    targets: [p]\n    expected_attempt_ms: 100\n  - match: { model_prefix: \"ok/\" }\n    targets: [p]\n    expected_attempt_ms: 2000\n";
    let env = start(&["faults:\n  - { latency: 150ms }\n"], config).await;
    watchdog(LIMIT, async {
        let mut calls = Vec::new();
        for model in ["slow/m", "ok/m"] {
            for _ in 0..25 {
                let body = format!(
                    r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#
                );
                let env = &env;
                calls.push(async move {
                    env.post("/v1/chat/completions", &body, &[("x-timeout-ms", "10000")])
                        .await
                });
            }
        }
        for r in futures_util::future::join_all(calls).await {
            assert_eq!(r.status, 200, "{}", r.text());
        }
        let c = census(&env).await;
        let slow = c.targets.iter().find(|t| t.route == "slow/").unwrap();
        assert!(slow.observed_p99_ms.is_some_and(|p| p >= 150), "{slow:?}");
        let m = env.metrics().await;
        assert_eq!(
            metric(&m, "levee_expected_attempt_exceeded", &["route=\"slow/\""]),
            1.0,
            "{m}"
        );
        assert_eq!(
            metric(&m, "levee_expected_attempt_exceeded", &["route=\"ok/\""]),
            0.0
        );
        assert!(env.gw.shared.census().exceeded(0, 0));
        assert!(!env.gw.shared.census().exceeded(1, 0));
    })
    .await;
    env.stop().await;
}
