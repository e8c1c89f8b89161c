//! Turning a run's counts into the numbers a person compares: the public JSON
//! object and a table.
//!
//! Baseline, peak and recovery are [`crate::incident`]'s, the definitions
//! `levee drill` uses too.

use crate::incident::{self, listing, round};
use crate::metrics::Metrics;
use crate::scenario::Scenario;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// One variant's result. Serialises to the public JSON object, plus
/// `endpoints` when the scenario has more than one stream.
#[derive(Clone, Debug, Serialize)]
pub struct VariantReport {
    pub name: String,
    pub baseline_upstream_rps: f64,
    pub peak_upstream_rps: f64,
    pub amplification_peak: f64,
    pub attempts_per_request_mean: f64,
    pub attempts_per_request_max: u32,
    pub success_ratio: f64,
    pub recovery_seconds_after_fault: Option<f64>,
    /// What the providers billed over the run (US dollars at the
    /// scenario's `price`): every answer they generated, read or orphaned.
    pub cost_usd: f64,
    /// Of it, answers that reached no caller: orphaned work.
    pub undelivered_usd: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointReport>,
    #[serde(skip)]
    pub detail: Detail,
}

/// Per stream (endpoint), over the measurement window (the fault window, or
/// the whole run without one).
#[derive(Clone, Debug, Serialize)]
pub struct EndpointReport {
    pub name: String,
    pub requests: u64,
    pub success_ratio: f64,
    pub attempts_per_request_mean: f64,
    pub upstream_per_minute: f64,
    /// Provider 429s.
    pub rate_limited_per_minute: f64,
    /// Levee's `rate_limited` answers: its allowance refused the request.
    pub levee_rate_limited_per_minute: f64,
    /// The 99th percentile of its answered requests' time, arrival to
    /// answer (a wait for a slot of the allowance included), in seconds.
    pub latency_p99_seconds: f64,
    /// Mean workers of the caller pool held by this stream (Little's law, measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers_busy_mean: Option<f64>,
}

/// What is not in the JSON: the time series and counters behind the numbers.
#[derive(Clone, Debug, Default)]
pub struct Detail {
    pub resolution: Duration,
    /// Upstream attempts per bucket.
    pub upstream: Vec<u32>,
    /// Logical requests answered per bucket, and how many of them successfully.
    pub completed: Vec<u32>,
    pub succeeded: Vec<u32>,
    /// Logical requests that arrived, and those still unanswered at the
    /// end of the drain.
    pub requests: u64,
    pub unfinished: u64,
    /// `attempts_histogram[n]`: logical requests that made n upstream attempts.
    pub attempts_histogram: Vec<u64>,
    /// The longest queue the providers and the caller pool reached.
    pub provider_peak_queue: usize,
    pub pool_peak_queue: usize,
    /// Levee's failures by `x-levee-reason`.
    pub levee_reasons: BTreeMap<String, u64>,
    /// Events the engine processed (its cost).
    pub events: u64,
    /// Arrival to answer of every answered request, success or not: the
    /// median and the 99th percentile (zero when none was answered).
    pub latency_p50: Duration,
    pub latency_p99: Duration,
}

impl Detail {
    /// Upstream requests/s per bucket.
    pub fn upstream_rps(&self) -> impl Iterator<Item = f64> + '_ {
        let w = self.resolution.as_secs_f64();
        self.upstream.iter().map(move |&n| f64::from(n) / w)
    }
}

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    #[serde(skip)]
    pub scenario: String,
    /// First fault start, last fault end (seconds).
    #[serde(skip)]
    pub fault: Option<(f64, f64)>,
    #[serde(skip)]
    pub duration: Duration,
    pub variants: Vec<VariantReport>,
}

impl Report {
    /// A variant by name.
    pub fn variant(&self, name: &str) -> Option<&VariantReport> {
        self.variants.iter().find(|v| v.name == name)
    }
}

/// Summarises one variant's metrics.
pub(crate) fn summarise(
    sc: &Scenario,
    name: &str,
    mut m: Metrics,
    reasons: BTreeMap<String, u64>,
) -> VariantReport {
    let res = sc.resolution.as_secs_f64();
    let counts = |v: &[u32]| -> Vec<f64> { v.iter().map(|&n| f64::from(n)).collect() };
    let (upstream, completed, succeeded) = (
        counts(&m.upstream),
        counts(&m.completed),
        counts(&m.succeeded),
    );
    let fault = sc
        .fault_span()
        .map(|(a, b)| (a.as_secs_f64(), b.as_secs_f64()));
    let steps = incident::Steps {
        step: res,
        upstream: &upstream,
        completed: &completed,
        succeeded: &succeeded,
        end: sc.duration.as_secs_f64(),
    };
    let numbers = incident::numbers(&steps, fault, 0.0);

    let mut latencies = std::mem::take(&mut m.latencies);
    latencies.sort_unstable();
    let (latency_p50, latency_p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    let requests: u64 = m.streams.iter().map(|s| s.requests).sum();
    let successes: u64 = m.streams.iter().map(|s| s.successes).sum();
    let unfinished: u64 = m.streams.iter().map(|s| s.unfinished).sum();
    let attempts_mean =
        incident::mean_attempts(m.hist.iter().enumerate().map(|(a, &c)| (a as u64, c)));
    let endpoints = if sc.streams.len() > 1 {
        endpoint_reports(sc, &mut m)
    } else {
        Vec::new()
    };
    VariantReport {
        name: name.to_string(),
        baseline_upstream_rps: round(numbers.baseline, 1),
        peak_upstream_rps: round(numbers.peak, 1),
        amplification_peak: round(numbers.amplification(), 2),
        attempts_per_request_mean: round(attempts_mean, 3),
        attempts_per_request_max: m.attempts_max,
        success_ratio: round(ratio(successes, requests), 4),
        recovery_seconds_after_fault: numbers.recovery.map(|r| round(r, 1)),
        cost_usd: round(m.billed_usd, 4),
        undelivered_usd: round((m.billed_usd - m.delivered_usd).max(0.0), 4),
        endpoints,
        detail: Detail {
            resolution: sc.resolution,
            upstream: m.upstream,
            completed: m.completed,
            succeeded: m.succeeded,
            requests,
            unfinished,
            attempts_histogram: m.hist,
            provider_peak_queue: m.provider_peak_queue,
            pool_peak_queue: m.pool_peak_queue,
            levee_reasons: reasons,
            events: m.events,
            latency_p50,
            latency_p99,
        },
    }
}

/// Per stream, its numbers over the measurement window.
fn endpoint_reports(sc: &Scenario, m: &mut Metrics) -> Vec<EndpointReport> {
    for st in &mut m.streams {
        st.latencies.sort_unstable();
    }
    let minutes = m.window_len().as_secs_f64() / 60.0;
    sc.streams
        .iter()
        .zip(&m.streams)
        .map(|(s, st)| EndpointReport {
            name: s.name.clone(),
            requests: st.requests,
            success_ratio: round(ratio(st.successes, st.requests), 4),
            attempts_per_request_mean: round(ratio(st.upstream_total, st.requests), 3),
            upstream_per_minute: round(st.upstream_window as f64 / minutes, 1),
            rate_limited_per_minute: round(st.rate_limited_window as f64 / minutes, 1),
            levee_rate_limited_per_minute: round(st.levee_rate_limited_window as f64 / minutes, 1),
            latency_p99_seconds: round(percentile(&st.latencies, 0.99).as_secs_f64(), 3),
            workers_busy_mean: m.has_pool.then(|| {
                round(
                    st.held_ns_window as f64 / m.window_len().as_nanos() as f64,
                    2,
                )
            }),
        })
        .collect()
}

/// `a / b`, zero when `b` is.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The `q` quantile of sorted `latencies` (zero when empty).
fn percentile(latencies: &[u64], q: f64) -> Duration {
    let n = latencies.len();
    let i = ((n as f64 * q).ceil() as usize).clamp(1, n.max(1)) - 1;
    Duration::from_nanos(latencies.get(i).copied().unwrap_or(0))
}

/// The human table.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    write_heading(&mut out, r);
    write_variants(&mut out, r);
    write_latencies(&mut out, &r.variants);
    for v in &r.variants {
        write_breakdown(&mut out, v);
    }
    out
}

/// The scenario's name and its fault window, then a blank line.
fn write_heading(out: &mut String, r: &Report) {
    let _ = writeln!(out, "scenario: {}", r.scenario);
    match r.fault {
        Some((a, b)) => {
            let _ = writeln!(
                out,
                "fault window: {a:.0}s – {b:.0}s of {:.0}s",
                r.duration.as_secs_f64()
            );
        }
        None => {
            let _ = writeln!(
                out,
                "no fault window that ends ({:.0}s)",
                r.duration.as_secs_f64()
            );
        }
    }
    let _ = writeln!(out);
}

/// One row per variant, then a blank line.
fn write_variants(out: &mut String, r: &Report) {
    let head = [
        "variant",
        "baseline/s",
        "peak/s",
        "amplif.",
        "att/req",
        "att max",
        "success",
        "recovery",
        "cost",
        "undelivered",
    ];
    let rows: Vec<[String; 10]> = r
        .variants
        .iter()
        .map(|v| {
            [
                v.name.clone(),
                format!("{:.0}", v.baseline_upstream_rps),
                format!("{:.0}", v.peak_upstream_rps),
                format!("{:.2}x", v.amplification_peak),
                format!("{:.2}", v.attempts_per_request_mean),
                v.attempts_per_request_max.to_string(),
                format!("{:.1}%", v.success_ratio * 100.0),
                match v.recovery_seconds_after_fault {
                    Some(s) => format!("{s:.1}s"),
                    None if r.fault.is_some() => "not recovered".to_string(),
                    None => "-".to_string(),
                },
                format!("${:.2}", v.cost_usd),
                format!("${:.2}", v.undelivered_usd),
            ]
        })
        .collect();
    write_table(out, &head, &rows);
    let _ = writeln!(out);
}

/// Each variant's median and 99th-percentile answer time.
fn write_latencies(out: &mut String, variants: &[VariantReport]) {
    for v in variants {
        let _ = writeln!(
            out,
            "{}: answered in p50 {:.3}s, p99 {:.3}s",
            v.name,
            v.detail.latency_p50.as_secs_f64(),
            v.detail.latency_p99.as_secs_f64()
        );
    }
}

/// A variant's endpoints and Levee's failures by reason, under its name
/// (nothing when it has neither).
fn write_breakdown(out: &mut String, v: &VariantReport) {
    if v.endpoints.is_empty() && v.detail.levee_reasons.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{}:", v.name);
    if !v.endpoints.is_empty() {
        write_endpoints(out, &v.endpoints);
    }
    if !v.detail.levee_reasons.is_empty() {
        let reasons = listing(&v.detail.levee_reasons, " ", ", ");
        let _ = writeln!(out, "  levee failures by reason: {reasons}");
    }
}

/// One indented row per endpoint.
fn write_endpoints(out: &mut String, endpoints: &[EndpointReport]) {
    let head = [
        "  endpoint",
        "requests",
        "success",
        "att/req",
        "upstream/min",
        "429/min",
        "levee rate_limited/min",
        "p99",
        "workers",
    ];
    let rows: Vec<[String; 9]> = endpoints
        .iter()
        .map(|e| {
            [
                format!("  {}", e.name),
                e.requests.to_string(),
                format!("{:.1}%", e.success_ratio * 100.0),
                format!("{:.2}", e.attempts_per_request_mean),
                format!("{:.0}", e.upstream_per_minute),
                format!("{:.0}", e.rate_limited_per_minute),
                format!("{:.1}", e.levee_rate_limited_per_minute),
                format!("{:.3}s", e.latency_p99_seconds),
                e.workers_busy_mean
                    .map(|w| format!("{w:.1}"))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    write_table(out, &head, &rows);
}

fn write_table<const N: usize>(out: &mut String, head: &[&str; N], rows: &[[String; N]]) {
    let mut w = [0usize; N];
    for (i, h) in head.iter().enumerate() {
        w[i] = h.chars().count();
    }
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pad = w[i] - c.chars().count();
                if i == 0 {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let _ = writeln!(out, "{}", line(head.to_vec()));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}
