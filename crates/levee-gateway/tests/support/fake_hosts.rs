//! Hand-written HTTP/1.1 endpoints in this process (a cloud's token or
//! metadata endpoint, a spying upstream), reached by host name through
//! the in-process gateway's dial: each request read whole, answered by a
//! function of its host, head and body, and the connection closed.

use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a fake answers: status, extra head lines (each ending `\r\n`),
/// body.
pub type Answer = (u16, String, String);

/// Answers a request given its host, head and body.
pub type Handler = Arc<dyn Fn(&str, &str, &str) -> Answer + Send + Sync>;

/// A request's head and body, read whole from `conn`.
pub async fn read_request<S: tokio::io::AsyncRead + Unpin>(
    conn: &mut S,
) -> Option<(String, String)> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_string();
            let len: usize = head_field(&head, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                let body = String::from_utf8_lossy(&got[end + 4..end + 4 + len]).to_string();
                return Some((head, body));
            }
        }
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The value of the field `name` in a request head (any case).
pub fn head_field(head: &str, name: &str) -> Option<String> {
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
}

/// A dial that reaches `handler` at each of `hosts` (others: not these).
pub fn fake_hosts(
    hosts: &'static [&'static str],
    handler: Handler,
) -> levee_gateway::transport::Dial {
    Arc::new(move |uri: &http::Uri| {
        let host = uri.host()?.to_string();
        if !hosts.contains(&host.as_str()) {
            return None;
        }
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let handler = Arc::clone(&handler);
        tokio::spawn(async move {
            let Some((head, body)) = read_request(&mut server).await else {
                return;
            };
            let (status, extra, answer) = handler(&host, &head, &body);
            let resp = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = server.write_all(resp.as_bytes()).await;
        });
        Some(client)
    })
}
