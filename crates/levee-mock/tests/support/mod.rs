//! Test helpers: start a mock on 127.0.0.1:0, talk to it with a hyper client
//! or a raw socket, wait for stats with a watchdog.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use levee_mock::{parse_faults, spawn, MockHandle, MockOptions, Stats, Tape};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Every network step of a test gives up after this; nothing should come close.
pub const WATCHDOG: Duration = Duration::from_secs(5);

pub async fn start(faults: &str) -> MockHandle {
    start_with(faults, 1, None).await
}

pub async fn start_with(faults: &str, seed: u64, replay: Option<Tape>) -> MockHandle {
    let opts = MockOptions {
        faults: parse_faults(faults).unwrap(),
        seed,
        replay,
        ..Default::default()
    };
    spawn("127.0.0.1:0".parse().unwrap(), opts).await.unwrap()
}

/// A mock serving one dialect strictly.
pub async fn start_api(api: levee_mock::MockApi) -> MockHandle {
    let opts = MockOptions {
        api,
        ..Default::default()
    };
    spawn("127.0.0.1:0".parse().unwrap(), opts).await.unwrap()
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// SSE events as (event name if any, data).
    pub fn sse(&self) -> Vec<(Option<String>, String)> {
        sse_events(self.text())
    }
}

pub fn sse_events(text: &str) -> Vec<(Option<String>, String)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = None;
            let mut data = String::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                } else {
                    panic!("unexpected SSE line {line:?} in {text:?}");
                }
            }
            (name, data)
        })
        .collect()
}

/// One request on a fresh connection. Err is the client's view of a broken
/// exchange (reset, cut, closed).
pub async fn try_send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Resp, String> {
    let exchange = async {
        let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", addr.to_string());
        if !body.is_empty() {
            req = req.header("content-type", "application/json");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
        let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let (parts, body) = res.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    };
    timeout(WATCHDOG, exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path} got no answer within {WATCHDOG:?}"))
}

pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    try_send(addr, method, path, headers, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path} failed: {e}"))
}

pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Resp {
    send(addr, "POST", path, &[], body).await
}

/// A POST of `body` to the chat completions endpoint.
pub async fn post_chat(addr: SocketAddr, body: &str) -> Resp {
    post(addr, "/v1/chat/completions", body).await
}

pub async fn get(addr: SocketAddr, path: &str) -> Resp {
    send(addr, "GET", path, &[], "").await
}

pub fn chat(model: &str) -> String {
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hello"}}]}}"#)
}

pub fn chat_stream(model: &str) -> String {
    format!(
        r#"{{"model":"{model}","messages":[{{"role":"user","content":"hello"}}],"stream":true,"stream_options":{{"include_usage":true}}}}"#
    )
}

pub fn message(model: &str, stream: bool) -> String {
    format!(
        r#"{{"model":"{model}","max_tokens":64,"messages":[{{"role":"user","content":"hello"}}],"stream":{stream}}}"#
    )
}

/// How a raw exchange ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// Orderly close (FIN) after these bytes.
    Eof,
    /// Connection reset (RST).
    Reset,
}

/// Sends a raw HTTP/1.1 POST and reads until the server closes.
/// Use `Connection: close` so a complete answer also ends in EOF.
pub async fn raw_post(addr: SocketAddr, path: &str, body: &str) -> (String, End) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let end = timeout(WATCHDOG, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return End::Eof,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return End::Reset,
                Err(e) => panic!("unexpected read error {e}"),
            }
        }
    })
    .await
    .expect("the mock neither answered nor closed");
    (String::from_utf8_lossy(&got).into_owned(), end)
}

/// Polls stats until `pred` holds; panics with the last stats after the watchdog.
pub async fn eventually(h: &MockHandle, what: &str, pred: impl Fn(&Stats) -> bool) -> Stats {
    let poll = async {
        loop {
            let s = h.stats();
            if pred(&s) {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    match timeout(WATCHDOG, poll).await {
        Ok(s) => s,
        Err(_) => panic!("timed out waiting for {what}; stats: {:#?}", h.stats()),
    }
}

/// Wall-clock stopwatch for asserting minimum delays.
#[allow(clippy::disallowed_methods)] // measuring real delays is the point of these tests
pub fn stopwatch() -> std::time::Instant {
    std::time::Instant::now()
}
