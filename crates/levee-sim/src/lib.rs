//! Placeholder: the simulator is being built (issue 6).

/// Flags of `levee simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file.
    pub file: std::path::PathBuf,
}

/// Runs `levee simulate`; returns the exit code.
pub fn run_cli(_args: SimulateArgs) -> i32 {
    0
}
