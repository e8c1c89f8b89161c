//! Where logical requests come from: a constant rate, a Poisson process, a CSV
//! trace of `t_seconds,rate` (piecewise constant), or a burst (a backlog that
//! lands at once).

use crate::error::SimError;
use rand::Rng;
use std::path::Path;
use std::time::Duration;

/// How arrivals are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    /// Evenly, `1/rate` apart.
    Constant,
    /// Exponentially distributed gaps.
    Poisson,
}

/// The rate over time.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// Piecewise constant: from each time on, this many per second.
    Rate(Vec<(Duration, f64)>),
    /// `count` requests at once.
    Burst { count: u64, at: Duration },
}

/// One stream of logical requests (an endpoint, a model).
#[derive(Clone, Debug)]
pub struct Stream {
    pub name: String,
    pub shape: Shape,
    pub process: Process,
    pub from: Duration,
    pub to: Duration,
    pub model: String,
    pub path: String,
    /// Index of the simulated provider a gateway-less stack sends to.
    pub provider: usize,
    /// The caller Levee knows the stream's requests by (its key's name, or
    /// `x-levee-caller`): its share and priority are the config's `callers:`.
    pub caller: Option<String>,
    /// Each request's tokens.
    pub tokens: Tokens,
}

/// A request's tokens: its input, the `max_tokens` it asks for (what Levee
/// and the provider reserve when it is sent), and the output its answer
/// reports using.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u32,
    pub max: u32,
    pub output: u32,
}

impl Stream {
    /// The rate (per second) at `t`.
    pub fn rate_at(&self, t: Duration) -> f64 {
        match &self.shape {
            Shape::Rate(steps) => steps
                .iter()
                .take_while(|(from, _)| *from <= t)
                .last()
                .map(|(_, r)| *r)
                .unwrap_or(0.0),
            Shape::Burst { .. } => 0.0,
        }
    }

    /// The first arrival time, if any.
    pub fn first<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<Duration> {
        match &self.shape {
            Shape::Burst { count, at } => {
                (*count > 0 && *at >= self.from && *at < self.to).then_some(*at)
            }
            Shape::Rate(_) => self.next_after(self.from, true, rng),
        }
    }

    /// The arrival after one at `t` (`start`: `t` itself may be an arrival time
    /// for a constant process starting there).
    pub fn next_after<R: Rng + ?Sized>(
        &self,
        mut t: Duration,
        mut start: bool,
        rng: &mut R,
    ) -> Option<Duration> {
        let Shape::Rate(steps) = &self.shape else {
            return None;
        };
        loop {
            if t >= self.to {
                return None;
            }
            let rate = self.rate_at(t);
            let boundary = steps
                .iter()
                .map(|(from, _)| *from)
                .find(|from| *from > t)
                .unwrap_or(Duration::MAX)
                .min(self.to);
            if rate <= 0.0 {
                t = boundary;
                start = true;
                continue;
            }
            let gap = match self.process {
                Process::Constant if start => Duration::ZERO,
                Process::Constant => secs(1.0 / rate),
                Process::Poisson => {
                    let u: f64 = 1.0 - rng.gen::<f64>();
                    secs(-u.ln() / rate)
                }
            };
            let next = t.saturating_add(gap);
            if next < boundary {
                return Some(next);
            }
            // The rate changes before the next arrival: memoryless, so restart
            // there (a constant process starts its new spacing at the step).
            t = boundary;
            start = true;
        }
    }
}

/// Seconds as a duration, saturating (a vanishing rate means "never").
fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

/// Reads a `t_seconds,rate` CSV (a header line is allowed; `#` comments too).
pub fn read_trace(path: &Path) -> Result<Vec<(Duration, f64)>, SimError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SimError::Trace {
        path: shown.clone(),
        line: 0,
        message: format!("cannot read it ({e}); the path is relative to the scenario file"),
    })?;
    let mut steps: Vec<(Duration, f64)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let err = |message: &str| SimError::Trace {
            path: shown.clone(),
            line: i + 1,
            message: message.to_string(),
        };
        let mut cols = l.split(',').map(str::trim);
        let (Some(a), Some(b), None) = (cols.next(), cols.next(), cols.next()) else {
            return Err(err("write two columns: `t_seconds,rate`"));
        };
        let (Ok(t), Ok(r)) = (a.parse::<f64>(), b.parse::<f64>()) else {
            if steps.is_empty() && a.parse::<f64>().is_err() {
                continue; // a header
            }
            return Err(err("both columns must be numbers: `t_seconds,rate`"));
        };
        if !t.is_finite() || t < 0.0 || !r.is_finite() || r < 0.0 {
            return Err(err("times and rates must be non-negative numbers"));
        }
        let t = secs(t);
        if steps.last().is_some_and(|(prev, _)| *prev >= t) {
            return Err(err("times must increase from one row to the next"));
        }
        steps.push((t, r));
    }
    if steps.is_empty() {
        return Err(SimError::Trace {
            path: shown,
            line: 0,
            message: "no rows: write `t_seconds,rate` lines".into(),
        });
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn stream(shape: Shape, process: Process) -> Stream {
        Stream {
            name: "s".into(),
            shape,
            process,
            from: Duration::ZERO,
            to: Duration::from_secs(10),
            model: "m".into(),
            path: "/".into(),
            provider: 0,
            caller: None,
            tokens: Tokens::default(),
        }
    }

    fn count(s: &Stream) -> usize {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut n = 0;
        let mut t = s.first(&mut rng);
        while let Some(x) = t {
            n += 1;
            t = s.next_after(x, false, &mut rng);
        }
        n
    }

    #[test]
    fn constant_and_poisson_deliver_the_rate() {
        let steps = vec![(Duration::ZERO, 100.0)];
        assert_eq!(
            count(&stream(Shape::Rate(steps.clone()), Process::Constant)),
            1000
        );
        let n = count(&stream(Shape::Rate(steps), Process::Poisson));
        assert!((900..1100).contains(&n), "{n}");
    }

    #[test]
    fn a_trace_changes_the_rate_at_its_steps() {
        let steps = vec![
            (Duration::ZERO, 10.0),
            (Duration::from_secs(5), 0.0),
            (Duration::from_secs(8), 50.0),
        ];
        assert_eq!(
            count(&stream(Shape::Rate(steps), Process::Constant)),
            50 + 100
        );
    }
}
