//! The indexed ledger (issue 11) places, reserves and releases exactly as the copying
//! `Ledger` does, and both as plain scans of the nodes would: random clusters (several node groups and shapes), random occupancy taken
//! through `ClusterState` (so its index is the one drivers keep), then the same random
//! sequence of placements (with and without explicit CPU requests) and releases on both —
//! enough of them that the indexed ledger also turns into its copying form (after 1/16 of the
//! nodes have changed, at least 8) and must go on placing identically.

use proptest::prelude::*;
use tessera_model::{
    Allocation, Bytes, Cluster, ClusterSpec, GpuCatalog, MilliCpu, NodeId, Resources, SimDuration,
    SimTime, TrainingJob,
};
use tessera_sched::placement::proportional_share;
use tessera_sched::{fit_in, ClusterState, IndexedLedger, Ledger};

/// The placement rule by plain scans, the reference both ledgers' indexes must agree with:
/// the first group that may hold the job with enough free GPUs; there the lowest-numbered
/// node that fits it whole, else nodes emptiest first (then lowest-numbered), each taking as
/// many of the job's GPUs as it can carry with their CPU and memory.
fn scan_fit(c: &Cluster, free: &[Resources], j: &TrainingJob) -> Option<Allocation> {
    if j.gpus == 0 {
        return None;
    }
    for (gi, g) in c.groups.iter().enumerate() {
        if !(j.gpu_types.is_empty() || j.gpu_types.contains(&g.gpu)) {
            continue;
        }
        let nodes: Vec<usize> = (0..c.nodes.len())
            .filter(|&n| c.nodes[n].group as usize == gi)
            .collect();
        let group_free: u64 = nodes.iter().map(|&n| free[n].gpus as u64).sum();
        if group_free < j.gpus as u64 {
            continue;
        }
        if j.gpus <= g.gpus_per_node {
            let whole = |n: usize| proportional_share(j, g, NodeId(n as u32), j.gpus);
            if let Some(&n) = nodes.iter().find(|&&n| free[n].fits(&whole(n).resources())) {
                return Some(Allocation::single(whole(n)));
            }
        }
        let mut emptiest: Vec<usize> = nodes.into_iter().filter(|&n| free[n].gpus > 0).collect();
        emptiest.sort_by_key(|&n| (std::cmp::Reverse(free[n].gpus), n));
        let mut needed = j.gpus;
        let mut shares = Vec::new();
        for n in emptiest {
            if needed == 0 {
                break;
            }
            if let Some(share) = (1..=needed.min(free[n].gpus))
                .rev()
                .map(|k| proportional_share(j, g, NodeId(n as u32), k))
                .find(|s| free[n].fits(&s.resources()))
            {
                needed -= share.gpus;
                shares.push(share);
            }
        }
        if needed == 0 {
            return Some(Allocation::new(shares));
        }
    }
    None
}

fn cluster(groups: &[(u32, u32)]) -> Cluster {
    let node_groups = groups
        .iter()
        .enumerate()
        .map(
            |(i, &(count, per_node))| tessera_model::cluster::NodeGroupSpec {
                name: format!("g{i}"),
                count,
                gpu: ["V100-32GB", "A100-40GB"][i % 2].to_string(),
                gpus_per_node: per_node,
                cpus: MilliCpu::from_cores(6 * per_node as u64),
                memory: Bytes::from_gib(64 * per_node as u64),
                rack: None,
            },
        )
        .collect();
    let spec = ClusterSpec {
        api_version: "tessera/v1".into(),
        kind: "Cluster".into(),
        metadata: None,
        spec: tessera_model::cluster::ClusterBody { node_groups },
    };
    Cluster::from_spec(&spec, &GpuCatalog::builtin()).unwrap()
}

fn job(id: u32, gpus: u32, cpu_cores: Option<u64>) -> TrainingJob {
    let mut j = TrainingJob::simple(id, SimTime::ZERO, gpus, SimDuration::from_secs(60));
    j.cpu = cpu_cores.map(MilliCpu::from_cores);
    j
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn indexed_ledger_places_as_the_ledger(
        groups in prop::collection::vec((1u32..12, prop::sample::select(vec![1u32, 2, 4, 8])), 1..4),
        occupy in prop::collection::vec((prop::sample::select(vec![1u32, 1, 2, 3, 4, 8, 16]), prop::option::of(1u64..30)), 0..40),
        ops in prop::collection::vec((prop::sample::select(vec![1u32, 1, 2, 4, 5, 8, 12, 16, 32]), prop::option::of(1u64..40), any::<bool>()), 1..40),
    ) {
        let c = cluster(&groups);
        // Occupancy through the state, as a driver takes allocations.
        let mut state = ClusterState::new(&c);
        for (i, &(gpus, cpu)) in occupy.iter().enumerate() {
            let mut l = Ledger::from_state(&c, &state);
            let j = job(i as u32, gpus, cpu);
            if let Some(a) = l.place(&j) {
                let a = state.resolve(&c, &j, &a, SimTime::ZERO).unwrap();
                state.take(&c, &a);
            }
        }
        let mut plain = Ledger::from_state(&c, &state);
        let mut indexed = IndexedLedger::new(&c, &state);
        let mut placed = Vec::new();
        for (k, &(gpus, cpu, release)) in ops.iter().enumerate() {
            if release && !placed.is_empty() {
                let a = placed.remove(k % placed.len());
                plain.release(&a);
                indexed.release(&a);
            } else {
                let j = job(1000 + k as u32, gpus, cpu);
                // A fit is the placement, taking nothing.
                let fits = (plain.fit(&j), indexed.fit(&j));
                prop_assert_eq!(&fits.0, &scan_fit(&c, plain.free(), &j));
                let a = plain.place(&j);
                prop_assert_eq!(&fits.0, &a);
                prop_assert_eq!(&fits.1, &a);
                prop_assert_eq!(&a, &indexed.place(&j));
                placed.extend(a);
            }
            prop_assert_eq!(plain.free_gpus(), indexed.free_gpus());
            for n in 0..c.nodes.len() {
                prop_assert_eq!(plain.free()[n], indexed.free_of(n));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `fit_in`, the shortcut a lone arrival takes, answers as a fresh indexed ledger's fit:
    /// on one node or several, with and without CPU requests, and for jobs restricted to the
    /// GPU model of a later group (so that earlier groups are passed over).
    #[test]
    fn fit_in_answers_as_a_fresh_ledger(
        groups in prop::collection::vec((1u32..12, prop::sample::select(vec![1u32, 2, 4, 8])), 1..4),
        occupy in prop::collection::vec((prop::sample::select(vec![1u32, 1, 2, 3, 4, 8, 16]), prop::option::of(1u64..30)), 0..40),
        asks in prop::collection::vec((prop::sample::select(vec![0u32, 1, 1, 2, 3, 4, 5, 8, 12, 16, 32]), prop::option::of(1u64..40), 0usize..3), 1..20),
    ) {
        let c = cluster(&groups);
        let mut state = ClusterState::new(&c);
        for (i, &(gpus, cpu)) in occupy.iter().enumerate() {
            let j = job(i as u32, gpus, cpu);
            if let Some(a) = IndexedLedger::new(&c, &state).fit(&j) {
                let a = state.resolve(&c, &j, &a, SimTime::ZERO).unwrap();
                state.take(&c, &a);
            }
        }
        for (k, &(gpus, cpu, model)) in asks.iter().enumerate() {
            let mut j = job(1000 + k as u32, gpus, cpu);
            // 0: any model; 1, 2: the model of the first or the second group.
            if let Some(g) = model.checked_sub(1).and_then(|g| c.groups.get(g)) {
                j.gpu_types = vec![g.gpu];
            }
            prop_assert_eq!(fit_in(&c, &state, &j), IndexedLedger::new(&c, &state).fit(&j));
        }
    }
}
