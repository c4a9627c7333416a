//! `tessera simulate`: one workload, one cluster, several policies, one comparison.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use tessera_model::{Cluster, GpuCatalog, SimDuration, Workload};
use tessera_perf::{RestartCosts, TraceThroughput};
use tessera_sched::{build_policy, PolicyOptions, POLICIES};
use tessera_sim::{SimConfig, SimReport, Simulation};

use crate::args::SimulateArgs;
use crate::inputs::{check_fit, load_cluster, load_trace, parse_format};
use crate::progress::Bars;
use crate::report::{comparison_table, write_outputs, PolicySummary, SummaryDoc};

/// A finished run: its report and wall time in seconds.
pub type RunResult = Result<(SimReport, f64)>;

/// One policy to run: its registry name and options.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    pub name: String,
    pub options: PolicyOptions,
}

pub fn run(args: &SimulateArgs) -> Result<()> {
    let catalog = GpuCatalog::builtin();
    let cluster = load_cluster(&args.cluster, &catalog)?;
    let format = parse_format(&args.trace_format)?;
    let trace = load_trace(&args.trace, format, &catalog, args.skip_invalid, args.seed)?;
    if trace.detected {
        eprintln!("{}: detected trace format {}", args.trace, trace.format);
    }
    if trace.skipped > 0 {
        eprintln!("{}: skipped {} malformed rows", args.trace, trace.skipped);
    }
    let unfit = check_fit(&args.trace, &trace, &cluster, args.reject_unfit)?;
    if unfit > 0 {
        eprintln!(
            "{}: {unfit} jobs can never fit this cluster and are reported as rejected",
            args.trace
        );
    }

    let round = match args.round {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            anyhow::bail!("--round must be a positive number of seconds, got {s}")
        }
        Some(s) => Some(SimDuration::from_secs_f64(s)),
        None => None,
    };
    let names: Vec<String> = if args.policies.is_empty() {
        POLICIES.iter().map(|p| p.name.to_string()).collect()
    } else {
        args.policies.clone()
    };
    let runs: Vec<PolicyRun> = names
        .into_iter()
        .map(|name| PolicyRun {
            name,
            options: PolicyOptions { round },
        })
        .collect();
    // Fail on an unknown name before any run starts.
    for r in &runs {
        build_policy(&r.name, &r.options).with_context(|| "--policy".to_string())?;
    }
    let config = SimConfig {
        restart_costs: if args.no_restart_cost {
            RestartCosts::free()
        } else {
            RestartCosts::default()
        },
        ..SimConfig::default()
    };
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let results = run_policies(&cluster, &trace.workload, &runs, &config, threads)?;

    let summaries: Vec<PolicySummary> = results
        .iter()
        .map(|(r, wall)| PolicySummary::new(r, *wall))
        .collect();
    let doc = SummaryDoc {
        cluster: format!("{} ({})", args.cluster, cluster.name),
        gpus: cluster.totals().0,
        trace: args.trace.clone(),
        trace_format: trace.format.to_string(),
        seed: args.seed,
        round_s: round.map(|r| r.as_secs_f64()),
        policies: summaries,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        let (gpus, _, _) = cluster.totals();
        writeln!(
            out,
            "{} jobs from {} ({}) on {} ({} nodes, {gpus} GPUs){}",
            trace.workload.len(),
            args.trace,
            trace.format,
            args.cluster,
            cluster.nodes.len(),
            round
                .map(|r| format!(", {} s rounds", r.as_secs_f64()))
                .unwrap_or_default()
        )?;
        writeln!(out)?;
        write!(out, "{}", comparison_table(&doc.policies))?;
    }
    if let Some(dir) = &args.out {
        let reports: Vec<SimReport> = results.into_iter().map(|(r, _)| r).collect();
        write_outputs(dir, &doc, &reports)?;
        eprintln!(
            "wrote {}/{{summary.json,jobs.csv,timeseries.csv}}",
            dir.display()
        );
    }
    Ok(())
}

/// Runs each policy on its own thread (at most `threads` at once); results in input order
/// with their wall time in seconds.
pub fn run_policies(
    cluster: &Cluster,
    workload: &Workload,
    runs: &[PolicyRun],
    config: &SimConfig,
    threads: usize,
) -> Result<Vec<(SimReport, f64)>> {
    let bars = Bars::new();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<RunResult>>> =
        Mutex::new((0..runs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, runs.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(spec) = runs.get(i) else { break };
                let outcome = (|| {
                    let policy = build_policy(&spec.name, &spec.options)?;
                    let mut bar = bars.bar(&spec.name, workload.len());
                    let started = Instant::now();
                    let sim = Simulation::new(
                        cluster,
                        workload,
                        &TraceThroughput,
                        policy,
                        config.clone(),
                    );
                    let report = sim
                        .run(&mut bar)
                        .with_context(|| format!("simulating policy {}", spec.name))?;
                    Ok((report, started.elapsed().as_secs_f64()))
                })();
                if let Ok(mut slots) = results.lock() {
                    slots[i] = Some(outcome);
                }
            });
        }
    });
    let slots = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?;
    slots
        .into_iter()
        .map(|s| s.unwrap_or_else(|| Err(anyhow::anyhow!("a simulation did not run"))))
        .collect()
}
