//! Routing in the config: exact names and lists beside prefixes (exact
//! wins wherever it stands), a prefix removed only at a separator,
//! balanced groups, `on_untranslatable`, and the bad shapes refused with
//! their line.

use levee_config::{Config, ConfigError, OnUntranslatable};
use levee_policy::planner::balance::Strategy;

const PROVIDERS: &str = "providers:\n  oa: { api: openai, base_url: \"http://127.0.0.1:9\" }\n  ob: { api: openai, base_url: \"http://127.0.0.1:8\" }\n  an: { api: anthropic, base_url: \"http://127.0.0.1:7\" }\n";

fn load(routes: &str) -> Config {
    Config::parse(&format!("{PROVIDERS}routes:\n{routes}")).unwrap_or_else(|e| panic!("{e}"))
}

/// The line and message of a config refused.
fn refused(routes: &str) -> (usize, String) {
    match Config::parse(&format!("{PROVIDERS}routes:\n{routes}")) {
        Err(ConfigError::AtLine { line, message }) => (line, message.to_string()),
        Err(other) => panic!("no line: {other}"),
        Ok(_) => panic!("accepted:\n{routes}"),
    }
}

const CHAT: &str = "/v1/chat/completions";

#[test]
fn exact_names_win_over_prefixes_wherever_they_stand() {
    let c = load(
        "  - match: { model_prefix: \"gpt-4o\" }\n    targets: [{ provider: oa, model: gpt-4o }]\n  - match: { models: [gpt-4o-mini, gpt-4o-mini-2024-07-18] }\n    targets: [ob]\n  - match: { model: gpt-4.1 }\n    targets: [oa]\n",
    );
    assert_eq!(c.route_for(CHAT, "gpt-4o-mini"), Some(1));
    assert_eq!(c.route_for(CHAT, "gpt-4o-mini-2024-07-18"), Some(1));
    assert_eq!(c.route_for(CHAT, "gpt-4o"), Some(0));
    assert_eq!(c.route_for(CHAT, "gpt-4.1"), Some(2));
    // An exact route never answers a neighbouring model.
    assert_eq!(c.route_for(CHAT, "gpt-4.1-mini"), None);
    assert_eq!(c.route_for(CHAT, "gpt-4o-mini-x"), Some(0));
    assert_eq!(c.routes[1].name, "gpt-4o-mini");
    assert_eq!(c.routes[1].rewrite_model(0, "gpt-4o-mini"), "gpt-4o-mini");
}

#[test]
fn a_prefix_is_removed_only_at_a_separator() {
    let c = load(
        "  - match: { model_prefix: \"openai/\" }\n    targets: [oa]\n  - match: { model_prefix: \"vllm:\" }\n    targets: [oa]\n  - match: { model_prefix: \"local\" }\n    targets: [oa]\n  - match: { model_prefix: \"claude-\" }\n    targets: [an]\n",
    );
    let sent = |model: &str| {
        let r = c.route_for(CHAT, model).unwrap();
        c.routes[r].rewrite_model(0, model).to_string()
    };
    assert_eq!(sent("openai/gpt-4.1"), "gpt-4.1");
    assert_eq!(sent("vllm:llama-3-8b"), "llama-3-8b");
    assert_eq!(sent("local/qwen"), "qwen");
    assert_eq!(sent("localqwen"), "localqwen");
    assert_eq!(sent("claude-sonnet-4-5"), "claude-sonnet-4-5");
}

#[test]
fn a_balanced_group_is_flattened_in_fallback_order() {
    let c = load(
        "  - match: { model: gpt-4o }\n    targets:\n      - balance:\n          - { provider: oa, model: gpt-4o, weight: 2 }\n          - ob\n        strategy: least_in_flight\n      - { provider: an, model: claude-sonnet-4-5 }\n    on_untranslatable: drop\n",
    );
    let r = &c.routes[0];
    assert_eq!(r.targets.len(), 3);
    assert_eq!(r.first_entry, 2);
    assert!(r.is_primary(1) && !r.is_primary(2));
    assert_eq!(r.targets[0].weight, 2.0);
    assert_eq!(r.targets[1].weight, 1.0);
    assert_eq!(r.targets[1].group, Some(0));
    assert_eq!(r.targets[2].group, None);
    let g = &r.policy.groups()[0];
    assert_eq!((g.start, g.weights.as_slice()), (0, &[2.0, 1.0][..]));
    assert_eq!(g.strategy, Strategy::LeastInFlight);
    assert_eq!(r.on_untranslatable, OnUntranslatable::Drop);
    // The default route's policy knows no groups; a plain route's first
    // entry is its primary.
    let c = load("  - targets: [oa, ob]\n");
    assert!(c.routes[0].policy.groups().is_empty());
    assert_eq!(c.routes[0].first_entry, 1);
    assert_eq!(c.routes[0].on_untranslatable, OnUntranslatable::Skip);
}

#[test]
fn bad_routing_is_refused_at_its_line_with_what_to_do() {
    let cases = [
        (
            "  - match: { model: a, model_prefix: \"a/\" }\n    targets: [oa]\n",
            6,
            "exact names or a prefix, not both",
        ),
        (
            "  - match: { models: [] }\n    targets: [oa]\n",
            6,
            "list the exact names",
        ),
        (
            "  - match: { model: gpt-4o }\n    targets: [oa]\n  - match: { models: [gpt-4.1, gpt-4o] }\n    targets: [ob]\n",
            8,
            "matched exactly by route 1 too",
        ),
        (
            "  - targets:\n      - balance: []\n",
            7,
            "at least one member",
        ),
        (
            "  - targets:\n      - balance: [{ provider: oa, weight: 0 }]\n",
            7,
            "above 0 (got 0)",
        ),
        (
            "  - targets:\n      - balance: [{ model: gpt-4o }]\n",
            7,
            "needs `provider: NAME`",
        ),
        (
            "  - targets:\n      - { provider: oa, balance: [ob] }\n",
            7,
            "go on its members",
        ),
        (
            "  - targets:\n      - { provider: oa, strategy: least_in_flight }\n",
            7,
            "balanced group's",
        ),
        (
            "  - targets:\n      - { balance: [oa], strategy: round_robin }\n",
            7,
            "strategy",
        ),
        (
            "  - targets: [oa]\n    on_untranslatable: ignore\n",
            7,
            "on_untranslatable",
        ),
    ];
    for (routes, line, says) in cases {
        let (at, message) = refused(routes);
        assert!(message.contains(says), "{routes}: {message}");
        assert!(
            (line..=line + 1).contains(&at),
            "{routes}: line {at}, not {line}: {message}"
        );
    }
}

#[test]
fn the_same_exact_name_on_two_endpoints_is_two_routes() {
    let c = load(
        "  - match: { model: m, path: /v1/embeddings }\n    targets: [oa]\n  - match: { model: m, path: /v1/chat/completions }\n    targets: [ob]\n",
    );
    assert_eq!(c.route_for("/v1/embeddings", "m"), Some(0));
    assert_eq!(c.route_for(CHAT, "m"), Some(1));
}

#[test]
fn a_passthrough_prefix_names_the_object_in_the_segment_after_it() {
    let c = load(
        "  - targets: [oa]\n    passthrough: [\"/v1/files\", \"/v1/files/\", \"/v1/batches/\"]\n",
    );
    let r = &c.routes[0];
    assert_eq!(r.passthrough_object("/v1/files/file-abc"), Some("file-abc"));
    assert_eq!(
        r.passthrough_object("/v1/files/file-abc/content"),
        Some("file-abc")
    );
    assert_eq!(
        r.passthrough_object("/v1/batches/batch_1/cancel"),
        Some("batch_1")
    );
    assert_eq!(r.passthrough_object("/v1/files"), None);
    assert_eq!(r.passthrough_object("/v1/files/"), None);
    assert_eq!(r.passthrough_object("/v1/models/x"), None);
}
