//! `levee check`: validate a config, print each route's retry schedule and the caller census.

/// Flags of `levee check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Config file.
    #[arg(long)]
    pub config: std::path::PathBuf,
}

/// Runs `levee check`; returns the exit code.
pub fn run(_args: CheckArgs) -> i32 {
    0
}
