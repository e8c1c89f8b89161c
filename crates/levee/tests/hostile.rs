//! Hostile input against the real `levee` binary.
//!
//! Each test starts `levee mock --listen 127.0.0.1:0` and `levee serve` in
//! front of it as child processes (killed by a Drop guard, whatever happens),
//! then talks to the gateway over raw TCP sockets so that it can send what no
//! well-behaved client library would: broken JSON, oversized bodies and
//! header sections, bytes that are not UTF-8, path traversal, a slowloris
//! trickle, a client that leaves mid-body. Every socket read has a timeout,
//! so a stuck connection fails the test instead of hanging it.
//!
//! The rules checked: a clear 4xx in the caller's dialect (OpenAI
//! `{"error":{...}}` on /v1/chat/completions, Anthropic `{"type":"error",...}`
//! on /v1/messages), or a protocol-level refusal / closed connection; never
//! a panic, never a 5xx without `x-levee-reason`, never a stuck connection;
//! normal traffic keeps succeeding meanwhile; and none of the hostile
//! requests reaches the provider (the mock's `/_mock/stats`).
#![allow(clippy::disallowed_methods)] // watchdogs time real processes and sockets

mod kit;
use kit::{header, wait_for, RedisServer};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_levee");
/// The longest any single exchange may take before the connection counts as stuck.
const STUCK: Duration = Duration::from_secs(10);

const CHAT: &str = r#"{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#;
const MESSAGES: &str =
    r#"{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

// ---------------------------------------------------------------- processes

/// A child process, killed and reaped on drop; its stderr is captured.
struct Proc {
    name: &'static str,
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    fn spawn(name: &'static str, mut cmd: Command) -> (Proc, Receiver<String>) {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc::spawn_child(name, child)
    }

    /// Takes charge of a started child (killed on drop); captures its
    /// stderr when piped.
    fn spawn_child(name: &'static str, mut child: Child) -> (Proc, Receiver<String>) {
        let Some(pipe) = child.stderr.take() else {
            let (_tx, rx) = channel();
            return (
                Proc {
                    name,
                    child,
                    stderr: Arc::new(Mutex::new(String::new())),
                },
                rx,
            );
        };
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = channel();
        let sink = Arc::clone(&stderr);
        thread::spawn(move || {
            // Ends when the child's stderr closes (it exits or is killed).
            for line in BufReader::new(pipe).split(b'\n') {
                let Ok(line) = line else { break };
                let line = String::from_utf8_lossy(&line).into_owned();
                if let Ok(mut s) = sink.lock() {
                    s.push_str(&line);
                    s.push('\n');
                }
                let _ = tx.send(line);
            }
        });
        (
            Proc {
                name,
                child,
                stderr,
            },
            rx,
        )
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Mock {
    proc: Proc,
    addr: SocketAddr,
}

fn start_mock() -> Mock {
    let mut cmd = Command::new(BIN);
    cmd.args(["mock", "--listen", "127.0.0.1:0"]);
    let (proc, lines) = Proc::spawn("levee mock", cmd);
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                if let Some(a) = line.trim().strip_prefix("levee mock listening on ") {
                    let addr = a.parse().expect("mock prints its address");
                    return Mock { proc, addr };
                }
            }
            Err(_) => panic!(
                "levee mock did not print its address; stderr:\n{}",
                proc.stderr()
            ),
        }
    }
}

impl Mock {
    fn stats(&self) -> String {
        match get(self.addr, "/_mock/stats") {
            Answer::Resp(r) if r.status == 200 => r.text(),
            other => panic!("GET /_mock/stats: {other:?}"),
        }
    }

    fn requests_total(&self) -> u64 {
        json_u64(&self.stats(), "requests_total").expect("stats has requests_total")
    }

    fn set_faults(&self, json: &str) {
        let raw = format!(
            "POST /_mock/faults HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
            json.len()
        );
        match exchange(self.addr, raw.as_bytes(), STUCK) {
            Answer::Resp(r) if r.status == 200 => {}
            other => panic!("POST /_mock/faults {json}: {other:?}"),
        }
    }
}

struct Gateway {
    proc: Proc,
    addr: SocketAddr,
    admin: SocketAddr,
    _config: TempFile,
}

struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp_path(tag: &str) -> std::path::PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "levee-hostile-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A port that was free a moment ago (bind to port 0, read it, let it go).
fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr")
}

/// `levee serve --config` with `config`, on fresh loopback ports, ready
/// (admin `/healthz` answers 200). Retries with other ports if the first
/// pick was taken in between.
fn start_gateway(config: &str, env: &[(&str, &str)], extra: &[String]) -> Gateway {
    let mut last = String::new();
    for _ in 0..3 {
        let file = TempFile(temp_path("config.yaml"));
        std::fs::write(&file.0, config).expect("write config");
        let (listen, admin) = (free_port(), free_port());
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--config")
            .arg(&file.0)
            .args(["--listen", &listen.to_string()])
            .args(["--admin", &admin.to_string()])
            .args(["--log-format", "json"])
            .args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let (mut proc, _lines) = Proc::spawn("levee serve", cmd);
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until && proc.alive() {
            if let Answer::Resp(r) = get(admin, "/healthz") {
                if r.status == 200 {
                    return Gateway {
                        proc,
                        addr: listen,
                        admin,
                        _config: file,
                    };
                }
            }
            thread::sleep(Duration::from_millis(20));
        }
        last = proc.stderr();
    }
    panic!("levee serve did not become ready; stderr:\n{last}");
}

impl Gateway {
    fn metrics(&self) -> String {
        match get(self.admin, "/metrics") {
            Answer::Resp(r) if r.status == 200 => r.text(),
            other => panic!("GET /metrics: {other:?}"),
        }
    }

    /// The process is still running and has never panicked.
    fn assert_healthy(&mut self) {
        let name = self.proc.name;
        assert!(
            self.proc.alive(),
            "{name} died; stderr:\n{}",
            self.proc.stderr()
        );
        let err = self.proc.stderr();
        assert!(!err.contains("panicked"), "{name} panicked:\n{err}");
    }
}

// ---------------------------------------------------------------- HTTP over raw TCP

#[derive(Debug)]
struct Resp {
    status: u16,
    /// Header lines, names lower-cased.
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

#[derive(Debug)]
enum Answer {
    Resp(Resp),
    /// The connection closed (or was reset) before any response byte.
    Closed,
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_nodelay(true).ok();
    s
}

/// Reads until EOF; a read that blocks longer than `stuck` fails the test.
fn read_to_close(s: &mut TcpStream, stuck: Duration, what: &str) -> Vec<u8> {
    s.set_read_timeout(Some(stuck)).expect("read timeout");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return buf,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!(
                    "{what}: connection stuck (no byte and no close for {stuck:?}); got so far: {:?}",
                    String::from_utf8_lossy(&buf)
                )
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // Reset by the peer: whatever arrived before it is the answer.
            Err(_) => return buf,
        }
    }
}

fn parse_response(buf: &[u8]) -> Answer {
    if buf.is_empty() {
        return Answer::Closed;
    }
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "truncated response head: {:?}",
                String::from_utf8_lossy(buf)
            )
        });
    let head = &buf[..end];
    let mut lines = head.split(|&b| b == b'\n');
    let status_line = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, Vec<u8>)> = lines
        .filter_map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            let colon = l.iter().position(|&b| b == b':')?;
            let name = String::from_utf8_lossy(&l[..colon]).to_ascii_lowercase();
            let value = l[colon + 1..].trim_ascii().to_vec();
            Some((name, value))
        })
        .collect();
    let raw_body = &buf[end + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case(b"chunked"));
    let body = if chunked {
        dechunk(raw_body)
    } else {
        raw_body.to_vec()
    };
    Answer::Resp(Resp {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&b[..eol]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        b = &b[eol + 2..];
        if size == 0 || b.len() < size {
            break;
        }
        out.extend_from_slice(&b[..size]);
        b = b.get(size + 2..).unwrap_or_default();
    }
    out
}

/// Sends `raw` (which should ask for `connection: close`) and reads the answer.
/// A write the server refused halfway (it answered early and closed) is fine.
fn exchange(addr: SocketAddr, raw: &[u8], stuck: Duration) -> Answer {
    let mut s = connect(addr);
    s.set_write_timeout(Some(stuck)).expect("write timeout");
    let _ = s.write_all(raw);
    parse_response(&read_to_close(&mut s, stuck, "exchange"))
}

fn get(addr: SocketAddr, path: &str) -> Answer {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return Answer::Closed;
    };
    // The admin listener answers only to its own address as Host.
    let raw = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    if s.write_all(raw.as_bytes()).is_err() {
        return Answer::Closed;
    }
    parse_response(&read_to_close(&mut s, STUCK, path))
}

fn post(path: &str, body: &[u8], extra_headers: &[u8]) -> Vec<u8> {
    let mut raw = format!(
        "POST {path} HTTP/1.1\r\nhost: levee\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(extra_headers);
    raw.extend_from_slice(b"\r\n");
    raw.extend_from_slice(body);
    raw
}

/// `"key":N` in compact JSON.
fn json_u64(text: &str, key: &str) -> Option<u64> {
    let at = text.find(&format!("\"{key}\":"))? + key.len() + 3;
    let digits: String = text[at..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

// ---------------------------------------------------------------- verdicts

use levee_wire::Dialect;

/// Every answer: no 5xx without a reason. Also prints the verdict
/// (`cargo test -- --nocapture` shows the corpus's outcomes).
fn check_any(what: &str, a: &Answer) {
    match a {
        Answer::Resp(r) => eprintln!(
            "hostile: {what} -> {} {}",
            r.status,
            r.header("x-levee-reason")
                .map(|x| format!("(x-levee-reason: {x})"))
                .unwrap_or_else(|| "(HTTP layer)".into())
        ),
        Answer::Closed => eprintln!("hostile: {what} -> connection closed"),
    }
    if let Answer::Resp(r) = a {
        if r.status >= 500 {
            assert!(
                r.header("x-levee-reason").is_some(),
                "{what}: {} without x-levee-reason: {}",
                r.status,
                r.text()
            );
        }
    }
}

/// A Levee 4xx in the caller's dialect, naming a reason.
fn assert_dialect_4xx(what: &str, a: &Answer, dialect: Dialect, status: Option<u16>) {
    check_any(what, a);
    let Answer::Resp(r) = a else {
        panic!("{what}: closed without an answer, expected a 4xx in {dialect:?} dialect")
    };
    assert!(
        (400..500).contains(&r.status),
        "{what}: status {} ({})",
        r.status,
        r.text()
    );
    if let Some(s) = status {
        assert_eq!(r.status, s, "{what}: {}", r.text());
    }
    assert!(
        r.header("x-levee-reason").is_some(),
        "{what}: no x-levee-reason"
    );
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json"),
        "{what}"
    );
    let body = r.text();
    assert!(
        body.contains("\"error\":{") && body.contains("\"message\":\""),
        "{what}: not an error body: {body}"
    );
    match dialect {
        Dialect::OpenAi => assert!(
            body.starts_with("{\"error\":{") && !body.contains("\"type\":\"error\""),
            "{what}: not OpenAI's error shape: {body}"
        ),
        Dialect::Anthropic => assert!(
            body.contains("\"type\":\"error\""),
            "{what}: not Anthropic's error shape: {body}"
        ),
    }
}

/// Refused by the HTTP layer (a bare 4xx, then a close) or simply closed.
fn assert_refused_or_closed(what: &str, a: &Answer, allowed: &[u16]) {
    check_any(what, a);
    if let Answer::Resp(r) = a {
        assert!(
            allowed.contains(&r.status),
            "{what}: status {} (allowed: {allowed:?} or a closed connection): {}",
            r.status,
            r.text()
        );
    }
}

// ---------------------------------------------------------------- normal traffic

struct Background {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<(u64, Vec<String>)>,
}

/// Normal requests in both dialects, one after another, until stopped
/// (bounded: 25 s or 5,000 requests). Returns (successes, failures).
fn normal_traffic(gw: SocketAddr) -> Background {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let handle = thread::spawn(move || {
        let started = Instant::now();
        let (mut ok, mut failed) = (0u64, Vec::new());
        for i in 0..5_000u32 {
            if flag.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(25) {
                break;
            }
            let (path, body) = if i % 2 == 0 {
                ("/v1/chat/completions", CHAT)
            } else {
                ("/v1/messages", MESSAGES)
            };
            match exchange(gw, &post(path, body.as_bytes(), b""), STUCK) {
                Answer::Resp(r) if r.status == 200 && r.text().contains("\"usage\"") => ok += 1,
                other => failed.push(format!("{path}: {other:?}")),
            }
            thread::sleep(Duration::from_millis(5));
        }
        (ok, failed)
    });
    Background { stop, handle }
}

impl Background {
    fn finish(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("normal traffic thread")
    }
}

// ---------------------------------------------------------------- the corpus

fn hostile_config(mock: SocketAddr) -> String {
    format!(
        "limits: {{ header_read_timeout: 1s }}\n\
         providers:\n  \
           oa: {{ api: openai, base_url: \"http://{mock}\" }}\n  \
           an: {{ api: anthropic, base_url: \"http://{mock}\" }}\n\
         routes:\n  \
           - match: {{ path: /v1/messages }}\n    targets: [an]\n  \
           - targets: [oa]\n"
    )
}

/// A client that trickles its header section one byte at a time, slower
/// than the gateway's 1 s header-read timeout: Levee must close it.
fn slowloris(gw: SocketAddr) -> (Duration, Answer) {
    let mut s = connect(gw);
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    s.set_write_timeout(Some(Duration::from_secs(2)))
        .expect("write timeout");
    let started = Instant::now();
    let _ = s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: levee\r\nx-slow: ");
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    // Watchdog: 50 rounds of at most ~0.2 s each.
    for _ in 0..50 {
        if s.write_all(b"a").is_err() {
            break;
        }
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        if started.elapsed() > Duration::from_secs(10) {
            break;
        }
    }
    let took = started.elapsed();
    // Whatever is left to read, then the close.
    got.extend(read_to_close(&mut s, Duration::from_secs(3), "slowloris"));
    (took, parse_response(&got))
}

/// Sends part of a body, then disconnects.
fn leave_mid_body(gw: SocketAddr, path: &str, chunked: bool) {
    let mut s = connect(gw);
    let head = if chunked {
        format!("POST {path} HTTP/1.1\r\nhost: levee\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n20\r\n{{\"model\":\"gpt-4.1\",\"messages\":")
    } else {
        format!("POST {path} HTTP/1.1\r\nhost: levee\r\ncontent-type: application/json\r\ncontent-length: 4096\r\n\r\n{{\"model\":\"gpt-4.1\",\"messages\":[")
    };
    let _ = s.write_all(head.as_bytes());
    thread::sleep(Duration::from_millis(50));
    let _ = s.shutdown(Shutdown::Both);
}

/// A 50 MiB body sent for real (chunked, no length announced): the gateway
/// must stop reading at its limit and answer 413 (or close), not swallow it all.
fn streamed_huge_body(gw: SocketAddr) -> (u64, Answer) {
    let mut w = connect(gw);
    w.set_write_timeout(Some(Duration::from_secs(5)))
        .expect("write timeout");
    let mut r = w.try_clone().expect("clone socket");
    let writer = thread::spawn(move || {
        let mut sent = 0u64;
        let head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: levee\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
        if w.write_all(head).is_err() {
            return sent;
        }
        let mut chunk = b"100000\r\n".to_vec(); // 1 MiB
        chunk.extend(std::iter::repeat_n(b' ', 1 << 20));
        chunk.extend_from_slice(b"\r\n");
        for _ in 0..50 {
            if w.write_all(&chunk).is_err() {
                return sent;
            }
            sent += 1 << 20;
        }
        let _ = w.write_all(b"0\r\n\r\n");
        sent
    });
    let got = read_to_close(&mut r, STUCK, "50 MiB chunked body");
    let sent = writer.join().expect("writer thread");
    (sent, parse_response(&got))
}

/// Invalid JSON and bodies without a usable `model`, in both dialects: 400 in dialect.
fn bodies_that_are_not_requests(g: SocketAddr) {
    let chat = "/v1/chat/completions";
    let msgs = "/v1/messages";
    // Invalid JSON and a body without `model`, in both dialects.
    for (path, d) in [(chat, Dialect::OpenAi), (msgs, Dialect::Anthropic)] {
        for (what, body) in [
            (
                "invalid JSON",
                &b"{\"model\": \"gpt-4.1\", \"messages\": [tru"[..],
            ),
            ("not JSON at all", b"\x00\xff\xfe garbage"),
            ("a JSON array", b"[1,2,3]"),
            (
                "no model",
                b"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
            ),
            ("model not a string", b"{\"model\":42,\"messages\":[]}"),
            ("empty model", b"{\"model\":\"\",\"messages\":[]}"),
            ("empty body", b""),
        ] {
            let a = exchange(g, &post(path, body, b""), STUCK);
            assert_dialect_4xx(&format!("{what} on {path}"), &a, d, Some(400));
        }
    }
}

/// Bodies over the 10 MiB limit, announced or streamed: 413 (or a close), never swallowed whole.
fn bodies_over_the_limit(g: SocketAddr) {
    let chat = "/v1/chat/completions";
    let msgs = "/v1/messages";
    // A 50 MiB body announced by content-length: 413 at once, body unread.
    for (path, d) in [(chat, Dialect::OpenAi), (msgs, Dialect::Anthropic)] {
        let raw = format!(
            "POST {path} HTTP/1.1\r\nhost: levee\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{{\"model\":\"gpt-4.1\",",
            50 << 20
        );
        let t = Instant::now();
        let a = exchange(g, raw.as_bytes(), STUCK);
        assert_dialect_4xx(
            &format!("50 MiB content-length on {path}"),
            &a,
            d,
            Some(413),
        );
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "413 took {:?}",
            t.elapsed()
        );
    }
    // A 50 MiB body streamed without a length: refused at the 10 MiB limit.
    let (sent, a) = streamed_huge_body(g);
    eprintln!(
        "hostile: 50 MiB chunked body: {sent} bytes written before the gateway stopped reading"
    );
    match &a {
        Answer::Resp(_) => {
            assert_dialect_4xx("50 MiB chunked body", &a, Dialect::OpenAi, Some(413))
        }
        Answer::Closed => {}
    }
    assert!(
        sent < 50 << 20,
        "the gateway swallowed the whole 50 MiB body ({sent} bytes sent)"
    );
}

/// Header sections too large, header values that are not UTF-8 or hold control bytes: refused.
fn headers_that_are_not_acceptable(g: SocketAddr) {
    let chat = "/v1/chat/completions";
    let msgs = "/v1/messages";
    // 1,000 headers: 431 from the HTTP layer, or a closed connection.
    let many: String = (0..1000).map(|i| format!("x-h{i}: v\r\n")).collect();
    let a = exchange(g, &post(chat, CHAT.as_bytes(), many.as_bytes()), STUCK);
    assert_refused_or_closed("1,000 headers", &a, &[431]);
    // A header section far over the 64 KiB limit: likewise. (hyper enforces
    // `max_buf_size` on a head still incomplete after a read, so a head that
    // arrives whole may pass up to ~2x the limit; 256 KiB never does.)
    let big = format!("x-big: {}\r\n", "b".repeat(256 * 1024));
    let a = exchange(g, &post(chat, CHAT.as_bytes(), big.as_bytes()), STUCK);
    assert_refused_or_closed("a 256 KiB header", &a, &[431]);

    // Non-UTF-8 header values in headers Levee reads: 400 naming the header.
    for (path, d) in [(chat, Dialect::OpenAi), (msgs, Dialect::Anthropic)] {
        for (h, v) in [
            ("x-timeout-ms", &b"\xff\xfe"[..]),
            ("x-deadline-ms", b"\xc3\x28"),
            ("x-timeout-ms", b"1\xe2\x82"),
        ] {
            let mut hdr = format!("{h}: ").into_bytes();
            hdr.extend_from_slice(v);
            hdr.extend_from_slice(b"\r\n");
            let body = if path == chat { CHAT } else { MESSAGES };
            let a = exchange(g, &post(path, body.as_bytes(), &hdr), STUCK);
            let what = format!("non-UTF-8 {h} on {path}");
            assert_dialect_4xx(&what, &a, d, Some(400));
            if let Answer::Resp(r) = &a {
                assert!(r.text().contains(h), "{what}: the error does not name {h}");
            }
        }
    }
    // Control bytes in a header value or name: refused by the HTTP layer.
    for raw_hdr in [
        &b"x-evil: a\x00b\r\n"[..],
        b"x-ev\xffil: a\r\n",
        b"x-evil: a\rb\r\n",
    ] {
        let a = exchange(g, &post(chat, CHAT.as_bytes(), raw_hdr), STUCK);
        assert_refused_or_closed(
            &format!("header {:?}", String::from_utf8_lossy(raw_hdr)),
            &a,
            &[400],
        );
    }
}

/// Deadline headers that are not deadlines: 400 naming the header.
fn deadlines_that_are_not_deadlines(g: SocketAddr) {
    let chat = "/v1/chat/completions";
    let msgs = "/v1/messages";
    // Deadline headers that are not deadlines.
    for (path, d) in [(chat, Dialect::OpenAi), (msgs, Dialect::Anthropic)] {
        let body = if path == chat { CHAT } else { MESSAGES };
        for (h, v) in [
            ("x-timeout-ms", "-5"),
            ("x-deadline-ms", "abc"),
            ("x-timeout-ms", "1e3"),
            ("x-deadline-ms", "-1700000000000"),
            ("x-timeout-ms", ""),
        ] {
            let hdr = format!("{h}: {v}\r\n");
            let a = exchange(g, &post(path, body.as_bytes(), hdr.as_bytes()), STUCK);
            let what = format!("{h}: {v:?} on {path}");
            assert_dialect_4xx(&what, &a, d, Some(400));
            if let Answer::Resp(r) = &a {
                assert!(r.text().contains(h), "{what}: the error does not name {h}");
            }
        }
    }
}

/// Path traversal, plain and percent-encoded: never served, never forwarded.
fn paths_that_escape(g: SocketAddr) {
    // Path traversal, plain and percent-encoded: a 400 in the path's
    // dialect for a dot segment or an escaped dot or slash (refused before
    // any route is looked up), a 404 for a path that is merely unknown
    // (nothing is served from disk and nothing is forwarded), or a bare 400
    // from the HTTP layer for a target it cannot parse.
    for (target, d) in [
        ("/v1/../../etc/passwd", Dialect::OpenAi),
        ("/v1/%2e%2e/%2e%2e/etc/passwd", Dialect::OpenAi),
        ("/v1/chat/completions/../../../etc/passwd", Dialect::OpenAi),
        ("/v1/chat%2fcompletions", Dialect::OpenAi),
        (
            "/v1/chat/completions%2f..%2f..%2fetc%2fpasswd",
            Dialect::OpenAi,
        ),
        ("/..%2f..%2f..%2fetc%2fpasswd", Dialect::OpenAi),
        ("/v1/messages/../../etc/passwd", Dialect::Anthropic),
        ("/v1/messages/%2e%2e/%2e%2e/etc/passwd", Dialect::Anthropic),
        ("/v1/messages%00", Dialect::Anthropic),
    ] {
        let a = exchange(g, &post(target, CHAT.as_bytes(), b""), STUCK);
        let what = format!("POST {target}");
        match &a {
            Answer::Resp(r) if r.status == 400 && r.header("x-levee-reason").is_none() => {
                assert_refused_or_closed(&what, &a, &[400])
            }
            _ => {
                let ambiguous = target.contains("..") || target.to_ascii_lowercase().contains("%2");
                let status = if ambiguous { 400 } else { 404 };
                assert_dialect_4xx(&what, &a, d, Some(status))
            }
        }
        if let Answer::Resp(r) = &a {
            assert!(!r.text().contains("root:"), "{what}: served a file");
        }
        let raw = format!("GET {target} HTTP/1.1\r\nhost: levee\r\nconnection: close\r\n\r\n");
        let a = exchange(g, raw.as_bytes(), STUCK);
        assert_refused_or_closed(&format!("GET {target}"), &a, &[400, 404]);
    }
    for raw in [
        &b"GET ../../etc/passwd HTTP/1.1\r\nhost: levee\r\nconnection: close\r\n\r\n"[..],
        b"GET http://evil.example/../../etc/passwd HTTP/1.1\r\nhost: levee\r\nconnection: close\r\n\r\n",
    ] {
        let a = exchange(g, raw, STUCK);
        assert_refused_or_closed(&String::from_utf8_lossy(raw), &a, &[400, 404]);
    }
}

/// Framing tricks: conflicting lengths, a bad chunk size, length and chunked together.
fn framing_tricks(g: SocketAddr) {
    let chat = "/v1/chat/completions";
    // Framing tricks: conflicting lengths, a bad chunk size, length and chunked together.
    for (what, raw) in [
        ("two content-lengths", format!("POST {chat} HTTP/1.1\r\nhost: l\r\ncontent-length: 5\r\ncontent-length: 7\r\nconnection: close\r\n\r\n{CHAT}")),
        ("negative content-length", format!("POST {chat} HTTP/1.1\r\nhost: l\r\ncontent-length: -1\r\nconnection: close\r\n\r\n{CHAT}")),
        ("bad chunk size", format!("POST {chat} HTTP/1.1\r\nhost: l\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\nzz\r\n{CHAT}\r\n0\r\n\r\n")),
        ("length and chunked", format!("POST {chat} HTTP/1.1\r\nhost: l\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n0\r\n\r\n")),
    ] {
        let a = exchange(g, raw.as_bytes(), STUCK);
        match &a {
            Answer::Resp(r) if r.header("x-levee-reason").is_some() => {
                assert_dialect_4xx(what, &a, Dialect::OpenAi, None)
            }
            _ => assert_refused_or_closed(what, &a, &[400]),
        }
    }
}

/// Slowloris, and clients that leave mid-body.
fn slow_and_leaving_clients(g: SocketAddr) {
    let chat = "/v1/chat/completions";
    let msgs = "/v1/messages";
    // Slowloris: closed by Levee shortly after the 1 s header-read timeout.
    let (took, a) = slowloris(g);
    eprintln!("hostile: slowloris closed after {took:?}");
    assert_refused_or_closed("slowloris", &a, &[408]);
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(5),
        "slowloris connection closed after {took:?} (header_read_timeout is 1 s)"
    );

    // Clients that leave mid-body, with a length and chunked, in both dialects.
    for path in [chat, msgs] {
        leave_mid_body(g, path, false);
        leave_mid_body(g, path, true);
    }
}

#[test]
fn hostile_requests_get_clear_refusals_while_normal_traffic_flows() {
    let started = Instant::now();
    let mock = start_mock();
    let mut gw = start_gateway(&hostile_config(mock.addr), &[], &[]);
    let g = gw.addr;

    // Sanity: one normal request in each dialect works before anything else.
    for (path, body) in [("/v1/chat/completions", CHAT), ("/v1/messages", MESSAGES)] {
        match exchange(g, &post(path, body.as_bytes(), b""), STUCK) {
            Answer::Resp(r) if r.status == 200 => {}
            other => panic!("normal {path}: {other:?}"),
        }
    }
    let before = mock.requests_total();
    assert_eq!(before, 2);

    let normal = normal_traffic(g);
    let chat = "/v1/chat/completions";

    bodies_that_are_not_requests(g);
    bodies_over_the_limit(g);
    headers_that_are_not_acceptable(g);
    deadlines_that_are_not_deadlines(g);
    paths_that_escape(g);
    framing_tricks(g);
    slow_and_leaving_clients(g);

    // The normal loop is joined here: every normal request has its answer.
    let (ok, failed) = normal.finish();
    assert!(
        failed.is_empty(),
        "normal requests failed during the hostile traffic: {failed:#?}"
    );
    assert!(ok >= 10, "only {ok} normal requests ran alongside");
    eprintln!("hostile: {ok} normal requests succeeded alongside, none failed");
    gw.assert_healthy();
    let total = mock.requests_total();
    assert_eq!(
        total - before,
        ok,
        "the provider saw {} requests, but only {ok} normal ones were sent: hostile input reached it\n{}",
        total - before,
        mock.stats()
    );
    // Still serving after all of it.
    match exchange(g, &post(chat, CHAT.as_bytes(), b""), STUCK) {
        Answer::Resp(r) if r.status == 200 => {}
        other => panic!("normal request after the hostile traffic: {other:?}"),
    }
    gw.assert_healthy();
    assert!(mock.proc.stderr().find("panicked").is_none());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
}

/// Headers Levee only reads leniently: a non-UTF-8 value there is ignored
/// (or passed on), and the request is served normally — once. The
/// idempotency key is not lenient: an unusable one is a 400.
#[test]
fn non_utf8_values_in_other_headers_are_tolerated_not_fatal() {
    let mock = start_mock();
    let mut gw = start_gateway(&hostile_config(mock.addr), &[], &[]);
    // A key Levee cannot use as one is refused rather than silently dropped
    // (dropping it would let a retry run twice); other non-UTF-8 headers are
    // tolerated. Per case: the answer, then the provider's request count.
    let cases: [(&str, &[u8], u16, u64); 2] = [
        (
            "non-UTF-8 idempotency-key",
            b"idempotency-key: k\xff\xfe\r\n",
            400,
            0,
        ),
        (
            "non-UTF-8 lenient headers",
            b"x-stainless-timeout: \xff\r\nx-note: caf\xe9\r\n",
            200,
            1,
        ),
    ];
    for (what, headers, status, upstream) in cases {
        let a = exchange(
            gw.addr,
            &post("/v1/chat/completions", CHAT.as_bytes(), headers),
            STUCK,
        );
        check_any(what, &a);
        match &a {
            Answer::Resp(r) => assert_eq!(r.status, status, "{what}: {}", r.text()),
            Answer::Closed => panic!("{what}: closed"),
        }
        assert_eq!(mock.requests_total(), upstream, "{what}");
    }
    gw.assert_healthy();
}

// ---------------------------------------------------------------- secrets

/// A one-shot fake provider that records the request it receives and
/// answers 401 echoing the credential it was sent, as OpenAI does
/// (`Incorrect API key provided: Bearer sk-…`).
fn spy_provider() -> (SocketAddr, thread::JoinHandle<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind spy");
    let addr = l.local_addr().expect("spy addr");
    let h = thread::spawn(move || {
        l.set_nonblocking(true).ok();
        let until = Instant::now() + Duration::from_secs(20);
        let mut s = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(_) if Instant::now() < until => thread::sleep(Duration::from_millis(5)),
                Err(_) => return Vec::new(),
            }
        };
        s.set_nonblocking(false).ok();
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let mut got = Vec::new();
        let mut chunk = [0u8; 8192];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
        let head = String::from_utf8_lossy(&got).into_owned();
        let auth = header(&head, "authorization").unwrap_or_default();
        let body = format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {auth}.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}}}"#
        );
        let body = body.as_bytes();
        let resp = format!(
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = s.write_all(resp.as_bytes());
        let _ = s.write_all(body);
        got
    });
    (addr, h)
}

/// Mock-backed OpenAI and Anthropic providers and a spy provider, all with
/// the key in `LEVEE_TEST_KEY`.
fn keyed_config(mock: SocketAddr, spy: SocketAddr) -> String {
    format!(
        "providers:\n  \
           oa: {{ api: openai, base_url: \"http://{m}\", api_key_env: LEVEE_TEST_KEY }}\n  \
           an: {{ api: anthropic, base_url: \"http://{m}\", api_key_env: LEVEE_TEST_KEY }}\n  \
           spy: {{ api: openai, base_url: \"http://{spy}\", api_key_env: LEVEE_TEST_KEY }}\n\
         routes:\n  \
           - match: {{ path: /v1/messages }}\n    targets: [an]\n    retry: {{ max_attempts: 2, backoff: {{ base_ms: 1, max_ms: 2 }} }}\n  \
           - match: {{ model_prefix: \"spy/\" }}\n    targets: [spy]\n    retry: {{ max_attempts: 1 }}\n  \
           - targets: [oa]\n    retry: {{ max_attempts: 2, backoff: {{ base_ms: 1, max_ms: 2 }} }}\n",
        m = mock
    )
}

/// `--record FILE`: the tape is always checked.
fn record_args() -> (Option<TempFile>, Vec<String>) {
    let tape = TempFile(temp_path("tape.jsonl"));
    let extra = vec!["--record".to_string(), tape.0.display().to_string()];
    (Some(tape), extra)
}

/// Every kind of answer that could carry the key: successes (plain and
/// streamed, both dialects), the provider's 401 about the key, Levee's
/// own errors after 503s, 400s and resets, and bad requests.
fn answers_that_could_leak(
    g: SocketAddr,
    mock: &Mock,
    spy_seen: thread::JoinHandle<Vec<u8>>,
    key: &str,
) -> Vec<Answer> {
    let mut answers = Vec::new();
    let stream_chat =
        r#"{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let stream_msgs = r#"{"model":"claude-x","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let calls = [
        ("/v1/chat/completions", CHAT),
        ("/v1/chat/completions", stream_chat),
        ("/v1/messages", MESSAGES),
        ("/v1/messages", stream_msgs),
    ];
    // Successes.
    for (path, body) in calls {
        let a = exchange(g, &post(path, body.as_bytes(), b""), STUCK);
        match &a {
            Answer::Resp(r) if r.status == 200 => {}
            other => panic!("success case {path}: {other:?}"),
        }
        answers.push(a);
    }
    // The provider says the key is wrong (401): passed on, key not echoed.
    let spy_body = r#"{"model":"spy/gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#;
    let a = exchange(
        g,
        &post("/v1/chat/completions", spy_body.as_bytes(), b""),
        STUCK,
    );
    check_any("spy 401", &a);
    answers.push(a);
    let seen = String::from_utf8_lossy(&spy_seen.join().expect("spy thread")).to_lowercase();
    assert!(
        seen.contains(&format!("authorization: bearer {}", key.to_lowercase())),
        "the key was not sent upstream at all (so this test would prove nothing): {seen}"
    );
    // Failures: a 503 window (retried, then Levee's own error), a 400, a reset.
    for faults in [
        r#"{"faults":[{"status":503}]}"#,
        r#"{"faults":[{"status":400}]}"#,
        r#"{"faults":[{"reset":true}]}"#,
    ] {
        mock.set_faults(faults);
        for (path, body) in calls {
            let a = exchange(g, &post(path, body.as_bytes(), b""), STUCK);
            check_any(&format!("{faults} {path}"), &a);
            match &a {
                Answer::Resp(r) => assert!(r.status >= 400, "{faults} {path}: {}", r.status),
                Answer::Closed => panic!("{faults} {path}: closed"),
            }
            answers.push(a);
        }
    }
    // Bad requests of Levee's own, too.
    for (path, body) in [("/v1/chat/completions", "{"), ("/v1/messages", "{}")] {
        answers.push(exchange(g, &post(path, body.as_bytes(), b""), STUCK));
    }
    mock.set_faults(r#"{"faults":[]}"#);

    answers
}

#[test]
fn provider_keys_never_appear_in_logs_metrics_tapes_or_error_bodies() {
    const KEY: &str = "sk-levee-hostile-7f3a9c2e5b1d4e60-SECRET";
    // Distinctive fragments too, in case something truncates or splits it.
    let needles = [KEY, "7f3a9c2e5b1d4e60", "hostile-7f3a"];
    let mock = start_mock();
    let (spy, spy_seen) = spy_provider();
    let config = keyed_config(mock.addr, spy);
    let (tape, extra) = record_args();
    let env = [
        ("LEVEE_TEST_KEY", KEY),
        // As much logging as there is: a key must not hide in debug output either.
        ("LEVEE_LOG", "debug,levee=trace,levee_gateway=trace"),
    ];
    let mut gw = start_gateway(&config, &env, &extra);
    let g = gw.addr;
    let answers = answers_that_could_leak(g, &mock, spy_seen, KEY);
    // The four successful calls (plain and streamed, both dialects).
    let successes = 4;
    let metrics = gw.metrics();
    assert!(metrics.contains("levee_"), "metrics look empty: {metrics}");
    // Logs are written line by line from another process, the tape by the
    // recorder's thread: each is awaited (bounded) for its lines.
    let json_lines = |gw: &Gateway| {
        gw.proc
            .stderr()
            .lines()
            .filter(|l| l.starts_with('{'))
            .count()
    };
    wait_for(Duration::from_secs(10), "three JSON log lines", || {
        json_lines(&gw) >= 3
    });
    gw.assert_healthy();
    let logs = gw.proc.stderr();
    let tape_text = tape.as_ref().map(|t| {
        let read = || std::fs::read_to_string(&t.0).unwrap_or_default();
        wait_for(Duration::from_secs(5), "the tape's lines", || {
            read().lines().count() >= successes
        });
        read()
    });
    for needle in needles {
        assert!(!logs.contains(needle), "the key is in the logs:\n{logs}");
        assert!(!metrics.contains(needle), "the key is in /metrics");
        for a in &answers {
            if let Answer::Resp(r) = a {
                assert!(
                    !r.text().contains(needle),
                    "the key is in a body: {}",
                    r.text()
                );
                for (n, v) in &r.headers {
                    assert!(
                        !String::from_utf8_lossy(v).contains(needle),
                        "the key is in response header {n}"
                    );
                }
            }
        }
        if let Some(t) = &tape_text {
            assert!(!t.contains(needle), "the key is in the tape");
        }
        assert!(
            !mock.stats().contains(needle),
            "the key is in the mock's stats"
        );
    }
}

// ---------------------------------------------------------------- shutdown

/// `redis-cli -p PORT ARGS…`, its output trimmed; `None` without redis-cli.
fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let o = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    // An unreachable server must not read as an empty answer.
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// SIGTERM while a keyed request is still waiting on the provider, past the
/// grace period: the caller gets a 503 in its dialect (not a dropped
/// connection), and the replica's lease in Redis is released before it exits
/// (else another replica would wait out the lease before running the key).
#[test]
fn sigterm_answers_waiting_requests_and_releases_redis_leases() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    let port = redis.port;
    let until = Instant::now() + Duration::from_secs(10);
    while redis_cli(port, &["PING"]).as_deref() != Some("PONG") {
        assert!(Instant::now() < until, "redis-server did not start");
        thread::sleep(Duration::from_millis(20));
    }
    let mock = start_mock();
    mock.set_faults(r#"{"faults":[{"stall":true}]}"#);
    let config = format!(
        "shutdown_grace: 300ms\n\
         state: {{ backend: redis, url: \"redis://127.0.0.1:{port}\", key_prefix: \"sigterm\", timeout: 100ms }}\n\
         providers:\n  oa: {{ api: openai, base_url: \"http://{m}\" }}\n\
         routes:\n  - targets: [oa]\n    deadline: {{ default: 60s, max: 60s }}\n",
        m = mock.addr
    );
    let mut gw = start_gateway(&config, &[], &[]);
    let addr = gw.addr;
    let waiting = thread::spawn(move || {
        exchange(
            addr,
            &post(
                "/v1/chat/completions",
                CHAT.as_bytes(),
                b"idempotency-key: held-at-sigterm\r\n",
            ),
            STUCK,
        )
    });
    wait_for(
        Duration::from_secs(10),
        "the request reaches the provider",
        || json_u64(&mock.stats(), "in_flight") == Some(1),
    );
    let keys = redis_cli(port, &["--scan", "--pattern", "{sigterm}:idem:*"]).unwrap_or_default();
    assert_eq!(keys.lines().count(), 1, "one lease held: {keys:?}");
    let state = redis_cli(port, &["HGET", keys.trim(), "state"]);
    assert_eq!(state.as_deref(), Some("inflight"));

    let pid = gw.proc.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(killed.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    let until = Instant::now() + Duration::from_secs(10);
    while gw.proc.alive() {
        assert!(
            Instant::now() < until,
            "levee serve did not exit after SIGTERM"
        );
        thread::sleep(Duration::from_millis(10));
    }
    match waiting.join().expect("client thread") {
        Answer::Resp(r) => {
            assert_eq!(r.status, 503, "{}", r.text());
            assert_eq!(r.header("x-levee-reason").as_deref(), Some("shutting_down"));
            assert!(r.text().contains("\"error\""), "{}", r.text());
        }
        Answer::Closed => panic!("the waiting request got no response at all"),
    }
    let left = redis_cli(port, &["--scan", "--pattern", "{sigterm}:idem:*"])
        .expect("redis answers the scan after the gateway exits");
    assert!(
        left.is_empty(),
        "the lease outlived the replica: {left:?} (state {:?})",
        redis_cli(port, &["HGET", left.trim(), "state"])
    );
    drop(redis);
}
