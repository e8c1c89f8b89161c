//! The discrete-event engine: a priority queue of events on virtual time.
//! Time jumps from one event to the next; nothing sleeps, nothing reads a
//! clock, and a seeded RNG makes every run reproducible.
//!
//! A logical request enters at the outermost caller layer and travels down
//! the stack one *call* per hop: each caller layer's call makes attempts, each
//! attempt is a call on the next hop, and the last hop is a *job* at a
//! simulated provider. Replies travel back up synchronously. When a layer
//! gives up on an attempt (timeout), the attempt's call is orphaned, not
//! stopped — unless that hop stops when its caller leaves (Levee does; most
//! servers and every provider do not), so abandoned work keeps the provider
//! busy exactly as it does in production.
//!
//! This module holds the run and a call's life (start, answer, cancel);
//! each kind of hop is driven by its own module: [`callers`] (caller
//! layers), [`levee`] (the Levee hop, around `levee_policy::RoutePolicy`)
//! and [`jobs`] (provider jobs).

mod call;
mod callers;
mod jobs;
mod levee;
mod queue;

use call::{Call, Hop, Kind, Logical, Parent};
use queue::Ev;

use crate::arrivals::Shape;
use crate::gateway::LeveeRt;
use crate::layers::Reply;
use crate::metrics::Metrics;
use crate::provider::ProviderRt;
use crate::scenario::{Scenario, Variant};
use crate::slab::{Ref, Slab};
use crate::virtual_time::ns;
use callers::Pool;
use queue::Queue;
use rand::rngs::SmallRng;
use rand::Rng;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::Duration;

/// One variant's run.
pub(crate) struct Engine<'a> {
    sc: &'a Scenario,
    v: &'a Variant,
    now: u64,
    queue: Queue,
    rng: SmallRng,
    calls: Slab<Call>,
    reqs: Vec<Logical>,
    free_reqs: Vec<u32>,
    pools: Vec<Pool>,
    providers: Vec<ProviderRt<Ref>>,
    levee: Option<LeveeRt<'a>>,
    m: Metrics,
}

impl<'a> Engine<'a> {
    pub(crate) fn new(sc: &'a Scenario, v: &'a Variant, mut rng: SmallRng) -> Self {
        Engine {
            sc,
            v,
            now: 0,
            // One lane per caller layer, then one per provider.
            queue: Queue::new(v.layers.len() + sc.providers.len()),
            calls: Slab::new(),
            reqs: Vec::new(),
            free_reqs: Vec::new(),
            pools: v.layers.iter().map(|_| Pool::default()).collect(),
            providers: sc.providers.iter().map(ProviderRt::new).collect(),
            levee: v.levee.as_deref().map(|gw| {
                // A live gateway's clock (breaker buckets, budget slots,
                // probe times) has no fixed phase relative to a fault: draw
                // one per run instead of always starting at 0.
                let phase = rng.gen_range(0..60_000_000_000u64);
                LeveeRt::new(gw, sc, phase)
            }),
            m: Metrics::new(sc, v),
            rng,
        }
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.queue.push(at, ev);
    }

    /// Schedules an event on a lane of the queue (one per caller layer for
    /// its attempt timeouts, then one per provider for its refusals): `at`
    /// must not be earlier than the lane's last.
    fn schedule_lane(&mut self, lane: usize, at: u64, ev: Ev) {
        self.queue.push_lane(lane, at, ev);
    }

    /// Runs to the end of the drain; `progress` receives virtual nanoseconds done.
    pub(crate) fn run(
        mut self,
        progress: &AtomicU64,
    ) -> (Metrics, std::collections::BTreeMap<String, u64>) {
        for (i, s) in self.sc.streams.iter().enumerate() {
            if let Some(t) = s.first(&mut self.rng) {
                self.schedule(ns(t), Ev::Arrive(i as u16));
            }
        }
        let end = ns(self.sc.duration + self.sc.drain);
        let mut n: u64 = 0;
        while let Some(s) = self.queue.pop() {
            if s.at > end {
                break;
            }
            self.now = s.at;
            n += 1;
            if n & 0xffff == 0 {
                progress.store(self.now, AtomicOrdering::Relaxed);
            }
            match s.ev {
                Ev::Arrive(i) => self.arrive(i),
                Ev::Step(r) => self.step(r),
                Ev::Timeout(r, a) => self.timeout(r, a),
                Ev::Stalled(r, a) => self.levee_stalled(r, a),
                Ev::Done(r) => self.done(r),
            }
        }
        progress.store(end, AtomicOrdering::Relaxed);
        // Whatever is still going at the end never answered its user.
        for r in &self.reqs {
            if r.live > 0 || !r.done {
                if !r.done {
                    self.m.unfinished(r.stream);
                }
                self.m.attempts_of_request(r.attempts);
            }
        }
        self.m.events = n;
        self.m.provider_peak_queue = self
            .providers
            .iter()
            .map(|p| p.peak_queue)
            .max()
            .unwrap_or(0);
        let reasons = self
            .levee
            .as_ref()
            .map(|l| l.reasons.iter().map(|(k, n)| (k.to_string(), *n)).collect())
            .unwrap_or_default();
        (self.m, reasons)
    }

    fn arrive(&mut self, i: u16) {
        let s = &self.sc.streams[i as usize];
        let count = match s.shape {
            Shape::Burst { count, .. } => count,
            Shape::Rate(_) => 1,
        };
        for _ in 0..count {
            let req = self.new_request(i);
            let hop = self.first_hop(i);
            self.start(hop, Parent::User, req, None);
        }
        let t = Duration::from_nanos(self.now);
        if let Some(next) = s.next_after(t, false, &mut self.rng) {
            self.schedule(ns(next), Ev::Arrive(i));
        }
    }

    fn new_request(&mut self, stream: u16) -> u32 {
        self.m.arrival(stream, self.now);
        let l = Logical {
            stream,
            attempts: 0,
            live: 0,
            done: false,
            arrived: self.now,
        };
        match self.free_reqs.pop() {
            Some(i) => {
                self.reqs[i as usize] = l;
                i
            }
            None => {
                self.reqs.push(l);
                (self.reqs.len() - 1) as u32
            }
        }
    }

    fn first_hop(&self, stream: u16) -> Hop {
        match self.v.stacks[stream as usize].first() {
            Some(&layer) => Hop::Caller(layer),
            None => self.after_callers(stream),
        }
    }

    /// The hop after caller layer `layer` in `stream`'s stack.
    fn after_layer(&self, stream: u16, layer: u8) -> Hop {
        let stack = &self.v.stacks[stream as usize];
        let next = stack
            .iter()
            .position(|&l| l == layer)
            .and_then(|i| stack.get(i + 1));
        match next {
            Some(&l) => Hop::Caller(l),
            None => self.after_callers(stream),
        }
    }

    fn after_callers(&self, stream: u16) -> Hop {
        if self.levee.is_some() {
            Hop::Levee
        } else {
            Hop::Provider(self.sc.streams[stream as usize].provider as u16)
        }
    }

    fn stream_of(&self, req: u32) -> u16 {
        self.reqs[req as usize].stream
    }

    /// Creates a call on `hop` and begins it.
    fn start(&mut self, hop: Hop, parent: Parent, req: u32, deadline: Option<u64>) {
        let r = self.alloc(hop, parent, req, deadline);
        self.begin(r);
    }

    /// Creates a call (not yet begun).
    fn alloc(&mut self, hop: Hop, parent: Parent, req: u32, deadline: Option<u64>) -> Ref {
        self.reqs[req as usize].live += 1;
        self.calls.insert(Call::new(hop, parent, req, deadline))
    }

    fn begin(&mut self, r: Ref) {
        let Some(c) = self.calls.get(r) else { return };
        match c.kind {
            Kind::Caller { layer, .. } => self.caller_begin(r, layer),
            Kind::Levee { .. } => self.levee_begin(r),
            Kind::Job { provider, .. } => {
                let sc = self.sc;
                let model = &sc.streams[self.stream_of(c.req) as usize].model;
                self.job_begin(r, provider, model)
            }
        }
    }

    fn step(&mut self, r: Ref) {
        let Some(c) = self.calls.get(r) else { return };
        if c.child.is_some() {
            return;
        }
        match c.kind {
            Kind::Caller { .. } => self.caller_attempt(r),
            Kind::Levee { .. } => self.levee_drive(r),
            Kind::Job { .. } => {}
        }
    }

    fn timeout(&mut self, r: Ref, attempt: u32) {
        let Some(c) = self.calls.get(r) else { return };
        let Some(child) = c.child else { return };
        if c.attempt != attempt {
            return;
        }
        let is_levee = matches!(c.kind, Kind::Levee { .. });
        if let Some(c) = self.calls.get_mut(r) {
            c.child = None;
        }
        self.abandon(child);
        if is_levee {
            self.levee_reply(r, Reply::TimedOut);
        } else {
            self.caller_reply(r, Reply::TimedOut);
        }
    }

    /// The caller of `r` gave up on it.
    fn abandon(&mut self, r: Ref) {
        let Some(c) = self.calls.get_mut(r) else {
            return;
        };
        c.parent = Parent::Orphan;
        let stops = match c.kind {
            Kind::Caller { layer, .. } => self.v.layers[layer as usize].stops_when_caller_leaves,
            Kind::Levee { .. } => true,
            Kind::Job { .. } => false,
        };
        if stops {
            self.cancel(r);
        }
    }

    /// Stops `r` at once, passing the cancellation down.
    fn cancel(&mut self, r: Ref) {
        self.levee_cancel(r);
        let Some(c) = self.calls.remove(r) else {
            return;
        };
        self.release(&c);
        if let Some(child) = c.child {
            self.abandon(child);
        }
        self.drop_live(c.req);
    }

    /// `r` answers its caller with `reply` and is gone.
    fn finish(&mut self, r: Ref, reply: Reply) {
        let Some(c) = self.calls.remove(r) else {
            return;
        };
        self.release(&c);
        match c.parent {
            Parent::User => {
                let l = &mut self.reqs[c.req as usize];
                l.done = true;
                let (stream, took) = (l.stream, self.now - l.arrived);
                self.m.answered(stream, self.now, reply.is_success(), took);
            }
            Parent::Orphan => {}
            Parent::Call(p) => {
                if let Some(pc) = self.calls.get(p) {
                    if pc.child == Some(r) {
                        match pc.kind {
                            Kind::Caller { .. } => self.caller_reply(p, reply),
                            Kind::Levee { .. } => self.levee_reply(p, reply),
                            Kind::Job { .. } => {}
                        }
                    }
                }
            }
        }
        self.drop_live(c.req);
    }

    fn drop_live(&mut self, req: u32) {
        let l = &mut self.reqs[req as usize];
        l.live -= 1;
        if l.live == 0 && l.done {
            let a = l.attempts;
            self.m.attempts_of_request(a);
            self.free_reqs.push(req);
        }
    }
}
