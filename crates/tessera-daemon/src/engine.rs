//! The driver of the scheduling [`Core`]: it owns the store, the backend and the clock.
//!
//! Every call feeds the core an input stamped with the clock's time, then carries out the
//! commands the core yields, in order: [`Command::Persist`] commits a batch to the store (the
//! core queues it ahead of any launch or stop that depends on it), [`Command::Launch`] and
//! [`Command::Stop`] call the backend and hand the outcome back to the core, and so on. The
//! scheduling logic itself is in [`crate::core`]; nothing here decides anything.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tessera_model::{NodeId, SimDuration, SimTime};
use tessera_sched::PolicyOptions;

use crate::backend::{Backend, Handle, InventoryNode, Launch, Reconfigure, Retune, RunStatus};
use crate::clock::Clock;
use crate::config::{hex, random_bytes, DaemonConfig};
use crate::core::{Command, Core, CoreSettings};
use crate::error::{ApiError, BackendError, DaemonError};
use crate::inventory::ClusterMap;
use crate::metrics::Metrics;
use crate::store::{RunRow, Store, WriteBatch};
use crate::types::{JobState, JobView, TransitionView};

pub(crate) use crate::core::{Request, Response};

/// How long submission-only scheduling points are coalesced in a running daemon (see
/// [`CoreSettings::arrival_coalescing`]): short enough that a job on an idle cluster starts
/// at once to the eye, long enough that a burst over a deep queue is not throttled by it.
const ARRIVAL_COALESCING: Duration = Duration::from_millis(100);
/// While backend calls are in flight, the loop looks for their results this often.
const RESULT_POLL: Duration = Duration::from_millis(2);
/// Expected starts are refreshed at least this often in a live daemon…
const FORECAST_EVERY: Duration = Duration::from_secs(30);
/// …and after a scheduling point, at most this often (a burst of changes costs one run).
const FORECAST_MIN_GAP: Duration = Duration::from_secs(2);

/// A launch handed to the backend thread, not yet taken by it: it may still be withdrawn.
const GATE_QUEUED: u8 = 0;
/// Taken by the backend thread (being started, or started): it answers with its outcome.
const GATE_TAKEN: u8 = 1;
/// Withdrawn before the backend thread took it: nothing of it will ever start.
const GATE_WITHDRAWN: u8 = 2;

/// Whether a queued launch may still be withdrawn. The backend thread and the engine each
/// move it out of [`GATE_QUEUED`] with one compare-and-swap, so exactly one of them wins: a
/// launch is either withdrawn (and never started) or taken (and answered).
type LaunchGate = Arc<AtomicU8>;

/// A backend call handed to the backend thread.
enum Work {
    Launch(Launch, LaunchGate),
    Stop(RunRow, bool),
    Poll(Vec<Handle>),
    Verify(Vec<Handle>),
    Inventory,
    Retune(Retune),
    Reconfigure(NodeId, Reconfigure),
}

/// Its outcome.
enum Done {
    Launched(i64, u32, Result<Handle, BackendError>),
    /// A launch withdrawn while queued, skipped (the engine has already told the core).
    Withdrawn,
    Stopped(RunRow, Result<(), BackendError>),
    Polled(Result<Vec<(Handle, RunStatus)>, BackendError>),
    Verified(Vec<(Handle, RunStatus)>),
    Inventory(Result<Vec<InventoryNode>, BackendError>),
    Retuned(i64, u32, Result<(), BackendError>),
    Reconfigured(NodeId, u32, Result<(), BackendError>),
}

/// Carries out one backend call.
fn execute(backend: &mut dyn Backend, work: Work) -> Done {
    match work {
        Work::Launch(l, gate) => {
            let taken = gate
                .compare_exchange(GATE_QUEUED, GATE_TAKEN, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if !taken {
                return Done::Withdrawn;
            }
            Done::Launched(l.job_id, l.attempt, backend.submit(&l))
        }
        Work::Stop(run, preempt) => {
            let h = Handle(run.handle.clone());
            let r = if preempt {
                backend.preempt(&h)
            } else {
                backend.cancel(&h)
            };
            Done::Stopped(run, r)
        }
        Work::Poll(handles) => Done::Polled(backend.poll(&handles)),
        Work::Verify(handles) => Done::Verified(verify(backend, handles)),
        Work::Inventory => Done::Inventory(backend.inventory()),
        Work::Retune(r) => Done::Retuned(r.job_id, r.attempt, backend.retune(&r)),
        Work::Reconfigure(node, r) => Done::Reconfigured(node, r.gpu, backend.reconfigure(&r)),
    }
}

/// The backend, called inline (embedding, tests: every call returns with its effect
/// recorded) or on a thread of its own (the daemon: process spawns and `sbatch` calls stay off
/// the request path).
enum BackendSlot {
    Inline(Box<dyn Backend>),
    Thread {
        work: mpsc::Sender<Work>,
        done: mpsc::Receiver<Done>,
        in_flight: usize,
        polling: bool,
        thread: Option<std::thread::JoinHandle<()>>,
    },
}

impl Drop for Engine {
    /// Lets the backend thread finish the calls already handed to it (a cancel issued just
    /// before shutdown still reaches the resource manager), then joins it.
    fn drop(&mut self) {
        // Launches still queued are withdrawn: their jobs stay `starting` in the store, and a
        // restart finds no run of theirs and queues them again. Shutdown then waits only for
        // the launch being carried out and for the stops, not for a backlog of launches.
        for gate in self.gates.values() {
            let _ = gate.compare_exchange(
                GATE_QUEUED,
                GATE_WITHDRAWN,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        let slot = std::mem::replace(
            &mut self.backend,
            BackendSlot::Inline(Box::new(crate::backend::NullBackend::default())),
        );
        if let BackendSlot::Thread { work, thread, .. } = slot {
            drop(work);
            if let Some(t) = thread {
                let _ = t.join();
            }
        }
    }
}

/// The engine: the core plus the I/O it needs (owned by one thread).
pub struct Engine {
    store: Store,
    /// Changes the store refused (disk full), written first, in order, once it accepts writes.
    unsaved: WriteBatch,
    /// Why the store last refused a write, until a write succeeds again.
    store_error: Option<String>,
    /// Launches and stops decided while the store refused writes, carried out once the
    /// decisions behind them are durable.
    deferred: std::collections::VecDeque<Command>,
    backend: BackendSlot,
    clock: Arc<dyn Clock>,
    core: Core,
    last_decision_secs: f64,
    /// Inside [`begin_group`](Self::begin_group) .. [`end_group`](Self::end_group): writes
    /// are gathered for one commit and the backend calls that depend on them wait for it.
    group: bool,
    /// The gathered bookkeeping and decisions (written first).
    staged: WriteBatch,
    /// The gathered submissions (written last; forgotten if the commit fails).
    staged_submissions: WriteBatch,
    /// Where the job table ended before the gathered submissions.
    staged_mark: Option<crate::core::SubmissionMark>,
    /// The gates of launches handed to the backend thread and not answered yet, by (job id,
    /// attempt) (instances under their negative id).
    gates: HashMap<(i64, u32), LaunchGate>,
    /// Backend calls that act on a job's (or an instance's) runs and have not been carried
    /// out yet, by job id: its launches (neither answered nor withdrawn) and its stops
    /// (deferred or handed to the backend thread, not answered). See
    /// [`settled`](Engine::settled).
    acting_on: HashMap<i64, u32>,
    /// Job ids whose runs the commands carried out since the last
    /// [`take_touched`](Engine::take_touched) stopped or withdrew.
    touched: Vec<i64>,
    /// How expected starts are computed (the configured policy and round).
    forecast_settings: crate::forecast::ForecastSettings,
    /// The forecasting thread, once started ([`start_forecaster`](Self::start_forecaster)).
    forecaster: Option<crate::forecast::Forecaster>,
    /// When the last forecast was asked for.
    forecast_asked: Option<Instant>,
    /// The last forecast computed inline ([`forecast_now`](Self::forecast_now)).
    forecast_inline: Option<Arc<crate::forecast::Forecast>>,
}

/// The statuses of runs just stopped after a node failure; when the backend cannot say, each
/// counts as unknown (the job is then run again rather than held forever).
fn verify(backend: &mut dyn Backend, handles: Vec<Handle>) -> Vec<(Handle, RunStatus)> {
    match backend.poll(&handles) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot tell how the stopped runs ended (they may run again): {e}");
            handles
                .into_iter()
                .map(|h| (h, RunStatus::Unknown))
                .collect()
        }
    }
}

/// The backend thread: carries out calls in the order given, except that stops overtake
/// everything still queued (a cancel's stop must not wait behind a burst of launches, and a
/// stopped run's GPUs are wanted by the launches behind it). A stop always comes after its
/// run's launch has answered (it needs the run's handle), so no stop overtakes its own launch.
fn run_backend(
    mut backend: Box<dyn Backend>,
    work: mpsc::Receiver<Work>,
    done: mpsc::Sender<Done>,
) {
    let mut queue: VecDeque<Work> = VecDeque::new();
    loop {
        queue.extend(work.try_iter());
        let next = match queue.iter().position(|w| matches!(w, Work::Stop(..))) {
            Some(i) => queue.remove(i),
            None => queue.pop_front(),
        };
        let w = match next {
            Some(w) => w,
            None => match work.recv() {
                Ok(w) => w,
                Err(_) => break,
            },
        };
        let d = execute(backend.as_mut(), w);
        if done.send(d).is_err() {
            break;
        }
    }
}

fn transition_view(t: crate::store::TransitionRow) -> TransitionView {
    TransitionView {
        at: t.at_us as f64 / 1e6,
        from: t.from,
        to: t.to,
        detail: t.detail,
    }
}

fn random_token() -> String {
    hex(&random_bytes::<24>())
}

/// Whether a request (other than a job submission) changes what the store holds, so that
/// its answer waits for a commit.
pub(crate) fn writes(req: &Request) -> bool {
    matches!(
        req,
        Request::Cancel { .. }
            | Request::Progress { .. }
            | Request::SetNodeHealth { .. }
            | Request::SubmitService { .. }
            | Request::SubmitParsedService { .. }
            | Request::RetireService { .. }
    )
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
        let tenants = store.tenants()?;
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
        let round = config.round_seconds.map(SimDuration::from_secs_f64);
        let policy = tessera_mechanisms::build_policy(
            &config.policy,
            &PolicyOptions {
                round,
                ..PolicyOptions::default()
            },
        )?;
        let now = clock.now();
        let settings = CoreSettings {
            instance: store.instance()?,
            limits: config.limits.clone(),
            public_metrics: config.public_metrics,
            whole_cpus: backend.whole_cpus(),
            arrival_coalescing: SimDuration::ZERO,
            restart_costs: config.restart_costs.costs(),
        };
        let mut core = Core::new(settings, map, policy, tenants, Box::new(random_token), now);
        if let Some(name) = &config.truth {
            let options = tessera_mechanisms::TruthOptions::default();
            let truth = tessera_mechanisms::build_truth(name, &options)
                .ok_or_else(|| DaemonError::Config(format!("truth: unknown truth {name:?}")))?;
            let profiler = tessera_mechanisms::run_profiler(&config.policy, &truth, &options);
            core.set_profiler(truth.name, profiler);
        }
        let mut engine = Engine {
            store,
            unsaved: WriteBatch::default(),
            store_error: None,
            deferred: std::collections::VecDeque::new(),
            backend: BackendSlot::Inline(backend),
            clock,
            core,
            last_decision_secs: 0.0,
            group: false,
            staged: WriteBatch::default(),
            staged_submissions: WriteBatch::default(),
            staged_mark: None,
            gates: HashMap::new(),
            acting_on: HashMap::new(),
            touched: Vec::new(),
            forecast_settings: crate::forecast::ForecastSettings::new(&config.policy, round),
            forecaster: None,
            forecast_asked: None,
            forecast_inline: None,
        };
        // Finished jobs stay in the store only (served from there).
        let (finished, rows): (Vec<_>, Vec<_>) = engine
            .store
            .load_jobs()?
            .into_iter()
            .partition(|r| r.state.is_terminal());
        engine.core.note_archived(&finished);
        drop(finished);
        let runs = engine.store.open_runs()?;
        engine.core.restore(now, rows, runs)?;
        let (services, instances) = engine.store.load_services()?;
        let max_instance = engine.store.max_instance_id()?;
        engine
            .core
            .restore_services(now, services, instances, max_instance)?;
        engine.drive()?;
        engine.core.finish_restore(engine.clock.now());
        engine.drive()?;
        Ok(engine)
    }

    /// What the store has written since the daemon opened it (transactions, job rows).
    pub fn store_writes(&self) -> crate::store::WriteCounts {
        self.store.writes()
    }

    /// The core this engine drives.
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The GPU catalogue service documents are parsed against, for parsing off the
    /// scheduling thread (see [`Request::SubmitParsedService`]).
    pub(crate) fn catalog_snapshot(&self) -> Arc<tessera_model::GpuCatalog> {
        Arc::new(self.core.cluster_map().cluster.catalog.clone())
    }

    /// The cluster the policy sees.
    pub fn cluster_map(&self) -> &ClusterMap {
        self.core.cluster_map()
    }

    /// How many jobs the engine holds.
    pub fn job_count(&self) -> usize {
        self.core.job_count()
    }

    /// The metrics collected so far.
    pub fn metrics(&self) -> &Metrics {
        self.core.metrics()
    }

    /// The metrics, for the daemon loop to add what only it measures.
    pub(crate) fn core_metrics_mut(&mut self) -> &mut Metrics {
        self.core.metrics_mut()
    }

    /// Seconds the last [`schedule`](Self::schedule) call spent deciding (building the view,
    /// running the policy, validating its actions), before persisting and acting.
    pub fn last_decision_secs(&self) -> f64 {
        self.last_decision_secs
    }

    /// Jobs per state.
    pub fn count_by_state(&self) -> BTreeMap<JobState, usize> {
        self.core.count_by_state()
    }

    /// Sets the URL jobs use to reach the API (`TESSERA_URL` in their environment).
    pub fn set_callback_url(&mut self, url: String) {
        self.core.set_callback_url(url);
    }

    /// Moves the backend to a thread of its own: from now on launches, stops and polls are
    /// handed to it and their results come back through
    /// [`collect_backend_results`](Self::collect_backend_results), so that submissions never
    /// wait behind a process spawn. Submission-only scheduling points are coalesced too
    /// (see [`CoreSettings::arrival_coalescing`]). What the daemon's loop calls once started.
    pub fn start_backend_thread(&mut self) -> Result<(), DaemonError> {
        // The daemon goes live here: expected starts are refreshed off this thread too.
        self.start_forecaster()?;
        let BackendSlot::Inline(_) = &self.backend else {
            return Ok(());
        };
        let (work_tx, work_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let slot = std::mem::replace(
            &mut self.backend,
            BackendSlot::Thread {
                work: work_tx,
                done: done_rx,
                in_flight: 0,
                polling: false,
                thread: None,
            },
        );
        if let BackendSlot::Inline(backend) = slot {
            let handle = std::thread::Builder::new()
                .name("tessera-backend".into())
                .spawn(move || run_backend(backend, work_rx, done_tx))?;
            if let BackendSlot::Thread { thread, .. } = &mut self.backend {
                *thread = Some(handle);
            }
        }
        self.core.set_arrival_coalescing(SimDuration::from_micros(
            ARRIVAL_COALESCING.as_micros() as u64
        ));
        Ok(())
    }

    /// Feeds the results of finished backend calls to the core and carries out what follows
    /// (in inline mode there are none: every call has already returned).
    pub fn collect_backend_results(&mut self) {
        let mut any = false;
        loop {
            let BackendSlot::Thread {
                done,
                in_flight,
                polling,
                ..
            } = &mut self.backend
            else {
                return;
            };
            let Ok(d) = done.try_recv() else { break };
            *in_flight = in_flight.saturating_sub(1);
            if matches!(d, Done::Withdrawn) {
                continue; // told to the core when it was withdrawn
            }
            if matches!(d, Done::Polled(_)) {
                *polling = false;
            }
            any = true;
            self.apply(d);
        }
        if any {
            self.run_commands();
        }
    }

    fn apply(&mut self, done: Done) {
        let now = self.clock.now();
        match done {
            Done::Launched(job_id, attempt, r) => {
                self.gates.remove(&(job_id, attempt));
                self.acted(job_id);
                self.core.handle_launched(now, job_id, attempt, r)
            }
            Done::Withdrawn => {}
            Done::Stopped(run, r) => {
                self.acted(run.job_id);
                self.core.handle_stopped(run, r)
            }
            Done::Polled(Ok(statuses)) => self.core.handle_statuses(now, statuses),
            Done::Polled(Err(e)) => self.core.handle_poll_failed(&e),
            Done::Verified(statuses) => self.core.handle_verified(now, statuses),
            Done::Inventory(Ok(nodes)) => self.core.handle_inventory(now, &nodes),
            Done::Inventory(Err(e)) => self.core.handle_inventory_failed(&e),
            Done::Retuned(job_id, attempt, r) => self.core.handle_retuned(now, job_id, attempt, r),
            Done::Reconfigured(node, gpu, r) => self.core.handle_reconfigured(now, node, gpu, r),
        }
    }

    /// Runs one backend call inline, or hands it to the backend thread.
    fn call(&mut self, work: Work) {
        match &mut self.backend {
            BackendSlot::Inline(backend) => {
                let d = execute(backend.as_mut(), work);
                self.apply(d);
            }
            BackendSlot::Thread {
                work: tx,
                in_flight,
                polling,
                ..
            } => {
                if let Work::Poll(_) = work {
                    if *polling {
                        return; // one poll at a time; the next tick asks again
                    }
                    *polling = true;
                }
                if tx.send(work).is_ok() {
                    *in_flight += 1;
                } else {
                    tracing::error!("the backend thread has stopped");
                }
            }
        }
    }

    /// Carries out the core's commands until it has none left. Only a failed lookup during
    /// restart reconciliation is an error; other backend failures go back to the core.
    fn drive(&mut self) -> Result<(), DaemonError> {
        while let Some(command) = self.core.poll_command() {
            // Launches given up while in flight (a cancel, a preemption, an instance scaled
            // in or restarted) are recorded `launching` in the batch that gives them up.
            let mut given_up = Vec::new();
            match &command {
                Command::Launch(l) => self.acting(l.job_id),
                Command::Stop { run, .. } => {
                    self.acting(run.job_id);
                    self.touched.push(run.job_id);
                }
                Command::Persist(batch) => given_up.extend(
                    batch
                        .runs
                        .iter()
                        .filter(|r| r.state == crate::core::records::RunState::Launching)
                        .map(|r| (r.job_id, r.attempt)),
                ),
                _ => {}
            }
            match command {
                Command::Persist(batch) if self.group => self.staged.append(batch),
                Command::Persist(batch) => {
                    if self.commit(&batch) {
                        self.core.archive_finished();
                    }
                }
                // Acting waits while a decision is not durable (persist before act).
                c @ (Command::Launch(_)
                | Command::Stop { .. }
                | Command::Retune(_)
                | Command::Reconfigure { .. })
                    if self.store_error.is_some() || self.group =>
                {
                    self.deferred.push_back(c);
                }
                Command::Launch(launch) => self.send_launch(launch),
                Command::Retune(r) => self.call(Work::Retune(r)),
                Command::Reconfigure { node, request } => {
                    self.call(Work::Reconfigure(node, request))
                }
                Command::Stop { run, preempt } => self.call(Work::Stop(run, preempt)),
                Command::Poll(handles) => self.call(Work::Poll(handles)),
                Command::Verify(handles) => self.call(Work::Verify(handles)),
                Command::Inventory => self.call(Work::Inventory),
                Command::Find {
                    job_id,
                    attempt,
                    run_name,
                } => {
                    let BackendSlot::Inline(backend) = &mut self.backend else {
                        return Err(DaemonError::Engine(
                            "run lookups happen only while opening".into(),
                        ));
                    };
                    let found = backend.find(&run_name)?;
                    let now = self.clock.now();
                    self.core.handle_found(now, job_id, attempt, found);
                }
            }
            for (job_id, attempt) in given_up {
                self.touched.push(job_id);
                self.withdraw(job_id, attempt);
            }
        }
        Ok(())
    }

    /// Hands a launch to the backend (or defers it), with the gate through which it may be
    /// withdrawn until the backend takes it.
    fn send_launch(&mut self, launch: Launch) {
        let gate = LaunchGate::default();
        self.gates
            .insert((launch.job_id, launch.attempt), gate.clone());
        self.call(Work::Launch(launch, gate));
    }

    /// Withdraws the launch of (`job_id`, `attempt`), given up by the core, if nothing of it
    /// has started: still deferred, or queued for the backend thread and not taken. The core
    /// hears at once that the launch started nothing (so a later attempt parked behind it
    /// goes without waiting for the backend's queue). A launch already taken is answered by
    /// the backend, and the core stops what it started.
    fn withdraw(&mut self, job_id: i64, attempt: u32) {
        let deferred = self.deferred.iter().position(
            |c| matches!(c, Command::Launch(l) if l.job_id == job_id && l.attempt == attempt),
        );
        let withdrawn = match deferred {
            Some(i) => {
                self.deferred.remove(i);
                true
            }
            None => self.gates.get(&(job_id, attempt)).is_some_and(|g| {
                g.compare_exchange(
                    GATE_QUEUED,
                    GATE_WITHDRAWN,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            }),
        };
        if !withdrawn {
            return;
        }
        self.gates.remove(&(job_id, attempt));
        self.acted(job_id);
        let now = self.clock.now();
        self.core
            .handle_launched(now, job_id, attempt, Err(BackendError::Withdrawn));
    }

    /// A launch or stop of job `job_id`'s runs is on its way to the backend.
    fn acting(&mut self, job_id: i64) {
        *self.acting_on.entry(job_id).or_default() += 1;
    }

    /// A launch or stop of job `job_id`'s runs was carried out (or withdrawn).
    fn acted(&mut self, job_id: i64) {
        if let Some(n) = self.acting_on.get_mut(&job_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.acting_on.remove(&job_id);
            }
        }
    }

    /// True when every launch and stop of these jobs' runs decided so far has been carried
    /// out or withdrawn: a cancel acknowledged then is a barrier (no process of the run
    /// starts afterwards; one started before has been stopped).
    pub(crate) fn settled(&self, job_ids: &[i64]) -> bool {
        job_ids.iter().all(|id| !self.acting_on.contains_key(id))
    }

    /// The jobs (instances by negative id) whose runs were stopped or whose launches were
    /// given up since the last call: what a request's answer waits for (see
    /// [`settled`](Self::settled)).
    pub(crate) fn take_touched(&mut self) -> Vec<i64> {
        let mut t = std::mem::take(&mut self.touched);
        t.sort_unstable();
        t.dedup();
        t
    }

    /// [`drive`](Self::drive) outside restart reconciliation, where no command can fail.
    fn run_commands(&mut self) {
        if let Err(e) = self.drive() {
            tracing::warn!("backend: {e}");
        }
    }

    /// Writes a batch, after anything still unsaved. When the store refuses (a full disk),
    /// the batch is kept, in order, for [`flush`](Self::flush), and later launches and stops
    /// wait with it; `false` is returned.
    fn commit(&mut self, batch: &WriteBatch) -> bool {
        if !self.flush() {
            self.unsaved.append(batch.clone());
            return false;
        }
        match self.store.commit(batch) {
            Ok(()) => {
                self.core.metrics_mut().store_commits += 1;
                true
            }
            Err(e) => {
                self.store_refused(e);
                self.unsaved.append(batch.clone());
                false
            }
        }
    }

    /// Records a refused write. A corrupt store cannot be worked around: crash loudly so that
    /// a supervisor restarts the daemon, which then reconciles (or refuses to start).
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

    /// Writes what the store refused before, then carries out the launches and stops that
    /// waited for it (inside a group they wait for the group's commit). True when nothing is
    /// left unwritten.
    fn flush(&mut self) -> bool {
        if !self.unsaved.is_empty() {
            if let Err(e) = self.store.commit(&self.unsaved) {
                self.store_refused(e);
                return false;
            }
            self.core.metrics_mut().store_commits += 1;
            self.unsaved = WriteBatch::default();
            self.core.archive_finished();
        }
        if self.store_error.take().is_some() {
            tracing::info!("the store accepts writes again");
            self.core.request_schedule();
        }
        if self.group {
            return true;
        }
        while let Some(c) = self.deferred.pop_front() {
            match c {
                Command::Launch(launch) => self.send_launch(launch),
                Command::Stop { run, preempt } => self.call(Work::Stop(run, preempt)),
                Command::Retune(r) => self.call(Work::Retune(r)),
                Command::Reconfigure { node, request } => {
                    self.call(Work::Reconfigure(node, request))
                }
                _ => {}
            }
        }
        true
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

    /// Starts gathering writes for one commit (the daemon loop's iteration): until
    /// [`end_group`](Self::end_group), whatever the core persists is kept back, and launches,
    /// stops, retunes and reconfigurations wait for that commit (persist before act, as
    /// always). Requests answered meanwhile are not acknowledged until then: the caller holds
    /// the replies.
    pub(crate) fn begin_group(&mut self) {
        self.group = true;
    }

    /// Takes in a batch of submissions inside a group, as the last thing before
    /// [`end_group`](Self::end_group) (nothing decided in the group may depend on them: if the
    /// commit fails they are forgotten). The results are what to answer once the commit
    /// succeeds.
    pub(crate) fn stage_submissions(
        &mut self,
        items: Vec<(Option<String>, String)>,
    ) -> Vec<Result<Response, ApiError>> {
        if !self.group {
            return self.submit_batch(items);
        }
        if !self.flush() {
            return items
                .iter()
                .map(|_| Err(self.store_unavailable()))
                .collect();
        }
        // What the core decided before goes with the bookkeeping, not the submissions.
        self.run_commands();
        let mark = self.core.submission_mark();
        self.staged_mark.get_or_insert(mark);
        let now = self.clock.now();
        let results = self.core.submit(now, items);
        while let Some(command) = self.core.poll_command() {
            match command {
                Command::Persist(batch) => self.staged_submissions.append(batch),
                other => {
                    tracing::error!("unexpected command after a submission: {other:?}");
                    self.deferred.push_back(other);
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.map(|j| Response::Job(Box::new(j))))
            .collect()
    }

    /// Ends a group: everything gathered since [`begin_group`](Self::begin_group) is written
    /// in one transaction (bookkeeping and decisions first, then the submissions), then the
    /// backend calls that waited for it are handed on. False when the store refused the
    /// write: the submissions are then forgotten (the caller answers them, and every write
    /// of the group, with [`store_unavailable`](Self::store_unavailable)), the rest is kept
    /// and written once the store accepts writes again.
    pub(crate) fn end_group(&mut self) -> bool {
        let staged = std::mem::take(&mut self.staged);
        let submissions = std::mem::take(&mut self.staged_submissions);
        let mark = self.staged_mark.take();
        // Whatever an earlier refused write left unsaved goes first; finished jobs leave
        // memory only once nothing is left unsaved.
        let ok = if !self.flush() {
            false
        } else if staged.is_empty() && submissions.is_empty() {
            true
        } else {
            let t0 = Instant::now();
            match self.store.commit_all(&[&staged, &submissions]) {
                Ok(()) => {
                    let m = self.core.metrics_mut();
                    m.engine_commit.observe(t0.elapsed().as_secs_f64());
                    m.store_commits += 1;
                    true
                }
                Err(e) => {
                    self.store_refused(e);
                    false
                }
            }
        };
        self.group = false;
        if ok {
            self.core.archive_finished();
            self.flush();
            self.run_commands();
        } else {
            self.unsaved.append(staged);
            if let Some(mark) = mark {
                self.core.forget_submissions(mark);
            }
        }
        ok
    }

    /// False while the store refuses writes (until a write succeeds again).
    pub(crate) fn store_accepts_writes(&self) -> bool {
        self.store_error.is_none() && self.unsaved.is_empty()
    }

    /// The answer to a write the store could not record.
    pub(crate) fn store_unavailable_error(&self) -> ApiError {
        self.store_unavailable()
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

    /// Accepts a batch of submissions, writing all accepted jobs in one transaction before
    /// answering (group commit).
    pub(crate) fn submit_batch(
        &mut self,
        items: Vec<(Option<String>, String)>,
    ) -> Vec<Result<Response, ApiError>> {
        let now = self.clock.now();
        if !self.flush() {
            return items
                .iter()
                .map(|_| Err(self.store_unavailable()))
                .collect();
        }
        let mark = self.core.submission_mark();
        let results = self.core.submit(now, items);
        // Everything before was drained: the only command now is this batch's write.
        if let Some(command) = self.core.poll_command() {
            let Command::Persist(batch) = command else {
                tracing::error!("unexpected command after a submission: {command:?}");
                return results
                    .into_iter()
                    .map(|_| Err(ApiError::internal("unexpected command")))
                    .collect();
            };
            if let Err(e) = self.store.commit(&batch) {
                // Not acknowledged, so not kept: the clients are told to retry.
                self.store_refused(e);
                self.core.forget_submissions(mark);
                let refused = self.store_unavailable();
                return results
                    .into_iter()
                    .map(|r| r.and(Err(refused.clone())))
                    .collect();
            }
            self.core.metrics_mut().store_commits += 1;
        }
        self.run_commands();
        results
            .into_iter()
            .map(|r| r.map(|j| Response::Job(Box::new(j))))
            .collect()
    }

    /// Answers one non-submit request (after persisting what it changed).
    pub(crate) fn handle(
        &mut self,
        token: Option<&str>,
        req: Request,
    ) -> Result<Response, ApiError> {
        let now = self.clock.now();
        self.touched.clear();
        let id = match &req {
            Request::Get { id } => Some(*id),
            _ => None,
        };
        let writes = writes(&req);
        if writes && !self.flush() {
            // Authentication first, so that the 503 tells nothing to a stranger.
            self.core.handle_request(now, token, Request::Nodes)?;
            return Err(self.store_unavailable());
        }
        if let Some(r) = self.answer_from_store(token, &req) {
            return r;
        }
        if let Request::Snapshot = req {
            // The forecaster's copy, moved into the answer; written as JSON off this thread.
            self.core.authorize_admin(token)?;
            let input = self.core.forecast_input(now);
            return Ok(Response::Snapshot(Box::new(
                crate::forecast_snapshot::LiveSnapshot::of(input, &self.forecast_settings),
            )));
        }
        let mut result = self.core.handle_request(now, token, req);
        self.run_commands();
        if writes && result.is_ok() && self.store_error.is_some() {
            // Applied in memory and written once the store accepts writes; not acknowledged.
            return Err(self.store_unavailable());
        }
        if let (Some(forecast), Ok(response)) = (self.forecast(), &mut result) {
            forecast.annotate(response);
        }
        if let (Some(id), Ok(Response::Detail(d))) = (id, &mut result) {
            d.transitions = self
                .store
                .transitions(id)
                .map_err(|e| ApiError::internal(e.to_string()))?
                .into_iter()
                .map(transition_view)
                .collect();
        }
        result
    }

    /// Answers a listing, or a request about a finished job the core no longer holds, from
    /// the store; `None` when the core answers.
    fn answer_from_store(
        &self,
        token: Option<&str>,
        req: &Request,
    ) -> Option<Result<Response, ApiError>> {
        let id = match req {
            Request::List { .. } => {
                let req = req.clone();
                let mut result = self.core.list_stored(token, req, |q| {
                    self.store.list_jobs(q).map_err(|e| e.to_string())
                });
                if let (Some(forecast), Ok(response)) = (self.forecast(), &mut result) {
                    forecast.annotate(response);
                }
                return Some(result);
            }
            Request::Get { id } | Request::Cancel { id } | Request::Progress { id, .. } => *id,
            _ => return None,
        };
        if self.core.holds(id) {
            return None;
        }
        let row = match self.store.job(id) {
            Ok(Some(row)) => row,
            Ok(None) => return None,
            Err(e) => return Some(Err(ApiError::internal(e.to_string()))),
        };
        let mut result = self.core.answer_archived(token, req.clone(), &row);
        if let (Some(forecast), Ok(response)) = (self.forecast(), &mut result) {
            forecast.annotate(response);
        }
        if let Ok(Response::Detail(d)) = &mut result {
            match self.store.transitions(id) {
                Ok(t) => d.transitions = t.into_iter().map(transition_view).collect(),
                Err(e) => return Some(Err(ApiError::internal(e.to_string()))),
            }
        }
        Some(result)
    }

    /// Polls the backend for the status of every running job and records changes.
    pub fn poll(&mut self) {
        self.touched.clear();
        // Also how writes resume after a full disk: at every poll.
        self.flush();
        self.core.poll_runs(self.clock.now());
        self.run_commands();
        self.refresh_forecast(false);
    }

    /// True when a scheduling call is due (an event happened or a round boundary passed).
    pub fn wants_schedule(&self) -> bool {
        self.core.wants_schedule(self.clock.now())
    }

    /// Time until the next round boundary or submission retry, if any.
    pub fn until_next_wakeup(&self) -> Option<std::time::Duration> {
        let results = match &self.backend {
            BackendSlot::Thread { in_flight, .. } if *in_flight > 0 => Some(RESULT_POLL),
            _ => None,
        };
        let timeout = self
            .core
            .poll_timeout()
            .map(|next| Duration::from_micros(next.saturating_since(self.clock.now()).as_micros()));
        [results, timeout].into_iter().flatten().min()
    }

    /// Re-reads the inventory and applies node health changes.
    pub fn refresh_inventory(&mut self) {
        self.call(Work::Inventory);
        self.run_commands();
    }

    /// One scheduling point: the core decides (timed), records, then its commands are carried
    /// out.
    pub fn schedule(&mut self) {
        self.touched.clear();
        // Decisions must be durable before they are acted on: none while the store refuses
        // writes (the triggers stay set, so scheduling resumes with the store).
        if !self.flush() {
            return;
        }
        let now: SimTime = self.clock.now();
        let t0 = Instant::now();
        let decisions = self.core.decide(now);
        self.last_decision_secs = t0.elapsed().as_secs_f64();
        self.core.apply(now, decisions);
        self.core
            .metrics_mut()
            .scheduling_latency
            .observe(self.last_decision_secs);
        self.run_commands();
        self.refresh_forecast(true);
    }

    /// Starts the thread that refreshes expected starts: on a cadence
    /// ([`FORECAST_EVERY`]) and after scheduling points ([`FORECAST_MIN_GAP`] apart). Until
    /// it runs, or in an engine that never starts it (tests), views show expected starts
    /// only from [`forecast_now`](Self::forecast_now).
    pub fn start_forecaster(&mut self) -> Result<(), DaemonError> {
        if self.forecaster.is_none() {
            self.forecaster = Some(crate::forecast::Forecaster::start(
                self.forecast_settings.clone(),
            )?);
            self.refresh_forecast(true);
        }
        Ok(())
    }

    /// Hands the live state to the forecasting thread when a refresh is due.
    fn refresh_forecast(&mut self, changed: bool) {
        let Some(forecaster) = &self.forecaster else {
            return;
        };
        let since = self.forecast_asked.map(|t| t.elapsed());
        let due = match since {
            None => true,
            Some(s) => s >= FORECAST_EVERY || (changed && s >= FORECAST_MIN_GAP),
        };
        if due {
            self.forecast_asked = Some(Instant::now());
            forecaster.request(self.core.forecast_input(self.clock.now()));
        }
    }

    /// Computes expected starts now, on this thread (tests, and engines without the
    /// forecasting thread); views show it until a newer one comes from the thread.
    pub fn forecast_now(
        &mut self,
    ) -> Result<Arc<crate::forecast::Forecast>, crate::forecast::ForecastError> {
        let input = self.core.forecast_input(self.clock.now());
        let run = crate::forecast::run(&input, &self.forecast_settings)?;
        let f = Arc::new(crate::forecast::Forecast::of(&run));
        self.forecast_inline = Some(Arc::clone(&f));
        Ok(f)
    }

    /// The latest expected starts (the newer of the thread's and the inline one).
    pub fn forecast(&self) -> Option<Arc<crate::forecast::Forecast>> {
        let thread = self.forecaster.as_ref().and_then(|f| f.latest());
        match (thread, &self.forecast_inline) {
            (Some(a), Some(b)) => Some(if a.at >= b.at { a } else { Arc::clone(b) }),
            (a, b) => a.or_else(|| b.clone()),
        }
    }

    /// The live state as the forecaster copies it (`tessera whatif`, benchmarks).
    pub fn forecast_input(&self) -> crate::forecast::ForecastInput {
        self.core.forecast_input(self.clock.now())
    }

    /// How expected starts are computed (the configured policy and round).
    pub fn forecast_settings(&self) -> &crate::forecast::ForecastSettings {
        &self.forecast_settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build_backend;
    use crate::clock::SystemClock;
    use crate::config::{hash_token, BackendConfig, LocalConfig, LocalNodeConfig, TenantConfig};
    use tessera_model::{Bytes, MilliCpu};

    const ALICE: &str = "alice-secret-token";
    const BOB: &str = "bob-secret-token";

    fn config(dir: &std::path::Path) -> DaemonConfig {
        let text = format!(
            "store: {}\nbackend: {{kind: local, workDir: {}}}\n",
            dir.join("t.db").display(),
            dir.display()
        );
        let mut c = DaemonConfig::from_yaml(&text).unwrap();
        c.tenants = ["alice", "bob"]
            .into_iter()
            .zip([ALICE, BOB])
            .map(|(name, token)| TenantConfig {
                name: name.into(),
                token_sha256: hash_token(token),
                admin: false,
            })
            .collect();
        c.backend = BackendConfig::Local(LocalConfig {
            work_dir: dir.join("runs"),
            nodes: vec![LocalNodeConfig {
                name: "box".into(),
                gpu: "A100-80GB".into(),
                gpus: 4,
                cpus: MilliCpu::from_cores(8),
                memory: Bytes::from_gib(64),
            }],
            run_as: Default::default(),
            tool_path: None,
        });
        c
    }

    fn open(c: &DaemonConfig) -> Engine {
        let backend = build_backend(&c.backend).unwrap();
        Engine::open(c, backend, Arc::new(SystemClock::new())).unwrap()
    }

    fn detail(e: &mut Engine, token: &str, id: i64) -> Result<crate::types::JobDetail, ApiError> {
        match e.handle(Some(token), Request::Get { id })? {
            Response::Detail(d) => Ok(*d),
            other => panic!("unexpected answer {other:?}"),
        }
    }

    fn list(
        e: &mut Engine,
        token: &str,
        after: Option<i64>,
        limit: usize,
    ) -> (Vec<i64>, Option<i64>) {
        let req = Request::List {
            state: None,
            queue: None,
            after,
            limit,
        };
        match e.handle(Some(token), req).unwrap() {
            Response::Jobs(l) => (l.jobs.iter().map(|j| j.id).collect(), l.next_after),
            other => panic!("unexpected answer {other:?}"),
        }
    }

    /// Issue 9: finished jobs leave memory once durable, and the API still answers for each
    /// of them (describe, listing, cancel, tenant isolation), before and after a restart.
    #[test]
    fn finished_jobs_are_served_from_the_store_not_memory() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path());
        let mut e = open(&c);
        let specs: Vec<String> = (0..12)
            .map(|i| {
                let cmd = if i % 3 == 0 { "false" } else { "true" };
                format!("name: j{i}\ncommand: [\"{cmd}\"]\ngpus: 1\n")
            })
            .collect();
        let ids: Vec<i64> = e
            .submit_many(ALICE, &specs)
            .into_iter()
            .map(|r| r.unwrap().id)
            .collect();
        let running = e.submit_many(
            BOB,
            &["name: hold\ncommand: [\"sleep\", \"30\"]\ngpus: 1\n".into()],
        );
        let hold = running[0].as_ref().unwrap().id;
        let deadline = Instant::now() + Duration::from_secs(60);
        while e.core().resident_jobs() > 1 {
            assert!(Instant::now() < deadline, "{:?}", e.count_by_state());
            e.schedule();
            std::thread::sleep(Duration::from_millis(20));
            e.poll();
        }
        assert!(e.core().holds(hold), "the running job stays in memory");
        let counts = e.count_by_state();
        assert_eq!(counts.get(&JobState::Completed), Some(&8), "{counts:?}");
        assert_eq!(counts.get(&JobState::Failed), Some(&4), "{counts:?}");

        let check = |e: &mut Engine| {
            for (i, &id) in ids.iter().enumerate() {
                assert!(!e.core().holds(id));
                let d = detail(e, ALICE, id).unwrap();
                let (state, exit) = if i % 3 == 0 {
                    (JobState::Failed, Some(1))
                } else {
                    (JobState::Completed, Some(0))
                };
                assert_eq!((d.job.state, d.job.exit_code), (state, exit), "job {id}");
                assert_eq!(d.job.name, format!("j{i}"));
                assert_eq!(d.spec.name, format!("j{i}"));
                assert!(d.transitions.len() >= 3, "{:?}", d.transitions);
                // Another tenant's finished job is as missing as a job that never was.
                assert_eq!(detail(e, BOB, id).unwrap_err().status, 404);
                let cancel = e.handle(Some(ALICE), Request::Cancel { id }).unwrap_err();
                assert_eq!(cancel.status, 409);
            }
            // Pages over finished (store) and live (memory) jobs alike, per tenant.
            let (first, next) = list(e, ALICE, None, 5);
            assert_eq!(first, ids[..5]);
            let (rest, end) = list(e, ALICE, next, 100);
            assert_eq!(rest, ids[5..]);
            assert_eq!(end, None);
            assert_eq!(list(e, BOB, None, 100).0, vec![hold]);
            assert_eq!(e.count_by_state().get(&JobState::Completed), Some(&8));
            // So do the metrics, after a restart too (the store holds them, memory does not).
            let Ok(Response::Text(metrics)) = e.handle(Some(ALICE), Request::Metrics) else {
                panic!("no metrics");
            };
            for line in [
                "tessera_jobs{state=\"completed\"} 8",
                "tessera_jobs{state=\"failed\"} 4",
            ] {
                assert!(metrics.contains(line), "{line} not in\n{metrics}");
            }
        };
        check(&mut e);
        drop(e);
        let mut e = open(&c);
        assert_eq!(
            e.core().resident_jobs(),
            1,
            "a restart loads no finished job"
        );
        check(&mut e);
        let next = e.submit_many(ALICE, &specs[1..2]).remove(0).unwrap();
        assert!(next.id > hold, "ids of finished jobs are not reused");
        e.handle(Some(BOB), Request::Cancel { id: hold }).unwrap();
        e.poll();
    }

    /// Issue 9: a burst of submissions is one transaction (group commit), and neither the
    /// burst nor the scheduling pass after it writes more when the queue is deeper (no
    /// per-pass store work proportional to the pending jobs).
    #[test]
    fn group_commit_and_pass_writes_do_not_grow_with_pending() {
        let measure = |pending: usize| {
            let dir = tempfile::tempdir().unwrap();
            let mut c = config(dir.path());
            c.limits.max_active_jobs_per_tenant = 100_000;
            c.limits.max_active_jobs = 100_000;
            let mut e = open(&c);
            // All four GPUs held, so everything after queues.
            let hold = e.submit_many(
                BOB,
                &["name: hold\ncommand: [\"sleep\", \"30\"]\ngpus: 4\n".into()],
            )[0]
            .as_ref()
            .unwrap()
            .id;
            e.schedule();
            let backlog: Vec<String> = (0..pending)
                .map(|i| format!("name: q{i}\ncommand: [\"true\"]\ngpus: 1\n"))
                .collect();
            for chunk in backlog.chunks(500) {
                assert!(e.submit_many(ALICE, chunk).iter().all(Result::is_ok));
            }
            e.schedule();
            let before = e.store_writes();
            let burst: Vec<String> = (0..32)
                .map(|i| format!("name: b{i}\ncommand: [\"true\"]\ngpus: 1\n"))
                .collect();
            assert!(e.submit_many(ALICE, &burst).iter().all(Result::is_ok));
            let after_burst = e.store_writes();
            e.schedule();
            let after_pass = e.store_writes();
            e.handle(Some(BOB), Request::Cancel { id: hold }).unwrap();
            e.poll();
            (
                after_burst.transactions - before.transactions,
                after_burst.job_rows - before.job_rows,
                after_pass.transactions - after_burst.transactions,
                after_pass.job_rows - after_burst.job_rows,
            )
        };
        let small = measure(10);
        assert_eq!((small.0, small.1), (1, 32), "one transaction for the burst");
        assert_eq!(small.3, 0, "a pass that starts nothing writes no job row");
        assert_eq!(measure(2_000), small);
    }
}
