//! Replicas sharing a Redis over TLS with a private CA and mutual TLS
//! (`rediss://`, `state.tls`), as managed Redis with in-transit encryption
//! is run: an idempotency key shared across two replicas runs once. A
//! replica whose TLS does not fit the server (no client certificate, a
//! plain-text URL to the TLS port, a TLS URL to a plain-text server) keeps
//! serving on local state and counts the fallback, never hangs. Needs
//! `redis-server` built with TLS (Debian's is; scripts/test installs it).

mod support;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(20);

/// A CA, a server certificate for `localhost` and 127.0.0.1, and a client
/// certificate, all signed by the CA, written as PEM files into `dir`.
fn certificates(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Each certificate its own name: one named as its issuer reads as
    // self-signed to OpenSSL (the server's check of the client's).
    ca.distinguished_name
        .push(DnType::CommonName, "levee test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issue = |names: Vec<String>, file: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, file);
        let cert = params.signed_by(&key, &ca_cert, &ca_key).unwrap();
        std::fs::write(dir.join(format!("{file}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{file}.key")), key.serialize_pem()).unwrap();
    };
    issue(vec!["localhost".into(), "127.0.0.1".into()], "server");
    issue(vec!["levee-replica".into()], "client");
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
}

/// A TLS-only redis-server that requires client certificates.
async fn tls_redis(dir: &Path) -> Option<RedisServer> {
    let port = free_port();
    let p = |f: &str| dir.join(f).display().to_string();
    let listen: Vec<String> = [
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        &p("server.pem"),
        "--tls-key-file",
        &p("server.key"),
        "--tls-ca-cert-file",
        &p("ca.pem"),
        "--tls-auth-clients",
        "yes",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let Some(r) = RedisServer::start_with(&listen, port) else {
        assert!(
            std::env::var_os("LEVEE_REQUIRE_REDIS").is_none(),
            "redis-server is required"
        );
        return None;
    };
    r.ready(WATCHDOG).await;
    Some(r)
}

fn state(url: &str, tls: &str, prefix: &str) -> String {
    format!("state: {{ backend: redis, url: \"{url}\", key_prefix: \"{prefix}\", replicas: 2, timeout: 200ms{tls} }}\n")
}

const ROUTES: &str = "providers:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [p]\n    retry: { max_attempts: 1 }\n";

async fn post_to(env: &Env, addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> Resp {
    let req = post_request(&format!("http://{addr}/v1/chat/completions"), CHAT, headers);
    watchdog(WATCHDOG, async {
        Resp::read(env.client.request(req).await.unwrap()).await
    })
    .await
}

fn fallbacks(metrics: &str) -> f64 {
    metric(metrics, "levee_state_fallback_total", &[])
}

#[tokio::test]
async fn replicas_share_an_idempotency_key_over_mutual_tls() {
    let dir: PathBuf = std::env::temp_dir().join(format!("levee-redis-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    certificates(&dir);
    let Some(r) = tls_redis(&dir).await else {
        return;
    };
    let f = |name: &str| dir.join(name).display().to_string();
    let tls = format!(
        ", tls: {{ ca_file: \"{}\", cert_file: \"{}\", key_file: \"{}\" }}",
        f("ca.pem"),
        f("client.pem"),
        f("client.key")
    );
    let config = state(&format!("rediss://localhost:{}", r.port), &tls, "tls") + ROUTES;
    let a = start(&["faults:\n  - { latency: 300ms }\n"], &config).await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\n{}",
        config.replace("{mock0}", &a.mocks[0].url())
    );
    let b = spawn_text(&text, 7).await;
    let h = [("idempotency-key", "over-tls")];
    let first = post_to(&a, a.gw.addr, &h);
    let second = async {
        watchdog(WATCHDOG, async {
            while a.stats(0).in_flight < 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        post_to(&a, b.addr, &h).await
    };
    let (x, y) = tokio::join!(first, second);
    assert_eq!(
        (x.status, y.status),
        (200, 200),
        "{} / {}",
        x.text(),
        y.text()
    );
    assert_eq!(x.body, y.body);
    assert_eq!(
        a.stats(0).requests_total,
        1,
        "one provider request over two replicas"
    );
    assert_eq!(
        fallbacks(&a.metrics().await),
        0.0,
        "Redis was reached over TLS"
    );
    b.shutdown().await;
    a.stop().await;

    // What does not fit: no client certificate; plain text to the TLS port.
    for (url, tls) in [
        (
            format!("rediss://localhost:{}", r.port),
            format!(", tls: {{ ca_file: \"{}\" }}", f("ca.pem")),
        ),
        (format!("redis://127.0.0.1:{}", r.port), String::new()),
    ] {
        let config = state(&url, &tls, "bad") + ROUTES;
        let env = start(&["faults: []"], &config).await;
        let resp = post_to(&env, env.gw.addr, &[("idempotency-key", "k")]).await;
        assert_eq!(resp.status, 200, "served on local state: {}", resp.text());
        assert!(
            fallbacks(&env.metrics().await) >= 1.0,
            "{url}: the fallback is counted"
        );
        env.stop().await;
    }
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_tls_url_to_a_plain_text_server_falls_back_and_does_not_hang() {
    let Some(plain) = RedisServer::start_or_skip() else {
        return;
    };
    plain.ready(WATCHDOG).await;
    let config = state(&format!("rediss://localhost:{}", plain.port), "", "plain") + ROUTES;
    let env = start(&["faults: []"], &config).await;
    let resp = post_to(&env, env.gw.addr, &[("idempotency-key", "k")]).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(fallbacks(&env.metrics().await) >= 1.0);
    env.stop().await;
}
