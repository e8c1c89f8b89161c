//! The providers' per-minute allowance, shared by replicas: one GCRA
//! (generic cell rate algorithm) cell per provider in Redis, decided by a
//! script on Redis's own clock so that replicas with skewed clocks agree.

use super::RedisState;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(SCRIPT));

const SCRIPT: &str = r#"
local key = KEYS[1]
local emission = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', key) or now)
if tat < now then tat = now end
local allow_at = tat - tolerance
if allow_at > now then return allow_at - now end
local new_tat = tat + emission
redis.call('SET', key, string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1000)
return 0
"#;

impl RedisState {
    /// One request of `provider`'s shared allowance: `Some(Ok)` allowed,
    /// `Some(Err(wait))` refused until then, `None` Redis unavailable.
    pub async fn allowance(
        &self,
        provider: &str,
        rpm: u32,
        burst: u32,
    ) -> Option<Result<(), Duration>> {
        let emission_us = 60_000_000u64 / u64::from(rpm.max(1));
        let tolerance_us = emission_us * u64::from(burst.max(1) - 1);
        let mut inv = GCRA.prepare_invoke();
        inv.key(format!("{}:rl:{}", self.prefix, provider))
            .arg(emission_us)
            .arg(tolerance_us);
        let wait_us: u64 = self.run("allowance", inv).await?;
        Some(if wait_us == 0 {
            Ok(())
        } else {
            Err(Duration::from_micros(wait_us))
        })
    }
}
