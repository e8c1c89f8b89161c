//! `--kill-state`: the state store's primary killed mid-run. Under load
//! with idempotency keys, its report says what callers saw after the kill
//! (answered, and refused with which reason) and how many keys whose first
//! answer completed ran a second time when sent again after the run (the
//! target is 0: a Sentinel-promoted replica holds every claim and stored
//! answer a replica acknowledged).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::args::Plan;
use crate::load::Measured;

/// `--kill-state`: the state store's primary killed mid-run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StateKillReport {
    /// When `SHUTDOWN` was sent (seconds since the start); `None` when it failed.
    pub killed_at_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Requests that carried an `idempotency-key` (all of them in this mode).
    pub keyed_requests: u64,
    /// Keyed requests deduplicated on one replica only
    /// (`x-levee-idempotency: local`).
    pub ran_unshared: u64,
    /// Outcomes of the requests sent after the kill: `success`, or the
    /// gateway's reason (each a retryable refusal, or not).
    pub outcomes_after: BTreeMap<String, u64>,
    /// Keys whose answer (a success) was complete before the kill, sent
    /// again after the run.
    pub keys_checked: u64,
    /// Of those, answered again without being replayed: run twice.
    pub keys_run_twice: u64,
    /// Of those, not answered with success the second time.
    pub keys_unanswered: u64,
    /// The most provider requests in any one second before the kill, and
    /// from it on: set beside the provider's `rate_limit`, how far the
    /// shared allowance was overrun while each replica held only its share.
    pub upstream_peak_per_second_before: u64,
    pub upstream_peak_per_second_after: u64,
}

/// The most provider requests the mock counted in any one second whose
/// start lies in `[from, to)`.
fn peak_per_second(samples: &[crate::load::Sample], from: Duration, to: Duration) -> u64 {
    let mut peak = 0;
    for (i, s) in samples.iter().enumerate() {
        if s.at < from || s.at >= to {
            continue;
        }
        let end = s.at + Duration::from_secs(1);
        if let Some(e) = samples[i..].iter().take_while(|e| e.at <= end).last() {
            if e.at >= end - Duration::from_millis(150) {
                peak = peak.max(e.upstream.saturating_sub(s.upstream));
            }
        }
    }
    peak
}

/// The report of the kill, when the plan had one.
pub(crate) fn state_kill(plan: &Plan, m: &Measured) -> Option<StateKillReport> {
    let k = plan.kill.as_ref()?;
    let (at, error) = match &m.killed {
        Some(Ok(at)) => (Some(*at), None),
        Some(Err(e)) => (None, Some(e.clone())),
        None => (None, Some("not run".to_owned())),
    };
    let from = at.unwrap_or(k.at);
    let mut outcomes_after = BTreeMap::new();
    for r in m.records.iter().filter(|r| r.sent >= from) {
        *outcomes_after.entry(r.kind.clone()).or_insert(0u64) += 1;
    }
    let recheck = m.recheck.unwrap_or_default();
    Some(StateKillReport {
        killed_at_seconds: at.map(|d| levee_sim::incident::round(d.as_secs_f64(), 3)),
        error,
        keyed_requests: m.records.len() as u64,
        ran_unshared: m
            .records
            .iter()
            .filter(|r| r.idempotency.as_deref() == Some("local"))
            .count() as u64,
        outcomes_after,
        keys_checked: recheck.checked,
        keys_run_twice: recheck.ran_twice,
        keys_unanswered: recheck.unanswered,
        upstream_peak_per_second_before: peak_per_second(&m.samples, Duration::ZERO, from),
        upstream_peak_per_second_after: peak_per_second(&m.samples, from, Duration::MAX),
    })
}

impl StateKillReport {
    /// Its lines of the human summary.
    pub(crate) fn write_human(&self, s: &mut String) {
        let when = match (self.killed_at_seconds, &self.error) {
            (Some(at), _) => format!("primary killed at {at} s"),
            (None, e) => format!("primary NOT killed: {}", e.as_deref().unwrap_or("")),
        };
        let _ = writeln!(s, "  state store         {when}");
        let _ = writeln!(
            s,
            "  keyed requests      {}, {} ran unshared (x-levee-idempotency: local); after the kill: {}",
            self.keyed_requests,
            self.ran_unshared,
            levee_sim::incident::listing(&self.outcomes_after, " ", ", ")
        );
        let _ = writeln!(
            s,
            "  keys sent again     {} answered before the kill: {} ran twice, {} not answered",
            self.keys_checked, self.keys_run_twice, self.keys_unanswered
        );
        let _ = writeln!(
            s,
            "  provider req/s peak {} before the kill, {} from it on (compare with the provider's rate_limit)",
            self.upstream_peak_per_second_before, self.upstream_peak_per_second_after
        );
    }
}
