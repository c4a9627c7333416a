//! The preemptive baselines keep their queue and their running jobs between calls when the
//! driver reports changes (issue 11), SRTF and FTF rank their running jobs from the progress
//! lines the simulator sends instead of having every running job brought up to date at each
//! re-plan, and FTF keeps its queue in kinetic tournaments. All three ways must decide alike,
//! job for job: ranking everything from `view.active` (no tracking), tracking without
//! progress lines (as the daemon runs it), and tracking with them.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use tessera_model::{Bytes, Cluster, JobId, MilliCpu, SimDuration, SimTime, TrainingJob, Workload};
use tessera_perf::TraceThroughput;
use tessera_sched::baselines::build as build_policy;
use tessera_sched::{Action, ClusterView, JobChange, Policy, PolicyOptions, Trigger};
use tessera_sim::{SimConfig, SimReport, Simulation};

/// Ranks from `view.active` alone: the driver is never asked to report changes.
struct Untracked(Box<dyn Policy>);

impl Policy for Untracked {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn round_length(&self) -> Option<SimDuration> {
        self.0.round_length()
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        self.0.schedule(view, actions)
    }
}

/// Tracks changes but is never told progress lines (the daemon's way): running jobs are
/// ranked from the progress the driver shows in `view.active`.
struct WithoutLines(Box<dyn Policy>);

impl Policy for WithoutLines {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn round_length(&self) -> Option<SimDuration> {
        self.0.round_length()
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        self.0.schedule(view, actions)
    }
    fn track_jobs(&mut self) -> bool {
        self.0.track_jobs()
    }
    fn observe(&mut self, change: JobChange<'_>) {
        assert!(
            !matches!(change, JobChange::Progress(..)),
            "a driver sends progress lines only to a policy that follows progress"
        );
        self.0.observe(change)
    }
    fn reads_running_progress(&self, trigger: &Trigger) -> bool {
        self.0.reads_running_progress(trigger)
    }
    fn may_act(&self, trigger: &Trigger) -> bool {
        self.0.may_act(trigger)
    }
}

fn cluster() -> Cluster {
    Cluster::homogeneous(
        "V100-32GB",
        2,
        8,
        MilliCpu::from_cores(48),
        Bytes::from_gib(512),
    )
    .unwrap()
}

/// Jobs arriving densely on 16 GPUs, so that they queue and get preempted.
fn jobs() -> impl Strategy<Value = Vec<TrainingJob>> {
    prop::collection::vec(
        (
            0u64..20_000,
            prop::sample::select(vec![1u32, 1, 1, 2, 4, 8]),
            60u64..20_000,
        ),
        2..40,
    )
    .prop_map(|mut specs| {
        specs.sort_by_key(|&(submit, _, _)| submit);
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (submit, gpus, secs))| {
                TrainingJob::simple(
                    i as u32,
                    SimTime::from_secs(submit),
                    gpus,
                    SimDuration::from_secs(secs),
                )
            })
            .collect()
    })
}

fn run(cluster: &Cluster, workload: &Workload, policy: Box<dyn Policy>) -> SimReport {
    let config = SimConfig {
        record_timeseries: false,
        ..SimConfig::default()
    };
    Simulation::new(cluster, workload, &TraceThroughput, policy, config)
        .run(&mut ())
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn tracked_with_and_without_progress_lines_decide_as_untracked(
        jobs in jobs(),
        order in prop::sample::select(vec!["srtf", "las", "ftf"]),
        round in prop::option::of(60u64..900),
    ) {
        let c = cluster();
        let w = Workload::new(jobs);
        let options = PolicyOptions {
            round: round.map(SimDuration::from_secs),
            ..PolicyOptions::default()
        };
        let build = || build_policy(order, &options).unwrap();
        let full = run(&c, &w, Box::new(Untracked(build())));
        let without_lines = run(&c, &w, Box::new(WithoutLines(build())));
        let tracked = run(&c, &w, build());
        for (variant, r) in [("without lines", &without_lines), ("tracked", &tracked)] {
            prop_assert_eq!(r.jobs.len(), full.jobs.len());
            for (a, b) in r.jobs.iter().zip(&full.jobs) {
                prop_assert_eq!(a, b, "{} {:?}, {}: job {} differs", order, round, variant, a.job.0);
            }
            prop_assert_eq!(r.summary.preemptions, full.summary.preemptions);
        }
        prop_assert!(full.jobs.iter().all(|j| j.finish.is_some()));
    }
}

/// SRTF asks for progress lines and gets one right after each start; LAS does not ask.
#[test]
fn srtf_is_told_a_line_after_each_start() {
    type Log = Arc<Mutex<Vec<(JobId, bool)>>>;
    struct Recorder(Box<dyn Policy>, Log);
    impl Policy for Recorder {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn round_length(&self) -> Option<SimDuration> {
            self.0.round_length()
        }
        fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
            self.0.schedule(view, actions)
        }
        fn track_jobs(&mut self) -> bool {
            self.0.track_jobs()
        }
        fn follows_progress(&self) -> bool {
            self.0.follows_progress()
        }
        fn observe(&mut self, change: JobChange<'_>) {
            if let Ok(mut log) = self.1.lock() {
                match change {
                    JobChange::Started(job, _) => log.push((job.id, false)),
                    JobChange::Progress(job, line) => {
                        assert!(line.rate > 0.0 && line.done <= line.total);
                        log.push((job, true));
                    }
                    _ => {}
                }
            }
            self.0.observe(change)
        }
    }
    // Six 8-GPU jobs on 16 GPUs, the shortest arriving last: SRTF preempts and restarts.
    let c = cluster();
    let w = Workload::new(
        (0..6u32)
            .map(|i| {
                let secs = 3_600 - 500 * i as u64;
                TrainingJob::simple(
                    i,
                    SimTime::from_secs(i as u64),
                    8,
                    SimDuration::from_secs(secs),
                )
            })
            .collect(),
    );
    let log: Log = Arc::default();
    let srtf = build_policy("srtf", &PolicyOptions::default()).unwrap();
    let report = run(&c, &w, Box::new(Recorder(srtf, log.clone())));
    assert!(report.jobs.iter().all(|j| j.finish.is_some()));
    assert!(report.summary.preemptions > 0);
    let log = log.lock().unwrap();
    let starts = log.iter().filter(|(_, line)| !line).count();
    assert!(
        starts > w.jobs().len(),
        "restarts after preemptions: {starts}"
    );
    for pair in log.chunks(2) {
        assert!(
            matches!(pair, [(a, false), (b, true)] if a == b),
            "each start is followed by its line: {pair:?}"
        );
    }

    let log: Log = Arc::default();
    let las = build_policy("las", &PolicyOptions::default()).unwrap();
    run(&c, &w, Box::new(Recorder(las, log.clone())));
    let log = log.lock().unwrap();
    assert!(
        !log.is_empty() && log.iter().all(|(_, line)| !line),
        "LAS is told no lines"
    );
}

/// Two GPU models, two of each on a node of their own (issue 38's real-mode cluster).
fn mixed_cluster() -> Cluster {
    let yaml = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: a100, count: 1, gpu: A100-40GB, gpusPerNode: 2, cpus: 16, memory: 64Gi}\n    - {name: v100, count: 1, gpu: V100-32GB, gpusPerNode: 2, cpus: 16, memory: 64Gi}\n";
    Cluster::from_yaml(yaml, &tessera_model::GpuCatalog::builtin()).unwrap()
}

/// Issue 38: on 2 A100 + 2 V100, job `a` (2 A100s, 300 s) runs; `b` (1 A100, 30 s) arrives at
/// 20 s. LAS with 60 s rounds gives `b` an A100 at the round of 60 s, preempting `a`, whichever
/// way the policy is driven. (LAS budgeted against the cluster's 4 GPUs: `a` and `b` "fit"
/// together, so `a` kept both A100s and `b` waited until `a` ended, at 300 s.)
#[test]
fn las_preempts_for_a_job_restricted_to_a_busy_gpu_model() {
    let c = mixed_cluster();
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
    let options = PolicyOptions {
        round: Some(SimDuration::from_secs(60)),
        ..PolicyOptions::default()
    };
    let build = || build_policy("las", &options).unwrap();
    for (way, report) in [
        ("untracked", run(&c, &w, Box::new(Untracked(build())))),
        (
            "without lines",
            run(&c, &w, Box::new(WithoutLines(build()))),
        ),
        ("tracked", run(&c, &w, build())),
    ] {
        let (a, b) = (&report.jobs[0], &report.jobs[1]);
        assert_eq!(
            b.first_start,
            Some(SimTime::from_secs(60)),
            "{way}: b starts"
        );
        assert_eq!(a.preemptions, 1, "{way}: a gives way to b");
        assert!(a.finish.is_some() && b.finish.is_some(), "{way}");
    }
}

/// Jobs of one, two or four GPUs, some restricted to one model, on two models.
fn typed_jobs() -> impl Strategy<Value = Vec<(TrainingJob, Option<bool>)>> {
    prop::collection::vec(
        (
            0u64..5_000,
            prop::sample::select(vec![1u32, 1, 2, 4]),
            60u64..5_000,
            prop::option::of(any::<bool>()),
        ),
        2..30,
    )
    .prop_map(|mut specs| {
        specs.sort_by_key(|&(submit, ..)| submit);
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (submit, gpus, secs, model))| {
                let j = TrainingJob::simple(
                    i as u32,
                    SimTime::from_secs(submit),
                    gpus,
                    SimDuration::from_secs(secs),
                );
                (j, model)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// On a cluster of two GPU models with jobs restricted to one of them, the three ways
    /// still decide alike (each selects by model: `TypeBudget`).
    #[test]
    fn tracked_and_untracked_decide_alike_on_two_gpu_models(
        jobs in typed_jobs(),
        order in prop::sample::select(vec!["srtf", "las", "ftf"]),
        round in prop::option::of(60u64..900),
    ) {
        let yaml = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: a, count: 2, gpu: A100-40GB, gpusPerNode: 4, cpus: 32, memory: 256Gi}\n    - {name: v, count: 1, gpu: V100-32GB, gpusPerNode: 4, cpus: 32, memory: 256Gi}\n";
        let c = Cluster::from_yaml(yaml, &tessera_model::GpuCatalog::builtin()).unwrap();
        let models = [c.catalog.resolve("A100-40GB").unwrap(), c.catalog.resolve("V100-32GB").unwrap()];
        let w = Workload::new(
            jobs.into_iter()
                .map(|(mut j, model)| {
                    if let Some(m) = model {
                        j.gpu_types = vec![models[usize::from(m)]];
                    }
                    j
                })
                .collect(),
        );
        let options = PolicyOptions {
            round: round.map(SimDuration::from_secs),
            ..PolicyOptions::default()
        };
        let build = || build_policy(order, &options).unwrap();
        let full = run(&c, &w, Box::new(Untracked(build())));
        let without_lines = run(&c, &w, Box::new(WithoutLines(build())));
        let tracked = run(&c, &w, build());
        for (variant, r) in [("without lines", &without_lines), ("tracked", &tracked)] {
            prop_assert_eq!(r.jobs.len(), full.jobs.len());
            for (a, b) in r.jobs.iter().zip(&full.jobs) {
                prop_assert_eq!(a, b, "{} {:?}, {}: job {} differs", order, round, variant, a.job.0);
            }
            prop_assert_eq!(r.summary.preemptions, full.summary.preemptions);
        }
        prop_assert!(full.jobs.iter().all(|j| j.finish.is_some()));
    }
}
