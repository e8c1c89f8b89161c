//! The engine's event queue: what happens next, earliest first, and in the
//! order it was set among events due at the same virtual nanosecond.

use crate::slab::Ref;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Clone, Copy, Debug)]
pub(super) enum Ev {
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

/// An event and when it is due.
#[derive(Debug)]
pub(super) struct Sched {
    pub(super) at: u64,
    seq: u64,
    pub(super) ev: Ev,
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

/// A heap of events, and lanes of events that all wait the same time.
#[derive(Debug)]
pub(super) struct Queue {
    heap: BinaryHeap<Sched>,
    /// Lanes of events that all wait the same time, so they come due in the
    /// order they were set and a FIFO keeps them sorted: one per caller layer
    /// for its attempt timeouts (most are stale by then; a heap would sift
    /// them for nothing), then one per provider for its refusals.
    lanes: Vec<VecDeque<Sched>>,
    seq: u64,
}

impl Queue {
    /// An empty queue with `lanes` lanes.
    pub(super) fn new(lanes: usize) -> Self {
        Queue {
            heap: BinaryHeap::with_capacity(1 << 12),
            lanes: (0..lanes).map(|_| VecDeque::new()).collect(),
            seq: 0,
        }
    }

    /// Schedules `ev` at `at` on the heap.
    pub(super) fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Sched {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// Schedules an event on a lane (see `lanes`): `at` must not be earlier
    /// than the lane's last.
    pub(super) fn push_lane(&mut self, lane: usize, at: u64, ev: Ev) {
        self.seq += 1;
        debug_assert!(self.lanes[lane].back().is_none_or(|b| b.at <= at));
        self.lanes[lane].push_back(Sched {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// The next event of all: the heap's or a timeout FIFO's, earliest first.
    pub(super) fn pop(&mut self) -> Option<Sched> {
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
}
