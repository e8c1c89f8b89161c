//! The request path in a dialect's own API: the body read and parsed, the
//! model and idempotency key counted, capacity and rate limit checked, then
//! the tape, the faults, and the normal answer, in that order.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use levee_wire::{paths, Dialect};

use super::misbehave::{misbehave, replay, Misbehaved};
use super::respond::{error_answer, error_json, invalid_answer, json_answer};
use super::{read_body, too_large, Answer, ResetConnection, Unread};
use crate::body::MockBody;
use crate::request::{self, Body, Endpoint};
use crate::shared::{Active, Shared};
use crate::stats::{FaultKind, RequestGuard};
use crate::tape::Player;
use crate::{ratelimit, MockApi};

/// Answers a request in a dialect's own wire format: `api` is the dialect
/// API a cloud's face put in front (the mock's own `--api` otherwise).
pub(super) async fn handle_native<B>(
    shared: Arc<Shared>,
    reset: Arc<AtomicBool>,
    req: Request<B>,
    api: Option<MockApi>,
) -> Answer
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let api = api.unwrap_or(shared.api);
    let path = req.uri().path();
    let guard = shared.stats.begin(paths::counted_index(path));
    if req.version() == http::Version::HTTP_2 {
        shared.stats.http2_request();
    }
    let (endpoint, dialect) = api.route(req.method(), path, req.headers());
    let (parts, body) = req.into_parts();
    if let Some(ms) = header_u64(&parts.headers, "x-timeout-ms") {
        shared.stats.timeout_ms(ms);
    }
    let bytes = match read_body(body).await {
        Ok(bytes) => bytes,
        Err(Unread::TooLarge) => {
            let status = StatusCode::PAYLOAD_TOO_LARGE;
            return Ok(error_json(dialect, status, &too_large(), None, guard));
        }
        // The client went away mid-body; the guard counts it.
        Err(Unread::Gone) => return Err(ResetConnection),
    };
    let ask = Ask {
        endpoint,
        dialect,
        parts: &parts,
        bytes: &bytes,
    };
    let parsed = ask.parse(api);
    let model = model_of(&parsed);
    count_model_and_key(&shared, model, &parts.headers);

    let active = shared.active();
    if let Some(body) = unserved(&active, model, dialect) {
        return Ok(json_answer(StatusCode::NOT_FOUND, body, guard));
    }
    let (metered, guard) = match admit(&shared, &active, &ask, parsed.as_ref().ok(), guard) {
        Admitted::Go { metered, guard } => (metered, guard),
        Admitted::Refused(answer) => return Ok(answer),
    };
    if let Some(entry) = shared.tape.as_ref().and_then(Player::next) {
        shared.stats.replayed();
        return replay(entry, guard, &reset)
            .await
            .map(|r| metered.stamped(r));
    }
    let streaming = parsed.as_ref().is_ok_and(Body::streaming);
    let decision = active.decide(model, streaming, &shared.rng);
    drop(active);
    let (guard, cut_after) =
        match misbehave(&shared, &decision, streaming, dialect, guard, &reset).await {
            Misbehaved::Answered(answer) => return answer.map(|r| metered.stamped(r)),
            Misbehaved::Go { guard, cut_after } => (guard, cut_after),
        };
    let body = match parsed {
        Ok(body) => body,
        Err((_, invalid)) => return Ok(invalid_answer(dialect, invalid, guard)),
    };
    let stream = Streamed {
        chunk_delay: decision.chunk_delay,
        cut_after,
    };
    Ok(metered.stamped(ask.answer(&shared, &body, stream, guard)))
}

/// The 404 body for a model the fault set does not serve (`models:`), as
/// the real APIs answer one: OpenAI's `model_not_found`, Anthropic's
/// `not_found_error`.
fn unserved(active: &Active, model: Option<&str>, dialect: Dialect) -> Option<Bytes> {
    let (served, m) = (active.set.served_models()?, model?);
    if served.iter().any(|s| s == m) {
        return None;
    }
    let message = crate::answer::no_such_model(dialect, m);
    Some(levee_wire::error::body(
        dialect,
        404,
        &message,
        None,
        Some("model_not_found"),
    ))
}

/// The model a request names, whether or not its body is valid.
fn model_of<'p>(parsed: &'p Parsed<'_>) -> Option<&'p str> {
    match parsed {
        Ok(body) => body.model.as_deref(),
        Err((model, _)) => model.as_deref(),
    }
}

/// Counts the request's model and its `idempotency-key`.
fn count_model_and_key(shared: &Shared, model: Option<&str>, headers: &HeaderMap) {
    let idempotency_key = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
    shared.stats.model_and_key(model, idempotency_key);
}

/// What the fault set's capacity and rate limit made of a request.
enum Admitted {
    /// Over either: the answer.
    Refused(Response<MockBody>),
    /// Let through, metered.
    Go {
        metered: ratelimit::Metered,
        guard: RequestGuard,
    },
}

/// Checks the fault set's capacity, then its rate limit.
fn admit(
    shared: &Shared,
    active: &Active,
    ask: &Ask<'_>,
    body: Option<&Body<'_>>,
    guard: RequestGuard,
) -> Admitted {
    if let Some(capacity) = active.set.capacity() {
        if guard.in_flight_before >= capacity.max_in_flight {
            shared.stats.fault(FaultKind::Capacity);
            return Admitted::Refused(error_answer(ask.dialect, capacity.error, guard));
        }
    }
    match active.limiter.admit(
        shared.api,
        ask.dialect,
        &ask.endpoint,
        body,
        ask.bytes.len(),
    ) {
        Ok(metered) => Admitted::Go { metered, guard },
        Err(refused) => {
            shared.stats.rate_limited();
            let mut res = json_answer(StatusCode::TOO_MANY_REQUESTS, refused.body(), guard);
            refused.stamp(res.headers_mut());
            Admitted::Refused(res)
        }
    }
}

/// One provider request, read: what the answer is built from.
pub(super) struct Ask<'a> {
    pub(super) endpoint: Endpoint,
    pub(super) dialect: Dialect,
    pub(super) parts: &'a http::request::Parts,
    pub(super) bytes: &'a Bytes,
}

/// How a streamed answer is paced and whether it is cut.
pub(super) struct Streamed {
    pub(super) chunk_delay: Option<Duration>,
    pub(super) cut_after: Option<usize>,
}

type Parsed<'a> = Result<Body<'a>, (Option<std::borrow::Cow<'a, str>>, request::Invalid)>;

impl<'a> Ask<'a> {
    /// The body's fields; a mock serving one dialect also refuses fields that
    /// provider does not know.
    fn parse(&self, api: MockApi) -> Parsed<'a> {
        let parsed = request::parse(&self.endpoint, self.dialect, self.bytes);
        if api == MockApi::Both {
            return parsed;
        }
        match parsed {
            Ok(body) => match request::strict_check(&self.endpoint, self.dialect, self.bytes) {
                Ok(()) => Ok(body),
                Err(invalid) => Err((body.model, invalid)),
            },
            Err(e) => Err(e),
        }
    }
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}
