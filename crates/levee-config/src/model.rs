//! The validated configuration's parts. Each holds the policy core's own
//! objects, already built and checked, so the gateway and the simulator use
//! them as they are: nothing downstream validates or defaults again.

use crate::platform::Platform;
use crate::values::{Api, Http2, OnUnavailable};
use levee_policy::admission::Gcra;
use levee_policy::deadline::DeadlinePolicy;
use levee_policy::planner::RoutePolicy;
use levee_policy::{CircuitBreaker, ProviderState, RetryBudget};
use std::time::Duration;

/// A provider, validated.
#[derive(Clone, Debug)]
pub struct Provider {
    pub name: String,
    /// The wire dialect requests are written in (a cloud kind's included).
    pub api: Api,
    /// Where the provider runs: its own API, or a cloud that serves the
    /// dialect under its own URLs and auth.
    pub platform: Platform,
    /// `scheme://authority` plus an optional path prefix (no trailing slash).
    pub base_url: http::Uri,
    pub api_key_env: Option<String>,
    /// Upstream attempts in flight above which Levee sheds (`u32::MAX`: no
    /// cap of the provider's own); where it comes from is `max_in_flight_from`.
    pub max_in_flight: u32,
    pub max_in_flight_from: InFlightCap,
    /// `(requests_per_minute, burst)`.
    pub rate_limit: Option<(u32, u32)>,
    /// Every meter of `rate_limit` (requests and tokens).
    pub limits: levee_policy::allowance::Limits,
    /// The callers' weights (`callers[].share`) in the callers' order;
    /// empty when no caller has a share.
    pub shares: Vec<f64>,
    /// The allowance `rate_limit` describes, built.
    pub allowance: Option<Gcra>,
    /// Every fault domain of the provider (each model it is sent, and the
    /// provider as a whole) starts from a copy of this breaker.
    pub breaker: CircuitBreaker,
    pub connect_timeout: Duration,
    /// Which HTTP version Levee speaks to the provider.
    pub http2: Http2,
    /// The most streams Levee puts on one HTTP/2 connection before it opens
    /// another (never more than the provider's own
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`).
    pub http2_max_streams: u32,
    /// The fraction taken off every price of its models (0: none).
    pub discount: f64,
    /// The most HTTP/1 connections open to it at once (`max_connections`).
    pub max_connections: u32,
    /// The retries a second each of its models is sent whatever the
    /// successes, shared by every route that sends to it: the largest
    /// `retry.budget.min_per_second` of those routes (`None`: all 0).
    pub retry_floor: Option<RetryBudget>,
    /// How the key from `api_key_env` is sent (the dialect's own way when
    /// not written: `bearer` for OpenAI, `header x-api-key` for Anthropic).
    pub auth: crate::values::Auth,
    /// Extra header fields for every request, lower-case names.
    pub headers: Vec<(String, crate::values::ValueSource)>,
    /// Query parameters added to every request URI.
    pub query: Vec<(String, crate::values::ValueSource)>,
    /// Whose list prices its models have, from `platform`, `api` and
    /// `base_url`'s host: set wherever those are.
    pub(crate) list_vendor: Option<crate::platform::Vendor>,
}

impl Provider {
    /// Fresh runtime state for this provider.
    pub fn new_state(&self) -> ProviderState {
        let state = ProviderState::new(self.breaker.clone(), None, self.max_in_flight)
            .with_allowance(
                levee_policy::allowance::Allowance::new(self.limits).with_shares(&self.shares),
            );
        self.with_floor(state)
    }

    fn with_floor(&self, state: ProviderState) -> ProviderState {
        match &self.retry_floor {
            Some(floor) => state.with_retry_floor(floor.clone()),
            None => state,
        }
    }

    /// Fresh runtime state without the configured meters (they are
    /// enforced elsewhere: shared across replicas); its shares stay, and
    /// the meters the provider reports are still learned.
    pub fn new_state_without_allowance(&self) -> ProviderState {
        let limits = levee_policy::allowance::Limits::default();
        let state = ProviderState::new(self.breaker.clone(), None, self.max_in_flight)
            .with_allowance(
                levee_policy::allowance::Allowance::new(limits).with_shares(&self.shares),
            );
        self.with_floor(state)
    }
}

/// Where a provider's `max_in_flight` comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InFlightCap {
    /// Written in the config.
    Configured,
    /// Not written: what the allowance can have in flight while every attempt
    /// takes the longest `expected_attempt_ms` of the provider's targets —
    /// Little's law, rate × time (3,000 a minute for 6 s each is 300) — plus
    /// the burst. More than that in flight means attempts run longer than
    /// expected: the provider is slowing down, and shedding is right.
    Derived {
        requests_per_minute: u32,
        burst: u32,
        expected_attempt: Duration,
    },
    /// Neither `max_in_flight` nor `rate_limit`: nothing to size a cap from,
    /// so the provider has none of its own; the bulkheads (`max_in_flight`)
    /// of the routes that use it bound what Levee sends it.
    None,
}

/// The in-flight cap the allowance implies (see [`InFlightCap::Derived`]).
pub fn derived_max_in_flight(requests_per_minute: u32, burst: u32, expected: Duration) -> u32 {
    let ms = u64::try_from(expected.as_millis()).unwrap_or(u64::MAX);
    let in_flight = u64::from(requests_per_minute)
        .saturating_mul(ms)
        .div_ceil(60_000);
    u32::try_from(in_flight.saturating_add(u64::from(burst))).unwrap_or(u32::MAX)
}

/// One route target: a provider alone, or a member of a balanced group.
#[derive(Clone, Debug)]
pub struct Target {
    /// Index into [`crate::Config::providers`].
    pub provider: usize,
    /// Model name to send instead of the caller's (none: the caller's, a
    /// route prefix that ends at a separator removed).
    pub model: Option<String>,
    pub expected_attempt: Duration,
    /// The balanced group it is a member of: an index into
    /// [`Route::policy`]'s groups.
    pub group: Option<usize>,
    /// Its weight in its group (1 outside one).
    pub weight: f64,
}

/// How a route matches a request: exact model names, or a model prefix,
/// or neither (every model); and optionally one endpoint.
#[derive(Clone, Debug, Default)]
pub struct Match {
    /// Exact model names (`match.model` and `match.models`); empty: none.
    pub models: Vec<String>,
    pub model_prefix: Option<String>,
    pub path: Option<String>,
}

impl Match {
    /// Whether a request to `path` for `model` matches.
    pub fn matches(&self, path: &str, model: &str) -> bool {
        let model_ok = match self.is_exact() {
            true => self.models.iter().any(|m| m == model),
            false => self
                .model_prefix
                .as_deref()
                .is_none_or(|p| model.starts_with(p)),
        };
        model_ok && self.path.as_deref().is_none_or(|p| p == path)
    }

    /// Whether it matches exact names (which win over prefixes, wherever
    /// they stand in the file).
    pub fn is_exact(&self) -> bool {
        !self.models.is_empty()
    }

    /// The route's model prefix, when it has a non-empty one.
    pub fn prefix(&self) -> Option<&str> {
        self.model_prefix.as_deref().filter(|p| !p.is_empty())
    }

    /// Whether the prefix ends at a separator (`/` or `:`): removed from
    /// every model it matches.
    pub fn ends_at_separator(&self) -> bool {
        self.prefix().is_some_and(|p| p.ends_with(['/', ':']))
    }

    /// The prefix removed from the caller's model before it goes upstream:
    /// the route's prefix when it ends at a separator (`/` or `:`), with
    /// the separator that follows it in `model` when it does not end in
    /// one itself (`openai` for `openai/gpt-4o`); else nothing (`claude-`
    /// leaves `claude-sonnet-4-5` whole).
    pub fn strip<'a>(&self, model: &'a str) -> &'a str {
        let Some(p) = self.prefix() else {
            return model;
        };
        let Some(rest) = model.strip_prefix(p) else {
            return model;
        };
        if self.ends_at_separator() {
            return rest;
        }
        rest.strip_prefix(['/', ':']).unwrap_or(model)
    }
}

/// A route, validated.
#[derive(Clone, Debug)]
pub struct Route {
    /// A human name: its match, for logs and metric labels.
    pub name: String,
    pub matcher: Match,
    pub targets: Vec<Target>,
    pub deadline: DeadlinePolicy,
    pub policy: RoutePolicy,
    /// A fresh retry budget; each target gets a copy.
    pub budget: RetryBudget,
    pub max_in_flight: u32,
    pub first_byte_timeout: Option<Duration>,
    pub stream_idle_timeout: Duration,
    /// `policy` with one attempt per target: for a pass-through request
    /// whose method is not idempotent, which is never sent twice.
    pub once: RoutePolicy,
    /// Provider paths carried unchanged besides the endpoints Levee serves
    /// itself: each exact, or a prefix when it ends in `/`.
    pub passthrough: Vec<String>,
    /// The methods the passthrough paths take (default `GET`, `POST`,
    /// `DELETE`); another is a 405.
    pub passthrough_methods: Vec<http::Method>,
    /// What a target that cannot carry a request does with it.
    pub on_untranslatable: crate::values::OnUntranslatable,
    /// How many targets the route's first entry has: 1, or its balanced
    /// group's members (the traffic that is the route's own, not fallback).
    pub first_entry: usize,
}

impl Route {
    /// The id of the object a request to `path` names, when `path` goes
    /// on past one of the route's `passthrough` prefixes: the segment right
    /// after it (`file-abc` in `/v1/files/file-abc/content` under
    /// `/v1/files/`).
    pub fn passthrough_object<'a>(&self, path: &'a str) -> Option<&'a str> {
        self.passthrough
            .iter()
            .filter(|p| p.ends_with('/'))
            .find_map(|p| path.strip_prefix(p.as_str()))
            .and_then(|rest| rest.split('/').next())
            .filter(|id| !id.is_empty())
    }

    /// The template of the `passthrough` path `path` is, for logs: an
    /// exact entry as it is (`/v1/files`), a prefix with the object's id
    /// as `{id}` (`/v1/batches/{id}/cancel` for `/v1/batches/b1/cancel`).
    pub fn passthrough_template(&self, path: &str) -> Option<String> {
        self.passthrough.iter().find_map(|p| {
            if !p.ends_with('/') {
                return (path == p).then(|| p.clone());
            }
            let rest = path.strip_prefix(p.as_str()).filter(|r| !r.is_empty())?;
            let after = rest.find('/').map_or("", |i| &rest[i..]);
            Some(format!("{p}{{id}}{after}"))
        })
    }

    /// Whether `path` is one of the route's `passthrough` paths.
    pub fn passes_through(&self, path: &str) -> bool {
        self.passthrough.iter().any(|p| match p.ends_with('/') {
            true => path.starts_with(p.as_str()) && path.len() > p.len(),
            false => path == p,
        })
    }

    /// The policy for a request: `once` for one that may not be sent twice.
    pub fn policy_for(&self, once: bool) -> &RoutePolicy {
        match once {
            true => &self.once,
            false => &self.policy,
        }
    }

    /// The model to send to target `t` for a caller's `model`: the
    /// target's own, else the caller's (see [`Match::strip`]).
    pub fn rewrite_model<'a>(&'a self, t: usize, model: &'a str) -> &'a str {
        if let Some(m) = self.targets.get(t).and_then(|t| t.model.as_deref()) {
            return m;
        }
        self.matcher.strip(model)
    }

    /// Whether target `t` is in the route's first entry: the primary, or a
    /// member of a balanced group in first place.
    pub fn is_primary(&self, t: usize) -> bool {
        t < self.first_entry
    }
}

/// A caller, for the census.
#[derive(Clone, Debug)]
pub struct Caller {
    pub name: String,
    /// Its client's timeout (`None`: not given, not judged).
    pub deadline: Option<Duration>,
    /// Its weight in each provider's allowance and in-flight cap (`None`:
    /// 1 when any caller has a share; no shares when none has).
    pub share: Option<f64>,
    pub priority: levee_policy::allowance::Priority,
    /// Relies on the fallback alone (`levee check --strict` does not ask
    /// its retry to start).
    pub fallback_only: bool,
}

/// What one caller may do: from its `callers:` entry or its keys'.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallerRules {
    /// The caller's name (a key's, or its `x-levee-caller`).
    pub name: String,
    /// The models it may ask for (`None`: any). An entry ending in `*`
    /// allows every name beginning with what is before it.
    pub models: Option<Vec<String>>,
    /// Its limits per minute and its budget.
    pub spend: levee_policy::spend::Rules,
}

impl CallerRules {
    /// Whether the caller may ask for `model`.
    pub fn allows(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|list| {
            list.iter().any(|m| match m.strip_suffix('*') {
                Some(prefix) => model.starts_with(prefix),
                None => m == model,
            })
        })
    }
}

/// An accepted caller key.
#[derive(Clone, Debug)]
pub enum CallerKey {
    /// The sha256 of the key, decoded from the config's hex.
    Sha256 { name: String, digest: [u8; 32] },
    /// The key itself, read from this environment variable at start.
    Env { name: String, var: String },
    /// A key pair for AWS Signature Version 4: requests signed with the
    /// secret access key read from `var` (the AWS SDKs' and boto3's way to
    /// authenticate) carry this caller's name.
    Signing {
        name: String,
        access_key_id: String,
        var: String,
    },
}

impl CallerKey {
    /// The caller's name: what logs, metrics and the allowance call it.
    pub fn name(&self) -> &str {
        match self {
            CallerKey::Sha256 { name, .. }
            | CallerKey::Env { name, .. }
            | CallerKey::Signing { name, .. } => name,
        }
    }
}

/// Request limits against hostile or broken clients.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_body_bytes: u64,
    pub max_header_bytes: usize,
    pub header_read_timeout: Duration,
    /// Longest a client may take to send its body once the headers are in.
    pub body_read_timeout: Duration,
    /// The most caller names (from `x-levee-caller`, and `anonymous`)
    /// metrics keep as labels; the rest are `other`.
    pub caller_names: usize,
}

impl Default for Limits {
    /// 10 MiB bodies, 64 KiB of headers, 10 s for the headers, 30 s for the body.
    fn default() -> Self {
        Limits {
            max_body_bytes: 10 * 1024 * 1024,
            max_header_bytes: 64 * 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            caller_names: 64,
        }
    }
}

/// Idempotency store settings.
#[derive(Clone, Copy, Debug)]
pub struct IdempotencySettings {
    pub ttl: Duration,
    /// Most keys held (in flight or answered), shared fairly among callers.
    pub max_entries: usize,
    /// Most bytes of stored answers, shared fairly among callers; an answer
    /// larger than a quarter of this is delivered but not stored.
    pub max_bytes: u64,
}

impl Default for IdempotencySettings {
    /// Keys live 10 minutes; at most 100,000 of them and 64 MiB of answers.
    fn default() -> Self {
        IdempotencySettings {
            ttl: Duration::from_secs(600),
            max_entries: 100_000,
            max_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Where shared state lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateBackend {
    Memory,
    Redis {
        url: String,
        key_prefix: String,
        replicas: u32,
        timeout: Duration,
        on_unavailable: OnUnavailable,
        /// The most bytes of stored answers the shared store holds, over
        /// every replica and caller.
        max_bytes: u64,
        /// How to reach it beyond the URL: TLS files, a password.
        connect: Box<RedisConnect>,
    },
}

/// How Redis is deployed (`state.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RedisMode {
    /// One server at `state.url`.
    #[default]
    Standalone,
    /// A Redis Cluster found from the seed `state.nodes`.
    Cluster,
    /// A primary the sentinels at `state.nodes` name for `sentinel_master`.
    Sentinel,
}

impl<'de> serde::Deserialize<'de> for RedisMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::values::one_of(
            d,
            "state.mode",
            &[
                ("standalone", RedisMode::Standalone),
                ("cluster", RedisMode::Cluster),
                ("sentinel", RedisMode::Sentinel),
            ],
        )
    }
}

/// How Levee reaches Redis beyond its URL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedisConnect {
    /// How Redis is deployed.
    pub mode: RedisMode,
    /// A cluster's seed nodes, or the sentinels (Redis URLs).
    pub nodes: Vec<String>,
    /// The primary's name the sentinels know.
    pub sentinel_master: Option<String>,
    /// TLS settings (the URL is `rediss://`).
    pub tls: Option<RedisTls>,
    /// The variable holding the password (read at start, never printed).
    pub password_env: Option<String>,
}

/// TLS to Redis: a private CA, and a client certificate for mutual TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// PEM certificates trusted for the server (else the public web PKI).
    pub ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate chain and key, together.
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// Where traces go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Telemetry {
    /// An OTLP/HTTP collector (`http://host:4318`, no path): spans are sent
    /// as protobuf to `{otlp_endpoint}/v1/traces`. `None`: no traces.
    pub otlp_endpoint: Option<String>,
}
