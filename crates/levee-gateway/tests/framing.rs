//! Request framing on the real listener, byte by byte: heads that RFC 9112
//! says a server must refuse, the exact head-size limit, and a chunk that
//! declares more than the body limit. Each answer is read raw, as a
//! byte-forwarding front in front of Levee would read it.

mod support;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WATCHDOG: Duration = Duration::from_secs(20);

/// Sends `bytes` on a new connection and reads until the gateway closes it.
async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    watchdog(WATCHDOG, async {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(bytes).await.expect("write");
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got).await;
        String::from_utf8_lossy(&got).into_owned()
    })
    .await
}

fn status_of(answer: &str) -> &str {
    answer.get(9..12).unwrap_or("")
}

/// How many answers a stream of bytes read to its close holds.
fn answers(text: &str) -> usize {
    text.matches("HTTP/1.1 ").count()
}

#[tokio::test]
async fn host_must_be_there_once_and_valid() {
    let env = one("", "").await;
    let body = CHAT;
    let post = |fields: &str| {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\n{fields}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    // Accepted: a name, a name and port, an address, an IPv6 literal, and
    // an HTTP/1.0 request with none.
    for ok in [
        "host: x\r\n",
        "host: api.example:8080\r\n",
        "host: 127.0.0.1\r\n",
        "host: [::1]:80\r\n",
    ] {
        let got = raw(env.gw.addr, post(ok).as_bytes()).await;
        assert_eq!(status_of(&got), "200", "{ok:?}: {got}");
    }
    let old = format!(
        "POST /v1/chat/completions HTTP/1.0\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let got = raw(env.gw.addr, old.as_bytes()).await;
    assert_eq!(status_of(&got), "200", "HTTP/1.0 without host: {got}");
    // Refused with a 400 in the caller's dialect, and closed.
    for bad in [
        "",
        "host: a\r\nhost: a\r\n",
        "host: a\r\nHost: b\r\n",
        "host: user@x\r\n",
        "host: x/y\r\n",
        "host: x:port\r\n",
        "host: [::1\r\n",
        "host: a b\r\n",
        "host: a%zz\r\n",
        "host: [:A1]:8080\r\n",
        "host: [1]\r\n",
    ] {
        let got = raw(env.gw.addr, post(bad).as_bytes()).await;
        assert_eq!(status_of(&got), "400", "{bad:?}: {got}");
        assert!(got.contains("connection: close"), "{bad:?}: {got}");
        assert!(got.contains("x-should-retry: false"), "{bad:?}: {got}");
        assert!(got.contains("\"error\""), "{bad:?}: {got}");
        assert!(
            got.contains("host"),
            "{bad:?}: the answer names the field: {got}"
        );
    }
    assert_eq!(
        env.mocks[0].stats().requests_total,
        5,
        "only the accepted ones"
    );
}

#[tokio::test]
async fn the_head_limit_is_exact_even_when_the_head_arrives_in_one_read() {
    // A limit under 8 KiB is kept as written.
    let env = one("", "limits: { max_header_bytes: 4096 }\n").await;
    let head = |pad: usize, path: &str| {
        let fields = format!(
            "host: x\r\nx-pad: {}\r\nconnection: close\r\n",
            "p".repeat(pad)
        );
        let body = if path.contains("messages") {
            MESSAGES
        } else {
            CHAT
        };
        format!(
            "POST {path} HTTP/1.1\r\n{fields}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    // Under the limit: served.
    let got = raw(env.gw.addr, head(3000, "/v1/chat/completions").as_bytes()).await;
    assert_eq!(status_of(&got), "200", "{got}");
    // Over it by a little, in one write: a 431 with an error body in the
    // request's dialect.
    let got = raw(env.gw.addr, head(4100, "/v1/chat/completions").as_bytes()).await;
    assert_eq!(status_of(&got), "431", "{got}");
    assert!(got.contains("max_header_bytes"), "{got}");
    assert!(got.contains("\"error\":{"), "an OpenAI error object: {got}");
    let got = raw(env.gw.addr, head(4100, "/v1/messages").as_bytes()).await;
    assert_eq!(status_of(&got), "431", "{got}");
    assert!(
        got.contains("\"type\":\"error\""),
        "an Anthropic error: {got}"
    );
    assert_eq!(env.mocks[0].stats().requests_total, 1);

    // The default 64 KiB: a 126 KB head in one write is refused too.
    let env = one("", "").await;
    let got = raw(
        env.gw.addr,
        head(126_000, "/v1/chat/completions").as_bytes(),
    )
    .await;
    assert_eq!(status_of(&got), "431", "{}", &got[..got.len().min(300)]);
}

#[tokio::test]
async fn a_chunk_declaring_more_than_the_body_limit_is_refused_at_its_size_line() {
    // A long body timeout: a gateway that waits for the chunk's bytes is
    // caught by the watchdog, not by the timeout.
    let env = one(
        "",
        "limits: { max_body_bytes: 1024, body_read_timeout: 600s }\n",
    )
    .await;
    let start = stopwatch();
    let got = watchdog(Duration::from_secs(10), async {
        let mut s = TcpStream::connect(env.gw.addr).await.expect("connect");
        // 1 MiB declared, 3 bytes sent, and the connection left open.
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n100000\r\n{\"m")
            .await
            .expect("write");
        let mut got = vec![0u8; 4096];
        let n = s.read(&mut got).await.expect("read");
        String::from_utf8_lossy(&got[..n]).into_owned()
    })
    .await;
    assert_eq!(status_of(&got), "413", "{got}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(env.mocks[0].stats().requests_total, 0);
}

#[tokio::test]
async fn chunk_extensions_are_bounded_per_body() {
    let env = one("", "").await;
    // Sixty one-byte chunks with 500 bytes of extensions each: 30 KB of
    // extensions over a 60-byte body.
    let mut req = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n".to_vec();
    let ext = format!(";e={}", "v".repeat(497));
    for b in CHAT.bytes().take(60) {
        req.extend_from_slice(format!("1{ext}\r\n").as_bytes());
        req.push(b);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let got = raw(env.gw.addr, &req).await;
    assert_eq!(status_of(&got), "400", "{got}");
    assert_eq!(answers(&got), 1, "{got}");
    assert_eq!(env.mocks[0].stats().requests_total, 0);
}
