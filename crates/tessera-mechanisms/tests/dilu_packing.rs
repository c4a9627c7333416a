//! Dilu packing replay: ordering on every shipped workload, invariants after every event,
//! the N=400 reference figures, and fuzzed inputs that must never panic.

use proptest::prelude::*;
use tessera_mechanisms::dilu::instances::{self, parse_csv, parse_dict_lines, BUILTIN_SIZES};
use tessera_mechanisms::dilu::packing::{replay, PackingPolicy, PoolSpec};

fn peaks(n: usize) -> Vec<usize> {
    let w = instances::builtin(n).expect("shipped workload");
    PackingPolicy::ALL
        .iter()
        .map(|&p| {
            // `check` verifies Σ requests ≤ 1, Σ limits ≤ 1.5, memory ≤ capacity on every GPU
            // after every event.
            let r = replay(&w, p, PoolSpec::default(), true).expect("invariants hold");
            assert!(r.refused.is_empty(), "{}: {:?}", p.name(), r.refused);
            assert_eq!(r.placed, n);
            r.peak_active_gpus
        })
        .collect()
}

#[test]
fn dilu_uses_fewer_peak_gpus_than_exclusive_and_infless_l_everywhere() {
    for n in BUILTIN_SIZES {
        let p = peaks(n);
        let (exclusive, infless_l, dilu) = (p[0], p[1], p[3]);
        assert!(dilu < exclusive && dilu < infless_l, "N={n}: {p:?}");
    }
}

/// Our replay of instances-400 next to the published one (386 / 347 / 272 / 263): pinned so
/// that a change in the packing rules shows up here. INFless-r is 271: the artifact's own
/// replay gives 272 or 273 (Python set order breaks its ties) and exactly 271 once its ties go
/// to the lowest GPU and its admission sums are exact (docs/dilu.md).
#[test]
fn reference_figures_n400() {
    assert_eq!(peaks(400), vec![386, 347, 271, 263]);
}

#[test]
fn generated_workloads_replay_deterministically() {
    let w = instances::generate(400, 3);
    for p in PackingPolicy::ALL {
        let a = replay(&w, p, PoolSpec::default(), true).unwrap();
        let b = replay(&w, p, PoolSpec::default(), false).unwrap();
        assert_eq!(a, b, "{}", p.name());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn invariants_hold_on_any_pool(
        n in 1usize..200,
        seed in 0u64..1000,
        mem_gb in 8u32..80,
        per_node in 1u32..9,
        nodes in proptest::option::of(1u32..40),
    ) {
        let w = instances::generate(n, seed);
        let spec = PoolSpec { gpu_memory_mb: mem_gb * 1000, gpus_per_node: per_node, max_nodes: nodes };
        for p in PackingPolicy::ALL {
            let r = replay(&w, p, spec, true);
            prop_assert!(r.is_ok(), "{}: {:?}", p.name(), r.err());
            let r = r.unwrap();
            prop_assert_eq!(r.placed + r.refused.len(), n);
            if let Some(nodes) = nodes {
                prop_assert!(r.peak_active_gpus <= (nodes * per_node) as usize);
            }
        }
    }

    #[test]
    fn parsers_never_panic(text in "[ -~\n]{0,300}") {
        let _ = parse_csv(&text);
        let _ = parse_dict_lines(&text);
    }

    #[test]
    fn csv_fields_are_checked(
        t in "-?[0-9]{1,3}(\\.[0-9])?|x",
        req in "-?[01]?\\.[0-9]{1,2}|nan|abc",
        lim in "-?[01]?\\.[0-9]{1,2}|inf",
        mem in "-?[0-9]{1,3}|NaN|",
    ) {
        let line = format!("{t},start,a,inference,1,{req},{lim},{mem}\n");
        if let Ok(w) = parse_csv(&line) {
            let i = &w.events[0].instance;
            prop_assert!(i.sm_request > 0 && i.sm_request <= i.sm_limit && i.sm_limit <= 1000);
            for p in PackingPolicy::ALL {
                prop_assert!(replay(&w, p, PoolSpec::default(), true).is_ok());
            }
        }
    }
}
