//! Rendering results: the comparison table, `summary.json`, `jobs.csv`, `timeseries.csv`.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use tessera_sched::WaitKind;
use tessera_sim::{JobOutcome, SimReport, Summary};

/// One policy's line of `summary.json` (a stable contract: extend, do not break): the policy,
/// every field of the simulator's [`Summary`] flattened beside it, and the wall time; for a
/// policy whose run failed, no summary and the `error` instead.
#[derive(Debug, Clone, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    #[serde(flatten)]
    pub summary: Option<Summary>,
    /// Why the policy's run failed (the other policies' results stand); absent when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub wall_s: f64,
    /// Policy counters (e.g. Synergy-OPT's solve time and gap), as [name, value] pairs;
    /// absent for policies without any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policy_stats: Vec<(String, f64)>,
    /// What the policy's mechanism plugged into the simulator (its serving setup); absent
    /// for policies without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// What the policy would not honour and how the run dealt with it
    /// (`--ignore-unsupported`); absent when it honoured everything.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<IgnoredSummary>,
}

/// Requests of one capability a policy ignored (`summary.json`'s `ignored`).
#[derive(Debug, Clone, Serialize)]
pub struct IgnoredSummary {
    /// The capability's key (`gpu-types`).
    pub what: String,
    /// How many elements asked for it.
    pub count: usize,
    /// What the run did with them.
    pub how: String,
}

impl From<&tessera_mechanisms::capabilities::Ignored> for IgnoredSummary {
    fn from(i: &tessera_mechanisms::capabilities::Ignored) -> IgnoredSummary {
        IgnoredSummary {
            what: i.capability.key().to_string(),
            count: i.count,
            how: i.how.to_string(),
        }
    }
}

impl PolicySummary {
    pub fn new(report: &SimReport, wall_s: f64) -> PolicySummary {
        PolicySummary {
            policy: report.policy.clone(),
            summary: Some(report.summary.clone()),
            error: None,
            wall_s,
            policy_stats: report.policy_stats.clone(),
            setup: None,
            ignored: Vec::new(),
        }
    }

    /// The row of a policy whose run failed with `error`.
    pub fn failed(policy: &str, error: String, wall_s: f64) -> PolicySummary {
        PolicySummary {
            policy: policy.to_string(),
            summary: None,
            error: Some(error),
            wall_s,
            policy_stats: Vec::new(),
            setup: None,
            ignored: Vec::new(),
        }
    }
}

/// The rows whose policy ran, with their summaries.
fn ran(summaries: &[PolicySummary]) -> impl Iterator<Item = (&PolicySummary, &Summary)> {
    summaries
        .iter()
        .filter_map(|p| p.summary.as_ref().map(|s| (p, s)))
}

/// One line per failed policy, under a table: `POLICY: failed: ERROR`.
pub fn failed_notes(summaries: &[PolicySummary]) -> String {
    summaries
        .iter()
        .filter_map(|p| {
            p.error
                .as_ref()
                .map(|e| format!("{}: failed: {e}\n", p.policy))
        })
        .collect()
}

/// Truth model and engine semantics of a run, when not the defaults (trace, exact).
#[derive(Debug, Serialize)]
pub struct EngineSummary {
    /// `trace` or `synergy` (sensitivity tables).
    pub perf: String,
    /// `exact` or `synergy` (the reference's rounds).
    pub semantics: String,
    /// Optimistic profiling cost, seconds of one GPU per job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_cost_s: Option<f64>,
    /// Optimistic profiling relative error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_error: Option<f64>,
}

/// Which truth model a run used and why.
#[derive(Debug, Clone, Serialize)]
pub struct TruthSummary {
    /// `trace` or a registered truth's name.
    pub name: String,
    /// `auto: …` (what in the inputs chose it) or `given by --perf`.
    pub why: String,
}

/// The whole `summary.json` document.
#[derive(Debug, Serialize)]
pub struct SummaryDoc {
    /// How the policies were compared when not as asked one by one: the default run's
    /// relaxed comparison ([`crate::cmd::simulate::DEFAULT_COMPARISON`]); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<String>,
    pub cluster: String,
    pub gpus: u64,
    pub trace: String,
    pub trace_format: String,
    pub seed: u64,
    pub round_s: Option<f64>,
    /// Truth and semantics, present only when not the defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineSummary>,
    /// The truth the runs used and why (`--perf auto` picks it from the inputs).
    pub truth: TruthSummary,
    /// Re-drawn arrivals (`poisson:RATE`), present only when not the trace's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<String>,
    /// Trace rows or jobs the reader skipped, present only when some were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_skipped: Option<usize>,
    /// Jobs the reader dropped as not replayable (philly-json: unfinished, zero-length),
    /// present only when some were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_dropped: Option<usize>,
    pub policies: Vec<PolicySummary>,
}

/// Hours with one decimal, or seconds/minutes for short times.
pub fn human_secs(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.2} h", s / 3600.0)
    } else if s >= 60.0 {
        format!("{:.1} m", s / 60.0)
    } else {
        format!("{s:.1} s")
    }
}

/// Renders rows as an aligned text table (first column left-aligned, others right).
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    // Cells quote input (service, job, node and axis names): no raw control characters.
    let header: Vec<String> = header.iter().map(|h| tessera_trace::printable(h)).collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| tessera_trace::printable(c)).collect())
        .collect();
    tessera_mechanisms::experiment::text_table(&header, &rows)
}

fn not_given(v: &tessera_sim::ServiceSummary) -> bool {
    v.unschedulable
        .as_deref()
        .is_some_and(|w| w.starts_with(tessera_mechanisms::capabilities::NOT_GIVEN))
}

/// The serving and device-activity comparison, one row per policy and service; empty when
/// the workload has no services.
pub fn serving_table(summaries: &[PolicySummary]) -> String {
    if ran(summaries).all(|(_, s)| s.services.is_empty()) {
        return String::new();
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (p, s) in ran(summaries) {
        // Services the policy was not given: a note below, not a row each.
        for v in s.services.iter().filter(|v| !not_given(v)) {
            rows.push(vec![
                p.policy.clone(),
                v.service.clone(),
                format!("{}/{}", v.served, v.requests),
                v.dropped.to_string(),
                format!("{:.2}%", 100.0 * v.slo_violation_rate),
                format!("{:.1}", v.served_rps),
                format!("{:.1} ms", 1e3 * v.p50_latency_s),
                format!("{:.1} ms", 1e3 * v.p99_latency_s),
                format!("{:.2}/{}", v.mean_instances, v.peak_instances),
                format!("{}/{:.2}", s.peak_active_gpus, s.mean_active_gpus),
                format!("{:.3}/{:.3}", s.mean_sm_frag, s.mean_mem_frag),
            ]);
        }
    }
    let mut notes = String::new();
    for (p, s) in ran(summaries) {
        let mut removed = Vec::new();
        for v in &s.services {
            match &v.unschedulable {
                // Services a policy was not given (simulate's relaxed runs): one line.
                Some(_) if not_given(v) => removed.push(v.service.as_str()),
                Some(why) => notes.push_str(&format!(
                    "{} under {}: unschedulable: {why}\n",
                    v.service, p.policy
                )),
                None => {}
            }
        }
        if !removed.is_empty() {
            notes.push_str(&format!(
                "{}: not given {} (it serves no services): every request dropped\n",
                p.policy,
                removed.join(", ")
            ));
        }
    }
    format!(
        "\n{}{notes}",
        table(
            &[
                "policy",
                "service",
                "served",
                "dropped",
                "SLO viol.",
                "served RPS",
                "p50",
                "p99",
                "instances mean/peak",
                "active GPUs peak/mean",
                "frag SM/mem",
            ],
            &rows,
        )
    )
}

/// Failures injected per policy (issue 9), when any were: down events, capacity down, GPU
/// time and work lost since the last checkpoints, restarts per job, jobs failed (with why).
pub fn failures_table(summaries: &[PolicySummary]) -> String {
    if ran(summaries).all(|(_, s)| s.failures.is_none()) {
        return String::new();
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut notes = String::new();
    for (p, s) in ran(summaries) {
        let Some(f) = &s.failures else {
            continue;
        };
        rows.push(vec![
            p.policy.clone(),
            f.failures.to_string(),
            format!("{:.1}", f.down_gpu_hours),
            format!("{:.2}", f.lost_gpu_hours),
            format!("{:.3}/{}", f.restarts_per_job.mean, f.restarts_per_job.max),
            f.failed.to_string(),
        ]);
        for j in &f.failed_jobs {
            notes.push_str(&format!(
                "{} under {}: failed: {}\n",
                j.name, p.policy, j.reason
            ));
        }
    }
    format!(
        "\n{}{notes}",
        table(
            &[
                "policy",
                "failures",
                "GPU-h down",
                "GPU-h lost",
                "restarts/job mean/max",
                "jobs failed",
            ],
            &rows,
        )
    )
}

/// The comparison table of `tessera simulate`; speed-ups are relative to the first policy
/// that ran. "GPU util" counts GPUs held in parts (MIG instances, quotas) by their share
/// (GPU-equivalents); when a run held parts, "whole-GPU util" beside it counts GPUs held
/// whole only. A policy whose run failed has a row saying so, and its error below the table.
/// "GPUs used" is the time-averaged number of GPUs with any holder (job or service
/// instance, whole or in part). With services, two more columns: the SLO goodput (requests
/// served within their SLO over all requests, dropped ones included) and the requests
/// dropped.
pub fn comparison_table(summaries: &[PolicySummary]) -> String {
    let base = ran(summaries)
        .next()
        .map(|(_, s)| s.avg_jct_s)
        .unwrap_or(0.0);
    let services = ran(summaries).any(|(_, s)| !s.services.is_empty());
    // GPU util counts parts (MIG instances, quotas) by their share; when some run held
    // parts, the whole-GPU figure beside it says how much of the use was whole GPUs.
    let parts = ran(summaries).any(|(_, s)| s.whole_gpu_util < s.gpu_util);
    let mut header = vec![
        "policy",
        "finished",
        "rejected",
        "unfinished",
        "avg JCT",
        "vs first",
        "p50 JCT",
        "p99 JCT",
        "makespan",
        "avg queue",
        "GPU util",
    ];
    if parts {
        header.push("whole-GPU util");
    }
    header.push("GPUs used");
    if services {
        header.extend(["SLO goodput", "req. dropped"]);
    }
    header.extend(["preempt", "wall"]);
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|p| {
            let Some(s) = &p.summary else {
                let mut row = vec![p.policy.clone(), "FAILED".to_string()];
                row.resize(header.len() - 1, "-".to_string());
                row.push(format!("{:.2} s", p.wall_s));
                return row;
            };
            // As the plots' bars: none for a policy without a finished job (or when the
            // first policy finished none), not 0 or infinity.
            let speedup = if s.avg_jct_s > 0.0 && base > 0.0 {
                format!("{:.2}x", base / s.avg_jct_s)
            } else {
                "none".into()
            };
            let mut row = vec![
                p.policy.clone(),
                format!("{}/{}", s.finished, s.jobs),
                s.rejected.to_string(),
                s.unfinished.to_string(),
                human_secs(s.avg_jct_s),
                speedup,
                human_secs(s.p50_jct_s),
                human_secs(s.p99_jct_s),
                human_secs(s.makespan_s),
                human_secs(s.avg_queue_s),
                format!("{:.1}%", 100.0 * s.gpu_util),
            ];
            if parts {
                row.push(format!("{:.1}%", 100.0 * s.whole_gpu_util));
            }
            row.push(format!("{:.1}", s.mean_active_gpus));
            if services {
                row.push(
                    s.slo_goodput()
                        .map_or("-".into(), |g| format!("{:.1}%", 100.0 * g)),
                );
                row.push(s.requests_dropped().to_string());
            }
            row.push(s.preemptions.to_string());
            row.push(format!("{:.2} s", p.wall_s));
            row
        })
        .collect();
    table(&header, &rows) + &failed_notes(summaries)
}

/// Each node's name and GPU model, by node index: what `jobs.csv` says of where a job ran.
#[derive(Debug, Clone, Default)]
pub struct NodeLabels {
    pub names: Vec<String>,
    pub gpus: Vec<String>,
}

impl NodeLabels {
    pub fn of(cluster: &tessera_model::Cluster) -> NodeLabels {
        NodeLabels {
            names: cluster.nodes.iter().map(|n| n.name.clone()).collect(),
            gpus: cluster
                .nodes
                .iter()
                .map(|n| cluster.catalog.get(n.gpu).name.clone())
                .collect(),
        }
    }

    /// The `nodes` and `gpu_types` cells of a job that ran on `nodes`: names joined by `;`,
    /// GPU types once each, in order of first use.
    fn cells(&self, nodes: &[tessera_model::NodeId]) -> (String, String) {
        let label = |v: &[String], i: usize| v.get(i).cloned().unwrap_or_else(|| format!("#{i}"));
        let names: Vec<String> = nodes
            .iter()
            .map(|n| label(&self.names, n.index()))
            .collect();
        let mut types: Vec<String> = Vec::new();
        for n in nodes {
            let t = label(&self.gpus, n.index());
            if !types.contains(&t) {
                types.push(t);
            }
        }
        (names.join(";"), types.join(";"))
    }
}

/// Writes `jobs.csv` (one row per job and policy, with the nodes and GPU types it ran on),
/// `summary.json` and `timeseries.csv`.
pub fn write_outputs(
    dir: &Path,
    doc: &SummaryDoc,
    reports: &[SimReport],
    nodes: &NodeLabels,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let summary_path = dir.join("summary.json");
    let json = serde_json::to_string_pretty(doc)?;
    std::fs::write(&summary_path, json + "\n")
        .with_context(|| format!("writing {}", summary_path.display()))?;

    let jobs_path = dir.join("jobs.csv");
    let mut w = csv::Writer::from_path(&jobs_path)
        .with_context(|| format!("writing {}", jobs_path.display()))?;
    // With failures injected, two more columns: restarts after failures and GPU-seconds lost.
    let failures = reports.iter().any(|r| r.summary.failures.is_some());
    let mut header = vec![
        "policy",
        "job_id",
        "name",
        "gpus",
        "submit_s",
        "start_s",
        "finish_s",
        "jct_s",
        "queue_s",
        "outcome",
        "reason",
        "preemptions",
        "gpu_secs",
        "nodes",
        "gpu_types",
    ];
    // Seconds waited per reason (tessera_sched::WaitKind), one column per kind: together
    // the time from arrival to first start (`queue_s`) plus any time queued again after
    // preemptions or failures.
    let wait_columns: Vec<String> = WaitKind::ALL
        .iter()
        .map(|k| format!("wait_{}_s", k.key()))
        .collect();
    header.extend(wait_columns.iter().map(String::as_str));
    if failures {
        header.extend(["restarts", "lost_gpu_secs"]);
    }
    w.write_record(&header)?;
    let opt = |v: Option<f64>| v.map(|x| format!("{x}")).unwrap_or_default();
    for r in reports {
        for j in &r.jobs {
            let (outcome, reason) = match &j.outcome {
                JobOutcome::Finished => ("finished", String::new()),
                JobOutcome::Rejected { reason } => ("rejected", reason.clone()),
                JobOutcome::Unfinished { reason } => ("unfinished", reason.clone()),
                JobOutcome::Failed { reason } => ("failed", reason.clone()),
            };
            let mut row = vec![
                r.policy.clone(),
                j.job.0.to_string(),
                j.name.to_string(),
                j.gpus.to_string(),
                format!("{}", j.submit.as_secs_f64()),
                opt(j.first_start.map(|t| t.as_secs_f64())),
                opt(j.finish.map(|t| t.as_secs_f64())),
                opt(j.jct_secs()),
                opt(j.queue_secs()),
                outcome.to_string(),
                reason,
                j.preemptions.to_string(),
                format!("{:.3}", j.gpu_secs),
            ];
            let (where_nodes, where_types) =
                nodes.cells(r.placements.get(j.job.index()).map_or(&[], Vec::as_slice));
            row.push(where_nodes);
            row.push(where_types);
            // Empty cells when the engine did not count them (the reference semantics).
            match r.waits.get(j.job.index()) {
                Some(waited) => row.extend(waited.iter().map(|s| format!("{s}"))),
                None => row.extend(WaitKind::ALL.iter().map(|_| String::new())),
            }
            if failures {
                let f = r
                    .summary
                    .failures
                    .as_ref()
                    .and_then(|f| f.per_job.get(j.job.index()))
                    .copied()
                    .unwrap_or_default();
                row.push(f.restarts.to_string());
                row.push(format!("{:.3}", f.lost_gpu_secs));
            }
            w.write_record(&row)?;
        }
    }
    w.flush()?;

    let ts_path = dir.join("timeseries.csv");
    let mut w = csv::Writer::from_path(&ts_path)
        .with_context(|| format!("writing {}", ts_path.display()))?;
    // With GPUs held in parts (MIG instances, quotas), one more column: busy GPUs in
    // GPU-equivalents (`gpus` counts whole GPUs only).
    let parts = reports
        .iter()
        .any(|r| r.timeseries.iter().any(|s| s.part_units > 0));
    let mut header = vec![
        "policy",
        "time_s",
        "gpus",
        "cpu_cores",
        "memory_gib",
        "running",
        "queued",
        "active_gpus",
        "sm_frag",
        "mem_frag",
    ];
    if parts {
        header.push("gpu_equiv");
    }
    w.write_record(&header)?;
    for r in reports {
        for s in &r.timeseries {
            let mut row = vec![
                r.policy.clone(),
                format!("{}", s.time.as_secs_f64()),
                s.gpus.to_string(),
                format!("{:.3}", s.cpu_milli as f64 / 1000.0),
                format!("{:.3}", s.memory_bytes as f64 / (1u64 << 30) as f64),
                s.running.to_string(),
                s.queued.to_string(),
                s.active_gpus.to_string(),
                format!("{:.4}", s.sm_frag),
                format!("{:.4}", s.mem_frag),
            ];
            if parts {
                row.push(format!("{:.3}", s.gpu_equiv()));
            }
            w.write_record(&row)?;
        }
    }
    w.flush()?;
    if reports.iter().any(|r| !r.service_instances.is_empty()) {
        // Each service's instance count at every change.
        let path = dir.join("instances.csv");
        let mut w =
            csv::Writer::from_path(&path).with_context(|| format!("writing {}", path.display()))?;
        w.write_record(["policy", "service", "time_s", "instances"])?;
        for r in reports {
            for series in &r.service_instances {
                for (t, n) in &series.points {
                    w.write_record([
                        r.policy.clone(),
                        series.service.clone(),
                        format!("{}", t.as_secs_f64()),
                        n.to_string(),
                    ])?;
                }
            }
        }
        w.flush()?;
    }
    Ok(())
}
