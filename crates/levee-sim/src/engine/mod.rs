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
//! The Levee hop is in [`crate::gateway`]; it drives `levee_policy::RoutePolicy`.

use crate::arrivals::Shape;
use crate::gateway::LeveeRt;
use crate::layers::{Next, Reply};
use crate::metrics::Metrics;
use crate::provider::{serve, Admission, ProviderRt};
use crate::scenario::{Scenario, Variant};
use crate::slab::{Ref, Slab};
use levee_policy::RequestState;
use rand::rngs::SmallRng;
use rand::Rng;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::Duration;

pub(crate) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Ev {
    /// The next logical request of a stream.
    Arrive(u16),
    /// A caller's backoff is over, or Levee's `Wait` has come.
    Step(Ref),
    /// A call's attempt `n` timed out (stale unless that attempt is still out).
    Timeout(Ref, u32),
    /// Levee's attempt `n` passed its target's learned p99 (stale unless
    /// that attempt is still out): stall evidence.
    Stalled(Ref, u32),
    /// A provider job is answered.
    Done(Ref),
}

#[derive(Debug)]
struct Sched {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Sched {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Sched {}
impl PartialOrd for Sched {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Sched {
    // Reversed: BinaryHeap is a max-heap, the engine wants the earliest.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Who waits for a call's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parent {
    /// The end user: the call is the logical request's outermost one.
    User,
    Call(Ref),
    /// Nobody any more: the caller gave up.
    Orphan,
}

/// A hop of the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hop {
    Caller(u8),
    Levee,
    Provider(u16),
}

#[derive(Debug)]
pub(crate) enum Kind {
    Caller {
        layer: u8,
        has_worker: bool,
        since: u64,
    },
    Levee {
        route: u16,
        st: Box<RequestState>,
        guard: Option<levee_policy::ConcurrencyGuard>,
    },
    Job {
        provider: u16,
        reply: Reply,
        holds_worker: bool,
        /// Its tokens are reserved at the provider until it answers.
        reserved: bool,
    },
}

#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) req: u32,
    pub(crate) parent: Parent,
    /// When the caller of this call stops waiting, if it said.
    pub(crate) deadline: Option<u64>,
    pub(crate) child: Option<Ref>,
    pub(crate) attempt: u32,
    pub(crate) kind: Kind,
}

#[derive(Debug)]
pub(crate) struct Logical {
    pub(crate) stream: u16,
    pub(crate) attempts: u32,
    live: u32,
    done: bool,
    /// When the user sent it (virtual nanoseconds).
    arrived: u64,
}

#[derive(Debug, Default)]
struct Pool {
    busy: u32,
    queue: VecDeque<Ref>,
}

/// One variant's run.
pub(crate) struct Engine<'a> {
    pub(crate) sc: &'a Scenario,
    pub(crate) v: &'a Variant,
    pub(crate) now: u64,
    heap: BinaryHeap<Sched>,
    /// Lanes of events that all wait the same time, so they come due in the
    /// order they were set and a FIFO keeps them sorted: one per caller layer
    /// for its attempt timeouts (most are stale by then; a heap would sift
    /// them for nothing), then one per provider for its refusals.
    lanes: Vec<VecDeque<Sched>>,
    seq: u64,
    pub(crate) rng: SmallRng,
    pub(crate) calls: Slab<Call>,
    reqs: Vec<Logical>,
    free_reqs: Vec<u32>,
    pools: Vec<Pool>,
    providers: Vec<ProviderRt<Ref>>,
    pub(crate) levee: Option<LeveeRt<'a>>,
    pub(crate) m: Metrics,
}

impl<'a> Engine<'a> {
    pub(crate) fn new(sc: &'a Scenario, v: &'a Variant, mut rng: SmallRng) -> Self {
        Engine {
            sc,
            v,
            now: 0,
            heap: BinaryHeap::with_capacity(1 << 12),
            lanes: (0..v.layers.len() + sc.providers.len())
                .map(|_| VecDeque::new())
                .collect(),
            seq: 0,
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

    pub(crate) fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Sched {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// Schedules an event on a lane (see `lanes`): `at` must not be earlier
    /// than the lane's last.
    fn schedule_lane(&mut self, lane: usize, at: u64, ev: Ev) {
        self.seq += 1;
        debug_assert!(self.lanes[lane].back().is_none_or(|b| b.at <= at));
        self.lanes[lane].push_back(Sched {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// The next event of all: the heap's or a timeout FIFO's, earliest first.
    fn pop(&mut self) -> Option<Sched> {
        let mut best: Option<(u64, u64, usize)> =
            self.heap.peek().map(|s| (s.at, s.seq, usize::MAX));
        for (i, q) in self.lanes.iter().enumerate() {
            if let Some(s) = q.front() {
                if best.is_none_or(|(at, seq, _)| (s.at, s.seq) < (at, seq)) {
                    best = Some((s.at, s.seq, i));
                }
            }
        }
        match best? {
            (_, _, usize::MAX) => self.heap.pop(),
            (_, _, i) => self.lanes[i].pop_front(),
        }
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
        while let Some(s) = self.pop() {
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

    pub(crate) fn stream_of(&self, req: u32) -> u16 {
        self.reqs[req as usize].stream
    }

    /// Creates a call on `hop` and begins it.
    pub(crate) fn start(&mut self, hop: Hop, parent: Parent, req: u32, deadline: Option<u64>) {
        let r = self.alloc(hop, parent, req, deadline);
        self.begin(r);
    }

    /// Creates a call (not yet begun).
    pub(crate) fn alloc(
        &mut self,
        hop: Hop,
        parent: Parent,
        req: u32,
        deadline: Option<u64>,
    ) -> Ref {
        self.reqs[req as usize].live += 1;
        let kind = match hop {
            Hop::Caller(layer) => Kind::Caller {
                layer,
                has_worker: false,
                since: 0,
            },
            Hop::Levee => Kind::Levee {
                route: 0,
                st: Box::new(RequestState::new(levee_policy::Instant::ZERO)),
                guard: None,
            },
            Hop::Provider(p) => Kind::Job {
                provider: p,
                reply: Reply::status(200),
                holds_worker: false,
                reserved: false,
            },
        };
        self.calls.insert(Call {
            req,
            parent,
            deadline,
            child: None,
            attempt: 0,
            kind,
        })
    }

    pub(crate) fn begin(&mut self, r: Ref) {
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

    // ------------------------------------------------------------ caller layers

    fn caller_begin(&mut self, r: Ref, layer: u8) {
        let l = &self.v.layers[layer as usize];
        if let Some(w) = l.workers {
            let pool = &mut self.pools[layer as usize];
            if pool.busy >= w {
                pool.queue.push_back(r);
                let q = pool.queue.len();
                self.m.pool_queue(q);
                return;
            }
            pool.busy += 1;
            if let Some(Call {
                kind: Kind::Caller {
                    has_worker, since, ..
                },
                ..
            }) = self.calls.get_mut(r)
            {
                *has_worker = true;
                *since = self.now;
            }
        }
        self.caller_attempt(r);
    }

    fn caller_attempt(&mut self, r: Ref) {
        let now = self.now;
        let Some(c) = self.calls.get_mut(r) else {
            return;
        };
        let Kind::Caller { layer, .. } = c.kind else {
            return;
        };
        let l = &self.v.layers[layer as usize];
        c.attempt += 1;
        let attempt = c.attempt;
        let deadline = if l.sends_timeout {
            match (l.timeout.map(|t| now + ns(t)), c.deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        } else {
            None
        };
        let req = c.req;
        let timeout = l.timeout;
        let hop = self.after_layer(self.stream_of(req), layer);
        let child = self.alloc(hop, Parent::Call(r), req, deadline);
        if let Some(c) = self.calls.get_mut(r) {
            c.child = Some(child);
        }
        if let Some(t) = timeout {
            self.schedule_lane(layer as usize, now + ns(t), Ev::Timeout(r, attempt));
        }
        self.begin(child);
    }

    fn caller_reply(&mut self, r: Ref, reply: Reply) {
        let Some(c) = self.calls.get_mut(r) else {
            return;
        };
        c.child = None;
        let Kind::Caller { layer, .. } = c.kind else {
            return;
        };
        let attempt = c.attempt;
        let l = &self.v.layers[layer as usize];
        match l.next(attempt, reply, &mut self.rng) {
            Next::Done(answer) => self.finish(r, answer),
            Next::RetryIn(wait) => self.schedule(self.now + ns(wait), Ev::Step(r)),
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
    pub(crate) fn abandon(&mut self, r: Ref) {
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
    pub(crate) fn finish(&mut self, r: Ref, reply: Reply) {
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

    /// Gives back what a finished or cancelled call held.
    fn release(&mut self, c: &Call) {
        if let Kind::Caller {
            layer,
            has_worker: true,
            since,
        } = c.kind
        {
            let stream = self.stream_of(c.req);
            self.m.held_worker(stream, since, self.now);
            let pool = &mut self.pools[layer as usize];
            pool.busy -= 1;
            while let Some(next) = self.pools[layer as usize].queue.pop_front() {
                if self.calls.get(next).is_some() {
                    self.pools[layer as usize].busy += 1;
                    if let Some(Call {
                        kind:
                            Kind::Caller {
                                has_worker, since, ..
                            },
                        ..
                    }) = self.calls.get_mut(next)
                    {
                        *has_worker = true;
                        *since = self.now;
                    }
                    self.caller_attempt(next);
                    break;
                }
            }
        }
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

    // ------------------------------------------------------------ provider jobs

    pub(crate) fn job_begin(&mut self, r: Ref, provider: u16, model: &str) {
        let Some(c) = self.calls.get(r) else { return };
        let req = c.req;
        self.reqs[req as usize].attempts += 1;
        let stream = self.reqs[req as usize].stream;
        let tokens = self.sc.streams[stream as usize].tokens;
        let p = provider as usize;
        let adm = self.providers[p].arrive(
            &self.sc.providers[p],
            self.now,
            model,
            tokens,
            r,
            &mut self.rng,
        );
        self.m.upstream(stream, self.now, &adm);
        let reserved = !matches!(adm, Admission::Limited { .. });
        let (reply, holds, after) = match adm {
            Admission::Limited { retry_after, after } => (
                Reply::Status {
                    status: 429,
                    retry_after: Some(retry_after),
                    no_retry: false,
                },
                false,
                Some(after),
            ),
            Admission::Answer {
                status,
                retry_after,
                after,
            } => (
                Reply::Status {
                    status,
                    retry_after,
                    no_retry: false,
                },
                false,
                Some(after),
            ),
            Admission::Serve(s) => (
                Reply::Status {
                    status: s.status,
                    retry_after: s.retry_after,
                    no_retry: false,
                },
                true,
                Some(s.after),
            ),
            Admission::Queued => (Reply::status(200), true, None),
        };
        if let Some(Call {
            kind:
                Kind::Job {
                    reply: rp,
                    holds_worker,
                    reserved: rs,
                    ..
                },
            ..
        }) = self.calls.get_mut(r)
        {
            *rp = reply;
            *holds_worker = holds;
            *rs = reserved;
        }
        match after {
            Some(after) if after == self.sc.providers[p].reject_latency => {
                let lane = self.v.layers.len() + p;
                self.schedule_lane(lane, self.now + ns(after), Ev::Done(r));
            }
            Some(after) => self.schedule(self.now + ns(after), Ev::Done(r)),
            None => {}
        }
    }

    fn done(&mut self, r: Ref) {
        let Some(Call {
            req,
            parent,
            kind:
                Kind::Job {
                    provider,
                    reply,
                    holds_worker,
                    reserved,
                },
            ..
        }) = self.calls.get(r)
        else {
            return;
        };
        let (p, reply, holds, reserved) = (*provider as usize, *reply, *holds_worker, *reserved);
        let (req, parent) = (*req, *parent);
        // The answer settles the tokens its request reserved, and its head
        // reports what is left of each meter to whoever still reads it.
        let tokens = self.sc.streams[self.stream_of(req) as usize].tokens;
        let m = &self.sc.providers[p];
        if reserved {
            self.providers[p].settle(m, self.now, tokens, reply.is_success());
        }
        if let (Parent::Call(caller), true) = (parent, self.levee.is_some()) {
            let reported = self.providers[p].remaining(m, self.now);
            self.levee_answered(caller, r, &reported, tokens, reply.is_success());
        }
        if holds {
            if let Some(next) = self.providers[p].finish() {
                self.serve_queued(next, p);
            }
        }
        self.finish(r, reply);
    }

    /// A queued job gets the worker that just came free.
    fn serve_queued(&mut self, r: Ref, p: usize) {
        let Some(c) = self.calls.get_mut(r) else {
            return;
        };
        let model = &self.sc.streams[self.reqs[c.req as usize].stream as usize].model;
        let s = serve(&self.sc.providers[p], self.now, model, &mut self.rng);
        if let Kind::Job { reply, .. } = &mut c.kind {
            *reply = Reply::Status {
                status: s.status,
                retry_after: s.retry_after,
                no_retry: false,
            };
        }
        self.schedule(self.now + ns(s.after), Ev::Done(r));
    }
}
