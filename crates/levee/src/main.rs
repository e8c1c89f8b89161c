//! The `levee` binary: glue only. Each subcommand parses its flags and hands
//! over to the library crate that does the work.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "levee",
    version,
    about = "The one retry layer in front of LLM providers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a fault-injecting mock provider (OpenAI and Anthropic wire formats).
    Mock(levee_mock::MockArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Mock(args) => levee_mock::run_cli(args),
    };
    std::process::exit(code);
}
