//! Each caller's rules (`models`, `limits`, `budget`), from its `callers:`
//! entry or its `keys:` entries, one set per name: keys that share a name
//! (an old and a new key while it is rotated) share the caller's rules.

use crate::error::{ConfigError, Problem, Source};
use crate::locate::Seg::{Index, Key};
use crate::model::CallerRules;
use crate::raw::{RawCallerLimits, RawConfig, RawSpendBudget};

/// The rules one entry gives, before they are checked.
struct Given<'a> {
    section: &'static str,
    index: usize,
    name: String,
    models: Option<&'a Vec<String>>,
    limits: Option<&'a RawCallerLimits>,
    budget: Option<&'a RawSpendBudget>,
}

/// Every caller's rules, checked: a budget is a finite number of dollars,
/// 0 or more; a models list names at least one model; and two entries of
/// the same name do not give different rules.
pub(super) fn caller_rules(
    src: Source<'_>,
    raw: &RawConfig,
) -> Result<Vec<CallerRules>, ConfigError> {
    let callers = raw.callers.iter().enumerate().map(|(i, c)| Given {
        section: "callers",
        index: i,
        name: c.name.clone(),
        models: c.models.as_ref(),
        limits: c.limits.as_ref(),
        budget: c.budget.as_ref(),
    });
    let keys = raw.keys.iter().enumerate().map(|(i, k)| Given {
        section: "keys",
        index: i,
        name: k.name.clone().unwrap_or_else(|| format!("key{}", i + 1)),
        models: k.models.as_ref(),
        limits: k.limits.as_ref(),
        budget: k.budget.as_ref(),
    });
    let mut out: Vec<CallerRules> = Vec::new();
    for g in callers.chain(keys) {
        if g.models.is_none() && g.limits.is_none() && g.budget.is_none() {
            continue;
        }
        let at = |key: &'static str, p: Problem| {
            ConfigError::at(src, &[Key(g.section), Index(g.index), Key(key)], p)
        };
        if g.models
            .is_some_and(|m| m.is_empty() || m.iter().any(|n| n.is_empty()))
        {
            return Err(at("models", Problem::CallerModels));
        }
        if g.budget.is_some_and(|b| !b.usd.is_finite() || b.usd < 0.0) {
            return Err(at("budget", Problem::BudgetAmount));
        }
        let rules = CallerRules {
            name: g.name.clone(),
            models: g.models.cloned(),
            spend: levee_policy::spend::Rules {
                requests_per_minute: g.limits.and_then(|l| l.requests_per_minute).map(|n| n.0),
                tokens_per_minute: g.limits.and_then(|l| l.tokens_per_minute).map(|n| n.0),
                budget: g.budget.map(|b| (b.usd, b.per.0)),
            },
        };
        match out.iter().find(|r| r.name == rules.name) {
            Some(earlier) if *earlier != rules => {
                return Err(ConfigError::at(
                    src,
                    &[Key(g.section), Index(g.index)],
                    Problem::CallerRulesDiffer(g.name),
                ));
            }
            Some(_) => {}
            None => out.push(rules),
        }
    }
    Ok(out)
}
