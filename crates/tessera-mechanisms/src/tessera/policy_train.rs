//! The `tessera` policy's whole-GPU training piece: Crius's cells and plans in an order of
//! least attained service, preemption at rounds between service classes (Tiresias-like, so
//! that short jobs do not wait behind long ones), HAP's spanning of GPU types for jobs no one
//! type can hold, and Synergy's CPU and memory by sensitivity on every placement.

use std::collections::BTreeSet;

use tessera_model::{
    Allocation, Bytes, Cluster, GpuModelId, JobId, MilliCpu, NodeShare, ParallelPlan, Resources,
    SimDuration, TrainingJob,
};
use tessera_sched::placement::proportional_share;
use tessera_sched::{Action, ActiveJob, ClusterView, JobState};

use super::policy_scratch::Scratch;
use crate::crius::policy::{CriusOptions, CriusPolicy};
use crate::synergy::perf::SensitivityEstimate;
use crate::synergy::policy::{FreeMap, Slice};
use crate::tessera::truth::ComposedEstimates;

/// Attained service (GPU·µs) where the lowest service class ends (one GPU-hour); each next
/// class is [`CLASS_FACTOR`] times longer. A queued job preempts only running jobs of a
/// higher class, so a job is never preempted for one that has had almost as much.
pub const FIRST_CLASS_GPU_US: u64 = 3_600_000_000;
/// Growth of the service classes.
pub const CLASS_FACTOR: u64 = 4;
/// Queued jobs per round that may preempt.
pub const PREEMPTING_JOBS_PER_ROUND: usize = 8;
/// Rounds a job of several GPUs waits before it may span GPU models (HAP).
pub const SPAN_AFTER_ROUNDS: u64 = 2;
/// Jobs that may start across GPU models per round.
pub const SPANS_PER_ROUND: usize = 4;
/// Queued jobs per call the multi-resource placement tries after Crius's pass.
pub const BACKFILL_TRIES: usize = 32;

/// Which pieces the training part uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TrainOptions {
    /// Crius's cells and plans; without, the asked count on the first type that fits.
    pub(crate) crius: bool,
    /// Synergy's CPU and memory by sensitivity; without, proportional to GPUs.
    pub(crate) synergy: bool,
    /// HAP's spanning of GPU types for jobs no single type can hold.
    pub(crate) hap: bool,
    /// The job order.
    pub(crate) order: Order,
}

/// The training piece (see the module docs).
#[derive(Debug)]
pub(crate) struct Training {
    opts: TrainOptions,
    round: SimDuration,
    crius: CriusPolicy,
    /// Distinct GPU models of the cluster and the GPUs of each (set at the first call).
    types: Vec<(GpuModelId, u32)>,
    pub(crate) preemptions: u64,
    pub(crate) spans: u64,
    pub(crate) tuned: u64,
    pub(crate) backfills: u64,
}

/// A job's attained service, GPU·µs (the exact count where the driver keeps one).
pub(crate) fn attained_us(a: &ActiveJob) -> u64 {
    if a.attained_gpu_us > 0 {
        a.attained_gpu_us
    } else {
        (a.attained_gpu_secs.max(0.0) * 1e6) as u64
    }
}

/// Least attained service first, then arrival, then id.
pub(crate) fn las_key(a: &ActiveJob, spec: Option<&TrainingJob>) -> (u64, u64, u32) {
    (
        attained_us(a),
        spec.map_or(0, |s| s.submit.as_micros()),
        a.id.0,
    )
}

/// A job's estimated remaining work on its request, µs (`None` when the run gives no
/// estimate: no throughput estimate, or nothing known to remain).
pub(crate) fn remaining_us(a: &ActiveJob) -> Option<u64> {
    let s = a.remaining_secs_estimate();
    (s.is_finite() && s > 0.0).then(|| (s * 1e6).min(u64::MAX as f64 / 2.0) as u64)
}

/// Least estimated remaining time first (as SRTF), then arrival, then id; a job without an
/// estimate last.
pub(crate) fn remaining_key(a: &ActiveJob, spec: Option<&TrainingJob>) -> (u64, u64, u32) {
    (
        remaining_us(a).unwrap_or(u64::MAX),
        spec.map_or(0, |s| s.submit.as_micros()),
        a.id.0,
    )
}

/// The training piece's job order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Least attained service (Tiresias-like LAS with service classes): needs no knowledge
    /// of durations.
    Las,
    /// Shortest estimated remaining time first (SRTF on the run's estimates).
    Remaining,
    /// [`Order::Remaining`] while every training job of the call has a remaining-time
    /// estimate (the run declares durations, as the simulator's traces do), else
    /// [`Order::Las`]. The default.
    Auto,
}

/// A waiting job preempts a running one under [`Order::Remaining`] only when the running
/// job's remaining time is at least this many times the waiting one's (a restart costs a
/// checkpoint restore, and near-equal jobs must not trade places at every round).
pub const REMAINING_PREEMPT_FACTOR: u64 = 2;

fn service_class(us: u64) -> u32 {
    let mut bound = FIRST_CLASS_GPU_US;
    let mut class = 0;
    while us >= bound && class < 16 {
        class += 1;
        bound = bound.saturating_mul(CLASS_FACTOR);
    }
    class
}

/// Free GPUs per GPU model of the cluster, as `scratch` leaves them.
fn free_per_model(orig: &ClusterView<'_>, scratch: &Scratch<'_>) -> Vec<(GpuModelId, u64)> {
    let mut out: Vec<(GpuModelId, u64)> = Vec::new();
    for (n, f) in orig.cluster.nodes.iter().zip(scratch.state.free()) {
        match out.iter_mut().find(|(t, _)| *t == n.gpu) {
            Some(x) => x.1 += u64::from(f.gpus),
            None => out.push((n.gpu, u64::from(f.gpus))),
        }
    }
    out
}

fn type_of(cluster: &Cluster, alloc: &Allocation) -> Option<GpuModelId> {
    let mut t = None;
    for s in &alloc.shares {
        let g = cluster.nodes.get(s.node.index())?.gpu;
        match t {
            None => t = Some(g),
            Some(x) if x != g => return None,
            _ => {}
        }
    }
    t
}

impl Training {
    pub(crate) fn new(opts: TrainOptions, round: SimDuration) -> Training {
        Training {
            opts,
            round,
            crius: CriusPolicy::new("tessera-crius", CriusOptions::FULL, round),
            types: Vec::new(),
            preemptions: 0,
            spans: 0,
            tuned: 0,
            backfills: 0,
        }
    }

    pub(crate) fn crius(&self) -> &CriusPolicy {
        &self.crius
    }

    pub(crate) fn crius_mut(&mut self) -> &mut CriusPolicy {
        &mut self.crius
    }

    fn init(&mut self, cluster: &Cluster) {
        if !self.types.is_empty() {
            return;
        }
        for g in &cluster.groups {
            let gpus = g.count.saturating_mul(g.gpus_per_node);
            match self.types.iter_mut().find(|(t, _)| *t == g.gpu) {
                Some((_, n)) => *n = n.saturating_add(gpus),
                None => self.types.push((g.gpu, gpus)),
            }
        }
    }

    /// The GPU models `spec` may use, in its order (the cluster's when it names none).
    fn allowed(&self, spec: &TrainingJob) -> Vec<GpuModelId> {
        if spec.gpu_types.is_empty() {
            self.types.iter().map(|&(t, _)| t).collect()
        } else {
            spec.gpu_types
                .iter()
                .copied()
                .filter(|t| self.types.iter().any(|(x, _)| x == t))
                .collect()
        }
    }

    /// The GPU models `spec` may use, the fastest for its count first by the composed
    /// estimates (cluster order when it has none, and on ties): a job Crius left waiting
    /// takes an A10 only when no faster type has its GPUs.
    fn fastest_first(
        &self,
        cluster: &Cluster,
        a: &ActiveJob,
        spec: &TrainingJob,
    ) -> Vec<GpuModelId> {
        let mut types = self.allowed(spec);
        if spec.mig.is_some()
            && types
                .iter()
                .any(|&t| cluster.catalog.mig_geometry(t).is_some())
        {
            // A MIG request runs whole on a MIG-capable model where it allows one.
            types.retain(|&t| cluster.catalog.mig_geometry(t).is_some());
        }
        if let Some(e) = a.knowledge.get::<ComposedEstimates>() {
            let rate = |t: GpuModelId| e.0.get(t, spec.gpus).map_or(0.0, |x| x.throughput);
            types.sort_by(|&x, &y| rate(y).total_cmp(&rate(x)));
        }
        types
    }

    /// Whether no single allowed GPU model has GPUs enough for `spec` (it must span models).
    fn must_span(&self, spec: &TrainingJob) -> bool {
        let allowed = self.allowed(spec);
        let most = self
            .types
            .iter()
            .filter(|(t, _)| allowed.contains(t))
            .map(|&(_, n)| n)
            .max()
            .unwrap_or(0);
        spec.gpus > most
    }

    /// One scheduling point for the training jobs in `active` (queued and running, this
    /// piece's only), deciding on `scratch`; `full` at a round boundary.
    pub(crate) fn schedule(
        &mut self,
        orig: &ClusterView<'_>,
        active: &[ActiveJob],
        full: bool,
        scratch: &mut Scratch<'_>,
        out: &mut Vec<Action>,
    ) {
        self.init(orig.cluster);
        let any_queued = active.iter().any(|a| a.state == JobState::Queued);
        if !any_queued && !full {
            return;
        }
        let by_remaining = match self.opts.order {
            Order::Las => false,
            Order::Remaining => true,
            Order::Auto => active.iter().all(|a| remaining_us(a).is_some()),
        };
        let key: fn(&ActiveJob, Option<&TrainingJob>) -> (u64, u64, u32) =
            if by_remaining { remaining_key } else { las_key };
        let spanning: BTreeSet<JobId> = if self.opts.hap {
            active
                .iter()
                .filter(|a| orig.spec(a).is_some_and(|s| self.must_span(s)))
                .map(|a| a.id)
                .collect()
        } else {
            BTreeSet::new()
        };
        let mut started: BTreeSet<JobId> = BTreeSet::new();
        let mut gone: BTreeSet<JobId> = BTreeSet::new();
        if full {
            for v in self.preempt(orig, active, scratch, by_remaining) {
                let a = Action::Preempt { job: v };
                if scratch.apply(orig, &a) {
                    out.push(a);
                    gone.insert(v);
                    self.preemptions += 1;
                }
            }
        }
        // HAP: jobs that must span GPU models, least attained first.
        let mut queued: Vec<&ActiveJob> = active
            .iter()
            .filter(|a| a.state == JobState::Queued)
            .collect();
        queued.sort_by_cached_key(|a| key(a, orig.spec(a)));
        for a in queued.iter().filter(|a| spanning.contains(&a.id)) {
            let Some(spec) = orig.spec(a) else { continue };
            if let Some(alloc) = self.place_spanning(orig, scratch, spec) {
                if self.commit_start(orig, a, spec, alloc, scratch, out) {
                    started.insert(a.id);
                    self.spans += 1;
                }
            }
        }
        // Crius's cells over the others, in LAS order.
        if self.opts.crius {
            let rest: Vec<ActiveJob> = active
                .iter()
                .filter(|a| {
                    !spanning.contains(&a.id) && !gone.contains(&a.id) && !started.contains(&a.id)
                })
                .cloned()
                .collect();
            let mut acts = Vec::new();
            {
                let view = ClusterView {
                    free: scratch.state.free(),
                    state: &scratch.state,
                    active: &rest,
                    services: &[],
                    ..*orig
                };
                if view.state.free_gpus() > 0 || full {
                    self.crius.pass(&view, &mut acts, key, full);
                }
            }
            // Positions of `rest` by id: a search per start, not a scan (Crius starts tens
            // of thousands at once on an empty large cluster).
            let mut by_id: Vec<(JobId, usize)> =
                rest.iter().enumerate().map(|(i, a)| (a.id, i)).collect();
            by_id.sort_unstable();
            for act in acts {
                let (Action::Start { job, .. } | Action::Resize { job, .. }) = &act else {
                    if scratch.apply(orig, &act) {
                        out.push(act);
                    }
                    continue;
                };
                let job = *job;
                let Some(a) = by_id
                    .binary_search_by_key(&job, |&(id, _)| id)
                    .ok()
                    .and_then(|k| rest.get(by_id[k].1))
                else {
                    continue;
                };
                let Some(spec) = orig.spec(a) else { continue };
                if self.commit(orig, a, spec, act, scratch, out) {
                    started.insert(job);
                }
            }
        }
        // Multi-resource placement (Synergy's) for what Crius left waiting: the asked count
        // on the first model that holds it with the job's CPU and memory.
        let mut tries = 0;
        let mut map: Option<FreeMap<'_>> = None;
        for a in queued.iter().copied() {
            if tries >= BACKFILL_TRIES || scratch.state.free_gpus() == 0 {
                break;
            }
            if spanning.contains(&a.id) || started.contains(&a.id) || gone.contains(&a.id) {
                continue;
            }
            let Some(spec) = orig.spec(a) else { continue };
            if u64::from(spec.gpus) > scratch.state.free_gpus() {
                continue;
            }
            tries += 1;
            // One map for the call, kept as starts take from it.
            let map = map.get_or_insert_with(|| FreeMap::new(orig.cluster, scratch.state.free()));
            let mut found = None;
            for t in self.fastest_first(orig.cluster, a, spec) {
                let mut one = spec.clone();
                one.gpu_types = vec![t];
                if let Some(alloc) = map.find(&one, Slice::Fair) {
                    found = Some(alloc);
                    break;
                }
            }
            if let Some(alloc) = found {
                if self.commit_start(orig, a, spec, alloc, scratch, out) {
                    started.insert(a.id);
                    self.backfills += 1;
                    if let Some(Action::Start { allocation, .. }) = out.last() {
                        map.reserve(allocation);
                    }
                }
            }
        }
        // HAP at a round: a job of several GPUs that has waited [`SPAN_AFTER_ROUNDS`] rounds
        // while no model it may use has its GPUs free, but the models together have, runs
        // across them (HAP's uneven data parallelism sizes each GPU's shard by its speed)
        // instead of waiting on for one model to empty.
        if full && self.opts.hap {
            let mut spanned = 0;
            // Free GPUs per model, summed once and again only after a start took some
            // (summing every node per queued job was a quarter of a decision at 100,000
            // queued on 10,000 nodes).
            let mut free_by_model: Option<Vec<(GpuModelId, u64)>> = None;
            for a in queued {
                if spanned >= SPANS_PER_ROUND || scratch.state.free_gpus() < 2 {
                    break;
                }
                if spanning.contains(&a.id) || started.contains(&a.id) || gone.contains(&a.id) {
                    continue;
                }
                let Some(spec) = orig.spec(a) else { continue };
                let waited = orig.now.saturating_since(spec.submit);
                if spec.gpus < 2
                    || waited.as_micros() < self.round.as_micros().saturating_mul(SPAN_AFTER_ROUNDS)
                    || self.fits_one_model(
                        spec,
                        free_by_model.get_or_insert_with(|| free_per_model(orig, scratch)),
                    )
                {
                    continue;
                }
                if let Some(alloc) = self.place_spanning(orig, scratch, spec) {
                    if self.commit_start(orig, a, spec, alloc, scratch, out) {
                        self.spans += 1;
                        spanned += 1;
                        free_by_model = None;
                    }
                }
            }
        }
    }

    /// Whether one allowed model of `spec` has its GPUs free now (`free`: the free GPUs
    /// of each model, [`free_per_model`]).
    fn fits_one_model(&self, spec: &TrainingJob, free: &[(GpuModelId, u64)]) -> bool {
        self.allowed(spec).iter().any(|t| {
            free.iter()
                .any(|&(m, k)| m == *t && k >= u64::from(spec.gpus))
        })
    }

    /// Gives a start or resize its CPU and memory ([`Self::fit`]), checks and applies it.
    /// [`commit`](Self::commit) of a start of `a` on `allocation`.
    fn commit_start(
        &mut self,
        orig: &ClusterView<'_>,
        a: &ActiveJob,
        spec: &TrainingJob,
        allocation: Allocation,
        scratch: &mut Scratch<'_>,
        out: &mut Vec<Action>,
    ) -> bool {
        let start = Action::Start {
            job: a.id,
            allocation,
        };
        self.commit(orig, a, spec, start, scratch, out)
    }

    fn commit(
        &mut self,
        orig: &ClusterView<'_>,
        a: &ActiveJob,
        spec: &TrainingJob,
        mut act: Action,
        scratch: &mut Scratch<'_>,
        out: &mut Vec<Action>,
    ) -> bool {
        let holding = scratch.holding(orig, a.id);
        let alloc = match &mut act {
            Action::Start { allocation, .. } | Action::Resize { allocation, .. } => allocation,
            _ => return false,
        };
        let mut free: Vec<Resources> = Vec::new();
        let fits = {
            let base = scratch.state.free();
            let avail = |n: usize| -> Resources {
                let mut r = base.get(n).copied().unwrap_or_default();
                if let Some(h) = &holding {
                    for s in h.shares.iter().filter(|s| s.node.index() == n) {
                        r.add(&s.resources());
                    }
                }
                r
            };
            free.extend(alloc.shares.iter().map(|s| avail(s.node.index())));
            self.fit(orig.cluster, a, spec, alloc, &free)
        };
        if !fits {
            // Crius's node lacks the CPU or memory the job needs: the same GPUs' count and
            // model where Synergy's multi-resource placement finds them.
            if !matches!(act, Action::Start { .. }) {
                return false;
            }
            let Action::Start { allocation, .. } = &mut act else {
                return false;
            };
            let Some(t) = type_of(orig.cluster, allocation) else {
                return false;
            };
            let mut one = spec.clone();
            one.gpu_types = vec![t];
            one.gpus = allocation.gpus();
            if spec.gpus != one.gpus {
                // An explicit request is the whole job's, whatever count it runs on.
                one.cpu = spec.cpu;
                one.memory = spec.memory;
            }
            let map = FreeMap::new(orig.cluster, scratch.state.free());
            let Some(mut other) = map.find(&one, Slice::Fair) else {
                return false;
            };
            other.plan = allocation.plan;
            let base = scratch.state.free();
            let free: Vec<Resources> = other
                .shares
                .iter()
                .map(|s| base.get(s.node.index()).copied().unwrap_or_default())
                .collect();
            if !self.fit(orig.cluster, a, spec, &mut other, &free) {
                return false;
            }
            *allocation = other;
        }
        if scratch.apply(orig, &act) {
            out.push(act);
            true
        } else {
            false
        }
    }

    /// Sets each share's CPU and memory: Synergy's best case for the job's sensitivity if
    /// the node has it free, else the proportional share, never below the job's explicit
    /// request (split over the GPUs it holds). `free[i]` is what share `i`'s node has free.
    /// False when the node cannot give the explicit request.
    fn fit(
        &mut self,
        cluster: &Cluster,
        a: &ActiveJob,
        spec: &TrainingJob,
        alloc: &mut Allocation,
        free: &[Resources],
    ) -> bool {
        let total = alloc.gpus().max(1);
        let estimate = if self.opts.synergy {
            a.knowledge.get::<SensitivityEstimate>()
        } else {
            None
        };
        let mut tuned = false;
        for (s, avail) in alloc.shares.iter_mut().zip(free) {
            let k = s.gpus;
            let Some(node) = cluster.nodes.get(s.node.index()) else {
                return false;
            };
            let Some(group) = cluster.groups.get(node.group as usize) else {
                return false;
            };
            let split = |v: u64| -> u64 {
                (u128::from(v) * u128::from(k)).div_ceil(u128::from(total)) as u64
            };
            let floor_cpu = spec.cpu.map_or(0, |c| split(c.0));
            let floor_mem = spec.memory.map_or(0, |m| split(m.0));
            let prop = proportional_share(spec, group, s.node, k);
            let mut options: Vec<(u64, u64, bool)> = Vec::new();
            if let Some(e) = estimate {
                let best = FreeMap::new(cluster, &[]).share(
                    spec,
                    s.node,
                    k,
                    Slice::from_cores_gb(e.best_cpu_per_gpu, e.best_mem_per_gpu),
                );
                options.push((best.cpu.0, best.memory.0, true));
            }
            options.push((prop.cpu.0, prop.memory.0, false));
            let mut chosen = None;
            for (c, m, is_best) in options {
                let (c, m) = (c.max(floor_cpu), m.max(floor_mem));
                if c <= avail.cpu.0 && m <= avail.memory.0 {
                    chosen = Some((c, m, is_best));
                    break;
                }
            }
            let (c, m) = match chosen {
                Some((c, m, is_best)) => {
                    tuned |= is_best;
                    (c, m)
                }
                None if floor_cpu <= avail.cpu.0 && floor_mem <= avail.memory.0 => (
                    prop.cpu.0.min(avail.cpu.0).max(floor_cpu),
                    prop.memory.0.min(avail.memory.0).max(floor_mem),
                ),
                None => return false,
            };
            s.cpu = MilliCpu(c);
            s.memory = Bytes(m);
        }
        self.tuned += u64::from(tuned);
        true
    }

    /// HAP: `spec`'s GPUs across the allowed models' nodes (fullest free first), a data-
    /// parallel plan over them whose shards the runtime sizes by GPU speed; `None` until
    /// enough are free.
    fn place_spanning(
        &self,
        orig: &ClusterView<'_>,
        scratch: &Scratch<'_>,
        spec: &TrainingJob,
    ) -> Option<Allocation> {
        let allowed = self.allowed(spec);
        let free = scratch.state.free();
        if u64::from(spec.gpus) > scratch.state.free_gpus() {
            return None;
        }
        let cluster = orig.cluster;
        let mut nodes: Vec<(u32, usize)> = cluster
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| allowed.contains(&n.gpu) && free.get(*i).is_some_and(|f| f.gpus > 0))
            .map(|(i, _)| (free[i].gpus, i))
            .collect();
        nodes.sort_by_key(|&(f, i)| (std::cmp::Reverse(f), i));
        let mut left = spec.gpus;
        let mut shares: Vec<NodeShare> = Vec::new();
        for (f, i) in nodes {
            if left == 0 {
                break;
            }
            let node = &cluster.nodes[i];
            let group = cluster.groups.get(node.group as usize)?;
            let k = f.min(left);
            let share = proportional_share(spec, group, node.id, k);
            if !free[i].fits(&share.resources()) {
                continue;
            }
            shares.push(share);
            left -= k;
        }
        if left > 0 {
            return None;
        }
        let mut alloc = Allocation::new(shares);
        alloc.plan = Some(ParallelPlan::data_parallel(spec.gpus));
        Some(alloc)
    }

    /// LAS at a round: for the least-attained queued jobs that cannot start on what is
    /// free, running jobs of a higher service class on a model they may use, most attained
    /// first, until the freed and free GPUs of that model hold them.
    fn preempt(
        &self,
        orig: &ClusterView<'_>,
        active: &[ActiveJob],
        scratch: &Scratch<'_>,
        by_remaining: bool,
    ) -> Vec<JobId> {
        let free = scratch.state.free();
        let mut free_of: Vec<u64> = vec![0; self.types.len()];
        let ty = |g: GpuModelId| self.types.iter().position(|&(t, _)| t == g);
        for (n, f) in orig.cluster.nodes.iter().zip(free) {
            if let Some(t) = ty(n.gpu) {
                free_of[t] += u64::from(f.gpus);
            }
        }
        let mut queued: Vec<&ActiveJob> = active
            .iter()
            .filter(|a| a.state == JobState::Queued)
            .collect();
        if queued.is_empty() {
            return Vec::new();
        }
        // Each job's rank: attained service (LAS) or remaining time; victims are running
        // jobs on one model, the highest rank first.
        let rank = |a: &ActiveJob| {
            if by_remaining {
                remaining_us(a).unwrap_or(u64::MAX)
            } else {
                attained_us(a)
            }
        };
        // Whether a waiting job of rank `w` may preempt a running one of rank `r`: a higher
        // service class (LAS), or [`REMAINING_PREEMPT_FACTOR`] times more remaining time.
        let outranks = |w: u64, r: u64| {
            if by_remaining {
                r / REMAINING_PREEMPT_FACTOR > w
            } else {
                service_class(r) > service_class(w)
            }
        };
        if by_remaining {
            queued.sort_by_cached_key(|a| remaining_key(a, orig.spec(a)));
        } else {
            queued.sort_by_cached_key(|a| las_key(a, orig.spec(a)));
        }
        let mut running: Vec<(u64, JobId, usize, u32)> = active
            .iter()
            .filter(|a| a.state == JobState::Running)
            .filter_map(|a| {
                let alloc = a.allocation.as_ref()?;
                let t = ty(type_of(orig.cluster, alloc)?)?;
                (alloc.gpus() > 0).then(|| (rank(a), a.id, t, alloc.gpus()))
            })
            .collect();
        running.sort_by_key(|&(us, id, _, _)| (std::cmp::Reverse(us), id));
        let mut taken = vec![false; running.len()];
        let mut victims = Vec::new();
        for w in queued.into_iter().take(PREEMPTING_JOBS_PER_ROUND) {
            let Some(spec) = orig.spec(w) else { continue };
            if self.opts.hap && self.must_span(spec) {
                continue;
            }
            let need = u64::from(spec.gpus);
            let allowed: Vec<usize> = self.allowed(spec).into_iter().filter_map(ty).collect();
            if let Some(&t) = allowed.iter().find(|&&t| free_of[t] >= need) {
                // It starts on what is free: keep that for it.
                free_of[t] -= need;
                continue;
            }
            let own = rank(w);
            for &t in &allowed {
                let mut got = free_of[t];
                let mut pick = Vec::new();
                for (i, &(us, id, vt, g)) in running.iter().enumerate() {
                    if got >= need {
                        break;
                    }
                    if taken[i] || vt != t || !outranks(own, us) {
                        continue;
                    }
                    pick.push(i);
                    got += u64::from(g);
                    let _ = id;
                }
                if got >= need {
                    for i in pick {
                        taken[i] = true;
                        victims.push(running[i].1);
                    }
                    free_of[t] = got - need;
                    break;
                }
            }
        }
        victims
    }
}
