//! Upstream TLS failures: a provider whose certificate the gateway does not
//! trust is labelled `tls` (not `connect_error`), and its breaker counts it
//! as a connection fault.

mod support;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(20);

/// A TLS server on 127.0.0.1 with a fresh self-signed certificate (valid for
/// 127.0.0.1, trusted by no one); counts the connections it accepts.
async fn untrusted_tls_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            // The client aborts the handshake: the error is expected.
            tokio::spawn(async move { acceptor.accept(stream).await.map(|_| ()) });
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn an_untrusted_certificate_is_labelled_tls_and_opens_the_breaker() {
    let (tls, accepted) = untrusted_tls_server().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = closed.local_addr().unwrap();
    drop(closed);
    let env = start(
        &[],
        &format!(
            "providers:\n  secure: {{ api: openai, base_url: \"https://{tls}/v1\", circuit_breaker: {{ min_requests: 2, open_for: 10m }} }}\n  gone: {{ api: openai, base_url: \"http://{refused}/v1\" }}\nroutes:\n  - match: {{ model_prefix: \"gone/\" }}\n    targets: [gone]\n    retry: {{ max_attempts: 1 }}\n  - targets: [secure]\n    retry: {{ max_attempts: 1 }}\n"
        ),
    )
    .await;
    for _ in 0..2 {
        let r = watchdog(WATCHDOG, env.chat()).await;
        assert_eq!(r.status, 502, "{}", r.text());
        assert_eq!(r.header("x-levee-reason"), "upstream_error");
    }
    let gone = r#"{"model":"gone/m","messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", gone, &[])).await;
    assert_eq!(r.status, 502, "{}", r.text());
    let m = env.metrics().await;
    let attempts = |provider: &str, result: &str| {
        metric(
            &m,
            "levee_upstream_attempts_total",
            &[
                &format!("provider=\"{provider}\""),
                &format!("result=\"{result}\""),
            ],
        )
    };
    assert_eq!(attempts("secure", "tls"), 2.0, "{m}");
    assert_eq!(attempts("secure", "connect_error"), 0.0, "{m}");
    assert_eq!(attempts("gone", "connect_error"), 1.0, "{m}");
    assert_eq!(attempts("gone", "tls"), 0.0, "{m}");

    // Two TLS failures in a row are two connection faults: the breaker is open.
    let before = accepted.load(Ordering::SeqCst);
    let r = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(r.header("x-levee-reason"), "circuit_open", "{}", r.text());
    assert_eq!(accepted.load(Ordering::SeqCst), before, "nothing was sent");
    env.stop().await;
}

#[tokio::test]
async fn offering_http2_by_alpn_an_untrusted_certificate_is_labelled_tls_too() {
    let (tls, accepted) = untrusted_tls_server().await;
    for http2 in ["always", "auto"] {
        let env = start(
            &[],
            &format!(
                "providers:\n  secure: {{ api: openai, base_url: \"https://{tls}/v1\", http2: {http2} }}\nroutes:\n  - targets: [secure]\n    retry: {{ max_attempts: 1 }}\n"
            ),
        )
        .await;
        let r = watchdog(WATCHDOG, env.chat()).await;
        assert_eq!(r.status, 502, "{}", r.text());
        let m = env.metrics().await;
        assert_eq!(attempts_labelled(&m, "tls"), 1.0, "http2: {http2}\n{m}");
        env.stop().await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}
