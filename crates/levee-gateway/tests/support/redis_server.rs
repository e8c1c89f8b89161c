//! A throwaway `redis-server` for tests: loopback only, no persistence,
//! stopped on drop. The gateway's, the binary's and the drill's tests include
//! this one file, so the three start Redis the same way.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `redis-server`, killed and waited for on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    /// Starts one on 127.0.0.1:`port`; `None` when it cannot be started.
    pub fn start(port: u16) -> Option<RedisServer> {
        RedisServer::start_with(&["--port".to_string(), port.to_string()], port)
    }

    /// Starts one listening as `listen` says (`--port P`, or `--port 0
    /// --tls-port P` with its certificate arguments) on 127.0.0.1:`port`.
    #[allow(dead_code)]
    pub fn start_with(listen: &[String], port: u16) -> Option<RedisServer> {
        let child = Command::new("redis-server")
            .args(listen)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        Some(RedisServer { child, port })
    }

    /// Starts one on a free port. Without redis-server the test is skipped
    /// (`None`, and says so), unless `LEVEE_REQUIRE_REDIS` is set: then it fails.
    pub fn start_or_skip() -> Option<RedisServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .ok()?;
        let started = RedisServer::start(port);
        if started.is_none() {
            assert!(
                std::env::var_os("LEVEE_REQUIRE_REDIS").is_none(),
                "redis-server is required (scripts/test installs it) but could not be started"
            );
            eprintln!("redis-server not installed: skipping (scripts/test installs it)");
        }
        started
    }

    /// Waits until it accepts connections; fails the test after `limit`.
    pub async fn ready(&self, limit: Duration) {
        let accepting = async {
            while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(limit, accepting)
            .await
            .expect("redis-server starts accepting connections");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
