//! Issue 10, item 5: no property test set explicit CPU/memory requests or extreme times,
//! which is how a job that never fits by CPU or memory (a hang) and saturating times (lost
//! work) got through. Here jobs ask for explicit CPU and memory and arrive up to the input
//! time limit; every job that can ever fit (`Cluster::can_ever_fit`) and that placement can
//! place on the empty cluster must finish, no later than its submit time plus its run time
//! plus what the jobs before it need, with capacity respected after every event.

use proptest::prelude::*;
use tessera_model::{
    Bytes, Cluster, MilliCpu, SimDuration, SimTime, TrainingJob, Workload, MAX_INPUT_SECS,
};
use tessera_perf::TraceThroughput;
use tessera_sched::baselines::{build as build_policy, POLICIES};
use tessera_sched::{Ledger, PolicyOptions};
use tessera_sim::{JobOutcome, SimConfig, Simulation};

fn cluster() -> Cluster {
    Cluster::homogeneous(
        "V100-32GB",
        3,
        4,
        MilliCpu::from_cores(48),
        Bytes::from_gib(512),
    )
    .unwrap()
}

fn jobs() -> impl Strategy<Value = Vec<TrainingJob>> {
    prop::collection::vec(
        (
            prop_oneof![0u64..5_000, (MAX_INPUT_SECS - 10_000)..=MAX_INPUT_SECS],
            prop::sample::select(vec![1u32, 1, 2, 4, 8]),
            prop_oneof![1u64..3_000, (MAX_INPUT_SECS / 2)..=MAX_INPUT_SECS],
            prop::option::of(1u64..120),
            prop::option::of(1u64..1_200),
        ),
        1..12,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (submit, gpus, secs, cpu, gib))| {
                let mut j = TrainingJob::simple(
                    i as u32,
                    SimTime::from_secs(submit),
                    gpus,
                    SimDuration::from_secs(secs),
                );
                j.cpu = cpu.map(MilliCpu::from_cores);
                j.memory = gib.map(Bytes::from_gib);
                j
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn explicit_requests_and_extreme_times_finish_exactly(
        jobs in jobs(),
        policy in prop::sample::select(POLICIES.iter().map(|p| p.name).collect::<Vec<_>>()),
    ) {
        let c = cluster();
        let empty: Vec<_> = c.nodes.iter().map(|n| c.capacity(n.id)).collect();
        // Jobs the cluster can hold; the others are the engine's to reject (the lead's side).
        let runnable: Vec<TrainingJob> = jobs
            .into_iter()
            .filter(|j| c.can_ever_fit(j).is_ok() && Ledger::new(&c, &empty).place(j).is_some())
            .collect();
        prop_assume!(!runnable.is_empty());
        let workload = Workload::new(runnable);
        let p = build_policy(policy, &PolicyOptions::default()).unwrap();
        let mut sim = Simulation::new(&c, &workload, &TraceThroughput, p, SimConfig::default());
        let mut steps = 0u64;
        while sim.step().unwrap() {
            if let Err(e) = sim.check_invariants() {
                panic!("after step {steps}: {e}");
            }
            steps += 1;
            prop_assert!(steps < 100_000, "run does not terminate");
        }
        let report = sim.into_report();
        // Serial execution of everything bounds each finish time; nothing saturates.
        let total: u64 = workload.jobs().iter().map(|j| j.duration.as_micros()).sum();
        for (rec, job) in report.jobs.iter().zip(workload.jobs()) {
            prop_assert!(matches!(rec.outcome, JobOutcome::Finished), "{}: {:?}", job.name, rec.outcome);
            let finish = rec.finish.unwrap();
            prop_assert!(finish >= job.submit + job.duration, "{} finished early", job.name);
            let last_submit = workload.jobs().last().unwrap().submit;
            prop_assert!(
                finish.as_micros() <= last_submit.as_micros() + total + 3_600_000_000,
                "{} finished at {} (saturated?)", job.name, finish
            );
            prop_assert!(finish < SimTime::MAX);
        }
    }
}
