//! A caller's spending rules as arithmetic: the UTC calendar period a
//! budget runs over (day, ISO week from Monday, month), the sliding minute
//! that request and token limits count over, and the verdict on a request
//! given what the caller has spent and sent. Pure: the wall clock comes in
//! as unix milliseconds, and the counts from whoever keeps them (one
//! process, or every replica through a shared store).

const MINUTE_MS: u64 = 60_000;
const DAY_MS: u64 = 86_400_000;

/// How long a budget runs before it starts again, in UTC calendar time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Period {
    Day,
    /// An ISO week: Monday 00:00 UTC to the next Monday.
    Week,
    Month,
}

impl Period {
    /// The word a config and a message use.
    pub fn label(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    /// When the period holding `unix_ms` began.
    pub fn start(self, unix_ms: u64) -> u64 {
        let day = unix_ms / DAY_MS;
        match self {
            Period::Day => day * DAY_MS,
            // 1970-01-01 was a Thursday: Monday is three days on.
            Period::Week => (day - (day + 3) % 7) * DAY_MS,
            Period::Month => {
                let (y, m, _) = civil(day);
                days_from_civil(y, m, 1) * DAY_MS
            }
        }
    }

    /// When the period holding `unix_ms` ends (the next one begins).
    pub fn end(self, unix_ms: u64) -> u64 {
        let start = self.start(unix_ms);
        match self {
            Period::Day => start + DAY_MS,
            Period::Week => start + 7 * DAY_MS,
            Period::Month => {
                let (y, m, _) = civil(start / DAY_MS);
                let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                days_from_civil(y, m, 1) * DAY_MS
            }
        }
    }
}

/// Year, month (1–12) and day (1–31) of a day counted from 1970-01-01.
fn civil(day: u64) -> (u64, u64, u64) {
    let (y, m, d) = crate::civil::civil_from_days(i64::try_from(day).unwrap_or(i64::MAX));
    let u = |x: i64| u64::try_from(x).unwrap_or(0);
    (u(y), u(m), u(d))
}

/// The day, counted from 1970-01-01, of a date from 1970 on.
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let i = |x: u64| i64::try_from(x).unwrap_or(i64::MAX);
    u64::try_from(crate::civil::days_from_civil(i(y), i(m), i(d))).unwrap_or(0)
}

/// `unix_ms` as an RFC 3339 UTC time to the second, like
/// `2026-12-07T00:00:00Z`.
pub fn utc_text(unix_ms: u64) -> String {
    crate::civil::rfc3339(i64::try_from(unix_ms / 1000).unwrap_or(i64::MAX))
}

/// The minute (counted from the epoch) that holds `unix_ms`: a limit's
/// counts are kept per minute.
pub fn minute(unix_ms: u64) -> u64 {
    unix_ms / MINUTE_MS
}

/// How much of the last 60 s a pair of per-minute counts holds: the
/// previous minute's weighted by how much of it is still inside the window,
/// plus the current minute's (the sliding-window estimate; a fixed window
/// lets a caller send twice its limit across a minute's edge).
pub fn sliding(previous: u64, current: u64, unix_ms: u64) -> f64 {
    let into = (unix_ms % MINUTE_MS) as f64 / MINUTE_MS as f64;
    previous as f64 * (1.0 - into) + current as f64
}

/// How long until the sliding estimate of `(previous, current)` falls
/// under `limit`, in milliseconds (0: it is under).
pub fn wait_under(previous: u64, current: u64, limit: u64, unix_ms: u64) -> u64 {
    let limit = limit as f64;
    let into = (unix_ms % MINUTE_MS) as f64 / MINUTE_MS as f64;
    if sliding(previous, current, unix_ms) < limit {
        return 0;
    }
    let current_f = current as f64;
    if current_f < limit && previous > 0 {
        // Within this minute, as the previous one slides out.
        let over = previous as f64 * (1.0 - into) + current_f - limit;
        let frac = over / previous as f64;
        return (frac * MINUTE_MS as f64).ceil() as u64 + 1;
    }
    // The rest of this minute, then as this one slides out.
    let rest = (1.0 - into) * MINUTE_MS as f64;
    let frac = if current_f > 0.0 {
        (1.0 - limit / current_f).max(0.0)
    } else {
        0.0
    };
    (rest + frac * MINUTE_MS as f64).ceil() as u64 + 1
}

/// A caller's spending rules (any may be absent).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rules {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    /// US dollars per period.
    pub budget: Option<(f64, Period)>,
}

/// What a caller has done lately, as the books (local or shared) say.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Seen {
    /// US dollars spent in the budget's current period.
    pub spent_usd: f64,
    /// Requests admitted in the previous and the current minute.
    pub requests: (u64, u64),
    /// Tokens used in the previous and the current minute.
    pub tokens: (u64, u64),
}

/// The verdict on one request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    Allowed,
    /// The budget is spent: refused until `resets_at` (unix ms).
    OverBudget {
        spent_usd: f64,
        budget_usd: f64,
        period: Period,
        resets_at: u64,
    },
    /// Requests or tokens in the last minute are at the limit: refused for
    /// `wait_ms`.
    OverLimit {
        tokens: bool,
        limit: u64,
        wait_ms: u64,
    },
}

/// Judges a request by `rules` against what the caller has `seen` at
/// `unix_ms`. A budget is spent once the spend reaches it: the call that
/// crosses it is answered (its cost is known only after it), the next is
/// refused.
pub fn judge(rules: &Rules, seen: &Seen, unix_ms: u64) -> Verdict {
    if let Some((budget_usd, period)) = rules.budget {
        if seen.spent_usd >= budget_usd {
            return Verdict::OverBudget {
                spent_usd: seen.spent_usd,
                budget_usd,
                period,
                resets_at: period.end(unix_ms),
            };
        }
    }
    let limits = [
        (false, rules.requests_per_minute, seen.requests),
        (true, rules.tokens_per_minute, seen.tokens),
    ];
    for (tokens, limit, (prev, cur)) in limits {
        if let Some(limit) = limit {
            let wait_ms = wait_under(prev, cur, limit, unix_ms);
            if wait_ms > 0 {
                return Verdict::OverLimit {
                    tokens,
                    limit,
                    wait_ms,
                };
            }
        }
    }
    Verdict::Allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-06 (a Sunday) 15:30:00 UTC.
    const SUNDAY: u64 = 1_796_571_000_000;

    #[test]
    fn periods_are_utc_calendar_days_iso_weeks_and_months() {
        assert_eq!(utc_text(SUNDAY), "2026-12-06T15:30:00Z");
        assert_eq!(utc_text(Period::Day.start(SUNDAY)), "2026-12-06T00:00:00Z");
        assert_eq!(utc_text(Period::Day.end(SUNDAY)), "2026-12-07T00:00:00Z");
        assert_eq!(utc_text(Period::Week.start(SUNDAY)), "2026-11-30T00:00:00Z");
        assert_eq!(utc_text(Period::Week.end(SUNDAY)), "2026-12-07T00:00:00Z");
        assert_eq!(
            utc_text(Period::Month.start(SUNDAY)),
            "2026-12-01T00:00:00Z"
        );
        assert_eq!(utc_text(Period::Month.end(SUNDAY)), "2027-01-01T00:00:00Z");
        // A leap February.
        let feb = Period::Month.start(SUNDAY) + 80 * DAY_MS; // 2027-02-19
        assert_eq!(utc_text(Period::Month.end(feb)), "2027-03-01T00:00:00Z");
        let leap = 1_709_208_000_000; // 2024-02-29 12:00 UTC
        assert_eq!(utc_text(Period::Month.end(leap)), "2024-03-01T00:00:00Z");
        assert_eq!(utc_text(Period::Week.start(leap)), "2024-02-26T00:00:00Z");
    }

    #[test]
    fn the_budget_stops_the_call_after_the_one_that_crosses_it() {
        let rules = Rules {
            budget: Some((0.01, Period::Day)),
            ..Rules::default()
        };
        let mut seen = Seen::default();
        let mut answered = 0;
        for _ in 0..10 {
            if judge(&rules, &seen, SUNDAY) != Verdict::Allowed {
                break;
            }
            answered += 1;
            seen.spent_usd += 0.004;
        }
        // 0.004, 0.008 under; the third crosses to 0.012; the fourth stops.
        assert_eq!(answered, 3);
        let v = judge(&rules, &seen, SUNDAY);
        assert!(
            matches!(v, Verdict::OverBudget { resets_at, .. } if resets_at == Period::Day.end(SUNDAY)),
            "{v:?}"
        );
    }

    #[test]
    fn a_limit_counts_the_sliding_minute_and_says_how_long_to_wait() {
        let rules = Rules {
            requests_per_minute: Some(10),
            ..Rules::default()
        };
        let at = |secs: u64| minute(SUNDAY) * MINUTE_MS + secs * 1000;
        // 9 sent this minute: the tenth goes.
        let seen = Seen {
            requests: (0, 9),
            ..Seen::default()
        };
        assert_eq!(judge(&rules, &seen, at(10)), Verdict::Allowed);
        // 10 sent: wait for the rest of the minute and then some.
        let seen = Seen {
            requests: (0, 10),
            ..Seen::default()
        };
        let Verdict::OverLimit { wait_ms, .. } = judge(&rules, &seen, at(30)) else {
            panic!("not refused");
        };
        assert!((30_000..=30_002).contains(&wait_ms), "{wait_ms}");
        // 10 last minute, half of it still inside the window: 5 + 5 ≥ 10.
        let seen = Seen {
            requests: (10, 5),
            ..Seen::default()
        };
        let Verdict::OverLimit { wait_ms, .. } = judge(&rules, &seen, at(30)) else {
            panic!("not refused");
        };
        // In 1 ms more than 0 s the estimate is just under: 4.99.. + 5.
        assert!(wait_ms <= 2, "{wait_ms}");
        assert!(sliding(10, 5, at(30) + wait_ms) < 10.0);
        let seen = Seen {
            requests: (10, 4),
            ..Seen::default()
        };
        assert_eq!(judge(&rules, &seen, at(30)), Verdict::Allowed);
    }

    #[test]
    fn tokens_per_minute_is_judged_like_requests() {
        let rules = Rules {
            tokens_per_minute: Some(1000),
            ..Rules::default()
        };
        let seen = Seen {
            tokens: (0, 1200),
            ..Seen::default()
        };
        let v = judge(&rules, &seen, SUNDAY);
        assert!(
            matches!(
                v,
                Verdict::OverLimit {
                    tokens: true,
                    limit: 1000,
                    ..
                }
            ),
            "{v:?}"
        );
    }
}
