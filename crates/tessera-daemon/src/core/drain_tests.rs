//! Issue 42: a stopped run's GPUs drain (drain.rs). With the real local backend and a run that
//! takes a second to exit after SIGTERM: a job that only fits on the GPU of a cancelled,
//! preempted or resized run (or on a retired service instance's) is launched only once the
//! backend has reported that run gone, never refused by the backend and re-queued; meanwhile
//! it waits as `unavailable`, saying the GPU drains.

use std::path::Path;
use std::time::{Duration, Instant};

use tessera_model::{GpuPart, JobId, ServiceId, SimTime};
use tessera_sched::Action;

use super::api::{Request, Response};
use super::devices::{alloc, drive, give, local_backend, scripted, Batch};
use super::testkit::{core_with, node, policy, TOKEN};
use super::Core;
use crate::backend::local::LocalBackend;
use crate::types::JobState;

/// A payload that writes `<probe>/<name>.start` once its SIGTERM handler is set and, once told
/// to stop, takes about a second before writing `<probe>/<name>.end` and exiting.
fn slow_exit(name: &str, probe: &Path) -> String {
    let p = probe.display();
    format!(
        "trap 'sleep 1; date +%s%N > {p}/{name}.end; exit 0' TERM\n\
         date +%s%N > {p}/{name}.start\n\
         while :; do sleep 0.05; done"
    )
}

/// A payload that records its start and exits.
fn quick(name: &str, probe: &Path) -> String {
    format!("date +%s%N > {}/{name}.start", probe.display())
}

fn submit(core: &mut Core, name: &str, script: &str) -> i64 {
    let body = serde_json::json!({
        "name": name,
        "command": ["sh", "-c", script],
        "gpus": 1,
    })
    .to_string();
    let mut r = core.submit(SimTime::ZERO, vec![(Some(TOKEN.into()), body)]);
    r.pop().expect("one").expect("accepted").id
}

fn stamp(probe: &Path, file: &str) -> Option<u128> {
    std::fs::read_to_string(probe.join(file))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Polls, schedules and drives until `done` holds (20 s at most).
fn run_until(
    core: &mut Core,
    b: &mut LocalBackend,
    what: &str,
    mut done: impl FnMut(&Core) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(core) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        core.poll_runs(SimTime::ZERO);
        drive(core, b, SimTime::ZERO);
        core.schedule(SimTime::ZERO);
        drive(core, b, SimTime::ZERO);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn state(core: &Core, id: i64) -> JobState {
    core.job_row(id).expect("job").state
}

/// The second job waits while the first's run drains (in state `waits_as`: pending when the
/// policy has yet to place it, starting when it was placed with the stop), says so, and then
/// starts once, on its first attempt, after the first run's end; the backend refused nothing.
/// (What it showed while waiting is asserted last, so that the run without the drain fails
/// on the re-queue itself.)
fn check_waits_then_starts(
    core: &mut Core,
    b: &mut LocalBackend,
    probe: &Path,
    second: i64,
    waits_as: JobState,
) {
    drive(core, b, SimTime::ZERO);
    let drained = core.draining_gpus();
    let waited = state(core, second);
    let reason = match core.handle_request(SimTime::ZERO, Some(TOKEN), Request::Get { id: second })
    {
        Ok(Response::Detail(d)) => d.job.reason,
        other => panic!("describe: {other:?}"),
    };
    run_until(core, b, "the second job to start", |c| {
        matches!(state(c, second), JobState::Running | JobState::Completed)
    });
    run_until(core, b, "the second job to finish", |c| {
        state(c, second).is_terminal()
    });
    assert_eq!(state(core, second), JobState::Completed);
    let row = core.job_row(second).expect("job");
    assert_eq!(
        (row.attempt, core.metrics().backend_errors),
        (1, 0),
        "the backend refused the second job's launch and it was re-queued: {row:?}"
    );
    let ended = stamp(probe, "a.end").expect("the first run ended on SIGTERM");
    let started = stamp(probe, "b.start").expect("the second job ran");
    assert!(
        started > ended,
        "the second job started {} ms before the first run was gone",
        (ended - started) / 1_000_000
    );
    assert!(!drained.is_empty(), "the stopped run's GPU did not drain");
    assert_eq!(waited, waits_as, "{reason:?}");
    if waited == JobState::Pending {
        let r = reason.expect("a pending job has a reason");
        assert_eq!(r.kind, "unavailable", "{r:?}");
        let note = r.note.unwrap_or_default();
        assert!(note.contains("GPU 0 of n1 draining"), "{note}");
    }
    assert!(core.draining_gpus().is_empty());
}

#[test]
fn a_cancelled_runs_gpu_is_handed_out_only_once_the_run_is_gone() {
    let work = tempfile::tempdir().expect("tempdir");
    let probe = tempfile::tempdir().expect("tempdir");
    let mut b = local_backend(work.path(), None);
    let mut core = core_with(&[node("n1", 1)], policy("fifo", None), SimTime::ZERO);
    let a = submit(&mut core, "a", &slow_exit("a", probe.path()));
    run_until(&mut core, &mut b, "the first job to run", |_| {
        stamp(probe.path(), "a.start").is_some()
    });
    core.cancel_job(SimTime::ZERO, a).expect("cancel");
    drive(&mut core, &mut b, SimTime::ZERO);
    let second = submit(&mut core, "b", &quick("b", probe.path()));
    core.schedule(SimTime::ZERO);
    check_waits_then_starts(&mut core, &mut b, probe.path(), second, JobState::Pending);
}

/// The policy preempts the first job and starts the second on its GPU in one batch: the
/// start is recorded, its launch waits for the preempted run to be gone.
fn preempt_then_start(resize: bool) {
    let work = tempfile::tempdir().expect("tempdir");
    let probe = tempfile::tempdir().expect("tempdir");
    let mut b = local_backend(work.path(), None);
    let (p, batch): (_, Batch) = scripted();
    let mut core = core_with(&[node("n1", 2)], p, SimTime::ZERO);
    let a = submit(&mut core, "a", &slow_exit("a", probe.path()));
    let second = submit(&mut core, "b", &quick("b", probe.path()));
    give(
        &batch,
        vec![Action::Start {
            job: JobId(0),
            allocation: alloc(0b01, GpuPart::Whole, None),
        }],
    );
    run_until(&mut core, &mut b, "the first job to run", |_| {
        stamp(probe.path(), "a.start").is_some()
    });
    let first_move = if resize {
        // The first job moves to GPU 1: its run on GPU 0 stops.
        Action::Resize {
            job: JobId(0),
            allocation: alloc(0b10, GpuPart::Whole, None),
        }
    } else {
        Action::Preempt { job: JobId(0) }
    };
    give(
        &batch,
        vec![
            first_move,
            Action::Start {
                job: JobId(1),
                allocation: alloc(0b01, GpuPart::Whole, None),
            },
        ],
    );
    core.schedule(SimTime::ZERO);
    assert!(core.refused().is_empty(), "{:?}", core.refused());
    check_waits_then_starts(&mut core, &mut b, probe.path(), second, JobState::Starting);
    if resize {
        // Its resized attempt runs on: stopped here, not left behind.
        run_until(&mut core, &mut b, "the resized job to run", |c| {
            state(c, a) == JobState::Running
        });
        core.cancel_job(SimTime::ZERO, a).expect("cancel");
        run_until(&mut core, &mut b, "the resized run to be gone", |c| {
            c.draining_gpus().is_empty()
        });
    } else {
        assert_eq!(state(&core, a), JobState::Pending);
    }
}

#[test]
fn a_start_decided_with_the_preemption_waits_for_the_preempted_run_to_be_gone() {
    preempt_then_start(false);
}

#[test]
fn a_start_decided_with_a_resize_waits_for_the_old_run_to_be_gone() {
    preempt_then_start(true);
}

/// A retired service's instance drains too: the policy's start onto its GPU is refused while
/// the instance is on its way out, and the job launched there afterwards runs on its first
/// attempt, the backend having refused nothing.
#[test]
fn a_retired_instances_gpu_takes_no_start_until_the_instance_is_gone() {
    let work = tempfile::tempdir().expect("tempdir");
    let probe = tempfile::tempdir().expect("tempdir");
    let mut b = local_backend(work.path(), None);
    let (p, batch): (_, Batch) = scripted();
    let mut core = core_with(&[node("n1", 1)], p, SimTime::ZERO);
    let service = serde_json::json!({
        "apiVersion": "tessera/v1",
        "kind": "Workload",
        "metadata": {"command": ["sh", "-c", slow_exit("a", probe.path())]},
        "spec": {"services": [{
            "name": "bert",
            "endSeconds": 3600,
            "sloMilliseconds": 50,
            "resources": {"cpu": "1", "memory": "1Gi", "gpuMemory": "2Gi"},
            "arrivals": {"poisson": {"rate": 3}}
        }]}
    })
    .to_string();
    let r = core.handle_request(
        SimTime::ZERO,
        Some(TOKEN),
        Request::SubmitService { body: service },
    );
    assert!(r.is_ok(), "{r:?}");
    let second = submit(&mut core, "b", &quick("b", probe.path()));
    give(
        &batch,
        vec![Action::ScaleOut {
            service: ServiceId(0),
            allocation: alloc(0b1, GpuPart::Whole, None),
        }],
    );
    core.request_schedule();
    run_until(&mut core, &mut b, "the instance to run", |_| {
        stamp(probe.path(), "a.start").is_some()
    });
    let r = core.handle_request(SimTime::ZERO, Some(TOKEN), Request::RetireService { id: 1 });
    assert!(r.is_ok(), "{r:?}");
    drive(&mut core, &mut b, SimTime::ZERO);
    assert_eq!(core.draining_gpus(), vec![("n1".to_string(), 0, -1)]);
    let start_b = Action::Start {
        job: JobId(0),
        allocation: alloc(0b1, GpuPart::Whole, None),
    };
    give(&batch, vec![start_b.clone()]);
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    drive(&mut core, &mut b, SimTime::ZERO);
    assert_eq!(
        core.refused().len(),
        1,
        "a start onto a draining GPU is refused"
    );
    assert_eq!(state(&core, second), JobState::Pending);
    run_until(&mut core, &mut b, "the instance to be gone", |c| {
        c.draining_gpus().is_empty()
    });
    let ended = stamp(probe.path(), "a.end").expect("the instance ended on SIGTERM");
    give(&batch, vec![start_b]);
    core.request_schedule();
    run_until(&mut core, &mut b, "the job to finish", |c| {
        state(c, second).is_terminal()
    });
    assert_eq!(state(&core, second), JobState::Completed);
    assert!(stamp(probe.path(), "b.start").expect("b ran") > ended);
    let row = core.job_row(second).expect("job");
    assert_eq!((row.attempt, core.metrics().backend_errors), (1, 0));
}
