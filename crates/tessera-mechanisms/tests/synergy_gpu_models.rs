//! Synergy's LAS re-plans select by GPU model, as the baselines' do (issue 38): on 2 A100 +
//! 2 V100, a job restricted to the A100s that another holds gets one at the next round. (The
//! walk budgeted against the cluster's free GPUs: with the V100s idle, the two "fitted"
//! together, and the arriving job waited until the other ended.)

use tessera_model::{Cluster, GpuCatalog, SimDuration, SimTime, TrainingJob, Workload};
use tessera_perf::TraceThroughput;
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, Simulation};

#[test]
fn synergy_las_preempts_for_a_job_restricted_to_a_busy_gpu_model() {
    let yaml = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: a100, count: 1, gpu: A100-40GB, gpusPerNode: 2, cpus: 16, memory: 64Gi}\n    - {name: v100, count: 1, gpu: V100-32GB, gpusPerNode: 2, cpus: 16, memory: 64Gi}\n";
    let c = Cluster::from_yaml(yaml, &GpuCatalog::builtin()).unwrap();
    let a100 = c.catalog.resolve("A100-40GB").unwrap();
    let job = |i: u32, submit: u64, gpus: u32, secs: u64| {
        let mut j = TrainingJob::simple(
            i,
            SimTime::from_secs(submit),
            gpus,
            SimDuration::from_secs(secs),
        );
        j.gpu_types = vec![a100];
        j
    };
    let w = Workload::new(vec![job(0, 0, 2, 300), job(1, 20, 1, 30)]);
    for name in ["las+proportional", "las+greedy", "las+tune"] {
        let policy = tessera_mechanisms::build_policy(
            name,
            &PolicyOptions {
                round: Some(SimDuration::from_secs(60)),
                ..PolicyOptions::default()
            },
        )
        .unwrap();
        let config = SimConfig {
            record_timeseries: false,
            ..SimConfig::default()
        };
        let r = Simulation::new(&c, &w, &TraceThroughput, policy, config)
            .run(&mut ())
            .unwrap();
        assert_eq!(
            r.jobs[1].first_start,
            Some(SimTime::from_secs(60)),
            "{name}: b starts"
        );
        assert_eq!(r.jobs[0].preemptions, 1, "{name}: a gives way");
    }
}
