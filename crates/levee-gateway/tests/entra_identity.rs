//! Entra ID tokens for an Azure OpenAI provider with neither a key nor a
//! token file: AKS workload identity (the federated token traded at the
//! authority) and a managed identity (`IDENTITY_ENDPOINT`). Each endpoint
//! is a fake in this process; a spying upstream must see the token it
//! issued. The identity is found through the process's environment, so
//! this file's one test walks both sources in turn. Tokens issued at run
//! time, and the ones that replace them, never reach a caller or the log
//! when the provider echoes them back.

mod support;
use levee_config::Config;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(30);
const CHAT_ANSWER: &str = r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;

/// The bearer each request to the upstream carried, and the requests each
/// fake token endpoint got.
#[derive(Default)]
struct Seen {
    bearers: Mutex<Vec<String>>,
    hits: Mutex<HashMap<String, usize>>,
    /// The upstream answers 403 with the bearer echoed, and each token
    /// issued is new and within its refresh window.
    echo: std::sync::atomic::AtomicBool,
    issued: std::sync::atomic::AtomicUsize,
}

/// The fakes this test reaches, by host.
const HOSTS: &[&str] = &["login.localhost", "identity.localhost", "azure.localhost"];

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
    match host {
        "login.localhost"
            if first.starts_with("POST /tenant-1/oauth2/v2.0/token")
                && body.contains("grant_type=client_credentials")
                && body.contains("client_assertion=aks%2Dsa%2Djwt") =>
        {
            let n = seen.issued.fetch_add(1, Ordering::SeqCst);
            if seen.echo.load(Ordering::SeqCst) {
                let t = format!(r#"{{"access_token":"eyJ.rotated-token-{n:04}","expires_in":120,"token_type":"Bearer"}}"#);
                return (200, t);
            }
            (200, r#"{"access_token":"eyJ.workload-token-0001","expires_in":3599,"token_type":"Bearer"}"#.into())
        }
        "identity.localhost"
            if first.contains("resource=https://cognitiveservices.azure.com")
                && head_field(head, "x-identity-header").as_deref() == Some("app-service-secret") =>
        {
            (200, r#"{"access_token":"eyJ.managed-token-0001","expires_on":"4102444800","token_type":"Bearer"}"#.into())
        }
        "azure.localhost" => {
            let bearer = head_field(head, "authorization").unwrap_or_default();
            seen.bearers.lock().unwrap().push(bearer.clone());
            if seen.echo.load(Ordering::SeqCst) {
                let echo = format!(r#"{{"error":{{"message":"forbidden: you sent {bearer}","type":"invalid_request_error","code":"403"}}}}"#);
                return (403, echo);
            }
            (200, CHAT_ANSWER.to_string())
        }
        _ => (403, format!("unexpected {first}")),
    }
}

fn gateway(seen: &Arc<Seen>) -> Local {
    local_dial(
        vec![],
        "providers:\n  az: { api: azure, base_url: \"http://azure.localhost\" }\nroutes:\n  - targets: [az]\n",
        fakes(Arc::clone(seen)),
    )
}

async fn ask(env: &Local) -> Resp {
    watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &[])).await
}

const VARS: [&str; 6] = [
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_AUTHORITY_HOST",
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
];

/// Sets exactly the given identity variables.
type SetVars<'a> = dyn Fn(&[(&str, &str)]) + 'a;

/// Workload-identity tokens near their expiry, so each use refreshes them
/// in the background, echoed back by the provider.
async fn workload_tokens_echoed_are_redacted(jwt: &std::path::Path, set: &SetVars<'_>) {
    let (logs, _guard) = capture_logs(tracing::Level::INFO);
    set(&[
        ("AZURE_FEDERATED_TOKEN_FILE", jwt.to_str().unwrap()),
        ("AZURE_CLIENT_ID", "client-1"),
        ("AZURE_TENANT_ID", "tenant-1"),
        ("AZURE_AUTHORITY_HOST", "http://login.localhost/"),
    ]);
    let seen = Arc::new(Seen::default());
    seen.echo.store(true, Ordering::SeqCst);
    let env = gateway(&seen);
    let mut answers = String::new();
    for _ in 0..4 {
        let r = ask(&env).await;
        assert_eq!(r.status, 403, "{}", r.text());
        answers.push_str(&format!("{:?}\n{}\n", r.headers, r.text()));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut tokens: Vec<String> = seen
        .bearers
        .lock()
        .unwrap()
        .iter()
        .filter_map(|b| b.strip_prefix("Bearer ").map(str::to_string))
        .collect();
    tokens.sort();
    tokens.dedup();
    assert!(tokens.len() >= 2, "rotated while in use: {tokens:?}");
    assert!(answers.contains("forbidden: you sent"), "{answers}");
    for t in &tokens {
        assert!(
            !answers.contains(t.as_str()),
            "`{t}` reached the caller:\n{answers}"
        );
        assert!(!logs.text().contains(t.as_str()), "`{t}` reached the log");
    }
}

#[tokio::test(start_paused = true)]
async fn workload_and_managed_identity_issue_the_bearer_the_upstream_sees() {
    let dir = std::env::temp_dir().join(format!("levee-entra-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let jwt = dir.join("token");
    std::fs::write(&jwt, "aks-sa-jwt\n").unwrap();
    let set = |vars: &[(&str, &str)]| {
        for v in VARS {
            std::env::remove_var(v);
        }
        for (k, v) in vars {
            std::env::set_var(k, v);
        }
    };

    // AKS workload identity: the projected token, traded at the authority.
    set(&[
        ("AZURE_FEDERATED_TOKEN_FILE", jwt.to_str().unwrap()),
        ("AZURE_CLIENT_ID", "client-1"),
        ("AZURE_TENANT_ID", "tenant-1"),
        ("AZURE_AUTHORITY_HOST", "http://login.localhost/"),
    ]);
    let seen = Arc::new(Seen::default());
    let env = gateway(&seen);
    for _ in 0..2 {
        let r = ask(&env).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(
        *seen.bearers.lock().unwrap(),
        [
            "Bearer eyJ.workload-token-0001",
            "Bearer eyJ.workload-token-0001"
        ]
    );

    // A managed identity (App Service, Container Apps).
    set(&[
        ("IDENTITY_ENDPOINT", "http://identity.localhost/msi/token"),
        ("IDENTITY_HEADER", "app-service-secret"),
    ]);
    let seen = Arc::new(Seen::default());
    let env = gateway(&seen);
    let r = ask(&env).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        *seen.bearers.lock().unwrap(),
        ["Bearer eyJ.managed-token-0001"]
    );

    // Tokens rotated while in use and echoed by the provider stay out of
    // the caller's answer and the log.
    workload_tokens_echoed_are_redacted(&jwt, &set).await;

    // An identity endpoint over plain http to another host is refused.
    set(&[
        ("IDENTITY_ENDPOINT", "http://identity.example.com/msi/token"),
        ("IDENTITY_HEADER", "x"),
    ]);
    let config = Config::parse(
        "providers:\n  az: { api: azure, base_url: \"https://r.openai.azure.com\" }\n",
    )
    .unwrap();
    let e = levee_gateway::preflight::PlatformRuntime::new(&config.providers[0]).unwrap_err();
    assert!(e.to_string().contains("IDENTITY_ENDPOINT"), "{e}");
    set(&[]);
    let _ = std::fs::remove_dir_all(&dir);
}
