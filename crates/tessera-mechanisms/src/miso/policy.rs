//! MISO's policies and the baselines it is compared with, all single-GPU and strictly FIFO
//! (a head job that fits nowhere blocks the queue, as in MISO's simulator):
//!
//! - `nopart`: one job per whole GPU.
//! - `static`: every GPU pre-split into one layout; a job takes the largest idle slice that
//!   fits it; with the queue empty, a job moves up to a larger idle slice that is faster.
//! - `miso`: a job at an empty GPU takes it whole; at an occupied one, every job there is
//!   checkpointed and the lot runs under MPS for a profiling phase, after which the optimizer
//!   picks the layout from *predicted* slice speeds and every job restarts on its slice.
//! - `miso-oracle`: the same with true speeds and no MPS phase.
//! - `mps`: up to three jobs share a GPU under MPS.
//!
//! Every policy tracks GPUs by (node, index) in cluster order; ties go to the lowest.

use std::sync::Arc;

use tessera_model::{
    Allocation, Bytes, Cluster, DeviceAlloc, GpuMask, GpuPart, JobId, MigGeometry, MigInstance,
    MigRequest, MilliCpu, NodeId, NodeShare, SimDuration, SimRng, SimTime, TrainingJob,
};
use tessera_sched::{Action, ClusterView, Detail, GpuState, JobState, Policy, WaitKind, Waiting};

use super::layouts::LayoutSet;
use super::opt::{optimize_fixed, Candidates, FixedProfile, Objective};
use super::predict::SlicePredictor;
use super::truth::{smallest_fit, SliceSpeeds, SliceTable};
use crate::{renumber_vec, renumbered};

/// Length of MISO's MPS profiling phase.
pub const MPS_PHASE: SimDuration = SimDuration::from_secs(30);
/// A GPU takes no new job this soon after its jobs were last checkpointed.
pub const CHECKPOINT_GAP: SimDuration = SimDuration::from_secs(3);
/// Jobs sharing one GPU under the `mps` policy.
pub const MPS_JOBS_PER_GPU: u32 = 3;

const NONE: u32 = u32::MAX;

/// An allocation of one part of one GPU (no host CPU or memory: MISO does not model them).
pub fn one_gpu(node: NodeId, gpu: u32, part: GpuPart) -> Allocation {
    Allocation::new(vec![NodeShare {
        node,
        gpus: u32::from(matches!(part, GpuPart::Whole)),
        cpu: MilliCpu(0),
        memory: Bytes(0),
        devices: Some(DeviceAlloc {
            gpus: GpuMask::one(gpu),
            part,
        }),
    }])
}

/// Whether `spec` may run on `node`'s GPU model (`gpuTypes`; empty allows any).
fn allows(view: &ClusterView<'_>, spec: &TrainingJob, node: NodeId) -> bool {
    spec.gpu_types.is_empty()
        || view
            .cluster
            .nodes
            .get(node.index())
            .is_some_and(|n| spec.gpu_types.contains(&n.gpu))
}

/// Whole GPUs for a job that asks for more than one (MIG slices and MPS shares are
/// single-GPU, so every policy here gives such a job `gpus` whole GPUs, never one GPU for
/// longer): from `free` (whole GPUs the policy may give now, of models the job allows, in
/// cluster order), the lowest `k` of the lowest node that has them, when some node of an
/// allowed model has `k` GPUs at all; otherwise (a job larger than any such node) the first
/// `k` across nodes in cluster order. `None` when not enough are free now.
fn pick_whole(
    view: &ClusterView<'_>,
    spec: &TrainingJob,
    free: &[(NodeId, u32)],
) -> Option<Vec<(NodeId, GpuMask)>> {
    let k = spec.gpus.max(1);
    let one_node = view
        .cluster
        .nodes
        .iter()
        .any(|n| n.gpus >= k && allows(view, spec, n.id));
    let mut per_node: Vec<(NodeId, GpuMask)> = Vec::new();
    for &(node, i) in free {
        match per_node.last_mut() {
            Some((n, mask)) if *n == node => mask.0 |= GpuMask::one(i).0,
            _ => per_node.push((node, GpuMask::one(i))),
        }
    }
    if one_node {
        let (node, mask) = per_node.into_iter().find(|(_, m)| m.count() >= k)?;
        return Some(vec![(node, mask.lowest(k))]);
    }
    let mut picked = Vec::new();
    let mut left = k;
    for (node, mask) in per_node {
        if left == 0 {
            break;
        }
        let take = mask.lowest(left);
        left -= take.count();
        picked.push((node, take));
    }
    (left == 0).then_some(picked)
}

/// Why a job that asked for one fixed MIG profile can never start under these policies:
/// no GPU of a type it allows offers that profile (`offers`: any profile of the geometry for
/// MISO, the kept layout's for `static`), or `table` finds its model too large for the
/// profile's slices wherever it is offered. The policies place by the same table, so such a
/// job would wait for ever.
fn fixed_profile_refusal(
    job: &TrainingJob,
    cluster: &Cluster,
    table: &SliceTable,
    offers: impl Fn(&MigGeometry, u8) -> bool,
    kept_layout: Option<&str>,
) -> Option<String> {
    let Some(MigRequest::Profile(name)) = job.mig.as_ref() else {
        return None;
    };
    let speeds = table.speeds_of(job);
    let (mut exists, mut offered) = (false, false);
    let mut seen_types: Vec<tessera_model::GpuModelId> = Vec::new();
    for node in &cluster.nodes {
        if !job.gpu_types.is_empty() && !job.gpu_types.contains(&node.gpu) {
            continue;
        }
        if seen_types.contains(&node.gpu) {
            continue;
        }
        seen_types.push(node.gpu);
        let Some(geo) = cluster.catalog.mig_geometry(node.gpu) else {
            continue;
        };
        let Some(profile) = geo.find_profile(name) else {
            continue;
        };
        exists = true;
        if !offers(geo, profile) {
            continue;
        }
        offered = true;
        let size = geo.profiles[profile as usize].compute_slices;
        if speeds
            .get(size as usize)
            .copied()
            .flatten()
            .is_some_and(|s| s > 0.0)
        {
            return None;
        }
    }
    let name = crate::capabilities::shown(name);
    Some(if !exists {
        format!("no GPU of the types it allows has MIG profile {name}")
    } else if offered {
        format!(
            "MISO's slice table finds model {} too large for MIG profile {name} (it fits a larger slice only)",
            crate::capabilities::shown(&job.model)
        )
    } else {
        format!(
            "MIG profile {name} is not in the layout this policy keeps every MIG GPU in ({})",
            kept_layout.unwrap_or("its own")
        )
    })
}

/// An allocation of whole GPUs, as [`pick_whole`] picks them.
fn whole_gpus(picked: &[(NodeId, GpuMask)]) -> Allocation {
    Allocation::new(
        picked
            .iter()
            .map(|&(node, mask)| NodeShare {
                node,
                gpus: mask.count(),
                cpu: MilliCpu(0),
                memory: Bytes(0),
                devices: Some(DeviceAlloc {
                    gpus: mask,
                    part: GpuPart::Whole,
                }),
            })
            .collect::<Vec<_>>(),
    )
}

/// The cluster's GPUs, their MIG geometries and candidate layouts, built at the first call.
#[derive(Clone, Debug, Default)]
struct Topology {
    /// (node, index on node, geometry slot or NONE).
    gpus: Vec<(NodeId, u32, u32)>,
    geos: Vec<(MigGeometry, Candidates)>,
}

impl Topology {
    fn build(view: &ClusterView<'_>, set: LayoutSet) -> Topology {
        let mut t = Topology::default();
        for node in &view.cluster.nodes {
            let slot = match view.cluster.catalog.mig_geometry(node.gpu) {
                Some(geo) => match t.geos.iter().position(|(g, _)| g == geo) {
                    Some(i) => i as u32,
                    None => {
                        t.geos.push((geo.clone(), Candidates::new(geo, set)));
                        (t.geos.len() - 1) as u32
                    }
                },
                None => NONE,
            };
            for i in 0..node.gpus {
                t.gpus.push((node.id, i, slot));
            }
        }
        t
    }

    fn geo(&self, g: usize) -> Option<&(MigGeometry, Candidates)> {
        self.geos.get(self.gpus[g].2 as usize)
    }

    /// What a job's MIG request allows on GPU `g`: `Ok(None)` any part (no request, or
    /// `any`), `Ok(Some(p))` only instances of profile `p`, `Err(())` nothing (a fixed
    /// profile this GPU's geometry does not have, or a GPU without MIG).
    fn fixed_on(&self, g: usize, spec: Option<&TrainingJob>) -> Result<Option<FixedProfile>, ()> {
        let Some(MigRequest::Profile(name)) = spec.and_then(|s| s.mig.as_ref()) else {
            return Ok(None);
        };
        let geo = self.geo(g).map(|x| &x.0).ok_or(())?;
        let profile = geo.find_profile(name).ok_or(())?;
        let size = geo.profiles[profile as usize].compute_slices;
        Ok(Some(FixedProfile { profile, size }))
    }
}

/// Position of `job` in `view.active`, if it is active (`seen` may hold stale positions).
fn active_pos(view: &ClusterView<'_>, seen: &[u32], job: JobId) -> Option<usize> {
    let p = *seen.get(job.index())? as usize;
    (view.active.get(p)?.id == job).then_some(p)
}

fn gpu_state<'a>(view: &ClusterView<'a>, node: NodeId, idx: u32) -> Option<&'a GpuState> {
    view.state.gpus(node).get(idx as usize)
}

/// Queued jobs not yet promised to a GPU, in FIFO (submit, then id) order.
fn fifo_queue(view: &ClusterView<'_>, promised: impl Fn(JobId) -> bool) -> Vec<JobId> {
    let mut q: Vec<(SimTime, JobId)> = view
        .active
        .iter()
        .filter(|a| a.state == JobState::Queued && !promised(a.id))
        .filter_map(|a| view.spec(a).map(|s| (s.submit, a.id)))
        .collect();
    q.sort_unstable();
    q.into_iter().map(|(_, id)| id).collect()
}

/// Device memory a job pins under MPS: that of the smallest profile it fits.
fn mps_memory(geo: Option<&MigGeometry>, speeds: &SliceSpeeds) -> Bytes {
    geo.and_then(|g| {
        let c = smallest_fit(speeds)?;
        let p = g.smallest_of(c)?;
        g.profiles.get(p as usize)
    })
    .map_or(Bytes(0), |p| Bytes::from_gib_f64(p.memory_gib))
}

// ------------------------------------------------------------------------------------------
// nopart

/// One job per whole GPU, FIFO.
#[derive(Debug, Default)]
pub struct NoPart;

impl Policy for NoPart {
    fn name(&self) -> &str {
        "nopart"
    }
    fn round_length(&self) -> Option<SimDuration> {
        None
    }
    /// Keeps nothing between calls.
    fn renumber_jobs(&mut self, _map: &[Option<JobId>]) -> bool {
        true
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let queue = fifo_queue(view, |_| false);
        let mut taken: Vec<(NodeId, u32)> = Vec::new();
        let mut free: Vec<(NodeId, u32)> = Vec::new();
        for job in queue {
            let Some(spec) = view.jobs.get(job.index()) else {
                continue;
            };
            free.clear();
            for node in &view.cluster.nodes {
                if !allows(view, spec, node.id) {
                    continue;
                }
                for (i, g) in view.state.gpus(node.id).iter().enumerate() {
                    let i = i as u32;
                    if g.is_whole_free() && g.ready_at <= view.now && !taken.contains(&(node.id, i))
                    {
                        free.push((node.id, i));
                        if spec.gpus <= 1 {
                            break; // the first free GPU is the one taken
                        }
                    }
                }
                if spec.gpus <= 1 && !free.is_empty() {
                    break;
                }
            }
            let Some(picked) = pick_whole(view, spec, &free) else {
                break; // head-of-line blocking
            };
            for &(node, mask) in &picked {
                taken.extend(mask.iter().map(|i| (node, i)));
            }
            actions.push(Action::Start {
                job,
                allocation: whole_gpus(&picked),
            });
        }
    }
}

// ------------------------------------------------------------------------------------------
// static

/// Every GPU pre-split into one layout (given as compute slices, e.g. `[3, 2, 2]`).
#[derive(Debug)]
pub struct StaticPartition {
    name: String,
    code: Vec<u8>,
    table: Arc<SliceTable>,
    topo: Option<Topology>,
    /// Per GPU (topology order): the layout it is kept in, `None` for a GPU used whole
    /// (no MIG, or no layout of these sizes on its geometry).
    layouts: Vec<Option<Vec<MigInstance>>>,
    /// Move running jobs to larger idle slices when the queue is empty.
    pub promote: bool,
    /// Strict FIFO: a one-GPU job that finds no idle slice holds the queue (default). When
    /// false, later jobs may take slices it does not fit, as the MISO artifact's static
    /// driver does (`exp_static.py` tries every arrived job in turn).
    pub blocking: bool,
    promotions: u64,
}

impl StaticPartition {
    /// A static policy for a layout code.
    pub fn new(code: &[u8], table: Arc<SliceTable>) -> StaticPartition {
        let mut sorted = code.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let name = if sorted == [3, 2, 2] {
            "static".to_string()
        } else {
            format!(
                "static:{}",
                sorted
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join("-")
            )
        };
        StaticPartition {
            name,
            code: sorted,
            table,
            topo: None,
            layouts: Vec::new(),
            promote: true,
            blocking: true,
            promotions: 0,
        }
    }

    /// The layout it applies on a geometry: the first generated layout of these slice sizes.
    pub fn layout_for(&self, geo: &MigGeometry) -> Option<Vec<MigInstance>> {
        let mut want = self.code.clone();
        want.sort_unstable();
        geo.valid_layouts()
            .into_iter()
            .find(|l| geo.compute_slices_of(l) == want)
    }
}

impl Policy for StaticPartition {
    fn name(&self) -> &str {
        &self.name
    }
    fn round_length(&self) -> Option<SimDuration> {
        None
    }
    fn stats(&self) -> Vec<(String, f64)> {
        vec![("promotions".into(), self.promotions as f64)]
    }
    /// Keeps only the GPUs' layout between calls, nothing per job.
    fn renumber_jobs(&mut self, _map: &[Option<JobId>]) -> bool {
        true
    }
    fn refuses(&self, job: &TrainingJob, cluster: &Cluster) -> Option<String> {
        let code: Vec<String> = self.code.iter().map(|c| format!("{c}g")).collect();
        fixed_profile_refusal(
            job,
            cluster,
            &self.table,
            |geo, profile| {
                self.layout_for(geo)
                    .is_some_and(|l| l.iter().any(|i| i.profile == profile))
            },
            Some(&code.join("+")),
        )
    }
    /// Single-GPU jobs take the largest idle place that fits them: a slice of a split GPU, or
    /// a GPU kept whole (no MIG) counted as 7 slices. A job asking for more GPUs takes that
    /// many whole GPUs: GPUs kept whole, or split GPUs with every slice idle, which are
    /// merged for it (the job starts once they are ready) and split again when it leaves.
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        if self.topo.is_none() {
            let topo = Topology::build(view, LayoutSet::Generated);
            self.layouts = (0..topo.gpus.len())
                .map(|g| topo.geo(g).and_then(|(geo, _)| self.layout_for(geo)))
                .collect();
            let mut split = false;
            for (g, &(node, idx, _)) in topo.gpus.iter().enumerate() {
                if let Some(layout) = self.layouts[g].clone() {
                    actions.push(Action::Reconfigure {
                        node,
                        gpu: idx,
                        layout: Some(layout),
                    });
                    split = true;
                }
            }
            self.topo = Some(topo);
            if split {
                return; // GPUs are ready after the reconfiguration time
            }
        }
        let Some(topo) = &self.topo else { return };
        let layouts = &self.layouts;
        let now = view.now;
        let state = |g: usize| {
            let (n, i, _) = topo.gpus[g];
            gpu_state(view, n, i)
        };
        // Where single-GPU jobs go, per GPU: (compute slices, part) of each place of a ready
        // GPU that is up (a failed GPU takes no holder until it is back); a GPU kept whole
        // is one place of 7. A GPU meant to be split but whole now has none.
        let places: Vec<Vec<(u8, GpuPart)>> = (0..topo.gpus.len())
            .map(|g| {
                let Some(s) = state(g).filter(|s| s.ready_at <= now && !s.down) else {
                    return Vec::new();
                };
                match (&s.mig, &layouts[g]) {
                    (Some(layout), _) => layout
                        .iter()
                        .map(|inst| {
                            let size = topo
                                .geo(g)
                                .and_then(|(geo, _)| geo.profile(*inst))
                                .map_or(0, |p| p.compute_slices);
                            (size, GpuPart::Mig(*inst))
                        })
                        .collect(),
                    (None, None) => vec![(7, GpuPart::Whole)],
                    (None, Some(_)) => Vec::new(),
                }
            })
            .collect();
        // (gpu, place) → busy, from the state plus this batch's moves.
        let mut busy: Vec<u8> = (0..topo.gpus.len())
            .map(|g| match state(g) {
                Some(s) if s.mig.is_some() => s.mig_busy,
                Some(s) if s.is_whole_free() => 0,
                _ => 0xff,
            })
            .collect();
        // The largest idle place (ties: lowest GPU, then layout order) a filter accepts, on
        // GPUs of models the job allows; with a fixed profile, only instances of exactly
        // that profile.
        let largest_idle = |busy: &[u8], fits: &dyn Fn(u8) -> bool, spec: &TrainingJob| {
            let mut best: Option<(u8, usize, usize)> = None;
            for (g, &bits) in busy.iter().enumerate() {
                if places[g].is_empty() || !allows(view, spec, topo.gpus[g].0) {
                    continue;
                }
                let Ok(fixed) = topo.fixed_on(g, Some(spec)) else {
                    continue;
                };
                for (p, &(z, part)) in places[g].iter().enumerate() {
                    let profile_ok = match (fixed, part) {
                        (None, _) => true,
                        (Some(f), GpuPart::Mig(inst)) => f.profile == inst.profile,
                        (Some(_), _) => false,
                    };
                    if bits & (1 << p) == 0 && fits(z) && profile_ok && best.is_none_or(|b| z > b.0)
                    {
                        best = Some((z, g, p));
                    }
                }
            }
            best
        };
        let queue = fifo_queue(view, |_| false);
        let mut placed_all = true;
        // Whole-mode GPUs a waiting multi-GPU job is to get: not split again meanwhile.
        let mut claimed: Vec<usize> = Vec::new();
        for job in &queue {
            let Some(spec) = view.jobs.get(job.index()) else {
                continue;
            };
            if spec.gpus > 1 {
                match self.place_whole(view, topo, spec, &mut busy) {
                    Ok(picked) => {
                        actions.push(Action::Start {
                            job: *job,
                            allocation: whole_gpus(&picked),
                        });
                        continue;
                    }
                    Err(merging) => {
                        for &g in &merging {
                            let (node, idx, _) = topo.gpus[g];
                            if state(g).is_some_and(|s| s.mig.is_some()) {
                                actions.push(Action::Reconfigure {
                                    node,
                                    gpu: idx,
                                    layout: None,
                                });
                            }
                        }
                        claimed = merging;
                        placed_all = false;
                        break;
                    }
                }
            }
            let speeds = self.table.speeds_of(spec);
            let Some((_, g, p)) = largest_idle(&busy, &|z| speeds[z as usize].is_some(), spec)
            else {
                placed_all = false;
                if self.blocking {
                    break;
                }
                continue;
            };
            busy[g] |= 1 << p;
            let (node, idx, _) = topo.gpus[g];
            actions.push(Action::Start {
                job: *job,
                allocation: one_gpu(node, idx, places[g][p].1),
            });
        }
        // GPUs merged for a multi-GPU job that has left are split again.
        for (g, layout) in layouts.iter().enumerate() {
            let Some(layout) = layout else { continue };
            let Some(s) = state(g) else { continue };
            if s.mig.is_none() && s.is_idle() && !s.down && s.ready_at <= now {
                // Waited for, or started whole in this batch.
                if claimed.contains(&g) || busy[g] != 0 {
                    continue;
                }
                let (node, idx, _) = topo.gpus[g];
                actions.push(Action::Reconfigure {
                    node,
                    gpu: idx,
                    layout: Some(layout.clone()),
                });
            }
        }
        if !placed_all || !self.promote {
            return;
        }
        // Promotion: with nobody waiting, the job on the smallest slice moves to the largest
        // idle place where it runs faster, until no move helps.
        let mut running: Vec<(u8, JobId, usize, usize)> = Vec::new();
        for a in view.active {
            let Some(alloc) = &a.allocation else { continue };
            let Some(s) = alloc.shares.first() else {
                continue;
            };
            let Some(DeviceAlloc {
                gpus,
                part: GpuPart::Mig(inst),
            }) = s.devices
            else {
                continue;
            };
            let Some(idx) = gpus.iter().next() else {
                continue;
            };
            let Some(g) = topo
                .gpus
                .iter()
                .position(|&(n, i, _)| n == s.node && i == idx)
            else {
                continue;
            };
            let Some(p) = places[g]
                .iter()
                .position(|&(_, part)| part == GpuPart::Mig(inst))
            else {
                continue;
            };
            running.push((places[g][p].0, a.id, g, p));
        }
        running.sort_unstable();
        for _ in 0..running.len() {
            let mut moved = false;
            for entry in running.iter_mut() {
                let (z, job, g0, p0) = *entry;
                let Some(spec) = view.jobs.get(job.index()) else {
                    continue;
                };
                // A job that asked for a profile stays on it.
                if matches!(spec.mig, Some(MigRequest::Profile(_))) {
                    continue;
                }
                let speeds = self.table.speeds_of(spec);
                let now_speed = speeds[z as usize].unwrap_or(0.0);
                let Some((z1, g, p)) = largest_idle(
                    &busy,
                    &|c| c > z && speeds[c as usize].is_some_and(|s| s > now_speed),
                    spec,
                ) else {
                    continue;
                };
                let (node, idx, _) = topo.gpus[g];
                busy[g] |= 1 << p;
                busy[g0] &= !(1 << p0);
                *entry = (z1, job, g, p);
                actions.push(Action::Resize {
                    job,
                    allocation: one_gpu(node, idx, places[g][p].1),
                });
                self.promotions += 1;
                moved = true;
                break;
            }
            if !moved {
                break;
            }
            running.sort_unstable();
        }
    }
}

impl StaticPartition {
    /// Whole GPUs for a job asking for more than one: `Ok` with GPUs it can start on now
    /// (marked busy), or `Err` with the GPUs it waits for (split GPUs to merge among them),
    /// empty when not enough are idle.
    fn place_whole(
        &self,
        view: &ClusterView<'_>,
        topo: &Topology,
        spec: &TrainingJob,
        busy: &mut [u8],
    ) -> Result<Vec<(NodeId, GpuMask)>, Vec<usize>> {
        let now = view.now;
        let mut ready: Vec<(NodeId, u32)> = Vec::new();
        let mut soon: Vec<(NodeId, u32)> = Vec::new();
        for (g, &(node, idx, _)) in topo.gpus.iter().enumerate() {
            if !allows(view, spec, node) || busy[g] != 0 {
                continue;
            }
            let Some(s) = gpu_state(view, node, idx).filter(|s| !s.down && s.is_idle()) else {
                continue;
            };
            let merged = s.mig.is_none() && self.layouts[g].is_some();
            if s.mig.is_none() && s.ready_at <= now {
                ready.push((node, idx));
                soon.push((node, idx));
            } else if (s.mig.is_some() && s.ready_at <= now) || (merged && s.ready_at > now) {
                // Split and idle (to merge), or being merged already.
                soon.push((node, idx));
            }
        }
        let index_of = |node: NodeId, i: u32| {
            topo.gpus
                .iter()
                .position(|&(n, j, _)| n == node && j == i)
                .unwrap_or(0)
        };
        if let Some(picked) = pick_whole(view, spec, &ready) {
            for &(node, mask) in &picked {
                for i in mask.iter() {
                    busy[index_of(node, i)] = 0xff;
                }
            }
            return Ok(picked);
        }
        Err(pick_whole(view, spec, &soon)
            .map(|picked| {
                picked
                    .iter()
                    .flat_map(|&(node, mask)| mask.iter().map(move |i| (node, i)))
                    .map(|(node, i)| index_of(node, i))
                    .collect()
            })
            .unwrap_or_default())
    }
}

// ------------------------------------------------------------------------------------------
// mps

/// Up to [`MPS_JOBS_PER_GPU`] jobs share a GPU under MPS, FIFO; the GPU with the fewest
/// sharers (memory permitting) takes the next job.
#[derive(Debug)]
pub struct MpsOnly {
    table: Arc<SliceTable>,
    topo: Option<Topology>,
}

impl MpsOnly {
    /// An MPS-sharing policy.
    pub fn new(table: Arc<SliceTable>) -> MpsOnly {
        MpsOnly { table, topo: None }
    }
}

impl Policy for MpsOnly {
    fn name(&self) -> &str {
        "mps"
    }
    fn round_length(&self) -> Option<SimDuration> {
        None
    }
    /// Keeps only the GPUs between calls, nothing per job.
    fn renumber_jobs(&mut self, _map: &[Option<JobId>]) -> bool {
        true
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let topo = self
            .topo
            .get_or_insert_with(|| Topology::build(view, LayoutSet::Generated));
        let mut load: Vec<(u32, Bytes)> = topo
            .gpus
            .iter()
            .map(|&(n, i, _)| {
                gpu_state(view, n, i)
                    .filter(|s| s.ready_at <= view.now && !s.whole && s.mig.is_none() && !s.down)
                    .map_or((u32::MAX, Bytes(0)), |s| (s.quota_holders, s.memory_used))
            })
            .collect();
        for job in fifo_queue(view, |_| false) {
            let Some(spec) = view.jobs.get(job.index()) else {
                continue;
            };
            if spec.gpus > 1 {
                // Whole GPUs nobody shares (MPS sharing is per GPU).
                let free: Vec<(NodeId, u32)> = topo
                    .gpus
                    .iter()
                    .enumerate()
                    .filter(|&(g, &(n, _, _))| load[g].0 == 0 && allows(view, spec, n))
                    .map(|(_, &(n, i, _))| (n, i))
                    .collect();
                let Some(picked) = pick_whole(view, spec, &free) else {
                    break;
                };
                for &(node, mask) in &picked {
                    for i in mask.iter() {
                        if let Some(g) = topo.gpus.iter().position(|&(n, j, _)| n == node && j == i)
                        {
                            load[g].0 = u32::MAX;
                        }
                    }
                }
                actions.push(Action::Start {
                    job,
                    allocation: whole_gpus(&picked),
                });
                continue;
            }
            let speeds = self.table.speeds_of(spec);
            let mut best: Option<usize> = None;
            for (g, &(holders, used)) in load.iter().enumerate() {
                if holders >= MPS_JOBS_PER_GPU {
                    continue;
                }
                let (n, _, _) = topo.gpus[g];
                if !allows(view, spec, n) {
                    continue;
                }
                let capacity = view.cluster.nodes.get(n.index()).map_or(Bytes(0), |node| {
                    Bytes::from_gib_f64(view.cluster.catalog.get(node.gpu).memory_gib)
                });
                let mem = mps_memory(topo.geo(g).map(|x| &x.0), &speeds);
                if used.0.saturating_add(mem.0) > capacity.0 {
                    continue;
                }
                if best.is_none_or(|b| holders < load[b].0) {
                    best = Some(g);
                }
            }
            let Some(g) = best else { break };
            let (node, idx, _) = topo.gpus[g];
            let mem = mps_memory(topo.geo(g).map(|x| &x.0), &speeds);
            load[g].0 += 1;
            load[g].1 += mem;
            actions.push(Action::Start {
                job,
                allocation: one_gpu(
                    node,
                    idx,
                    GpuPart::Quota {
                        sm_request: (1000 / MPS_JOBS_PER_GPU) as u16,
                        // Σ limits must stay within the driver's 150%; the truth lets a job
                        // use what its neighbours leave idle anyway.
                        sm_limit: (1500 / MPS_JOBS_PER_GPU) as u16,
                        memory: mem,
                    },
                ),
            });
        }
    }
}

// ------------------------------------------------------------------------------------------
// miso and miso-oracle

/// Settings of [`Miso`].
#[derive(Clone, Debug)]
pub struct MisoConfig {
    /// True speeds and no MPS phase (`miso-oracle`).
    pub oracle: bool,
    /// Layouts the optimizer chooses from.
    pub layouts: LayoutSet,
    /// What the optimizer minimises.
    pub objective: Objective,
    /// Length of the MPS profiling phase.
    pub mps_phase: SimDuration,
    /// Profile under MPS even a job that arrives at an empty GPU (it then pays a phase, a
    /// checkpoint and a restore like any other); default false: it starts whole at once.
    pub profile_alone: bool,
    /// No new job this soon after a GPU's last checkpoint.
    pub checkpoint_gap: SimDuration,
    /// Predicts slice speeds at the end of the MPS phase.
    pub predictor: Arc<dyn SlicePredictor>,
    /// True slice speeds (the predictor's input, and the oracle's knowledge).
    pub table: Arc<SliceTable>,
    /// Seed of prediction errors (separate from arrivals).
    pub seed: u64,
}

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    /// Jobs run on their parts.
    Steady,
    /// Jobs share the GPU under MPS until then.
    Mps { until: SimTime },
    /// Waiting for a reconfiguration asked at `issued` to finish, then start these.
    Pending {
        issued: SimTime,
        starts: Vec<(JobId, GpuPart)>,
        mps: bool,
    },
}

#[derive(Clone, Debug)]
struct Slot {
    jobs: Vec<JobId>,
    phase: Phase,
    last_checkpoint: Option<SimTime>,
    /// A job left: consider removing idle slices.
    dirty: bool,
    /// Last instant the policy acted on it (at most once per scheduling point).
    touched: Option<SimTime>,
}

/// MISO (or its oracle): see the module docs.
#[derive(Debug)]
pub struct Miso {
    name: &'static str,
    config: MisoConfig,
    topo: Option<Topology>,
    slots: Vec<Slot>,
    /// GPU slot of each job, or NONE.
    job_gpu: Vec<u32>,
    /// Predicted speeds, once a job's MPS phase measured it.
    predicted: Vec<Option<SliceSpeeds>>,
    /// Scratch: position in `view.active` per job.
    seen: Vec<u32>,
    /// True slice speeds per job, looked up once.
    speeds: Vec<SliceSpeeds>,
    /// Per job: the id its prediction's random stream derives from, the one it would have
    /// had without renumbering ([`Policy::renumber_jobs`]), so that no prediction changes.
    seed_id: Vec<u64>,
    /// Finished jobs renumbered away so far (all submitted before any job seen later).
    dropped: u64,
    wakeup: Option<SimTime>,
    repartitions: u64,
    mps_phases: u64,
}

impl Miso {
    /// A MISO policy.
    pub fn new(config: MisoConfig) -> Miso {
        Miso {
            name: if config.oracle { "miso-oracle" } else { "miso" },
            config,
            topo: None,
            slots: Vec::new(),
            job_gpu: Vec::new(),
            predicted: Vec::new(),
            seen: Vec::new(),
            speeds: Vec::new(),
            seed_id: Vec::new(),
            dropped: 0,
            wakeup: None,
            repartitions: 0,
            mps_phases: 0,
        }
    }

    fn truth(&self, view: &ClusterView<'_>, job: JobId) -> SliceSpeeds {
        match self.speeds.get(job.index()) {
            Some(s) => *s,
            None => view
                .jobs
                .get(job.index())
                .map_or([None; 8], |s| self.config.table.speeds_of(s)),
        }
    }

    /// What the policy believes about a job's slice speeds: the truth for the oracle; for
    /// MISO the prediction from its MPS phase (feasibility alone before one).
    fn belief(&self, view: &ClusterView<'_>, job: JobId) -> SliceSpeeds {
        let truth = self.truth(view, job);
        if self.config.oracle {
            return truth;
        }
        self.predicted
            .get(job.index())
            .copied()
            .flatten()
            .unwrap_or(truth.map(|s| s.map(|_| 1.0)))
    }

    fn predict(&mut self, view: &ClusterView<'_>, job: JobId) {
        if self.predicted[job.index()].is_some() {
            return;
        }
        let truth = self.truth(view, job);
        // One stream per job, so predictions do not depend on the order jobs are profiled.
        let mut rng = SimRng::seed_from_u64(
            self.config
                .seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(
                    self.seed_id
                        .get(job.index())
                        .copied()
                        .unwrap_or(job.0 as u64),
                ),
        );
        self.predicted[job.index()] = Some(self.config.predictor.predict(&truth, &mut rng));
    }

    fn quota(&self, view: &ClusterView<'_>, g: usize, job: JobId, k: usize) -> GpuPart {
        let topo = self.topo.as_ref();
        let geo = topo.and_then(|t| t.geo(g)).map(|x| &x.0);
        GpuPart::Quota {
            sm_request: (1000 / k.max(1)) as u16,
            sm_limit: (1000 / k.max(1)) as u16,
            memory: mps_memory(geo, &self.truth(view, job)),
        }
    }

    fn candidates(&self, g: usize) -> Option<&Candidates> {
        self.topo.as_ref()?.geo(g).map(|x| &x.1)
    }

    /// Checkpoints every job of slot `g` and reconfigures it, the jobs to start on `starts`
    /// once it is ready.
    fn repartition(
        &mut self,
        view: &ClusterView<'_>,
        g: usize,
        layout: Option<Vec<MigInstance>>,
        starts: Vec<(JobId, GpuPart)>,
        mps: bool,
        actions: &mut Vec<Action>,
    ) {
        let Some(&(node, idx, _)) = self.topo.as_ref().and_then(|t| t.gpus.get(g)) else {
            return;
        };
        self.slots[g].touched = Some(view.now);
        for &j in &self.slots[g].jobs {
            if active_pos(view, &self.seen, j)
                .is_some_and(|p| view.active[p].state == JobState::Running)
            {
                actions.push(Action::Preempt { job: j });
            }
        }
        let same_mode = gpu_state(view, node, idx).is_some_and(|s| s.mig == layout);
        if same_mode {
            for (job, part) in &starts {
                actions.push(Action::Start {
                    job: *job,
                    allocation: one_gpu(node, idx, *part),
                });
            }
            self.slots[g].phase = if mps {
                Phase::Mps {
                    until: view.now + self.config.mps_phase,
                }
            } else {
                Phase::Steady
            };
            self.slots[g].last_checkpoint = Some(view.now);
        } else {
            actions.push(Action::Reconfigure {
                node,
                gpu: idx,
                layout,
            });
            self.slots[g].phase = Phase::Pending {
                issued: view.now,
                starts,
                mps,
            };
        }
    }

    /// The fixed profiles of jobs on slot `g` (`Err` when one cannot run there at all).
    fn fixed_of(
        &self,
        view: &ClusterView<'_>,
        g: usize,
        jobs: &[JobId],
    ) -> Result<Vec<Option<FixedProfile>>, ()> {
        let Some(topo) = self.topo.as_ref() else {
            return Err(());
        };
        jobs.iter()
            .map(|j| topo.fixed_on(g, view.jobs.get(j.index())))
            .collect()
    }

    /// The optimizer's plan for `jobs` on slot `g` from these speeds, honouring fixed
    /// profiles.
    fn plan(
        &self,
        view: &ClusterView<'_>,
        g: usize,
        jobs: &[JobId],
        speeds: &[SliceSpeeds],
        objective: Objective,
    ) -> Option<super::opt::Plan> {
        let fixed = self.fixed_of(view, g, jobs).ok()?;
        optimize_fixed(speeds, &fixed, self.candidates(g)?, objective)
    }

    /// Whether a job on slot `g` asked for a fixed profile (it never leaves it: no whole
    /// GPU, no MPS phase).
    fn any_fixed(&self, view: &ClusterView<'_>, g: usize) -> bool {
        self.fixed_of(view, g, &self.slots[g].jobs)
            .map_or(true, |f| f.iter().any(Option::is_some))
    }

    /// Applies the optimizer's plan for the jobs of slot `g` (whole GPU for one job, unless
    /// it asked for a fixed profile).
    fn apply_plan(&mut self, view: &ClusterView<'_>, g: usize, actions: &mut Vec<Action>) -> bool {
        let jobs = self.slots[g].jobs.clone();
        if jobs.len() == 1 && !self.any_fixed(view, g) {
            self.repartition(
                view,
                g,
                None,
                vec![(jobs[0], GpuPart::Whole)],
                false,
                actions,
            );
            return true;
        }
        let beliefs: Vec<SliceSpeeds> = jobs.iter().map(|&j| self.belief(view, j)).collect();
        let Some(plan) = self.plan(view, g, &jobs, &beliefs, self.config.objective) else {
            return false;
        };
        let starts = jobs
            .iter()
            .zip(&plan.assignment)
            .map(|(&j, &inst)| (j, GpuPart::Mig(inst)))
            .collect();
        self.repartition(view, g, Some(plan.layout), starts, false, actions);
        self.repartitions += 1;
        true
    }

    /// The mean believed slowdown of slot `g`'s jobs where they are now (infinite when some
    /// job is not on a slice).
    fn current_cost(&self, view: &ClusterView<'_>, g: usize) -> f64 {
        let Some((geo, _)) = self.topo.as_ref().and_then(|t| t.geo(g)) else {
            return f64::INFINITY;
        };
        let jobs = &self.slots[g].jobs;
        let mut total = 0.0;
        for &j in jobs {
            let part = active_pos(view, &self.seen, j)
                .and_then(|p| view.active[p].allocation.as_ref())
                .and_then(|a| a.part());
            let speed = match part {
                Some(GpuPart::Whole) => Some(1.0),
                Some(GpuPart::Mig(inst)) => geo
                    .profile(inst)
                    .and_then(|p| self.belief(view, j)[p.compute_slices as usize]),
                _ => None,
            };
            match speed {
                Some(s) if s > 0.0 => total += 1.0 / s,
                _ => return f64::INFINITY,
            }
        }
        total / jobs.len().max(1) as f64
    }

    fn any_fixed_job(&self, view: &ClusterView<'_>, job: JobId) -> bool {
        matches!(
            view.jobs.get(job.index()).and_then(|s| s.mig.as_ref()),
            Some(MigRequest::Profile(_))
        )
    }

    /// The slot with the fewest jobs that can take `job` now (ties: lowest GPU).
    /// Whether `job` is promised to a GPU (placed by MISO, or waiting on a reconfiguration
    /// planned for it): a composition must leave such a job with MISO.
    pub(crate) fn holds(&self, job: JobId) -> bool {
        self.job_gpu.get(job.index()).is_some_and(|&g| g != NONE)
    }

    /// Failures: the engine requeues the jobs of a GPU that goes down, so its slot forgets
    /// them (they queue again, FIFO by submission) and starts over once the GPU is back; a
    /// job found queued on a settled slot was evicted the same way and is forgotten too.
    /// Without this the policy kept them promised to a GPU they no longer held, and they
    /// never ran again.
    fn forget_failed(&mut self, view: &ClusterView<'_>) {
        let Some(topo) = self.topo.as_ref() else {
            return;
        };
        for (g, slot) in self.slots.iter_mut().enumerate() {
            if slot.jobs.is_empty() && !matches!(slot.phase, Phase::Pending { .. }) {
                continue;
            }
            let (node, idx, _) = topo.gpus[g];
            let down = gpu_state(view, node, idx).is_none_or(|s| s.down);
            let settled = matches!(slot.phase, Phase::Steady | Phase::Mps { .. });
            let seen = &self.seen;
            let job_gpu = &mut self.job_gpu;
            let before = slot.jobs.len();
            slot.jobs.retain(|&j| {
                let queued = active_pos(view, seen, j)
                    .is_some_and(|p| view.active[p].state == JobState::Queued);
                let keep = !(down || (settled && queued));
                if !keep {
                    if let Some(g) = job_gpu.get_mut(j.index()) {
                        *g = NONE;
                    }
                }
                keep
            });
            if down {
                slot.phase = Phase::Steady;
                slot.last_checkpoint = None;
            }
            if slot.jobs.len() != before || down {
                slot.dirty = true;
            }
        }
    }

    /// Whether slot `g` holds a job of several whole GPUs (it shares its GPU with nobody).
    fn holds_multi(&self, view: &ClusterView<'_>, g: usize) -> bool {
        self.slots[g]
            .jobs
            .iter()
            .any(|j| view.jobs.get(j.index()).is_some_and(|s| s.gpus > 1))
    }

    /// Empty GPUs a job asking for several takes whole (no sharing, no MIG: slices are
    /// single-GPU), as [`pick_whole`] chooses them; `None` while not enough are free.
    fn eligible_whole(&self, view: &ClusterView<'_>, spec: &TrainingJob) -> Option<Vec<usize>> {
        let topo = self.topo.as_ref()?;
        let mut free: Vec<(NodeId, u32)> = Vec::new();
        for (g, slot) in self.slots.iter().enumerate() {
            let (n, i, _) = topo.gpus[g];
            if !slot.jobs.is_empty()
                || slot.phase != Phase::Steady
                || slot.touched == Some(view.now)
                || !allows(view, spec, n)
                || slot
                    .last_checkpoint
                    .is_some_and(|t| view.now < t + self.config.checkpoint_gap)
            {
                continue;
            }
            if gpu_state(view, n, i).is_some_and(|s| s.is_whole_free() && s.ready_at <= view.now) {
                free.push((n, i));
            }
        }
        let picked = pick_whole(view, spec, &free)?;
        Some(
            picked
                .iter()
                .flat_map(|&(node, mask)| mask.iter().map(move |i| (node, i)))
                .filter_map(|(node, i)| topo.gpus.iter().position(|&(n, j, _)| n == node && j == i))
                .collect(),
        )
    }

    /// Whether slot `g` may take a single-GPU job now, whatever the job: settled, room for
    /// another job, not acted on at this call, past its checkpoint gap, its GPU up and ready
    /// (and whole-free when the slot is empty), and not holding a job of several GPUs.
    fn open_slot(&self, view: &ClusterView<'_>, g: usize) -> bool {
        let Some(topo) = self.topo.as_ref() else {
            return false;
        };
        let slot = &self.slots[g];
        if slot.phase != Phase::Steady || slot.jobs.len() >= 7 || slot.touched == Some(view.now) {
            return false;
        }
        if slot
            .last_checkpoint
            .is_some_and(|t| view.now < t + self.config.checkpoint_gap)
        {
            return false;
        }
        let (n, i, _) = topo.gpus[g];
        let Some(s) = gpu_state(view, n, i) else {
            return false;
        };
        if s.down || s.ready_at > view.now || (slot.jobs.is_empty() && !s.is_whole_free()) {
            return false;
        }
        !self.holds_multi(view, g)
    }

    /// Whether `job` may join the jobs of slot `g`: memory (and fixed profiles) decide, by
    /// the optimizer's plan on true speeds; speeds do not matter here.
    fn fits_beside(&self, view: &ClusterView<'_>, g: usize, job: JobId) -> bool {
        let mut jobs = self.slots[g].jobs.clone();
        jobs.push(job);
        let all: Vec<SliceSpeeds> = jobs.iter().map(|&j| self.truth(view, j)).collect();
        self.plan(view, g, &jobs, &all, Objective::MeanSlowdown)
            .is_some()
    }

    /// The slot a single-GPU job goes to: among open slots of models it allows, the fewest
    /// jobs first, then the lowest GPU; an empty slot takes a job without a fixed profile as
    /// it is, any other must fit ([`fits_beside`](Self::fits_beside)). A scan of every slot:
    /// the reference [`PlaceIndex::find`] is checked against.
    #[cfg(test)]
    fn eligible(&self, view: &ClusterView<'_>, job: JobId) -> Option<usize> {
        let topo = self.topo.as_ref()?;
        let spec = view.jobs.get(job.index());
        let allowed = |n: NodeId| spec.is_none_or(|s| allows(view, s, n));
        let mut buckets: [Vec<usize>; 7] = Default::default();
        for g in 0..self.slots.len() {
            if self.open_slot(view, g) && allowed(topo.gpus[g].0) {
                buckets[self.slots[g].jobs.len()].push(g);
            }
        }
        let wants_profile = matches!(
            spec.and_then(|s| s.mig.as_ref()),
            Some(MigRequest::Profile(_))
        );
        for (k, bucket) in buckets.iter().enumerate() {
            for &g in bucket {
                if (k == 0 && !wants_profile) || self.fits_beside(view, g, job) {
                    return Some(g);
                }
            }
        }
        None
    }
}

/// What MISO's placement reads of a single-GPU job: its true slice speeds (as bits), its
/// MIG request and the GPU models it allows. Within one call, two jobs of one class find the
/// same slots open to them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PlaceClass {
    speeds: [u64; 8],
    mig: Option<MigRequest>,
    types: Vec<tessera_model::GpuModelId>,
}

impl PlaceClass {
    fn of(speeds: &SliceSpeeds, spec: Option<&TrainingJob>) -> PlaceClass {
        PlaceClass {
            speeds: speeds.map(|s| s.map_or(u64::MAX, f64::to_bits)),
            mig: spec.and_then(|s| s.mig.clone()),
            types: spec.map(|s| s.gpu_types.clone()).unwrap_or_default(),
        }
    }
}

/// [`Miso::eligible`] for a whole queue in one call, without a scan of every slot per job.
///
/// The open slots are bucketed by their job count once. Within the call a slot only leaves
/// the open set (a job placed on it touches it), except when a plan fails after a placement
/// (the slot then changes bucket: the index is built again). So for a class of jobs, a slot
/// found closed, of a model the class does not allow, or that a job of the class does not
/// fit beside, stays so for the rest of the call: each class keeps a cursor per bucket,
/// which only moves forward. The first slot a job's cursors stop at is the one the scan
/// finds. Work per call: the slots once, plus each cursor's walk (a slot at most once per
/// class), instead of every slot once per queued job.
#[derive(Debug)]
struct PlaceIndex {
    buckets: [Vec<u32>; 7],
    cursors: std::collections::HashMap<PlaceClass, [usize; 7]>,
}

impl PlaceIndex {
    fn build(miso: &Miso, view: &ClusterView<'_>) -> PlaceIndex {
        let mut buckets: [Vec<u32>; 7] = Default::default();
        for g in 0..miso.slots.len() {
            if miso.open_slot(view, g) {
                buckets[miso.slots[g].jobs.len()].push(g as u32);
            }
        }
        PlaceIndex {
            buckets,
            cursors: std::collections::HashMap::new(),
        }
    }

    /// The slot [`Miso::eligible`] picks for `job`.
    fn find(&mut self, miso: &Miso, view: &ClusterView<'_>, job: JobId) -> Option<usize> {
        let topo = miso.topo.as_ref()?;
        let spec = view.jobs.get(job.index());
        let wants_profile = matches!(
            spec.and_then(|s| s.mig.as_ref()),
            Some(MigRequest::Profile(_))
        );
        let class = PlaceClass::of(&miso.truth(view, job), spec);
        let cursors = self.cursors.entry(class).or_insert([0; 7]);
        for (k, bucket) in self.buckets.iter().enumerate() {
            while let Some(&g) = bucket.get(cursors[k]) {
                let g = g as usize;
                let open = miso.slots[g].touched != Some(view.now)
                    && spec.is_none_or(|s| allows(view, s, topo.gpus[g].0));
                if open && ((k == 0 && !wants_profile) || miso.fits_beside(view, g, job)) {
                    return Some(g);
                }
                cursors[k] += 1;
            }
        }
        None
    }
}

impl Policy for Miso {
    fn name(&self) -> &str {
        self.name
    }

    /// A single-GPU job waits for a layout while any GPU is being repartitioned for the jobs
    /// MISO placed (a reconfiguration pending); otherwise as the generic analysis says.
    fn pending_reason(
        &self,
        _view: &ClusterView<'_>,
        job: &TrainingJob,
        detail: Detail,
    ) -> Option<Waiting> {
        if job.gpus > 1 {
            return None;
        }
        let repartitioning = self
            .slots
            .iter()
            .filter(|s| matches!(s.phase, Phase::Pending { .. }))
            .count();
        (repartitioning > 0).then(|| {
            Waiting::new(WaitKind::MigLayout).note(detail, || {
                format!(
                    "MISO is repartitioning {repartitioning} GPU(s); jobs wait for the new layouts"
                )
            })
        })
    }
    fn refuses(&self, job: &TrainingJob, cluster: &Cluster) -> Option<String> {
        fixed_profile_refusal(job, cluster, &self.config.table, |_, _| true, None)
    }

    fn round_length(&self) -> Option<SimDuration> {
        None
    }

    fn wakeup(&self) -> Option<SimTime> {
        self.wakeup
    }

    /// Per job: its GPU slot, predicted and true speeds, and its seed id; per GPU slot: its
    /// jobs and those a pending reconfiguration will start. A finished job leaves its slot
    /// as step 1 of the next call would have it (a job's end makes that call a completion).
    fn renumber_jobs(&mut self, map: &[Option<JobId>]) -> bool {
        for slot in &mut self.slots {
            let before = slot.jobs.len();
            slot.jobs = slot
                .jobs
                .iter()
                .filter_map(|&j| renumbered(map, j))
                .collect();
            if slot.jobs.len() != before && slot.phase == Phase::Steady {
                slot.dirty = true;
            }
            if let Phase::Pending { starts, .. } = &mut slot.phase {
                *starts = starts
                    .iter()
                    .filter_map(|&(j, part)| Some((renumbered(map, j)?, part)))
                    .collect();
            }
        }
        // Jobs submitted since the last call have no seed id yet: theirs counts the jobs
        // dropped before them so far.
        let mut seed = std::mem::take(&mut self.seed_id);
        let (known, dropped) = (seed.len(), self.dropped);
        seed.extend((known..map.len()).map(|i| i as u64 + dropped));
        self.seed_id = renumber_vec(seed, map, 0);
        self.dropped += map.iter().filter(|m| m.is_none()).count() as u64;
        self.job_gpu = renumber_vec(std::mem::take(&mut self.job_gpu), map, NONE);
        self.predicted = renumber_vec(std::mem::take(&mut self.predicted), map, None);
        self.speeds = renumber_vec(std::mem::take(&mut self.speeds), map, [None; 8]);
        // Positions in the view are rebuilt at every call.
        self.seen.clear();
        true
    }

    fn stats(&self) -> Vec<(String, f64)> {
        vec![
            ("repartitions".into(), self.repartitions as f64),
            ("mps_phases".into(), self.mps_phases as f64),
        ]
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        if self.topo.is_none() {
            let topo = Topology::build(view, self.config.layouts);
            self.slots = vec![
                Slot {
                    jobs: Vec::new(),
                    phase: Phase::Steady,
                    last_checkpoint: None,
                    dirty: false,
                    touched: None,
                };
                topo.gpus.len()
            ];
            self.topo = Some(topo);
        }
        // Per-job vectors follow `view.jobs`, which grows in a driver taking submissions
        // (the daemon): what is known of earlier jobs stays (clearing it at each submission
        // forgot where jobs were placed, and they were started a second time).
        let n = view.jobs.len();
        self.job_gpu.resize(n, NONE);
        self.predicted.resize(n, None);
        self.seen.resize(n, NONE);
        self.speeds.truncate(n);
        let table = &self.config.table;
        let known = self.speeds.len();
        self.speeds
            .extend(view.jobs.iter().skip(known).map(|j| table.speeds_of(j)));
        self.seed_id.truncate(n);
        let (known, dropped) = (self.seed_id.len(), self.dropped);
        self.seed_id.extend((known..n).map(|i| i as u64 + dropped));
        // One pass over the active jobs: where each is, and the FIFO queue of jobs not yet
        // promised to a GPU. `seen` is never cleared: an entry is valid only while it points
        // back at its job (see `active_pos`).
        for (i, a) in view.active.iter().enumerate() {
            self.seen[a.id.index()] = i as u32;
        }
        self.forget_failed(view);
        let mut queue: Vec<(SimTime, JobId)> = Vec::new();
        for a in view.active.iter() {
            if a.state == JobState::Queued && self.job_gpu[a.id.index()] == NONE {
                if let Some(spec) = view.spec(a) {
                    queue.push((spec.submit, a.id));
                }
            }
        }
        queue.sort_unstable();
        let now = view.now;

        // 1. Jobs that finished leave their GPU. At every call, not only at completions: the
        //    driver skips the call of a completion that leaves nothing active, and the next
        //    call (an arrival) found the finished job still on its GPU, planned it beside
        //    the newcomer and started it again ("job is not active", seed 20 of miso-100).
        for slot in &mut self.slots {
            let before = slot.jobs.len();
            let seen = &self.seen;
            slot.jobs.retain(|j| active_pos(view, seen, *j).is_some());
            if slot.jobs.len() != before && slot.phase == Phase::Steady {
                slot.dirty = true;
            }
        }

        // 2. Reconfigured GPUs start their jobs.
        for g in 0..self.slots.len() {
            let Phase::Pending { issued, .. } = &self.slots[g].phase else {
                continue;
            };
            let (node, idx, _) = self.topo.as_ref().map_or((NodeId(0), 0, 0), |t| t.gpus[g]);
            let ready = gpu_state(view, node, idx).is_some_and(|s| s.ready_at <= now && !s.down);
            if *issued >= now || !ready {
                continue;
            }
            let Phase::Pending { starts, mps, .. } =
                std::mem::replace(&mut self.slots[g].phase, Phase::Steady)
            else {
                continue;
            };
            for (job, part) in starts {
                actions.push(Action::Start {
                    job,
                    allocation: one_gpu(node, idx, part),
                });
            }
            self.slots[g].touched = Some(now);
            if mps {
                self.slots[g].phase = Phase::Mps {
                    until: now + self.config.mps_phase,
                };
            }
            self.slots[g].last_checkpoint = Some(now);
        }

        // 3. MPS phases that ended: predict, optimise, re-partition.
        for g in 0..self.slots.len() {
            if !matches!(self.slots[g].phase, Phase::Mps { until } if until <= now) {
                continue;
            }
            self.slots[g].phase = Phase::Steady;
            for j in self.slots[g].jobs.clone() {
                self.predict(view, j);
            }
            if self.slots[g].jobs.is_empty() {
                self.slots[g].dirty = true;
            } else if !self.apply_plan(view, g, actions) {
                // Cannot happen for jobs admitted by `eligible`; keep them sharing.
                self.slots[g].last_checkpoint = Some(now);
            }
        }

        // 4. Idle slices: an empty partitioned GPU goes back to whole mode; with nobody
        //    waiting, a GPU whose job left is re-optimised when that helps.
        let queue_empty = queue.is_empty();
        for g in 0..self.slots.len() {
            if !self.slots[g].dirty
                || self.slots[g].phase != Phase::Steady
                || self.slots[g].touched == Some(now)
            {
                continue;
            }
            let (node, idx, _) = self.topo.as_ref().map_or((NodeId(0), 0, 0), |t| t.gpus[g]);
            if gpu_state(view, node, idx).is_none_or(|s| s.down) {
                continue; // stays dirty: tidied once the GPU is back
            }
            self.slots[g].dirty = false;
            if self.slots[g].jobs.is_empty() {
                if gpu_state(view, node, idx).is_some_and(|s| s.mig.is_some() && s.is_idle()) {
                    self.slots[g].touched = Some(now);
                    actions.push(Action::Reconfigure {
                        node,
                        gpu: idx,
                        layout: None,
                    });
                }
                continue;
            }
            if !queue_empty || self.holds_multi(view, g) {
                continue;
            }
            let current = self.current_cost(view, g);
            let jobs = self.slots[g].jobs.clone();
            let better = if jobs.len() == 1 && !self.any_fixed(view, g) {
                current > 1.0 + 1e-12 || !current.is_finite()
            } else {
                let beliefs: Vec<SliceSpeeds> =
                    jobs.iter().map(|&j| self.belief(view, j)).collect();
                self.plan(view, g, &jobs, &beliefs, self.config.objective)
                    .is_some_and(|p| p.cost < current - 1e-9)
            };
            if better {
                self.apply_plan(view, g, actions);
            }
        }

        // 5. Strict FIFO placement.
        let mut waiting = false;
        let mut index: Option<PlaceIndex> = None;
        for (_, job) in queue {
            if let Some(spec) = view.jobs.get(job.index()).filter(|s| s.gpus > 1) {
                let Some(gs) = self.eligible_whole(view, spec) else {
                    waiting = true;
                    break; // head-of-line blocking
                };
                let Some(&first) = gs.first() else {
                    waiting = true;
                    break;
                };
                self.job_gpu[job.index()] = first as u32;
                let mut picked: Vec<(NodeId, GpuMask)> = Vec::new();
                for &g in &gs {
                    self.slots[g].jobs.push(job);
                    self.slots[g].touched = Some(now);
                    let (node, idx, _) =
                        self.topo.as_ref().map_or((NodeId(0), 0, 0), |t| t.gpus[g]);
                    match picked.last_mut() {
                        Some((n, mask)) if *n == node => mask.0 |= GpuMask::one(idx).0,
                        _ => picked.push((node, GpuMask::one(idx))),
                    }
                }
                actions.push(Action::Start {
                    job,
                    allocation: whole_gpus(&picked),
                });
                continue;
            }
            let found = index
                .get_or_insert_with(|| PlaceIndex::build(self, view))
                .find(self, view, job);
            #[cfg(test)]
            debug_assert_eq!(
                found,
                self.eligible(view, job),
                "the index finds the scan's slot"
            );
            let Some(g) = found else {
                waiting = true;
                break; // head-of-line blocking
            };
            self.job_gpu[job.index()] = g as u32;
            let (node, idx, _) = self.topo.as_ref().map_or((NodeId(0), 0, 0), |t| t.gpus[g]);
            let profile_alone = self.config.profile_alone && !self.config.oracle;
            if self.slots[g].jobs.is_empty() && !self.any_fixed_job(view, job) && !profile_alone {
                self.slots[g].jobs.push(job);
                self.slots[g].touched = Some(now);
                actions.push(Action::Start {
                    job,
                    allocation: one_gpu(node, idx, GpuPart::Whole),
                });
                continue;
            }
            self.slots[g].jobs.push(job);
            // A job on a fixed profile cannot leave it for an MPS phase: the GPU goes
            // straight to the plan from what is believed now.
            if self.config.oracle || self.any_fixed(view, g) {
                self.apply_plan(view, g, actions);
            } else {
                let jobs = self.slots[g].jobs.clone();
                let k = jobs.len();
                let starts = jobs
                    .iter()
                    .map(|&j| (j, self.quota(view, g, j, k)))
                    .collect();
                self.repartition(view, g, None, starts, true, actions);
                self.mps_phases += 1;
            }
            if self.slots[g].touched != Some(now) {
                // A plan that failed left the slot open with one job more: it changed bucket.
                index = None;
            }
        }
        // Wake up at the end of an MPS phase, or when a checkpoint gap ends with jobs waiting.
        self.wakeup = self
            .slots
            .iter()
            .filter_map(|s| match s.phase {
                Phase::Mps { until } if until > now => Some(until),
                Phase::Steady if waiting => s
                    .last_checkpoint
                    .map(|t| t + self.config.checkpoint_gap)
                    .filter(|&t| t > now),
                _ => None,
            })
            .min();
    }
}
