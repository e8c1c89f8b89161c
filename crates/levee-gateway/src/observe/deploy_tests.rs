//! The files under deploy/ that operators load as they are: the Prometheus
//! alert rules pass promtool (syntax, and unit tests of what fires), and the
//! Grafana dashboard parses and queries only metrics Levee exports.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file)
}

fn read(file: &str) -> String {
    std::fs::read_to_string(deploy(file)).unwrap_or_else(|e| panic!("deploy/{file}: {e}"))
}

/// Every series name the admin `/metrics` can show.
fn exported() -> BTreeSet<String> {
    let mut metrics = crate::observe::metrics::Metrics::new();
    let config = levee_config::Config::parse("").expect("empty config");
    let census = crate::observe::census::Census::new(&config, &mut metrics.registry);
    // Registered with the first config generation (ok and error series at 0).
    let _ = crate::runtime::generation::Generation::first(
        &config,
        &mut metrics.registry,
        &crate::clock::Clock::new(),
    );
    // A family shows in the exposition once it has a series: give each one.
    census.admitted(
        None,
        Some(b"svc"),
        0,
        Default::default(),
        Default::default(),
    );
    let requests = crate::observe::metrics::RouteOutcome {
        route: "r".into(),
        outcome: "success".into(),
    };
    metrics.requests.get_or_create(&requests).inc();
    let attempts = crate::observe::metrics::ProviderResult {
        provider: "p".into(),
        result: "success".into(),
    };
    metrics.upstream_attempts.get_or_create(&attempts).inc();
    let rejected = crate::observe::metrics::ReasonLabel {
        reason: "shed".into(),
    };
    metrics.rejected.get_or_create(&rejected).inc();
    let p = crate::observe::metrics::ProviderLabel {
        provider: "p".into(),
    };
    metrics.budget_exhausted.get_or_create(&p).inc();
    admission_series(&metrics);
    metrics.in_flight.get_or_create(&p).set(0);
    metrics.streams_failed.get_or_create(&p).inc();
    let fallback = crate::observe::metrics::RouteReason {
        route: "r".into(),
        reason: "x".into(),
    };
    metrics.fallbacks.get_or_create(&fallback).inc();
    let what = crate::observe::metrics::WhatLabel { what: "x".into() };
    metrics.state_fallbacks.get_or_create(&what).inc();
    let meter = crate::observe::metrics::ProviderMeter {
        provider: "p".into(),
        meter: "tokens",
    };
    metrics.allowance_remaining.get_or_create(&meter).set(1.0);
    metrics.allowance_limit.get_or_create(&meter).set(1.0);
    let share = crate::observe::metrics::ProviderCallerMeter {
        provider: "p".into(),
        caller: "c".into(),
        meter: "tokens",
    };
    metrics.allowance_share_used.get_or_create(&share).set(1.0);
    metrics.allowance_share.get_or_create(&share).set(1.0);
    spend_series(&metrics);
    let mut names = BTreeSet::new();
    for line in metrics.encode().lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("a TYPE line has a kind");
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        } else {
            names.insert(name.to_string());
        }
    }
    names
}

/// A series of the token and spend counters, and of the deadline ones.
fn spend_series(metrics: &crate::observe::metrics::Metrics) {
    let source = crate::observe::metrics::DeadlineSourceLabel {
        deadline_source: "default",
    };
    metrics
        .deadline_remaining_at_dispatch
        .get_or_create(&source)
        .observe(1.0);
    metrics.no_deadline(0, || "c".into());
    let key = (0, 0, 0, 0, true);
    metrics.tokens(key, 1, 1, |kind| crate::observe::metrics::TokensLabel {
        route: "r".into(),
        provider: "p".into(),
        model: "m".into(),
        caller: "c".into(),
        kind,
        outcome: "delivered",
    });
    metrics.spend(key, 1.0, || crate::observe::metrics::SpendLabel {
        route: "r".into(),
        provider: "p".into(),
        model: "m".into(),
        caller: "c".into(),
        outcome: "delivered",
    });
}

/// A series of each breaker and graded-admission gauge.
fn admission_series(metrics: &crate::observe::metrics::Metrics) {
    let pm = crate::observe::metrics::ProviderModel {
        provider: "p".into(),
        model: String::new(),
    };
    metrics.circuit_state.get_or_create(&pm).set(0);
    metrics.admitted_fraction.get_or_create(&pm).set(1.0);
    let belief = crate::observe::metrics::ProviderModelBelief {
        provider: "p".into(),
        model: "m".into(),
        belief: "loss",
    };
    metrics.circuit_belief.get_or_create(&belief).set(1);
}

/// Every `levee_…` identifier in `text`.
fn named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("levee_") {
        let start = i + at;
        let boundary = start == 0 || {
            let b = bytes[start - 1];
            !(b.is_ascii_alphanumeric() || b == b'_')
        };
        let end = start
            + text[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(text.len() - start);
        if boundary {
            out.insert(text[start..end].to_string());
        }
        i = end;
    }
    out
}

#[test]
fn alert_rules_and_dashboard_name_only_exported_metrics() {
    let exported = exported();
    assert!(
        exported.contains("levee_attempts_per_request_sum"),
        "{exported:?}"
    );
    for file in ["prometheus/alerts.yml", "grafana/levee.json"] {
        let used = named(&read(file));
        assert!(used.len() >= 5, "deploy/{file} uses {used:?}");
        let unknown: Vec<_> = used.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "deploy/{file} names metrics Levee does not export: {unknown:?}\nexported: {exported:?}"
        );
    }
}

#[test]
fn dashboard_has_the_panels_an_incident_needs() {
    let d: serde_json::Value =
        serde_json::from_str(&read("grafana/levee.json")).expect("levee.json is JSON");
    assert!(d["title"].is_string() && d["uid"].is_string());
    let exprs = panel_queries(&d);
    assert_incident_queries(&exprs);
    assert_filtered_by_instance(&d, &exprs);
}

/// Each panel's queries as (panel title, expression), every panel checked
/// to be titled, sized and querying Levee's metrics.
fn panel_queries(d: &serde_json::Value) -> Vec<(String, String)> {
    let panels = d["panels"].as_array().expect("panels");
    assert!(panels.len() >= 4, "{} panels", panels.len());
    let mut exprs = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("every panel has a title");
        let targets = p["targets"].as_array().expect("every panel has targets");
        assert!(!targets.is_empty(), "{title}: no queries");
        for t in targets {
            let e = t["expr"].as_str().expect("every target has an expr");
            assert!(e.contains("levee_"), "{title}: {e}");
            exprs.push((title.to_string(), e.to_string()));
        }
        let g = &p["gridPos"];
        assert!(g["w"].as_u64().is_some_and(|w| w > 0 && w <= 24), "{title}");
    }
    exprs
}

/// The queries an incident is read from: amplification, added latency,
/// deadline left at dispatch, breaker state, success ratio, time to first
/// byte, and in flight summed over replicas.
fn assert_incident_queries(exprs: &[(String, String)]) {
    let has = |metric: &str, also: &str| {
        exprs
            .iter()
            .any(|(_, e)| e.contains(metric) && e.contains(also))
    };
    assert!(
        has("levee_attempts_per_request_bucket", "le"),
        "amplification histogram"
    );
    for q in ["0.5,", "0.99,", "0.999,"] {
        assert!(
            has("levee_added_latency_seconds_bucket", q),
            "added latency {q}"
        );
    }
    assert!(has(
        "levee_deadline_remaining_at_dispatch_seconds_bucket",
        "histogram_quantile"
    ));
    assert!(
        has("levee_circuit_state", "provider"),
        "breaker state per provider"
    );
    assert!(
        has("levee_requests_total", r#"outcome=~"success|replayed""#),
        "the success ratio callers see"
    );
    for q in ["0.5,", "0.99,"] {
        assert!(
            has("levee_time_to_first_byte_seconds_bucket", q),
            "time to first byte {q}"
        );
    }
    // Each replica counts its own in flight: across replicas they add up.
    assert!(
        has("sum by (provider) (levee_in_flight", ""),
        "in flight summed"
    );
    assert!(
        !exprs
            .iter()
            .any(|(_, e)| e.contains("max by (provider) (levee_in_flight")),
        "in flight is summed over replicas, not the largest one's"
    );
}

/// One replica or all: every metric every panel reads is filtered by the
/// `instance` variable, whose values are the replicas Prometheus scrapes.
fn assert_filtered_by_instance(d: &serde_json::Value, exprs: &[(String, String)]) {
    let vars = d["templating"]["list"]
        .as_array()
        .expect("template variables");
    let instance = vars
        .iter()
        .find(|v| v["name"] == "instance")
        .expect("an `instance` variable");
    assert_eq!(
        instance["definition"],
        "label_values(levee_requests_total, instance)"
    );
    assert_eq!(
        instance["query"]["query"],
        "label_values(levee_requests_total, instance)"
    );
    for (title, e) in exprs {
        let mut rest = e.as_str();
        while let Some(at) = rest.find("levee_") {
            let tail = &rest[at..];
            let name_end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            assert!(
                tail[name_end..].starts_with(r#"{instance=~"$instance""#),
                "{title}: {} is not filtered by $instance in {e}",
                &tail[..name_end]
            );
            rest = &tail[name_end..];
        }
    }
}

#[test]
fn promtool_parses_every_dashboard_query() {
    let d: serde_json::Value =
        serde_json::from_str(&read("grafana/levee.json")).expect("levee.json is JSON");
    // Each query as a recording rule, Grafana's variables filled in.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            let e = t["expr"].as_str().expect("expr");
            let e = e.replace("$instance", ".*").replace("$__range", "1h");
            rules.push_str(&format!(
                "      - record: dashboard:query\n        expr: {}\n",
                serde_json::Value::String(e)
            ));
        }
    }
    let dir = std::env::temp_dir().join(format!("levee-dashboard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("dashboard.rules.yml");
    std::fs::write(&file, rules).expect("rules file");
    let path = file.display().to_string();
    let said = promtool(&["check", "rules", &path]);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some((ok, said)) = said {
        assert!(ok, "promtool check rules (dashboard queries): {said}");
    }
}

fn promtool(args: &[&str]) -> Option<(bool, String)> {
    let out = match Command::new("promtool")
        .args(args)
        .current_dir(deploy("prometheus"))
        .output()
    {
        Ok(o) => o,
        Err(_) => {
            assert!(
                std::env::var_os("LEVEE_REQUIRE_PROMTOOL").is_none(),
                "promtool is required (scripts/test installs it) but was not found"
            );
            eprintln!("promtool not installed: skipping (scripts/test installs it)");
            return None;
        }
    };
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    Some((out.status.success(), said))
}

#[test]
fn promtool_accepts_the_alert_rules() {
    if let Some((ok, said)) = promtool(&["check", "rules", "alerts.yml"]) {
        assert!(ok, "promtool check rules: {said}");
        assert!(said.contains("SUCCESS: 12 rules found"), "{said}");
    }
}

#[test]
fn amplification_alert_fires_above_1_2_attempts_per_request_for_5_minutes() {
    if let Some((ok, said)) = promtool(&["test", "rules", "alerts.test.yml"]) {
        assert!(ok, "promtool test rules: {said}");
    }
}
