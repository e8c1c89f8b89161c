//! The retry floors of a config: each provider's models get
//! `min_per_second` retries a second whatever the successes, one floor per
//! provider and model shared by every route that sends to it (the largest
//! of those routes' `min_per_second`). `levee check` prints each shared
//! floor where several routes send to one provider, so an operator sees
//! that twenty routes at the default 5 a second are 5 retries a second into
//! an outage of it, not 100.

use levee_config::Config;
use std::fmt::Write;

/// The floors' section of `levee check`'s report: each provider that
/// several routes send to, its shared floor and how many routes share it.
pub(crate) fn render(out: &mut String, config: &Config) {
    let mut lines = Vec::new();
    for (ix, p) in config.providers.iter().enumerate() {
        let routes = config
            .routes
            .iter()
            .filter(|r| r.targets.iter().any(|t| t.provider == ix))
            .count();
        if routes < 2 {
            continue;
        }
        let floor = p.retry_floor.as_ref().map_or(0.0, |f| f.floor_per_second());
        lines.push(format!(
            "  {}: {floor:.0}/s per model, shared by {routes} routes",
            p.name
        ));
    }
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nretry floors (retries a second each model is sent in an outage of it, whatever the successes: the largest `min_per_second` of the routes that send to it, shared by them)"
    );
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
}
