//! HAP (Zhang et al., EuroSys'24): sharding plans for training on GPUs of different speeds.
//!
//! HAP is a planner, not a scheduling policy: it has no policies or truth models here, only
//! its experiment (`tessera repro hap`) and its speed benchmark (`tessera bench hap`). The
//! planner itself lives in `tessera-plan` (`tessera plan` uses it directly).

use tessera_sched::{Policy, PolicyInfo, PolicyOptions};

use crate::Mechanism;

#[cfg(feature = "experiments")]
pub mod experiment;

/// The HAP mechanism.
#[derive(Clone, Copy, Debug)]
pub struct Hap;

impl Mechanism for Hap {
    fn name(&self) -> &'static str {
        "hap"
    }

    fn about(&self) -> &'static str {
        "HAP (EuroSys'24): sharding plans (data, tensor, expert parallelism with uneven shards) for mixed GPUs; see `tessera plan`"
    }

    fn policies(&self) -> &'static [PolicyInfo] {
        &[]
    }

    fn build_policy(&self, _name: &str, _options: &PolicyOptions) -> Option<Box<dyn Policy>> {
        None
    }

    #[cfg(feature = "experiments")]
    fn experiments(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&experiment::HapRepro]
    }

    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&experiment::HapBench]
    }
}
