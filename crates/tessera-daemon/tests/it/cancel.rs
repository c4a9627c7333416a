//! Issue 42 item 1: a cancel is a barrier. Clients submit jobs and cancel each one 0–400 ms
//! after its `201`, while launches queue up for the backend; every payload records when it
//! started and holds an exclusive `flock` on its GPU for its lifetime. Afterwards no payload
//! of a job may have started after its `200 cancelled`, and no two payloads may ever have held
//! one GPU at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tessera_daemon::config::{LocalConfig, LocalNodeConfig};
use tessera_daemon::{BackendConfig, Client, SystemClock};
use tessera_model::{Bytes, MilliCpu};

use crate::common::*;

/// Nanoseconds since the epoch (what `date +%s%N` prints in the payloads).
// The wall clock is the point: it is compared with what the payloads' `date` prints.
#[allow(clippy::disallowed_methods)]
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A one-GPU job whose payload records its start in `probe/starts` (time, job id) and holds
/// an exclusive lock on its GPU's file while it runs, and for 0.3 s after a SIGTERM; a lock
/// already held by another live payload is written to `probe/overlaps`.
pub fn probe_job(name: &str, probe: &Path, secs: f64) -> String {
    let script = [
        // The node: the local backend's TESSERA_NODES, Slurm's SLURMD_NODENAME.
        r#"node="${TESSERA_NODES:-$SLURMD_NODENAME}""#,
        r#"exec 9>>"$PROBE/gpu-$node-$CUDA_VISIBLE_DEVICES.lock""#,
        r#"flock -n 9 || echo "$TESSERA_JOB_ID $node $CUDA_VISIBLE_DEVICES" >> "$PROBE/overlaps""#,
        r#"echo "$(date +%s%N) $TESSERA_JOB_ID" >> "$PROBE/starts""#,
        // Stopped, it takes a moment to exit (as a job saving a checkpoint does), its GPU
        // still locked: a run placed there meanwhile would be refused by the backend.
        "trap 'sleep 0.3; exit 143' TERM",
        &format!("sleep {secs} & wait"),
    ]
    .join("\n");
    let indented: String = script.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "name: {name}\ngpus: 1\nenv:\n  PROBE: {:?}\nscript: |\n{indented}",
        probe.display().to_string()
    )
}

/// (start time ns, job id) of every payload started.
pub fn starts(probe: &Path) -> Vec<(u128, i64)> {
    std::fs::read_to_string(probe.join("starts"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

/// Lines of `probe/overlaps` (payloads that found their GPU held by another).
pub fn overlaps(probe: &Path) -> Vec<String> {
    std::fs::read_to_string(probe.join("overlaps"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Payloads started after their job's cancel was acknowledged: (job, ms after the ack).
pub fn started_after_ack(probe: &Path, acks: &BTreeMap<i64, u128>) -> Vec<(i64, f64)> {
    starts(probe)
        .into_iter()
        .filter_map(|(t, id)| {
            let ack = *acks.get(&id)?;
            (t > ack).then(|| (id, (t - ack) as f64 / 1e6))
        })
        .collect()
}

pub fn probe_dir(dir: &Path) -> PathBuf {
    let p = dir.join("probe");
    std::fs::create_dir_all(&p).unwrap();
    // Payloads may run as other users in some setups: the probe files are shared.
    let _ = std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o777));
    p
}

/// A tiny deterministic generator (the test must not depend on a random crate).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Submits and cancels from `clients` threads for `for_how_long`: each job is cancelled
/// 0 to `max_delay_ms` ms after its `201`. Returns the acknowledged cancels (job id -> ack time, ns) and
/// the number of submissions.
pub fn submit_and_cancel(
    url: &str,
    probe: &Path,
    clients: usize,
    for_how_long: Duration,
    payload_secs: f64,
    max_delay_ms: u64,
) -> (BTreeMap<i64, u128>, usize) {
    let acks: Arc<Mutex<BTreeMap<i64, u128>>> = Arc::default();
    let submitted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (acks, submitted) = (acks.clone(), submitted.clone());
            let (url, probe) = (url.to_string(), probe.to_path_buf());
            std::thread::spawn(move || {
                let token = if c % 2 == 0 { ALICE } else { BOB };
                let client = Client::new(&url, Some(token.into()));
                let mut rng = Lcg(0xc0ffee + c as u64);
                let end = Instant::now() + for_how_long;
                let mut i = 0;
                while Instant::now() < end {
                    i += 1;
                    let Ok(j) =
                        client.submit(&probe_job(&format!("k{c}-{i}"), &probe, payload_secs))
                    else {
                        continue;
                    };
                    submitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(rng.below(max_delay_ms)));
                    // A job that already finished answers 409: not an acknowledged cancel.
                    if client.cancel(j.id).is_ok() {
                        acks.lock().unwrap().insert(j.id, now_ns());
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let acks = acks.lock().unwrap().clone();
    (acks, submitted.load(std::sync::atomic::Ordering::Relaxed))
}

#[test]
fn no_run_starts_after_its_cancel_is_acknowledged_and_no_gpu_is_shared() {
    let dir = tempfile::tempdir().unwrap();
    let probe = probe_dir(dir.path());
    let backend = BackendConfig::Local(LocalConfig {
        work_dir: dir.path().join("runs"),
        nodes: vec![LocalNodeConfig {
            name: "box".into(),
            gpu: "A100-80GB".into(),
            gpus: 8,
            cpus: MilliCpu::from_cores(64),
            memory: Bytes::from_gib(512),
        }],
        run_as: Default::default(),
        tool_path: None,
    });
    let mut c = config(dir.path(), backend);
    c.poll_interval_ms = 50;
    c.limits.max_active_jobs_per_tenant = 100_000;
    c.limits.max_active_jobs = 100_000;
    let backend = tessera_daemon::build_backend(&c.backend).unwrap();
    let d = tessera_daemon::spawn(c, backend, Arc::new(SystemClock::new())).unwrap();
    let (acks, submitted) =
        submit_and_cancel(&d.url(), &probe, 12, Duration::from_secs(12), 1.0, 400);
    assert!(
        acks.len() > 100,
        "only {} of {submitted} cancels acknowledged",
        acks.len()
    );
    // Whatever was still to start would start within this (the old code: up to 17 s later).
    let alice = client(&d, ALICE);
    wait_until("every job finished", Duration::from_secs(30), || {
        alice.list().unwrap().iter().all(|j| j.state.is_terminal())
    });
    std::thread::sleep(Duration::from_secs(2));
    // No launch went onto a GPU a cancelled run still held (draining GPUs): the backend
    // refused nothing, so nothing was re-queued.
    let metrics = client(&d, ADMIN).metrics().unwrap();
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tessera_backend_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(u64::MAX);
    let t0 = Instant::now();
    d.shutdown().unwrap();
    let shutdown = t0.elapsed();
    let late = started_after_ack(&probe, &acks);
    let overlaps = overlaps(&probe);
    let started = starts(&probe).len();
    eprintln!(
        "{submitted} submitted, {} cancels acknowledged, {started} payloads started, {} after \
         their cancel's ack, {} GPU overlaps, {refused} launches refused by the backend, \
         shutdown {shutdown:?}",
        acks.len(),
        late.len(),
        overlaps.len()
    );
    assert!(
        late.is_empty(),
        "started after their cancel was acknowledged: {late:?}"
    );
    assert!(overlaps.is_empty(), "two runs on one GPU: {overlaps:?}");
    assert_eq!(refused, 0, "launches refused (re-queued) by the backend");
    assert!(
        shutdown < Duration::from_secs(10),
        "shutdown took {shutdown:?}"
    );
}

/// (ns since the epoch, job id (an instance's negative), attempt) of each submission a
/// [`Slow`] backend carried out.
type SubmitLog = Arc<Mutex<Vec<(u128, i64, u32)>>>;

/// A backend that runs nothing and takes `first_delay` over its first submission, holding
/// the backend thread so that the launches after it queue up (withdrawable); it logs every
/// submission it carries out.
struct Slow {
    inner: tessera_daemon::backend::NullBackend,
    first_delay: Option<Duration>,
    log: SubmitLog,
}

impl tessera_daemon::Backend for Slow {
    fn kind(&self) -> &'static str {
        "slow"
    }
    fn inventory(
        &mut self,
    ) -> Result<Vec<tessera_daemon::backend::InventoryNode>, tessera_daemon::BackendError> {
        self.inner.inventory()
    }
    fn submit(
        &mut self,
        l: &tessera_daemon::backend::Launch,
    ) -> Result<tessera_daemon::backend::Handle, tessera_daemon::BackendError> {
        if let Some(d) = self.first_delay.take() {
            std::thread::sleep(d);
        }
        self.log
            .lock()
            .unwrap()
            .push((now_ns(), l.job_id, l.attempt));
        self.inner.submit(l)
    }
    fn cancel(
        &mut self,
        h: &tessera_daemon::backend::Handle,
    ) -> Result<(), tessera_daemon::BackendError> {
        self.inner.cancel(h)
    }
    fn preempt(
        &mut self,
        h: &tessera_daemon::backend::Handle,
    ) -> Result<(), tessera_daemon::BackendError> {
        self.inner.preempt(h)
    }
    fn poll(
        &mut self,
        h: &[tessera_daemon::backend::Handle],
    ) -> Result<
        Vec<(
            tessera_daemon::backend::Handle,
            tessera_daemon::backend::RunStatus,
        )>,
        tessera_daemon::BackendError,
    > {
        self.inner.poll(h)
    }
    fn find(
        &mut self,
        name: &str,
    ) -> Result<Option<tessera_daemon::backend::Handle>, tessera_daemon::BackendError> {
        self.inner.find(name)
    }
}

/// A daemon over a [`Slow`] backend (`null_nodes`: 8 A100s on n1, 4 V100s on n2).
fn slow_daemon(
    dir: &Path,
    policy: &str,
    first_delay: Duration,
) -> (tessera_daemon::DaemonHandle, SubmitLog) {
    let mut c = config(dir, local_backend(dir, 1));
    c.policy = policy.into();
    c.poll_interval_ms = 50;
    let log = SubmitLog::default();
    let backend = Slow {
        inner: tessera_daemon::backend::NullBackend::new(null_nodes()),
        first_delay: Some(first_delay),
        log: log.clone(),
    };
    let d = tessera_daemon::spawn(c, Box::new(backend), Arc::new(SystemClock::new())).unwrap();
    (d, log)
}

/// Issue 42 item 1, preemption: a launch still queued for the backend when the policy
/// preempts its job is withdrawn; nothing of that attempt is submitted after the preemption
/// is visible, and the job that preempted it runs.
#[test]
fn a_queued_launch_is_withdrawn_when_its_job_is_preempted() {
    let dir = tempfile::tempdir().unwrap();
    let (d, log) = slow_daemon(dir.path(), "srtf", Duration::from_secs(3));
    let alice = client(&d, ALICE);
    // Holds the backend thread for 3 s.
    let blocker = alice
        .submit(&format!(
            "{}gpuType: v100\n",
            job("blocker", 1, "sleep 100")
        ))
        .unwrap();
    wait_until(
        "the blocker's launch taken",
        Duration::from_secs(10),
        || {
            alice.describe(blocker.id).unwrap().job.state
                == tessera_daemon::types::JobState::Starting
        },
    );
    std::thread::sleep(Duration::from_millis(300));
    let long = alice
        .submit(&format!(
            "{}gpuType: a100\nhints: {{durationSeconds: 100000}}\n",
            job("long", 8, "sleep 100")
        ))
        .unwrap();
    wait_until(
        "long starting (its launch queued)",
        Duration::from_secs(10),
        || alice.describe(long.id).unwrap().job.state == tessera_daemon::types::JobState::Starting,
    );
    let short = alice
        .submit(&format!(
            "{}gpuType: a100\nhints: {{durationSeconds: 10}}\n",
            job("short", 8, "sleep 1")
        ))
        .unwrap();
    let mut ack = 0;
    wait_until("long preempted", Duration::from_secs(10), || {
        let l = alice.describe(long.id).unwrap().job;
        ack = now_ns();
        l.preemptions == 1
    });
    assert!(
        log.lock().unwrap().iter().all(|&(_, id, _)| id != long.id),
        "long's launch was taken before the preemption: the test did not queue it"
    );
    wait_until("short runs", Duration::from_secs(20), || {
        alice.describe(short.id).unwrap().job.state == tessera_daemon::types::JobState::Running
    });
    std::thread::sleep(Duration::from_millis(500));
    let log = log.lock().unwrap().clone();
    let late: Vec<_> = log
        .iter()
        .filter(|&&(t, id, attempt)| id == long.id && attempt == 1 && t > ack)
        .collect();
    assert!(late.is_empty(), "submitted after its preemption: {late:?}");
    assert!(
        log.iter().all(|&(_, id, a)| !(id == long.id && a == 1)),
        "the preempted attempt was submitted at all: {log:?}"
    );
    let v = alice.describe(long.id).unwrap().job;
    assert_eq!(v.state, tessera_daemon::types::JobState::Pending);
    d.shutdown().unwrap();
}

/// Issue 42 item 1, retire: a service's instance launch still queued for the backend when the
/// service is retired is withdrawn: nothing of it is submitted after the retire's `200`.
#[test]
fn a_queued_instance_launch_is_withdrawn_when_its_service_is_retired() {
    const SERVICE: &str = "apiVersion: tessera/v1
kind: Workload
metadata:
  command: [sleep, '300']
spec:
  services:
    - name: NAME
      endSeconds: 3600
      sloMilliseconds: 50
      resources: {cpu: '1', memory: 4Gi, gpuMemory: 2Gi}
      arrivals: {poisson: {rate: 3}}
";
    let dir = tempfile::tempdir().unwrap();
    let (d, log) = slow_daemon(dir.path(), "serve-exclusive", Duration::from_secs(3));
    let alice = client(&d, ALICE);
    // The first service's instance launch holds the backend thread for 3 s.
    let first = alice
        .submit_service(&SERVICE.replace("NAME", "first"))
        .unwrap();
    wait_until(
        "the first instance launching",
        Duration::from_secs(10),
        || !alice.service(first.id).unwrap().instances.is_empty(),
    );
    std::thread::sleep(Duration::from_millis(300));
    let second = alice
        .submit_service(&SERVICE.replace("NAME", "second"))
        .unwrap();
    let mut instance = 0;
    wait_until(
        "the second instance starting",
        Duration::from_secs(10),
        || {
            let v = alice.service(second.id).unwrap();
            instance = v.instances.first().map_or(0, |i| i.id);
            instance != 0
        },
    );
    assert!(
        log.lock().unwrap().is_empty(),
        "the first launch answered early: the test did not queue the second"
    );
    let v = alice.retire_service(second.id).unwrap();
    let ack = now_ns();
    assert!(v.instances.is_empty());
    // The first launch answers; anything queued behind it would go now.
    wait_until(
        "the first instance running",
        Duration::from_secs(20),
        || {
            alice
                .service(first.id)
                .unwrap()
                .instances
                .first()
                .is_some_and(|i| i.backend_id.is_some())
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    let log = log.lock().unwrap().clone();
    let late: Vec<_> = log
        .iter()
        .filter(|&&(t, id, _)| id == -instance && t > ack)
        .collect();
    assert!(
        late.is_empty(),
        "submitted after the retire's 200: {late:?}"
    );
    assert!(
        log.iter().all(|&(_, id, _)| id != -instance),
        "the retired instance was submitted at all: {log:?}"
    );
    d.shutdown().unwrap();
}
