//! The reference engine tells a Synergy policy every change of the active set and the policy
//! keeps its ranking between rounds, re-keying only the jobs that changed (issue 8's speed
//! work). It must decide exactly as ranking every active job afresh at every round: the same
//! runs, job for job, with and without tracking, on a small overloaded cluster where jobs
//! wait past the 1,000 h starvation guard and TUNE switches jobs to and from fair share.

use std::sync::Arc;

use tessera_mechanisms::build_policy;
use tessera_mechanisms::synergy::experiment::reference_cluster;
use tessera_mechanisms::synergy::perf::{ReferenceProfiler, ReferenceSpeedup};
use tessera_mechanisms::synergy::reference::run_reference;
use tessera_mechanisms::synergy::reference_workload::{ReferenceTrace, ReferenceWorkload};
use tessera_sched::{Action, ClusterView, Policy, PolicyOptions};
use tessera_sim::{SimConfig, SimReport};

/// A policy that does not ask to be told changes: it ranks from `view.active` alone.
struct Untracked(Box<dyn Policy>);

impl Policy for Untracked {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn round_length(&self) -> Option<tessera_model::SimDuration> {
        self.0.round_length()
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        self.0.schedule(view, actions)
    }
    fn use_reference_semantics(&mut self) {
        self.0.use_reference_semantics()
    }
}

fn run(policy: Box<dyn Policy>, workload: &tessera_model::Workload) -> SimReport {
    let config = SimConfig {
        record_timeseries: false,
        profiler: Some(Arc::new(ReferenceProfiler)),
        ..SimConfig::default()
    };
    run_reference(
        &reference_cluster(2),
        workload,
        &ReferenceSpeedup::default(),
        policy,
        &config,
    )
    .unwrap()
}

#[test]
fn tracked_ranking_decides_as_a_full_ranking() {
    for (trace, load) in [(ReferenceTrace::Single, 2.0), (ReferenceTrace::Multi, 1.0)] {
        let w = ReferenceWorkload {
            jobs: 1200,
            ..ReferenceWorkload::new(trace, load)
        }
        .generate()
        .unwrap();
        let mut longest = 0.0f64;
        for name in [
            "fifo+proportional",
            "fifo+tune",
            "srtf+proportional",
            "srtf+greedy",
            "srtf+tune",
            "las+proportional",
            "las+tune",
        ] {
            let build = || build_policy(name, &PolicyOptions::default()).unwrap();
            let tracked = run(build(), &w);
            let full = run(Box::new(Untracked(build())), &w);
            assert_eq!(tracked.jobs.len(), full.jobs.len());
            for (a, b) in tracked.jobs.iter().zip(&full.jobs) {
                assert_eq!(
                    (a.first_start, a.finish, a.preemptions, a.iterations_done),
                    (b.first_start, b.finish, b.preemptions, b.iterations_done),
                    "{name}: job {} differs",
                    a.job.0
                );
            }
            assert!(tracked.jobs.iter().all(|j| j.finish.is_some()), "{name}");
            // The longest wait for a first round, to check below that the guard is reached.
            let waited = tracked
                .jobs
                .iter()
                .filter_map(|j| Some(j.first_start?.saturating_since(j.submit).as_secs_f64()))
                .fold(0.0f64, f64::max);
            longest = longest.max(waited);
        }
        // The guard is exercised: some job waited over 1,000 h for its first round.
        assert!(
            longest > 1000.0 * 3600.0,
            "longest wait {:.0} h",
            longest / 3600.0
        );
    }
}
