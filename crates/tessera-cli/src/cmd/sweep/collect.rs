//! `tessera sweep collect DIR`: one `results.csv` row per run × policy (parameters as
//! columns), `results.json` with the same rows plus failures, and plots under `DIR/plots/`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use super::exec::{read_plan, run_dir, run_state, write_atomic, RunState};
use super::slurm::read_error;
use super::spec::{value_text, Plan, PlannedRun};
use super::{CollectArgs, PlotFormat};

const DEFAULT_METRICS: &[&str] = &["avg_jct_s", "p99_jct_s", "makespan_s"];

/// One row: a run's parameters, one policy, that policy's numeric results.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub run_id: String,
    /// Axis values of the run.
    pub point: BTreeMap<String, String>,
    pub policy: String,
    pub metrics: BTreeMap<String, f64>,
}

#[derive(Debug, Serialize)]
struct Failure {
    run_id: String,
    index: usize,
    point: BTreeMap<String, String>,
    error: String,
}

#[derive(Debug, Serialize)]
struct Results<'a> {
    sweep: &'a str,
    axes: Vec<&'a str>,
    runs: usize,
    rows: &'a [Row],
    failed: Vec<Failure>,
    missing: Vec<String>,
}

fn point_map(run: &PlannedRun) -> BTreeMap<String, String> {
    run.point
        .iter()
        .map(|(k, v)| (k.clone(), value_text(v)))
        .collect()
}

/// The per-policy results of a run's summary: `policies` (simulate), else `entries` (repro
/// experiments), else the first list of objects in the document.
fn result_rows(doc: &Value) -> Option<&Vec<Value>> {
    let is_rows = |v: &&Vec<Value>| v.iter().all(Value::is_object);
    doc["policies"]
        .as_array()
        .or_else(|| doc["entries"].as_array())
        .filter(is_rows)
        .or_else(|| {
            doc.as_object()?
                .values()
                .filter_map(Value::as_array)
                .find(|a| !a.is_empty() && is_rows(a))
        })
}

/// Rows of the done runs in plan order, and the metric names in first-seen order.
pub fn gather(dir: &Path, plan: &Plan) -> Result<(Vec<Row>, Vec<String>)> {
    let mut rows = Vec::new();
    let mut metric_names: Vec<String> = Vec::new();
    for run in &plan.runs {
        if run_state(dir, &run.id) != RunState::Done {
            continue;
        }
        let path = run_dir(dir, &run.id).join("summary.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let doc: Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let policies =
            result_rows(&doc).with_context(|| format!("{}: no list of results", path.display()))?;
        for p in policies {
            let Some(obj) = p.as_object() else { continue };
            let policy = obj
                .get("policy")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let mut metrics = BTreeMap::new();
            for (k, v) in obj {
                if let Some(x) = v.as_f64() {
                    if !metric_names.iter().any(|m| m == k) {
                        metric_names.push(k.clone());
                    }
                    metrics.insert(k.clone(), x);
                }
            }
            rows.push(Row {
                run_id: run.id.clone(),
                point: point_map(run),
                policy,
                metrics,
            });
        }
    }
    // The figures people look for first, then the rest by name.
    metric_names.sort_by_key(|m| {
        (
            PREFERRED_ORDER
                .iter()
                .position(|p| p == m)
                .unwrap_or(PREFERRED_ORDER.len()),
            m.clone(),
        )
    });
    Ok((rows, metric_names))
}

const PREFERRED_ORDER: &[&str] = &[
    "jobs",
    "window_jobs",
    "finished",
    "rejected",
    "unfinished",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "makespan_s",
    "avg_queue_s",
    "gpu_util",
    "cpu_util",
    "mem_util",
    "preemptions",
];

pub fn collect(args: &CollectArgs) -> Result<()> {
    let dir = &args.dir;
    let mut plan = read_plan(dir)?;
    for item in &args.cdf_at {
        let Some((axis, value)) = item.split_once('=') else {
            bail!("--cdf-at {item:?}: expected AXIS=VALUE");
        };
        let Some(a) = plan.spec.axes.iter().find(|a| a.name == axis) else {
            let names: Vec<&str> = plan.spec.axes.iter().map(|a| a.name.as_str()).collect();
            bail!(
                "--cdf-at: {axis} is not an axis (axes: {})",
                names.join(", ")
            );
        };
        let Some(v) = a.values.iter().find(|v| value_text(v) == value) else {
            let values: Vec<String> = a.values.iter().map(value_text).collect();
            bail!(
                "--cdf-at: axis {axis} has no value {value} (values: {})",
                values.join(", ")
            );
        };
        let v = v.clone();
        plan.spec
            .outputs
            .cdf_at
            .get_or_insert_with(BTreeMap::new)
            .insert(axis.to_string(), v);
    }
    let (rows, metric_names) = gather(dir, &plan)?;
    let axes: Vec<&str> = plan
        .spec
        .axes
        .iter()
        .map(|a| a.name.as_str())
        .filter(|a| *a != "policy")
        .collect();

    let mut failed = Vec::new();
    let mut missing = Vec::new();
    for run in &plan.runs {
        match run_state(dir, &run.id) {
            RunState::Done => {}
            RunState::Failed => failed.push(Failure {
                run_id: run.id.clone(),
                index: run.index,
                point: point_map(run),
                error: read_error(dir, &run.id),
            }),
            RunState::Missing => missing.push(run.id.clone()),
        }
    }

    let mut w = csv::Writer::from_writer(Vec::new());
    let header: Vec<&str> = ["run_id"]
        .into_iter()
        .chain(axes.iter().copied())
        .chain(["policy"])
        .chain(metric_names.iter().map(String::as_str))
        .collect();
    w.write_record(&header)?;
    for r in &rows {
        let mut rec: Vec<String> = vec![r.run_id.clone()];
        rec.extend(
            axes.iter()
                .map(|a| r.point.get(*a).cloned().unwrap_or_default()),
        );
        rec.push(r.policy.clone());
        rec.extend(
            metric_names
                .iter()
                .map(|m| r.metrics.get(m).map(|v| format!("{v}")).unwrap_or_default()),
        );
        w.write_record(&rec)?;
    }
    let csv_bytes = w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?;
    write_atomic(&dir.join("results.csv"), &csv_bytes)?;
    let results = Results {
        sweep: &plan.spec.name,
        axes: plan.spec.axes.iter().map(|a| a.name.as_str()).collect(),
        runs: plan.runs.len(),
        rows: &rows,
        failed,
        missing,
    };
    write_atomic(
        &dir.join("results.json"),
        &serde_json::to_vec_pretty(&results)?,
    )?;

    let mut plots = Vec::new();
    if !args.no_plots {
        plots = draw_plots(dir, &plan, &rows, args.plot_format)?;
    }
    eprintln!(
        "{}: {} of {} runs collected ({} rows), {} failed, {} missing -> {}/results.csv, results.json{}",
        tessera_trace::printable(&plan.spec.name),
        plan.runs.len() - results.failed.len() - results.missing.len(),
        plan.runs.len(),
        rows.len(),
        results.failed.len(),
        results.missing.len(),
        dir.display(),
        if plots.is_empty() {
            String::new()
        } else {
            format!(", {} plots in plots/", plots.len())
        }
    );
    for f in &results.failed {
        eprintln!(
            "  failed {} (index {}): {}",
            f.run_id,
            f.index,
            tessera_trace::printable(&f.error)
        );
    }
    Ok(())
}

/// A number inside an axis value: `poisson:120` → 120, `300` → 300.
fn numeric(v: &str) -> Option<f64> {
    v.rsplit(':')
        .next()
        .and_then(|s| s.trim().parse::<f64>().ok())
}

/// One line of a sweep chart: (x, y) points with an optional spread per point.
struct Series {
    name: String,
    points: Vec<Point>,
}

#[derive(Clone, Copy)]
struct Point {
    x: f64,
    y: f64,
    /// Spread (low, high) around `y` (mean ± sd over seeds), drawn as a band.
    err: Option<(f64, f64)>,
}

/// A sweep chart, drawn by the project's plotting module (`crate::plot`).
struct Chart {
    title: String,
    x_label: String,
    y_label: String,
    series: Vec<Series>,
    /// Names of categorical x values (plotted at positions 0, 1, 2, …).
    x_categories: Option<Vec<String>>,
    log_x: bool,
    /// Steps without markers (CDFs).
    steps: bool,
}

/// Writes `chart` as `plots/STEM.svg` or `.png` (atomically); returns the file name.
fn write_chart(dir: &Path, stem: &str, chart: &Chart, format: PlotFormat) -> Result<String> {
    let x_label = match &chart.x_categories {
        Some(names) => {
            let legend: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{i} = {n}"))
                .collect();
            format!("{} ({})", chart.x_label, legend.join(", "))
        }
        None => chart.x_label.clone(),
    };
    let panel = crate::plot::LineChart {
        title: String::new(),
        x_label,
        y_label: chart.y_label.clone(),
        log_x: chart.log_x,
        step: chart.steps,
        markers: !chart.steps,
        series: chart
            .series
            .iter()
            .map(|s| crate::plot::Series {
                label: s.name.clone(),
                points: s.points.iter().map(|p| (p.x, p.y)).collect(),
                band: s
                    .points
                    .iter()
                    .filter_map(|p| p.err.map(|(lo, hi)| (p.x, lo, hi)))
                    .collect(),
                style: None,
            })
            .collect(),
    };
    // Drawn into a private directory, then renamed: a reader never sees half a plot.
    let tmp = dir
        .join("plots")
        .join(format!(".tmp-{}-{stem}", std::process::id()));
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let drawn = crate::plot::line_figure(&tmp.join(stem), format, &chart.title, &[panel], 1)?;
    let name = format!("{stem}.{}", format.ext());
    let target = dir.join("plots").join(&name);
    std::fs::rename(&drawn, &target)
        .with_context(|| format!("renaming into {}", target.display()))?;
    let _ = std::fs::remove_dir(&tmp);
    Ok(name)
}

fn draw_plots(dir: &Path, plan: &Plan, rows: &[Row], format: PlotFormat) -> Result<Vec<String>> {
    let spec = &plan.spec;
    let plots_dir = dir.join("plots");
    std::fs::create_dir_all(&plots_dir)
        .with_context(|| format!("creating {}", plots_dir.display()))?;
    let mut written = Vec::new();
    let x_axis = spec.outputs.x.clone().or_else(|| {
        spec.axes
            .iter()
            .find(|a| a.name != "policy" && a.name != "seed")
            .map(|a| a.name.clone())
    });
    let metrics: Vec<String> = spec
        .outputs
        .metrics
        .clone()
        .unwrap_or_else(|| DEFAULT_METRICS.iter().map(|s| s.to_string()).collect());
    let policies: Vec<String> = {
        let mut p: Vec<String> = Vec::new();
        for r in rows {
            if !p.contains(&r.policy) {
                p.push(r.policy.clone());
            }
        }
        p
    };
    // Axes that split plots: everything but x, seed (aggregated) and policy (the lines).
    let split: Vec<&str> = spec
        .axes
        .iter()
        .map(|a| a.name.as_str())
        .filter(|a| Some(*a) != x_axis.as_deref() && *a != "seed" && *a != "policy")
        .collect();
    if let Some(x) = &x_axis {
        let values: Vec<String> = spec
            .axes
            .iter()
            .find(|a| &a.name == x)
            .map(|a| a.values.iter().map(value_text).collect())
            .unwrap_or_default();
        let all_numeric = values.iter().all(|v| numeric(v).is_some());
        let position = |v: &str| -> f64 {
            if all_numeric {
                numeric(v).unwrap_or(0.0)
            } else {
                values.iter().position(|u| u == v).unwrap_or(0) as f64
            }
        };
        let mut groups: BTreeMap<Vec<String>, Vec<&Row>> = BTreeMap::new();
        for r in rows {
            let key = split
                .iter()
                .map(|a| r.point.get(*a).cloned().unwrap_or_default())
                .collect();
            groups.entry(key).or_default().push(r);
        }
        for (key, group) in &groups {
            let suffix: String = split
                .iter()
                .zip(key)
                .map(|(a, v)| format!("-{a}={}", file_safe(v)))
                .collect();
            let subtitle: Vec<String> = split
                .iter()
                .zip(key)
                .map(|(a, v)| format!("{a} {v}"))
                .collect();
            for metric in &metrics {
                let mut series = Vec::new();
                for policy in &policies {
                    let mut by_x: BTreeMap<String, Vec<f64>> = BTreeMap::new();
                    for r in group.iter().filter(|r| &r.policy == policy) {
                        if let (Some(xv), Some(y)) = (r.point.get(x), r.metrics.get(metric)) {
                            by_x.entry(xv.clone()).or_default().push(*y);
                        }
                    }
                    let (_, scale) = metric_axis(metric);
                    let mut points: Vec<Point> = by_x
                        .iter()
                        .map(|(xv, ys)| {
                            let (mean, sd) = mean_sd(ys);
                            let (mean, sd) = (mean * scale, sd * scale);
                            Point {
                                x: position(xv),
                                y: mean,
                                err: (ys.len() > 1).then_some((mean - sd, mean + sd)),
                            }
                        })
                        .collect();
                    points.sort_by(|a, b| a.x.total_cmp(&b.x));
                    if !points.is_empty() {
                        series.push(Series {
                            name: policy.clone(),
                            points,
                        });
                    }
                }
                if series.is_empty() {
                    continue;
                }
                let seeds = spec.axes.iter().any(|a| a.name == "seed");
                let (y_label, _) = metric_axis(metric);
                let x_label = axis_label(x);
                let chart = Chart {
                    title: format!(
                        "{} vs {}{}{}",
                        y_label.split(" (").next().unwrap_or(&y_label),
                        x_label.split(" (").next().unwrap_or(&x_label),
                        if subtitle.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", subtitle.join(", "))
                        },
                        if seeds { ", mean ± sd over seeds" } else { "" }
                    ),
                    x_label,
                    y_label,
                    series,
                    x_categories: (!all_numeric).then(|| values.clone()),
                    log_x: false,
                    steps: false,
                };
                let stem = format!("{metric}-vs-{}{suffix}", file_safe(x));
                written.push(write_chart(dir, &stem, &chart, format)?);
            }
        }
    }
    if let Some(name) = draw_cdf(dir, plan, x_axis.as_deref(), format)? {
        written.push(name);
    }
    Ok(written)
}

/// A metric's axis label with its unit, and the factor from `results.csv`'s value (times
/// in seconds there, hours on a plot; fractions as percentages).
fn metric_axis(metric: &str) -> (String, f64) {
    let known = match metric {
        "avg_jct_s" => Some("average JCT"),
        "p50_jct_s" => Some("median JCT"),
        "p95_jct_s" => Some("p95 JCT"),
        "p99_jct_s" => Some("p99 JCT"),
        "makespan_s" => Some("makespan"),
        "avg_queue_s" => Some("average queueing delay"),
        _ => None,
    };
    if let Some(name) = known {
        return (format!("{name} (hours)"), 1.0 / 3600.0);
    }
    let words = |m: &str| m.replace('_', " ");
    match metric {
        "gpu_util" => ("GPU utilisation, GPU-equivalents (%)".into(), 100.0),
        "whole_gpu_util" => ("GPU utilisation, whole GPUs (%)".into(), 100.0),
        "cpu_util" => ("CPU utilisation (%)".into(), 100.0),
        "mem_util" => ("memory utilisation (%)".into(), 100.0),
        "wall_s" => ("wall time (seconds)".into(), 1.0),
        m if m.ends_with("_s") => (
            format!("{} (hours)", words(m.trim_end_matches("_s"))),
            1.0 / 3600.0,
        ),
        m => (words(m), 1.0),
    }
}

/// A sweep axis's label with its unit.
fn axis_label(axis: &str) -> String {
    match axis {
        "load" => "load (jobs/h)".into(),
        "round" => "round length (seconds)".into(),
        "mtbf" => "mean time between failures".into(),
        "mttr" => "mean time to repair".into(),
        "checkpoint-interval" => "checkpoint interval".into(),
        a => a.replace(['_', '-'], " "),
    }
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn mean_sd(ys: &[f64]) -> (f64, f64) {
    let n = ys.len().max(1) as f64;
    let mean = ys.iter().sum::<f64>() / n;
    if ys.len() < 2 {
        return (mean, 0.0);
    }
    let var = ys.iter().map(|y| (y - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// JCT CDF per policy at one point (all seeds pooled), from the runs' jobs.csv.
fn draw_cdf(
    dir: &Path,
    plan: &Plan,
    x_axis: Option<&str>,
    format: PlotFormat,
) -> Result<Option<String>> {
    let spec = &plan.spec;
    let mut at: BTreeMap<String, String> = BTreeMap::new();
    for a in &spec.axes {
        if a.name == "seed" || a.name == "policy" {
            continue;
        }
        let chosen = spec
            .outputs
            .cdf_at
            .as_ref()
            .and_then(|m| m.get(&a.name))
            .map(value_text)
            .or_else(|| {
                if Some(a.name.as_str()) == x_axis {
                    a.values.last().map(value_text)
                } else {
                    a.values.first().map(value_text)
                }
            });
        if let Some(v) = chosen {
            at.insert(a.name.clone(), v);
        }
    }
    let mut jcts: Vec<(String, Vec<f64>)> = Vec::new();
    for run in &plan.runs {
        let point = point_map(run);
        if at.iter().any(|(k, v)| point.get(k) != Some(v)) {
            continue;
        }
        let path = run_dir(dir, &run.id).join("jobs.csv");
        if run_state(dir, &run.id) != RunState::Done || !path.is_file() {
            continue;
        }
        let mut r =
            csv::Reader::from_path(&path).with_context(|| format!("reading {}", path.display()))?;
        let headers = r.headers()?.clone();
        let (Some(pi), Some(ji)) = (
            headers.iter().position(|h| h == "policy"),
            headers.iter().position(|h| h == "jct_s"),
        ) else {
            continue;
        };
        for rec in r.records() {
            let rec = rec.with_context(|| format!("reading {}", path.display()))?;
            let (Some(p), Some(Ok(j))) = (rec.get(pi), rec.get(ji).map(str::parse::<f64>)) else {
                continue;
            };
            match jcts.iter_mut().find(|(name, _)| name == p) {
                Some((_, v)) => v.push(j),
                None => jcts.push((p.to_string(), vec![j])),
            }
        }
    }
    if jcts.is_empty() {
        return Ok(None);
    }
    let mut min_pos = f64::MAX;
    let mut max = 0f64;
    let series: Vec<Series> = jcts
        .into_iter()
        .map(|(name, mut v)| {
            v.sort_by(f64::total_cmp);
            let n = v.len() as f64;
            for x in &v {
                if *x > 0.0 {
                    min_pos = min_pos.min(*x);
                }
                max = max.max(*x);
            }
            // At most ~2,000 steps per line: finer than a plot can show, and files stay small.
            let every = (v.len() / 2000).max(1);
            let points = v
                .iter()
                .enumerate()
                .filter(|(i, _)| i % every == 0 || *i + 1 == v.len())
                .map(|(i, x)| Point {
                    x: *x / 3600.0,
                    y: (i + 1) as f64 / n,
                    err: None,
                })
                .collect();
            Series { name, points }
        })
        .collect();
    let where_: Vec<String> = at.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let chart = Chart {
        title: format!(
            "JCT CDF{}",
            if where_.is_empty() {
                String::new()
            } else {
                format!(" at {}", where_.join(", "))
            }
        ),
        x_label: "job completion time (hours)".into(),
        y_label: "fraction of jobs".into(),
        series,
        x_categories: None,
        // JCTs span orders of magnitude: a log axis shows the short jobs too.
        log_x: min_pos < f64::MAX && max / min_pos > 100.0,
        steps: true,
    };
    Ok(Some(write_chart(dir, "jct-cdf", &chart, format)?))
}
