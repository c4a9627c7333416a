//! `tessera bench gavel`: one scheduling round of `gavel` (LP), `gavel-max-sum` (LP), `sia`
//! (ILP) and `elastic` with 100, 500 and 2,000 queued jobs of Gavel's job types, on a cluster
//! of 36·k K80 + 36·k P100 + 36·k V100 GPUs (k = jobs / 100, at least 1).

use std::time::Instant;

use tessera_model::{Cluster, GpuCatalog, SimDuration, SimRng, SimTime, TrainingJob, Workload};
use tessera_perf::Profiler;
use tessera_sched::{ActiveJob, ClusterState, ClusterView, Policy, PolicyOptions, Trigger};

use super::matrix::{GavelMatrix, MatrixProfiler};
use crate::experiment::{
    bench_output, BenchRow, Experiment, ExperimentArgs, ExperimentError, Param, ReproOutput,
    RunContext,
};

/// The benchmark.
#[derive(Clone, Copy, Debug)]
pub struct GavelBench;

const PARAMS: &[Param] = &[
    Param {
        name: "jobs",
        default: "100,500,2000",
        help: "queued jobs per case, comma-separated",
    },
    Param {
        name: "seed",
        default: "1",
        help: "seed of the job mix",
    },
    Param {
        name: "repro-seed",
        default: "1",
        help: "seed of the full-scale Crius repro workload for the per-round solve times (1,900 jobs, 1,280 GPUs; 'none' skips it)",
    },
    Param {
        name: "repro-policies",
        default: "gavel,sia,crius",
        help: "policies run on the full-scale Crius repro workload (comma-separated)",
    },
];

/// One full run on the Crius repro's workload, with what the repro's throughput is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct ReproRun {
    /// Wall seconds of the whole run.
    pub wall_s: f64,
    /// The policy's counters (solve times per round among them).
    pub stats: Vec<(String, f64)>,
    /// Jobs finished.
    pub finished: usize,
    /// Preemptions (the engine's count).
    pub preemptions: u64,
    /// Simulated makespan, seconds.
    pub makespan_s: f64,
    /// GPUs held (time average over the arrival window, as every figure below).
    pub gpus_held: f64,
    /// GPUs held beyond the jobs' requests.
    pub gpus_over_request: f64,
    /// The repro's throughput: Σ true rate / rate on the request.
    pub throughput: f64,
    /// The part of it from jobs holding more GPUs than they asked for.
    pub throughput_over_request: f64,
    /// GPUs held by jobs still in a restart's checkpoint restore (no progress).
    pub gpus_restoring: f64,
}

/// Runs `policy` on the Crius repro's workload of `seed` (its cluster, truth, estimator and
/// restart costs) and samples the breakdown of [`ReproRun`] at every event.
pub fn repro_run(policy: &str, seed: u64) -> Result<ReproRun, ExperimentError> {
    use crate::crius::perf::{CellEstimator, CellThroughput};
    use crate::crius::repro::{restart_costs, TIME_LIMIT_S};
    use crate::crius::workload;
    use std::sync::Arc;
    use tessera_perf::ThroughputModel;
    use tessera_sim::{SimConfig, Simulation};

    let cluster = workload::cluster().map_err(ExperimentError::Other)?;
    let work = workload::generate(1900, 150.0, seed).map_err(ExperimentError::Other)?;
    let truth = CellThroughput::default();
    let estimator: Arc<dyn Profiler> = Arc::new(CellEstimator::default());
    let built = crate::build_policy(
        policy,
        &PolicyOptions {
            seed,
            ..PolicyOptions::default()
        },
    )?;
    let config = SimConfig {
        restart_costs: restart_costs(policy),
        record_timeseries: false,
        profiler: Some(estimator),
        profile_seed: seed,
        time_limit: Some(SimTime::from_secs(TIME_LIMIT_S)),
        ..SimConfig::default()
    };
    let jobs = work.jobs();
    let window_end = jobs.last().map_or(0.0, |j| j.submit.as_secs_f64());
    let started = Instant::now();
    let mut sim = Simulation::new(&cluster, &work, &truth, built, config);
    // Time integrals over the arrival window of the five sampled sums.
    let mut integral = [0.0f64; 5];
    let mut last = [0.0f64; 5];
    let mut last_t = 0.0f64;
    let sim_err = |e| ExperimentError::Sim {
        context: format!("{policy}, seed {seed}"),
        source: e,
    };
    while sim.step().map_err(sim_err)? {
        let now = sim.now();
        let t = now.as_secs_f64();
        let span = (t.min(window_end) - last_t.min(window_end)).max(0.0);
        for (i, v) in integral.iter_mut().zip(&last) {
            *i += v * span;
        }
        let mut cur = [0.0f64; 5];
        for a in sim.active() {
            let Some(alloc) = &a.allocation else { continue };
            let Some(spec) = jobs.get(a.id.index()) else {
                continue;
            };
            let held = f64::from(alloc.gpus());
            let over = (held - f64::from(spec.gpus)).max(0.0);
            let reference = spec.reference_throughput();
            let rate = if reference > 0.0 {
                truth.throughput(spec, alloc, &cluster) / reference
            } else {
                0.0
            };
            cur[0] += held;
            cur[1] += over;
            cur[2] += rate;
            if over > 0.0 {
                cur[3] += rate;
            }
            if a.resumes_at.is_some_and(|r| r > now) {
                cur[4] += held;
            }
        }
        last = cur;
        last_t = t;
    }
    let report = sim.into_report();
    let avg = |i: usize| {
        if window_end > 0.0 {
            integral[i] / window_end
        } else {
            0.0
        }
    };
    Ok(ReproRun {
        wall_s: started.elapsed().as_secs_f64(),
        stats: report.policy_stats.clone(),
        finished: report.summary.finished,
        preemptions: report.summary.preemptions,
        makespan_s: report.summary.makespan_s,
        gpus_held: avg(0),
        gpus_over_request: avg(1),
        throughput: avg(2),
        throughput_over_request: avg(3),
        gpus_restoring: avg(4),
    })
}

/// A cluster of `k` × (36 K80 + 36 P100 + 36 V100), 4 GPUs per server.
pub fn scaled_cluster(k: u32) -> Result<Cluster, String> {
    let yaml = super::gavel_108_yaml().replace("count: 9", &format!("count: {}", 9 * k.max(1)));
    Cluster::from_yaml(&yaml, &GpuCatalog::builtin()).map_err(|e| e.to_string())
}

/// `jobs` queued jobs of random Gavel job types (GPUs 1, 2, 4 or 8, mostly 1), each with the
/// profiler's estimates, all arrived at time 0.
pub fn queued_jobs(cluster: &Cluster, jobs: usize, seed: u64) -> (Workload, Vec<ActiveJob>) {
    let matrix = GavelMatrix::builtin();
    let types = matrix.job_types();
    let mut rng = SimRng::seed_from_u64(seed);
    let mut list = Vec::with_capacity(jobs);
    for i in 0..jobs {
        let gpus = [1, 1, 1, 1, 2, 2, 4, 8][rng.below(8) as usize];
        let mut j =
            TrainingJob::simple(i as u32, SimTime::ZERO, gpus, SimDuration::from_secs(3600));
        if let Some(k) = types.get(rng.below(types.len().max(1) as u64) as usize) {
            j.model = k.model.clone();
            j.batch_size = k.batch;
        }
        list.push(j);
    }
    let workload = Workload::new(list);
    let profiler = MatrixProfiler::new(matrix);
    let active = workload
        .jobs()
        .iter()
        .map(|j| ActiveJob {
            knowledge: profiler.profile(j, cluster, &mut rng),
            ..ActiveJob::arrived(j)
        })
        .collect();
    (workload, active)
}

/// Wall seconds of one round-trigger `schedule` call, the actions it produced and the
/// policy's stats.
pub fn one_round(
    policy: &mut dyn Policy,
    cluster: &Cluster,
    workload: &Workload,
    active: &[ActiveJob],
) -> (f64, usize, Vec<(String, f64)>) {
    let state = ClusterState::new(cluster);
    let free: Vec<_> = (0..cluster.nodes.len())
        .map(|n| cluster.capacity(tessera_model::NodeId(n as u32)))
        .collect();
    let view = ClusterView {
        now: SimTime::ZERO,
        trigger: Trigger {
            round: true,
            arrival: true,
            ..Trigger::default()
        },
        cluster,
        free: &free,
        state: &state,
        jobs: workload.jobs(),
        active,
        services: &[],
    };
    let mut actions = Vec::new();
    let started = Instant::now();
    policy.schedule(&view, &mut actions);
    (
        started.elapsed().as_secs_f64(),
        actions.len(),
        policy.stats(),
    )
}

impl Experiment for GavelBench {
    fn name(&self) -> &'static str {
        "gavel"
    }

    fn about(&self) -> &'static str {
        "one scheduling round of gavel / gavel-max-sum (LP), sia (ILP) and elastic with 100, 500, 2,000 queued jobs"
    }

    fn params(&self) -> &'static [Param] {
        PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let sizes: Vec<usize> = args.list("jobs")?;
        let seed: u64 = args.parse("seed")?;
        let mut rows = Vec::new();
        for &jobs in &sizes {
            let k = (jobs / 100).max(1) as u32;
            let cluster = scaled_cluster(k).map_err(ExperimentError::Other)?;
            let (workload, active) = queued_jobs(&cluster, jobs, seed);
            for (name, target_s) in [
                ("gavel", super::policy::GAVEL_LP_TIME_LIMIT_S),
                ("gavel-max-sum", super::policy::GAVEL_LP_TIME_LIMIT_S),
                ("sia", super::sia::SIA_TIME_LIMIT_S + 0.5),
                ("elastic", 0.1),
            ] {
                let mut policy = crate::build_policy(name, &PolicyOptions::default())?;
                let (wall_s, actions, stats) =
                    one_round(policy.as_mut(), &cluster, &workload, &active);
                let stat = |key: &str| {
                    stats
                        .iter()
                        .find(|(k, _)| k == key)
                        .map_or(String::new(), |(_, v)| format!(", {key} {v}"))
                };
                rows.push(BenchRow {
                    case: format!("{name}, {jobs} jobs, {} GPUs", 108 * k),
                    wall_s,
                    target_s,
                    events_per_s: None,
                    detail: format!(
                        "{actions} starts{}{}{}{}",
                        stat("lp_solve_ms_max"),
                        stat("lp_failures"),
                        stat("ilp_solve_ms_max"),
                        stat("ilp_time_limit_hits"),
                    ),
                    command: format!("tessera bench gavel --jobs {jobs} --seed {seed}"),
                });
            }
        }
        let repro_seed = args.get("repro-seed").unwrap_or("none");
        if repro_seed != "none" {
            let seed: u64 = args.parse("repro-seed")?;
            let policies: Vec<String> = args.list("repro-policies")?;
            for name in &policies {
                let run = repro_run(name, seed)?;
                let stat = |key: &str| {
                    run.stats
                        .iter()
                        .find(|(k, _)| k == key)
                        .map_or(String::new(), |(_, v)| format!(", {key} {v:.3}"))
                };
                let solves: String = ["lp", "ilp"]
                    .iter()
                    .map(|p| {
                        format!(
                            "{}{}{}{}{}",
                            stat(&format!("{p}_solves")),
                            stat(&format!("{p}_solve_ms_mean")),
                            stat(&format!("{p}_solve_ms_p99")),
                            stat(&format!("{p}_solve_ms_max")),
                            stat(&format!("{p}_solve_ms_total")),
                        )
                    })
                    .collect();
                rows.push(BenchRow {
                    case: format!("{name}, Crius repro seed {seed}: 1,900 jobs, 1,280 GPUs"),
                    wall_s: run.wall_s,
                    // The repro runs 9 policies x 3 seeds in 60 s on 2 cores: ~4.4 s a run.
                    target_s: 60.0 * 2.0 / 27.0,
                    events_per_s: None,
                    detail: format!(
                        "{} finished, {} preemptions, makespan {:.1} h; over the arrival window: GPUs held {:.1} ({:.1} beyond requests, {:.1} restoring), throughput {:.1} ({:.1} from jobs beyond their request){}{}{}",
                        run.finished,
                        run.preemptions,
                        run.makespan_s / 3600.0,
                        run.gpus_held,
                        run.gpus_over_request,
                        run.gpus_restoring,
                        run.throughput,
                        run.throughput_over_request,
                        solves,
                        stat("ilp_relaxed_solves"),
                        stat("ilp_time_limit_hits"),
                    ),
                    command: format!(
                        "tessera bench gavel --jobs 100 --repro-seed {seed} --repro-policies {name}"
                    ),
                });
            }
        }
        Ok(bench_output(
            "one scheduling round over queued jobs of Gavel's job types (targets: the policies' solver time limits); whole runs on the Crius repro's workload (target: its share of the repro's 60 s)",
            rows,
        ))
    }
}
