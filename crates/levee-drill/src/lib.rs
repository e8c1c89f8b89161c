//! `levee drill`: the live fault-injection exercise (block the provider for a
//! while, record what callers see) as a command.
//! It drives an open-loop load of chat completions (requests start on
//! schedule whatever happens to earlier ones) through a running gateway, sets
//! a fault window on the `levee mock` behind it, polls the mock's stats every
//! 100 ms to see what the provider received, and reports logical requests,
//! caller-visible outcomes by kind, upstream attempts per logical request,
//! peak upstream rate against the baseline, time to recover after the fault,
//! and requests left unanswered — as text, or with `--json` as the object
//! users' tooling reads (its field names are a public contract), optionally with an SVG of upstream requests/s.
//!
//! It is not a load tester for arbitrary hosts: it refuses any target that is
//! not loopback (127.0.0.0/8, `localhost`, `[::1]`), it is bounded in count
//! (at most 1,000,000 requests) and time (the duration, then each straggler's
//! deadline plus 2 s), and it only speaks to a gateway with a `levee mock`
//! behind it, whose fault set it replaces at start and clears at the end.
//! How each number is defined is documented in [`report`].
#![forbid(unsafe_code)]

mod args;
mod clock;
mod error;
mod kill;
mod load;
mod plot;
pub mod report;
mod target;

pub use args::{
    parse_duration, parse_fault, Arrivals, DrillArgs, Exercise, Plan, ReplicaStop, StatePause,
    StopSignal,
};
pub use error::DrillError;
pub use load::{Measured, Record, Sample, StopHook, STRAGGLER_MARGIN};
pub use report::Report;
pub use target::Target;

/// Runs a checked drill against live servers and returns the raw
/// measurements: one [`Record`] per logical request and the mock's counter
/// over time. [`report::summarise`] turns them into the report.
pub async fn measure(plan: &Plan, progress: bool) -> Result<Measured, DrillError> {
    load::run(plan, progress, None).await
}

/// [`run`] with the replica stopped by `stop` (awaited at the plan's
/// `stop.at`, which must be set) instead of a signal to a PID.
pub async fn run_with_stop(plan: &Plan, stop: StopHook) -> Result<Report, DrillError> {
    let measured = load::run(plan, false, Some(stop)).await?;
    Ok(report::summarise(plan, &measured))
}

/// Runs a checked drill against live servers and summarises it (writing the
/// plot when the plan asks for one). `progress` prints a status line on stderr
/// every second.
pub async fn run(plan: &Plan, progress: bool) -> Result<Report, DrillError> {
    let measured = measure(plan, progress).await?;
    if let Some(why) = &measured.clear_failed {
        eprintln!("levee drill: warning: could not clear the mock's faults at the end: {why}");
    }
    let report = report::summarise(plan, &measured);
    if let Some(path) = &plan.plot {
        plot::write_svg(&report, path)?;
    }
    Ok(report)
}

/// Runs `levee drill`; returns the exit code: 0 when every request was
/// answered within its deadline plus 50 ms, 3 when the drill ran but some
/// were late or unanswered, 2 for bad flags (or faults the mock refused),
/// 1 when it could not run.
pub fn run_cli(args: DrillArgs) -> i32 {
    let plan = match args.plan() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("levee drill: {e}");
            return e.exit_code();
        }
    };
    use std::io::IsTerminal;
    let progress = !plan.json && std::io::stderr().is_terminal();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let e = DrillError::Runtime(e);
            eprintln!("levee drill: {e}");
            return e.exit_code();
        }
    };
    let report = match runtime.block_on(run(&plan, progress)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("levee drill: {e}");
            return e.exit_code();
        }
    };
    if plan.json {
        match serde_json::to_string(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("levee drill: {}", DrillError::Json(e));
                return 1;
            }
        }
    } else {
        print!("{}", report.human());
        if let Some(p) = &plan.plot {
            println!("  plot                {}", p.display());
        }
    }
    if report.ok() {
        0
    } else {
        3
    }
}
