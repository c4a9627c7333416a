//! The daemon's scheduling core, without I/O.
//!
//! [`Core`] holds the job table, the free capacity and the policy. It never touches the store,
//! the backend or a clock: every input comes with the time (`handle_*(now, …)`, [`Core::submit`],
//! [`Core::schedule`]) and every effect leaves as a [`Command`] that the driver takes with
//! [`Core::poll_command`], carries out, and answers through the matching `handle_*` input.
//! [`Core::poll_timeout`] says when the core next wants to be called without any input.
//!
//! The driver ([`crate::engine::Engine`] in the daemon, a scripted harness in tests) calls, in
//! a loop: inputs, then `poll_command` until it returns `None`, executing each command in order.
//!
//! **Persist before act.** Every state change is appended to a pending [`WriteBatch`]. Before
//! the core queues a command that acts on the world ([`Command::Launch`], [`Command::Stop`]) it
//! first queues the pending batch as a [`Command::Persist`], so a launch or stop is never issued
//! before the decision behind it is durable; after a crash the store says what was decided and
//! the restarted daemon reconciles. A batch still pending when the queue is empty comes out of
//! `poll_command` last, so results (a run recorded as live, a job recorded as finished) are
//! written in one group commit.

mod api;
mod services;

#[cfg(test)]
mod capability_tests;
#[cfg(test)]
mod conformance;
#[cfg(test)]
mod devices;
#[cfg(test)]
mod preemption_tests;
#[cfg(test)]
mod service_tests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod validation;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use tessera_model::{
    Allocation, Bytes, GpuPart, MigInstance, MilliCpu, NodeId, ParallelPlan, Resources,
    SimDuration, SimTime, TrainingJob,
};
use tessera_sched::{
    validate, Action, ActiveJob, ClusterState, ClusterView, JobChange, Policy, Trigger,
};

use crate::backend::{
    mps_pinned_mem_limit, mps_thread_percentage, Handle, InventoryNode, Launch, NodeHealth,
    Payload, Reconfigure, Retune, RunStatus,
};
use crate::config::{hash_token, Limits};
use crate::error::{ApiError, BackendError, DaemonError};
use crate::inventory::ClusterMap;
use crate::metrics::Metrics;
use crate::spec::JobSpec;
use crate::store::{JobRow, RunRow, RunState, TransitionRow, WriteBatch};
use crate::types::JobState;

pub(crate) use api::{Request, Response};
pub use services::instance_run_name;

/// Default run time assumed for a job without hints.
const DEFAULT_DURATION_SECS: f64 = 3600.0;
/// Consecutive backend submission failures before a job is marked failed (stated in
/// `Core::handle_launched`'s public docs, which cannot link here).
const MAX_SUBMIT_FAILURES: u32 = 3;
/// Seconds before scheduling again after a failed backend submission.
const SUBMIT_RETRY_SECS: u64 = 5;
/// Runs of one job lost to node failures or vanished from the backend before the job is
/// failed rather than requeued again (a job that kills its node must not loop forever).
const MAX_LOST_RUNS: u32 = 3;

/// What the core asks its driver to do, in order.
#[derive(Debug)]
pub enum Command {
    /// Write this batch durably (one transaction) before executing any later command.
    Persist(WriteBatch),
    /// Start a run; answer with [`Core::handle_launched`].
    Launch(Launch),
    /// Stop a run (recorded as `stop` in an earlier batch); answer with
    /// [`Core::handle_stopped`]. `preempt` asks for a graceful stop so the job may checkpoint.
    Stop {
        /// The run.
        run: RunRow,
        /// Preemption (SIGTERM first) rather than cancellation.
        preempt: bool,
    },
    /// Ask the backend for the status of these runs; answer with [`Core::handle_statuses`]
    /// (or [`Core::handle_poll_failed`]).
    Poll(Vec<Handle>),
    /// Ask for the status of runs just stopped (their node went down, the policy preempted or
    /// resized them, or a retune restarted them), so that a run that had already completed is
    /// recorded as such instead of run again; answer with [`Core::handle_verified`]. Unlike
    /// [`Command::Poll`], never skipped.
    Verify(Vec<Handle>),
    /// Read the inventory again (a run failed with its node: which nodes are down now?);
    /// answer with [`Core::handle_inventory`] or [`Core::handle_inventory_failed`].
    Inventory,
    /// Change a running job's quota in place; answer with [`Core::handle_retuned`]. The new
    /// allocation is already recorded (and persisted ahead of this command).
    Retune(Retune),
    /// Change a GPU's MIG layout (its holders were stopped earlier in the queue); answer with
    /// [`Core::handle_reconfigured`]. Until then the GPU takes no placement.
    Reconfigure {
        /// The logical node.
        node: NodeId,
        /// What to do, in backend terms.
        request: Reconfigure,
    },
    /// Look a run up by name (restart reconciliation); answer with [`Core::handle_found`].
    Find {
        /// Daemon job id.
        job_id: i64,
        /// The attempt the run would belong to.
        attempt: u32,
        /// [`Launch::run_name`] of that attempt.
        run_name: String,
    },
}

/// Validated decisions of one scheduling point, from [`Core::decide`] to [`Core::apply`].
#[derive(Debug)]
pub struct Decisions(Vec<Plan>);

#[derive(Debug)]
enum Plan {
    Start(usize, Allocation),
    Preempt(usize),
    Resize(usize, Allocation),
    Retune(usize, Allocation),
    Reconfigure(NodeId, u32, Option<Vec<MigInstance>>),
    /// A new instance of a service (by index).
    ScaleOut(usize, Allocation),
    /// Remove an instance (by id).
    ScaleIn(i64),
    /// New quota for an instance (by id).
    RetuneInstance(i64, Allocation),
}

/// Why the core refused an action of the policy (a policy bug, or a state the policy could
/// not see); counted in `tessera_rejected_actions_total`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The one validation every driver applies ([`tessera_sched::validate`]) refused it.
    #[error("{0}")]
    Invalid(#[from] tessera_sched::ActionError),
    /// The daemon's own check: a node of the allocation is down or draining.
    #[error("node {0} is not up")]
    NodeNotUp(String),
    /// The daemon's own check: the GPU is unhealthy (a reconfiguration failed).
    #[error("GPU {gpu} of {node} is unhealthy: {reason}")]
    GpuUnhealthy {
        /// Backend node name.
        node: String,
        /// GPU index.
        gpu: u32,
        /// Why.
        reason: String,
    },
    /// The job is unknown, finished, or held after a node failure.
    #[error("job {0} is not active")]
    NotActive(usize),
    /// An action the daemon does not carry out.
    #[error("the daemon does not carry out {0} actions")]
    Unsupported(&'static str),
    /// The service is unknown or retired.
    #[error("service {0} is unknown or retired")]
    ServiceNotActive(u32),
}

/// Settings of a core that do not change while it runs.
#[derive(Clone, Debug)]
pub struct CoreSettings {
    /// The store's instance id (part of every run name).
    pub instance: String,
    /// Admission limits.
    pub limits: Limits,
    /// Whether `GET /metrics` needs no token.
    pub public_metrics: bool,
    /// The backend takes whole CPU cores only (requests are rounded up).
    pub whole_cpus: bool,
    /// Scheduling points caused only by submissions come at most this often: under a burst of
    /// submissions over a deep queue the policy runs a few times a second rather than once
    /// per group commit. Completions, cancellations and rounds are not delayed. Zero (the
    /// simulator's semantics) schedules at every arrival.
    pub arrival_coalescing: SimDuration,
}

/// The end of the job table at one moment (see [`Core::submission_mark`]).
#[derive(Clone, Copy, Debug)]
pub struct SubmissionMark {
    jobs: usize,
    next_id: i64,
    submissions: u64,
}

/// Makes the secret token of each job attempt (injected so tests are deterministic).
pub type TokenSource = Box<dyn FnMut() -> String + Send>;

struct Job {
    row: JobRow,
    spec: JobSpec,
    alloc: Option<Allocation>,
    submit_failures: u32,
    /// Runs lost to node failures or vanished (this daemon's lifetime).
    lost_runs: u32,
    /// Requeued after a node failure, hidden from the policy until the backend has said
    /// whether its stopped run had in fact completed.
    held: bool,
    /// The launch of an attempt the policy started while a stopped run of the job was still
    /// being verified (see [`Core::verifying`]): carried out once the backend has said that
    /// run did not complete, dropped (and the job finished) if it did.
    parked: Option<Launch>,
    /// Its runs in [`Core::verifying`]: counted, so that a start asks in O(1) whether it
    /// must wait (a LAS round may stop and start thousands of jobs at once).
    unverified_runs: u32,
    /// Finished, written to the store and dropped from memory but for this slot (the policy's
    /// job ids are indices, so the slot stays until a restart).
    archived: bool,
    /// GPU-service received, GPU·µs, accrued exactly at scheduling points: tracking policies
    /// (LAS) compute it from the start of an allocation, which only an integer count matches
    /// exactly. The row's `attained_gpu_secs` is this over 10⁶ while the job holds nothing,
    /// and what it had when its attempt started while it holds an allocation (see
    /// [`Core::finish_restore`]).
    attained_us: u64,
}

/// A stopped run whose ending the backend has not told yet (in [`Core::verifying`]).
#[derive(Debug)]
struct Verifying {
    /// The job, by index.
    idx: usize,
    /// The run's attempt (its job may be on a later one, started but not launched).
    attempt: u32,
    /// When the run's attempt started (`JobRow::start_us`), if known: the job's record takes
    /// it back should the run turn out to have finished the job (a restart does not know it).
    start_us: Option<u64>,
    /// What stopped it, for the job's message should the run turn out to have ended on its
    /// own just before.
    cause: &'static str,
    /// The stop counted a preemption on the job's record (`preemptions`: a policy preemption
    /// or a node failure), taken back should the run turn out to have ended on its own before
    /// it: that run was not preempted.
    preempted: bool,
    /// The backend has carried out the stop. A status read before (a Verify that overtook a
    /// stop the driver deferred, or a stop that failed and is retried) is the last word
    /// only if the run had already ended.
    stopped: bool,
    /// A Verify was answered before the stop was carried out: ask again once it is.
    ask_again: bool,
}

impl Verifying {
    fn new(
        idx: usize,
        attempt: u32,
        start_us: Option<u64>,
        cause: &'static str,
        preempted: bool,
    ) -> Verifying {
        Verifying {
            idx,
            attempt,
            start_us,
            cause,
            preempted,
            stopped: false,
            ask_again: false,
        }
    }
}

/// The handle under which a launch given up while in flight is known until it answers (see
/// [`Core::supersede_launch`]): never a backend's handle, which is not known yet.
fn launch_placeholder(instance: &str, job_id: i64, attempt: u32) -> String {
    format!("launching:{}", run_name_of(instance, job_id, attempt))
}

/// The run name of an attempt of a job, or of an instance (negative `job_id`).
fn run_name_of(instance: &str, job_id: i64, attempt: u32) -> String {
    if services::Services::is_instance(job_id) {
        services::instance_run_name(instance, -job_id, attempt)
    } else {
        Launch::run_name(instance, job_id, attempt)
    }
}

/// `active_pos` of a job the policy does not see.
const NOT_VISIBLE: u32 = u32::MAX;
/// Archived slots below which the job table is not compacted (a compaction costs a pass over
/// the table and the policy's state).
const COMPACT_MIN_SLOTS: usize = 4096;

/// The sans-IO scheduling core (see the [module docs](self)).
pub struct Core {
    settings: CoreSettings,
    policy: Box<dyn Policy>,
    map: ClusterMap,
    capacity: Vec<Resources>,
    free: Vec<Resources>,
    /// What is held down to the device, MIG layouts and GPUs being reconfigured: what
    /// [`tessera_sched::validate`] checks actions against (node health is the daemon's own).
    devices: ClusterState,
    /// GPUs whose reconfiguration failed, by (logical node, index), with the reason: they
    /// take no placement until the daemon restarts.
    unhealthy_gpus: BTreeMap<(u32, u32), String>,
    /// GPUs being reconfigured, by (logical node, index): the layout before.
    reconfiguring: BTreeMap<(u32, u32), Option<Vec<MigInstance>>>,
    /// Actions refused at the last scheduling point, with the reason (tests, logs).
    refused: Vec<(Action, Refusal)>,
    jobs: Vec<Job>,
    specs: Vec<TrainingJob>,
    by_id: HashMap<i64, usize>,
    by_handle: HashMap<String, usize>,
    active: BTreeSet<usize>,
    active_per_tenant: HashMap<String, usize>,
    /// Pending jobs per priority, so a new job's queue position costs no sort.
    pending_per_priority: BTreeMap<i32, usize>,
    next_id: i64,
    tokens: HashMap<String, (String, bool)>,
    job_tokens: HashMap<String, usize>,
    /// Runs whose stop failed, retried at the next poll.
    to_stop: Vec<RunRow>,
    /// Runs stopped (their node went down, the policy preempted or resized them, a retune
    /// restarted them, or a restart found them `stop`) until the backend has said how they
    /// ended: each may have completed just before the stop, so its job must not run again
    /// until then. A launch given up while in flight is in it too, under a placeholder handle
    /// ([`launch_placeholder`]) until it answers, then under its run's.
    verifying: HashMap<String, Verifying>,
    /// Placeholder handles ([`launch_placeholder`]) of launches given up while in flight, whose
    /// `launching` row is still open in the store: the launch's answer closes it, even when
    /// the job has been archived (and its entry in `verifying` dropped) meanwhile.
    launching_rows: HashSet<String>,
    /// Jobs whose run failed with its node, held until a fresh inventory says which nodes
    /// are down (so the policy does not place them on the dead node again).
    awaiting_inventory: Vec<usize>,
    /// Health per logical node as the backend last reported it.
    reported_health: Vec<NodeHealth>,
    /// Health set by an administrator, by backend node name; wins over the backend's.
    health_overrides: BTreeMap<String, NodeHealth>,
    /// Open runs read from the store at restart, until [`Core::finish_restore`].
    restoring: Vec<RunRow>,
    callback_url: Option<String>,
    metrics: Metrics,
    trigger: Trigger,
    next_round: Option<SimTime>,
    last_schedule: Option<SimTime>,
    last_accrual: SimTime,
    retry_at: Option<SimTime>,
    /// A one-off scheduling point the policy asked for ([`Policy::wakeup`]).
    wakeup: Option<SimTime>,
    /// What the policy sees as `view.active`, kept between scheduling points: only jobs that
    /// changed (`dirty`) and running jobs (their attained service) are brought up to date at
    /// each point, so a pass costs O(changes + running), not O(pending). In no particular
    /// order (removal swaps the last entry in), as the simulator keeps its own.
    active_buf: Vec<ActiveJob>,
    /// Each job's position in `active_buf`, by index ([`NOT_VISIBLE`] when absent).
    active_pos: Vec<u32>,
    /// Jobs changed since the last scheduling point, in the order they first changed.
    dirty: Vec<usize>,
    /// Whether a job is in `dirty`, by index.
    is_dirty: Vec<bool>,
    /// Jobs holding an allocation (starting or running): what accrues service and is polled.
    holding: BTreeSet<usize>,
    /// The policy keeps its own queue and is told every change of `active_buf`
    /// ([`Policy::track_jobs`]), as in the simulator.
    tracking: bool,
    /// Entries of `view.active` brought up to date from changed jobs at the last scheduling
    /// point (tests count it: it must not grow with the queue).
    pub(crate) last_synced: usize,
    /// Tests: the first scheduling point whose kept `view.active` differed from the one
    /// rebuilt from every job, with both.
    #[cfg(test)]
    pub(crate) view_mismatch: Option<String>,
    actions: Vec<Action>,
    commands: VecDeque<Command>,
    pending: WriteBatch,
    new_token: TokenSource,
    /// Jobs that finished since the last [`Core::archive_finished`].
    to_archive: Vec<usize>,
    /// Archived (or, after a restart, never loaded) finished jobs per state.
    archived_counts: BTreeMap<JobState, usize>,
    /// Slots of archived jobs still in the job table (see [`Core::compact_finished`]).
    archived_slots: usize,
    /// The fewest archived slots worth a compaction.
    compact_min: usize,
    /// The policy answered that it cannot renumber its jobs: slots stay until a restart.
    cannot_compact: bool,
    /// Inference services and their instances.
    services: services::Services,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("policy", &self.policy.name())
            .field("jobs", &self.jobs.len())
            .field("active", &self.active.len())
            .field("commands", &self.commands.len())
            .finish_non_exhaustive()
    }
}

fn sub(a: &mut Resources, b: &Resources) {
    a.gpus = a.gpus.saturating_sub(b.gpus);
    a.cpu.0 = a.cpu.0.saturating_sub(b.cpu.0);
    a.memory.0 = a.memory.0.saturating_sub(b.memory.0);
}

fn add(a: &mut Resources, b: &Resources, cap: &Resources) {
    a.gpus = (a.gpus + b.gpus).min(cap.gpus);
    a.cpu.0 = (a.cpu.0 + b.cpu.0).min(cap.cpu.0);
    a.memory.0 = (a.memory.0 + b.memory.0).min(cap.memory.0);
}

impl Core {
    /// A core over `map` scheduling with `policy`; `tenants` are (name, token SHA-256, admin).
    pub fn new(
        settings: CoreSettings,
        map: ClusterMap,
        mut policy: Box<dyn Policy>,
        tenants: Vec<(String, String, bool)>,
        new_token: TokenSource,
        now: SimTime,
    ) -> Core {
        let capacity: Vec<Resources> = map
            .cluster
            .nodes
            .iter()
            .zip(&map.logical)
            .map(|(n, l)| {
                if l.health == NodeHealth::Up {
                    map.cluster.capacity(n.id)
                } else {
                    Resources::default()
                }
            })
            .collect();
        let reported_health = map.logical.iter().map(|l| l.health).collect();
        let tracking = policy.track_jobs();
        let mut core = Core {
            settings,
            next_round: policy.round_length().map(|r| now + r),
            policy,
            free: capacity.clone(),
            capacity,
            devices: ClusterState::new(&map.cluster),
            unhealthy_gpus: BTreeMap::new(),
            reconfiguring: BTreeMap::new(),
            refused: Vec::new(),
            map,
            jobs: Vec::new(),
            specs: Vec::new(),
            by_id: HashMap::new(),
            by_handle: HashMap::new(),
            active: BTreeSet::new(),
            active_per_tenant: HashMap::new(),
            pending_per_priority: BTreeMap::new(),
            next_id: 1,
            tokens: tenants
                .into_iter()
                .map(|(name, hash, admin)| (hash, (name, admin)))
                .collect(),
            job_tokens: HashMap::new(),
            to_stop: Vec::new(),
            verifying: HashMap::new(),
            launching_rows: HashSet::new(),
            awaiting_inventory: Vec::new(),
            reported_health,
            health_overrides: BTreeMap::new(),
            restoring: Vec::new(),
            callback_url: None,
            metrics: Metrics::default(),
            trigger: Trigger {
                arrival: true,
                ..Trigger::default()
            },
            last_schedule: None,
            last_accrual: now,
            retry_at: None,
            wakeup: None,
            active_buf: Vec::new(),
            active_pos: Vec::new(),
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            holding: BTreeSet::new(),
            tracking,
            last_synced: 0,
            #[cfg(test)]
            view_mismatch: None,
            actions: Vec::new(),
            commands: VecDeque::new(),
            pending: WriteBatch::default(),
            new_token,
            to_archive: Vec::new(),
            archived_counts: BTreeMap::new(),
            archived_slots: 0,
            compact_min: COMPACT_MIN_SLOTS,
            cannot_compact: false,
            services: services::Services::default(),
        };
        for i in 0..core.map.logical.len() {
            if core.map.logical[i].health != NodeHealth::Up {
                core.mask_node(i, true);
            }
        }
        core
    }

    /// Marks every GPU of logical node `i` down (or up again) in the device state the policy
    /// reads (`view.state`), so that policies placing from it (the baselines' tracked queue,
    /// device-level mechanisms) see no free GPU on a node that is down or draining, exactly
    /// as the simulator masks a failed node. GPUs still held stay held until released.
    fn mask_node(&mut self, i: usize, down: bool) {
        let node = NodeId(i as u32);
        let gpus = self.devices.gpus(node).len() as u32;
        for g in 0..gpus {
            self.devices.set_down(node, g, down);
        }
    }

    /// Notes that job `idx` changed in a way the policy may see; it is brought up to date in
    /// `view.active` (and reported to a tracking policy) at the next scheduling point.
    fn touch(&mut self, idx: usize) {
        if self.is_dirty.len() <= idx {
            self.is_dirty.resize(idx + 1, false);
        }
        if !self.is_dirty[idx] {
            self.is_dirty[idx] = true;
            self.dirty.push(idx);
        }
    }

    /// The cluster the policy sees.
    pub fn cluster_map(&self) -> &ClusterMap {
        &self.map
    }

    /// How many jobs the core holds.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// The metrics collected so far.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The metrics, for the driver to add what only it measures (decision latency).
    pub fn metrics_mut(&mut self) -> &mut Metrics {
        &mut self.metrics
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &str {
        self.policy.name()
    }

    /// Asks for a scheduling point at the next chance (the store accepts writes again).
    pub fn request_schedule(&mut self) {
        self.trigger.completion = true;
    }

    /// Where the job table ends now, to [`forget_submissions`](Self::forget_submissions)
    /// accepted after it.
    pub fn submission_mark(&self) -> SubmissionMark {
        SubmissionMark {
            jobs: self.jobs.len(),
            next_id: self.next_id,
            submissions: self.metrics.submissions,
        }
    }

    /// Drops the jobs submitted since `mark` (the store refused to record them, so they were
    /// never acknowledged), and the pending write that held them.
    pub fn forget_submissions(&mut self, mark: SubmissionMark) {
        while self.jobs.len() > mark.jobs {
            let idx = self.jobs.len() - 1;
            let Some(job) = self.jobs.pop() else { break };
            self.specs.pop();
            self.by_id.remove(&job.row.id);
            self.holding.remove(&idx);
            self.hide(idx);
            if self.is_dirty.get(idx).copied().unwrap_or(false) {
                self.is_dirty[idx] = false;
                self.dirty.retain(|&i| i != idx);
            }
            if self.active.remove(&idx) {
                if let Some(n) = self.active_per_tenant.get_mut(&job.row.tenant) {
                    *n = n.saturating_sub(1);
                }
            }
            if job.row.state == JobState::Pending {
                if let Some(n) = self.pending_per_priority.get_mut(&job.row.priority) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        self.next_id = mark.next_id;
        self.metrics.submissions = mark.submissions;
    }

    /// Changes [`CoreSettings::arrival_coalescing`].
    pub fn set_arrival_coalescing(&mut self, interval: SimDuration) {
        self.settings.arrival_coalescing = interval;
    }

    /// Sets the URL jobs use to reach the API (`TESSERA_URL` in their environment).
    pub fn set_callback_url(&mut self, url: String) {
        self.callback_url = Some(url);
    }

    /// Jobs per state.
    pub fn count_by_state(&self) -> BTreeMap<JobState, usize> {
        let mut m = self.archived_counts.clone();
        for j in self.jobs.iter().filter(|j| !j.archived) {
            *m.entry(j.row.state).or_default() += 1;
        }
        m
    }

    /// How many jobs the core holds in full (archived finished jobs excluded).
    pub fn resident_jobs(&self) -> usize {
        self.by_id.len()
    }

    /// Whether the core holds job `id` in full (else the store has it, if anyone does).
    pub fn holds(&self, id: i64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Drops from memory the jobs that finished since the last call. The driver calls it once
    /// their final rows are durable; from then on they are served from the store (the API's
    /// reads of archived jobs and listings fall back to it). What remains of each is a slot with
    /// its id, tenant, queue and state, because the policy's job ids are indices.
    pub fn archive_finished(&mut self) {
        for idx in std::mem::take(&mut self.to_archive) {
            let Some(job) = self.jobs.get_mut(idx) else {
                continue;
            };
            if job.archived || !job.row.state.is_terminal() {
                continue;
            }
            job.archived = true;
            self.archived_slots += 1;
            *self.archived_counts.entry(job.row.state).or_default() += 1;
            self.by_id.remove(&job.row.id);
            if let Some(h) = job.row.handle.take() {
                if self.by_handle.get(&h) == Some(&idx) {
                    self.by_handle.remove(&h);
                }
            }
            job.spec = JobSpec::default();
            job.alloc = None;
            let r = &mut job.row;
            r.name = String::new();
            r.spec_json = String::new();
            r.placement = Vec::new();
            r.plan = None;
            r.message = None;
            r.backend_state = None;
            for s in [&mut r.name, &mut r.spec_json, &mut r.tenant, &mut r.queue] {
                s.shrink_to_fit();
            }
        }
    }

    /// Changes the fewest archived slots worth a compaction (tests).
    #[cfg(test)]
    pub(crate) fn set_compaction_threshold(&mut self, slots: usize) {
        self.compact_min = slots.max(1);
    }

    /// Drops the slots of archived jobs from the job table once they are at least as many as
    /// the jobs held (and [`COMPACT_MIN_SLOTS`]), renumbering the jobs that remain in order,
    /// so that finished jobs leave nothing in memory. Runs at the start of a scheduling point,
    /// after the view is brought up to date (no finished job is visible then, and no decision
    /// or staged submission holds an index). Only when the policy renumbers its own state
    /// ([`Policy::renumber_jobs`]); otherwise the slots stay until a restart.
    fn compact_finished(&mut self) {
        let held = self.jobs.len() - self.archived_slots;
        if self.cannot_compact
            || self.archived_slots < self.compact_min
            || self.archived_slots < held
            || !self.restoring.is_empty()
        {
            return;
        }
        let mut map: Vec<Option<tessera_model::JobId>> = Vec::with_capacity(self.jobs.len());
        let mut next = 0u32;
        for job in &self.jobs {
            if job.archived {
                map.push(None);
            } else {
                map.push(Some(tessera_model::JobId(next)));
                next += 1;
            }
        }
        // A finished job still in the view would be told `Ended` at the next point: wait.
        if self
            .active_buf
            .iter()
            .any(|a| map.get(a.id.index()).is_none_or(Option::is_none))
        {
            return;
        }
        if !self.policy.renumber_jobs(&map) {
            self.cannot_compact = true;
            return;
        }
        let to = |idx: usize| map.get(idx).copied().flatten().map(|j| j.index());
        let kept = |k: &mut usize| {
            *k += 1;
            map.get(*k - 1).is_some_and(Option::is_some)
        };
        let mut k = 0;
        self.jobs.retain(|_| kept(&mut k));
        let mut k = 0;
        self.specs.retain(|_| kept(&mut k));
        for (i, spec) in self.specs.iter_mut().enumerate() {
            spec.id = tessera_model::JobId(i as u32);
        }
        let remap_map = |m: &mut HashMap<String, usize>| {
            m.retain(|_, idx| match to(*idx) {
                Some(n) => {
                    *idx = n;
                    true
                }
                None => false,
            })
        };
        remap_map(&mut self.by_handle);
        remap_map(&mut self.job_tokens);
        self.verifying.retain(|_, v| match to(v.idx) {
            Some(n) => {
                v.idx = n;
                true
            }
            None => false,
        });
        self.by_id.retain(|_, idx| match to(*idx) {
            Some(n) => {
                *idx = n;
                true
            }
            None => false,
        });
        self.active = self.active.iter().filter_map(|&i| to(i)).collect();
        self.holding = self.holding.iter().filter_map(|&i| to(i)).collect();
        for list in [
            &mut self.awaiting_inventory,
            &mut self.dirty,
            &mut self.to_archive,
        ] {
            *list = list.iter().filter_map(|&i| to(i)).collect();
        }
        self.is_dirty = vec![false; self.jobs.len()];
        for &i in &self.dirty {
            self.is_dirty[i] = true;
        }
        self.active_pos = vec![NOT_VISIBLE; self.jobs.len()];
        for (pos, a) in self.active_buf.iter_mut().enumerate() {
            if let Some(n) = to(a.id.index()) {
                a.id = tessera_model::JobId(n as u32);
                self.active_pos[n] = pos as u32;
            }
        }
        self.actions.clear();
        self.refused.clear();
        self.archived_slots = 0;
    }

    /// Counts finished jobs a restart leaves in the store only (see
    /// [`archive_finished`](Self::archive_finished)); their ids are never reused.
    pub fn note_archived(&mut self, rows: &[JobRow]) {
        for r in rows {
            self.next_id = self.next_id.max(r.id + 1);
            *self.archived_counts.entry(r.state).or_default() += 1;
        }
    }

    /// The jobs as the policy sees them, indexed by the policy's job id (submission order).
    pub fn training_jobs(&self) -> &[TrainingJob] {
        &self.specs
    }

    /// A job's stored row, by daemon id.
    pub fn job_row(&self, id: i64) -> Option<&JobRow> {
        self.by_id.get(&id).map(|&i| &self.jobs[i].row)
    }

    // ---------------------------------------------------------------------------------------
    // Output

    /// The next command for the driver, in order; `None` when there is nothing left to do.
    pub fn poll_command(&mut self) -> Option<Command> {
        if let Some(c) = self.commands.pop_front() {
            return Some(c);
        }
        if self.pending.is_empty() {
            None
        } else {
            Some(Command::Persist(std::mem::take(&mut self.pending)))
        }
    }

    /// When the core next wants [`schedule`](Self::schedule) called without any input (a
    /// round boundary or a submission retry).
    pub fn poll_timeout(&self) -> Option<SimTime> {
        [
            self.next_round,
            self.retry_at,
            self.wakeup,
            self.deferred_arrivals(),
            self.services.timer,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When arrivals held back by [`CoreSettings::arrival_coalescing`] are due.
    fn deferred_arrivals(&self) -> Option<SimTime> {
        let t = self.trigger;
        if !t.arrival || t.completion || t.round {
            return None;
        }
        Some(self.last_schedule? + self.settings.arrival_coalescing)
    }

    /// Queues a command that acts on the world, after everything decided so far is persisted.
    fn act(&mut self, command: Command) {
        if !self.pending.is_empty() {
            let batch = std::mem::take(&mut self.pending);
            self.commands.push_back(Command::Persist(batch));
        }
        self.commands.push_back(command);
    }

    // ---------------------------------------------------------------------------------------
    // Jobs

    fn training_job(
        &self,
        idx: usize,
        spec: &JobSpec,
        submit_us: u64,
    ) -> Result<TrainingJob, ApiError> {
        let gpu_types = match &spec.gpu_type {
            Some(t) => vec![self.map.resolve_gpu(t).ok_or_else(|| {
                let mut known: Vec<String> = self
                    .map
                    .logical
                    .iter()
                    .filter_map(|l| l.gres_type.clone())
                    .chain(
                        self.map
                            .cluster
                            .groups
                            .iter()
                            .map(|g| self.map.cluster.catalog.get(g.gpu).name.clone()),
                    )
                    .collect();
                known.sort();
                known.dedup();
                ApiError::new(
                    400,
                    "unknown_gpu_type",
                    format!(
                        "unknown GPU type {t:?} (this cluster has: {})",
                        known.join(", ")
                    ),
                )
            })?],
            None => Vec::new(),
        };
        let mig = match &spec.mig {
            Some(text) => Some(self.mig_request(text, &gpu_types)?),
            None => None,
        };
        let duration = spec.hints.duration_seconds.unwrap_or(DEFAULT_DURATION_SECS);
        Ok(TrainingJob {
            id: tessera_model::JobId(idx as u32),
            name: spec.name.as_str().into(),
            submit: SimTime::from_micros(submit_us),
            tenant: spec.tenant.clone().unwrap_or_default(),
            priority: spec.priority,
            model: spec.hints.model.clone().unwrap_or_default(),
            batch_size: spec.hints.batch_size,
            gpus: spec.gpus,
            gpu_types,
            iterations: spec
                .hints
                .iterations
                .unwrap_or_else(|| duration.ceil().max(1.0) as u64),
            duration: SimDuration::from_secs_f64(duration),
            cpu: spec.cpu,
            memory: spec.memory,
            gpu_share: None,
            mig,
        })
    }

    /// A job's `mig` field, checked against this cluster: the GPU type it names (if any)
    /// must be MIG-capable with that profile, and some node must have such GPUs.
    fn mig_request(
        &self,
        text: &str,
        gpu_types: &[tessera_model::GpuModelId],
    ) -> Result<tessera_model::MigRequest, ApiError> {
        let bad = |m: String| ApiError::new(400, "invalid_mig", format!("mig: {m}"));
        let req = tessera_model::MigRequest::parse(text).map_err(bad)?;
        let catalog = &self.map.cluster.catalog;
        catalog.check_mig_request(&req, gpu_types).map_err(bad)?;
        let on_some_node = self.map.cluster.nodes.iter().any(|n| {
            (gpu_types.is_empty() || gpu_types.contains(&n.gpu))
                && catalog
                    .mig_geometry(n.gpu)
                    .is_some_and(|g| req.profile().is_none_or(|p| g.find_profile(p).is_some()))
        });
        if !on_some_node {
            let mut have: Vec<&str> = Vec::new();
            for n in &self.map.cluster.nodes {
                for p in catalog.mig_geometry(n.gpu).iter().flat_map(|g| &g.profiles) {
                    if !have.contains(&p.name.as_str()) {
                        have.push(&p.name);
                    }
                }
            }
            return Err(bad(format!(
                "no GPU of this cluster offers {req} (its MIG profiles: {})",
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            )));
        }
        Ok(req)
    }

    fn push_job(&mut self, row: JobRow, spec: JobSpec, tj: TrainingJob) -> usize {
        let idx = self.jobs.len();
        self.by_id.insert(row.id, idx);
        self.next_id = self.next_id.max(row.id + 1);
        if !row.state.is_terminal() {
            self.active.insert(idx);
            *self
                .active_per_tenant
                .entry(row.tenant.clone())
                .or_default() += 1;
        }
        if row.state == JobState::Pending {
            *self.pending_per_priority.entry(row.priority).or_default() += 1;
        }
        if let Some(h) = &row.handle {
            self.by_handle.insert(h.clone(), idx);
        }
        if let Some(t) = &row.job_token_sha256 {
            self.job_tokens.insert(t.clone(), idx);
        }
        // Service already attained, as recorded (exact to the µs it was written from).
        let attained_us = (row.attained_gpu_secs.max(0.0) * 1e6).round() as u64;
        self.jobs.push(Job {
            row,
            spec,
            alloc: None,
            submit_failures: 0,
            lost_runs: 0,
            held: false,
            parked: None,
            unverified_runs: 0,
            archived: false,
            attained_us,
        });
        self.specs.push(tj);
        self.touch(idx);
        idx
    }

    // ---------------------------------------------------------------------------------------
    // Restart reconciliation

    /// Loads the stored jobs and open runs after a (re)start. Jobs caught between `starting`
    /// and `running` get a [`Command::Find`] each; once the driver has answered them all it
    /// calls [`finish_restore`](Self::finish_restore).
    pub fn restore(
        &mut self,
        now: SimTime,
        rows: Vec<JobRow>,
        open_runs: Vec<RunRow>,
    ) -> Result<(), DaemonError> {
        let _ = now;
        for row in rows {
            let spec: JobSpec = serde_json::from_str(&row.spec_json)
                .map_err(|e| DaemonError::StoreFormat(format!("job {}: spec: {e}", row.id)))?;
            let idx = self.jobs.len();
            let tj = match self.training_job(idx, &spec, row.submit_us) {
                Ok(tj) => tj,
                Err(e) => {
                    // The inventory changed and the job's GPU type is gone: keep the record.
                    tracing::warn!(job = row.id, "{}", e.message);
                    let mut tj = TrainingJob::simple(
                        idx as u32,
                        SimTime::from_micros(row.submit_us),
                        spec.gpus,
                        SimDuration::from_secs(3600),
                    );
                    tj.gpu_types = vec![tessera_model::GpuModelId(u16::MAX)];
                    tj
                }
            };
            self.push_job(row, spec, tj);
        }
        for idx in self.active.clone() {
            let row = &self.jobs[idx].row;
            if row.state == JobState::Starting {
                let (job_id, attempt) = (row.id, row.attempt);
                self.commands.push_back(Command::Find {
                    job_id,
                    attempt,
                    run_name: Launch::run_name(&self.settings.instance, job_id, attempt),
                });
            }
        }
        // Launches given up while in flight when the daemon stopped: did the run start?
        for run in open_runs.iter().filter(|r| r.state == RunState::Launching) {
            self.commands.push_back(Command::Find {
                job_id: run.job_id,
                attempt: run.attempt,
                run_name: run_name_of(&self.settings.instance, run.job_id, run.attempt),
            });
        }
        self.restoring = open_runs;
        Ok(())
    }

    /// The answer to a [`Command::Find`]: adopt the run, or requeue the job when the start
    /// never happened.
    pub fn handle_found(&mut self, now: SimTime, job_id: i64, attempt: u32, run: Option<Handle>) {
        let launching = self.restoring.iter().position(|r| {
            r.state == RunState::Launching && r.job_id == job_id && r.attempt == attempt
        });
        if let Some(i) = launching {
            // A launch given up in flight: the run it started (if any) is a stopped run like
            // any other, stopped and (its job not run since) verified by `finish_restore`.
            let placeholder = self.restoring.swap_remove(i);
            self.pending.runs.push(RunRow {
                state: RunState::Gone,
                ..placeholder
            });
            if let Some(h) = run {
                let run = RunRow {
                    handle: h.0,
                    job_id,
                    attempt,
                    state: RunState::Stop,
                };
                self.pending.runs.push(run.clone());
                self.restoring.push(run);
            }
            return;
        }
        if services::Services::is_instance(job_id) {
            return self.instance_found(now, -job_id, attempt, run);
        }
        let now_us = now.as_micros();
        let Some(&idx) = self.by_id.get(&job_id) else {
            return;
        };
        if self.jobs[idx].row.state != JobState::Starting || self.jobs[idx].row.attempt != attempt {
            return;
        }
        match run {
            Some(h) => {
                tracing::info!(job = job_id, handle = %h.0, "adopting a run started before the restart");
                self.by_handle.insert(h.0.clone(), idx);
                self.pending.runs.push(RunRow {
                    handle: h.0.clone(),
                    job_id,
                    attempt,
                    state: RunState::Live,
                });
                self.jobs[idx].row.handle = Some(h.0);
                self.transition(
                    idx,
                    JobState::Running,
                    now_us,
                    "adopted after daemon restart",
                );
            }
            None => {
                let job = &mut self.jobs[idx];
                job.row.placement.clear();
                job.row.start_us = None;
                self.transition(
                    idx,
                    JobState::Pending,
                    now_us,
                    "start interrupted by a daemon restart; requeued",
                );
            }
        }
    }

    /// Ends restart reconciliation: reserves what running jobs hold and stops runs that must
    /// be stopped (a cancel or preemption decided before a crash) or that no job claims.
    pub fn finish_restore(&mut self, now: SimTime) {
        // MIG layouts are not stored: a partitioned GPU comes back with the instances its
        // running jobs hold (a valid part of its real layout), so nothing else is placed on
        // it; the policy may re-partition it once it is idle.
        let mut layouts: BTreeMap<(NodeId, u32), Vec<MigInstance>> = BTreeMap::new();
        for &idx in &self.active {
            let row = &self.jobs[idx].row;
            if row.state != JobState::Running {
                continue;
            }
            if let Some(a) = self.map.allocation(&row.placement) {
                for s in &a.shares {
                    if let Some(d) = s.devices {
                        if let GpuPart::Mig(inst) = d.part {
                            for g in d.gpus.iter() {
                                layouts.entry((s.node, g)).or_default().push(inst);
                            }
                        }
                    }
                }
            }
        }
        for ((node, gpu), mut layout) in layouts {
            layout.sort();
            layout.dedup();
            self.devices
                .reconfigure(node, gpu, Some(layout), SimTime::ZERO);
        }
        for idx in self.active.clone() {
            let job = &mut self.jobs[idx];
            if job.row.state == JobState::Running {
                job.alloc = self.map.allocation(&job.row.placement).map(|mut a| {
                    a.plan = job.row.plan;
                    a
                });
                match &mut job.alloc {
                    Some(a) => {
                        // Its run went on while the daemon was down: the service of its
                        // attempt's start (what the row holds) and the GPUs held since, up to
                        // the instant accruals continue from, as a daemon that never stopped
                        // would have counted.
                        if let Some(start) = job.row.start_us {
                            let since = self.last_accrual.as_micros().saturating_sub(start);
                            job.attained_us = job
                                .attained_us
                                .saturating_add((a.gpus() as u64).saturating_mul(since));
                        }
                        self.holding.insert(idx);
                        for s in &a.shares {
                            sub(&mut self.free[s.node.index()], &s.resources());
                        }
                        // Name the devices of records written before devices were named (the
                        // lowest free ones, as the backend picked them then).
                        if let Ok(named) = self.devices.resolve(
                            &self.map.cluster,
                            &self.specs[idx],
                            a,
                            SimTime::ZERO,
                        ) {
                            *a = named;
                        }
                        self.devices.take(&self.map.cluster, a);
                    }
                    None => tracing::warn!(
                        job = job.row.id,
                        "running on nodes no longer in the inventory"
                    ),
                }
            }
        }
        let mut unverified = Vec::new();
        for run in std::mem::take(&mut self.restoring) {
            let claimed = self.by_handle.get(&run.handle).is_some_and(|&i| {
                self.jobs[i].row.state == JobState::Running
                    && self.jobs[i].row.handle.as_deref() == Some(run.handle.as_str())
            });
            if run.state == RunState::Stop || (run.state == RunState::Live && !claimed) {
                // A stopped run of a job requeued since and not run again (its attempt, or an
                // earlier one when a start the policy decided while the run was being verified
                // was never launched): it may have completed before the stop, so the job
                // waits, held, for the backend to say how the run ended (as after a node
                // failure; the policy is new, so hiding the job confuses nothing).
                if let Some(&idx) = self.by_id.get(&run.job_id) {
                    let job = &mut self.jobs[idx];
                    if job.row.state == JobState::Pending && run.attempt <= job.row.attempt {
                        job.held = true;
                        // A stop that left the job queued at the run's own attempt was a
                        // preemption (policy or node failure: counted); a resize or restart
                        // started a later attempt (not counted). A preemption followed by a
                        // start never launched looks like the latter: its count stays.
                        let preempted = run.attempt == job.row.attempt;
                        self.start_verifying(
                            run.handle.clone(),
                            Verifying::new(
                                idx,
                                run.attempt,
                                None,
                                "stopped right after",
                                preempted,
                            ),
                        );
                        unverified.push(Handle(run.handle.clone()));
                    }
                }
                if services::Services::is_instance(run.job_id) {
                    // As before the restart, the instance's next attempt waits for the stop.
                    self.block_instance(&run.handle, -run.job_id);
                }
                let run = RunRow {
                    state: RunState::Stop,
                    ..run
                };
                self.act(Command::Stop {
                    run,
                    preempt: false,
                });
            }
        }
        if !unverified.is_empty() {
            self.act(Command::Verify(unverified));
        }
        // Record what finished while the daemon was down.
        self.poll_runs(now);
    }

    // ---------------------------------------------------------------------------------------
    // Transitions

    fn transition(&mut self, idx: usize, to: JobState, now_us: u64, detail: &str) {
        self.touch(idx);
        let holds = self.holding.contains(&idx);
        let job = &mut self.jobs[idx];
        if !holds {
            // While it holds an allocation the row keeps the service of its attempt's start
            // (set by `start_attempt`), from which a restart computes the rest.
            job.row.attained_gpu_secs = job.attained_us as f64 / 1e6;
        }
        let from = job.row.state;
        if (from == JobState::Pending) != (to == JobState::Pending) {
            let n = self
                .pending_per_priority
                .entry(job.row.priority)
                .or_default();
            if to == JobState::Pending {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
            }
        }
        job.row.state = to;
        job.row.message = Some(detail.to_string());
        if to.is_terminal() {
            self.to_archive.push(idx);
            job.row.end_us = Some(now_us);
            if let Some(t) = job.row.job_token_sha256.take() {
                self.job_tokens.remove(&t);
            }
            if self.active.remove(&idx) {
                if let Some(n) = self.active_per_tenant.get_mut(&job.row.tenant) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        self.pending.transitions.push(TransitionRow {
            job_id: job.row.id,
            at_us: now_us,
            from: Some(from),
            to,
            detail: detail.to_string(),
        });
        self.pending.jobs.push(job.row.clone());
    }

    /// Returns a job's allocation to the free pool.
    fn release(&mut self, idx: usize) {
        self.touch(idx);
        self.holding.remove(&idx);
        if let Some(a) = self.jobs[idx].alloc.take() {
            self.devices.release(&self.map.cluster, &a);
            for s in &a.shares {
                let i = s.node.index();
                let up = self
                    .map
                    .logical
                    .get(i)
                    .is_some_and(|l| l.health == NodeHealth::Up);
                if !up {
                    // A node that is down or draining keeps no free capacity: what the job
                    // held leaves the node's (held-only) capacity instead.
                    if let Some(c) = self.capacity.get_mut(i) {
                        sub(c, &s.resources());
                    }
                } else if let (Some(f), Some(c)) = (self.free.get_mut(i), self.capacity.get(i)) {
                    add(f, &s.resources(), c);
                }
            }
        }
        self.jobs[idx].row.placement.clear();
        self.jobs[idx].row.plan = None;
    }

    /// Detaches the job's run, recording it in `state` in the pending batch.
    fn detach_handle(&mut self, idx: usize, state: RunState) -> Option<RunRow> {
        let job = &mut self.jobs[idx];
        let h = job.row.handle.take()?;
        self.by_handle.remove(&h);
        let run = RunRow {
            handle: h,
            job_id: job.row.id,
            attempt: job.row.attempt,
            state,
        };
        self.pending.runs.push(run.clone());
        Some(run)
    }

    /// Detaches job `idx`'s run to stop it, as [`Core::detach_handle`], and keeps it in
    /// `verifying`: the daemon hears of completions only at poll ticks, so the run may have
    /// completed just before the stop, and no attempt of the job is launched until the
    /// backend has said how it ended (see [`Core::launch_when_verified`]). `cause` (what
    /// stopped it) goes into the job's message should it turn out to have ended on its own.
    /// The caller queues the run's [`Command::Stop`], then a [`Command::Verify`] of it.
    ///
    /// A job still starting has no run to detach yet; if its launch is in flight, the run
    /// that launch starts is given up the same way (see [`Core::supersede_launch`]).
    ///
    /// `preempted`: the caller counts the stop as a preemption of the job (see
    /// [`Verifying::preempted`]).
    fn detach_to_verify(
        &mut self,
        idx: usize,
        cause: &'static str,
        preempted: bool,
    ) -> Option<RunRow> {
        let Some(run) = self.detach_handle(idx, RunState::Stop) else {
            self.supersede_launch(idx, cause, preempted);
            return None;
        };
        let started = self.jobs[idx].row.start_us;
        let v = Verifying::new(idx, run.attempt, started, cause, preempted);
        self.start_verifying(run.handle.clone(), v);
        Some(run)
    }

    /// Job `idx`'s current attempt is given up (preempted, resized, restarted) while its launch
    /// is in flight. The run that launch may start is as much a stopped run as any: it may
    /// even have completed by the time the launch answers (a slow backend), so it is counted
    /// in `verifying` under a placeholder handle at once — no later attempt of the job is
    /// launched before it is stopped and verified (see [`Core::handle_launched`]) — and
    /// recorded `launching` in the store, so that a restart looks it up by name. Nothing to
    /// do when the attempt's launch was parked (never sent) or the job is not starting.
    fn supersede_launch(&mut self, idx: usize, cause: &'static str, preempted: bool) {
        let job = &self.jobs[idx];
        let v = Verifying::new(idx, job.row.attempt, job.row.start_us, cause, preempted);
        if let Some(handle) = self.record_launch_in_flight(idx) {
            self.start_verifying(handle, v);
        }
    }

    /// Records job `idx`'s launch as given up while in flight (`launching`, under its
    /// placeholder handle), if it is starting and its launch was sent (not parked): the
    /// run it may start has no handle yet, and a restart must still find and stop it.
    /// Returns the placeholder.
    fn record_launch_in_flight(&mut self, idx: usize) -> Option<String> {
        let job = &self.jobs[idx];
        let never_sent = job
            .parked
            .as_ref()
            .is_some_and(|l| l.attempt == job.row.attempt);
        if job.row.state != JobState::Starting || never_sent {
            return None;
        }
        let (job_id, attempt) = (job.row.id, job.row.attempt);
        let handle = launch_placeholder(&self.settings.instance, job_id, attempt);
        self.pending.runs.push(RunRow {
            handle: handle.clone(),
            job_id,
            attempt,
            state: RunState::Launching,
        });
        self.launching_rows.insert(handle.clone());
        Some(handle)
    }

    /// Puts a stopped run in `verifying`, counted on its job.
    fn start_verifying(&mut self, handle: String, v: Verifying) {
        let idx = v.idx;
        if self.verifying.insert(handle, v).is_none() {
            if let Some(job) = self.jobs.get_mut(idx) {
                job.unverified_runs += 1;
            }
        }
    }

    /// The answer to a [`Command::Stop`].
    pub fn handle_stopped(&mut self, run: RunRow, result: Result<(), BackendError>) {
        match result {
            // A run being verified stays `stop` in the store until the backend has said how
            // it ended: a restart in between verifies it again instead of running its job a
            // second time (it may have completed just before the stop). A Verify answered
            // before this stop was carried out is asked again now.
            Ok(()) if self.verifying.contains_key(&run.handle) => {
                if let Some(v) = self.verifying.get_mut(&run.handle) {
                    v.stopped = true;
                    if std::mem::take(&mut v.ask_again) {
                        self.act(Command::Verify(vec![Handle(run.handle)]));
                    }
                }
            }
            Ok(()) => {
                let handle = run.handle.clone();
                self.pending.runs.push(RunRow {
                    state: RunState::Gone,
                    ..run
                });
                // An instance's next attempt may have waited for this stop.
                self.instance_unblocked(&handle);
            }
            Err(e) => {
                self.metrics.backend_errors += 1;
                tracing::warn!(handle = %run.handle, "stopping run failed, will retry: {e}");
                self.to_stop.push(run);
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Backend polling

    /// A poll tick: retries failed stops and asks for the status of every run (a
    /// [`Command::Poll`] unless nothing runs).
    pub fn poll_runs(&mut self, now: SimTime) {
        for run in std::mem::take(&mut self.to_stop) {
            self.act(Command::Stop {
                run,
                preempt: false,
            });
        }
        let mut watched: Vec<Handle> = self
            .holding
            .iter()
            .filter_map(|&idx| self.jobs[idx].row.handle.clone().map(Handle))
            .collect();
        watched.extend(self.instance_poll(now));
        if !watched.is_empty() {
            self.commands.push_back(Command::Poll(watched));
        }
    }

    /// The backend could not be polled; the next tick tries again.
    pub fn handle_poll_failed(&mut self, error: &BackendError) {
        self.metrics.backend_errors += 1;
        tracing::warn!("backend poll failed: {error}");
    }

    /// The answer to a [`Command::Poll`]: records finished, failed and preempted runs.
    pub fn handle_statuses(&mut self, now: SimTime, statuses: Vec<(Handle, RunStatus)>) {
        let statuses = self.instance_statuses(now, statuses);
        let now = now.as_micros();
        for (h, status) in statuses {
            if self.verifying.contains_key(&h.0) {
                // A poll issued before the stop: only an ending is news; otherwise wait for
                // the answer to the Verify that follows the stop.
                self.verifying_status(h.0, &status, now, false);
                continue;
            }
            let Some(&idx) = self.by_handle.get(&h.0) else {
                continue;
            };
            match status {
                RunStatus::Pending { reason } => {
                    self.jobs[idx].row.backend_state = Some(format!("PENDING ({reason})"));
                }
                RunStatus::Running => {
                    self.jobs[idx].row.backend_state = Some("RUNNING".into());
                }
                RunStatus::Completed => {
                    self.finish(idx, JobState::Completed, Some(0), "completed", now);
                }
                RunStatus::Failed { reason, exit_code } => {
                    self.finish(
                        idx,
                        JobState::Failed,
                        exit_code,
                        &format!("failed: {reason}"),
                        now,
                    );
                }
                RunStatus::Cancelled => {
                    self.finish(
                        idx,
                        JobState::Failed,
                        None,
                        "cancelled outside tessera",
                        now,
                    );
                }
                RunStatus::Unknown => {
                    self.lost(idx, "the backend no longer knows the run", now);
                }
                RunStatus::NodeFailed { reason } => {
                    self.lost(idx, &format!("its node failed: {reason}"), now);
                    if self.jobs[idx].row.state == JobState::Pending {
                        self.jobs[idx].held = true;
                        self.touch(idx);
                        if self.awaiting_inventory.is_empty() {
                            self.commands.push_back(Command::Inventory);
                        }
                        self.awaiting_inventory.push(idx);
                    }
                }
                RunStatus::Preempted => {
                    *self.metrics.preemptions.entry("backend").or_default() += 1;
                    self.detach_handle(idx, RunState::Gone);
                    self.release(idx);
                    let job = &mut self.jobs[idx];
                    job.row.preemptions += 1;
                    job.row.backend_state = None;
                    self.transition(
                        idx,
                        JobState::Pending,
                        now,
                        "preempted by the backend; requeued",
                    );
                    self.trigger.completion = true;
                }
            }
        }
    }

    /// A run ended through no fault of its job (node failure, vanished from the backend): the
    /// job goes back to the queue for a new attempt, up to [`MAX_LOST_RUNS`] times.
    fn lost(&mut self, idx: usize, why: &str, now: u64) {
        *self.metrics.preemptions.entry("lost").or_default() += 1;
        self.jobs[idx].lost_runs += 1;
        if self.jobs[idx].lost_runs >= MAX_LOST_RUNS {
            let detail = format!("{why}; {MAX_LOST_RUNS} runs lost, giving up");
            self.finish(idx, JobState::Failed, None, &detail, now);
            return;
        }
        self.detach_handle(idx, RunState::Gone);
        self.release(idx);
        let job = &mut self.jobs[idx];
        job.row.preemptions += 1;
        job.row.backend_state = None;
        self.transition(idx, JobState::Pending, now, &format!("{why}; requeued"));
        self.trigger.completion = true;
    }

    /// The answer to a [`Command::Verify`]: how each stopped run (one stopped while its job
    /// goes on) ended. Once the stop has been carried out, whatever the status, it is the last
    /// word: the job is finished if its run had completed or failed on its own, else it may
    /// run again.
    pub fn handle_verified(&mut self, now: SimTime, statuses: Vec<(Handle, RunStatus)>) {
        let now = now.as_micros();
        for (h, status) in statuses {
            self.verifying_status(h.0, &status, now, true);
        }
    }

    /// A status of a run in `verifying`, from a [`Command::Verify`] (`verify`) or from a poll
    /// issued before the stop. An ending (anything but "running", "pending" or "unknown")
    /// settles it; so does any answer to a Verify made after the stop was carried out. A
    /// Verify answered before that is asked again once the stop is done.
    fn verifying_status(&mut self, handle: String, status: &RunStatus, now: u64, verify: bool) {
        let Some(v) = self.verifying.get_mut(&handle) else {
            return;
        };
        let ended = status.is_terminal() && *status != RunStatus::Unknown;
        let settled = ended || (verify && v.stopped);
        if !settled {
            v.ask_again |= verify;
            return;
        }
        if let Some(v) = self.verifying.remove(&handle) {
            if let Some(job) = self.jobs.get_mut(v.idx) {
                job.unverified_runs = job.unverified_runs.saturating_sub(1);
            }
            self.verified(handle, v, status, now);
        }
    }

    /// A stopped run's ending is known: it is recorded over (under its own attempt), and its
    /// job, if it has not run since (queued, or started by the policy with its launch parked),
    /// is finished when the run had completed or failed on its own, else released: shown to
    /// the policy again, its parked launch carried out.
    fn verified(&mut self, handle: String, v: Verifying, status: &RunStatus, now: u64) {
        let idx = v.idx;
        self.pending.runs.push(RunRow {
            handle,
            job_id: self.jobs[idx].row.id,
            attempt: v.attempt,
            state: RunState::Gone,
        });
        let job = &self.jobs[idx];
        let unstarted = match job.row.state {
            JobState::Pending => true,
            JobState::Starting => job
                .parked
                .as_ref()
                .is_some_and(|l| l.attempt == job.row.attempt),
            _ => false,
        };
        let own_end = match status {
            // It finished before the stop: record that rather than run it again.
            RunStatus::Completed => Some((
                JobState::Completed,
                Some(0),
                format!("completed ({})", v.cause),
            )),
            RunStatus::Failed {
                exit_code: Some(code),
                reason,
            } => Some((
                JobState::Failed,
                Some(*code),
                format!("failed: {reason} ({})", v.cause),
            )),
            _ => None,
        };
        self.touch(idx);
        self.trigger.completion = true;
        if let (true, Some((to, exit, detail))) = (unstarted, own_end) {
            // A parked start is dropped with the allocation it held.
            self.jobs[idx].parked = None;
            self.release(idx);
            let job = &mut self.jobs[idx];
            // The record is that of the run that ended, not of an attempt started since and
            // never launched (its parked start was just dropped).
            job.row.attempt = v.attempt;
            if v.start_us.is_some() {
                job.row.start_us = v.start_us;
            }
            job.held = false;
            job.row.exit_code = exit;
            job.row.backend_state = None;
            // It ended before the stop: not a preemption (the metric, a counter of stops the
            // daemon made, keeps it).
            if v.preempted {
                job.row.preemptions = job.row.preemptions.saturating_sub(1);
            }
            self.transition(idx, to, now, &detail);
            return;
        }
        if self.awaits_verification(idx) {
            return; // another stopped run of the job is still unverified
        }
        let job = &mut self.jobs[idx];
        job.held = false;
        if let Some(launch) = job.parked.take() {
            // Unless the attempt was given up meanwhile (cancelled, preempted, restarted).
            if job.row.state == JobState::Starting && job.row.attempt == launch.attempt {
                self.act(Command::Launch(launch));
            }
        }
    }

    /// Whether a stopped run of job `idx` is still being verified: a start decided now is
    /// recorded, but its launch waits (see [`Job::parked`]).
    fn awaits_verification(&self, idx: usize) -> bool {
        self.jobs.get(idx).is_some_and(|j| j.unverified_runs > 0)
    }

    /// Launches an attempt of job `idx` now, or parks it until the job's stopped runs are
    /// verified.
    fn launch_when_verified(&mut self, idx: usize, launch: Launch) {
        if self.awaits_verification(idx) {
            self.jobs[idx].parked = Some(launch);
        } else {
            self.act(Command::Launch(launch));
        }
    }

    fn finish(&mut self, idx: usize, to: JobState, exit: Option<i32>, detail: &str, now: u64) {
        self.detach_handle(idx, RunState::Gone);
        self.release(idx);
        let job = &mut self.jobs[idx];
        job.row.exit_code = exit;
        job.row.backend_state = None;
        self.transition(idx, to, now, detail);
        self.trigger.completion = true;
    }

    // ---------------------------------------------------------------------------------------
    // Inventory

    /// A fresh inventory: applies node health changes (a node going down or draining stops
    /// receiving jobs; one coming back is schedulable again). Nodes added or removed since
    /// start-up need a restart and are only logged.
    pub fn handle_inventory(&mut self, now: SimTime, nodes: &[InventoryNode]) {
        for (i, l) in self.map.logical.iter().enumerate() {
            self.reported_health[i] = match nodes.iter().find(|n| n.name == l.node) {
                Some(n) => n.health,
                None => NodeHealth::Down,
            };
        }
        if nodes
            .iter()
            .any(|n| !self.map.logical.iter().any(|l| l.node == n.name))
        {
            tracing::warn!(
                "the backend reports nodes added since start-up; restart the daemon to use them"
            );
        }
        self.apply_health(now);
        self.release_awaiting_inventory();
    }

    fn release_awaiting_inventory(&mut self) {
        for idx in std::mem::take(&mut self.awaiting_inventory) {
            self.jobs[idx].held = false;
            self.touch(idx);
            self.trigger.completion = true;
        }
    }

    /// Sets (or, with `None`, clears) an administrator's health for a backend node, which
    /// wins over what the backend reports: `down` stops and requeues the node's jobs,
    /// `draining` lets them finish but places nothing new there.
    pub fn set_node_health(
        &mut self,
        now: SimTime,
        node: &str,
        health: Option<NodeHealth>,
    ) -> Result<(), ApiError> {
        if !self.map.logical.iter().any(|l| l.node == node) {
            return Err(ApiError::not_found(format!(
                "no node {:?}",
                node.chars().take(64).collect::<String>()
            )));
        }
        match health {
            Some(h) => self.health_overrides.insert(node.to_string(), h),
            None => self.health_overrides.remove(node),
        };
        self.apply_health(now);
        Ok(())
    }

    /// Applies health changes (backend or administrator) to capacity, and fails over the jobs
    /// of nodes that went down.
    fn apply_health(&mut self, now: SimTime) {
        let mut changed = false;
        let mut went_down = Vec::new();
        // (logical node, now up): applied to the device state once the loop is done.
        let mut masks: Vec<(usize, bool)> = Vec::new();
        for (i, l) in self.map.logical.iter_mut().enumerate() {
            let health = self
                .health_overrides
                .get(&l.node)
                .copied()
                .unwrap_or(self.reported_health[i]);
            if health == l.health {
                continue;
            }
            if health == NodeHealth::Down {
                went_down.push(l.node.clone());
            }
            tracing::info!(node = %l.node, ?health, "node health changed");
            let was_up = l.health == NodeHealth::Up;
            l.health = health;
            changed = true;
            if was_up != (health == NodeHealth::Up) {
                masks.push((i, !was_up));
            }
            let full = self.map.cluster.capacity(tessera_model::NodeId(i as u32));
            let cap = if health == NodeHealth::Up {
                full
            } else {
                Resources::default()
            };
            // What jobs hold stays held; only the schedulable remainder changes.
            let held = Resources {
                gpus: self.capacity[i].gpus.saturating_sub(self.free[i].gpus),
                cpu: MilliCpu(self.capacity[i].cpu.0.saturating_sub(self.free[i].cpu.0)),
                memory: Bytes(
                    self.capacity[i]
                        .memory
                        .0
                        .saturating_sub(self.free[i].memory.0),
                ),
            };
            let mut free = cap;
            sub(&mut free, &held);
            self.capacity[i] = if health == NodeHealth::Up { full } else { held };
            self.free[i] = if health == NodeHealth::Up {
                free
            } else {
                Resources::default()
            };
        }
        for (i, up) in masks {
            self.mask_node(i, !up);
        }
        if changed {
            self.trigger.completion = true;
        }
        if went_down.is_empty() {
            return;
        }
        let victims: Vec<usize> = self
            .active
            .iter()
            .copied()
            .filter(|&i| {
                let r = &self.jobs[i].row;
                r.state == JobState::Running
                    && r.placement.iter().any(|s| went_down.contains(&s.node))
            })
            .collect();
        self.fail_over(now, &victims);
    }

    /// Stops the runs of jobs whose node went down and requeues the jobs, held out of the
    /// policy's view until the backend has told whether each stopped run had completed.
    fn fail_over(&mut self, now: SimTime, victims: &[usize]) {
        let now_us = now.as_micros();
        let mut stopped = Vec::new();
        for &idx in victims {
            *self.metrics.preemptions.entry("node_down").or_default() += 1;
            let run = self.detach_to_verify(idx, "its node went down right after", true);
            self.release(idx);
            let job = &mut self.jobs[idx];
            job.row.preemptions += 1;
            job.row.backend_state = None;
            job.held = run.is_some();
            self.transition(
                idx,
                JobState::Pending,
                now_us,
                "a node it ran on went down; requeued",
            );
            stopped.extend(run);
        }
        let handles: Vec<Handle> = stopped.iter().map(|r| Handle(r.handle.clone())).collect();
        for run in stopped {
            self.act(Command::Stop {
                run,
                preempt: false,
            });
        }
        if !handles.is_empty() {
            self.act(Command::Verify(handles));
        }
        self.trigger.completion = true;
    }

    /// The inventory could not be read; the next refresh tries again.
    pub fn handle_inventory_failed(&mut self, error: &BackendError) {
        self.metrics.backend_errors += 1;
        tracing::warn!("inventory refresh failed: {error}");
        self.release_awaiting_inventory();
    }

    // ---------------------------------------------------------------------------------------
    // Scheduling

    /// True when a scheduling call is due (an event happened or a timeout passed).
    pub fn wants_schedule(&self, now: SimTime) -> bool {
        let t = self.trigger;
        (t.arrival && self.deferred_arrivals().is_none_or(|due| now >= due))
            || t.completion
            || t.round
            || t.reconfigured
            || self.next_round.is_some_and(|r| now >= r)
            || self.retry_at.is_some_and(|r| now >= r)
            || self.wakeup.is_some_and(|w| now >= w)
            || self.services.timer.is_some_and(|t| now >= t)
    }

    /// Brings the attained service of every job holding an allocation up to `now` (exact
    /// GPU·µs), and its `view.active` entry with it. O(jobs holding), never O(pending).
    fn accrue(&mut self, now: SimTime) {
        let dt = now.saturating_since(self.last_accrual).as_micros();
        self.last_accrual = now;
        for &idx in &self.holding {
            let job = &mut self.jobs[idx];
            if let Some(a) = &job.alloc {
                job.attained_us = job
                    .attained_us
                    .saturating_add((a.gpus() as u64).saturating_mul(dt));
            }
            if let Some(e) = self
                .active_pos
                .get(idx)
                .and_then(|&p| self.active_buf.get_mut(p as usize))
            {
                e.attained_gpu_us = job.attained_us;
                e.attained_gpu_secs = job.attained_us as f64 / 1e6;
                // Grows from now at the GPUs held per µs (what a tracking LAS computes).
                e.resumes_at = Some(now);
            }
        }
    }

    /// What the policy sees of job `idx` now, `None` when it sees nothing (finished,
    /// archived, or held after a node failure).
    fn active_entry(&self, idx: usize, now: SimTime) -> Option<ActiveJob> {
        let job = self.jobs.get(idx)?;
        if job.held || job.archived || job.row.state.is_terminal() {
            return None;
        }
        let spec = self.specs.get(idx)?;
        let running = job.row.state != JobState::Pending;
        let done = job.row.progress_iters as f64;
        let throughput = job
            .row
            .iters_per_sec
            .filter(|v| *v > 0.0)
            .unwrap_or_else(|| spec.reference_throughput());
        Some(ActiveJob {
            state: if running {
                tessera_sched::JobState::Running
            } else {
                tessera_sched::JobState::Queued
            },
            allocation: if running { job.alloc.clone() } else { None },
            attained_gpu_secs: job.attained_us as f64 / 1e6,
            attained_gpu_us: job.attained_us,
            resumes_at: running.then_some(now),
            remaining_iters: (spec.iterations as f64 - done).max(0.0),
            throughput_estimate: throughput,
            first_start: job.row.start_us.map(SimTime::from_micros),
            preemptions: job.row.preemptions,
            // The daemon does not profile jobs (yet): policies treat them as insensitive.
            ..ActiveJob::arrived(spec)
        })
    }

    /// Removes job `idx` from `view.active` (if there), reporting it to a tracking policy.
    fn hide(&mut self, idx: usize) {
        let Some(pos) = self
            .active_pos
            .get(idx)
            .copied()
            .filter(|&p| p != NOT_VISIBLE)
        else {
            return;
        };
        self.active_pos[idx] = NOT_VISIBLE;
        let gone = self.active_buf.swap_remove(pos as usize);
        if let Some(moved) = self.active_buf.get(pos as usize) {
            self.active_pos[moved.id.index()] = pos;
        }
        if self.tracking {
            self.policy.observe(JobChange::Ended(gone.id));
        }
    }

    /// Brings `view.active` up to date with the jobs changed since the last scheduling point
    /// and tells a tracking policy what changed, in the order the jobs first changed.
    fn sync_active(&mut self, now: SimTime) {
        let dirty = std::mem::take(&mut self.dirty);
        self.last_synced = dirty.len();
        for &idx in &dirty {
            if let Some(d) = self.is_dirty.get_mut(idx) {
                *d = false;
            }
            let Some(entry) = self.active_entry(idx, now) else {
                self.hide(idx);
                continue;
            };
            if self.active_pos.len() <= idx {
                self.active_pos.resize(idx + 1, NOT_VISIBLE);
            }
            let pos = self.active_pos[idx];
            let change = if pos == NOT_VISIBLE {
                self.active_pos[idx] = self.active_buf.len() as u32;
                self.active_buf.push(entry);
                Some(self.active_buf.len() - 1)
            } else {
                let old = &mut self.active_buf[pos as usize];
                let before = (old.state, old.allocation.clone(), old.remaining_iters);
                let moved = before
                    != (entry.state, entry.allocation.clone(), entry.remaining_iters)
                    || old.throughput_estimate != entry.throughput_estimate
                    || old.attained_gpu_us != entry.attained_gpu_us;
                *old = entry;
                moved.then_some(pos as usize)
            };
            if let (true, Some(p)) = (self.tracking, change) {
                let job = &self.active_buf[p];
                let spec = &self.specs[idx];
                let c = match job.state {
                    tessera_sched::JobState::Running => JobChange::Started(job, spec),
                    // A queued job seen for the first time arrives; one seen before (it was
                    // running, or its progress moved its key) goes back in the queue.
                    tessera_sched::JobState::Queued if pos == NOT_VISIBLE => {
                        JobChange::Arrived(job, spec)
                    }
                    tessera_sched::JobState::Queued => JobChange::Preempted(job, spec),
                };
                self.policy.observe(c);
            }
        }
        self.dirty = dirty;
        self.dirty.clear();
    }

    /// `view.active` rebuilt from scratch (the reference the incremental one is tested
    /// against), sorted by job id.
    #[cfg(test)]
    pub(crate) fn full_active(&self, now: SimTime) -> Vec<ActiveJob> {
        (0..self.jobs.len())
            .filter_map(|i| self.active_entry(i, now))
            .collect()
    }

    /// The incremental `view.active` as of the last scheduling point, sorted by job id.
    #[cfg(test)]
    pub(crate) fn kept_active(&self) -> Vec<ActiveJob> {
        let mut v = self.active_buf.clone();
        v.sort_by_key(|j| j.id);
        v
    }

    /// One scheduling point: [`decide`](Self::decide), then [`apply`](Self::apply).
    pub fn schedule(&mut self, now: SimTime) {
        let decisions = self.decide(now);
        self.apply(now, decisions);
    }

    /// The decision half of a scheduling point: builds the view, calls the policy and
    /// validates its actions against free capacity (what `tessera_scheduling_latency_seconds`
    /// measures). Nothing changes until [`apply`](Self::apply).
    pub fn decide(&mut self, now: SimTime) -> Decisions {
        self.last_schedule = Some(now);
        let mut trigger = std::mem::take(&mut self.trigger);
        if self.retry_at.is_some_and(|r| now >= r) {
            self.retry_at = None;
            trigger.completion = true;
        }
        if self.wakeup.is_some_and(|w| now >= w) {
            self.wakeup = None;
            trigger.wakeup = true;
        }
        if let (Some(r), Some(len)) = (self.next_round, self.policy.round_length()) {
            if now >= r {
                trigger.round = true;
                let mut next = r;
                while next <= now {
                    next += len.max(SimDuration::from_micros(1));
                }
                self.next_round = Some(next);
            }
        }
        if self.services.timer.is_some_and(|t| now >= t) {
            trigger.wakeup = true;
        }
        self.accrue(now);
        self.sync_active(now);
        self.compact_finished();
        #[cfg(test)]
        if self.view_mismatch.is_none() {
            let (kept, full) = (self.kept_active(), self.full_active(now));
            if kept != full {
                self.view_mismatch = Some(format!("at {now:?}: kept {kept:?}, rebuilt {full:?}"));
            }
            for (i, job) in self.jobs.iter().enumerate() {
                let n = self.verifying.values().filter(|v| v.idx == i).count();
                if n != job.unverified_runs as usize {
                    self.view_mismatch = Some(format!(
                        "at {now:?}: job {i} counts {} runs being verified, {n} are",
                        job.unverified_runs
                    ));
                    break;
                }
            }
        }
        self.build_service_views(now);
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        // What the policy sees as free: the device-level state, nothing on nodes that are
        // not up.
        let view_free: Vec<Resources> = self
            .devices
            .free()
            .iter()
            .zip(&self.map.logical)
            .map(|(f, l)| {
                if l.health == NodeHealth::Up {
                    *f
                } else {
                    Resources::default()
                }
            })
            .collect();
        {
            let view = ClusterView {
                now,
                trigger,
                cluster: &self.map.cluster,
                free: &view_free,
                state: &self.devices,
                jobs: &self.specs,
                active: &self.active_buf,
                services: &self.services.views,
            };
            self.policy.schedule(&view, &mut actions);
        }
        // As the simulator: a later wake-up replaces the pending one; none keeps it.
        if let Some(at) = self.policy.wakeup().filter(|&at| at > now) {
            self.wakeup = Some(at);
        }
        // Validate in order against a scratch copy of the device state, as the simulator
        // does: an action sees the effect of the earlier ones of its batch.
        let mut scratch = self.devices.clone();
        let mut holding: BTreeMap<usize, Option<Allocation>> = BTreeMap::new();
        let mut instances: BTreeMap<i64, Option<Allocation>> = BTreeMap::new();
        let mut plans = Vec::new();
        self.refused.clear();
        for action in actions.drain(..) {
            let checked = if action.service().is_some() {
                self.check_service(&mut scratch, &mut instances, &action, now)
            } else {
                self.check(&mut scratch, &mut holding, &action, now)
            };
            match checked {
                Ok(p) => plans.push(p),
                Err(e) => {
                    self.metrics.rejected_actions += 1;
                    tracing::warn!(
                        policy = self.policy.name(),
                        action = action.kind(),
                        job = ?action.job(),
                        "refused: {e}"
                    );
                    self.refused.push((action, e));
                }
            }
        }
        self.actions = actions;
        Decisions(plans)
    }

    /// The actions refused at the last scheduling point, with the reasons.
    pub fn refused(&self) -> &[(Action, Refusal)] {
        &self.refused
    }

    /// Checks one action against `scratch` (the device state after the batch's earlier
    /// actions) and applies it there: [`tessera_sched::validate`], then the daemon's own
    /// checks (node health, GPU health).
    fn check(
        &self,
        scratch: &mut ClusterState,
        holding: &mut BTreeMap<usize, Option<Allocation>>,
        action: &Action,
        now: SimTime,
    ) -> Result<Plan, Refusal> {
        if let Action::Reconfigure { node, gpu, layout } = action {
            self.check_node_up(*node)?;
            self.check_gpu_healthy(*node, *gpu)?;
            scratch.check_reconfigure(&self.map.cluster, *node, *gpu, layout.as_deref())?;
            // Unavailable until the backend has answered (then ready at once, or unhealthy).
            scratch.reconfigure(*node, *gpu, layout.clone(), SimTime::MAX);
            return Ok(Plan::Reconfigure(*node, *gpu, layout.clone()));
        }
        let Some(job) = action.job() else {
            return Err(Refusal::Unsupported(action.kind()));
        };
        let idx = job.index();
        // The daemon's own checks first: what the simulator has no notion of.
        if let Action::Start { allocation, .. }
        | Action::Resize { allocation, .. }
        | Action::Retune { allocation, .. } = action
        {
            for s in &allocation.shares {
                self.check_node_up(s.node)?;
                if let Some(d) = s.devices {
                    for g in d.gpus.iter() {
                        self.check_gpu_healthy(s.node, g)?;
                    }
                }
            }
        }
        let current = match holding.get(&idx) {
            Some(h) => h.clone(),
            None => {
                let j = self
                    .jobs
                    .get(idx)
                    .filter(|j| !j.held && !j.row.state.is_terminal())
                    .ok_or(Refusal::NotActive(idx))?;
                if j.row.state == JobState::Pending {
                    None
                } else {
                    j.alloc.clone()
                }
            }
        };
        let new = validate(
            scratch,
            &self.map.cluster,
            &self.specs[idx],
            current.as_ref(),
            action,
            now,
        )?;
        let plan = match (action, new.clone()) {
            (Action::Start { .. }, Some(a)) => Plan::Start(idx, a),
            (Action::Preempt { .. }, None) => Plan::Preempt(idx),
            (Action::Resize { .. }, Some(a)) => Plan::Resize(idx, a),
            (Action::Retune { .. }, Some(a)) => Plan::Retune(idx, a),
            // Variants the daemon does not carry out (yet): refused, never half-applied.
            (other, _) => return Err(Refusal::Unsupported(other.kind())),
        };
        if let Some(old) = &current {
            scratch.release(&self.map.cluster, old);
        }
        if let Some(a) = &new {
            scratch.take(&self.map.cluster, a);
        }
        holding.insert(idx, new);
        Ok(plan)
    }

    fn check_node_up(&self, node: NodeId) -> Result<(), Refusal> {
        match self.map.logical.get(node.index()) {
            Some(l) if l.health == NodeHealth::Up => Ok(()),
            Some(l) => Err(Refusal::NodeNotUp(l.node.clone())),
            None => Err(Refusal::NodeNotUp(format!("#{}", node.0))),
        }
    }

    fn check_gpu_healthy(&self, node: NodeId, gpu: u32) -> Result<(), Refusal> {
        match self.unhealthy_gpus.get(&(node.0, gpu)) {
            None => Ok(()),
            Some(reason) => Err(Refusal::GpuUnhealthy {
                node: self
                    .map
                    .logical
                    .get(node.index())
                    .map_or_else(String::new, |l| l.node.clone()),
                gpu,
                reason: reason.clone(),
            }),
        }
    }

    /// The recording half of a scheduling point: writes the transitions and queues the stops,
    /// reconfigurations, retunes and launches, in that order (after a [`Command::Persist`] of
    /// those transitions): holders of a GPU are stopped before it is reconfigured.
    pub fn apply(&mut self, now: SimTime, decisions: Decisions) {
        let plans = decisions.0;
        if plans.is_empty() {
            return;
        }
        // Record every decision; `act` persists them before the first stop or launch.
        let now_us = now.as_micros();
        let mut to_preempt: Vec<RunRow> = Vec::new();
        let mut to_start: Vec<Launch> = Vec::new();
        let mut to_retune: Vec<Retune> = Vec::new();
        let mut to_restart: Vec<i64> = Vec::new();
        let mut to_reconfigure: Vec<Command> = Vec::new();
        let mut to_restart_instances: Vec<i64> = Vec::new();
        for plan in plans {
            match plan {
                Plan::ScaleOut(idx, alloc) => to_start.push(self.scale_out(idx, alloc, now_us)),
                Plan::ScaleIn(id) => to_preempt.extend(self.scale_in(id)),
                Plan::RetuneInstance(id, alloc) => match self.retune_instance(id, alloc) {
                    Some(r) => to_retune.push(r),
                    None => to_restart_instances.push(id),
                },
                Plan::Preempt(idx) => {
                    *self.metrics.preemptions.entry("policy").or_default() += 1;
                    // The run may have completed since the last poll. The job stays visible to
                    // the policy, queued (hiding it would tell a tracking policy it ended, and
                    // policies that re-place what they preempt, as MISO, lose track), but
                    // none of its starts is launched until the backend has said how the run
                    // ended: if it had completed, the job is finished instead (a start the
                    // policy decided meanwhile is dropped, which it sees as the job ending).
                    // Refusing those starts instead would break re-placements decided in
                    // the same batch as the preemption.
                    to_preempt.extend(self.detach_to_verify(
                        idx,
                        "preempted by the policy right after",
                        true,
                    ));
                    self.release(idx);
                    let job = &mut self.jobs[idx];
                    job.row.preemptions += 1;
                    job.row.backend_state = None;
                    self.transition(
                        idx,
                        JobState::Pending,
                        now_us,
                        "preempted by the policy; requeued",
                    );
                }
                Plan::Retune(idx, alloc) => {
                    if let Some(old) = self.jobs[idx].alloc.take() {
                        self.devices.release(&self.map.cluster, &old);
                        for s in &old.shares {
                            let i = s.node.index();
                            add(&mut self.free[i], &s.resources(), &self.capacity[i]);
                        }
                    }
                    self.hold(idx, alloc);
                    let job = &self.jobs[idx];
                    let (id, attempt, state) = (job.row.id, job.row.attempt, job.row.state);
                    let handle = job.row.handle.clone();
                    self.transition(idx, state, now_us, "retuned by the policy");
                    match handle {
                        Some(h) => to_retune.push(Retune {
                            handle: Handle(h),
                            job_id: id,
                            attempt,
                            placement: self.jobs[idx].row.placement.clone(),
                        }),
                        // Still starting: the launch in flight carries the old quota, so a
                        // new attempt replaces it, launched once the run the old launch
                        // starts has been stopped and verified (see `supersede_launch`).
                        None => to_restart.push(id),
                    }
                }
                Plan::Reconfigure(node, gpu, layout) => {
                    let before = self
                        .devices
                        .gpus(node)
                        .get(gpu as usize)
                        .and_then(|g| g.mig.clone());
                    self.devices
                        .reconfigure(node, gpu, layout.clone(), SimTime::MAX);
                    self.reconfiguring.insert((node.0, gpu), before.clone());
                    let name = self
                        .map
                        .logical
                        .get(node.index())
                        .map_or_else(String::new, |l| l.node.clone());
                    let placed = |l: &Option<Vec<MigInstance>>| {
                        l.as_ref()
                            .map(|l| self.map.placed_layout(node, l).unwrap_or_default())
                    };
                    to_reconfigure.push(Command::Reconfigure {
                        node,
                        request: Reconfigure {
                            node: name,
                            gpu,
                            from: placed(&before),
                            to: placed(&layout),
                        },
                    });
                }
                Plan::Start(idx, alloc) | Plan::Resize(idx, alloc) => {
                    let resize = self.jobs[idx].row.state != JobState::Pending;
                    if resize {
                        // As a preemption: the stopped run may have completed since the last
                        // poll, so the resized attempt is launched only once the backend has
                        // said it did not (it is dropped, and the job finished, if it did).
                        *self.metrics.preemptions.entry("resize").or_default() += 1;
                        to_preempt.extend(self.detach_to_verify(
                            idx,
                            "resized by the policy right after",
                            false,
                        ));
                        self.release(idx);
                    }
                    let detail = if resize {
                        "resized by the policy"
                    } else {
                        "started by the policy"
                    };
                    let launch = self.start_attempt(idx, alloc, now_us, detail);
                    if self.awaits_verification(idx) {
                        self.jobs[idx].parked = Some(launch);
                    } else {
                        to_start.push(launch);
                    }
                }
            }
        }
        // The runs stopped here that may have completed (all but scaled-in instances').
        let to_verify: Vec<Handle> = to_preempt
            .iter()
            .filter(|r| self.verifying.contains_key(&r.handle))
            .map(|r| Handle(r.handle.clone()))
            .collect();
        for run in to_preempt {
            self.act(Command::Stop { run, preempt: true });
        }
        for c in to_reconfigure {
            self.act(c);
        }
        for r in to_retune {
            self.act(Command::Retune(r));
        }
        for id in to_restart {
            self.restart_in_place(now, id, "retuned while starting");
        }
        for id in to_restart_instances {
            self.restart_instance(id, "retuned while starting");
        }
        for launch in to_start {
            self.act(Command::Launch(launch));
        }
        // Last: only the launches parked behind it wait for its answer.
        if !to_verify.is_empty() {
            self.act(Command::Verify(to_verify));
        }
    }

    /// Records that job `idx` holds `alloc` (resolved: devices named).
    fn hold(&mut self, idx: usize, alloc: Allocation) {
        self.touch(idx);
        self.holding.insert(idx);
        self.devices.take(&self.map.cluster, &alloc);
        for s in &alloc.shares {
            sub(&mut self.free[s.node.index()], &s.resources());
        }
        let job = &mut self.jobs[idx];
        job.row.placement = self.map.placement(&alloc);
        job.row.plan = alloc.plan;
        job.alloc = Some(alloc);
    }

    /// A new attempt of job `idx` on `alloc`: recorded as starting, with a fresh token.
    fn start_attempt(
        &mut self,
        idx: usize,
        alloc: Allocation,
        now_us: u64,
        detail: &str,
    ) -> Launch {
        // The service attained at this instant, stored with the attempt's start: what it has
        // accrued up to the last scheduling point, and (a restart in place decided between
        // points) the GPUs it holds since, which the next accrual counts from that point too.
        let since = now_us.saturating_sub(self.last_accrual.as_micros());
        let at_start = self.jobs[idx]
            .attained_us
            .saturating_add((alloc.gpus() as u64).saturating_mul(since));
        self.hold(idx, alloc);
        let token = (self.new_token)();
        let token_hash = hash_token(&token);
        let job = &mut self.jobs[idx];
        job.row.attained_gpu_secs = at_start as f64 / 1e6;
        job.row.attempt += 1;
        job.row.start_us = Some(now_us);
        job.row.backend_state = None;
        if let Some(old) = job.row.job_token_sha256.replace(token_hash.clone()) {
            self.job_tokens.remove(&old);
        }
        self.job_tokens.insert(token_hash, idx);
        self.transition(idx, JobState::Starting, now_us, detail);
        self.launch(idx, &token)
    }

    /// Checkpoints and restarts a running job on the allocation it holds (a retune the
    /// backend could not carry out in place).
    fn restart_in_place(&mut self, now: SimTime, job_id: i64, why: &str) {
        let Some(&idx) = self.by_id.get(&job_id) else {
            return;
        };
        if !matches!(
            self.jobs[idx].row.state,
            JobState::Running | JobState::Starting
        ) {
            return;
        }
        let Some(alloc) = self.jobs[idx].alloc.clone() else {
            return;
        };
        *self.metrics.preemptions.entry("resize").or_default() += 1;
        *self.metrics.retunes.entry("restart").or_default() += 1;
        // The run may have completed since the last poll: the new attempt is launched only
        // once the backend has said it did not.
        let run = self.detach_to_verify(idx, "restarted with a new quota right after", false);
        self.release(idx);
        let detail = format!("{why}; restarted with the new quota");
        let launch = self.start_attempt(idx, alloc, now.as_micros(), &detail);
        if let Some(run) = run {
            let handle = Handle(run.handle.clone());
            self.act(Command::Stop { run, preempt: true });
            self.act(Command::Verify(vec![handle]));
        }
        // Parked behind that verification, or one still pending.
        self.launch_when_verified(idx, launch);
    }

    /// The answer to a [`Command::Retune`]: done in place, or (the backend declined or
    /// failed) the job is checkpointed and restarted with its new quota.
    pub fn handle_retuned(
        &mut self,
        now: SimTime,
        job_id: i64,
        attempt: u32,
        result: Result<(), BackendError>,
    ) {
        if services::Services::is_instance(job_id) {
            return self.instance_retuned(-job_id, attempt, result);
        }
        let Err(e) = result else {
            *self.metrics.retunes.entry("in_place").or_default() += 1;
            return;
        };
        let current = self
            .by_id
            .get(&job_id)
            .is_some_and(|&i| self.jobs[i].row.attempt == attempt);
        if !current {
            return;
        }
        if !matches!(e, BackendError::Declined { .. }) {
            self.metrics.backend_errors += 1;
        }
        tracing::info!(
            job = job_id,
            "retune not carried out in place ({e}); restarting"
        );
        self.restart_in_place(now, job_id, &format!("retune not in place ({e})"));
    }

    /// The answer to a [`Command::Reconfigure`]: the GPU is ready with its new layout; or
    /// the backend declined (it keeps its old layout); or it failed, and the GPU is marked
    /// unhealthy (its state is unknown). Either way no job is lost: the jobs the policy
    /// stopped for it are queued.
    pub fn handle_reconfigured(
        &mut self,
        now: SimTime,
        node: NodeId,
        gpu: u32,
        result: Result<(), BackendError>,
    ) {
        let Some(before) = self.reconfiguring.remove(&(node.0, gpu)) else {
            return;
        };
        let layout = self
            .devices
            .gpus(node)
            .get(gpu as usize)
            .and_then(|g| g.mig.clone());
        match result {
            Ok(()) => {
                *self.metrics.reconfigurations.entry("done").or_default() += 1;
                self.devices.reconfigure(node, gpu, layout, now);
            }
            Err(e @ BackendError::Declined { .. }) => {
                self.metrics.rejected_actions += 1;
                *self.metrics.reconfigurations.entry("declined").or_default() += 1;
                tracing::warn!(?node, gpu, "reconfiguration declined: {e}");
                self.devices.reconfigure(node, gpu, before, now);
            }
            Err(e) => {
                self.metrics.backend_errors += 1;
                *self.metrics.reconfigurations.entry("failed").or_default() += 1;
                let name = self
                    .map
                    .logical
                    .get(node.index())
                    .map_or_else(String::new, |l| l.node.clone());
                tracing::error!(node = %name, gpu, "reconfiguration failed, GPU marked unhealthy: {e}");
                let mut reason = format!("reconfiguration failed: {e}");
                reason.truncate(512);
                self.unhealthy_gpus.insert((node.0, gpu), reason);
                // Out of every pool, whatever its real state: partitioned into nothing,
                // never ready.
                self.devices
                    .reconfigure(node, gpu, Some(Vec::new()), SimTime::MAX);
            }
        }
        self.trigger.reconfigured = true;
    }

    /// GPUs marked unhealthy after a failed reconfiguration: (backend node, index, reason).
    pub fn unhealthy_gpus(&self) -> Vec<(String, u32, String)> {
        self.unhealthy_gpus
            .iter()
            .map(|(&(n, g), r)| {
                let name = self
                    .map
                    .logical
                    .get(n as usize)
                    .map_or_else(String::new, |l| l.node.clone());
                (name, g, r.clone())
            })
            .collect()
    }

    /// Checks the device-level invariants ([`ClusterState::check_invariants`]) against what
    /// the jobs hold.
    pub fn check_device_invariants(&self) -> Result<(), String> {
        let holdings = self
            .jobs
            .iter()
            .enumerate()
            .filter_map(|(i, j)| j.alloc.as_ref().map(|a| (format!("job {i}"), a)))
            .chain(self.instance_holdings());
        self.devices.check_invariants(&self.map.cluster, holdings)
    }

    /// The device-level state (tests, `describe`).
    pub fn device_state(&self) -> &ClusterState {
        &self.devices
    }

    /// The answer to a [`Command::Launch`]: the job runs, or it goes back to the queue (and
    /// fails after 3 refusals in a row, not counting resource exhaustion).
    pub fn handle_launched(
        &mut self,
        now: SimTime,
        job_id: i64,
        attempt: u32,
        result: Result<Handle, BackendError>,
    ) {
        if services::Services::is_instance(job_id) {
            return self.instance_launched(now, -job_id, attempt, result);
        }
        let now_us = now.as_micros();
        let placeholder = launch_placeholder(&self.settings.instance, job_id, attempt);
        if self.launching_rows.remove(&placeholder) {
            // The answer to a launch given up in flight: its `launching` row is closed in the
            // batch that records the run (if any) `stop`, so a crash leaves one or the other.
            self.pending.runs.push(RunRow {
                handle: placeholder.clone(),
                job_id,
                attempt,
                state: RunState::Gone,
            });
        }
        if let Some(v) = self.verifying.remove(&placeholder) {
            return self.superseded_launched(now_us, placeholder, v, result);
        }
        let idx = self.by_id.get(&job_id).copied().filter(|&i| {
            let r = &self.jobs[i].row;
            r.state == JobState::Starting && r.attempt == attempt
        });
        let Some(idx) = idx else {
            // The job was cancelled while its launch was in flight (or the attempt was given
            // up, and the job has finished and been archived since): the run belongs to
            // nobody and must go.
            if let Ok(h) = result {
                let run = RunRow {
                    handle: h.0,
                    job_id,
                    attempt,
                    state: RunState::Stop,
                };
                self.pending.runs.push(run.clone());
                self.act(Command::Stop {
                    run,
                    preempt: false,
                });
            }
            return;
        };
        match result {
            Ok(h) => {
                self.by_handle.insert(h.0.clone(), idx);
                self.pending.runs.push(RunRow {
                    handle: h.0.clone(),
                    job_id,
                    attempt,
                    state: RunState::Live,
                });
                let job = &mut self.jobs[idx];
                job.row.handle = Some(h.0);
                job.submit_failures = 0;
                self.transition(idx, JobState::Running, now_us, "submitted to the backend");
                // Its node went down while the launch was in flight.
                let down = self.jobs[idx].row.placement.iter().any(|s| {
                    self.map
                        .logical
                        .iter()
                        .any(|l| l.node == s.node && l.health == NodeHealth::Down)
                });
                if down {
                    self.fail_over(now, &[idx]);
                }
            }
            Err(e) => {
                self.metrics.backend_errors += 1;
                tracing::warn!(job = job_id, "backend submit failed: {e}");
                self.retry_at = Some(now + SimDuration::from_secs(SUBMIT_RETRY_SECS));
                self.release(idx);
                let job = &mut self.jobs[idx];
                // Running out of descriptors or processes says nothing about the job.
                if !e.is_transient() {
                    job.submit_failures += 1;
                }
                job.row.start_us = None;
                let (to, detail) = if job.submit_failures >= MAX_SUBMIT_FAILURES {
                    (
                        JobState::Failed,
                        format!("backend refused the job {MAX_SUBMIT_FAILURES} times: {e}"),
                    )
                } else {
                    (
                        JobState::Pending,
                        format!("backend submit failed, will retry: {e}"),
                    )
                };
                self.transition(idx, to, now_us, &detail);
            }
        }
    }

    /// The answer to a launch given up while in flight (see [`Core::supersede_launch`]), its
    /// entry `v` taken out of `verifying` under `placeholder`. A run it started is stopped and
    /// verified as any stopped run, in `verifying` under its own handle now (the job's count
    /// unchanged): the job's later attempt stays parked until then, and is dropped if the run
    /// turns out to have completed. A launch that failed started nothing: the job's parked
    /// attempt may go (unless another stopped run is still unverified).
    fn superseded_launched(
        &mut self,
        now_us: u64,
        placeholder: String,
        v: Verifying,
        result: Result<Handle, BackendError>,
    ) {
        match result {
            Ok(h) => {
                let run = RunRow {
                    handle: h.0,
                    job_id: self.jobs[v.idx].row.id,
                    attempt: v.attempt,
                    state: RunState::Stop,
                };
                self.pending.runs.push(run.clone());
                let handle = Handle(run.handle.clone());
                self.verifying.insert(run.handle.clone(), v);
                self.act(Command::Stop { run, preempt: true });
                self.act(Command::Verify(vec![handle]));
            }
            Err(e) => {
                self.metrics.backend_errors += 1;
                tracing::warn!(
                    job = self.jobs[v.idx].row.id,
                    attempt = v.attempt,
                    "backend submit of an attempt given up meanwhile failed: {e}"
                );
                if let Some(job) = self.jobs.get_mut(v.idx) {
                    job.unverified_runs = job.unverified_runs.saturating_sub(1);
                }
                // Settled as a run that never ran (records the placeholder gone again: harmless).
                self.verified(placeholder, v, &RunStatus::Unknown, now_us);
            }
        }
    }

    fn launch(&self, idx: usize, token: &str) -> Launch {
        let job = &self.jobs[idx];
        let payload = match (&job.spec.command, &job.spec.script) {
            (Some(argv), _) => Payload::Command(argv.clone()),
            (None, Some(s)) => Payload::Script(s.clone()),
            (None, None) => Payload::Command(vec!["true".into()]),
        };
        let first = job.row.placement.first();
        let workers = first.map(|s| (s.cpu.0 / 1000).max(1)).unwrap_or(1);
        let mut env: Vec<(String, String)> = job
            .spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        env.push(("TESSERA_JOB_ID".into(), job.row.id.to_string()));
        env.push(("TESSERA_ATTEMPT".into(), job.row.attempt.to_string()));
        env.push(("TESSERA_TOKEN".into(), token.to_string()));
        env.push(("TESSERA_CPU_WORKERS".into(), workers.to_string()));
        env.push(("TESSERA_GPUS".into(), job.spec.gpus.to_string()));
        env.push((
            "TESSERA_START_ITERATION".into(),
            job.row.progress_iters.to_string(),
        ));
        if let Some(url) = &self.callback_url {
            env.push(("TESSERA_URL".into(), url.clone()));
        }
        // The device-level decision, as the job sees it.
        let devices = job
            .alloc
            .as_ref()
            .map_or(job.spec.gpus, Allocation::devices);
        let plan = job
            .alloc
            .as_ref()
            .and_then(|a| a.plan)
            .unwrap_or(ParallelPlan::data_parallel(devices.max(1)));
        let gpu_type = job
            .alloc
            .as_ref()
            .and_then(|a| a.shares.first())
            .and_then(|s| self.map.cluster.nodes.get(s.node.index()))
            .map(|n| self.map.cluster.catalog.get(n.gpu).name.clone())
            .unwrap_or_default();
        env.push(("TESSERA_PLAN_DP".into(), plan.data.to_string()));
        env.push(("TESSERA_PLAN_TP".into(), plan.tensor.to_string()));
        env.push(("TESSERA_PLAN_PP".into(), plan.pipeline.to_string()));
        env.push(("TESSERA_GPU_TYPE".into(), gpu_type.clone()));
        if let Some(GpuPart::Quota {
            sm_limit, memory, ..
        }) = job.alloc.as_ref().and_then(Allocation::part)
        {
            let per_node = job
                .alloc
                .as_ref()
                .and_then(|a| a.shares.first())
                .map_or(1, |s| s.device_count() as usize);
            env.push((
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(),
                mps_thread_percentage(sm_limit),
            ));
            env.push((
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(),
                mps_pinned_mem_limit(per_node, memory),
            ));
        }
        Launch {
            name: Launch::run_name(&self.settings.instance, job.row.id, job.row.attempt),
            job_id: job.row.id,
            attempt: job.row.attempt,
            tenant: job.row.tenant.clone(),
            payload,
            env,
            placement: job.row.placement.clone(),
            plan,
            gpu_type,
        }
    }
}
