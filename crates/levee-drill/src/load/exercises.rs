//! The exercises besides the fault: pausing the state store (`CLIENT PAUSE`)
//! and stopping a replica, each at its time in the run.

use std::time::{Duration, Instant};

use super::CONTROL_TIMEOUT;
use crate::args::{Plan, StopSignal};
use crate::clock;
use crate::error::DrillError;

/// Stops a replica when awaited (a signal to its process, or whatever a
/// library caller passes); `Err` says why it could not.
pub type StopHook = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

/// Sends `signal` to `pid` (`kill -TERM PID`).
fn signal_hook(pid: u32, signal: StopSignal) -> StopHook {
    Box::pin(async move {
        let flag = match signal {
            StopSignal::Term => "-TERM",
            StopSignal::Kill => "-KILL",
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

/// Connects to the state store to pause and picks how to stop a replica.
pub(super) async fn prepare_exercises(
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

pub(super) type Event = tokio::task::JoinHandle<Result<Duration, String>>;

/// Schedules the state store's pause and the replica's stop; each task ends
/// with when it happened (since `t0`).
pub(super) fn spawn_events(
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

/// The result of a scheduled pause or stop (long over by now).
pub(super) async fn finished(task: Option<Event>) -> Option<Result<Duration, String>> {
    let task = task?;
    Some(match tokio::time::timeout(CONTROL_TIMEOUT, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("did not finish".to_owned()),
    })
}
