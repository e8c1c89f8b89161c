//! Balanced groups: several deployments of one model (two regions, two
//! keys, a cloud and the vendor) that share a route's traffic instead of
//! standing in fallback order.
//!
//! A route's targets are a flat list; a group is a run of consecutive
//! targets. Each request puts the members of every group in an order of
//! its own when it starts — the members that would admit an attempt now
//! first, by the group's strategy, then the refusing ones in config order —
//! and the planner walks that order as it walks fallbacks: a retryable
//! failure on a member goes to the next member first (a fallback, so it
//! spends no retry budget), and past the last member, to the route's next
//! entry. A member whose breaker is open, whose pace holds it after a 429
//! or whose allowance is spent is passed over from the next request on, so
//! traffic moves to the others as soon as Levee learns of it.

use super::{AttemptKind, Dependencies};
use crate::classify::Class;
use crate::provider::{Permit, Refusal};
use crate::time::Instant;
use rand::Rng;
use std::time::Duration;

/// The most targets a route may have, its groups' members counted: a
/// request's order of them is kept inline.
pub const MAX_TARGETS: usize = 32;

/// How long a member an attempt found unreachable (no connection, a reset
/// before any answer) goes behind the group's other ready members. A
/// stopped deployment refuses connections long before its breaker has
/// the streak to open (20 attempts, 9.5 s of them at 4 a second to that
/// member in a live run): every request that started there was answered
/// by the other member, a connection refusal later, but it started there.
/// Behind the others, it is tried first about once a second, which is
/// also how soon it gets its traffic back when it returns.
pub const UNREACHABLE_DEMOTION: Duration = Duration::from_secs(1);

/// How a group picks the member a request tries first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// At random, in proportion to the members' weights.
    #[default]
    WeightedRandom,
    /// The member with the fewest attempts in flight; ties by weight, at
    /// random.
    LeastInFlight,
}

/// A balanced group: targets `start..start + weights.len()` of a route.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub start: usize,
    /// Each member's weight, positive.
    pub weights: Vec<f64>,
    pub strategy: Strategy,
}

impl Group {
    fn members(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.weights.len()
    }
}

/// One request's order of its route's targets: slot `s` is target
/// `at(s)`. The identity until a route with groups orders it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Order {
    slots: [u8; MAX_TARGETS],
    set: bool,
}

impl Default for Order {
    fn default() -> Self {
        Order {
            slots: [0; MAX_TARGETS],
            set: false,
        }
    }
}

impl Order {
    /// Whether a balanced route ordered it.
    pub(super) fn is_set(&self) -> bool {
        self.set
    }

    /// The target in slot `s`.
    pub(super) fn at(&self, s: usize) -> usize {
        match self.set {
            true => self.slots.get(s).map_or(s, |&t| usize::from(t)),
            false => s,
        }
    }
}

/// Orders every group of a route for one request: the members whose
/// provider would admit an attempt now, by the group's strategy, then the
/// rest in config order. `targets` is the route's number of targets.
pub(super) fn order<D: Dependencies + ?Sized, R: Rng + ?Sized>(
    groups: &[Group],
    targets: usize,
    deps: &D,
    now: Instant,
    rng: &mut R,
) -> Order {
    let mut order = Order::default();
    if groups.is_empty() || targets > MAX_TARGETS {
        return order;
    }
    for (s, slot) in order.slots.iter_mut().enumerate().take(targets) {
        // In range: `targets` is at most `MAX_TARGETS` (32).
        *slot = u8::try_from(s).unwrap_or(u8::MAX);
    }
    for g in groups {
        let members = g.members();
        if members.end > targets {
            continue;
        }
        let (mut ready, mut demoted, mut refusing) = (Tier::new(), Tier::new(), Tier::new());
        for (t, &w) in members.zip(&g.weights) {
            let entry = (t, w, deps.in_flight(t).unwrap_or(0));
            match deps.available(t, now) {
                true if deps.unreachable_lately(t, now) => demoted.push(entry),
                true => ready.push(entry),
                false => refusing.push(entry),
            }
        }
        let mut next = g.start;
        for (tier, strategy) in [
            (&mut ready, Some(g.strategy)),
            (&mut demoted, Some(g.strategy)),
            (&mut refusing, None),
        ] {
            tier.place(&mut order, &mut next, strategy, rng);
        }
    }
    order.set = true;
    order
}

/// Members of one standing in a group — (target, weight, attempts in
/// flight) — on the stack: a decision makes no heap allocation.
struct Tier {
    items: [(usize, f64, u32); MAX_TARGETS],
    len: usize,
}

impl Tier {
    fn new() -> Self {
        Tier {
            items: [(0, 0.0, 0); MAX_TARGETS],
            len: 0,
        }
    }

    fn push(&mut self, item: (usize, f64, u32)) {
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = item;
            self.len += 1;
        }
    }

    /// Puts the members into `order` from slot `next` on: by `strategy`,
    /// or as they stand (`None`).
    fn place<R: Rng + ?Sized>(
        &mut self,
        order: &mut Order,
        next: &mut usize,
        strategy: Option<Strategy>,
        rng: &mut R,
    ) {
        while self.len > 0 {
            let items = &self.items[..self.len];
            let least = items.iter().map(|r| r.2).min().unwrap_or(0);
            let i = match strategy {
                None => 0,
                Some(Strategy::WeightedRandom) => pick(items, |_| true, rng),
                Some(Strategy::LeastInFlight) => pick(items, |r| r.2 == least, rng),
            };
            let target = match strategy {
                // In config order: take the first, keep the rest in order.
                None => {
                    let t = self.items[0].0;
                    self.items.copy_within(1..self.len, 0);
                    t
                }
                Some(_) => {
                    let t = self.items[i].0;
                    self.items[i] = self.items[self.len - 1];
                    t
                }
            };
            self.len -= 1;
            order.slots[*next] = u8::try_from(target).unwrap_or(u8::MAX);
            *next += 1;
        }
    }
}

/// The index of one of `items` that `keep` accepts, at random in
/// proportion to its weight.
fn pick<R: Rng + ?Sized>(
    items: &[(usize, f64, u32)],
    keep: impl Fn(&(usize, f64, u32)) -> bool,
    rng: &mut R,
) -> usize {
    let total: f64 = items.iter().filter(|r| keep(r)).map(|r| r.1).sum();
    let mut x = rng.gen::<f64>() * total;
    let mut last = 0;
    for (i, r) in items.iter().enumerate().filter(|(_, r)| keep(r)) {
        x -= r.1;
        last = i;
        if x < 0.0 {
            return i;
        }
    }
    last
}

/// The planner's dependencies seen through one request's order: the
/// planner speaks of slots, the world of targets.
pub(super) struct Ordered<'a, D: ?Sized> {
    pub(super) inner: &'a mut D,
    pub(super) order: Order,
}

impl<D: Dependencies + ?Sized> Dependencies for Ordered<'_, D> {
    fn check(&self, t: usize, now: Instant) -> Result<(), Refusal> {
        self.inner.check(self.order.at(t), now)
    }
    fn admit(&mut self, t: usize, now: Instant) -> Result<Permit, Refusal> {
        self.inner.admit(self.order.at(t), now)
    }
    fn check_kind(&self, t: usize, now: Instant, kind: AttemptKind) -> Result<(), Refusal> {
        self.inner.check_kind(self.order.at(t), now, kind)
    }
    fn admit_kind(&mut self, t: usize, now: Instant, kind: AttemptKind) -> Result<Permit, Refusal> {
        self.inner.admit_kind(self.order.at(t), now, kind)
    }
    fn finish(&mut self, t: usize, now: Instant, permit: Permit, class: Class) -> Option<bool> {
        self.inner.finish(self.order.at(t), now, permit, class)
    }
    fn withdraw(&mut self, t: usize, now: Instant) -> bool {
        self.inner.withdraw(self.order.at(t), now)
    }
    fn budget_refused(&mut self, t: usize) {
        self.inner.budget_refused(self.order.at(t))
    }
    fn deposit(&mut self, t: usize, now: Instant) {
        self.inner.deposit(self.order.at(t), now)
    }
    fn refund(&mut self, t: usize, now: Instant, tokens: u32) {
        self.inner.refund(self.order.at(t), now, tokens)
    }
    fn free_retry(&mut self, t: usize, now: Instant) -> bool {
        self.inner.free_retry(self.order.at(t), now)
    }
    fn expected(&self, t: usize, now: Instant) -> Option<Duration> {
        self.inner.expected(self.order.at(t), now)
    }
    fn admit_expecting(
        &mut self,
        t: usize,
        now: Instant,
        kind: AttemptKind,
    ) -> Result<(Permit, Option<Duration>), Refusal> {
        self.inner.admit_expecting(self.order.at(t), now, kind)
    }
    fn winning(&self, t: usize, now: Instant) -> Option<bool> {
        self.inner.winning(self.order.at(t), now)
    }
    fn headroom(&self, t: usize, now: Instant) -> Option<bool> {
        self.inner.headroom(self.order.at(t), now)
    }
    fn stalled(&mut self, t: usize, now: Instant, permit: &mut Permit) {
        self.inner.stalled(self.order.at(t), now, permit)
    }
    fn available(&self, t: usize, now: Instant) -> bool {
        self.inner.available(self.order.at(t), now)
    }
    fn in_flight(&self, t: usize) -> Option<u32> {
        self.inner.in_flight(self.order.at(t))
    }
    fn unreachable_lately(&self, t: usize, now: Instant) -> bool {
        self.inner.unreachable_lately(self.order.at(t), now)
    }
    fn target_at(&self, slot: usize) -> usize {
        self.inner.target_at(self.order.at(slot))
    }
}
