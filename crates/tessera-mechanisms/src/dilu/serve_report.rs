//! The report of `tessera repro dilu` part (b): runs every (policy, seed), aggregates mean
//! and [min–max] over seeds, and writes the `summary.json` entries (issue 13 item 8).

use std::fmt::Write as _;

use tessera_sim::SimReport;

use super::serve_repro::{
    run_serving, scenario_cluster, scenario_workload_with, MemorySetup, Scenario, SERVING_CLAIM,
};
use crate::experiment::{
    run_parallel, text_table, ExperimentArgs, ExperimentError, Figure, RunContext,
};

/// The figures of one run.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct RunFigures {
    seed: u64,
    served_rps: f64,
    goodput_rps: f64,
    slo_violation_rate: f64,
    training_vs_exclusive: Option<f64>,
    /// Per training job (workload order): iterations relative to dilu-exclusive.
    jobs_vs_exclusive: Vec<f64>,
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
    goodput_rps: f64,
    p99_latency_s: f64,
    mean_instances: f64,
}

fn figures(r: &SimReport, seed: u64) -> RunFigures {
    let mut f = raw_figures(r, seed);
    f.goodput_rps = f.services.iter().map(|x| x.goodput_rps).sum();
    f
}

fn raw_figures(r: &SimReport, seed: u64) -> RunFigures {
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
        goodput_rps: 0.0,
        slo_violation_rate: if requests > 0 {
            missed as f64 / requests as f64
        } else {
            0.0
        },
        training_vs_exclusive: None,
        jobs_vs_exclusive: Vec::new(),
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
                // Requests served within their SLO per second of the service's life:
                // unlike served RPS (queues are unbounded and drained after the run, so
                // every request is served in the end) it falls once capacity binds.
                goodput_rps: if x.served > 0 {
                    x.served_rps * x.served.saturating_sub(x.slo_violations) as f64
                        / x.served as f64
                } else {
                    0.0
                },
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

/// Runs every (policy, seed) at one scenario; returns per policy its runs' figures (the
/// exclusive reference of each seed is run whether listed or not).
fn run_scale(
    scenario: &Scenario,
    policies: &[String],
    seeds: &[u64],
    check: bool,
    ctx: &RunContext<'_>,
) -> Result<Vec<(String, Vec<RunFigures>)>, ExperimentError> {
    let cluster = scenario_cluster().map_err(|e| ExperimentError::Other(e.to_string()))?;
    let workload =
        scenario_workload_with(scenario).map_err(|e| ExperimentError::Other(e.to_string()))?;
    let mut cases: Vec<(String, u64)> = Vec::new();
    for p in policies
        .iter()
        .chain(std::iter::once(&"dilu-exclusive".to_string()))
    {
        for &s in seeds {
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
    for p in policies {
        let mut runs = Vec::new();
        for (_, s, r) in reports.iter().filter(|(q, _, _)| q == p) {
            let mut f = figures(r, *s);
            if let Some(base) = exclusive_done(*s) {
                f.jobs_vs_exclusive = r
                    .jobs
                    .iter()
                    .zip(&base)
                    .map(|(j, b)| {
                        if *b > 0.0 {
                            j.iterations_done / b
                        } else {
                            f64::NAN
                        }
                    })
                    .collect();
                let rel: Vec<f64> = f
                    .jobs_vs_exclusive
                    .iter()
                    .copied()
                    .filter(|x| x.is_finite())
                    .collect();
                if !rel.is_empty() {
                    f.training_vs_exclusive = Some(rel.iter().sum::<f64>() / rel.len() as f64);
                }
            }
            runs.push(f);
        }
        per_policy.push((p.clone(), runs));
    }
    Ok(per_policy)
}

fn fmt_err(e: std::fmt::Error) -> ExperimentError {
    ExperimentError::Other(e.to_string())
}

/// Mean over runs of `f(run) / f(exclusive run of the same seed)`, with min and max.
fn ratio_vs(
    runs: &[RunFigures],
    base: Option<&Vec<RunFigures>>,
    f: fn(&RunFigures) -> f64,
) -> (f64, f64, f64) {
    let Some(base) = base else {
        return (f64::NAN, f64::NAN, f64::NAN);
    };
    stats(runs.iter().filter_map(|r| {
        let b = base.iter().find(|x| x.seed == r.seed)?;
        let d = f(b);
        (d > 0.0).then(|| f(r) / d)
    }))
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
    let scales: Vec<f64> = args.list("load-scale")?;
    if scales.is_empty() {
        return Err(ExperimentError::param("load-scale", "", "no scale"));
    }
    for k in &scales {
        if !(k.is_finite() && *k > 0.0) {
            return Err(ExperimentError::param(
                "load-scale",
                &k.to_string(),
                "a positive number",
            ));
        }
    }
    let memory_name = args.get("serving-memory").unwrap_or("artifact").to_string();
    let memory = MemorySetup::from_name(&memory_name).ok_or_else(|| {
        ExperimentError::param("serving-memory", &memory_name, "artifact or small")
    })?;
    let check = args.flag("serving-check")?;

    let mut text = String::new();
    writeln!(
        text,
        "Part (b): 4 nodes x 4 A100-40GB; RoBERTa-large on bursty x10, BERT-base on periodic x10, LLaMA2-7B Poisson 3 req/s (all x load scale), beside training BERT (4 GPUs), RoBERTa-large (2), ResNet152 (2), LLaMA2-7B (4); device memory: {}; {} seed(s) {:?}, mean [min-max].\nServed rps counts every request (queues are unbounded and drained at the end), so it is the offered load; goodput = requests served within their SLO per second. Ratios are per seed against dilu-exclusive. Training: iterations done over the services' lifetime relative to dilu-exclusive, mean over the four jobs.",
        memory.name(),
        seeds.len(),
        seeds
    )
    .map_err(fmt_err)?;
    let mut scales_json = Vec::new();
    let mut sweep_rows = Vec::new();
    for &k in &scales {
        let scenario = Scenario {
            load_scale: k,
            memory,
        };
        let per_policy = run_scale(&scenario, &policies, &seeds, check, ctx)?;
        let runs_of = |p: &str| per_policy.iter().find(|(q, _)| q == p).map(|(_, r)| r);
        // The exclusive runs, whether listed or not, for the ratios.
        let excl_runs = match runs_of("dilu-exclusive") {
            Some(r) => r.clone(),
            None => run_scale(
                &scenario,
                &["dilu-exclusive".to_string()],
                &seeds,
                check,
                ctx,
            )?
            .into_iter()
            .next()
            .map(|(_, r)| r)
            .unwrap_or_default(),
        };
        writeln!(text, "\n== load scale {k} ==").map_err(fmt_err)?;
        let rows: Vec<Vec<String>> = per_policy
            .iter()
            .map(|(p, runs)| {
                vec![
                    p.clone(),
                    cell(stats(runs.iter().map(|r| r.served_rps)), 1.0, 1),
                    cell(stats(runs.iter().map(|r| r.goodput_rps)), 1.0, 1),
                    cell(ratio_vs(runs, Some(&excl_runs), |r| r.goodput_rps), 1.0, 2),
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
                "goodput rps",
                "goodput vs excl",
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
            for (i, s) in first.services.iter().enumerate() {
                let of = |f: fn(&ServiceFigures) -> f64| {
                    stats(runs.iter().filter_map(|r| r.services.get(i)).map(f))
                };
                rows.push(vec![
                    p.clone(),
                    s.service.clone(),
                    cell(of(|x| x.slo_violation_rate), 100.0, 1),
                    cell(of(|x| x.p99_latency_s), 1000.0, 0),
                    cell(of(|x| x.served_rps), 1.0, 2),
                    cell(of(|x| x.goodput_rps), 1.0, 2),
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
                "goodput rps",
                "mean instances",
            ],
            &rows,
        ));
        // Which training job loses what, against exclusive.
        let job_names: Vec<String> = scenario_workload_with(&scenario)
            .map(|w| w.jobs().iter().map(|j| j.name.to_string()).collect())
            .unwrap_or_default();
        let mut rows = Vec::new();
        for (p, runs) in &per_policy {
            let mut row = vec![p.clone()];
            for j in 0..job_names.len() {
                row.push(cell(
                    stats(
                        runs.iter()
                            .filter_map(|r| r.jobs_vs_exclusive.get(j).copied())
                            .filter(|x| x.is_finite()),
                    ),
                    1.0,
                    3,
                ));
            }
            rows.push(row);
        }
        let mut head = vec!["training vs excl"];
        head.extend(job_names.iter().map(String::as_str));
        text.push('\n');
        text.push_str(&text_table(&head, &rows));
        for (p, runs) in &per_policy {
            if p == "dilu-exclusive" {
                continue;
            }
            let g = ratio_vs(runs, Some(&excl_runs), |r| r.goodput_rps);
            let v = ratio_vs(runs, Some(&excl_runs), |r| r.slo_violation_rate);
            sweep_rows.push(vec![
                format!("{k}"),
                p.clone(),
                cell(g, 1.0, 2),
                cell(
                    stats(runs.iter().filter_map(|r| r.training_vs_exclusive)),
                    1.0,
                    3,
                ),
                cell(v, 1.0, 2),
            ]);
        }
        for base in ["static-shares", "dilu-no-vertical", "dilu-exclusive"] {
            let (Some(d), Some(b)) = (runs_of("dilu"), runs_of(base)) else {
                continue;
            };
            let m = |runs: &Vec<RunFigures>, f: fn(&RunFigures) -> f64| stats(runs.iter().map(f)).0;
            let (dv, bv) = (
                m(d, |r| r.slo_violation_rate),
                m(b, |r| r.slo_violation_rate),
            );
            if bv > 0.0 {
                writeln!(
                    text,
                    "dilu vs {base}: {:+.1}% SLO violations, {:.2}x goodput, {:+.1}% mean active GPUs",
                    100.0 * (dv / bv - 1.0),
                    m(d, |r| r.goodput_rps) / m(b, |r| r.goodput_rps),
                    100.0 * (m(d, |r| r.mean_active_gpus) / m(b, |r| r.mean_active_gpus) - 1.0)
                )
                .map_err(fmt_err)?;
            }
        }
        scales_json.push(serde_json::json!({
            "load_scale": k,
            "policies": policies_json(&per_policy, &excl_runs),
        }));
    }
    if scales.len() > 1 || !sweep_rows.is_empty() {
        writeln!(
            text,
            "\nAgainst dilu-exclusive at each load scale (per seed, mean [min-max]):"
        )
        .map_err(fmt_err)?;
        text.push_str(&text_table(
            &[
                "load scale",
                "policy",
                "goodput / excl",
                "training / excl",
                "SLO viol / excl",
            ],
            &sweep_rows,
        ));
    }
    writeln!(text, "published: {SERVING_CLAIM}").map_err(fmt_err)?;

    // The first scale's policies stay at `policies` (the contract of issue 13 item 8).
    let first = scales_json
        .first()
        .and_then(|x| x.get("policies").cloned())
        .unwrap_or(serde_json::Value::Null);
    let summary = serde_json::json!({
        "part": "serving",
        "published": SERVING_CLAIM,
        "seeds": seeds,
        "memory": memory.name(),
        "load_scale": scales.first(),
        "policies": first,
        "load_scales": scales_json,
    });
    Ok((text, summary, Vec::new()))
}

fn policies_json(
    per_policy: &[(String, Vec<RunFigures>)],
    excl: &[RunFigures],
) -> serde_json::Value {
    let excl = excl.to_vec();
    let list: Vec<serde_json::Value> = per_policy
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
                                "goodput_rps": of(|x| x.goodput_rps),
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
                "goodput_rps": json_stats(stats(runs.iter().map(|r| r.goodput_rps))),
                "goodput_vs_exclusive": json_stats(ratio_vs(runs, Some(&excl), |r| r.goodput_rps)),
                "slo_violation_rate": json_stats(stats(runs.iter().map(|r| r.slo_violation_rate))),
                "training_vs_exclusive": json_stats(stats(runs.iter().filter_map(|r| r.training_vs_exclusive))),
                "services": services,
                "runs": runs,
            })
        })
        .collect();
    serde_json::Value::Array(list)
}
