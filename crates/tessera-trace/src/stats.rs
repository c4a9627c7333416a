//! Summary statistics of a workload, for `tessera trace inspect`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use tessera_model::{SimDuration, SimTime, Workload};

/// What a workload looks like at a glance.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceStats {
    /// Number of jobs.
    pub jobs: usize,
    /// Earliest submit time (zero for an empty workload).
    pub first_submit: SimTime,
    /// Latest submit time (zero for an empty workload).
    pub last_submit: SimTime,
    /// `last_submit - first_submit`.
    pub span: SimDuration,
    /// (GPUs per job, number of jobs), by GPU count.
    pub gpu_histogram: Vec<(u32, usize)>,
    /// Σ GPUs × duration, in hours.
    pub gpu_hours: f64,
    /// Mean run time.
    pub duration_mean: SimDuration,
    /// Median run time (nearest rank).
    pub duration_p50: SimDuration,
    /// 90th-percentile run time (nearest rank).
    pub duration_p90: SimDuration,
    /// 99th-percentile run time (nearest rank).
    pub duration_p99: SimDuration,
    /// Longest run time.
    pub duration_max: SimDuration,
    /// Distinct tenants (the empty tenant counts as one).
    pub tenants: usize,
    /// Distinct non-empty model names.
    pub models: usize,
    /// Jobs asking for a fraction of one GPU (counted as a whole GPU in `gpu_hours`).
    pub gpu_shares: usize,
}

impl TraceStats {
    /// Computes the statistics of `w`.
    pub fn of(w: &Workload) -> TraceStats {
        let jobs = w.jobs();
        let first_submit = jobs.iter().map(|j| j.submit).min().unwrap_or(SimTime::ZERO);
        let last_submit = jobs.iter().map(|j| j.submit).max().unwrap_or(SimTime::ZERO);
        let mut histogram: BTreeMap<u32, usize> = BTreeMap::new();
        for j in jobs {
            *histogram.entry(j.gpus).or_default() += 1;
        }
        let gpu_hours = jobs
            .iter()
            .map(|j| f64::from(j.gpus) * j.duration.as_secs_f64())
            .sum::<f64>()
            / 3600.0;
        let mut durations: Vec<u64> = jobs.iter().map(|j| j.duration.as_micros()).collect();
        durations.sort_unstable();
        let total: u128 = durations.iter().map(|d| u128::from(*d)).sum();
        let mean = if durations.is_empty() {
            0
        } else {
            total / durations.len() as u128
        };
        let pct = |p: f64| SimDuration::from_micros(nearest_rank(&durations, p));
        TraceStats {
            jobs: jobs.len(),
            first_submit,
            last_submit,
            span: last_submit - first_submit,
            gpu_histogram: histogram.into_iter().collect(),
            gpu_hours,
            duration_mean: SimDuration::from_micros(u64::try_from(mean).unwrap_or(u64::MAX)),
            duration_p50: pct(50.0),
            duration_p90: pct(90.0),
            duration_p99: pct(99.0),
            duration_max: SimDuration::from_micros(durations.last().copied().unwrap_or(0)),
            tenants: jobs
                .iter()
                .map(|j| j.tenant.as_str())
                .collect::<BTreeSet<_>>()
                .len(),
            models: jobs
                .iter()
                .filter(|j| !j.model.is_empty())
                .map(|j| j.model.as_str())
                .collect::<BTreeSet<_>>()
                .len(),
            gpu_shares: jobs.iter().filter(|j| j.gpu_share.is_some()).count(),
        }
    }
}

/// The nearest-rank percentile of sorted values (0 when empty).
fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len()) - 1)
        .copied()
        .unwrap_or(0)
}

/// A span in the most readable unit: `45 s`, `12.5 min`, `3.20 h`, `2.1 d`.
pub fn human_duration(d: SimDuration) -> String {
    let s = d.as_secs_f64();
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 2.0 * 3600.0 {
        format!("{:.1} min", s / 60.0)
    } else if s < 2.0 * 86_400.0 {
        format!("{:.2} h", s / 3600.0)
    } else {
        format!("{:.1} d", s / 86_400.0)
    }
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "jobs:           {}", self.jobs)?;
        writeln!(
            f,
            "submit span:    {} ({} .. {})",
            human_duration(self.span),
            self.first_submit,
            self.last_submit
        )?;
        let hist: Vec<String> = self
            .gpu_histogram
            .iter()
            .map(|(g, n)| {
                let share = 100.0 * *n as f64 / self.jobs.max(1) as f64;
                format!("{g}: {n} ({share:.1}%)")
            })
            .collect();
        writeln!(
            f,
            "GPUs per job:   {}",
            if hist.is_empty() {
                "-".into()
            } else {
                hist.join(", ")
            }
        )?;
        writeln!(f, "GPU-hours:      {:.1}", self.gpu_hours)?;
        writeln!(
            f,
            "duration:       mean {}, p50 {}, p90 {}, p99 {}, max {}",
            human_duration(self.duration_mean),
            human_duration(self.duration_p50),
            human_duration(self.duration_p90),
            human_duration(self.duration_p99),
            human_duration(self.duration_max)
        )?;
        writeln!(f, "tenants:        {}", self.tenants)?;
        writeln!(f, "models:         {}", self.models)?;
        // Only traces with GPU sharing have the line, so other outputs stay as they were.
        if self.gpu_shares > 0 {
            writeln!(
                f,
                "GPU shares:     {} jobs ask for a fraction of one GPU",
                self.gpu_shares
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::TrainingJob;

    #[test]
    fn stats_of_a_small_workload() {
        let mk = |t: u64, g: u32, d: u64, tenant: &str| {
            let mut j = TrainingJob::simple(0, SimTime::from_secs(t), g, SimDuration::from_secs(d));
            j.tenant = tenant.into();
            j
        };
        let w = Workload::new(
            (1..=100)
                .map(|i| mk(i * 10, if i % 4 == 0 { 4 } else { 1 }, i * 60, "a"))
                .collect(),
        );
        let s = TraceStats::of(&w);
        assert_eq!(s.jobs, 100);
        assert_eq!(s.span, SimDuration::from_secs(990));
        assert_eq!(s.gpu_histogram, vec![(1, 75), (4, 25)]);
        assert_eq!(s.duration_p50, SimDuration::from_secs(50 * 60));
        assert_eq!(s.duration_p90, SimDuration::from_secs(90 * 60));
        assert_eq!(s.duration_p99, SimDuration::from_secs(99 * 60));
        assert_eq!(s.duration_max, SimDuration::from_secs(100 * 60));
        assert_eq!(s.tenants, 1);
        let text = s.to_string();
        assert!(
            text.contains("jobs:           100") && text.contains("4: 25 (25.0%)"),
            "{text}"
        );
        assert_eq!(s.gpu_shares, 0);
        assert!(!text.contains("GPU shares"), "{text}");
        let mut shared = mk(0, 1, 60, "b");
        shared.gpu_share = Some(tessera_model::GpuShareRequest {
            sm_permille: 300,
            memory: None,
        });
        let s = TraceStats::of(&Workload::new(vec![shared, mk(5, 2, 60, "b")]));
        assert_eq!(s.gpu_shares, 1);
        assert!(
            s.to_string()
                .contains("GPU shares:     1 jobs ask for a fraction of one GPU"),
            "{s}"
        );
        let empty = TraceStats::of(&Workload::default());
        assert_eq!(empty.jobs, 0);
        assert!(empty.to_string().contains("GPUs per job:   -"));
    }
}
