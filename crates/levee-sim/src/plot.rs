//! `--plot out.svg`: upstream requests/s over time, one line per variant, the
//! fault window shaded.

use crate::error::SimError;
use crate::report::Report;
use plotters::prelude::*;
use std::path::Path;

const COLOURS: [RGBColor; 6] = [
    RGBColor(200, 40, 40),
    RGBColor(30, 100, 200),
    RGBColor(40, 150, 60),
    RGBColor(150, 60, 170),
    RGBColor(230, 140, 20),
    RGBColor(90, 90, 90),
];

/// Writes the SVG.
pub fn write_svg(report: &Report, path: &Path) -> Result<(), SimError> {
    let err = |e: String| SimError::Plot {
        path: path.display().to_string(),
        message: e,
    };
    draw(report, path).map_err(err)
}

fn draw(report: &Report, path: &Path) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let series: Vec<(String, Vec<(f64, f64)>)> = report
        .variants
        .iter()
        .map(|v| {
            let w = v.detail.resolution.as_secs_f64();
            // The drain after arrivals stop is not part of the story.
            let n =
                ((report.duration.as_secs_f64() / w).ceil() as usize).min(v.detail.upstream.len());
            let pts = v
                .detail
                .upstream_rps()
                .take(n)
                .enumerate()
                .map(|(i, r)| (i as f64 * w, r))
                .collect();
            (v.name.clone(), pts)
        })
        .collect();
    let x_max = report.duration.as_secs_f64().max(1.0);
    let y_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .fold(1.0f64, f64::max)
        * 1.08;

    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{} — upstream requests/s", report.scenario),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("time since start (s)")
        .y_desc("upstream requests per second")
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(|x| e(&x))?;
    if let Some((a, b)) = report.fault {
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
    for (i, (name, pts)) in series.into_iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(pts, colour.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
