//! Allocations: what a job holds on which nodes.

use serde::{Deserialize, Serialize};

use crate::cluster::{NodeId, Resources};
use crate::quantity::{Bytes, MilliCpu};

/// A job's holding on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeShare {
    /// The node.
    pub node: NodeId,
    /// Whole GPUs on it.
    pub gpus: u32,
    /// CPU on it.
    pub cpu: MilliCpu,
    /// Memory on it.
    pub memory: Bytes,
}

impl NodeShare {
    /// The share as a resource vector.
    pub fn resources(&self) -> Resources {
        Resources {
            gpus: self.gpus,
            cpu: self.cpu,
            memory: self.memory,
        }
    }
}

/// Everything a job holds: one share per node, nodes distinct.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// Per-node shares.
    pub shares: Vec<NodeShare>,
}

impl Allocation {
    /// Total GPUs.
    pub fn gpus(&self) -> u32 {
        self.shares.iter().map(|s| s.gpus).sum()
    }
    /// Total CPU.
    pub fn cpu(&self) -> MilliCpu {
        MilliCpu(self.shares.iter().map(|s| s.cpu.0).sum())
    }
    /// Total memory.
    pub fn memory(&self) -> Bytes {
        Bytes(self.shares.iter().map(|s| s.memory.0).sum())
    }
    /// Number of nodes spanned.
    pub fn node_count(&self) -> usize {
        self.shares.len()
    }
    /// True when no node appears twice.
    pub fn nodes_distinct(&self) -> bool {
        // Allocations span few nodes: compare pairs without allocating (schedulers call
        // this for every placement they reserve).
        if self.shares.len() <= 16 {
            return self
                .shares
                .iter()
                .enumerate()
                .all(|(i, a)| self.shares[i + 1..].iter().all(|b| b.node != a.node));
        }
        let mut nodes: Vec<NodeId> = self.shares.iter().map(|s| s.node).collect();
        nodes.sort_unstable();
        nodes.windows(2).all(|w| w[0] != w[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(node: u32) -> NodeShare {
        NodeShare {
            node: NodeId(node),
            gpus: 1,
            cpu: MilliCpu(0),
            memory: Bytes(0),
        }
    }

    #[test]
    fn nodes_distinct_small_and_large() {
        for n in [0usize, 1, 2, 5, 16, 17, 40] {
            let shares: Vec<NodeShare> = (0..n as u32).map(share).collect();
            let a = Allocation { shares };
            assert!(a.nodes_distinct(), "{n}");
            if n >= 2 {
                let mut dup = a.clone();
                dup.shares[n - 1].node = NodeId(0);
                assert!(!dup.nodes_distinct(), "{n}");
            }
        }
    }
}
