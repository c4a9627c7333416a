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
//!
//! Files, one per part of the core (each an `impl Core` block over the state defined here):
//! `jobs` (specs and the job table), `api` (the API's requests), `output` (commands and
//! timeouts), `transitions` (state changes, runs detached and verified), `polling` (run
//! statuses), `health` (inventory and node health), `restore` (restart reconciliation), `view`
//! (attained service and the policy's view), `decide` (the policy called, its actions
//! validated), `apply` (decisions recorded and carried out), `launch` (launches and what a run
//! is given), `archive` (finished jobs dropped from memory), `services` (inference services).

mod api;
mod apply;
mod archive;
mod decide;
mod drain;
mod events;
mod forecast_input;
mod health;
mod jobs;
mod launch;
mod output;
mod polling;
mod reasons;
pub mod records;
mod restore;
pub mod runs;
mod services;
mod transitions;
mod view;

#[cfg(test)]
mod capability_tests;
#[cfg(test)]
mod conformance;
// Tests that drive the core with a real (local) backend live outside core/: no file of the
// core imports a backend.
#[cfg(test)]
#[path = "../core_with_backend/devices.rs"]
mod devices;
#[cfg(test)]
mod drain_tests;
#[cfg(test)]
mod forecast_accuracy;
#[cfg(test)]
mod knowledge_tests;
#[cfg(test)]
mod preemption_tests;
#[cfg(test)]
mod reasons_tests;
#[cfg(test)]
#[path = "../core_with_backend/service_tests.rs"]
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
use tessera_sched::{validate, Action, ActiveJob, ClusterState, ClusterView, Policy, Trigger};

use crate::config::{hash_token, Limits};
use crate::core::records::{JobRow, RunRow, RunState, TransitionRow, WriteBatch};
use crate::core::runs::{
    mps_pinned_mem_limit, mps_thread_percentage, Handle, InventoryNode, Launch, NodeHealth,
    Payload, Reconfigure, Retune, RunStatus,
};
use crate::error::{ApiError, BackendError, DaemonError};
use crate::inventory::ClusterMap;
use crate::metrics::Metrics;
use crate::spec::JobSpec;
use crate::types::JobState;

pub(crate) use api::{Report, Request, Response};
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
    /// What a restart (after a preemption or a resize) costs before the job makes progress
    /// again, as the simulator charges it (`tessera_sched::book`): no service is attained
    /// meanwhile. `RestartCosts::free()` counts every GPU-second held.
    pub restart_costs: tessera_perf::RestartCosts,
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
    /// What policies know of the job (`view.active[..].knowledge`): the configured truth's
    /// catalogue profile of its model, or nothing ([`Core::set_profiler`]).
    knowledge: tessera_model::Knowledge,
    /// Rates the job reported (SDK `iterationsPerSecond`) on whole GPUs of one type, by
    /// (type, count), the latest last: they calibrate its catalogue estimates (see
    /// [`Core::calibrate`]). In memory only: after a restart the next report calibrates again.
    observed: Vec<tessera_sched::book::Observed>,
    /// How many rates of earlier jobs of its model and batch size (the profile cache,
    /// `Core::profile_cache`) `observed` started with at its submission.
    inherited: usize,
    /// The latest rate it reported itself (for `describe`).
    reported: Option<tessera_sched::book::Observed>,
    /// Rates it reported at the CPU/memory points it ran at (SDK reports naming the point
    /// they were measured at), one per point, the latest last. In memory only.
    points: Vec<(crate::types::ResourcePoint, f64)>,
    /// Finished, written to the store and dropped from memory but for this slot (the policy's
    /// job ids are indices, so the slot stays until a restart).
    archived: bool,
    /// GPU-service received, GPU·µs, accrued exactly at scheduling points: tracking policies
    /// (LAS) compute it from the start of an allocation, which only an integer count matches
    /// exactly. The row's `attained_gpu_secs` is this over 10⁶ while the job holds nothing,
    /// and what it had when its attempt started while it holds an allocation (see
    /// [`Core::finish_restore`]).
    attained_us: u64,
    /// When the current attempt's service starts growing, µs: its start, or the end of a
    /// restart's checkpoint restore (`CoreSettings::restart_costs`).
    resumes_us: u64,
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
const NOT_VISIBLE: u32 = tessera_sched::book::ABSENT;
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
    /// Stopped runs whose GPUs are held until the backend reports them gone, by handle (or
    /// placeholder): see `drain.rs`.
    draining: BTreeMap<String, drain::Drain>,
    /// Jobs (by daemon id) whose parked launch waits for draining GPUs.
    drain_held_jobs: BTreeSet<i64>,
    /// Instance launches waiting for draining GPUs, by instance id.
    drain_held_instances: BTreeMap<i64, Launch>,
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
    /// What the policy is told of changes of `active_buf` (the job book's rule, as in the
    /// simulator).
    tracker: tessera_sched::book::Tracker,
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
    /// What jobs are profiled with at submission (see [`Core::set_profiler`]).
    profiler: Option<KnowledgeSource>,
    /// Rates observed of earlier jobs by (model, batch size): a job submitted later with the
    /// same key starts with its catalogue estimates calibrated by them. In memory only.
    profile_cache: tessera_sched::book::ProfileCache,
    /// Recent events (jobs started, finished, preempted; GPUs reconfigured; instances
    /// scaled), each also logged at info level.
    events: crate::events::EventLog,
}

/// Where the knowledge given to policies comes from: a registered truth's catalogue.
struct KnowledgeSource {
    /// The truth's registry name.
    truth: String,
    /// Its profiler for this policy ([`tessera_mechanisms::run_profiler`]); `None`: it
    /// gives this policy nothing.
    profiler: Option<std::sync::Arc<dyn tessera_perf::Profiler>>,
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
        let tracker = tessera_sched::book::Tracker::of(policy.as_mut());
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
            draining: BTreeMap::new(),
            drain_held_jobs: BTreeSet::new(),
            drain_held_instances: BTreeMap::new(),
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
            tracker,
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
            profiler: None,
            profile_cache: tessera_sched::book::ProfileCache::default(),
            events: crate::events::EventLog::default(),
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
            // A GPU a stopped run still holds stays down until that run is gone (drain.rs).
            if !down && self.gpu_draining(node.0, g) {
                continue;
            }
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

    /// The jobs as the policy sees them, indexed by the policy's job id (submission order).
    pub fn training_jobs(&self) -> &[TrainingJob] {
        &self.specs
    }

    /// A job's stored row, by daemon id.
    pub fn job_row(&self, id: i64) -> Option<&JobRow> {
        self.by_id.get(&id).map(|&i| &self.jobs[i].row)
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
}
