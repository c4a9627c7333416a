//! The scheduling engine: the in-memory job table, the store, the backend and the policy,
//! driven from one thread.
//!
//! Jobs are indexed densely ([`JobId`] = position in `jobs`), which is the index the policy's
//! [`ClusterView`] uses; the persistent id is the store's. At each scheduling point the engine
//! builds the view, calls [`Policy::schedule`], validates every action against free capacity
//! (refusing any that would over-allocate), writes the resulting transitions to the store, and
//! only then calls the backend.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use tessera_model::{Allocation, Bytes, MilliCpu, Resources, SimDuration, SimTime, TrainingJob};
use tessera_sched::{Action, ActiveJob, ClusterView, Ledger, Policy, PolicyOptions, Trigger};

use crate::backend::{Backend, Handle, Launch, NodeHealth, Payload, RunStatus};
use crate::clock::Clock;
use crate::config::{hash_token, hex, DaemonConfig, Limits};
use crate::error::{ApiError, DaemonError};
use crate::inventory::ClusterMap;
use crate::metrics::{Gauges, Metrics};
use crate::spec::JobSpec;
use crate::store::{JobRow, RunRow, RunState, Store, TransitionRow, WriteBatch};
use crate::types::{
    JobDetail, JobList, JobState, JobView, NodeList, NodeView, Progress, ProgressAck,
    ProgressReport, QueueSummary, QueueView, TransitionView,
};

/// Default run time assumed for a job without hints.
const DEFAULT_DURATION_SECS: f64 = 3600.0;
/// Consecutive backend submission failures before a job is marked failed.
const MAX_SUBMIT_FAILURES: u32 = 3;
/// Seconds before scheduling again after a failed backend submission.
const SUBMIT_RETRY_SECS: u64 = 5;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A tenant token.
    Tenant { name: String, admin: bool },
    /// A job's own token (SDK): may report progress and read the job.
    Job { id: i64 },
}

/// One API request for the engine.
#[derive(Debug)]
pub(crate) enum Request {
    Submit { body: String },
    List { state: Option<JobState> },
    Get { id: i64 },
    Cancel { id: i64 },
    Nodes,
    Queue,
    Progress { id: i64, report: ProgressReport },
    Metrics,
}

/// The engine's answer.
#[derive(Debug)]
pub(crate) enum Response {
    Job(Box<JobView>),
    Detail(Box<JobDetail>),
    Jobs(JobList),
    Nodes(NodeList),
    Queue(QueueView),
    Ack(ProgressAck),
    Text(String),
}

struct Job {
    row: JobRow,
    spec: JobSpec,
    alloc: Option<Allocation>,
    submit_failures: u32,
}

/// The engine (owned by one thread).
pub struct Engine {
    store: Store,
    instance: String,
    backend: Box<dyn Backend>,
    clock: Arc<dyn Clock>,
    policy: Box<dyn Policy>,
    map: ClusterMap,
    capacity: Vec<Resources>,
    free: Vec<Resources>,
    jobs: Vec<Job>,
    specs: Vec<TrainingJob>,
    by_id: HashMap<i64, usize>,
    by_handle: HashMap<String, usize>,
    active: BTreeSet<usize>,
    active_per_tenant: HashMap<String, usize>,
    next_id: i64,
    tokens: HashMap<String, (String, bool)>,
    job_tokens: HashMap<String, usize>,
    to_stop: Vec<RunRow>,
    limits: Limits,
    callback_url: Option<String>,
    metrics: Metrics,
    trigger: Trigger,
    next_round: Option<SimTime>,
    last_accrual: SimTime,
    public_metrics: bool,
    active_buf: Vec<ActiveJob>,
    actions: Vec<Action>,
    last_decision_secs: f64,
    retry_at: Option<SimTime>,
    /// Changes the store refused (disk full), written first, in order, once it accepts writes.
    unsaved: WriteBatch,
    /// Why the store last refused a write, until a write succeeds again.
    store_error: Option<String>,
    /// Backend actions decided while the store refused writes, carried out once the
    /// decisions are durable.
    deferred: Vec<Deferred>,
}

/// A backend action waiting for its decision to be written.
enum Deferred {
    /// Scheduling decisions: runs to preempt, jobs to start (with their tokens).
    Act(Vec<RunRow>, Vec<(usize, String)>),
    /// The run of a cancelled job, to stop.
    Cancel(RunRow),
}

fn secs(us: u64) -> f64 {
    us as f64 / 1e6
}

/// Random bytes from the OS (`/dev/urandom`), or a hash of the time and an address when it
/// cannot be read (job tokens only guard progress reports).
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    use std::io::Read;
    let mut buf = [0u8; N];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !ok {
        use sha2::{Digest, Sha256};
        let seed = Sha256::digest(
            format!("{:?}{:p}{}", Instant::now(), &buf, std::process::id()).as_bytes(),
        );
        for (b, s) in buf.iter_mut().zip(seed.iter().cycle()) {
            *b = *s;
        }
    }
    buf
}

fn random_token() -> String {
    hex(&random_bytes::<24>())
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

impl Engine {
    /// Opens the store, loads the inventory, builds the policy and reconciles with the backend.
    pub fn open(
        config: &DaemonConfig,
        mut backend: Box<dyn Backend>,
        clock: Arc<dyn Clock>,
    ) -> Result<Engine, DaemonError> {
        let mut store = Store::open(&config.store, config.sync)?;
        store.set_tenants(&config.tenants)?;
        let tokens = store
            .tenants()?
            .into_iter()
            .map(|(name, hash, admin)| (hash, (name, admin)))
            .collect::<HashMap<_, _>>();
        let nodes = backend.inventory()?;
        let (gres_map, default_gpu) = match &config.backend {
            crate::config::BackendConfig::Slurm(s) => (s.gres_map.clone(), s.default_gpu.clone()),
            crate::config::BackendConfig::Local(_) => (BTreeMap::new(), None),
        };
        let map = ClusterMap::build(
            &nodes,
            &gres_map,
            default_gpu.as_deref(),
            &tessera_model::GpuCatalog::builtin(),
        )?;
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
        let round = config.round_seconds.map(SimDuration::from_secs_f64);
        let policy = tessera_mechanisms::build_policy(
            &config.policy,
            &PolicyOptions {
                round,
                ..PolicyOptions::default()
            },
        )?;
        let now = clock.now();
        let instance = store.instance()?;
        let mut engine = Engine {
            store,
            instance,
            backend,
            clock,
            next_round: policy.round_length().map(|r| now + r),
            policy,
            free: capacity.clone(),
            capacity,
            map,
            jobs: Vec::new(),
            specs: Vec::new(),
            by_id: HashMap::new(),
            by_handle: HashMap::new(),
            active: BTreeSet::new(),
            active_per_tenant: HashMap::new(),
            next_id: 1,
            tokens,
            job_tokens: HashMap::new(),
            to_stop: Vec::new(),
            limits: config.limits.clone(),
            callback_url: None,
            metrics: Metrics::default(),
            trigger: Trigger {
                arrival: true,
                ..Trigger::default()
            },
            last_accrual: now,
            public_metrics: config.public_metrics,
            active_buf: Vec::new(),
            actions: Vec::new(),
            last_decision_secs: 0.0,
            retry_at: None,
            unsaved: WriteBatch::default(),
            store_error: None,
            deferred: Vec::new(),
        };
        engine.reconcile()?;
        Ok(engine)
    }

    /// The cluster the policy sees.
    pub fn cluster_map(&self) -> &ClusterMap {
        &self.map
    }

    /// How many jobs the engine holds.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// The metrics collected so far.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Seconds the last [`schedule`](Self::schedule) call spent deciding (building the view,
    /// running the policy, validating its actions), before persisting and acting.
    pub fn last_decision_secs(&self) -> f64 {
        self.last_decision_secs
    }

    /// Submits specs as the tenant owning `token`, in one store transaction (what the API does
    /// with concurrent submissions); for embedding and benchmarks.
    pub fn submit_many(&mut self, token: &str, specs: &[String]) -> Vec<Result<JobView, ApiError>> {
        let items = specs
            .iter()
            .map(|s| (Some(token.to_string()), s.clone()))
            .collect();
        self.submit_batch(items)
            .into_iter()
            .map(|r| match r {
                Ok(Response::Job(j)) => Ok(*j),
                Ok(_) => Err(ApiError::internal("unexpected answer")),
                Err(e) => Err(e),
            })
            .collect()
    }

    /// Jobs per state.
    pub fn count_by_state(&self) -> BTreeMap<JobState, usize> {
        let mut m = BTreeMap::new();
        for j in &self.jobs {
            *m.entry(j.row.state).or_default() += 1;
        }
        m
    }

    // ---------------------------------------------------------------------------------------
    // Loading and reconciliation

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
        let duration = spec.hints.duration_seconds.unwrap_or(DEFAULT_DURATION_SECS);
        Ok(TrainingJob {
            id: tessera_model::JobId(idx as u32),
            name: spec.name.clone(),
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
        })
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
        if let Some(h) = &row.handle {
            self.by_handle.insert(h.clone(), idx);
        }
        if let Some(t) = &row.job_token_sha256 {
            self.job_tokens.insert(t.clone(), idx);
        }
        self.jobs.push(Job {
            row,
            spec,
            alloc: None,
            submit_failures: 0,
        });
        self.specs.push(tj);
        idx
    }

    fn reconcile(&mut self) -> Result<(), DaemonError> {
        let rows = self.store.load_jobs()?;
        let now = self.clock.now().as_micros();
        let mut batch = WriteBatch::default();
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
        // Jobs caught between "starting" and "running": adopt the run if it exists.
        for idx in self.active.clone() {
            let state = self.jobs[idx].row.state;
            if state == JobState::Starting {
                let (id, attempt) = (self.jobs[idx].row.id, self.jobs[idx].row.attempt);
                match self
                    .backend
                    .find(&Launch::run_name(&self.instance, id, attempt))?
                {
                    Some(h) => {
                        tracing::info!(job = id, handle = %h.0, "adopting a run started before the restart");
                        self.by_handle.insert(h.0.clone(), idx);
                        batch.runs.push(RunRow {
                            handle: h.0.clone(),
                            job_id: id,
                            attempt,
                            state: RunState::Live,
                        });
                        let job = &mut self.jobs[idx];
                        job.row.handle = Some(h.0);
                        self.transition(
                            idx,
                            JobState::Running,
                            now,
                            "adopted after daemon restart",
                            &mut batch,
                        );
                    }
                    None => {
                        let job = &mut self.jobs[idx];
                        job.row.placement.clear();
                        job.row.start_us = None;
                        self.transition(
                            idx,
                            JobState::Pending,
                            now,
                            "start interrupted by a daemon restart; requeued",
                            &mut batch,
                        );
                    }
                }
            }
        }
        // Reserve what running jobs hold.
        for idx in self.active.clone() {
            let job = &mut self.jobs[idx];
            if job.row.state == JobState::Running {
                job.alloc = self.map.allocation(&job.row.placement);
                match &job.alloc {
                    Some(a) => {
                        for s in &a.shares {
                            sub(&mut self.free[s.node.index()], &s.resources());
                        }
                    }
                    None => tracing::warn!(
                        job = job.row.id,
                        "running on nodes no longer in the inventory"
                    ),
                }
            }
        }
        // Runs that must be stopped (cancel or preemption decided before a crash), and live
        // runs no running job claims.
        for run in self.store.open_runs()? {
            let claimed = self.by_handle.get(&run.handle).is_some_and(|&i| {
                self.jobs[i].row.state == JobState::Running
                    && self.jobs[i].row.handle.as_deref() == Some(run.handle.as_str())
            });
            if run.state == RunState::Stop || (run.state == RunState::Live && !claimed) {
                let h = Handle(run.handle.clone());
                match self.backend.cancel(&h) {
                    Ok(()) => batch.runs.push(RunRow {
                        state: RunState::Gone,
                        ..run
                    }),
                    Err(e) => {
                        tracing::warn!(handle = %h.0, "cannot stop run: {e}");
                        self.to_stop.push(RunRow {
                            state: RunState::Stop,
                            ..run
                        });
                    }
                }
            }
        }
        self.store.commit(&batch)?;
        // Record what finished while the daemon was down.
        self.poll();
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Transitions

    fn transition(
        &mut self,
        idx: usize,
        to: JobState,
        now_us: u64,
        detail: &str,
        batch: &mut WriteBatch,
    ) {
        let job = &mut self.jobs[idx];
        let from = job.row.state;
        job.row.state = to;
        job.row.message = Some(detail.to_string());
        if to.is_terminal() {
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
        batch.transitions.push(TransitionRow {
            job_id: job.row.id,
            at_us: now_us,
            from: Some(from),
            to,
            detail: detail.to_string(),
        });
        batch.jobs.push(job.row.clone());
    }

    /// Returns a job's allocation to the free pool.
    fn release(&mut self, idx: usize) {
        if let Some(a) = self.jobs[idx].alloc.take() {
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
    }

    fn detach_handle(
        &mut self,
        idx: usize,
        state: RunState,
        batch: &mut WriteBatch,
    ) -> Option<RunRow> {
        let job = &mut self.jobs[idx];
        let h = job.row.handle.take()?;
        self.by_handle.remove(&h);
        let run = RunRow {
            handle: h,
            job_id: job.row.id,
            attempt: job.row.attempt,
            state,
        };
        batch.runs.push(run.clone());
        Some(run)
    }

    /// Stops runs in `runs` (already recorded as `stop`), recording those that are gone.
    fn stop_runs(&mut self, runs: Vec<RunRow>, preempt: bool, batch: &mut WriteBatch) {
        for run in runs {
            let h = Handle(run.handle.clone());
            let r = if preempt {
                self.backend.preempt(&h)
            } else {
                self.backend.cancel(&h)
            };
            match r {
                Ok(()) => batch.runs.push(RunRow {
                    state: RunState::Gone,
                    ..run
                }),
                Err(e) => {
                    self.metrics.backend_errors += 1;
                    tracing::warn!(handle = %h.0, "stopping run failed, will retry: {e}");
                    self.to_stop.push(run);
                }
            }
        }
    }

    /// Writes a batch, after anything still unsaved. When the store refuses (a full disk),
    /// the batch is kept, in order, to be written by [`flush`](Self::flush), and `false` is
    /// returned: the caller must not act on the backend (or acknowledge a client) until then.
    fn commit(&mut self, batch: &WriteBatch) -> bool {
        if !self.flush() {
            self.unsaved.append(batch.clone());
            return false;
        }
        match self.store.commit(batch) {
            Ok(()) => true,
            Err(e) => {
                self.store_refused(e);
                self.unsaved.append(batch.clone());
                false
            }
        }
    }

    /// Records a refused write. A store that is corrupt cannot be worked around: crash loudly
    /// so that a supervisor restarts the daemon, which then reconciles (or refuses to start).
    fn store_refused(&mut self, e: DaemonError) {
        if let DaemonError::Store(rusqlite::Error::SqliteFailure(f, _)) = &e {
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
            ) {
                tracing::error!("store is corrupt: {e}");
                std::process::abort();
            }
        }
        if self.store_error.is_none() {
            tracing::error!(
                "the store refuses writes; serving reads only until it accepts them: {e}"
            );
        }
        self.store_error = Some(e.to_string());
    }

    /// Writes what the store refused before and then carries out the backend actions that
    /// waited for it. True when nothing is left unwritten.
    fn flush(&mut self) -> bool {
        if !self.unsaved.is_empty() {
            if let Err(e) = self.store.commit(&self.unsaved) {
                self.store_refused(e);
                return false;
            }
            self.unsaved = WriteBatch::default();
        }
        if self.store_error.take().is_some() {
            tracing::info!("the store accepts writes again");
            self.trigger.completion = true;
        }
        for d in std::mem::take(&mut self.deferred) {
            match d {
                Deferred::Act(to_preempt, to_start) => self.act(to_preempt, to_start),
                Deferred::Cancel(run) => {
                    let mut batch = WriteBatch::default();
                    self.stop_runs(vec![run], false, &mut batch);
                    self.commit(&batch);
                }
            }
        }
        self.unsaved.is_empty()
    }

    /// The answer to a write while the store refuses writes.
    fn store_unavailable(&self) -> ApiError {
        ApiError::new(
            503,
            "store_unavailable",
            format!(
                "the store cannot be written ({}); reads are served and running jobs tracked; \
                 retry later",
                self.store_error.as_deref().unwrap_or("unknown error")
            ),
        )
    }

    // ---------------------------------------------------------------------------------------
    // Backend polling

    /// Polls the backend for the status of every running job and records changes.
    pub fn poll(&mut self) {
        // Also how writes resume after a full disk: at every poll.
        self.flush();
        let mut watched: Vec<Handle> = Vec::new();
        for &idx in &self.active {
            if let Some(h) = &self.jobs[idx].row.handle {
                watched.push(Handle(h.clone()));
            }
        }
        if !self.to_stop.is_empty() {
            let pending = std::mem::take(&mut self.to_stop);
            let mut batch = WriteBatch::default();
            self.stop_runs(pending, false, &mut batch);
            self.commit(&batch);
        }
        if watched.is_empty() {
            return;
        }
        let statuses = match self.backend.poll(&watched) {
            Ok(s) => s,
            Err(e) => {
                self.metrics.backend_errors += 1;
                tracing::warn!("backend poll failed: {e}");
                return;
            }
        };
        let now = self.clock.now().as_micros();
        let mut batch = WriteBatch::default();
        for (h, status) in statuses {
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
                    self.finish(
                        idx,
                        JobState::Completed,
                        Some(0),
                        "completed",
                        now,
                        &mut batch,
                    );
                }
                RunStatus::Failed { reason, exit_code } => {
                    self.finish(
                        idx,
                        JobState::Failed,
                        exit_code,
                        &format!("failed: {reason}"),
                        now,
                        &mut batch,
                    );
                }
                RunStatus::Cancelled => {
                    self.finish(
                        idx,
                        JobState::Failed,
                        None,
                        "cancelled outside tessera",
                        now,
                        &mut batch,
                    );
                }
                RunStatus::Unknown => {
                    self.finish(
                        idx,
                        JobState::Failed,
                        None,
                        "the backend no longer knows the run",
                        now,
                        &mut batch,
                    );
                }
                RunStatus::Preempted => {
                    *self.metrics.preemptions.entry("backend").or_default() += 1;
                    self.detach_handle(idx, RunState::Gone, &mut batch);
                    self.release(idx);
                    let job = &mut self.jobs[idx];
                    job.row.preemptions += 1;
                    job.row.backend_state = None;
                    self.transition(
                        idx,
                        JobState::Pending,
                        now,
                        "preempted by the backend; requeued",
                        &mut batch,
                    );
                    self.trigger.completion = true;
                }
            }
        }
        self.commit(&batch);
    }

    fn finish(
        &mut self,
        idx: usize,
        to: JobState,
        exit: Option<i32>,
        detail: &str,
        now: u64,
        batch: &mut WriteBatch,
    ) {
        self.detach_handle(idx, RunState::Gone, batch);
        self.release(idx);
        let job = &mut self.jobs[idx];
        job.row.exit_code = exit;
        job.row.backend_state = None;
        self.transition(idx, to, now, detail, batch);
        self.trigger.completion = true;
    }

    // ---------------------------------------------------------------------------------------
    // Scheduling

    /// True when a scheduling call is due (an event happened or a round boundary passed).
    pub fn wants_schedule(&self) -> bool {
        let t = self.trigger;
        let now = self.clock.now();
        t.arrival
            || t.completion
            || t.round
            || self.next_round.is_some_and(|r| now >= r)
            || self.retry_at.is_some_and(|r| now >= r)
    }

    /// Time until the next round boundary or submission retry, if any.
    pub fn until_next_wakeup(&self) -> Option<std::time::Duration> {
        let next = match (self.next_round, self.retry_at) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(std::time::Duration::from_micros(
            next.saturating_since(self.clock.now()).as_micros(),
        ))
    }

    /// Re-reads the inventory and applies node health changes (a node going down or draining
    /// stops receiving jobs; one coming back is schedulable again). Nodes added or removed
    /// since start-up need a restart and are only logged.
    pub fn refresh_inventory(&mut self) {
        let nodes = match self.backend.inventory() {
            Ok(n) => n,
            Err(e) => {
                self.metrics.backend_errors += 1;
                tracing::warn!("inventory refresh failed: {e}");
                return;
            }
        };
        let mut changed = false;
        for (i, l) in self.map.logical.iter_mut().enumerate() {
            let health = match nodes.iter().find(|n| n.name == l.node) {
                Some(n) => n.health,
                None => NodeHealth::Down,
            };
            if health == l.health {
                continue;
            }
            tracing::info!(node = %l.node, ?health, "node health changed");
            l.health = health;
            changed = true;
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
        if nodes
            .iter()
            .any(|n| !self.map.logical.iter().any(|l| l.node == n.name))
        {
            tracing::warn!(
                "the backend reports nodes added since start-up; restart the daemon to use them"
            );
        }
        if changed {
            self.trigger.completion = true;
        }
    }

    fn accrue(&mut self, now: SimTime) {
        let dt = now.saturating_since(self.last_accrual).as_secs_f64();
        self.last_accrual = now;
        if dt <= 0.0 {
            return;
        }
        for &idx in &self.active {
            let job = &mut self.jobs[idx];
            if let Some(a) = &job.alloc {
                job.row.attained_gpu_secs += a.gpus() as f64 * dt;
            }
        }
    }

    fn build_active(&mut self) {
        self.active_buf.clear();
        for &idx in &self.active {
            let job = &self.jobs[idx];
            let spec = &self.specs[idx];
            let running = job.row.state != JobState::Pending;
            let done = job.row.progress_iters as f64;
            let throughput = job
                .row
                .iters_per_sec
                .filter(|v| *v > 0.0)
                .unwrap_or_else(|| spec.reference_throughput());
            self.active_buf.push(ActiveJob {
                state: if running {
                    tessera_sched::JobState::Running
                } else {
                    tessera_sched::JobState::Queued
                },
                allocation: if running { job.alloc.clone() } else { None },
                attained_gpu_secs: job.row.attained_gpu_secs,
                remaining_iters: (spec.iterations as f64 - done).max(0.0),
                throughput_estimate: throughput,
                first_start: job.row.start_us.map(SimTime::from_micros),
                preemptions: job.row.preemptions,
                // The daemon does not profile jobs (yet): policies treat them as insensitive.
                ..ActiveJob::arrived(spec)
            });
        }
    }

    /// Whether `alloc` is a valid, fitting allocation for job `idx` on `free`; reserves it.
    fn reserve(
        &self,
        idx: usize,
        alloc: &Allocation,
        free: &mut [Resources],
    ) -> Result<(), String> {
        let spec = &self.specs[idx];
        if alloc.gpus() != spec.gpus {
            return Err(format!(
                "allocation has {} GPUs, job needs {}",
                alloc.gpus(),
                spec.gpus
            ));
        }
        if !alloc.nodes_distinct() || alloc.shares.is_empty() {
            return Err("allocation repeats a node or is empty".into());
        }
        for s in &alloc.shares {
            let Some(node) = self.map.cluster.nodes.get(s.node.index()) else {
                return Err(format!("unknown node {}", s.node.0));
            };
            if self
                .map
                .logical
                .get(s.node.index())
                .is_none_or(|l| l.health != NodeHealth::Up)
            {
                return Err(format!("node {} is not up", s.node.0));
            }
            if !spec.gpu_types.is_empty() && !spec.gpu_types.contains(&node.gpu) {
                return Err(format!("node {} has the wrong GPU type", s.node.0));
            }
            if !free[s.node.index()].fits(&s.resources()) {
                return Err(format!("node {} lacks free resources", s.node.0));
            }
        }
        for s in &alloc.shares {
            sub(&mut free[s.node.index()], &s.resources());
        }
        Ok(())
    }

    /// One scheduling point: view, policy, validation, persistence, then backend actions.
    pub fn schedule(&mut self) {
        // Decisions must be durable before they are acted on: none while the store refuses
        // writes (the triggers stay set, so scheduling resumes with the store).
        if !self.flush() {
            return;
        }
        let t0 = Instant::now();
        let now = self.clock.now();
        let mut trigger = std::mem::take(&mut self.trigger);
        if self.retry_at.is_some_and(|r| now >= r) {
            self.retry_at = None;
            trigger.completion = true;
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
        self.accrue(now);
        self.build_active();
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        {
            // Device-level state for the view; the daemon places whole GPUs only so far.
            let mut devices = tessera_sched::ClusterState::new(&self.map.cluster);
            for a in &self.active_buf {
                if let Some(alloc) = &a.allocation {
                    devices.take(&self.map.cluster, alloc);
                }
            }
            let view = ClusterView {
                now,
                trigger,
                cluster: &self.map.cluster,
                free: &self.free,
                state: &devices,
                jobs: &self.specs,
                active: &self.active_buf,
            };
            self.policy.schedule(&view, &mut actions);
        }
        // Validate in order against a scratch copy of the free pool.
        enum Plan {
            Start(usize, Allocation),
            Preempt(usize),
            Resize(usize, Allocation),
        }
        let mut free = self.free.clone();
        let mut plans = Vec::new();
        let mut touched = BTreeSet::new();
        for action in actions.drain(..) {
            let (job, what) = match &action {
                Action::Start { job, .. } => (*job, "start"),
                Action::Preempt { job } => (*job, "preempt"),
                Action::Resize { job, .. } => (*job, "resize"),
                // Not carried out by the daemon yet: refused, never half-applied.
                other @ (Action::Retune { .. } | Action::Reconfigure { .. }) => {
                    tracing::warn!(
                        action = other.kind(),
                        "policy asked for an action the daemon does not carry out; ignored"
                    );
                    continue;
                }
            };
            let idx = job.index();
            let state = self.jobs.get(idx).map(|j| j.row.state);
            let result = if !touched.insert(idx) {
                Err("job already has an action in this batch".to_string())
            } else {
                match (action, state) {
                    (Action::Start { allocation, .. }, Some(JobState::Pending)) => self
                        .reserve(idx, &allocation, &mut free)
                        .map(|()| Plan::Start(idx, allocation)),
                    (Action::Preempt { .. }, Some(JobState::Running)) => {
                        if let Some(a) = &self.jobs[idx].alloc {
                            for s in &a.shares {
                                let i = s.node.index();
                                add(&mut free[i], &s.resources(), &self.capacity[i]);
                            }
                        }
                        Ok(Plan::Preempt(idx))
                    }
                    (Action::Resize { allocation, .. }, Some(JobState::Running)) => {
                        let mut scratch = free.clone();
                        if let Some(a) = &self.jobs[idx].alloc {
                            for s in &a.shares {
                                let i = s.node.index();
                                add(&mut scratch[i], &s.resources(), &self.capacity[i]);
                            }
                        }
                        self.reserve(idx, &allocation, &mut scratch).map(|()| {
                            free = scratch;
                            Plan::Resize(idx, allocation)
                        })
                    }
                    (_, s) => Err(format!("cannot {what} a job in state {s:?}")),
                }
            };
            match result {
                Ok(p) => plans.push(p),
                Err(e) => {
                    self.metrics.rejected_actions += 1;
                    tracing::warn!(
                        policy = self.policy.name(),
                        job = idx,
                        "refused {what}: {e}"
                    );
                }
            }
        }
        self.actions = actions;
        self.last_decision_secs = t0.elapsed().as_secs_f64();
        self.metrics
            .scheduling_latency
            .observe(self.last_decision_secs);
        if plans.is_empty() {
            return;
        }

        // Phase 1: persist every decision before acting.
        let now_us = now.as_micros();
        let mut batch = WriteBatch::default();
        let mut to_preempt: Vec<RunRow> = Vec::new();
        let mut to_start: Vec<(usize, String)> = Vec::new();
        for plan in plans {
            match plan {
                Plan::Preempt(idx) => {
                    *self.metrics.preemptions.entry("policy").or_default() += 1;
                    if let Some(h) = self.detach_handle(idx, RunState::Stop, &mut batch) {
                        to_preempt.push(h);
                    }
                    self.release(idx);
                    let job = &mut self.jobs[idx];
                    job.row.preemptions += 1;
                    job.row.backend_state = None;
                    self.transition(
                        idx,
                        JobState::Pending,
                        now_us,
                        "preempted by the policy; requeued",
                        &mut batch,
                    );
                }
                Plan::Start(idx, alloc) | Plan::Resize(idx, alloc) => {
                    let resize = self.jobs[idx].row.state == JobState::Running;
                    if resize {
                        *self.metrics.preemptions.entry("resize").or_default() += 1;
                        if let Some(h) = self.detach_handle(idx, RunState::Stop, &mut batch) {
                            to_preempt.push(h);
                        }
                        self.release(idx);
                    }
                    let placement = self.map.placement(&alloc);
                    for s in &alloc.shares {
                        sub(&mut self.free[s.node.index()], &s.resources());
                    }
                    let token = random_token();
                    let token_hash = hash_token(&token);
                    let job = &mut self.jobs[idx];
                    job.alloc = Some(alloc);
                    job.row.placement = placement;
                    job.row.attempt += 1;
                    job.row.start_us = Some(now_us);
                    job.row.backend_state = None;
                    if let Some(old) = job.row.job_token_sha256.replace(token_hash.clone()) {
                        self.job_tokens.remove(&old);
                    }
                    self.job_tokens.insert(token_hash, idx);
                    let detail = if resize {
                        "resized by the policy"
                    } else {
                        "started by the policy"
                    };
                    self.transition(idx, JobState::Starting, now_us, detail, &mut batch);
                    to_start.push((idx, token));
                }
            }
        }
        if !self.commit(&batch) {
            self.deferred.push(Deferred::Act(to_preempt, to_start));
            return;
        }
        self.act(to_preempt, to_start);
    }

    /// Phase 2 of scheduling: act on durable decisions, then record the outcome.
    fn act(&mut self, to_preempt: Vec<RunRow>, to_start: Vec<(usize, String)>) {
        let now = self.clock.now();
        let now_us = now.as_micros();
        let mut batch = WriteBatch::default();
        self.stop_runs(to_preempt, true, &mut batch);
        for (idx, token) in to_start {
            let launch = self.launch(idx, &token);
            let id = self.jobs[idx].row.id;
            match self.backend.submit(&launch) {
                Ok(h) => {
                    self.by_handle.insert(h.0.clone(), idx);
                    batch.runs.push(RunRow {
                        handle: h.0.clone(),
                        job_id: id,
                        attempt: launch.attempt,
                        state: RunState::Live,
                    });
                    let job = &mut self.jobs[idx];
                    job.row.handle = Some(h.0);
                    job.submit_failures = 0;
                    self.transition(
                        idx,
                        JobState::Running,
                        now_us,
                        "submitted to the backend",
                        &mut batch,
                    );
                }
                Err(e) => {
                    self.metrics.backend_errors += 1;
                    tracing::warn!(job = id, "backend submit failed: {e}");
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
                    self.transition(idx, to, now_us, &detail, &mut batch);
                }
            }
        }
        self.commit(&batch);
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
        Launch {
            name: Launch::run_name(&self.instance, job.row.id, job.row.attempt),
            job_id: job.row.id,
            attempt: job.row.attempt,
            tenant: job.row.tenant.clone(),
            payload,
            env,
            placement: job.row.placement.clone(),
        }
    }
}

// -------------------------------------------------------------------------------------------
// API requests

impl Engine {
    /// Sets the URL jobs use to reach the API (`TESSERA_URL` in their environment).
    pub fn set_callback_url(&mut self, url: String) {
        self.callback_url = Some(url);
    }

    fn authenticate(&self, token: Option<&str>) -> Result<Caller, ApiError> {
        let token = token
            .filter(|t| !t.is_empty() && t.len() <= 512)
            .ok_or_else(ApiError::unauthorized)?;
        let hash = hash_token(token);
        if let Some((name, admin)) = self.tokens.get(&hash) {
            return Ok(Caller::Tenant {
                name: name.clone(),
                admin: *admin,
            });
        }
        if let Some(&idx) = self.job_tokens.get(&hash) {
            return Ok(Caller::Job {
                id: self.jobs[idx].row.id,
            });
        }
        Err(ApiError::unauthorized())
    }

    fn can_see(caller: &Caller, row: &JobRow) -> bool {
        match caller {
            Caller::Tenant { admin: true, .. } => true,
            Caller::Tenant { name, .. } => &row.tenant == name,
            Caller::Job { id } => *id == row.id,
        }
    }

    fn lookup(&self, caller: &Caller, id: i64) -> Result<usize, ApiError> {
        // Another tenant's job answers exactly like a missing one: existence does not leak.
        match self.by_id.get(&id) {
            Some(&idx) if Self::can_see(caller, &self.jobs[idx].row) => Ok(idx),
            _ => Err(ApiError::not_found(format!("no job {id}"))),
        }
    }

    /// Pending jobs in queue order: priority (high first), then submission, then id.
    fn pending_order(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .active
            .iter()
            .copied()
            .filter(|&i| self.jobs[i].row.state == JobState::Pending)
            .collect();
        v.sort_by_key(|&i| {
            let r = &self.jobs[i].row;
            (-r.priority, r.submit_us, r.id)
        });
        v
    }

    fn pending_reason(&self, idx: usize, exact: bool) -> Option<String> {
        let job = &self.jobs[idx];
        match job.row.state {
            JobState::Pending => {
                if let Some(m) = job
                    .row
                    .message
                    .as_deref()
                    .filter(|m| m.starts_with("backend submit failed"))
                {
                    return Some(m.to_string());
                }
                let spec = &self.specs[idx];
                let fits = if exact {
                    Ledger::new(&self.map.cluster, &self.free)
                        .place(spec)
                        .is_some()
                } else {
                    let free: u64 = self
                        .map
                        .cluster
                        .nodes
                        .iter()
                        .filter(|n| spec.gpu_types.is_empty() || spec.gpu_types.contains(&n.gpu))
                        .map(|n| self.free[n.id.index()].gpus as u64)
                        .sum();
                    free >= spec.gpus as u64
                };
                Some(if fits { "Priority" } else { "Resources" }.to_string())
            }
            JobState::Starting => Some("Starting".into()),
            JobState::Running => job
                .row
                .backend_state
                .as_deref()
                .filter(|s| s.starts_with("PENDING"))
                .map(|s| format!("Backend: {s}")),
            _ => None,
        }
    }

    fn view(&self, idx: usize, position: Option<u32>, exact: bool) -> JobView {
        let job = &self.jobs[idx];
        let r = &job.row;
        JobView {
            id: r.id,
            name: r.name.clone(),
            tenant: r.tenant.clone(),
            queue: r.queue.clone(),
            state: r.state,
            gpus: job.spec.gpus,
            gpu_type: job.spec.gpu_type.clone(),
            priority: r.priority,
            submitted_at: secs(r.submit_us),
            started_at: r.start_us.map(secs),
            finished_at: r.end_us.map(secs),
            attempt: r.attempt,
            preemptions: r.preemptions,
            allocation: r.placement.clone(),
            pending_reason: self.pending_reason(idx, exact),
            queue_position: position,
            backend_id: r.handle.clone(),
            backend_state: r.backend_state.clone(),
            exit_code: r.exit_code,
            message: r.message.clone(),
            progress: (r.progress_us.is_some()).then(|| Progress {
                iterations: r.progress_iters,
                samples_per_second: r.samples_per_sec,
                iterations_per_second: r.iters_per_sec,
                updated_at: r.progress_us.map(secs),
            }),
        }
    }

    fn positions(&self) -> HashMap<usize, u32> {
        self.pending_order()
            .into_iter()
            .enumerate()
            .map(|(p, i)| (i, p as u32 + 1))
            .collect()
    }

    /// Accepts a batch of submissions, writing all accepted jobs in one transaction before
    /// answering (group commit).
    pub(crate) fn submit_batch(
        &mut self,
        items: Vec<(Option<String>, String)>,
    ) -> Vec<Result<Response, ApiError>> {
        let now_us = self.clock.now().as_micros();
        if !self.flush() {
            return items
                .iter()
                .map(|_| Err(self.store_unavailable()))
                .collect();
        }
        let (first_new, next_id, submissions) =
            (self.jobs.len(), self.next_id, self.metrics.submissions);
        let mut batch = WriteBatch::default();
        let mut results = Vec::with_capacity(items.len());
        for (token, body) in items {
            let r = self.submit_one(token.as_deref(), &body, now_us, &mut batch);
            results.push(r);
        }
        if !batch.is_empty() {
            if let Err(e) = self.store.commit(&batch) {
                // Not acknowledged, so not kept: the client is told to retry.
                self.store_refused(e);
                self.forget_jobs_from(first_new);
                (self.next_id, self.metrics.submissions) = (next_id, submissions);
                let refused = self.store_unavailable();
                return results
                    .into_iter()
                    .map(|r| r.and(Err(refused.clone())))
                    .collect();
            }
            self.trigger.arrival = true;
        }
        let positions = if results.iter().any(|r| r.is_ok()) {
            self.positions()
        } else {
            HashMap::new()
        };
        results
            .into_iter()
            .map(|r| {
                r.map(|idx| {
                    Response::Job(Box::new(self.view(
                        idx,
                        positions.get(&idx).copied(),
                        false,
                    )))
                })
            })
            .collect()
    }

    /// Drops jobs `first..` again (submissions the store refused to record).
    fn forget_jobs_from(&mut self, first: usize) {
        while self.jobs.len() > first {
            let idx = self.jobs.len() - 1;
            let Some(job) = self.jobs.pop() else { break };
            self.specs.pop();
            self.by_id.remove(&job.row.id);
            if self.active.remove(&idx) {
                if let Some(n) = self.active_per_tenant.get_mut(&job.row.tenant) {
                    *n = n.saturating_sub(1);
                }
            }
        }
    }

    fn submit_one(
        &mut self,
        token: Option<&str>,
        body: &str,
        now_us: u64,
        batch: &mut WriteBatch,
    ) -> Result<usize, ApiError> {
        let caller = self.authenticate(token)?;
        let Caller::Tenant { name, admin } = caller else {
            return Err(ApiError::forbidden("a job token cannot submit jobs"));
        };
        let mut spec = JobSpec::parse(body)?;
        let tenant = match spec.tenant.take() {
            Some(t) if t != name && !admin => {
                return Err(ApiError::forbidden(format!(
                    "cannot submit as tenant {t:?}"
                )));
            }
            Some(t) => t,
            None => name,
        };
        spec.tenant = Some(tenant.clone());
        if spec.gpus > self.limits.max_gpus_per_job {
            return Err(ApiError::bad_request(format!(
                "gpus: more than the limit of {}",
                self.limits.max_gpus_per_job
            )));
        }
        if self.active.len() >= self.limits.max_active_jobs {
            return Err(ApiError::too_many(format!(
                "the daemon holds its limit of {} active jobs",
                self.limits.max_active_jobs
            )));
        }
        if self.active_per_tenant.get(&tenant).copied().unwrap_or(0)
            >= self.limits.max_active_jobs_per_tenant
        {
            return Err(ApiError::too_many(format!(
                "tenant {tenant} holds its limit of {} active jobs",
                self.limits.max_active_jobs_per_tenant
            )));
        }
        if self.backend.whole_cpus() {
            spec.cpu = spec.cpu.map(|c| MilliCpu(c.0.div_ceil(1000) * 1000));
        }
        spec.memory = spec.memory.map(|m| Bytes(m.0.div_ceil(1 << 20) << 20));
        let idx = self.jobs.len();
        let tj = self.training_job(idx, &spec, now_us)?;
        let full: Vec<Resources> = self
            .map
            .cluster
            .nodes
            .iter()
            .map(|n| self.map.cluster.capacity(n.id))
            .collect();
        if Ledger::new(&self.map.cluster, &full).place(&tj).is_none() {
            return Err(ApiError::new(
                400,
                "unsatisfiable",
                format!(
                    "no placement on this cluster can hold {} GPU(s){}{}{}",
                    spec.gpus,
                    spec.gpu_type
                        .as_deref()
                        .map(|t| format!(" of type {t}"))
                        .unwrap_or_default(),
                    spec.cpu.map(|c| format!(", cpu {c}")).unwrap_or_default(),
                    spec.memory
                        .map(|m| format!(", memory {m}"))
                        .unwrap_or_default(),
                ),
            ));
        }
        let spec_json =
            serde_json::to_string(&spec).map_err(|e| ApiError::internal(e.to_string()))?;
        let id = self.next_id;
        let row = JobRow {
            id,
            tenant: tenant.clone(),
            queue: spec.queue.clone().unwrap_or_else(|| tenant.clone()),
            name: spec.name.clone(),
            spec_json,
            state: JobState::Pending,
            priority: spec.priority,
            submit_us: now_us,
            start_us: None,
            end_us: None,
            attempt: 0,
            placement: Vec::new(),
            handle: None,
            exit_code: None,
            message: Some("submitted".into()),
            progress_iters: 0,
            samples_per_sec: None,
            iters_per_sec: None,
            progress_us: None,
            attained_gpu_secs: 0.0,
            preemptions: 0,
            job_token_sha256: None,
            backend_state: None,
        };
        batch.jobs.push(row.clone());
        batch.transitions.push(TransitionRow {
            job_id: id,
            at_us: now_us,
            from: None,
            to: JobState::Pending,
            detail: "submitted".into(),
        });
        self.metrics.submissions += 1;
        Ok(self.push_job(row, spec, tj))
    }

    /// Answers one non-submit request.
    pub(crate) fn handle(
        &mut self,
        token: Option<&str>,
        req: Request,
    ) -> Result<Response, ApiError> {
        if let Request::Metrics = req {
            if !self.public_metrics {
                self.authenticate(token)?;
            }
            return Ok(Response::Text(self.render_metrics()));
        }
        if let Request::Submit { body } = req {
            let mut r = self.submit_batch(vec![(token.map(String::from), body)]);
            return r
                .pop()
                .unwrap_or_else(|| Err(ApiError::internal("no result")));
        }
        let caller = self.authenticate(token)?;
        match req {
            Request::List { state } => {
                let positions = self.positions();
                let jobs = (0..self.jobs.len())
                    .filter(|&i| Self::can_see(&caller, &self.jobs[i].row))
                    .filter(|&i| state.is_none_or(|s| self.jobs[i].row.state == s))
                    .map(|i| self.view(i, positions.get(&i).copied(), false))
                    .collect();
                Ok(Response::Jobs(JobList { jobs }))
            }
            Request::Get { id } => {
                let idx = self.lookup(&caller, id)?;
                let position = self.positions().get(&idx).copied();
                let transitions = self
                    .store
                    .transitions(id)
                    .map_err(|e| ApiError::internal(e.to_string()))?
                    .into_iter()
                    .map(|t| TransitionView {
                        at: secs(t.at_us),
                        from: t.from,
                        to: t.to,
                        detail: t.detail,
                    })
                    .collect();
                Ok(Response::Detail(Box::new(JobDetail {
                    job: self.view(idx, position, true),
                    spec: self.jobs[idx].spec.clone(),
                    transitions,
                })))
            }
            Request::Cancel { id } => {
                if matches!(caller, Caller::Job { .. }) {
                    return Err(ApiError::forbidden("a job token cannot cancel jobs"));
                }
                let idx = self.lookup(&caller, id)?;
                if !self.flush() {
                    return Err(self.store_unavailable());
                }
                self.cancel(idx)?;
                Ok(Response::Job(Box::new(self.view(idx, None, false))))
            }
            Request::Nodes => Ok(Response::Nodes(self.nodes())),
            Request::Queue => Ok(Response::Queue(self.queue(&caller))),
            Request::Progress { id, report } => {
                // Only the job itself reports progress: a tenant token (or another job's)
                // could otherwise feed the policy made-up throughput.
                if !matches!(caller, Caller::Job { id: own } if own == id) {
                    return Err(ApiError::forbidden(
                        "progress is accepted only with the job's own token (TESSERA_TOKEN)",
                    ));
                }
                let idx = self.lookup(&caller, id)?;
                if !self.flush() {
                    return Err(self.store_unavailable());
                }
                self.progress(idx, report)
            }
            Request::Metrics | Request::Submit { .. } => {
                Err(ApiError::internal("unreachable request"))
            }
        }
    }

    fn cancel(&mut self, idx: usize) -> Result<(), ApiError> {
        let state = self.jobs[idx].row.state;
        if state.is_terminal() {
            return Err(ApiError::conflict(format!(
                "job {} is already {}",
                self.jobs[idx].row.id,
                state.as_str()
            )));
        }
        let now = self.clock.now().as_micros();
        let mut batch = WriteBatch::default();
        let run = self.detach_handle(idx, RunState::Stop, &mut batch);
        self.release(idx);
        self.jobs[idx].row.backend_state = None;
        self.transition(
            idx,
            JobState::Cancelled,
            now,
            "cancelled by a client",
            &mut batch,
        );
        self.trigger.completion = true;
        if !self.commit(&batch) {
            // Applied in memory and written once the store accepts writes (then the run is
            // stopped); not acknowledged until then.
            if let Some(run) = run {
                self.deferred.push(Deferred::Cancel(run));
            }
            return Err(self.store_unavailable());
        }
        if let Some(run) = run {
            let mut batch = WriteBatch::default();
            self.stop_runs(vec![run], false, &mut batch);
            self.commit(&batch);
        }
        Ok(())
    }

    fn progress(&mut self, idx: usize, report: ProgressReport) -> Result<Response, ApiError> {
        let valid = |v: Option<f64>| v.is_none_or(|x| (0.0..1e12).contains(&x));
        if !valid(report.samples_per_second) || !valid(report.iterations_per_second) {
            return Err(ApiError::bad_request(
                "rates must be finite and non-negative",
            ));
        }
        let now = self.clock.now().as_micros();
        let job = &mut self.jobs[idx];
        if job.row.state.is_terminal() {
            return Err(ApiError::conflict(format!(
                "job {} is already {}",
                job.row.id,
                job.row.state.as_str()
            )));
        }
        job.row.progress_iters = job.row.progress_iters.max(report.iterations);
        job.row.samples_per_sec = report.samples_per_second.or(job.row.samples_per_sec);
        job.row.iters_per_sec = report.iterations_per_second.or(job.row.iters_per_sec);
        job.row.progress_us = Some(now);
        let ack = ProgressAck {
            state: job.row.state,
            cpu_workers: job
                .row
                .placement
                .first()
                .map(|s| (s.cpu.0 / 1000).max(1) as u32)
                .unwrap_or(1),
            gpus: job.row.placement.iter().map(|s| s.gpus).sum(),
            memory_bytes: job.row.placement.iter().map(|s| s.memory.0).sum(),
        };
        let batch = WriteBatch {
            jobs: vec![job.row.clone()],
            ..WriteBatch::default()
        };
        if !self.commit(&batch) {
            return Err(self.store_unavailable());
        }
        Ok(Response::Ack(ack))
    }

    fn nodes(&self) -> NodeList {
        let c = &self.map.cluster;
        let nodes = c
            .nodes
            .iter()
            .zip(&self.map.logical)
            .map(|(n, l)| {
                let cap = self.capacity[n.id.index()];
                let free = self.free[n.id.index()];
                NodeView {
                    name: l.node.clone(),
                    gres_type: l.gres_type.clone(),
                    gpu_model: c.catalog.get(n.gpu).name.clone(),
                    health: l.health,
                    gpus: n.gpus,
                    gpus_allocated: cap.gpus.saturating_sub(free.gpus),
                    cpu: n.cpu,
                    cpu_allocated: MilliCpu(cap.cpu.0.saturating_sub(free.cpu.0)),
                    memory: n.memory,
                    memory_allocated: Bytes(cap.memory.0.saturating_sub(free.memory.0)),
                }
            })
            .collect();
        NodeList { nodes }
    }

    fn queue(&self, caller: &Caller) -> QueueView {
        let mut queues: BTreeMap<String, QueueSummary> = BTreeMap::new();
        for &idx in &self.active {
            let job = &self.jobs[idx];
            if !Self::can_see(caller, &job.row) {
                continue;
            }
            let q = queues
                .entry(job.row.queue.clone())
                .or_insert_with(|| QueueSummary {
                    name: job.row.queue.clone(),
                    pending: 0,
                    running: 0,
                    pending_gpus: 0,
                    running_gpus: 0,
                });
            if job.row.state == JobState::Pending {
                q.pending += 1;
                q.pending_gpus += job.spec.gpus as u64;
            } else {
                q.running += 1;
                q.running_gpus += job.spec.gpus as u64;
            }
        }
        let pending = self
            .pending_order()
            .into_iter()
            .enumerate()
            .filter(|(_, i)| Self::can_see(caller, &self.jobs[*i].row))
            .map(|(p, i)| self.view(i, Some(p as u32 + 1), false))
            .collect();
        QueueView {
            policy: self.policy.name().to_string(),
            queues: queues.into_values().collect(),
            pending,
        }
    }

    fn render_metrics(&self) -> String {
        let mut counts: BTreeMap<JobState, u64> = BTreeMap::new();
        for j in &self.jobs {
            *counts.entry(j.row.state).or_default() += 1;
        }
        let mut pending_per_queue: BTreeMap<String, u64> = BTreeMap::new();
        for &idx in &self.active {
            let r = &self.jobs[idx].row;
            let e = pending_per_queue.entry(r.queue.clone()).or_default();
            if r.state == JobState::Pending {
                *e += 1;
            }
        }
        let (mut cap, mut free) = ((0u64, 0u64, 0u64), (0u64, 0u64, 0u64));
        for (c, f) in self.capacity.iter().zip(&self.free) {
            cap = (cap.0 + c.gpus as u64, cap.1 + c.cpu.0, cap.2 + c.memory.0);
            free = (
                free.0 + f.gpus as u64,
                free.1 + f.cpu.0,
                free.2 + f.memory.0,
            );
        }
        let gauges = Gauges {
            jobs: JobState::ALL
                .iter()
                .map(|s| (s.as_str(), counts.get(s).copied().unwrap_or(0)))
                .collect(),
            pending_per_queue,
            resources: vec![
                ("gpus", cap.0.saturating_sub(free.0) as f64, cap.0 as f64),
                (
                    "cpu_cores",
                    cap.1.saturating_sub(free.1) as f64 / 1000.0,
                    cap.1 as f64 / 1000.0,
                ),
                (
                    "memory_bytes",
                    cap.2.saturating_sub(free.2) as f64,
                    cap.2 as f64,
                ),
            ],
        };
        self.metrics.render(&gauges)
    }
}
