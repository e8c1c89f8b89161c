//! `levee check`'s predictions: what each route would do in three standard
//! incidents, beside an SDK calling the provider directly.
//!
//! For every route, the config as written is run through the simulator
//! (the same policy code the gateway decides with) in front of a modelled
//! provider in three incidents on the route's primary: a 30 % 503
//! brownout, 60 % of requests answered 429 with `retry-after: 2`, and the
//! primary fully down. 20 calls/s for 30 s, each call made by the official
//! SDKs' default client (`max_retries=2`: three attempts, 0.5 s doubling
//! backoff with jitter, honouring `retry-after` and `x-should-retry`). The
//! same client calling the provider itself is the yardstick, and a route
//! that would answer fewer calls than it is flagged: the operator sees the
//! consequence of a config before an incident teaches it.

use levee_config::{Config, Route};
use levee_policy::classify::{Class, Outcome};
use serde_norway::{Mapping, Value};
use std::fmt::Write as _;

/// One standard incident on a route's primary.
#[derive(Clone, Copy, Debug)]
struct Incident {
    name: &'static str,
    /// The fault on the primary, as a scenario's `faults:` entry.
    fault: &'static str,
}

const INCIDENTS: [Incident; 3] = [
    Incident {
        name: "30% 503 brownout",
        fault: "{ status: 503, rate: 0.3, latency: 20ms }",
    },
    Incident {
        name: "60% 429, retry-after 2",
        fault: "{ status: 429, retry_after: 2s, rate: 0.6, latency: 20ms }",
    },
    Incident {
        name: "primary down",
        fault: "{ status: 503, rate: 1.0, latency: 20ms }",
    },
];

/// The SDKs' default client: three attempts, 0.5 s doubling backoff with
/// full jitter, 600 s timeout, honouring `retry-after` and
/// `x-should-retry`.
const SDK: &str = "{ name: sdk, attempts: 3, backoff: { base_ms: 500, multiplier: 2, max_ms: 8000, jitter: full }, timeout: 600s, retry_on: [408, 409, 429, 5xx, timeout, connect_error], honours_should_retry: true, honours_retry_after: true }";

/// Calls made in each prediction: 20 a second for 30 s.
const RATE: u32 = 20;
const SECONDS: u32 = 30;

/// What one route is predicted to do in one incident.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub route: String,
    pub incident: &'static str,
    /// Calls answered, direct and through Levee.
    pub direct_success: f64,
    pub levee_success: f64,
    /// Upstream requests per call, direct and through Levee.
    pub direct_per_call: f64,
    pub levee_per_call: f64,
}

impl Prediction {
    /// Whether Levee answers fewer calls than the SDK alone would (by more
    /// than one point: the runs are seeded, but 600 calls are a sample).
    pub fn worse(&self) -> bool {
        self.levee_success + 0.01 < self.direct_success
    }
}

/// Runs every route of `config` (whose YAML is `text`) through the three
/// incidents. A route no model name reaches (a path route, or one shadowed
/// by an earlier route) is left out.
pub fn predict(config: &Config, text: &str) -> Result<Vec<Prediction>, String> {
    let levee: Value = serde_norway::from_str(text).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (i, route) in config.routes.iter().enumerate() {
        let Some(model) = probe_model(config, i, route) else {
            continue;
        };
        let primary = &config.providers[route.targets[0].provider].name;
        for incident in INCIDENTS {
            let sc = scenario(config, &levee, &model, primary, incident)?;
            let report = levee_sim::simulate(&sc, levee_sim::DEFAULT_SEED);
            let get = |name: &str| report.variants.iter().find(|v| v.name == name);
            let (Some(direct), Some(through)) = (get("direct SDK"), get("levee")) else {
                continue;
            };
            out.push(Prediction {
                route: route.name.clone(),
                incident: incident.name,
                direct_success: direct.success_ratio,
                levee_success: through.success_ratio,
                direct_per_call: direct.attempts_per_request_mean,
                levee_per_call: through.attempts_per_request_mean,
            });
        }
    }
    Ok(out)
}

/// A model name that reaches route `i` (its first exact name; its prefix
/// and a made-up name; any name for a route that matches every model).
fn probe_model(config: &Config, i: usize, route: &Route) -> Option<String> {
    if route.matcher.path.is_some() {
        return None;
    }
    let model = match (route.matcher.models.first(), &route.matcher.model_prefix) {
        (Some(exact), _) => exact.clone(),
        (None, Some(p)) => format!("{p}check-probe"),
        (None, None) => "check-probe".to_string(),
    };
    let path = "/v1/chat/completions";
    (config.route_for(path, &model) == Some(i)).then_some(model)
}

/// The scenario of one incident on one route: every provider of the config
/// modelled as healthy (300 ms median, 1.2 s p99), the primary with the
/// incident's fault; the SDK direct, and the SDK through the config.
fn scenario(
    config: &Config,
    levee: &Value,
    model: &str,
    primary: &str,
    incident: Incident,
) -> Result<levee_sim::Scenario, String> {
    let mut providers = String::new();
    for p in &config.providers {
        let faults = match p.name == primary {
            true => format!("[{}]", incident.fault),
            false => "[]".to_string(),
        };
        let _ = writeln!(
            providers,
            "  {}: {{ workers: 1000, latency: {{ p50: 300ms, p99: 1200ms }}, faults: {faults} }}",
            quoted(&p.name)
        );
    }
    let text = format!(
        "name: check\nduration: {SECONDS}s\ndrain: 120s\narrivals:\n  - {{ name: app, rate: {RATE}, model: {model}, provider: {primary} }}\nproviders:\n{providers}variants:\n  - name: direct SDK\n    callers: [{SDK}]\n  - name: levee\n    callers: [{SDK}]\n",
        model = quoted(model),
        primary = quoted(primary),
    );
    let mut doc: Value = serde_norway::from_str(&text).map_err(|e| e.to_string())?;
    // The config itself, as the Levee variant's gateway.
    let mut gateway = Mapping::new();
    gateway.insert(Value::from("levee"), levee.clone());
    if let Some(v) = doc
        .get_mut("variants")
        .and_then(|v| v.as_sequence_mut())
        .and_then(|s| s.get_mut(1))
        .and_then(|v| v.as_mapping_mut())
    {
        v.insert(Value::from("gateway"), Value::Mapping(gateway));
    }
    let text = serde_norway::to_string(&doc).map_err(|e| e.to_string())?;
    levee_sim::Scenario::parse(&text, None).map_err(|e| e.to_string())
}

/// `s` as a YAML double-quoted string.
fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// Routes that tell callers not to retry (every Levee failure carries
/// `x-should-retry: false`) while not retrying a 429 or a 529 themselves:
/// in a 429 storm that a second attempt wins, the caller's SDK would have
/// retried and Levee stops it (40 % answered against 81 % direct).
pub fn unretried_overload(config: &Config) -> Vec<(String, Vec<u16>)> {
    let mut out = Vec::new();
    for route in &config.routes {
        let classifier = route.policy.classifier();
        let missing: Vec<u16> = [429u16, 529]
            .into_iter()
            .filter(|&status| {
                let o = Outcome::Status {
                    status,
                    retry_after: None,
                };
                !matches!(
                    classifier.classify(o),
                    Class::Throttled {
                        retryable: true,
                        ..
                    } | Class::Fault {
                        retryable: true,
                        ..
                    }
                )
            })
            .collect();
        if !missing.is_empty() {
            out.push((route.name.clone(), missing));
        }
    }
    out
}

/// The incidents the simulator predicts for each route (added to `out`),
/// and a warning on stderr for each where Levee would answer fewer calls
/// than the SDK alone, or where a route tells callers not to retry without
/// retrying a 429 or 529 itself. Returns how many predictions are worse.
pub fn report(out: &mut String, config: &Config, path: &std::path::Path) -> usize {
    for (route, statuses) in unretried_overload(config) {
        let list: Vec<String> = statuses.iter().map(u16::to_string).collect();
        eprintln!(
            "levee check: warning: route `{route}` does not retry {} but tells callers not to retry (x-should-retry: false): in a storm that a second attempt wins, callers get fewer answers than with no gateway; add them to `retry.on`",
            list.join(" or ")
        );
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    match predict(config, &text) {
        Ok(p) => {
            render(out, &p);
            let worse: Vec<_> = p.iter().filter(|p| p.worse()).collect();
            for w in &worse {
                eprintln!(
                    "levee check: warning: route `{}` in a {}: {:.1}% of calls answered through Levee against {:.1}% by the SDK alone",
                    w.route,
                    w.incident,
                    w.levee_success * 100.0,
                    w.direct_success * 100.0
                );
            }
            worse.len()
        }
        Err(e) => {
            eprintln!("levee check: warning: no incident predictions: {e}");
            0
        }
    }
}

/// The predictions as a table, each row Levee would lose marked.
pub fn render(out: &mut String, predictions: &[Prediction]) {
    let _ = writeln!(
        out,
        "\nincidents predicted (simulator, {RATE} calls/s for {SECONDS} s, the SDKs' default client with max_retries=2)"
    );
    let w = predictions
        .iter()
        .map(|p| p.route.chars().count())
        .max()
        .unwrap_or(0)
        .max(16);
    let _ = writeln!(
        out,
        "  {:<w$} {:<24} {:>16} {:>16}  verdict",
        "route", "incident", "direct", "through Levee"
    );
    for p in predictions {
        let cell = |s: f64, per: f64| format!("{:.1}% {per:.2}/call", s * 100.0);
        let verdict = match p.worse() {
            true => "WORSE than no gateway",
            false => "ok",
        };
        let _ = writeln!(
            out,
            "  {:<w$} {:<24} {:>16} {:>16}  {verdict}",
            p.route,
            p.incident,
            cell(p.direct_success, p.direct_per_call),
            cell(p.levee_success, p.levee_per_call),
        );
    }
}
