//! Control requests: the mock's stats and fault set, and whether a server
//! accepts connections at all. Each is bounded by the control timeout.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, USER_AGENT};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use levee_wire::{paths, stats::Stats};
use tokio::sync::watch;

use super::progress::Progress;
use super::{chain, HttpClient, Sample, CONTROL_TIMEOUT, POLL_EVERY, STRAGGLER_MARGIN};
use crate::args::Plan;
use crate::clock;
use crate::error::DrillError;
use crate::target::Target;

/// One control request, its answer's status and body read in full.
async fn control(
    client: &HttpClient,
    method: Method,
    url: &str,
    body: Bytes,
) -> Result<(StatusCode, Bytes), String> {
    let req = Request::builder()
        .method(method)
        .uri(url)
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, "levee-drill")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let fut = async {
        let resp = client.request(req).await.map_err(|e| chain(&e))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| chain(&e))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(CONTROL_TIMEOUT, fut)
        .await
        .map_err(|_| format!("no answer within {CONTROL_TIMEOUT:?}"))?
}

/// The mock's stats.
async fn stats(client: &HttpClient, plan: &Plan) -> Result<Stats, String> {
    let url = plan.mock.url(paths::MOCK_STATS);
    let (status, body) = control(client, Method::GET, &url, Bytes::new()).await?;
    if !status.is_success() {
        return Err(format!("GET /_mock/stats answered {status}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("these are not `levee mock` stats: {e}"))
}

/// The mock's `requests_total`.
pub(super) async fn upstream_total(client: &HttpClient, plan: &Plan) -> Result<u64, String> {
    Ok(stats(client, plan).await?.requests_total)
}

/// Each result's count in the gateway's
/// `levee_upstream_attempts_total{provider,result}` (its admin listener's
/// `/metrics`), summed over providers.
pub(super) async fn attempt_results(
    client: &HttpClient,
    admin: &Target,
) -> Result<std::collections::BTreeMap<String, u64>, String> {
    let (status, body) = control(client, Method::GET, &admin.url("/metrics"), Bytes::new()).await?;
    if !status.is_success() {
        return Err(format!("GET /metrics answered {status}"));
    }
    let mut out = std::collections::BTreeMap::new();
    for line in String::from_utf8_lossy(&body).lines() {
        let Some(rest) = line.strip_prefix("levee_upstream_attempts_total{") else {
            continue;
        };
        let result = rest
            .split("result=\"")
            .nth(1)
            .and_then(|r| r.split('"').next());
        let n = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(result), Some(n)) = (result, n) {
            *out.entry(result.to_string()).or_insert(0) += n as u64;
        }
    }
    Ok(out)
}

/// The answers the mock has generated (its 2xx): what a provider bills,
/// whoever reads them. A request whose client left before its answer was
/// made (a gateway that stops an attempt its caller left) is not one.
pub(super) async fn answered_total(client: &HttpClient, plan: &Plan) -> Result<u64, String> {
    let s = stats(client, plan).await?;
    Ok(s.by_status
        .iter()
        .filter(|(code, _)| code.starts_with('2'))
        .map(|(_, n)| *n)
        .sum())
}

/// Replaces the mock's fault set with `doc`.
pub(super) async fn set_faults(
    client: &HttpClient,
    plan: &Plan,
    doc: &serde_json::Value,
) -> Result<(), DrillError> {
    let url = plan.mock.url(paths::MOCK_FAULTS);
    let text = doc.to_string();
    let (status, body) = control(client, Method::POST, &url, Bytes::from(text.clone()))
        .await
        .map_err(|reason| DrillError::MockUnreachable {
            url: url.clone(),
            reason,
        })?;
    if status.is_success() {
        return Ok(());
    }
    let reason = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("status {status}: {}", String::from_utf8_lossy(&body)));
    Err(DrillError::FaultRejected { doc: text, reason })
}

/// A TCP connection to `target` opens within the control timeout.
pub(super) async fn reachable(target: &Target) -> Result<(), DrillError> {
    match tokio::time::timeout(CONTROL_TIMEOUT, tokio::net::TcpStream::connect(target.addr)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(DrillError::GatewayUnreachable {
            addr: target.base.clone(),
            reason: e.to_string(),
        }),
        Err(_) => Err(DrillError::GatewayUnreachable {
            addr: target.base.clone(),
            reason: format!("no connection within {CONTROL_TIMEOUT:?}"),
        }),
    }
}

/// Reads the mock's count every [`POLL_EVERY`] until told to stop (one
/// last reading then), or past every straggler's deadline; returns the
/// readings and how many polls failed.
pub(super) async fn poll(
    client: HttpClient,
    plan: Plan,
    t0: Instant,
    before: u64,
    mut stop: watch::Receiver<bool>,
    counters: Arc<Progress>,
) -> (Vec<Sample>, u64) {
    let mut samples = vec![Sample {
        at: Duration::ZERO,
        upstream: 0,
    }];
    let mut failures = 0;
    // Bounded: the run plus every straggler's patience plus slack.
    let limit = plan.duration + plan.timeout + STRAGGLER_MARGIN + Duration::from_secs(10);
    let mut tick = tokio::time::interval(POLL_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let last = *stop.borrow();
        let at = clock::now().duration_since(t0);
        match upstream_total(&client, &plan).await {
            Ok(total) => {
                let upstream = total.saturating_sub(before);
                counters.upstream.store(upstream, Relaxed);
                samples.push(Sample { at, upstream });
            }
            Err(_) => failures += 1,
        }
        if last || at > limit {
            break;
        }
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => {}
        }
    }
    (samples, failures)
}
