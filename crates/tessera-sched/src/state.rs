//! What is free and held, down to the device: [`ClusterState`] with one [`GpuState`] per GPU,
//! and the one validation of actions that every driver (the exact engine, the reference
//! engines, the daemon) applies.
//!
//! A GPU is in one of three conditions:
//! - **whole-free**: not partitioned, nobody on it; counted in the node's free GPUs;
//! - **held**: exclusively by one whole-GPU holder, or **shared** by quota holders
//!   (Σ SM requests ≤ 1000‰, Σ device memory ≤ capacity); either way not whole-free;
//! - **partitioned** into a MIG layout ([`Action::Reconfigure`]): holders take instances of
//!   the layout, one holder per instance.
//!
//! A reconfigured GPU is unavailable until its `ready_at`. A GPU marked **down** (a failure
//! the simulator injects, [`ClusterState::set_down`]) leaves the free pool and takes no new
//! holder until it is marked up again; drivers evict its holders before marking it down.

use crate::free_index::FreeIndex;
use tessera_model::{
    Allocation, Bytes, Cluster, DeviceAlloc, GpuMask, GpuModelId, GpuPart, InferenceService,
    MigInstance, NodeId, NodeShare, Resources, SimTime, TrainingJob,
};

use thiserror::Error;

use crate::view::Action;

/// Sum of SM requests a shared GPU may carry, permille (Σ requests ≤ 100%).
pub const SM_REQUEST_CAPACITY: u32 = 1000;
/// Sum of SM limits a shared GPU may carry, permille: limits may over-commit (Dilu allows
/// 150%); drivers check requests against [`SM_REQUEST_CAPACITY`] and limits against this.
pub const SM_LIMIT_CAPACITY: u32 = 1500;

/// One GPU's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuState {
    /// The MIG layout when partitioned.
    pub mig: Option<Vec<MigInstance>>,
    /// Instances of the layout in use (bit i = `mig[i]`).
    pub mig_busy: u8,
    /// Held whole by one holder.
    pub whole: bool,
    /// Quota holders sharing it.
    pub quota_holders: u32,
    /// Σ SM requests of its quota holders, permille.
    pub sm_requested: u32,
    /// Σ SM limits of its quota holders, permille.
    pub sm_limits: u32,
    /// Σ device memory pinned by quota holders and MIG instances in use.
    pub memory_used: Bytes,
    /// Unavailable before this instant (a reconfiguration in progress).
    pub ready_at: SimTime,
    /// Failed: not in the free pool, and validation refuses any new holder on it.
    pub down: bool,
}

impl GpuState {
    /// Nobody holds any part of it.
    pub fn is_idle(&self) -> bool {
        !self.whole && self.quota_holders == 0 && self.mig_busy == 0
    }

    /// Idle, not partitioned and not down: can be taken whole.
    pub fn is_whole_free(&self) -> bool {
        self.mig.is_none() && self.is_idle() && !self.down
    }
}

/// Nodes with whole-free GPUs per group, by free GPUs.
fn index_of(free: &[Resources], node_group: &[u32], groups: usize) -> Vec<FreeIndex> {
    // Each group's nodes lie in base..base + span (contiguous in a `Cluster`).
    let mut bounds: Vec<Option<(u32, u32)>> = vec![None; groups];
    for (n, &g) in node_group.iter().enumerate() {
        if let Some(b) = bounds.get_mut(g as usize) {
            let n = n as u32;
            *b = Some(b.map_or((n, n), |(lo, hi)| (lo.min(n), hi.max(n))));
        }
    }
    let mut index: Vec<FreeIndex> = bounds
        .iter()
        .map(|b| b.map_or_else(FreeIndex::empty, |(lo, hi)| FreeIndex::new(lo, hi - lo + 1)))
        .collect();
    for (n, (f, &g)) in free.iter().zip(node_group).enumerate() {
        if let Some(set) = index.get_mut(g as usize) {
            set.insert(f.gpus, n as u32);
        }
    }
    index
}

/// An action a driver refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{reason}")]
pub struct ActionError {
    /// What is wrong with it.
    pub reason: String,
}

fn refuse<T>(reason: impl Into<String>) -> Result<T, ActionError> {
    Err(ActionError {
        reason: reason.into(),
    })
}

/// Free resources per node and the state of every GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterState {
    free: Vec<Resources>,
    /// Σ `free[n].gpus`, kept as `free` changes so that a policy can tell in O(1) whether
    /// anything could start.
    free_gpus: u64,
    /// Σ `free[n].gpus` per node group, and each node's group, kept alike.
    group_free_gpus: Vec<u64>,
    node_group: Vec<u32>,
    /// The nodes with whole-free GPUs, per node group, as (free GPUs, node): placement finds
    /// the first node with at least k free GPUs, or the emptiest nodes, without scanning
    /// the group (see [`IndexedLedger`](crate::placement::IndexedLedger)).
    free_index: Vec<FreeIndex>,
    gpus: Vec<GpuState>,
    /// Index of each node's first GPU in `gpus`.
    first_gpu: Vec<u32>,
    /// Per node, what validating a start reads of its GPUs, kept as they change so that it
    /// need not visit them: the GPUs that can be taken whole (readiness aside), the GPUs
    /// up, and the instant by which every GPU is ready (see [`NodeSummary`]).
    summary: Vec<NodeSummary>,
    /// GPUs marked down and GPUs partitioned into MIG instances, per node group, kept as
    /// they change (rarely), so that explaining why a job waits visits a group's GPUs only
    /// when it has some ([`crate::reasons`]).
    group_down: Vec<u32>,
    group_partitioned: Vec<u32>,
}

/// What [`ClusterState::resolve_for`] reads of a node's GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct NodeSummary {
    /// Bit i: GPU i is whole-free ([`GpuState::is_whole_free`]), ready or not.
    whole_free: u64,
    /// GPUs not down.
    up: u32,
    /// Latest `ready_at` of its GPUs.
    ready_by: SimTime,
}

impl NodeSummary {
    fn of(gpus: &[GpuState]) -> NodeSummary {
        let mut s = NodeSummary::default();
        for (i, g) in gpus.iter().enumerate().take(64) {
            if g.is_whole_free() {
                s.whole_free |= 1 << i;
            }
            s.up += u32::from(!g.down);
            s.ready_by = s.ready_by.max(g.ready_at);
        }
        s
    }
}

impl ClusterState {
    /// Everything free.
    pub fn new(cluster: &Cluster) -> ClusterState {
        let mut first_gpu = Vec::with_capacity(cluster.nodes.len());
        let mut total = 0u32;
        for n in &cluster.nodes {
            first_gpu.push(total);
            total = total.saturating_add(n.gpus);
        }
        let free: Vec<Resources> = cluster
            .nodes
            .iter()
            .map(|n| cluster.capacity(n.id))
            .collect();
        let node_group: Vec<u32> = cluster.nodes.iter().map(|n| n.group as u32).collect();
        let mut group_free_gpus = vec![0u64; cluster.groups.len()];
        for (f, &g) in free.iter().zip(&node_group) {
            if let Some(sum) = group_free_gpus.get_mut(g as usize) {
                *sum += f.gpus as u64;
            }
        }
        let free_index = index_of(&free, &node_group, cluster.groups.len());
        let mut state = ClusterState {
            free_gpus: free.iter().map(|f| f.gpus as u64).sum(),
            group_free_gpus,
            free_index,
            node_group,
            free,
            gpus: vec![GpuState::default(); total as usize],
            first_gpu,
            summary: Vec::new(),
            group_down: vec![0; cluster.groups.len()],
            group_partitioned: vec![0; cluster.groups.len()],
        };
        state.summarize_all();
        state
    }

    /// Recomputes every node's [`NodeSummary`].
    fn summarize_all(&mut self) {
        self.summary = (0..self.first_gpu.len())
            .map(|n| NodeSummary::of(self.gpus(NodeId(n as u32))))
            .collect();
    }

    /// Recomputes one node's [`NodeSummary`] (after a rare change: layout, health).
    fn summarize(&mut self, node: NodeId) {
        let summary = NodeSummary::of(self.gpus(node));
        if let Some(s) = self.summary.get_mut(node.index()) {
            *s = summary;
        }
    }

    /// Records whether GPU `index` of `node` is whole-free now.
    fn note_whole_free(&mut self, node: NodeId, index: u32, whole_free: bool) {
        if let (Some(s), true) = (self.summary.get_mut(node.index()), index < 64) {
            if whole_free {
                s.whole_free |= 1 << index;
            } else {
                s.whole_free &= !(1 << index);
            }
        }
    }

    /// Free resources per node (`gpus` = whole-free GPUs).
    pub fn free(&self) -> &[Resources] {
        &self.free
    }

    /// Whole-free GPUs in the whole cluster (Σ of [`free`](Self::free)`.gpus`), in O(1).
    pub fn free_gpus(&self) -> u64 {
        self.free_gpus
    }

    /// Whole-free GPUs per node group (indexed like `Cluster::groups`), in O(1).
    pub fn group_free_gpus(&self) -> &[u64] {
        &self.group_free_gpus
    }

    /// GPUs marked down in node group `group`, in O(1).
    pub fn group_down_gpus(&self, group: usize) -> u32 {
        self.group_down.get(group).copied().unwrap_or(0)
    }

    /// GPUs of node group `group` partitioned into MIG instances, in O(1).
    pub fn group_partitioned_gpus(&self, group: usize) -> u32 {
        self.group_partitioned.get(group).copied().unwrap_or(0)
    }

    /// Adds `delta` to a per-group count of node `node`'s group.
    fn count_in_group(counts: &mut [u32], node_group: &[u32], node: NodeId, delta: i32) {
        if let Some(c) = node_group
            .get(node.index())
            .and_then(|&g| counts.get_mut(g as usize))
        {
            *c = c.saturating_add_signed(delta);
        }
    }

    /// Changes one node's free resources, keeping [`free_gpus`](Self::free_gpus) and
    /// [`group_free_gpus`](Self::group_free_gpus) in step.
    fn update_free(&mut self, node: NodeId, change: impl FnOnce(&mut Resources)) {
        if let Some(f) = self.free.get_mut(node.index()) {
            let before = f.gpus as u64;
            change(f);
            let after = f.gpus as u64;
            self.free_gpus = self.free_gpus - before + after;
            let group = self.node_group.get(node.index()).map(|&g| g as usize);
            if let Some(sum) = group.and_then(|g| self.group_free_gpus.get_mut(g)) {
                *sum = *sum - before + after;
            }
            if let (true, Some(index)) = (
                before != after,
                group.and_then(|g| self.free_index.get_mut(g)),
            ) {
                index.relocate(before as u32, after as u32, node.0);
            }
        }
    }

    /// The nodes of node group `group` with whole-free GPUs, by free GPUs; empty for no
    /// such group.
    pub fn free_index(&self, group: usize) -> &FreeIndex {
        static EMPTY: FreeIndex = FreeIndex::empty();
        self.free_index.get(group).unwrap_or(&EMPTY)
    }

    /// The GPUs of a node.
    pub fn gpus(&self, node: NodeId) -> &[GpuState] {
        let first = self.first_gpu.get(node.index()).copied().unwrap_or(0) as usize;
        let end = self
            .first_gpu
            .get(node.index() + 1)
            .map_or(self.gpus.len(), |&e| e as usize);
        self.gpus.get(first..end).unwrap_or(&[])
    }

    fn gpu_mut(&mut self, node: NodeId, index: u32) -> Option<&mut GpuState> {
        let first = *self.first_gpu.get(node.index())? as usize;
        self.gpus.get_mut(first + index as usize)
    }

    fn whole_free_mask(&self, node: NodeId, now: SimTime) -> GpuMask {
        match self.summary.get(node.index()) {
            Some(s) if s.ready_by <= now => return GpuMask(s.whole_free),
            _ => {}
        }
        let mut m = GpuMask::default();
        for (i, g) in self.gpus(node).iter().enumerate() {
            if g.is_whole_free() && g.ready_at <= now {
                m.0 |= 1 << i;
            }
        }
        m
    }

    /// Checks that `alloc` can be taken now by `job` and returns it with every share's
    /// devices named (a share without devices gets the lowest-numbered whole-free GPUs).
    /// Nothing changes.
    pub fn resolve(
        &self,
        cluster: &Cluster,
        job: &TrainingJob,
        alloc: &Allocation,
        now: SimTime,
    ) -> Result<Allocation, ActionError> {
        self.resolve_for(cluster, &job.gpu_types, alloc, now)
    }

    /// [`resolve`](Self::resolve) for a holder allowed on `gpu_types` (empty = any).
    pub fn resolve_for(
        &self,
        cluster: &Cluster,
        gpu_types: &[GpuModelId],
        alloc: &Allocation,
        now: SimTime,
    ) -> Result<Allocation, ActionError> {
        let mut resolved = alloc.clone();
        self.resolve_in_place(cluster, gpu_types, &mut resolved, now)?;
        Ok(resolved)
    }

    /// [`resolve_for`](Self::resolve_for) on the allocation itself, for a driver that owns it
    /// (no copy). On error `alloc` is unchanged.
    pub fn resolve_in_place(
        &self,
        cluster: &Cluster,
        gpu_types: &[GpuModelId],
        alloc: &mut Allocation,
        now: SimTime,
    ) -> Result<(), ActionError> {
        if alloc.shares.is_empty() || alloc.devices() == 0 {
            return refuse("allocation holds no GPUs");
        }
        if !alloc.nodes_distinct() {
            return refuse("a node appears twice");
        }
        if let [only] = alloc.shares.as_mut_slice() {
            only.devices = Some(self.devices_for(cluster, gpu_types, only, now)?);
            return Ok(());
        }
        // Every share is checked before any is named, so that a refusal changes nothing.
        let mut named: smallvec::SmallVec<[DeviceAlloc; 4]> = smallvec::SmallVec::new();
        for s in &alloc.shares {
            named.push(self.devices_for(cluster, gpu_types, s, now)?);
        }
        for (s, d) in alloc.shares.iter_mut().zip(named) {
            s.devices = Some(d);
        }
        Ok(())
    }

    /// The devices share `s` takes: the ones it names, checked, or the lowest-numbered
    /// whole-free GPUs of its node.
    fn devices_for(
        &self,
        cluster: &Cluster,
        gpu_types: &[GpuModelId],
        s: &NodeShare,
        now: SimTime,
    ) -> Result<DeviceAlloc, ActionError> {
        let Some(node) = cluster.nodes.get(s.node.index()) else {
            return refuse(format!("no node {}", s.node.0));
        };
        if !gpu_types.is_empty() && !gpu_types.contains(&node.gpu) {
            return refuse(format!(
                "node {} has a GPU model the holder does not allow",
                node.name
            ));
        }
        let up = self.summary.get(s.node.index()).map_or(0, |n| n.up);
        if node.gpus > 0 && up == 0 {
            return refuse(format!("node {} is down", node.name));
        }
        let free = self.free[s.node.index()];
        if !free.fits(&s.resources()) {
            return refuse(format!("over-allocates node {}", node.name));
        }
        match s.devices {
            None => {
                let whole_free = self.whole_free_mask(s.node, now);
                let picked = whole_free.lowest(s.gpus);
                if picked.count() < s.gpus {
                    return refuse(format!(
                        "node {}: {} whole GPUs asked, {} free and ready",
                        node.name,
                        s.gpus,
                        picked.count()
                    ));
                }
                if picked.iter().any(|i| i >= node.gpus) {
                    return refuse(format!("node {} has no GPU {:?}", node.name, picked));
                }
                // Picked from the whole-free, ready GPUs, as many as asked: what
                // `check_devices` would verify of them holds already.
                Ok(DeviceAlloc {
                    gpus: picked,
                    part: GpuPart::Whole,
                })
            }
            Some(d) => {
                self.check_devices(cluster, s, d, now)?;
                Ok(d)
            }
        }
    }

    fn check_devices(
        &self,
        cluster: &Cluster,
        s: &NodeShare,
        d: DeviceAlloc,
        now: SimTime,
    ) -> Result<(), ActionError> {
        let node = &cluster.nodes[s.node.index()];
        if d.gpus.iter().any(|i| i >= node.gpus) {
            return refuse(format!("node {} has no GPU {:?}", node.name, d.gpus));
        }
        let gpus = self.gpus(s.node);
        for i in d.gpus.iter() {
            let g = &gpus[i as usize];
            if g.down {
                return refuse(format!("GPU {i} of {} is down", node.name));
            }
            if g.ready_at > now {
                return refuse(format!(
                    "GPU {i} of {} is being reconfigured until {}",
                    node.name, g.ready_at
                ));
            }
        }
        match d.part {
            GpuPart::Whole => {
                if d.gpus.count() != s.gpus {
                    return refuse(format!(
                        "{} whole GPUs counted but {} named",
                        s.gpus,
                        d.gpus.count()
                    ));
                }
                if let Some(i) = d.gpus.iter().find(|&i| !gpus[i as usize].is_whole_free()) {
                    return refuse(format!("GPU {i} of {} is not free", node.name));
                }
            }
            GpuPart::Mig(inst) => {
                if s.gpus != 0 || d.gpus.count() != 1 {
                    return refuse("a MIG share names exactly one GPU and no whole GPUs");
                }
                let i = d.gpus.iter().next().unwrap_or(0);
                let g = &gpus[i as usize];
                let Some(layout) = &g.mig else {
                    return refuse(format!("GPU {i} of {} is not partitioned", node.name));
                };
                let Some(pos) = layout.iter().position(|x| *x == inst) else {
                    return refuse(format!(
                        "GPU {i} of {} has no instance {inst:?} in its layout",
                        node.name
                    ));
                };
                if g.mig_busy & (1 << pos) != 0 {
                    return refuse(format!("instance {inst:?} of GPU {i} is in use"));
                }
            }
            GpuPart::Quota {
                sm_request,
                sm_limit,
                memory,
            } => {
                if s.gpus != 0 {
                    return refuse("a quota share holds no whole GPUs");
                }
                let capacity = Bytes::from_gib_f64(cluster.catalog.get(node.gpu).memory_gib);
                if sm_request == 0 || sm_request > sm_limit || sm_limit as u32 > SM_REQUEST_CAPACITY
                {
                    return refuse(format!(
                        "quota needs 0 < request {sm_request} <= limit {sm_limit} <= 1000 permille"
                    ));
                }
                for i in d.gpus.iter() {
                    let g = &gpus[i as usize];
                    if g.whole || g.mig.is_some() {
                        return refuse(format!("GPU {i} of {} is not shareable", node.name));
                    }
                    if g.sm_requested + sm_request as u32 > SM_REQUEST_CAPACITY {
                        return refuse(format!("GPU {i}: SM requests exceed 1000 permille"));
                    }
                    if g.sm_limits + sm_limit as u32 > SM_LIMIT_CAPACITY {
                        return refuse(format!(
                            "GPU {i}: SM limits exceed {SM_LIMIT_CAPACITY} permille"
                        ));
                    }
                    if g.memory_used.0.saturating_add(memory.0) > capacity.0 {
                        return refuse(format!("GPU {i}: device memory exceeds its capacity"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Takes a resolved allocation (every share names its devices; see
    /// [`resolve`](Self::resolve)).
    pub fn take(&mut self, cluster: &Cluster, alloc: &Allocation) {
        for s in &alloc.shares {
            self.update_free(s.node, |f| f.sub(&s.resources()));
            let Some(d) = s.devices else { continue };
            let mem_of = |cluster: &Cluster, gpu_node: NodeId, inst: MigInstance| -> Bytes {
                let node = &cluster.nodes[gpu_node.index()];
                cluster
                    .catalog
                    .mig_geometry(node.gpu)
                    .and_then(|geo| geo.profile(inst))
                    .map_or(Bytes(0), |p| Bytes::from_gib_f64(p.memory_gib))
            };
            if let GpuPart::Whole = d.part {
                // Held whole: not whole-free, whatever they were.
                if let Some(summary) = self.summary.get_mut(s.node.index()) {
                    summary.whole_free &= !d.gpus.0;
                }
                let first = self.first_gpu.get(s.node.index()).copied().unwrap_or(0) as usize;
                for i in d.gpus.iter() {
                    if let Some(g) = self.gpus.get_mut(first + i as usize) {
                        g.whole = true;
                    }
                }
                continue;
            }
            for i in d.gpus.iter() {
                let became_shared;
                {
                    let mem = match d.part {
                        GpuPart::Mig(inst) => mem_of(cluster, s.node, inst),
                        _ => Bytes(0),
                    };
                    let Some(g) = self.gpu_mut(s.node, i) else {
                        continue;
                    };
                    let was_whole_free = g.is_whole_free();
                    became_shared = matches!(d.part, GpuPart::Quota { .. }) && was_whole_free;
                    match d.part {
                        // Taken above.
                        GpuPart::Whole => continue,
                        GpuPart::Mig(inst) => {
                            if let Some(pos) = g
                                .mig
                                .as_ref()
                                .and_then(|l| l.iter().position(|x| *x == inst))
                            {
                                g.mig_busy |= 1 << pos;
                                g.memory_used += mem;
                            }
                        }
                        GpuPart::Quota {
                            sm_request,
                            sm_limit,
                            memory,
                        } => {
                            g.quota_holders += 1;
                            g.sm_requested += sm_request as u32;
                            g.sm_limits += sm_limit as u32;
                            g.memory_used += memory;
                        }
                    }
                    let whole_free = g.is_whole_free();
                    if whole_free != was_whole_free {
                        self.note_whole_free(s.node, i, whole_free);
                    }
                }
                if became_shared {
                    // A whole-free GPU that starts being shared leaves the whole-GPU pool.
                    self.update_free(s.node, |f| f.gpus = f.gpus.saturating_sub(1));
                }
            }
        }
    }

    /// Returns a resolved allocation.
    pub fn release(&mut self, cluster: &Cluster, alloc: &Allocation) {
        for s in &alloc.shares {
            self.update_free(s.node, |f| f.add(&s.resources()));
            let Some(d) = s.devices else { continue };
            if let GpuPart::Whole = d.part {
                // Counted back above with the share's resources, but a down GPU stays out
                // of the pool; the others turn whole-free.
                let first = self.first_gpu.get(s.node.index()).copied().unwrap_or(0) as usize;
                let mut down = 0;
                let mut back = GpuMask::default();
                for i in d.gpus.iter() {
                    if let Some(g) = self.gpus.get_mut(first + i as usize) {
                        g.whole = false;
                        if g.down {
                            down += 1;
                        } else if g.is_whole_free() {
                            back.0 |= GpuMask::one(i).0;
                        }
                    }
                }
                if let Some(summary) = self.summary.get_mut(s.node.index()) {
                    summary.whole_free |= back.0;
                }
                if down > 0 {
                    self.update_free(s.node, |f| f.gpus = f.gpus.saturating_sub(down));
                }
                continue;
            }
            for i in d.gpus.iter() {
                let mut back_to_pool = false;
                let node = &cluster.nodes[s.node.index()];
                let mig_mem = |inst: MigInstance| {
                    cluster
                        .catalog
                        .mig_geometry(node.gpu)
                        .and_then(|geo| geo.profile(inst))
                        .map_or(Bytes(0), |p| Bytes::from_gib_f64(p.memory_gib))
                };
                let Some(g) = self.gpu_mut(s.node, i) else {
                    continue;
                };
                let mut out_of_pool = false;
                // A GPU held whole is not whole-free.
                let was_whole_free = !matches!(d.part, GpuPart::Whole) && g.is_whole_free();
                match d.part {
                    GpuPart::Whole => {
                        g.whole = false;
                        // Counted back above with the share's resources, but a down GPU
                        // stays out of the pool.
                        out_of_pool = g.down;
                    }
                    GpuPart::Mig(inst) => {
                        if let Some(pos) = g
                            .mig
                            .as_ref()
                            .and_then(|l| l.iter().position(|x| *x == inst))
                        {
                            g.mig_busy &= !(1 << pos);
                            g.memory_used -= mig_mem(inst);
                        }
                    }
                    GpuPart::Quota {
                        sm_request,
                        sm_limit,
                        memory,
                    } => {
                        g.quota_holders = g.quota_holders.saturating_sub(1);
                        g.sm_requested = g.sm_requested.saturating_sub(sm_request as u32);
                        g.sm_limits = g.sm_limits.saturating_sub(sm_limit as u32);
                        g.memory_used -= memory;
                        back_to_pool = g.is_whole_free();
                    }
                }
                let whole_free = g.is_whole_free();
                if whole_free != was_whole_free {
                    self.note_whole_free(s.node, i, whole_free);
                }
                if back_to_pool {
                    self.update_free(s.node, |f| f.gpus += 1);
                }
                if out_of_pool {
                    self.update_free(s.node, |f| f.gpus = f.gpus.saturating_sub(1));
                }
            }
        }
    }

    /// Checks a reconfiguration: the GPU exists, nobody holds any part of it, and the layout
    /// (if any) is valid for its MIG geometry.
    pub fn check_reconfigure(
        &self,
        cluster: &Cluster,
        node: NodeId,
        gpu: u32,
        layout: Option<&[MigInstance]>,
    ) -> Result<(), ActionError> {
        let Some(n) = cluster.nodes.get(node.index()) else {
            return refuse(format!("no node {}", node.0));
        };
        let Some(g) = self.gpus(node).get(gpu as usize) else {
            return refuse(format!("node {} has no GPU {gpu}", n.name));
        };
        if !g.is_idle() {
            return refuse(format!(
                "GPU {gpu} of {} is in use (preempt its holders first)",
                n.name
            ));
        }
        if g.down {
            return refuse(format!("GPU {gpu} of {} is down", n.name));
        }
        if let Some(layout) = layout {
            let Some(geo) = cluster.catalog.mig_geometry(n.gpu) else {
                return refuse(format!("{} is not MIG-capable", n.name));
            };
            geo.check_layout(layout)
                .map_err(|reason| ActionError { reason })?;
        }
        Ok(())
    }

    /// Applies a checked reconfiguration: the GPU takes `layout` (or whole mode) and is
    /// unavailable until `ready_at`.
    pub fn reconfigure(
        &mut self,
        node: NodeId,
        gpu: u32,
        layout: Option<Vec<MigInstance>>,
        ready_at: SimTime,
    ) {
        let was_whole_free;
        let now_whole_free;
        let partitioned;
        {
            let Some(g) = self.gpu_mut(node, gpu) else {
                return;
            };
            was_whole_free = g.is_whole_free();
            partitioned = (g.mig.is_some(), layout.is_some());
            g.mig = layout;
            g.mig_busy = 0;
            g.ready_at = ready_at;
            now_whole_free = g.is_whole_free();
        }
        match partitioned {
            (false, true) => {
                Self::count_in_group(&mut self.group_partitioned, &self.node_group, node, 1)
            }
            (true, false) => {
                Self::count_in_group(&mut self.group_partitioned, &self.node_group, node, -1)
            }
            _ => {}
        }
        self.summarize(node);
        match (was_whole_free, now_whole_free) {
            (true, false) => self.update_free(node, |f| f.gpus = f.gpus.saturating_sub(1)),
            (false, true) => self.update_free(node, |f| f.gpus += 1),
            _ => {}
        }
    }

    /// Marks a GPU down (failed) or up again; returns whether its health changed. A down
    /// GPU leaves the free pool and [`validate`] refuses any new holder on it; holders still
    /// on it (the driver evicts them first) keep what they hold until they release it. Does
    /// nothing for a GPU that does not exist.
    pub fn set_down(&mut self, node: NodeId, gpu: u32, down: bool) -> bool {
        let (was_whole_free, now_whole_free) = {
            let Some(g) = self.gpu_mut(node, gpu) else {
                return false;
            };
            if g.down == down {
                return false;
            }
            let was = g.is_whole_free();
            g.down = down;
            (was, g.is_whole_free())
        };
        Self::count_in_group(
            &mut self.group_down,
            &self.node_group,
            node,
            if down { 1 } else { -1 },
        );
        self.summarize(node);
        match (was_whole_free, now_whole_free) {
            (true, false) => self.update_free(node, |f| f.gpus = f.gpus.saturating_sub(1)),
            (false, true) => self.update_free(node, |f| f.gpus += 1),
            _ => {}
        }
        true
    }

    /// GPUs marked down, cluster-wide.
    pub fn down_gpus(&self) -> usize {
        self.gpus.iter().filter(|g| g.down).count()
    }

    /// Checks every device-level invariant against what the holders hold, node by node:
    /// free + held = capacity; at most one whole holder per GPU and none beside sharers or
    /// on a partitioned GPU; MIG instances valid for the layout and disjoint, one holder each;
    /// Σ SM requests ≤ 1000‰, Σ limits ≤ the limit capacity and Σ device memory ≤ capacity.
    ///
    /// `holdings` names each holder by anything printable (a job id, an instance id).
    pub fn check_invariants<'a, H: std::fmt::Debug>(
        &self,
        cluster: &Cluster,
        holdings: impl IntoIterator<Item = (H, &'a Allocation)>,
    ) -> Result<(), String> {
        let sum: u64 = self.free.iter().map(|f| f.gpus as u64).sum();
        if sum != self.free_gpus {
            return Err(format!(
                "{} whole-free GPUs counted, {sum} free node by node",
                self.free_gpus
            ));
        }
        let mut by_group = vec![0u64; self.group_free_gpus.len()];
        for (f, &g) in self.free.iter().zip(&self.node_group) {
            if let Some(s) = by_group.get_mut(g as usize) {
                *s += f.gpus as u64;
            }
        }
        if by_group != self.group_free_gpus {
            return Err(format!(
                "free GPUs per group counted {:?}, node by node {by_group:?}",
                self.group_free_gpus
            ));
        }
        if index_of(&self.free, &self.node_group, self.free_index.len()) != self.free_index {
            return Err("the index of nodes by free GPUs differs from the nodes".to_string());
        }
        let mut down = vec![0u32; self.group_down.len()];
        let mut partitioned = vec![0u32; self.group_partitioned.len()];
        for node in &cluster.nodes {
            for g in self.gpus(node.id) {
                if let Some(c) = down.get_mut(node.group as usize) {
                    *c += u32::from(g.down);
                }
                if let Some(c) = partitioned.get_mut(node.group as usize) {
                    *c += u32::from(g.mig.is_some());
                }
            }
        }
        if down != self.group_down || partitioned != self.group_partitioned {
            return Err(format!(
                "GPUs down per group {:?} and partitioned {:?} counted, {down:?} and \
                 {partitioned:?} GPU by GPU",
                self.group_down, self.group_partitioned
            ));
        }
        let mut rebuilt = ClusterState::new(cluster);
        // Carry layouts and readiness over: they are not holdings.
        for (a, b) in rebuilt.gpus.iter_mut().zip(&self.gpus) {
            a.mig = b.mig.clone();
            a.ready_at = b.ready_at;
        }
        rebuilt.summarize_all();
        for (n, node) in cluster.nodes.iter().enumerate() {
            let partitioned = self
                .gpus(node.id)
                .iter()
                .filter(|g| g.mig.is_some())
                .count();
            rebuilt.free[n].gpus = rebuilt.free[n].gpus.saturating_sub(partitioned as u32);
        }
        for (job, alloc) in holdings {
            for s in &alloc.shares {
                let Some(d) = s.devices else {
                    return Err(format!("job {job:?} holds a share without named devices"));
                };
                let node = cluster
                    .nodes
                    .get(s.node.index())
                    .ok_or_else(|| format!("job {job:?} holds a share on no node"))?;
                let gpus = rebuilt.gpus(s.node);
                let capacity = Bytes::from_gib_f64(cluster.catalog.get(node.gpu).memory_gib);
                for i in d.gpus.iter() {
                    let g = gpus.get(i as usize).ok_or_else(|| {
                        format!(
                            "job {job:?} holds GPU {i} of {}, which does not exist",
                            node.name
                        )
                    })?;
                    match d.part {
                        GpuPart::Whole if !g.is_whole_free() => {
                            return Err(format!(
                                "GPU {i} of {} held whole while also held or partitioned",
                                node.name
                            ));
                        }
                        GpuPart::Quota { .. } if g.whole || g.mig.is_some() => {
                            return Err(format!(
                                "GPU {i} of {} shared while held whole or partitioned",
                                node.name
                            ));
                        }
                        GpuPart::Mig(inst) => {
                            let layout = g.mig.as_ref().ok_or_else(|| format!("job {job:?} holds a MIG instance of unpartitioned GPU {i} of {}", node.name))?;
                            let pos = layout.iter().position(|x| *x == inst).ok_or_else(|| {
                                format!("job {job:?} holds {inst:?}, not in GPU {i}'s layout")
                            })?;
                            if g.mig_busy & (1 << pos) != 0 {
                                return Err(format!(
                                    "instance {inst:?} of GPU {i} of {} held twice",
                                    node.name
                                ));
                            }
                        }
                        _ => {}
                    }
                    let _ = capacity;
                }
            }
            rebuilt.take(cluster, alloc);
        }
        // Health last, as a driver applies it: a down GPU leaves the pool once idle.
        for node in &cluster.nodes {
            for (i, g) in self.gpus(node.id).iter().enumerate() {
                if g.down {
                    rebuilt.set_down(node.id, i as u32, true);
                }
            }
        }
        for (n, node) in cluster.nodes.iter().enumerate() {
            if self.summary.get(n) != Some(&NodeSummary::of(self.gpus(node.id))) {
                return Err(format!(
                    "node {}: kept summary {:?}, its GPUs give {:?}",
                    node.name,
                    self.summary.get(n),
                    NodeSummary::of(self.gpus(node.id))
                ));
            }
            if rebuilt.free[n] != self.free[n] {
                return Err(format!(
                    "node {}: free {:?} but holdings leave {:?}",
                    node.name, self.free[n], rebuilt.free[n]
                ));
            }
            let capacity = Bytes::from_gib_f64(cluster.catalog.get(node.gpu).memory_gib);
            let geo = cluster.catalog.mig_geometry(node.gpu);
            for (i, (g, r)) in self
                .gpus(node.id)
                .iter()
                .zip(rebuilt.gpus(node.id))
                .enumerate()
            {
                if g != r {
                    return Err(format!(
                        "GPU {i} of {}: state {g:?}, holdings give {r:?}",
                        node.name
                    ));
                }
                if g.sm_requested > SM_REQUEST_CAPACITY || g.sm_limits > SM_LIMIT_CAPACITY {
                    return Err(format!("GPU {i} of {}: SM over-committed {g:?}", node.name));
                }
                if g.memory_used > capacity {
                    return Err(format!(
                        "GPU {i} of {}: device memory over-committed",
                        node.name
                    ));
                }
                if let Some(layout) = &g.mig {
                    let geo = geo.ok_or_else(|| {
                        format!("GPU {i} of {} partitioned but not MIG-capable", node.name)
                    })?;
                    geo.check_layout(layout)?;
                }
            }
        }
        Ok(())
    }
}

/// Who an action concerns: a training job or an inference service (whose instances are the
/// holders). `validate` takes either; `&TrainingJob` and `&InferenceService` convert.
#[derive(Clone, Copy, Debug)]
pub enum Holder<'a> {
    /// A training job.
    Job(&'a TrainingJob),
    /// An inference service.
    Service(&'a InferenceService),
}

impl<'a> From<&'a TrainingJob> for Holder<'a> {
    fn from(job: &'a TrainingJob) -> Self {
        Holder::Job(job)
    }
}

impl<'a> From<&'a InferenceService> for Holder<'a> {
    fn from(service: &'a InferenceService) -> Self {
        Holder::Service(service)
    }
}

/// Checks that an instance allocation fits what one instance of `service` needs: one node,
/// at least its CPU and memory, and on each GPU named a whole GPU, a MIG instance or a quota
/// holding enough device memory in all.
fn check_instance(
    cluster: &Cluster,
    service: &InferenceService,
    alloc: &Allocation,
) -> Result<(), ActionError> {
    let [share] = alloc.shares.as_slice() else {
        return refuse("an instance runs on exactly one node");
    };
    let demand = &service.instance;
    if share.cpu < demand.cpu || share.memory < demand.memory {
        return refuse(format!(
            "an instance of {} needs {} CPU and {} memory",
            service.name, demand.cpu, demand.memory
        ));
    }
    let gpus = share.device_count();
    if gpus == 0 {
        return refuse("an instance holds no GPU");
    }
    let device_memory = match share.devices.map(|d| d.part) {
        None | Some(GpuPart::Whole) => {
            cluster.nodes.get(share.node.index()).map_or(Bytes(0), |n| {
                Bytes::from_gib_f64(cluster.catalog.get(n.gpu).memory_gib)
            })
        }
        Some(GpuPart::Mig(inst)) => cluster
            .nodes
            .get(share.node.index())
            .and_then(|n| cluster.catalog.mig_geometry(n.gpu))
            .and_then(|g| g.profile(inst))
            .map_or(Bytes(0), |p| Bytes::from_gib_f64(p.memory_gib)),
        Some(GpuPart::Quota { memory, .. }) => memory,
    };
    if Bytes(device_memory.0.saturating_mul(gpus as u64)) < demand.gpu_memory {
        return refuse(format!(
            "an instance of {} needs {} of device memory",
            service.name, demand.gpu_memory
        ));
    }
    Ok(())
}

/// True when `new` keeps `old`'s nodes, whole-GPU counts and named GPUs (a share that names
/// no devices keeps the old ones), and each GPU stays whole or stays a quota.
fn same_devices(new: &Allocation, old: &Allocation) -> bool {
    new.shares.len() == old.shares.len()
        && new.shares.iter().zip(&old.shares).all(|(a, b)| {
            a.node == b.node
                && a.gpus == b.gpus
                && match (a.devices, b.devices) {
                    (None, _) => true,
                    (Some(x), Some(y)) => {
                        x.gpus == y.gpus
                            && matches!(
                                (x.part, y.part),
                                (GpuPart::Whole, GpuPart::Whole)
                                    | (GpuPart::Quota { .. }, GpuPart::Quota { .. })
                            )
                            || x == y
                    }
                    (Some(_), None) => false,
                }
        })
}

/// `new` with the devices of `old` named where `new` leaves them implicit.
fn name_devices(new: &Allocation, old: &Allocation) -> Allocation {
    let mut named = new.clone();
    for (a, b) in named.shares.iter_mut().zip(&old.shares) {
        if a.devices.is_none() {
            a.devices = b.devices;
        }
    }
    named
}

/// Checks `action` against the holder's state (`holding` = what the job or the named
/// instance holds now, `None` when a job is queued or a service scales out) and the cluster,
/// and returns the allocation held afterwards with devices named (`None` for a preemption or
/// a scale-in). The one validation every driver applies; a driver adds only checks of its own
/// (node health in the daemon; that a scaled-in instance exists).
///
/// `Resize` and `Retune` are checked as if the job's current holding were released first.
/// A `Retune` must keep the same nodes, GPUs and whole-GPU counts (only CPU, memory and
/// quotas change); a `RetuneInstance` likewise for an instance (`holding` = its allocation),
/// and the new quota must still fit one instance of the service. A `ScaleOut` follows the same capacity rules as a `Start` (whole GPUs, MIG,
/// Σ SM requests ≤ 1000‰, Σ limits ≤ 1500‰, Σ device memory ≤ capacity) and must fit what one
/// instance of the service needs.
pub fn validate<'h>(
    state: &ClusterState,
    cluster: &Cluster,
    holder: impl Into<Holder<'h>>,
    holding: Option<&Allocation>,
    action: &Action,
    now: SimTime,
) -> Result<Option<Allocation>, ActionError> {
    let job = match holder.into() {
        Holder::Job(job) => job,
        Holder::Service(service) => {
            return match (action, holding) {
                (Action::ScaleOut { allocation, .. }, None) => {
                    check_instance(cluster, service, allocation)?;
                    state
                        .resolve_for(cluster, &service.gpu_types, allocation, now)
                        .map(Some)
                }
                (Action::ScaleIn { .. }, Some(_)) => Ok(None),
                (Action::ScaleIn { .. }, None) => refuse("no such instance"),
                (Action::RetuneInstance { allocation, .. }, Some(old)) => {
                    if !same_devices(allocation, old) {
                        return refuse(
                            "a retune keeps the instance's node and GPUs (scale out and in to move it)",
                        );
                    }
                    let named = name_devices(allocation, old);
                    check_instance(cluster, service, &named)?;
                    // Checked as if the instance's current holding were released first.
                    let mut without = state.clone();
                    without.release(cluster, old);
                    without
                        .resolve_for(cluster, &service.gpu_types, &named, now)
                        .map(Some)
                }
                (Action::RetuneInstance { .. }, None) => refuse("no such instance"),
                (a, _) => refuse(format!("{} concerns a job, not a service", a.kind())),
            };
        }
    };
    match (action, holding) {
        (Action::Start { allocation, .. }, None) => {
            state.resolve(cluster, job, allocation, now).map(Some)
        }
        (Action::Preempt { .. }, Some(_)) => Ok(None),
        (Action::Resize { allocation, .. }, Some(old)) => {
            let mut without = state.clone();
            without.release(cluster, old);
            without.resolve(cluster, job, allocation, now).map(Some)
        }
        (Action::Retune { allocation, .. }, Some(old)) => {
            if !same_devices(allocation, old) {
                return refuse("a retune keeps the job's nodes and GPUs (use Resize to move it)");
            }
            let named = name_devices(allocation, old);
            let mut without = state.clone();
            without.release(cluster, old);
            without.resolve(cluster, job, &named, now).map(Some)
        }
        (Action::Reconfigure { .. }, _) => refuse("a reconfiguration concerns a GPU, not a job"),
        (Action::ScaleOut { .. } | Action::ScaleIn { .. } | Action::RetuneInstance { .. }, _) => {
            refuse("a scale-out, scale-in or instance retune concerns a service, not a job")
        }
        (a, h) => refuse(format!(
            "{} on a job that is {}",
            a.kind(),
            if h.is_some() { "running" } else { "queued" }
        )),
    }
}
