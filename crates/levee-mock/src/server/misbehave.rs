//! Answers that misbehave on purpose: a fault decision applied (a delay, an
//! error status, a reset, a stall, a stream to cut), and a tape entry
//! replayed.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};

use http::Response;
use levee_wire::Dialect;

use super::respond::error_answer;
use super::{Answer, ResetConnection};
use crate::body::MockBody;
use crate::faults::{Decision, Outcome};
use crate::shared::Shared;
use crate::stats::{FaultKind, RequestGuard};
use crate::tape;

/// What the fault decision left to do.
pub(super) enum Misbehaved {
    /// The fault is the answer (an error status, a reset, a stall).
    Answered(Answer),
    /// Answer normally (after the delay), the stream cut after `cut_after` chunks.
    Go {
        guard: RequestGuard,
        cut_after: Option<usize>,
    },
}

/// Applies the fault decision: waits out its delay, then answers with the
/// fault or lets the request through.
pub(super) async fn misbehave(
    shared: &Shared,
    decision: &Decision,
    streaming: bool,
    dialect: Dialect,
    guard: RequestGuard,
    reset: &AtomicBool,
) -> Misbehaved {
    if !decision.delay.is_zero() || (streaming && decision.chunk_delay.is_some()) {
        shared.stats.fault(FaultKind::Delayed);
    }
    if !decision.delay.is_zero() {
        tokio::time::sleep(decision.delay).await;
    }
    let answered = match decision.outcome {
        Outcome::Normal => {
            return Misbehaved::Go {
                guard,
                cut_after: None,
            }
        }
        Outcome::CutStreamAfter(n) => {
            shared.stats.fault(FaultKind::CutStream);
            return Misbehaved::Go {
                guard,
                cut_after: Some(n as usize),
            };
        }
        Outcome::Status(spec) => {
            shared.stats.fault(FaultKind::Status);
            Ok(error_answer(dialect, spec, guard))
        }
        Outcome::Reset => {
            shared.stats.fault(FaultKind::Reset);
            reset_connection(guard, reset)
        }
        Outcome::Stall => {
            shared.stats.fault(FaultKind::Stall);
            stall(guard).await
        }
    };
    Misbehaved::Answered(answered)
}

fn reset_connection(mut guard: RequestGuard, reset: &AtomicBool) -> Answer {
    guard.intentional_close();
    reset.store(true, Ordering::Relaxed);
    Err(ResetConnection)
}

/// Holds the request until the client goes away (hyper then drops this
/// future, and the guard counts `client_closed`).
async fn stall(guard: RequestGuard) -> Answer {
    let never: Infallible = std::future::pending().await;
    drop(guard);
    match never {}
}

/// Answers with a tape entry: its delay, then its status, fields and body
/// (or its reset or stall).
pub(super) async fn replay(
    entry: &tape::Compiled,
    guard: RequestGuard,
    reset: &AtomicBool,
) -> Answer {
    if !entry.delay.is_zero() {
        tokio::time::sleep(entry.delay).await;
    }
    let body = match &entry.body {
        tape::Body::Reset => return reset_connection(guard, reset),
        tape::Body::Stall => return stall(guard).await,
        tape::Body::Full(bytes) => {
            guard.stats().status(entry.status.as_u16());
            MockBody::full(bytes.clone(), guard)
        }
        tape::Body::Chunks { chunks, cut } => {
            guard.stats().status(entry.status.as_u16());
            let cut_after = cut.then_some(chunks.len());
            MockBody::stream(chunks.clone(), entry.chunk_delay, cut_after, guard)
        }
    };
    let mut res = Response::new(body);
    *res.status_mut() = entry.status;
    *res.headers_mut() = entry.headers.clone();
    Ok(res)
}
