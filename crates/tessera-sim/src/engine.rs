//! The event loop.
//!
//! ```text
//!   arrivals (trace cursor) ─┐
//!   completions (set)   ─────┼─► next instant t ─► apply every event at t ─► sync progress
//!   round ticks (policy) ────┘                                               │
//!        ▲                                                                   ▼
//!        └──── reschedule completions ◄── validate + apply actions ◄── Policy::schedule(view)
//! ```
//!
//! Time is [`SimTime`] (integer µs). Events at the same instant are all applied before the
//! policy is called once. Each running job's completion sits in one slot (`due`) and in an
//! indexed heap of live completions, so a preemption, resize or re-rating removes it instead of
//! leaving a stale entry in a heap that every later pop pays for; the instant it would have
//! fired at is kept in [`StaleInstants`] and still counts as an event, as it did when stale
//! completions were popped and skipped. Nothing else happens at such an instant (the
//! integrals of whole units held are exact integers, so splitting them there changes
//! nothing), so the engine steps over them, unless services or failures, which run on the
//! clock, are part of the run. Equal-time events come out in the order they were
//! scheduled (a sequence number breaks ties), so a run is a pure function of its inputs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use crate::completions::{Completions, Dues, NONE as NO_COMPLETION};
use std::sync::Arc;

use tessera_model::hint::prefetch;
use tessera_model::{
    Allocation, Bytes, Cluster, GpuMask, GpuPart, InferenceService, JobId, Knowledge, MilliCpu,
    NodeId, Resources, SimDuration, SimRng, SimTime, TrainingJob, Workload,
};
use tessera_perf::{Profiler, RestartCosts, ThroughputModel};
use tessera_sched::book::{self, Tracker};
use tessera_sched::{
    validate, Action, ActiveJob, ClusterState, ClusterView, GpuState, InstanceId, JobState, Policy,
    ProgressLine, Trigger,
};
use thiserror::Error;

mod fork;
pub use fork::{RunningAt, Snapshot, SnapshotGpu, SnapshotJob};

use crate::failures::{FailureSpec, Injector, Transition};
use crate::metrics::{
    part_units, FailedJob, FailureSummary, GpuActivity, JobFailures, JobOutcome, JobRecord,
    RestartStats, RunTotals, SimReport, Summary, UtilSample, PART_UNITS_PER_GPU,
};
use crate::serving::{Serving, ServingConfig};
use crate::waits::WaitClocks;

/// Settings of one run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Checkpoint + restore cost charged on every restart (after a preemption or resize).
    pub restart_costs: RestartCosts,
    /// Stop the run at this instant; jobs still active are reported unfinished.
    pub time_limit: Option<SimTime>,
    /// Record allocation changes over time, and the nodes each job ran on
    /// ([`SimReport::placements`]).
    pub record_timeseries: bool,
    /// Profile every job when it arrives: the job becomes visible to the policy after the
    /// profiler's cost, carrying what was learned in [`ActiveJob::knowledge`]. `None` = no
    /// profiling, nothing known.
    pub profiler: Option<Arc<dyn Profiler>>,
    /// Seed of the profiler's measurement noise.
    pub profile_seed: u64,
    /// Stop once every job with an id in `lo..hi` has ended (a steady-state measurement
    /// window, e.g. Synergy's jobs 4000–4999); later jobs are reported unfinished.
    pub stop_after_window: Option<(u32, u32)>,
    /// How long a GPU is unavailable after a [`Action::Reconfigure`] (destroying and
    /// creating MIG instances).
    pub reconfigure_time: SimDuration,
    /// Request-level serving of the workload's inference services.
    pub serving: ServingConfig,
    /// Nodes and GPUs failing and coming back, and checkpoint intervals
    /// ([`crate::failures`]); `None`: nothing fails.
    pub failures: Option<Arc<FailureSpec>>,
    /// Most events the run may process before it stops with [`SimError::EventBudget`];
    /// `None`: [`default_event_budget`] of the inputs.
    pub max_events: Option<u64>,
    /// Jobs the driver refuses on arrival, with the reason (a policy that could never run
    /// them: `tessera simulate --ignore-unsupported`); reported rejected, never shown to the
    /// policy.
    pub rejected: Arc<BTreeMap<JobId, String>>,
}

/// Events every run may use, whatever its inputs.
pub const BASE_EVENT_BUDGET: u64 = 10_000_000;
/// Events allowed per job and per service on top of [`BASE_EVENT_BUDGET`]: hundreds of times
/// what the loaded 82k-job LAS bench uses per job (26, most of them preemptions).
pub const EVENTS_PER_JOB: u64 = 10_000;

/// The event budget of a run of `workload` whose policy has rounds of `round` (if any): a
/// base, an allowance per job and service, and one event per round over the services'
/// lifetime (a serving policy ticks through it even when nothing else happens). Runs that
/// would exceed it (failures that keep interrupting jobs that never checkpoint, years of
/// rounds) stop with [`SimError::EventBudget`] instead of running for hours.
pub fn default_event_budget(workload: &Workload, round: Option<SimDuration>) -> u64 {
    let holders = (workload.jobs().len() + workload.services().len()) as u64;
    let serving_rounds = match (round, workload.services()) {
        (Some(r), services) if !r.is_zero() && !services.is_empty() => {
            let start = services
                .iter()
                .map(|s| s.start)
                .min()
                .unwrap_or(SimTime::ZERO);
            let end = services
                .iter()
                .map(|s| s.end)
                .max()
                .unwrap_or(SimTime::ZERO);
            end.saturating_since(start).as_micros() / r.as_micros().max(1)
        }
        _ => 0,
    };
    BASE_EVENT_BUDGET
        .saturating_add(EVENTS_PER_JOB.saturating_mul(holders))
        .saturating_add(serving_rounds)
}

/// Consecutive scheduling points that change nothing (no arrival, completion or
/// reconfiguration before them, no action from the policy, nothing running) after which the
/// engine asks whether anything still pending could change that.
const IDLE_POINTS_BEFORE_CHECK: u32 = 1000;

/// Jobs named in a [`SimError::Stalled`] message (the rest are counted).
const STALLED_NAMED: usize = 5;

/// Default [`SimConfig::reconfigure_time`]: the order of `nvidia-smi mig` destroy + create.
pub const DEFAULT_RECONFIGURE_TIME: SimDuration = SimDuration::from_secs(5);

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            restart_costs: RestartCosts::default(),
            time_limit: None,
            record_timeseries: true,
            profiler: None,
            profile_seed: 0,
            stop_after_window: None,
            reconfigure_time: DEFAULT_RECONFIGURE_TIME,
            serving: ServingConfig::default(),
            failures: None,
            max_events: None,
            rejected: Arc::default(),
        }
    }
}

/// A policy asked for something impossible, or the run could not proceed. All variants are
/// fatal for the run: they indicate a bug in the policy (or a performance model).
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum SimError {
    /// An action that does not fit the job's state or the free resources.
    #[error("policy {policy} at {now}: invalid action {action}: {reason}")]
    InvalidAction {
        /// Policy name.
        policy: String,
        /// When.
        now: SimTime,
        /// The action, rendered.
        action: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The performance model gave a job no (or a non-finite) speed on the allocation it got.
    #[error("job {job} has throughput {rate} on its allocation at {now}")]
    BadThroughput {
        /// The job.
        job: String,
        /// The rate returned.
        rate: f64,
        /// When.
        now: SimTime,
    },
    /// Jobs are queued that no future event can place: the run cannot progress.
    #[error(
        "policy {policy} at {now}: the run cannot progress: {count} queued job(s) ({jobs}) and {why}"
    )]
    Stalled {
        /// Policy name.
        policy: String,
        /// When it was detected.
        now: SimTime,
        /// The first few queued jobs by id, named.
        jobs: String,
        /// How many jobs are queued.
        count: usize,
        /// Why nothing can change.
        why: String,
    },
    /// The run used its event budget ([`SimConfig::max_events`]).
    #[error(
        "policy {policy} at {now}: stopped after {limit} events, the run's event budget \
         ({done} of {total} jobs ended); raise it with --max-events (SimConfig::max_events) if \
         the run is expected to be this long, or end it earlier with --horizon"
    )]
    EventBudget {
        /// Policy name.
        policy: String,
        /// When.
        now: SimTime,
        /// The budget.
        limit: u64,
        /// Jobs ended so far, and in all.
        done: usize,
        /// Jobs in the workload.
        total: usize,
    },
    /// An event fell at the end of the clock's range (about 584,000 years: an arrival or a
    /// completion that saturated), where times no longer mean anything.
    #[error("policy {policy}: an event falls at the end of the clock's range ({what}); no input may reach it")]
    TimeOverflow {
        /// Policy name.
        policy: String,
        /// What was due then.
        what: String,
    },
    /// A snapshot a run was forked from does not fit its cluster or workload
    /// ([`Simulation::fork`]).
    #[error("snapshot at {now}: {reason}")]
    InvalidSnapshot {
        /// The snapshot's instant.
        now: SimTime,
        /// What does not fit.
        reason: String,
    },
}

/// Reports progress of long runs (drawn by the CLI; tests may count calls).
pub trait Progress {
    /// Called every few thousand events and once at the end.
    fn update(&mut self, jobs_done: usize, jobs_total: usize, now: SimTime);
}

impl Progress for () {
    fn update(&mut self, _: usize, _: usize, _: SimTime) {}
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Profiling of a job ended: it becomes visible to the policy.
    ProfileDone { job: JobId },
    /// A wake-up the policy asked for.
    Wakeup,
    /// A GPU finished reconfiguring.
    ReconfigDone,
    /// The first scheduling point of a run forked from a snapshot ([`Simulation::fork`]).
    Forked,
}

/// Per-job mutable state, indexed by job id. Aligned to cache lines: a start or a stop
/// reads and writes most of it, three lines instead of four for most jobs otherwise.
#[derive(Clone, Debug)]
#[repr(align(64))]
struct Progressing {
    /// The job's iterations (a copy, so that syncing does not touch the job's spec).
    total: f64,
    /// Iterations per second on the current allocation (0 while queued).
    rate: f64,
    /// Progress and attained service are accounted up to this instant.
    synced_at: SimTime,
    /// Progress starts only after a restart's checkpoint/restore.
    resumes_at: SimTime,
    done: f64,
    /// The pending completion, (when, sequence), also in `Simulation::completions`, which
    /// reads it here to tell its live entry from replaced ones; replaced on every allocation
    /// or rate change. Sequence 0 (never issued): none pending.
    due: (SimTime, u64),
    gpus_held: u32,
    /// GPU parts it holds, in GPU-equivalent units ([`PART_UNITS_PER_GPU`]ths; 0 when it
    /// holds whole GPUs or nothing): counted in `gpu_secs` beside the whole GPUs.
    part_units: u32,
    /// Position in `Simulation::active`, or `NOT_ACTIVE`; and in `Simulation::running`. Kept
    /// here rather than in tables of their own: an action reads both and this state, one
    /// cache miss less each on a loaded cluster's re-plans.
    active_pos: u32,
    running_pos: u32,
    gpu_secs: f64,
    /// GPU·µs of progress (held minus restoring): the attained service policies see. An
    /// integer, so that its value at an instant does not depend on when it was folded.
    served_gpu_us: u64,
    /// Ended as [`JobOutcome::Finished`]; every other outcome (rare, and carrying a reason)
    /// is in `Simulation::outcomes`.
    finished: bool,
    /// Copies of the job's reference throughput and GPUs asked, and whether it restricts GPU
    /// models: a (re)start then reads nothing of the spec, a cold line on a loaded cluster,
    /// under a truth model proportional to GPUs held (see `rate_of`).
    reference: f64,
    asked: u32,
    gpu_typed: bool,
    /// µs, or [`NEVER`]: a million jobs' state stays small (no `Option` tags).
    first_start: u64,
    finish: u64,
    preemptions: u32,
    ever_started: bool,
    /// The checkpoint + restore part of the job's restart cost in µs, looked up at its
    /// first restart (a name lookup per restart showed in profiles), or [`NEVER`].
    restart_base_us: u64,
    /// While holding GPUs: (CPU cores per GPU, memory GiB per GPU, speed-up over the
    /// proportional-share rate).
    cur: (f64, f64, f64),
    /// Seconds spent holding GPUs, and the time integrals of `cur` over them.
    held_secs: f64,
    integ: (f64, f64, f64),
}

impl Progressing {
    /// How its progress goes from the last fold (see [`Simulation::refresh`]).
    fn line(&self) -> ProgressLine {
        ProgressLine {
            total: self.total,
            done: self.done,
            rate: self.rate,
            since: self.synced_at.max(self.resumes_at),
        }
    }

    /// `job`, not started.
    fn queued(job: &TrainingJob) -> Progressing {
        Progressing {
            total: job.iterations as f64,
            reference: job.reference_throughput(),
            asked: job.gpus,
            gpu_typed: !job.gpu_types.is_empty(),
            rate: 0.0,
            synced_at: SimTime::ZERO,
            resumes_at: SimTime::ZERO,
            done: 0.0,
            due: NO_COMPLETION,
            gpus_held: 0,
            part_units: 0,
            active_pos: NOT_ACTIVE,
            running_pos: NOT_ACTIVE,
            gpu_secs: 0.0,
            served_gpu_us: 0,
            finished: false,
            first_start: NEVER,
            finish: NEVER,
            preemptions: 0,
            ever_started: false,
            restart_base_us: NEVER,
            cur: (0.0, 0.0, 0.0),
            held_secs: 0.0,
            integ: (0.0, 0.0, 0.0),
        }
    }
}

/// The engine keeps each job's live completion with the rest of its state.
impl Dues for [Progressing] {
    fn due(&self, job: u32) -> (SimTime, u64) {
        self.get(job as usize).map_or(NO_COMPLETION, |st| st.due)
    }
}

/// What a failure rolls a job back to, kept per job only when failures are configured.
#[derive(Clone, Debug, Default)]
struct SafePoint {
    /// Checkpoint interval in µs (0: only at the start of a run), and the progress and
    /// instant of the last safe point (run start or checkpoint).
    every: u64,
    done: f64,
    at: SimTime,
}

/// The jobs' records, collected in place over their run state (a record is no larger and
/// aligned alike): they reuse memory the run already touched instead of faulting in as many
/// fresh pages, which was a fifth of a short run's wall time.
fn records(
    state: Vec<Progressing>,
    jobs: &[TrainingJob],
    outcomes: &mut BTreeMap<u32, JobOutcome>,
) -> Vec<JobRecord> {
    state
        .into_iter()
        .zip(jobs)
        .map(|(st, job)| JobRecord {
            job: job.id,
            name: job.name.clone(),
            gpus: job.gpus,
            submit: job.submit,
            first_start: instant(st.first_start),
            finish: instant(st.finish),
            outcome: if st.finished {
                JobOutcome::Finished
            } else {
                outcomes
                    .remove(&job.id.0)
                    .unwrap_or(JobOutcome::Unfinished {
                        reason: "never arrived before the run stopped".to_string(),
                    })
            },
            preemptions: st.preemptions,
            gpu_secs: st.gpu_secs,
            iterations_done: st.done,
            cpu_per_gpu: (st.held_secs > 0.0).then(|| st.integ.0 / st.held_secs),
            mem_gib_per_gpu: (st.held_secs > 0.0).then(|| st.integ.1 / st.held_secs),
            speedup: (st.held_secs > 0.0).then(|| st.integ.2 / st.held_secs),
        })
        .collect()
}

/// No instant yet (first start, finish).
const NEVER: u64 = u64::MAX;

fn instant(us: u64) -> Option<SimTime> {
    (us != NEVER).then(|| SimTime::from_micros(us))
}

const NOT_ACTIVE: u32 = book::ABSENT;

/// What [`Cluster::can_ever_fit`] reads of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FitShape<'a> {
    gpus: u32,
    gpu_types: &'a [tessera_model::GpuModelId],
    cpu: Option<tessera_model::MilliCpu>,
    memory: Option<Bytes>,
}

impl<'a> FitShape<'a> {
    fn of(job: &'a TrainingJob) -> FitShape<'a> {
        FitShape {
            gpus: job.gpus,
            gpu_types: &job.gpu_types,
            cpu: job.cpu,
            memory: job.memory,
        }
    }
}

/// Shapes known to fit, remembered per run (scanned per arrival: kept short).
const MAX_FITTING_SHAPES: usize = 32;

/// One simulation run of one policy over one workload on one cluster.
pub struct Simulation<'a> {
    cluster: &'a Cluster,
    jobs: &'a [TrainingJob],
    truth: &'a dyn ThroughputModel,
    policy: Box<dyn Policy>,
    config: SimConfig,
    /// What the policy is told of changes of the active set (the job book's rule).
    tracker: Tracker,

    now: SimTime,
    seq: u64,
    /// Events other than completions.
    heap: BinaryHeap<Reverse<(SimTime, u64, Event)>>,
    /// Live completions: (when, sequence, job index), ordered as the heap orders events.
    completions: Completions,
    /// Instants of completions cancelled before they fired.
    stale: StaleInstants,
    next_arrival: usize,
    round: Option<SimDuration>,
    next_round: Option<SimTime>,

    /// Free resources and every GPU's state.
    devices: ClusterState,
    /// The wake-up the policy asked for last, if still pending.
    wakeup: Option<SimTime>,
    reconfigurations: u64,
    capacity: (u64, u64, u64),
    used: (u64, u64, u64),
    /// The active jobs; each job's position in it is [`Progressing::active_pos`].
    active: Vec<ActiveJob>,
    /// Jobs holding an allocation (in no particular order), so that syncing before a
    /// scheduling point costs O(running), not O(active); each job's position in it is
    /// [`Progressing::running_pos`].
    running: Vec<JobId>,
    state: Vec<Progressing>,
    /// Per job, with failures configured (empty otherwise).
    safe_points: Vec<SafePoint>,
    /// Outcomes other than finished, by job id.
    outcomes: BTreeMap<u32, JobOutcome>,
    done_jobs: usize,

    first_arrival: Option<SimTime>,
    last_completion: SimTime,
    util_synced_at: SimTime,
    /// ∫ held GPUs, milli-CPUs and bytes dt, in unit·µs: exact, however the run is split
    /// into instants.
    util_us: (u128, u128, u128),
    /// ∫ GPUs held in parts dt, in GPU-equivalent units·µs (exact, like `util_us`).
    part_units_us: u128,
    /// ∫ active GPUs dt, GPU·µs (exact, like `util_us`).
    active_gpu_us: u128,
    timeseries: Vec<UtilSample>,
    events: u64,
    scheduling_points: u64,
    actions: Vec<Action>,
    finished: bool,
    /// What profiling learned about jobs still being profiled, by job index (empty without
    /// a profiler).
    estimates: Vec<Option<Knowledge>>,
    profile_rng: SimRng,
    profiling_gpu_secs: f64,
    /// Jobs of the measurement window not yet ended.
    window_left: usize,
    /// Inference services: arrivals, instances, queues, latency.
    serving: Serving<'a>,
    /// One stand-in job per service, so that a neighbour-aware truth sees instances sharing
    /// a training job's GPUs (name, model and quota allocation) as neighbours.
    service_jobs: Vec<TrainingJob>,
    /// GPUs active now and Σ of their SM and memory fragmentation (kept incrementally).
    active_now: (u32, f64, f64),
    /// GPUs held in parts (quotas, MIG instances), in GPU-equivalent units
    /// ([`PART_UNITS_PER_GPU`]ths): whole GPUs are counted in `used.0`, so GPU utilization
    /// and the series' busy GPUs need these too.
    part_units_now: u64,
    activity: GpuActivity,
    retired: Vec<Allocation>,
    /// Failure injection, when configured, and what failures did to each job.
    injector: Option<Injector>,
    failure_stats: Vec<JobFailures>,
    failed_jobs: Vec<FailedJob>,
    /// Job shapes [`Cluster::can_ever_fit`] accepted (borrowing the workload's specs).
    fitting_shapes: Vec<FitShape<'a>>,
    /// The run's event budget ([`SimConfig::max_events`]).
    max_events: u64,
    /// Consecutive scheduling points that changed nothing (see `note_point`).
    idle_points: u32,
    /// The nodes each job ran on, in order of first use (with `record_timeseries`; kept
    /// apart from the per-job run state, which stays small and hot).
    placements: Vec<Vec<NodeId>>,
    /// Time waited per reason, per job (`jobs.csv`).
    waits: WaitClocks,
}

/// `alloc` with every quota part fixed at `sm` permille (request = limit).
fn controlled_alloc(alloc: &Allocation, sm: u16) -> Allocation {
    let mut a = alloc.clone();
    for s in &mut a.shares {
        if let Some(d) = &mut s.devices {
            if let GpuPart::Quota {
                sm_request,
                sm_limit,
                ..
            } = &mut d.part
            {
                *sm_request = sm;
                *sm_limit = sm;
            }
        }
    }
    a
}

/// Who holds an allocation, for invariant messages.
#[derive(Debug)]
#[allow(dead_code)] // read through Debug
enum HolderName {
    Job(JobId),
    Instance(InstanceId),
}

/// (GPUs, milli-CPUs, bytes) an allocation holds, in one pass over its shares.
fn held(alloc: &Allocation) -> (u64, u64, u64) {
    alloc.shares.iter().fold((0, 0, 0), |(g, c, m), s| {
        (g + s.gpus as u64, c + s.cpu.0, m + s.memory.0)
    })
}

/// The GPUs of an allocation made only of whole GPUs (shares without named devices count
/// none, as in `track_activity`); `None` when any share holds a MIG instance or a quota.
fn whole_gpus(alloc: &Allocation) -> Option<u32> {
    let mut n = 0;
    for s in &alloc.shares {
        if let Some(d) = s.devices {
            if d.part != GpuPart::Whole {
                return None;
            }
            n += d.gpus.count();
        }
    }
    Some(n)
}

/// A GPU's part in the activity metrics: (active, SM fragmentation, memory fragmentation).
/// `capacity` is the GPU's memory, asked for only by a GPU held in parts (it costs a catalog
/// look-up and a float rounding, which whole GPUs, the common case, need not pay).
fn gpu_activity(
    g: &GpuState,
    capacity: impl FnOnce() -> Bytes,
    mig_compute_used: u32,
) -> (u32, f64, f64) {
    if g.is_idle() {
        return (0, 0.0, 0.0);
    }
    if g.whole {
        return (1, 0.0, 0.0);
    }
    let capacity = capacity();
    let mem = if capacity.0 > 0 {
        1.0 - (g.memory_used.0 as f64 / capacity.0 as f64).min(1.0)
    } else {
        0.0
    };
    let sm = if g.mig.is_some() {
        1.0 - (mig_compute_used as f64 / 7.0).min(1.0)
    } else {
        1.0 - (g.sm_requested as f64 / 1000.0).min(1.0)
    };
    (1, sm, mem)
}

impl<'a> Simulation<'a> {
    /// Prepares a run. Nothing happens until [`step`](Self::step) or [`run`](Self::run).
    pub fn new(
        cluster: &'a Cluster,
        workload: &'a Workload,
        truth: &'a dyn ThroughputModel,
        mut policy: Box<dyn Policy>,
        config: SimConfig,
    ) -> Simulation<'a> {
        let jobs = workload.jobs();
        let tracker = Tracker::of(policy.as_mut());
        let round = policy.round_length().filter(|d| !d.is_zero());
        let injector = config
            .failures
            .as_deref()
            .map(|spec| Injector::new(spec, cluster));
        let failure_stats = if injector.is_some() {
            vec![JobFailures::default(); jobs.len()]
        } else {
            Vec::new()
        };
        let window_left = config.stop_after_window.map_or(0, |(lo, hi)| {
            jobs.iter().filter(|j| (lo..hi).contains(&j.id.0)).count()
        });
        let estimates = if config.profiler.is_some() {
            vec![None; jobs.len()]
        } else {
            Vec::new()
        };
        let profile_rng = SimRng::seed_from_u64(config.profile_seed);
        let serving = Serving::new(workload, cluster, config.serving.clone());
        let service_jobs = workload
            .services()
            .iter()
            .map(|s: &InferenceService| {
                let mut j = TrainingJob::simple(u32::MAX, s.start, 1, SimDuration::from_secs(1));
                j.name = s.name.as_str().into();
                j.model = s.model.clone();
                j.tenant = s.tenant.clone();
                j
            })
            .collect();
        let state: Vec<Progressing> = jobs.iter().map(Progressing::queued).collect();
        let max_events = config
            .max_events
            .unwrap_or_else(|| default_event_budget(workload, round));
        let safe_points = match config.failures.as_deref() {
            Some(f) => jobs
                .iter()
                .map(|j| SafePoint {
                    every: f.interval_of(&j.name).map_or(0, |d| d.as_micros()),
                    ..SafePoint::default()
                })
                .collect(),
            None => Vec::new(),
        };
        let mut sim = Simulation {
            cluster,
            jobs,
            truth,
            policy,
            config,
            tracker,
            now: SimTime::ZERO,
            seq: 0,
            heap: BinaryHeap::new(),
            completions: Completions::default(),
            stale: StaleInstants::default(),
            next_arrival: 0,
            round,
            next_round: None,
            devices: ClusterState::new(cluster),
            wakeup: None,
            reconfigurations: 0,
            capacity: cluster.totals(),
            used: (0, 0, 0),
            active: Vec::new(),
            running: Vec::new(),
            state,
            safe_points,
            outcomes: BTreeMap::new(),
            done_jobs: 0,
            first_arrival: None,
            last_completion: SimTime::ZERO,
            util_synced_at: SimTime::ZERO,
            util_us: (0, 0, 0),
            part_units_us: 0,
            active_gpu_us: 0,
            timeseries: Vec::new(),
            events: 0,
            scheduling_points: 0,
            actions: Vec::new(),
            finished: false,
            estimates,
            profile_rng,
            profiling_gpu_secs: 0.0,
            window_left,
            serving,
            service_jobs,
            active_now: (0, 0.0, 0.0),
            part_units_now: 0,
            activity: GpuActivity::default(),
            retired: Vec::new(),
            injector,
            failure_stats,
            failed_jobs: Vec::new(),
            fitting_shapes: Vec::new(),
            max_events,
            idle_points: 0,
            placements: Vec::new(),
            waits: WaitClocks::new(jobs.len()),
        };
        sim.stale = StaleInstants::new(sim.skips_stale());
        sim
    }

    /// Current simulated time.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Free resources per node.
    pub fn free(&self) -> &[Resources] {
        self.devices.free()
    }

    /// Jobs that arrived and have not ended.
    pub fn active(&self) -> &[ActiveJob] {
        &self.active
    }

    /// Why queued job `job` waits now, in full (the policy's statement, else the generic
    /// analysis: see [`tessera_sched::reasons`]); `None` unless it is queued. A job still being
    /// profiled waits for [`WaitKind::Profiling`](tessera_sched::WaitKind::Profiling).
    pub fn pending_reason(&self, job: JobId) -> Option<tessera_sched::PendingReason> {
        let spec = self.jobs.get(job.index())?;
        if self.estimates.get(job.index()).is_some_and(Option::is_some) {
            return Some(tessera_sched::reasons::profiling(self.cluster, spec));
        }
        let pos = self.state.get(job.index())?.active_pos;
        let entry = self.active.get(pos as usize)?;
        if entry.state != JobState::Queued {
            return None;
        }
        let view = ClusterView {
            now: self.now,
            trigger: Trigger::default(),
            cluster: self.cluster,
            free: self.devices.free(),
            state: &self.devices,
            jobs: self.jobs,
            active: &self.active,
            services: &[],
        };
        let stated = self
            .policy
            .pending_reason(&view, spec, tessera_sched::Detail::Full);
        Some(tessera_sched::reasons::explain(&view, spec, stated))
    }

    /// True once every job has ended (or the time limit passed).
    pub fn is_done(&self) -> bool {
        self.finished
    }

    /// Runs to the end, reporting progress every few thousand events.
    pub fn run(mut self, progress: &mut dyn Progress) -> Result<SimReport, SimError> {
        let total = self.jobs.len();
        let mut reported_at = 0;
        while self.step()? {
            // A step may process several events, so compare against the last report.
            if self.events - reported_at >= 4096 {
                reported_at = self.events;
                progress.update(self.done_jobs, total, self.now);
            }
        }
        progress.update(self.done_jobs, total, self.now);
        Ok(self.into_report())
    }

    /// Advances to the next instant with events, applies them and calls the policy.
    /// Returns `Ok(false)` once the run is over.
    pub fn step(&mut self) -> Result<bool, SimError> {
        if self.finished {
            return Ok(false);
        }
        if self.events >= self.max_events {
            return Err(SimError::EventBudget {
                policy: self.policy.name().to_string(),
                now: self.now,
                limit: self.max_events,
                done: self.done_jobs,
                total: self.jobs.len(),
            });
        }
        let limit = self.config.time_limit;
        let Some(t) = self.next_instant_or_failure() else {
            // Only skipped instants may be left: the run ends at the last (or at the limit),
            // where stepping through them would have ended it.
            let (skipped, last) = self.stale.pop_through(limit.unwrap_or(SimTime::MAX));
            self.events += skipped;
            if let Some(last) = last {
                self.advance_clock(last);
            }
            let capacity_short = self
                .injector
                .as_ref()
                .is_some_and(|inj| inj.stall_horizon.is_some());
            if !self.active.is_empty() && !capacity_short {
                // Queued jobs, nothing running, nothing pending: nothing can ever place them.
                return Err(self.stalled(None));
            }
            if let (Some(limit), false) = (limit, self.stale.is_empty()) {
                self.advance_clock(limit);
                self.finish_run("time limit reached");
            } else {
                self.finish_run(
                    "drawn failures kept capacity short: still queued when every GPU down \
                     had come back once",
                );
            }
            return Ok(false);
        };
        if self.skips_stale() {
            // Cancelled completions up to t, counted in batches (and all of them when the run
            // ends, in `finish`).
            self.events += self.stale.count_through(limit.map_or(t, |l| t.min(l)));
        }
        if let Some(limit) = limit {
            if t > limit {
                self.advance_clock(limit);
                self.finish_run("time limit reached");
                return Ok(false);
            }
        }
        if t == SimTime::MAX {
            return Err(self.time_overflow());
        }
        self.advance_clock(t);
        if self.serving.any() && self.serving.sample_controllers(t) {
            // A vertical-scaling controller moved training's share: re-rate quota jobs.
            self.rerate_quota_jobs()?;
        }

        let mut trigger = Trigger::default();
        loop {
            // Completions and other events merged in (time, sequence) order.
            let completion = self.completions.first();
            let other = self
                .heap
                .peek()
                .map(|Reverse((when, seq, _))| (*when, *seq));
            let take_completion = match (completion, other) {
                (Some((ct, cs, _)), Some(o)) => (ct, cs) < o,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_completion {
                let Some((when, _, job)) = completion else {
                    break;
                };
                if when != t {
                    break;
                }
                self.completions.pop_first(self.state.as_slice());
                self.events += 1;
                if self.complete(JobId(job))? {
                    trigger.completion = true;
                }
                // The next completion's run state was read to check it is live: ask for its
                // entry in `active`, which it reads next.
                if let Some((_, _, next)) = self.completions.first() {
                    self.prefetch_active_entry_of(JobId(next));
                }
                continue;
            }
            let Some(Reverse((when, _, event))) = self.heap.peek().copied() else {
                break;
            };
            if when != t {
                break;
            }
            self.heap.pop();
            self.events += 1;
            match event {
                Event::Wakeup => {
                    if self.wakeup == Some(t) {
                        self.wakeup = None;
                        trigger.wakeup = true;
                    }
                }
                Event::ReconfigDone => trigger.reconfigured = true,
                Event::Forked => trigger.arrival = true,
                Event::ProfileDone { job } => {
                    self.waits.profiled(job, t);
                    let knowledge = self
                        .estimates
                        .get_mut(job.index())
                        .and_then(Option::take)
                        .unwrap_or_default();
                    self.activate(job, knowledge);
                    trigger.arrival = true;
                }
            }
        }
        // Cancelled completions due now were popped and skipped here before they left the heap:
        // they still count as events.
        self.events += self.stale.pop_at(t);
        if self.injector.is_some() && self.apply_failures(t)? {
            // Capacity left or came back and jobs were requeued: like a completion, the
            // policy re-plans.
            trigger.completion = true;
        }
        while let Some(job) = self.jobs.get(self.next_arrival) {
            if job.submit != t {
                break;
            }
            self.next_arrival += 1;
            self.events += 1;
            // Arrivals are far apart in a loaded run: the next one's spec, asked for now.
            if let Some(next) = self.jobs.get(self.next_arrival) {
                prefetch(next);
            }
            self.arrive(job);
            trigger.arrival = true;
        }
        if self.serving.any() && self.serving.pass_boundaries(t) {
            // A service starts or ends: policies place or remove its instances.
            self.events += 1;
            trigger.arrival = true;
        }
        if self.next_round == Some(t) {
            self.events += 1;
            trigger.round = true;
        }
        self.plan_next_round();

        if trigger.completion {
            // Completions free resources even when the policy then does nothing: the series
            // records every change, not only the policy's (issue 10).
            self.record_sample();
        }
        if (!self.active.is_empty() || self.serving.wants_policy(t))
            && (trigger.round
                || trigger.arrival
                || trigger.completion
                || trigger.wakeup
                || trigger.reconfigured)
        {
            let acted = self.schedule(trigger)?;
            self.note_point(&trigger, acted)?;
        }
        if self.done_jobs == self.jobs.len() && !self.serving.live(t) {
            self.finish();
            return Ok(false);
        }
        if self.config.stop_after_window.is_some() && self.window_left == 0 {
            self.finish_run("measurement window drained");
            return Ok(false);
        }
        Ok(true)
    }

    /// Whether the instants of cancelled completions are stepped over: nothing happens at
    /// them but the clock, unless services or failures run on it.
    fn skips_stale(&self) -> bool {
        !self.serving.any() && self.injector.is_none()
    }

    fn job_ended(&mut self, job: JobId) {
        self.done_jobs += 1;
        if let Some((lo, hi)) = self.config.stop_after_window {
            if (lo..hi).contains(&job.0) {
                self.window_left = self.window_left.saturating_sub(1);
            }
        }
    }

    fn next_instant(&self) -> Option<SimTime> {
        let event = self.heap.peek().map(|Reverse((t, _, _))| *t);
        let completion = self.completions.first().map(|(t, _, _)| t);
        let stale = self.stale.peek().filter(|_| !self.skips_stale());
        let arrival = self.jobs.get(self.next_arrival).map(|j| j.submit);
        let service = self.serving.peek_boundary();
        let retirement = self.serving.next_retirement().filter(|&r| r > self.now);
        // Folded by hand: this runs at every instant, and an iterator over the array costs
        // several times the comparisons.
        let earliest = |a: Option<SimTime>, b: Option<SimTime>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        let mut t = earliest(event, completion);
        t = earliest(t, stale);
        t = earliest(t, arrival);
        t = earliest(t, self.next_round);
        t = earliest(t, service);
        earliest(t, retirement)
    }

    /// The next instant, failures included. With nothing but failures left, they matter only
    /// to queued jobs waiting for capacity to come back: they are applied until every GPU
    /// down then has come back once, and the run ends after that (otherwise drawn failures,
    /// which never end, would keep a run with a job no policy places going forever).
    fn next_instant_or_failure(&mut self) -> Option<SimTime> {
        let other = self.next_instant();
        let waiting = !self.active.is_empty();
        let now = self.now;
        let Some(inj) = self.injector.as_mut() else {
            return other;
        };
        let Some(f) = inj.peek() else {
            return other;
        };
        match other {
            Some(o) => {
                inj.stall_horizon = None;
                Some(o.min(f))
            }
            None => {
                if !waiting || (!inj.any_down() && inj.stall_horizon.is_none()) {
                    return None;
                }
                let horizon = match inj.stall_horizon {
                    Some(h) => h,
                    None => *inj.stall_horizon.insert(inj.all_up_by().unwrap_or(now)),
                };
                (f <= horizon).then_some(f)
            }
        }
    }

    /// Applies the health changes due at `t`: jobs and service instances on a GPU that goes
    /// down are stopped first (jobs roll back to their last checkpoint and are requeued, or
    /// fail past `max_restarts`; instances are scaled in), then the GPU leaves the free pool;
    /// a GPU that comes back returns to it. Returns whether anything changed.
    fn apply_failures(&mut self, t: SimTime) -> Result<bool, SimError> {
        let mut changes: Vec<Transition> = Vec::new();
        match self.injector.as_mut() {
            Some(inj) if inj.peek() == Some(t) => inj.pop_due(t, &mut changes),
            _ => return Ok(false),
        }
        self.events += 1;
        for &(node, gpu, down) in &changes {
            if !down {
                self.devices.set_down(node, gpu, false);
                continue;
            }
            let on_gpu = |a: &Allocation| {
                a.shares
                    .iter()
                    .any(|s| s.node == node && s.devices.is_some_and(|d| d.gpus.contains(gpu)))
            };
            let mut victims: Vec<JobId> = self
                .running
                .iter()
                .copied()
                .filter(|j| {
                    let pos = self.state[j.index()].active_pos as usize;
                    self.active[pos].allocation.as_ref().is_some_and(on_gpu)
                })
                .collect();
            victims.sort_unstable();
            for j in victims {
                self.interrupt(j)?;
            }
            let instances: Vec<_> = self
                .serving
                .holdings()
                .filter(|(_, _, a)| on_gpu(a))
                .map(|(s, i, _)| (s, i))
                .collect();
            for (service, instance) in instances {
                // The serving side's own removal path: its queue returns to the service; a
                // batch in flight completes before the GPU is released.
                if let Some((alloc, false)) = self.serving.scale_in(service, instance, self.now) {
                    self.release(&alloc);
                    self.instance_changed(&alloc)?;
                }
            }
            self.devices.set_down(node, gpu, true);
        }
        if changes.is_empty() {
            return Ok(false);
        }
        self.record_sample();
        Ok(true)
    }

    /// A failure stops a running job: it loses the work since its last safe point and is
    /// requeued (a restart costs as after a preemption), or fails past `max_restarts`.
    fn interrupt(&mut self, job: JobId) -> Result<(), SimError> {
        let pos = self.state[job.index()].active_pos as usize;
        let gpus = self.state[job.index()].gpus_held;
        let part = self.state[job.index()].part_units;
        let old = self.stop(job, pos);
        self.mark_stopped(job);
        let now = self.now;
        let st = &mut self.state[job.index()];
        // Failures are injected only when configured, and then every job has a safe point.
        let safe = self
            .safe_points
            .get(job.index())
            .cloned()
            .unwrap_or_default();
        let lost = (st.done - safe.done).max(0.0);
        st.done = safe.done.min(st.done);
        let remaining = st.total - st.done;
        let mut lost_secs = gpus as f64 * now.saturating_since(safe.at).as_secs_f64();
        if part != 0 {
            lost_secs += f64::from(part) / PART_UNITS_PER_GPU as f64
                * now.saturating_since(safe.at).as_secs_f64();
        }
        let restarts = match self.failure_stats.get_mut(job.index()) {
            Some(f) => {
                f.restarts += 1;
                f.lost_iterations += lost;
                f.lost_gpu_secs += lost_secs;
                f.restarts
            }
            None => 0,
        };
        self.active[pos].remaining_iters = remaining;
        let limit = self.config.failures.as_deref().and_then(|f| f.max_restarts);
        if let Some(limit) = limit.filter(|&m| restarts > m) {
            let reason =
                format!("interrupted by failures {restarts} times (at most {limit} restarts)");
            self.failed_jobs.push(FailedJob {
                name: self.jobs[job.index()].name.to_string(),
                reason: reason.clone(),
            });
            self.outcomes.insert(job.0, JobOutcome::Failed { reason });
            self.remove_active(job);
            self.job_ended(job);
        } else {
            self.active[pos].state = JobState::Queued;
            self.waits.enqueue(&self.jobs[job.index()], self.now);
            self.tracker.preempted(
                self.policy.as_mut(),
                &self.active[pos],
                &self.jobs[job.index()],
            );
        }
        self.rerate_neighbours(&old, job)
    }

    /// Rounds tick while jobs are active; with nothing active they pause until the next
    /// arrival, so an idle cluster costs no events.
    fn plan_next_round(&mut self) {
        let Some(len) = self.round else { return };
        let len = len.as_micros().max(1);
        let next_multiple =
            |after: SimTime| SimTime::from_micros((after.as_micros() / len + 1) * len);
        self.next_round = if !self.active.is_empty() || self.serving.live(self.now) {
            Some(next_multiple(self.now))
        } else {
            None
        };
    }

    fn advance_clock(&mut self, t: SimTime) {
        let span = t.saturating_since(self.util_synced_at);
        let dt_us = span.as_micros() as u128;
        let dt = span.as_secs_f64();
        if self.first_arrival.is_some() {
            self.util_us.0 += self.used.0 as u128 * dt_us;
            self.util_us.1 += self.used.1 as u128 * dt_us;
            self.util_us.2 += self.used.2 as u128 * dt_us;
            self.part_units_us += self.part_units_now as u128 * dt_us;
        }
        self.active_gpu_us += self.active_now.0 as u128 * dt_us;
        self.activity.sm_frag_secs += self.active_now.1 * dt;
        self.activity.mem_frag_secs += self.active_now.2 * dt;
        self.util_synced_at = t;
        self.now = t;
        if self.serving.any() {
            self.serving.run_until(t);
            self.release_retired();
        }
    }

    /// Releases the GPUs of scaled-in instances whose last batch has ended.
    fn release_retired(&mut self) {
        let mut retired = std::mem::take(&mut self.retired);
        self.serving.take_retired(self.now, &mut retired);
        let changed = !retired.is_empty();
        for alloc in retired.drain(..) {
            self.release(&alloc);
            // Truth errors surface at the next re-rating of the job itself.
            let _ = self.instance_changed(&alloc);
        }
        self.retired = retired;
        if changed {
            self.record_sample();
        }
    }

    /// After an instance appears or leaves: instances re-read their shares, and training
    /// jobs sharing its GPUs are re-rated when truth depends on neighbours.
    fn instance_changed(&mut self, alloc: &Allocation) -> Result<(), SimError> {
        if !self.truth.depends_on_neighbours() {
            return Ok(());
        }
        for j in self.sharers(alloc, JobId(u32::MAX)) {
            self.rerate(j)?;
        }
        Ok(())
    }

    fn arrive(&mut self, job: &'a TrainingJob) {
        self.first_arrival.get_or_insert(job.submit);
        if let Some(reason) = self.config.rejected.get(&job.id) {
            self.outcomes.insert(
                job.id.0,
                JobOutcome::Rejected {
                    reason: reason.clone(),
                },
            );
            self.job_ended(job.id);
            return;
        }
        // Every dimension (GPU type and count, CPU, memory): a job that can never fit would
        // otherwise wait forever, spinning through rounds (issue 10). The answer depends only
        // on the job's shape, and a trace has few shapes: those that fit are remembered.
        let shape = FitShape::of(job);
        if !self.fitting_shapes.contains(&shape) {
            if let Err(unfit) = self.cluster.can_ever_fit(job) {
                self.outcomes.insert(
                    job.id.0,
                    JobOutcome::Rejected {
                        reason: unfit.to_string(),
                    },
                );
                self.job_ended(job.id);
                return;
            }
            if self.fitting_shapes.len() < MAX_FITTING_SHAPES {
                self.fitting_shapes.push(shape);
            }
        }
        if let Some(reason) = self.policy.refuses(job, self.cluster) {
            self.outcomes
                .insert(job.id.0, JobOutcome::Rejected { reason });
            self.job_ended(job.id);
            return;
        }
        if let Some(profiler) = self.config.profiler.clone() {
            let estimate = profiler.profile(job, self.cluster, &mut self.profile_rng);
            let cost = profiler.cost();
            self.profiling_gpu_secs += profiler.gpus() as f64 * cost.as_secs_f64();
            if !cost.is_zero() {
                self.estimates[job.id.index()] = Some(estimate);
                self.waits.profiling(job.id, self.now);
                self.seq += 1;
                self.heap.push(Reverse((
                    self.now + cost,
                    self.seq,
                    Event::ProfileDone { job: job.id },
                )));
                return;
            }
            self.activate(job.id, estimate);
            return;
        }
        self.activate(job.id, Knowledge::new());
    }

    /// Makes an arrived (and profiled) job visible to the policy.
    fn activate(&mut self, id: JobId, knowledge: Knowledge) {
        let job = &self.jobs[id.index()];
        let mut entry = ActiveJob {
            knowledge,
            ..ActiveJob::arrived(job)
        };
        let st = &self.state[job.id.index()];
        if st.ever_started {
            // Only in a forked run: a job arriving with the progress and service it had.
            book::show_service(
                &mut entry,
                st.served_gpu_us,
                Some((st.total - st.done).max(0.0)),
            );
            entry.preemptions = st.preemptions;
        }
        let state = &mut self.state;
        let pos = book::enter(&mut self.active, entry, |j, p| {
            state[j.index()].active_pos = p;
        });
        self.state[job.id.index()].synced_at = self.now;
        self.waits.enqueue(job, self.now);
        self.tracker
            .arrived(self.policy.as_mut(), &self.active[pos], job);
    }

    /// Folds a running job's progress and attained service up to `self.now`. Called only
    /// where its rate or allocation changes (start, stop, re-rating, end), so that the values
    /// at an instant do not depend on how many scheduling points came between changes.
    fn sync(&mut self, job: JobId) {
        let now = self.now;
        let st = &mut self.state[job.index()];
        let total = st.total;
        let held = now.saturating_since(st.synced_at).as_secs_f64();
        let working_from = st.synced_at.max(st.resumes_at);
        let worked = now.saturating_since(working_from);
        if let Some(safe) = self.safe_points.get_mut(job.index()) {
            if safe.every > 0 && st.rate > 0.0 && now > working_from {
                // The latest checkpoint (every `every` µs of working time after the restore)
                // within this stretch of constant rate, if any.
                let k = now.saturating_since(st.resumes_at).as_micros() / safe.every;
                let last = st.resumes_at + SimDuration::from_micros(k * safe.every);
                if k > 0 && last >= working_from {
                    let upto = last.saturating_since(working_from).as_secs_f64();
                    safe.done = (st.done + st.rate * upto).min(total);
                    safe.at = last;
                }
            }
        }
        st.done = (st.done + st.rate * worked.as_secs_f64()).min(total);
        st.gpu_secs += st.gpus_held as f64 * held;
        if st.part_units != 0 {
            st.gpu_secs += f64::from(st.part_units) * held / PART_UNITS_PER_GPU as f64;
        }
        // Attained service counts the time the job made progress, not the time spent
        // restoring from a checkpoint: otherwise a preemptive policy with rounds shorter than
        // the restore time livelocks (each job is preempted before it ever resumes).
        st.served_gpu_us += book::service_between(st.gpus_held, st.synced_at, st.resumes_at, now);
        if st.gpus_held > 0 {
            st.held_secs += held;
            st.integ.0 += st.cur.0 * held;
            st.integ.1 += st.cur.1 * held;
            st.integ.2 += st.cur.2 * held;
        }
        st.synced_at = now;
        let (served, done) = (st.served_gpu_us, st.done);
        self.show_progress(job, served, total - done);
    }

    /// Shows a running job's progress as of `self.now` in `active` without folding it (the
    /// same arithmetic as [`sync`](Self::sync) from the last fold), for a policy that reads it.
    fn refresh(&mut self, job: JobId) {
        let now = self.now;
        let st = &self.state[job.index()];
        let line = st.line();
        let served = st.served_gpu_us
            + book::service_between(st.gpus_held, st.synced_at, st.resumes_at, now);
        self.show_progress(job, served, line.remaining_at(now));
    }

    /// Tells a policy that follows progress how a running job's progress goes from now.
    fn tell_progress(&mut self, job: JobId) {
        if self.tracker.follows_progress() {
            let line = self.state[job.index()].line();
            self.tracker.progress(self.policy.as_mut(), job, line);
        }
    }

    fn show_progress(&mut self, job: JobId, served_gpu_us: u64, remaining: f64) {
        if let Some(&pos) = self.state.get(job.index()).map(|st| &st.active_pos) {
            if let Some(a) = self.active.get_mut(pos as usize) {
                book::show_service(a, served_gpu_us, Some(remaining));
            }
        }
    }

    fn complete(&mut self, job: JobId) -> Result<bool, SimError> {
        self.state[job.index()].due = NO_COMPLETION;
        let pos = self.state[job.index()].active_pos;
        if pos == NOT_ACTIVE {
            return Ok(false); // not reachable: ending a job cancels its completion
        }
        self.sync(job);
        // The spec's iteration count, kept with the run state (the spec is a cold line).
        let total = self.state[job.index()].total;
        let alloc = self.active[pos as usize].allocation.take();
        if let Some(a) = &alloc {
            self.release(a);
        }
        let freed = alloc.unwrap_or_default();
        let st = &mut self.state[job.index()];
        st.done = total; // float rounding must not leave a sliver of work
        st.rate = 0.0;
        st.gpus_held = 0;
        st.part_units = 0;
        st.finish = self.now.as_micros();
        st.finished = true;
        self.remove_active(job);
        self.mark_stopped(job);
        self.job_ended(job);
        self.last_completion = self.now;
        self.rerate_neighbours(&freed, job)?;
        Ok(true)
    }

    /// Takes `job` out of the active set and tells a tracking policy it ended.
    fn remove_active(&mut self, job: JobId) {
        let pos = self.state[job.index()].active_pos as usize;
        let state = &mut self.state;
        book::leave(&mut self.active, pos, |j, p| {
            state[j.index()].active_pos = p
        });
        self.tracker.ended(self.policy.as_mut(), job);
    }

    fn mark_running(&mut self, job: JobId) {
        self.waits.dequeue(job, self.now, self.jobs);
        if self.state[job.index()].running_pos == NOT_ACTIVE {
            self.state[job.index()].running_pos = self.running.len() as u32;
            self.running.push(job);
        }
    }

    fn mark_stopped(&mut self, job: JobId) {
        let pos = self.state[job.index()].running_pos;
        if pos == NOT_ACTIVE {
            return;
        }
        self.running.swap_remove(pos as usize);
        if let Some(&moved) = self.running.get(pos as usize) {
            self.state[moved.index()].running_pos = pos;
        }
        self.state[job.index()].running_pos = NOT_ACTIVE;
    }

    /// Calls the policy and applies its actions; returns whether it asked for any.
    fn schedule(&mut self, trigger: Trigger) -> Result<bool, SimError> {
        if !self.policy.may_act(&trigger) {
            // The point happened; the policy's answer (nothing) is known without the call.
            self.scheduling_points += 1;
            self.explain_waiting(trigger);
            return Ok(false);
        }
        // Syncs are independent per job, so their order does not matter. A policy that does
        // not read running jobs' progress now leaves it to be brought up to date when the job
        // changes or another call reads it (per-event work stays off the running set).
        if self.policy.reads_running_progress(&trigger) {
            for i in 0..self.running.len() {
                self.refresh(self.running[i]);
            }
        }
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        let now = self.now;
        let services = if self.serving.any() {
            self.serving.views(now)
        } else {
            &[]
        };
        let view = ClusterView {
            now: self.now,
            trigger,
            cluster: self.cluster,
            free: self.devices.free(),
            state: &self.devices,
            jobs: self.jobs,
            active: &self.active,
            services,
        };
        self.policy.schedule(&view, &mut actions);
        self.scheduling_points += 1;
        if let Some(at) = self.policy.wakeup().filter(|&at| at > self.now) {
            if self.wakeup != Some(at) {
                self.wakeup = Some(at);
                self.seq += 1;
                self.heap.push(Reverse((at, self.seq, Event::Wakeup)));
            }
        }
        let changed = !actions.is_empty();
        let mut result = Ok(());
        // A re-plan on a loaded cluster preempts and starts hundreds of jobs, each touching
        // its own scattered state: ask for the state two actions ahead, and for what the next
        // action reads through it, while applying this one.
        let mut pending = actions.drain(..);
        if let Some(next) = pending.as_slice().first() {
            self.prefetch_run_state(next);
        }
        while let Some(action) = pending.next() {
            let ahead = pending.as_slice();
            if let Some(next) = ahead.first() {
                self.prefetch_active_entry(next);
            }
            if let Some(after) = ahead.get(1) {
                self.prefetch_run_state(after);
            }
            if let Err(e) = self.apply(action) {
                result = Err(e);
                break;
            }
        }
        drop(pending);
        self.actions = actions;
        result?;
        if changed {
            self.record_sample();
        }
        self.explain_waiting(trigger);
        Ok(changed)
    }

    /// After a decision: the reason each request shape with jobs waiting waits for, from the
    /// policy, else the generic analysis (see [`WaitClocks`]).
    fn explain_waiting(&mut self, trigger: Trigger) {
        if !self.waits.any_waiting() {
            return;
        }
        let services = if self.serving.any() {
            self.serving.views(self.now)
        } else {
            &[]
        };
        let view = ClusterView {
            now: self.now,
            trigger,
            cluster: self.cluster,
            free: self.devices.free(),
            state: &self.devices,
            jobs: self.jobs,
            active: &self.active,
            services,
        };
        self.waits.decide(&view, self.policy.as_ref());
    }

    /// Counts scheduling points that change nothing: no arrival, completion, failure or
    /// reconfiguration led to them, the policy asked for nothing, and nothing runs. Such a
    /// point repeats identically (a round, a wake-up) unless something pending changes what
    /// the policy sees; after [`IDLE_POINTS_BEFORE_CHECK`] of them in a row, a run with
    /// nothing pending cannot progress and stops with [`SimError::Stalled`]. (Cheap on the
    /// hot path: a point where something happened only resets a counter.)
    #[inline]
    fn note_point(&mut self, trigger: &Trigger, acted: bool) -> Result<(), SimError> {
        if acted
            || trigger.arrival
            || trigger.completion
            || trigger.reconfigured
            || !self.running.is_empty()
        {
            self.idle_points = 0;
            return Ok(());
        }
        self.idle_points += 1;
        if self.idle_points < IDLE_POINTS_BEFORE_CHECK {
            return Ok(());
        }
        self.idle_points = 0;
        if self.something_pending() {
            return Ok(());
        }
        Err(self.stalled(Some(IDLE_POINTS_BEFORE_CHECK)))
    }

    /// Whether anything still to come could change what the policy sees while nothing
    /// runs: an arrival, the end of a profiling or of a reconfiguration, the repair of a GPU
    /// that is down, a service starting, serving or ending.
    fn something_pending(&self) -> bool {
        if self.next_arrival < self.jobs.len() {
            return true;
        }
        if self
            .heap
            .iter()
            .any(|Reverse((_, _, e))| !matches!(e, Event::Wakeup))
        {
            return true;
        }
        if self.serving.any()
            && (self.serving.live(self.now) || self.serving.peek_boundary().is_some())
        {
            return true;
        }
        self.injector
            .as_ref()
            .is_some_and(|inj| inj.any_down() && inj.all_up_by().is_some_and(|t| t > self.now))
    }

    /// [`SimError::Stalled`] for the jobs queued now; `points`: how many scheduling points
    /// in a row changed nothing (`None`: no event at all is left).
    fn stalled(&self, points: Option<u32>) -> SimError {
        let mut ids: Vec<JobId> = self.active.iter().map(|a| a.id).collect();
        ids.sort_unstable();
        let mut jobs: Vec<String> = ids
            .iter()
            .take(STALLED_NAMED)
            .map(|id| {
                let j = &self.jobs[id.index()];
                format!(
                    "{} ({} GPU{})",
                    j.name,
                    j.gpus,
                    if j.gpus == 1 { "" } else { "s" }
                )
            })
            .collect();
        if ids.len() > STALLED_NAMED {
            jobs.push(format!("and {} more", ids.len() - STALLED_NAMED));
        }
        let down = self.injector.as_ref().map_or(0, |inj| inj.down_gpus());
        let mut why = if down > 0 {
            format!(
                "{down} of {} GPUs are down with no repair to come; nothing runs",
                self.capacity.0
            )
        } else {
            "nothing runs".to_string()
        };
        match points {
            Some(k) => why.push_str(&format!(
                ", nothing is pending (arrival, profiling, reconfiguration, repair, service) and \
                 the policy placed none of them at {k} scheduling points in a row"
            )),
            None => why.push_str(
                ", no event is left (arrival, profiling, reconfiguration, repair, service, \
                 round or wake-up) and the policy placed none of them",
            ),
        }
        SimError::Stalled {
            policy: self.policy.name().to_string(),
            now: self.now,
            jobs: jobs.join(", "),
            count: ids.len(),
            why,
        }
    }

    /// [`SimError::TimeOverflow`], naming what was due at the end of the clock.
    fn time_overflow(&self) -> SimError {
        let what = if let Some(j) = self
            .jobs
            .get(self.next_arrival)
            .filter(|j| j.submit == SimTime::MAX)
        {
            format!("job {} arrives there", j.name)
        } else if let Some((_, _, j)) = self
            .completions
            .first()
            .filter(|(t, _, _)| *t == SimTime::MAX)
        {
            let name = self.jobs.get(j as usize).map_or("?", |j| &*j.name);
            format!("job {name} would complete there")
        } else {
            "an event of the run".to_string()
        };
        SimError::TimeOverflow {
            policy: self.policy.name().to_string(),
            what,
        }
    }

    /// Asks for the run state of `action`'s job (see [`schedule`](Self::schedule)).
    fn prefetch_run_state(&self, action: &Action) {
        if let Some(st) = action.job().and_then(|job| self.state.get(job.index())) {
            prefetch(st);
        }
    }

    /// Asks for `action`'s job's entry in `active`, found through its run state (asked for
    /// one action earlier), and for what the policy will read when told of the change.
    fn prefetch_active_entry(&self, action: &Action) {
        let Some(job) = action.job() else { return };
        self.prefetch_active_entry_of(job);
        if self.tracker.tracking() {
            self.policy.expect_change(job);
        }
    }

    /// Asks for `job`'s entry in `active` (see [`prefetch_active_entry`](Self::prefetch_active_entry)).
    fn prefetch_active_entry_of(&self, job: JobId) {
        if let Some(entry) = self
            .state
            .get(job.index())
            .and_then(|st| self.active.get(st.active_pos as usize))
        {
            prefetch(entry);
        }
    }

    fn invalid(&self, action: &Action, reason: impl Into<String>) -> SimError {
        SimError::InvalidAction {
            policy: self.policy.name().to_string(),
            now: self.now,
            action: format!("{action:?}"),
            reason: reason.into(),
        }
    }

    fn apply(&mut self, action: Action) -> Result<(), SimError> {
        if let Action::Reconfigure { node, gpu, layout } = &action {
            self.devices
                .check_reconfigure(self.cluster, *node, *gpu, layout.as_deref())
                .map_err(|e| self.invalid(&action, e.reason))?;
            let ready = self.now + self.config.reconfigure_time;
            self.devices.reconfigure(*node, *gpu, layout.clone(), ready);
            self.reconfigurations += 1;
            self.seq += 1;
            self.heap
                .push(Reverse((ready, self.seq, Event::ReconfigDone)));
            return Ok(());
        }
        if let Some(service) = action.service() {
            return self.apply_service(service, action);
        }
        let Some(job) = action.job() else {
            return Err(self.invalid(&action, "action names no job"));
        };
        let pos = match self.state.get(job.index()).map(|st| &st.active_pos) {
            Some(&p) if p != NOT_ACTIVE => p as usize,
            _ => return Err(self.invalid(&action, "job is not active")),
        };
        // A start of a queued job (most actions): checked and named on the policy's own
        // allocation, which becomes the job's, instead of on a copy. (Whether it runs is
        // read in its run state, at hand: its entry in `active`, a cold line on a deep
        // queue, is asked for now and read after the placement is checked and taken.)
        let queued = self.state[job.index()].running_pos == NOT_ACTIVE;
        debug_assert_eq!(queued, self.active[pos].allocation.is_none());
        let action = match action {
            Action::Start {
                job,
                mut allocation,
            } if queued => {
                if let Some(entry) = self.active.get(pos) {
                    prefetch(entry);
                }
                // Most jobs take any GPU model: their spec (a cold line) is not read.
                let gpu_types = match self.state.get(job.index()) {
                    Some(st) if !st.gpu_typed => &[][..],
                    _ => &self.jobs[job.index()].gpu_types[..],
                };
                if let Err(e) = self.devices.resolve_in_place(
                    self.cluster,
                    gpu_types,
                    &mut allocation,
                    self.now,
                ) {
                    return Err(self.invalid(&Action::Start { job, allocation }, e.reason));
                }
                self.take(&allocation);
                let restart = self.state[job.index()].ever_started;
                return self.begin(job, pos, allocation, restart);
            }
            other => other,
        };
        let new = validate(
            &self.devices,
            self.cluster,
            &self.jobs[job.index()],
            self.active[pos].allocation.as_ref(),
            &action,
            self.now,
        )
        .map_err(|e| self.invalid(&action, e.reason))?;
        match (action, new) {
            (Action::Start { .. }, Some(alloc)) => {
                self.take(&alloc);
                let restart = self.state[job.index()].ever_started;
                self.begin(job, pos, alloc, restart)
            }
            (Action::Preempt { .. }, _) => {
                // Its place in `running` goes to the last running job, whose run state
                // then changes: asked for now, read after the stop.
                if let Some(st) = self.running.last().and_then(|m| self.state.get(m.index())) {
                    prefetch(st);
                }
                let old = self.stop(job, pos);
                self.active[pos].state = JobState::Queued;
                self.active[pos].resumes_at = None;
                self.mark_stopped(job);
                self.waits.enqueue(&self.jobs[job.index()], self.now);
                self.tracker.preempted(
                    self.policy.as_mut(),
                    &self.active[pos],
                    &self.jobs[job.index()],
                );
                self.rerate_neighbours(&old, job)
            }
            (Action::Resize { .. }, Some(alloc)) => {
                let old = self.stop(job, pos);
                self.take(&alloc);
                self.begin(job, pos, alloc, true)?;
                self.rerate_neighbours(&old, job)
            }
            (Action::Retune { .. }, Some(alloc)) => {
                self.sync(job);
                let old = self.active[pos].allocation.take().unwrap_or_default();
                self.release(&old);
                self.take(&alloc);
                self.active[pos].allocation = Some(alloc);
                self.rerate(job)?;
                self.rerate_neighbours(&old, job)
            }
            (action, _) => Err(self.invalid(&action, "validated to nothing")),
        }
    }

    fn apply_service(
        &mut self,
        service: tessera_model::ServiceId,
        action: Action,
    ) -> Result<(), SimError> {
        let Some(spec) = self.serving.spec(service) else {
            return Err(self.invalid(&action, "no such service"));
        };
        let holding = match &action {
            Action::ScaleIn { instance, .. } | Action::RetuneInstance { instance, .. } => {
                self.serving.instance_alloc(service, *instance).cloned()
            }
            _ => None,
        };
        let new = validate(
            &self.devices,
            self.cluster,
            spec,
            holding.as_ref(),
            &action,
            self.now,
        )
        .map_err(|e| self.invalid(&action, e.reason))?;
        match (&action, new) {
            (Action::ScaleOut { .. }, Some(alloc)) => {
                self.take(&alloc);
                self.serving.scale_out(
                    service,
                    alloc.clone(),
                    self.now,
                    &self.devices,
                    self.cluster,
                );
                self.instance_changed(&alloc)
            }
            (Action::ScaleIn { instance, .. }, None) => {
                match self.serving.scale_in(service, *instance, self.now) {
                    Some((alloc, false)) => {
                        self.release(&alloc);
                        self.instance_changed(&alloc)
                    }
                    // Still running a batch: its GPUs are released when it ends.
                    Some((_, true)) => Ok(()),
                    None => Err(self.invalid(&action, "no such instance")),
                }
            }
            (Action::RetuneInstance { instance, .. }, Some(alloc)) => {
                // In place: the instance keeps its queue, batch in flight and readiness.
                let Some(old) = holding else {
                    return Err(self.invalid(&action, "no such instance"));
                };
                self.release(&old);
                self.take(&alloc);
                if !self.serving.retune(service, *instance, alloc.clone()) {
                    return Err(self.invalid(&action, "no such instance"));
                }
                self.serving.refresh_shares(&self.devices, self.cluster);
                self.instance_changed(&old)?;
                self.instance_changed(&alloc)
            }
            _ => Err(self.invalid(&action, "validated to nothing")),
        }
    }

    /// The jobs holding a quota share on any GPU of `alloc` (other than `except`).
    fn sharers(&self, alloc: &Allocation, except: JobId) -> Vec<JobId> {
        let touched: Vec<(NodeId, GpuMask)> = alloc
            .shares
            .iter()
            .filter_map(|s| match s.devices {
                Some(d) if matches!(d.part, GpuPart::Quota { .. }) => Some((s.node, d.gpus)),
                _ => None,
            })
            .collect();
        if touched.is_empty() {
            return Vec::new();
        }
        let mut out: Vec<JobId> = self
            .running
            .iter()
            .copied()
            .filter(|&j| j != except)
            .filter(|&j| {
                let pos = self.state[j.index()].active_pos as usize;
                self.active[pos].allocation.as_ref().is_some_and(|a| {
                    a.shares.iter().any(|s| {
                        s.devices.is_some_and(|d| {
                            touched
                                .iter()
                                .any(|(n, m)| *n == s.node && !m.is_disjoint(d.gpus))
                        })
                    })
                })
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Re-rates the jobs sharing GPUs with `alloc` when truth depends on neighbours (quotas,
    /// MPS): their speed changes when a neighbour arrives, leaves or is retuned.
    fn rerate_neighbours(&mut self, alloc: &Allocation, changed: JobId) -> Result<(), SimError> {
        if !self.truth.depends_on_neighbours() {
            return Ok(());
        }
        let mut all = self.sharers(alloc, changed);
        if let Some(a) = self
            .state
            .get(changed.index())
            .map(|st| &st.active_pos)
            .and_then(|&p| {
                (p != NOT_ACTIVE)
                    .then(|| self.active[p as usize].allocation.clone())
                    .flatten()
            })
        {
            all.extend(self.sharers(&a, changed));
        }
        all.sort_unstable();
        all.dedup();
        for j in all {
            self.rerate(j)?;
        }
        Ok(())
    }

    /// Brings a running job's rate up to date with its allocation and neighbours (no restart:
    /// progress so far is kept and any restore still under way continues).
    fn rerate(&mut self, job: JobId) -> Result<(), SimError> {
        self.sync(job);
        let pos = self.state[job.index()].active_pos as usize;
        let Some(alloc) = self.active[pos].allocation.clone() else {
            return Ok(());
        };
        let rate = self.rate_of(job, &alloc)?;
        let now = self.now;
        let spec = &self.jobs[job.index()];
        let st = &mut self.state[job.index()];
        if rate != st.rate {
            st.rate = rate;
            let remaining = (spec.iterations as f64 - st.done).max(0.0);
            let finish = st.resumes_at.max(now) + SimDuration::from_secs_f64_ceil(remaining / rate);
            self.schedule_completion(job, finish);
        }
        // Progress was folded now, rate changed or not: later values count from here.
        self.tell_progress(job);
        Ok(())
    }

    /// Re-rates every running job holding a quota share (after a controller's sample).
    fn rerate_quota_jobs(&mut self) -> Result<(), SimError> {
        let mut quota: Vec<JobId> = self
            .running
            .iter()
            .copied()
            .filter(|j| {
                let pos = self.state[j.index()].active_pos as usize;
                self.active[pos]
                    .allocation
                    .as_ref()
                    .is_some_and(|a| matches!(a.part(), Some(GpuPart::Quota { .. })))
            })
            .collect();
        quota.sort_unstable();
        for j in quota {
            self.rerate(j)?;
        }
        Ok(())
    }

    /// The truth rate of `job` on `alloc`, with its neighbours when truth depends on them.
    fn rate_of(&self, job: JobId, alloc: &Allocation) -> Result<f64, SimError> {
        let spec = &self.jobs[job.index()];
        // Only a serving controller moves training's share (and most runs serve nothing).
        let controlled = if self.serving.any() {
            self.serving
                .training_share(alloc, &self.devices)
                .map(|sm| controlled_alloc(alloc, sm))
        } else {
            None
        };
        let rate = if let Some(a) = controlled {
            // Under vertical scaling the controller decides the job's share: the truth sees
            // it as a fixed quota of that share, neighbours already accounted for.
            self.truth.throughput_among(spec, &a, self.cluster, &[])
        } else if self.truth.depends_on_neighbours() {
            let neighbours: Vec<(&TrainingJob, &Allocation)> = self
                .sharers(alloc, job)
                .into_iter()
                .filter_map(|j| {
                    let pos = self.state[j.index()].active_pos as usize;
                    self.active[pos]
                        .allocation
                        .as_ref()
                        .map(|a| (&self.jobs[j.index()], a))
                })
                .chain(
                    self.serving
                        .holdings()
                        .filter(|(_, _, a)| shares_gpus(alloc, a))
                        .filter_map(|(s, _, a)| self.service_jobs.get(s.index()).map(|j| (j, a))),
                )
                .collect();
            self.truth
                .throughput_among(spec, alloc, self.cluster, &neighbours)
        } else if self.truth.proportional_to_gpus() {
            // Same value, from the copies kept with the job's progress.
            let rate = self.state.get(job.index()).map_or(0.0, |st| {
                tessera_perf::held_throughput(st.reference, alloc, self.cluster, st.asked)
            });
            debug_assert_eq!(
                rate.to_bits(),
                self.truth.throughput(spec, alloc, self.cluster).to_bits(),
                "the copies kept with the job's progress must give the truth's rate"
            );
            rate
        } else {
            self.truth.throughput(spec, alloc, self.cluster)
        };
        if !(rate.is_finite() && rate > 0.0) {
            return Err(SimError::BadThroughput {
                job: spec.name.to_string(),
                rate,
                now: self.now,
            });
        }
        Ok(rate)
    }

    fn take(&mut self, alloc: &Allocation) {
        if let Some(n) = whole_gpus(alloc) {
            // Idle GPUs taken whole: each turns active with no fragmentation term, which is
            // what the general path computes, without reading every GPU twice.
            self.devices.take(self.cluster, alloc);
            self.active_now.0 += n;
            self.settle_activity();
        } else {
            self.track_activity(alloc, -1.0);
            self.devices.take(self.cluster, alloc);
            self.track_activity(alloc, 1.0);
            self.part_units_now += part_units(alloc, self.cluster);
        }
        let (gpus, cpu, memory) = held(alloc);
        self.used.0 += gpus;
        self.used.1 += cpu;
        self.used.2 += memory;
        if self.serving.any() {
            self.serving.refresh_shares(&self.devices, self.cluster);
        }
    }

    fn release(&mut self, alloc: &Allocation) {
        if let Some(n) = whole_gpus(alloc) {
            // GPUs held whole turn idle (as in `take`).
            self.devices.release(self.cluster, alloc);
            self.active_now.0 -= n;
            self.settle_activity();
        } else {
            self.track_activity(alloc, -1.0);
            self.devices.release(self.cluster, alloc);
            self.track_activity(alloc, 1.0);
            self.part_units_now = self
                .part_units_now
                .saturating_sub(part_units(alloc, self.cluster));
        }
        let (gpus, cpu, memory) = held(alloc);
        self.used.0 -= gpus;
        self.used.1 -= cpu;
        self.used.2 -= memory;
        if self.serving.any() {
            self.serving.refresh_shares(&self.devices, self.cluster);
        }
    }

    /// Adds (`sign` = 1) or removes (−1) the activity of the GPUs `alloc` touches, around a
    /// change of their holders: O(GPUs touched), not O(cluster).
    fn track_activity(&mut self, alloc: &Allocation, sign: f64) {
        for s in &alloc.shares {
            let Some(d) = s.devices else { continue };
            let Some(node) = self.cluster.nodes.get(s.node.index()) else {
                continue;
            };
            let catalog = &self.cluster.catalog;
            let capacity = || Bytes::from_gib_f64(catalog.get(node.gpu).memory_gib);
            let gpus = self.devices.gpus(s.node);
            for i in d.gpus.iter() {
                let Some(g) = gpus.get(i as usize) else {
                    continue;
                };
                // Only partitioned GPUs need the (name-searched) MIG geometry.
                let mig_used = match (&g.mig, g.mig_busy) {
                    (Some(layout), busy) if busy != 0 => self
                        .cluster
                        .catalog
                        .mig_geometry(node.gpu)
                        .map_or(0, |geo| {
                            layout
                                .iter()
                                .enumerate()
                                .filter(|(k, _)| busy & (1 << k) != 0)
                                .filter_map(|(_, inst)| geo.profile(*inst))
                                .map(|p| p.compute_slices as u32)
                                .sum()
                        }),
                    _ => 0,
                };
                let (a, sm, mem) = gpu_activity(g, capacity, mig_used);
                if sign > 0.0 {
                    self.active_now.0 += a;
                } else {
                    self.active_now.0 -= a;
                }
                self.active_now.1 += sign * sm;
                self.active_now.2 += sign * mem;
            }
        }
        if sign > 0.0 {
            self.settle_activity();
        }
    }

    /// After a change of holders: the peak, and float sums reset on an idle cluster.
    fn settle_activity(&mut self) {
        self.activity.peak = self.activity.peak.max(self.active_now.0);
        if self.active_now.0 == 0 {
            // Float sums of fragmentation return to exactly zero on an idle cluster.
            self.active_now.1 = 0.0;
            self.active_now.2 = 0.0;
        }
    }

    /// Stops a running job where it is (progress kept) and returns what it held.
    fn stop(&mut self, job: JobId, pos: usize) -> Allocation {
        self.sync(job);
        let alloc = self.active[pos].allocation.take().unwrap_or_default();
        self.release(&alloc);
        let st = &mut self.state[job.index()];
        st.rate = 0.0;
        st.gpus_held = 0;
        st.part_units = 0;
        st.preemptions += 1;
        self.active[pos].preemptions = st.preemptions;
        self.cancel_completion(job);
        alloc
    }

    /// Puts a job on `alloc` (already taken from `free`) and schedules its completion.
    fn begin(
        &mut self,
        job: JobId,
        pos: usize,
        alloc: Allocation,
        restart: bool,
    ) -> Result<(), SimError> {
        let cost = if restart {
            let held_gpus = held(&alloc).0 as u32;
            let costs = &self.config.restart_costs;
            let base = &mut self.state[job.index()].restart_base_us;
            // The book's rule (`restore_time`), with the model's part looked up once.
            if *base == NEVER {
                *base = costs
                    .checkpoint_restore(&self.jobs[job.index()].model)
                    .as_micros();
            }
            book::restart_cost(costs, SimDuration::from_micros(*base), held_gpus)
        } else {
            SimDuration::ZERO
        };
        self.begin_after(job, pos, alloc, cost)
    }

    /// [`begin`](Self::begin) with the restart cost given: progress resumes `cost` from now.
    fn begin_after(
        &mut self,
        job: JobId,
        pos: usize,
        alloc: Allocation,
        cost: SimDuration,
    ) -> Result<(), SimError> {
        let rate = self.rate_of(job, &alloc)?;
        let (held_gpus, held_cpu, held_memory) = held(&alloc);
        let held_gpus = held_gpus as u32;
        // Parts of GPUs (a job holds parts of at most a node's GPUs: far below u32::MAX).
        let part = part_units(&alloc, self.cluster).min(u64::from(u32::MAX)) as u32;
        let now = self.now;
        let g = held_gpus.max(1) as f64;
        let st = &mut self.state[job.index()];
        let proportional = st.reference * g / st.asked.max(1) as f64;
        st.cur = (
            MilliCpu(held_cpu).as_cores() / g,
            Bytes(held_memory).as_gib() / g,
            if proportional > 0.0 {
                rate / proportional
            } else {
                1.0
            },
        );
        st.rate = rate;
        st.synced_at = now;
        st.resumes_at = now + cost;
        // A run restores from the state it starts with: its first safe point.
        if let Some(safe) = self.safe_points.get_mut(job.index()) {
            safe.done = st.done;
            safe.at = now;
        }
        st.gpus_held = held_gpus;
        st.part_units = part;
        st.ever_started = true;
        if st.first_start == NEVER {
            st.first_start = now.as_micros();
        }
        let remaining = (st.total - st.done).max(0.0);
        let finish = st.resumes_at + SimDuration::from_secs_f64_ceil(remaining / rate);
        let served = st.served_gpu_us;
        let remaining = st.total - st.done;
        let resumes_at = st.resumes_at;
        if self.config.record_timeseries {
            self.note_placement(job, &alloc);
        }
        let a = &mut self.active[pos];
        a.state = JobState::Running;
        a.allocation = Some(alloc);
        a.first_start.get_or_insert(now);
        a.resumes_at = Some(resumes_at);
        book::show_service(a, served, Some(remaining));
        self.mark_running(job);
        if self.tracker.tracking() {
            let jobs = self.jobs;
            let now = self.now;
            self.tracker.started(
                self.policy.as_mut(),
                &mut self.active[pos],
                &jobs[job.index()],
                now,
            );
            self.tell_progress(job);
        }
        self.schedule_completion(job, finish);
        if self.truth.depends_on_neighbours() {
            let held = self.active[pos].allocation.clone().unwrap_or_default();
            self.rerate_neighbours(&held, job)?;
        }
        Ok(())
    }

    /// Sets `job`'s completion at `at`, replacing (cancelling) any pending one.
    fn schedule_completion(&mut self, job: JobId, at: SimTime) {
        self.cancel_completion(job);
        self.seq += 1;
        self.state[job.index()].due = (at, self.seq);
        self.completions.insert((at, self.seq, job.0));
    }

    /// Removes `job`'s pending completion, if any; its instant stays an instant of the run.
    fn cancel_completion(&mut self, job: JobId) {
        let (at, seq) = std::mem::replace(&mut self.state[job.index()].due, NO_COMPLETION);
        if seq != 0 {
            self.completions.remove(self.state.as_slice());
            self.stale.push(at);
        }
    }

    /// Adds the nodes of `alloc` to those `job` ran on.
    fn note_placement(&mut self, job: JobId, alloc: &Allocation) {
        if self.placements.len() < self.jobs.len() {
            self.placements.resize(self.jobs.len(), Vec::new());
        }
        if let Some(nodes) = self.placements.get_mut(job.index()) {
            for s in &alloc.shares {
                if !nodes.contains(&s.node) {
                    nodes.push(s.node);
                }
            }
        }
    }

    fn record_sample(&mut self) {
        if !self.config.record_timeseries {
            return;
        }
        let running = self.running.len() as u32;
        let sample = UtilSample {
            time: self.now,
            gpus: self.used.0,
            part_units: self.part_units_now,
            cpu_milli: self.used.1,
            memory_bytes: self.used.2,
            running,
            queued: self.active.len() as u32 - running,
            active_gpus: self.active_now.0,
            sm_frag: per_gpu(self.active_now.1, self.active_now.0),
            mem_frag: per_gpu(self.active_now.2, self.active_now.0),
        };
        match self.timeseries.last_mut() {
            Some(last) if last.time == sample.time => *last = sample,
            _ => self.timeseries.push(sample),
        }
    }

    fn finish_run(&mut self, reason: &str) {
        let ids: Vec<JobId> = self.active.iter().map(|a| a.id).collect();
        for id in ids {
            if self.active[self.state[id.index()].active_pos as usize].state == JobState::Running {
                self.sync(id);
            }
            self.outcomes.insert(
                id.0,
                JobOutcome::Unfinished {
                    reason: reason.to_string(),
                },
            );
        }
        self.finish();
    }

    /// Marks the run over, counting the cancelled completions the clock has passed.
    fn finish(&mut self) {
        self.events += self.stale.pop_through(self.now).0;
        self.finished = true;
    }

    /// Checks the engine's invariants; used by tests after every step.
    ///
    /// - no node has more GPUs, CPU or memory allocated than it has;
    /// - free resources plus what running jobs hold equals capacity, node by node, and every
    ///   GPU's state is what its holders imply (at most one whole holder; MIG instances valid
    ///   for the layout, disjoint, one holder each; Σ SM requests ≤ 1000‰, Σ device memory ≤
    ///   capacity) — see [`ClusterState::check_invariants`];
    /// - no job has done more iterations than it has, and finished jobs did all of them.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut holdings: Vec<(HolderName, &Allocation)> = Vec::new();
        for a in &self.active {
            match (&a.state, &a.allocation) {
                (JobState::Running, Some(alloc)) => {
                    if self.state[a.id.index()].running_pos == NOT_ACTIVE {
                        return Err(format!("job {:?} runs but is not tracked as running", a.id));
                    }
                    holdings.push((HolderName::Job(a.id), alloc));
                }
                (JobState::Queued, None) => {}
                (st, alloc) => {
                    return Err(format!(
                        "job {:?} is {st:?} with allocation {alloc:?}",
                        a.id
                    ))
                }
            }
        }
        let running = self
            .active
            .iter()
            .filter(|a| a.state == JobState::Running)
            .count();
        if running != self.running.len() {
            return Err(format!(
                "{running} jobs run but {} are tracked as running",
                self.running.len()
            ));
        }
        // Exactly one live completion per running job, and none for any other.
        if self.completions.len() != self.running.len() {
            return Err(format!(
                "{} live completions for {} running jobs",
                self.completions.len(),
                self.running.len()
            ));
        }
        let live: BTreeSet<u32> = self
            .completions
            .live(self.state.as_slice())
            .map(|(_, _, job)| job)
            .collect();
        for &j in &self.running {
            if !live.contains(&j.0) {
                let due = self.state[j.index()].due;
                return Err(format!(
                    "running job {j:?} has no live completion ({due:?})"
                ));
            }
        }
        holdings.extend(
            self.serving
                .holdings()
                .map(|(_, id, a)| (HolderName::Instance(id), a)),
        );
        // No job keeps a GPU that is down (instances may, until their batch in flight ends).
        for (h, alloc) in &holdings {
            if let HolderName::Job(j) = h {
                for s in &alloc.shares {
                    let Some(d) = s.devices else { continue };
                    if d.gpus.iter().any(|i| {
                        self.devices
                            .gpus(s.node)
                            .get(i as usize)
                            .is_some_and(|g| g.down)
                    }) {
                        return Err(format!(
                            "job {j:?} holds a GPU of node {} that is down",
                            s.node.0
                        ));
                    }
                }
            }
        }
        // Device level: free + held = capacity per node, no GPU over-committed.
        self.devices.check_invariants(self.cluster, holdings)?;
        self.serving.check_invariants()?;
        for (job, st) in self.jobs.iter().zip(&self.state) {
            let total = job.iterations as f64;
            if st.done > total {
                return Err(format!(
                    "job {} did {} of {total} iterations",
                    job.name, st.done
                ));
            }
            if st.finished && st.done != total {
                return Err(format!(
                    "job {} finished after {} of {total} iterations",
                    job.name, st.done
                ));
            }
        }
        Ok(())
    }

    /// Ends the run and builds its report (also valid mid-run, for inspection).
    pub fn into_report(mut self) -> SimReport {
        if !self.finished {
            self.finish_run("run stopped early");
        }
        let policy = self.policy.name().to_string();
        let mut outcomes = std::mem::take(&mut self.outcomes);
        let jobs = records(std::mem::take(&mut self.state), self.jobs, &mut outcomes);
        let mut summary = self.summarize(&jobs);
        summary.failures = self.failure_summary();
        let (services, service_instances) = self.serving.finish(self.now);
        summary.services = services;
        let waits = std::mem::take(&mut self.waits).finish(self.now, self.jobs);
        SimReport {
            policy,
            summary,
            jobs,
            waits,
            timeseries: std::mem::take(&mut self.timeseries),
            policy_stats: self.policy.stats(),
            service_instances,
            placements: std::mem::take(&mut self.placements),
        }
    }

    fn failure_summary(&mut self) -> Option<FailureSummary> {
        let now = self.now;
        let inj = self.injector.as_mut()?;
        inj.account(now);
        let per_job = std::mem::take(&mut self.failure_stats);
        let n = per_job.len().max(1) as f64;
        Some(FailureSummary {
            failures: inj.failures,
            down_gpu_hours: inj.down_gpu_secs() / 3600.0,
            lost_gpu_hours: per_job.iter().map(|f| f.lost_gpu_secs).sum::<f64>() / 3600.0,
            lost_iterations: per_job.iter().map(|f| f.lost_iterations).sum(),
            restarts_per_job: RestartStats {
                mean: per_job.iter().map(|f| f.restarts as f64).sum::<f64>() / n,
                max: per_job.iter().map(|f| f.restarts).max().unwrap_or(0),
            },
            failed: self.failed_jobs.len(),
            failed_jobs: std::mem::take(&mut self.failed_jobs),
            per_job,
        })
    }

    fn summarize(&self, jobs: &[JobRecord]) -> Summary {
        Summary::of(
            jobs,
            &RunTotals {
                first_arrival: self.first_arrival,
                last_completion: self.last_completion,
                stopped_at: self.now,
                util_integral: (
                    secs(self.util_us.0)
                        + self.part_units_us as f64 / PART_UNITS_PER_GPU as f64 / 1e6,
                    secs(self.util_us.1),
                    secs(self.util_us.2),
                ),
                part_gpu_secs: self.part_units_us as f64 / PART_UNITS_PER_GPU as f64 / 1e6,
                capacity: self.capacity,
                events: self.events,
                scheduling_points: self.scheduling_points,
                profiling_gpu_secs: self.profiling_gpu_secs,
                activity: GpuActivity {
                    since: match (self.first_arrival, self.serving.first_start()) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    },
                    active_secs: secs(self.active_gpu_us),
                    ..self.activity
                },
            },
        )
    }
}

/// An integral in unit·µs, in unit·s.
fn secs(unit_us: u128) -> f64 {
    unit_us as f64 / 1e6
}

fn per_gpu(sum: f64, gpus: u32) -> f64 {
    if gpus > 0 {
        sum / gpus as f64
    } else {
        0.0
    }
}

/// True when two allocations share a GPU.
fn shares_gpus(a: &Allocation, b: &Allocation) -> bool {
    a.shares.iter().any(|x| {
        b.shares.iter().any(|y| {
            x.node == y.node
                && matches!((x.devices, y.devices), (Some(p), Some(q)) if !p.gpus.is_disjoint(q.gpus))
        })
    })
}

/// The instants of cancelled completions, each still an event of the run once the clock
/// passes it. A run that steps at each (services or failures run on the clock) takes them
/// out in order from a min-heap; one that steps over them only counts those passed, so it
/// keeps them unordered and counts them in batches, for a push and an amortized part of one
/// pass each (a heap's pop cost more than the rest of a preemption's bookkeeping).
#[derive(Debug, Default)]
struct StaleInstants {
    /// In order, when the run steps at each.
    heap: BinaryHeap<Reverse<u64>>,
    /// Unordered, when the run only counts them.
    unordered: Vec<u64>,
    counting: bool,
    /// How many unordered instants make the next batch worth counting.
    batch: usize,
}

/// Fewest unordered instants counted in one batch.
const STALE_BATCH: usize = 1024;

impl StaleInstants {
    /// Instants to be stepped at (`counting` false) or only counted as the clock passes them.
    fn new(counting: bool) -> StaleInstants {
        StaleInstants {
            counting,
            batch: STALE_BATCH,
            ..StaleInstants::default()
        }
    }

    fn push(&mut self, at: SimTime) {
        if self.counting {
            self.unordered.push(at.as_micros());
        } else {
            self.heap.push(Reverse(at.as_micros()));
        }
    }

    fn is_empty(&self) -> bool {
        self.heap.is_empty() && self.unordered.is_empty()
    }

    /// The earliest instant to step at (none when counting).
    fn peek(&self) -> Option<SimTime> {
        self.heap.peek().map(|r| SimTime::from_micros(r.0))
    }

    /// Takes out every instant up to `t`; returns how many there were and the last.
    fn pop_through(&mut self, t: SimTime) -> (u64, Option<SimTime>) {
        let t = t.as_micros();
        let mut popped = 0;
        let mut last: Option<u64> = None;
        while let Some(&Reverse(m)) = self.heap.peek() {
            if m > t {
                break;
            }
            self.heap.pop();
            popped += 1;
            last = Some(m);
        }
        self.unordered.retain(|&m| {
            let passed = m <= t;
            if passed {
                popped += 1;
                last = Some(last.map_or(m, |l| l.max(m)));
            }
            !passed
        });
        self.batch = STALE_BATCH.max(2 * self.unordered.len());
        (popped, last.map(SimTime::from_micros))
    }

    /// When counting: takes out and counts the instants up to `t` once a batch has
    /// gathered (the rest wait for a later count or [`pop_through`](Self::pop_through)).
    fn count_through(&mut self, t: SimTime) -> u64 {
        if self.unordered.len() < self.batch {
            return 0;
        }
        self.pop_through(t).0
    }

    /// Takes out every instant equal to `t` (none is earlier); returns how many there were.
    fn pop_at(&mut self, t: SimTime) -> u64 {
        if self.peek() != Some(t) {
            return 0;
        }
        self.pop_through(t).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The records take the run state's memory: a report of a million jobs then faults in
    /// no fresh pages. Growing a record past the state (or changing its alignment) makes the
    /// collect allocate again, silently: this says so.
    #[test]
    fn records_are_collected_in_place_over_the_run_state() {
        let jobs: Vec<TrainingJob> = (0..64)
            .map(|i| {
                TrainingJob::simple(
                    i,
                    SimTime::from_secs(i.into()),
                    1,
                    SimDuration::from_secs(60),
                )
            })
            .collect();
        let mut state: Vec<Progressing> = jobs.iter().map(Progressing::queued).collect();
        state[3].finished = true;
        state[3].done = state[3].total;
        state[3].finish = 7_000_000;
        let mut outcomes = BTreeMap::from([(
            5,
            JobOutcome::Unfinished {
                reason: "stopped".to_string(),
            },
        )]);
        let before = state.as_ptr().cast::<u8>();
        let records = records(state, &jobs, &mut outcomes);
        assert_eq!(
            records.as_ptr().cast::<u8>(),
            before,
            "records were not collected in place"
        );
        assert_eq!(records.len(), jobs.len());
        assert_eq!(records[3].outcome, JobOutcome::Finished);
        assert_eq!(records[3].finish, Some(SimTime::from_secs(7)));
        assert_eq!(
            records[5].outcome,
            JobOutcome::Unfinished {
                reason: "stopped".to_string()
            }
        );
        assert!(outcomes.is_empty());
        assert!(matches!(records[6].outcome, JobOutcome::Unfinished { .. }));
        assert!(records
            .iter()
            .zip(&jobs)
            .all(|(r, j)| r.job == j.id && r.name == j.name));
    }

    proptest! {
        /// The instants come out in order with their multiplicities, when keys are never
        /// below the instant last taken out (as completions are never due before now).
        #[test]
        fn stale_instants_pop_in_order(ops in prop::collection::vec((0u64..3, 0u64..5_000), 1..300)) {
            let mut stale = StaleInstants::default();
            let mut reference: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
            let mut now = 0u64;
            for (op, delta) in ops {
                if op < 2 {
                    // A completion due at or after now (deltas of 0 make ties).
                    let at = now + if op == 0 { delta % 3 } else { delta * 977 };
                    stale.push(SimTime::from_micros(at));
                    reference.push(Reverse(at));
                } else {
                    // Step to the next instant, as the engine does, and take out what is due.
                    let next = reference.peek().map(|r| r.0);
                    prop_assert_eq!(stale.peek().map(|t| t.as_micros()), next);
                    let Some(t) = next else { continue };
                    now = t;
                    let mut due = 0;
                    while reference.peek().is_some_and(|r| r.0 == t) {
                        reference.pop();
                        due += 1;
                    }
                    prop_assert_eq!(stale.pop_at(SimTime::from_micros(t)), due);
                    prop_assert_eq!(stale.pop_at(SimTime::from_micros(t)), 0);
                }
            }
            while let Some(Reverse(t)) = reference.peek().copied() {
                prop_assert_eq!(stale.peek(), Some(SimTime::from_micros(t)));
                let mut due = 0;
                while reference.peek().is_some_and(|r| r.0 == t) {
                    reference.pop();
                    due += 1;
                }
                prop_assert_eq!(stale.pop_at(SimTime::from_micros(t)), due);
            }
            prop_assert_eq!(stale.peek(), None);
        }

        /// Counting in batches as the clock moves, then once at the end, counts every
        /// instant the clock passed, each once, and none it did not.
        #[test]
        fn stale_instants_counted_in_batches(ops in prop::collection::vec((any::<bool>(), 0u64..5_000), 1..3_000)) {
            let mut stale = StaleInstants::new(true);
            let mut pushed: Vec<u64> = Vec::new();
            let mut now = 0u64;
            let mut counted = 0u64;
            for (push, delta) in ops {
                if push {
                    stale.push(SimTime::from_micros(now + delta));
                    pushed.push(now + delta);
                } else {
                    now += delta;
                    counted += stale.count_through(SimTime::from_micros(now));
                    prop_assert!(counted <= pushed.iter().filter(|&&a| a <= now).count() as u64);
                }
            }
            counted += stale.pop_through(SimTime::from_micros(now)).0;
            prop_assert_eq!(counted, pushed.iter().filter(|&&a| a <= now).count() as u64);
            prop_assert_eq!(stale.pop_through(SimTime::MAX).0, pushed.iter().filter(|&&a| a > now).count() as u64);
        }

        /// Stepping over instants: `pop_through(t)` takes out exactly those up to t, and
        /// reports the last of them.
        #[test]
        fn stale_instants_pop_through(ops in prop::collection::vec((any::<bool>(), 0u64..5_000), 1..300)) {
            let mut stale = StaleInstants::default();
            let mut reference: Vec<u64> = Vec::new();
            let mut now = 0u64;
            for (push, delta) in ops {
                if push {
                    let at = now + delta;
                    stale.push(SimTime::from_micros(at));
                    reference.push(at);
                } else {
                    now += delta;
                    let due: Vec<u64> = reference.iter().copied().filter(|&a| a <= now).collect();
                    reference.retain(|&a| a > now);
                    let (n, last) = stale.pop_through(SimTime::from_micros(now));
                    prop_assert_eq!(n, due.len() as u64);
                    prop_assert_eq!(last.map(|t| t.as_micros()), due.iter().copied().max());
                    prop_assert_eq!(
                        stale.peek().map(|t| t.as_micros()),
                        reference.iter().copied().min()
                    );
                }
            }
        }
    }
}
