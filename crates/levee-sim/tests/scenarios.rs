//! The shipped scenarios reproduce the seeds' shapes. Each run is seeded, so
//! the numbers are the same on every machine; the bounds are the seeds'
//! claims, not the last run's output.

use levee_sim::{simulate, Report, Scenario, VariantReport, DEFAULT_SEED};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

fn scenario(name: &str) -> Scenario {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name);
    Scenario::load(&p).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Each shipped scenario runs once per test binary, shared by its tests.
fn run(name: &str) -> &'static Report {
    static RUNS: OnceLock<Mutex<HashMap<String, &'static Report>>> = OnceLock::new();
    let runs = RUNS.get_or_init(Default::default);
    let mut runs = runs.lock().unwrap_or_else(|e| e.into_inner());
    runs.entry(name.to_string())
        .or_insert_with(|| Box::leak(Box::new(simulate(&scenario(name), DEFAULT_SEED))))
}

/// Runs `name` over several seeds (each a different clock phase for the
/// simulated Levee), keeping only the variants `keep` accepts.
fn seeds(name: &str, keep: impl Fn(&str) -> bool) -> Vec<Report> {
    let mut sc = scenario(name);
    sc.variants.retain(|v| keep(&v.name));
    (0..3).map(|i| simulate(&sc, DEFAULT_SEED + i)).collect()
}

#[test]
fn a_30_percent_brownout_costs_levee_callers_almost_nothing() {
    for r in seeds("brownout.yaml", |n| n == "levee") {
        let v = variant(&r, "levee");
        // Eight attempts (the default) give 1 − 0.3⁸ = 99.99 % during the
        // minute of fault at 1.43 requests a call on average. Three gave
        // 99.3 % over the run; a budget funded by successes alone, 94.2 %.
        assert!(v.success_ratio >= 0.995, "{v:?}");
        // The busiest second, not the average: a few points over 1.43.
        assert!(v.amplification_peak <= 1.55, "{v:?}");
    }
}

/// The budget taken literally (`refunds: false`): retries are held to 10 %
/// of successes plus 5 a second, so the brownout's peak stays near 1.1×
/// the baseline, and callers pay for it in answers (94 % against 100 %).
#[test]
fn a_30_percent_brownout_with_refunds_off_holds_retries_to_the_ratio() {
    for r in seeds("brownout.yaml", |n| n == "levee, refunds off") {
        let v = variant(&r, "levee, refunds off");
        assert!(v.amplification_peak <= 1.15, "{v:?}");
        assert!((0.9..0.98).contains(&v.success_ratio), "{v:?}");
    }
}

#[test]
fn a_total_outage_behind_three_caller_layers_stays_near_the_baseline() {
    for r in seeds("outage-three-layers.yaml", |n| n.starts_with("levee")) {
        let honour = variant(&r, "levee, callers honour");
        assert!(honour.amplification_peak <= 1.15, "{honour:?}");
        // Callers that ignore x-should-retry: their SDK-marked retries spend
        // the budget, the breaker opens on faults in a row, and it ramps
        // back after recovery instead of letting the waiting wave in at once.
        let ignore = variant(&r, "levee, callers ignore");
        assert!(ignore.amplification_peak <= 1.5, "{ignore:?}");
    }
}

fn variant<'a>(r: &'a Report, name: &str) -> &'a VariantReport {
    r.variant(name)
        .unwrap_or_else(|| panic!("no variant {name}"))
}

#[test]
fn two_layer_storm_naive_multiplies_to_3600_and_stays_degraded_after_the_fault() {
    let r = run("two-layer-storm.yaml");
    let naive = variant(r, "naive");
    assert_eq!(naive.baseline_upstream_rps, 400.0);
    // 400/s × 3 caller attempts × 3 gateway attempts.
    assert!(
        (3200.0..=4000.0).contains(&naive.peak_upstream_rps),
        "{naive:?}"
    );
    assert_eq!(naive.attempts_per_request_max, 9);
    // Metastable: the trigger ended at 90 s; the provider never caught up.
    assert!(
        naive.recovery_seconds_after_fault.is_none_or(|s| s > 60.0),
        "{naive:?}"
    );
    assert!(naive.success_ratio < 0.6, "{naive:?}");
}

#[test]
fn two_layer_storm_levee_stays_within_its_budget_and_recovers_in_seconds() {
    let r = run("two-layer-storm.yaml");
    let levee = variant(r, "levee");
    let base = levee.baseline_upstream_rps;
    assert_eq!(base, 400.0);
    // ratio 0.1 of the last second's successes + min_per_second 5 (+1: the
    // budget's own rounding, see levee-policy's budget invariant).
    assert!(
        levee.peak_upstream_rps <= 1.1 * base + 5.0 + 1.0,
        "{levee:?}"
    );
    let recovery = levee.recovery_seconds_after_fault.expect("levee recovers");
    assert!(recovery <= 6.0, "{levee:?}");
    // The fault is 30 s of 300 s: nearly everything outside it succeeds.
    assert!(levee.success_ratio > 0.85, "{levee:?}");
    assert!(levee.attempts_per_request_max <= 3);
    // The breaker is what turned the storm off, and it is Levee's own code
    // saying so.
    assert!(
        levee
            .detail
            .levee_reasons
            .get("circuit_open")
            .copied()
            .unwrap_or(0)
            > 0
    );
}

/// The storm's bill: every answer the provider generated is billed, read
/// or orphaned. The naive stack pays for hundreds of dollars of answers
/// nobody received (at the default $0.006 an answer); Levee, which stops
/// an attempt when its caller leaves and never retries what it will not
/// deliver, pays for none, and less in all.
#[test]
fn two_layer_storm_costs_the_naive_stack_hundreds_of_undelivered_dollars() {
    let r = run("two-layer-storm.yaml");
    let (naive, levee) = (variant(r, "naive"), variant(r, "levee"));
    assert!(naive.undelivered_usd > 100.0, "{naive:?}");
    assert!(naive.undelivered_usd < naive.cost_usd);
    assert_eq!(levee.undelivered_usd, 0.0, "{levee:?}");
    assert!(levee.cost_usd < naive.cost_usd, "{levee:?} {naive:?}");
    // Delivered answers at $0.006 each: the cost is at least those.
    let delivered = levee.cost_usd - levee.undelivered_usd;
    assert!(delivered > 0.0);
}

#[test]
fn three_layers_of_three_retries_make_27_attempts_and_levee_about_one() {
    let r = run("three-layers.yaml");
    let naive = variant(r, "naive");
    assert_eq!(naive.attempts_per_request_max, 27);
    assert!(
        naive.peak_upstream_rps >= 25.0 * naive.baseline_upstream_rps,
        "{naive:?}"
    );
    let levee = variant(r, "levee");
    assert!(levee.attempts_per_request_mean <= 1.1, "{levee:?}");
    assert!(levee.attempts_per_request_max <= 3, "{levee:?}");
    assert!(levee.amplification_peak < 1.3, "{levee:?}");
}

fn endpoint<'a>(v: &'a VariantReport, prefix: &str) -> &'a levee_sim::EndpointReport {
    v.endpoints
        .iter()
        .find(|e| e.name.starts_with(prefix))
        .unwrap_or_else(|| panic!("no endpoint {prefix} in {}", v.name))
}

#[test]
fn permanent_400_naive_wrapper_spends_the_allowance_and_the_workers_of_healthy_endpoints() {
    let r = run("permanent-400.yaml");
    // The allowance alone (a pool too large to fill).
    let wide = variant(r, "naive, unbounded pool");
    let broken = endpoint(wide, "draft");
    // 140/min × 5 attempts.
    assert!(
        (630.0..=770.0).contains(&broken.upstream_per_minute),
        "{broken:?}"
    );
    let total: f64 = wide.endpoints.iter().map(|e| e.upstream_per_minute).sum();
    assert!(total > 2000.0, "{total}");
    for healthy in ["search", "summarise"] {
        let e = endpoint(wide, healthy);
        assert!(e.rate_limited_per_minute > 0.0, "collateral 429s: {e:?}");
        assert!(e.attempts_per_request_mean > 1.05, "{e:?}");
    }
    // Little's law: 2.33/s × 15.2 s ≈ 35 workers wanted by one endpoint.
    let demand = broken.workers_busy_mean.expect("a pool");
    assert!((30.0..=42.0).contains(&demand), "{demand}");

    // With the real pool of 24, the healthy endpoints are the ones that fail.
    let naive = variant(r, "naive");
    assert!(endpoint(naive, "draft").workers_busy_mean.unwrap_or(0.0) > 20.0);
    for healthy in ["search", "summarise"] {
        let e = endpoint(naive, healthy);
        assert!(e.success_ratio < 0.5, "{e:?}");
    }
}

#[test]
fn permanent_400_through_levee_costs_one_attempt_and_no_collateral_damage() {
    let r = run("permanent-400.yaml");
    let levee = variant(r, "levee");
    let broken = endpoint(levee, "draft");
    assert!(
        (120.0..=160.0).contains(&broken.upstream_per_minute),
        "{broken:?}"
    );
    assert!(broken.workers_busy_mean.unwrap_or(99.0) < 1.0, "{broken:?}");
    for healthy in ["search", "summarise"] {
        let e = endpoint(levee, healthy);
        assert!(e.success_ratio > 0.999, "{e:?}");
        assert_eq!(e.rate_limited_per_minute, 0.0, "{e:?}");
        assert_eq!(e.attempts_per_request_mean, 1.0, "{e:?}");
    }
    assert_eq!(levee.attempts_per_request_max, 1);
}

/// Busiest 100 ms over the mean 100 ms, from 1 s to 60 s (after the common
/// first burst).
fn waviness(v: &VariantReport) -> f64 {
    let b = &v.detail.upstream[10..600];
    let max = f64::from(*b.iter().max().unwrap_or(&0));
    let mean = b.iter().map(|&n| f64::from(n)).sum::<f64>() / b.len() as f64;
    max / mean
}

#[test]
fn synchronized_429s_come_back_in_waves_on_a_fixed_schedule_and_spread_with_full_jitter() {
    let r = run("synchronized-429.yaml");
    let fixed = variant(r, "fixed schedule");
    let jitter = variant(r, "full jitter");
    assert!(
        waviness(fixed) > 2.0 * waviness(jitter),
        "fixed {} vs jitter {}",
        waviness(fixed),
        waviness(jitter)
    );
    // Waves waste attempts on 429s and exhaust more jobs' attempts.
    assert!(fixed.attempts_per_request_mean > jitter.attempts_per_request_mean);
    assert!(fixed.success_ratio < jitter.success_ratio);
}

#[test]
fn the_same_seed_gives_the_same_numbers() {
    let sc = scenario("three-layers.yaml");
    let a = serde_json::to_string(&simulate(&sc, 11)).unwrap();
    let b = serde_json::to_string(&simulate(&sc, 11)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn json_has_exactly_the_design_fields_and_endpoints_only_with_several_streams() {
    let fields = [
        "name",
        "baseline_upstream_rps",
        "peak_upstream_rps",
        "amplification_peak",
        "attempts_per_request_mean",
        "attempts_per_request_max",
        "success_ratio",
        "recovery_seconds_after_fault",
        // Beyond the design's list: what each variant cost.
        "cost_usd",
        "undelivered_usd",
    ];
    let v = serde_json::to_value(run("three-layers.yaml")).unwrap();
    let obj = v.as_object().unwrap();
    assert_eq!(obj.keys().collect::<Vec<_>>(), ["variants"]);
    for variant in v["variants"].as_array().unwrap() {
        let mut keys: Vec<&str> = variant
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        let mut want = fields.to_vec();
        want.sort_unstable();
        assert_eq!(keys, want);
    }
    let v = serde_json::to_value(run("permanent-400.yaml")).unwrap();
    assert!(v["variants"][0]["endpoints"].is_array());
    assert!(v["variants"][0]["recovery_seconds_after_fault"].is_null());
}

#[test]
fn the_plot_is_an_svg_with_a_line_per_variant_the_fault_window_and_labelled_axes() {
    let r = run("three-layers.yaml");
    let out = std::env::temp_dir().join(format!("levee-sim-plot-{}.svg", std::process::id()));
    levee_sim::write_svg(r, &out).unwrap();
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
    assert!(svg.contains("upstream requests per second"));
    assert!(svg.contains("time since start (s)"));
    assert!(svg.contains("fault window"));
    for v in &r.variants {
        assert!(svg.contains(&format!(">{}<", v.name)) || svg.contains(&v.name));
    }
    assert!(svg.matches("<polyline").count() >= r.variants.len());
}

/// A small world failing every request with `status`, behind a Levee route
/// with `retry` and a caller whose attempts carry `timeout`.
fn levee_world(status: u16, timeout: &str, retry: &str) -> Report {
    let text = format!(
        r#"
duration: 20s
arrivals:
  - {{ name: s, rate: 50, model: "p/m" }}
providers:
  p:
    workers: 100
    latency: 50ms
    faults:
      - {{ status: {status}, latency: 10ms }}
variants:
  - name: levee
    callers:
      - {{ name: caller, attempts: 1, timeout: {timeout} }}
    gateway:
      levee:
        routes:
          - match: {{ model_prefix: "p/" }}
            expected_attempt_ms: 2000
            retry: {retry}
            # These tests pin the planner's rules; a breaker would stop a
            # provider that fails everything before the rules show.
            circuit_breaker: {{ min_requests: 1000000 }}
"#
    );
    let sc = Scenario::parse(&text, None).unwrap_or_else(|e| panic!("{e}\n{text}"));
    simulate(&sc, DEFAULT_SEED)
}

#[test]
fn the_levee_hop_never_retries_a_deterministic_400() {
    let r = &levee_world(400, "30s", "{ max_attempts: 5, backoff: { base_ms: 10 }, budget: { ratio: 10, min_per_second: 1000 } }");
    assert_eq!(variant(r, "levee").attempts_per_request_max, 1);
    let r = &levee_world(503, "30s", "{ max_attempts: 5, backoff: { base_ms: 10 }, budget: { ratio: 10, min_per_second: 1000 } }");
    assert_eq!(variant(r, "levee").attempts_per_request_max, 5);
}

#[test]
fn the_levee_hop_starts_no_retry_the_callers_deadline_cannot_hold() {
    // A retry needs wait + expected_attempt (2 s) + margin; the caller sends 1.5 s.
    let r = &levee_world(503, "1500ms", "{ max_attempts: 5, backoff: { base_ms: 10 }, budget: { ratio: 10, min_per_second: 1000 } }");
    let v = variant(r, "levee");
    assert_eq!(v.attempts_per_request_max, 1);
    assert!(
        v.detail
            .levee_reasons
            .get("deadline_exceeded")
            .copied()
            .unwrap_or(0)
            > 0
    );
}

#[test]
fn the_levee_hop_spends_the_retry_budget_from_the_config() {
    // Every attempt fails: no successes fund retries, so only min_per_second flows.
    let r = &levee_world(
        503,
        "30s",
        "{ max_attempts: 3, backoff: { base_ms: 10 }, budget: { ratio: 0.1, min_per_second: 5 } }",
    );
    let v = variant(r, "levee");
    let retries_per_s = (v.attempts_per_request_mean - 1.0) * 50.0;
    assert!(retries_per_s <= 5.5, "{v:?}");
    assert!(
        v.detail
            .levee_reasons
            .get("budget_exhausted")
            .copied()
            .unwrap_or(0)
            > 0
    );
}

#[test]
fn a_429_storm_through_levee_is_no_worse_than_the_sdk_calling_directly() {
    let r = run("429-storm.yaml");
    let (direct, levee) = (variant(r, "direct SDK"), variant(r, "levee"));
    // A throttle that shut the model for each 2 s wait answered 3.7 %.
    assert!(levee.success_ratio >= 0.75, "{levee:?}");
    assert!(
        levee.success_ratio >= direct.success_ratio - 0.01,
        "levee {} direct {}",
        levee.success_ratio,
        direct.success_ratio
    );
    assert!(
        levee.attempts_per_request_mean <= direct.attempts_per_request_mean + 0.02,
        "levee {} direct {}",
        levee.attempts_per_request_mean,
        direct.attempts_per_request_mean
    );
}

#[test]
fn a_429_storm_through_levee_is_within_five_points_of_direct_at_every_seed() {
    // The pace judged one second of 1-10 answers at a time: noise read as
    // "slowing down helped" cut it to what the provider accepted, second
    // after second, and two of these eight seeds answered 53 % and 17 %
    // (direct: 76-81 % at each).
    let sc = scenario("429-storm.yaml");
    let reports: Vec<Report> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..8)
            .map(|seed| {
                s.spawn({
                    let sc = &sc;
                    move || simulate(sc, seed)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (seed, r) in reports.iter().enumerate() {
        let (direct, levee) = (variant(r, "direct SDK"), variant(r, "levee"));
        assert!(
            levee.success_ratio >= direct.success_ratio - 0.05,
            "seed {seed}: levee {} direct {}",
            levee.success_ratio,
            direct.success_ratio
        );
        // A retry that waited the provider's Retry-After is not paced again
        // (paced, each went to the back of the line: p99 11-16 s at these
        // seeds; the SDK's own is 4.5 s).
        let p99 = levee.detail.latency_p99;
        assert!(
            p99 < std::time::Duration::from_secs(10),
            "seed {seed}: levee p99 {p99:?}"
        );
    }
}

#[test]
fn a_saturated_provider_sees_at_most_a_tenth_more_than_the_offered_load() {
    let r = run("saturated.yaml");
    let levee = variant(r, "levee");
    // 150 calls/s offered to a capacity of 100/s; refunded retries gave
    // 1.27x. What the budget allows on top: a tenth of the successes plus
    // 5 retries/s, 165/s in all (one more for the count's granularity).
    // Graded admission refuses nothing here (two thirds succeed).
    assert!(
        levee.baseline_upstream_rps <= 150.0 + 0.1 * 100.0 + 5.0 + 1.0,
        "{levee:?}"
    );
    assert!(levee.success_ratio >= 0.6, "{levee:?}");
}

#[test]
fn a_provider_just_past_capacity_is_told_from_a_brownout() {
    let r = run("saturated-near-capacity.yaml");
    let levee = variant(r, "levee");
    // 120 calls/s offered; treating its winning-looking retries as a
    // brownout's sent 1.46x and answered fewer.
    assert!(levee.baseline_upstream_rps <= 1.2 * 120.0, "{levee:?}");
    assert!(levee.success_ratio >= 0.78, "{levee:?}");
}

#[test]
fn a_stalled_primary_with_8_s_callers_is_answered_by_the_backup() {
    let r = run("stalled-primary.yaml");
    let levee = variant(r, "levee");
    // Every call of the 20 s stall failed when the 20 s expected attempt
    // kept the backup out of an 8 s deadline.
    assert!(levee.success_ratio >= 0.9, "{levee:?}");
}

#[test]
fn the_report_says_how_long_callers_waited() {
    let r = run("429-storm.yaml");
    let direct = variant(r, "direct SDK");
    // Three attempts, each 429 waited out for 2 s: the slowest calls take
    // two waits and an answer (up to 0.8 s), a little over 4 s.
    let (p50, p99) = (direct.detail.latency_p50, direct.detail.latency_p99);
    assert!(
        p50 > std::time::Duration::ZERO && p50 < p99,
        "{p50:?} {p99:?}"
    );
    assert!((4.0..5.5).contains(&p99.as_secs_f64()), "{p99:?}");
}

#[test]
fn random_loss_is_retried_not_refused() {
    // 60 % of requests 503 at random at flat latency, 20 calls/s for 40 s,
    // Levee's defaults. A breaker that opened on the fault ratio answered
    // 17 % here (19 % live); the SDK alone gets 78 %. Eight attempts give
    // 98.3 % at 2.46 requests a call, less what the first seconds cost
    // while the evidence that the faults do not follow load comes in.
    for r in seeds("random-loss.yaml", |_| true) {
        let (levee, direct) = (variant(&r, "levee"), variant(&r, "direct SDK"));
        assert!(levee.success_ratio >= 0.95, "{levee:?}");
        assert!(
            levee.success_ratio >= direct.success_ratio + 0.15,
            "{} against {}",
            levee.success_ratio,
            direct.success_ratio
        );
        assert!(levee.attempts_per_request_mean <= 2.6, "{levee:?}");
        let p99 = levee.detail.latency_p99;
        assert!(p99 <= std::time::Duration::from_secs(3), "p99 {p99:?}");
    }
}

#[test]
fn a_429_that_a_second_attempt_wins_is_retried_promptly() {
    // 60 % of requests 429 + `retry-after: 2` at random, 20 calls/s for
    // 30 s, Levee's defaults. Waiting the full 2 s before each of up to
    // seven retries put p99 past 10 s; the SDK alone answers 78 %.
    // Eight attempts at 40 % cost 2.46 requests a call on average; 600
    // calls read it to within about ±0.15.
    for r in seeds("lost-race-429.yaml", |n| n == "levee") {
        let levee = variant(&r, "levee");
        assert!(levee.success_ratio >= 0.95, "{levee:?}");
        assert!(levee.attempts_per_request_mean <= 2.7, "{levee:?}");
        let p99 = levee.detail.latency_p99;
        assert!(
            p99 <= std::time::Duration::from_millis(8_500),
            "p99 {p99:?}"
        );
    }
}

#[test]
fn an_overloaded_primary_gives_way_to_the_backup_within_a_second() {
    // Every request to the primary answered 529, a healthy backup: each
    // call is answered by the backup, the first ones after one 529, the
    // rest without asking the primary once its breaker opened.
    for r in seeds("backup-within-1s.yaml", |_| true) {
        let levee = variant(&r, "levee");
        assert_eq!(levee.success_ratio, 1.0, "{levee:?}");
        assert!(levee.attempts_per_request_max <= 2, "{levee:?}");
        let p99 = levee.detail.latency_p99;
        assert!(p99 <= std::time::Duration::from_secs(1), "p99 {p99:?}");
    }
}

#[test]
fn a_total_outage_costs_at_most_two_requests_a_call_and_fails_within_two_seconds() {
    // No backup, every request 503: the SDK alone sends 3 requests a call.
    for r in seeds("outage.yaml", |_| true) {
        let (levee, direct) = (variant(&r, "levee"), variant(&r, "direct SDK"));
        assert!(direct.attempts_per_request_mean > 2.9, "{direct:?}");
        assert!(levee.attempts_per_request_mean <= 2.0, "{levee:?}");
        let p99 = levee.detail.latency_p99;
        assert!(p99 <= std::time::Duration::from_secs(2), "p99 {p99:?}");
    }
}

#[test]
fn a_provider_losing_half_at_random_is_never_shut_for_the_routes_falling_back_to_it() {
    // OpenAI down, Anthropic answering half of everything 529 at random;
    // the openai/ route falls back to Anthropic. An open breaker on
    // Anthropic answered 27 % of all calls here; the SDK alone gets 45 %
    // (89 % of the Anthropic calls, none of the OpenAI ones).
    for r in seeds("two-providers.yaml", |_| true) {
        let (levee, direct) = (variant(&r, "levee"), variant(&r, "direct SDK"));
        assert!(levee.success_ratio >= 0.95, "{levee:?}");
        for e in &levee.endpoints {
            let d = direct.endpoints.iter().find(|d| d.name == e.name);
            let floor = d.map_or(0.0, |d| d.success_ratio);
            assert!(e.success_ratio >= floor, "{e:?} against {d:?}");
        }
    }
}

#[test]
fn a_balanced_group_answers_what_one_region_and_an_ordered_fallback_cannot() {
    // 12 calls/s against two regions of 10/s each, the west one throttled
    // for 20 s: one region answers about five in six (85 %), an ordered
    // fallback hardly more (87 %: the backup gets only the primary's
    // refusals); the group spreads the load and leaves the throttled
    // region at once (97 % at the default seed).
    for r in seeds("balanced-region.yaml", |n| n.starts_with("levee")) {
        let balanced = variant(&r, "levee, balanced");
        let one = variant(&r, "levee, one region");
        let ordered = variant(&r, "levee, ordered fallback");
        assert!(balanced.success_ratio >= 0.95, "{balanced:?}");
        assert!(
            balanced.success_ratio >= one.success_ratio.max(ordered.success_ratio) + 0.08,
            "balanced {balanced:?}\none {one:?}\nordered {ordered:?}"
        );
    }
}

/// Twenty routes to one provider and model share one retry floor: in an
/// outage the breaker has not yet stopped, they send the provider what one
/// route with all their traffic sends (twenty floors of their own peaked
/// at 1.85x the offered load against one route's 1.47x).
#[test]
fn twenty_routes_to_one_provider_retry_as_one_route_does() {
    for r in seeds("twenty-routes.yaml", |_| true) {
        let one = variant(&r, "one route");
        let twenty = variant(&r, "twenty routes");
        assert!(
            twenty.amplification_peak <= one.amplification_peak + 0.1,
            "{one:?}\n{twenty:?}"
        );
    }
}
