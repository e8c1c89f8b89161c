//! `levee-mock`: a fault-injecting LLM provider for tests and drills. It
//! speaks the OpenAI (`/v1/chat/completions`, `/v1/embeddings`,
//! `/v1/responses`, `/v1/models`) and Anthropic (`/v1/messages`) wire formats,
//! JSON and SSE, and misbehaves on cue: error statuses with `retry-after`,
//! connection resets, stalls, latency, streams cut mid-way, a capacity
//! limit beyond which it refuses work, and an organisation's rate limits
//! (requests and tokens per minute) metered as the providers meter them,
//! reported in their rate-limit fields on every answer. It records what it
//! saw (`GET /_mock/stats`) so tests can assert on retries, idempotency keys,
//! deadlines and abandoned requests, and it can replay a recorded tape of
//! answers.
//!
//! It serves HTTP/1.1 and HTTP/2 with prior knowledge on the same port.
//!
//! It is not a model and not a proxy: answers are canned, token counts are
//! estimates, and it never calls a real provider. It is not hardened for the
//! open internet either; bind it to loopback or a test network.
//!
//! With `--api openai` or `--api anthropic` it serves one provider's paths
//! only, as the real provider does: the other dialect's paths are 404 in the
//! served dialect's error shape, and request fields that provider does not
//! know are a 400. A request that forces a tool by name is answered with one
//! call to it.
//!
//! With `--api bedrock` it is Amazon Bedrock's face over the Anthropic API:
//! each request's SigV4 signature is verified against the test key pairs in
//! [`bedrock_keys`], and answers come in Bedrock's event-stream framing and
//! error shapes.
//!
//! Use it as `levee mock --listen ADDR [--api openai|anthropic|both] [--faults
//! FILE] [--seed N] [--replay TAPE]`, or in-process with [`spawn`]. The fault document is described on
//! [`parse_faults`] and in the README; the tape format in `TAPE.md`.
#![forbid(unsafe_code)]

mod admin;
mod answer;
mod body;
mod cli;
mod clock;
mod duration;
mod faults;
mod platform;
mod ratelimit;
mod request;
mod server;
mod shared;
mod stats;
mod stored;
mod tape;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use cli::{run_cli, MockArgs};
pub use faults::{parse_faults, FaultError, FaultSet};
pub use levee_wire::stats::{FaultCounts, Stats, TimeoutSeen};
pub use levee_wire::tape::TapeEntry;
pub use tape::{Tape, TapeError};

/// The key pairs `--api bedrock` verifies SigV4 signatures with: AWS's
/// documentation example pair (not a secret; it grants nothing), and the
/// same secret as temporary credentials that need their session token.
pub mod bedrock_keys {
    pub use crate::platform::bedrock::{
        TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, TEST_SESSION_ACCESS_KEY_ID, TEST_SESSION_TOKEN,
    };
}

/// How to run a mock server in-process.
#[derive(Debug, Clone, Default)]
pub struct MockOptions {
    /// Faults in force from the start (replace them later with
    /// [`MockHandle::set_faults`] or `POST /_mock/faults`).
    pub faults: FaultSet,
    /// Seed for probabilistic faults and latency draws.
    pub seed: u64,
    /// Answers to replay, in order, before answering normally.
    pub replay: Option<Tape>,
    /// Which provider's API to serve.
    pub api: MockApi,
}

/// Which provider's API a mock serves (`--api`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MockApi {
    /// OpenAI's paths only (`/v1/chat/completions`, `/v1/embeddings`,
    /// `/v1/responses`, `/v1/models`), strictly.
    #[value(name = "openai")]
    OpenAi,
    /// Anthropic's paths only (`/v1/messages`, `/v1/models`), strictly.
    Anthropic,
    /// Both dialects on every path, leniently (the dialect is read from the
    /// path and the `anthropic-version` header).
    #[default]
    Both,
    /// Azure OpenAI: `/openai/v1/...` and `/openai/deployments/{d}/...?api-version=`,
    /// an `api-key` or a bearer token required.
    Azure,
    /// Amazon Bedrock's `InvokeModel` for Anthropic models, SigV4 verified
    /// with the test key pair AKIAIOSFODNN7EXAMPLE /
    /// wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY (AWS's documentation
    /// example, not a secret), or ASIAIOSFODNN7EXAMPLE with the same secret
    /// and session token levee-mock-session-token.
    Bedrock,
    /// Google Vertex AI (`rawPredict`, the OpenAI-compatible endpoint),
    /// OAuth2 tokens from the mock's own `/token`.
    Vertex,
}

impl MockApi {
    /// A cloud's face over a dialect API.
    pub(crate) fn is_cloud(self) -> bool {
        matches!(self, MockApi::Azure | MockApi::Bedrock | MockApi::Vertex)
    }
}

/// What can go wrong starting the mock. Each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    #[error("cannot listen on {addr}: {source} (is the port in use? port 0 picks a free one)")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("--listen {addr:?} is not an address like 127.0.0.1:9100: {reason}")]
    Listen { addr: String, reason: String },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Faults { path: PathBuf, source: FaultError },
    #[error("{}: {source}", path.display())]
    Tape { path: PathBuf, source: TapeError },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

fn read(path: &Path) -> Result<String, MockError> {
    std::fs::read_to_string(path).map_err(|source| MockError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Reads and validates a fault document (YAML or JSON) from a file.
pub fn load_faults(path: &Path) -> Result<FaultSet, MockError> {
    parse_faults(&read(path)?).map_err(|source| MockError::Faults {
        path: path.to_owned(),
        source,
    })
}

/// Reads and validates a replay tape (JSON Lines) from a file.
pub fn load_tape(path: &Path) -> Result<Tape, MockError> {
    Tape::parse(&read(path)?).map_err(|source| MockError::Tape {
        path: path.to_owned(),
        source,
    })
}

/// A running mock server. Dropping it stops the server (connections are
/// aborted in the background); [`MockHandle::shutdown`] also waits for that.
pub struct MockHandle {
    addr: SocketAddr,
    shared: Arc<shared::Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl MockHandle {
    /// The bound address (with the real port when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT`, for base URLs.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the server has seen (same as `GET /_mock/stats`).
    pub fn stats(&self) -> Stats {
        self.shared.stats.snapshot()
    }

    /// Clears the stats (same as `POST /_mock/reset`).
    pub fn reset_stats(&self) {
        self.shared.stats.reset();
    }

    /// Replaces the fault set and restarts the fault clock (same as
    /// `POST /_mock/faults`).
    pub fn set_faults(&self, faults: FaultSet) {
        self.shared.set_faults(faults);
    }

    /// `--api vertex`: the access tokens its `/token` issues from now on
    /// live `lifetime` (Google's hour, less a second, by default).
    pub fn set_token_lifetime(&self, lifetime: std::time::Duration) {
        self.shared.clouds.vertex.set_lifetime(lifetime);
    }

    /// Stops accepting, aborts open connections and waits until they are gone.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for MockHandle {
    fn drop(&mut self) {
        // Dropping `stop` ends the accept loop, which aborts the connections.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl std::fmt::Debug for MockHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockHandle")
            .field("addr", &self.addr)
            .finish()
    }
}

/// A mock without a socket: each [`InProcess::connect`] is an in-memory pipe
/// whose far end the mock serves on the current tokio runtime. For tests
/// under tokio's paused time, where waiting on a real socket lets the clock
/// jump to the next timer.
#[derive(Clone)]
pub struct InProcess {
    shared: Arc<shared::Shared>,
}

impl InProcess {
    /// A mock with `opts`, serving nothing until a connection is opened.
    pub fn new(opts: MockOptions) -> Self {
        InProcess {
            shared: Arc::new(shared::Shared::new(
                opts.faults,
                opts.seed,
                opts.replay,
                opts.api,
            )),
        }
    }

    /// Opens a connection: the client's end of a pipe the mock serves.
    pub fn connect(&self) -> tokio::io::DuplexStream {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(server::serve_io(server, Arc::clone(&self.shared)));
        client
    }

    /// What the mock has seen.
    pub fn stats(&self) -> Stats {
        self.shared.stats.snapshot()
    }

    /// Replaces the fault set and restarts the fault clock.
    pub fn set_faults(&self, faults: FaultSet) {
        self.shared.set_faults(faults);
    }

    /// `--api vertex`: the access tokens its `/token` issues from now on
    /// live `lifetime` (Google's hour, less a second, by default).
    pub fn set_token_lifetime(&self, lifetime: std::time::Duration) {
        self.shared.clouds.vertex.set_lifetime(lifetime);
    }
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess").finish_non_exhaustive()
    }
}

/// Binds `addr` (port 0 for any free port) and serves in background tasks on
/// the current tokio runtime.
pub async fn spawn(addr: SocketAddr, opts: MockOptions) -> Result<MockHandle, MockError> {
    let bind_err = |source| MockError::Bind { addr, source };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let shared = Arc::new(shared::Shared::new(
        opts.faults,
        opts.seed,
        opts.replay,
        opts.api,
    ));
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(server::accept_loop(listener, Arc::clone(&shared), stopped));
    Ok(MockHandle {
        addr: local,
        shared,
        stop: Some(stop),
        task: Some(task),
    })
}
