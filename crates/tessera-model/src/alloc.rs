//! Allocations: what a job holds on which nodes, down to the device.
//!
//! A [`NodeShare`] without [`devices`](NodeShare::devices) means "any `gpus` free whole GPUs
//! of the node" (the driver picks them and records which). With devices it names **which**
//! GPUs of the node ([`GpuMask`]) and **what part** of each ([`GpuPart`]): the whole GPU, one
//! MIG instance, or a quota (SM share in permille and device memory) on GPUs shared with
//! others.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::cluster::{NodeId, Resources};
use crate::quantity::{Bytes, MilliCpu};

/// GPU indices on one node, as a bit set (nodes have at most [`GpuMask::MAX_GPUS`] GPUs).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct GpuMask(pub u64);

impl GpuMask {
    /// Most GPUs a node may have.
    pub const MAX_GPUS: u32 = 64;

    /// The set holding one GPU.
    #[inline]
    pub fn one(index: u32) -> GpuMask {
        GpuMask(1u64.checked_shl(index).unwrap_or(0))
    }

    /// The set of GPUs `0..n`.
    #[inline]
    pub fn first(n: u32) -> GpuMask {
        if n >= 64 {
            GpuMask(u64::MAX)
        } else {
            GpuMask((1u64 << n) - 1)
        }
    }

    /// Number of GPUs in the set.
    #[inline]
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// True when `index` is in the set.
    #[inline]
    pub fn contains(self, index: u32) -> bool {
        index < 64 && self.0 & (1u64 << index) != 0
    }

    /// True when the sets share no GPU.
    #[inline]
    pub fn is_disjoint(self, other: GpuMask) -> bool {
        self.0 & other.0 == 0
    }

    /// The `k` lowest-numbered GPUs of the set (all of them if it has fewer).
    #[inline]
    pub fn lowest(self, k: u32) -> GpuMask {
        if k >= self.count() {
            return self;
        }
        let mut rest = self.0;
        let mut picked = 0;
        for _ in 0..k {
            let low = rest & rest.wrapping_neg();
            picked |= low;
            rest ^= low;
        }
        GpuMask(picked)
    }

    /// The indices in the set, ascending.
    pub fn iter(self) -> impl Iterator<Item = u32> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let i = bits.trailing_zeros();
            bits &= bits - 1;
            Some(i)
        })
    }
}

/// One MIG GPU instance: a profile of the GPU's MIG geometry at a memory-slice start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MigInstance {
    /// Index of the profile in the geometry's `profiles`.
    pub profile: u8,
    /// Memory slice it starts at.
    pub start: u8,
}

/// What part of each of its GPUs a share holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuPart {
    /// The whole GPU, exclusively.
    Whole,
    /// One MIG instance of the GPU's current layout.
    Mig(MigInstance),
    /// A share of a GPU that others may share too (MPS-style quotas): `sm_request` is
    /// guaranteed, up to `sm_limit` when neighbours leave compute idle (both in permille of
    /// the GPU's SMs), and `memory` of device memory is pinned.
    Quota {
        /// Guaranteed SM share, permille.
        sm_request: u16,
        /// Upper SM share, permille.
        sm_limit: u16,
        /// Device memory held on each GPU.
        memory: Bytes,
    },
}

/// Which GPUs of a node a share holds, and what part of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAlloc {
    /// The GPUs.
    pub gpus: GpuMask,
    /// The part held on each of them.
    pub part: GpuPart,
}

/// A job's holding on one node.
///
/// `gpus` counts the **whole** GPUs taken from the node's pool of free whole GPUs; a share of
/// MIG instances or quotas holds none of those (`gpus == 0`) and names its GPUs in
/// `devices`.
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
    /// Which GPUs and what part of each; `None` = any `gpus` free whole GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DeviceAlloc>,
}

impl NodeShare {
    /// A share of `gpus` whole GPUs (any free ones), `cpu` and `memory`.
    #[inline]
    pub fn whole(node: NodeId, gpus: u32, cpu: MilliCpu, memory: Bytes) -> NodeShare {
        NodeShare {
            node,
            gpus,
            cpu,
            memory,
            devices: None,
        }
    }

    /// True when both hold the same resources on the same node; devices are compared only
    /// where both name them.
    #[inline]
    pub fn same_holding(&self, other: &NodeShare) -> bool {
        self.node == other.node
            && self.gpus == other.gpus
            && self.cpu == other.cpu
            && self.memory == other.memory
            && match (self.devices, other.devices) {
                (Some(x), Some(y)) => x == y,
                _ => true,
            }
    }

    /// GPU devices the share touches (whole, MIG or quota), counting a share without device
    /// detail by its whole GPUs.
    #[inline]
    pub fn device_count(&self) -> u32 {
        self.devices.map_or(self.gpus, |d| d.gpus.count())
    }

    /// The share as a resource vector.
    #[inline]
    pub fn resources(&self) -> Resources {
        Resources {
            gpus: self.gpus,
            cpu: self.cpu,
            memory: self.memory,
        }
    }
}

/// How a job splits its work over the devices it holds: data-parallel replicas, tensor-parallel
/// ways inside each replica, pipeline stages. `data × tensor × pipeline` devices in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ParallelPlan {
    /// Data-parallel replicas.
    pub data: u32,
    /// Tensor-parallel ways per stage.
    pub tensor: u32,
    /// Pipeline stages.
    pub pipeline: u32,
}

impl ParallelPlan {
    /// Plain data parallelism over `devices` devices.
    pub const fn data_parallel(devices: u32) -> ParallelPlan {
        ParallelPlan {
            data: devices,
            tensor: 1,
            pipeline: 1,
        }
    }

    /// Devices the plan occupies (saturating, so a hostile plan cannot overflow).
    pub fn devices(self) -> u32 {
        self.data
            .saturating_mul(self.tensor)
            .saturating_mul(self.pipeline)
    }
}

impl std::fmt::Display for ParallelPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dp{}·tp{}·pp{}", self.data, self.tensor, self.pipeline)
    }
}

/// An allocation's per-node shares. Most allocations span one node: that share is held
/// inline, so placing, copying and dropping one does not touch the heap (schedulers make
/// millions of them). Serialized as a plain sequence, like a `Vec`.
pub type Shares = SmallVec<[NodeShare; 1]>;

/// Everything a job holds: one share per node, nodes distinct, and optionally how the job
/// splits its work over those devices.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// Per-node shares.
    pub shares: Shares,
    /// The parallelism plan truth models read; `None` = the job's own (data-parallel) way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<ParallelPlan>,
}

impl Clone for Allocation {
    /// Shares are `Copy`: copied as a slice, not element by element (`SmallVec`'s derived
    /// clone extends one item at a time; drivers clone an allocation per start).
    fn clone(&self) -> Self {
        Allocation {
            shares: SmallVec::from_slice(&self.shares),
            plan: self.plan,
        }
    }
}

impl Allocation {
    /// An allocation of these shares with no parallelism plan.
    #[inline]
    pub fn new(shares: impl Into<Shares>) -> Allocation {
        Allocation {
            shares: shares.into(),
            plan: None,
        }
    }

    /// An allocation of one share with no parallelism plan.
    #[inline]
    pub fn single(share: NodeShare) -> Allocation {
        Allocation {
            shares: Shares::from_buf([share]),
            plan: None,
        }
    }

    /// Total whole GPUs.
    #[inline]
    pub fn gpus(&self) -> u32 {
        self.shares.iter().map(|s| s.gpus).sum()
    }
    /// Total GPU devices touched (whole GPUs, GPUs holding one of its MIG instances or
    /// quotas).
    #[inline]
    pub fn devices(&self) -> u32 {
        self.shares.iter().map(NodeShare::device_count).sum()
    }
    /// The single part all of its device-level shares hold, if any share names devices.
    #[inline]
    pub fn part(&self) -> Option<GpuPart> {
        self.shares.iter().find_map(|s| s.devices.map(|d| d.part))
    }
    /// Total CPU.
    #[inline]
    pub fn cpu(&self) -> MilliCpu {
        MilliCpu(self.shares.iter().map(|s| s.cpu.0).sum())
    }
    /// Total memory.
    #[inline]
    pub fn memory(&self) -> Bytes {
        Bytes(self.shares.iter().map(|s| s.memory.0).sum())
    }
    /// True when both hold the same resources on the same nodes; devices are compared only
    /// where both name them (a plan that leaves devices to the driver matches the driver's
    /// record of the GPUs it picked).
    #[inline]
    pub fn same_holding(&self, other: &Allocation) -> bool {
        self.shares.len() == other.shares.len()
            && self
                .shares
                .iter()
                .zip(&other.shares)
                .all(|(a, b)| a.same_holding(b))
    }

    /// Number of nodes spanned.
    pub fn node_count(&self) -> usize {
        self.shares.len()
    }
    /// True when no node appears twice.
    pub fn nodes_distinct(&self) -> bool {
        // Allocations span few nodes: compare pairs without allocating (schedulers call
        // this for every placement they reserve), and most span one.
        if self.shares.len() <= 1 {
            return true;
        }
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
    use proptest::prelude::*;

    proptest! {
        /// `lowest(k)` is the first k indices of `iter()`.
        #[test]
        fn lowest_takes_the_first_indices(bits in any::<u64>(), k in 0u32..70) {
            let m = GpuMask(bits);
            let expected = m.iter().take(k as usize).fold(0u64, |acc, i| acc | (1 << i));
            prop_assert_eq!(m.lowest(k), GpuMask(expected));
        }
    }

    fn share(node: u32) -> NodeShare {
        NodeShare::whole(NodeId(node), 1, MilliCpu(0), Bytes(0))
    }

    #[test]
    fn masks() {
        let m = GpuMask(0b1011_0000);
        assert_eq!(m.count(), 3);
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![4, 5, 7]);
        assert!(m.contains(5) && !m.contains(6) && !m.contains(64));
        assert_eq!(GpuMask::first(3), GpuMask(0b111));
        assert_eq!(GpuMask::first(64), GpuMask(u64::MAX));
        assert_eq!(GpuMask::one(70), GpuMask(0));
        assert!(GpuMask::first(4).is_disjoint(GpuMask::one(4)));
    }

    #[test]
    fn nodes_distinct_small_and_large() {
        for n in [0usize, 1, 2, 5, 16, 17, 40] {
            let shares: Vec<NodeShare> = (0..n as u32).map(share).collect();
            let a = Allocation::new(shares);
            assert!(a.nodes_distinct(), "{n}");
            if n >= 2 {
                let mut dup = a.clone();
                dup.shares[n - 1].node = NodeId(0);
                assert!(!dup.nodes_distinct(), "{n}");
            }
        }
    }
}
