//! What the planner's tests and its benchmark share: a world of providers and
//! per-target retry budgets (target i on provider i), and outcome shorthands.
#![allow(dead_code)] // each user takes a part of the kit

use levee_policy::planner::{Deps, RoutePolicy};
use levee_policy::{Backoff, Classifier, Outcome, ProviderState, RetryBudget};
use std::time::Duration;

/// A route with the default classifier and backoff, honouring Retry-After.
pub fn route(expected: &[Duration], max_attempts: u32) -> RoutePolicy {
    RoutePolicy::new(
        expected,
        max_attempts,
        Classifier::default(),
        Backoff::default(),
        true,
    )
    .unwrap()
}

pub const OK: Outcome = Outcome::Status {
    status: 200,
    retry_after: None,
};
pub const UNAVAILABLE: Outcome = Outcome::Status {
    status: 503,
    retry_after: None,
};

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A provider's status answer, with its `retry-after` if any.
pub fn status(status: u16, retry_after: Option<Duration>) -> Outcome {
    Outcome::Status {
        status,
        retry_after,
    }
}

/// Providers (one per target) and their targets' budgets.
#[derive(Clone)]
pub struct World {
    pub providers: Vec<ProviderState>,
    pub map: Vec<usize>,
    pub budgets: Vec<RetryBudget>,
}

impl World {
    /// Target i runs on `providers[i]` and spends `budgets[i]`.
    pub fn of(providers: Vec<ProviderState>, budgets: Vec<RetryBudget>) -> World {
        assert_eq!(providers.len(), budgets.len(), "one budget per target");
        World {
            map: (0..providers.len()).collect(),
            providers,
            budgets,
        }
    }

    pub fn deps(&mut self) -> Deps<'_> {
        Deps {
            providers: &mut self.providers,
            target_provider: &self.map,
            target_model: &[],
            budgets: &mut self.budgets,
        }
    }
}
