//! The open-loop load: when each logical request starts, and what one does
//! — sent to the first-choice replica (once more to the other when that one
//! sends no response), bounded by its deadline plus the straggler margin,
//! and classified by what came back.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, USER_AGENT};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use levee_wire::paths;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;

use super::progress::Progress;
use super::{chain, HttpClient, Record, STRAGGLER_MARGIN};
use crate::args::{Arrivals, Plan};
use crate::clock;

/// The start offsets of every request, in order. Bounded by the plan's
/// duration and [`crate::args::MAX_REQUESTS`].
pub(super) fn schedule(plan: &Plan) -> Vec<Duration> {
    let end = plan.duration.as_secs_f64();
    let cap = crate::args::MAX_REQUESTS as usize;
    match plan.arrivals {
        Arrivals::Even => {
            let n = ((plan.rate * end).ceil() as usize).min(cap);
            (0..n)
                .map(|i| Duration::from_secs_f64(i as f64 / plan.rate))
                .filter(|d| d.as_secs_f64() < end)
                .collect()
        }
        Arrivals::Poisson => {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(plan.seed);
            let mut t = 0.0f64;
            let mut out = Vec::new();
            while out.len() < cap {
                let u: f64 = rng.gen_range(f64::EPSILON..1.0);
                t += -u.ln() / plan.rate;
                if t >= end {
                    break;
                }
                out.push(Duration::from_secs_f64(t));
            }
            out
        }
    }
}

/// An answer's kind: `success`, the gateway's `x-levee-reason`, or
/// `http_<status>`.
fn classify(status: StatusCode, headers: &http::HeaderMap) -> String {
    if status.is_success() {
        return "success".to_owned();
    }
    match headers.get("x-levee-reason").and_then(|v| v.to_str().ok()) {
        Some(r) if !r.is_empty() && r.len() <= 64 => r.to_owned(),
        _ => format!("http_{}", status.as_u16()),
    }
}

/// The replicas callers use, in order, and which one they try first: as
/// `levee_client`, after a failover the replica that answered becomes the
/// first choice, so a replica that is down costs one failed connection per
/// failover, not one per request.
struct Replicas {
    urls: Vec<Arc<str>>,
    first: std::sync::atomic::AtomicUsize,
}

/// One logical request's answer.
struct Answer {
    /// `None` when unanswered.
    latency: Option<Duration>,
    kind: String,
    attempts: Option<u32>,
    error: Option<String>,
    idempotency: Option<String>,
    failed_over: bool,
}

/// What one logical request sends.
struct Call {
    body: Bytes,
    timeout_ms: u64,
    key: Option<String>,
}

/// The request for `call` to `url`, its deadline less `spent`.
fn build(url: &str, call: &Call, spent: Duration) -> Result<Request<Full<Bytes>>, http::Error> {
    // Like levee_client, a second attempt carries the deadline less what the first took.
    let left = call
        .timeout_ms
        .saturating_sub(u64::try_from(spent.as_millis()).unwrap_or(u64::MAX));
    let mut b = Request::post(url)
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, "levee-drill")
        .header("x-timeout-ms", left.to_string());
    if let Some(k) = &call.key {
        b = b.header("idempotency-key", k.as_str());
    }
    b.body(Full::new(call.body.clone()))
}

/// Sends `call` to the first-choice replica; when that one sends no
/// response at all (an error before any response head), once, at once, to
/// the next.
async fn send(
    client: &HttpClient,
    replicas: &Replicas,
    call: &Call,
    sent: Instant,
) -> Result<(http::Response<hyper::body::Incoming>, bool), String> {
    let n = replicas.urls.len();
    let first = replicas.first.load(Relaxed) % n;
    let req = build(&replicas.urls[first], call, Duration::ZERO).map_err(|e| chain(&e))?;
    let failed = match client.request(req).await {
        Ok(resp) => return Ok((resp, false)),
        Err(e) if n > 1 => chain(&e),
        Err(e) => return Err(chain(&e)),
    };
    let second = (first + 1) % n;
    let req = build(
        &replicas.urls[second],
        call,
        clock::now().duration_since(sent),
    )
    .map_err(|e| chain(&e))?;
    match client.request(req).await {
        Ok(resp) => {
            replicas.first.store(second, Relaxed);
            Ok((resp, true))
        }
        Err(e) => Err(format!("{}; before that: {failed}", chain(&e))),
    }
}

/// Sends `call` and waits for its whole answer, at most `patience`.
async fn one_request(
    client: HttpClient,
    replicas: Arc<Replicas>,
    call: Call,
    patience: Duration,
) -> Answer {
    let sent = clock::now();
    let mut failed_over = false;
    let answer = async {
        let resp = match send(&client, &replicas, &call, sent).await {
            Ok((r, over)) => {
                failed_over = over;
                r
            }
            Err(e) => return ("connection_error".to_owned(), None, Some(e), None),
        };
        let kind = classify(resp.status(), resp.headers());
        let text = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let attempts = text("x-levee-attempts").and_then(|v| v.trim().parse::<u32>().ok());
        let idempotency = text("x-levee-idempotency");
        match resp.into_body().collect().await {
            Ok(_) => (kind, attempts, None, idempotency),
            Err(e) => (
                "body_error".to_owned(),
                attempts,
                Some(chain(&e)),
                idempotency,
            ),
        }
    };
    let outcome = tokio::time::timeout(patience, answer).await;
    match outcome {
        Ok((kind, attempts, error, idempotency)) => Answer {
            latency: Some(clock::now().duration_since(sent)),
            kind,
            attempts,
            error,
            idempotency,
            failed_over,
        },
        Err(_) => Answer {
            latency: None,
            kind: "unanswered".to_owned(),
            attempts: None,
            error: None,
            idempotency: None,
            failed_over,
        },
    }
}
/// Starts every request on schedule (open loop); each reports on `tx`.
pub(super) async fn send_all(
    plan: &Plan,
    t0: Instant,
    offsets: &[Duration],
    load_client: HttpClient,
    tx: &mpsc::UnboundedSender<Record>,
    counters: &Progress,
    before: u64,
) {
    let replicas = Arc::new(Replicas {
        urls: std::iter::once(&plan.gateway)
            .chain(plan.failover.as_ref())
            .map(|t| Arc::from(t.url(paths::CHAT_COMPLETIONS)))
            .collect(),
        first: std::sync::atomic::AtomicUsize::new(0),
    });
    let patience = plan.timeout + STRAGGLER_MARGIN;
    let run_id = run_id(before);
    for (i, offset) in offsets.iter().enumerate() {
        let due = t0 + *offset;
        clock::sleep_until(due).await;
        let call = call_for(plan, &run_id, i);
        let key = call.key.clone();
        let (client, replicas, tx) = (load_client.clone(), replicas.clone(), tx.clone());
        counters.sent.fetch_add(1, Relaxed);
        tokio::spawn(async move {
            let now = clock::now();
            let (sent, lag) = (now.duration_since(t0), now.duration_since(due));
            let a = one_request(client, replicas, call, patience).await;
            let _ = tx.send(Record {
                sent,
                lag,
                latency: a.latency,
                kind: a.kind,
                attempts: a.attempts,
                error: a.error,
                idempotency: a.idempotency,
                failed_over: a.failed_over,
                key,
            });
        });
    }
}

/// The run's id in its idempotency keys: unique across runs against one
/// mock (its counter only grows).
pub(super) fn run_id(before: u64) -> String {
    format!("{}-{before}", std::process::id())
}

/// What request `i` of the run sends: the same body and key each time it
/// is made.
fn call_for(plan: &Plan, run_id: &str, i: usize) -> Call {
    let body = serde_json::json!({
        "model": plan.model,
        "max_tokens": 16,
        "messages": [{ "role": "user", "content": format!("levee drill request {i}") }],
    });
    Call {
        body: Bytes::from(body.to_string()),
        timeout_ms: u64::try_from(plan.timeout.as_millis()).unwrap_or(u64::MAX),
        key: plan.keyed().then(|| format!("levee-drill-{run_id}-{i}")),
    }
}

/// What sending one key again found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recheck {
    /// Keys answered before the kill and sent again.
    pub checked: u64,
    /// Answered again without `x-levee-replayed: true`: the key ran twice.
    pub ran_twice: u64,
    /// Not answered (with success) the second time.
    pub unanswered: u64,
}

/// Sends again (one at a time, at most 500) every key whose answer (a
/// success) was complete before `until`: a stored answer comes back
/// replayed; any other success means the key ran a second time. (A key
/// answered after the kill may never have been stored: the store was gone
/// when its answer was.)
pub(super) async fn recheck(
    plan: &Plan,
    records: &[Record],
    run_id: &str,
    until: Duration,
) -> Recheck {
    let client = super::new_client(Some(super::CONTROL_TIMEOUT));
    let url = plan.gateway.url(paths::CHAT_COMPLETIONS);
    let mut out = Recheck::default();
    let prefix = format!("levee-drill-{run_id}-");
    let answered = records
        .iter()
        .filter(|r| r.kind == "success" && r.latency.is_some_and(|l| r.sent + l < until))
        .filter_map(|r| {
            r.key
                .as_deref()?
                .strip_prefix(&prefix)?
                .parse::<usize>()
                .ok()
        });
    for i in answered.take(500) {
        let call = call_for(plan, run_id, i);
        out.checked += 1;
        let Ok(req) = build(&url, &call, Duration::ZERO) else {
            out.unanswered += 1;
            continue;
        };
        let resp = tokio::time::timeout(plan.timeout + STRAGGLER_MARGIN, client.request(req)).await;
        match resp {
            Ok(Ok(r)) if r.status().is_success() => {
                let replayed = r
                    .headers()
                    .get("x-levee-replayed")
                    .is_some_and(|v| v == "true");
                let _ = r.into_body().collect().await;
                if !replayed {
                    out.ran_twice += 1;
                }
            }
            _ => out.unanswered += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::DrillArgs;

    fn plan(arrivals: Arrivals) -> Plan {
        DrillArgs {
            gateway: "http://127.0.0.1:1".into(),
            mock: "http://127.0.0.1:2".into(),
            rate: 100.0,
            duration: "4s".into(),
            faults: vec![],
            json: true,
            plot: None,
            timeout_ms: 1000,
            seed: 9,
            arrivals,
            model: "m".into(),
            answer_usd: 0.006,
            gateway_admin: None,
            exercise: Default::default(),
        }
        .plan()
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn even_schedule_is_exact_and_poisson_is_seeded_with_the_same_mean() {
        let even = schedule(&plan(Arrivals::Even));
        assert_eq!(even.len(), 400);
        assert_eq!(even[1], Duration::from_millis(10));
        let a = schedule(&plan(Arrivals::Poisson));
        let b = schedule(&plan(Arrivals::Poisson));
        assert_eq!(a, b);
        assert!((320..480).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert!(a.iter().all(|d| *d < Duration::from_secs(4)));
    }

    #[test]
    fn outcome_kinds() {
        let mut h = http::HeaderMap::new();
        assert_eq!(classify(StatusCode::OK, &h), "success");
        assert_eq!(classify(StatusCode::BAD_GATEWAY, &h), "http_502");
        h.insert(
            "x-levee-reason",
            http::HeaderValue::from_static("circuit_open"),
        );
        assert_eq!(
            classify(StatusCode::SERVICE_UNAVAILABLE, &h),
            "circuit_open"
        );
    }
}
