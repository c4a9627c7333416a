//! Resource-sensitive CPU/memory allocation (Synergy, OSDI'22, DESIGN §5.1): every job
//! ordering (FIFO, SRTF, LAS, FTF) composed with an allocation mechanism:
//!
//! - `proportional`: CPU and memory in proportion to GPUs (the production default);
//! - `greedy`: a job's best-case demand if some placement has it, else skip the job this round;
//! - `tune`: best case; else the proportional share; else, on servers with free GPUs, demote
//!   jobs placed this round that hold more than their proportional share back to it (most
//!   servers spanned first, then most CPU per GPU, then most memory per GPU) until the job's
//!   proportional share fits;
//! - `opt`: per round, one (CPU, memory) grid point per job maximising Σ estimated throughput
//!   subject to cluster CPU and memory and every job ≥ its proportional-share throughput (an
//!   LP over job classes, rounded), then a per-server placement; see [`crate::synergy_opt`].
//!
//! Like the reference, a policy re-plans everything at each round boundary (all leases end):
//! jobs are ranked, the mechanism allocates in rank order on a ledger where every running
//! job's resources are released, and the result is diffed against what runs (a job whose
//! allocation is unchanged keeps running untouched). Between rounds (the exact engine's
//! completions and arrivals) the policy only fills free resources with queued jobs.
//!
//! Policies read what profiling learned from [`ActiveJob::sensitivity`]; a job without an
//! estimate is treated as insensitive (best case = proportional share, speed-up 1).
//!
//! Placement is multi-resource: the whole vector on one server if one fits it (best fit: the
//! server with the fewest free GPUs); otherwise, for multi-GPU jobs, GPUs from the servers
//! with the most free GPUs first (so the job spans as few servers as possible), each GPU
//! carrying its per-GPU slice of CPU and memory.

use tessera_model::{
    Allocation, Bytes, Cluster, MilliCpu, NodeGroup, NodeId, NodeShare, Resources, SimDuration,
    TrainingJob,
};
use tessera_perf::synergy::{gb_to_bytes, SensitivityEstimate};

use crate::baselines::JobOrder;
use crate::placement::proportional_share;
use crate::policy::Policy;
use crate::synergy_opt::{job_options, solve_round, OptJob, OptStats, Point};
use crate::view::{Action, ActiveJob, ClusterView, JobState};

/// A job not run for this long is moved to the front (the reference's starvation guard).
pub const STARVATION: SimDuration = SimDuration::from_secs(1000 * 3600);

/// How CPU and memory are handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// In proportion to GPUs.
    Proportional,
    /// Best-case demand or skip.
    Greedy,
    /// Best case, else proportional, else demote peers placed this round.
    Tune,
    /// Per-round LP over the grid, then placement.
    Opt,
}

impl Mechanism {
    /// Registry suffix.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Proportional => "proportional",
            Mechanism::Greedy => "greedy",
            Mechanism::Tune => "tune",
            Mechanism::Opt => "opt",
        }
    }

    /// Parses a registry suffix.
    pub fn parse(s: &str) -> Option<Mechanism> {
        Some(match s {
            "proportional" | "fair" => Mechanism::Proportional,
            "greedy" => Mechanism::Greedy,
            "tune" => Mechanism::Tune,
            "opt" => Mechanism::Opt,
            _ => return None,
        })
    }
}

/// What a job gets per GPU on each node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slice {
    /// The node's proportional share (or the job's explicit request split by GPUs).
    Fair,
    /// Explicit CPU and memory per GPU.
    PerGpu {
        /// CPU per GPU.
        cpu: MilliCpu,
        /// Memory per GPU.
        memory: Bytes,
    },
}

impl Slice {
    /// The slice for `cpu` cores and `mem` GB per GPU.
    pub fn from_cores_gb(cpu: f64, mem: f64) -> Slice {
        Slice::PerGpu {
            cpu: MilliCpu((cpu.max(0.0) * 1000.0).round() as u64),
            memory: gb_to_bytes(mem),
        }
    }
}

/// Free resources per node, with multi-resource placement.
#[derive(Clone, Debug)]
pub struct FreeMap<'c> {
    cluster: &'c Cluster,
    free: Vec<Resources>,
    free_gpus: u64,
}

impl<'c> FreeMap<'c> {
    /// Starts from `free` (indexed by node).
    pub fn new(cluster: &'c Cluster, free: &[Resources]) -> FreeMap<'c> {
        FreeMap {
            cluster,
            free: free.to_vec(),
            free_gpus: free.iter().map(|f| f.gpus as u64).sum(),
        }
    }

    /// Free resources per node.
    pub fn free(&self) -> &[Resources] {
        &self.free
    }

    /// Free GPUs in the cluster.
    pub fn free_gpus(&self) -> u64 {
        self.free_gpus
    }

    /// Returns an allocation's resources.
    pub fn release(&mut self, alloc: &Allocation) {
        for s in &alloc.shares {
            if let Some(f) = self.free.get_mut(s.node.index()) {
                f.add(&s.resources());
                self.free_gpus += s.gpus as u64;
            }
        }
    }

    /// Takes an allocation if all of it is free; false (and no change) otherwise.
    pub fn reserve(&mut self, alloc: &Allocation) -> bool {
        let ok = alloc.nodes_distinct()
            && alloc.shares.iter().all(|s| {
                self.free
                    .get(s.node.index())
                    .is_some_and(|f| f.fits(&s.resources()))
            });
        if ok {
            for s in &alloc.shares {
                self.free[s.node.index()].sub(&s.resources());
                self.free_gpus -= s.gpus as u64;
            }
        }
        ok
    }

    /// What `k` GPUs of `job` carry on `node` under `slice`.
    pub fn share(&self, job: &TrainingJob, node: NodeId, k: u32, slice: Slice) -> NodeShare {
        match slice {
            Slice::Fair => {
                let group = &self.cluster.groups[self.cluster.nodes[node.index()].group as usize];
                proportional_share(job, group, node, k)
            }
            Slice::PerGpu { cpu, memory } => NodeShare {
                node,
                gpus: k,
                cpu: MilliCpu(cpu.0.saturating_mul(k as u64)),
                memory: Bytes(memory.0.saturating_mul(k as u64)),
            },
        }
    }

    fn eligible(&self, job: &TrainingJob, group: &NodeGroup) -> bool {
        job.gpu_types.is_empty() || job.gpu_types.contains(&group.gpu)
    }

    /// Finds a placement for `job` under `slice` without reserving it.
    pub fn find(&self, job: &TrainingJob, slice: Slice) -> Option<Allocation> {
        let g = job.gpus;
        if g == 0 || g as u64 > self.free_gpus {
            return None;
        }
        // One server holding the whole vector: the fullest that fits (best fit).
        let mut best: Option<(u32, usize)> = None;
        for group in self
            .cluster
            .groups
            .iter()
            .filter(|gr| self.eligible(job, gr))
        {
            let nodes = group.first_node as usize..(group.first_node + group.count) as usize;
            for n in nodes {
                let f = &self.free[n];
                if f.gpus < g || best.is_some_and(|(fg, _)| fg <= f.gpus) {
                    continue;
                }
                if f.fits(&self.share(job, NodeId(n as u32), g, slice).resources()) {
                    best = Some((f.gpus, n));
                }
            }
        }
        if let Some((_, n)) = best {
            return Some(Allocation {
                shares: vec![self.share(job, NodeId(n as u32), g, slice)],
            });
        }
        if g == 1 {
            return None;
        }
        // Several servers, emptiest first, each GPU with its slice; within one node group.
        for group in self
            .cluster
            .groups
            .iter()
            .filter(|gr| self.eligible(job, gr))
        {
            let mut nodes: Vec<usize> = (group.first_node as usize
                ..(group.first_node + group.count) as usize)
                .filter(|&n| self.free[n].gpus > 0)
                .collect();
            nodes.sort_by_key(|&n| (std::cmp::Reverse(self.free[n].gpus), n));
            let mut need = g;
            let mut shares = Vec::new();
            for n in nodes {
                if need == 0 {
                    break;
                }
                let mut k = need.min(self.free[n].gpus);
                while k > 0 {
                    let s = self.share(job, NodeId(n as u32), k, slice);
                    if self.free[n].fits(&s.resources()) {
                        shares.push(s);
                        need -= k;
                        break;
                    }
                    k -= 1;
                }
            }
            if need == 0 {
                return Some(Allocation { shares });
            }
        }
        None
    }

    /// Finds and reserves a placement.
    pub fn place(&mut self, job: &TrainingJob, slice: Slice) -> Option<Allocation> {
        let a = self.find(job, slice)?;
        let ok = self.reserve(&a);
        debug_assert!(ok, "a placement found must be reservable");
        ok.then_some(a)
    }
}

/// A job the mechanism placed in this call.
#[derive(Clone, Debug)]
struct Placed {
    /// Index into `view.active`.
    idx: usize,
    alloc: Allocation,
    /// Demoted to its proportional share by TUNE (never demoted twice).
    demoted: bool,
}

#[derive(Clone, Copy, Debug)]
struct Ranked {
    starved: bool,
    key: f64,
    submit: u64,
    id: u32,
    idx: usize,
}

/// An OPT class: GPU count and the bit patterns of its grid options.
type ClassKey = (u32, Vec<(u64, u64, u64)>);

/// One ordering composed with one allocation mechanism.
#[derive(Debug)]
pub struct SynergyPolicy {
    name: String,
    order: JobOrder,
    mechanism: Mechanism,
    round: Option<SimDuration>,
    /// When each job (by id) was last placed, in µs; `u64::MAX` = never.
    last_run: Vec<u64>,
    ranked: Vec<Ranked>,
    opt: OptStats,
    /// Wall-clock limit for one OPT solve, seconds.
    opt_time_limit_s: f64,
    /// OPT's interned job classes: job id → class id (`u32::MAX` = not yet seen), and per
    /// class its GPU count and grid options (computed once per job, not every round).
    opt_class_of: Vec<u32>,
    opt_classes: Vec<(u32, Vec<Point>)>,
    opt_intern: std::collections::BTreeMap<ClassKey, u32>,
}

impl SynergyPolicy {
    /// `order` with `mechanism`, re-planning every `round` (or at every event if `None`).
    pub fn new(order: JobOrder, mechanism: Mechanism, round: Option<SimDuration>) -> Self {
        let order_name = match order {
            JobOrder::Fifo => "fifo",
            JobOrder::Srtf => "srtf",
            JobOrder::Las => "las",
            JobOrder::Ftf => "ftf",
        };
        SynergyPolicy {
            name: format!("{order_name}+{}", mechanism.name()),
            order,
            mechanism,
            round,
            last_run: Vec::new(),
            ranked: Vec::new(),
            opt: OptStats::default(),
            opt_time_limit_s: 1.0,
            opt_class_of: Vec::new(),
            opt_classes: Vec::new(),
            opt_intern: std::collections::BTreeMap::new(),
        }
    }

    /// Statistics of OPT's solves so far.
    pub fn opt_stats(&self) -> &OptStats {
        &self.opt
    }

    /// Estimated speed-up at the best case used for ordering (1 under proportional).
    fn speedup(&self, job: &ActiveJob) -> f64 {
        match (&self.mechanism, &job.sensitivity) {
            (Mechanism::Proportional, _) | (_, None) => 1.0,
            (_, Some(e)) => e.speedup.max(1e-9),
        }
    }

    fn rank(&mut self, view: &ClusterView<'_>, only_queued: bool) {
        self.ranked.clear();
        let now = view.now.as_micros();
        for (idx, job) in view.active.iter().enumerate() {
            if only_queued && job.state != JobState::Queued {
                continue;
            }
            let Some(spec) = view.spec(job) else { continue };
            let remaining = job.remaining_secs_estimate() / self.speedup(job);
            let key = match self.order {
                JobOrder::Fifo => 0.0,
                JobOrder::Srtf => remaining,
                JobOrder::Las => job.attained_gpu_secs,
                JobOrder::Ftf => {
                    let ideal = if job.throughput_estimate > 0.0 {
                        spec.iterations as f64 / job.throughput_estimate
                    } else {
                        f64::INFINITY
                    };
                    let in_system = view.now.saturating_since(spec.submit).as_secs_f64();
                    -((in_system + remaining) / ideal.max(1e-9))
                }
            };
            let last = self
                .last_run
                .get(job.id.index())
                .copied()
                .filter(|&t| t != u64::MAX)
                .unwrap_or(spec.submit.as_micros());
            // FIFO ignores the guard, as the reference does (it sorts by arrival only).
            let starved = !matches!(self.order, JobOrder::Fifo)
                && now.saturating_sub(last) > STARVATION.as_micros();
            self.ranked.push(Ranked {
                starved,
                key,
                submit: spec.submit.as_micros(),
                id: job.id.0,
                idx,
            });
        }
        self.ranked.sort_unstable_by(|a, b| {
            b.starved
                .cmp(&a.starved)
                .then(a.key.total_cmp(&b.key))
                .then(a.submit.cmp(&b.submit))
                .then(a.id.cmp(&b.id))
        });
    }

    /// The job's best-case slice and whether it differs from the proportional one.
    fn best_slice(job: &ActiveJob) -> Slice {
        match &job.sensitivity {
            Some(e) => Slice::from_cores_gb(e.best_cpu_per_gpu, e.best_mem_per_gpu),
            None => Slice::Fair,
        }
    }

    /// The reference's "make fair share": if the best case exceeds the proportional share in
    /// any resource, the proportional share; otherwise the job asked for less and keeps it.
    fn fair_slice(cluster: &Cluster, job: &ActiveJob) -> Slice {
        let Some(e) = &job.sensitivity else {
            return Slice::Fair;
        };
        let Some(g) = cluster.groups.first() else {
            return Slice::Fair;
        };
        let per = g.gpus_per_node.max(1) as f64;
        let (fc, fm) = (g.cpu.as_cores() / per, g.memory.as_gib() / per);
        if e.best_cpu_per_gpu > fc * (1.0 + 1e-6) || e.best_mem_per_gpu > fm * (1.0 + 1e-6) {
            Slice::Fair
        } else {
            Self::best_slice(job)
        }
    }

    /// Keeps a running job where it is if its current allocation is exactly `slice`.
    fn keep_if_same(
        ledger: &mut FreeMap<'_>,
        spec: &TrainingJob,
        job: &ActiveJob,
        slice: Slice,
    ) -> Option<Allocation> {
        let a = job.allocation.as_ref()?;
        let same = a.gpus() == spec.gpus
            && a.shares
                .iter()
                .all(|s| *s == ledger.share(spec, s.node, s.gpus, slice));
        (same && ledger.reserve(a)).then(|| a.clone())
    }

    fn try_slice(
        ledger: &mut FreeMap<'_>,
        spec: &TrainingJob,
        job: &ActiveJob,
        slice: Slice,
    ) -> Option<Allocation> {
        Self::keep_if_same(ledger, spec, job, slice).or_else(|| ledger.place(spec, slice))
    }

    /// Allocates one job with the mechanism (OPT outside a round boundary behaves as TUNE
    /// without demotion). Pushes onto `plan` on success.
    fn allocate(
        &self,
        view: &ClusterView<'_>,
        ledger: &mut FreeMap<'_>,
        plan: &mut Vec<Placed>,
        idx: usize,
        demote: bool,
    ) {
        let job = &view.active[idx];
        let Some(spec) = view.spec(job) else { return };
        let alloc = match self.mechanism {
            Mechanism::Proportional => Self::try_slice(ledger, spec, job, Slice::Fair),
            Mechanism::Greedy => Self::try_slice(ledger, spec, job, Self::best_slice(job)),
            Mechanism::Tune | Mechanism::Opt => {
                let best = Self::best_slice(job);
                let fair = Self::fair_slice(view.cluster, job);
                Self::try_slice(ledger, spec, job, best)
                    .or_else(|| Self::try_slice(ledger, spec, job, fair))
                    .or_else(|| {
                        if demote && self.mechanism == Mechanism::Tune {
                            demote_peers(view, ledger, plan, spec);
                            ledger.place(spec, fair)
                        } else {
                            None
                        }
                    })
            }
        };
        if let Some(alloc) = alloc {
            plan.push(Placed {
                idx,
                alloc,
                demoted: false,
            });
        }
    }

    fn plan<'v>(&mut self, view: &ClusterView<'v>, replan: bool) -> (Vec<Placed>, FreeMap<'v>) {
        self.rank(view, !replan);
        let mut ledger = FreeMap::new(view.cluster, view.free);
        if replan {
            for j in view.active {
                if let Some(a) = &j.allocation {
                    ledger.release(a);
                }
            }
        }
        let mut plan: Vec<Placed> = Vec::new();
        // The reference's LAS and every OPT take the prefix of ranked jobs whose GPUs fit;
        // FIFO/SRTF/FTF walk the whole list (backfill).
        let prefix = replan && (self.order == JobOrder::Las || self.mechanism == Mechanism::Opt);
        let candidates: Vec<usize> = if prefix {
            let mut budget = ledger.free_gpus();
            let mut chosen: Vec<usize> = Vec::new();
            for r in &self.ranked {
                if budget == 0 {
                    break;
                }
                let g = view.spec(&view.active[r.idx]).map_or(0, |s| s.gpus as u64);
                if g > 0 && g <= budget {
                    budget -= g;
                    chosen.push(r.idx);
                }
            }
            if self.order == JobOrder::Las && self.mechanism == Mechanism::Tune {
                // The reference allocates LAS's round largest-first under TUNE (stable).
                chosen.sort_by_key(|&i| {
                    std::cmp::Reverse(view.spec(&view.active[i]).map_or(0, |s| s.gpus))
                });
            }
            chosen
        } else {
            self.ranked.iter().map(|r| r.idx).collect()
        };

        if replan && self.mechanism == Mechanism::Opt {
            self.plan_opt(view, &mut ledger, &mut plan, &candidates);
            return (plan, ledger);
        }
        for idx in candidates {
            if ledger.free_gpus() == 0 {
                break; // every job needs at least one GPU
            }
            let g = view.spec(&view.active[idx]).map_or(0, |s| s.gpus as u64);
            if g == 0 || g > ledger.free_gpus() {
                continue;
            }
            self.allocate(view, &mut ledger, &mut plan, idx, true);
        }
        (plan, ledger)
    }

    fn plan_opt(
        &mut self,
        view: &ClusterView<'_>,
        ledger: &mut FreeMap<'_>,
        plan: &mut Vec<Placed>,
        candidates: &[usize],
    ) {
        let (_, cpu_total, mem_total) = free_totals(ledger.free());
        let shape = view.cluster.groups.first();
        let (fair_cpu, fair_mem) = shape.map_or((3.0, 62.5), |g| {
            let per = g.gpus_per_node.max(1) as f64;
            (g.cpu.as_cores() / per, g.memory.as_gib() / per)
        });
        for &i in candidates {
            let job = &view.active[i];
            let Some(spec) = view.spec(job) else { continue };
            let id = job.id.index();
            if self.opt_class_of.len() <= id {
                self.opt_class_of.resize(id + 1, u32::MAX);
            }
            if self.opt_class_of[id] == u32::MAX {
                let opts = job_options(job.sensitivity.as_deref(), fair_cpu, fair_mem);
                let bits = opts
                    .iter()
                    .map(|p| (p.0.to_bits(), p.1.to_bits(), p.2.to_bits()))
                    .collect();
                let next = self.opt_classes.len() as u32;
                let class = *self.opt_intern.entry((spec.gpus, bits)).or_insert(next);
                if class == next {
                    self.opt_classes.push((spec.gpus, opts));
                }
                self.opt_class_of[id] = class;
            }
        }
        let jobs: Vec<OptJob<'_>> = candidates
            .iter()
            .filter_map(|&i| {
                let spec = view.spec(&view.active[i])?;
                let class = self.opt_class_of[view.active[i].id.index()];
                let (_, opts) = self.opt_classes.get(class as usize)?;
                Some(OptJob {
                    gpus: spec.gpus,
                    estimate: view.active[i].sensitivity.as_deref(),
                    class: Some((class, opts.as_slice())),
                })
            })
            .collect();
        let result = solve_round(
            &jobs,
            cpu_total as f64 / 1000.0,
            mem_total as f64 / Bytes::GIB as f64,
            fair_cpu,
            fair_mem,
            self.opt_time_limit_s,
        );
        let mut realized = 0.0;
        let mut unplaced = 0u64;
        for (k, &idx) in candidates.iter().enumerate() {
            let job = &view.active[idx];
            let Some(spec) = view.spec(job) else { continue };
            let Some(&(c, m, v)) = result.choice.get(k) else {
                continue;
            };
            let chosen = Slice::from_cores_gb(c, m);
            let alloc = Self::try_slice(ledger, spec, job, chosen)
                .map(|a| (a, v))
                .or_else(|| {
                    // Placement could not realise the LP's point: fall back to the proportional
                    // share (estimated 1.0), counted in the gap.
                    Self::try_slice(ledger, spec, job, Slice::Fair).map(|a| (a, 1.0))
                });
            match alloc {
                Some((alloc, got)) => {
                    realized += got;
                    plan.push(Placed {
                        idx,
                        alloc,
                        demoted: false,
                    });
                }
                None => unplaced += 1,
            }
        }
        self.opt.record(&result, realized, unplaced);
    }

    fn emit(
        &mut self,
        view: &ClusterView<'_>,
        plan: Vec<Placed>,
        replan: bool,
        actions: &mut Vec<Action>,
    ) {
        let mut planned: Vec<Option<&Allocation>> = vec![None; view.active.len()];
        for p in &plan {
            planned[p.idx] = Some(&p.alloc);
        }
        let mut restart = vec![false; view.active.len()];
        if replan {
            for (i, j) in view.active.iter().enumerate() {
                if let Some(cur) = &j.allocation {
                    if planned[i] != Some(cur) {
                        actions.push(Action::Preempt { job: j.id });
                        restart[i] = true;
                    }
                }
            }
        }
        for p in &plan {
            let j = &view.active[p.idx];
            if j.state == JobState::Queued || restart[p.idx] {
                actions.push(Action::Start {
                    job: j.id,
                    allocation: p.alloc.clone(),
                });
            }
        }
        let now = view.now.as_micros();
        for p in &plan {
            let id = view.active[p.idx].id.index();
            if self.last_run.len() <= id {
                self.last_run.resize(id + 1, u64::MAX);
            }
            self.last_run[id] = now;
        }
    }
}

fn free_totals(free: &[Resources]) -> (u64, u64, u64) {
    free.iter().fold((0, 0, 0), |(g, c, m), f| {
        (g + f.gpus as u64, c + f.cpu.0, m + f.memory.0)
    })
}

/// TUNE step 3: on servers with free GPUs, demote jobs placed this round that hold more than
/// their proportional share until `spec`'s proportional share would fit there.
fn demote_peers(
    view: &ClusterView<'_>,
    ledger: &mut FreeMap<'_>,
    plan: &mut [Placed],
    spec: &TrainingJob,
) {
    let g = spec.gpus;
    // Target servers as the reference picks them: a multi-GPU job's first server (by id) with
    // enough free GPUs; otherwise the fullest servers with free GPUs until the count is met.
    let free = ledger.free().to_vec();
    let mut targets: Vec<(usize, u32)> = Vec::new();
    if g > 1 {
        if let Some(n) = free.iter().position(|f| f.gpus >= g) {
            targets.push((n, g));
        }
    }
    if targets.is_empty() {
        let mut nodes: Vec<usize> = (0..free.len()).filter(|&n| free[n].gpus > 0).collect();
        nodes.sort_by_key(|&n| (free[n].gpus, n));
        let mut need = g;
        for n in nodes {
            if need == 0 {
                break;
            }
            let k = need.min(free[n].gpus);
            targets.push((n, k));
            need -= k;
        }
    }
    for (n, k) in targets {
        let node = NodeId(n as u32);
        let want = ledger.share(spec, node, k, Slice::Fair);
        let shortfall = |l: &FreeMap<'_>| {
            let f = l.free()[n];
            (
                want.cpu.0.saturating_sub(f.cpu.0),
                want.memory.0.saturating_sub(f.memory.0),
            )
        };
        let (mut need_cpu, mut need_mem) = shortfall(ledger);
        if need_cpu == 0 && need_mem == 0 {
            continue;
        }
        // Candidates on this server holding more than their proportional share there.
        let mut cands: Vec<(usize, usize, u64, u64, u32)> = Vec::new();
        for (pi, p) in plan.iter().enumerate() {
            if p.demoted {
                continue;
            }
            let Some(s) = p.alloc.shares.iter().find(|s| s.node == node) else {
                continue;
            };
            let Some(pspec) = view.spec(&view.active[p.idx]) else {
                continue;
            };
            let fair = ledger.share(pspec, node, s.gpus, Slice::Fair);
            if s.cpu > fair.cpu || s.memory > fair.memory {
                let gp = p.alloc.gpus().max(1) as u64;
                cands.push((
                    pi,
                    p.alloc.shares.len(),
                    p.alloc.cpu().0 / gp,
                    p.alloc.memory().0 / gp,
                    pspec.id.0,
                ));
            }
        }
        cands.sort_by(|a, b| {
            b.1.cmp(&a.1)
                .then(b.2.cmp(&a.2))
                .then(b.3.cmp(&a.3))
                .then(a.4.cmp(&b.4))
        });
        for (pi, ..) in cands {
            let p = &plan[pi];
            let Some(pspec) = view.spec(&view.active[p.idx]) else {
                continue;
            };
            let s = p.alloc.shares.iter().find(|s| s.node == node).copied();
            let Some(s) = s else { continue };
            let fair = ledger.share(pspec, node, s.gpus, Slice::Fair);
            let helps =
                (need_cpu > 0 && s.cpu > fair.cpu) || (need_mem > 0 && s.memory > fair.memory);
            if !helps {
                continue;
            }
            let old = p.alloc.clone();
            ledger.release(&old);
            // Back to the proportional share on every server it spans; where that would need
            // more of a resource than it held (it asked for less), it keeps what it held.
            let to_fair = |l: &FreeMap<'_>, keep_less: bool| Allocation {
                shares: old
                    .shares
                    .iter()
                    .map(|s| {
                        let f = l.share(pspec, s.node, s.gpus, Slice::Fair);
                        if keep_less {
                            NodeShare {
                                cpu: s.cpu.min(f.cpu),
                                memory: s.memory.min(f.memory),
                                ..f
                            }
                        } else {
                            f
                        }
                    })
                    .collect(),
            };
            let fair_all = to_fair(ledger, false);
            let new = if ledger.reserve(&fair_all) {
                fair_all
            } else {
                let lower = to_fair(ledger, true);
                if !ledger.reserve(&lower) {
                    // Cannot happen (it is no larger than what was released); stay put.
                    let kept = ledger.reserve(&old);
                    debug_assert!(kept);
                    continue;
                }
                lower
            };
            plan[pi].alloc = new;
            plan[pi].demoted = true;
            (need_cpu, need_mem) = shortfall(ledger);
            if need_cpu == 0 && need_mem == 0 {
                break;
            }
        }
    }
}

impl Policy for SynergyPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn round_length(&self) -> Option<SimDuration> {
        self.round
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let replan = self.round.is_none() || view.trigger.round;
        let (plan, _) = self.plan(view, replan);
        self.emit(view, plan, replan, actions);
    }

    fn stats(&self) -> Vec<(String, f64)> {
        if self.mechanism != Mechanism::Opt {
            return Vec::new();
        }
        self.opt.as_pairs()
    }
}

/// Estimated throughput (relative to proportional) of `job` under `alloc`: what the policy
/// believes; for tests and reports.
pub fn estimated_relative(job: &ActiveJob, alloc: &Allocation) -> f64 {
    let g = alloc.gpus();
    match (&job.sensitivity, g) {
        (_, 0) => 0.0,
        (None, _) => 1.0,
        (Some(e), g) => e.relative(
            alloc.cpu().as_cores() / g as f64,
            alloc.memory().as_gib() / g as f64,
        ),
    }
}

/// Convenience for tests: an estimate from a true table.
pub fn exact_estimate(model: &str, gpus: u32) -> Option<std::sync::Arc<SensitivityEstimate>> {
    let p = tessera_perf::synergy::SynergyProfiles::builtin().for_gpus(model, gpus)?;
    Some(std::sync::Arc::new(SensitivityEstimate::from_table(
        p.table.clone(),
    )))
}
