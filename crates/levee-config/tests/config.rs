use levee_config::{Api, Config, ConfigError};
use std::time::Duration;

/// The two-layer-storm incident's routes block (retry budget 0.1 with 5/s, 3
/// attempts, breaker 0.5 / 10 s / open 5 s), kept once as a fuzz seed.
const RETRY_ROUTE_BLOCK: &str = include_str!("../../../fuzz/seeds/config/seed000.yaml");

fn line_of(e: ConfigError) -> (usize, String) {
    match e {
        ConfigError::AtLine { line, message } => (line, message.to_string()),
        other => panic!("expected a line number: {other}"),
    }
}

#[test]
fn a_route_block_with_retry_and_breaker_loads_unchanged() {
    let c = Config::parse(RETRY_ROUTE_BLOCK).unwrap();
    assert!(c.builtin_mock);
    assert_eq!(c.routes.len(), 1);
    assert_eq!(c.routes[0].policy.max_attempts(), 3);
    assert_eq!(
        c.providers[0].breaker.settings().open_for,
        Duration::from_secs(5)
    );
    // With a provider of the prefix's name, the route targets it.
    let with_provider = format!(
        "providers:\n  anthropic:\n    api: anthropic\n    base_url: https://api.anthropic.com\n    api_key_env: ANTHROPIC_API_KEY\n{RETRY_ROUTE_BLOCK}"
    );
    let c = Config::parse(&with_provider).unwrap();
    assert!(!c.builtin_mock);
    assert_eq!(
        c.providers[c.routes[0].targets[0].provider].api,
        Api::Anthropic
    );
    assert_eq!(
        c.routes[0].rewrite_model(0, "anthropic/claude-x"),
        "claude-x"
    );
}

#[test]
fn unknown_keys_wrong_types_and_bad_durations_name_the_line() {
    let (line, msg) =
        line_of(Config::parse("listen: 127.0.0.1:8080\nlisten_typo: 1\n").unwrap_err());
    assert_eq!(line, 2);
    assert!(msg.contains("listen_typo"), "{msg}");
    let bad_window =
        "routes:\n  - match: { model_prefix: \"a/\" }\n    circuit_breaker:\n      window: ten\n";
    let (line, msg) = line_of(Config::parse(bad_window).unwrap_err());
    assert_eq!(line, 4);
    assert!(msg.contains("like `10s`"), "{msg}");
    let (line, msg) =
        line_of(Config::parse("routes:\n  - retry:\n      max_attempts: 0\n").unwrap_err());
    assert_eq!(line, 3, "{msg}");
    assert!(msg.contains("max_attempts"), "{msg}");
}

#[test]
fn deterministic_4xx_in_on_is_refused() {
    let text = "routes:\n  - retry: { on: [503, 400] }\n";
    let (line, msg) = line_of(Config::parse(text).unwrap_err());
    assert_eq!(line, 2);
    assert!(msg.contains("deterministic"), "{msg}");
}

#[test]
fn targets_fallback_order_and_expected_attempts() {
    let text = r#"
providers:
  anthropic: { api: anthropic, base_url: "https://api.anthropic.com", api_key_env: ANTHROPIC_API_KEY }
  openai: { api: openai, base_url: "https://api.openai.com/v1", api_key_env: OPENAI_API_KEY }
routes:
  - match: { model_prefix: "anthropic/" }
    targets:
      - { provider: anthropic, expected_attempt_ms: 35000 }
      - { provider: openai, model: gpt-4.1, expected_attempt_ms: 30000 }
    deadline: { default: 30s, max: 120s }
    retry: { backoff: { schedule_ms: [7000, 11000], jitter: none } }
  - match: { model_prefix: "openai/" }
    targets: [openai, anthropic]
callers:
  - { name: queue-worker, deadline: 40s }
"#;
    let c = Config::parse(text).unwrap();
    let r = &c.routes[0];
    assert_eq!(r.targets.len(), 2);
    assert_eq!(r.rewrite_model(1, "anthropic/claude"), "gpt-4.1");
    assert_eq!(
        r.policy.schedule()[1].needs_deadline,
        Duration::from_millis(72_050)
    );
    assert_eq!(
        c.routes[1].targets[0].expected_attempt,
        Duration::from_secs(8)
    );
    assert_eq!(c.route_for("/v1/chat/completions", "openai/gpt"), Some(1));
    assert_eq!(c.route_for("/v1/chat/completions", "mistral/x"), None);
    assert_eq!(c.callers[0].deadline, Some(Duration::from_secs(40)));
    let (line, msg) = line_of(
        Config::parse("providers:\n  a: { api: openai, base_url: \"ftp://x\" }\n").unwrap_err(),
    );
    assert_eq!(line, 2, "{msg}");
    let (_, msg) = line_of(
        Config::parse(
            "providers:\n  a: { api: openai, base_url: \"http://x\" }\nroutes:\n  - targets: [b]\n",
        )
        .unwrap_err(),
    );
    assert!(msg.contains("not a provider"), "{msg}");
}

#[test]
fn empty_config_routes_everything_to_the_builtin_mock() {
    let c = Config::builtin("127.0.0.1:9999".parse().unwrap());
    assert!(c.builtin_mock);
    assert_eq!(
        c.providers[0].base_url.to_string(),
        "http://127.0.0.1:9999/"
    );
    // Both dialects natively: Anthropic's path to the mock's Anthropic
    // face, everything else to its OpenAI face, both at the mock.
    let messages = c.route_for("/v1/messages", "anything").unwrap();
    let chat = c.route_for("/v1/chat/completions", "anything").unwrap();
    let api = |r: usize| c.providers[c.routes[r].targets[0].provider].api;
    assert_eq!(api(messages), levee_config::Api::Anthropic);
    assert_eq!(api(chat), levee_config::Api::OpenAi);
    assert!(c
        .providers
        .iter()
        .all(|p| p.base_url == "http://127.0.0.1:9999/"));
}

#[test]
fn the_shipped_example_config_is_valid() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../levee.example.yaml"
    ))
    .unwrap();
    let c = Config::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.providers.len(), 3);
    assert_eq!(c.routes[0].targets.len(), 2);
    // The failover from Anthropic's API to Claude on Bedrock.
    let claude = c.route_for("/v1/messages", "claude-sonnet-4-5").unwrap();
    let kinds: Vec<_> = c.routes[claude]
        .targets
        .iter()
        .map(|t| c.providers[t.provider].platform.clone())
        .collect();
    assert_eq!(kinds[0], levee_config::Platform::Direct);
    assert!(matches!(kinds[1], levee_config::Platform::Bedrock { .. }));
    assert_eq!(c.callers.len(), 4);
}

#[test]
fn providers_without_routes_send_every_model_to_the_first_provider() {
    let c = Config::parse("providers:\n  p: { api: openai, base_url: \"http://127.0.0.1:9\" }\n")
        .unwrap();
    assert_eq!(c.routes.len(), 1);
    assert_eq!(c.providers[c.routes[0].targets[0].provider].name, "p");
    assert_eq!(c.route_for("/v1/chat/completions", "anything"), Some(0));
}

const TWO_ROUTES_ONE_PROVIDER: &str = r#"providers:
  p:
    api: openai
    base_url: http://127.0.0.1:9
    circuit_breaker: { error_ratio: 0.3, min_requests: 50 }
routes:
  - match: { model_prefix: "a/" }
    targets: [p]
    circuit_breaker: { open_for: 2s }
  - match: { model_prefix: "b/" }
    targets: [p]
"#;

#[test]
fn a_route_breaker_block_keeps_the_providers_fields_it_omits() {
    let c = Config::parse(TWO_ROUTES_ONE_PROVIDER).unwrap();
    let b = c.providers[0].breaker.settings();
    assert_eq!(b.open_for, Duration::from_secs(2), "the route's field");
    assert_eq!(b.error_ratio, 0.3, "the provider's, not the default 0.5");
    assert_eq!(b.min_requests, 50);
}

#[test]
fn two_routes_asking_one_provider_for_different_breakers_are_refused() {
    let text = TWO_ROUTES_ONE_PROVIDER.to_string() + "    circuit_breaker: { open_for: 9s }\n";
    let (line, message) = line_of(Config::parse(&text).unwrap_err());
    assert!(message.contains("route 1"), "{message}");
    assert!(message.contains("`p`"), "{message}");
    assert_eq!(
        text.lines().nth(line - 1).map(str::trim),
        Some("circuit_breaker: { open_for: 9s }")
    );
    // The same block on both is fine.
    let same = TWO_ROUTES_ONE_PROVIDER.to_string() + "    circuit_breaker: { open_for: 2s }\n";
    assert!(Config::parse(&same).is_ok());
}

#[test]
fn redis_urls_are_validated_and_never_shown_with_their_password() {
    for good in [
        "redis://127.0.0.1:6379",
        "redis://:s3cret@cache.internal:6380/2",
        "rediss://user:s3cret@[::1]:6379",
        "redis+unix:///run/redis.sock",
        "redis://localhost",
    ] {
        assert!(levee_config::check_redis_url(good).is_ok(), "{good}");
    }
    for bad in [
        "redis//:s3cret@host:6379",
        "http://:s3cret@host:6379",
        "redis://:s3cret@host:notaport",
        "redis://:s3cret@host:0",
        "redis://:s3cret@:6379",
        "redis://:s3cret@host:6379/db",
        "redis://:s3cret@ho st:6379",
    ] {
        let e = levee_config::check_redis_url(bad)
            .expect_err(bad)
            .to_string();
        assert!(!e.contains("s3cret"), "the password is shown: {e}");
        let text = format!("state: {{ backend: redis, url: \"{bad}\" }}\n");
        let e = Config::parse(&text).expect_err(bad).to_string();
        assert!(!e.contains("s3cret"), "the password is shown: {e}");
        assert!(e.contains("state.url"), "{e}");
    }
    assert_eq!(
        levee_config::redact_url("redis://:pw@h:1/0"),
        "redis://***@h:1/0"
    );
    assert_eq!(
        levee_config::redact_url("redis://h:1/0?password=pw&protocol=resp3"),
        "redis://h:1/0?password=***&protocol=***"
    );
}

#[test]
fn idempotency_bytes_and_on_unavailable_are_read_and_checked() {
    let c = Config::parse(
        "idempotency: { max_entries: 10, max_bytes: 4096 }\nstate: { backend: redis, on_unavailable: refuse }\n",
    )
    .unwrap();
    assert_eq!(c.idempotency.max_bytes, 4096);
    assert!(matches!(
        c.state,
        levee_config::StateBackend::Redis {
            on_unavailable: levee_config::OnUnavailable::Refuse,
            ..
        }
    ));
    assert!(Config::parse("state: { backend: redis, on_unavailable: maybe }\n").is_err());
    assert!(Config::parse("idempotency: { max_bytes: 10 }\n").is_err());
}

#[test]
fn a_head_limit_under_1_kib_is_refused_and_one_under_8_kib_kept() {
    let err = Config::parse("limits:\n  max_header_bytes: 512\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("line 2"), "{err}");
    assert!(err.contains("max_header_bytes"), "{err}");
    assert!(err.contains("at least 1024"), "{err}");
    let c = Config::parse("limits: { max_header_bytes: 4096 }\n").unwrap();
    assert_eq!(c.limits.max_header_bytes, 4096);
}

#[test]
fn a_token_endpoint_over_plain_http_must_be_on_this_machine_or_link_local() {
    let vertex = |url: &str| {
        Config::parse(&format!(
            "providers:\n  vx: {{ api: vertex, region: us-east5, project: p, token_url: \"{url}\" }}\n"
        ))
    };
    for ok in [
        "https://oauth2.googleapis.com/token",
        "http://127.0.0.1:8080/token",
        "http://localhost/token",
        "http://tokens.localhost/token",
        "http://169.254.169.254/token",
        "http://[::1]:9/token",
    ] {
        assert!(vertex(ok).is_ok(), "{ok}");
    }
    for bad in [
        "http://tokens.example.com/token",
        "http://10.0.0.7/token",
        "ftp://x/token",
    ] {
        let e = vertex(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad} accepted"));
        let (line, message) = line_of(e);
        assert_eq!(line, 2, "{message}");
        assert!(message.contains("token_url"), "{message}");
    }
}

/// A provider's `discount` comes off its configured and its list prices;
/// one of 1 or more is refused at its line.
#[test]
fn a_providers_discount_comes_off_every_price_of_its_models() {
    let text = "providers:\n  openai: { api: openai, base_url: \"https://api.openai.com/v1\", discount: 0.25 }\nprices:\n  - { provider: openai, model: my-tune, input_per_mtok: 4.0, output_per_mtok: 8.0 }\n";
    let c = Config::parse(text).unwrap_or_else(|e| panic!("{e}"));
    let tuned = c.price_of(0, "my-tune").expect("priced");
    assert_eq!((tuned.input_per_mtok, tuned.output_per_mtok), (3.0, 6.0));
    let listed = c.price_of(0, "gpt-4.1").expect("list price");
    assert_eq!(listed.input_per_mtok, 1.5, "$2.00 less 25 %");
    let e = Config::parse(&text.replace("0.25", "1.5")).expect_err("refused");
    let (line, message) = line_of(e);
    assert_eq!(line, 2, "{message}");
    assert!(message.contains("discount"), "{message}");
}
