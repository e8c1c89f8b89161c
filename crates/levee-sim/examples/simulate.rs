//! `cargo run -p levee-sim --example simulate -- FILE [--json] [--plot OUT.svg] [--seed N]`:
//! the simulator without the rest of the `levee` binary.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: levee_sim::SimulateArgs,
}

fn main() {
    std::process::exit(levee_sim::run_cli(Cli::parse().args));
}
