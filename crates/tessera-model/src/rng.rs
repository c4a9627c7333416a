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
}
