//! What the planner asks of the world — provider admission and per-target
//! retry budgets — and [`Deps`], that interface over plain state.

use super::AttemptKind;
use crate::budget::RetryBudget;
use crate::classify::Class;
use crate::provider::{Permit, ProviderState, Refusal};
use crate::time::Instant;
use std::time::Duration;

/// What the planner needs from the world: provider admission and per-target
/// retry budgets. [`Deps`] implements it over plain structs (simulator, tests);
/// the gateway implements it over its shared, locked state.
pub trait Dependencies {
    /// Whether target `t`'s provider would admit an attempt now (takes nothing).
    fn check(&self, t: usize, now: Instant) -> Result<(), Refusal>;
    /// Admits an attempt to target `t`'s provider.
    fn admit(&mut self, t: usize, now: Instant) -> Result<Permit, Refusal>;
    /// [`Dependencies::check`] for an attempt of `kind`: its place in the
    /// provider's allowance (retries and fallback traffic leave a floor for
    /// first attempts).
    fn check_kind(&self, t: usize, now: Instant, kind: AttemptKind) -> Result<(), Refusal> {
        let _ = kind;
        self.check(t, now)
    }
    /// [`Dependencies::admit`] for an attempt of `kind`.
    fn admit_kind(&mut self, t: usize, now: Instant, kind: AttemptKind) -> Result<Permit, Refusal> {
        let _ = kind;
        self.admit(t, now)
    }
    /// Records an admitted attempt's result on target `t`'s provider;
    /// returns whether retries on its model were winning before it (see
    /// [`crate::learn::Retries`]; `None`: too few to tell).
    fn finish(&mut self, t: usize, now: Instant, permit: Permit, class: Class) -> Option<bool>;
    /// Withdraws one retry from target `t`'s budget: the route's own, or
    /// else the floor its provider and model share with other routes.
    fn withdraw(&mut self, t: usize, now: Instant) -> bool;
    /// The planner gave up a retry on target `t` for lack of budget (a
    /// failed [`Dependencies::withdraw`] that a retry waits on is not one
    /// until its patience runs out).
    fn budget_refused(&mut self, t: usize) {
        let _ = t;
    }
    /// Deposits a success into target `t`'s budget.
    fn deposit(&mut self, t: usize, now: Instant);
    /// Refunds `tokens` retries that worked into target `t`'s budget.
    fn refund(&mut self, t: usize, now: Instant, tokens: u32);
    /// Lets one retry on target `t` go unpaid because retries on it are
    /// winning, if its budget's ceiling on refunded retries has room (see
    /// [`crate::RetryBudget::try_free`]).
    fn free_retry(&mut self, t: usize, now: Instant) -> bool;
    /// Target `t`'s learned attempt time (a recent p99), if known.
    fn expected(&self, t: usize, now: Instant) -> Option<Duration> {
        let _ = (t, now);
        None
    }
    /// [`Dependencies::admit_kind`], and on admission target `t`'s
    /// [`Dependencies::expected`] time, read before the admission: one
    /// look at the provider where both are behind one lock.
    fn admit_expecting(
        &mut self,
        t: usize,
        now: Instant,
        kind: AttemptKind,
    ) -> Result<(Permit, Option<Duration>), Refusal> {
        let learned = self.expected(t, now);
        Ok((self.admit_kind(t, now, kind)?, learned))
    }
    /// Whether retries on target `t`'s model are winning now (see
    /// [`crate::learn::Retries::winning`]; `None`: too few to tell).
    fn winning(&self, t: usize, now: Instant) -> Option<bool> {
        let _ = (t, now);
        None
    }
    /// Whether target `t`'s provider said, in its answers of the last
    /// second, that its allowance has room (see
    /// [`ProviderState::headroom`]; `None`: it said nothing).
    fn headroom(&self, t: usize, now: Instant) -> Option<bool> {
        let _ = (t, now);
        None
    }
    /// The attempt on target `t` behind `permit` is past its learned p99
    /// with no first byte: count the stall against its model's breaker.
    fn stalled(&mut self, t: usize, now: Instant, permit: &mut Permit) {
        let _ = (t, now, permit);
    }
    /// Whether target `t` would take a first attempt now, asked when a
    /// balanced group orders its members for a request (nothing is noted
    /// of the asking).
    fn available(&self, t: usize, now: Instant) -> bool {
        self.check_kind(t, now, AttemptKind::First).is_ok()
    }
    /// Attempts in flight on target `t`'s provider, for a group that
    /// balances by the fewest (`None`: not known, read as 0).
    fn in_flight(&self, t: usize) -> Option<u32> {
        let _ = t;
        None
    }
    /// Whether an attempt found target `t`'s provider unreachable within
    /// the last [`super::balance::UNREACHABLE_DEMOTION`]: a group tries its
    /// other members first.
    fn unreachable_lately(&self, t: usize, now: Instant) -> bool {
        let _ = (t, now);
        false
    }
    /// The target in the request's slot `slot`: the planner walks a
    /// request's own order of its route's targets (see
    /// [`super::balance`]); the world's dependencies name targets, so
    /// this is the identity for them.
    fn target_at(&self, slot: usize) -> usize {
        slot
    }
}

/// [`Dependencies`] over plain mutable state: `providers[target_provider[t]]`
/// for model `target_model[t]` (`""` where the slice is short), and `budgets[t]`.
#[derive(Debug)]
pub struct Deps<'a> {
    pub providers: &'a mut [ProviderState],
    pub target_provider: &'a [usize],
    pub target_model: &'a [&'a str],
    pub budgets: &'a mut [RetryBudget],
}

impl Deps<'_> {
    fn model(&self, t: usize) -> &str {
        self.target_model.get(t).copied().unwrap_or("")
    }
}

impl Dependencies for Deps<'_> {
    fn check(&self, t: usize, now: Instant) -> Result<(), Refusal> {
        self.providers[self.target_provider[t]].check(now, self.model(t))
    }
    fn admit(&mut self, t: usize, now: Instant) -> Result<Permit, Refusal> {
        let model = self.target_model.get(t).copied().unwrap_or("");
        self.providers[self.target_provider[t]].admit(now, model)
    }
    fn finish(&mut self, t: usize, now: Instant, permit: Permit, class: Class) -> Option<bool> {
        self.providers[self.target_provider[t]].finish(now, permit, class)
    }
    fn withdraw(&mut self, t: usize, now: Instant) -> bool {
        let budget = &mut self.budgets[t];
        if budget.try_withdraw(now) {
            return true;
        }
        let model = self.target_model.get(t).copied().unwrap_or("");
        budget.shares_floor() && self.providers[self.target_provider[t]].withdraw_floor(now, model)
    }
    fn deposit(&mut self, t: usize, now: Instant) {
        self.budgets[t].deposit(now)
    }
    fn refund(&mut self, t: usize, now: Instant, tokens: u32) {
        self.budgets[t].refund(now, tokens)
    }
    fn free_retry(&mut self, t: usize, now: Instant) -> bool {
        self.budgets[t].try_free(now)
    }
    fn expected(&self, t: usize, now: Instant) -> Option<Duration> {
        self.providers[self.target_provider[t]].expected(now, self.model(t))
    }
    fn winning(&self, t: usize, now: Instant) -> Option<bool> {
        self.providers[self.target_provider[t]].winning(now, self.model(t))
    }
    fn headroom(&self, t: usize, now: Instant) -> Option<bool> {
        self.providers[self.target_provider[t]].headroom(now)
    }
    fn stalled(&mut self, t: usize, now: Instant, permit: &mut Permit) {
        self.providers[self.target_provider[t]].stalled(now, permit)
    }
    fn in_flight(&self, t: usize) -> Option<u32> {
        Some(self.providers[self.target_provider[t]].in_flight())
    }
    fn unreachable_lately(&self, t: usize, now: Instant) -> bool {
        self.providers[self.target_provider[t]]
            .unreachable_within(now, super::balance::UNREACHABLE_DEMOTION)
    }
}
