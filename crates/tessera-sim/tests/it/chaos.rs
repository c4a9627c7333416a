//! A policy that emits arbitrary actions (wrong states, unknown nodes and jobs, zero GPUs,
//! over-allocation): the engine must refuse the bad ones with an error, never panic, and keep
//! its invariants whenever it accepts.

use proptest::prelude::*;
use tessera_model::{
    Allocation, Bytes, Cluster, JobId, MilliCpu, NodeId, NodeShare, SimDuration, SimTime,
    TrainingJob, Workload,
};
use tessera_perf::TraceThroughput;
use tessera_sched::{Action, ClusterView, Policy};
use tessera_sim::{SimConfig, Simulation};

/// A raw share: (node, GPUs, millicores, bytes).
type RawShare = (u32, u32, u64, u64);
/// A raw action: (kind, job, shares).
type RawAction = (u8, u32, Vec<RawShare>);

/// Replays a scripted list of raw actions, a few per scheduling point.
struct Chaos {
    script: Vec<RawAction>,
    next: usize,
}

impl Policy for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn round_length(&self) -> Option<SimDuration> {
        Some(SimDuration::from_secs(50))
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        for _ in 0..3 {
            let Some((kind, job, shares)) = self.script.get(self.next).cloned() else {
                return;
            };
            self.next += 1;
            // Half the time aim at a real active job, so that valid actions happen too.
            let job = match view.active.get(job as usize % (view.active.len() + 1)) {
                Some(a) if job % 2 == 0 => a.id,
                _ => JobId(job),
            };
            let allocation = Allocation {
                plan: None,
                shares: shares
                    .into_iter()
                    .map(|(node, gpus, cpu, mem)| NodeShare {
                        node: NodeId(node),
                        gpus,
                        cpu: MilliCpu(cpu),
                        memory: Bytes(mem),
                        devices: None,
                    })
                    .collect(),
            };
            actions.push(match kind % 3 {
                0 => Action::Start { job, allocation },
                1 => Action::Preempt { job },
                _ => Action::Resize { job, allocation },
            });
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn arbitrary_actions_never_panic_or_corrupt(
        script in prop::collection::vec(
            (any::<u8>(), 0u32..12, prop::collection::vec((0u32..4, 0u32..6, 0u64..40_000, 0u64..(300u64 << 30)), 0..3)),
            0..60,
        ),
        jobs in prop::collection::vec((0u64..500, 1u32..5, 1u64..400), 1..10),
    ) {
        let cluster = Cluster::homogeneous("V100-32GB", 3, 4, MilliCpu::from_cores(32), Bytes::from_gib(256)).unwrap();
        let workload = Workload::new(
            jobs.iter()
                .enumerate()
                .map(|(i, &(t, g, d))| TrainingJob::simple(i as u32, SimTime::from_secs(t), g, SimDuration::from_secs(d)))
                .collect(),
        );
        let policy = Box::new(Chaos { script, next: 0 });
        let mut sim = Simulation::new(&cluster, &workload, &TraceThroughput, policy, SimConfig::default());
        for _ in 0..10_000 {
            match sim.step() {
                Ok(true) => prop_assert!(sim.check_invariants().is_ok(), "{:?}", sim.check_invariants()),
                Ok(false) | Err(_) => break,
            }
        }
        prop_assert!(sim.check_invariants().is_ok(), "{:?}", sim.check_invariants());
    }
}
