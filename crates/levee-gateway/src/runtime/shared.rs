//! State shared by every request of a running gateway: the validated config,
//! per-provider runtime (client + policy state), per-route budgets and
//! bulkheads, metrics, the clock.
//!
//! One `Shared` is one config generation: a reload (`crate::runtime::reload`) builds
//! the next one, carrying over by `Arc` what outlives a config (metrics,
//! stores, unchanged providers and routes), and each request keeps the
//! generation it started under.

use crate::clock::Clock;
use crate::observe::metrics::Metrics;
use crate::state::idempotency::{
    IdempotencyBackend, IdempotencyStore, MemoryBackend, RedisBackend,
};
use crate::state::{RedisSetupError, RedisState};
use crate::upstream::{ProviderRuntime, UpstreamError};
use levee_config::StateBackend;
use levee_config::{CallerKey, Config};
use levee_policy::{ConcurrencyLimiter, RetryBudget};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// One route at run time.
#[derive(Debug)]
pub struct RouteRuntime {
    budgets: Vec<Mutex<RetryBudget>>,
    pub(crate) bulkhead: Arc<ConcurrencyLimiter>,
    /// Requests waiting out a backoff, a Retry-After or a model's pace:
    /// they give their bulkhead slot back while they wait (the slots count
    /// requests on the wire) and are bounded here instead, at four times
    /// the bulkhead, and by their deadlines.
    pub(crate) waiting: Arc<ConcurrencyLimiter>,
}

impl RouteRuntime {
    /// Target `t`'s retry budget.
    pub fn budget(&self, t: usize) -> MutexGuard<'_, RetryBudget> {
        self.budgets[t].lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RouteRuntime {
    /// Fresh budgets (one per target) and bulkhead for `route`.
    pub fn new(route: &levee_config::Route) -> Self {
        RouteRuntime {
            budgets: route
                .targets
                .iter()
                .map(|_| Mutex::new(route.budget.clone()))
                .collect(),
            bulkhead: ConcurrencyLimiter::new(route.max_in_flight),
            waiting: ConcurrencyLimiter::new(route.max_in_flight.saturating_mul(4)),
        }
    }
}

/// Everything a request handler needs. Its fields are the gateway's own;
/// other crates read what they need through the accessors below.
pub struct Shared {
    pub(crate) config: Config,
    pub(crate) clock: Clock,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) providers: Vec<Arc<ProviderRuntime>>,
    pub(crate) routes: Vec<Arc<RouteRuntime>>,
    /// sha256 digests of accepted caller keys (empty: no caller auth).
    pub(crate) keys: Vec<[u8; 32]>,
    /// The SigV4 key pairs among them, with their secrets.
    pub(crate) signing: Vec<SigningKey>,
    pub(crate) idempotency: Arc<dyn IdempotencyBackend>,
    /// Set with `state: { backend: redis }`.
    pub(crate) redis: Option<Arc<RedisState>>,
    /// Where each stored response was created (kept across reloads).
    pub(crate) origins: Arc<crate::state::origins::Origins>,
    /// Callers' spend: their books and the hourly ledger (kept across
    /// reloads).
    pub(crate) spend: Arc<crate::spend::Books>,
    pub(crate) shutting_down: Arc<AtomicBool>,
    /// Set when the shutdown grace period is over.
    pub(crate) grace_over: Arc<crate::runtime::shutdown::GraceOver>,
    /// `--record`: where upstream exchanges are written.
    pub(crate) recorder: Option<Arc<crate::observe::record::Recorder>>,
    /// The provider keys and every credential a platform obtained since,
    /// redacted from answers, logs and tapes.
    pub(crate) secrets: crate::observe::live_secrets::LiveSecrets,
    /// Callers and deadlines seen in traffic, targets' observed latency.
    pub(crate) census: crate::observe::census::Census,
    /// Set with `telemetry.otlp_endpoint`: spans exported over OTLP/HTTP.
    pub(crate) telemetry: Option<Arc<crate::observe::telemetry::Telemetry>>,
    /// Which config this is (content hash, load time, generation number).
    pub(crate) generation: crate::runtime::generation::Generation,
    pub(crate) seed: u64,
    pub(crate) counter: Arc<AtomicU64>,
    /// This process's id, read once: `std::process::id()` is a `getpid`
    /// system call each time (glibc does not cache it).
    pub(crate) pid: u32,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Redis(#[from] RedisSetupError),
    #[error("caller key `{name}`: environment variable `{var}` is not set; export it, or list the key by its `sha256` instead of `env`")]
    MissingCallerKey { name: String, var: String },
    #[error(transparent)]
    Telemetry(#[from] crate::observe::telemetry::TelemetryError),
}

impl Shared {
    /// The metrics registry every generation shares.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Callers and deadlines seen in traffic, targets' observed latency.
    pub fn census(&self) -> &crate::observe::census::Census {
        &self.census
    }

    /// The tape upstream exchanges are written to (`--record`), if any.
    pub fn recorder(&self) -> Option<&crate::observe::record::Recorder> {
        self.recorder.as_deref()
    }

    /// Fired when the shutdown grace period is over.
    pub fn grace_over(&self) -> &crate::runtime::shutdown::GraceOver {
        &self.grace_over
    }

    /// Which config this is (content hash, load time, generation number).
    pub fn generation(&self) -> &crate::runtime::generation::Generation {
        &self.generation
    }

    /// Builds the runtime from a validated config. `seed` seeds the per-request RNGs.
    pub fn new(config: Config, seed: u64) -> Result<Self, SetupError> {
        Self::with_dial(config, seed, None)
    }

    /// [`Shared::new`] whose providers are reached through `dial` (in-memory
    /// pipes to in-process providers) instead of the network, when given.
    pub fn with_dial(
        config: Config,
        seed: u64,
        dial: Option<crate::upstream::transport::Dial>,
    ) -> Result<Self, SetupError> {
        let clock = Clock::new();
        let mut metrics = Metrics::new();
        let census = crate::observe::census::Census::new(&config, &mut metrics.registry);
        let generation =
            crate::runtime::generation::Generation::first(&config, &mut metrics.registry, &clock);
        let telemetry = match &config.telemetry.otlp_endpoint {
            Some(e) => Some(Arc::new(crate::observe::telemetry::Telemetry::start(
                e,
                &mut metrics.registry,
            )?)),
            None => None,
        };
        let redis = match &config.state {
            StateBackend::Memory => None,
            StateBackend::Redis {
                url,
                connect,
                key_prefix,
                replicas,
                timeout,
                ..
            } => Some(Arc::new(RedisState::new(
                url,
                connect,
                key_prefix,
                *replicas,
                *timeout,
                clock,
                metrics.state_fallbacks.clone(),
            )?)),
        };
        let replicas = redis.as_ref().map(|r| r.replicas);
        let providers = config
            .providers
            .iter()
            .map(|p| {
                let hists = connect_hists(&metrics);
                ProviderRuntime::with_dial(p, hists, clock, replicas, dial.as_ref()).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        // A cloud platform's credentials (keys, tokens) as loaded now, too.
        let secrets = live_secrets(&providers);
        let routes = config
            .routes
            .iter()
            .map(|r| Arc::new(RouteRuntime::new(r)))
            .collect();
        let keys = caller_keys(&config)?;
        let signing = signing_keys(&config)?;
        let idempotency = idempotency_backend(&config, redis.as_ref());
        Ok(Shared {
            config,
            clock,
            metrics: Arc::new(metrics),
            providers,
            routes,
            keys,
            signing,
            idempotency,
            redis,
            origins: Arc::default(),
            spend: Arc::default(),
            shutting_down: Arc::new(AtomicBool::new(false)),
            grace_over: Arc::default(),
            recorder: None,
            secrets,
            census,
            telemetry,
            generation,
            seed,
            counter: Arc::new(AtomicU64::new(0)),
            pid: std::process::id(),
        })
    }

    /// A fresh RNG for one request (seeded, reproducible for a given seed and order).
    pub fn rng(&self) -> SmallRng {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        SmallRng::seed_from_u64(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// A request's RNG, seeded from [`rng`](Self::rng) on its first draw:
    /// a request to a route of one target draws nothing unless it waits
    /// (backoff jitter), and seeding one cost ~360 instructions.
    pub fn lazy_rng(&self) -> LazyRng<'_> {
        LazyRng {
            shared: self,
            rng: None,
        }
    }

    /// A fresh UUID v7 (unix-ms timestamp + 80 random bits): unique per
    /// logical request without a `getrandom` syscall each time. The bits
    /// come from a SplitMix64 sequence per thread, started from the seed,
    /// this process's id and the request counter: seeding a `SmallRng` per
    /// id cost ~180 instructions, and a request makes two ids (its own and
    /// its idempotency key).
    /// Stamped with the calendar time of `at`, a clock read the request has
    /// made already (one per id fewer).
    pub fn uuid_v7(&self, at: levee_policy::Instant) -> uuid::Uuid {
        const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
        fn mix(mut z: u64) -> u64 {
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        thread_local! {
            static IDS: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
        }
        let (a, b) = IDS.with(|ids| {
            // Replicas started with the same --seed still make different
            // ids (the process id), and so do two threads (the counter).
            let mut x = ids.get().unwrap_or_else(|| {
                let n = self.counter.fetch_add(1, Ordering::Relaxed);
                mix(self.seed ^ (u64::from(self.pid) << 32) ^ n.wrapping_mul(GOLDEN))
            });
            x = x.wrapping_add(GOLDEN);
            let a = mix(x);
            x = x.wrapping_add(GOLDEN);
            ids.set(Some(x));
            (a, mix(x))
        });
        let mut bytes = [0u8; 10];
        bytes[..8].copy_from_slice(&a.to_le_bytes());
        bytes[8..].copy_from_slice(&b.to_le_bytes()[..2]);
        uuid::Builder::from_unix_timestamp_millis(self.clock.calendar_at(at), &bytes).into_uuid()
    }

    /// The breaker, admitted-fraction and belief gauges of provider `p`:
    /// the provider as a whole (`model=""`) and each model's domain.
    fn refresh_admission(&self, p: &ProviderRuntime, now: levee_policy::Instant, state: i64) {
        use crate::observe::metrics::{ProviderModel, ProviderModelBelief};
        let m = &self.metrics;
        let whole = ProviderModel {
            provider: p.name.clone(),
            model: String::new(),
        };
        m.circuit_state.get_or_create(&whole).set(state);
        let s = p.lock();
        for a in s.model_admission(now) {
            let label = ProviderModel {
                provider: p.name.clone(),
                model: if a.model.is_empty() { "other" } else { a.model }.to_owned(),
            };
            m.circuit_state.get_or_create(&label).set(a.state as i64);
            m.admitted_fraction.get_or_create(&label).set(a.fraction);
            for b in levee_policy::graded::Belief::ALL {
                let label = ProviderModelBelief {
                    provider: label.provider.clone(),
                    model: label.model.clone(),
                    belief: b.as_str(),
                };
                m.circuit_belief
                    .get_or_create(&label)
                    .set(i64::from(b == a.belief));
            }
        }
    }

    /// Refreshes the gauges that are read at scrape time.
    pub fn refresh_gauges(&self) {
        for (slot, old) in self.census.take_retired() {
            self.metrics.forget_caller(slot, &old);
        }
        let now = self.clock.now();
        for p in &self.providers {
            let (state, in_flight) = {
                let s = p.lock();
                (s.breaker_state(now) as i64, i64::from(s.in_flight()))
            };
            let label = crate::observe::metrics::ProviderLabel {
                provider: p.name.clone(),
            };
            self.metrics.in_flight.get_or_create(&label).set(in_flight);
            self.refresh_admission(p, now, state);
            let s = p.lock();
            let a = s.allowance();
            for meter in levee_policy::allowance::Meter::ALL {
                let Some((level, capacity)) = a.per_minute(now, meter) else {
                    continue;
                };
                let label = crate::observe::metrics::ProviderMeter {
                    provider: p.name.clone(),
                    meter: meter.label(),
                };
                self.metrics
                    .allowance_remaining
                    .get_or_create(&label)
                    .set(level);
                self.metrics
                    .allowance_limit
                    .get_or_create(&label)
                    .set(capacity);
                if !a.has_shares() {
                    continue;
                }
                for (i, caller) in self.config.callers.iter().enumerate() {
                    let Some((used, share)) = u16::try_from(i)
                        .ok()
                        .and_then(|c| a.share_use(now, c, meter))
                    else {
                        continue;
                    };
                    let label = crate::observe::metrics::ProviderCallerMeter {
                        provider: p.name.clone(),
                        caller: caller.name.clone(),
                        meter: meter.label(),
                    };
                    self.metrics
                        .allowance_share_used
                        .get_or_create(&label)
                        .set(used);
                    self.metrics
                        .allowance_share
                        .get_or_create(&label)
                        .set(share);
                }
            }
        }
    }
}

/// The sha256 of every accepted caller key: as configured, or of the key
/// read from its environment variable now.
pub fn caller_keys(config: &Config) -> Result<Vec<[u8; 32]>, SetupError> {
    config.keys.iter().map(caller_key).collect()
}

/// The sha256 of one accepted caller key (`levee check` reads keys through
/// this too); a key pair's identity, made from its secret.
pub fn caller_key(key: &CallerKey) -> Result<[u8; 32], SetupError> {
    let read = |name: &String, var: &String| {
        std::env::var(var).map_err(|_| SetupError::MissingCallerKey {
            name: name.clone(),
            var: var.clone(),
        })
    };
    match key {
        CallerKey::Sha256 { digest, .. } => Ok(*digest),
        CallerKey::Env { name, var } => {
            read(name, var).map(|v| Sha256::digest(v.as_bytes()).into())
        }
        CallerKey::Signing { name, var, .. } => read(name, var).map(|s| pair_digest(&s)),
    }
}

/// The SigV4 key pairs among the caller keys, their secrets read now.
pub(crate) fn signing_keys(config: &Config) -> Result<Vec<SigningKey>, SetupError> {
    let mut pairs = Vec::new();
    for key in &config.keys {
        if let CallerKey::Signing {
            name,
            access_key_id,
            var,
        } = key
        {
            let secret = std::env::var(var).map_err(|_| SetupError::MissingCallerKey {
                name: name.clone(),
                var: var.clone(),
            })?;
            pairs.push(SigningKey {
                digest: pair_digest(&secret),
                access_key_id: access_key_id.clone(),
                secret,
            });
        }
    }
    Ok(pairs)
}

/// The idempotency store: in memory, or Redis with the local store beside it.
fn idempotency_backend(
    config: &Config,
    redis: Option<&Arc<RedisState>>,
) -> Arc<dyn IdempotencyBackend> {
    let local = Arc::new(IdempotencyStore::new(
        config.idempotency.ttl,
        config.idempotency.max_entries,
        config.idempotency.max_bytes,
    ));
    let idempotency: Arc<dyn IdempotencyBackend> = match redis {
        None => Arc::new(MemoryBackend(local)),
        Some(r) => Arc::new(RedisBackend {
            redis: Arc::clone(r),
            local,
            ttl: config.idempotency.ttl,
            refuse_unshared: matches!(
                config.state,
                StateBackend::Redis {
                    on_unavailable: levee_config::OnUnavailable::Refuse,
                    ..
                }
            ),
            max_bytes: match config.state {
                StateBackend::Redis { max_bytes, .. } => max_bytes,
                StateBackend::Memory => u64::MAX,
            },
        }),
    };
    idempotency
}

/// The secrets of `providers`: their keys as loaded, and what their
/// platforms learn while they run.
pub(crate) fn live_secrets(
    providers: &[Arc<ProviderRuntime>],
) -> crate::observe::live_secrets::LiveSecrets {
    let base = providers
        .iter()
        .flat_map(|p| p.secrets().map(str::to_owned).chain(p.platform.secrets()))
        .collect();
    let sources = providers
        .iter()
        .filter_map(|p| p.platform.learned())
        .collect();
    crate::observe::live_secrets::LiveSecrets::new(base, sources)
}

/// One key pair the gateway issued.
pub(crate) struct SigningKey {
    pub(crate) access_key_id: String,
    pub(crate) secret: String,
    /// The caller's identity (the pair's entry in `Shared::keys`).
    pub(crate) digest: [u8; 32],
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// A request's RNG, seeded on its first draw ([`Shared::lazy_rng`]).
pub struct LazyRng<'a> {
    shared: &'a Shared,
    rng: Option<SmallRng>,
}

impl LazyRng<'_> {
    fn get(&mut self) -> &mut SmallRng {
        self.rng.get_or_insert_with(|| self.shared.rng())
    }
}

impl rand::RngCore for LazyRng<'_> {
    fn next_u32(&mut self) -> u32 {
        self.get().next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.get().next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.get().fill_bytes(dest);
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.get().try_fill_bytes(dest)
    }
}

/// The identity of a pair whose secret is `secret`: a digest no bearer key
/// can match without knowing the secret.
pub(crate) fn pair_digest(secret: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"levee sigv4 key pair\0");
    h.update(secret.as_bytes());
    h.finalize().into()
}

/// Where a provider's attempts time their wait for a connection.
pub(crate) fn connect_hists(m: &Metrics) -> crate::upstream::ConnectHists {
    crate::upstream::ConnectHists {
        connect: m.upstream_connect.clone(),
        pool_wait: m.upstream_pool_wait.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn generated_idempotency_keys_are_distinct_uuid_v7s() {
        let shared = Shared::new(levee_config::Config::parse("").unwrap(), 1).unwrap();
        let a = shared.uuid_v7(shared.clock.now());
        let b = shared.uuid_v7(shared.clock.now());
        assert_ne!(a, b);
        assert_eq!(a.get_version_num(), 7);
    }
}
