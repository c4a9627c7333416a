//! The daemon core's scheduling decision at scale (issue 38 item 6): 10,000 nodes of 8 GPUs,
//! 100,000 jobs pending, under FIFO, LAS and a knowledge-driven policy (Synergy's TUNE over LAS,
//! jobs profiled from the `synergy` truth's catalogue). Target: < 100 ms per decision.
//!
//! `cargo bench -p tessera-daemon --bench decision [-- NODES PENDING [POLICY...]]`
//!
//! For each policy, on a fresh daemon (SQLite store, a backend that runs nothing):
//! 1. **first**: the cluster empty, PENDING jobs queued; one scheduling point (it starts as many
//!    as fit).
//! 2. **full**: the cluster then full (one 8-GPU job per node, started first), PENDING jobs
//!    queued behind, at a round boundary (LAS re-plans; what it preempts and starts is part of
//!    the decision).
//! 3. **next**: the round after, nothing changed but time.
//!
//! "decision" is the core's `decide` (view, policy, validation in order against the device
//! state); "round" adds recording the transitions durably and the backend calls.

use std::sync::Arc;
use std::time::Instant;

use tessera_daemon::backend::{GresCount, InventoryNode, NodeHealth, NullBackend};
use tessera_daemon::config::TenantConfig;
use tessera_daemon::types::JobState;
use tessera_daemon::{hash_token, DaemonConfig, Engine, ManualClock};
use tessera_model::{Bytes, MilliCpu, SimDuration, SimTime};

const TOKEN: &str = "bench-token";
/// Models the pending jobs name (each in Synergy's tables), in turn.
const MODELS: [&str; 4] = ["resnet50", "bert-base", "gpt2", "vgg16"];

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

fn config(dir: &std::path::Path, policy: &str, truth: Option<&str>) -> DaemonConfig {
    let truth = truth.map(|t| format!("truth: {t}\n")).unwrap_or_default();
    let text = format!(
        "listen: 127.0.0.1:0\nstore: {}\npolicy: {policy}\nroundSeconds: 60\n{truth}backend: {{kind: local, workDir: {}}}\n",
        dir.join("bench.db").display(),
        dir.display()
    );
    let mut c = DaemonConfig::from_yaml(&text).expect("bench config");
    c.tenants = vec![TenantConfig {
        name: "bench".into(),
        token_sha256: hash_token(TOKEN),
        admin: false,
    }];
    c.limits.max_active_jobs_per_tenant = 10_000_000;
    c.limits.max_active_jobs = 10_000_000;
    c
}

fn spec(name: &str, gpus: u32, secs: usize, model: &str) -> String {
    format!(
        r#"{{"name":"{name}","command":["sleep","3600"],"gpus":{gpus},"gpuType":"a100","hints":{{"model":"{model}","batchSize":64,"durationSeconds":{secs}}}}}"#
    )
}

fn submit(e: &mut Engine, specs: &[String]) {
    for chunk in specs.chunks(2000) {
        for r in e.submit_many(TOKEN, chunk) {
            r.expect("submit");
        }
    }
}

fn count(e: &Engine, s: JobState) -> usize {
    e.count_by_state().get(&s).copied().unwrap_or(0)
}

/// CPU time this thread has run, ms (Linux's `/proc/thread-self/schedstat`, in ns; 0
/// elsewhere). On the shared 2-core machine wall times are several times the CPU time the
/// bench got, so each point also prints the CPU time of its whole round.
fn thread_cpu_ms() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e6)
}

/// One scheduling point: (decision ms, whole round ms, the round's CPU ms).
fn point(e: &mut Engine) -> (f64, f64, f64) {
    let cpu = thread_cpu_ms();
    let start = Instant::now();
    e.schedule();
    (
        e.last_decision_secs() * 1e3,
        start.elapsed().as_secs_f64() * 1e3,
        thread_cpu_ms() - cpu,
    )
}

fn bench(policy: &str, truth: Option<&str>, node_count: usize, pending: usize) {
    let pending_specs: Vec<String> = (0..pending)
        .map(|i| {
            spec(
                &format!("p{i}"),
                1 + (i % 4) as u32,
                600 + i % 7200,
                MODELS[i % MODELS.len()],
            )
        })
        .collect();
    let label = format!(
        "{policy}{}",
        truth.map(|t| format!(" (truth {t})")).unwrap_or_default()
    );

    // 1. The cluster empty, PENDING queued.
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(ManualClock::new(SimTime::from_secs(1_700_000_000)));
        let mut e = Engine::open(
            &config(dir.path(), policy, truth),
            Box::new(NullBackend::new(nodes(node_count))),
            clock.clone(),
        )
        .expect("engine");
        submit(&mut e, &pending_specs);
        clock.advance(SimDuration::from_secs(61));
        let (d, r, c) = point(&mut e);
        println!(
            "decision[{label}] first: {node_count} nodes, {pending} pending, cluster empty: decision {d:.1} ms, round {r:.1} ms (CPU {c:.1} ms) (started {})",
            count(&e, JobState::Starting) + count(&e, JobState::Running)
        );
    }

    // 2. The cluster full, PENDING queued behind, at a round boundary; 3. the round after.
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(SimTime::from_secs(1_700_000_000)));
    let mut e = Engine::open(
        &config(dir.path(), policy, truth),
        Box::new(NullBackend::new(nodes(node_count))),
        clock.clone(),
    )
    .expect("engine");
    let fill: Vec<String> = (0..node_count)
        .map(|i| spec(&format!("f{i}"), 8, 36_000, MODELS[i % MODELS.len()]))
        .collect();
    submit(&mut e, &fill);
    e.schedule();
    clock.advance(SimDuration::from_secs(1));
    e.schedule();
    let running = count(&e, JobState::Starting) + count(&e, JobState::Running);
    submit(&mut e, &pending_specs);
    clock.advance(SimDuration::from_secs(60));
    let queued = count(&e, JobState::Pending);
    let (d, r, c) = point(&mut e);
    println!(
        "decision[{label}] full: {node_count} nodes ({running} jobs holding every GPU), {queued} pending, round boundary: decision {d:.1} ms, round {r:.1} ms (CPU {c:.1} ms) (preemptions {})",
        e.core()
            .metrics()
            .preemptions
            .values()
            .sum::<u64>()
    );
    clock.advance(SimDuration::from_secs(60));
    let queued = count(&e, JobState::Pending);
    let (d, r, c) = point(&mut e);
    println!(
        "decision[{label}] next: {queued} pending, next round: decision {d:.1} ms, round {r:.1} ms (CPU {c:.1} ms)"
    );
}

fn main() {
    // `cargo bench` passes `--bench`; numbers are NODES and PENDING, words are policies.
    let raw: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let nums: Vec<usize> = raw.iter().filter_map(|a| a.parse().ok()).collect();
    let node_count = nums.first().copied().unwrap_or(10_000);
    let pending = nums.get(1).copied().unwrap_or(100_000);
    let policies: Vec<&str> = raw
        .iter()
        .filter(|a| a.parse::<usize>().is_err())
        .map(String::as_str)
        .collect();
    println!(
        "command: cargo bench -p tessera-daemon --bench decision -- {}",
        raw.join(" ")
    );
    let all = [("fifo", None), ("las", None), ("las+tune", Some("synergy"))];
    for (policy, truth) in all {
        if policies.is_empty() || policies.contains(&policy) {
            bench(policy, truth, node_count, pending);
        }
    }
}
