//! The ratio LP: for a fixed program, choose per-device sharding ratios r_d ∈ [0, 1] with
//! Σ r_d = 1 minimising
//!
//! `constant + compute_flops · c + padded · m`, with epigraph variables `c ≥ r_d / F_d` (the
//! slowest device's split compute) and `m ≥ r_d` (the largest padded shard).
//!
//! Every split instruction of a program shares one ratio vector (one segment), so the
//! per-instruction max terms collapse into these two epigraph variables.

use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel,
    WithTimeLimit,
};

use crate::cost::LinearCost;

/// Seconds the LP may run.
pub const LP_TIME_LIMIT_S: f64 = 5.0;

/// The ratios minimising `linear` for devices of `speeds` FLOP/s, or `None` when the solver
/// fails (the caller keeps its ratios).
pub fn solve_ratios(linear: &LinearCost, speeds: &[f64]) -> Option<Vec<f64>> {
    let p = speeds.len();
    let fastest = speeds.iter().copied().fold(0.0, f64::max);
    if p == 0 || fastest.is_nan() || fastest <= 0.0 {
        return None;
    }
    // Speeds relative to the fastest keep coefficients near 1.
    let rel: Vec<f64> = speeds.iter().map(|s| s / fastest).collect();
    let mut vars = ProblemVariables::new();
    let r: Vec<_> = (0..p)
        .map(|_| vars.add(variable().min(0.0).max(1.0)))
        .collect();
    let c = vars.add(variable().min(0.0));
    let m = vars.add(variable().min(0.0));
    let objective = (linear.compute_flops / fastest) * c + linear.padded * m;
    let mut model = vars
        .minimise(objective)
        .using(microlp)
        .with_time_limit(LP_TIME_LIMIT_S);
    let total: Expression = r.iter().map(|&v| Expression::from(v)).sum();
    model = model.with(constraint!(total == 1.0));
    for (d, &v) in r.iter().enumerate() {
        model = model.with(constraint!(rel[d] * c >= v));
        model = model.with(constraint!(m >= v));
    }
    let sol = model.solve().ok()?;
    let mut ratios: Vec<f64> = r.iter().map(|&v| sol.value(v).clamp(0.0, 1.0)).collect();
    let sum: f64 = ratios.iter().sum();
    if sum.is_nan() || sum <= 0.0 {
        return None;
    }
    for x in &mut ratios {
        *x /= sum;
    }
    Some(ratios)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_only_gives_speed_proportional_ratios() {
        let lin = LinearCost {
            constant: 0.0,
            compute_flops: 1e12,
            padded: 0.0,
        };
        let r = solve_ratios(&lin, &[3.0e12, 1.0e12]).unwrap();
        assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!((r[0] - 0.75).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn padding_pulls_ratios_towards_even() {
        let speeds = [4.0e12, 4.0e12, 2.0e12, 2.0e12];
        let compute = LinearCost {
            constant: 0.0,
            compute_flops: 1e12,
            padded: 0.0,
        };
        let padded = LinearCost {
            constant: 0.0,
            compute_flops: 1e12,
            padded: 10.0,
        };
        let a = solve_ratios(&compute, &speeds).unwrap();
        let b = solve_ratios(&padded, &speeds).unwrap();
        for r in [&a, &b] {
            assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            // Faster devices never get less.
            assert!(r[0] >= r[2] - 1e-9 && r[1] >= r[3] - 1e-9, "{r:?}");
        }
        let max = |r: &[f64]| r.iter().copied().fold(0.0, f64::max);
        assert!(max(&b) < max(&a), "{a:?} vs {b:?}");
        assert!(lin_at(&padded, &b, &speeds) <= lin_at(&padded, &a, &speeds) + 1e-12);
    }

    fn lin_at(l: &LinearCost, r: &[f64], s: &[f64]) -> f64 {
        l.at(r, s)
    }
}
