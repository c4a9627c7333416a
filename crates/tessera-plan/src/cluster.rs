//! Heterogeneous devices for planning: each device's attained FLOP/s and the collective links
//! inside a machine and between machines.
//!
//! ```yaml
//! apiVersion: tessera/v1
//! kind: PlanCluster
//! spec:
//!   machines:
//!     - {gpu: V100-16GB, count: 2, gpusPerMachine: 4, flops: 3.86T}
//!     - {gpu: P100, count: 6, gpusPerMachine: 4}          # flops from the catalog
//!   interNode: {bandwidth: 1.3G, latencyUs: 20}            # bytes/s, 10.4 Gb/s
//!   intraNode: {bandwidth: 10G, allToAll: {bandwidth: 6G}} # optional overrides
//! ```
//!
//! `bandwidthKind: algorithm` (on a fabric or one collective) reads a bandwidth as a
//! profiler's `size / time` for that collective instead of a per-rank bus bandwidth;
//! `memory` (bytes per GPU, per machine group) overrides the catalog's device memory, which
//! the planner checks every plan against.
//!
//! Defaults: FLOP/s = catalog FP32 peak × [`DEFAULT_ATTAINED_FRACTION`]; intra-node bandwidth
//! = the catalog's NVLink figure (or [`PCIE_BYTES_PER_S`] without NVLink); inter-node
//! bandwidth [`DEFAULT_INTER_NODE_BYTES_PER_S`]. Each collective may override bandwidth and
//! latency (calibrated figures).

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tessera_model::{Bytes, GpuCatalog};
use tessera_perf::collective::{BandwidthKind, Collective, CollectiveLinks, Fabric, Link};
use tessera_perf::roofline::{Precision, Roofline, DEFAULT_ATTAINED_FRACTION};

use crate::error::{invalid, PlanError};

/// Most devices a cluster may have (the search costs grow with them).
pub const MAX_DEVICES: usize = 4096;
/// PCIe 3.0 x16 attained bandwidth when a GPU has no NVLink (bytes/s).
pub const PCIE_BYTES_PER_S: f64 = 12e9;
/// Inter-node bandwidth when none is given: 10 Gb Ethernet (bytes/s).
pub const DEFAULT_INTER_NODE_BYTES_PER_S: f64 = 1.25e9;
/// Per-step latency inside a node (seconds).
pub const DEFAULT_INTRA_LATENCY_S: f64 = 5e-6;
/// Bytes in a GiB.
pub(crate) const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// Per-step latency across nodes (seconds).
pub const DEFAULT_INTER_LATENCY_S: f64 = 20e-6;

/// A quantity written as a number or a Kubernetes quantity string (`1.3G`, `3.86T`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    /// A plain number.
    Number(f64),
    /// A quantity string.
    Text(String),
}

impl Amount {
    fn value(&self, field: &str) -> Result<f64, PlanError> {
        let v = match self {
            Amount::Number(x) => *x,
            Amount::Text(s) => {
                Bytes::from_str(s)
                    .map_err(|e| invalid(field, e.to_string()))?
                    .0 as f64
            }
        };
        if !v.is_finite() || v <= 0.0 {
            return Err(invalid(field, "must be a positive number"));
        }
        Ok(v)
    }
}

/// Bandwidth/latency override of one link.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LinkSpec {
    /// Bytes per second.
    #[serde(default)]
    pub bandwidth: Option<Amount>,
    /// Microseconds per algorithm step.
    #[serde(default)]
    pub latency_us: Option<f64>,
    /// What `bandwidth` measures: `bus` (per rank, ring formulas) or `algorithm` (whole
    /// tensor over wall time, as a `size / time` profiler measures it).
    #[serde(default)]
    pub bandwidth_kind: Option<BandwidthKind>,
}

/// Links of one interconnect, with optional per-collective overrides.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FabricSpec {
    /// Bytes per second for every collective.
    #[serde(default)]
    pub bandwidth: Option<Amount>,
    /// Microseconds per step for every collective.
    #[serde(default)]
    pub latency_us: Option<f64>,
    /// What the bandwidths measure for every collective (`bus` or `algorithm`).
    #[serde(default)]
    pub bandwidth_kind: Option<BandwidthKind>,
    /// All-reduce override.
    #[serde(default)]
    pub all_reduce: Option<LinkSpec>,
    /// All-gather override.
    #[serde(default)]
    pub all_gather: Option<LinkSpec>,
    /// Reduce-scatter override.
    #[serde(default)]
    pub reduce_scatter: Option<LinkSpec>,
    /// All-to-all override.
    #[serde(default)]
    pub all_to_all: Option<LinkSpec>,
    /// Broadcast/reduce override.
    #[serde(default)]
    pub broadcast: Option<LinkSpec>,
}

/// A group of identical machines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineSpec {
    /// GPU model (catalog name).
    pub gpu: String,
    /// Number of machines.
    pub count: usize,
    /// GPUs in each machine.
    pub gpus_per_machine: usize,
    /// Calibrated FLOP/s per GPU.
    #[serde(default)]
    pub flops: Option<Amount>,
    /// Device memory per GPU in bytes (default: the catalog's).
    #[serde(default)]
    pub memory: Option<Amount>,
}

/// The body of a cluster file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanClusterBody {
    /// Machine groups (ranks are numbered in this order).
    pub machines: Vec<MachineSpec>,
    /// Links inside a machine.
    #[serde(default)]
    pub intra_node: FabricSpec,
    /// Links between machines.
    #[serde(default)]
    pub inter_node: FabricSpec,
}

/// A cluster file (`kind: PlanCluster`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanClusterSpec {
    /// `tessera/v1`.
    pub api_version: String,
    /// `PlanCluster`.
    pub kind: String,
    /// The cluster.
    pub spec: PlanClusterBody,
}

/// One device (rank).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Device {
    /// GPU model name.
    pub gpu: String,
    /// Machine index.
    pub machine: usize,
    /// Attained FLOP/s.
    pub flops_per_s: f64,
    /// Device memory in bytes (`f64::INFINITY`: not checked).
    pub memory_bytes: f64,
}

/// A validated planning cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Devices {
    /// Ranks in order.
    pub devices: Vec<Device>,
    /// Collective links.
    pub fabric: Fabric,
}

impl Devices {
    /// Number of devices.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Whether there are no devices.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Whether the ranks sit in more than one machine.
    pub fn spans_machines(&self) -> bool {
        self.devices
            .windows(2)
            .any(|w| w[0].machine != w[1].machine)
    }

    /// The link a collective over all devices uses.
    pub fn link(&self, kind: Collective) -> Link {
        self.fabric.links(self.spans_machines()).get(kind)
    }

    /// The smallest device memory (bytes; infinite when none is known).
    pub fn min_memory_bytes(&self) -> f64 {
        self.devices
            .iter()
            .map(|d| d.memory_bytes)
            .fold(f64::INFINITY, f64::min)
    }

    /// Device speeds (FLOP/s) in rank order.
    pub fn speeds(&self) -> Vec<f64> {
        self.devices.iter().map(|d| d.flops_per_s).collect()
    }

    /// A cluster of `count` identical devices in one machine per `per_machine` devices.
    pub fn uniform(count: usize, per_machine: usize, flops_per_s: f64, fabric: Fabric) -> Devices {
        let per = per_machine.max(1);
        Devices {
            devices: (0..count)
                .map(|i| Device {
                    gpu: "gpu".into(),
                    machine: i / per,
                    flops_per_s,
                    memory_bytes: f64::INFINITY,
                })
                .collect(),
            fabric,
        }
    }
}

fn apply(links: &mut CollectiveLinks, spec: &FabricSpec, field: &str) -> Result<(), PlanError> {
    for kind in [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Broadcast,
    ] {
        let l = links.get_mut(kind);
        if let Some(b) = &spec.bandwidth {
            l.bytes_per_s = b.value(&format!("{field}.bandwidth"))?;
        }
        if let Some(us) = spec.latency_us {
            if !(us.is_finite() && us >= 0.0) {
                return Err(invalid(format!("{field}.latencyUs"), "must be >= 0"));
            }
            l.latency_s = us * 1e-6;
        }
        if let Some(k) = spec.bandwidth_kind {
            l.kind = k;
        }
    }
    let overrides = [
        (Collective::AllReduce, &spec.all_reduce, "allReduce"),
        (Collective::AllGather, &spec.all_gather, "allGather"),
        (
            Collective::ReduceScatter,
            &spec.reduce_scatter,
            "reduceScatter",
        ),
        (Collective::AllToAll, &spec.all_to_all, "allToAll"),
        (Collective::Broadcast, &spec.broadcast, "broadcast"),
    ];
    for (kind, o, name) in overrides {
        if let Some(o) = o {
            let l = links.get_mut(kind);
            if let Some(b) = &o.bandwidth {
                l.bytes_per_s = b.value(&format!("{field}.{name}.bandwidth"))?;
            }
            if let Some(us) = o.latency_us {
                if !(us.is_finite() && us >= 0.0) {
                    return Err(invalid(format!("{field}.{name}.latencyUs"), "must be >= 0"));
                }
                l.latency_s = us * 1e-6;
            }
            if let Some(k) = o.bandwidth_kind {
                l.kind = k;
            }
        }
    }
    Ok(())
}

impl PlanClusterSpec {
    /// Parses a cluster file (YAML or JSON).
    pub fn from_text(text: &str) -> Result<PlanClusterSpec, PlanError> {
        serde_norway::from_str(text).map_err(|e| PlanError::Syntax {
            what: "cluster",
            message: e.to_string(),
        })
    }

    /// Resolves GPU names in `catalog` and fills defaults.
    pub fn validate(&self, catalog: &GpuCatalog) -> Result<Devices, PlanError> {
        if self.kind != "PlanCluster" {
            return Err(invalid(
                "kind",
                format!("expected PlanCluster, got {:?}", self.kind),
            ));
        }
        let mut devices = Vec::new();
        let mut slowest_intra = f64::INFINITY;
        let mut machine = 0;
        for (i, m) in self.spec.machines.iter().enumerate() {
            let field = format!("spec.machines[{i}]");
            if m.count == 0 || m.gpus_per_machine == 0 {
                return Err(invalid(field, "count and gpusPerMachine must be >= 1"));
            }
            let total = m
                .count
                .checked_mul(m.gpus_per_machine)
                .and_then(|n| n.checked_add(devices.len()));
            if total.is_none_or(|n| n > MAX_DEVICES) {
                return Err(invalid(
                    "spec.machines",
                    format!("at most {MAX_DEVICES} devices"),
                ));
            }
            let gpu = catalog.get(catalog.resolve(&m.gpu)?);
            let flops = match &m.flops {
                Some(a) => a.value(&format!("{field}.flops"))?,
                None => {
                    Roofline::from_gpu(gpu, Precision::Fp32, DEFAULT_ATTAINED_FRACTION).flops_per_s
                }
            };
            if !flops.is_finite() || flops <= 0.0 {
                return Err(invalid(
                    format!("{field}.flops"),
                    format!("{} has no FP32 peak in the catalog; give flops", gpu.name),
                ));
            }
            let memory_bytes = match &m.memory {
                Some(a) => a.value(&format!("{field}.memory"))?,
                None if gpu.memory_gib > 0.0 => gpu.memory_gib * GIB,
                None => f64::INFINITY,
            };
            let intra = if gpu.nvlink_g_bs > 0.0 {
                gpu.nvlink_g_bs * 1e9
            } else {
                PCIE_BYTES_PER_S
            };
            slowest_intra = slowest_intra.min(intra);
            for _ in 0..m.count {
                for _ in 0..m.gpus_per_machine {
                    devices.push(Device {
                        gpu: gpu.name.clone(),
                        machine,
                        flops_per_s: flops,
                        memory_bytes,
                    });
                }
                machine += 1;
            }
        }
        if devices.is_empty() {
            return Err(invalid("spec.machines", "the cluster has no devices"));
        }
        let mut intra = CollectiveLinks::uniform(Link::new(DEFAULT_INTRA_LATENCY_S, slowest_intra));
        let mut inter = CollectiveLinks::uniform(Link::new(
            DEFAULT_INTER_LATENCY_S,
            DEFAULT_INTER_NODE_BYTES_PER_S,
        ));
        apply(&mut intra, &self.spec.intra_node, "spec.intraNode")?;
        apply(&mut inter, &self.spec.inter_node, "spec.interNode")?;
        Ok(Devices {
            devices,
            fabric: Fabric {
                intra_node: intra,
                inter_node: inter,
            },
        })
    }
}
