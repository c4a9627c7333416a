//! Randomized runs checked after every event: capacity is never exceeded, free + held equals
//! capacity, work is conserved, every job ends, and a run is a pure function of its inputs.

use proptest::prelude::*;
use tessera_model::{
    Bytes, Cluster, ClusterSpec, GpuCatalog, MilliCpu, SimDuration, SimTime, TrainingJob, Workload,
};
use tessera_perf::{RestartCosts, TraceThroughput};
use tessera_sched::baselines::{build as build_policy, POLICIES};
use tessera_sched::PolicyOptions;
use tessera_sim::{JobOutcome, SimConfig, SimReport, Simulation};

fn cluster_strategy() -> impl Strategy<Value = Cluster> {
    prop::collection::vec(
        (
            1u32..5,
            prop::sample::select(vec![1u32, 2, 4, 8]),
            0usize..3,
        ),
        1..3,
    )
    .prop_map(|groups| {
        let gpus = ["V100-32GB", "A100-40GB", "T4"];
        let node_groups = groups
            .iter()
            .enumerate()
            .map(
                |(i, &(count, per_node, gpu))| tessera_model::cluster::NodeGroupSpec {
                    name: format!("g{i}"),
                    count,
                    gpu: gpus[gpu].to_string(),
                    gpus_per_node: per_node,
                    cpus: MilliCpu::from_cores(8 * per_node as u64),
                    memory: Bytes::from_gib(64 * per_node as u64),
                    rack: None,
                },
            )
            .collect();
        let spec = ClusterSpec {
            api_version: "tessera/v1".into(),
            kind: "Cluster".into(),
            metadata: None,
            spec: tessera_model::cluster::ClusterBody { node_groups },
        };
        Cluster::from_spec(&spec, &GpuCatalog::builtin()).unwrap()
    })
}

fn jobs_strategy() -> impl Strategy<Value = Vec<TrainingJob>> {
    prop::collection::vec(
        (
            0u64..3_000,
            prop::sample::select(vec![1u32, 1, 1, 2, 4, 8, 16]),
            1u64..2_000,
        ),
        1..40,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (submit, gpus, secs))| {
                let mut j = TrainingJob::simple(
                    i as u32,
                    SimTime::from_secs(submit),
                    gpus,
                    SimDuration::from_secs(secs),
                );
                j.model = ["resnet50", "bert", "gnmt"][i % 3].into();
                j
            })
            .collect()
    })
}

fn simulate(
    cluster: &Cluster,
    workload: &Workload,
    policy: &str,
    round: Option<u64>,
    check: bool,
) -> SimReport {
    let policy = build_policy(
        policy,
        &PolicyOptions {
            round: round.map(SimDuration::from_secs),
            ..PolicyOptions::default()
        },
    )
    .unwrap();
    let mut sim = Simulation::new(
        cluster,
        workload,
        &TraceThroughput,
        policy,
        SimConfig::default(),
    );
    let mut steps = 0u64;
    while sim.step().unwrap() {
        if check {
            if let Err(e) = sim.check_invariants() {
                panic!("after step {steps} at {}: {e}", sim.now());
            }
        }
        steps += 1;
        assert!(steps < 1_000_000, "run does not terminate");
    }
    sim.check_invariants().unwrap();
    sim.into_report()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn invariants_hold_after_every_event(
        cluster in cluster_strategy(),
        jobs in jobs_strategy(),
        policy in prop::sample::select(POLICIES.iter().map(|p| p.name).collect::<Vec<_>>()),
        round in prop::option::of(30u64..600),
    ) {
        let workload = Workload::new(jobs);
        let report = simulate(&cluster, &workload, policy, round, true);
        let (total_gpus, _, _) = cluster.totals();
        for (rec, job) in report.jobs.iter().zip(workload.jobs()) {
            let max = cluster.max_gpus_for(&job.gpu_types);
            match &rec.outcome {
                JobOutcome::Finished => {
                    prop_assert_eq!(rec.iterations_done, job.iterations as f64);
                    // Nothing finishes faster than its isolated run time.
                    let jct = rec.jct_secs().unwrap();
                    prop_assert!(jct + 1e-6 >= job.duration.as_secs_f64(), "{} < {}", jct, job.duration);
                }
                JobOutcome::Rejected { .. } => prop_assert!(job.gpus as u64 > max && cluster.can_ever_fit(job).is_err()),
                JobOutcome::Unfinished { reason } | JobOutcome::Failed { reason } => prop_assert!(false, "job {} unfinished: {}", job.name, reason),
            }
        }
        prop_assert!(report.summary.gpu_util <= 1.0 + 1e-9);
        prop_assert!(report.timeseries.iter().all(|s| s.gpus <= total_gpus));
        // The series records every change (issue 10): its integral of busy GPUs is the jobs'
        // GPU-seconds, and it ends with nothing busy.
        let series = &report.timeseries;
        let integral: f64 = series
            .windows(2)
            .map(|w| w[0].gpus as f64 * w[1].time.saturating_since(w[0].time).as_secs_f64())
            .sum();
        let gpu_secs: f64 = report.jobs.iter().map(|j| j.gpu_secs).sum();
        prop_assert!((integral - gpu_secs).abs() <= 1e-6 * gpu_secs.max(1.0), "series {} vs jobs {}", integral, gpu_secs);
        if let Some(last) = series.last() {
            prop_assert_eq!(last.gpus, 0);
            prop_assert_eq!(last.running, 0);
        }
    }

    #[test]
    fn same_inputs_same_report(
        cluster in cluster_strategy(),
        jobs in jobs_strategy(),
        policy in prop::sample::select(POLICIES.iter().map(|p| p.name).collect::<Vec<_>>()),
    ) {
        let workload = Workload::new(jobs);
        let a = simulate(&cluster, &workload, policy, Some(120), false);
        let b = simulate(&cluster, &workload, policy, Some(120), false);
        prop_assert_eq!(a, b);
    }
}

#[test]
fn restart_costs_never_lose_work() {
    // Heavy preemption under event-driven LAS with large restart costs still finishes all.
    let cluster = Cluster::homogeneous(
        "V100-32GB",
        2,
        4,
        MilliCpu::from_cores(32),
        Bytes::from_gib(256),
    )
    .unwrap();
    let jobs = (0..60)
        .map(|i| {
            TrainingJob::simple(
                i,
                SimTime::from_secs(i as u64 * 7),
                1 + i % 4,
                SimDuration::from_secs(50 + (i as u64 * 37) % 400),
            )
        })
        .collect();
    let workload = Workload::new(jobs);
    let policy = build_policy("las", &PolicyOptions::default()).unwrap();
    let config = SimConfig {
        restart_costs: RestartCosts::uniform(SimDuration::from_secs(40)),
        ..SimConfig::default()
    };
    let mut sim = Simulation::new(&cluster, &workload, &TraceThroughput, policy, config);
    while sim.step().unwrap() {
        sim.check_invariants().unwrap();
    }
    let report = sim.into_report();
    assert_eq!(report.summary.finished, 60);
    assert!(report.summary.preemptions > 0);
}

/// The same policy without the driver's change reports or lazy progress (issue 11): it ranks
/// `view.active` from scratch at every call and sees every running job synced, and it is
/// called at every scheduling point (`may_act` keeps its default).
struct FullRank(Box<dyn tessera_sched::Policy>);

impl tessera_sched::Policy for FullRank {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn round_length(&self) -> Option<SimDuration> {
        self.0.round_length()
    }
    fn schedule(
        &mut self,
        view: &tessera_sched::ClusterView<'_>,
        actions: &mut Vec<tessera_sched::Action>,
    ) {
        self.0.schedule(view, actions)
    }
}

/// Every job's (first start, finish, preemptions): what the policy decided, exactly.
fn decisions(r: &SimReport) -> Vec<(Option<SimTime>, Option<SimTime>, u32)> {
    r.jobs
        .iter()
        .map(|j| (j.first_start, j.finish, j.preemptions))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The baselines' incremental queue (and FIFO's lazy progress, and the scheduling points
    /// skipped when nothing waits) decide exactly what ranking every active job at every
    /// call decides, and count the same scheduling points.
    #[test]
    fn incremental_queue_decides_as_full_ranking(
        cluster in cluster_strategy(),
        jobs in jobs_strategy(),
        policy in prop::sample::select(POLICIES.iter().map(|p| p.name).collect::<Vec<_>>()),
        round in prop::option::of(30u64..600),
        restore in prop::option::of(1u64..400),
    ) {
        let workload = Workload::new(jobs);
        let options = PolicyOptions {
            round: round.map(SimDuration::from_secs),
            ..PolicyOptions::default()
        };
        // Restores longer and shorter than rounds: LAS computes the service of jobs still
        // restoring differently from those past it.
        let config = SimConfig {
            restart_costs: restore.map_or_else(RestartCosts::default, |s| {
                RestartCosts::uniform(SimDuration::from_secs(s))
            }),
            ..SimConfig::default()
        };
        let run = |p: Box<dyn tessera_sched::Policy>| {
            Simulation::new(&cluster, &workload, &TraceThroughput, p, config.clone())
                .run(&mut ())
                .unwrap()
        };
        let fast = run(build_policy(policy, &options).unwrap());
        let full = run(Box::new(FullRank(build_policy(policy, &options).unwrap())));
        prop_assert_eq!(decisions(&fast), decisions(&full));
        prop_assert_eq!(fast.summary.avg_jct_s.to_bits(), full.summary.avg_jct_s.to_bits());
        prop_assert_eq!(fast.summary.events, full.summary.events);
        prop_assert_eq!(fast.summary.scheduling_points, full.summary.scheduling_points);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// LAS with rounds over its tracked running jobs (attained service computed, never
    /// synced; issue 11) decides exactly what ranking every synced active job decides, with
    /// and without restores in progress at the rounds.
    #[test]
    fn las_running_index_decides_as_full_ranking(
        cluster in cluster_strategy(),
        jobs in jobs_strategy(),
        round in 20u64..400,
        restore in 0u64..300,
    ) {
        let workload = Workload::new(jobs);
        let options = PolicyOptions {
            round: Some(SimDuration::from_secs(round)),
            ..PolicyOptions::default()
        };
        let config = SimConfig {
            restart_costs: RestartCosts::uniform(SimDuration::from_secs(restore)),
            ..SimConfig::default()
        };
        let run = |p: Box<dyn tessera_sched::Policy>| {
            let mut sim = Simulation::new(&cluster, &workload, &TraceThroughput, p, config.clone());
            while sim.step().unwrap() {
                sim.check_invariants().unwrap();
            }
            sim.into_report()
        };
        let fast = run(build_policy("las", &options).unwrap());
        let full = run(Box::new(FullRank(build_policy("las", &options).unwrap())));
        prop_assert_eq!(decisions(&fast), decisions(&full));
        prop_assert_eq!(fast.summary.preemptions, full.summary.preemptions);
        prop_assert_eq!(fast.summary.events, full.summary.events);
    }
}
