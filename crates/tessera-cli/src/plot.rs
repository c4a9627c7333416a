//! Plots for people: line charts (optionally log-x, step-shaped, with spread bands, in
//! panels) and grouped bar charts, as SVG or PNG, drawn with `plotters` and an embedded font
//! (Roboto, Apache-2.0) so that no system font is needed.
//!
//! The charts take plain data ([`LineChart`], [`BarChart`]) so that `simulate`, `repro` and
//! `sweep` share one look: each series keeps its colour and marker across panels (by its
//! position), colours come from a palette chosen to stay apart (Okabe-Ito first), markers
//! cycle independently of colours, and axes use plotters' round tick values.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use clap::ValueEnum;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use tessera_sim::{JobOutcome, SimReport};

const FONT: &[u8] = include_bytes!("../assets/Roboto-Regular.ttf");
const FAMILY: &str = "sans-serif";

/// Line and marker colours, in order of use: Okabe-Ito's colour-blind-safe set (without its
/// yellow, too pale on white), then darker tones of the Tableau set.
const PALETTE: [RGBColor; 12] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0x8C, 0x56, 0x4B),
    RGBColor(0x94, 0x67, 0xBD),
    RGBColor(0x7F, 0x7F, 0x7F),
    RGBColor(0xBC, 0xBD, 0x22),
    RGBColor(0x17, 0xBE, 0xCF),
];

/// Marker shapes, cycled so that two series never share both colour and marker (the cycle
/// lengths 12 and 5 are coprime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Marker {
    Circle,
    Square,
    Triangle,
    Cross,
    Diamond,
}

const MARKERS: [Marker; 5] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Cross,
    Marker::Diamond,
];

/// Most points drawn per series; longer series are thinned (keeping each bucket's extremes)
/// so that files stay small and quick to open.
const MAX_POINTS: usize = 1500;

/// Output format of plots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum PlotFormat {
    /// Scalable vector graphics (text stays text).
    #[default]
    Svg,
    /// A 1200 px wide bitmap.
    Png,
}

impl PlotFormat {
    /// File extension.
    pub fn ext(self) -> &'static str {
        match self {
            PlotFormat::Svg => "svg",
            PlotFormat::Png => "png",
        }
    }
}

/// One line of a [`LineChart`].
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
    /// Optional spread band: (x, low, high), drawn as a translucent area behind the line.
    pub band: Vec<(f64, f64, f64)>,
    /// Colour and marker index; `None` = the series' position. Lets a series keep its look
    /// across panels that hold different subsets.
    pub style: Option<usize>,
}

/// A line chart (one panel of a figure).
#[derive(Debug, Clone, Default)]
pub struct LineChart {
    /// Panel title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis (x values must be positive; others are dropped).
    pub log_x: bool,
    /// Draw each series as a step function (value holds until the next sample).
    pub step: bool,
    /// Draw a marker at every point (for sparse data such as load sweeps).
    pub markers: bool,
    /// The lines; a series' position fixes its colour and marker.
    pub series: Vec<Series>,
}

/// Grouped bars: for each category (a policy), one bar per group (a metric).
#[derive(Debug, Clone, Default)]
pub struct BarChart {
    /// Title.
    pub title: String,
    /// Y axis label.
    pub y_label: String,
    /// Category names along x.
    pub categories: Vec<String>,
    /// (legend name, one value per category).
    pub groups: Vec<(String, Vec<f64>)>,
    /// A horizontal reference line (e.g. 1.0 for "same as the baseline").
    pub reference: Option<f64>,
}

fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(anyhow!("the embedded plot font could not be loaded"))
    }
}

fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> anyhow::Error {
    anyhow!("drawing plot: {e}")
}

/// Draws `panels` in a grid of `cols` columns under a figure `title`, to `path` with the
/// extension of `format` added; returns the path written.
pub fn line_figure(
    path: &Path,
    format: PlotFormat,
    title: &str,
    panels: &[LineChart],
    cols: usize,
) -> Result<PathBuf> {
    ensure_font()?;
    let cols = cols.clamp(1, panels.len().max(1));
    let rows = panels.len().div_ceil(cols).max(1);
    let size = (
        (560 * cols as u32).max(900),
        (60 + 420 * rows as u32).min(4000),
    );
    let path = path.with_extension(format.ext());
    match format {
        PlotFormat::Svg => {
            let root = SVGBackend::new(&path, size).into_drawing_area();
            draw_lines(&root, title, panels, rows, cols)?;
            root.present().map_err(draw_err)?;
        }
        PlotFormat::Png => {
            let root = BitMapBackend::new(&path, size).into_drawing_area();
            draw_lines(&root, title, panels, rows, cols)?;
            root.present().map_err(draw_err)?;
        }
    }
    Ok(path)
}

/// Draws a grouped bar chart to `path` with the extension of `format`; returns the path.
pub fn bar_figure(path: &Path, format: PlotFormat, chart: &BarChart) -> Result<PathBuf> {
    ensure_font()?;
    let width = (200 + 110 * chart.categories.len() as u32).clamp(700, 2400);
    let size = (width, 520);
    let path = path.with_extension(format.ext());
    match format {
        PlotFormat::Svg => {
            let root = SVGBackend::new(&path, size).into_drawing_area();
            draw_bars(&root, chart)?;
            root.present().map_err(draw_err)?;
        }
        PlotFormat::Png => {
            let root = BitMapBackend::new(&path, size).into_drawing_area();
            draw_bars(&root, chart)?;
            root.present().map_err(draw_err)?;
        }
    }
    Ok(path)
}

fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    panels: &[LineChart],
    rows: usize,
    cols: usize,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let body = root
        .titled(title, (FAMILY, 24).into_font())
        .map_err(draw_err)?;
    let areas = body.split_evenly((rows, cols));
    for (area, chart) in areas.iter().zip(panels) {
        draw_panel(area, chart)?;
    }
    Ok(())
}

/// A tick label without float noise: `30` not `30.0`, `0.25`, `10k`, `1M`.
fn tick(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if (1e6..1e15).contains(&a) {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if (1e4..1e6).contains(&a) {
        format!("{}k", trim(format!("{:.2}", v / 1e3)))
    } else if a == 0.0 || a >= 1e-3 {
        trim(format!("{v:.3}"))
    } else {
        format!("{v:.1e}")
    }
}

/// Lower and upper bounds of `values` with a margin; a degenerate range is widened.
fn bounds(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        // Whole decades, so that the log axis shows 10^k labels at both ends.
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)),
        )
    } else if hi - lo < 1e-12 {
        (lo - 1.0, hi + 1.0)
    } else {
        (lo, hi)
    }
}

/// Thins a series to at most `MAX_POINTS`, keeping for each bucket its first point and its
/// lowest and highest values (so spikes and steps survive).
fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points.to_vec();
    }
    let per = points.len().div_ceil(MAX_POINTS / 3);
    let mut out = Vec::with_capacity(MAX_POINTS + 3);
    for chunk in points.chunks(per) {
        let first = chunk[0];
        let lo = chunk
            .iter()
            .copied()
            .fold(first, |a, b| if b.1 < a.1 { b } else { a });
        let hi = chunk
            .iter()
            .copied()
            .fold(first, |a, b| if b.1 > a.1 { b } else { a });
        let mut three = [first, lo, hi];
        three.sort_by(|a, b| a.0.total_cmp(&b.0));
        for p in three {
            if out.last() != Some(&p) {
                out.push(p);
            }
        }
    }
    if let Some(&last) = points.last() {
        if out.last() != Some(&last) {
            out.push(last);
        }
    }
    out
}

/// Markers drawn along each step line.
const STEP_MARKERS: usize = 8;

/// Height of one legend row, pixels (13 px text and its spacing).
const LEGEND_ROW_PX: f64 = 19.0;

/// The value a step line (as [`to_steps`] draws it) holds at `x`; `None` outside its span.
fn step_value(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if x < first.0 || x > last.0 {
        return None;
    }
    let after = points.partition_point(|p| p.0 <= x);
    Some(points[after.checked_sub(1)?].1)
}

fn to_steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, &(x, y)) in points.iter().enumerate() {
        if i > 0 {
            out.push((x, points[i - 1].1));
        }
        out.push((x, y));
    }
    out
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, chart: &LineChart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let keep_x = |x: f64| x.is_finite() && (!chart.log_x || x > 0.0);
    // (position for colour and marker, the series, its points as drawn)
    type Drawn<'a> = (usize, &'a Series, Vec<(f64, f64)>);
    let series: Vec<Drawn<'_>> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|&(x, y)| keep_x(x) && y.is_finite())
                .collect();
            let pts = thin(&pts);
            let style = s.style.unwrap_or(i);
            (style, s, if chart.step { to_steps(&pts) } else { pts })
        })
        .collect();
    let xs = series.iter().flat_map(|(_, _, p)| p.iter().map(|q| q.0));
    let (x0, x1) = bounds(xs, chart.log_x);
    let ys = series.iter().flat_map(|(_, s, p)| {
        p.iter()
            .map(|q| q.1)
            .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
    });
    let (y0, y1) = bounds(ys.chain([0.0]), false);
    // The legend must not cover data. A CDF (log x, steps) leaves its lower right empty:
    // the legend goes there. Elsewhere the y range grows so that the legend, in the upper
    // left, sits above the highest point.
    let cdf = chart.log_x && chart.step;
    let labelled = series
        .iter()
        .filter(|(_, s, _)| !s.label.is_empty())
        .count();
    let y1 = if cdf {
        y1 + (y1 - y0) * 0.05
    } else {
        let (_, height) = area.dim_in_pixel();
        let caption = if chart.title.is_empty() { 0 } else { 30 };
        let plot_px = (height as f64 - caption as f64 - 42.0 - 24.0).max(60.0);
        let legend_px = if labelled == 0 {
            0.0
        } else {
            LEGEND_ROW_PX * labelled as f64 + 16.0
        };
        let free = (1.0 - legend_px / plot_px - 0.05).max(0.35);
        y0 + (y1 - y0) / free
    };
    // Markers along step lines (a few per series, staggered so that lines lying on each
    // other still show each one's): where lines overlap, the markers tell them apart.
    let step_marks: Vec<Vec<(f64, f64)>> = if chart.step && !chart.markers {
        let n = series.len().max(1) as f64;
        let (lo, hi) = if chart.log_x {
            (x0.log10(), x1.log10())
        } else {
            (x0, x1)
        };
        series
            .iter()
            .enumerate()
            .map(|(k, (_, _, pts))| {
                (0..STEP_MARKERS)
                    .filter_map(|m| {
                        let f = (m as f64 + (k as f64 + 0.5) / n) / STEP_MARKERS as f64;
                        let x = lo + f * (hi - lo);
                        let x = if chart.log_x { 10f64.powf(x) } else { x };
                        step_value(pts, x).map(|y| (x, y))
                    })
                    .collect()
            })
            .collect()
    } else {
        vec![Vec::new(); series.len()]
    };

    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&chart.title, (FAMILY, 18).into_font())
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64);
    let label_font = (FAMILY, 14).into_font();
    let legend_font = (FAMILY, 13).into_font();
    macro_rules! finish {
        ($ctx:ident) => {{
            $ctx.configure_mesh()
                .x_label_formatter(&|v| tick(*v))
                .y_label_formatter(&|v| tick(*v))
                .x_desc(chart.x_label.as_str())
                .y_desc(chart.y_label.as_str())
                .label_style(label_font.clone())
                .axis_desc_style(label_font.clone())
                .light_line_style(RGBColor(0xEE, 0xEE, 0xEE))
                .bold_line_style(RGBColor(0xD8, 0xD8, 0xD8))
                .draw()
                .map_err(draw_err)?;
            for ((i, s, pts), marks) in series.iter().zip(&step_marks) {
                let color = PALETTE[i % PALETTE.len()];
                if !s.band.is_empty() {
                    let mut poly: Vec<(f64, f64)> = s
                        .band
                        .iter()
                        .filter(|b| keep_x(b.0))
                        .map(|b| (b.0, b.2))
                        .collect();
                    poly.extend(
                        s.band
                            .iter()
                            .rev()
                            .filter(|b| keep_x(b.0))
                            .map(|b| (b.0, b.1)),
                    );
                    $ctx.draw_series(std::iter::once(Polygon::new(
                        poly,
                        color.mix(0.18).filled(),
                    )))
                    .map_err(draw_err)?;
                }
                let marker = MARKERS[i % MARKERS.len()];
                let line = color.stroke_width(2);
                $ctx.draw_series(LineSeries::new(pts.iter().copied(), line))
                    .map_err(draw_err)?
                    .label(s.label.as_str())
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(0, 0), (24, 0)], color.stroke_width(2))
                            + Polygon::new(
                                marker_shape(marker)
                                    .into_iter()
                                    .map(|(dx, dy)| (dx + 12, dy))
                                    .collect::<Vec<_>>(),
                                color.filled(),
                            )
                    });
                $ctx.draw_series(marks.iter().map(|&p| {
                    EmptyElement::at(p) + Polygon::new(marker_shape(marker), color.filled())
                }))
                .map_err(draw_err)?;
                if chart.markers {
                    $ctx.draw_series(
                        s.points
                            .iter()
                            .filter(|p| keep_x(p.0) && p.1.is_finite())
                            .map(|&p| {
                                EmptyElement::at(p)
                                    + Polygon::new(marker_shape(marker), color.filled())
                            }),
                    )
                    .map_err(draw_err)?;
                }
            }
            $ctx.configure_series_labels()
                .position(if cdf {
                    SeriesLabelPosition::LowerRight
                } else {
                    SeriesLabelPosition::UpperLeft
                })
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(0xBB, 0xBB, 0xBB))
                .label_font(legend_font.clone())
                .draw()
                .map_err(draw_err)?;
        }};
    }
    if chart.log_x {
        let mut ctx = builder
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(draw_err)?;
        finish!(ctx);
    } else {
        let mut ctx = builder
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(draw_err)?;
        finish!(ctx);
    }
    Ok(())
}

/// A marker's outline as pixel offsets around its centre: every shape is a polygon, so that
/// all markers have one element type.
fn marker_shape(marker: Marker) -> Vec<(i32, i32)> {
    match marker {
        Marker::Circle => vec![
            (2, -5),
            (4, -3),
            (5, 0),
            (4, 3),
            (2, 5),
            (-2, 5),
            (-4, 3),
            (-5, 0),
            (-4, -3),
            (-2, -5),
        ],
        Marker::Square => vec![(-4, -4), (4, -4), (4, 4), (-4, 4)],
        Marker::Triangle => vec![(0, -6), (5, 4), (-5, 4)],
        Marker::Cross => vec![
            (-2, -6),
            (2, -6),
            (2, -2),
            (6, -2),
            (6, 2),
            (2, 2),
            (2, 6),
            (-2, 6),
            (-2, 2),
            (-6, 2),
            (-6, -2),
            (-2, -2),
        ],
        Marker::Diamond => vec![(0, -6), (6, 0), (0, 6), (-6, 0)],
    }
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &BarChart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let n = chart.categories.len().max(1);
    let values = chart.groups.iter().flat_map(|(_, v)| v.iter().copied());
    let (_, hi) = bounds(values.chain(chart.reference).chain([0.0]), false);
    // Headroom for the value labels and the legend above the tallest bar.
    let hi = hi * 1.35;
    let mut ctx = ChartBuilder::on(root)
        .caption(&chart.title, (FAMILY, 20).into_font())
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..n as f64, 0.0..hi)
        .map_err(draw_err)?;
    let label_font = (FAMILY, 14).into_font();
    ctx.configure_mesh()
        .disable_x_mesh()
        // Category names are drawn under each group below; no numeric x ticks.
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|v| tick(*v))
        .y_desc(chart.y_label.as_str())
        .label_style(label_font.clone())
        .axis_desc_style(label_font.clone())
        .light_line_style(RGBColor(0xEE, 0xEE, 0xEE))
        .draw()
        .map_err(draw_err)?;
    let groups = chart.groups.len().max(1) as f64;
    let width = 0.8 / groups;
    for (g, (name, vals)) in chart.groups.iter().enumerate() {
        let color = PALETTE[g % PALETTE.len()];
        let left = |i: usize| i as f64 + 0.1 + g as f64 * width;
        ctx.draw_series(
            vals.iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, &v)| {
                    Rectangle::new(
                        [(left(i), 0.0), (left(i) + width * 0.92, v)],
                        color.filled(),
                    )
                }),
        )
        .map_err(draw_err)?
        .label(name.as_str())
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
        // A missing value (a policy that finished no job) is said, not drawn as 0.
        ctx.draw_series(
            vals.iter()
                .enumerate()
                .filter(|(_, v)| !v.is_finite())
                .map(|(i, _)| {
                    Text::new(
                        "none".to_string(),
                        (left(i) + width * 0.46, hi * 0.01),
                        TextStyle::from((FAMILY, 12).into_font())
                            .pos(Pos::new(HPos::Center, VPos::Bottom)),
                    )
                }),
        )
        .map_err(draw_err)?;
        ctx.draw_series(
            vals.iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, &v)| {
                    Text::new(
                        format!("{v:.2}"),
                        (left(i) + width * 0.46, v + hi * 0.01),
                        TextStyle::from((FAMILY, 12).into_font())
                            .pos(Pos::new(HPos::Center, VPos::Bottom)),
                    )
                }),
        )
        .map_err(draw_err)?;
    }
    let name_font =
        TextStyle::from((FAMILY, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, name) in chart.categories.iter().enumerate() {
        let (px, py) = ctx.backend_coord(&(i as f64 + 0.5, 0.0));
        root.draw(&Text::new(name.as_str(), (px, py + 8), name_font.clone()))
            .map_err(draw_err)?;
    }
    if let Some(r) = chart.reference {
        ctx.draw_series(LineSeries::new(
            [(0.0, r), (n as f64, r)],
            BLACK.stroke_width(1),
        ))
        .map_err(draw_err)?;
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(0xBB, 0xBB, 0xBB))
        .label_font((FAMILY, 13).into_font())
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// Draws an experiment's figure (`tessera repro`, `tessera bench`) to `dir/<file_stem>`.
///
/// Sparse sweeps get a marker per point; a series' spread (min–max over seeds) becomes a band.
/// With more than six lines named `ORDER+MECH`, the figure gets one panel per ordering, each
/// mechanism keeping its colour and marker in every panel, so that no line hides another.
pub fn experiment_figure(
    dir: &Path,
    format: PlotFormat,
    figure: &tessera_mechanisms::experiment::Figure,
) -> Result<PathBuf> {
    let to_series = |s: &tessera_mechanisms::experiment::Series, style: Option<usize>| Series {
        label: s.label.clone(),
        points: s.points.clone(),
        band: s
            .spread
            .as_ref()
            .map(|sp| {
                s.points
                    .iter()
                    .zip(sp)
                    .map(|(&(x, _), &(lo, hi))| (x, lo, hi))
                    .collect()
            })
            .unwrap_or_default(),
        style,
    };
    let chart = |title: String, series: Vec<Series>| LineChart {
        title,
        x_label: figure.x_label.clone(),
        y_label: figure.y_label.clone(),
        log_x: false,
        step: false,
        markers: true,
        series,
    };
    // ORDER+MECH labels, in order of first appearance.
    let split = |label: &str| {
        label
            .split_once('+')
            .map(|(o, m)| (o.to_string(), m.to_string()))
    };
    let mut orders: Vec<String> = Vec::new();
    let mut mechs: Vec<String> = Vec::new();
    for s in &figure.series {
        if let Some((o, m)) = split(&s.label) {
            if !orders.contains(&o) {
                orders.push(o);
            }
            if !mechs.contains(&m) {
                mechs.push(m);
            }
        }
    }
    // The paper's order of orderings first, others as they come.
    const KNOWN: [&str; 4] = ["fifo", "srtf", "las", "ftf"];
    orders.sort_by_key(|o| KNOWN.iter().position(|k| k == o).unwrap_or(KNOWN.len()));
    let all_split = figure.series.iter().all(|s| split(&s.label).is_some());
    let panels: Vec<LineChart> = if figure.series.len() > 6 && all_split && orders.len() > 1 {
        orders
            .iter()
            .map(|o| {
                let series = figure
                    .series
                    .iter()
                    .filter_map(|s| {
                        let (so, sm) = split(&s.label)?;
                        (&so == o).then(|| to_series(s, mechs.iter().position(|m| *m == sm)))
                    })
                    .collect();
                chart(o.to_ascii_uppercase(), series)
            })
            .collect()
    } else {
        vec![chart(
            String::new(),
            figure.series.iter().map(|s| to_series(s, None)).collect(),
        )]
    };
    let cols = if panels.len() > 1 { 2 } else { 1 };
    line_figure(
        &dir.join(&figure.file_stem),
        format,
        &figure.title,
        &panels,
        cols,
    )
}

/// Sorted JCTs of finished jobs, in seconds.
fn finished_jcts(r: &SimReport) -> Vec<f64> {
    let mut v: Vec<f64> = r
        .jobs
        .iter()
        .filter(|j| matches!(j.outcome, JobOutcome::Finished))
        .filter_map(|j| j.jct_secs())
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// The plots of `tessera simulate --out`: JCT CDF (log x), busy GPUs and queue length over
/// time, and average/p99 JCT speed-ups over the first policy (as the table's `vs first`).
/// Returns the files written.
pub fn simulate_plots(
    dir: &Path,
    format: PlotFormat,
    reports: &[SimReport],
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    // A JCT below a millisecond cannot sit on a log axis; it is drawn at 1 ms.
    let cdf = LineChart {
        title: "Job completion time, cumulative".into(),
        x_label: "JCT (seconds, log scale)".into(),
        y_label: "fraction of finished jobs".into(),
        log_x: true,
        step: true,
        markers: false,
        series: reports
            .iter()
            .map(|r| {
                let jcts = finished_jcts(r);
                let n = jcts.len() as f64;
                Series {
                    label: r.policy.clone(),
                    points: jcts
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| (x.max(1e-3), (i + 1) as f64 / n))
                        .collect(),
                    band: Vec::new(),
                    style: None,
                }
            })
            .collect(),
    };
    written.push(line_figure(
        &dir.join("jct_cdf"),
        format,
        "JCT distribution per policy",
        &[cdf],
        1,
    )?);

    let over_time =
        |title: &str, y: &str, value: &dyn Fn(&tessera_sim::UtilSample) -> f64| LineChart {
            title: title.into(),
            x_label: "time (hours)".into(),
            y_label: y.into(),
            log_x: false,
            step: true,
            markers: false,
            series: reports
                .iter()
                .map(|r| Series {
                    label: r.policy.clone(),
                    points: r
                        .timeseries
                        .iter()
                        .map(|s| (s.time.as_secs_f64() / 3600.0, value(s)))
                        .collect(),
                    band: Vec::new(),
                    style: None,
                })
                .collect(),
        };
    written.push(line_figure(
        &dir.join("timeline"),
        format,
        "Cluster over time per policy",
        &[
            // Parts (MIG instances, quotas) by their share: the same as whole GPUs alone
            // when nothing is held in parts.
            over_time("Busy GPUs", "GPUs allocated", &|s| s.gpu_equiv()),
            over_time("Queue length", "jobs waiting", &|s| s.queued as f64),
        ],
        1,
    )?);

    // Speed-ups over the first policy, as the table's `vs first`; a policy (or a first
    // policy) without a finished job has none (NaN, drawn as "none", not as 0).
    let base = reports
        .first()
        .map(|r| (r.summary.avg_jct_s, r.summary.p99_jct_s));
    let speedup = |v: f64, b: f64| {
        if b > 0.0 && v > 0.0 {
            b / v
        } else {
            f64::NAN
        }
    };
    if let Some((avg0, p990)) = base {
        let first = reports.first().map_or("", |r| r.policy.as_str());
        let bars = BarChart {
            title: format!("Speed-up over {first} (higher is better)"),
            y_label: format!("{first}'s JCT / policy's JCT"),
            categories: reports.iter().map(|r| r.policy.clone()).collect(),
            groups: vec![
                (
                    "average JCT".into(),
                    reports
                        .iter()
                        .map(|r| speedup(r.summary.avg_jct_s, avg0))
                        .collect(),
                ),
                (
                    "p99 JCT".into(),
                    reports
                        .iter()
                        .map(|r| speedup(r.summary.p99_jct_s, p990))
                        .collect(),
                ),
            ],
            reference: Some(1.0),
        };
        written.push(bar_figure(&dir.join("jct_bars"), format, &bars)?);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_extremes_and_ends() {
        let pts: Vec<(f64, f64)> = (0..100_000)
            .map(|i| (i as f64, if i == 54_321 { 1e6 } else { (i % 7) as f64 }))
            .collect();
        let t = thin(&pts);
        assert!(t.len() <= MAX_POINTS + 3, "{}", t.len());
        assert!(t.contains(&(54_321.0, 1e6)), "the spike survives");
        assert_eq!(t.first(), pts.first());
        assert_eq!(t.last(), pts.last());
        assert!(t.windows(2).all(|w| w[0].0 <= w[1].0), "x stays sorted");
    }

    #[test]
    fn log_bounds_are_whole_decades() {
        assert_eq!(bounds([3.0, 420.0].into_iter(), true), (1.0, 1000.0));
        assert_eq!(bounds([0.0, -1.0].into_iter(), true), (1.0, 10.0));
        assert_eq!(bounds([5.0].into_iter(), false), (4.0, 6.0));
    }

    #[test]
    fn ticks_are_round_and_short() {
        assert_eq!(tick(30.0), "30");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(100_000.0), "100k");
        assert_eq!(tick(1_000_000.0), "1M");
        assert_eq!(tick(2_500_000.0), "2.5M");
        assert_eq!(tick(0.0), "0");
    }

    #[test]
    fn steps_hold_the_previous_value() {
        assert_eq!(
            to_steps(&[(0.0, 1.0), (2.0, 3.0)]),
            vec![(0.0, 1.0), (2.0, 1.0), (2.0, 3.0)]
        );
    }

    fn figure(n_orders: usize, spread: bool) -> tessera_mechanisms::experiment::Figure {
        use tessera_mechanisms::experiment::{Figure, Series as S};
        let orders = ["fifo", "srtf", "las", "ftf"];
        let mechs = ["proportional", "greedy", "tune"];
        let mut series = Vec::new();
        for o in &orders[..n_orders] {
            for (k, m) in mechs.iter().enumerate() {
                let points: Vec<(f64, f64)> = (1..=4)
                    .map(|x| (x as f64, 10.0 * x as f64 + k as f64))
                    .collect();
                let spread =
                    spread.then(|| points.iter().map(|p| (p.1 - 1.0, p.1 + 1.0)).collect());
                series.push(S {
                    label: format!("{o}+{m}"),
                    points,
                    spread,
                });
            }
        }
        Figure {
            file_stem: "jct_vs_load".into(),
            title: "JCT vs load".into(),
            x_label: "load (jobs/hour)".into(),
            y_label: "average JCT (hours)".into(),
            series,
        }
    }

    fn svg_texts(path: &Path) -> (Vec<String>, String) {
        let text = std::fs::read_to_string(path).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap();
        let texts = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_string())
            .collect();
        (texts, text)
    }

    #[test]
    fn many_order_mech_lines_get_a_panel_per_ordering() {
        let dir = tempfile::tempdir().unwrap();
        let path = experiment_figure(dir.path(), PlotFormat::Svg, &figure(4, true)).unwrap();
        assert_eq!(path, dir.path().join("jct_vs_load.svg"));
        let (texts, raw) = svg_texts(&path);
        for panel in ["FIFO", "SRTF", "LAS", "FTF"] {
            assert!(
                texts.iter().any(|t| t == panel),
                "no {panel} panel: {texts:?}"
            );
        }
        // Each mechanism in every panel's legend, in the same colour everywhere.
        for m in ["fifo+tune", "las+tune", "ftf+greedy"] {
            assert!(texts.iter().any(|t| t == m), "{m}: {texts:?}");
        }
        // `tune` is the third mechanism: palette colour 2 in every panel.
        let green = raw.matches("stroke=\"#009E73\"").count();
        assert!(green >= 4, "tune's colour in all four panels: {green}");
        // Spread bands are translucent polygons.
        assert!(raw.matches("<polygon").count() >= 12, "bands and markers");
        // Round ticks only.
        assert!(
            texts.iter().all(|t| !t.contains(".0") || t.contains("0.")),
            "{texts:?}"
        );

        // Few lines: one panel, no ordering titles.
        let path = experiment_figure(dir.path(), PlotFormat::Svg, &figure(1, false)).unwrap();
        let (texts, _) = svg_texts(&path);
        assert!(!texts.iter().any(|t| t == "FIFO"), "{texts:?}");
        assert!(texts.iter().any(|t| t == "fifo+tune"));
    }

    #[test]
    fn twelve_series_never_share_colour_and_marker() {
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..60 {
            let c = PALETTE[i % PALETTE.len()];
            assert!(seen.insert((c.0, c.1, c.2, i % MARKERS.len())), "{i}");
        }
    }
}
