//! The live caller census: who calls, with what deadline, and whether that
//! deadline lets a retry or the fallback start — measured from traffic rather
//! than from a list someone wrote by hand (a hand-written list once named the
//! one worker with a short deadline as the exception; it was the rule).
//!
//! Beside it, each target's observed slow end (p99 attempt latency) next to
//! the `expected_attempt_ms` every "can start" judgment is built on: when the
//! p99 is longer, the census rests on a number that is not true, and Levee
//! says so (a log line once, a gauge, the status page).
//!
//! An attempt is timed from dispatch to its whole answer; for a stream, to
//! its first event (the commit point: after it no retry or fallback can
//! start, so that is the span a "can start" judgment depends on).
//! Connection failures and attempts cut by the caller's deadline are not
//! timed: they say nothing about how long the provider takes.
//!
//! Memory is fixed whatever callers send: at most `limits.caller_names`
//! (default [`MAX_CALLER_NAMES`]) names from `x-levee-caller` and
//! `anonymous` (the rest count as `other`), each with a fixed-size
//! [`Sketch`]; recording takes one short lock and allocates nothing after a
//! caller's first request.
//!
//! The parts: the fixed-size histogram (`sketch`), the callers and their
//! names (`callers`), each route's last minute of traffic (`window`), the
//! report admin `GET /census` serves (`report`) and its reading from a
//! running gateway (`fetch`). This file holds the census itself and what
//! it records.

mod callers;
mod fetch;
mod report;
mod sketch;
mod window;

pub use callers::key_index;
pub use fetch::fetch;
pub use report::{target_name, CensusReport};
pub use window::Recent;

use crate::clock::Clock;
use crate::observe::outcome::{FallbackReason, RequestOutcome};
use callers::{CallerLabel, Callers};
use levee_config::Config;
use levee_policy::Instant;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sketch::Sketch;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use window::{Count, Windows};

/// Distinct `x-levee-caller` names (and `anonymous`) tracked by default
/// (`limits.caller_names`); further names count as [`OTHER`].
pub const MAX_CALLER_NAMES: usize = 64;
/// The caller name for requests past the name cap or with an unusable header.
pub const OTHER: &str = "other";
/// The caller name for requests with neither a gateway key nor `x-levee-caller`.
pub const ANONYMOUS: &str = "anonymous";
/// The header a caller names itself with when the gateway has no keys.
pub const CALLER_HEADER: &str = "x-levee-caller";
/// Attempts a target needs before its p99 is compared with `expected_attempt_ms`.
pub const MIN_SAMPLES: u64 = 20;
/// Fallbacks kept for the status page.
pub const RECENT_FALLBACKS: usize = 20;
/// The window over which recent attempts per request are counted.
pub const WINDOW_SECS: u64 = 60;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteTargetLabel {
    pub route: String,
    pub target: String,
}

/// One target's observed attempt latency.
struct TargetStats {
    latency: Sketch,
    expected_ms: u64,
    /// Attempts slower than `expected_ms`.
    over: u64,
    warned: bool,
    gauge: Gauge,
}

/// A fallback, for the status page.
#[derive(Clone, Debug)]
pub struct FallbackEvent {
    pub unix_ms: u64,
    pub route: usize,
    pub target: usize,
    pub(crate) reason: FallbackReason,
}

/// The census of a running gateway.
pub struct Census {
    callers: Mutex<Callers>,
    /// Caller slot of each configured key (`keys[i]`), when keys are configured.
    key_slots: Vec<usize>,
    targets: Vec<Vec<Mutex<TargetStats>>>,
    windows: Vec<Windows>,
    fallbacks: Mutex<VecDeque<FallbackEvent>>,
    caller_requests: Family<CallerLabel, Counter>,
    exceeded: Family<RouteTargetLabel, Gauge>,
    /// Each target's label, by route and position.
    labels: Vec<Vec<RouteTargetLabel>>,
    route_names: Vec<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A caller's label id: its slot, and which holder of the slot it is.
fn caller_id(slot: usize, incarnation: u16) -> u32 {
    (u32::from(incarnation) << 16) | (u32::try_from(slot).unwrap_or(0xffff) & 0xffff)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Census {
    /// An empty census for `config`; its metrics join `registry`.
    pub fn new(config: &Config, registry: &mut Registry) -> Self {
        let caller_requests = Family::<CallerLabel, Counter>::default();
        registry.register(
            "levee_caller_requests",
            "Requests by caller (the key's name, else x-levee-caller or anonymous for up to limits.caller_names names, default 64, else other)",
            caller_requests.clone(),
        );
        let exceeded = Family::<RouteTargetLabel, Gauge>::default();
        registry.register(
            "levee_expected_attempt_exceeded",
            "1 when more than 1% of a target's attempts took longer than its expected_attempt_ms (its p99 is longer): the census rests on a number that is not true",
            exceeded.clone(),
        );
        Census::build(config, Callers::new(), caller_requests, exceeded)
    }

    fn build(
        config: &Config,
        mut callers: Callers,
        caller_requests: Family<CallerLabel, Counter>,
        exceeded: Family<RouteTargetLabel, Gauge>,
    ) -> Self {
        callers.limit = config.limits.caller_names;
        let key_slots = config
            .keys
            .iter()
            .map(|k| callers.slot(k.name(), &caller_requests))
            .collect();
        let labels: Vec<Vec<RouteTargetLabel>> = config
            .routes
            .iter()
            .map(|r| {
                (0..r.targets.len())
                    .map(|t| RouteTargetLabel {
                        route: r.name.clone(),
                        target: target_name(config, r, t),
                    })
                    .collect()
            })
            .collect();
        let targets = config
            .routes
            .iter()
            .zip(&labels)
            .map(|(r, labels)| {
                r.targets
                    .iter()
                    .zip(labels)
                    .map(|(target, label)| {
                        let gauge = exceeded.get_or_create(label).clone();
                        Mutex::new(TargetStats {
                            latency: Sketch::new(),
                            expected_ms: ms(target.expected_attempt),
                            over: 0,
                            warned: false,
                            gauge,
                        })
                    })
                    .collect()
            })
            .collect();
        let windows = config.routes.iter().map(|_| Windows::new()).collect();
        Census {
            callers: Mutex::new(callers),
            key_slots,
            targets,
            windows,
            fallbacks: Mutex::new(VecDeque::with_capacity(RECENT_FALLBACKS)),
            caller_requests,
            exceeded,
            labels,
            route_names: config.routes.iter().map(|r| r.name.clone()).collect(),
        }
    }

    /// The census for a reloaded `config`, whose routes and targets may have
    /// moved: everything indexed by position is re-keyed by name, so nothing
    /// recorded for one target is ever read as another's. Callers (keyed by
    /// name) carry over; a target's latency carries over to the target with
    /// the same route, provider and model and the same `expected_attempt_ms`,
    /// and starts empty otherwise; a route's recent window carries over to
    /// the route of the same name; recent fallbacks (positions) start empty.
    /// Gauges of targets no longer configured are removed.
    pub fn next(&self, config: &Config) -> Census {
        let callers = lock(&self.callers).clone();
        self.exceeded.clear();
        let next = Census::build(
            config,
            callers,
            self.caller_requests.clone(),
            self.exceeded.clone(),
        );
        for (ri, labels) in next.labels.iter().enumerate() {
            for (t, label) in labels.iter().enumerate() {
                let old = self.position(label);
                let (Some((ori, ot)), Some(new)) = (old, next.targets[ri].get(t)) else {
                    continue;
                };
                let old = lock(&self.targets[ori][ot]);
                let mut new = lock(new);
                if old.expected_ms == new.expected_ms {
                    new.latency = old.latency.clone();
                    new.over = old.over;
                    new.warned = old.warned;
                    let n = new.latency.count();
                    new.gauge
                        .set(i64::from(n >= MIN_SAMPLES && new.over * 100 > n));
                }
            }
        }
        for (ri, name) in next.route_names.iter().enumerate() {
            if let Some(ori) = self.route_names.iter().position(|n| n == name) {
                next.windows[ri].copy_from(&self.windows[ori]);
            }
        }
        next
    }

    /// Where `label`'s target is in this census.
    fn position(&self, label: &RouteTargetLabel) -> Option<(usize, usize)> {
        self.labels
            .iter()
            .enumerate()
            .find_map(|(ri, ls)| ls.iter().position(|l| l == label).map(|t| (ri, t)))
    }

    /// Counts one request on `route` with the resolved `deadline`. `key` is
    /// the index of the gateway key that matched (`None` without keys);
    /// `header` the `x-levee-caller` value. Returns the caller's label id:
    /// its name, bounded as the census bounds names
    /// ([`Census::caller_label`]), told apart from the slot's earlier holders.
    pub fn admitted(
        &self,
        key: Option<usize>,
        header: Option<&[u8]>,
        route: usize,
        deadline: Duration,
        now: Instant,
    ) -> usize {
        let id = {
            let mut c = lock(&self.callers);
            c.rank(now.since_origin().as_secs(), &self.caller_requests);
            let slot = match key.and_then(|k| self.key_slots.get(k)) {
                Some(&s) => s,
                None => c.identify(header, &self.caller_requests),
            };
            let s = &mut c.slots[slot];
            s.requests += 1;
            s.recent = s.recent.saturating_add(1);
            s.deadlines.record(ms(deadline));
            s.counter.inc();
            caller_id(slot, s.incarnation)
        };
        if let Some(w) = self.windows.get(route) {
            w.count(now.since_origin().as_secs(), Count::REQUEST);
        }
        id as usize
    }

    /// The caller label of label id `id`: a gateway key's name, a name a
    /// caller gave in `x-levee-caller` or `anonymous` for a request that
    /// named none (the `limits.caller_names` busiest of these), else
    /// `other`.
    pub(crate) fn caller_label(&self, id: usize) -> String {
        lock(&self.callers)
            .slots
            .get(id & 0xffff)
            .map_or_else(|| OTHER.to_string(), |s| s.name.to_string())
    }

    /// The slots that changed hands since last asked, each with the name it
    /// gave up: the metrics remove that name's series.
    pub(crate) fn take_retired(&self) -> Vec<(usize, Box<str>)> {
        std::mem::take(&mut lock(&self.callers).retired)
    }

    /// Counts one finished attempt on `route`'s `target` that took `took`.
    /// Connection failures and attempts cut by the caller's deadline say
    /// nothing about how long the provider takes, so they are not timed.
    pub fn attempt(
        &self,
        route: usize,
        target: usize,
        took: Duration,
        result: crate::observe::outcome::AttemptResult,
        now: Instant,
    ) {
        if let Some(w) = self.windows.get(route) {
            w.count(now.since_origin().as_secs(), Count::ATTEMPT);
        }
        if !result.is_timed() {
            return;
        }
        let Some(stats) = self.targets.get(route).and_then(|r| r.get(target)) else {
            return;
        };
        let mut s = lock(stats);
        let took = ms(took);
        s.latency.record(took);
        if took > s.expected_ms {
            s.over += 1;
        }
        let n = s.latency.count();
        // p99 > expected exactly when more than 1% of attempts were slower.
        let exceeded = n >= MIN_SAMPLES && s.over * 100 > n;
        // Written when it changes: a gauge's set is an atomic swap, ~8 ns
        // of a worker's CPU on every attempt for a value that rarely moves.
        if s.gauge.get() != i64::from(exceeded) {
            s.gauge.set(i64::from(exceeded));
        }
        if exceeded && !s.warned {
            s.warned = true;
            tracing::warn!(
                target: "levee::census",
                route,
                target,
                expected_attempt_ms = s.expected_ms,
                observed_p99_ms = s.latency.quantile(0.99).unwrap_or(0),
                attempts = n,
                "a target's p99 attempt latency exceeds its expected_attempt_ms: \
                 retries and fallbacks are judged on a number that is not true; \
                 raise expected_attempt_ms to the observed p99"
            );
        }
    }

    /// Notes a fallback to `route`'s `target`.
    pub(crate) fn fallback(
        &self,
        route: usize,
        target: usize,
        reason: FallbackReason,
        clock: &Clock,
    ) {
        let mut f = lock(&self.fallbacks);
        if f.len() == RECENT_FALLBACKS {
            f.pop_front();
        }
        f.push_back(FallbackEvent {
            unix_ms: clock.unix_ms(),
            route,
            target,
            reason,
        });
    }

    /// The most recent fallbacks, newest first.
    pub fn recent_fallbacks(&self) -> Vec<FallbackEvent> {
        lock(&self.fallbacks).iter().rev().cloned().collect()
    }

    /// Counts one request on `route` answered with `outcome` (as counted in
    /// `levee_requests_total`), for the success ratio over the last
    /// [`WINDOW_SECS`].
    pub(crate) fn answered(&self, route: usize, outcome: RequestOutcome, now: Instant) {
        if !outcome.says_of_route() {
            return;
        }
        if let Some(w) = self.windows.get(route) {
            let c = Count::answered(outcome.is_success());
            w.count(now.since_origin().as_secs(), c);
        }
    }

    /// The position of the route named `name`.
    pub fn route_index(&self, name: &str) -> Option<usize> {
        self.route_names.iter().position(|n| n == name)
    }

    /// `route`'s traffic over the last [`WINDOW_SECS`].
    pub fn recent(&self, route: usize, now: Instant) -> Recent {
        self.windows
            .get(route)
            .map(|w| w.sum(now.since_origin().as_secs()))
            .unwrap_or_default()
    }

    /// Whether `route`'s `target` has a p99 above its `expected_attempt_ms`.
    pub fn exceeded(&self, route: usize, target: usize) -> bool {
        self.targets
            .get(route)
            .and_then(|r| r.get(target))
            .is_some_and(|s| lock(s).gauge.get() == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(targets: &str) -> Config {
        let text = format!(
            "providers:\n  a: {{ api: openai, base_url: \"http://127.0.0.1:1\" }}\n  b: {{ api: openai, base_url: \"http://127.0.0.1:2\" }}\nroutes:\n  - targets: [{targets}]\n"
        );
        Config::parse(&text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_reloaded_census_follows_targets_by_name_not_position() {
        let old = Census::new(&config("a, b"), &mut Registry::default());
        let now = Instant::from_nanos(0);
        for _ in 0..MIN_SAMPLES {
            old.attempt(
                0,
                1,
                Duration::from_millis(700),
                crate::observe::outcome::AttemptResult::Success,
                now,
            );
        }
        let row = |c: &Census, cfg: &Config, provider: &str| {
            c.report(cfg)
                .targets
                .into_iter()
                .find(|t| t.provider == provider)
                .and_then(|t| t.observed_p99_ms)
        };
        let before = config("a, b");
        assert_eq!(row(&old, &before, "b"), Some(700));
        assert_eq!(row(&old, &before, "a"), None);
        // The targets swap places: b's latency stays b's.
        let after = config("b, a");
        let new = old.next(&after);
        assert_eq!(row(&new, &after, "b"), Some(700));
        assert_eq!(row(&new, &after, "a"), None);
    }

    #[test]
    fn answers_count_toward_the_success_ratio_by_outcome() {
        let config = config("a");
        let mut registry = Registry::default();
        let census = Census::new(&config, &mut registry);
        let now = Instant::from_millis(5_000);
        use levee_policy::Reason;
        let outcomes = [
            RequestOutcome::Success,
            RequestOutcome::Replayed,
            Reason::CircuitOpen.into(),
            Reason::UpstreamError.into(),
            RequestOutcome::ClientClosed,
        ];
        for outcome in outcomes {
            census.answered(0, outcome, now);
        }
        // A caller that stopped reading a stream says nothing of the route.
        let r = census.recent(0, now);
        assert_eq!((r.answered, r.succeeded), (4, 2));
        assert_eq!(census.route_index(&config.routes[0].name), Some(0));
        assert_eq!(census.route_index("nowhere"), None);
    }
}
