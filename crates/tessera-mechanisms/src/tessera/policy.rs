//! The `tessera` policy and its ablations. Owned by the policy work of issue 37.

use tessera_sched::{Policy, PolicyInfo, PolicyOptions};

/// The policies this module registers.
pub const POLICIES: &[PolicyInfo] = &[];

/// Builds one of [`POLICIES`] by name (case-insensitive).
pub fn build(_name: &str, _options: &PolicyOptions) -> Option<Box<dyn Policy>> {
    None
}

/// What the simulator needs to run one of [`POLICIES`] (services' latency truth, quota
/// controller); `None` when the name is not one of them.
#[cfg(feature = "experiments")]
pub fn serving_setup(_policy: &str) -> Option<Result<crate::ServingSetup, String>> {
    None
}
