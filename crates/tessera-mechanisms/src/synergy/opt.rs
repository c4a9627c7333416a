//! Synergy-OPT's per-round allocation problem (DESIGN §5.1).
//!
//! Choose one (CPU, memory) grid point per job maximising Σ estimated throughput (relative to
//! the proportional share), subject to the cluster's free CPU and memory and every job getting
//! at least its proportional-share throughput. The reference solves this as an assignment ILP
//! with one binary per job and grid point (cvxpy + GLPK, ~1 s per round). Two facts make ours
//! cheap:
//!
//! - jobs with the same GPU count and the same estimated table are interchangeable, so the LP
//!   has one variable per (class, grid point): "how many jobs of this class at this point";
//! - grid points that are infeasible, below the proportional throughput, or dominated (another
//!   point needs no more CPU and memory and is at least as fast) can never be chosen usefully.
//!
//! The LP relaxation is solved with microlp (pure Rust, with a time limit), then rounded:
//! floors first, the remaining jobs of each class to the points with the largest fractional
//! parts while capacity lasts, else to the class's cheapest point. The rounded objective is
//! reported beside the LP bound; the policy then places jobs per server and reports what
//! placement could not realise.

use std::collections::BTreeMap;
use std::time::Instant;

use super::perf::SensitivityEstimate;
use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel,
    WithTimeLimit,
};

/// One job of the round.
#[derive(Clone, Copy, Debug)]
pub struct OptJob<'a> {
    /// GPUs it needs.
    pub gpus: u32,
    /// What profiling learned; `None` = insensitive (only the proportional point).
    pub estimate: Option<&'a SensitivityEstimate>,
    /// Precomputed class: an id unique per (GPUs, options) and the options
    /// ([`job_options`]). Callers that solve many rounds intern these once per job; without
    /// it the options are derived from `estimate` every call.
    pub class: Option<(u32, &'a [Point])>,
}

/// How a round's problem was solved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptStatus {
    /// The LP solved to optimality.
    Solved,
    /// The LP failed or hit its time limit: every job got its cheapest point.
    Fallback,
    /// No jobs.
    Empty,
}

/// The chosen point per job and the figures of the solve.
#[derive(Clone, Debug)]
pub struct OptResult {
    /// Per job (input order): (CPU cores per GPU, memory GB per GPU, estimated value).
    pub choice: Vec<(f64, f64, f64)>,
    /// LP relaxation optimum (an upper bound on Σ value), or the fallback's objective.
    pub lp_objective: f64,
    /// Σ value after rounding.
    pub rounded_objective: f64,
    /// LP variables after class aggregation and pruning.
    pub variables: usize,
    /// Wall time of building and solving, seconds.
    pub solve_secs: f64,
    /// Outcome.
    pub status: OptStatus,
}

/// A candidate point: (CPU cores/GPU, memory GB/GPU, value).
pub type Point = (f64, f64, f64);

/// The points worth considering for a job with `estimate`.
pub fn job_options(
    estimate: Option<&SensitivityEstimate>,
    fair_cpu: f64,
    fair_mem: f64,
) -> Vec<Point> {
    let Some(est) = estimate else {
        return vec![(fair_cpu, fair_mem, 1.0)];
    };
    // The proportional share itself is always an option (on clusters not shaped like the
    // reference it is not a grid point), valued at the estimate there.
    let floor = est.relative(fair_cpu, fair_mem);
    let mut pts: Vec<Point> = est
        .table
        .grid()
        .filter(|&(_, _, v)| v > 0.0 && v >= floor - 1e-9)
        .collect();
    pts.push((fair_cpu, fair_mem, floor));
    // Drop dominated points (needs ≥ CPU and ≥ memory of another, and no faster).
    let all = pts.clone();
    pts.retain(|p| {
        !all.iter().any(|q| {
            q != p
                && q.0 <= p.0
                && q.1 <= p.1
                && q.2 >= p.2
                && (q.0 < p.0 || q.1 < p.1 || q.2 > p.2)
        })
    });
    pts
}

/// Solves one round. `cpu_cap` in cores and `mem_cap` in GB are what the round may hand out.
pub fn solve_round(
    jobs: &[OptJob<'_>],
    cpu_cap: f64,
    mem_cap: f64,
    fair_cpu: f64,
    fair_mem: f64,
    time_limit_s: f64,
) -> OptResult {
    let started = Instant::now();
    if jobs.is_empty() {
        return OptResult {
            choice: Vec::new(),
            lp_objective: 0.0,
            rounded_objective: 0.0,
            variables: 0,
            solve_secs: 0.0,
            status: OptStatus::Empty,
        };
    }
    // Classes of interchangeable jobs, keyed by GPU count and option list (bit patterns, so
    // the map order is deterministic).
    // Interned classes sort first, by id; others by their option bits.
    type Key = (u32, u32, Vec<(u64, u64, u64)>);
    let mut classes: BTreeMap<Key, (Vec<Point>, Vec<usize>)> = BTreeMap::new();
    for (i, j) in jobs.iter().enumerate() {
        let (key, opts) = match j.class {
            Some((id, opts)) => ((0, id, Vec::new()), opts.to_vec()),
            None => {
                let opts = job_options(j.estimate, fair_cpu, fair_mem);
                let bits = opts
                    .iter()
                    .map(|p| (p.0.to_bits(), p.1.to_bits(), p.2.to_bits()))
                    .collect();
                ((1, j.gpus, bits), opts)
            }
        };
        classes
            .entry(key)
            .or_insert_with(|| (opts, Vec::new()))
            .1
            .push(i);
    }
    let classes: Vec<(u32, Vec<Point>, Vec<usize>)> = classes
        .into_values()
        .map(|(opts, members)| {
            let g = members.first().map_or(1, |&i| jobs[i].gpus);
            (g, opts, members)
        })
        .collect();

    // Fast path: if every job can have its fastest (cheapest such) point at once, that is the
    // optimum and no LP is needed (the common case below saturation).
    {
        let mut need = (0.0, 0.0);
        let mut best_total = 0.0;
        let mut picks: Vec<Point> = Vec::with_capacity(classes.len());
        for (g, opts, members) in &classes {
            let best = opts
                .iter()
                .copied()
                .fold(None::<Point>, |acc, p| match acc {
                    Some(a) if a.2 > p.2 || (a.2 == p.2 && a.0 * a.1 <= p.0 * p.1) => Some(a),
                    _ => Some(p),
                });
            let Some(best) = best else { continue };
            let n = members.len() as f64;
            need.0 += best.0 * *g as f64 * n;
            need.1 += best.1 * *g as f64 * n;
            best_total += best.2 * n;
            picks.push(best);
        }
        if need.0 <= cpu_cap + 1e-9 && need.1 <= mem_cap + 1e-9 && picks.len() == classes.len() {
            let mut choice = vec![(fair_cpu, fair_mem, 1.0); jobs.len()];
            for ((_, _, members), p) in classes.iter().zip(&picks) {
                for &j in members {
                    choice[j] = *p;
                }
            }
            return OptResult {
                choice,
                lp_objective: best_total,
                rounded_objective: best_total,
                variables: 0,
                solve_secs: started.elapsed().as_secs_f64(),
                status: OptStatus::Solved,
            };
        }
    }

    let mut vars = ProblemVariables::new();
    let mut x: Vec<Vec<good_lp::Variable>> = Vec::with_capacity(classes.len());
    for (_, opts, members) in &classes {
        let n = members.len() as f64;
        x.push(
            opts.iter()
                .map(|_| vars.add(variable().min(0.0).max(n)))
                .collect(),
        );
    }
    let variables: usize = x.iter().map(Vec::len).sum();
    let mut objective = Expression::from(0.0);
    let mut cpu = Expression::from(0.0);
    let mut mem = Expression::from(0.0);
    for ((g, opts, _), xs) in classes.iter().zip(&x) {
        let g = *g as f64;
        for (p, &v) in opts.iter().zip(xs) {
            objective += p.2 * v;
            cpu += p.0 * g * v;
            mem += p.1 * g * v;
        }
    }
    let mut model = vars
        .maximise(objective)
        .using(microlp)
        .with_time_limit(time_limit_s.max(0.001));
    for ((_, _, members), xs) in classes.iter().zip(&x) {
        let sum: Expression = xs.iter().map(|&v| Expression::from(v)).sum();
        model = model.with(constraint!(sum == members.len() as f64));
    }
    model = model.with(constraint!(cpu <= cpu_cap));
    model = model.with(constraint!(mem <= mem_cap));

    // Fractional counts per class and option, or None on failure.
    let counts: Option<Vec<Vec<f64>>> = model.solve().ok().map(|sol| {
        x.iter()
            .map(|xs| xs.iter().map(|&v| sol.value(v).max(0.0)).collect())
            .collect()
    });

    let cheapest = |opts: &[Point], g: f64| -> usize {
        let mut best = 0;
        let mut best_cost = f64::INFINITY;
        for (k, p) in opts.iter().enumerate() {
            let cost = p.0 * g / cpu_cap.max(1e-9) + p.1 * g / mem_cap.max(1e-9);
            if cost < best_cost - 1e-12 {
                best = k;
                best_cost = cost;
            }
        }
        best
    };
    let mut choice: Vec<(f64, f64, f64)> = vec![(fair_cpu, fair_mem, 1.0); jobs.len()];
    let (status, lp_objective, rounded) = match counts {
        Some(counts) => {
            let lp: f64 = classes
                .iter()
                .zip(&counts)
                .map(|((_, opts, _), c)| opts.iter().zip(c).map(|(p, n)| p.2 * n).sum::<f64>())
                .sum();
            // Floors, then leftovers by fractional part while capacity lasts.
            let mut used = (0.0, 0.0);
            let mut assigned: Vec<Vec<usize>> = Vec::with_capacity(classes.len());
            let mut leftovers: Vec<(f64, usize, usize)> = Vec::new();
            for (ci, ((g, opts, members), c)) in classes.iter().zip(&counts).enumerate() {
                let g = *g as f64;
                let mut per: Vec<usize> = c.iter().map(|n| (n + 1e-6).floor() as usize).collect();
                let mut total: usize = per.iter().sum();
                while total > members.len() {
                    // Numerical overshoot: take from the cheapest option that has some.
                    if let Some(k) = per.iter().rposition(|&n| n > 0) {
                        per[k] -= 1;
                        total -= 1;
                    }
                }
                for (k, &n) in per.iter().enumerate() {
                    used.0 += n as f64 * opts[k].0 * g;
                    used.1 += n as f64 * opts[k].1 * g;
                }
                for (k, n) in c.iter().enumerate() {
                    let frac = n - per[k] as f64;
                    if frac > 1e-6 {
                        leftovers.push((frac, ci, k));
                    }
                }
                assigned.push(per);
            }
            leftovers.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            let mut missing: Vec<usize> = classes
                .iter()
                .zip(&assigned)
                .map(|((_, _, m), per)| m.len() - per.iter().sum::<usize>())
                .collect();
            for (_, ci, k) in leftovers {
                if missing[ci] == 0 {
                    continue;
                }
                let (g, opts, _) = &classes[ci];
                let g = *g as f64;
                let (c, m) = (opts[k].0 * g, opts[k].1 * g);
                if used.0 + c <= cpu_cap + 1e-6 && used.1 + m <= mem_cap + 1e-6 {
                    used.0 += c;
                    used.1 += m;
                    assigned[ci][k] += 1;
                    missing[ci] -= 1;
                }
            }
            for (ci, (g, opts, _)) in classes.iter().enumerate() {
                if missing[ci] > 0 {
                    let k = cheapest(opts, *g as f64);
                    assigned[ci][k] += missing[ci];
                }
            }
            // Within a class, earlier jobs (policy order) get the faster points.
            let mut rounded = 0.0;
            for ((_, opts, members), per) in classes.iter().zip(&assigned) {
                let mut order: Vec<usize> = (0..opts.len()).collect();
                order.sort_by(|&a, &b| opts[b].2.total_cmp(&opts[a].2).then(a.cmp(&b)));
                let mut it = members.iter();
                for k in order {
                    for _ in 0..per[k] {
                        if let Some(&j) = it.next() {
                            choice[j] = opts[k];
                            rounded += opts[k].2;
                        }
                    }
                }
            }
            (OptStatus::Solved, lp, rounded)
        }
        None => {
            let mut total = 0.0;
            for (g, opts, members) in &classes {
                let k = cheapest(opts, *g as f64);
                for &j in members {
                    choice[j] = opts[k];
                    total += opts[k].2;
                }
            }
            (OptStatus::Fallback, total, total)
        }
    };
    OptResult {
        choice,
        lp_objective,
        rounded_objective: rounded,
        variables,
        solve_secs: started.elapsed().as_secs_f64(),
        status,
    }
}

/// OPT's figures over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OptStats {
    /// Rounds solved.
    pub rounds: u64,
    /// Rounds where the LP failed or timed out.
    pub fallbacks: u64,
    /// Σ solve seconds.
    pub solve_secs: f64,
    /// Longest solve, seconds.
    pub max_solve_secs: f64,
    /// Most LP variables in a round.
    pub max_variables: usize,
    /// Σ LP bound.
    pub lp_objective: f64,
    /// Σ rounded objective.
    pub rounded_objective: f64,
    /// Σ objective placement realised.
    pub realized_objective: f64,
    /// Jobs the LP chose that could not be placed at all.
    pub unplaced: u64,
}

impl OptStats {
    /// Adds one round.
    pub fn record(&mut self, r: &OptResult, realized: f64, unplaced: u64) {
        if r.status == OptStatus::Empty {
            return;
        }
        self.rounds += 1;
        self.fallbacks += u64::from(r.status == OptStatus::Fallback);
        self.solve_secs += r.solve_secs;
        self.max_solve_secs = self.max_solve_secs.max(r.solve_secs);
        self.max_variables = self.max_variables.max(r.variables);
        self.lp_objective += r.lp_objective;
        self.rounded_objective += r.rounded_objective;
        self.realized_objective += realized;
        self.unplaced += unplaced;
    }

    /// Relative gap between the LP bound and what placement realised, over the run.
    pub fn gap(&self) -> f64 {
        if self.lp_objective > 0.0 {
            (self.lp_objective - self.realized_objective) / self.lp_objective
        } else {
            0.0
        }
    }

    /// As report pairs.
    pub fn as_pairs(&self) -> Vec<(String, f64)> {
        vec![
            ("opt_rounds".into(), self.rounds as f64),
            ("opt_fallbacks".into(), self.fallbacks as f64),
            ("opt_solve_s_total".into(), self.solve_secs),
            ("opt_solve_s_max".into(), self.max_solve_secs),
            ("opt_max_variables".into(), self.max_variables as f64),
            ("opt_lp_objective".into(), self.lp_objective),
            ("opt_rounded_objective".into(), self.rounded_objective),
            ("opt_realized_objective".into(), self.realized_objective),
            ("opt_gap".into(), self.gap()),
            ("opt_unplaced".into(), self.unplaced as f64),
        ]
    }
}
