//! `--plot out.svg`: upstream requests/s over time (what the provider saw),
//! the offered load (logical requests started per second), the baseline, and
//! the fault window shaded — drawn by the same chart as `levee simulate --plot`.

use std::path::Path;

use levee_sim::chart::{self, Chart, Line, Stroke};

use crate::error::DrillError;
use crate::report::Report;

/// Writes the SVG.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), DrillError> {
    let x_max = report
        .series
        .last()
        .map_or(report.duration_seconds, |(t, _)| *t);
    let c = Chart {
        title: format!(
            "levee drill — {} req/s for {} s: upstream requests/s (peak {} vs baseline {})",
            report.rate,
            report.duration_seconds,
            report.peak_upstream_rps,
            report.baseline_upstream_rps
        ),
        x_desc: "time since the faults were set (s)".into(),
        y_desc: "requests per second (1 s window)".into(),
        x_max,
        fault: report.fault_window_seconds.map(|[a, b]| (a, b)),
        lines: vec![
            Line {
                name: "upstream (provider) requests".into(),
                points: report.series.clone(),
                stroke: Stroke::Bold,
            },
            Line {
                name: "logical requests started".into(),
                points: report.offered.clone(),
                stroke: Stroke::Thin,
            },
            Line {
                name: "baseline upstream".into(),
                points: vec![
                    (0.0, report.baseline_upstream_rps),
                    (x_max.max(1.0), report.baseline_upstream_rps),
                ],
                stroke: Stroke::Dashed,
            },
        ],
    };
    chart::write(&c, path).map_err(|reason| DrillError::Plot {
        path: path.display().to_string(),
        reason,
    })
}
