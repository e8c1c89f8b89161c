//! Replicas that count each other: each announces itself in Redis with a
//! short lease (a sorted set of replica ids scored by their lease's end,
//! on Redis's own clock so that skewed replicas agree), renewed every
//! [`RENEW`]; the live leases are the replica count. An operator-typed
//! `state.replicas` goes stale within minutes under an autoscaler, and
//! while Redis is unreachable each replica enforces 1/N of every allowance:
//! too much when replicas were added, too little when some were removed.
//! So N is the count last seen, never below `state.replicas` (a floor, and
//! the fallback before any count is seen). A replica that stops leaves at
//! once; one that dies is forgotten when its lease ends.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{RedisState, StateUse};

/// How long a replica's announcement lasts without renewal.
pub(crate) const LEASE: Duration = Duration::from_secs(10);

/// How often a replica renews it.
pub(crate) const RENEW: Duration = Duration::from_secs(3);

/// Renews this replica's lease (KEYS[1] the set, ARGV[1] its id, ARGV[2]
/// the lease in ms), forgets ended leases, and counts the live ones.
static ANNOUNCE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return redis.call('ZCARD', KEYS[1])
",
    )
});

/// Takes this replica's lease back (KEYS[1] the set, ARGV[1] its id).
static LEAVE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new("return redis.call('ZREM', KEYS[1], ARGV[1])"));

impl RedisState {
    /// The key of the set of replica leases.
    fn replicas_key(&self) -> String {
        format!("{}:replicas", self.prefix)
    }

    /// N, the replicas sharing each allowance: the live count last seen,
    /// never below `state.replicas`.
    pub(crate) fn replicas_now(&self) -> u32 {
        self.live.load(Ordering::Relaxed).max(self.replicas)
    }

    /// The live count last seen (`None` before any).
    pub(crate) fn live_replicas(&self) -> Option<u32> {
        Some(self.live.load(Ordering::Relaxed)).filter(|n| *n > 0)
    }

    /// Renews this replica's lease and learns the count; `None` when Redis
    /// could not be reached (the count last seen stays).
    pub(crate) async fn announce(&self) -> Option<u32> {
        let mut inv = ANNOUNCE.prepare_invoke();
        let lease_ms = u64::try_from(LEASE.as_millis()).unwrap_or(10_000);
        inv.key(self.replicas_key()).arg(&self.id).arg(lease_ms);
        let budget = self.timeout.max(Duration::from_millis(250));
        let n: u32 = self.run_within(StateUse::Replicas, inv, budget).await?;
        self.live.store(n.max(1), Ordering::Relaxed);
        if !self.conn.is_cluster() {
            let info = redis::cmd("INFO").arg("replication").clone();
            if let Some(text) = self
                .query_within::<String>(StateUse::Replicas, info, budget)
                .await
            {
                let replicas = text
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("connected_slaves:"))
                    .and_then(|n| n.parse::<u32>().ok())
                    .unwrap_or(0);
                self.replicated.store(replicas > 0, Ordering::Relaxed);
            }
        }
        Some(n)
    }

    /// After a write that must survive a failover (an idempotency claim,
    /// a stored answer): waits for one Redis replica to acknowledge it
    /// (`WAIT 1`, within the state timeout), where the primary has
    /// replicas. `false`: none acknowledged in time (the caller goes on).
    ///
    /// `WAIT` holds the connection it is sent on, which every call shares:
    /// a replica that does not acknowledge (gone, or a primary just
    /// promoted that has none yet) would hold every call for the timeout.
    /// So one unacknowledged `WAIT` stops the waiting until the next lease
    /// renewal finds a replica again (within 3 s).
    pub(crate) async fn wait_replicated(&self) -> bool {
        if !self.replicated.load(Ordering::Relaxed) {
            return true;
        }
        let ms = u64::try_from(self.timeout.as_millis()).unwrap_or(5).max(1);
        let wait = redis::cmd("WAIT").arg(1).arg(ms).clone();
        let budget = self.timeout + Duration::from_millis(50);
        let acked: Option<i64> = self.query_within(StateUse::Idempotency, wait, budget).await;
        let ok = acked.is_some_and(|n| n >= 1);
        if !ok {
            self.replicated.store(false, Ordering::Relaxed);
        }
        ok
    }

    /// Takes this replica's lease back (at shutdown), best effort.
    pub(crate) async fn leave(&self) {
        let mut inv = LEAVE.prepare_invoke();
        inv.key(self.replicas_key()).arg(&self.id);
        let _ = self.run_once::<i64>(inv, Duration::from_millis(500)).await;
    }
}

/// Announces this replica every [`RENEW`] until `stop` says so, then
/// leaves; `gauge` shows the live count.
pub(crate) async fn announce_until(
    redis: Arc<RedisState>,
    gauge: prometheus_client::metrics::gauge::Gauge,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Some(n) = redis.announce().await {
            gauge.set(i64::from(n));
        }
        tokio::select! {
            _ = tokio::time::sleep(RENEW) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    redis.leave().await;
}
