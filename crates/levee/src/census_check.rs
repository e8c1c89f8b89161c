//! The static caller census of `levee check`: for each listed caller and
//! route, whether the caller's deadline lets a retry start, and whether it
//! lets the fallback start. A caller whose retry cannot start fails
//! `--strict`, with the fix in words (its timeout, or the primary's
//! `expected_attempt_ms`), unless it is `fallback_only: true` and the
//! fallback can start.

use crate::table::{secs, table, yes_no};
use levee_config::{Caller, Config, Route};
use std::fmt::Write;
use std::time::Duration;

/// A caller on a route that `--strict` fails, and what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stranded {
    pub caller: String,
    pub route: String,
    /// What would let it through, in words.
    pub fix: String,
}

/// What lets `caller` (its deadline `own`) retry on `route`: the least
/// timeout for its first retry to start, or the largest
/// `expected_attempt_ms` of the primary that lets one start within the
/// deadline it has; `fallback_only` when it relies on a fallback.
fn fix(caller: &str, route: &Route, own: Duration) -> String {
    let steps = route.policy.schedule();
    let Some(retry) = steps.iter().find(|s| s.attempt == 2 && s.target == 0) else {
        return format!("`{caller}`: the route makes one attempt (`max_attempts: 1`)");
    };
    let up = |d: Duration| Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0));
    let mut fix = format!(
        "raise `{caller}`'s timeout to {}",
        secs(up(retry.needs_deadline))
    );
    if retry.needs_deadline > route.deadline.max() {
        let _ = write!(
            fix,
            " (and the route's `deadline.max`, {}, with it)",
            secs(route.deadline.max())
        );
    }
    // The retry needs its wait, the primary's expected attempt, the
    // fallback's reserve and the margin: what is left for the attempt.
    let expected = route.targets[0].expected_attempt;
    let others = retry.needs_deadline.saturating_sub(expected);
    let deadline = own.min(route.deadline.max());
    if let Some(room) = deadline.checked_sub(others).filter(|r| !r.is_zero()) {
        let ms = room.as_millis() / 100 * 100;
        let _ = write!(
            fix,
            ", or lower the primary's `expected_attempt_ms` to {ms}"
        );
    }
    if route.targets.len() > 1 {
        fix.push_str(
            ", or mark the caller `fallback_only: true` if it relies on the fallback alone",
        );
    }
    fix
}

/// Says on stderr what `--strict` fails, each with its fix; whether any.
pub(crate) fn report_stranded(stranded: &[Stranded]) -> bool {
    for s in stranded {
        eprintln!(
            "levee check --strict: caller `{}` cannot retry on route `{}`: {}",
            s.caller, s.route, s.fix
        );
    }
    !stranded.is_empty()
}

/// Whether `--strict` fails this caller on this route: its retry cannot
/// start, and it is not a `fallback_only` caller whose fallback can.
fn stranded(c: &Caller, row: &levee_policy::CensusRow) -> bool {
    let falls_back = c.fallback_only && row.fallback_reachable == Some(true);
    !(row.retry_can_start || falls_back)
}

/// The caller census table; returns every caller and route `--strict`
/// fails: a retry cannot start (a `fallback_only` caller: nor the
/// fallback).
pub(crate) fn render_census(
    out: &mut String,
    config: &Config,
    callers: &[Caller],
) -> Vec<Stranded> {
    let mut stranded_pairs = Vec::new();
    let _ = writeln!(out, "\ncaller census");
    if callers.is_empty() {
        let _ = writeln!(
            out,
            "  no callers listed: add `callers:` to the config or pass --callers FILE"
        );
        return stranded_pairs;
    }
    let mut rows = Vec::new();
    // A caller listed for its rules alone, with no deadline, is not judged.
    for (c, own) in callers.iter().filter_map(|c| c.deadline.map(|d| (c, d))) {
        for route in &config.routes {
            let deadline = own.min(route.deadline.max());
            let row = route.policy.census(deadline);
            if stranded(c, &row) {
                stranded_pairs.push(Stranded {
                    caller: c.name.clone(),
                    route: route.name.clone(),
                    fix: fix(&c.name, route, own),
                });
            }
            let mut warning = String::new();
            if deadline < own {
                let _ = write!(warning, "clamped to the route's max {}. ", secs(deadline));
            }
            if row.shorter_than_expected_attempt {
                let _ = write!(
                    warning,
                    "deadline < expected_attempt_ms ({}): slow answers become failures with no fallback",
                    secs(route.targets[0].expected_attempt)
                );
            }
            rows.push(vec![
                c.name.clone(),
                secs(own),
                route.name.clone(),
                row.attempts_can_start.to_string(),
                yes_no(Some(row.retry_can_start)).to_string(),
                yes_no(row.fallback_reachable).to_string(),
                warning.trim().to_string(),
            ]);
        }
    }
    table(
        out,
        &[
            "caller",
            "deadline",
            "route",
            "attempts can start",
            "retry can start?",
            "fallback reachable?",
            "warning",
        ],
        &rows,
    );
    stranded_pairs
}
