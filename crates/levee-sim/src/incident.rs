//! Baseline, peak and recovery: the three numbers an incident report gives,
//! defined once for `levee simulate` and `levee drill` so that the simulator's
//! prediction and the live drill's measurement can be compared at all.
//!
//! Both hand in per-step counts (the simulator its buckets, the drill 100 ms
//! steps of the mock's request count and of its callers' answers):
//! - *baseline*: upstream requests/s over `[min(f0/5, 30 s), f0)` before the
//!   first fault starts at `f0` (over `[min(end/5, 30 s), end)` without one);
//! - *peak*: the busiest one-second window ending after the fault starts
//!   (anywhere, without a fault) and before the load stops, in requests/s;
//! - *recovery*: whole seconds from the end of the last fault window to the
//!   first one-second window from which every window until the load stops is
//!   healthy — upstream within max(10 %, 4 √n, 2) of the baseline and the
//!   share answered successfully within 5 points of the baseline's. `None`
//!   when the last window is still unhealthy, or no fault window ends.
//!
//! Beside them, both reports give the peak's amplification
//! ([`Numbers::amplification`]) and the mean upstream attempts per request
//! ([`mean_attempts`]).

/// `x` rounded to `places` decimals, as both reports print their numbers.
pub fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

/// `k1 v1, k2 v2` (with `kv` between key and value, `sep` between pairs):
/// a count per kind on one report line.
pub fn listing<K: std::fmt::Display, V: std::fmt::Display>(
    pairs: impl IntoIterator<Item = (K, V)>,
    kv: &str,
    sep: &str,
) -> String {
    pairs
        .into_iter()
        .map(|(k, v)| format!("{k}{kv}{v}"))
        .collect::<Vec<_>>()
        .join(sep)
}

/// Upstream attempts per request on average, from how many requests made
/// each number of attempts (`(attempts, requests)` pairs); 0 when no
/// request was counted.
pub fn mean_attempts(histogram: impl IntoIterator<Item = (u64, u64)>) -> f64 {
    let (requests, attempts) = histogram
        .into_iter()
        .fold((0u64, 0u64), |(n, t), (a, c)| (n + c, t + a * c));
    if requests == 0 {
        0.0
    } else {
        attempts as f64 / requests as f64
    }
}

/// One run, in equal steps from time 0.
#[derive(Clone, Copy, Debug)]
pub struct Steps<'a> {
    /// Seconds per step.
    pub step: f64,
    /// Upstream (provider) requests in each step.
    pub upstream: &'a [f64],
    /// Requests answered in each step, and how many of them successfully.
    pub completed: &'a [f64],
    pub succeeded: &'a [f64],
    /// When the load stops, in seconds.
    pub end: f64,
}

/// The three numbers, unrounded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Numbers {
    pub baseline: f64,
    pub peak: f64,
    pub recovery: Option<f64>,
}

impl Numbers {
    /// The peak over the baseline, unrounded; 0 without a baseline.
    pub fn amplification(&self) -> f64 {
        if self.baseline > 0.0 {
            self.peak / self.baseline
        } else {
            0.0
        }
    }
}

impl Steps<'_> {
    /// Steps whose whole span lies in `[a, b)` seconds.
    fn range(&self, a: f64, b: f64) -> std::ops::Range<usize> {
        let n = self.upstream.len();
        let lo = (((a / self.step) - 1e-9).ceil().max(0.0) as usize).min(n);
        let hi = (((b / self.step) + 1e-9).floor().max(0.0) as usize).min(n);
        lo..hi.max(lo)
    }

    fn sum(v: &[f64], r: std::ops::Range<usize>) -> f64 {
        v.get(r).map_or(0.0, |s| s.iter().sum())
    }

    /// Upstream count, answers and successes in `[a, b)`.
    fn window(&self, a: f64, b: f64) -> (f64, f64, f64) {
        let r = self.range(a, b);
        (
            Self::sum(self.upstream, r.clone()),
            Self::sum(self.completed, r.clone()),
            Self::sum(self.succeeded, r),
        )
    }
}

/// The report's numbers for a run with the given fault window (seconds).
/// `fallback_baseline` is used when less than 0.8 s precedes the fault.
pub fn numbers(s: &Steps<'_>, fault: Option<(f64, f64)>, fallback_baseline: f64) -> Numbers {
    let (b0, b1) = match fault {
        Some((f0, _)) => ((f0 / 5.0).min(30.0), f0),
        None => ((s.end / 5.0).min(30.0), s.end),
    };
    let (base_up, base_done, base_ok) = s.window(b0, b1);
    let base_span = s.range(b0, b1).len() as f64 * s.step;
    let baseline = if base_span >= 0.8 - 1e-9 {
        base_up / base_span
    } else {
        fallback_baseline
    };
    let base_success = if base_done == 0.0 {
        1.0
    } else {
        base_ok / base_done
    };

    let per_window = ((1.0 / s.step).round() as usize).max(1);
    let from = fault.map_or(f64::NEG_INFINITY, |(f0, _)| f0);
    let last = (((s.end / s.step) + 1e-9).floor() as usize).min(s.upstream.len());
    let peak = (per_window..=last)
        .filter(|&e| e as f64 * s.step > from + 1e-9)
        .map(|e| Steps::sum(s.upstream, e - per_window..e))
        .fold(0.0f64, f64::max)
        / (per_window as f64 * s.step);

    let recovery = fault.and_then(|(_, f1)| {
        let windows = ((s.end - f1) + 1e-9).floor().max(0.0) as usize;
        if windows == 0 {
            return None;
        }
        let tol = (0.1 * baseline).max(4.0 * baseline.sqrt()).max(2.0);
        let healthy = |k: usize| {
            let a = f1 + k as f64;
            let (up, done, ok) = s.window(a, a + 1.0);
            let ok_share = done == 0.0 || ok / done >= base_success - 0.05;
            (up - baseline).abs() <= tol && ok_share
        };
        match (0..windows).rev().find(|&k| !healthy(k)) {
            None => Some(0.0),
            Some(k) if k + 1 < windows => Some((k + 1) as f64),
            Some(_) => None,
        }
    });
    Numbers {
        baseline,
        peak,
        recovery,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(step: f64, up: Vec<f64>) -> Numbers {
        let ok: Vec<f64> = up.clone();
        let s = Steps {
            step,
            upstream: &up,
            completed: &ok,
            succeeded: &ok,
            end: up.len() as f64 * step,
        };
        numbers(&s, Some((10.0, 20.0)), 0.0)
    }

    #[test]
    fn the_same_run_gives_the_same_numbers_at_any_step() {
        // 100/s, 300/s during [10, 22), back to 100/s two seconds after the fault.
        let rate = |t: f64| {
            if (10.0..22.0).contains(&t) {
                300.0
            } else {
                100.0
            }
        };
        let coarse: Vec<f64> = (0..40).map(|i| rate(i as f64)).collect();
        let fine: Vec<f64> = (0..400).map(|i| rate(i as f64 / 10.0) / 10.0).collect();
        let (a, b) = (run(1.0, coarse), run(0.1, fine));
        for n in [a, b] {
            assert!((n.baseline - 100.0).abs() < 1e-6, "{n:?}");
            assert!((n.peak - 300.0).abs() < 1e-6, "{n:?}");
            assert_eq!(n.recovery, Some(2.0), "{n:?}");
        }
    }
}
