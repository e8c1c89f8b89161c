//! Replicas sharing state on the Redis deployments platform teams run: a
//! three-node Redis Cluster (with its slots resharded under load) and a
//! Sentinel-managed primary and replica (with the primary killed and the
//! replica promoted). Each time an idempotency key shared by two replicas
//! runs once, and a shared allowance holds. Needs `redis-server` and
//! `redis-cli` (scripts/test installs them); all on loopback, all stopped.

mod support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(30);

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `redis-cli -p port args…`, its output (`None` when it cannot run).
fn cli(port: u16, rest: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(rest)
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("levee-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Polls `check` every 100 ms until it holds, under the watchdog.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let polled = async {
        while !check() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    if tokio::time::timeout(WATCHDOG, polled).await.is_err() {
        panic!("{what}: not within {WATCHDOG:?}");
    }
}

/// A started server, or a skip (a failure with `LEVEE_REQUIRE_REDIS`).
fn started(listen: Vec<String>, port: u16) -> Option<RedisServer> {
    let s = RedisServer::start_with(&listen, port);
    if s.is_none() {
        assert!(
            std::env::var_os("LEVEE_REQUIRE_REDIS").is_none(),
            "redis-server is required"
        );
    }
    s
}

/// Three cluster-enabled nodes joined into one cluster (no replicas).
/// A cluster-enabled node on `port`, its state in `dir` (so that a node
/// started again on the same port rejoins as itself).
async fn cluster_node(dir: &Path, port: u16) -> Option<RedisServer> {
    let conf = dir.join(format!("nodes-{port}.conf")).display().to_string();
    let p = port.to_string();
    let listen = args(&[
        "--port",
        &p,
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        &conf,
        "--cluster-node-timeout",
        "2000",
        "--dir",
        &dir.display().to_string(),
    ]);
    let node = started(listen, port)?;
    node.ready(WATCHDOG).await;
    Some(node)
}

async fn cluster(dir: &Path) -> Option<Vec<RedisServer>> {
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(cluster_node(dir, free_port()).await?);
    }
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let mut create = vec!["--cluster", "create"];
    create.extend(addrs.iter().map(String::as_str));
    create.extend(["--cluster-replicas", "0", "--cluster-yes"]);
    cli(nodes[0].port, &create)?;
    // Each node serves its slots only once it says the cluster is ok
    // itself (a node answers `CLUSTERDOWN` until then).
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    until("the cluster forms", || {
        ports
            .iter()
            .all(|p| cli(*p, &["cluster", "info"]).is_some_and(|i| i.contains("cluster_state:ok")))
    })
    .await;
    Some(nodes)
}

const ROUTES: &str = "providers:\n  p: { api: openai, base_url: \"{mock0}\", rate_limit: { requests_per_minute: 60, burst: 6 } }\nroutes:\n  - targets: [p]\n    retry: { max_attempts: 1 }\n";

/// Two replicas with `state` before the routes, in front of one mock.
async fn two_replicas(state: &str, faults: &str) -> (Env, levee_gateway::Running) {
    let config = format!("{state}{ROUTES}");
    let a = start(&[faults], &config).await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\n{}",
        config.replace("{mock0}", &a.mocks[0].url())
    );
    let b = spawn_text(&text, 7).await;
    // Redis may be slow to take the first connection (each replica waits
    // 500 ms for it, then serves on local state): sharing is asserted once
    // each replica has renewed its lease through Redis (the first to start
    // counts itself, the second both).
    for (admin, n) in [(a.gw.admin_addr, 1.0), (b.admin_addr, 2.0)] {
        watchdog(WATCHDOG, a.replicas_until(admin, |v| v >= n)).await;
    }
    (a, b)
}

/// Both replicas' counts of state calls served locally, for a failure's
/// message.
async fn fallbacks(a: &Env, b: &levee_gateway::Running) -> String {
    let mut out = String::new();
    for (name, admin) in [("a", a.gw.admin_addr), ("b", b.admin_addr)] {
        let m = a.get_from(admin, "/metrics").await.text();
        let lines: Vec<&str> = m
            .lines()
            .filter(|l| l.starts_with("levee_state_fallback_total"))
            .collect();
        out.push_str(&format!("replica {name}: {lines:?}\n"));
    }
    out
}

async fn post_to(env: &Env, addr: std::net::SocketAddr, headers: &[(&str, &str)]) -> Resp {
    let req = post_request(&format!("http://{addr}/v1/chat/completions"), CHAT, headers);
    watchdog(WATCHDOG, async {
        Resp::read(env.client.request(req).await.unwrap()).await
    })
    .await
}

/// The same idempotency key sent to both replicas while the first is at
/// the provider: one provider request, one answer.
async fn one_key_runs_once(a: &Env, rb: &levee_gateway::Running, key: &str) {
    let b = rb.addr;
    let before = a.stats(0).requests_total;
    let h = [("idempotency-key", key), ("x-timeout-ms", "10000")];
    let first = post_to(a, a.gw.addr, &h);
    let second = async {
        watchdog(WATCHDOG, async {
            while a.stats(0).in_flight < 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        post_to(a, b, &h).await
    };
    let (x, y) = tokio::join!(first, second);
    assert_eq!(
        (x.status, y.status),
        (200, 200),
        "{} / {}",
        x.text(),
        y.text()
    );
    let sent = a.stats(0).requests_total - before;
    if x.body != y.body || sent != 1 {
        panic!(
            "{key}: {sent} provider requests, {} answers; state calls served locally:\n{}",
            if x.body == y.body { 1 } else { 2 },
            fallbacks(a, rb).await
        );
    }
}

/// Moves every slot of the first node to the second while requests run:
/// the client follows `MOVED` and `ASK`, and every request is answered.
async fn reshard_under_load(a: &Env, b: std::net::SocketAddr, nodes: &[RedisServer]) {
    // Move every slot of the first node to the second, under load: the
    // client follows MOVED and ASK.
    let from = cli(nodes[0].port, &["cluster", "myid"]).unwrap_or_default();
    let to = cli(nodes[1].port, &["cluster", "myid"]).unwrap_or_default();
    let port = nodes[0].port;
    let reshard = std::thread::spawn(move || {
        cli(
            port,
            &[
                "--cluster",
                "reshard",
                &format!("127.0.0.1:{port}"),
                "--cluster-from",
                from.trim(),
                "--cluster-to",
                to.trim(),
                "--cluster-slots",
                "5461",
                "--cluster-yes",
            ],
        )
    });
    let mut answered = 0;
    for i in 0..20 {
        let key = format!("during-{i}");
        let r = post_to(a, b, &[("idempotency-key", &key), ("x-timeout-ms", "5000")]).await;
        assert!(matches!(r.status, 200 | 429), "{}: {}", r.status, r.text());
        answered += 1;
    }
    assert_eq!(answered, 20);
    let _ = reshard.join();
    // The first node holds no slot any more (its line lists no range).
    let table = cli(nodes[1].port, &["cluster", "nodes"]).unwrap_or_default();
    let first = table
        .lines()
        .find(|l| l.contains(&format!("127.0.0.1:{}@", nodes[0].port)))
        .unwrap_or_default();
    assert_eq!(
        first.split_whitespace().count(),
        8,
        "resharded away: {table}"
    );
}

/// Stops the node that now holds the slots of both nodes' halves, keeps
/// sending requests (served on local state while its slots are down), then
/// starts it again on its port: the cluster heals, and a key shared by
/// both replicas runs once again.
async fn restart_under_load(
    a: &Env,
    b: std::net::SocketAddr,
    dir: &Path,
    nodes: &mut Vec<RedisServer>,
) {
    let port = nodes[1].port;
    let first = nodes[0].port;
    drop(nodes.remove(1));
    for i in 0..10 {
        let key = format!("while-down-{i}");
        let r = post_to(a, b, &[("idempotency-key", &key), ("x-timeout-ms", "5000")]).await;
        assert!(matches!(r.status, 200 | 429), "{}: {}", r.status, r.text());
    }
    nodes.insert(
        1,
        cluster_node(dir, port)
            .await
            .expect("the node starts again"),
    );
    until("the cluster heals", || {
        cli(first, &["cluster", "info"]).is_some_and(|i| i.contains("cluster_state:ok"))
    })
    .await;
    let shared_again = async {
        for i in 0.. {
            let key = format!("healed-{i}");
            let before = a.stats(0).requests_total;
            let h = [("idempotency-key", key.as_str()), ("x-timeout-ms", "5000")];
            let x = post_to(a, a.gw.addr, &h).await;
            let y = post_to(a, b, &h).await;
            if x.status == 200 && x.body == y.body && a.stats(0).requests_total - before == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    watchdog(WATCHDOG, shared_again).await;
}

#[tokio::test]
async fn replicas_share_a_redis_cluster_through_a_resharding() {
    let dir = scratch("cluster");
    let Some(mut nodes) = cluster(&dir).await else {
        return;
    };
    let seeds: Vec<String> = nodes
        .iter()
        .map(|n| format!("\"redis://127.0.0.1:{}\"", n.port))
        .collect();
    let state = format!(
        "state: {{ backend: redis, mode: cluster, nodes: [{}], key_prefix: c, replicas: 2, timeout: 500ms }}\n",
        seeds.join(", ")
    );
    let (a, b) = two_replicas(&state, "faults:\n  - { latency: 100ms }\n").await;
    // Keys whose own slots lie on every node: each runs once.
    for k in ["k-alpha", "k-beta", "k-gamma", "k-delta", "k-epsilon"] {
        one_key_runs_once(&a, &b, k).await;
    }
    // The shared allowance (6 in a burst, one a second after) holds over
    // both replicas: the five keys spent five of its six; replica b alone
    // would still have had six.
    let mut ok = 0;
    for i in 0..16 {
        let addr = if i % 2 == 0 { a.gw.addr } else { b.addr };
        if post_to(&a, addr, &[("x-timeout-ms", "300")]).await.status == 200 {
            ok += 1;
        }
    }
    assert!(
        (1..=4).contains(&ok),
        "{ok} answered: one left of the shared burst, and a second's refill"
    );
    reshard_under_load(&a, b.addr, &nodes).await;
    one_key_runs_once(&a, &b, "after").await;
    restart_under_load(&a, b.addr, &dir, &mut nodes).await;
    b.shutdown().await;
    a.stop().await;
    drop(nodes);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn replicas_follow_a_sentinel_failover() {
    let dir = scratch("sentinel");
    let Some((primary, replica, sentinel)) = sentinel_pair(&dir, WATCHDOG).await else {
        return;
    };
    let replica_port = replica.port;
    let state = format!(
        "state: {{ backend: redis, mode: sentinel, nodes: [\"redis://127.0.0.1:{}\"], sentinel_master: levee, key_prefix: s, replicas: 2, timeout: 500ms }}\n",
        sentinel.port
    );
    let (a, b) = two_replicas(&state, "faults:\n  - { latency: 300ms }\n").await;
    one_key_runs_once(&a, &b, "before").await;
    // The claim and the stored answer each waited for the replica's
    // acknowledgement (`WAIT 1`) before the request went on.
    let stats = cli(primary.port, &["info", "commandstats"]).unwrap_or_default();
    let waits: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(waits >= 2, "WAIT calls on the primary: {waits}\n{stats}");
    // The primary dies; the sentinel promotes the replica.
    drop(primary);
    let sp = sentinel.port;
    until("the sentinel promotes the replica", || {
        cli(sp, &["sentinel", "get-master-addr-by-name", "levee"])
            .is_some_and(|o| o.contains(&replica_port.to_string()))
    })
    .await;
    // Served throughout (on local state while the primary is gone), and
    // shared again on the new primary.
    let r = post_to(&a, a.gw.addr, &[("x-timeout-ms", "5000")]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let shared_again = async {
        loop {
            let k = format!("after-{}", a.stats(0).requests_total);
            let before = a.stats(0).requests_total;
            let h = [("idempotency-key", k.as_str())];
            let x = post_to(&a, a.gw.addr, &h).await;
            let y = post_to(&a, b.addr, &h).await;
            if x.status == 200 && x.body == y.body && a.stats(0).requests_total - before == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    watchdog(WATCHDOG, shared_again).await;
    b.shutdown().await;
    a.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
