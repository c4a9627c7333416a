//! Conformance: the same workload and policy through the simulator (`tessera-sim`) and through
//! the daemon core on virtual time give the same decisions (starts with their placements,
//! preemptions) in the same order at the same instants, and the same completion times.
//!
//! The daemon side runs the core in the [`Harness`] whose scripted backend plays the jobs'
//! truth the way the simulator does: a job needs `duration` seconds of work on the GPUs it
//! asked for; a restart (after a preemption) first holds its GPUs for the restart cost (the
//! simulator's default table, [`restart_costs`]), with both drivers charging it by the same
//! rule (`tessera_sched::book`); a job's run completes when its work is done, and the core learns it at the next poll, which the
//! harness makes at every instant where something happens. Running jobs report their progress
//! before each scheduling point, as the SDK does, so that remaining-work orders (SRTF) see
//! what the simulator's policy sees. (Without those reports SRTF diverges: the daemon knows
//! only what jobs report.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tessera_model::{Allocation, JobId, SimDuration, SimTime, Workload};
use tessera_perf::{RestartCosts, ThroughputModel, TraceThroughput};
use tessera_sched::{Action, ClusterView, JobChange, Policy, Trigger};
use tessera_sim::{SimConfig, Simulation};

use super::testkit::{node, policy, typed_node, Event, Harness, TOKEN};
use crate::core::records::JobRow;
use crate::core::runs::{InventoryNode, PlacedShare, RunStatus};
use crate::types::{JobState, ProgressReport};

/// Restarts cost what they cost in the simulator by default (the model's checkpoint +
/// restore): the simulator counts a job's attained service only while it makes progress, and
/// the daemon core, given the same costs (`CoreSettings::restart_costs`), counts it the same
/// way, so LAS ranks jobs alike in both. (With the core's costs left free, LAS diverges on
/// these workloads: the check fails.)
fn restart_costs() -> RestartCosts {
    RestartCosts::default()
}

/// Decisions as the policy returned them, with the instant.
type Log = Arc<Mutex<Vec<(SimTime, Action)>>>;

/// What each job held, in order, as the driver resolved it (devices, CPU, memory, MIG
/// instance), one entry per start (a restart or a resize included); by job index.
/// (Preemptions are compared on their own: a resize stops the daemon's run as a preemption
/// does, where the simulator moves the job without one.)
type Held<T> = BTreeMap<usize, Vec<Option<T>>>;
type Holdings = Arc<Mutex<Held<Allocation>>>;

/// Wraps a policy: records every action it returns and every allocation the driver tells it a
/// job holds, and forwards everything else, so that the policy runs as it would alone (tracked
/// or not). It always asks the driver to report changes (to see the allocations); a policy
/// that does not track is not told them.
struct Recorder {
    inner: Box<dyn Policy>,
    log: Log,
    holdings: Holdings,
    inner_tracks: bool,
}

impl Recorder {
    /// Notes that `job` starts on `allocation` (the simulator tells each start once).
    fn hold(&self, job: usize, allocation: Option<&Allocation>) {
        if let Ok(mut h) = self.holdings.lock() {
            h.entry(job).or_default().push(allocation.cloned());
        }
    }
}

impl Policy for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn round_length(&self) -> Option<SimDuration> {
        self.inner.round_length()
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let before = actions.len();
        self.inner.schedule(view, actions);
        if let Ok(mut log) = self.log.lock() {
            log.extend(actions[before..].iter().map(|a| (view.now, a.clone())));
        }
    }
    fn wakeup(&self) -> Option<SimTime> {
        self.inner.wakeup()
    }
    fn track_jobs(&mut self) -> bool {
        self.inner_tracks = self.inner.track_jobs();
        true
    }
    fn observe(&mut self, change: JobChange<'_>) {
        if let JobChange::Started(job, _) = change {
            self.hold(job.id.index(), job.allocation.as_ref());
        }
        if self.inner_tracks {
            self.inner.observe(change);
        }
    }
    fn follows_progress(&self) -> bool {
        self.inner_tracks && self.inner.follows_progress()
    }
    fn reads_running_progress(&self, trigger: &Trigger) -> bool {
        !self.inner_tracks || self.inner.reads_running_progress(trigger)
    }
    fn may_act(&self, trigger: &Trigger) -> bool {
        !self.inner_tracks || self.inner.may_act(trigger)
    }
    fn renumber_jobs(&mut self, map: &[Option<JobId>]) -> bool {
        // Job indices are the test's names for jobs: the conformance runs keep every job.
        map.iter()
            .enumerate()
            .all(|(i, m)| *m == Some(JobId(i as u32)))
            && self.inner.renumber_jobs(map)
    }
}

fn recorded(name: &str, round: Option<u64>) -> (Box<dyn Policy>, Log, Holdings) {
    let log = Log::default();
    let holdings = Holdings::default();
    let p = Recorder {
        inner: policy(name, round),
        log: log.clone(),
        holdings: holdings.clone(),
        inner_tracks: false,
    };
    (Box::new(p), log, holdings)
}

/// A job of the test workload: submitted at `at` s, `gpus` GPUs, `secs` s of work (at its
/// reference speed), optionally restricted to a GPU model, of a model (the restart cost and
/// the knowledge policies get depend on it), with CPU and memory requests or one MIG slice.
#[derive(Clone, Copy, Debug, Default)]
struct Item {
    at: u64,
    gpus: u32,
    secs: u64,
    /// The GPU model it is restricted to, if any.
    ty: Option<&'static str>,
    /// The model hint.
    model: Option<&'static str>,
    /// CPU cores asked for.
    cpu: Option<u32>,
    /// Memory asked for, GiB.
    mem_gib: Option<u32>,
    /// One MIG instance (`nvidia.com/mig-…`).
    mig: Option<&'static str>,
}

impl Item {
    /// The job's spec as a user submits it.
    fn spec(&self, name: &str) -> String {
        let mut body = format!(
            "name: {name}\ncommand: [sleep, \"{}\"]\ngpus: {}\n",
            self.secs, self.gpus
        );
        if let Some(t) = self.ty {
            body += &format!("gpuType: {t}\n");
        }
        if let Some(c) = self.cpu {
            body += &format!("cpu: \"{c}\"\n");
        }
        if let Some(m) = self.mem_gib {
            body += &format!("memory: {m}Gi\n");
        }
        if let Some(m) = self.mig {
            body += &format!("mig: {m}\n");
        }
        let model = self
            .model
            .map(|m| format!("model: {m}, "))
            .unwrap_or_default();
        body + &format!("hints: {{{model}durationSeconds: {}}}\n", self.secs)
    }
}

/// The world the scripted backend plays, run by run: a job has `iterations` of work; a run
/// progresses at what the truth (the simulator's throughput model, [`truth`]) gives the
/// allocation it was launched on, after a restart's restore (the world's restart cost,
/// [`restart_costs`]); a retune changes the rate in place. A run ends when its work is done,
/// which the core learns from the backend's status at the next poll: the completion times
/// compared are the backend's, not the core's nor a copy of the simulator's bookkeeping.
#[derive(Clone, Debug, Default)]
struct Work {
    /// Iterations done up to `synced_at` (of the live run, else for good).
    done: f64,
    total: f64,
    run: Option<Running>,
}

#[derive(Clone, Debug)]
struct Running {
    rate: f64,
    synced_at: SimTime,
    resumes_at: SimTime,
    /// When its work is done at this rate.
    finish: SimTime,
}

impl Work {
    /// Iterations done by `now`.
    fn done_at(&self, now: SimTime) -> f64 {
        match &self.run {
            Some(r) => {
                let worked = now.saturating_since(r.synced_at.max(r.resumes_at));
                (self.done + r.rate * worked.as_secs_f64()).min(self.total)
            }
            None => self.done,
        }
    }

    /// Folds progress up to `now` and runs on at `rate` (restoring until `resumes_at`).
    fn rate(&mut self, now: SimTime, rate: f64, resumes_at: SimTime) {
        self.done = self.done_at(now);
        let remaining = (self.total - self.done).max(0.0);
        let finish = resumes_at.max(now) + SimDuration::from_secs_f64_ceil(remaining / rate);
        self.run = Some(Running {
            rate,
            synced_at: now,
            resumes_at,
            finish,
        });
    }

    /// The run stops (preempted, resized, done): progress so far is kept.
    fn stop(&mut self, now: SimTime) {
        self.done = self.done_at(now);
        self.run = None;
    }
}

/// The truth both worlds play: a trace's speeds (a job runs at its reference throughput on
/// the GPUs it asks for, scaled by what it holds, slices and quotas by their share).
fn truth() -> TraceThroughput {
    TraceThroughput
}

/// (instant, job index, placement as (node, GPUs)).
type Started = (SimTime, usize, Vec<(String, u32)>);

struct DaemonRun {
    decisions: Vec<(SimTime, Action)>,
    /// What each job's launches placed, from the backend's side.
    holdings: Held<Vec<PlacedShare>>,
    /// (instant, job index, placement) of every launch the driver carried out.
    launches: Vec<Started>,
    /// (instant, job index) of every preemption stop.
    preemptions: Vec<(SimTime, usize)>,
    /// (instant, job index, new placement) of every retune carried out.
    retunes: Vec<(SimTime, usize, Vec<PlacedShare>)>,
    /// (instant, node, GPU, layout as profile names) of every reconfiguration carried out.
    reconfigurations: Vec<(SimTime, String, u32, Option<Vec<String>>)>,
    /// Rows of the jobs as the daemon recorded them, by job index.
    rows: Vec<JobRow>,
    /// When its run ended (all jobs done, or nothing left to happen).
    end: SimTime,
    jobs: Vec<tessera_model::TrainingJob>,
}

/// The daemon side; `None` when the daemon refuses a job of the workload (the policy does not
/// honour it).
fn run_core(
    nodes: &[InventoryNode],
    name: &str,
    round: Option<u64>,
    items: &[Item],
) -> Option<DaemonRun> {
    let (p, log, _) = recorded(name, round);
    let mut h = Harness::new_at(nodes.to_vec(), p, SimTime::ZERO);
    h.core.settings.restart_costs = restart_costs();
    // A MIG reconfiguration takes the backend as long as the simulator's world charges.
    h.reconfigure_delay = SimConfig::default().reconfigure_time;
    let cluster = h.core.cluster_map().cluster.clone();
    let mut work: BTreeMap<i64, Work> = BTreeMap::new();
    let mut ids: Vec<i64> = Vec::new();
    let mut launches = Vec::new();
    let mut preemptions = Vec::new();
    let mut retunes = Vec::new();
    let mut reconfigurations = Vec::new();
    let mut next_item = 0;
    let index = |ids: &[i64], id: i64| ids.iter().position(|&i| i == id).unwrap_or(usize::MAX);
    for _ in 0..1_000_000 {
        h.answer_reconfigurations();
        // Runs whose work is done by now complete.
        for (&id, w) in work.iter_mut() {
            if w.run.as_ref().is_some_and(|r| r.finish <= h.now) && h.run_of(id).is_some() {
                h.end_run(id, RunStatus::Completed);
                w.stop(h.now);
            }
        }
        h.poll();
        while let Some(it) = items
            .get(next_item)
            .filter(|it| SimTime::from_secs(it.at) == h.now)
        {
            let body = it.spec(&format!("j{next_item}"));
            let mut r = h.core.submit(h.now, vec![(Some(TOKEN.into()), body)]);
            let id = match r.pop() {
                Some(Ok(job)) => job.id,
                other => {
                    // Refused: the policy does not honour the workload.
                    eprintln!("{name}: j{next_item} refused: {other:?}");
                    return None;
                }
            };
            h.drain();
            let total = h
                .core
                .training_jobs()
                .get(ids.len())
                .map_or(0.0, |j| j.iterations as f64);
            ids.push(id);
            work.insert(
                id,
                Work {
                    total,
                    ..Work::default()
                },
            );
            next_item += 1;
        }
        if h.core.wants_schedule(h.now) {
            // Running jobs report their progress (the SDK) before the scheduling point, so
            // the daemon's remaining-work estimates are the simulator's.
            for (&id, w) in &work {
                if w.run.is_some() {
                    let report = ProgressReport {
                        iterations: w.done_at(h.now).floor() as u64,
                        ..ProgressReport::default()
                    };
                    h.core
                        .report_progress(h.now, id, report)
                        .expect("progress accepted");
                }
            }
            h.schedule();
        }
        for e in h.take_events() {
            match e {
                Event::Launch(id, attempt, placement) => {
                    let job = index(&ids, id);
                    let spec = h.core.training_jobs()[job].clone();
                    let placed = h
                        .placements
                        .iter()
                        .rev()
                        .find(|(j, a, _)| *j == id && *a == attempt)
                        .map(|(_, _, p)| p.clone())
                        .unwrap_or_default();
                    let alloc = h
                        .core
                        .cluster_map()
                        .allocation(&placed)
                        .expect("a launch's placement maps back to an allocation");
                    // The run restores from its checkpoint first (the world's rule).
                    let resumes_at = h.now
                        + tessera_sched::book::restore_time(
                            &restart_costs(),
                            &spec.model,
                            alloc.gpus(),
                            attempt > 1,
                        );
                    let rate = truth().throughput(&spec, &alloc, &cluster);
                    assert!(rate > 0.0, "job {job} runs at {rate} on {alloc:?}");
                    let w = work.entry(id).or_default();
                    w.rate(h.now, rate, resumes_at);
                    launches.push((h.now, job, placement));
                }
                Event::Stop(id, _, preempt) => {
                    work.entry(id).or_default().stop(h.now);
                    if preempt {
                        preemptions.push((h.now, index(&ids, id)));
                    }
                }
                Event::Retune(id, _) => {
                    let job = index(&ids, id);
                    let spec = h.core.training_jobs()[job].clone();
                    let placed = h
                        .store_jobs
                        .get(&id)
                        .map(|r| r.placement.clone())
                        .unwrap_or_default();
                    let alloc = h
                        .core
                        .cluster_map()
                        .allocation(&placed)
                        .expect("a retune's placement maps back to an allocation");
                    let rate = truth().throughput(&spec, &alloc, &cluster);
                    let w = work.entry(id).or_default();
                    if let Some(r) = w.run.clone() {
                        if rate != r.rate {
                            w.rate(h.now, rate, r.resumes_at);
                        }
                    }
                    retunes.push((h.now, job, placed));
                }
                Event::Reconfigure(node, gpu, layout) => {
                    reconfigurations.push((h.now, node, gpu, layout));
                }
                _ => {}
            }
        }
        let all_done = next_item == items.len() && ids.iter().all(|&id| h.state(id).is_terminal());
        if all_done {
            break;
        }
        // The next instant: an arrival, a completion, a reconfiguration done, or the core's
        // own timeout.
        let arrival = items.get(next_item).map(|it| SimTime::from_secs(it.at));
        let completion = work
            .values()
            .filter_map(|w| w.run.as_ref().map(|r| r.finish))
            .min();
        let next = [
            arrival,
            completion,
            h.next_reconfiguration(),
            h.core.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .filter(|&t| t > h.now)
        .min();
        // Nothing left to happen: the jobs still waiting stay so (the simulator reports
        // them unfinished when its run stalls; the rows compare the outcomes).
        let Some(next) = next else { break };
        h.now = next;
    }
    assert_eq!(
        h.core.metrics().rejected_actions,
        0,
        "the core refused a decision: {:?}",
        h.core.refused()
    );
    let rows = ids
        .iter()
        .map(|&id| h.core.job_row(id).expect("known job").clone())
        .collect();
    let decisions = log.lock().expect("log").clone();
    let mut holdings: Held<Vec<PlacedShare>> = BTreeMap::new();
    for (id, _, placement) in &h.placements {
        holdings
            .entry(index(&ids, *id))
            .or_default()
            .push(Some(placement.clone()));
    }
    Some(DaemonRun {
        decisions,
        holdings,
        launches,
        preemptions,
        retunes,
        reconfigurations,
        rows,
        end: h.now,
        jobs: h.core.training_jobs().to_vec(),
    })
}

/// Runs both drivers and compares them; returns the number of preemptions.
fn check(name: &str, round: Option<u64>, nodes: &[InventoryNode], items: &[Item]) -> usize {
    check_if_honoured(name, round, nodes, items).expect("the daemon takes the workload")
}

/// [`check`], or `None` when the daemon refuses the workload under this policy.
fn check_if_honoured(
    name: &str,
    round: Option<u64>,
    nodes: &[InventoryNode],
    items: &[Item],
) -> Option<usize> {
    let daemon = run_core(nodes, name, round, items)?;
    let cluster = super::testkit::core_with(nodes, policy("fifo", None), SimTime::ZERO)
        .cluster_map()
        .cluster
        .clone();
    let workload = Workload::new(daemon.jobs.clone());
    assert_eq!(
        workload.jobs(),
        &daemon.jobs[..],
        "submission order is id order"
    );
    let (p, log, sim_holdings) = recorded(name, round);
    let config = SimConfig {
        record_timeseries: false,
        restart_costs: restart_costs(),
        ..SimConfig::default()
    };
    let report =
        match Simulation::new(&cluster, &workload, &TraceThroughput, p, config).run(&mut ()) {
            Ok(report) => Some(report),
            // The policy left jobs waiting with nothing left to happen: the daemon's run must
            // stall at the same instant with as many jobs waiting (decisions compared below).
            Err(tessera_sim::SimError::Stalled { now, count, .. }) => {
                let waiting = daemon
                    .rows
                    .iter()
                    .filter(|r| !r.state.is_terminal())
                    .count();
                assert_eq!(
                    (daemon.end, waiting),
                    (now, count),
                    "{name}: the simulator stalls at {now} with {count} jobs waiting"
                );
                None
            }
            Err(e) => panic!("{name}: simulation fails: {e}"),
        };
    let sim_decisions = log.lock().expect("log").clone();
    assert!(
        sim_decisions
            .iter()
            .any(|(_, a)| matches!(a, Action::Start { .. })),
        "the workload starts jobs"
    );
    if let Some(i) = (0..daemon.decisions.len().max(sim_decisions.len()))
        .find(|&i| daemon.decisions.get(i) != sim_decisions.get(i))
    {
        eprintln!(
            "first difference at {i}:\n daemon {:?}\n sim    {:?}",
            daemon.decisions.get(i),
            sim_decisions.get(i)
        );
    }
    assert_eq!(
        daemon.decisions, sim_decisions,
        "{name}: the policy decided differently under the two drivers"
    );
    let names = &super::testkit::core_with(nodes, policy("fifo", None), SimTime::ZERO);
    // Each job held the same resources, down to the devices, CPU, memory and MIG instance,
    // as each driver resolved them.
    let sim_holdings: Held<Vec<PlacedShare>> = sim_holdings
        .lock()
        .expect("holdings")
        .iter()
        .map(|(&job, held)| {
            let placed = held
                .iter()
                .map(|a| a.as_ref().map(|a| names.cluster_map().placement(a)))
                .collect();
            (job, placed)
        })
        .collect();
    assert_eq!(
        daemon.holdings, sim_holdings,
        "{name}: jobs held different resources (devices, CPU, memory, MIG)"
    );
    // What the daemon actually launched and stopped matches the simulator's decisions.
    let mut sim_starts = Vec::new();
    let mut sim_preempts = Vec::new();
    for (t, a) in &sim_decisions {
        match a {
            Action::Start { job, allocation } | Action::Resize { job, allocation } => {
                let placement = names
                    .cluster_map()
                    .placement(allocation)
                    .into_iter()
                    .map(|s| (s.node, s.gpus))
                    .collect();
                sim_starts.push((*t, job.index(), placement));
                if matches!(a, Action::Resize { .. }) {
                    // A resize stops the old run as a preemption does (and counts as one in
                    // both drivers' records).
                    sim_preempts.push((*t, job.index()));
                }
            }
            Action::Preempt { job } => sim_preempts.push((*t, job.index())),
            _ => {}
        }
    }
    // Within an instant the daemon may send launches in another order than the decisions
    // (a resize's new run waits for its old run's stop): the order of decisions is compared
    // above, the launches of each instant as a set.
    let mut launches = daemon.launches.clone();
    launches.sort_by_key(|&(t, job, _)| (t, job));
    sim_starts.sort_by_key(|&(t, job, _)| (t, job));
    assert_eq!(launches, sim_starts, "{name}: launches");
    let mut preemptions = daemon.preemptions.clone();
    preemptions.sort_unstable();
    sim_preempts.sort_unstable();
    assert_eq!(preemptions, sim_preempts, "{name}: preemptions");
    // Retunes and reconfigurations carried out are the simulator's, at the same instants.
    let mut sim_retunes = Vec::new();
    let mut sim_reconfigurations = Vec::new();
    for (t, a) in &sim_decisions {
        match a {
            Action::Retune { job, allocation } => {
                sim_retunes.push((*t, job.index(), names.cluster_map().placement(allocation)));
            }
            Action::Reconfigure { node, gpu, layout } => {
                let map = names.cluster_map();
                let name = map.logical[node.index()].node.clone();
                let layout = layout.as_ref().map(|l| {
                    l.iter()
                        .map(|i| map.mig_profile_name(*node, *i).unwrap_or_default())
                        .collect()
                });
                sim_reconfigurations.push((*t, name, *gpu, layout));
            }
            _ => {}
        }
    }
    assert_eq!(daemon.retunes, sim_retunes, "{name}: retunes");
    let mut reconfigurations = daemon.reconfigurations.clone();
    reconfigurations.sort();
    sim_reconfigurations.sort();
    assert_eq!(
        reconfigurations, sim_reconfigurations,
        "{name}: reconfigurations"
    );
    // Each job's record as `jobs.csv` shows it, from each driver's side.
    let Some(report) = report else {
        return Some(daemon.preemptions.len());
    };
    let daemon_rows = daemon_job_rows(&daemon);
    let sim_rows: Vec<CsvRow> = report.jobs.iter().map(CsvRow::of_sim).collect();
    if let Some(i) = (0..daemon_rows.len()).find(|&i| daemon_rows.get(i) != sim_rows.get(i)) {
        eprintln!(
            "first job differing: {i}\n daemon {:?}\n sim    {:?}",
            daemon_rows.get(i),
            sim_rows.get(i)
        );
    }
    assert_eq!(daemon_rows, sim_rows, "{name}: jobs.csv");
    Some(daemon.preemptions.len())
}

/// The columns of the simulator's `jobs.csv` both drivers know, per job: `job_id`, `name`,
/// `gpus`, `submit_s`, `start_s` (first start), `finish_s`, `outcome` and `preemptions`, in
/// µs (`jct_s` and `queue_s` follow from them). Left out, as driver-specific: `policy` (one
/// policy per run here), `reason` (the daemon's messages are its own), `gpu_secs` (the
/// simulator's accounting of GPU-equivalents held; the daemon counts attained service, which
/// excludes restores), `nodes` and `gpu_types` (compared down to the device with the
/// holdings above), `restarts` and `lost_gpu_secs` (failures are not injected here).
#[derive(Clone, Debug, PartialEq, Eq)]
struct CsvRow {
    job_id: u32,
    name: String,
    gpus: u32,
    submit_us: u64,
    start_us: Option<u64>,
    finish_us: Option<u64>,
    outcome: &'static str,
    preemptions: u32,
}

impl CsvRow {
    fn of_sim(r: &tessera_sim::JobRecord) -> CsvRow {
        CsvRow {
            job_id: r.job.0,
            name: r.name.to_string(),
            gpus: r.gpus,
            submit_us: r.submit.as_micros(),
            start_us: r.first_start.map(SimTime::as_micros),
            finish_us: r.finish.map(SimTime::as_micros),
            outcome: match r.outcome {
                tessera_sim::JobOutcome::Finished => "finished",
                tessera_sim::JobOutcome::Rejected { .. } => "rejected",
                tessera_sim::JobOutcome::Unfinished { .. } => "unfinished",
                tessera_sim::JobOutcome::Failed { .. } => "failed",
            },
            preemptions: r.preemptions,
        }
    }
}

/// The daemon's `jobs.csv` rows: its job records (state, end, preemptions), the first start
/// its backend carried out.
fn daemon_job_rows(d: &DaemonRun) -> Vec<CsvRow> {
    d.rows
        .iter()
        .enumerate()
        .map(|(i, row)| CsvRow {
            job_id: i as u32,
            name: row.name.clone(),
            gpus: d.jobs[i].gpus,
            submit_us: row.submit_us,
            start_us: d
                .launches
                .iter()
                .find(|(_, j, _)| *j == i)
                .map(|(t, _, _)| t.as_micros()),
            finish_us: row.end_us,
            outcome: match row.state {
                JobState::Completed => "finished",
                JobState::Failed => "failed",
                _ => "unfinished",
            },
            preemptions: row.preemptions,
        })
        .collect()
}

/// Two nodes (4 + 2 GPUs), twelve jobs of 1–4 GPUs arriving over ten minutes.
fn workload() -> (Vec<InventoryNode>, Vec<Item>) {
    let nodes = vec![node("n1", 4), node("n2", 2)];
    let spec = [
        (0, 2, 300),
        (0, 4, 120),
        (10, 1, 600),
        (30, 2, 90),
        (45, 1, 200),
        (60, 3, 150),
        (120, 1, 60),
        (200, 2, 400),
        (240, 4, 100),
        (300, 1, 30),
        (420, 2, 250),
        (600, 1, 45),
    ];
    let items = spec
        .iter()
        .map(|&(at, gpus, secs)| Item {
            at,
            gpus,
            secs,
            ..Item::default()
        })
        .collect();
    (nodes, items)
}

#[test]
fn fifo_decides_the_same_in_the_simulator_and_the_daemon_core() {
    let (nodes, items) = workload();
    assert_eq!(check("fifo", None, &nodes, &items), 0);
}

#[test]
fn las_with_rounds_decides_and_preempts_the_same_in_both() {
    let (nodes, items) = workload();
    assert!(
        check("las", Some(60), &nodes, &items) > 0,
        "the workload makes LAS preempt"
    );
}

#[test]
fn las_at_every_event_decides_and_preempts_the_same_in_both() {
    let (nodes, items) = workload();
    assert!(
        check("las", None, &nodes, &items) > 0,
        "the workload makes LAS preempt"
    );
}

#[test]
fn srtf_decides_the_same_in_both() {
    let (nodes, items) = workload();
    assert!(
        check("srtf", Some(60), &nodes, &items) > 0,
        "the workload makes SRTF preempt"
    );
}

/// Two GPU models (a node of 4 A100-40GB, a node of 2 V100-32GB), fourteen jobs of 1–4 GPUs,
/// some restricted to one model, arriving over ten minutes: the preemptive orders must select
/// by model (issue 38 item 4).
fn two_model_workload() -> (Vec<InventoryNode>, Vec<Item>) {
    let nodes = vec![
        typed_node("a", "A100-40GB", 4),
        typed_node("v", "V100-32GB", 2),
    ];
    const A: Option<&str> = Some("A100-40GB");
    const V: Option<&str> = Some("V100-32GB");
    let spec = [
        (0, 4, 400, A),
        (0, 2, 120, V),
        (10, 1, 600, None),
        (30, 2, 90, A),
        (45, 1, 200, V),
        (60, 3, 150, A),
        (90, 1, 300, V),
        (120, 1, 60, None),
        (200, 2, 400, None),
        (240, 4, 100, A),
        (300, 1, 30, A),
        (360, 2, 80, V),
        (420, 2, 250, None),
        (600, 1, 45, A),
    ];
    let items = spec
        .iter()
        .map(|&(at, gpus, secs, ty)| Item {
            at,
            gpus,
            secs,
            ty,
            ..Item::default()
        })
        .collect();
    (nodes, items)
}

#[test]
fn the_baselines_decide_the_same_in_both_on_two_gpu_models() {
    let (nodes, items) = two_model_workload();
    assert_eq!(check("fifo", None, &nodes, &items), 0);
    for order in ["las", "srtf", "ftf"] {
        assert!(
            check(order, Some(60), &nodes, &items) > 0,
            "the workload makes {order} preempt"
        );
    }
}

/// Every registered policy against `workload`: prints each one's outcome (`--no-capture`) and
/// returns (policies that diverge, policies that ran and agreed).
fn every_policy(nodes: &[InventoryNode], items: &[Item]) -> (Vec<&'static str>, usize) {
    let mut diverging = Vec::new();
    let mut agreeing = 0;
    for (_, info) in tessera_mechanisms::policies() {
        let name = info.name;
        let r = std::panic::catch_unwind(|| check_if_honoured(name, Some(60), nodes, items));
        match r {
            Ok(Some(p)) => {
                agreeing += 1;
                eprintln!("{name}: same ({p} preemptions)");
            }
            Ok(None) => eprintln!("{name}: refused by the daemon"),
            Err(_) => {
                eprintln!("{name}: DIVERGES");
                diverging.push(name);
            }
        }
    }
    (diverging, agreeing)
}

/// Every registered policy the daemon takes the workload under (two GPU models, restricted
/// jobs, restart costs on) decides the same in both drivers, down to each job's devices, CPU,
/// memory, retunes and reconfigurations, with the same jobs.csv rows.
#[test]
fn every_registered_policy_decides_the_same_in_both() {
    let (nodes, items) = two_model_workload();
    let (diverging, agreeing) = every_policy(&nodes, &items);
    assert_eq!(
        diverging,
        Vec::<&str>::new(),
        "policies whose drivers diverge"
    );
    assert!(agreeing >= 30, "most policies run and agree: {agreeing}");
}

/// Three GPU models (A100-40GB with MIG, H100-80GB, V100-32GB), jobs of named models (their
/// restart costs differ; the knowledge-driven policies read their profiles), some asking for
/// CPU and memory (with `cpu_memory`), some restricted to a model; `mig` adds jobs asking for
/// a MIG slice (a fixed profile or any). Only the policies that honour CPU/memory demands or
/// MIG take those (the others are refused at submission, as a user would see).
fn mixed_workload(cpu_memory: bool, mig: bool) -> (Vec<InventoryNode>, Vec<Item>) {
    let nodes = vec![
        typed_node("a", "A100-40GB", 4),
        typed_node("h", "H100-80GB", 2),
        typed_node("v", "V100-32GB", 2),
    ];
    const A: Option<&str> = Some("A100-40GB");
    const V: Option<&str> = Some("V100-32GB");
    let it = |at, gpus, secs, model| Item {
        at,
        gpus,
        secs,
        model: Some(model),
        ..Item::default()
    };
    let mut items = vec![
        it(0, 4, 400, "resnet50"),
        Item {
            ty: V,
            ..it(0, 2, 120, "vgg16")
        },
        Item {
            cpu: Some(8),
            mem_gib: Some(64),
            ..it(10, 1, 600, "bert-base")
        },
        Item {
            ty: A,
            ..it(30, 2, 90, "resnet18")
        },
        Item {
            cpu: Some(24),
            ..it(45, 1, 200, "gpt2")
        },
        it(60, 3, 150, "resnet50"),
        Item {
            mem_gib: Some(200),
            ..it(90, 1, 300, "transformer")
        },
        it(120, 1, 60, "alexnet"),
        Item {
            cpu: Some(12),
            mem_gib: Some(48),
            ..it(200, 2, 400, "bert-base")
        },
        it(240, 4, 100, "resnet50"),
        Item {
            ty: A,
            ..it(300, 1, 30, "mobilenet")
        },
        Item {
            ty: V,
            ..it(360, 2, 80, "vgg16")
        },
        it(420, 2, 250, "gpt2"),
        it(600, 1, 45, "resnet18"),
    ];
    if mig {
        items.extend([
            Item {
                mig: Some("nvidia.com/mig-3g.20gb"),
                ..it(20, 1, 300, "resnet18")
            },
            Item {
                mig: Some("nvidia.com/mig-any"),
                ..it(50, 1, 200, "mobilenet")
            },
            Item {
                mig: Some("nvidia.com/mig-1g.5gb"),
                ..it(130, 1, 100, "alexnet")
            },
            Item {
                mig: Some("nvidia.com/mig-any"),
                ..it(310, 1, 150, "resnet18")
            },
        ]);
        items.sort_by_key(|i| i.at);
    }
    if !cpu_memory {
        for i in &mut items {
            i.cpu = None;
            i.mem_gib = None;
        }
    }
    (nodes, items)
}

/// Every registered policy on three GPU models with model hints.
#[test]
fn every_registered_policy_decides_the_same_on_a_mixed_cluster() {
    let (nodes, items) = mixed_workload(false, false);
    let (diverging, agreeing) = every_policy(&nodes, &items);
    assert_eq!(
        diverging,
        Vec::<&str>::new(),
        "policies whose drivers diverge"
    );
    assert!(agreeing >= 30, "most policies run and agree: {agreeing}");
}

/// The same with CPU and memory requests: the policies that honour them give the same CPU
/// and memory to each job in both drivers.
#[test]
fn every_policy_that_takes_cpu_and_memory_demands_decides_the_same_in_both() {
    let (nodes, items) = mixed_workload(true, false);
    let (diverging, agreeing) = every_policy(&nodes, &items);
    assert_eq!(
        diverging,
        Vec::<&str>::new(),
        "policies whose drivers diverge"
    );
    assert!(
        agreeing >= 15,
        "the CPU/memory policies run and agree: {agreeing}"
    );
}

/// The same with MIG slices asked for: the policies that honour MIG place them alike, down to
/// the instance, and reconfigure the same GPUs to the same layouts at the same instants.
#[test]
fn every_policy_that_takes_mig_jobs_decides_the_same_in_both() {
    let (nodes, items) = mixed_workload(false, true);
    let (diverging, agreeing) = every_policy(&nodes, &items);
    assert_eq!(
        diverging,
        Vec::<&str>::new(),
        "policies whose drivers diverge"
    );
    assert!(agreeing >= 3, "the MIG policies run and agree: {agreeing}");
}

/// A 1,000-job trace (Poisson arrivals, Philly's GPU mix up to 8, exponential run times)
/// replayed through the daemon core gives the simulator's jobs.csv (the columns both drivers
/// know, [`CsvRow`]), under FIFO and LAS with rounds, on two GPU models.
#[test]
fn a_thousand_job_trace_gives_the_simulators_jobs_csv() {
    let trace = tessera_trace::synthetic::PoissonWorkload {
        jobs: 1000,
        jobs_per_hour: 40.0,
        gpu_mix: tessera_trace::synthetic::PHILLY_GPU_MIX.to_vec(),
        durations: tessera_trace::synthetic::DurationDist::Exponential { mean_s: 1200.0 },
        seed: 38,
    }
    .generate();
    let items: Vec<Item> = trace
        .jobs()
        .iter()
        .map(|j| Item {
            at: j.submit.as_micros() / 1_000_000,
            gpus: j.gpus,
            secs: j.duration.as_micros().div_ceil(1_000_000),
            ..Item::default()
        })
        .collect();
    let nodes = vec![
        typed_node("a1", "A100-40GB", 8),
        typed_node("a2", "A100-40GB", 8),
        typed_node("v1", "V100-32GB", 8),
        typed_node("v2", "V100-32GB", 8),
    ];
    for (policy, round) in [("fifo", None), ("las", Some(600))] {
        check(policy, round, &nodes, &items);
    }
}
