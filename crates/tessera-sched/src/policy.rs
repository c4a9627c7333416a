//! The [`Policy`] trait, the options policies are built with, and the descriptors a registry
//! lists them by (the registry itself is `tessera-mechanisms`).

use tessera_model::{Cluster, JobId, SimDuration, TrainingJob};
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

    /// Why this policy will never start `job` on `cluster`, judged from its own knowledge
    /// (MISO's slice table finding the job's model too large for the one MIG profile it
    /// asked for), or `None`. Drivers ask once per job, at its arrival or submission, and
    /// reject it with this reason: a job the policy would otherwise leave queued for ever
    /// stalls the run (the simulator) or waits silently (the daemon). Shape checks every
    /// policy shares (no node of the type, too many GPUs) are the drivers' own. Default:
    /// never.
    fn refuses(&self, _job: &TrainingJob, _cluster: &Cluster) -> Option<String> {
        None
    }

    /// Why this policy leaves the queued `job` waiting after its last decision, when it
    /// knows better than the generic analysis ([`reasons::classify`](crate::reasons::classify):
    /// free GPUs, CPU and memory, MIG instances, quotas against the job's request). `None`
    /// (the default) lets the driver use the generic analysis.
    ///
    /// The kind must follow from the job's request (GPUs, types, CPU, memory, MIG, share,
    /// model, tenant), the view and the policy's settings, not from the job's own history:
    /// the simulator asks once per request shape at each decision point, with
    /// [`Detail::Kind`](crate::Detail::Kind), and charges every waiting job of that shape
    /// alike (`jobs.csv`'s time waited per reason); it must then be cheap. With
    /// [`Detail::Full`](crate::Detail::Full) (the daemon's `describe`, `queue`, API) the
    /// policy may add the jobs ahead of this one in its order and a note.
    fn pending_reason(
        &self,
        _view: &ClusterView<'_>,
        _job: &TrainingJob,
        _detail: crate::Detail,
    ) -> Option<crate::Waiting> {
        None
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

/// One registry entry: a name, what it does, and what it honours.
#[derive(Clone, Copy, Debug)]
pub struct PolicyInfo {
    /// Name accepted by `tessera_mechanisms::build_policy`.
    pub name: &'static str,
    /// One-line description for `--help` and listings.
    pub about: &'static str,
    /// What the policy schedules correctly beyond whole-GPU, single-GPU training jobs on a
    /// cluster of one GPU model (drivers refuse the rest up front).
    pub capabilities: Capabilities,
}

/// One thing a workload or a cluster may ask of a policy beyond whole-GPU, single-GPU
/// training jobs on a cluster of alike nodes. A policy *honours* it when it schedules such
/// requests as asked; one that drops, ignores or crashes on them does not, and drivers refuse
/// the run up front (docs/capabilities.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// Jobs or services restricted to some GPU models (`gpuTypes`).
    GpuTypes,
    /// A cluster whose nodes differ: several GPU models, or different GPUs per node.
    MixedNodes,
    /// Training jobs asking for more than one GPU, given that many.
    MultiGpu,
    /// Training jobs asking for more GPUs than any one node (of their GPU types) has.
    MultiNode,
    /// Jobs asking for one MIG instance of a fixed profile (`nvidia.com/mig-3g.40gb`).
    MigProfile,
    /// Jobs asking for a MIG instance of the policy's choice (`nvidia.com/mig-any`).
    MigAny,
    /// Jobs asking for a fraction of one GPU (`gpu_share`), given that quota.
    GpuShare,
    /// Jobs with explicit CPU or host-memory demands, given at least that much.
    CpuMemory,
    /// Inference services (instances on whole GPUs), their requests served.
    Services,
    /// Services whose instances ask for a GPU quota (`smRequest`), placed on that quota.
    ServiceQuotas,
    /// Nodes and GPUs going down and coming back (failure injection).
    Failures,
    /// Places work on GPUs without MIG (a policy lacking it runs jobs only on MIG instances).
    NonMigGpus,
}

impl Capability {
    /// Every capability, in the order listings and the matrix show them.
    pub const ALL: [Capability; 12] = [
        Capability::GpuTypes,
        Capability::MixedNodes,
        Capability::MultiGpu,
        Capability::MultiNode,
        Capability::MigProfile,
        Capability::MigAny,
        Capability::GpuShare,
        Capability::CpuMemory,
        Capability::Services,
        Capability::ServiceQuotas,
        Capability::Failures,
        Capability::NonMigGpus,
    ];

    /// A stable key (`gpu-types`), for `summary.json` and the matrix's columns.
    pub const fn key(self) -> &'static str {
        match self {
            Capability::GpuTypes => "gpu-types",
            Capability::MixedNodes => "mixed-nodes",
            Capability::MultiGpu => "multi-gpu",
            Capability::MultiNode => "multi-node",
            Capability::MigProfile => "mig-profile",
            Capability::MigAny => "mig-any",
            Capability::GpuShare => "gpu-share",
            Capability::CpuMemory => "cpu-memory",
            Capability::Services => "services",
            Capability::ServiceQuotas => "service-quotas",
            Capability::Failures => "failures",
            Capability::NonMigGpus => "non-mig-gpus",
        }
    }

    /// What it means, in a few words, for listings.
    pub const fn about(self) -> &'static str {
        match self {
            Capability::GpuTypes => "jobs and services restricted to GPU models (gpuTypes)",
            Capability::MixedNodes => {
                "clusters whose nodes differ (GPU models, GPUs, CPUs or memory per node)"
            }
            Capability::MultiGpu => "training jobs of more than one GPU, given that many",
            Capability::MultiNode => "training jobs of more GPUs than any one node has",
            Capability::MigProfile => {
                "jobs asking for a fixed MIG profile (nvidia.com/mig-3g.40gb)"
            }
            Capability::MigAny => {
                "jobs asking for a MIG instance of the policy's choice (nvidia.com/mig-any)"
            }
            Capability::GpuShare => "jobs asking for a fraction of a GPU (gpu_share)",
            Capability::CpuMemory => "jobs with explicit CPU or host-memory demands",
            Capability::Services => "inference services (whole-GPU instances), requests served",
            Capability::ServiceQuotas => "services whose instances ask for a GPU quota (smRequest)",
            Capability::Failures => "nodes and GPUs going down and coming back",
            Capability::NonMigGpus => "placing work on GPUs without MIG",
        }
    }

    /// Its bit in [`Capabilities`].
    const fn bit(self) -> u16 {
        1 << self as u16
    }

    /// The capability of a [`key`](Self::key), case-insensitive.
    pub fn from_key(key: &str) -> Option<Capability> {
        Capability::ALL
            .into_iter()
            .find(|c| c.key().eq_ignore_ascii_case(key.trim()))
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

/// The set of [`Capability`]s a policy honours, declared in its registry entry.
///
/// ```
/// use tessera_sched::{Capabilities, Capability};
/// const FIFO_LIKE: Capabilities = Capabilities::TRAINING.with(Capability::Failures);
/// assert!(FIFO_LIKE.honours(Capability::GpuTypes));
/// assert!(FIFO_LIKE.honours(Capability::Failures));
/// assert!(!FIFO_LIKE.honours(Capability::Services));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Capabilities(u16);

impl Capabilities {
    /// The empty set: single-GPU training jobs without requests, on the MIG-capable GPUs of a
    /// cluster of alike nodes.
    pub const NONE: Capabilities = Capabilities(0);

    /// What a general training scheduler places correctly: GPU types, mixed nodes, jobs of
    /// several GPUs and of several nodes, explicit CPU/memory, any GPU (MIG or not).
    pub const TRAINING: Capabilities = Capabilities::NONE
        .with(Capability::GpuTypes)
        .with(Capability::MixedNodes)
        .with(Capability::MultiGpu)
        .with(Capability::MultiNode)
        .with(Capability::CpuMemory)
        .with(Capability::NonMigGpus);

    /// This set and `c`.
    pub const fn with(self, c: Capability) -> Capabilities {
        Capabilities(self.0 | c.bit())
    }

    /// This set without `c`.
    pub const fn without(self, c: Capability) -> Capabilities {
        Capabilities(self.0 & !c.bit())
    }

    /// Whether `c` is in the set.
    pub const fn honours(self, c: Capability) -> bool {
        self.0 & c.bit() != 0
    }

    /// The capabilities in the set, in [`Capability::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |&c| self.honours(c))
    }
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}
