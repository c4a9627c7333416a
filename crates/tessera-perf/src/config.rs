//! Throughput estimates per configuration (GPU type × GPU count, with the parallelism plan
//! that reaches it): what heterogeneity-aware policies (Gavel, Sia, Crius, elastic scaling)
//! read about a job. A profiler or estimator attaches a [`ConfigEstimates`] to the job's
//! [`Knowledge`](tessera_model::Knowledge); the policy never sees the truth model itself.

use tessera_model::{GpuModelId, ParallelPlan};

/// The estimated throughput of one job on one configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConfigEstimate {
    /// GPU type.
    pub gpu: GpuModelId,
    /// Number of GPUs (or devices) of that type.
    pub count: u32,
    /// Iterations per second; 0 = infeasible (out of memory, too slow to be worth it).
    pub throughput: f64,
    /// The plan that achieves it, when the estimator chose one.
    pub plan: Option<ParallelPlan>,
}

/// Every configuration estimated for one job, sorted by (GPU type, count): lookups are a
/// binary search and iteration order is deterministic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigEstimates {
    entries: Vec<ConfigEstimate>,
}

impl ConfigEstimates {
    /// Estimates from any order; a later entry for the same (type, count) replaces an
    /// earlier one.
    pub fn new(mut entries: Vec<ConfigEstimate>) -> ConfigEstimates {
        entries.reverse();
        entries.sort_by_key(|e| (e.gpu, e.count));
        entries.dedup_by_key(|e| (e.gpu, e.count));
        ConfigEstimates { entries }
    }

    /// All estimates, sorted by (GPU type, count).
    pub fn entries(&self) -> &[ConfigEstimate] {
        &self.entries
    }

    /// The estimate for `count` GPUs of type `gpu`, if estimated.
    pub fn get(&self, gpu: GpuModelId, count: u32) -> Option<&ConfigEstimate> {
        self.entries
            .binary_search_by_key(&(gpu, count), |e| (e.gpu, e.count))
            .ok()
            .and_then(|i| self.entries.get(i))
    }

    /// The feasible estimates on type `gpu`, by increasing count.
    pub fn on_type(&self, gpu: GpuModelId) -> impl Iterator<Item = &ConfigEstimate> {
        self.entries
            .iter()
            .filter(move |e| e.gpu == gpu && e.throughput > 0.0)
    }

    /// The feasible configuration with the highest throughput (ties: fewer GPUs, then the
    /// lower type id).
    pub fn best(&self) -> Option<&ConfigEstimate> {
        self.entries.iter().filter(|e| e.throughput > 0.0).fold(
            None,
            |best: Option<&ConfigEstimate>, e| match best {
                Some(b) if b.throughput >= e.throughput => Some(b),
                _ => Some(e),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(gpu: u16, count: u32, throughput: f64) -> ConfigEstimate {
        ConfigEstimate {
            gpu: GpuModelId(gpu),
            count,
            throughput,
            plan: None,
        }
    }

    #[test]
    fn lookups_sort_and_replace() {
        let e = ConfigEstimates::new(vec![est(1, 4, 3.0), est(0, 2, 1.0), est(1, 4, 5.0)]);
        assert_eq!(e.entries().len(), 2);
        assert_eq!(e.get(GpuModelId(1), 4).map(|x| x.throughput), Some(5.0));
        assert_eq!(e.get(GpuModelId(0), 4), None);
        assert_eq!(e.best().map(|x| (x.gpu, x.count)), Some((GpuModelId(1), 4)));
    }

    #[test]
    fn infeasible_entries_are_never_best() {
        let e = ConfigEstimates::new(vec![est(0, 1, 0.0), est(0, 2, 0.0)]);
        assert!(e.best().is_none());
        assert_eq!(e.on_type(GpuModelId(0)).count(), 0);
    }
}
