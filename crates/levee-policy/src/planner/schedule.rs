//! A route's schedule and census: each attempt the policy can make with
//! the least deadline that lets it start, and what a given deadline allows.

use super::{AttemptKind, RoutePolicy};
use std::time::Duration;

/// A step of a route's retry schedule, for `levee check` and the census.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// 1-based attempt number within the request.
    pub attempt: u32,
    pub target: usize,
    pub kind: AttemptKind,
    /// The longest wait before it (the backoff cap).
    pub wait: Duration,
    /// When it starts at the latest, counting only waits (failures assumed instant).
    pub start_after: Duration,
    /// Remaining deadline needed at the moment the decision is made.
    pub needs_remaining: Duration,
    /// Least caller deadline (from arrival) for this step to start.
    pub needs_deadline: Duration,
}

/// What one caller's deadline allows on a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CensusRow {
    /// Attempts on the first target that can start.
    pub attempts_can_start: u32,
    pub retry_can_start: bool,
    /// `None` when the route has no fallback target.
    pub fallback_reachable: Option<bool>,
    /// The deadline is shorter than the first target's `expected_attempt`:
    /// slow answers become failures with no fallback.
    pub shorter_than_expected_attempt: bool,
}

impl RoutePolicy {
    /// The route's schedule: each attempt the policy can make, with the least
    /// deadline that lets it start (failures assumed to come back at once;
    /// waits at their cap, so "can start" means "can always start").
    pub fn schedule(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut start = Duration::ZERO;
        for a in 0..self.max_attempts {
            let (wait, needs) = if a == 0 {
                (Duration::ZERO, self.margin + Duration::from_millis(1))
            } else {
                let w = self.backoff.cap(a - 1);
                (
                    w,
                    w + self.expected[0] + self.reserve_after[0] + self.margin,
                )
            };
            start += wait;
            steps.push(Step {
                attempt: a + 1,
                target: 0,
                kind: if a == 0 {
                    AttemptKind::First
                } else {
                    AttemptKind::Retry
                },
                wait,
                start_after: start,
                needs_remaining: needs,
                needs_deadline: start - wait + needs,
            });
        }
        for t in 1..self.expected.len() {
            let needs = self.expected[t] + self.margin;
            steps.push(Step {
                attempt: self.max_attempts + u32::try_from(t).unwrap_or(u32::MAX),
                target: t,
                kind: AttemptKind::Fallback,
                wait: Duration::ZERO,
                start_after: Duration::ZERO,
                needs_remaining: needs,
                needs_deadline: needs,
            });
        }
        steps
    }

    /// What a caller with this deadline gets from the route.
    pub fn census(&self, deadline: Duration) -> CensusRow {
        let steps = self.schedule();
        let primary: Vec<&Step> = steps.iter().filter(|s| s.target == 0).collect();
        let attempts_can_start = u32::try_from(
            primary
                .iter()
                .take_while(|s| deadline >= s.needs_deadline)
                .count(),
        )
        .unwrap_or(u32::MAX);
        let fallback_reachable = steps
            .iter()
            .find(|s| s.kind == AttemptKind::Fallback)
            .map(|s| deadline >= s.needs_deadline);
        CensusRow {
            attempts_can_start,
            retry_can_start: attempts_can_start >= 2,
            fallback_reachable,
            shorter_than_expected_attempt: deadline < self.expected[0],
        }
    }
}
