//! Daemon failure handling with real processes (issue 9, "Failure injection"): a node marked
//! down by an administrator has its jobs requeued and restarted elsewhere, once; and a bounded
//! chaos run that SIGKILLs (and now and then SIGTERMs) its own `tesserad` child at random
//! moments and fails a node while submitting continuously and cancelling a third of the jobs
//! 0–400 ms after their `201`, racing their launches. Afterwards every acknowledged job not
//! cancelled has run to completion exactly once or is still queued, no payload of a job
//! started after its cancel was acknowledged, and no two payloads ever held one GPU at once;
//! after every restart a second daemon started on the same store through a symlink must be
//! refused.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tessera_daemon::backend::NodeHealth;
use tessera_daemon::config::{LocalConfig, LocalNodeConfig};
use tessera_daemon::types::JobState;
use tessera_daemon::{BackendConfig, Client, SystemClock};
use tessera_model::{Bytes, MilliCpu};

use crate::cancel::{now_ns, overlaps, probe_dir, probe_job, started_after_ack, Lcg};
use crate::common::*;
use crate::restart::{free_port, second_daemon_refused, sigkill, sigterm, start_tesserad};

fn two_nodes(dir: &Path, gpus: u32) -> BackendConfig {
    let node = |name: &str| LocalNodeConfig {
        name: name.into(),
        gpu: "A100-80GB".into(),
        gpus,
        cpus: MilliCpu::from_cores(4),
        memory: Bytes::from_gib(16),
    };
    BackendConfig::Local(LocalConfig {
        work_dir: dir.join("runs"),
        nodes: vec![node("a"), node("b")],
        run_as: Default::default(),
        tool_path: None,
    })
}

/// (job id, attempt, exit status if the run ended by itself) of every local run directory.
fn runs(dir: &Path) -> Vec<(i64, u32, Option<String>)> {
    let Ok(entries) = std::fs::read_dir(dir.join("runs")) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let mut parts = name.rsplit('-');
            let attempt = parts.next()?.parse().ok()?;
            let id = parts.next()?.parse().ok()?;
            let exit = std::fs::read_to_string(e.path().join("exit"))
                .ok()
                .map(|s| s.trim().to_string());
            Some((id, attempt, exit))
        })
        .collect();
    out.sort();
    out
}

/// True when the process recorded in a run directory is still alive.
fn run_alive(run_dir: &Path) -> bool {
    let Some(pid) = std::fs::read_to_string(run_dir.join("pid"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    else {
        return false;
    };
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let needle = run_dir.as_os_str().as_encoded_bytes();
        !c.is_empty() && c.windows(needle.len()).any(|w| w == needle)
    })
}

#[test]
fn a_node_marked_down_by_an_admin_has_its_job_restarted_elsewhere_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), two_nodes(dir.path(), 1));
    let backend = tessera_daemon::build_backend(&c.backend).unwrap();
    let d = tessera_daemon::spawn(c, backend, Arc::new(SystemClock::new())).unwrap();
    let alice = client(&d, ALICE);
    let ops = client(&d, ADMIN);
    let j = alice.submit(&job("long", 1, "sleep 30")).unwrap();
    wait_until("running", Duration::from_secs(20), || {
        alice.describe(j.id).unwrap().job.state == JobState::Running
    });
    let first = alice.describe(j.id).unwrap().job;
    let node = first.allocation[0].node.clone();
    let err = alice.set_node_health(&node, NodeHealth::Down).unwrap_err();
    assert_eq!(err.status(), Some(403), "tenants cannot fail nodes");
    let nodes = ops.set_node_health(&node, NodeHealth::Down).unwrap();
    assert!(nodes
        .nodes
        .iter()
        .any(|n| n.name == node && n.health == NodeHealth::Down));
    wait_until(
        "restarted on the other node",
        Duration::from_secs(20),
        || {
            let v = alice.describe(j.id).unwrap().job;
            v.state == JobState::Running && v.attempt == 2
        },
    );
    let v = alice.describe(j.id).unwrap();
    assert_ne!(v.job.allocation[0].node, node, "not on the dead node");
    assert_eq!(v.job.preemptions, 1);
    assert!(
        v.transitions.iter().any(|t| t.detail.contains("went down")),
        "{:?}",
        v.transitions
    );
    // The store is locked while the daemon runs: find the first run's directory by name.
    let old = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(&format!("-{}-1", j.id)))
        })
        .unwrap();
    wait_until("the first run is gone", Duration::from_secs(10), || {
        !run_alive(&old)
    });
    assert_eq!(
        runs(dir.path()).iter().filter(|r| r.0 == j.id).count(),
        2,
        "exactly one restart"
    );
    ops.set_node_health(&node, NodeHealth::Up).unwrap();
    alice.cancel(j.id).unwrap();
}

#[test]
fn chaos_kills_and_a_node_failure_lose_nothing_and_run_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), two_nodes(dir.path(), 2));
    c.poll_interval_ms = 50;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut daemon = Some(start_tesserad(dir.path(), c.clone(), port));
    // Another path to the same store: a second daemon must be refused through it too.
    let symlink = dir.path().join("store-via-symlink.db");
    std::os::unix::fs::symlink(&c.store, &symlink).unwrap();
    let mut seconds_refused = 0;
    let probe = probe_dir(dir.path());
    let acked: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    // Jobs a cancel was sent for (answered or not), and the acknowledged cancels' times.
    let cancel_tried: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let cancel_acks: Arc<Mutex<BTreeMap<i64, u128>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let submitter = {
        let (acked, stop, url) = (acked.clone(), stop.clone(), url.clone());
        let (cancel_tried, cancel_acks) = (cancel_tried.clone(), cancel_acks.clone());
        let probe = probe.clone();
        std::thread::spawn(move || {
            let alice = Client::new(&url, Some(ALICE.into()));
            let mut rng = Lcg(0xca9ce1);
            let mut to_cancel: Vec<(i64, Instant)> = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                // Refused while the daemon is down: those are not acknowledged.
                if let Ok(j) = alice.submit(&probe_job(&format!("c{i}"), &probe, 0.3)) {
                    acked.lock().unwrap().insert(j.id);
                    if i % 3 == 0 {
                        let delay = Duration::from_millis(rng.below(400));
                        to_cancel.push((j.id, Instant::now() + delay));
                    }
                }
                let now = Instant::now();
                let (due, later): (Vec<_>, Vec<_>) =
                    to_cancel.into_iter().partition(|(_, at)| *at <= now);
                to_cancel = later;
                for (id, _) in due {
                    cancel_tried.lock().unwrap().insert(id);
                    // Unanswered (the daemon died) or 409 (it finished): not acknowledged.
                    if alice.cancel(id).is_ok() {
                        cancel_acks.lock().unwrap().insert(id, now_ns());
                    }
                }
                std::thread::sleep(Duration::from_millis(40));
            }
        })
    };
    let mut rng = Lcg(0x7e55e7a);
    let start = Instant::now();
    let mut kills = 0;
    let mut terms = 0;
    let mut failed_node = false;
    while start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(500 + rng.below(2000)));
        if !failed_node && start.elapsed() > Duration::from_secs(6) {
            // Fail node `a` while jobs run on it, and bring it back a little later.
            let ops = Client::new(&url, Some(ADMIN.into()));
            ops.set_node_health("a", NodeHealth::Down).unwrap();
            std::thread::sleep(Duration::from_millis(1500));
            ops.set_node_health("a", NodeHealth::Up).unwrap();
            failed_node = true;
            continue;
        }
        if let Some(d) = daemon.take() {
            if kills % 3 == 2 {
                // A clean stop too: it must not wait behind launches (issue 42: 73.5 s).
                let took = sigterm(d, Duration::from_secs(10));
                assert!(
                    took.is_some(),
                    "SIGTERM: the daemon did not exit within 10 s"
                );
                terms += 1;
            } else {
                sigkill(d);
            }
            kills += 1;
        }
        std::thread::sleep(Duration::from_millis(rng.below(500)));
        daemon = Some(start_tesserad(dir.path(), c.clone(), port));
        // While the restarted daemon serves (and the submitter writes), a second one on the
        // same store through the symlink exits refused, leaving the first untouched.
        let stderr = second_daemon_refused(
            dir.path(),
            c.clone(),
            &symlink,
            &format!("second-{seconds_refused}"),
        );
        assert!(stderr.contains("in use"), "{stderr}");
        seconds_refused += 1;
    }
    stop.store(true, Ordering::Relaxed);
    submitter.join().unwrap();
    assert!(
        kills >= 3 && terms >= 1 && failed_node,
        "{kills} stops, {terms} SIGTERMs"
    );
    assert_eq!(
        seconds_refused, kills,
        "a second daemon tried after every restart"
    );
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 50,
        "only {} submissions acknowledged",
        acked.len()
    );
    let alice = Client::new(&url, Some(ALICE.into()));
    // Let what was queued finish (bounded: the whole test stays under a minute).
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut states: BTreeMap<i64, JobState> = BTreeMap::new();
    while Instant::now() < deadline {
        states = alice
            .list()
            .unwrap()
            .into_iter()
            .map(|j| (j.id, j.state))
            .collect();
        if states.values().all(|s| s.is_terminal()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let cancel_tried = cancel_tried.lock().unwrap().clone();
    let cancel_acks = cancel_acks.lock().unwrap().clone();
    assert!(
        cancel_acks.len() > 10,
        "only {} cancels acknowledged",
        cancel_acks.len()
    );
    // Nothing acknowledged was lost, and nothing failed: kills and the node failure only
    // ever delay a job. A job is cancelled only if a cancel was sent for it, and is whenever
    // that cancel was acknowledged.
    for id in &acked {
        let s = states.get(id);
        if cancel_acks.contains_key(id) {
            assert_eq!(
                s,
                Some(&JobState::Cancelled),
                "job {id}'s cancel was acknowledged"
            );
            continue;
        }
        let cancelled = s == Some(&JobState::Cancelled) && cancel_tried.contains(id);
        assert!(
            cancelled
                || matches!(
                    s,
                    Some(
                        JobState::Completed
                            | JobState::Pending
                            | JobState::Starting
                            | JobState::Running
                    )
                ),
            "acknowledged job {id} is {s:?}"
        );
    }
    // Every acknowledged cancel was honoured, and no GPU was ever shared.
    let late = started_after_ack(&probe, &cancel_acks);
    assert!(
        late.is_empty(),
        "started after their cancel was acknowledged: {late:?}"
    );
    let overlaps = overlaps(&probe);
    assert!(overlaps.is_empty(), "two runs on one GPU: {overlaps:?}");
    // Exactly one run ended by itself with status 0 per completed job; none for the rest.
    let mut completed_runs: BTreeMap<i64, usize> = BTreeMap::new();
    for (id, _, exit) in runs(dir.path()) {
        if exit.as_deref() == Some("0") {
            *completed_runs.entry(id).or_default() += 1;
        }
    }
    for (id, state) in &states {
        let n = completed_runs.get(id).copied().unwrap_or(0);
        match state {
            JobState::Completed => assert_eq!(n, 1, "completed job {id} completed {n} runs"),
            JobState::Pending => assert_eq!(n, 0, "queued job {id} already completed a run"),
            // A cancel that raced the run's end may find it completed (not acknowledged).
            JobState::Cancelled => assert!(n <= 1, "cancelled job {id} completed {n} runs"),
            // The run may have ended since the daemon last polled it.
            _ => assert!(n <= 1, "job {id} ({state:?}) completed {n} runs"),
        }
    }
    let done = states
        .values()
        .filter(|s| **s == JobState::Completed)
        .count();
    assert!(done > 50, "only {done} completed");
    drop(daemon);
}
