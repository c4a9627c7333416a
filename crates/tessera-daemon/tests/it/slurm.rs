//! Against a real Slurm brought up by `scripts/slurm/up.sh` (nodes n1, n2: 8x a100; n3: 4x
//! v100; n4: 7x a100_1g.10gb + 2x a100_3g.40gb).
//!
//! When no Slurm answers, these tests skip (print and pass) unless `CI=true`, where they fail.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tessera_daemon::config::SlurmConfig;
use tessera_daemon::types::JobState;
use tessera_daemon::{BackendConfig, Client, SystemClock};

use crate::common::*;
use crate::restart::{free_port, sigkill, start_tesserad};

/// The tests share one Slurm: run them one at a time.
static SLURM: Mutex<()> = Mutex::new(());

fn slurm_conf() -> Option<PathBuf> {
    let conf = std::env::var_os("SLURM_CONF")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/tessera-slurm/etc/slurm.conf"));
    let up = conf.exists()
        && Command::new("scontrol")
            .arg("ping")
            .env("SLURM_CONF", &conf)
            .output()
            .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("UP"));
    if up {
        return Some(conf);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "CI=true but no Slurm answers (SLURM_CONF={}); run scripts/slurm/up.sh",
            conf.display()
        );
    }
    eprintln!(
        "SKIPPED: no Slurm answers at SLURM_CONF={} (run scripts/slurm/up.sh)",
        conf.display()
    );
    None
}

fn lock() -> MutexGuard<'static, ()> {
    SLURM.lock().unwrap_or_else(|p| p.into_inner())
}

fn slurm_backend(dir: &std::path::Path, conf: &std::path::Path) -> BackendConfig {
    BackendConfig::Slurm(SlurmConfig {
        work_dir: dir.join("slurm-jobs"),
        partition: None,
        slurm_conf: Some(conf.to_path_buf()),
        bin_dir: None,
        gres_map: Default::default(),
        default_gpu: None,
        command_timeout_seconds: 30,
    })
}

fn scontrol_job(conf: &std::path::Path, id: &str) -> String {
    let o = Command::new("scontrol")
        .args(["show", "job", "-d", id])
        .env("SLURM_CONF", conf)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Slurm jobs (id, state) whose name starts with `prefix`.
fn slurm_jobs(conf: &std::path::Path, prefix: &str) -> Vec<(String, String, String)> {
    let o = Command::new("squeue")
        .args(["-h", "-t", "all", "-o", "%i|%T|%j"])
        .env("SLURM_CONF", conf)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split('|');
            Some((
                it.next()?.to_string(),
                it.next()?.to_string(),
                it.next()?.to_string(),
            ))
        })
        .filter(|(_, _, n)| n.starts_with(prefix))
        .collect()
}

fn instance(dir: &std::path::Path) -> String {
    tessera_daemon::store::Store::inspect(&dir.join("t.db"))
        .unwrap()
        .instance()
        .unwrap()
}

#[test]
fn slurm_places_on_the_chosen_node_and_gres_waits_and_cancels() {
    let Some(conf) = slurm_conf() else { return };
    let _guard = lock();
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), slurm_backend(dir.path(), &conf));
    let backend = tessera_daemon::build_backend(&c.backend).unwrap();
    let d = tessera_daemon::spawn(c, backend, Arc::new(SystemClock::new())).unwrap();
    let alice = client(&d, ALICE);
    let nodes = alice.nodes().unwrap().nodes;
    let names: Vec<_> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.gres_type.as_deref(), n.gpus))
        .collect();
    assert!(names.contains(&("n1", Some("a100"), 8)), "{names:?}");
    assert!(
        names.contains(&("n4", Some("a100_3g.40gb"), 2)),
        "{names:?}"
    );
    assert!(nodes.iter().any(|n| n.gpu_model == "A100-80GB-MIG-1g.10gb"));

    let two = alice
        .submit(&format!(
            "{}gpuType: a100\ncpu: 4\nmemory: 8Gi\n",
            job("two", 2, "sleep 60")
        ))
        .unwrap();
    let mig = alice
        .submit(&format!(
            "{}gpuType: a100_3g.40gb\n",
            job("mig", 1, "sleep 60")
        ))
        .unwrap();
    let full = alice
        .submit(&format!("{}gpuType: a100\n", job("full", 8, "sleep 60")))
        .unwrap();
    let wait = alice
        .submit(&format!("{}gpuType: a100\n", job("wait", 8, "sleep 60")))
        .unwrap();
    let done = alice
        .submit(&format!("{}gpuType: v100\n", job("done", 1, "true")))
        .unwrap();
    let bad = alice
        .submit(&format!("{}gpuType: v100\n", job("bad", 1, "false")))
        .unwrap();
    let running = |id| alice.describe(id).unwrap().job.backend_state.as_deref() == Some("RUNNING");
    wait_until("jobs running in Slurm", Duration::from_secs(30), || {
        running(two.id) && running(mig.id) && running(full.id)
    });

    // The policy (FIFO, first fit) chose n1 for `two`, n2 for `full`, n4's 3g slices for `mig`;
    // Slurm ran each exactly there, with exactly that GRES.
    let t = alice.describe(two.id).unwrap().job;
    assert_eq!(
        (
            t.allocation[0].node.as_str(),
            t.allocation[0].gres_type.as_deref(),
            t.allocation[0].gpus
        ),
        ("n1", Some("a100"), 2)
    );
    let sj = scontrol_job(&conf, t.backend_id.as_deref().unwrap());
    assert!(
        sj.contains("Nodes=n1 ") && sj.contains("GRES=gpu:a100:2(IDX:"),
        "{sj}"
    );
    assert!(sj.contains("NumCPUs=4") && sj.contains("Mem=8192"), "{sj}");
    let f = alice.describe(full.id).unwrap().job;
    assert_eq!(f.allocation[0].node, "n2");
    assert!(
        scontrol_job(&conf, f.backend_id.as_deref().unwrap()).contains("GRES=gpu:a100:8(IDX:0-7)")
    );
    let m = alice.describe(mig.id).unwrap().job;
    assert_eq!(
        (
            m.allocation[0].node.as_str(),
            m.allocation[0].gres_type.as_deref()
        ),
        ("n4", Some("a100_3g.40gb"))
    );
    assert!(scontrol_job(&conf, m.backend_id.as_deref().unwrap())
        .contains("GRES=gpu:a100_3g.40gb:1(IDX:"));

    // `wait` needs 8 a100 and only 6 are free on n1: it waits, and starts on n2 once `full` is cancelled.
    let w = alice.describe(wait.id).unwrap().job;
    assert_eq!(
        (w.state, w.pending_reason.as_deref()),
        (JobState::Pending, Some("Resources"))
    );
    let full_slurm = f.backend_id.clone().unwrap();
    assert_eq!(alice.cancel(full.id).unwrap().state, JobState::Cancelled);
    wait_until("wait starts", Duration::from_secs(30), || running(wait.id));
    let w = alice.describe(wait.id).unwrap().job;
    assert_eq!(w.allocation[0].node, "n2");
    wait_until("Slurm cancelled `full`", Duration::from_secs(30), || {
        scontrol_job(&conf, &full_slurm).contains("JobState=CANCELLED")
    });

    wait_until("done and bad end", Duration::from_secs(30), || {
        alice.describe(done.id).unwrap().job.state.is_terminal()
            && alice.describe(bad.id).unwrap().job.state.is_terminal()
    });
    assert_eq!(
        alice.describe(done.id).unwrap().job.state,
        JobState::Completed
    );
    let b = alice.describe(bad.id).unwrap().job;
    assert_eq!((b.state, b.exit_code), (JobState::Failed, Some(1)));
    // One Slurm job per started tessera job.
    let prefix = format!("tessera-{}-", instance(dir.path()));
    assert_eq!(slurm_jobs(&conf, &prefix).len(), 6);
    for j in [two.id, mig.id, wait.id] {
        alice.cancel(j).unwrap();
    }
}

#[test]
fn slurm_sigkill_and_restart_loses_and_duplicates_nothing() {
    let Some(conf) = slurm_conf() else { return };
    let _guard = lock();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), slurm_backend(dir.path(), &conf));
    let port = free_port();
    let d = start_tesserad(dir.path(), config.clone(), port);
    let alice = Client::new(&d.url, Some(ALICE.into()));
    let short = alice
        .submit(&format!("{}gpuType: v100\n", job("short", 4, "sleep 3")))
        .unwrap();
    let long = alice
        .submit(&format!("{}gpuType: v100\n", job("long", 4, "sleep 60")))
        .unwrap();
    let on_a100 = alice
        .submit(&format!("{}gpuType: a100\n", job("a", 8, "sleep 60")))
        .unwrap();
    wait_until("short and a running", Duration::from_secs(30), || {
        [short.id, on_a100.id]
            .iter()
            .all(|&id| alice.describe(id).unwrap().job.backend_state.as_deref() == Some("RUNNING"))
    });
    assert_eq!(
        alice.describe(long.id).unwrap().job.state,
        JobState::Pending
    );
    let a_handle = alice.describe(on_a100.id).unwrap().job.backend_id.unwrap();
    sigkill(d);
    std::thread::sleep(Duration::from_secs(5)); // `short` ends while the daemon is down
    let d = start_tesserad(dir.path(), config, port);
    let alice = Client::new(&d.url, Some(ALICE.into()));
    wait_until("short recorded", Duration::from_secs(30), || {
        alice.describe(short.id).unwrap().job.state == JobState::Completed
    });
    let a = alice.describe(on_a100.id).unwrap().job;
    assert_eq!(
        (a.state, a.attempt, a.backend_id.as_deref()),
        (JobState::Running, 1, Some(a_handle.as_str()))
    );
    wait_until(
        "long starts on the freed v100s",
        Duration::from_secs(30),
        || {
            alice
                .describe(long.id)
                .unwrap()
                .job
                .backend_state
                .as_deref()
                == Some("RUNNING")
        },
    );
    let prefix = format!("tessera-{}-", instance(dir.path()));
    let mut names: Vec<String> = slurm_jobs(&conf, &prefix)
        .into_iter()
        .map(|(_, _, n)| n)
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3, "one Slurm job per tessera job: {names:?}");
    assert_eq!(slurm_jobs(&conf, &prefix).len(), 3);
    assert_eq!(alice.list().unwrap().len(), 3);
    alice.cancel(long.id).unwrap();
    alice.cancel(on_a100.id).unwrap();
}

#[test]
fn slurm_runs_a_multi_node_placement_as_a_heterogeneous_job() {
    let Some(conf) = slurm_conf() else { return };
    let _guard = lock();
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), slurm_backend(dir.path(), &conf));
    let backend = tessera_daemon::build_backend(&c.backend).unwrap();
    let d = tessera_daemon::spawn(c, backend, Arc::new(SystemClock::new())).unwrap();
    let alice = client(&d, ALICE);
    let wide = alice
        .submit(&format!("{}gpuType: a100\n", job("wide", 10, "sleep 60")))
        .unwrap();
    wait_until("wide runs", Duration::from_secs(30), || {
        alice
            .describe(wide.id)
            .unwrap()
            .job
            .backend_state
            .as_deref()
            == Some("RUNNING")
    });
    let w = alice.describe(wide.id).unwrap().job;
    let shares: Vec<_> = w
        .allocation
        .iter()
        .map(|s| (s.node.as_str(), s.gpus))
        .collect();
    assert_eq!(shares, vec![("n1", 8), ("n2", 2)]);
    let id = w.backend_id.clone().unwrap();
    let first = scontrol_job(&conf, &id);
    assert!(
        first.contains("HetJobOffset=0") && first.contains("GRES=gpu:a100:8(IDX:0-7)"),
        "{first}"
    );
    let second = scontrol_job(&conf, &(id.parse::<u64>().unwrap() + 1).to_string());
    assert!(
        second.contains("HetJobOffset=1")
            && second.contains("Nodes=n2 ")
            && second.contains("GRES=gpu:a100:2("),
        "{second}"
    );
    alice.cancel(wide.id).unwrap();
    wait_until("both components cancelled", Duration::from_secs(30), || {
        scontrol_job(&conf, &id).contains("JobState=CANCELLED")
    });
}

/// Puts a Slurm node back in service when dropped, even if the test fails, and waits until it
/// runs jobs again (the killed job's processes outlive the fake node's "failure", and launches
/// there fail until they are gone), so that later tests find a healthy cluster.
struct Resume<'a> {
    conf: &'a std::path::Path,
    node: String,
}

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args(["update", &format!("nodename={}", self.node), "state=resume"])
            .env("SLURM_CONF", self.conf)
            .output();
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            let probe = Command::new("sbatch")
                .args([
                    "--parsable",
                    &format!("--nodelist={}", self.node),
                    "--job-name=tessera-probe",
                    "--output=/dev/null",
                    "--wrap=true",
                ])
                .env("SLURM_CONF", self.conf)
                .output();
            let Ok(probe) = probe else { return };
            let id = String::from_utf8_lossy(&probe.stdout).trim().to_string();
            let mut state = String::new();
            for _ in 0..100 {
                state = scontrol_job(self.conf, &id);
                if state.contains("JobState=COMPLETED") || state.contains("JobState=FAILED") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if state.contains("JobState=COMPLETED") {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Issue 9: `scontrol update nodename=… state=down` kills the node's jobs (NODE_FAIL); the
/// daemon requeues the job once and the policy restarts it on a node that is up.
#[test]
fn slurm_node_set_down_has_its_job_requeued_once_and_restarted_elsewhere() {
    let Some(conf) = slurm_conf() else { return };
    let _guard = lock();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), slurm_backend(dir.path(), &conf));
    c.poll_interval_ms = 200;
    let backend = tessera_daemon::build_backend(&c.backend).unwrap();
    let d = tessera_daemon::spawn(c, backend, Arc::new(SystemClock::new())).unwrap();
    let alice = client(&d, ALICE);
    let j = alice
        .submit(&format!("{}gpuType: a100\n", job("victim", 8, "sleep 15")))
        .unwrap();
    let running = |id| alice.describe(id).unwrap().job.backend_state.as_deref() == Some("RUNNING");
    wait_until("running in Slurm", Duration::from_secs(30), || {
        running(j.id)
    });
    let first = alice.describe(j.id).unwrap().job;
    let node = first.allocation[0].node.clone();
    let first_slurm = first.backend_id.clone().unwrap();
    let _resume = Resume {
        conf: &conf,
        node: node.clone(),
    };
    // The test cluster runs with ReturnToService=2, which puts a node set DOWN back in
    // service within milliseconds (slurmd still answers). Drain it first so that it stays out
    // of service, then set it down: Slurm kills the job (NODE_FAIL).
    for state in ["drain", "down"] {
        let o = Command::new("scontrol")
            .args([
                "update",
                &format!("nodename={node}"),
                &format!("state={state}"),
                "reason=tessera-test",
            ])
            .env("SLURM_CONF", &conf)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    wait_until(
        "restarted on the other node",
        Duration::from_secs(60),
        || {
            let v = alice.describe(j.id).unwrap().job;
            v.attempt == 2 && running(j.id)
        },
    );
    let v = alice.describe(j.id).unwrap();
    assert_ne!(
        v.job.allocation[0].node, node,
        "not on the node that went down"
    );
    assert_eq!(v.job.preemptions, 1, "requeued once");
    let history: Vec<_> = v.transitions.iter().map(|t| t.detail.as_str()).collect();
    assert!(
        history
            .iter()
            .any(|d| d.contains("NODE_FAIL") || d.contains("went down")),
        "{history:?}"
    );
    // Slurm ran attempt 1 on the dead node and attempt 2 elsewhere; nothing else.
    let ours = slurm_jobs(
        &conf,
        &format!("tessera-{}-{}-", instance(dir.path()), j.id),
    );
    assert_eq!(ours.len(), 2, "{ours:?}");
    assert!(ours.iter().any(|(id, _, _)| *id == first_slurm));
    alice.cancel(j.id).unwrap();
}

/// A job spec whose command is a Python script run with the job SDK on its path (the
/// repository's `sdk/python/src`).
fn sdk_job(name: &str, gpus: u32, python: &str) -> String {
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/../../sdk/python/src");
    let script: String = python.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "name: {name}\ngpus: {gpus}\nenv: {{PYTHONPATH: {sdk:?}}}\nscript: |\n  exec python3 - <<'PY'\n{script}  PY\n"
    )
}

/// A job that reports progress through the SDK every second for `secs` seconds.
fn reporting_job(name: &str, gpus: u32, secs: u32) -> String {
    sdk_job(
        name,
        gpus,
        &format!(
            "import time\n\
             import tessera_sdk as t\n\
             ctx = t.JobContext.from_env()\n\
             for i in range({secs}):\n\
             \x20   t.report_progress(ctx, iterations=10 * (i + 1), iterations_per_second=10.0)\n\
             \x20   time.sleep(1)\n"
        ),
    )
}

/// Cancels, when dropped (a failed test too), the Slurm jobs of one daemon instance: the ones
/// its test created, named `tessera-<instance>-…`, and no other.
struct CancelOnDrop {
    conf: PathBuf,
    prefix: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let ids: Vec<String> = slurm_jobs(&self.conf, &self.prefix)
            .into_iter()
            .filter(|(_, state, _)| matches!(state.as_str(), "PENDING" | "RUNNING" | "CONFIGURING"))
            .map(|(id, _, _)| id)
            .collect();
        if !ids.is_empty() {
            let _ = Command::new("scancel")
                .args(&ids)
                .env("SLURM_CONF", &self.conf)
                .output();
        }
    }
}

/// Issue 38 item 4: LAS with rounds, on a cluster that is one Slurm node of 4 V100s
/// (partition `v100`), after jobs that reported progress through the SDK and after a daemon
/// restart: a job that arrives while every GPU is taken gets one at the next round, and the
/// job preempted for it is the one with the most attained service, as in the simulator. (A
/// restart used to bring running jobs back with the service their stored rows held, written
/// at their last transition or progress report: LAS then took the younger job, which had
/// reported progress, for the older and preempted it instead.)
#[test]
fn slurm_las_preempts_at_the_next_round_after_progress_reports_and_a_restart() {
    let Some(conf) = slurm_conf() else { return };
    let _guard = lock();
    let dir = tempfile::tempdir().unwrap();
    let mut backend = slurm_backend(dir.path(), &conf);
    if let BackendConfig::Slurm(s) = &mut backend {
        s.partition = Some("v100".into());
    }
    let mut config = config(dir.path(), backend);
    config.policy = "las".into();
    const ROUND: f64 = 5.0;
    config.round_seconds = Some(ROUND);
    let port = free_port();
    let d = start_tesserad(dir.path(), config.clone(), port);
    let _cancel = CancelOnDrop {
        conf: conf.clone(),
        prefix: format!("tessera-{}-", instance(dir.path())),
    };
    let alice = Client::new(&d.url, Some(ALICE.into()));
    let nodes = alice.nodes().unwrap().nodes;
    assert_eq!(nodes.len(), 1, "the v100 partition: {nodes:?}");
    assert_eq!((nodes[0].name.as_str(), nodes[0].gpus), ("n3", 4));
    let state = |c: &Client, id: i64| c.describe(id).unwrap().job;
    let running = |c: &Client, id: i64| state(c, id).backend_state.as_deref() == Some("RUNNING");

    // Earlier jobs: one that reports progress and completes.
    let early = alice.submit(&reporting_job("early", 2, 3)).unwrap();
    wait_until("early completes", Duration::from_secs(60), || {
        state(&alice, early.id).state == JobState::Completed
    });
    let e = state(&alice, early.id);
    assert!(
        e.progress.as_ref().is_some_and(|p| p.iterations >= 10),
        "early reported progress: {e:?}"
    );
    // x (2 GPUs) runs from the start; y (2 GPUs, reporting progress) 8 s later.
    let x = alice.submit(&job("x", 2, "sleep 120")).unwrap();
    wait_until("x runs", Duration::from_secs(30), || running(&alice, x.id));
    std::thread::sleep(Duration::from_secs(8));
    let y = alice.submit(&reporting_job("y", 2, 120)).unwrap();
    wait_until("y runs and reports", Duration::from_secs(30), || {
        running(&alice, y.id) && state(&alice, y.id).progress.is_some()
    });
    std::thread::sleep(Duration::from_secs(7)); // a round or two with y reporting

    sigkill(d);
    let d = start_tesserad(dir.path(), config, port);
    let alice = Client::new(&d.url, Some(ALICE.into()));
    wait_until("x and y adopted", Duration::from_secs(30), || {
        running(&alice, x.id) && running(&alice, y.id)
    });
    let b = alice.submit(&job("b", 1, "sleep 5")).unwrap();
    wait_until("b starts", Duration::from_secs(30), || {
        state(&alice, b.id).state != JobState::Pending
    });
    let detail = alice.describe(b.id).unwrap();
    let started = detail
        .transitions
        .iter()
        .find(|t| t.to == JobState::Starting)
        .map(|t| t.at)
        .unwrap();
    assert!(
        started - detail.job.submitted_at <= ROUND + 1.0,
        "b started {:.1} s after its submission: at the next round",
        started - detail.job.submitted_at
    );
    let (xv, yv) = (state(&alice, x.id), state(&alice, y.id));
    assert_eq!(
        (xv.preemptions, yv.preemptions),
        (1, 0),
        "LAS preempts x, which has attained the most service (x {:?}, y {:?})",
        xv.state,
        yv.state
    );
    assert!(alice
        .metrics()
        .unwrap()
        .contains("tessera_preemptions_total{reason=\"policy\"} 1"));
    wait_until("b runs on Slurm", Duration::from_secs(30), || {
        running(&alice, b.id)
    });
    for id in [x.id, y.id, b.id] {
        let _ = alice.cancel(id);
    }
    sigkill(d);
}

/// Issue 38 item 4, on a cluster of several GPU models (the whole `gpu` partition: a100, v100
/// and MIG nodes): LAS with rounds, after a job that reported progress through the SDK, and
/// across a daemon restart. `a` holds all four V100s; `b`, asking for one V100, gets one at the
/// next round and `a` is preempted, as the simulator decides. (LAS budgeted against the whole
/// cluster's GPUs: with the A100s idle, `a` and `b` "fitted" together, so `a` kept every V100
/// and `b` stayed pending with reason Resources and no preemption.)
#[test]
fn slurm_las_preempts_for_a_job_restricted_to_a_busy_gpu_model() {
    let Some(conf) = slurm_conf() else { return };
    let _guard = lock();
    let dir = tempfile::tempdir().unwrap();
    let backend = slurm_backend(dir.path(), &conf);
    let mut config = config(dir.path(), backend);
    config.policy = "las".into();
    const ROUND: f64 = 5.0;
    config.round_seconds = Some(ROUND);
    let port = free_port();
    let d = start_tesserad(dir.path(), config.clone(), port);
    let _cancel = CancelOnDrop {
        conf: conf.clone(),
        prefix: format!("tessera-{}-", instance(dir.path())),
    };
    let alice = Client::new(&d.url, Some(ALICE.into()));
    let nodes = alice.nodes().unwrap().nodes;
    assert!(nodes.len() >= 3, "several GPU models: {nodes:?}");
    let state = |c: &Client, id: i64| c.describe(id).unwrap().job;
    let running = |c: &Client, id: i64| state(c, id).backend_state.as_deref() == Some("RUNNING");
    let on_v100 = |spec: String| format!("gpuType: v100\n{spec}");

    let early = alice
        .submit(&on_v100(reporting_job("early", 2, 3)))
        .unwrap();
    wait_until("early completes", Duration::from_secs(60), || {
        state(&alice, early.id).state == JobState::Completed
    });
    assert!(state(&alice, early.id).progress.is_some(), "early reported");
    let a = alice.submit(&on_v100(job("a", 4, "sleep 120"))).unwrap();
    wait_until("a runs", Duration::from_secs(30), || running(&alice, a.id));
    std::thread::sleep(Duration::from_secs(3));

    sigkill(d);
    let d = start_tesserad(dir.path(), config, port);
    let alice = Client::new(&d.url, Some(ALICE.into()));
    wait_until("a adopted", Duration::from_secs(30), || {
        running(&alice, a.id)
    });
    let b = alice.submit(&on_v100(job("b", 1, "sleep 5"))).unwrap();
    wait_until("b starts", Duration::from_secs(30), || {
        state(&alice, b.id).state != JobState::Pending
    });
    let detail = alice.describe(b.id).unwrap();
    let started = detail
        .transitions
        .iter()
        .find(|t| t.to == JobState::Starting)
        .map(|t| t.at)
        .unwrap();
    assert!(
        started - detail.job.submitted_at <= ROUND + 1.0,
        "b started {:.1} s after its submission: at the next round",
        started - detail.job.submitted_at
    );
    assert_eq!(state(&alice, a.id).preemptions, 1, "a gives b a V100");
    assert!(alice
        .metrics()
        .unwrap()
        .contains("tessera_preemptions_total{reason=\"policy\"} 1"));
    wait_until("b runs on Slurm", Duration::from_secs(30), || {
        running(&alice, b.id)
    });
    for id in [a.id, b.id] {
        let _ = alice.cancel(id);
    }
    sigkill(d);
}

/// Issue 42 item 1 against a real Slurm: `sbatch` racing `scancel`. Jobs are cancelled 0–2.5
/// s after their `201` while launches queue for the backend; no payload may start after its
/// cancel was acknowledged, and no two payloads may hold one GPU of a node at once.
#[test]
fn slurm_no_run_starts_after_its_cancel_is_acknowledged() {
    let Some(conf) = slurm_conf() else { return };
    let _guard = lock();
    let dir = tempfile::tempdir().unwrap();
    // Slurm runs the payloads as the submitting user on this machine: the probe is shared.
    let probe = crate::cancel::probe_dir(dir.path());
    let mut c = config(dir.path(), slurm_backend(dir.path(), &conf));
    c.poll_interval_ms = 200;
    c.limits.max_active_jobs_per_tenant = 100_000;
    c.limits.max_active_jobs = 100_000;
    let backend = tessera_daemon::build_backend(&c.backend).unwrap();
    let d = tessera_daemon::spawn(c, backend, Arc::new(SystemClock::new())).unwrap();
    // Slurm takes a second or so to start a job: cancels come up to 2.5 s after the `201`,
    // so that some land before `sbatch`, some while Slurm starts the job, some while it runs.
    let (acks, submitted) =
        crate::cancel::submit_and_cancel(&d.url(), &probe, 6, Duration::from_secs(10), 1.0, 2500);
    assert!(
        acks.len() > 20,
        "only {} of {submitted} cancels acknowledged",
        acks.len()
    );
    let alice = client(&d, ALICE);
    wait_until("every job finished", Duration::from_secs(60), || {
        alice.list().unwrap().iter().all(|j| j.state.is_terminal())
    });
    // Slurm may still be tearing cancelled jobs down: let what would start, start.
    std::thread::sleep(Duration::from_secs(3));
    drop(d);
    let late = crate::cancel::started_after_ack(&probe, &acks);
    let overlaps = crate::cancel::overlaps(&probe);
    eprintln!(
        "slurm: {submitted} submitted, {} cancels acknowledged, {} payloads started, {} after \
         their ack, {} overlaps",
        acks.len(),
        crate::cancel::starts(&probe).len(),
        late.len(),
        overlaps.len()
    );
    assert!(
        late.is_empty(),
        "started after their cancel was acknowledged: {late:?}"
    );
    assert!(overlaps.is_empty(), "two runs on one GPU: {overlaps:?}");
    assert!(
        !crate::cancel::starts(&probe).is_empty(),
        "no payload ever started: the race was not exercised"
    );
}
