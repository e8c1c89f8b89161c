//! The fixed-size histogram each caller's deadlines and each target's
//! attempt latencies are counted in.

/// A fixed histogram of milliseconds, each value floored to three
/// significant digits (at most 1% low, never high: a deadline read from it
/// is never longer than the callers' real one). Covers 0 ms to 2.8 hours in
/// 4,600 buckets; longer values count as the longest bucket.
#[derive(Clone, Debug)]
pub(super) struct Sketch {
    counts: Box<[u32]>,
    total: u64,
}

const SKETCH_BUCKETS: usize = 1000 + 4 * 900;
const SKETCH_MAX_MS: u64 = 9_999_999;

impl Sketch {
    /// An empty sketch.
    pub(super) fn new() -> Self {
        Sketch {
            counts: vec![0; SKETCH_BUCKETS].into_boxed_slice(),
            total: 0,
        }
    }

    fn index(ms: u64) -> usize {
        let mut m = ms.min(SKETCH_MAX_MS);
        if m < 1000 {
            return usize::try_from(m).unwrap_or(0);
        }
        let mut scale = 0usize;
        while m >= 1000 {
            m /= 10;
            scale += 1;
        }
        1000 + (scale - 1) * 900 + usize::try_from(m - 100).unwrap_or(0)
    }

    fn value(ix: usize) -> u64 {
        if ix < 1000 {
            return ix as u64;
        }
        let (scale, m) = ((ix - 1000) / 900 + 1, (ix - 1000) % 900 + 100);
        m as u64 * 10u64.pow(u32::try_from(scale).unwrap_or(0))
    }

    /// Counts one value.
    pub(super) fn record(&mut self, ms: u64) {
        let c = &mut self.counts[Self::index(ms)];
        *c = c.saturating_add(1);
        self.total += 1;
    }

    /// Values recorded.
    pub(super) fn count(&self) -> u64 {
        self.total
    }

    /// The `q` quantile (0..=1), floored to the bucket; `None` when empty.
    pub(super) fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (ix, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(Self::value(ix));
            }
        }
        Some(SKETCH_MAX_MS)
    }
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sketch_floors_to_three_significant_digits() {
        for (v, want) in [
            (0, 0),
            (999, 999),
            (1000, 1000),
            (1234, 1230),
            (40_000, 40_000),
            (100_000, 100_000),
            (123_456, 123_000),
            (9_999_999, 9_990_000),
            (u64::MAX, 9_990_000),
        ] {
            assert_eq!(Sketch::value(Sketch::index(v)), want, "{v}");
        }
    }

    #[test]
    fn sketch_quantiles() {
        let mut s = Sketch::new();
        assert_eq!(s.quantile(0.5), None);
        for _ in 0..95 {
            s.record(100_000);
        }
        for _ in 0..5 {
            s.record(40_000);
        }
        assert_eq!(s.quantile(0.05), Some(40_000));
        assert_eq!(s.quantile(0.06), Some(100_000));
        assert_eq!(s.quantile(0.5), Some(100_000));
        assert_eq!(s.count(), 100);
    }
}
