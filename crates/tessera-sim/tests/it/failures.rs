//! Failure injection (issue 9): the failures file, a hand-checked rollback, and random
//! failure schedules under which the invariants, conservation of work and determinism hold.

use std::sync::Arc;

use proptest::prelude::*;
use tessera_model::{Bytes, Cluster, MilliCpu, SimDuration, SimTime, TrainingJob, Workload};
use tessera_perf::{RestartCosts, TraceThroughput};
use tessera_sched::baselines::build as build_policy;
use tessera_sched::PolicyOptions;
use tessera_sim::{FailureSpec, GroupMtbf, Health, JobOutcome, SimConfig, SimReport, Simulation};

use crate::job;

/// `nodes` nodes of 4 V100s.
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

fn render(spec: &FailureSpec) -> String {
    spec.events
        .iter()
        .map(|e| {
            format!(
                "{}s {} node {}{}\n",
                e.time.as_secs_f64(),
                if e.health == Health::Down {
                    "down"
                } else {
                    "up"
                },
                e.node.0,
                e.gpu.map(|g| format!(" gpu {g}")).unwrap_or_default()
            )
        })
        .collect()
}

/// The documented example's cluster: its node names are those of the default run's cluster
/// (`builtin:mixed`'s first group), so that the example works there as written.
fn dgx_cluster() -> Cluster {
    let yaml = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: \
                dgx-a100, count: 2, gpu: A100-80GB, gpusPerNode: 8, cpus: 256, memory: 2Ti}\n";
    Cluster::from_yaml(yaml, &tessera_model::GpuCatalog::builtin()).unwrap()
}

#[test]
fn failures_file_golden_yaml_and_csv() {
    let c = dgx_cluster();
    let golden = include_str!("../data/failures.golden");
    let yaml = FailureSpec::parse(include_str!("../data/failures.yaml"), &c).unwrap();
    assert_eq!(render(&yaml), golden);
    assert_eq!(yaml.checkpoint_interval, Some(SimDuration::from_secs(1800)));
    assert_eq!(
        yaml.interval_of("resnet-3"),
        Some(SimDuration::from_secs(600))
    );
    assert_eq!(yaml.interval_of("bert-7"), None);
    assert_eq!(
        yaml.interval_of("other"),
        Some(SimDuration::from_secs(1800))
    );
    assert_eq!(yaml.max_restarts, Some(5));
    assert_eq!(
        yaml.mtbf,
        vec![GroupMtbf {
            group: Some(0),
            mtbf: SimDuration::from_secs(500 * 3600),
            mttr: SimDuration::from_secs(7200),
        }]
    );
    let csv = FailureSpec::parse(include_str!("../data/failures.csv"), &c).unwrap();
    assert_eq!(render(&csv), golden);
    assert_eq!(csv.checkpoint_interval, None);
    // The documented example is the fixture.
    let docs = include_str!("../../../../docs/failures.md");
    assert!(
        docs.contains(include_str!("../data/failures.yaml")),
        "docs/failures.md out of date"
    );
    assert!(
        docs.contains(include_str!("../data/failures.csv")),
        "docs/failures.md out of date"
    );
}

#[test]
fn bad_failures_files_are_refused_with_a_reason() {
    let c = cluster(2);
    let bad = [
        (
            "time,node,event\n10,node-9,down\n",
            "no node `node-9` in cluster cluster; its nodes are named GROUP-INDEX: node-0 to node-1",
        ),
        ("time,node,event\n-5,node-0,down\n", ">= 0"),
        ("time,node,event\n10,node-0,up\n", "without going down"),
        (
            "time,node,gpu,event\n10,node-0,1,down\n20,node-0,2,up\n",
            "without going down",
        ),
        (
            "time,node,event\n10,node-0,down\n20,node-0,down\n",
            "while down",
        ),
        ("time,node,gpu,event\n10,node-0,4,down\n", "no GPU 4"),
        ("time,node,gpu,event\n10,node-0,x,down\n", "not an index"),
        ("time,node,event\n10,node-0,explode\n", "unknown event"),
        ("time,node,event\n10,node-0\n", "2 fields"),
        (
            "time,node,event,duration\n10,node-0,up,5\n",
            "duration goes with `down`",
        ),
        (
            "time,node,event,duration\n10,node-0,down,0\n",
            "duration goes with `down`",
        ),
        ("time,host,event\n", "unknown column `host`"),
        ("time,node,event\nabc,node-0,down\n", "not a duration"),
        ("time,node,event\nNaN,node-0,down\n", ">= 0"),
        ("# nothing\n", "no events and no mtbf"),
        ("time,node,event\n", "no events and no mtbf"),
        (
            "events: [{ time: 1, node: node-0 }]\n",
            "event 1: an event needs",
        ),
        (
            "events: [{ time: -1h, node: node-0, event: down }]\n",
            ">= 0",
        ),
        (
            "events: [{ time: 1, node: node-0, event: down, colour: red }]\n",
            "unknown field",
        ),
        ("kind: Cluster\n", "expected `Failures`"),
        (
            "mtbf: [{ group: gpu-x, mtbf: 1h, mttr: 1h }]\n",
            "no node group `gpu-x`",
        ),
        ("mtbf: [{ mtbf: 0, mttr: 1h }]\n", "mtbf must be > 0"),
        ("checkpoint_interval: 0\n", "checkpoint interval is > 0"),
        ("checkpoints: { a: soon }\n", "not a duration"),
        ("{{{{ garbage ::: \n", ""),
        ("\u{0}\u{1}binary", ""),
    ];
    for (text, want) in bad {
        match FailureSpec::parse(text, &c) {
            Ok(s) => panic!("accepted {text:?}: {s:?}"),
            Err(e) => assert!(e.to_string().contains(want), "{text:?}: {e}"),
        }
    }
    // Line numbers name the offending row (comments and the header count).
    let e =
        FailureSpec::parse("# c\ntime,node,event\n10,node-0,down\n20,node-7,up\n", &c).unwrap_err();
    assert_eq!(e.line, Some(4), "{e}");
}

fn run_with(
    c: &Cluster,
    jobs: Vec<TrainingJob>,
    policy: &str,
    round: Option<u64>,
    costs: RestartCosts,
    spec: FailureSpec,
    check: bool,
) -> SimReport {
    let workload = Workload::new(jobs);
    let policy = build_policy(
        policy,
        &PolicyOptions {
            round: round.map(SimDuration::from_secs),
            ..PolicyOptions::default()
        },
    )
    .unwrap();
    let config = SimConfig {
        restart_costs: costs,
        failures: Some(Arc::new(spec)),
        ..SimConfig::default()
    };
    let mut sim = Simulation::new(c, &workload, &TraceThroughput, policy, config);
    let mut steps = 0u64;
    while sim.step().unwrap() {
        steps += 1;
        assert!(steps < 1_000_000, "run does not end");
        if check {
            sim.check_invariants()
                .unwrap_or_else(|e| panic!("after step {steps} at {}: {e}", sim.now()));
        }
    }
    sim.into_report()
}

/// One 4-GPU job of 1000 s on one node; checkpoints every 300 s; the node fails at 700 s for
/// 100 s; a restart costs 20 s. The job keeps its 600 s checkpoint (100 s of work and 400
/// GPU-seconds lost), restarts at 800 s, restores until 820 s and finishes at 820 + 400.
#[test]
fn one_failure_hand_checked() {
    let c = cluster(1);
    let spec = FailureSpec {
        checkpoint_interval: Some(SimDuration::from_secs(300)),
        ..FailureSpec::parse("time,node,event,duration\n700,node-0,down,100\n", &c).unwrap()
    };
    let r = run_with(
        &c,
        vec![job("a", 0, 4, 1000)],
        "fifo",
        None,
        RestartCosts::uniform(SimDuration::from_secs(20)),
        spec,
        true,
    );
    let j = &r.jobs[0];
    assert_eq!(j.outcome, JobOutcome::Finished);
    assert_eq!(j.finish, Some(SimTime::from_secs(1220)));
    let f = r.summary.failures.as_ref().unwrap();
    assert_eq!(f.failures, 1);
    assert_eq!(f.per_job[0].restarts, 1);
    assert!((f.per_job[0].lost_iterations - 100.0).abs() < 1e-9, "{f:?}");
    assert!((f.lost_gpu_hours - 400.0 / 3600.0).abs() < 1e-12, "{f:?}");
    assert!((f.down_gpu_hours - 400.0 / 3600.0).abs() < 1e-12, "{f:?}");
    assert_eq!((f.restarts_per_job.mean, f.restarts_per_job.max), (1.0, 1));
    // Held: 700 s, then 20 s of restore and 400 s of work, on 4 GPUs.
    assert!((j.gpu_secs - 4.0 * 1120.0).abs() < 1e-6, "{}", j.gpu_secs);
}

/// The same job failing during its restore loses the restore time and nothing of its work;
/// a per-job override beats the default interval; a single-GPU failure evicts it as well.
#[test]
fn failures_during_restore_and_per_job_intervals() {
    let c = cluster(1);
    let mut spec = FailureSpec::parse(
        "time,node,gpu,event,duration\n700,node-0,2,down,100\n810,node-0,,down,10\n",
        &c,
    )
    .unwrap();
    spec.checkpoint_interval = Some(SimDuration::from_secs(300));
    spec.checkpoints
        .insert("a".into(), Some(SimDuration::from_secs(250)));
    let r = run_with(
        &c,
        vec![job("a", 0, 4, 1000)],
        "fifo",
        None,
        RestartCosts::uniform(SimDuration::from_secs(20)),
        spec,
        true,
    );
    // Checkpoints at 250, 500: 200 s lost at 700. Restart at 800, down at 810 mid-restore
    // (10 s lost, no work), restart at 820, restore until 840, 500 s left: 1340.
    assert_eq!(r.jobs[0].finish, Some(SimTime::from_secs(1340)));
    let f = r.summary.failures.as_ref().unwrap();
    assert_eq!(f.failures, 2);
    assert_eq!(f.per_job[0].restarts, 2);
    assert!((f.per_job[0].lost_iterations - 200.0).abs() < 1e-9, "{f:?}");
    assert!(
        (f.per_job[0].lost_gpu_secs - 4.0 * 210.0).abs() < 1e-6,
        "{f:?}"
    );
}

#[test]
fn a_job_interrupted_too_often_fails_with_its_reason() {
    let c = cluster(1);
    let mut spec = FailureSpec::parse(
        "time,node,event,duration\n100,node-0,down,10\n200,node-0,down,10\n",
        &c,
    )
    .unwrap();
    spec.max_restarts = Some(1);
    let r = run_with(
        &c,
        vec![job("a", 0, 4, 1000), job("b", 0, 2, 50)],
        "fifo",
        None,
        RestartCosts::uniform(SimDuration::ZERO),
        spec,
        true,
    );
    match &r.jobs[0].outcome {
        JobOutcome::Failed { reason } => assert!(reason.contains("2 times"), "{reason}"),
        o => panic!("{o:?}"),
    }
    assert_eq!(r.jobs[1].outcome, JobOutcome::Finished);
    let f = r.summary.failures.as_ref().unwrap();
    assert_eq!(f.failed, 1);
    assert_eq!(f.failed_jobs[0].name, "a");
    // Failed jobs appear in summary.json with their reason.
    let json = serde_json::to_value(&r.summary).unwrap();
    assert_eq!(json["failed"], 1);
    assert_eq!(json["restarts_per_job"]["max"], 2);
    assert!(json["failed_jobs"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("failures"));
}

#[test]
fn without_failures_the_summary_is_unchanged() {
    let c = cluster(1);
    let r = crate::run(
        &c,
        vec![job("a", 0, 4, 100)],
        "fifo",
        None,
        RestartCosts::default(),
    );
    assert!(r.summary.failures.is_none());
    let json = serde_json::to_value(&r.summary).unwrap();
    assert!(json.get("lost_gpu_hours").is_none());
}

/// Non-overlapping down intervals for one device: (gap before, duration) pairs in seconds.
fn intervals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..600, 1u64..300), 0..4)
}

/// One device's listed failures: node, GPU (or the whole node), down intervals.
type Device = (u32, Option<u32>, Vec<(u64, u64)>);

fn csv_of(devices: &[Device]) -> String {
    let mut out = String::from("time,node,gpu,event,duration\n");
    for (node, gpu, ivs) in devices {
        let mut t = 0;
        for (gap, dur) in ivs {
            t += gap;
            out.push_str(&format!(
                "{t},node-{node},{},down,{dur}\n",
                gpu.map(|g| g.to_string()).unwrap_or_default()
            ));
            t += dur;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random failure schedules on two 4-GPU nodes under FIFO, SRTF (with rounds) and LAS:
    /// invariants after every event; every job finished, failed with a reason, or (only with
    /// drawn failures, which may keep capacity short) left queued with one; work conserved
    /// (held GPU time = useful + lost work, restarts free here); same seed, same report.
    #[test]
    fn random_failures_keep_invariants_and_conserve_work(
        jobs in prop::collection::vec((0u64..400, 1u32..=4, 10u64..400), 1..10),
        listed in prop::collection::vec((0u32..2, prop::option::of(0u32..4), intervals()), 0..4),
        drawn in prop::option::of((100u64..2000, 10u64..300)),
        interval in prop::option::of(20u64..300),
        max_restarts in prop::option::of(0u32..3),
        policy in prop::sample::select(vec!["fifo", "srtf", "las"]),
        seed in 0u64..1000,
    ) {
        let c = cluster(2);
        // One entry per device: merge duplicates so that intervals never overlap.
        let mut devices: Vec<Device> = Vec::new();
        for (n, g, ivs) in listed {
            if !devices.iter().any(|d| d.0 == n && d.1 == g) {
                devices.push((n, g, ivs));
            }
        }
        let mut spec = FailureSpec::parse_csv(&csv_of(&devices), &c).unwrap();
        spec.checkpoint_interval = interval.map(SimDuration::from_secs);
        spec.max_restarts = max_restarts;
        spec.seed = seed;
        if let Some((mtbf, mttr)) = drawn {
            spec.mtbf.push(GroupMtbf {
                group: None,
                mtbf: SimDuration::from_secs(mtbf),
                mttr: SimDuration::from_secs(mttr),
            });
        }
        let listed_downs = spec.events.iter().filter(|e| e.health == Health::Down).count() as u64;
        let mut jobs: Vec<TrainingJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, &(at, g, secs))| job(&format!("j{i}"), at, g, secs))
            .collect();
        // In the workload's order (stable by submission), so that records line up.
        jobs.sort_by_key(|j| j.submit);
        let round = (policy != "fifo").then_some(60);
        let r = run_with(&c, jobs.clone(), policy, round, RestartCosts::uniform(SimDuration::ZERO), spec.clone(), true);
        let f = r.summary.failures.clone().unwrap();
        // The run ends with its last job: listed downs before then all apply, later ones not.
        let end = r.jobs.iter().filter_map(|j| j.finish).max().unwrap_or(SimTime::ZERO);
        let before_end = spec.events.iter().filter(|e| e.health == Health::Down && e.time < end).count() as u64;
        prop_assert!(f.failures >= before_end, "{} < {}", f.failures, before_end);
        if drawn.is_none() {
            prop_assert!(f.failures <= listed_downs);
        }
        let mut lost_total = 0.0;
        for (rec, j) in r.jobs.iter().zip(&jobs) {
            let pf = f.per_job[rec.job.index()];
            match &rec.outcome {
                JobOutcome::Finished => prop_assert_eq!(rec.iterations_done, j.iterations as f64),
                JobOutcome::Failed { reason } => {
                    prop_assert!(max_restarts.is_some_and(|m| pf.restarts > m), "{}", reason);
                    prop_assert!(f.failed_jobs.iter().any(|x| *x.name == *j.name && &x.reason == reason));
                }
                JobOutcome::Unfinished { reason } => {
                    prop_assert!(drawn.is_some(), "{} unfinished without drawn failures: {}", j.name, reason);
                    prop_assert!(!reason.is_empty());
                }
                JobOutcome::Rejected { reason } => prop_assert!(false, "{} rejected: {}", j.name, reason),
            }
            prop_assert!(pf.lost_iterations >= 0.0 && pf.lost_gpu_secs >= -1e-9);
            if pf.restarts == 0 {
                prop_assert_eq!(pf.lost_iterations, 0.0);
            }
            // Conservation: at 1 iteration per second on its GPUs, the time a job held them
            // is its useful work plus the work it lost (restarts cost nothing here); each run
            // ends on a µs-rounded completion.
            let held = rec.gpu_secs / j.gpus as f64;
            let work = rec.iterations_done + pf.lost_iterations;
            let runs = (rec.preemptions + 1) as f64;
            prop_assert!((held - work).abs() <= 2e-6 * runs + 1e-9 * work,
                "{}: held {} s for {} useful + {} lost", j.name, held, rec.iterations_done, pf.lost_iterations);
            // Lost GPU-seconds are the lost work on its GPUs.
            prop_assert!((pf.lost_gpu_secs - j.gpus as f64 * pf.lost_iterations).abs() <= 2e-6 * runs * j.gpus as f64 + 1e-9 * pf.lost_gpu_secs,
                "{}: {:?}", j.name, pf);
            lost_total += pf.lost_gpu_secs;
        }
        prop_assert!((f.lost_gpu_hours * 3600.0 - lost_total).abs() < 1e-6);
        prop_assert_eq!(f.failed, r.jobs.iter().filter(|j| matches!(j.outcome, JobOutcome::Failed { .. })).count());
        // Determinism: the same inputs and seed give the same report.
        let again = run_with(&c, jobs, policy, round, RestartCosts::uniform(SimDuration::ZERO), spec, false);
        prop_assert_eq!(&r.summary, &again.summary);
        prop_assert_eq!(&r.jobs, &again.jobs);
    }
}

/// Starts every queued job on GPU 0 of node 0, named explicitly (a policy that ignores
/// health).
struct GpuZero;

impl tessera_sched::Policy for GpuZero {
    fn name(&self) -> &str {
        "gpu-zero"
    }
    fn round_length(&self) -> Option<SimDuration> {
        None
    }
    fn schedule(
        &mut self,
        view: &tessera_sched::ClusterView<'_>,
        actions: &mut Vec<tessera_sched::Action>,
    ) {
        use tessera_model::{Allocation, DeviceAlloc, GpuMask, GpuPart, NodeId, NodeShare};
        for a in view
            .active
            .iter()
            .filter(|a| a.state == tessera_sched::JobState::Queued)
        {
            actions.push(tessera_sched::Action::Start {
                job: a.id,
                allocation: Allocation::new(vec![NodeShare {
                    node: NodeId(0),
                    gpus: 1,
                    cpu: MilliCpu::from_cores(1),
                    memory: Bytes::from_gib(1),
                    devices: Some(DeviceAlloc {
                        gpus: GpuMask::one(0),
                        part: GpuPart::Whole,
                    }),
                }]),
            });
        }
    }
}

/// A policy that places a job on a GPU that is down is refused once, with the reason, and
/// the run stops (it does not retry forever).
#[test]
fn a_start_on_a_down_gpu_is_refused_by_name() {
    let c = cluster(1);
    let spec =
        FailureSpec::parse("time,node,gpu,event,duration\n5,node-0,0,down,100\n", &c).unwrap();
    let w = Workload::new(vec![job("a", 10, 1, 10)]);
    let config = SimConfig {
        failures: Some(Arc::new(spec)),
        ..SimConfig::default()
    };
    let err = Simulation::new(&c, &w, &TraceThroughput, Box::new(GpuZero), config)
        .run(&mut ())
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("GPU 0 of node-0 is down") && text.contains("at 10.000s"),
        "{text}"
    );
}

/// Keeps `target` whole-GPU instances per active service and starts queued jobs on whole
/// GPUs, picking only GPUs that are whole-free (never down) and ready; removes instances of
/// ended services.
struct WholeScaler {
    target: usize,
}

impl tessera_sched::Policy for WholeScaler {
    fn name(&self) -> &str {
        "whole-scaler"
    }
    fn round_length(&self) -> Option<SimDuration> {
        Some(SimDuration::from_secs(1))
    }
    fn schedule(
        &mut self,
        view: &tessera_sched::ClusterView<'_>,
        actions: &mut Vec<tessera_sched::Action>,
    ) {
        use tessera_model::{Allocation, DeviceAlloc, GpuMask, GpuPart, NodeShare};
        use tessera_sched::{Action, JobState, ServicePhase};
        let mut free: Vec<(tessera_model::NodeId, u32)> = view
            .cluster
            .nodes
            .iter()
            .flat_map(|n| {
                view.state
                    .gpus(n.id)
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.is_whole_free() && g.ready_at <= view.now)
                    .map(move |(i, _)| (n.id, i as u32))
            })
            .collect();
        free.reverse();
        let one = |(node, gpu): (tessera_model::NodeId, u32)| {
            Allocation::new(vec![NodeShare {
                node,
                gpus: 1,
                cpu: MilliCpu::from_cores(1),
                memory: Bytes::from_gib(4),
                devices: Some(DeviceAlloc {
                    gpus: GpuMask::one(gpu),
                    part: GpuPart::Whole,
                }),
            }])
        };
        for s in view.services {
            match s.phase {
                ServicePhase::Active => {
                    for _ in s.instances.len()..self.target {
                        let Some(g) = free.pop() else { break };
                        actions.push(Action::ScaleOut {
                            service: s.spec.id,
                            allocation: one(g),
                        });
                    }
                }
                ServicePhase::Ended => {
                    for i in &s.instances {
                        actions.push(Action::ScaleIn {
                            service: s.spec.id,
                            instance: i.id,
                        });
                    }
                }
                _ => {}
            }
        }
        for j in view.active.iter().filter(|j| j.state == JobState::Queued) {
            if view.jobs[j.id.index()].gpus != 1 {
                continue;
            }
            let Some(g) = free.pop() else { break };
            actions.push(Action::Start {
                job: j.id,
                allocation: one(g),
            });
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Services beside jobs under random GPU and node failures: instances on a failed GPU
    /// are scaled in (a batch in flight finishes on the down GPU first), the invariants hold
    /// after every event (every request served or dropped, no job on a down GPU, free + held
    /// + down = capacity), and every job finishes.
    #[test]
    fn services_and_jobs_under_failures_keep_invariants(
        listed in prop::collection::vec((0u32..2, prop::option::of(0u32..4), intervals()), 1..5),
        jobs in prop::collection::vec((0u64..60, 5u64..120), 0..6),
        rate in 5.0f64..200.0,
        target in 1usize..3,
        seed in 0u64..100,
    ) {
        let c = cluster(2);
        let mut devices: Vec<Device> = Vec::new();
        for (n, g, ivs) in listed {
            if !devices.iter().any(|d| d.0 == n && d.1 == g) {
                // Seconds are scaled down to the service's minute-long life.
                devices.push((n, g, ivs.iter().map(|&(a, b)| (a / 10, b / 10 + 1)).collect()));
            }
        }
        let mut spec = FailureSpec::parse_csv(&csv_of(&devices), &c).unwrap();
        spec.checkpoint_interval = Some(SimDuration::from_secs(10));
        let jobs: Vec<TrainingJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, &(at, secs))| job(&format!("j{i}"), at, 1, secs))
            .collect();
        let service = tessera_model::InferenceService::simple(
            "svc",
            SimTime::ZERO,
            SimTime::from_secs(90),
            rate,
        );
        let w = Workload::with_services(jobs, vec![service]);
        let config = SimConfig {
            failures: Some(Arc::new(spec)),
            serving: tessera_sim::ServingConfig { seed, ..Default::default() },
            ..SimConfig::default()
        };
        let mut sim = Simulation::new(&c, &w, &TraceThroughput, Box::new(WholeScaler { target }), config);
        let mut steps = 0u64;
        while sim.step().unwrap() {
            steps += 1;
            prop_assert!(steps < 1_000_000);
            if let Err(e) = sim.check_invariants() {
                prop_assert!(false, "after step {} at {}: {}", steps, sim.now(), e);
            }
        }
        let r = sim.into_report();
        for rec in &r.jobs {
            prop_assert_eq!(&rec.outcome, &JobOutcome::Finished, "{}", rec.name);
        }
        let s = &r.summary.services[0];
        prop_assert_eq!(s.requests, s.served + s.dropped);
    }
}
