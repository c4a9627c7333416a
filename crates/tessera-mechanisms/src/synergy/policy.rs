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
//!   LP over job classes, rounded), then a per-server placement; see [`super::opt`].
//!
//! Like the reference, a policy re-plans everything at each round boundary (all leases end):
//! jobs are ranked, the mechanism allocates in rank order on a ledger where every running
//! job's resources are released, and the result is diffed against what runs (a job whose
//! allocation is unchanged keeps running untouched). Between rounds (the exact engine's
//! completions and arrivals) the policy only fills free resources with queued jobs.
//!
//! Policies read what profiling learned from [`ActiveJob::knowledge`] (a [`SensitivityEstimate`]); a job without an
//! estimate is treated as insensitive (best case = proportional share, speed-up 1).
//!
//! Placement is multi-resource: the whole vector on one server if one fits it (best fit: the
//! server with the fewest free GPUs); otherwise, for multi-GPU jobs, GPUs from the servers
//! with the most free GPUs first (so the job spans as few servers as possible), each GPU
//! carrying its per-GPU slice of CPU and memory. Under the reference semantics, placement is
//! the reference's instead: GPU by GPU in server order, first fit (see [`FreeMap`]).

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tessera_sched::baselines::TypeBudget;

use super::perf::{gb_to_bytes, SensitivityEstimate, SynergyProfiles};
use tessera_model::{
    Allocation, Bytes, Cluster, JobId, MilliCpu, NodeGroup, NodeId, NodeShare, Resources, Shares,
    SimDuration, SimTime, TrainingJob,
};

use super::opt::{job_options, solve_round, OptJob, OptStats, Point};
use crate::{renumber_vec, renumbered};
use tessera_sched::baselines::JobOrder;
use tessera_sched::placement::proportional_share;
use tessera_sched::Policy;
use tessera_sched::{Action, ActiveJob, ClusterView, JobChange, JobState};

/// A job not run for this long is moved to the front (the reference's starvation guard).
pub const STARVATION: SimDuration = SimDuration::from_secs(1000 * 3600);

/// How CPU and memory are handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    /// In proportion to GPUs.
    Proportional,
    /// Best-case demand or skip.
    Greedy,
    /// Best case, else proportional, else demote peers placed this round.
    Tune,
    /// Per-round LP over the grid, then placement.
    Opt,
}

impl Allocator {
    /// Registry suffix.
    pub fn name(self) -> &'static str {
        match self {
            Allocator::Proportional => "proportional",
            Allocator::Greedy => "greedy",
            Allocator::Tune => "tune",
            Allocator::Opt => "opt",
        }
    }

    /// Parses a registry suffix.
    pub fn parse(s: &str) -> Option<Allocator> {
        Some(match s {
            "proportional" | "fair" => Allocator::Proportional,
            "greedy" => Allocator::Greedy,
            "tune" => Allocator::Tune,
            "opt" => Allocator::Opt,
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
    /// Every node before this one has no free GPU (the reference's first fit skips them).
    first_with_gpus: usize,
    /// Place as the reference does (its `_top_synergy_gpus`, the allocation its runner uses):
    /// GPU by GPU in server order, each on the first server that still fits one more GPU's
    /// slice, instead of the whole vector on the fullest server that fits it.
    pub reference_spread: bool,
}

impl<'c> FreeMap<'c> {
    /// Starts from `free` (indexed by node).
    pub fn new(cluster: &'c Cluster, free: &[Resources]) -> FreeMap<'c> {
        FreeMap {
            cluster,
            free: free.to_vec(),
            free_gpus: free.iter().map(|f| f.gpus as u64).sum(),
            first_with_gpus: free.iter().position(|f| f.gpus > 0).unwrap_or(free.len()),
            reference_spread: false,
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
                if s.gpus > 0 {
                    self.first_with_gpus = self.first_with_gpus.min(s.node.index());
                }
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
            self.advance_first_with_gpus();
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
                devices: None,
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
        if self.reference_spread {
            return self.find_first_fit_reference(job, slice);
        }
        // One server holding the whole vector: the fullest that fits (best fit).
        let mut best: Option<(u32, usize)> = None;
        for group in self
            .cluster
            .groups
            .iter()
            .filter(|gr| self.eligible(job, gr))
        {
            let first = group.first_node as usize;
            // What the job needs on one server does not depend on which server of the group
            // (a share names its node, nothing else): compute it once, not per node.
            let need = self.share(job, NodeId(first as u32), g, slice).resources();
            for n in first..first + group.count as usize {
                let f = &self.free[n];
                if f.gpus < g || best.is_some_and(|(fg, _)| fg <= f.gpus) {
                    continue;
                }
                if f.fits(&need) {
                    best = Some((f.gpus, n));
                }
            }
        }
        if let Some((_, n)) = best {
            return Some(Allocation::single(self.share(
                job,
                NodeId(n as u32),
                g,
                slice,
            )));
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
                return Some(Allocation::new(shares));
            }
        }
        None
    }

    /// The reference's placement: its free GPUs in server order, each taken if its server
    /// still fits one more GPU's slice beside those already taken for this job (so a server
    /// short of CPU or memory gives fewer GPUs, and the job spans the next servers). Single
    /// node group, as the reference's cluster; nothing is taken unless all GPUs are found.
    fn find_first_fit_reference(&self, job: &TrainingJob, slice: Slice) -> Option<Allocation> {
        for group in self
            .cluster
            .groups
            .iter()
            .filter(|gr| self.eligible(job, gr))
        {
            let first = group.first_node as usize;
            // One GPU's slice is the same on every server of the group.
            let one_share = self.share(job, NodeId(first as u32), 1, slice);
            let one = one_share.resources();
            let mut need = job.gpus;
            let mut shares = Shares::new();
            // Nodes without a free GPU cannot take one more GPU's slice.
            for n in first.max(self.first_with_gpus)..first + group.count as usize {
                let mut left = self.free[n];
                let mut k = 0;
                while need > 0 && left.fits(&one) {
                    left.sub(&one);
                    k += 1;
                    need -= 1;
                }
                if k == 1 {
                    shares.push(NodeShare {
                        node: NodeId(n as u32),
                        ..one_share
                    });
                } else if k > 0 {
                    shares.push(self.share(job, NodeId(n as u32), k, slice));
                }
                if need == 0 {
                    return Some(Allocation::new(shares));
                }
            }
        }
        None
    }

    /// Finds and reserves a placement.
    pub fn place(&mut self, job: &TrainingJob, slice: Slice) -> Option<Allocation> {
        let a = self.find(job, slice)?;
        // `find` returns distinct nodes that fit: take it without checking again (this is
        // a round's hot path; `reserve` re-checks what callers hand in from elsewhere).
        debug_assert!(
            self.clone().reserve(&a),
            "a placement found must be reservable"
        );
        self.take_found(&a);
        Some(a)
    }

    /// Takes an allocation `find` returned on this map, unchanged since.
    fn take_found(&mut self, alloc: &Allocation) {
        for s in &alloc.shares {
            if let Some(f) = self.free.get_mut(s.node.index()) {
                f.sub(&s.resources());
                self.free_gpus = self.free_gpus.saturating_sub(s.gpus as u64);
            }
        }
        self.advance_first_with_gpus();
    }

    fn advance_first_with_gpus(&mut self) {
        while self
            .free
            .get(self.first_with_gpus)
            .is_some_and(|f| f.gpus == 0)
        {
            self.first_with_gpus += 1;
        }
    }
}

/// A job the mechanism placed in this call.
#[derive(Clone, Debug)]
struct Placed<'v> {
    /// Index into `view.active`.
    idx: usize,
    /// Borrowed from the view when a running job keeps its allocation (no copy per round).
    alloc: Cow<'v, Allocation>,
    /// Demoted to its proportional share by TUNE (never demoted twice).
    demoted: bool,
}

/// What the policy reads from a job's [`SensitivityEstimate`], taken once when it first
/// sees the job (both engines fix a job's knowledge when it becomes active), so that ranking
/// and allocation never go through the typed lookup per job per round.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Typed {
    /// Estimated speed-up at the best case (1 without an estimate).
    speedup: f64,
    /// The best-case slice ([`Slice::Fair`] without an estimate).
    best: Slice,
    /// The reference's "make fair share" slice: the proportional share if the best case
    /// exceeds it in any resource, else the (smaller) best case.
    fair: Slice,
    /// Whether the best case exceeds the proportional share of the cluster's servers.
    exceeds_fair: bool,
}

impl Typed {
    const NONE: Typed = Typed {
        speedup: 1.0,
        best: Slice::Fair,
        fair: Slice::Fair,
        exceeds_fair: false,
    };

    fn of(cluster: &Cluster, job: &ActiveJob) -> Typed {
        let Some(e) = job.knowledge.get::<SensitivityEstimate>() else {
            return Typed::NONE;
        };
        let best = Slice::from_cores_gb(e.best_cpu_per_gpu, e.best_mem_per_gpu);
        let exceeds = exceeds_fair_estimate(cluster, e);
        Typed {
            speedup: e.speedup.max(1e-9),
            best,
            fair: if exceeds || cluster.groups.is_empty() {
                Slice::Fair
            } else {
                best
            },
            exceeds_fair: exceeds,
        }
    }
}

/// One job's rank. The order is total (job ids are unique among active jobs), so popping
/// from a heap yields exactly the sorted order.
#[derive(Clone, Copy, Debug)]
struct Ranked {
    /// Not starved (1 bit), then the key's bits in `f64::total_cmp` order.
    hi: u128,
    /// Submission, then job id.
    lo: u128,
    /// GPUs asked for (so that the walk need not read the job's spec).
    gpus: u32,
    idx: usize,
}

impl Ranked {
    /// Packs the rank so that sorting compares two integers instead of a chain of fields
    /// (the ranking's sort is a large share of a re-plan with thousands queued).
    fn new(starved: bool, key: f64, submit: u64, id: u32, gpus: u32, idx: usize) -> Ranked {
        // `f64::total_cmp`'s order as an unsigned integer.
        let bits = key.to_bits() as i64;
        let ord = (bits ^ ((((bits >> 63) as u64) >> 1) as i64)) as u64 ^ (1 << 63);
        Ranked {
            hi: ((!starved as u128) << 64) | ord as u128,
            lo: ((submit as u128) << 32) | id as u128,
            gpus,
            idx,
        }
    }

    /// Best first: starved jobs, then the smallest key, earliest submission, smallest id.
    fn rank_cmp(&self, b: &Ranked) -> std::cmp::Ordering {
        (self.hi, self.lo).cmp(&(b.hi, b.lo))
    }
}

/// A ranking taken best first without sorting all of it: each time the sorted prefix runs
/// out, the next chunk (doubling) is selected from the rest in O(n) and only that chunk is
/// sorted. A walk stops once no GPU is free, so with thousands queued it sorts a few hundred.
/// The order is total, so the sequence is exactly that of a full sort.
#[derive(Debug, Default)]
struct LazyRanking {
    items: Vec<Ranked>,
    /// Items before this index are in final order.
    sorted: usize,
    /// The next item to hand out.
    next: usize,
}

impl LazyRanking {
    /// Slack added to the caller's hint for jobs that will be skipped.
    const MIN_CHUNK: usize = 16;

    fn clear(&mut self) {
        self.items.clear();
        self.sorted = 0;
        self.next = 0;
    }

    /// The next job, best first; `hint` = how many more the caller expects to take.
    fn pop(&mut self, hint: usize) -> Option<Ranked> {
        if self.next >= self.items.len() {
            return None;
        }
        if self.next == self.sorted {
            let rest = &mut self.items[self.sorted..];
            let want = self
                .sorted
                .max(hint.saturating_add(Self::MIN_CHUNK))
                .min(rest.len());
            if want < rest.len() {
                rest.select_nth_unstable_by(want - 1, Ranked::rank_cmp);
            }
            rest[..want].sort_unstable_by(Ranked::rank_cmp);
            self.sorted += want;
        }
        let r = self.items[self.next];
        self.next += 1;
        Some(r)
    }
}

/// One job's place in the tracked ranking: its rank and the version of its key.
#[derive(Clone, Copy, Debug)]
struct Entry {
    hi: u128,
    lo: u128,
    gpus: u32,
    /// Valid while equal to the job's current version (bumped at every re-key and at its end).
    ver: u32,
}

impl Entry {
    fn id(&self) -> usize {
        self.lo as u32 as usize
    }

    fn before(&self, b: &Entry) -> bool {
        (self.hi, self.lo) < (b.hi, b.lo)
    }
}

/// The ranking kept between calls when the driver reports every change: a large sorted
/// `cold` list rebuilt rarely, a small sorted `hot` list of the keys changed since, and
/// per job the version of its one valid entry. A call re-keys only the jobs that changed
/// and walks both lists merged, so that its cost follows what changed and how far the walk
/// goes, not the length of the queue. The order is the same total order as a full sort.
#[derive(Debug, Default)]
struct Tracked {
    /// Per job id: its index in `view.active` as mirrored from the reported changes
    /// (`u32::MAX` = not active); verified before every use.
    pos: Vec<u32>,
    /// The active jobs in the driver's order as mirrored: arrivals appended, an ended job
    /// swap-removed (the reference engine's order).
    order: Vec<JobId>,
    /// Per job id: the version of its valid entry.
    ver: Vec<u32>,
    /// Jobs whose key may have changed since the last call (duplicates allowed).
    dirty: Vec<JobId>,
    /// Jobs switched to fair share at this call and at the previous one.
    fair_last: Vec<JobId>,
    fair_before: Vec<JobId>,
    /// Per job id: the call that last re-keyed it (dedups `dirty`).
    stamp: Vec<u64>,
    call: u64,
    cold: Vec<Entry>,
    /// Entries of `cold` before this are all stale.
    cold_start: usize,
    hot: Vec<Entry>,
    /// This call's new keys, then a merge buffer.
    fresh: Vec<Entry>,
    buf: Vec<Entry>,
    /// The walk's cursors into `cold` and `hot`, valid while `walking`.
    ci: usize,
    hi: usize,
    walking: bool,
    /// (deadline µs, job id) of the starvation guard for jobs not yet starved, earliest
    /// first; a deadline may be early (the job ran since), never late.
    deadlines: BinaryHeap<Reverse<(u64, u32)>>,
}

impl Tracked {
    fn arrive(&mut self, id: JobId) {
        let i = id.index();
        if self.pos.len() <= i {
            self.pos.resize(i + 1, u32::MAX);
        }
        self.pos[i] = self.order.len() as u32;
        self.order.push(id);
    }

    fn end(&mut self, id: JobId) {
        let i = id.index();
        if let Some(v) = self.ver.get_mut(i) {
            *v = v.wrapping_add(1);
        }
        let Some(p) = self.pos.get_mut(i) else { return };
        let at = std::mem::replace(p, u32::MAX) as usize;
        if at < self.order.len() && self.order[at] == id {
            self.order.swap_remove(at);
            if let Some(moved) = self.order.get(at) {
                self.pos[moved.index()] = at as u32;
            }
        }
    }

    /// `id`'s index in `view.active`: the mirrored one if the view agrees, else found by
    /// re-mirroring the whole view (a driver keeping another order; never the reference
    /// engine).
    fn find(&mut self, view: &ClusterView<'_>, id: JobId) -> Option<usize> {
        let p = *self.pos.get(id.index())? as usize;
        if view.active.get(p).is_some_and(|a| a.id == id) {
            return Some(p);
        }
        if p == u32::MAX as usize {
            return None;
        }
        self.order.clear();
        for (k, a) in view.active.iter().enumerate() {
            if self.pos.len() <= a.id.index() {
                self.pos.resize(a.id.index() + 1, u32::MAX);
            }
            self.pos[a.id.index()] = k as u32;
            self.order.push(a.id);
        }
        let p = self.pos[id.index()] as usize;
        view.active.get(p).is_some_and(|a| a.id == id).then_some(p)
    }

    /// Renumbers by `map` (see [`Policy::renumber_jobs`]), forgetting finished jobs. The
    /// sorted lists hold ids in their keys: rather than re-key them here, the ranking is
    /// forgotten, so that the next call re-keys every active job (the same total order).
    fn renumber(&mut self, map: &[Option<JobId>]) {
        let ids = |v: &mut Vec<JobId>| {
            *v = v.iter().filter_map(|&j| renumbered(map, j)).collect();
        };
        ids(&mut self.order);
        ids(&mut self.dirty);
        ids(&mut self.fair_last);
        ids(&mut self.fair_before);
        self.pos = renumber_vec(std::mem::take(&mut self.pos), map, u32::MAX);
        self.deadlines = std::mem::take(&mut self.deadlines)
            .into_iter()
            .filter_map(|Reverse((d, id))| Some(Reverse((d, renumbered(map, JobId(id))?.0))))
            .collect();
        // Versions and stamps only qualify entries and dedup within one call: both restart.
        self.ver.clear();
        self.stamp.clear();
        self.fresh.clear();
        self.buf.clear();
        self.reset();
    }

    /// Forgets the ranking (every active job is re-keyed at the next call).
    fn reset(&mut self) {
        self.cold.clear();
        self.cold_start = 0;
        self.hot.clear();
        self.walking = false;
        let order = std::mem::take(&mut self.order);
        self.dirty.extend_from_slice(&order);
        self.order = order;
    }

    fn valid(ver: &[u32], e: &Entry) -> bool {
        ver.get(e.id()) == Some(&e.ver)
    }

    /// Merges this call's new keys into `hot` (dropping stale entries), and `hot` into
    /// `cold` once it has grown to a fraction of it.
    fn rebuild(&mut self) {
        // Keys are unique, so a stable sort gives the same order; it merges the runs this
        // list mostly is (a round re-keys its placed jobs in the order they ranked).
        self.fresh.sort_by_key(|e| (e.hi, e.lo));
        let ver = &self.ver;
        self.hot.retain(|e| Self::valid(ver, e));
        merge_into(&mut self.buf, &self.hot, &self.fresh);
        std::mem::swap(&mut self.hot, &mut self.buf);
        let cold_live = self.cold.len() - self.cold_start;
        if self.hot.len() > 64 + cold_live / 8 {
            let ver = &self.ver;
            let mut cold = std::mem::take(&mut self.cold);
            cold.drain(..self.cold_start);
            cold.retain(|e| Self::valid(ver, e));
            merge_into(&mut self.buf, &cold, &self.hot);
            std::mem::swap(&mut self.cold, &mut self.buf);
            self.cold_start = 0;
            self.hot.clear();
            cold.clear();
            self.buf = cold;
        }
    }

    fn start_walk(&mut self) {
        while self
            .cold
            .get(self.cold_start)
            .is_some_and(|e| !Self::valid(&self.ver, e))
        {
            self.cold_start += 1;
        }
        self.ci = self.cold_start;
        self.hi = 0;
        self.walking = true;
    }

    fn pop(&mut self, view: &ClusterView<'_>) -> Option<Ranked> {
        loop {
            while self
                .cold
                .get(self.ci)
                .is_some_and(|e| !Self::valid(&self.ver, e))
            {
                self.ci += 1;
            }
            let e = match (self.cold.get(self.ci), self.hot.get(self.hi)) {
                (Some(c), Some(h)) if h.before(c) => {
                    self.hi += 1;
                    *h
                }
                (Some(c), _) => {
                    self.ci += 1;
                    *c
                }
                (None, Some(h)) => {
                    self.hi += 1;
                    *h
                }
                (None, None) => return None,
            };
            // Every valid entry is of an active job (`end` invalidates), so `find` fails
            // only if the driver's view lost it.
            let Some(idx) = self.find(view, JobId(e.id() as u32)) else {
                continue;
            };
            return Some(Ranked {
                hi: e.hi,
                lo: e.lo,
                gpus: e.gpus,
                idx,
            });
        }
    }
}

/// `out` = the sorted merge of sorted `a` and `b`.
fn merge_into(out: &mut Vec<Entry>, a: &[Entry], b: &[Entry]) {
    out.clear();
    out.reserve(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if b[j].before(&a[i]) {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

/// What the policy keeps per job id.
#[derive(Clone, Copy, Debug)]
struct JobMeta {
    /// Submission, µs (`u64::MAX` = not yet seen).
    submit: u64,
    /// When last placed, µs (`u64::MAX` = never).
    last_run: u64,
    /// Iterations (FTF's ideal time).
    iterations: u64,
    /// GPUs asked for.
    gpus: u32,
    /// Marked by the starvation guard; never cleared (as in the reference).
    starved: bool,
    /// The re-plan (µs) at which TUNE last switched the job to its proportional share
    /// (`u64::MAX` = never); the reference ranks such a job at speed-up 1 the next round.
    fair_at: u64,
    /// Seconds per iteration at the proportional share, as the reference multiplies it
    /// (its model's profile; reference semantics only, else 0).
    iter_s: f64,
    /// The estimate's best-case speed-up (1 without one), taken when first seen; the rest
    /// of what the estimate says is in `SynergyPolicy::typed`, off the ranking's hot path.
    speedup: f64,
}

impl JobMeta {
    const UNSEEN: JobMeta = JobMeta {
        submit: u64::MAX,
        last_run: u64::MAX,
        iterations: 0,
        gpus: 0,
        starved: false,
        fair_at: u64::MAX,
        iter_s: 0.0,
        speedup: 1.0,
    };
}

/// An OPT class: GPU count and the bit patterns of its grid options.
type ClassKey = (u32, Vec<(u64, u64, u64)>);

/// One ordering composed with one allocation mechanism.
#[derive(Debug)]
pub struct SynergyPolicy {
    name: String,
    order: JobOrder,
    mechanism: Allocator,
    round: Option<SimDuration>,
    /// Per job id: submission and last placement (compact, so that ranking thousands of
    /// queued jobs reads a few words per job rather than each job's spec).
    meta: Vec<JobMeta>,
    /// Per job id: what its estimate says (`None` = not seen yet).
    typed: Vec<Option<Typed>>,
    /// This call's ranking, taken only as far as the walk goes (at most a few hundred jobs
    /// fit however many are queued). Reused between calls.
    ranked: LazyRanking,
    /// Reused buffers: the walk's candidates, and per active index its plan entry.
    candidates: Vec<usize>,
    planned: Vec<u32>,
    /// Indices (into `view.active`) of the jobs holding an allocation, found while ranking.
    holding: Vec<usize>,
    opt: OptStats,
    /// Wall-clock limit for one OPT solve, seconds.
    opt_time_limit_s: f64,
    /// OPT's interned job classes: job id → class id (`u32::MAX` = not yet seen), and per
    /// class its GPU count and grid options (computed once per job, not every round).
    opt_class_of: Vec<u32>,
    opt_classes: Vec<(u32, Vec<Point>)>,
    opt_intern: std::collections::BTreeMap<ClassKey, u32>,
    /// Follow the reference simulator where it differs from our defaults
    /// ([`Policy::use_reference_semantics`]).
    reference: bool,
    /// The previous re-plan's time, µs (`u64::MAX` = none yet).
    last_replan: u64,
    /// The current call's time, µs.
    now: u64,
    /// The persistent ranking kept when the driver reports every change of the active set
    /// ([`Policy::track_jobs`]; reference semantics only).
    tracked: Option<Box<Tracked>>,
}

impl SynergyPolicy {
    /// `order` with `mechanism`, re-planning every `round` (or at every event if `None`).
    pub fn new(order: JobOrder, mechanism: Allocator, round: Option<SimDuration>) -> Self {
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
            meta: Vec::new(),
            typed: Vec::new(),
            ranked: LazyRanking::default(),
            candidates: Vec::new(),
            planned: Vec::new(),
            holding: Vec::new(),
            opt: OptStats::default(),
            opt_time_limit_s: 1.0,
            opt_class_of: Vec::new(),
            opt_classes: Vec::new(),
            opt_intern: std::collections::BTreeMap::new(),
            reference: false,
            last_replan: u64::MAX,
            now: 0,
            tracked: None,
        }
    }

    /// Switches to the reference simulator's behaviour (what the reference engine asks for
    /// through [`Policy::use_reference_semantics`]): SRTF/FTF rank a job that TUNE switched to
    /// its proportional share in the previous round at speed-up 1, TUNE demotes peers in the
    /// reference's order and by its rule, and every placement takes GPUs one at a time in
    /// server order, each on the first server that still fits its slice.
    pub fn with_reference_semantics(mut self) -> Self {
        self.reference = true;
        self
    }

    /// Marks a job switched to its proportional share at this call (reference semantics).
    fn mark_fair(&mut self, job: JobId) {
        if let Some(m) = self.meta.get_mut(job.index()) {
            m.fair_at = self.now;
        }
        if let Some(t) = self.tracked.as_mut() {
            t.fair_last.push(job);
        }
    }

    /// Statistics of OPT's solves so far.
    pub fn opt_stats(&self) -> &OptStats {
        &self.opt
    }

    /// Records what the policy keeps of a job the first time it sees it; true if it did.
    fn see(&mut self, view: &ClusterView<'_>, job: &ActiveJob, spec: &TrainingJob) -> bool {
        let id = job.id.index();
        if self.meta.len() <= id {
            self.meta.resize(id + 1, JobMeta::UNSEEN);
        }
        if self.meta[id].submit != u64::MAX {
            return false;
        }
        let m = &mut self.meta[id];
        m.submit = spec.submit.as_micros();
        m.iterations = spec.iterations;
        m.gpus = spec.gpus;
        let typed = Typed::of(view.cluster, job);
        m.speedup = typed.speedup;
        if self.typed.len() <= id {
            self.typed.resize(id + 1, None);
        }
        self.typed[id] = Some(typed);
        if self.reference {
            // The model's own iteration time, so that remaining times equal the
            // reference's products bit for bit (ties between models are common).
            m.iter_s = SynergyProfiles::builtin()
                .iter_time(&spec.model)
                .filter(|t| *t > 0.0)
                .unwrap_or_else(|| spec.duration.as_secs_f64() / spec.iterations.max(1) as f64);
        }
        if let Some(t) = self.tracked.as_mut() {
            t.deadlines.push(Reverse((
                m.submit.saturating_add(STARVATION.as_micros()),
                job.id.0,
            )));
        }
        true
    }

    /// A seen job's rank at this call (its index in `view.active` is `idx`).
    fn rank_of(&self, view: &ClusterView<'_>, job: &ActiveJob, idx: usize) -> Ranked {
        let meta = self.meta[job.id.index()];
        // The reference divides by the speed-up the job had at the end of the previous
        // round: 1 if TUNE switched it to its proportional share then.
        let fair_last_round =
            self.reference && self.last_replan != u64::MAX && meta.fair_at == self.last_replan;
        let remaining = || {
            let rank_speedup = if fair_last_round {
                1.0
            } else {
                match self.mechanism {
                    Allocator::Proportional => 1.0,
                    _ => meta.speedup,
                }
            };
            if self.reference {
                meta.iter_s * job.remaining_iters / rank_speedup
            } else {
                job.remaining_secs_estimate() / rank_speedup
            }
        };
        let key = match self.order {
            JobOrder::Fifo => 0.0,
            JobOrder::Srtf => remaining(),
            JobOrder::Las => job.attained_gpu_secs,
            JobOrder::Ftf => {
                let ideal = if job.throughput_estimate > 0.0 {
                    meta.iterations as f64 / job.throughput_estimate
                } else {
                    f64::INFINITY
                };
                let in_system = view
                    .now
                    .saturating_since(SimTime::from_micros(meta.submit))
                    .as_secs_f64();
                -((in_system + remaining()) / ideal.max(1e-9))
            }
        };
        // FIFO ignores the guard, as the reference does (it sorts by arrival only).
        let starved = !matches!(self.order, JobOrder::Fifo) && meta.starved;
        Ranked::new(starved, key, meta.submit, job.id.0, meta.gpus, idx)
    }

    /// When the starvation guard last saw `meta` run, µs: a job last placed at t ran until
    /// its lease ended at t + round (the reference stamps "last executed" at the lease end).
    fn last_ran(&self, meta: &JobMeta) -> u64 {
        if meta.last_run == u64::MAX {
            meta.submit
        } else {
            meta.last_run
                .saturating_add(self.round.map_or(0, |r| r.as_micros()))
        }
    }

    /// Ranks the active jobs (only the queued ones unless re-planning). When re-planning,
    /// the same pass releases every held allocation on `ledger` and records the holders in
    /// `self.holding` (view order), so that no other pass over all jobs is needed.
    fn rank(&mut self, view: &ClusterView<'_>, replan: Option<&mut FreeMap<'_>>) {
        let mut ranked = std::mem::take(&mut self.ranked);
        ranked.clear();
        self.holding.clear();
        let only_queued = replan.is_none();
        let mut ledger = replan;
        let now = view.now.as_micros();
        for (idx, job) in view.active.iter().enumerate() {
            if let (Some(l), Some(a)) = (ledger.as_deref_mut(), &job.allocation) {
                l.release(a);
                self.holding.push(idx);
            }
            if only_queued && job.state != JobState::Queued {
                continue;
            }
            let Some(spec) = view.spec(job) else { continue };
            self.see(view, job, spec);
            ranked.items.push(self.rank_of(view, job, idx));
            // The guard, as the reference applies it: checked after ranking (so it takes
            // effect from the next ranking), and once set never cleared.
            let id = job.id.index();
            if !self.meta[id].starved
                && now.saturating_sub(self.last_ran(&self.meta[id])) > STARVATION.as_micros()
            {
                self.meta[id].starved = true;
                if let Some(t) = self.tracked.as_mut() {
                    t.dirty.push(job.id);
                }
            }
        }
        self.ranked = ranked;
    }

    /// The tracked counterpart of [`Self::rank`] at a re-plan: re-keys only the jobs whose
    /// rank may have changed since the last call (they arrived, ran, were switched to or
    /// back from fair share, or starved), then applies the starvation guard through its
    /// deadlines. Returns false if the driver's view does not match what it reported (the
    /// caller then ranks in full).
    fn rank_tracked(&mut self, view: &ClusterView<'_>) -> bool {
        let Some(mut t) = self.tracked.take() else {
            return false;
        };
        t.call += 1;
        // Switched to fair share at the last call (ranked at speed-up 1 now) or at the one
        // before (back to their speed-up now).
        let mut dirty = std::mem::take(&mut t.dirty);
        dirty.append(&mut t.fair_before);
        dirty.extend_from_slice(&t.fair_last);
        std::mem::swap(&mut t.fair_before, &mut t.fair_last);
        t.fresh.clear();
        let mut ok = true;
        for &id in &dirty {
            let i = id.index();
            if t.stamp.len() <= i {
                t.stamp.resize(i + 1, 0);
            }
            if t.stamp[i] == t.call {
                continue;
            }
            t.stamp[i] = t.call;
            let Some(idx) = t.find(view, id) else {
                if t.pos.get(i).is_some_and(|&p| p != u32::MAX) {
                    ok = false; // reported active, not in the view
                }
                continue;
            };
            let job = &view.active[idx];
            let Some(spec) = view.spec(job) else { continue };
            if self.see(view, job, spec) {
                let submit = self.meta[i].submit;
                t.deadlines.push(Reverse((
                    submit.saturating_add(STARVATION.as_micros()),
                    id.0,
                )));
            }
            let r = self.rank_of(view, job, idx);
            if t.ver.len() <= i {
                t.ver.resize(i + 1, 0);
            }
            t.ver[i] = t.ver[i].wrapping_add(1);
            t.fresh.push(Entry {
                hi: r.hi,
                lo: r.lo,
                gpus: r.gpus,
                ver: t.ver[i],
            });
        }
        dirty.clear();
        t.dirty = dirty;
        if !ok || view.active.len() != t.order.len() {
            t.reset();
            self.tracked = Some(t);
            return false;
        }
        t.rebuild();
        // The guard: a job whose deadline (last run + 1,000 h) passed before now starves
        // from the next call on. Checked after ranking, before this call's placements.
        let now = view.now.as_micros();
        while let Some(&Reverse((d, id))) = t.deadlines.peek() {
            if d >= now {
                break;
            }
            t.deadlines.pop();
            let i = id as usize;
            if t.pos.get(i).is_none_or(|&p| p == u32::MAX) || self.meta[i].starved {
                continue; // ended, or already starved
            }
            let last = self.last_ran(&self.meta[i]);
            if now.saturating_sub(last) > STARVATION.as_micros() {
                self.meta[i].starved = true;
                t.dirty.push(JobId(id));
            } else {
                t.deadlines
                    .push(Reverse((last.saturating_add(STARVATION.as_micros()), id)));
            }
        }
        t.start_walk();
        self.tracked = Some(t);
        true
    }

    /// The next job of this call's ranking, best first (`hint`: how many more the walk
    /// expects to take).
    fn pop_ranked(&mut self, view: &ClusterView<'_>, hint: usize) -> Option<Ranked> {
        match self.tracked.as_mut() {
            Some(t) if t.walking => t.pop(view),
            _ => self.ranked.pop(hint),
        }
    }

    /// What the job's estimate says, as taken when the ranking first saw it.
    fn typed(&self, cluster: &Cluster, job: &ActiveJob) -> Typed {
        typed_of(&self.typed, cluster, job)
    }

    /// Keeps a running job where it is if its current allocation is exactly `slice`.
    fn keep_if_same<'v>(
        ledger: &mut FreeMap<'_>,
        spec: &TrainingJob,
        job: &'v ActiveJob,
        slice: Slice,
    ) -> Option<Cow<'v, Allocation>> {
        let a = job.allocation.as_ref()?;
        let same = a.gpus() == spec.gpus
            && a.shares
                .iter()
                .all(|s| s.same_holding(&ledger.share(spec, s.node, s.gpus, slice)));
        (same && ledger.reserve(a)).then_some(Cow::Borrowed(a))
    }

    fn try_slice<'v>(
        ledger: &mut FreeMap<'_>,
        spec: &TrainingJob,
        job: &'v ActiveJob,
        slice: Slice,
    ) -> Option<Cow<'v, Allocation>> {
        Self::keep_if_same(ledger, spec, job, slice)
            .or_else(|| ledger.place(spec, slice).map(Cow::Owned))
    }

    /// Allocates one job with the mechanism (OPT outside a round boundary behaves as TUNE
    /// without demotion). Pushes onto `plan` on success.
    fn allocate<'v>(
        &mut self,
        view: &ClusterView<'v>,
        ledger: &mut FreeMap<'_>,
        plan: &mut Vec<Placed<'v>>,
        idx: usize,
        demote: bool,
    ) {
        let job = &view.active[idx];
        let Some(spec) = view.spec(job) else { return };
        let alloc = match self.mechanism {
            Allocator::Proportional => Self::try_slice(ledger, spec, job, Slice::Fair),
            Allocator::Greedy => {
                let best = self.typed(view.cluster, job).best;
                Self::try_slice(ledger, spec, job, best).or_else(|| {
                    // A best case no node of the job's types could ever give (more CPUs per
                    // GPU than the server has) would skip the job at every round for ever:
                    // such a job takes its proportional share instead.
                    (!slice_ever_fits(view.cluster, spec, best))
                        .then(|| Self::try_slice(ledger, spec, job, Slice::Fair))
                        .flatten()
                })
            }
            Allocator::Tune | Allocator::Opt => {
                let Typed { best, fair, .. } = self.typed(view.cluster, job);
                let placed = Self::try_slice(ledger, spec, job, best);
                if placed.is_none() && fair != best && self.reference {
                    // The reference's "make fair share" resets the job's speed-up to 1.
                    self.mark_fair(job.id);
                }
                placed
                    .or_else(|| Self::try_slice(ledger, spec, job, fair))
                    .or_else(|| {
                        if demote && self.mechanism == Allocator::Tune {
                            if self.reference {
                                for peer in demote_peers_reference(
                                    view,
                                    &self.typed,
                                    ledger,
                                    plan,
                                    spec,
                                    fair,
                                ) {
                                    self.mark_fair(peer);
                                }
                            } else {
                                demote_peers(view, ledger, plan, spec);
                            }
                            ledger.place(spec, fair).map(Cow::Owned)
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

    fn plan<'v>(&mut self, view: &ClusterView<'v>, replan: bool) -> (Vec<Placed<'v>>, FreeMap<'v>) {
        let mut ledger = FreeMap::new(view.cluster, view.free);
        ledger.reference_spread = self.reference;
        if !replan && ledger.free_gpus() == 0 {
            return (Vec::new(), ledger); // nothing can start: no need to rank anyone
        }
        // Every placed job holds a GPU: size the plan once instead of growing it.
        let can_place = if replan {
            view.cluster.total_gpus()
        } else {
            ledger.free_gpus()
        };
        let mut plan: Vec<Placed<'v>> =
            Vec::with_capacity(view.active.len().min(can_place as usize));
        let tracked = replan && self.rank_tracked(view);
        if !tracked {
            if let Some(t) = self.tracked.as_mut() {
                t.walking = false;
            }
            self.rank(view, replan.then_some(&mut ledger));
        } else {
            self.holding.clear();
        }
        let gpus_of = |idx: usize| view.spec(&view.active[idx]).map_or(0, |s| s.gpus as u64);
        // The reference's LAS and every OPT take the prefix of ranked jobs whose GPUs fit;
        // FIFO/SRTF/FTF walk the whole list (backfill). Either way the walk pops the ranking
        // only as far as it goes.
        let prefix = replan && (self.order == JobOrder::Las || self.mechanism == Allocator::Opt);
        if !prefix {
            while ledger.free_gpus() > 0 {
                // every job needs at least one GPU
                let hint = ledger.free_gpus() as usize;
                let Some(r) = self.pop_ranked(view, hint) else {
                    break;
                };
                let g = r.gpus as u64;
                if g == 0 || g > ledger.free_gpus() {
                    continue;
                }
                self.allocate(view, &mut ledger, &mut plan, r.idx, true);
            }
            return (plan, ledger);
        }
        let mut chosen = std::mem::take(&mut self.candidates);
        chosen.clear();
        // Budgeted per GPU model, as the baselines' re-plan is (a job stays within one node
        // group; issue 38): on one model, the free GPU count as the reference has it, and the
        // walk reads no spec.
        let mut budget = TypeBudget::of_free(view.cluster, ledger.free());
        let typed = !budget.single();
        while budget.most() > 0 {
            let Some(r) = self.pop_ranked(view, budget.most() as usize) else {
                break;
            };
            let fits = r.gpus > 0
                && if typed {
                    let job = &view.active[r.idx];
                    view.spec(job)
                        .is_some_and(|spec| budget.take(view.cluster, job, spec))
                } else {
                    budget.take_queued(&[], r.gpus)
                };
            if fits {
                chosen.push(r.idx);
            }
        }
        if self.order == JobOrder::Las && self.mechanism == Allocator::Tune {
            // The reference allocates LAS's round largest-first under TUNE (stable).
            chosen.sort_by_key(|&i| {
                std::cmp::Reverse(view.spec(&view.active[i]).map_or(0, |s| s.gpus))
            });
        }
        if self.mechanism == Allocator::Opt {
            self.plan_opt(view, &mut ledger, &mut plan, &chosen);
        } else {
            for &idx in &chosen {
                if ledger.free_gpus() == 0 {
                    break;
                }
                let g = gpus_of(idx);
                if g == 0 || g > ledger.free_gpus() {
                    continue;
                }
                self.allocate(view, &mut ledger, &mut plan, idx, true);
            }
        }
        self.candidates = chosen;
        (plan, ledger)
    }

    fn plan_opt<'v>(
        &mut self,
        view: &ClusterView<'v>,
        ledger: &mut FreeMap<'_>,
        plan: &mut Vec<Placed<'v>>,
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
                let opts = job_options(
                    job.knowledge.get::<SensitivityEstimate>(),
                    fair_cpu,
                    fair_mem,
                );
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
                    estimate: view.active[i].knowledge.get::<SensitivityEstimate>(),
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
        plan: Vec<Placed<'_>>,
        replan: bool,
        actions: &mut Vec<Action>,
    ) {
        // Per active index: its plan entry (`u32::MAX` = not planned); restarted entries are
        // marked by setting the top bit. Reset below, so the buffer stays all-MAX between calls.
        const NONE: u32 = u32::MAX;
        const RESTART: u32 = 1 << 31;
        let mut planned = std::mem::take(&mut self.planned);
        if planned.len() < view.active.len() {
            planned.resize(view.active.len(), NONE);
        }
        for (k, p) in plan.iter().enumerate() {
            planned[p.idx] = k as u32;
        }
        if replan {
            for &i in &self.holding {
                let j = &view.active[i];
                if let Some(cur) = &j.allocation {
                    let same =
                        planned[i] != NONE && plan[planned[i] as usize].alloc.same_holding(cur);
                    if !same {
                        actions.push(Action::Preempt { job: j.id });
                        if planned[i] != NONE {
                            planned[i] |= RESTART;
                        }
                    }
                }
            }
        }
        let now = view.now.as_micros();
        for p in plan {
            let j = &view.active[p.idx];
            let restart = planned[p.idx] & RESTART != 0;
            planned[p.idx] = NONE;
            let id = j.id.index();
            if self.meta.len() <= id {
                self.meta.resize(id + 1, JobMeta::UNSEEN);
            }
            self.meta[id].last_run = now;
            if j.state == JobState::Queued || restart {
                actions.push(Action::Start {
                    job: j.id,
                    allocation: p.alloc.into_owned(),
                });
            }
        }
        self.planned = planned;
    }
}

fn free_totals(free: &[Resources]) -> (u64, u64, u64) {
    free.iter().fold((0, 0, 0), |(g, c, m), f| {
        (g + f.gpus as u64, c + f.cpu.0, m + f.memory.0)
    })
}

/// Whether `job`'s best case exceeds the proportional share of `cluster`'s servers in CPU or
/// memory (the reference's "must switch" when it makes a job fair-share).
/// What `job`'s estimate says, from the policy's per-job record when it has one.
/// Whether some node group of the job's GPU types, empty, could give it `slice` on every
/// GPU it asks for (its GPUs spread over the group's nodes as CPU and memory allow).
fn slice_ever_fits(cluster: &Cluster, spec: &TrainingJob, slice: Slice) -> bool {
    let Slice::PerGpu { cpu, memory } = slice else {
        return true;
    };
    cluster
        .groups
        .iter()
        .filter(|g| spec.gpu_types.is_empty() || spec.gpu_types.contains(&g.gpu))
        .any(|g| {
            let per_node = (1..=g.gpus_per_node.min(spec.gpus))
                .rev()
                .find(|&k| {
                    cpu.0.saturating_mul(u64::from(k)) <= g.cpu.0
                        && memory.0.saturating_mul(u64::from(k)) <= g.memory.0
                })
                .unwrap_or(0);
            u64::from(per_node) * u64::from(g.count) >= u64::from(spec.gpus)
        })
}

fn typed_of(typed: &[Option<Typed>], cluster: &Cluster, job: &ActiveJob) -> Typed {
    match typed.get(job.id.index()) {
        Some(Some(t)) => *t,
        // Not ranked yet (cannot happen through `plan`): read the estimate directly.
        _ => Typed::of(cluster, job),
    }
}

fn exceeds_fair_estimate(cluster: &Cluster, e: &SensitivityEstimate) -> bool {
    let Some(g) = cluster.groups.first() else {
        return false;
    };
    let per = g.gpus_per_node.max(1) as f64;
    let (fc, fm) = (g.cpu.as_cores() / per, g.memory.as_gib() / per);
    e.best_cpu_per_gpu > fc * (1.0 + 1e-6) || e.best_mem_per_gpu > fm * (1.0 + 1e-6)
}

/// The servers TUNE demotes peers on, as the reference picks them: a multi-GPU job's first
/// server (by id) with enough free GPUs; otherwise the fullest servers with free GPUs until
/// the count is met. (server, GPUs of the job there).
fn demotion_targets(free: &[Resources], g: u32) -> Vec<(usize, u32)> {
    let mut targets: Vec<(usize, u32)> = Vec::new();
    if g > 1 {
        if let Some(n) = free.iter().position(|f| f.gpus >= g) {
            targets.push((n, g));
            return targets;
        }
    }
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
    targets
}

/// Moves a placed peer back to its proportional share on every server it spans; where that
/// no longer fits (it asked for less of a resource than the share), it keeps the smaller
/// amount. Returns false (and changes nothing) if even that cannot be reserved.
fn demote_to_fair(ledger: &mut FreeMap<'_>, p: &mut Placed<'_>, pspec: &TrainingJob) -> bool {
    let old = p.alloc.clone().into_owned();
    ledger.release(&old);
    let to_fair = |l: &FreeMap<'_>, keep_less: bool| Allocation {
        plan: None,
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
            let kept = ledger.reserve(&old);
            debug_assert!(kept);
            return false;
        }
        lower
    };
    p.alloc = Cow::Owned(new);
    p.demoted = true;
    true
}

/// TUNE step 3 under the reference semantics, as the reference's `_reallocate_peer` does it:
/// per target server, the shortfall of `spec`'s `slice` there (CPU, memory); peers placed
/// this round on that server, fewest servers spanned first, then most CPU per GPU, then most
/// memory per GPU (placement order on ties); each in turn is demoted (to the proportional
/// share if its best case exceeds it, else left as it is) and its excess over the share there
/// taken off the shortfall, until none is left. Unlike our default rule a peer is demoted even
/// if its excess is of a resource not short (the reference never skips one). Returns the ids
/// of the peers switched to their proportional share.
fn demote_peers_reference(
    view: &ClusterView<'_>,
    typed: &[Option<Typed>],
    ledger: &mut FreeMap<'_>,
    plan: &mut [Placed<'_>],
    spec: &TrainingJob,
    slice: Slice,
) -> Vec<JobId> {
    let mut switched = Vec::new();
    let targets = demotion_targets(ledger.free(), spec.gpus);
    for (n, k) in targets {
        let node = NodeId(n as u32);
        let want = ledger.share(spec, node, k, slice);
        let f = ledger.free()[n];
        let mut need_cpu = want.cpu.0.saturating_sub(f.cpu.0);
        let mut need_mem = want.memory.0.saturating_sub(f.memory.0);
        if need_cpu == 0 && need_mem == 0 {
            continue;
        }
        let mut peers: Vec<(usize, usize, u64, u64)> = plan
            .iter()
            .enumerate()
            .filter(|(_, p)| p.alloc.shares.iter().any(|s| s.node == node))
            .map(|(pi, p)| {
                let gp = p.alloc.gpus().max(1) as u64;
                (
                    pi,
                    p.alloc.shares.len(),
                    p.alloc.cpu().0 / gp,
                    p.alloc.memory().0 / gp,
                )
            })
            .collect();
        // Stable: placement order on ties.
        peers.sort_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)).then(b.3.cmp(&a.3)));
        for (pi, ..) in peers {
            let job = &view.active[plan[pi].idx];
            let Some(pspec) = view.spec(job) else {
                continue;
            };
            let Some(here) = plan[pi]
                .alloc
                .shares
                .iter()
                .find(|s| s.node == node)
                .copied()
            else {
                continue;
            };
            let fair = ledger.share(pspec, node, here.gpus, Slice::Fair);
            let excess_cpu = here.cpu.0.saturating_sub(fair.cpu.0);
            let excess_mem = here.memory.0.saturating_sub(fair.memory.0);
            if typed_of(typed, view.cluster, job).exceeds_fair
                && demote_to_fair(ledger, &mut plan[pi], pspec)
            {
                switched.push(job.id);
            }
            need_cpu = need_cpu.saturating_sub(excess_cpu);
            need_mem = need_mem.saturating_sub(excess_mem);
            if need_cpu == 0 && need_mem == 0 {
                break;
            }
        }
    }
    switched
}

/// TUNE step 3: on servers with free GPUs, demote jobs placed this round that hold more than
/// their proportional share until `spec`'s proportional share would fit there.
fn demote_peers(
    view: &ClusterView<'_>,
    ledger: &mut FreeMap<'_>,
    plan: &mut [Placed<'_>],
    spec: &TrainingJob,
) {
    let targets = demotion_targets(ledger.free(), spec.gpus);
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
            if !demote_to_fair(ledger, &mut plan[pi], pspec) {
                continue;
            }
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

    /// Synergy gives whole GPUs with CPU and memory by the job's sensitivity (at least the
    /// GPU-proportional share it is judged by here), at its rounds.
    fn pending_reason(
        &self,
        view: &ClusterView<'_>,
        job: &TrainingJob,
        detail: tessera_sched::Detail,
    ) -> Option<tessera_sched::Waiting> {
        use tessera_sched::{WaitKind, Waiting};
        let kind = tessera_sched::reasons::classify_whole(view, job);
        let round = self.round;
        Some(Waiting::new(kind).note(detail, move || {
            match (kind, round) {
                (WaitKind::CpuMemory, _) => {
                    "Synergy finds its GPUs free but not the CPU and memory its sensitivity asks"
                        .to_string()
                }
                (WaitKind::Order, Some(r)) => {
                    format!("Synergy allocates at its rounds (every {r})")
                }
                (WaitKind::Order, None) => "behind jobs Synergy ranks first".to_string(),
                _ => "Synergy finds too few free GPUs of its types".to_string(),
            }
        }))
    }

    fn round_length(&self) -> Option<SimDuration> {
        self.round
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let replan = self.round.is_none() || view.trigger.round;
        self.now = view.now.as_micros();
        let (plan, _) = self.plan(view, replan);
        self.emit(view, plan, replan, actions);
        if replan {
            self.last_replan = self.now;
        }
    }

    fn use_reference_semantics(&mut self) {
        self.reference = true;
    }

    /// Under the reference semantics every round re-plans from scratch, yet few jobs change
    /// rank between rounds (300 s leases): told every change, the policy keeps its ranking
    /// and re-keys only those. FTF's key moves with time for every job: it ranks in full.
    fn track_jobs(&mut self) -> bool {
        let track = self.reference && self.order != JobOrder::Ftf;
        self.tracked = track.then(Box::default);
        track
    }

    /// Per job id: what it saw of the job (`meta`, `typed`) and its OPT class, plus the
    /// tracked ranking; the rest is this call's scratch or per class.
    fn renumber_jobs(&mut self, map: &[Option<JobId>]) -> bool {
        self.meta = renumber_vec(std::mem::take(&mut self.meta), map, JobMeta::UNSEEN);
        self.typed = renumber_vec(std::mem::take(&mut self.typed), map, None);
        self.opt_class_of = renumber_vec(std::mem::take(&mut self.opt_class_of), map, u32::MAX);
        if let Some(t) = self.tracked.as_mut() {
            t.renumber(map);
        }
        self.ranked.clear();
        self.holding.clear();
        true
    }

    fn observe(&mut self, change: JobChange<'_>) {
        let Some(t) = self.tracked.as_mut() else {
            return;
        };
        match change {
            JobChange::Arrived(job, _) => {
                t.arrive(job.id);
                t.dirty.push(job.id);
            }
            JobChange::Preempted(job, _) => t.dirty.push(job.id),
            JobChange::Started(..) | JobChange::Progress(..) => {}
            JobChange::Ended(id) => t.end(id),
        }
    }

    fn stats(&self) -> Vec<(String, f64)> {
        if self.mechanism != Allocator::Opt {
            return Vec::new();
        }
        self.opt.as_pairs()
    }
}

/// Estimated throughput (relative to proportional) of `job` under `alloc`: what the policy
/// believes; for tests and reports.
pub fn estimated_relative(job: &ActiveJob, alloc: &Allocation) -> f64 {
    let g = alloc.gpus();
    match (job.knowledge.get::<SensitivityEstimate>(), g) {
        (_, 0) => 0.0,
        (None, _) => 1.0,
        (Some(e), g) => e.relative(
            alloc.cpu().as_cores() / g as f64,
            alloc.memory().as_gib() / g as f64,
        ),
    }
}

/// Convenience for tests: an estimate from a true table.
pub fn exact_estimate(model: &str, gpus: u32) -> tessera_model::Knowledge {
    match super::perf::SynergyProfiles::builtin().for_gpus(model, gpus) {
        Some(p) => tessera_model::Knowledge::of(SensitivityEstimate::from_table(p.table.clone())),
        None => tessera_model::Knowledge::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The reference's first fit starts at the first server with a free GPU: that
        /// cursor never passes one, whatever jobs are placed and released, so a placement
        /// is the one a scan from server 0 finds.
        #[test]
        fn first_fit_cursor_never_skips_a_free_gpu(
            ops in proptest::collection::vec((1u32..=8, 0u8..3, any::<bool>()), 1..60)
        ) {
            let cluster = super::super::experiment::reference_cluster(4);
            let mut map = FreeMap::new(&cluster, tessera_sched::ClusterState::new(&cluster).free());
            map.reference_spread = true;
            let mut held: Vec<Allocation> = Vec::new();
            for (i, (gpus, slice, release)) in ops.into_iter().enumerate() {
                if release && !held.is_empty() {
                    let a = held.remove(i % held.len());
                    map.release(&a);
                } else {
                    let job = TrainingJob::simple(i as u32, SimTime::ZERO, gpus, SimDuration::from_secs(60));
                    let slice = match slice {
                        0 => Slice::Fair,
                        1 => Slice::from_cores_gb(2.0, 40.0),
                        _ => Slice::from_cores_gb(6.0, 100.0),
                    };
                    let mut scan = map.clone();
                    scan.first_with_gpus = 0;
                    let expected = scan.find(&job, slice);
                    let placed = map.place(&job, slice);
                    prop_assert_eq!(&placed, &expected);
                    held.extend(placed);
                }
                prop_assert!(map.free()[..map.first_with_gpus.min(map.free().len())]
                    .iter()
                    .all(|f| f.gpus == 0));
            }
        }
    }

    fn ranked() -> impl Strategy<Value = Ranked> {
        (
            any::<bool>(),
            prop::sample::select(vec![0.0, -1.5, 2.0, 7.25, f64::INFINITY, -0.0]),
            0u64..5,
            0u32..1_000,
        )
            .prop_map(|(starved, key, submit, id)| Ranked::new(starved, key, submit, id, 1, 0))
    }

    /// The rank's meaning, field by field.
    fn fieldwise(a: (bool, f64, u64, u32), b: (bool, f64, u64, u32)) -> std::cmp::Ordering {
        b.0.cmp(&a.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    }

    fn any_key() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>(),
            prop::sample::select(vec![
                0.0,
                -0.0,
                1.0,
                -1.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::MIN_POSITIVE,
                f64::MAX,
                f64::MIN,
                f64::NAN,
                -f64::NAN,
            ]),
        ]
    }

    proptest! {
        /// The packed rank orders exactly as starved first, then `total_cmp` on the key,
        /// submission and id (any key, NaNs and signed zeros included).
        #[test]
        fn packed_rank_orders_as_its_fields(
            a in (any::<bool>(), any_key(), any::<u64>(), any::<u32>()),
            b in (any::<bool>(), any_key(), any::<u64>(), any::<u32>()),
        ) {
            let ra = Ranked::new(a.0, a.1, a.2, a.3, 1, 0);
            let rb = Ranked::new(b.0, b.1, b.2, b.3, 1, 0);
            prop_assert_eq!(ra.rank_cmp(&rb), fieldwise(a, b));
            prop_assert_eq!(ra.rank_cmp(&ra), std::cmp::Ordering::Equal);
        }

        /// The lazy ranking hands out exactly the fully sorted order, whatever the hints
        /// (chunk sizes) of the successive pops.
        #[test]
        fn lazy_ranking_is_the_sorted_order(
            items in prop::collection::vec(ranked(), 0..300),
            hints in prop::collection::vec(0usize..200, 1..20),
        ) {
            // Ids are unique among active jobs: make them so, and remember each item's place.
            let mut items = items;
            for (i, r) in items.iter_mut().enumerate() {
                r.lo = (r.lo & !0xffff_ffff) | i as u128;
                r.idx = i;
            }
            let mut sorted = items.clone();
            sorted.sort_by(Ranked::rank_cmp);
            let mut lazy = LazyRanking { items, ..LazyRanking::default() };
            let mut got = Vec::new();
            let mut k = 0;
            while let Some(r) = lazy.pop(hints[k % hints.len()]) {
                got.push(r.idx);
                k += 1;
            }
            let want: Vec<usize> = sorted.iter().map(|r| r.idx).collect();
            prop_assert_eq!(got, want);
            // Cleared, it is empty again.
            lazy.clear();
            prop_assert!(lazy.pop(5).is_none());
        }
    }
}
