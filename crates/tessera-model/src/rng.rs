//! A seeded random-number generator with the few draws generators need.
//!
//! Draws are implemented here, on top of the raw ChaCha stream (pinned version), so that a
//! seed gives the same workload across upgrades of distribution crates.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// Deterministic random numbers for generators and stochastic models.
#[derive(Clone, Debug)]
pub struct SimRng {
    inner: ChaCha8Rng,
}

impl SimRng {
    /// A generator for `seed`.
    pub fn seed_from_u64(seed: u64) -> SimRng {
        SimRng {
            inner: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.inner.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform_range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Exponential with the given rate (mean 1/rate); rate must be positive.
    pub fn exponential(&mut self, rate: f64) -> f64 {
        // 1 - U lies in (0, 1], so the logarithm is finite.
        -(1.0 - self.uniform()).ln() / rate
    }

    /// Uniform integer in [0, n); 0 when n is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift; the tiny bias is irrelevant for workload generation.
        ((self.inner.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Index drawn with probability proportional to `weights` (non-negative, not all zero);
    /// returns 0 for degenerate input.
    pub fn weighted_index(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().filter(|w| w.is_finite() && **w > 0.0).sum();
        if total <= 0.0 {
            return 0;
        }
        let mut x = self.uniform() * total;
        for (i, w) in weights.iter().enumerate() {
            if !(w.is_finite() && *w > 0.0) {
                continue;
            }
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights
            .iter()
            .rposition(|w| w.is_finite() && *w > 0.0)
            .unwrap_or(0)
    }

    /// Standard normal (Box–Muller; one draw per call, the pair's second value is dropped to
    /// keep the generator stateless beyond its stream).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]: the logarithm is finite
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Gamma with `shape` and `scale` (mean `shape × scale`), both positive (Marsaglia and
    /// Tsang; shapes below 1 by the boost `G(k) = G(k+1) · U^(1/k)`). Returns 0 for
    /// non-positive or non-finite parameters.
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        if !(shape.is_finite() && shape > 0.0 && scale.is_finite() && scale > 0.0) {
            return 0.0;
        }
        if shape < 1.0 {
            let u = 1.0 - self.uniform();
            return self.gamma(shape + 1.0, scale) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = 1.0 - self.uniform();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v * scale;
            }
        }
    }

    /// Raw 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = SimRng::seed_from_u64(7);
        let mut b = SimRng::seed_from_u64(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn draws_have_the_right_means() {
        let mut r = SimRng::seed_from_u64(1);
        let n = 200_000;
        let mean_u: f64 = (0..n).map(|_| r.uniform()).sum::<f64>() / n as f64;
        let mean_e: f64 = (0..n).map(|_| r.exponential(2.0)).sum::<f64>() / n as f64;
        assert!((mean_u - 0.5).abs() < 0.01, "{mean_u}");
        assert!((mean_e - 0.5).abs() < 0.01, "{mean_e}");
        let mut counts = [0u32; 3];
        for _ in 0..n {
            counts[r.weighted_index(&[0.2, 0.0, 0.8])] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!((counts[0] as f64 / n as f64 - 0.2).abs() < 0.01);
        assert!((0..1000).all(|_| r.below(5) < 5));
    }

    #[test]
    fn gamma_has_the_right_mean_and_cv() {
        let mut r = SimRng::seed_from_u64(3);
        let n = 200_000;
        for (shape, scale) in [(0.25, 4.0), (1.0, 0.5), (4.0, 0.25)] {
            let xs: Vec<f64> = (0..n).map(|_| r.gamma(shape, scale)).collect();
            let mean = xs.iter().sum::<f64>() / n as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            let cv = var.sqrt() / mean;
            assert!(
                (mean - shape * scale).abs() < 0.03 * shape * scale,
                "{shape}: {mean}"
            );
            assert!(
                (cv - 1.0 / shape.sqrt()).abs() < 0.05 / shape.sqrt(),
                "{shape}: {cv}"
            );
        }
        assert_eq!(r.gamma(-1.0, 1.0), 0.0);
    }
}
