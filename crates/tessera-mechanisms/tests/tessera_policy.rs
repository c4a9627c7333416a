//! The `tessera` policy on a world that asks for every piece at once: a job waiting while
//! its GPUs are free only across two models (HAP), a long job and a short one on the same GPUs (LAS preemption), MIG
//! jobs (MISO), share jobs and services on typed GPUs (Dilu), a CPU-heavy job (Synergy's
//! placement). The engine's invariants hold after every step, every job finishes as it
//! asked, every request is served, and no piece ever hands the driver an action the
//! validator refuses.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tessera_mechanisms::{build_policy, serving_setup};
use tessera_model::{Allocation, Cluster, GpuCatalog, GpuPart, JobId, SimDuration, SimTime};
use tessera_perf::TraceThroughput;
use tessera_sched::{Action, ClusterView, Policy, PolicyOptions};
use tessera_sim::{SimConfig, Simulation};

const CLUSTER: &str = "apiVersion: tessera/v1
kind: Cluster
metadata:
  name: t
spec:
  nodeGroups:
    - {name: a100, count: 2, gpu: A100-80GB, gpusPerNode: 4, cpus: 64, memory: 512Gi}
    - {name: v100, count: 1, gpu: V100-32GB, gpusPerNode: 4, cpus: 32, memory: 256Gi}
    - {name: t4, count: 1, gpu: T4, gpusPerNode: 4, cpus: 32, memory: 128Gi}
";

const WORKLOAD: &str = "apiVersion: tessera/v1
kind: Workload
spec:
  jobs:
    - {name: blocker, submitSeconds: 0, gpus: 4, durationSeconds: 2000, model: vgg19, gpuTypes: [A100-80GB]}
    - {name: span, submitSeconds: 400, gpus: 6, durationSeconds: 2500, model: resnet50, gpuTypes: [A100-80GB, V100-32GB]}
    - {name: long, submitSeconds: 1300, gpus: 2, durationSeconds: 10800, model: vgg19, gpuTypes: [V100-32GB]}
    - {name: short, submitSeconds: 3400, gpus: 1, durationSeconds: 600, model: lstm, gpuTypes: [V100-32GB]}
    - {name: mig0, submitSeconds: 4000, gpus: 1, durationSeconds: 900, model: resnet_train128, resources: {limits: {nvidia.com/mig-any: 1}}}
    - {name: mig1, submitSeconds: 4010, gpus: 1, durationSeconds: 900, model: resnet_train128, resources: {limits: {nvidia.com/mig-3g.40gb: 1}}}
    - {name: mig2, submitSeconds: 4020, gpus: 1, durationSeconds: 900, model: resnet_train128, resources: {limits: {nvidia.com/mig-any: 1}}}
    - {name: share0, submitSeconds: 5, gpus: 1, durationSeconds: 1200, model: bert-base, gpuTypes: [T4], resources: {smRequest: 0.3}}
    - {name: share1, submitSeconds: 6, gpus: 1, durationSeconds: 1200, model: resnet50, gpuTypes: [T4], resources: {smRequest: 0.5}}
    - {name: heavy, submitSeconds: 700, gpus: 1, durationSeconds: 900, model: resnet50, gpuTypes: [A100-80GB], resources: {cpu: 60, memory: 400Gi}}
  services:
    - {name: chat, model: bert-base, startSeconds: 0, endSeconds: 3000, sloMilliseconds: 100, maxBatch: 8, coldStartSeconds: 2, gpuTypes: [T4], resources: {cpu: 1, memory: 4Gi, gpuMemory: 4Gi, smRequest: 0.3, smLimit: 0.6}, arrivals: {poisson: {rate: 5}}}
    - {name: vision, model: resnet50, startSeconds: 100, endSeconds: 2000, sloMilliseconds: 200, maxBatch: 8, coldStartSeconds: 2, gpuTypes: [T4], resources: {cpu: 1, memory: 4Gi, gpuMemory: 4Gi}, arrivals: {poisson: {rate: 5}}}
";

/// Every job allocation the policy hands out.
struct Recorder {
    inner: Box<dyn Policy>,
    seen: Arc<Mutex<BTreeMap<JobId, Vec<Allocation>>>>,
}

impl Policy for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn round_length(&self) -> Option<SimDuration> {
        self.inner.round_length()
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        self.inner.schedule(view, actions);
        let mut seen = self.seen.lock().unwrap();
        for a in actions.iter() {
            if let Action::Start { job, allocation } | Action::Resize { job, allocation } = a {
                seen.entry(*job).or_default().push(allocation.clone());
            }
        }
    }
    fn wakeup(&self) -> Option<SimTime> {
        self.inner.wakeup()
    }
    fn stats(&self) -> Vec<(String, f64)> {
        self.inner.stats()
    }
}

fn run(policy: &str) {
    let catalog = GpuCatalog::builtin();
    let cluster = Cluster::from_yaml(CLUSTER, &catalog).unwrap();
    let work = tessera_trace::parse_workload_spec(WORKLOAD, &catalog).unwrap();
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let p = Box::new(Recorder {
        inner: build_policy(policy, &PolicyOptions::default()).unwrap(),
        seen: Arc::clone(&seen),
    });
    let mut config = SimConfig::default();
    serving_setup(policy)
        .expect("tessera policies have a serving setup")
        .unwrap()
        .apply(&mut config, &work, 7);
    let truth = TraceThroughput;
    let mut sim = Simulation::new(&cluster, &work, &truth, p, config);
    while sim.step().unwrap() {
        if let Err(e) = sim.check_invariants() {
            panic!("{policy} at {}: {e}", sim.now());
        }
    }
    let report = sim.into_report();
    assert_eq!(
        report.summary.finished,
        work.len(),
        "{policy}: every job finishes"
    );
    for s in &report.summary.services {
        assert_eq!(
            s.served, s.requests,
            "{policy}: service {} serves everything",
            s.service
        );
        assert!(s.requests > 0);
    }
    let stat = |k: &str| {
        report
            .policy_stats
            .iter()
            .find(|(n, _)| n == k)
            .map_or(0.0, |(_, v)| *v)
    };
    assert_eq!(
        stat("refused_actions"),
        0.0,
        "{policy}: a piece's action was refused"
    );
    let seen = seen.lock().unwrap();
    let by_name = |n: &str| work.jobs().iter().find(|j| &*j.name == n).unwrap();
    let end = |n: &str| {
        let id = by_name(n).id;
        report
            .jobs
            .iter()
            .find(|j| j.job == id)
            .unwrap()
            .finish
            .unwrap()
    };
    let allocs = |n: &str| seen.get(&by_name(n).id).cloned().unwrap_or_default();
    // HAP: the 6-GPU job, with 4 A100s held, spans the A100s and the V100s.
    let models: std::collections::BTreeSet<_> = allocs("span")
        .iter()
        .flat_map(|a| a.shares.iter().map(|s| cluster.nodes[s.node.index()].gpu))
        .collect();
    if policy == "tessera-no-hap" {
        assert_eq!(
            models.len(),
            1,
            "{policy}: without HAP no job spans GPU models"
        );
    } else {
        assert!(
            models.len() >= 2,
            "{policy}: the 6-GPU job spans GPU models: {:?}; blocker {:?}",
            allocs("span"),
            allocs("blocker")
        );
    }
    // Order: the short job preempts the long one on the V100s (full while the 6-GPU job
    // spans onto two of them) and ends first. Without HAP the 6-GPU job waits for the
    // A100s, the V100s have room for both, and no preemption is needed.
    if policy != "tessera-no-hap" {
        assert!(stat("preemptions") >= 1.0, "{policy}: no preemption");
    }
    assert!(
        end("short") < end("long"),
        "{policy}: the short job waited for the long one"
    );
    // MISO: the fixed profile is held as asked.
    if policy != "tessera-no-miso" {
        for a in allocs("mig1") {
            assert!(
                matches!(a.part(), Some(GpuPart::Mig(_))),
                "{policy}: mig1 held {a:?}"
            );
        }
    }
    // Dilu: shares on quotas, on the models they allow.
    if policy != "tessera-no-dilu" {
        for n in ["share0", "share1"] {
            for a in allocs(n) {
                assert!(
                    matches!(a.part(), Some(GpuPart::Quota { .. })),
                    "{policy}: {n} held {a:?}"
                );
            }
        }
    }
    for a in allocs("share0") {
        assert_eq!(
            catalog
                .get(cluster.nodes[a.shares[0].node.index()].gpu)
                .name,
            "T4"
        );
    }
    // Explicit CPU and memory are given.
    for a in allocs("heavy") {
        assert!(a.cpu().0 >= 60_000 && a.memory() >= tessera_model::Bytes::from_gib(400));
    }
}

#[test]
fn tessera_composes_every_piece_on_one_cluster() {
    run("tessera");
}

#[test]
fn every_ablation_finishes_the_same_world() {
    for p in [
        "tessera-no-synergy",
        "tessera-no-crius",
        "tessera-no-miso",
        "tessera-no-dilu",
        "tessera-no-hap",
    ] {
        run(p);
    }
}

/// The order of the training piece: where the run gives remaining-time estimates (every
/// trace job declares its duration), `tessera` runs the shortest remaining job first, as
/// SRTF; `tessera-las` keeps least attained service (arrival among equals). Two jobs wait
/// behind a third on one GPU; the later, shorter one starts first under `tessera` only.
#[test]
fn tessera_orders_by_remaining_time_where_the_run_gives_it() {
    let catalog = GpuCatalog::builtin();
    let cluster = Cluster::from_yaml(
        "apiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: one\nspec:\n  nodeGroups:\n    - {name: v, count: 1, gpu: V100-32GB, gpusPerNode: 1, cpus: 8, memory: 64Gi}\n",
        &catalog,
    )
    .unwrap();
    let work = tessera_trace::parse_workload_spec(
        "apiVersion: tessera/v1\nkind: Workload\nspec:\n  jobs:\n    - {name: first, submitSeconds: 0, gpus: 1, durationSeconds: 600, model: resnet50}\n    - {name: long, submitSeconds: 10, gpus: 1, durationSeconds: 36000, model: resnet50}\n    - {name: short, submitSeconds: 20, gpus: 1, durationSeconds: 300, model: resnet50}\n",
        &catalog,
    )
    .unwrap();
    let order = |policy: &str| {
        let p = build_policy(policy, &PolicyOptions::default()).unwrap();
        let truth = TraceThroughput;
        let mut sim = Simulation::new(&cluster, &work, &truth, p, SimConfig::default());
        while sim.step().unwrap() {
            sim.check_invariants().unwrap();
        }
        let report = sim.into_report();
        assert_eq!(report.summary.finished, 3, "{policy}");
        let start = |n: &str| {
            let id = work.jobs().iter().find(|j| &*j.name == n).unwrap().id;
            report
                .jobs
                .iter()
                .find(|j| j.job == id)
                .unwrap()
                .first_start
                .unwrap()
        };
        (start("short"), start("long"))
    };
    let (short, long) = order("tessera");
    assert!(short < long, "tessera: short {short:?} long {long:?}");
    let (short, long) = order("tessera-las");
    assert!(long < short, "tessera-las: short {short:?} long {long:?}");
}
