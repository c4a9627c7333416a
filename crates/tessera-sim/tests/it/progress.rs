//! No hang, ever (issue 36): runs that cannot progress stop with a typed error naming the
//! jobs, every run's events are bounded, and times at the end of the clock are refused.
//! Each reproducer of the issue that hung (or gave a silent wrong result) is here, bounded.

use std::sync::Arc;

use tessera_model::{Bytes, Cluster, MilliCpu, SimDuration, SimTime, TrainingJob, Workload};
use tessera_perf::{RestartCosts, TraceThroughput};
use tessera_sched::baselines::build as build_policy;
use tessera_sched::{Action, ClusterView, Policy, PolicyOptions};
use tessera_sim::{
    default_event_budget, FailureSpec, GroupMtbf, JobOutcome, SimConfig, SimError, SimReport,
    Simulation, BASE_EVENT_BUDGET, EVENTS_PER_JOB,
};

use crate::job;

fn cluster(nodes: u32) -> Cluster {
    Cluster::homogeneous(
        "V100-32GB",
        nodes,
        4,
        MilliCpu::from_cores(24),
        Bytes::from_gib(256),
    )
    .unwrap()
}

/// Runs to the end, at most `steps` steps (a hang fails the test instead of hanging it).
fn run(
    c: &Cluster,
    workload: &Workload,
    policy: Box<dyn Policy>,
    config: SimConfig,
    steps: u64,
) -> Result<SimReport, SimError> {
    let mut sim = Simulation::new(c, workload, &TraceThroughput, policy, config);
    let mut n = 0u64;
    while sim.step()? {
        n += 1;
        assert!(n < steps, "still running after {n} steps at {}", sim.now());
    }
    Ok(sim.into_report())
}

fn baseline(name: &str, round: Option<u64>) -> Box<dyn Policy> {
    build_policy(
        name,
        &PolicyOptions {
            round: round.map(SimDuration::from_secs),
            ..PolicyOptions::default()
        },
    )
    .unwrap()
}

/// Every node down forever (a failures file with no repair) under 300 s rounds: the rounds
/// used to tick forever; without rounds the run ended with the job "unfinished". Both now
/// stop as stalled, naming the job and why.
#[test]
fn every_node_down_forever_stalls_with_and_without_rounds() {
    let c = cluster(2);
    let spec = FailureSpec::parse_csv(
        "time,node,gpu,event,duration\n10,node-0,,down,\n10,node-1,,down,\n",
        &c,
    )
    .unwrap();
    let w = Workload::new(vec![job("a", 0, 4, 100), job("b", 20, 2, 100)]);
    for round in [Some(300), None] {
        for policy in ["fifo", "las", "srtf"] {
            if policy != "fifo" && round.is_none() {
                continue;
            }
            let config = SimConfig {
                restart_costs: RestartCosts::free(),
                failures: Some(Arc::new(spec.clone())),
                ..SimConfig::default()
            };
            let err = run(&c, &w, baseline(policy, round), config, 10_000).unwrap_err();
            let SimError::Stalled {
                jobs, count, why, ..
            } = &err
            else {
                panic!("{policy} {round:?}: {err}");
            };
            assert_eq!(*count, 2, "{err}");
            assert!(
                jobs.contains("a (4 GPUs)") && jobs.contains("b (2 GPUs)"),
                "{err}"
            );
            assert!(why.contains("8 of 8 GPUs are down"), "{err}");
        }
    }
}

/// The same failures file with a repair: the rounds wait for it (a pending repair is not a
/// stall), and the jobs finish.
#[test]
fn a_pending_repair_is_waited_for() {
    let c = cluster(2);
    let spec = FailureSpec::parse_csv(
        "time,node,gpu,event,duration\n10,node-0,,down,1000000\n10,node-1,,down,1000000\n",
        &c,
    )
    .unwrap();
    let w = Workload::new(vec![job("a", 0, 4, 100), job("b", 20, 2, 100)]);
    let config = SimConfig {
        restart_costs: RestartCosts::free(),
        failures: Some(Arc::new(spec)),
        ..SimConfig::default()
    };
    let r = run(&c, &w, baseline("las", Some(300)), config, 100_000).unwrap();
    assert!(r.jobs.iter().all(|j| j.outcome == JobOutcome::Finished));
}

/// `--mtbf 1 --mttr 1` without `--max-restarts`: jobs are interrupted every second or so and
/// never finish; the run grew without bound (4 GiB and counting). It now stops at its
/// event budget, with an error that names the limit.
#[test]
fn failures_that_never_let_jobs_finish_stop_at_the_event_budget() {
    let c = cluster(2);
    let spec = FailureSpec {
        mtbf: vec![GroupMtbf {
            group: None,
            mtbf: SimDuration::from_secs(1),
            mttr: SimDuration::from_secs(1),
        }],
        ..FailureSpec::default()
    };
    let w = Workload::new(vec![job("long", 0, 4, 100_000)]);
    let budget = default_event_budget(&w, None);
    assert_eq!(budget, BASE_EVENT_BUDGET + EVENTS_PER_JOB);
    let config = SimConfig {
        failures: Some(Arc::new(spec)),
        max_events: Some(20_000),
        ..SimConfig::default()
    };
    let err = run(&c, &w, baseline("fifo", None), config, 1_000_000).unwrap_err();
    let SimError::EventBudget {
        limit, done, total, ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!((*limit, *done, *total), (20_000, 0, 1));
    assert!(err.to_string().contains("--max-events"), "{err}");
}

/// A job arriving at the end of the clock (`--arrivals poisson:1e-300` drew arrivals past
/// 584,000 years, saturated): it used to be reported finished, with no start (its start was
/// the "never" sentinel) and 0 GPU-seconds. It is refused, naming the job.
#[test]
fn an_arrival_at_the_end_of_the_clock_is_refused() {
    let c = cluster(1);
    let mut late = job("late", 0, 1, 100);
    late.submit = SimTime::MAX;
    let w = Workload::new(vec![job("first", 0, 1, 100), late]);
    for round in [None, Some(300)] {
        let err = run(&c, &w, baseline("las", round), SimConfig::default(), 10_000).unwrap_err();
        assert!(
            matches!(&err, SimError::TimeOverflow { what, .. } if what.contains("late")),
            "{err}"
        );
    }
}

/// 200 jobs of 10⁹ s under 300 s rounds: years of rounds of preemptions. The run is bounded
/// by its event budget and says which limit stopped it.
#[test]
fn years_of_rounds_stop_at_the_event_budget() {
    let c = cluster(2);
    let jobs: Vec<TrainingJob> = (0..200)
        .map(|i| job(&format!("j{i}"), 0, 1 + i % 4, 1_000_000_000))
        .collect();
    let w = Workload::new(jobs);
    let config = SimConfig {
        max_events: Some(50_000),
        record_timeseries: false,
        ..SimConfig::default()
    };
    let err = run(&c, &w, baseline("las", Some(300)), config, 1_000_000).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::EventBudget {
                limit: 50_000,
                total: 200,
                ..
            }
        ),
        "{err}"
    );
}

/// A policy that asks to be woken up every second and never places anything: the wake-ups
/// change nothing, nothing is pending, the run stops as stalled.
#[test]
fn wakeups_that_change_nothing_stall() {
    struct Dozer {
        next: SimTime,
    }
    impl Policy for Dozer {
        fn name(&self) -> &str {
            "dozer"
        }
        fn round_length(&self) -> Option<SimDuration> {
            None
        }
        fn schedule(&mut self, view: &ClusterView<'_>, _: &mut Vec<Action>) {
            self.next = view.now + SimDuration::from_secs(1);
        }
        fn wakeup(&self) -> Option<SimTime> {
            Some(self.next)
        }
    }
    let c = cluster(1);
    let w = Workload::new(vec![job("a", 0, 1, 10)]);
    let policy = Box::new(Dozer {
        next: SimTime::ZERO,
    });
    let err = run(&c, &w, policy, SimConfig::default(), 100_000).unwrap_err();
    assert!(
        matches!(&err, SimError::Stalled { count: 1, jobs, .. } if jobs.contains('a')),
        "{err}"
    );
}

/// A policy that waits for a later arrival (nothing placed until the second job comes, a
/// long while later, then both placed) is not a stall: pending arrivals are waited for.
#[test]
fn waiting_for_a_later_arrival_is_not_a_stall() {
    struct Patient;
    impl Policy for Patient {
        fn name(&self) -> &str {
            "patient"
        }
        fn round_length(&self) -> Option<SimDuration> {
            Some(SimDuration::from_secs(1))
        }
        fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
            if view.active.len() < 2 {
                return;
            }
            for (i, a) in view.active.iter().enumerate() {
                if a.allocation.is_none() {
                    actions.push(Action::Start {
                        job: a.id,
                        allocation: tessera_model::Allocation::new(vec![
                            tessera_model::NodeShare {
                                node: tessera_model::NodeId(0),
                                gpus: 1,
                                cpu: MilliCpu::from_cores(1),
                                memory: Bytes::from_gib(1),
                                devices: Some(tessera_model::DeviceAlloc {
                                    gpus: tessera_model::GpuMask::one(i as u32),
                                    part: tessera_model::GpuPart::Whole,
                                }),
                            },
                        ]),
                    });
                }
            }
        }
    }
    let c = cluster(1);
    let w = Workload::new(vec![job("a", 0, 1, 10), job("b", 5_000, 1, 10)]);
    let r = run(&c, &w, Box::new(Patient), SimConfig::default(), 100_000).unwrap();
    assert!(r.jobs.iter().all(|j| j.outcome == JobOutcome::Finished));
}
