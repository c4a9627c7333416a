//! The Crius scheduler (DESIGN §5.2), its ablations, and a type-honouring FCFS baseline.
//!
//! Every 300 s round (nothing happens between rounds; departures have already released
//! their GPUs when the round starts):
//! 1. Queued jobs in FIFO order (jobs stopped earlier are queued too, so they restart in
//!    arrival order). A job first tries its request (first listed GPU type, requested
//!    count); if that does not fit, any other cell that fits now, on any allowed type, with
//!    at most the requested count (or the smallest count the model fits on that type) and at
//!    least half the request's estimated throughput, best normalised throughput first.
//!    Placements are packed (one node, or whole free nodes), the cell the estimates are for.
//! 2. If nothing fits, a bounded search over *shrink* (halve a running job's GPUs, never
//!    below half its request) and *type change* (move a running job to another type's free GPUs) steps, depth 3 (2 when more
//!    than 150 jobs run), over the six cheapest steps per target cell, for the job's three
//!    best cells; the combination with the largest total gain in normalised throughput
//!    wins, if positive. The search runs for at most [`SEARCH_BUDGET`] queued jobs a round.
//! 3. If still nothing, the job waits and later jobs may run (opportunistic runs); without
//!    opportunism the queue blocks at that job.
//! 4. Upgrades: a running job may double its GPUs (up to 16) or move to another type when
//!    free GPUs allow and its estimated throughput rises by at least [`UPGRADE_MIN_GAIN`]
//!    and the time saved exceeds twice its re-tuning cost.
//!
//! Throughputs come from the job's [`CriusCells`] (proxy view; DP-only for `crius-dp-only`)
//! and are normalised by the job's best configuration, so jobs of different models add up.
//! Jobs without cells (job types of a throughput matrix such as Gavel's) use the profiler's
//! `ConfigEstimates`: each (type, count) is a cell with the matrix throughput. A job that
//! names no GPU type requests the type estimated fastest at its requested count.
//! Every allocation carries the plan of its cell. A job's GPUs are always of one type.
//!
//! `fcfs` is the baseline: FIFO over the same rounds and placement, each job on exactly its
//! requested type and count, with no plan (the runtime's full search picks it, for whatever
//! nodes the job lands on: it may spread over partly free nodes).

use tessera_model::{Allocation, Bytes, Cluster, GpuModelId, MilliCpu, NodeShare, SimDuration};
use tessera_perf::ConfigEstimates;
use tessera_sched::{Action, ActiveJob, ClusterView, JobState, Ledger, Policy};

use super::perf::CriusCells;

/// Crius's round.
pub const ROUND: SimDuration = SimDuration::from_secs(300);
/// Queued jobs per round that may run the shrink/type-change search.
pub const SEARCH_BUDGET: usize = 16;
/// Smallest relative throughput gain that justifies an upgrade (a restart).
pub const UPGRADE_MIN_GAIN: f64 = 0.10;
/// An alternative to the request must reach this fraction of the request's estimated
/// throughput: a long job started far below what it asked for would crawl for days.
pub const MIN_ALTERNATIVE_FRACTION: f64 = 0.5;
/// Upgrades per round at most.
pub const UPGRADES_PER_ROUND: usize = 64;
/// Re-tuning a Crius cell: seconds per GPU, and the cap.
pub const RETUNE_PER_GPU_S: f64 = 10.0;
/// Cap of [`RETUNE_PER_GPU_S`].
pub const RETUNE_MAX_S: f64 = 40.0;
/// A full plan search (what the baselines pay): seconds per GPU, and the cap.
pub const SEARCH_PER_GPU_S: f64 = 150.0;
/// Cap of [`SEARCH_PER_GPU_S`].
pub const SEARCH_MAX_S: f64 = 600.0;
/// Search steps considered per target cell.
const STEPS_CONSIDERED: usize = 6;

/// Which parts of Crius are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CriusOptions {
    /// Shrink steps in the search.
    pub shrink: bool,
    /// Type-change steps, and cells on other types than the requested one.
    pub type_change: bool,
    /// Later jobs may run when an earlier one cannot.
    pub opportunistic: bool,
    /// Use the DP-only view instead of the proxy.
    pub dp_only: bool,
    /// Upgrades.
    pub upgrades: bool,
}

impl CriusOptions {
    /// Everything on.
    pub const FULL: CriusOptions = CriusOptions {
        shrink: true,
        type_change: true,
        opportunistic: true,
        dp_only: false,
        upgrades: true,
    };
}

/// Free GPUs per type on top of a [`Ledger`].
struct Pool<'c> {
    cluster: &'c Cluster,
    ledger: Ledger<'c>,
    /// Distinct GPU types, and each node group's index into them.
    types: Vec<GpuModelId>,
    group_type: Vec<usize>,
    free: Vec<u64>,
}

impl<'c> Pool<'c> {
    fn new(cluster: &'c Cluster, free: &[tessera_model::Resources]) -> Pool<'c> {
        let mut types: Vec<GpuModelId> = Vec::new();
        let group_type = cluster
            .groups
            .iter()
            .map(|g| match types.iter().position(|t| *t == g.gpu) {
                Some(i) => i,
                None => {
                    types.push(g.gpu);
                    types.len() - 1
                }
            })
            .collect::<Vec<_>>();
        let ledger = Ledger::new(cluster, free);
        let mut pool = Pool {
            cluster,
            ledger,
            types,
            group_type,
            free: Vec::new(),
        };
        pool.recount();
        pool
    }

    fn recount(&mut self) {
        let mut free = vec![0u64; self.types.len()];
        for (n, f) in self.cluster.nodes.iter().zip(self.ledger.free()) {
            free[self.group_type[n.group as usize]] += f.gpus as u64;
        }
        self.free = free;
    }

    fn type_index(&self, gpu: GpuModelId) -> Option<usize> {
        self.types.iter().position(|t| *t == gpu)
    }

    fn type_of(&self, alloc: &Allocation) -> Option<usize> {
        let node = self.cluster.nodes.get(alloc.shares.first()?.node.index())?;
        Some(self.group_type[node.group as usize])
    }

    fn release(&mut self, alloc: &Allocation) {
        self.ledger.release(alloc);
        if let Some(t) = self.type_of(alloc) {
            self.free[t] += alloc.gpus() as u64;
        }
    }

    fn reserve(&mut self, alloc: &Allocation) -> bool {
        if !self.ledger.reserve(alloc) {
            return false;
        }
        if let Some(t) = self.type_of(alloc) {
            self.free[t] = self.free[t].saturating_sub(alloc.gpus() as u64);
        }
        true
    }

    /// A placement of `count` GPUs of type `ty`, reserved: one node (the fullest that fits)
    /// when the count fits a node, else whole free nodes, then (unless `packed`) the
    /// emptiest partly free ones. Crius asks for packed placements only: its estimates and
    /// plans are for the packed cell, and a plan with tensor groups split across the network
    /// would crawl.
    fn place_with(&mut self, ty: usize, count: u32, packed: bool) -> Option<Allocation> {
        if count == 0 || self.free.get(ty).copied().unwrap_or(0) < count as u64 {
            return None;
        }
        let mut single: Option<(u32, usize)> = None;
        let mut nodes: Vec<(u32, usize)> = Vec::new();
        for (gi, g) in self.cluster.groups.iter().enumerate() {
            if self.group_type[gi] != ty {
                continue;
            }
            for n in g.first_node as usize..(g.first_node + g.count) as usize {
                let f = self.ledger.free()[n].gpus;
                if f == 0 {
                    continue;
                }
                if f >= count && single.is_none_or(|(sf, _)| f < sf) {
                    single = Some((f, n));
                }
                nodes.push((f, n));
            }
        }
        let share = |n: usize, k: u32| -> NodeShare {
            let node = &self.cluster.nodes[n];
            let g = &self.cluster.groups[node.group as usize];
            let per = g.gpus_per_node.max(1) as u64;
            NodeShare::whole(
                node.id,
                k,
                MilliCpu(g.cpu.0 * k as u64 / per),
                Bytes(g.memory.0 * k as u64 / per),
            )
        };
        let alloc = if let Some((_, n)) = single {
            Allocation::new(vec![share(n, count)])
        } else {
            nodes.sort_by_key(|&(f, n)| (std::cmp::Reverse(f), n));
            if packed {
                let per = self.cluster.groups[self.cluster.nodes[nodes.first()?.1].group as usize]
                    .gpus_per_node;
                if count < per {
                    return None;
                }
                nodes.retain(|&(f, _)| f == per);
            }
            let mut left = count;
            let mut shares = Vec::new();
            for (f, n) in nodes {
                if left == 0 {
                    break;
                }
                let k = f.min(left);
                shares.push(share(n, k));
                left -= k;
            }
            if left > 0 {
                return None;
            }
            Allocation::new(shares)
        };
        self.reserve(&alloc).then_some(alloc)
    }

    /// A packed placement (Crius).
    fn place(&mut self, ty: usize, count: u32) -> Option<Allocation> {
        self.place_with(ty, count, true)
    }
}

/// The first `count` GPUs of `alloc` (dropping shares from the end): a shrunk job keeps
/// its nodes, so it needs nothing new.
fn keep_first(alloc: &Allocation, count: u32) -> Allocation {
    let mut left = count;
    let mut shares = Vec::new();
    for s in &alloc.shares {
        if left == 0 {
            break;
        }
        let k = s.gpus.min(left);
        let scale = |v: u64| (v as u128 * k as u128 / s.gpus.max(1) as u128) as u64;
        shares.push(NodeShare::whole(
            s.node,
            k,
            MilliCpu(scale(s.cpu.0)),
            Bytes(scale(s.memory.0)),
        ));
        left -= k;
    }
    Allocation::new(shares)
}

/// One job as a round sees it.
struct JobCtx<'v> {
    idx: usize,
    est: Option<&'v ConfigEstimates>,
    /// Best estimated throughput (the normaliser).
    best: f64,
    /// Allowed type indices, requested first.
    allowed: Vec<usize>,
    requested: (usize, u32),
    /// Current (type, count, allocation) while running.
    cur: Option<(usize, u32, Allocation)>,
    touched: bool,
}

impl JobCtx<'_> {
    fn throughput(&self, pool: &Pool<'_>, ty: usize, count: u32) -> f64 {
        match self.est {
            Some(e) => e.get(pool.types[ty], count).map_or(0.0, |x| x.throughput),
            // Nothing estimated: only the request is known to work.
            None => f64::from(u8::from((ty, count) == self.requested)),
        }
    }

    fn value(&self, pool: &Pool<'_>, ty: usize, count: u32) -> f64 {
        if self.best > 0.0 {
            self.throughput(pool, ty, count) / self.best
        } else {
            0.0
        }
    }

    fn plan(&self, pool: &Pool<'_>, ty: usize, count: u32) -> Option<tessera_model::ParallelPlan> {
        self.est
            .and_then(|e| e.get(pool.types[ty], count))
            .and_then(|x| x.plan)
    }
}

/// A candidate step of the search.
#[derive(Clone, Copy, Debug)]
struct Step {
    job: usize,
    /// Freed GPUs of the target type.
    freed: u32,
    loss: f64,
    /// New (type, count) of the victim.
    to: (usize, u32),
}

/// The Crius policy and its ablations.
#[derive(Debug)]
pub struct CriusPolicy {
    name: &'static str,
    opts: CriusOptions,
    round: SimDuration,
    rounds: u64,
    searches: u64,
    shrinks: u64,
    type_changes: u64,
    upgrades: u64,
    off_request: u64,
}

impl CriusPolicy {
    /// A Crius policy named `name` with `opts`, planning every `round`.
    pub fn new(name: &'static str, opts: CriusOptions, round: SimDuration) -> CriusPolicy {
        CriusPolicy {
            name,
            opts,
            round,
            rounds: 0,
            searches: 0,
            shrinks: 0,
            type_changes: 0,
            upgrades: 0,
            off_request: 0,
        }
    }

    fn estimates<'v>(&self, job: &'v ActiveJob) -> Option<&'v ConfigEstimates> {
        match job.knowledge.get::<CriusCells>() {
            Some(cells) if self.opts.dp_only => Some(&cells.dp_only),
            Some(cells) => Some(&cells.proxy),
            // No cells (a job type of a throughput matrix, e.g. Gavel's): each (type, count)
            // the profiler measured is a cell with one (data-parallel) plan, so the proxy and
            // DP-only views coincide.
            None => job.knowledge.get::<ConfigEstimates>(),
        }
    }

    /// The cells a queued job may take without disturbing anyone, best first (the request
    /// leads when it is feasible).
    fn candidates(&self, pool: &Pool<'_>, j: &JobCtx<'_>) -> Vec<(usize, u32, f64)> {
        let mut out: Vec<(usize, u32, f64)> = Vec::new();
        let (rt, rc) = j.requested;
        let rv = j.value(pool, rt, rc);
        if rv > 0.0 {
            out.push((rt, rc, f64::INFINITY));
        }
        let types: &[usize] = if self.opts.type_change {
            &j.allowed
        } else {
            std::slice::from_ref(&j.allowed[0])
        };
        for &t in types {
            let smallest = super::perf_counts()
                .find(|&c| j.value(pool, t, c) > 0.0)
                .unwrap_or(u32::MAX);
            for c in super::perf_counts() {
                if (t, c) == (rt, rc) || c > rc.max(smallest) {
                    continue;
                }
                let v = j.value(pool, t, c);
                if v > 0.0 && v >= MIN_ALTERNATIVE_FRACTION * rv {
                    out.push((t, c, v));
                }
            }
        }
        out.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
        if out.is_empty() {
            // The estimator finds no cell it may use: run the request as asked (the user
            // vouches for it; the runtime's own search picks the plan).
            out.push((rt, rc, 0.0));
        }
        out
    }

    fn start(
        &mut self,
        pool: &mut Pool<'_>,
        jobs: &mut [JobCtx<'_>],
        qi: usize,
        view: &ClusterView<'_>,
        actions: &mut Vec<Action>,
        allow_search: bool,
    ) -> (bool, bool) {
        let cands = self.candidates(pool, &jobs[qi]);
        for &(t, c, _) in &cands {
            if let Some(mut alloc) = pool.place(t, c) {
                alloc.plan = jobs[qi].plan(pool, t, c);
                if (t, c) != jobs[qi].requested {
                    self.off_request += 1;
                }
                actions.push(Action::Start {
                    job: view.active[jobs[qi].idx].id,
                    allocation: alloc.clone(),
                });
                jobs[qi].cur = Some((t, c, alloc));
                jobs[qi].touched = true;
                return (true, false);
            }
        }
        if !allow_search || !(self.opts.shrink || self.opts.type_change) {
            return (false, false);
        }
        self.searches += 1;
        (self.search(pool, jobs, qi, &cands, view, actions), true)
    }

    /// The bounded shrink / type-change search for queued job `qi`.
    fn search(
        &mut self,
        pool: &mut Pool<'_>,
        jobs: &mut [JobCtx<'_>],
        qi: usize,
        cands: &[(usize, u32, f64)],
        view: &ClusterView<'_>,
        actions: &mut Vec<Action>,
    ) -> bool {
        let running = jobs.iter().filter(|j| j.cur.is_some()).count();
        let depth = if running > 150 { 2 } else { 3 };
        let mut best: Option<(f64, usize, u32, Vec<Step>)> = None;
        for &(t, c, _) in cands.iter().take(3) {
            let gain_new = jobs[qi].value(pool, t, c);
            let need = (c as u64).saturating_sub(pool.free[t]) as u32;
            if need == 0 {
                continue; // fragmented, not short: moving others would not help reliably
            }
            let mut steps: Vec<Step> = Vec::new();
            for (ji, j) in jobs.iter().enumerate() {
                let Some((jt, jc, _)) = &j.cur else { continue };
                if ji == qi || j.touched || *jt != t {
                    continue;
                }
                let now_v = j.value(pool, t, *jc);
                // Never below half the request: a long job halved again and again would
                // crawl (and hold its few GPUs for days).
                if self.opts.shrink && *jc >= 2 && jc / 2 >= (j.requested.1 / 2).max(1) {
                    let v = j.value(pool, t, jc / 2);
                    if v > 0.0 {
                        steps.push(Step {
                            job: ji,
                            freed: jc / 2,
                            loss: now_v - v,
                            to: (t, jc / 2),
                        });
                    }
                }
                if self.opts.type_change {
                    let mut bestmove: Option<(f64, usize, u32)> = None;
                    for &u in &j.allowed {
                        if u == t {
                            continue;
                        }
                        for cc in super::perf_counts().filter(|&cc| cc <= *jc) {
                            let v = j.value(pool, u, cc);
                            if v > 0.0
                                && pool.free[u] >= cc as u64
                                && bestmove.is_none_or(|b| v > b.0)
                            {
                                bestmove = Some((v, u, cc));
                            }
                        }
                    }
                    if let Some((v, u, cc)) = bestmove {
                        steps.push(Step {
                            job: ji,
                            freed: *jc,
                            loss: now_v - v,
                            to: (u, cc),
                        });
                    }
                }
            }
            steps.sort_by(|a, b| {
                (a.loss / a.freed as f64)
                    .total_cmp(&(b.loss / b.freed as f64))
                    .then(a.job.cmp(&b.job))
            });
            steps.truncate(STEPS_CONSIDERED);
            // Depth-bounded enumeration of step sets (distinct victims) freeing enough.
            let mut chosen: Vec<Step> = Vec::new();
            fn dfs(
                steps: &[Step],
                from: usize,
                depth: usize,
                need: u32,
                chosen: &mut Vec<Step>,
                best: &mut Option<(f64, Vec<Step>)>,
                gain_new: f64,
            ) {
                let freed: u32 = chosen.iter().map(|s| s.freed).sum();
                if freed >= need {
                    let gain = gain_new - chosen.iter().map(|s| s.loss).sum::<f64>();
                    if best.as_ref().is_none_or(|b| gain > b.0) {
                        *best = Some((gain, chosen.clone()));
                    }
                    return;
                }
                if chosen.len() == depth {
                    return;
                }
                for i in from..steps.len() {
                    if chosen.iter().any(|s| s.job == steps[i].job) {
                        continue;
                    }
                    chosen.push(steps[i]);
                    dfs(steps, i + 1, depth, need, chosen, best, gain_new);
                    chosen.pop();
                }
            }
            let mut local: Option<(f64, Vec<Step>)> = None;
            dfs(&steps, 0, depth, need, &mut chosen, &mut local, gain_new);
            if let Some((g, s)) = local {
                if g > 0.0 && best.as_ref().is_none_or(|b| g > b.0) {
                    best = Some((g, t, c, s));
                }
            }
        }
        let Some((_, t, c, steps)) = best else {
            return false;
        };
        // Apply tentatively on a copy; commit only if every placement succeeds.
        let saved = (pool.ledger.clone(), pool.free.clone());
        let mut planned: Vec<(usize, (usize, u32), Allocation)> = Vec::new();
        for s in &steps {
            let Some((_, jc, old)) = jobs[s.job].cur.clone() else {
                continue;
            };
            pool.release(&old);
            let new = if s.to.0 == old_type(pool, &old) && s.to.1 < jc {
                let a = keep_first(&old, s.to.1);
                pool.reserve(&a).then_some(a)
            } else {
                pool.place(s.to.0, s.to.1)
            };
            match new {
                Some(mut a) => {
                    a.plan = jobs[s.job].plan(pool, s.to.0, s.to.1);
                    planned.push((s.job, s.to, a));
                }
                None => {
                    (pool.ledger, pool.free) = saved;
                    return false;
                }
            }
        }
        let Some(mut alloc) = pool.place(t, c) else {
            (pool.ledger, pool.free) = saved;
            return false;
        };
        alloc.plan = jobs[qi].plan(pool, t, c);
        for (ji, to, a) in planned {
            let was = jobs[ji].cur.as_ref().map(|x| x.0);
            if was == Some(to.0) {
                self.shrinks += 1;
            } else {
                self.type_changes += 1;
            }
            actions.push(Action::Resize {
                job: view.active[jobs[ji].idx].id,
                allocation: a.clone(),
            });
            jobs[ji].cur = Some((to.0, to.1, a));
            jobs[ji].touched = true;
        }
        if (t, c) != jobs[qi].requested {
            self.off_request += 1;
        }
        actions.push(Action::Start {
            job: view.active[jobs[qi].idx].id,
            allocation: alloc.clone(),
        });
        jobs[qi].cur = Some((t, c, alloc));
        jobs[qi].touched = true;
        true
    }

    fn upgrade(
        &mut self,
        pool: &mut Pool<'_>,
        j: &mut JobCtx<'_>,
        job: &ActiveJob,
        actions: &mut Vec<Action>,
    ) {
        let Some((t, c, old)) = j.cur.clone() else {
            return;
        };
        let now_tp = j.throughput(pool, t, c);
        if now_tp <= 0.0 {
            return;
        }
        let mut options: Vec<(usize, u32)> = Vec::new();
        if c < 16 && pool.free[t] >= c as u64 {
            options.push((t, c * 2));
        }
        if self.opts.type_change {
            for &u in &j.allowed {
                if u != t {
                    options.extend(
                        super::perf_counts()
                            .filter(|&cc| cc <= c && pool.free[u] >= cc as u64)
                            .map(|cc| (u, cc)),
                    );
                }
            }
        }
        let Some((nt, nc, tp)) = options
            .into_iter()
            .map(|(u, cc)| (u, cc, j.throughput(pool, u, cc)))
            .filter(|x| x.2 >= now_tp * (1.0 + UPGRADE_MIN_GAIN))
            .max_by(|a, b| a.2.total_cmp(&b.2).then(b.1.cmp(&a.1)))
        else {
            return;
        };
        let saved_s = job.remaining_iters / now_tp - job.remaining_iters / tp;
        let cost = (RETUNE_PER_GPU_S * nc as f64).min(RETUNE_MAX_S);
        if saved_s < 2.0 * cost {
            return;
        }
        pool.release(&old);
        match pool.place(nt, nc) {
            Some(mut a) => {
                a.plan = j.plan(pool, nt, nc);
                actions.push(Action::Resize {
                    job: job.id,
                    allocation: a.clone(),
                });
                j.cur = Some((nt, nc, a));
                j.touched = true;
                self.upgrades += 1;
            }
            None => {
                let back = pool.reserve(&old);
                debug_assert!(back, "a released allocation can be taken back");
            }
        }
    }
}

fn old_type(pool: &Pool<'_>, alloc: &Allocation) -> usize {
    pool.type_of(alloc).unwrap_or(usize::MAX)
}

fn job_ctx<'v>(
    pool: &Pool<'_>,
    idx: usize,
    job: &'v ActiveJob,
    view: &ClusterView<'_>,
    est: Option<&'v ConfigEstimates>,
) -> Option<JobCtx<'v>> {
    let spec = view.spec(job)?;
    let mut allowed: Vec<usize> = spec
        .gpu_types
        .iter()
        .filter_map(|g| pool.type_index(*g))
        .collect();
    if allowed.is_empty() {
        // No type named: every type is allowed, and the request is the requested count on
        // the type estimated fastest for it (cluster order on ties), not whichever type
        // happens to come first.
        allowed = (0..pool.types.len()).collect();
        if let Some(e) = est {
            let rate = |t: usize| {
                e.get(pool.types[t], spec.gpus)
                    .map_or(0.0, |x| x.throughput)
            };
            let mut fastest = 0;
            for t in 1..allowed.len() {
                if rate(t) > rate(fastest) {
                    fastest = t;
                }
            }
            allowed.swap(0, fastest);
            allowed[1..].sort_unstable();
        }
    }
    let requested = (allowed[0], spec.gpus);
    let best = est.and_then(|e| e.best()).map_or(1.0, |b| b.throughput);
    let cur = job.allocation.as_ref().and_then(|a| {
        let t = pool.type_of(a)?;
        Some((t, a.gpus(), a.clone()))
    });
    Some(JobCtx {
        idx,
        est,
        best,
        allowed,
        requested,
        cur,
        touched: false,
    })
}

impl Policy for CriusPolicy {
    fn name(&self) -> &str {
        self.name
    }

    fn round_length(&self) -> Option<SimDuration> {
        Some(self.round)
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        if !view.trigger.round {
            return;
        }
        self.rounds += 1;
        let mut pool = Pool::new(view.cluster, view.free);
        let mut jobs: Vec<JobCtx<'_>> = Vec::with_capacity(view.active.len());
        for (i, a) in view.active.iter().enumerate() {
            if let Some(j) = job_ctx(&pool, i, a, view, self.estimates(a)) {
                jobs.push(j);
            }
        }
        // FIFO: submission time, then id.
        let key = |j: &JobCtx<'_>| {
            let a = &view.active[j.idx];
            (view.spec(a).map_or(0, |s| s.submit.as_micros()), a.id.0)
        };
        jobs.sort_by_key(key);
        let mut searched = 0;
        for qi in 0..jobs.len() {
            if view.active[jobs[qi].idx].state != JobState::Queued {
                continue;
            }
            let allow_search = searched < SEARCH_BUDGET;
            let nothing_free = pool.free.iter().all(|&f| f == 0);
            let (started, did_search) = if nothing_free && !(allow_search && self.opts.shrink) {
                (false, false)
            } else {
                self.start(&mut pool, &mut jobs, qi, view, actions, allow_search)
            };
            searched += usize::from(did_search);
            if !started && !self.opts.opportunistic {
                break;
            }
        }
        if self.opts.upgrades {
            let mut done = 0;
            for j in jobs.iter_mut() {
                if done >= UPGRADES_PER_ROUND || pool.free.iter().all(|&f| f == 0) {
                    break;
                }
                let a = &view.active[j.idx];
                if j.touched || a.state != JobState::Running {
                    continue;
                }
                let before = actions.len();
                self.upgrade(&mut pool, j, a, actions);
                done += usize::from(actions.len() > before);
            }
        }
    }

    fn stats(&self) -> Vec<(String, f64)> {
        vec![
            ("rounds".into(), self.rounds as f64),
            ("searches".into(), self.searches as f64),
            ("shrinks".into(), self.shrinks as f64),
            ("type_changes".into(), self.type_changes as f64),
            ("upgrades".into(), self.upgrades as f64),
            ("starts_off_request".into(), self.off_request as f64),
        ]
    }
}

/// FCFS: FIFO over Crius's rounds and placement, each job on its requested type and count,
/// with backfill.
#[derive(Debug)]
pub struct Fcfs {
    round: SimDuration,
}

impl Fcfs {
    /// FCFS planning every `round`.
    pub fn new(round: SimDuration) -> Fcfs {
        Fcfs { round }
    }
}

impl Policy for Fcfs {
    fn name(&self) -> &str {
        "fcfs"
    }

    fn round_length(&self) -> Option<SimDuration> {
        Some(self.round)
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        if !view.trigger.round {
            return;
        }
        let mut pool = Pool::new(view.cluster, view.free);
        let mut queued: Vec<(u64, u32, usize, u32)> = Vec::new();
        for a in view.active.iter().filter(|a| a.state == JobState::Queued) {
            let Some(spec) = view.spec(a) else { continue };
            let ty = spec
                .gpu_types
                .first()
                .and_then(|g| pool.type_index(*g))
                .unwrap_or(0);
            queued.push((spec.submit.as_micros(), a.id.0, ty, spec.gpus));
        }
        queued.sort_unstable();
        for (_, id, ty, gpus) in queued {
            if pool.free.iter().all(|&f| f == 0) {
                break;
            }
            if let Some(allocation) = pool.place_with(ty, gpus, false) {
                actions.push(Action::Start {
                    job: tessera_model::JobId(id),
                    allocation,
                });
            }
        }
    }
}
