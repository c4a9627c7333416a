//! One policy's run on the mixed world, as `tessera simulate` runs it without `--policy`:
//! the truth `--perf auto` picks for `builtin:mixed`, the policy's serving setup, and the
//! workload relaxed to what the policy honours (as `--ignore-unsupported`), with the requests
//! of services it was not given counted as dropped. `tessera repro tessera` runs through
//! here; a CLI test checks that it gives the default run's figures.

use std::sync::Arc;

use tessera_model::{Cluster, SimDuration, Workload};
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, SimReport, Simulation};

use crate::capabilities::{check_support, dropped_services, relax, CheckOptions, Ignored};
use crate::experiment::ExperimentError;
use crate::{build_policy, build_truth, run_profiler, serving_setup, Truth, TruthOptions};

/// The default profiling cost of `tessera simulate` (`--profile-cost 60`).
pub const PROFILE_COST: SimDuration = SimDuration::from_secs(60);

/// The truth `--perf auto` picks for the mixed world from `trace_source` and the inputs, and
/// why; `None` = the trace's throughput.
pub fn auto_truth(
    trace_source: &str,
    cluster: &Cluster,
    workload: &Workload,
) -> Result<(Option<Truth>, String), String> {
    let auto = crate::auto_truth(trace_source, cluster, workload);
    let truth = match auto.truth {
        Some(name) => Some(
            build_truth(name, &truth_options())
                .ok_or_else(|| format!("truth {name} is registered but does not build"))?,
        ),
        None => None,
    };
    Ok((truth, auto.why))
}

/// The profilers' knobs of the default run.
pub fn truth_options() -> TruthOptions {
    TruthOptions {
        profile_cost: Some(PROFILE_COST),
        ..TruthOptions::default()
    }
}

/// What one policy's run gave, with what it ignored.
#[derive(Debug)]
pub struct WorldRun {
    /// The simulator's report (summary with every service, removed ones counted).
    pub report: SimReport,
    /// What the policy would not honour and how the run dealt with it; empty when nothing.
    pub ignored: Vec<Ignored>,
}

/// Runs `policy` on `workload` (seed `seed`: the policy's options, profiling and the
/// services' arrivals) as the default `tessera simulate` does.
pub fn run_policy(
    cluster: &Cluster,
    workload: &Workload,
    truth: Option<&Truth>,
    policy: &str,
    seed: u64,
) -> Result<WorldRun, ExperimentError> {
    let options = PolicyOptions { round: None, seed };
    let built = build_policy(policy, &options)?;
    let setup = serving_setup(policy)
        .transpose()
        .map_err(|e| ExperimentError::Other(format!("{policy}: its serving setup: {e}")))?;
    let check = CheckOptions::default();
    let missing = check_support(policy, cluster, workload, &check)?;
    let relaxed = if missing.is_empty() {
        None
    } else {
        Some(relax(policy, cluster, workload, &check)?)
    };
    let trace_truth = Truth {
        name: "trace",
        model: Arc::new(tessera_perf::TraceThroughput),
        profiler: None,
    };
    let truth = truth.unwrap_or(&trace_truth);
    let mut config = SimConfig {
        profiler: run_profiler(policy, truth, &truth_options()),
        profile_seed: seed,
        // Every policy is offered the same requests (the seed draws them), with a serving
        // setup of its mechanism's or without, as in `simulate`.
        serving: tessera_sim::ServingConfig {
            seed,
            ..tessera_sim::ServingConfig::default()
        },
        ..SimConfig::default()
    };
    let run_workload = relaxed.as_ref().map_or(workload, |r| &r.workload);
    if let Some(r) = &relaxed {
        config.rejected = Arc::new(r.rejected.iter().cloned().collect());
    }
    let mut model = Arc::clone(&truth.model);
    if let Some(s) = &setup {
        s.apply(&mut config, run_workload, seed);
        // As `simulate` without `--perf`: a setup's training truth wins.
        if let Some(t) = &s.truth {
            config.profiler = None;
            model = Arc::clone(t);
        }
    }
    let serving_seed = seed;
    let mut report = Simulation::new(cluster, run_workload, model.as_ref(), built, config)
        .run(&mut ())
        .map_err(|source| ExperimentError::Sim {
            context: format!("{policy}, seed {seed}"),
            source,
        })?;
    if run_workload.services().is_empty() && report.summary.services.is_empty() {
        report.summary.services = dropped_services(workload, policy, serving_seed);
    }
    Ok(WorldRun {
        report,
        ignored: relaxed.map(|r| r.ignored).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tessera::world::cluster_yaml;
    use crate::tessera::world_workload::MixedWorkload;

    /// The default run under `tessera` finishes every job. With `mig-any` jobs taken off MISO
    /// whenever they were running whole, a job MISO had started whole alone on a GPU left
    /// MISO's view still promised to it; preempted by the training piece, it was queued for
    /// ever (small-116 of seed 1: "the run cannot progress" at 93 h).
    #[test]
    fn the_default_run_finishes_every_job_under_tessera() {
        let cluster =
            Cluster::from_yaml(&cluster_yaml(), &tessera_model::GpuCatalog::builtin()).unwrap();
        let workload = MixedWorkload::default().generate().unwrap();
        let (truth, _) = auto_truth("builtin:mixed", &cluster, &workload).unwrap();
        let run = run_policy(&cluster, &workload, truth.as_ref(), "tessera", 1).unwrap();
        assert_eq!(run.report.summary.finished, workload.len());
    }
}
