//! `--plot out.svg`: upstream requests/s over time (what the provider saw),
//! the offered load (logical requests started per second), the baseline, and
//! the fault window shaded — the same picture `levee simulate --plot` draws.

use std::path::Path;

use plotters::prelude::*;

use crate::error::DrillError;
use crate::report::Report;

/// Writes the SVG.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), DrillError> {
    draw(report, path).map_err(|reason| DrillError::Plot {
        path: path.display().to_string(),
        reason,
    })
}

fn draw(report: &Report, path: &Path) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let x_max = report
        .series
        .last()
        .map_or(report.duration_seconds, |(t, _)| *t)
        .max(1.0);
    let y_max = report
        .series
        .iter()
        .chain(report.offered.iter())
        .map(|(_, y)| *y)
        .fold(report.baseline_upstream_rps.max(1.0), f64::max)
        * 1.12;

    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "levee drill — {} req/s for {} s: upstream requests/s (peak {} vs baseline {})",
                report.rate,
                report.duration_seconds,
                report.peak_upstream_rps,
                report.baseline_upstream_rps
            ),
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("time since the faults were set (s)")
        .y_desc("requests per second (1 s window)")
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(|x| e(&x))?;
    if let Some([a, b]) = report.fault_window_seconds {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(a, 0.0), (b.min(x_max), y_max)],
                RGBColor(250, 200, 60).mix(0.25).filled(),
            )))
            .map_err(|x| e(&x))?
            .label("fault window")
            .legend(|(x, y)| {
                Rectangle::new(
                    [(x, y - 6), (x + 18, y + 6)],
                    RGBColor(250, 200, 60).mix(0.4).filled(),
                )
            });
    }
    let grey = RGBColor(120, 120, 120);
    chart
        .draw_series(DashedLineSeries::new(
            [
                (0.0, report.baseline_upstream_rps),
                (x_max, report.baseline_upstream_rps),
            ],
            6,
            4,
            grey.stroke_width(1),
        ))
        .map_err(|x| e(&x))?
        .label("baseline upstream")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(1)));
    let blue = RGBColor(30, 100, 200);
    chart
        .draw_series(LineSeries::new(
            report.offered.iter().copied(),
            blue.stroke_width(1),
        ))
        .map_err(|x| e(&x))?
        .label("logical requests started")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], blue.stroke_width(1)));
    let red = RGBColor(200, 40, 40);
    chart
        .draw_series(LineSeries::new(
            report.series.iter().copied(),
            red.stroke_width(2),
        ))
        .map_err(|x| e(&x))?
        .label("upstream (provider) requests")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], red.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
