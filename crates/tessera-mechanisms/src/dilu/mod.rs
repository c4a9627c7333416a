//! Dilu (Lv et al., ASPLOS'25, arXiv 2503.05130): serverless inference and training on GPU
//! quotas (SM request / limit / memory), resourcing-complementary packing, introspective
//! profiling and 2D co-scaling.
//!
//! The packing half:
//! - [`table`]: inference batch latency vs (batch, share), from the authors' measurements;
//! - [`truth`]: training throughput vs share with a saturation knee;
//! - [`vertical`]: effective shares on a GPU and the overflow controller (vertical scaling),
//!   as pure state machines for the serving simulator;
//! - [`series`]: per-second request-rate series (bursty, periodic, sporadic);
//! - [`profile`]: the training binary search and the inference Hybrid Growth Search;
//! - [`instances`]: packing workloads (the artifact's `instances-N` files, a seeded
//!   generator);
//! - [`packing`]: the pure placement and admission rules of Exclusive, INFless-l, INFless-r
//!   and Dilu, and the packing replay (`tessera repro dilu`, `tessera bench dilu`).
//!
//! The serving half builds on the same rules: [`serving`] (latency tables, quota training
//! truth, the vertical scaler behind the simulator's hook), [`policy`] (the serving policies,
//! horizontal scaling) and [`setup`], what every driver plugs into the simulator for those
//! policies (`Mechanism::serving_setup`) with part (b)'s cluster and workload as built-ins.

use tessera_sched::{Policy, PolicyInfo, PolicyOptions};

use crate::{BuiltinCluster, BuiltinWorkload, Mechanism};

#[cfg(feature = "experiments")]
pub mod experiment;
pub mod instances;
pub mod packing;
pub mod policy;
pub mod profile;
pub mod series;
#[cfg(feature = "experiments")]
mod serve_report;
#[cfg(feature = "experiments")]
pub mod serve_repro;
pub mod serving;
pub mod setup;
pub mod table;
pub mod truth;
pub mod vertical;

/// The Dilu mechanism.
#[derive(Clone, Copy, Debug)]
pub struct Dilu;

impl Mechanism for Dilu {
    fn name(&self) -> &'static str {
        "dilu"
    }

    fn about(&self) -> &'static str {
        "Dilu (ASPLOS'25): GPU quotas (SM request/limit), complementary packing, introspective profiling; `repro dilu` replays the packing workloads"
    }

    fn policies(&self) -> &'static [PolicyInfo] {
        policy::POLICIES
    }

    fn build_policy(&self, name: &str, _options: &PolicyOptions) -> Option<Box<dyn Policy>> {
        policy::DiluServe::by_name(name).map(|p| Box::new(p) as Box<dyn Policy>)
    }

    fn clusters(&self) -> &'static [BuiltinCluster] {
        &[setup::CLUSTER]
    }

    fn model_key(&self, canonical: &str) -> Option<String> {
        serving::table_key(canonical).map(str::to_string)
    }

    fn workloads(&self) -> &'static [BuiltinWorkload] {
        setup::workloads()
    }

    #[cfg(feature = "experiments")]
    fn serving_setup(&self, policy: &str) -> Option<Result<crate::ServingSetup, String>> {
        setup::serving_setup(policy).map(|r| r.map_err(|e| e.to_string()))
    }

    #[cfg(feature = "experiments")]
    fn experiments(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&experiment::DiluRepro]
    }

    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&experiment::DiluBench]
    }

    #[cfg(feature = "experiments")]
    fn replay_formats(&self) -> &'static [crate::experiment::ReplayFormat] {
        &[experiment::INSTANCES_FORMAT]
    }
}
