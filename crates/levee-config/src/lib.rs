//! Levee's configuration: the YAML a user writes, read and checked once into
//! a [`Config`] that holds the policy core's own objects (breakers, budgets,
//! route policies, deadlines, allowances), ready to use.
//!
//! Two stages, as in ripgrep: [`raw`] is exactly what the user typed (serde;
//! unknown keys refused; single values such as durations, addresses and key
//! digests check themselves as they are read, so their errors carry the
//! parser's line), then [`Config::from_raw`] checks what spans several keys
//! (targets naming providers, routes sharing a provider's breaker), fills in
//! defaults — the core's own, or the few this crate owns in [`defaults`] —
//! and builds the core's objects. Once a [`Config`] exists it is valid;
//! nothing downstream validates or defaults again. Every [`ConfigError`]
//! names the line and what to write instead.
//!
//! It is not the policy (that is `levee-policy`) and does no I/O beyond
//! [`Config::load`] reading the file; it knows nothing about sockets.
#![forbid(unsafe_code)]

mod build;
pub mod defaults;
pub mod duration;
mod error;
pub mod locate;
mod model;
mod platform;
pub mod prices;
pub mod raw;
mod redis_url;
mod route;
mod shape;
mod values;

pub use duration::parse_duration;
pub use error::{yaml_message, ConfigError, Problem, RouteProblem};
pub use model::{
    derived_max_in_flight, Caller, CallerKey, CallerRules, IdempotencySettings, InFlightCap,
    Limits, Match, Provider, RedisConnect, RedisMode, RedisTls, Route, StateBackend, Target,
    Telemetry,
};
pub use platform::{check_credential_url, is_local_host, ApiKind, ModelNames, Platform, Vendor};
pub use redis_url::{check_redis_url, redact_url, BadRedisUrl};
pub use values::{
    Api, AtLeastOne, Auth, BackendKind, BalanceStrategy, BaseUrl, Http2, ListenAddr, OnUnavailable,
    OnUntranslatable, OtlpEndpoint, RedisUrl, Sha256Digest, ValueSource,
};

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// The name of the built-in mock provider.
pub const BUILTIN_MOCK: &str = "mock";
/// The built-in mock's Anthropic face: the same mock, spoken to in
/// Anthropic's dialect, serving `/v1/messages` when no routes are given.
pub const BUILTIN_MOCK_ANTHROPIC: &str = "mock-anthropic";

/// A whole, valid configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    /// Host names besides its own addresses the admin listener answers to
    /// (a Kubernetes Service's name: `levee-admin`,
    /// `levee.default.svc.cluster.local`); lower case.
    pub admin_allowed_hosts: Vec<String>,
    pub shutdown_grace: Duration,
    pub limits: Limits,
    pub providers: Vec<Provider>,
    pub routes: Vec<Route>,
    pub callers: Vec<Caller>,
    pub keys: Vec<CallerKey>,
    /// The rules of each caller that has any, one entry per name.
    pub caller_rules: Vec<CallerRules>,
    pub idempotency: IdempotencySettings,
    pub state: StateBackend,
    /// No providers were configured: routes use the built-in mock provider
    /// (`providers[0]`, whose address the caller fills in).
    pub builtin_mock: bool,
    pub telemetry: Telemetry,
    /// `prices:`, each for one provider and model.
    pub prices: Vec<prices::PriceEntry>,
}

impl Config {
    /// What provider `provider`'s model `model` costs: its `prices:` entry,
    /// else the built-in list price of a vendor Levee knows, less the
    /// provider's `discount`; `None`: not known (its spend is unknown,
    /// never 0).
    pub fn price_of(&self, provider: usize, model: &str) -> Option<prices::Price> {
        let p = self.providers.get(provider)?;
        let listed = self
            .prices
            .iter()
            .find(|e| e.provider == provider && e.model == model)
            .map(|e| e.price);
        let price = listed.or_else(|| prices::builtin_of(&p.platform, p.list_vendor, model))?;
        Some(price.discounted(p.discount))
    }

    /// A request's place in the providers' allowances: `cost`, and the
    /// caller named `caller` among `callers:` (its index, weighed by its
    /// share, and its priority), or a caller not listed there by the id its
    /// driver knows it by (`unlisted`), with an equal share; as the gateway
    /// and the simulator ask.
    pub fn ask(
        &self,
        caller: Option<&str>,
        unlisted: Option<u16>,
        cost: levee_policy::allowance::Cost,
    ) -> levee_policy::allowance::Ask {
        let callers = self.callers.iter().map(|c| (c.name.as_str(), c.priority));
        levee_policy::allowance::Ask::of_caller(callers, caller, unlisted, cost)
    }

    /// Reads and validates a config file: the one entry point for a file,
    /// at start and on every reload.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text)
    }

    /// Parses and validates config text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: raw::RawConfig = if text.trim().is_empty() {
            raw::RawConfig::default()
        } else {
            shape::no_duplicate_keys(text)?;
            serde_norway::from_str(text)
                .map_err(|e| shape::read_error::<raw::RawConfig>(text, &e))?
        };
        Config::from_raw(raw, text)
    }

    /// The configuration used when none is given: every model goes to the
    /// built-in mock provider at `mock` with generous defaults.
    pub fn builtin(mock: SocketAddr) -> Config {
        let mut c = Config::from_raw(raw::RawConfig::default(), "")
            .expect("the empty configuration is valid (pinned by a test)");
        c.set_builtin_mock_addr(mock);
        c
    }

    /// Points the built-in mock provider at `addr`.
    pub fn set_builtin_mock_addr(&mut self, addr: SocketAddr) {
        if self.builtin_mock {
            if let Ok(uri) = format!("http://{addr}").parse::<http::Uri>() {
                for p in &mut self.providers {
                    p.base_url = uri.clone();
                    p.list_vendor = p.platform.list_vendor(p.api, &p.base_url);
                }
            }
        }
    }

    /// The route for a request, if any.
    pub fn route_for(&self, path: &str, model: &str) -> Option<usize> {
        // Exact names win over prefixes, wherever they stand in the file:
        // one pass, the first other match kept until no exact one comes.
        let mut first = None;
        for (i, r) in self.routes.iter().enumerate() {
            if !r.matcher.matches(path, model) {
                continue;
            }
            if r.matcher.is_exact() {
                return Some(i);
            }
            first.get_or_insert(i);
        }
        first
    }
}

/// Reads a callers list (`[{ name, deadline }]`, the shape of the config's
/// `callers:`), for judging a config against callers kept elsewhere.
pub fn parse_callers(text: &str) -> Result<Vec<Caller>, ConfigError> {
    shape::no_duplicate_keys(text)?;
    let raw: Vec<raw::RawCaller> = serde_norway::from_str(text)
        .map_err(|e| shape::read_error::<Vec<raw::RawCaller>>(text, &e))?;
    Ok(raw
        .into_iter()
        .map(|c| Caller {
            name: c.name,
            deadline: c.deadline.map(|d| d.0),
            share: c.share.map(|s| s.0),
            priority: c.priority.map(|p| p.0).unwrap_or_default(),
            fallback_only: c.fallback_only.unwrap_or(false),
        })
        .collect())
}
