//! Drawing the figures experiments return ([`Figure`]) as SVG.
//!
//! A small self-contained SVG line chart: no fonts are needed at build time, the viewer
//! renders the text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tessera_mechanisms::experiment::Figure;

/// The figure as an SVG document.
pub fn svg(figure: &Figure) -> String {
    let series: BTreeMap<String, Vec<(f64, f64)>> = figure
        .series
        .iter()
        .map(|s| (s.label.clone(), s.points.clone()))
        .collect();
    svg_plot(&figure.title, &figure.x_label, &figure.y_label, &series)
}

/// A small self-contained SVG line chart (no fonts needed: text is rendered by the viewer).
fn svg_plot(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &BTreeMap<String, Vec<(f64, f64)>>,
) -> String {
    const W: f64 = 760.0;
    const H: f64 = 480.0;
    const L: f64 = 70.0;
    const R: f64 = 190.0;
    const T: f64 = 40.0;
    const B: f64 = 50.0;
    let pts = series.values().flatten();
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        x0 = 0.0;
        x1 = 1.0;
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    let sx = |x: f64| L + (x - x0) / (x1 - x0) * (W - L - R);
    let sy = |y: f64| H - B - y / y1 * (H - T - B);
    let colors = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf", "#000000", "#aec7e8",
    ];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    let _ = writeln!(
        s,
        r#"<line x1="{L}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{L}" y1="{T}" x2="{L}" y2="{}" stroke="black"/>"#,
        H - B,
        W - R,
        H - B,
        H - B
    );
    for k in 0..=5 {
        let y = y1 * k as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{L}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4:.1}</text>"##,
            sy(y),
            W - R,
            L - 6.0,
            sy(y) + 4.0,
            y
        );
    }
    let mut xs: Vec<f64> = series.values().flatten().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in xs {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{x}</text>"#,
            sx(x),
            H - B + 18.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (L + W - R) / 2.0,
        H - 12.0,
        esc(xlabel)
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{0}" text-anchor="middle" transform="rotate(-90 18 {0})">{1}</text>"#,
        (T + H - B) / 2.0,
        esc(ylabel)
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        let mut pts = pts.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for &(x, y) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                sx(x),
                sy(y)
            );
        }
        let ly = T + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{0}" y1="{ly}" x2="{1}" y2="{ly}" stroke="{c}" stroke-width="2"/><text x="{2}" y="{3}">{4}</text>"#,
            W - R + 12.0,
            W - R + 32.0,
            W - R + 38.0,
            ly + 4.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
