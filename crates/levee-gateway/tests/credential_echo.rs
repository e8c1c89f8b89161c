//! Credentials a platform obtains while it runs — a Vertex access token
//! issued by the token endpoint, a bearer read from an Azure `token_file`,
//! Bedrock keys read from a credentials file — are redacted everywhere
//! Levee writes what a provider said, and stay redacted after they are
//! rotated. Behind each platform stands a mirror that answers 403 and
//! echoes every credential-bearing field it was sent (in its body and in a
//! header), as a provider's error may; the caller's answer and the request
//! log must hold none of them.

mod support;
use levee_mock::bedrock_keys::{TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(30);
const SA_KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../levee-mock/testdata/vertex-test-service-account.json"
);

/// Every credential-bearing value the mirror was sent, in order.
type Seen = Arc<Mutex<Vec<String>>>;

/// A provider at `http://mirror.test` that answers every request 403 with
/// its credential fields echoed back; what it saw goes to `seen`.
fn mirror(seen: Seen) -> levee_gateway::transport::Dial {
    fake_hosts(
        &["mirror.test"],
        Arc::new(move |_host: &str, head: &str, _body: &str| {
            let creds: Vec<String> = [
                "authorization",
                "api-key",
                "x-api-key",
                "x-amz-security-token",
            ]
            .iter()
            .filter_map(|n| head_field(head, n))
            .collect();
            seen.lock().unwrap().extend(creds.iter().cloned());
            let echoed = creds.join(" | ").replace('"', "'");
            let body = format!(
                r#"{{"error":{{"message":"forbidden: you sent {echoed}","type":"permission_error","code":"forbidden"}}}}"#
            );
            (403, format!("x-echo: {echoed}\r\n"), body)
        }),
    )
}

/// The secret parts of what the mirror saw: a bearer's token, a SigV4
/// `Credential=` key id, a session token.
fn secrets_in(seen: &Seen) -> Vec<String> {
    let mut out = Vec::new();
    for v in seen.lock().unwrap().iter() {
        if let Some(t) = v.strip_prefix("Bearer ") {
            out.push(t.to_string());
        } else if let Some(rest) = v.split("Credential=").nth(1) {
            out.push(rest.split('/').next().unwrap_or("").to_string());
        } else {
            out.push(v.clone());
        }
    }
    out.retain(|s| s.len() >= 8);
    out.sort();
    out.dedup();
    out
}

/// Asks once, and returns the caller's answer (head and body) as text.
async fn ask(env: &Local, path: &str, body: &str) -> String {
    let r = watchdog(
        WATCHDOG,
        env.post(path, body, &[("anthropic-version", "2023-06-01")]),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());
    let mut text = r.text().to_string();
    for (n, v) in &r.headers {
        text.push_str(&format!("\n{n}: {}", String::from_utf8_lossy(v.as_bytes())));
    }
    text
}

fn assert_clean(what: &str, text: &str, secrets: &[String]) {
    for s in secrets {
        assert!(!text.contains(s.as_str()), "{what} holds `{s}`:\n{text}");
    }
}

const MESSAGES: &str =
    r#"{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

/// A file of its own for one test, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!("levee-echo-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test(start_paused = true)]
async fn an_azure_token_read_from_its_file_is_redacted_and_stays_so_after_rotation() {
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    let file = TempFile::new("azure-token", "eyJ0eXAi.first-azure-token-0001\n");
    let seen = Seen::default();
    let env = local_dial(
        vec![],
        &format!("providers:\n  az: {{ api: azure, base_url: \"http://mirror.test\", token_file: \"{}\" }}\nroutes:\n  - targets: [az]\n", file.0.display()),
        mirror(Arc::clone(&seen)),
    );
    let first = ask(&env, "/v1/chat/completions", CHAT).await;
    std::fs::write(&file.0, "eyJ0eXAi.second-azure-token-0002\n").unwrap();
    let second = ask(&env, "/v1/chat/completions", CHAT).await;
    let secrets = secrets_in(&seen);
    assert_eq!(secrets.len(), 2, "{secrets:?}");
    for (what, text) in [("first answer", &first), ("second answer", &second)] {
        assert_clean(what, text, &secrets);
        assert!(text.contains("[redacted]"), "{text}");
    }
    assert_clean("the log", &logs.text(), &secrets);
}

#[tokio::test(start_paused = true)]
async fn bedrock_keys_re_read_after_rotation_are_redacted() {
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    let profile = |token: &str| {
        format!("[default]\naws_access_key_id = {TEST_ACCESS_KEY_ID}\naws_secret_access_key = {TEST_SECRET_ACCESS_KEY}\naws_session_token = {token}\n")
    };
    let file = TempFile::new(
        "aws-credentials",
        &profile("FwoGZXIvYXdzEFIRSTSESSIONTOKEN0001"),
    );
    let seen = Seen::default();
    let env = local_dial(
        vec![],
        &format!("providers:\n  br: {{ api: bedrock, base_url: \"http://mirror.test\", region: us-east-1, credentials_file: \"{}\" }}\nroutes:\n  - targets: [{{ provider: br, model: \"anthropic.claude-x\" }}]\n", file.0.display()),
        mirror(Arc::clone(&seen)),
    );
    let first = ask(&env, "/v1/messages", MESSAGES).await;
    // Rotated: a new session token, a different file length.
    std::fs::write(&file.0, profile("FwoGZXIvYXdzESECONDSESSIONTOKEN00000002")).unwrap();
    let second = ask(&env, "/v1/messages", MESSAGES).await;
    let secrets = secrets_in(&seen);
    assert!(
        secrets.iter().any(|s| s.contains("SECONDSESSION")),
        "the mirror saw the rotated token: {secrets:?}"
    );
    for (what, text) in [("first answer", &first), ("second answer", &second)] {
        assert_clean(what, text, &secrets);
    }
    assert_clean("the log", &logs.text(), &secrets);
}

#[tokio::test(start_paused = true)]
async fn a_vertex_access_token_issued_at_run_time_is_redacted() {
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    let tokens = levee_mock::InProcess::new(levee_mock::MockOptions {
        api: levee_mock::MockApi::Vertex,
        ..Default::default()
    });
    let seen = Seen::default();
    let env = local_dial(
        vec![tokens],
        &format!("providers:\n  vx: {{ api: vertex, region: us-east5, project: levee-test, base_url: \"http://mirror.test\", credentials_file: \"{SA_KEY}\", token_url: \"{{mock0}}/token\" }}\nroutes:\n  - targets: [{{ provider: vx, model: claude-x }}]\n"),
        mirror(Arc::clone(&seen)),
    );
    let text = ask(&env, "/v1/messages", MESSAGES).await;
    let secrets = secrets_in(&seen);
    assert_eq!(secrets.len(), 1, "{secrets:?}");
    assert_clean("the answer", &text, &secrets);
    assert!(text.contains("[redacted]"), "{text}");
    assert_clean("the log", &logs.text(), &secrets);
}
