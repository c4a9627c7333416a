//! Behaviour of the planner: cost arithmetic by hand, rounding and LP invariants, valid plans,
//! homogeneous sanity (data, tensor and expert parallelism rediscovered), the repro ordering,
//! and bad inputs.

use proptest::prelude::*;
use tessera_model::GpuCatalog;
use tessera_perf::collective::{Collective, CollectiveLinks, Fabric, Link};
use tessera_plan::builtin::{self, TransformerShape};
use tessera_plan::cost::{shard_lengths, CostModel, Exchange};
use tessera_plan::graph::{GraphSpec, Prop, Role};
use tessera_plan::search::{evaluate, search, validate, Space, Step};
use tessera_plan::{synth, Devices, PlanClusterSpec, PlanError};

fn fabric(latency_s: f64, bytes_per_s: f64) -> Fabric {
    let l = CollectiveLinks::uniform(Link::new(latency_s, bytes_per_s));
    Fabric {
        intra_node: l,
        inter_node: l,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-15)
}

/// x[8,4] · w[4,6] → y[8,6] → loss: two operators.
fn two_op_graph() -> GraphSpec {
    GraphSpec::from_text(
        r#"{"name": "two", "loss": "loss",
            "tensors": [
              {"name": "x", "shape": [8, 4], "role": "input"},
              {"name": "labels", "shape": [8], "dtype": "i64", "role": "input"},
              {"name": "w", "shape": [4, 6], "role": "parameter"},
              {"name": "y", "shape": [8, 6]},
              {"name": "loss", "shape": []}],
            "ops": [
              {"name": "y", "kind": "einsum", "inputs": ["x", "w"], "output": "y", "dims": "nd,dh->nh"},
              {"name": "loss", "kind": "loss", "inputs": ["y", "labels"], "output": "loss",
               "dims": "nh,n->", "fixed": "h"}]}"#,
    )
    .unwrap()
}

#[test]
fn two_operator_costs_by_hand() {
    let g = two_op_graph().validate().unwrap();
    // matmul 2·8·4·6 = 384 FLOPs; loss 4·48 = 192 FLOPs.
    assert_eq!(g.ops[0].flops, 384.0);
    assert_eq!(g.ops[1].flops, 192.0);
    let d = Devices::uniform(2, 2, 1e9, fabric(0.0, 1e9));
    let m = CostModel::new(&g, &d, &synth::equal(&d));
    let (dp, cost) = synth::data_parallel(&g, &d, &synth::equal(&d)).unwrap();
    // Gradient all-reduce of w (96 B): 2·(1/2)·96/1e9; matmul 3·384/2/1e9; loss 3·192/2/1e9.
    let expected = 96e-9 + 576e-9 + 288e-9;
    assert!(close(cost, expected), "{cost} vs {expected}");
    assert!(close(evaluate(&g, &dp, &m).seconds, expected));

    // Heterogeneous: 3 and 1 GFLOP/s at 3:1 ratios give shards 6 and 2, both 0.25 ns/FLOP.
    let mut het = Devices::uniform(2, 2, 1e9, fabric(0.0, 1e9));
    het.devices[0].flops_per_s = 3e9;
    let prop = synth::proportional(&het);
    assert_eq!(shard_lengths(&prop, 8), vec![6, 2]);
    let mh = CostModel::new(&g, &het, &prop);
    assert!(close(mh.compute(384.0, Some(8)), 3.0 * 384.0 * 0.25e-9));
    // Replicated work waits for the slowest device.
    assert!(close(mh.compute(384.0, None), 3.0 * 384.0 / 1e9));
}

#[test]
fn exchange_costs_by_hand_and_padded_vs_grouped() {
    let g = two_op_graph().validate().unwrap();
    let d = Devices::uniform(2, 2, 1e9, fabric(1e-6, 1e9));
    let m = CostModel::new(&g, &d, &synth::equal(&d));
    // y is 192 B. All-gather forward + reduce-scatter backward, even halves, padded:
    // 2 · ((p−1)α + (p−1)·96/B).
    let c = m
        .comm(Prop::Gather(0), Prop::Identity, 192.0, &[8, 6])
        .unwrap();
    assert_eq!(c.forward, Some(Collective::AllGather));
    assert_eq!(c.backward, Some(Collective::ReduceScatter));
    assert_eq!(c.exchange, Exchange::Padded);
    assert!(close(c.seconds, 2.0 * (1e-6 + 96e-9)));
    // All-reduce both ways: 2 · (2(p−1)α + 2(p−1)/p · n/B).
    let ar = m
        .comm(Prop::Reduce, Prop::Identity, 192.0, &[8, 6])
        .unwrap();
    assert!(close(ar.seconds, 2.0 * (2e-6 + 192e-9)));
    // Slicing a replica is free.
    assert_eq!(
        m.comm(Prop::Identity, Prop::Gather(1), 192.0, &[8, 6])
            .unwrap()
            .seconds,
        0.0
    );

    // Skewed shards over 4 devices: padding to the 70% shard costs 3·0.7·n/B per direction,
    // four broadcasts cost n/B + 4·2α: grouped wins.
    let d4 = Devices::uniform(4, 4, 1e9, fabric(1e-6, 1e9));
    let skew = [0.7, 0.1, 0.1, 0.1];
    let m4 = CostModel::new(&g, &d4, &skew);
    let n = 1e6;
    let c4 = m4
        .comm(Prop::Gather(0), Prop::Identity, n, &[10, 1000])
        .unwrap();
    assert_eq!(c4.exchange, Exchange::Grouped);
    assert!(close(c4.seconds, 2.0 * (4.0 * 2e-6 + n / 1e9)));
    // Even shards: padding is cheaper (3/4 · n/B + 3α).
    let m4e = CostModel::new(&g, &d4, &[0.25; 4]);
    let c4e = m4e
        .comm(Prop::Gather(0), Prop::Identity, n, &[8, 1000])
        .unwrap();
    assert_eq!(c4e.exchange, Exchange::Padded);
    assert!(close(c4e.seconds, 2.0 * (3e-6 + 0.75 * n / 1e9)));
}

#[test]
fn search_cost_matches_evaluation_and_beats_data_parallel() {
    for (name, spec) in [
        ("vgg", builtin::vgg19(64)),
        ("mlp", builtin::mlp(32, 1024, 4096, 2)),
        ("moe", small_moe(64, 8)),
    ] {
        let g = spec.validate().unwrap();
        let d = builtin::mixed_cluster(1, 1, 1);
        let r = synth::proportional(&d);
        let m = CostModel::new(&g, &d, &r);
        let full = search(&g, &m, Space::Full, f64::INFINITY);
        let dp = search(&g, &m, Space::DataParallel, f64::INFINITY);
        let (fp, dpp) = (full.program.unwrap(), dp.program.unwrap());
        assert!(close(evaluate(&g, &fp, &m).seconds, full.cost), "{name}");
        assert!(close(evaluate(&g, &dpp, &m).seconds, dp.cost), "{name}");
        assert!(
            full.cost <= dp.cost * (1.0 + 1e-12),
            "{name}: {} > {}",
            full.cost,
            dp.cost
        );
        validate(&g, &fp).unwrap();
        validate(&g, &dpp).unwrap();
    }
}

fn small_moe(batch: u64, experts: u64) -> GraphSpec {
    let t = TransformerShape {
        batch,
        seq: 128,
        d_model: 768,
        heads: 12,
        d_ff: 3072,
        layers: 2,
    };
    builtin::language_model("moe", t, 1024, Some(experts))
}

#[test]
fn every_builtin_plan_is_valid_and_ends_reduced() {
    let d = builtin::mixed_cluster(1, 2, 2);
    for name in ["vgg19", "vit", "bert-base", "bert-moe", "gpt-2x256"] {
        let g = builtin::by_name(name, d.len()).unwrap().validate().unwrap();
        let syn = synth::synthesize(&g, &d).unwrap();
        validate(&g, &syn.program).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            (syn.ratios.iter().sum::<f64>() - 1.0).abs() < 1e-9,
            "{name}"
        );
        // The last step leaves the loss as partial sums.
        let reduced = syn.program.steps.iter().any(|s| match s {
            Step::Compute { op, rule } => {
                g.ops[*op].output == g.loss && g.ops[*op].rules[*rule].output == Prop::Reduce
            }
            Step::Comm { tensor, to, .. } => *tensor == g.loss && *to == Prop::Reduce,
            _ => false,
        });
        assert!(reduced, "{name}");
    }
}

#[test]
fn data_parallelism_survives_an_operator_without_a_batch() {
    // A reshape folds the batch away: data parallelism must gather before it.
    let spec = GraphSpec::from_text(
        r#"{"name": "fold", "loss": "loss",
            "tensors": [
              {"name": "x", "shape": [8, 4], "role": "input"},
              {"name": "w", "shape": [4, 6], "role": "parameter"},
              {"name": "y", "shape": [8, 6]},
              {"name": "flat", "shape": [48]},
              {"name": "loss", "shape": []}],
            "ops": [
              {"name": "y", "kind": "einsum", "inputs": ["x", "w"], "output": "y", "dims": "nd,dh->nh"},
              {"name": "flat", "kind": "reshape", "inputs": ["y"], "output": "flat", "dims": "nh->f"},
              {"name": "loss", "kind": "reduce", "inputs": ["flat"], "output": "loss", "dims": "f->"}]}"#,
    )
    .unwrap();
    let g = spec.validate().unwrap();
    assert_eq!(g.ops[1].batch_rule, None);
    let d = Devices::uniform(2, 2, 1e9, fabric(0.0, 1e9));
    let (p, _) = synth::data_parallel(&g, &d, &synth::equal(&d)).unwrap();
    validate(&g, &p).unwrap();
    let syn = synth::synthesize(&g, &d).unwrap();
    validate(&g, &syn.program).unwrap();
}

#[test]
fn ratio_lp_moves_away_from_speed_proportional_when_padded_exchanges_dominate() {
    // Expert parallelism's all-to-alls are padded to the largest shard; on a slow network the
    // LP trades the fast device's extra compute for smaller padded exchanges.
    let g = small_moe(64, 8).validate().unwrap();
    let mut d = builtin::mixed_cluster(1, 1, 3);
    d.fabric.inter_node = CollectiveLinks::uniform(Link::new(20e-6, 0.3e9));
    // The LP itself: for the program searched under speed-proportional ratios, it proposes
    // ratios away from them, and the program costs less under them.
    let prop = synth::proportional(&d);
    let at_prop = CostModel::new(&g, &d, &prop);
    let program = search(&g, &at_prop, Space::Full, f64::INFINITY)
        .program
        .unwrap();
    let ev = evaluate(&g, &program, &at_prop);
    let next = tessera_plan::lp::solve_ratios(&ev.linear, &d.speeds()).unwrap();
    let lp_moved = next
        .iter()
        .zip(&prop)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(lp_moved > 0.05, "{next:?}");
    let at_next = evaluate(&g, &program, &CostModel::new(&g, &d, &next)).seconds;
    assert!(at_next < ev.seconds, "{at_next} vs {}", ev.seconds);
    // The synthesis ends away from speed-proportional too. (Since data parallelism runs
    // expert layers expert-parallel, its even split is already cheaper than the program
    // above, and the synthesis may start from it instead of needing LP rounds.)
    let syn = synth::synthesize(&g, &d).unwrap();
    assert!(
        syn.history.windows(2).all(|w| w[1] <= w[0]),
        "{:?}",
        syn.history
    );
    assert!(syn.seconds <= at_next * (1.0 + 1e-9));
    let moved = syn
        .ratios
        .iter()
        .zip(&prop)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(moved > 0.05, "{:?}", syn.ratios);
    assert!((syn.ratios.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    // Still the fastest device never gets less than a slower one.
    assert!(syn.ratios[0] >= syn.ratios[1] - 1e-9);
    validate(&g, &syn.program).unwrap();
}

#[test]
fn a_broken_program_is_rejected() {
    let g = two_op_graph().validate().unwrap();
    let d = Devices::uniform(2, 2, 1e9, fabric(0.0, 1e9));
    let (mut p, _) = synth::data_parallel(&g, &d, &synth::equal(&d)).unwrap();
    // Drop the placement of x: the matmul then reads a tensor nobody holds.
    p.steps
        .retain(|s| !matches!(s, Step::Place { tensor: 0, .. }));
    assert!(validate(&g, &p).is_err());
}

fn homogeneous_8() -> Devices {
    // 8 identical GPUs in one machine, NVLink-class links.
    Devices::uniform(8, 8, 10e12, fabric(5e-6, 100e9))
}

#[test]
fn homogeneous_vgg_is_data_parallel() {
    // ImageNet-sized inputs, where activations outweigh parameters in every layer. (At CIFAR
    // size the last convolutions hold more weight than activation bytes, and the cost model,
    // which does not overlap gradient all-reduce with backward, prefers tensor parallelism.)
    let g = builtin::vgg19_with(256, 224, 0).validate().unwrap();
    let d = homogeneous_8();
    let syn = synth::synthesize(&g, &d).unwrap();
    for s in &syn.program.steps {
        match s {
            Step::Compute { op, rule } => {
                assert_eq!(
                    Some(*rule),
                    g.ops[*op].batch_rule,
                    "{} is not batch-split",
                    g.ops[*op].name
                )
            }
            Step::Place { tensor, prop } if g.tensors[*tensor].role == Role::Parameter => {
                assert_eq!(
                    *prop,
                    Prop::Identity,
                    "{} is not replicated",
                    g.tensors[*tensor].name
                )
            }
            Step::Comm { forward, .. } => assert!(forward.is_none(), "activations exchanged"),
            _ => {}
        }
    }
    // Even split on identical devices.
    assert!(syn.ratios.iter().all(|r| (r - 0.125).abs() < 1e-9));
}

#[test]
fn homogeneous_large_mlp_is_megatron_column_then_row() {
    // 16 rows through 8192 → 32768 → 8192: parameters (2 GiB per layer) dwarf activations.
    let g = builtin::mlp(16, 8192, 32768, 2).validate().unwrap();
    let d = homogeneous_8();
    let syn = synth::synthesize(&g, &d).unwrap();
    let splits = synth::compute_splits(&g, &syn.program);
    for l in 0..2 {
        // fc1 "nd,dh->nh" split on h: column-parallel; fc2 "nh,hd->nd" split on h: row-parallel.
        assert_eq!(splits[&format!("l{l}.fc1")], Some('h'), "{splits:?}");
        assert_eq!(splits[&format!("l{l}.fc2")], Some('h'), "{splits:?}");
    }
    let mut sharded_weights = 0;
    let mut reductions = 0;
    for s in &syn.program.steps {
        match s {
            Step::Place { tensor, prop } if g.tensors[*tensor].role == Role::Parameter => {
                assert!(
                    matches!(prop, Prop::Gather(_)),
                    "{} replicated",
                    g.tensors[*tensor].name
                );
                sharded_weights += 1;
            }
            Step::Comm {
                from: Prop::Reduce,
                forward: Some(c),
                ..
            } => {
                assert!(matches!(
                    c,
                    Collective::AllReduce | Collective::ReduceScatter
                ));
                reductions += 1;
            }
            _ => {}
        }
    }
    assert_eq!(sharded_weights, 4);
    assert!(reductions >= 2, "row-parallel partial sums must be reduced");
}

#[test]
fn homogeneous_moe_is_expert_parallel_with_all_to_all() {
    let g = small_moe(256, 16).validate().unwrap();
    let d = homogeneous_8();
    let syn = synth::synthesize(&g, &d).unwrap();
    let splits = synth::compute_splits(&g, &syn.program);
    assert_eq!(splits["layer1.expert_ff1"], Some('e'), "{splits:?}");
    assert_eq!(splits["layer1.expert_ff2"], Some('e'), "{splits:?}");
    let all_to_all = syn
        .program
        .steps
        .iter()
        .filter(|s| {
            matches!(
                s,
                Step::Comm {
                    forward: Some(Collective::AllToAll),
                    ..
                }
            )
        })
        .count();
    assert!(all_to_all >= 2, "tokens go to experts and back");
    // Expert weights are sharded along the expert axis, not replicated.
    for s in &syn.program.steps {
        if let Step::Place { tensor, prop } = s {
            if g.tensors[*tensor].name.contains("expert_w") {
                assert_eq!(*prop, Prop::Gather(0));
            }
        }
    }
}

#[test]
fn repro_ordering_on_every_case() {
    let cases =
        tessera_plan::repro::run(&tessera_plan::repro::MODELS, &tessera_plan::repro::KS).unwrap();
    assert_eq!(cases.len(), 16);
    for c in &cases {
        // Every baseline fits in 16 GB with HAP's models at 32 samples per GPU.
        let (eq, prop) = (c.dp_equal_s.unwrap(), c.dp_proportional_s.unwrap());
        assert!(c.synthesized_s <= prop.min(eq) * (1.0 + 1e-12), "{c:?}");
        // Dense models gain from a speed-proportional split; BERT-MoE's expert-parallel
        // baseline may not (uneven expert shards are padded), so the synthesis starts from
        // the better of the two.
        if c.model != "bert-moe" {
            assert!(prop <= eq * (1.0 + 1e-12), "{c:?}");
        }
        assert!(c.speedup.unwrap() >= 1.0 - 1e-12);
        assert!(c.synthesized_gib <= 16.0, "{c:?}");
        // HAP's calibrated constants keep every case within the published best.
        assert!(
            c.speedup.unwrap() <= tessera_plan::repro::PUBLISHED_MAX_SPEEDUP,
            "{c:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn synthesis_is_valid_deterministic_and_no_worse_than_data_parallel(
        batch in 1u64..300,
        d in 16u64..3000,
        hidden in 16u64..9000,
        layers in 1u64..4,
        speeds in prop::collection::vec(1.0f64..8.0, 1..7),
        per_machine in 1usize..4,
        gbytes_per_s in 0.5f64..200.0,
    ) {
        let g = builtin::mlp(batch, d, hidden, layers).validate().unwrap();
        let mut devices = Devices::uniform(speeds.len(), per_machine, 1e12, fabric(10e-6, gbytes_per_s * 1e9));
        for (dev, s) in devices.devices.iter_mut().zip(&speeds) {
            dev.flops_per_s = s * 1e12;
        }
        let syn = synth::synthesize(&g, &devices).unwrap();
        prop_assert!(validate(&g, &syn.program).is_ok());
        let (_, dp_prop) = synth::data_parallel(&g, &devices, &synth::proportional(&devices)).unwrap();
        prop_assert!(syn.seconds <= dp_prop * (1.0 + 1e-12), "{} > {}", syn.seconds, dp_prop);
        let m = CostModel::new(&g, &devices, &syn.ratios);
        let ev = evaluate(&g, &syn.program, &m).seconds;
        prop_assert!(close(ev, syn.seconds), "{} vs {}", ev, syn.seconds);
        // History never increases.
        prop_assert!(syn.history.windows(2).all(|w| w[1] <= w[0]));
        let again = synth::synthesize(&g, &devices).unwrap();
        prop_assert_eq!(again.program, syn.program);
        prop_assert_eq!(again.ratios, syn.ratios);
    }
}

proptest! {
    #[test]
    fn rounding_preserves_the_total(raw in prop::collection::vec(0.0f64..10.0, 1..40), len in 0u64..100_000) {
        let sum: f64 = raw.iter().sum();
        prop_assume!(sum > 1e-9);
        let ratios: Vec<f64> = raw.iter().map(|r| r / sum).collect();
        let lens = shard_lengths(&ratios, len);
        prop_assert_eq!(lens.len(), ratios.len());
        prop_assert_eq!(lens.iter().sum::<u64>(), len);
        // Never more than one unit away from the exact share.
        for (l, r) in lens.iter().zip(&ratios) {
            prop_assert!((*l as f64 - r * len as f64).abs() < 1.0 + 1e-6);
        }
        // Deterministic.
        prop_assert_eq!(lens, shard_lengths(&ratios, len));
    }

    #[test]
    fn lp_ratios_sum_to_one_and_favour_faster_devices(
        speeds in prop::collection::vec(1.0f64..10.0, 2..12),
        compute in 1e9f64..1e13,
        padded in 0.0f64..5.0,
    ) {
        let speeds: Vec<f64> = speeds.iter().map(|s| s * 1e12).collect();
        let lin = tessera_plan::cost::LinearCost { constant: 0.0, compute_flops: compute, padded };
        let r = tessera_plan::lp::solve_ratios(&lin, &speeds).unwrap();
        prop_assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-6);
        for i in 0..speeds.len() {
            for j in 0..speeds.len() {
                if speeds[i] > speeds[j] {
                    prop_assert!(r[i] >= r[j] - 1e-6, "{:?} {:?}", speeds, r);
                }
            }
        }
        // The LP is no worse than the speed-proportional start.
        let total: f64 = speeds.iter().sum();
        let prop: Vec<f64> = speeds.iter().map(|s| s / total).collect();
        prop_assert!(lin.at(&r, &speeds) <= lin.at(&prop, &speeds) * (1.0 + 1e-6));
    }
}

#[test]
fn bad_graphs_are_rejected_with_the_field() {
    let base = two_op_graph();
    let mut unknown = base.clone();
    unknown.ops[0].inputs[1] = "nope".into();
    let e = unknown.validate().unwrap_err().to_string();
    assert!(e.contains("ops[0].inputs") && e.contains("nope"), "{e}");

    let mut rank = base.clone();
    rank.ops[0].dims = "n,dh->nh".into();
    let e = rank.validate().unwrap_err().to_string();
    assert!(e.contains("ops[0].dims") && e.contains("labels"), "{e}");

    let mut sizes = base.clone();
    sizes.tensors[2].shape = vec![5, 6];
    let e = sizes.validate().unwrap_err().to_string();
    assert!(e.contains("different lengths"), "{e}");

    let mut order = base.clone();
    order.ops.swap(0, 1);
    let e = order.validate().unwrap_err().to_string();
    assert!(e.contains("topological"), "{e}");

    let mut huge = base.clone();
    huge.tensors[0].shape = vec![u64::MAX, 4];
    assert!(huge
        .validate()
        .unwrap_err()
        .to_string()
        .contains("elements"));

    let mut zero = base.clone();
    zero.tensors[0].shape = vec![0, 4];
    assert!(zero.validate().is_err());

    assert!(matches!(
        GraphSpec::from_text("{not json"),
        Err(PlanError::Syntax { .. })
    ));
    assert!(matches!(
        builtin::by_name("resnet9000", 8),
        Err(PlanError::UnknownModel { .. })
    ));
    assert!(builtin::by_name("gpt-0x64", 8).is_err());
}

#[test]
fn cluster_files_default_from_the_catalog_and_accept_overrides() {
    let yaml = "apiVersion: tessera/v1\nkind: PlanCluster\nspec:\n  machines:\n    - {gpu: V100-16GB, count: 1, gpusPerMachine: 2, flops: 3.86T}\n    - {gpu: P100, count: 1, gpusPerMachine: 2}\n  interNode: {bandwidth: 1.3G, latencyUs: 20, allToAll: {bandwidth: 1G}}\n";
    let d = PlanClusterSpec::from_text(yaml)
        .unwrap()
        .validate(&GpuCatalog::builtin())
        .unwrap();
    assert_eq!(d.len(), 4);
    assert_eq!(d.devices[0].flops_per_s, 3.86e12);
    // P100 default: FP32 peak 10.6 T × 0.25.
    assert!((d.devices[2].flops_per_s - 2.65e12).abs() < 1e6);
    assert_eq!(d.link(Collective::AllReduce).bytes_per_s, 1.3e9);
    assert_eq!(d.link(Collective::AllToAll).bytes_per_s, 1e9);
    assert!((d.link(Collective::AllGather).latency_s - 20e-6).abs() < 1e-12);

    let bad = yaml.replace("P100", "Z999");
    let e = PlanClusterSpec::from_text(&bad)
        .unwrap()
        .validate(&GpuCatalog::builtin())
        .unwrap_err();
    assert!(e.to_string().contains("Z999"));
    let bad = yaml.replace("1.3G", "fast");
    let e = PlanClusterSpec::from_text(&bad)
        .unwrap()
        .validate(&GpuCatalog::builtin())
        .unwrap_err();
    assert!(e.to_string().contains("spec.interNode.bandwidth"), "{e}");
    let bad = yaml.replace(
        "count: 1, gpusPerMachine: 2, flops",
        "count: 1000000000000, gpusPerMachine: 2, flops",
    );
    let e = PlanClusterSpec::from_text(&bad)
        .unwrap()
        .validate(&GpuCatalog::builtin())
        .unwrap_err();
    assert!(e.to_string().contains("at most 4096"), "{e}");
    let bad = yaml.replace(
        "count: 1, gpusPerMachine: 2}",
        "count: 0, gpusPerMachine: 2}",
    );
    assert!(PlanClusterSpec::from_text(&bad)
        .unwrap()
        .validate(&GpuCatalog::builtin())
        .is_err());
}

/// `branches` parallel layers over one input, summed: every branch output is live at once.
fn wide_graph(branches: usize) -> GraphSpec {
    let mut tensors = vec![
        r#"{"name": "x", "shape": [64, 32], "role": "input"}"#.to_string(),
        r#"{"name": "labels", "shape": [64], "dtype": "i64", "role": "input"}"#.to_string(),
        r#"{"name": "loss", "shape": []}"#.to_string(),
    ];
    let mut ops = Vec::new();
    for b in 0..branches {
        tensors.push(format!(
            r#"{{"name": "w{b}", "shape": [32, 32], "role": "parameter"}}"#
        ));
        tensors.push(format!(r#"{{"name": "h{b}", "shape": [64, 32]}}"#));
        ops.push(format!(
            r#"{{"name": "fc{b}", "kind": "einsum", "inputs": ["x", "w{b}"], "output": "h{b}", "dims": "nd,dh->nh"}}"#
        ));
    }
    let mut acc = "h0".to_string();
    for b in 1..branches {
        tensors.push(format!(r#"{{"name": "s{b}", "shape": [64, 32]}}"#));
        ops.push(format!(
            r#"{{"name": "add{b}", "kind": "add", "inputs": ["{acc}", "h{b}"], "output": "s{b}", "dims": "nh,nh->nh"}}"#
        ));
        acc = format!("s{b}");
    }
    ops.push(format!(
        r#"{{"name": "loss", "kind": "loss", "inputs": ["{acc}", "labels"], "output": "loss", "dims": "nc,n->", "fixed": "c"}}"#
    ));
    GraphSpec::from_text(&format!(
        r#"{{"name": "wide", "loss": "loss", "tensors": [{}], "ops": [{}]}}"#,
        tensors.join(","),
        ops.join(",")
    ))
    .unwrap()
}

/// Issue 36: the search grew x4 in time and memory per 2 branches (28 s and 3.3 GiB at 20).
/// Within a budget it stops: a full search keeps data parallelism and says so; a budget that
/// not even data parallelism fits is an error naming the limit.
#[test]
fn wide_graphs_stay_within_the_search_budget() {
    let graph = wide_graph(20).validate().unwrap();
    let devices = builtin::mixed_cluster(1, 1, 1);
    let started = std::time::Instant::now();
    let plan = synth::plan_within(&graph, &devices, 5_000).unwrap();
    assert!(plan.search_exhausted);
    assert!(
        plan.iteration_s.is_finite()
            && plan.iteration_s <= plan.dp_proportional_s.unwrap() * (1.0 + 1e-9)
    );
    assert!(synth::listing(&plan).contains("state budget"));
    assert!(started.elapsed().as_secs_f64() < 5.0);
    match synth::plan_within(&graph, &devices, 2) {
        Err(e @ PlanError::SearchBudget { .. }) => {
            assert!(e.to_string().contains("--max-search-states"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // A narrow graph is not affected by the default budget.
    let narrow = synth::plan(&two_op_graph().validate().unwrap(), &devices).unwrap();
    assert!(!narrow.search_exhausted);
}

/// Regression (issue 40): a 24-layer GPT at 32 samples per GPU was planned as pure data
/// parallelism on 16 GB V100s and P100s though its activations alone need far more. Now data
/// parallelism is refused, and any plan returned fits.
#[test]
fn plans_that_do_not_fit_in_device_memory_are_refused() {
    let devices = builtin::mixed_cluster(1, 2, 6);
    let g = builtin::by_name("gpt-24x1024", devices.len())
        .unwrap()
        .validate()
        .unwrap();
    let budget = tessera_plan::MAX_SEARCH_STATES;
    let dp = synth::data_parallel_if_it_fits(&g, &devices, &synth::proportional(&devices), budget)
        .unwrap();
    assert_eq!(dp, None);
    match synth::synthesize(&g, &devices) {
        Err(e @ PlanError::DoesNotFit { .. }) => assert!(e.to_string().contains("16.0 GiB")),
        Err(e) => panic!("unexpected error {e}"),
        Ok(syn) => {
            let m = CostModel::new(&g, &devices, &syn.ratios);
            assert!(evaluate(&g, &syn.program, &m).memory_bytes <= 16.0 * 1024f64.powi(3));
        }
    }
    // Without a memory size the same data parallelism is accepted (what happened before).
    let mut unbounded = devices.clone();
    for d in &mut unbounded.devices {
        d.memory_bytes = f64::INFINITY;
    }
    let dp =
        synth::data_parallel_if_it_fits(&g, &unbounded, &synth::equal(&unbounded), budget).unwrap();
    assert!(dp.is_some());
    // A small model fits, and its plan says how much the fullest device holds.
    let small = builtin::by_name("bert-base", devices.len())
        .unwrap()
        .validate()
        .unwrap();
    let plan = synth::plan(&small, &devices).unwrap();
    assert!(plan.memory_bytes > 1e9 && plan.memory_bytes < 16.0 * 1024f64.powi(3));
    assert!(plan.dp_equal_s.is_some());
}

/// Data parallelism of an MoE graph is expert-parallel in its expert layers (the baseline HAP
/// compares against): expert weights are split along the expert axis, not replicated, and
/// tokens move by all-to-all.
#[test]
fn data_parallel_baseline_runs_experts_expert_parallel() {
    let g = small_moe(64, 8).validate().unwrap();
    let d = homogeneous_8();
    let (program, _) = synth::data_parallel(&g, &d, &synth::equal(&d)).unwrap();
    let mut experts = 0;
    let mut all_to_all = 0;
    for step in &program.steps {
        match step {
            Step::Place { tensor, prop } if g.tensors[*tensor].name.contains("expert_w") => {
                assert_eq!(*prop, Prop::Gather(0));
                experts += 1;
            }
            Step::Comm {
                forward: Some(Collective::AllToAll),
                ..
            } => all_to_all += 1,
            _ => {}
        }
    }
    assert!(experts > 0 && all_to_all >= 2, "{experts} {all_to_all}");
    // A dense graph's data parallelism has no expert rules and stays plain.
    let dense = builtin::by_name("bert-base", 8)
        .unwrap()
        .validate()
        .unwrap();
    assert!(tessera_plan::search::expert_rules(&dense)
        .iter()
        .all(Vec::is_empty));
}

/// HAP's calibrated constants, as HAP's code reads them (per element, so 4x as bytes), with
/// an algorithm bandwidth per collective.
#[test]
fn hap_calibration_reads_the_artifacts_constants() {
    use tessera_perf::collective::{time, BandwidthKind};
    use tessera_plan::repro::Calibration;
    let d = Calibration::Hap.devices(2).unwrap();
    assert_eq!(d.len(), 16);
    assert_eq!(d.devices[0].flops_per_s, 3858755112937.0);
    assert_eq!(d.devices[15].flops_per_s, 2149250936815.0);
    let ar = d.link(Collective::AllReduce);
    assert_eq!(ar.kind, BandwidthKind::Algorithm);
    assert_eq!(ar.bytes_per_s, 4.0 * 5906161310.0);
    assert_eq!(
        d.link(Collective::AllToAll).bytes_per_s,
        4.0 * 24588140722.0
    );
    // 1 GB of fp32 gradients: 2.5e8 elements over HAP's all-reduce constant.
    assert!(close(
        time(Collective::AllReduce, 1e9, 16, ar),
        2.5e8 / 5906161310.0
    ));
    let bytes = Calibration::HapBytes.devices(2).unwrap();
    assert_eq!(bytes.link(Collective::AllReduce).bytes_per_s, 5906161310.0);
}
