//! Config reload without a restart: the running config is a generation, one
//! [`Shared`], and [`Reloader`] swaps in the next one atomically (`SIGHUP` in
//! the binary).
//!
//! Each request takes the generation current when it arrives and holds that
//! `Arc` until its answer or stream ends, so a request in flight finishes
//! under the config it started with while new requests see the new one, and
//! no connection is dropped. What outlives a config is carried over by `Arc`:
//! metrics, the idempotency and Redis stores, the shutdown signals, the tape.
//! A provider whose definition did not change (every key of its block, its
//! derived caps and breaker settings, and the key its `api_key_env` names)
//! keeps its runtime — breakers, throttles, in-flight count, allowance and
//! pooled connections — and a route whose definition did not change keeps its
//! retry budgets and bulkhead; a changed or new one starts fresh. The census,
//! indexed by route and target position, is re-keyed by name.
//!
//! An invalid file (bad YAML, a route naming an unknown provider, a missing
//! key variable) is refused before anything is swapped: the error is logged
//! and the running generation keeps serving.
//! `levee_config_reloads_total{result="ok"|"error"}` counts both.
//!
//! The swap is an [`arc_swap::ArcSwap`]: every request reads the current
//! generation, so the read must not take a lock that a reload (or another
//! request) holds; `ArcSwap::load_full` is a lock-free pointer read plus a
//! reference count, where an `RwLock<Arc<_>>` would put every request behind
//! the writer. The crate is already in the build (the Redis client uses it).
//! A connection keeps a weak hold on the generation of its last request and
//! the count of swaps then ([`Held`]): while the count is unchanged its next
//! request upgrades that hold instead (one atomic read-modify-write, not
//! four).

pub use crate::runtime::generation::hash_of;
use crate::runtime::shared::{caller_keys, signing_keys, RouteRuntime, SetupError, Shared};
use crate::upstream::ProviderRuntime;
use arc_swap::ArcSwap;
use levee_config::Config;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Why a reload was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}; fix the file and send SIGHUP again (the running config is kept)")]
    Config(#[from] levee_config::ConfigError),
    #[error("{0}; fix it and send SIGHUP again (the running config is kept)")]
    Setup(#[from] SetupError),
    #[error("{0} (the running config is kept)")]
    Other(String),
}

/// Owns the current generation and swaps in the next.
pub struct Reloader {
    current: ArcSwap<Shared>,
    /// Generations swapped in so far, counted after each swap: a
    /// connection that last saw this count holds the current generation
    /// ([`Reloader::current_for`]).
    swaps: AtomicU64,
    /// One reload at a time (two SIGHUPs in a row build in order).
    reloading: Mutex<()>,
}

/// A connection's hold on the generation its last request ran under, and
/// the reloader's swap count then. Weak: an idle connection keeps no
/// generation alive past its requests.
pub struct Held {
    swaps: u64,
    shared: Weak<Shared>,
}

impl Reloader {
    pub fn new(first: Arc<Shared>) -> Self {
        Reloader {
            current: ArcSwap::new(first),
            swaps: AtomicU64::new(0),
            reloading: Mutex::new(()),
        }
    }

    /// The generation a request arriving now runs under.
    pub fn current(&self) -> Arc<Shared> {
        self.current.load_full()
    }

    /// A connection's hold on no generation yet.
    pub fn held(&self) -> Held {
        Held {
            swaps: u64::MAX,
            shared: Weak::new(),
        }
    }

    /// [`Reloader::current`] for a request on the connection that `held`
    /// what its last request ran under: while no reload swapped since, that
    /// generation, for a load of the swap count and an upgrade (one atomic
    /// read-modify-write, and one when the request drops it). `load_full`
    /// takes arc-swap's slot for the thread and pays it back (three more).
    /// A request arriving while a reload swaps may run under either.
    pub fn current_for(&self, held: &mut Held) -> Arc<Shared> {
        let swaps = self.swaps.load(Ordering::Acquire);
        if swaps == held.swaps {
            if let Some(shared) = held.shared.upgrade() {
                return shared;
            }
        }
        let shared = self.current.load_full();
        *held = Held {
            swaps,
            shared: Arc::downgrade(&shared),
        };
        shared
    }

    /// Re-reads `path`; `adjust` applies what the command line overrides
    /// (listen addresses, the built-in mock's address). Logs and counts the
    /// result either way.
    pub fn reload_file(
        &self,
        path: &Path,
        adjust: impl FnOnce(&mut Config) -> Result<(), String>,
    ) -> Result<Arc<Shared>, ReloadError> {
        let read = std::fs::read(path).map(|b| hash_of(&b));
        let loaded = Config::load(path)
            .map_err(ReloadError::from)
            .and_then(|mut c| adjust(&mut c).map(|()| c).map_err(ReloadError::Other));
        match (loaded, read) {
            (Ok(config), Ok(hash)) => self.reload_with(config, hash),
            (Err(e), _) => Err(self.refused(e)),
            (_, Err(e)) => Err(self.refused(ReloadError::Other(format!(
                "cannot read {}: {e}",
                path.display()
            )))),
        }
    }

    /// Swaps in `config` (hashed as validated).
    pub fn reload(&self, config: Config) -> Result<Arc<Shared>, ReloadError> {
        let hash = hash_of(format!("{config:?}").as_bytes());
        self.reload_with(config, hash)
    }

    fn reload_with(&self, config: Config, hash: String) -> Result<Arc<Shared>, ReloadError> {
        let _one = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.current();
        match next(&old, config, hash) {
            Ok((next, kept)) => {
                if let Some(r) = &next.recorder {
                    r.add_secrets(&next.secrets.snapshot());
                }
                let next = Arc::new(next);
                self.current.store(Arc::clone(&next));
                // After the store: a connection that sees the new count
                // loads the new generation.
                self.swaps.fetch_add(1, Ordering::Release);
                next.generation.count("ok");
                tracing::info!(
                    target: "levee",
                    config = %next.generation.hash,
                    generation = next.generation.number,
                    providers_kept = kept,
                    providers = next.providers.len(),
                    "config reloaded: new requests use it; requests in flight finish under the previous one"
                );
                Ok(next)
            }
            Err(e) => Err(self.refused(e)),
        }
    }

    fn refused(&self, e: ReloadError) -> ReloadError {
        let current = self.current();
        current.generation.count("error");
        tracing::error!(
            target: "levee",
            error = %e,
            config = %current.generation.hash,
            generation = current.generation.number,
            "config reload refused"
        );
        e
    }
}

/// Builds the generation after `old` for `config`; also returns how many
/// providers kept their runtime.
fn next(old: &Shared, mut config: Config, hash: String) -> Result<(Shared, usize), ReloadError> {
    keep_restart_only(&old.config, &mut config);
    let replicas = old.redis.as_ref().map(|r| r.replicas);
    let mut kept = 0;
    let mut providers = Vec::with_capacity(config.providers.len());
    for p in &config.providers {
        let hists = crate::runtime::shared::connect_hists(&old.metrics);
        let fresh =
            ProviderRuntime::new(p, hists, old.clock, replicas).map_err(SetupError::from)?;
        let same = old
            .config
            .providers
            .iter()
            .position(|o| o.name == p.name)
            .filter(|&i| {
                format!("{:?}", old.config.providers[i]) == format!("{p:?}")
                    && old.providers[i].secret == fresh.secret
                    && old.providers[i].env_values == fresh.env_values
            });
        match same {
            Some(i) => {
                kept += 1;
                providers.push(Arc::clone(&old.providers[i]));
            }
            None => providers.push(Arc::new(fresh)),
        }
    }
    let carried = |name: &str| {
        old.providers
            .iter()
            .any(|o| o.name == name && providers.iter().any(|n| Arc::ptr_eq(n, o)))
    };
    let routes = config
        .routes
        .iter()
        .map(|r| {
            let same = old.config.routes.iter().position(|o| {
                o.name == r.name
                    && format!("{o:?}") == format!("{r:?}")
                    && r.targets
                        .iter()
                        .all(|t| carried(&config.providers[t.provider].name))
            });
            match same {
                Some(i) => Arc::clone(&old.routes[i]),
                None => Arc::new(RouteRuntime::new(r)),
            }
        })
        .collect();
    let keys = caller_keys(&config)?;
    let signing = signing_keys(&config)?;
    let secrets = crate::runtime::shared::live_secrets(&providers);
    let census = old.census.next(&config);
    let generation = old.generation.next(hash, old.clock.unix_ms());
    let shared = Shared {
        config,
        clock: old.clock,
        metrics: Arc::clone(&old.metrics),
        providers,
        routes,
        keys,
        signing,
        idempotency: Arc::clone(&old.idempotency),
        redis: old.redis.clone(),
        origins: Arc::clone(&old.origins),
        spend: Arc::clone(&old.spend),
        shutting_down: Arc::clone(&old.shutting_down),
        grace_over: Arc::clone(&old.grace_over),
        recorder: old.recorder.clone(),
        secrets,
        census,
        telemetry: old.telemetry.clone(),
        generation,
        seed: old.seed,
        counter: Arc::clone(&old.counter),
        pid: old.pid,
    };
    Ok((shared, kept))
}

/// Keys bound to sockets, stores and exporters made at start: a reload keeps
/// the running values (so the generation shows what is in effect) and says
/// that a changed one takes effect at the next restart.
fn keep_restart_only(old: &Config, new: &mut Config) {
    let mut changed = Vec::new();
    if new.listen != old.listen {
        changed.push("listen");
        new.listen = old.listen;
    }
    if new.admin_listen != old.admin_listen {
        changed.push("admin.listen");
        new.admin_listen = old.admin_listen;
    }
    if new.state != old.state {
        changed.push("state");
        new.state = old.state.clone();
    }
    if format!("{:?}", new.idempotency) != format!("{:?}", old.idempotency) {
        changed.push("idempotency");
        new.idempotency = old.idempotency;
    }
    if new.telemetry != old.telemetry {
        changed.push("telemetry");
        new.telemetry = old.telemetry.clone();
    }
    if !changed.is_empty() {
        tracing::warn!(
            target: "levee",
            keys = %changed.join(", "),
            "config reload: these keys take effect only at the next restart (start a new process beside this one, then SIGTERM this one); the running values are kept"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::parse("").unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn a_connection_runs_each_request_under_the_generation_current_at_its_arrival() {
        let first = Arc::new(Shared::new(config(), 1).unwrap_or_else(|e| panic!("{e}")));
        let reloader = Reloader::new(Arc::clone(&first));
        let mut held = reloader.held();
        assert!(Arc::ptr_eq(&reloader.current_for(&mut held), &first));
        assert!(Arc::ptr_eq(&reloader.current_for(&mut held), &first));
        let second = reloader.reload(config()).unwrap_or_else(|e| panic!("{e}"));
        // The next request on the same connection sees the reload.
        assert!(Arc::ptr_eq(&reloader.current_for(&mut held), &second));
        assert!(!Arc::ptr_eq(&second, &first));
        // An idle connection keeps no generation alive: once its last
        // request and the reloader let go of the first, it is gone.
        let mut idle = reloader.held();
        drop(reloader.current_for(&mut idle));
        let weak = Arc::downgrade(&second);
        let third = reloader.reload(config()).unwrap_or_else(|e| panic!("{e}"));
        drop(second);
        assert!(
            weak.upgrade().is_none(),
            "a held generation outlived its requests"
        );
        assert!(Arc::ptr_eq(&reloader.current_for(&mut idle), &third));
    }
}
