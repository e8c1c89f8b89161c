//! `levee check`'s routing warnings: what a route sends where, read as a
//! vendor would read it. A route that an earlier one hides; a prefix that
//! is stripped (or kept) so that a vendor is sent a name it does not know;
//! a prefix route whose target names its own model, so that every model
//! under the prefix is answered by that one; a model a route is known to
//! send that has no price (its spend would be unknown). Each names the
//! config line.

use levee_config::{Config, Route};

/// Every routing warning of `config`, read from `text` (for the lines).
pub fn warnings(config: &Config, text: &str) -> Vec<String> {
    use levee_config::locate::{locate, Seg};
    let lines: Vec<usize> = (0..config.routes.len())
        .map(|i| locate(text, &[Seg::Key("routes"), Seg::Index(i)]).unwrap_or(0))
        .collect();
    let mut out = shadowed(&config.routes, &lines);
    for (route, &line) in config.routes.iter().zip(&lines) {
        out.extend(names_sent(config, route, line));
        out.extend(unpriced(config, route, line));
    }
    out
}

/// The models a route is known to send (a target's own `model`, or the
/// route's exact names) that have no price: neither a `prices:` entry nor
/// a built-in list price. A prefix route's models are the callers' and
/// are not known here.
fn unpriced(config: &Config, route: &Route, line: usize) -> Vec<String> {
    let mut out = Vec::new();
    for target in &route.targets {
        let sent: Vec<&str> = match &target.model {
            Some(own) => vec![own.as_str()],
            None => route.matcher.models.iter().map(String::as_str).collect(),
        };
        let provider = &config.providers[target.provider];
        for model in sent {
            if config.price_of(target.provider, model).is_none() {
                out.push(format!(
                    "line {}: route `{}` sends `{model}` to {}, which has no price: its spend is unknown; add a `prices:` entry for it",
                    line, route.name, provider.name
                ));
            }
        }
    }
    out
}

/// A prefix route (or a route for every model) that an earlier one hides:
/// every request it matches, the earlier one matches first. Exact names
/// win over prefixes wherever they stand, so only non-exact routes hide.
fn shadowed(routes: &[Route], lines: &[usize]) -> Vec<String> {
    let mut out = Vec::new();
    for (j, later) in routes.iter().enumerate() {
        if later.matcher.is_exact() {
            continue;
        }
        let hider = routes[..j].iter().position(|earlier| {
            let prefix = |r: &Route| r.matcher.model_prefix.clone().unwrap_or_default();
            !earlier.matcher.is_exact()
                && prefix(later).starts_with(&prefix(earlier))
                && earlier
                    .matcher
                    .path
                    .as_ref()
                    .is_none_or(|p| later.matcher.path.as_ref() == Some(p))
        });
        if let Some(i) = hider {
            out.push(format!(
                "line {}: route `{}` is never reached: route `{}` (line {}) comes first and matches every request it would; put the narrower route first",
                lines[j], later.name, routes[i].name, lines[i]
            ));
        }
    }
    out
}

/// What a prefix route sends its targets, against what their vendors
/// recognise.
fn names_sent(config: &Config, route: &Route, line: usize) -> Vec<String> {
    let mut out = Vec::new();
    let Some(prefix) = route.matcher.prefix() else {
        return out;
    };
    let strips = route.matcher.ends_at_separator();
    for target in &route.targets {
        let provider = &config.providers[target.provider];
        if let Some(own) = &target.model {
            if !strips {
                out.push(format!(
                    "line {}: route `{}` sends every model that starts with `{prefix}` to {} as `{own}`: a caller asking for another `{prefix}…` model is answered by `{own}`; match exact names instead (`match: {{ model: NAME }}` or `models: [...]`)",
                    line, route.name, provider.name
                ));
            }
            continue;
        }
        let Some(v) = provider
            .platform
            .model_names(provider.api, &provider.base_url)
        else {
            continue;
        };
        // What the vendor is sent: the rest of the caller's name after a
        // stripped prefix (unknown, but not the prefix's own family), or
        // the caller's whole name, which starts with the prefix.
        let bare = prefix.trim_end_matches(['/', ':']);
        let wrong = match strips {
            true => v
                .starts
                .iter()
                .any(|s| s.trim_end_matches(['-', '.']) == bare),
            false => !v
                .starts
                .iter()
                .any(|s| prefix.starts_with(s) || s.starts_with(prefix)),
        };
        if wrong {
            let sent = match strips {
                true => format!("`{prefix}…` without `{prefix}`"),
                false => format!("names that start with `{prefix}`"),
            };
            out.push(format!(
                "line {}: route `{}` sends {} {sent}, and {} names models {}: give the target a `model`, or match a prefix that ends at a separator (`anthropic/`) or the exact names",
                line, route.name, provider.name, v.vendor, v.shape
            ));
        }
    }
    out
}
