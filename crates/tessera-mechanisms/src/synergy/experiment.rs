//! One Synergy experiment run (the reference cluster, a Synergy workload, one policy, one
//! engine semantics), measured over the steady-state window. Used by `tessera repro synergy`,
//! `tessera bench synergy` and the repro-ordering test.

use std::sync::Arc;
use std::time::Instant;

use super::perf::{
    OptimisticProfiler, ReferenceProfiler, ReferenceSpeedup, SynergyThroughput, TableMode,
};
use serde::Serialize;
use tessera_model::{Cluster, SimDuration, Workload};
use tessera_perf::{RestartCosts, ThroughputModel};
use tessera_sched::PolicyOptions;

use crate::experiment::ExperimentError;

use super::reference::run_reference;
use tessera_sim::metrics::{percentile, JobOutcome, SimReport};
use tessera_sim::{SimConfig, SimError, Simulation};

/// Which engine semantics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Semantics {
    /// Our exact engine: progress at the true (table) rate, completions inside rounds,
    /// optimistic profiling (60 s, estimated memory sensitivity).
    Exact,
    /// The reference simulator's: 300 s leases, credit at placement, completion at round end,
    /// scalar speed-ups, exact free profiles.
    Synergy,
}

impl Semantics {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Semantics::Exact => "exact",
            Semantics::Synergy => "synergy",
        }
    }
}

pub use super::reference_cluster;

/// Knobs of one run.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Registry name, e.g. `fifo+tune`.
    pub policy: String,
    /// Engine semantics.
    pub semantics: Semantics,
    /// Measurement window of job ids.
    pub window: (u32, u32),
    /// Profiling cost (exact semantics).
    pub profile_cost: SimDuration,
    /// Profiling relative error (exact semantics).
    pub profile_error: f64,
    /// Seed of profiling noise.
    pub seed: u64,
    /// Charge checkpoint/restore costs on re-allocation (exact semantics; the reference has
    /// none).
    pub restart_costs: bool,
}

/// Figures of one run over its window.
#[derive(Clone, Debug, Serialize)]
pub struct WindowStats {
    /// Policy.
    pub policy: String,
    /// Semantics.
    pub semantics: Semantics,
    /// Window jobs that finished.
    pub finished: usize,
    /// Window jobs in total.
    pub window_jobs: usize,
    /// Mean JCT of finished window jobs, seconds.
    pub avg_jct_s: f64,
    /// p99 JCT, seconds.
    pub p99_jct_s: f64,
    /// Last window completion − first window arrival, seconds.
    pub makespan_s: f64,
    /// Mean speed-up over proportional of window jobs (time-weighted per job).
    pub avg_speedup: f64,
    /// Jobs that arrived before the run stopped.
    pub jobs_arrived: usize,
    /// Every job of the workload had arrived before the window drained: the last window jobs
    /// ran without the arrivals an unbounded stream (the reference's) would have added, so
    /// the figures are not those of the reference (generate more jobs).
    pub arrivals_ran_out: bool,
    /// Scheduling points (rounds and events).
    pub scheduling_points: u64,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Policy counters (OPT's solve time and gap).
    pub policy_stats: Vec<(String, f64)>,
}

/// Runs one policy over `workload` on `cluster`.
pub fn run_one(
    cluster: &Cluster,
    workload: &Workload,
    spec: &RunSpec,
) -> Result<WindowStats, ExperimentError> {
    let policy = crate::build_policy(&spec.policy, &PolicyOptions::default())?;
    let sim_err = |source| ExperimentError::Sim {
        context: format!("{} ({} engine)", spec.policy, spec.semantics.name()),
        source,
    };
    let started = Instant::now();
    let report = match spec.semantics {
        Semantics::Exact => {
            let truth = SynergyThroughput::new(TableMode::PerGpuCount);
            let config = SimConfig {
                restart_costs: if spec.restart_costs {
                    RestartCosts::default()
                } else {
                    RestartCosts::free()
                },
                record_timeseries: false,
                profiler: Some(Arc::new(OptimisticProfiler {
                    cost: spec.profile_cost,
                    rel_error: spec.profile_error,
                    ..OptimisticProfiler::default()
                })),
                profile_seed: spec.seed,
                stop_after_window: Some(spec.window),
                ..SimConfig::default()
            };
            run_exact(cluster, workload, &truth, policy, config).map_err(sim_err)?
        }
        Semantics::Synergy => {
            let config = SimConfig {
                record_timeseries: false,
                profiler: Some(Arc::new(ReferenceProfiler)),
                stop_after_window: Some(spec.window),
                ..SimConfig::default()
            };
            run_reference(
                cluster,
                workload,
                &ReferenceSpeedup::default(),
                policy,
                &config,
            )
            .map_err(sim_err)?
        }
    };
    let wall_s = started.elapsed().as_secs_f64();
    Ok(window_stats(&report, spec, wall_s))
}

fn run_exact(
    cluster: &Cluster,
    workload: &Workload,
    truth: &dyn ThroughputModel,
    policy: Box<dyn tessera_sched::Policy>,
    config: SimConfig,
) -> Result<SimReport, SimError> {
    Simulation::new(cluster, workload, truth, policy, config).run(&mut ())
}

fn window_stats(report: &SimReport, spec: &RunSpec, wall_s: f64) -> WindowStats {
    let (lo, hi) = spec.window;
    let win: Vec<_> = report
        .jobs
        .iter()
        .filter(|j| (lo..hi).contains(&j.job.0))
        .collect();
    let mut jcts: Vec<f64> = win.iter().filter_map(|j| j.jct_secs()).collect();
    jcts.sort_by(f64::total_cmp);
    let avg = if jcts.is_empty() {
        0.0
    } else {
        jcts.iter().sum::<f64>() / jcts.len() as f64
    };
    let first = win.iter().map(|j| j.submit).min();
    let last = win.iter().filter_map(|j| j.finish).max();
    let makespan_s = match (first, last) {
        (Some(f), Some(l)) => l.saturating_since(f).as_secs_f64(),
        _ => 0.0,
    };
    let speedups: Vec<f64> = win.iter().filter_map(|j| j.speedup).collect();
    let jobs_arrived = report
        .jobs
        .iter()
        .filter(|j| {
            !matches!(&j.outcome, JobOutcome::Unfinished { reason } if reason.starts_with("never arrived"))
        })
        .count();
    let last_arrival = report.jobs.iter().map(|j| j.submit).max();
    let arrivals_ran_out = jobs_arrived == report.jobs.len()
        && matches!((last_arrival, last), (Some(a), Some(l)) if a < l);
    WindowStats {
        policy: report.policy.clone(),
        semantics: spec.semantics,
        finished: jcts.len(),
        window_jobs: win.len(),
        avg_jct_s: avg,
        p99_jct_s: percentile(&jcts, 99.0),
        makespan_s,
        avg_speedup: if speedups.is_empty() {
            1.0
        } else {
            speedups.iter().sum::<f64>() / speedups.len() as f64
        },
        jobs_arrived,
        arrivals_ran_out,
        scheduling_points: report.summary.scheduling_points,
        wall_s,
        policy_stats: report.policy_stats.clone(),
    }
}
