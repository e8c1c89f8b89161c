//! A short live drill against a real `levee mock` and a real gateway (both
//! in-process, on 127.0.0.1 ephemeral ports): 4 s at 100 requests/s with a
//! 503 window from 1 s to 3 s. The gateway's retry budget must keep the
//! provider's load near the baseline, and every request must be answered
//! within its deadline plus 50 ms.

use std::time::Duration;

use levee_drill::{Arrivals, DrillArgs, DrillError};

/// Retries allowed per second whatever the budget holds (route config below).
const MIN_PER_SECOND: f64 = 5.0;

/// The two-layer-storm route (budget 0.1 with 5/s, 3 attempts, its breaker but open
/// for 1 s instead of 5 s to fit a 4 s drill), with `expected_attempt_ms`
/// sized for a mock that answers at once so a retry after `retry-after: 1`
/// fits in the drill's 2 s deadline.
fn config(mock: &str) -> levee_config::Config {
    let text = format!(
        "listen: 127.0.0.1:0
admin: {{ listen: 127.0.0.1:0 }}
providers:
  p: {{ api: openai, base_url: \"{mock}\", connect_timeout: 250ms }}
routes:
  - targets: [p]
    expected_attempt_ms: 200
    deadline: {{ default: 30s, max: 120s }}
    retry:
      max_attempts: 3
      on: [502, 503, 504, connect_error]
      backoff: {{ base_ms: 250, multiplier: 2, jitter: full }}
      budget: {{ ratio: 0.1, min_per_second: {MIN_PER_SECOND} }}
      respect_retry_after: true
    circuit_breaker: {{ error_ratio: 0.5, window: 10s, open_for: 1s }}
"
    );
    match levee_config::Config::parse(&text) {
        Ok(c) => c,
        Err(e) => panic!("drill test config: {e}\n{text}"),
    }
}

fn args(gateway: String, mock: String, faults: &[&str]) -> DrillArgs {
    DrillArgs {
        gateway,
        mock,
        rate: 100.0,
        duration: "4s".into(),
        faults: faults.iter().map(|f| f.to_string()).collect(),
        json: true,
        plot: None,
        timeout_ms: 2000,
        seed: 1,
        arrivals: Arrivals::Even,
        model: "drill".into(),
        answer_usd: 0.006,
        gateway_admin: None,
        exercise: Default::default(),
    }
}

/// A mock and a gateway in front of it, on ephemeral loopback ports.
async fn servers() -> (levee_mock::MockHandle, levee_gateway::Running) {
    let mock = levee_mock::spawn(
        "127.0.0.1:0".parse().expect("addr"),
        levee_mock::MockOptions::default(),
    )
    .await
    .expect("mock starts");
    let gw = levee_gateway::spawn(config(&mock.url()), 7, std::future::pending())
        .await
        .expect("gateway starts");
    (mock, gw)
}

/// Status of one chat completion sent straight to the mock (raw HTTP/1.1).
async fn direct_status(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    text.split_whitespace().nth(1).unwrap_or("").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_drill_keeps_the_provider_near_baseline_and_answers_everyone_in_time() {
    let (mock, gw) = servers().await;

    let dir = std::env::temp_dir().join(format!("levee-drill-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let svg = dir.join("drill.svg");
    let mut a = args(
        format!("http://{}", gw.addr),
        mock.url(),
        &["status=503,retry_after=1,from=1s,to=3s"],
    );
    a.plot = Some(svg.clone());
    let plan = a.plan().expect("plan");
    // Watchdog only: 4 s of load plus at most 2 s + 2 s of stragglers.
    let report = tokio::time::timeout(Duration::from_secs(30), levee_drill::run(&plan, false))
        .await
        .expect("the drill ends by itself")
        .expect("the drill runs");
    let json = serde_json::to_value(&report).expect("json");
    eprintln!("{json}");

    assert_eq!(report.logical_requests, 400, "{json}");
    assert_eq!(report.unanswered, 0, "{json}");
    assert_eq!(
        report.answered_late, 0,
        "every answer within deadline + 50 ms: {json}"
    );
    assert_eq!(report.outcomes.values().sum::<u64>(), 400, "{json}");
    assert!(
        report.client_errors.is_empty(),
        "every request got an HTTP answer: {json}"
    );
    assert!(
        report.outcomes.get("success").copied().unwrap_or(0) >= 90,
        "{json}"
    );
    assert!(
        report.outcomes.keys().any(|k| k != "success"),
        "the fault window shows in the outcomes: {json}"
    );
    assert!(
        (report.baseline_upstream_rps - 100.0).abs() <= 10.0,
        "baseline ≈ offered load: {json}"
    );
    let bound = 1.15 * report.baseline_upstream_rps + MIN_PER_SECOND;
    assert!(
        report.peak_upstream_rps <= bound,
        "peak {} > 1.15 × baseline + {MIN_PER_SECOND} = {bound}: {json}",
        report.peak_upstream_rps
    );
    assert!(report.attempts_per_request.max <= 3, "{json}");
    // The mock's count and the gateway's attempt headers agree.
    let attempts: u64 = report
        .attempts_per_request
        .histogram
        .iter()
        .map(|(a, n)| u64::from(*a) * n)
        .sum();
    assert_eq!(attempts, report.upstream_requests, "{json}");
    assert_eq!(report.upstream_requests, mock.stats().requests_total);
    // What it cost: every answer generated was delivered.
    let successes = report.outcomes.get("success").copied().unwrap_or(0);
    assert_eq!(report.billed_answers, Some(successes), "{json}");
    assert_eq!(report.undelivered_usd, Some(0.0), "{json}");
    let cost = report.cost_usd.unwrap_or(0.0);
    assert!((cost - successes as f64 * 0.006).abs() < 1e-6, "{json}");
    // The drill clears the faults it set: the mock answers 200 again at once.
    assert_eq!(
        direct_status(mock.local_addr()).await,
        "200",
        "faults cleared"
    );
    let svg_text = std::fs::read_to_string(&svg).expect("plot written");
    assert!(svg_text.starts_with("<svg") && svg_text.contains("fault window"));
    let _ = std::fs::remove_dir_all(&dir);

    gw.shutdown().await;
    mock.shutdown().await;
}

/// A drill that plans but stops before any load: its error.
async fn refused(gateway: &str, mock: &str, faults: &[&str]) -> DrillError {
    let plan = args(gateway.to_string(), mock.to_string(), faults)
        .plan()
        .expect("the plan is valid");
    levee_drill::run(&plan, false)
        .await
        .expect_err("the drill stops before any load")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_the_mock_refuses_and_dead_targets_stop_the_drill_before_any_load() {
    let (mock, gw) = servers().await;

    let plan = args(
        format!("http://{}", gw.addr),
        mock.url(),
        &["status=503,from=never"],
    )
    .plan();
    assert!(matches!(plan, Err(DrillError::Flag { .. })));

    // The drill leaves validation of fault keys to the mock.
    let gateway = format!("http://{}", gw.addr);
    let e = refused(&gateway, &mock.url(), &["status=503,retry_after=soon"]).await;
    assert!(matches!(e, DrillError::FaultRejected { .. }), "{e}");
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("retry_after"), "{e}");

    // A port nobody listens on: bind, learn the port, close.
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = free.local_addr().expect("addr");
    drop(free);
    let e = refused(&format!("http://{dead}"), &mock.url(), &[]).await;
    assert!(matches!(e, DrillError::GatewayUnreachable { .. }), "{e}");
    let e = refused(&gateway, &format!("http://{dead}"), &[]).await;
    assert!(matches!(e, DrillError::MockUnreachable { .. }), "{e}");
    assert_eq!(mock.stats().requests_total, 0, "no load was sent");

    gw.shutdown().await;
    mock.shutdown().await;
}

/// The simulator's spread of (peak/s, amplification, success) over a few
/// seeds for `scenarios/twin-drill.yaml`: the same incident as the drill below.
fn simulated_spread() -> Vec<(f64, f64, f64)> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/twin-drill.yaml");
    let sc = levee_sim::Scenario::load(&path).expect("twin scenario loads");
    (0..4)
        .map(|seed| {
            let r = levee_sim::simulate(&sc, seed);
            let v = &r.variants[0];
            (v.peak_upstream_rps, v.amplification_peak, v.success_ratio)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_drill_falls_inside_the_simulators_spread_for_the_same_incident() {
    let (mock, gw) = servers().await;
    let mut a = args(
        format!("http://{}", gw.addr),
        mock.url(),
        &["status=503,retry_after=1,from=1s,to=4s"],
    );
    a.duration = "6s".into();
    let plan = a.plan().expect("plan");
    let live = tokio::time::timeout(Duration::from_secs(40), levee_drill::run(&plan, false))
        .await
        .expect("the drill ends by itself")
        .expect("the drill runs");
    gw.shutdown().await;
    mock.shutdown().await;

    let success = live.outcomes.get("success").copied().unwrap_or(0) as f64
        / live.logical_requests.max(1) as f64;
    let sim = simulated_spread();
    let lo = |f: fn(&(f64, f64, f64)) -> f64| sim.iter().map(f).fold(f64::INFINITY, f64::min);
    let hi = |f: fn(&(f64, f64, f64)) -> f64| sim.iter().map(f).fold(0.0, f64::max);
    let said = format!(
        "live: peak {} amplification {} success {success:.3}; simulated: {sim:?}",
        live.peak_upstream_rps, live.amplification_peak
    );
    eprintln!("{said}");
    // Peak and amplification within 10 % of the simulator's range.
    assert!(
        live.peak_upstream_rps >= 0.9 * lo(|s| s.0) && live.peak_upstream_rps <= 1.1 * hi(|s| s.0),
        "{said}"
    );
    assert!(
        live.amplification_peak >= 0.9 * lo(|s| s.1)
            && live.amplification_peak <= 1.1 * hi(|s| s.1),
        "{said}"
    );
    // Success inside the spread, give or take 3 points of one short run.
    assert!(
        success >= lo(|s| s.2) - 0.03 && success <= hi(|s| s.2) + 0.03,
        "{said}"
    );
}

/// The simulator's spread of (calls answered, upstream requests per call)
/// over a few seeds for the twin scenario `file` in `scenarios/`.
fn simulated_twin(file: &str) -> Vec<(f64, f64)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(file);
    let sc = levee_sim::Scenario::load(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    (0..4)
        .map(|seed| {
            let v = &levee_sim::simulate(&sc, seed).variants[0];
            (v.success_ratio, v.attempts_per_request_mean)
        })
        .collect()
}

/// The lowest and highest of `pick` over a simulated spread.
fn spread(sim: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64) -> (f64, f64) {
    let lo = sim.iter().map(pick).fold(f64::INFINITY, f64::min);
    let hi = sim.iter().map(pick).fold(0.0, f64::max);
    (lo, hi)
}

/// A live twin run: `levee drill` at `rate` for `duration` with `fault`
/// against a fresh mock and a gateway whose one route has the lines
/// `route`; returns (calls answered, upstream requests per call, what it
/// says of itself for a failed assertion).
async fn live_twin(
    route: &str,
    fault: &str,
    rate: f64,
    timeout_ms: u64,
    bound: Duration,
) -> (f64, f64, String) {
    let mock = levee_mock::spawn(
        "127.0.0.1:0".parse().expect("addr"),
        levee_mock::MockOptions::default(),
    )
    .await
    .expect("mock starts");
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nproviders:\n  p: {{ api: openai, base_url: \"{}\" }}\nroutes:\n  - targets: [p]\n{route}",
        mock.url()
    );
    let config = levee_config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let gw = levee_gateway::spawn(config, 7, std::future::pending())
        .await
        .expect("gateway starts");
    let mut a = args(format!("http://{}", gw.addr), mock.url(), &[fault]);
    a.rate = rate;
    a.duration = "6s".into();
    a.timeout_ms = timeout_ms;
    let plan = a.plan().expect("plan");
    let live = tokio::time::timeout(bound, levee_drill::run(&plan, false))
        .await
        .expect("the drill ends by itself")
        .expect("the drill runs");
    gw.shutdown().await;
    mock.shutdown().await;
    let calls = live.logical_requests.max(1) as f64;
    let success = live.outcomes.get("success").copied().unwrap_or(0) as f64 / calls;
    let per_call = live.upstream_requests as f64 / calls;
    let said = format!(
        "live: success {success:.3}, {per_call:.2} requests a call, outcomes {:?}, unanswered {}",
        live.outcomes, live.unanswered
    );
    (success, per_call, said)
}

/// Real time, ~70 s, and sensitive to a starved machine: run alone with
/// `cargo test -p levee-drill --test drill storm -- --ignored`. Alone it
/// agreed (live 83 % answered at 1.84 requests a call; simulated 73–84 % at
/// 1.88–2.09); run beside a compiler on the same two cores, the live gateway
/// answered 42 % and refused 63 of 120 calls `rate_limited` with no attempt,
/// a disagreement the simulator, which never starves, does not show.
#[ignore = "real time, ~70 s; run alone (see the doc comment)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_429_storm_falls_inside_the_simulators_spread() {
    let route = "    retry: { max_attempts: 3 }\n    deadline: { default: 60s, max: 120s }\n";
    let fault = "status=429,retry_after=2,probability=0.6";
    let (success, per_call, live) =
        live_twin(route, fault, 20.0, 60_000, Duration::from_secs(150)).await;
    let sim = simulated_twin("twin-429-storm.yaml");
    let said = format!("{live}; simulated: {sim:?}");
    eprintln!("{said}");
    let ((s_lo, s_hi), (c_lo, c_hi)) = (spread(&sim, |s| s.0), spread(&sim, |s| s.1));
    // 120 calls: give or take 8 points of success and 10 % of requests a
    // call around the simulator's range.
    assert!(success >= s_lo - 0.08 && success <= s_hi + 0.08, "{said}");
    assert!(per_call >= 0.9 * c_lo && per_call <= 1.1 * c_hi, "{said}");
    // The storm never shuts the model: most calls are answered.
    assert!(success > 0.6, "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_random_loss_agrees_with_the_simulator_within_ten_percent() {
    // 60 % of requests 503 at random, Levee's default route (no retry
    // block): graded admission refuses nothing and retries that win get
    // eight attempts, live as in the simulator.
    let fault = "status=503,probability=0.6";
    let (success, per_call, live) =
        live_twin("", fault, 50.0, 30_000, Duration::from_secs(60)).await;
    let sim = simulated_twin("twin-random-loss.yaml");
    let said = format!("{live}; simulated: {sim:?}");
    eprintln!("{said}");
    let ((s_lo, s_hi), (c_lo, c_hi)) = (spread(&sim, |s| s.0), spread(&sim, |s| s.1));
    // Within 10 % of the simulator's range on both.
    assert!(success >= 0.9 * s_lo && success <= 1.1 * s_hi, "{said}");
    assert!(per_call >= 0.9 * c_lo && per_call <= 1.1 * c_hi, "{said}");
    // And never worse than a single attempt would be, by a wide margin.
    assert!(success >= 0.9, "{said}");
}

/// Drills through a provider that goes off the network by `fault` for 2 s
/// of 4 (50 calls a second, 1.5 s deadlines), and checks what every black
/// hole must leave: every call answered by its deadline, no attempt outliving
/// its caller (no answer the provider generated went to nobody, once it came
/// back), and calls answered before and after the window.
async fn drill_through_a_hole(fault: &str) -> (levee_drill::Report, serde_json::Value) {
    let (mock, gw) = servers().await;
    let mut a = args(format!("http://{}", gw.addr), mock.url(), &[fault]);
    a.duration = "4s".into();
    a.rate = 50.0;
    a.timeout_ms = 1500;
    a.gateway_admin = Some(format!("http://{}", gw.admin_addr));
    let plan = a.plan().expect("plan");
    let report = tokio::time::timeout(Duration::from_secs(60), levee_drill::run(&plan, false))
        .await
        .expect("the drill ends by itself")
        .expect("the drill runs");
    let json = serde_json::to_value(&report).expect("json");
    eprintln!("{json}");
    assert_eq!(report.unanswered, 0, "{json}");
    assert_eq!(
        report.answered_late, 0,
        "every answer by its deadline: {json}"
    );
    assert_eq!(
        report.answers_nobody_received,
        Some(0),
        "no orphaned attempt: {json}"
    );
    assert!(
        report.outcomes.get("success").copied().unwrap_or(0) >= 50,
        "before and after the window, calls are answered: {json}"
    );
    gw.shutdown().await;
    mock.shutdown().await;
    (report, json)
}

/// The provider goes off the network for 2 s (`blackhole`: connections
/// accepted and held unread, nothing on an open connection answered): the
/// drill reports the gateway's attempts by result (timeouts, not answers)
/// and when the breaker opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_provider_is_timed_out_and_leaves_no_orphan() {
    let (report, json) = drill_through_a_hole("blackhole=true,from=1s,to=3s").await;
    let by = report
        .upstream_attempts_by_result
        .expect("attempts by result");
    let failed: u64 = by
        .iter()
        .filter(|(r, _)| r.as_str() != "success")
        .map(|(_, n)| n)
        .sum();
    assert!(failed > 0, "the black hole shows in the attempts: {json}");
}

/// The provider goes off the network at the handshake for 2 s
/// (`syn_blackhole`: every SYN dropped, connects wait out their timeout;
/// requests on connections already open go unanswered): the gateway's
/// connects time out (`connect_timeout` among the attempts by result, at
/// the provider's 250 ms `connect_timeout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_dropping_syns_is_timed_out_and_leaves_no_orphan() {
    let (report, json) = drill_through_a_hole("syn_blackhole=true,from=1s,to=3s").await;
    let by = report
        .upstream_attempts_by_result
        .expect("attempts by result");
    assert!(
        by.get("connect_timeout").copied().unwrap_or(0) > 0,
        "connects timed out in the hole: {json}"
    );
}
