//! Plots written by `simulate --out`: each SVG parses and carries its title, axis labels, a
//! legend entry and a line per policy; `--plot-format png` writes PNGs; `--no-plots` none.

use super::{data, stderr, tessera};

/// Text of every `<text>` element, and the stroke colours of the thick (series) polylines.
pub(crate) fn svg_parts(path: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_string())
        .collect();
    let strokes = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke-width") == Some("2"))
        .filter_map(|n| n.attribute("stroke").map(str::to_string))
        .collect();
    (texts, strokes)
}

fn run_with_plots(extra: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut args: Vec<String> = [
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("small.csv"),
        "--policy",
        "fifo",
        "--policy",
        "srtf",
        "--policy",
        "las",
        "--out",
        &out.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = tessera(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    dir
}

#[test]
fn simulate_out_draws_three_svg_plots_with_every_policy() {
    let dir = run_with_plots(&[]);
    let out = dir.path().join("out");
    let policies = ["fifo", "srtf", "las"];
    // The first three palette colours, one per policy in order.
    let colours = ["#0072B2", "#D55E00", "#009E73"];

    let (texts, strokes) = svg_parts(&out.join("jct_cdf.svg"));
    for needle in [
        "JCT distribution per policy",
        "JCT (seconds, log scale)",
        "fraction of finished jobs",
    ] {
        assert!(
            texts.iter().any(|t| t == needle),
            "jct_cdf lacks {needle:?}: {texts:?}"
        );
    }
    for (p, c) in policies.iter().zip(colours) {
        assert!(texts.iter().any(|t| t == p), "jct_cdf legend lacks {p}");
        assert!(
            strokes.iter().any(|s| s.eq_ignore_ascii_case(c)),
            "no {c} line for {p}: {strokes:?}"
        );
    }
    // Log axis: decade labels, not float noise.
    assert!(texts.iter().any(|t| t == "100"), "{texts:?}");
    assert!(!texts.iter().any(|t| t.ends_with(".0")), "{texts:?}");

    let (texts, strokes) = svg_parts(&out.join("timeline.svg"));
    for needle in [
        "Busy GPUs",
        "Queue length",
        "time (hours)",
        "GPUs allocated",
        "jobs waiting",
    ] {
        assert!(
            texts.iter().any(|t| t == needle),
            "timeline lacks {needle:?}: {texts:?}"
        );
    }
    for c in colours {
        // One line per policy in each of the two panels.
        let n = strokes.iter().filter(|s| s.eq_ignore_ascii_case(c)).count();
        assert!(n >= 2, "{c} drawn {n} times: {strokes:?}");
    }

    let (texts, _) = svg_parts(&out.join("jct_bars.svg"));
    for needle in [
        "Speed-up over fifo (higher is better)",
        "average JCT",
        "p99 JCT",
        "fifo",
        "srtf",
        "las",
        "1.00",
    ] {
        assert!(
            texts.iter().any(|t| t == needle),
            "jct_bars lacks {needle:?}: {texts:?}"
        );
    }
    // The bars' value labels are speed-ups of summary.json's figures, as the table's
    // `vs first` (issue 41: the bars were ratios, the table speed-ups).
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let avg = |i: usize| summary["policies"][i]["avg_jct_s"].as_f64().unwrap();
    let srtf_ratio = format!("{:.2}", avg(0) / avg(1));
    assert!(
        texts.contains(&srtf_ratio),
        "no {srtf_ratio} label: {texts:?}"
    );
}

#[test]
fn plot_format_png_and_no_plots() {
    let dir = run_with_plots(&["--plot-format", "png"]);
    let out = dir.path().join("out");
    for name in ["jct_cdf.png", "timeline.png", "jct_bars.png"] {
        let bytes = std::fs::read(out.join(name)).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{name} is not a PNG"
        );
        assert!(bytes.len() > 5_000, "{name} is suspiciously small");
    }
    assert!(!out.join("jct_cdf.svg").exists());

    let dir = run_with_plots(&["--no-plots"]);
    let out = dir.path().join("out");
    assert!(out.join("summary.json").exists());
    let images: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".svg") || n.ends_with(".png")
        })
        .collect();
    assert!(images.is_empty(), "--no-plots wrote {images:?}");
}

/// The README promises that `jobs.csv`, `timeseries.csv` and the plots are the same bit for
/// bit for the same inputs and seed (only wall times differ, in the table and summary.json).
#[test]
fn deterministic_outputs_are_byte_identical() {
    let a = run_with_plots(&[]);
    let b = run_with_plots(&[]);
    for name in [
        "jobs.csv",
        "timeseries.csv",
        "jct_cdf.svg",
        "timeline.svg",
        "jct_bars.svg",
    ] {
        let x = std::fs::read(a.path().join("out").join(name)).unwrap();
        let y = std::fs::read(b.path().join("out").join(name)).unwrap();
        assert!(x == y, "{name} differs between two identical runs");
    }
}

/// Issue 41: a policy that finished no job has no speed-up: the bars say "none" (they drew
/// 0.00, as if infinitely better) and so does the table.
#[test]
fn a_policy_without_a_finished_job_has_no_speedup() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("small.csv"),
        "--policy",
        "fifo,las",
        "--horizon",
        "5",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    let fifo = table.lines().find(|l| l.starts_with("fifo")).unwrap();
    assert!(fifo.contains("none"), "{table}");
    let (texts, _) = svg_parts(&out.join("jct_bars.svg"));
    assert!(texts.iter().any(|t| t == "none"), "{texts:?}");
    assert!(!texts.iter().any(|t| t == "0.00"), "{texts:?}");
}

/// Issue 41: the timeline's legend covered data. Every point of every line lies below the
/// legend box (SVG y grows downwards), and the step lines carry markers (polygons).
#[test]
fn the_timeline_legend_covers_no_data_and_lines_have_markers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = tessera(&[
        "simulate",
        "--cluster",
        "builtin:miso-a100x8",
        "--trace",
        "builtin:miso-100",
        "--policy",
        "mps,miso,nopart",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(out.join("timeline.svg")).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let num = |n: &roxmltree::Node, a: &str| n.attribute(a).unwrap().parse::<f64>().unwrap();
    // The legend boxes, one per panel, top to bottom.
    let mut legends: Vec<(f64, f64, f64)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute("stroke") == Some("#BBBBBB"))
        .map(|n| {
            (
                num(&n, "y"),
                num(&n, "y") + num(&n, "height"),
                num(&n, "x") + num(&n, "width"),
            )
        })
        .collect();
    legends.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(legends.len(), 2, "{legends:?}");
    let mut lines = 0;
    for n in doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke-width") == Some("2"))
    {
        let points: Vec<(f64, f64)> = n
            .attribute("points")
            .unwrap()
            .split_whitespace()
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        // Which panel: the last legend above the line's first point.
        let Some(&(top, bottom, right)) = legends.iter().rev().find(|l| l.0 <= points[0].1) else {
            continue;
        };
        // Legend keys are short lines inside the box itself.
        if points.iter().all(|&(_, y)| y >= top && y <= bottom) {
            continue;
        }
        lines += 1;
        for &(x, y) in &points {
            assert!(
                x > right || y >= bottom,
                "point ({x}, {y}) under the legend (bottom {bottom}, right {right})"
            );
        }
    }
    assert_eq!(lines, 6, "three policies in two panels");
    let markers = doc
        .descendants()
        .filter(|n| n.has_tag_name("polygon"))
        .count();
    assert!(markers >= 6 * 4, "step lines carry markers: {markers}");
}
