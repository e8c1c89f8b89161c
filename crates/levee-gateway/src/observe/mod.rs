//! Observation: what a request's life is told as (`event`, `outcome`) and
//! where it is written — Prometheus metrics (`metrics`, their histograms
//! recorded by each thread apart in `histogram`), the live caller census
//! (`census`), OpenTelemetry spans (`telemetry`), the `--record`
//! tape (`record`) — and the redaction of provider keys from all of them
//! (`redact`). Nothing here drives a request.

pub(crate) mod census;
pub(crate) mod event;
pub(crate) mod histogram;
pub(crate) mod live_secrets;
pub(crate) mod metrics;
pub(crate) mod outcome;
pub(crate) mod record;
pub(crate) mod redact;
pub(crate) mod shard;
pub(crate) mod telemetry;

#[cfg(test)]
mod deploy_tests;
