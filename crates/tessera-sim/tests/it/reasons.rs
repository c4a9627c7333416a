//! Time waited per reason (`SimReport::waits`, `jobs.csv`'s `wait_KIND_s`): each kind the
//! generic analysis and the baselines give, from a scenario that causes it, timed by hand.

use std::sync::Arc;

use tessera_model::{
    Bytes, Cluster, GpuCatalog, Knowledge, MilliCpu, SimDuration, SimRng, TrainingJob, Workload,
};
use tessera_perf::{Profiler, RestartCosts, TraceThroughput};
use tessera_sched::baselines::build as build_policy;
use tessera_sched::{Action, ClusterView, JobState, Ledger, Policy, PolicyOptions, WaitKind};
use tessera_sim::{FailureSpec, SimConfig, SimReport, Simulation};

use crate::{job, one_node, run};

/// Seconds `name` waited per kind, with every kind listed (0 included).
fn waited(r: &SimReport, name: &str) -> Vec<(WaitKind, f64)> {
    let j = r.jobs.iter().find(|j| &*j.name == name).unwrap();
    WaitKind::ALL
        .iter()
        .map(|&k| (k, r.waits[j.job.index()][k.index()]))
        .collect()
}

/// Asserts `name` waited exactly `want` (kind, seconds), nothing else.
fn expect(r: &SimReport, name: &str, want: &[(WaitKind, f64)]) {
    let got = waited(r, name);
    for (k, s) in &got {
        let w = want.iter().find(|(wk, _)| wk == k).map_or(0.0, |(_, s)| *s);
        assert!(
            (s - w).abs() < 1e-9,
            "{name} under {}: {got:?}, want {want:?}",
            r.policy
        );
    }
}

/// Every job's waits add up to its time queued: arrival to first start, plus time queued
/// again after preemptions (none here but where said).
fn assert_sums_to_queueing(r: &SimReport) {
    for j in &r.jobs {
        let total: f64 = r.waits[j.job.index()].iter().sum();
        if j.preemptions == 0 {
            let q = j.queue_secs().unwrap_or(0.0);
            assert!((total - q).abs() < 1e-6, "{}: {total} vs {q}", j.name);
        }
    }
}

#[test]
fn gpus_when_too_few_are_free() {
    // A holds all 4 GPUs until 100; B (2 GPUs) arrives at 10 and waits 90 s for GPUs.
    let r = run(
        &one_node(4),
        vec![job("A", 0, 4, 100), job("B", 10, 2, 50)],
        "fifo",
        None,
        RestartCosts::free(),
    );
    expect(&r, "A", &[]);
    expect(&r, "B", &[(WaitKind::Gpus, 90.0)]);
    assert_sums_to_queueing(&r);
}

#[test]
fn cpu_memory_when_gpus_are_free_without_them() {
    // 24 cores: A takes 1 GPU and 20 cores for 100 s; B asks 1 GPU and 10 cores at 0: three
    // GPUs are free, not the cores.
    let mut a = job("A", 0, 1, 100);
    a.cpu = Some(MilliCpu::from_cores(20));
    let mut b = job("B", 0, 1, 10);
    b.cpu = Some(MilliCpu::from_cores(10));
    b.memory = Some(Bytes::from_gib(8));
    let r = run(&one_node(4), vec![a, b], "fifo", None, RestartCosts::free());
    expect(&r, "B", &[(WaitKind::CpuMemory, 100.0)]);
    assert_sums_to_queueing(&r);
}

/// One node of 2 A100s and one of 2 V100s.
fn two_types() -> Cluster {
    let yaml = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    \
        - {name: a100, count: 1, gpu: A100-80GB, gpusPerNode: 2, cpus: 32, memory: 256Gi}\n    \
        - {name: v100, count: 1, gpu: V100-32GB, gpusPerNode: 2, cpus: 32, memory: 256Gi}\n";
    Cluster::from_yaml(yaml, &GpuCatalog::builtin()).unwrap()
}

#[test]
fn gang_when_the_free_gpus_are_of_two_types() {
    // A holds one A100, B one V100 until 100: C (2 GPUs, any type) sees 2 free GPUs, one of
    // each type; a job stays within one type.
    let c = two_types();
    let mut a = job("A", 0, 1, 100);
    a.gpu_types = vec![c.catalog.find("A100-80GB").unwrap()];
    let mut b = job("B", 0, 1, 100);
    b.gpu_types = vec![c.catalog.find("V100-32GB").unwrap()];
    let r = run(
        &c,
        vec![a, b, job("C", 0, 2, 10)],
        "fifo",
        None,
        RestartCosts::free(),
    );
    expect(&r, "C", &[(WaitKind::Gang, 100.0)]);
    assert_sums_to_queueing(&r);
}

/// Starts queued jobs in submission order where they fit, only at its rounds (every 60 s):
/// between rounds a job that fits waits for the policy.
struct AtRounds;

impl Policy for AtRounds {
    fn name(&self) -> &str {
        "at-rounds"
    }
    fn round_length(&self) -> Option<SimDuration> {
        Some(SimDuration::from_secs(60))
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        if !view.trigger.round {
            return;
        }
        let mut queued: Vec<&TrainingJob> = view
            .active
            .iter()
            .filter(|a| a.state == JobState::Queued)
            .filter_map(|a| view.spec(a))
            .collect();
        queued.sort_by_key(|j| (j.submit, j.id));
        let mut ledger = Ledger::from_state(view.cluster, view.state);
        for j in queued {
            if let Some(allocation) = ledger.place(j) {
                actions.push(Action::Start {
                    job: j.id,
                    allocation,
                });
            }
        }
    }
}

fn run_policy(
    cluster: &Cluster,
    jobs: Vec<TrainingJob>,
    policy: Box<dyn Policy>,
    config: SimConfig,
) -> SimReport {
    let workload = Workload::new(jobs);
    Simulation::new(cluster, &workload, &TraceThroughput, policy, config)
        .run(&mut ())
        .unwrap()
}

#[test]
fn order_when_the_policy_holds_a_job_that_fits() {
    // Rounds at 0, 60, 120...: A arrives at 10 and fits at once, but starts at 60.
    let r = run_policy(
        &one_node(4),
        vec![job("A", 10, 1, 30)],
        Box::new(AtRounds),
        SimConfig::default(),
    );
    expect(&r, "A", &[(WaitKind::Order, 50.0)]);
    assert_sums_to_queueing(&r);
}

/// Profiling that takes 30 s and teaches nothing.
#[derive(Debug)]
struct SlowProfiler;

impl Profiler for SlowProfiler {
    fn cost(&self) -> SimDuration {
        SimDuration::from_secs(30)
    }
    fn profile(&self, _: &TrainingJob, _: &Cluster, _: &mut SimRng) -> Knowledge {
        Knowledge::new()
    }
}

#[test]
fn profiling_while_the_job_is_profiled() {
    // A (4 GPUs, 100 s) is profiled 0 → 30, starts at 30; B arrives at 10, is profiled until
    // 40, then waits for A's GPUs until 130.
    let policy = build_policy("fifo", &PolicyOptions::default()).unwrap();
    let r = run_policy(
        &one_node(4),
        vec![job("A", 0, 4, 100), job("B", 10, 4, 10)],
        policy,
        SimConfig {
            profiler: Some(Arc::new(SlowProfiler)),
            ..SimConfig::default()
        },
    );
    expect(&r, "A", &[(WaitKind::Profiling, 30.0)]);
    expect(
        &r,
        "B",
        &[(WaitKind::Profiling, 30.0), (WaitKind::Gpus, 90.0)],
    );
    assert_sums_to_queueing(&r);
}

#[test]
fn unavailable_while_the_node_is_down() {
    // One node of 4 GPUs, down from 50 to 150: A (4 GPUs, 100 s) is interrupted at 50 and waits
    // for the node until 150 (it restarts from its start: no checkpoint).
    let c = Cluster::homogeneous(
        "V100-32GB",
        1,
        4,
        MilliCpu::from_cores(24),
        Bytes::from_gib(256),
    )
    .unwrap();
    let spec = FailureSpec::parse("time,node,event,duration\n50,node-0,down,100\n", &c).unwrap();
    let policy = build_policy("fifo", &PolicyOptions::default()).unwrap();
    let r = run_policy(
        &c,
        vec![job("A", 0, 4, 100)],
        policy,
        SimConfig {
            failures: Some(Arc::new(spec)),
            ..SimConfig::default()
        },
    );
    expect(&r, "A", &[(WaitKind::Unavailable, 100.0)]);
}

#[test]
fn time_queued_again_after_a_preemption_counts() {
    // SRTF: A (4 GPUs, 100 s) runs from 0; B (2, 50 s) preempts it at 10, C (2, 30 s) runs
    // beside B from 20; A waits for GPUs 10 → 60 (see `srtf_preempts_for_shorter_jobs`).
    let r = run(
        &one_node(4),
        vec![
            job("A", 0, 4, 100),
            job("B", 10, 2, 50),
            job("C", 20, 2, 30),
        ],
        "srtf",
        None,
        RestartCosts::free(),
    );
    expect(&r, "A", &[(WaitKind::Gpus, 50.0)]);
    expect(&r, "B", &[]);
    expect(&r, "C", &[]);
}
