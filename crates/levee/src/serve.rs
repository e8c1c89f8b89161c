//! `levee serve`: load the config (or use the built-in mock provider), start
//! the gateway, re-read the config on SIGHUP, stop cleanly on SIGTERM/SIGINT.

use levee_config::Config;
use std::path::PathBuf;

/// Flags of `levee serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// Config file (YAML). Without one, every model is routed to a built-in mock provider.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Override the config's `listen` address.
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
    /// Override the config's `admin.listen` address.
    #[arg(long)]
    pub admin: Option<std::net::SocketAddr>,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
    /// Seed for the per-request jitter RNGs (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write every upstream exchange to this JSONL tape (replay it with `levee mock --replay`).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Most bytes the --record tape may hold; recording stops (with a warning) at the limit.
    #[arg(long, default_value_t = levee_gateway::record::DEFAULT_MAX_BYTES)]
    pub record_max_bytes: u64,
    /// Worker threads, each with its own single-threaded runtime and its own
    /// listener on the port (SO_REUSEPORT), like nginx's worker processes.
    /// Default: one per CPU this process may run on. 0: one work-stealing
    /// multi-threaded runtime instead.
    #[arg(long)]
    pub workers: Option<usize>,
    /// `auto`: with as many workers as CPUs this process may run on (the
    /// default count), each worker thread is bound to a CPU of its own, so
    /// that two never take turns on one; `off`: the scheduler places them.
    #[arg(long, value_enum, default_value_t = CpuAffinity::Auto)]
    pub cpu_affinity: CpuAffinity,
    /// Listen beside the levee already serving the listen (and admin)
    /// address, to hand over to this one: both accept until the old one is
    /// sent SIGTERM and drains. Without it, an address that another process
    /// listens on is refused.
    #[arg(long)]
    pub take_over: bool,
}

/// Whether worker threads are bound to CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CpuAffinity {
    Auto,
    Off,
}

/// How log lines look.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEVEE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => b.init(),
        LogFormat::Json => b.json().flatten_event(true).init(),
    }
}

async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Re-reads `--config` on each SIGHUP; the command line's overrides apply
/// to the new file as they did to the first.
async fn reload_on_sighup(
    hup: Hangups,
    reloader: std::sync::Arc<levee_gateway::reload::Reloader>,
    args: ServeArgs,
    mock: Option<std::net::SocketAddr>,
) {
    #[cfg(unix)]
    {
        let Some(mut hup) = hup else {
            tracing::warn!(target: "levee", "cannot listen for SIGHUP: config reload is off");
            return;
        };
        while hup.recv().await.is_some() {
            let Some(path) = &args.config else {
                tracing::error!(target: "levee", "SIGHUP: no --config file to re-read; the running config is kept");
                continue;
            };
            let adjust = |c: &mut Config| {
                if let Some(l) = args.listen {
                    c.listen = l;
                }
                if let Some(a) = args.admin {
                    c.admin_listen = a;
                }
                if c.builtin_mock {
                    let addr = mock.ok_or("the new config has no providers, and the built-in mock provider runs only when the process starts without any")?;
                    c.set_builtin_mock_addr(addr);
                }
                Ok(())
            };
            // Logged and counted inside, either way.
            let _ = reloader.reload_file(path, adjust);
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (hup, reloader, args, mock);
    }
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = ();

/// The SIGHUP stream (installing it replaces the default action).
fn hangups() -> Hangups {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::hangup()).ok()
    }
}

#[allow(clippy::disallowed_methods)] // the default seed is the only clock read here
fn default_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x5eed)
}

/// The main thread's runtime: single-threaded when it is one of `workers`
/// per-CPU runtimes, multi-threaded when `workers` is 0.
fn runtime(workers: usize, bound: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = if workers == 0 {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    if bound {
        levee_gateway::affinity::unbind_started_threads(&mut b);
    }
    b.enable_all().build()
}

/// The config file (none: the built-in mock's), with `--listen` and
/// `--admin` over its addresses.
fn config_of(args: &ServeArgs) -> Result<Config, levee_config::ConfigError> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::parse("")?,
    };
    if let Some(l) = args.listen {
        config.listen = l;
    }
    if let Some(a) = args.admin {
        config.admin_listen = a;
    }
    Ok(config)
}

/// Why serving would share an address a running process listens on
/// (`--take-over` allows it), if it would.
fn held_address(config: &Config) -> Option<String> {
    [
        (config.listen, "", "--listen or `listen:`"),
        (
            config.admin_listen,
            "admin address ",
            "--admin or `admin.listen:`",
        ),
    ]
    .into_iter()
    .find(|(addr, _, _)| crate::takeover::held(*addr))
    .map(|(addr, what, flag)| crate::takeover::refusal(addr, what, flag))
}

/// Says why the gateway cannot start: a `levee: …` line, or under
/// `--log-format json` an error record like every other line, so that a
/// log pipeline keeps the one line that explains a crash loop.
fn fatal(format: LogFormat, why: &dyn std::fmt::Display) {
    match format {
        LogFormat::Human => eprintln!("levee: {why}"),
        LogFormat::Json => {
            tracing::error!(target: "levee", error = %why, "levee cannot start");
        }
    }
}

/// Runs the gateway until a signal; returns the exit code.
pub fn run(args: ServeArgs) -> i32 {
    init_logging(args.log_format);
    let format = args.log_format;
    let mut config = match config_of(&args) {
        Ok(c) => c,
        Err(e) => {
            fatal(format, &e);
            return 1;
        }
    };
    let workers = worker_count(&args);
    let cpus = worker_cpus(args.cpu_affinity, workers);
    let rt = match runtime(workers, !cpus.is_empty()) {
        Ok(rt) => rt,
        Err(e) => {
            fatal(format, &format_args!("cannot start the async runtime: {e}"));
            return 1;
        }
    };
    if !args.take_over {
        if let Some(refusal) = held_address(&config) {
            fatal(format, &refusal);
            return 1;
        }
    }
    let seed = args.seed.unwrap_or_else(default_seed);
    rt.block_on(async move {
        let mock = match builtin_mock(&mut config).await {
            Ok(mock) => mock,
            Err(e) => {
                fatal(format, &e);
                return 1;
            }
        };
        let opts = gateway_options(&args, seed, workers, cpus);
        let first_cpu = opts.worker_cpus.first().copied();
        let running = match levee_gateway::spawn_with(config, opts, signal()).await {
            Ok(r) => r,
            Err(e) => {
                fatal(format, &e);
                return 1;
            }
        };
        // This thread is the first worker: bound last, once every thread
        // it starts has started (a thread inherits its starter's mask).
        if let Some(cpu) = first_cpu {
            levee_gateway::affinity::bind_worker(0, cpu);
        }
        // Installed before the "listening" line, so a SIGHUP sent after it
        // is never the default action (which ends the process).
        let reloads = tokio::spawn(reload_on_sighup(
            hangups(),
            std::sync::Arc::clone(&running.reloader),
            args.clone(),
            mock.as_ref().map(|m| m.local_addr()),
        ));
        tracing::info!(target: "levee", listen = %running.addr, admin = %running.admin_addr, config = %running.shared.generation().hash, "levee gateway listening");
        running.wait().await;
        reloads.abort();
        if let Some(m) = mock {
            m.shutdown().await;
        }
        tracing::info!(target: "levee", "stopped");
        0
    })
}

/// The worker threads: `--workers`, or one per CPU this process may use
/// (its affinity mask, as nginx's `worker_processes auto`).
fn worker_count(args: &ServeArgs) -> usize {
    args.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// When the config names no provider, the built-in mock provider, started
/// on a loopback port with every model routed to it; `None` otherwise.
async fn builtin_mock(config: &mut Config) -> Result<Option<levee_mock::MockHandle>, String> {
    if !config.builtin_mock {
        return Ok(None);
    }
    match levee_mock::spawn(
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        levee_mock::MockOptions::default(),
    )
    .await
    {
        Ok(m) => {
            tracing::warn!(
                target: "levee",
                mock = %m.local_addr(),
                "no providers configured: routing every model to the built-in mock provider (try `curl -s {}/v1/chat/completions -d '{{\"model\":\"demo\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'`)",
                config.listen
            );
            config.set_builtin_mock_addr(m.local_addr());
            Ok(Some(m))
        }
        Err(e) => Err(format!("cannot start the built-in mock provider: {e}")),
    }
}

/// The gateway's options from the flags: the jitter seed, the tape, the
/// config file's hash, the worker threads besides the first and their CPUs.
fn gateway_options(
    args: &ServeArgs,
    seed: u64,
    workers: usize,
    worker_cpus: Vec<usize>,
) -> levee_gateway::Options {
    levee_gateway::Options {
        seed,
        record: args.record.clone(),
        record_max_bytes: Some(args.record_max_bytes),
        config_hash: args
            .config
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .map(|b| levee_gateway::reload::hash_of(&b)),
        extra_workers: workers.saturating_sub(1),
        worker_cpus,
    }
}

/// The CPU each worker is bound to (`--cpu-affinity`): none when off.
fn worker_cpus(affinity: CpuAffinity, workers: usize) -> Vec<usize> {
    match affinity {
        CpuAffinity::Auto => {
            levee_gateway::affinity::plan(&levee_gateway::affinity::allowed_cpus(), workers)
        }
        CpuAffinity::Off => Vec::new(),
    }
}
