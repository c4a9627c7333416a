//! Expected starts: the simulator forked from the daemon's live state.
//!
//! The core copies its state ([`crate::core::Core::forecast_input`]: jobs not finished, with
//! their progress, attained service and allocations; GPUs' layouts and health; what service
//! instances hold) into a [`ForecastInput`]; [`run`] forks a simulation from it
//! ([`tessera_sim::Simulation::fork`]) under a fresh instance of the daemon's policy and runs
//! it to the end (or a horizon), so each pending job's first start in the run is its expected
//! start. The simulated jobs advance at their reported rate, else at their declared speed
//! (iterations over declared duration), else at the daemon's default duration: the forecast
//! is as good as those, and assumes no new submissions.
//!
//! A [`Forecaster`] runs forecasts on a thread of its own: the scheduling thread only copies
//! the state (O(active jobs)) and hands it over; the latest request wins, so a burst of
//! changes costs one run. `tessera whatif` runs the same [`run`] on a changed input.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Instant;

use tessera_model::{Cluster, SimDuration, SimTime, TrainingJob, Workload};
use tessera_perf::{RestartCosts, TraceThroughput};
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, SimError, Simulation, Snapshot};

/// The live state a forecast forks from (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq)]
pub struct ForecastInput {
    /// The cluster the policy sees.
    pub cluster: Cluster,
    /// Backend node name of each node of `cluster`, by index.
    pub node_names: Vec<String>,
    /// Jobs not finished, numbered by submission (the forked run's ids).
    pub jobs: Vec<TrainingJob>,
    /// The daemon id of each of `jobs`.
    pub ids: Vec<i64>,
    /// Each job's declared duration (its time limit, to a Slurm user), before a reported
    /// rate replaced it in `jobs`.
    pub declared: Vec<SimDuration>,
    /// Progress, holdings and GPU states at the instant.
    pub snapshot: Snapshot,
    /// Which service instance holds each of `snapshot.reserved`, in its order.
    pub reserved_by: Vec<ReservedBy>,
    /// What a restart costs (the daemon's setting).
    pub restart_costs: RestartCosts,
}

/// The service instance behind one reserved holding of a [`ForecastInput`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservedBy {
    /// Daemon service id.
    pub service: i64,
    /// The service's name.
    pub name: String,
    /// Instance id.
    pub instance: i64,
}

/// How a forecast runs.
#[derive(Clone, Debug)]
pub struct ForecastSettings {
    /// The policy, as the daemon's config names it.
    pub policy: String,
    /// Its round, as configured.
    pub round: Option<SimDuration>,
    /// How far past the instant the run goes; later starts are reported as beyond it.
    pub horizon: SimDuration,
}

/// Default [`ForecastSettings::horizon`]: 30 days.
pub const DEFAULT_HORIZON: SimDuration = SimDuration::from_secs(30 * 24 * 3600);

impl ForecastSettings {
    /// `policy` with its round and the default horizon.
    pub fn new(policy: &str, round: Option<SimDuration>) -> ForecastSettings {
        ForecastSettings {
            policy: policy.to_string(),
            round,
            horizon: DEFAULT_HORIZON,
        }
    }
}

/// What a forecast could not do.
#[derive(Debug, thiserror::Error)]
pub enum ForecastError {
    /// The policy does not build.
    #[error("policy: {0}")]
    Policy(#[from] tessera_sched::PolicyError),
    /// The snapshot does not fit the cluster (a bug, or a state changed under the copy).
    #[error("{0}")]
    Snapshot(SimError),
}

/// One job in a forecast run.
#[derive(Clone, Debug, PartialEq)]
pub struct JobForecast {
    /// Daemon id.
    pub id: i64,
    /// Its tenant.
    pub tenant: String,
    /// GPUs it asks for.
    pub gpus: u32,
    /// Submitted.
    pub submit: SimTime,
    /// Pending at the instant (else running).
    pub pending: bool,
    /// Its next start in the run (pending jobs); the instant for running ones. `None`:
    /// not within the horizon.
    pub start: Option<SimTime>,
    /// When it ends in the run, if within the horizon.
    pub finish: Option<SimTime>,
}

/// A forecast run's result.
#[derive(Clone, Debug)]
pub struct ForecastRun {
    /// The instant it forked from.
    pub at: SimTime,
    /// The policy it ran.
    pub policy: String,
    /// The end of its horizon.
    pub horizon_end: SimTime,
    /// Every job of the input, in its order.
    pub jobs: Vec<JobForecast>,
    /// Why the run stopped before every job ended, if it did (the rest are beyond it).
    pub stopped: Option<String>,
    /// Wall-clock seconds it took.
    pub wall_secs: f64,
}

/// Forks the simulator from `input` and runs `settings.policy` to the end or the horizon.
pub fn run(
    input: &ForecastInput,
    settings: &ForecastSettings,
) -> Result<ForecastRun, ForecastError> {
    let t0 = Instant::now();
    let policy = tessera_mechanisms::build_policy(
        &settings.policy,
        &PolicyOptions {
            round: settings.round,
            ..PolicyOptions::default()
        },
    )?;
    let at = input.snapshot.now;
    let horizon_end =
        SimTime::from_micros(at.as_micros().saturating_add(settings.horizon.as_micros()));
    // Numbered by submission already: `Workload::new` keeps the order and the ids.
    let workload = Workload::new(input.jobs.clone());
    let config = SimConfig {
        restart_costs: input.restart_costs.clone(),
        time_limit: Some(horizon_end),
        record_timeseries: false,
        ..SimConfig::default()
    };
    let truth = TraceThroughput;
    let mut sim = Simulation::fork(
        &input.cluster,
        &workload,
        &truth,
        policy,
        config,
        &input.snapshot,
    )
    .map_err(ForecastError::Snapshot)?;
    let mut stopped = None;
    loop {
        match sim.step() {
            Ok(true) => {}
            Ok(false) => break,
            // Jobs nothing can place (a drained pool), a budget: what started is known.
            Err(e) => {
                stopped = Some(e.to_string());
                break;
            }
        }
    }
    let report = sim.into_report();
    let running: std::collections::HashSet<u32> = input
        .snapshot
        .jobs
        .iter()
        .filter(|j| j.running.is_some())
        .map(|j| j.job.0)
        .collect();
    let jobs = workload
        .jobs()
        .iter()
        .zip(&input.ids)
        .zip(&report.jobs)
        .map(|((j, &id), r)| JobForecast {
            id,
            tenant: j.tenant.clone(),
            gpus: j.gpus,
            submit: j.submit,
            pending: !running.contains(&j.id.0),
            start: r.first_start,
            finish: r.finish,
        })
        .collect();
    Ok(ForecastRun {
        at,
        policy: settings.policy.clone(),
        horizon_end,
        jobs,
        stopped,
        wall_secs: t0.elapsed().as_secs_f64(),
    })
}

/// The estimate a Slurm-like scheduler gives (`squeue --start`), from the same state: its
/// backfill plans pending jobs in priority order against running jobs that end at their start
/// plus their time limit (here: the declared duration), knowing nothing of progress. Returns
/// the input with every job's speed back at its declared one, running jobs' work done
/// recomputed from their time held, and pending jobs' progress forgotten; run it under
/// `fifo` (in order, with backfill) for the estimate.
pub fn slurm_like(input: &ForecastInput) -> ForecastInput {
    let mut out = input.clone();
    for (j, declared) in out.jobs.iter_mut().zip(&input.declared) {
        j.duration = *declared;
    }
    out.snapshot.jobs.retain(|s| s.running.is_some());
    for s in &mut out.snapshot.jobs {
        let Some(j) = out.jobs.get(s.job.index()) else {
            continue;
        };
        let held_secs = s.attained_gpu_us as f64 / 1e6 / f64::from(j.gpus.max(1));
        s.done_iters = (held_secs * j.reference_throughput()).min(j.iterations as f64);
        s.attained_gpu_us = 0;
        s.preemptions = 0;
    }
    out
}

/// The latest expected starts, as the API shows them.
#[derive(Clone, Debug, Default)]
pub struct Forecast {
    /// The instant it forked from.
    pub at: SimTime,
    /// The end of its horizon.
    pub horizon_end: SimTime,
    /// Expected start of each job pending then, by daemon id (`None`: beyond the horizon).
    pub starts: HashMap<i64, Option<SimTime>>,
    /// Wall-clock seconds the run took.
    pub wall_secs: f64,
    /// Why it failed or stopped early, if it did.
    pub note: Option<String>,
}

impl Forecast {
    /// The expected starts of a run's pending jobs.
    pub fn of(run: &ForecastRun) -> Forecast {
        Forecast {
            at: run.at,
            horizon_end: run.horizon_end,
            starts: run
                .jobs
                .iter()
                .filter(|j| j.pending)
                .map(|j| (j.id, j.start))
                .collect(),
            wall_secs: run.wall_secs,
            note: run.stopped.clone(),
        }
    }

    /// A forecast that could not run, saying why.
    pub fn failed(at: SimTime, why: String) -> Forecast {
        Forecast {
            at,
            note: Some(why),
            ..Forecast::default()
        }
    }

    /// What the API shows for job `id`, if it was pending at the forecast.
    pub fn view_of(&self, id: i64) -> Option<crate::types::ExpectedStart> {
        let start = self.starts.get(&id)?;
        let secs = |t: SimTime| t.as_micros() as f64 / 1e6;
        Some(crate::types::ExpectedStart {
            at: start.map(secs),
            computed_at: secs(self.at),
            not_before: start.is_none().then(|| secs(self.horizon_end)),
        })
    }

    /// Fills the expected start of every job of a response this forecast knows.
    pub(crate) fn annotate(&self, response: &mut crate::core::Response) {
        use crate::core::Response;
        let fill = |v: &mut crate::types::JobView| v.expected_start = self.view_of(v.id);
        match response {
            Response::Job(v) => fill(v),
            Response::Detail(d) => fill(&mut d.job),
            Response::Jobs(list) => list.jobs.iter_mut().for_each(fill),
            Response::Queue(q) => q.pending.iter_mut().for_each(fill),
            _ => {}
        }
    }
}

/// Runs forecasts on a thread of its own (see the [module docs](self)).
pub struct Forecaster {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    /// The latest input not yet taken by the thread, and whether to stop.
    request: Mutex<(Option<ForecastInput>, bool)>,
    wake: Condvar,
    latest: RwLock<Option<Arc<Forecast>>>,
}

impl Forecaster {
    /// Starts the forecasting thread.
    pub fn start(settings: ForecastSettings) -> std::io::Result<Forecaster> {
        let shared = Arc::new(Shared::default());
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("forecast".into())
            .spawn(move || loop {
                let input = {
                    let Ok(mut req) = worker.request.lock() else {
                        return;
                    };
                    loop {
                        if req.1 {
                            return;
                        }
                        if let Some(input) = req.0.take() {
                            break input;
                        }
                        req = match worker.wake.wait(req) {
                            Ok(r) => r,
                            Err(_) => return,
                        };
                    }
                };
                let at = input.snapshot.now;
                let forecast = match run(&input, &settings) {
                    Ok(r) => {
                        tracing::debug!(
                            jobs = r.jobs.len(),
                            secs = r.wall_secs,
                            "expected starts refreshed"
                        );
                        Forecast::of(&r)
                    }
                    Err(e) => {
                        tracing::warn!("expected starts: {e}");
                        Forecast::failed(at, e.to_string())
                    }
                };
                if let Ok(mut latest) = worker.latest.write() {
                    *latest = Some(Arc::new(forecast));
                }
            })?;
        Ok(Forecaster {
            shared,
            thread: Some(thread),
        })
    }

    /// Asks for a forecast from `input`, replacing any request not yet started.
    pub fn request(&self, input: ForecastInput) {
        if let Ok(mut req) = self.shared.request.lock() {
            req.0 = Some(input);
            self.shared.wake.notify_one();
        }
    }

    /// The latest forecast finished, if any.
    pub fn latest(&self) -> Option<Arc<Forecast>> {
        self.shared.latest.read().ok().and_then(|l| l.clone())
    }

    /// Whether a request waits for the thread (tests wait for it to be taken).
    pub fn idle(&self) -> bool {
        self.shared.request.lock().map_or(true, |r| r.0.is_none())
    }
}

impl Drop for Forecaster {
    fn drop(&mut self) {
        if let Ok(mut req) = self.shared.request.lock() {
            req.1 = true;
            self.shared.wake.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A change to the cluster a what-if forecasts under (`tessera whatif`).
#[derive(Clone, Debug, Default)]
pub struct ClusterChange {
    /// Nodes added (as the backend's inventory would list them).
    pub add: Vec<crate::backend::InventoryNode>,
    /// Backend node names drained: their running jobs finish, nothing new is placed there.
    pub drain: Vec<String>,
}

/// The state a daemon's store holds, as a forecast input at `now`: the store opened
/// read-only (a running daemon may hold it), the cluster from the config's backend inventory
/// (a local backend's listed nodes; Slurm's `scontrol`, read-only) with `change` applied,
/// the jobs not finished restored as a restarting daemon restores them (running jobs on
/// their recorded placements). MIG layouts are not stored: a GPU comes back with the
/// instances its running jobs hold. Administrators' drains are not stored either.
pub fn input_from_store(
    config: &crate::DaemonConfig,
    now: SimTime,
    change: &ClusterChange,
) -> Result<ForecastInput, crate::DaemonError> {
    use crate::backend::{GresCount, InventoryNode, NodeHealth};
    use crate::config::BackendConfig;
    use crate::DaemonError;
    let store = crate::store::Store::inspect(&config.store)?;
    let (mut nodes, gres_map, default_gpu) = match &config.backend {
        BackendConfig::Local(l) => (
            l.nodes
                .iter()
                .map(|n| InventoryNode {
                    name: n.name.clone(),
                    cpu: n.cpus,
                    memory: n.memory,
                    gres: if n.gpus > 0 {
                        vec![GresCount {
                            kind: Some(n.gpu.clone()),
                            count: n.gpus,
                        }]
                    } else {
                        vec![]
                    },
                    health: NodeHealth::Up,
                })
                .collect::<Vec<_>>(),
            std::collections::BTreeMap::new(),
            None,
        ),
        BackendConfig::Slurm(s) => (
            crate::build_backend(&config.backend)?.inventory()?,
            s.gres_map.clone(),
            s.default_gpu.clone(),
        ),
    };
    nodes.extend(change.add.iter().cloned());
    let map = crate::inventory::ClusterMap::build(
        &nodes,
        &gres_map,
        default_gpu.as_deref(),
        &tessera_model::GpuCatalog::builtin(),
    )?;
    let policy = tessera_mechanisms::build_policy(
        &config.policy,
        &PolicyOptions {
            round: config.round_seconds.map(SimDuration::from_secs_f64),
            ..PolicyOptions::default()
        },
    )?;
    let settings = crate::core::CoreSettings {
        instance: store.instance()?,
        limits: config.limits.clone(),
        public_metrics: config.public_metrics,
        whole_cpus: false,
        arrival_coalescing: SimDuration::ZERO,
        restart_costs: config.restart_costs.costs(),
    };
    let mut core = crate::core::Core::new(
        settings,
        map,
        policy,
        store.tenants()?,
        Box::new(String::new),
        now,
    );
    let rows = store
        .load_jobs()?
        .into_iter()
        .filter(|r| !r.state.is_terminal())
        .collect();
    core.restore(now, rows, store.open_runs()?)?;
    let (services, instances) = store.load_services()?;
    core.restore_services(now, services, instances, store.max_instance_id()?)?;
    core.finish_restore(now);
    for name in &change.drain {
        core.set_node_health(now, name, Some(NodeHealth::Draining))
            .map_err(|e| DaemonError::Config(format!("drain: {}", e.message)))?;
    }
    Ok(core.forecast_input(now))
}

/// Sets GPU `gpu` of backend node `node` to a MIG layout of the named profiles (`whole`
/// for none) in `input`, the first valid placement of them; refuses a GPU that is held.
pub fn set_layout(
    input: &mut ForecastInput,
    node: &str,
    gpu: u32,
    profiles: &[String],
) -> Result<(), String> {
    let Some(n) = input.node_names.iter().position(|name| name == node) else {
        return Err(format!("no node {node:?}"));
    };
    let node_id = tessera_model::NodeId(n as u32);
    let Some(spec) = input.cluster.nodes.get(n) else {
        return Err(format!("no node {node:?}"));
    };
    if gpu >= spec.gpus {
        return Err(format!("node {node} has {} GPUs", spec.gpus));
    }
    let held = input.snapshot.jobs.iter().any(|j| {
        j.running.as_ref().is_some_and(|r| {
            r.allocation
                .shares
                .iter()
                .any(|s| s.node == node_id && s.devices.is_none_or(|d| d.gpus.contains(gpu)))
        })
    });
    if held {
        return Err(format!("GPU {gpu} of {node} is held by a running job"));
    }
    let layout = if profiles.is_empty() || (profiles.len() == 1 && profiles[0] == "whole") {
        None
    } else {
        let Some(geo) = input.cluster.catalog.mig_geometry(spec.gpu) else {
            return Err(format!("node {node}'s GPUs are not MIG-capable"));
        };
        let mut want = Vec::new();
        for p in profiles {
            want.push(
                geo.find_profile(p)
                    .ok_or_else(|| format!("no MIG profile {p:?} on node {node}'s GPUs"))?,
            );
        }
        want.sort_unstable();
        let found = geo.valid_layouts().into_iter().find(|l| {
            let mut have: Vec<u8> = l.iter().map(|i| i.profile).collect();
            have.sort_unstable();
            have == want
        });
        Some(found.ok_or_else(|| format!("{} is not a valid layout", profiles.join("+")))?)
    };
    let gpus = &mut input.snapshot.gpus;
    let at = gpus.iter().position(|g| g.node == node_id && g.gpu == gpu);
    let entry = tessera_sim::SnapshotGpu {
        node: node_id,
        gpu,
        layout,
        ready_at: input.snapshot.now,
        down: at.is_some_and(|i| gpus[i].down),
    };
    match at {
        Some(i) => gpus[i] = entry,
        None => gpus.push(entry),
    }
    Ok(())
}
