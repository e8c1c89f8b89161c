//! What the binary's real-process tests share: a guard that stops a child
//! process, free loopback ports, a `levee mock` on an ephemeral port, a bounded
//! wait, and the deadline-census route several tests configure. The Redis
//! server and the HTTP head reader are the gateway test kit's own files.
#![allow(dead_code)] // each test file uses a part of the kit
#![allow(clippy::disallowed_methods)] // black-box timing of real processes

#[path = "../../../levee-gateway/tests/support/http_head.rs"]
mod http_head;
#[path = "../../../levee-gateway/tests/support/redis_server.rs"]
mod redis_server;
#[allow(unused_imports)] // each test file uses a part of the kit
pub use http_head::header;
#[allow(unused_imports)]
pub use redis_server::RedisServer;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_levee");

/// A deadline-census routes block: a primary answering within 35 s, a backup
/// (model gpt-4.1) within 30 s, waits of 7 s then 11 s; a retry needs ~72 s of
/// deadline, the backup ~30 s. Needs providers named `primary` and `backup`.
pub const CENSUS_ROUTES: &str = r#"routes:
  - match: { model_prefix: "claude/" }
    targets:
      - { provider: primary, expected_attempt_ms: 35000 }
      - { provider: backup, model: gpt-4.1, expected_attempt_ms: 30000 }
    deadline: { default: 30s, max: 300s }
    retry:
      max_attempts: 3
      on: [429, 503, 529]
      backoff: { schedule_ms: [7000, 11000], jitter: none }
"#;

/// A child process, killed and waited for on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh directory `TAG-PID` under the temp dir (the caller removes it).
pub fn test_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `levee mock --listen 127.0.0.1:0` with `extra` flags; returns it and the
/// host:port it printed.
pub fn start_mock(extra: &[&str]) -> (Proc, String) {
    let mut mock = Command::new(BIN)
        .args(["mock", "--listen", "127.0.0.1:0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(mock.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mock = Proc(mock);
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    (mock, addr)
}

/// Polls `f` every 10 ms; fails the test if it is not true within `limit`.
pub fn wait_until(limit: Duration, f: impl FnMut() -> bool) {
    wait_for(limit, "watchdog: condition", f);
}

/// Waits until `cond` holds, looking again every 10 ms: for what another
/// process or thread does, with no event to wait on. Fails the test, naming
/// `what`, when `limit` passes first.
pub fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < until,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One HTTP/1.1 exchange on a new connection closed after it: the status
/// and the whole answer as text. `fields` are extra header lines, each
/// ending in `\r\n`.
pub fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    fields: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n{fields}connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((status, out))
}

/// [`http_with`] with no extra fields.
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    http_with(addr, method, path, "", body)
}
