//! Issue 38 item 4: a preemptive policy in real mode decides as the simulator does after a
//! daemon restart and after progress reports. The attained service of a running job must
//! survive a restart: the daemon's runs keep running while it is down, so a job restored
//! running has attained what it had when its attempt started plus its GPUs times the time
//! since. (Before the fix, a restored running job came back with the service its stored row
//! held, written at its last transition: often none, so LAS took a job that had run for an
//! hour for a fresh one and preempted the wrong job.)

use tessera_model::SimDuration;

use super::testkit::{node, policy, typed_node, Event, Harness};
use crate::core::runs::RunStatus;
use crate::types::{JobState, ProgressReport};

/// Attained service (GPU·µs) of each job the policy sees, by store id, at the last point.
fn attained(h: &Harness, ids: &[i64]) -> Vec<u64> {
    let kept = h.core.kept_active();
    ids.iter()
        .map(|&id| {
            let idx = h.core.by_id[&id];
            kept.iter()
                .find(|a| a.id.index() == idx)
                .map_or(u64::MAX, |a| a.attained_gpu_us)
        })
        .collect()
}

fn report(h: &mut Harness, id: i64, iterations: u64) {
    h.core
        .report_progress(
            h.now,
            id,
            ProgressReport {
                iterations,
                samples_per_second: Some(64.0),
                iterations_per_second: Some(2.0),
                point: None,
            },
        )
        .expect("a running job reports");
    h.drain();
}

fn preempted(events: &[Event]) -> Vec<i64> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Stop(id, _, true) => Some(*id),
            _ => None,
        })
        .collect()
}

/// Two GPUs, LAS with 60 s rounds: `x` runs from 0 s, `y` from 30 s (and reports progress,
/// as an SDK job does); the daemon restarts at 130 s; `b` (1 GPU) arrives. At the next round
/// LAS gives `b` the GPU of the job with the most attained service, `x` (130 GPU·s against
/// `y`'s 100), exactly as without the restart.
fn restart_then_arrival(restart: bool) -> (Harness, [i64; 3]) {
    let mut h = Harness::new(vec![node("n1", 2)], policy("las", Some(60)));
    let t0 = h.now;
    let x = h.submit("x", 1, 10_000);
    h.schedule();
    h.advance(30);
    let y = h.submit("y", 1, 10_000);
    h.schedule();
    for k in 1..=5 {
        h.advance(20);
        report(&mut h, y, 40 * k);
        h.poll();
        if h.core.wants_schedule(h.now) {
            h.schedule();
        }
    }
    assert_eq!(
        (h.state(x), h.state(y)),
        (JobState::Running, JobState::Running)
    );
    assert_eq!(h.now, t0 + SimDuration::from_secs(130));
    if restart {
        h.restart(policy("las", Some(60)));
    }
    let b = h.submit("b", 1, 30);
    h.schedule();
    assert_eq!(
        attained(&h, &[x, y, b]),
        vec![130_000_000, 100_000_000, 0],
        "GPU·µs each job has attained at 130 s"
    );
    (h, [x, y, b])
}

#[test]
fn a_restart_keeps_the_attained_service_of_running_jobs() {
    for restart in [false, true] {
        let (mut h, [x, y, b]) = restart_then_arrival(restart);
        h.take_events();
        let next_round = h.core.poll_timeout().expect("a round is due");
        h.now = next_round;
        h.poll();
        h.schedule();
        let events = h.take_events();
        assert_eq!(
            preempted(&events),
            vec![x],
            "restart {restart}: LAS preempts the job with the most service: {events:?}"
        );
        assert_eq!(h.state(b), JobState::Running, "restart {restart}");
        assert_eq!(h.state(y), JobState::Running, "restart {restart}");
        assert_eq!(h.core.metrics().preemptions.get("policy"), Some(&1));
    }
}

/// The service a job attained is stored so that a restart, at any moment, finds it: while a
/// job runs, its row holds the service of its attempt's start (a restart adds the time since),
/// and once it stops, all of it.
#[test]
fn stored_attained_service_follows_preemptions_and_restarts() {
    let (mut h, [x, y, b]) = restart_then_arrival(true);
    h.now = h.core.poll_timeout().expect("a round");
    h.poll();
    h.schedule(); // the round after the restart, at 190 s: x preempted with 190 GPU·s
    assert_eq!(h.store_jobs[&x].state, JobState::Pending);
    assert_eq!(h.store_jobs[&x].attained_gpu_secs, 190.0);
    assert_eq!(h.store_jobs[&b].start_us, Some(h.now.as_micros()));
    assert_eq!(
        h.store_jobs[&b].attained_gpu_secs, 0.0,
        "b's attempt starts at 0"
    );
    h.advance(10);
    h.end_run(b, RunStatus::Completed);
    h.poll();
    h.schedule(); // x back on b's GPU at 200 s
    assert_eq!(h.state(x), JobState::Running);
    assert_eq!(h.store_jobs[&x].attained_gpu_secs, 190.0);
    h.advance(25);
    h.restart(policy("las", Some(60)));
    h.schedule();
    assert_eq!(
        attained(&h, &[x, y]),
        vec![215_000_000, 195_000_000],
        "x: 190 + 25 GPU·s; y: 225 - 30"
    );
}

/// Issue 38's real-mode case: LAS with 60 s rounds on 2 A100-40GB + 2 V100-32GB, after an
/// earlier job that reported progress has run. `a` (2 A100s, long) runs; `b` (1 A100, short)
/// arrives 20 s later: at the next round `b` gets an A100 and `a` is preempted, as the
/// simulator decides (tessera-sim's tracked_baselines), also across a daemon restart between
/// the two submissions or after both. (LAS budgeted against the cluster's 4 GPUs, so `a` and
/// `b` "fit" together; `a` kept both A100s and `b` stayed pending with reason Resources.)
fn restricted_arrival(restart: Option<bool>) {
    let nodes = vec![
        typed_node("a100", "A100-40GB", 2),
        typed_node("v100", "V100-32GB", 2),
    ];
    let mut h = Harness::new(nodes, policy("las", Some(60)));
    // Earlier history: an SDK job that reports progress and completes.
    let p = h.submit("p", 1, 30);
    h.schedule();
    h.advance(10);
    report(&mut h, p, 20);
    h.advance(10);
    h.end_run(p, RunStatus::Completed);
    h.poll();
    h.schedule();
    assert_eq!(h.state(p), JobState::Completed);
    let spec = |name: &str, gpus: u32, secs: u32| {
        format!("name: {name}\ncommand: [sleep, \"{secs}\"]\ngpus: {gpus}\ngpuType: A100-40GB\n")
    };
    let a = h.submit_spec(&spec("a", 2, 400));
    h.schedule();
    assert_eq!(h.state(a), JobState::Running);
    h.advance(20);
    if restart == Some(false) {
        h.restart(policy("las", Some(60)));
    }
    let b = h.submit_spec(&spec("b", 1, 30));
    h.schedule();
    assert_eq!(h.state(b), JobState::Pending, "both A100s are a's");
    if restart == Some(true) {
        h.advance(5);
        h.restart(policy("las", Some(60)));
        h.schedule();
    }
    h.take_events();
    let next_round = h.core.poll_timeout().expect("a round is due");
    assert!(next_round <= h.now + SimDuration::from_secs(60));
    h.now = next_round;
    h.poll();
    h.schedule();
    let events = h.take_events();
    assert_eq!(
        preempted(&events),
        vec![a],
        "restart {restart:?}: LAS gives b one of a's A100s: {events:?}"
    );
    assert_eq!(h.state(b), JobState::Running, "restart {restart:?}");
    assert_eq!(h.core.metrics().preemptions.get("policy"), Some(&1));
}

#[test]
fn las_preempts_for_a_job_restricted_to_a_busy_gpu_model() {
    restricted_arrival(None);
}

#[test]
fn las_preempts_for_a_restricted_job_after_a_restart() {
    restricted_arrival(Some(false));
    restricted_arrival(Some(true));
}

/// With restart costs configured (`restartCosts: table`), a restarted attempt attains no
/// service while it restores from its checkpoint, as in the simulator
/// (`tessera_sched::book`), and a daemon restart brings running jobs back with exactly that
/// service (their rows know the attempt and its start).
#[test]
fn restart_costs_hold_back_service_also_across_a_daemon_restart() {
    let costs = || tessera_perf::RestartCosts::uniform(SimDuration::from_secs(20));
    let run = |restart: bool| {
        let mut h = Harness::new(vec![node("n1", 1)], policy("las", Some(60)));
        h.core.settings.restart_costs = costs();
        let x = h.submit("x", 1, 10_000);
        h.schedule();
        h.advance(10);
        let y = h.submit("y", 1, 10_000);
        h.schedule();
        // Rounds at 60 s (y for x) and 120 s (x, restarted, for y: equal service, x first).
        for _ in 0..2 {
            h.now = h.core.poll_timeout().expect("a round");
            h.poll();
            h.schedule();
        }
        assert_eq!(h.state(x), JobState::Running);
        assert_eq!(h.core.job_row(x).map(|r| r.attempt), Some(2), "x restarted");
        h.advance(30);
        if restart {
            h.restart_with(policy("las", Some(60)), |c| {
                c.settings.restart_costs = costs()
            });
        }
        h.schedule();
        attained(&h, &[x, y])
    };
    let kept = run(false);
    assert_eq!(
        kept,
        vec![70_000_000, 60_000_000],
        "x: 60 GPU·s, then 10 of its 30 s back after a 20 s restore; y: 60"
    );
    assert_eq!(run(true), kept, "a daemon restart keeps the same service");
}
