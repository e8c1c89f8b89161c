//! Levee's configuration: the YAML a user writes, turned into typed, validated
//! values that build the policy core's objects.
//!
//! Two stages, as in ripgrep: [`raw`] is exactly what the user typed (serde,
//! unknown keys refused), then [`Config::from_raw`] resolves defaults, checks
//! every rule and names the key and line of whatever is wrong. Once a
//! [`Config`] exists it is valid. This crate does no I/O except
//! [`Config::load`] reading the file; it knows nothing about sockets.
#![forbid(unsafe_code)]

pub mod duration;
pub mod locate;
pub mod raw;

use levee_policy::admission::Gcra;
use levee_policy::backoff::{Backoff, Jitter};
use levee_policy::classify::{Classifier, RetryOn};
use levee_policy::deadline::DeadlinePolicy;
use levee_policy::planner::RoutePolicy;
use levee_policy::{CircuitBreaker, ProviderState, RetryBudget};
use locate::{locate, Seg};
use raw::*;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

pub use duration::parse_duration;

/// A configuration error, with the line it concerns when known.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config line {line}: {message}")]
    AtLine { line: usize, message: String },
    #[error("config: {0}")]
    General(String),
}

impl ConfigError {
    fn at(text: &str, path: &[Seg<'_>], message: impl Into<String>) -> Self {
        let message = message.into();
        match locate(text, path) {
            Some(line) => ConfigError::AtLine { line, message },
            None => ConfigError::General(message),
        }
    }
}

/// A provider's wire dialect and auth style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `x-api-key`, `/v1/messages`.
    Anthropic,
    /// `Authorization: Bearer`, `/v1/chat/completions`.
    OpenAi,
}

/// A provider, validated.
#[derive(Clone, Debug)]
pub struct Provider {
    pub name: String,
    pub api: Api,
    /// `scheme://authority` plus an optional path prefix (no trailing slash).
    pub base_url: http::Uri,
    pub api_key_env: Option<String>,
    /// Upstream attempts in flight above which Levee sheds (`u32::MAX`: no
    /// cap of the provider's own); where it comes from is `max_in_flight_from`.
    pub max_in_flight: u32,
    pub max_in_flight_from: InFlightCap,
    pub rate_limit: Option<(u32, u32)>,
    pub breaker: BreakerSettings,
    pub connect_timeout: Duration,
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

/// A route's bulkhead when the config sets none.
pub const DEFAULT_ROUTE_MAX_IN_FLIGHT: u32 = 1024;

/// The in-flight cap the allowance implies (see [`InFlightCap::Derived`]).
pub fn derived_max_in_flight(requests_per_minute: u32, burst: u32, expected: Duration) -> u32 {
    let ms = u64::try_from(expected.as_millis()).unwrap_or(u64::MAX);
    let in_flight = u64::from(requests_per_minute)
        .saturating_mul(ms)
        .div_ceil(60_000);
    u32::try_from(in_flight.saturating_add(u64::from(burst))).unwrap_or(u32::MAX)
}

/// Circuit-breaker settings: every fault domain of a provider (each model it
/// is sent, and the provider as a whole) gets a [`CircuitBreaker`] built from
/// them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BreakerSettings {
    pub error_ratio: f64,
    pub window: Duration,
    pub min_requests: u32,
    pub open_for: Duration,
    pub half_open_probes: u32,
    pub probe_interval: Duration,
}

impl BreakerSettings {
    /// The breaker these settings describe.
    pub fn build(&self) -> Result<CircuitBreaker, levee_policy::breaker::BreakerError> {
        CircuitBreaker::new(
            self.error_ratio,
            self.window,
            self.min_requests,
            self.open_for,
            self.half_open_probes,
        )?
        .with_probe_interval(self.probe_interval)
    }
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            error_ratio: 0.5,
            window: Duration::from_secs(10),
            min_requests: 20,
            open_for: Duration::from_secs(5),
            half_open_probes: 3,
            probe_interval: levee_policy::breaker::DEFAULT_PROBE_INTERVAL,
        }
    }
}

impl Provider {
    /// Fresh runtime state for this provider.
    pub fn new_state(&self) -> ProviderState {
        self.state_with(true)
    }

    /// Fresh runtime state without the local allowance (it is enforced
    /// elsewhere, e.g. shared across replicas).
    pub fn new_state_without_allowance(&self) -> ProviderState {
        self.state_with(false)
    }

    fn state_with(&self, allowance: bool) -> ProviderState {
        // Validated when the config was built.
        let breaker = self
            .breaker
            .build()
            .unwrap_or_else(|_| CircuitBreaker::default_policy());
        let allowance = self
            .rate_limit
            .filter(|_| allowance)
            .and_then(|(rpm, burst)| Gcra::per_minute(rpm, burst).ok());
        ProviderState::new(breaker, allowance, self.max_in_flight)
    }
}

/// Budget settings (a [`RetryBudget`] is built per route target).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetSettings {
    pub ratio: f64,
    pub min_per_second: f64,
    pub window: Duration,
}

impl BudgetSettings {
    /// A fresh budget.
    pub fn new_budget(&self) -> RetryBudget {
        RetryBudget::new(self.ratio, self.min_per_second, self.window)
            .unwrap_or_else(|_| RetryBudget::default_policy())
    }
}

/// One route target.
#[derive(Clone, Debug)]
pub struct Target {
    /// Index into [`Config::providers`].
    pub provider: usize,
    /// Model name to send instead of the caller's (none: strip the route prefix).
    pub model: Option<String>,
    pub expected_attempt: Duration,
}

/// How a route matches a request.
#[derive(Clone, Debug, Default)]
pub struct Match {
    pub model_prefix: Option<String>,
    pub path: Option<String>,
}

impl Match {
    /// Whether a request to `path` for `model` matches.
    pub fn matches(&self, path: &str, model: &str) -> bool {
        self.model_prefix
            .as_deref()
            .is_none_or(|p| model.starts_with(p))
            && self.path.as_deref().is_none_or(|p| p == path)
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
    pub budget: BudgetSettings,
    pub max_in_flight: u32,
    pub first_byte_timeout: Option<Duration>,
    pub stream_idle_timeout: Duration,
}

impl Route {
    /// The model to send to target `t` for a caller's `model`.
    pub fn rewrite_model<'a>(&'a self, t: usize, model: &'a str) -> &'a str {
        if let Some(m) = self.targets.get(t).and_then(|t| t.model.as_deref()) {
            return m;
        }
        match self.matcher.model_prefix.as_deref() {
            Some(p) => model.strip_prefix(p).unwrap_or(model),
            None => model,
        }
    }
}

/// A caller, for the census.
#[derive(Clone, Debug)]
pub struct Caller {
    pub name: String,
    pub deadline: Duration,
}

/// An accepted caller key.
#[derive(Clone, Debug)]
pub enum CallerKey {
    /// Lower-case hex sha256 of the key.
    Sha256 { name: String, hex: String },
    /// The key itself, read from this environment variable at start.
    Env { name: String, var: String },
}

/// Request limits against hostile or broken clients.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_body_bytes: u64,
    pub max_header_bytes: usize,
    pub header_read_timeout: Duration,
    /// Longest a client may take to send its body once the headers are in.
    pub body_read_timeout: Duration,
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

/// The default `idempotency.max_bytes`.
pub const DEFAULT_IDEMPOTENCY_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// What a keyed request does when the shared store cannot be consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnUnavailable {
    /// Run it on this replica's local store (answered with
    /// `x-levee-idempotency: local`).
    #[default]
    Local,
    /// Refuse it: 503, `x-levee-reason: state_unavailable`, never sent.
    Refuse,
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
    },
}

/// A Redis URL as it may be shown: the password (and a user name) replaced
/// by `***`, so no message, log line or `levee check` output carries it.
/// Conservative on malformed input: everything before the last `@` is
/// hidden, and so are query values (`?password=…`).
pub fn redact_url(url: &str) -> String {
    let shown = match url.rfind('@') {
        None => url.to_string(),
        Some(at) => match url.split_once("://") {
            Some((scheme, rest)) if rest.len() > url.len() - at - 1 => {
                format!("{scheme}://***@{}", &url[at + 1..])
            }
            _ => format!("***@{}", &url[at + 1..]),
        },
    };
    match shown.split_once('?') {
        None => shown,
        Some((base, query)) => {
            let names: Vec<&str> = query
                .split('&')
                .map(|p| p.split_once('=').map_or(p, |(n, _)| n))
                .collect();
            format!("{base}?{}=***", names.join("=***&"))
        }
    }
}

/// Checks a `state.url`: `redis://` or `rediss://` with a host, an optional
/// port and database number, or `redis+unix://` / `unix://` with a path.
/// Errors show the URL redacted.
pub fn check_redis_url(url: &str) -> Result<(), String> {
    let shown = redact_url(url);
    let bad = |why: &str| {
        Err(format!(
            "`state.url` `{shown}` is not a Redis URL like `redis://[:password@]host:6379[/db]`: {why}"
        ))
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad("no `scheme://`");
    };
    match scheme {
        "redis+unix" | "unix" => {
            if rest.is_empty() {
                return bad("no socket path");
            }
            return Ok(());
        }
        "redis" | "rediss" => {}
        _ => return bad("the scheme must be redis, rediss, redis+unix or unix"),
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let hostport = authority
        .rfind('@')
        .map_or(authority, |at| &authority[at + 1..]);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return bad("unclosed `[` in the host"),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
    {
        return bad("no valid host");
    }
    if let Some(p) = port {
        if p.parse::<u16>().map_or(true, |p| p == 0) {
            return bad("the port must be a number from 1 to 65535");
        }
    }
    let path = tail.split(['?', '#']).next().unwrap_or("");
    let db = path.trim_start_matches('/');
    if !db.is_empty() && db.parse::<u32>().is_err() {
        return bad("the path must be a database number (`/0`)");
    }
    Ok(())
}

/// A whole, valid configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub shutdown_grace: Duration,
    pub limits: Limits,
    pub providers: Vec<Provider>,
    pub routes: Vec<Route>,
    pub callers: Vec<Caller>,
    pub keys: Vec<CallerKey>,
    pub idempotency: IdempotencySettings,
    pub state: StateBackend,
    /// No providers were configured: routes use the built-in mock provider
    /// (`providers[0]`, whose address the caller fills in).
    pub builtin_mock: bool,
    pub telemetry: Telemetry,
}

/// Where traces go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Telemetry {
    /// An OTLP/HTTP collector (`http://host:4318`, no path): spans are sent
    /// as protobuf to `{otlp_endpoint}/v1/traces`. `None`: no traces.
    pub otlp_endpoint: Option<String>,
}

/// The name of the built-in mock provider.
pub const BUILTIN_MOCK: &str = "mock";

fn addr(
    text: &str,
    path: &[Seg<'_>],
    v: Option<&str>,
    default: &str,
) -> Result<SocketAddr, ConfigError> {
    let s = v.unwrap_or(default);
    s.parse().map_err(|_| {
        ConfigError::at(
            text,
            path,
            format!("`{s}` is not a listen address: write it like `127.0.0.1:8080`"),
        )
    })
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text)
    }

    /// Parses and validates config text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            serde_norway::from_str(text).map_err(|e| {
                let msg = e.to_string();
                // serde_norway appends " at line L column C"; keep the message, move the line up front.
                let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
                match e.location() {
                    Some(loc) => ConfigError::AtLine {
                        line: loc.line(),
                        message: msg,
                    },
                    None => ConfigError::General(msg),
                }
            })?
        };
        Config::from_raw(raw, text)
    }

    /// The configuration used when none is given: every model goes to the
    /// built-in mock provider at `mock` with generous defaults.
    pub fn builtin(mock: SocketAddr) -> Config {
        let mut c = Config::parse("").unwrap_or_else(|_| unreachable_default());
        c.set_builtin_mock_addr(mock);
        c
    }

    /// Points the built-in mock provider at `addr`.
    pub fn set_builtin_mock_addr(&mut self, addr: SocketAddr) {
        if self.builtin_mock {
            if let Some(p) = self.providers.get_mut(0) {
                if let Ok(uri) = format!("http://{addr}").parse() {
                    p.base_url = uri;
                }
            }
        }
    }

    /// Stage two: defaults, validation, line numbers.
    pub fn from_raw(raw: RawConfig, text: &str) -> Result<Config, ConfigError> {
        use Seg::*;
        let listen = addr(
            text,
            &[Key("listen")],
            raw.listen.as_deref(),
            "127.0.0.1:8080",
        )?;
        let admin_listen = addr(
            text,
            &[Key("admin"), Key("listen")],
            raw.admin.as_ref().and_then(|a| a.listen.as_deref()),
            "127.0.0.1:9090",
        )?;
        let limits = Limits {
            max_body_bytes: raw
                .limits
                .as_ref()
                .and_then(|l| l.max_body_bytes)
                .unwrap_or(10 * 1024 * 1024),
            max_header_bytes: raw
                .limits
                .as_ref()
                .and_then(|l| l.max_header_bytes)
                .map(|b| usize::try_from(b).unwrap_or(usize::MAX))
                .unwrap_or(64 * 1024),
            header_read_timeout: raw
                .limits
                .as_ref()
                .and_then(|l| l.header_read_timeout)
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(10)),
            body_read_timeout: raw
                .limits
                .as_ref()
                .and_then(|l| l.body_read_timeout)
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(30)),
        };

        let builtin_mock = raw.providers.is_empty();
        let mut providers = Vec::new();
        if builtin_mock {
            providers.push(Provider {
                name: BUILTIN_MOCK.to_string(),
                api: Api::OpenAi,
                base_url: http::Uri::from_static("http://127.0.0.1:9100"),
                api_key_env: None,
                max_in_flight: 10_000,
                max_in_flight_from: InFlightCap::Configured,
                rate_limit: None,
                breaker: BreakerSettings::default(),
                connect_timeout: Duration::from_secs(2),
            });
        }
        for (name, p) in &raw.providers {
            let at = |key: &'static str, msg: String| {
                ConfigError::at(text, &[Key("providers"), Key(name), Key(key)], msg)
            };
            let api = match p.api.as_str() {
                "anthropic" => Api::Anthropic,
                "openai" => Api::OpenAi,
                other => {
                    return Err(at(
                        "api",
                        format!(
                        "provider `{name}`: `api` must be `anthropic` or `openai` (got `{other}`)"
                    ),
                    ))
                }
            };
            let base_url: http::Uri = p
                .base_url
                .trim_end_matches('/')
                .parse()
                .ok()
                .filter(|u: &http::Uri| {
                    matches!(u.scheme_str(), Some("http") | Some("https")) && u.authority().is_some()
                })
                .ok_or_else(|| {
                    at(
                        "base_url",
                        format!(
                            "provider `{name}`: `base_url` must be an http(s) URL like `https://api.anthropic.com` (got `{}`)",
                            p.base_url
                        ),
                    )
                })?;
            let breaker = breaker_settings(p.circuit_breaker.as_ref(), None)
                .map_err(|m| at("circuit_breaker", format!("provider `{name}`: {m}")))?;
            if let Some(rl) = &p.rate_limit {
                if rl.requests_per_minute == 0 || rl.burst == Some(0) {
                    return Err(at(
                        "rate_limit",
                        format!("provider `{name}`: `requests_per_minute` and `burst` must be at least 1"),
                    ));
                }
            }
            if p.max_in_flight == Some(0) {
                return Err(at(
                    "max_in_flight",
                    format!("provider `{name}`: `max_in_flight` must be at least 1"),
                ));
            }
            providers.push(Provider {
                name: name.clone(),
                api,
                base_url,
                api_key_env: p.api_key_env.clone(),
                // Unset: sized from the allowance once the routes are known.
                max_in_flight: p.max_in_flight.unwrap_or(u32::MAX),
                max_in_flight_from: if p.max_in_flight.is_some() {
                    InFlightCap::Configured
                } else {
                    InFlightCap::None
                },
                rate_limit: p.rate_limit.as_ref().map(|r| {
                    (
                        r.requests_per_minute,
                        r.burst
                            .unwrap_or_else(|| Gcra::default_burst(r.requests_per_minute)),
                    )
                }),
                breaker,
                connect_timeout: p
                    .connect_timeout
                    .map(|d| d.0)
                    .unwrap_or(Duration::from_secs(5)),
            });
        }

        let mut raw_routes = raw.routes;
        if raw_routes.is_empty() {
            // No routes: every model, every path, to the first provider.
            raw_routes.push(RawRoute {
                matcher: None,
                targets: None,
                deadline: None,
                expected_attempt_ms: None,
                retry: None,
                circuit_breaker: None,
                max_in_flight: None,
                attempt_timeout: None,
                first_byte_timeout: None,
                stream_idle_timeout: None,
            });
        }
        let mut routes = Vec::new();
        let mut breakers = RouteBreakers {
            declared: providers.iter().map(|p| p.breaker).collect(),
            set_by: vec![None; providers.len()],
        };
        for (i, r) in raw_routes.iter().enumerate() {
            let route = resolve_route(text, i, r, &mut providers, &mut breakers, builtin_mock)?;
            routes.push(route);
        }
        derive_in_flight_caps(&mut providers, &routes);

        let callers = raw
            .callers
            .iter()
            .map(|c| Caller {
                name: c.name.clone(),
                deadline: c.deadline.0,
            })
            .collect();
        let mut keys = Vec::new();
        for (i, k) in raw.keys.iter().enumerate() {
            let name = k.name.clone().unwrap_or_else(|| format!("key{}", i + 1));
            match (&k.sha256, &k.env) {
                (Some(h), None) => {
                    let hex = h.trim().to_ascii_lowercase();
                    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(ConfigError::at(
                            text,
                            &[Key("keys"), Index(i), Key("sha256")],
                            "`sha256` must be 64 hex digits (the sha256 of the caller's key)",
                        ));
                    }
                    keys.push(CallerKey::Sha256 { name, hex });
                }
                (None, Some(var)) => keys.push(CallerKey::Env {
                    name,
                    var: var.clone(),
                }),
                _ => {
                    return Err(ConfigError::at(
                        text,
                        &[Key("keys"), Index(i)],
                        "a key needs exactly one of `sha256` or `env`",
                    ))
                }
            }
        }
        let idempotency = IdempotencySettings {
            ttl: raw
                .idempotency
                .as_ref()
                .and_then(|i| i.ttl)
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(600)),
            max_entries: raw
                .idempotency
                .as_ref()
                .and_then(|i| i.max_entries)
                .unwrap_or(100_000),
            max_bytes: raw
                .idempotency
                .as_ref()
                .and_then(|i| i.max_bytes)
                .unwrap_or(DEFAULT_IDEMPOTENCY_MAX_BYTES),
        };
        if idempotency.max_entries == 0 || idempotency.max_bytes < 1024 {
            return Err(ConfigError::at(
                text,
                &[Key("idempotency")],
                "`idempotency.max_entries` must be at least 1 and `idempotency.max_bytes` at least 1024",
            ));
        }
        let state = match &raw.state {
            None => StateBackend::Memory,
            Some(s) => match s.backend.as_deref().unwrap_or("memory") {
                "memory" => StateBackend::Memory,
                "redis" => {
                    let url = s
                        .url
                        .clone()
                        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_string());
                    check_redis_url(&url)
                        .map_err(|m| ConfigError::at(text, &[Key("state"), Key("url")], m))?;
                    let on_unavailable = match s.on_unavailable.as_deref() {
                        None | Some("local") => OnUnavailable::Local,
                        Some("refuse") => OnUnavailable::Refuse,
                        Some(other) => {
                            return Err(ConfigError::at(
                                text,
                                &[Key("state"), Key("on_unavailable")],
                                format!(
                                    "`state.on_unavailable` must be `local` or `refuse` (got `{other}`)"
                                ),
                            ))
                        }
                    };
                    StateBackend::Redis {
                        url,
                        key_prefix: s.key_prefix.clone().unwrap_or_else(|| "levee".to_string()),
                        replicas: s.replicas.unwrap_or(1).max(1),
                        timeout: s.timeout.map(|d| d.0).unwrap_or(Duration::from_millis(5)),
                        on_unavailable,
                    }
                }
                other => {
                    return Err(ConfigError::at(
                        text,
                        &[Key("state"), Key("backend")],
                        format!("`state.backend` must be `memory` or `redis` (got `{other}`)"),
                    ))
                }
            },
        };
        let telemetry = telemetry(text, raw.telemetry.as_ref())?;
        Ok(Config {
            telemetry,
            listen,
            admin_listen,
            shutdown_grace: raw
                .shutdown_grace
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(30)),
            limits,
            providers,
            routes,
            callers,
            keys,
            idempotency,
            state,
            builtin_mock,
        })
    }

    /// The route for a request, if any.
    pub fn route_for(&self, path: &str, model: &str) -> Option<usize> {
        self.routes
            .iter()
            .position(|r| r.matcher.matches(path, model))
    }
}

fn unreachable_default() -> Config {
    // `Config::parse("")` only fails on an internal inconsistency; keep a
    // minimal literal so no code path can panic.
    Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
        admin_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
        shutdown_grace: Duration::from_secs(30),
        limits: Limits {
            max_body_bytes: 10 << 20,
            max_header_bytes: 64 << 10,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
        },
        providers: vec![],
        routes: vec![],
        callers: vec![],
        keys: vec![],
        idempotency: IdempotencySettings {
            ttl: Duration::from_secs(600),
            max_entries: 100_000,
            max_bytes: DEFAULT_IDEMPOTENCY_MAX_BYTES,
        },
        state: StateBackend::Memory,
        builtin_mock: true,
        telemetry: Telemetry::default(),
    }
}

fn telemetry(text: &str, raw: Option<&raw::RawTelemetry>) -> Result<Telemetry, ConfigError> {
    let Some(endpoint) = raw.and_then(|t| t.otlp_endpoint.as_deref()) else {
        return Ok(Telemetry::default());
    };
    let endpoint = endpoint.trim_end_matches('/');
    let ok = endpoint
        .parse::<http::Uri>()
        .ok()
        .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
        .filter(|u| u.path() == "/" || u.path().is_empty());
    if ok.is_none() {
        return Err(ConfigError::at(
            text,
            &[Seg::Key("telemetry"), Seg::Key("otlp_endpoint")],
            format!("`telemetry.otlp_endpoint` must be a collector's OTLP/HTTP address like `http://127.0.0.1:4318`, without a path (got `{endpoint}`); spans go to its /v1/traces"),
        ));
    }
    Ok(Telemetry {
        otlp_endpoint: Some(endpoint.to_string()),
    })
}

fn breaker_settings(
    b: Option<&RawBreaker>,
    base: Option<BreakerSettings>,
) -> Result<BreakerSettings, String> {
    let d = base.unwrap_or_default();
    let Some(b) = b else { return Ok(d) };
    let s = BreakerSettings {
        error_ratio: b.error_ratio.unwrap_or(d.error_ratio),
        window: b.window.map(|w| w.0).unwrap_or(d.window),
        min_requests: b.min_requests.unwrap_or(d.min_requests),
        open_for: b.open_for.map(|w| w.0).unwrap_or(d.open_for),
        half_open_probes: b.half_open_probes.unwrap_or(d.half_open_probes),
        probe_interval: b.probe_interval.map(|w| w.0).unwrap_or(d.probe_interval),
    };
    s.build().map_err(|e| e.to_string())?;
    Ok(s)
}

/// Sizes each provider without a written `max_in_flight` from its allowance
/// and the longest attempt any route expects of it (see [`InFlightCap`]).
fn derive_in_flight_caps(providers: &mut [Provider], routes: &[Route]) {
    for (ix, p) in providers.iter_mut().enumerate() {
        if p.max_in_flight_from != InFlightCap::None {
            continue;
        }
        let longest = routes
            .iter()
            .flat_map(|r| &r.targets)
            .filter(|t| t.provider == ix)
            .map(|t| t.expected_attempt)
            .max();
        if let (Some((rpm, burst)), Some(expected)) = (p.rate_limit, longest) {
            p.max_in_flight = derived_max_in_flight(rpm, burst, expected);
            p.max_in_flight_from = InFlightCap::Derived {
                requests_per_minute: rpm,
                burst,
                expected_attempt: expected,
            };
        }
    }
}

/// Which route, if any, set each provider's breaker through a route-level
/// `circuit_breaker` block, and what the provider itself declared.
struct RouteBreakers {
    declared: Vec<BreakerSettings>,
    set_by: Vec<Option<usize>>,
}

fn resolve_route(
    text: &str,
    i: usize,
    r: &RawRoute,
    providers: &mut [Provider],
    breakers: &mut RouteBreakers,
    builtin_mock: bool,
) -> Result<Route, ConfigError> {
    use Seg::*;
    let matcher = Match {
        model_prefix: r.matcher.as_ref().and_then(|m| m.model_prefix.clone()),
        path: r.matcher.as_ref().and_then(|m| m.path.clone()),
    };
    let name = match (&matcher.model_prefix, &matcher.path) {
        (Some(p), _) => p.clone(),
        (None, Some(p)) => p.clone(),
        (None, None) => "default".to_string(),
    };
    let at = |path: &[Seg<'_>], msg: String| {
        let mut full = vec![Key("routes"), Index(i)];
        full.extend_from_slice(path);
        ConfigError::at(text, &full, format!("route {} (`{name}`): {msg}", i + 1))
    };
    let route_expected = r.expected_attempt_ms.unwrap_or(8000);
    if route_expected == 0 {
        return Err(at(
            &[Key("expected_attempt_ms")],
            "`expected_attempt_ms` must be positive".into(),
        ));
    }
    let find = |p: &str| providers.iter().position(|x| x.name == p);
    let mut targets = Vec::new();
    match &r.targets {
        Some(list) if !list.is_empty() => {
            for (ti, t) in list.iter().enumerate() {
                let (pname, model, exp) = match t {
                    RawTarget::Name(n) => (n.as_str(), None, None),
                    RawTarget::Full(f) => {
                        (f.provider.as_str(), f.model.clone(), f.expected_attempt_ms)
                    }
                };
                let Some(provider) = find(pname) else {
                    let known: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
                    return Err(at(
                        &[Key("targets"), Index(ti)],
                        format!(
                            "target `{pname}` is not a provider (known: {})",
                            known.join(", ")
                        ),
                    ));
                };
                if exp == Some(0) {
                    return Err(at(
                        &[Key("targets"), Index(ti)],
                        "`expected_attempt_ms` must be positive".into(),
                    ));
                }
                targets.push(Target {
                    provider,
                    model,
                    expected_attempt: Duration::from_millis(exp.unwrap_or(route_expected)),
                });
            }
        }
        Some(_) => {
            return Err(at(
                &[Key("targets")],
                "`targets` must list at least one provider".into(),
            ))
        }
        None => {
            // No targets: the provider named like the model prefix, or the built-in mock.
            let guess = matcher
                .model_prefix
                .as_deref()
                .map(|p| p.trim_end_matches('/'))
                .unwrap_or("");
            let provider = match find(guess) {
                Some(p) => p,
                // The built-in mock, or a route with no model prefix (the
                // default route of a config without `routes:`): the first provider.
                None if builtin_mock || matcher.model_prefix.is_none() => 0,
                None => {
                    return Err(at(
                        &[],
                        format!(
                            "no `targets`, and no provider named `{guess}` to default to: add `targets: [{guess}]` or a provider of that name"
                        ),
                    ))
                }
            };
            targets.push(Target {
                provider,
                model: None,
                expected_attempt: Duration::from_millis(route_expected),
            });
        }
    }
    // A route-level breaker block sets the breakers of its targets'
    // providers (fields it omits keep the provider's values). Breakers belong
    // to the provider's fault domains, which every route reaching it shares,
    // so two routes may not ask for different ones.
    if let Some(b) = &r.circuit_breaker {
        for t in &targets {
            let p = t.provider;
            let s = breaker_settings(Some(b), Some(breakers.declared[p]))
                .map_err(|m| at(&[Key("circuit_breaker")], m))?;
            if let Some(j) = breakers.set_by[p] {
                if j != i && providers[p].breaker != s {
                    return Err(at(
                        &[Key("circuit_breaker")],
                        format!(
                            "its `circuit_breaker` differs from route {}'s for provider `{}`: a provider's breakers are shared by every route that reaches it, so set them once (on the provider, or the same on each route)",
                            j + 1,
                            providers[p].name
                        ),
                    ));
                }
            }
            providers[p].breaker = s;
            breakers.set_by[p] = Some(i);
        }
    }
    let d = r.deadline.as_ref();
    let deadline = DeadlinePolicy::new(
        d.and_then(|d| d.default)
            .map(|x| x.0)
            .unwrap_or(Duration::from_secs(30)),
        d.and_then(|d| d.max)
            .map(|x| x.0)
            .unwrap_or(Duration::from_secs(120)),
    )
    .map_err(|e| at(&[Key("deadline")], e.to_string()))?;
    let retry = r.retry.as_ref();
    let classifier = match retry.and_then(|r| r.on.as_ref()) {
        None => Classifier::default(),
        Some(on) => {
            let mut entries = Vec::new();
            for o in on {
                let e = match o {
                    RawOn::Code(c) => RetryOn::status(*c),
                    RawOn::Name(n) => n.parse(),
                };
                entries.push(e.map_err(|e| at(&[Key("retry"), Key("on")], e.to_string()))?);
            }
            Classifier::new(&entries)
        }
    };
    let backoff = match retry.and_then(|r| r.backoff.as_ref()) {
        None => Backoff::default(),
        Some(b) => {
            let jitter: Jitter = b.jitter.as_deref().unwrap_or("full").parse().map_err(
                |e: levee_policy::backoff::BackoffError| {
                    at(
                        &[Key("retry"), Key("backoff"), Key("jitter")],
                        e.to_string(),
                    )
                },
            )?;
            let res = match &b.schedule_ms {
                Some(s) => {
                    if b.base_ms.is_some() || b.multiplier.is_some() {
                        return Err(at(
                            &[Key("retry"), Key("backoff")],
                            "use either `schedule_ms` or `base_ms`/`multiplier`, not both".into(),
                        ));
                    }
                    Backoff::schedule(s, jitter)
                }
                None => {
                    let base = b.base_ms.unwrap_or(levee_policy::backoff::DEFAULT_BASE_MS);
                    Backoff::exponential(
                        base,
                        b.multiplier.unwrap_or(2.0),
                        b.max_ms.unwrap_or(10_000.max(base)),
                        jitter,
                    )
                }
            };
            res.map_err(|e| at(&[Key("retry"), Key("backoff")], e.to_string()))?
        }
    };
    let max_attempts = retry.and_then(|r| r.max_attempts).unwrap_or(3);
    let expected: Vec<Duration> = targets.iter().map(|t| t.expected_attempt).collect();
    let policy = RoutePolicy::new(
        &expected,
        max_attempts,
        classifier,
        backoff,
        retry.and_then(|r| r.respect_retry_after).unwrap_or(true),
    )
    .map_err(|e| at(&[Key("retry"), Key("max_attempts")], e.to_string()))?
    .with_retry_after_cap(
        retry
            .and_then(|r| r.retry_after_cap)
            .map(|d| d.0)
            .unwrap_or(levee_policy::retry_after::DEFAULT_RETRY_AFTER_CAP),
    )
    .with_attempt_timeout(r.attempt_timeout.map(|d| d.0));
    let bud = retry.and_then(|r| r.budget.as_ref());
    let budget = BudgetSettings {
        ratio: bud.and_then(|b| b.ratio).unwrap_or(0.1),
        min_per_second: bud.and_then(|b| b.min_per_second).unwrap_or(5.0),
        window: bud
            .and_then(|b| b.window)
            .map(|w| w.0)
            .unwrap_or(Duration::from_secs(1)),
    };
    RetryBudget::new(budget.ratio, budget.min_per_second, budget.window)
        .map_err(|e| at(&[Key("retry"), Key("budget")], e.to_string()))?;
    if r.max_in_flight == Some(0) {
        return Err(at(
            &[Key("max_in_flight")],
            "`max_in_flight` must be at least 1".into(),
        ));
    }
    Ok(Route {
        name,
        matcher,
        targets,
        deadline,
        policy,
        budget,
        max_in_flight: r.max_in_flight.unwrap_or(DEFAULT_ROUTE_MAX_IN_FLIGHT),
        first_byte_timeout: r.first_byte_timeout.map(|d| d.0),
        stream_idle_timeout: r
            .stream_idle_timeout
            .map(|d| d.0)
            .unwrap_or(Duration::from_secs(60)),
    })
}
