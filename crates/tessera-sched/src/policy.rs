//! The [`Policy`] trait and the registry that builds policies by name.

use tessera_model::SimDuration;
use thiserror::Error;

use crate::baselines::{JobOrder, OrderedPolicy};
use crate::view::{Action, ClusterView};

/// A scheduling policy: given a view of the world, decide what to start, stop or move.
///
/// Contract (the simulator and the daemon both honour it):
/// - `schedule` is called once per scheduling point, after every event at that instant has
///   been applied; `view.now` never decreases between calls.
/// - If [`round_length`](Policy::round_length) is `Some(d)`, the driver also calls at every
///   multiple of `d` with `trigger.round` set; at other calls a policy should not preempt.
/// - Actions are applied in order; each must fit in what is free after the previous ones
///   (a `Preempt` frees the job's resources for later actions of the same batch). A driver
///   rejects an action that would over-allocate and reports it as a policy bug.
/// - Policies read no clock, no entropy and no files: everything comes in through `view`.
pub trait Policy: Send {
    /// The registry name this policy was built from, e.g. `las`.
    fn name(&self) -> &str;

    /// Length of the periodic round this policy wants, if any.
    fn round_length(&self) -> Option<SimDuration>;

    /// Appends this scheduling point's decisions to `actions` (which arrives empty).
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>);
}

/// Options shared by the policies the registry builds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyOptions {
    /// Periodic round length; `None` = re-plan at every event.
    pub round: Option<SimDuration>,
}

/// A policy name that the registry does not know, or options it cannot take.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// No policy of that name.
    #[error("unknown policy {name:?} (known: {known})")]
    Unknown {
        /// The name as given.
        name: String,
        /// Known names, comma-separated.
        known: String,
    },
}

/// One registry entry: a name and what it does.
#[derive(Clone, Copy, Debug)]
pub struct PolicyInfo {
    /// Name accepted by [`build_policy`].
    pub name: &'static str,
    /// One-line description for `--help` and listings.
    pub about: &'static str,
}

/// Every policy the registry can build.
pub const POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "fifo",
        about: "first in, first out; non-preemptive, with backfill",
    },
    PolicyInfo {
        name: "srtf",
        about: "shortest remaining time first; preemptive",
    },
    PolicyInfo {
        name: "las",
        about: "least attained GPU-service first (Tiresias-style); preemptive",
    },
    PolicyInfo {
        name: "ftf",
        about: "finish-time fairness (Themis): largest rho first; preemptive",
    },
];

/// Builds a policy by registry name (case-insensitive).
pub fn build_policy(name: &str, options: &PolicyOptions) -> Result<Box<dyn Policy>, PolicyError> {
    let order = match name.to_ascii_lowercase().as_str() {
        "fifo" => JobOrder::Fifo,
        "srtf" => JobOrder::Srtf,
        "las" => JobOrder::Las,
        "ftf" => JobOrder::Ftf,
        _ => {
            return Err(PolicyError::Unknown {
                name: name.to_string(),
                known: POLICIES
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    };
    Ok(Box::new(OrderedPolicy::new(order, options.round)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_builds_every_listed_policy() {
        for p in POLICIES {
            let built = build_policy(p.name, &PolicyOptions::default()).unwrap();
            assert_eq!(built.name(), p.name);
        }
        assert!(build_policy("LAS", &PolicyOptions::default()).is_ok());
        let err = build_policy("lottery", &PolicyOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("lottery") && err.contains("fifo"), "{err}");
    }
}
