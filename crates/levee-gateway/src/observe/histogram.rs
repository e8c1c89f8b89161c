//! A histogram each thread records into without a lock another thread
//! takes: prometheus-client's takes a mutex per observation, and a request
//! makes about five, all on cache lines every worker writes. Here each
//! thread adds to a shard of its own (its counts and its sum, 128 bytes
//! or more away from any other shard's), and a scrape adds the shards up.
//! A shard one thread owns is written with plain loads and stores: an
//! atomic read-modify-write costs ~8 ns of CPU where a store costs well
//! under one, and two an observation were ten a request. The threads past
//! the first `SHARDS - 1` share the last shard, with atomic adds.
//!
//! The count is the sum of the bucket counts, so a scrape never shows a
//! `_count` that disagrees with the `+Inf` bucket; `_sum` may trail the
//! counts by an observation being recorded. Encoded exactly as
//! prometheus-client's `Histogram` (the same encoder call).

use crate::observe::shard::{this_thread, SHARDS};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Words between the starts of two shards at the least: 128 bytes, so
/// two shards never share a cache line (nor an adjacent-line prefetch).
const SPACING: usize = 16;

/// A classic Prometheus histogram over fixed bucket bounds.
#[derive(Clone, Debug)]
pub struct Histogram {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The finite bounds, ascending as given, then `+Inf`.
    bounds: Box<[f64]>,
    /// Words from one shard's start to the next's.
    stride: usize,
    /// Per shard: the sum's bits, then a count per bound.
    cells: Box<[AtomicU64]>,
}

impl Histogram {
    /// A histogram with `buckets` as its upper bounds (non-finite ones
    /// dropped: the `+Inf` bucket is always there), as prometheus-client's.
    pub fn new(buckets: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Box<[f64]> = buckets
            .into_iter()
            .filter(|b| b.is_finite())
            .chain(std::iter::once(f64::INFINITY))
            .collect();
        let stride = (1 + bounds.len()).div_ceil(SPACING) * SPACING;
        let cells = (0..stride * SHARDS).map(|_| AtomicU64::new(0)).collect();
        Histogram {
            inner: Arc::new(Inner {
                bounds,
                stride,
                cells,
            }),
        }
    }

    /// Records `v` in the first bucket whose bound is at least `v` (`NaN`:
    /// the `+Inf` bucket), on this thread's shard.
    pub fn observe(&self, v: f64) {
        let inner = &*self.inner;
        let last = inner.bounds.len() - 1;
        let bucket = inner.bounds.iter().position(|b| v <= *b).unwrap_or(last);
        let (shard, owned) = this_thread();
        let base = shard * inner.stride;
        let count = &inner.cells[base + 1 + bucket];
        let sum = &inner.cells[base];
        if owned {
            // This thread alone writes here: nothing to lose between the
            // load and the store, and a scrape reads either value whole.
            count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            let bits = sum.load(Ordering::Relaxed);
            sum.store((f64::from_bits(bits) + v).to_bits(), Ordering::Relaxed);
            return;
        }
        count.fetch_add(1, Ordering::Relaxed);
        let mut bits = sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(bits) + v).to_bits();
            match sum.compare_exchange_weak(bits, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => bits = now,
            }
        }
    }

    /// The sum, the count and each bucket's own count, over every shard.
    fn totals(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let inner = &*self.inner;
        let mut sum = 0.0;
        let mut buckets: Vec<(f64, u64)> = inner.bounds.iter().map(|b| (*b, 0)).collect();
        for shard in inner.cells.chunks(inner.stride) {
            sum += f64::from_bits(shard[0].load(Ordering::Relaxed));
            for (b, c) in buckets.iter_mut().zip(&shard[1..]) {
                b.1 += c.load(Ordering::Relaxed);
            }
        }
        let count = buckets.iter().map(|b| b.1).sum();
        (sum, count, buckets)
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.totals();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    fn text(name: &str, h: impl EncodeMetric + Send + Sync + std::fmt::Debug + 'static) -> String {
        let mut r = Registry::default();
        r.register(name, "help", h);
        let mut out = String::new();
        encode(&mut out, &r).expect("encode");
        out
    }

    #[test]
    fn it_reads_as_prometheus_clients_own_with_threads_recording_apart() {
        let bounds = [0.005, 0.01, 0.5, 1.0, 10.0];
        let ours = Histogram::new(bounds);
        let theirs = prometheus_client::metrics::histogram::Histogram::new(bounds);
        // Binary fractions: every sum exact, whatever order threads add in.
        let values = [0.0, 0.00390625, 0.0078125, 0.5, 0.75, 3.0, 10.0, 11.0, -1.0];
        std::thread::scope(|s| {
            for _ in 0..20 {
                let (ours, theirs) = (&ours, &theirs);
                s.spawn(move || {
                    for v in values {
                        ours.observe(v);
                        theirs.observe(v);
                    }
                });
            }
        });
        assert_eq!(text("x", ours.clone()), text("x", theirs));
        let (sum, count, buckets) = ours.totals();
        assert_eq!(count, 20 * 9);
        assert_eq!(sum, 20.0 * 24.26171875);
        assert_eq!(buckets.last().map(|b| b.0), Some(f64::INFINITY));
    }

    #[test]
    fn nan_and_infinite_bounds_go_where_prometheus_clients_do() {
        let bounds = [1.0, f64::INFINITY, f64::NAN, 2.0];
        let ours = Histogram::new(bounds);
        let theirs = prometheus_client::metrics::histogram::Histogram::new(bounds);
        for v in [f64::NAN, 2.0, 5.0] {
            ours.observe(v);
            theirs.observe(v);
        }
        assert_eq!(text("y", ours), text("y", theirs));
    }

    #[test]
    fn shards_are_a_cache_line_pair_apart() {
        let h = Histogram::new([1.0; 20]);
        assert!(h.inner.stride > 21, "the sum and 21 counts");
        assert_eq!(h.inner.stride % SPACING, 0);
        assert_eq!(h.inner.cells.len(), h.inner.stride * SHARDS);
    }
}
