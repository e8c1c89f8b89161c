//! The request's observer: what happens to a request — refused, shed,
//! replayed, admitted, waiting, an attempt started or finished, delivered,
//! tokens used, failed, a stream ended — reaches it as one stream of
//! [`RequestEvent`] values, and it alone turns them into everything that
//! watches requests: the metrics, the census, the summary log line, the
//! trace spans and the `--record` tape. The driver decides; the observer
//! keeps the books.
//!
//! Events before a request has a route (or before it is admitted) are
//! booked by [`report`] over [`Shared`]; from admission on, one
//! [`Observer`] per request takes them in [`Observer::report`] and carries
//! what the books need (the route, the trace, the time spent outside the
//! gateway). A committed stream's relay owns the request's observer and
//! reports its tokens and its end to it, with the events it relayed when
//! the exchange is recorded. One read goes the other way: an attempt's
//! trace fields ([`Observer::trace_attempt`]).

use crate::http::respond::{Body, LeveeError, Why};
use crate::observe::event::{Finished, LastError, RequestEvent, StreamOutcome, TokensUsed};
use crate::observe::outcome::{AttemptResult, FallbackReason, RequestOutcome, SkipReason};
use crate::observe::record::TapeLine;
use crate::observe::telemetry::{AttemptTrace, RequestTrace};
use crate::runtime::shared::Shared;
use bytes::Bytes;
use http::Response;
use levee_policy::planner::{AttemptKind, Dispatch};
use levee_policy::{Class, Failure, Instant, Outcome, Reason, RequestState};
use levee_wire::Dialect;
use std::sync::Arc;
use std::time::Duration;

mod attempts;
mod ending;
use attempts::*;
use ending::*;

/// Books an event of a request without an observer (not admitted, or not
/// yet): counted over [`Shared`].
pub(crate) fn report(shared: &Shared, event: RequestEvent<'_>) {
    let m = &shared.metrics;
    match event {
        // Only an admitted request's observer has attempts, a stream to
        // end or a route to count tokens on.
        RequestEvent::Skipped { .. }
        | RequestEvent::Waiting { .. }
        | RequestEvent::Waited { .. }
        | RequestEvent::AttemptStarted { .. }
        | RequestEvent::AttemptFinished(_)
        | RequestEvent::Delivered { .. }
        | RequestEvent::Failed { .. }
        | RequestEvent::StreamEnded { .. }
        | RequestEvent::TokensUsed(_) => {}
        RequestEvent::Rejected(why) => m.reject(why),
        RequestEvent::Shed { route, reason } => {
            answered_by_name(shared, route, reason.into());
            m.attempts_per_request.observe(0.0);
        }
        RequestEvent::StateUnavailable { route } => {
            answered_by_name(shared, route, RequestOutcome::Failed(Why::StateUnavailable));
        }
        RequestEvent::FollowTimedOut { route } => {
            answered_by_name(shared, route, Reason::DeadlineExceeded.into());
        }
        RequestEvent::Replayed { route } => {
            m.replayed.inc();
            answered_by_name(shared, route, RequestOutcome::Replayed);
        }
        RequestEvent::CallerRetry => {
            m.caller_retries.inc();
        }
        RequestEvent::IdempotencyLocal => {
            m.idempotency_local.inc();
        }
        RequestEvent::TranslationRefused {
            route,
            provider,
            reason,
        } => m.translation_refused(route, provider, reason),
        RequestEvent::ShuttingDown => m.reject(Why::ShuttingDown),
        RequestEvent::BudgetExhausted { provider } => {
            m.budget_exhausted
                .get_or_create(&crate::observe::metrics::ProviderLabel {
                    provider: provider.to_string(),
                })
                .inc();
        }
    }
}

/// A request on the route named `route` was answered with `outcome`:
/// counted in `levee_requests_total` and in the route's recent window (the
/// status page's success ratio), alike.
fn answered_by_name(shared: &Shared, route: &str, outcome: RequestOutcome) {
    shared.metrics.request(route, outcome);
    if let Some(ri) = shared.census.route_index(route) {
        shared.census.answered(ri, outcome, shared.clock.now());
    }
}

/// Who sent a request and what it asked, for its log line.
pub(crate) struct Asked {
    /// `x-request-id`: the caller's, or one Levee made.
    pub id: http::HeaderValue,
    /// The gateway key the caller used (an index into `keys:`).
    pub key: Option<usize>,
    /// `x-levee-caller`, as the caller named itself.
    pub caller: Option<http::HeaderValue>,
    /// The caller's slot in the census (its bounded label).
    pub caller_slot: u32,
    /// Where its deadline came from: `header`, `sdk_timeout`, `default`.
    pub deadline_source: &'static str,
    pub path: &'static str,
    /// A passthrough path's template (`/v1/batches/{id}/cancel`), logged in
    /// place of `path`.
    pub template: Option<Box<str>>,
    pub dialect: Dialect,
    pub stream: bool,
}

/// One admitted request's books.
pub(crate) struct Observer {
    shared: Arc<Shared>,
    route: usize,
    trace: RequestTrace,
    arrived: Instant,
    /// Time in upstream attempts and backoff waits: not the gateway's own cost.
    outside: Duration,
    /// The last attempt's result (why a fallback happens); `None` before
    /// the first attempt ends.
    last_result: Option<AttemptResult>,
    /// The attempt in flight's span.
    span: Option<AttemptTrace>,
    /// The request's path and query and the caller's model, for the
    /// `--record` tape; `None` without one.
    tape_origin: Option<(String, String)>,
    /// Targets the planner chose and passed over because they cannot carry
    /// the request, as `x-levee-skipped` says them: `provider=reason, …`.
    skipped: String,
    /// The parameters left out for the target that answered (`on_untranslatable: drop`).
    dropped_params: String,
    /// A target of the route's first entry was passed over: it cannot
    /// carry the request (a fallback then is `untranslatable`).
    primary_skipped: bool,
    /// Sent to one target by its nature: its first attempt is no fallback.
    pinned: bool,
    asked: Asked,
    /// The first attempts, in order (no allocation: most requests make one).
    attempts: [Option<AttemptNote>; NOTED_ATTEMPTS],
    /// The number of the attempt in flight.
    attempt_n: u32,
    /// A committed stream, until it ends.
    committed: Option<Box<Committed>>,
    /// The request's outcome has been counted (once per request).
    counted: bool,
    /// The target whose answer was delivered.
    answered_by: Option<usize>,
    /// The tokens the answer's usage reported (`None`: none reported).
    tokens: Option<levee_policy::allowance::Cost>,
    /// The answer's tokens and their cost (`None`: no known price),
    /// counted when the request's outcome is.
    pending_tokens: Option<(TokensUsed, Option<f64>)>,
    /// What the answer's tokens cost, for the log line (`None`: no usage,
    /// or no known price).
    cost_usd: Option<f64>,
    /// Some tokens are partial counts: an attempt cut short.
    usage_partial: bool,
    /// Charges to the caller's books in the shared store not yet made.
    unshared: Option<Box<crate::request::spending::Unshared>>,
}

impl Observer {
    /// The request was admitted to `route`.
    pub fn admitted(
        shared: Arc<Shared>,
        route: usize,
        trace: RequestTrace,
        arrived: Instant,
        tape_origin: Option<(String, String)>,
        asked: Asked,
    ) -> Self {
        Observer {
            shared,
            route,
            trace,
            arrived,
            outside: Duration::ZERO,
            last_result: None,
            span: None,
            tape_origin,
            skipped: String::new(),
            dropped_params: String::new(),
            primary_skipped: false,
            pinned: false,
            asked,
            attempts: [None; NOTED_ATTEMPTS],
            attempt_n: 0,
            committed: None,
            counted: false,
            answered_by: None,
            tokens: None,
            pending_tokens: None,
            cost_usd: None,
            usage_partial: false,
            unshared: None,
        }
    }

    /// Who the caller is, for the log line: its gateway key's name, else
    /// the name it gave in `x-levee-caller`, else `-`.
    fn caller_name(&self) -> &str {
        if let Some(key) = self.asked.key.and_then(|i| self.shared.config.keys.get(i)) {
            return key.name();
        }
        self.asked
            .caller
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
    }

    /// The planner chose `target` and passed it over: it cannot carry the
    /// request (`reason`). Counted, logged with the request, and said in
    /// the answer's `x-levee-skipped`.
    fn skipped_target(&mut self, target: usize, reason: SkipReason) {
        if self.shared.config.routes[self.route].is_primary(target) {
            self.primary_skipped = true;
        }
        let provider = self.provider_name(target).to_string();
        report(
            &self.shared,
            RequestEvent::TranslationRefused {
                route: self.route_name(),
                provider: &provider,
                reason,
            },
        );
        if !self.skipped.is_empty() {
            self.skipped.push_str(", ");
        }
        self.skipped.push_str(&provider);
        self.skipped.push('=');
        self.skipped.push_str(reason.label());
    }

    /// The request goes to one target by its nature (a stored object's
    /// read): a first attempt past the route's primary is no fallback.
    pub(crate) fn not_a_fallback(&mut self) {
        self.pinned = true;
    }

    /// The caller's parameters the answering target was sent without.
    pub(crate) fn dropped(&mut self, params: &str) {
        self.dropped_params = params.to_string();
    }

    /// `x-levee-skipped`'s value, when a target was passed over.
    pub(crate) fn skipped(&self) -> Option<&str> {
        (!self.skipped.is_empty()).then_some(self.skipped.as_str())
    }

    fn route_name(&self) -> &str {
        &self.shared.config.routes[self.route].name
    }

    /// The request was answered with `outcome`: counted in
    /// `levee_requests_total` and the route's recent window alike.
    fn count_outcome(&mut self, outcome: RequestOutcome, at: Instant) {
        self.counted = true;
        if let Some((t, usd)) = self.pending_tokens.take() {
            self.count_tokens(t, usd, outcome == RequestOutcome::Success);
        }
        self.shared.metrics.request(self.route_name(), outcome);
        self.shared.census.answered(self.route, outcome, at);
    }

    fn provider_name(&self, target: usize) -> &str {
        // A request's target is always one the planner dispatched (it
        // starts at the first): a valid index.
        let route = &self.shared.config.routes[self.route];
        &self.shared.providers[route.targets[target].provider].name
    }

    /// A backoff (or Retry-After) wait from `now` until `until` begins.
    fn waiting(&self, now: Instant, until: Instant) {
        self.trace.wait(until.saturating_since(now));
    }

    /// The wait that began at `since` is over.
    fn waited(&mut self, since: Instant) {
        self.outside += self.shared.clock.since(since);
    }

    /// Something happened to the request: the books take it in.
    pub fn report(&mut self, event: RequestEvent<'_>) {
        match event {
            RequestEvent::Skipped { target, reason } => self.skipped_target(target, reason),
            RequestEvent::Waiting { now, until } => self.waiting(now, until),
            RequestEvent::Waited { since } => self.waited(since),
            RequestEvent::AttemptStarted {
                dispatch,
                n,
                deadline,
                now,
            } => self.attempt_started(dispatch, n, deadline, now),
            RequestEvent::AttemptFinished(f) => self.attempt_finished(f),
            RequestEvent::Delivered {
                req,
                started,
                at,
                head,
                body,
                model,
            } => self.delivered(req, started, at, head, body, model),
            RequestEvent::Failed {
                req,
                failure,
                last_error,
                model,
            } => self.failed(req, failure, last_error, model),
            RequestEvent::StreamEnded {
                outcome,
                bytes,
                duration,
                chunks,
            } => self.stream_ended(outcome, bytes, duration, chunks),
            RequestEvent::TokensUsed(t) => self.tokens_used(t),
            other => report(&self.shared, other),
        }
    }

    /// An answer's tokens: counted in `levee_tokens_total` by route,
    /// provider, model, caller and kind, and kept for the log line. The
    /// caller is the census's bounded name for it (a key's name, its
    /// `x-levee-caller` name, `anonymous`, `other` past `limits.caller_names` names), listed
    /// in `callers:` or not.
    fn tokens_used(&mut self, t: TokensUsed) {
        let sum = self.tokens.unwrap_or_default();
        self.tokens = Some(levee_policy::allowance::Cost {
            input: sum.input.saturating_add(t.used.input),
            output: sum.output.saturating_add(t.used.output),
        });
        let usd = t
            .price
            .map(|p| p.cost_cached(t.used.input.into(), t.used.output.into(), t.cached));
        if let Some(usd) = usd {
            self.cost_usd = Some(self.cost_usd.unwrap_or(0.0) + usd);
        }
        // What an attempt cut short used reached nobody whole.
        if t.partial {
            self.usage_partial = true;
            self.count_tokens(t, usd, false);
            return;
        }
        // Counted with the request's outcome (delivered or not), known at
        // its end; an earlier answer's tokens, replaced, reached nobody.
        if let Some((earlier, cost)) = self.pending_tokens.replace((t, usd)) {
            self.count_tokens(earlier, cost, false);
        }
        if self.counted {
            if let Some((t, usd)) = self.pending_tokens.take() {
                self.count_tokens(t, usd, true);
            }
        }
    }

    /// Counts an answer's tokens in `levee_tokens_total`, and their cost in
    /// `levee_spend_usd_total` where it is known, `delivered` or not; and
    /// charges them to the spend ledger and the caller's books.
    fn count_tokens(&mut self, t: TokensUsed, usd: Option<f64>, delivered: bool) {
        let shared = &self.shared;
        let route = &shared.config.routes[self.route];
        let p = route.targets[t.target].provider;
        let provider = &shared.providers[p];
        let key = (
            u32::try_from(self.route).unwrap_or(u32::MAX),
            u32::try_from(p).unwrap_or(u32::MAX),
            t.domain,
            self.asked.caller_slot,
            delivered,
        );
        let outcome = if delivered {
            "delivered"
        } else {
            "undelivered"
        };
        let model = || match provider.lock().domain_model(t.domain) {
            "" => "other".to_string(),
            m => m.to_string(),
        };
        let caller = || shared.census.caller_label(self.asked.caller_slot as usize);
        // The labels' strings are made once per series, not per request.
        let (input, output) = (u64::from(t.used.input), u64::from(t.used.output));
        shared.metrics.tokens(key, input, output, |kind| {
            crate::observe::metrics::TokensLabel {
                route: route.name.clone(),
                provider: provider.name.clone(),
                model: model(),
                caller: caller(),
                kind,
                outcome,
            }
        });
        if let Some(usd) = usd {
            shared
                .metrics
                .spend(key, usd, || crate::observe::metrics::SpendLabel {
                    route: route.name.clone(),
                    provider: provider.name.clone(),
                    model: model(),
                    caller: caller(),
                    outcome,
                });
        }
        self.charge(t, usd, delivered);
    }

    /// Charges an answer's tokens to the spend ledger and the caller's
    /// books; a charge the shared store is still to make is kept.
    fn charge(&mut self, t: TokensUsed, usd: Option<f64>, delivered: bool) {
        let shared = &self.shared;
        let route = &shared.config.routes[self.route];
        let p = route.targets[t.target].provider;
        let provider = &shared.providers[p];
        let charge = crate::spend::Charge {
            ruled: crate::request::spending::rules_of(shared, Some(self.caller_name()))
                .map(|r| r.name.as_str()),
            series: (
                shared.generation.number,
                u32::try_from(self.route).unwrap_or(u32::MAX),
                u32::try_from(p).unwrap_or(u32::MAX),
                t.domain,
                self.asked.caller_slot,
                delivered,
            ),
            used: t.used,
            usd,
            partial: t.partial,
        };
        let names = || crate::spend::ledger::SeriesNames {
            caller: shared.census.caller_label(self.asked.caller_slot as usize),
            route: route.name.clone(),
            provider: provider.name.clone(),
            model: match provider.lock().domain_model(t.domain) {
                "" => "other".to_string(),
                m => m.to_string(),
            },
            outcome: if delivered {
                "delivered"
            } else {
                "undelivered"
            },
        };
        if let Some(u) = crate::request::spending::charge(shared, charge, names, t.at) {
            match self.unshared.as_mut() {
                Some(earlier) => earlier.add(u),
                None => self.unshared = Some(Box::new(u)),
            }
        }
    }

    /// Whether a charge waits to be shared ([`Observer::share_charges`]).
    pub(crate) fn has_charges_to_share(&self) -> bool {
        self.unshared.is_some()
    }

    /// Makes the caller's charges in the shared store now: before a plain
    /// answer goes out, so the caller's next call finds its spend on every
    /// replica.
    pub(crate) async fn share_charges(&mut self) {
        if let Some(u) = self.unshared.take() {
            u.share(&self.shared).await;
        }
    }

    /// The last attempt's result; `None` before the first attempt ends.
    pub fn last_result(&self) -> Option<AttemptResult> {
        self.last_result
    }
}

impl Drop for Observer {
    /// A request dropped before its outcome was counted still gets one: its
    /// answer was cut off by the end of the shutdown grace period (the 503
    /// the grace guard sends), or its caller went away before the answer.
    /// Charges to the caller's shared books not made yet (a stream's, a
    /// request's that ended without a plain answer) are made off the path.
    fn drop(&mut self) {
        if !self.counted {
            // Its attempts count toward amplification like any request's.
            self.shared
                .metrics
                .attempts_per_request
                .observe(f64::from(self.attempt_n));
            let outcome = if self.shared.grace_over.is_over() {
                RequestOutcome::Failed(Why::ShuttingDown)
            } else {
                RequestOutcome::ClientClosed
            };
            let at = self.shared.clock.now();
            self.count_outcome(outcome, at);
        }
        if let Some(u) = self.unshared.take() {
            u.share_later(&self.shared);
        }
    }
}

/// Whether a provider's 4xx body has its JSON error shape.
pub(crate) fn is_foreign(status: u16, body: &[u8]) -> bool {
    (400..500).contains(&status) && !Dialect::is_provider_error_shape(body)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
