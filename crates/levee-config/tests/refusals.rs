//! Settings that used to be silently replaced or ignored are refused, and
//! every refusal carries the line the YAML parser gives for the offending
//! node (never a guess over the text).

use levee_config::{Config, ConfigError, Problem, RouteProblem, StateBackend};
use levee_policy::deadline::DeadlinePolicy;
use levee_policy::{BreakerSettings, Classifier};

/// The error's line and message; panics when it has no line.
fn refused(text: &str) -> (usize, String) {
    match Config::parse(text) {
        Err(ConfigError::AtLine { line, message }) => (line, message.to_string()),
        other => panic!("expected an error with a line for\n{text}\ngot {other:?}"),
    }
}

#[test]
fn zero_replicas_is_refused_not_read_as_one() {
    let (line, msg) = refused("state:\n  backend: redis\n  replicas: 0\n");
    assert_eq!(line, 3, "{msg}");
    assert!(
        msg.contains("state.replicas") && msg.contains("at least 1"),
        "{msg}"
    );
    let c = Config::parse("state: { backend: redis, replicas: 3 }\n").unwrap();
    assert!(matches!(c.state, StateBackend::Redis { replicas: 3, .. }));
}

#[test]
fn a_zero_attempt_timeout_is_refused_not_read_as_no_timeout() {
    let (line, msg) =
        refused("routes:\n  - match: { model_prefix: \"a/\" }\n    attempt_timeout: 0s\n");
    assert_eq!(line, 3, "{msg}");
    assert!(
        msg.contains("route 1 (`a/`)") && msg.contains("`attempt_timeout` must be positive"),
        "{msg}"
    );
    // The key itself is known: a positive value is accepted.
    Config::parse("routes:\n  - match: { model_prefix: \"a/\" }\n    attempt_timeout: 1s\n")
        .expect("a positive attempt_timeout is accepted");
}

#[test]
fn redis_settings_without_the_redis_backend_are_refused_not_ignored() {
    // `on_unavailable: refuse` on the memory backend promised a refusal
    // that never happened.
    for (text, key) in [
        ("state: { on_unavailable: refuse }\n", "on_unavailable"),
        ("state:\n  backend: memory\n  url: redis://h:6379\n", "url"),
    ] {
        let (line, msg) = refused(text);
        assert_eq!(line, text.lines().count(), "{msg}");
        assert!(
            msg.contains(&format!("state.{key}")) && msg.contains("backend: redis"),
            "{msg}"
        );
    }
    assert_eq!(
        Config::parse("state: { backend: memory }\n").unwrap().state,
        StateBackend::Memory
    );
}

#[test]
fn caller_key_digests_are_decoded_once_and_bad_digits_refused() {
    let upper = "AB".repeat(32);
    let c = Config::parse(&format!("keys:\n  - {{ name: a, sha256: {upper} }}\n")).unwrap();
    match &c.keys[0] {
        levee_config::CallerKey::Sha256 { name, digest } => {
            assert_eq!((name.as_str(), *digest), ("a", [0xab; 32]));
        }
        other => panic!("{other:?}"),
    }
    // A `g` among the digits used to be decoded as 0 by the gateway.
    let bad = format!("{}g", "a".repeat(63));
    for digits in [bad.as_str(), "abc"] {
        let text = format!("listen: 127.0.0.1:1\nkeys:\n  - name: a\n    sha256: {digits}\n");
        let (line, msg) = refused(&text);
        assert_eq!(line, 4, "{msg}");
        assert!(msg.contains("64 hex digits"), "{msg}");
    }
    let (line, msg) = refused("keys:\n  - { name: a }\n");
    assert_eq!(line, 2, "{msg}");
    assert!(msg.contains("exactly one of"), "{msg}");
}

#[test]
fn a_bad_value_in_a_block_names_its_own_line() {
    let text = "providers:\n  p:\n    api: openai\n    base_url: http://127.0.0.1:1\n    max_in_flight: 0\n";
    let (line, msg) = refused(text);
    assert_eq!(line, 5, "{msg}");
    assert!(
        msg.contains("providers.p.max_in_flight") && msg.contains("at least 1"),
        "{msg}"
    );
    let (line, msg) = refused("listen: 127.0.0.1:1\nadmin:\n  listen: nowhere\n");
    assert_eq!(line, 3, "{msg}");
    assert!(msg.contains("like `127.0.0.1:8080`"), "{msg}");
    let (line, msg) = refused("providers:\n  p:\n    api: grpc\n    base_url: http://h\n");
    assert_eq!(line, 3, "{msg}");
    assert!(msg.contains("`anthropic` or `openai`"), "{msg}");
    // Inside a target's mapping form, not just "matched no variant".
    let text = "providers:\n  p: { api: openai, base_url: http://h }\nroutes:\n  - targets:\n      - provider: p\n        expected_attempt_ms: 0\n";
    let (line, msg) = refused(text);
    assert_eq!(line, 6, "{msg}");
    assert!(
        msg.contains("expected_attempt_ms") && msg.contains("at least 1"),
        "{msg}"
    );
}

#[test]
fn cross_references_name_the_line_of_the_referring_node() {
    let text = "providers:\n  a: { api: openai, base_url: http://h }\nroutes:\n  - match: { model_prefix: \"x/\" }\n    targets:\n      - a\n      - b\n";
    let (line, msg) = refused(text);
    assert_eq!(line, 7, "{msg}");
    assert!(
        msg.contains("target `b` is not a provider (known: a)"),
        "{msg}"
    );
    let text = "providers:\n  a: { api: openai, base_url: http://h }\nroutes:\n  - match: { model_prefix: \"a/\" }\n  - match: { model_prefix: \"y/\" }\n";
    match Config::parse(text) {
        Err(ConfigError::AtLine {
            line: 5,
            message:
                Problem::Route {
                    number: 2,
                    problem: RouteProblem::NoDefaultTarget { guess },
                    ..
                },
        }) => assert_eq!(guess, "y"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn defaults_are_the_policy_cores_own() {
    let c = Config::parse("").unwrap();
    assert_eq!(
        c.providers[0].breaker.settings(),
        BreakerSettings::default()
    );
    let r = &c.routes[0];
    assert_eq!(r.deadline, DeadlinePolicy::default());
    assert_eq!(r.policy.classifier(), &Classifier::default());
    // A partial block keeps the core's defaults for the rest.
    let c = Config::parse(
        "routes:\n  - deadline: { max: 300s }\n    circuit_breaker: { min_requests: 7 }\n",
    )
    .unwrap();
    let d = DeadlinePolicy::default();
    assert_eq!(
        c.routes[0].deadline.default_deadline(),
        d.default_deadline()
    );
    let b = c.providers[0].breaker.settings();
    assert_eq!(
        b,
        BreakerSettings {
            min_requests: 7,
            ..BreakerSettings::default()
        }
    );
}

#[test]
fn a_missing_file_says_which() {
    let e = Config::load(std::path::Path::new("/nonexistent/levee.yaml")).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert!(e.to_string().contains("/nonexistent/levee.yaml"), "{e}");
}

#[test]
fn an_embedded_configuration_names_lines_of_the_whole_document() {
    #[derive(serde::Deserialize)]
    struct Doc {
        variants: Vec<Variant>,
    }
    #[derive(serde::Deserialize)]
    struct Variant {
        levee: levee_config::raw::RawConfig,
    }
    use levee_config::locate::Seg::{Index, Key};
    let text = "variants:\n  - levee: {}\n  - levee:\n      routes:\n        - retry:\n            max_attempts: 0\n";
    let mut doc: Doc = serde_norway::from_str(text).unwrap();
    let raw = doc.variants.remove(1).levee;
    let at = [Key("variants"), Index(1), Key("levee")];
    let e = Config::from_raw_in(raw, text, &at).unwrap_err();
    assert_eq!(e.line(), Some(6), "{e}");
    assert!(e.to_string().contains("max_attempts"), "{e}");
}

#[test]
fn http2_keys_are_read_checked_and_defaulted() {
    use levee_config::Http2;
    let base = "providers:\n  p:\n    api: openai\n    base_url: https://api.example.com\n";
    let c = Config::parse(base).unwrap();
    assert_eq!(c.providers[0].http2, Http2::Auto);
    assert_eq!(c.providers[0].http2_max_streams, 100);
    let c = Config::parse(&format!(
        "{base}    http2: always\n    http2_max_streams: 7\n"
    ))
    .unwrap();
    assert_eq!(c.providers[0].http2, Http2::Always);
    assert_eq!(c.providers[0].http2_max_streams, 7);
    let c = Config::parse(&format!("{base}    http2: never\n")).unwrap();
    assert_eq!(c.providers[0].http2, Http2::Never);

    let (line, msg) = refused(&format!("{base}    http2: yes\n"));
    assert_eq!(line, 5, "{msg}");
    assert!(
        msg.contains("`http2` must be `auto` or `always` or `never` (got `yes`)"),
        "{msg}"
    );
    let (line, msg) = refused(&format!("{base}    http2_max_streams: 0\n"));
    assert_eq!(line, 5, "{msg}");
    assert!(msg.contains("at least 1"), "{msg}");
    // A stream cap for a provider spoken to over HTTP/1.1 only would be
    // silently unused.
    let (line, msg) = refused(&format!(
        "{base}    http2: never\n    http2_max_streams: 10\n"
    ));
    assert_eq!(line, 6, "{msg}");
    assert!(
        msg.contains("provider `p`") && msg.contains("`http2: never`"),
        "{msg}"
    );
}

#[test]
fn passthrough_paths_are_paths_under_v1_that_levee_does_not_serve_itself() {
    let route = |entries: &str| format!("routes:\n  - passthrough:\n{entries}");
    for (entry, says) in [
        ("files", "under `/v1/`"),
        ("/v2/files", "under `/v1/`"),
        ("/v1/", "under `/v1/`"),
        ("/v1/files?purpose=x", "without `?`"),
        ("/v1/a%2Fb", "without `?`"),
        ("/v1/a b", "visible ASCII"),
        ("/v1//files", "`..` segment"),
        ("/v1/files/../admin", "`..` segment"),
        ("/v1/chat/completions", "serves itself"),
        ("/v1/messages/count_tokens", "serves itself"),
        ("/v1/models/", "serves itself"),
    ] {
        let text = route(&format!("      - \"/v1/batches/\"\n      - \"{entry}\"\n"));
        let (line, msg) = refused(&text);
        assert_eq!(line, 4, "{entry}: {msg}");
        assert!(
            msg.contains("route 1") && msg.contains("`passthrough` entry") && msg.contains(says),
            "{entry}: {msg}"
        );
    }
    let c = Config::parse(&route("      - /v1/files\n      - /v1/batches/\n")).unwrap();
    let r = &c.routes[0];
    assert!(r.passes_through("/v1/files"));
    assert!(
        !r.passes_through("/v1/files/file-1"),
        "exact unless it ends in `/`"
    );
    assert!(r.passes_through("/v1/batches/b1/cancel"));
    assert!(
        !r.passes_through("/v1/batches/"),
        "a prefix needs something after it"
    );
    assert!(!r.passes_through("/v1/batches"));
    assert_eq!(r.once.max_attempts(), 1);
    assert_eq!(
        r.policy.max_attempts(),
        levee_config::defaults::MAX_ATTEMPTS
    );
}

#[test]
fn passthrough_methods_and_admin_hosts_are_checked_where_written() {
    let (line, msg) = refused(
        "routes:\n  - passthrough: [\"/v1/files\"]\n    passthrough_methods: [GET, TRACE]\n",
    );
    assert_eq!(line, 3, "{msg}");
    assert!(msg.contains("`TRACE`") && msg.contains("PATCH"), "{msg}");
    let (_, msg) = refused("routes:\n  - passthrough_methods: [GET]\n");
    assert!(msg.contains("without `passthrough`"), "{msg}");
    let c = Config::parse("routes:\n  - passthrough: [\"/v1/files\"]\n").unwrap();
    let methods: Vec<&str> = c.routes[0]
        .passthrough_methods
        .iter()
        .map(|m| m.as_str())
        .collect();
    assert_eq!(methods, ["GET", "POST", "DELETE"]);
    let (line, msg) = refused("admin:\n  allowed_hosts: [levee-admin, \"http://x:9090\"]\n");
    assert_eq!(line, 2, "{msg}");
    assert!(msg.contains("host name"), "{msg}");
    let c = Config::parse("admin: { allowed_hosts: [Levee-Admin, \"*.svc.cluster.local\"] }\n")
        .unwrap();
    assert_eq!(
        c.admin_allowed_hosts,
        ["levee-admin", "*.svc.cluster.local"]
    );
}

#[test]
fn redis_tls_needs_a_tls_url_and_a_whole_client_pair() {
    let (line, msg) = refused(
        "state:\n  backend: redis\n  url: \"redis://r:6379\"\n  tls: { ca_file: /ca.pem }\n",
    );
    assert_eq!(line, 4, "{msg}");
    assert!(msg.contains("rediss://"), "{msg}");
    let (_, msg) = refused(
        "state:\n  backend: redis\n  url: \"rediss://r:6380\"\n  tls: { cert_file: /c.pem }\n",
    );
    assert!(
        msg.contains("cert_file") && msg.contains("key_file"),
        "{msg}"
    );
    let (_, msg) = refused("state:\n  password_env: X\n");
    assert!(
        msg.contains("state.password_env") && msg.contains("backend: redis"),
        "{msg}"
    );
    Config::parse("state: { backend: redis, url: \"rediss://r:6380\", tls: { ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem }, password_env: P }\n")
        .expect("a whole TLS setting is read (its files are read at start)");
}

#[test]
fn redis_modes_need_their_nodes_and_master_and_nothing_else() {
    let (line, msg) = refused("state:\n  backend: redis\n  mode: cluster\n");
    assert_eq!(line, 3, "{msg}");
    assert!(msg.contains("need `nodes`"), "{msg}");
    let (_, msg) = refused("state:\n  backend: redis\n  nodes: [\"redis://a:1\"]\n");
    assert!(msg.contains("mode: cluster"), "{msg}");
    let (_, msg) =
        refused("state:\n  backend: redis\n  mode: sentinel\n  nodes: [\"redis://s:26379\"]\n");
    assert!(msg.contains("sentinel_master"), "{msg}");
    let (_, msg) = refused("state:\n  backend: redis\n  sentinel_master: levee\n");
    assert!(msg.contains("only with `mode: sentinel`"), "{msg}");
    let (_, msg) = refused("state:\n  backend: redis\n  mode: ring\n");
    assert!(
        msg.contains("standalone") && msg.contains("cluster"),
        "{msg}"
    );
    let c = Config::parse("state: { backend: redis, mode: sentinel, nodes: [\"redis://s:26379\"], sentinel_master: levee }\n").unwrap();
    let StateBackend::Redis { connect, .. } = &c.state else {
        panic!()
    };
    assert_eq!(connect.mode, levee_config::RedisMode::Sentinel);
    assert_eq!(connect.nodes, ["redis://s:26379"]);
}
