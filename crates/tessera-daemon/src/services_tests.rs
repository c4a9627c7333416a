//! Services through the engine (store, local backend, `serve-exclusive`): tenant isolation,
//! durability, and a daemon restart that re-adopts a running instance without starting it
//! twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_model::{Bytes, MilliCpu};

use crate::clock::SystemClock;
use crate::config::{
    hash_token, BackendConfig, DaemonConfig, LocalConfig, LocalNodeConfig, TenantConfig,
};
use crate::engine::{Engine, Request, Response};
use crate::error::ApiError;
use crate::services::{ServiceState, ServiceView};

const ALICE: &str = "alice-secret-token";
const BOB: &str = "bob-secret-token";

fn config(dir: &std::path::Path) -> DaemonConfig {
    let text = format!(
        "store: {}\npolicy: serve-exclusive\nbackend: {{kind: local, workDir: {}}}\n",
        dir.join("t.db").display(),
        dir.display()
    );
    let mut c = DaemonConfig::from_yaml(&text).expect("config");
    c.tenants = ["alice", "bob"]
        .into_iter()
        .zip([ALICE, BOB])
        .map(|(name, token)| TenantConfig {
            name: name.into(),
            token_sha256: hash_token(token),
            admin: false,
        })
        .collect();
    c.backend = BackendConfig::Local(LocalConfig {
        work_dir: dir.join("runs"),
        nodes: vec![LocalNodeConfig {
            name: "box".into(),
            gpu: "A100-80GB".into(),
            gpus: 2,
            cpus: MilliCpu::from_cores(8),
            memory: Bytes::from_gib(64),
        }],
        run_as: Default::default(),
        tool_path: None,
    });
    c
}

fn open(c: &DaemonConfig) -> Engine {
    let backend = crate::build_backend(&c.backend).expect("backend");
    Engine::open(c, backend, Arc::new(SystemClock::new())).expect("engine")
}

fn service(e: &mut Engine, token: &str, req: Request) -> Result<ServiceView, ApiError> {
    match e.handle(Some(token), req)? {
        Response::Service(v) => Ok(*v),
        other => panic!("unexpected answer {other:?}"),
    }
}

fn list(e: &mut Engine, token: &str) -> Vec<i64> {
    match e.handle(Some(token), Request::ListServices) {
        Ok(Response::Services(l)) => l.services.iter().map(|s| s.id).collect(),
        other => panic!("unexpected answer {other:?}"),
    }
}

const SPEC: &str = "apiVersion: tessera/v1
kind: Workload
metadata:
  command: [sh, -c, 'echo $$ > pid.txt; exec sleep 300']
spec:
  services:
    - name: bert
      endSeconds: 3600
      sloMilliseconds: 50
      resources: {cpu: '1', memory: 4Gi, gpuMemory: 2Gi}
      arrivals: {poisson: {rate: 3}}
";

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// Schedules and polls until `done` holds (20 s at most).
fn until(e: &mut Engine, what: &str, mut done: impl FnMut(&mut Engine) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        e.schedule();
        e.poll();
        if done(e) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn a_service_survives_a_daemon_restart_without_a_second_instance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config(dir.path());
    let mut e = open(&c);
    let v = service(&mut e, ALICE, Request::SubmitService { body: SPEC.into() }).expect("accepted");
    assert_eq!(
        (v.id, v.tenant.as_str(), v.state),
        (1, "alice", ServiceState::Active)
    );
    // Tenants see their own services only; another's answers like a missing one.
    assert_eq!(list(&mut e, BOB), Vec::<i64>::new());
    let e404 = service(&mut e, BOB, Request::GetService { id: 1 }).expect_err("hidden");
    assert_eq!(e404.status, 404);
    let e404 = service(&mut e, BOB, Request::RetireService { id: 1 }).expect_err("hidden");
    assert_eq!(e404.status, 404);
    assert_eq!(list(&mut e, ALICE), vec![1]);

    // serve-exclusive gives the active service one instance on a whole GPU.
    until(&mut e, "the instance to run", |e| {
        e.core().instances().first().is_some_and(|i| i.3.is_some())
    });
    let first = e.core().instances();
    assert_eq!(first.len(), 1);
    let pid_file = dir
        .path()
        .join("runs")
        .join(first[0].3.clone().expect("handle"))
        .join("pid.txt");
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "no pid");
        std::thread::sleep(Duration::from_millis(25));
    };
    let view = service(&mut e, ALICE, Request::GetService { id: 1 }).expect("view");
    assert_eq!(view.instances.len(), 1);
    assert_eq!(view.instances[0].allocation[0].gpus, 1);

    // A restart re-adopts the running instance: same id, attempt and run, same process.
    drop(e);
    let mut e = open(&c);
    assert_eq!(e.core().instances(), first);
    for _ in 0..10 {
        e.schedule();
        e.poll();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        e.core().instances(),
        first,
        "no second instance, no restart"
    );
    assert!(alive(pid));
    // Its token (kept as a hash in the store) still lets it report its load.
    let script = std::fs::read_to_string(
        dir.path()
            .join("runs")
            .join(first[0].3.clone().expect("handle"))
            .join("job.sh"),
    )
    .expect("job script");
    let token = script
        .lines()
        .find_map(|l| l.strip_prefix("export TESSERA_TOKEN="))
        .expect("token in the job script")
        .trim_matches('\'')
        .to_string();
    let report = crate::services::LoadReport {
        queue_length: 0,
        requests_per_second: 3.0,
        ..Default::default()
    };
    let req = Request::InstanceLoad {
        service: 1,
        instance: first[0].1,
        report: report.into(),
    };
    let v = service(&mut e, &token, req).expect("load accepted after the restart");
    assert_eq!(
        v.instances[0].load.as_ref().map(|l| l.requests_per_second),
        Some(3.0)
    );
    let runs = std::fs::read_dir(dir.path().join("runs"))
        .expect("runs")
        .filter_map(|d| d.ok())
        .filter(|d| d.path().is_dir())
        .count();
    assert_eq!(
        runs, 1,
        "one run directory: the instance never started twice"
    );

    // Retire: the instance stops, the service says so, and stays so after a restart.
    let v = service(&mut e, ALICE, Request::RetireService { id: 1 }).expect("retired");
    assert_eq!(v.state, ServiceState::Retired);
    until(&mut e, "the instance to go", |_| !alive(pid));
    assert!(e.core().instances().is_empty());
    drop(e);
    let mut e = open(&c);
    for _ in 0..5 {
        e.schedule();
        e.poll();
    }
    assert!(e.core().instances().is_empty());
    let v = service(&mut e, ALICE, Request::GetService { id: 1 }).expect("view");
    assert_eq!(v.state, ServiceState::Retired);
    // Ids are not reused.
    let v = service(&mut e, ALICE, Request::SubmitService { body: SPEC.into() }).expect("accepted");
    assert_eq!(v.id, 2);
    until(&mut e, "the new instance", |e| {
        e.core().instances().first().is_some_and(|i| i.3.is_some())
    });
    assert_eq!(e.core().instances()[0].1, 2, "instance ids are not reused");
    service(&mut e, ALICE, Request::RetireService { id: 2 }).expect("retired");
    e.poll();
}

fn pid_of(dir: &std::path::Path, handle: &str) -> i32 {
    let pid_file = dir.join("runs").join(handle).join("pid.txt");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "no pid in {}",
            pid_file.display()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Rewrites the instance row as a crash between recording a start and recording the
/// backend's answer leaves it: `starting`, no run.
fn crash_while_starting(dir: &std::path::Path, attempt_bump: u32) {
    let conn = rusqlite::Connection::open(dir.join("t.db")).expect("store");
    conn.execute(
        "UPDATE instances SET state = 'starting', handle = NULL, attempt = attempt + ?1",
        [attempt_bump],
    )
    .expect("update");
}

#[test]
fn an_instance_caught_starting_by_a_crash_is_adopted_or_started_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config(dir.path());
    let mut e = open(&c);
    service(&mut e, ALICE, Request::SubmitService { body: SPEC.into() }).expect("accepted");
    until(&mut e, "the instance to run", |e| {
        e.core().instances().first().is_some_and(|i| i.3.is_some())
    });
    let first = e.core().instances();
    let handle = first[0].3.clone().expect("handle");
    let pid = pid_of(dir.path(), &handle);
    drop(e);

    // Its run exists: found by name and adopted, not started again.
    crash_while_starting(dir.path(), 0);
    let mut e = open(&c);
    assert_eq!(e.core().instances(), first);
    for _ in 0..5 {
        e.schedule();
        e.poll();
    }
    assert_eq!(e.core().instances(), first);
    assert!(alive(pid));
    drop(e);

    // Its run never started (attempt 2 was recorded, nothing ran): a new attempt, once.
    let _ = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(pid.to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(pid) {
        assert!(Instant::now() < deadline, "pid {pid} survived SIGKILL");
        std::thread::sleep(Duration::from_millis(25));
    }
    crash_while_starting(dir.path(), 1);
    let mut e = open(&c);
    until(&mut e, "the new attempt to run", |e| {
        e.core().instances().first().is_some_and(|i| i.3.is_some())
    });
    let now = e.core().instances();
    assert_eq!(now.len(), 1);
    assert_eq!((now[0].1, now[0].2), (1, 3), "same instance, next attempt");
    let new_pid = pid_of(dir.path(), now[0].3.as_deref().expect("handle"));
    for _ in 0..5 {
        e.schedule();
        e.poll();
    }
    assert_eq!(e.core().instances(), now, "started once");
    service(&mut e, ALICE, Request::RetireService { id: 1 }).expect("retired");
    until(&mut e, "the instance to go", |_| !alive(new_pid));
}
