//! What a policy sees ([`ClusterView`]) and what it may ask for ([`Action`]).

use tessera_model::{
    Allocation, Cluster, InferenceService, JobId, Knowledge, MigInstance, NodeId, Resources,
    ServiceId, SimDuration, SimTime, TrainingJob,
};

use crate::state::ClusterState;

/// Whether a job waits or runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Submitted, holding nothing.
    Queued,
    /// Holding an allocation (possibly still restoring from a checkpoint).
    Running,
}

/// A job that has arrived and not finished, as the driver tracks it.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveJob {
    /// The job (index into [`ClusterView::jobs`]).
    pub id: JobId,
    /// Queued or running.
    pub state: JobState,
    /// What it holds while running.
    pub allocation: Option<Allocation>,
    /// GPU-seconds of service received so far (LAS, fairness).
    pub attained_gpu_secs: f64,
    /// The same service exactly, in GPU·µs, where the driver counts it so (the simulator;
    /// 0 elsewhere): an integer does not depend on how often it was brought up to date, so
    /// policies break ties of `attained_gpu_secs` with it.
    pub attained_gpu_us: u64,
    /// While running: when the job makes progress again after a restart's checkpoint
    /// restore (its start when there is none). From then on its attained service grows by
    /// the GPUs it holds per µs, so a policy can compute it at any later instant.
    pub resumes_at: Option<SimTime>,
    /// Iterations still to do.
    pub remaining_iters: f64,
    /// The scheduler's estimate of iterations per second on the requested allocation.
    pub throughput_estimate: f64,
    /// When it first started, if ever.
    pub first_start: Option<SimTime>,
    /// Times it was preempted.
    pub preemptions: u32,
    /// What the driver learned about the job (by profiling, or from its reports), as typed
    /// facts that each mechanism defines and reads; empty when nothing is known.
    pub knowledge: Knowledge,
}

impl ActiveJob {
    /// A job that has just arrived: queued, nothing done, the trace's reference throughput as
    /// the estimate, nothing learned by profiling. Drivers start from this and override what
    /// they know (`ActiveJob { state, ..ActiveJob::arrived(job) }`), so that fields added later
    /// get a sensible default everywhere.
    pub fn arrived(job: &TrainingJob) -> ActiveJob {
        ActiveJob {
            id: job.id,
            state: JobState::Queued,
            allocation: None,
            attained_gpu_secs: 0.0,
            attained_gpu_us: 0,
            resumes_at: None,
            remaining_iters: job.iterations as f64,
            throughput_estimate: job.reference_throughput(),
            first_start: None,
            preemptions: 0,
            knowledge: Knowledge::new(),
        }
    }

    /// Estimated seconds of work left on the requested allocation (infinite when the
    /// estimate is zero).
    pub fn remaining_secs_estimate(&self) -> f64 {
        remaining_secs(self.remaining_iters, self.throughput_estimate)
    }
}

/// Seconds to do `remaining` iterations at `estimate` per second (infinite when the estimate
/// is zero): [`ActiveJob::remaining_secs_estimate`], for a policy that computes the
/// remaining iterations itself.
pub(crate) fn remaining_secs(remaining: f64, estimate: f64) -> f64 {
    if estimate > 0.0 {
        remaining / estimate
    } else {
        f64::INFINITY
    }
}

/// How a running job's remaining iterations fall from the last change of its course (a
/// start, or a change of its rate), for a driver that counts progress exactly (the
/// simulator): a policy that keeps it can compute them at any later instant exactly as the
/// driver would show them in [`ActiveJob::remaining_iters`], without the driver bringing
/// every running job up to date (see [`JobChange::Progress`](crate::JobChange::Progress)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProgressLine {
    /// The job's iterations in all.
    pub total: f64,
    /// Iterations done as of the change.
    pub done: f64,
    /// Iterations per second from `since` on.
    pub rate: f64,
    /// When progress resumes: the change, or the end of a restart's checkpoint restore.
    pub since: SimTime,
}

impl ProgressLine {
    /// Iterations still to do at `t`. The one formula the simulator shows progress by.
    pub fn remaining_at(&self, t: SimTime) -> f64 {
        self.total - self.done_at(t)
    }

    /// Iterations done at `t`, never more than `total`.
    pub fn done_at(&self, t: SimTime) -> f64 {
        let worked = t.saturating_since(self.since);
        (self.done + self.rate * worked.as_secs_f64()).min(self.total)
    }
}

/// Why the policy is being called. Several causes may coincide at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trigger {
    /// A periodic round boundary: leases end and the policy may re-plan everything.
    pub round: bool,
    /// One or more jobs arrived.
    pub arrival: bool,
    /// One or more jobs finished (or otherwise released resources).
    pub completion: bool,
    /// A wake-up the policy asked for ([`Policy::wakeup`](crate::Policy::wakeup)).
    pub wakeup: bool,
    /// A GPU finished reconfiguring.
    pub reconfigured: bool,
}

/// A read-only snapshot of the world at one scheduling point.
#[derive(Clone, Copy, Debug)]
pub struct ClusterView<'a> {
    /// Current time.
    pub now: SimTime,
    /// Why the policy is called.
    pub trigger: Trigger,
    /// Nodes and their capacities.
    pub cluster: &'a Cluster,
    /// Free resources per node, indexed by `NodeId` (`gpus` = whole-free GPUs).
    pub free: &'a [Resources],
    /// Every GPU's state (mode, MIG layout, quotas in use, ready time).
    pub state: &'a ClusterState,
    /// Every job of the workload, indexed by `JobId`.
    pub jobs: &'a [TrainingJob],
    /// Jobs that arrived and are not finished, in no particular order.
    pub active: &'a [ActiveJob],
    /// Every inference service of the workload, indexed by `ServiceId`, with its instances,
    /// load and recent latency (empty for a workload without services).
    pub services: &'a [ServiceView],
}

impl<'a> ClusterView<'a> {
    /// The spec of an active job.
    pub fn spec(&self, job: &ActiveJob) -> Option<&'a TrainingJob> {
        self.jobs.get(job.id.index())
    }

    /// A service by id.
    pub fn service(&self, id: ServiceId) -> Option<&'a ServiceView> {
        self.services.get(id.index())
    }
}

/// A service instance's id, unique within a run (never reused after a scale-in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId(pub u32);

/// Where a service is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServicePhase {
    /// Before its start: no request has arrived yet.
    Pending,
    /// Requests arrive (or may still be served).
    Active,
    /// Past its end: no request arrives any more.
    Ended,
    /// No instance can ever be placed on this cluster; every request is dropped.
    Unschedulable {
        /// Why.
        reason: String,
    },
}

/// One live instance of a service.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceView {
    /// Its id.
    pub id: InstanceId,
    /// What it holds (devices named).
    pub allocation: Allocation,
    /// When it was created (scale-out).
    pub created: SimTime,
    /// When it takes traffic (creation + cold start).
    pub ready_at: SimTime,
    /// Requests waiting in its queue (not counting the batch it is running).
    pub queue_len: u32,
    /// Requests in the batch it is running (0 when idle).
    pub in_flight: u32,
    /// Its effective SM share now, permille (a quota holder may get more than its request
    /// when neighbours leave compute idle).
    pub effective_sm: u16,
}

/// A service as a policy sees it: the spec, its instances, and recent load and latency.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceView {
    /// The spec.
    pub spec: InferenceService,
    /// Its phase.
    pub phase: ServicePhase,
    /// Live instances (ready or cold-starting), in creation order.
    pub instances: Vec<InstanceView>,
    /// Requests waiting at the service because no instance was ready to take them.
    pub pending: u32,
    /// The window the recent figures below are measured over.
    pub window: SimDuration,
    /// Arrival rate over the recent window, requests per second.
    pub load_rps: f64,
    /// Median latency of requests completed in the recent window, seconds (0 if none).
    pub p50_latency_s: f64,
    /// 99th-percentile latency of requests completed in the recent window, seconds (0 if none).
    pub p99_latency_s: f64,
    /// Requests completed in the recent window.
    pub completed_in_window: u64,
    /// Requests of the recent window over the SLO.
    pub violations_in_window: u64,
}

impl ServiceView {
    /// Instances that take traffic at `now`.
    pub fn ready_instances(&self, now: SimTime) -> usize {
        self.instances.iter().filter(|i| i.ready_at <= now).count()
    }

    /// Requests queued at the service and at its instances (not counting running batches).
    pub fn queued(&self) -> u64 {
        self.pending as u64
            + self
                .instances
                .iter()
                .map(|i| i.queue_len as u64)
                .sum::<u64>()
    }
}

/// A decision. The driver validates each against capacity and applies it in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Start a queued job on `allocation`.
    Start {
        /// The job.
        job: JobId,
        /// Where and what it gets.
        allocation: Allocation,
    },
    /// Stop a running job (it checkpoints) and return it to the queue.
    Preempt {
        /// The job.
        job: JobId,
    },
    /// Move a running job to a new allocation (it checkpoints and restarts there).
    Resize {
        /// The job.
        job: JobId,
        /// Its new allocation.
        allocation: Allocation,
    },
    /// Change a running job's CPU, memory or GPU quota on the same nodes and GPUs, in place:
    /// no checkpoint, no restart.
    Retune {
        /// The job.
        job: JobId,
        /// Its new allocation (same nodes, GPUs and whole-GPU counts).
        allocation: Allocation,
    },
    /// Create an instance of a service on `allocation` (one node; a whole GPU, a MIG instance
    /// or a quota on each GPU named). The instance takes traffic after the service's cold
    /// start.
    ScaleOut {
        /// The service.
        service: ServiceId,
        /// Where the instance runs and what it holds.
        allocation: Allocation,
    },
    /// Remove an instance; requests waiting in its queue go back to the service's queue, the
    /// batch it is running completes first.
    ScaleIn {
        /// The service.
        service: ServiceId,
        /// The instance.
        instance: InstanceId,
    },
    /// Change a running instance's GPU quota (SM share, memory) in place on the same node
    /// and GPUs: no restart. A backend that cannot retune in place restarts the instance.
    RetuneInstance {
        /// The service.
        service: ServiceId,
        /// The instance.
        instance: InstanceId,
        /// Its new allocation (same node and GPUs).
        allocation: Allocation,
    },
    /// Change one GPU's MIG layout (`Some`) or return it to whole-GPU mode (`None`). Only on a
    /// GPU nobody holds: preempt its holders earlier in the same batch. The GPU is
    /// unavailable for the driver's reconfiguration time.
    Reconfigure {
        /// The node.
        node: NodeId,
        /// The GPU's index on the node.
        gpu: u32,
        /// The new layout; `None` = not partitioned.
        layout: Option<Vec<MigInstance>>,
    },
}

impl Action {
    /// The job it concerns, if any.
    pub fn job(&self) -> Option<JobId> {
        match self {
            Action::Start { job, .. }
            | Action::Preempt { job }
            | Action::Resize { job, .. }
            | Action::Retune { job, .. } => Some(*job),
            Action::Reconfigure { .. }
            | Action::ScaleOut { .. }
            | Action::ScaleIn { .. }
            | Action::RetuneInstance { .. } => None,
        }
    }

    /// The service it concerns, if any.
    pub fn service(&self) -> Option<ServiceId> {
        match self {
            Action::ScaleOut { service, .. }
            | Action::ScaleIn { service, .. }
            | Action::RetuneInstance { service, .. } => Some(*service),
            _ => None,
        }
    }

    /// The variant's name, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Start { .. } => "start",
            Action::Preempt { .. } => "preempt",
            Action::Resize { .. } => "resize",
            Action::Retune { .. } => "retune",
            Action::Reconfigure { .. } => "reconfigure",
            Action::ScaleOut { .. } => "scale-out",
            Action::ScaleIn { .. } => "scale-in",
            Action::RetuneInstance { .. } => "retune-instance",
        }
    }
}
