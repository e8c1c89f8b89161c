//! A request's side of callers' spend: admission by the caller's rules —
//! the models it may ask for (403 `model_not_allowed`), its budget (429
//! `spend_limit`, saying when it resets) and its limits per minute (429
//! `caller_limit`, with the wait in `retry-after`), each refusal with
//! `x-should-retry: false` as all of Levee's own answers — and the
//! charging of what an answer used to the books ([`crate::spend`]), here
//! and in the shared state store. A caller with no rules costs one lookup.

use crate::http::respond::{LeveeError, Why};
use crate::runtime::shared::Shared;
use crate::spend::{ledger, Charge};
use levee_config::CallerRules;
use levee_policy::spend::{judge, utc_text, Rules, Seen, Verdict};
use std::time::Duration;

/// The rules of the caller named `name`, if it has any.
pub(crate) fn rules_of<'a>(shared: &'a Shared, name: Option<&str>) -> Option<&'a CallerRules> {
    let name = name?;
    shared.config.caller_rules.iter().find(|r| r.name == name)
}

/// Admits or refuses a request of the caller with `rules` for `model`; an
/// admitted request is counted against the caller's requests per minute.
pub(crate) async fn admit(
    shared: &Shared,
    rules: &CallerRules,
    model: &str,
) -> Result<(), LeveeError> {
    if !rules.allows(model) {
        let list = rules.models.as_deref().unwrap_or_default().join(", ");
        let msg = format!(
            "levee: model_not_allowed: caller `{}` may not use model `{model}` (its `models` list: {list})",
            rules.name
        );
        return Err(LeveeError::of(Why::ModelNotAllowed, msg));
    }
    let spend = rules.spend;
    if spend == Rules::default() {
        return Ok(());
    }
    let name = rules.name.as_str();
    let now = shared.clock.calendar_ms();
    let period = spend.budget.map(|(_, p)| p);
    let shared_seen = match &shared.redis {
        Some(r) => r.spend_seen(name, period, now).await.map(|s| (s, r)),
        None => None,
    };
    let (seen, share) = match shared_seen {
        Some((seen, _)) => (seen, 1),
        None => (
            shared.spend.seen(name, period, now),
            shared.redis.as_ref().map_or(1, |r| r.replicas_now()),
        ),
    };
    match judge(&scaled(spend, share), &seen, now) {
        Verdict::Allowed => {
            shared.spend.count_request(name, now);
            if let (Some((_, redis)), Some(_)) = (shared_seen, spend.requests_per_minute) {
                let redis = std::sync::Arc::clone(redis);
                let name = name.to_string();
                tokio::spawn(async move { redis.count_caller_request(&name, now).await });
            }
            Ok(())
        }
        v => Err(refusal(name, v, now, share, &seen)),
    }
}

/// `rules` at 1/`share` of each budget and limit: what one of `share`
/// replicas may let through when they cannot see each other's books.
fn scaled(rules: Rules, share: u32) -> Rules {
    if share <= 1 {
        return rules;
    }
    let n = u64::from(share);
    Rules {
        requests_per_minute: rules.requests_per_minute.map(|r| (r / n).max(1)),
        tokens_per_minute: rules.tokens_per_minute.map(|t| (t / n).max(1)),
        budget: rules.budget.map(|(usd, p)| (usd / f64::from(share), p)),
    }
}

fn refusal(name: &str, v: Verdict, now: u64, share: u32, seen: &Seen) -> LeveeError {
    let local = if share > 1 {
        format!(" (the shared state store is unavailable: this replica allows 1/{share} of it)")
    } else {
        String::new()
    };
    match v {
        Verdict::OverBudget {
            spent_usd,
            budget_usd,
            period,
            resets_at,
        } => {
            let msg = format!(
                "levee: spend_limit: caller `{name}` has spent ${spent_usd:.4} of its ${budget_usd:.2} budget per {}{local}; it resets at {} (in {}). Do not retry before then.",
                period.label(),
                utc_text(resets_at),
                human(resets_at.saturating_sub(now)),
            );
            let mut e = LeveeError::of(Why::SpendLimit, msg);
            e.retry_after = Some(Duration::from_millis(resets_at.saturating_sub(now)));
            e
        }
        Verdict::OverLimit {
            tokens,
            limit,
            wait_ms,
        } => {
            let (what, used) = if tokens {
                ("tokens_per_minute", seen.tokens)
            } else {
                ("requests_per_minute", seen.requests)
            };
            let in_window = levee_policy::spend::sliding(used.0, used.1, now);
            let msg = format!(
                "levee: caller_limit: caller `{name}` is at its {what} limit of {limit}{local} ({in_window:.0} in the last minute); it frees up in {}",
                human(wait_ms)
            );
            let mut e = LeveeError::of(Why::CallerLimit, msg);
            e.retry_after = Some(Duration::from_millis(wait_ms));
            e
        }
        Verdict::Allowed => LeveeError::of(Why::CallerLimit, "levee: caller_limit"),
    }
}

/// `ms` for a person: `3h12m`, `45s`.
fn human(ms: u64) -> String {
    let s = ms.div_ceil(1000);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s / 60 % 60),
        _ => format!("{}d{:02}h", s / 86_400, s / 3600 % 24),
    }
}

/// A charge to a caller's books in Redis, not yet made.
#[derive(Clone, Debug)]
pub(crate) struct Unshared {
    pub name: String,
    pub usd: f64,
    pub tokens: u64,
    pub unix_ms: u64,
}

impl Unshared {
    /// Adds another charge to the same caller.
    pub(crate) fn add(&mut self, o: Unshared) {
        self.usd += o.usd;
        self.tokens += o.tokens;
    }

    /// Makes the charge in Redis.
    pub(crate) async fn share(self, shared: &Shared) {
        if let Some(redis) = &shared.redis {
            redis
                .charge_caller(&self.name, self.usd, self.tokens, self.unix_ms)
                .await;
        }
    }

    /// Makes the charge in Redis off the caller's path.
    pub(crate) fn share_later(self, shared: &Shared) {
        let (Some(redis), Ok(rt)) = (&shared.redis, tokio::runtime::Handle::try_current()) else {
            return;
        };
        let redis = std::sync::Arc::clone(redis);
        rt.spawn(async move {
            redis
                .charge_caller(&self.name, self.usd, self.tokens, self.unix_ms)
                .await
        });
    }
}

/// Charges `c`, settled at `at` (the hour it is booked in), to the ledger
/// (its series named by `names` when new) and to its caller's books here;
/// with Redis, to the shared ledger (off the request's path). Returns the charge to the caller's books in Redis,
/// which the request makes before its answer goes out when it can, so
/// that the caller's next call finds it on any replica.
pub(crate) fn charge(
    shared: &Shared,
    c: Charge<'_>,
    names: impl FnOnce() -> ledger::SeriesNames,
    at: levee_policy::Instant,
) -> Option<Unshared> {
    let now = shared.clock.calendar_at(at);
    let tokens = u64::from(c.used.input) + u64::from(c.used.output);
    let row = ledger::Row {
        usd: c.usd.unwrap_or(0.0),
        input_tokens: c.used.input.into(),
        output_tokens: c.used.output.into(),
        unpriced_tokens: if c.usd.is_none() { tokens } else { 0 },
        charges: 1,
        partial: u64::from(c.partial),
    };
    let hour = now / 3_600_000;
    let names = shared.spend.ledger().add(c.series, names, hour, &row);
    if let Some(name) = c.ruled {
        shared.spend.charge(name, row.usd, tokens, now);
    }
    let redis = shared.redis.as_ref()?;
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let redis = std::sync::Arc::clone(redis);
        rt.spawn(async move { redis.ledger_add(hour, &names, &row).await });
    }
    c.ruled.map(|name| Unshared {
        name: name.to_string(),
        usd: row.usd,
        tokens,
        unix_ms: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_shared_store_each_replica_takes_its_share() {
        let rules = Rules {
            requests_per_minute: Some(100),
            tokens_per_minute: Some(1000),
            budget: Some((10.0, levee_policy::spend::Period::Day)),
        };
        let s = scaled(rules, 4);
        assert_eq!(s.requests_per_minute, Some(25));
        assert_eq!(s.budget.map(|b| b.0), Some(2.5));
        assert_eq!(scaled(rules, 1), rules);
        assert_eq!(human(3_600_000 * 3 + 12 * 60_000), "3h12m");
        assert_eq!(human(45_000), "45s");
    }
}
