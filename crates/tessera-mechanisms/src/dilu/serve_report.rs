//! The report of `tessera repro dilu` part (b): runs every (policy, seed), aggregates mean
//! and [min–max] over seeds, and writes the `summary.json` entries (issue 13 item 8).

use std::fmt::Write as _;

use tessera_sim::SimReport;

use super::serve_repro::{run_serving, scenario_cluster, scenario_workload, SERVING_CLAIM};
use crate::experiment::{
    run_parallel, text_table, ExperimentArgs, ExperimentError, Figure, RunContext,
};

/// The figures of one run.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct RunFigures {
    seed: u64,
    served_rps: f64,
    slo_violation_rate: f64,
    training_vs_exclusive: Option<f64>,
    peak_active_gpus: f64,
    mean_active_gpus: f64,
    mean_sm_frag: f64,
    mean_mem_frag: f64,
    services: Vec<ServiceFigures>,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
struct ServiceFigures {
    service: String,
    slo_violation_rate: f64,
    served_rps: f64,
    p99_latency_s: f64,
    mean_instances: f64,
}

fn figures(r: &SimReport, seed: u64) -> RunFigures {
    let s = &r.summary;
    let requests: u64 = s.services.iter().map(|x| x.requests).sum();
    let missed: u64 = s
        .services
        .iter()
        .map(|x| x.slo_violations + x.dropped)
        .sum();
    RunFigures {
        seed,
        served_rps: s.services.iter().map(|x| x.served_rps).sum(),
        slo_violation_rate: if requests > 0 {
            missed as f64 / requests as f64
        } else {
            0.0
        },
        training_vs_exclusive: None,
        peak_active_gpus: f64::from(s.peak_active_gpus),
        mean_active_gpus: s.mean_active_gpus,
        mean_sm_frag: s.mean_sm_frag,
        mean_mem_frag: s.mean_mem_frag,
        services: s
            .services
            .iter()
            .map(|x| ServiceFigures {
                service: x.service.clone(),
                slo_violation_rate: x.slo_violation_rate,
                served_rps: x.served_rps,
                p99_latency_s: x.p99_latency_s,
                mean_instances: x.mean_instances,
            })
            .collect(),
    }
}

/// Mean, min and max.
fn stats(xs: impl Iterator<Item = f64>) -> (f64, f64, f64) {
    let v: Vec<f64> = xs.collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, lo, hi)
}

fn cell(x: (f64, f64, f64), scale: f64, digits: usize) -> String {
    if x.0.is_nan() {
        return "-".into();
    }
    format!(
        "{:.d$} [{:.d$}-{:.d$}]",
        x.0 * scale,
        x.1 * scale,
        x.2 * scale,
        d = digits
    )
}

fn json_stats(x: (f64, f64, f64)) -> serde_json::Value {
    if x.0.is_nan() {
        serde_json::Value::Null
    } else {
        serde_json::json!({ "mean": x.0, "min": x.1, "max": x.2 })
    }
}

/// Runs part (b); returns its text, its `summary.json` part and its figures (none).
pub(super) fn run(
    args: &ExperimentArgs,
    ctx: &RunContext<'_>,
) -> Result<(String, serde_json::Value, Vec<Figure>), ExperimentError> {
    let seeds: Vec<u64> = args.list("serving-seeds")?;
    if seeds.is_empty() {
        return Err(ExperimentError::param("serving-seeds", "", "no seed"));
    }
    let policies: Vec<String> = args.list("serving-policies")?;
    for p in &policies {
        if super::policy::DiluServe::by_name(p).is_none() {
            return Err(ExperimentError::param(
                "serving-policies",
                p,
                "dilu-exclusive, static-shares, dilu-no-vertical or dilu",
            ));
        }
    }
    let check = args.flag("serving-check")?;
    let cluster = scenario_cluster().map_err(|e| ExperimentError::Other(e.to_string()))?;
    let workload = scenario_workload().map_err(|e| ExperimentError::Other(e.to_string()))?;
    let mut cases: Vec<(String, u64)> = Vec::new();
    // The exclusive reference is run for every seed, listed or not, for training vs exclusive.
    for p in policies
        .iter()
        .chain(std::iter::once(&"dilu-exclusive".to_string()))
    {
        for &s in &seeds {
            if !cases.contains(&(p.clone(), s)) {
                cases.push((p.clone(), s));
            }
        }
    }
    let results = run_parallel(
        &cases,
        ctx.threads,
        |_| 1.0,
        |(p, s)| run_serving(&cluster, &workload, p, *s, check),
        ctx.progress,
    )?;
    let mut reports = Vec::new();
    for ((p, s), r) in cases.iter().zip(results) {
        let r = r.map_err(|e| ExperimentError::Other(e.to_string()))?;
        reports.push((p.clone(), *s, r));
    }
    let exclusive_done = |seed: u64| -> Option<Vec<f64>> {
        reports
            .iter()
            .find(|(p, s, _)| p == "dilu-exclusive" && *s == seed)
            .map(|(_, _, r)| r.jobs.iter().map(|j| j.iterations_done).collect())
    };
    let mut per_policy: Vec<(String, Vec<RunFigures>)> = Vec::new();
    for p in &policies {
        let mut runs = Vec::new();
        for (_, s, r) in reports.iter().filter(|(q, _, _)| q == p) {
            let mut f = figures(r, *s);
            if let Some(base) = exclusive_done(*s) {
                let rel: Vec<f64> = r
                    .jobs
                    .iter()
                    .zip(&base)
                    .filter(|(_, b)| **b > 0.0)
                    .map(|(j, b)| j.iterations_done / b)
                    .collect();
                if !rel.is_empty() {
                    f.training_vs_exclusive = Some(rel.iter().sum::<f64>() / rel.len() as f64);
                }
            }
            runs.push(f);
        }
        per_policy.push((p.clone(), runs));
    }

    let mut text = String::new();
    writeln!(
        text,
        "Part (b): 4 nodes x 4 A100-40GB; RoBERTa-large on bursty x10, BERT-base on periodic x10, LLaMA2-7B Poisson 3 req/s, beside training BERT (4 GPUs), RoBERTa-large (2), ResNet152 (2), LLaMA2-7B (4); {} seed(s) {:?}, mean [min-max].\nTraining throughput: iterations done over the services' lifetime relative to dilu-exclusive (whole GPUs), mean over the four jobs.\n",
        seeds.len(),
        seeds
    )
    .map_err(|e| ExperimentError::Other(e.to_string()))?;
    let rows: Vec<Vec<String>> = per_policy
        .iter()
        .map(|(p, runs)| {
            vec![
                p.clone(),
                cell(stats(runs.iter().map(|r| r.served_rps)), 1.0, 1),
                cell(stats(runs.iter().map(|r| r.slo_violation_rate)), 100.0, 1),
                cell(
                    stats(runs.iter().filter_map(|r| r.training_vs_exclusive)),
                    1.0,
                    3,
                ),
                cell(stats(runs.iter().map(|r| r.peak_active_gpus)), 1.0, 0),
                cell(stats(runs.iter().map(|r| r.mean_active_gpus)), 1.0, 2),
                cell(stats(runs.iter().map(|r| r.mean_sm_frag)), 1.0, 3),
                cell(stats(runs.iter().map(|r| r.mean_mem_frag)), 1.0, 3),
            ]
        })
        .collect();
    text.push_str(&text_table(
        &[
            "policy",
            "served rps",
            "SLO viol %",
            "training vs excl",
            "peak GPUs",
            "mean GPUs",
            "SM frag",
            "mem frag",
        ],
        &rows,
    ));
    let mut rows = Vec::new();
    for (p, runs) in &per_policy {
        let Some(first) = runs.first() else { continue };
        for (k, s) in first.services.iter().enumerate() {
            let of = |f: fn(&ServiceFigures) -> f64| {
                stats(runs.iter().filter_map(|r| r.services.get(k)).map(f))
            };
            rows.push(vec![
                p.clone(),
                s.service.clone(),
                cell(of(|x| x.slo_violation_rate), 100.0, 1),
                cell(of(|x| x.p99_latency_s), 1000.0, 0),
                cell(of(|x| x.served_rps), 1.0, 2),
                cell(of(|x| x.mean_instances), 1.0, 2),
            ]);
        }
    }
    text.push('\n');
    text.push_str(&text_table(
        &[
            "policy",
            "service",
            "SLO viol %",
            "p99 ms",
            "served rps",
            "mean instances",
        ],
        &rows,
    ));
    let mean_of = |p: &str, f: fn(&RunFigures) -> f64| {
        per_policy
            .iter()
            .find(|(q, _)| q == p)
            .map(|(_, runs)| stats(runs.iter().map(f)).0)
    };
    for base in ["static-shares", "dilu-no-vertical", "dilu-exclusive"] {
        if let (Some(d), Some(b)) = (
            mean_of("dilu", |r| r.slo_violation_rate),
            mean_of(base, |r| r.slo_violation_rate),
        ) {
            if b > 0.0 {
                writeln!(
                    text,
                    "dilu vs {base}: {:+.1}% SLO violations, {:+.1}% mean active GPUs",
                    100.0 * (d / b - 1.0),
                    100.0
                        * (mean_of("dilu", |r| r.mean_active_gpus).unwrap_or(f64::NAN)
                            / mean_of(base, |r| r.mean_active_gpus).unwrap_or(f64::NAN)
                            - 1.0)
                )
                .map_err(|e| ExperimentError::Other(e.to_string()))?;
            }
        }
    }
    writeln!(text, "published: {SERVING_CLAIM}")
        .map_err(|e| ExperimentError::Other(e.to_string()))?;

    let policies_json: Vec<serde_json::Value> = per_policy
        .iter()
        .map(|(p, runs)| {
            let services: Vec<serde_json::Value> = runs
                .first()
                .map(|first| {
                    first
                        .services
                        .iter()
                        .enumerate()
                        .map(|(k, s)| {
                            let of = |f: fn(&ServiceFigures) -> f64| {
                                stats(runs.iter().filter_map(|r| r.services.get(k)).map(f)).0
                            };
                            serde_json::json!({
                                "service": s.service,
                                "slo_violation_rate": of(|x| x.slo_violation_rate),
                                "served_rps": of(|x| x.served_rps),
                                "p99_latency_s": of(|x| x.p99_latency_s),
                                "mean_instances": of(|x| x.mean_instances),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            serde_json::json!({
                "policy": p,
                "peak_active_gpus": stats(runs.iter().map(|r| r.peak_active_gpus)).0,
                "mean_active_gpus": stats(runs.iter().map(|r| r.mean_active_gpus)).0,
                "mean_sm_frag": stats(runs.iter().map(|r| r.mean_sm_frag)).0,
                "mean_mem_frag": stats(runs.iter().map(|r| r.mean_mem_frag)).0,
                "served_rps": json_stats(stats(runs.iter().map(|r| r.served_rps))),
                "slo_violation_rate": json_stats(stats(runs.iter().map(|r| r.slo_violation_rate))),
                "training_vs_exclusive": json_stats(stats(runs.iter().filter_map(|r| r.training_vs_exclusive))),
                "services": services,
                "runs": runs,
            })
        })
        .collect();
    let summary = serde_json::json!({
        "part": "serving",
        "published": SERVING_CLAIM,
        "seeds": seeds,
        "policies": policies_json,
    });
    Ok((text, summary, Vec::new()))
}
