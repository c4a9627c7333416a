//! Crius's policies on the simulator: the engine's invariants after every step, every job's
//! GPUs of one type, every job finished; Crius beats FCFS on average JCT.

use std::sync::Arc;

use tessera_mechanisms::build_policy;
use tessera_mechanisms::crius::perf::{CellEstimator, CellThroughput};
use tessera_mechanisms::crius::workload;
use tessera_model::SimTime;
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, Simulation};

fn run(policy: &str, jobs: usize, load: f64, seed: u64) -> f64 {
    let cluster = workload::cluster().unwrap();
    let work = workload::generate(jobs, load, seed).unwrap();
    let truth = CellThroughput::default();
    let config = SimConfig {
        profiler: Some(Arc::new(CellEstimator::default())),
        time_limit: Some(SimTime::from_secs(60 * 86_400)),
        ..SimConfig::default()
    };
    let p = build_policy(policy, &PolicyOptions::default()).unwrap();
    let mut sim = Simulation::new(&cluster, &work, &truth, p, config);
    while sim.step().unwrap() {
        if let Err(e) = sim.check_invariants() {
            panic!("{policy} at {}: {e}", sim.now());
        }
        for a in sim.active() {
            if let Some(alloc) = &a.allocation {
                let first = cluster.nodes[alloc.shares[0].node.index()].gpu;
                assert!(
                    alloc
                        .shares
                        .iter()
                        .all(|s| cluster.nodes[s.node.index()].gpu == first),
                    "{policy}: job {:?} on mixed GPU types",
                    a.id
                );
                if let Some(plan) = alloc.plan {
                    assert_eq!(plan.devices(), alloc.gpus(), "{policy}: plan {plan}");
                }
            }
        }
    }
    let report = sim.into_report();
    assert_eq!(
        report.summary.finished, jobs,
        "{policy}: every job finishes"
    );
    report.summary.avg_jct_s
}

#[test]
fn every_crius_policy_keeps_the_invariants_and_finishes_everything() {
    for policy in [
        "fcfs",
        "crius",
        "crius-no-shrink",
        "crius-no-typechange",
        "crius-no-opportunistic",
        "crius-no-migration",
        "crius-dp-only",
    ] {
        run(policy, 150, 200.0, 5);
    }
}

#[test]
fn crius_has_lower_average_jct_than_fcfs() {
    let fcfs = run("fcfs", 400, 120.0, 2);
    let crius = run("crius", 400, 120.0, 2);
    assert!(crius < fcfs, "crius {crius} vs fcfs {fcfs}");
}

/// An untyped job larger than all the GPUs of the type listed first (or estimated fastest)
/// asks on a type that can hold it: it used to wait forever (the engine now stops such a run
/// as stalled).
#[test]
fn an_untyped_job_asks_on_a_type_that_can_hold_it() {
    let yaml = "apiVersion: tessera/v1\nkind: Cluster\nmetadata: {name: m}\nspec:\n  nodeGroups:\n    - {name: g0, count: 1, gpu: A100-80GB, gpusPerNode: 4, cpus: 32, memory: 256Gi}\n    - {name: g1, count: 3, gpu: V100-32GB, gpusPerNode: 1, cpus: 8, memory: 64Gi}\n    - {name: g2, count: 1, gpu: A10, gpusPerNode: 8, cpus: 64, memory: 512Gi}\n";
    let cluster =
        tessera_model::Cluster::from_yaml(yaml, &tessera_model::GpuCatalog::builtin()).unwrap();
    let mut job = tessera_model::TrainingJob::simple(
        0,
        SimTime::from_secs(18),
        8,
        tessera_model::SimDuration::from_secs(1835),
    );
    job.model = "resnet18".into();
    let work = tessera_model::Workload::new(vec![job]);
    for policy in ["crius", "crius-dp-only", "fcfs"] {
        let config = SimConfig {
            profiler: Some(Arc::new(CellEstimator::default())),
            ..SimConfig::default()
        };
        let p = build_policy(policy, &PolicyOptions::default()).unwrap();
        let report = Simulation::new(&cluster, &work, &tessera_perf::TraceThroughput, p, config)
            .run(&mut ())
            .unwrap_or_else(|e| panic!("{policy}: {e}"));
        assert_eq!(report.summary.finished, 1, "{policy}");
    }
}
