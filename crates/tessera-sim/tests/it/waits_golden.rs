//! Time waited per reason on generated workloads, pinned: any change to how the simulator
//! keeps its wait clocks (`src/waits.rs`) must leave every job's `wait_KIND_s` exactly as it
//! was. The golden file (`tests/golden/waits.txt`) holds, per run, the seconds per kind
//! summed over jobs and a hash of every job's values; it was written by the clocks before
//! jobs that start at their arrival instant stopped getting clocks.
//!
//! `UPDATE_GOLDEN=1 cargo test -p tessera-sim --test it waits_golden` rewrites it (only for a
//! change meant to alter the figures, said in its commit).

use std::fmt::Write;
use std::sync::Arc;

use tessera_model::{
    Bytes, Cluster, GpuCatalog, Knowledge, MilliCpu, SimDuration, SimRng, TrainingJob, Workload,
};
use tessera_perf::{Profiler, RestartCosts, TraceThroughput};
use tessera_sched::baselines::build as build_policy;
use tessera_sched::{PolicyOptions, WaitKind};
use tessera_sim::{FailureSpec, SimConfig, SimReport, Simulation};
use tessera_trace::synthetic::{DurationDist, PoissonWorkload, PHILLY_GPU_MIX};

/// Two node groups (V100s and A100s), small enough that thousands of Philly-shaped jobs queue.
fn cluster() -> Cluster {
    Cluster::from_yaml(
        "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: v, count: 6, gpu: V100-32GB, gpusPerNode: 8, cpus: 48, memory: 384Gi}\n    - {name: a, count: 2, gpu: A100-80GB, gpusPerNode: 8, cpus: 64, memory: 512Gi}\n",
        &GpuCatalog::builtin(),
    )
    .unwrap()
}

/// 3,000 Philly-shaped jobs with request shapes of several kinds: three tenants, every
/// seventh job only on A100s, every eleventh with explicit CPU and memory (some too much for
/// a V100 node's share).
fn workload(cluster: &Cluster) -> Vec<TrainingJob> {
    let a100 = cluster.catalog.find("A100-80GB").unwrap();
    let mut jobs = PoissonWorkload {
        jobs: 3000,
        jobs_per_hour: 120.0,
        gpu_mix: PHILLY_GPU_MIX.to_vec(),
        durations: DurationDist::PhillyRuntimes,
        seed: 11,
    }
    .generate()
    .jobs()
    .to_vec();
    for (i, j) in jobs.iter_mut().enumerate() {
        j.tenant = ["alpha", "beta", "gamma"][i % 3].to_string();
        if i % 7 == 3 {
            j.gpu_types = vec![a100];
        }
        if i % 11 == 5 {
            j.cpu = Some(MilliCpu::from_cores(
                6 * u64::from(j.gpus) + (i % 4) as u64 * 8,
            ));
            j.memory = Some(Bytes::from_gib(40 * u64::from(j.gpus)));
        }
    }
    jobs
}

#[derive(Debug)]
struct SlowProfiler;

impl Profiler for SlowProfiler {
    fn cost(&self) -> SimDuration {
        SimDuration::from_secs(45)
    }
    fn profile(&self, _: &TrainingJob, _: &Cluster, _: &mut SimRng) -> Knowledge {
        Knowledge::new()
    }
}

fn run(
    cluster: &Cluster,
    jobs: &[TrainingJob],
    policy: &str,
    round: Option<u64>,
    config: SimConfig,
) -> SimReport {
    let workload = Workload::new(jobs.to_vec());
    let policy = build_policy(
        policy,
        &PolicyOptions {
            round: round.map(SimDuration::from_secs),
            ..PolicyOptions::default()
        },
    )
    .unwrap();
    Simulation::new(cluster, &workload, &TraceThroughput, policy, config)
        .run(&mut ())
        .unwrap()
}

/// One line per run: its name, seconds per kind summed over jobs, and an FNV-1a hash of every
/// job's seconds per kind (bit patterns, in job order).
fn digest(name: &str, r: &SimReport) -> String {
    let mut sums = [0.0f64; WaitKind::COUNT];
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    assert_eq!(r.waits.len(), r.jobs.len());
    for w in &r.waits {
        for (k, s) in w.iter().enumerate() {
            sums[k] += s;
            for b in s.to_bits().to_le_bytes() {
                hash ^= u64::from(b);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut line = format!("{name}:");
    for (k, s) in WaitKind::ALL.iter().zip(sums) {
        let _ = write!(line, " {}={s:.6}", k.key());
    }
    let _ = write!(line, " hash={hash:016x}");
    line
}

#[test]
fn waits_per_reason_are_pinned_on_generated_workloads() {
    let c = cluster();
    let jobs = workload(&c);
    let failures = Arc::new(
        FailureSpec::parse(
            "time,node,event,duration\n20000,v-1,down,7200\n90000,a-0,down,3600\n",
            &c,
        )
        .unwrap(),
    );
    let mut lines = Vec::new();
    for (name, policy, round, config) in [
        ("fifo", "fifo", None, SimConfig::default()),
        (
            "las-300",
            "las",
            Some(300),
            SimConfig {
                restart_costs: RestartCosts::free(),
                ..SimConfig::default()
            },
        ),
        ("srtf", "srtf", None, SimConfig::default()),
        (
            "fifo-failures",
            "fifo",
            None,
            SimConfig {
                failures: Some(Arc::clone(&failures)),
                ..SimConfig::default()
            },
        ),
        (
            "las-profiled",
            "las",
            Some(600),
            SimConfig {
                profiler: Some(Arc::new(SlowProfiler)),
                ..SimConfig::default()
            },
        ),
    ] {
        let r = run(&c, &jobs, policy, round, config);
        lines.push(digest(name, &r));
    }
    let got = lines.join("\n") + "\n";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/waits.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    assert_eq!(got, want, "wait clocks changed the figures");
}
