//! The `levee` binary: glue only. Each subcommand parses its flags and hands
//! over to the library crate that does the work.

mod check;
mod serve;

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
    /// Run the gateway (no --config: in front of a built-in mock provider).
    Serve(serve::ServeArgs),
    /// Run a fault-injecting mock provider (OpenAI and Anthropic wire formats).
    Mock(levee_mock::MockArgs),
    /// Replay an incident in virtual time through the real policy code.
    Simulate(levee_sim::SimulateArgs),
    /// Validate a config; print each route's retry schedule and the caller census.
    Check(check::CheckArgs),
    /// Live fault drill: open-loop load through a gateway while the mock fails on cue.
    Drill(levee_drill::DrillArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Mock(args) => levee_mock::run_cli(args),
        Command::Simulate(args) => levee_sim::run_cli(args),
        Command::Check(args) => check::run(args),
        Command::Drill(args) => levee_drill::run_cli(args),
    };
    std::process::exit(code);
}
