//! What a run counts while it runs: upstream attempts and answered requests
//! per time bucket, per-stream totals inside the measurement window (the fault
//! window, or the whole run), and each logical request's attempt count.

use crate::provider::Admission;
use crate::scenario::{Scenario, Variant};
use crate::virtual_time::ns;
use std::time::Duration;

const HIST_CAP: usize = 1024;

#[derive(Clone, Debug, Default)]
pub(crate) struct StreamStats {
    pub requests: u64,
    pub successes: u64,
    pub unfinished: u64,
    pub upstream_total: u64,
    pub upstream_window: u64,
    pub rate_limited_window: u64,
    /// Levee's `rate_limited` answers (the allowance refused the request).
    pub levee_rate_limited_window: u64,
    pub held_ns_window: u128,
    /// Arrival to answer of its answered requests (nanoseconds).
    pub latencies: Vec<u64>,
}

#[derive(Debug)]
pub(crate) struct Metrics {
    /// A time bucket's width (the scenario's `resolution`), nanoseconds.
    pub res_ns: u64,
    /// Upstream attempts sent, per bucket.
    pub upstream: Vec<u32>,
    /// Logical requests answered per bucket, and how many of them successfully.
    pub completed: Vec<u32>,
    pub succeeded: Vec<u32>,
    /// Per arrival stream, its totals inside the measurement window.
    pub streams: Vec<StreamStats>,
    /// `hist[n]`: logical requests that made n upstream attempts (the last
    /// slot holds every count from `HIST_CAP` on).
    pub hist: Vec<u64>,
    /// The most attempts one logical request made.
    pub attempts_max: u32,
    /// Events the engine processed (its cost).
    pub events: u64,
    /// The longest queue the providers and the caller pool reached.
    pub provider_peak_queue: usize,
    pub pool_peak_queue: usize,
    /// Whether a caller layer has a bounded worker pool.
    pub has_pool: bool,
    /// [from, to) in nanoseconds.
    pub window: (u64, u64),
    /// How long each answered request took, arrival to answer (nanoseconds).
    pub latencies: Vec<u64>,
    /// Each stream's answer's cost (US dollars).
    answer_usd: Vec<f64>,
    /// What the providers billed: every answer they generated, read or not.
    pub billed_usd: f64,
    /// Of it, the answers that reached a caller.
    pub delivered_usd: f64,
}

impl Metrics {
    pub(crate) fn new(sc: &Scenario, v: &Variant) -> Self {
        let res_ns = ns(sc.resolution).max(1);
        let buckets = (ns(sc.duration + sc.drain) / res_ns + 1) as usize;
        let window = match sc.fault_span() {
            Some((a, b)) => (ns(a.min(sc.duration)), ns(b.min(sc.duration))),
            None => (0, ns(sc.duration)),
        };
        let window = if window.1 > window.0 {
            window
        } else {
            (0, ns(sc.duration))
        };
        Metrics {
            res_ns,
            upstream: vec![0; buckets],
            completed: vec![0; buckets],
            succeeded: vec![0; buckets],
            streams: vec![StreamStats::default(); sc.streams.len()],
            hist: vec![0; HIST_CAP + 1],
            attempts_max: 0,
            events: 0,
            provider_peak_queue: 0,
            pool_peak_queue: 0,
            has_pool: v.layers.iter().any(|l| l.workers.is_some()),
            window,
            latencies: Vec::new(),
            answer_usd: sc.answer_usd.clone(),
            billed_usd: 0.0,
            delivered_usd: 0.0,
        }
    }

    fn bucket(&self, now: u64) -> usize {
        ((now / self.res_ns) as usize).min(self.upstream.len() - 1)
    }

    fn in_window(&self, now: u64) -> bool {
        now >= self.window.0 && now < self.window.1
    }

    pub(crate) fn arrival(&mut self, stream: u16, _now: u64) {
        self.streams[stream as usize].requests += 1;
    }

    pub(crate) fn upstream(&mut self, stream: u16, now: u64, adm: &Admission) {
        let b = self.bucket(now);
        self.upstream[b] += 1;
        let w = self.in_window(now);
        let s = &mut self.streams[stream as usize];
        s.upstream_total += 1;
        if w {
            s.upstream_window += 1;
            if matches!(
                adm,
                Admission::Limited { .. } | Admission::Answer { status: 429, .. }
            ) {
                s.rate_limited_window += 1;
            }
        }
    }

    /// Levee answered a request of `stream` with a failure of `reason`.
    pub(crate) fn levee_failed(&mut self, stream: u16, now: u64, reason: &str) {
        if reason == "rate_limited" && self.in_window(now) {
            self.streams[stream as usize].levee_rate_limited_window += 1;
        }
    }

    pub(crate) fn answered(&mut self, stream: u16, now: u64, success: bool, took: u64) {
        let b = self.bucket(now);
        self.completed[b] += 1;
        self.latencies.push(took);
        self.streams[stream as usize].latencies.push(took);
        if success {
            self.succeeded[b] += 1;
            self.streams[stream as usize].successes += 1;
            self.delivered_usd += self.answer_usd.get(stream as usize).copied().unwrap_or(0.0);
        }
    }

    /// A provider generated an answer for `stream` (billed, whoever reads it).
    pub(crate) fn billed(&mut self, stream: u16) {
        self.billed_usd += self.answer_usd.get(stream as usize).copied().unwrap_or(0.0);
    }

    pub(crate) fn unfinished(&mut self, stream: u16) {
        self.streams[stream as usize].unfinished += 1;
    }

    pub(crate) fn attempts_of_request(&mut self, a: u32) {
        self.hist[(a as usize).min(HIST_CAP)] += 1;
        self.attempts_max = self.attempts_max.max(a);
    }

    pub(crate) fn held_worker(&mut self, stream: u16, since: u64, now: u64) {
        let a = since.max(self.window.0);
        let b = now.min(self.window.1);
        if b > a {
            self.streams[stream as usize].held_ns_window += u128::from(b - a);
        }
    }

    pub(crate) fn pool_queue(&mut self, len: usize) {
        self.pool_peak_queue = self.pool_peak_queue.max(len);
    }

    pub(crate) fn window_len(&self) -> Duration {
        Duration::from_nanos(self.window.1 - self.window.0)
    }
}
