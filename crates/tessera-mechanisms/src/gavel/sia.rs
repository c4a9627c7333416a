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
//! The ILP is warm-started with a greedy solution (first come, the fitting configuration
//! with the most value per GPU), solved with microlp under a time limit (default 1 s) and a
//! 1% MIP gap; the
//! time, and whether the limit was hit, are in `stats()`. Goodputs do not change while a job
//! runs (no statistical-efficiency term), so a round whose job set is the one of the last
//! solve keeps the placement instead of solving the same ILP again. Between rounds arriving
//! jobs only take free GPUs.

use std::time::Instant;

use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolutionStatus,
    SolverModel, WithInitialSolution, WithMipGap, WithTimeLimit,
};
use tessera_model::SimDuration;
use tessera_sched::{Action, ClusterView, Policy};

use super::common::{cluster_types, counts_on, throughput_on, type_of, GpuType};
use super::policy::apply_configs;

/// Sia's round length.
pub const SIA_ROUND: SimDuration = SimDuration::from_secs(60);
/// The fairness exponent.
pub const SIA_P: f64 = -0.5;
/// Default solver time limit, seconds.
pub const SIA_TIME_LIMIT_S: f64 = 1.0;
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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IlpStats {
    /// Rounds solved.
    pub solves: u64,
    /// Solves stopped by the time limit (best solution found so far used).
    pub time_limit_hits: u64,
    /// Solves that failed (the greedy warm start used).
    pub failures: u64,
    /// Σ solve seconds.
    pub total_s: f64,
    /// Longest solve, seconds.
    pub max_s: f64,
    /// Binary variables of the largest ILP.
    pub max_vars: u64,
}

/// The Sia policy.
#[derive(Debug)]
pub struct SiaPolicy {
    round: SimDuration,
    time_limit_s: f64,
    stats: IlpStats,
    /// Active jobs (sorted) at the last solve.
    solved_for: Vec<tessera_model::JobId>,
}

impl SiaPolicy {
    /// Sia with `round` (default 60 s).
    pub fn new(round: Option<SimDuration>) -> SiaPolicy {
        SiaPolicy {
            round: round.unwrap_or(SIA_ROUND),
            time_limit_s: SIA_TIME_LIMIT_S,
            stats: IlpStats::default(),
            solved_for: Vec::new(),
        }
    }

    /// A different solver time limit.
    pub fn with_time_limit(mut self, secs: f64) -> SiaPolicy {
        self.time_limit_s = secs;
        self
    }

    /// Solve statistics so far.
    pub fn ilp_stats(&self) -> IlpStats {
        self.stats
    }
}

/// Candidate configurations per active job (empty when it can run nowhere).
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
                for count in counts_on(job, spec, ty.id) {
                    if count > cap || u64::from(count) > ty.capacity {
                        continue;
                    }
                    let thr = throughput_on(job, spec, ty.id, count);
                    if thr > 0.0 {
                        raw.push((t, count, thr));
                    }
                }
            }
            let slowest = raw.iter().map(|r| r.2).fold(f64::INFINITY, f64::min);
            raw.into_iter()
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
                .collect()
        })
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

/// Outcome of one ILP.
pub(crate) struct IlpOutcome {
    pub(crate) pick: Vec<Option<usize>>,
    pub(crate) secs: f64,
    pub(crate) hit_limit: bool,
    pub(crate) failed: bool,
    pub(crate) vars: usize,
}

/// Solves the configuration ILP, warm-started from `start`.
pub(crate) fn solve_ilp(
    configs: &[Vec<Config>],
    capacity: &[u64],
    start: &[Option<usize>],
    time_limit_s: f64,
) -> IlpOutcome {
    let started = Instant::now();
    let mut vars = ProblemVariables::new();
    let y: Vec<Vec<good_lp::Variable>> = configs
        .iter()
        .map(|cs| cs.iter().map(|_| vars.add(variable().binary())).collect())
        .collect();
    let nvars: usize = y.iter().map(Vec::len).sum();
    if nvars == 0 {
        return IlpOutcome {
            pick: vec![None; configs.len()],
            secs: 0.0,
            hit_limit: false,
            failed: false,
            vars: 0,
        };
    }
    let mut objective = Expression::from(0.0);
    for (cs, ys) in configs.iter().zip(&y) {
        for (c, &v) in cs.iter().zip(ys) {
            objective += c.value * v;
        }
    }
    let initial: Vec<(good_lp::Variable, f64)> = y
        .iter()
        .zip(start)
        .flat_map(|(ys, s)| {
            ys.iter()
                .enumerate()
                .map(move |(k, &v)| (v, if *s == Some(k) { 1.0 } else { 0.0 }))
        })
        .collect();
    let model = vars
        .maximise(objective)
        .using(microlp)
        .with_time_limit(time_limit_s.max(0.001))
        .with_initial_solution(initial);
    let mut model = match model.with_mip_gap(0.01) {
        Ok(m) => m,
        Err(_) => {
            return IlpOutcome {
                pick: start.to_vec(),
                secs: started.elapsed().as_secs_f64(),
                hit_limit: false,
                failed: true,
                vars: nvars,
            }
        }
    };
    for ys in &y {
        let sum: Expression = ys.iter().map(|&v| Expression::from(v)).sum();
        model = model.with(constraint!(sum <= 1.0));
    }
    for (t, cap) in capacity.iter().enumerate() {
        let mut used = Expression::from(0.0);
        for (cs, ys) in configs.iter().zip(&y) {
            for (c, &v) in cs.iter().zip(ys) {
                if c.t == t {
                    used += f64::from(c.count) * v;
                }
            }
        }
        model = model.with(constraint!(used <= *cap as f64));
    }
    let solved = model.solve();
    let secs = started.elapsed().as_secs_f64();
    match solved {
        Ok(sol) => {
            let hit_limit = matches!(sol.status(), SolutionStatus::TimeLimit);
            let pick: Vec<Option<usize>> = y
                .iter()
                .map(|ys| ys.iter().position(|&v| sol.value(v) > 0.5))
                .collect();
            // A solve stopped by the time limit may return an incumbent worse than the warm
            // start (or, defensively, one over capacity): keep the better feasible one.
            let pick = if feasible(configs, capacity, &pick)
                && value(configs, &pick) >= value(configs, start) - 1e-9
            {
                pick
            } else {
                start.to_vec()
            };
            IlpOutcome {
                pick,
                secs,
                hit_limit,
                failed: false,
                vars: nvars,
            }
        }
        Err(_) => IlpOutcome {
            pick: start.to_vec(),
            secs,
            hit_limit: secs >= time_limit_s,
            failed: true,
            vars: nvars,
        },
    }
}

/// Objective value of a choice.
fn value(configs: &[Vec<Config>], pick: &[Option<usize>]) -> f64 {
    configs
        .iter()
        .zip(pick)
        .filter_map(|(cs, k)| k.and_then(|k| cs.get(k)))
        .map(|c| c.value)
        .sum()
}

/// Whether a choice fits every type's capacity.
fn feasible(configs: &[Vec<Config>], capacity: &[u64], pick: &[Option<usize>]) -> bool {
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

    fn round_length(&self) -> Option<SimDuration> {
        Some(self.round)
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
        let resolve = view.trigger.round && ids != self.solved_for;
        let target: Vec<Option<(usize, u32)>> = if resolve {
            self.solved_for = ids;
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
            let out = solve_ilp(&configs, &capacity, &start, self.time_limit_s);
            let s = &mut self.stats;
            s.solves += 1;
            s.time_limit_hits += u64::from(out.hit_limit);
            s.failures += u64::from(out.failed);
            s.total_s += out.secs;
            s.max_s = s.max_s.max(out.secs);
            s.max_vars = s.max_vars.max(out.vars as u64);
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
        let s = self.stats;
        vec![
            ("ilp_solves".into(), s.solves as f64),
            ("ilp_time_limit_hits".into(), s.time_limit_hits as f64),
            ("ilp_failures".into(), s.failures as f64),
            ("ilp_solve_s_total".into(), s.total_s),
            ("ilp_solve_s_max".into(), s.max_s),
            ("ilp_vars_max".into(), s.max_vars as f64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(t: usize, count: u32, value: f64) -> Config {
        Config { t, count, value }
    }

    #[test]
    fn ilp_beats_the_greedy_start_and_respects_capacity() {
        // Two GPUs of one type. Greedy (value per GPU) gives job 0 one GPU (1.0) and job 1,
        // which needs two, nothing; job 0 on both GPUs is worth 1.9.
        let configs = vec![vec![c(0, 1, 1.0), c(0, 2, 1.9)], vec![c(0, 2, 1.5)]];
        let mut left = vec![2];
        let start = greedy(&[0, 1], &configs, &mut left);
        assert_eq!(start, [Some(0), None]);
        let out = solve_ilp(&configs, &[2], &start, 5.0);
        assert!(!out.failed && !out.hit_limit);
        assert_eq!(out.pick, [Some(1), None]);
        assert_eq!(out.vars, 3);
        assert!((value(&configs, &out.pick) - 1.9).abs() < 1e-12);
        assert!(feasible(&configs, &[2], &out.pick));
        assert!(!feasible(&configs, &[2], &[Some(1), Some(0)]));
    }

    #[test]
    fn values_favour_faster_configurations_and_penalise_restarts() {
        // G = 1 → 1.0; G = 4 → 1.5: faster is worth more, an unserved job worth 0.
        let v = |g: f64| 2.0 - g.powf(SIA_P);
        assert!((v(1.0) - 1.0).abs() < 1e-12 && (v(4.0) - 1.5).abs() < 1e-12);
        assert!(v(4.0 * SIA_RESTART_FACTOR) < v(4.0));
    }
}
