//! One provider's shared state: breakers, throttles, allowance and in-flight cap.
//!
//! Every attempt to a provider, from any route, passes through its
//! [`ProviderState`]: [`ProviderState::admit`] before sending, and
//! [`ProviderState::finish`] with the classified result. Fallback attempts go
//! through the fallback provider's own state, so one vendor's incident cannot
//! become a flood on the second.
//!
//! ## Fault domains
//! Providers fail per model far more often than as a whole (one model's
//! capacity pool runs hot, one deployment is broken), and they rate-limit per
//! model. So the state is split:
//! - **per model** (the model name sent upstream): a circuit breaker and a
//!   "throttled until" from 429s. Forty failures of model A leave model B
//!   untouched; a 429 on `hot` throttles `hot` only.
//! - **per provider**: the organisation's allowance (`rate_limit`), the
//!   in-flight cap, and a provider-wide breaker that counts what no model
//!   causes — connections that cannot be made — and that opens outright when
//!   two models' breakers are open at once (a provider-wide outage seen from
//!   two sides), so quiet models need not each collect their own evidence.
//!
//! At most [`MAX_MODELS`] models get a domain of their own; further names
//! share one overflow domain (memory stays bounded whatever callers send).

use crate::admission::Gcra;
use crate::allowance::{Allowance, Ask, Cost, Grant, Meter, Reported};
use crate::breaker::{BreakerPermit, BreakerState, CircuitBreaker};
use crate::budget::RetryBudget;
use crate::classify::Class;
use crate::graded::{Belief, Graded};
use crate::learn::{AttemptTimes, Pace, Retries, WINNING_SHARE};
use crate::time::Instant;
use std::time::Duration;

/// How long a caller refused by graded admission is told to wait: about
/// one bucket of its window, after which the fraction has been judged
/// again.
pub const GRADED_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Models with a fault domain of their own, per provider.
pub const MAX_MODELS: usize = 64;

/// Why a provider would not take an attempt now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Breaker open until then.
    CircuitOpen { until: Instant },
    /// The provider said 429 with a wait: until it passes, the model is
    /// paced to the rate the provider accepts, and the next slot is then.
    Throttled { until: Instant },
    /// The breaker closed after an outage and is ramping back: at most
    /// 1.4× the rate before the trip; the next slot is then.
    Recovering { until: Instant },
    /// The per-minute allowance would be exceeded; it conforms again then.
    RateLimited { until: Instant },
    /// `max_in_flight` reached.
    Shed,
    /// No connection to the provider came free in time (`max_connections`).
    PoolExhausted,
}

/// What [`ProviderState::admit`] hands out; give it back to [`ProviderState::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permit {
    breaker: BreakerPermit,
    link: BreakerPermit,
    domain: u16,
    /// When the attempt was admitted (its time is learned from it).
    at: Instant,
    /// A stall was already counted against the model's breaker.
    stall_counted: bool,
    /// Sent while the model was busier than its running average.
    busy: bool,
    /// A retry on the same target.
    retry: bool,
    /// What the allowance spent on it, settled from the answer's usage.
    grant: Grant,
}

impl Permit {
    /// Marks the attempt as a retry on the same target (its answer tells
    /// whether retries are winning).
    pub fn retry(mut self) -> Self {
        self.retry = true;
        self
    }

    /// What the allowance spent on the attempt.
    pub fn grant(&self) -> Grant {
        self.grant
    }

    /// The fault domain (the model's, at its provider) it was admitted in:
    /// a small number naming the model, for labels kept by number.
    pub fn domain(&self) -> u16 {
        self.domain
    }
}

#[derive(Clone, Debug)]
struct Domain {
    model: Box<str>,
    breaker: CircuitBreaker,
    graded: Graded,
    throttled_until: Instant,
    times: AttemptTimes,
    pace: Pace,
    retries: Retries,
    /// The retries a second the model is sent whatever the successes,
    /// shared by every route that uses it (`None`: no shared floor).
    floor: Option<RetryBudget>,
}

impl Domain {
    /// Whether retries on the model are winning: what its retries did,
    /// or — before there are enough of them to tell — what its first
    /// attempts do, once load evidence says its faults are random (a retry
    /// into random loss wins as often as any attempt). Not before that
    /// evidence: at a provider just past its capacity most retries succeed
    /// too, each in another caller's place, and taking them for winning
    /// from the first answers sent 1.55× the offered load instead of 1.23×.
    fn winning(&self, now: Instant) -> Option<bool> {
        self.retries.winning(now).or_else(|| {
            let (share, n) = self.graded.success_share(now)?;
            // Only ever "winning" from it, and unless clearly below a
            // third: twenty first answers at a true 40 % read under a
            // third one time in three.
            let below = crate::learn::clearly_below(share, n, WINNING_SHARE);
            (self.retries.judged_random(now) && !below).then_some(true)
        })
    }

    /// Graded admission's count of an attempt about to be admitted:
    /// whether it may go.
    fn ask(&mut self, now: Instant) -> bool {
        let belief = self.retries.belief(now);
        self.graded.ask(now, belief)
    }

    /// Graded admission's count of an attempt it refused itself (the
    /// fraction of what is asked it lets through counts every ask). One
    /// an open breaker, a pace, the allowance or the in-flight cap refused
    /// is not an ask of its: counted, those would read as the provider
    /// refusing and cut the fraction for Levee's own limits.
    fn refused_ask(&mut self, now: Instant) {
        let belief = self.retries.belief(now);
        if self.breaker.refusing_until(now).is_none() && !self.graded.would_admit(now, belief) {
            self.graded.ask(now, belief);
        }
    }

    fn new(model: &str, breaker: CircuitBreaker) -> Self {
        let s = breaker.settings();
        Domain {
            model: model.into(),
            graded: Graded::new(s.error_ratio, s.window, s.min_requests),
            breaker,
            throttled_until: Instant::ZERO,
            times: AttemptTimes::default(),
            pace: Pace::default(),
            retries: Retries::default(),
            floor: None,
        }
    }
}

/// One model's admission, as [`ProviderState::model_admission`] reports it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelAdmission<'a> {
    /// The model (`""`: the overflow domain).
    pub model: &'a str,
    pub state: BreakerState,
    /// The fraction of attempts admitted now, in [0, 1].
    pub fraction: f64,
    pub belief: Belief,
}

/// Mutable state of one provider.
#[derive(Clone, Debug)]
pub struct ProviderState {
    /// A fresh breaker, cloned for each new model domain.
    template: CircuitBreaker,
    /// The provider-wide breaker.
    link: CircuitBreaker,
    /// `domains[0]` is the overflow domain.
    domains: Vec<Domain>,
    /// The account's allowance: requests and tokens, by priority and share.
    allowance: Allowance,
    max_in_flight: u32,
    in_flight: u32,
    /// What the provider last reported left of each meter, and when.
    reports: [Option<(Instant, u64)>; 4],
    /// When an attempt last found the provider unreachable (no connection,
    /// a reset before any answer).
    unreachable_at: Option<Instant>,
    /// A fresh retry floor, cloned for each new model domain.
    floor: Option<RetryBudget>,
}

/// How long a provider's report of what is left stays evidence of its
/// allowance's state: the answers of the last second.
const REPORT_FRESH: Duration = Duration::from_secs(1);

impl ProviderState {
    /// Builds from validated parts. `max_in_flight` 0 is read as 1.
    pub fn new(breaker: CircuitBreaker, allowance: Option<Gcra>, max_in_flight: u32) -> Self {
        ProviderState {
            link: breaker.clone(),
            domains: vec![Domain::new("", breaker.clone())],
            template: breaker,
            allowance: allowance.map_or_else(Allowance::default, |g| Allowance::from_gcra(&g)),
            unreachable_at: None,
            floor: None,
            max_in_flight: max_in_flight.max(1),
            in_flight: 0,
            reports: [None; 4],
        }
    }

    /// The same state with a retry floor per model: `floor` (a budget
    /// that is a floor alone, [`RetryBudget::floor`]) copied into each
    /// model's domain, spent by [`ProviderState::withdraw_floor`] when a
    /// route's own budget is empty.
    pub fn with_retry_floor(mut self, floor: RetryBudget) -> Self {
        for d in &mut self.domains {
            d.floor = Some(floor.clone());
        }
        self.floor = Some(floor);
        self
    }

    /// Withdraws a retry from `model`'s floor, if the provider has one and
    /// it holds a retry now. The floor is the model's, not a route's: an
    /// outage of the model gets `min_per_second` retries a second however
    /// many routes send to it.
    pub fn withdraw_floor(&mut self, now: Instant, model: &str) -> bool {
        if self.floor.is_none() {
            return false;
        }
        let d = if model.is_empty() {
            0
        } else {
            self.domain(model)
        };
        self.domains[d]
            .floor
            .as_mut()
            .is_some_and(|f| f.try_withdraw(now))
    }

    /// The same state with `allowance` (requests and tokens, shares).
    pub fn with_allowance(mut self, allowance: Allowance) -> Self {
        self.allowance = allowance;
        self
    }

    fn find(&self, model: &str) -> Option<usize> {
        self.domains
            .iter()
            .skip(1)
            .position(|d| &*d.model == model)
            .map(|i| i + 1)
    }

    /// The domain an attempt for `model` would be admitted in, without
    /// creating one: its own, the overflow domain once the table is full,
    /// or none yet (a model not seen gets a fresh domain on admission).
    fn existing(&self, model: &str) -> Option<usize> {
        match self.find(model) {
            Some(i) => Some(i),
            None if self.domains.len() > MAX_MODELS => Some(0),
            None => None,
        }
    }

    /// The domain for `model`, created on first use (overflow past the cap).
    fn domain(&mut self, model: &str) -> usize {
        if let Some(i) = self.find(model) {
            return i;
        }
        if self.domains.len() > MAX_MODELS {
            return 0;
        }
        let mut domain = Domain::new(model, self.template.clone());
        domain.floor.clone_from(&self.floor);
        self.domains.push(domain);
        self.domains.len() - 1
    }

    /// Whether an attempt for `model` would be admitted now, without taking anything.
    pub fn check(&self, now: Instant, model: &str) -> Result<(), Refusal> {
        self.check_as(now, model, &Ask::default())
    }

    /// [`ProviderState::check`] for `ask`'s place in the allowance.
    pub fn check_as(&self, now: Instant, model: &str, ask: &Ask) -> Result<(), Refusal> {
        if let Some(until) = self.link.refusing_until(now) {
            return Err(Refusal::CircuitOpen { until });
        }
        // A model not seen yet: nothing of its own refuses it.
        if let Some(d) = self.existing(model).map(|i| &self.domains[i]) {
            if let Some(until) = d.breaker.refusing_until(now) {
                return Err(Refusal::CircuitOpen { until });
            }
            if !d.graded.would_admit(now, d.retries.belief(now)) {
                return Err(Refusal::CircuitOpen {
                    until: now + GRADED_RETRY_AFTER,
                });
            }
            // Throttled: paced to what the provider accepts, never shut. A
            // retry is not paced: it has waited the provider's own
            // Retry-After already, and the retry budget bounds retries
            // (paced again, each went to the back of the line: the storm's
            // p99 was 11-16 s against the SDK's 4.5 s).
            if d.pace.active() && !ask.retry {
                d.pace
                    .peek(now)
                    .map_err(|until| Refusal::Throttled { until })?;
            }
        }
        if self.in_flight >= self.max_in_flight {
            return Err(Refusal::Shed);
        }
        // A caller past its share of the in-flight cap is shed while the
        // cap is three-quarters full: the rest is kept for the others.
        if self.allowance.has_shares()
            && u64::from(self.in_flight) * 4 >= u64::from(self.max_in_flight) * 3
            && self
                .allowance
                .over_in_flight_share(now, ask, self.max_in_flight)
        {
            return Err(Refusal::Shed);
        }
        self.allowance
            .check(now, ask)
            .map_err(|until| Refusal::RateLimited { until })
    }

    /// Takes an in-flight slot, one request of the allowance and the breakers'
    /// permission — all or nothing.
    pub fn admit(&mut self, now: Instant, model: &str) -> Result<Permit, Refusal> {
        self.admit_as(now, model, &Ask::default())
    }

    /// [`ProviderState::admit`] for `ask`: its tokens, priority, kind and
    /// caller's share of the allowance.
    pub fn admit_as(&mut self, now: Instant, model: &str, ask: &Ask) -> Result<Permit, Refusal> {
        if let Err(r) = self.check_as(now, model, ask) {
            // The shares are taken over the callers asking, admitted or not;
            // and so is graded admission's count of what was asked.
            self.allowance.asked(now, ask);
            if let Some(i) = self.find(model) {
                self.domains[i].refused_ask(now);
            }
            return Err(r);
        }
        let domain = self.domain(model);
        if !self.domains[domain].ask(now) {
            // Cannot happen after a successful check at the same instant.
            return Err(Refusal::CircuitOpen {
                until: now + GRADED_RETRY_AFTER,
            });
        }
        let link = match self.link.admit(now) {
            Ok(l) => l,
            Err(until) => {
                self.domains[domain].graded.unask(now);
                return Err(Refusal::CircuitOpen { until });
            }
        };
        let breaker = match self.domains[domain].breaker.admit(now) {
            Ok(b) => b,
            Err(until) => {
                self.domains[domain].graded.unask(now);
                self.link.record(now, link, Class::NotProviderFault);
                let d = &self.domains[domain];
                return Err(match d.breaker.state(now) {
                    BreakerState::Closed | BreakerState::Recovering => {
                        Refusal::Recovering { until }
                    }
                    _ => Refusal::CircuitOpen { until },
                });
            }
        };
        let grant = match self.allowance.take(now, ask) {
            Ok(g) => g,
            // Cannot fail after a successful check at the same instant.
            Err(until) => {
                self.domains[domain].graded.unask(now);
                self.link.record(now, link, Class::NotProviderFault);
                self.domains[domain]
                    .breaker
                    .record(now, breaker, Class::NotProviderFault);
                return Err(Refusal::RateLimited { until });
            }
        };
        self.allowance.in_flight(grant.caller, true);
        let d = &mut self.domains[domain];
        if !ask.retry {
            d.pace.take(now);
        }
        d.pace.sent(now);
        let busy = d.retries.dispatched(self.in_flight);
        self.in_flight += 1;
        Ok(Permit {
            breaker,
            link,
            domain: u16::try_from(domain).unwrap_or(0),
            at: now,
            stall_counted: false,
            busy,
            retry: false,
            grant,
        })
    }

    /// The answer to the attempt behind `grant` used `used` tokens: the
    /// allowance gets back what its estimate held beyond them.
    pub fn settle(&mut self, now: Instant, grant: Grant, used: Cost) {
        self.allowance.settle(now, grant, used);
    }

    /// What the provider reported left of one of its meters.
    pub fn reported(&mut self, now: Instant, meter: Meter, r: Reported) {
        self.allowance.reported(now, meter, r);
        if let Some(remaining) = r.remaining {
            self.reports[meter.index()] = Some((now, remaining));
        }
    }

    /// Whether the provider's own rate-limit fields, in its answers of the
    /// last second, say its allowance has room: `Some(false)` when one
    /// meter is at 0 (a 429 then is the account's limit), `Some(true)` when
    /// every meter it reported has some left (a 429 then is a lost race: a
    /// busy replica, load-balancer shedding), `None` when it said nothing.
    pub fn headroom(&self, now: Instant) -> Option<bool> {
        let fresh = self
            .reports
            .iter()
            .flatten()
            .filter(|(at, _)| now.saturating_since(*at) <= REPORT_FRESH);
        let mut any = false;
        for (_, remaining) in fresh {
            if *remaining == 0 {
                return Some(false);
            }
            any = true;
        }
        any.then_some(true)
    }

    /// The model whose fault domain `permit` was admitted in (`""`: the
    /// overflow domain the models past [`MAX_MODELS`] share).
    pub fn model_of(&self, permit: &Permit) -> &str {
        self.domain_model(permit.domain)
    }

    /// The model of the fault domain numbered `domain` (`""`: the
    /// provider's catch-all domain, or no such domain).
    pub fn domain_model(&self, domain: u16) -> &str {
        self.domains
            .get(usize::from(domain))
            .map_or("", |d| &d.model)
    }

    /// The allowance, to read its levels and shares.
    pub fn allowance(&self) -> &Allowance {
        &self.allowance
    }

    /// The attempt behind `permit` has waited past its model's learned p99
    /// with no first byte while its caller still waits: stall evidence,
    /// counted once as a fault against the model's breaker now, while the
    /// attempt goes on (a stalled provider sends no answer to count).
    pub fn stalled(&mut self, now: Instant, permit: &mut Permit) {
        if permit.stall_counted {
            return;
        }
        permit.stall_counted = true;
        let i = usize::from(permit.domain).min(self.domains.len() - 1);
        self.domains[i].graded.answered(now, false);
        let stall = Class::Fault {
            retryable: true,
            wait: None,
            provider_wide: false,
        };
        self.record_model(now, i, permit.breaker, stall);
    }

    /// The learned p99 attempt time of `model` (dispatch to answer), when
    /// enough recent attempts succeeded to tell.
    pub fn expected(&self, now: Instant, model: &str) -> Option<Duration> {
        self.domains[self.existing(model)?].times.p99(now)
    }

    /// Whether retries on `model` are winning now (`None`: too few to
    /// tell, or a model not seen yet).
    pub fn winning(&self, now: Instant, model: &str) -> Option<bool> {
        self.domains[self.existing(model)?].winning(now)
    }

    /// The pace a throttled model is held to (attempts per second), if any.
    pub fn pace(&self, now: Instant, model: &str) -> Option<f64> {
        let _ = now;
        self.domains[self.find(model)?].pace.current()
    }

    /// Records an admitted attempt's result and frees its slot. A cancelled or
    /// abandoned attempt is finished with [`Class::NotProviderFault`]. A
    /// throttle's `wait` is taken as given: cap it before (the planner does).
    /// Returns whether retries on the model were winning before this answer:
    /// at least half of them succeed and its faults do not come with load
    /// (see [`Retries`]; `None`: too few to tell).
    pub fn finish(&mut self, now: Instant, permit: Permit, class: Class) -> Option<bool> {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.allowance.in_flight(permit.grant.caller, false);
        self.allowance.answered(now, permit.grant.caller, class);
        // The provider-wide breaker learns only whether the provider could be
        // reached: any answer is a success for it.
        let link_class = match class {
            Class::Fault {
                provider_wide: true,
                ..
            } => class,
            Class::NotProviderFault => Class::NotProviderFault,
            _ => Class::Success,
        };
        self.link.record(now, permit.link, link_class);
        if matches!(link_class, Class::Fault { .. }) {
            self.unreachable_at = Some(now);
        }
        let i = usize::from(permit.domain).min(self.domains.len() - 1);
        let d = &mut self.domains[i];
        let winning = d.winning(now);
        if matches!(
            class,
            Class::Success | Class::Fault { .. } | Class::Throttled { .. }
        ) {
            let failed = !matches!(class, Class::Success);
            d.retries.answered(now, permit.retry, permit.busy, failed);
        }
        if let Class::Fault { wait, .. } = class {
            d.retries.fault_signal(now, wait.is_some());
        }
        d.graded.done();
        if !permit.stall_counted {
            match class {
                Class::Success | Class::Permanent => d.graded.answered(now, true),
                Class::Fault { .. } => d.graded.answered(now, false),
                Class::Throttled { .. } | Class::NotProviderFault => {}
            }
        }
        match class {
            Class::Success => {
                d.times.observe(now, now.saturating_since(permit.at));
                d.pace.answered(now, false);
            }
            Class::Permanent => d.pace.answered(now, false),
            Class::Throttled { wait, .. } => {
                d.pace.answered(now, true);
                if let Some(wait) = wait {
                    d.pace.throttled(now);
                    d.throttled_until = d.throttled_until.max(now + wait);
                }
            }
            Class::Fault { .. } | Class::NotProviderFault => {}
        }
        if !permit.stall_counted {
            self.record_model(now, i, permit.breaker, class);
        }
        winning
    }

    fn record_model(&mut self, now: Instant, i: usize, permit: BreakerPermit, class: Class) {
        let d = &mut self.domains[i];
        let was_open = matches!(
            d.breaker.state(now),
            BreakerState::Open | BreakerState::HalfOpen
        );
        d.breaker.record(now, permit, class);
        let state = d.breaker.state(now);
        if was_open && matches!(state, BreakerState::Closed | BreakerState::Recovering) {
            // The outage's evidence says nothing of the recovered model:
            // the breaker's ramp paces the return, not a window of faults
            // that would hold it near zero for another window.
            d.graded.forget();
        }
        let opened = !was_open && state == BreakerState::Open;
        if opened && self.open_models(now) >= 2 {
            self.link.trip(now);
        }
    }

    fn open_models(&self, now: Instant) -> usize {
        self.domains
            .iter()
            .filter(|d| d.breaker.state(now) == BreakerState::Open)
            .count()
    }

    /// Attempts in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Whether an attempt found the provider unreachable within `within`
    /// of `now`.
    pub fn unreachable_within(&self, now: Instant, within: Duration) -> bool {
        self.unreachable_at
            .is_some_and(|at| now.saturating_since(at) < within)
    }

    /// The provider's breaker state at `now`: open when the provider-wide
    /// breaker is, else the worst of its models'.
    pub fn breaker_state(&self, now: Instant) -> BreakerState {
        let link = self.link.state(now);
        if link != BreakerState::Closed {
            return link;
        }
        let mut worst = BreakerState::Closed;
        for d in &self.domains {
            match d.breaker.state(now) {
                BreakerState::Open => return BreakerState::Open,
                BreakerState::HalfOpen => worst = BreakerState::HalfOpen,
                BreakerState::Recovering if worst == BreakerState::Closed => {
                    worst = BreakerState::Recovering
                }
                BreakerState::Recovering | BreakerState::Closed => {}
            }
        }
        worst
    }

    /// The provider-wide breaker's state at `now` (connections that cannot
    /// be made; two models' breakers open at once).
    pub fn link_state(&self, now: Instant) -> BreakerState {
        self.link.state(now)
    }

    /// Each model's breaker and graded admission at `now`: the models with
    /// a domain of their own in the order first seen, then — once more than
    /// [`MAX_MODELS`] names were seen — the overflow domain the rest share,
    /// named `""`. For each, its breaker state, the fraction of attempts it
    /// admits (0 while its breaker is open, but for probes), and what its
    /// faults are believed to be.
    pub fn model_admission(&self, now: Instant) -> Vec<ModelAdmission<'_>> {
        let overflow = self.domains.len() > MAX_MODELS;
        self.domains
            .iter()
            .skip(1)
            .chain(self.domains.iter().take(usize::from(overflow)))
            .map(|d| {
                let state = d.breaker.state(now);
                let belief = d.retries.belief(now);
                let fraction = match state {
                    BreakerState::Open => 0.0,
                    _ => d.graded.fraction(now, belief),
                };
                ModelAdmission {
                    model: &d.model,
                    state,
                    fraction,
                    belief,
                }
            })
            .collect()
    }

    /// Until when a 429 asked everyone to wait, for the model throttled
    /// longest (`None` if none is now).
    pub fn throttled_until(&self, now: Instant) -> Option<Instant> {
        self.domains
            .iter()
            .map(|d| d.throttled_until)
            .max()
            .filter(|&u| u > now)
    }

    /// A generous default for tests and the no-config mock setup.
    pub fn unlimited() -> Self {
        ProviderState::new(CircuitBreaker::default_policy(), None, u32::MAX)
    }
}

impl Refusal {
    /// How long until the refusal lifts, if known.
    pub fn retry_after(self, now: Instant) -> Option<Duration> {
        match self {
            Refusal::CircuitOpen { until }
            | Refusal::Throttled { until }
            | Refusal::Recovering { until }
            | Refusal::RateLimited { until } => Some(until.saturating_since(now)),
            Refusal::Shed | Refusal::PoolExhausted => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THROTTLED_2S: Class = Class::Throttled {
        retryable: true,
        wait: Some(Duration::from_secs(2)),
    };

    #[test]
    fn a_throttled_model_is_paced_to_what_it_accepts_never_shut() {
        let mut p = ProviderState::unlimited();
        // Five seconds at 20 answers/s, then a 429 asking for 2 s.
        for i in 0..100u64 {
            let t = Instant::from_millis(i * 50);
            let permit = p.admit(t, "m").unwrap();
            p.finish(t, permit, Class::Success);
        }
        let t = Instant::from_millis(4_999);
        let permit = p.admit(t, "m").unwrap();
        p.finish(t, permit, THROTTLED_2S);
        // The next second, offered 1,000 attempts: about 20 go (not 0, as a
        // shut model would let through, nor 1,000), each refused until its
        // slot of the pace.
        let mut last = t;
        let through = (0..1_000u64)
            .filter(|i| {
                let now = t + Duration::from_millis(*i);
                let ok = p
                    .admit(now, "m")
                    .map(|permit| p.finish(now, permit, Class::Success))
                    .is_ok();
                if ok {
                    last = now;
                }
                ok
            })
            .count();
        assert!((18..=26).contains(&through), "{through}");
        assert!(matches!(p.check(last, "m"), Err(Refusal::Throttled { .. })));
        // Offered less than half the pace for a second, the pace is lifted.
        let quiet = t + Duration::from_millis(1_500);
        let permit = p.admit(quiet, "m").unwrap();
        p.finish(quiet, permit, Class::Success);
        let later = t + Duration::from_millis(3_001);
        assert!((0..100).all(|_| p.admit(later, "m").is_ok()));
    }

    const FAULT: Class = Class::Fault {
        retryable: true,
        wait: None,
        provider_wide: false,
    };

    /// A provider's retry floor is one per model, whoever withdraws from
    /// it: 5 a second for `m` however many routes ask, another 5 for `n`;
    /// no floor configured, none withdrawn.
    #[test]
    fn the_retry_floor_is_one_per_model_shared_by_every_withdrawal() {
        let floor = RetryBudget::floor(5.0, Duration::from_secs(1)).unwrap();
        let mut p = ProviderState::unlimited().with_retry_floor(floor);
        let t = Instant::from_millis(10_000);
        // Twenty routes asking ten times each in one instant.
        let m = (0..200).filter(|_| p.withdraw_floor(t, "m")).count();
        assert_eq!(m, 5);
        let n = (0..200).filter(|_| p.withdraw_floor(t, "n")).count();
        assert_eq!(n, 5);
        // A second later the floor has refilled.
        let later = t + Duration::from_secs(1);
        assert_eq!((0..200).filter(|_| p.withdraw_floor(later, "m")).count(), 5);
        let mut none = ProviderState::unlimited();
        assert!(!none.withdraw_floor(t, "m"));
    }

    #[test]
    fn a_throttle_holds_only_the_model_it_was_for() {
        let mut p = ProviderState::unlimited();
        let t = Instant::from_millis(1000);
        let permit = p.admit(t, "hot").unwrap();
        let wait = Some(Duration::from_secs(3));
        p.finish(
            t,
            permit,
            Class::Throttled {
                retryable: true,
                wait,
            },
        );
        // Nothing accepted yet: paced at one attempt a second.
        assert!(p.admit(t, "hot").is_ok());
        assert!(matches!(p.check(t, "hot"), Err(Refusal::Throttled { .. })));
        assert_eq!(p.check(t, "cool"), Ok(()));
    }

    #[test]
    fn one_failing_model_does_not_open_the_breaker_for_another() {
        let mut p = ProviderState::unlimited();
        let t = Instant::from_millis(1000);
        for _ in 0..40 {
            if let Ok(permit) = p.admit(t, "broken") {
                p.finish(t, permit, FAULT);
            }
        }
        assert!(matches!(
            p.check(t, "broken"),
            Err(Refusal::CircuitOpen { .. })
        ));
        assert_eq!(p.check(t, "healthy"), Ok(()));
    }

    #[test]
    fn each_models_breaker_is_listed_with_the_provider_wide_one_apart() {
        let mut p = ProviderState::unlimited();
        let t = Instant::from_millis(1000);
        for model in ["healthy", "broken"] {
            let permit = p.admit(t, model).unwrap();
            p.finish(t, permit, Class::Success);
        }
        for _ in 0..40 {
            if let Ok(permit) = p.admit(t, "broken") {
                p.finish(t, permit, FAULT);
            }
        }
        let breakers: Vec<_> = p
            .model_admission(t)
            .iter()
            .map(|a| (a.model, a.state))
            .collect();
        assert_eq!(
            breakers,
            [
                ("healthy", BreakerState::Closed),
                ("broken", BreakerState::Open)
            ]
        );
        assert_eq!(p.link_state(t), BreakerState::Closed);
        assert_eq!(p.breaker_state(t), BreakerState::Open);
    }

    #[test]
    fn two_models_open_is_a_provider_outage_and_refuses_a_third() {
        let mut p = ProviderState::unlimited();
        let t = Instant::from_millis(1000);
        for model in ["a", "b"] {
            for _ in 0..20 {
                if let Ok(permit) = p.admit(t, model) {
                    p.finish(t, permit, FAULT);
                }
            }
        }
        assert!(matches!(
            p.check(t, "quiet"),
            Err(Refusal::CircuitOpen { .. })
        ));
    }

    #[test]
    fn unreachable_provider_opens_for_every_model() {
        let mut p = ProviderState::unlimited();
        let t = Instant::from_millis(1000);
        let unreachable = Class::Fault {
            retryable: true,
            wait: None,
            provider_wide: true,
        };
        for i in 0..20 {
            let model = if i % 2 == 0 { "a" } else { "b" };
            if let Ok(permit) = p.admit(t, model) {
                p.finish(t, permit, unreachable);
            }
        }
        assert!(matches!(p.check(t, "c"), Err(Refusal::CircuitOpen { .. })));
    }

    #[test]
    fn model_domains_are_bounded() {
        let mut p = ProviderState::unlimited();
        let t = Instant::from_millis(1000);
        for i in 0..1000 {
            let permit = p.admit(t, &format!("m{i}")).unwrap();
            p.finish(t, permit, Class::Success);
        }
        assert_eq!(p.domains.len(), MAX_MODELS + 1);
        let listed: Vec<_> = p
            .model_admission(t)
            .iter()
            .map(|a| (a.model, a.state))
            .collect();
        assert_eq!(listed.len(), MAX_MODELS + 1);
        assert_eq!(listed[0].0, "m0");
        assert_eq!(listed[MAX_MODELS].0, "", "the shared overflow domain last");
    }

    #[test]
    fn in_flight_cap_sheds_and_finish_frees() {
        let mut p = ProviderState::new(CircuitBreaker::default_policy(), None, 1);
        let t = Instant::from_millis(1);
        let a = p.admit(t, "m").unwrap();
        assert_eq!(p.admit(t, "m"), Err(Refusal::Shed));
        p.finish(t, a, Class::NotProviderFault);
        assert_eq!(p.in_flight(), 0);
        assert!(p.admit(t, "m").is_ok());
    }

    #[test]
    fn allowance_is_spent_per_attempt() {
        let mut p = ProviderState::new(
            CircuitBreaker::default_policy(),
            Some(Gcra::per_minute(60, 2).unwrap()),
            100,
        );
        let t = Instant::from_millis(10_000);
        for _ in 0..2 {
            let permit = p.admit(t, "m").unwrap();
            p.finish(t, permit, Class::Permanent);
        }
        assert!(matches!(p.admit(t, "m"), Err(Refusal::RateLimited { .. })));
    }
}
