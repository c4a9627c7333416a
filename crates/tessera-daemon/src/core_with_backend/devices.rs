//! The device-level decision reaches the job: the core's launches, carried out by the real
//! local backend, start processes that report what they saw (environment and files), checked
//! exactly; a retune rewrites the quota file under a running job; a backend that declines a
//! retune gets a checkpoint + restart instead; `nvidia-smi mig` is called as the exact
//! argument vectors expected (a fake `nvidia-smi` on the backend's tool `PATH` records them).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tessera_model::{
    Allocation, Bytes, DeviceAlloc, GpuMask, GpuPart, JobId, MigInstance, MilliCpu, NodeId,
    NodeShare, ParallelPlan, SimTime,
};
use tessera_sched::{Action, ClusterView, Policy};

use super::testkit::{core_with, node, Event, Harness, TOKEN};
use super::{Command, Core};
use crate::backend::local::LocalBackend;
use crate::backend::Backend;
use crate::config::{LocalConfig, LocalNodeConfig};
use crate::core::runs::{Handle, PlacedMig, Reconfigure, RunStatus};
use crate::error::BackendError;
use crate::types::JobState;

pub(super) type Batch = Arc<Mutex<Option<Vec<Action>>>>;

/// Returns the batch it was last given, once.
struct Scripted(Batch);

impl Policy for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn round_length(&self) -> Option<tessera_model::SimDuration> {
        None
    }
    fn schedule(&mut self, _view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        if let Some(batch) = self.0.lock().ok().and_then(|mut b| b.take()) {
            actions.extend(batch);
        }
    }
}

pub(super) fn scripted() -> (Box<dyn Policy>, Batch) {
    let b = Batch::default();
    (Box::new(Scripted(b.clone())), b)
}

pub(super) fn give(b: &Batch, actions: Vec<Action>) {
    if let Ok(mut slot) = b.lock() {
        *slot = Some(actions);
    }
}

pub(super) fn alloc(mask: u64, part: GpuPart, plan: Option<ParallelPlan>) -> Allocation {
    let gpus = match part {
        GpuPart::Whole => GpuMask(mask).count(),
        _ => 0,
    };
    Allocation {
        plan,
        ..Allocation::single(NodeShare {
            node: NodeId(0),
            gpus,
            cpu: MilliCpu::from_cores(1),
            memory: Bytes::from_gib(1),
            devices: Some(DeviceAlloc {
                gpus: GpuMask(mask),
                part,
            }),
        })
    }
}

pub(super) fn quota(sm_request: u16, sm_limit: u16, gib: u64) -> GpuPart {
    GpuPart::Quota {
        sm_request,
        sm_limit,
        memory: Bytes::from_gib(gib),
    }
}

pub(super) fn local_backend(dir: &Path, tool_path: Option<String>) -> LocalBackend {
    LocalBackend::new(LocalConfig {
        work_dir: dir.to_path_buf(),
        nodes: vec![LocalNodeConfig {
            name: "n1".into(),
            gpu: "A100-80GB".into(),
            gpus: 4,
            cpus: MilliCpu::from_cores(64),
            memory: Bytes::from_gib(512),
        }],
        run_as: Default::default(),
        tool_path,
    })
    .expect("local backend")
}

/// Submits a job running `sh -c SCRIPT` on `gpus` GPUs; returns its id.
fn submit(core: &mut Core, name: &str, gpus: u32, script: &str) -> i64 {
    let body = serde_json::json!({
        "name": name,
        "command": ["sh", "-c", script],
        "gpus": gpus,
    })
    .to_string();
    let mut r = core.submit(SimTime::ZERO, vec![(Some(TOKEN.into()), body)]);
    r.pop().expect("one").expect("accepted").id
}

/// Carries out the core's commands with the real local backend (persisting nothing: these
/// tests are about what reaches the job).
pub(super) fn drive(core: &mut Core, backend: &mut LocalBackend, now: SimTime) {
    while let Some(c) = core.poll_command() {
        match c {
            Command::Persist(_) => {}
            Command::Launch(l) => {
                let r = backend.submit(&l);
                core.handle_launched(now, l.job_id, l.attempt, r);
            }
            Command::Stop { run, preempt } => {
                let h = Handle(run.handle.clone());
                let r = if preempt {
                    backend.preempt(&h)
                } else {
                    backend.cancel(&h)
                };
                core.handle_stopped(run, r);
            }
            Command::Poll(hs) | Command::Verify(hs) => {
                let s = backend.poll(&hs).expect("poll");
                core.handle_statuses(now, s);
            }
            Command::Retune(r) => {
                let res = backend.retune(&r);
                core.handle_retuned(now, r.job_id, r.attempt, res);
            }
            Command::Reconfigure { node, request } => {
                let res = backend.reconfigure(&request);
                core.handle_reconfigured(now, node, request.gpu, res);
            }
            Command::Inventory | Command::Find { .. } => {}
        }
    }
}

fn run_dir(work: &Path, id: i64, attempt: u32) -> PathBuf {
    work.join(format!("tessera-test-{id}-{attempt}"))
}

/// Waits until the job's run has ended and returns its output, with the work directory
/// written as `WORK`.
fn output_of(core: &mut Core, backend: &mut LocalBackend, work: &Path, id: i64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        core.poll_runs(SimTime::ZERO);
        drive(core, backend, SimTime::ZERO);
        let state = core.job_row(id).expect("job").state;
        if state.is_terminal() {
            assert_eq!(state, JobState::Completed, "job {id}");
            break;
        }
        assert!(Instant::now() < deadline, "job {id} did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    let attempt = core.job_row(id).expect("job").attempt;
    let text =
        std::fs::read_to_string(run_dir(work, id, attempt).join("output.log")).expect("output");
    text.replace(&work.display().to_string(), "WORK")
}

const REPORT: &str = r#"env | grep -E '^(CUDA_|TESSERA_(PLAN|GPU_TYPE|QUOTA))' | sort
cat "$TESSERA_PLAN_FILE"; echo
if [ -n "$TESSERA_QUOTA_FILE" ]; then cat "$TESSERA_QUOTA_FILE"; echo; fi"#;

#[test]
fn jobs_see_their_devices_quota_and_plan() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut backend = local_backend(work.path(), None);
    let (policy, batch) = scripted();
    let mut core = core_with(&[node("n1", 4)], policy, SimTime::ZERO);
    let shared = submit(&mut core, "shared", 1, REPORT);
    let whole = submit(&mut core, "whole", 2, REPORT);
    drive(&mut core, &mut backend, SimTime::ZERO);
    give(
        &batch,
        vec![
            Action::Start {
                job: JobId(0),
                allocation: alloc(
                    0b0110,
                    quota(300, 500, 10),
                    Some(ParallelPlan {
                        data: 1,
                        tensor: 2,
                        pipeline: 1,
                    }),
                ),
            },
            Action::Start {
                job: JobId(1),
                allocation: alloc(0b1001, GpuPart::Whole, None),
            },
        ],
    );
    core.schedule(SimTime::ZERO);
    drive(&mut core, &mut backend, SimTime::ZERO);
    assert!(core.refused().is_empty(), "{:?}", core.refused());
    let out = output_of(&mut core, &mut backend, work.path(), shared);
    let placement = r#"[{"cpu":"1","devices":{"indices":[1,2],"part":{"kind":"quota","memory":"10Gi","smLimit":500,"smRequest":300}},"gpus":0,"gresType":"a100","memory":"1Gi","node":"n1"}]"#;
    assert_eq!(
        out,
        format!(
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50\n\
             CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M,1=10240M\n\
             CUDA_VISIBLE_DEVICES=1,2\n\
             TESSERA_GPU_TYPE=A100-80GB\n\
             TESSERA_PLAN_DP=1\n\
             TESSERA_PLAN_FILE=WORK/tessera-test-1-1/tessera-test-1-1.plan.json\n\
             TESSERA_PLAN_PP=1\n\
             TESSERA_PLAN_TP=2\n\
             TESSERA_QUOTA_FILE=WORK/tessera-test-1-1/tessera-test-1-1.quota.json\n\
             {{\"attempt\":1,\"data\":1,\"gpuType\":\"A100-80GB\",\"pipeline\":1,\"placement\":{placement},\"tensor\":2}}\n\
             {{\"gpus\":[1,2],\"memoryBytes\":10737418240,\"smLimitPermille\":500,\"smRequestPermille\":300,\"version\":1}}\n"
        )
    );
    // Whole GPUs 0 and 3, no plan given: data-parallel over its two GPUs, no quota.
    let out = output_of(&mut core, &mut backend, work.path(), whole);
    let placement = r#"[{"cpu":"1","devices":{"indices":[0,3],"part":{"kind":"whole"}},"gpus":2,"gresType":"a100","memory":"1Gi","node":"n1"}]"#;
    assert_eq!(
        out,
        format!(
            "CUDA_VISIBLE_DEVICES=0,3\n\
             TESSERA_GPU_TYPE=A100-80GB\n\
             TESSERA_PLAN_DP=2\n\
             TESSERA_PLAN_FILE=WORK/tessera-test-2-1/tessera-test-2-1.plan.json\n\
             TESSERA_PLAN_PP=1\n\
             TESSERA_PLAN_TP=1\n\
             {{\"attempt\":1,\"data\":2,\"gpuType\":\"A100-80GB\",\"pipeline\":1,\"placement\":{placement},\"tensor\":1}}\n"
        )
    );
}

#[test]
fn a_retune_rewrites_the_quota_file_under_the_running_job() {
    let work = tempfile::tempdir().expect("tempdir");
    let mut backend = local_backend(work.path(), None);
    let (policy, batch) = scripted();
    let mut core = core_with(&[node("n1", 4)], policy, SimTime::ZERO);
    let script = r#"cat "$TESSERA_QUOTA_FILE"; echo
i=0; while grep -q '"version":1' "$TESSERA_QUOTA_FILE" && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
cat "$TESSERA_QUOTA_FILE"; echo"#;
    let id = submit(&mut core, "tuned", 1, script);
    drive(&mut core, &mut backend, SimTime::ZERO);
    give(
        &batch,
        vec![Action::Start {
            job: JobId(0),
            allocation: alloc(0b1, quota(300, 500, 10), None),
        }],
    );
    core.schedule(SimTime::ZERO);
    drive(&mut core, &mut backend, SimTime::ZERO);
    // Once the job has printed its first quota, the policy gives it more.
    let log = run_dir(work.path(), id, 1).join("output.log");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&log).unwrap_or_default().is_empty() {
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    give(
        &batch,
        vec![Action::Retune {
            job: JobId(0),
            allocation: alloc(0b1, quota(400, 900, 12), None),
        }],
    );
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    drive(&mut core, &mut backend, SimTime::ZERO);
    assert!(core.refused().is_empty(), "{:?}", core.refused());
    let out = output_of(&mut core, &mut backend, work.path(), id);
    assert_eq!(
        out,
        "{\"gpus\":[0],\"memoryBytes\":10737418240,\"smLimitPermille\":500,\"smRequestPermille\":300,\"version\":1}\n\
         {\"gpus\":[0],\"memoryBytes\":12884901888,\"smLimitPermille\":900,\"smRequestPermille\":400,\"version\":2}\n"
    );
    assert_eq!(core.job_row(id).expect("job").attempt, 1, "no restart");
    assert_eq!(core.metrics().retunes.get("in_place"), Some(&1));
}

#[test]
fn a_declined_retune_becomes_a_checkpoint_and_restart_with_the_new_quota() {
    let (policy, batch) = scripted();
    let mut h = Harness::new_at(vec![node("n1", 2)], policy, SimTime::ZERO);
    h.retune_error = Some(BackendError::Declined {
        action: "retune",
        backend: "slurm",
    });
    give(
        &batch,
        vec![Action::Start {
            job: JobId(0),
            allocation: alloc(0b1, quota(300, 500, 10), None),
        }],
    );
    let id = h.submit("j0", 1, 100);
    h.schedule();
    assert_eq!(h.state(id), JobState::Running);
    h.take_events();
    give(
        &batch,
        vec![Action::Retune {
            job: JobId(0),
            allocation: alloc(0b1, quota(400, 900, 12), None),
        }],
    );
    h.core.request_schedule();
    h.schedule();
    let events: Vec<Event> = h
        .take_events()
        .into_iter()
        .filter(|e| !matches!(e, Event::Persist(_)))
        .collect();
    assert_eq!(
        events,
        vec![
            Event::Retune(id, 1),
            Event::Stop(id, 1, true),
            // The stopped run may have completed just before: launched once it did not.
            Event::Verify(1),
            Event::Launch(id, 2, vec![("n1".into(), 0)]),
        ]
    );
    assert_eq!(h.state(id), JobState::Running);
    let row = h.core.job_row(id).expect("job");
    assert_eq!(
        row.placement[0].quota(),
        Some((400, 900, Bytes::from_gib(12))),
        "restarted with the new quota"
    );
    assert!(h.core.check_device_invariants().is_ok());
    assert_eq!(h.core.metrics().retunes.get("restart"), Some(&1));
    let _ = RunStatus::Running;
}

/// A fake `nvidia-smi` that records its arguments in `LOG` and keeps each GPU's instances in
/// `STATE/gpuN`, printing what the real one prints for the calls the backend makes.
fn fake_nvidia_smi(dir: &Path) -> (String, PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).expect("state");
    let log = dir.join("calls.log");
    let script = format!(
        r#"#!/bin/sh
printf '%s\n' "$*" >> '{log}'
st='{state}'
case "$*" in
  "-L")
    for i in 0 1 2 3; do
      echo "GPU $i: NVIDIA A100-SXM4-80GB (UUID: GPU-0000000$i-1111-2222-3333-444444444444)"
      if [ -f "$st/gpu$i" ]; then
        n=0
        while read p; do
          echo "  MIG $p     Device  $n: (UUID: MIG-$i$n$p-5555-6666-7777-888888888888)"
          n=$((n+1))
        done < "$st/gpu$i"
      fi
    done ;;
  "-i "*" -mig 1") echo "Enabled MIG Mode for GPU 00000000:0$2:00.0"; echo "All done." ;;
  "-i "*" -mig 0") echo "Disabled MIG Mode for GPU 00000000:0$2:00.0"; echo "All done." ;;
  "mig -i "*" -dci")
    if [ -s "$st/gpu$3" ]; then
      echo "Successfully destroyed compute instance ID  0 from GPU  $3 GPU instance ID  1"
    else
      echo "No compute instances found: Not Found"; exit 6
    fi ;;
  "mig -i "*" -dgi")
    if [ -s "$st/gpu$3" ]; then
      echo "Successfully destroyed GPU instance ID  1 from GPU  $3"; rm -f "$st/gpu$3"
    else
      echo "No GPU instances found: Not Found"; exit 6
    fi ;;
  "mig -i "*" -cgi "*" -C")
    if [ -e "$st/fail" ]; then
      echo "Unable to create a GPU instance on GPU  $3 using profile $5: In use by another client" >&2
      echo "Failed to create GPU instances: In use by another client" >&2
      exit 6
    fi
    gi=1
    for p in $(echo "$5" | tr ',' ' '); do
      echo "$p" >> "$st/gpu$3"
      echo "Successfully created GPU instance ID  $gi on GPU  $3 using profile MIG $p (ID  9)"
      echo "Successfully created compute instance ID  0 on GPU  $3 GPU instance ID  $gi using profile MIG $p (ID  2)"
      gi=$((gi+1))
    done ;;
  *) echo "unexpected arguments" >&2; exit 2 ;;
esac
"#,
        log = log.display(),
        state = state.display(),
    );
    let path = bin.join("nvidia-smi");
    std::fs::write(&path, script).expect("fake nvidia-smi");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (format!("{}:/usr/bin:/bin", bin.display()), log)
}

fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// A100-80GB MIG instance of profile `name` at `start`.
fn mig(name: &str, start: u8) -> MigInstance {
    let catalog = tessera_model::GpuCatalog::builtin();
    let id = catalog.find("A100-80GB").expect("A100-80GB");
    let geo = catalog.mig_geometry(id).expect("MIG geometry");
    MigInstance {
        profile: geo.find_profile(name).expect("profile"),
        start,
    }
}

#[test]
fn reconfiguration_runs_nvidia_smi_and_jobs_get_their_mig_device() {
    let work = tempfile::tempdir().expect("tempdir");
    let (path, log) = fake_nvidia_smi(work.path());
    let runs = work.path().join("runs");
    let mut backend = local_backend(&runs, Some(path));
    let (policy, batch) = scripted();
    let mut core = core_with(&[node("n1", 4)], policy, SimTime::ZERO);
    let id = submit(
        &mut core,
        "small",
        1,
        "echo \"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"",
    );
    drive(&mut core, &mut backend, SimTime::ZERO);
    let layout = vec![mig("4g.40gb", 0), mig("3g.40gb", 4)];
    give(
        &batch,
        vec![Action::Reconfigure {
            node: NodeId(0),
            gpu: 2,
            layout: Some(layout.clone()),
        }],
    );
    core.schedule(SimTime::ZERO);
    drive(&mut core, &mut backend, SimTime::ZERO);
    assert!(core.refused().is_empty(), "{:?}", core.refused());
    assert!(
        core.unhealthy_gpus().is_empty(),
        "{:?}",
        core.unhealthy_gpus()
    );
    assert_eq!(
        calls(&log),
        [
            "-i 2 -mig 1",
            "mig -i 2 -dci",
            "mig -i 2 -dgi",
            "mig -i 2 -cgi 4g.40gb,3g.40gb -C",
            "-L"
        ]
    );
    let g = &core.device_state().gpus(NodeId(0))[2];
    assert_eq!(g.mig.as_deref(), Some(&layout[..]));
    assert_eq!(g.ready_at, SimTime::ZERO, "ready once nvidia-smi is done");
    let super::Response::Nodes(list) = core
        .handle_request(SimTime::ZERO, Some(TOKEN), super::Request::Nodes)
        .expect("nodes")
    else {
        panic!("not a node list")
    };
    let modes: Vec<&str> = list.nodes[0]
        .devices
        .iter()
        .map(|d| d.mode.as_str())
        .collect();
    assert_eq!(modes, ["free", "free", "mig", "free"]);
    assert_eq!(
        list.nodes[0].devices[2].layout,
        Some(vec![
            PlacedMig {
                profile: "4g.40gb".into(),
                start: 0
            },
            PlacedMig {
                profile: "3g.40gb".into(),
                start: 4
            }
        ])
    );
    give(
        &batch,
        vec![Action::Start {
            job: JobId(0),
            allocation: alloc(0b100, GpuPart::Mig(layout[1]), None),
        }],
    );
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    drive(&mut core, &mut backend, SimTime::ZERO);
    assert!(core.refused().is_empty(), "{:?}", core.refused());
    let out = output_of(&mut core, &mut backend, &runs, id);
    assert_eq!(
        out,
        "CUDA_VISIBLE_DEVICES=MIG-213g.40gb-5555-6666-7777-888888888888\n"
    );

    // A restarted daemon's backend still knows the MIG device ids.
    let again = local_backend(&runs, None);
    assert_eq!(
        again
            .mig_id("n1", 2, "3g.40gb", 4)
            .expect("known after a restart"),
        "MIG-213g.40gb-5555-6666-7777-888888888888"
    );

    // Back to whole mode: the instances go, MIG mode is switched off.
    std::fs::write(&log, "").expect("clear log");
    let r = Reconfigure {
        node: "n1".into(),
        gpu: 2,
        from: Some(vec![
            PlacedMig {
                profile: "4g.40gb".into(),
                start: 0,
            },
            PlacedMig {
                profile: "3g.40gb".into(),
                start: 4,
            },
        ]),
        to: None,
    };
    backend.reconfigure(&r).expect("whole mode");
    assert_eq!(
        calls(&log),
        ["mig -i 2 -dci", "mig -i 2 -dgi", "-i 2 -mig 0"]
    );
}

#[test]
fn a_failing_nvidia_smi_is_an_error_and_hostile_profiles_never_reach_it() {
    let work = tempfile::tempdir().expect("tempdir");
    let (path, log) = fake_nvidia_smi(work.path());
    std::fs::write(work.path().join("state/fail"), "").expect("fail switch");
    let mut backend = local_backend(&work.path().join("runs"), Some(path));
    let to = |profile: &str| Reconfigure {
        node: "n1".into(),
        gpu: 0,
        from: None,
        to: Some(vec![PlacedMig {
            profile: profile.into(),
            start: 0,
        }]),
    };
    let err = backend.reconfigure(&to("7g.80gb")).expect_err("fails");
    assert!(
        matches!(&err, BackendError::Command { stderr, .. } if stderr.contains("In use by another client")),
        "{err}"
    );
    assert_eq!(
        calls(&log),
        [
            "-i 0 -mig 1",
            "mig -i 0 -dci",
            "mig -i 0 -dgi",
            "mig -i 0 -cgi 7g.80gb -C"
        ]
    );
    std::fs::write(&log, "").expect("clear log");
    let err = backend.reconfigure(&to("1g;touch x")).expect_err("refused");
    assert!(matches!(err, BackendError::Unsupported(_)), "{err}");
    assert!(calls(&log).is_empty(), "nvidia-smi was not called");
}

#[test]
fn after_a_restart_a_mig_gpu_keeps_the_instances_its_jobs_hold() {
    let (policy, batch) = scripted();
    let mut h = Harness::new_at(vec![node("n1", 1)], policy, SimTime::ZERO);
    let layout = vec![mig("4g.40gb", 0), mig("3g.40gb", 4)];
    give(
        &batch,
        vec![Action::Reconfigure {
            node: NodeId(0),
            gpu: 0,
            layout: Some(layout.clone()),
        }],
    );
    let id = h.submit("j0", 1, 100);
    h.schedule();
    give(
        &batch,
        vec![Action::Start {
            job: JobId(0),
            allocation: alloc(0b1, GpuPart::Mig(layout[1]), None),
        }],
    );
    h.core.request_schedule();
    h.schedule();
    assert_eq!(h.state(id), JobState::Running);
    let (policy, batch) = scripted();
    h.restart(policy);
    assert_eq!(h.state(id), JobState::Running);
    let g = &h.core.device_state().gpus(NodeId(0))[0];
    assert_eq!(g.mig.as_deref(), Some(&layout[1..]), "the held instance");
    assert_eq!(g.mig_busy, 1);
    assert!(h.core.check_device_invariants().is_ok());
    // Nothing can take the GPU whole meanwhile.
    let other = h.submit("j1", 1, 100);
    give(
        &batch,
        vec![Action::Start {
            job: JobId(1),
            allocation: alloc(0b1, GpuPart::Whole, None),
        }],
    );
    h.schedule();
    assert_eq!(h.state(other), JobState::Pending);
    assert_eq!(h.core.refused().len(), 1);
}

#[test]
fn a_retune_of_a_job_still_starting_replaces_its_launch_once_the_old_run_is_verified() {
    let (policy, batch) = scripted();
    let mut core = core_with(&[node("n1", 1)], policy, SimTime::ZERO);
    let id = submit(&mut core, "j0", 1, "true");
    while core.poll_command().is_some() {}
    give(
        &batch,
        vec![Action::Start {
            job: JobId(0),
            allocation: alloc(0b1, quota(300, 500, 10), None),
        }],
    );
    core.schedule(SimTime::ZERO);
    let mut first = None;
    while let Some(c) = core.poll_command() {
        if let Command::Launch(l) = c {
            first = Some(l);
        }
    }
    let first = first.expect("a launch");
    // The launch is still in flight when the policy retunes the job.
    give(
        &batch,
        vec![Action::Retune {
            job: JobId(0),
            allocation: alloc(0b1, quota(400, 900, 12), None),
        }],
    );
    core.request_schedule();
    core.schedule(SimTime::ZERO);
    assert!(core.refused().is_empty(), "{:?}", core.refused());
    // The new attempt is recorded, but not launched while the old launch may start a run.
    while let Some(c) = core.poll_command() {
        match c {
            Command::Persist(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // The first launch answers late: its run is stopped, then asked how it ended.
    core.handle_launched(SimTime::ZERO, id, 1, Ok(Handle("late".into())));
    let mut stops = Vec::new();
    let mut verified = Vec::new();
    while let Some(c) = core.poll_command() {
        match c {
            Command::Stop { run, .. } => {
                stops.push(run.handle.clone());
                core.handle_stopped(run, Ok(()));
            }
            Command::Verify(handles) => verified.extend(handles),
            Command::Persist(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(stops, ["late"]);
    assert_eq!(verified, [Handle("late".into())]);
    // It was stopped, not done: the attempt with the new quota goes out.
    core.handle_verified(
        SimTime::ZERO,
        vec![(Handle("late".into()), RunStatus::Preempted)],
    );
    let mut second = None;
    while let Some(c) = core.poll_command() {
        match c {
            Command::Launch(l) => second = Some(l),
            Command::Persist(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let second = second.expect("a new attempt");
    assert_eq!((second.attempt, first.attempt), (2, 1));
    assert_eq!(
        second.placement[0].quota(),
        Some((400, 900, Bytes::from_gib(12)))
    );
    assert!(core.check_device_invariants().is_ok());
}

/// Asks for a wake-up 50 s after its first call and records the triggers it sees.
struct Sleeper(Arc<Mutex<Vec<(SimTime, bool)>>>);

impl Policy for Sleeper {
    fn name(&self) -> &str {
        "sleeper"
    }
    fn round_length(&self) -> Option<tessera_model::SimDuration> {
        None
    }
    fn schedule(&mut self, view: &ClusterView<'_>, _actions: &mut Vec<Action>) {
        if let Ok(mut seen) = self.0.lock() {
            seen.push((view.now, view.trigger.wakeup));
        }
    }
    fn wakeup(&self) -> Option<SimTime> {
        Some(SimTime::from_secs(50))
    }
}

#[test]
fn a_wakeup_the_policy_asks_for_is_a_scheduling_point() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut h = Harness::new_at(
        vec![node("n1", 1)],
        Box::new(Sleeper(seen.clone())),
        SimTime::ZERO,
    );
    h.submit("j0", 1, 100);
    h.schedule();
    assert_eq!(h.core.poll_timeout(), Some(SimTime::from_secs(50)));
    h.now = SimTime::from_secs(49);
    assert!(!h.core.wants_schedule(h.now));
    h.now = SimTime::from_secs(50);
    assert!(h.core.wants_schedule(h.now));
    h.schedule();
    assert_eq!(h.core.poll_timeout(), None, "asked for, and passed");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(
        seen,
        [(SimTime::ZERO, false), (SimTime::from_secs(50), true)]
    );
}
