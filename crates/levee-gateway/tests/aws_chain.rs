//! The AWS default credential chain past the environment's keys, against
//! the strict Bedrock mock (which verifies every SigV4 signature and
//! session token): an EC2 instance profile through IMDSv2, container
//! credentials with their authorization token, web identity traded at
//! STS, and a `credential_process`. Each credential endpoint is a fake in
//! this process at the address the SDKs' variables point to; Levee's
//! environment holds no keys. Keys near their expiry are fetched again in
//! the background; an endpoint that refuses leaves the target answering
//! `credentials_unavailable`. Keys fetched at run time, and the ones that
//! replace them, never reach a caller or the log when a provider echoes
//! them back.
//!
//! The chain reads the process's environment, so this file's one test
//! walks every source in turn.

mod support;
use levee_mock::bedrock_keys::{
    TEST_SECRET_ACCESS_KEY, TEST_SESSION_ACCESS_KEY_ID, TEST_SESSION_TOKEN,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(30);
const MESSAGES: &str =
    r#"{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

/// What the fake credential endpoints saw and how they answer.
#[derive(Default)]
struct Fakes {
    /// Requests per "METHOD path".
    hits: Mutex<HashMap<String, usize>>,
    /// Credential answers given.
    issued: AtomicUsize,
    /// Minutes until the issued keys expire.
    expires_in_min: AtomicUsize,
    /// Refuse every credential request.
    refuse: AtomicBool,
    /// Issue a new key pair and session token each time (for the echo).
    rotate: AtomicBool,
    /// Every credential-bearing field the echoing provider was sent.
    echoed: Mutex<Vec<String>>,
}

/// The temporary test keys, as an endpoint's JSON (`Token`).
fn json_creds(expires_in_min: usize) -> String {
    #[allow(clippy::disallowed_methods)] // the expiry is a wall-clock time
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let exp = now + 60 * expires_in_min as u64;
    let (days, secs) = (exp / 86_400, exp % 86_400);
    let (y, m, d) = levee_wire::civil::civil_from_days(days as i64);
    let stamp = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    );
    format!(
        r#"{{"Code":"Success","AccessKeyId":"{TEST_SESSION_ACCESS_KEY_ID}","SecretAccessKey":"{TEST_SECRET_ACCESS_KEY}","Token":"{TEST_SESSION_TOKEN}","Expiration":"{stamp}"}}"#
    )
}

/// STS's answer to `AssumeRoleWithWebIdentity`, with the test keys.
fn sts_answer(mins: usize) -> String {
    let c: serde_json::Value = serde_json::from_str(&json_creds(mins)).unwrap();
    let f = |k: &str| c[k].as_str().unwrap_or("").to_string();
    format!(
        "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>{}</AccessKeyId><SecretAccessKey>{}</SecretAccessKey><SessionToken>{}</SessionToken><Expiration>{}</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
        f("AccessKeyId"), f("SecretAccessKey"), f("Token"), f("Expiration")
    )
}

/// Keys unlike the mock's, new for each `n` (for the echo).
fn rotated_creds(n: usize, expires_in_min: usize) -> String {
    json_creds(expires_in_min)
        .replace(TEST_SESSION_ACCESS_KEY_ID, &format!("ASIAROTATED{n:09}"))
        .replace(
            TEST_SECRET_ACCESS_KEY,
            &format!("rotated/secret/access/key/{n:09}"),
        )
        .replace(TEST_SESSION_TOKEN, &format!("rotated-session-token-{n:09}"))
}

/// The fakes at `imds.localhost`, `creds.localhost` and `sts.localhost`,
/// and a provider at `mirror.localhost` that answers 403 with every
/// credential field it was sent echoed in a header and its body.
fn fake_endpoints(f: Arc<Fakes>) -> levee_gateway::transport::Dial {
    fake_hosts(
        &[
            "imds.localhost",
            "creds.localhost",
            "sts.localhost",
            "mirror.localhost",
        ],
        Arc::new(move |host: &str, head: &str, body: &str| {
            if host == "mirror.localhost" {
                let sent: Vec<String> = ["authorization", "x-amz-security-token"]
                    .iter()
                    .filter_map(|n| head_field(head, n))
                    .collect();
                f.echoed.lock().unwrap().extend(sent.iter().cloned());
                let echo = sent.join(" | ").replace('"', "'");
                let body = format!(r#"{{"message":"forbidden: you sent {echo}"}}"#);
                let extra =
                    format!("x-echo: {echo}\r\nx-amzn-errortype: AccessDeniedException\r\n");
                return (403, extra, body);
            }
            let (status, answer) = answer_for(&f, host, head, body);
            (status, String::new(), answer)
        }),
    )
}

/// What the fake at `host` answers `method path` (with the head's fields
/// and the body).
fn answer_for(f: &Fakes, host: &str, head: &str, body: &str) -> (u16, String) {
    let first = head.lines().next().unwrap_or("");
    let mut parts = first.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let field = |name: &str| head_field(head, name);
    *f.hits
        .lock()
        .unwrap()
        .entry(format!("{host} {method} {path}"))
        .or_default() += 1;
    if f.refuse.load(Ordering::SeqCst) {
        return (500, "refused".into());
    }
    let mins = f.expires_in_min.load(Ordering::SeqCst);
    let issue = |answer: String| {
        let n = f.issued.fetch_add(1, Ordering::SeqCst);
        if f.rotate.load(Ordering::SeqCst) {
            return (200, rotated_creds(n, mins));
        }
        (200, answer)
    };
    let imds_session = field("x-aws-ec2-metadata-token").as_deref() == Some("imds-session");
    match (host, method, path) {
        ("imds.localhost", "PUT", "/latest/api/token") => (200, "imds-session".into()),
        ("imds.localhost", "GET", _) if !imds_session => (401, "no session token".into()),
        ("imds.localhost", "GET", "/latest/meta-data/iam/security-credentials/") => {
            (200, "levee-role\n".into())
        }
        ("imds.localhost", "GET", "/latest/meta-data/iam/security-credentials/levee-role") => {
            issue(json_creds(mins))
        }
        ("creds.localhost", "GET", "/v2/credentials")
            if field("authorization").as_deref() == Some("pod-identity-token") =>
        {
            issue(json_creds(mins))
        }
        ("sts.localhost", "POST", "/")
            if body.contains("WebIdentityToken=irsa-jwt")
                && body.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr") =>
        {
            issue(sts_answer(mins))
        }
        _ => (403, format!("unexpected {method} {path}")),
    }
}

const CHAIN_VARS: [&str; 12] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ENDPOINT_URL_STS",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_EC2_METADATA_DISABLED",
];

/// The process's environment set to exactly `vars` for the chain (HOME
/// pointed at an empty directory).
fn only(vars: &[(&str, &str)], home: &std::path::Path) {
    for v in CHAIN_VARS {
        std::env::remove_var(v);
    }
    std::env::set_var("HOME", home);
    for (k, v) in vars {
        std::env::set_var(k, v);
    }
}

fn gateway(f: &Arc<Fakes>) -> Local {
    let bedrock = levee_mock::InProcess::new(levee_mock::MockOptions {
        api: levee_mock::MockApi::Bedrock,
        ..Default::default()
    });
    local_dial(
        vec![bedrock],
        "providers:\n  br: { api: bedrock, base_url: \"{mock0}\", region: us-east-1 }\nroutes:\n  - targets: [{ provider: br, model: \"anthropic.claude-x\" }]\n    retry: { max_attempts: 1 }\n",
        fake_endpoints(Arc::clone(f)),
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

/// Asks once through a fresh gateway and expects an answer.
async fn answered(f: &Arc<Fakes>, logs: &Logs) -> Local {
    let env = gateway(f);
    let r = ask(&env).await;
    assert_eq!(r.status, 200, "{}\n{}", r.text(), logs.text());
    env
}

/// The instance profile, container credentials and web identity, each
/// from its endpoint.
async fn endpoints_in_turn(f: &Arc<Fakes>, home: &std::path::Path, logs: &Logs) {
    // The instance profile (IMDSv2): a session token, the role, its keys.
    only(
        &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://imds.localhost")],
        home,
    );
    let env = answered(f, logs).await;
    for _ in 0..2 {
        assert_eq!(ask(&env).await.status, 200);
    }
    assert_eq!(f.issued.load(Ordering::SeqCst), 1, "fetched once, kept");
    let s = env.stats(0);
    assert_eq!((s.requests_total, s.unauthorized), (3, 0), "{s:?}");
    // Container credentials (ECS, EKS Pod Identity) with their token.
    only(
        &[
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://creds.localhost/v2/credentials",
            ),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-identity-token"),
        ],
        home,
    );
    answered(f, logs).await;
    assert_eq!(f.issued.load(Ordering::SeqCst), 2);
    // Web identity (IRSA): the token file traded at STS; it comes before
    // the container's endpoint.
    let jwt = home.join("token");
    std::fs::write(&jwt, "irsa-jwt\n").unwrap();
    only(
        &[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", jwt.to_str().unwrap()),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
            ("AWS_ENDPOINT_URL_STS", "http://sts.localhost/"),
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://creds.localhost/nowhere",
            ),
        ],
        home,
    );
    answered(f, logs).await;
    assert_eq!(f.issued.load(Ordering::SeqCst), 3);
}

/// A profile's credential_process in `~/.aws/config`.
async fn credential_process(f: &Arc<Fakes>, home: &std::path::Path, logs: &Logs) {
    let config = home.join("config");
    let json = json_creds(60)
        .replace("\"Token\"", "\"SessionToken\"")
        .replace("\"Code\":\"Success\",", "\"Version\":1,");
    std::fs::write(
        &config,
        format!("[profile build]\ncredential_process = printf '%s' '{json}'\n"),
    )
    .unwrap();
    only(
        &[
            ("AWS_CONFIG_FILE", config.to_str().unwrap()),
            ("AWS_PROFILE", "build"),
        ],
        home,
    );
    // A real process: the clock runs while it does (paused, the fetch's
    // 10 s timeout would pass at once while the process starts).
    tokio::time::resume();
    let env = gateway(f);
    let r = ask(&env).await;
    tokio::time::pause();
    assert_eq!(r.status, 200, "{}\n{}", r.text(), logs.text());
}

/// Keys fetched from the instance profile, refreshed (rotated) in the
/// background, echoed by a provider: no key id, secret or token reaches the
/// caller's answer or the log.
async fn fetched_keys_echoed_are_redacted(f: &Arc<Fakes>, home: &std::path::Path, logs: &Logs) {
    f.rotate.store(true, Ordering::SeqCst);
    f.expires_in_min.store(4, Ordering::SeqCst);
    only(
        &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://imds.localhost")],
        home,
    );
    let env = local_dial(
        vec![],
        "providers:\n  br: { api: bedrock, base_url: \"http://mirror.localhost\", region: us-east-1 }\nroutes:\n  - targets: [{ provider: br, model: \"anthropic.claude-x\" }]\n    retry: { max_attempts: 1 }\n",
        fake_endpoints(Arc::clone(f)),
    );
    let mut answers = String::new();
    for _ in 0..4 {
        let r = ask(&env).await;
        assert_eq!(r.status, 403, "{}", r.text());
        answers.push_str(&format!("{:?}\n{}\n", r.headers, r.text()));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let echoed = f.echoed.lock().unwrap().clone();
    let mut secrets: Vec<String> = Vec::new();
    for v in &echoed {
        match v.split("Credential=").nth(1) {
            Some(rest) => secrets.push(rest.split('/').next().unwrap_or("").to_string()),
            None => secrets.push(v.clone()),
        }
    }
    secrets.sort();
    secrets.dedup();
    let tokens = secrets
        .iter()
        .filter(|s| s.starts_with("rotated-session-token-"))
        .count();
    assert!(
        tokens >= 2,
        "the keys were rotated while in use: {secrets:?}"
    );
    assert!(answers.contains("forbidden: you sent"), "{answers}");
    for s in &secrets {
        assert!(
            !answers.contains(s.as_str()),
            "`{s}` reached the caller:\n{answers}"
        );
        assert!(!logs.text().contains(s.as_str()), "`{s}` reached the log");
    }
    f.rotate.store(false, Ordering::SeqCst);
}

#[tokio::test(start_paused = true)]
async fn each_source_of_the_chain_signs_with_what_its_endpoint_issued() {
    // INFO: the request log's summary lines too.
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    let home = std::env::temp_dir().join(format!("levee-aws-chain-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let f = Arc::new(Fakes::default());
    f.expires_in_min.store(60, Ordering::SeqCst);
    endpoints_in_turn(&f, &home, &logs).await;
    credential_process(&f, &home, &logs).await;
    fetched_keys_echoed_are_redacted(&f, &home, &logs).await;

    // Keys within five minutes of their expiry are fetched again in the
    // background while they are still used.
    f.expires_in_min.store(4, Ordering::SeqCst);
    only(
        &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://imds.localhost")],
        &home,
    );
    let env = gateway(&f);
    let before = f.issued.load(Ordering::SeqCst);
    for _ in 0..3 {
        let r = ask(&env).await;
        assert_eq!(r.status, 200, "{}", r.text());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        f.issued.load(Ordering::SeqCst) >= before + 2,
        "refreshed before expiry"
    );

    // An endpoint that refuses, and no keys held: nothing is sent, and the
    // answer says why.
    f.refuse.store(true, Ordering::SeqCst);
    let env = gateway(&f);
    let r = ask(&env).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("x-levee-reason"), "credentials_unavailable");
    assert!(
        r.text().contains("credentials could not be had"),
        "{}",
        r.text()
    );
    assert_eq!(env.stats(0).requests_total, 0);
    let _ = std::fs::remove_dir_all(&home);
}
