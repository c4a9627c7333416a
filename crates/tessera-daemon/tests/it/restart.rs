//! SIGKILL the daemon (the `tesserad` binary, as a child process) mid-run and restart it:
//! nothing is lost, nothing runs twice.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tessera_daemon::types::JobState;
use tessera_daemon::{Client, DaemonConfig};

use crate::common::*;

pub struct Daemon {
    child: Child,
    pub url: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `tesserad` on a free port with this config; waits until it answers.
pub fn start_tesserad(dir: &Path, mut config: DaemonConfig, port: u16) -> Daemon {
    config.listen = format!("127.0.0.1:{port}").parse().unwrap();
    let path = dir.join("tesserad.yaml");
    std::fs::write(&path, serde_norway::to_string(&config).unwrap()).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("tesserad.log"))
        .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tesserad"))
        .arg("--config")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let c = Client::new(&url, Some(ALICE.into()));
    let mut d = Daemon { child, url };
    wait_until("tesserad answers", Duration::from_secs(30), || {
        if let Ok(Some(status)) = d.child.try_wait() {
            let log = std::fs::read_to_string(dir.join("tesserad.log")).unwrap_or_default();
            panic!("tesserad exited with {status}: {log}");
        }
        c.list().is_ok()
    });
    d
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn sigkill(mut d: Daemon) {
    d.child.kill().unwrap(); // SIGKILL
    d.child.wait().unwrap();
}

/// SIGTERM, then waits (SIGKILL after `limit`); returns how long the daemon took to exit, or
/// `None` when it had to be killed.
pub fn sigterm(mut d: Daemon, limit: Duration) -> Option<Duration> {
    let start = std::time::Instant::now();
    // SAFETY: kill(2) on our own child's pid; no memory effects.
    unsafe {
        libc::kill(d.child.id() as i32, libc::SIGTERM);
    }
    while start.elapsed() < limit {
        if let Ok(Some(_)) = d.child.try_wait() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn sigkill_and_restart_with_local_backend_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), local_backend(dir.path(), 4));
    let port = free_port();
    let d = start_tesserad(dir.path(), config.clone(), port);
    let alice = Client::new(&d.url, Some(ALICE.into()));
    let short = alice.submit(&job("short", 2, "sleep 2")).unwrap();
    let long = alice.submit(&job("long", 2, "sleep 60")).unwrap();
    let waiting = alice.submit(&job("waiting", 2, "sleep 60")).unwrap();
    wait_until("two running", Duration::from_secs(20), || {
        alice
            .list()
            .unwrap()
            .iter()
            .filter(|j| j.state == JobState::Running)
            .count()
            == 2
    });
    assert_eq!(
        alice.describe(waiting.id).unwrap().job.state,
        JobState::Pending
    );
    let long_handle = alice.describe(long.id).unwrap().job.backend_id.unwrap();
    sigkill(d);
    // `short` finishes while the daemon is down.
    std::thread::sleep(Duration::from_secs(3));
    let d = start_tesserad(dir.path(), config.clone(), port);
    let alice = Client::new(&d.url, Some(ALICE.into()));
    wait_until(
        "short recorded as completed",
        Duration::from_secs(20),
        || alice.describe(short.id).unwrap().job.state == JobState::Completed,
    );
    let l = alice.describe(long.id).unwrap().job;
    assert_eq!(
        (l.state, l.attempt, l.backend_id.as_deref()),
        (JobState::Running, 1, Some(long_handle.as_str()))
    );
    wait_until(
        "waiting starts on short's GPUs",
        Duration::from_secs(20),
        || alice.describe(waiting.id).unwrap().job.state == JobState::Running,
    );
    let jobs = alice.list().unwrap();
    assert_eq!(
        jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![short.id, long.id, waiting.id]
    );
    // Exactly one run directory (one process) per job: nothing started twice.
    let mut runs: Vec<String> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .flatten()
        .map(|e| {
            e.file_name()
                .to_string_lossy()
                .rsplit('-')
                .take(2)
                .collect::<Vec<_>>()
                .join("<")
        })
        .collect();
    runs.sort();
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert!(
        runs.iter().all(|r| r.starts_with("1<")),
        "only first attempts: {runs:?}"
    );
    alice.cancel(long.id).unwrap();
    alice.cancel(waiting.id).unwrap();
}

/// A crash between "submitted to the backend" and "recorded as running" (the job is
/// `starting` in the store): the restarted engine finds the run by name and adopts it; a
/// `starting` job whose run never began is requeued. Either way, one run per attempt.
#[test]
fn crash_between_submit_and_record_adopts_or_requeues() {
    use std::sync::Arc;
    use tessera_daemon::store::{RunState, Store, WriteBatch};
    use tessera_daemon::{Engine, SystemClock};

    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), local_backend(dir.path(), 4));
    let open = || {
        Engine::open(
            &c,
            tessera_daemon::build_backend(&c.backend).unwrap(),
            Arc::new(SystemClock::new()),
        )
        .unwrap()
    };
    let mut e = open();
    let r = e.submit_many(
        ALICE,
        &[job("adopt", 1, "sleep 30"), job("requeue", 1, "sleep 30")],
    );
    let (adopt, requeue) = (r[0].as_ref().unwrap().id, r[1].as_ref().unwrap().id);
    e.schedule();
    drop(e);
    // Rewrite the store as a crash would have left it.
    let db = dir.path().join("t.db");
    let mut store = Store::open(&db, Default::default()).unwrap();
    let instance = store.instance().unwrap();
    let mut batch = WriteBatch::default();
    for mut row in store.load_jobs().unwrap() {
        assert_eq!(row.state, JobState::Running);
        row.state = JobState::Starting;
        row.handle = None;
        batch.jobs.push(row);
    }
    for mut run in store
        .runs_of(adopt)
        .unwrap()
        .into_iter()
        .chain(store.runs_of(requeue).unwrap())
    {
        run.state = RunState::Gone;
        batch.runs.push(run);
    }
    store.commit(&batch).unwrap();
    drop(store);
    // The `requeue` run never started: kill it and remove its directory.
    let run_dir = dir
        .path()
        .join("runs")
        .join(format!("tessera-{instance}-{requeue}-1"));
    let adopt_dir = dir
        .path()
        .join("runs")
        .join(format!("tessera-{instance}-{adopt}-1"));
    wait_until("both runs wrote their pid", Duration::from_secs(10), || {
        run_dir.join("pid").exists() && adopt_dir.join("pid").exists()
    });
    let pid: i32 = std::fs::read_to_string(run_dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill_group(pid);
    std::thread::sleep(Duration::from_millis(200));
    std::fs::remove_dir_all(&run_dir).unwrap();

    let mut e = open();
    e.schedule();
    drop(e);
    let store = Store::open(&db, Default::default()).unwrap();
    let jobs = store.load_jobs().unwrap();
    let a = jobs.iter().find(|j| j.id == adopt).unwrap();
    assert_eq!(
        (a.state, a.attempt),
        (JobState::Running, 1),
        "adopted, not restarted"
    );
    assert_eq!(
        a.handle.as_deref(),
        Some(format!("tessera-{instance}-{adopt}-1").as_str())
    );
    let q = jobs.iter().find(|j| j.id == requeue).unwrap();
    assert_eq!(
        (q.state, q.attempt),
        (JobState::Running, 2),
        "requeued, then started again"
    );
    let history: Vec<_> = store
        .transitions(requeue)
        .unwrap()
        .into_iter()
        .map(|t| t.detail)
        .collect();
    assert!(
        history
            .iter()
            .any(|d| d.contains("interrupted by a daemon restart")),
        "{history:?}"
    );
    let mut runs: Vec<String> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    runs.sort();
    assert_eq!(
        runs,
        vec![
            format!("tessera-{instance}-{adopt}-1"),
            format!("tessera-{instance}-{requeue}-2")
        ]
    );
    for r in runs {
        let pid_file = dir.path().join("runs").join(&r).join("pid");
        wait_until("pid written", Duration::from_secs(10), || pid_file.exists());
        let pid: i32 = std::fs::read_to_string(pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        kill_group(pid);
    }
}

/// SIGKILLs the process group a local run leads, if it still leads one. Through libc, not the
/// `kill` binary: an earlier version of this test that ran `kill -9 -PGID` took down every
/// process on the machine (cause not pinned down), so signals are now guarded and direct.
fn kill_group(pid: i32) {
    assert!(pid > 1, "refusing to signal group {pid}");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let pgrp = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().nth(2)?.parse::<i32>().ok());
    if pgrp != Some(pid) {
        return;
    }
    // SAFETY: kill(2) has no memory effects.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// Starts a second daemon on `store` and returns its stderr once it has exited, which it
/// must do (refused) within 15 s.
pub fn second_daemon_refused(
    dir: &Path,
    mut config: DaemonConfig,
    store: &Path,
    name: &str,
) -> String {
    config.listen = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    config.store = store.to_path_buf();
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, serde_norway::to_string(&config).unwrap()).unwrap();
    let err_path = dir.join(format!("{name}.err"));
    let mut second = Command::new(env!("CARGO_BIN_EXE_tesserad"))
        .arg("--config")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = second.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = second.kill(); // our own child
            let _ = second.wait();
            panic!("the second daemon ({name}) started on a store the first one holds");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    assert!(!status.success(), "{name}: {stderr}");
    stderr
}

#[test]
fn a_second_daemon_on_the_same_store_refuses_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), local_backend(dir.path(), 4));
    let first = start_tesserad(dir.path(), config.clone(), free_port());
    let alice = Client::new(&first.url, Some(ALICE.into()));
    let ok = alice.submit(&job("only", 1, "sleep 30")).unwrap();
    // The same path, a symlink and a hard link to the store, and the same path once the pid
    // note beside it is deleted: one inode, one owner.
    let symlink = dir.path().join("via-symlink.db");
    std::os::unix::fs::symlink(&config.store, &symlink).unwrap();
    let hard = dir.path().join("via-hardlink.db");
    std::fs::hard_link(&config.store, &hard).unwrap();
    let same = config.store.clone();
    for (name, store) in [("same", &same), ("symlink", &symlink), ("hardlink", &hard)] {
        let stderr = second_daemon_refused(dir.path(), config.clone(), store, name);
        assert!(
            stderr.contains(&format!("pid {}", first.child.id())) && stderr.contains("in use"),
            "{name}: {stderr}"
        );
    }
    std::fs::remove_file(tessera_daemon::store::lock_path(&config.store)).unwrap();
    let stderr = second_daemon_refused(dir.path(), config.clone(), &same, "no-note");
    assert!(stderr.contains("in use"), "no-note: {stderr}");
    // The first daemon and its job are untouched.
    let jobs = alice.list().unwrap();
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ok.id]);
    alice.cancel(ok.id).unwrap();
}
