//! The `gavel` policy (Narayanan et al., OSDI'20): a heterogeneity-aware allocation matrix
//! solved as an LP, realised round by round.
//!
//! **Allocation.** Variables `x[j][t]` ∈ [0, 1]: the fraction of time job `j` should run on
//! GPU type `t` at its requested count (Gavel's scale factor). Constraints: `Σ_t x[j][t] ≤ 1`
//! and `Σ_j x[j][t] · gpus_j ≤ capacity_t`. A job's normalised throughput is
//! `Σ_t x[j][t] · thr[j][t] / thr_eq[j]`, where `thr_eq` is its throughput under an equal,
//! capacity-proportional time share of the types it may use (Gavel normalises by such a
//! share). Objectives:
//! - `gavel` (max-min fairness): maximise the smallest normalised throughput, plus a 10⁻³
//!   weight on their sum so that capacity the minimum does not need is still handed out;
//! - `gavel-max-sum` (max-sum throughput): maximise the sum of normalised throughputs (raw
//!   iterations/s of different job types are not comparable, so they are normalised too).
//!
//! The LP is solved again whenever the set of active jobs changed, with microlp and a time
//! limit; its solve time is reported in `stats()`.
//!
//! **Realisation.** Every round (default 360 s, as in Gavel) each (job, type) with `x > 0`
//! gets the priority `x[j][t] / f[j][t]`, with `f` the fraction of the job's time so far it
//! spent on type `t` (never-served pairs first). In priority order, each job is given its
//! type while GPUs of that type are left; what remains goes to the other jobs (first come,
//! fastest type first) so that no GPU idles while a job waits. A job that stays on its
//! type keeps its GPUs; one that changes type restarts (checkpoint + restore). Between rounds
//! arriving jobs only take free GPUs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOptions, Variable};
use tessera_model::{JobId, SimDuration, SimTime};
use tessera_sched::{Action, ActiveJob, ClusterView, JobState, Ledger, Policy};

use super::common::{cluster_types, place_on, throughput_on, type_of, GpuType};
use super::solve::SolveTimes;
use crate::{renumber_map, renumbered};

/// Gavel's round length.
pub const GAVEL_ROUND: SimDuration = SimDuration::from_secs(360);

/// Wall-clock guard of one LP solve, seconds. Over job classes the LP has a few hundred
/// variables and never comes near it; a solve that hits it counts as a failure.
pub const GAVEL_LP_TIME_LIMIT_S: f64 = 10.0;

/// Weight of the sum of normalised throughputs next to the max-min objective.
const SUM_WEIGHT: f64 = 1e-3;

/// What the allocation LP optimises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// Max-min fairness on normalised throughput.
    MaxMinFairness,
    /// Max-sum of normalised throughput.
    MaxSumThroughput,
}

/// The LP's answer for one job: time fraction per GPU type (same order as the types).
type Fractions = Vec<f64>;

/// Counters for `stats()`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LpStats {
    /// LPs solved.
    pub solves: u64,
    /// LPs that failed or hit the time guard (the previous shares were kept, new jobs
    /// waited for the work-conserving fill).
    pub failures: u64,
    /// Wall time of every solve.
    pub times: SolveTimes,
    /// Jobs in the largest LP.
    pub max_jobs: u64,
    /// Rows (job classes) in the largest LP.
    pub max_classes: u64,
}

impl LpStats {
    pub(crate) fn record(&mut self, secs: f64, jobs: usize, classes: usize, ok: bool) {
        self.solves += 1;
        self.failures += u64::from(!ok);
        self.times.record(secs);
        self.max_jobs = self.max_jobs.max(jobs as u64);
        self.max_classes = self.max_classes.max(classes as u64);
    }
}

/// The Gavel policy.
#[derive(Debug)]
pub struct GavelPolicy {
    name: &'static str,
    objective: Objective,
    round: SimDuration,
    time_limit_s: f64,
    /// LP shares of the current job set.
    shares: BTreeMap<JobId, Fractions>,
    /// Job set the shares were solved for (sorted).
    solved_for: Vec<JobId>,
    /// A job of `solved_for` finished and was renumbered away: the set changed, solve again.
    solved_for_left: bool,
    /// Seconds each job held each type, and when it arrived (first seen).
    received: BTreeMap<JobId, (SimTime, Fractions)>,
    last_now: Option<SimTime>,
    stats: LpStats,
}

impl GavelPolicy {
    /// A Gavel policy registered as `name`.
    pub fn new(name: &'static str, objective: Objective, round: Option<SimDuration>) -> Self {
        GavelPolicy {
            name,
            objective,
            round: round.unwrap_or(GAVEL_ROUND),
            time_limit_s: GAVEL_LP_TIME_LIMIT_S,
            shares: BTreeMap::new(),
            solved_for: Vec::new(),
            solved_for_left: false,
            received: BTreeMap::new(),
            last_now: None,
            stats: LpStats::default(),
        }
    }

    /// Solve statistics so far.
    pub fn lp_stats(&self) -> &LpStats {
        &self.stats
    }

    /// Brings per-type service up to `now` and forgets finished jobs.
    fn account(&mut self, view: &ClusterView<'_>, types: &[GpuType]) {
        let dt = self
            .last_now
            .map_or(0.0, |t| view.now.saturating_since(t).as_secs_f64());
        self.last_now = Some(view.now);
        let mut live: BTreeMap<JobId, (SimTime, Fractions)> = BTreeMap::new();
        for job in view.active {
            let mut entry = self
                .received
                .remove(&job.id)
                .unwrap_or_else(|| (view.now, vec![0.0; types.len()]));
            if let Some(t) = job
                .allocation
                .as_ref()
                .and_then(|a| type_of(view.cluster, a))
                .and_then(|g| types.iter().position(|x| x.id == g))
            {
                entry.1[t] += dt;
            }
            live.insert(job.id, entry);
        }
        self.received = live;
    }

    /// Solves the LP again when the job set changed since the last solve. Called at round
    /// boundaries only: Gavel recomputes its allocation at the start of the round after jobs
    /// arrived or left (between rounds nothing is realised from it but the fill of free
    /// GPUs), and one solve per round instead of one per arrival or completion keeps the
    /// 1,900-job replay in seconds.
    fn resolve_if_needed(&mut self, view: &ClusterView<'_>, types: &[GpuType]) {
        let mut ids: Vec<JobId> = view.active.iter().map(|j| j.id).collect();
        ids.sort_unstable();
        if ids == self.solved_for && !self.solved_for_left {
            return;
        }
        self.solved_for = ids;
        self.solved_for_left = false;
        let problem = AllocationProblem::build(view, types, true);
        let started = Instant::now();
        let solved = problem.solve(self.objective, self.time_limit_s);
        let secs = started.elapsed().as_secs_f64();
        self.stats
            .record(secs, problem.jobs(), problem.rows.len(), solved.is_some());
        match solved {
            Some(shares) => self.shares = shares,
            None => {
                // Keep what is known; a job without a share waits for the fill pass.
                self.shares
                    .retain(|j, _| self.solved_for.binary_search(j).is_ok());
            }
        }
    }
}

/// One row of the allocation LP: a class of jobs with the same GPU count and the same
/// throughput on every type (so the same equal-share throughput). Gavel solves over such
/// classes: jobs of a class are interchangeable, and averaging any optimal allocation over
/// a class's members is feasible and no worse for either objective (both are linear in the
/// members' normalised throughputs, and max-min's minimum can only rise), so an optimum
/// that gives every member the same fractions exists and the class LP finds it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LpRow {
    pub(crate) gpus: u32,
    /// Throughput per type at `gpus` (0 = unusable).
    pub(crate) thr: Vec<f64>,
    /// Throughput under an equal, capacity-proportional share of the usable types.
    pub(crate) eq: f64,
    /// Jobs of the class, by id.
    pub(crate) members: Vec<JobId>,
}

/// One LP instance: jobs with at least one usable type, grouped into classes or not.
#[derive(Clone, Debug)]
pub(crate) struct AllocationProblem {
    pub(crate) rows: Vec<LpRow>,
    pub(crate) capacity: Vec<f64>,
}

impl AllocationProblem {
    pub(crate) fn build(
        view: &ClusterView<'_>,
        types: &[GpuType],
        group: bool,
    ) -> AllocationProblem {
        let mut jobs = Vec::new();
        for job in view.active {
            let Some(spec) = view.spec(job) else { continue };
            let thr: Vec<f64> = types
                .iter()
                .map(|t| {
                    if u64::from(spec.gpus) > t.capacity {
                        0.0
                    } else {
                        throughput_on(view.cluster, job, spec, t.id, spec.gpus)
                    }
                })
                .collect();
            jobs.push((job.id, spec.gpus, thr));
        }
        let capacity: Vec<f64> = types.iter().map(|t| t.capacity as f64).collect();
        AllocationProblem::from_jobs(jobs, capacity, group)
    }

    /// The LP over `jobs` (id, GPUs, throughput per type): one row per job, or per class of
    /// identical jobs when `group`. Jobs that can use no type are left out.
    pub(crate) fn from_jobs(
        jobs: Vec<(JobId, u32, Vec<f64>)>,
        capacity: Vec<f64>,
        group: bool,
    ) -> AllocationProblem {
        let mut rows: Vec<LpRow> = Vec::new();
        // Exact grouping key: GPU count and the bit patterns of the throughputs. A BTreeMap,
        // so row order (and with it the solver's path) depends on the jobs only.
        let mut index: BTreeMap<(u32, Vec<u64>), usize> = BTreeMap::new();
        for (id, gpus, thr) in jobs {
            // Equal share: time on each usable type in proportion to its size.
            let usable: f64 = capacity
                .iter()
                .zip(&thr)
                .filter(|(_, &v)| v > 0.0)
                .map(|(c, _)| *c)
                .sum();
            if usable <= 0.0 {
                continue;
            }
            if group {
                let key = (gpus, thr.iter().map(|v| v.to_bits()).collect());
                if let Some(&r) = index.get(&key) {
                    rows[r].members.push(id);
                    continue;
                }
                index.insert(key, rows.len());
            }
            let eq: f64 = capacity
                .iter()
                .zip(&thr)
                .map(|(c, &v)| v * c / usable)
                .sum();
            rows.push(LpRow {
                gpus,
                thr,
                eq,
                members: vec![id],
            });
        }
        AllocationProblem { rows, capacity }
    }

    /// Jobs over all rows.
    pub(crate) fn jobs(&self) -> usize {
        self.rows.iter().map(|r| r.members.len()).sum()
    }

    /// Per-row fractions (a member's time on each type), or `None` when the solver failed
    /// or hit the time guard.
    pub(crate) fn solve_rows(
        &self,
        objective: Objective,
        time_limit_s: f64,
    ) -> Option<Vec<Fractions>> {
        if self.rows.is_empty() {
            return Some(Vec::new());
        }
        let mut lp = Problem::new(OptimizationDirection::Maximize);
        let z =
            (objective == Objective::MaxMinFairness).then(|| lp.add_var(1.0, (0.0, f64::INFINITY)));
        let x: Vec<Vec<Option<Variable>>> = self
            .rows
            .iter()
            .map(|r| {
                // Weight of one normalised-throughput unit of this row in the objective.
                let n = r.members.len() as f64;
                let w = match objective {
                    Objective::MaxMinFairness => SUM_WEIGHT * n,
                    Objective::MaxSumThroughput => n,
                };
                r.thr
                    .iter()
                    .map(|&v| (v > 0.0).then(|| lp.add_var(w * v / r.eq, (0.0, 1.0))))
                    .collect()
            })
            .collect();
        for xs in &x {
            let sum: Vec<(Variable, f64)> = xs.iter().flatten().map(|&v| (v, 1.0)).collect();
            lp.add_constraint(sum, ComparisonOp::Le, 1.0);
        }
        for (t, cap) in self.capacity.iter().enumerate() {
            let used: Vec<(Variable, f64)> = self
                .rows
                .iter()
                .zip(&x)
                .filter_map(|(r, xs)| {
                    xs[t].map(|v| (v, r.members.len() as f64 * f64::from(r.gpus)))
                })
                .collect();
            if !used.is_empty() {
                lp.add_constraint(used, ComparisonOp::Le, *cap);
            }
        }
        if let Some(z) = z {
            for (r, xs) in self.rows.iter().zip(&x) {
                let mut e: Vec<(Variable, f64)> = xs
                    .iter()
                    .zip(&r.thr)
                    .filter_map(|(v, &t)| v.map(|v| (v, t / r.eq)))
                    .collect();
                e.push((z, -1.0));
                lp.add_constraint(e, ComparisonOp::Ge, 0.0);
            }
        }
        let mut options = SolveOptions::default();
        options.time_limit = Some(Duration::from_secs_f64(time_limit_s.max(0.001)));
        let sol = lp.solve_with(options).ok()?.into_solution().ok()?;
        if sol.status() != microlp::SolutionStatus::Optimal {
            return None;
        }
        Some(
            x.iter()
                .map(|xs| {
                    xs.iter()
                        .map(|v| v.map_or(0.0, |v| sol.var_value(v).clamp(0.0, 1.0)))
                        .collect()
                })
                .collect(),
        )
    }

    /// Fractions per job.
    pub(crate) fn solve(
        &self,
        objective: Objective,
        time_limit_s: f64,
    ) -> Option<BTreeMap<JobId, Fractions>> {
        let rows = self.solve_rows(objective, time_limit_s)?;
        Some(
            self.rows
                .iter()
                .zip(rows)
                .flat_map(|(r, f)| r.members.iter().map(move |&id| (id, f.clone())))
                .collect(),
        )
    }
}

impl Policy for GavelPolicy {
    fn name(&self) -> &str {
        self.name
    }

    fn round_length(&self) -> Option<SimDuration> {
        Some(self.round)
    }

    /// Shares, service received and the solved job set are keyed by id in ordered
    /// containers, so remapping keeps every order. A finished job is forgotten, but the set
    /// it was solved with still counts as changed (unrenumbered, the next round would see
    /// it gone and solve again).
    fn renumber_jobs(&mut self, map: &[Option<JobId>]) -> bool {
        self.shares = renumber_map(std::mem::take(&mut self.shares), map);
        self.received = renumber_map(std::mem::take(&mut self.received), map);
        let before = self.solved_for.len();
        self.solved_for = self
            .solved_for
            .iter()
            .filter_map(|&j| renumbered(map, j))
            .collect();
        self.solved_for_left |= self.solved_for.len() != before;
        true
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let types = cluster_types(view.cluster);
        self.account(view, &types);
        if view.trigger.round {
            self.resolve_if_needed(view, &types);
        }

        // Candidates (priority, job position, type index), highest priority first.
        let mut candidates: Vec<(f64, usize, usize)> = Vec::new();
        for (pos, job) in view.active.iter().enumerate() {
            let (Some(x), Some((since, got))) =
                (self.shares.get(&job.id), self.received.get(&job.id))
            else {
                continue;
            };
            let age = view
                .now
                .saturating_since(*since)
                .as_secs_f64()
                .max(self.round.as_secs_f64());
            for (t, &share) in x.iter().enumerate() {
                if share <= 1e-6 {
                    continue;
                }
                let fraction = got.get(t).copied().unwrap_or(0.0) / age;
                // Never-served pairs come first, larger shares first among them.
                let priority = if fraction > 0.0 {
                    share / fraction
                } else {
                    1e12 * share
                };
                candidates.push((priority, pos, t));
            }
        }
        candidates.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(view.active[a.1].id.cmp(&view.active[b.1].id))
                .then(a.2.cmp(&b.2))
        });
        realise(
            view,
            &types,
            &candidates,
            view.trigger.round,
            self.round,
            actions,
        );
    }

    fn stats(&self) -> Vec<(String, f64)> {
        let s = &self.stats;
        let mut out = vec![
            ("lp_solves".into(), s.solves as f64),
            ("lp_failures".into(), s.failures as f64),
        ];
        out.extend(s.times.stats("lp"));
        out.push(("lp_jobs_max".into(), s.max_jobs as f64));
        out.push(("lp_classes_max".into(), s.max_classes as f64));
        out
    }
}

/// Turns a priority list of (job, type) pairs into actions. On a round every job is placed
/// afresh (keeping its GPUs when it stays on its type); otherwise only free GPUs are given
/// to queued jobs.
fn realise(
    view: &ClusterView<'_>,
    types: &[GpuType],
    candidates: &[(f64, usize, usize)],
    replan: bool,
    lease: SimDuration,
    actions: &mut Vec<Action>,
) {
    let n = view.active.len();
    // Chosen type per active job (index into `types`).
    let mut chosen: Vec<Option<usize>> = vec![None; n];
    let mut left: Vec<i64> = types.iter().map(|t| t.capacity as i64).collect();
    let current: Vec<Option<usize>> = view
        .active
        .iter()
        .map(|j| {
            j.allocation
                .as_ref()
                .and_then(|a| type_of(view.cluster, a))
                .and_then(|g| types.iter().position(|t| t.id == g))
        })
        .collect();
    for (pos, job) in view.active.iter().enumerate() {
        // Between rounds running jobs keep what they hold. On a round, so do those that
        // have not yet made progress for one lease since their last (re)start ended its
        // restore: every restart then buys at least a round of progress. Without it, a
        // restart cost longer than a round (the Crius repro charges up to 630 s against
        // 360 s rounds) lets the time sharing rotate jobs that never progress.
        let leased = job.resumes_at.is_some_and(|r| view.now < r + lease);
        if !replan || leased {
            if let (Some(t), Some(a)) = (current[pos], job.allocation.as_ref()) {
                chosen[pos] = Some(t);
                left[t] -= i64::from(a.gpus());
            }
        }
    }
    let gpus_of = |pos: usize| view.spec(&view.active[pos]).map_or(u32::MAX, |s| s.gpus);
    for &(_, pos, t) in candidates {
        if chosen[pos].is_some() {
            continue;
        }
        let g = i64::from(gpus_of(pos));
        if left[t] >= g {
            chosen[pos] = Some(t);
            left[t] -= g;
        }
    }
    // Work conservation: leftover GPUs to waiting jobs, first come; a running job stays on
    // its type when that has room (no restart), others take their fastest type with room.
    let mut waiting: Vec<usize> = (0..n).filter(|&p| chosen[p].is_none()).collect();
    waiting.sort_by_key(|&p| {
        (
            view.jobs.get(view.active[p].id.index()).map(|s| s.submit),
            view.active[p].id,
        )
    });
    for pos in waiting {
        let job = &view.active[pos];
        let Some(spec) = view.spec(job) else { continue };
        let g = i64::from(spec.gpus);
        if let Some(t) = current[pos].filter(|&t| left[t] >= g) {
            chosen[pos] = Some(t);
            left[t] -= g;
            continue;
        }
        let mut best: Option<(f64, usize)> = None;
        for (t, ty) in types.iter().enumerate() {
            if left[t] < g {
                continue;
            }
            let thr = throughput_on(view.cluster, job, spec, ty.id, spec.gpus);
            if thr > 0.0 && best.is_none_or(|(b, _)| thr > b) {
                best = Some((thr, t));
            }
        }
        if let Some((_, t)) = best {
            chosen[pos] = Some(t);
            left[t] -= g;
        }
    }
    apply(view, types, &chosen, &current, actions);
}

/// Emits the actions that move every active job to its chosen type at its requested count:
/// preempt the ones dropped, keep the ones staying, then start or move the rest.
pub(crate) fn apply(
    view: &ClusterView<'_>,
    types: &[GpuType],
    chosen: &[Option<usize>],
    current: &[Option<usize>],
    actions: &mut Vec<Action>,
) {
    let counts: Vec<Option<(usize, u32)>> = chosen
        .iter()
        .enumerate()
        .map(|(pos, c)| c.and_then(|t| view.spec(&view.active[pos]).map(|s| (t, s.gpus))))
        .collect();
    let held: Vec<Option<(usize, u32)>> = view
        .active
        .iter()
        .zip(current)
        .map(|(j, c)| c.and_then(|t| j.allocation.as_ref().map(|a| (t, a.gpus()))))
        .collect();
    apply_configs(view, types, &counts, &held, actions);
}

/// Emits actions for target configurations (type index, count) per active job: jobs whose
/// target equals what they hold keep it; jobs losing everything are preempted first; movers
/// are resized one by one (each released before it is placed, so no action targets GPUs
/// that a later action frees); queued jobs start last. A mover or starter that does not fit
/// (fragmentation) is preempted or left waiting.
pub(crate) fn apply_configs(
    view: &ClusterView<'_>,
    types: &[GpuType],
    target: &[Option<(usize, u32)>],
    held: &[Option<(usize, u32)>],
    actions: &mut Vec<Action>,
) {
    let mut ledger = Ledger::new(view.cluster, view.free);
    let mut movers = Vec::new();
    let mut starters = Vec::new();
    for (pos, job) in view.active.iter().enumerate() {
        match (job.state, job.allocation.as_ref(), target[pos]) {
            (JobState::Running, Some(a), None) => {
                actions.push(Action::Preempt { job: job.id });
                ledger.release(a);
            }
            (JobState::Running, Some(_), Some(t)) if held[pos] == Some(t) => {}
            (JobState::Running, Some(_), Some(_)) => movers.push(pos),
            (_, None, Some(_)) => starters.push(pos),
            _ => {}
        }
    }
    for pos in movers {
        let job: &ActiveJob = &view.active[pos];
        let (Some(spec), Some(old), Some((t, count))) =
            (view.spec(job), job.allocation.as_ref(), target[pos])
        else {
            continue;
        };
        ledger.release(old);
        match place_on(&mut ledger, job, spec, types[t].id, count) {
            Some(allocation) => actions.push(Action::Resize {
                job: job.id,
                allocation,
            }),
            None => actions.push(Action::Preempt { job: job.id }),
        }
    }
    for pos in starters {
        let job = &view.active[pos];
        let (Some(spec), Some((t, count))) = (view.spec(job), target[pos]) else {
            continue;
        };
        if let Some(allocation) = place_on(&mut ledger, job, spec, types[t].id, count) {
            actions.push(Action::Start {
                job: job.id,
                allocation,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(jobs: Vec<(u32, Vec<f64>)>, capacity: Vec<f64>) -> AllocationProblem {
        let jobs = jobs
            .into_iter()
            .enumerate()
            .map(|(i, (gpus, thr))| (JobId(i as u32), gpus, thr))
            .collect();
        AllocationProblem::from_jobs(jobs, capacity, false)
    }

    #[test]
    fn max_min_gives_each_job_its_relative_advantage() {
        // Opposite preferences, one GPU of each type: each job gets its fast type full time.
        let p = problem(
            vec![(1, vec![1.0, 4.0]), (1, vec![4.0, 1.0])],
            vec![1.0, 1.0],
        );
        let x = p.solve(Objective::MaxMinFairness, 5.0).unwrap();
        let a = &x[&JobId(0)];
        let b = &x[&JobId(1)];
        assert!(a[1] > 0.99 && a[0] < 0.01, "{a:?}");
        assert!(b[0] > 0.99 && b[1] < 0.01, "{b:?}");
    }

    #[test]
    fn max_min_shares_a_contended_type_fairly_and_respects_capacity() {
        // Three identical one-GPU jobs, one fast GPU and one slow GPU (2× slower).
        let p = problem(vec![(1, vec![1.0, 2.0]); 3], vec![1.0, 1.0]);
        let x = p.solve(Objective::MaxMinFairness, 5.0).unwrap();
        let norm: Vec<f64> = x.values().map(|f| f[0] * 1.0 + f[1] * 2.0).collect();
        for t in 0..2 {
            let used: f64 = x.values().map(|f| f[t]).sum();
            assert!(used <= 1.0 + 1e-6, "type {t}: {used}");
        }
        // Total capacity is 3 "slow-GPU units": each job gets one.
        for n in &norm {
            assert!((n - 1.0).abs() < 1e-6, "{norm:?}");
        }
        for f in x.values() {
            assert!(f.iter().sum::<f64>() <= 1.0 + 1e-6);
        }
    }

    #[test]
    fn max_sum_favours_small_jobs_max_min_equalises() {
        // Two GPUs, a 1-GPU job and a 2-GPU job of equal normalised speed: max-sum runs the
        // small one full time (1 + 0.5), max-min gives both 2/3.
        let p = problem(vec![(1, vec![3.0]), (2, vec![5.0])], vec![2.0]);
        let sum = p.solve(Objective::MaxSumThroughput, 5.0).unwrap();
        assert!((sum[&JobId(0)][0] - 1.0).abs() < 1e-6, "{sum:?}");
        assert!((sum[&JobId(1)][0] - 0.5).abs() < 1e-6, "{sum:?}");
        let fair = p.solve(Objective::MaxMinFairness, 5.0).unwrap();
        for f in fair.values() {
            assert!((f[0] - 2.0 / 3.0).abs() < 1e-6, "{fair:?}");
        }
    }

    /// Objective value of per-job fractions, and whether they fit every constraint.
    fn evaluate(
        p: &AllocationProblem,
        x: &BTreeMap<JobId, Fractions>,
        objective: Objective,
    ) -> (f64, bool) {
        let mut norms = Vec::new();
        let mut used = vec![0.0; p.capacity.len()];
        let mut ok = true;
        for r in &p.rows {
            for id in &r.members {
                let f = &x[id];
                ok &= f.iter().sum::<f64>() <= 1.0 + 1e-6;
                ok &= f.iter().zip(&r.thr).all(|(&v, &t)| t > 0.0 || v == 0.0);
                for (u, &v) in used.iter_mut().zip(f) {
                    *u += v * f64::from(r.gpus);
                }
                norms.push(f.iter().zip(&r.thr).map(|(v, t)| v * t).sum::<f64>() / r.eq);
            }
        }
        ok &= used.iter().zip(&p.capacity).all(|(u, c)| *u <= c + 1e-6);
        let sum: f64 = norms.iter().sum();
        let value = match objective {
            Objective::MaxMinFairness => {
                norms.iter().copied().fold(f64::INFINITY, f64::min) + SUM_WEIGHT * sum
            }
            Objective::MaxSumThroughput => sum,
        };
        (value, ok)
    }

    #[test]
    fn classes_group_identical_jobs_only() {
        let jobs = vec![
            (JobId(0), 1, vec![1.0, 2.0]),
            (JobId(1), 1, vec![1.0, 2.0]),
            (JobId(2), 2, vec![1.0, 2.0]),
            (JobId(3), 1, vec![1.0, 2.5]),
            (JobId(4), 1, vec![1.0, 2.0]),
            (JobId(5), 1, vec![0.0, 0.0]),
        ];
        let p = AllocationProblem::from_jobs(jobs, vec![2.0, 2.0], true);
        let members: Vec<Vec<u32>> = p
            .rows
            .iter()
            .map(|r| r.members.iter().map(|j| j.0).collect())
            .collect();
        // Job 5 can run nowhere and is left out.
        assert_eq!(members, [vec![0, 1, 4], vec![2], vec![3]]);
        assert_eq!(p.jobs(), 5);
    }

    #[test]
    fn class_lp_gives_the_per_job_allocation_on_a_hand_case() {
        // Three jobs 4x faster on type 1 and three 4x faster on type 0, on 3 + 3 GPUs: the
        // unique optimum of both objectives runs every job on its fast type full time.
        let mut jobs = Vec::new();
        for i in 0..6 {
            let thr = if i < 3 {
                vec![1.0, 4.0]
            } else {
                vec![4.0, 1.0]
            };
            jobs.push((JobId(i), 1, thr));
        }
        for objective in [Objective::MaxMinFairness, Objective::MaxSumThroughput] {
            let per_job = AllocationProblem::from_jobs(jobs.clone(), vec![3.0, 3.0], false);
            let classes = AllocationProblem::from_jobs(jobs.clone(), vec![3.0, 3.0], true);
            assert_eq!((per_job.rows.len(), classes.rows.len()), (6, 2));
            let a = per_job.solve(objective, 5.0).unwrap();
            let b = classes.solve(objective, 5.0).unwrap();
            for (id, f) in &a {
                let g = &b[id];
                let fast = if id.0 < 3 { 1 } else { 0 };
                for x in [f, g] {
                    assert!(
                        (x[fast] - 1.0).abs() < 1e-6 && x[1 - fast].abs() < 1e-6,
                        "{objective:?} job {id:?}: per job {f:?}, classes {g:?}"
                    );
                }
            }
            let (va, _) = evaluate(&per_job, &a, objective);
            let (vb, _) = evaluate(&per_job, &b, objective);
            assert!((va - vb).abs() < 1e-9, "{va} vs {vb}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// The class LP reaches the per-job LP's optimum, and its allocation (each member the
        /// class's fractions) is feasible for the per-job LP.
        #[test]
        fn class_lp_matches_the_per_job_lp(
            kinds in proptest::collection::vec(
                (0usize..3, proptest::collection::vec(0u32..6, 3), 1usize..4), 1..5),
            caps in proptest::collection::vec(1u32..9, 3),
        ) {
            let mut jobs = Vec::new();
            for (g, thr, copies) in &kinds {
                let gpus = [1u32, 2, 4][*g];
                let thr: Vec<f64> = thr.iter().map(|&v| f64::from(v)).collect();
                for _ in 0..*copies {
                    jobs.push((JobId(jobs.len() as u32), gpus, thr.clone()));
                }
            }
            let capacity: Vec<f64> = caps.iter().map(|&c| f64::from(c)).collect();
            for objective in [Objective::MaxMinFairness, Objective::MaxSumThroughput] {
                let per_job = AllocationProblem::from_jobs(jobs.clone(), capacity.clone(), false);
                let classes = AllocationProblem::from_jobs(jobs.clone(), capacity.clone(), true);
                let a = per_job.solve(objective, 5.0).unwrap();
                let b = classes.solve(objective, 5.0).unwrap();
                let (va, oka) = evaluate(&per_job, &a, objective);
                let (vb, okb) = evaluate(&per_job, &b, objective);
                proptest::prop_assert!(oka && okb);
                // Equal infinities (a job no GPU type can run leaves max-min unbounded)
                // differ by NaN, so they are compared as values first.
                proptest::prop_assert!(
                    va == vb || (va - vb).abs() <= 1e-6 * va.abs().max(1.0),
                    "{:?}: per job {} vs classes {}", objective, va, vb
                );
            }
        }
    }

    /// A job held on the slow type K80 while V100 is free: a round that gives it no share
    /// slot (the LP has not run) must keep it where it is, not restart it on the faster type.
    #[test]
    fn a_running_job_without_a_slot_keeps_its_type() {
        use tessera_model::{Cluster, GpuCatalog, NodeId, SimDuration, TrainingJob};
        use tessera_perf::{ConfigEstimate, ConfigEstimates};
        use tessera_sched::{ActiveJob, ClusterState, Trigger};

        let cluster =
            Cluster::from_yaml(&super::super::gavel_108_yaml(), &GpuCatalog::builtin()).unwrap();
        let types = cluster_types(&cluster);
        let job = TrainingJob::simple(0, SimTime::ZERO, 2, SimDuration::from_secs(3600));
        let estimates: Vec<ConfigEstimate> = types
            .iter()
            .zip([1.0, 2.0, 4.0])
            .map(|(t, thr)| ConfigEstimate {
                gpu: t.id,
                count: 2,
                throughput: thr,
                plan: None,
            })
            .collect();
        let free0: Vec<_> = (0..cluster.nodes.len())
            .map(|n| cluster.capacity(NodeId(n as u32)))
            .collect();
        let mut active = ActiveJob {
            knowledge: tessera_model::Knowledge::of(ConfigEstimates::new(estimates)),
            ..ActiveJob::arrived(&job)
        };
        let mut ledger = Ledger::new(&cluster, &free0);
        let on_k80 = place_on(&mut ledger, &active, &job, types[0].id, 2).unwrap();
        active.state = JobState::Running;
        active.allocation = Some(on_k80.clone());
        let mut state = ClusterState::new(&cluster);
        state.take(&cluster, &on_k80);
        let mut free = free0.clone();
        for share in &on_k80.shares {
            free[share.node.index()].gpus -= share.gpus;
        }
        let jobs = vec![job];
        let active = vec![active];
        let view = ClusterView {
            now: SimTime::from_secs(360),
            trigger: Trigger {
                round: true,
                ..Trigger::default()
            },
            cluster: &cluster,
            free: &free,
            state: &state,
            jobs: &jobs,
            active: &active,
            services: &[],
        };
        let mut actions = Vec::new();
        realise(&view, &types, &[], true, GAVEL_ROUND, &mut actions);
        assert!(actions.is_empty(), "{actions:?}");
        // A slot on V100: taken once the job has progressed for a lease since its restore,
        // not before.
        let slot = [(1.0, 0, 2)];
        for (resumed, moves) in [(300, false), (0, true)] {
            let leased = vec![ActiveJob {
                resumes_at: Some(SimTime::from_secs(resumed)),
                ..active[0].clone()
            }];
            let view = ClusterView {
                active: &leased,
                ..view
            };
            let mut actions = Vec::new();
            realise(&view, &types, &slot, true, GAVEL_ROUND, &mut actions);
            if moves {
                let [Action::Resize { allocation, .. }] = actions.as_slice() else {
                    panic!("{actions:?}");
                };
                assert_eq!(type_of(&cluster, allocation), Some(types[2].id));
            } else {
                assert!(actions.is_empty(), "resumed at {resumed} s: {actions:?}");
            }
        }
        // A queued job in the same position takes the fastest type.
        let queued = vec![ActiveJob {
            state: JobState::Queued,
            allocation: None,
            ..active[0].clone()
        }];
        let view = ClusterView {
            active: &queued,
            free: &free0,
            state: &ClusterState::new(&cluster),
            ..view
        };
        realise(&view, &types, &[], true, GAVEL_ROUND, &mut actions);
        let [Action::Start { allocation, .. }] = actions.as_slice() else {
            panic!("{actions:?}");
        };
        assert_eq!(type_of(&cluster, allocation), Some(types[2].id));
    }
}
