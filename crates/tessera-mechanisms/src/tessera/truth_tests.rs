use super::*;

use proptest::prelude::*;
use tessera_model::{
    Bytes, DeviceAlloc, GpuCatalog, GpuMask, GpuShareRequest, MigInstance, MigRequest, MilliCpu,
    NodeId, NodeShare, SimTime,
};

/// The CLI's mixed fixture: 16 A100-80GB, 8 H100, 16 V100-32GB, 8 A10.
const MIXED: &str = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: a100, count: 2, gpu: A100-80GB, gpusPerNode: 8, cpus: 64, memory: 512Gi}\n    - {name: h100, count: 1, gpu: H100-80GB, gpusPerNode: 8, cpus: 96, memory: 1Ti}\n    - {name: v100, count: 2, gpu: V100-32GB, gpusPerNode: 8, cpus: 48, memory: 256Gi}\n    - {name: a10, count: 2, gpu: A10, gpusPerNode: 4, cpus: 16, memory: 64Gi}\n";

fn cluster(yaml: &str) -> Cluster {
    Cluster::from_yaml(yaml, &GpuCatalog::builtin()).expect("test cluster parses")
}

fn mixed() -> Cluster {
    cluster(MIXED)
}

fn gavel() -> Cluster {
    cluster(&crate::gavel::gavel_108_yaml())
}

fn job(model: &str, gpus: u32) -> TrainingJob {
    let mut j = TrainingJob::simple(0, SimTime::ZERO, gpus, SimDuration::from_secs(1000));
    j.model = model.into();
    j
}

fn id(c: &Cluster, name: &str) -> GpuModelId {
    c.catalog.resolve(name).expect("catalog GPU")
}

/// The first node of type `gpu`.
fn node_of(c: &Cluster, gpu: GpuModelId, skip: usize) -> &tessera_model::Node {
    c.nodes
        .iter()
        .filter(|n| n.gpu == gpu)
        .nth(skip)
        .expect("node of type")
}

/// `gpus` whole GPUs on the `skip`-th node of `gpu`, with that node's proportional CPU and
/// memory (or `cpu_cores` if given).
fn whole(c: &Cluster, gpu: GpuModelId, skip: usize, gpus: u32) -> NodeShare {
    let n = node_of(c, gpu, skip);
    NodeShare::whole(
        n.id,
        gpus,
        MilliCpu(n.cpu.0 / u64::from(n.gpus) * u64::from(gpus)),
        Bytes(n.memory.0 / u64::from(n.gpus) * u64::from(gpus)),
    )
}

/// The allocation a job asks for: its GPUs, compactly, on its reference type, with its
/// CPU/memory request or the proportional share.
fn asked(c: &Cluster, j: &TrainingJob) -> Allocation {
    let r = reference(j, c).expect("reference");
    let mut left = j.gpus;
    let mut shares = Vec::new();
    let mut k = 0;
    while left > 0 {
        let take = left.min(r.per_node);
        let mut s = whole(c, r.gpu, k, take);
        if let Some(cpu) = j.cpu {
            s.cpu = MilliCpu(cpu.0 * u64::from(take) / u64::from(j.gpus));
        }
        if let Some(m) = j.memory {
            s.memory = Bytes(m.0 * u64::from(take) / u64::from(j.gpus));
        }
        shares.push(s);
        left -= take;
        k += 1;
    }
    Allocation::new(shares)
}

fn rate(j: &TrainingJob, a: &Allocation, c: &Cluster) -> f64 {
    ComposedTruth::shared().throughput(j, a, c)
}

fn speedup(j: &TrainingJob, a: &Allocation, c: &Cluster) -> f64 {
    rate(j, a, c) / j.reference_throughput()
}

const MODELS: &[&str] = &[
    "",
    "resnet50",
    "res50",
    "alexnet",
    "transformer_train32",
    "bert-1.3b",
    "wrn-2b",
    "moe-2.4b",
    "gpt2-large",
    "lm",
    "gnn_train128",
    "no-such-model",
];

#[test]
fn every_factor_is_one_on_the_requested_allocation() {
    for c in [mixed(), gavel()] {
        for model in MODELS {
            for gpus in [1, 2, 3, 4, 8, 16] {
                let mut j = job(model, gpus);
                for (cpu, batch) in [(None, None), (Some(MilliCpu::from_cores(2)), Some(64))] {
                    j.cpu = cpu.map(|c| MilliCpu(c.0 * u64::from(gpus)));
                    j.batch_size = batch;
                    let a = asked(&c, &j);
                    let f = ComposedTruth::shared()
                        .factors(&j, &a, &c, &[])
                        .expect("holds GPUs");
                    assert_eq!(f, Factors::ONE, "{model} x{gpus} cpu {cpu:?} on {}", c.name);
                    assert_eq!(rate(&j, &a, &c), j.reference_throughput());
                    let r = reference(&j, &c).expect("reference");
                    assert_eq!(
                        ComposedTruth::shared().rate_on(&j, &c, r.gpu, gpus),
                        j.reference_throughput(),
                        "{model} x{gpus}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_reference_type_is_the_most_numerous_ties_by_name() {
    let c = mixed();
    // 16 A100-80GB and 16 V100-32GB: the first name wins.
    let r = reference(&job("", 1), &c).expect("reference");
    assert_eq!(r.gpu, id(&c, "A100-80GB"));
    assert_eq!((r.per_node, r.cpu_per_gpu, r.mem_per_gpu), (8, 8.0, 64.0));
    // A typed job is read on its type (the most numerous of its types: 8 A10 and 8 H100,
    // a tie the name breaks).
    let mut typed = job("", 1);
    typed.gpu_types = vec![id(&c, "H100-80GB"), id(&c, "A10")];
    assert_eq!(reference(&typed, &c).map(|r| r.gpu), Some(id(&c, "A10")));
    typed.gpu_types = vec![id(&c, "H100-80GB"), id(&c, "V100-32GB")];
    assert_eq!(
        reference(&typed, &c).map(|r| r.gpu),
        Some(id(&c, "V100-32GB"))
    );
    // A type the cluster lacks: the cluster's choice.
    typed.gpu_types = vec![id(&c, "K80")];
    assert_eq!(
        reference(&typed, &c).map(|r| r.gpu),
        Some(id(&c, "A100-80GB"))
    );
}

#[test]
fn a_slower_gpu_type_is_slower_and_a_faster_one_faster() {
    let c = mixed();
    for model in ["", "resnet50", "transformer", "no-such-model", "gpt2-large"] {
        let j = job(model, 1);
        let a100 = speedup(
            &j,
            &Allocation::single(whole(&c, id(&c, "A100-80GB"), 0, 1)),
            &c,
        );
        let h100 = speedup(
            &j,
            &Allocation::single(whole(&c, id(&c, "H100-80GB"), 0, 1)),
            &c,
        );
        let v100 = speedup(
            &j,
            &Allocation::single(whole(&c, id(&c, "V100-32GB"), 0, 1)),
            &c,
        );
        let a10 = speedup(&j, &Allocation::single(whole(&c, id(&c, "A10"), 0, 1)), &c);
        assert_eq!(a100, 1.0, "{model}");
        assert!(
            h100 > 1.0 && v100 < 1.0 && a10 < 1.0,
            "{model}: {h100} {v100} {a10}"
        );
    }
    // Crius's cells for a large model: A100 beats V100 and A10.
    let j = job("bert-1.3b", 4);
    let on = |g: &str| speedup(&j, &Allocation::single(whole(&c, id(&c, g), 0, 4)), &c);
    assert_eq!(on("A100-80GB"), 1.0);
    assert!(
        on("V100-32GB") < 1.0 && on("A10") < 1.0,
        "{} {}",
        on("V100-32GB"),
        on("A10")
    );
}

#[test]
fn gavel_jobs_follow_the_matrix_ratio() {
    let c = gavel();
    let mut j = job("LM", 1);
    j.batch_size = Some(20);
    let m = GavelMatrix::builtin();
    let key = m.key_of(&j);
    let ratio = m.throughput(&key, "k80", 1, false).unwrap()
        / m.throughput(&key, "v100", 1, false).unwrap();
    // 36 of each type: K80 is first by name.
    let r = reference(&j, &c).unwrap();
    assert_eq!(r.gpu, id(&c, "K80"));
    let v100 = speedup(
        &j,
        &Allocation::single(whole(&c, id(&c, "V100-16GB"), 0, 1)),
        &c,
    );
    assert!(
        (v100 - 1.0 / ratio).abs() < 1e-9,
        "{v100} vs {}",
        1.0 / ratio
    );
    assert!(v100 > 1.0);
}

#[test]
fn more_gpus_than_asked_are_sublinear_and_fewer_are_slower() {
    let c = mixed();
    let a100 = id(&c, "A100-80GB");
    for model in ["", "resnet50", "bert-1.3b", "transformer"] {
        let j = job(model, 4);
        let at = |g| speedup(&j, &Allocation::single(whole(&c, a100, 0, g)), &c);
        let (two, four, eight) = (at(2), at(4), at(8));
        assert_eq!(four, 1.0);
        assert!(two < 1.0 && eight > 1.0, "{model}: {two} {eight}");
        assert!(
            eight < 2.0,
            "{model}: 8 GPUs are not twice as fast as 4: {eight}"
        );
    }
    // Spreading over more nodes than needed costs.
    let j = job("resnet50", 4);
    let spread = Allocation::new(vec![whole(&c, a100, 0, 2), whole(&c, a100, 1, 2)]);
    assert!(speedup(&j, &spread, &c) < 1.0);
}

#[test]
fn spanning_gpu_types_runs_between_them() {
    let c = mixed();
    let j = job("resnet50", 4);
    let h = speedup(
        &j,
        &Allocation::single(whole(&c, id(&c, "H100-80GB"), 0, 4)),
        &c,
    );
    let v = speedup(
        &j,
        &Allocation::new(vec![whole(&c, id(&c, "V100-32GB"), 0, 4)]),
        &c,
    );
    let both = speedup(
        &j,
        &Allocation::new(vec![
            whole(&c, id(&c, "H100-80GB"), 0, 2),
            whole(&c, id(&c, "V100-32GB"), 0, 2),
        ]),
        &c,
    );
    assert!(v < both && both < h, "{v} {both} {h}");
}

fn mig(c: &Cluster, gpu: GpuModelId, profile: &str) -> Allocation {
    let n = node_of(c, gpu, 0);
    let geo = c.catalog.mig_geometry(gpu).expect("MIG GPU");
    let p = geo.find_profile(profile).expect("profile");
    Allocation::single(NodeShare {
        node: n.id,
        gpus: 0,
        cpu: MilliCpu(n.cpu.0 / u64::from(n.gpus)),
        memory: Bytes(n.memory.0 / u64::from(n.gpus)),
        devices: Some(DeviceAlloc {
            gpus: GpuMask::one(0),
            part: GpuPart::Mig(MigInstance {
                profile: p,
                start: 0,
            }),
        }),
    })
}

fn quota(c: &Cluster, gpu: GpuModelId, gpu_index: u32, req: u16, lim: u16) -> Allocation {
    let n = node_of(c, gpu, 0);
    Allocation::single(NodeShare {
        node: n.id,
        gpus: 0,
        cpu: MilliCpu(n.cpu.0 / u64::from(n.gpus)),
        memory: Bytes(n.memory.0 / u64::from(n.gpus)),
        devices: Some(DeviceAlloc {
            gpus: GpuMask::one(gpu_index),
            part: GpuPart::Quota {
                sm_request: req,
                sm_limit: lim,
                memory: Bytes::from_gib(10),
            },
        }),
    })
}

#[test]
fn a_mig_slice_is_slower_than_the_whole_gpu_as_miso_measured() {
    let c = mixed();
    let a100 = id(&c, "A100-80GB");
    let table = crate::miso::miso_table();
    for model in [
        "resnet_train128",
        "transformer_train32",
        "",
        "no-such-model",
        "bert_train8",
    ] {
        let j = job(model, 1);
        let whole_gpu = speedup(&j, &Allocation::single(whole(&c, a100, 0, 1)), &c);
        let three = speedup(&j, &mig(&c, a100, "3g.40gb"), &c);
        let one = speedup(&j, &mig(&c, a100, "1g.10gb"), &c);
        let seven = speedup(&j, &mig(&c, a100, "7g.80gb"), &c);
        assert_eq!(whole_gpu, 1.0);
        assert!(
            one > 0.0 && one <= three && three < 1.0,
            "{model}: {one} {three}"
        );
        assert!(seven <= whole_gpu, "{model}");
        if let Some(s) = table.get(model).and_then(|s| s[3]) {
            assert!((three - s).abs() < 1e-12, "{model}: {three} vs MISO's {s}");
        }
    }
    // A job that asked for a 3g slice runs at its trace's speed there, faster on the GPU.
    let mut j = job("resnet_train128", 1);
    j.mig = Some(MigRequest::Profile("3g.40gb".into()));
    assert_eq!(speedup(&j, &mig(&c, a100, "3g.40gb"), &c), 1.0);
    assert!(speedup(&j, &Allocation::single(whole(&c, a100, 0, 1)), &c) > 1.0);
}

#[test]
fn a_quota_is_slower_than_the_whole_gpu_and_neighbours_interfere() {
    let c = mixed();
    let a100 = id(&c, "A100-80GB");
    for model in [
        "bert-base",
        "gpt2-large",
        "resnet_train128",
        "",
        "no-such-model",
    ] {
        let j = job(model, 1);
        let part = speedup(&j, &quota(&c, a100, 0, 200, 200), &c);
        let half = speedup(&j, &quota(&c, a100, 0, 500, 500), &c);
        assert!(
            part > 0.0 && part < half && half <= 1.0,
            "{model}: {part} {half}"
        );
        // Its request up to a limit of the whole GPU, alone: the whole GPU's speed.
        assert_eq!(speedup(&j, &quota(&c, a100, 0, 200, 1000), &c), 1.0);
        // A neighbour's quota on the same GPU: MISO's MPS penalty; on another GPU: none.
        let other = job("bert-base", 1);
        let mine = quota(&c, a100, 0, 500, 500);
        let same = quota(&c, a100, 0, 500, 500);
        let elsewhere = quota(&c, a100, 1, 500, 500);
        let t = ComposedTruth::shared();
        let beside = t.throughput_among(&j, &mine, &c, &[(&other, &same)]);
        let apart = t.throughput_among(&j, &mine, &c, &[(&other, &elsewhere)]);
        assert_eq!(apart, rate(&j, &mine, &c));
        assert!(
            (beside / apart - (1.0 - MPS_PENALTY)).abs() < 1e-12,
            "{model}"
        );
    }
    // A job that asked for 40% of a GPU runs at its trace's speed on a 40% quota.
    let mut j = job("bert-base", 1);
    j.gpu_share = Some(GpuShareRequest {
        sm_permille: 400,
        memory: None,
    });
    assert_eq!(speedup(&j, &quota(&c, a100, 0, 400, 400), &c), 1.0);
    assert!(speedup(&j, &Allocation::single(whole(&c, a100, 0, 1)), &c) > 1.0);
}

#[test]
fn fewer_cpus_than_asked_slow_a_cpu_sensitive_model() {
    let c = mixed();
    let v100 = id(&c, "V100-32GB");
    let mut j = job("alexnet", 1);
    j.gpu_types = vec![v100];
    let fair = Allocation::single(whole(&c, v100, 0, 1));
    assert_eq!(speedup(&j, &fair, &c), 1.0);
    let mut starved = fair.clone();
    starved.shares[0].cpu = MilliCpu::from_cores(1);
    let mut rich = fair.clone();
    rich.shares[0].cpu = MilliCpu::from_cores(24);
    let (s, r) = (speedup(&j, &starved, &c), speedup(&j, &rich, &c));
    assert!(s < 1.0 && r > 1.0, "{s} {r}");
    // An explicit request is the reference: 1 core asked, 1 core held.
    j.cpu = Some(MilliCpu::from_cores(1));
    assert_eq!(speedup(&j, &starved, &c), 1.0);
    // Models Synergy did not profile do not care.
    let plain = job("no-such-model", 1);
    assert_eq!(speedup(&plain, &starved, &c), speedup(&plain, &fair, &c));
}

#[test]
fn an_allocation_without_gpus_runs_nothing() {
    let c = mixed();
    let j = job("resnet50", 1);
    assert_eq!(rate(&j, &Allocation::default(), &c), 0.0);
    let off = Allocation::single(NodeShare::whole(NodeId(9999), 1, MilliCpu(0), Bytes(0)));
    assert_eq!(rate(&j, &off, &c), 0.0);
}

#[test]
fn estimates_cover_every_type_and_match_the_truth() {
    let c = mixed();
    let j = job("resnet50", 2);
    let t = ComposedTruth::shared();
    let e = t.config_estimates(&j, &c);
    for g in ["A100-80GB", "H100-80GB", "V100-32GB", "A10"] {
        let gpu = id(&c, g);
        let two = e.get(gpu, 2).expect("2 GPUs estimated");
        let alloc = Allocation::single(whole(&c, gpu, 0, 2));
        assert!((two.throughput - rate(&j, &alloc, &c)).abs() < 1e-12, "{g}");
    }
    let k = ComposedEstimator.profile(&j, &c, &mut SimRng::seed_from_u64(1));
    assert_eq!(k.get::<ComposedEstimates>().map(|x| &x.0), Some(&e));
}

#[test]
fn tessera_policies_get_the_profilers_of_the_pieces_they_read() {
    let o = TruthOptions::default();
    assert!(policy_profiler("fifo", &o).is_none());
    assert!(policy_profiler("las+tune", &o).is_none());
    for p in super::super::policy::POLICIES {
        let prof = policy_profiler(p.name, &o).expect("a tessera policy has a profiler");
        let synergy = !p.name.contains("no-synergy");
        // Synergy's optimistic profiling costs its 60 s; the estimators are free.
        assert_eq!(prof.cost() > SimDuration::ZERO, synergy, "{}", p.name);
    }
}

/// Regression: Crius's pass reads plain `ConfigEstimates` (or its cells); a job of a model
/// without Crius cells got neither, so the `tessera` policy placed it blind on the cluster's
/// first type (an A100 even with H100s free) and never upgraded it.
#[test]
fn a_model_without_cells_gets_estimates_crius_reads() {
    let c = mixed();
    let j = job("resnet50", 1);
    let prof = policy_profiler("tessera", &TruthOptions::default()).unwrap();
    let k = prof.profile(&j, &c, &mut SimRng::seed_from_u64(1));
    assert!(k.get::<crate::crius::perf::CriusCells>().is_none());
    let e = k.get::<ConfigEstimates>().expect("Crius reads these");
    let rate = |name: &str| e.get(id(&c, name), 1).map_or(0.0, |x| x.throughput);
    assert!(rate("H100-80GB") > rate("A100-80GB"));
    assert!(rate("A100-80GB") > rate("V100-32GB") && rate("V100-32GB") > 0.0);
}

fn arb_cluster() -> impl Strategy<Value = Cluster> {
    let group = (
        prop::sample::select(vec![
            "A100-80GB",
            "A100-40GB",
            "H100-80GB",
            "V100-32GB",
            "V100-16GB",
            "A10",
            "K80",
            "T4",
            "P100",
        ]),
        1u32..4,
        prop::sample::select(vec![1u32, 2, 4, 8]),
        1u32..128,
        1u32..1024,
    );
    prop::collection::vec(group, 1..4).prop_map(|groups| {
        let mut y = String::from("apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n");
        for (i, (gpu, count, per_node, cpus, mem)) in groups.iter().enumerate() {
            y.push_str(&format!(
                "    - {{name: g{i}, count: {count}, gpu: {gpu}, gpusPerNode: {per_node}, cpus: {cpus}, memory: {mem}Gi}}\n"
            ));
        }
        cluster(&y)
    })
}

fn arb_job() -> impl Strategy<Value = TrainingJob> {
    (
        prop::sample::select(MODELS.to_vec()),
        0u32..40,
        prop::option::of(0u32..4096),
        prop::option::of(0u64..200_000),
        prop::option::of(0u64..1 << 42),
        0u8..4,
        1u64..1_000_000,
        1u64..10_000_000,
        prop::collection::vec(0u16..14, 0..3),
    )
        .prop_map(|(model, gpus, batch, cpu, mem, kind, iters, secs, types)| {
            let mut j = job(model, gpus);
            j.batch_size = batch;
            j.cpu = cpu.map(MilliCpu);
            j.memory = mem.map(Bytes);
            j.iterations = iters;
            j.duration = SimDuration::from_secs(secs);
            j.gpu_types = types.into_iter().map(GpuModelId).collect();
            match kind {
                1 => j.mig = Some(MigRequest::Any),
                2 => j.mig = Some(MigRequest::Profile("3g.40gb".into())),
                3 => {
                    j.gpu_share = Some(GpuShareRequest {
                        sm_permille: 0,
                        memory: None,
                    })
                }
                _ => {}
            }
            j
        })
}

/// Shares on (possibly missing) nodes, of whole GPUs, MIG instances (any profile index) or
/// quotas (any request and limit), with any plan.
fn arb_alloc() -> impl Strategy<Value = Allocation> {
    let share = (
        0u32..40,
        0u32..10,
        0u64..1_000_000,
        0u64..1 << 40,
        0u8..3,
        any::<u8>(),
        any::<u8>(),
        0u16..1200,
        0u16..1200,
    )
        .prop_map(|(node, gpus, cpu, mem, part, a, b, req, lim)| {
            let devices = match part {
                0 => None,
                1 => Some(DeviceAlloc {
                    gpus: GpuMask(u64::from(a)),
                    part: GpuPart::Mig(MigInstance {
                        profile: a,
                        start: b,
                    }),
                }),
                _ => Some(DeviceAlloc {
                    gpus: GpuMask(u64::from(b)),
                    part: GpuPart::Quota {
                        sm_request: req,
                        sm_limit: lim,
                        memory: Bytes(0),
                    },
                }),
            };
            NodeShare {
                node: NodeId(node),
                gpus,
                cpu: MilliCpu(cpu),
                memory: Bytes(mem),
                devices,
            }
        });
    (
        prop::collection::vec(share, 0..4),
        prop::option::of((0u32..9, 0u32..9, 0u32..9)),
    )
        .prop_map(|(shares, plan)| Allocation {
            shares: shares.into_iter().collect(),
            plan: plan.map(|(data, tensor, pipeline)| ParallelPlan {
                data,
                tensor,
                pipeline,
            }),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any job on any allocation of any cluster: a finite rate, never negative, positive
    /// whenever the allocation holds a GPU of the cluster, the same when asked twice.
    #[test]
    fn rates_are_finite_and_positive_on_any_input(
        c in arb_cluster(),
        j in arb_job(),
        a in arb_alloc(),
        n in arb_alloc(),
    ) {
        let t = ComposedTruth::shared();
        let other = job("bert-base", 1);
        let r = t.throughput_among(&j, &a, &c, &[(&other, &n)]);
        prop_assert!(r.is_finite() && r >= 0.0, "{r}");
        let holds = a.shares.iter().any(|s| {
            s.device_count() > 0 && c.nodes.get(s.node.index()).is_some()
        });
        prop_assert_eq!(r > 0.0, holds, "{}", r);
        prop_assert_eq!(r.to_bits(), t.throughput_among(&j, &a, &c, &[(&other, &n)]).to_bits());
        for (gpu, _, _) in crate::gavel::matrix::gpu_types(&c) {
            let e = t.rate_on(&j, &c, gpu, 1 + j.gpus % 9);
            prop_assert!(e.is_finite() && e > 0.0, "{}", e);
        }
    }
}

/// docs/truth.md's worked example, figure for figure.
#[test]
fn the_worked_example_of_the_docs() {
    let c = mixed();
    let t = ComposedTruth::shared();
    let mut j = job("res50", 2);
    j.duration = SimDuration::from_secs(3600);
    j.iterations = 7200;
    let close = |a: f64, b: f64| (a - b).abs() < 5e-4;
    // Read on A100-80GB (16 GPUs, tied with V100-32GB, first by name): 8 cores, 64 GiB per GPU.
    let r = reference(&j, &c).unwrap();
    assert_eq!(
        (r.gpu, r.cpu_per_gpu, r.mem_per_gpu),
        (id(&c, "A100-80GB"), 8.0, 64.0)
    );
    let on = |g: &str, n: u32| {
        t.factors(&j, &Allocation::single(whole(&c, id(&c, g), 0, n)), &c, &[])
            .unwrap()
            .type_and_count
    };
    assert!(close(on("A100-80GB", 4), 1.94), "{}", on("A100-80GB", 4));
    assert!(close(on("H100-80GB", 2), 1.7179), "{}", on("H100-80GB", 2));
    assert!(close(on("V100-32GB", 2), 0.4006), "{}", on("V100-32GB", 2));
    let mut a = Allocation::single(whole(&c, id(&c, "V100-32GB"), 0, 2));
    a.shares[0].cpu = MilliCpu::from_cores(4);
    let f = t.factors(&j, &a, &c, &[]).unwrap();
    assert!(close(f.cpu_memory, 0.74), "{f:?}");
    assert!(close(rate(&j, &a, &c), 0.5929), "{}", rate(&j, &a, &c));
    let mut one = job("res50", 1);
    one.duration = SimDuration::from_secs(3600);
    one.iterations = 3600;
    let f = t
        .factors(&one, &mig(&c, id(&c, "A100-80GB"), "3g.40gb"), &c, &[])
        .unwrap();
    assert!(close(f.sub_gpu, 0.9375), "{f:?}");
    let q = quota(&c, id(&c, "A100-80GB"), 0, 300, 300);
    let other = job("bert-base", 1);
    let f = t.factors(&one, &q, &c, &[(&other, &q)]).unwrap();
    assert!(
        close(f.sub_gpu, 0.7927) && close(f.interference, 0.85),
        "{f:?}"
    );
}

/// A policy that names no CPU or memory in its allocations (MISO's) gives the job what it
/// asked, not zero: resnet50 on its own 2g slice ran 11.5x slower than its trace under the
/// composed truth because Synergy's table read 0 CPUs.
#[test]
fn an_allocation_naming_no_cpu_or_memory_runs_as_asked() {
    let c = mixed();
    let a100 = id(&c, "A100-80GB");
    let mut j = job("resnet_train128", 1);
    j.mig = Some(MigRequest::Profile("2g.20gb".into()));
    let mut alloc = mig(&c, a100, "2g.20gb");
    for s in &mut alloc.shares {
        s.cpu = MilliCpu(0);
        s.memory = Bytes(0);
    }
    assert_eq!(speedup(&j, &alloc, &c), 1.0);
}
