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
];

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
        Ok(bench_output(
            "one scheduling round over queued jobs of Gavel's job types (targets: the policies' solver time limits)",
            rows,
        ))
    }
}
