//! The status page (admin `GET /`): one self-contained HTML page for a person
//! during an incident — no scripts, styles or fonts from elsewhere, so it
//! works offline and behind any proxy; it reloads itself every
//! [`REFRESH_SECS`] seconds.
//!
//! It shows, per provider, the breaker state, throttle, in-flight against the
//! cap and the retry budget left; per route the attempts per request over the
//! last minute; the recent fallbacks; each target's observed p99 against its
//! `expected_attempt_ms`; and the live caller census with whether a retry and
//! the fallback can start at each caller's typical deadline.
//!
//! Caller names come from a request header: everything shown is HTML-escaped.

use crate::census::{target_name, CensusReport, WINDOW_SECS};
use crate::shared::Shared;
use levee_policy::breaker::BreakerState;
use std::fmt::Write as _;
use std::time::Duration;

/// Seconds between the page's reloads.
pub const REFRESH_SECS: u32 = 5;

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2330;background:#fafbfc}\
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.6em 0 .4em}\
p.sub{color:#5a6270;margin:0}table{border-collapse:collapse;background:#fff}\
th,td{border:1px solid #d8dce3;padding:.3em .7em;text-align:left;vertical-align:top}\
th{background:#eef1f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.ok{color:#116329;font-weight:600}.bad{color:#b3261e;font-weight:600}.warn{color:#9a5b00;font-weight:600}\
.none{color:#8a919c}";

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn breaker(state: BreakerState) -> (&'static str, &'static str) {
    match state {
        BreakerState::Closed => ("closed", "ok"),
        BreakerState::Open => ("open", "bad"),
        BreakerState::HalfOpen => ("half-open", "warn"),
        BreakerState::Recovering => ("recovering", "warn"),
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

fn yes_no(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "<span class=\"ok\">yes</span>",
        Some(false) => "<span class=\"bad\">no</span>",
        None => "<span class=\"none\">-</span>",
    }
}

/// The page.
pub fn render(shared: &Shared) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let now = shared.clock.now();
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Levee status</title><style>{STYLE}</style></head><body>\
         <h1>Levee status</h1><p class=\"sub\">up {} · refreshes every {REFRESH_SECS} s · \
         <a href=\"/census\">/census</a> · <a href=\"/metrics\">/metrics</a></p>\
         <p class=\"sub\" id=\"config\">config <code>{}</code> · generation {} · loaded {} s ago</p>",
        secs(now.since_origin()),
        esc(&shared.generation.hash),
        shared.generation.number,
        shared
            .clock
            .unix_ms()
            .saturating_sub(shared.generation.loaded_unix_ms)
            / 1000,
    );
    providers(shared, &mut out);
    routes(shared, &mut out);
    fallbacks(shared, &mut out);
    let report = shared.census.report(&shared.config);
    targets(shared, &report, &mut out);
    census(&report, &mut out);
    out.push_str("</body></html>\n");
    out
}

fn providers(shared: &Shared, out: &mut String) {
    let now = shared.clock.now();
    out.push_str(
        "<h2>Providers</h2><table id=\"providers\"><tr><th>provider</th><th>breaker</th>\
         <th>throttled</th><th>in flight / cap</th><th>retry budget (retries available, per route)</th></tr>",
    );
    for (pi, p) in shared.providers.iter().enumerate() {
        let (state, throttled, in_flight) = {
            let s = p.lock();
            (s.breaker_state(now), s.throttled_until(now), s.in_flight())
        };
        let (state, class) = breaker(state);
        let throttled = match throttled {
            Some(until) => format!(
                "<span class=\"warn\">for {}</span>",
                secs(until.saturating_since(now))
            ),
            None => "<span class=\"none\">no</span>".to_string(),
        };
        let mut budgets = Vec::new();
        for (ri, r) in shared.config.routes.iter().enumerate() {
            for (t, target) in r.targets.iter().enumerate() {
                if target.provider == pi {
                    let left = shared.routes[ri].budget(t).available(now);
                    budgets.push(format!("{}: {left}", esc(&r.name)));
                }
            }
        }
        let _ = write!(
            out,
            "<tr data-provider=\"{name}\" data-breaker=\"{state}\"><td>{name}</td>\
             <td class=\"{class}\">{state}</td><td>{throttled}</td>\
             <td class=\"num\">{in_flight} / {cap}</td><td>{budgets}</td></tr>",
            name = esc(&p.name),
            cap = shared.config.providers[pi].max_in_flight,
            budgets = if budgets.is_empty() {
                "-".to_string()
            } else {
                budgets.join(", ")
            },
        );
    }
    out.push_str("</table>");
}

fn routes(shared: &Shared, out: &mut String) {
    let now = shared.clock.now();
    let _ = write!(
        out,
        "<h2>Routes</h2><table id=\"routes\"><tr><th>route</th><th>targets (fallback order)</th>\
         <th>in flight / cap</th><th>requests (last {WINDOW_SECS} s)</th>\
         <th>attempts per request (last {WINDOW_SECS} s)</th></tr>"
    );
    for (ri, r) in shared.config.routes.iter().enumerate() {
        let (requests, attempts) = shared.census.recent(ri, now);
        let ratio = if requests == 0 {
            "<span class=\"none\">-</span>".to_string()
        } else {
            let x = attempts as f64 / requests as f64;
            let class = if x > 1.2 { "bad" } else { "ok" };
            format!("<span class=\"{class}\">{x:.2}</span>")
        };
        let targets: Vec<String> = (0..r.targets.len())
            .map(|t| esc(&target_name(&shared.config, r, t)))
            .collect();
        let bulkhead = &shared.routes[ri].bulkhead;
        let _ = write!(
            out,
            "<tr data-route=\"{name}\"><td>{name}</td><td>{targets}</td>\
             <td class=\"num\">{} / {}</td><td class=\"num\">{requests}</td>\
             <td class=\"num\">{ratio}</td></tr>",
            bulkhead.in_use(),
            bulkhead.max(),
            name = esc(&r.name),
            targets = targets.join(" → "),
        );
    }
    out.push_str("</table>");
}

fn fallbacks(shared: &Shared, out: &mut String) {
    let recent = shared.census.recent_fallbacks();
    out.push_str("<h2>Recent fallbacks</h2>");
    if recent.is_empty() {
        out.push_str("<p id=\"fallbacks\" class=\"none\">none since start</p>");
        return;
    }
    out.push_str(
        "<table id=\"fallbacks\"><tr><th>ago</th><th>route</th><th>to</th><th>why</th></tr>",
    );
    let unix_ms = shared.clock.unix_ms();
    for f in recent {
        let Some(r) = shared.config.routes.get(f.route) else {
            continue;
        };
        let ago = Duration::from_millis(unix_ms.saturating_sub(f.unix_ms));
        let _ = write!(
            out,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            secs(ago),
            esc(&r.name),
            esc(&target_name(&shared.config, r, f.target)),
            esc(f.reason),
        );
    }
    out.push_str("</table>");
}

fn targets(shared: &Shared, report: &CensusReport, out: &mut String) {
    out.push_str(
        "<h2>Targets: observed slow end vs expected</h2><table id=\"targets\"><tr><th>route</th>\
         <th>target</th><th>expected_attempt_ms</th><th>observed p99 (ms)</th><th>warning</th></tr>",
    );
    let mut i = 0;
    for (ri, r) in shared.config.routes.iter().enumerate() {
        for t in 0..r.targets.len() {
            let Some(row) = report.targets.get(i) else {
                break;
            };
            i += 1;
            let warning = if shared.census.exceeded(ri, t) {
                "<span class=\"warn\">p99 above expected_attempt_ms: retries and fallbacks are judged on an optimistic number; raise it</span>"
            } else {
                ""
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{warning}</td></tr>",
                esc(&r.name),
                esc(&target_name(&shared.config, r, t)),
                row.expected_attempt_ms,
                row.observed_p99_ms
                    .map_or("-".to_string(), |p| p.to_string()),
            );
        }
    }
    out.push_str("</table>");
}

fn census(report: &CensusReport, out: &mut String) {
    out.push_str("<h2>Caller census (live)</h2>");
    if report.callers.is_empty() {
        out.push_str("<p id=\"census\" class=\"none\">no requests seen yet</p>");
        return;
    }
    out.push_str(
        "<table id=\"census\"><tr><th>caller</th><th>requests</th><th>deadline p5</th>\
         <th>deadline p50</th><th>route</th><th>retry can start?</th><th>fallback can start?</th></tr>",
    );
    let ms = |v: Option<u64>| v.map_or("-".to_string(), |m| secs(Duration::from_millis(m)));
    for c in &report.callers {
        for r in &c.routes {
            let _ = write!(
                out,
                "<tr data-caller=\"{name}\" data-route=\"{route}\" data-retry=\"{retry}\">\
                 <td>{name}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td>{route}</td><td>{}</td><td>{}</td></tr>",
                c.requests,
                ms(c.deadline_ms.p5),
                ms(c.deadline_ms.p50),
                yes_no(Some(r.retry_can_start)),
                yes_no(r.fallback_can_start),
                name = esc(&c.name),
                route = esc(&r.route),
                retry = r.retry_can_start,
            );
        }
    }
    out.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
    }
}
