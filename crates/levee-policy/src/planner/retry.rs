//! Retrying on the same target: how long to wait (backoff, Retry-After, the
//! target's own pace), whether the deadline holds it, and what it spends.

use super::failure::{non_retry_reason, refusal_reason};
use super::request::{Last, Pending, RequestState, BUDGET_PATIENCE, BUDGET_RECHECK};
use super::{AttemptKind, Decision, Dependencies, Inputs, Reason, RoutePolicy, RETRY_AFTER_SPREAD};
use crate::backoff::Jitter;
use crate::classify::Class;
use crate::provider::Refusal;
use crate::time::Instant;
use rand::Rng;
use std::time::Duration;

/// Attempts on one target while its retries are not winning, when
/// `max_attempts` allows more: the official SDKs' own count (1 + 2
/// retries). Retries that lose at a 60 % rate cost 1.96 requests a call at
/// three attempts and 2.34 at five, for answers the provider was refusing.
pub const LOSING_ATTEMPTS: u32 = 3;

impl RoutePolicy {
    /// A retry on target `t` after `last`, with `remaining` left before the
    /// deadline: sent now, or pending until its wait is over; or why it
    /// cannot start.
    pub(super) fn plan_retry<D: Dependencies, R: Rng + ?Sized>(
        &self,
        inputs: Inputs<'_, D, R>,
        t: usize,
        remaining: Duration,
        last: Last,
    ) -> Result<Decision, (Reason, Option<Duration>)> {
        let Inputs(req, deps, now, rng) = inputs;
        // While retries on this target win, a transient fault (no
        // Retry-After, not an overload status) is retried after the first
        // step's jitter, not an exponential one: a second attempt is as good
        // now as later, and waiting only delays the answer (a 30 % brownout's
        // p99 went from 0.53 s to under 0.3 s). Retries that lose back off
        // exponentially, and pay for themselves from the budget.
        let winning_transient = last.winning == Some(true) && transient(last);
        let n = if winning_transient {
            0
        } else {
            req.attempts_on_target.saturating_sub(1)
        };
        let wait = self.retry_wait(deps, now, t, last, n, rng)?;
        let needed = wait
            + self.expected_now(deps, t, now)
            + self.reserve_after_now(deps, t, now)
            + self.margin;
        if remaining < needed {
            let ra = last.class.wait();
            return Err((Reason::DeadlineExceeded, ra));
        }
        if let Err(blocked) = spend_retry(req, deps, now, t, last, winning_transient) {
            if !self.may_wait_for_budget(req, now, last) {
                deps.budget_refused(t);
                return Err(blocked);
            }
            req.unpaid = true;
        }
        let wait = if req.unpaid {
            wait.max(BUDGET_RECHECK)
        } else {
            wait
        };
        if wait.is_zero() {
            return self
                .dispatch(req, deps, now, t, AttemptKind::Retry)
                .map(Decision::Dispatch)
                .map_err(|r| refusal_reason(r, now));
        }
        let at = now + wait;
        req.pending = Some(Pending {
            target: t,
            at,
            kind: AttemptKind::Retry,
        });
        Ok(Decision::Wait { until: at })
    }

    /// Whether a retry the budget refused may wait for a token: after a
    /// transient fault, while the evidence on its target is out, within
    /// [`BUDGET_PATIENCE`] of the request's first refusal.
    fn may_wait_for_budget(&self, req: &mut RequestState, now: Instant, last: Last) -> bool {
        if last.winning.is_some() || !transient(last) {
            return false;
        }
        let by = *req.budget_by.get_or_insert(now + BUDGET_PATIENCE);
        now + BUDGET_RECHECK <= by
    }

    /// A pending retry that was not paid for asks the budget again: paid
    /// now, or waits another recheck within its patience, or is refused.
    pub(super) fn pay_pending<D: Dependencies>(
        &self,
        req: &mut RequestState,
        deps: &mut D,
        now: Instant,
        t: usize,
    ) -> Result<Option<Instant>, (Reason, Option<Duration>)> {
        if !req.unpaid {
            return Ok(None);
        }
        if deps.winning(t, now) == Some(true) && deps.free_retry(t, now) {
            // The evidence came in while it waited: retries on the target
            // win, and a retry that wins is not paid for.
            req.unpaid = false;
            return Ok(None);
        }
        if deps.withdraw(t, now) {
            req.unpaid = false;
            req.refundable += 1;
            return Ok(None);
        }
        match req.budget_by {
            Some(by) if now + BUDGET_RECHECK <= by => Ok(Some(now + BUDGET_RECHECK)),
            _ => {
                req.unpaid = false;
                deps.budget_refused(t);
                Err((Reason::BudgetExhausted, None))
            }
        }
    }

    /// How long a retry on `t` after `last` waits: backoff step `n`, and no
    /// less than the Retry-After `last` asked for or the time until the
    /// target's pace, breaker or ramp lets it through, each spread. A
    /// Retry-After longer than the cap is not waited on: the retry fails.
    fn retry_wait<D: Dependencies, R: Rng + ?Sized>(
        &self,
        deps: &D,
        now: Instant,
        t: usize,
        last: Last,
        n: u32,
        rng: &mut R,
    ) -> Result<Duration, (Reason, Option<Duration>)> {
        let mut wait = self.backoff.delay(n, rng);
        if self.respect_retry_after {
            if let Some(ra) = last.class.wait() {
                if ra > self.retry_after_cap {
                    // Longer than we hold a request: not waited on here.
                    return Err((non_retry_reason(last.class).0, Some(self.retry_after_cap)));
                }
                if lost_race(last, deps.headroom(t, now)) {
                    // A 429 that retries keep winning (a third or more of
                    // them succeed, the faults do not follow load), or
                    // that came while the provider's own rate-limit fields
                    // said its allowance has room, is a busy replica, not
                    // the account's limit (fields at 0 say it is): the retry
                    // backs off as after any transient fault, never longer
                    // than asked. Waiting the full `retry-after: 2` on
                    // each of five retries put a 60 % 429 storm's p99 at
                    // 10 s for answers a prompt retry would have won.
                    wait = wait.min(ra);
                } else {
                    // Not before the server asked, and spread so that 24
                    // workers told "2 s" do not all come back in the same
                    // millisecond.
                    wait = wait.max(ra + self.spread(rng));
                }
            }
        }
        match deps.check_kind(t, now, AttemptKind::Retry) {
            Ok(()) => {}
            Err(Refusal::Throttled { until })
            | Err(Refusal::CircuitOpen { until })
            | Err(Refusal::Recovering { until }) => {
                wait = wait.max(until.saturating_since(now) + self.spread(rng));
            }
            // Shed / rate limit may clear by the time the wait is over.
            Err(_) => {}
        }
        Ok(wait)
    }

    /// The spread added to a wait someone else set (a Retry-After, a pace):
    /// up to the first backoff cap or [`RETRY_AFTER_SPREAD`], whichever is
    /// larger; none when the route's backoff has no jitter.
    fn spread<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        match self.backoff.jitter() {
            Jitter::None => Duration::ZERO,
            _ => {
                let width = self.backoff.cap(0).max(RETRY_AFTER_SPREAD);
                let cap = u64::try_from(width.as_nanos()).unwrap_or(u64::MAX);
                Duration::from_nanos(rng.gen_range(0..=cap))
            }
        }
    }
}

/// Spends what a retry on `t` after `last` costs: a token from the target's
/// retry budget, unless it is paced or its retries are winning; one spent
/// after a transient fault may be refunded.
fn spend_retry<D: Dependencies>(
    req: &mut RequestState,
    deps: &mut D,
    now: Instant,
    t: usize,
    last: Last,
    winning_transient: bool,
) -> Result<(), (Reason, Option<Duration>)> {
    // A retry after a 429 spends no retry budget: the model's pace
    // (what the provider accepts) bounds it, with `max_attempts`. Nor
    // does a retry after a transient fault while retries win: it would
    // be refunded when it works, and the budget held 11 of 800 calls of
    // a 30 % brownout from attempts that would have worked. An outage
    // (nothing wins) is the breaker's: 20 faults in a row open it.
    let paced = matches!(last.class, Class::Throttled { wait: Some(_), .. });
    // Unpaid while winning, up to the ceiling on refunded retries.
    let free = winning_transient && deps.free_retry(t, now);
    if !paced && !free {
        if !deps.withdraw(t, now) {
            return Err((Reason::BudgetExhausted, None));
        }
        if transient(last) {
            req.refundable += 1;
        }
    }
    Ok(())
}

/// Whether `last` is a 429 lost in a race, not the account's limit: the
/// provider's rate-limit fields say its allowance has room, or — when they
/// say nothing — the model's retries are winning (see
/// [`crate::learn::Retries::winning`]). A retry now does about as well as
/// one after the wait asked for.
fn lost_race(last: Last, headroom: Option<bool>) -> bool {
    matches!(last.class, Class::Throttled { .. }) && headroom.unwrap_or(last.winning == Some(true))
}

/// Whether a retry after `last` may be refunded when it works: a transient
/// fault, not an overload signal (429, 529, or any Retry-After). A 529
/// whose model's retries are proven winning is transient too: the status
/// says "overloaded", the evidence says a retry wins as often as any
/// attempt (a region answering half of everything 529 at random, whatever
/// its load). Held to the budget, its retries answered 71 % of calls where
/// the SDK alone answered 89 %.
fn transient(last: Last) -> bool {
    match last.class {
        Class::Fault { wait: None, .. } => last.status != Some(529) || last.winning == Some(true),
        _ => false,
    }
}
