//! Synergy in the simulator: engine invariants under the composed policies with profiling,
//! the profiling delay, and the reproduction's ordering on a reduced setup.

use std::sync::Arc;

use proptest::prelude::*;
use tessera_mechanisms::build_policy;
use tessera_mechanisms::synergy::experiment::{reference_cluster, run_one, RunSpec, Semantics};
use tessera_mechanisms::synergy::perf::{OptimisticProfiler, SynergyThroughput, TableMode};
use tessera_mechanisms::synergy::workload::SynergyWorkload;
use tessera_mechanisms::synergy::POLICIES as SYNERGY_POLICIES;
use tessera_model::{SimDuration, SimTime, TrainingJob, Workload};
use tessera_perf::RestartCosts;
use tessera_sched::PolicyOptions;
use tessera_sim::{JobOutcome, SimConfig, Simulation};

fn config(cost: u64) -> SimConfig {
    SimConfig {
        restart_costs: RestartCosts::free(),
        profiler: Some(Arc::new(OptimisticProfiler {
            cost: SimDuration::from_secs(cost),
            ..OptimisticProfiler::default()
        })),
        ..SimConfig::default()
    }
}

#[test]
fn profiling_delays_the_start_and_the_job_runs_at_its_best_case() {
    // One alexnet job of 600 s at proportional speed on an empty server: profiled for 60 s,
    // started at the next scheduling point (the arrival of its profile), then runs at its best
    // case (12 cores, 125 GB) = 2.94x: JCT = 60 + 600 / 2.94.
    let cluster = reference_cluster(1);
    let mut j = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(600));
    j.model = "alexnet".into();
    j.iterations = 1000;
    let w = Workload::new(vec![j]);
    let truth = SynergyThroughput::new(TableMode::PerGpuCount);
    let policy = build_policy("fifo+tune", &PolicyOptions::default()).unwrap();
    let r = Simulation::new(&cluster, &w, &truth, policy, config(60))
        .run(&mut ())
        .unwrap();
    let rec = &r.jobs[0];
    assert_eq!(rec.first_start, Some(SimTime::from_secs(60)));
    let want = 60.0 + 600.0 / 2.94;
    assert!(
        (rec.jct_secs().unwrap() - want).abs() < 1e-3,
        "{:?}",
        rec.jct_secs()
    );
    assert_eq!(rec.cpu_per_gpu, Some(12.0));
    assert!((rec.speedup.unwrap() - 2.94).abs() < 1e-9);
    assert_eq!(r.summary.profiling_gpu_secs, 60.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Capacity is never exceeded (GPUs, CPU, memory), work is conserved and every job ends,
    /// under every ordering × mechanism with profiling, in the exact engine.
    #[test]
    fn synergy_policies_keep_engine_invariants(
        servers in 1u32..4,
        n in 1usize..40,
        seed in 0u64..1000,
        multi in any::<bool>(),
        policy in prop::sample::select(SYNERGY_POLICIES.iter().map(|p| p.name).collect::<Vec<_>>()),
        round in prop::sample::select(vec![60u64, 300]),
    ) {
        let cluster = reference_cluster(servers);
        let w = SynergyWorkload { jobs: n, jobs_per_hour: 40.0, multi_gpu: multi, seed, ..SynergyWorkload::default() }.generate();
        // Short jobs so that runs are quick.
        let jobs: Vec<TrainingJob> = w.jobs().iter().cloned().map(|mut j| {
            j.iterations = (j.iterations / 50).max(1);
            j.duration = SimDuration::from_secs_f64(j.duration.as_secs_f64() / 50.0);
            j
        }).collect();
        let w = Workload::new(jobs);
        let truth = SynergyThroughput::new(TableMode::PerGpuCount);
        let p = build_policy(policy, &PolicyOptions { round: Some(SimDuration::from_secs(round)), ..PolicyOptions::default() }).unwrap();
        let mut sim = Simulation::new(&cluster, &w, &truth, p, config(60));
        let mut steps = 0;
        while sim.step().unwrap() {
            if let Err(e) = sim.check_invariants() {
                panic!("{policy} after step {steps}: {e}");
            }
            steps += 1;
            prop_assert!(steps < 2_000_000);
        }
        let r = sim.into_report();
        for j in &r.jobs {
            prop_assert!(
                matches!(j.outcome, JobOutcome::Finished | JobOutcome::Rejected { .. }),
                "{policy}: job {} {:?}", j.name, j.outcome
            );
        }
    }
}

/// The reproduction's ordering on a reduced setup (2 servers, a 200-job window): TUNE's
/// average JCT is never worse than proportional's, at every load, under both semantics.
#[test]
fn repro_ordering_tune_not_worse_than_proportional_at_every_load() {
    let cluster = reference_cluster(2);
    for semantics in [Semantics::Exact, Semantics::Synergy] {
        for (load, multi) in [(0.8, false), (1.1, false), (1.3, false), (0.45, true)] {
            let w = SynergyWorkload {
                jobs: 900,
                jobs_per_hour: load,
                multi_gpu: multi,
                seed: 7,
                ..SynergyWorkload::default()
            }
            .generate();
            let run = |policy: &str| {
                run_one(
                    &cluster,
                    &w,
                    &RunSpec {
                        policy: policy.into(),
                        semantics,
                        window: (200, 400),
                        profile_cost: SimDuration::from_secs(60),
                        profile_error: 0.0,
                        seed: 7,
                        restart_costs: false,
                    },
                )
                .unwrap()
            };
            for order in ["fifo", "las"] {
                let prop = run(&format!("{order}+proportional"));
                let tune = run(&format!("{order}+tune"));
                assert_eq!(prop.finished, 200, "{order} {semantics:?} {load}");
                assert!(
                    tune.avg_jct_s <= prop.avg_jct_s * 1.0001,
                    "{order}+tune {} > proportional {} at load {load} ({semantics:?}, multi {multi})",
                    tune.avg_jct_s, prop.avg_jct_s
                );
            }
        }
    }
}
