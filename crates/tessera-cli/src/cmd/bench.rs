//! `tessera bench`: the speed targets of DESIGN §7, measured on this machine.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Result};
use serde::Serialize;
use tessera_model::{GpuCatalog, SimDuration};
use tessera_sched::PolicyOptions;
use tessera_sim::SimConfig;
use tessera_trace::synthetic::{DurationDist, PoissonWorkload, PHILLY_GPU_MIX};

use super::simulate::{run_policies, PolicyRun};
use crate::args::{BenchArgs, Format};
use crate::builtin;
use crate::report::{human_secs, table};

/// Offered load of the synthetic Philly-sized trace: 80% of 2,048 GPUs given the Philly
/// runtime sample's mean (4.06 h) and the Philly GPU mix's mean (2.125 GPUs).
const PHILLY_BENCH_JOBS_PER_HOUR: f64 = 190.0;

#[derive(Debug, Serialize)]
struct BenchRow {
    name: String,
    jobs: usize,
    finished: usize,
    wall_s: f64,
    events: u64,
    events_per_s: f64,
    scheduling_points: u64,
    peak_rss_mib: Option<f64>,
    target_s: f64,
}

/// Peak resident memory of this process so far (Linux), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

pub fn run(args: &BenchArgs) -> Result<()> {
    if !matches!(args.which.as_str(), "philly" | "all") {
        bail!("unknown benchmark {:?} (known: philly, all)", args.which);
    }
    let catalog = GpuCatalog::builtin();
    let cluster = tessera_model::Cluster::from_yaml(
        builtin::cluster_yaml("philly-2048").unwrap_or_default(),
        &catalog,
    )?;
    let started = Instant::now();
    let workload = PoissonWorkload {
        jobs: args.jobs,
        jobs_per_hour: PHILLY_BENCH_JOBS_PER_HOUR,
        gpu_mix: PHILLY_GPU_MIX.to_vec(),
        durations: DurationDist::PhillyRuntimes,
        seed: 1,
    }
    .generate();
    let generate_s = started.elapsed().as_secs_f64();
    eprintln!("generated {} jobs in {generate_s:.2} s", workload.len());

    let cases = [
        ("fifo", None, 10.0),
        ("las", Some(SimDuration::from_secs(300)), 30.0),
    ];
    let mut rows = Vec::new();
    for (policy, round, target_s) in cases {
        let run = PolicyRun {
            name: policy.to_string(),
            options: PolicyOptions { round },
        };
        let config = SimConfig {
            record_timeseries: false,
            ..SimConfig::default()
        };
        let mut results =
            run_policies(&cluster, &workload, std::slice::from_ref(&run), &config, 1)?;
        let Some((report, wall_s)) = results.pop() else {
            bail!("benchmark {policy} produced no result")
        };
        let name = match round {
            Some(r) => format!("{policy}, {} s rounds", r.as_secs_f64()),
            None => policy.to_string(),
        };
        rows.push(BenchRow {
            name,
            jobs: report.summary.jobs,
            finished: report.summary.finished,
            wall_s,
            events: report.summary.events,
            events_per_s: report.summary.events as f64 / wall_s.max(1e-9),
            scheduling_points: report.summary.scheduling_points,
            peak_rss_mib: peak_rss_mib(),
            target_s,
        });
    }

    let mut out = std::io::stdout().lock();
    match args.format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?,
        Format::Table => {
            writeln!(
                out,
                "Philly-sized synthetic trace: {} jobs, Poisson {PHILLY_BENCH_JOBS_PER_HOUR} jobs/h, on 2,048 GPUs (256 x 8)\n",
                workload.len()
            )?;
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.name.clone(),
                        format!("{}/{}", r.finished, r.jobs),
                        format!("{:.2} s", r.wall_s),
                        format!("< {} s", r.target_s),
                        format!("{}", r.events),
                        format!("{:.0}", r.events_per_s),
                        format!("{}", r.scheduling_points),
                        r.peak_rss_mib
                            .map(|m| format!("{m:.0} MiB"))
                            .unwrap_or_else(|| "n/a".into()),
                    ]
                })
                .collect();
            write!(
                out,
                "{}",
                table(
                    &[
                        "run",
                        "finished",
                        "wall",
                        "target",
                        "events",
                        "events/s",
                        "sched points",
                        "peak RSS"
                    ],
                    &cells
                )
            )?;
            writeln!(
                out,
                "\n(trace generation: {}; peak RSS is the process's high-water mark so far)",
                human_secs(generate_s)
            )?;
        }
    }
    Ok(())
}
