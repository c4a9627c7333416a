//! The [`Policy`] trait, the options policies are built with, and the descriptors a registry
//! lists them by (the registry itself is `tessera-mechanisms`).

use tessera_model::{JobId, SimDuration, TrainingJob};
use thiserror::Error;

use crate::view::{Action, ActiveJob, ClusterView, ProgressLine, Trigger};

/// A change of the active set, reported to a policy that tracks jobs
/// ([`Policy::track_jobs`]) so that it can keep its own ordered queue instead of re-ranking
/// `view.active` at every scheduling point.
#[derive(Clone, Copy, Debug)]
pub enum JobChange<'a> {
    /// The job became visible to the policy (arrived, and profiled if profiling is on); it
    /// is queued.
    Arrived(&'a ActiveJob, &'a TrainingJob),
    /// The job started on an allocation (its state, allocation, attained service and
    /// `resumes_at` current as of now).
    Started(&'a ActiveJob, &'a TrainingJob),
    /// The job was preempted: it is queued again, its progress current as of now.
    Preempted(&'a ActiveJob, &'a TrainingJob),
    /// The job left the active set (it finished).
    Ended(JobId),
    /// A running job's progress changed course: it started, or its rate changed. Sent after
    /// [`Started`](JobChange::Started) and after every change of a running job's rate, only
    /// to a policy that [follows progress](Policy::follows_progress) and only by a driver
    /// that counts it exactly (the simulator).
    Progress(JobId, ProgressLine),
}

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

    /// A one-off instant at which the policy wants to be called again (the end of a
    /// profiling phase, an autoscaler tick), asked after each [`schedule`](Policy::schedule).
    /// The driver calls at that instant with `trigger.wakeup` set. Default: none.
    fn wakeup(&self) -> Option<tessera_model::SimTime> {
        None
    }

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

    /// Asked once, before the first scheduling point, by a driver that reports every change
    /// of the active set. A policy answering `true` is then told each change through
    /// [`observe`](Policy::observe), in order, before the next `schedule`. A policy answering
    /// `false` (the default), or one run by a driver that never asks, works from
    /// `view.active` alone; both must decide the same.
    fn track_jobs(&mut self) -> bool {
        false
    }

    /// One change of the active set, after [`track_jobs`](Policy::track_jobs) returned true.
    fn observe(&mut self, _change: JobChange<'_>) {}

    /// Asked once, after [`track_jobs`](Policy::track_jobs) returned true: whether the
    /// policy wants [`JobChange::Progress`] for its running jobs (a policy ranking them by
    /// remaining work computes it from those lines instead of having every running job
    /// brought up to date). Default: false.
    fn follows_progress(&self) -> bool {
        false
    }

    /// A hint from a driver applying a decision's actions one by one: a change of `job` is
    /// about to be [observed](Policy::observe). A policy may ask the CPU for the memory that
    /// call will read (see [`prefetch`](tessera_model::hint::prefetch)), so that fetching it
    /// overlaps the driver's work on the action before. Only speed may change. Default:
    /// nothing.
    fn expect_change(&self, _job: JobId) {}

    /// Renumbers the jobs this policy keeps state about, for a driver that drops finished
    /// jobs from its tables (the daemon, which runs for months): `map[i]` is the new id of
    /// the job with id `i`, `None` for a job that has finished (whether or not the policy was
    /// told [`JobChange::Ended`] yet: it forgets it as if it had been). Ids keep their order.
    /// Returns false (the default) when the policy cannot renumber: it must then be unchanged,
    /// and the driver keeps every id.
    fn renumber_jobs(&mut self, _map: &[Option<JobId>]) -> bool {
        false
    }

    /// Whether the scheduling point with this trigger reads the progress of *running* jobs
    /// (`attained_gpu_secs`, `remaining_iters`). When it does not, a driver may leave those
    /// two fields of running jobs stale in `view.active` and save bringing every running job
    /// up to date (queued jobs' progress is always current). Default: true.
    fn reads_running_progress(&self, _trigger: &Trigger) -> bool {
        true
    }

    /// Whether [`schedule`](Policy::schedule) at this trigger could decide anything. A
    /// policy answering `false` promises that the call would append no action and change
    /// none of its state, so a driver may count the scheduling point without making it (a
    /// completion on a cluster with nothing waiting, about half of all events when the
    /// cluster keeps up). Default: true.
    fn may_act(&self, _trigger: &Trigger) -> bool {
        true
    }
}

/// Options shared by the policies the registry builds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyOptions {
    /// Periodic round length; `None` = the policy's default (event-driven for the
    /// baselines, the mechanism's round for round-based ones).
    pub round: Option<SimDuration>,
    /// Seed of anything stochastic inside the policy (estimators, tie-breaking noise).
    pub seed: u64,
}

/// A policy name that the registry does not know, or options it cannot take.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// No policy of that name.
    #[error("unknown policy {name:?}{hint} (known: {known})")]
    Unknown {
        /// The name as given.
        name: String,
        /// `; did you mean "X"?` when a known name is close, else empty.
        hint: String,
        /// Known names, comma-separated.
        known: String,
    },
    /// The policy exists but cannot take these options.
    #[error("policy {name}: {reason}")]
    BadOptions {
        /// The policy.
        name: String,
        /// What is wrong.
        reason: String,
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
