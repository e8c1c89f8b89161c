//! `levee mock`: flags, loading files, running until SIGINT/SIGTERM.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use crate::{load_faults, load_tape, spawn, FaultSet, MockApi, MockError, MockOptions};

/// Flags of `levee mock`.
#[derive(Debug, Clone, clap::Args)]
pub struct MockArgs {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:9100", value_name = "ADDR")]
    pub listen: String,
    /// Fault document (YAML or JSON); replace it live with `POST /_mock/faults`.
    #[arg(long, value_name = "FILE")]
    pub faults: Option<PathBuf>,
    /// Seed for probabilistic faults and latency draws (same seed, same run).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,
    /// Replay answers from a tape (JSON Lines, see TAPE.md), then answer normally.
    #[arg(long, value_name = "TAPE")]
    pub replay: Option<PathBuf>,
    /// Which provider's API to serve: one strictly (the other's paths are
    /// 404, unknown request fields 400), or both leniently.
    #[arg(long, value_enum, default_value_t = MockApi::Both)]
    pub api: MockApi,
    /// Serve only these models (comma-separated), as a real provider
    /// serves its own: a request for another is 404 `model_not_found`, and
    /// `/v1/models` lists these. A fault document's `models:` wins.
    #[arg(long, value_delimiter = ',', value_name = "MODEL,...")]
    pub models: Vec<String>,
}

/// Runs `levee mock` until interrupted; returns the process exit code:
/// 0 after a clean stop, 2 for bad flags or files, 1 if the server cannot run.
pub fn run_cli(args: MockArgs) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("levee mock: {e}");
            match e {
                MockError::Bind { .. } | MockError::Runtime(_) => 1,
                _ => 2,
            }
        }
    }
}

fn resolve(listen: &str) -> Result<SocketAddr, MockError> {
    let err = |reason: String| MockError::Listen {
        addr: listen.to_owned(),
        reason,
    };
    listen
        .to_socket_addrs()
        .map_err(|e| err(e.to_string()))?
        .next()
        .ok_or_else(|| err("it resolves to no address".to_owned()))
}

fn run(args: MockArgs) -> Result<(), MockError> {
    let addr = resolve(&args.listen)?;
    let faults = match &args.faults {
        Some(path) => load_faults(path)?,
        None => FaultSet::default(),
    };
    let faults = faults.serving((!args.models.is_empty()).then_some(args.models));
    let replay = args.replay.as_deref().map(load_tape).transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(MockError::Runtime)?;
    runtime.block_on(async {
        let opts = MockOptions {
            faults,
            seed: args.seed,
            replay,
            api: args.api,
        };
        let handle = spawn(addr, opts).await?;
        eprintln!("levee mock listening on {}", handle.local_addr());
        wait_for_signal().await;
        handle.shutdown().await;
        Ok(())
    })
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
