//! From raw measurements to the report: the public JSON object (plus
//! additive fields) and the human summary.
//!
//! Baseline, peak and recovery are `levee_sim::incident`'s — one definition
//! for the simulator and the drill — over 100 ms steps of the mock's
//! `requests_total` (polled every 100 ms, linear between polls) and of the
//! callers' answers; with less than 0.8 s before the fault, the baseline is
//! the offered rate (one attempt per request). Besides them:
//! - *upstream rps at t* (the plot): provider requests in `[t − 1 s, t]`;
//! - *on time*: answered within its deadline (`--timeout-ms`) plus 50 ms;
//! - *unanswered*: no complete answer by deadline + 2 s (then abandoned).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::args::Plan;
use levee_sim::incident::{self, listing, round};

use crate::load::{Measured, Record, Sample, POLL_EVERY};

/// Answers this much past the deadline still count as on time.
pub const ON_TIME_MARGIN: Duration = Duration::from_millis(50);

/// Upstream attempts per logical request, from `x-levee-attempts`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Attempts {
    pub mean: f64,
    pub max: u32,
    /// Attempts → logical requests that made that many (answers without the
    /// header are not counted here).
    pub histogram: BTreeMap<u32, u64>,
}

/// Latency of answered requests, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// p50 and p99 of the latency of answered requests sent in a window, in ms.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Window {
    pub requests: u64,
    pub p50: f64,
    pub p99: f64,
}

/// `--pause-state`: the state store paused mid-run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatePauseReport {
    /// When `CLIENT PAUSE` was sent (seconds since the start); `None` when it failed.
    pub paused_at_seconds: Option<f64>,
    /// How long the pause was asked to last (seconds).
    pub pause_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Requests that carried an `idempotency-key` (all of them in this mode).
    pub keyed_requests: u64,
    /// Keyed requests that ran unshared: answered with
    /// `x-levee-idempotency: local` (deduplicated on one replica only).
    pub ran_unshared: u64,
    /// Outcomes of the requests sent while the store was paused.
    pub outcomes_during: BTreeMap<String, u64>,
    /// Latency of the requests sent before the pause, and during it.
    pub latency_ms_before: Window,
    pub latency_ms_during: Window,
}

/// `--stop-pid`: a replica stopped mid-run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReplicaStopReport {
    /// When the replica was stopped (seconds since the start); `None` when it failed.
    pub stopped_at_seconds: Option<f64>,
    pub signal: crate::args::StopSignal,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether callers had a second replica (`--failover`).
    pub callers_fail_over: bool,
    /// Requests sent after the stop that did not end in `success` (an
    /// error answer, no answer, or a broken body).
    pub failed_calls: u64,
    /// Requests whose first replica sent no response and that were sent
    /// once more to the other.
    pub failovers: u64,
    pub outcomes_after_stop: BTreeMap<String, u64>,
    pub latency_ms_before: Window,
    /// Requests sent from the stop to the end of the run.
    pub latency_ms_after: Window,
}

/// The drill's result. The first eight fields are the public contract, in its
/// order; the rest are additive.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub logical_requests: u64,
    /// Answered requests by kind: `success`, the gateway's `x-levee-reason`,
    /// `http_<status>` without a reason, `connection_error`, `body_error`.
    pub outcomes: BTreeMap<String, u64>,
    /// Provider requests the mock counted during the drill.
    pub upstream_requests: u64,
    pub attempts_per_request: Attempts,
    pub baseline_upstream_rps: f64,
    pub peak_upstream_rps: f64,
    pub recovery_seconds_after_fault: Option<f64>,
    pub unanswered: u64,
    /// `peak_upstream_rps / baseline_upstream_rps`.
    pub amplification_peak: f64,
    pub rate: f64,
    pub duration_seconds: f64,
    /// `[from, to]` in seconds since the start, when a fault was set.
    pub fault_window_seconds: Option<[f64; 2]>,
    pub deadline_ms: u64,
    /// Answered within the deadline plus 50 ms.
    pub answered_on_time: u64,
    /// Answered, but later than the deadline plus 50 ms.
    pub answered_late: u64,
    pub latency_ms: Latency,
    /// Worst delay between a request's scheduled and actual start (the load
    /// generator falling behind would show here).
    pub start_lag_ms_max: f64,
    /// Stats polls that failed (gaps in the upstream series).
    pub stats_poll_failures: u64,
    /// Distinct client-side errors (no HTTP answer), with counts; at most 5.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub client_errors: BTreeMap<String, u64>,
    /// Answers the provider generated (the mock's 2xx), billed whoever
    /// read them; absent when its stats could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub billed_answers: Option<u64>,
    /// What they cost at `--answer-usd` each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Of it, answers no caller received (billed beyond the successes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undelivered_usd: Option<f64>,
    /// Answers the provider generated that no caller received: attempts
    /// that outlived their callers (0: none did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answers_nobody_received: Option<u64>,
    /// Seconds from the fault's start to the first `circuit_open` answer:
    /// how fast the breaker opened (absent: it did not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker_opened_after_seconds: Option<f64>,
    /// The gateway's upstream attempts by result during the drill
    /// (`--gateway-admin`): `connect_error` and `timeout` count a
    /// black-holed provider's connect and attempt timeouts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_attempts_by_result: Option<BTreeMap<String, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_pause: Option<StatePauseReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_stop: Option<ReplicaStopReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_kill: Option<crate::kill::StateKillReport>,
    /// Upstream rps at each 100 ms step, for the plot (not in the JSON).
    #[serde(skip)]
    pub series: Vec<(f64, f64)>,
    /// Logical requests started per second at each 100 ms step (not in the JSON).
    #[serde(skip)]
    pub offered: Vec<(f64, f64)>,
    #[serde(skip)]
    pub fault_text: Vec<String>,
}

/// The mock's count at `t`, linear between polls, clamped at the ends.
fn upstream_at(samples: &[Sample], t: f64) -> f64 {
    let i = samples.partition_point(|s| s.at.as_secs_f64() <= t);
    match (
        i.checked_sub(1).and_then(|j| samples.get(j)),
        samples.get(i),
    ) {
        (Some(a), Some(b)) => {
            let (ta, tb) = (a.at.as_secs_f64(), b.at.as_secs_f64());
            let (ua, ub) = (a.upstream as f64, b.upstream as f64);
            if tb > ta {
                ua + (ub - ua) * (t - ta) / (tb - ta)
            } else {
                ub
            }
        }
        (Some(a), None) => a.upstream as f64,
        (None, Some(b)) => b.upstream as f64,
        (None, None) => 0.0,
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What the callers got: outcomes, attempts, timeliness, latency.
struct Answers {
    outcomes: BTreeMap<String, u64>,
    attempts: Attempts,
    unanswered: u64,
    on_time: u64,
    late: u64,
    /// Of answered requests, in ms, sorted.
    latencies: Vec<f64>,
    lag_max: Duration,
    client_errors: BTreeMap<String, u64>,
}

impl Answers {
    /// Tallies the records; an answer within `deadline` is on time.
    fn tally(records: &[Record], deadline: Duration) -> Answers {
        let mut a = Answers {
            outcomes: BTreeMap::new(),
            attempts: Attempts {
                mean: 0.0,
                max: 0,
                histogram: BTreeMap::new(),
            },
            unanswered: 0,
            on_time: 0,
            late: 0,
            latencies: Vec::with_capacity(records.len()),
            lag_max: Duration::ZERO,
            client_errors: BTreeMap::new(),
        };
        for r in records {
            a.lag_max = a.lag_max.max(r.lag);
            if let Some(e) = &r.error {
                if a.client_errors.len() < 5 || a.client_errors.contains_key(e) {
                    *a.client_errors.entry(e.clone()).or_insert(0) += 1;
                }
            }
            let Some(lat) = r.latency else {
                a.unanswered += 1;
                continue;
            };
            *a.outcomes.entry(r.kind.clone()).or_insert(0) += 1;
            if let Some(n) = r.attempts {
                *a.attempts.histogram.entry(n).or_insert(0) += 1;
            }
            if lat <= deadline {
                a.on_time += 1;
            } else {
                a.late += 1;
            }
            a.latencies.push(lat.as_secs_f64() * 1000.0);
        }
        a.latencies.sort_by(f64::total_cmp);
        let h = &a.attempts.histogram;
        a.attempts.mean = round(
            incident::mean_attempts(h.iter().map(|(n, c)| (u64::from(*n), *c))),
            4,
        );
        a.attempts.max = h.keys().next_back().copied().unwrap_or(0);
        a
    }
}

/// The run over time, in 100 ms steps: the plot's curves (1 s windows from
/// 1 s on) and the per-step counts the incident numbers are computed from.
struct Curves {
    series: Vec<(f64, f64)>,
    offered: Vec<(f64, f64)>,
    upstream: Vec<f64>,
    completed: Vec<f64>,
    succeeded: Vec<f64>,
}

impl Curves {
    fn of(m: &Measured, duration: f64) -> Curves {
        let samples = &m.samples;
        let step = POLL_EVERY.as_secs_f64();
        let last = samples.last().map_or(duration, |s| s.at.as_secs_f64());
        let steps = (last / step).floor() as usize;
        let rps = |t: f64| upstream_at(samples, t) - upstream_at(samples, t - 1.0);
        let mut starts: Vec<f64> = m.records.iter().map(|r| r.sent.as_secs_f64()).collect();
        starts.sort_by(f64::total_cmp);
        let started = |t: f64| starts.partition_point(|s| *s <= t) as f64;
        let (series, offered) = (10..=steps)
            .map(|k| {
                let t = k as f64 * step;
                ((t, rps(t)), (t, started(t) - started(t - 1.0)))
            })
            .unzip();
        let n = steps + 1;
        let upstream = (0..n)
            .map(|k| {
                let t = k as f64 * step;
                upstream_at(samples, t + step) - upstream_at(samples, t)
            })
            .collect();
        let (mut completed, mut succeeded) = (vec![0.0; n], vec![0.0; n]);
        for r in &m.records {
            let Some(lat) = r.latency else { continue };
            let k = ((r.sent + lat).as_secs_f64() / step) as usize;
            if k < n {
                completed[k] += 1.0;
                if r.kind == "success" {
                    succeeded[k] += 1.0;
                }
            }
        }
        Curves {
            series,
            offered,
            upstream,
            completed,
            succeeded,
        }
    }

    /// Baseline, peak and recovery, as `levee simulate` defines them.
    fn numbers(&self, end: f64, fault: Option<(f64, f64)>, offered_rate: f64) -> incident::Numbers {
        let steps = incident::Steps {
            step: POLL_EVERY.as_secs_f64(),
            upstream: &self.upstream,
            completed: &self.completed,
            succeeded: &self.succeeded,
            end,
        };
        incident::numbers(&steps, fault, offered_rate)
    }
}

/// Summarises a drill.
pub fn summarise(plan: &Plan, m: &Measured) -> Report {
    let d = plan.duration.as_secs_f64();
    let a = Answers::tally(&m.records, plan.timeout + ON_TIME_MARGIN);
    let curves = Curves::of(m, d);
    let window = plan
        .fault_window
        .map(|(a, b)| (a.as_secs_f64(), b.as_secs_f64()));
    let numbers = curves.numbers(d, window, plan.rate);
    let delivered = a.outcomes.get("success").copied().unwrap_or(0);
    Report {
        logical_requests: m.records.len() as u64,
        outcomes: a.outcomes,
        upstream_requests: m.samples.last().map_or(0, |s| s.upstream),
        attempts_per_request: a.attempts,
        baseline_upstream_rps: round(numbers.baseline, 1),
        peak_upstream_rps: round(numbers.peak, 1),
        recovery_seconds_after_fault: numbers.recovery,
        unanswered: a.unanswered,
        amplification_peak: round(numbers.amplification(), 3),
        rate: plan.rate,
        duration_seconds: round(d, 3),
        fault_window_seconds: window.map(|(a, b)| [round(a, 3), round(b, 3)]),
        deadline_ms: plan.timeout.as_millis() as u64,
        answered_on_time: a.on_time,
        answered_late: a.late,
        latency_ms: Latency {
            p50: round(percentile(&a.latencies, 0.5), 2),
            p99: round(percentile(&a.latencies, 0.99), 2),
            max: round(a.latencies.last().copied().unwrap_or(0.0), 2),
        },
        start_lag_ms_max: round(a.lag_max.as_secs_f64() * 1000.0, 2),
        stats_poll_failures: m.poll_failures,
        billed_answers: m.answered,
        answers_nobody_received: m.answered.map(|n| n.saturating_sub(delivered)),
        breaker_opened_after_seconds: breaker_opened(plan, m),
        upstream_attempts_by_result: m.attempts.clone(),
        cost_usd: m.answered.map(|n| round(n as f64 * plan.answer_usd, 4)),
        undelivered_usd: m
            .answered
            .map(|n| round(n.saturating_sub(delivered) as f64 * plan.answer_usd, 4)),
        client_errors: a.client_errors,
        state_pause: state_pause(plan, m),
        replica_stop: replica_stop(plan, m),
        state_kill: crate::kill::state_kill(plan, m),
        series: curves.series,
        offered: curves.offered,
        fault_text: plan.fault_text.clone(),
    }
}

/// Seconds from the fault window's start to the first answer refused by
/// an open breaker sent after it.
fn breaker_opened(plan: &Plan, m: &Measured) -> Option<f64> {
    let (from, _) = plan.fault_window?;
    m.records
        .iter()
        .filter(|r| r.sent >= from && r.kind == "circuit_open")
        .map(|r| r.sent.saturating_sub(from))
        .min()
        .map(secs)
}

fn secs(d: Duration) -> f64 {
    round(d.as_secs_f64(), 3)
}

/// Latency of the answered requests sent in `[from, to)`.
fn window(records: &[Record], from: Duration, to: Duration) -> Window {
    let mut ms: Vec<f64> = records
        .iter()
        .filter(|r| r.sent >= from && r.sent < to)
        .filter_map(|r| r.latency)
        .map(|l| l.as_secs_f64() * 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    Window {
        requests: ms.len() as u64,
        p50: round(percentile(&ms, 0.5), 2),
        p99: round(percentile(&ms, 0.99), 2),
    }
}

pub(crate) fn outcomes_in(
    records: &[Record],
    from: Duration,
    to: Duration,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in records.iter().filter(|r| r.sent >= from && r.sent < to) {
        *out.entry(r.kind.clone()).or_insert(0u64) += 1;
    }
    out
}

fn state_pause(plan: &Plan, m: &Measured) -> Option<StatePauseReport> {
    let p = plan.pause.as_ref()?;
    let (at, error) = match &m.paused {
        Some(Ok(at)) => (Some(*at), None),
        Some(Err(e)) => (None, Some(e.clone())),
        None => (None, Some("not run".to_owned())),
    };
    let from = at.unwrap_or(p.at);
    let to = from + p.length;
    Some(StatePauseReport {
        paused_at_seconds: at.map(secs),
        pause_seconds: secs(p.length),
        error,
        keyed_requests: m.records.len() as u64,
        ran_unshared: m
            .records
            .iter()
            .filter(|r| r.idempotency.as_deref() == Some("local"))
            .count() as u64,
        outcomes_during: outcomes_in(&m.records, from, to),
        latency_ms_before: window(&m.records, Duration::ZERO, from),
        latency_ms_during: window(&m.records, from, to),
    })
}

fn replica_stop(plan: &Plan, m: &Measured) -> Option<ReplicaStopReport> {
    let s = plan.stop.as_ref()?;
    let (at, error) = match &m.stopped {
        Some(Ok(at)) => (Some(*at), None),
        Some(Err(e)) => (None, Some(e.clone())),
        None => (None, Some("not run".to_owned())),
    };
    let from = at.unwrap_or(s.at);
    let end = Duration::MAX;
    let after = outcomes_in(&m.records, from, end);
    Some(ReplicaStopReport {
        stopped_at_seconds: at.map(secs),
        signal: s.signal,
        error,
        callers_fail_over: plan.failover.is_some(),
        failed_calls: after
            .iter()
            .filter(|(k, _)| *k != "success")
            .map(|(_, n)| n)
            .sum(),
        failovers: m.records.iter().filter(|r| r.failed_over).count() as u64,
        outcomes_after_stop: after,
        latency_ms_before: window(&m.records, Duration::ZERO, from),
        latency_ms_after: window(&m.records, from, end),
    })
}

impl Report {
    /// The human summary printed without `--json`.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let fault = match self.fault_window_seconds {
            Some([a, b]) => format!("fault {a} s – {b} s ({})", self.fault_text.join("; ")),
            None => "no fault".to_owned(),
        };
        let _ = writeln!(
            s,
            "levee drill: {} logical requests at {}/s over {} s, {fault}",
            self.logical_requests, self.rate, self.duration_seconds
        );
        let _ = writeln!(
            s,
            "  outcomes            {}",
            listing(&self.outcomes, " ", ", ")
        );
        let _ = writeln!(
            s,
            "  upstream requests   {} ({} attempts per logical request on average, at most {})",
            self.upstream_requests, self.attempts_per_request.mean, self.attempts_per_request.max
        );
        let hist = listing(&self.attempts_per_request.histogram, ": ", "  ");
        let _ = writeln!(s, "  attempts histogram  {hist}");
        let _ = writeln!(
            s,
            "  upstream rps        baseline {}, peak {} ({} × baseline)",
            self.baseline_upstream_rps, self.peak_upstream_rps, self.amplification_peak
        );
        let recovery = match (self.fault_window_seconds, self.recovery_seconds_after_fault) {
            (None, _) => "no fault window".to_owned(),
            (Some(_), Some(r)) => format!("{r} s after the fault ended"),
            (Some(_), None) => "not recovered before requests stopped".to_owned(),
        };
        let _ = writeln!(s, "  recovery            {recovery}");
        let _ = writeln!(
            s,
            "  answers             {} within deadline + 50 ms ({} ms), {} late, {} unanswered",
            self.answered_on_time, self.deadline_ms, self.answered_late, self.unanswered
        );
        let _ = writeln!(
            s,
            "  latency             p50 {} ms, p99 {} ms, max {} ms (start lag max {} ms)",
            self.latency_ms.p50, self.latency_ms.p99, self.latency_ms.max, self.start_lag_ms_max
        );
        if let Some(after) = self.breaker_opened_after_seconds {
            let _ = writeln!(s, "  breaker             opened {after} s into the fault");
        }
        if let Some(by) = &self.upstream_attempts_by_result {
            let _ = writeln!(s, "  upstream attempts   {}", listing(by, " ", ", "));
        }
        if let (Some(n), Some(cost), Some(lost)) =
            (self.billed_answers, self.cost_usd, self.undelivered_usd)
        {
            let _ = writeln!(
                s,
                "  cost                ${cost:.2} for {n} generated answers, ${lost:.2} of it undelivered ({} answers nobody received)",
                self.answers_nobody_received.unwrap_or(0)
            );
        }
        for (e, n) in &self.client_errors {
            let _ = writeln!(s, "  client error        {n} × {e}");
        }
        if let Some(p) = &self.state_pause {
            p.write_human(&mut s);
        }
        if let Some(r) = &self.replica_stop {
            r.write_human(&mut s);
        }
        if let Some(k) = &self.state_kill {
            k.write_human(&mut s);
        }
        s
    }

    /// Whether the drill met its own promises: nothing unanswered, nothing late.
    pub fn ok(&self) -> bool {
        self.unanswered == 0 && self.answered_late == 0
    }
}

impl StatePauseReport {
    /// Its lines of the human summary.
    fn write_human(&self, s: &mut String) {
        let when = match (self.paused_at_seconds, &self.error) {
            (Some(at), _) => format!("paused at {at} s for {} s", self.pause_seconds),
            (None, e) => format!("NOT paused: {}", e.as_deref().unwrap_or("")),
        };
        let _ = writeln!(s, "  state store         {when}");
        let _ = writeln!(
            s,
            "  keyed requests      {}, {} ran unshared (x-levee-idempotency: local); during the pause: {}",
            self.keyed_requests,
            self.ran_unshared,
            listing(&self.outcomes_during, " ", ", ")
        );
        let _ = writeln!(
            s,
            "  latency             before p50 {} / p99 {} ms; during p50 {} / p99 {} ms",
            self.latency_ms_before.p50,
            self.latency_ms_before.p99,
            self.latency_ms_during.p50,
            self.latency_ms_during.p99
        );
    }
}

impl ReplicaStopReport {
    /// Its lines of the human summary.
    fn write_human(&self, s: &mut String) {
        let when = match (self.stopped_at_seconds, &self.error) {
            (Some(at), _) => format!("stopped ({:?}) at {at} s", self.signal),
            (None, e) => format!("NOT stopped: {}", e.as_deref().unwrap_or("")),
        };
        let _ = writeln!(
            s,
            "  replica             {when}; callers fail over: {}",
            if self.callers_fail_over { "yes" } else { "no" }
        );
        let _ = writeln!(
            s,
            "  after the stop      {} failed calls, {} failovers; {}",
            self.failed_calls,
            self.failovers,
            listing(&self.outcomes_after_stop, " ", ", ")
        );
        let _ = writeln!(
            s,
            "  latency             before p50 {} / p99 {} ms; after p50 {} / p99 {} ms",
            self.latency_ms_before.p50,
            self.latency_ms_before.p99,
            self.latency_ms_after.p50,
            self.latency_ms_after.p99
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Arrivals, DrillArgs};

    fn plan() -> Plan {
        DrillArgs {
            gateway: "http://127.0.0.1:1".into(),
            mock: "http://127.0.0.1:2".into(),
            rate: 100.0,
            duration: "10s".into(),
            faults: vec!["status=503,from=4s,to=6s".into()],
            json: true,
            plot: None,
            timeout_ms: 1000,
            seed: 0,
            arrivals: Arrivals::Even,
            model: "m".into(),
            answer_usd: 0.006,
            gateway_admin: None,
            exercise: Default::default(),
        }
        .plan()
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// 100 rps of upstream, `extra` more per second in [4, 5), failures in
    /// [4, 6) and, when `slow`, too much upstream in [7, 8).
    fn measured(extra: u64, slow: bool) -> Measured {
        let mut samples = Vec::new();
        let mut total = 0u64;
        for k in 0..=120u64 {
            let t = k as f64 / 10.0;
            samples.push(Sample {
                at: Duration::from_millis(k * 100),
                upstream: total,
            });
            let mut per = if t < 10.0 { 10 } else { 0 };
            if (4.0..5.0).contains(&t) {
                per += extra / 10;
            }
            if slow && (7.0..8.0).contains(&t) {
                per += 5;
            }
            total += per;
        }
        let records = (0..1000u64)
            .map(|i| {
                let sent = Duration::from_millis(i * 10);
                let bad = (4000..6000).contains(&(i * 10));
                Record {
                    sent,
                    lag: Duration::from_micros(100),
                    latency: Some(Duration::from_millis(if i == 7 { 1100 } else { 3 })),
                    kind: if bad { "circuit_open" } else { "success" }.to_owned(),
                    attempts: Some(if bad {
                        0
                    } else if i % 10 == 0 {
                        2
                    } else {
                        1
                    }),
                    error: None,
                    idempotency: None,
                    failed_over: false,
                    key: None,
                }
            })
            .chain(std::iter::once(Record {
                sent: Duration::from_secs(9),
                lag: Duration::ZERO,
                latency: None,
                kind: "unanswered".into(),
                attempts: None,
                error: None,
                idempotency: None,
                failed_over: false,
                key: None,
            }))
            .collect();
        Measured {
            records,
            samples,
            // 800 successes; 50 more answers went to callers that had left.
            answered: Some(850),
            attempts: None,
            poll_failures: 0,
            clear_failed: None,
            paused: None,
            stopped: None,
            killed: None,
            recheck: None,
        }
    }

    #[test]
    fn numbers_follow_the_documented_definitions() {
        let r = summarise(&plan(), &measured(20, false));
        assert_eq!(r.logical_requests, 1001);
        assert_eq!(r.unanswered, 1);
        assert_eq!(r.outcomes["success"], 800);
        assert_eq!(r.outcomes["circuit_open"], 200);
        assert_eq!(r.answered_late, 1, "1100 ms > 1000 + 50 ms");
        assert_eq!(r.answered_on_time, 999);
        assert_eq!(r.attempts_per_request.max, 2);
        assert_eq!(r.attempts_per_request.histogram[&0], 200);
        // 850 generated answers at $0.006, 50 of them received by nobody.
        assert_eq!(r.billed_answers, Some(850));
        assert_eq!(r.cost_usd, Some(5.1));
        assert_eq!(r.undelivered_usd, Some(0.3));
        assert_eq!(r.upstream_requests, 1020);
        assert!((r.baseline_upstream_rps - 100.0).abs() < 0.01, "{r:?}");
        assert!((r.peak_upstream_rps - 120.0).abs() < 0.5, "{r:?}");
        assert_eq!(r.recovery_seconds_after_fault, Some(0.0));
        assert!(!r.ok());
        let json = serde_json::to_value(&r).unwrap_or_default();
        for key in [
            "logical_requests",
            "outcomes",
            "upstream_requests",
            "attempts_per_request",
            "baseline_upstream_rps",
            "peak_upstream_rps",
            "recovery_seconds_after_fault",
            "unanswered",
        ] {
            assert!(json.get(key).is_some(), "{key} missing: {json}");
        }
        assert_eq!(json["attempts_per_request"]["histogram"]["2"], 80);
        assert!(json.get("series").is_none());
    }

    #[test]
    fn recovery_waits_for_the_last_unhealthy_second() {
        let r = summarise(&plan(), &measured(0, true));
        // [7, 8) carries 150 rps against a 100 baseline: healthy from 8 s.
        assert_eq!(r.recovery_seconds_after_fault, Some(2.0));
        assert!(
            r.human().contains("2 s after the fault ended"),
            "{}",
            r.human()
        );
    }
}
