//! Stage two: the raw configuration checked as a whole and turned into
//! [`Config`] — defaults filled in (the core's own, or [`crate::defaults`]),
//! the core's objects built, provider caps derived from the routes.

use crate::defaults;
use crate::error::{ConfigError, Problem, Source};
use crate::locate::Seg::{self, Index, Key};
use crate::model::{
    derived_max_in_flight, CallerKey, IdempotencySettings, InFlightCap, Limits, Platform, Provider,
    Route, StateBackend, Telemetry,
};
use crate::raw::{
    RawConfig, RawIdempotency, RawKey, RawLimits, RawProvider, RawRateLimit, RawRoute, RawState,
};
use crate::values::{Api, ApiKind, BackendKind, Http2};
use crate::{Caller, Config, BUILTIN_MOCK, BUILTIN_MOCK_ANTHROPIC};
use levee_policy::admission::Gcra;
use levee_policy::BreakerSettings;
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
            // The built-in mock answers both dialects natively: one provider
            // for each, both pointed at it, so an Anthropic caller's
            // `thinking` or server tools reach it untranslated.
            (
                vec![
                    builtin_mock_provider(BUILTIN_MOCK, Api::OpenAi),
                    builtin_mock_provider(BUILTIN_MOCK_ANTHROPIC, Api::Anthropic),
                ],
                vec![BreakerSettings::default(), BreakerSettings::default()],
            )
        } else {
            providers(src, &raw)?
        };
        let default_route = [RawRoute::default()];
        // With the built-in mock and no routes: Anthropic's path to its
        // Anthropic face, everything else to the first provider.
        let builtin_routes = [
            RawRoute {
                matcher: Some(crate::raw::RawMatch {
                    model_prefix: None,
                    path: Some("/v1/messages".to_string()),
                }),
                targets: Some(vec![crate::raw::RawTarget::Name(
                    BUILTIN_MOCK_ANTHROPIC.to_string(),
                )]),
                ..RawRoute::default()
            },
            RawRoute::default(),
        ];
        // No routes: every model, every path, to the first provider.
        let raw_routes = if !raw.routes.is_empty() {
            &raw.routes[..]
        } else if builtin_mock {
            &builtin_routes[..]
        } else {
            &default_route[..]
        };
        let routes =
            crate::route::resolve_routes(src, raw_routes, &mut providers, declared, builtin_mock)?;
        derive_in_flight_caps(&mut providers, &routes);
        // Shares weigh every caller once any caller has one (1 by default).
        if raw.callers.iter().any(|c| c.share.is_some()) {
            let weights: Vec<f64> = raw
                .callers
                .iter()
                .map(|c| c.share.map_or(1.0, |s| s.0))
                .collect();
            for p in &mut providers {
                p.shares = weights.clone();
            }
        }
        Ok(Config {
            listen: addr(raw.listen.map(|a| a.0), defaults::LISTEN),
            admin_listen: addr(
                raw.admin.and_then(|a| a.listen).map(|a| a.0),
                defaults::ADMIN_LISTEN,
            ),
            shutdown_grace: raw.shutdown_grace.map_or(defaults::SHUTDOWN_GRACE, |d| d.0),
            limits: limits(src, raw.limits.as_ref())?,
            providers,
            routes,
            callers: raw
                .callers
                .iter()
                .map(|c| Caller {
                    name: c.name.clone(),
                    deadline: c.deadline.0,
                    share: c.share.map(|s| s.0),
                    priority: c.priority.map(|p| p.0).unwrap_or_default(),
                })
                .collect(),
            keys: keys(src, &raw.keys)?,
            idempotency: idempotency(src, raw.idempotency.as_ref())?,
            state: state(src, raw.state.as_ref())?,
            builtin_mock,
            telemetry: Telemetry {
                otlp_endpoint: raw.telemetry.and_then(|t| t.otlp_endpoint).map(|e| e.0),
            },
        })
    }
}

fn addr(v: Option<SocketAddr>, default: ([u8; 4], u16)) -> SocketAddr {
    v.unwrap_or_else(|| SocketAddr::from(default))
}

fn limits(src: Source<'_>, raw: Option<&RawLimits>) -> Result<Limits, ConfigError> {
    let d = Limits::default();
    let Some(l) = raw else { return Ok(d) };
    if l.max_header_bytes.is_some_and(|n| n < MIN_HEADER_BYTES) {
        let path = [Key("limits"), Key("max_header_bytes")];
        return Err(ConfigError::at(src, &path, Problem::HeaderLimitTooSmall));
    }
    Ok(Limits {
        max_body_bytes: l.max_body_bytes.unwrap_or(d.max_body_bytes),
        max_header_bytes: l.max_header_bytes.unwrap_or(d.max_header_bytes),
        header_read_timeout: l.header_read_timeout.map_or(d.header_read_timeout, |t| t.0),
        body_read_timeout: l.body_read_timeout.map_or(d.body_read_timeout, |t| t.0),
    })
}

/// The smallest `limits.max_header_bytes`: the official SDKs' own fields
/// come to ~700 bytes, so a smaller limit refuses every SDK request.
const MIN_HEADER_BYTES: usize = 1024;

/// A provider used when none is configured; the caller points it at a
/// running mock ([`Config::set_builtin_mock_addr`]).
fn builtin_mock_provider(name: &str, api: Api) -> Provider {
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
        auth: default_auth(api),
        headers: Vec::new(),
        query: Vec::new(),
    }
}

/// How each dialect's own SDK sends its key.
fn default_auth(api: Api) -> crate::values::Auth {
    match api {
        Api::OpenAi => crate::values::Auth::Bearer,
        Api::Anthropic => crate::values::Auth::Header("x-api-key".into()),
    }
}

/// How each kind's own SDK sends a key from `api_key_env`: Azure's
/// `api-key`, Gemini's bearer, Vertex's bearer token.
fn kind_auth(kind: ApiKind) -> crate::values::Auth {
    match kind {
        ApiKind::Azure => crate::values::Auth::Header("api-key".into()),
        ApiKind::Bedrock => crate::values::Auth::None,
        // An OAuth2 access token, whichever dialect the endpoint speaks.
        ApiKind::Vertex | ApiKind::VertexOpenAi => crate::values::Auth::Bearer,
        other => default_auth(other.dialect()),
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
fn providers(
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
    let (platform, base_url) = platform(p).map_err(|(key, problem)| at.field(key, problem))?;
    let built = provider(at.name, p, metering, breaker, platform, base_url);
    Ok((built, settings))
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

/// The default Gemini API base URL (its OpenAI-compatible endpoint).
const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta/openai";

/// A refusal of a provider's key: the key at fault and the problem.
type KeyProblem = (&'static str, String);

/// A provider's platform and base URL from its `api` and the keys that go
/// with it; `Err` names the key at fault and the problem.
fn platform(p: &RawProvider) -> Result<(Platform, http::Uri), KeyProblem> {
    check_cloud_keys(p)?;
    Ok(match p.api {
        ApiKind::OpenAi => (Platform::Direct, needs_url(p, "https://api.openai.com/v1")?),
        ApiKind::Anthropic => (Platform::Direct, needs_url(p, "https://api.anthropic.com")?),
        ApiKind::Azure => azure(p)?,
        ApiKind::Gemini => (
            Platform::Gemini,
            written_url(p).unwrap_or_else(|| http::Uri::from_static(GEMINI_BASE_URL)),
        ),
        ApiKind::Bedrock => bedrock(p)?,
        ApiKind::Vertex | ApiKind::VertexOpenAi => vertex(p)?,
    })
}

/// Refuses a cloud key set for a kind it does not belong to.
fn check_cloud_keys(p: &RawProvider) -> Result<(), KeyProblem> {
    // Each cloud key, with the kinds it belongs to.
    let keys: [(&'static str, bool, &[ApiKind]); 7] = [
        (
            "region",
            p.region.is_some(),
            &[ApiKind::Bedrock, ApiKind::Vertex, ApiKind::VertexOpenAi],
        ),
        (
            "project",
            p.project.is_some(),
            &[ApiKind::Vertex, ApiKind::VertexOpenAi],
        ),
        ("api_version", p.api_version.is_some(), &[ApiKind::Azure]),
        ("token_file", p.token_file.is_some(), &[ApiKind::Azure]),
        (
            "credentials_file",
            p.credentials_file.is_some(),
            &[ApiKind::Bedrock, ApiKind::Vertex, ApiKind::VertexOpenAi],
        ),
        ("profile", p.profile.is_some(), &[ApiKind::Bedrock]),
        (
            "token_url",
            p.token_url.is_some(),
            &[ApiKind::Vertex, ApiKind::VertexOpenAi],
        ),
    ];
    for (key, set, kinds) in keys {
        if set && !kinds.contains(&p.api) {
            let belongs: Vec<&str> = kinds.iter().map(|k| k.word()).collect();
            return Err((
                key,
                format!(
                    "`{key}` is for `api: {}` providers, not `api: {}`",
                    belongs.join("` or `api: "),
                    p.api.word()
                ),
            ));
        }
    }
    Ok(())
}

/// The provider's written `base_url`, if any.
fn written_url(p: &RawProvider) -> Option<http::Uri> {
    p.base_url.as_ref().map(|b| b.0.clone())
}

/// The written `base_url` of a kind with no default one; `example` is the
/// one the refusal suggests.
fn needs_url(p: &RawProvider, example: &str) -> Result<http::Uri, KeyProblem> {
    written_url(p).ok_or_else(|| {
        let word = p.api.word();
        (
            "base_url",
            format!("`api: {word}` needs `base_url` (e.g. `{example}`)"),
        )
    })
}

/// The value of a cloud key the provider's kind cannot do without, trimmed;
/// missing or blank is refused with an example value.
fn required(p: &RawProvider, key: &'static str, v: &Option<String>) -> Result<String, KeyProblem> {
    match v.as_deref().map(str::trim) {
        Some(v) if !v.is_empty() => Ok(v.to_string()),
        _ => Err((
            key,
            format!(
                "`api: {}` needs `{key}` (e.g. `{key}: {}`)",
                p.api.word(),
                match key {
                    "region" if p.api == ApiKind::Bedrock => "us-east-1",
                    "region" => "us-east5",
                    _ => "my-project",
                }
            ),
        )),
    }
}

/// A base URL built from the region; one that makes no URL is refused at
/// `region`.
fn region_url(s: String) -> Result<http::Uri, KeyProblem> {
    s.parse().map_err(|_| {
        (
            "region",
            format!("`{s}` is not a URL: is the region a plain name like `us-east-1`?"),
        )
    })
}

/// An `api: azure` provider's platform and base URL.
fn azure(p: &RawProvider) -> Result<(Platform, http::Uri), KeyProblem> {
    if p.token_file.is_some() && p.api_key_env.is_some() {
        return Err(("token_file", "`token_file` (an Entra ID token) and `api_key_env` (an API key) both authenticate: keep one".into()));
    }
    Ok((
        Platform::Azure {
            api_version: p.api_version.clone(),
            token_file: p.token_file.clone(),
        },
        needs_url(p, "https://my-resource.openai.azure.com")?,
    ))
}

/// An `api: bedrock` provider's platform and base URL (from the region
/// unless written).
fn bedrock(p: &RawProvider) -> Result<(Platform, http::Uri), KeyProblem> {
    if p.auth.is_some() || p.api_key_env.is_some() {
        let key = if p.auth.is_some() {
            "auth"
        } else {
            "api_key_env"
        };
        return Err((key, format!("`api: bedrock` signs requests with AWS credentials (the AWS_* environment variables or the shared credentials file): remove `{key}`")));
    }
    let region = required(p, "region", &p.region)?;
    let base = match written_url(p) {
        Some(u) => u,
        None => region_url(format!("https://bedrock-runtime.{region}.amazonaws.com"))?,
    };
    Ok((
        Platform::Bedrock {
            region,
            profile: p.profile.clone(),
            credentials_file: p.credentials_file.clone(),
        },
        base,
    ))
}

/// An `api: vertex` or `api: vertex-openai` provider's platform and base URL
/// (from the region unless written).
fn vertex(p: &RawProvider) -> Result<(Platform, http::Uri), KeyProblem> {
    let region = required(p, "region", &p.region)?;
    let project = required(p, "project", &p.project)?;
    let base = match written_url(p) {
        Some(u) => u,
        None if region == "global" => http::Uri::from_static("https://aiplatform.googleapis.com"),
        None => region_url(format!("https://{region}-aiplatform.googleapis.com"))?,
    };
    Ok((
        Platform::Vertex {
            project,
            region,
            credentials_file: p.credentials_file.clone(),
            token_url: p.token_url.clone(),
            openai: p.api == ApiKind::VertexOpenAi,
        },
        base,
    ))
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
        auth: p.auth.clone().unwrap_or_else(|| kind_auth(p.api)),
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
    }
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

fn keys(src: Source<'_>, raw: &[RawKey]) -> Result<Vec<CallerKey>, ConfigError> {
    let mut keys = Vec::with_capacity(raw.len());
    for (i, k) in raw.iter().enumerate() {
        let name = k.name.clone().unwrap_or_else(|| format!("key{}", i + 1));
        keys.push(match (&k.sha256, &k.env) {
            (Some(d), None) => CallerKey::Sha256 { name, digest: d.0 },
            (None, Some(var)) => CallerKey::Env {
                name,
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
        ];
        return match set.iter().find(|(_, is_set)| *is_set) {
            Some((key, _)) => {
                let path = [Key("state"), Key(key)];
                Err(ConfigError::at(src, &path, Problem::RedisOnly(key)))
            }
            None => Ok(StateBackend::Memory),
        };
    }
    Ok(StateBackend::Redis {
        url: s
            .url
            .as_ref()
            .map_or_else(|| defaults::REDIS_URL.to_string(), |u| u.0.clone()),
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
