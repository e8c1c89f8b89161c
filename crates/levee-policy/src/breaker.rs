//! The circuit breaker: stop sending to a model that is down for everyone.
//!
//! The gateway sees all traffic, so it can tell "this caller was unlucky" from
//! "this provider is down" long before any one caller can. The breaker opens
//! when `min_requests` faults arrive in a row — more when the window shows
//! the model answering a share of requests, so that the streak is a one in
//! a million event for the share seen (see `streak_to_open`). At 1,000
//! requests/s a total outage shows within tens of milliseconds, where a 10 s
//! window still full of successes would need seconds of faults to reach a
//! ratio. A model that fails only a share of what it gets is not opened at
//! all: what it is sent is graded instead (`crate::graded`), because an
//! open breaker in front of a 60 % random brownout refused calls that had a
//! 40 % chance each (19 % answered, against 80 % for the SDK alone).
//!
//! While open it lets one probe through every `probe_interval` (default 1 s,
//! never more often than that: no thundering herd). A successful probe moves
//! it to half-open at once, so recovery is seen within about a probe interval
//! rather than after the whole `open_for`; after `open_for` it half-opens
//! anyway. Half-open admits up to `half_open_probes` probes at a time; that
//! many successes → closed, any fault → open again.
//!
//! Once closed again it ramps: it admits at most 1.4× the rate it saw before
//! it tripped, until a whole `window` passes with nothing refused (or three
//! windows at most). Callers that ignore `x-should-retry` keep
//! every user request of the outage in a retry loop, and all of them land the
//! moment the breaker closes — 7.8× the baseline at 1,000 requests/s behind
//! three such layers. The ramp spreads that wave out at 1.4× until it is
//! gone, instead of letting it in at once.
//!
//! It counts provider faults only. A deterministic 4xx is the provider working
//! correctly; a caller's cancellation and an attempt skipped for lack of
//! deadline say nothing about the provider (a few short-deadline
//! callers must not switch the primary off for everyone); a 429 is the provider
//! asking us to slow down, handled by "throttled until", not by the breaker.

use crate::admission::Gcra;
use crate::classify::Class;
use crate::time::Instant;
use std::time::Duration;

const BUCKETS: usize = 10;

/// The breaker's state, as exported in `levee_circuit_state` (0, 1, 2, 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
    /// Closed, but still ramping after an outage: admitting at most 1.4×
    /// the rate seen before the trip (plus a second's burst); what it
    /// refuses is refused as `circuit_recovering`, never as `circuit_open`.
    Recovering = 3,
}

/// Why a breaker configuration was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BreakerError {
    #[error("`error_ratio` must be in (0, 1] (got {0})")]
    Ratio(f64),
    #[error("`window` must be between 100ms and 10m (got {0:?})")]
    Window(Duration),
    #[error("`min_requests` must be at least 1")]
    MinRequests,
    #[error("`open_for` must be between 10ms and 10m (got {0:?})")]
    OpenFor(Duration),
    #[error("`half_open_probes` must be between 1 and 1000 (got {0})")]
    Probes(u32),
    #[error("`probe_interval` must be between 10ms and 60s (got {0:?})")]
    ProbeInterval(Duration),
}

/// The longest gap between two probes of an open breaker, by default.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Proof that the breaker let an attempt through; hand it back with the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPermit {
    probe: bool,
}

impl BreakerPermit {
    /// Whether this attempt is a half-open probe.
    pub fn is_probe(self) -> bool {
        self.probe
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    epoch: u64,
    ok: u32,
    fault: u32,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Closed,
    /// Refusing until `until`, but for one probe at `next_probe` and every
    /// probe interval after it.
    Open {
        until: Instant,
        next_probe: Instant,
    },
    HalfOpen {
        in_flight: u32,
        successes: u32,
    },
}

/// The rate cap after closing, and when it lifts.
#[derive(Clone, Debug)]
struct Ramp {
    cap: Gcra,
    last_refused: Instant,
    /// Whether it has refused anything yet (then it reads "recovering").
    refused: bool,
    ends_by: Instant,
}

/// A per-provider circuit breaker.
#[derive(Clone, Debug)]
pub struct CircuitBreaker {
    error_ratio: f64,
    min_requests: u32,
    open_for: Duration,
    probes: u32,
    probe_interval: Duration,
    window: Duration,
    bucket_ns: u64,
    buckets: [Bucket; BUCKETS],
    /// Provider faults since the last success (within one window of each other).
    in_a_row: u32,
    last_fault: Instant,
    /// Attempts per minute seen over the window when it last tripped from closed.
    baseline_per_minute: u32,
    /// After closing: at most 1.4× that rate.
    ramp: Option<Ramp>,
    /// The first outcome since it was built or last closed.
    first_outcome: Option<Instant>,
    state: State,
}

/// A breaker's settings, as a config states them. [`Default`] holds Levee's
/// defaults (the only place they are written): 50 % faults over 10 s with at
/// least 20 requests (or 20 faults in a row), open 5 s with a probe every
/// second, 3 probes to close.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BreakerSettings {
    pub error_ratio: f64,
    pub window: Duration,
    pub min_requests: u32,
    pub open_for: Duration,
    pub half_open_probes: u32,
    pub probe_interval: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            error_ratio: 0.5,
            window: Duration::from_secs(10),
            min_requests: 20,
            open_for: Duration::from_secs(5),
            half_open_probes: 3,
            probe_interval: DEFAULT_PROBE_INTERVAL,
        }
    }
}

impl BreakerSettings {
    /// Validates and builds the breaker these settings describe.
    pub fn build(&self) -> Result<CircuitBreaker, BreakerError> {
        CircuitBreaker::new(
            self.error_ratio,
            self.window,
            self.min_requests,
            self.open_for,
            self.half_open_probes,
        )?
        .with_probe_interval(self.probe_interval)
    }
}

impl CircuitBreaker {
    /// Validates and builds.
    pub fn new(
        error_ratio: f64,
        window: Duration,
        min_requests: u32,
        open_for: Duration,
        half_open_probes: u32,
    ) -> Result<Self, BreakerError> {
        if !error_ratio.is_finite() || error_ratio <= 0.0 || error_ratio > 1.0 {
            return Err(BreakerError::Ratio(error_ratio));
        }
        if window < Duration::from_millis(100) || window > Duration::from_secs(600) {
            return Err(BreakerError::Window(window));
        }
        if min_requests == 0 {
            return Err(BreakerError::MinRequests);
        }
        if open_for < Duration::from_millis(10) || open_for > Duration::from_secs(600) {
            return Err(BreakerError::OpenFor(open_for));
        }
        if !(1..=1000).contains(&half_open_probes) {
            return Err(BreakerError::Probes(half_open_probes));
        }
        Ok(CircuitBreaker::from_valid(BreakerSettings {
            error_ratio,
            window,
            min_requests,
            open_for,
            half_open_probes,
            probe_interval: DEFAULT_PROBE_INTERVAL,
        }))
    }

    /// Settings already checked by [`CircuitBreaker::new`] (or the defaults).
    fn from_valid(s: BreakerSettings) -> Self {
        CircuitBreaker {
            error_ratio: s.error_ratio,
            min_requests: s.min_requests,
            open_for: s.open_for,
            probes: s.half_open_probes,
            probe_interval: s.probe_interval.min(s.open_for),
            window: s.window,
            bucket_ns: u64::try_from(s.window.as_nanos() / BUCKETS as u128).unwrap_or(u64::MAX),
            buckets: [Bucket::default(); BUCKETS],
            in_a_row: 0,
            last_fault: Instant::ZERO,
            baseline_per_minute: 0,
            ramp: None,
            first_outcome: None,
            state: State::Closed,
        }
    }

    /// The settings this breaker was built from (`probe_interval` at most
    /// `open_for`).
    pub fn settings(&self) -> BreakerSettings {
        BreakerSettings {
            error_ratio: self.error_ratio,
            window: self.window,
            min_requests: self.min_requests,
            open_for: self.open_for,
            half_open_probes: self.probes,
            probe_interval: self.probe_interval,
        }
    }

    /// Sets how often an open breaker lets a probe through (at most `open_for`).
    pub fn with_probe_interval(mut self, every: Duration) -> Result<Self, BreakerError> {
        if every < Duration::from_millis(10) || every > Duration::from_secs(60) {
            return Err(BreakerError::ProbeInterval(every));
        }
        self.probe_interval = every.min(self.open_for);
        Ok(self)
    }

    fn open(&mut self, now: Instant) {
        if matches!(self.state, State::Closed) {
            self.baseline_per_minute = self.rate_per_minute(now);
        }
        self.ramp = None;
        self.in_a_row = 0;
        self.state = State::Open {
            until: now + self.open_for,
            next_probe: now + self.probe_interval,
        };
    }

    /// The defaults ([`BreakerSettings::default`]).
    pub fn default_policy() -> Self {
        CircuitBreaker::from_valid(BreakerSettings::default())
    }

    /// The state as it would be seen at `now` (an elapsed open period reads as half-open).
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.state {
            State::Closed if self.ramping(now) && self.ramp.as_ref().is_some_and(|r| r.refused) => {
                BreakerState::Recovering
            }
            State::Closed => BreakerState::Closed,
            State::Open { until, .. } if now < until => BreakerState::Open,
            State::Open { until, .. } if self.stale(now, until) => BreakerState::Closed,
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// An open period that ended a whole window ago with no attempt since:
    /// its evidence is stale, so the next attempt finds it closed. (Without
    /// this, a model that tripped and then saw no traffic read "half-open"
    /// on the gauge and the status page for as long as it stayed quiet.)
    fn stale(&self, now: Instant, until: Instant) -> bool {
        now >= until + self.window
    }

    /// Whether the post-recovery ramp is still in force at `now`.
    fn ramping(&self, now: Instant) -> bool {
        self.ramp.as_ref().is_some_and(|r| {
            let calm = now.saturating_since(r.last_refused) >= self.window;
            !calm && now < r.ends_by
        })
    }

    /// When an open breaker will next admit a probe (`None` when it would admit now).
    pub fn refusing_until(&self, now: Instant) -> Option<Instant> {
        match self.state {
            // The ramp is applied (and its refusals seen) in `admit` only.
            State::Closed => None,
            State::Open { until, next_probe } => {
                (now < until && now < next_probe).then_some(until.min(next_probe))
            }
            State::HalfOpen {
                in_flight,
                successes,
            } => {
                // Every probe slot taken: come back after a short while.
                (in_flight + successes >= self.probes).then(|| now + self.open_for / 10)
            }
        }
    }

    /// Lets an attempt through, or says until when it refuses.
    pub fn admit(&mut self, now: Instant) -> Result<BreakerPermit, Instant> {
        if let State::Open { until, .. } = self.state {
            if self.stale(now, until) {
                self.close(now);
            }
        }
        if let State::Open { until, next_probe } = self.state {
            if now < until {
                if now < next_probe {
                    return Err(until.min(next_probe));
                }
                // One probe per interval while open.
                self.state = State::Open {
                    until,
                    next_probe: now + self.probe_interval,
                };
                return Ok(BreakerPermit { probe: true });
            }
            self.state = State::HalfOpen {
                in_flight: 0,
                successes: 0,
            };
        }
        match &mut self.state {
            State::Closed => {
                if !self.ramping(now) {
                    self.ramp = None;
                }
                if let Some(r) = &mut self.ramp {
                    if let Err(until) = r.cap.check(now) {
                        r.last_refused = now;
                        r.refused = true;
                        return Err(until);
                    }
                }
                Ok(BreakerPermit { probe: false })
            }
            State::HalfOpen {
                in_flight,
                successes,
            } => {
                if *in_flight + *successes < self.probes {
                    *in_flight += 1;
                    Ok(BreakerPermit { probe: true })
                } else {
                    Err(now + self.open_for / 10)
                }
            }
            State::Open { until, .. } => Err(*until),
        }
    }

    fn bucket(&mut self, now: Instant) -> &mut Bucket {
        let e = now.as_nanos() / self.bucket_ns;
        let b = &mut self.buckets[(e % BUCKETS as u64) as usize];
        if b.epoch != e {
            *b = Bucket {
                epoch: e,
                ok: 0,
                fault: 0,
            };
        }
        b
    }

    fn totals(&self, now: Instant) -> (u32, u32) {
        let e = now.as_nanos() / self.bucket_ns;
        self.buckets
            .iter()
            .filter(|b| b.epoch <= e && e - b.epoch < BUCKETS as u64)
            .fold((0, 0), |(ok, f), b| (ok + b.ok, f + b.fault))
    }

    /// Opens now, whatever the counts say (another breaker saw the outage).
    pub fn trip(&mut self, now: Instant) {
        if matches!(self.state, State::Closed | State::HalfOpen { .. }) {
            self.open(now);
        }
    }

    /// Outcomes per minute over the part of the window that saw traffic (a
    /// window not yet full, after a start or a quiet spell, is not diluted).
    fn rate_per_minute(&self, now: Instant) -> u32 {
        let e = now.as_nanos() / self.bucket_ns;
        let live = self
            .buckets
            .iter()
            .filter(|b| b.epoch <= e && e - b.epoch < BUCKETS as u64 && b.ok + b.fault > 0);
        let (total, oldest) = live.fold((0u64, e), |(n, old), b| {
            (n + u64::from(b.ok + b.fault), old.min(b.epoch))
        });
        // Measured from the first outcome when it is later than the oldest
        // bucket's start: a provider saturated from its first second (150
        // calls/s at a capacity of 100/s) tripped 0.3 s in, and a rate
        // averaged over the whole first bucket set the ramp at 56/s, which
        // then refused two thirds of the traffic for 30 s.
        let oldest_ns = oldest * self.bucket_ns;
        let start = self
            .first_outcome
            .map_or(oldest_ns, |f| f.as_nanos().max(oldest_ns));
        let since_start = now.as_nanos().saturating_sub(start);
        let span_ns = u128::from(since_start.max(self.bucket_ns / 10).max(1));
        let per_minute = u128::from(total) * 60_000_000_000 / span_ns.max(1);
        u32::try_from(per_minute).unwrap_or(u32::MAX)
    }

    /// Records the result of an attempt the breaker admitted.
    pub fn record(&mut self, now: Instant, permit: BreakerPermit, class: Class) {
        let fault = match class {
            Class::Fault { .. } => true,
            Class::Success | Class::Permanent => false,
            Class::Throttled { .. } | Class::NotProviderFault => {
                // Says nothing about health: just give the probe slot back.
                if let (true, State::HalfOpen { in_flight, .. }) = (permit.probe, &mut self.state) {
                    *in_flight = in_flight.saturating_sub(1);
                }
                return;
            }
        };
        if permit.probe {
            self.record_probe(now, fault);
            return;
        }
        if !matches!(self.state, State::Closed) {
            // A late answer to an attempt admitted before the breaker tripped.
            return;
        }
        self.first_outcome.get_or_insert(now);
        let b = self.bucket(now);
        if fault {
            b.fault += 1;
        } else {
            b.ok += 1;
            self.in_a_row = 0;
            return;
        }
        let window = self.bucket_ns.saturating_mul(BUCKETS as u64);
        if now.as_nanos().saturating_sub(self.last_fault.as_nanos()) >= window {
            self.in_a_row = 0;
        }
        self.last_fault = now;
        self.in_a_row += 1;
        if self.in_a_row >= self.streak_to_open(now) {
            self.open(now);
        }
    }

    /// How many faults in a row open it: `min_requests`, or more when the
    /// window shows the model losing a share of requests before the streak, so that a
    /// streak is read as an outage only when the share seen would make
    /// one less likely than one in a million (at 40 % success, 27: the
    /// 20 of a healthy model came up once in 27,000 positions, a few times
    /// a run at 60 % random loss, and opened a breaker the loss did not
    /// call for).
    fn streak_to_open(&self, now: Instant) -> u32 {
        // The share lost before the streak began: the streak itself is the
        // evidence being judged.
        let (ok, faults) = self.totals(now);
        let faults = faults.saturating_sub(self.in_a_row);
        let total = ok + faults;
        if ok == 0 || total == 0 {
            return self.min_requests;
        }
        let lost = f64::from(faults) / f64::from(total);
        if lost <= 0.0 || lost >= 1.0 {
            return self.min_requests;
        }
        let needed = (1e-6f64).ln() / lost.ln();
        // Bounded: at 99 % loss the ratio would ask for 1,375 in a row.
        let needed = needed.ceil().min(f64::from(u16::MAX)) as u32;
        needed.max(self.min_requests)
    }

    fn record_probe(&mut self, now: Instant, fault: bool) {
        match &mut self.state {
            State::HalfOpen {
                in_flight,
                successes,
            } => {
                *in_flight = in_flight.saturating_sub(1);
                if fault {
                    self.open(now);
                } else {
                    *successes += 1;
                    if *successes >= self.probes {
                        self.close(now);
                    }
                }
            }
            // A probe let through while open: success means the provider is
            // back, so half-open now instead of waiting out `open_for`.
            State::Open { .. } if !fault => {
                if self.probes <= 1 {
                    self.close(now);
                } else {
                    self.state = State::HalfOpen {
                        in_flight: 0,
                        successes: 1,
                    };
                }
            }
            // A failed probe while open: keep refusing; the next probe is
            // already a probe interval away.
            State::Open { .. } | State::Closed => {}
        }
    }

    fn close(&mut self, now: Instant) {
        let ramp_per_minute = self.baseline_per_minute.saturating_mul(7) / 5;
        let window = Duration::from_nanos(self.bucket_ns.saturating_mul(BUCKETS as u64));
        // The burst is a tenth of a second of the ramp rate, and at least
        // `min_requests`: callers that come back in a burst at their old
        // rate — 10 calls back to back each second after an incident that
        // saw 40 at once — are never refused (a burst of a tenth of a
        // second alone, 5 there, refused half of them), while a wave of
        // every caller's retries at 1,000/s still meets 1.4× at most.
        let burst = (ramp_per_minute / 600).max(self.min_requests);
        self.first_outcome = None;
        self.ramp = Gcra::per_minute(ramp_per_minute, burst)
            .ok()
            .map(|cap| Ramp {
                cap,
                last_refused: now,
                refused: false,
                ends_by: now + window * 3,
            });
        self.state = State::Closed;
        self.in_a_row = 0;
        self.buckets = [Bucket::default(); BUCKETS];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FAULT: Class = Class::Fault {
        retryable: true,
        wait: None,
        provider_wide: false,
    };

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new(0.5, Duration::from_secs(10), 20, Duration::from_secs(5), 2).unwrap()
    }

    fn run(b: &mut CircuitBreaker, t: Instant, class: Class) -> bool {
        match b.admit(t) {
            Ok(p) => {
                b.record(t, p, class);
                true
            }
            Err(_) => false,
        }
    }

    /// 100 successes a second for 10 s, then 20 faults at once: open at 10 s
    /// (returned), with a rate for its ramp to start from.
    fn tripped_after_100_a_second(b: &mut CircuitBreaker) -> Instant {
        for i in 0..1_000u64 {
            run(b, Instant::from_millis(i * 10), Class::Success);
        }
        let t = Instant::from_millis(10_000);
        twenty_faults(b, t);
        t
    }

    /// Twenty faults at `t`: a streak that opens the breaker.
    fn twenty_faults(b: &mut CircuitBreaker, t: Instant) {
        for _ in 0..20 {
            run(b, t, FAULT);
        }
    }

    /// Sends successes at `t` until the breaker reads closed (its probes).
    fn recover(b: &mut CircuitBreaker, t: Instant) {
        for _ in 0..10 {
            if b.state(t) == BreakerState::Closed {
                return;
            }
            assert!(run(b, t, Class::Success), "a probe refused");
        }
        panic!("{:?} after ten probes", b.state(t));
    }

    /// Sends successes at `t` until one is refused; returns how many went.
    fn until_refused(b: &mut CircuitBreaker, t: Instant) -> usize {
        let through = (0..10_000)
            .take_while(|_| run(b, t, Class::Success))
            .count();
        assert!(through < 10_000, "nothing refused");
        through
    }

    #[test]
    fn a_streak_opens_it_then_it_probes_and_closes() {
        let mut b = breaker();
        let t = Instant::from_millis(1000);
        for _ in 0..10 {
            run(&mut b, t, Class::Success);
        }
        // Half the window's answers faults: a ratio no longer opens it
        // (graded admission answers a share), a streak of 20 does.
        for _ in 0..19 {
            run(&mut b, t, FAULT);
        }
        assert_eq!(b.state(t), BreakerState::Closed, "19 in a row");
        run(&mut b, t, FAULT);
        assert_eq!(b.state(t), BreakerState::Open, "20 in a row");
        assert_eq!(
            b.admit(t + Duration::from_millis(500)),
            Err(t + Duration::from_secs(1)),
            "open: refused until the next probe"
        );
        let later = t + Duration::from_secs(5);
        assert_eq!(b.state(later), BreakerState::HalfOpen);
        let p1 = b.admit(later).unwrap();
        let p2 = b.admit(later).unwrap();
        assert!(p1.is_probe() && p2.is_probe());
        assert!(b.admit(later).is_err(), "only two probes at a time");
        b.record(later, p1, Class::Success);
        b.record(later, p2, Class::Success);
        assert_eq!(b.state(later), BreakerState::Closed);
    }

    #[test]
    fn a_failed_probe_reopens() {
        let mut b = breaker();
        let t = Instant::from_millis(1000);
        twenty_faults(&mut b, t);
        let later = t + Duration::from_secs(5);
        let p = b.admit(later).unwrap();
        b.record(later, p, FAULT);
        assert_eq!(b.state(later), BreakerState::Open);
        assert_eq!(
            b.refusing_until(later),
            Some(later + Duration::from_secs(1)),
            "the next probe, one interval on"
        );
    }

    #[test]
    fn faults_in_a_row_open_it_within_tens_of_milliseconds_at_high_rate() {
        let mut b = breaker();
        // Ten healthy seconds at 1,000/s: the window holds 10,000 successes.
        for i in 0..10_000u64 {
            run(&mut b, Instant::from_millis(i), Class::Success);
        }
        // Then a total outage at the same rate.
        let mut opened_at = None;
        for i in 0..2_000u64 {
            let t = Instant::from_millis(10_000 + i);
            run(&mut b, t, FAULT);
            if b.state(t) == BreakerState::Open {
                opened_at = Some(i);
                break;
            }
        }
        assert_eq!(opened_at, Some(19), "20 faults in a row, 20 ms");
    }

    #[test]
    fn after_closing_it_admits_at_most_1_4_times_the_old_rate_for_a_window() {
        let mut b = breaker();
        // 100/s for 10 s, then an outage.
        let t = tripped_after_100_a_second(&mut b);
        // Recovery: probes close it.
        let back = t + Duration::from_secs(1);
        for _ in 0..3 {
            assert!(run(&mut b, back, Class::Success));
        }
        assert_eq!(b.state(back), BreakerState::Closed);
        // A wave of 1,000 requests in the next second: about 160 get through
        // (140/s, and a burst of 20).
        let through = (0..1_000u64)
            .filter(|i| run(&mut b, back + Duration::from_millis(*i), Class::Success))
            .count();
        assert!((150..=170).contains(&through), "{through}");
        assert_eq!(
            b.state(back + Duration::from_secs(1)),
            BreakerState::Recovering
        );
        // While the wave lasts, the cap holds (here: 20 s of it).
        let held = (1_000..20_000u64)
            .filter(|i| run(&mut b, back + Duration::from_millis(*i), Class::Success))
            .count();
        assert!(held < 19_000 * 15 / 100, "{held}");
        // A calm window (nothing refused) lifts it.
        assert!(run(&mut b, back + Duration::from_secs(20), Class::Success));
        let later = back + Duration::from_secs(31);
        assert!((0..1_000).all(|_| run(&mut b, later, Class::Success)));
    }

    #[test]
    fn the_ramp_is_sized_from_the_traffic_seen_not_from_an_empty_window() {
        // One second of 100/s right after start, then an outage: the ramp
        // is about 1.4 × 120/s (the faults count as traffic too), not a tenth
        // of it because the 10 s window was not full; with a burst of 20,
        // ~188 in the first second.
        let mut b = breaker();
        for i in 0..100u64 {
            run(&mut b, Instant::from_millis(i * 10), Class::Success);
        }
        let t = Instant::from_millis(1_000);
        twenty_faults(&mut b, t);
        let back = t + Duration::from_secs(1);
        for _ in 0..3 {
            run(&mut b, back, Class::Success);
        }
        let through = (0..1_000u64)
            .filter(|i| run(&mut b, back + Duration::from_millis(*i), Class::Success))
            .count();
        assert!((175..=200).contains(&through), "{through}");
    }

    #[test]
    fn a_random_loss_needs_a_longer_streak() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let mut b = breaker();
        // 30 % success at 50 answers a second: a streak of 20 starts about
        // once in 4,200 positions (a dozen times here: a breaker opened by
        // 20 in a row read open at 8,600 of them), where 39 in a row are
        // needed, about once in 3.5 million.
        let mut opened = 0;
        for i in 0..50_000u64 {
            let t = Instant::from_millis(i * 20);
            let ok = rng.gen_bool(0.3);
            run(&mut b, t, if ok { Class::Success } else { FAULT });
            opened += u32::from(b.state(t) == BreakerState::Open);
        }
        assert_eq!(opened, 0);
        let mut b = breaker();
        for i in 0..200u64 {
            let t = Instant::from_millis(i * 20);
            run(&mut b, t, if i % 5 < 2 { Class::Success } else { FAULT });
        }
        let needed = b.streak_to_open(Instant::from_millis(4_000));
        assert!((27..=28).contains(&needed), "{needed}");
    }

    #[test]
    fn a_random_thirty_percent_brownout_never_opens_it() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut b = breaker();
        for i in 0..300_000u64 {
            let t = Instant::from_nanos(i * 3_333_000);
            let class = if rng.gen_bool(0.3) {
                FAULT
            } else {
                Class::Success
            };
            run(&mut b, t, class);
            assert_eq!(b.state(t), BreakerState::Closed, "opened at outcome {i}");
        }
    }

    #[test]
    fn a_probe_while_open_sees_recovery_within_one_interval() {
        let mut b =
            CircuitBreaker::new(0.5, Duration::from_secs(10), 20, Duration::from_secs(30), 2)
                .unwrap();
        let t = Instant::from_millis(1000);
        twenty_faults(&mut b, t);
        assert_eq!(b.state(t), BreakerState::Open);
        // Still down one second later: the probe fails, it stays open.
        assert!(run(&mut b, t + Duration::from_secs(1), FAULT));
        assert!(!run(
            &mut b,
            t + Duration::from_millis(1500),
            Class::Success
        ));
        // Back at 2 s: the probe works, half-open, one more probe closes it —
        // 28 s before `open_for` would have.
        let back = t + Duration::from_secs(2);
        assert!(run(&mut b, back, Class::Success));
        assert_eq!(b.state(back), BreakerState::HalfOpen);
        assert!(run(&mut b, back, Class::Success));
        assert_eq!(b.state(back), BreakerState::Closed);
    }

    #[test]
    fn seed_004_deadline_skips_and_throttling_do_not_move_the_breaker() {
        let mut b = breaker();
        let t = Instant::from_millis(1000);
        for _ in 0..100 {
            run(&mut b, t, Class::NotProviderFault);
            run(
                &mut b,
                t,
                Class::Throttled {
                    retryable: true,
                    wait: Some(Duration::from_secs(1)),
                },
            );
            run(&mut b, t, Class::Permanent);
        }
        assert_eq!(b.state(t), BreakerState::Closed);
    }

    #[test]
    fn old_faults_age_out_of_the_window() {
        let mut b = breaker();
        for _ in 0..15 {
            run(&mut b, Instant::from_millis(0), FAULT);
        }
        for _ in 0..15 {
            run(&mut b, Instant::from_millis(20_000), FAULT);
        }
        assert_eq!(b.state(Instant::from_millis(20_000)), BreakerState::Closed);
    }

    #[test]
    fn after_an_incident_callers_at_their_old_rate_are_never_refused() {
        // Ten calls a second, then twenty 503s in a row; the fault clears.
        // Then the same callers send their ten calls back to back each
        // second: every one is admitted. (The ramp is ~17/s; a
        // burst of a tenth of a second of it refused 9 of each 10.)
        let mut b = CircuitBreaker::default_policy();
        let t = Instant::from_millis(100_000);
        for i in 0..100u64 {
            run(&mut b, t + Duration::from_millis(i * 100), Class::Success);
        }
        let t = t + Duration::from_secs(10);
        for i in 0..20u64 {
            run(&mut b, t + Duration::from_millis(i * 100), FAULT);
        }
        let t = t + Duration::from_secs(2);
        assert_eq!(b.state(t), BreakerState::Open);
        let back = t + Duration::from_secs(1);
        while b.state(back) != BreakerState::Closed {
            assert!(run(&mut b, back, Class::Success));
        }
        for s in 1..10u64 {
            for i in 0..10u64 {
                let now = back + Duration::from_secs(s) + Duration::from_millis(i);
                assert!(
                    run(&mut b, now, Class::Success),
                    "refused at {s} s, call {i}"
                );
            }
        }
    }

    #[test]
    fn a_ramp_that_refuses_says_so_on_the_gauge() {
        let mut b = CircuitBreaker::default_policy();
        let t = Instant::from_millis(100_000);
        for _ in 0..40 {
            run(&mut b, t, FAULT);
        }
        let back = t + Duration::from_secs(1);
        while b.state(back) != BreakerState::Closed {
            run(&mut b, back, Class::Success);
        }
        // A wave far above the old rate: refused, and the state says why.
        let refused = (0..1_000)
            .filter(|_| !run(&mut b, back, Class::Success))
            .count();
        assert!(refused > 0);
        assert_eq!(b.state(back), BreakerState::Recovering);
        // A calm window later it reads closed again.
        assert_eq!(
            b.state(back + Duration::from_secs(11)),
            BreakerState::Closed
        );
    }

    #[test]
    fn a_tripped_model_that_sees_no_traffic_reads_closed_once_its_evidence_is_stale() {
        let mut b = breaker();
        let t = Instant::from_millis(1000);
        twenty_faults(&mut b, t);
        assert_eq!(b.state(t + Duration::from_secs(6)), BreakerState::HalfOpen);
        let stale = t + Duration::from_secs(5) + Duration::from_secs(10);
        assert_eq!(b.state(stale), BreakerState::Closed);
        assert!(run(&mut b, stale, Class::Success));
        assert_eq!(b.state(stale), BreakerState::Closed);
    }

    #[test]
    fn after_closing_a_thirty_percent_fault_rate_does_not_reopen_it() {
        // Right after a close the window is empty: at a 30 % fault rate the
        // first 20 outcomes reach 50 % about one time in twenty, and the
        // ratio is checked at every fault. Two hundred recoveries, each
        // followed by 10 s at 100 outcomes/s and 30 % faults: none reopens.
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        let mut reopened = 0;
        for _ in 0..200 {
            let mut b = CircuitBreaker::default_policy();
            let t = Instant::from_millis(100_000);
            twenty_faults(&mut b, t);
            let back = t + Duration::from_secs(1);
            while b.state(back) != BreakerState::Closed {
                run(&mut b, back, Class::Success);
            }
            for i in 0..1_000u64 {
                let now = back + Duration::from_millis(i * 10);
                let class = if rng.gen_bool(0.3) {
                    FAULT
                } else {
                    Class::Success
                };
                run(&mut b, now, class);
                if b.state(now) == BreakerState::Open {
                    reopened += 1;
                    break;
                }
            }
        }
        assert_eq!(reopened, 0);
    }

    #[test]
    fn a_probe_interval_is_10ms_to_60s_and_never_past_open_for() {
        let ms = Duration::from_millis;
        for ok in [ms(10), ms(60_000)] {
            assert!(breaker().with_probe_interval(ok).is_ok(), "{ok:?}");
        }
        for bad in [ms(9), ms(60_001)] {
            assert!(breaker().with_probe_interval(bad).is_err(), "{bad:?}");
        }
        let b = breaker().with_probe_interval(ms(30_000)).unwrap();
        assert_eq!(
            b.settings().probe_interval,
            Duration::from_secs(5),
            "open_for's 5 s"
        );
    }

    #[test]
    fn an_open_breaker_refuses_until_its_next_probe_and_a_full_half_open_one_a_tenth_on() {
        let mut b = breaker();
        let t = Instant::from_millis(1000);
        let closed = b.admit(t).unwrap();
        assert!(
            !closed.is_probe(),
            "a closed breaker's attempts are no probes"
        );
        b.record(t, closed, FAULT);
        for _ in 0..19 {
            run(&mut b, t, FAULT);
        }
        assert_eq!(b.state(t), BreakerState::Open);
        // The next probe in 1 s, the open period in 5 s: refused till 1 s.
        let probe = t + Duration::from_secs(1);
        assert_eq!(b.refusing_until(t), Some(probe));
        assert_eq!(
            b.refusing_until(probe - Duration::from_millis(1)),
            Some(probe)
        );
        assert_eq!(b.refusing_until(probe), None, "a probe may go at once");
        // Half open with both probe slots taken: come back a tenth of
        // open_for (500 ms) later.
        let later = t + Duration::from_secs(5);
        let (p1, p2) = (b.admit(later).unwrap(), b.admit(later).unwrap());
        assert_eq!(
            b.refusing_until(later),
            Some(later + Duration::from_millis(500))
        );
        b.record(later, p1, Class::Success);
        b.record(later, p2, Class::Success);
        assert_eq!(b.refusing_until(later), None, "closed");
    }

    /// The ramp after a close lasts three windows at most: at that instant it
    /// lifts, even while a wave keeps it refusing up to the instant before.
    #[test]
    fn the_ramp_lifts_three_windows_after_closing_even_while_it_refuses() {
        let mut b = breaker();
        let t = tripped_after_100_a_second(&mut b);
        let back = t + Duration::from_secs(1);
        recover(&mut b, back);
        // A wave each second keeps it refusing: no calm window lifts it.
        let ends = back + Duration::from_secs(30);
        for s in 0..30u64 {
            until_refused(&mut b, back + Duration::from_secs(s));
        }
        let just_before = ends - Duration::from_millis(1);
        until_refused(&mut b, just_before);
        assert_eq!(b.state(just_before), BreakerState::Recovering);
        assert_eq!(b.state(ends), BreakerState::Closed);
        assert!((0..1_000).all(|_| run(&mut b, ends, Class::Success)));
    }

    /// An open period ends on time even when the last probe went out less
    /// than a probe interval before it: from its end the breaker refuses no
    /// longer and admits a half-open probe.
    #[test]
    fn an_open_period_ends_on_time_whatever_the_last_probe() {
        let mut b = breaker();
        let t = Instant::from_millis(1000);
        twenty_faults(&mut b, t);
        // A probe half a second before the 5 s are up fails.
        assert!(run(&mut b, t + Duration::from_millis(4_500), FAULT));
        let end = t + Duration::from_secs(5);
        assert_eq!(b.refusing_until(end - Duration::from_millis(1)), Some(end));
        assert_eq!(b.refusing_until(end), None);
        assert_eq!(b.state(end), BreakerState::HalfOpen);
        assert!(b.admit(end).is_ok_and(|p| p.is_probe()));
    }

    /// A half-open breaker with every probe slot taken refuses an attempt
    /// until a tenth of `open_for` later.
    #[test]
    fn a_full_half_open_breaker_refuses_for_a_tenth_of_open_for() {
        let mut b = breaker();
        let t = Instant::from_millis(1000);
        twenty_faults(&mut b, t);
        let later = t + Duration::from_secs(5);
        let _probes = (b.admit(later).unwrap(), b.admit(later).unwrap());
        let again = later + Duration::from_millis(500);
        assert_eq!(b.admit(later), Err(again));
        assert_eq!(b.refusing_until(later), Some(again));
    }

    /// The streak that opens it is judged against the window's outcomes
    /// only: losses older than the window do not make twenty faults in a
    /// row look like random loss.
    #[test]
    fn losses_older_than_the_window_do_not_lengthen_the_streak() {
        let mut b = breaker();
        let t = Instant::from_millis(1000);
        for _ in 0..2 {
            run(&mut b, t, Class::Success);
            for _ in 0..9 {
                run(&mut b, t, FAULT);
            }
        }
        assert_eq!(b.state(t), BreakerState::Closed);
        // 15 s later (a window and a half; another bucket's slot).
        let later = t + Duration::from_secs(15);
        twenty_faults(&mut b, later);
        assert_eq!(b.state(later), BreakerState::Open);
    }

    /// The share lost that lengthens the streak is read over the window
    /// ending now: outcomes exactly one window old are out of it.
    #[test]
    fn the_share_lost_leaves_out_outcomes_a_whole_window_old() {
        let mut b = breaker();
        let t = Instant::from_millis(1000);
        for _ in 0..2 {
            for _ in 0..9 {
                run(&mut b, t, FAULT);
            }
            run(&mut b, t, Class::Success);
        }
        let window_on = t + Duration::from_secs(10);
        assert!(b.streak_to_open(window_on - Duration::from_nanos(1)) > 100);
        assert_eq!(b.streak_to_open(window_on), 20);
    }

    /// The ramp after a trip holds callers to the rate of the window before
    /// it: traffic a whole window or more before the trip is no part of it,
    /// so a breaker tripped after a quiet window closes with no ramp.
    #[test]
    fn traffic_a_window_before_the_trip_sets_no_ramp() {
        let ramped = |quiet: Duration| {
            let mut b = breaker();
            // 100 outcomes within one bucket (the window's tenth, 1 s).
            let t = Instant::from_millis(1000);
            for i in 0..100u64 {
                run(&mut b, t + Duration::from_millis(i * 5), Class::Success);
            }
            let tripped = t + quiet;
            b.trip(tripped);
            assert_eq!(b.state(tripped), BreakerState::Open);
            let back = tripped + Duration::from_secs(1);
            recover(&mut b, back);
            !(0..1_000).all(|_| run(&mut b, back, Class::Success))
        };
        assert!(ramped(Duration::from_millis(9_999)), "in the window");
        assert!(!ramped(Duration::from_secs(10)), "a window old");
        assert!(!ramped(Duration::from_secs(60)), "long gone");
    }

    #[test]
    fn construction_validates() {
        let s = Duration::from_secs(1);
        assert!(CircuitBreaker::new(0.0, s, 1, s, 1).is_err());
        assert!(CircuitBreaker::new(1.5, s, 1, s, 1).is_err());
        assert!(CircuitBreaker::new(0.5, Duration::ZERO, 1, s, 1).is_err());
        assert!(CircuitBreaker::new(0.5, s, 0, s, 1).is_err());
        assert!(CircuitBreaker::new(0.5, s, 1, s, 0).is_err());
    }

    proptest! {
        #[test]
        fn never_opens_on_permanent_or_skipped_outcomes(
            events in proptest::collection::vec((0u64..60_000, 0u8..4), 0..400)
        ) {
            let mut b = CircuitBreaker::new(0.1, Duration::from_secs(1), 1, Duration::from_secs(1), 1).unwrap();
            let mut events = events;
            events.sort();
            for (t, k) in events {
                let class = match k {
                    0 => Class::Permanent,
                    1 => Class::NotProviderFault,
                    2 => Class::Throttled { retryable: true, wait: None },
                    _ => Class::Success,
                };
                let now = Instant::from_millis(t);
                let p = b.admit(now);
                prop_assert!(p.is_ok());
                if let Ok(p) = p { b.record(now, p, class); }
                prop_assert_eq!(b.state(now), BreakerState::Closed);
            }
        }
    }
}
