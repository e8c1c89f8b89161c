//! The live part: set the faults, start requests on schedule (open loop),
//! poll the mock's stats, wait for stragglers, clear the faults.
//!
//! This module runs the drill and holds what it measures; the parts are
//! [`requests`] (the schedule and each logical request), [`mock`] (control
//! requests to the mock, and whether the servers answer at all),
//! [`exercises`] (pausing the state store, stopping a replica) and
//! [`progress`] (the status line).

mod exercises;
mod mock;
mod progress;
mod requests;

pub use exercises::StopHook;

use levee_wire::paths;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{mpsc, watch};

use crate::args::Plan;
use crate::clock;
use crate::error::DrillError;
use exercises::{finished, prepare_exercises, spawn_events};
use mock::{answered_total, attempt_results, poll, reachable, set_faults, upstream_total};
use progress::{print_progress, Progress};
use requests::{schedule, send_all};

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
    /// The `idempotency-key` it carried.
    pub key: Option<String>,
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
    /// Answers the mock generated during the drill (its 2xx), billed
    /// whoever read them; `None` when its stats could not be read.
    pub answered: Option<u64>,
    /// The gateway's upstream attempts by result during the drill
    /// (`--gateway-admin`); `None` without it.
    pub attempts: Option<std::collections::BTreeMap<String, u64>>,
    /// Stats polls that failed (missing points in the series).
    pub poll_failures: u64,
    /// Whether clearing the faults at the end failed (the mock keeps them).
    pub clear_failed: Option<String>,
    /// When the state store was paused (since the start), or why it was not.
    pub paused: Option<Result<Duration, String>>,
    /// When the replica was stopped (since the start), or why it was not.
    pub stopped: Option<Result<Duration, String>>,
    /// When the state store's primary was killed, or why it was not.
    pub killed: Option<Result<Duration, String>>,
    /// The keys answered before the kill, sent again after the run.
    pub recheck: Option<requests::Recheck>,
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
    let counted = Counts::read(&client, plan).await;
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
    let events = spawn_events(plan, t0, state, stop);
    let mut records = load(plan, &offsets, t0, &counters, before).await;
    // A last look at the mock once everything is answered.
    tokio::time::sleep(POLL_EVERY).await;
    let _ = stop_tx.send(true);
    let (samples, poll_failures) = poller.await.unwrap_or_default();
    if let Some(p) = printer {
        let _ = p.await;
    }
    let (answered, attempts) = Counts::read(&client, plan).await.since(counted);
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
        key: None,
    }));
    let killed = finished(events.killing).await;
    let recheck = match &killed {
        Some(Ok(at)) => {
            Some(requests::recheck(plan, &records, &requests::run_id(before), *at).await)
        }
        _ => None,
    };
    Ok(Measured {
        records,
        samples,
        answered,
        attempts,
        poll_failures,
        clear_failed,
        paused: finished(events.pausing).await,
        stopped: finished(events.stopping).await,
        killed,
        recheck,
    })
}

/// What the drill counts at its start and its end: the mock's generated
/// answers, and the gateway's attempts by result (`--gateway-admin`).
struct Counts {
    answered: Option<u64>,
    attempts: Option<std::collections::BTreeMap<String, u64>>,
}

impl Counts {
    async fn read(client: &HttpClient, plan: &Plan) -> Counts {
        let attempts = match &plan.gateway_admin {
            Some(admin) => attempt_results(client, admin).await.ok(),
            None => None,
        };
        Counts {
            answered: answered_total(client, plan).await.ok(),
            attempts,
        }
    }

    /// These counts less `before`'s (`None` where either is missing).
    fn since(
        self,
        before: Counts,
    ) -> (Option<u64>, Option<std::collections::BTreeMap<String, u64>>) {
        let answered = match (self.answered, before.answered) {
            (Some(now), Some(was)) => Some(now.saturating_sub(was)),
            _ => None,
        };
        let attempts = match (self.attempts, before.attempts) {
            (Some(now), Some(was)) => Some(since(&was, now)),
            _ => None,
        };
        (answered, attempts)
    }
}

/// Each count in `after` less its count in `before`.
fn since(
    before: &std::collections::BTreeMap<String, u64>,
    after: std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    after
        .into_iter()
        .map(|(k, n)| {
            let was = before.get(&k).copied().unwrap_or(0);
            (k, n.saturating_sub(was))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
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
