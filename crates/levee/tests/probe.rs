//! `levee check --probe` against loopback servers: a TLS server whose
//! self-signed certificate nobody trusts, a closed port, a host name that
//! cannot resolve, and a plain HTTP listener that is fine.

mod kit;
use kit::{test_dir, BIN};
use std::process::Command;
use std::sync::Arc;

/// Serves TLS with a fresh self-signed certificate for 127.0.0.1 on a thread
/// of its own until the test process ends.
fn untrusted_tls_server() -> std::net::SocketAddr {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let Ok(mut conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                // The client aborts the handshake: the error is expected.
                let _ = conn.complete_io(&mut stream);
            });
        }
    });
    addr
}

#[test]
fn probe_reports_tls_connect_and_dns_problems_per_provider() {
    let tls = untrusted_tls_server();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = closed.local_addr().unwrap();
    drop(closed);
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_addr = plain.local_addr().unwrap();
    let dir = test_dir("levee-probe-test");
    let config = dir.join("levee.yaml");
    std::fs::write(
        &config,
        format!(
            "providers:\n  secure: {{ api: openai, base_url: \"https://{tls}/v1\" }}\n  gone: {{ api: openai, base_url: \"http://{refused}/v1\" }}\n  nowhere: {{ api: openai, base_url: \"https://levee-probe-test.invalid/v1\" }}\n  plain: {{ api: openai, base_url: \"http://{plain_addr}/v1\" }}\nroutes:\n  - targets: [plain, secure, gone, nowhere]\n"
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check", "--probe", "--probe-timeout-ms", "2000", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no line for {name}: {stdout}"))
            .to_string()
    };
    assert!(line("secure").contains("FAILED tls"), "{stdout}");
    assert!(line("secure").contains("UnknownIssuer"), "{stdout}");
    assert!(line("gone").contains("FAILED connect"), "{stdout}");
    assert!(line("nowhere").contains("FAILED dns"), "{stdout}");
    assert!(line("plain").ends_with("ok"), "{stdout}");
    for name in ["secure", "gone", "nowhere"] {
        assert!(
            stderr.contains(&format!("provider `{name}`")),
            "{name}: {stderr}"
        );
    }
    assert!(!stderr.contains("provider `plain`"), "{stderr}");

    // Without --probe nothing is dialled and the config is valid: exit 0.
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    drop(plain);
    let _ = std::fs::remove_dir_all(&dir);
}
