//! `--plot out.svg`: upstream requests/s over time, one line per variant, the
//! fault window shaded (the shared [`crate::chart`]).

use crate::chart::{self, Chart, Line, Stroke};
use crate::error::SimError;
use crate::report::Report;
use std::path::Path;

/// Writes the SVG.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), SimError> {
    let lines = report
        .variants
        .iter()
        .map(|v| {
            let w = v.detail.resolution.as_secs_f64();
            // The drain after arrivals stop is not part of the story.
            let n =
                ((report.duration.as_secs_f64() / w).ceil() as usize).min(v.detail.upstream.len());
            Line {
                name: v.name.clone(),
                points: v
                    .detail
                    .upstream_rps()
                    .take(n)
                    .enumerate()
                    .map(|(i, r)| (i as f64 * w, r))
                    .collect(),
                stroke: Stroke::Bold,
            }
        })
        .collect();
    let c = Chart {
        title: format!("{} — upstream requests/s", report.scenario),
        x_desc: "time since start (s)".into(),
        y_desc: "upstream requests per second".into(),
        x_max: report.duration.as_secs_f64(),
        fault: report.fault,
        lines,
    };
    chart::write(&c, path).map_err(|message| SimError::Plot {
        path: path.display().to_string(),
        message,
    })
}
