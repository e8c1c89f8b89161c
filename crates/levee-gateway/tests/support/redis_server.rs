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

/// A free port on 127.0.0.1.
#[allow(dead_code)]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A primary, its replica (synced) and a sentinel watching them as
/// `levee` (down after 1 s), all on loopback, for failover tests; `dir`
/// holds the sentinel's config. `None`: redis-server cannot be started
/// (a skip, or a failure with `LEVEE_REQUIRE_REDIS`). Waits at most
/// `limit` for each step.
#[allow(dead_code)]
pub async fn sentinel_pair(
    dir: &std::path::Path,
    limit: Duration,
) -> Option<(RedisServer, RedisServer, RedisServer)> {
    let start = |listen: Vec<String>, port: u16| {
        let s = RedisServer::start_with(&listen, port);
        assert!(
            s.is_some() || std::env::var_os("LEVEE_REQUIRE_REDIS").is_none(),
            "redis-server is required"
        );
        s
    };
    let (pp, rp, sp) = (free_port(), free_port(), free_port());
    let primary = start(vec!["--port".into(), pp.to_string()], pp)?;
    primary.ready(limit).await;
    let replica_of = vec![
        "--port".into(),
        rp.to_string(),
        "--replicaof".into(),
        "127.0.0.1".into(),
        pp.to_string(),
    ];
    let replica = start(replica_of, rp)?;
    replica.ready(limit).await;
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!("port {sp}\nbind 127.0.0.1\nsentinel monitor levee 127.0.0.1 {pp} 1\nsentinel down-after-milliseconds levee 1000\nsentinel failover-timeout levee 5000\n"),
    )
    .expect("write the sentinel's config");
    let sentinel = start(vec![conf.display().to_string(), "--sentinel".into()], sp)?;
    sentinel.ready(limit).await;
    let synced = async {
        loop {
            let out = Command::new("redis-cli")
                .args(["-p", &rp.to_string(), "info", "replication"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            if out.contains("master_link_status:up") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(limit, synced)
        .await
        .expect("the replica syncs");
    Some((primary, replica, sentinel))
}
