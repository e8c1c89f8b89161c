//! Application Default Credentials for Vertex AI past a service-account
//! key: user credentials (`authorized_user`, the refresh-token grant),
//! workload identity federation (`external_account`: STS, then service
//! account impersonation) and the metadata server (GKE workload identity, GCE, Cloud Run) at the
//! address `GCE_METADATA_HOST` gives. Each endpoint is a fake in this
//! process; a spying upstream must see the token it issued. The metadata
//! server is found through the process's environment, so this file's one
//! test walks both sources in turn.

mod support;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(30);
const MESSAGES: &str =
    r#"{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
const ANSWER: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}"#;

/// The bearer each request to the upstream carried, and the requests each
/// fake token endpoint got.
#[derive(Default)]
struct Seen {
    bearers: Mutex<Vec<String>>,
    hits: Mutex<HashMap<String, usize>>,
}

/// The fakes this test reaches, by host.
const HOSTS: &[&str] = &[
    "oauth.localhost",
    "metadata.localhost",
    "vertex.localhost",
    "sts.localhost",
    "iam.localhost",
];

/// The fakes, answering as [`answer_for`] says.
fn fakes(seen: Arc<Seen>) -> levee_gateway::transport::Dial {
    fake_hosts(
        HOSTS,
        Arc::new(move |host: &str, head: &str, body: &str| {
            let (status, answer) = answer_for(&seen, host, head, body);
            (status, String::new(), answer)
        }),
    )
}

fn answer_for(seen: &Seen, host: &str, head: &str, body: &str) -> (u16, String) {
    let first = head.lines().next().unwrap_or("").to_string();
    *seen
        .hits
        .lock()
        .unwrap()
        .entry(format!("{host} {first}"))
        .or_default() += 1;
    let token = |t: &str| {
        (
            200,
            format!(r#"{{"access_token":"{t}","expires_in":3600,"token_type":"Bearer"}}"#),
        )
    };
    match host {
        "oauth.localhost"
            if body.contains("grant_type=refresh_token")
                && body.contains("client_id=cid")
                && body.contains("refresh_token=rt%2Dsecret") =>
        {
            token("ya29.user-token-0001")
        }
        "metadata.localhost"
            if first.contains("/computeMetadata/v1/instance/service-accounts/default/token")
                && head_field(head, "metadata-flavor").as_deref() == Some("Google") =>
        {
            token("ya29.metadata-token-0001")
        }
        "sts.localhost"
            if body.contains("subject_token=subject%2Djwt")
                && body.contains("token%2Dexchange") =>
        {
            token("sts-federated-token-0001")
        }
        "iam.localhost"
            if first.contains(":generateAccessToken")
                && head_field(head, "authorization").as_deref()
                    == Some("Bearer sts-federated-token-0001") =>
        {
            (
                200,
                r#"{"accessToken":"ya29.impersonated-0001","expireTime":"2099-01-01T00:00:00Z"}"#
                    .into(),
            )
        }
        "vertex.localhost" => {
            let bearer = head_field(head, "authorization").unwrap_or_default();
            seen.bearers.lock().unwrap().push(bearer);
            (200, ANSWER.to_string())
        }
        _ => (403, format!("unexpected {first}")),
    }
}

fn gateway(seen: &Arc<Seen>, extra: &str) -> Local {
    local_dial(
        vec![],
        &format!("providers:\n  vx: {{ api: vertex, region: us-east5, project: p, base_url: \"http://vertex.localhost\"{extra} }}\nroutes:\n  - targets: [{{ provider: vx, model: claude-x }}]\n"),
        fakes(Arc::clone(seen)),
    )
}

async fn ask(env: &Local) -> Resp {
    watchdog(
        WATCHDOG,
        env.post(
            "/v1/messages",
            MESSAGES,
            &[("anthropic-version", "2023-06-01")],
        ),
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn user_credentials_and_the_metadata_server_issue_the_bearer_the_upstream_sees() {
    let dir = std::env::temp_dir().join(format!("levee-gcp-adc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::remove_var("GOOGLE_APPLICATION_CREDENTIALS");
    std::env::set_var("HOME", &dir);

    // User credentials (`gcloud auth application-default login`).
    let user = dir.join("user.json");
    std::fs::write(
        &user,
        r#"{"type":"authorized_user","client_id":"cid","client_secret":"csecret-0001","refresh_token":"rt-secret"}"#,
    )
    .unwrap();
    let seen = Arc::new(Seen::default());
    let env = gateway(
        &seen,
        &format!(
            ", credentials_file: \"{}\", token_url: \"http://oauth.localhost/token\"",
            user.display()
        ),
    );
    for _ in 0..2 {
        let r = ask(&env).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(
        *seen.bearers.lock().unwrap(),
        ["Bearer ya29.user-token-0001", "Bearer ya29.user-token-0001"]
    );

    // Workload identity federation: a file-sourced subject token exchanged
    // at STS, then traded for the service account's token.
    let subject = dir.join("subject");
    std::fs::write(&subject, "subject-jwt\n").unwrap();
    let federated = dir.join("federated.json");
    std::fs::write(
        &federated,
        format!(
            r#"{{"type":"external_account","audience":"//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/q","subject_token_type":"urn:ietf:params:oauth:token-type:jwt","token_url":"http://sts.localhost/v1/token","service_account_impersonation_url":"http://iam.localhost/v1/projects/-/serviceAccounts/levee@p.iam.gserviceaccount.com:generateAccessToken","credential_source":{{"file":"{}"}}}}"#,
            subject.display()
        ),
    )
    .unwrap();
    let seen = Arc::new(Seen::default());
    let env = gateway(
        &seen,
        &format!(", credentials_file: \"{}\"", federated.display()),
    );
    let r = ask(&env).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        *seen.bearers.lock().unwrap(),
        ["Bearer ya29.impersonated-0001"]
    );

    // No file anywhere: the metadata server, where GCE_METADATA_HOST says.
    std::env::set_var("GCE_METADATA_HOST", "metadata.localhost");
    let seen = Arc::new(Seen::default());
    let env = gateway(&seen, "");
    let r = ask(&env).await;
    std::env::remove_var("GCE_METADATA_HOST");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        *seen.bearers.lock().unwrap(),
        ["Bearer ya29.metadata-token-0001"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
