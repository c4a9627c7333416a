//! `tessera repro tessera`: the mixed world (`builtin:mixed` cluster, [`MixedWorkload`])
//! over several seeds and loads, under the default run's policies and every registered
//! `tessera-no-<mechanism>` ablation, each run as `tessera simulate` runs it without
//! `--policy` ([`super::world_run::run_policy`]: the auto truth, each policy's serving setup,
//! the workload relaxed to what it honours, requests of services it does not serve counted
//! as dropped). Reports per load and policy the mean and the min–max over seeds of the
//! average and p99 JCT, the SLO goodput and the GPUs used, and plots them against the load.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tessera_model::{Cluster, GpuCatalog};

use super::world::{cluster_yaml, DEFAULT_POLICIES, NAME};
use super::world_run::{auto_truth, run_policy};
use super::world_workload::MixedWorkload;
use crate::experiment::{
    run_parallel, text_table, Experiment, ExperimentArgs, ExperimentError, Figure, Param,
    ReproOutput, RunContext, Series,
};

const PARAMS: &[Param] = &[
    Param {
        name: "seeds",
        default: "1,2,3,4,5",
        help: "Workload seeds (comma-separated); each also seeds profiling and the services' arrivals",
    },
    Param {
        name: "loads",
        default: "40,60",
        help: "Training arrival rates, jobs per hour (comma-separated)",
    },
    Param {
        name: "jobs",
        default: "240",
        help: "Training jobs per workload",
    },
    Param {
        name: "policies",
        default: "",
        help: "Policies (comma-separated); default: the default run's (fifo, las, las+tune, miso, crius, sia, dilu, tessera) and every registered tessera-no-* ablation; unregistered defaults are left out with a note",
    },
    Param {
        name: "quick",
        default: "false",
        help: "A quick look: the first two seeds, 60 jobs, services of 30 minutes",
    },
];

/// Most training jobs per workload (each run holds its workload in memory; the default run
/// uses 240).
pub const MAX_JOBS: usize = 100_000;

/// `tessera repro tessera`.
#[derive(Clone, Copy, Debug)]
pub struct TesseraRepro;

/// One run's figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunFigures {
    /// Arrival rate, jobs per hour.
    pub load: f64,
    /// Seed.
    pub seed: u64,
    /// Policy.
    pub policy: String,
    /// Jobs in the workload, finished, rejected (the policy cannot run them), unfinished.
    pub jobs: usize,
    /// Jobs finished.
    pub finished: usize,
    /// Jobs rejected.
    pub rejected: usize,
    /// Jobs unfinished.
    pub unfinished: usize,
    /// Average JCT of finished jobs, seconds.
    pub avg_jct_s: f64,
    /// 99th-percentile JCT of finished jobs, seconds.
    pub p99_jct_s: f64,
    /// Requests served within their SLO over all requests (dropped ones included).
    pub slo_goodput: Option<f64>,
    /// Requests dropped.
    pub requests_dropped: u64,
    /// Time-averaged GPUs with any holder.
    pub gpus_used: f64,
    /// Wall seconds of the run.
    pub wall_s: f64,
    /// What the policy ignored: `count capability` each.
    pub ignored: Vec<String>,
    /// Why the run failed (e.g. a policy that stalls); its figures are then zero and left
    /// out of the aggregates, which count it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Mean, min and max of some values (NaN for none).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    fn of(xs: impl Iterator<Item = f64>) -> Spread {
        let v: Vec<f64> = xs.collect();
        if v.is_empty() {
            return Spread {
                mean: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        Spread {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    fn cell(&self, scale: f64, digits: usize, unit: &str) -> String {
        if self.mean.is_nan() {
            return "-".into();
        }
        format!(
            "{:.d$}{unit} [{:.d$}–{:.d$}]",
            self.mean * scale,
            self.min * scale,
            self.max * scale,
            d = digits
        )
    }
}

/// The policies to run and the default names left out (not registered).
fn policies(arg: Option<&str>) -> Result<(Vec<String>, Vec<&'static str>), ExperimentError> {
    let given: Vec<String> = arg
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if !given.is_empty() {
        for p in &given {
            crate::build_policy(p, &tessera_sched::PolicyOptions::default())?;
        }
        return Ok((given, Vec::new()));
    }
    let (known, missing): (Vec<&str>, Vec<&str>) = DEFAULT_POLICIES
        .iter()
        .partition(|p| crate::mechanism_of_policy(p).is_some());
    let mut out: Vec<String> = known.into_iter().map(str::to_string).collect();
    out.extend(
        crate::policies()
            .map(|(_, p)| p.name)
            .filter(|n| n.starts_with("tessera-no-"))
            .map(str::to_string),
    );
    Ok((out, missing))
}

impl Experiment for TesseraRepro {
    fn name(&self) -> &'static str {
        "tessera"
    }

    fn about(&self) -> &'static str {
        "The mixed world (builtin:mixed) over seeds and loads: the default run's policies and the tessera-no-* ablations, mean and min-max of average and p99 JCT, SLO goodput and GPUs used"
    }

    fn params(&self) -> &'static [Param] {
        PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let quick = args.flag("quick")?;
        let mut seeds: Vec<u64> = args.list("seeds")?;
        let loads: Vec<f64> = args.list("loads")?;
        let mut jobs: usize = args.parse("jobs")?;
        if seeds.is_empty() {
            return Err(ExperimentError::param(
                "seeds",
                "",
                "needs at least one seed",
            ));
        }
        if loads.is_empty() {
            return Err(ExperimentError::param(
                "loads",
                "",
                "needs at least one load",
            ));
        }
        if jobs == 0 || jobs > MAX_JOBS {
            return Err(ExperimentError::param(
                "jobs",
                &jobs.to_string(),
                &format!("must be 1 to {MAX_JOBS}"),
            ));
        }
        let mut base = MixedWorkload::default();
        if quick {
            seeds.truncate(2);
            jobs = jobs.min(60);
            base.service_secs = 1800;
        }
        for &load in &loads {
            crate::check_generator_options(&crate::GeneratorOptions {
                jobs,
                load,
                ..crate::GeneratorOptions::default()
            })
            .map_err(|e| ExperimentError::param("loads", &load.to_string(), &e))?;
            if load <= 0.0 {
                return Err(ExperimentError::param(
                    "loads",
                    &load.to_string(),
                    "must be a positive number of jobs per hour",
                ));
            }
        }
        let (names, missing) = policies(args.get("policies"))?;
        let cluster = Cluster::from_yaml(&cluster_yaml(), &GpuCatalog::builtin())
            .map_err(|e| ExperimentError::Other(format!("builtin:{NAME} cluster: {e}")))?;
        let mut workloads = Vec::new();
        for (li, &load) in loads.iter().enumerate() {
            for &seed in &seeds {
                let w = MixedWorkload {
                    jobs,
                    jobs_per_hour: load,
                    seed,
                    ..base.clone()
                }
                .generate()
                .map_err(|e| ExperimentError::param("loads", &load.to_string(), &e))?;
                workloads.push(((li, seed), w));
            }
        }
        // The truth `simulate` picks for the built-in mixed workload (the same for every
        // seed and load: it follows the workload's source).
        let source = format!("builtin:{NAME}");
        let (truth, why) = match workloads.first() {
            Some((_, w)) => auto_truth(&source, &cluster, w).map_err(ExperimentError::Other)?,
            None => (None, String::new()),
        };
        let items: Vec<(usize, &str)> = (0..workloads.len())
            .flat_map(|w| names.iter().map(move |p| (w, p.as_str())))
            .collect();
        let results = run_parallel(
            &items,
            ctx.threads,
            |_| 1.0,
            |&(wi, policy)| {
                let ((li, seed), w) = &workloads[wi];
                let started = std::time::Instant::now();
                let failed = |e: ExperimentError| RunFigures {
                    load: loads[*li],
                    seed: *seed,
                    policy: policy.to_string(),
                    jobs: w.len(),
                    finished: 0,
                    rejected: 0,
                    unfinished: 0,
                    avg_jct_s: 0.0,
                    p99_jct_s: 0.0,
                    slo_goodput: None,
                    requests_dropped: 0,
                    gpus_used: 0.0,
                    wall_s: started.elapsed().as_secs_f64(),
                    ignored: Vec::new(),
                    error: Some(e.to_string()),
                };
                // A policy's failure is its own (the others' figures stand), as in simulate.
                run_policy(&cluster, w, truth.as_ref(), policy, *seed).map_or_else(failed, |r| {
                    let s = &r.report.summary;
                    RunFigures {
                        load: loads[*li],
                        seed: *seed,
                        policy: policy.to_string(),
                        jobs: s.jobs,
                        finished: s.finished,
                        rejected: s.rejected,
                        unfinished: s.unfinished,
                        avg_jct_s: s.avg_jct_s,
                        p99_jct_s: s.p99_jct_s,
                        slo_goodput: s.slo_goodput(),
                        requests_dropped: s.requests_dropped(),
                        gpus_used: s.mean_active_gpus,
                        wall_s: started.elapsed().as_secs_f64(),
                        ignored: r
                            .ignored
                            .iter()
                            .map(|i| format!("{} {}", i.count, i.capability.key()))
                            .collect(),
                        error: None,
                    }
                })
            },
            ctx.progress,
        )?;
        let runs: Vec<RunFigures> = results;
        Ok(report(
            &runs, &names, &missing, &loads, &seeds, jobs, quick, &truth, &why,
        ))
    }
}

/// The figures of one (load, policy) over its seeds.
#[derive(Clone, Debug, serde::Serialize)]
struct Aggregate {
    load: f64,
    policy: String,
    seeds: usize,
    failed: usize,
    finished: Spread,
    rejected: Spread,
    avg_jct_h: Spread,
    p99_jct_h: Spread,
    slo_goodput_pct: Spread,
    gpus_used: Spread,
}

#[allow(clippy::too_many_arguments)]
fn report(
    runs: &[RunFigures],
    names: &[String],
    missing: &[&str],
    loads: &[f64],
    seeds: &[u64],
    jobs: usize,
    quick: bool,
    truth: &Option<crate::Truth>,
    why: &str,
) -> ReproOutput {
    let mut aggregates = Vec::new();
    for &load in loads {
        for p in names {
            let all = runs.iter().filter(|r| r.load == load && &r.policy == p);
            let failed = all.clone().filter(|r| r.error.is_some()).count();
            let of: Vec<&RunFigures> = all.filter(|r| r.error.is_none()).collect();
            let spread =
                |f: &dyn Fn(&RunFigures) -> Option<f64>| Spread::of(of.iter().filter_map(|r| f(r)));
            aggregates.push(Aggregate {
                load,
                policy: p.clone(),
                seeds: of.len(),
                failed,
                finished: spread(&|r| Some(r.finished as f64)),
                rejected: spread(&|r| Some(r.rejected as f64)),
                avg_jct_h: spread(&|r| (r.finished > 0).then_some(r.avg_jct_s / 3600.0)),
                p99_jct_h: spread(&|r| (r.finished > 0).then_some(r.p99_jct_s / 3600.0)),
                slo_goodput_pct: spread(&|r| r.slo_goodput.map(|g| 100.0 * g)),
                gpus_used: spread(&|r| Some(r.gpus_used)),
            });
        }
    }
    let truth_name = truth.as_ref().map_or("trace", |t| t.name);
    let mut text = String::new();
    let _ = writeln!(
        text,
        "The mixed world: builtin:{NAME} cluster (96 GPUs: A100-80GB and H100 with MIG, V100-32GB, A10), \
         builtin:{NAME} workload of {jobs} training jobs and 3 services{}; seeds {seeds:?}, loads {loads:?} jobs/h; \
         truth: {truth_name} ({why}).",
        if quick { " (--quick: services of 30 min)" } else { "" },
    );
    let _ = writeln!(
        text,
        "Each policy runs on the part of the workload it honours (as simulate's default run: \
         --ignore-unsupported); requests of services it does not serve count as dropped. Cells: \
         mean [min–max] over the seeds; JCTs over the jobs each policy finished (rejected ones \
         are counted apart)."
    );
    if !missing.is_empty() {
        let _ = writeln!(text, "Not registered, left out: {}.", missing.join(", "));
    }
    for &load in loads {
        let rows: Vec<Vec<String>> = aggregates
            .iter()
            .filter(|a| a.load == load)
            .map(|a| {
                vec![
                    a.policy.clone(),
                    if a.failed > 0 {
                        format!("{:.1}/{jobs} ({} failed)", a.finished.mean, a.failed)
                    } else {
                        format!("{:.1}/{jobs}", a.finished.mean)
                    },
                    format!("{:.1}", a.rejected.mean),
                    a.avg_jct_h.cell(1.0, 2, " h"),
                    a.p99_jct_h.cell(1.0, 1, " h"),
                    a.slo_goodput_pct.cell(1.0, 1, "%"),
                    a.gpus_used.cell(1.0, 1, ""),
                ]
            })
            .collect();
        let _ = writeln!(text, "\nload {load} jobs/h:");
        text.push_str(&text_table(
            &[
                "policy",
                "finished",
                "rejected",
                "avg JCT",
                "p99 JCT",
                "SLO goodput",
                "GPUs used",
            ],
            &rows,
        ));
    }
    let errors: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            r.error
                .as_ref()
                .map(|e| format!("  {} (load {}, seed {}): {e}", r.policy, r.load, r.seed))
        })
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(
            text,
            "\nFailed runs (left out of the means; the other runs stand):"
        );
        for e in errors {
            let _ = writeln!(text, "{e}");
        }
    }
    // What each policy ignored (the same on every seed up to counts): the first run's.
    let mut ignored: BTreeMap<&str, &[String]> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.error.is_none()) {
        ignored.entry(r.policy.as_str()).or_insert(&r.ignored);
    }
    let lines: Vec<String> = names
        .iter()
        .filter_map(|p| {
            ignored
                .get(p.as_str())
                .filter(|i| !i.is_empty())
                .map(|i| format!("  {p}: {}", i.join(", ")))
        })
        .collect();
    if !lines.is_empty() {
        let _ = writeln!(
            text,
            "\nIgnored per policy (first seed, first load; docs/capabilities.md says how):"
        );
        for l in lines {
            let _ = writeln!(text, "{l}");
        }
    }
    let n_seeds = seeds.len();
    let figure = |stem: &str, what: &str, unit: &str, f: &dyn Fn(&Aggregate) -> Spread| Figure {
        file_stem: stem.to_string(),
        title: format!(
            "Mixed world: {what} vs load{}",
            if n_seeds > 1 {
                format!(" (mean, bars min–max over {n_seeds} seeds)")
            } else {
                String::new()
            }
        ),
        x_label: "load (training jobs/hour)".into(),
        y_label: format!("{what} ({unit})"),
        series: names
            .iter()
            .map(|p| {
                let pts: Vec<(f64, Spread)> = aggregates
                    .iter()
                    .filter(|a| &a.policy == p)
                    .map(|a| (a.load, f(a)))
                    .filter(|(_, s)| !s.mean.is_nan())
                    .collect();
                Series {
                    label: p.clone(),
                    points: pts.iter().map(|(x, s)| (*x, s.mean)).collect(),
                    spread: (n_seeds > 1)
                        .then(|| pts.iter().map(|(_, s)| (s.min, s.max)).collect()),
                }
            })
            .collect(),
    };
    let figures = vec![
        figure("avg_jct_vs_load", "average JCT", "hours", &|a| a.avg_jct_h),
        figure("p99_jct_vs_load", "p99 JCT", "hours", &|a| a.p99_jct_h),
        figure(
            "slo_goodput_vs_load",
            "SLO goodput",
            "% of requests",
            &|a| a.slo_goodput_pct,
        ),
        figure(
            "gpus_used_vs_load",
            "GPUs used",
            "time-averaged GPUs",
            &|a| a.gpus_used,
        ),
    ];
    let summary = serde_json::json!({
        "cluster": format!("builtin:{NAME}"),
        "workload": format!("builtin:{NAME}"),
        "jobs": jobs,
        "quick": quick,
        "seeds": seeds,
        "loads": loads,
        "truth": {"name": truth_name, "why": why},
        "policies": names,
        "not_registered": missing,
        "aggregates": aggregates,
        "runs": runs,
    });
    ReproOutput {
        text,
        summary,
        figures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_run_covers_every_policy_load_and_seed() {
        let args = ExperimentArgs::new(
            PARAMS,
            [
                ("quick", "true"),
                ("policies", "fifo,las,dilu"),
                ("jobs", "30"),
            ],
        )
        .unwrap();
        let out = TesseraRepro
            .run(&args, &RunContext::quiet(2))
            .unwrap_or_else(|e| panic!("{e}"));
        let runs = out.summary["runs"].as_array().unwrap();
        // Two seeds (quick) x two loads x three policies.
        assert_eq!(runs.len(), 12);
        for r in runs {
            assert!(r.get("error").is_none(), "{r}");
            let finished = r["finished"].as_u64().unwrap();
            let rejected = r["rejected"].as_u64().unwrap();
            assert_eq!(finished + rejected, 30, "{r}");
            // FIFO and LAS serve no services: every request dropped, goodput 0.
            if r["policy"] != "dilu" {
                assert_eq!(r["slo_goodput"], 0.0, "{r}");
                assert!(r["requests_dropped"].as_u64().unwrap() > 0, "{r}");
            } else {
                assert!(r["slo_goodput"].as_f64().unwrap() > 0.5, "{r}");
            }
        }
        assert_eq!(out.figures.len(), 4);
        for f in &out.figures {
            assert_eq!(f.series.len(), 3);
            for s in &f.series {
                assert_eq!(s.points.len(), 2, "{}", f.file_stem);
                assert!(s.spread.is_some());
            }
        }
        assert!(out.text.contains("load 40 jobs/h:"), "{}", out.text);
    }

    #[test]
    fn bad_parameters_are_refused() {
        for (name, value) in [
            ("seeds", ""),
            ("loads", "0"),
            ("loads", "nan"),
            ("jobs", "0"),
            ("policies", "fifo,lottery"),
        ] {
            let args = ExperimentArgs::new(PARAMS, [(name, value)]).unwrap();
            assert!(
                TesseraRepro.run(&args, &RunContext::quiet(1)).is_err(),
                "{name}={value}"
            );
        }
    }

    #[test]
    fn default_policies_include_registered_ablations() {
        let (names, missing) = policies(None).unwrap();
        for p in DEFAULT_POLICIES {
            assert!(
                names.iter().any(|n| n == p) != missing.contains(p),
                "{p}: {names:?} {missing:?}"
            );
        }
        let ablations = crate::policies()
            .filter(|(_, p)| p.name.starts_with("tessera-no-"))
            .count();
        assert_eq!(
            names.len() + missing.len(),
            DEFAULT_POLICIES.len() + ablations
        );
    }
}
