//! Levee's gateway: the thin driver that puts the policy core on the network.
//!
//! It accepts OpenAI- and Anthropic-dialect requests over HTTP/1.1 (its own
//! server, each connection served in its task), routes them by model and
//! path, resolves each request's deadline, and then loops on the core's
//! planner — dispatching attempts through its own connection pools (HTTP/1.1
//! in the attempt's task, hyper's HTTP/2, rustls for https), sleeping
//! through backoff waits, relaying
//! streams — until it can answer. It re-implements no retry rule: whether,
//! when and where to send is always the planner's decision. Where a
//! fallback target speaks the other dialect, the exchange is translated
//! (`crossing`), or the target skipped when it cannot carry the request. It
//! is not a cache or a load balancer across replicas.
#![forbid(unsafe_code)]

mod clock;
mod error;
#[doc(hidden)]
pub mod framing_view;
mod hex;

/// The live caller census as `levee check --census-from` reads it from a
/// running gateway.
pub mod census {
    pub use crate::observe::census::{fetch, CensusReport};
}

/// What `levee check` verifies of a config before a gateway runs it: each
/// provider's credentials, platform and extra request fields, each caller
/// key.
pub mod preflight {
    pub use crate::runtime::shared::caller_key;
    pub use crate::state::{check_backend, RedisSetupError};
    pub use crate::upstream::platform::{PlatformError, PlatformRuntime};
    pub use crate::upstream::{provider_auth, provider_extras, UpstreamError};
}

/// Swapping in a new config while serving, and the config's version.
pub mod reload {
    pub use crate::runtime::reload::{hash_of, Reloader};
}

/// Worker threads bound to CPUs of their own.
pub use runtime::affinity;

/// The `--record` tape.
pub mod record {
    pub use crate::observe::record::{tape_path, DEFAULT_MAX_BYTES};
}

/// How the gateway reaches providers: over the network, or through an
/// in-memory pipe (`Connector::Memory`, for tests and benchmarks).
pub mod transport {
    pub use crate::upstream::transport::{Connector, Dial};
}

/// The in-process idempotency store, bounded by the bytes it holds.
pub mod idempotency {
    pub use crate::state::idempotency::{Claimed, IdempotencyStore, Lease, Stored};
}

/// The parsers the fuzz targets drive with arbitrary bytes.
#[doc(hidden)]
pub mod fuzz {
    pub use crate::http::inspect::{inspect, rewrite_model, Inspected};
    pub use crate::http::sse::EventFramer;
    pub use crate::observe::redact::Secrets;
}
mod http;
mod observe;
mod request;
mod runtime;
mod server;
mod spend;
mod state;
mod timer;
mod upstream;
mod wake;

use levee_config::Config;
use runtime::shared::{SetupError, Shared};
pub use server::app::App;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("cannot write the tape {path}: {source}")]
    Record {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}; is another process using it? (`listen:` / `admin.listen:` in the config)")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start worker thread {worker}: {source}; lower --workers or raise the process/thread limit")]
    Worker {
        worker: usize,
        source: std::io::Error,
    },
}

/// A gateway whose listeners are bound; [`Running::shutdown`] stops it.
pub struct Running {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// The first config generation (metrics, stores and signals are shared
    /// by all generations; [`Running::current`] is the one serving now).
    pub shared: Arc<Shared>,
    /// Swaps in a new config ([`runtime::reload::Reloader::reload`]).
    pub reloader: Arc<runtime::reload::Reloader>,
    stop: watch::Sender<bool>,
    public: tokio::task::JoinHandle<()>,
    admin: tokio::task::JoinHandle<()>,
}

impl Running {
    /// The config generation new requests run under.
    pub fn current(&self) -> Arc<Shared> {
        self.reloader.current()
    }

    /// Stops accepting, waits for in-flight requests (up to the grace period).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.public.await;
        let _ = self.admin.await;
    }

    /// Waits until the gateway stops on its own (after `stop_on` fired).
    pub async fn wait(self) {
        let _ = self.public.await;
        let _ = self.stop.send(true);
        let _ = self.admin.await;
    }
}

/// Binds with `SO_REUSEPORT` (on Unix), so that a new `levee serve` can
/// listen on the same address while the old one still runs and drains: a
/// restart without a moment in which the port refuses connections. The kernel
/// lets only processes of the same user share the port. The binary asks for
/// that with `--take-over`; without it, it refuses an address that a process
/// already listens on before calling this (`crates/levee/src/takeover.rs`).
async fn bind(addr: SocketAddr) -> Result<TcpListener, GatewayError> {
    let err = |source| GatewayError::Bind { addr, source };
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    #[cfg(unix)]
    socket.set_reuseport(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(1024).map_err(err)
}

/// How to run beyond the config.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// Seed for the per-request jitter RNGs.
    pub seed: u64,
    /// Write every upstream exchange to this tape (`levee mock --replay` format).
    pub record: Option<std::path::PathBuf>,
    /// The tape's bound in bytes (default [`observe::record::DEFAULT_MAX_BYTES`]).
    pub record_max_bytes: Option<u64>,
    /// The config's version as shown on `/readyz` and the status page
    /// ([`runtime::reload::hash_of`] the file); default: a hash of the validated config.
    pub config_hash: Option<String>,
    /// Extra public listeners, each on its own thread with a single-threaded
    /// runtime, all on the listen port with `SO_REUSEPORT` (the kernel
    /// spreads connections over them), like nginx's worker processes. A
    /// connection then lives on one thread with its upstream connections:
    /// no task moves between cores, no wake crosses one. 0: everything on
    /// the caller's runtime. The `levee` binary runs one per core beyond
    /// its own thread.
    pub extra_workers: usize,
    /// The CPU each worker thread is bound to, by worker index (index 0,
    /// the caller's own thread, is the caller's to bind, once it has
    /// started what it starts: threads inherit the mask of the thread that
    /// starts them); empty: none bound ([`affinity::plan`]).
    pub worker_cpus: Vec<usize>,
}

/// Starts one extra public listener on its own thread and single-threaded
/// runtime; the receiver resolves when it has drained.
fn spawn_worker(
    worker: usize,
    cpu: Option<usize>,
    listener: std::net::TcpListener,
    generations: Arc<runtime::reload::Reloader>,
    mut stop: watch::Receiver<bool>,
) -> Result<tokio::sync::oneshot::Receiver<()>, GatewayError> {
    let (done, rx) = tokio::sync::oneshot::channel();
    let err = |source| GatewayError::Worker { worker, source };
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if cpu.is_some() {
        affinity::unbind_started_threads(&mut builder);
    }
    let rt = builder.build().map_err(err)?;
    std::thread::Builder::new()
        .name(format!("levee-worker-{worker}"))
        .spawn(move || {
            if let Some(cpu) = cpu {
                affinity::bind_worker(worker, cpu);
            }
            upstream::set_worker(worker);
            rt.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => {
                        let stop = async move {
                            let _ = stop.wait_for(|s| *s).await;
                        };
                        server::serve_connections(listener, generations, Box::pin(stop)).await;
                    }
                    Err(e) => {
                        tracing::error!(target: "levee", worker, error = %e, "worker listener failed; its share of connections goes to the others");
                    }
                }
            });
            let _ = done.send(());
        })
        .map_err(err)?;
    Ok(rx)
}

/// Binds the config's listeners and serves in background tasks. The gateway
/// also stops when `stop_on` resolves (a signal, in the binary).
pub async fn spawn(
    config: Config,
    seed: u64,
    stop_on: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, GatewayError> {
    spawn_with(
        config,
        Options {
            seed,
            ..Options::default()
        },
        stop_on,
    )
    .await
}

/// The `--record` tape `opts` asks for, opened.
fn open_recorder(opts: &Options) -> Result<Option<observe::record::Recorder>, GatewayError> {
    let Some(path) = &opts.record else {
        return Ok(None);
    };
    let max = opts
        .record_max_bytes
        .unwrap_or(observe::record::DEFAULT_MAX_BYTES);
    observe::record::Recorder::open(path, max)
        .map(Some)
        .map_err(|source| GatewayError::Record {
            path: path.display().to_string(),
            source,
        })
}

/// The first config generation: its state built, its version, its tape
/// (which redacts the providers' keys) and, with a shared state store, a
/// first connection to it (waited on for at most 500 ms).
async fn first_generation(
    config: Config,
    opts: &Options,
    recorder: Option<observe::record::Recorder>,
) -> Result<Arc<Shared>, GatewayError> {
    let mut shared = Shared::new(config, opts.seed)?;
    if let Some(hash) = &opts.config_hash {
        shared.generation.hash = hash.clone();
    }
    shared.recorder = recorder.map(|mut r| {
        r.set_secrets(shared.secrets.snapshot());
        Arc::new(r)
    });
    if let Some(redis) = &shared.redis {
        redis
            .connect_here(std::time::Duration::from_millis(500))
            .await;
    }
    Ok(Arc::new(shared))
}

/// [`spawn`] with all options.
pub async fn spawn_with(
    config: Config,
    opts: Options,
    stop_on: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, GatewayError> {
    start(config, opts, Box::pin(stop_on)).await
}

/// A started gateway, once its listeners are bound.
type Starting = std::pin::Pin<Box<dyn Future<Output = Result<Running, GatewayError>> + Send>>;

/// [`starting`]'s future, made in this crate and handed out behind a
/// pointer. The compiler treats an `async fn`'s future like a generic: a
/// crate that polls it compiles a copy of its own, with every future it
/// spawns or awaits. When the binary awaited the gateway's start directly,
/// the release binary held two copies of the whole request path (front,
/// handler, driver: 0.8 MB of machine code, compiled twice in the
/// whole-program optimisation), the main thread's listener running the
/// binary's copy and the other workers the gateway's.
#[inline(never)]
fn start(
    config: Config,
    opts: Options,
    stop_on: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Starting {
    Box::pin(starting(config, opts, stop_on))
}

/// Binds the listeners, builds the first generation and spawns the
/// workers, the public listener and the admin listener.
async fn starting(
    config: Config,
    opts: Options,
    stop_on: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Result<Running, GatewayError> {
    let recorder = open_recorder(&opts)?;
    let public = bind(config.listen).await?;
    let admin = bind(config.admin_listen).await?;
    let addr = public.local_addr().map_err(|source| GatewayError::Bind {
        addr: config.listen,
        source,
    })?;
    let admin_addr = admin.local_addr().map_err(|source| GatewayError::Bind {
        addr: config.admin_listen,
        source,
    })?;
    // A pool shard per worker, the primary runtime's included.
    upstream::set_workers(opts.extra_workers + 1);
    let shared = first_generation(config, &opts, recorder).await?;
    let reloader = Arc::new(runtime::reload::Reloader::new(Arc::clone(&shared)));
    let (stop, rx) = watch::channel(false);
    if let Some(redis) = &shared.redis {
        let gauge = shared.metrics.state_replicas.clone();
        tokio::spawn(state::replicas::announce_until(
            Arc::clone(redis),
            gauge,
            rx.clone(),
        ));
    }
    let mut rx_public = rx.clone();
    let mut rx_admin = rx.clone();
    let mut workers = Vec::with_capacity(opts.extra_workers);
    for worker in 1..=opts.extra_workers {
        let listener = bind(addr)
            .await?
            .into_std()
            .map_err(|source| GatewayError::Bind { addr, source })?;
        workers.push(spawn_worker(
            worker,
            opts.worker_cpus.get(worker).copied(),
            listener,
            Arc::clone(&reloader),
            rx.clone(),
        )?);
    }
    let stop_all = stop.clone();
    let primary = Arc::clone(&reloader);
    let public_task = tokio::spawn(async move {
        let stop = async move {
            tokio::select! {
                _ = stop_on => {}
                _ = rx_public.wait_for(|s| *s) => {}
            }
            let _ = stop_all.send(true);
        };
        server::serve_connections(public, Arc::clone(&primary), Box::pin(stop)).await;
        for w in workers {
            let _ = w.await;
        }
        server::release_leases(&primary.current()).await;
    });
    let admin_task = tokio::spawn(server::serve_admin(
        admin,
        Arc::clone(&reloader),
        async move {
            let _ = rx_admin.wait_for(|s| *s).await;
        },
    ));
    Ok(Running {
        addr,
        admin_addr,
        shared,
        reloader,
        stop,
        public: public_task,
        admin: admin_task,
    })
}
