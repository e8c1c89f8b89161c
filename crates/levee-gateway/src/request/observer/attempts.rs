//! The request's attempts as its books keep them: each started and
//! finished (metrics, census, trace span, tape), and the first few noted
//! for its log line.

use super::*;

/// One attempt, as the request's log line lists it.
#[derive(Clone, Copy)]
pub(super) struct AttemptNote {
    pub(super) target: usize,
    /// The provider's status, or 0 when it gave none.
    pub(super) status: u16,
    pub(super) result: AttemptResult,
    pub(super) ms: u64,
}

/// The attempts a log line lists one by one; later ones are counted only.
pub(super) const NOTED_ATTEMPTS: usize = 8;

impl Observer {
    /// Notes an attempt for the log line.
    pub(super) fn note_attempt(&mut self, n: u32, note: AttemptNote) {
        let i = (n as usize).saturating_sub(1);
        if let Some(slot) = self.attempts.get_mut(i) {
            *slot = Some(note);
        }
    }

    /// The attempts as the log line says them: `provider status|result ms`.
    pub(super) fn attempt_list(&self) -> String {
        let mut out = String::new();
        for a in self.attempts.iter().flatten() {
            if !out.is_empty() {
                out.push_str(", ");
            }
            out.push_str(self.provider_name(a.target));
            out.push(' ');
            if a.status != 0 {
                out.push_str(&a.status.to_string());
            } else {
                out.push_str(a.result.label());
            }
            out.push(' ');
            out.push_str(&a.ms.to_string());
            out.push_str("ms");
        }
        out
    }

    /// Attempt `n` (the planner's dispatch `d`) is about to be sent: its
    /// span begins (its trace fields are then [`Self::trace_attempt`]'s).
    pub(super) fn attempt_started(
        &mut self,
        d: &Dispatch,
        n: u32,
        deadline: Instant,
        now: Instant,
    ) {
        let shared = &self.shared;
        let primary = shared.config.routes[self.route].is_primary(d.target);
        let first_past_primary = d.kind == AttemptKind::First && !primary && !self.pinned;
        if d.kind == AttemptKind::Fallback || first_past_primary {
            // Past a primary that refused without an attempt: what refused
            // it (it cannot carry the request: `untranslatable`). After an
            // answered attempt: that attempt's result.
            let reason = match d.primary_refused {
                Some(_) | None if self.primary_skipped && self.last_result.is_none() => {
                    FallbackReason::Untranslatable
                }
                Some(r) => FallbackReason::PrimaryRefused(r),
                None if d.kind == AttemptKind::First => FallbackReason::PrimaryRefusedUnsaid,
                None => self
                    .last_result
                    .map_or(FallbackReason::NoAttempt, FallbackReason::After),
            };
            shared.metrics.fallback(self.route_name(), reason);
            shared
                .census
                .fallback(self.route, d.target, reason, &shared.clock);
        }
        let source = crate::observe::metrics::DeadlineSourceLabel {
            deadline_source: self.asked.deadline_source,
        };
        shared
            .metrics
            .deadline_remaining_at_dispatch
            .get_or_create(&source)
            .observe(deadline.saturating_since(now).as_secs_f64());
        self.attempt_n = n;
        let span = self
            .trace
            .attempt(self.route_name(), self.provider_name(d.target), n);
        self.span = Some(span);
    }

    /// Sets the attempt in flight's trace fields on its upstream request.
    pub fn trace_attempt(&self, fields: &mut crate::http::outbound::Fields) {
        if let Some(span) = &self.span {
            span.inject(fields);
        }
    }

    /// The attempt ended without an answer to relay.
    pub(super) fn attempt_finished(&mut self, f: Finished<'_>) {
        let shared = Arc::clone(&self.shared);
        let at = shared.clock.now();
        self.outside += at.saturating_since(f.started);
        if shared.recorder.is_some() {
            let mut line = TapeLine {
                delay_ms: ms(at.saturating_since(f.started)),
                ..TapeLine::default()
            };
            match f.outcome {
                Outcome::Timeout => line.stall = true,
                Outcome::Status { status, .. } => {
                    line.status = status;
                    if let Some(e) = f.error {
                        line.headers = TapeLine::headers_from(&e.headers);
                        line.body = Some(TapeLine::body_from(&e.body));
                    }
                }
                _ => line.reset = true,
            }
            self.tape(f.target, line);
        }
        // An attempt the caller's deadline cut short is not the provider's slowness.
        let result = if f.class == Class::NotProviderFault {
            f.result.cut_by_deadline()
        } else {
            f.result
        };
        shared.metrics.attempt(self.provider_name(f.target), result);
        let status = match f.outcome {
            Outcome::Status { status, .. } => Some(status),
            _ => None,
        };
        if let Some(span) = self.span.take() {
            span.finish(status, Some(result.label()));
        }
        self.note_attempt(
            self.attempt_n,
            AttemptNote {
                target: f.target,
                status: status.unwrap_or(0),
                result,
                ms: ms(at.saturating_since(f.started)),
            },
        );
        shared.census.attempt(
            self.route,
            f.target,
            at.saturating_since(f.started),
            result,
            at,
        );
        self.last_result = Some(result);
    }
}
