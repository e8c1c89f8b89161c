//! The live part: set the faults, start requests on schedule (open loop),
//! poll the mock's stats, wait for stragglers, clear the faults.

use levee_wire::{paths, stats::Stats};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, USER_AGENT};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch};

use crate::args::{Arrivals, Plan};
use crate::clock;
use crate::error::DrillError;

/// How long past its deadline the drill waits for a request's answer before
/// counting it unanswered.
pub const STRAGGLER_MARGIN: Duration = Duration::from_secs(2);
/// How often the mock's stats are read.
pub const POLL_EVERY: Duration = Duration::from_millis(100);
/// Timeout of one control request to the mock.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(2);

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// What happened to one logical request.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// When it was sent, since the drill's start.
    pub sent: Duration,
    /// How late it was sent relative to its schedule.
    pub lag: Duration,
    /// Time to the complete answer; `None` when unanswered.
    pub latency: Option<Duration>,
    /// `success`, the gateway's `x-levee-reason`, `http_<status>` (an error
    /// without a reason), `connection_error`, or `unanswered`.
    pub kind: String,
    /// The `x-levee-attempts` header, when present and a number.
    pub attempts: Option<u32>,
    /// What the client saw when there was no HTTP answer (`connection_error`,
    /// `body_error`): the error and its causes.
    pub error: Option<String>,
    /// The `x-levee-idempotency` header (`local`: the keyed request could
    /// not be deduplicated across replicas; `rerun`).
    pub idempotency: Option<String>,
    /// The first replica sent no response and the second was asked.
    pub failed_over: bool,
}

/// One reading of the mock's `requests_total`, since the drill's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub at: Duration,
    /// Provider requests since the drill started (the mock's counter minus
    /// its value at the start).
    pub upstream: u64,
}

/// Everything the live run measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub records: Vec<Record>,
    pub samples: Vec<Sample>,
    /// Stats polls that failed (missing points in the series).
    pub poll_failures: u64,
    /// Whether clearing the faults at the end failed (the mock keeps them).
    pub clear_failed: Option<String>,
    /// When the state store was paused (since the start), or why it was not.
    pub paused: Option<Result<Duration, String>>,
    /// When the replica was stopped (since the start), or why it was not.
    pub stopped: Option<Result<Duration, String>>,
}

/// Stops a replica when awaited (a signal to its process, or whatever a
/// library caller passes); `Err` says why it could not.
pub type StopHook = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

/// Sends `signal` to `pid` (`kill -TERM PID`).
pub fn signal_hook(pid: u32, signal: crate::args::StopSignal) -> StopHook {
    Box::pin(async move {
        let flag = match signal {
            crate::args::StopSignal::Term => "-TERM",
            crate::args::StopSignal::Kill => "-KILL",
        };
        let status = tokio::task::spawn_blocking(move || {
            std::process::Command::new("kill")
                .args([flag, &pid.to_string()])
                .status()
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot run kill: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "kill {flag} {pid} failed ({status}): is that the replica's PID?"
            ))
        }
    })
}

/// The replicas callers use, in order, and which one they try first: as
/// `levee_client`, after a failover the replica that answered becomes the
/// first choice, so a replica that is down costs one failed connection per
/// failover, not one per request.
struct Replicas {
    urls: Vec<Arc<str>>,
    first: std::sync::atomic::AtomicUsize,
}

/// A connection to the state store, opened before the run so that a wrong
/// URL stops the drill before any load.
async fn connect_state(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    tokio::time::timeout(CONTROL_TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| format!("no connection within {CONTROL_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())
}

/// `CLIENT PAUSE ms ALL`: every client's commands wait until it ends.
async fn pause_state(
    mut conn: redis::aio::MultiplexedConnection,
    length: Duration,
) -> Result<(), String> {
    let ms = u64::try_from(length.as_millis()).unwrap_or(u64::MAX);
    let cmd = redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("ALL").clone();
    tokio::time::timeout(CONTROL_TIMEOUT, cmd.query_async::<()>(&mut conn))
        .await
        .map_err(|_| format!("CLIENT PAUSE got no answer within {CONTROL_TIMEOUT:?}"))?
        .map_err(|e| format!("CLIENT PAUSE failed: {e}"))
}

/// Idle pooled connections are dropped after this: below the gateway's own
/// idle close (its 10 s `header_read_timeout`), so the drill never reuses a
/// connection the server is closing at that moment. That race is a client
/// artefact, not an outcome of the gateway's retry policy.
const POOL_IDLE: Duration = Duration::from_secs(4);

/// The control client (mock stats and faults) gives up connecting after
/// [`CONTROL_TIMEOUT`]; the load client has no connect timeout of its own:
/// a slow connect is part of the latency each request's deadline bounds.
fn new_client(connect_timeout: Option<Duration>) -> HttpClient {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(connect_timeout);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .build(http)
}

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

async fn upstream_total(client: &HttpClient, plan: &Plan) -> Result<u64, String> {
    let url = plan.mock.url(paths::MOCK_STATS);
    let (status, body) = control(client, Method::GET, &url, Bytes::new()).await?;
    if !status.is_success() {
        return Err(format!("GET /_mock/stats answered {status}"));
    }
    let stats: Stats = serde_json::from_slice(&body)
        .map_err(|e| format!("these are not `levee mock` stats: {e}"))?;
    Ok(stats.requests_total)
}

async fn set_faults(
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

/// The start offsets of every request, in order. Bounded by the plan's
/// duration and [`crate::args::MAX_REQUESTS`].
pub fn schedule(plan: &Plan) -> Vec<Duration> {
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

fn classify(status: StatusCode, headers: &http::HeaderMap) -> String {
    if status.is_success() {
        return "success".to_owned();
    }
    match headers.get("x-levee-reason").and_then(|v| v.to_str().ok()) {
        Some(r) if !r.is_empty() && r.len() <= 64 => r.to_owned(),
        _ => format!("http_{}", status.as_u16()),
    }
}

/// An error and its chain of causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    // Bounded: error chains are short, but never trust a cycle.
    for _ in 0..8 {
        let Some(c) = cause else { break };
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
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

/// Progress counters shared with the progress printer.
#[derive(Default)]
struct Progress {
    sent: AtomicU64,
    answered: AtomicU64,
    upstream: AtomicU64,
}

/// Runs the drill against live servers and returns the raw measurements.
/// `stop` stops the replica at the plan's `stop.at` (by default the signal
/// to `--stop-pid`).
pub async fn run(
    plan: &Plan,
    progress: bool,
    stop: Option<StopHook>,
) -> Result<Measured, DrillError> {
    let client = new_client(Some(CONTROL_TIMEOUT));
    let before = preflight(&client, plan).await?;
    let (state, stop) = prepare_exercises(plan, stop).await?;
    let offsets = schedule(plan);
    // The fault windows count from this POST: it is the drill's time zero.
    set_faults(&client, plan, &plan.fault_doc).await?;
    let t0 = clock::now();

    let counters = Arc::new(Progress::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let poller = tokio::spawn(poll(
        client.clone(),
        plan.clone(),
        t0,
        before,
        stop_rx.clone(),
        counters.clone(),
    ));
    let printer = progress.then(|| {
        tokio::spawn(print_progress(
            t0,
            offsets.len() as u64,
            counters.clone(),
            stop_rx.clone(),
        ))
    });
    let (pausing, stopping) = spawn_events(plan, t0, state, stop);
    let mut records = load(plan, &offsets, t0, &counters, before).await;
    // A last look at the mock once everything is answered.
    tokio::time::sleep(POLL_EVERY).await;
    let _ = stop_tx.send(true);
    let (samples, poll_failures) = poller.await.unwrap_or_default();
    if let Some(p) = printer {
        let _ = p.await;
    }
    let clear_failed = set_faults(&client, plan, &serde_json::json!({ "faults": [] }))
        .await
        .err()
        .map(|e| e.to_string());
    // Tasks that never reported (only if the collector's guard fired) are unanswered.
    let missing = offsets.len().saturating_sub(records.len());
    records.extend((0..missing).map(|_| Record {
        sent: Duration::ZERO,
        lag: Duration::ZERO,
        latency: None,
        kind: "unanswered".to_owned(),
        attempts: None,
        error: None,
        idempotency: None,
        failed_over: false,
    }));
    Ok(Measured {
        records,
        samples,
        poll_failures,
        clear_failed,
        paused: finished(pausing).await,
        stopped: finished(stopping).await,
    })
}

/// Every server answers before any fault is set; the mock's count now.
async fn preflight(client: &HttpClient, plan: &Plan) -> Result<u64, DrillError> {
    let before =
        upstream_total(client, plan)
            .await
            .map_err(|reason| DrillError::MockUnreachable {
                url: plan.mock.url(paths::MOCK_STATS),
                reason,
            })?;
    reachable(&plan.gateway).await?;
    if let Some(f) = &plan.failover {
        reachable(f).await?;
    }
    Ok(before)
}

/// Sends one logical request at each offset from `t0` (open loop: a slow
/// answer never delays the next request) and collects what each got.
async fn load(
    plan: &Plan,
    offsets: &[Duration],
    t0: Instant,
    counters: &Arc<Progress>,
    before: u64,
) -> Vec<Record> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Record>();
    let collector = {
        let counters = counters.clone();
        tokio::spawn(async move {
            let mut records = Vec::new();
            while let Some(r) = rx.recv().await {
                counters.answered.fetch_add(1, Relaxed);
                records.push(r);
            }
            records
        })
    };
    send_all(plan, t0, offsets, new_client(None), &tx, counters, before).await;
    drop(tx);
    // Every task ends within its patience; this bound only guards the drill.
    let patience = plan.timeout + STRAGGLER_MARGIN;
    match tokio::time::timeout(patience + Duration::from_secs(5), collector).await {
        Ok(Ok(r)) => r,
        _ => Vec::new(),
    }
}

/// Connects to the state store to pause and picks how to stop a replica.
async fn prepare_exercises(
    plan: &Plan,
    stop: Option<StopHook>,
) -> Result<(Option<redis::aio::MultiplexedConnection>, Option<StopHook>), DrillError> {
    let state =
        match &plan.pause {
            None => None,
            Some(p) => Some(connect_state(&p.url).await.map_err(|reason| {
                DrillError::StateUnreachable {
                    url: levee_config::redact_url(&p.url),
                    reason,
                }
            })?),
        };
    let stop = match (&plan.stop, stop) {
        (Some(_), Some(hook)) => Some(hook),
        (Some(s), None) => s.pid.map(|pid| signal_hook(pid, s.signal)),
        (None, _) => None,
    };
    Ok((state, stop))
}

type Event = tokio::task::JoinHandle<Result<Duration, String>>;

/// Schedules the state store's pause and the replica's stop; each task ends
/// with when it happened (since `t0`).
fn spawn_events(
    plan: &Plan,
    t0: Instant,
    state: Option<redis::aio::MultiplexedConnection>,
    stop: Option<StopHook>,
) -> (Option<Event>, Option<Event>) {
    let pausing = match (&plan.pause, state) {
        (Some(p), Some(conn)) => {
            let (at, length) = (p.at, p.length);
            Some(tokio::spawn(async move {
                clock::sleep_until(t0 + at).await;
                let started = clock::now().duration_since(t0);
                pause_state(conn, length).await.map(|()| started)
            }))
        }
        _ => None,
    };
    let stopping = match (&plan.stop, stop) {
        (Some(s), Some(hook)) => {
            let at = s.at;
            Some(tokio::spawn(async move {
                clock::sleep_until(t0 + at).await;
                let started = clock::now().duration_since(t0);
                hook.await.map(|()| started)
            }))
        }
        _ => None,
    };
    (pausing, stopping)
}

/// Starts every request on schedule (open loop); each reports on `tx`.
async fn send_all(
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
    let timeout_ms = u64::try_from(plan.timeout.as_millis()).unwrap_or(u64::MAX);
    let patience = plan.timeout + STRAGGLER_MARGIN;
    // Unique across runs against one mock: its counter only grows.
    let run_id = format!("{}-{before}", std::process::id());
    for (i, offset) in offsets.iter().enumerate() {
        let due = t0 + *offset;
        clock::sleep_until(due).await;
        let body = serde_json::json!({
            "model": plan.model,
            "max_tokens": 16,
            "messages": [{ "role": "user", "content": format!("levee drill request {i}") }],
        });
        let call = Call {
            body: Bytes::from(body.to_string()),
            timeout_ms,
            key: plan
                .pause
                .is_some()
                .then(|| format!("levee-drill-{run_id}-{i}")),
        };
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
            });
        });
    }
}

/// The result of a scheduled pause or stop (long over by now).
async fn finished(task: Option<Event>) -> Option<Result<Duration, String>> {
    let task = task?;
    Some(match tokio::time::timeout(CONTROL_TIMEOUT, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("did not finish".to_owned()),
    })
}

/// A TCP connection to `target` opens within the control timeout.
async fn reachable(target: &crate::target::Target) -> Result<(), DrillError> {
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

async fn poll(
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

async fn print_progress(
    t0: Instant,
    total: u64,
    counters: Arc<Progress>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_upstream = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        let up = counters.upstream.load(Relaxed);
        eprint!(
            "\r  {:6.1} s  sent {}/{}  answered {}  upstream {}/s     ",
            clock::now().duration_since(t0).as_secs_f64(),
            counters.sent.load(Relaxed),
            total,
            counters.answered.load(Relaxed),
            up.saturating_sub(last_upstream),
        );
        last_upstream = up;
    }
    eprintln!();
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
