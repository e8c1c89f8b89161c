//! The scenario file as written (stage one): serde's view of the YAML,
//! unknown keys refused, nothing checked yet.

use levee_config::duration::Dur;
use levee_config::raw::{RawBackoff, RawConfig, RawOn};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub(super) name: Option<String>,
    #[allow(dead_code)]
    pub(super) description: Option<String>,
    pub(super) duration: Dur,
    pub(super) resolution: Option<Dur>,
    pub(super) drain: Option<Dur>,
    pub(super) arrivals: Vec<RawStream>,
    pub(super) providers: BTreeMap<String, RawProviderModel>,
    pub(super) variants: Vec<RawVariant>,
    pub(super) price: Option<RawAnswerPrice>,
}

/// What the provider bills, per million tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAnswerPrice {
    pub(super) input_per_mtok: f64,
    pub(super) output_per_mtok: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStream {
    pub(super) name: String,
    pub(super) rate: Option<f64>,
    pub(super) per_minute: Option<f64>,
    pub(super) trace: Option<String>,
    pub(super) burst: Option<u64>,
    pub(super) at: Option<Dur>,
    pub(super) process: Option<String>,
    pub(super) from: Option<Dur>,
    pub(super) to: Option<Dur>,
    pub(super) model: Option<String>,
    pub(super) path: Option<String>,
    pub(super) provider: Option<String>,
    pub(super) caller: Option<String>,
    pub(super) input_tokens: Option<u32>,
    pub(super) max_tokens: Option<u32>,
    pub(super) output_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawDist {
    Fixed(Dur),
    Shape(RawDistShape),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDistShape {
    pub(super) p50: Option<Dur>,
    pub(super) p99: Option<Dur>,
    pub(super) min: Option<Dur>,
    pub(super) max: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProviderModel {
    pub(super) workers: u32,
    pub(super) queue: Option<u32>,
    pub(super) latency: RawDist,
    pub(super) overload: Option<RawOverload>,
    pub(super) reject_latency: Option<Dur>,
    pub(super) rate_limit: Option<RawRate>,
    pub(super) reports_remaining: Option<bool>,
    #[serde(default)]
    pub(super) faults: Vec<RawFault>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOverload {
    pub(super) status: u16,
    pub(super) retry_after: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRate {
    pub(super) requests_per_minute: Option<u32>,
    pub(super) burst: Option<u32>,
    pub(super) tokens_per_minute: Option<u64>,
    pub(super) input_tokens_per_minute: Option<u64>,
    pub(super) output_tokens_per_minute: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFault {
    pub(super) status: u16,
    pub(super) retry_after: Option<Dur>,
    pub(super) from: Option<Dur>,
    pub(super) to: Option<Dur>,
    pub(super) rate: Option<f64>,
    pub(super) model: Option<String>,
    pub(super) latency: Option<RawDist>,
    pub(super) occupies_worker: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVariant {
    pub(super) name: String,
    #[serde(default)]
    pub(super) callers: Vec<RawLayer>,
    /// Per stream name: its own caller layers, in place of `callers:`.
    #[serde(default)]
    pub(super) stacks: BTreeMap<String, Vec<RawLayer>>,
    pub(super) gateway: Option<RawGateway>,
}

/// `naive:` or `levee:` (exactly one).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGateway {
    pub(super) naive: Option<RawLayer>,
    pub(super) levee: Option<Box<RawConfig>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLayer {
    pub(super) name: Option<String>,
    pub(super) attempts: u32,
    pub(super) backoff: Option<RawBackoff>,
    pub(super) timeout: Option<Dur>,
    pub(super) retry_on: Option<Vec<RawOn>>,
    pub(super) honours_should_retry: Option<bool>,
    pub(super) honours_retry_after: Option<bool>,
    pub(super) workers: Option<u32>,
    pub(super) stops_when_caller_leaves: Option<bool>,
    pub(super) sends_timeout: Option<bool>,
    pub(super) marks_retries: Option<bool>,
}
