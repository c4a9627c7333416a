//! `tessera repro crius` and `tessera bench crius`.
//!
//! The repro replays the seeded large-model workload on the 1,280-GPU cluster under `fcfs`,
//! Crius and its ablations, and — when registered — `gavel`, `sia` and `elastic` (looked up
//! through the registry; absent ones are skipped with a note). All runs use the `crius`
//! truth and estimator. Restart costs: checkpoint + restore ([`CHECKPOINT_S`]) plus plan
//! tuning, charged at every restart: Crius's re-tuning cap (40 s) for the Crius policies, the
//! full search's cap (600 s) for the others (the engine's restart cost is per model, not per
//! GPU, so the per-GPU rates of DESIGN §5.2 are charged at their caps).
//!
//! Metrics per run: average JCT and queueing over the jobs that finished under every policy
//! of that seed (the report says whether that is all of them), finished jobs, and cluster
//! throughput — the sum over running jobs of their true rate divided by their rate on the
//! requested configuration (requested-configuration equivalents), sampled at every event,
//! averaged over the arrival window and its peak.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use crate::crius::cells::{
    best_packed, cells_of, estimate_cell, estimate_plan, CellPlanner, View, CELL_COUNTS,
};
use tessera_model::{Allocation, Cluster, SimDuration, Workload};
use tessera_perf::{Profiler, RestartCosts, ThroughputModel};
use tessera_sched::{Action, ClusterView, Policy, PolicyOptions};
use tessera_sim::{SimConfig, Simulation};

use super::arena;
use super::perf::{cluster_types, CellEstimator, CellThroughput, DEFAULT_BATCH, ROUND_SECS};
use super::workload;
use crate::experiment::{
    bench_output, run_parallel, text_table, BenchRow, Experiment, ExperimentArgs, ExperimentError,
    Figure, Param, ReproOutput, RunContext, Series, Spread,
};

/// Simulated seconds after which a run stops (jobs still active are unfinished).
pub const TIME_LIMIT_S: u64 = 365 * 86_400;

/// Checkpoint + restore seconds charged on every restart.
pub const CHECKPOINT_S: u64 = 30;
/// Published claims (Crius paper and the Arena artifact, DESIGN §5.2 / issue 14).
pub const PUBLISHED: &str = "Crius paper: average JCT up to -48.9%, cluster throughput up to 1.49x; Arena artifact (first 450 rounds): Crius 1.74x FCFS's average throughput, 1.36x Gavel's, 1.17x Sia's";

/// The Arena artifact over its first 450 rounds (issue 14): Crius's average cluster
/// throughput over the baseline's, and how much faster Crius is on the jobs that all
/// finished (percent).
const ARTIFACT_VS: &[(&str, f64, u32)] =
    &[("fcfs", 1.74, 74), ("gavel", 1.36, 50), ("sia", 1.17, 12)];

// gavel and sia run by default since Gavel's restart lease and Sia's rounded relaxation
// (timings in BENCHMARKS.md).
const POLICIES: &str =
    "fcfs,crius,crius-no-shrink,crius-no-typechange,crius-no-opportunistic,crius-no-migration,crius-dp-only,elastic,gavel,sia";

const PARAMS: &[Param] = &[
    Param {
        name: "seeds",
        default: "1,2,3",
        help: "Workload seeds, a list with ranges (1,2,3 or 1-3)",
    },
    Param {
        name: "jobs",
        default: "1900",
        help: "Jobs per workload",
    },
    Param {
        name: "load",
        default: "150",
        help: "Arrival rate, jobs per hour",
    },
    Param {
        name: "policies",
        default: POLICIES,
        help: "Policies (comma-separated); an unknown name is an error",
    },
    Param {
        name: "mode",
        default: "full",
        help: "full: our seeded 1,900-job workload run to completion; arena: Arena's comparison as Arena runs it (its Philly-derived trace, its first --rounds 300 s rounds, its throughput metric)",
    },
    Param {
        name: "trace",
        default: "",
        help: "--mode arena: an Arena-format trace CSV (default: Arena's simulate_trace_philly.csv, built in)",
    },
    Param {
        name: "rounds",
        default: "450",
        help: "--mode arena: 300 s rounds to run (Arena's comparison: its first 450)",
    },
    Param {
        name: "models",
        default: "alpa",
        help: "--mode arena: model shapes; alpa: Alpa's benchmark configurations, which Arena profiled (sequence 1,024, WideResNet at 224x224 in FP32); tessera: ours by size (sequence 512, WideResNet at 32x32 in FP16)",
    },
];

/// `tessera repro crius`.
#[derive(Clone, Copy, Debug)]
pub struct CriusRepro;

/// One run's figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunStats {
    /// Policy.
    pub policy: String,
    /// Seed.
    pub seed: u64,
    /// Jobs finished.
    pub finished: usize,
    /// JCT per job (s), `None` if unfinished, by job index.
    #[serde(skip)]
    pub jct: Vec<Option<f64>>,
    /// Queueing per job (s).
    #[serde(skip)]
    pub queue: Vec<Option<f64>>,
    /// Time-averaged cluster throughput over the arrival window.
    pub avg_throughput: f64,
    /// The same, not counting jobs whose allocation is still restoring (checkpoint restore
    /// and plan tuning after a start or a change: the GPUs are held but do no work).
    pub avg_throughput_working: f64,
    /// Peak cluster throughput.
    pub peak_throughput: f64,
    /// Per 300 s round (runs limited to rounds only): samples per second of the jobs not
    /// restoring, time-averaged over the round (Arena's cluster throughput).
    #[serde(skip)]
    pub round_samples_per_s: Vec<f64>,
    /// Wall seconds of the run.
    pub wall_s: f64,
    /// Scheduling points.
    pub scheduling_points: u64,
    /// Policy counters.
    pub policy_stats: Vec<(String, f64)>,
}

/// Checkpoint + restore, plus plan tuning per GPU of the new allocation up to its cap:
/// Crius's re-tuning for the Crius policies, a full search for the others.
pub fn restart_costs(policy: &str) -> RestartCosts {
    restart_costs_with_checkpoint(policy, CHECKPOINT_S)
}

fn restart_costs_with_checkpoint(policy: &str, checkpoint_s: u64) -> RestartCosts {
    use super::policy::{RETUNE_MAX_S, RETUNE_PER_GPU_S, SEARCH_MAX_S, SEARCH_PER_GPU_S};
    let (per_gpu, cap) = if policy.starts_with("crius") {
        (RETUNE_PER_GPU_S, RETUNE_MAX_S)
    } else {
        (SEARCH_PER_GPU_S, SEARCH_MAX_S)
    };
    RestartCosts::uniform(SimDuration::from_secs(checkpoint_s)).with_per_gpu(
        SimDuration::from_secs_f64(per_gpu),
        SimDuration::from_secs_f64(cap),
    )
}

/// Checkpoint + restore seconds of Arena's simulator (`CKPT_RESUME_OVERHEAD = 0`: a restart
/// costs plan tuning only).
pub const ARENA_CHECKPOINT_S: u64 = 0;

/// Restart costs of `--mode arena`: Arena's tuning per GPU up to its cap, no checkpoint.
pub fn arena_restart_costs(policy: &str) -> RestartCosts {
    restart_costs_with_checkpoint(policy, ARENA_CHECKPOINT_S)
}

/// Runs one policy over one workload, sampling cluster throughput at every event. With
/// `rounds` (Arena's comparison), the run stops after that many 300 s rounds, the averaging
/// window is those rounds (not the arrivals), Arena's per-round throughput is recorded and a
/// restart costs tuning only ([`arena_restart_costs`]).
pub fn run_one(
    cluster: &Cluster,
    work: &Workload,
    policy: Box<dyn Policy>,
    truth: &CellThroughput,
    estimator: &Arc<CellEstimator>,
    seed: u64,
    rounds: Option<usize>,
) -> Result<RunStats, ExperimentError> {
    let name = policy.name().to_string();
    let start = Instant::now();
    let profiler: Arc<dyn Profiler> = estimator.clone();
    let config = SimConfig {
        restart_costs: if rounds.is_some() {
            arena_restart_costs(&name)
        } else {
            restart_costs(&name)
        },
        record_timeseries: false,
        profiler: Some(profiler),
        profile_seed: seed,
        // A guard against a policy that never starts some job: the run ends and the job is
        // reported unfinished. Arena's comparison ends after its rounds.
        time_limit: Some(tessera_model::SimTime::from_secs(
            rounds.map_or(TIME_LIMIT_S, |r| r as u64 * arena::ROUND_SECS),
        )),
        ..SimConfig::default()
    };
    let jobs = work.jobs();
    let window_end = match rounds {
        Some(r) => (r as u64 * arena::ROUND_SECS) as f64,
        None => jobs.last().map_or(0.0, |j| j.submit.as_secs_f64()),
    };
    let mut per_round = arena::RoundAverages::new(rounds.unwrap_or(0));
    let mut sim = Simulation::new(cluster, work, truth, policy, config);
    // Cached rates per job: (allocation they were computed for, normalised rate, samples/s).
    let mut cache: Vec<Option<(Allocation, f64, f64)>> = vec![None; jobs.len()];
    let (mut last_t, mut last_tp, mut integral, mut peak) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    // Per running job since the last event: (when it works again, s; normalised rate;
    // samples/s). A restore may end between events, so each job counts from its own resume
    // instant.
    let mut last_rates: Vec<(f64, f64, f64)> = Vec::new();
    // Arena's metric also charges plan tuning at a job's first placement (its simulator
    // deducts tuning from every job whose GPUs changed in a round, a first start included),
    // which the engine does not charge: per job, when that first tuning ends (metric only;
    // progress is not delayed).
    let first_tuning = rounds.map(|_| arena_restart_costs(&name));
    let mut first_tuned_at: Vec<Option<f64>> = vec![None; jobs.len()];
    let mut integral_working = 0.0f64;
    let sim_err = |e| ExperimentError::Sim {
        context: format!("{name}, seed {seed}"),
        source: e,
    };
    while sim.step().map_err(sim_err)? {
        let t = sim.now().as_secs_f64();
        let lo = last_t.min(window_end);
        let hi = t.min(window_end);
        integral += last_tp * (hi - lo).max(0.0);
        for &(resume, r, samples) in &last_rates {
            integral_working += r * (hi - lo.max(resume)).max(0.0);
            per_round.add(lo.max(resume), hi, samples);
        }
        last_rates.clear();
        let mut tp = 0.0;
        for a in sim.active() {
            let Some(alloc) = &a.allocation else { continue };
            let i = a.id.index();
            let hit = cache[i]
                .as_ref()
                .filter(|(c, _, _)| c == alloc)
                .map(|x| (x.1, x.2));
            let (r, samples) = match hit {
                Some(x) => x,
                None => {
                    let spec = &jobs[i];
                    let reference = spec.reference_throughput();
                    let rate = truth.throughput(spec, alloc, cluster);
                    let r = if reference > 0.0 {
                        rate / reference
                    } else {
                        0.0
                    };
                    let samples = rate * f64::from(spec.batch_size.unwrap_or(DEFAULT_BATCH));
                    cache[i] = Some((alloc.clone(), r, samples));
                    (r, samples)
                }
            };
            tp += r;
            let mut resume = a.resumes_at.map_or(0.0, |at| at.as_secs_f64());
            if let Some(costs) = &first_tuning {
                let tuned = *first_tuned_at[i]
                    .get_or_insert_with(|| t + costs.tuning(alloc.gpus()).as_secs_f64());
                resume = resume.max(tuned);
            }
            last_rates.push((resume, r, samples));
        }
        peak = peak.max(tp);
        last_t = t;
        last_tp = tp;
    }
    // A run cut at its time limit ends between events: what ran until the window's end.
    let lo = last_t.min(window_end);
    integral += last_tp * (window_end - lo).max(0.0);
    for &(resume, r, samples) in &last_rates {
        integral_working += r * (window_end - lo.max(resume)).max(0.0);
        per_round.add(lo.max(resume), window_end, samples);
    }
    let report = sim.into_report();
    let mut jct = vec![None; jobs.len()];
    let mut queue = vec![None; jobs.len()];
    for r in &report.jobs {
        if let Some(x) = jct.get_mut(r.job.index()) {
            *x = r.jct_secs();
        }
        if let Some(x) = queue.get_mut(r.job.index()) {
            *x = r.queue_secs();
        }
    }
    Ok(RunStats {
        policy: name,
        seed,
        finished: report.summary.finished,
        jct,
        queue,
        avg_throughput: if window_end > 0.0 {
            integral / window_end
        } else {
            0.0
        },
        avg_throughput_working: if window_end > 0.0 {
            integral_working / window_end
        } else {
            0.0
        },
        peak_throughput: peak,
        round_samples_per_s: per_round.averages(),
        wall_s: start.elapsed().as_secs_f64(),
        scheduling_points: report.summary.scheduling_points,
        policy_stats: report.policy_stats,
    })
}

/// One policy on one seed: average JCT (s), average queueing (s), finished jobs, average
/// and peak throughput, average throughput of the GPUs not restoring.
type SeedRow = (f64, f64, usize, f64, f64, f64);

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn spread(v: &[f64]) -> (f64, f64) {
    (
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

impl Experiment for CriusRepro {
    fn name(&self) -> &'static str {
        "crius"
    }

    fn about(&self) -> &'static str {
        "Crius: FCFS, Crius and ablations (and Gavel/Sia/elastic when registered) on 1,280 heterogeneous GPUs, ~1,900 large-model jobs"
    }

    fn params(&self) -> &'static [Param] {
        PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let mode = args.get("mode").unwrap_or("full");
        // A flag of the other mode is a mistake, not something to ignore.
        let default_of = |name: &str| PARAMS.iter().find(|p| p.name == name).map(|p| p.default);
        let given = |name: &str| args.get(name).filter(|v| Some(*v) != default_of(name));
        match mode {
            "full" => {
                for name in ["trace", "rounds", "models"] {
                    if let Some(v) = given(name) {
                        return Err(ExperimentError::param(
                            name,
                            v,
                            "applies only to --mode arena",
                        ));
                    }
                }
            }
            "arena" => {
                for name in ["jobs", "load", "seeds"] {
                    if let Some(v) = given(name) {
                        return Err(ExperimentError::param(
                            name,
                            v,
                            "applies only to --mode full (Arena's trace fixes the jobs, and no policy or estimator of this mode draws random numbers)",
                        ));
                    }
                }
                return run_arena(args, ctx);
            }
            other => {
                return Err(ExperimentError::param(
                    "mode",
                    other,
                    "expected full or arena",
                ))
            }
        }
        let seeds: Vec<u64> = args.seeds("seeds")?;
        let jobs: usize = args.parse("jobs")?;
        let load: f64 = args.parse("load")?;
        let wanted: Vec<String> = args.list("policies")?;
        if seeds.is_empty() {
            return Err(ExperimentError::param("seeds", "", "names no seed"));
        }
        if jobs == 0 {
            return Err(ExperimentError::param("jobs", "0", "must be at least 1"));
        }
        if !(load.is_finite() && load > 0.0) {
            return Err(ExperimentError::param(
                "load",
                &load.to_string(),
                "must be a positive number of jobs per hour",
            ));
        }
        if wanted.is_empty() {
            return Err(ExperimentError::param("policies", "", "names no policy"));
        }
        // The generator's bounds, before any workload is drawn.
        crate::check_generator_options(&crate::GeneratorOptions {
            jobs,
            load,
            ..crate::GeneratorOptions::default()
        })
        .map_err(|e| ExperimentError::param("jobs", &jobs.to_string(), &e))?;
        let notes: Vec<String> = Vec::new();
        let mut policies = Vec::new();
        for p in &wanted {
            // A name the registry does not know is a mistake, not something to skip.
            crate::build_policy(p, &PolicyOptions::default())
                .map_err(|e| ExperimentError::param("policies", p, &e.to_string()))?;
            if !policies.contains(p) {
                policies.push(p.clone());
            }
        }
        let cluster = workload::cluster().map_err(ExperimentError::Other)?;
        let workloads: Vec<Workload> = seeds
            .iter()
            .map(|&s| workload::generate(jobs, load, s).map_err(ExperimentError::Other))
            .collect::<Result<_, _>>()?;
        let truth = CellThroughput::default();
        let estimator = Arc::new(CellEstimator::default());
        let runs: Vec<(usize, String)> = (0..seeds.len())
            .flat_map(|s| policies.iter().map(move |p| (s, p.clone())))
            .collect();
        let results = run_parallel(
            &runs,
            ctx.threads,
            |_| 1.0,
            |(s, p)| {
                let policy = crate::build_policy(
                    p,
                    &PolicyOptions {
                        seed: seeds[*s],
                        ..PolicyOptions::default()
                    },
                )?;
                run_one(
                    &cluster,
                    &workloads[*s],
                    policy,
                    &truth,
                    &estimator,
                    seeds[*s],
                    None,
                )
            },
            ctx.progress,
        )?
        .into_iter()
        .collect::<Result<Vec<RunStats>, ExperimentError>>()?;

        // Like for like: per seed, the jobs that finished under every policy.
        let mut common_sizes = Vec::new();
        let mut per_policy: BTreeMap<usize, Vec<SeedRow>> = BTreeMap::new();
        for (si, _) in seeds.iter().enumerate() {
            let of_seed: Vec<(usize, &RunStats)> = results
                .iter()
                .enumerate()
                .filter(|(i, _)| runs[*i].0 == si)
                .map(|(i, r)| (i % policies.len(), r))
                .collect();
            let common: Vec<usize> = (0..jobs)
                .filter(|&j| of_seed.iter().all(|(_, r)| r.jct[j].is_some()))
                .collect();
            common_sizes.push(common.len());
            for (pi, r) in of_seed {
                let jct = mean(&common.iter().filter_map(|&j| r.jct[j]).collect::<Vec<_>>());
                let q = mean(
                    &common
                        .iter()
                        .filter_map(|&j| r.queue[j])
                        .collect::<Vec<_>>(),
                );
                per_policy.entry(pi).or_default().push((
                    jct,
                    q,
                    r.finished,
                    r.avg_throughput,
                    r.peak_throughput,
                    r.avg_throughput_working,
                ));
            }
        }
        let base = policies.iter().position(|p| p == "fcfs");
        let col = |pi: usize, f: fn(&SeedRow) -> f64| -> Vec<f64> {
            per_policy
                .get(&pi)
                .map_or(Vec::new(), |v| v.iter().map(f).collect())
        };
        let mut rows = Vec::new();
        let mut summary_rows = Vec::new();
        for (pi, p) in policies.iter().enumerate() {
            let jct = col(pi, |x| x.0 / 3600.0);
            let q = col(pi, |x| x.1 / 3600.0);
            let fin = col(pi, |x| x.2 as f64);
            let avg = col(pi, |x| x.3);
            let peak = col(pi, |x| x.4);
            let working = col(pi, |x| x.5);
            let (jlo, jhi) = spread(&jct);
            let jsd = Spread::of(&jct).sd;
            let rel = |mine: &[f64], theirs: &[f64]| -> Vec<f64> {
                mine.iter().zip(theirs).map(|(a, b)| a / b).collect()
            };
            let (jct_vs, tp_vs, working_vs) = match base {
                Some(b) => (
                    mean(&rel(&jct, &col(b, |x| x.0 / 3600.0))) - 1.0,
                    mean(&rel(&avg, &col(b, |x| x.3))),
                    mean(&rel(&working, &col(b, |x| x.5))),
                ),
                None => (f64::NAN, f64::NAN, f64::NAN),
            };
            rows.push(vec![
                p.clone(),
                format!("{:.2} ± {:.2} [{:.2}, {:.2}]", mean(&jct), jsd, jlo, jhi),
                format!("{:+.1}%", 100.0 * jct_vs),
                format!("{:.2}", mean(&q)),
                format!("{:.0}", mean(&fin)),
                format!("{:.1} ± {:.1}", mean(&avg), Spread::of(&avg).sd),
                format!("{:.2}x", tp_vs),
                format!("{:.1} ± {:.1}", mean(&working), Spread::of(&working).sd),
                format!("{:.2}x", working_vs),
                format!("{:.1}", mean(&peak)),
            ]);
            summary_rows.push(serde_json::json!({
                "policy": p,
                "avg_jct_h": mean(&jct), "avg_jct_h_min": jlo, "avg_jct_h_max": jhi,
                "jct_vs_fcfs": jct_vs,
                "avg_queue_h": mean(&q),
                "finished": mean(&fin),
                "avg_throughput": mean(&avg),
                "throughput_vs_fcfs": tp_vs,
                "avg_throughput_working": mean(&working),
                "throughput_working_vs_fcfs": working_vs,
                "peak_throughput": mean(&peak),
                "per_seed": per_policy.get(&pi).map(|v| v.iter().map(|x| serde_json::json!({
                    "avg_jct_s": x.0, "avg_queue_s": x.1, "finished": x.2,
                    "avg_throughput": x.3, "peak_throughput": x.4,
                    "avg_throughput_working": x.5,
                })).collect::<Vec<_>>()),
            }));
        }
        let mut text = String::new();
        writeln!(
            text,
            "Crius (arXiv 2403.16125): {jobs} large-model jobs at {load} jobs/h on 1,280 GPUs (80x4 A100-40GB, 20x16 V100-32GB, 160x2 A40, 160x2 A10); seeds {seeds:?}; mean ± sd [min, max] over seeds."
        )?;
        let all = common_sizes.iter().all(|&c| c == jobs);
        writeln!(
            text,
            "JCT and queueing over {} (per seed: {:?} jobs).\nThroughput: Σ running jobs' true rate / rate on their request, averaged over the arrival window; 'working' leaves out jobs whose allocation is still restoring (checkpoint restore and plan tuning).\n",
            if all {
                "all jobs (every job finished under every policy)"
            } else {
                "the jobs that finished under every policy"
            },
            common_sizes
        )?;
        text.push_str(&text_table(
            &[
                "policy",
                "avg JCT h",
                "vs fcfs",
                "queue h",
                "finished",
                "avg tput",
                "vs fcfs",
                "working tput",
                "vs fcfs",
                "peak tput",
            ],
            &rows,
        ));
        writeln!(text, "\npublished: {PUBLISHED}")?;
        // Crius against each baseline run, next to the artifact's figures.
        let mut versus = Vec::new();
        if let Some(c) = policies.iter().position(|p| p == "crius") {
            for &(name, tput, faster) in ARTIFACT_VS {
                let Some(b) = policies.iter().position(|p| p == name) else {
                    continue;
                };
                let ratio = |f: fn(&SeedRow) -> f64| {
                    mean(
                        &col(c, f)
                            .iter()
                            .zip(col(b, f))
                            .map(|(x, y)| x / y)
                            .collect::<Vec<_>>(),
                    )
                };
                let (tp, jct) = (ratio(|x| x.3), ratio(|x| x.0) - 1.0);
                let working = ratio(|x| x.5);
                writeln!(
                    text,
                    "crius vs {name}: avg throughput {tp:.2}x, of working GPUs {working:.2}x (artifact {tput:.2}x), avg JCT {:+.1}% (artifact: crius {faster}% faster)",
                    100.0 * jct
                )?;
                versus.push(serde_json::json!({
                    "baseline": name, "throughput_ratio": tp, "throughput_working_ratio": working,
                    "jct_change": jct,
                    "artifact_throughput_ratio": tput, "artifact_faster_pct": faster,
                }));
            }
        }
        for n in &notes {
            writeln!(text, "note: {n}")?;
        }
        let stats: Vec<serde_json::Value> = results
            .iter()
            .map(|r| serde_json::json!({
                "policy": r.policy, "seed": r.seed, "wall_s": r.wall_s,
                "scheduling_points": r.scheduling_points,
                "policy_stats": r.policy_stats.iter().map(|(k, v)| (k.clone(), *v)).collect::<BTreeMap<_, _>>(),
            }))
            .collect();
        Ok(ReproOutput {
            text,
            summary: serde_json::json!({
                "experiment": "crius",
                "jobs": jobs, "load_jobs_per_hour": load, "seeds": seeds,
                "common_jobs_per_seed": common_sizes,
                "policies": summary_rows,
                "runs": stats,
                "published": PUBLISHED,
                "crius_vs": versus,
                "notes": notes,
            }),
            figures: per_seed_figures(&policies, &seeds, &per_policy),
        })
    }
}

/// Arena's figures over its first 450 rounds of `simulate_trace_philly.csv` (issue 14):
/// Crius's average cluster throughput (samples/s, rounds above 100) over the baseline's,
/// and how much faster Crius is on the jobs that finished under both (percent). The
/// artifact's ElasticFlow is `elasticflow-l` (loose deadlines), our nearest is `elastic`.
const ARENA_ARTIFACT_VS: &[(&str, f64, u32)] =
    &[("fcfs", 1.74, 74), ("gavel", 1.36, 50), ("sia", 1.17, 12)];

/// Default policies of `--mode arena`: the artifact's comparison.
const ARENA_POLICIES: &str = "fcfs,crius,elastic,gavel,sia";

/// `tessera repro crius --mode arena`: Arena's trace, its first `--rounds` rounds, its
/// throughput metric (module [`arena`]).
fn run_arena(args: &ExperimentArgs, ctx: &RunContext<'_>) -> Result<ReproOutput, ExperimentError> {
    let rounds: usize = args.parse("rounds")?;
    if rounds == 0 {
        return Err(ExperimentError::param("rounds", "0", "must be at least 1"));
    }
    // The full mode's default list has the ablations; Arena compares five policies.
    let wanted: Vec<String> = match args.get("policies") {
        Some(p) if p != POLICIES => args.list("policies")?,
        _ => ARENA_POLICIES.split(',').map(String::from).collect(),
    };
    if wanted.is_empty() {
        return Err(ExperimentError::param("policies", "", "names no policy"));
    }
    let mut policies: Vec<String> = Vec::new();
    for p in &wanted {
        crate::build_policy(p, &PolicyOptions::default())
            .map_err(|e| ExperimentError::param("policies", p, &e.to_string()))?;
        if !policies.contains(p) {
            policies.push(p.clone());
        }
    }
    let (source, text) = match args.get("trace") {
        Some(path) => (
            path.to_string(),
            std::fs::read_to_string(path)
                .map_err(|e| ExperimentError::param("trace", path, &e.to_string()))?,
        ),
        None => (
            "Arena's simulate_trace_philly.csv (built in)".to_string(),
            arena::BUILTIN_TRACE.to_string(),
        ),
    };
    let trace = arena::parse(&text).map_err(|e| {
        ExperimentError::param(
            "trace",
            args.get("trace").unwrap_or("built-in"),
            &e.to_string(),
        )
    })?;
    let shapes_name = args.get("models").unwrap_or("alpa");
    let shapes = arena::ModelShapes::from_name(shapes_name)
        .ok_or_else(|| ExperimentError::param("models", shapes_name, "expected alpa or tessera"))?;
    let cluster = workload::cluster().map_err(ExperimentError::Other)?;
    let work = arena::workload(&trace, rounds, &cluster, shapes).map_err(ExperimentError::Other)?;
    if work.workload.is_empty() {
        return Err(ExperimentError::param(
            "rounds",
            &rounds.to_string(),
            "no job of the trace arrives in these rounds",
        ));
    }
    let truth = CellThroughput::default();
    let estimator = Arc::new(CellEstimator::default());
    let results = run_parallel(
        &policies,
        ctx.threads,
        |_| 1.0,
        |p| {
            let policy = crate::build_policy(p, &PolicyOptions::default())?;
            run_one(
                &cluster,
                &work.workload,
                policy,
                &truth,
                &estimator,
                0,
                Some(rounds),
            )
        },
        ctx.progress,
    )?
    .into_iter()
    .collect::<Result<Vec<RunStats>, ExperimentError>>()?;

    let n = work.workload.len();
    let common: Vec<usize> = (0..n)
        .filter(|&j| results.iter().all(|r| r.jct[j].is_some()))
        .collect();
    let avg_over_common =
        |v: &[Option<f64>]| mean(&common.iter().filter_map(|&j| v[j]).collect::<Vec<_>>());
    struct Row {
        jct_h: f64,
        queue_h: f64,
        arena: Option<(f64, f64, usize)>,
        arena_sd: f64,
    }
    let rows_of: Vec<Row> = results
        .iter()
        .map(|r| {
            let kept: Vec<f64> = r
                .round_samples_per_s
                .iter()
                .copied()
                .filter(|&x| x > arena::THROUGHPUT_THRESHOLD)
                .collect();
            Row {
                jct_h: avg_over_common(&r.jct) / 3600.0,
                queue_h: avg_over_common(&r.queue) / 3600.0,
                arena: arena::summarise(&r.round_samples_per_s),
                arena_sd: Spread::of(&kept).sd,
            }
        })
        .collect();
    let base = policies.iter().position(|p| p == "fcfs");
    let arena_mean = |i: usize| rows_of[i].arena.map_or(f64::NAN, |a| a.0);
    let mut table = Vec::new();
    let mut summary_rows = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        let (r, row) = (&results[i], &rows_of[i]);
        let (jct_vs, tp_vs) = match base {
            Some(b) => (
                row.jct_h / rows_of[b].jct_h - 1.0,
                arena_mean(i) / arena_mean(b),
            ),
            None => (f64::NAN, f64::NAN),
        };
        let (am, ap, counted) = row.arena.unwrap_or((f64::NAN, f64::NAN, 0));
        table.push(vec![
            p.clone(),
            format!("{}/{n}", r.finished),
            format!("{:.2}", row.jct_h),
            format!("{:+.1}%", 100.0 * jct_vs),
            format!("{:.2}", row.queue_h),
            format!("{am:.1} ± {:.1}", row.arena_sd),
            format!("{tp_vs:.2}x"),
            format!("{ap:.1}"),
            format!("{counted}"),
            format!("{:.1}", r.avg_throughput_working),
        ]);
        summary_rows.push(serde_json::json!({
            "policy": p,
            "finished": r.finished,
            "avg_jct_h": row.jct_h,
            "jct_vs_fcfs": jct_vs,
            "avg_queue_h": row.queue_h,
            "arena_throughput_samples_per_s": am,
            "arena_throughput_sd_over_rounds": row.arena_sd,
            "arena_throughput_vs_fcfs": tp_vs,
            "arena_peak_samples_per_s": ap,
            "rounds_counted": counted,
            "avg_throughput_working": r.avg_throughput_working,
            "avg_throughput": r.avg_throughput,
            "per_round_samples_per_s": r.round_samples_per_s,
        }));
    }
    let mut out = String::new();
    writeln!(
        out,
        "Crius, Arena's comparison as Arena runs it: {source}; its first {rounds} rounds of 300 s on 1,280 GPUs (80x4 A100-40GB, 20x16 V100-32GB, 160x2 A40, 160x2 A10)."
    )?;
    writeln!(
        out,
        "{work}; iterations / {}; models shaped as {}.",
        arena::ITERATION_SCALE,
        match shapes {
            arena::ModelShapes::Alpa => "Alpa's benchmark configurations, which Arena profiled (--models alpa: sequence 1,024, WideResNet at 224x224 in FP32)",
            arena::ModelShapes::Tessera => "ours by size (--models tessera: sequence 512, WideResNet at 32x32 in FP16)",
        }
    )?;
    writeln!(
        out,
        "One run per policy: the trace is fixed and no policy or estimator here draws random numbers (± is the spread over rounds)."
    )?;
    writeln!(
        out,
        "JCT and queueing over the {} jobs that finished under every policy within the rounds. Arena tput: per round, Σ samples/s of the jobs not restoring (time average over the round), mean over the rounds above {} samples/s (Arena's plotter); norm tput: requested-configuration equivalents of working GPUs over the rounds.\n",
        common.len(),
        arena::THROUGHPUT_THRESHOLD
    )?;
    out.push_str(&text_table(
        &[
            "policy",
            "finished",
            "avg JCT h",
            "vs fcfs",
            "queue h",
            "Arena tput",
            "vs fcfs",
            "peak",
            "rounds",
            "norm tput",
        ],
        &table,
    ));
    let mut versus = Vec::new();
    if let Some(c) = policies.iter().position(|p| p == "crius") {
        for (b, name) in policies.iter().enumerate() {
            if b == c {
                continue;
            }
            let tp = arena_mean(c) / arena_mean(b);
            let jct = rows_of[c].jct_h / rows_of[b].jct_h - 1.0;
            let artifact = ARENA_ARTIFACT_VS.iter().find(|a| a.0 == name);
            let against = artifact.map_or(String::new(), |a| {
                format!(" (artifact {:.2}x, crius {}% faster)", a.1, a.2)
            });
            writeln!(
                out,
                "crius vs {name}: Arena throughput {tp:.2}x, avg JCT {:+.1}%{against}",
                100.0 * jct
            )?;
            versus.push(serde_json::json!({
                "baseline": name, "arena_throughput_ratio": tp, "jct_change": jct,
                "artifact_throughput_ratio": artifact.map(|a| a.1),
                "artifact_faster_pct": artifact.map(|a| a.2),
            }));
        }
    }
    let figure = Figure {
        file_stem: "arena_throughput_by_round".into(),
        title: format!("Crius repro, Arena mode: cluster throughput per round (first {rounds})"),
        x_label: "round (300 s)".into(),
        y_label: "samples/s (jobs not restoring)".into(),
        series: policies
            .iter()
            .zip(&results)
            .map(|(p, r)| Series {
                label: p.clone(),
                points: r
                    .round_samples_per_s
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| (i as f64, x))
                    .collect(),
                spread: None,
            })
            .collect(),
    };
    Ok(ReproOutput {
        text: out,
        summary: serde_json::json!({
            "experiment": "crius",
            "mode": "arena",
            "models": shapes_name,
            "trace": source,
            "rounds": rounds,
            "trace_jobs": work.trace_jobs,
            "jobs": n,
            "raised": work.raised,
            "dropped": work.dropped,
            "common_jobs": common.len(),
            "throughput_threshold": arena::THROUGHPUT_THRESHOLD,
            "policies": summary_rows,
            "crius_vs": versus,
            "runs": results.iter().map(|r| serde_json::json!({
                "policy": r.policy, "wall_s": r.wall_s,
                "scheduling_points": r.scheduling_points,
            })).collect::<Vec<_>>(),
        }),
        figures: vec![figure],
    })
}

/// Per seed and policy: average JCT and average throughput (working GPUs), one line per
/// policy, so the spread over seeds is visible.
fn per_seed_figures(
    policies: &[String],
    seeds: &[u64],
    per_policy: &BTreeMap<usize, Vec<SeedRow>>,
) -> Vec<Figure> {
    let fig = |stem: &str, title: &str, y: &str, f: fn(&SeedRow) -> f64| Figure {
        file_stem: stem.into(),
        title: title.into(),
        x_label: "seed".into(),
        y_label: y.into(),
        series: policies
            .iter()
            .enumerate()
            .map(|(pi, p)| Series {
                label: p.clone(),
                points: per_policy.get(&pi).map_or(Vec::new(), |v| {
                    seeds
                        .iter()
                        .zip(v)
                        .map(|(&s, x)| (s as f64, f(x)))
                        .collect()
                }),
                spread: None,
            })
            .collect(),
    };
    vec![
        fig(
            "avg_jct_by_seed",
            "Crius repro: average JCT per seed (jobs finished under every policy)",
            "average JCT (h)",
            |x| x.0 / 3600.0,
        ),
        fig(
            "avg_throughput_by_seed",
            "Crius repro: average cluster throughput per seed (GPUs not restoring)",
            "normalised throughput",
            |x| x.5,
        ),
    ]
}

/// Distribution of a sample: (count, mean, p50, p90, max).
pub type Distribution = (usize, f64, f64, f64, f64);

/// One row of [`proxy_errors`]: a family (or `all`), per cell and per (type, count).
pub type ProxyErrorRow = (String, [Distribution; 2]);

fn distribution(v: &[f64]) -> Distribution {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    let q = |p: f64| -> f64 {
        if s.is_empty() {
            f64::NAN
        } else {
            s[((p * (s.len() - 1) as f64).round() as usize).min(s.len() - 1)]
        }
    };
    (
        s.len(),
        mean(&s),
        q(0.5),
        q(0.9),
        s.last().copied().unwrap_or(f64::NAN),
    )
}

/// The proxy's error against the optimal view on the repro's 15 models and 4 GPU types:
/// per cell (every count, stage count and locality the optimal view finds feasible; a cell
/// the proxy finds infeasible counts 100%) and per configuration (type, count: the proxy's
/// best packed cell against the optimal view's, which is what the artifact's "the best proxy
/// plan among grids reaches 93.4% of the optimal plan" compares). Rows: all, then per
/// family; columns: count, mean, p50, p90, max (fractions).
pub fn proxy_errors() -> Result<Vec<ProxyErrorRow>, String> {
    let cluster = workload::cluster()?;
    let types = cluster_types(&cluster, &Default::default());
    let mut by: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for name in workload::MODELS {
        let model = crate::crius::cells::LargeModel::from_name(name)
            .ok_or_else(|| format!("model {name}"))?;
        let family = format!("{:?}", model.family);
        let mut cells = Vec::new();
        let mut configs = Vec::new();
        for t in &types {
            for c in CELL_COUNTS {
                for cell in cells_of(c, t.device.gpus_per_node) {
                    let est =
                        |v| estimate_cell(&model, DEFAULT_BATCH, &t.device, cell, v, ROUND_SECS);
                    let o = est(View::Optimal);
                    if o.throughput > 0.0 {
                        cells.push(1.0 - est(View::Proxy).throughput / o.throughput);
                    }
                }
                let best = |v| best_packed(&model, DEFAULT_BATCH, &t.device, c, v, ROUND_SECS);
                let o = best(View::Optimal);
                if o.throughput > 0.0 {
                    configs.push(1.0 - best(View::Proxy).throughput / o.throughput);
                }
            }
        }
        for key in ["all".to_string(), family] {
            let e = by.entry(key).or_default();
            e.0.extend_from_slice(&cells);
            e.1.extend_from_slice(&configs);
        }
    }
    Ok(by
        .into_iter()
        .map(|(k, (c, g))| (k, [distribution(&c), distribution(&g)]))
        .collect())
}

/// [`proxy_errors`] as text lines.
pub fn proxy_error_text() -> Result<String, String> {
    let mut out = String::new();
    for (k, [c, g]) in proxy_errors()? {
        let _ = writeln!(
            out,
            "{k}: per cell n={} mean {:.1}% p50 {:.1}% p90 {:.1}% max {:.1}%; per (type, count) n={} mean {:.1}% p50 {:.1}% p90 {:.1}% max {:.1}%",
            c.0, 100.0 * c.1, 100.0 * c.2, 100.0 * c.3, 100.0 * c.4,
            g.0, 100.0 * g.1, 100.0 * g.2, 100.0 * g.3, 100.0 * g.4
        );
    }
    Ok(out)
}

/// `tessera bench crius`.
#[derive(Clone, Copy, Debug)]
pub struct CriusBench;

/// A policy wrapper that times each scheduling call (benchmarks only; policies read no
/// clock themselves).
struct Timed {
    inner: Box<dyn Policy>,
    calls: Arc<std::sync::Mutex<Vec<(usize, f64)>>>,
}

impl Policy for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn round_length(&self) -> Option<SimDuration> {
        self.inner.round_length()
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let t = Instant::now();
        self.inner.schedule(view, actions);
        if view.trigger.round {
            if let Ok(mut c) = self.calls.lock() {
                c.push((view.active.len(), t.elapsed().as_secs_f64()));
            }
        }
    }
}

impl Experiment for CriusBench {
    fn name(&self) -> &'static str {
        "crius"
    }

    fn about(&self) -> &'static str {
        "all cells of one job (< 1 ms), one crius round with 2,000 jobs on 1,280 GPUs (< 200 ms), proxy error over all cells"
    }

    fn params(&self) -> &'static [Param] {
        &[]
    }

    fn run(
        &self,
        _args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let cluster = workload::cluster().map_err(ExperimentError::Other)?;
        let types = cluster_types(&cluster, &Default::default());
        let mut rows = Vec::new();

        // 1. Every cell of one job, three views, on the four types.
        let mut errors = Vec::new();
        let mut plan_gap = Vec::new();
        let mut worst = 0.0f64;
        let mut per_job = Vec::new();
        for name in workload::MODELS {
            let Some(model) = crate::crius::cells::LargeModel::from_name(name) else {
                continue;
            };
            // The fastest of 20 repetitions: on a shared machine a repetition may be
            // descheduled, which says nothing about the code.
            let time_views = |views: &[View]| {
                let mut fastest = f64::INFINITY;
                let mut n = 0usize;
                for _ in 0..20 {
                    let t0 = Instant::now();
                    n = 0;
                    for t in &types {
                        // One planner per (job, type): what every cell of the type reuses.
                        let planner = CellPlanner::new(&model, DEFAULT_BATCH, &t.device);
                        for c in CELL_COUNTS {
                            for cell in cells_of(c, t.device.gpus_per_node) {
                                for &v in views {
                                    let e = planner.estimate(cell, v, ROUND_SECS);
                                    n += usize::from(e.throughput >= 0.0);
                                }
                            }
                        }
                    }
                    fastest = fastest.min(t0.elapsed().as_secs_f64());
                }
                (fastest, n)
            };
            let (proxy_s, n) = time_views(&[View::Proxy]);
            let (all_s, _) = time_views(&View::ALL);
            per_job.push((name, proxy_s, n, all_s));
            for t in &types {
                for c in CELL_COUNTS {
                    for cell in cells_of(c, t.device.gpus_per_node) {
                        let o = estimate_cell(
                            &model,
                            DEFAULT_BATCH,
                            &t.device,
                            cell,
                            View::Optimal,
                            ROUND_SECS,
                        );
                        let p = estimate_cell(
                            &model,
                            DEFAULT_BATCH,
                            &t.device,
                            cell,
                            View::Proxy,
                            ROUND_SECS,
                        );
                        if o.throughput > 0.0 {
                            let e = 1.0 - p.throughput / o.throughput;
                            worst = worst.max(e);
                            errors.push(e);
                            if let Some(plan) = p.plan {
                                let tuned = estimate_plan(
                                    &model,
                                    DEFAULT_BATCH,
                                    &t.device,
                                    cell.nodes,
                                    plan,
                                    ROUND_SECS,
                                );
                                plan_gap.push(tuned.throughput / o.throughput);
                            }
                        }
                    }
                }
            }
        }
        let slowest =
            per_job
                .iter()
                .copied()
                .fold(("", 0.0, 0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
        rows.push(BenchRow {
            case: "all cells of one job, proxy view, 4 types".into(),
            wall_s: slowest.1,
            target_s: 0.001,
            events_per_s: None,
            detail: format!(
                "slowest model {} ({} cells; all three views {:.2} ms); proxy error vs optimal over the {} cells optimal finds feasible: mean {:.1}%, worst {:.1}% (100% = the proxy finds no plan that fits); proxy's plan re-tuned reaches {:.1}% of optimal on average; distribution (per cell and per (type, count), by family):\n{}",
                slowest.0,
                slowest.2,
                slowest.3 * 1e3,
                errors.len(),
                100.0 * mean(&errors),
                100.0 * worst,
                100.0 * mean(&plan_gap),
                proxy_error_text().map_err(ExperimentError::Other)?
            ),
            command: "tessera bench crius".into(),
        });

        // 2. One crius round with 2,000 jobs: every job arrives at once.
        let work = workload::generate(2000, 1e9, 7).map_err(ExperimentError::Other)?;
        let truth = CellThroughput::default();
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let policy = Timed {
            inner: crate::build_policy("crius", &PolicyOptions::default())?,
            calls: Arc::clone(&calls),
        };
        let config = SimConfig {
            restart_costs: restart_costs("crius"),
            record_timeseries: false,
            profiler: Some(Arc::new(CellEstimator::default())),
            time_limit: Some(tessera_model::SimTime::from_secs(20 * 300 + 1)),
            ..SimConfig::default()
        };
        let sim = Simulation::new(&cluster, &work, &truth, Box::new(policy), config);
        sim.run(&mut ()).map_err(|e| ExperimentError::Sim {
            context: "bench crius".into(),
            source: e,
        })?;
        let calls = calls.lock().map(|c| c.clone()).unwrap_or_default();
        let (active, first) = calls.first().copied().unwrap_or((0, f64::NAN));
        let max = calls.iter().map(|c| c.1).fold(0.0, f64::max);
        let (_, round_mean, _, round_p99, _) = {
            let t: Vec<f64> = calls.iter().map(|c| c.1).collect();
            let (n, m, p50, _, mx) = distribution(&t);
            let mut sorted = t.clone();
            sorted.sort_by(f64::total_cmp);
            let p99 = sorted
                .get(((0.99 * sorted.len().saturating_sub(1) as f64).round()) as usize)
                .copied()
                .unwrap_or(f64::NAN);
            (n, m, p50, p99, mx)
        };
        rows.push(BenchRow {
            case: "one crius round, 2,000 jobs, 1,280 GPUs".into(),
            wall_s: max,
            target_s: 0.2,
            events_per_s: None,
            detail: format!(
                "slowest of the first {} rounds (mean {:.1} ms, p99 {:.1} ms); first round {:.1} ms with {} active jobs",
                calls.len(),
                round_mean * 1e3,
                round_p99 * 1e3,
                first * 1e3,
                active
            ),
            command: "tessera bench crius".into(),
        });
        Ok(bench_output("Crius speed targets", rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Crius on a Gavel-format replay (matrix job types, no cells): the first 80 jobs of
    /// Philly VC 0e4a51 with Poisson arrivals at 4 jobs/h on 36 K80 + 36 P100 + 36 V100
    /// under the matrix truth. Every job finishes, the engine's invariants hold after every
    /// step, a job's GPUs are of one type, and the average JCT beats type-agnostic FIFO's.
    #[test]
    fn crius_replays_a_gavel_format_trace() {
        use crate::Mechanism as _;
        use tessera_model::{GpuCatalog, GpuModelId};
        use tessera_trace::{parse_trace, with_arrivals, Arrivals, ReadOptions, TraceFormat};
        let cat = GpuCatalog::builtin();
        let cluster = Cluster::from_yaml(&crate::gavel::gavel_108_yaml(), &cat).unwrap();
        let trace = parse_trace(
            include_str!("../gavel/data/philly_0e4a51_first80.trace"),
            "fixture.trace",
            Some(TraceFormat::Gavel),
            &cat,
            &ReadOptions::default(),
        )
        .unwrap()
        .workload;
        let work = with_arrivals(&trace, Arrivals::Poisson { jobs_per_hour: 4.0 }, 1);
        let mut avg = Vec::new();
        for policy in ["crius", "fifo"] {
            let truth = crate::gavel::Gavel
                .build_truth("gavel", &crate::TruthOptions::default())
                .unwrap();
            let config = SimConfig {
                profiler: truth.profiler.clone(),
                record_timeseries: false,
                restart_costs: restart_costs(policy),
                ..SimConfig::default()
            };
            let built = crate::build_policy(policy, &PolicyOptions::default()).unwrap();
            let mut sim = Simulation::new(&cluster, &work, truth.model.as_ref(), built, config);
            while sim.step().unwrap() {
                sim.check_invariants().unwrap();
                for job in sim.active() {
                    let Some(a) = &job.allocation else { continue };
                    let gpus: Vec<GpuModelId> = a
                        .shares
                        .iter()
                        .map(|s| cluster.nodes[s.node.index()].gpu)
                        .collect();
                    assert!(
                        gpus.windows(2).all(|w| w[0] == w[1]),
                        "{policy}: mixed types"
                    );
                }
            }
            let r = sim.into_report();
            assert_eq!(r.summary.finished, work.len(), "{policy}");
            avg.push(r.summary.avg_jct_s);
        }
        assert!(avg[0] < avg[1], "crius {} vs fifo {}", avg[0], avg[1]);
    }

    #[test]
    fn restarts_charge_tuning_per_gpu_up_to_the_cap() {
        let s = SimDuration::from_secs;
        let crius = restart_costs("crius-no-shrink");
        let fcfs = restart_costs("fcfs");
        for (gpus, c, f) in [(1, 40, 180), (2, 50, 330), (4, 70, 630), (8, 70, 630)] {
            assert_eq!(crius.for_restart("bert-1.3b", gpus), s(c));
            assert_eq!(fcfs.for_restart("bert-1.3b", gpus), s(f));
        }
    }

    #[test]
    fn proxy_errors_are_fractions_and_cover_every_family() {
        let rows = proxy_errors().unwrap();
        println!("{}", proxy_error_text().unwrap());
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(names, ["Moe", "Transformer", "WideResNet", "all"]);
        for (_, d) in &rows {
            for (n, mean, p50, p90, max) in d {
                assert!(*n > 0);
                assert!(0.0 <= *p50 && p50 <= p90 && p90 <= max && *max <= 1.0);
                assert!(*mean >= 0.0 && mean <= max);
            }
        }
    }

    #[test]
    fn small_repro_orders_crius_before_fcfs_and_writes_a_summary() {
        let args = ExperimentArgs::new(
            PARAMS,
            [
                ("seeds", "1"),
                ("jobs", "300"),
                ("load", "90"),
                ("policies", "fcfs,crius,crius-dp-only"),
            ],
        )
        .unwrap();
        let out = CriusRepro.run(&args, &RunContext::quiet(2)).unwrap();
        println!("{}", out.text);
        let p = &out.summary["policies"];
        let jct = |i: usize| p[i]["avg_jct_h"].as_f64().unwrap();
        assert_eq!(p[0]["policy"], "fcfs");
        assert_eq!(p[1]["policy"], "crius");
        assert!(jct(1) < jct(0), "crius {} vs fcfs {}", jct(1), jct(0));
        assert_eq!(out.summary["common_jobs_per_seed"][0], 300);
        let working = |i: usize| p[i]["avg_throughput_working"].as_f64().unwrap();
        let all = |i: usize| p[i]["avg_throughput"].as_f64().unwrap();
        assert!(working(1) > 0.0 && working(1) <= all(1) + 1e-9);
    }

    fn arena_args(given: &[(&str, &str)]) -> ExperimentArgs {
        let mut all = vec![("mode", "arena")];
        all.extend_from_slice(given);
        ExperimentArgs::new(PARAMS, all).unwrap()
    }

    /// Arena mode on a trace of our own in Arena's schema: every policy runs the rounds
    /// asked, per-round throughput is recorded for each, and FCFS's first round is exactly
    /// the samples/s of the jobs it started at time 0 on their requests, each over the part
    /// of the round after its first plan tuning (150 s per GPU up to 600 s), as Arena's
    /// metric charges it.
    #[test]
    fn arena_mode_runs_a_trace_in_arenas_schema_for_its_rounds() {
        let trace = "\
job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type
a,5000,400000,bert__760M,0,256,1,a40
b,5100,400000,moe__1.3B,0,128,4,a100
c,5200,400000,wide_resnet__500M,0,256,4,v100
d,5500,300000,bert__1.3B,0,256,8,a10
e,5800,200000,moe__690M,0,256,2,a40
f,6200,100000,bert__2.6B,0,512,8,a100
";
        let path = std::env::temp_dir().join(format!("tessera-arena-{}.csv", std::process::id()));
        std::fs::write(&path, trace).unwrap();
        let p = path.to_string_lossy().to_string();
        let args = arena_args(&[("trace", &p), ("rounds", "8"), ("policies", "fcfs,crius")]);
        let out = CriusRepro.run(&args, &RunContext::quiet(2)).unwrap();
        std::fs::remove_file(&path).ok();
        println!("{}", out.text);
        let s = &out.summary;
        assert_eq!(s["mode"], "arena");
        assert_eq!(s["rounds"], 8);
        assert_eq!(s["trace_jobs"], 6);
        let pol = s["policies"].as_array().unwrap();
        assert_eq!(pol.len(), 2);
        for r in pol {
            assert_eq!(r["per_round_samples_per_s"].as_array().unwrap().len(), 8);
        }
        // Round 0: a, b, c (submitted within 300 s of the first) start at 0 under fcfs.
        let cluster = workload::cluster().unwrap();
        let jobs = arena::parse(trace).unwrap();
        // The mode's default shapes: Alpa's, as Arena profiled them.
        let w = arena::workload(&jobs, 8, &cluster, arena::ModelShapes::Alpa).unwrap();
        assert_eq!(w.workload.jobs()[0].model, "bert__760M");
        assert_eq!(s["models"], "alpa");
        let truth = CellThroughput::default();
        let estimator = Arc::new(CellEstimator::default());
        let fcfs = crate::build_policy("fcfs", &PolicyOptions::default()).unwrap();
        let run = run_one(&cluster, &w.workload, fcfs, &truth, &estimator, 0, Some(8)).unwrap();
        let mut sim = Simulation::new(
            &cluster,
            &w.workload,
            &truth,
            crate::build_policy("fcfs", &PolicyOptions::default()).unwrap(),
            SimConfig {
                profiler: Some(estimator.clone() as Arc<dyn Profiler>),
                ..SimConfig::default()
            },
        );
        // The state once every event of the first instant with a job placed is done
        // (arrivals, the estimator's profiling and FCFS's round may be separate steps).
        let mut first: Option<f64> = None;
        let mut expected = 0.0;
        while sim.step().unwrap() {
            let now = sim.now().as_secs_f64();
            if first.is_some_and(|f| now > f) {
                break;
            }
            let placed: Vec<_> = sim
                .active()
                .iter()
                .filter(|a| a.allocation.is_some())
                .collect();
            if placed.is_empty() {
                continue;
            }
            first = Some(now);
            let end = (now / 300.0).floor() * 300.0 + 300.0;
            expected = placed
                .iter()
                .filter_map(|a| {
                    let alloc = a.allocation.as_ref()?;
                    let spec = &w.workload.jobs()[a.id.index()];
                    let tuning = arena_restart_costs("fcfs")
                        .tuning(alloc.gpus())
                        .as_secs_f64();
                    let part = (end - now - tuning).max(0.0) / 300.0;
                    Some(
                        truth.throughput(spec, alloc, &cluster)
                            * f64::from(spec.batch_size?)
                            * part,
                    )
                })
                .sum();
        }
        let first = first.expect("fcfs places a job");
        // Nothing else starts or ends in that round of this trace.
        let round = (first / 300.0).floor() as usize;
        assert!(round <= 1, "first placement at {first} s");
        assert!(expected > 0.0);
        assert!(run.round_samples_per_s[..round].iter().all(|&x| x == 0.0));
        let got = run.round_samples_per_s[round];
        assert!(
            (got - expected).abs() < 1e-6 * expected,
            "{got} vs {expected}"
        );
        assert!(
            out.text.contains("crius vs fcfs: Arena throughput"),
            "{}",
            out.text
        );
    }

    /// Flags of the other mode are errors naming the flag; a bad trace names its line.
    #[test]
    fn arena_mode_flags_are_checked() {
        let err = |args: ExperimentArgs| {
            CriusRepro
                .run(&args, &RunContext::quiet(1))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let e = err(ExperimentArgs::new(PARAMS, [("rounds", "10")]).unwrap());
        assert!(
            e.starts_with("--rounds") && e.contains("--mode arena"),
            "{e}"
        );
        let e = err(ExperimentArgs::new(PARAMS, [("mode", "areana")]).unwrap());
        assert!(e.starts_with("--mode"), "{e}");
        let e = err(arena_args(&[("jobs", "100")]));
        assert!(e.starts_with("--jobs") && e.contains("--mode full"), "{e}");
        let e = err(arena_args(&[("rounds", "0")]));
        assert!(e.starts_with("--rounds"), "{e}");
        let e = err(arena_args(&[("models", "gpt")]));
        assert!(
            e.starts_with("--models") && e.contains("alpa or tessera"),
            "{e}"
        );
        let e = err(ExperimentArgs::new(PARAMS, [("models", "tessera")]).unwrap());
        assert!(
            e.starts_with("--models") && e.contains("--mode arena"),
            "{e}"
        );
        let path =
            std::env::temp_dir().join(format!("tessera-arena-bad-{}.csv", std::process::id()));
        std::fs::write(
            &path,
            "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type\nx,1,2,gpt3__175B,0,1,1,a40\n",
        )
        .unwrap();
        let e = err(arena_args(&[("trace", &path.to_string_lossy())]));
        std::fs::remove_file(&path).ok();
        assert!(e.starts_with("--trace") && e.contains("line 2"), "{e}");
    }

    /// Regression (issue 40): a mistyped policy was skipped with a note and exit 0; `--jobs
    /// 0` blamed `--seeds`. Each is now an error naming its own flag.
    #[test]
    fn bad_flags_are_blamed_precisely() {
        let run = |given: &[(&str, &str)]| {
            let args = ExperimentArgs::new(PARAMS, given.iter().copied()).unwrap();
            CriusRepro
                .run(&args, &RunContext::quiet(1))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let e = run(&[
            ("seeds", "1"),
            ("jobs", "10"),
            ("policies", "fcfs,crius-typo"),
        ]);
        assert!(e.starts_with("--policies \"crius-typo\""), "{e}");
        let e = run(&[("jobs", "0")]);
        assert!(e.starts_with("--jobs"), "{e}");
        let e = run(&[("seeds", "3-1")]);
        assert!(e.starts_with("--seeds"), "{e}");
    }
}
