//! The Levee hop: a thin driver around `levee_policy::RoutePolicy`, the same
//! decision function the gateway calls. Nothing here decides whether, when or
//! where to retry; it only does what the gateway's driver does with a
//! [`Decision`] — on virtual time.
//!
//! - routing: `Config::route_for`, the gateway's own lookup;
//! - the deadline: `DeadlinePolicy::resolve` on the caller's `x-timeout-ms`;
//! - the route bulkhead: `ConcurrencyLimiter`, shed with 503 at once;
//! - per provider: a `ProviderState` built by `Provider::new_state` (breaker,
//!   throttle, allowance, in-flight cap); per route target: a `RetryBudget`;
//! - every error answered carries `x-should-retry: false`;
//! - each attempt asks the provider's allowance as the gateway's does: the
//!   stream's caller (its index and priority in the config's `callers:`),
//!   its tokens (input and `max_tokens`), whether it is a retry, and whether
//!   it is traffic on a target after the route's primary; every answer's
//!   reported remaining counts lower Levee's view, and a 2xx's usage
//!   settles what its attempt reserved.

use crate::arrivals::Tokens;
use crate::engine::{ns, Call, Engine, Ev, Hop, Kind, Parent};
use crate::layers::Reply;
use crate::scenario::{LeveeGateway, Scenario};
use crate::slab::Ref;
use levee_policy::allowance::{Ask, Cost, Meter, Priority, Reported};
use levee_policy::{
    AttemptKind, Class, ConcurrencyLimiter, Decision, Dependencies, Deps, Instant, Outcome, Permit,
    ProviderState, Refusal, RequestState, RetryBudget,
};
use std::sync::Arc;
use std::time::Duration;

/// Levee's runtime state in one run: what the gateway keeps per process.
#[derive(Debug)]
pub(crate) struct LeveeRt<'a> {
    gw: &'a LeveeGateway,
    states: Vec<ProviderState>,
    /// Per route: the config provider index of each target.
    target_provider: Vec<Vec<usize>>,
    /// Per route, per target.
    budgets: Vec<Vec<RetryBudget>>,
    limiters: Vec<Arc<ConcurrencyLimiter>>,
    /// Per stream: its requests' place in the allowances.
    asks: Vec<Ask>,
    /// Added to virtual time for everything the policy sees.
    phase: u64,
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
                .map(|s| ask_for(c, s.caller.as_deref(), s.tokens))
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
}

/// A stream's place in the allowances, as the gateway's `ask_for` builds it
/// from a request's caller: its index in `callers[]` and its priority, and
/// its estimated tokens.
fn ask_for(config: &levee_config::Config, caller: Option<&str>, tokens: Tokens) -> Ask {
    let found = caller.and_then(|name| config.callers.iter().position(|c| c.name == name));
    Ask {
        cost: Cost {
            input: tokens.input,
            output: tokens.max,
        },
        priority: found.map_or(Priority::Normal, |i| config.callers[i].priority),
        retry: false,
        fallback: false,
        caller: found.and_then(|i| u16::try_from(i).ok()),
    }
}

/// [`Dependencies`] for one simulated request: the plain [`Deps`], asking
/// the allowance with the request's [`Ask`] per attempt as the gateway's
/// `GatewayDeps` does (a retry, or traffic on a target other than the
/// route's primary, leaves a floor for first attempts).
struct SimDeps<'a> {
    deps: Deps<'a>,
    ask: Ask,
}

impl SimDeps<'_> {
    fn ask(&self, t: usize, kind: AttemptKind) -> Ask {
        Ask {
            retry: kind == AttemptKind::Retry,
            fallback: t > 0,
            ..self.ask
        }
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
    fn deposit(&mut self, t: usize, now: Instant) {
        self.deps.deposit(t, now)
    }
    fn refund(&mut self, t: usize, now: Instant, tokens: u32) {
        self.deps.refund(t, now, tokens)
    }
    fn expected(&self, t: usize, now: Instant) -> Option<Duration> {
        self.deps.expected(t, now)
    }
    fn stalled(&mut self, t: usize, now: Instant, permit: &mut Permit) {
        self.deps.stalled(t, now, permit)
    }
}

fn no_retry(status: u16, retry_after: Option<Duration>) -> Reply {
    Reply::Status {
        status,
        retry_after,
        no_retry: true,
    }
}

impl Engine<'_> {
    pub(crate) fn levee_begin(&mut self, r: Ref) {
        let Some(lv) = self.levee.as_ref() else {
            return;
        };
        let Some(c) = self.calls.get(r) else { return };
        let s = &self.sc.streams[self.stream_of(c.req) as usize];
        let config = &lv.gw.config;
        let Some(route) = config.route_for(&s.path, &s.model) else {
            self.count_reason("no_route");
            return self.finish(r, no_retry(404, None));
        };
        let Some(guard) = lv.limiters[route].try_acquire() else {
            let shed = levee_policy::Failure::shed();
            self.count_reason(shed.reason.as_str());
            return self.finish(r, no_retry(shed.status, shed.retry_after));
        };
        let now = self.policy_now();
        // What the caller's x-timeout-ms would say, whole milliseconds as on the wire.
        let remaining = c
            .deadline
            .map(|d| Duration::from_millis(d.saturating_sub(self.now) / 1_000_000));
        let deadline = config.routes[route]
            .deadline
            .resolve_remaining(remaining, now);
        let caller_retry = self.is_caller_retry(r);
        if let Some(Call {
            kind:
                Kind::Levee {
                    route: rt,
                    st,
                    guard: g,
                },
            ..
        }) = self.calls.get_mut(r)
        {
            *rt = route as u16;
            **st = RequestState::new(deadline).caller_retry(caller_retry);
            *g = Some(guard);
        }
        self.levee_drive(r);
    }

    /// Asks the policy what to do next and does it.
    pub(crate) fn levee_drive(&mut self, r: Ref) {
        let now = self.policy_now();
        let sc: &Scenario = self.sc;
        let Some(req) = self.calls.get(r).map(|c| c.req) else {
            return;
        };
        let stream = self.stream_of(req) as usize;
        let caller_model: &str = &sc.streams[stream].model;
        let Engine {
            calls, levee, rng, ..
        } = self;
        let (Some(lv), Some(c)) = (levee.as_mut(), calls.get_mut(r)) else {
            return;
        };
        let Kind::Levee { route, st, .. } = &mut c.kind else {
            return;
        };
        let route = *route as usize;
        let phase = lv.phase;
        let gw: &LeveeGateway = lv.gw;
        let cfg_route = &gw.config.routes[route];
        let mut models = [""; MAX_TARGETS];
        for (t, m) in models.iter_mut().enumerate().take(cfg_route.targets.len()) {
            *m = cfg_route.rewrite_model(t, caller_model);
        }
        let mut deps = SimDeps {
            deps: Deps {
                providers: &mut lv.states,
                target_provider: &lv.target_provider[route],
                target_model: &models[..cfg_route.targets.len().min(MAX_TARGETS)],
                budgets: &mut lv.budgets[route],
            },
            ask: lv.asks[stream],
        };
        let decision = gw.config.routes[route]
            .policy
            .decide(st, &mut deps, now, rng);
        let req = c.req;
        match decision {
            Decision::Dispatch(d) => {
                c.attempt = d.attempt;
                let cfg_route = &gw.config.routes[route];
                let sim = gw.sim_provider[cfg_route.targets[d.target].provider] as u16;
                let sc = self.sc;
                let s = &sc.streams[self.stream_of(req) as usize];
                let model = cfg_route.rewrite_model(d.target, &s.model);
                let job = self.alloc(Hop::Provider(sim), Parent::Call(r), req, None);
                if let Some(c) = self.calls.get_mut(r) {
                    c.child = Some(job);
                }
                self.schedule(self.now + ns(d.timeout), Ev::Timeout(r, d.attempt));
                if let Some(after) = d.stall_after {
                    self.schedule(self.now + ns(after), Ev::Stalled(r, d.attempt));
                }
                self.job_begin(job, sim, model);
            }
            Decision::Wait { until } => {
                // Back from the policy's phase-shifted clock to engine time.
                let at = until.as_nanos().saturating_sub(phase);
                self.schedule(at, Ev::Step(r))
            }
            Decision::Fail(f) => {
                self.count_reason(f.reason.as_str());
                let stream = self.stream_of(req);
                self.m.levee_failed(stream, self.now, f.reason.as_str());
                self.finish(r, no_retry(f.status, f.retry_after));
            }
        }
    }

    /// Attempt `attempt` of `r` is past its target's learned p99 and still
    /// out: the gateway's driver reports the same.
    pub(crate) fn levee_stalled(&mut self, r: Ref, attempt: u32) {
        self.on_levee_call(r, Some(attempt), |policy, st, deps, now| {
            policy.stalled(st, deps, now)
        });
    }

    /// Runs `f` on call `r`'s route policy, request state and dependencies,
    /// and returns what it returns (`None` when `r` is no Levee call, or,
    /// when `attempt` is given, that attempt is no longer out). No model is
    /// given: what runs here names its domain by its permit.
    fn on_levee_call<T>(
        &mut self,
        r: Ref,
        attempt: Option<u32>,
        f: impl FnOnce(&levee_policy::RoutePolicy, &mut RequestState, &mut SimDeps<'_>, Instant) -> T,
    ) -> Option<T> {
        let now = self.policy_now();
        let Engine { calls, levee, .. } = self;
        let (Some(lv), Some(c)) = (levee.as_mut(), calls.get_mut(r)) else {
            return None;
        };
        if attempt.is_some_and(|a| c.child.is_none() || c.attempt != a) {
            return None;
        }
        let Kind::Levee { route, st, .. } = &mut c.kind else {
            return None;
        };
        let route = *route as usize;
        // As the gateway's finisher: no model, no ask (the permit names both).
        let mut deps = SimDeps {
            deps: Deps {
                providers: &mut lv.states,
                target_provider: &lv.target_provider[route],
                target_model: &[],
                budgets: &mut lv.budgets[route],
            },
            ask: Ask::default(),
        };
        Some(f(&lv.gw.config.routes[route].policy, st, &mut deps, now))
    }

    /// An attempt came back (or timed out): record it, then go on.
    pub(crate) fn levee_reply(&mut self, r: Ref, reply: Reply) {
        let Some(c) = self.calls.get_mut(r) else {
            return;
        };
        c.child = None;
        let outcome = match reply {
            Reply::Status {
                status,
                retry_after,
                ..
            } => Outcome::Status {
                status,
                retry_after,
            },
            Reply::TimedOut => Outcome::Timeout,
        };
        let Some(class) = self.on_levee_call(r, None, |policy, st, deps, now| {
            policy.record(st, deps, now, outcome)
        }) else {
            return;
        };
        if class == levee_policy::classify::Class::Success {
            self.finish(r, reply);
        } else {
            self.levee_drive(r);
        }
    }

    /// The provider answered job `job` of Levee call `r`: while Levee still
    /// waits for it, what the answer reports left of each meter lowers the
    /// allowance of the provider it was sent to, and a 2xx's usage settles
    /// what the attempt reserved (the gateway's driver does both).
    pub(crate) fn levee_answered(
        &mut self,
        r: Ref,
        job: Ref,
        reported: &[Option<(Meter, Reported)>],
        tokens: Tokens,
        success: bool,
    ) {
        let now = self.policy_now();
        let Engine { calls, levee, .. } = self;
        let (Some(lv), Some(c)) = (levee.as_mut(), calls.get(r)) else {
            return;
        };
        let Kind::Levee { route, st, .. } = &c.kind else {
            return;
        };
        if c.child != Some(job) {
            return;
        }
        let cfg_route = &lv.gw.config.routes[*route as usize];
        let Some(target) = cfg_route.targets.get(st.target()) else {
            return;
        };
        let state = &mut lv.states[target.provider];
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

    /// The caller left: give back the in-flight attempt's permit. The guard
    /// is dropped with the call.
    pub(crate) fn levee_cancel(&mut self, r: Ref) {
        self.on_levee_call(r, None, |policy, st, deps, now| {
            policy.abandon(st, deps, now)
        });
    }

    /// Virtual time as the policy sees it: shifted by the run's clock phase.
    fn policy_now(&self) -> Instant {
        let phase = self.levee.as_ref().map_or(0, |lv| lv.phase);
        Instant::from_nanos(self.now + phase)
    }

    /// Whether the call `r` (a Levee hop) is its caller's retry, and the
    /// caller marks retries.
    fn is_caller_retry(&self, r: Ref) -> bool {
        let Some(Parent::Call(p)) = self.calls.get(r).map(|c| c.parent) else {
            return false;
        };
        match self.calls.get(p) {
            Some(Call {
                kind: Kind::Caller { layer, .. },
                attempt,
                ..
            }) => *attempt > 1 && self.v.layers[*layer as usize].marks_retries,
            _ => false,
        }
    }

    fn count_reason(&mut self, reason: &'static str) {
        if let Some(lv) = self.levee.as_mut() {
            *lv.reasons.entry(reason).or_insert(0) += 1;
        }
    }
}
