//! Solve-time bookkeeping shared by the LP/ILP policies (`gavel`, `sia`): wall time of every
//! solve, reported as mean / p99 / max milliseconds in `stats()`. Times are only reported;
//! no decision reads them (limits that change results are counts, so runs stay
//! deterministic).

/// Wall times of the solves so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SolveTimes {
    ms: Vec<f64>,
}

impl SolveTimes {
    /// Records one solve of `secs` seconds.
    pub fn record(&mut self, secs: f64) {
        self.ms.push(secs * 1e3);
    }

    /// Solves recorded.
    pub fn count(&self) -> usize {
        self.ms.len()
    }

    /// Σ milliseconds.
    pub fn total_ms(&self) -> f64 {
        self.ms.iter().sum()
    }

    /// Mean milliseconds (0 without solves).
    pub fn mean_ms(&self) -> f64 {
        if self.ms.is_empty() {
            0.0
        } else {
            self.total_ms() / self.ms.len() as f64
        }
    }

    /// Longest solve, milliseconds.
    pub fn max_ms(&self) -> f64 {
        self.ms.iter().copied().fold(0.0, f64::max)
    }

    /// 99th percentile (nearest rank), milliseconds.
    pub fn p99_ms(&self) -> f64 {
        if self.ms.is_empty() {
            return 0.0;
        }
        let mut v = self.ms.clone();
        v.sort_by(f64::total_cmp);
        let rank = ((0.99 * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    /// `{prefix}_solve_ms_{mean,p99,max,total}`.
    pub fn stats(&self, prefix: &str) -> Vec<(String, f64)> {
        vec![
            (format!("{prefix}_solve_ms_mean"), self.mean_ms()),
            (format!("{prefix}_solve_ms_p99"), self.p99_ms()),
            (format!("{prefix}_solve_ms_max"), self.max_ms()),
            (format!("{prefix}_solve_ms_total"), self.total_ms()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut t = SolveTimes::default();
        assert_eq!((t.mean_ms(), t.p99_ms(), t.max_ms()), (0.0, 0.0, 0.0));
        for i in 1..=200 {
            t.record(f64::from(i) / 1e3);
        }
        assert_eq!(t.count(), 200);
        assert!((t.p99_ms() - 198.0).abs() < 1e-9, "{}", t.p99_ms());
        assert!((t.max_ms() - 200.0).abs() < 1e-9);
        assert!((t.mean_ms() - 100.5).abs() < 1e-9);
    }
}
