//! A provider's allowance shared across replicas through Redis, with a
//! local share of it while Redis is unavailable.

use std::sync::Mutex;
use std::time::Duration;

/// A provider's allowance shared by replicas (Redis): every configured
/// meter (requests and tokens), with a local allowance at 1/N of each used
/// while Redis is unavailable.
#[derive(Debug)]
pub struct SharedRate {
    meters: Vec<(levee_policy::allowance::Meter, crate::state::SharedMeter)>,
    limits: levee_policy::allowance::Limits,
    /// The local allowance and the N it is 1/N for (made again when the
    /// replica count changes).
    local: Mutex<(u32, levee_policy::allowance::Allowance)>,
}

impl SharedRate {
    /// The shared meters of `limits`, or `None` when it meters nothing.
    pub(super) fn new(
        limits: levee_policy::allowance::Limits,
        replicas: u32,
    ) -> Option<SharedRate> {
        use levee_policy::allowance::Meter;
        let n = u64::from(replicas.max(1));
        let mut meters = Vec::new();
        if let Some(rpm) = limits.requests_per_minute {
            let m = crate::state::SharedMeter {
                suffix: "",
                per_minute: u64::from(rpm),
                capacity: u64::from(limits.request_burst.max(1)),
            };
            meters.push((Meter::Requests, m));
        }
        for (meter, suffix, per_minute) in [
            (Meter::Tokens, ":tokens", limits.tokens_per_minute),
            (
                Meter::InputTokens,
                ":input_tokens",
                limits.input_tokens_per_minute,
            ),
            (
                Meter::OutputTokens,
                ":output_tokens",
                limits.output_tokens_per_minute,
            ),
        ] {
            if let Some(t) = per_minute {
                let m = crate::state::SharedMeter {
                    suffix,
                    per_minute: t,
                    capacity: t,
                };
                meters.push((meter, m));
            }
        }
        if meters.is_empty() {
            return None;
        }
        Some(SharedRate {
            meters,
            limits,
            local: Mutex::new((replicas.max(1), local_share(limits, n))),
        })
    }

    /// `cost` of every meter of the allowance, or how long until it conforms.
    pub async fn check(
        &self,
        redis: &crate::state::RedisState,
        provider: &str,
        now: levee_policy::Instant,
        cost: levee_policy::allowance::Cost,
    ) -> Result<(), Duration> {
        let spend: Vec<_> = self
            .meters
            .iter()
            .map(|(meter, m)| (*m, units(*meter, cost)))
            .collect();
        if let Some(r) = redis.allowance_of(provider, &spend).await {
            return r;
        }
        let ask = levee_policy::allowance::Ask {
            cost,
            priority: levee_policy::allowance::Priority::High,
            ..Default::default()
        };
        let n = redis.replicas_now();
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        if local.0 != n {
            *local = (n, local_share(self.limits, u64::from(n)));
        }
        local
            .1
            .take(now, &ask)
            .map(|_| ())
            .map_err(|until| until.saturating_since(now))
    }

    /// What the answer used against its estimate, on the meters settled
    /// from usage (input and output; a total keeps its estimate, as
    /// OpenAI's does).
    pub fn settlements(
        &self,
        estimate: levee_policy::allowance::Cost,
        used: levee_policy::allowance::Cost,
    ) -> Vec<(crate::state::SharedMeter, i64)> {
        use levee_policy::allowance::Meter;
        self.meters
            .iter()
            .filter(|(meter, _)| matches!(meter, Meter::InputTokens | Meter::OutputTokens))
            .map(|(meter, m)| {
                let back = units(*meter, estimate) as i64 - units(*meter, used) as i64;
                (*m, back)
            })
            .filter(|(_, back)| *back != 0)
            .collect()
    }
}

/// 1/`n` of each meter of `limits` (at least one unit each).
fn local_share(
    limits: levee_policy::allowance::Limits,
    n: u64,
) -> levee_policy::allowance::Allowance {
    use levee_policy::allowance::{Allowance, Limits};
    let n = n.max(1);
    let share = |v: Option<u64>| v.map(|v| (v / n).max(1));
    Allowance::new(Limits {
        requests_per_minute: limits
            .requests_per_minute
            .map(|r| u32::try_from((u64::from(r) / n).max(1)).unwrap_or(u32::MAX)),
        request_burst: u32::try_from((u64::from(limits.request_burst) / n).max(1))
            .unwrap_or(u32::MAX),
        tokens_per_minute: share(limits.tokens_per_minute),
        input_tokens_per_minute: share(limits.input_tokens_per_minute),
        output_tokens_per_minute: share(limits.output_tokens_per_minute),
    })
}

/// The units of `meter` a request of `cost` spends.
fn units(meter: levee_policy::allowance::Meter, cost: levee_policy::allowance::Cost) -> u64 {
    use levee_policy::allowance::Meter;
    match meter {
        Meter::Requests => 1,
        Meter::Tokens => u64::from(cost.input) + u64::from(cost.output),
        Meter::InputTokens => u64::from(cost.input),
        Meter::OutputTokens => u64::from(cost.output),
    }
}
