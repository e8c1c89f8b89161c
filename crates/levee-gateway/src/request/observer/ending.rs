//! The end of a request's books: a delivered answer, a failure or a
//! stream's end counted once, its summary log line, its span ended and its
//! `--record` tape line written.

use super::*;

/// How a request ended, for its log line; `failure` is the status Levee
/// answered with and the provider's last error, if any.
pub(super) struct Summary<'a> {
    pub(super) outcome: RequestOutcome,
    pub(super) failure: Option<(u16, Option<&'a LastError>)>,
    pub(super) added: Duration,
    pub(super) last_result: Option<AttemptResult>,
    pub(super) model: &'a str,
    /// A committed stream's bytes relayed and time from its commit point.
    pub(super) stream: Option<(u64, Duration)>,
}

/// What the log line says of the request's policy state.
#[derive(Clone, Copy)]
pub(super) struct ReqView {
    pub(super) target: usize,
    pub(super) attempts: u32,
    pub(super) deadline: Instant,
}

impl ReqView {
    pub(super) fn of(req: &RequestState) -> Self {
        ReqView {
            target: req.target(),
            attempts: req.attempts(),
            deadline: req.deadline(),
        }
    }
}

/// A stream past its commit point, kept until it ends: what its books
/// need then.
pub(super) struct Committed {
    pub(super) req: ReqView,
    pub(super) status: u16,
    pub(super) added: Duration,
    pub(super) model: String,
    /// Its `--record` tape line, finished with the events relayed when the
    /// stream ends (`None` without `--record`).
    pub(super) tape: Option<TapeLine>,
}

impl Observer {
    /// A 2xx answer from `target` (attempt begun at `started`, the answer in
    /// at `at`) is being relayed: buffered whole (`body`), or a stream from
    /// its commit point (`body` is `None`; its tape line is kept until the
    /// stream ends).
    pub(super) fn delivered(
        &mut self,
        req: &RequestState,
        started: Instant,
        at: Instant,
        head: &http::response::Parts,
        body: Option<&Bytes>,
        model: &str,
    ) {
        let shared = Arc::clone(&self.shared);
        let target = req.target();
        self.answered_by = Some(target);
        // One reading of the clock for the whole account, the deliverer's
        // (each is ~100 instructions and ~22 ns, and a request took twelve).
        self.outside += at.saturating_since(started);
        shared
            .metrics
            .attempt(self.provider_name(target), AttemptResult::Success);
        shared.census.attempt(
            self.route,
            target,
            at.saturating_since(started),
            AttemptResult::Success,
            at,
        );
        shared
            .metrics
            .attempts_per_request
            .observe(f64::from(req.attempts()));
        let total = at.saturating_since(self.arrived);
        if body.is_none() {
            shared
                .metrics
                .time_to_first_byte
                .observe(total.as_secs_f64());
        }
        let added = total.saturating_sub(self.outside);
        shared.metrics.added_latency.observe(added.as_secs_f64());
        self.note_attempt(
            self.attempt_n,
            AttemptNote {
                target,
                status: head.status.as_u16(),
                result: AttemptResult::Success,
                ms: ms(at.saturating_since(started)),
            },
        );
        if body.is_some() {
            self.count_outcome(RequestOutcome::Success, at);
            let summary = Summary {
                outcome: RequestOutcome::Success,
                failure: None,
                added,
                last_result: Some(AttemptResult::Success),
                model,
                stream: None,
            };
            self.log_summary(ReqView::of(req), at, summary);
            if let Some(span) = self.span.take() {
                span.finish(Some(head.status.as_u16()), None);
            }
        } else {
            // A stream's outcome, log line and spans wait for its end.
            let tape = self.tape_line(target, head, None, at.saturating_since(started));
            self.committed = Some(Box::new(Committed {
                req: ReqView::of(req),
                status: head.status.as_u16(),
                added,
                model: model.to_string(),
                tape,
            }));
            return;
        }
        if let Some(line) = self.tape_line(target, head, body, at.saturating_since(started)) {
            self.record(&line);
        }
    }

    /// The `--record` tape line of an answer from `target`, its head
    /// `delay` after its attempt began; `None` without `--record` (no tape
    /// line is built: its copies of the head and body were half of a plain
    /// request's heap allocations).
    pub(super) fn tape_line(
        &self,
        target: usize,
        head: &http::response::Parts,
        body: Option<&Bytes>,
        delay: Duration,
    ) -> Option<TapeLine> {
        self.shared.recorder.as_ref()?;
        let mut line = TapeLine {
            status: head.status.as_u16(),
            headers: TapeLine::headers_from(&head.headers),
            body: body.map(TapeLine::body_from),
            delay_ms: ms(delay),
            ..TapeLine::default()
        };
        self.fill_tape(target, &mut line);
        Some(line)
    }

    /// The planner gave up with `f` after `req.attempts()` attempts.
    pub(super) fn failed(
        &mut self,
        req: &RequestState,
        f: &Failure,
        last_error: Option<&LastError>,
        model: &str,
    ) {
        let shared = Arc::clone(&self.shared);
        let attempts = req.attempts();
        shared
            .metrics
            .attempts_per_request
            .observe(f64::from(attempts));
        let at = shared.clock.now();
        let why = crate::observe::outcome::failure_why(f.reason, self.last_result);
        self.count_outcome(RequestOutcome::Failed(why), at);
        if attempts == 0 || !f.upstream_status {
            shared.metrics.reject(why);
        }
        let added = at
            .saturating_since(self.arrived)
            .saturating_sub(self.outside);
        shared.metrics.added_latency.observe(added.as_secs_f64());
        let status = match why {
            crate::http::respond::Why::CredentialsUnavailable => 503,
            _ => f.status,
        };
        let summary = Summary {
            outcome: RequestOutcome::Failed(why),
            failure: Some((status, last_error)),
            added,
            last_result: self.last_result,
            model,
            stream: None,
        };
        self.log_summary(ReqView::of(req), at, summary);
    }

    /// A committed stream ended: its request's outcome is counted, its log
    /// line written and its spans ended.
    pub(super) fn stream_ended(
        &mut self,
        outcome: StreamOutcome,
        bytes: u64,
        duration: Duration,
        chunks: Option<&[String]>,
    ) {
        let Some(mut c) = self.committed.take() else {
            return;
        };
        // A stream the caller stopped reading is not recorded: its events
        // are the provider's, and the caller did not see them end.
        if let Some(mut line) = c
            .tape
            .take()
            .filter(|_| outcome != StreamOutcome::CallerLeft)
        {
            line.chunks = chunks.map(<[String]>::to_vec);
            line.cut = outcome != StreamOutcome::Completed;
            self.record(&line);
        }
        let shared = Arc::clone(&self.shared);
        let at = shared.clock.now();
        if outcome.provider_failed() {
            shared
                .metrics
                .streams_failed
                .get_or_create(&crate::observe::metrics::ProviderLabel {
                    provider: self.provider_name(c.req.target).to_string(),
                })
                .inc();
        }
        let counted = outcome.outcome();
        self.count_outcome(counted, at);
        let reason = (outcome != StreamOutcome::Completed).then_some(counted.label());
        if let Some(span) = self.span.take() {
            span.finish(Some(c.status), reason);
        }
        let summary = Summary {
            outcome: counted,
            // The caller already has the head: a stream that did not end
            // well is a failure logged under the status it was given.
            failure: reason.map(|_| (c.status, None)),
            added: c.added,
            last_result: Some(AttemptResult::Success),
            model: &c.model,
            stream: Some((bytes, duration)),
        };
        self.log_summary(c.req, at, summary);
        if self.trace.is_on() {
            self.trace
                .finish(c.status, reason, Some(self.provider_name(c.req.target)));
        }
    }

    /// The answer is known: ends the request's span.
    pub fn answered(self, answer: &Result<Response<Body>, LeveeError>) {
        if !self.trace.is_on() {
            return;
        }
        match answer {
            Ok(resp) => {
                let target = self.answered_by.map(|t| self.provider_name(t));
                self.trace.finish(resp.status().as_u16(), None, target);
            }
            Err(e) => self.trace.finish(e.status(), Some(e.why.as_str()), None),
        }
    }

    /// The summary log line, once per logical request: at INFO for a
    /// success, WARN for a failure. Levee's name for the provider is
    /// `provider` (tracing's own `target` is the log's source, and a log
    /// pipeline keeping one of two `target` keys lost the provider).
    pub(super) fn log_summary(&self, req: ReqView, at: Instant, s: Summary<'_>) {
        self.shared
            .metrics
            .request_duration
            .observe(at.saturating_since(self.arrived).as_secs_f64());
        let failed = s.failure.is_some();
        let enabled = if failed {
            tracing::enabled!(target: "levee::request", tracing::Level::WARN)
        } else {
            tracing::enabled!(target: "levee::request", tracing::Level::INFO)
        };
        if !enabled {
            return;
        }
        let Summary {
            outcome,
            failure,
            added,
            last_result,
            model,
            stream,
        } = s;
        let left = req.deadline.saturating_since(at);
        let (stream_bytes, stream_ms) = stream.map_or((0, 0), |(b, d)| (b, ms(d)));
        let (status, err) = failure.map_or((None, None), |(s, e)| (Some(s), e));
        // The provider's error body, once per logical request (five copies of
        // one validator complaint bury it).
        let upstream_error = err.map(|e| {
            let s = String::from_utf8_lossy(&e.body[..e.body.len().min(512)]).into_owned();
            if e.foreign {
                format!("(not the provider's JSON error shape: a proxy in between?) {s}")
            } else {
                s
            }
        });
        let route = &self.shared.config.routes[self.route];
        let answered = route.rewrite_model(req.target, model);
        let id = self.asked.id.to_str().unwrap_or("");
        let attempt_list = self.attempt_list();
        let duration_ms = ms(at.saturating_since(self.arrived));
        macro_rules! line {
            ($level:ident) => {
                tracing::$level!(
                    target: "levee::request",
                    request_id = id,
                    caller = self.caller_name(),
                    route = %route.name,
                    provider = %self.provider_name(req.target),
                    model,
                    model_answered = answered,
                    path = self.asked.template.as_deref().unwrap_or(self.asked.path),
                    dialect = self.asked.dialect.name(),
                    stream = self.asked.stream,
                    duration_ms,
                    attempts = req.attempts,
                    attempt_list = attempt_list.as_str(),
                    skipped = self.skipped.as_str(),
                    dropped_params = self.dropped_params.as_str(),
                    outcome = outcome.label(),
                    last_attempt = last_result.map_or("none", AttemptResult::label),
                    status = status.unwrap_or(200),
                    added_latency_us = u64::try_from(added.as_micros()).unwrap_or(u64::MAX),
                    deadline_left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                    upstream_error = upstream_error.as_deref().unwrap_or(""),
                    stream_bytes,
                    stream_ms,
                    input_tokens = self.tokens.map(|t| t.input),
                    output_tokens = self.tokens.map(|t| t.output),
                    cost_usd = self.cost_usd,
                    usage_partial = self.usage_partial,
                    "request"
                )
            };
        }
        if failed {
            line!(warn);
        } else {
            line!(info);
        }
    }

    pub(super) fn fill_tape(&self, target: usize, line: &mut TapeLine) {
        if let Some((path_and_query, model)) = &self.tape_origin {
            let model = self.shared.config.routes[self.route].rewrite_model(target, model);
            line.path = Some(crate::observe::record::tape_path(path_and_query));
            line.model = Some(model.to_string());
        }
        line.at_ms = Some(ms(self.shared.clock.now().since_origin()));
    }

    /// Writes one exchange with `target` to the `--record` tape.
    pub(super) fn tape(&self, target: usize, mut line: TapeLine) {
        if self.shared.recorder.is_some() {
            self.fill_tape(target, &mut line);
            self.record(&line);
        }
    }

    /// Writes a finished tape line.
    pub(super) fn record(&self, line: &TapeLine) {
        if let Some(r) = &self.shared.recorder {
            r.record(line, &self.shared.secrets.get());
        }
    }
}
