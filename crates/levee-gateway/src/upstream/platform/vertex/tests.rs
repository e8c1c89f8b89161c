//! The Vertex AI platform's unit tests: URLs and bodies, token requests
//! and their cache, and Google's error shapes.

use super::tokens::*;
use super::*;
use crate::upstream::platform::google::dialect_error;

const KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../levee-mock/testdata/vertex-test-service-account.json"
);

fn provider(yaml_extra: &str, api: &str) -> Provider {
    let text = format!(
        "providers:\n  v: {{ api: {api}, region: us-east5, project: my-proj, base_url: \"http://v.test\"{yaml_extra} }}\nroutes:\n  - targets: [v]\n"
    );
    let config = levee_config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    config.providers[0].clone()
}

fn vertex(yaml_extra: &str, api: &str) -> Vertex {
    let p = provider(yaml_extra, api);
    let dial: crate::upstream::transport::Dial = Arc::new(|_: &http::Uri| None);
    Vertex::new(&p, &Connector::Memory(dial)).unwrap_or_else(|e| panic!("{e}"))
}

fn json(b: &Bytes) -> Value {
    serde_json::from_slice(b).unwrap()
}

#[test]
fn a_message_goes_to_raw_predict_with_the_model_in_the_path() {
    let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
    let body = Bytes::from_static(
        br#"{"model":"claude-sonnet-4@20250514","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    let (path, out) = v.target("/v1/messages", &body).unwrap().unwrap();
    assert_eq!(
        path,
        "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict"
    );
    let out = json(&out);
    assert!(out.get("model").is_none());
    assert_eq!(out["anthropic_version"], "vertex-2023-10-16");
    assert_eq!(out["max_tokens"], 5);
    assert!(out.get("stream").is_none());
}

#[test]
fn a_stream_goes_to_stream_raw_predict_and_keeps_its_stream_flag() {
    let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
    let body = Bytes::from_static(
        br#"{"model":"claude-3-5-haiku@20241022","stream":true,"max_tokens":5,"messages":[]}"#,
    );
    let (path, out) = v.target("/v1/messages?beta=true", &body).unwrap().unwrap();
    assert!(
        path.ends_with("/models/claude-3-5-haiku@20241022:streamRawPredict"),
        "{path}"
    );
    assert_eq!(json(&out)["stream"], true);
}

#[test]
fn a_token_count_keeps_its_model_in_the_body() {
    let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
    let body = Bytes::from_static(br#"{"model":"claude-sonnet-4@20250514","messages":[]}"#);
    let (path, out) = v
        .target("/v1/messages/count_tokens", &body)
        .unwrap()
        .unwrap();
    assert_eq!(
        path,
        "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict"
    );
    let out = json(&out);
    assert_eq!(out["model"], "claude-sonnet-4@20250514");
    assert_eq!(out["anthropic_version"], "vertex-2023-10-16");
}

#[test]
fn a_model_name_cannot_break_out_of_its_path_segment() {
    let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
    let body = Bytes::from_static(br#"{"model":"../x;y?z#w","messages":[]}"#);
    let (path, _) = v.target("/v1/messages", &body).unwrap().unwrap();
    assert!(
        path.ends_with("/models/..%2Fx%3By%3Fz%23w:rawPredict"),
        "{path}"
    );
}

#[test]
fn what_vertex_does_not_serve_is_refused_with_what_it_does() {
    let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
    let e = v
        .target("/v1/messages/batches", &Bytes::from_static(b"{}"))
        .unwrap_err();
    assert!(e.contains("/v1/messages/count_tokens"), "{e}");
    let e = v
        .target("/v1/messages", &Bytes::from_static(br#"{"messages":[]}"#))
        .unwrap_err();
    assert!(e.contains("`model`"), "{e}");
    let o = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex-openai");
    let e = o
        .target("/v1/responses", &Bytes::from_static(b"{}"))
        .unwrap_err();
    assert!(e.contains("/v1/chat/completions"), "{e}");
}

#[test]
fn gemini_goes_to_the_openai_compatible_endpoint_with_its_body_unchanged() {
    let o = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex-openai");
    let body = Bytes::from_static(br#"{"model":"google/gemini-2.0-flash","messages":[]}"#);
    let (path, out) = o.target("/v1/chat/completions", &body).unwrap().unwrap();
    assert_eq!(
        path,
        "/v1/projects/my-proj/locations/us-east5/endpoints/openapi/chat/completions"
    );
    assert_eq!(out, body);
}

#[test]
fn a_base_url_ending_in_v1_is_not_given_a_second_one() {
    let text = format!(
        "providers:\n  v: {{ api: vertex, region: global, project: p, base_url: \"https://aiplatform.googleapis.com/v1\", credentials_file: \"{KEY}\" }}\nroutes:\n  - targets: [v]\n"
    );
    let config = levee_config::Config::parse(&text).unwrap();
    let dial: crate::upstream::transport::Dial = Arc::new(|_: &http::Uri| None);
    let v = Vertex::new(&config.providers[0], &Connector::Memory(dial)).unwrap();
    let body = Bytes::from_static(br#"{"model":"m","messages":[]}"#);
    let (path, _) = v.target("/v1/messages", &body).unwrap().unwrap();
    assert!(path.starts_with("/projects/p/locations/global/"), "{path}");
}

#[test]
fn google_errors_become_the_dialects_own_with_the_same_status() {
    let quota = br#"{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model","status":"RESOURCE_EXHAUSTED"}}"#;
    let a = dialect_error(quota, Dialect::Anthropic, 429).unwrap();
    let a = json(&a);
    assert_eq!(a["type"], "error");
    assert_eq!(a["error"]["type"], "rate_limit_error");
    assert!(a["error"]["message"]
        .as_str()
        .unwrap()
        .contains("RESOURCE_EXHAUSTED"));
    let o = json(&dialect_error(quota, Dialect::OpenAi, 429).unwrap());
    assert_eq!(o["error"]["code"], "rate_limit_exceeded");
    // A JSON array of them, as the OpenAI-compatible endpoint sends.
    let unavailable =
        br#"[{"error":{"code":503,"message":"The service is currently unavailable.","status":"UNAVAILABLE"}}]"#;
    let a = json(&dialect_error(unavailable, Dialect::Anthropic, 503).unwrap());
    assert_eq!(a["error"]["type"], "overloaded_error");
    // Already the dialect's own (Anthropic's 529 relayed by Vertex): unchanged.
    let own = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    assert!(dialect_error(own, Dialect::Anthropic, 529).is_none());
    assert!(dialect_error(b"<html>502</html>", Dialect::Anthropic, 502).is_none());
}

#[test]
fn the_chain_ends_at_the_metadata_server_and_a_bad_key_file_is_named_without_its_contents() {
    let p = provider("", "vertex");
    let dial: crate::upstream::transport::Dial = Arc::new(|_: &http::Uri| None);
    let c = Connector::Memory(dial);
    // Application Default Credentials: with no file named anywhere, the
    // metadata server (the variable may be set on a developer's machine:
    // this test only runs the check when it is not).
    if std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").is_none()
        && std::env::var_os("GCE_METADATA_HOST").is_none()
    {
        let v = Vertex::new(&p, &c).unwrap();
        assert!(format!("{v:?}").contains("metadata server"), "{v:?}");
    }
    let dir = std::env::temp_dir().join(format!("levee-vertex-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("user.json");
    // User credentials without their client: named, the secret not shown.
    std::fs::write(
        &bad,
        r#"{"type":"authorized_user","refresh_token":"1//secret-refresh"}"#,
    )
    .unwrap();
    let p = provider(
        &format!(", credentials_file: \"{}\"", bad.display()),
        "vertex",
    );
    let e = Vertex::new(&p, &c).unwrap_err().to_string();
    assert!(
        e.contains("authorized_user") && e.contains("client_id") && !e.contains("secret-refresh"),
        "{e}"
    );
    let broken = dir.join("broken.json");
    std::fs::write(
        &broken,
        r#"{"type":"service_account","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nnot-a-key\n-----END PRIVATE KEY-----\n"}"#,
    )
    .unwrap();
    let p = provider(
        &format!(", credentials_file: \"{}\"", broken.display()),
        "vertex",
    );
    let e = Vertex::new(&p, &c).unwrap_err().to_string();
    assert!(
        e.contains("not an RSA private key") && !e.contains("not-a-key"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_assertion_is_an_rs256_jwt_bearer_grant_for_the_token_endpoint() {
    let key = ServiceAccount::load(Path::new(KEY), Some("http://mock0.localhost/token")).unwrap();
    let jwt = key.assertion(1_700_000_000).unwrap();
    let public = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../levee-mock/testdata/vertex-test-service-account.pub.pem"
    ))
    .unwrap();
    let mut check = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    check.validate_exp = false;
    check.set_audience(&["https://oauth2.googleapis.com/token"]);
    let decoded = jsonwebtoken::decode::<Value>(
        &jwt,
        &jsonwebtoken::DecodingKey::from_rsa_pem(&public).unwrap(),
        &check,
    )
    .unwrap();
    let c = decoded.claims;
    assert_eq!(c["iss"], "levee-test@levee-test.iam.gserviceaccount.com");
    assert_eq!(c["sub"], c["iss"]);
    assert_eq!(c["scope"], SCOPE);
    assert_eq!(c["iat"], 1_700_000_000u64);
    assert_eq!(c["exp"], 1_700_003_600u64);
    assert_eq!(
        decoded.header.kid.as_deref(),
        Some("6fb9f414eaa09705def5622e6755e92a8ea55c14")
    );
}
