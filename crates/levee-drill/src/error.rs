//! What can stop a drill before it reports. Each message says what to do.

/// Why `levee drill` could not run (or could not finish its report).
#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    #[error("--{flag} {value:?}: {reason}")]
    Flag {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error(
        "--{flag} {url}: {host} is not a loopback address; the drill only sends load to \
         127.0.0.0/8, localhost or [::1] (run the gateway and the mock on this machine)"
    )]
    NotLoopback {
        flag: &'static str,
        url: String,
        host: String,
    },
    #[error(
        "cannot reach the mock's control API at {url}: {reason} (is `levee mock --listen ...` \
         running there?)"
    )]
    MockUnreachable { url: String, reason: String },
    #[error("the mock refused the fault document {doc}: {reason} (fix the --fault flags)")]
    FaultRejected { doc: String, reason: String },
    #[error(
        "cannot connect to the gateway at {addr}: {reason} (is `levee serve` listening there?)"
    )]
    GatewayUnreachable { addr: String, reason: String },
    #[error(
        "cannot reach the state store {url}: {reason} (is the gateway's Redis running there? \
         `--pause-state` takes the URL of its `state.url`)"
    )]
    StateUnreachable { url: String, reason: String },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot write the plot {path}: {reason}")]
    Plot { path: String, reason: String },
    #[error("cannot print the report: {0}")]
    Json(#[from] serde_json::Error),
}

impl DrillError {
    /// The process exit code for this error: 2 for what the user must change
    /// in the command line, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            DrillError::Flag { .. }
            | DrillError::NotLoopback { .. }
            | DrillError::FaultRejected { .. } => 2,
            _ => 1,
        }
    }
}
