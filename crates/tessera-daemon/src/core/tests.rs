//! Unit tests of the core on virtual time with a scripted backend (see [`super::testkit`]).

use proptest::prelude::*;

use super::testkit::{node, policy, Event, Harness, TOKEN};
use crate::core::records::RunState;
use crate::core::runs::RunStatus;
use crate::types::JobState;

/// (job id, attempt, placement as (node, GPUs)).
type Launched = (i64, u32, Vec<(String, u32)>);

fn launches(events: &[Event]) -> Vec<Launched> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Launch(j, a, p) => Some((*j, *a, p.clone())),
            _ => None,
        })
        .collect()
}

fn on(node: &str, gpus: u32) -> Vec<(String, u32)> {
    vec![(node.to_string(), gpus)]
}

#[test]
fn submission_placement_launch_completion() {
    let mut h = Harness::new(vec![node("n1", 2), node("n2", 1)], policy("fifo", None));
    let a = h.submit("a", 2, 100);
    let b = h.submit("b", 2, 100);
    let c = h.submit("c", 1, 100);
    assert_eq!(
        h.take_events(),
        vec![
            Event::Persist(vec![(a, JobState::Pending)]),
            Event::Persist(vec![(b, JobState::Pending)]),
            Event::Persist(vec![(c, JobState::Pending)]),
        ],
        "each submission is durable before it is acknowledged"
    );
    h.schedule();
    assert_eq!(
        h.take_events(),
        vec![
            Event::Persist(vec![(a, JobState::Starting), (c, JobState::Starting)]),
            Event::Launch(a, 1, on("n1", 2)),
            Event::Launch(c, 1, on("n2", 1)),
            Event::Persist(vec![(a, JobState::Running), (c, JobState::Running)]),
        ],
        "FIFO starts a, backfills c around b, persists before launching"
    );
    assert_eq!(h.state(b), JobState::Pending);
    assert!(
        !h.core.wants_schedule(h.now),
        "nothing changed: no busy loop"
    );

    h.advance(100);
    h.end_run(a, RunStatus::Completed);
    h.poll();
    assert_eq!(h.stored_state(a), Some(JobState::Completed));
    assert!(
        h.core.wants_schedule(h.now),
        "a completion is a scheduling point"
    );
    h.take_events();
    h.schedule();
    assert_eq!(
        launches(&h.take_events()),
        vec![(b, 1, on("n1", 2))],
        "b gets a's GPUs"
    );
    assert_eq!(h.state(b), JobState::Running);

    h.end_run(
        c,
        RunStatus::Failed {
            reason: "exit 3".into(),
            exit_code: Some(3),
        },
    );
    h.poll();
    let row = h.store_jobs[&c].clone();
    assert_eq!((row.state, row.exit_code), (JobState::Failed, Some(3)));
    assert!(row.placement.is_empty() && row.handle.is_none());
    assert_eq!(
        h.store_runs
            .values()
            .filter(|r| r.state == RunState::Live)
            .count(),
        1,
        "only b's run is live"
    );
}

#[test]
fn cancel_persists_then_stops_and_frees_the_gpus() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    let b = h.submit("b", 1, 100);
    h.schedule();
    h.take_events();
    // Cancelling a pending job touches no backend.
    h.core.cancel_job(h.now, b).unwrap();
    h.drain();
    assert_eq!(
        h.take_events(),
        vec![Event::Persist(vec![(b, JobState::Cancelled)])]
    );
    h.core.cancel_job(h.now, a).unwrap();
    h.drain();
    assert_eq!(
        h.take_events(),
        vec![
            Event::Persist(vec![(a, JobState::Cancelled)]),
            Event::Stop(a, 1, false),
            Event::Persist(vec![]),
        ],
        "cancelled and run marked `stop` durably, then stopped, then the run recorded gone"
    );
    assert!(h.store_runs.values().all(|r| r.state == RunState::Gone));
    assert!(h.core.cancel_job(h.now, a).is_err(), "already cancelled");
    let c = h.submit("c", 1, 100);
    h.schedule();
    assert_eq!(
        h.state(c),
        JobState::Pending,
        "the GPU drains until the backend reports the run gone"
    );
    h.poll();
    h.schedule();
    assert_eq!(h.state(c), JobState::Running, "the GPU came back");
}

#[test]
fn las_preempts_at_the_round_boundary_and_requeues() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("las", Some(60)));
    let a = h.submit("a", 1, 1000);
    h.schedule();
    assert_eq!(h.state(a), JobState::Running);
    h.advance(10);
    let b = h.submit("b", 1, 1000);
    h.take_events();
    h.schedule();
    assert!(
        launches(&h.take_events()).is_empty(),
        "between rounds LAS only fills"
    );
    assert_eq!(
        h.core.poll_timeout(),
        Some(h.now + tessera_model::SimDuration::from_secs(50))
    );
    h.advance(50);
    assert!(h.core.wants_schedule(h.now));
    h.schedule();
    assert_eq!(
        h.take_events(),
        vec![
            Event::Persist(vec![(a, JobState::Pending), (b, JobState::Starting)]),
            Event::Stop(a, 1, true),
            Event::Verify(1),
            Event::Launch(b, 1, on("n1", 1)),
            Event::Persist(vec![(b, JobState::Running)]),
        ],
        "a has 60 GPU-s, b none: a is preempted (gracefully) for b, and asked how its run \
         ended; b is launched once a's run is reported gone (its GPU drained)"
    );
    let row = h.store_jobs[&a].clone();
    assert_eq!(
        (row.state, row.preemptions, row.attempt),
        (JobState::Pending, 1, 1)
    );
    assert_eq!(h.core.metrics().preemptions.get("policy"), Some(&1));
    // Next round: b has 60 GPU-s too; the tie goes to the earlier submission.
    h.advance(60);
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(a, 2, on("n1", 1))]);
    assert_eq!(h.state(b), JobState::Pending);
}

#[test]
fn restart_adopts_requeues_stops_and_records_what_finished() {
    let mut h = Harness::new(vec![node("n1", 4)], policy("fifo", None));
    let ids: Vec<i64> = ["adopt", "requeue", "done", "cancelled"]
        .iter()
        .map(|n| h.submit(n, 1, 100))
        .collect();
    let (adopt, requeue, done, cancelled) = (ids[0], ids[1], ids[2], ids[3]);
    h.schedule();
    assert!(ids.iter().all(|&i| h.state(i) == JobState::Running));
    let handle_of = |h: &Harness, id: i64| h.store_jobs[&id].handle.clone().unwrap();
    // Leave the store as crashes at different moments would have.
    for id in [adopt, requeue] {
        // Crash between launching and recording the run.
        let hd = handle_of(&h, id);
        h.store_runs.remove(&hd);
        let row = h.store_jobs.get_mut(&id).unwrap();
        row.state = JobState::Starting;
        row.handle = None;
    }
    // The requeued job's launch never reached the backend.
    let lost = handle_of_run(&h, requeue);
    h.runs.remove(&lost);
    // Cancel decided and persisted, stop not yet issued.
    let hd = handle_of(&h, cancelled);
    {
        let row = h.store_jobs.get_mut(&cancelled).unwrap();
        row.state = JobState::Cancelled;
        row.handle = None;
        row.placement.clear();
        h.store_runs.get_mut(&hd).unwrap().state = RunState::Stop;
    }
    // A job finished while the daemon was down.
    h.end_run(done, RunStatus::Completed);
    h.take_events();

    h.advance(5);
    h.restart(policy("fifo", None));
    let events = h.take_events();
    assert_eq!(
        events[..3],
        [
            Event::Find(adopt, 1),
            Event::Find(requeue, 1),
            Event::Persist(vec![
                (adopt, JobState::Running),
                (requeue, JobState::Pending)
            ]),
        ],
        "{events:#?}"
    );
    assert!(
        events.contains(&Event::Stop(cancelled, 1, false)),
        "{events:#?}"
    );
    assert_eq!(h.stored_state(done), Some(JobState::Completed));
    assert_eq!(h.store_jobs[&adopt].attempt, 1, "adopted, not restarted");
    assert!(
        h.run_of(cancelled).is_none(),
        "the cancelled job's run was stopped"
    );
    h.schedule();
    assert_eq!(
        launches(&h.take_events()),
        vec![(requeue, 2, on("n1", 1))],
        "only the requeued job starts again, as a new attempt"
    );
    assert_eq!(h.held_gpus().get("n1"), Some(&2));
}

fn handle_of_run(h: &Harness, id: i64) -> String {
    h.runs
        .iter()
        .find(|(_, r)| r.job_id == id)
        .map(|(k, _)| k.clone())
        .unwrap()
}

#[test]
fn refused_launches_retry_after_a_delay_then_fail_the_job() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
    h.refuse_launches = 3;
    let a = h.submit("a", 1, 100);
    h.schedule();
    assert_eq!(h.stored_state(a), Some(JobState::Pending));
    assert!(!h.core.wants_schedule(h.now), "no busy retry loop");
    h.advance(5);
    assert!(h.core.wants_schedule(h.now));
    h.schedule();
    h.advance(5);
    h.schedule();
    let row = &h.store_jobs[&a];
    assert_eq!(row.state, JobState::Failed);
    assert!(
        row.message.as_deref().unwrap().contains("3 times"),
        "{:?}",
        row.message
    );
    assert_eq!(h.held_gpus().get("n1"), None, "nothing held");
}

#[test]
fn a_run_launched_for_a_job_cancelled_meanwhile_is_stopped() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    h.core.schedule(h.now);
    let Some(super::Command::Persist(batch)) = h.core.poll_command() else {
        panic!("the start is persisted first")
    };
    assert_eq!(batch.transitions[0].to, JobState::Starting);
    let Some(super::Command::Launch(launch)) = h.core.poll_command() else {
        panic!("then launched")
    };
    // A cancel arrives while the launch is in flight (a driver launching off-thread).
    h.core.cancel_job(h.now, a).unwrap();
    h.core.handle_launched(
        h.now,
        launch.job_id,
        launch.attempt,
        Ok(crate::core::runs::Handle("orphan".into())),
    );
    let mut saw = Vec::new();
    while let Some(c) = h.core.poll_command() {
        saw.push(match c {
            super::Command::Persist(b) => format!(
                "persist {:?} {:?}",
                b.transitions.iter().map(|t| t.to).collect::<Vec<_>>(),
                b.runs
                    .iter()
                    .map(|r| (r.handle.as_str(), r.state))
                    .collect::<Vec<_>>()
            ),
            super::Command::Stop { run, .. } => format!("stop {}", run.handle),
            other => format!("{other:?}"),
        });
    }
    // The launch in flight was recorded with the cancel, and closed by its answer.
    let placeholder = "launching:tessera-test-1-1";
    assert_eq!(
        saw,
        vec![
            format!(
                "persist [Cancelled] [(\"{placeholder}\", Launching), \
                 (\"{placeholder}\", Gone), (\"orphan\", Stop)]"
            ),
            "stop orphan".to_string()
        ]
    );
}

#[test]
fn failed_stops_are_retried_at_the_next_poll() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    h.schedule();
    h.refuse_stops = 1;
    h.core.cancel_job(h.now, a).unwrap();
    h.drain();
    assert!(h.run_of(a).is_some(), "the refused stop left the run alive");
    assert_eq!(h.core.metrics().backend_errors, 1);
    h.take_events();
    h.poll();
    assert_eq!(h.take_events()[0], Event::Stop(a, 1, false));
    assert!(h.run_of(a).is_none());
    assert!(h.store_runs.values().all(|r| r.state == RunState::Gone));
}

#[test]
fn a_node_going_down_takes_no_new_jobs() {
    let mut h = Harness::new(vec![node("n1", 1), node("n2", 1)], policy("fifo", None));
    let mut down = node("n1", 1);
    down.health = crate::core::runs::NodeHealth::Down;
    h.core.handle_inventory(h.now, &[down, node("n2", 1)]);
    let a = h.submit("a", 1, 100);
    let b = h.submit("b", 1, 100);
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(a, 1, on("n2", 1))]);
    assert_eq!(h.state(b), JobState::Pending);
    h.core
        .handle_inventory(h.now, &[node("n1", 1), node("n2", 1)]);
    assert!(h.core.wants_schedule(h.now));
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(b, 1, on("n1", 1))]);
}

#[derive(Clone, Debug)]
enum Op {
    Submit(u32),
    Cancel(usize),
    Finish(usize, bool),
    Advance(u64),
    Schedule,
    Poll,
    RefuseLaunch,
    Restart,
    Health(bool, bool),
    /// Launches stay in flight (or are carried out at once again).
    Hold(bool),
    /// A launch in flight answers: its run running, already completed, or refused.
    Answer(usize, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u32..=3).prop_map(Op::Submit),
        1 => (0usize..16).prop_map(Op::Cancel),
        2 => (0usize..16, any::<bool>()).prop_map(|(i, ok)| Op::Finish(i, ok)),
        2 => (1u64..90).prop_map(Op::Advance),
        3 => Just(Op::Schedule),
        2 => Just(Op::Poll),
        1 => Just(Op::RefuseLaunch),
        1 => Just(Op::Restart),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(n, up)| Op::Health(n, up)),
        1 => any::<bool>().prop_map(Op::Hold),
        2 => (0usize..8, 0u8..3).prop_map(|(i, k)| Op::Answer(i, k)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever happens, in any order: launches and stops only follow persisted decisions (the
    /// harness asserts it on every command), GPUs are never over-committed, the store agrees
    /// with the core after every drain, no job has two live runs, and none completes twice —
    /// also with launches answered late (after LAS preempted their job, say) or lost in a
    /// restart.
    #[test]
    fn invariants_hold_under_arbitrary_events(
        ops in proptest::collection::vec(op(), 1..60),
        las in any::<bool>(),
    ) {
        let mk = |las: bool| if las { policy("las", Some(30)) } else { policy("fifo", None) };
        let mut h = Harness::new(vec![node("n1", 2), node("n2", 3)], mk(las));
        let mut ids = Vec::new();
        for op in ops {
            match op {
                Op::Submit(g) => ids.push(h.submit("j", g, 100)),
                Op::Cancel(i) => {
                    if let Some(&id) = ids.get(i % ids.len().max(1)) {
                        let _ = h.core.cancel_job(h.now, id);
                        h.drain();
                    }
                }
                Op::Finish(i, ok) => {
                    if let Some(&id) = ids.get(i % ids.len().max(1)) {
                        if h.run_of(id).is_some() {
                            h.end_run(id, if ok { RunStatus::Completed } else {
                                RunStatus::Failed { reason: "x".into(), exit_code: Some(1) }
                            });
                        }
                    }
                }
                Op::Advance(s) => h.advance(s),
                Op::Schedule => h.schedule(),
                Op::Poll => h.poll(),
                Op::RefuseLaunch => h.refuse_launches += 1,
                Op::Restart => {
                    // The backend carried out the launches in flight; their answers are lost.
                    for l in std::mem::take(&mut h.held_launches) {
                        h.start_run(&l, RunStatus::Running);
                    }
                    h.restart(mk(las));
                }
                Op::Hold(on) => h.hold_launches = on,
                Op::Answer(i, kind) => {
                    if !h.held_launches.is_empty() {
                        let l = h.held_launches.remove(i % h.held_launches.len());
                        let status = match kind {
                            0 => Some(RunStatus::Running),
                            1 => Some(RunStatus::Completed),
                            _ => None,
                        };
                        h.answer_launch(l, status);
                    }
                }
                Op::Health(first, up) => {
                    let n = if first { "n1" } else { "n2" };
                    let health = (!up).then_some(crate::core::runs::NodeHealth::Down);
                    h.core.set_node_health(h.now, n, health).unwrap();
                    h.drain();
                }
            }
            if let Err(e) = h.core.check_device_invariants() {
                prop_assert!(false, "device invariants: {}", e);
            }
            for (n, cap) in [("n1", 2), ("n2", 3)] {
                let held = h.held_gpus().get(n).copied().unwrap_or(0);
                prop_assert!(held <= cap, "{n}: {held} GPUs held of {cap}");
            }
            for &id in &ids {
                prop_assert_eq!(h.stored_state(id), Some(h.state(id)), "job {}", id);
                let live = h.runs.values().filter(|r| r.job_id == id && r.status == RunStatus::Running).count();
                prop_assert!(live <= 1, "job {} has {} live runs", id, live);
                if h.state(id).is_terminal() {
                    prop_assert_eq!(live, 0, "finished job {} still runs", id);
                }
                let done = h.runs.values().filter(|r| r.job_id == id && r.status == RunStatus::Completed).count();
                prop_assert!(done <= 1, "job {} completed {} runs", id, done);
            }
        }
    }
}

/// The queue positions a submission answers with (computed from per-priority counts) and the
/// one `describe` shows (a scan) agree with the full sort, whatever the priorities and batches.
#[test]
fn queue_positions_without_sorting_match_the_sorted_queue() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
    let blocker = h.submit("blocker", 1, 1000);
    h.schedule();
    assert_eq!(h.state(blocker), JobState::Running);
    let body = |p: i32| format!("name: p{p}\ncommand: [\"true\"]\ngpus: 1\npriority: {p}\n");
    let batches: [&[i32]; 4] = [&[0, 5, 0, -1, 5], &[3], &[5, -1, 0, 0], &[-7, 9, 3]];
    for batch in batches {
        h.advance(1);
        let items = batch
            .iter()
            .map(|&p| (Some(TOKEN.to_string()), body(p)))
            .collect();
        let views: Vec<_> = h
            .core
            .submit(h.now, items)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        h.drain();
        let sorted = h.core.positions();
        for v in views {
            let idx = h.core.by_id[&v.id];
            assert_eq!(v.queue_position, sorted.get(&idx).copied(), "job {}", v.id);
            assert_eq!(h.core.position(idx), v.queue_position, "job {}", v.id);
        }
    }
    // And after jobs leave the queue.
    h.core.cancel_job(h.now, blocker).unwrap();
    h.drain();
    // Its GPU comes back once the backend reports the run gone.
    h.poll();
    h.schedule();
    let sorted = h.core.positions();
    for (&idx, &pos) in &sorted {
        assert_eq!(h.core.position(idx), Some(pos));
    }
    assert_eq!(sorted.len(), 12, "one of the 13 queued started");
    // A listing's page gets the same positions without sorting the queue, for any page.
    let all: Vec<usize> = h.core.active.iter().copied().collect();
    assert_eq!(h.core.positions_of(&all), sorted);
    for page in all.chunks(5).chain(all.rchunks(3)) {
        let got = h.core.positions_of(page);
        let want: std::collections::HashMap<usize, u32> = page
            .iter()
            .filter_map(|i| sorted.get(i).map(|&p| (*i, p)))
            .collect();
        assert_eq!(got, want, "page {page:?}");
    }
}

/// With arrival coalescing, a burst of submissions does not call the policy once per group
/// commit; a completion still does at once, and the deferred arrivals come due on time.
#[test]
fn submission_only_scheduling_points_are_coalesced() {
    use tessera_model::SimDuration;
    let ms = |n: u64| SimDuration::from_micros(n * 1000);
    let mut h = Harness::new(vec![node("n1", 2)], policy("fifo", None));
    h.core.set_arrival_coalescing(ms(100));
    let a = h.submit("a", 1, 100);
    assert!(
        h.core.wants_schedule(h.now),
        "the first arrival is not held back"
    );
    h.schedule();
    assert_eq!(h.state(a), JobState::Running);
    h.now += ms(10);
    let b = h.submit("b", 1, 100);
    assert!(!h.core.wants_schedule(h.now), "held back");
    assert_eq!(
        h.core.poll_timeout(),
        Some(h.now + ms(90)),
        "due 100 ms after the last scheduling point"
    );
    h.now += ms(90);
    assert!(h.core.wants_schedule(h.now));
    h.schedule();
    assert_eq!(h.state(b), JobState::Running);
    // A completion is never held back.
    h.now += ms(1);
    let c = h.submit("c", 1, 100);
    h.end_run(a, RunStatus::Completed);
    h.poll();
    assert!(
        h.core.wants_schedule(h.now),
        "a completion schedules at once"
    );
    h.schedule();
    assert_eq!(h.state(c), JobState::Running);
}

#[test]
fn a_node_marked_down_has_its_jobs_requeued_once_and_restarted_elsewhere() {
    use crate::core::runs::NodeHealth;
    let mut h = Harness::new(vec![node("n1", 1), node("n2", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    let b = h.submit("b", 1, 100);
    h.schedule();
    assert_eq!(
        launches(&h.take_events()),
        vec![(a, 1, on("n1", 1)), (b, 1, on("n2", 1))]
    );
    h.core
        .set_node_health(h.now, "n1", Some(NodeHealth::Down))
        .unwrap();
    h.drain();
    assert_eq!(
        h.take_events(),
        vec![
            Event::Persist(vec![(a, JobState::Pending)]),
            Event::Stop(a, 1, false),
            Event::Verify(1),
            Event::Persist(vec![]),
        ],
        "requeue persisted, then the run stopped, asked how it ended, recorded gone"
    );
    assert!(h.run_of(a).is_none(), "nothing of a runs on the dead node");
    assert_eq!(h.core.metrics().preemptions.get("node_down"), Some(&1));
    // The backend still calls n1 up: the administrator's word wins. Marking it down again
    // changes nothing.
    h.core
        .handle_inventory(h.now, &[node("n1", 1), node("n2", 1)]);
    h.core
        .set_node_health(h.now, "n1", Some(NodeHealth::Down))
        .unwrap();
    h.schedule();
    assert!(
        launches(&h.take_events()).is_empty(),
        "n2 is busy, n1 is down"
    );
    h.advance(100);
    h.end_run(b, RunStatus::Completed);
    h.poll();
    h.schedule();
    assert_eq!(
        launches(&h.take_events()),
        vec![(a, 2, on("n2", 1))],
        "a restarts once, as attempt 2, on the node that is up"
    );
    assert_eq!(h.store_jobs[&a].preemptions, 1);
    assert!(h.core.set_node_health(h.now, "nope", None).is_err());
    h.core.set_node_health(h.now, "n1", None).unwrap();
    let c = h.submit("c", 1, 100);
    h.schedule();
    assert_eq!(
        launches(&h.take_events()),
        vec![(c, 1, on("n1", 1))],
        "n1 is back"
    );
}

#[test]
fn a_run_that_completed_just_before_its_node_went_down_is_not_run_again() {
    use crate::core::runs::NodeHealth;
    let mut h = Harness::new(vec![node("n1", 1), node("n2", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    h.schedule();
    h.end_run(a, RunStatus::Completed); // not yet polled
    h.core
        .set_node_health(h.now, "n1", Some(NodeHealth::Down))
        .unwrap();
    h.drain();
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.exit_code), (JobState::Completed, Some(0)));
    h.take_events();
    h.schedule();
    assert!(launches(&h.take_events()).is_empty(), "not run again");
}

/// The daemon dies after a node failure stopped a run, before it heard how that run had
/// ended; the run had completed just before. The stopped run stays `stop` in the store until
/// verified, so the restarted daemon holds the job, asks the backend, and records it
/// completed instead of running it a second time (seen in CI as a chaos test's "completed
/// 2 runs").
#[test]
fn a_restart_between_a_node_failure_and_its_verification_runs_nothing_twice() {
    use crate::core::runs::NodeHealth;
    let mut h = Harness::new(vec![node("n1", 1), node("n2", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    h.schedule();
    let run = handle_of_run(&h, a);
    h.end_run(a, RunStatus::Completed); // not yet polled
    h.core
        .set_node_health(h.now, "n1", Some(NodeHealth::Down))
        .unwrap();
    // Carry out everything but the verification, then die.
    let mut asked = false;
    while let Some(c) = h.core.poll_command() {
        match c {
            super::Command::Persist(b) => h.persist(b),
            super::Command::Stop { run, .. } => h.core.handle_stopped(run, Ok(())),
            super::Command::Verify(_) => asked = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(asked);
    assert_eq!(h.store_jobs[&a].state, JobState::Pending);
    assert_eq!(
        h.store_runs[&run].state,
        RunState::Stop,
        "a stopped run is not recorded gone before its ending is known"
    );
    h.restart(policy("fifo", None));
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.exit_code), (JobState::Completed, Some(0)));
    assert_eq!(h.store_runs[&run].state, RunState::Gone);
    h.take_events();
    h.schedule();
    assert!(launches(&h.take_events()).is_empty(), "not run again");
}

#[test]
fn node_failures_reported_by_the_backend_requeue_then_give_up() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    for attempt in 1..=3u32 {
        h.schedule();
        assert_eq!(h.store_jobs[&a].attempt, attempt);
        h.end_run(
            a,
            RunStatus::NodeFailed {
                reason: "NODE_FAIL".into(),
            },
        );
        h.poll();
    }
    let row = &h.store_jobs[&a];
    assert_eq!(row.state, JobState::Failed, "{:?}", row.message);
    assert!(row.message.as_deref().unwrap().contains("runs lost"));
    assert_eq!(h.core.metrics().preemptions.get("lost"), Some(&3));
}

#[test]
fn a_run_that_vanished_from_the_backend_is_requeued_and_restarted() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    h.schedule();
    let lost = handle_of_run(&h, a);
    h.runs.remove(&lost);
    h.poll();
    let row = h.store_jobs[&a].clone();
    assert_eq!(row.state, JobState::Pending, "{:?}", row.message);
    assert!(row.message.unwrap().contains("no longer knows"));
    h.take_events();
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(a, 2, on("n1", 1))]);
}

#[test]
fn a_launch_that_lands_on_a_node_gone_down_meanwhile_is_failed_over() {
    use crate::core::runs::NodeHealth;
    let mut h = Harness::new(vec![node("n1", 1), node("n2", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    h.core.schedule(h.now);
    let Some(super::Command::Persist(_)) = h.core.poll_command() else {
        panic!("persist first")
    };
    let Some(super::Command::Launch(l)) = h.core.poll_command() else {
        panic!("then launch")
    };
    assert_eq!(l.placement[0].node, "n1");
    h.core
        .set_node_health(h.now, "n1", Some(NodeHealth::Down))
        .unwrap();
    h.core.handle_launched(
        h.now,
        l.job_id,
        l.attempt,
        Ok(crate::core::runs::Handle("late".into())),
    );
    let mut stops = 0;
    while let Some(c) = h.core.poll_command() {
        match c {
            super::Command::Persist(b) => h
                .store_runs
                .extend(b.runs.into_iter().map(|r| (r.handle.clone(), r))),
            super::Command::Stop { run, .. } => {
                assert_eq!(h.store_runs[&run.handle].state, RunState::Stop);
                stops += 1;
                h.core.handle_stopped(run, Ok(()));
            }
            super::Command::Verify(hs) => {
                let st = hs.into_iter().map(|x| (x, RunStatus::Cancelled)).collect();
                h.core.handle_verified(h.now, st);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(stops, 1, "the late run is stopped");
    assert_eq!(h.state(a), JobState::Pending);
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(a, 2, on("n2", 1))]);
}

/// Slurm kills the jobs of a node set down (`NODE_FAIL`) before the daemon's next inventory:
/// the job is requeued, and placed again only after a fresh inventory, so never on the node
/// that just died.
#[test]
fn a_job_whose_node_failed_waits_for_a_fresh_inventory_before_it_is_placed_again() {
    let mut h = Harness::new(vec![node("n1", 1), node("n2", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(a, 1, on("n1", 1))]);
    h.nodes[0].health = crate::core::runs::NodeHealth::Down;
    h.end_run(
        a,
        RunStatus::NodeFailed {
            reason: "NODE_FAIL".into(),
        },
    );
    h.poll();
    let events = h.take_events();
    assert!(events.contains(&Event::Inventory), "{events:?}");
    assert_eq!(h.stored_state(a), Some(JobState::Pending));
    h.schedule();
    assert_eq!(
        launches(&h.take_events()),
        vec![(a, 2, on("n2", 1))],
        "restarted once, away from the dead node"
    );
}

/// A poll issued before a node failure's stop may answer "running" for the stopped run: the
/// job stays held until the Verify after the stop answers.
#[test]
fn a_stale_poll_does_not_release_a_job_held_after_a_node_failure() {
    use crate::core::runs::{Handle, NodeHealth};
    let mut h = Harness::new(vec![node("n1", 1), node("n2", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    h.schedule();
    let run = h.store_jobs[&a].handle.clone().unwrap();
    h.core
        .set_node_health(h.now, "n1", Some(NodeHealth::Down))
        .unwrap();
    // The stale poll result arrives before the driver carries out the stop.
    h.core
        .handle_statuses(h.now, vec![(Handle(run.clone()), RunStatus::Running)]);
    h.core.schedule(h.now);
    let mut launched = false;
    while let Some(c) = h.core.poll_command() {
        match c {
            super::Command::Launch(_) => launched = true,
            super::Command::Verify(hs) => {
                assert!(!launched, "relaunched before the stopped run was verified");
                let st = hs.into_iter().map(|x| (x, RunStatus::Cancelled)).collect();
                h.core.handle_verified(h.now, st);
            }
            super::Command::Stop { run, .. } => h.core.handle_stopped(run, Ok(())),
            _ => {}
        }
    }
    assert!(!launched);
    h.take_events();
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(a, 2, on("n2", 1))]);
}

/// A job spec's `mig` field: checked against the cluster at submission (unknown profile for
/// this GPU model, a GPU type without MIG), and honoured by a MIG policy (the job's GPU is
/// reconfigured to an instance of exactly that profile and the job launched on it).
#[test]
fn mig_requests_in_job_specs_are_checked_and_honoured() {
    use crate::core::runs::GresCount;
    let mut v100 = node("v1", 2);
    v100.gres = vec![GresCount {
        kind: Some("v100".into()),
        count: 2,
    }];
    let mut h = Harness::new(vec![node("n1", 2), v100], policy("miso-oracle", None));
    let submit = |h: &mut Harness, extra: &str| {
        let body = format!("name: m\ncommand: [sleep, \"60\"]\ngpus: 1\n{extra}\n");
        let mut r = h.core.submit(h.now, vec![(Some(TOKEN.into()), body)]);
        let out = r.pop().expect("one result");
        h.drain();
        out
    };
    // `a100` is A100-80GB here: its 3g profile is 3g.40gb.
    for (extra, want) in [
        (
            "mig: nvidia.com/mig-3g.20gb",
            "no GPU of this cluster offers nvidia.com/mig-3g.20gb (its MIG profiles: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)",
        ),
        ("mig: 3g.20gb\ngpuType: a100", "A100-80GB has no MIG profile 3g.20gb"),
        ("mig: 5g.50gb", "unknown MIG profile 5g.50gb"),
        ("mig: nvidia.com/mig-any\ngpuType: v100", "V100-32GB has no MIG"),
    ] {
        let e = submit(&mut h, extra).expect_err(extra);
        assert_eq!((e.status, e.code), (400, "invalid_mig"), "{extra}");
        assert!(e.message.contains(want), "{extra}: {}", e.message);
    }
    let job = submit(&mut h, "mig: nvidia.com/mig-3g.40gb").expect("accepted");
    h.take_events();
    h.schedule();
    let events = h.take_events();
    assert!(
        events.contains(&Event::Reconfigure(
            "n1".into(),
            0,
            Some(vec!["3g.40gb".into()])
        )),
        "{events:?}"
    );
    // Once the reconfiguration is done, the job starts on that instance.
    for _ in 0..10 {
        h.advance(10);
        h.poll();
        h.schedule();
        if h.state(job.id) == JobState::Running {
            break;
        }
    }
    assert_eq!(h.state(job.id), JobState::Running);
    let idx = h.core.by_id[&job.id];
    let alloc = h.core.jobs[idx].alloc.clone().expect("placed");
    let Some(tessera_model::GpuPart::Mig(inst)) = alloc.part() else {
        panic!("{alloc:?}");
    };
    let catalog = tessera_model::GpuCatalog::builtin();
    let geo = catalog
        .mig_geometry(catalog.find("A100-80GB").unwrap())
        .unwrap();
    assert_eq!(geo.profile(inst).unwrap().name, "3g.40gb");
}

/// Issue 9: submissions arriving one by one (separate batches, as concurrent clients do) cause
/// one scheduling pass per coalescing interval, however deep the queue: the number of policy
/// calls for a burst is the same with 10 and with 2,000 jobs pending.
#[test]
fn policy_calls_per_submission_burst_do_not_grow_with_pending() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Counting(Box<dyn tessera_sched::Policy>, Arc<AtomicUsize>);
    impl tessera_sched::Policy for Counting {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn round_length(&self) -> Option<tessera_model::SimDuration> {
            self.0.round_length()
        }
        fn schedule(
            &mut self,
            view: &tessera_sched::ClusterView<'_>,
            actions: &mut Vec<tessera_sched::Action>,
        ) {
            self.1.fetch_add(1, Ordering::Relaxed);
            self.0.schedule(view, actions)
        }
    }

    let calls_for = |pending: usize| {
        let calls = Arc::new(AtomicUsize::new(0));
        let p = Box::new(Counting(policy("fifo", None), calls.clone()));
        let mut h = Harness::new(vec![node("n1", 1)], p);
        // The daemon's default (the harness schedules at every arrival otherwise).
        h.core
            .set_arrival_coalescing(tessera_model::SimDuration::from_micros(100_000));
        h.submit("hold", 1, 3600);
        h.schedule();
        let backlog: Vec<(Option<String>, String)> = (0..pending)
            .map(|i| {
                (
                    Some(TOKEN.into()),
                    format!("name: q{i}\ncommand: [x]\ngpus: 1\n"),
                )
            })
            .collect();
        assert!(h.core.submit(h.now, backlog).iter().all(Result::is_ok));
        h.drain();
        h.schedule();
        calls.store(0, Ordering::Relaxed);
        // 300 submissions, one every millisecond, each its own batch.
        for i in 0..300 {
            h.now += tessera_model::SimDuration::from_micros(1_000);
            let body = format!("name: b{i}\ncommand: [x]\ngpus: 1\n");
            let r = h.core.submit(h.now, vec![(Some(TOKEN.into()), body)]);
            assert!(r[0].is_ok());
            h.drain();
            if h.core.wants_schedule(h.now) {
                h.schedule();
            }
        }
        calls.load(Ordering::Relaxed)
    };
    let few = calls_for(10);
    // 300 ms of arrivals, coalesced to one pass per 100 ms.
    assert!((2..=4).contains(&few), "{few} passes for 300 submissions");
    assert_eq!(calls_for(2_000), few);
}

/// The same policy with job tracking refused: it ranks `view.active` from scratch at every
/// call (the reference the incremental path is checked against).
struct Untracked(Box<dyn tessera_sched::Policy>);

impl tessera_sched::Policy for Untracked {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn round_length(&self) -> Option<tessera_model::SimDuration> {
        self.0.round_length()
    }
    fn schedule(
        &mut self,
        view: &tessera_sched::ClusterView<'_>,
        actions: &mut Vec<tessera_sched::Action>,
    ) {
        self.0.schedule(view, actions)
    }
    fn wakeup(&self) -> Option<tessera_model::SimTime> {
        self.0.wakeup()
    }
}

#[derive(Clone, Debug)]
enum Step {
    Submit(u32, u64),
    Cancel(usize),
    Finish(usize, bool),
    Progress(usize, u64),
    Advance(u64),
    Schedule,
    Poll,
    Health(usize, u8),
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u32..=4, 1u64..400).prop_map(|(g, s)| Step::Submit(g, s)),
        1 => (0usize..32).prop_map(Step::Cancel),
        2 => (0usize..32, any::<bool>()).prop_map(|(i, ok)| Step::Finish(i, ok)),
        1 => (0usize..32, 0u64..400).prop_map(|(i, n)| Step::Progress(i, n)),
        2 => (1u64..90).prop_map(Step::Advance),
        3 => Just(Step::Schedule),
        2 => Just(Step::Poll),
        1 => (0usize..3, 0u8..3).prop_map(|(n, h)| Step::Health(n, h)),
        1 => Just(Step::Restart),
    ]
}

/// The refused actions of the last scheduling point as (store id of the job, the action
/// with its job id cleared, why): the policy's job ids are slots, which a compacting core
/// renumbers.
fn refused_by_store_id(core: &super::Core) -> Vec<(Option<i64>, String, super::Refusal)> {
    core.refused()
        .iter()
        .map(|(action, why)| {
            let store_id = action
                .job()
                .and_then(|j| core.jobs.get(j.index()))
                .map(|j| j.row.id);
            let shown = format!("{action:?}");
            let shown = match action.job() {
                Some(j) => shown.replace(&format!("{j:?}"), "JobId(_)"),
                None => shown,
            };
            (store_id, shown, why.clone())
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Issue 9: the view kept between scheduling points (only changed and running jobs
    /// brought up to date, the policy told each change and keeping its own queue) equals the
    /// view rebuilt from every job, and the tracking policy decides exactly what the same
    /// policy ranking that full view decides, on any sequence of submissions, completions,
    /// cancellations, progress reports, nodes going down, draining and coming back, and
    /// restarts.
    #[test]
    fn the_incremental_view_decides_as_the_full_rebuild(
        steps in proptest::collection::vec(step(), 1..80),
        which in 0usize..3,
    ) {
        let name = ["fifo", "las", "srtf"][which];
        let round = (name != "fifo").then_some(30);
        let nodes = || vec![node("n1", 2), node("n2", 4), node("n3", 8)];
        let mut tracked = Harness::new(nodes(), policy(name, round));
        // The tracked core also drops finished jobs' slots as soon as it may (renumbering the
        // policy's jobs); the reference, whose policy cannot renumber, keeps them.
        tracked.core.set_compaction_threshold(1);
        let mut full = Harness::new(nodes(), Box::new(Untracked(policy(name, round))));
        prop_assert!(tracked.core.tracker.tracking() && !full.core.tracker.tracking());
        let mut ids = Vec::new();
        for (n, step) in steps.into_iter().enumerate() {
            for h in [&mut tracked, &mut full] {
                match &step {
                    Step::Submit(g, s) => {
                        h.submit(&format!("j{n}"), *g, *s);
                    }
                    Step::Cancel(i) => {
                        if let Some(&id) = ids.get(i % ids.len().max(1)) {
                            let _ = h.core.cancel_job(h.now, id);
                            h.drain();
                        }
                    }
                    Step::Finish(i, ok) => {
                        if let Some(&id) = ids.get(i % ids.len().max(1)) {
                            if h.run_of(id).is_some() {
                                h.end_run(id, if *ok { RunStatus::Completed } else {
                                    RunStatus::Failed { reason: "x".into(), exit_code: Some(1) }
                                });
                            }
                        }
                    }
                    Step::Progress(i, iters) => {
                        if let Some(&id) = ids.get(i % ids.len().max(1)) {
                            let report = crate::types::ProgressReport {
                                iterations: *iters,
                                samples_per_second: None,
                                iterations_per_second: Some(1.0 + (*iters % 3) as f64),
                                point: None,
                            };
                            let _ = h.core.report_progress(h.now, id, report);
                        }
                    }
                    Step::Advance(s) => h.advance(*s),
                    Step::Schedule => h.schedule(),
                    Step::Poll => h.poll(),
                    Step::Health(i, health) => {
                        let health = match health {
                            0 => None,
                            1 => Some(crate::core::runs::NodeHealth::Down),
                            _ => Some(crate::core::runs::NodeHealth::Draining),
                        };
                        h.core.set_node_health(h.now, ["n1", "n2", "n3"][*i], health).unwrap();
                        h.drain();
                    }
                    Step::Restart => {
                        let p: Box<dyn tessera_sched::Policy> = if h.core.tracker.tracking() {
                            policy(name, round)
                        } else {
                            Box::new(Untracked(policy(name, round)))
                        };
                        h.restart(p);
                        h.core.set_compaction_threshold(1);
                    }
                }
                h.core.archive_finished();
            }
            if let Step::Submit(..) = step {
                ids.push(*tracked.store_jobs.keys().last().unwrap());
            }
            prop_assert_eq!(tracked.take_events(), full.take_events(), "step {}: {:?}", n, step);
            // A preemptive re-plan may free a draining node's GPUs in its own ledger and
            // propose a start there, which the daemon refuses: the same with both paths (jobs
            // named by their store ids: the tracked core renumbers its jobs as it compacts).
            prop_assert_eq!(refused_by_store_id(&tracked.core), refused_by_store_id(&full.core));
            prop_assert_eq!(&tracked.core.view_mismatch, &None);
            prop_assert_eq!(&full.core.view_mismatch, &None);
            if let Err(e) = tracked.core.check_device_invariants() {
                prop_assert!(false, "device invariants: {}", e);
            }
        }
    }
}

/// Issue 9: a node that is down or draining shows no free GPU in the device state the policy
/// places from (`view.state`), so a tracking policy proposes nothing there (no refusals), and
/// its GPUs come back when it does.
#[test]
fn nodes_not_up_are_masked_in_the_state_the_policy_reads() {
    let mut h = Harness::new(vec![node("n1", 2), node("n2", 2)], policy("fifo", None));
    h.core
        .set_node_health(h.now, "n1", Some(crate::core::runs::NodeHealth::Draining))
        .unwrap();
    h.drain();
    let ids: Vec<i64> = (0..3).map(|i| h.submit(&format!("j{i}"), 1, 100)).collect();
    h.schedule();
    assert_eq!(h.core.device_state().free()[0].gpus, 0);
    assert_eq!(h.core.device_state().free_gpus(), 0, "n2's two GPUs taken");
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    let l = launches(&h.take_events());
    assert_eq!(l, vec![(ids[0], 1, on("n2", 1)), (ids[1], 1, on("n2", 1))]);
    h.core.set_node_health(h.now, "n1", None).unwrap();
    h.drain();
    assert_eq!(h.core.device_state().free()[0].gpus, 2);
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(ids[2], 1, on("n1", 1))]);
    h.core.check_device_invariants().unwrap();
}

/// Issue 9: a scheduling pass brings up to date only the jobs that changed since the last
/// one (and those holding GPUs), not every pending job: a burst of 32 submissions over 10 or
/// 2,000 pending jobs costs the next pass the same number of view updates.
#[test]
fn a_pass_updates_only_changed_jobs_whatever_the_queue_depth() {
    let synced_for = |pending: usize| {
        let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
        h.submit("hold", 1, 3600);
        h.schedule();
        let backlog: Vec<(Option<String>, String)> = (0..pending)
            .map(|i| {
                (
                    Some(TOKEN.into()),
                    format!("name: q{i}\ncommand: [x]\ngpus: 1\n"),
                )
            })
            .collect();
        assert!(h.core.submit(h.now, backlog).iter().all(Result::is_ok));
        h.drain();
        h.schedule();
        assert!(
            h.core.last_synced >= pending,
            "the backlog arrives in one pass"
        );
        let burst: Vec<(Option<String>, String)> = (0..32)
            .map(|i| {
                (
                    Some(TOKEN.into()),
                    format!("name: b{i}\ncommand: [x]\ngpus: 1\n"),
                )
            })
            .collect();
        assert!(h.core.submit(h.now, burst).iter().all(Result::is_ok));
        h.drain();
        h.schedule();
        assert_eq!(h.core.view_mismatch, None);
        h.core.last_synced
    };
    assert_eq!(synced_for(10), 32);
    assert_eq!(synced_for(2_000), 32);
}

/// Issue 9: finished jobs leave nothing in memory. Once their slots are as many as the jobs
/// held, a scheduling point drops them and renumbers the rest (the policy renumbers its own
/// state); decisions are exactly those of a core that keeps every slot, and jobs submitted
/// afterwards are found and scheduled as usual. Every policy that renumbers is run, on 12
/// GPUs, and those whose state fills up with a queue (MISO's GPU slots, MPS phases and
/// re-partitions) also on 4.
#[test]
fn finished_jobs_slots_are_dropped_and_decisions_do_not_change() {
    // (policy, round, on the crowded cluster of 4 GPUs rather than 12)
    let mut runs: Vec<(String, Option<u64>, bool)> = [
        ("fifo", None, false),
        ("las", Some(30), false),
        ("srtf", Some(30), false),
        ("ftf", Some(30), false),
        ("ftf", None, false),
        ("dilu", None, false),
        ("serve-exclusive", None, false),
        ("crius", Some(30), false),
        ("crius-no-opportunistic", Some(30), true),
        ("fcfs", Some(30), false),
        ("gavel", Some(30), false),
        ("gavel", Some(30), true),
        ("gavel-max-sum", Some(60), true),
        ("sia", Some(30), false),
        ("sia", Some(30), true),
        ("elastic", Some(30), false),
        ("synergy", None, true),
    ]
    .into_iter()
    .map(|(name, round, crowded)| (name.to_string(), round, crowded))
    .collect();
    for order in ["fifo", "srtf", "las", "ftf"] {
        for alloc in ["proportional", "greedy", "tune", "opt"] {
            runs.push((format!("{order}+{alloc}"), Some(30), false));
        }
    }
    for name in ["nopart", "static", "mps", "miso", "miso-oracle"] {
        runs.push((name.to_string(), None, false));
        runs.push((name.to_string(), None, true));
    }
    for (name, round, crowded) in runs {
        let name = name.as_str();
        let nodes = || {
            if crowded {
                vec![node("n1", 4)]
            } else {
                vec![node("n1", 4), node("n2", 8)]
            }
        };
        let several_gpus = tessera_mechanisms::capabilities::policy_info(name)
            .is_ok_and(|p| p.capabilities.honours(tessera_sched::Capability::MultiGpu));
        let mut compacting = Harness::new(nodes(), policy(name, round));
        compacting.core.set_compaction_threshold(4);
        let mut keeping = Harness::new(nodes(), policy(name, round));
        let mut compactions = 0;
        let mut launched = 0;
        for wave in 0..6u64 {
            for h in [&mut compacting, &mut keeping] {
                for j in 0..8u64 {
                    // A policy running every job on one GPU refuses larger ones up front.
                    let gpus = if several_gpus { 1 + (j % 4) as u32 } else { 1 };
                    h.submit(&format!("w{wave}-{j}"), gpus, 10 + j * 7);
                }
                h.schedule();
                // Six of the eight jobs end per wave: a backlog builds up, so compactions
                // renumber jobs still queued or running and jobs arrive after them.
                for t in 0..12u64 {
                    h.advance(20);
                    let running: Vec<i64> = h
                        .runs
                        .values()
                        .filter(|r| r.status == RunStatus::Running)
                        .map(|r| r.job_id)
                        .collect();
                    if let (0, Some(&id)) = (t % 2, running.first()) {
                        h.end_run(id, RunStatus::Completed);
                    }
                    h.poll();
                    h.core.archive_finished();
                    h.schedule();
                }
            }
            let events = compacting.take_events();
            launched += launches(&events).len();
            assert_eq!(events, keeping.take_events(), "{name} wave {wave}");
            if compacting.core.job_count() < keeping.core.job_count() {
                compactions += 1;
            }
            assert_eq!(
                compacting.core.resident_jobs(),
                keeping.core.resident_jobs()
            );
            assert!(compacting.core.check_device_invariants().is_ok());
        }
        assert!(compactions > 0, "{name}: no compaction happened");
        assert!(launched >= 16, "{name}: {launched} launches");
        // Every job still held is found by its id and has its own row.
        for id in keeping.store_jobs.keys() {
            assert_eq!(
                compacting.core.job_row(*id).map(|r| (r.id, r.state)),
                keeping.core.job_row(*id).map(|r| (r.id, r.state)),
                "{name} job {id}"
            );
        }
        // The table holds at most as many slots as twice the jobs held (a compaction waits
        // until finished slots are as many as those), far fewer than the jobs submitted.
        assert!(
            compacting.core.job_count() <= 2 * compacting.core.resident_jobs().max(4),
            "{name}: {} slots for {} jobs held",
            compacting.core.job_count(),
            compacting.core.resident_jobs()
        );
        assert_eq!(keeping.core.job_count(), 48);
    }
}

/// MISO keeps what it knows of each job as jobs keep arriving (its per-job state once
/// started over whenever the job table grew: jobs it had placed were queued again and
/// started a second time, which the core refused).
#[test]
fn miso_places_each_job_once_while_jobs_keep_arriving() {
    for name in ["miso", "miso-oracle"] {
        let mut h = Harness::new(vec![node("n1", 4)], policy(name, None));
        let mut launched = 0;
        for wave in 0..4u64 {
            for j in 0..8u64 {
                h.submit(&format!("w{wave}-{j}"), 1, 10 + j * 7);
            }
            h.schedule();
            for t in 0..12u64 {
                h.advance(20);
                if t % 3 == 0 {
                    h.submit(&format!("x{wave}-{t}"), 1, 30);
                }
                let running = h
                    .runs
                    .values()
                    .find(|r| r.status == RunStatus::Running)
                    .map(|r| r.job_id);
                if let Some(id) = running {
                    h.end_run(id, RunStatus::Completed);
                }
                h.poll();
                h.schedule();
                assert!(
                    h.core.refused().is_empty(),
                    "{name}: {:?}",
                    h.core.refused()
                );
            }
            launched += launches(&h.take_events()).len();
        }
        assert!(launched >= 32, "{name}: {launched} launches");
    }
}

// ---------------------------------------------------------------------------------------------
// Policy preemptions race completions: a run the policy preempts may have completed since the
// last poll. Its job stays visible to the policy, but nothing of it is launched again until
// the backend has said how the stopped run ended.

/// Transitions of job `id` to `to` in the persisted batches.
fn transitions_to(events: &[Event], id: i64, to: JobState) -> usize {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Persist(t) => Some(t.iter().filter(|&&(j, s)| j == id && s == to).count()),
            _ => None,
        })
        .sum()
}

/// LAS on one GPU: `a` runs, `b` arrives 10 s later; at the 60 s round LAS preempts `a`.
/// Returns (harness, a, b) just before that round.
fn las_about_to_preempt() -> (Harness, i64, i64) {
    let mut h = Harness::new(vec![node("n1", 1)], policy("las", Some(60)));
    let a = h.submit("a", 1, 1000);
    h.schedule();
    h.advance(10);
    let b = h.submit("b", 1, 1000);
    h.schedule();
    h.advance(50);
    (h, a, b)
}

/// A policy that returns whatever batch it was last given (and nothing after).
struct Scripted(std::sync::Arc<std::sync::Mutex<Vec<tessera_sched::Action>>>);

impl tessera_sched::Policy for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn round_length(&self) -> Option<tessera_model::SimDuration> {
        None
    }
    fn schedule(
        &mut self,
        _view: &tessera_sched::ClusterView<'_>,
        actions: &mut Vec<tessera_sched::Action>,
    ) {
        if let Ok(mut batch) = self.0.lock() {
            actions.append(&mut batch);
        }
    }
}

type Script = std::sync::Arc<std::sync::Mutex<Vec<tessera_sched::Action>>>;

fn scripted() -> (Box<dyn tessera_sched::Policy>, Script) {
    let s = Script::default();
    (Box::new(Scripted(s.clone())), s)
}

fn give(s: &Script, batch: Vec<tessera_sched::Action>) {
    *s.lock().unwrap() = batch;
}

/// GPU `g` of the first node, whole.
fn whole_gpu(g: u32) -> tessera_model::Allocation {
    whole_gpu_with(g, 1)
}

/// GPU `g` of the first node, whole, with `cores` CPU cores.
fn whole_gpu_with(g: u32, cores: u64) -> tessera_model::Allocation {
    use tessera_model::{Bytes, DeviceAlloc, GpuMask, GpuPart, MilliCpu, NodeId, NodeShare};
    tessera_model::Allocation::new(vec![NodeShare {
        node: NodeId(0),
        gpus: 1,
        cpu: MilliCpu::from_cores(cores),
        memory: Bytes::from_gib(1),
        devices: Some(DeviceAlloc {
            gpus: GpuMask(1 << g),
            part: GpuPart::Whole,
        }),
    }])
}

fn start(job: u32, g: u32) -> tessera_sched::Action {
    tessera_sched::Action::Start {
        job: tessera_model::JobId(job),
        allocation: whole_gpu(g),
    }
}

fn preempt(job: u32) -> tessera_sched::Action {
    tessera_sched::Action::Preempt {
        job: tessera_model::JobId(job),
    }
}

/// (a) The run LAS preempts had completed since the last poll: the job is recorded completed
/// once, from the stopped run, and never launched again.
#[test]
fn a_run_that_completed_just_before_a_policy_preemption_is_not_run_again() {
    let (mut h, a, b) = las_about_to_preempt();
    h.end_run(a, RunStatus::Completed); // not yet polled
    h.take_events();
    h.schedule();
    let mut events = h.take_events();
    assert!(events.contains(&Event::Stop(a, 1, true)), "{events:#?}");
    let row = h.store_jobs[&a].clone();
    assert_eq!(
        (row.state, row.exit_code, row.attempt),
        (JobState::Completed, Some(0), 1),
        "{:?}",
        row.message
    );
    assert!(h
        .store_runs
        .values()
        .filter(|r| r.job_id == a)
        .all(|r| r.state == RunState::Gone));
    for _ in 0..4 {
        h.advance(60);
        h.poll();
        h.schedule();
    }
    h.advance(1000);
    h.end_run(b, RunStatus::Completed);
    h.poll();
    h.schedule();
    events.extend(h.take_events());
    assert!(
        launches(&events).iter().all(|l| l.0 != a),
        "a launched again: {events:#?}"
    );
    assert_eq!(transitions_to(&events, a, JobState::Completed), 1);
    assert_eq!(h.stored_state(b), Some(JobState::Completed));
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
}

/// (b) The preempted run was really stopped: the backend is asked how it ended before the
/// job may run again, its run recorded gone then, and the job restarts at the next round.
#[test]
fn a_run_really_stopped_by_a_policy_preemption_runs_again_after_verification() {
    let (mut h, a, b) = las_about_to_preempt();
    let run = h.store_jobs[&a].handle.clone().unwrap();
    h.take_events();
    h.schedule();
    let events = h.take_events();
    let stop = events.iter().position(|e| *e == Event::Stop(a, 1, true));
    let verify = events.iter().position(|e| *e == Event::Verify(1));
    assert!(
        stop.is_some() && verify > stop,
        "stopped, then asked how it ended: {events:#?}"
    );
    assert_eq!(h.store_runs[&run].state, RunState::Gone);
    assert_eq!(h.state(a), JobState::Pending);
    assert_eq!(h.state(b), JobState::Running);
    h.advance(60);
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(a, 2, on("n1", 1))]);
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
}

/// (b, same batch) A policy that preempts a job and places it again in the same batch (MISO
/// re-partitioning a GPU) is not refused: the new attempt is recorded at once, but launched
/// only after the stopped run is verified.
#[test]
fn a_job_preempted_and_placed_again_in_one_batch_is_launched_after_verification() {
    let (p, script) = scripted();
    let mut h = Harness::new(vec![node("n1", 2)], p);
    let a = h.submit("a", 1, 100);
    give(&script, vec![start(0, 0)]);
    h.schedule();
    h.take_events();
    give(&script, vec![preempt(0), start(0, 1)]);
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    assert_eq!(
        h.take_events(),
        vec![
            Event::Persist(vec![(a, JobState::Pending), (a, JobState::Starting)]),
            Event::Stop(a, 1, true),
            Event::Verify(1),
            Event::Persist(vec![]),
            Event::Launch(a, 2, vec![("n1".to_string(), 1)]),
            Event::Persist(vec![(a, JobState::Running)]),
        ],
        "the second attempt is launched once the first is known stopped"
    );
    assert_eq!(h.held_gpus().get("n1"), Some(&1));
}

/// (a, same batch) As above, but the run had completed before the preemption: the start
/// decided with it is dropped, its GPU freed, and the job recorded completed once.
#[test]
fn a_start_decided_with_the_preemption_of_a_completed_run_is_dropped() {
    let (p, script) = scripted();
    let mut h = Harness::new(vec![node("n1", 2)], p);
    let a = h.submit("a", 1, 100);
    give(&script, vec![start(0, 0)]);
    h.schedule();
    h.end_run(a, RunStatus::Completed); // not yet polled
    h.take_events();
    give(&script, vec![preempt(0), start(0, 1)]);
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    let events = h.take_events();
    assert!(launches(&events).is_empty(), "launched again: {events:#?}");
    let row = h.store_jobs[&a].clone();
    assert_eq!((row.state, row.exit_code), (JobState::Completed, Some(0)));
    assert_eq!(transitions_to(&events, a, JobState::Completed), 1);
    assert_eq!(
        h.held_gpus().get("n1"),
        None,
        "the parked start's GPU is free"
    );
    assert!(h.core.device_state().free().iter().all(|f| f.gpus == 2));
    h.poll();
    h.schedule();
    assert!(launches(&h.take_events()).is_empty());
}

/// Carries out every queued command but the verifications (the daemon dies before their
/// answers); true when one was asked, and whether anything was launched.
fn drain_but_verify(h: &mut Harness) -> (bool, bool) {
    let (mut asked, mut launched) = (false, false);
    while let Some(c) = h.core.poll_command() {
        match c {
            super::Command::Persist(b) => h.persist(b),
            super::Command::Stop { run, preempt } => {
                if let Some(r) = h.runs.get_mut(&run.handle) {
                    if !r.status.is_terminal() {
                        r.status = if preempt {
                            RunStatus::Preempted
                        } else {
                            RunStatus::Cancelled
                        };
                    }
                }
                h.core.handle_stopped(run, Ok(()));
            }
            super::Command::Verify(_) => asked = true,
            super::Command::Launch(_) => launched = true,
            super::Command::Retune(r) => {
                let result = h.retune_error.clone().map_or(Ok(()), Err);
                h.core.handle_retuned(h.now, r.job_id, r.attempt, result);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    (asked, launched)
}

/// (c) The daemon dies after LAS preempted a run that had just completed, before it heard
/// how that run ended. The run stays `stop` in the store, so the restarted daemon verifies
/// it and records the job completed instead of running it a second time.
#[test]
fn a_restart_between_a_policy_preemption_and_its_verification_runs_nothing_twice() {
    let (mut h, a, _b) = las_about_to_preempt();
    let run = h.store_jobs[&a].handle.clone().unwrap();
    h.end_run(a, RunStatus::Completed); // not yet polled
    h.core.schedule(h.now);
    let (asked, launched) = drain_but_verify(&mut h);
    assert!(
        asked && !launched,
        "a's run asked about; b's launch waits for a's run to be reported gone"
    );
    assert_eq!(h.store_jobs[&a].state, JobState::Pending);
    assert_eq!(
        h.store_runs[&run].state,
        RunState::Stop,
        "a preempted run is not recorded gone before its ending is known"
    );
    h.take_events();
    h.restart(policy("las", Some(60)));
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.exit_code), (JobState::Completed, Some(0)));
    assert_eq!(h.store_runs[&run].state, RunState::Gone);
    for _ in 0..3 {
        h.advance(60);
        h.poll();
        h.schedule();
    }
    let events = h.take_events();
    assert!(launches(&events).iter().all(|l| l.0 != a), "{events:#?}");
    assert_eq!(transitions_to(&events, a, JobState::Completed), 1);
}

/// (c, same batch) The daemon dies with a start recorded for the job preempted in the same
/// batch, its launch parked behind the verification: the restart requeues the unlaunched
/// attempt, verifies the stopped run of the attempt before, and records the job completed.
#[test]
fn a_restart_with_a_start_parked_behind_a_verification_runs_nothing_twice() {
    let (p, script) = scripted();
    let mut h = Harness::new(vec![node("n1", 2)], p);
    let a = h.submit("a", 1, 100);
    give(&script, vec![start(0, 0)]);
    h.schedule();
    let run = h.store_jobs[&a].handle.clone().unwrap();
    h.end_run(a, RunStatus::Completed); // not yet polled
    give(&script, vec![preempt(0), start(0, 1)]);
    h.core.schedule(h.now);
    let (asked, launched) = drain_but_verify(&mut h);
    assert!(asked);
    assert!(!launched, "launched before the stopped run was verified");
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.attempt), (JobState::Starting, 2));
    assert_eq!(h.store_runs[&run].state, RunState::Stop);
    h.take_events();
    let (p, script) = scripted();
    h.restart(p);
    let row = &h.store_jobs[&a];
    assert_eq!(
        (row.state, row.exit_code),
        (JobState::Completed, Some(0)),
        "{:?}",
        row.message
    );
    assert_eq!(h.store_runs[&run].state, RunState::Gone);
    give(&script, vec![start(0, 0)]);
    h.schedule();
    let events = h.take_events();
    assert!(launches(&events).is_empty(), "{events:#?}");
}

/// The stop of a preempted run fails (retried at the next poll) and the Verify behind it
/// answers "running": that says nothing of how the stopped run ends, so the job stays
/// parked; the run completes before the retried stop, and the job is recorded completed.
#[test]
fn a_verification_answered_before_the_stop_was_carried_out_is_asked_again() {
    let (mut h, a, _b) = las_about_to_preempt();
    h.refuse_stops = 1;
    h.take_events();
    h.schedule();
    let events = h.take_events();
    assert!(events.contains(&Event::Verify(1)), "{events:#?}");
    assert!(h.run_of(a).is_some(), "the stop failed: a still runs");
    h.advance(60);
    h.schedule(); // a round: nothing of a may be launched yet
    h.end_run(a, RunStatus::Completed);
    h.poll(); // retries the stop, then asks again
    let row = h.store_jobs[&a].clone();
    assert_eq!(
        (row.state, row.exit_code),
        (JobState::Completed, Some(0)),
        "{:?}",
        row.message
    );
    h.advance(60);
    h.schedule();
    let events = h.take_events();
    assert!(launches(&events).iter().all(|l| l.0 != a), "{events:#?}");
}

// Resizes and restarts with a new quota. Both stop a run and start a new attempt of its job
// at once; the run may have completed since the last poll, so the new attempt is launched
// only once the backend has said how the stopped run ended, as after a policy preemption.

fn resize(job: u32, g: u32) -> tessera_sched::Action {
    tessera_sched::Action::Resize {
        job: tessera_model::JobId(job),
        allocation: whole_gpu(g),
    }
}

/// A retune of `job` to `cores` CPU cores on GPU 0 (same devices).
fn retune(job: u32, cores: u64) -> tessera_sched::Action {
    tessera_sched::Action::Retune {
        job: tessera_model::JobId(job),
        allocation: whole_gpu_with(0, cores),
    }
}

/// A scripted policy on one node of two GPUs, job `a` running on GPU 0.
fn one_job_running() -> (Harness, Script, i64) {
    let (p, script) = scripted();
    let mut h = Harness::new(vec![node("n1", 2)], p);
    let a = h.submit("a", 1, 100);
    give(&script, vec![start(0, 0)]);
    h.schedule();
    assert_eq!(h.state(a), JobState::Running);
    h.take_events();
    (h, script, a)
}

/// As [`one_job_running`], with a backend that cannot retune in place (as Slurm).
fn one_job_running_no_retune() -> (Harness, Script, i64) {
    let (mut h, script, a) = one_job_running();
    h.retune_error = Some(crate::error::BackendError::Declined {
        action: "retune",
        backend: "slurm",
    });
    (h, script, a)
}

/// Job `a` ended completed once, from its first run (message naming `cause`), nothing of it
/// launched in `events` nor at later scheduling points, its GPU free.
fn completed_once_from_its_first_run(h: &mut Harness, a: i64, events: &[Event], cause: &str) {
    assert!(events.contains(&Event::Stop(a, 1, true)), "{events:#?}");
    assert!(launches(events).is_empty(), "launched again: {events:#?}");
    let row = h.store_jobs[&a].clone();
    assert_eq!(
        (row.state, row.exit_code),
        (JobState::Completed, Some(0)),
        "{:?}",
        row.message
    );
    assert_eq!(
        row.message.as_deref(),
        Some(format!("completed ({cause})").as_str())
    );
    assert_eq!(transitions_to(events, a, JobState::Completed), 1);
    assert!(h.store_runs.values().all(|r| r.state == RunState::Gone));
    assert_eq!(
        h.held_gpus().get("n1"),
        None,
        "the new attempt's GPU is free"
    );
    assert!(h.core.device_state().free().iter().all(|f| f.gpus == 2));
    h.advance(60);
    h.poll();
    h.schedule();
    let later = h.take_events();
    assert!(launches(&later).is_empty(), "{later:#?}");
    assert_eq!(transitions_to(&later, a, JobState::Completed), 0);
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
}

/// (a) The run the policy resizes had completed since the last poll: the resized attempt is
/// never launched, its GPU is freed, and the job is recorded completed once.
#[test]
fn a_run_that_completed_just_before_a_resize_is_not_run_again() {
    let (mut h, script, a) = one_job_running();
    h.end_run(a, RunStatus::Completed); // not yet polled
    give(&script, vec![resize(0, 1)]);
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    let events = h.take_events();
    completed_once_from_its_first_run(&mut h, a, &events, "resized by the policy right after");
}

/// (b) The resized run was really stopped: the backend is asked how it ended, after the stop,
/// and the resized attempt is launched then, on its new GPU.
#[test]
fn a_run_really_stopped_by_a_resize_is_launched_again_after_verification() {
    let (mut h, script, a) = one_job_running();
    let run = h.store_jobs[&a].handle.clone().unwrap();
    give(&script, vec![resize(0, 1)]);
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    assert_eq!(
        h.take_events(),
        vec![
            Event::Persist(vec![(a, JobState::Starting)]),
            Event::Stop(a, 1, true),
            Event::Verify(1),
            Event::Persist(vec![]),
            Event::Launch(a, 2, on("n1", 1)),
            Event::Persist(vec![(a, JobState::Running)]),
        ],
        "the resized attempt is launched once the first is known stopped"
    );
    assert_eq!(h.store_runs[&run].state, RunState::Gone);
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.attempt), (JobState::Running, 2));
    let live = h
        .runs
        .values()
        .filter(|r| r.job_id == a && r.status == RunStatus::Running);
    assert_eq!(live.count(), 1, "only the resized attempt runs");
    assert_eq!(h.held_gpus().get("n1"), Some(&1));
    let gpus = h.core.device_state().free()[0].gpus;
    assert_eq!(gpus, 1, "one GPU held, by the resized attempt");
}

/// (a) A retune the backend declines restarts the job with its new quota; the run had
/// completed since the last poll: the new attempt is never launched, and the job is recorded
/// completed once.
#[test]
fn a_run_that_completed_just_before_a_restart_with_a_new_quota_is_not_run_again() {
    let (mut h, script, a) = one_job_running_no_retune();
    h.end_run(a, RunStatus::Completed); // not yet polled
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    let events = h.take_events();
    assert!(events.contains(&Event::Retune(a, 1)), "{events:#?}");
    completed_once_from_its_first_run(&mut h, a, &events, "restarted with a new quota right after");
}

/// (b) As above, the run really stopped: asked about after the stop, then the new attempt is
/// launched with the new quota.
#[test]
fn a_run_really_stopped_for_a_new_quota_is_launched_again_after_verification() {
    let (mut h, script, a) = one_job_running_no_retune();
    let run = h.store_jobs[&a].handle.clone().unwrap();
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    assert_eq!(
        h.take_events(),
        vec![
            Event::Persist(vec![(a, JobState::Running)]),
            Event::Retune(a, 1),
            Event::Persist(vec![(a, JobState::Starting)]),
            Event::Stop(a, 1, true),
            Event::Verify(1),
            Event::Persist(vec![]),
            Event::Launch(a, 2, on("n1", 1)),
            Event::Persist(vec![(a, JobState::Running)]),
        ],
        "the new attempt is launched once the first is known stopped"
    );
    assert_eq!(h.store_runs[&run].state, RunState::Gone);
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.attempt), (JobState::Running, 2));
    assert_eq!(row.placement[0].cpu, tessera_model::MilliCpu::from_cores(2));
    assert_eq!(h.core.metrics().retunes.get("restart"), Some(&1));
}

/// (c) The daemon dies after a resize of a run that had just completed, before it heard how
/// that run ended: the run stays `stop` and the resized attempt `starting` (never launched) in
/// the store; the restarted daemon requeues the attempt, verifies the run and records the job
/// completed instead of running it a second time.
#[test]
fn a_restart_between_a_resize_and_its_verification_runs_nothing_twice() {
    let (mut h, script, a) = one_job_running();
    let run = h.store_jobs[&a].handle.clone().unwrap();
    h.end_run(a, RunStatus::Completed); // not yet polled
    give(&script, vec![resize(0, 1)]);
    h.core.schedule(h.now);
    let (asked, launched) = drain_but_verify(&mut h);
    assert!(asked);
    assert!(!launched, "launched before the stopped run was verified");
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.attempt), (JobState::Starting, 2));
    assert_eq!(h.store_runs[&run].state, RunState::Stop);
    h.take_events();
    let (p, script) = scripted();
    h.restart(p);
    let row = &h.store_jobs[&a];
    assert_eq!(
        (row.state, row.exit_code),
        (JobState::Completed, Some(0)),
        "{:?}",
        row.message
    );
    assert_eq!(h.store_runs[&run].state, RunState::Gone);
    give(&script, vec![start(0, 0)]);
    h.schedule();
    let events = h.take_events();
    assert!(launches(&events).is_empty(), "{events:#?}");
}

/// (c) The daemon dies after restarting a job for a new quota, its run really stopped, before
/// the verification: the restarted daemon verifies the run, then lets the job run again, once.
#[test]
fn a_restart_between_a_restart_for_a_new_quota_and_its_verification_runs_the_job_once() {
    let (mut h, script, a) = one_job_running_no_retune();
    let run = h.store_jobs[&a].handle.clone().unwrap();
    give(&script, vec![retune(0, 2)]);
    h.core.schedule(h.now);
    let (asked, launched) = drain_but_verify(&mut h);
    assert!(asked);
    assert!(!launched, "launched before the stopped run was verified");
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.attempt), (JobState::Starting, 2));
    assert_eq!(h.store_runs[&run].state, RunState::Stop);
    h.take_events();
    let (p, script) = scripted();
    h.restart(p);
    assert_eq!(h.store_jobs[&a].state, JobState::Pending);
    assert_eq!(h.store_runs[&run].state, RunState::Gone);
    give(&script, vec![start(0, 0)]);
    h.schedule();
    let events = h.take_events();
    assert_eq!(launches(&events), vec![(a, 3, on("n1", 1))]);
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
}

// A job retuned, resized or preempted while its launch is still in flight: the run that
// launch starts is given up as any stopped run. No later attempt of the job is launched
// until the launch has answered and its run has been stopped and verified; a run that had
// already completed finishes the job once.

/// Job `a` started on GPU 0 of a two-GPU node, its launch in flight (held, unanswered).
fn one_job_launching() -> (Harness, Script, i64, crate::core::runs::Launch) {
    let (p, script) = scripted();
    let mut h = Harness::new(vec![node("n1", 2)], p);
    let a = h.submit("a", 1, 100);
    h.hold_launches = true;
    give(&script, vec![start(0, 0)]);
    h.schedule();
    assert_eq!(h.state(a), JobState::Starting);
    let first = h.held_launches.pop().expect("the first launch, in flight");
    assert_eq!(first.attempt, 1);
    h.take_events();
    (h, script, a, first)
}

/// Attempts of job `a` whose launch, given up in flight, is recorded `launching`.
fn launching_rows(h: &Harness, a: i64) -> Vec<u32> {
    h.store_runs
        .values()
        .filter(|r| r.job_id == a && r.state == RunState::Launching)
        .map(|r| r.attempt)
        .collect()
}

/// Runs of job `a` the backend runs now.
fn live_runs(h: &Harness, a: i64) -> usize {
    h.runs
        .values()
        .filter(|r| r.job_id == a && r.status == RunStatus::Running)
        .count()
}

/// (a) The launch answers after the retune, its run already completed (a slow backend, a
/// short job): the new attempt is never launched, and the job is recorded completed once.
#[test]
fn a_launch_answered_after_a_retune_with_a_completed_run_finishes_the_job_once() {
    let (mut h, script, a, first) = one_job_launching();
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    let mut events = h.take_events();
    assert!(
        launches(&events).is_empty(),
        "the new attempt launched while the old launch is in flight: {events:#?}"
    );
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.attempt), (JobState::Starting, 2));
    assert_eq!(
        launching_rows(&h, a),
        [1],
        "the launch in flight is recorded"
    );
    h.answer_launch(first, Some(RunStatus::Completed));
    events.extend(h.take_events());
    completed_once_from_its_first_run(&mut h, a, &events, "restarted with a new quota right after");
    assert!(h.held_launches.is_empty(), "{:?}", h.held_launches);
}

/// (b) As above, the run really running: stopped, verified after the stop, and only then is
/// the new attempt launched, with the new quota; the two never run together.
#[test]
fn a_launch_answered_after_a_retune_is_stopped_and_verified_before_the_new_attempt() {
    let (mut h, script, a, first) = one_job_launching();
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    assert!(
        h.held_launches.is_empty(),
        "launched before the old launch answered"
    );
    h.take_events();
    h.answer_launch(first, Some(RunStatus::Running));
    let events = h.take_events();
    let stop = events.iter().position(|e| *e == Event::Stop(a, 1, true));
    let verify = events.iter().position(|e| *e == Event::Verify(1));
    let launch = events
        .iter()
        .position(|e| *e == Event::Launch(a, 2, on("n1", 1)));
    assert!(
        stop.is_some() && verify > stop && launch > verify,
        "stopped, verified, then the new attempt: {events:#?}"
    );
    assert!(
        h.store_runs.values().all(|r| r.state == RunState::Gone),
        "{:?}",
        h.store_runs
    );
    assert_eq!(live_runs(&h, a), 0, "the first run is stopped");
    let second = h.held_launches.pop().expect("the new attempt");
    assert_eq!(second.attempt, 2);
    assert_eq!(
        second.placement[0].cpu,
        tessera_model::MilliCpu::from_cores(2)
    );
    h.answer_launch(second, Some(RunStatus::Running));
    assert_eq!(h.state(a), JobState::Running);
    assert_eq!(live_runs(&h, a), 1);
    assert_eq!(h.held_gpus().get("n1"), Some(&1));
}

/// (b) The launch in flight fails: nothing ran, so the new attempt goes out at once.
#[test]
fn a_launch_refused_after_a_retune_lets_the_new_attempt_go() {
    let (mut h, script, a, first) = one_job_launching();
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    h.take_events();
    h.answer_launch(first, None);
    let events = h.take_events();
    assert_eq!(launches(&events), vec![(a, 2, on("n1", 1))], "{events:#?}");
    assert!(!events.iter().any(|e| matches!(e, Event::Stop(..))));
    assert!(h.store_runs.values().all(|r| r.state == RunState::Gone));
    assert_eq!(h.state(a), JobState::Starting);
}

/// (a) The same for a resize decided while the launch is in flight.
#[test]
fn a_launch_answered_after_a_resize_with_a_completed_run_finishes_the_job_once() {
    let (mut h, script, a, first) = one_job_launching();
    give(&script, vec![resize(0, 1)]);
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    let mut events = h.take_events();
    assert!(launches(&events).is_empty(), "{events:#?}");
    h.answer_launch(first, Some(RunStatus::Completed));
    events.extend(h.take_events());
    completed_once_from_its_first_run(&mut h, a, &events, "resized by the policy right after");
}

/// (b) A preemption while the launch is in flight, the job placed again later: that start is
/// launched only once the run of the first launch has been stopped and verified.
#[test]
fn a_start_after_a_preemption_in_flight_waits_for_the_first_run_to_be_verified() {
    let (mut h, script, a, first) = one_job_launching();
    give(&script, vec![preempt(0)]);
    h.schedule();
    assert_eq!(h.state(a), JobState::Pending);
    give(&script, vec![start(0, 1)]);
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    assert!(
        h.held_launches.is_empty(),
        "launched before the first launch answered"
    );
    h.take_events();
    h.answer_launch(first, Some(RunStatus::Running));
    let events = h.take_events();
    let verify = events.iter().position(|e| *e == Event::Verify(1));
    let launch = events
        .iter()
        .position(|e| matches!(e, Event::Launch(j, 2, _) if *j == a));
    assert!(
        events.contains(&Event::Stop(a, 1, true)) && verify.is_some() && launch > verify,
        "{events:#?}"
    );
    assert_eq!(live_runs(&h, a), 0);
    assert_eq!(h.held_launches.len(), 1);
}

/// (c) The daemon dies after the retune, the first launch in flight: the backend started that
/// run, but no handle of it was ever recorded. The restarted daemon finds it by name, stops
/// it and verifies it, then runs the job again, once.
#[test]
fn a_restart_with_a_launch_given_up_in_flight_stops_its_run_and_runs_the_job_once() {
    let (mut h, script, a, first) = one_job_launching();
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    assert_eq!(launching_rows(&h, a), [1]);
    let run = h.start_run(&first, RunStatus::Running); // the answer never arrives
    h.hold_launches = false;
    h.take_events();
    drop(script);
    let (p, script) = scripted();
    h.restart(p);
    let events = h.take_events();
    assert!(events.contains(&Event::Find(a, 1)), "{events:#?}");
    assert!(events.contains(&Event::Verify(1)), "{events:#?}");
    assert_ne!(
        h.runs[&run.0].status,
        RunStatus::Running,
        "the first run is stopped"
    );
    assert_eq!(h.store_runs[&run.0].state, RunState::Gone, "and verified");
    assert!(h.store_runs.values().all(|r| r.state == RunState::Gone));
    assert_eq!(h.state(a), JobState::Pending);
    give(&script, vec![start(0, 0)]);
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(a, 3, on("n1", 1))]);
    assert_eq!(live_runs(&h, a), 1);
}

/// (c) As above, the backend never started the first run: its record is closed at restart.
#[test]
fn a_restart_with_a_launch_given_up_in_flight_that_never_ran_requeues_the_job() {
    let (mut h, script, a, _first) = one_job_launching();
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    h.hold_launches = false;
    h.take_events();
    let (p, script) = scripted();
    h.restart(p);
    assert!(h.store_runs.values().all(|r| r.state == RunState::Gone));
    assert_eq!(h.state(a), JobState::Pending);
    give(&script, vec![start(0, 0)]);
    h.schedule();
    assert_eq!(launches(&h.take_events()), vec![(a, 3, on("n1", 1))]);
}

/// (c) The daemon dies after the late answer of the first launch (its run had completed),
/// before the verification: the run is `stop` in the store, the new attempt `starting` and
/// never launched; the restarted daemon records the job completed instead of running it.
#[test]
fn a_restart_after_a_late_launch_answer_and_before_its_verification_runs_nothing_twice() {
    let (mut h, script, a, first) = one_job_launching();
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    h.hold_launches = false;
    let run = h.start_run(&first, RunStatus::Completed);
    h.core.handle_launched(h.now, a, 1, Ok(run.clone()));
    let (asked, launched) = drain_but_verify(&mut h);
    assert!(asked, "the late run is asked about");
    assert!(!launched, "launched before the late run was verified");
    assert_eq!(h.store_runs[&run.0].state, RunState::Stop);
    assert!(launching_rows(&h, a).is_empty());
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.attempt), (JobState::Starting, 2));
    h.take_events();
    drop(script);
    let (p, script) = scripted();
    h.restart(p);
    let row = &h.store_jobs[&a];
    assert_eq!(
        (row.state, row.exit_code),
        (JobState::Completed, Some(0)),
        "{:?}",
        row.message
    );
    assert!(h.store_runs.values().all(|r| r.state == RunState::Gone));
    give(&script, vec![start(0, 0)]);
    h.schedule();
    let events = h.take_events();
    assert!(launches(&events).is_empty(), "{events:#?}");
}

// A job finished from the verification of a stopped run while a later attempt of it waited,
// parked: its record is that of the run that completed (attempt, start), not of the attempt
// that never ran.

/// The resize of a run that had completed, 30 s after it started.
#[test]
fn a_job_finished_from_a_verification_records_the_run_that_completed() {
    let (mut h, script, a) = one_job_running();
    let started = h.store_jobs[&a].start_us;
    assert!(started.is_some());
    h.advance(30);
    h.end_run(a, RunStatus::Completed); // not yet polled
    give(&script, vec![resize(0, 1)]);
    h.schedule();
    let row = &h.store_jobs[&a];
    assert_eq!(row.state, JobState::Completed, "{:?}", row.message);
    assert_eq!(
        (row.attempt, row.start_us),
        (1, started),
        "the record names the completed run, not the parked attempt"
    );
    assert_eq!(row.end_us, Some(h.now.as_micros()));
}

/// The same for a retune while the first launch was in flight, answered late.
#[test]
fn a_job_finished_from_a_late_launch_records_the_run_that_completed() {
    let (mut h, script, a, first) = one_job_launching();
    let started = h.store_jobs[&a].start_us;
    h.advance(30);
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    assert_eq!(h.store_jobs[&a].attempt, 2);
    h.advance(5);
    h.answer_launch(first, Some(RunStatus::Completed));
    let row = &h.store_jobs[&a];
    assert_eq!(row.state, JobState::Completed, "{:?}", row.message);
    assert_eq!((row.attempt, row.start_us), (1, started));
}

/// After a restart between the resize and the verification, the attempt is that of the
/// stopped run (its start time is not stored with the run, and the requeue cleared it).
#[test]
fn a_job_finished_from_a_verification_after_a_restart_records_the_attempt_that_completed() {
    let (mut h, script, a) = one_job_running();
    h.end_run(a, RunStatus::Completed); // not yet polled
    give(&script, vec![resize(0, 1)]);
    h.core.schedule(h.now);
    let (asked, launched) = drain_but_verify(&mut h);
    assert!(asked && !launched);
    assert_eq!(h.store_jobs[&a].attempt, 2);
    let (p, _script) = scripted();
    h.restart(p);
    let row = &h.store_jobs[&a];
    assert_eq!((row.state, row.attempt), (JobState::Completed, 1));
}

/// The daemon dies after a cancel arrived while the job's launch was in flight, before the
/// launch answered; the backend did start the run. The restarted daemon finds it by name and
/// stops it (before, nothing recorded it: it ran on, for a cancelled job).
#[test]
fn a_restart_after_a_cancel_with_the_launch_in_flight_stops_the_run() {
    let (mut h, _script, a, first) = one_job_launching();
    h.core.cancel_job(h.now, a).unwrap();
    h.drain();
    assert_eq!(launching_rows(&h, a), [1]);
    let run = h.start_run(&first, RunStatus::Running); // the answer never arrives
    h.hold_launches = false;
    h.take_events();
    let (p, _script) = scripted();
    h.restart(p);
    let events = h.take_events();
    assert!(events.contains(&Event::Find(a, 1)), "{events:#?}");
    assert!(events.contains(&Event::Stop(a, 1, false)), "{events:#?}");
    assert_ne!(
        h.runs[&run.0].status,
        RunStatus::Running,
        "the run is stopped"
    );
    assert_eq!(h.stored_state(a), Some(JobState::Cancelled));
    assert!(launching_rows(&h, a).is_empty());
}

/// (c) The daemon dies after the retune, the first launch in flight; the backend started
/// that run and it completed while the daemon was down. The restarted daemon finds it by
/// name (ended runs are found too), verifies it, and records the job completed from it
/// instead of running it a second time.
#[test]
fn a_restart_with_a_launch_given_up_in_flight_whose_run_completed_runs_nothing_twice() {
    let (mut h, script, a, first) = one_job_launching();
    give(&script, vec![retune(0, 2)]);
    h.schedule();
    h.start_run(&first, RunStatus::Completed); // the answer never arrives
    h.hold_launches = false;
    h.find_ended = true;
    h.take_events();
    drop(script);
    let (p, script) = scripted();
    h.restart(p);
    let row = h.store_jobs[&a].clone();
    assert_eq!(
        (row.state, row.exit_code),
        (JobState::Completed, Some(0)),
        "{:?}",
        row.message
    );
    assert_eq!(row.attempt, 1, "recorded from the run that completed");
    assert!(h.store_runs.values().all(|r| r.state == RunState::Gone));
    give(&script, vec![start(0, 0)]);
    h.schedule();
    let events = h.take_events();
    assert!(launches(&events).is_empty(), "{events:#?}");
    assert_eq!(
        transitions_to(&events, a, JobState::Completed),
        1,
        "completed once, at the restart"
    );
}

/// A stopped run that turns out, at its verification, to have completed was not preempted:
/// the job's record counts no preemption for it — after a policy preemption, after a node
/// failure, and when a daemon restart comes between the stop and its verification. A run
/// that did not complete keeps its preemption counted.
#[test]
fn a_stopped_run_found_completed_counts_no_preemption() {
    use crate::core::runs::NodeHealth;
    let counted = |h: &Harness, id: i64| {
        let row = &h.store_jobs[&id];
        let core = h.core.job_row(id).map(|r| r.preemptions);
        (row.state, row.preemptions, core.unwrap_or(row.preemptions))
    };
    // Policy preemption (LAS at its round).
    let (mut h, a, _b) = las_about_to_preempt();
    h.end_run(a, RunStatus::Completed); // not yet polled
    h.schedule();
    assert_eq!(counted(&h, a), (JobState::Completed, 0, 0), "LAS");
    assert_eq!(h.core.metrics().preemptions.get("policy"), Some(&1));
    // Node failure.
    let mut h = Harness::new(vec![node("n1", 1), node("n2", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    h.schedule();
    h.end_run(a, RunStatus::Completed);
    h.core
        .set_node_health(h.now, "n1", Some(NodeHealth::Down))
        .unwrap();
    h.drain();
    assert_eq!(counted(&h, a), (JobState::Completed, 0, 0), "node down");
    // A restart between the stop (refused, so not verified) and its verification; and a run
    // preempted the same way that was still running when stopped.
    for completed in [true, false] {
        let (policy, s) = scripted();
        let mut h = Harness::new(vec![node("n1", 1)], policy);
        let a = h.submit("a", 1, 100);
        give(&s, vec![start(0, 0)]);
        h.schedule();
        h.refuse_stops = 1;
        give(&s, vec![preempt(0)]);
        h.schedule();
        assert_eq!(counted(&h, a), (JobState::Pending, 1, 1));
        if completed {
            h.end_run(a, RunStatus::Completed);
        }
        let (policy, _s) = scripted();
        h.restart(policy);
        let want = if completed {
            (JobState::Completed, 0, 0)
        } else {
            (JobState::Pending, 1, 1)
        };
        assert_eq!(counted(&h, a), want, "restart, completed: {completed}");
    }
}

#[test]
fn progress_beyond_what_the_store_holds_is_refused() {
    let mut h = Harness::new(vec![node("n1", 1)], policy("fifo", None));
    let a = h.submit("a", 1, 100);
    let report = |iterations| crate::types::ProgressReport {
        iterations,
        samples_per_second: None,
        iterations_per_second: None,
        point: None,
    };
    let e = h
        .core
        .report_progress(h.now, a, report(1u64 << 63))
        .unwrap_err();
    assert!(
        e.status == 400 && e.message.contains("iterations"),
        "{}",
        e.message
    );
    h.core.report_progress(h.now, a, report(10)).unwrap();
}
