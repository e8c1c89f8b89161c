//! The providers' per-minute allowance, shared by replicas: one GCRA
//! (generic cell rate algorithm) cell per provider and meter in Redis —
//! requests, and tokens as the provider meters them — decided by a script
//! on Redis's own clock so that replicas with skewed clocks agree. A
//! request spends all its meters or none; input and output meters are
//! settled from the answer's usage by a second script.

use super::RedisState;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(SCRIPT));
static SETTLE: LazyLock<Script> = LazyLock::new(|| Script::new(SETTLE_SCRIPT));

/// KEYS: one cell per meter. ARGV: per meter, the emission per unit (µs),
/// the tolerance (µs: the bucket less one unit) and the cost (units).
/// Returns 0 when every meter conforms (and spends them all), else the
/// longest wait in µs (and spends nothing).
const SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local wait = 0
local tats = {}
for i = 1, #KEYS do
  local emission = tonumber(ARGV[3 * i - 2])
  local tolerance = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  local new_tat = tat + emission * cost
  local allow_at = new_tat - emission - tolerance
  if allow_at > now and allow_at - now > wait then wait = allow_at - now end
  tats[i] = new_tat
end
if wait > 0 then return math.ceil(wait) end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], string.format('%d', math.floor(tats[i])), 'PX', math.ceil((tats[i] - now) / 1000) + 1000)
end
return 0
"#;

/// KEYS: one cell. ARGV: emission per unit (µs), units given back (negative:
/// taken). The cell never moves before now.
const SETTLE_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
local new_tat = tat - tonumber(ARGV[1]) * tonumber(ARGV[2])
if new_tat <= now then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[1], string.format('%d', math.floor(new_tat)), 'PX', math.ceil((new_tat - now) / 1000) + 1000)
return 0
"#;

/// One meter of a shared allowance: its cell's name suffix (`""` for
/// requests, the key the requests-only allowance always used), its rate a
/// minute and its bucket.
#[derive(Clone, Copy, Debug)]
pub struct SharedMeter {
    pub suffix: &'static str,
    pub per_minute: u64,
    pub capacity: u64,
}

impl SharedMeter {
    fn emission_us(&self) -> f64 {
        60_000_000.0 / self.per_minute.max(1) as f64
    }
}

impl RedisState {
    /// Spends `cost` of each meter of `provider`'s shared allowance, all or
    /// none: `Some(Ok)` allowed, `Some(Err(wait))` refused until the
    /// slowest conforms, `None` Redis unavailable.
    pub async fn allowance_of(
        &self,
        provider: &str,
        meters: &[(SharedMeter, u64)],
    ) -> Option<Result<(), Duration>> {
        let mut inv = GCRA.prepare_invoke();
        for (m, cost) in meters {
            let emission = m.emission_us();
            let capacity = m.capacity.max(1);
            inv.key(allowance_key(&self.prefix, provider, m.suffix))
                .arg(emission)
                .arg(emission * (capacity - 1) as f64)
                // A request larger than the bucket goes when it is full.
                .arg((*cost).min(capacity));
        }
        let wait_us: u64 = self.run(super::StateUse::Allowance, inv).await?;
        Some(if wait_us == 0 {
            Ok(())
        } else {
            Err(Duration::from_micros(wait_us))
        })
    }

    /// Gives `units` of one meter back to `provider`'s shared allowance
    /// (negative: takes them), when an answer used less (or more) than its
    /// estimate. `None`: Redis unavailable.
    pub async fn settle_allowance(
        &self,
        provider: &str,
        meter: SharedMeter,
        units: i64,
    ) -> Option<()> {
        let mut inv = SETTLE.prepare_invoke();
        inv.key(allowance_key(&self.prefix, provider, meter.suffix))
            .arg(meter.emission_us())
            .arg(units);
        let _: u64 = self.run(super::StateUse::Allowance, inv).await?;
        Some(())
    }
}

/// `{prefix:rl:provider}suffix`: one allowance's meters share a hash tag,
/// so a Redis Cluster keeps them in one slot (the script reads them
/// together) while different allowances spread over the cluster.
fn allowance_key(prefix: &str, provider: &str, suffix: &str) -> String {
    format!("{{{prefix}:rl:{provider}}}{suffix}")
}
