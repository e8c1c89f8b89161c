//! Graded admission: how much of a model's traffic to let through while it
//! fails, by what its failures are believed to be.
//!
//! An all-or-nothing breaker opened by a fault ratio turns a random
//! brownout into an outage: one target answering 60 % of requests 503 at
//! random, at 20 calls/s, got 19 % of calls answered through a gateway
//! whose breaker opened, against 80 % for an SDK calling it directly —
//! every refused call had a 40 % chance. Two kinds of failure look alike
//! from one answer and deserve opposite treatment:
//! - **overload**: the provider fails what it gets above its capacity, so
//!   sending less helps it recover and costs nothing (what it would have
//!   accepted it still accepts);
//! - **random loss**: the provider drops a share of requests whatever its
//!   load (a bad replica behind its balancer), so every refused attempt is
//!   a lost chance and refusing helps nobody.
//!
//! [`Belief`] is what the evidence says (see [`crate::learn::Retries`]:
//! faults that come with load, or answers that carry an overload signal).
//! [`Graded`] turns it into an admitted fraction:
//! - believed **loss**, and at least [`LOSS_FLOOR`] of answers succeed:
//!   everything is admitted;
//! - otherwise SRE-style adaptive throttling: of `asked` attempts over the
//!   window (refused ones included) and `accepted` successes, a share
//!   `max(0, (asked − K·accepted) / (asked + 1))` is refused, with
//!   `K = 1 / (1 − error_ratio)`. At the default `error_ratio` 0.5 (K = 2)
//!   nothing is refused while half of what is sent succeeds; a provider
//!   capped at capacity C is sent about 2·C; a dead one a trickle.
//!
//! The refusals are spread deterministically (error diffusion: each ask
//! adds the fraction to a credit and an attempt goes when the credit
//! reaches one), so the core needs no random numbers for it, and a
//! fraction of 0.4 admits exactly two asks in five.

use crate::time::Instant;
use std::cell::Cell;
use std::time::Duration;

/// Below this share of successes a target believed to lose requests at
/// random is throttled like an overloaded one: a first attempt that
/// succeeds one time in ten is still better than a refusal (the SDK alone
/// gets 27 % at three attempts), below that the target is all but down.
pub const LOSS_FLOOR: f64 = 0.1;

const BUCKETS: usize = 10;

/// What Levee believes a failing target's faults are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Belief {
    /// A share of requests fails whatever the load: refusing does not help.
    Loss,
    /// The failures come with load: sending less helps.
    Overload,
}

impl Belief {
    /// The label value (`loss` | `overload`).
    pub fn as_str(self) -> &'static str {
        match self {
            Belief::Loss => "loss",
            Belief::Overload => "overload",
        }
    }

    /// Both, for pre-registering labels.
    pub const ALL: [Belief; 2] = [Belief::Loss, Belief::Overload];
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Bucket {
    epoch: u64,
    asked: u32,
    answered: u32,
    accepted: u32,
}

/// One model's graded admission over a bucketed window.
#[derive(Clone, Debug)]
pub struct Graded {
    k: f64,
    min_answers: u32,
    bucket_ns: u64,
    buckets: [Bucket; BUCKETS],
    credit: f64,
    /// Asks admitted and not yet done: their fate is not known, so they
    /// are left out of what was asked. Right after a breaker closed, 400
    /// asks a second against answers 800 ms behind them read as a 15 %
    /// success share, and a recovered provider was held back two seconds.
    pending: u32,
    /// The window's totals as last summed, for the bucket epoch they were
    /// summed at; a count in that epoch's bucket is added to them, any
    /// other change clears them. A request reads them four or five times
    /// (admission, the fraction, whether retries win) between counts of
    /// its own, and each sum walks every bucket: cleared by every count,
    /// they were summed twice a request (~270 instructions).
    summed: Cell<Option<Bucket>>,
}

impl Graded {
    /// Graded admission that starts refusing once more than `error_ratio`
    /// of what is sent fails, judged over `window` once `min_answers`
    /// answers are in it.
    pub fn new(error_ratio: f64, window: Duration, min_answers: u32) -> Self {
        let ratio = error_ratio.clamp(0.01, 0.99);
        Graded {
            k: 1.0 / (1.0 - ratio),
            min_answers: min_answers.max(1),
            bucket_ns: u64::try_from(window.as_nanos() / BUCKETS as u128)
                .unwrap_or(u64::MAX)
                .max(1),
            buckets: [Bucket::default(); BUCKETS],
            credit: 0.0,
            pending: 0,
            summed: Cell::new(None),
        }
    }

    /// Counts into the bucket of `now` (`f` changes it), and into the
    /// window's kept totals when they are for that bucket's epoch.
    fn count(&mut self, now: Instant, f: impl FnOnce(&mut Bucket)) {
        let e = now.as_nanos() / self.bucket_ns;
        let b = &mut self.buckets[(e % BUCKETS as u64) as usize];
        if b.epoch != e {
            // A bucket reused: what leaves the window is not known here.
            self.summed.set(None);
            *b = Bucket {
                epoch: e,
                ..Bucket::default()
            };
        }
        let before = *b;
        f(b);
        let after = *b;
        let kept = self.summed.get().filter(|t| t.epoch == e).map(|t| Bucket {
            epoch: e,
            asked: t.asked - before.asked + after.asked,
            answered: t.answered - before.answered + after.answered,
            accepted: t.accepted - before.accepted + after.accepted,
        });
        self.summed.set(kept);
    }

    fn totals(&self, now: Instant) -> Bucket {
        let e = now.as_nanos() / self.bucket_ns;
        if let Some(t) = self.summed.get().filter(|t| t.epoch == e) {
            return t;
        }
        let t = self.summed_at(e);
        self.summed.set(Some(t));
        t
    }

    /// The window's totals in bucket epoch `e`, every bucket walked.
    fn summed_at(&self, e: u64) -> Bucket {
        self.buckets
            .iter()
            .filter(|b| b.epoch <= e && e - b.epoch < BUCKETS as u64)
            .fold(
                Bucket {
                    epoch: e,
                    ..Bucket::default()
                },
                |a, b| Bucket {
                    epoch: e,
                    asked: a.asked + b.asked,
                    answered: a.answered + b.answered,
                    accepted: a.accepted + b.accepted,
                },
            )
    }

    /// The share of answers over the window that succeeded, and how many
    /// answers it was read over (`None`: fewer than the minimum to tell).
    pub fn success_share(&self, now: Instant) -> Option<(f64, u32)> {
        let t = self.totals(now);
        (t.answered >= self.min_answers)
            .then(|| (f64::from(t.accepted) / f64::from(t.answered), t.answered))
    }

    /// The fraction of attempts admitted now under `belief`.
    pub fn fraction(&self, now: Instant, belief: Belief) -> f64 {
        let t = self.totals(now);
        if t.answered < self.min_answers {
            return 1.0;
        }
        let share = f64::from(t.accepted) / f64::from(t.answered);
        if belief == Belief::Loss && share >= LOSS_FLOOR {
            return 1.0;
        }
        let known = t.asked.saturating_sub(self.pending);
        let asked = f64::from(known.max(t.answered));
        let refuse = ((asked - self.k * f64::from(t.accepted)) / (asked + 1.0)).max(0.0);
        (1.0 - refuse).clamp(0.0, 1.0)
    }

    /// Whether an ask now would be admitted (nothing taken).
    pub fn would_admit(&self, now: Instant, belief: Belief) -> bool {
        let f = self.fraction(now, belief);
        f >= 1.0 || self.credit + f >= 1.0
    }

    /// Counts an ask and says whether it is admitted.
    pub fn ask(&mut self, now: Instant, belief: Belief) -> bool {
        let f = self.fraction(now, belief);
        self.count(now, |b| b.asked += 1);
        let admitted = if f >= 1.0 {
            self.credit = 0.0;
            true
        } else {
            self.credit += f;
            if self.credit >= 1.0 {
                self.credit -= 1.0;
                true
            } else {
                false
            }
        };
        self.pending += u32::from(admitted);
        admitted
    }

    /// An admitted ask is done (answered, cancelled or never sent).
    pub fn done(&mut self) {
        self.pending = self.pending.saturating_sub(1);
    }

    /// Takes back an ask that was admitted here but refused by a later
    /// check (it was not sent, and must not count as asked twice).
    pub fn unask(&mut self, now: Instant) {
        self.count(now, |b| b.asked = b.asked.saturating_sub(1));
        self.done();
    }

    /// Drops the window's evidence (a breaker closed after an outage).
    pub fn forget(&mut self) {
        self.summed.set(None);
        self.buckets = [Bucket::default(); BUCKETS];
        self.credit = 0.0;
    }

    /// Counts an answer: a success or a provider fault.
    pub fn answered(&mut self, now: Instant, success: bool) {
        self.count(now, |b| {
            b.answered += 1;
            b.accepted += u32::from(success);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        g: &mut Graded,
        belief: Belief,
        secs: u64,
        per_sec: u64,
        succeed: impl Fn(u64) -> bool,
    ) -> (u32, u32) {
        let (mut sent, mut ok) = (0, 0);
        for i in 0..secs * per_sec {
            let now = Instant::from_millis(i * 1000 / per_sec);
            if g.ask(now, belief) {
                sent += 1;
                let s = succeed(i);
                ok += u32::from(s);
                g.done();
                g.answered(now, s);
            }
        }
        (sent, ok)
    }

    #[test]
    fn a_count_is_read_at_once_within_its_bucket() {
        // The window's sums are kept between counts: every count must
        // show in the next read, in the same bucket as the last read.
        let mut g = Graded::new(0.5, Duration::from_secs(10), 2);
        let t = Instant::from_millis(100);
        assert!(g.ask(t, Belief::Overload));
        assert_eq!(g.success_share(t), None);
        g.done();
        g.answered(t, false);
        assert!(g.ask(t, Belief::Overload));
        g.done();
        g.answered(t, true);
        assert_eq!(g.success_share(t), Some((0.5, 2)));
        g.forget();
        assert_eq!(g.success_share(t), None);
        assert!((g.fraction(t, Belief::Overload) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn random_loss_with_a_meaningful_share_is_never_refused() {
        let mut g = Graded::new(0.5, Duration::from_secs(10), 20);
        // 60 % lost, every fifth request of five succeeding twice.
        let (sent, _) = run(&mut g, Belief::Loss, 40, 20, |i| i % 5 < 2);
        assert_eq!(sent, 800);
        assert!((g.fraction(Instant::from_millis(39_000), Belief::Loss) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn overload_is_sent_about_k_times_what_it_accepts() {
        let mut g = Graded::new(0.5, Duration::from_secs(10), 20);
        // A provider that accepts 5 of every 20 asked per second, whatever
        // it is sent: the throttle settles near 2 × 5 = 10 sent a second.
        let mut accepted_this_second = 0;
        let mut second = 0;
        let mut sent_last_10s = 0;
        for i in 0..40 * 20u64 {
            let now = Instant::from_millis(i * 50);
            if i / 20 != second {
                second = i / 20;
                accepted_this_second = 0;
            }
            if g.ask(now, Belief::Overload) {
                let ok = accepted_this_second < 5;
                accepted_this_second += u32::from(ok);
                g.done();
                g.answered(now, ok);
                if i >= 30 * 20 {
                    sent_last_10s += 1;
                }
            }
        }
        assert!((80..=130).contains(&sent_last_10s), "{sent_last_10s}");
    }

    #[test]
    fn loss_below_the_floor_is_throttled_and_a_dead_target_gets_a_trickle() {
        let mut g = Graded::new(0.5, Duration::from_secs(10), 20);
        let (sent, _) = run(&mut g, Belief::Loss, 10, 20, |_| false);
        assert!(sent < 40, "{sent}");
        assert!(g.fraction(Instant::from_millis(9_999), Belief::Loss) < 0.05);
    }

    /// The kept totals are always what walking every bucket gives: counts
    /// of every kind, reads between them, times that go back a little, a
    /// forget, across bucket and window boundaries.
    #[test]
    fn the_kept_totals_are_the_buckets_sum() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        #[derive(Clone, Debug)]
        enum Op {
            Ask(bool),
            Unask,
            Answered(bool),
            Done,
            Read,
            Forget,
        }
        let op = prop_oneof![
            4 => any::<bool>().prop_map(Op::Ask),
            1 => Just(Op::Unask),
            4 => any::<bool>().prop_map(Op::Answered),
            2 => Just(Op::Done),
            4 => Just(Op::Read),
            1 => Just(Op::Forget),
        ];
        // Steps of 0 to 1.5 s (buckets of 1 s), now and then 0.5 s back.
        let step = prop_oneof![10 => 0i64..1_500, 1 => -500i64..0];
        let runs = prop::collection::vec((op, step), 1..200);
        let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut runner = TestRunner::new_with_rng(Config::with_cases(2000), rng);
        let checked = runner.run(&runs, |ops| {
            let mut g = Graded::new(0.5, Duration::from_secs(10), 2);
            let mut ms: i64 = 20_000;
            for (op, step) in ops {
                ms = (ms + step).max(0);
                let now = Instant::from_millis(ms as u64);
                match op {
                    Op::Ask(loss) => {
                        let belief = if loss { Belief::Loss } else { Belief::Overload };
                        g.ask(now, belief);
                    }
                    Op::Unask => g.unask(now),
                    Op::Answered(ok) => g.answered(now, ok),
                    Op::Done => g.done(),
                    Op::Read => {
                        g.success_share(now);
                    }
                    Op::Forget => g.forget(),
                }
                let e = now.as_nanos() / g.bucket_ns;
                prop_assert_eq!(g.totals(now), g.summed_at(e));
            }
            Ok(())
        });
        if let Err(e) = checked {
            panic!("{e}");
        }
    }
}
