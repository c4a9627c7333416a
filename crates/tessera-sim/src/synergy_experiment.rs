//! One Synergy experiment run (the reference cluster, a Synergy workload, one policy, one
//! engine semantics), measured over the steady-state window. Used by `tessera repro synergy`,
//! `tessera bench synergy` and the repro-ordering test.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tessera_model::{Cluster, SimDuration, Workload};
use tessera_perf::synergy::{
    OptimisticProfiler, ReferenceProfiler, ReferenceSpeedup, SynergyThroughput, TableMode,
};
use tessera_perf::{RestartCosts, ThroughputModel};
use tessera_sched::{build_policy, PolicyError, PolicyOptions};

use crate::engine::{SimConfig, SimError, Simulation};
use crate::metrics::{percentile, JobOutcome, SimReport};
use crate::reference::run_reference;

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

/// The reference cluster as a spec, the one definition of it: 16 servers × 8 GPUs with 24
/// cores and 500 "GB" each. The sensitivity tables' memory axis is read as GiB (their
/// proportional point is 62.5 per GPU), so the server has 500 GiB: written `500G` (SI) it
/// would hold 58.2 GiB per GPU and slow image and speech jobs at the proportional share to
/// 0.907×. The CLI's `builtin:synergy-128` is this text.
pub const REFERENCE_CLUSTER_YAML: &str = "\
# Synergy's reference cluster (OSDI'22 simulator defaults): 16 servers x 8 GPUs, 24 CPUs and
# 500 GB of memory per server; the sensitivity tables' GB are GiB (62.5 per GPU).
apiVersion: tessera/v1
kind: Cluster
metadata:
  name: synergy-128
spec:
  nodeGroups:
    - name: v100
      count: 16
      gpu: V100-32GB
      gpusPerNode: 8
      cpus: 24
      memory: 500Gi
";

/// The reference cluster with `servers` servers (16 = 128 GPUs in the paper's simulations):
/// [`REFERENCE_CLUSTER_YAML`] with its count replaced.
pub fn reference_cluster(servers: u32) -> Cluster {
    let yaml = REFERENCE_CLUSTER_YAML.replace("count: 16", &format!("count: {}", servers.max(1)));
    // A valid spec by construction (pinned by a test); the fallback keeps library code
    // panic-free.
    Cluster::from_yaml(&yaml, &tessera_model::GpuCatalog::builtin()).unwrap_or_else(|_| Cluster {
        name: "empty".into(),
        catalog: tessera_model::GpuCatalog::builtin(),
        groups: Vec::new(),
        nodes: Vec::new(),
    })
}

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
    /// Scheduling points (rounds and events).
    pub scheduling_points: u64,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Policy counters (OPT's solve time and gap).
    pub policy_stats: Vec<(String, f64)>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Unknown policy.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The simulation failed.
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// Runs one policy over `workload` on `cluster`.
pub fn run_one(
    cluster: &Cluster,
    workload: &Workload,
    spec: &RunSpec,
) -> Result<WindowStats, RunError> {
    let policy = build_policy(&spec.policy, &PolicyOptions::default())?;
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
            run_exact(cluster, workload, &truth, policy, config)?
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
            )?
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
        jobs_arrived: report
            .jobs
            .iter()
            .filter(|j| {
                !matches!(&j.outcome, JobOutcome::Unfinished { reason } if reason.starts_with("never arrived"))
            })
            .count(),
        scheduling_points: report.summary.scheduling_points,
        wall_s,
        policy_stats: report.policy_stats.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_cluster_has_the_tables_proportional_share() {
        let c = reference_cluster(16);
        assert_eq!(c.nodes.len(), 16);
        assert_eq!(c.totals().0, 128);
        let g = &c.groups[0];
        assert_eq!(g.cpu.as_cores() / g.gpus_per_node as f64, 3.0);
        assert_eq!(g.memory.as_gib() / g.gpus_per_node as f64, 62.5);
        assert_eq!(reference_cluster(2).nodes.len(), 2);
    }
}
