//! `levee simulate`: replays an incident in virtual time, through Levee's real
//! policy code, so a team can see what its retry layers do to a provider's bad
//! thirty seconds before production shows them.
//!
//! A scenario (YAML) describes traffic, a provider model (a bounded worker pool
//! with a queue, a latency distribution, an allowance, fault windows, overload)
//! and several *variants*: stacks of caller layers (SDKs, service wrappers) in
//! front of either a naive retrying gateway or a Levee config block. A
//! discrete-event engine runs each variant on virtual time with a seeded RNG;
//! the Levee hop calls `levee_policy::RoutePolicy::decide`/`record` — the same
//! functions the gateway calls — on state built by `levee-config` from the same
//! YAML a gateway would load. The result is believable only because it is the
//! same code.
//!
//! It is not a load generator and not a model of any real provider's
//! internals: the provider is a queue with workers, deliberately simple, so
//! the retry layers are what the results are about. It reads no clock and
//! does no I/O besides reading the scenario (and its trace) and writing the
//! plot.
#![forbid(unsafe_code)]

mod arrivals;
pub mod chart;
mod dist;
mod engine;
mod error;
mod gateway;
pub mod incident;
mod layers;
mod metrics;
mod plot;
mod provider;
mod report;
mod scenario;
mod slab;
mod virtual_time;

pub use arrivals::{Process, Shape, Stream};
pub use dist::Dist;
pub use error::SimError;
pub use layers::{Layer, Reply, RetryRule};
pub use plot::write_svg;
pub use provider::{Fault, ProviderModel, RateLimit};
pub use report::{table, Detail, EndpointReport, Report, VariantReport};
pub use scenario::{LeveeGateway, Scenario, Variant};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The seed used when `--seed` is not given.
pub const DEFAULT_SEED: u64 = 6;

/// Flags of `levee simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (YAML).
    pub file: std::path::PathBuf,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG of upstream requests/s over time per variant.
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<std::path::PathBuf>,
    /// Seed of the random number generator (runs are reproducible).
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
}

/// Runs every variant of `sc` (in parallel, one thread each) and summarises.
pub fn simulate(sc: &Scenario, seed: u64) -> Report {
    simulate_with(sc, seed, false)
}

fn simulate_with(sc: &Scenario, seed: u64, show_progress: bool) -> Report {
    let progress: Vec<AtomicU64> = sc.variants.iter().map(|_| AtomicU64::new(0)).collect();
    let variants = std::thread::scope(|scope| {
        let handles: Vec<_> = sc
            .variants
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let p = &progress[i];
                scope.spawn(move || run_variant(sc, v, seed, p))
            })
            .collect();
        if show_progress {
            let end = (sc.duration + sc.drain).as_nanos() as f64;
            while handles.iter().any(|h| !h.is_finished()) {
                let parts: Vec<String> = sc
                    .variants
                    .iter()
                    .zip(&progress)
                    .map(|(v, p)| {
                        let done = p.load(Ordering::Relaxed) as f64 / end * 100.0;
                        format!("{} {done:3.0}%", v.name)
                    })
                    .collect();
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r\x1b[2Ksimulating: {}", parts.join(" · "));
                let _ = err.flush();
                drop(err);
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    Report {
        scenario: sc.name.clone(),
        fault: sc
            .fault_span()
            .map(|(a, b)| (a.as_secs_f64(), b.as_secs_f64())),
        duration: sc.duration,
        variants,
    }
}

fn run_variant(sc: &Scenario, v: &Variant, seed: u64, progress: &AtomicU64) -> VariantReport {
    let engine = engine::Engine::new(sc, v, SmallRng::seed_from_u64(seed));
    let (metrics, reasons) = engine.run(progress);
    report::summarise(sc, &v.name, metrics, reasons)
}

/// Runs `levee simulate`; returns the exit code.
pub fn run_cli(args: SimulateArgs) -> i32 {
    let sc = match Scenario::load(&args.file) {
        Ok(sc) => sc,
        Err(e) => {
            eprintln!("levee simulate: {e}");
            return 1;
        }
    };
    let show = !args.json && std::io::stderr().is_terminal();
    let report = simulate_with(&sc, args.seed, show);
    if let Some(path) = &args.plot {
        if let Err(e) = write_svg(&report, path) {
            eprintln!("levee simulate: {e}");
            return 1;
        }
    }
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("levee simulate: cannot encode the report: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", table(&report));
        if let Some(path) = &args.plot {
            println!("\nplot written to {}", path.display());
        }
    }
    0
}
