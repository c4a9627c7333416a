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
use std::time::Instant;

use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel,
    WithTimeLimit,
};
use tessera_model::{JobId, SimDuration, SimTime};
use tessera_sched::{Action, ActiveJob, ClusterView, JobState, Ledger, Policy};

use super::common::{cluster_types, place_on, throughput_on, type_of, GpuType};

/// Gavel's round length.
pub const GAVEL_ROUND: SimDuration = SimDuration::from_secs(360);

/// Time limit of one LP solve, seconds.
pub const GAVEL_LP_TIME_LIMIT_S: f64 = 10.0;

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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LpStats {
    /// LPs solved.
    pub solves: u64,
    /// LPs that failed or hit the time limit (the previous shares were kept, new jobs got
    /// an equal share).
    pub failures: u64,
    /// Σ solve seconds.
    pub total_s: f64,
    /// Longest solve, seconds.
    pub max_s: f64,
    /// Jobs in the largest LP.
    pub max_jobs: u64,
}

impl LpStats {
    pub(crate) fn record(&mut self, secs: f64, jobs: usize, ok: bool) {
        self.solves += 1;
        self.failures += u64::from(!ok);
        self.total_s += secs;
        self.max_s = self.max_s.max(secs);
        self.max_jobs = self.max_jobs.max(jobs as u64);
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
            received: BTreeMap::new(),
            last_now: None,
            stats: LpStats::default(),
        }
    }

    /// Solve statistics so far.
    pub fn lp_stats(&self) -> LpStats {
        self.stats
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

    fn resolve_if_needed(&mut self, view: &ClusterView<'_>, types: &[GpuType]) {
        let mut ids: Vec<JobId> = view.active.iter().map(|j| j.id).collect();
        ids.sort_unstable();
        if ids == self.solved_for {
            return;
        }
        self.solved_for = ids;
        let problem = AllocationProblem::build(view, types);
        let started = Instant::now();
        let solved = problem.solve(self.objective, self.time_limit_s);
        let secs = started.elapsed().as_secs_f64();
        self.stats
            .record(secs, problem.jobs.len(), solved.is_some());
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

/// One LP instance: jobs with at least one usable type.
pub(crate) struct AllocationProblem {
    /// (job, gpus, throughput per type, equal-share throughput).
    jobs: Vec<(JobId, u32, Vec<f64>, f64)>,
    capacity: Vec<f64>,
}

impl AllocationProblem {
    pub(crate) fn build(view: &ClusterView<'_>, types: &[GpuType]) -> AllocationProblem {
        let mut jobs = Vec::new();
        for job in view.active {
            let Some(spec) = view.spec(job) else { continue };
            let thr: Vec<f64> = types
                .iter()
                .map(|t| {
                    if u64::from(spec.gpus) > t.capacity {
                        0.0
                    } else {
                        throughput_on(job, spec, t.id, spec.gpus)
                    }
                })
                .collect();
            // Equal share: time on each usable type in proportion to its size.
            let usable: f64 = types
                .iter()
                .zip(&thr)
                .filter(|(_, &v)| v > 0.0)
                .map(|(t, _)| t.capacity as f64)
                .sum();
            if usable <= 0.0 {
                continue;
            }
            let eq: f64 = types
                .iter()
                .zip(&thr)
                .map(|(t, &v)| v * t.capacity as f64 / usable)
                .sum();
            jobs.push((job.id, spec.gpus, thr, eq));
        }
        AllocationProblem {
            jobs,
            capacity: types.iter().map(|t| t.capacity as f64).collect(),
        }
    }

    pub(crate) fn solve(
        &self,
        objective: Objective,
        time_limit_s: f64,
    ) -> Option<BTreeMap<JobId, Fractions>> {
        if self.jobs.is_empty() {
            return Some(BTreeMap::new());
        }
        let mut vars = ProblemVariables::new();
        let x: Vec<Vec<Option<good_lp::Variable>>> = self
            .jobs
            .iter()
            .map(|(_, _, thr, _)| {
                thr.iter()
                    .map(|&v| (v > 0.0).then(|| vars.add(variable().min(0.0).max(1.0))))
                    .collect()
            })
            .collect();
        let z = vars.add(variable().min(0.0));
        let normalised: Vec<Expression> = self
            .jobs
            .iter()
            .zip(&x)
            .map(|((_, _, thr, eq), xs)| {
                let mut e = Expression::from(0.0);
                for (v, &t) in xs.iter().zip(thr) {
                    if let Some(v) = v {
                        e += (t / eq) * *v;
                    }
                }
                e
            })
            .collect();
        let total: Expression = normalised.iter().cloned().sum();
        let goal = match objective {
            Objective::MaxMinFairness => Expression::from(z) + 1e-3 * total,
            Objective::MaxSumThroughput => total,
        };
        let mut model = vars
            .maximise(goal)
            .using(microlp)
            .with_time_limit(time_limit_s.max(0.001));
        for xs in &x {
            let sum: Expression = xs.iter().flatten().map(|&v| Expression::from(v)).sum();
            model = model.with(constraint!(sum <= 1.0));
        }
        for (t, cap) in self.capacity.iter().enumerate() {
            let mut used = Expression::from(0.0);
            for ((_, gpus, _, _), xs) in self.jobs.iter().zip(&x) {
                if let Some(v) = xs[t] {
                    used += f64::from(*gpus) * v;
                }
            }
            model = model.with(constraint!(used <= *cap));
        }
        if objective == Objective::MaxMinFairness {
            for n in &normalised {
                model = model.with(constraint!(n.clone() >= z));
            }
        }
        let sol = model.solve().ok()?;
        Some(
            self.jobs
                .iter()
                .zip(&x)
                .map(|((id, _, _, _), xs)| {
                    (
                        *id,
                        xs.iter()
                            .map(|v| v.map_or(0.0, |v| sol.value(v).clamp(0.0, 1.0)))
                            .collect(),
                    )
                })
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

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let types = cluster_types(view.cluster);
        self.account(view, &types);
        self.resolve_if_needed(view, &types);

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
        realise(view, &types, &candidates, view.trigger.round, actions);
    }

    fn stats(&self) -> Vec<(String, f64)> {
        let s = self.stats;
        vec![
            ("lp_solves".into(), s.solves as f64),
            ("lp_failures".into(), s.failures as f64),
            ("lp_solve_s_total".into(), s.total_s),
            ("lp_solve_s_max".into(), s.max_s),
            ("lp_jobs_max".into(), s.max_jobs as f64),
        ]
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
    if !replan {
        // Running jobs keep what they hold.
        for (pos, job) in view.active.iter().enumerate() {
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
    // Work conservation: leftover GPUs to waiting jobs, first come, fastest type first.
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
        let mut best: Option<(f64, usize)> = None;
        for (t, ty) in types.iter().enumerate() {
            if left[t] < g {
                continue;
            }
            let thr = throughput_on(job, spec, ty.id, spec.gpus);
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
        let total: f64 = capacity.iter().sum();
        AllocationProblem {
            jobs: jobs
                .into_iter()
                .enumerate()
                .map(|(i, (gpus, thr))| {
                    let eq = thr.iter().zip(&capacity).map(|(t, c)| t * c / total).sum();
                    (JobId(i as u32), gpus, thr, eq)
                })
                .collect(),
            capacity,
        }
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
}
