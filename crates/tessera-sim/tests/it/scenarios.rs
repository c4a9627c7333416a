//! Small scenarios whose JCTs are computed by hand (comments show the timeline).

use tessera_model::{SimDuration, SimTime, TrainingJob};
use tessera_perf::RestartCosts;
use tessera_sim::JobOutcome;

use crate::{jcts, job, one_node, run};

fn expect(report: &tessera_sim::SimReport, want: &[(&str, f64)]) {
    let got = jcts(report);
    let want: Vec<(String, f64)> = want.iter().map(|(n, t)| (n.to_string(), *t)).collect();
    assert_eq!(got, want, "policy {}", report.policy);
}

#[test]
fn fifo_backfills_around_a_blocked_job() {
    // 4 GPUs. A(2 GPUs, 100 s) starts at 0; B(4 GPUs) cannot; C(2, 30 s) backfills at 10 → 40;
    // A ends at 100, then B runs 100 → 150.
    let r = run(
        &one_node(4),
        vec![job("A", 0, 2, 100), job("B", 0, 4, 50), job("C", 10, 2, 30)],
        "fifo",
        None,
        RestartCosts::free(),
    );
    expect(&r, &[("A", 100.0), ("B", 150.0), ("C", 30.0)]);
    assert_eq!(r.summary.preemptions, 0);
    assert_eq!(r.summary.makespan_s, 150.0);
    assert_eq!(r.summary.avg_queue_s, (0.0 + 100.0 + 0.0) / 3.0);
    // Busy GPU-seconds: 2·100 + 2·30 + 4·50 = 460 over 4 GPUs × 150 s.
    assert!(
        (r.summary.gpu_util - 460.0 / 600.0).abs() < 1e-12,
        "{}",
        r.summary.gpu_util
    );
}

#[test]
fn srtf_preempts_for_shorter_jobs() {
    // A(4 GPUs, 100 s) at 0. B(2, 50 s) at 10: B is shorter, A (90 s left) is preempted and
    // cannot fit beside it. C(2, 30 s) at 20 runs beside B. C ends 50, B ends 60; A resumes
    // at 60 with 90 s left → 150.
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
    expect(&r, &[("A", 150.0), ("B", 50.0), ("C", 30.0)]);
    assert_eq!(r.jobs[0].preemptions, 1);
}

#[test]
fn srtf_keeps_the_job_closer_to_done() {
    // A(4, 100 s) has 90 s left when B(4, 100 s) arrives at 10: A keeps running.
    let r = run(
        &one_node(4),
        vec![job("A", 0, 4, 100), job("B", 10, 4, 100)],
        "srtf",
        None,
        RestartCosts::free(),
    );
    expect(&r, &[("A", 100.0), ("B", 190.0)]);
}

#[test]
fn las_event_driven_favours_the_newcomer() {
    // At 10, B has attained 0 GPU-s, A 40: A is preempted, B runs 10 → 110, A resumes
    // with 90 s left → 200.
    let r = run(
        &one_node(4),
        vec![job("A", 0, 4, 100), job("B", 10, 4, 100)],
        "las",
        None,
        RestartCosts::free(),
    );
    expect(&r, &[("A", 200.0), ("B", 100.0)]);
}

#[test]
fn las_with_rounds_replans_only_at_round_boundaries() {
    // 50 s rounds. At 10 B waits (no preemption between rounds). Round 50: A attained 200,
    // B 0 → B runs 50 → 100. Round 100: both attained 200, tie → earlier submit (A) runs
    // 100 → 150 (50 s left). At 150 A completes, B resumes with 50 s left → 200.
    let r = run(
        &one_node(4),
        vec![job("A", 0, 4, 100), job("B", 10, 4, 100)],
        "las",
        Some(50),
        RestartCosts::free(),
    );
    expect(&r, &[("A", 150.0), ("B", 190.0)]);
    assert_eq!(r.summary.preemptions, 2);
}

#[test]
fn las_charges_the_restart_cost() {
    // As the event-driven LAS case, but A pays 7 s to restore when it resumes at 110.
    let r = run(
        &one_node(4),
        vec![job("A", 0, 4, 100), job("B", 10, 4, 100)],
        "las",
        None,
        RestartCosts::uniform(SimDuration::from_secs(7)),
    );
    expect(&r, &[("A", 207.0), ("B", 100.0)]);
}

#[test]
fn ftf_serves_the_most_unfairly_treated_job() {
    // A(4, 100 s) at 0; B(4, 50 s) at 10; C(4, 50 s) at 20. rho = (time in system +
    // remaining) / isolated time. At 10: A 1.0, B 1.0 → A (earlier). At 20: A 1.0, B 1.2,
    // C 1.0 → B runs 20 → 70. At 70: A (70+80)/100 = 1.5, C (50+50)/50 = 2.0 → C runs
    // 70 → 120. Then A, 80 s left → 200.
    let r = run(
        &one_node(4),
        vec![
            job("A", 0, 4, 100),
            job("B", 10, 4, 50),
            job("C", 20, 4, 50),
        ],
        "ftf",
        None,
        RestartCosts::free(),
    );
    expect(&r, &[("A", 200.0), ("B", 60.0), ("C", 100.0)]);
}

#[test]
fn oversized_jobs_are_rejected_with_a_reason() {
    let r = run(
        &one_node(4),
        vec![job("big", 0, 8, 10), job("ok", 0, 4, 10)],
        "fifo",
        None,
        RestartCosts::free(),
    );
    match &r.jobs[0].outcome {
        JobOutcome::Rejected { reason } => assert!(reason.contains("8 GPUs"), "{reason}"),
        other => panic!("expected rejection, got {other:?}"),
    }
    assert_eq!(r.summary.finished, 1);
    assert_eq!(r.summary.rejected, 1);
}

#[test]
fn multi_node_jobs_get_proportional_cpu_and_memory() {
    let cluster = tessera_model::Cluster::homogeneous(
        "A100-80GB",
        2,
        4,
        tessera_model::MilliCpu::from_cores(32),
        tessera_model::Bytes::from_gib(512),
    )
    .unwrap();
    let r = run(
        &cluster,
        vec![job("wide", 0, 6, 10)],
        "fifo",
        None,
        RestartCosts::free(),
    );
    assert_eq!(r.summary.finished, 1);
    // 6 of 8 GPUs for the whole run: GPU, CPU and memory utilization all 0.75.
    for u in [r.summary.gpu_util, r.summary.cpu_util, r.summary.mem_util] {
        assert!((u - 0.75).abs() < 1e-9, "{u}");
    }
}

/// Regression (found by the invariants property test): LAS with rounds shorter than the
/// restore time livelocked — each job was preempted while still restoring, because restoring
/// counted as attained service. Attained service now counts progress only, so the job that
/// is restoring keeps the lowest attained service and resumes.
#[test]
fn las_rounds_shorter_than_restore_time_terminate() {
    let mut jobs: Vec<TrainingJob> = [("resnet50", 1), ("bert", 930), ("gnmt", 31)]
        .iter()
        .enumerate()
        .map(|(i, (model, secs))| {
            let mut j =
                TrainingJob::simple(i as u32, SimTime::ZERO, 1, SimDuration::from_secs(*secs));
            j.model = model.to_string();
            j
        })
        .collect();
    jobs.sort_by_key(|j| j.id);
    let workload = tessera_model::Workload::new(jobs);
    let policy = tessera_sched::baselines::build(
        "las",
        &tessera_sched::PolicyOptions {
            round: Some(SimDuration::from_secs(30)),
            ..Default::default()
        },
    )
    .unwrap();
    // A time limit turns a livelock into a failure instead of a hang.
    let config = tessera_sim::SimConfig {
        time_limit: Some(SimTime::from_secs(100_000)),
        ..Default::default()
    };
    let cluster = one_node(1);
    let r = tessera_sim::Simulation::new(
        &cluster,
        &workload,
        &tessera_perf::TraceThroughput,
        policy,
        config,
    )
    .run(&mut ())
    .unwrap();
    assert_eq!(r.summary.finished, 3, "{:?}", r.summary);
}

/// Regression (issue 10): a job that fits by GPU count but never by CPU used to spin forever
/// with rounds; the engine now rejects it on arrival, naming the dimension.
#[test]
fn a_job_that_never_fits_by_cpu_is_rejected_not_spun() {
    let mut hungry = job("hungry", 0, 1, 100);
    hungry.cpu = Some(tessera_model::MilliCpu::from_cores(25));
    let ok = job("ok", 0, 1, 100);
    let cluster = one_node(4);
    let workload = tessera_model::Workload::new(vec![hungry, ok]);
    let policy = tessera_sched::baselines::build(
        "las",
        &tessera_sched::PolicyOptions {
            round: Some(SimDuration::from_secs(60)),
            ..Default::default()
        },
    )
    .unwrap();
    let config = tessera_sim::SimConfig {
        time_limit: Some(SimTime::from_secs(1_000_000)),
        ..Default::default()
    };
    let r = tessera_sim::Simulation::new(
        &cluster,
        &workload,
        &tessera_perf::TraceThroughput,
        policy,
        config,
    )
    .run(&mut ())
    .unwrap();
    let hungry = r.jobs.iter().find(|j| &*j.name == "hungry").unwrap();
    match &hungry.outcome {
        JobOutcome::Rejected { reason } => assert!(reason.contains("CPU"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.summary.finished, 1);
    assert!(r.summary.makespan_s < 1000.0, "{:?}", r.summary);
}
