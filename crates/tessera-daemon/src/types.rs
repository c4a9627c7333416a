//! The JSON bodies of the HTTP API, shared by the server and [`crate::Client`].
//!
//! Times are Unix seconds (floating point); CPU and memory are quantity strings (`"8"`,
//! `"500m"`, `"32Gi"`).

use serde::{Deserialize, Serialize};
use tessera_model::{Bytes, MilliCpu};

use crate::backend::PlacedShare;

/// Life cycle of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for the policy to start it.
    Pending,
    /// The daemon decided to start it and is submitting it to the backend.
    Starting,
    /// Submitted to the backend on its allocation (the backend may still queue it briefly).
    Running,
    /// Exited with status 0.
    Completed,
    /// Exited non-zero, was killed, or was lost by the backend.
    Failed,
    /// Cancelled by a client.
    Cancelled,
}

impl JobState {
    /// Every state, in display order.
    pub const ALL: [JobState; 6] = [
        JobState::Pending,
        JobState::Starting,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
    ];
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Starting => "starting",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
    /// Parses [`as_str`](Self::as_str).
    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|x| x.as_str() == s)
    }
    /// True for completed, failed and cancelled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Failed | JobState::Cancelled
        )
    }
}

/// Progress a job reported through the SDK.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Iterations done so far (cumulative over attempts).
    pub iterations: u64,
    /// Latest training throughput in samples per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_second: Option<f64>,
    /// Latest iterations per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations_per_second: Option<f64>,
    /// When it was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<f64>,
}

/// One job as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    /// Daemon job id.
    pub id: i64,
    /// Name from the spec.
    pub name: String,
    /// Owning tenant.
    pub tenant: String,
    /// Queue label.
    pub queue: String,
    /// State.
    pub state: JobState,
    /// GPUs requested.
    pub gpus: u32,
    /// GPU type requested, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Priority.
    pub priority: i32,
    /// Submission time.
    pub submitted_at: f64,
    /// Start of the current (or last) attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<f64>,
    /// End time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<f64>,
    /// Attempts started (preemptions add one each).
    pub attempt: u32,
    /// Times preempted.
    pub preemptions: u32,
    /// Where it runs (empty unless starting or running), down to the device: which GPUs of
    /// each node and what part of each (whole, MIG instance, quota).
    #[serde(default)]
    pub allocation: Vec<PlacedShare>,
    /// The cell it runs in: the catalog model of its GPUs (`A100-80GB`) while it holds any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    /// The parallelism plan of its allocation: the policy's, or data-parallel over its
    /// devices when the policy chose none (what `TESSERA_PLAN_*` told the job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<tessera_model::ParallelPlan>,
    /// Why a pending job waits: `Resources`, `Priority`, or a backend reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_reason: Option<String>,
    /// Why a pending job waits, in detail: one kind of a closed set (see [`WaitReason`]),
    /// what it needs, what is free per node group and which jobs hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<WaitReason>,
    /// 1-based position among pending jobs (priority, then submission order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u32>,
    /// Backend run id (a Slurm job id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_id: Option<String>,
    /// Backend's view of the run (`PENDING (Resources)`, `RUNNING`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_state: Option<String>,
    /// Exit code of the last run, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Last transition's explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// SDK progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// Where what policies know of the job comes from (the configured truth's catalogue, or
    /// nothing, and why); absent for finished jobs served from the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge: Option<String>,
    /// A pending job's expected start, from the latest forecast (the simulator forked from
    /// the live state under the daemon's policy; `crate::forecast`); absent before the first
    /// forecast and for jobs not pending then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<ExpectedStart>,
}

/// When a pending job is expected to start (see [`JobView::expected_start`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectedStart {
    /// Seconds since the Unix epoch; absent when not within the forecast's horizon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<f64>,
    /// When the state it forecasts from was taken, seconds since the Unix epoch.
    pub computed_at: f64,
    /// Set when `at` is absent: the job starts no earlier than this (the horizon's end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<f64>,
}

/// Why a pending job waits (`tessera_sched::reasons`): the same kinds the simulator counts
/// in `jobs.csv`'s `wait_KIND_s` columns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitReason {
    /// `gpus`, `cpu_memory`, `mig_layout`, `quota`, `order`, `gang`, `unavailable` or
    /// `profiling`.
    pub kind: String,
    /// The whole reason in one line (kind, needs, free per node group, holders).
    pub text: String,
    /// What the job asks for, in words (`4 GPUs of A100-80GB, 16 CPU`).
    pub needs: String,
    /// The node groups of its allowed GPU models: what is free there.
    #[serde(default)]
    pub free: Vec<GroupCapacity>,
    /// Running jobs holding GPUs of those groups, most GPUs first (a few).
    #[serde(default)]
    pub holders: Vec<Holder>,
    /// Running jobs holding GPUs of those groups, in all.
    #[serde(default)]
    pub holders_total: usize,
    /// Pending jobs ahead of it (in the policy's order when the policy says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ahead: Option<u32>,
    /// The policy's own words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A node group's capacity, as a [`WaitReason`] shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupCapacity {
    /// The group.
    pub group: String,
    /// Its GPU model.
    pub gpu: String,
    /// GPUs in the group.
    pub total_gpus: u64,
    /// Whole-free GPUs the policy may use.
    pub free_gpus: u64,
    /// Most whole-free GPUs on one node.
    pub most_on_one_node: u32,
    /// Idle GPUs that cannot be used: down, unhealthy, or on a drained or down node.
    pub unavailable_gpus: u64,
    /// GPUs partitioned into MIG instances, and their free instances.
    pub partitioned_gpus: u64,
    /// Free MIG instances on the partitioned GPUs.
    pub free_mig_instances: u64,
    /// GPUs being reconfigured.
    pub reconfiguring_gpus: u64,
}

/// A running job holding GPUs a pending job could use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// Its job id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// GPUs (or GPU parts) it holds there.
    pub gpus: u32,
}

/// `GET /v1/jobs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobList {
    /// Jobs visible to the caller, by id (one page).
    pub jobs: Vec<JobView>,
    /// When more jobs match: pass it as `after=` to get the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<i64>,
}

/// Jobs per page of `GET /v1/jobs` unless `limit=` says otherwise.
pub const DEFAULT_PAGE: usize = 1000;
/// The largest page `GET /v1/jobs` serves.
pub const MAX_PAGE: usize = 10_000;

/// One recorded state change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransitionView {
    /// When.
    pub at: f64,
    /// Previous state (`None` for the submission).
    #[serde(default)]
    pub from: Option<JobState>,
    /// New state.
    pub to: JobState,
    /// Why.
    pub detail: String,
}

/// `GET /v1/jobs/{id}`: the job and its history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDetail {
    /// The job.
    #[serde(flatten)]
    pub job: JobView,
    /// The spec as submitted (normalised).
    pub spec: crate::spec::JobSpec,
    /// Its transitions, oldest first.
    pub transitions: Vec<TransitionView>,
}

/// One node as `GET /v1/nodes` shows it (a logical node: one GRES type of a machine).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    /// Backend node name.
    pub name: String,
    /// GRES type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gres_type: Option<String>,
    /// Catalog GPU model.
    pub gpu_model: String,
    /// `up`, `draining` or `down`.
    pub health: crate::backend::NodeHealth,
    /// GPUs.
    pub gpus: u32,
    /// GPUs allocated by the daemon.
    pub gpus_allocated: u32,
    /// CPU capacity.
    pub cpu: MilliCpu,
    /// CPU allocated.
    pub cpu_allocated: MilliCpu,
    /// Memory capacity.
    pub memory: Bytes,
    /// Memory allocated.
    pub memory_allocated: Bytes,
    /// Each GPU's state (index order).
    #[serde(default)]
    pub devices: Vec<GpuView>,
}

/// One GPU of a node as `GET /v1/nodes` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuView {
    /// Index on the node.
    pub index: u32,
    /// `free`, `whole` (held by one job), `shared` (quota holders), `mig` (partitioned),
    /// `reconfiguring` or `unhealthy`.
    pub mode: String,
    /// The MIG layout when partitioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Vec<crate::backend::PlacedMig>>,
    /// MIG instances in use, or quota holders.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub holders: u32,
    /// Σ SM requests of quota holders, permille.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sm_requested_permille: u32,
    /// Why it is unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// `GET /v1/nodes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeList {
    /// Nodes in cluster order.
    pub nodes: Vec<NodeView>,
}

/// Per-queue counts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSummary {
    /// Queue label.
    pub name: String,
    /// Pending jobs.
    pub pending: u32,
    /// Starting or running jobs.
    pub running: u32,
    /// GPUs requested by pending jobs.
    pub pending_gpus: u64,
    /// GPUs held by running jobs.
    pub running_gpus: u64,
}

/// `GET /v1/queue`: per-queue counts and the pending jobs in queue order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueView {
    /// The policy scheduling the queue.
    pub policy: String,
    /// Counts per queue (visible jobs only).
    pub queues: Vec<QueueSummary>,
    /// Pending jobs, by queue position.
    pub pending: Vec<JobView>,
}

/// `POST /v1/jobs/{id}/progress` body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProgressReport {
    /// Iterations done so far (cumulative).
    pub iterations: u64,
    /// Samples per second over the last reporting interval.
    #[serde(default)]
    pub samples_per_second: Option<f64>,
    /// Iterations per second over the last reporting interval.
    #[serde(default)]
    pub iterations_per_second: Option<f64>,
    /// The CPU/memory point the rates were measured at, as the last acknowledgement gave it
    /// ([`ProgressAck::point`]); the SDK starts a new interval when the point changes, so a
    /// rate is never a mix of two points. Absent from SDKs that predate profiling points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point: Option<ResourcePoint>,
}

/// The CPU and memory a job's run holds (over all its nodes): a point of its CPU/memory
/// profile (Synergy's optimistic profiling measures throughput at such points).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourcePoint {
    /// Milli-CPUs.
    pub cpu_milli: u64,
    /// Memory, bytes.
    pub memory_bytes: u64,
}

/// Answer to a progress report: what the job currently holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressAck {
    /// Job state.
    pub state: JobState,
    /// CPU workers the job should use for data loading (whole cores on its first node).
    pub cpu_workers: u32,
    /// GPUs held.
    pub gpus: u32,
    /// Memory held, in bytes.
    pub memory_bytes: u64,
    /// The CPU/memory point the job runs at now: the SDK reports its next rate with it.
    #[serde(default)]
    pub point: ResourcePoint,
}
