//! The bridge between the policy core and the gateway's shared state: the
//! core's [`Dependencies`] over locked per-provider state and per-target
//! budgets, and a finisher that records an attempt's outcome exactly once —
//! or gives its permit back if the request is dropped first.

use crate::observe::event::TokensUsed;
use crate::runtime::shared::Shared;
use levee_policy::{
    Class, Dependencies, Instant, Outcome, Permit, Refusal, RequestState, RoutePolicy,
};
use std::sync::Arc;

/// What the core's dependencies saw of one request while it decided: the
/// skipped targets it chose (it would have sent the request there, so the
/// skip changed where the request went) and the targets whose retry budget
/// refused a retry. The request's driver owns it and, after each decision,
/// reports what it holds through the request's observer. One bit per
/// target; a route's 64th target and later share the last bit.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    chosen_skipped: std::cell::Cell<u64>,
    budget_refused: std::cell::Cell<u64>,
}

impl Seen {
    fn bit(t: usize) -> u64 {
        1 << t.min(63)
    }

    /// Takes the targets noted in `cell` since it was last taken (nothing
    /// to walk when none was: the usual decision).
    fn take(cell: &std::cell::Cell<u64>) -> impl Iterator<Item = usize> {
        let mut bits = cell.replace(0);
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let t = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some(t)
        })
    }

    /// The skipped targets the planner chose since the last call.
    pub(crate) fn take_chosen_skipped(&self) -> impl Iterator<Item = usize> {
        Seen::take(&self.chosen_skipped)
    }

    /// The targets whose retry budget refused a retry since the last call.
    pub(crate) fn take_budget_refused(&self) -> impl Iterator<Item = usize> {
        Seen::take(&self.budget_refused)
    }
}

/// [`Dependencies`] for one request on one route of a running gateway.
pub struct GatewayDeps<'a> {
    pub shared: &'a Shared,
    pub route: usize,
    /// The caller's model: each target's upstream model (its fault domain)
    /// is the route's rewrite of it.
    pub model: &'a str,
    /// What each target is sent; the targets this request skips (they
    /// cannot carry it across dialects) refuse as if full, so the planner
    /// moves on without spending their budget.
    pub(crate) plans: &'a [crate::request::plan::Plan],
    /// The request's place in the providers' allowances: its estimated
    /// tokens, its caller's priority and share.
    pub ask: levee_policy::allowance::Ask,
    /// What the request's driver reports after the decision.
    pub(crate) seen: &'a Seen,
}

impl GatewayDeps<'_> {
    fn provider(&self, t: usize) -> &crate::upstream::ProviderRuntime {
        let p = self.shared.config.routes[self.route].targets[t].provider;
        &self.shared.providers[p]
    }

    fn upstream_model(&self, t: usize) -> &str {
        self.shared.config.routes[self.route].rewrite_model(t, self.model)
    }

    /// The request's ask for an attempt of `kind` on target `t`: a retry,
    /// or traffic on a target other than the route's primary, leaves a
    /// floor of the allowance for first attempts.
    fn ask(&self, t: usize, kind: levee_policy::AttemptKind) -> levee_policy::allowance::Ask {
        let route = &self.shared.config.routes[self.route];
        kind.ask(self.ask, route.is_primary(t))
    }
}

impl Dependencies for GatewayDeps<'_> {
    fn check(&self, t: usize, now: levee_policy::Instant) -> Result<(), Refusal> {
        if self.plans.get(t).is_some_and(|p| p.skipped()) {
            // The planner asks before it falls back to a target, and about
            // the target it is on: asked about a skipped one, it was about
            // to send the request there.
            let chosen = &self.seen.chosen_skipped;
            chosen.set(chosen.get() | Seen::bit(t));
            return Err(Refusal::Shed);
        }
        self.check_kind(t, now, levee_policy::AttemptKind::First)
    }
    fn check_kind(
        &self,
        t: usize,
        now: levee_policy::Instant,
        kind: levee_policy::AttemptKind,
    ) -> Result<(), Refusal> {
        if self.plans.get(t).is_some_and(|p| p.skipped()) {
            return self.check(t, now);
        }
        let ask = self.ask(t, kind);
        self.provider(t)
            .lock()
            .check_as(now, self.upstream_model(t), &ask)
    }
    fn admit(&mut self, t: usize, now: levee_policy::Instant) -> Result<Permit, Refusal> {
        self.admit_kind(t, now, levee_policy::AttemptKind::First)
    }
    fn admit_kind(
        &mut self,
        t: usize,
        now: levee_policy::Instant,
        kind: levee_policy::AttemptKind,
    ) -> Result<Permit, Refusal> {
        self.admit_expecting(t, now, kind).map(|(permit, _)| permit)
    }
    fn admit_expecting(
        &mut self,
        t: usize,
        now: levee_policy::Instant,
        kind: levee_policy::AttemptKind,
    ) -> Result<(Permit, Option<std::time::Duration>), Refusal> {
        if self.plans.get(t).is_some_and(|p| p.skipped()) {
            // Chosen and passed over: the request goes elsewhere because of it.
            let chosen = &self.seen.chosen_skipped;
            chosen.set(chosen.get() | Seen::bit(t));
            return Err(Refusal::Shed);
        }
        let model = self.upstream_model(t);
        let ask = self.ask(t, kind);
        // One lock for both: a lock and its release are two atomic
        // read-modify-writes.
        let mut provider = self.provider(t).lock();
        let learned = provider.expected(now, model);
        Ok((provider.admit_as(now, model, &ask)?, learned))
    }
    fn finish(
        &mut self,
        t: usize,
        now: levee_policy::Instant,
        permit: Permit,
        class: Class,
    ) -> Option<bool> {
        self.provider(t).lock().finish(now, permit, class)
    }
    fn withdraw(&mut self, t: usize, now: levee_policy::Instant) -> bool {
        let shares_floor = {
            let mut budget = self.shared.routes[self.route].budget(t);
            if budget.try_withdraw(now) {
                return true;
            }
            budget.shares_floor()
        };
        shares_floor
            && self
                .provider(t)
                .lock()
                .withdraw_floor(now, self.upstream_model(t))
    }
    fn budget_refused(&mut self, t: usize) {
        let refused = &self.seen.budget_refused;
        refused.set(refused.get() | Seen::bit(t));
    }
    fn deposit(&mut self, t: usize, now: levee_policy::Instant) {
        self.shared.routes[self.route].budget(t).deposit(now)
    }
    fn refund(&mut self, t: usize, now: levee_policy::Instant, tokens: u32) {
        self.shared.routes[self.route].budget(t).refund(now, tokens)
    }
    fn free_retry(&mut self, t: usize, now: levee_policy::Instant) -> bool {
        self.shared.routes[self.route].budget(t).try_free(now)
    }
    fn headroom(&self, t: usize, now: levee_policy::Instant) -> Option<bool> {
        self.provider(t).lock().headroom(now)
    }
    fn winning(&self, t: usize, now: levee_policy::Instant) -> Option<bool> {
        self.provider(t).lock().winning(now, self.upstream_model(t))
    }
    fn expected(&self, t: usize, now: levee_policy::Instant) -> Option<std::time::Duration> {
        self.provider(t)
            .lock()
            .expected(now, self.upstream_model(t))
    }
    fn stalled(&mut self, t: usize, now: levee_policy::Instant, permit: &mut Permit) {
        self.provider(t).lock().stalled(now, permit)
    }
    fn available(&self, t: usize, now: levee_policy::Instant) -> bool {
        // A target that cannot carry the request is not one to start on;
        // asked here, it is not "chosen" (nothing is noted).
        if self.plans.get(t).is_some_and(|p| p.skipped()) {
            return false;
        }
        self.check_kind(t, now, levee_policy::AttemptKind::First)
            .is_ok()
    }
    fn in_flight(&self, t: usize) -> Option<u32> {
        Some(self.provider(t).lock().in_flight())
    }
    fn unreachable_lately(&self, t: usize, now: levee_policy::Instant) -> bool {
        let within = levee_policy::planner::balance::UNREACHABLE_DEMOTION;
        self.provider(t).lock().unreachable_within(now, within)
    }
}

/// Owns a request's policy state while an attempt may be in flight. Dropping
/// it (the caller left, the handler was cancelled) gives the attempt's permit
/// back, so no provider slot is ever leaked.
pub struct AttemptFinisher {
    pub shared: Arc<Shared>,
    pub route: usize,
    /// The request may be sent only once: the route's one-attempt policy
    /// records its outcomes.
    pub once: bool,
    pub req: RequestState,
}

impl AttemptFinisher {
    /// Calls `f` with the route's policy, the request's state, the
    /// dependencies and now.
    fn with_policy<T>(
        &mut self,
        now: Option<Instant>,
        f: impl FnOnce(&RoutePolicy, &mut RequestState, &mut GatewayDeps<'_>, Instant) -> T,
    ) -> T {
        // Borrowed apart from the request's state, not cloned: two atomic
        // read-modify-writes a call, two calls a request.
        let AttemptFinisher {
            shared,
            route,
            once,
            req,
        } = self;
        let shared: &Arc<Shared> = shared;
        let policy = shared.config.routes[*route].policy_for(*once);
        // Only finishing, depositing and refunding happen here: no model
        // needed, and nothing is checked or withdrawn, so nothing is seen.
        let seen = Seen::default();
        let mut deps = GatewayDeps {
            shared,
            route: *route,
            model: "",
            plans: &[],
            ask: levee_policy::allowance::Ask::default(),
            seen: &seen,
        };
        let now = now.unwrap_or_else(|| shared.clock.now());
        f(policy, req, &mut deps, now)
    }

    /// Records the in-flight attempt's outcome; returns its class.
    pub fn record(&mut self, outcome: Outcome) -> Class {
        self.with_policy(None, |p, req, deps, now| p.record(req, deps, now, outcome))
    }

    /// [`AttemptFinisher::record`] at `now`, read by the caller for
    /// [`AttemptFinisher::settle_at`] too: a plain answer's end read the
    /// clock twice within a microsecond.
    pub fn record_at(&mut self, now: Instant, outcome: Outcome) -> Class {
        self.with_policy(Some(now), |p, req, deps, now| {
            p.record(req, deps, now, outcome)
        })
    }

    /// The answer to the in-flight attempt used `used` tokens: its
    /// provider's allowance gets back what the estimate held beyond them.
    /// Returns what the request's observer counts (`None`: the attempt held
    /// no permit).
    pub fn settle(&mut self, used: levee_policy::allowance::Cost) -> Option<TokensUsed> {
        self.settle_at(None, used)
    }

    /// [`AttemptFinisher::settle`] at `now` (`None`: read the clock).
    pub fn settle_at(
        &mut self,
        now: Option<Instant>,
        used: levee_policy::allowance::Cost,
    ) -> Option<TokensUsed> {
        let permit = self.req.permit()?;
        let t = self.req.target();
        let route = &self.shared.config.routes[self.route];
        let provider = &self.shared.providers[route.targets[t].provider];
        let now = now.unwrap_or_else(|| self.shared.clock.now());
        // Shared by replicas: the input and output meters in Redis are
        // settled too (off the request's path: it does not wait for them).
        if let (Some(rate), Some(redis)) = (&provider.shared_rate, &self.shared.redis) {
            let back = rate.settlements(permit.grant().cost, used);
            if !back.is_empty() {
                let redis = std::sync::Arc::clone(redis);
                let name = provider.name.clone();
                tokio::spawn(async move {
                    for (meter, units) in back {
                        let _ = redis.settle_allowance(&name, meter, units).await;
                    }
                });
            }
        }
        let price = {
            let mut state = provider.lock();
            state.settle(now, permit.grant(), used);
            let p = route.targets[t].provider;
            self.shared
                .config
                .price_of(p, state.domain_model(permit.domain()))
        };
        Some(TokensUsed {
            target: t,
            domain: permit.domain(),
            used,
            partial: false,
            cached: levee_config::prices::Cached::default(),
            at: now,
            price,
        })
    }

    /// The in-flight attempt was cut short after it was sent (given up at
    /// its deadline, its caller gone, its answer broken off): what it used,
    /// as far as is known, settles its estimate and is returned as a
    /// partial count. The provider had read the prompt: the input is what
    /// the provider said (an Anthropic stream's first event says it), else
    /// the admission's estimate of it; the output is what `arrived`.
    pub fn settle_partial(
        &mut self,
        arrived: Option<levee_policy::allowance::Cost>,
    ) -> Option<TokensUsed> {
        let estimate = self.req.permit()?.grant().cost;
        let arrived = arrived.unwrap_or_default();
        let used = levee_policy::allowance::Cost {
            input: if arrived.input > 0 {
                arrived.input
            } else {
                estimate.input
            },
            output: arrived.output,
        };
        let mut t = self.settle(used)?;
        t.partial = true;
        Some(t)
    }

    /// The in-flight attempt is past its target's learned p99 with no head.
    pub fn stalled(&mut self) {
        self.with_policy(None, |p, req, deps, now| p.stalled(req, deps, now))
    }

    /// The dispatched attempt could not be sent (a shared allowance refused it).
    pub fn refuse(&mut self, refusal: Refusal) {
        self.with_policy(None, |p, req, deps, now| p.refuse(req, deps, now, refusal))
    }

    /// Records the outcome of a committed stream's attempt and consumes self.
    pub fn finish(mut self, outcome: Outcome, committed: bool) {
        if committed {
            self.req.commit();
        }
        self.record(outcome);
    }
}

impl Drop for AttemptFinisher {
    fn drop(&mut self) {
        if self.req.has_in_flight() {
            self.with_policy(None, |p, req, deps, now| p.abandon(req, deps, now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use levee_policy::AttemptKind;
    use std::time::Duration;

    #[test]
    fn one_look_at_the_provider_admits_an_attempt_and_tells_its_learned_time() {
        let config = levee_config::Config::parse(
            "providers:\n  p: { api: openai, base_url: \"http://127.0.0.1:1\" }\nroutes:\n  - targets: [p]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let shared = Shared::new(config, 1).unwrap_or_else(|e| panic!("{e}"));
        let seen = Seen::default();
        let mut deps = GatewayDeps {
            shared: &shared,
            route: 0,
            model: "m",
            plans: &[],
            ask: levee_policy::allowance::Ask::default(),
            seen: &seen,
        };
        // Thirty answers of 100 ms each: enough to learn from.
        let start = shared.clock.now();
        let mut at = start;
        for _ in 0..30 {
            let (permit, _) = deps
                .admit_expecting(0, at, AttemptKind::First)
                .unwrap_or_else(|r| panic!("{r:?}"));
            at = at + Duration::from_millis(100);
            deps.finish(0, at, permit, Class::Success);
        }
        let learned = deps.expected(0, at);
        assert!(learned.is_some(), "nothing learned from 30 answers");
        let (_, told) = deps
            .admit_expecting(0, at, AttemptKind::First)
            .unwrap_or_else(|r| panic!("{r:?}"));
        assert_eq!(told, learned);
    }
}
