//! What callers spend, and the rules that stop them. Every answer's tokens
//! (and every cut-short attempt's, estimated) are charged here at their
//! price to the caller that asked:
//! - the books of each caller that has rules: its spend this day, week and
//!   month, its requests and tokens in the last two minutes, which
//!   admission judges it by;
//! - the hourly ledger by caller, route, provider, model and outcome, which
//!   the status page and `GET /admin/spend` answer from ([`ledger`]).
//!
//! With `state: { backend: redis }` both are also kept in Redis, so every
//! replica judges a caller by what all of them saw. Without Redis, or while
//! it is down, each replica judges by its own books at 1/N of each budget
//! and limit (N = the live replicas), as provider allowances degrade, and
//! counts the fallback in `levee_state_fallbacks_total{what="spend"}`.
//! No database: the books live as long as the process (and Redis's keys).

pub(crate) mod ledger;

use levee_policy::spend::{minute, Period, Seen};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// The three periods a budget can run over, in the books' order.
pub(crate) const PERIODS: [Period; 3] = [Period::Day, Period::Week, Period::Month];

/// Counts per minute, for the last two minutes.
#[derive(Clone, Copy, Debug, Default)]
struct Minutes {
    minute: u64,
    previous: u64,
    current: u64,
}

impl Minutes {
    /// Moves the window to `m`.
    fn at(&mut self, m: u64) {
        if m == self.minute {
            return;
        }
        self.previous = if m == self.minute + 1 {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.minute = m;
    }

    fn add(&mut self, m: u64, n: u64) {
        self.at(m);
        self.current = self.current.saturating_add(n);
    }

    fn get(mut self, m: u64) -> (u64, u64) {
        self.at(m);
        (self.previous, self.current)
    }
}

/// One caller's books in this process.
#[derive(Clone, Copy, Debug, Default)]
struct CallerBooks {
    /// Dollars spent in the period that began at each start (unix ms), for
    /// each of [`PERIODS`].
    usd: [(u64, f64); 3],
    requests: Minutes,
    tokens: Minutes,
}

/// Every caller's books and the hourly ledger, kept across reloads.
#[derive(Debug, Default)]
pub(crate) struct Books {
    callers: Mutex<HashMap<Box<str>, CallerBooks>>,
    ledger: Mutex<ledger::Ledger>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Books {
    /// What this process has seen of caller `name` at `unix_ms`, its spend
    /// counted over `period`.
    pub(crate) fn seen(&self, name: &str, period: Option<Period>, unix_ms: u64) -> Seen {
        let callers = lock(&self.callers);
        let Some(b) = callers.get(name) else {
            return Seen::default();
        };
        let m = minute(unix_ms);
        let spent_usd = period.map_or(0.0, |p| {
            let i = PERIODS.iter().position(|x| *x == p).unwrap_or(0);
            let (start, usd) = b.usd[i];
            if start == p.start(unix_ms) {
                usd
            } else {
                0.0
            }
        });
        Seen {
            spent_usd,
            requests: b.requests.get(m),
            tokens: b.tokens.get(m),
        }
    }

    /// Caller `name` was admitted a request at `unix_ms`.
    pub(crate) fn count_request(&self, name: &str, unix_ms: u64) {
        self.with(name, |b| b.requests.add(minute(unix_ms), 1));
    }

    /// Caller `name` used `tokens` costing `usd` at `unix_ms`.
    pub(crate) fn charge(&self, name: &str, usd: f64, tokens: u64, unix_ms: u64) {
        self.with(name, |b| {
            for (i, p) in PERIODS.iter().enumerate() {
                let start = p.start(unix_ms);
                if b.usd[i].0 != start {
                    b.usd[i] = (start, 0.0);
                }
                b.usd[i].1 += usd;
            }
            b.tokens.add(minute(unix_ms), tokens);
        });
    }

    /// The hourly ledger, locked.
    pub(crate) fn ledger(&self) -> MutexGuard<'_, ledger::Ledger> {
        lock(&self.ledger)
    }

    fn with(&self, name: &str, f: impl FnOnce(&mut CallerBooks)) {
        let mut callers = lock(&self.callers);
        match callers.get_mut(name) {
            Some(b) => f(b),
            None => {
                let mut b = CallerBooks::default();
                f(&mut b);
                callers.insert(name.into(), b);
            }
        }
    }
}

/// One charge: an answer's tokens (or what a cut-short attempt is
/// estimated to have used) and their cost.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Charge<'a> {
    /// The caller's name when it has rules: its books are kept.
    pub ruled: Option<&'a str>,
    pub series: ledger::SeriesKey,
    pub used: levee_policy::allowance::Cost,
    /// `None`: no known price.
    pub usd: Option<f64>,
    pub partial: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_books_count_per_period_and_per_minute() {
        let books = Books::default();
        let t = 1_796_571_000_000; // 2026-12-06 15:30 UTC
        books.charge("a", 0.5, 100, t);
        books.count_request("a", t);
        books.charge("a", 0.25, 50, t + 61_000);
        let seen = books.seen("a", Some(Period::Day), t + 61_000);
        assert_eq!(seen.spent_usd, 0.75);
        assert_eq!(seen.tokens, (100, 50));
        assert_eq!(seen.requests, (1, 0));
        // The next day starts from nothing; the month goes on.
        let tomorrow = t + 86_400_000;
        assert_eq!(books.seen("a", Some(Period::Day), tomorrow).spent_usd, 0.0);
        assert_eq!(books.seen("a", Some(Period::Month), t).spent_usd, 0.75);
        assert_eq!(books.seen("b", Some(Period::Day), t), Seen::default());
    }
}
