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

/// The nine published configurations on the reference's own workload (its generator at seed
/// 42, job for job) under the reference's round semantics: mean JCT over jobs 4000–4999
/// against the reference simulator's figures (DESIGN §5.1). Our values are pinned to 0.01 h
/// (a change is deliberate or a regression); all nine are within 1% of the published figures
/// (the two LAS + TUNE runs since placement follows the reference's first fit in server order:
/// 15.63 → 15.545 h at 3 jobs/h, 20.88 → 18.90 h at 4 jobs/h).
#[test]
fn reference_workload_reproduces_the_published_figures() {
    use tessera_mechanisms::synergy::reference_workload::{ReferenceTrace, ReferenceWorkload};
    // (policy, trace, load, reference avg JCT h, ours pinned h, within 1%)
    let cases: [(&str, ReferenceTrace, f64, f64, f64, bool); 9] = [
        (
            "fifo+proportional",
            ReferenceTrace::Single,
            9.0,
            81.09,
            81.09,
            true,
        ),
        (
            "fifo+greedy",
            ReferenceTrace::Single,
            9.0,
            24.98,
            24.98,
            true,
        ),
        ("fifo+tune", ReferenceTrace::Single, 9.0, 21.88, 21.88, true),
        (
            "srtf+proportional",
            ReferenceTrace::Single,
            9.0,
            38.03,
            38.03,
            true,
        ),
        ("srtf+tune", ReferenceTrace::Single, 9.0, 16.60, 16.60, true),
        (
            "las+proportional",
            ReferenceTrace::Multi,
            3.0,
            17.51,
            17.51,
            true,
        ),
        ("las+tune", ReferenceTrace::Multi, 3.0, 15.55, 15.545, true),
        (
            "las+proportional",
            ReferenceTrace::Multi,
            4.0,
            30.73,
            30.73,
            true,
        ),
        ("las+tune", ReferenceTrace::Multi, 4.0, 18.90, 18.90, true),
    ];
    let cluster = reference_cluster(16);
    let mut workloads = std::collections::BTreeMap::new();
    for (policy, trace, load, reference, pinned, within) in cases {
        let w = workloads
            .entry((trace == ReferenceTrace::Multi, load.to_bits()))
            .or_insert_with(|| {
                ReferenceWorkload {
                    jobs: tessera_mechanisms::synergy::reference_workload::REFERENCE_JOBS,
                    ..ReferenceWorkload::new(trace, load)
                }
                .generate()
                .unwrap()
            });
        let spec = RunSpec {
            policy: policy.into(),
            semantics: Semantics::Synergy,
            window: (4000, 5000),
            profile_cost: SimDuration::ZERO,
            profile_error: 0.0,
            seed: 42,
            restart_costs: false,
        };
        let s = run_one(&cluster, w, &spec).unwrap();
        assert_eq!(s.finished, 1000, "{policy} at {load}");
        // The reference's arrivals never stop: a run whose arrivals ran out is not comparable.
        assert!(!s.arrivals_ran_out, "{policy} at {load}: arrivals ran out");
        let ours = s.avg_jct_s / 3600.0;
        assert!(
            (ours - pinned).abs() < 0.005 + 1e-9,
            "{policy} at {load} jobs/h: {ours:.4} h, pinned {pinned}"
        );
        if within {
            assert!(
                (ours / reference - 1.0).abs() < 0.01,
                "{policy} at {load} jobs/h: {ours:.4} h vs the reference's {reference}"
            );
        }
    }
}

/// The reference draws arrivals without end. With 16,000 jobs the single-GPU trace's last
/// arrival (1,771 h) comes before SRTF + proportional drains the window (2,531 h): the run must
/// say so, and its figure is lower than the reference's (37.41 h against 38.03 h), which is
/// how the last gap of issue 8 was found.
#[test]
fn a_reference_workload_too_short_for_the_window_is_reported() {
    use tessera_mechanisms::synergy::reference_workload::{ReferenceTrace, ReferenceWorkload};
    let w = ReferenceWorkload {
        jobs: 16_000,
        ..ReferenceWorkload::new(ReferenceTrace::Single, 9.0)
    }
    .generate()
    .unwrap();
    let spec = RunSpec {
        policy: "srtf+proportional".into(),
        semantics: Semantics::Synergy,
        window: (4000, 5000),
        profile_cost: SimDuration::ZERO,
        profile_error: 0.0,
        seed: 42,
        restart_costs: false,
    };
    let s = run_one(&reference_cluster(16), &w, &spec).unwrap();
    assert_eq!(s.finished, 1000);
    assert!(s.arrivals_ran_out);
    assert!(
        (s.avg_jct_s / 3600.0 - 37.41).abs() < 0.005,
        "{}",
        s.avg_jct_s / 3600.0
    );
    // FIFO + TUNE drains the same window long before the last arrival.
    let fifo = run_one(
        &reference_cluster(16),
        &w,
        &RunSpec {
            policy: "fifo+tune".into(),
            ..spec
        },
    )
    .unwrap();
    assert!(!fifo.arrivals_ran_out);
}

/// Under the reference semantics a placement is the reference's (`_top_synergy_gpus`, what its
/// runner uses): GPU by GPU in server order, each taken while its server still fits one more
/// GPU's slice. A server short of CPU gives fewer GPUs and the job spans the next one, where
/// our default puts the whole vector on one server that fits it (the fullest).
#[test]
fn reference_placement_is_first_fit_in_server_order() {
    use tessera_mechanisms::synergy::policy::{FreeMap, Slice};
    use tessera_model::{Bytes, MilliCpu, NodeId, Resources};
    let cluster = reference_cluster(3);
    let gib = |g: u64| Bytes(g << 30);
    let free = [
        // Three GPUs free but CPU for two 6-core slices only.
        Resources {
            gpus: 3,
            cpu: MilliCpu(12_000),
            memory: gib(500),
        },
        // Everything free.
        Resources {
            gpus: 8,
            cpu: MilliCpu(24_000),
            memory: gib(500),
        },
        // Six GPUs free: fuller than server 1.
        Resources {
            gpus: 6,
            cpu: MilliCpu(24_000),
            memory: gib(500),
        },
    ];
    let slice = Slice::from_cores_gb(6.0, 125.0);
    let job = TrainingJob::simple(0, SimTime::ZERO, 4, SimDuration::from_secs(600));
    let placed = |reference: bool, job: &TrainingJob, slice: Slice| {
        let mut map = FreeMap::new(&cluster, &free);
        map.reference_spread = reference;
        let a = map.find(job, slice).expect("fits");
        a.shares
            .iter()
            .map(|s| (s.node, s.gpus, s.cpu, s.memory))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        placed(true, &job, slice),
        vec![
            (NodeId(0), 2, MilliCpu(12_000), gib(250)),
            (NodeId(1), 2, MilliCpu(12_000), gib(250)),
        ]
    );
    // Ours by default: the whole vector on the fullest server that fits it.
    assert_eq!(
        placed(false, &job, slice),
        vec![(NodeId(2), 4, MilliCpu(24_000), gib(500))]
    );
    // One GPU of 13 cores (server 0 has 12): the first server that fits (ours: the fullest).
    let one = TrainingJob::simple(1, SimTime::ZERO, 1, SimDuration::from_secs(600));
    let wide = Slice::from_cores_gb(13.0, 62.5);
    assert_eq!(placed(true, &one, wide)[0].0, NodeId(1));
    assert_eq!(placed(false, &one, wide)[0].0, NodeId(2));
    // Nothing is taken unless every GPU is found.
    let big = TrainingJob::simple(2, SimTime::ZERO, 16, SimDuration::from_secs(600));
    let mut map = FreeMap::new(&cluster, &free);
    map.reference_spread = true;
    assert!(map.find(&big, slice).is_none());
}
