//! What a target really does: its attempt times and the pace it accepts.
//!
//! A route's `expected_attempt_ms` is an operator's guess at "a full call
//! at the slow end", and every deadline judgment leans on it: whether a
//! retry can start, what a fallback needs, how much of an attempt's timeout
//! is kept for the backup. A guess of 20 s in front of a provider that
//! answers in 2 s made every caller with an 8 s deadline look too short for
//! anything: a stalled primary took all 8 s and the backup was never asked.
//! [`AttemptTimes`] learns a recent high percentile of the target's real
//! attempts, and the planner uses it — never above the configured value,
//! which stays the starting point and the cap.
//!
//! [`Pace`] learns how many answers a throttled model gives per second, so
//! that a 429 slows a model down to what the provider accepts instead of
//! shutting it out (a single `retry-after: 2` used to refuse every request
//! for two seconds, again and again: 22 of 600 calls succeeded in a storm
//! where the provider accepted 40 % of requests).
//!
//! Both are fixed-size and allocation-free.

use crate::time::Instant;
use std::time::Duration;

mod retries;
pub use retries::{clearly_below, Retries, WINNING_SHARE};

/// Buckets of the latency histogram: bucket `i` holds times up to
/// `1 ms · 1.25^i` (64 buckets reach ~1,600 s).
const BUCKETS: usize = 64;
/// Each histogram covers this long; the estimate reads the current one and
/// the one before it, so it reflects the last 30 to 60 seconds.
const PERIOD: Duration = Duration::from_secs(30);
/// Fewer observations than this and the configured value stands.
pub const MIN_SAMPLES: u32 = 20;
/// The percentile learned.
const QUANTILE: f64 = 0.99;

fn bucket_of(d: Duration) -> usize {
    let ms = d.as_secs_f64() * 1000.0;
    if ms <= 1.0 {
        return 0;
    }
    let i = (ms.ln() / 1.25f64.ln()).ceil();
    if i >= (BUCKETS - 1) as f64 {
        BUCKETS - 1
    } else {
        i as usize
    }
}

fn bucket_top(i: usize) -> Duration {
    Duration::from_secs_f64(1.25f64.powi(i32::try_from(i).unwrap_or(i32::MAX)) / 1000.0)
}

#[derive(Clone, Copy, Debug)]
struct Histogram {
    epoch: u64,
    count: u32,
    buckets: [u32; BUCKETS],
}

impl Histogram {
    const EMPTY: Histogram = Histogram {
        epoch: u64::MAX,
        count: 0,
        buckets: [0; BUCKETS],
    };
}

/// A recent p99 of one target's attempt times (dispatch to answer: the
/// whole body for a plain answer, the first event for a stream), learned
/// from successful attempts only — a stall or an outage has no successes,
/// so it cannot teach the estimate that the provider is slow.
#[derive(Clone, Debug)]
pub struct AttemptTimes {
    hist: [Histogram; 2],
}

impl Default for AttemptTimes {
    fn default() -> Self {
        AttemptTimes {
            hist: [Histogram::EMPTY; 2],
        }
    }
}

impl AttemptTimes {
    fn epoch(now: Instant) -> u64 {
        now.as_nanos() / PERIOD.as_nanos() as u64
    }

    /// Notes one successful attempt that took `took`.
    pub fn observe(&mut self, now: Instant, took: Duration) {
        let e = Self::epoch(now);
        let h = &mut self.hist[(e % 2) as usize];
        if h.epoch != e {
            *h = Histogram {
                epoch: e,
                ..Histogram::EMPTY
            };
        }
        h.count = h.count.saturating_add(1);
        let b = &mut h.buckets[bucket_of(took)];
        *b = b.saturating_add(1);
    }

    /// The learned p99 (the top of its bucket, so at most 25 % above the
    /// true value), or `None` with fewer than [`MIN_SAMPLES`] recent
    /// observations.
    pub fn p99(&self, now: Instant) -> Option<Duration> {
        let e = Self::epoch(now);
        let live = |h: &&Histogram| h.epoch == e || h.epoch.wrapping_add(1) == e;
        let total: u32 = self.hist.iter().filter(live).map(|h| h.count).sum();
        if total < MIN_SAMPLES {
            return None;
        }
        // The smallest bucket with at least 99 % of the observations at or below it.
        let need = (f64::from(total) * QUANTILE).ceil() as u32;
        let mut seen = 0u32;
        for i in 0..BUCKETS {
            seen += self
                .hist
                .iter()
                .filter(live)
                .map(|h| h.buckets[i])
                .sum::<u32>();
            if seen >= need {
                return Some(bucket_top(i));
            }
        }
        Some(bucket_top(BUCKETS - 1))
    }
}

/// Seconds of history the pace reads.
const PACE_SECONDS: usize = 5;

#[derive(Clone, Copy, Debug, Default)]
struct Second {
    epoch: u64,
    /// The first attempt sent or answer noted in this second.
    first: Instant,
    sent: u32,
    accepted: u32,
    throttled: u32,
}

/// What the model did over the pace's window: attempts sent, answers, and
/// how long the window has run (from its first event to now).
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    sent: u32,
    accepted: u32,
    throttled: u32,
    seconds: f64,
}

impl Window {
    fn answered(self) -> u32 {
        self.accepted + self.throttled
    }
}

/// The share of 429s among `n` answers of which `t` were 429s, as a fraction.
fn share(t: u32, n: u32) -> f64 {
    f64::from(t) / f64::from(n.max(1))
}

/// The variance of a share of `t` in `n`, read with one 429 and one
/// acceptance added (a share of 1 in 1 is not certain).
fn share_variance(t: u32, n: u32) -> f64 {
    let p = (f64::from(t) + 1.0) / (f64::from(n) + 2.0);
    p * (1.0 - p) / f64::from(n.max(1))
}

/// The share of 429s at one rate: the one a new rate is judged against.
#[derive(Clone, Copy, Debug)]
struct Reference {
    throttled: u32,
    answered: u32,
    /// Attempts per second sent (before the pace) or granted (under it).
    rate: f64,
}

/// The answers to attempts sent at the rate in force, counted from the
/// second after it was set.
#[derive(Clone, Copy, Debug, Default)]
struct Trial {
    since: u64,
    accepted: u32,
    throttled: u32,
}

/// How a throttled model is paced: the answers it accepts (not 429) per
/// second, and whether slowing down lowers its share of 429s.
///
/// A share read off a few answers is noise: at a true 60 %, one second of
/// five answers reads anywhere from 0 to 100 %. Judging a pace on one
/// second at a time took such noise for "slowing down helped" and cut a
/// random storm's pace to 40 % of what it sent, second after second, down
/// to one attempt a second while callers sent 20. So every judgment waits
/// for [`PACE_EVIDENCE`] answers, and a share only counts as lower or
/// higher when it differs beyond two standard errors of both reads.
///
/// The rules, judged once a second while a pace is in force:
/// - a 429 with a wait starts a pace. With twice [`PACE_EVIDENCE`] answers
///   in the last five seconds (the current one counted for the part that
///   has run, not as a whole second), they are its reference: the share of
///   429s unslowed, and the pace starts at the rate the provider accepted.
///   With fewer, it holds the rate attempts were sent at until it has them;
/// - the answers to attempts sent at one rate are counted from the second
///   after it was set; while fewer than [`PACE_EVIDENCE`], the rate holds
///   (neither cut nor grown);
/// - 429s under a tenth of them: the provider is content, the pace probes
///   up by a quarter (a limit that rose is found);
/// - a tenth or more after a rate with fewer: a limit was crossed, the pace
///   is what the provider accepted at this rate;
/// - slower than the rate before and refused at most half as often, or
///   faster and refused more often: the 429s follow our rate, the pace is
///   what the provider accepted (a limiter refuses almost nothing at the
///   rate it accepts; a random share of 60 % read off 40 answers can look
///   like 80 %, so a smaller fall is not taken for one);
/// - otherwise the 429s do not follow our rate (a shared pool refusing a
///   share of everyone's requests at any pace; pacing to what it accepts
///   would shrink the pace without end): the pace grows by half, to at
///   least the rate sent before the pace, and while it keeps growing the
///   shares it meets are read as one;
/// - a pace that is not binding (fewer attempts sent than half of it) ends;
///   one that ended by growing marks the model's 429s as not about our
///   rate for 30 s, in which a 429 holds only the request that got it.
#[derive(Clone, Debug, Default)]
pub struct Pace {
    /// A ring of the last seconds: the current one and `PACE_SECONDS` full ones.
    seconds: [Second; PACE_SECONDS + 1],
    /// The share of 429s at the rate before this one (at first, before
    /// the pace); `None` while the pace holds the sent rate for want of
    /// answers.
    reference: Option<Reference>,
    /// Attempts per second sent before the pace.
    unpaced: f64,
    /// The answers at the rate in force.
    trial: Trial,
    /// Attempts per second granted, the second it was set, and whether it
    /// last grew because slowing down did not help.
    rate: Option<(f64, u64, bool)>,
    /// The next instant an attempt may be admitted under the pace.
    next: Instant,
    /// Until then, 429s are taken as not about our rate.
    indifferent_until: Instant,
}

/// The least pace of a throttled model that the provider still answers.
pub const MIN_PACE_PER_SECOND: f64 = 1.0;

/// Fewer answers than this and a share of 429s is not judged.
pub const PACE_EVIDENCE: u32 = 20;

/// A window shorter than this is read as this long (one attempt at 20/s).
const MIN_WINDOW: Duration = Duration::from_millis(50);

/// How long a model whose 429s did not follow our rate is not paced.
const INDIFFERENT_FOR: Duration = Duration::from_secs(30);

fn epoch_of(now: Instant) -> u64 {
    now.as_nanos() / 1_000_000_000
}

impl Pace {
    fn second(&mut self, now: Instant) -> &mut Second {
        let e = epoch_of(now);
        let s = &mut self.seconds[(e % (PACE_SECONDS as u64 + 1)) as usize];
        if s.epoch != e || s.sent + s.accepted + s.throttled == 0 {
            *s = Second {
                epoch: e,
                first: now,
                ..Second::default()
            };
        }
        s
    }

    /// The current second and the last full ones, from the first event in
    /// them to `now`.
    fn window(&self, now: Instant) -> Window {
        let e = epoch_of(now);
        let live = self
            .seconds
            .iter()
            .filter(|s| s.epoch <= e && e - s.epoch <= PACE_SECONDS as u64)
            .filter(|s| s.sent + s.accepted + s.throttled > 0);
        let mut w = Window::default();
        let mut first = now;
        for s in live {
            w.sent += s.sent;
            w.accepted += s.accepted;
            w.throttled += s.throttled;
            first = first.min(s.first);
        }
        w.seconds = now.saturating_since(first).max(MIN_WINDOW).as_secs_f64();
        w
    }

    /// Notes an attempt sent.
    pub fn sent(&mut self, now: Instant) {
        self.second(now).sent += 1;
    }

    /// Notes an answer: a 429 (`throttled`) or any other answer.
    pub fn answered(&mut self, now: Instant, throttled: bool) {
        let s = self.second(now);
        if throttled {
            s.throttled += 1;
        } else {
            s.accepted += 1;
        }
        if self.rate.is_some() && epoch_of(now) > self.trial.since {
            if throttled {
                self.trial.throttled += 1;
            } else {
                self.trial.accepted += 1;
            }
        }
    }

    /// Sets the rate in force from second `e` on, its answers counted anew.
    fn set(&mut self, rate: f64, e: u64, grew: bool) -> f64 {
        let rate = rate.max(MIN_PACE_PER_SECOND);
        self.rate = Some((rate, e, grew));
        self.trial = Trial {
            since: e,
            ..Trial::default()
        };
        rate
    }

    /// Takes the window as the reference when it holds enough answers;
    /// returns the rate to start from: what the provider accepted, or with
    /// too few answers, what was sent.
    fn reference_from(&mut self, now: Instant) -> f64 {
        let w = self.window(now);
        if w.answered() < 2 * PACE_EVIDENCE {
            self.reference = None;
            return f64::from(w.sent) / w.seconds;
        }
        self.unpaced = f64::from(w.sent) / w.seconds;
        self.reference = Some(Reference {
            throttled: w.throttled,
            answered: w.answered(),
            rate: self.unpaced,
        });
        f64::from(w.accepted) / w.seconds
    }

    /// A 429 with a wait: starts a pace unless one is in force or the
    /// model's 429s were lately found not to follow our rate.
    pub fn throttled(&mut self, now: Instant) {
        if self.rate.is_some() || now < self.indifferent_until {
            return;
        }
        let rate = self.reference_from(now);
        self.set(rate, epoch_of(now), false);
        self.next = now;
    }

    /// The pace in force now (attempts per second), judged once a second;
    /// `None` once it has ended.
    fn judge(&mut self, now: Instant) -> Option<f64> {
        let e = epoch_of(now);
        let (rate, since, grew) = self.rate?;
        if e <= since {
            return Some(rate);
        }
        let last = self
            .seconds
            .iter()
            .find(|s| s.epoch + 1 == e)
            .copied()
            .unwrap_or_default();
        if f64::from(last.sent) < rate / 2.0 {
            self.rate = None;
            if grew {
                self.indifferent_until = now + INDIFFERENT_FOR;
            }
            return None;
        }
        let Some(reference) = self.reference else {
            // Holding the sent rate until the answers tell what it was.
            let start = self.reference_from(now);
            return Some(match self.reference {
                Some(_) => self.set(start, e, false),
                None => {
                    self.rate = Some((rate, e, grew));
                    rate
                }
            });
        };
        let (accepted, throttled) = self.trial_answers(e);
        if accepted + throttled < PACE_EVIDENCE {
            // Too few to tell: neither cut nor grown.
            self.rate = Some((rate, e, grew));
            return Some(rate);
        }
        Some(self.next_rate(e, rate, grew, reference, accepted, throttled))
    }

    /// The answers at the rate in force in its full seconds, as
    /// (accepted, throttled): the current second `e`, begun, is left out.
    fn trial_answers(&self, e: u64) -> (u32, u32) {
        let current = self
            .seconds
            .iter()
            .find(|s| s.epoch == e)
            .copied()
            .unwrap_or_default();
        (
            self.trial.accepted.saturating_sub(current.accepted),
            self.trial.throttled.saturating_sub(current.throttled),
        )
    }

    /// The rate set from second `e` on, after the trial at `rate` (`grew`:
    /// set by growing past rates the 429s did not follow) drew `accepted`
    /// and `throttled` answers: its share of 429s against the `reference`
    /// share says whether the 429s follow our rate, and so whether to grow,
    /// hold to what was accepted, or keep growing past them.
    fn next_rate(
        &mut self,
        e: u64,
        rate: f64,
        grew: bool,
        reference: Reference,
        accepted: u32,
        throttled: u32,
    ) -> f64 {
        let answered = accepted + throttled;
        let full_seconds = e.saturating_sub(self.trial.since + 1).max(1) as f64;
        let accepted_rate = f64::from(accepted) / full_seconds;
        let (now_share, then) = (
            share(throttled, answered),
            share(reference.throttled, reference.answered),
        );
        let noise = 2.0
            * (share_variance(reference.throttled, reference.answered)
                + share_variance(throttled, answered))
            .sqrt();
        let (lower, higher) = (
            then - now_share >= noise.max(then / 2.0),
            now_share - then >= noise.max(0.05),
        );
        self.reference = Some(Reference {
            throttled,
            answered,
            rate,
        });
        if grew && !lower && !higher {
            // Still not following our rate: the shares at every rate since
            // are one share, read off all their answers.
            self.reference = Some(Reference {
                throttled: throttled + reference.throttled,
                answered: answered + reference.answered,
                rate,
            });
        }
        if now_share < 0.1 {
            self.set(rate * 1.25, e, false)
        } else if then < 0.1 {
            // Faster than a rate the provider was content with: a limit.
            self.set(accepted_rate, e, false)
        } else if rate <= reference.rate && !lower || rate > reference.rate && !higher {
            // Slower, yet refused as often; or faster, and refused no more
            // often: the 429s do not follow our rate.
            self.set((rate * 1.5).max(self.unpaced), e, true)
        } else {
            // Slower and refused less, or faster and refused more.
            self.set(accepted_rate, e, false)
        }
    }

    /// Whether a pace is in force.
    pub fn active(&self) -> bool {
        self.rate.is_some()
    }

    /// Whether an attempt may go now under the pace; `Err(at)` says when the
    /// next one may.
    pub fn peek(&self, now: Instant) -> Result<(), Instant> {
        if self.rate.is_none() || now >= self.next {
            Ok(())
        } else {
            Err(self.next)
        }
    }

    /// Takes a slot of the pace (call after [`Pace::peek`] said yes).
    pub fn take(&mut self, now: Instant) {
        if let Some(rate) = self.judge(now) {
            let gap = Duration::from_secs_f64(1.0 / rate.max(MIN_PACE_PER_SECOND));
            self.next = self.next.max(now - Duration::from_secs(1).min(gap)) + gap;
        }
    }

    /// The pace in force (attempts per second), if any.
    pub fn current(&self) -> Option<f64> {
        self.rate.map(|(r, _, _)| r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_estimate_until_enough_samples_then_the_p99() {
        let mut t = AttemptTimes::default();
        let now = Instant::from_millis(1_000);
        for _ in 0..19 {
            t.observe(now, Duration::from_millis(100));
        }
        assert_eq!(t.p99(now), None);
        for _ in 0..81 {
            t.observe(now, Duration::from_millis(100));
        }
        t.observe(now, Duration::from_secs(3));
        let p = t.p99(now).unwrap();
        assert!(
            p >= Duration::from_millis(100) && p <= Duration::from_millis(125),
            "{p:?}"
        );
        // 2 of 102 slow: the p99 is slow.
        t.observe(now, Duration::from_secs(3));
        let p = t.p99(now).unwrap();
        assert!(
            p >= Duration::from_secs(3) && p <= Duration::from_millis(3750),
            "{p:?}"
        );
    }

    #[test]
    fn old_observations_age_out() {
        let mut t = AttemptTimes::default();
        for _ in 0..50 {
            t.observe(Instant::from_millis(1_000), Duration::from_secs(2));
        }
        assert!(t.p99(Instant::from_millis(40_000)).is_some());
        assert_eq!(t.p99(Instant::from_millis(61_000)), None);
    }

    #[test]
    fn a_pace_that_helps_holds_at_the_accepted_rate() {
        // A provider that accepts 10/s: sent 30/s, 20 refused each second.
        let mut p = Pace::default();
        for s in 0..5u64 {
            for i in 0..30u64 {
                let now = Instant::from_millis(s * 1000 + i * 33);
                p.sent(now);
                p.answered(now, i % 3 != 0);
            }
        }
        p.throttled(Instant::from_millis(4_990));
        // 50 accepted in the 4.99 s since the first answer.
        let start = p.current().unwrap();
        assert!((start - 10.0).abs() < 0.05, "{start}");
        // The provider takes 10 a second and refuses the rest: paced, at
        // most a probe's worth of attempts is refused.
        let (mut admitted, mut refused) = (0, 0);
        let mut window = (0, 0);
        for ms in (5_000..15_000u64).step_by(10) {
            let now = Instant::from_millis(ms);
            if p.peek(now).is_ok() {
                p.take(now);
                p.sent(now);
                if window.0 != ms / 1000 {
                    window = (ms / 1000, 0);
                }
                window.1 += 1;
                p.answered(now, window.1 > 10);
                admitted += 1;
                refused += u32::from(window.1 > 10);
            }
        }
        assert!((95..=130).contains(&admitted), "{admitted}");
        assert!(refused <= 25, "{refused} of {admitted}");
    }

    #[test]
    fn a_pace_that_does_not_help_grows_back_to_the_demand() {
        // 60 % of requests refused whatever the rate.
        let mut p = Pace::default();
        let refuse = |i: u64| i % 5 < 3;
        for i in 0..100u64 {
            let now = Instant::from_millis(i * 50);
            p.sent(now);
            p.answered(now, refuse(i));
        }
        p.throttled(Instant::from_millis(5_000));
        let mut per_second = [0u32; 10];
        let mut n = 0u64;
        for ms in (5_000..15_000u64).step_by(50) {
            let now = Instant::from_millis(ms);
            if p.peek(now).is_ok() {
                p.take(now);
                p.sent(now);
                p.answered(now, refuse(n));
                n += 1;
                per_second[((ms - 5_000) / 1000) as usize] += 1;
            }
        }
        assert!(per_second[9] >= 18, "{per_second:?}");
    }

    #[test]
    fn a_random_storm_is_not_cut_below_what_is_sent() {
        use rand::{Rng, SeedableRng};
        // 60 % of attempts refused at random whatever the rate, 20 offered
        // a second for 30 s, each 429 asking for a wait. Read a second at
        // a time, such noise cut the pace to what was accepted again and
        // again, down to one attempt a second.
        for seed in 0..10 {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let mut p = Pace::default();
            let mut admitted = 0u32;
            for ms in (100_000..130_000u64).step_by(50) {
                let now = Instant::from_millis(ms);
                if p.peek(now).is_err() {
                    continue;
                }
                p.take(now);
                p.sent(now);
                admitted += 1;
                let refused = rng.gen_bool(0.6);
                p.answered(now, refused);
                if refused {
                    p.throttled(now);
                }
            }
            assert!(admitted >= 450, "seed {seed}: {admitted} of 600 admitted");
        }
    }
}
