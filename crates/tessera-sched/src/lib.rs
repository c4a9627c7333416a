//! The scheduling core of Tessera: the [`Policy`] trait, the view it sees, the actions it
//! returns, placement helpers, and the policies themselves.
//!
//! This crate does no I/O and reads no clock: drivers (the simulator in `tessera-sim`, the
//! daemon in `tessera-daemon`) build a [`ClusterView`] at each scheduling point, call
//! [`Policy::schedule`], then validate and apply the returned [`Action`]s.
//!
//! - [`view`]: [`ClusterView`], [`ActiveJob`], [`ServiceView`] (services, their instances,
//!   load and latency), [`Trigger`], [`Action`].
//! - [`policy`]: the [`Policy`] trait and [`PolicyInfo`], a registry entry (every policy
//!   is built by name through `tessera_mechanisms::build_policy`).
//! - [`state`]: [`ClusterState`], free resources and every GPU's state, and [`validate`],
//!   the one check of actions all drivers apply.
//! - [`placement`]: the [`Ledger`] of free resources and consolidated first-fit placement.
//! - [`baselines`]: FIFO, SRTF, LAS and FTF, and the job orderings other policies reuse.
//! - [`reasons`]: why a queued job waits ([`WaitKind`], [`PendingReason`]).
//! - [`book`]: the accounting both drivers keep of jobs' attained service and restarts.
//!
//! Mechanism-specific policies (Synergy, ...) live with their mechanism in
//! `tessera-mechanisms`, whose registry builds every policy by name.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod baselines;
pub mod book;
pub mod free_index;
mod kinetic;
pub mod placement;
pub mod policy;
mod rank_set;
pub mod reasons;
pub mod state;
pub mod view;

pub use placement::{fit_in, IndexedLedger, Ledger};
pub use policy::{
    Capabilities, Capability, JobChange, Policy, PolicyError, PolicyInfo, PolicyOptions,
};
pub use reasons::{Detail, PendingReason, WaitKind, Waiting};
pub use state::{validate, ActionError, ClusterState, GpuState, Holder};
pub use view::{
    Action, ActiveJob, ClusterView, InstanceId, InstanceView, JobState, ProgressLine, ServicePhase,
    ServiceView, Trigger,
};
