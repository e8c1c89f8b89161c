//! `levee check` as a user runs it: the real binary, real files.

mod kit;
use kit::{BIN, CENSUS_ROUTES};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The deadline census (waits of 7 s then 11 s, a primary answering within 35 s
/// and a backup within 30 s) with four callers.
fn seed_004() -> String {
    format!(
        r#"providers:
  primary: {{ api: anthropic, base_url: https://api.anthropic.com }}
  backup: {{ api: openai, base_url: https://api.openai.com }}
{CENSUS_ROUTES}callers:
  - {{ name: interactive request, deadline: 100s }}
  - {{ name: background job, deadline: 200s }}
  - {{ name: queue worker, deadline: 40s }}
  - {{ name: batch job, deadline: 22s }}
"#
    )
}

fn file(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("levee-check-{}-{name}", std::process::id()));
    std::fs::write(&p, text).expect("write temp file");
    p
}

fn check(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("check")
        .args(args)
        .output()
        .expect("run levee")
}

/// `levee check --config FILE`, FILE (in the temp dir) holding `text`.
fn check_config(name: &str, text: &str) -> Output {
    let cfg = file(name, text);
    check(&["--config", cfg.to_str().unwrap()])
}

/// `levee check --config CFG --callers CALLERS EXTRA…`.
fn check_callers(cfg: &Path, callers: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "--config",
        cfg.to_str().unwrap(),
        "--callers",
        callers.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    check(&args)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The census row of `caller`, split into columns.
fn census_row(out: &str, caller: &str) -> Vec<String> {
    let census = out.split("caller census").nth(1).expect("a census section");
    let line = census
        .lines()
        .find(|l| l.trim_start().starts_with(caller))
        .unwrap_or_else(|| panic!("no row for {caller} in:\n{out}"));
    line.trim()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn seed_004_census_says_which_callers_can_retry_and_fall_back() {
    let o = check_config("seed004.yaml", &seed_004());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = stdout(&o);
    // (caller, deadline, retry can start?, fallback reachable?) — the seed's table.
    for (caller, deadline, retry, fallback) in [
        ("interactive request", "100s", "yes", "yes"),
        ("background job", "200s", "yes", "yes"),
        ("queue worker", "40s", "no", "yes"),
        ("batch job", "22s", "no", "no"),
    ] {
        let row = census_row(&out, caller);
        assert_eq!(row[1], deadline, "{row:?}");
        assert_eq!(row[4], retry, "{caller}: {row:?}");
        assert_eq!(row[5], fallback, "{caller}: {row:?}");
    }
    // The deadline shorter than the primary's expected attempt is flagged, and only it.
    assert!(census_row(&out, "batch job")[6].contains("expected_attempt_ms (35s)"));
    assert_eq!(census_row(&out, "queue worker").len(), 6);
}

#[test]
fn seed_004_schedule_derives_72_seconds_for_the_first_retry() {
    let out = stdout(&check_config("seed004-schedule.yaml", &seed_004()));
    let row = |n: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(n))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    // wait 7 s + primary 35 s + backup reserve 30 s + 50 ms margin.
    assert!(row("2 ").contains("retry 7s 7s 72.05s 72.05s"), "{out}");
    assert!(row("3 ").contains("retry 11s 18s 76.05s 83.05s"), "{out}");
    assert!(row("4 ").contains("fallback"), "{out}");
    assert!(row("4 ").contains("30.05s"), "{out}");
}

/// The seed's finding, applied to a static config: a caller whose retry
/// cannot start fails `--strict`, the fallback notwithstanding, unless it
/// is marked as relying on the fallback alone and the fallback can start.
#[test]
fn strict_fails_a_caller_whose_retry_cannot_start_unless_it_relies_on_the_fallback() {
    let cfg = file("seed004-strict.yaml", &seed_004());
    let o = check(&["--config", cfg.to_str().unwrap(), "--strict"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("`batch job`"), "{err}");
    assert!(
        err.contains("caller `queue worker` cannot retry on route `claude/`: raise `queue worker`'s timeout to 73s"),
        "the fallback does not excuse it: {err}"
    );

    // Without the batch job, and with the queue worker relying on the
    // fallback, every caller passes.
    let callers = file(
        "callers.yaml",
        "- { name: interactive request, deadline: 100s }\n- { name: queue worker, deadline: 40s, fallback_only: true }\n",
    );
    let o = check_callers(&cfg, &callers, &["--strict"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!stdout(&o).contains("batch job"));
}

#[test]
fn an_invalid_config_exits_1_naming_the_line() {
    let o = check_config(
        "invalid.yaml",
        "routes:\n  - match: { model_prefix: \"a/\" }\n    retry:\n      max_attempts: 0\n",
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("config line 4"), "{err}");
    assert!(err.contains("max_attempts"), "{err}");
    assert!(stdout(&o).is_empty());
}

#[test]
fn a_malformed_callers_file_exits_1_naming_the_line() {
    let cfg = file("seed004-callers.yaml", &seed_004());
    let callers = file(
        "bad-callers.yaml",
        "- { name: ok, deadline: 10s }\n- { name: typo, deadlien: 10s }\n",
    );
    let o = check_callers(&cfg, &callers, &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("line 2"), "{err}");
    assert!(err.contains("deadlien"), "{err}");
}

#[test]
fn a_cross_dialect_fallback_is_warned_about() {
    let o = check_config("cross.yaml", &seed_004());
    assert!(o.status.success());
    let out = stdout(&o);
    let warning = out
        .lines()
        .find(|l| {
            l.contains("warning: backup (gpt-4.1) speak(s) openai, not the anthropic dialect")
        })
        .unwrap_or_else(|| panic!("no cross-dialect warning in:\n{out}"));
    assert!(
        warning.contains("levee_translation_refused_total"),
        "{warning}"
    );
    assert!(warning.contains("thinking"), "{warning}");
    let out = stdout(&check_config(
        "same.yaml",
        "providers:\n  a: { api: openai, base_url: https://a.example }\n  b: { api: openai, base_url: https://b.example }\nroutes:\n  - targets: [a, b]\n",
    ));
    assert!(!out.contains("warning: "), "{out}");
}

#[test]
fn check_prints_each_providers_and_routes_effective_in_flight_cap() {
    let o = check_config(
        "caps.yaml",
        "providers:\n  a: { api: openai, base_url: http://127.0.0.1:1, rate_limit: { requests_per_minute: 3000 } }\n  b: { api: openai, base_url: http://127.0.0.1:2 }\n  c: { api: openai, base_url: http://127.0.0.1:3, max_in_flight: 40 }\nroutes:\n  - match: { model_prefix: \"x/\" }\n    targets: [a, b, c]\n    expected_attempt_ms: 6000\n  - match: { model_prefix: \"y/\" }\n    targets: [b]\n    max_in_flight: 50\n",
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{out}");
    let line = |start: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line starting `{start}` in:\n{out}"))
            .to_string()
    };
    // 3,000/min for 6 s each: 300 in flight, plus the burst of 50.
    assert!(
        line("provider `a`").contains("max_in_flight 350 (derived"),
        "{out}"
    );
    assert!(line("provider `b`").contains("max_in_flight none"), "{out}");
    assert!(
        line("provider `c`").contains("max_in_flight 40 (configured)"),
        "{out}"
    );
    let x = out.split("route `x/`").nth(1).unwrap_or("");
    assert!(x.contains("max_in_flight 1024 (default)"), "{out}");
    let y = out.split("route `y/`").nth(1).unwrap_or("");
    assert!(y.contains("max_in_flight 50 (configured)"), "{out}");
}

#[test]
fn a_malformed_redis_url_is_refused_by_check_and_serve_without_showing_its_password() {
    // What the redis client rejects: a port that is not a number.
    let cfg = file(
        "bad-redis.yaml",
        "state: { backend: redis, url: \"redis://:hunter2-s3cret@cache.internal:63x79/0\" }\n",
    );
    let o = check(&["--config", cfg.to_str().unwrap()]);
    let all = format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "check accepted it:\n{all}");
    assert!(all.contains("state.url"), "{all}");
    assert!(!all.contains("hunter2"), "the password is shown:\n{all}");
    let serve = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("run levee serve");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&serve.stdout),
        String::from_utf8_lossy(&serve.stderr)
    );
    assert_eq!(serve.status.code(), Some(1), "{all}");
    assert!(!all.contains("hunter2"), "the password is shown:\n{all}");
}

/// `levee check` with `env` set (and the test's key variables removed
/// first, so the outcome does not depend on the machine).
fn check_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("check").args(args);
    for var in [UNSET_PROVIDER_KEY, UNSET_CALLER_KEY, UNSET_HEADER] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run levee")
}

const UNSET_PROVIDER_KEY: &str = "LEVEE_CHECK_TEST_PROVIDER_KEY";
const UNSET_CALLER_KEY: &str = "LEVEE_CHECK_TEST_CALLER_KEY";
const UNSET_HEADER: &str = "LEVEE_CHECK_TEST_HEADER";

#[test]
fn an_unset_key_variable_fails_check_as_it_fails_serve_unless_allowed_missing() {
    let cfg = unset_env_config();
    let cfg = cfg.to_str().unwrap();
    // Default, and with --probe: an error naming the provider, the variable
    // and its line, and what to do; no "valid".
    for extra in [&[][..], &["--probe", "--probe-timeout-ms", "500"][..]] {
        assert_check_names_each_unset_variable(cfg, extra);
    }
    // serve refuses the same file for the same reason.
    let serve = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(["--config", cfg])
        .env_remove(UNSET_PROVIDER_KEY)
        .env_remove(UNSET_CALLER_KEY)
        .env_remove(UNSET_HEADER)
        .output()
        .expect("run levee serve");
    assert_eq!(serve.status.code(), Some(1), "{}", text(&serve));
    assert!(
        String::from_utf8_lossy(&serve.stderr).contains(UNSET_PROVIDER_KEY),
        "{}",
        text(&serve)
    );
    assert_allow_missing_env_warns_of_each_variable(cfg);
    // All set: valid, no warning.
    let all = [
        (UNSET_PROVIDER_KEY, "sk-test"),
        (UNSET_HEADER, "tenant"),
        (UNSET_CALLER_KEY, "caller"),
    ];
    let o = check_env(&["--config", cfg], &all);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    // A key serve cannot send (not a header value) is refused even with the
    // flag: it is set, not missing.
    let bad = [
        (UNSET_PROVIDER_KEY, "sk-\ntest"),
        (UNSET_HEADER, "tenant"),
        (UNSET_CALLER_KEY, "caller"),
    ];
    let o = check_env(&["--config", cfg, "--allow-missing-env"], &bad);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not a valid header value"),
        "{}",
        text(&o)
    );
}

/// A config whose provider key, provider header and caller key each come
/// from an environment variable the tests leave unset.
fn unset_env_config() -> PathBuf {
    file(
        "unset-env.yaml",
        &format!(
            "providers:\n  plain: {{ api: openai, base_url: \"http://127.0.0.1:9\" }}\n  keyed:\n    api: anthropic\n    base_url: \"http://127.0.0.1:9\"\n    api_key_env: {UNSET_PROVIDER_KEY}\n    headers:\n      x-tenant: {{ env: {UNSET_HEADER} }}\nkeys:\n  - {{ name: app, env: {UNSET_CALLER_KEY} }}\nroutes:\n  - targets: [keyed, plain]\n"
        ),
    )
}

/// A run's stdout then stderr.
fn text(o: &Output) -> String {
    format!(
        "{}{}",
        stdout(o),
        String::from_utf8_lossy(&o.stderr).into_owned()
    )
}

/// `levee check` of `cfg` (with `extra` flags) with the variables unset
/// fails with an error naming the provider, each variable and its line,
/// and what to do; no "valid".
fn assert_check_names_each_unset_variable(cfg: &str, extra: &[&str]) {
    let mut args = vec!["--config", cfg];
    args.extend_from_slice(extra);
    let o = check_env(&args, &[]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{extra:?}: {}", text(&o));
    assert!(!stdout(&o).contains("valid"), "{extra:?}: {}", text(&o));
    assert!(
        err.contains(&format!(
            "config line 6: provider `keyed`: environment variable `{UNSET_PROVIDER_KEY}` (api_key_env) is not set"
        )) && err.contains(&format!(
            "config line 8: provider `keyed`: environment variable `{UNSET_HEADER}` (named in `headers`) is not set"
        )) && err.contains(&format!(
            "config line 10: caller key `app`: environment variable `{UNSET_CALLER_KEY}` is not set"
        )) && err.contains("`levee serve` and a SIGHUP reload refuse this config")
            && err.contains("pass --allow-missing-env"),
        "{extra:?}: {err}"
    );
}

/// --allow-missing-env: valid, with a warning per variable.
fn assert_allow_missing_env_warns_of_each_variable(cfg: &str) {
    let o = check_env(&["--config", cfg, "--allow-missing-env"], &[]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stdout(&o).contains("valid"), "{}", text(&o));
    assert_eq!(err.matches("levee check: warning:").count(), 3, "{err}");
    assert!(
        err.contains(UNSET_PROVIDER_KEY)
            && err.contains(UNSET_HEADER)
            && err.contains(UNSET_CALLER_KEY),
        "{err}"
    );
}

#[test]
fn each_route_is_run_through_three_incidents_and_a_route_worse_than_no_gateway_is_flagged() {
    // The retry block of the seed incident report: three attempts, 429 not
    // retried. Levee tells callers not to retry, so in a 429 storm that a
    // second attempt wins it answers about half of what the SDK alone does.
    let seed = "providers:\n  openai: { api: openai, base_url: https://api.openai.com/v1 }\nroutes:\n  - match: { model_prefix: \"openai/\" }\n    targets: [openai]\n    retry: { max_attempts: 3, on: [500, 502, 503, 504, timeout, connect_error] }\n";
    let o = check_config("seed-retry.yaml", seed);
    let (out, err) = (stdout(&o), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("incidents predicted"), "{out}");
    let row = |incident: &str| {
        out.lines()
            .find(|l| l.contains("openai/") && l.contains(incident))
            .unwrap_or_else(|| panic!("no row for {incident}: {out}"))
            .to_string()
    };
    assert!(row("60% 429").ends_with("WORSE than no gateway"), "{out}");
    assert!(row("30% 503 brownout").ends_with("ok"), "{out}");
    assert!(row("primary down").ends_with("ok"), "{out}");
    assert!(
        err.contains("route `openai/` does not retry 429 or 529"),
        "{err}"
    );
    assert!(err.contains("in a 60% 429, retry-after 2"), "{err}");
    // --strict fails it.
    let cfg = file("seed-retry-strict.yaml", seed);
    let o = check(&["--config", cfg.to_str().unwrap(), "--strict"]);
    assert_eq!(o.status.code(), Some(1));

    // Levee's defaults (no retry block): no row worse, no warning.
    let defaults = "providers:\n  openai: { api: openai, base_url: https://api.openai.com/v1 }\nroutes:\n  - match: { model_prefix: \"openai/\" }\n    targets: [openai]\n";
    let o = check_config("defaults.yaml", defaults);
    let (out, err) = (stdout(&o), String::from_utf8_lossy(&o.stderr).into_owned());
    assert_eq!(out.matches(" ok\n").count(), 3, "{out}");
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn routing_warnings_name_the_lines_of_what_would_reach_the_wrong_model() {
    let text = r#"providers:
  anthropic: { api: anthropic, base_url: https://api.anthropic.com }
  openai: { api: openai, base_url: https://api.openai.com/v1 }
  bedrock: { api: bedrock, region: us-east-1 }
routes:
  - match: { model_prefix: "gpt-4o" }
    targets: [{ provider: openai, model: gpt-4o }]
  - match: { model_prefix: "gpt-4o-mini" }
    targets: [openai]
  - match: { model_prefix: "claude/" }
    targets: [anthropic]
  - match: { model_prefix: "claude-" }
    targets:
      - anthropic
      - { provider: bedrock, model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0" }
  - match: { models: [gpt-4o] }
    targets: [openai]
"#;
    let out = check_config("routing.yaml", text);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    for want in [
        "line 8: route `gpt-4o-mini` is never reached: route `gpt-4o` (line 6)",
        "line 6: route `gpt-4o` sends every model that starts with `gpt-4o` to openai as `gpt-4o`",
        "line 10: route `claude/` sends anthropic `claude/…` without `claude/`",
        // The failover once documented: every Claude model answered by Sonnet.
        "line 12: route `claude-` sends every model that starts with `claude-` to bedrock",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
    // An exact name is never hidden by a prefix.
    assert!(!text.contains("route `gpt-4o` is never reached"), "{text}");
    // The shipped example routes nothing to the wrong model.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../levee.example.yaml");
    let out = check(&["--config", example, "--allow-missing-env"]);
    assert!(!stdout(&out).contains("\nrouting\n"), "{}", stdout(&out));
}

#[test]
fn an_unreadable_redis_ca_file_is_named_by_check() {
    let text = "state:\n  backend: redis\n  url: \"rediss://redis.internal:6380\"\n  tls: { ca_file: /nonexistent/levee-redis-ca.pem }\n";
    let out = check_config("redis-ca.yaml", text);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let all = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(
        all.contains("ca_file")
            && all.contains("/nonexistent/levee-redis-ca.pem")
            && all.contains("line 4"),
        "{all}"
    );
    let not_pem = file("not-a-ca.pem", "hello\n");
    let text = text.replace(
        "/nonexistent/levee-redis-ca.pem",
        &not_pem.display().to_string(),
    );
    let out = check_config("redis-ca-2.yaml", &text);
    let all = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("no PEM certificate"), "{all}");
}

#[test]
fn check_reads_every_redis_deployment_without_connecting() {
    for state in [
        "state: { backend: redis, url: \"redis://127.0.0.1:6379\" }\n",
        "state: { backend: redis, mode: cluster, nodes: [\"redis://127.0.0.1:7000\", \"redis://127.0.0.1:7001\"] }\n",
        "state: { backend: redis, mode: sentinel, nodes: [\"redis://127.0.0.1:26379\"], sentinel_master: levee }\n",
    ] {
        let out = check_config("redis-modes.yaml", state);
        let all = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{state}{all}");
        assert!(!all.contains("panicked"), "{all}");
    }
}

#[test]
fn check_lists_the_models_a_route_sends_that_have_no_price() {
    let text = "providers:\n  vllm: { api: openai, base_url: \"http://10.0.0.5:8000/v1\" }\n  openai: { api: openai, base_url: \"https://api.openai.com/v1\" }\nroutes:\n  - match: { model: llama-70b }\n    targets: [vllm]\n  - match: { model: gpt-4o }\n    targets: [openai]\n";
    let out = check_config("unpriced.yaml", text);
    let all = stdout(&out);
    assert!(
        all.contains("line 5: route") && all.contains("`llama-70b` to vllm, which has no price"),
        "{all}"
    );
    assert!(
        !all.contains("`gpt-4o` to openai"),
        "a list price is a price: {all}"
    );
    let priced = format!(
        "{text}prices:\n  - {{ provider: vllm, model: llama-70b, input_per_mtok: 0.2, output_per_mtok: 0.2 }}\n"
    );
    let out = check_config("priced.yaml", &priced);
    assert!(!stdout(&out).contains("no price"), "{}", stdout(&out));
}

/// `--strict` fails a caller whose retry cannot start, with the fix in
/// words, unless it relies on the fallback alone (`fallback_only: true`)
/// and the fallback can start: the shipped example passes; without its
/// `fallback_only` marks, queue-worker and batch-job fail it.
#[test]
fn strict_fails_a_caller_that_cannot_retry_and_says_what_to_change() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../levee.example.yaml");
    let out = check(&["--config", example, "--allow-missing-env", "--strict"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(example).expect("example config");
    let unmarked = text.replace(", fallback_only: true", "");
    let cfg = file("unmarked.yaml", &unmarked);
    let cfg = cfg.to_str().expect("a UTF-8 temp path");
    let strict = check(&["--config", cfg, "--allow-missing-env", "--strict"]);
    let err = String::from_utf8_lossy(&strict.stderr).into_owned();
    assert_eq!(strict.status.code(), Some(1), "{err}");
    assert!(
        err.contains("caller `queue-worker` cannot retry on route `claude-sonnet-4-5`: raise `queue-worker`'s timeout to 41s, or lower the primary's `expected_attempt_ms` to 19800"),
        "{err}"
    );
    assert!(
        err.contains("caller `batch-job` cannot retry on route `anthropic/`"),
        "{err}"
    );
    assert!(!err.contains("interactive-request"), "{err}");
}

/// Twenty routes to one provider share one retry floor per model: `levee
/// check` says so (5 a second in an outage, not 100); one route says
/// nothing.
#[test]
fn check_shows_the_retry_floor_routes_to_one_provider_share() {
    let mut text = String::from(
        "providers:\n  p: { api: openai, base_url: \"http://127.0.0.1:9\" }\nroutes:\n",
    );
    for i in 0..20 {
        text.push_str(&format!(
            "  - {{ match: {{ model_prefix: \"r{i}/\" }}, targets: [p] }}\n"
        ));
    }
    let out = stdout(&check_config("floors.yaml", &text));
    assert!(out.contains("retry floors"), "{out}");
    assert!(
        out.contains("p: 5/s per model, shared by 20 routes"),
        "{out}"
    );
    let one = "providers:\n  p: { api: openai, base_url: \"http://127.0.0.1:9\" }\nroutes:\n  - targets: [p]\n";
    assert!(!stdout(&check_config("one-floor.yaml", one)).contains("retry floors"));
}
