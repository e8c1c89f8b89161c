//! The status page (admin `GET /`): one self-contained HTML page for a person
//! during an incident — no scripts, styles or fonts from elsewhere, so it
//! works offline and behind any proxy; it reloads itself every
//! [`REFRESH_SECS`] seconds.
//!
//! It shows first, per route, the share of requests answered with success
//! over the last minute — what callers see, a failing route in red; then per
//! provider the breaker state (each model's too, where they differ or there
//! are several), throttle, in-flight against the cap and the retry budget
//! left; per route the failed share beside the attempts per request (a
//! refusal makes no attempt, so a failing route's attempts per request can
//! look low); the recent fallbacks and why, in words; each target's observed
//! p99 against its `expected_attempt_ms`; and the live caller census with
//! whether a retry and the fallback can start at each caller's typical
//! deadline.
//!
//! Caller names come from a request header: everything shown is HTML-escaped.

use crate::observe::census::{target_name, CensusReport, Recent, WINDOW_SECS};
use crate::runtime::shared::Shared;
use levee_policy::breaker::BreakerState;
use levee_policy::{Instant, ProviderState};
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
.none{color:#8a919c}\
#success{display:flex;flex-wrap:wrap;gap:.8em;margin:.6em 0 0}\
.tile{min-width:12em;padding:.6em .9em;border:2px solid #d8dce3;border-radius:6px;background:#fff}\
.tile .big{font-size:2.2em;font-weight:700;line-height:1.2;font-variant-numeric:tabular-nums}\
.tile.ok{border-color:#116329;background:#e8f5ec;color:#116329;font-weight:400}\
.tile.warn{border-color:#9a5b00;background:#fff4e0;color:#9a5b00;font-weight:400}\
.tile.bad{border-color:#7a1410;background:#c62828;color:#fff;font-weight:400}\
.tile.none{color:#5a6270}tr.failing td{background:#fde4e1}\
ul.models{margin:.2em 0 0;padding-left:1.1em;font-weight:400}code{font-size:.9em}";

/// At or above this share of requests answered with success, a route is
/// shown healthy.
const HEALTHY: f64 = 0.99;
/// Below this share a route is shown failing (red). The Prometheus alert
/// `LeveeCallerErrorRatioHigh` fires at the same line (5 % failing).
const FAILING: f64 = 0.95;

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
         <a href=\"/census\">/census</a> · <a href=\"/admin/spend\">/admin/spend</a> · <a href=\"/metrics\">/metrics</a></p>\
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
    replicas(shared, &mut out);
    success(shared, &mut out);
    providers(shared, &mut out);
    routes(shared, &mut out);
    fallbacks(shared, &mut out);
    crate::server::spend::section(shared, &mut out);
    let report = shared.census.report(&shared.config);
    targets(shared, &report, &mut out);
    census(&shared.config, &report, &mut out);
    out.push_str("</body></html>\n");
    out
}

/// With a shared state store: the replicas counted by their leases, and the
/// share of each allowance a replica enforces while the store is
/// unreachable.
fn replicas(shared: &Shared, out: &mut String) {
    let Some(redis) = &shared.redis else { return };
    let counted = match redis.live_replicas() {
        Some(n) => format!("{n} live (leases in Redis)"),
        None => "not counted yet".to_string(),
    };
    let _ = write!(
        out,
        "<p class=\"sub\" id=\"replicas\">replicas: <b>{counted}</b> · while Redis is unreachable each enforces 1/{} of every allowance (<code>state.replicas</code> {} is the floor)</p>",
        redis.replicas_now(),
        redis.replicas,
    );
}

/// How a route's success ratio is shown: its class (`ok`, `warn`, `bad`,
/// or `none` without answers) and the ratio as a percentage, floored to one
/// decimal so that 99.96 % never reads as 100 %.
fn success_shown(r: &Recent) -> (&'static str, String) {
    match r.success_ratio() {
        None => ("none", "-".to_string()),
        Some(x) => {
            let class = if x >= HEALTHY {
                "ok"
            } else if x >= FAILING {
                "warn"
            } else {
                "bad"
            };
            let pct = (x * 1000.0).floor() / 10.0;
            if pct >= 100.0 {
                (class, "100 %".to_string())
            } else {
                (class, format!("{pct:.1} %"))
            }
        }
    }
}

/// The page's first block: per route, the share of requests answered with
/// success over the last [`WINDOW_SECS`], as callers see it.
fn success(shared: &Shared, out: &mut String) {
    let now = shared.clock.now();
    let _ = write!(
        out,
        "<h2>What callers see: requests answered with success (last {WINDOW_SECS} s)</h2>\
         <div id=\"success\">"
    );
    for (ri, r) in shared.config.routes.iter().enumerate() {
        let recent = shared.census.recent(ri, now);
        let (class, pct) = success_shown(&recent);
        let detail = if recent.answered == 0 {
            "no requests answered".to_string()
        } else {
            let failed = recent.answered - recent.succeeded;
            format!(
                "{} of {} succeeded · {failed} failed",
                recent.succeeded, recent.answered
            )
        };
        let _ = write!(
            out,
            "<div class=\"tile {class}\" data-route=\"{name}\" data-success=\"{class}\">\
             <div>route <b>{name}</b></div><div class=\"big\">{pct}</div><div>{detail}</div></div>",
            name = esc(&r.name),
        );
    }
    out.push_str("</div>");
}

/// An in-flight count against its cap; `u32::MAX` is no cap.
fn in_flight(n: u32, cap: u32) -> String {
    if cap == u32::MAX {
        format!("{n} / <span class=\"none\">uncapped</span>")
    } else {
        format!("{n} / {cap}")
    }
}

fn providers(shared: &Shared, out: &mut String) {
    let now = shared.clock.now();
    out.push_str(
        "<h2>Providers</h2><table id=\"providers\"><tr><th>provider</th><th>breaker</th>\
         <th>throttled</th><th>in flight / cap</th><th>allowance left</th><th>retry budget (retries available, per route)</th></tr>",
    );
    for (pi, p) in shared.providers.iter().enumerate() {
        let (state, link, models, throttled, in_flight_now, allowance) = {
            let s = p.lock();
            let allowance = allowance_left(&s, now);
            let models: Vec<Admission> = s
                .model_admission(now)
                .into_iter()
                .map(|a| Admission {
                    model: a.model.to_string(),
                    state: a.state,
                    fraction: a.fraction,
                    belief: a.belief.as_str(),
                })
                .collect();
            (
                s.breaker_state(now),
                s.link_state(now),
                models,
                s.throttled_until(now),
                s.in_flight(),
                allowance,
            )
        };
        let (state_word, class) = breaker(state);
        let detail = model_breakers(state, link, &models);
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
        // The floor the routes share, per model (not a route's own).
        if let Some(floor) = &shared.config.providers[pi].retry_floor {
            budgets.push(format!("floor {:.0}/s per model", floor.floor_per_second()));
        }
        let _ = write!(
            out,
            "<tr data-provider=\"{name}\" data-breaker=\"{state_word}\"><td>{name}</td>\
             <td><span class=\"{class}\">{state_word}</span>{detail}</td><td>{throttled}</td>\
             <td class=\"num\">{flight}</td><td>{allowance}</td><td>{budgets}</td></tr>",
            name = esc(&p.name),
            allowance = if allowance.is_empty() {
                "<span class=\"none\">not metered</span>".to_string()
            } else {
                allowance.join("<br>")
            },
            flight = in_flight(in_flight_now, shared.config.providers[pi].max_in_flight),
            budgets = if budgets.is_empty() {
                "-".to_string()
            } else {
                budgets.join(", ")
            },
        );
    }
    out.push_str("</table>");
}

/// Each meter of a provider's allowance: what is left of its capacity,
/// red below a tenth, amber below a quarter.
fn allowance_left(s: &ProviderState, now: Instant) -> Vec<String> {
    levee_policy::allowance::Meter::ALL
        .iter()
        .filter_map(|m| {
            let (level, capacity) = s.allowance().level(now, *m)?;
            let share = level / capacity.max(1.0);
            let class = match share {
                x if x < 0.1 => "bad",
                x if x < 0.25 => "warn",
                _ => "ok",
            };
            Some(format!(
                "<span data-meter=\"{m}\" class=\"{class}\">{m}: {level:.0} of {capacity:.0}</span>",
                m = m.label()
            ))
        })
        .collect()
}

/// One model's breaker and graded admission, as the page shows it.
struct Admission {
    model: String,
    state: BreakerState,
    fraction: f64,
    belief: &'static str,
}

/// Each model's breaker, where the provider's one word (`state`) hides a
/// difference: several models, a model not in the provider's state, or a
/// model that admits only part of what it is asked (empty when there is
/// none). A graded model reads "admits 40 % (overload)".
fn model_breakers(state: BreakerState, link: BreakerState, models: &[Admission]) -> String {
    let mut detail = String::new();
    let graded = |a: &Admission| a.state != BreakerState::Open && a.fraction < 1.0;
    if models.len() <= 1 && models.iter().all(|a| a.state == state && !graded(a)) {
        return detail;
    }
    detail.push_str("<ul class=\"models\">");
    if link != BreakerState::Closed {
        let (w, c) = breaker(link);
        let _ = write!(
            detail,
            "<li data-model-breaker=\"{w}\">provider-wide (connections, or two models open): \
             <span class=\"{c}\">{w}</span></li>"
        );
    }
    for a in models {
        let (w, c) = breaker(a.state);
        let name = if a.model.is_empty() {
            "other models".to_string()
        } else {
            esc(&a.model)
        };
        let admits = match graded(a) {
            true => format!(
                " · <span class=\"warn\">admits {:.0} %</span> ({})",
                a.fraction * 100.0,
                a.belief
            ),
            false => String::new(),
        };
        let _ = write!(
            detail,
            "<li data-model=\"{name}\" data-model-breaker=\"{w}\" data-model-admitted=\"{f:.2}\" \
             data-model-belief=\"{b}\">{name}: <span class=\"{c}\">{w}</span>{admits}</li>",
            f = a.fraction,
            b = a.belief
        );
    }
    detail.push_str("</ul>");
    detail
}

/// A route's entries in fallback order, escaped: a target's name, or a
/// balanced group's members (`east ×2 | west`) in brackets.
fn entries(config: &levee_config::Config, r: &levee_config::Route) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut group = None;
    for (t, target) in r.targets.iter().enumerate() {
        let mut name = esc(&target_name(config, r, t));
        if target.group.is_some() && target.weight != 1.0 {
            name.push_str(&format!(" ×{}", target.weight));
        }
        match (target.group, group) {
            (Some(g), Some(open)) if g == open => {
                if let Some(last) = out.last_mut() {
                    last.pop();
                    last.push_str(&format!(" | {name}]"));
                }
            }
            (Some(_), _) => out.push(format!("balance[{name}]")),
            (None, _) => out.push(name),
        }
        group = target.group;
    }
    out
}

fn routes(shared: &Shared, out: &mut String) {
    let now = shared.clock.now();
    let _ = write!(
        out,
        "<h2>Routes (counts over the last {WINDOW_SECS} s)</h2><table id=\"routes\"><tr><th>route</th>\
         <th>succeeded</th><th>failed</th><th>attempts per request</th><th>requests</th>\
         <th>targets (fallback order)</th><th>in flight / cap</th></tr>"
    );
    for (ri, r) in shared.config.routes.iter().enumerate() {
        let recent = shared.census.recent(ri, now);
        let (success_class, pct) = success_shown(&recent);
        let failed = recent.answered - recent.succeeded;
        let failed_cell = if recent.answered == 0 {
            "<span class=\"none\">-</span>".to_string()
        } else {
            let share = failed as f64 * 100.0 / recent.answered as f64;
            let class = if failed == 0 { "ok" } else { success_class };
            format!(
                "<span class=\"{class}\">{share:.1} %</span> ({failed} of {})",
                recent.answered
            )
        };
        // A refusal (breaker open, shed) makes no attempt: a failing route's
        // attempts per request falls toward zero and must not read healthy.
        // Its colour is the worse of amplification and the callers' success.
        let ratio = if recent.requests == 0 {
            "<span class=\"none\">-</span>".to_string()
        } else {
            let x = recent.attempts as f64 / recent.requests as f64;
            let class = match success_class {
                "bad" => "bad",
                _ if x > 1.2 => "bad",
                "warn" => "warn",
                _ => "ok",
            };
            format!("<span class=\"{class}\">{x:.2}</span>")
        };
        let targets = entries(&shared.config, r);
        let bulkhead = &shared.routes[ri].bulkhead;
        let _ = write!(
            out,
            "<tr data-route=\"{name}\"{failing}><td>{name}</td>\
             <td class=\"num\"><span class=\"{success_class}\">{pct}</span></td>\
             <td class=\"num\">{failed_cell}</td><td class=\"num\">{ratio}</td>\
             <td class=\"num\">{requests}</td><td>{targets}</td><td class=\"num\">{flight}</td></tr>",
            name = esc(&r.name),
            failing = if success_class == "bad" {
                " class=\"failing\""
            } else {
                ""
            },
            requests = recent.requests,
            targets = targets.join(" → "),
            flight = in_flight(bulkhead.in_use(), bulkhead.max()),
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
        let why = format!(
            "{} <span class=\"none\"><code>{}</code></span>",
            f.reason.words(),
            f.reason.label()
        );
        let _ = write!(
            out,
            "<tr data-reason=\"{reason}\"><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{why}</td></tr>",
            secs(ago),
            esc(&r.name),
            esc(&target_name(&shared.config, r, f.target)),
            reason = f.reason.label(),
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

/// What lets a caller retry on route `route`: the deadline its first retry
/// needs (its wait, the primary's expected attempt, the fallback's reserve,
/// the margin), rounded up to a second.
fn retry_needs(config: &levee_config::Config, route: &str) -> Option<String> {
    let r = config.routes.iter().find(|r| r.name == route)?;
    let steps = r.policy.schedule();
    let step = steps.iter().find(|s| s.attempt == 2 && s.target == 0)?;
    let d = step.needs_deadline;
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Some(format!(
        "raise its timeout to {secs} s, or lower the primary's expected_attempt_ms"
    ))
}

fn census(config: &levee_config::Config, report: &CensusReport, out: &mut String) {
    out.push_str("<h2>Caller census (live)</h2>");
    if report.callers.is_empty() {
        out.push_str("<p id=\"census\" class=\"none\">no requests seen yet</p>");
        return;
    }
    out.push_str(
        "<table id=\"census\"><tr><th>caller</th><th>requests</th><th>deadline p5</th>\
         <th>deadline p50</th><th>route</th><th>retry can start?</th><th>fallback can start?</th>\
         <th>to let a retry start</th></tr>",
    );
    let ms = |v: Option<u64>| v.map_or("-".to_string(), |m| secs(Duration::from_millis(m)));
    for c in &report.callers {
        for r in &c.routes {
            let fix = match r.retry_can_start {
                true => String::new(),
                false => retry_needs(config, &r.route).unwrap_or_default(),
            };
            let _ = write!(
                out,
                "<tr data-caller=\"{name}\" data-route=\"{route}\" data-retry=\"{retry}\">\
                 <td>{name}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td>{route}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                c.requests,
                ms(c.deadline_ms.p5),
                ms(c.deadline_ms.p50),
                yes_no(Some(r.retry_can_start)),
                yes_no(r.fallback_can_start),
                esc(&fix),
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
    fn a_balanced_group_is_one_entry_naming_its_members() {
        let c = levee_config::Config::parse(
            "providers:\n  east: { api: openai, base_url: \"http://127.0.0.1:9\" }\n  west: { api: openai, base_url: \"http://127.0.0.1:8\" }\n  an: { api: anthropic, base_url: \"http://127.0.0.1:7\" }\nroutes:\n  - targets:\n      - balance: [{ provider: east, weight: 2 }, west]\n      - { provider: an, model: claude-x }\n",
        )
        .unwrap();
        assert_eq!(
            entries(&c, &c.routes[0]).join(" → "),
            "balance[east ×2 | west] → an (claude-x)"
        );
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
    }

    fn answered(answered: u64, succeeded: u64) -> Recent {
        Recent {
            requests: answered,
            attempts: answered,
            answered,
            succeeded,
        }
    }

    #[test]
    fn the_success_ratio_is_floored_and_coloured_at_99_and_95_percent() {
        assert_eq!(success_shown(&answered(0, 0)), ("none", "-".into()));
        assert_eq!(success_shown(&answered(10, 10)), ("ok", "100 %".into()));
        // 99.96 % is not all: it never reads as 100 %.
        assert_eq!(
            success_shown(&answered(10_000, 9_996)),
            ("ok", "99.9 %".into())
        );
        assert_eq!(success_shown(&answered(100, 98)), ("warn", "98.0 %".into()));
        assert_eq!(success_shown(&answered(100, 95)), ("warn", "95.0 %".into()));
        assert_eq!(success_shown(&answered(100, 94)), ("bad", "94.0 %".into()));
        assert_eq!(success_shown(&answered(8, 0)), ("bad", "0.0 %".into()));
    }

    #[test]
    fn fallback_reasons_are_said_in_words_beside_their_labels() {
        use crate::observe::outcome::{AttemptResult, FallbackReason};
        use levee_policy::planner::PrimaryRefusal as R;
        let r = FallbackReason::PrimaryRefused(R::CircuitOpen);
        assert_eq!(r.label(), "primary_circuit_open");
        assert_eq!(r.words(), "primary's circuit open");
        for r in [
            R::Throttled,
            R::RateLimited,
            R::Recovering,
            R::Shed,
            R::BudgetExhausted,
        ] {
            let label = FallbackReason::PrimaryRefused(r).label();
            assert_eq!(label, format!("primary_{}", r.as_str()), "{label}");
        }
        let r = FallbackReason::After(AttemptResult::Http5xx);
        assert_eq!(
            (r.label(), r.words()),
            ("http_5xx", "previous target answered 5xx")
        );
        assert_eq!(FallbackReason::NoAttempt.label(), "none");
        assert_eq!(
            FallbackReason::PrimaryRefusedUnsaid.label(),
            "primary_refused"
        );
    }

    #[test]
    fn a_graded_model_says_what_it_admits_and_why() {
        let one = |fraction| {
            [Admission {
                model: "gpt-4.1".into(),
                state: BreakerState::Closed,
                fraction,
                belief: "overload",
            }]
        };
        let c = BreakerState::Closed;
        // All admitted, one model: the provider's word says it all.
        assert_eq!(model_breakers(c, c, &one(1.0)), "");
        let shown = model_breakers(c, c, &one(0.4));
        assert!(shown.contains("admits 40 %</span> (overload)"), "{shown}");
        assert!(shown.contains("data-model-admitted=\"0.40\""), "{shown}");
        assert!(shown.contains("data-model-belief=\"overload\""), "{shown}");
    }
}
