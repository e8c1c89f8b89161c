//! Levee's state in a simulated run: what the gateway keeps per process,
//! built from the variant's config by the same `levee-config` and
//! `levee-policy` code, and the policy's [`Dependencies`] over it. The hop
//! that drives it on virtual time is the engine's (`engine::levee`).
//!
//! - routing: `Config::route_for`, the gateway's own lookup;
//! - the deadline: `DeadlinePolicy::resolve` on the caller's `x-timeout-ms`;
//! - the route bulkhead: `ConcurrencyLimiter`, shed with 503 at once;
//! - per provider: a `ProviderState` built by `Provider::new_state` (breaker,
//!   throttle, allowance, in-flight cap); per route target: a `RetryBudget`;
//! - each attempt asks the provider's allowance as the gateway's does: the
//!   stream's caller (its index and priority in the config's `callers:`),
//!   its tokens (input and `max_tokens`), whether it is a retry, and whether
//!   it is traffic on a target after the route's primary; every answer's
//!   reported remaining counts lower Levee's view, and a 2xx's usage
//!   settles what its attempt reserved.

use crate::arrivals::Tokens;
use crate::scenario::{LeveeGateway, Scenario};
use levee_policy::allowance::{Ask, Cost, Meter, Reported};
use levee_policy::{
    AttemptKind, Class, ConcurrencyGuard, ConcurrencyLimiter, Decision, Dependencies, Deps,
    Instant, Permit, ProviderState, Refusal, RequestState, RetryBudget, RoutePolicy,
};
use rand::rngs::SmallRng;
use std::sync::Arc;
use std::time::Duration;

/// Levee's runtime state in one run: what the gateway keeps per process.
#[derive(Debug)]
pub(crate) struct LeveeRt<'a> {
    pub(crate) gw: &'a LeveeGateway,
    states: Vec<ProviderState>,
    /// Per route: the config provider index of each target.
    target_provider: Vec<Vec<usize>>,
    /// Per route, per target.
    budgets: Vec<Vec<RetryBudget>>,
    limiters: Vec<Arc<ConcurrencyLimiter>>,
    /// Per stream: its requests' place in the allowances.
    asks: Vec<Ask>,
    /// Added to virtual time for everything the policy sees.
    pub(crate) phase: u64,
    /// Failures by `x-levee-reason`.
    pub(crate) reasons: std::collections::BTreeMap<&'static str, u64>,
}

/// Most targets a simulated route may have (models are passed on the stack).
const MAX_TARGETS: usize = 8;

impl<'a> LeveeRt<'a> {
    pub(crate) fn new(gw: &'a LeveeGateway, sc: &Scenario, phase: u64) -> Self {
        let c = &gw.config;
        LeveeRt {
            asks: sc
                .streams
                .iter()
                .map(|s| {
                    // An unlisted caller's id: its first stream's place.
                    let id = sc
                        .streams
                        .iter()
                        .position(|o| o.caller == s.caller)
                        .and_then(|i| u16::try_from(i).ok());
                    ask_for(c, s.caller.as_deref(), id, s.tokens)
                })
                .collect(),
            gw,
            states: c.providers.iter().map(|p| p.new_state()).collect(),
            target_provider: c
                .routes
                .iter()
                .map(|r| r.targets.iter().map(|t| t.provider).collect())
                .collect(),
            budgets: c
                .routes
                .iter()
                .map(|r| r.targets.iter().map(|_| r.budget.clone()).collect())
                .collect(),
            limiters: c
                .routes
                .iter()
                .map(|r| ConcurrencyLimiter::new(r.max_in_flight))
                .collect(),
            phase,
            reasons: Default::default(),
        }
    }

    /// A place in route `route`'s bulkhead, if one is free.
    pub(crate) fn try_acquire(&self, route: usize) -> Option<ConcurrencyGuard> {
        self.limiters[route].try_acquire()
    }

    /// Asks route `route`'s policy what to do next for a request of
    /// `stream` asking for `caller_model`, as the gateway's driver does:
    /// each target's model rewritten, the stream's place in the allowances.
    pub(crate) fn decide(
        &mut self,
        route: usize,
        stream: usize,
        caller_model: &str,
        st: &mut RequestState,
        now: Instant,
        rng: &mut SmallRng,
    ) -> Decision {
        let gw: &LeveeGateway = self.gw;
        let cfg_route = &gw.config.routes[route];
        let mut models = [""; MAX_TARGETS];
        for (t, m) in models.iter_mut().enumerate().take(cfg_route.targets.len()) {
            *m = cfg_route.rewrite_model(t, caller_model);
        }
        let mut deps = SimDeps {
            deps: Deps {
                providers: &mut self.states,
                target_provider: &self.target_provider[route],
                target_model: &models[..cfg_route.targets.len().min(MAX_TARGETS)],
                budgets: &mut self.budgets[route],
            },
            ask: self.asks[stream],
            first_entry: cfg_route.first_entry,
        };
        cfg_route.policy.decide(st, &mut deps, now, rng)
    }

    /// Runs `f` on route `route`'s policy with the dependencies the
    /// gateway's finisher gives it: no model, no ask (the permit names both).
    pub(crate) fn with_finisher_deps<T>(
        &mut self,
        route: usize,
        st: &mut RequestState,
        now: Instant,
        f: impl FnOnce(&RoutePolicy, &mut RequestState, &mut SimDeps<'_>, Instant) -> T,
    ) -> T {
        let gw: &LeveeGateway = self.gw;
        let mut deps = SimDeps {
            deps: Deps {
                providers: &mut self.states,
                target_provider: &self.target_provider[route],
                target_model: &[],
                budgets: &mut self.budgets[route],
            },
            ask: Ask::default(),
            first_entry: gw.config.routes[route].first_entry,
        };
        f(&gw.config.routes[route].policy, st, &mut deps, now)
    }

    /// The provider of the target `st` is on answered: what the answer
    /// reports left of each meter lowers that provider's allowance, and a
    /// 2xx's usage settles what the attempt reserved.
    pub(crate) fn answered(
        &mut self,
        route: usize,
        st: &RequestState,
        reported: &[Option<(Meter, Reported)>],
        tokens: Tokens,
        success: bool,
        now: Instant,
    ) {
        let cfg_route = &self.gw.config.routes[route];
        let Some(target) = cfg_route.targets.get(st.target()) else {
            return;
        };
        let state = &mut self.states[target.provider];
        for &(meter, rep) in reported.iter().flatten() {
            state.reported(now, meter, rep);
        }
        if let (true, Some(permit)) = (success, st.permit()) {
            let used = Cost {
                input: tokens.input,
                output: tokens.output,
            };
            state.settle(now, permit.grant(), used);
        }
    }
}

/// A stream's place in the allowances, as the gateway asks it
/// (`Config::ask`): its caller and its estimated tokens.
fn ask_for(
    config: &levee_config::Config,
    caller: Option<&str>,
    unlisted: Option<u16>,
    tokens: Tokens,
) -> Ask {
    let cost = Cost {
        input: tokens.input,
        output: tokens.max,
    };
    config.ask(caller, unlisted, cost)
}

/// [`Dependencies`] for one simulated request: the plain [`Deps`], asking
/// the allowance with the request's [`Ask`] per attempt as the gateway's
/// `GatewayDeps` does (a retry, or traffic on a target other than the
/// route's primary, leaves a floor for first attempts).
pub(crate) struct SimDeps<'a> {
    deps: Deps<'a>,
    ask: Ask,
    /// The route's first entry's targets (its primary's traffic).
    first_entry: usize,
}

impl SimDeps<'_> {
    fn ask(&self, t: usize, kind: AttemptKind) -> Ask {
        kind.ask(self.ask, t < self.first_entry)
    }

    fn state(&self, t: usize) -> (usize, &str) {
        let model = self.deps.target_model.get(t).copied().unwrap_or("");
        (self.deps.target_provider[t], model)
    }
}

impl Dependencies for SimDeps<'_> {
    fn check(&self, t: usize, now: Instant) -> Result<(), Refusal> {
        self.check_kind(t, now, AttemptKind::First)
    }
    fn check_kind(&self, t: usize, now: Instant, kind: AttemptKind) -> Result<(), Refusal> {
        let (p, model) = self.state(t);
        self.deps.providers[p].check_as(now, model, &self.ask(t, kind))
    }
    fn admit(&mut self, t: usize, now: Instant) -> Result<Permit, Refusal> {
        self.admit_kind(t, now, AttemptKind::First)
    }
    fn admit_kind(&mut self, t: usize, now: Instant, kind: AttemptKind) -> Result<Permit, Refusal> {
        let ask = self.ask(t, kind);
        let p = self.deps.target_provider[t];
        let model = self.deps.target_model.get(t).copied().unwrap_or("");
        self.deps.providers[p].admit_as(now, model, &ask)
    }
    fn finish(&mut self, t: usize, now: Instant, permit: Permit, class: Class) -> Option<bool> {
        self.deps.finish(t, now, permit, class)
    }
    fn withdraw(&mut self, t: usize, now: Instant) -> bool {
        self.deps.withdraw(t, now)
    }
    fn budget_refused(&mut self, t: usize) {
        self.deps.budget_refused(t)
    }
    fn deposit(&mut self, t: usize, now: Instant) {
        self.deps.deposit(t, now)
    }
    fn refund(&mut self, t: usize, now: Instant, tokens: u32) {
        self.deps.refund(t, now, tokens)
    }
    fn free_retry(&mut self, t: usize, now: Instant) -> bool {
        self.deps.free_retry(t, now)
    }
    fn expected(&self, t: usize, now: Instant) -> Option<Duration> {
        self.deps.expected(t, now)
    }
    fn winning(&self, t: usize, now: Instant) -> Option<bool> {
        self.deps.winning(t, now)
    }
    fn headroom(&self, t: usize, now: Instant) -> Option<bool> {
        self.deps.headroom(t, now)
    }
    fn stalled(&mut self, t: usize, now: Instant, permit: &mut Permit) {
        self.deps.stalled(t, now, permit)
    }
    fn in_flight(&self, t: usize) -> Option<u32> {
        self.deps.in_flight(t)
    }
    fn unreachable_lately(&self, t: usize, now: Instant) -> bool {
        self.deps.unreachable_lately(t, now)
    }
}
