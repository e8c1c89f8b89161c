//! The Levee hop: a thin driver around `levee_policy::RoutePolicy`, the same
//! decision function the gateway calls. Nothing here decides whether, when or
//! where to retry; it only does what the gateway's driver does with a
//! [`Decision`] — on virtual time. Levee's state is [`crate::gateway`]'s.
//!
//! Every error Levee answers carries `x-should-retry: false`.

use super::{Call, Engine, Ev, Hop, Kind, Parent};
use crate::arrivals::Tokens;
use crate::gateway::SimDeps;
use crate::layers::Reply;
use crate::scenario::{LeveeGateway, Scenario};
use crate::slab::Ref;
use crate::virtual_time::ns;
use levee_policy::allowance::{Meter, Reported};
use levee_policy::{Decision, Instant, Outcome, RequestState};
use std::time::Duration;

fn no_retry(status: u16, retry_after: Option<Duration>) -> Reply {
    Reply::Status {
        status,
        retry_after,
        no_retry: true,
    }
}

impl Engine<'_> {
    pub(super) fn levee_begin(&mut self, r: Ref) {
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
        let Some(guard) = lv.try_acquire(route) else {
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
    pub(super) fn levee_drive(&mut self, r: Ref) {
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
        let decision = lv.decide(route, stream, caller_model, st, now, rng);
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
    pub(super) fn levee_stalled(&mut self, r: Ref, attempt: u32) {
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
        Some(lv.with_finisher_deps(*route as usize, st, now, f))
    }

    /// An attempt came back (or timed out): record it, then go on.
    pub(super) fn levee_reply(&mut self, r: Ref, reply: Reply) {
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
    pub(super) fn levee_answered(
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
        lv.answered(*route as usize, st, reported, tokens, success, now);
    }

    /// The caller left: give back the in-flight attempt's permit. The guard
    /// is dropped with the call.
    pub(super) fn levee_cancel(&mut self, r: Ref) {
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
