//! The [`Policy`] trait and the registry that builds policies by name.

use tessera_model::SimDuration;
use thiserror::Error;

use crate::baselines::{JobOrder, OrderedPolicy};
use crate::synergy::{Mechanism, SynergyPolicy};
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

    /// Policy-specific counters for the run report (e.g. solver time and optimality gap of
    /// LP-based policies), as (name, value) pairs in a fixed order. Default: none.
    fn stats(&self) -> Vec<(String, f64)> {
        Vec::new()
    }

    /// Called once, before the first scheduling point, by a driver that runs the Synergy
    /// reference simulator's round semantics (`--semantics synergy`): policies that follow the
    /// reference differently there (ranking keys, demotion, placement) switch now. Default:
    /// nothing changes.
    fn use_reference_semantics(&mut self) {}
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

/// Synergy (issue 3): every ordering composed with a CPU/memory allocation mechanism, named
/// `ORDER+MECH` with ORDER in fifo|srtf|las|ftf and MECH in proportional|greedy|tune|opt; they
/// re-plan every round (default [`SYNERGY_ROUND`]). `synergy` alone means `fifo+tune`. Kept
/// apart from [`POLICIES`] so that default comparisons stay the four baselines.
pub const SYNERGY_POLICIES: &[&str] = &[
    "fifo+proportional",
    "fifo+greedy",
    "fifo+tune",
    "fifo+opt",
    "srtf+proportional",
    "srtf+greedy",
    "srtf+tune",
    "srtf+opt",
    "las+proportional",
    "las+greedy",
    "las+tune",
    "las+opt",
    "ftf+proportional",
    "ftf+greedy",
    "ftf+tune",
    "ftf+opt",
];

/// Round length of Synergy policies when none is given: the reference's 300 s leases.
pub const SYNERGY_ROUND: SimDuration = SimDuration::from_secs(300);

fn parse_order(s: &str) -> Option<JobOrder> {
    Some(match s {
        "fifo" => JobOrder::Fifo,
        "srtf" => JobOrder::Srtf,
        "las" => JobOrder::Las,
        "ftf" => JobOrder::Ftf,
        _ => return None,
    })
}

/// Builds a policy by registry name (case-insensitive).
pub fn build_policy(name: &str, options: &PolicyOptions) -> Result<Box<dyn Policy>, PolicyError> {
    let lower = name.to_ascii_lowercase();
    let lower = if lower == "synergy" {
        "fifo+tune".to_string()
    } else {
        lower
    };
    let unknown = || PolicyError::Unknown {
        name: name.to_string(),
        known: POLICIES
            .iter()
            .map(|p| p.name)
            .chain(["synergy"])
            .chain(SYNERGY_POLICIES.iter().copied())
            .collect::<Vec<_>>()
            .join(", "),
    };
    if let Some((order, mech)) = lower.split_once('+') {
        let (Some(order), Some(mech)) = (parse_order(order), Mechanism::parse(mech)) else {
            return Err(unknown());
        };
        let round = options.round.or(Some(SYNERGY_ROUND));
        return Ok(Box::new(SynergyPolicy::new(order, mech, round)));
    }
    let order = parse_order(&lower).ok_or_else(unknown)?;
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
        for name in SYNERGY_POLICIES {
            let built = build_policy(name, &PolicyOptions::default()).unwrap();
            assert_eq!(built.name(), *name);
            assert_eq!(built.round_length(), Some(SYNERGY_ROUND));
        }
        assert_eq!(
            build_policy("synergy", &PolicyOptions::default())
                .unwrap()
                .name(),
            "fifo+tune"
        );
        assert!(build_policy("fifo+magic", &PolicyOptions::default()).is_err());
        let err = build_policy("lottery", &PolicyOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("lottery") && err.contains("fifo"), "{err}");
    }
}
