//! The baselines every comparison needs (DESIGN §5.6): FIFO, SRTF, LAS and FTF with
//! GPU-proportional CPU/memory and consolidated first-fit placement, on the trace's own
//! throughput. The policies themselves are generic building blocks in
//! [`tessera_sched::baselines`] (other mechanisms reuse their orderings).

use tessera_sched::{Policy, PolicyInfo, PolicyOptions};

use crate::Mechanism;

/// The baselines mechanism.
#[derive(Clone, Copy, Debug, Default)]
pub struct Baselines;

impl Mechanism for Baselines {
    fn name(&self) -> &'static str {
        "baselines"
    }

    fn about(&self) -> &'static str {
        "FIFO, SRTF, LAS (Tiresias), FTF (Themis) with GPU-proportional CPU/memory"
    }

    fn policies(&self) -> &'static [PolicyInfo] {
        tessera_sched::baselines::POLICIES
    }

    fn build_policy(&self, name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>> {
        tessera_sched::baselines::build(name, options)
    }

    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&bench::PhillyBench, &bench::EngineBench]
    }
}

#[cfg(feature = "experiments")]
pub mod bench;
