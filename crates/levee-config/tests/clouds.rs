//! The cloud provider kinds: each takes its own keys, is refused the
//! others' and the keys its auth makes pointless, and gets the base URL and
//! auth its SDK uses when they are left out.

use levee_config::{Api, Auth, Config, ConfigError, Platform};

fn refused(text: &str) -> (usize, String) {
    match Config::parse(text) {
        Err(ConfigError::AtLine { line, message }) => (line, message.to_string()),
        other => panic!("expected an error with a line for\n{text}\ngot {other:?}"),
    }
}

fn provider(text: &str) -> levee_config::Provider {
    let c = Config::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    c.providers
        .into_iter()
        .find(|p| p.name == "p")
        .expect("provider p")
}

#[test]
fn bedrock_needs_a_region_and_signs_instead_of_sending_a_key() {
    let p = provider("providers:\n  p:\n    api: bedrock\n    region: eu-west-3\n");
    assert_eq!(p.api, Api::Anthropic);
    assert_eq!(
        p.base_url.to_string(),
        "https://bedrock-runtime.eu-west-3.amazonaws.com/"
    );
    assert!(matches!(&p.platform, Platform::Bedrock { region, .. } if region == "eu-west-3"));
    assert_eq!(p.auth, Auth::None);

    let (line, msg) = refused("providers:\n  p:\n    api: bedrock\n");
    assert_eq!(line, 3, "{msg}");
    assert!(msg.contains("needs `region`"), "{msg}");
    let (line, msg) =
        refused("providers:\n  p:\n    api: bedrock\n    region: us-east-1\n    api_key_env: K\n");
    assert_eq!(line, 5, "{msg}");
    assert!(msg.contains("remove `api_key_env`"), "{msg}");
}

#[test]
fn vertex_needs_a_project_and_a_region_and_knows_its_urls() {
    let p = provider(
        "providers:\n  p:\n    api: vertex\n    region: us-east5\n    project: proj\n    token_url: http://127.0.0.1:1/token\n",
    );
    assert_eq!(p.api, Api::Anthropic);
    assert_eq!(
        p.base_url.to_string(),
        "https://us-east5-aiplatform.googleapis.com/"
    );
    let p = provider(
        "providers:\n  p:\n    api: vertex-openai\n    region: global\n    project: proj\n",
    );
    assert_eq!(p.api, Api::OpenAi);
    assert_eq!(p.base_url.to_string(), "https://aiplatform.googleapis.com/");
    assert!(matches!(p.platform, Platform::Vertex { openai: true, .. }));
    let (_, msg) = refused("providers:\n  p:\n    api: vertex\n    region: us-east5\n");
    assert!(msg.contains("needs `project`"), "{msg}");
}

#[test]
fn azure_sends_an_api_key_and_takes_a_token_file_instead() {
    let p = provider(
        "providers:\n  p:\n    api: azure\n    base_url: https://r.openai.azure.com\n    api_key_env: AZ\n    api_version: \"2024-10-21\"\n",
    );
    assert_eq!(p.api, Api::OpenAi);
    assert_eq!(p.auth, Auth::Header("api-key".into()));
    let (line, msg) = refused(
        "providers:\n  p:\n    api: azure\n    base_url: https://r.openai.azure.com\n    api_key_env: AZ\n    token_file: /t\n",
    );
    assert_eq!(line, 6, "{msg}");
    assert!(msg.contains("keep one"), "{msg}");
    let (_, msg) = refused("providers:\n  p:\n    api: azure\n");
    assert!(msg.contains("needs `base_url`"), "{msg}");
}

#[test]
fn a_cloud_key_on_another_kind_is_refused_naming_the_kinds_it_belongs_to() {
    let (line, msg) = refused(
        "providers:\n  p:\n    api: openai\n    base_url: https://x\n    region: us-east-1\n",
    );
    assert_eq!(line, 5, "{msg}");
    assert!(msg.contains("`region` is for `api: bedrock`"), "{msg}");
    let (_, msg) = refused(
        "providers:\n  p:\n    api: bedrock\n    region: us-east-1\n    api_version: \"1\"\n",
    );
    assert!(msg.contains("`api_version` is for `api: azure`"), "{msg}");
}

#[test]
fn gemini_defaults_to_its_openai_compatible_endpoint() {
    let p = provider("providers:\n  p:\n    api: gemini\n    api_key_env: G\n");
    assert_eq!(p.api, Api::OpenAi);
    assert_eq!(p.platform, Platform::Gemini);
    assert_eq!(
        p.base_url.to_string(),
        "https://generativelanguage.googleapis.com/v1beta/openai"
    );
    assert_eq!(p.auth, Auth::Bearer);
}
