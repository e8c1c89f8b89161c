//! A provider that echoes its key back, in the forms providers and their
//! proxies write it: the key never reaches the caller, in an error answer
//! or in the head of a successful one.

mod support;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const WATCHDOG: Duration = Duration::from_secs(20);
const KEY: &str = "sk-redact/7f3a+Q9=zz";

/// The forms of the key the spy writes: as sent, upper case,
/// percent-encoded, JSON-escaped and inside a base64 `Basic` credential.
fn forms() -> Vec<String> {
    vec![
        KEY.to_string(),
        KEY.to_ascii_uppercase(),
        "sk-redact%2F7f3a%2BQ9%3Dzz".to_string(),
        "sk-redact\\/7f3a+Q9=zz".to_string(),
        // base64("user:" + KEY), written out so the test needs no encoder.
        "dXNlcjpzay1yZWRhY3QvN2YzYStROT16eg==".to_string(),
    ]
}

/// Answers every request with `status`, each form of the key in a header
/// of its own and all of them in the body.
async fn echoing(status: u16) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind spy");
    let addr = l.local_addr().expect("spy addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut chunk = [0u8; 8192];
                // One request per connection is enough here: read its head
                // and its declared body, answer, close.
                loop {
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            break;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = if status == 200 {
                    r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#.to_string()
                } else {
                    format!(
                        r#"{{"error":{{"message":"bad key: {}","type":"invalid_request_error","code":"invalid_api_key"}}}}"#,
                        forms().join(" | ")
                    )
                };
                let fields: String = forms()
                    .iter()
                    .enumerate()
                    .map(|(i, f)| format!("x-echo-{i}: key={f}\r\n"))
                    .collect();
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{fields}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

async fn gateway(addr: SocketAddr) -> Env {
    std::env::set_var("LEVEE_REDACTION_KEY", KEY);
    start(
        &[],
        &format!("providers:\n  p: {{ api: openai, base_url: \"http://{addr}\", api_key_env: LEVEE_REDACTION_KEY }}\nroutes:\n  - targets: [p]\n    retry: {{ max_attempts: 1 }}\n"),
    )
    .await
}

fn leaks(r: &Resp) -> Vec<String> {
    let mut text = r.text().to_string();
    for (n, v) in &r.headers {
        text.push_str(&format!("\n{n}: {}", String::from_utf8_lossy(v.as_bytes())));
    }
    let lower = text.to_ascii_lowercase();
    forms()
        .into_iter()
        .filter(|f| lower.contains(&f.to_ascii_lowercase()) || lower.contains("7f3a"))
        .collect()
}

#[tokio::test]
async fn every_form_of_the_key_is_redacted_in_an_error_answer() {
    let env = gateway(echoing(401).await).await;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &[])).await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(leaks(&r), Vec::<String>::new(), "{}", r.text());
    assert!(r.text().contains("[redacted]"), "{}", r.text());
    env.stop().await;
}

#[tokio::test]
async fn every_form_of_the_key_is_redacted_in_a_successful_answers_head() {
    let env = gateway(echoing(200).await).await;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(leaks(&r), Vec::<String>::new(), "{:?}", r.headers);
    assert_eq!(r.headers["x-echo-0"], "key=[redacted]");
    env.stop().await;
}
