//! Caller layers (SDKs, service wrappers, a naive gateway): a call makes
//! attempts on the next hop, each bounded by the layer's timeout, retried
//! as its rule says, and may wait for a worker of the layer's bounded pool.

use super::{Call, Engine, Ev, Kind, Parent};
use crate::layers::{Next, Reply};
use crate::slab::Ref;
use crate::virtual_time::ns;
use std::collections::VecDeque;

/// A caller layer's bounded worker pool: how many are busy, and the calls
/// waiting for one.
#[derive(Debug, Default)]
pub(super) struct Pool {
    busy: u32,
    queue: VecDeque<Ref>,
}

impl Engine<'_> {
    /// A caller layer's call begins: it takes a worker of the layer's pool
    /// (or waits in line for one), then makes its first attempt.
    pub(super) fn caller_begin(&mut self, r: Ref, layer: u8) {
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

    /// The call's next attempt: a call on the next hop, with the layer's
    /// deadline when it sends one, and its timeout set.
    pub(super) fn caller_attempt(&mut self, r: Ref) {
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

    /// An attempt came back (or timed out): the layer answers or retries.
    pub(super) fn caller_reply(&mut self, r: Ref, reply: Reply) {
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

    /// Gives back what a finished or cancelled call held.
    pub(super) fn release(&mut self, c: &Call) {
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
}
