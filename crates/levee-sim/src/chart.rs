//! The incident chart both `levee simulate --plot` and `levee drill --plot`
//! draw: requests/s over time, one line per series, the fault window shaded.
//! One drawing so the simulator's picture and the live drill's can be laid
//! side by side and read the same way.

use plotters::prelude::*;
use std::path::Path;

/// How a line is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stroke {
    /// The headline series (2 px).
    Bold,
    /// A companion series (1 px).
    Thin,
    /// A reference level (1 px, dashed).
    Dashed,
}

/// One line of the chart.
#[derive(Clone, Debug)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub stroke: Stroke,
}

/// A whole chart.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    /// The x axis runs from 0 to this many seconds.
    pub x_max: f64,
    /// `[from, to)` seconds, shaded.
    pub fault: Option<(f64, f64)>,
    pub lines: Vec<Line>,
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(200, 40, 40),
    RGBColor(30, 100, 200),
    RGBColor(40, 150, 60),
    RGBColor(150, 60, 170),
    RGBColor(230, 140, 20),
    RGBColor(90, 90, 90),
];
const FAULT: RGBColor = RGBColor(250, 200, 60);

/// Writes `chart` as an SVG; the error says what failed.
pub fn write(chart: &Chart, path: &Path) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let x_max = chart.x_max.max(1.0);
    let y_max = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|(_, y)| *y))
        .fold(1.0f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut c = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(|x| e(&x))?;
    c.configure_mesh()
        .x_desc(chart.x_desc.as_str())
        .y_desc(chart.y_desc.as_str())
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(|x| e(&x))?;
    if let Some((a, b)) = chart.fault {
        c.draw_series(std::iter::once(Rectangle::new(
            [(a, 0.0), (b.min(x_max), y_max)],
            FAULT.mix(0.25).filled(),
        )))
        .map_err(|x| e(&x))?
        .label("fault window")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], FAULT.mix(0.4).filled()));
    }
    for (i, line) in chart.lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let width = if line.stroke == Stroke::Bold { 2 } else { 1 };
        let style = colour.stroke_width(width);
        let drawn = match line.stroke {
            Stroke::Dashed => c
                .draw_series(DashedLineSeries::new(
                    line.points.iter().copied(),
                    6,
                    4,
                    style,
                ))
                .map_err(|x| e(&x))?,
            Stroke::Bold | Stroke::Thin => c
                .draw_series(LineSeries::new(line.points.iter().copied(), style))
                .map_err(|x| e(&x))?,
        };
        drawn
            .label(line.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
