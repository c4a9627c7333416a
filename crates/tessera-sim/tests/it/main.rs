//! Integration tests of the simulator: hand-computed scenarios and randomized invariants.

mod chaos;
mod devices;
mod failures;
mod invariants;
mod progress;
mod reasons;
mod scenarios;
mod serving;
mod waits_golden;

use tessera_model::{Bytes, Cluster, MilliCpu, SimDuration, SimTime, TrainingJob, Workload};
use tessera_perf::{RestartCosts, TraceThroughput};
use tessera_sched::baselines::build as build_policy;
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, SimReport, Simulation};

/// One node with `gpus` V100s, 24 cores and 256 GiB.
pub fn one_node(gpus: u32) -> Cluster {
    Cluster::homogeneous(
        "V100-32GB",
        1,
        gpus,
        MilliCpu::from_cores(24),
        Bytes::from_gib(256),
    )
    .unwrap()
}

/// A job submitted at `submit` s asking for `gpus` GPUs for `secs` seconds.
pub fn job(name: &str, submit: u64, gpus: u32, secs: u64) -> TrainingJob {
    let mut j = TrainingJob::simple(
        0,
        SimTime::from_secs(submit),
        gpus,
        SimDuration::from_secs(secs),
    );
    j.name = name.into();
    j
}

/// Runs `policy` with free restarts unless `costs` says otherwise.
pub fn run(
    cluster: &Cluster,
    jobs: Vec<TrainingJob>,
    policy: &str,
    round: Option<u64>,
    costs: RestartCosts,
) -> SimReport {
    let workload = Workload::new(jobs);
    let policy = build_policy(
        policy,
        &PolicyOptions {
            round: round.map(SimDuration::from_secs),
            ..PolicyOptions::default()
        },
    )
    .unwrap();
    let config = SimConfig {
        restart_costs: costs,
        ..SimConfig::default()
    };
    Simulation::new(cluster, &workload, &TraceThroughput, policy, config)
        .run(&mut ())
        .unwrap()
}

/// JCT in seconds of each job, by name.
pub fn jcts(report: &SimReport) -> Vec<(String, f64)> {
    report
        .jobs
        .iter()
        .map(|j| (j.name.to_string(), j.jct_secs().unwrap_or(f64::NAN)))
        .collect()
}
