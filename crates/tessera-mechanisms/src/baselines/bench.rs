//! `tessera bench baselines`: the engine on a Philly-sized synthetic trace (DESIGN §7).

use std::time::Instant;

use tessera_model::{Bytes, Cluster, MilliCpu, SimDuration};
use tessera_perf::TraceThroughput;
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, Simulation};
use tessera_trace::synthetic::{DurationDist, PoissonWorkload, PHILLY_GPU_MIX};

use crate::experiment::{
    bench_output, peak_rss_mib, BenchRow, Experiment, ExperimentArgs, ExperimentError, Param,
    ReproOutput, RunContext,
};

/// Offered load of the synthetic Philly-sized trace: 80% of 2,048 GPUs given the Philly
/// runtime sample's mean (4.06 h) and the Philly GPU mix's mean (2.125 GPUs).
const PHILLY_BENCH_JOBS_PER_HOUR: f64 = 190.0;

/// 82,247 Philly-shaped jobs on 2,048 GPUs under fifo and las with 300 s rounds.
#[derive(Clone, Copy, Debug)]
pub struct PhillyBench;

const PARAMS: &[Param] = &[Param {
    name: "jobs",
    default: "82247",
    help: "jobs of the synthetic Philly-sized trace",
}];

impl Experiment for PhillyBench {
    fn name(&self) -> &'static str {
        "philly"
    }

    fn about(&self) -> &'static str {
        "82,247 Philly-shaped jobs on 2,048 GPUs: fifo, and las with 300 s rounds"
    }

    fn params(&self) -> &'static [Param] {
        PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let jobs: usize = args.parse("jobs")?;
        let cluster = Cluster::homogeneous(
            "V100-32GB",
            256,
            8,
            MilliCpu::from_cores(48),
            Bytes::from_gib(512),
        )
        .map_err(|e| ExperimentError::Other(e.to_string()))?;
        let started = Instant::now();
        let workload = PoissonWorkload {
            jobs,
            jobs_per_hour: PHILLY_BENCH_JOBS_PER_HOUR,
            gpu_mix: PHILLY_GPU_MIX.to_vec(),
            durations: DurationDist::PhillyRuntimes,
            seed: 1,
        }
        .generate();
        let generate_s = started.elapsed().as_secs_f64();
        let mut rows = Vec::new();
        for (policy, round, target_s) in [
            ("fifo", None, 10.0),
            ("las", Some(SimDuration::from_secs(300)), 30.0),
        ] {
            let options = PolicyOptions {
                round,
                ..PolicyOptions::default()
            };
            let built = crate::build_policy(policy, &options)?;
            let config = SimConfig {
                record_timeseries: false,
                ..SimConfig::default()
            };
            let started = Instant::now();
            let report = Simulation::new(&cluster, &workload, &TraceThroughput, built, config)
                .run(&mut ())
                .map_err(|source| ExperimentError::Sim {
                    context: format!("bench philly, {policy}"),
                    source,
                })?;
            let wall_s = started.elapsed().as_secs_f64();
            let s = &report.summary;
            rows.push(BenchRow {
                case: match round {
                    Some(r) => format!("{policy}, {} s rounds", r.as_secs_f64()),
                    None => policy.to_string(),
                },
                wall_s,
                target_s,
                events_per_s: Some(s.events as f64 / wall_s.max(1e-9)),
                detail: format!(
                    "{}/{} finished, {} events, {} scheduling points, peak RSS {}",
                    s.finished,
                    s.jobs,
                    s.events,
                    s.scheduling_points,
                    peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"))
                ),
                command: format!("tessera bench philly --jobs {jobs}"),
            });
        }
        Ok(bench_output(
            &format!(
                "Philly-sized synthetic trace: {} jobs, Poisson {PHILLY_BENCH_JOBS_PER_HOUR} jobs/h, on 2,048 GPUs (256 x 8); generated in {generate_s:.2} s",
                workload.len()
            ),
            rows,
        ))
    }
}
