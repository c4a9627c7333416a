//! The cost model: seconds per training iteration of a program under per-device ratios.
//!
//! Program cost = Σ over instructions of (max over devices of compute time + max over devices
//! of communication time), forward and backward together, no overlap. A compute instruction
//! split along a label of length L gives device d `len_d` of it (the rounded ratios, see
//! [`shard_lengths`]); its time is `3 · flops · len_d / L / F_d` (backward costs twice the
//! forward). Replicated work runs in full on every device, so the slowest one decides.
//!
//! Exchanges of uneven shards either pad every shard to the largest and run one collective, or
//! run one broadcast (or rooted reduce) per device: [`Exchange`], chosen by cost per exchange.

use std::collections::BTreeMap;

use serde::Serialize;
use tessera_perf::collective::{self, Collective};

use crate::cluster::Devices;
use crate::graph::{Graph, Prop};

/// Backward costs twice the forward (gradients for inputs and for weights).
pub const FORWARD_AND_BACKWARD: f64 = 3.0;

/// Bytes of device memory per parameter byte: the weights, their gradients and Adam's two
/// moments (HAP's artifact trains with Adam), all in the parameter's type.
pub const PARAMETER_STATE_FACTOR: f64 = 4.0;

/// Rounds `ratios` (summing to 1) to integer shard lengths summing to `len`: floor each
/// `r_d · len`, then hand the leftover units one by one to the largest shortfall (ties to the
/// lower rank). Deterministic; the total is always preserved.
pub fn shard_lengths(ratios: &[f64], len: u64) -> Vec<u64> {
    let total: f64 = ratios.iter().map(|r| r.max(0.0)).sum();
    if ratios.is_empty() {
        return Vec::new();
    }
    let ideal: Vec<f64> = ratios
        .iter()
        .map(|r| {
            if total > 0.0 {
                r.max(0.0) / total * len as f64
            } else {
                len as f64 / ratios.len() as f64
            }
        })
        .collect();
    let mut out: Vec<u64> = ideal.iter().map(|x| (x.floor() as u64).min(len)).collect();
    let assigned: u64 = out.iter().sum();
    let mut left = len.saturating_sub(assigned);
    let mut order: Vec<usize> = (0..ratios.len()).collect();
    order.sort_by(|&a, &b| {
        let sa = ideal[a] - out[a] as f64;
        let sb = ideal[b] - out[b] as f64;
        sb.total_cmp(&sa).then(a.cmp(&b))
    });
    let mut k = 0;
    while left > 0 {
        out[order[k % order.len()]] += 1;
        left -= 1;
        k += 1;
    }
    out
}

/// How an exchange of uneven shards is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exchange {
    /// No data moves (dynamic slice, zero padding).
    Free,
    /// One collective, not sensitive to shard sizes (all-reduce).
    Whole,
    /// Shards padded to the largest, one collective.
    Padded,
    /// One broadcast or rooted reduce per device.
    Grouped,
}

/// Shard statistics of one axis length under the current ratios.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LenStats {
    /// max_d len_d / (L · F_d): seconds per FLOP of work split along this length.
    pub(crate) compute: f64,
    /// max_d len_d / L.
    pub(crate) max_frac: f64,
    /// Devices with a non-empty shard.
    pub(crate) holders: usize,
}

/// Costs of instructions on a cluster under fixed ratios.
#[derive(Clone, Debug)]
pub struct CostModel<'a> {
    pub(crate) devices: &'a Devices,
    pub(crate) ratios: Vec<f64>,
    pub(crate) slowest: f64,
    /// Bytes a plan may hold on its fullest device (the smallest device memory).
    pub(crate) memory_limit: f64,
    stats: BTreeMap<u64, LenStats>,
}

/// A communication step's collectives and cost (forward and backward together).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CommCost {
    /// Forward collective (`None`: free).
    pub forward: Option<Collective>,
    /// Backward dual.
    pub backward: Option<Collective>,
    /// Forward exchange method.
    pub exchange: Exchange,
    /// Backward exchange method.
    pub exchange_backward: Exchange,
    /// Seconds, forward and backward.
    pub seconds: f64,
    /// Part of `seconds` that does not depend on the ratios (for the LP).
    pub constant: f64,
    /// Seconds per unit of the largest ratio (for the LP).
    pub per_max_ratio: f64,
}

impl CommCost {
    const FREE: CommCost = CommCost {
        forward: None,
        backward: None,
        exchange: Exchange::Free,
        exchange_backward: Exchange::Free,
        seconds: 0.0,
        constant: 0.0,
        per_max_ratio: 0.0,
    };
}

impl<'a> CostModel<'a> {
    /// The model for `devices` with `ratios` (one per device, summing to 1), precomputing the
    /// shard statistics of every axis length in `graph`.
    pub fn new(graph: &Graph, devices: &'a Devices, ratios: &[f64]) -> CostModel<'a> {
        let slowest = devices
            .devices
            .iter()
            .map(|d| d.flops_per_s)
            .fold(f64::INFINITY, f64::min);
        let mut m = CostModel {
            devices,
            ratios: ratios.to_vec(),
            slowest,
            memory_limit: devices.min_memory_bytes(),
            stats: BTreeMap::new(),
        };
        let mut lens: Vec<u64> = graph
            .tensors
            .iter()
            .flat_map(|t| t.shape.iter().copied())
            .collect();
        lens.extend(
            graph
                .ops
                .iter()
                .flat_map(|o| o.rules.iter().map(|r| r.split_len)),
        );
        lens.sort_unstable();
        lens.dedup();
        for l in lens {
            let s = m.compute_stats(l);
            m.stats.insert(l, s);
        }
        m
    }

    fn compute_stats(&self, len: u64) -> LenStats {
        let shards = shard_lengths(&self.ratios, len);
        let l = len as f64;
        let mut compute: f64 = 0.0;
        let mut max_frac: f64 = 0.0;
        for (s, d) in shards.iter().zip(&self.devices.devices) {
            compute = compute.max(*s as f64 / l / d.flops_per_s);
            max_frac = max_frac.max(*s as f64 / l);
        }
        LenStats {
            compute,
            max_frac,
            holders: shards.iter().filter(|&&s| s > 0).count(),
        }
    }

    pub(crate) fn stats(&self, len: u64) -> LenStats {
        match self.stats.get(&len) {
            Some(s) => *s,
            None => self.compute_stats(len),
        }
    }

    /// Bytes the fullest device holds for a tensor of `bytes` and `shape` held as `prop`: all
    /// of it unless split, else its largest shard (an upper bound: summed over tensors, the
    /// largest shards may sit on different devices).
    pub fn held_bytes(&self, bytes: f64, prop: Prop, shape: &[u64]) -> f64 {
        match prop {
            Prop::Gather(a) => {
                let len = shape.get(a as usize).copied().unwrap_or(1);
                bytes * self.stats(len).max_frac
            }
            Prop::Identity | Prop::Reduce => bytes,
        }
    }

    /// Bytes a plan may hold on one device.
    pub fn memory_limit(&self) -> f64 {
        self.memory_limit
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.devices.len()
    }

    /// Seconds of forward + backward compute of `flops` split along a label of length
    /// `split_len` (`None`: replicated on every device).
    pub fn compute(&self, flops: f64, split_len: Option<u64>) -> f64 {
        match split_len {
            Some(l) => FORWARD_AND_BACKWARD * flops * self.stats(l).compute,
            None => FORWARD_AND_BACKWARD * flops / self.slowest,
        }
    }

    /// One direction of a sharded exchange: padded or grouped, whichever is cheaper. Returns
    /// (choice, seconds, constant part, seconds per unit of the largest ratio).
    fn padded_or_grouped(
        &self,
        kind: Collective,
        bytes: f64,
        len: u64,
    ) -> (Exchange, f64, f64, f64) {
        let p = self.devices();
        let link = self.devices.link(kind);
        let st = self.stats(len);
        let fixed = collective::padded_time(kind, 0.0, p, link);
        let per_unit = collective::padded_time(kind, bytes, p, link) - fixed;
        let padded = fixed + per_unit * st.max_frac;
        let rooted = if kind == Collective::ReduceScatter {
            Collective::Reduce
        } else {
            Collective::Broadcast
        };
        let rlink = self.devices.link(rooted);
        let shards = shard_lengths(&self.ratios, len);
        let grouped: f64 = shards
            .iter()
            .filter(|&&s| s > 0)
            .map(|&s| collective::time(rooted, s as f64 / len as f64 * bytes, p, rlink))
            .sum();
        if grouped < padded {
            (Exchange::Grouped, grouped, grouped, 0.0)
        } else {
            (Exchange::Padded, padded, fixed, per_unit)
        }
    }

    /// Cost of turning a tensor of `bytes` and `shape` held as `from` into `to`, forward and
    /// backward dual together. `None` when no single instruction does it.
    pub fn comm(&self, from: Prop, to: Prop, bytes: f64, shape: &[u64]) -> Option<CommCost> {
        let p = self.devices();
        let len = |a: u8| shape.get(a as usize).copied().unwrap_or(1);
        let pair = |fwd: Collective, bwd: Collective, l: u64| {
            let f = self.padded_or_grouped(fwd, bytes, l);
            let b = self.padded_or_grouped(bwd, bytes, l);
            CommCost {
                forward: Some(fwd),
                backward: Some(bwd),
                exchange: f.0,
                exchange_backward: b.0,
                seconds: f.1 + b.1,
                constant: f.2 + b.2,
                per_max_ratio: f.3 + b.3,
            }
        };
        Some(match (from, to) {
            (a, b) if a == b => CommCost::FREE,
            (Prop::Identity, Prop::Gather(_))
            | (Prop::Identity, Prop::Reduce)
            | (Prop::Gather(_), Prop::Reduce) => CommCost::FREE,
            // All-gather forward; the gradient is reduce-scattered backward.
            (Prop::Gather(a), Prop::Identity) => {
                pair(Collective::AllGather, Collective::ReduceScatter, len(a))
            }
            (Prop::Reduce, Prop::Gather(a)) => {
                pair(Collective::ReduceScatter, Collective::AllGather, len(a))
            }
            (Prop::Reduce, Prop::Identity) => {
                let t = collective::time(
                    Collective::AllReduce,
                    bytes,
                    p,
                    self.devices.link(Collective::AllReduce),
                );
                CommCost {
                    forward: Some(Collective::AllReduce),
                    backward: Some(Collective::AllReduce),
                    exchange: Exchange::Whole,
                    exchange_backward: Exchange::Whole,
                    seconds: 2.0 * t,
                    constant: 2.0 * t,
                    per_max_ratio: 0.0,
                }
            }
            (Prop::Gather(a), Prop::Gather(_)) => {
                let link = self.devices.link(Collective::AllToAll);
                let fixed = collective::padded_time(Collective::AllToAll, 0.0, p, link);
                let per_unit =
                    collective::padded_time(Collective::AllToAll, bytes, p, link) - fixed;
                let one = fixed + per_unit * self.stats(len(a)).max_frac;
                CommCost {
                    forward: Some(Collective::AllToAll),
                    backward: Some(Collective::AllToAll),
                    exchange: Exchange::Padded,
                    exchange_backward: Exchange::Padded,
                    seconds: 2.0 * one,
                    constant: 2.0 * fixed,
                    per_max_ratio: 2.0 * per_unit,
                }
            }
            _ => return None,
        })
    }

    /// Backward all-reduce of a replicated parameter's gradient.
    pub fn grad_sync(&self, bytes: f64) -> f64 {
        collective::time(
            Collective::AllReduce,
            bytes,
            self.devices(),
            self.devices.link(Collective::AllReduce),
        )
    }
}

/// Linear form of a program's cost in the ratios, for the LP:
/// `constant + compute_flops · max_d (r_d / F_d) + padded · max_d r_d`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinearCost {
    /// Seconds that do not depend on the ratios.
    pub constant: f64,
    /// Forward + backward FLOPs of split compute.
    pub compute_flops: f64,
    /// Seconds per unit of the largest ratio, summed over padded exchanges.
    pub padded: f64,
}

impl LinearCost {
    /// Evaluates the continuous (unrounded) cost at `ratios`.
    pub fn at(&self, ratios: &[f64], speeds: &[f64]) -> f64 {
        let c = ratios
            .iter()
            .zip(speeds)
            .map(|(r, f)| r / f)
            .fold(0.0, f64::max);
        let m = ratios.iter().copied().fold(0.0, f64::max);
        self.constant + self.compute_flops * c + self.padded * m
    }
}
