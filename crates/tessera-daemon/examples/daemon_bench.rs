//! Daemon benchmarks (not a timed test): prints each figure with the command that produced it.
//!
//! `cargo run --release -p tessera-daemon --example daemon-bench [-- SUBMISSIONS CLIENTS]`
//! `cargo run --release -p tessera-daemon --example daemon-bench -- wrk SECONDS CLIENTS [PENDING [GPUS [RUN_MS]]]`
//!
//! 1. Submissions per second through the HTTP API (JSON bodies, bearer auth, `synchronous=FULL`
//!    SQLite in WAL mode, group commit), with the FIFO policy starting jobs on 1,000 nodes as
//!    they arrive (a backend that runs nothing).
//!    With a third argument PENDING, instead: submissions while the local backend starts and
//!    reaps real processes, over PENDING jobs queued beforehand (p50/p99 latency). With `wrk`
//!    first, the same scenario loaded by `wrk` (one thread holding CLIENTS connections) for
//!    SECONDS instead of by CLIENTS threads of tessera's client; GPUS (default 16) on the
//!    local node, each job's payload alive RUN_MS (default 0: `true`).
//! 2. One scheduling round over 1,000 nodes (8 GPUs each) and 5,000 pending jobs, for FIFO and
//!    LAS: the decision (view + policy + validation), and the whole round including durable
//!    writes of every transition and the backend calls.

use std::sync::Arc;
use std::time::Instant;

use tessera_daemon::backend::{GresCount, InventoryNode, NodeHealth, NullBackend};
use tessera_daemon::config::{LocalConfig, LocalNodeConfig, TenantConfig};
use tessera_daemon::types::JobState;
use tessera_daemon::{hash_token, Client, DaemonConfig, Engine, ManualClock, SystemClock};
use tessera_model::{Bytes, MilliCpu, SimDuration, SimTime};

const TOKEN: &str = "bench-token";

fn nodes(n: usize) -> Vec<InventoryNode> {
    (0..n)
        .map(|i| InventoryNode {
            name: format!("node{i}"),
            cpu: MilliCpu::from_cores(64),
            memory: Bytes::from_gib(512),
            gres: vec![GresCount {
                kind: Some("a100".into()),
                count: 8,
            }],
            health: NodeHealth::Up,
        })
        .collect()
}

fn config(dir: &std::path::Path, policy: &str) -> DaemonConfig {
    let text = format!(
        "listen: 127.0.0.1:0\nstore: {}\npolicy: {policy}\nroundSeconds: 60\nbackend: {{kind: local, workDir: {}}}\n",
        dir.join("bench.db").display(),
        dir.display()
    );
    let mut c = DaemonConfig::from_yaml(&text).expect("bench config");
    c.tenants = vec![TenantConfig {
        name: "bench".into(),
        token_sha256: hash_token(TOKEN),
        admin: false,
    }];
    c.limits.max_active_jobs_per_tenant = 1_000_000;
    c.limits.max_active_jobs = 1_000_000;
    c
}

fn spec(i: usize, gpus: u32) -> String {
    format!(
        r#"{{"name":"bench-{i}","command":["sleep","3600"],"gpus":{gpus},"gpuType":"a100","hints":{{"durationSeconds":{}}}}}"#,
        600 + i % 7200
    )
}

fn submissions(total: usize, clients: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = config(dir.path(), "fifo");
    c.round_seconds = None;
    let d = tessera_daemon::spawn(
        c,
        Box::new(NullBackend::new(nodes(1000))),
        Arc::new(SystemClock::new()),
    )
    .expect("daemon");
    let url = d.url();
    // Warm up connections and the store.
    Client::new(&url, Some(TOKEN.into()))
        .submit(&spec(0, 1))
        .expect("warm-up");
    let per = total / clients;
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let url = url.clone();
            std::thread::spawn(move || {
                let c = Client::new(&url, Some(TOKEN.into()));
                for i in 0..per {
                    c.submit(&spec(t * per + i, 1 + (i % 2) as u32))
                        .expect("submit");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    let secs = start.elapsed().as_secs_f64();
    let n = per * clients;
    let jobs = Client::new(&url, Some(TOKEN.into())).list().expect("list");
    let running = jobs
        .iter()
        .filter(|j| j.state == tessera_daemon::types::JobState::Running)
        .count();
    println!(
        "submissions: {n} via HTTP from {clients} clients in {secs:.2} s = {:.0} jobs/s (durable: WAL, synchronous=FULL; {running} started by FIFO meanwhile)",
        n as f64 / secs
    );
    drop(d);
}

/// How the submissions of [`submissions_while_running`] are made.
enum Load {
    /// `total` submissions from client threads, each with tessera's blocking [`Client`].
    Threads { total: usize },
    /// `wrk` (on `PATH`) for `seconds`, one thread keeping every connection busy: a load
    /// generator that takes little of the CPU it shares with the daemon on a small machine.
    Wrk { seconds: u64 },
}

/// Runs `wrk` against `POST /v1/jobs` with `body`; (responses, seconds, p50 ms, p99 ms).
/// Exits the benchmark when wrk is missing or any answer was not a success.
fn wrk(
    dir: &std::path::Path,
    url: &str,
    body: &str,
    connections: usize,
    seconds: u64,
) -> (usize, f64, f64, f64) {
    let script = dir.join("submit.lua");
    std::fs::write(
        &script,
        format!(
            "wrk.method = \"POST\"\nwrk.body = '{body}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.headers[\"Authorization\"] = \"Bearer {TOKEN}\"\n"
        ),
    )
    .expect("wrk script");
    let out = std::process::Command::new("wrk")
        .args(["-t1", &format!("-c{connections}"), &format!("-d{seconds}s")])
        .args(["--latency", "--timeout", "10s", "-s"])
        .arg(&script)
        .arg(format!("{url}/v1/jobs"))
        .output()
        .unwrap_or_else(|e| {
            eprintln!("cannot run wrk ({e}); install it (Debian: apt-get install wrk)");
            std::process::exit(2)
        });
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.contains("Non-2xx") || text.contains("Socket errors") {
        eprintln!(
            "wrk failed or saw errors:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::process::exit(1);
    }
    // "     50%   12.34ms" lines of the latency distribution, "N requests in 10.00s".
    let ms = |v: &str| -> f64 {
        let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
        let x: f64 = num.parse().unwrap_or(f64::NAN);
        match unit {
            "us" => x / 1e3,
            "ms" => x,
            "s" => x * 1e3,
            "m" => x * 60e3,
            _ => f64::NAN,
        }
    };
    let pct = |p: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(p).map(|v| ms(v.trim())))
            .unwrap_or(f64::NAN)
    };
    let (n, secs) = text
        .lines()
        .find_map(|l| {
            let (n, rest) = l.trim().split_once(" requests in ")?;
            let secs = rest.split(',').next()?.trim_end_matches('s').parse().ok()?;
            Some((n.parse().ok()?, secs))
        })
        .unwrap_or((0, f64::NAN));
    (n, secs, pct("50%"), pct("99%"))
}

/// Submissions over HTTP while the local backend really starts and reaps processes (each job
/// runs `true` on one GPU), with `pending` jobs already queued that cannot start (they ask for
/// all the node's memory while a long-running blocker holds a little of it).
fn submissions_while_running(load: Load, clients: usize, pending: usize, gpus: u32, run_ms: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = config(dir.path(), "fifo");
    c.round_seconds = None;
    // Finished runs are noticed within 100 ms, so jobs keep starting and finishing.
    c.poll_interval_ms = 100;
    c.backend = tessera_daemon::BackendConfig::Local(LocalConfig {
        work_dir: dir.path().join("runs"),
        // Nodes of at most 16 GPUs (the first named `box`, as before).
        nodes: (0..gpus.div_ceil(16).max(1))
            .map(|i| LocalNodeConfig {
                name: if i == 0 {
                    "box".into()
                } else {
                    format!("box{i}")
                },
                gpu: "A100-80GB".into(),
                gpus: (gpus - i * 16).min(16),
                cpus: MilliCpu::from_cores(64),
                memory: Bytes::from_gib(256),
            })
            .collect(),
        run_as: Default::default(),
        tool_path: None,
    });
    let job = |name: &str, command: &str, memory: &str| {
        let argv = match (command, run_ms) {
            ("true", ms) if ms > 0 => format!(r#""sleep","{}""#, ms as f64 / 1e3),
            (c, _) => format!(r#""{c}""#),
        };
        format!(r#"{{"name":"{name}","command":[{argv}],"gpus":1,"memory":"{memory}"}}"#)
    };
    {
        // Preload through the library (no daemon runs on the store yet): the blocker starts,
        // the rest cannot.
        let mut e = Engine::open(
            &c,
            tessera_daemon::build_backend(&c.backend).expect("backend"),
            Arc::new(SystemClock::new()),
        )
        .expect("engine");
        e.submit_many(
            TOKEN,
            &[
                r#"{"name":"blocker","command":["sleep","600"],"gpus":1,"memory":"1Gi"}"#
                    .to_string(),
            ],
        )
        .remove(0)
        .expect("blocker");
        e.schedule();
        let queued: Vec<String> = (0..pending)
            .map(|i| job(&format!("queued-{i}"), "true", "256Gi"))
            .collect();
        for chunk in queued.chunks(5000) {
            for r in e.submit_many(TOKEN, chunk) {
                r.expect("queued");
            }
        }
        e.schedule();
        let counts = e.count_by_state();
        assert_eq!(
            counts.get(&JobState::Running).copied(),
            Some(1),
            "{counts:?}"
        );
    }
    let d = tessera_daemon::spawn(
        c.clone(),
        tessera_daemon::build_backend(&c.backend).expect("backend"),
        Arc::new(SystemClock::new()),
    )
    .expect("daemon");
    let url = d.url();
    let (what, n, secs, p50, p99) = match load {
        Load::Threads { total } => {
            let per = total / clients;
            let start = Instant::now();
            let threads: Vec<_> = (0..clients)
                .map(|t| {
                    let url = url.clone();
                    let job = job(&format!("run-{t}"), "true", "1Gi");
                    std::thread::spawn(move || {
                        let c = Client::new(&url, Some(TOKEN.into()));
                        let mut lat = Vec::with_capacity(per);
                        for _ in 0..per {
                            let t0 = Instant::now();
                            c.submit(&job).expect("submit");
                            lat.push(t0.elapsed().as_secs_f64());
                        }
                        lat
                    })
                })
                .collect();
            let mut lat: Vec<f64> = threads
                .into_iter()
                .flat_map(|t| t.join().expect("client thread"))
                .collect();
            let secs = start.elapsed().as_secs_f64();
            lat.sort_by(f64::total_cmp);
            let pct = |p: f64| {
                lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1] * 1e3
            };
            (
                format!("{clients} client threads (tessera's blocking client)"),
                per * clients,
                secs,
                pct(0.50),
                pct(0.99),
            )
        }
        Load::Wrk { seconds } => {
            let (n, secs, p50, p99) = wrk(
                dir.path(),
                &url,
                &job("run", "true", "1Gi"),
                clients,
                seconds,
            );
            (
                format!("{clients} connections of one wrk thread"),
                n,
                secs,
                p50,
                p99,
            )
        }
    };
    let jobs = Client::new(&url, Some(TOKEN.into())).list().expect("list");
    let count = |s: JobState| jobs.iter().filter(|j| j.state == s).count();
    println!(
        "submissions while jobs run: {n} via HTTP from {what} over {pending} queued in {secs:.2} s = {:.0} jobs/s, latency p50 {p50:.1} ms p99 {p99:.1} ms (local backend, {gpus} GPUs, real processes alive {run_ms} ms; by the end {} completed, {} running or starting)",
        n as f64 / secs,
        count(JobState::Completed),
        count(JobState::Running) + count(JobState::Starting),
    );
    let metrics = Client::new(&url, Some(TOKEN.into()))
        .metrics()
        .expect("metrics");
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (sum, calls) = (
        value("tessera_scheduling_latency_seconds_sum"),
        value("tessera_scheduling_latency_seconds_count"),
    );
    println!(
        "  scheduling points during the run: {calls:.0}, mean decision {:.1} ms",
        if calls > 0.0 { sum / calls * 1e3 } else { 0.0 }
    );
    let bucket = |name: &str, le: &str| value(&format!("{name}_bucket{{le=\"{le}\"}}"));
    let (wait_n, commit_n) = (
        value("tessera_engine_wait_seconds_count"),
        value("tessera_engine_commit_seconds_count"),
    );
    println!(
        "  engine loop: {:.0} iterations, {:.0} store commits; wait for the loop mean {:.1} ms ({:.1}% over 25 ms, {:.1}% over 50 ms); commit mean {:.1} ms ({:.0} over 25 ms)",
        value("tessera_engine_iterations_total"),
        value("tessera_store_commits_total"),
        value("tessera_engine_wait_seconds_sum") / wait_n.max(1.0) * 1e3,
        100.0 * (1.0 - bucket("tessera_engine_wait_seconds", "0.025") / wait_n.max(1.0)),
        100.0 * (1.0 - bucket("tessera_engine_wait_seconds", "0.05") / wait_n.max(1.0)),
        value("tessera_engine_commit_seconds_sum") / commit_n.max(1.0) * 1e3,
        commit_n - bucket("tessera_engine_commit_seconds", "0.025"),
    );
    let submit_n = value("tessera_submit_seconds_count").max(1.0);
    println!(
        "  server side (arrival to answer): mean {:.1} ms, {:.1}% over 25 ms, {:.2}% over 50 ms",
        value("tessera_submit_seconds_sum") / submit_n * 1e3,
        100.0 * (1.0 - bucket("tessera_submit_seconds", "0.025") / submit_n),
        100.0 * (1.0 - bucket("tessera_submit_seconds", "0.05") / submit_n),
    );
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!(
            "  load average at the end: {}",
            l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        );
    }
    for j in jobs.iter().filter(|j| j.name == "blocker") {
        let _ = Client::new(&url, Some(TOKEN.into())).cancel(j.id);
    }
    drop(d);
}

fn round(policy: &str, pending: usize, node_count: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config(dir.path(), policy);
    let clock = Arc::new(ManualClock::new(SimTime::from_secs(1_700_000_000)));
    let mut e = Engine::open(
        &c,
        Box::new(NullBackend::new(nodes(node_count))),
        clock.clone(),
    )
    .expect("engine");
    let specs: Vec<String> = (0..pending).map(|i| spec(i, 1 + (i % 4) as u32)).collect();
    for chunk in specs.chunks(1000) {
        for r in e.submit_many(TOKEN, chunk) {
            r.expect("submit");
        }
    }
    clock.advance(SimDuration::from_secs(61)); // a round boundary: preemptive policies re-plan
    let start = Instant::now();
    e.schedule();
    let whole = start.elapsed().as_secs_f64();
    let counts = e.count_by_state();
    println!(
        "round[{policy}]: {node_count} nodes, {pending} pending jobs: decision {:.1} ms, whole round {:.1} ms (started {}, still pending {}; includes durable writes and backend calls)",
        e.last_decision_secs() * 1e3,
        whole * 1e3,
        counts.get(&tessera_daemon::types::JobState::Running).copied().unwrap_or(0),
        counts.get(&tessera_daemon::types::JobState::Pending).copied().unwrap_or(0),
    );
    // A second round with the cluster full: the steady state.
    clock.advance(SimDuration::from_secs(61));
    e.schedule();
    println!(
        "round[{policy}]: steady state (cluster full, {} pending): decision {:.1} ms",
        e.count_by_state()
            .get(&tessera_daemon::types::JobState::Pending)
            .copied()
            .unwrap_or(0),
        e.last_decision_secs() * 1e3
    );
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let with_wrk = raw.first().is_some_and(|a| a == "wrk");
    let args: Vec<usize> = raw.iter().filter_map(|a| a.parse().ok()).collect();
    println!(
        "command: cargo run --release -p tessera-daemon --example daemon-bench -- {}",
        raw.join(" ")
    );
    if with_wrk {
        // `wrk SECONDS CLIENTS [PENDING]`: the scenario with real processes, loaded by wrk.
        let seconds = args.first().copied().unwrap_or(10) as u64;
        let clients = args.get(1).copied().unwrap_or(64).max(1);
        let pending = args.get(2).copied().unwrap_or(0);
        let gpus = args.get(3).copied().unwrap_or(16) as u32;
        let run_ms = args.get(4).copied().unwrap_or(0) as u64;
        submissions_while_running(Load::Wrk { seconds }, clients, pending, gpus, run_ms);
        return;
    }
    let total = args.first().copied().unwrap_or(10_000);
    let clients = args.get(1).copied().unwrap_or(16).max(1);
    let pending = args.get(2).copied();
    if let Some(pending) = pending {
        // Only the scenario with real processes and a deep queue.
        submissions_while_running(Load::Threads { total }, clients, pending, 16, 0);
        return;
    }
    submissions(total, clients);
    submissions_while_running(Load::Threads { total }, clients, 0, 16, 0);
    round("fifo", 5000, 1000);
    round("las", 5000, 1000);
}
