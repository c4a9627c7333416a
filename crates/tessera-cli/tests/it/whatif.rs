//! `tessera whatif` on a seeded store: the daemon's SQLite store written directly (two
//! tenants, jobs running on both nodes, jobs pending), then read-only what-ifs.

use std::path::Path;

use tessera_daemon::backend::PlacedShare;
use tessera_daemon::core::records::{JobRow, RunRow, RunState, WriteBatch};
use tessera_daemon::store::Store;
use tessera_daemon::types::JobState;
use tessera_model::{Bytes, MilliCpu};

use super::{stderr, stdout, tessera};

/// The instant the what-ifs fork from (Unix seconds).
const AT: u64 = 1_800_000_000;

fn row(id: i64, tenant: &str, gpus: u32, secs: u64, running_on: Option<&str>) -> JobRow {
    let spec = format!(
        r#"{{"name":"j{id}","tenant":"{tenant}","command":["sleep","1"],"gpus":{gpus},"hints":{{"durationSeconds":{secs}}}}}"#
    );
    JobRow {
        id,
        tenant: tenant.into(),
        queue: "default".into(),
        name: format!("j{id}"),
        spec_json: spec,
        state: if running_on.is_some() {
            JobState::Running
        } else {
            JobState::Pending
        },
        priority: 0,
        submit_us: (AT - 2000 + id as u64) * 1_000_000,
        start_us: running_on.map(|_| (AT - 1000) * 1_000_000),
        end_us: None,
        attempt: u32::from(running_on.is_some()),
        placement: running_on
            .map(|n| {
                vec![PlacedShare {
                    node: n.into(),
                    gres_type: Some("a100".into()),
                    gpus,
                    cpu: MilliCpu::from_cores(8),
                    memory: Bytes::from_gib(64),
                    devices: None,
                }]
            })
            .unwrap_or_default(),
        plan: None,
        handle: running_on.map(|_| format!("run-{id}")),
        exit_code: None,
        message: None,
        progress_iters: 0,
        samples_per_sec: None,
        iters_per_sec: None,
        progress_us: None,
        attained_gpu_secs: 0.0,
        preemptions: 0,
        job_token_sha256: None,
        backend_state: None,
    }
}

fn seed(dir: &Path) -> std::path::PathBuf {
    let store_path = dir.join("tessera.db");
    let mut store = Store::open(&store_path, tessera_daemon::config::SyncMode::Full).unwrap();
    let jobs = vec![
        row(1, "alice", 4, 3600, Some("n0")),
        row(2, "bob", 4, 7200, Some("n1")),
        row(3, "alice", 4, 1800, None),
        row(4, "bob", 4, 1800, None),
        row(5, "alice", 2, 600, None),
    ];
    let runs = jobs
        .iter()
        .filter_map(|j| {
            Some(RunRow {
                handle: j.handle.clone()?,
                job_id: j.id,
                attempt: 1,
                state: RunState::Live,
            })
        })
        .collect();
    store
        .commit(&WriteBatch {
            jobs,
            runs,
            ..WriteBatch::default()
        })
        .unwrap();
    drop(store);
    let config = dir.join("tessera.yaml");
    std::fs::write(
        &config,
        format!(
            "store: {}\npolicy: fifo\nbackend:\n  kind: local\n  workDir: {}\n  nodes:\n    - {{name: n0, gpu: a100, gpus: 4, cpus: 32, memory: 256Gi}}\n    - {{name: n1, gpu: a100, gpus: 4, cpus: 32, memory: 256Gi}}\n",
            store_path.display(),
            dir.join("work").display()
        ),
    )
    .unwrap();
    config
}

fn whatif(config: &Path, extra: &[&str]) -> serde_json::Value {
    let at = AT.to_string();
    let mut args = vec![
        "whatif",
        "--config",
        config.to_str().unwrap(),
        "--at",
        &at,
        "--json",
    ];
    args.extend(extra);
    let o = tessera(&args);
    assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// Mean wait (h) of a tenant's pending jobs before and after.
fn waits(doc: &serde_json::Value, tenant: &str) -> (f64, f64) {
    let t = doc["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == tenant)
        .unwrap_or_else(|| panic!("no tenant {tenant}: {doc}"));
    (
        t["before"]["mean_wait_s"].as_f64().unwrap(),
        t["after"]["mean_wait_s"].as_f64().unwrap(),
    )
}

#[test]
fn whatif_on_a_seeded_store_adds_drains_and_changes_policy() {
    let dir = tempfile::tempdir().unwrap();
    let config = seed(dir.path());
    let before = std::fs::read(dir.path().join("tessera.db")).unwrap();

    // As it is: n0 frees at AT + 2600 s (3600 s declared, 1000 s run), n1 at AT + 6200 s.
    // FIFO: job 3 (alice) at +2600 on n0, then jobs 4 (bob) and 5 (alice) after it.
    let same = whatif(&config, &[]);
    assert_eq!(same["change"], "no change");
    let (a0, a1) = waits(&same, "alice");
    assert_eq!(a0, a1, "no change, same waits");
    assert!(a0 > 2000.0, "alice waits for n0: {same}");

    // One more 4-GPU node: job 3 starts at once, everyone waits less.
    let more = whatif(&config, &["--add-nodes", "1xa100:4"]);
    let (a0, a1) = waits(&more, "alice");
    let (b0, b1) = waits(&more, "bob");
    assert!(a1 < a0 && b1 < b0, "{more}");
    assert!(more["change"].as_str().unwrap().contains("add 1xa100:4"));

    // Draining n0: its job finishes, nothing new starts there; all wait for n1.
    let drained = whatif(&config, &["--drain", "n0"]);
    let (a0, a1) = waits(&drained, "alice");
    assert!(a1 > a0, "{drained}");

    // Another policy is accepted and named.
    let las = whatif(&config, &["--policy", "las"]);
    assert_eq!(las["policy"]["after"], "las");

    // Human output, plots and jobs.csv.
    let out = dir.path().join("out");
    let at = AT.to_string();
    let o = tessera(&[
        "whatif",
        "--config",
        config.to_str().unwrap(),
        "--at",
        &at,
        "--add-nodes",
        "1xa100:4",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for needle in ["what if: add 1xa100:4", "alice", "bob", "mean wait h"] {
        assert!(text.contains(needle), "lacks {needle:?}: {text}");
    }
    assert!(out.join("whatif.svg").exists());
    let csv = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    assert_eq!(csv.lines().count(), 6, "{csv}");

    // Bad input says why; the store is never written.
    let o = tessera(&[
        "whatif",
        "--config",
        config.to_str().unwrap(),
        "--drain",
        "nx",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no node"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(dir.path().join("tessera.db")).unwrap(),
        before
    );
}

/// `tessera whatif` at 10,000 pending and 2,000 running jobs on 1,000 nodes (BENCHMARKS.md):
/// `cargo test -p tessera-cli --test it whatif_speed -- --ignored --nocapture`.
#[test]
#[ignore = "a benchmark: run with --ignored"]
fn whatif_speed_at_ten_thousand_pending() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("tessera.db");
    let mut store = Store::open(&store_path, tessera_daemon::config::SyncMode::Normal).unwrap();
    let mut jobs = Vec::new();
    for i in 0..2000i64 {
        let node = format!("n{}", i / 2);
        jobs.push(row(i + 1, "alice", 4, 3600 + 7 * i as u64, Some(&node)));
    }
    for i in 0..10_000i64 {
        let tenant = if i % 3 == 0 { "bob" } else { "alice" };
        jobs.push(row(2001 + i, tenant, 2, 600 + 13 * i as u64 % 7200, None));
    }
    for j in &mut jobs {
        j.submit_us = (AT - 5000) * 1_000_000 + j.id as u64;
    }
    store
        .commit(&WriteBatch {
            jobs,
            ..WriteBatch::default()
        })
        .unwrap();
    drop(store);
    let nodes: String = (0..1000)
        .map(|i| format!("    - {{name: n{i}, gpu: a100, gpus: 8, cpus: 64, memory: 512Gi}}\n"))
        .collect();
    let config = dir.path().join("tessera.yaml");
    std::fs::write(
        &config,
        format!(
            "store: {}\npolicy: fifo\nbackend:\n  kind: local\n  workDir: {}\n  nodes:\n{nodes}",
            store_path.display(),
            dir.path().join("work").display()
        ),
    )
    .unwrap();
    for extra in [
        &["--add-nodes", "100xa100:8"][..],
        &["--policy", "las", "--round", "300"],
        &["--policy", "las"],
    ] {
        let at = AT.to_string();
        let mut args = vec!["whatif", "--config", config.to_str().unwrap(), "--at", &at];
        args.extend(extra);
        let t0 = std::time::Instant::now();
        let o = tessera(&args);
        let secs = t0.elapsed().as_secs_f64();
        assert!(o.status.success(), "{}", stderr(&o));
        println!("whatif {extra:?}: {secs:.2} s\n{}", stdout(&o));
    }
}

/// `tessera whatif --daemon`: the live daemon's state through `GET /v1/snapshot` (an
/// administrator's token), the same figures as the what-if on its store at the same instant,
/// and a change applied to it.
#[test]
fn whatif_against_a_live_daemon_matches_its_store() {
    use std::sync::Arc;
    use tessera_daemon::backend::{GresCount, InventoryNode, NodeHealth, NullBackend};
    use tessera_daemon::{hash_token, DaemonConfig, SystemClock};

    const ADMIN: &str = "admin-secret-token";
    const ALICE: &str = "alice-secret-token";
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("t.db");
    let tenants = [("alice", ALICE, false), ("ops", ADMIN, true)];
    let tenant_yaml: String = tenants
        .iter()
        .map(|(n, t, a)| {
            format!(
                "  - {{name: {n}, tokenSha256: {}, admin: {a}}}\n",
                hash_token(t)
            )
        })
        .collect();
    // The config `tessera serve` would read: the store, one 8-GPU A100 node, FIFO.
    let config_path = dir.path().join("tessera.yaml");
    std::fs::write(
        &config_path,
        format!(
            "store: {}\npolicy: fifo\nlisten: 127.0.0.1:0\npollIntervalMs: 100\nbackend:\n  kind: local\n  workDir: {}\n  nodes:\n    - {{name: n1, gpu: a100, gpus: 8, cpus: 64, memory: 512Gi}}\ntenants:\n{tenant_yaml}",
            store.display(),
            dir.path().join("runs").display()
        ),
    )
    .unwrap();
    let config = DaemonConfig::from_file(&config_path).unwrap();
    // The same node from a backend that runs nothing (jobs hold their GPUs until cancelled).
    let node = InventoryNode {
        name: "n1".into(),
        cpu: MilliCpu::from_cores(64),
        memory: Bytes::from_gib(512),
        gres: vec![GresCount {
            kind: Some("a100".into()),
            count: 8,
        }],
        health: NodeHealth::Up,
    };
    let daemon = tessera_daemon::spawn(
        config,
        Box::new(NullBackend::new(vec![node])),
        Arc::new(SystemClock::new()),
    )
    .unwrap();
    let alice = tessera_daemon::Client::new(&daemon.url(), Some(ALICE.into()));
    for (name, gpus, secs) in [("a", 8, 3600), ("b", 8, 1800), ("c", 4, 600), ("d", 4, 900)] {
        let spec = format!(
            "name: {name}\ncommand: [sleep, '1']\ngpus: {gpus}\nhints: {{durationSeconds: {secs}}}\n"
        );
        alice.submit(&spec).unwrap();
    }
    // a runs; b, c and d wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while alice.queue().unwrap().pending.len() != 3 {
        assert!(std::time::Instant::now() < deadline, "a never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let url = daemon.url();
    let live = |extra: &[&str], token: &str| {
        let mut args = vec!["whatif", "--daemon", &url, "--token", token, "--json"];
        args.extend(extra);
        tessera(&args)
    };
    // A tenant's token is refused: the snapshot lists every tenant's jobs.
    let o = live(&[], ALICE);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("administrator"), "{}", stderr(&o));

    let o = live(&[], ADMIN);
    assert!(o.status.success(), "{}", stderr(&o));
    let same: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(
        same["from"].as_str().unwrap().contains("the daemon at"),
        "{same}"
    );
    assert_eq!(same["policy"]["before"], "fifo");
    let (a0, a1) = waits(&same, "alice");
    assert_eq!(a0, a1, "no change, same waits");
    // b waits for a's hour, c and d after b.
    assert!(a0 > 3000.0, "{same}");

    // The store at the same instant: the same figures (a's progress is its time held at the
    // declared speed in both; a few ms apart at most).
    let at = format!("{}", same["at"].as_f64().unwrap());
    let o = tessera(&[
        "whatif",
        "--config",
        config_path.to_str().unwrap(),
        "--at",
        &at,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stored: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let (s0, _) = waits(&stored, "alice");
    assert!((s0 - a0).abs() < 1.0, "store {s0} vs live {a0}");

    // A change on the live state: one more node, everyone waits less.
    let o = live(&["--add-nodes", "1xa100:8"], ADMIN);
    assert!(o.status.success(), "{}", stderr(&o));
    let more: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let (m0, m1) = waits(&more, "alice");
    assert!((m0 - a0).abs() < 1.0 && m1 < m0 / 2.0, "{more}");
    drop(daemon);
}
