//! Crius (Xue et al., arXiv 2403.16125): heterogeneous GPUs, adaptive parallelism, cells.
//!
//! - The analytic model and the cells (optimal, proxy, DP-only views) are shared with other
//!   planners in `crate::crius::cells`.
//! - [`perf`]: the truth (`--perf crius`: the optimal view of an allocation's cell, honouring
//!   its plan) and the estimator that attaches each job's proxy and DP-only estimates.
//! - [`policy`]: `crius` and its ablations (`crius-no-shrink`, `crius-no-typechange`,
//!   `crius-no-opportunistic`, `crius-no-migration`, `crius-dp-only`), and the `fcfs`
//!   baseline.
//! - [`workload`]: the 1,280-GPU cluster (`builtin:crius-1280`) and the seeded Philly-derived
//!   large-model generator (`--generator crius`, `builtin:crius-1900`).
//! - `repro` (feature `experiments`): `tessera repro crius`, `tessera bench crius`.

use std::sync::Arc;

use tessera_sched::{Capabilities, Capability, Policy, PolicyInfo, PolicyOptions};

use crate::{
    BuiltinCluster, BuiltinWorkload, GeneratorOptions, Mechanism, Truth, TruthInfo, TruthOptions,
    WorkloadGenerator,
};

pub mod arena;
pub mod cells;
pub mod perf;
pub mod policy;
pub mod workload;

#[cfg(feature = "experiments")]
pub mod repro;

use policy::{CriusOptions, CriusPolicy, Fcfs};

/// What Crius's policies (and `fcfs`) honour: CPU and memory go in proportion to GPUs,
/// whatever a job states.
pub const CAPABILITIES: Capabilities = Capabilities::TRAINING
    .without(Capability::CpuMemory)
    .with(Capability::Failures);

/// The policies of this mechanism.
pub const POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "crius",
        about: "Crius: cells on heterogeneous GPUs, shrink/type-change search, opportunistic runs, upgrades",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "crius-no-shrink",
        about: "Crius without shrink steps",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "crius-no-typechange",
        about: "Crius without type changes (jobs stay on their requested type)",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "crius-no-opportunistic",
        about: "Crius with a blocking queue (no opportunistic runs)",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "crius-no-migration",
        about: "Crius without defragmentation by migration",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "crius-dp-only",
        about: "Crius seeing only data-parallel cells",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "fcfs",
        about: "first come, first served over 300 s rounds, on the requested GPU type and count",
        capabilities: CAPABILITIES,
    },
];

fn perf_counts() -> impl Iterator<Item = u32> {
    crate::crius::cells::CELL_COUNTS.into_iter()
}

/// The Crius mechanism.
#[derive(Clone, Copy, Debug)]
pub struct Crius;

impl Mechanism for Crius {
    fn name(&self) -> &'static str {
        "crius"
    }

    fn about(&self) -> &'static str {
        "Crius (arXiv 2403.16125): heterogeneous GPUs and adaptive parallelism through cells"
    }

    fn policies(&self) -> &'static [PolicyInfo] {
        POLICIES
    }

    fn build_policy(&self, name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>> {
        let round = options.round.unwrap_or(policy::ROUND);
        let full = CriusOptions::FULL;
        let (name, opts) = match name.to_ascii_lowercase().as_str() {
            "fcfs" => return Some(Box::new(Fcfs::new(round))),
            "crius" => ("crius", full),
            "crius-no-shrink" => (
                "crius-no-shrink",
                CriusOptions {
                    shrink: false,
                    ..full
                },
            ),
            "crius-no-typechange" => (
                "crius-no-typechange",
                CriusOptions {
                    type_change: false,
                    ..full
                },
            ),
            "crius-no-opportunistic" => (
                "crius-no-opportunistic",
                CriusOptions {
                    opportunistic: false,
                    ..full
                },
            ),
            "crius-no-migration" => (
                "crius-no-migration",
                CriusOptions {
                    migration: false,
                    ..full
                },
            ),
            "crius-dp-only" => (
                "crius-dp-only",
                CriusOptions {
                    dp_only: true,
                    ..full
                },
            ),
            _ => return None,
        };
        Some(Box::new(CriusPolicy::new(name, opts, round)))
    }

    fn truths(&self) -> &'static [TruthInfo] {
        &[TruthInfo {
            name: "crius",
            about: "analytic large-model cells (optimal view of the allocation's cell and plan); jobs get proxy and DP-only estimates",
        }]
    }

    fn build_truth(&self, name: &str, _options: &TruthOptions) -> Option<Truth> {
        name.eq_ignore_ascii_case("crius").then(|| Truth {
            name: "crius",
            model: Arc::new(perf::CellThroughput::default()),
            profiler: Some(Arc::new(perf::CellEstimator::default())),
        })
    }

    fn model_key(&self, canonical: &str) -> Option<String> {
        perf::large_model(canonical).map(|_| canonical.to_string())
    }

    fn preferred_truth(&self) -> Option<&'static str> {
        Some("crius")
    }

    /// Every job's model is a large model of the cell model (any GPU type of the catalog).
    fn covers(
        &self,
        _cluster: &tessera_model::Cluster,
        workload: &tessera_model::Workload,
    ) -> bool {
        !workload.jobs().is_empty()
            && workload
                .jobs()
                .iter()
                .all(|j| crate::crius::cells::LargeModel::from_name(&j.model).is_some())
    }

    /// The Crius policies pick cells from the estimator's views; `fcfs` reads none.
    fn policy_profiler(
        &self,
        policy: &str,
        _options: &TruthOptions,
    ) -> Option<Arc<dyn tessera_perf::Profiler>> {
        let ours = self
            .build_policy(policy, &PolicyOptions::default())
            .is_some();
        (ours && !policy.eq_ignore_ascii_case("fcfs"))
            .then(|| Arc::new(perf::CellEstimator::default()) as Arc<dyn tessera_perf::Profiler>)
    }

    fn clusters(&self) -> &'static [BuiltinCluster] {
        &[BuiltinCluster {
            name: "crius-1280",
            about: "Crius's 1,280 GPUs: 80x4 A100-40GB, 20x16 V100-32GB, 160x2 A40, 160x2 A10",
            yaml: || workload::CLUSTER_YAML.to_string(),
        }]
    }

    fn workloads(&self) -> &'static [BuiltinWorkload] {
        &[BuiltinWorkload {
            name: "crius-1900",
            about:
                "1,900 large-model jobs (WideResNet, BERT, MoE), Philly runtimes, 150 jobs/h, seeded",
            generate: |seed| {
                workload::generate(workload::DEFAULT_JOBS, workload::DEFAULT_LOAD, seed)
            },
        }]
    }

    fn generators(&self) -> &'static [WorkloadGenerator] {
        &[WorkloadGenerator {
            name: "crius",
            about: "Crius-style large-model jobs on the crius-1280 cluster's GPU types (--jobs, --load jobs/h, --seed)",
            variants: &[],
            generate: |o: &GeneratorOptions| {
                crate::check_generator_options(o)?;
                let jobs = if o.jobs == 0 {
                    workload::DEFAULT_JOBS
                } else {
                    o.jobs
                };
                let load = if o.load > 0.0 {
                    o.load
                } else {
                    workload::DEFAULT_LOAD
                };
                workload::generate(jobs, load, o.seed.unwrap_or(1))
            },
        }]
    }

    #[cfg(feature = "experiments")]
    fn experiments(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&repro::CriusRepro]
    }

    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&repro::CriusBench]
    }
}
