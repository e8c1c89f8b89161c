//! The census as admin `GET /census` serves it: each caller seen with its
//! deadlines and what they allow on each route, and each target's observed
//! slow end beside the number the census assumes.

use super::{lock, ms, Census};
use levee_config::Config;
use serde::{Deserialize, Serialize};
use std::time::Duration;

impl Census {
    /// The census as served on admin `GET /census`.
    pub fn report(&self, config: &Config) -> CensusReport {
        let mut callers = Vec::new();
        {
            let c = lock(&self.callers);
            for s in c.slots.iter().filter(|s| s.requests > 0) {
                let p5 = s.deadlines.quantile(0.05);
                let p50 = s.deadlines.quantile(0.5);
                let routes = config
                    .routes
                    .iter()
                    .map(|r| {
                        let typical = Duration::from_millis(p50.unwrap_or(0));
                        let row = r.policy.census(typical.min(r.deadline.max()));
                        CallerRoute {
                            route: r.name.clone(),
                            retry_can_start: row.retry_can_start,
                            fallback_can_start: row.fallback_reachable,
                        }
                    })
                    .collect();
                callers.push(CallerRow {
                    name: s.name.to_string(),
                    requests: s.requests,
                    deadline_ms: DeadlineMs { p5, p50 },
                    routes,
                });
            }
        }
        let mut targets = Vec::new();
        for (ri, r) in config.routes.iter().enumerate() {
            for (t, target) in r.targets.iter().enumerate() {
                let observed = self
                    .targets
                    .get(ri)
                    .and_then(|x| x.get(t))
                    .and_then(|s| lock(s).latency.quantile(0.99));
                targets.push(TargetRow {
                    route: r.name.clone(),
                    provider: config.providers[target.provider].name.clone(),
                    expected_attempt_ms: ms(target.expected_attempt),
                    observed_p99_ms: observed,
                });
            }
        }
        CensusReport { callers, targets }
    }
}

/// A target as `levee check` names it: `provider` or `provider (model)`.
pub fn target_name(config: &Config, route: &levee_config::Route, t: usize) -> String {
    let target = &route.targets[t];
    let provider = &config.providers[target.provider].name;
    match &target.model {
        Some(m) => format!("{provider} ({m})"),
        None => provider.clone(),
    }
}

/// Admin `GET /census`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CensusReport {
    pub callers: Vec<CallerRow>,
    pub targets: Vec<TargetRow>,
}

/// One caller seen in traffic.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CallerRow {
    pub name: String,
    pub requests: u64,
    pub deadline_ms: DeadlineMs,
    pub routes: Vec<CallerRoute>,
}

/// A caller's observed deadlines (as resolved by Levee: the route's default
/// when the caller sent none, clamped to the route's max).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeadlineMs {
    pub p5: Option<u64>,
    pub p50: Option<u64>,
}

/// What the caller's p50 deadline allows on one route (`levee check`'s rule).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CallerRoute {
    pub route: String,
    pub retry_can_start: bool,
    /// `null` when the route has no fallback target.
    pub fallback_can_start: Option<bool>,
}

/// One target's observed slow end beside the number the census assumes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TargetRow {
    pub route: String,
    pub provider: String,
    pub expected_attempt_ms: u64,
    /// `null` until the target has had an attempt.
    pub observed_p99_ms: Option<u64>,
}
