//! Small line charts for `sweep collect`: metric vs a swept axis per policy (markers and
//! error bars) and JCT CDFs. A chart is laid out once as [`Shape`]s, which the SVG writer here
//! and the PNG writer (`png.rs`) draw; both are hand-written to keep the binary free of font
//! and raster dependencies (SVG text uses the viewer's sans-serif font).

use std::fmt::Write as _;

/// Okabe–Ito colours: distinct for colour-blind readers, in this order.
const COLOURS: &[&str] = &[
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

/// One line: points (x, y) with an optional error interval per point.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    /// Error interval (low, high) around `y`, drawn as a bar with caps.
    pub err: Option<(f64, f64)>,
}

/// A chart: axes, labels and lines.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Tick labels for categorical x values (positions 0, 1, 2, …) instead of numbers.
    pub x_categories: Option<Vec<String>>,
    pub log_x: bool,
    /// Draw steps without markers (CDFs).
    pub steps: bool,
}

pub const W: f64 = 720.0;
pub const H: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 180.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

/// Round tick values covering [lo, hi]: steps of 1, 2 or 5 × 10^k, about `n` of them.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) {
        return vec![0.0, 1.0];
    }
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (lo - 0.5, lo + 0.5)
    };
    let raw = (hi - lo) / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).floor() * step;
    let mut ticks = Vec::new();
    let mut t = first;
    while t <= hi + step * 1e-9 {
        ticks.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
        if ticks.len() > 50 {
            break;
        }
    }
    if ticks.last().is_some_and(|l| *l < hi) {
        ticks.push(t);
    }
    ticks
}

fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.0e}")
    } else if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Horizontal alignment of a text at its anchor point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

/// What a chart is drawn with, in pixels of a `W` × `H` canvas; both the SVG and the PNG
/// writer draw these, so the two formats show the same chart.
#[derive(Debug, Clone)]
pub enum Shape {
    /// Axis-aligned rectangle.
    Rect {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: Option<&'static str>,
        stroke: Option<&'static str>,
    },
    /// Open polyline.
    Line {
        points: Vec<(f64, f64)>,
        colour: &'static str,
        width: f64,
        dashed: bool,
    },
    /// A series' marker: 0 circle, 1 square, 2 triangle, 3 diamond, 4 cross.
    Marker {
        kind: usize,
        x: f64,
        y: f64,
        colour: &'static str,
    },
    /// Text with its baseline at `y`; `vertical` turns it 90° counter-clockwise about (x, y).
    Text {
        x: f64,
        y: f64,
        text: String,
        anchor: Anchor,
        size: f64,
        vertical: bool,
    },
}

pub const GRID: &str = "#e0e0e0";
pub const BLACK: &str = "#000000";
pub const WHITE: &str = "#ffffff";

fn svg_shape(o: &mut String, shape: &Shape) {
    let _ = match shape {
        Shape::Rect {
            x,
            y,
            w,
            h,
            fill,
            stroke,
        } => write!(
            o,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{}" stroke="{}"/>"#,
            fill.unwrap_or("none"),
            stroke.unwrap_or("none")
        ),
        Shape::Line {
            points,
            colour,
            width,
            dashed,
        } => {
            let d: Vec<String> = points
                .iter()
                .enumerate()
                .map(|(i, (x, y))| format!("{}{x:.1},{y:.1}", if i == 0 { "M" } else { "L" }))
                .collect();
            write!(
                o,
                r#"<path d="{}" fill="none" stroke="{colour}" stroke-width="{width}"{}/>"#,
                d.join(" "),
                if *dashed {
                    r#" stroke-dasharray="6,3""#
                } else {
                    ""
                }
            )
        }
        Shape::Marker { kind, x, y, colour } => match kind % 5 {
            0 => write!(
                o,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{colour}"/>"#
            ),
            1 => write!(
                o,
                r#"<rect x="{:.1}" y="{:.1}" width="8" height="8" fill="{colour}"/>"#,
                x - 4.0,
                y - 4.0
            ),
            2 => write!(
                o,
                r#"<path d="M{x:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z" fill="{colour}"/>"#,
                y - 5.0,
                x + 5.0,
                y + 4.0,
                x - 5.0,
                y + 4.0
            ),
            3 => write!(
                o,
                r#"<path d="M{x:.1},{:.1} L{:.1},{y:.1} L{x:.1},{:.1} L{:.1},{y:.1} Z" fill="{colour}"/>"#,
                y - 5.0,
                x + 5.0,
                y + 5.0,
                x - 5.0
            ),
            _ => write!(
                o,
                r#"<path d="M{:.1},{:.1} L{:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1}" stroke="{colour}" stroke-width="2"/>"#,
                x - 4.0,
                y - 4.0,
                x + 4.0,
                y + 4.0,
                x - 4.0,
                y + 4.0,
                x + 4.0,
                y - 4.0
            ),
        },
        Shape::Text {
            x,
            y,
            text,
            anchor,
            size,
            vertical,
        } => {
            let anchor = match anchor {
                Anchor::Start => "start",
                Anchor::Middle => "middle",
                Anchor::End => "end",
            };
            if *vertical {
                write!(
                    o,
                    r#"<text transform="translate({x:.1},{y:.1}) rotate(-90)" text-anchor="{anchor}" font-size="{size}">{}</text>"#,
                    esc(text)
                )
            } else {
                write!(
                    o,
                    r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" font-size="{size}">{}</text>"#,
                    esc(text)
                )
            }
        }
    };
}

impl Chart {
    pub fn to_svg(&self) -> String {
        let mut o = String::new();
        let _ = write!(
            o,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        for shape in self.shapes() {
            svg_shape(&mut o, &shape);
        }
        o.push_str("</svg>\n");
        o
    }

    /// The chart as shapes on a `W` × `H` canvas.
    pub fn shapes(&self) -> Vec<Shape> {
        let fx = |x: f64| if self.log_x { x.max(1e-9).log10() } else { x };
        let pts = || self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for p in pts() {
            x0 = x0.min(fx(p.x));
            x1 = x1.max(fx(p.x));
            let (lo, hi) = p.err.unwrap_or((p.y, p.y));
            y0 = y0.min(lo.min(p.y));
            y1 = y1.max(hi.max(p.y));
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        // Metrics are non-negative: start the y axis at zero so lines compare honestly.
        y0 = y0.min(0.0);
        let yt = nice_ticks(y0, y1, 6);
        let (y0, y1) = (yt[0], *yt.last().unwrap_or(&1.0));
        let xt: Vec<f64> = if self.x_categories.is_some() {
            (0..=(x1.round() as i64).max(0)).map(|i| i as f64).collect()
        } else if self.log_x {
            (x0.floor() as i64..=x1.ceil() as i64)
                .map(|e| e as f64)
                .collect()
        } else {
            nice_ticks(x0, x1, 7)
        };
        let (x0, x1) = if self.x_categories.is_some() {
            (-0.5, x1 + 0.5)
        } else {
            (xt[0].min(x0), xt.last().copied().unwrap_or(x1).max(x1))
        };
        let (x0, x1) = if x1 > x0 {
            (x0, x1)
        } else {
            (x0 - 1.0, x0 + 1.0)
        };
        let (y0, y1) = if y1 > y0 { (y0, y1) } else { (y0, y0 + 1.0) };
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;
        let sx = |x: f64| LEFT + (fx(x) - x0) / (x1 - x0) * pw;
        let sxr = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
        let sy = |y: f64| TOP + ph - (y - y0) / (y1 - y0) * ph;
        let text = |x: f64, y: f64, text: String, anchor: Anchor| Shape::Text {
            x,
            y,
            text,
            anchor,
            size: 12.0,
            vertical: false,
        };
        let line = |points: Vec<(f64, f64)>, colour: &'static str, width: f64| Shape::Line {
            points,
            colour,
            width,
            dashed: false,
        };

        let mut v = vec![Shape::Rect {
            x: 0.0,
            y: 0.0,
            w: W,
            h: H,
            fill: Some(WHITE),
            stroke: None,
        }];
        v.push(Shape::Text {
            x: LEFT + pw / 2.0,
            y: 22.0,
            text: self.title.clone(),
            anchor: Anchor::Middle,
            size: 15.0,
            vertical: false,
        });
        for t in &yt {
            let y = sy(*t);
            v.push(line(vec![(LEFT, y), (LEFT + pw, y)], GRID, 1.0));
            v.push(text(LEFT - 6.0, y + 4.0, tick_label(*t), Anchor::End));
        }
        for t in &xt {
            let x = sxr(*t);
            let label = match &self.x_categories {
                Some(c) => c.get(*t as usize).cloned().unwrap_or_default(),
                None if self.log_x => tick_label(10f64.powf(*t)),
                None => tick_label(*t),
            };
            v.push(line(vec![(x, TOP), (x, TOP + ph)], GRID, 1.0));
            v.push(text(x, TOP + ph + 18.0, label, Anchor::Middle));
        }
        v.push(Shape::Rect {
            x: LEFT,
            y: TOP,
            w: pw,
            h: ph,
            fill: None,
            stroke: Some(BLACK),
        });
        v.push(text(
            LEFT + pw / 2.0,
            H - 15.0,
            self.x_label.clone(),
            Anchor::Middle,
        ));
        v.push(Shape::Text {
            x: 20.0,
            y: TOP + ph / 2.0,
            text: self.y_label.clone(),
            anchor: Anchor::Middle,
            size: 12.0,
            vertical: true,
        });
        for (k, s) in self.series.iter().enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            // Past the palette, lines repeat colours dashed.
            let dashed = k >= COLOURS.len();
            let mut points = Vec::with_capacity(s.points.len() * 2);
            for p in &s.points {
                let (x, y) = (sx(p.x), sy(p.y));
                if self.steps {
                    if let Some(&(_, py)) = points.last() {
                        points.push((x, py));
                    }
                }
                points.push((x, y));
            }
            v.push(Shape::Line {
                points,
                colour,
                width: 2.0,
                dashed,
            });
            if !self.steps {
                for p in &s.points {
                    let (x, y) = (sx(p.x), sy(p.y));
                    if let Some((lo, hi)) = p.err {
                        let (ylo, yhi) = (sy(lo), sy(hi));
                        v.push(line(vec![(x, ylo), (x, yhi)], colour, 1.2));
                        v.push(line(vec![(x - 4.0, ylo), (x + 4.0, ylo)], colour, 1.2));
                        v.push(line(vec![(x - 4.0, yhi), (x + 4.0, yhi)], colour, 1.2));
                    }
                    v.push(Shape::Marker {
                        kind: k,
                        x,
                        y,
                        colour,
                    });
                }
            }
            let ly = TOP + 10.0 + 20.0 * k as f64;
            let lx = LEFT + pw + 15.0;
            v.push(Shape::Line {
                points: vec![(lx, ly), (lx + 24.0, ly)],
                colour,
                width: 2.0,
                dashed,
            });
            if !self.steps {
                v.push(Shape::Marker {
                    kind: k,
                    x: lx + 12.0,
                    y: ly,
                    colour,
                });
            }
            v.push(text(lx + 30.0, ly + 4.0, s.name.clone(), Anchor::Start));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(nice_ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            nice_ticks(3.0, 47.0, 5),
            [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
        );
        let t = nice_ticks(0.013, 0.92, 6);
        assert!(t[0] <= 0.013 && *t.last().unwrap() >= 0.92);
        for w in t.windows(2) {
            assert!(((w[1] - w[0]) - 0.2).abs() < 1e-9, "{t:?}");
        }
        assert_eq!(tick_label(0.2 + 0.1), "0.3");
        assert_eq!(tick_label(2000.0), "2000");
    }

    #[test]
    fn a_chart_has_one_line_and_legend_entry_per_series() {
        let chart = Chart {
            title: "avg <JCT>".into(),
            x_label: "load".into(),
            y_label: "s".into(),
            series: (0..3)
                .map(|k| Series {
                    name: format!("p{k}"),
                    points: (0..4)
                        .map(|i| Point {
                            x: i as f64,
                            y: (i * k) as f64,
                            err: Some((0.0, (i * k + 1) as f64)),
                        })
                        .collect(),
                })
                .collect(),
            x_categories: None,
            log_x: false,
            steps: false,
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for (k, colour) in COLOURS.iter().enumerate().take(3) {
            // The series' line and its legend sample.
            let pattern = format!("fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"");
            assert_eq!(svg.matches(&pattern).count(), 2, "{colour}");
            assert!(svg.contains(&format!(">p{k}</text>")));
        }
        assert!(!svg.contains(COLOURS[3]), "three series, three colours");
        assert!(svg.contains("avg &lt;JCT&gt;"), "titles are escaped");
    }
}
