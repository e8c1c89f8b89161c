//! The idempotency key of a keyed request: claimed (lead, follow or
//! replay), and what `x-levee-idempotency` says of it.

use super::*;

/// What `x-levee-idempotency` says about a keyed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IdemNote {
    /// The shared store could not be consulted: deduplicated on this replica only.
    Local,
    /// An earlier request with the key ended without a stored answer (a
    /// stream, an answer too large to store, or a failure): this one waited
    /// for it, then ran.
    Rerun,
}

pub(super) fn noted(
    shared: &Shared,
    mut answer: Response<Body>,
    note: Option<IdemNote>,
) -> Response<Body> {
    let value = match note {
        None => return answer,
        Some(IdemNote::Local) => {
            observer::report(shared, RequestEvent::IdempotencyLocal);
            "local"
        }
        Some(IdemNote::Rerun) => "rerun",
    };
    answer.headers_mut().insert(
        headers::X_LEVEE_IDEMPOTENCY,
        HeaderValue::from_static(value),
    );
    answer
}

/// A request's idempotency key, ready to claim.
pub(super) struct KeyClaim<'a> {
    pub(super) caller: [u8; 32],
    pub(super) key: &'a str,
    pub(super) body_hash: [u8; 32],
    /// Already counted as a caller-layer retry.
    pub(super) counted: bool,
}

/// What claiming a key gave: the lease to lead with (`None`: run without
/// deduplication), or the stored answer replayed.
pub(super) enum Led {
    Lead(Option<Lease>),
    Replayed(Response<Body>),
}

/// Leads, follows or replays the key. `Err`: a conflict, the shared store
/// refused, or the deadline passed while following.
pub(super) async fn claim_key(
    shared: &Arc<Shared>,
    k: KeyClaim<'_>,
    route: &str,
    deadline: levee_policy::Instant,
    note: &mut Option<IdemNote>,
) -> Result<Led, LeveeError> {
    let mut counted = k.counted;
    let mut waited = false;
    let until = shared.clock.to_tokio(deadline);
    loop {
        let claim = Claim {
            caller: k.caller,
            key: k.key,
            body_hash: k.body_hash,
            now: shared.clock.now(),
            following: waited,
        };
        let (claimed, scope) = shared.idempotency.claim(claim).await;
        if scope == Scope::Local {
            *note = Some(IdemNote::Local);
        } else if waited && matches!(claimed, Claimed::Lead(_)) {
            *note = Some(IdemNote::Rerun);
        }
        if !counted
            && !matches!(
                claimed,
                Claimed::Lead(_) | Claimed::Untracked | Claimed::Unavailable
            )
        {
            // A repeated key: a caller layer is still retrying.
            observer::report(shared, RequestEvent::CallerRetry);
            counted = true;
        }
        let follow = match claimed {
            Claimed::Lead(l) => return Ok(Led::Lead(Some(l))),
            Claimed::Untracked => return Ok(Led::Lead(None)),
            Claimed::Unavailable => {
                *note = None;
                observer::report(shared, RequestEvent::StateUnavailable { route });
                let msg = "levee: the shared idempotency store is unavailable and state.on_unavailable is `refuse`: this keyed request was not sent (it could run twice across replicas)";
                return Err(LeveeError::of(Why::StateUnavailable, msg));
            }
            Claimed::Replay(stored) => return Ok(Led::Replayed(replay(shared, route, &stored))),
            Claimed::Conflict => {
                let msg = "levee: this idempotency-key was used with a different request body";
                return Err(LeveeError::of(Why::KeyReused, msg));
            }
            Claimed::Follow(f) => f,
        };
        waited = true;
        let in_time = match follow {
            Follow::Local(mut rx) => {
                match tokio::time::timeout_at(until, rx.wait_for(|v| v.is_some())).await {
                    Ok(Ok(v)) => match v.clone() {
                        Some(stored) => return Ok(Led::Replayed(replay(shared, route, &stored))),
                        None => true,
                    },
                    // The leader gave up without an answer: try to lead.
                    Ok(Err(_)) => true,
                    Err(_) => false,
                }
            }
            // Another replica leads: look again shortly.
            Follow::Poll => {
                let next = shared.clock.to_tokio(shared.clock.now()) + Duration::from_millis(20);
                tokio::time::sleep_until(next.min(until)).await;
                next < until
            }
        };
        if !in_time {
            observer::report(shared, RequestEvent::FollowTimedOut { route });
            let msg = "levee: deadline passed while waiting for an earlier request with the same idempotency-key";
            return Err(LeveeError::deadline_exceeded(msg));
        }
    }
}

pub(super) fn replay(shared: &Shared, route: &str, stored: &Stored) -> Response<Body> {
    observer::report(shared, RequestEvent::Replayed { route });
    let mut out = Response::new(full(stored.body.clone()));
    *out.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    *out.headers_mut() = stored.headers.clone();
    out.headers_mut()
        .insert(headers::X_LEVEE_REPLAYED, HeaderValue::from_static("true"));
    out.headers_mut()
        .insert(headers::X_LEVEE_ATTEMPTS, HeaderValue::from(0u32));
    out
}
