//! The shipped `levee.example.yaml`, its providers pointed at mocks as
//! strict as the real APIs — each serves only its own model names and
//! answers any other 404 `model_not_found` — gets an answer on every route,
//! and each provider is sent the model the config says: the Claude failover
//! reaches Bedrock with Bedrock's model ID, and Anthropic is never sent a
//! name with part of it cut off.

mod support;
use levee_mock::bedrock_keys::{TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY};
use levee_mock::{parse_faults, InProcess, MockApi, MockOptions};
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(60);
const BEDROCK_MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const ANTHROPIC_VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

/// A strict mock of `api` serving only `models`.
fn strict(api: MockApi, models: &str) -> InProcess {
    InProcess::new(MockOptions {
        faults: parse_faults(&format!("models: [{models}]\n")).unwrap(),
        seed: 7,
        api,
        ..Default::default()
    })
}

/// The example's text with its providers on `{mock0}` (Anthropic),
/// `{mock1}` (OpenAI) and `{mock2}` (Bedrock, test keys from `keys`), and
/// no key variables (the mocks take none).
fn example_on_mocks(keys: &std::path::Path) -> String {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../levee.example.yaml"
    ))
    .unwrap();
    let mut out = String::new();
    for line in text.lines() {
        // The test's own support sets `shutdown_grace`; the mocks take no key.
        if line.trim_start().starts_with("api_key_env:") || line.starts_with("shutdown_grace:") {
            continue;
        }
        let line = line
            .replace("https://api.anthropic.com", "{mock0}")
            .replace("https://api.openai.com/v1", "{mock1}/v1");
        out.push_str(&line);
        out.push('\n');
        if line.trim_start().starts_with("region: us-east-1") {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!(
                "{indent}base_url: \"{{mock2}}\"\n{indent}credentials_file: \"{}\"\n",
                keys.display()
            ));
        }
    }
    for want in ["{mock0}", "{mock1}", "{mock2}"] {
        assert!(
            out.contains(want),
            "levee.example.yaml no longer has what this test points at the mocks ({want})"
        );
    }
    out
}

async fn ask(env: &Local, path: &str, model: &str) -> Resp {
    let body = format!(
        r#"{{"model":"{model}","max_tokens":32,"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    watchdog(WATCHDOG, env.post(path, &body, &[ANTHROPIC_VERSION])).await
}

#[tokio::test(start_paused = true)]
async fn every_route_of_the_shipped_example_answers_against_strict_mocks() {
    let dir = std::env::temp_dir().join(format!("levee-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("credentials");
    std::fs::write(
        &keys,
        format!("[default]\naws_access_key_id = {TEST_ACCESS_KEY_ID}\naws_secret_access_key = {TEST_SECRET_ACCESS_KEY}\n"),
    )
    .unwrap();
    let mocks = vec![
        strict(
            MockApi::Anthropic,
            "claude-sonnet-4-5, claude-sonnet-4-5-20250929, claude-haiku-4-5",
        ),
        strict(MockApi::OpenAi, "gpt-4.1, gpt-4o-mini"),
        InProcess::new(MockOptions {
            api: MockApi::Bedrock,
            ..Default::default()
        }),
    ];
    let env = local_with(mocks, &example_on_mocks(&keys));

    // `anthropic/<model>`: Anthropic is sent `<model>`.
    let r = ask(&env, "/v1/messages", "anthropic/claude-haiku-4-5").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(env.stats(0).by_model.get("claude-haiku-4-5"), Some(&1));
    // `openai/<model>`: OpenAI is sent `<model>`.
    let r = ask(&env, "/v1/chat/completions", "openai/gpt-4o-mini").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(env.stats(1).by_model.get("gpt-4o-mini"), Some(&1));
    // The Claude failover: Anthropic is sent the caller's name as written.
    let r = ask(&env, "/v1/messages", "claude-sonnet-4-5").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "anthropic");
    assert_eq!(env.stats(0).by_model.get("claude-sonnet-4-5"), Some(&1));
    // Anthropic overloaded: Bedrock answers, sent Bedrock's model ID.
    env.mocks[0].set_faults(
        parse_faults("models: [claude-sonnet-4-5]\nfaults:\n  - { status: 529 }\n").unwrap(),
    );
    let r = ask(&env, "/v1/messages", "claude-sonnet-4-5").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-levee-target"), "bedrock");
    assert_eq!(
        env.stats(2).by_model.get(BEDROCK_MODEL),
        Some(&1),
        "{:?}",
        env.stats(2)
    );
    // No provider was ever sent a name it does not serve.
    for i in 0..2 {
        let s = env.stats(i);
        assert!(
            !s.by_status.contains_key("404"),
            "mock {i} answered 404: {s:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn a_prefix_that_is_part_of_model_names_is_sent_up_whole() {
    // The failover as it was once documented: `claude-` to Anthropic with
    // no model of its own. Cut at the prefix, Anthropic was sent
    // `sonnet-4-5` and answered 404, which no backup can fix.
    let config = "providers:\n  an: { api: anthropic, base_url: \"{mock0}\" }\nroutes:\n  - match: { model_prefix: \"claude-\" }\n    targets: [an]\n  - match: { model_prefix: \"anthropic:\" }\n    targets: [an]\n";
    let env = local_with(
        vec![strict(
            MockApi::Anthropic,
            "claude-sonnet-4-5, claude-haiku-4-5",
        )],
        config,
    );
    for (asked, sent) in [
        ("claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("anthropic:claude-haiku-4-5", "claude-haiku-4-5"),
    ] {
        let r = ask(&env, "/v1/messages", asked).await;
        assert_eq!(r.status, 200, "{asked}: {}", r.text());
        assert_eq!(env.stats(0).by_model.get(sent), Some(&1), "{asked}");
    }
}
