//! Conformance: the same workload and policy through the simulator (`tessera-sim`) and through
//! the daemon core on virtual time give the same decisions (starts with their placements,
//! preemptions) in the same order at the same instants, and the same completion times.
//!
//! The daemon side runs the core in the [`Harness`] whose scripted backend plays the jobs'
//! truth the way the simulator does: a job needs `duration` seconds of work on the GPUs it
//! asked for; a restart (after a preemption) first pays the restart cost (zero here, see
//! [`restart_costs`]); a job's
//! run completes when its work is done, and the core learns it at the next poll, which the
//! harness makes at every instant where something happens. Running jobs report their progress
//! before each scheduling point, as the SDK does, so that remaining-work orders (SRTF) see
//! what the simulator's policy sees. (Without those reports SRTF diverges: the daemon knows
//! only what jobs report.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tessera_model::{SimDuration, SimTime, Workload};
use tessera_perf::{RestartCosts, TraceThroughput};
use tessera_sched::{Action, ClusterView, Policy};
use tessera_sim::{SimConfig, Simulation};

use super::testkit::{node, policy, Event, Harness};
use crate::backend::{InventoryNode, RunStatus};
use crate::types::{JobState, ProgressReport};

/// Restarts cost nothing here. The simulator counts a job's attained service only while it
/// makes progress, not while it restores from a checkpoint; the daemon cannot see a restore
/// (it counts GPU-seconds held), so with restart costs LAS would rank jobs differently in the
/// two drivers. Free restarts keep the comparison about scheduling.
fn restart_costs() -> RestartCosts {
    RestartCosts::free()
}

/// Decisions as the policy returned them, with the instant.
type Log = Arc<Mutex<Vec<(SimTime, Action)>>>;

/// Wraps a policy and records every action it returns.
struct Recorder {
    inner: Box<dyn Policy>,
    log: Log,
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
}

fn recorded(name: &str, round: Option<u64>) -> (Box<dyn Policy>, Log) {
    let log = Log::default();
    let p = Recorder {
        inner: policy(name, round),
        log: log.clone(),
    };
    (Box::new(p), log)
}

/// A job of the test workload: submitted at `at` s, `gpus` GPUs, `secs` s of work.
#[derive(Clone, Copy, Debug)]
struct Item {
    at: u64,
    gpus: u32,
    secs: u64,
}

/// The work of one job as the scripted backend plays it.
#[derive(Clone, Copy, Debug, Default)]
struct Work {
    done_us: u64,
    running_since: Option<SimTime>,
    resumes_at: SimTime,
    attempts: u32,
}

/// (instant, job index, placement as (node, GPUs)).
type Started = (SimTime, usize, Vec<(String, u32)>);

struct DaemonRun {
    decisions: Vec<(SimTime, Action)>,
    /// (instant, job index, placement) of every launch the driver carried out.
    launches: Vec<Started>,
    /// (instant, job index) of every preemption stop.
    preemptions: Vec<(SimTime, usize)>,
    finish: Vec<Option<SimTime>>,
    jobs: Vec<tessera_model::TrainingJob>,
}

fn run_core(nodes: &[InventoryNode], name: &str, round: Option<u64>, items: &[Item]) -> DaemonRun {
    let (p, log) = recorded(name, round);
    let mut h = Harness::new_at(nodes.to_vec(), p, SimTime::ZERO);
    let restart_cost = restart_costs().for_model("");
    let mut work: BTreeMap<i64, Work> = BTreeMap::new();
    let mut secs_of: BTreeMap<i64, u64> = BTreeMap::new();
    let mut ids: Vec<i64> = Vec::new();
    let mut launches = Vec::new();
    let mut preemptions = Vec::new();
    let mut next_item = 0;
    let index = |ids: &[i64], id: i64| ids.iter().position(|&i| i == id).unwrap_or(usize::MAX);
    for _ in 0..100_000 {
        // Runs whose work is done by now complete.
        for (&id, w) in work.iter_mut() {
            if let Some(since) = w.running_since {
                let from = since.max(w.resumes_at);
                let left = secs_of[&id] * 1_000_000 - w.done_us;
                if from + SimDuration::from_micros(left) <= h.now && h.run_of(id).is_some() {
                    h.end_run(id, RunStatus::Completed);
                    w.running_since = None;
                }
            }
        }
        h.poll();
        while let Some(it) = items
            .get(next_item)
            .filter(|it| SimTime::from_secs(it.at) == h.now)
        {
            let id = h.submit(&format!("j{next_item}"), it.gpus, it.secs);
            ids.push(id);
            secs_of.insert(id, it.secs);
            work.insert(id, Work::default());
            next_item += 1;
        }
        if h.core.wants_schedule(h.now) {
            // Running jobs report their progress (the SDK) before the scheduling point, so
            // the daemon's remaining-work estimates are the simulator's.
            for (&id, w) in &work {
                if let Some(since) = w.running_since {
                    let from = since.max(w.resumes_at);
                    let done_us = w.done_us + h.now.saturating_since(from).as_micros();
                    let report = ProgressReport {
                        iterations: done_us / 1_000_000,
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
                    let w = work.entry(id).or_default();
                    w.running_since = Some(h.now);
                    w.resumes_at = if attempt > 1 {
                        h.now + restart_cost
                    } else {
                        h.now
                    };
                    w.attempts = attempt;
                    launches.push((h.now, index(&ids, id), placement));
                }
                Event::Stop(id, _, preempt) => {
                    let w = work.entry(id).or_default();
                    if let Some(since) = w.running_since.take() {
                        let from = since.max(w.resumes_at);
                        w.done_us += h.now.saturating_since(from).as_micros();
                    }
                    if preempt {
                        preemptions.push((h.now, index(&ids, id)));
                    }
                }
                _ => {}
            }
        }
        let all_done = next_item == items.len() && ids.iter().all(|&id| h.state(id).is_terminal());
        if all_done {
            break;
        }
        // The next instant: an arrival, a completion, or the core's own timeout.
        let arrival = items.get(next_item).map(|it| SimTime::from_secs(it.at));
        let completion = work
            .iter()
            .filter_map(|(&id, w)| {
                let since = w.running_since?;
                let left = secs_of[&id] * 1_000_000 - w.done_us;
                Some(since.max(w.resumes_at) + SimDuration::from_micros(left))
            })
            .min();
        let next = [arrival, completion, h.core.poll_timeout()]
            .into_iter()
            .flatten()
            .filter(|&t| t > h.now)
            .min()
            .unwrap_or_else(|| {
                let states: Vec<_> = ids.iter().map(|&id| (id, h.state(id))).collect();
                panic!(
                    "stuck at {}: {states:?} {work:?} next item {next_item}",
                    h.now
                )
            });
        h.now = next;
    }
    assert_eq!(
        h.core.metrics().rejected_actions,
        0,
        "the core refused a decision"
    );
    let finish = ids
        .iter()
        .map(|&id| {
            let row = h.core.job_row(id).expect("known job");
            assert_eq!(row.state, JobState::Completed, "job {id}");
            row.end_us.map(SimTime::from_micros)
        })
        .collect();
    let decisions = log.lock().expect("log").clone();
    DaemonRun {
        decisions,
        launches,
        preemptions,
        finish,
        jobs: h.core.training_jobs().to_vec(),
    }
}

/// Runs both drivers and compares them; returns the number of preemptions.
fn check(name: &str, round: Option<u64>, nodes: &[InventoryNode], items: &[Item]) -> usize {
    let daemon = run_core(nodes, name, round, items);
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
    let (p, log) = recorded(name, round);
    let config = SimConfig {
        record_timeseries: false,
        restart_costs: restart_costs(),
        ..SimConfig::default()
    };
    let report = Simulation::new(&cluster, &workload, &TraceThroughput, p, config)
        .run(&mut ())
        .expect("simulation runs");
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
    // What the daemon actually launched and stopped matches the simulator's decisions.
    let mut sim_starts = Vec::new();
    let mut sim_preempts = Vec::new();
    let names = &super::testkit::core_with(nodes, policy("fifo", None), SimTime::ZERO);
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
            }
            Action::Preempt { job } => sim_preempts.push((*t, job.index())),
            other => panic!("the baselines do not {other:?}"),
        }
    }
    assert_eq!(daemon.launches, sim_starts, "{name}: launches");
    assert_eq!(daemon.preemptions, sim_preempts, "{name}: preemptions");
    let sim_finish: Vec<Option<SimTime>> = report.jobs.iter().map(|r| r.finish).collect();
    assert_eq!(daemon.finish, sim_finish, "{name}: completion times");
    daemon.preemptions.len()
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
        .map(|&(at, gpus, secs)| Item { at, gpus, secs })
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
