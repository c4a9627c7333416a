//! Tessera's own mechanism: the five papers' pieces used together on one cluster (DESIGN §10,
//! "One world"). It copies none of them: each piece is called from its own module.
//!
//! - [`truth`]: the composed truth (`--perf tessera`), a job's rate as the product of each
//!   mechanism's factor, every factor 1.0 at the job's requested allocation.
//! - [`policy`]: the `tessera` policy and its ablations `tessera-no-<mechanism>`.
//! - [`world`]: the built-in mixed cluster and mixed workload the default run uses.

use tessera_sched::{Policy, PolicyInfo, PolicyOptions};

use crate::{
    BuiltinCluster, BuiltinWorkload, Mechanism, Truth, TruthInfo, TruthOptions, WorkloadGenerator,
};

#[cfg(feature = "experiments")]
pub mod bench;
pub mod policy;
#[cfg(feature = "experiments")]
pub mod repro;
pub mod truth;
pub mod world;
#[cfg(feature = "experiments")]
pub mod world_run;
#[cfg(feature = "experiments")]
pub mod world_workload;

/// The composed mechanism (registered last in [`crate::MECHANISMS`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tessera;

impl Mechanism for Tessera {
    fn name(&self) -> &'static str {
        "tessera"
    }

    fn about(&self) -> &'static str {
        "Tessera: Synergy, Crius, HAP, MISO and Dilu together on one mixed cluster (composed truth, the `tessera` policy)"
    }

    fn policies(&self) -> &'static [PolicyInfo] {
        policy::POLICIES
    }

    fn build_policy(&self, name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>> {
        policy::build(name, options)
    }

    fn truths(&self) -> &'static [TruthInfo] {
        truth::TRUTHS
    }

    fn build_truth(&self, name: &str, options: &TruthOptions) -> Option<Truth> {
        truth::build(name, options)
    }

    /// The composed truth, for the built-in mixed workloads (and, through
    /// [`crate::DEFAULT_TRUTH`], for every input no single paper's tables cover).
    fn preferred_truth(&self) -> Option<&'static str> {
        Some(truth::NAME)
    }

    /// The `tessera` policies read the composed estimates, Synergy's sensitivity and Crius's
    /// cells ([`truth::policy_profiler`]).
    fn policy_profiler(
        &self,
        policy: &str,
        options: &TruthOptions,
    ) -> Option<std::sync::Arc<dyn tessera_perf::Profiler>> {
        truth::policy_profiler(policy, options)
    }

    fn clusters(&self) -> &'static [BuiltinCluster] {
        world::CLUSTERS
    }

    fn workloads(&self) -> &'static [BuiltinWorkload] {
        world::WORKLOADS
    }

    fn generators(&self) -> &'static [WorkloadGenerator] {
        world::GENERATORS
    }

    #[cfg(feature = "experiments")]
    fn experiments(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&repro::TesseraRepro]
    }

    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&bench::TesseraBench]
    }

    #[cfg(feature = "experiments")]
    fn serving_setup(&self, policy: &str) -> Option<Result<crate::ServingSetup, String>> {
        policy::serving_setup(policy)
    }
}
