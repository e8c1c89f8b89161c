//! The retry budget: retries may spend at most a fraction of recent successes.
//!
//! ## Why a budget and not a retry count
//! "Retry twice" triples the load exactly when the dependency is least able to
//! take it. A budget lets every retry that helps through while the dependency is
//! healthy (successes fund it) and turns retries off on its own when the
//! dependency fails (no successes, no funds): a token bucket fed by successes.
//!
//! ## Retries that work pay for themselves
//! A success-funded budget alone cannot tell a transient fault from an outage:
//! at 300 requests/s with 30 % of answers a random 503 (spare capacity, every
//! retry would work), retries want ~39 % of traffic while 10 % of successes
//! funds ~10 %, and callers saw 94 % success where three plain attempts give
//! 99.3 %. So when a request succeeds after retries, the tokens its retries
//! spent on *transient* faults are refunded ([`RetryBudget::refund`]): retries
//! into a brownout that they fix cost nothing, retries into an outage (no
//! request ever succeeds) drain the bucket exactly as before. Retries after an
//! overload signal (429, 529, any answer carrying a Retry-After) are never
//! refunded: the provider asked for less load, and a success after it is no
//! licence to send more. The price: while retries keep working, the budget no
//! longer caps them at `ratio`; `max_attempts` does (3 attempts: at most
//! 1 + p + p² upstream requests per call at a failure rate p, 1.39× at 30 %),
//! and the breaker takes over once the fault ratio reaches its threshold.
//! A hard ceiling bounds the price: refunded retries (and those let go
//! unpaid while retries win) never pass [`REFUND_CEILING_MILLI`], 2 per
//! answered request over the window, plus the floor. `refunds: false`
//! takes the budget literally: no refunds, every retry paid.
//!
//! ## Why the credit ages out in one second, not ten
//! Finagle and tower keep deposits for 10 s. At a 400 requests/s baseline and
//! `ratio: 0.1`, ten seconds of health bank 400 retries, all spendable in the
//! first second of a total failure: a burst of 800 requests/s that a provider
//! already failing has to absorb. Levee's default window is 1 s, so at the onset
//! of a failure retries add at most about `ratio` × the last second's successes
//! plus `min_per_second` (a 30 s brownout replayed: a peak of 440/s, not 3,600/s).
//!
//! ## The invariant (pinned by a property test)
//! For any interval `[a, a + W − s)` (W the window, s = W/10 its slot),
//! retries allowed ≤ `ratio` × successes in `(a − W, a + W)` + refunds in
//! `(a − W, a + W)` + `min_per_second` × W + 1.
//! Deposits and withdrawals are kept in integer milli-tokens, so there is no
//! drift from float rounding.

use crate::time::Instant;
use std::time::Duration;

const SLOTS: usize = 10;
const MILLI: u64 = 1000;
/// The most retries refunded (or let go unpaid while retries win) over a
/// window, per request answered in it, in milli-tokens: 2, the official
/// SDKs' own 1 + 2 attempts. However well retries win, Levee sends no more
/// for a call than an SDK alone would; a 30 % random brownout needs 0.35.
pub const REFUND_CEILING_MILLI: u64 = 2000;

/// Why a budget configuration was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BudgetError {
    #[error("`ratio` must be a number between 0 and 10 (got {0}); 0.1 means retries may add 10% to successful traffic")]
    Ratio(f64),
    #[error("`min_per_second` must be a number between 0 and 100000 (got {0})")]
    MinPerSecond(f64),
    #[error("`window` must be between 10ms and 60s (got {0:?})")]
    Window(Duration),
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    epoch: u64,
    deposits: u64,
    withdrawals: u64,
    /// Successes recorded (requests answered).
    successes: u64,
    /// Milli-tokens refunded.
    refunded: u64,
}

/// A token bucket fed by successes, with credit that ages out over `window`.
#[derive(Clone, Debug)]
pub struct RetryBudget {
    deposit_milli: u64,
    reserve_milli: u64,
    slot_ns: u64,
    slots: [Slot; SLOTS],
    /// Retries that worked are refunded (`refunds: false`: never).
    refunds: bool,
    /// Whether the floor (`min_per_second`) is this budget's own to spend;
    /// false when the routes to one provider and model share one floor
    /// ([`RetryBudget::without_floor`]).
    own_floor: bool,
}

/// A budget's settings, as a config states them. [`Default`] holds Levee's
/// defaults (the only place they are written): ratio 0.1, 5 retries/s always,
/// a 1 s window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetSettings {
    pub ratio: f64,
    pub min_per_second: f64,
    pub window: Duration,
    /// Whether retries that rescued a request are refunded.
    pub refunds: bool,
}

impl Default for BudgetSettings {
    fn default() -> Self {
        BudgetSettings {
            ratio: 0.1,
            min_per_second: 5.0,
            window: Duration::from_secs(1),
            refunds: true,
        }
    }
}

impl BudgetSettings {
    /// Validates and builds a fresh budget.
    pub fn build(&self) -> Result<RetryBudget, BudgetError> {
        let mut b = RetryBudget::new(self.ratio, self.min_per_second, self.window)?;
        b.refunds = self.refunds;
        Ok(b)
    }
}

impl RetryBudget {
    /// Validates and builds. `ratio`: tokens per success; `min_per_second`:
    /// retries always allowed; `window`: how long credit lasts.
    pub fn new(ratio: f64, min_per_second: f64, window: Duration) -> Result<Self, BudgetError> {
        if !ratio.is_finite() || !(0.0..=10.0).contains(&ratio) {
            return Err(BudgetError::Ratio(ratio));
        }
        if !min_per_second.is_finite() || !(0.0..=100_000.0).contains(&min_per_second) {
            return Err(BudgetError::MinPerSecond(min_per_second));
        }
        if window < Duration::from_millis(10) || window > Duration::from_secs(60) {
            return Err(BudgetError::Window(window));
        }
        Ok(RetryBudget::from_valid(BudgetSettings {
            ratio,
            min_per_second,
            window,
            refunds: true,
        }))
    }

    /// Settings already checked by [`RetryBudget::new`] (or the defaults).
    fn from_valid(s: BudgetSettings) -> Self {
        RetryBudget {
            deposit_milli: (s.ratio * MILLI as f64).round() as u64,
            reserve_milli: (s.min_per_second * s.window.as_secs_f64() * MILLI as f64).round()
                as u64,
            slot_ns: u64::try_from(s.window.as_nanos() / SLOTS as u128).unwrap_or(u64::MAX),
            // Epoch 0 with zero counts is harmless whether or not it is "live".
            slots: [Slot::default(); SLOTS],
            refunds: s.refunds,
            own_floor: true,
        }
    }

    /// The same budget with its floor spent elsewhere: only what successes
    /// and refunds put in can be withdrawn here. Twenty routes to one
    /// provider, each with a floor of 5 retries a second, sent it 100
    /// retries a second through an outage it answered none of; with the
    /// floor held once per provider and model (see
    /// [`crate::ProviderState::withdraw_floor`]) they send 5. The floor
    /// still widens the ceiling on refunded retries. A budget with no floor
    /// (`min_per_second: 0`) has none to share and draws on none.
    pub fn without_floor(mut self) -> Self {
        self.own_floor = self.reserve_milli == 0;
        self
    }

    /// Whether this budget's floor is held elsewhere, shared
    /// ([`RetryBudget::without_floor`]): a retry it cannot pay for may be
    /// paid from the shared floor.
    pub fn shares_floor(&self) -> bool {
        !self.own_floor
    }

    /// A budget that is a floor alone: `floor_per_second` retries a second
    /// over `window`, whatever the successes (none deposit into it).
    pub fn floor(floor_per_second: f64, window: Duration) -> Result<Self, BudgetError> {
        let mut b = RetryBudget::new(0.0, floor_per_second, window)?;
        b.refunds = false;
        Ok(b)
    }

    /// The window credit ages out over.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.slot_ns.saturating_mul(SLOTS as u64))
    }

    /// Retries a second it allows whatever the successes (`min_per_second`).
    pub fn floor_per_second(&self) -> f64 {
        let window_secs = (self.slot_ns as f64 * SLOTS as f64) / 1e9;
        self.reserve_milli as f64 / MILLI as f64 / window_secs
    }

    /// The defaults ([`BudgetSettings::default`]).
    pub fn default_policy() -> Self {
        RetryBudget::from_valid(BudgetSettings::default())
    }

    fn epoch(&self, now: Instant) -> u64 {
        now.as_nanos() / self.slot_ns
    }

    fn current(&mut self, now: Instant) -> &mut Slot {
        let e = self.epoch(now);
        let slot = &mut self.slots[(e % SLOTS as u64) as usize];
        if slot.epoch != e {
            *slot = Slot {
                epoch: e,
                ..Slot::default()
            };
        }
        slot
    }

    /// Milli-tokens available now (may be negative only transiently; never below zero after a refusal).
    fn balance_milli(&self, now: Instant) -> i128 {
        let e = self.epoch(now);
        let mut bal = if self.own_floor {
            i128::from(self.reserve_milli)
        } else {
            0
        };
        for s in &self.slots {
            if s.epoch <= e && e - s.epoch < SLOTS as u64 {
                bal += i128::from(s.deposits) - i128::from(s.withdrawals) * i128::from(MILLI);
            }
        }
        bal
    }

    /// Records a success: deposits `ratio` tokens.
    pub fn deposit(&mut self, now: Instant) {
        let d = self.deposit_milli;
        let slot = self.current(now);
        slot.deposits = slot.deposits.saturating_add(d);
        slot.successes = slot.successes.saturating_add(1);
    }

    /// Gives back `tokens` retries that turned out to work (the request they
    /// belonged to succeeded after transient faults). Credited now, so the
    /// refund ages out over the window like any deposit. Never more than
    /// [`REFUND_CEILING_MILLI`] per success in the window all told (half a
    /// retry per answered request), and nothing with `refunds: false`.
    pub fn refund(&mut self, now: Instant, tokens: u32) {
        if !self.refunds {
            return;
        }
        let credit = u64::from(tokens)
            .saturating_mul(MILLI)
            .min(self.refund_room(now));
        let slot = self.current(now);
        slot.deposits = slot.deposits.saturating_add(credit);
        slot.refunded = slot.refunded.saturating_add(credit);
    }

    /// Lets one retry go unpaid (retries are winning: it would be refunded
    /// when it works) if the ceiling on refunded retries has room, counting
    /// it against the ceiling. With `refunds: false`, never: every retry
    /// is paid from the budget.
    pub fn try_free(&mut self, now: Instant) -> bool {
        if !self.refunds || self.refund_room(now) < MILLI {
            return false;
        }
        let slot = self.current(now);
        slot.refunded = slot.refunded.saturating_add(MILLI);
        true
    }

    /// Milli-tokens of refunds the ceiling still allows in the window.
    fn refund_room(&self, now: Instant) -> u64 {
        let e = self.epoch(now);
        let (successes, refunded) = self
            .slots
            .iter()
            .filter(|s| s.epoch <= e && e - s.epoch < SLOTS as u64)
            .fold((0u64, 0u64), |(n, r), s| (n + s.successes, r + s.refunded));
        // The budget's own floor (`min_per_second` over the window) on top:
        // at 20 requests a second, one second holds too few answers for a
        // ceiling per answer not to bite on a burst.
        successes
            .saturating_mul(REFUND_CEILING_MILLI)
            .saturating_add(self.reserve_milli)
            .saturating_sub(refunded)
    }

    /// Whether a retry could be withdrawn now, without withdrawing.
    pub fn can_withdraw(&self, now: Instant) -> bool {
        self.balance_milli(now) >= i128::from(MILLI)
    }

    /// Withdraws one retry token if the budget holds one.
    pub fn try_withdraw(&mut self, now: Instant) -> bool {
        if !self.can_withdraw(now) {
            return false;
        }
        let slot = self.current(now);
        slot.withdrawals = slot.withdrawals.saturating_add(1);
        true
    }

    /// Whole retries available now (for metrics and the census).
    pub fn available(&self, now: Instant) -> u64 {
        u64::try_from(self.balance_milli(now).max(0) / i128::from(MILLI)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at_ms(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn seed_001_no_successes_means_only_the_minimum_flows() {
        let mut b = RetryBudget::new(0.1, 5.0, Duration::from_secs(1)).unwrap();
        let allowed = (0..100).filter(|_| b.try_withdraw(at_ms(10_000))).count();
        assert_eq!(allowed, 5);
        // Ten seconds of total failure at 100 retries wanted per second: 5 per second.
        let allowed: usize = (0..10_000u64)
            .filter(|i| b.try_withdraw(at_ms(11_000 + i)))
            .count();
        assert!((45..=55).contains(&allowed), "allowed {allowed}");
    }

    #[test]
    fn seed_001_a_healthy_stream_funds_retries() {
        let mut b = RetryBudget::new(0.1, 0.0, Duration::from_secs(1)).unwrap();
        // 400 successes/s for 2 s, a 2% failure rate wanting retries.
        let mut allowed = 0;
        for i in 0..800u64 {
            let t = at_ms(i * 1000 / 400);
            b.deposit(t);
            if i % 50 == 49 && b.try_withdraw(t) {
                allowed += 1;
            }
        }
        assert_eq!(
            allowed, 16,
            "every retry wanted at a 2% failure rate is funded"
        );
    }

    #[test]
    fn seed_000_onset_of_total_failure_spends_one_window_of_credit_not_a_minute() {
        // A healthy minute at 400/s, then total failure: every request wants a retry.
        let mut b = RetryBudget::new(0.1, 5.0, Duration::from_secs(1)).unwrap();
        for i in 0..24_000u64 {
            b.deposit(at_ms(i * 60_000 / 24_000));
        }
        let retries_first_second = (0..400u64)
            .filter(|i| b.try_withdraw(at_ms(60_000 + i * 1000 / 400)))
            .count();
        // ratio × last second's 400 successes + 5 = 45, not 0.1 × 24,000.
        assert!(retries_first_second <= 46, "{retries_first_second}");
        assert!(retries_first_second >= 5);
    }

    #[test]
    fn refunded_retries_never_pass_two_per_answer_and_none_with_refunds_off() {
        let mut b = RetryBudget::new(0.1, 5.0, Duration::from_secs(1)).unwrap();
        for i in 0..100u64 {
            b.deposit(at_ms(10_000 + i));
        }
        // Retries winning: unpaid ones, then refunds, share one ceiling of
        // 2 per answer (200) plus the floor of 5.
        let free = (0..1000).filter(|_| b.try_free(at_ms(10_500))).count();
        assert_eq!(free, 205);
        b.refund(at_ms(10_500), 50);
        assert_eq!(b.available(at_ms(10_500)), 10 + 5, "no room left to refund");
        let literal = BudgetSettings {
            refunds: false,
            ..BudgetSettings::default()
        };
        let mut b = literal.build().unwrap();
        for i in 0..100u64 {
            b.deposit(at_ms(10_000 + i));
        }
        assert!(!b.try_free(at_ms(10_500)));
        b.refund(at_ms(10_500), 50);
        assert_eq!(b.available(at_ms(10_500)), 10 + 5, "ratio and floor only");
    }

    /// A budget whose floor is shared elsewhere withdraws only what
    /// successes put in; its floor still widens the refund ceiling; a
    /// budget with no floor has none to share.
    #[test]
    fn a_budget_without_its_floor_spends_only_what_successes_fund() {
        let b = RetryBudget::new(0.1, 5.0, Duration::from_secs(1)).unwrap();
        let mut shared = b.clone().without_floor();
        assert!(shared.shares_floor());
        let t = at_ms(10_000);
        assert!(!shared.try_withdraw(t), "no success, no floor of its own");
        for _ in 0..20 {
            shared.deposit(t);
        }
        assert_eq!(shared.available(t), 2, "20 successes at 0.1");
        // The ceiling on free retries: 2 per answer plus the floor's 5.
        let free = (0..100).filter(|_| shared.try_free(t)).count();
        assert_eq!(free, 45);
        let none = RetryBudget::new(0.1, 0.0, Duration::from_secs(1)).unwrap();
        assert!(!none.without_floor().shares_floor());
    }

    #[test]
    fn the_floor_is_min_per_second_whatever_the_window() {
        let b = RetryBudget::new(0.1, 5.0, Duration::from_secs(1)).unwrap();
        assert!((b.floor_per_second() - 5.0).abs() < 1e-9);
        let b = RetryBudget::new(0.1, 7.5, Duration::from_secs(2)).unwrap();
        assert!((b.floor_per_second() - 7.5).abs() < 1e-9);
    }

    #[test]
    fn credit_and_the_refund_ceiling_age_out_exactly_one_window_later() {
        let window = Duration::from_secs(1);
        let mut b = RetryBudget::new(0.1, 5.0, window).unwrap();
        for _ in 0..100 {
            b.deposit(at_ms(0));
        }
        // Just inside the window: 10 deposited and 5 always.
        assert_eq!(b.available(at_ms(999)), 15);
        // One window on, the deposits are gone: the floor alone.
        assert_eq!(b.available(at_ms(1000)), 5);
        // So is the ceiling's room the 100 answers made: a refund then
        // gets the floor's 5, not 2 per old answer; later, the same.
        for t in [1000, 1500] {
            let mut b = RetryBudget::new(0.1, 5.0, window).unwrap();
            for _ in 0..100 {
                b.deposit(at_ms(0));
            }
            b.refund(at_ms(t), 50);
            assert_eq!(b.available(at_ms(t)), 5 + 5, "at {t} ms");
        }
    }

    #[test]
    fn construction_validates() {
        assert!(RetryBudget::new(-0.1, 5.0, Duration::from_secs(1)).is_err());
        assert!(RetryBudget::new(f64::NAN, 5.0, Duration::from_secs(1)).is_err());
        assert!(RetryBudget::new(0.1, -1.0, Duration::from_secs(1)).is_err());
        assert!(RetryBudget::new(0.1, 5.0, Duration::ZERO).is_err());
    }

    #[test]
    fn refunds_keep_a_brownout_funded_and_an_outage_drained() {
        // 300/s, 30 % transient faults, every retry works: each retried
        // request refunds its token when it succeeds.
        let mut b = RetryBudget::new(0.1, 5.0, Duration::from_secs(1)).unwrap();
        let (mut wanted, mut allowed) = (0, 0);
        for i in 0..3000u64 {
            let t = at_ms(i * 1000 / 300);
            if i % 10 < 3 {
                wanted += 1;
                if b.try_withdraw(t) {
                    allowed += 1;
                    b.deposit(t);
                    b.refund(t, 1);
                }
            } else {
                b.deposit(t);
            }
        }
        assert_eq!(allowed, wanted, "every retry that works is funded");
        // Then a total outage: nothing succeeds, nothing is refunded.
        let outage = (0..3000u64)
            .filter(|i| b.try_withdraw(at_ms(20_000 + i * 1000 / 300)))
            .count();
        assert!(outage <= 55, "{outage} retries in 10 s of outage");
    }

    #[derive(Clone, Debug)]
    enum Ev {
        Success(u64),
        Retry(u64),
        Refund(u64),
    }

    proptest! {
        #[test]
        fn retries_never_exceed_ratio_of_recent_successes_plus_minimum(
            ratio in 0.0f64..1.0,
            min in 0.0f64..20.0,
            window_ms in (10u64..300).prop_map(|x| x * 10),
            mut events in proptest::collection::vec(
                prop_oneof![(0u64..20_000).prop_map(Ev::Success), (0u64..20_000).prop_map(Ev::Retry), (0u64..20_000).prop_map(Ev::Refund)], 0..600),
        ) {
            let key = |e: &Ev| match e { Ev::Success(t) | Ev::Retry(t) | Ev::Refund(t) => *t };
            events.sort_by_key(key);
            let window = Duration::from_millis(window_ms);
            let mut b = RetryBudget::new(ratio, min, window).unwrap();
            let mut successes = Vec::new();
            let mut retries = Vec::new();
            let mut refunds = Vec::new();
            for e in &events {
                match e {
                    Ev::Success(t) => { b.deposit(at_ms(*t)); successes.push(*t); }
                    Ev::Retry(t) => if b.try_withdraw(at_ms(*t)) { retries.push(*t); },
                    Ev::Refund(t) => { b.refund(at_ms(*t), 1); refunds.push(*t); }
                }
            }
            let w = window_ms;
            let slot = w / 10;
            for &a in &retries {
                let in_window = retries.iter().filter(|&&t| t >= a && t < a + w - slot).count() as f64;
                let funded = successes.iter().filter(|&&t| t + w > a && t < a + w).count() as f64;
                let refunded = refunds.iter().filter(|&&t| t + w > a && t < a + w).count() as f64;
                let bound = ratio * funded + refunded + min * window.as_secs_f64() + 1.0;
                prop_assert!(in_window <= bound + 1e-9, "{} retries in window at {} > bound {}", in_window, a, bound);
            }
        }
    }
}
