//! Counters and the scheduling-latency histogram, rendered in the Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write;

/// Upper bounds (seconds) of the scheduling-latency histogram buckets.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A cumulative histogram.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    counts: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&mut self, v: f64) {
        for (i, b) in LATENCY_BUCKETS.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += v;
    }
    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// Everything the daemon counts.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Decision latency of each scheduling call (view, policy, validation).
    pub scheduling_latency: Histogram,
    /// Preemptions by reason (`policy`, `resize`, `backend`).
    pub preemptions: BTreeMap<&'static str, u64>,
    /// Actions the daemon refused (would over-allocate, or inconsistent).
    pub rejected_actions: u64,
    /// Backend calls that failed.
    pub backend_errors: u64,
    /// Jobs accepted.
    pub submissions: u64,
    /// Retunes by outcome (`in_place`, `restart`).
    pub retunes: BTreeMap<&'static str, u64>,
    /// GPU reconfigurations by outcome (`done`, `declined`, `failed`).
    pub reconfigurations: BTreeMap<&'static str, u64>,
    /// Daemon loop: time a request waited in the engine's channel before the loop took it.
    pub engine_wait: Histogram,
    /// Daemon loop: time of each iteration's one store commit (its fsync included).
    pub engine_commit: Histogram,
    /// Daemon loop: iterations that did any work.
    pub engine_iterations: u64,
    /// Store transactions committed by the engine.
    pub store_commits: u64,
}

/// A point-in-time snapshot the engine fills for rendering.
#[derive(Debug, Default)]
pub struct Gauges {
    /// Jobs per state name.
    pub jobs: Vec<(&'static str, u64)>,
    /// Pending jobs per queue.
    pub pending_per_queue: BTreeMap<String, u64>,
    /// (resource, unit suffix, allocated, capacity).
    pub resources: Vec<(&'static str, f64, f64)>,
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes the buckets, sum and count of histogram `name`.
pub(crate) fn histogram(s: &mut String, name: &str, h: &Histogram) {
    for (i, b) in LATENCY_BUCKETS.iter().enumerate() {
        let _ = writeln!(s, "{name}_bucket{{le=\"{b}\"}} {}", h.counts[i]);
    }
    let _ = writeln!(s, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(s, "{name}_sum {}", h.sum);
    let _ = writeln!(s, "{name}_count {}", h.count);
}

impl Metrics {
    /// The Prometheus text exposition.
    pub fn render(&self, g: &Gauges) -> String {
        let mut s = String::with_capacity(2048);
        let _ = writeln!(
            s,
            "# HELP tessera_jobs Jobs by state.\n# TYPE tessera_jobs gauge"
        );
        for (state, n) in &g.jobs {
            let _ = writeln!(s, "tessera_jobs{{state=\"{state}\"}} {n}");
        }
        let _ = writeln!(s, "# HELP tessera_queue_pending_jobs Pending jobs per queue.\n# TYPE tessera_queue_pending_jobs gauge");
        for (q, n) in &g.pending_per_queue {
            let _ = writeln!(
                s,
                "tessera_queue_pending_jobs{{queue=\"{}\"}} {n}",
                escape(q)
            );
        }
        let _ = writeln!(
            s,
            "# HELP tessera_scheduling_latency_seconds Time to build the view, run the policy and validate its actions.\n# TYPE tessera_scheduling_latency_seconds histogram"
        );
        histogram(
            &mut s,
            "tessera_scheduling_latency_seconds",
            &self.scheduling_latency,
        );
        let _ = writeln!(s, "# HELP tessera_engine_wait_seconds Time a request waited for the engine loop to take it.\n# TYPE tessera_engine_wait_seconds histogram");
        histogram(&mut s, "tessera_engine_wait_seconds", &self.engine_wait);
        let _ = writeln!(s, "# HELP tessera_engine_commit_seconds Time of the engine loop's store commit per iteration.\n# TYPE tessera_engine_commit_seconds histogram");
        histogram(&mut s, "tessera_engine_commit_seconds", &self.engine_commit);
        let _ = writeln!(s, "# HELP tessera_engine_iterations_total Engine loop iterations that did work.\n# TYPE tessera_engine_iterations_total counter\ntessera_engine_iterations_total {}", self.engine_iterations);
        let _ = writeln!(s, "# HELP tessera_store_commits_total Store transactions committed.\n# TYPE tessera_store_commits_total counter\ntessera_store_commits_total {}", self.store_commits);
        let _ = writeln!(s, "# HELP tessera_preemptions_total Preemptions by reason.\n# TYPE tessera_preemptions_total counter");
        for reason in ["policy", "resize", "backend", "node_down", "lost"] {
            let n = self.preemptions.get(reason).copied().unwrap_or(0);
            let _ = writeln!(s, "tessera_preemptions_total{{reason=\"{reason}\"}} {n}");
        }
        let _ = writeln!(s, "# HELP tessera_resource_allocated Resources allocated to jobs (GPUs, CPU cores, memory bytes).\n# TYPE tessera_resource_allocated gauge");
        for (r, alloc, _) in &g.resources {
            let _ = writeln!(s, "tessera_resource_allocated{{resource=\"{r}\"}} {alloc}");
        }
        let _ = writeln!(s, "# HELP tessera_resource_capacity Schedulable capacity (GPUs, CPU cores, memory bytes).\n# TYPE tessera_resource_capacity gauge");
        for (r, _, cap) in &g.resources {
            let _ = writeln!(s, "tessera_resource_capacity{{resource=\"{r}\"}} {cap}");
        }
        let _ = writeln!(s, "# HELP tessera_rejected_actions_total Policy actions refused by validation.\n# TYPE tessera_rejected_actions_total counter\ntessera_rejected_actions_total {}", self.rejected_actions);
        let _ = writeln!(s, "# HELP tessera_backend_errors_total Failed backend calls.\n# TYPE tessera_backend_errors_total counter\ntessera_backend_errors_total {}", self.backend_errors);
        let _ = writeln!(s, "# HELP tessera_submissions_total Jobs accepted.\n# TYPE tessera_submissions_total counter\ntessera_submissions_total {}", self.submissions);
        let _ = writeln!(s, "# HELP tessera_retunes_total Retunes (new quota, CPU or memory on the same devices) by outcome: in place, or checkpoint and restart.\n# TYPE tessera_retunes_total counter");
        for result in ["in_place", "restart"] {
            let n = self.retunes.get(result).copied().unwrap_or(0);
            let _ = writeln!(s, "tessera_retunes_total{{result=\"{result}\"}} {n}");
        }
        let _ = writeln!(s, "# HELP tessera_reconfigurations_total GPU MIG reconfigurations by outcome.\n# TYPE tessera_reconfigurations_total counter");
        for result in ["done", "declined", "failed"] {
            let n = self.reconfigurations.get(result).copied().unwrap_or(0);
            let _ = writeln!(
                s,
                "tessera_reconfigurations_total{{result=\"{result}\"}} {n}"
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets() {
        let mut m = Metrics::default();
        m.scheduling_latency.observe(0.003);
        m.scheduling_latency.observe(0.2);
        *m.preemptions.entry("policy").or_default() += 2;
        let g = Gauges {
            jobs: vec![("pending", 3)],
            pending_per_queue: [("q\"1".to_string(), 3)].into(),
            resources: vec![("gpus", 2.0, 8.0)],
        };
        let text = m.render(&g);
        assert!(text.contains("tessera_scheduling_latency_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("tessera_scheduling_latency_seconds_bucket{le=\"0.25\"} 2\n"));
        assert!(text.contains("tessera_scheduling_latency_seconds_count 2\n"));
        assert!(text.contains("tessera_preemptions_total{reason=\"policy\"} 2\n"));
        assert!(text.contains("tessera_queue_pending_jobs{queue=\"q\\\"1\"} 3\n"));
        assert!(text.contains("tessera_resource_capacity{resource=\"gpus\"} 8\n"));
        assert!(text.contains("tessera_preemptions_total{reason=\"node_down\"} 0\n"));
        *m.retunes.entry("restart").or_default() += 1;
        *m.reconfigurations.entry("failed").or_default() += 1;
        let text = m.render(&g);
        assert!(text.contains("tessera_retunes_total{result=\"restart\"} 1\n"));
        assert!(text.contains("tessera_retunes_total{result=\"in_place\"} 0\n"));
        assert!(text.contains("tessera_reconfigurations_total{result=\"failed\"} 1\n"));
    }
}
