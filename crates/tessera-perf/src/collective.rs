//! α–β cost of collective communication: `α` seconds of latency per step plus bytes over the
//! link's bandwidth, with the step counts and volumes of ring (and pipelined-tree) algorithms.
//!
//! For `p` ranks exchanging a tensor of `n` bytes in total (even shards of `n/p`):
//!
//! | collective | time |
//! |---|---|
//! | all-reduce | 2(p−1)·α + 2(p−1)/p · n/B |
//! | all-gather, reduce-scatter | (p−1)·α + (p−1)/p · n/B |
//! | all-to-all (pairwise) | (p−1)·α + (p−1)/p² · n/B |
//! | broadcast, reduce (rooted) | ⌈log₂p⌉·α + n/B |
//!
//! Uneven shards can be exchanged by padding every shard to the largest one (`s` bytes) and
//! running the even algorithm: all-gather/reduce-scatter cost (p−1)·α + (p−1)·s/B and
//! all-to-all (p−1)·α + (p−1)/p · s/B ([`padded_time`]).
//!
//! `B` is the bandwidth the collective attains per rank ("bus bandwidth" in NCCL's terms). It
//! differs by collective and by whether the group stays inside one node (NVLink/PCIe) or
//! crosses the network, so a [`Fabric`] holds one [`Link`] per collective for each case. A
//! ring that crosses nodes is limited by its slowest hop, so a group spanning several nodes
//! uses the inter-node links.
//!
//! A link may instead carry a calibrated *algorithm* bandwidth ([`BandwidthKind::Algorithm`]:
//! whole tensor over wall time, one figure per collective, as HAP's profiler measures it);
//! then every collective costs `α + n/B` with its own `B`.

use serde::{Deserialize, Serialize};

/// A collective operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    /// Sum partial tensors; everyone gets the sum.
    AllReduce,
    /// Concatenate shards; everyone gets the whole.
    AllGather,
    /// Sum partial tensors; everyone gets one shard of the sum.
    ReduceScatter,
    /// Re-shard: everyone sends a piece of its shard to every other rank.
    AllToAll,
    /// One rank's tensor to all.
    Broadcast,
    /// Sum partial tensors onto one rank.
    Reduce,
}

impl Collective {
    /// Every collective, in a fixed order.
    pub const ALL: [Collective; 6] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Broadcast,
        Collective::Reduce,
    ];

    /// Kebab-case name (`all-reduce`).
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::AllGather => "all-gather",
            Collective::ReduceScatter => "reduce-scatter",
            Collective::AllToAll => "all-to-all",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
        }
    }
}

/// What a [`Link`]'s bandwidth measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BandwidthKind {
    /// Bytes per second each rank moves ("bus bandwidth"): the ring formulas of this module
    /// scale it by the collective's step count and volume.
    #[default]
    Bus,
    /// Whole tensor bytes over the collective's wall time ("algorithm bandwidth", what a
    /// profiler timing `size / time` measures, as HAP's does): one latency plus the whole
    /// (padded) tensor over the bandwidth, whatever the collective.
    Algorithm,
}

/// Latency and bandwidth of one collective on one kind of interconnect.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Seconds per algorithm step (α).
    pub latency_s: f64,
    /// Attained bytes per second (1/β), per rank or per collective as `kind` says.
    pub bytes_per_s: f64,
    /// What `bytes_per_s` measures.
    #[serde(default)]
    pub kind: BandwidthKind,
}

impl Link {
    /// A link with the given latency and bus bandwidth.
    pub const fn new(latency_s: f64, bytes_per_s: f64) -> Link {
        Link {
            latency_s,
            bytes_per_s,
            kind: BandwidthKind::Bus,
        }
    }

    /// A link whose bandwidth is a calibrated algorithm bandwidth (`size / time`).
    pub const fn algorithm(latency_s: f64, bytes_per_s: f64) -> Link {
        Link {
            latency_s,
            bytes_per_s,
            kind: BandwidthKind::Algorithm,
        }
    }
}

/// One [`Link`] per collective.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveLinks {
    /// All-reduce.
    pub all_reduce: Link,
    /// All-gather.
    pub all_gather: Link,
    /// Reduce-scatter.
    pub reduce_scatter: Link,
    /// All-to-all.
    pub all_to_all: Link,
    /// Broadcast and reduce (rooted collectives).
    pub broadcast: Link,
}

impl CollectiveLinks {
    /// The same link for every collective.
    pub const fn uniform(link: Link) -> CollectiveLinks {
        CollectiveLinks {
            all_reduce: link,
            all_gather: link,
            reduce_scatter: link,
            all_to_all: link,
            broadcast: link,
        }
    }

    /// The link `kind` runs on.
    pub fn get(&self, kind: Collective) -> Link {
        match kind {
            Collective::AllReduce => self.all_reduce,
            Collective::AllGather => self.all_gather,
            Collective::ReduceScatter => self.reduce_scatter,
            Collective::AllToAll => self.all_to_all,
            Collective::Broadcast | Collective::Reduce => self.broadcast,
        }
    }

    /// Mutable access to the link `kind` runs on.
    pub fn get_mut(&mut self, kind: Collective) -> &mut Link {
        match kind {
            Collective::AllReduce => &mut self.all_reduce,
            Collective::AllGather => &mut self.all_gather,
            Collective::ReduceScatter => &mut self.reduce_scatter,
            Collective::AllToAll => &mut self.all_to_all,
            Collective::Broadcast | Collective::Reduce => &mut self.broadcast,
        }
    }
}

/// Collective links inside a node and across nodes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fabric {
    /// Groups whose ranks all sit in one node.
    pub intra_node: CollectiveLinks,
    /// Groups that span nodes.
    pub inter_node: CollectiveLinks,
}

impl Fabric {
    /// The links for a group that does or does not span nodes.
    pub fn links(&self, spans_nodes: bool) -> &CollectiveLinks {
        if spans_nodes {
            &self.inter_node
        } else {
            &self.intra_node
        }
    }
}

fn log2_ceil(p: usize) -> f64 {
    (usize::BITS - (p.max(1) - 1).leading_zeros()) as f64
}

/// Seconds for `kind` over `p` ranks on `link` when the whole tensor is `total_bytes` and
/// shards are even. Zero for a single rank.
pub fn time(kind: Collective, total_bytes: f64, p: usize, link: Link) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    let pf = p as f64;
    let steps = pf - 1.0;
    let (a, b) = (link.latency_s, link.bytes_per_s);
    if link.kind == BandwidthKind::Algorithm {
        // Calibrated per collective on whole tensors: the step structure is inside `b`.
        return a + total_bytes / b;
    }
    match kind {
        Collective::AllReduce => 2.0 * steps * a + 2.0 * steps / pf * total_bytes / b,
        Collective::AllGather | Collective::ReduceScatter => {
            steps * a + steps / pf * total_bytes / b
        }
        Collective::AllToAll => steps * a + steps / (pf * pf) * total_bytes / b,
        Collective::Broadcast | Collective::Reduce => log2_ceil(p) * a + total_bytes / b,
    }
}

/// Seconds for `kind` over `p` ranks when uneven shards are padded to the largest one,
/// `max_shard_bytes`. All-reduce, broadcast and reduce do not depend on sharding and fall
/// back to [`time`] with `p · max_shard_bytes` as the whole.
pub fn padded_time(kind: Collective, max_shard_bytes: f64, p: usize, link: Link) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    // The even algorithm on p padded shards moves exactly what it would for a tensor p·s.
    time(kind, max_shard_bytes * p as f64, p, link)
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Link = Link::new(1e-5, 1e9);

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn ring_formulas_by_hand() {
        // 4 ranks, 1 GB: all-reduce 6α + 1.5 s; all-gather 3α + 0.75 s.
        assert!(close(time(Collective::AllReduce, 1e9, 4, L), 6e-5 + 1.5));
        assert!(close(time(Collective::AllGather, 1e9, 4, L), 3e-5 + 0.75));
        assert!(close(
            time(Collective::ReduceScatter, 1e9, 4, L),
            3e-5 + 0.75
        ));
        assert!(close(time(Collective::AllToAll, 1e9, 4, L), 3e-5 + 0.1875));
        assert!(close(time(Collective::Broadcast, 1e9, 4, L), 2e-5 + 1.0));
        assert!(close(time(Collective::Broadcast, 1e9, 5, L), 3e-5 + 1.0));
    }

    #[test]
    fn single_rank_is_free() {
        for kind in Collective::ALL {
            assert_eq!(time(kind, 1e9, 1, L), 0.0);
            assert_eq!(padded_time(kind, 1e9, 1, L), 0.0);
        }
    }

    #[test]
    fn padding_even_shards_costs_the_same() {
        for kind in Collective::ALL {
            assert!(close(
                padded_time(kind, 0.25e9, 4, L),
                time(kind, 1e9, 4, L)
            ));
        }
    }

    #[test]
    fn all_reduce_equals_reduce_scatter_plus_all_gather() {
        let rs_ag =
            time(Collective::ReduceScatter, 8e8, 8, L) + time(Collective::AllGather, 8e8, 8, L);
        assert!(close(time(Collective::AllReduce, 8e8, 8, L), rs_ag));
    }

    #[test]
    fn algorithm_bandwidth_prices_the_whole_tensor() {
        let l = Link::algorithm(1e-5, 1e9);
        for kind in Collective::ALL {
            assert!(close(time(kind, 1e9, 8, l), 1e-5 + 1.0));
            assert_eq!(time(kind, 1e9, 1, l), 0.0);
        }
        // Padded shards: the whole is p times the largest shard.
        assert!(close(
            padded_time(Collective::AllGather, 0.25e9, 8, l),
            1e-5 + 2.0
        ));
    }

    #[test]
    fn spanning_nodes_selects_inter_links() {
        let fabric = Fabric {
            intra_node: CollectiveLinks::uniform(Link::new(5e-6, 100e9)),
            inter_node: CollectiveLinks::uniform(Link::new(2e-5, 1.3e9)),
        };
        assert_eq!(
            fabric.links(false).get(Collective::AllGather).bytes_per_s,
            100e9
        );
        assert_eq!(
            fabric.links(true).get(Collective::AllToAll).bytes_per_s,
            1.3e9
        );
    }
}
