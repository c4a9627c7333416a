//! Cluster specs (`kind: Cluster` YAML) and the validated, indexed [`Cluster`].

use serde::{Deserialize, Serialize};

use crate::catalog::{GpuCatalog, GpuModelId};
use crate::error::SpecError;
use crate::quantity::{Bytes, MilliCpu};

/// Index of a node in its [`Cluster`] (dense, 0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index as `usize`, for slices indexed by node.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The cluster file as written by a user.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// Must be `tessera/v1`.
    pub api_version: String,
    /// Must be `Cluster`.
    pub kind: String,
    /// Optional Kubernetes-style metadata (name, labels); carried, not interpreted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// The node groups.
    pub spec: ClusterBody,
}

/// `metadata` of a spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// Name of the object.
    #[serde(default)]
    pub name: Option<String>,
}

/// `spec` of a cluster file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterBody {
    /// Groups of identical nodes.
    pub node_groups: Vec<NodeGroupSpec>,
}

/// `count` identical nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeGroupSpec {
    /// Group name (used in node names `NAME-0`, `NAME-1`, ...).
    pub name: String,
    /// Number of nodes.
    pub count: u32,
    /// GPU model name from the catalog.
    pub gpu: String,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// CPU per node, a quantity (`48`, `96000m`).
    pub cpus: MilliCpu,
    /// Host memory per node, a quantity (`512Gi`).
    pub memory: Bytes,
    /// Rack or NVLink domain label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
}

/// One machine.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Its index.
    pub id: NodeId,
    /// `GROUP-i`.
    pub name: String,
    /// Index of its group in [`Cluster::groups`].
    pub group: u16,
    /// GPU model.
    pub gpu: GpuModelId,
    /// GPUs on the node.
    pub gpus: u32,
    /// CPU capacity.
    pub cpu: MilliCpu,
    /// Memory capacity.
    pub memory: Bytes,
}

/// A validated node group.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeGroup {
    /// Group name.
    pub name: String,
    /// GPU model of every node in it.
    pub gpu: GpuModelId,
    /// Nodes in the group: `first_node .. first_node + count`.
    pub first_node: u32,
    /// Number of nodes.
    pub count: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// CPU per node.
    pub cpu: MilliCpu,
    /// Memory per node.
    pub memory: Bytes,
    /// Rack label.
    pub rack: Option<String>,
}

impl NodeGroup {
    /// GPUs of the whole group.
    pub fn total_gpus(&self) -> u64 {
        self.count as u64 * self.gpus_per_node as u64
    }
}

/// Resources of a node (capacity, or what is free of it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Whole GPUs.
    pub gpus: u32,
    /// CPU.
    pub cpu: MilliCpu,
    /// Memory.
    pub memory: Bytes,
}

impl Resources {
    /// True when every component of `need` fits in `self`.
    pub fn fits(&self, need: &Resources) -> bool {
        self.gpus >= need.gpus && self.cpu >= need.cpu && self.memory >= need.memory
    }

    /// Adds `other` component-wise.
    pub fn add(&mut self, other: &Resources) {
        self.gpus = self.gpus.saturating_add(other.gpus);
        self.cpu += other.cpu;
        self.memory += other.memory;
    }

    /// Subtracts `other` component-wise (saturating at zero; check [`fits`](Self::fits) first).
    pub fn sub(&mut self, other: &Resources) {
        self.gpus = self.gpus.saturating_sub(other.gpus);
        self.cpu -= other.cpu;
        self.memory -= other.memory;
    }
}

/// The most nodes a cluster may have; keeps ids in `u32` and memory bounded.
pub const MAX_NODES: u64 = 1_000_000;

/// A validated cluster: nodes indexed densely by [`NodeId`], grouped as in the spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// Name from metadata, or `cluster`.
    pub name: String,
    /// The catalog GPU ids refer to.
    pub catalog: GpuCatalog,
    /// Node groups in spec order.
    pub groups: Vec<NodeGroup>,
    /// All nodes, group by group.
    pub nodes: Vec<Node>,
}

impl Cluster {
    /// Parses and validates a `kind: Cluster` YAML document.
    pub fn from_yaml(text: &str, catalog: &GpuCatalog) -> Result<Cluster, SpecError> {
        let spec: ClusterSpec = serde_norway::from_str(text).map_err(SpecError::from_yaml)?;
        Cluster::from_spec(&spec, catalog).map_err(|e| e.located_in(text))
    }

    /// Validates a parsed spec.
    pub fn from_spec(spec: &ClusterSpec, catalog: &GpuCatalog) -> Result<Cluster, SpecError> {
        if spec.api_version != "tessera/v1" {
            return Err(SpecError::invalid(
                "apiVersion",
                format!("expected tessera/v1, got {:?}", spec.api_version),
            ));
        }
        if spec.kind != "Cluster" {
            return Err(SpecError::invalid(
                "kind",
                format!("expected Cluster, got {:?}", spec.kind),
            ));
        }
        if spec.spec.node_groups.is_empty() {
            return Err(SpecError::invalid(
                "spec.nodeGroups",
                "needs at least one group".into(),
            ));
        }
        let total: u64 = spec.spec.node_groups.iter().map(|g| g.count as u64).sum();
        if total > MAX_NODES {
            return Err(SpecError::invalid(
                "spec.nodeGroups",
                format!("{total} nodes exceed the limit of {MAX_NODES}"),
            ));
        }
        let mut groups = Vec::with_capacity(spec.spec.node_groups.len());
        let mut nodes = Vec::with_capacity(total as usize);
        for (gi, g) in spec.spec.node_groups.iter().enumerate() {
            let field = |f: &str| format!("spec.nodeGroups[{gi}].{f}");
            if g.name.is_empty()
                || !g
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(SpecError::invalid(
                    &field("name"),
                    format!(
                        "{:?} must be non-empty letters, digits, '-', '_' or '.'",
                        g.name
                    ),
                ));
            }
            if groups.iter().any(|x: &NodeGroup| x.name == g.name) {
                return Err(SpecError::invalid(
                    &field("name"),
                    format!("duplicate group {:?}", g.name),
                ));
            }
            if g.count == 0 {
                return Err(SpecError::invalid(
                    &field("count"),
                    "must be at least 1".into(),
                ));
            }
            if g.gpus_per_node == 0 {
                // GPU-less nodes would only confuse GPU-proportional shares; CPU-only work is
                // not scheduled here.
                return Err(SpecError::invalid(
                    &field("gpusPerNode"),
                    "must be at least 1".into(),
                ));
            }
            if g.gpus_per_node > 64 {
                return Err(SpecError::invalid(
                    &field("gpusPerNode"),
                    format!("{} is more than 64", g.gpus_per_node),
                ));
            }
            if g.cpus.0 == 0 {
                return Err(SpecError::invalid(
                    &field("cpus"),
                    "must be positive".into(),
                ));
            }
            if g.memory.0 == 0 {
                return Err(SpecError::invalid(
                    &field("memory"),
                    "must be positive".into(),
                ));
            }
            let gpu = catalog
                .resolve(&g.gpu)
                .map_err(|e| SpecError::invalid(&field("gpu"), e.to_string()))?;
            let first_node = nodes.len() as u32;
            for i in 0..g.count {
                nodes.push(Node {
                    id: NodeId(first_node + i),
                    name: format!("{}-{i}", g.name),
                    group: gi as u16,
                    gpu,
                    gpus: g.gpus_per_node,
                    cpu: g.cpus,
                    memory: g.memory,
                });
            }
            groups.push(NodeGroup {
                name: g.name.clone(),
                gpu,
                first_node,
                count: g.count,
                gpus_per_node: g.gpus_per_node,
                cpu: g.cpus,
                memory: g.memory,
                rack: g.rack.clone(),
            });
        }
        let name = spec
            .metadata
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_else(|| "cluster".to_string());
        Ok(Cluster {
            name,
            catalog: catalog.clone(),
            groups,
            nodes,
        })
    }

    /// A cluster of one group, for tests and built-in setups.
    pub fn homogeneous(
        gpu: &str,
        count: u32,
        gpus_per_node: u32,
        cpus: MilliCpu,
        memory: Bytes,
    ) -> Result<Cluster, SpecError> {
        let spec = ClusterSpec {
            api_version: "tessera/v1".into(),
            kind: "Cluster".into(),
            metadata: None,
            spec: ClusterBody {
                node_groups: vec![NodeGroupSpec {
                    name: "node".into(),
                    count,
                    gpu: gpu.into(),
                    gpus_per_node,
                    cpus,
                    memory,
                    rack: None,
                }],
            },
        };
        Cluster::from_spec(&spec, &GpuCatalog::builtin())
    }

    /// Capacity of a node.
    pub fn capacity(&self, node: NodeId) -> Resources {
        self.nodes
            .get(node.index())
            .map(|n| Resources {
                gpus: n.gpus,
                cpu: n.cpu,
                memory: n.memory,
            })
            .unwrap_or_default()
    }

    /// GPUs of the whole cluster, from its groups: the nodes are built from them, so this is
    /// `totals().0` without a pass over every node (policies read it at every re-plan).
    pub fn total_gpus(&self) -> u64 {
        self.groups.iter().map(NodeGroup::total_gpus).sum()
    }

    /// Sum of all nodes' capacities, as (GPUs, CPU, memory) in wide integers.
    pub fn totals(&self) -> (u64, u64, u64) {
        self.nodes.iter().fold((0, 0, 0), |(g, c, m), n| {
            (g + n.gpus as u64, c + n.cpu.0, m + n.memory.0)
        })
    }

    /// The largest number of GPUs one job can get if it must stay within one node group of an
    /// allowed GPU model (`allowed` empty = any model).
    pub fn max_gpus_for(&self, allowed: &[GpuModelId]) -> u64 {
        self.groups
            .iter()
            .filter(|g| allowed.is_empty() || allowed.contains(&g.gpu))
            .map(NodeGroup::total_gpus)
            .max()
            .unwrap_or(0)
    }
}

/// A resource dimension on which a job can be too large for a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dimension {
    /// Whole GPUs (count).
    Gpus,
    /// The GPU models a job may run on.
    GpuType,
    /// CPU.
    Cpu,
    /// Host memory.
    Memory,
}

/// Why a job can never run on a cluster, whatever else runs there: the first dimension, in
/// the order GPU type, GPU count, CPU, memory, that no eligible node group can satisfy.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unfit {
    /// The job asks for no GPU at all (a training job needs at least one).
    NoGpus,
    /// None of the GPU models the job accepts is in the cluster.
    GpuTypeMissing {
        /// The models the job accepts.
        wanted: Vec<String>,
        /// The models the cluster has, in group order, without repeats.
        available: Vec<String>,
    },
    /// No eligible node group has that many GPUs (a job stays within one group).
    TooManyGpus {
        /// GPUs requested.
        asked: u32,
        /// GPUs of the largest eligible group.
        largest_group: u64,
    },
    /// Even one GPU's share of the job's CPU request exceeds every eligible node.
    Cpu {
        /// The job's whole CPU request.
        asked: MilliCpu,
        /// GPUs it is split over.
        gpus: u32,
        /// CPU of the largest eligible node.
        largest_node: MilliCpu,
    },
    /// Even one GPU's share of the job's memory request exceeds every eligible node.
    Memory {
        /// The job's whole memory request.
        asked: Bytes,
        /// GPUs it is split over.
        gpus: u32,
        /// Memory of the largest eligible node.
        largest_node: Bytes,
    },
    /// Its CPU or memory per GPU lets a node hold only a few of its GPUs, and no eligible
    /// group has enough nodes for all of them.
    TooSpread {
        /// GPUs requested.
        gpus: u32,
        /// The dimension that limits GPUs per node.
        limit: Dimension,
        /// Most of its GPUs one node of the best group can hold.
        per_node: u32,
        /// Nodes of that group.
        nodes: u32,
    },
}

impl Unfit {
    /// The dimension that does not fit.
    pub fn dimension(&self) -> Dimension {
        match self {
            Unfit::NoGpus | Unfit::TooManyGpus { .. } => Dimension::Gpus,
            Unfit::GpuTypeMissing { .. } => Dimension::GpuType,
            Unfit::Cpu { .. } => Dimension::Cpu,
            Unfit::Memory { .. } => Dimension::Memory,
            Unfit::TooSpread { limit, .. } => *limit,
        }
    }
}

impl std::fmt::Display for Unfit {
    /// Reads after a job's name: `job "a" ` + `asks for 49 CPUs but the largest node has 48`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per_gpu = |gpus: u32| {
            if gpus > 1 {
                format!(" for {gpus} GPUs")
            } else {
                String::new()
            }
        };
        match self {
            Unfit::NoGpus => write!(f, "asks for 0 GPUs"),
            Unfit::GpuTypeMissing { wanted, available } => write!(
                f,
                "may run only on {} but the cluster has only {}",
                wanted.join(" or "),
                available.join(", ")
            ),
            Unfit::TooManyGpus {
                asked,
                largest_group,
            } => write!(
                f,
                "asks for {asked} GPUs but the largest eligible node group has {largest_group}"
            ),
            Unfit::Cpu {
                asked,
                gpus,
                largest_node,
            } => write!(
                f,
                "asks for {asked} CPUs{} but the largest node has {largest_node}",
                per_gpu(*gpus)
            ),
            Unfit::Memory {
                asked,
                gpus,
                largest_node,
            } => write!(
                f,
                "asks for {asked} of memory{} but the largest node has {largest_node}",
                per_gpu(*gpus)
            ),
            Unfit::TooSpread {
                gpus,
                limit,
                per_node,
                nodes,
            } => {
                let what = match limit {
                    Dimension::Cpu => "CPU",
                    Dimension::Memory => "memory",
                    _ => "GPUs",
                };
                write!(
                    f,
                    "asks for {gpus} GPUs, but its {what} per GPU lets a node hold at most \
                     {per_node} of them and the eligible groups have at most {nodes} nodes"
                )
            }
        }
    }
}

/// A job that can never run on a cluster, with the job's name for messages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("job {job:?} {reason}")]
pub struct UnfitJob {
    /// The job's name in its trace.
    pub job: String,
    /// Why it can never fit.
    pub reason: Unfit,
}

impl Cluster {
    /// Whether `job` can ever run on this cluster (empty of other work), on every dimension:
    /// an accepted GPU model, enough GPUs in one node group, and CPU and memory per node.
    ///
    /// A job stays within one node group and gets its explicit CPU/memory request split in
    /// proportion to the GPUs it holds on each node (as placement does), so a node holding
    /// `k` of its `n` GPUs needs `k/n` of the request. The most spread-out placement, one GPU
    /// per node, is the least a node must hold; a job fits when some eligible group has nodes
    /// big enough for that and enough of them. Jobs without an explicit request get the
    /// nodes' proportional share, which always fits.
    pub fn can_ever_fit(&self, job: &crate::TrainingJob) -> Result<(), UnfitJob> {
        self.unfit_reason(job).map_or(Ok(()), |reason| {
            Err(UnfitJob {
                job: job.name.to_string(),
                reason,
            })
        })
    }

    /// Whether `gpus` GPUs of model `gpu` for `job` could ever be placed on this cluster
    /// (empty of other work), CPU and memory included, as [`can_ever_fit`](Self::can_ever_fit)
    /// judges a job's own request: the job's explicit CPU and memory stay its totals, split
    /// over the `gpus` GPUs. Policies that choose a job's GPU type and count (Gavel, Sia, FCFS)
    /// ask this before they aim at a type whose nodes could never hold the job, where it
    /// would wait for ever. Allocates nothing.
    pub fn can_hold_on(&self, job: &crate::TrainingJob, gpu: GpuModelId, gpus: u32) -> bool {
        if gpus == 0 {
            return false;
        }
        let share = |total: u64, k: u32| (total as u128 * k as u128 / gpus as u128) as u64;
        let fits = |g: &NodeGroup, k: u32| {
            job.cpu.is_none_or(|c| share(c.0, k) <= g.cpu.0)
                && job.memory.is_none_or(|m| share(m.0, k) <= g.memory.0)
        };
        let mut capacity = 0u64;
        for g in self.groups.iter().filter(|g| g.gpu == gpu && g.count > 0) {
            if g.total_gpus() < gpus as u64 {
                continue;
            }
            // Most of the job's GPUs one node of the group can carry with their CPU and memory.
            let per_node = (1..=g.gpus_per_node.min(gpus))
                .rev()
                .find(|&k| fits(g, k))
                .unwrap_or(0);
            // Placement keeps a job within one node group.
            capacity = capacity.max(per_node as u64 * g.count as u64);
        }
        capacity >= gpus as u64
    }

    fn unfit_reason(&self, job: &crate::TrainingJob) -> Option<Unfit> {
        if job.gpus == 0 {
            return Some(Unfit::NoGpus);
        }
        let typed: Vec<&NodeGroup> = self
            .groups
            .iter()
            .filter(|g| job.gpu_types.is_empty() || job.gpu_types.contains(&g.gpu))
            .collect();
        if typed.is_empty() {
            let mut available: Vec<String> = Vec::new();
            for g in &self.groups {
                let name = &self.catalog.get(g.gpu).name;
                if !available.contains(name) {
                    available.push(name.clone());
                }
            }
            return Some(Unfit::GpuTypeMissing {
                wanted: job
                    .gpu_types
                    .iter()
                    .map(|&id| self.catalog.get(id).name.clone())
                    .collect(),
                available,
            });
        }
        let big: Vec<&NodeGroup> = typed
            .iter()
            .copied()
            .filter(|g| g.total_gpus() >= job.gpus as u64)
            .collect();
        if big.is_empty() {
            return Some(Unfit::TooManyGpus {
                asked: job.gpus,
                largest_group: typed.iter().map(|g| g.total_gpus()).max().unwrap_or(0),
            });
        }
        // The share of `total` that `k` of the job's GPUs carry, rounded as placement does.
        let share = |total: u64, k: u32| (total as u128 * k as u128 / job.gpus as u128) as u64;
        let cpu_ok: Vec<&NodeGroup> = big
            .iter()
            .copied()
            .filter(|g| job.cpu.is_none_or(|c| share(c.0, 1) <= g.cpu.0))
            .collect();
        if let (true, Some(asked)) = (cpu_ok.is_empty(), job.cpu) {
            return Some(Unfit::Cpu {
                asked,
                gpus: job.gpus,
                largest_node: big.iter().map(|g| g.cpu).max().unwrap_or_default(),
            });
        }
        let mem_ok: Vec<&NodeGroup> = cpu_ok
            .iter()
            .copied()
            .filter(|g| job.memory.is_none_or(|m| share(m.0, 1) <= g.memory.0))
            .collect();
        if let (true, Some(asked)) = (mem_ok.is_empty(), job.memory) {
            return Some(Unfit::Memory {
                asked,
                gpus: job.gpus,
                largest_node: cpu_ok.iter().map(|g| g.memory).max().unwrap_or_default(),
            });
        }
        // Device memory and MIG profiles join here once jobs can ask for them: filter
        // `mem_ok` by the group's GPU model and report the dimension the same way.
        let mut best: Option<(u64, Dimension, u32, u32)> = None;
        for g in mem_ok {
            // Most of the job's GPUs one node can hold, and what limits it.
            let mut per_node = g.gpus_per_node.min(job.gpus);
            let mut limit = Dimension::Gpus;
            while per_node > 1 {
                let cpu_fits = job.cpu.is_none_or(|c| share(c.0, per_node) <= g.cpu.0);
                let mem_fits = job
                    .memory
                    .is_none_or(|m| share(m.0, per_node) <= g.memory.0);
                if cpu_fits && mem_fits {
                    break;
                }
                limit = if cpu_fits {
                    Dimension::Memory
                } else {
                    Dimension::Cpu
                };
                per_node -= 1;
            }
            let capacity = per_node as u64 * g.count as u64;
            if capacity >= job.gpus as u64 {
                return None;
            }
            if best.is_none_or(|(c, ..)| capacity > c) {
                best = Some((capacity, limit, per_node, g.count));
            }
        }
        best.map(|(_, limit, per_node, nodes)| Unfit::TooSpread {
            gpus: job.gpus,
            limit,
            per_node,
            nodes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
apiVersion: tessera/v1
kind: Cluster
spec:
  nodeGroups:
    - name: v100
      count: 256
      gpu: V100-32GB
      gpusPerNode: 8
      cpus: 48
      memory: 512Gi
"#;

    #[test]
    fn minimal_cluster_parses() {
        let c = Cluster::from_yaml(MINIMAL, &GpuCatalog::builtin()).unwrap();
        assert_eq!(c.nodes.len(), 256);
        assert_eq!(c.totals().0, 2048);
        assert_eq!(c.capacity(NodeId(3)).cpu, MilliCpu::from_cores(48));
        assert_eq!(c.nodes[255].name, "v100-255");
        assert_eq!(c.max_gpus_for(&[]), 2048);
    }

    #[test]
    fn errors_name_the_field() {
        let cat = GpuCatalog::builtin();
        let cases = [
            (
                MINIMAL.replace("V100-32GB", "V200"),
                "spec.nodeGroups[0].gpu",
            ),
            (
                MINIMAL.replace("count: 256", "count: 0"),
                "spec.nodeGroups[0].count",
            ),
            (
                MINIMAL.replace("gpusPerNode: 8", "gpusPerNode: 0"),
                "spec.nodeGroups[0].gpusPerNode: must be at least 1",
            ),
            (
                MINIMAL.replace("memory: 512Gi", "memory: 512Qi"),
                "invalid quantity",
            ),
            (MINIMAL.replace("kind: Cluster", "kind: Pod"), "kind"),
            (
                MINIMAL.replace("cpus: 48", "cpus: 48\n      colour: red"),
                "unknown field",
            ),
        ];
        for (text, needle) in cases {
            let err = Cluster::from_yaml(&text, &cat).unwrap_err();
            assert!(err.line().is_some(), "{err:?} has no line");
            let err = err.to_string();
            assert!(err.contains(needle), "{err:?} lacks {needle:?}");
        }
    }

    #[test]
    fn invalid_fields_point_at_their_line() {
        let text = MINIMAL.replace("gpusPerNode: 8", "gpusPerNode: 99");
        let err = Cluster::from_yaml(&text, &GpuCatalog::builtin()).unwrap_err();
        assert_eq!(err.line(), Some(9), "{err}");
        assert!(
            err.to_string()
                .starts_with("line 9: field spec.nodeGroups[0].gpusPerNode"),
            "{err}"
        );
        let two = format!("{MINIMAL}    - name: b\n      count: 1\n      gpu: Z80\n      gpusPerNode: 1\n      cpus: 1\n      memory: 1Gi\n");
        let err = Cluster::from_yaml(&two, &GpuCatalog::builtin()).unwrap_err();
        assert_eq!(err.line(), Some(14), "{err}");
    }

    proptest::proptest! {
        /// Arbitrary text, and mutations of a valid file, never panic the parser.
        #[test]
        fn parser_never_panics(text in ".{0,200}", cut in 0usize..200, junk in ".{0,12}") {
            let cat = GpuCatalog::builtin();
            let _ = Cluster::from_yaml(&text, &cat);
            let mut mutated = MINIMAL.to_string();
            let at = (0..=cut.min(mutated.len())).rev().find(|i| mutated.is_char_boundary(*i)).unwrap_or(0);
            mutated.insert_str(at, &junk);
            let _ = Cluster::from_yaml(&mutated, &cat);
        }
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let err = Cluster::from_yaml(
            "apiVersion: tessera/v1\nkind: Cluster\nspec: [\n",
            &GpuCatalog::builtin(),
        )
        .unwrap_err();
        assert!(err.line().is_some(), "{err:?}");
    }

    fn job_named(name: &str, gpus: u32) -> crate::TrainingJob {
        let mut j = crate::TrainingJob::simple(
            0,
            crate::SimTime::ZERO,
            gpus,
            crate::SimDuration::from_secs(60),
        );
        j.name = name.into();
        j
    }

    fn two_groups() -> Cluster {
        let yaml = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: v, count: 4, gpu: V100-32GB, gpusPerNode: 8, cpus: 48, memory: 512Gi}\n    - {name: k, count: 2, gpu: K80, gpusPerNode: 4, cpus: 64, memory: 256Gi}\n";
        Cluster::from_yaml(yaml, &GpuCatalog::builtin()).unwrap()
    }

    #[test]
    fn total_gpus_from_the_groups_is_the_sum_over_nodes() {
        let c = two_groups();
        assert_eq!(c.total_gpus(), 4 * 8 + 2 * 4);
        assert_eq!(c.total_gpus(), c.totals().0);
    }

    #[test]
    fn unfit_cpu_and_memory_are_named() {
        let c = two_groups();
        let mut a = job_named("a", 1);
        a.cpu = Some(MilliCpu::from_cores(65));
        let err = c.can_ever_fit(&a).unwrap_err();
        assert_eq!(err.reason.dimension(), Dimension::Cpu);
        assert_eq!(
            err.to_string(),
            "job \"a\" asks for 65 CPUs but the largest node has 64"
        );
        a.cpu = Some(MilliCpu::from_cores(64));
        assert!(c.can_ever_fit(&a).is_ok(), "64 CPUs fit a K80 node");
        // Only V100 nodes (48 CPUs) are eligible: 49 no longer fits.
        a.gpu_types = vec![c.catalog.resolve("V100-32GB").unwrap()];
        a.cpu = Some(MilliCpu::from_cores(49));
        assert_eq!(
            c.can_ever_fit(&a).unwrap_err().to_string(),
            "job \"a\" asks for 49 CPUs but the largest node has 48"
        );
        let mut m = job_named("m", 1);
        m.memory = Some(Bytes::from_gib(600));
        let err = c.can_ever_fit(&m).unwrap_err();
        assert_eq!(err.reason.dimension(), Dimension::Memory);
        assert_eq!(
            err.to_string(),
            "job \"m\" asks for 600Gi of memory but the largest node has 512Gi"
        );
    }

    #[test]
    fn unfit_gpu_count_and_type_are_named() {
        let c = two_groups();
        assert_eq!(
            c.can_ever_fit(&job_named("z", 0)).unwrap_err().reason,
            Unfit::NoGpus
        );
        let err = c.can_ever_fit(&job_named("big", 33)).unwrap_err();
        assert_eq!(err.reason.dimension(), Dimension::Gpus);
        assert!(err
            .to_string()
            .contains("largest eligible node group has 32"));
        assert!(c.can_ever_fit(&job_named("ok", 32)).is_ok());
        let mut t = job_named("t", 1);
        t.gpu_types = vec![
            c.catalog.resolve("A100-40GB").unwrap(),
            c.catalog.resolve("H100-80GB").unwrap(),
        ];
        let err = c.can_ever_fit(&t).unwrap_err();
        assert_eq!(err.reason.dimension(), Dimension::GpuType);
        assert_eq!(
            err.to_string(),
            "job \"t\" may run only on A100-40GB or H100-80GB but the cluster has only V100-32GB, K80"
        );
        // K80 only: 8 GPUs fit (2 nodes x 4), 9 do not.
        t.gpu_types = vec![c.catalog.resolve("K80").unwrap()];
        assert!(c.can_ever_fit(&job_named("k", 8)).is_ok());
        t.gpus = 9;
        assert!(c
            .can_ever_fit(&t)
            .unwrap_err()
            .to_string()
            .contains("has 8"));
    }

    #[test]
    fn multi_gpu_requests_split_over_nodes() {
        let c = Cluster::homogeneous(
            "V100-32GB",
            2,
            8,
            MilliCpu::from_cores(48),
            Bytes::from_gib(512),
        )
        .unwrap();
        // 4 GPUs, 120 CPUs: 30 per GPU, so a 48-CPU node holds one GPU; 2 nodes hold 2 < 4.
        let mut j = job_named("s", 4);
        j.cpu = Some(MilliCpu::from_cores(120));
        let err = c.can_ever_fit(&j).unwrap_err();
        assert_eq!(
            err.reason,
            Unfit::TooSpread {
                gpus: 4,
                limit: Dimension::Cpu,
                per_node: 1,
                nodes: 2
            }
        );
        // 2 GPUs, 90 CPUs: 45 per GPU, one per node, 2 nodes: fits.
        j.gpus = 2;
        j.cpu = Some(MilliCpu::from_cores(90));
        assert!(c.can_ever_fit(&j).is_ok());
        // 2 GPUs asking 100 CPUs: 50 per GPU exceeds any node.
        j.cpu = Some(MilliCpu::from_cores(100));
        assert_eq!(
            c.can_ever_fit(&j).unwrap_err().to_string(),
            "job \"s\" asks for 100 CPUs for 2 GPUs but the largest node has 48"
        );
        // Proportional jobs always fit when their GPUs do.
        assert!(c.can_ever_fit(&job_named("p", 16)).is_ok());
    }

    proptest::proptest! {
        /// On a one-group cluster, a job fits exactly when a brute-force search over GPUs per
        /// node finds a placement with enough nodes.
        #[test]
        fn fit_agrees_with_brute_force(
            nodes in 1u32..5, gpn in 1u32..9, node_cpu in 1u64..100, node_gib in 1u64..600,
            gpus in 1u32..40, cpu in proptest::option::of(1u64..400),
            gib in proptest::option::of(1u64..2000),
        ) {
            let c = Cluster::homogeneous("V100-32GB", nodes, gpn, MilliCpu::from_cores(node_cpu), Bytes::from_gib(node_gib)).unwrap();
            let mut j = job_named("j", gpus);
            j.cpu = cpu.map(MilliCpu::from_cores);
            j.memory = gib.map(Bytes::from_gib);
            let share = |t: u64, k: u32| (t as u128 * k as u128 / gpus as u128) as u64;
            let brute = (1..=gpn.min(gpus)).any(|k| {
                let fits = j.cpu.is_none_or(|x| share(x.0, k) <= node_cpu * 1000)
                    && j.memory.is_none_or(|x| share(x.0, k) <= node_gib << 30);
                fits && k as u64 * nodes as u64 >= gpus as u64
            });
            proptest::prop_assert_eq!(c.can_ever_fit(&j).is_ok(), brute);
        }

        /// `can_hold_on` a type is `can_ever_fit` of the job restricted to that type, at any
        /// count (explicit CPU and memory stay the job's totals).
        #[test]
        fn hold_on_a_type_agrees_with_fit_restricted_to_it(
            gpus in 1u32..48, count in 0u32..48, cpu in proptest::option::of(1u64..200),
            gib in proptest::option::of(1u64..3000), k80 in proptest::bool::ANY,
        ) {
            let c = two_groups();
            let gpu = c.catalog.resolve(if k80 { "K80" } else { "V100-32GB" }).unwrap();
            let mut j = job_named("j", gpus);
            j.cpu = cpu.map(MilliCpu::from_cores);
            j.memory = gib.map(Bytes::from_gib);
            let mut restricted = j.clone();
            restricted.gpus = count;
            restricted.gpu_types = vec![gpu];
            proptest::prop_assert_eq!(
                c.can_hold_on(&j, gpu, count),
                c.can_ever_fit(&restricted).is_ok()
            );
        }
    }
}
