//! The `sia` policy (Jayaram Subramanya et al., SOSP'23), as a baseline on the Gavel matrix.
//!
//! Every round (60 s) an ILP picks at most one configuration (GPU type, count) per active job:
//! binary `y[j][c]`, `Σ_c y[j][c] ≤ 1`, `Σ_j Σ_c count·y[j][c] ≤ capacity_t` per type. Sia
//! maximises `Σ goodput^p` with `p = −0.5` (negative p favours fairness; an unserved job's
//! term is unbounded). Linearised per configuration, the value of giving `c` to `j` is
//! `2 − G[j][c]^p`, with `G` the job's goodput on `c` normalised by its goodput on its
//! slowest configuration (so `G ≥ 1`, `G^p ∈ (0, 1]`, every configuration is worth more than
//! none and faster ones a little more). Goodput is throughput here: Gavel's job types have
//! fixed batch sizes, so Sia's statistical-efficiency term is 1.
//!
//! Restart penalty: for a running job, every configuration other than the one it holds has
//! its goodput scaled by `1 − 30 s / 600 s` (a checkpoint-restore over a ten-round horizon).
//! Counts range over the job's estimated feasible counts up to twice its request.
//!
//! **Scale.** The ILP is solved over *groups*, not jobs: jobs whose candidate configurations
//! and values are identical (same model, request and allowed types, same held configuration)
//! share one general-integer variable per configuration, `n[g][c] ∈ [0, |g|]`, with
//! `Σ_c n[g][c] ≤ |g|`: the same optimum as the per-job ILP, without its symmetry. Each job's
//! configurations are first pruned by dominance (on one type, a configuration with more GPUs
//! and no more value than another is never needed). On the Crius repro's 1,900 jobs this
//! turns thousands of binaries into a few hundred integers.
//!
//! A greedy solution is the fallback and the bar (running jobs keep what they hold, then
//! first come, the fitting configuration with the most value per GPU). **By default (node cap
//! 0) the ILP's LP relaxation is solved once and rounded** ([`round_relaxation`]: counts
//! rounded down, then the fractional configurations and the greedy fill on what is left);
//! the result is used when it is worth at least the greedy solution. This is an
//! approximation: a basic optimum of the relaxation has at most one fractional count per
//! row (4 types + the groups), so the rounding loses at most a few configurations' value
//! against the ILP (proptest `rounded_relaxation_is_near_the_ilp_optimum`; effect on the
//! repro's figures in docs/crius.md). With a node cap > 0 ([`SiaPolicy::with_node_limit`])
//! the ILP itself is solved with microlp's branch and bound, warm-started with the greedy
//! solution, under that **node cap** (deterministic: the same inputs give the same
//! incumbent) and a 1% MIP gap. A wall-clock guard (1 s) backs both up. When a limit stops
//! the search the incumbent is used (never worse than the greedy solution). Solve
//! times (mean / p99 / max) and limit hits are in `stats()`. Goodputs do not change while a
//! job runs (no statistical-efficiency term), so a round whose job set is the one of the last
//! solve keeps the placement instead of solving the same ILP again. Between rounds arriving
//! jobs only take free GPUs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use microlp::{
    ComparisonOp, OptimizationDirection, Problem, SolveOptions, SolveOutcome, TerminationReason,
    Variable,
};
use tessera_model::{JobId, SimDuration};
use tessera_sched::{Action, ClusterView, Policy};

use super::common::{cluster_types, counts_on, throughput_on, type_of, GpuType};
use super::policy::apply_configs;
use super::solve::SolveTimes;

/// Sia's round length.
pub const SIA_ROUND: SimDuration = SimDuration::from_secs(60);
/// The fairness exponent.
pub const SIA_P: f64 = -0.5;
/// Default branch-and-bound node cap of one solve (the root relaxation is not a node). 0:
/// no branch and bound, the LP relaxation is rounded (the default since the full Crius
/// repro, where the solves were most of Sia's run time; see docs/crius.md).
pub const SIA_NODE_LIMIT: u64 = 0;
/// Default wall-clock guard of one solve, seconds.
pub const SIA_TIME_LIMIT_S: f64 = 1.0;
/// Relative MIP gap at which a solve may stop.
pub const SIA_MIP_GAP: f64 = 0.01;
/// Goodput factor of a configuration that would restart a running job.
pub const SIA_RESTART_FACTOR: f64 = 1.0 - 30.0 / 600.0;

/// One candidate configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Config {
    /// Type index.
    pub(crate) t: usize,
    pub(crate) count: u32,
    /// Objective value of choosing it.
    pub(crate) value: f64,
}

/// Solve counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IlpStats {
    /// Rounds solved.
    pub solves: u64,
    /// Solves stopped by the node cap (incumbent used).
    pub node_limit_hits: u64,
    /// Solves that rounded the LP relaxation (node cap 0) instead of branching.
    pub relaxed: u64,
    /// Solves stopped by the wall-clock guard (incumbent used).
    pub time_limit_hits: u64,
    /// Solves that failed (the greedy warm start used).
    pub failures: u64,
    /// Wall time of every solve (building included).
    pub times: SolveTimes,
    /// Integer variables of the largest ILP.
    pub max_vars: u64,
    /// Groups (rows of identical jobs) of the largest ILP.
    pub max_groups: u64,
    /// Branch-and-bound nodes of the largest search.
    pub max_nodes: u64,
}

/// The Sia policy.
#[derive(Debug)]
pub struct SiaPolicy {
    round: SimDuration,
    limits: IlpLimits,
    stats: IlpStats,
    /// Active jobs (sorted) at the last solve.
    solved_for: Vec<JobId>,
    /// A job of `solved_for` finished and was renumbered away: the set changed, solve again.
    solved_for_left: bool,
}

/// Limits of one ILP solve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IlpLimits {
    /// Branch-and-bound nodes (deterministic).
    pub nodes: u64,
    /// Wall-clock guard, seconds.
    pub time_s: f64,
    /// Relative MIP gap.
    pub mip_gap: f64,
}

impl Default for IlpLimits {
    fn default() -> Self {
        IlpLimits {
            nodes: SIA_NODE_LIMIT,
            time_s: SIA_TIME_LIMIT_S,
            mip_gap: SIA_MIP_GAP,
        }
    }
}

impl SiaPolicy {
    /// Sia with `round` (default 60 s).
    pub fn new(round: Option<SimDuration>) -> SiaPolicy {
        SiaPolicy {
            round: round.unwrap_or(SIA_ROUND),
            limits: IlpLimits::default(),
            stats: IlpStats::default(),
            solved_for: Vec::new(),
            solved_for_left: false,
        }
    }

    /// A different wall-clock guard.
    pub fn with_time_limit(mut self, secs: f64) -> SiaPolicy {
        self.limits.time_s = secs;
        self
    }

    /// A different node cap.
    pub fn with_node_limit(mut self, nodes: u64) -> SiaPolicy {
        self.limits.nodes = nodes;
        self
    }

    /// Solve statistics so far.
    pub fn ilp_stats(&self) -> &IlpStats {
        &self.stats
    }
}

/// Candidate configurations per active job (empty when it can run nowhere), pruned by
/// dominance.
pub(crate) fn configs(
    view: &ClusterView<'_>,
    types: &[GpuType],
    held: &[Option<(usize, u32)>],
) -> Vec<Vec<Config>> {
    view.active
        .iter()
        .enumerate()
        .map(|(pos, job)| {
            let Some(spec) = view.spec(job) else {
                return Vec::new();
            };
            let cap = spec.gpus.max(1).saturating_mul(2);
            let mut raw: Vec<(usize, u32, f64)> = Vec::new();
            for (t, ty) in types.iter().enumerate() {
                for count in counts_on(view.cluster, job, spec, ty.id) {
                    if count > cap || u64::from(count) > ty.capacity {
                        continue;
                    }
                    let thr = throughput_on(view.cluster, job, spec, ty.id, count);
                    if thr > 0.0 {
                        raw.push((t, count, thr));
                    }
                }
            }
            let slowest = raw.iter().map(|r| r.2).fold(f64::INFINITY, f64::min);
            let all: Vec<Config> = raw
                .into_iter()
                .map(|(t, count, thr)| {
                    let mut g = thr / slowest;
                    if held[pos].is_some_and(|h| h != (t, count)) {
                        g *= SIA_RESTART_FACTOR;
                    }
                    Config {
                        t,
                        count,
                        value: 2.0 - g.max(1e-9).powf(SIA_P),
                    }
                })
                .collect();
            prune(all)
        })
        .collect()
}

/// Drops configurations dominated on their own type: more GPUs and no more value than
/// another configuration of that type. Any solution using one can switch to the dominating
/// configuration, keep its value and free GPUs, so the ILP's optimum is unchanged.
pub(crate) fn prune(configs: Vec<Config>) -> Vec<Config> {
    configs
        .iter()
        .filter(|c| {
            !configs
                .iter()
                .any(|o| o.t == c.t && o.count < c.count && o.value >= c.value)
        })
        .copied()
        .collect()
}

/// First come, each job the fitting configuration with the most value per GPU (ties: fewer
/// GPUs).
pub(crate) fn greedy(
    order: &[usize],
    configs: &[Vec<Config>],
    left: &mut [i64],
) -> Vec<Option<usize>> {
    let mut pick = vec![None; configs.len()];
    for &pos in order {
        let mut best: Option<usize> = None;
        for (k, c) in configs[pos].iter().enumerate() {
            if left[c.t] < i64::from(c.count) {
                continue;
            }
            // Value per GPU: small fast configurations first, so that a crowded cluster
            // serves many jobs (the ILP then trades up where GPUs allow).
            let better = best.is_none_or(|b| {
                let o = configs[pos][b];
                let (r, ro) = (c.value / f64::from(c.count), o.value / f64::from(o.count));
                r > ro + 1e-12 || (r >= ro - 1e-12 && c.count < o.count)
            });
            if better {
                best = Some(k);
            }
        }
        if let Some(k) = best {
            let c = configs[pos][k];
            left[c.t] -= i64::from(c.count);
            pick[pos] = Some(k);
        }
    }
    pick
}

/// Jobs with identical candidate lists (configurations and values), by first member.
pub(crate) struct Group {
    /// The shared candidate list.
    pub(crate) configs: Vec<Config>,
    /// Positions (in `configs`' indexing) of the members, in the order given.
    pub(crate) members: Vec<usize>,
}

/// Groups the jobs of `order` (jobs without candidates are left out); with `group` false
/// every job is its own group (the per-job ILP).
pub(crate) fn groups(configs: &[Vec<Config>], order: &[usize], group: bool) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    let mut index: BTreeMap<Vec<(usize, u32, u64)>, usize> = BTreeMap::new();
    for &pos in order {
        let cs = &configs[pos];
        if cs.is_empty() {
            continue;
        }
        if group {
            let key: Vec<(usize, u32, u64)> = cs
                .iter()
                .map(|c| (c.t, c.count, c.value.to_bits()))
                .collect();
            if let Some(&g) = index.get(&key) {
                out[g].members.push(pos);
                continue;
            }
            index.insert(key, out.len());
        }
        out.push(Group {
            configs: cs.clone(),
            members: vec![pos],
        });
    }
    out
}

/// Outcome of one ILP.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct IlpOutcome {
    /// Chosen configuration index per job.
    pub(crate) pick: Vec<Option<usize>>,
    pub(crate) secs: f64,
    pub(crate) node_limit_hit: bool,
    pub(crate) time_limit_hit: bool,
    pub(crate) failed: bool,
    /// Integer variables.
    pub(crate) vars: usize,
    pub(crate) groups: usize,
    /// Branch-and-bound nodes solved.
    pub(crate) nodes: u64,
    /// The LP relaxation was solved and rounded (node cap 0), no branch and bound.
    pub(crate) relaxed: bool,
}

/// Solves the configuration ILP over `groups`, warm-started from the per-job `start`.
/// `held` says which configuration index each job holds now (it keeps it when its group's
/// counts allow).
pub(crate) fn solve_ilp(
    configs: &[Vec<Config>],
    groups: &[Group],
    capacity: &[u64],
    start: &[Option<usize>],
    held: &[Option<usize>],
    limits: IlpLimits,
) -> IlpOutcome {
    let started = Instant::now();
    let vars: usize = groups.iter().map(|g| g.configs.len()).sum();
    let mut out = IlpOutcome {
        pick: start.to_vec(),
        secs: 0.0,
        node_limit_hit: false,
        time_limit_hit: false,
        failed: false,
        vars,
        groups: groups.len(),
        nodes: 0,
        relaxed: false,
    };
    if vars == 0 {
        out.pick = vec![None; configs.len()];
        return out;
    }
    // Node cap 0: the LP relaxation only, rounded (see `round_relaxation`).
    let relaxed = limits.nodes == 0;
    let mut ilp = Problem::new(OptimizationDirection::Maximize);
    let n: Vec<Vec<Variable>> = groups
        .iter()
        .map(|g| {
            let size = i32::try_from(g.members.len()).unwrap_or(i32::MAX);
            g.configs
                .iter()
                .map(|c| {
                    if relaxed {
                        ilp.add_var(c.value, (0.0, f64::from(size)))
                    } else {
                        ilp.add_integer_var(c.value, (0, size))
                    }
                })
                .collect()
        })
        .collect();
    for (g, ns) in groups.iter().zip(&n) {
        if ns.len() > 1 {
            let sum: Vec<(Variable, f64)> = ns.iter().map(|&v| (v, 1.0)).collect();
            ilp.add_constraint(sum, ComparisonOp::Le, g.members.len() as f64);
        }
    }
    for (t, cap) in capacity.iter().enumerate() {
        let used: Vec<(Variable, f64)> = groups
            .iter()
            .zip(&n)
            .flat_map(|(g, ns)| {
                g.configs
                    .iter()
                    .zip(ns)
                    .filter(|(c, _)| c.t == t)
                    .map(|(c, &v)| (v, f64::from(c.count)))
            })
            .collect();
        if !used.is_empty() {
            ilp.add_constraint(used, ComparisonOp::Le, *cap as f64);
        }
    }
    let warm: Vec<(Variable, f64)> = groups
        .iter()
        .zip(&n)
        .flat_map(|(g, ns)| {
            ns.iter().enumerate().map(move |(k, &v)| {
                let count = g.members.iter().filter(|&&p| start[p] == Some(k)).count();
                (v, count as f64)
            })
        })
        .collect();
    let mut options = SolveOptions::default();
    options.time_limit = Some(Duration::from_secs_f64(limits.time_s.max(0.001)));
    if !relaxed {
        options.node_limit = Some(limits.nodes);
        options.mip_gap = limits.mip_gap;
        options.warm_start = Some(warm);
    }
    let solved = ilp.solve_with(options);
    if relaxed {
        out.relaxed = true;
        match solved {
            Ok(SolveOutcome::Solution(sol)) => {
                let values: Vec<Vec<f64>> = n
                    .iter()
                    .map(|ns| ns.iter().map(|&v| sol.var_value(v).max(0.0)).collect())
                    .collect();
                let pick = round_relaxation(configs, groups, capacity, &values, held);
                if value(configs, &pick) >= value(configs, start) - 1e-9 {
                    out.pick = pick;
                }
            }
            Ok(SolveOutcome::Interrupted(_)) => out.time_limit_hit = true,
            Err(_) => out.failed = true,
        }
        out.secs = started.elapsed().as_secs_f64();
        return out;
    }
    out.secs = started.elapsed().as_secs_f64();
    let sol = match solved {
        Ok(SolveOutcome::Solution(sol)) => sol,
        Ok(SolveOutcome::Interrupted(i)) => {
            out.nodes = i.stats().nodes_solved;
            out.node_limit_hit = i.termination_reason() == TerminationReason::NodeLimit;
            out.time_limit_hit = i.termination_reason() == TerminationReason::TimeLimit;
            return out;
        }
        Err(_) => {
            out.failed = true;
            return out;
        }
    };
    out.nodes = sol.stats().nodes_solved;
    out.node_limit_hit = sol.termination_reason() == TerminationReason::NodeLimit;
    out.time_limit_hit = sol.termination_reason() == TerminationReason::TimeLimit;
    let counts: Vec<Vec<u64>> = n
        .iter()
        .map(|ns| {
            ns.iter()
                .map(|&v| sol.var_value(v).round().max(0.0) as u64)
                .collect()
        })
        .collect();
    let pick = hand_out(configs.len(), groups, counts, held);
    // Defensive: keep the warm start unless the solver's answer fits and is no worse.
    if feasible(configs, capacity, &pick) && value(configs, &pick) >= value(configs, start) - 1e-9 {
        out.pick = pick;
    }
    out
}

/// Hands each group's configuration counts to its members: those holding a configuration
/// keep it while its count lasts, the rest take what is left, best value first, first come
/// first.
fn hand_out(
    jobs: usize,
    groups: &[Group],
    counts: Vec<Vec<u64>>,
    held: &[Option<usize>],
) -> Vec<Option<usize>> {
    let mut pick: Vec<Option<usize>> = vec![None; jobs];
    for (g, mut left) in groups.iter().zip(counts) {
        for &p in &g.members {
            if let Some(k) = held[p] {
                if left.get(k).is_some_and(|&l| l > 0) {
                    left[k] -= 1;
                    pick[p] = Some(k);
                }
            }
        }
        let mut by_value: Vec<usize> = (0..g.configs.len()).collect();
        by_value.sort_by(|&a, &b| {
            g.configs[b]
                .value
                .total_cmp(&g.configs[a].value)
                .then(a.cmp(&b))
        });
        for &p in &g.members {
            if pick[p].is_some() {
                continue;
            }
            if let Some(&k) = by_value.iter().find(|&&k| left[k] > 0) {
                left[k] -= 1;
                pick[p] = Some(k);
            }
        }
    }
    pick
}

/// Rounds the LP relaxation's counts `values[g][c]` to a feasible choice: every count rounded
/// down (which keeps every capacity and group row), then the members left without a
/// configuration, first come first, take their group's fractional configurations (largest
/// fraction first) while their type has room, and finally the greedy fill (value per GPU)
/// on what is left. A basic optimum of the relaxation has at most one fractional count per
/// row (types + groups), so rounding down loses at most that many configurations' value
/// before the fill wins some back.
pub(crate) fn round_relaxation(
    configs: &[Vec<Config>],
    groups: &[Group],
    capacity: &[u64],
    values: &[Vec<f64>],
    held: &[Option<usize>],
) -> Vec<Option<usize>> {
    let counts: Vec<Vec<u64>> = values
        .iter()
        .map(|vs| {
            vs.iter()
                .map(|&v| (v + 1e-7).floor().max(0.0) as u64)
                .collect()
        })
        .collect();
    let mut pick = hand_out(configs.len(), groups, counts, held);
    let mut left: Vec<i64> = capacity
        .iter()
        .map(|&c| i64::try_from(c).unwrap_or(i64::MAX))
        .collect();
    for (cs, k) in configs.iter().zip(&pick) {
        if let Some(c) = k.and_then(|k| cs.get(k)) {
            left[c.t] -= i64::from(c.count);
        }
    }
    for (g, vs) in groups.iter().zip(values) {
        // Fractional configurations of the group, largest fraction first.
        let mut frac: Vec<(f64, usize)> = vs
            .iter()
            .enumerate()
            .map(|(k, &v)| (v - (v + 1e-7).floor(), k))
            .filter(|&(f, _)| f > 1e-6)
            .collect();
        frac.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for &p in &g.members {
            if pick[p].is_some() {
                continue;
            }
            if let Some(&(_, k)) = frac.iter().find(|&&(_, k)| {
                let c = g.configs[k];
                left[c.t] >= i64::from(c.count)
            }) {
                let c = g.configs[k];
                left[c.t] -= i64::from(c.count);
                pick[p] = Some(k);
            }
        }
    }
    // Position order (the driver's active list), so the fill does not depend on grouping.
    let mut waiting: Vec<usize> = groups
        .iter()
        .flat_map(|g| g.members.iter().copied())
        .filter(|&p| pick[p].is_none())
        .collect();
    waiting.sort_unstable();
    let filled = greedy(&waiting, configs, &mut left);
    for (p, f) in pick.iter_mut().zip(filled) {
        if p.is_none() {
            *p = f;
        }
    }
    pick
}

/// Objective value of a choice.
pub(crate) fn value(configs: &[Vec<Config>], pick: &[Option<usize>]) -> f64 {
    configs
        .iter()
        .zip(pick)
        .filter_map(|(cs, k)| k.and_then(|k| cs.get(k)))
        .map(|c| c.value)
        .sum()
}

/// Whether a choice fits every type's capacity.
pub(crate) fn feasible(configs: &[Vec<Config>], capacity: &[u64], pick: &[Option<usize>]) -> bool {
    let mut used = vec![0u64; capacity.len()];
    for (cs, k) in configs.iter().zip(pick) {
        if let Some(c) = k.and_then(|k| cs.get(k)) {
            if let Some(u) = used.get_mut(c.t) {
                *u += u64::from(c.count);
            }
        }
    }
    used.iter().zip(capacity).all(|(u, c)| u <= c)
}

/// What each active job holds: (type index, count).
pub(crate) fn holdings(view: &ClusterView<'_>, types: &[GpuType]) -> Vec<Option<(usize, u32)>> {
    view.active
        .iter()
        .map(|j| {
            let a = j.allocation.as_ref()?;
            let g = type_of(view.cluster, a)?;
            Some((types.iter().position(|t| t.id == g)?, a.gpus()))
        })
        .collect()
}

/// Active jobs' positions, first come first.
pub(crate) fn arrival_order(view: &ClusterView<'_>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..view.active.len()).collect();
    order.sort_by_key(|&p| {
        let j = &view.active[p];
        (view.spec(j).map(|s| s.submit), j.id)
    });
    order
}

impl Policy for SiaPolicy {
    fn name(&self) -> &str {
        "sia"
    }

    /// Sia chooses each job's GPU type and count at its rounds: a job waits for GPUs of a
    /// type it may use (any count from one up), else for the round.
    fn pending_reason(
        &self,
        view: &ClusterView<'_>,
        job: &tessera_model::TrainingJob,
        detail: tessera_sched::Detail,
    ) -> Option<tessera_sched::Waiting> {
        use tessera_sched::{WaitKind, Waiting};
        // Sia may shrink a job to one GPU of any type it allows: it waits for GPUs only when
        // no GPU of those types is free.
        let one = tessera_model::TrainingJob {
            gpus: 1,
            cpu: None,
            memory: None,
            ..job.clone()
        };
        let kind = match tessera_sched::reasons::classify_whole(view, &one) {
            WaitKind::Order => WaitKind::Order,
            _ => tessera_sched::reasons::classify_whole(view, job),
        };
        let round = self.round;
        Some(Waiting::new(kind).note(detail, move || match kind {
            WaitKind::Order => {
                format!("Sia picks GPU types and counts at its rounds (every {round})")
            }
            _ => "no GPU of a type Sia may give it is free".to_string(),
        }))
    }

    fn round_length(&self) -> Option<SimDuration> {
        Some(self.round)
    }

    /// Only the solved job set is kept per job; a finished job leaving it still counts as a
    /// change of the set (unrenumbered, the next round would see it gone and solve again).
    fn renumber_jobs(&mut self, map: &[Option<JobId>]) -> bool {
        let before = self.solved_for.len();
        self.solved_for = self
            .solved_for
            .iter()
            .filter_map(|&j| crate::renumbered(map, j))
            .collect();
        self.solved_for_left |= self.solved_for.len() != before;
        true
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let types = cluster_types(view.cluster);
        let held = holdings(view, &types);
        let configs = configs(view, &types, &held);
        let order = arrival_order(view);
        let mut ids: Vec<tessera_model::JobId> = view.active.iter().map(|j| j.id).collect();
        ids.sort_unstable();
        // Goodputs are fixed per job here, so with the same jobs the ILP has the same
        // optimum as last round (what they now hold): solve only when the job set changed.
        let resolve = view.trigger.round && (ids != self.solved_for || self.solved_for_left);
        let target: Vec<Option<(usize, u32)>> = if resolve {
            self.solved_for = ids;
            self.solved_for_left = false;
            let capacity: Vec<u64> = types.iter().map(|t| t.capacity).collect();
            let mut left: Vec<i64> = capacity.iter().map(|&c| c as i64).collect();
            // Warm start: running jobs keep what they hold, then the greedy fill.
            let mut start: Vec<Option<usize>> = vec![None; configs.len()];
            for (pos, h) in held.iter().enumerate() {
                if let Some((t, count)) = *h {
                    if let Some(k) = configs[pos]
                        .iter()
                        .position(|c| (c.t, c.count) == (t, count))
                    {
                        start[pos] = Some(k);
                        left[t] -= i64::from(count);
                    }
                }
            }
            let kept = start.clone();
            let waiting: Vec<usize> = order
                .iter()
                .copied()
                .filter(|&p| start[p].is_none())
                .collect();
            let filled = greedy(&waiting, &configs, &mut left);
            for (s, f) in start.iter_mut().zip(filled) {
                if s.is_none() {
                    *s = f;
                }
            }
            let groups = groups(&configs, &order, true);
            let out = solve_ilp(&configs, &groups, &capacity, &start, &kept, self.limits);
            let s = &mut self.stats;
            s.solves += 1;
            s.node_limit_hits += u64::from(out.node_limit_hit);
            s.relaxed += u64::from(out.relaxed);
            s.time_limit_hits += u64::from(out.time_limit_hit);
            s.failures += u64::from(out.failed);
            s.times.record(out.secs);
            s.max_vars = s.max_vars.max(out.vars as u64);
            s.max_groups = s.max_groups.max(out.groups as u64);
            s.max_nodes = s.max_nodes.max(out.nodes);
            out.pick
                .iter()
                .enumerate()
                .map(|(pos, k)| k.map(|k| (configs[pos][k].t, configs[pos][k].count)))
                .collect()
        } else {
            // Between rounds: running jobs stay, waiting ones take free GPUs.
            let mut left: Vec<i64> = types.iter().map(|t| t.capacity as i64).collect();
            for (t, count) in held.iter().flatten() {
                left[*t] -= i64::from(*count);
            }
            let waiting: Vec<usize> = order
                .iter()
                .copied()
                .filter(|&p| held[p].is_none())
                .collect();
            let filled = greedy(&waiting, &configs, &mut left);
            held.iter()
                .zip(filled)
                .enumerate()
                .map(|(pos, (h, f))| {
                    h.or_else(|| f.map(|k| (configs[pos][k].t, configs[pos][k].count)))
                })
                .collect()
        };
        apply_configs(view, &types, &target, &held, actions);
    }

    fn stats(&self) -> Vec<(String, f64)> {
        let s = &self.stats;
        let mut out = vec![
            ("ilp_solves".into(), s.solves as f64),
            ("ilp_node_limit_hits".into(), s.node_limit_hits as f64),
            ("ilp_relaxed_solves".into(), s.relaxed as f64),
            ("ilp_time_limit_hits".into(), s.time_limit_hits as f64),
            ("ilp_failures".into(), s.failures as f64),
        ];
        out.extend(s.times.stats("ilp"));
        out.push(("ilp_vars_max".into(), s.max_vars as f64));
        out.push(("ilp_groups_max".into(), s.max_groups as f64));
        out.push(("ilp_nodes_max".into(), s.max_nodes as f64));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(t: usize, count: u32, value: f64) -> Config {
        Config { t, count, value }
    }

    fn unlimited() -> IlpLimits {
        IlpLimits {
            nodes: u64::MAX,
            time_s: 60.0,
            mip_gap: 0.0,
        }
    }

    #[test]
    fn ilp_beats_the_greedy_start_and_respects_capacity() {
        // Two GPUs of one type. Greedy (value per GPU) gives job 0 one GPU (1.0) and job 1,
        // which needs two, nothing; job 0 on both GPUs is worth 1.9.
        let configs = vec![vec![c(0, 1, 1.0), c(0, 2, 1.9)], vec![c(0, 2, 1.5)]];
        let mut left = vec![2];
        let start = greedy(&[0, 1], &configs, &mut left);
        assert_eq!(start, [Some(0), None]);
        let g = groups(&configs, &[0, 1], true);
        let out = solve_ilp(&configs, &g, &[2], &start, &[None, None], unlimited());
        assert!(!out.failed && !out.node_limit_hit && !out.time_limit_hit);
        assert_eq!(out.pick, [Some(1), None]);
        assert_eq!(out.vars, 3);
        assert!((value(&configs, &out.pick) - 1.9).abs() < 1e-12);
        assert!(feasible(&configs, &[2], &out.pick));
        assert!(!feasible(&configs, &[2], &[Some(1), Some(0)]));
    }

    #[test]
    fn dominated_configurations_are_pruned() {
        // On type 0, 4 GPUs are worth no more than 2; on type 1 more GPUs are worth more.
        let kept = prune(vec![
            c(0, 1, 1.0),
            c(0, 2, 1.3),
            c(0, 4, 1.3),
            c(1, 1, 1.1),
            c(1, 2, 1.2),
        ]);
        assert_eq!(
            kept,
            [c(0, 1, 1.0), c(0, 2, 1.3), c(1, 1, 1.1), c(1, 2, 1.2)]
        );
    }

    #[test]
    fn identical_jobs_share_a_group_and_holders_keep_their_configuration() {
        // Three identical waiting jobs and one holding config 1 (its values differ).
        let same = vec![c(0, 1, 1.0), c(1, 1, 1.3)];
        let holder = vec![c(0, 1, 0.98), c(1, 1, 1.4)];
        let configs = vec![same.clone(), holder, same.clone(), same];
        let g = groups(&configs, &[0, 1, 2, 3], true);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].members, [0, 2, 3]);
        assert_eq!(g[1].members, [1]);
        // One GPU of each type: the holder keeps type 1, the first waiting job gets type 0.
        let held = [None, Some(1), None, None];
        let out = solve_ilp(&configs, &g, &[1, 1], &held, &held, unlimited());
        assert_eq!(out.pick, [Some(0), Some(1), None, None]);
    }

    /// Many one-GPU jobs of four kinds whose best configurations overlap, on a tight
    /// cluster: the search needs branching, so a node cap of 1 stops it.
    fn contended() -> (Vec<Vec<Config>>, Vec<u64>) {
        let mut configs = Vec::new();
        for i in 0..40u32 {
            let k = f64::from(i % 4);
            configs.push(vec![
                c(0, 1, 1.0 + 0.01 * k),
                c(0, 2, 1.2 + 0.013 * k),
                c(1, 1, 1.1 - 0.02 * k),
                c(1, 4, 1.35 + 0.007 * k),
                c(2, 2, 1.25 - 0.011 * k),
            ]);
        }
        (configs, vec![7, 9, 5])
    }

    #[test]
    fn node_cap_is_honoured_and_the_incumbent_is_no_worse_than_the_warm_start() {
        let (configs, capacity) = contended();
        let order: Vec<usize> = (0..configs.len()).collect();
        let mut left: Vec<i64> = capacity.iter().map(|&c| c as i64).collect();
        let start = greedy(&order, &configs, &mut left);
        let held = vec![None; configs.len()];
        let g = groups(&configs, &order, true);
        let full = solve_ilp(&configs, &g, &capacity, &start, &held, unlimited());
        assert!(
            !full.node_limit_hit && full.nodes > 1,
            "{} nodes",
            full.nodes
        );
        for cap in [1, 3] {
            let limits = IlpLimits {
                nodes: cap,
                ..unlimited()
            };
            let out = solve_ilp(&configs, &g, &capacity, &start, &held, limits);
            assert!(out.node_limit_hit, "cap {cap}");
            assert!(out.nodes <= cap, "cap {cap}: {} nodes", out.nodes);
            assert!(feasible(&configs, &capacity, &out.pick));
            let v = value(&configs, &out.pick);
            assert!(v >= value(&configs, &start) - 1e-9);
            assert!(v <= value(&configs, &full.pick) + 1e-9);
            // Deterministic: the same inputs give the same incumbent.
            assert_eq!(
                out,
                IlpOutcome {
                    secs: out.secs,
                    ..solve_ilp(&configs, &g, &capacity, &start, &held, limits)
                }
            );
        }
    }

    #[test]
    fn node_cap_zero_rounds_the_relaxation_without_branching() {
        let (configs, capacity) = contended();
        let order: Vec<usize> = (0..configs.len()).collect();
        let mut left: Vec<i64> = capacity.iter().map(|&c| c as i64).collect();
        let start = greedy(&order, &configs, &mut left);
        let held = vec![None; configs.len()];
        let g = groups(&configs, &order, true);
        let full = solve_ilp(&configs, &g, &capacity, &start, &held, unlimited());
        let limits = IlpLimits {
            nodes: 0,
            ..unlimited()
        };
        let out = solve_ilp(&configs, &g, &capacity, &start, &held, limits);
        assert!(out.relaxed && !out.node_limit_hit && !out.failed);
        assert_eq!(out.nodes, 0);
        assert!(feasible(&configs, &capacity, &out.pick));
        let (v, best) = (value(&configs, &out.pick), value(&configs, &full.pick));
        assert!(v >= value(&configs, &start) - 1e-9);
        assert!(v <= best + 1e-9);
        // 21 GPUs, 40 jobs: nearly the optimum (within one configuration per row).
        assert!(
            v >= best - 1.5 * (capacity.len() + g.len()) as f64,
            "{v} vs {best}"
        );
        assert_eq!(
            out,
            IlpOutcome {
                secs: out.secs,
                ..solve_ilp(&configs, &g, &capacity, &start, &held, limits)
            }
        );
        assert_eq!(SiaPolicy::new(None).limits.nodes, 0, "the default rounds");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]

        /// The rounded relaxation is feasible, no better than the ILP optimum and within one
        /// configuration's value per LP row (types + groups) of it.
        #[test]
        fn rounded_relaxation_is_near_the_ilp_optimum(
            kinds in proptest::collection::vec(
                (proptest::collection::vec((0usize..2, 0usize..3, 0u32..100), 1..4), 1usize..6),
                1..5),
            caps in proptest::collection::vec(0u64..9, 2),
        ) {
            let mut configs = Vec::new();
            for (cs, copies) in &kinds {
                let mut list: Vec<Config> = cs
                    .iter()
                    .map(|&(t, k, v)| c(t, [1u32, 2, 4][k], 1.0 + f64::from(v) / 100.0))
                    .collect();
                list.sort_by_key(|c| (c.t, c.count));
                list.dedup_by_key(|c| (c.t, c.count));
                for _ in 0..*copies {
                    configs.push(list.clone());
                }
            }
            let order: Vec<usize> = (0..configs.len()).collect();
            let none = vec![None; configs.len()];
            let g = groups(&configs, &order, true);
            let ilp = solve_ilp(&configs, &g, &caps, &none, &none, unlimited());
            let relaxed = IlpLimits { nodes: 0, ..unlimited() };
            let r = solve_ilp(&configs, &g, &caps, &none, &none, relaxed);
            proptest::prop_assert!(r.relaxed && !r.failed);
            proptest::prop_assert!(feasible(&configs, &caps, &r.pick));
            let (vi, vr) = (value(&configs, &ilp.pick), value(&configs, &r.pick));
            // Values are at most 2 per configuration.
            let slack = 2.0 * (caps.len() + g.len()) as f64;
            proptest::prop_assert!(vr <= vi + 1e-6 && vr >= vi - slack, "ilp {} rounded {}", vi, vr);
        }

        /// Grouping identical jobs keeps the per-job ILP's optimum.
        #[test]
        fn grouped_ilp_has_the_per_job_optimum(
            kinds in proptest::collection::vec(
                (proptest::collection::vec((0usize..2, 0usize..3, 0u32..100), 1..4), 1usize..5),
                1..4),
            caps in proptest::collection::vec(0u64..7, 2),
        ) {
            let mut configs = Vec::new();
            for (cs, copies) in &kinds {
                let mut list: Vec<Config> = cs
                    .iter()
                    .map(|&(t, k, v)| c(t, [1u32, 2, 4][k], 1.0 + f64::from(v) / 100.0))
                    .collect();
                list.sort_by_key(|c| (c.t, c.count));
                list.dedup_by_key(|c| (c.t, c.count));
                for _ in 0..*copies {
                    configs.push(list.clone());
                }
            }
            let order: Vec<usize> = (0..configs.len()).collect();
            let none = vec![None; configs.len()];
            let per_job = groups(&configs, &order, false);
            let grouped = groups(&configs, &order, true);
            proptest::prop_assert!(grouped.len() <= kinds.len());
            let a = solve_ilp(&configs, &per_job, &caps, &none, &none, unlimited());
            let b = solve_ilp(&configs, &grouped, &caps, &none, &none, unlimited());
            proptest::prop_assert!(feasible(&configs, &caps, &a.pick));
            proptest::prop_assert!(feasible(&configs, &caps, &b.pick));
            let (va, vb) = (value(&configs, &a.pick), value(&configs, &b.pick));
            proptest::prop_assert!((va - vb).abs() < 1e-6, "per job {} vs grouped {}", va, vb);
        }
    }

    #[test]
    fn values_favour_faster_configurations_and_penalise_restarts() {
        // G = 1 → 1.0; G = 4 → 1.5: faster is worth more, an unserved job worth 0.
        let v = |g: f64| 2.0 - g.powf(SIA_P);
        assert!((v(1.0) - 1.0).abs() < 1e-12 && (v(4.0) - 1.5).abs() < 1e-12);
        assert!(v(4.0 * SIA_RESTART_FACTOR) < v(4.0));
    }
}
