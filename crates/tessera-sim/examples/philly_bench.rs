//! `tessera bench philly`'s two runs (FIFO; LAS with 300 s rounds on 82,247 Philly-shaped
//! jobs, 2,048 GPUs) on the engine alone, repeated: wall time and events per second, for
//! before/after comparisons of the engine's per-event path without building the CLI.
//!
//! `cargo run --release -p tessera-sim --example philly_bench -- [REPEATS]`

use std::time::Instant;

use tessera_model::{Bytes, Cluster, MilliCpu, SimDuration};
use tessera_perf::TraceThroughput;
use tessera_sched::baselines::build;
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, Simulation};
use tessera_trace::synthetic::{DurationDist, PoissonWorkload, PHILLY_GPU_MIX};

fn main() {
    let repeats: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(7);
    let cluster = Cluster::homogeneous(
        "V100-32GB",
        256,
        8,
        MilliCpu::from_cores(48),
        Bytes::from_gib(512),
    )
    .expect("cluster");
    let workload = PoissonWorkload {
        jobs: 82_247,
        jobs_per_hour: 190.0,
        gpu_mix: PHILLY_GPU_MIX.to_vec(),
        durations: DurationDist::PhillyRuntimes,
        seed: 1,
    }
    .generate();
    for (policy, round) in [("fifo", None), ("las", Some(SimDuration::from_secs(300)))] {
        let mut walls = Vec::new();
        let mut events = 0;
        for _ in 0..repeats {
            let built = build(
                policy,
                &PolicyOptions {
                    round,
                    ..PolicyOptions::default()
                },
            )
            .expect("policy");
            let config = SimConfig {
                record_timeseries: false,
                ..SimConfig::default()
            };
            let started = Instant::now();
            let report = Simulation::new(&cluster, &workload, &TraceThroughput, built, config)
                .run(&mut ())
                .expect("run");
            walls.push(started.elapsed().as_secs_f64());
            events = report.summary.events;
        }
        walls.sort_by(f64::total_cmp);
        let median = walls[walls.len() / 2];
        println!(
            "{policy}: median {median:.4} s [{:.4}-{:.4}] over {repeats}, {events} events, {:.2} M events/s",
            walls[0],
            walls[walls.len() - 1],
            events as f64 / median / 1e6
        );
    }
}
