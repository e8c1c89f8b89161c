//! A provider account's allowance as the provider meters it: requests and
//! tokens per minute, shared out by priority and by caller weight.
//!
//! - **Meters.** Requests, and tokens as each provider counts them: a total
//!   (OpenAI's TPM), or input and output apart (Anthropic's ITPM and OTPM).
//!   Each is a bucket refilled continuously at its per-minute rate, the way
//!   the providers refill theirs.
//! - **Cost.** A request's tokens are estimated at admission (its input
//!   size, and `max_tokens` as the output it may produce: what the
//!   providers themselves reserve). Input and output meters are settled
//!   from the answer's `usage`, as Anthropic counts them (an answer shorter
//!   than its `max_tokens` gives the rest back); a total meter keeps the
//!   estimate, as OpenAI's tokens-per-minute does (it counts the larger of
//!   `max_tokens` and its estimate, and gives nothing back).
//! - **What the provider says is left.** Every answer's remaining count
//!   (`x-ratelimit-remaining-*`, `anthropic-ratelimit-*-remaining`) lowers
//!   Levee's view when the provider has less than Levee thought (other
//!   replicas, other clients of the same account), so Levee slows down before
//!   the provider says 429. A meter the config does not name is learned from
//!   the limit the provider reports.
//! - **Priority.** Each kind of attempt must leave a floor of each bucket
//!   untouched: first attempts none, low-priority callers' 25 %, retries and
//!   traffic falling back from another route 10 % more. When the allowance
//!   runs short, the retries of an incident are refused before the first
//!   attempts they would push into 429s. Within its share (below) a caller
//!   is held to no floor: priority orders what callers borrow beyond their
//!   shares (a high-priority caller's first attempts borrow first), never
//!   another caller's guaranteed part.
//! - **Shares.** With caller weights, each caller active in the last minute
//!   accrues a guarantee of its weighted share of every meter's rate (up to
//!   its share of the bucket). An ask spends its caller's guarantee first;
//!   beyond it, it borrows from the common bucket only while what is left
//!   there still covers every other caller's unspent guarantee. While the
//!   allowance is plentiful everyone borrows what others leave unused; when
//!   it runs short each caller keeps its share, so one caller's surge cannot
//!   take what the others need. A caller already using more than its share
//!   borrows only above a cushion (up to a quarter of the bucket, for one
//!   at twice its share or more), kept for the bursts of callers within
//!   theirs; of two borrowers, the one nearer its share goes first.
//!   A caller whose answers are mostly deterministic refusals (a bad
//!   deploy's 400s, which its own wrapper re-sends as new requests) is held
//!   to its share first: it borrows only above the whole cushion.

mod bucket;

use crate::classify::Class;
use crate::time::Instant;
use bucket::Bucket;
use std::time::Duration;

/// What an allowance meters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Meter {
    Requests,
    /// Input and output tokens together.
    Tokens,
    InputTokens,
    OutputTokens,
}

impl Meter {
    /// Every meter, in index order.
    pub const ALL: [Meter; 4] = [
        Meter::Requests,
        Meter::Tokens,
        Meter::InputTokens,
        Meter::OutputTokens,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Meter::Requests => "requests",
            Meter::Tokens => "tokens",
            Meter::InputTokens => "input_tokens",
            Meter::OutputTokens => "output_tokens",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Meter::Requests => 0,
            Meter::Tokens => 1,
            Meter::InputTokens => 2,
            Meter::OutputTokens => 3,
        }
    }
}

/// An account's limits per minute (`None`: not metered, unless the provider
/// reports one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub requests_per_minute: Option<u32>,
    /// The most requests at once above the steady rate.
    pub request_burst: u32,
    pub tokens_per_minute: Option<u64>,
    pub input_tokens_per_minute: Option<u64>,
    pub output_tokens_per_minute: Option<u64>,
}

/// A request's tokens: estimated at admission, or counted in its answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    pub input: u32,
    pub output: u32,
}

impl Cost {
    fn of(self, meter: Meter) -> f64 {
        match meter {
            Meter::Requests => 1.0,
            Meter::Tokens => f64::from(self.input) + f64::from(self.output),
            Meter::InputTokens => f64::from(self.input),
            Meter::OutputTokens => f64::from(self.output),
        }
    }
}

/// A caller's priority (`callers[].priority`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    High,
    #[default]
    Normal,
    Low,
}

impl Priority {
    /// The config word and metric label.
    pub fn label(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }
}

/// Who asks for a share of the allowance, and what for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ask {
    /// The estimated tokens (requests always cost one).
    pub cost: Cost,
    pub priority: Priority,
    /// A retry of an attempt that failed (on any target).
    pub retry: bool,
    /// Traffic a route sends to a target after its own primary failed.
    pub fallback: bool,
    /// The caller's index in the weights (`None`: not weighed).
    pub caller: Option<u16>,
}

impl Ask {
    /// A request's ask before any attempt: `cost`, and the caller's place
    /// among `callers` (the config's `callers:` names and priorities, in
    /// order): its index, weighed by its share, and its priority. A caller
    /// not among them has an implicit equal share under the id the driver
    /// knows it by (`unlisted`: the gateway's caller slot, the simulator's
    /// stream), after the listed ones, at normal priority: when the
    /// allowance runs short every active caller keeps its part, listed or
    /// not.
    pub fn of_caller<'a, I>(
        callers: I,
        caller: Option<&str>,
        unlisted: Option<u16>,
        cost: Cost,
    ) -> Ask
    where
        I: IntoIterator<Item = (&'a str, Priority)>,
        I::IntoIter: ExactSizeIterator,
    {
        // Walked, not collected: this runs for every request.
        let mut callers = callers.into_iter();
        let listed = u16::try_from(callers.len()).unwrap_or(u16::MAX);
        let found = caller.and_then(|name| {
            callers
                .by_ref()
                .enumerate()
                .find(|(_, (n, _))| *n == name)
                .map(|(i, (_, p))| (i, p))
        });
        let index = match found {
            Some((i, _)) => u16::try_from(i).ok(),
            None => unlisted.and_then(|id| listed.checked_add(id)),
        };
        Ask {
            cost,
            priority: found.map_or(Priority::Normal, |(_, p)| p),
            retry: false,
            fallback: false,
            caller: index,
        }
    }

    /// What one attempt asks: the request's ask, as a retry when the
    /// attempt retries a failed one, and as fallback traffic on any target
    /// but the route's primary (`primary`: the route's first entry). Both
    /// leave a floor for first attempts on the primary.
    pub fn for_attempt(self, primary: bool, retry: bool) -> Ask {
        Ask {
            retry,
            fallback: !primary,
            ..self
        }
    }
}

/// Floors, as fractions of a bucket each kind of attempt must leave.
const FLOOR_HIGH: f64 = 0.0;
const FLOOR_NORMAL: f64 = 0.0;
const FLOOR_LOW: f64 = 0.25;
const FLOOR_RETRY: f64 = 0.10;
const FLOOR_FALLBACK: f64 = 0.10;
/// What a caller over its share leaves in the bucket when it borrows, for
/// the bursts of callers within theirs (a fraction of the bucket).
const BORROW_CUSHION: f64 = 0.25;
/// A caller counts toward the shares while it asked this recently.
const ACTIVE: Duration = Duration::from_secs(60);
/// The time constant of a caller's reported usage rate.
const USAGE_TAU: Duration = Duration::from_secs(10);
/// The fewest recent answers (decayed) that can show a caller failing.
const FAILING_ANSWERS: f64 = 5.0;

impl Ask {
    /// The fraction of each bucket this ask must leave untouched.
    fn floor(&self) -> f64 {
        let base = match self.priority {
            Priority::High => FLOOR_HIGH,
            Priority::Normal => FLOOR_NORMAL,
            Priority::Low => FLOOR_LOW,
        };
        base + self.traffic_floor()
    }

    /// The part of [`Ask::floor`] that retries and fallback traffic leave
    /// for first attempts, whatever the caller's priority.
    fn traffic_floor(&self) -> f64 {
        let retry = if self.retry { FLOOR_RETRY } else { 0.0 };
        let fallback = if self.fallback { FLOOR_FALLBACK } else { 0.0 };
        retry + fallback
    }
}

/// A caller's weight, its unspent guarantee and its recent use of each meter.
#[derive(Clone, Debug)]
struct Share {
    weight: f64,
    /// When it last asked (`None`: never).
    last: Option<Instant>,
    /// The unspent guarantee per meter, as of `at`.
    guaranteed: [f64; 4],
    at: Instant,
    /// Decayed use per meter (units; a rate once divided by the time constant).
    used: [f64; 4],
    used_at: Instant,
    in_flight: u32,
    /// Decayed counts of its answers (successes and deterministic
    /// refusals) and of the refusals among them, as of `answered_at`.
    answers: f64,
    refused: f64,
    answered_at: Instant,
}

/// The most callers an allowance keeps shares for (the gateway's caller
/// slots are bounded below it).
const MAX_SHARES: usize = 16_384;

impl Share {
    fn of(weight: f64) -> Share {
        Share {
            weight: weight.max(f64::MIN_POSITIVE),
            last: None,
            guaranteed: [0.0; 4],
            at: Instant::ZERO,
            used: [0.0; 4],
            used_at: Instant::ZERO,
            in_flight: 0,
            answers: 0.0,
            refused: 0.0,
            answered_at: Instant::ZERO,
        }
    }

    /// Whether its requests keep failing deterministically: half or more of
    /// its recent answers (over [`USAGE_TAU`]) refused it, a 400 and the
    /// like, out of at least [`FAILING_ANSWERS`].
    fn failing(&self, now: Instant) -> bool {
        let dt = now.saturating_since(self.answered_at).as_secs_f64();
        let k = (-dt / USAGE_TAU.as_secs_f64()).exp();
        self.answers * k >= FAILING_ANSWERS && self.refused >= 0.5 * self.answers
    }

    fn active(&self, now: Instant) -> bool {
        self.last.is_some_and(|l| now.saturating_since(l) <= ACTIVE)
    }

    fn decayed(&self, now: Instant) -> [f64; 4] {
        let dt = now.saturating_since(self.used_at).as_secs_f64();
        let k = (-dt / USAGE_TAU.as_secs_f64()).exp();
        self.used.map(|u| u * k)
    }
}

/// What [`Allowance::take`] spent, to settle with [`Allowance::settle`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    pub cost: Cost,
    pub caller: Option<u16>,
}

/// A provider account's allowance.
#[derive(Clone, Debug, Default)]
pub struct Allowance {
    buckets: [Option<Bucket>; 4],
    shares: Vec<Share>,
}

/// What the provider reported about one meter in an answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reported {
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
}

impl Allowance {
    /// An allowance with `limits` (a token meter's capacity is its minute's
    /// worth, as the providers allow; requests burst by `request_burst`).
    pub fn new(limits: Limits) -> Self {
        let mut a = Allowance::default();
        if let Some(rpm) = limits.requests_per_minute {
            let burst = f64::from(limits.request_burst.max(1));
            a.buckets[0] = Some(Bucket::new(f64::from(rpm), burst, true));
        }
        let tokens = [
            (Meter::Tokens, limits.tokens_per_minute),
            (Meter::InputTokens, limits.input_tokens_per_minute),
            (Meter::OutputTokens, limits.output_tokens_per_minute),
        ];
        for (meter, per_minute) in tokens {
            if let Some(n) = per_minute {
                let n = n as f64;
                a.buckets[meter.index()] = Some(Bucket::new(n, n, true));
            }
        }
        a
    }

    /// The allowance a requests-only [`crate::admission::Gcra`] describes.
    pub fn from_gcra(g: &crate::admission::Gcra) -> Self {
        let (per_minute, burst) = g.rate();
        let mut a = Allowance::default();
        a.buckets[0] = Some(Bucket::new(per_minute, f64::from(burst), true));
        a
    }

    /// Caller weights (`callers[].share`), in the callers' index order.
    pub fn with_shares(mut self, weights: &[f64]) -> Self {
        self.shares = weights.iter().map(|&w| Share::of(w)).collect();
        self
    }

    /// Whether anything is metered (configured or learned).
    pub fn metered(&self) -> bool {
        self.buckets.iter().any(Option::is_some)
    }

    /// Whether `ask` would be admitted now; else the earliest instant it
    /// could be.
    pub fn check(&self, now: Instant, ask: &Ask) -> Result<(), Instant> {
        // Nothing metered admits everything: the callers' weights need not
        // be summed (most providers, until their answers report a limit).
        if !self.metered() {
            return Ok(());
        }
        let floor = ask.floor();
        let me = ask
            .caller
            .map(usize::from)
            .filter(|&c| c < self.shares.len());
        let weights = self.active_weight(now, me);
        let mut latest: Option<Instant> = None;
        let mut later = |at: Instant| latest = Some(latest.map_or(at, |l: Instant| l.max(at)));
        for meter in Meter::ALL {
            let i = meter.index();
            let Some(b) = &self.buckets[i] else {
                continue;
            };
            let need = ask.cost.of(meter);
            let own = me.map_or(0.0, |me| self.guarantee(now, me, i, weights));
            // Within its own guarantee a caller is held to no priority
            // floor (priority orders what is borrowed); retries and
            // fallback traffic still leave theirs for first attempts.
            let floor = if need <= own + 1e-9 {
                ask.traffic_floor()
            } else {
                floor
            };
            if let Err(at) = b.ready(now, need, floor) {
                later(at);
                continue;
            }
            let Some(me) = me else { continue };
            // Beyond its own guarantee, a caller borrows only what leaves
            // every other active caller's guarantee covered.
            let borrow = need - own;
            if borrow > 1e-9 {
                let others: f64 = (0..self.shares.len())
                    .filter(|&j| j != me && self.shares[j].active(now))
                    .map(|j| self.guarantee(now, j, i, weights))
                    .sum();
                // A caller using more than its share borrows only above a
                // cushion, kept for the bursts of callers within theirs.
                let share_rate = self.shares[me].weight / weights * b.per_sec;
                let used_rate = self.shares[me].decayed(now)[i] / USAGE_TAU.as_secs_f64();
                // The further over its share, the higher its cushion: of
                // two borrowers, the one nearer its share goes first (as
                // max-min fairness would have it).
                let over = (used_rate / share_rate.max(f64::MIN_POSITIVE) - 1.0).clamp(0.0, 1.0);
                // A caller whose requests keep failing deterministically
                // (a bad deploy's 400s, re-sent by its own wrapper as new
                // requests) is held to its share first: it borrows only
                // above the whole cushion, whatever its priority. Healthy
                // callers next to one were refused 2 requests a minute
                // its re-sends had taken.
                let failing = self.shares[me].failing(now);
                let over = if failing { 1.0 } else { over };
                // A high-priority caller's first attempts borrow first.
                let first_high = ask.priority == Priority::High && !ask.retry && !ask.fallback;
                let cushion = match first_high && !failing {
                    true => 0.0,
                    false => BORROW_CUSHION * over * b.capacity,
                };
                let spare = b.level(now) - others - cushion;
                if spare < need - 1e-9 {
                    // Its own guarantee refills at its share of the rate.
                    let rate = self.shares[me].weight / weights * b.per_sec;
                    let secs = (borrow / rate).clamp(0.0, 86_400.0);
                    later(now + Duration::from_secs_f64(secs));
                }
            }
        }
        match latest {
            Some(at) => Err(at),
            None => Ok(()),
        }
    }

    /// Spends `ask` (all meters or none).
    pub fn take(&mut self, now: Instant, ask: &Ask) -> Result<Grant, Instant> {
        self.asked(now, ask);
        let me = ask
            .caller
            .map(usize::from)
            .filter(|&c| c < self.shares.len());
        self.check(now, ask)?;
        for meter in Meter::ALL {
            if let Some(b) = &mut self.buckets[meter.index()] {
                b.advance(now);
                b.level -= ask.cost.of(meter);
            }
        }
        if let Some(me) = me {
            let s = &mut self.shares[me];
            let mut used = s.decayed(now);
            for meter in Meter::ALL {
                let i = meter.index();
                let cost = ask.cost.of(meter);
                used[i] += cost;
                s.guaranteed[i] = (s.guaranteed[i] - cost).max(0.0);
            }
            s.used = used;
            s.used_at = now;
        }
        Ok(Grant {
            cost: ask.cost,
            caller: ask.caller,
        })
    }

    /// Notes how an answer to `caller` went: refused as its own request's
    /// fault (a 400: [`Class::Permanent`]) or a success. Faults and
    /// throttles are the provider's, and say nothing of the caller.
    pub fn answered(&mut self, now: Instant, caller: Option<u16>, class: Class) {
        let refused = match class {
            Class::Success => 0.0,
            Class::Permanent => 1.0,
            _ => return,
        };
        let Some(s) = caller.and_then(|c| self.shares.get_mut(usize::from(c))) else {
            return;
        };
        let dt = now.saturating_since(s.answered_at).as_secs_f64();
        let k = (-dt / USAGE_TAU.as_secs_f64()).exp();
        s.answers = s.answers * k + 1.0;
        s.refused = s.refused * k + refused;
        s.answered_at = s.answered_at.max(now);
    }

    /// Notes that `ask`'s caller asked: it is active, admitted or not (the
    /// shares are taken over the callers asking).
    pub fn asked(&mut self, now: Instant, ask: &Ask) {
        let Some(me) = ask.caller.map(usize::from) else {
            return;
        };
        // A caller not seen before has an equal share (weight 1).
        if me >= self.shares.len() && me < MAX_SHARES {
            self.shares.resize_with(me + 1, || Share::of(1.0));
        }
        if me >= self.shares.len() {
            return;
        }
        // Guarantees accrue at the shares of the callers active so far.
        self.accrue(now);
        if !self.shares[me].active(now) {
            self.shares[me].at = now;
        }
        self.shares[me].last = Some(now);
    }

    /// The sum of the active callers' weights (counting `me` as active).
    fn active_weight(&self, now: Instant, me: Option<usize>) -> f64 {
        self.shares
            .iter()
            .enumerate()
            .filter(|(j, s)| s.active(now) || Some(*j) == me)
            .map(|(_, s)| s.weight)
            .sum::<f64>()
            .max(f64::MIN_POSITIVE)
    }

    /// Caller `j`'s unspent guarantee of meter `i` now, given the active
    /// callers' total weight.
    fn guarantee(&self, now: Instant, j: usize, i: usize, weights: f64) -> f64 {
        let (Some(s), Some(b)) = (self.shares.get(j), &self.buckets[i]) else {
            return 0.0;
        };
        let share = s.weight / weights;
        let dt = now.saturating_since(s.at).as_secs_f64();
        // Up to its share of the bucket, and never less than one whole
        // unit: a request bucket's burst of 2 gave a quarter share half a
        // request, a guarantee it could never spend (1 answer in 24).
        let cap = (share * b.capacity).max(1.0_f64.min(b.capacity));
        (s.guaranteed[i] + dt * share * b.per_sec).min(cap)
    }

    /// Brings every active caller's guarantee up to `now`.
    fn accrue(&mut self, now: Instant) {
        let weights = self.active_weight(now, None);
        for j in 0..self.shares.len() {
            if !self.shares[j].active(now) {
                self.shares[j].guaranteed = [0.0; 4];
                continue;
            }
            for i in 0..4 {
                self.shares[j].guaranteed[i] = self.guarantee(now, j, i, weights);
            }
            self.shares[j].at = now;
        }
    }

    /// The answer counted `used` tokens where `grant` estimated its cost:
    /// gives back what was estimated and not used, or takes what was used
    /// beyond it (a bucket may go below zero: later asks wait it out).
    pub fn settle(&mut self, now: Instant, grant: Grant, used: Cost) {
        // A total meter keeps its estimate: the provider gives nothing back.
        let tokens = [Meter::InputTokens, Meter::OutputTokens];
        for meter in tokens {
            let delta = grant.cost.of(meter) - used.of(meter);
            if let Some(b) = &mut self.buckets[meter.index()] {
                b.advance(now);
                b.level = (b.level + delta).min(b.capacity);
            }
        }
        if let Some(s) = grant
            .caller
            .and_then(|c| self.shares.get_mut(usize::from(c)))
        {
            let mut decayed = s.decayed(now);
            for meter in tokens {
                let delta = grant.cost.of(meter) - used.of(meter);
                decayed[meter.index()] = (decayed[meter.index()] - delta).max(0.0);
            }
            s.used = decayed;
            s.used_at = now;
        }
    }

    /// What the provider reported left of `meter`: Levee's view is lowered
    /// to it when the provider has less; a meter Levee does not know is
    /// learned from the reported limit.
    pub fn reported(&mut self, now: Instant, meter: Meter, r: Reported) {
        let i = meter.index();
        if self.buckets[i].is_none() {
            let Some(limit) = r.limit.filter(|&l| l > 0) else {
                return;
            };
            // A learned meter holds what the provider says a minute
            // allows, as its own bucket does; what it says is left, on
            // every answer, keeps Levee at or under it. (A second's worth
            // for requests left a quarter of a fresh account's first three
            // minutes unused at twice its limit.)
            let limit = limit as f64;
            let mut b = Bucket::new(limit, limit, false);
            b.at = now;
            self.buckets[i] = Some(b);
        }
        let Some(b) = &mut self.buckets[i] else {
            return;
        };
        if let (false, Some(limit)) = (b.configured, r.limit.filter(|&l| l > 0)) {
            // A learned meter follows the limit the provider states.
            let limit = limit as f64;
            b.per_sec = limit / 60.0;
            b.capacity = limit;
        }
        if let Some(remaining) = r.remaining {
            b.advance(now);
            b.level = b.level.min(remaining as f64);
        }
    }

    /// The level and capacity of `meter` now (`None`: not metered).
    pub fn level(&self, now: Instant, meter: Meter) -> Option<(f64, f64)> {
        let b = self.buckets[meter.index()].as_ref()?;
        Some((b.level(now).max(0.0), b.capacity))
    }

    /// `meter` in one unit for every meter, per minute: its rate, and what
    /// is left at the bucket's fill (a full bucket: a whole minute's
    /// worth; half full: half of it). `None`: not metered. A request
    /// bucket's capacity is its burst (2 for 120 a minute), a token
    /// bucket's a minute: compared with their capacities, the two read
    /// differently; per minute, alike.
    pub fn per_minute(&self, now: Instant, meter: Meter) -> Option<(f64, f64)> {
        let b = self.buckets[meter.index()].as_ref()?;
        // Per second and back: rounded off the float's last bits.
        let rate = (b.per_sec * 60.0 * 1e6).round() / 1e6;
        let fill = (b.level(now).max(0.0) / b.capacity).min(1.0);
        Some(((fill * rate * 1e6).round() / 1e6, rate))
    }

    /// Whether the caller of `ask` holds more than its weighted share of
    /// `in_flight` slots out of `max` (the same shares as the meters).
    pub fn over_in_flight_share(&self, now: Instant, ask: &Ask, max: u32) -> bool {
        let Some(me) = ask.caller.and_then(|c| self.shares.get(usize::from(c))) else {
            return false;
        };
        let total: f64 = self
            .shares
            .iter()
            .filter(|s| s.in_flight > 0 || s.active(now))
            .map(|s| s.weight)
            .sum::<f64>()
            .max(me.weight);
        f64::from(me.in_flight) >= (me.weight / total) * f64::from(max)
    }

    /// A caller's attempt started or ended (for the in-flight shares).
    pub fn in_flight(&mut self, caller: Option<u16>, started: bool) {
        if let Some(s) = caller.and_then(|c| self.shares.get_mut(usize::from(c))) {
            s.in_flight = match started {
                true => s.in_flight.saturating_add(1),
                false => s.in_flight.saturating_sub(1),
            };
        }
    }

    /// Whether callers are weighed.
    pub fn has_shares(&self) -> bool {
        !self.shares.is_empty()
    }

    /// A caller's use of `meter` per second (decayed over ten seconds) and
    /// its share of the meter's rate now.
    pub fn share_use(&self, now: Instant, caller: u16, meter: Meter) -> Option<(f64, f64)> {
        let me = self.shares.get(usize::from(caller))?;
        let b = self.buckets[meter.index()].as_ref()?;
        let total = self.active_weight(now, Some(usize::from(caller)));
        let used = me.decayed(now)[meter.index()] / USAGE_TAU.as_secs_f64();
        Some((used, me.weight / total * b.per_sec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn ask(input: u32, output: u32) -> Ask {
        Ask {
            cost: Cost { input, output },
            priority: Priority::High,
            ..Ask::default()
        }
    }

    #[test]
    fn tokens_are_spent_by_the_estimate_and_refill_over_the_minute() {
        let mut a = Allowance::new(Limits {
            tokens_per_minute: Some(6_000),
            ..Limits::default()
        });
        a.take(at(0), &ask(1_000, 2_000)).unwrap();
        a.take(at(0), &ask(1_000, 2_000)).unwrap();
        // 0 left: 3,000 more need 30 s at 100 tokens a second.
        let e = a.take(at(0), &ask(1_000, 2_000)).unwrap_err();
        assert_eq!(e, at(30_000));
        assert!(a.take(at(30_000), &ask(1_000, 2_000)).is_ok());
    }

    #[test]
    fn settling_gives_back_what_the_answer_did_not_use() {
        let mut a = Allowance::new(Limits {
            output_tokens_per_minute: Some(6_000),
            ..Limits::default()
        });
        let g = a.take(at(0), &ask(1_000, 5_000)).unwrap();
        assert!(a.check(at(0), &ask(1_000, 1_001)).is_err());
        let used = Cost {
            input: 1_000,
            output: 200,
        };
        a.settle(at(0), g, used);
        // 6,000 − 200 = 5,800 left.
        assert!(a.check(at(0), &ask(1_000, 5_800)).is_ok());
        assert!(a.check(at(0), &ask(1_000, 5_801)).is_err());
        // A total meter keeps the estimate, as OpenAI's does.
        let mut total = Allowance::new(Limits {
            tokens_per_minute: Some(6_000),
            ..Limits::default()
        });
        let g = total.take(at(0), &ask(1_000, 4_000)).unwrap();
        total.settle(at(0), g, used);
        assert!(total.check(at(0), &ask(500, 500)).is_ok());
        assert!(total.check(at(0), &ask(500, 501)).is_err());
    }

    #[test]
    fn input_and_output_are_metered_apart_when_the_provider_does() {
        let mut a = Allowance::new(Limits {
            input_tokens_per_minute: Some(10_000),
            output_tokens_per_minute: Some(1_000),
            ..Limits::default()
        });
        a.take(at(0), &ask(100, 1_000)).unwrap();
        // Output is spent; input is not.
        assert!(a.check(at(0), &ask(9_000, 0)).is_ok());
        assert!(a.check(at(0), &ask(0, 10)).is_err());
    }

    #[test]
    fn the_providers_remaining_lowers_the_view_and_a_reported_limit_is_learned() {
        let mut a = Allowance::default();
        assert!(!a.metered());
        a.reported(
            at(0),
            Meter::Tokens,
            Reported {
                limit: Some(60_000),
                remaining: Some(500),
            },
        );
        assert!(a.metered());
        assert!(a.check(at(0), &ask(400, 100)).is_ok());
        assert!(a.check(at(0), &ask(400, 200)).is_err());
        // It refills at the reported 1,000 a second.
        assert!(a.check(at(1_000), &ask(1_000, 500)).is_ok());
        // A remaining above Levee's own view changes nothing.
        a.reported(
            at(1_000),
            Meter::Tokens,
            Reported {
                limit: None,
                remaining: Some(50_000),
            },
        );
        assert!(a.check(at(1_000), &ask(1_000, 600)).is_err());
    }

    #[test]
    fn retries_and_low_priority_leave_a_floor_for_first_attempts() {
        let mut a = Allowance::new(Limits {
            requests_per_minute: Some(600),
            request_burst: 20,
            ..Limits::default()
        });
        let first = Ask::default();
        let retry = Ask {
            retry: true,
            ..Ask::default()
        };
        let low = Ask {
            priority: Priority::Low,
            ..Ask::default()
        };
        // Retries stop with 10 % (2 of 20) left; low priority at 25 % (5).
        let mut retries = 0;
        while a.take(at(0), &retry).is_ok() {
            retries += 1;
        }
        assert_eq!(retries, 18);
        assert!(a.take(at(0), &low).is_err());
        // First attempts take the rest.
        assert!(a.take(at(0), &first).is_ok());
        assert!(a.take(at(0), &first).is_ok());
        assert!(a.take(at(0), &first).is_err());
    }

    #[test]
    fn a_caller_over_its_share_is_held_above_the_floor_while_others_keep_theirs() {
        let mut a = Allowance::new(Limits {
            requests_per_minute: Some(600),
            request_burst: 10,
            ..Limits::default()
        })
        .with_shares(&[1.0, 1.0]);
        let surge = Ask {
            caller: Some(0),
            ..Ask::default()
        };
        let steady = Ask {
            caller: Some(1),
            ..Ask::default()
        };
        // Alone, the surging caller may take everything (work-conserving).
        let mut taken = 0;
        while a.take(at(0), &surge).is_ok() {
            taken += 1;
        }
        assert_eq!(taken, 10);
        // Both active, 10 a second shared: 5 each. Over 20 s the surging
        // caller asks 40 times a second, the steady one 4 times.
        let (mut steady_ok, mut steady_asked, mut surge_ok) = (0, 0, 0);
        for tick in 1..=20_000u64 {
            let now = at(tick);
            if tick % 25 == 0 && a.take(now, &surge).is_ok() {
                surge_ok += 1;
            }
            if tick % 250 == 0 {
                steady_asked += 1;
                if a.take(now, &steady).is_ok() {
                    steady_ok += 1;
                }
            }
        }
        // Its first ask finds the bucket drained by a caller it had not
        // met; once it is active, its share is kept for it.
        assert!(
            steady_ok >= steady_asked - 1,
            "the caller within its share is refused only before it is known: {steady_ok} of {steady_asked}"
        );
        // A high-priority caller's first attempt borrows first (no cushion),
        // still only from what leaves the others' guarantees covered.
        let high = Ask {
            priority: Priority::High,
            ..surge
        };
        assert!(a.check(at(20_001), &surge).is_err());
        assert!(a.check(at(20_001), &high).is_ok());
        assert!(
            surge_ok > 100,
            "the surging caller still gets the rest: {surge_ok}"
        );
    }

    /// `checkout` (share 3, high priority) asking far past its share, and
    /// `batch` (share 1, low priority) asking steadily: batch gets its
    /// quarter of the allowance. Priority orders what is borrowed; it takes
    /// no caller's guaranteed part, and a low-priority caller's floor does
    /// not hold it back within its share.
    #[test]
    fn a_share_holds_next_to_a_high_priority_caller() {
        let mut a = Allowance::new(Limits {
            requests_per_minute: Some(120),
            request_burst: 2,
            ..Limits::default()
        })
        .with_shares(&[3.0, 1.0]);
        let checkout = Ask {
            caller: Some(0),
            priority: Priority::High,
            ..Ask::default()
        };
        let batch = Ask {
            caller: Some(1),
            priority: Priority::Low,
            ..Ask::default()
        };
        let (mut batch_ok, mut checkout_ok) = (0u32, 0u32);
        // A minute: checkout asks 20 times a second, batch once a second
        // (its share is 0.5 a second: it asks for twice its part).
        for tick in 0..60_000u64 {
            let now = at(tick);
            if tick % 50 == 0 && a.take(now, &checkout).is_ok() {
                checkout_ok += 1;
            }
            if tick % 1000 == 500 && a.take(now, &batch).is_ok() {
                batch_ok += 1;
            }
        }
        let total = f64::from(batch_ok + checkout_ok);
        assert!(
            f64::from(batch_ok) >= 0.2 * total,
            "batch got {batch_ok} of {total} (its share is 25 %)"
        );
        assert!(checkout_ok > batch_ok, "{checkout_ok} vs {batch_ok}");
    }
}
