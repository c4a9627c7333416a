//! The core's records: jobs, their history and runs as the core keeps them and hands them to
//! its driver to persist ([`WriteBatch`]), and the filters of a listing. The core owns them;
//! the store (`crate::store`) converts them to and from SQLite, so no file of the core
//! imports the store.

use tessera_model::ParallelPlan;

use crate::core::runs::PlacedShare;
use crate::types::JobState;

/// Which jobs a listing returns (`Store::list_jobs`): every filter set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobQuery {
    /// Only this tenant's jobs.
    pub tenant: Option<String>,
    /// Only this job.
    pub id: Option<i64>,
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Only jobs in this queue.
    pub queue: Option<String>,
    /// Only jobs with a larger id.
    pub after: Option<i64>,
    /// At most this many.
    pub limit: usize,
}

/// A job as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRow {
    /// Daemon job id.
    pub id: i64,
    /// Tenant.
    pub tenant: String,
    /// Queue label.
    pub queue: String,
    /// Name.
    pub name: String,
    /// The spec as JSON.
    pub spec_json: String,
    /// State.
    pub state: JobState,
    /// Priority.
    pub priority: i32,
    /// Submission (µs since the Unix epoch).
    pub submit_us: u64,
    /// Start of the current attempt.
    pub start_us: Option<u64>,
    /// End.
    pub end_us: Option<u64>,
    /// Attempts started.
    pub attempt: u32,
    /// Allocation in backend terms while starting or running.
    pub placement: Vec<PlacedShare>,
    /// The parallelism plan of that allocation, when the policy chose one.
    pub plan: Option<ParallelPlan>,
    /// Backend run id while running.
    pub handle: Option<String>,
    /// Exit code of the last run.
    pub exit_code: Option<i32>,
    /// Last transition's explanation.
    pub message: Option<String>,
    /// SDK-reported iterations.
    pub progress_iters: u64,
    /// SDK-reported samples/s.
    pub samples_per_sec: Option<f64>,
    /// SDK-reported iterations/s.
    pub iters_per_sec: Option<f64>,
    /// When progress was last reported.
    pub progress_us: Option<u64>,
    /// GPU-seconds received.
    pub attained_gpu_secs: f64,
    /// Times preempted.
    pub preemptions: u32,
    /// SHA-256 of the current attempt's job token.
    pub job_token_sha256: Option<String>,
    /// Backend's view of the run.
    pub backend_state: Option<String>,
}

/// One history entry.
#[derive(Clone, Debug, PartialEq)]
pub struct TransitionRow {
    /// Job.
    pub job_id: i64,
    /// When (µs since the Unix epoch).
    pub at_us: u64,
    /// Old state.
    pub from: Option<JobState>,
    /// New state.
    pub to: JobState,
    /// Why.
    pub detail: String,
}

/// State of a backend run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// The job runs on it.
    Live,
    /// Must be stopped (cancel or preemption decided, maybe not yet done).
    Stop,
    /// Over.
    Gone,
    /// A launch still in flight when its attempt was given up (preempted, resized or
    /// restarted while starting): the backend may have started the run, whose handle is not
    /// known yet. The row's handle is a placeholder named after the attempt's run name; the
    /// row is replaced by the run's own (`stop`) once the launch answers. A restart looks the
    /// run up by name, stops it and verifies how it ended.
    Launching,
}

/// A backend run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    /// Backend handle.
    pub handle: String,
    /// Job.
    pub job_id: i64,
    /// Attempt.
    pub attempt: u32,
    /// State.
    pub state: RunState,
}

/// Changes written in one transaction.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    /// Jobs to insert or rewrite.
    pub jobs: Vec<JobRow>,
    /// History to append.
    pub transitions: Vec<TransitionRow>,
    /// Runs to insert or update.
    pub runs: Vec<RunRow>,
    /// Services to insert or rewrite.
    pub services: Vec<crate::services::ServiceRow>,
    /// Service instances to insert or rewrite.
    pub instances: Vec<crate::services::InstanceRow>,
}

impl WriteBatch {
    /// True when there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.transitions.is_empty()
            && self.runs.is_empty()
            && self.services.is_empty()
            && self.instances.is_empty()
    }

    /// Adds `later`'s changes after these (rows are rewritten whole, so the later row wins).
    pub fn append(&mut self, later: WriteBatch) {
        self.jobs.extend(later.jobs);
        self.transitions.extend(later.transitions);
        self.runs.extend(later.runs);
        self.services.extend(later.services);
        self.instances.extend(later.instances);
    }
}
