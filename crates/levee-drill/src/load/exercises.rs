//! The exercises besides the fault: pausing the state store (`CLIENT PAUSE`),
//! killing its primary (`SHUTDOWN NOSAVE NOW FORCE`) and stopping a
//! replica, each at its time in the run.

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

/// `SHUTDOWN NOSAVE NOW FORCE`: the primary exits at once (as a crash
/// would, nothing saved); the connection closing is the answer.
async fn kill_state(mut conn: redis::aio::MultiplexedConnection) -> Result<(), String> {
    let cmd = redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .arg("NOW")
        .arg("FORCE")
        .clone();
    match tokio::time::timeout(CONTROL_TIMEOUT, cmd.query_async::<()>(&mut conn)).await {
        Err(_) => Err(format!("SHUTDOWN got no answer within {CONTROL_TIMEOUT:?}")),
        Ok(Ok(())) => Ok(()),
        Ok(Err(e))
            if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() =>
        {
            Ok(())
        }
        Ok(Err(e)) => Err(format!("SHUTDOWN failed: {e}")),
    }
}

/// The connections the state exercises use: to pause the store, to kill
/// its primary.
pub(super) struct StateConns {
    pause: Option<redis::aio::MultiplexedConnection>,
    kill: Option<redis::aio::MultiplexedConnection>,
}

/// A connection to `url`, or the drill's error naming it.
async fn state_conn(url: &str) -> Result<redis::aio::MultiplexedConnection, DrillError> {
    connect_state(url)
        .await
        .map_err(|reason| DrillError::StateUnreachable {
            url: levee_config::redact_url(url),
            reason,
        })
}

/// Connects to the state store to pause or kill and picks how to stop a
/// replica.
pub(super) async fn prepare_exercises(
    plan: &Plan,
    stop: Option<StopHook>,
) -> Result<(StateConns, Option<StopHook>), DrillError> {
    let pause = match &plan.pause {
        None => None,
        Some(p) => Some(state_conn(&p.url).await?),
    };
    let kill = match &plan.kill {
        None => None,
        Some(k) => Some(state_conn(&k.url).await?),
    };
    let state = StateConns { pause, kill };
    let stop = match (&plan.stop, stop) {
        (Some(_), Some(hook)) => Some(hook),
        (Some(s), None) => s.pid.map(|pid| signal_hook(pid, s.signal)),
        (None, _) => None,
    };
    Ok((state, stop))
}

pub(super) type Event = tokio::task::JoinHandle<Result<Duration, String>>;

/// The scheduled exercises: the store's pause, its primary's kill, the
/// replica's stop.
pub(super) struct Events {
    pub(super) pausing: Option<Event>,
    pub(super) killing: Option<Event>,
    pub(super) stopping: Option<Event>,
}

/// Schedules the state store's pause and kill and the replica's stop; each
/// task ends with when it happened (since `t0`).
pub(super) fn spawn_events(
    plan: &Plan,
    t0: Instant,
    state: StateConns,
    stop: Option<StopHook>,
) -> Events {
    let killing = match (&plan.kill, state.kill) {
        (Some(k), Some(conn)) => {
            let at = k.at;
            Some(tokio::spawn(async move {
                clock::sleep_until(t0 + at).await;
                let started = clock::now().duration_since(t0);
                kill_state(conn).await.map(|()| started)
            }))
        }
        _ => None,
    };
    let pausing = match (&plan.pause, state.pause) {
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
    Events {
        pausing,
        killing,
        stopping,
    }
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
