//! Slice-speed prediction from the MPS profiling phase.
//!
//! MISO measures every job co-located under MPS and predicts its speed on each slice size.
//! [`EmulatedError`] reproduces the artifact's emulation (the true normalised speed off by
//! N(0.016, 0.0032), with a random sign per entry); [`LearnedRegression`] actually learns: a
//! least-squares fit from the speeds at MPS levels 100/50/14% to each slice's speed.

use std::fmt;

use tessera_model::SimRng;

use super::truth::{interpolate, SliceSpeeds, SliceTable, SLICES};

/// Predicts a job's slice speeds from what profiling it would observe.
pub trait SlicePredictor: Send + Sync + fmt::Debug {
    /// Name for reports.
    fn name(&self) -> &'static str;
    /// Predicted normalised speeds, given the job's true ones (what its MPS phase measures
    /// derives from them); feasibility (memory) is known and kept. `rng` is the job's own.
    fn predict(&self, truth: &SliceSpeeds, rng: &mut SimRng) -> SliceSpeeds;
}

/// A standard normal draw (Box–Muller).
pub fn normal(rng: &mut SimRng) -> f64 {
    let u1 = rng.uniform().max(f64::MIN_POSITIVE);
    let u2 = rng.uniform();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The artifact's error model: each slice below 7g off by a relative error N(mean, sd) with
/// a random sign.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmulatedError {
    /// Mean relative error.
    pub mean: f64,
    /// Its standard deviation.
    pub sd: f64,
}

impl Default for EmulatedError {
    fn default() -> Self {
        EmulatedError {
            mean: 0.016,
            sd: 0.0032,
        }
    }
}

impl SlicePredictor for EmulatedError {
    fn name(&self) -> &'static str {
        "emulated"
    }

    fn predict(&self, truth: &SliceSpeeds, rng: &mut SimRng) -> SliceSpeeds {
        let mut out = *truth;
        for c in [1usize, 2, 3, 4] {
            if let Some(v) = truth[c] {
                let e = self.mean + self.sd * normal(rng);
                let sign = if rng.uniform() < 0.5 { -1.0 } else { 1.0 };
                out[c] = Some((v * (1.0 + sign * e)).max(1e-3));
            }
        }
        out
    }
}

/// Relative noise of one MPS-level speed measurement in the generated training data.
pub const MPS_MEASUREMENT_NOISE: f64 = 0.03;
/// MPS levels MISO profiles at (share of SMs).
pub const MPS_LEVELS: [f64; 3] = [1.0, 0.5, 0.14];

/// What an MPS phase measures: the speed at each of [`MPS_LEVELS`], relative to the first,
/// with measurement noise. Modelled as the slice speed interpolated at that share of SMs.
pub fn mps_features(truth: &SliceSpeeds, noise: f64, rng: &mut SimRng) -> [f64; 3] {
    let mut m = [0.0; 3];
    for (i, level) in MPS_LEVELS.iter().enumerate() {
        m[i] = interpolate(truth, 7.0 * level) * (1.0 + noise * normal(rng)).max(0.01);
    }
    let top = m[0].max(1e-9);
    [1.0, m[1] / top, m[2] / top]
}

/// A linear model per slice size (1g–4g): speed = w0 + w1·m50 + w2·m14, fit by least squares
/// on MPS measurements generated from a slice table plus noise.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnedRegression {
    /// Weights per slice size (index = compute slices; 7g is 1 by definition).
    pub weights: [[f64; 3]; 5],
    /// Relative noise of the MPS measurements it is fed.
    pub noise: f64,
}

/// Samples per table entry in the generated training set.
const SAMPLES_PER_ENTRY: usize = 20;

impl LearnedRegression {
    /// Fits on every entry of `table` (each sampled [`SAMPLES_PER_ENTRY`] times with noise).
    pub fn fit(table: &SliceTable, noise: f64, seed: u64) -> LearnedRegression {
        let entries: Vec<&SliceSpeeds> = table.entries().map(|(_, s)| s).collect();
        Self::fit_on(&entries, noise, seed)
    }

    fn fit_on(entries: &[&SliceSpeeds], noise: f64, seed: u64) -> LearnedRegression {
        let mut rng = SimRng::seed_from_u64(seed);
        // Normal equations per target: (XᵀX) w = Xᵀy.
        let mut xtx = [[[0.0f64; 3]; 3]; 5];
        let mut xty = [[0.0f64; 3]; 5];
        for truth in entries {
            for _ in 0..SAMPLES_PER_ENTRY {
                let f = mps_features(truth, noise, &mut rng);
                for c in [1usize, 2, 3, 4] {
                    let Some(y) = truth[c] else { continue };
                    for a in 0..3 {
                        xty[c][a] += f[a] * y;
                        for b in 0..3 {
                            xtx[c][a][b] += f[a] * f[b];
                        }
                    }
                }
            }
        }
        let mut weights = [[0.0; 3]; 5];
        for c in [1usize, 2, 3, 4] {
            // A tiny ridge keeps a target with few samples solvable.
            for (a, row) in xtx[c].iter_mut().enumerate() {
                row[a] += 1e-6;
            }
            weights[c] = solve3(xtx[c], xty[c]).unwrap_or([c as f64 / 7.0, 0.0, 0.0]);
        }
        LearnedRegression { weights, noise }
    }

    /// Mean absolute error of normalised slice speeds, leaving one table entry out at a time
    /// (fit on the others, predict it from fresh noisy measurements).
    pub fn leave_one_out_mae(table: &SliceTable, noise: f64, seed: u64) -> f64 {
        let entries: Vec<&SliceSpeeds> = table.entries().map(|(_, s)| s).collect();
        let mut rng = SimRng::seed_from_u64(seed ^ 0x5eed);
        let (mut sum, mut n) = (0.0, 0usize);
        for i in 0..entries.len() {
            let rest: Vec<&SliceSpeeds> = entries
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, e)| *e)
                .collect();
            let model = Self::fit_on(&rest, noise, seed.wrapping_add(i as u64));
            let predicted = model.predict(entries[i], &mut rng);
            for c in [1usize, 2, 3, 4] {
                if let (Some(t), Some(p)) = (entries[i][c], predicted[c]) {
                    sum += (t - p).abs();
                    n += 1;
                }
            }
        }
        if n == 0 {
            0.0
        } else {
            sum / n as f64
        }
    }
}

impl SlicePredictor for LearnedRegression {
    fn name(&self) -> &'static str {
        "learned"
    }

    fn predict(&self, truth: &SliceSpeeds, rng: &mut SimRng) -> SliceSpeeds {
        let f = mps_features(truth, self.noise, rng);
        let mut out = *truth;
        for c in [1usize, 2, 3, 4] {
            if truth[c].is_some() {
                let w = self.weights[c];
                out[c] = Some((w[0] * f[0] + w[1] * f[1] + w[2] * f[2]).clamp(1e-3, 2.0));
            }
        }
        out
    }
}

/// Mean absolute error of a predictor over a table's entries (one prediction per entry and
/// slice, drawn from `seed`).
pub fn mean_abs_error(predictor: &dyn SlicePredictor, table: &SliceTable, seed: u64) -> f64 {
    let mut rng = SimRng::seed_from_u64(seed);
    let (mut sum, mut n) = (0.0, 0usize);
    for (_, truth) in table.entries() {
        let p = predictor.predict(truth, &mut rng);
        for c in SLICES {
            if let (Some(t), Some(q)) = (truth[c as usize], p[c as usize]) {
                sum += (t - q).abs();
                n += 1;
            }
        }
    }
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Solves a 3×3 system by Gaussian elimination with partial pivoting.
fn solve3(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..3 {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[row].iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let s: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_error_matches_its_distribution() {
        let table = SliceTable::miso().unwrap();
        let p = EmulatedError::default();
        let mut rng = SimRng::seed_from_u64(3);
        let (mut rel, mut n) = (0.0, 0);
        for _ in 0..50 {
            for (_, t) in table.entries() {
                let q = p.predict(t, &mut rng);
                assert_eq!(q[7], Some(1.0));
                for c in [1usize, 2, 3, 4] {
                    assert_eq!(q[c].is_some(), t[c].is_some(), "feasibility kept");
                    if let (Some(a), Some(b)) = (t[c], q[c]) {
                        rel += ((b - a) / a).abs();
                        n += 1;
                    }
                }
            }
        }
        let mean = rel / n as f64;
        assert!((mean - 0.016).abs() < 0.001, "{mean}");
    }

    #[test]
    fn regression_learns_better_than_proportional_guess() {
        let table = SliceTable::miso().unwrap();
        let mae = LearnedRegression::leave_one_out_mae(&table, MPS_MEASUREMENT_NOISE, 1);
        // The naive guess "speed = slices / 7" is far worse on this table.
        let naive = {
            let (mut s, mut n) = (0.0, 0);
            for (_, t) in table.entries() {
                for c in [1usize, 2, 3, 4] {
                    if let Some(v) = t[c] {
                        s += (v - c as f64 / 7.0).abs();
                        n += 1;
                    }
                }
            }
            s / n as f64
        };
        assert!(mae < naive / 2.0, "learned {mae} vs naive {naive}");
        assert!(mae > 0.0);
    }

    #[test]
    fn solver_solves() {
        let x = solve3(
            [[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]],
            [3.0, 5.0, 5.0],
        );
        let x = x.unwrap();
        assert!(
            (x[0] - 1.0).abs() < 1e-9 && (x[1] - 1.0).abs() < 1e-9 && (x[2] - 1.0).abs() < 1e-9
        );
        assert!(solve3([[0.0; 3]; 3], [1.0; 3]).is_none());
    }
}
