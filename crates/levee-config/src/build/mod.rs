//! Stage two: the raw configuration checked as a whole and turned into
//! [`Config`] — defaults filled in (the core's own, or [`crate::defaults`]),
//! the core's objects built, provider caps derived from the routes.

mod provider;
mod rules;

use crate::defaults;
use crate::error::{ConfigError, Problem, Source};
use crate::locate::Seg::{self, Index, Key};
use crate::model::{
    derived_max_in_flight, CallerKey, IdempotencySettings, InFlightCap, Limits, Provider,
    RedisConnect, RedisMode, RedisTls, Route, StateBackend, Telemetry,
};
use crate::raw::{
    RawAdmin, RawCaller, RawConfig, RawIdempotency, RawKey, RawLimits, RawMatch, RawRoute,
    RawState, RawTarget,
};
use crate::values::{Api, BackendKind};
use crate::{Caller, Config, BUILTIN_MOCK, BUILTIN_MOCK_ANTHROPIC};
use levee_policy::{BreakerSettings, RetryBudget};
use provider::{builtin_mock_provider, providers};
use std::net::SocketAddr;

impl Config {
    /// Stage two: checks what spans several keys, fills in defaults and
    /// builds the core's objects. `text` is the YAML `raw` was read from: it
    /// gives the line of what is refused.
    pub fn from_raw(raw: RawConfig, text: &str) -> Result<Config, ConfigError> {
        Config::from_raw_in(raw, text, &[])
    }

    /// [`Config::from_raw`] for a configuration embedded in a larger YAML
    /// document (a simulator scenario's gateway block): `raw` was read from
    /// the node at `at` in `text`, and errors give lines of `text`.
    pub fn from_raw_in(raw: RawConfig, text: &str, at: &[Seg<'_>]) -> Result<Config, ConfigError> {
        let src = Source { text, prefix: at };
        let builtin_mock = raw.providers.is_empty();
        let (mut providers, declared) = if builtin_mock {
            builtin_mock_providers()
        } else {
            providers(src, &raw)?
        };
        let mut routes = routes(src, &raw.routes, &mut providers, declared, builtin_mock)?;
        derive_in_flight_caps(&mut providers, &routes);
        share_retry_floors(&mut providers, &mut routes);
        weigh_shares(&raw.callers, &mut providers);
        let prices = prices(src, &raw.prices, &providers)?;
        Ok(Config {
            listen: addr(raw.listen.map(|a| a.0), defaults::LISTEN),
            admin_listen: addr(
                raw.admin
                    .as_ref()
                    .and_then(|a| a.listen.as_ref())
                    .map(|a| a.0),
                defaults::ADMIN_LISTEN,
            ),
            admin_allowed_hosts: allowed_hosts(src, raw.admin.as_ref())?,
            shutdown_grace: raw.shutdown_grace.map_or(defaults::SHUTDOWN_GRACE, |d| d.0),
            limits: limits(src, raw.limits.as_ref())?,
            providers,
            routes,
            callers: callers(&raw.callers),
            keys: keys(src, &raw.keys)?,
            caller_rules: rules::caller_rules(src, &raw)?,
            idempotency: idempotency(src, raw.idempotency.as_ref())?,
            state: state(src, raw.state.as_ref())?,
            builtin_mock,
            prices,
            telemetry: Telemetry {
                otlp_endpoint: raw.telemetry.and_then(|t| t.otlp_endpoint).map(|e| e.0),
            },
        })
    }
}

/// `prices:` checked: each names a provider, and each price is a finite,
/// non-negative number of US dollars per million tokens.
fn prices(
    src: Source<'_>,
    raw: &[crate::raw::RawPrice],
    providers: &[Provider],
) -> Result<Vec<crate::prices::PriceEntry>, ConfigError> {
    let mut out = Vec::with_capacity(raw.len());
    for (i, p) in raw.iter().enumerate() {
        let at = |key: &'static str, problem: Problem| {
            ConfigError::at(src, &[Key("prices"), Index(i), Key(key)], problem)
        };
        let provider = providers
            .iter()
            .position(|x| x.name == p.provider)
            .ok_or_else(|| at("provider", Problem::PriceProvider(p.provider.clone())))?;
        let amounts = [
            ("input_per_mtok", Some(p.input_per_mtok)),
            ("output_per_mtok", Some(p.output_per_mtok)),
            ("cached_input_per_mtok", p.cached_input_per_mtok),
            ("cache_write_per_mtok", p.cache_write_per_mtok),
        ];
        for (key, v) in amounts {
            if v.is_some_and(|v| !v.is_finite() || v < 0.0) {
                return Err(at(key, Problem::PriceAmount(key)));
            }
        }
        out.push(crate::prices::PriceEntry {
            provider,
            model: p.model.clone(),
            price: crate::prices::Price {
                input_per_mtok: p.input_per_mtok,
                output_per_mtok: p.output_per_mtok,
                cached_input_per_mtok: p.cached_input_per_mtok,
                cache_write_per_mtok: p.cache_write_per_mtok,
            },
        });
    }
    Ok(out)
}

/// The providers when none is configured, and the breaker settings each
/// declares. The built-in mock answers both dialects natively: one provider
/// for each, both pointed at it, so an Anthropic caller's `thinking` or
/// server tools reach it untranslated.
fn builtin_mock_providers() -> (Vec<Provider>, Vec<BreakerSettings>) {
    (
        vec![
            builtin_mock_provider(BUILTIN_MOCK, Api::OpenAi),
            builtin_mock_provider(BUILTIN_MOCK_ANTHROPIC, Api::Anthropic),
        ],
        vec![BreakerSettings::default(), BreakerSettings::default()],
    )
}

/// The `written` routes resolved against the providers; with none written,
/// the routes every model and path takes by default.
fn routes(
    src: Source<'_>,
    written: &[RawRoute],
    providers: &mut [Provider],
    declared: Vec<BreakerSettings>,
    builtin_mock: bool,
) -> Result<Vec<Route>, ConfigError> {
    let default_route = [RawRoute::default()];
    // With the built-in mock and no routes: Anthropic's path to its
    // Anthropic face, everything else to the first provider.
    let builtin_routes = [
        RawRoute {
            matcher: Some(RawMatch {
                model: None,
                models: None,
                model_prefix: None,
                path: Some("/v1/messages".to_string()),
            }),
            targets: Some(vec![RawTarget::Name(BUILTIN_MOCK_ANTHROPIC.to_string())]),
            ..RawRoute::default()
        },
        RawRoute::default(),
    ];
    // No routes: every model, every path, to the first provider.
    let raw_routes = if !written.is_empty() {
        written
    } else if builtin_mock {
        &builtin_routes[..]
    } else {
        &default_route[..]
    };
    crate::route::resolve_routes(src, raw_routes, providers, declared, builtin_mock)
}

/// Gives every provider the listed callers' shares (1 unless given): each
/// has its guarantee when the allowance runs short, as unlisted callers
/// have an equal one.
fn weigh_shares(callers: &[RawCaller], providers: &mut [Provider]) {
    if !callers.is_empty() {
        let weights: Vec<f64> = callers
            .iter()
            .map(|c| c.share.map_or(1.0, |s| s.0))
            .collect();
        for p in providers {
            p.shares = weights.clone();
        }
    }
}

/// The configured callers.
fn callers(raw: &[RawCaller]) -> Vec<Caller> {
    raw.iter()
        .map(|c| Caller {
            name: c.name.clone(),
            deadline: c.deadline.map(|d| d.0),
            share: c.share.map(|s| s.0),
            priority: c.priority.map(|p| p.0).unwrap_or_default(),
            fallback_only: c.fallback_only.unwrap_or(false),
        })
        .collect()
}

fn addr(v: Option<SocketAddr>, default: ([u8; 4], u16)) -> SocketAddr {
    v.unwrap_or_else(|| SocketAddr::from(default))
}

fn limits(src: Source<'_>, raw: Option<&RawLimits>) -> Result<Limits, ConfigError> {
    let d = Limits::default();
    let Some(l) = raw else { return Ok(d) };
    if l.caller_names.is_some_and(|n| n.0 > MAX_CALLER_NAMES) {
        let path = [Key("limits"), Key("caller_names")];
        return Err(ConfigError::at(
            src,
            &path,
            Problem::CallerNames(MAX_CALLER_NAMES),
        ));
    }
    if l.max_header_bytes.is_some_and(|n| n < MIN_HEADER_BYTES) {
        let path = [Key("limits"), Key("max_header_bytes")];
        return Err(ConfigError::at(src, &path, Problem::HeaderLimitTooSmall));
    }
    Ok(Limits {
        max_body_bytes: l.max_body_bytes.unwrap_or(d.max_body_bytes),
        max_header_bytes: l.max_header_bytes.unwrap_or(d.max_header_bytes),
        header_read_timeout: l.header_read_timeout.map_or(d.header_read_timeout, |t| t.0),
        body_read_timeout: l.body_read_timeout.map_or(d.body_read_timeout, |t| t.0),
        caller_names: l.caller_names.map_or(d.caller_names, |n| n.0),
    })
}

/// The most `limits.caller_names`: each is a metrics label value.
const MAX_CALLER_NAMES: usize = 10_000;

/// The smallest `limits.max_header_bytes`: the official SDKs' own fields
/// come to ~700 bytes, so a smaller limit refuses every SDK request.
const MIN_HEADER_BYTES: usize = 1024;

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

/// Moves the routes' retry floors (`min_per_second`) to the providers they
/// send to, one floor per provider and model, shared: the largest floor of
/// the routes that use the provider (each route was promised at least its
/// own), over that route's window. A route's budget keeps what successes
/// and refunds put in. Without this, twenty routes to one provider were
/// twenty floors: 100 retries a second into an outage at the default 5.
fn share_retry_floors(providers: &mut [Provider], routes: &mut [Route]) {
    for (ix, p) in providers.iter_mut().enumerate() {
        let largest = routes
            .iter()
            .filter(|r| r.targets.iter().any(|t| t.provider == ix))
            .map(|r| (r.budget.floor_per_second(), r.budget.window()))
            .filter(|(floor, _)| *floor > 0.0)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        // Valid by construction: a route's own floor and window passed the same check.
        p.retry_floor = largest.and_then(|(floor, window)| RetryBudget::floor(floor, window).ok());
    }
    for r in routes {
        r.budget = r.budget.clone().without_floor();
    }
}

fn keys(src: Source<'_>, raw: &[RawKey]) -> Result<Vec<CallerKey>, ConfigError> {
    let mut keys = Vec::with_capacity(raw.len());
    for (i, k) in raw.iter().enumerate() {
        let name = k.name.clone().unwrap_or_else(|| format!("key{}", i + 1));
        let pair = (&k.access_key_id, &k.secret_access_key_env);
        keys.push(match (&k.sha256, &k.env, pair) {
            (Some(d), None, (None, None)) => CallerKey::Sha256 { name, digest: d.0 },
            (None, Some(var), (None, None)) => CallerKey::Env {
                name,
                var: var.clone(),
            },
            (None, None, (Some(id), Some(var))) if is_access_key_id(id) => CallerKey::Signing {
                name,
                access_key_id: id.clone(),
                var: var.clone(),
            },
            _ => {
                let path = [Key("keys"), Index(i)];
                return Err(ConfigError::at(src, &path, Problem::KeySource));
            }
        });
    }
    Ok(keys)
}

/// `admin.allowed_hosts` checked: each a DNS name (letters, digits, `-`
/// and `.`, optionally `*.` in front for any name under it), kept in lower
/// case.
fn allowed_hosts(src: Source<'_>, admin: Option<&RawAdmin>) -> Result<Vec<String>, ConfigError> {
    let listed = admin
        .and_then(|a| a.allowed_hosts.as_deref())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(listed.len());
    for (i, h) in listed.iter().enumerate() {
        let name = h.strip_prefix("*.").unwrap_or(h);
        let ok = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !ok {
            let path = [Key("admin"), Key("allowed_hosts"), Index(i)];
            return Err(ConfigError::at(src, &path, Problem::AllowedHost));
        }
        out.push(h.to_ascii_lowercase());
    }
    Ok(out)
}

/// `state.tls` and `state.password_env` checked: TLS only with a
/// `rediss://` URL, a client certificate with its key. (The files are read,
/// and the variable, by `levee check` and at start.)
fn redis_connect(src: Source<'_>, s: &RawState, url: &str) -> Result<RedisConnect, ConfigError> {
    let at = |keys: &[&'static str], p: Problem| {
        let path: Vec<_> = keys.iter().map(|k| Key(k)).collect();
        ConfigError::at(src, &path, p)
    };
    let mode = s.mode.unwrap_or_default();
    let nodes: Vec<String> = s.nodes.iter().flatten().map(|n| n.0.clone()).collect();
    let problem = match (mode, nodes.is_empty(), &s.sentinel_master) {
        (RedisMode::Standalone, false, _) => Some(("nodes", Problem::RedisNodesStandalone)),
        (RedisMode::Cluster | RedisMode::Sentinel, true, _) => {
            Some(("mode", Problem::RedisNodesNeeded))
        }
        (RedisMode::Sentinel, false, None) => Some(("mode", Problem::RedisSentinelMaster)),
        (RedisMode::Standalone | RedisMode::Cluster, _, Some(_)) => {
            Some(("sentinel_master", Problem::RedisMasterWithoutSentinel))
        }
        _ => None,
    };
    if let Some((key, p)) = problem {
        return Err(at(&["state", key], p));
    }
    // With nodes, their scheme says whether TLS is on.
    let url = nodes.first().map_or(url, String::as_str);
    let tls = match &s.tls {
        None => None,
        Some(t) => {
            if !url.starts_with("rediss://") {
                return Err(at(&["state", "tls"], Problem::RedisTlsScheme));
            }
            let client = match (&t.cert_file, &t.key_file) {
                (Some(c), Some(k)) => Some((c.clone(), k.clone())),
                (None, None) => None,
                _ => return Err(at(&["state", "tls"], Problem::RedisClientPair)),
            };
            Some(RedisTls {
                ca_file: t.ca_file.clone(),
                client,
            })
        }
    };
    Ok(RedisConnect {
        mode,
        nodes,
        sentinel_master: s.sentinel_master.clone(),
        tls,
        password_env: s.password_env.clone(),
    })
}

/// Whether `id` reads as an access key id: 16 to 128 letters and digits,
/// as AWS's own and S3-compatible stores' are.
fn is_access_key_id(id: &str) -> bool {
    (16..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

fn idempotency(
    src: Source<'_>,
    raw: Option<&RawIdempotency>,
) -> Result<IdempotencySettings, ConfigError> {
    let d = IdempotencySettings::default();
    let Some(i) = raw else { return Ok(d) };
    let s = IdempotencySettings {
        ttl: i.ttl.map_or(d.ttl, |t| t.0),
        max_entries: i.max_entries.unwrap_or(d.max_entries),
        max_bytes: i.max_bytes.unwrap_or(d.max_bytes),
    };
    if s.max_entries == 0 || s.max_bytes < 1024 {
        let path = [Key("idempotency")];
        return Err(ConfigError::at(src, &path, Problem::IdempotencyTooSmall));
    }
    Ok(s)
}

fn state(src: Source<'_>, raw: Option<&RawState>) -> Result<StateBackend, ConfigError> {
    let Some(s) = raw else {
        return Ok(StateBackend::Memory);
    };
    if s.backend.unwrap_or_default() == BackendKind::Memory {
        // Redis settings under the memory backend would be silently unused.
        let set = [
            ("url", s.url.is_some()),
            ("key_prefix", s.key_prefix.is_some()),
            ("replicas", s.replicas.is_some()),
            ("timeout", s.timeout.is_some()),
            ("on_unavailable", s.on_unavailable.is_some()),
            ("max_bytes", s.max_bytes.is_some()),
            ("tls", s.tls.is_some()),
            ("password_env", s.password_env.is_some()),
            ("mode", s.mode.is_some()),
            ("nodes", s.nodes.is_some()),
            ("sentinel_master", s.sentinel_master.is_some()),
        ];
        return match set.iter().find(|(_, is_set)| *is_set) {
            Some((key, _)) => {
                let path = [Key("state"), Key(key)];
                Err(ConfigError::at(src, &path, Problem::RedisOnly(key)))
            }
            None => Ok(StateBackend::Memory),
        };
    }
    let url = s
        .url
        .as_ref()
        .map_or_else(|| defaults::REDIS_URL.to_string(), |u| u.0.clone());
    let connect = Box::new(redis_connect(src, s, &url)?);
    Ok(StateBackend::Redis {
        url,
        connect,
        key_prefix: s
            .key_prefix
            .clone()
            .unwrap_or_else(|| defaults::REDIS_KEY_PREFIX.to_string()),
        replicas: s.replicas.map_or(defaults::REDIS_REPLICAS, |r| r.0),
        timeout: s.timeout.map_or(defaults::REDIS_TIMEOUT, |t| t.0),
        on_unavailable: s.on_unavailable.unwrap_or_default(),
        max_bytes: s.max_bytes.unwrap_or(defaults::REDIS_MAX_BYTES),
    })
}
