//! Whether retries on a model win, and whether its faults come with load.

use crate::graded::Belief;
use crate::time::Instant;
use std::cell::Cell;
use std::time::Duration;

/// How long one window of [`Retries`] lasts; it reads the current and the
/// previous one.
const RETRY_WINDOW: Duration = Duration::from_secs(10);
/// Fewer retries than this and they are taken to be winning.
const MIN_RETRIES: u32 = 10;
/// The share of retries that must succeed for retries to be winning. A
/// random loss of 60 % (a bad replica behind a balancer) is worth retrying
/// up to `max_attempts`: eight attempts answer 98.3 % of calls at 2.46
/// requests a call, where three answer 78 %; at 70 % and more, each retry
/// costs more than it wins and three attempts (the SDKs' count) are kept.
pub const WINNING_SHARE: f64 = 1.0 / 3.0;
/// Below this running average of attempts in flight, Levee's load on a
/// model is too light to be what fails it.
const LIGHT_LOAD: f64 = 1.0;
/// Answers enough to judge a lightly loaded model: the judgment is of the
/// load, not of how faults relate to it, and while it waits the first
/// retries of a random loss wait for the budget (50 answers took over a
/// second at 20 calls/s, and 4–10 calls failed waiting).
const LIGHT_EVIDENCE: u32 = 20;
/// Fewer attempts than this on either side and a model is not judged saturated.
const MIN_SIDE: u32 = 50;

#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    n: u32,
    bad: u32,
}

impl Tally {
    fn add(&mut self, bad: bool) {
        self.n += 1;
        self.bad += u32::from(bad);
    }
    fn rate(self) -> f64 {
        f64::from(self.bad) / f64::from(self.n.max(1))
    }
    fn plus(self, o: Tally) -> Tally {
        Tally {
            n: self.n + o.n,
            bad: self.bad + o.bad,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct RetryWindow {
    epoch: u64,
    retries: Tally,
    busy: Tally,
    quiet: Tally,
    /// Faults, and (`bad`) those that carried an overload signal.
    faults: Tally,
}

/// Whether retries on a model are winning, and whether it is saturated.
///
/// A random brownout (30 % of answers a 503, spare capacity behind them)
/// and a saturated provider (a 503 for whatever arrives above its
/// capacity) look alike from one answer. They differ in what a retry does:
/// in a brownout a retry wins as often as any attempt, and more attempts
/// within the deadline cost almost nothing (1/(1 − 0.3) = 1.43 requests a
/// call however many are allowed); at a saturated provider a retry takes
/// the place of another caller's first attempt, and every one that is
/// paid back by the budget adds load (1.27× the offered load in one run).
/// So each answer is noted with whether it was a retry and how busy the
/// model was when it was sent (Levee's attempts in flight to its provider,
/// against their running average). Retries are winning while at least
/// a third of them succeed and faults do not come with load: a saturated
/// provider fails the attempts sent while busy more than those sent while
/// quiet (by 20 points or more, 50 or more of each); a brownout fails
/// both alike.
#[derive(Clone, Debug, Default)]
pub struct Retries {
    windows: [RetryWindow; 2],
    /// Running average of attempts in flight at dispatch.
    load: f64,
    /// The windows as last read, for the epoch they were read at; cleared
    /// by every count and dispatch. An attempt reads them three or four
    /// times between two counts (the belief, whether retries win, whether
    /// the faults are judged random).
    last_read: Cell<Option<(u64, Read)>>,
}

impl Retries {
    fn epoch(now: Instant) -> u64 {
        now.as_nanos() / RETRY_WINDOW.as_nanos() as u64
    }

    /// The running average of attempts in flight at dispatch, updated with
    /// one more dispatch at `in_flight`; whether that one is busy.
    pub fn dispatched(&mut self, in_flight: u32) -> bool {
        self.last_read.set(None);
        let x = f64::from(in_flight);
        let busy = x > self.load;
        self.load += (x - self.load) / 32.0;
        busy
    }

    /// Notes an answer: whether the attempt was a retry, was sent while the
    /// model was busy, and failed (a provider fault).
    pub fn answered(&mut self, now: Instant, retry: bool, busy: bool, fault: bool) {
        self.last_read.set(None);
        let e = Self::epoch(now);
        let w = &mut self.windows[(e % 2) as usize];
        if w.epoch != e {
            *w = RetryWindow {
                epoch: e,
                ..RetryWindow::default()
            };
        }
        if retry {
            w.retries.add(fault);
        }
        if busy {
            w.busy.add(fault);
        } else {
            w.quiet.add(fault);
        }
    }

    fn totals(&self, now: Instant) -> RetryWindow {
        let e = Self::epoch(now);
        self.windows
            .iter()
            .filter(|w| w.epoch == e || w.epoch.wrapping_add(1) == e)
            .fold(RetryWindow::default(), |a, w| RetryWindow {
                epoch: e,
                retries: a.retries.plus(w.retries),
                busy: a.busy.plus(w.busy),
                quiet: a.quiet.plus(w.quiet),
                faults: a.faults.plus(w.faults),
            })
    }

    /// The windows' evidence read once: the totals, whether there is load
    /// evidence enough to judge, and whether it says saturated.
    fn read(&self, now: Instant) -> Read {
        let e = Self::epoch(now);
        if let Some((at, r)) = self.last_read.get() {
            if at == e {
                return r;
            }
        }
        let r = self.read_now(now);
        self.last_read.set(Some((e, r)));
        r
    }

    fn read_now(&self, now: Instant) -> Read {
        let t = self.totals(now);
        let light = self.load < LIGHT_LOAD;
        let both = t.busy.n >= MIN_SIDE && t.quiet.n >= MIN_SIDE;
        let judged = both || (light && t.busy.n + t.quiet.n >= LIGHT_EVIDENCE);
        let saturated = !light && both && {
            let diff = t.busy.rate() - t.quiet.rate();
            let p = t.busy.plus(t.quiet).rate();
            let n = 1.0 / f64::from(t.busy.n) + 1.0 / f64::from(t.quiet.n);
            diff >= 0.2 && diff >= 3.0 * (p * (1.0 - p) * n).sqrt()
        };
        Read {
            t,
            judged,
            saturated,
        }
    }

    /// Whether faults come with load: the model fails attempts sent while
    /// busy at least 20 points more often than those sent while quiet, and
    /// by three standard errors of the difference, under a load that could
    /// be what fails it. The test runs at every answer, so a margin of two
    /// standard errors (20 points at 50 a side) came up by chance within
    /// seconds at 125 attempts a second: a random 60 % loss was read as
    /// saturation and held to three attempts and the budget (78 % answered
    /// where eight attempts answer 98 %).
    pub fn saturated(&self, now: Instant) -> bool {
        self.read(now).saturated
    }

    /// Notes that a fault carried an overload signal (a Retry-After) or
    /// did not.
    pub fn fault_signal(&mut self, now: Instant, overload: bool) {
        self.last_read.set(None);
        let e = Self::epoch(now);
        let w = &mut self.windows[(e % 2) as usize];
        if w.epoch == e {
            w.faults.add(overload);
        }
    }

    /// What the faults are believed to be. Overload when they come with
    /// load ([`Retries::saturated`]); until there is enough load evidence
    /// either way, overload also when most faults said so themselves (a
    /// Retry-After on a 5xx). Evidence of load beats the provider's word: a
    /// 529 storm that fails busy and quiet attempts alike is random loss
    /// whatever the status says (one region's replicas shedding at random
    /// answered 50 % 529 at any rate).
    pub fn belief(&self, now: Instant) -> Belief {
        let r = self.read(now);
        let faults = r.t.faults;
        let said = faults.n >= MIN_RETRIES && faults.bad * 2 > faults.n;
        if r.saturated || (!r.judged && said) {
            Belief::Overload
        } else {
            Belief::Loss
        }
    }

    /// Whether there is load evidence enough to tell, and it says the faults
    /// do not come with load. The evidence is enough with enough attempts
    /// sent busy and quiet, or enough sent at under one in flight on
    /// average: Levee's own load cannot be what saturates a provider it
    /// keeps under one attempt busy, and there busy and quiet barely
    /// differ (against a provider answering at once, 2,400 attempts over
    /// 40 s gave too few busy ones to judge, and a 60 % random loss was
    /// held to the retry budget all along: 71 % answered live, against 78 %
    /// for the SDK alone).
    pub fn judged_random(&self, now: Instant) -> bool {
        let r = self.read(now);
        r.judged && !r.saturated
    }

    /// Whether retries are winning (`None`: too few retries lately to
    /// tell, or no load evidence yet):
    /// - saturated: losing, each retry takes another caller's place;
    /// - half or more succeed: winning;
    /// - clearly below [`WINNING_SHARE`] (beyond two standard errors):
    ///   losing, once there are thirty retries. Ten retries at a true 40 %
    ///   read under a third one time in three, and an incident's first
    ///   answers are its fastest, its faults: the first thirty retries of a
    ///   60 % random brownout read 16 % success;
    /// - otherwise winning where the faults are judged random, unknown
    ///   until they are (a provider just past its capacity also sees 40 %
    ///   of its retries succeed, each in another caller's place). Sixteen
    ///   retries at a true 40 % read 31 %: held to the budget for it, a
    ///   random loss's first seconds failed 59 of 300 calls.
    pub fn winning(&self, now: Instant) -> Option<bool> {
        let r = self.read(now);
        let n = r.t.retries.n;
        let share = 1.0 - r.t.retries.rate();
        if r.saturated {
            Some(false)
        } else if n < MIN_RETRIES {
            None
        } else if share >= 0.5 {
            Some(true)
        } else if clearly_below(share, n, WINNING_SHARE) {
            (n >= 3 * MIN_RETRIES).then_some(false)
        } else {
            r.judged.then_some(true)
        }
    }
}

/// What [`Retries`] reads from its windows at one instant.
#[derive(Clone, Copy, Debug)]
struct Read {
    t: RetryWindow,
    /// Load evidence enough to tell saturation from random faults.
    judged: bool,
    saturated: bool,
}

/// Whether a share read as `share` over `n` is below `bound` by more than
/// two standard errors of the read.
pub fn clearly_below(share: f64, n: u32, bound: f64) -> bool {
    let margin = 2.0 * (share * (1.0 - share) / f64::from(n.max(1))).sqrt();
    share + margin < bound
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_count_and_dispatch_shows_in_the_next_read() {
        // The windows' reading is kept between counts: each count, and
        // each dispatch (the load), must show in the next read at once.
        let now = Instant::from_millis(5_000);
        let mut r = Retries::default();
        assert_eq!(r.winning(now), None);
        for _ in 0..LIGHT_EVIDENCE {
            r.answered(now, true, false, false);
        }
        assert_eq!(r.winning(now), Some(true));
        assert!(r.judged_random(now), "light load, enough answers");
        // Heavier load, no new answer: too few on each side to judge.
        for _ in 0..100 {
            r.dispatched(50);
        }
        assert!(!r.judged_random(now));
        // A fault that says overload, under no load evidence: believed.
        let mut r = Retries::default();
        for _ in 0..MIN_RETRIES {
            r.dispatched(5);
            r.answered(now, true, false, true);
        }
        assert_eq!(r.belief(now), Belief::Loss);
        for _ in 0..MIN_RETRIES {
            r.fault_signal(now, true);
        }
        assert_eq!(r.belief(now), Belief::Overload);
    }

    #[test]
    fn a_brownout_is_not_saturation_and_capacity_is() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let now = Instant::from_millis(5_000);
        // Random 30 % faults at any load.
        let mut r = Retries::default();
        for _ in 0..1_000 {
            let busy = r.dispatched(rng.gen_range(0..40));
            let fault = rng.gen_bool(0.3);
            r.answered(now, rng.gen_bool(0.3), busy, fault);
        }
        assert!(!r.saturated(now) && r.winning(now) == Some(true));
        // Faults only above 20 in flight.
        let mut r = Retries::default();
        for _ in 0..1_000 {
            let in_flight = rng.gen_range(0..40);
            let busy = r.dispatched(in_flight);
            r.answered(now, rng.gen_bool(0.3), busy, in_flight >= 20);
        }
        assert!(r.saturated(now) && r.winning(now) == Some(false));
        // Retries that mostly lose are not winning.
        let mut r = Retries::default();
        for _ in 0..100 {
            let busy = r.dispatched(5);
            r.answered(now, true, busy, rng.gen_bool(0.8));
        }
        assert_eq!(r.winning(now), Some(false));
    }

    #[test]
    fn light_load_is_judged_from_enough_attempts_alone() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let now = Instant::from_millis(5_000);
        // A provider answering at once: almost every attempt is sent with
        // nothing in flight, so there are few busy ones to compare.
        let mut r = Retries::default();
        for i in 0..19 {
            let busy = r.dispatched(u32::from(i % 40 == 0));
            r.answered(now, rng.gen_bool(0.5), busy, rng.gen_bool(0.6));
        }
        assert!(!r.judged_random(now), "19 attempts: not yet");
        let busy = r.dispatched(0);
        r.answered(now, true, busy, false);
        assert!(r.judged_random(now));
        // The same at a heavier load is not judged until both sides fill.
        let mut r = Retries::default();
        for i in 0..100 {
            let busy = r.dispatched(5 + u32::from(i % 40 == 0));
            r.answered(now, rng.gen_bool(0.5), busy, rng.gen_bool(0.6));
        }
        assert!(!r.judged_random(now));
    }
}
