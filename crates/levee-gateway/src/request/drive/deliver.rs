//! Delivering a provider's answer: a plain answer read whole (and stored
//! for replay), or a stream held to its first whole event (the commit
//! point) and handed to its relay.

use super::*;

impl Driver<'_> {
    /// A 2xx head arrived: buffer a plain answer, or hold a stream's head
    /// until its first chunk (the commit point) and relay the rest.
    pub(super) async fn deliver(
        &mut self,
        resp: Response<UpstreamBody>,
        attempt_deadline: tokio::time::Instant,
        started: levee_policy::Instant,
    ) -> Delivered {
        let (mut parts, mut body) = resp.into_parts();
        let mut raw = body.take_raw();
        // The tape records every field of the head, and a field carrying a
        // key is redacted in the map: then all are there.
        if self.ctx.shared.recorder.is_some()
            || self.ctx.shared.secrets.with(|s| s.occurs(raw.lines()))
        {
            raw.move_into(&mut parts.headers);
        }
        let is_sse = crate::http::h1wire::field(&parts.headers, &CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if self.ctx.stream && is_sse {
            self.deliver_stream(parts, raw, body, attempt_deadline, started)
                .await
        } else {
            self.deliver_buffered(parts, raw, body, attempt_deadline, started)
                .await
        }
    }

    /// Notes where the object the answer `body` created lives: the route
    /// and the provider that answered.
    async fn note_origin(&mut self, body: Option<&[u8]>) {
        let Some(id) = body.and_then(crate::state::origins::response_id) else {
            return;
        };
        let shared = &self.ctx.shared;
        let route = &shared.config.routes[self.ctx.route];
        let t = self.fin.req.target();
        let origin = crate::state::origins::Origin {
            route: route.name.clone(),
            provider: shared.providers[route.targets[t].provider].name.clone(),
        };
        shared
            .origins
            .put(shared.redis.as_deref(), &id, origin)
            .await;
    }

    /// Holds a stream's head until its first whole event (the commit
    /// point), then relays it to the caller.
    pub(super) async fn deliver_stream(
        &mut self,
        parts: http::response::Parts,
        raw: RawFields,
        mut body: UpstreamBody,
        attempt_deadline: tokio::time::Instant,
        started: levee_policy::Instant,
    ) -> Delivered {
        let shared = self.shared;
        let route = &shared.config.routes[self.ctx.route];
        let first_deadline = match route.first_byte_timeout {
            Some(t) => attempt_deadline.min(shared.clock.to_tokio(started + t)),
            None => attempt_deadline,
        };
        let (first, framer) = match first_event(&mut body, first_deadline).await {
            Ok(f) => f,
            Err((outcome, result)) => return Delivered::Failed(outcome, result),
        };
        // Commit: from here on, no retry; the stream ends by the caller's deadline.
        self.fin.req.commit();
        let target = self.fin.req.target();
        if self.ctx.creates_stored {
            // Boxed, as for a plain answer: a store's future is ~3.9 KiB.
            Box::pin(self.note_origin(crate::http::sse::data_of(&first).as_deref())).await;
        }
        let attempts = self.fin.req.attempts();
        self.obs.report(RequestEvent::Delivered {
            req: &self.fin.req,
            started,
            at: shared.clock.now(),
            head: &parts,
            body: None,
            model: &self.ctx.model,
        });
        let recording = shared.recorder.is_some();
        // A stream is not stored for replay, but its key stays held (and its
        // bulkhead slot taken) until the stream ends.
        let holds = crate::request::stream::Holds {
            _bulkhead: self.ctx.bulkhead.take(),
            _lease: self.lease.take(),
        };
        let finisher = AttemptFinisher {
            shared: Arc::clone(&self.ctx.shared),
            route: self.ctx.route,
            once: self.ctx.once,
            req: std::mem::replace(
                &mut self.fin.req,
                levee_policy::RequestState::new(levee_policy::Instant::ZERO),
            ),
        };
        let start = crate::request::stream::RelayStart {
            first,
            framer,
            idle: route.stream_idle_timeout,
            // After the commit point only the caller's own deadline (and the
            // idle timer) applies: the route's deadline bounds the attempts.
            deadline: match self.ctx.stream_deadline {
                Some(d) => shared.clock.to_tokio(d - route.policy.margin()),
                None => shared.clock.to_tokio(started) + NO_DEADLINE,
            },
            dialect: self.ctx.dialect,
            clock: shared.clock,
            translate: self.ctx.plans[target]
                .crossing
                .and_then(|c| c.stream(shared.clock.unix_ms() / 1000)),
            strip_usage: self.ctx.plans[target].strip_usage,
        };
        let grace = crate::runtime::shutdown::GraceWatch::new(&shared.grace_over);
        let relay = RelayBody::new(start, body, finisher, recording, holds, grace);
        let head = self.head_out(parts, Box::new(relay));
        let stamp = Box::new(self.stamp_for(target, attempts));
        Delivered::Done(Ok(Answer::Stream(head, raw, stamp)))
    }

    /// A provider's answer as the caller gets it: the head redacted, its
    /// hop-by-hop fields and any of Levee's own dropped, and `body`.
    fn head_out<B>(&self, mut parts: http::response::Parts, body: B) -> Response<B> {
        // A provider may echo the key in a successful answer's head too.
        self.ctx
            .shared
            .secrets
            .with(|s| s.headers(&mut parts.headers));
        relayed(parts.status, parts.headers, body)
    }

    /// Levee's success fields on the answer `target` gave after `attempts`.
    fn stamp_for(&self, target: usize, attempts: u32) -> Stamp {
        let shared = &self.ctx.shared;
        let route = &shared.config.routes[self.ctx.route];
        let provider = &shared.providers[route.targets[target].provider];
        Stamp::relayed(attempts, provider.name_header.as_ref())
    }

    /// The tokens a plain answer used settle what its admission estimated,
    /// and are counted.
    fn settle_usage(&mut self, bytes: &[u8], now: levee_policy::Instant) {
        let counts = crate::upstream::allowance::Counts::read(bytes);
        if let Some(used) = counts.cost() {
            if let Some(mut tokens) = self.fin.settle_at(Some(now), used) {
                tokens.cached = counts.cached();
                self.obs.report(RequestEvent::TokensUsed(tokens));
            }
        }
    }

    /// A plain answer's 2xx head means the provider has run the generation:
    /// the body is read until the caller's deadline, and a body that fails
    /// is never fetched again (a too-large one would be as large again; a
    /// broken one would run the generation twice). Only the planner's
    /// deadline rule applies to a body that has not arrived by then.
    pub(super) async fn deliver_buffered(
        &mut self,
        parts: http::response::Parts,
        raw: RawFields,
        body: UpstreamBody,
        attempt_deadline: tokio::time::Instant,
        started: levee_policy::Instant,
    ) -> Delivered {
        let shared = self.shared;
        let route = &shared.config.routes[self.ctx.route];
        let body_deadline = shared
            .clock
            .to_tokio(self.fin.req.deadline() - route.policy.margin())
            .max(attempt_deadline);
        let bytes = match read_answer(body, body_deadline).await {
            Ok(b) => b,
            Err((outcome, result)) => return Delivered::Failed(outcome, result),
        };
        let status = parts.status.as_u16();
        if self.ctx.creates_stored && parts.status.is_success() {
            // Boxed: held inline, a store's future (~3.9 KiB) was every answer's.
            Box::pin(self.note_origin(Some(&bytes))).await;
        }
        let now = shared.clock.now();
        self.settle_usage(&bytes, now);
        self.fin.record_at(
            now,
            Outcome::Status {
                status,
                retry_after: None,
            },
        );
        self.obs.report(RequestEvent::Delivered {
            req: &self.fin.req,
            started,
            at: now,
            head: &parts,
            body: Some(&bytes),
            model: &self.ctx.model,
        });
        // Boxed (Redis, for callers with spend rules): ~3.7 KiB otherwise inline.
        if self.obs.has_charges_to_share() {
            Box::pin(self.obs.share_charges()).await;
        }
        let target = self.fin.req.target();
        let attempts = self.fin.req.attempts();
        // The backup's answer in the caller's dialect.
        let bytes = match self.ctx.plans[target]
            .crossing
            .map(|c| c.response(&bytes, shared.clock.unix_ms() / 1000))
        {
            None => bytes,
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                let msg = format!("levee: upstream_error: {e}");
                return Delivered::Done(Err(LeveeError::upstream_error(msg).attempts(attempts)));
            }
        };
        let mut out = self.head_out(
            parts,
            Body::relaying(http_body_util::Full::new(bytes.clone()), raw),
        );
        *out.body_mut().stamp_mut() = self.stamp_for(target, attempts);
        if let Some(l) = self.lease.take() {
            // Stored with every field, none of Levee's own.
            let mut headers = HeaderMap::new();
            copy_headers(out.headers(), &mut headers);
            out.body().raw().clone().move_into(&mut headers);
            let stored = Stored {
                status,
                headers,
                body: bytes,
            };
            // Boxed: only keyed requests get here, and held inline its
            // future (~1.7 KiB) would enlarge every request's future.
            Box::pin(l.complete(stored, shared.clock.now())).await;
        }
        Delivered::Done(Ok(Answer::Whole(out)))
    }
}

pub(super) async fn read_capped(
    body: UpstreamBody,
    cap: usize,
    until: tokio::time::Instant,
) -> Bytes {
    read_limited(body, cap, until).await.unwrap_or_default()
}

/// Why a body could not be read whole.
#[derive(Debug)]
pub(super) enum BodyError {
    /// Not complete by the given instant.
    TimedOut,
    /// Over the cap.
    TooLarge,
    /// The connection broke off (or the framing was invalid) mid-body.
    Broken,
}

/// Reads a whole body up to `cap` bytes before `until`.
pub(super) async fn read_limited(
    body: UpstreamBody,
    cap: usize,
    until: tokio::time::Instant,
) -> Result<Bytes, BodyError> {
    let Ok((read, _)) = collect_until(body, cap, until).await else {
        return Err(BodyError::TimedOut);
    };
    match read {
        Err(CollectError::TooLarge) => Err(BodyError::TooLarge),
        Err(CollectError::Broken) => Err(BodyError::Broken),
        Ok(b) => Ok(b),
    }
}

/// Reads a stream until its first whole event (the commit point), by
/// `deadline`: the event(s) and the framer holding any partial tail. `Err`:
/// the attempt failed before the commit point, and nothing reached the
/// caller.
async fn first_event(
    body: &mut UpstreamBody,
    deadline: tokio::time::Instant,
) -> Result<(Bytes, crate::http::sse::EventFramer), (Outcome, AttemptResult)> {
    let mut framer = crate::http::sse::EventFramer::new();
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err((Outcome::Timeout, AttemptResult::Timeout)),
            // The stream ended before a blank line: what it sent is the
            // answer (a retry would run the generation again).
            Ok(None) if framer.has_partial() => {
                let first = framer.flush();
                return Ok((first, framer));
            }
            // Cut before the commit point: nothing reached the caller, so
            // it may be retried as a connection failure (`connect_error`
            // in `retry.on`), but it is not one: labelled as what it is.
            Ok(None) | Ok(Some(Err(_))) => {
                return Err((Outcome::ConnectError, AttemptResult::CutBeforeFirstEvent))
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(d) = frame.into_data() {
                    let whole = framer.push(&d);
                    if !whole.is_empty() {
                        return Ok((whole, framer));
                    }
                }
            }
        }
    }
}

/// Reads a plain answer's body whole, up to [`MAX_RESPONSE_BODY`], by
/// `deadline`. `Err`: what the attempt's outcome is (a declared length
/// over the limit is refused unread).
async fn read_answer(
    body: UpstreamBody,
    deadline: tokio::time::Instant,
) -> Result<Bytes, (Outcome, AttemptResult)> {
    let declared = http_body::Body::size_hint(&body).exact();
    let too_large = (Outcome::ResponseTooLarge, AttemptResult::ResponseTooLarge);
    if declared.is_some_and(|n| n > MAX_RESPONSE_BODY as u64) {
        return Err(too_large);
    }
    match read_limited(body, MAX_RESPONSE_BODY, deadline).await {
        Ok(b) => Ok(b),
        Err(BodyError::TimedOut) => Err((Outcome::Timeout, AttemptResult::BodyTimeout)),
        Err(BodyError::TooLarge) => Err(too_large),
        Err(BodyError::Broken) => Err((Outcome::FailedAfterFirstByte, AttemptResult::BodyCut)),
    }
}
