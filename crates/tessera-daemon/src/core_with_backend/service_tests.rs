//! Services in real mode, with real processes that report what they saw: an instance starts
//! with its MPS environment and quota file; a `RetuneInstance` rewrites the file and the SDK's
//! throttle follows it; a scale-in kills and reaps the instance's whole process tree; a crashed
//! instance is restarted and counted; bad specs and bad actions are refused with the reason.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tessera_model::{GpuPart, ServiceId, SimTime};
use tessera_sched::{Action, InstanceId};

use super::devices::{alloc, drive, give, local_backend, quota, scripted};
use super::testkit::{core_with, node, TOKEN};
use super::{Core, Refusal, Request, Response};
use crate::backend::local::LocalBackend;
use crate::error::ApiError;
use crate::services::{ServiceState, ServiceView};

fn sdk_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python/src")
}

/// A one-service document running `command`, with SM request 0.3 and limit 0.5.
fn body(command: &[&str], env: serde_json::Value) -> String {
    serde_json::json!({
        "apiVersion": "tessera/v1",
        "kind": "Workload",
        "metadata": {"command": command, "env": env},
        "spec": {"services": [{
            "name": "bert",
            "endSeconds": 3600,
            "sloMilliseconds": 50,
            "resources": {"cpu": "1", "memory": "1Gi", "gpuMemory": "2Gi",
                          "smRequest": 0.3, "smLimit": 0.5},
            "arrivals": {"poisson": {"rate": 3}}
        }]}
    })
    .to_string()
}

fn submit(core: &mut Core, body: &str) -> Result<ServiceView, ApiError> {
    let req = Request::SubmitService { body: body.into() };
    match core.handle_request(SimTime::ZERO, Some(TOKEN), req)? {
        Response::Service(v) => Ok(*v),
        other => panic!("unexpected answer {other:?}"),
    }
}

fn get(core: &mut Core, id: i64) -> ServiceView {
    match core.handle_request(SimTime::ZERO, Some(TOKEN), Request::GetService { id }) {
        Ok(Response::Service(v)) => *v,
        other => panic!("unexpected answer {other:?}"),
    }
}

fn schedule(
    core: &mut Core,
    backend: &mut LocalBackend,
    batch: &super::devices::Batch,
    actions: Vec<Action>,
) {
    give(batch, actions);
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    drive(core, backend, SimTime::ZERO);
    assert!(core.refused().is_empty(), "{:?}", core.refused());
}

fn poll(core: &mut Core, backend: &mut LocalBackend) {
    core.poll_runs(SimTime::ZERO);
    drive(core, backend, SimTime::ZERO);
}

/// Polls until `done` holds (20 s at most).
fn wait(
    core: &mut Core,
    backend: &mut LocalBackend,
    what: &str,
    mut done: impl FnMut(&mut Core) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(core) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
        poll(core, backend);
    }
}

fn wait_file(path: &Path, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if done(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {text:?}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Whether a process exists and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

const INSTANCE: &str = r#"
import os, subprocess, time
import tessera_sdk as t
child = subprocess.Popen(["sleep", "300"])
for k in sorted(os.environ):
    if k.startswith("CUDA_") or k in ("TESSERA_SERVICE", "TESSERA_SERVICE_NAME", "TESSERA_INSTANCE", "TESSERA_ATTEMPT", "TESSERA_GPUS"):
        print(f"{k}={os.environ[k]}")
print(f"child {child.pid} self {os.getpid()}")
th = t.Throttle(refresh_interval=0, sleep=lambda s: None)
def show():
    q = th.current()
    print(f"quota v{q.version} request={q.sm_request_permille} limit={q.sm_limit_permille} memory={q.memory_bytes} gpus={list(q.gpus)} pause={th.step(1.0):.3f}", flush=True)
    return q.version
first = show()
deadline = time.time() + 30
while th.current().version == first and time.time() < deadline:
    time.sleep(0.05)
show()
time.sleep(300)
"#;

#[test]
fn an_instance_runs_under_its_quota_follows_a_retune_and_leaves_nothing_when_scaled_in() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut backend = local_backend(work.path(), None);
    let (policy, batch) = scripted();
    let mut core = core_with(&[node("n1", 4)], policy, SimTime::ZERO);
    let env = serde_json::json!({"PYTHONPATH": sdk_path().display().to_string()});
    let v = submit(&mut core, &body(&["python3", "-u", "-c", INSTANCE], env)).expect("accepted");
    assert_eq!(
        (v.id, v.state, v.instances.len()),
        (1, ServiceState::Active, 0)
    );
    schedule(
        &mut core,
        &mut backend,
        &batch,
        vec![Action::ScaleOut {
            service: ServiceId(0),
            allocation: alloc(0b0100, quota(300, 500, 10), None),
        }],
    );
    let log = work.path().join("tessera-test-i1-1/output.log");
    let first = wait_file(&log, "the first quota", |t| t.contains("quota v1"));
    let mut lines = first.lines();
    let expected = [
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M",
        "CUDA_VISIBLE_DEVICES=2",
        "TESSERA_ATTEMPT=1",
        "TESSERA_GPUS=1",
        "TESSERA_INSTANCE=1",
        "TESSERA_SERVICE=1",
        "TESSERA_SERVICE_NAME=bert",
    ];
    for e in expected {
        assert_eq!(lines.next(), Some(e), "{first}");
    }
    let pids: Vec<i32> = lines
        .next()
        .expect("pids")
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(pids.len(), 2, "{first}");
    assert_eq!(
        lines.next(),
        Some("quota v1 request=300 limit=500 memory=10737418240 gpus=[2] pause=1.000")
    );
    let view = get(&mut core, 1);
    assert_eq!(view.instances.len(), 1);
    assert_eq!(
        serde_json::to_value(&view.instances[0].allocation[0].devices).expect("json"),
        serde_json::json!({"indices": [2], "part": {"kind": "quota", "smRequest": 300, "smLimit": 500, "memory": "10Gi"}})
    );

    // The policy gives it more: the file changes under the running process, which the SDK's
    // throttle sees (no restart: same attempt, same process).
    schedule(
        &mut core,
        &mut backend,
        &batch,
        vec![Action::RetuneInstance {
            service: ServiceId(0),
            instance: InstanceId(1),
            allocation: alloc(0b0100, quota(400, 900, 12), None),
        }],
    );
    let text = wait_file(&log, "the retuned quota", |t| t.contains("quota v2"));
    assert!(
        text.ends_with("quota v2 request=400 limit=900 memory=12884901888 gpus=[2] pause=0.111\n"),
        "{text}"
    );
    assert_eq!(core.metrics().retunes.get("in_place"), Some(&1));
    assert_eq!(core.instances()[0].2, 1, "no restart");
    assert!(pids.iter().all(|&p| alive(p)));
    core.check_device_invariants().expect("invariants");

    // Scale-in: SIGTERM to the process group, SIGKILL after the grace, everything reaped.
    schedule(
        &mut core,
        &mut backend,
        &batch,
        vec![Action::ScaleIn {
            service: ServiceId(0),
            instance: InstanceId(1),
        }],
    );
    assert!(core.instances().is_empty());
    wait(
        &mut core,
        &mut backend,
        "the instance's processes to go",
        |_| pids.iter().all(|&p| !alive(p)),
    );
    let gpu = &core.device_state().gpus(tessera_model::NodeId(0))[2];
    assert_eq!(gpu.sm_requested, 0, "its quota is released");
    core.check_device_invariants().expect("invariants");
    assert!(get(&mut core, 1).instances.is_empty());
}

#[test]
fn a_crashed_instance_is_restarted_and_counted_and_retiring_stops_it() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut backend = local_backend(work.path(), None);
    let (policy, batch) = scripted();
    let mut core = core_with(&[node("n1", 4)], policy, SimTime::ZERO);
    let mark = work.path().join("mark");
    let script = r#"echo "attempt $TESSERA_ATTEMPT" >> "$MARK"; if [ "$TESSERA_ATTEMPT" -ge 2 ]; then echo $$ > "$MARK.pid"; exec sleep 300; fi; exit 3"#;
    let env = serde_json::json!({"MARK": mark.display().to_string()});
    submit(&mut core, &body(&["sh", "-c", script], env)).expect("accepted");
    schedule(
        &mut core,
        &mut backend,
        &batch,
        vec![Action::ScaleOut {
            service: ServiceId(0),
            allocation: alloc(0b1, GpuPart::Whole, None),
        }],
    );
    wait(&mut core, &mut backend, "the restarted instance", |c| {
        c.instances()
            .first()
            .is_some_and(|i| i.2 == 2 && i.3.is_some())
    });
    let pid: i32 = wait_file(&mark.with_extension("pid"), "the pid", |t| !t.is_empty())
        .trim()
        .parse()
        .expect("pid");
    // Still one instance, the same one, in its second attempt.
    let view = get(&mut core, 1);
    assert_eq!(view.restarts, 1);
    assert_eq!(view.instances.len(), 1);
    assert_eq!((view.instances[0].id, view.instances[0].restarts), (1, 1));
    assert_eq!(core.instance_restarts(), 1);
    match core.handle_request(SimTime::ZERO, Some(TOKEN), Request::Metrics) {
        Ok(Response::Text(t)) => {
            assert!(t.contains("tessera_instance_restarts_total 1\n"), "{t}");
            assert!(t.contains("tessera_service_instances 1\n"), "{t}");
            assert!(t.contains("tessera_services{state=\"active\"} 1\n"), "{t}");
        }
        other => panic!("unexpected answer {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(&mark).expect("mark"),
        "attempt 1\nattempt 2\n"
    );
    // Retiring stops it; a second retire is a conflict; the service no longer scales.
    let r = core.handle_request(SimTime::ZERO, Some(TOKEN), Request::RetireService { id: 1 });
    assert!(matches!(r, Ok(Response::Service(ref v)) if v.state == ServiceState::Retired));
    drive(&mut core, &mut backend, SimTime::ZERO);
    wait(&mut core, &mut backend, "the instance to go", |_| {
        !alive(pid)
    });
    let again = core.handle_request(SimTime::ZERO, Some(TOKEN), Request::RetireService { id: 1 });
    assert_eq!(again.err().map(|e| e.status), Some(409));
    give(
        &batch,
        vec![Action::ScaleOut {
            service: ServiceId(0),
            allocation: alloc(0b1, GpuPart::Whole, None),
        }],
    );
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    assert_eq!(core.refused()[0].1, Refusal::ServiceNotActive(0));
    assert!(core.instances().is_empty());
}

#[test]
fn bad_service_specs_are_refused_naming_the_field() {
    let (policy, _) = scripted();
    let mut core = core_with(&[node("n1", 4)], policy, SimTime::ZERO);
    let good = body(&["true"], serde_json::json!({}));
    let cases: Vec<(String, u16, &str, &str)> = vec![
        (
            good.replace("\"2Gi\"", "\"100Gi\""),
            400,
            "unsatisfiable",
            "needs 100Gi of GPU memory, more than any GPU",
        ),
        (
            good.replace("0.3", "1.5"),
            400,
            "invalid_spec",
            "spec.services[0].resources.smRequest",
        ),
        (
            good.replace("\"sloMilliseconds\":50", "\"sloMilliseconds\":-1"),
            400,
            "invalid_spec",
            "spec.services[0].sloMilliseconds",
        ),
        (
            good.replace("\"command\":[\"true\"],", ""),
            400,
            "invalid_spec",
            "metadata.exactly one of command and script",
        ),
        (
            good.replace("\"env\":{}", "\"env\":{\"TESSERA_X\":\"1\"}"),
            400,
            "invalid_spec",
            "metadata.env: TESSERA_X is reserved",
        ),
        (
            good.replace("\"env\":{}", "\"image\":\"x\""),
            400,
            "invalid_spec",
            "field metadata: unknown field `image`",
        ),
        (
            good.replace("\"name\":\"bert\"", "\"name\":\"../x\""),
            400,
            "invalid_spec",
            "spec.services[0].name",
        ),
        (
            good.replace("\"services\":[", "\"jobs\":[],\"services\":[]"),
            400,
            "invalid_spec",
            "syntax",
        ),
        (
            good.replace(
                "\"spec\":{",
                "\"spec\":{\"jobs\":[{\"name\":\"j\",\"gpus\":1,\"durationSeconds\":1}],",
            ),
            400,
            "invalid_spec",
            "spec.jobs: submit training jobs to /v1/jobs",
        ),
        (
            format!("{}{}", "[".repeat(40), "]".repeat(40)),
            400,
            "invalid_spec",
            "levels deep",
        ),
        ("x".repeat(70 * 1024), 413, "body_too_large", "at most"),
    ];
    for (text, status, code, needle) in cases {
        let e = submit(&mut core, &text).expect_err("refused");
        let shown: String = text.chars().take(120).collect();
        assert_eq!((e.status, e.code), (status, code), "{shown}: {}", e.message);
        if needle != "syntax" {
            assert!(e.message.contains(needle), "{shown}: {}", e.message);
        }
    }
    // Nothing was recorded.
    match core.handle_request(SimTime::ZERO, Some(TOKEN), Request::ListServices) {
        Ok(Response::Services(l)) => assert!(l.services.is_empty()),
        other => panic!("unexpected answer {other:?}"),
    }
}

#[test]
fn service_actions_are_validated_like_the_simulator() {
    let (policy, batch) = scripted();
    let mut core = core_with(&[node("n1", 4)], policy, SimTime::ZERO);
    submit(&mut core, &body(&["true"], serde_json::json!({}))).expect("accepted");
    let out = |mask, part| Action::ScaleOut {
        service: ServiceId(0),
        allocation: alloc(mask, part, None),
    };
    // Two quotas on one GPU fit (Σ requests 0.6); a third request of 0.5 does not.
    give(
        &batch,
        vec![
            out(0b1, quota(300, 500, 10)),
            out(0b1, quota(300, 500, 10)),
            out(0b1, quota(500, 500, 10)),
            Action::ScaleIn {
                service: ServiceId(0),
                instance: InstanceId(9),
            },
            Action::ScaleOut {
                service: ServiceId(5),
                allocation: alloc(0b10, GpuPart::Whole, None),
            },
        ],
    );
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    let reasons: Vec<String> = core.refused().iter().map(|(_, r)| r.to_string()).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].contains("SM"), "{reasons:?}");
    assert_eq!(reasons[1], "no such instance");
    assert_eq!(reasons[2], "service 5 is unknown or retired");
    assert_eq!(core.instances().len(), 2);
    // A retune keeps the node and GPUs, and the quota sums within capacity.
    give(
        &batch,
        vec![
            Action::RetuneInstance {
                service: ServiceId(0),
                instance: InstanceId(1),
                allocation: alloc(0b10, quota(300, 500, 10), None),
            },
            Action::RetuneInstance {
                service: ServiceId(0),
                instance: InstanceId(1),
                allocation: alloc(0b1, quota(800, 900, 10), None),
            },
            Action::RetuneInstance {
                service: ServiceId(0),
                instance: InstanceId(2),
                allocation: alloc(0b1, quota(600, 900, 10), None),
            },
        ],
    );
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    let reasons: Vec<String> = core.refused().iter().map(|(_, r)| r.to_string()).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].starts_with("a retune keeps the instance's node and GPUs"),
        "{reasons:?}"
    );
    assert!(reasons[1].contains("SM"), "{reasons:?}");
    core.check_device_invariants().expect("invariants");
    let gpu = &core.device_state().gpus(tessera_model::NodeId(0))[0];
    assert_eq!(gpu.sm_requested, 300 + 600);
}

/// Carries out the core's commands as [`drive`] does, but declines every retune (as Slurm).
fn drive_declining(core: &mut Core, backend: &mut LocalBackend) {
    use crate::backend::Backend;
    while let Some(c) = core.poll_command() {
        match c {
            super::Command::Retune(r) => {
                let e = crate::error::BackendError::Declined {
                    action: "retune",
                    backend: "slurm",
                };
                core.handle_retuned(SimTime::ZERO, r.job_id, r.attempt, Err(e));
            }
            super::Command::Launch(l) => {
                let r = backend.submit(&l);
                core.handle_launched(SimTime::ZERO, l.job_id, l.attempt, r);
            }
            super::Command::Stop { run, preempt } => {
                let h = crate::core::runs::Handle(run.handle.clone());
                let r = if preempt {
                    backend.preempt(&h)
                } else {
                    backend.cancel(&h)
                };
                core.handle_stopped(run, r);
            }
            super::Command::Poll(hs) | super::Command::Verify(hs) => {
                let s = backend.poll(&hs).expect("poll");
                core.handle_statuses(SimTime::ZERO, s);
            }
            _ => {}
        }
    }
}

#[test]
fn a_backend_that_cannot_retune_in_place_restarts_the_instance_with_its_new_quota() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut backend = local_backend(work.path(), None);
    let (policy, batch) = scripted();
    let mut core = core_with(&[node("n1", 4)], policy, SimTime::ZERO);
    let mark = work.path().join("mark");
    let script = r#"echo "$TESSERA_ATTEMPT $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $$" >> "$MARK"; exec sleep 300"#;
    let env = serde_json::json!({"MARK": mark.display().to_string()});
    submit(&mut core, &body(&["sh", "-c", script], env)).expect("accepted");
    give(
        &batch,
        vec![Action::ScaleOut {
            service: ServiceId(0),
            allocation: alloc(0b1, quota(300, 500, 10), None),
        }],
    );
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    drive_declining(&mut core, &mut backend);
    let first = wait_file(&mark, "the first attempt", |t| t.lines().count() == 1);
    let old_pid: i32 = first
        .split_whitespace()
        .nth(2)
        .and_then(|p| p.parse().ok())
        .expect("pid");
    give(
        &batch,
        vec![Action::RetuneInstance {
            service: ServiceId(0),
            instance: InstanceId(1),
            allocation: alloc(0b1, quota(400, 900, 12), None),
        }],
    );
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    drive_declining(&mut core, &mut backend);
    // The old attempt is stopped; the new one may have to wait until it is gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&mark)
        .unwrap_or_default()
        .lines()
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "no second attempt");
        std::thread::sleep(Duration::from_millis(25));
        core.poll_runs(SimTime::ZERO);
        drive_declining(&mut core, &mut backend);
    }
    let text = std::fs::read_to_string(&mark).expect("mark");
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!((lines[0][0], lines[0][1]), ("1", "50"), "{text}");
    assert_eq!((lines[1][0], lines[1][1]), ("2", "90"), "{text}");
    assert!(
        !alive(old_pid),
        "the old attempt is gone before the new one runs"
    );
    assert_eq!(core.metrics().retunes.get("restart"), Some(&1));
    assert_eq!(
        core.instance_restarts(),
        0,
        "a retune restart is not a crash"
    );
    let i = core.instances();
    assert_eq!((i.len(), i[0].1, i[0].2), (1, 1, 2));
    let r = core.handle_request(SimTime::ZERO, Some(TOKEN), Request::RetireService { id: 1 });
    assert!(r.is_ok());
    drive_declining(&mut core, &mut backend);
}

mod prop {
    //! Arbitrary sequences of service actions, crashes, polls and daemon restarts through the
    //! core with a scripted backend: after every step the device invariants hold, every live
    //! instance has at most one live run (none is ever started twice), no run outlives its
    //! instance but while its stop is retried, the store agrees with the core, and a restart changes no running instance;
    //! also with launches answered late (or lost in a restart, their run started or not) and
    //! stops the backend refuses once (retried at the next poll).

    use proptest::prelude::*;
    use tessera_model::{GpuPart, ServiceId, SimTime};
    use tessera_sched::{Action, InstanceId};

    use super::super::devices::{alloc, give, quota, scripted, Batch};
    use super::super::testkit::{node, Harness, TOKEN};
    use super::super::Request;
    use super::body;
    use crate::core::runs::RunStatus;
    use crate::error::BackendError;
    use crate::services::InstanceState;

    #[derive(Clone, Debug)]
    enum Op {
        Out {
            service: u32,
            gpu: u8,
            share: Option<u16>,
        },
        In(usize),
        Tune(usize, u16),
        Crash(usize),
        Poll,
        /// Time passes (past any back-off), then a poll.
        Later,
        Restart,
        Retire,
        Declines(bool),
        /// Launches are held in flight from now on (true), or answered as they come.
        Hold(bool),
        /// A launch in flight (by position) is answered: its run started, or refused.
        Answer(bool, usize),
        /// The backend refuses the next stop (retried at the next poll).
        RefuseStop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u32..2, 0u8..2, proptest::option::of(1u16..7))
                .prop_map(|(service, gpu, share)| Op::Out { service, gpu, share: share.map(|s| s * 100) }),
            2 => (0usize..8).prop_map(Op::In),
            2 => (0usize..8, 1u16..8).prop_map(|(k, s)| Op::Tune(k, s * 100)),
            2 => (0usize..8).prop_map(Op::Crash),
            2 => Just(Op::Poll),
            1 => Just(Op::Later),
            1 => Just(Op::Restart),
            1 => Just(Op::Retire),
            1 => any::<bool>().prop_map(Op::Declines),
            1 => any::<bool>().prop_map(Op::Hold),
            3 => (any::<bool>(), 0usize..4).prop_map(|(s, k)| Op::Answer(s, k)),
            1 => Just(Op::RefuseStop),
        ]
    }

    /// Answers every launch in flight (its run started) and answers later ones at once.
    fn answer_all(h: &mut Harness) {
        h.hold_launches = false;
        while !h.held_launches.is_empty() {
            let l = h.held_launches.remove(0);
            h.answer_launch(l, Some(RunStatus::Running));
        }
    }

    fn act(h: &mut Harness, batch: &Batch, actions: Vec<Action>) {
        give(batch, actions);
        h.core.request_schedule();
        h.schedule();
    }

    fn check(h: &Harness) -> Result<(), TestCaseError> {
        h.core
            .check_device_invariants()
            .map_err(TestCaseError::fail)?;
        let live = h.core.instances();
        for (_, id, attempt, handle) in &live {
            let running: Vec<&String> = h
                .runs
                .iter()
                .filter(|(_, r)| r.job_id == -id && r.status == RunStatus::Running)
                .map(|(k, _)| k)
                .collect();
            prop_assert!(running.len() <= 1, "instance {id} runs twice: {running:?}");
            // A live instance has its run (a crashed one was restarted at the poll that saw it
            // end), or its launch is in flight, or it waits (back-off, a failed launch, an
            // earlier attempt's run not stopped yet).
            let Some(hd) = handle else {
                let in_flight = h
                    .held_launches
                    .iter()
                    .any(|l| l.job_id == -id && l.attempt == *attempt);
                prop_assert!(
                    in_flight || h.core.instance_waiting(*id),
                    "instance {id} has no run"
                );
                continue;
            };
            prop_assert_eq!(running, vec![hd]);
            let stored = h.store_instances.get(id);
            prop_assert!(
                stored.is_some_and(|r| r.attempt == *attempt && r.state != InstanceState::Gone),
                "store disagrees on instance {id}: {stored:?}"
            );
        }
        for (k, r) in &h.runs {
            // A stop the backend refused is retried (recorded `stop`, so a restart does too).
            let stopping = h
                .store_runs
                .get(k)
                .is_some_and(|s| s.state == crate::core::records::RunState::Stop);
            if r.job_id < 0 && r.status == RunStatus::Running && !stopping {
                prop_assert!(
                    live.iter().any(|i| i.1 == -r.job_id),
                    "run {k} of instance {} outlives it",
                    -r.job_id
                );
            }
        }
        let stored_live = h
            .store_instances
            .values()
            .filter(|r| r.state != InstanceState::Gone)
            .count();
        prop_assert_eq!(stored_live, live.len());
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn instances_are_never_duplicated_lost_or_over_allocated(
            ops in proptest::collection::vec(op(), 1..40),
            hold in any::<bool>(),
        ) {
            let (policy, mut batch) = scripted();
            let mut h = Harness::new_at(vec![node("n1", 2)], policy, SimTime::ZERO);
            h.hold_launches = hold;
            for name in ["a", "b"] {
                let text = body(&["true"], serde_json::json!({})).replace("bert", name);
                let r = h.core.handle_request(h.now, Some(TOKEN), Request::SubmitService { body: text });
                prop_assert!(r.is_ok());
                h.drain();
            }
            for op in ops {
                let live = h.core.instances();
                let pick = |k: usize| live.get(k % live.len().max(1)).map(|i| (i.0, i.1));
                match op {
                    Op::Out { service, gpu, share } => {
                        let part = share.map_or(GpuPart::Whole, |s| quota(s, s.max(500), 10));
                        act(&mut h, &batch, vec![Action::ScaleOut {
                            service: ServiceId(service),
                            allocation: alloc(1 << gpu, part, None),
                        }]);
                    }
                    Op::In(k) => {
                        let (svc, id) = pick(k).unwrap_or((1, 99));
                        act(&mut h, &batch, vec![Action::ScaleIn {
                            service: ServiceId((svc - 1) as u32),
                            instance: InstanceId(id as u32),
                        }]);
                    }
                    Op::Tune(k, share) => {
                        if let Some((svc, id)) = pick(k) {
                            let mask = h.store_instances[&id].placement[0]
                                .devices
                                .as_ref()
                                .map_or(1, |d| d.indices.iter().map(|i| 1u64 << i).sum());
                            act(&mut h, &batch, vec![Action::RetuneInstance {
                                service: ServiceId((svc - 1) as u32),
                                instance: InstanceId(id as u32),
                                allocation: alloc(mask, quota(share, share.max(500), 10), None),
                            }]);
                        }
                    }
                    Op::Crash(k) => {
                        if let Some((_, id)) = pick(k) {
                            if h.run_of(-id).is_some() {
                                h.end_run(-id, RunStatus::Failed { reason: "crash".into(), exit_code: Some(1) });
                            }
                        }
                        h.poll();
                    }
                    Op::Poll => h.poll(),
                    Op::Later => {
                        // The backend is healthy again and answers what it was asked.
                        h.refuse_stops = 0;
                        answer_all(&mut h);
                        h.advance(301);
                        h.poll();
                        for (_, id, _, handle) in h.core.instances() {
                            prop_assert!(handle.is_some(), "instance {id} not restarted after its back-off");
                        }
                    }
                    Op::Restart => {
                        // Running instances come back as they were; one waiting for its next
                        // attempt (back-off) is started at once as a new attempt.
                        // Launches in flight are lost: the backend started the run of some.
                        let before = h.core.instances();
                        let waiting: Vec<bool> = before.iter().map(|i| h.core.instance_waiting(i.1)).collect();
                        let in_flight: Vec<bool> = before
                            .iter()
                            .map(|i| h.held_launches.iter().any(|l| l.job_id == -i.1))
                            .collect();
                        for (k, l) in std::mem::take(&mut h.held_launches).into_iter().enumerate() {
                            if k % 2 == 0 {
                                h.start_run(&l, RunStatus::Running);
                            }
                        }
                        h.hold_launches = false;
                        h.refuse_stops = 0;
                        let (policy, b) = scripted();
                        batch = b;
                        h.restart(policy);
                        let after = h.core.instances();
                        prop_assert_eq!(after.len(), before.len());
                        for (((b, a), w), f) in before.iter().zip(&after).zip(waiting).zip(in_flight) {
                            if f {
                                // Adopted or started again, once.
                                prop_assert_eq!((b.0, b.1), (a.0, a.1));
                                prop_assert!(a.2 >= b.2 && a.3.is_some(), "{a:?} after {b:?}");
                            } else if w {
                                prop_assert_eq!((b.0, b.1), (a.0, a.1));
                                prop_assert!(a.2 > b.2 && a.3.is_some(), "{a:?} after {b:?}");
                            } else {
                                prop_assert_eq!(a, b);
                            }
                        }
                    }
                    Op::Retire => {
                        let _ = h.core.handle_request(h.now, Some(TOKEN), Request::RetireService { id: 2 });
                        h.drain();
                    }
                    Op::Declines(on) => {
                        h.retune_error = on.then_some(BackendError::Declined { action: "retune", backend: "slurm" });
                    }
                    Op::Hold(on) => {
                        if on {
                            h.hold_launches = true;
                        } else {
                            answer_all(&mut h);
                        }
                    }
                    Op::Answer(started, k) => {
                        if !h.held_launches.is_empty() {
                            let l = h.held_launches.remove(k % h.held_launches.len());
                            h.answer_launch(l, started.then_some(RunStatus::Running));
                        }
                    }
                    Op::RefuseStop => h.refuse_stops = 1,
                }
                check(&h)?;
            }
        }
    }
}

/// Runs the core's commands with a backend that starts everything at once, and returns the
/// `TESSERA_TOKEN` of each instance launch.
fn drive_collecting_tokens(core: &mut Core, now: SimTime, next: &mut u64) -> Vec<String> {
    let mut tokens = Vec::new();
    while let Some(c) = core.poll_command() {
        if let super::Command::Launch(l) = c {
            if let Some((_, t)) = l.env.iter().find(|(k, _)| k == "TESSERA_TOKEN") {
                tokens.push(t.clone());
            }
            *next += 1;
            let h = crate::core::runs::Handle(format!("run-{next}"));
            core.handle_launched(now, l.job_id, l.attempt, Ok(h));
        }
    }
    tokens
}

#[test]
fn instances_report_their_load_with_their_own_token_and_the_policy_scales_on_it() {
    let policy = super::testkit::policy("serve-exclusive", None);
    let mut core = core_with(&[node("n1", 4)], policy, SimTime::ZERO);
    // serve-exclusive gives each instance a whole GPU: it does not take a quota service.
    let whole =
        body(&["true"], serde_json::json!({})).replace(",\"smLimit\":0.5,\"smRequest\":0.3", "");
    assert!(!whole.contains("smRequest"), "{whole}");
    submit(&mut core, &whole).expect("accepted");
    let mut next = 0;
    drive_collecting_tokens(&mut core, SimTime::ZERO, &mut next);
    core.schedule(SimTime::ZERO);
    let tokens = drive_collecting_tokens(&mut core, SimTime::ZERO, &mut next);
    assert_eq!(tokens.len(), 1, "serve-exclusive starts one instance");
    assert_eq!(core.instances().len(), 1);
    let load = |core: &mut Core, token: &str, service: i64, instance: i64, queue: u32, rps: f64| {
        let report = crate::services::LoadReport {
            queue_length: queue,
            requests_per_second: rps,
            completed: 10,
            violations: 1,
            ..Default::default()
        };
        let req = Request::InstanceLoad {
            service,
            instance,
            report: report.into(),
        };
        core.handle_request(SimTime::ZERO, Some(token), req)
    };
    // Only the instance's own token, for its own path; numbers are checked.
    let status = |r: Result<Response, ApiError>| r.err().map(|e| e.status);
    assert_eq!(status(load(&mut core, TOKEN, 1, 1, 1, 1.0)), Some(403));
    assert_eq!(status(load(&mut core, "nobody", 1, 1, 1, 1.0)), Some(401));
    assert_eq!(status(load(&mut core, &tokens[0], 1, 2, 1, 1.0)), Some(403));
    assert_eq!(status(load(&mut core, &tokens[0], 2, 1, 1, 1.0)), Some(403));
    assert_eq!(
        status(load(&mut core, &tokens[0], 1, 1, 1, -1.0)),
        Some(400)
    );
    assert_eq!(
        status(load(&mut core, &tokens[0], 1, 1, 1, f64::NAN)),
        Some(400)
    );
    // A quiet instance: one second later, still one instance.
    assert!(load(&mut core, &tokens[0], 1, 1, 0, 2.0).is_ok());
    let t1 = SimTime::from_secs(1);
    assert!(
        core.wants_schedule(t1),
        "serve-exclusive ticks every second"
    );
    core.schedule(t1);
    assert!(drive_collecting_tokens(&mut core, t1, &mut next).is_empty());
    // A queue beyond 2 x max batch per ready instance: it scales out by one.
    let Ok(Response::Service(v)) = load(&mut core, &tokens[0], 1, 1, 10, 40.0) else {
        panic!("load refused");
    };
    let reported = v.instances[0]
        .load
        .as_ref()
        .map(|l| (l.queue_length, l.completed));
    assert_eq!(reported, Some((10, 10)));
    let t2 = SimTime::from_secs(2);
    core.schedule(t2);
    let more = drive_collecting_tokens(&mut core, t2, &mut next);
    assert_eq!(more.len(), 1, "{:?}", core.refused());
    assert_ne!(more[0], tokens[0], "each instance has its own token");
    assert_eq!(core.instances().len(), 2);
    assert!(core.refused().is_empty(), "{:?}", core.refused());
}

// ---------------------------------------------------------------------------------------------
// Dilu's policies in real mode (issue 13 item 9): the registry's `dilu` drives instances and
// training jobs with the same code as in the simulator; its vertical scaling reaches the
// processes as `RetuneInstance`.

/// A process that prints every quota version its SDK throttle sees.
const FOLLOWER: &str = r#"
import time
import tessera_sdk as t
th = t.Throttle(refresh_interval=0, sleep=lambda s: None)
seen = None
deadline = time.time() + 120
while time.time() < deadline:
    q = th.current()
    if q is not None and q.version != seen:
        seen = q.version
        print(f"quota v{q.version} request={q.sm_request_permille} limit={q.sm_limit_permille}", flush=True)
    time.sleep(0.02)
"#;

/// Carries out the core's commands with the local backend (a retune declined as Slurm
/// declines it when `decline`), keeping each instance's latest `TESSERA_TOKEN`.
fn drive_tokens(
    core: &mut Core,
    backend: &mut LocalBackend,
    now: SimTime,
    decline: bool,
    tokens: &mut std::collections::BTreeMap<i64, String>,
) {
    use crate::backend::Backend;
    while let Some(c) = core.poll_command() {
        match c {
            super::Command::Launch(l) => {
                if let Some((_, t)) = l.env.iter().find(|(k, _)| k == "TESSERA_TOKEN") {
                    tokens.insert(-l.job_id, t.clone());
                }
                let r = backend.submit(&l);
                core.handle_launched(now, l.job_id, l.attempt, r);
            }
            super::Command::Retune(r) => {
                let res = if decline {
                    Err(crate::error::BackendError::Declined {
                        action: "retune",
                        backend: "slurm",
                    })
                } else {
                    backend.retune(&r)
                };
                core.handle_retuned(now, r.job_id, r.attempt, res);
            }
            super::Command::Stop { run, preempt } => {
                let h = crate::core::runs::Handle(run.handle.clone());
                let r = if preempt {
                    backend.preempt(&h)
                } else {
                    backend.cancel(&h)
                };
                core.handle_stopped(run, r);
            }
            super::Command::Poll(hs) | super::Command::Verify(hs) => {
                let s = backend.poll(&hs).expect("poll");
                core.handle_statuses(now, s);
            }
            _ => {}
        }
    }
}

/// Every live instance reports `rps` requests per second and `queue` waiting, with its own
/// token, as the SDK's `report_load` does.
fn report_all(
    core: &mut Core,
    tokens: &std::collections::BTreeMap<i64, String>,
    rps: f64,
    queue: u32,
) {
    for (service, instance, _, _) in core.instances() {
        let Some(token) = tokens.get(&instance) else {
            continue;
        };
        let report = crate::services::LoadReport {
            queue_length: queue,
            in_flight: queue.min(4),
            requests_per_second: rps,
            ..Default::default()
        };
        let req = Request::InstanceLoad {
            service,
            instance,
            report: report.into(),
        };
        core.handle_request(SimTime::ZERO, Some(token), req)
            .expect("load accepted");
    }
}

/// The SM request instance `id` holds now.
fn sm_request_of(core: &mut Core, id: i64) -> Option<u16> {
    let v = get(core, 1);
    let i = v.instances.iter().find(|i| i.id == id)?;
    let json = serde_json::to_value(&i.allocation[0].devices).ok()?;
    json["part"]["smRequest"].as_u64().map(|x| x as u16)
}

#[test]
fn under_dilu_an_overloaded_instance_gets_a_larger_quota_in_place_scales_out_and_gives_both_back() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut backend = local_backend(work.path(), None);
    let policy = super::testkit::policy("dilu", None);
    let mut core = core_with(&[node("n1", 1)], policy, SimTime::ZERO);
    let env = serde_json::json!({"PYTHONPATH": sdk_path().display().to_string()});
    submit(&mut core, &body(&["python3", "-u", "-c", FOLLOWER], env)).expect("accepted");
    let mut tokens = std::collections::BTreeMap::new();
    let at = SimTime::from_secs;
    core.schedule(at(0));
    drive_tokens(&mut core, &mut backend, at(0), false, &mut tokens);
    assert_eq!(core.instances().len(), 1, "{:?}", core.refused());
    let log1 = work.path().join("tessera-test-i1-1/output.log");
    wait_file(&log1, "the first quota", |t| {
        t.contains("quota v1 request=300 limit=500")
    });

    // Sustained overload: after 3 samples its request goes to its limit (500‰, the GPU is
    // its own), in place; after 20 of 40 a second instance joins it on the same GPU.
    let mut raised_at = None;
    for s in 1..=22 {
        report_all(&mut core, &tokens, 1000.0, 50);
        core.schedule(at(s));
        drive_tokens(&mut core, &mut backend, at(s), false, &mut tokens);
        assert!(core.refused().is_empty(), "{:?}", core.refused());
        core.check_device_invariants().expect("invariants");
        if raised_at.is_none() && sm_request_of(&mut core, 1) == Some(500) {
            raised_at = Some(s);
        }
    }
    assert_eq!(raised_at, Some(3), "raised at the third overloaded sample");
    wait_file(&log1, "the raised quota", |t| {
        t.contains("quota v2 request=500 limit=500")
    });
    let live = core.instances();
    assert_eq!(live.len(), 2, "scaled out: {live:?}");
    assert!(live.iter().all(|i| i.2 == 1), "no restart: {live:?}");
    let gpu = &core.device_state().gpus(tessera_model::NodeId(0))[0];
    assert_eq!(gpu.quota_holders, 2);
    assert!(gpu.sm_requested <= 1000 && gpu.sm_limits <= 1500);

    // Idle: both give their raise back after 5 samples, and after 30 of 40 the second
    // instance goes.
    for s in 23..=60 {
        report_all(&mut core, &tokens, 0.0, 0);
        core.schedule(at(s));
        drive_tokens(&mut core, &mut backend, at(s), false, &mut tokens);
        assert!(core.refused().is_empty(), "{:?}", core.refused());
        core.check_device_invariants().expect("invariants");
    }
    let text = wait_file(&log1, "the quota given back", |t| {
        t.contains("quota v3 request=300 limit=500")
    });
    assert!(!text.contains("quota v4"), "{text}");
    assert_eq!(core.instances().len(), 1, "scaled back in");
    assert_eq!(sm_request_of(&mut core, 1), Some(300));
    let gpu = &core.device_state().gpus(tessera_model::NodeId(0))[0];
    assert_eq!((gpu.quota_holders, gpu.sm_requested), (1, 300));
    assert_eq!(core.metrics().retunes.get("restart"), None);
    // Raised once and given back once; the second instance, overloaded for only 2 samples,
    // was never raised.
    assert_eq!(core.metrics().retunes.get("in_place"), Some(&2));
    assert_eq!(
        core.instances()[0].2,
        1,
        "the first instance was never restarted"
    );
    retire_and_stop(&mut core, &mut backend, &mut tokens);
}

/// Retires service 1 and carries out the stops of its instances.
fn retire_and_stop(
    core: &mut Core,
    backend: &mut LocalBackend,
    tokens: &mut std::collections::BTreeMap<i64, String>,
) {
    let r = core.handle_request(SimTime::ZERO, Some(TOKEN), Request::RetireService { id: 1 });
    assert!(r.is_ok());
    drive_tokens(core, backend, SimTime::from_secs(1000), false, tokens);
    assert!(core.instances().is_empty());
}

#[test]
fn under_dilu_a_backend_that_declines_the_retune_restarts_the_instance_with_the_raise() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut backend = local_backend(work.path(), None);
    let policy = super::testkit::policy("dilu", None);
    let mut core = core_with(&[node("n1", 1)], policy, SimTime::ZERO);
    let mark = work.path().join("mark");
    let script =
        r#"echo "$TESSERA_ATTEMPT $(cat "$TESSERA_QUOTA_FILE")" >> "$MARK"; exec sleep 300"#;
    let env = serde_json::json!({"MARK": mark.display().to_string()});
    submit(&mut core, &body(&["sh", "-c", script], env)).expect("accepted");
    let mut tokens = std::collections::BTreeMap::new();
    let at = SimTime::from_secs;
    core.schedule(at(0));
    drive_tokens(&mut core, &mut backend, at(0), true, &mut tokens);
    wait_file(&mark, "the first attempt", |t| t.lines().count() == 1);
    for s in 1..=3 {
        report_all(&mut core, &tokens, 1000.0, 50);
        core.schedule(at(s));
        drive_tokens(&mut core, &mut backend, at(s), true, &mut tokens);
    }
    assert_eq!(core.metrics().retunes.get("restart"), Some(&1));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&mark)
        .unwrap_or_default()
        .lines()
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "no second attempt");
        std::thread::sleep(Duration::from_millis(25));
        core.poll_runs(at(3));
        drive_tokens(&mut core, &mut backend, at(3), true, &mut tokens);
    }
    let text = std::fs::read_to_string(&mark).expect("mark");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("1 ") && lines[0].contains("\"smRequestPermille\":300"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("2 ") && lines[1].contains("\"smRequestPermille\":500"),
        "{text}"
    );
    assert_eq!(
        core.instance_restarts(),
        0,
        "a retune restart is not a crash"
    );
    core.check_device_invariants().expect("invariants");
    retire_and_stop(&mut core, &mut backend, &mut tokens);
}

/// Training jobs and instances under the registry's serving policies: Dilu packs them onto
/// one GPU under quotas; static-shares keeps them apart (training whole); neither needs a
/// line in the daemon naming them.
#[test]
fn dilu_packs_a_training_job_and_an_instance_on_one_gpu_and_static_shares_does_not() {
    for (name, shared) in [
        ("dilu", true),
        ("dilu-no-vertical", true),
        ("static-shares", false),
    ] {
        let policy = super::testkit::policy(name, None);
        let mut core = core_with(&[node("n1", 2)], policy, SimTime::ZERO);
        let job = serde_json::json!({
            "name": "train",
            "command": ["true"],
            "gpus": 1,
            "hints": {"model": "resnet152"},
        })
        .to_string();
        let r = core.submit(SimTime::ZERO, vec![(Some(TOKEN.into()), job)]);
        assert!(r[0].is_ok(), "{r:?}");
        submit(&mut core, &body(&["true"], serde_json::json!({}))).expect("accepted");
        let mut next = 0;
        core.schedule(SimTime::ZERO);
        drive_collecting_tokens(&mut core, SimTime::ZERO, &mut next);
        assert!(core.refused().is_empty(), "{name}: {:?}", core.refused());
        assert_eq!(core.instances().len(), 1, "{name}");
        core.check_device_invariants().expect("invariants");
        let gpus = core.device_state().gpus(tessera_model::NodeId(0));
        let mut spec = tessera_model::TrainingJob::simple(
            0,
            SimTime::ZERO,
            1,
            tessera_model::SimDuration::from_secs(1),
        );
        spec.model = "resnet152".into();
        let train = tessera_mechanisms::dilu::policy::training_request(&spec);
        if shared {
            assert_eq!(
                (gpus[0].quota_holders, gpus[0].sm_requested),
                (2, train + 300),
                "{name}"
            );
            assert!(gpus[1].is_idle(), "{name}");
        } else {
            assert!(gpus[0].whole, "{name}");
            assert_eq!(
                (gpus[1].quota_holders, gpus[1].sm_requested),
                (1, 300),
                "{name}"
            );
        }
    }
}

/// An instance retuned while its launch is in flight is restarted as a new attempt; the
/// daemon dies before the first launch answers, though the backend did start that run. The
/// restarted daemon finds it by name and stops it (before, nothing recorded it: it ran on
/// beside the instance's next attempt).
#[test]
fn a_restart_with_an_instance_launch_given_up_in_flight_stops_its_run() {
    use super::testkit::Harness;
    use crate::core::records::RunState;
    use crate::core::runs::RunStatus;
    let (policy, batch) = scripted();
    let mut h = Harness::new_at(vec![node("n1", 2)], policy, SimTime::ZERO);
    let text = body(&["true"], serde_json::json!({}));
    let r = h
        .core
        .handle_request(h.now, Some(TOKEN), Request::SubmitService { body: text });
    assert!(r.is_ok());
    h.drain();
    h.hold_launches = true;
    give(
        &batch,
        vec![Action::ScaleOut {
            service: ServiceId(0),
            allocation: alloc(0b1, quota(300, 500, 10), None),
        }],
    );
    h.core.request_schedule();
    h.schedule();
    let first = h.held_launches.pop().expect("the first launch, in flight");
    let id = -first.job_id;
    give(
        &batch,
        vec![Action::RetuneInstance {
            service: ServiceId(0),
            instance: InstanceId(id as u32),
            allocation: alloc(0b1, quota(400, 500, 10), None),
        }],
    );
    h.core.request_schedule();
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    // The restarted attempt waits for the first launch's answer (recorded, not launched).
    assert!(h.held_launches.is_empty());
    assert_eq!(h.store_instances[&id].attempt, 2);
    assert!(h
        .store_runs
        .values()
        .any(|r| r.job_id == -id && r.attempt == 1 && r.state == RunState::Launching));
    let run = h.start_run(&first, RunStatus::Running); // its answer never arrives
    h.hold_launches = false;
    let (policy, _batch) = scripted();
    h.restart(policy);
    assert_ne!(
        h.runs[&run.0].status,
        RunStatus::Running,
        "the first attempt's run is stopped"
    );
    let live = h
        .runs
        .values()
        .filter(|r| r.job_id == -id && r.status == RunStatus::Running)
        .count();
    assert_eq!(live, 1, "one run of the instance: its new attempt");
    assert!(h
        .store_runs
        .values()
        .all(|r| r.state != RunState::Launching));
}

/// A harness with one service whose first instance's launch is in flight (held).
fn instance_in_flight() -> (
    super::testkit::Harness,
    super::devices::Batch,
    crate::core::runs::Launch,
) {
    let (policy, batch) = scripted();
    let mut h = super::testkit::Harness::new_at(vec![node("n1", 2)], policy, SimTime::ZERO);
    let text = body(&["true"], serde_json::json!({}));
    let r = h
        .core
        .handle_request(h.now, Some(TOKEN), Request::SubmitService { body: text });
    assert!(r.is_ok());
    h.drain();
    h.hold_launches = true;
    give(
        &batch,
        vec![Action::ScaleOut {
            service: ServiceId(0),
            allocation: alloc(0b1, quota(300, 500, 10), None),
        }],
    );
    h.core.request_schedule();
    h.schedule();
    let first = h.held_launches.pop().expect("the first launch, in flight");
    (h, batch, first)
}

/// Gives instance `id` (of the first service, on GPU 0) a new SM request.
fn retune_to(h: &mut super::testkit::Harness, batch: &super::devices::Batch, id: i64, sm: u16) {
    give(
        batch,
        vec![Action::RetuneInstance {
            service: ServiceId(0),
            instance: InstanceId(id as u32),
            allocation: alloc(0b1, quota(sm, 500, 10), None),
        }],
    );
    h.core.request_schedule();
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
}

/// An instance retuned while its launch is in flight is restarted as a new attempt, which is
/// launched only once that launch has answered and the run it started (if any) is stopped:
/// launched at once, it ran beside the old run until then.
#[test]
fn an_instance_restarted_while_its_launch_is_in_flight_waits_for_that_launch() {
    use super::testkit::Event;
    use crate::core::runs::RunStatus;
    // The first launch starts a run whose stop fails once (retried at the next poll), or one
    // stopped at once, or it is refused.
    let cases = [
        (Some(RunStatus::Running), 1),
        (Some(RunStatus::Running), 0),
        (None, 0),
    ];
    for (answer, refused_stops) in cases {
        let (mut h, batch, first) = instance_in_flight();
        let id = -first.job_id;
        retune_to(&mut h, &batch, id, 400);
        let sent: Vec<u32> = h.held_launches.iter().map(|l| l.attempt).collect();
        assert!(
            sent.is_empty(),
            "attempts launched beside the first: {sent:?}"
        );
        assert!(h.core.instance_waiting(id));
        let stored = &h.store_instances[&id];
        assert_eq!(stored.attempt, 2, "the restart is recorded");
        h.hold_launches = false;
        h.take_events();
        let started = answer.is_some();
        h.refuse_stops = refused_stops;
        h.answer_launch(first, answer);
        let mut events = h.take_events();
        if refused_stops > 0 {
            let ahead: Vec<&Event> = events
                .iter()
                .filter(|e| matches!(e, Event::Launch(..)))
                .collect();
            assert!(ahead.is_empty(), "launched before the stop: {events:?}");
            h.poll();
            events = h.take_events();
        }
        let launched = |events: &[Event]| {
            events
                .iter()
                .any(|e| matches!(e, Event::Launch(j, 2, _) if *j == -id))
        };
        if started && !launched(&events) {
            // The new attempt waits for the old run to be reported gone (its GPU drains).
            h.poll();
            events.extend(h.take_events());
        }
        let stop = events.iter().position(|e| *e == Event::Stop(-id, 1, false));
        let launch = events
            .iter()
            .position(|e| matches!(e, Event::Launch(j, 2, _) if *j == -id));
        assert!(launch.is_some(), "the new attempt is launched: {events:?}");
        if started {
            assert!(stop.is_some() && stop < launch, "{events:?}");
        } else {
            assert_eq!(stop, None, "{events:?}");
        }
        let running = h
            .runs
            .values()
            .filter(|r| r.job_id == -id && r.status == RunStatus::Running)
            .count();
        assert_eq!(running, 1, "one run of the instance: its new attempt");
        let live = h.core.instances();
        assert!(
            matches!(live.as_slice(), [(_, i, 2, Some(_))] if *i == id),
            "{live:?}"
        );
    }
}

/// A running instance whose retune the backend declines is restarted, and the backend refuses
/// the old run's stop (retried at the next poll): the new attempt is launched only once that
/// stop is carried out (before, at once, beside the old run). Likewise after a daemon restart
/// between the two: the stop recorded before the crash is carried out first.
#[test]
fn an_instance_restarted_after_a_declined_retune_starts_once_its_old_run_is_stopped() {
    use super::testkit::{Event, Harness};
    use crate::core::runs::RunStatus;
    use crate::error::BackendError;
    let running = |h: &Harness, id: i64| {
        h.runs
            .values()
            .filter(|r| r.job_id == -id && r.status == RunStatus::Running)
            .count()
    };
    for restart in [false, true] {
        let (mut h, batch, first) = instance_in_flight();
        let id = -first.job_id;
        h.hold_launches = false;
        h.answer_launch(first, Some(RunStatus::Running));
        assert_eq!(running(&h, id), 1);
        h.retune_error = Some(BackendError::Declined {
            action: "retune",
            backend: "slurm",
        });
        h.refuse_stops = 1;
        h.take_events();
        retune_to(&mut h, &batch, id, 400);
        let events = h.take_events();
        assert!(events.contains(&Event::Stop(-id, 1, true)), "{events:?}");
        assert_eq!(running(&h, id), 1, "the old run alone: {events:?}");
        assert!(h.core.instance_waiting(id));
        assert_eq!(h.store_instances[&id].attempt, 2);
        let next = if restart {
            // The stop fails again after the restart.
            h.refuse_stops = 1;
            let (policy, _batch) = scripted();
            h.restart(policy);
            assert_eq!(running(&h, id), 1, "the old run alone after the restart");
            3 // attempt 2 never started: a new one
        } else {
            2
        };
        h.take_events();
        h.poll();
        let events = h.take_events();
        let stop = events.iter().position(|e| *e == Event::Stop(-id, 1, false));
        let launch = events
            .iter()
            .position(|e| matches!(e, Event::Launch(j, a, _) if *j == -id && *a == next));
        assert!(
            stop.is_some() && launch.is_some() && stop < launch,
            "{events:?}"
        );
        assert_eq!(running(&h, id), 1, "the new attempt alone");
        let live = h.core.instances();
        assert!(
            matches!(live.as_slice(), [(_, i, a, Some(_))] if *i == id && *a == next),
            "{live:?}"
        );
    }
}
