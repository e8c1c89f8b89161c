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
//! Memory is fixed whatever callers send: at most [`MAX_CALLER_NAMES`] names
//! from `x-levee-caller` (the rest count as `other`), each with a fixed-size
//! [`Sketch`]; recording takes one short lock and allocates nothing after a
//! caller's first request.

use crate::clock::Clock;
use crate::observe::outcome::{FallbackReason, RequestOutcome};
use levee_config::Config;
use levee_policy::Instant;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Distinct `x-levee-caller` names tracked; further names count as [`OTHER`].
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

/// A fixed histogram of milliseconds, each value floored to three
/// significant digits (at most 1% low, never high: a deadline read from it
/// is never longer than the callers' real one). Covers 0 ms to 2.8 hours in
/// 4,600 buckets; longer values count as the longest bucket.
#[derive(Clone, Debug)]
pub struct Sketch {
    counts: Box<[u32]>,
    total: u64,
}

const SKETCH_BUCKETS: usize = 1000 + 4 * 900;
const SKETCH_MAX_MS: u64 = 9_999_999;

impl Sketch {
    /// An empty sketch.
    pub fn new() -> Self {
        Sketch {
            counts: vec![0; SKETCH_BUCKETS].into_boxed_slice(),
            total: 0,
        }
    }

    fn index(ms: u64) -> usize {
        let mut m = ms.min(SKETCH_MAX_MS);
        if m < 1000 {
            return usize::try_from(m).unwrap_or(0);
        }
        let mut scale = 0usize;
        while m >= 1000 {
            m /= 10;
            scale += 1;
        }
        1000 + (scale - 1) * 900 + usize::try_from(m - 100).unwrap_or(0)
    }

    fn value(ix: usize) -> u64 {
        if ix < 1000 {
            return ix as u64;
        }
        let (scale, m) = ((ix - 1000) / 900 + 1, (ix - 1000) % 900 + 100);
        m as u64 * 10u64.pow(u32::try_from(scale).unwrap_or(0))
    }

    /// Counts one value.
    pub fn record(&mut self, ms: u64) {
        let c = &mut self.counts[Self::index(ms)];
        *c = c.saturating_add(1);
        self.total += 1;
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q` quantile (0..=1), floored to the bucket; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (ix, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(Self::value(ix));
            }
        }
        Some(SKETCH_MAX_MS)
    }
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch::new()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallerLabel {
    pub caller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteTargetLabel {
    pub route: String,
    pub target: String,
}

#[derive(Clone)]
struct CallerSlot {
    name: Box<str>,
    requests: u64,
    deadlines: Sketch,
    counter: Counter,
}

#[derive(Clone)]
struct Callers {
    by_name: HashMap<Box<str>, usize>,
    slots: Vec<CallerSlot>,
    /// Names admitted from `x-levee-caller` so far.
    dynamic: usize,
    /// The anonymous callers' slot once made: most requests name no
    /// caller, and finding the slot by name hashed it each time (~280
    /// instructions a request).
    anonymous: Option<usize>,
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

/// One second of a route's traffic.
#[derive(Clone, Copy)]
struct Second {
    /// Which second since the clock's origin; `u64::MAX` before any.
    sec: u64,
    requests: u32,
    attempts: u32,
    answered: u32,
    succeeded: u32,
}

impl Second {
    const EMPTY: Second = Second {
        sec: u64::MAX,
        requests: 0,
        attempts: 0,
        answered: 0,
        succeeded: 0,
    };
}

/// A route's traffic over the last [`WINDOW_SECS`]: what its attempts per
/// request and the success ratio its callers see are computed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recent {
    /// Requests admitted (the attempts' denominator).
    pub requests: u64,
    /// Upstream attempts finished.
    pub attempts: u64,
    /// Requests answered, each counted once in `levee_requests_total`
    /// under its outcome: successes, failures and refusals alike.
    pub answered: u64,
    /// Of those, answered with success (`success` or `replayed`).
    pub succeeded: u64,
}

impl Recent {
    /// The share of answered requests that succeeded; `None` when none was
    /// answered.
    pub fn success_ratio(&self) -> Option<f64> {
        (self.answered > 0).then(|| self.succeeded as f64 / self.answered as f64)
    }
}

/// A route's traffic per second over the last [`WINDOW_SECS`].
#[derive(Clone)]
struct Window {
    slots: Vec<Second>,
}

impl Window {
    fn new() -> Self {
        Window {
            slots: vec![Second::EMPTY; usize::try_from(WINDOW_SECS).unwrap_or(60)],
        }
    }

    fn slot(&mut self, sec: u64) -> &mut Second {
        let n = self.slots.len() as u64;
        let s = &mut self.slots[usize::try_from(sec % n).unwrap_or(0)];
        if s.sec != sec {
            *s = Second {
                sec,
                ..Second::EMPTY
            };
        }
        s
    }

    /// The traffic in the window ending at `sec`.
    fn sum(&self, sec: u64) -> Recent {
        self.slots
            .iter()
            .filter(|s| s.sec <= sec && sec - s.sec < WINDOW_SECS)
            .fold(Recent::default(), |r, s| Recent {
                requests: r.requests + u64::from(s.requests),
                attempts: r.attempts + u64::from(s.attempts),
                answered: r.answered + u64::from(s.answered),
                succeeded: r.succeeded + u64::from(s.succeeded),
            })
    }
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
    windows: Vec<Mutex<Window>>,
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

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A usable caller name: 1 to 64 visible ASCII characters.
fn valid_name(v: &[u8]) -> Option<&str> {
    if v.is_empty() || v.len() > 64 || !v.iter().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    std::str::from_utf8(v).ok()
}

impl Census {
    /// An empty census for `config`; its metrics join `registry`.
    pub fn new(config: &Config, registry: &mut Registry) -> Self {
        let caller_requests = Family::<CallerLabel, Counter>::default();
        registry.register(
            "levee_caller_requests",
            "Requests by caller (the key's name, else x-levee-caller for up to 64 names, else other or anonymous)",
            caller_requests.clone(),
        );
        let exceeded = Family::<RouteTargetLabel, Gauge>::default();
        registry.register(
            "levee_expected_attempt_exceeded",
            "1 when more than 1% of a target's attempts took longer than its expected_attempt_ms (its p99 is longer): the census rests on a number that is not true",
            exceeded.clone(),
        );
        let callers = Callers {
            by_name: HashMap::new(),
            slots: Vec::new(),
            dynamic: 0,
            anonymous: None,
        };
        Census::build(config, callers, caller_requests, exceeded)
    }

    fn build(
        config: &Config,
        mut callers: Callers,
        caller_requests: Family<CallerLabel, Counter>,
        exceeded: Family<RouteTargetLabel, Gauge>,
    ) -> Self {
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
        let windows = config
            .routes
            .iter()
            .map(|_| Mutex::new(Window::new()))
            .collect();
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
                let w = lock(&self.windows[ori]).clone();
                *lock(&next.windows[ri]) = w;
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
    /// `header` the `x-levee-caller` value.
    pub fn admitted(
        &self,
        key: Option<usize>,
        header: Option<&[u8]>,
        route: usize,
        deadline: Duration,
        now: Instant,
    ) {
        {
            let mut c = lock(&self.callers);
            let slot = match key.and_then(|k| self.key_slots.get(k)) {
                Some(&s) => s,
                None => c.identify(header, &self.caller_requests),
            };
            let s = &mut c.slots[slot];
            s.requests += 1;
            s.deadlines.record(ms(deadline));
            s.counter.inc();
        }
        if let Some(w) = self.windows.get(route) {
            lock(w).slot(now.since_origin().as_secs()).requests += 1;
        }
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
            lock(w).slot(now.since_origin().as_secs()).attempts += 1;
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
        s.gauge.set(i64::from(exceeded));
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
            let mut w = lock(w);
            let s = w.slot(now.since_origin().as_secs());
            s.answered += 1;
            s.succeeded += u32::from(outcome.is_success());
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
            .map(|w| lock(w).sum(now.since_origin().as_secs()))
            .unwrap_or_default()
    }

    /// Whether `route`'s `target` has a p99 above its `expected_attempt_ms`.
    pub fn exceeded(&self, route: usize, target: usize) -> bool {
        self.targets
            .get(route)
            .and_then(|r| r.get(target))
            .is_some_and(|s| lock(s).gauge.get() == 1)
    }

    /// The census as served on admin `GET /census`.
    pub fn report(&self, config: &Config) -> CensusReport {
        let mut callers = Vec::new();
        {
            let c = lock(&self.callers);
            for s in c.slots.iter().filter(|s| s.requests > 0) {
                let p5 = s.deadlines.quantile(0.05);
                let p50 = s.deadlines.quantile(0.5);
                let routes = config
                    .routes
                    .iter()
                    .map(|r| {
                        let typical = Duration::from_millis(p50.unwrap_or(0));
                        let row = r.policy.census(typical.min(r.deadline.max()));
                        CallerRoute {
                            route: r.name.clone(),
                            retry_can_start: row.retry_can_start,
                            fallback_can_start: row.fallback_reachable,
                        }
                    })
                    .collect();
                callers.push(CallerRow {
                    name: s.name.to_string(),
                    requests: s.requests,
                    deadline_ms: DeadlineMs { p5, p50 },
                    routes,
                });
            }
        }
        let mut targets = Vec::new();
        for (ri, r) in config.routes.iter().enumerate() {
            for (t, target) in r.targets.iter().enumerate() {
                let observed = self
                    .targets
                    .get(ri)
                    .and_then(|x| x.get(t))
                    .and_then(|s| lock(s).latency.quantile(0.99));
                targets.push(TargetRow {
                    route: r.name.clone(),
                    provider: config.providers[target.provider].name.clone(),
                    expected_attempt_ms: ms(target.expected_attempt),
                    observed_p99_ms: observed,
                });
            }
        }
        CensusReport { callers, targets }
    }
}

impl Callers {
    /// The slot named `name`, created when new.
    fn slot(&mut self, name: &str, family: &Family<CallerLabel, Counter>) -> usize {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let counter = family
            .get_or_create(&CallerLabel {
                caller: name.to_string(),
            })
            .clone();
        self.slots.push(CallerSlot {
            name: name.into(),
            requests: 0,
            deadlines: Sketch::new(),
            counter,
        });
        self.by_name.insert(name.into(), self.slots.len() - 1);
        self.slots.len() - 1
    }

    /// The slot for a request without a gateway key.
    fn identify(&mut self, header: Option<&[u8]>, family: &Family<CallerLabel, Counter>) -> usize {
        let name = match header {
            None => {
                let slot = match self.anonymous {
                    Some(slot) => slot,
                    None => self.slot(ANONYMOUS, family),
                };
                self.anonymous = Some(slot);
                return slot;
            }
            Some(v) => match valid_name(v) {
                None => OTHER,
                Some(n) if self.by_name.contains_key(n) => n,
                Some(_) if self.dynamic >= MAX_CALLER_NAMES => OTHER,
                Some(n) => {
                    self.dynamic += 1;
                    n
                }
            },
        };
        self.slot(name, family)
    }
}

/// Which configured key a caller's key digest is (`None` without keys or
/// when none matches). Each comparison takes the same time wherever the
/// digests differ (`subtle`), so the answer's timing does not leak a key.
pub fn key_index(keys: &[[u8; 32]], digest: &[u8; 32]) -> Option<usize> {
    keys.iter()
        .position(|k| bool::from(subtle::ConstantTimeEq::ct_eq(&k[..], &digest[..])))
}

/// A target as `levee check` names it: `provider` or `provider (model)`.
pub fn target_name(config: &Config, route: &levee_config::Route, t: usize) -> String {
    let target = &route.targets[t];
    let provider = &config.providers[target.provider].name;
    match &target.model {
        Some(m) => format!("{provider} ({m})"),
        None => provider.clone(),
    }
}

/// Admin `GET /census`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CensusReport {
    pub callers: Vec<CallerRow>,
    pub targets: Vec<TargetRow>,
}

/// One caller seen in traffic.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CallerRow {
    pub name: String,
    pub requests: u64,
    pub deadline_ms: DeadlineMs,
    pub routes: Vec<CallerRoute>,
}

/// A caller's observed deadlines (as resolved by Levee: the route's default
/// when the caller sent none, clamped to the route's max).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeadlineMs {
    pub p5: Option<u64>,
    pub p50: Option<u64>,
}

/// What the caller's p50 deadline allows on one route (`levee check`'s rule).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CallerRoute {
    pub route: String,
    pub retry_can_start: bool,
    /// `null` when the route has no fallback target.
    pub fallback_can_start: Option<bool>,
}

/// One target's observed slow end beside the number the census assumes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TargetRow {
    pub route: String,
    pub provider: String,
    pub expected_attempt_ms: u64,
    /// `null` until the target has had an attempt.
    pub observed_p99_ms: Option<u64>,
}

/// Why a running gateway's census could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "`{0}` is not an http:// address of a Levee admin listener (like http://127.0.0.1:9090)"
    )]
    Url(String),
    #[error("cannot reach {url}: {source}; is the gateway running, and is this its admin address (`admin.listen`)?")]
    Connect {
        url: String,
        source: hyper_util::client::legacy::Error,
    },
    #[error("{url} did not answer within {0:?}", FETCH_TIMEOUT)]
    Timeout { url: String },
    #[error("{url} answered HTTP {status}; is this a Levee admin listener (`admin.listen`)?")]
    Status { url: String, status: u16 },
    #[error(
        "{url} did not send a census ({message}); is this a Levee admin listener of this version?"
    )]
    Body { url: String, message: String },
}

/// How long [`fetch`] waits for the admin listener.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the census of the gateway whose admin listener is at `admin`
/// (`http://host:port`, with or without `/census`).
pub async fn fetch(admin: &str) -> Result<CensusReport, FetchError> {
    use http_body_util::BodyExt;
    let base = admin.trim_end_matches('/');
    let url = if base.ends_with("/census") {
        base.to_string()
    } else {
        format!("{base}/census")
    };
    let uri: http::Uri = url.parse().map_err(|_| FetchError::Url(admin.into()))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(FetchError::Url(admin.into()));
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let req = http::Request::get(uri)
        .body(http_body_util::Empty::new())
        .map_err(|_| FetchError::Url(admin.into()))?;
    let read = async {
        let resp = client
            .request(req)
            .await
            .map_err(|source| FetchError::Connect {
                url: url.clone(),
                source,
            })?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(FetchError::Status {
                url: url.clone(),
                status,
            });
        }
        let body = http_body_util::Limited::new(resp.into_body(), 16 << 20)
            .collect()
            .await
            .map_err(|e| FetchError::Body {
                url: url.clone(),
                message: e.to_string(),
            })?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| FetchError::Body {
            url: url.clone(),
            message: e.to_string(),
        })
    };
    tokio::time::timeout(FETCH_TIMEOUT, read)
        .await
        .map_err(|_| FetchError::Timeout { url: url.clone() })?
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
    fn sketch_floors_to_three_significant_digits() {
        for (v, want) in [
            (0, 0),
            (999, 999),
            (1000, 1000),
            (1234, 1230),
            (40_000, 40_000),
            (100_000, 100_000),
            (123_456, 123_000),
            (9_999_999, 9_990_000),
            (u64::MAX, 9_990_000),
        ] {
            assert_eq!(Sketch::value(Sketch::index(v)), want, "{v}");
        }
    }

    #[test]
    fn sketch_quantiles() {
        let mut s = Sketch::new();
        assert_eq!(s.quantile(0.5), None);
        for _ in 0..95 {
            s.record(100_000);
        }
        for _ in 0..5 {
            s.record(40_000);
        }
        assert_eq!(s.quantile(0.05), Some(40_000));
        assert_eq!(s.quantile(0.06), Some(100_000));
        assert_eq!(s.quantile(0.5), Some(100_000));
        assert_eq!(s.count(), 100);
    }

    #[test]
    fn the_window_counts_the_last_minute_only() {
        let mut w = Window::new();
        assert_eq!(w.sum(0), Recent::default());
        w.slot(0).requests += 1;
        w.slot(0).attempts += 2;
        w.slot(0).answered += 1;
        w.slot(59).requests += 1;
        w.slot(59).answered += 1;
        w.slot(59).succeeded += 1;
        let sum = |r, a, n, s| Recent {
            requests: r,
            attempts: a,
            answered: n,
            succeeded: s,
        };
        assert_eq!(w.sum(59), sum(2, 2, 2, 1));
        assert_eq!(w.sum(59).success_ratio(), Some(0.5));
        assert_eq!(w.sum(60), sum(1, 0, 1, 1));
        w.slot(60).requests += 5;
        assert_eq!(w.sum(60), sum(6, 0, 1, 1));
        assert_eq!(w.sum(200), Recent::default());
        assert_eq!(w.sum(200).success_ratio(), None);
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

    #[test]
    fn caller_names_are_bounded() {
        let family = Family::<CallerLabel, Counter>::default();
        let mut c = Callers {
            by_name: HashMap::new(),
            slots: Vec::new(),
            dynamic: 0,
            anonymous: None,
        };
        for i in 0..200 {
            c.identify(Some(format!("svc-{i}").as_bytes()), &family);
        }
        let anonymous = c.identify(None, &family);
        assert_eq!(c.identify(None, &family), anonymous);
        assert_eq!(&*c.slots[anonymous].name, ANONYMOUS);
        c.identify(Some(b"bad name"), &family);
        c.identify(Some(b"svc-3"), &family);
        let names: Vec<&str> = c.slots.iter().map(|s| &*s.name).collect();
        assert_eq!(names.len(), MAX_CALLER_NAMES + 2, "{names:?}");
        assert!(names.contains(&OTHER) && names.contains(&ANONYMOUS));
        assert!(names.contains(&"svc-63") && !names.contains(&"svc-64"));
    }
}
