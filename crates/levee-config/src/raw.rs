//! The configuration exactly as users write it: stage one. Unknown keys are
//! refused (a typo is never silently ignored), and every single value checks
//! itself as it is read ([`crate::values`], [`crate::duration`]), so its
//! error carries the parser's line. Rules that span several keys are stage
//! two ([`crate::Config::from_raw`]).

use crate::duration::Dur;
use crate::values::{
    AtLeastOne, BackendKind, BaseUrl, Http2, ListenAddr, OnUnavailable, OtlpEndpoint, RedisUrl,
    Sha256Digest,
};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub listen: Option<ListenAddr>,
    pub admin: Option<RawAdmin>,
    pub shutdown_grace: Option<Dur>,
    pub limits: Option<RawLimits>,
    #[serde(default)]
    pub providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    #[serde(default)]
    pub callers: Vec<RawCaller>,
    #[serde(default)]
    pub keys: Vec<RawKey>,
    pub idempotency: Option<RawIdempotency>,
    pub state: Option<RawState>,
    pub telemetry: Option<RawTelemetry>,
    #[serde(default)]
    pub prices: Vec<RawPrice>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    pub provider: String,
    pub model: String,
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    pub cached_input_per_mtok: Option<f64>,
    pub cache_write_per_mtok: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: Option<ListenAddr>,
    /// Host names (a Kubernetes Service's) the admin listener answers to.
    pub allowed_hosts: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_body_bytes: Option<u64>,
    pub max_header_bytes: Option<usize>,
    pub header_read_timeout: Option<Dur>,
    pub body_read_timeout: Option<Dur>,
    /// The most caller names metrics keep as labels.
    pub caller_names: Option<AtLeastOne<usize>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProvider {
    pub api: crate::platform::ApiKind,
    /// Required except for `bedrock` and `vertex`, whose URL follows from
    /// the region.
    pub base_url: Option<BaseUrl>,
    pub api_key_env: Option<String>,
    pub max_in_flight: Option<AtLeastOne<u32>>,
    /// The most HTTP/1 connections to the provider at once.
    pub max_connections: Option<AtLeastOne<u32>>,
    pub rate_limit: Option<RawRateLimit>,
    pub circuit_breaker: Option<RawBreaker>,
    pub connect_timeout: Option<Dur>,
    pub http2: Option<Http2>,
    pub http2_max_streams: Option<AtLeastOne<u32>>,
    pub auth: Option<crate::values::Auth>,
    /// Extra header fields sent with every request to the provider.
    pub headers: Option<std::collections::BTreeMap<String, crate::values::ValueSource>>,
    /// Query parameters added to every request URI (Azure's `api-version`).
    pub query: Option<std::collections::BTreeMap<String, crate::values::ValueSource>>,
    /// Bedrock and Vertex: the cloud region.
    pub region: Option<String>,
    /// Vertex: the Google Cloud project.
    pub project: Option<String>,
    /// Azure: the deployments URL shape's `api-version`.
    pub api_version: Option<String>,
    /// Azure: a file holding an Entra ID bearer token.
    pub token_file: Option<std::path::PathBuf>,
    /// Bedrock: the shared credentials file; Vertex: a service-account key.
    pub credentials_file: Option<std::path::PathBuf>,
    /// Bedrock: the profile in the shared credentials file.
    pub profile: Option<String>,
    /// Vertex: the OAuth2 token endpoint (the key file's `token_uri` otherwise).
    pub token_url: Option<String>,
    /// The fraction taken off every price of this provider's models.
    pub discount: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    pub requests_per_minute: Option<AtLeastOne<u32>>,
    pub tokens_per_minute: Option<AtLeastOne<u64>>,
    pub input_tokens_per_minute: Option<AtLeastOne<u64>>,
    pub output_tokens_per_minute: Option<AtLeastOne<u64>>,
    pub burst: Option<AtLeastOne<u32>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    pub error_ratio: Option<f64>,
    pub window: Option<Dur>,
    pub min_requests: Option<u32>,
    pub open_for: Option<Dur>,
    pub half_open_probes: Option<u32>,
    pub probe_interval: Option<Dur>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    #[serde(rename = "match")]
    pub matcher: Option<RawMatch>,
    pub targets: Option<Vec<RawTarget>>,
    pub deadline: Option<RawDeadline>,
    pub expected_attempt_ms: Option<AtLeastOne<u64>>,
    pub retry: Option<RawRetry>,
    pub circuit_breaker: Option<RawBreaker>,
    pub max_in_flight: Option<AtLeastOne<u32>>,
    pub attempt_timeout: Option<Dur>,
    pub first_byte_timeout: Option<Dur>,
    pub stream_idle_timeout: Option<Dur>,
    /// Further provider paths this route carries unchanged (exact, or a
    /// prefix ending in `/`).
    pub passthrough: Option<Vec<String>>,
    /// The methods the passthrough paths take.
    pub passthrough_methods: Option<Vec<String>>,
    pub on_untranslatable: Option<crate::values::OnUntranslatable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMatch {
    pub model: Option<String>,
    pub models: Option<Vec<String>>,
    pub model_prefix: Option<String>,
    pub path: Option<String>,
}

/// `targets:` items: a provider's name, `{ provider, model,
/// expected_attempt_ms }`, or a balanced group `{ balance: [members],
/// strategy }` whose members have the first two forms and a `weight`.
#[derive(Debug)]
pub enum RawTarget {
    Name(String),
    Full(RawTargetFull),
}

// By hand rather than `untagged`: an untagged enum reports only "did not
// match any variant", losing what was wrong inside the mapping form.
impl<'de> Deserialize<'de> for RawTarget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawTarget;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a provider name, `{ provider: NAME, model: MODEL }` or `{ balance: [...] }`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawTarget, E> {
                Ok(RawTarget::Name(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawTarget, A::Error> {
                RawTargetFull::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawTarget::Full)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTargetFull {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub expected_attempt_ms: Option<AtLeastOne<u64>>,
    /// A balanced group's members.
    pub balance: Option<Vec<RawMember>>,
    pub strategy: Option<crate::values::BalanceStrategy>,
}

/// A balanced group's member: a provider's name, or `{ provider, model,
/// weight, expected_attempt_ms }`.
#[derive(Debug)]
pub enum RawMember {
    Name(String),
    Full(RawMemberFull),
}

impl<'de> Deserialize<'de> for RawMember {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawMember;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a provider name or `{ provider: NAME, model: MODEL, weight: 1 }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawMember, E> {
                Ok(RawMember::Name(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawMember, A::Error> {
                RawMemberFull::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawMember::Full)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMemberFull {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub expected_attempt_ms: Option<AtLeastOne<u64>>,
    /// The member's share of its group's traffic (default 1).
    pub weight: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDeadline {
    pub default: Option<Dur>,
    pub max: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    pub max_attempts: Option<u32>,
    pub on: Option<Vec<RawOn>>,
    pub backoff: Option<RawBackoff>,
    pub budget: Option<RawBudget>,
    pub respect_retry_after: Option<bool>,
    pub retry_after_cap: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawOn {
    Code(u16),
    Name(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackoff {
    pub base_ms: Option<u64>,
    pub multiplier: Option<f64>,
    pub max_ms: Option<u64>,
    pub jitter: Option<String>,
    pub schedule_ms: Option<Vec<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    pub ratio: Option<f64>,
    pub min_per_second: Option<f64>,
    pub window: Option<Dur>,
    /// Whether retries that rescued a request are refunded.
    pub refunds: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCaller {
    pub name: String,
    /// How long the caller waits for an answer (its client's timeout),
    /// for the census; none: not judged.
    pub deadline: Option<Dur>,
    /// Its weight in each provider's allowance and in-flight cap.
    pub share: Option<crate::values::Share>,
    pub priority: Option<crate::values::CallerPriority>,
    /// Relies on a route's fallback alone: `levee check --strict` does not
    /// fail it where its retry cannot start but the fallback can.
    pub fallback_only: Option<bool>,
    /// The models it may ask for (`*` at the end: any name so beginning).
    pub models: Option<Vec<String>>,
    pub limits: Option<RawCallerLimits>,
    pub budget: Option<RawSpendBudget>,
}

/// A caller's absolute limits over the last minute.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCallerLimits {
    pub requests_per_minute: Option<AtLeastOne<u64>>,
    pub tokens_per_minute: Option<AtLeastOne<u64>>,
}

/// A caller's spending budget.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpendBudget {
    pub usd: f64,
    pub per: crate::values::BudgetPer,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKey {
    pub name: Option<String>,
    pub sha256: Option<Sha256Digest>,
    pub env: Option<String>,
    /// An AWS-style key pair, for SigV4-signed requests: the access key id.
    pub access_key_id: Option<String>,
    /// The variable holding the pair's secret access key.
    pub secret_access_key_env: Option<String>,
    /// The key's caller's rules, as on a `callers:` entry.
    pub models: Option<Vec<String>>,
    pub limits: Option<RawCallerLimits>,
    pub budget: Option<RawSpendBudget>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdempotency {
    pub ttl: Option<Dur>,
    pub max_entries: Option<usize>,
    pub max_bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    pub backend: Option<BackendKind>,
    pub url: Option<RedisUrl>,
    pub key_prefix: Option<String>,
    pub replicas: Option<AtLeastOne<u32>>,
    pub timeout: Option<Dur>,
    pub on_unavailable: Option<OnUnavailable>,
    pub max_bytes: Option<u64>,
    /// TLS to Redis (with a `rediss://` URL).
    pub tls: Option<RawRedisTls>,
    /// The variable holding Redis's password (an ACL user's, with the user
    /// in the URL).
    pub password_env: Option<String>,
    /// `standalone`, `cluster` or `sentinel`.
    pub mode: Option<crate::model::RedisMode>,
    /// A cluster's seed nodes, or the sentinels.
    pub nodes: Option<Vec<RedisUrl>>,
    /// The primary's name the sentinels know.
    pub sentinel_master: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedisTls {
    pub ca_file: Option<std::path::PathBuf>,
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    pub otlp_endpoint: Option<OtlpEndpoint>,
}
