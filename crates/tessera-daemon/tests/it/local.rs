//! The local backend running real processes through the daemon.

use std::sync::Arc;
use std::time::Duration;

use tessera_daemon::types::JobState;
use tessera_daemon::SystemClock;

use crate::common::*;

#[test]
fn runs_processes_with_their_gpus_and_records_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), local_backend(dir.path(), 4));
    let backend = tessera_daemon::build_backend(&c.backend).unwrap();
    let d = tessera_daemon::spawn(c, backend, Arc::new(SystemClock::new())).unwrap();
    let alice = client(&d, ALICE);
    let hold = alice.submit(&job("hold", 3, "sleep 30")).unwrap();
    let script = "name: env\ngpus: 1\nscript: |\n  echo \"cvd=$CUDA_VISIBLE_DEVICES job=$TESSERA_JOB_ID workers=$TESSERA_CPU_WORKERS\"\n  echo \"$GREETING\"\nenv: {GREETING: \"$(not run) 'quoted'\"}\n";
    let env = alice.submit(script).unwrap();
    let fail = alice
        .submit(&job("fail", 1, "sh -c exit_7_is_not_a_command"))
        .unwrap();
    wait_until("env completes", Duration::from_secs(20), || {
        alice.describe(env.id).unwrap().job.state == JobState::Completed
    });
    let e = alice.describe(env.id).unwrap().job;
    assert_eq!(e.exit_code, Some(0));
    let out_dir = dir.path().join("runs").join(
        e.backend_id
            .clone()
            .unwrap_or_else(|| format!("{:?}", e.message)),
    );
    let _ = out_dir; // the handle is cleared when the run ends; find the output by name
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let env_run = runs
        .iter()
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .ends_with(&format!("-{}-1", env.id))
        })
        .unwrap();
    let log = std::fs::read_to_string(env_run.join("output.log")).unwrap();
    assert_eq!(
        log,
        format!("cvd=3 job={} workers=2\n$(not run) 'quoted'\n", env.id),
        "hold has devices 0-2"
    );
    wait_until("fail fails", Duration::from_secs(20), || {
        alice.describe(fail.id).unwrap().job.state == JobState::Failed
    });
    assert!(alice
        .describe(fail.id)
        .unwrap()
        .job
        .exit_code
        .is_some_and(|c| c != 0));
    // A 2-GPU job waits while `hold` keeps 3 of 4 GPUs, and starts when it is cancelled.
    let wait = alice.submit(&job("wait", 2, "sleep 30")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let w = alice.describe(wait.id).unwrap().job;
    assert_eq!(
        (w.state, w.pending_reason.as_deref()),
        (JobState::Pending, Some("Resources"))
    );
    assert_eq!(
        alice.describe(hold.id).unwrap().job.state,
        JobState::Running
    );
    alice.cancel(hold.id).unwrap();
    wait_until("wait starts", Duration::from_secs(20), || {
        alice.describe(wait.id).unwrap().job.state == JobState::Running
    });
    let hold_run = runs
        .iter()
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .ends_with(&format!("-{}-1", hold.id))
        })
        .unwrap();
    let pid: i32 = std::fs::read_to_string(hold_run.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until("cancelled process exits", Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
    });
    alice.cancel(wait.id).unwrap();
}
