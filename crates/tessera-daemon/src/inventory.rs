//! From the resource manager's inventory to the scheduling core's [`Cluster`].
//!
//! Each (node, GRES type) pair becomes one logical node of the cluster: a node with MIG slices
//! of two profiles (`gpu:a100_1g.10gb:7,gpu:a100_3g.40gb:2`) becomes two logical nodes, and its
//! CPU and memory are split between them in proportion to their GPUs, so that the policy can
//! never over-allocate the physical node. Logical nodes of the same shape form one node group.
//!
//! GRES type names map to catalog GPU names: the config's `gresMap`, then the catalog itself
//! (`A100-80GB`, `t4`), then built-in defaults (`a100` -> `A100-80GB`, `v100` -> `V100-32GB`, ...).
//! A MIG type `BASE_PROFILE` (`a100_3g.40gb`) becomes a GPU model of its own, derived from the
//! base model and the profile in its MIG geometry, whose alias is the GRES type; jobs ask for it
//! by that name.

use std::collections::BTreeMap;

use serde::Serialize;
use tessera_model::cluster::{ClusterBody, NodeGroupSpec};
use tessera_model::{
    Bytes, Cluster, ClusterSpec, DeviceAlloc, GpuCatalog, GpuMask, GpuModel, GpuModelId, GpuPart,
    MigGeometry, MigInstance, MilliCpu, NodeId,
};

use crate::backend::{
    InventoryNode, NodeHealth, PlacedDevices, PlacedMig, PlacedPart, PlacedShare,
};
use crate::error::DaemonError;

/// Default GRES type -> catalog name.
pub const DEFAULT_GRES_MAP: &[(&str, &str)] = &[
    ("k80", "K80"),
    ("p100", "P100"),
    ("v100", "V100-32GB"),
    ("t4", "T4"),
    ("a10", "A10"),
    ("a40", "A40"),
    ("a100", "A100-80GB"),
    ("h100", "H100-80GB"),
    ("h200", "H200"),
];

/// One logical node: a backend node and one of its GRES types.
#[derive(Clone, Debug, PartialEq)]
pub struct LogicalNode {
    /// Backend node name.
    pub node: String,
    /// GRES type (`None` for untyped GPUs or a GPU-less node).
    pub gres_type: Option<String>,
    /// Health at inventory time.
    pub health: NodeHealth,
}

/// The cluster the policies see, and how its nodes map back to the backend's.
#[derive(Clone, Debug)]
pub struct ClusterMap {
    /// The cluster (its catalog includes derived MIG models).
    pub cluster: Cluster,
    /// Indexed by [`NodeId`].
    pub logical: Vec<LogicalNode>,
    gres_map: BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CatalogOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    gpus: &'a [GpuModel],
    mig_geometries: Vec<&'a MigGeometry>,
}

fn is_mig_profile(p: &str) -> bool {
    // `3g.40gb`
    let Some((g, mem)) = p.split_once('.') else {
        return false;
    };
    g.len() >= 2
        && g.ends_with('g')
        && g[..g.len() - 1].bytes().all(|b| b.is_ascii_digit())
        && mem.ends_with("gb")
        && mem[..mem.len() - 2].bytes().all(|b| b.is_ascii_digit())
}

impl ClusterMap {
    /// Builds the cluster from an inventory.
    pub fn build(
        nodes: &[InventoryNode],
        gres_map: &BTreeMap<String, String>,
        default_gpu: Option<&str>,
        base: &GpuCatalog,
    ) -> Result<ClusterMap, DaemonError> {
        let mut map: BTreeMap<String, String> = DEFAULT_GRES_MAP
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for (k, v) in gres_map {
            map.insert(k.to_ascii_lowercase(), v.clone());
        }
        let default_gpu = default_gpu.unwrap_or("A100-80GB").to_string();
        if base.find(&default_gpu).is_none() {
            return Err(DaemonError::Inventory(format!(
                "defaultGpu {default_gpu:?} is not in the catalog"
            )));
        }
        for v in map.values() {
            if base.find(v).is_none() {
                return Err(DaemonError::Inventory(format!(
                    "gresMap target {v:?} is not in the catalog"
                )));
            }
        }
        // Pass 1: every GRES type -> a catalog name, deriving MIG models.
        let mut models: Vec<GpuModel> = base.models().to_vec();
        let mut type_model: BTreeMap<String, String> = BTreeMap::new();
        for n in nodes {
            for g in &n.gres {
                let Some(t) = &g.kind else { continue };
                if type_model.contains_key(t) {
                    continue;
                }
                match resolve_type(t, &map, base) {
                    Some(Resolved::Model(name)) => {
                        type_model.insert(t.clone(), name);
                    }
                    Some(Resolved::Mig(model)) => {
                        type_model.insert(t.clone(), model.name.clone());
                        if !models.iter().any(|m| m.name == model.name) {
                            models.push(model);
                        }
                    }
                    None => {
                        tracing::warn!(node = %n.name, gres = %t, "unknown GRES type; its GPUs are not scheduled");
                    }
                }
            }
        }
        let mut geos: Vec<&MigGeometry> = Vec::new();
        for i in 0..base.models().len() {
            if let Some(g) = base.mig_geometry(GpuModelId(i as u16)) {
                if !geos.iter().any(|x| x.name == g.name) {
                    geos.push(g);
                }
            }
        }
        let text = serde_norway::to_string(&CatalogOut {
            api_version: "tessera/v1",
            kind: "GpuCatalog",
            gpus: &models,
            mig_geometries: geos,
        })
        .map_err(|e| DaemonError::Inventory(e.to_string()))?;
        let catalog =
            GpuCatalog::from_yaml(&text).map_err(|e| DaemonError::Inventory(e.to_string()))?;

        // Pass 2: logical nodes, grouped by shape in first-seen order.
        struct Pending {
            logical: LogicalNode,
            gpu: String,
            gpus: u32,
            cpu: MilliCpu,
            memory: Bytes,
        }
        let mut pending: Vec<Pending> = Vec::new();
        for n in nodes {
            let typed: Vec<(Option<String>, String, u32)> = n
                .gres
                .iter()
                .filter_map(|g| match &g.kind {
                    Some(t) => type_model
                        .get(t)
                        .map(|m| (Some(t.clone()), m.clone(), g.count)),
                    None => Some((None, default_gpu.clone(), g.count)),
                })
                .collect();
            let total: u64 = typed.iter().map(|t| t.2 as u64).sum();
            if typed.is_empty() {
                // No GPU Tessera knows: no job can run there (every job needs a GPU), and a
                // node group of zero GPUs is not a valid cluster spec. Left out, said once.
                tracing::warn!(node = %n.name, "node has no known GPUs; not scheduled");
                continue;
            }
            for (t, model, count) in typed {
                if count > GpuMask::MAX_GPUS {
                    // Devices are named in a 64-bit mask per node.
                    tracing::warn!(node = %n.name, gpus = count, "more than {} GPUs of one type on a node; not scheduled", GpuMask::MAX_GPUS);
                    continue;
                }
                // Whole cores and whole MiB, rounded down, so the parts never exceed the node.
                let share = |v: u64, unit: u64| -> u64 {
                    ((v as u128 * count as u128 / total.max(1) as u128) as u64) / unit * unit
                };
                pending.push(Pending {
                    logical: LogicalNode {
                        node: n.name.clone(),
                        gres_type: t,
                        health: n.health,
                    },
                    gpu: model,
                    gpus: count,
                    cpu: MilliCpu(share(n.cpu.0, 1000).max(1000)),
                    memory: Bytes(share(n.memory.0, 1 << 20).max(1 << 20)),
                });
            }
        }
        if pending.is_empty() {
            return Err(DaemonError::Inventory(
                "the backend reports no nodes".into(),
            ));
        }
        let mut groups: Vec<(NodeGroupSpec, Vec<usize>)> = Vec::new();
        for (i, p) in pending.iter().enumerate() {
            let found = groups.iter_mut().find(|(g, _)| {
                g.gpu == p.gpu
                    && g.gpus_per_node == p.gpus
                    && g.cpus == p.cpu
                    && g.memory == p.memory
            });
            match found {
                Some((g, members)) => {
                    g.count += 1;
                    members.push(i);
                }
                None => {
                    let spec = NodeGroupSpec {
                        name: format!("g{}", groups.len()),
                        count: 1,
                        gpu: p.gpu.clone(),
                        gpus_per_node: p.gpus,
                        cpus: p.cpu,
                        memory: p.memory,
                        rack: None,
                    };
                    groups.push((spec, vec![i]));
                }
            }
        }
        let mut logical = Vec::with_capacity(pending.len());
        for (_, members) in &groups {
            for &i in members {
                logical.push(pending[i].logical.clone());
            }
        }
        let spec = ClusterSpec {
            api_version: "tessera/v1".into(),
            kind: "Cluster".into(),
            metadata: None,
            spec: ClusterBody {
                node_groups: groups.into_iter().map(|(g, _)| g).collect(),
            },
        };
        let cluster = Cluster::from_spec(&spec, &catalog)
            .map_err(|e| DaemonError::Inventory(e.to_string()))?;
        Ok(ClusterMap {
            cluster,
            logical,
            gres_map: map,
        })
    }

    /// Resolves a job's GPU type to a GPU model: a GRES type or catalog name of a model this
    /// cluster has; else a family name (`a100`, `H100`, case ignored) when exactly one of the
    /// cluster's whole-GPU models is of that family (`a100` on an A100-40GB cluster is
    /// A100-40GB, though the default GRES map says A100-80GB); else a known model the cluster
    /// lacks (the job is then refused as unsatisfiable, with [`Self::absent_type_hint`]).
    pub fn resolve_gpu(&self, name: &str) -> Option<GpuModelId> {
        let lower = name.to_ascii_lowercase();
        let catalog = &self.cluster.catalog;
        let direct = match self.gres_map.get(&lower) {
            Some(target) => catalog.find(target),
            None => catalog.find(name),
        };
        let here = self.models();
        if let Some(id) = direct.filter(|id| here.contains(id)) {
            return Some(id);
        }
        let family: Vec<GpuModelId> = here
            .iter()
            .copied()
            .filter(|&id| {
                let n = catalog.get(id).name.to_ascii_lowercase();
                !n.contains("-mig-")
                    && (n == lower || n.strip_prefix(&lower).is_some_and(|r| r.starts_with('-')))
            })
            .collect();
        match family.as_slice() {
            [one] => Some(*one),
            _ => direct,
        }
    }

    /// The GPU models of this cluster's nodes, in node order, each once.
    fn models(&self) -> Vec<GpuModelId> {
        let mut out: Vec<GpuModelId> = Vec::new();
        for n in &self.cluster.nodes {
            if !out.contains(&n.gpu) {
                out.push(n.gpu);
            }
        }
        out
    }

    /// The GPU types a job may name on this cluster (GRES types and catalog names), sorted.
    pub fn gpu_type_names(&self) -> Vec<String> {
        let mut known: Vec<String> = self
            .logical
            .iter()
            .filter_map(|l| l.gres_type.clone())
            .chain(
                self.models()
                    .into_iter()
                    .map(|id| self.cluster.catalog.get(id).name.clone()),
            )
            .collect();
        known.sort();
        known.dedup();
        known
    }

    /// When `name` resolves to a model no node of this cluster has: a hint naming the model
    /// and the cluster's types, for the refusal.
    pub fn absent_type_hint(&self, name: &str) -> Option<String> {
        let id = self.resolve_gpu(name)?;
        if self.models().contains(&id) {
            return None;
        }
        Some(format!(
            "{name:?} means {}, which no node of this cluster has (this cluster has: {})",
            self.cluster.catalog.get(id).name,
            self.gpu_type_names().join(", ")
        ))
    }

    /// The node id of a backend node and GRES type.
    pub fn node_id(&self, node: &str, gres_type: Option<&str>) -> Option<NodeId> {
        self.logical
            .iter()
            .position(|l| l.node == node && l.gres_type.as_deref() == gres_type)
            .map(|i| NodeId(i as u32))
    }

    /// An allocation in backend terms (devices named when the allocation names them).
    pub fn placement(&self, alloc: &tessera_model::Allocation) -> Vec<PlacedShare> {
        alloc
            .shares
            .iter()
            .filter_map(|s| {
                let l = self.logical.get(s.node.index())?;
                let devices = s.devices.and_then(|d| {
                    let part = match d.part {
                        GpuPart::Whole => PlacedPart::Whole,
                        GpuPart::Mig(inst) => PlacedPart::Mig {
                            profile: self.mig_profile_name(s.node, inst)?,
                            start: inst.start,
                        },
                        GpuPart::Quota {
                            sm_request,
                            sm_limit,
                            memory,
                        } => PlacedPart::Quota {
                            sm_request,
                            sm_limit,
                            memory,
                        },
                    };
                    Some(PlacedDevices {
                        indices: d.gpus.iter().collect(),
                        part,
                    })
                });
                Some(PlacedShare {
                    node: l.node.clone(),
                    gres_type: l.gres_type.clone(),
                    gpus: s.gpus,
                    cpu: s.cpu,
                    memory: s.memory,
                    devices,
                })
            })
            .collect()
    }

    /// The name of a MIG instance's profile on a node (`3g.20gb`).
    pub fn mig_profile_name(&self, node: NodeId, inst: MigInstance) -> Option<String> {
        let n = self.cluster.nodes.get(node.index())?;
        let geo = self.cluster.catalog.mig_geometry(n.gpu)?;
        geo.profile(inst).map(|p| p.name.clone())
    }

    /// A layout in backend terms.
    pub fn placed_layout(&self, node: NodeId, layout: &[MigInstance]) -> Option<Vec<PlacedMig>> {
        layout
            .iter()
            .map(|&inst| {
                Some(PlacedMig {
                    profile: self.mig_profile_name(node, inst)?,
                    start: inst.start,
                })
            })
            .collect()
    }

    /// A placement back to an allocation of this cluster (`None` if a node is gone or a MIG
    /// profile is unknown).
    pub fn allocation(&self, placement: &[PlacedShare]) -> Option<tessera_model::Allocation> {
        let mut shares = Vec::with_capacity(placement.len());
        for p in placement {
            let node = self.node_id(&p.node, p.gres_type.as_deref())?;
            let devices = match &p.devices {
                None => None,
                Some(d) => {
                    let mut mask = GpuMask::default();
                    for &i in &d.indices {
                        if i >= GpuMask::MAX_GPUS {
                            return None;
                        }
                        mask.0 |= 1 << i;
                    }
                    let part = match &d.part {
                        PlacedPart::Whole => GpuPart::Whole,
                        PlacedPart::Mig { profile, start } => {
                            let n = self.cluster.nodes.get(node.index())?;
                            let geo = self.cluster.catalog.mig_geometry(n.gpu)?;
                            GpuPart::Mig(MigInstance {
                                profile: geo.find_profile(profile)?,
                                start: *start,
                            })
                        }
                        PlacedPart::Quota {
                            sm_request,
                            sm_limit,
                            memory,
                        } => GpuPart::Quota {
                            sm_request: *sm_request,
                            sm_limit: *sm_limit,
                            memory: *memory,
                        },
                    };
                    Some(DeviceAlloc { gpus: mask, part })
                }
            };
            shares.push(tessera_model::NodeShare {
                node,
                gpus: p.gpus,
                cpu: p.cpu,
                memory: p.memory,
                devices,
            });
        }
        Some(tessera_model::Allocation::new(shares))
    }
}

enum Resolved {
    Model(String),
    Mig(GpuModel),
}

/// True when a GRES type or GPU name resolves with the default GRES map (how a local node's
/// `gpu` is read): config validation refuses the others instead of silently not scheduling them.
pub(crate) fn known_gpu_type(t: &str, base: &GpuCatalog) -> bool {
    let map: BTreeMap<String, String> = DEFAULT_GRES_MAP
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    resolve_type(t, &map, base).is_some()
}

fn resolve_type(t: &str, map: &BTreeMap<String, String>, base: &GpuCatalog) -> Option<Resolved> {
    let lower = t.to_ascii_lowercase();
    if let Some(name) = map.get(&lower) {
        return Some(Resolved::Model(base.get(base.find(name)?).name.clone()));
    }
    if let Some(id) = base.find(t) {
        return Some(Resolved::Model(base.get(id).name.clone()));
    }
    let (base_name, profile) = lower.rsplit_once('_')?;
    if !is_mig_profile(profile) {
        return None;
    }
    let mut candidates: Vec<GpuModelId> = Vec::new();
    if let Some(id) = map
        .get(base_name)
        .and_then(|n| base.find(n))
        .or_else(|| base.find(base_name))
    {
        candidates.push(id);
    }
    for i in 0..base.models().len() {
        let id = GpuModelId(i as u16);
        if base
            .get(id)
            .name
            .to_ascii_lowercase()
            .starts_with(base_name)
            && !candidates.contains(&id)
        {
            candidates.push(id);
        }
    }
    for id in candidates {
        let model = base.get(id);
        let Some(geo) = base.mig_geometry(id) else {
            continue;
        };
        let Some(p) = geo.profiles.iter().find(|p| p.name == profile) else {
            continue;
        };
        let frac_c = p.compute_slices as f64 / 7.0;
        let frac_m = p.memory_slices as f64 / 8.0;
        return Some(Resolved::Mig(GpuModel {
            name: format!("{}-MIG-{}", model.name, p.name),
            aliases: vec![t.to_string()],
            memory_gib: p.memory_gib,
            fp16_tflops: model.fp16_tflops * frac_c,
            fp32_tflops: model.fp32_tflops * frac_c,
            memory_bandwidth_g_bs: model.memory_bandwidth_g_bs * frac_m,
            sms: p.sms,
            nvlink_g_bs: 0.0,
            mig: None,
        }));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::GresCount;

    fn node(name: &str, cores: u64, mem_mb: u64, gres: &[(&str, u32)]) -> InventoryNode {
        InventoryNode {
            name: name.into(),
            cpu: MilliCpu::from_cores(cores),
            memory: Bytes(mem_mb << 20),
            gres: gres
                .iter()
                .map(|(t, c)| GresCount {
                    kind: Some(t.to_string()),
                    count: *c,
                })
                .collect(),
            health: NodeHealth::Up,
        }
    }

    #[test]
    fn maps_slurm_test_cluster() {
        let nodes = vec![
            node("n1", 64, 512_000, &[("a100", 8)]),
            node("n2", 64, 512_000, &[("a100", 8)]),
            node("n3", 32, 256_000, &[("v100", 4)]),
            node(
                "n4",
                63,
                512_000,
                &[("a100_1g.10gb", 7), ("a100_3g.40gb", 2)],
            ),
            node("n5", 8, 1000, &[("mystery", 2)]),
        ];
        let m = ClusterMap::build(&nodes, &BTreeMap::new(), None, &GpuCatalog::builtin()).unwrap();
        let c = &m.cluster;
        assert_eq!(
            c.nodes.len(),
            5,
            "n4 splits in two, n5 (no known GPUs) is left out"
        );
        assert_eq!(c.groups[0].count, 2, "n1 and n2 share a group");
        assert_eq!(m.logical[0].node, "n1");
        assert_eq!(m.logical[1].node, "n2");
        let a100 = m.resolve_gpu("a100").unwrap();
        assert_eq!(c.catalog.get(a100).name, "A100-80GB");
        assert_eq!(m.resolve_gpu("A100-80GB"), Some(a100));
        let mig = m.resolve_gpu("a100_3g.40gb").unwrap();
        assert_eq!(c.catalog.get(mig).name, "A100-80GB-MIG-3g.40gb");
        assert!(m.resolve_gpu("a100_5g.99gb").is_none());
        let id = m.node_id("n4", Some("a100_3g.40gb")).unwrap();
        let n = &c.nodes[id.index()];
        assert_eq!((n.gpu, n.gpus), (mig, 2));
        let small = &c.nodes[m.node_id("n4", Some("a100_1g.10gb")).unwrap().index()];
        // CPU and memory split 7:2, whole cores and MiB, never more than the node.
        assert_eq!(small.cpu.0 + n.cpu.0, 49_000 + 14_000);
        assert!(small.memory.0 + n.memory.0 <= 512_000 << 20);
        assert_eq!(m.node_id("n5", None), None);
    }

    #[test]
    fn config_map_overrides_defaults() {
        let nodes = vec![node("x", 8, 1000, &[("tesla", 2)])];
        let map: BTreeMap<String, String> = [("tesla".to_string(), "T4".to_string())].into();
        let m = ClusterMap::build(&nodes, &map, None, &GpuCatalog::builtin()).unwrap();
        assert_eq!(m.cluster.catalog.get(m.cluster.nodes[0].gpu).name, "T4");
        assert_eq!(m.resolve_gpu("TESLA"), Some(m.cluster.nodes[0].gpu));
        let bad: BTreeMap<String, String> = [("tesla".to_string(), "V900".to_string())].into();
        assert!(ClusterMap::build(&nodes, &bad, None, &GpuCatalog::builtin()).is_err());
    }

    /// Issue 41: `gpuType: a100` meant A100-80GB (the default GRES map) even on a cluster of
    /// A100-40GBs, and was refused with no hint.
    #[test]
    fn family_names_resolve_to_the_clusters_one_model_of_that_family() {
        let nodes = vec![
            node("n1", 8, 1000, &[("A100-40GB", 4)]),
            node("n2", 8, 1000, &[("v100", 2)]),
        ];
        let m = ClusterMap::build(&nodes, &BTreeMap::new(), None, &GpuCatalog::builtin()).unwrap();
        let name = |id| m.cluster.catalog.get(id).name.clone();
        assert_eq!(
            m.resolve_gpu("a100").map(name).as_deref(),
            Some("A100-40GB")
        );
        assert_eq!(
            m.resolve_gpu("A100").map(name).as_deref(),
            Some("A100-40GB")
        );
        assert_eq!(
            m.resolve_gpu("v100").map(name).as_deref(),
            Some("V100-32GB")
        );
        assert_eq!(m.absent_type_hint("a100"), None);
        // A known model the cluster lacks: resolved (refused later as unsatisfiable) with a
        // hint listing what the cluster has.
        let hint = m.absent_type_hint("H100").expect("a hint");
        assert!(hint.contains("H100-80GB"), "{hint}");
        assert!(
            hint.contains("this cluster has: A100-40GB, V100-32GB, v100"),
            "{hint}"
        );
        // Two models of one family: the GRES map's meaning stands.
        let both = vec![
            node("n1", 8, 1000, &[("A100-40GB", 4)]),
            node("n2", 8, 1000, &[("A100-80GB", 4)]),
        ];
        let m = ClusterMap::build(&both, &BTreeMap::new(), None, &GpuCatalog::builtin()).unwrap();
        let a100 = m.resolve_gpu("a100").unwrap();
        assert_eq!(m.cluster.catalog.get(a100).name, "A100-80GB");
    }
}
