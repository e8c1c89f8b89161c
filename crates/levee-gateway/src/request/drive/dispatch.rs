//! One attempt: the shared allowance asked, the request built and sent
//! with the planner's timeout, what came back classified and recorded.

use super::*;
use crate::http::outbound::Outbound;
use crate::timer::{within, Late};
use crate::upstream::SendError;

impl Driver<'_> {
    /// Sends one attempt; `Some` when it produced the request's answer. Its
    /// head must come by the route's `first_byte_timeout` (a stream's first
    /// event is waited for within it too): until then a failure can still
    /// be retried, so a stalled provider is given up on while a retry or
    /// the backup can still use the time.
    pub(super) async fn attempt(
        &mut self,
        d: Dispatch,
        now: levee_policy::Instant,
    ) -> Option<Result<Answer, LeveeError>> {
        let shared = self.shared;
        let route = &shared.config.routes[self.ctx.route];
        let provider = &shared.providers[route.targets[d.target].provider];
        // Only with an allowance shared through Redis; boxed there, so the
        // ~3.9 KiB of a Redis call's future is not part of every attempt's.
        if let (Some(rate), Some(redis)) = (&provider.shared_rate, &shared.redis) {
            let check = self.refused_by_shared_allowance(rate, redis, &provider.name, now);
            if Box::pin(check).await {
                return None;
            }
        }
        let upstream_req = self.request_for(&d, now, provider).await?;
        let attempt_deadline = shared.clock.to_tokio(now + d.timeout);
        let head_deadline = match route.first_byte_timeout {
            Some(t) => attempt_deadline.min(shared.clock.to_tokio(now + t)),
            None => attempt_deadline,
        };
        // The head, or the attempt's end, taken apart by `head_of` and
        // the head read by `answer_of`: a result matched here, or a head
        // borrowed here, keeps its slot in this future through the awaits
        // below (~210 bytes each), and the driver's future, boxed once a
        // request, passed the 4 KiB up to which jemalloc allocates and
        // frees from its thread cache's fast path.
        let sent = self
            .send_for_head(&d, now, provider, upstream_req, head_deadline)
            .await;
        let resp = self.head_of(&d, now, sent)?;
        let (resp, answer) = self.answer_of(&d, route, provider, resp);
        let (outcome, result) = if answer {
            match self.deliver(resp, attempt_deadline, now).await {
                Delivered::Done(r) => return Some(r),
                Delivered::Failed(o, l) => {
                    // The answer describes this attempt, not an earlier error.
                    self.last_error = None;
                    (o, l)
                }
            }
        } else {
            self.upstream_error(resp, attempt_deadline).await
        };
        self.finished(&d, now, outcome, result);
        None
    }

    /// The provider's head, or `None` when the attempt ended without one:
    /// finished as a timeout or a connection failure, or refused when no
    /// connection came free in its share of the time (it was never sent:
    /// the next target, or `pool_exhausted`).
    fn head_of(
        &mut self,
        d: &Dispatch,
        now: levee_policy::Instant,
        sent: Result<Result<Response<UpstreamBody>, SendError>, Late>,
    ) -> Option<Response<UpstreamBody>> {
        match sent {
            Ok(Ok(resp)) => Some(resp),
            Err(_) => {
                self.finished(d, now, Outcome::Timeout, AttemptResult::Timeout);
                None
            }
            Ok(Err(SendError::PoolExhausted)) => {
                self.fin.refuse(levee_policy::Refusal::PoolExhausted);
                None
            }
            Ok(Err(e)) => {
                let result = crate::upstream::failure_result(&e);
                self.finished(d, now, Outcome::ConnectError, result);
                None
            }
        }
    }

    /// A provider's head, as Levee relays it (a cloud's reshaped into its
    /// API's), its reported limits noted; and whether it is an answer. The
    /// core's classifier says what is an answer (1xx–3xx included: a
    /// provider's redirect is passed on, never retried); the driver only
    /// acts on it.
    fn answer_of(
        &self,
        d: &Dispatch,
        route: &levee_config::Route,
        provider: &crate::upstream::ProviderRuntime,
        resp: Response<UpstreamBody>,
    ) -> (Response<UpstreamBody>, bool) {
        let resp = if provider.platform.maps_answers() {
            provider
                .platform
                .answer(resp, self.ctx.stream, self.ctx.plans[d.target].uri.path())
        } else {
            resp
        };
        note_reported(&self.ctx.shared, provider, resp.headers());
        let status = resp.status().as_u16();
        let answer = route.policy.classifier().classify(Outcome::Status {
            status,
            retry_after: None,
        }) == Class::Success;
        (resp, answer)
    }

    /// The attempt's request to `provider`, reported as started. The
    /// caller's fields are forwarded by an allow-list per provider API (its
    /// vendor headers never reach a provider of the other dialect), and a
    /// cloud's signature or token goes on last: it covers the fields
    /// before it. `None`: the credentials could not be made, and the
    /// attempt is finished as `credentials`.
    async fn request_for(
        &mut self,
        d: &Dispatch,
        now: levee_policy::Instant,
        provider: &crate::upstream::ProviderRuntime,
    ) -> Option<Outbound<Bytes>> {
        let ctx = &self.ctx;
        let mut upstream_req = build_request_with(
            provider,
            ctx.method.clone(),
            &ctx.parts_headers,
            ctx.plans[d.target].uri.clone(),
            ctx.plans[d.target].body.clone(),
            d.timeout,
            Some(&ctx.idem),
        );
        self.started(d, now, &mut upstream_req.fields);
        if provider.platform.authorizes() {
            let unix_ms = self.ctx.shared.clock.unix_ms();
            if let Err(e) = provider
                .platform
                .authorize(&mut upstream_req, unix_ms)
                .await
            {
                tracing::warn!(provider = %provider.name, error = %e, "attempt not authorised");
                self.finished(d, now, Outcome::ConnectError, AttemptResult::Credentials);
                return None;
            }
        }
        Some(upstream_req)
    }

    /// Sends `req` and waits for its head until `head_deadline`. Past the
    /// target's learned p99 with no head while the caller still waits, the
    /// attempt counts as stall evidence for its breaker, and goes on.
    async fn send_for_head(
        &mut self,
        d: &Dispatch,
        now: levee_policy::Instant,
        provider: &crate::upstream::ProviderRuntime,
        req: Outbound<Bytes>,
        head_deadline: tokio::time::Instant,
    ) -> Result<Result<Response<UpstreamBody>, SendError>, Late> {
        // Pinned where it is made: moved into a timeout, the send's future
        // (~1.4 KiB) was copied twice more, into the timeout and into the
        // timeout's place in this future.
        let mut send = std::pin::pin!(provider.send(req, now));
        crate::runtime::warm::attempt_starting();
        let clock = self.ctx.shared.clock;
        let stall_at = d.stall_after.map(|after| clock.to_tokio(now + after));
        // On the caller connection's lent timer (`crate::timer`): one
        // timer of its own an attempt cost ~460 instructions and 13 atomic
        // read-modify-writes.
        match stall_at.filter(|at| *at < head_deadline) {
            Some(stall_at) => match within(stall_at, send.as_mut()).await {
                Ok(r) => Ok(r),
                Err(Late) => {
                    self.fin.stalled();
                    within(head_deadline, send).await
                }
            },
            None => within(head_deadline, send).await,
        }
    }

    /// A shared (cross-replica) allowance is checked here, outside the
    /// core: it needs a Redis round trip. A refusal is the core's to book.
    pub(super) async fn refused_by_shared_allowance(
        &mut self,
        rate: &crate::upstream::SharedRate,
        redis: &crate::state::RedisState,
        provider: &str,
        now: levee_policy::Instant,
    ) -> bool {
        match rate.check(redis, provider, now, self.ctx.ask.cost).await {
            Ok(()) => false,
            Err(wait) => {
                self.fin
                    .refuse(levee_policy::Refusal::RateLimited { until: now + wait });
                true
            }
        }
    }

    /// The attempt `d` is about to be sent at `now`: counted for the 503
    /// the answer becomes if the grace period ends first, reported, and its trace fields set on `fields`.
    pub(super) fn started(
        &mut self,
        d: &Dispatch,
        now: levee_policy::Instant,
        fields: &mut crate::http::outbound::Fields,
    ) {
        let (n, deadline) = (self.fin.req.attempts(), self.fin.req.deadline());
        self.sent.store(n, Ordering::Relaxed);
        self.obs.report(RequestEvent::AttemptStarted {
            dispatch: d,
            n,
            deadline,
            now,
        });
        self.obs.trace_attempt(fields);
    }

    /// The attempt `d`, sent at `started`, ended without an answer to
    /// relay: recorded in the core and reported to the observer.
    pub(super) fn finished(
        &mut self,
        d: &Dispatch,
        started: levee_policy::Instant,
        outcome: Outcome,
        result: AttemptResult,
    ) {
        if is_billed_unanswered(outcome) {
            if let Some(t) = self.fin.settle_partial(None) {
                self.obs.report(RequestEvent::TokensUsed(t));
            }
        }
        let class = self.fin.record(outcome);
        self.obs.report(RequestEvent::AttemptFinished(Finished {
            target: d.target,
            started,
            outcome,
            result,
            class,
            error: self.last_error.as_ref(),
        }));
    }

    /// A provider's error answer: read (capped, redacted) and kept as the
    /// last error; returns the attempt's outcome and result.
    pub(super) async fn upstream_error(
        &mut self,
        resp: Response<UpstreamBody>,
        until: tokio::time::Instant,
    ) -> (Outcome, AttemptResult) {
        let shared = &self.ctx.shared;
        let status = resp.status().as_u16();
        // What the provider asked for, uncapped: the core applies the
        // route's cap to the request, the model and the provider alike.
        let retry_after = levee_policy::retry_after::requested(
            resp.headers()
                .get(headers::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            resp.headers()
                .get(headers::RETRY_AFTER_MS)
                .map(|v| v.as_bytes()),
            shared.clock.unix_ms(),
        );
        let (parts, mut body) = resp.into_parts();
        let mut headers = parts.headers;
        body.take_raw().move_into(&mut headers);
        let body = read_capped(body, MAX_ERROR_BODY, until).await;
        let secrets = shared.secrets.get();
        secrets.headers(&mut headers);
        let body = secrets.bytes(body);
        let foreign = is_foreign(status, &body);
        self.last_error = Some(LastError {
            status,
            headers,
            body,
            foreign,
        });
        let outcome = Outcome::Status {
            status,
            retry_after,
        };
        (outcome, AttemptResult::of_error_status(status, foreign))
    }
}

/// Whether an attempt that ended with `outcome` had been read by the
/// provider and is billed with no answer to show for it: given up with no
/// head by its deadline, its answer broken off or too large, its caller
/// gone. (An error status is not billed, and a connection never made
/// reached nobody.)
pub(super) fn is_billed_unanswered(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Timeout
            | Outcome::FailedAfterFirstByte
            | Outcome::ResponseTooLarge
            | Outcome::CallerCancelled
    )
}

/// What a provider's answer says is left of its allowance corrects Levee's
/// view of it, before the provider has to say 429.
pub(super) fn note_reported(
    shared: &Shared,
    provider: &crate::upstream::ProviderRuntime,
    headers: &http::HeaderMap,
) {
    let mut reported =
        crate::upstream::allowance::reported(headers, || shared.clock.unix_ms()).peekable();
    if reported.peek().is_some() {
        let now = shared.clock.now();
        let mut state = provider.lock();
        for (meter, r) in reported {
            state.reported(now, meter, r);
        }
    }
}
