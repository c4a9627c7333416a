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
}
