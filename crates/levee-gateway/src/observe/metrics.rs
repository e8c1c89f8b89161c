//! The gateway's metrics, under their public names, encoded as Prometheus text.
//!
//! The four that carry the picture: added latency (handler time
//! minus upstream time), attempts per logical request (the amplification
//! factor, as a histogram because a mean of 1.02 hides a tail of nines),
//! deadline remaining at dispatch, and what was rejected and why.

use crate::http::respond::Why;
use crate::observe::histogram::Histogram;
use crate::observe::outcome::{AttemptResult, FallbackReason, RequestOutcome, SkipReason};
use handles::Handles;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::{Metric, Registry};
use rustc_hash::FxHashMap;

mod handles;
use std::sync::Mutex;

/// A request's `levee_tokens_total` series (its input and output) and its
/// `levee_spend_usd_total` series, by numbers: route and provider indices,
/// the model's fault domain at the provider, the caller's index
/// (`u32::MAX`: not listed), and whether the answer was delivered.
pub type TokensKey = (u32, u32, u16, u32, bool);

/// A family's series found by a number (`K`) without building its labels'
/// strings, each made once, and kept to remove the series again; `N`
/// series a key, found with one lookup (a request's input and output token
/// counts: two lookups cost ~300 instructions more an answer).
struct KeyedSeries<K, L, M, const N: usize = 1> {
    map: Mutex<FxHashMap<K, [(M, L); N]>>,
}

impl<K, L, M, const N: usize> Default for KeyedSeries<K, L, M, N> {
    fn default() -> Self {
        KeyedSeries {
            map: Mutex::new(FxHashMap::default()),
        }
    }
}

impl<K, L, M, const N: usize> std::fmt::Debug for KeyedSeries<K, L, M, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyedSeries")
    }
}

impl<K, L, M, const N: usize> KeyedSeries<K, L, M, N>
where
    K: std::hash::Hash + Eq,
    L: Clone + std::hash::Hash + Eq,
    M: Clone + Default,
{
    /// `f` on the series of `key` in `family`, the `i`th made with
    /// `labels(i)` the first time.
    fn with(
        &self,
        family: &Family<L, M>,
        key: K,
        mut labels: impl FnMut(usize) -> L,
        f: impl FnOnce(&[(M, L); N]),
    ) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let series = map.entry(key).or_insert_with(|| {
            std::array::from_fn(|i| {
                let l = labels(i);
                (family.get_or_create(&l).clone(), l)
            })
        });
        f(series);
    }

    /// Removes from `family` (and forgets) every series `gone` picks, with
    /// the others of its key.
    fn forget(&self, family: &Family<L, M>, gone: impl Fn(&K, &L) -> bool) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|k, series| {
            let keep = !series.iter().any(|(_, l)| gone(k, l));
            if !keep {
                for (_, l) in series.iter() {
                    family.remove(l);
                }
            }
            keep
        });
    }
}

/// A spend series' counter (US dollars).
type SpendCounter = Counter<f64, std::sync::atomic::AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteOutcome {
    pub route: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderResult {
    pub provider: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhatLabel {
    pub what: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabel {
    pub provider: String,
}

/// A provider and one of its models' fault domains (`model=""`: the
/// provider as a whole; `model="other"`: the domain models past the cap
/// share).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderModel {
    pub provider: String,
    pub model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderModelBelief {
    pub provider: String,
    pub model: String,
    pub belief: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteProviderReason {
    pub route: String,
    pub provider: String,
    pub reason: String,
}

/// Where a request's deadline came from.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeadlineSourceLabel {
    /// `header` (`x-timeout-ms`, `x-deadline-ms`), `sdk_timeout` (the
    /// SDK's own timeout, `x-stainless-timeout`), or `default` (neither:
    /// the route's default).
    pub deadline_source: &'static str,
}

/// A series of a caller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallerOnly {
    pub caller: String,
}

/// The buckets of `levee_deadline_remaining_at_dispatch_seconds`: 10 ms
/// doubling 16 times.
fn deadline_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 16))
}

/// A `levee_spend_usd_total` series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpendLabel {
    pub route: String,
    pub provider: String,
    pub model: String,
    pub caller: String,
    /// `delivered` or `undelivered`, as on `levee_tokens_total`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokensLabel {
    pub route: String,
    pub provider: String,
    /// The model's fault domain at the provider (`other` past the 64 a
    /// provider keeps apart).
    pub model: String,
    /// The caller's `callers[]` name (`""`: not listed).
    pub caller: String,
    /// `input` or `output`.
    pub kind: &'static str,
    /// `delivered`: the answer reached the caller (the request succeeded);
    /// `undelivered`: the provider did the work and nobody received it (the
    /// caller left, its deadline ended a stream, the gateway shut down).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderMeter {
    pub provider: String,
    /// `requests`, `tokens`, `input_tokens` or `output_tokens`.
    pub meter: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderCallerMeter {
    pub provider: String,
    pub caller: String,
    pub meter: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteReason {
    pub route: String,
    pub reason: String,
}

/// Every metric the gateway exports.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    pub requests: Family<RouteOutcome, Counter>,
    pub upstream_attempts: Family<ProviderResult, Counter>,
    pub attempts_per_request: Histogram,
    pub added_latency: Histogram,
    /// Arrival to the answer's end (a stream's last byte), every request.
    pub request_duration: Histogram,
    /// By where the deadline came from: `header`, `sdk_timeout`, `default`.
    pub deadline_remaining_at_dispatch: Family<DeadlineSourceLabel, Histogram, fn() -> Histogram>,
    /// Requests that named no deadline (Levee applied the route's
    /// default), by caller.
    no_deadline: Family<CallerOnly, Counter>,
    no_deadline_handles: KeyedSeries<u32, CallerOnly, Counter>,
    pub budget_exhausted: Family<ProviderLabel, Counter>,
    pub rejected: Family<ReasonLabel, Counter>,
    pub circuit_state: Family<ProviderModel, Gauge>,
    pub admitted_fraction: Family<ProviderModel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub circuit_belief: Family<ProviderModelBelief, Gauge>,
    pub in_flight: Family<ProviderLabel, Gauge>,
    pub caller_retries: Counter,
    pub upstream_connect: Histogram,
    /// The wait for one of a provider's `max_connections` to come free.
    pub upstream_pool_wait: Histogram,
    pub time_to_first_byte: Histogram,
    pub streams_failed: Family<ProviderLabel, Counter>,
    pub fallbacks: Family<RouteReason, Counter>,
    pub replayed: Counter,
    pub state_fallbacks: Family<WhatLabel, Counter>,
    pub state_replicas: Gauge,
    pub idempotency_local: Counter,
    pub translation_refused: Family<RouteProviderReason, Counter>,
    pub tokens: Family<TokensLabel, Counter>,
    /// `levee_spend_usd_total`: tokens × price, where the price is known.
    pub spend: Family<SpendLabel, Counter<f64, std::sync::atomic::AtomicU64>>,
    spend_handles: KeyedSeries<TokensKey, SpendLabel, SpendCounter>,
    pub allowance_remaining: Family<ProviderMeter, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub allowance_limit: Family<ProviderMeter, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub allowance_share_used: Family<ProviderCallerMeter, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub allowance_share: Family<ProviderCallerMeter, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// `tokens`' counters by (route, provider, model domain, caller,
    /// outcome) as numbers, input and output together: found without
    /// building the labels' strings.
    token_handles: KeyedSeries<TokensKey, TokensLabel, Counter, 2>,
    request_handles: Handles,
    attempt_handles: Handles,
    reject_handles: Handles,
    fallback_handles: Handles,
}

/// Every metric's name and help text.
const HELP: [(&str, &str); 30] = [
    (
        "levee_requests",
        "Logical requests by route and outcome (success or the x-levee-reason)",
    ),
    (
        "levee_upstream_attempts",
        "Attempts sent upstream, by provider and result: success, http_4xx, http_4xx_foreign_body, http_5xx, throttled, connect_error, timeout, deadline_cut, cut_before_first_event (a stream's 2xx head, then nothing), body_cut and body_timeout (a plain 2xx whose body broke off or stalled), response_too_large",
    ),
    (
        "levee_attempts_per_request",
        "Upstream attempts per logical request: the amplification factor",
    ),
    (
        "levee_request_duration_seconds",
        "Each request's whole duration, arrival to the end of its answer (a stream's last byte), whatever its outcome",
    ),
    (
        "levee_added_latency_seconds",
        "Handler time minus time in upstream attempts and backoff waits: the gateway's own cost",
    ),
    (
        "levee_deadline_remaining_at_dispatch_seconds",
        "Caller deadline left when an attempt is dispatched, by deadline_source: header (x-timeout-ms or x-deadline-ms), sdk_timeout (the SDK's own timeout), default (the route's, the caller said nothing)",
    ),
    (
        "levee_requests_without_deadline",
        "Requests that arrived with no deadline (no x-timeout-ms, x-deadline-ms or SDK timeout): the route's default applied, by caller",
    ),
    (
        "levee_retry_budget_exhausted",
        "Retries refused because the target's retry budget was empty",
    ),
    (
        "levee_rejected",
        "Requests Levee answered itself, by reason",
    ),
    (
        "levee_circuit_state",
        "Circuit breaker state per provider (model=\"\") and per model: 0 closed, 1 open, 2 half-open, 3 recovering (closed, ramping back: refusing above 1.4x the rate before the trip)",
    ),
    (
        "levee_admitted_fraction",
        "Fraction of attempts a model admits now: 1 unless it fails more than error_ratio of what it is sent and is believed overloaded (or all but down); 0 while its breaker is open, but for probes",
    ),
    (
        "levee_circuit_belief",
        "What Levee believes a model's faults are: 1 on the belief in force (loss: random, refusing does not help; overload: faults come with load)",
    ),
    (
        "levee_in_flight",
        "Upstream attempts in flight",
    ),
    (
        "levee_caller_retries",
        "Requests that a caller layer retried (x-stainless-retry-count > 0 or a repeated idempotency key)",
    ),
    (
        "levee_upstream_pool_wait_seconds",
        "Time an attempt waited for one of its provider's max_connections to come free (HTTP/1; the first warning sign of a provider slowing down)",
    ),
    (
        "levee_upstream_connect_seconds",
        "Time for an attempt to obtain an upstream connection: the wait for a pooled one, or a new connect plus TLS",
    ),
    (
        "levee_time_to_first_byte_seconds",
        "Time from request arrival to the first body byte sent to the caller",
    ),
    (
        "levee_streams_failed",
        "Streams ended by an upstream failure after the first byte",
    ),
    (
        "levee_fallbacks",
        "Attempts sent to a later target, by route and why: the previous attempt's result, or primary_ and what refused the primary without an attempt (primary_circuit_open, primary_throttled, primary_rate_limited, primary_circuit_recovering, primary_shed, primary_budget_exhausted), or untranslatable when the primary cannot carry the request",
    ),
    (
        "levee_idempotency_replayed",
        "Responses answered from the idempotency store",
    ),
    (
        "levee_state_fallback",
        "Shared-state operations served locally because Redis was slow or down",
    ),
    (
        "levee_spend_usd",
        "US dollars the providers bill for the tokens answers used, where the model's price is known (prices: in the config, else the built-in list price); outcome says whether the answer reached its caller",
    ),
    (
        "levee_state_replicas",
        "Live replicas sharing the state store, counted by their leases in Redis (each enforces 1/N of every allowance while Redis is unreachable)",
    ),
    (
        "levee_idempotency_local",
        "Keyed requests answered without consulting the shared store (not deduplicated across replicas)",
    ),
    (
        "levee_tokens",
        "Tokens the providers' answers reported using (usage), by route, provider, model, caller and kind (input or output)",
    ),
    (
        "levee_allowance_remaining",
        "What Levee holds left of each provider account's allowance per meter (requests, tokens, input_tokens, output_tokens), per minute: the minute's allowance times how full Levee's bucket is (its own count, lowered by what the provider reports)",
    ),
    (
        "levee_allowance_limit",
        "Each provider account's allowance per meter, per minute (requests and tokens alike)",
    ),
    (
        "levee_allowance_share_used",
        "Each caller's use of a provider's meter per second, over the last ten seconds (callers with a share)",
    ),
    (
        "levee_allowance_share",
        "Each caller's share of a provider's meter per second now (its weight over the callers active in the last minute)",
    ),
    (
        "levee_translation_refused",
        "Requests a target of the other dialect could not carry, where that changed where the request went (the planner chose the target and passed it over, or no target could take it), by route, provider and reason",
    ),
];

/// Registers `metric` under `name` with its help text from [`HELP`].
fn reg<M: Metric + Clone>(registry: &mut Registry, name: &str, metric: M) -> M {
    let help = HELP
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, h)| *h);
    registry.register(name, help, metric.clone());
    metric
}

/// A histogram whose `n` buckets start at `first` seconds and double.
fn doubling(registry: &mut Registry, name: &str, first: f64, n: u16) -> Histogram {
    reg(
        registry,
        name,
        Histogram::new(exponential_buckets(first, 2.0, n)),
    )
}

impl Metrics {
    /// Registers everything.
    pub fn new() -> Self {
        let mut r = Registry::default();
        Metrics {
            request_handles: Handles::default(),
            attempt_handles: Handles::default(),
            reject_handles: Handles::default(),
            fallback_handles: Handles::default(),
            requests: reg(&mut r, "levee_requests", Family::default()),
            upstream_attempts: reg(&mut r, "levee_upstream_attempts", Family::default()),
            // 0: answered without any attempt (shed, rate limited, breaker open).
            attempts_per_request: reg(
                &mut r,
                "levee_attempts_per_request",
                Histogram::new([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 12.0, 27.0]),
            ),
            added_latency: doubling(&mut r, "levee_added_latency_seconds", 0.000_01, 20),
            request_duration: doubling(&mut r, "levee_request_duration_seconds", 0.005, 16),
            deadline_remaining_at_dispatch: reg(
                &mut r,
                "levee_deadline_remaining_at_dispatch_seconds",
                Family::new_with_constructor(deadline_buckets as fn() -> Histogram),
            ),
            no_deadline: reg(&mut r, "levee_requests_without_deadline", Family::default()),
            no_deadline_handles: KeyedSeries::default(),
            budget_exhausted: reg(&mut r, "levee_retry_budget_exhausted", Family::default()),
            rejected: reg(&mut r, "levee_rejected", Family::default()),
            circuit_state: reg(&mut r, "levee_circuit_state", Family::default()),
            admitted_fraction: reg(&mut r, "levee_admitted_fraction", Family::default()),
            circuit_belief: reg(&mut r, "levee_circuit_belief", Family::default()),
            in_flight: reg(&mut r, "levee_in_flight", Family::default()),
            caller_retries: reg(&mut r, "levee_caller_retries", Counter::default()),
            upstream_connect: doubling(&mut r, "levee_upstream_connect_seconds", 0.000_05, 16),
            upstream_pool_wait: doubling(&mut r, "levee_upstream_pool_wait_seconds", 0.000_05, 16),
            time_to_first_byte: doubling(&mut r, "levee_time_to_first_byte_seconds", 0.001, 16),
            streams_failed: reg(&mut r, "levee_streams_failed", Family::default()),
            fallbacks: reg(&mut r, "levee_fallbacks", Family::default()),
            replayed: reg(&mut r, "levee_idempotency_replayed", Counter::default()),
            state_fallbacks: reg(&mut r, "levee_state_fallback", Family::default()),
            state_replicas: reg(&mut r, "levee_state_replicas", Gauge::default()),
            idempotency_local: reg(&mut r, "levee_idempotency_local", Counter::default()),
            translation_refused: reg(&mut r, "levee_translation_refused", Family::default()),
            tokens: reg(&mut r, "levee_tokens", Family::default()),
            spend: reg(&mut r, "levee_spend_usd", Family::default()),
            spend_handles: KeyedSeries::default(),
            token_handles: KeyedSeries::default(),
            allowance_remaining: reg(&mut r, "levee_allowance_remaining", Family::default()),
            allowance_limit: reg(&mut r, "levee_allowance_limit", Family::default()),
            allowance_share_used: reg(&mut r, "levee_allowance_share_used", Family::default()),
            allowance_share: reg(&mut r, "levee_allowance_share", Family::default()),
            registry: r,
        }
    }

    /// Adds a request's `input` and `output` tokens to the series `key`
    /// names; `labels` makes their labels (`kind` `input`, then `output`)
    /// the first time only (a request's path builds no strings for them).
    pub fn tokens(
        &self,
        key: TokensKey,
        input: u64,
        output: u64,
        labels: impl Fn(&'static str) -> TokensLabel,
    ) {
        let kinds = ["input", "output"];
        self.token_handles.with(
            &self.tokens,
            key,
            |i| labels(kinds[i]),
            |[i, o]| {
                i.0.inc_by(input);
                o.0.inc_by(output);
            },
        );
    }

    /// Adds `usd` to the spend series `key`.
    pub fn spend(&self, key: TokensKey, usd: f64, labels: impl Fn() -> SpendLabel) {
        self.spend_handles.with(
            &self.spend,
            key,
            |_| labels(),
            |[c]| {
                c.0.inc_by(usd);
            },
        );
    }

    /// A request of the caller with label id `caller` arrived with no
    /// deadline; `name` makes its label the first time.
    pub(crate) fn no_deadline(&self, caller: u32, name: impl Fn() -> String) {
        let labels = |_| CallerOnly { caller: name() };
        self.no_deadline_handles
            .with(&self.no_deadline, caller, labels, |[c]| {
                c.0.inc();
            });
    }

    /// The caller in label slot `slot` gave up its name `old`: its token,
    /// spend and no-deadline series are removed (the label keeps N names
    /// and `other`).
    pub(crate) fn forget_caller(&self, slot: usize, old: &str) {
        let was = |id: u32, caller: &str| (id as usize & 0xffff) == slot && caller == old;
        self.no_deadline_handles
            .forget(&self.no_deadline, |k, l| was(*k, &l.caller));
        self.token_handles
            .forget(&self.tokens, |k, l| was(k.3, &l.caller));
        self.spend_handles
            .forget(&self.spend, |k, l| was(k.3, &l.caller));
    }

    /// Counts one finished logical request.
    pub(crate) fn request(&self, route: &str, outcome: RequestOutcome) {
        let outcome = outcome.label();
        self.request_handles.inc(route, outcome, || {
            self.requests
                .get_or_create(&RouteOutcome {
                    route: route.to_string(),
                    outcome: outcome.to_string(),
                })
                .clone()
        });
    }

    /// Counts one upstream attempt's result.
    pub(crate) fn attempt(&self, provider: &str, result: AttemptResult) {
        let result = result.label();
        self.attempt_handles.inc(provider, result, || {
            self.upstream_attempts
                .get_or_create(&ProviderResult {
                    provider: provider.to_string(),
                    result: result.to_string(),
                })
                .clone()
        });
    }

    /// Counts a rejection.
    pub(crate) fn reject(&self, reason: impl Into<Why>) {
        let reason = reason.into().as_str();
        self.reject_handles.inc(reason, "", || {
            self.rejected
                .get_or_create(&ReasonLabel {
                    reason: reason.to_string(),
                })
                .clone()
        });
    }

    /// Counts an attempt sent to a later target of `route`, and why.
    pub(crate) fn fallback(&self, route: &str, reason: FallbackReason) {
        let reason = reason.label();
        self.fallback_handles.inc(route, reason, || {
            self.fallbacks
                .get_or_create(&RouteReason {
                    route: route.to_string(),
                    reason: reason.to_string(),
                })
                .clone()
        });
    }

    /// Counts a request a target could not carry across dialects.
    pub(crate) fn translation_refused(&self, route: &str, provider: &str, reason: SkipReason) {
        self.translation_refused
            .get_or_create(&RouteProviderReason {
                route: route.to_string(),
                provider: provider.to_string(),
                reason: reason.label().to_string(),
            })
            .inc();
    }

    /// Prometheus text exposition (format 0.0.4, which every scraper and
    /// `promtool check metrics` accept).
    pub fn encode(&self) -> String {
        let mut om = String::new();
        if prometheus_client::encoding::text::encode(&mut om, &self.registry).is_err() {
            om.clear();
        }
        openmetrics_to_prometheus(&om)
    }
}

/// prometheus-client writes OpenMetrics, where a counter family `x` has
/// samples `x_total`; the classic text format wants the family named `x_total`
/// too, and has no `# EOF` or `# UNIT` lines.
pub fn openmetrics_to_prometheus(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = line
            .strip_prefix("# HELP ")
            .map(|r| ("# HELP ", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        if let Some((kind, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(name) {
                out.push_str(kind);
                out.push_str(name);
                out.push_str("_total ");
                out.push_str(tail);
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_registered_with_its_help_text() {
        let names: std::collections::HashSet<&str> = HELP.iter().map(|(n, _)| *n).collect();
        assert_eq!(names.len(), HELP.len(), "a name twice");
        let m = Metrics::new();
        m.request("r", RequestOutcome::Success);
        let text = m.encode();
        for name in [
            "levee_requests",
            "levee_caller_retries",
            "levee_added_latency_seconds",
        ] {
            let (_, help) = HELP.iter().find(|(n, _)| *n == name).unwrap();
            assert!(text.contains(help), "{name} has no help: {text}");
        }
    }

    #[test]
    fn counters_are_named_with_total_and_eof_is_dropped() {
        let m = Metrics::new();
        m.request("r", RequestOutcome::Success);
        let text = m.encode();
        assert!(
            text.contains("# TYPE levee_requests_total counter"),
            "{text}"
        );
        assert!(text.contains("levee_requests_total{route=\"r\",outcome=\"success\"} 1"));
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn cached_handles_count_into_the_exported_families() {
        let m = Metrics::new();
        for _ in 0..3 {
            m.request("r", RequestOutcome::Success);
            m.attempt("p", AttemptResult::Success);
            m.reject(levee_policy::Reason::Shed);
        }
        m.request("r", RequestOutcome::from(levee_policy::Reason::Shed));
        m.request("r2", RequestOutcome::Success);
        m.attempt("p", AttemptResult::Timeout);
        m.reject(Why::NoRoute);
        // Counted before the first cached call, through the family itself.
        m.requests
            .get_or_create(&RouteOutcome {
                route: "r".into(),
                outcome: "success".into(),
            })
            .inc();
        let text = m.encode();
        for line in [
            "levee_requests_total{route=\"r\",outcome=\"success\"} 4",
            "levee_requests_total{route=\"r\",outcome=\"shed\"} 1",
            "levee_requests_total{route=\"r2\",outcome=\"success\"} 1",
            "levee_upstream_attempts_total{provider=\"p\",result=\"success\"} 3",
            "levee_upstream_attempts_total{provider=\"p\",result=\"timeout\"} 1",
            "levee_rejected_total{reason=\"shed\"} 3",
            "levee_rejected_total{reason=\"no_route\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn a_requests_tokens_count_into_their_kinds_and_leave_with_their_caller() {
        let m = Metrics::new();
        let labels = |caller: &str, outcome| {
            let caller = caller.to_string();
            move |kind| TokensLabel {
                route: "r".into(),
                provider: "p".into(),
                model: "m".into(),
                caller: caller.clone(),
                kind,
                outcome,
            }
        };
        m.tokens((0, 0, 0, 1, true), 3, 5, labels("a", "delivered"));
        m.tokens((0, 0, 0, 1, true), 30, 50, labels("a", "delivered"));
        m.tokens((0, 0, 0, 1, false), 7, 11, labels("a", "undelivered"));
        m.tokens((0, 0, 0, 2, true), 1, 2, labels("b", "delivered"));
        let text = m.encode();
        let series = |caller: &str, kind: &str, outcome: &str| {
            format!(
                "levee_tokens_total{{route=\"r\",provider=\"p\",model=\"m\",caller=\"{caller}\",kind=\"{kind}\",outcome=\"{outcome}\"}}"
            )
        };
        for (caller, kind, outcome, n) in [
            ("a", "input", "delivered", 33),
            ("a", "output", "delivered", 55),
            ("a", "input", "undelivered", 7),
            ("a", "output", "undelivered", 11),
            ("b", "input", "delivered", 1),
            ("b", "output", "delivered", 2),
        ] {
            let line = format!("{} {n}", series(caller, kind, outcome));
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        m.forget_caller(1, "a");
        let text = m.encode();
        assert!(!text.contains("caller=\"a\""), "{text}");
        assert!(text.contains(&series("b", "output", "delivered")), "{text}");
    }

    #[test]
    fn promtool_accepts_the_exposition() {
        let Ok(mut child) = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
        else {
            assert!(
                std::env::var_os("LEVEE_REQUIRE_PROMTOOL").is_none(),
                "promtool is required (scripts/test installs it) but was not found"
            );
            eprintln!("promtool not installed: skipping its check (scripts/test installs it)");
            return;
        };
        let m = Metrics::new();
        m.request("r", RequestOutcome::Success);
        m.attempt("p", AttemptResult::Success);
        m.reject(levee_policy::Reason::Shed);
        m.caller_retries.inc();
        m.added_latency.observe(0.0001);
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write;
            stdin.write_all(m.encode().as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "promtool: {said}");
        assert!(said.trim().is_empty(), "promtool: {said}");
    }
}
