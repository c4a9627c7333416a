//! Placement: a [`Ledger`] of free resources per node, and consolidated first-fit placement
//! with GPU-proportional CPU and memory.
//!
//! A job stays within one node group (one GPU model and node shape). Within the group it goes
//! on a single node when one can hold it (first fit, in node order); otherwise on the fewest
//! nodes, taking the emptiest nodes first. On each node it gets CPU and memory in proportion
//! to the GPUs it holds there (the default of production schedulers), or its explicit request
//! split in proportion to GPUs.

use tessera_model::{
    Allocation, Bytes, Cluster, MilliCpu, NodeGroup, NodeId, NodeShare, Resources, TrainingJob,
};

use crate::state::ClusterState;

/// Free resources per node, updated as a policy tentatively starts and stops jobs.
#[derive(Clone, Debug)]
pub struct Ledger<'c> {
    cluster: &'c Cluster,
    free: Vec<Resources>,
    /// Free GPUs per node group, to skip full groups without scanning their nodes.
    group_free_gpus: Vec<u64>,
}

impl<'c> Ledger<'c> {
    /// A ledger starting from `free` (indexed by node).
    pub fn new(cluster: &'c Cluster, free: &[Resources]) -> Ledger<'c> {
        let mut group_free_gpus = vec![0u64; cluster.groups.len()];
        for (node, f) in cluster.nodes.iter().zip(free) {
            group_free_gpus[node.group as usize] += f.gpus as u64;
        }
        Ledger {
            cluster,
            free: free.to_vec(),
            group_free_gpus,
        }
    }

    /// A ledger starting from what `state` has free: the same as `Ledger::new(cluster,
    /// state.free())`, without summing free GPUs over every node (the state keeps the sums).
    pub fn from_state(cluster: &'c Cluster, state: &ClusterState) -> Ledger<'c> {
        if state.group_free_gpus().len() != cluster.groups.len() {
            return Ledger::new(cluster, state.free());
        }
        Ledger {
            cluster,
            free: state.free().to_vec(),
            group_free_gpus: state.group_free_gpus().to_vec(),
        }
    }

    /// Free resources per node.
    pub fn free(&self) -> &[Resources] {
        &self.free
    }

    /// Free GPUs in the whole cluster.
    pub fn free_gpus(&self) -> u64 {
        self.group_free_gpus.iter().sum()
    }

    /// Returns an allocation's resources to the ledger.
    pub fn release(&mut self, alloc: &Allocation) {
        for s in &alloc.shares {
            if let Some(f) = self.free.get_mut(s.node.index()) {
                f.add(&s.resources());
                self.group_free_gpus[self.cluster.nodes[s.node.index()].group as usize] +=
                    s.gpus as u64;
            }
        }
    }

    /// Takes an allocation's resources if all of them are free; returns false (and changes
    /// nothing) otherwise.
    pub fn reserve(&mut self, alloc: &Allocation) -> bool {
        let fits = alloc.nodes_distinct()
            && alloc.shares.iter().all(|s| {
                self.free
                    .get(s.node.index())
                    .is_some_and(|f| f.fits(&s.resources()))
            });
        if !fits {
            return false;
        }
        for s in &alloc.shares {
            self.free[s.node.index()].sub(&s.resources());
            self.group_free_gpus[self.cluster.nodes[s.node.index()].group as usize] -=
                s.gpus as u64;
        }
        true
    }

    /// Finds a consolidated placement for `job` with GPU-proportional CPU and memory and
    /// reserves it; `None` when it does not fit now.
    pub fn place(&mut self, job: &TrainingJob) -> Option<Allocation> {
        if job.gpus == 0 || (job.gpus as u64) > self.free_gpus() {
            return None;
        }
        let alloc = self
            .cluster
            .groups
            .iter()
            .enumerate()
            .filter(|(gi, g)| {
                (job.gpu_types.is_empty() || job.gpu_types.contains(&g.gpu))
                    && self.group_free_gpus[*gi] >= job.gpus as u64
            })
            .find_map(|(_, g)| self.place_in_group(job, g))?;
        let reserved = self.reserve(&alloc);
        debug_assert!(reserved, "placement found must be reservable");
        Some(alloc)
    }

    fn place_in_group(&self, job: &TrainingJob, group: &NodeGroup) -> Option<Allocation> {
        let nodes = group.first_node as usize..(group.first_node + group.count) as usize;
        // One node, first fit. The share is the same on every node of the group but for the
        // node it names, so it is computed once and the scan only compares resources.
        let share = proportional_share(job, group, NodeId(group.first_node), job.gpus);
        let wanted = share.resources();
        if let Some(n) = self
            .free
            .get(nodes.clone())
            .and_then(|free| free.iter().position(|f| f.fits(&wanted)))
        {
            return Some(Allocation {
                plan: None,
                shares: vec![NodeShare {
                    node: NodeId((nodes.start + n) as u32),
                    ..share
                }],
            });
        }
        // Several nodes: emptiest first, so the job spans as few as possible.
        let mut candidates: Vec<usize> = nodes.filter(|&n| self.free[n].gpus > 0).collect();
        candidates.sort_by_key(|&n| (std::cmp::Reverse(self.free[n].gpus), n));
        let mut shares = Vec::new();
        let mut needed = job.gpus;
        for n in candidates {
            if needed == 0 {
                break;
            }
            // As many of the job's GPUs as the node can carry with their CPU and memory: a
            // job with a large explicit request may need to spread down to one GPU per node
            // (which `Cluster::can_ever_fit` counts on).
            let most = needed.min(self.free[n].gpus);
            if let Some(share) = (1..=most)
                .rev()
                .map(|k| proportional_share(job, group, NodeId(n as u32), k))
                .find(|s| self.free[n].fits(&s.resources()))
            {
                needed -= share.gpus;
                shares.push(share);
            }
        }
        (needed == 0).then_some(Allocation::new(shares))
    }
}

/// The CPU and memory that come with `gpus` GPUs of `job` on a node of `group`: the job's
/// explicit request split by GPUs, or the node's capacity split by GPUs.
pub fn proportional_share(
    job: &TrainingJob,
    group: &NodeGroup,
    node: NodeId,
    gpus: u32,
) -> NodeShare {
    let split = |total: u64, of: u32| -> u64 {
        if of == 0 {
            0
        } else {
            (total as u128 * gpus as u128 / of as u128) as u64
        }
    };
    let cpu = match job.cpu {
        Some(c) => split(c.0, job.gpus),
        None => split(group.cpu.0, group.gpus_per_node),
    };
    let memory = match job.memory {
        Some(m) => split(m.0, job.gpus),
        None => split(group.memory.0, group.gpus_per_node),
    };
    NodeShare::whole(node, gpus, MilliCpu(cpu), Bytes(memory))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::{SimDuration, SimTime};

    fn cluster(nodes: u32, gpus: u32) -> Cluster {
        Cluster::homogeneous(
            "V100-32GB",
            nodes,
            gpus,
            MilliCpu::from_cores(24),
            Bytes::from_gib(500),
        )
        .unwrap()
    }

    fn job(gpus: u32) -> TrainingJob {
        TrainingJob::simple(0, SimTime::ZERO, gpus, SimDuration::from_secs(10))
    }

    fn full(c: &Cluster) -> Vec<Resources> {
        c.nodes.iter().map(|n| c.capacity(n.id)).collect()
    }

    #[test]
    fn single_node_first_fit_with_proportional_share() {
        let c = cluster(2, 8);
        let mut l = Ledger::new(&c, &full(&c));
        let a = l.place(&job(2)).unwrap();
        assert_eq!(a.shares.len(), 1);
        assert_eq!(a.shares[0].node, NodeId(0));
        assert_eq!(a.cpu(), MilliCpu::from_cores(6));
        assert_eq!(a.memory(), Bytes(Bytes::from_gib(500).0 / 4));
        assert_eq!(l.free_gpus(), 14);
    }

    /// Regression (issue 10): a job whose explicit CPU request fits no node with all its
    /// GPUs, but fits one GPU per node, is placed spread out instead of waiting forever
    /// (`Cluster::can_ever_fit` accepts it).
    #[test]
    fn spreads_a_cpu_heavy_job_down_to_one_gpu_per_node() {
        let c = cluster(3, 8);
        let mut j = job(2);
        j.cpu = Some(MilliCpu::from_cores(40)); // 20 per GPU; nodes have 24
        assert!(c.can_ever_fit(&j).is_ok());
        let mut l = Ledger::new(&c, &full(&c));
        let a = l.place(&j).expect("placed one GPU per node");
        assert_eq!(a.shares.len(), 2);
        assert!(a
            .shares
            .iter()
            .all(|s| s.gpus == 1 && s.cpu == MilliCpu::from_cores(20)));
        assert_eq!(a.cpu(), MilliCpu::from_cores(40));
    }

    #[test]
    fn spans_fewest_nodes_and_releases_exactly() {
        let c = cluster(3, 4);
        let mut l = Ledger::new(&c, &full(&c));
        let small = l.place(&job(3)).unwrap(); // node 0 keeps 1 free
        let big = l.place(&job(6)).unwrap(); // nodes 1 and 2 (4 + 2), not node 0
        let nodes: Vec<_> = big.shares.iter().map(|s| s.node.0).collect();
        assert_eq!(nodes, [1, 2]);
        assert!(l.place(&job(4)).is_none());
        l.release(&big);
        l.release(&small);
        assert_eq!(l.free(), full(&c).as_slice());
    }

    #[test]
    fn respects_allowed_gpu_types_and_reserve_is_atomic() {
        let c = cluster(1, 4);
        let mut l = Ledger::new(&c, &full(&c));
        let mut j = job(1);
        j.gpu_types = vec![c.catalog.resolve("A100-40GB").unwrap()];
        assert!(l.place(&j).is_none());
        let a = l.place(&job(4)).unwrap();
        assert!(!l.reserve(&a), "double booking must fail");
        assert_eq!(l.free_gpus(), 0);
    }
}
