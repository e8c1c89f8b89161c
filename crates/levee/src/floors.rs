//! The retry floors a config adds up to: each route's budget lets every
//! target `min_per_second` retries whatever its successes, so in an outage
//! of one provider every route that sends to it retries at its floor.
//! Twenty routes at the default 5 a second are 100 retries a second into a
//! provider that answers none. `levee check` prints the sum per provider
//! and warns when it is more than [`WARN_OVER`] a second and twice the
//! largest single floor (several routes adding up, not one generous one).

use levee_config::Config;
use std::fmt::Write;

/// The sum of floors a provider may take before `levee check` warns.
pub(crate) const WARN_OVER: f64 = 20.0;

/// Each provider's floors: (provider, sum, budgets adding to it, largest).
fn floors(config: &Config) -> Vec<(String, f64, usize, f64)> {
    let mut out: Vec<(String, f64, usize, f64)> = Vec::new();
    for route in &config.routes {
        let floor = route.budget.floor_per_second();
        for t in &route.targets {
            let name = &config.providers[t.provider].name;
            match out.iter_mut().find(|(n, ..)| n == name) {
                Some(e) => {
                    e.1 += floor;
                    e.2 += 1;
                    e.3 = e.3.max(floor);
                }
                None => out.push((name.clone(), floor, 1, floor)),
            }
        }
    }
    out
}

/// The floors' section of `levee check`'s report; returns its warnings.
pub(crate) fn render(out: &mut String, config: &Config) -> Vec<String> {
    let all = floors(config);
    let mut warnings = Vec::new();
    if all.iter().all(|(_, _, n, _)| *n <= 1) {
        return warnings;
    }
    let _ = writeln!(
        out,
        "\nretry floors (retries a second each provider is sent in an outage, at every route's min_per_second)"
    );
    for (name, sum, n, largest) in &all {
        let _ = writeln!(out, "  {name}: {sum:.0}/s from {n} route target(s)");
        if *sum > WARN_OVER && *sum > 2.0 * largest {
            warnings.push(format!(
                "provider `{name}`: {n} route targets' retry floors add up to {sum:.0} retries a second in an outage of it (each `retry.budget.min_per_second`, default 5): lower `min_per_second` on the routes that need no floor, or merge routes"
            ));
        }
    }
    for w in &warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
    warnings
}
