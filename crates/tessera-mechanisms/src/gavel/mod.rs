//! Heterogeneity-aware baselines on Gavel's throughput matrix: Gavel (Narayanan et al.,
//! OSDI'20), Sia (Jayaram Subramanya et al., SOSP'23) and ElasticFlow-style elastic scaling.
//!
//! - [`matrix`]: Gavel's `simulation_throughputs.json` (typed parse errors), the `gavel`
//!   truth model (throughput by job type, GPU type and count) and the profiler that attaches
//!   [`ConfigEstimates`](tessera_perf::ConfigEstimates) for every (GPU type, count) to each
//!   arriving job. The policies read only those estimates.
//! - [`policy`]: `gavel` (max-min fairness) and `gavel-max-sum` (max-sum throughput): an LP
//!   allocation matrix realised in 360 s rounds.
//! - [`sia`]: `sia`, a 60 s ILP over (job, GPU type, count) configurations.
//! - [`elastic`]: `elastic`, type-agnostic elastic scaling.
//! - `builtin:gavel-108`: 36 K80 + 36 P100 + 36 V100 GPUs.
//!
//! See docs/gavel.md.

use std::sync::Arc;

use tessera_sched::{Capabilities, Capability, Policy, PolicyInfo, PolicyOptions};

use crate::{BuiltinCluster, Mechanism, Truth, TruthInfo, TruthOptions};

#[cfg(feature = "experiments")]
pub mod bench;
mod common;
pub mod elastic;
pub mod matrix;
pub mod policy;
pub mod sia;
pub mod solve;

pub use matrix::{GavelMatrix, GavelThroughput, JobTypeKey, MatrixError, MatrixProfiler};
pub use policy::{GavelPolicy, Objective};

/// The heterogeneity-aware baselines mechanism.
#[derive(Clone, Copy, Debug, Default)]
pub struct Gavel;

/// What Gavel, Sia and elastic honour: every training request (the ledger places explicit
/// CPU/memory in proportion to the GPUs a configuration holds) and failures.
const CAPABILITIES: Capabilities = Capabilities::TRAINING.with(Capability::Failures);

const POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "gavel",
        about: "Gavel (OSDI'20): LP allocation over GPU types, max-min fairness on normalised throughput, realised in 360 s rounds",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "gavel-max-sum",
        about: "Gavel with the max-sum-throughput objective (normalised throughput)",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "sia",
        about: "Sia (SOSP'23): every 60 s an ILP over (job, GPU type, count) maximising Σ goodput^-0.5 terms, restart penalty, solver time limit",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "elastic",
        about: "ElasticFlow-style elastic scaling, type-agnostic: FIFO admission at 1 GPU, spare GPUs to the best marginal speed-up",
        capabilities: CAPABILITIES,
    },
];

impl Mechanism for Gavel {
    fn name(&self) -> &'static str {
        "gavel"
    }

    fn about(&self) -> &'static str {
        "heterogeneity-aware baselines on Gavel's throughput matrix: Gavel (OSDI'20), Sia (SOSP'23), elastic scaling"
    }

    fn policies(&self) -> &'static [PolicyInfo] {
        POLICIES
    }

    fn build_policy(&self, name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>> {
        match name.to_ascii_lowercase().as_str() {
            "gavel" => Some(Box::new(GavelPolicy::new(
                "gavel",
                Objective::MaxMinFairness,
                options.round,
            ))),
            "gavel-max-sum" => Some(Box::new(GavelPolicy::new(
                "gavel-max-sum",
                Objective::MaxSumThroughput,
                options.round,
            ))),
            "sia" => Some(Box::new(sia::SiaPolicy::new(options.round))),
            "elastic" => Some(Box::new(elastic::ElasticPolicy::new(options.round))),
            _ => None,
        }
    }

    fn truths(&self) -> &'static [TruthInfo] {
        &[TruthInfo {
            name: "gavel",
            about: "Gavel's throughput matrix (K80/P100/V100 × job type × GPUs; co-location ignored); jobs are profiled exactly and for free on arrival; unknown job or GPU types run at their trace throughput",
        }]
    }

    fn build_truth(&self, name: &str, options: &TruthOptions) -> Option<Truth> {
        if !name.eq_ignore_ascii_case("gavel") {
            return None;
        }
        let matrix = GavelMatrix::builtin();
        let mut profiler = MatrixProfiler::new(matrix.clone());
        // Gavel's simulator knows the matrix: profiling is free unless an error is asked for
        // (`--profile-cost` is the Synergy profiler's, not applied here).
        profiler.rel_error = options.profile_error;
        Some(Truth {
            name: "gavel",
            model: Arc::new(GavelThroughput::new(matrix)),
            profiler: Some(Arc::new(profiler)),
        })
    }

    fn model_key(&self, canonical: &str) -> Option<String> {
        matrix::table_key(canonical).map(str::to_string)
    }

    fn preferred_truth(&self) -> Option<&'static str> {
        Some("gavel")
    }

    /// Every job's type is in the matrix and every GPU type of the cluster is one of its.
    fn covers(&self, cluster: &tessera_model::Cluster, workload: &tessera_model::Workload) -> bool {
        let matrix = GavelMatrix::builtin();
        !workload.jobs().is_empty()
            && workload
                .jobs()
                .iter()
                .all(|j| matrix.knows(&JobTypeKey::of_job(j)))
            && !cluster.groups.is_empty()
            && cluster.groups.iter().all(|g| {
                matrix
                    .matrix_type(&cluster.catalog.get(g.gpu).name)
                    .is_some()
            })
    }

    /// Every Gavel policy allocates by the matrix rows its profiler attaches.
    fn policy_profiler(
        &self,
        policy: &str,
        options: &TruthOptions,
    ) -> Option<Arc<dyn tessera_perf::Profiler>> {
        self.build_policy(policy, &PolicyOptions::default())?;
        let mut profiler = MatrixProfiler::new(GavelMatrix::builtin());
        profiler.rel_error = options.profile_error;
        Some(Arc::new(profiler))
    }

    fn clusters(&self) -> &'static [BuiltinCluster] {
        &[BuiltinCluster {
            name: "gavel-108",
            about: "Gavel's simulated cluster: 36 K80 + 36 P100 + 36 V100 (9 servers x 4 GPUs of each type)",
            yaml: gavel_108_yaml,
        }]
    }

    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&bench::GavelBench]
    }
}

/// `builtin:gavel-108`: 36 GPUs of each of K80, P100 and V100 (16 GB, as Gavel's V100s).
pub fn gavel_108_yaml() -> String {
    let group = |name: &str, gpu: &str| {
        format!(
            "    - name: {name}\n      count: 9\n      gpu: {gpu}\n      gpusPerNode: 4\n      cpus: 32\n      memory: 244Gi\n"
        )
    };
    format!(
        "# Gavel's simulated heterogeneous cluster (OSDI'20): 36 K80 + 36 P100 + 36 V100.\n\
         apiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: gavel-108\nspec:\n  nodeGroups:\n{}{}{}",
        group("k80", "K80"),
        group("p100", "P100"),
        group("v100", "V100-16GB")
    )
}

#[cfg(test)]
mod tests;
