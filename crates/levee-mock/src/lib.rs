//! Placeholder: the mock provider is being built (issue 3).

/// Flags of `levee mock`.
#[derive(Debug, clap::Args)]
pub struct MockArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9100")]
    pub listen: String,
}

/// Runs `levee mock` until interrupted; returns the process exit code.
pub fn run_cli(_args: MockArgs) -> i32 {
    0
}
