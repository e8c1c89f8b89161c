//! Spend for people and for scripts: the status page's table of spend
//! today (UTC) by caller with its undelivered share, and
//! `GET /admin/spend?by=caller&since=24h`, JSON for chargeback scripts.
//! Both read the hourly ledger: Redis's (every replica's) when the state
//! store is shared, else this process's. The ledger keeps whole hours:
//! `since` is rounded down to the start of its hour.

use crate::runtime::shared::Shared;
use crate::server::status::esc;
use crate::spend::ledger::{group, By, Group, SeriesNames, HOURS_KEPT};
use http::StatusCode;
use std::fmt::Write;
use std::time::Duration;

const HOUR_MS: u64 = 3_600_000;

/// Where a report's numbers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Redis: every replica's spend.
    Shared,
    /// This process's spend: no shared store is configured.
    Local,
    /// This process's spend: the shared store did not answer.
    LocalFallback,
}

impl Source {
    fn label(self) -> &'static str {
        match self {
            Source::Shared => "shared",
            Source::Local => "local",
            Source::LocalFallback => "local_fallback",
        }
    }
}

/// Every series' totals from the hour `from_hour` to now.
async fn series_since(
    shared: &Shared,
    from_hour: u64,
) -> (Vec<(SeriesNames, crate::spend::ledger::Row)>, Source) {
    let now_hour = shared.clock.calendar_ms() / HOUR_MS;
    if let Some(redis) = &shared.redis {
        if let Some(s) = redis.ledger_since(from_hour, now_hour).await {
            return (s, Source::Shared);
        }
        let local = shared.spend.ledger().since(from_hour);
        return (local, Source::LocalFallback);
    }
    (shared.spend.ledger().since(from_hour), Source::Local)
}

/// `since`: a span back from now (`24h`, `90m`, `7d`; at most 32 days).
fn span(s: &str) -> Option<Duration> {
    let d = match s.strip_suffix('d') {
        Some(days) => Duration::from_secs(days.parse::<u64>().ok()?.checked_mul(86_400)?),
        None => levee_config::parse_duration(s)?,
    };
    (d <= Duration::from_secs(HOURS_KEPT * 3600)).then_some(d)
}

/// Dollars to the micro-dollar, as JSON numbers.
fn usd(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn group_json(by: By, g: &Group) -> serde_json::Value {
    let t = &g.total;
    let share = if t.usd > 0.0 {
        g.undelivered_usd / t.usd
    } else {
        0.0
    };
    serde_json::json!({
        by.label(): g.name,
        "usd": usd(t.usd),
        "delivered_usd": usd(t.usd - g.undelivered_usd),
        "undelivered_usd": usd(g.undelivered_usd),
        "undelivered_share": (share * 1e4).round() / 1e4,
        "input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens,
        "unpriced_tokens": t.unpriced_tokens,
        "charges": t.charges,
        "partial_charges": t.partial,
    })
}

/// `GET /admin/spend`: `by` one of caller, route, provider, model,
/// outcome (default caller); `since` a span like `24h` (default 24h).
pub(crate) async fn report(shared: &Shared, query: Option<&str>) -> (StatusCode, String) {
    let mut by = By::Caller;
    let mut since = Duration::from_secs(86_400);
    for (k, v) in query
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
    {
        match k {
            "by" => match By::parse(v) {
                Some(b) => by = b,
                None => return bad("`by` must be one of caller, route, provider, model, outcome"),
            },
            "since" => match span(v) {
                Some(d) => since = d,
                None => return bad(
                    "`since` must be a span back from now like `24h`, `90m` or `7d`, at most `32d`",
                ),
            },
            _ => {}
        }
    }
    let now = shared.clock.calendar_ms();
    let from_hour = now.saturating_sub(since.as_millis().try_into().unwrap_or(u64::MAX)) / HOUR_MS;
    let (series, source) = series_since(shared, from_hour).await;
    let groups = group(&series, by);
    let mut total = Group {
        name: "total".into(),
        ..Group::default()
    };
    for g in &groups {
        total.total.add(&g.total);
        total.undelivered_usd += g.undelivered_usd;
    }
    let mut total_json = group_json(by, &total);
    if let Some(o) = total_json.as_object_mut() {
        o.remove(by.label());
    }
    let body = serde_json::json!({
        "by": by.label(),
        "since": levee_policy::spend::utc_text(from_hour * HOUR_MS),
        "until": levee_policy::spend::utc_text(now),
        "source": source.label(),
        "currency": "USD",
        "prices_taken": levee_config::prices::PRICES_TAKEN,
        "rows": groups.iter().map(|g| group_json(by, g)).collect::<Vec<_>>(),
        "total": total_json,
    });
    (StatusCode::OK, body.to_string())
}

fn bad(msg: &str) -> (StatusCode, String) {
    let body = serde_json::json!({ "error": msg });
    (StatusCode::BAD_REQUEST, body.to_string())
}

/// The status page's spend today (UTC midnight on) by caller, from this
/// process's ledger.
pub(crate) fn section(shared: &Shared, out: &mut String) {
    let now = shared.clock.calendar_ms();
    let midnight = levee_policy::spend::Period::Day.start(now);
    let groups = group(&shared.spend.ledger().since(midnight / HOUR_MS), By::Caller);
    out.push_str("<h2>Spend today (UTC, this replica)</h2>");
    if groups.is_empty() {
        out.push_str("<p id=\"spend\" class=\"none\">nothing charged yet today</p>");
        return;
    }
    out.push_str(
        "<table id=\"spend\"><tr><th>caller</th><th>spend</th><th>undelivered</th>\
         <th>undelivered share</th><th>tokens in</th><th>tokens out</th><th>unpriced tokens</th></tr>",
    );
    for g in &groups {
        let t = &g.total;
        let share = if t.usd > 0.0 {
            format!("{:.1} %", 100.0 * g.undelivered_usd / t.usd)
        } else {
            "-".to_string()
        };
        // Tokens with no price are not $0: unknown.
        let dollars = |x: f64| {
            if t.usd == 0.0 && t.unpriced_tokens > 0 {
                "unknown".to_string()
            } else {
                format!("${x:.4}")
            }
        };
        let _ = write!(
            out,
            "<tr data-caller=\"{name}\"><td>{name}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{share}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            dollars(t.usd),
            dollars(g.undelivered_usd),
            t.input_tokens,
            t.output_tokens,
            t.unpriced_tokens,
            name = esc(&g.name),
        );
    }
    out.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_spans_up_to_the_kept_hours() {
        assert_eq!(span("24h"), Some(Duration::from_secs(86_400)));
        assert_eq!(span("7d"), Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(span("90m"), Some(Duration::from_secs(5400)));
        assert_eq!(span("33d"), None);
        assert_eq!(span("yesterday"), None);
    }
}
