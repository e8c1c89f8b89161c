//! Providers: each configured one checked (its breaker, `rate_limit`,
//! keys that would go unused, `headers`) and built, and the built-in mock's.

use crate::defaults;
use crate::error::{ConfigError, Problem, Source};
use crate::locate::Seg::Key;
use crate::model::{InFlightCap, Provider};
use crate::platform::{dialect_auth, Platform, PlatformKeys};
use crate::raw::{RawConfig, RawProvider, RawRateLimit};
use crate::values::{Api, Http2};
use levee_policy::admission::Gcra;
use levee_policy::BreakerSettings;

/// A provider used when none is configured; the caller points it at a
/// running mock
/// ([`Config::set_builtin_mock_addr`](crate::Config::set_builtin_mock_addr)).
pub(super) fn builtin_mock_provider(name: &str, api: Api) -> Provider {
    Provider {
        name: name.to_string(),
        api,
        platform: Platform::Direct,
        base_url: http::Uri::from_static(defaults::mock::BASE_URL),
        api_key_env: None,
        max_in_flight: defaults::mock::MAX_IN_FLIGHT,
        max_in_flight_from: InFlightCap::Configured,
        rate_limit: None,
        limits: levee_policy::allowance::Limits::default(),
        shares: Vec::new(),
        allowance: None,
        breaker: levee_policy::CircuitBreaker::default_policy(),
        connect_timeout: defaults::mock::CONNECT_TIMEOUT,
        http2: Http2::Auto,
        http2_max_streams: defaults::HTTP2_MAX_STREAMS,
        discount: 0.0,
        max_connections: defaults::MAX_CONNECTIONS,
        retry_floor: None,
        auth: dialect_auth(api),
        headers: Vec::new(),
        query: Vec::new(),
        list_vendor: None,
    }
}

/// Header fields a provider's `headers:` may not set: Levee writes them
/// itself (framing, routing, its own key and deadline fields).
const RESERVED_FIELDS: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "te",
    "upgrade",
    "x-timeout-ms",
    "idempotency-key",
    "content-type",
];

/// The configured providers, and the breaker settings each declares.
pub(super) fn providers(
    src: Source<'_>,
    raw: &RawConfig,
) -> Result<(Vec<Provider>, Vec<BreakerSettings>), ConfigError> {
    let mut providers = Vec::with_capacity(raw.providers.len());
    let mut declared = Vec::with_capacity(raw.providers.len());
    for (name, p) in &raw.providers {
        let (built, settings) = configured_provider(ProviderAt { src, name }, p)?;
        providers.push(built);
        declared.push(settings);
    }
    Ok((providers, declared))
}

/// Where a provider's refusals point: `providers.<name>.<key>`.
#[derive(Clone, Copy)]
struct ProviderAt<'a> {
    src: Source<'a>,
    name: &'a str,
}

impl ProviderAt<'_> {
    /// `problem`, at the provider's `key`.
    fn err(self, key: &str, problem: Problem) -> ConfigError {
        let path = [Key("providers"), Key(self.name), Key(key)];
        ConfigError::at(self.src, &path, problem)
    }

    /// A [`Problem::ProviderField`] saying `problem`, at the provider's `key`.
    fn field(self, key: &str, problem: String) -> ConfigError {
        let provider = self.name.to_string();
        self.err(key, Problem::ProviderField { provider, problem })
    }
}

/// One configured provider, checked and built, and the breaker settings it
/// declares.
fn configured_provider(
    at: ProviderAt<'_>,
    p: &RawProvider,
) -> Result<(Provider, BreakerSettings), ConfigError> {
    let (breaker, settings) = circuit_breaker(at, p)?;
    let metering = metering(at, p.rate_limit.as_ref())?;
    refuse_unused_keys(at, p)?;
    check_headers(at, p)?;
    if p.discount.is_some_and(|d| !(0.0..1.0).contains(&d)) {
        return Err(at.field(
            "discount",
            "`discount` is the fraction taken off its prices, from 0 to below 1, like `0.15` for 15 % off".to_string(),
        ));
    }
    let (platform, base_url) = platform_keys(p)
        .platform()
        .map_err(|(key, problem)| at.field(key, problem))?;
    let built = provider(at.name, p, metering, breaker, platform, base_url);
    Ok((built, settings))
}

/// The provider's keys that decide where it runs.
fn platform_keys(p: &RawProvider) -> PlatformKeys<'_> {
    PlatformKeys {
        api: p.api,
        base_url: p.base_url.as_ref().map(|b| &b.0),
        auth: p.auth.is_some(),
        api_key_env: p.api_key_env.is_some(),
        region: p.region.as_deref(),
        project: p.project.as_deref(),
        api_version: p.api_version.as_deref(),
        token_file: p.token_file.as_deref(),
        credentials_file: p.credentials_file.as_deref(),
        profile: p.profile.as_deref(),
        token_url: p.token_url.as_deref(),
    }
}

/// The provider's circuit breaker, and the settings it declares (the
/// defaults for what `circuit_breaker` leaves out).
fn circuit_breaker(
    at: ProviderAt<'_>,
    p: &RawProvider,
) -> Result<(levee_policy::CircuitBreaker, BreakerSettings), ConfigError> {
    let settings = p
        .circuit_breaker
        .as_ref()
        .map_or_else(BreakerSettings::default, |b| {
            b.merge(BreakerSettings::default())
        });
    let breaker = settings.build().map_err(|source| {
        let provider = at.name.to_string();
        at.err(
            "circuit_breaker",
            Problem::ProviderBreaker { provider, source },
        )
    })?;
    Ok((breaker, settings))
}

/// What a provider's `rate_limit` meters.
struct Metering {
    /// Requests per minute and their burst, when requests are metered.
    rate_limit: Option<(u32, u32)>,
    /// Every meter's limit.
    limits: levee_policy::allowance::Limits,
    /// The request meter.
    allowance: Option<Gcra>,
}

/// The provider's `rate_limit` checked and turned into its meters.
fn metering(at: ProviderAt<'_>, raw: Option<&RawRateLimit>) -> Result<Metering, ConfigError> {
    if let Some(r) = raw {
        let metered = r.requests_per_minute.is_some()
            || r.tokens_per_minute.is_some()
            || r.input_tokens_per_minute.is_some()
            || r.output_tokens_per_minute.is_some();
        if !metered {
            return Err(at.field("rate_limit", "`rate_limit` names no meter: give `requests_per_minute`, `tokens_per_minute`, `input_tokens_per_minute` or `output_tokens_per_minute`".into()));
        }
        if r.burst.is_some() && r.requests_per_minute.is_none() {
            return Err(at.field(
                "rate_limit",
                "`rate_limit.burst` is a burst of requests: it needs `requests_per_minute`".into(),
            ));
        }
    }
    let rate_limit = raw.and_then(|r| {
        let rpm = r.requests_per_minute?.0;
        Some((
            rpm,
            r.burst.map_or_else(|| Gcra::default_burst(rpm), |b| b.0),
        ))
    });
    let limits = levee_policy::allowance::Limits {
        requests_per_minute: rate_limit.map(|(rpm, _)| rpm),
        request_burst: rate_limit.map_or(1, |(_, b)| b),
        tokens_per_minute: raw.and_then(|r| r.tokens_per_minute).map(|t| t.0),
        input_tokens_per_minute: raw.and_then(|r| r.input_tokens_per_minute).map(|t| t.0),
        output_tokens_per_minute: raw.and_then(|r| r.output_tokens_per_minute).map(|t| t.0),
    };
    let allowance = rate_limit
        .map(|(rpm, burst)| Gcra::per_minute(rpm, burst))
        .transpose()
        .map_err(|source| {
            let provider = at.name.to_string();
            at.err("rate_limit", Problem::ProviderRate { provider, source })
        })?;
    Ok(Metering {
        rate_limit,
        limits,
        allowance,
    })
}

/// Refuses a key another key of the provider makes unused.
fn refuse_unused_keys(at: ProviderAt<'_>, p: &RawProvider) -> Result<(), ConfigError> {
    // A cap on HTTP/2 streams for a provider never spoken to over
    // HTTP/2 would be silently unused.
    if p.http2 == Some(Http2::Never) && p.http2_max_streams.is_some() {
        let problem = Problem::Http2MaxStreamsUnused(at.name.to_string());
        return Err(at.err("http2_max_streams", problem));
    }
    if p.auth == Some(crate::values::Auth::None) && p.api_key_env.is_some() {
        return Err(at.field(
            "auth",
            "`auth: none` sends no key, so `api_key_env` would be unused: remove one of them"
                .into(),
        ));
    }
    Ok(())
}

/// Refuses a `headers:` field that is no valid name or one of
/// [`RESERVED_FIELDS`].
fn check_headers(at: ProviderAt<'_>, p: &RawProvider) -> Result<(), ConfigError> {
    for (field, _) in p.headers.iter().flatten() {
        let lower = field.to_ascii_lowercase();
        let valid = http::HeaderName::from_bytes(lower.as_bytes()).is_ok();
        if !valid || RESERVED_FIELDS.contains(&lower.as_str()) {
            return Err(at.field("headers", format!("`headers`: `{field}` is not a field Levee can send (an invalid name, or one Levee writes itself)")));
        }
    }
    Ok(())
}

/// A provider from its raw fields and the core objects built for it.
fn provider(
    name: &str,
    p: &RawProvider,
    metering: Metering,
    breaker: levee_policy::CircuitBreaker,
    platform: Platform,
    base_url: http::Uri,
) -> Provider {
    let list_vendor = platform.list_vendor(p.api.dialect(), &base_url);
    Provider {
        name: name.to_string(),
        api: p.api.dialect(),
        platform,
        base_url,
        api_key_env: p.api_key_env.clone(),
        // Unset: sized from the allowance once the routes are known.
        max_in_flight: p.max_in_flight.map_or(u32::MAX, |m| m.0),
        max_in_flight_from: match p.max_in_flight {
            Some(_) => InFlightCap::Configured,
            None => InFlightCap::None,
        },
        rate_limit: metering.rate_limit,
        limits: metering.limits,
        shares: Vec::new(),
        allowance: metering.allowance,
        breaker,
        connect_timeout: p.connect_timeout.map_or(defaults::CONNECT_TIMEOUT, |d| d.0),
        http2: p.http2.unwrap_or_default(),
        http2_max_streams: p
            .http2_max_streams
            .map_or(defaults::HTTP2_MAX_STREAMS, |m| m.0),
        discount: p.discount.unwrap_or(0.0),
        max_connections: p.max_connections.map_or(defaults::MAX_CONNECTIONS, |m| m.0),
        retry_floor: None,
        auth: p.auth.clone().unwrap_or_else(|| p.api.key_auth()),
        headers: p
            .headers
            .iter()
            .flatten()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect(),
        query: p
            .query
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        list_vendor,
    }
}
