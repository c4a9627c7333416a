//! `tessera simulate`: one workload, one cluster, several policies, one comparison.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use tessera_model::{Cluster, SimDuration, Workload};
use tessera_perf::synergy::{
    OptimisticProfiler, ReferenceProfiler, ReferenceSpeedup, SynergyThroughput, TableMode,
};
use tessera_perf::{RestartCosts, ThroughputModel, TraceThroughput};
use tessera_sched::{build_policy, PolicyOptions, POLICIES};
use tessera_sim::{run_reference, SimConfig, SimReport, Simulation};
use tessera_trace::{with_arrivals, Arrivals};

use crate::args::{PerfArg, SemanticsArg, SimulateArgs};
use crate::inputs::{
    check_fit, format_label, load_catalog, load_cluster, load_trace, parse_format,
};
use crate::progress::Bars;
use crate::report::{comparison_table, write_outputs, EngineInfo, PolicySummary, SummaryDoc};

/// A finished run: its report and wall time in seconds.
pub type RunResult = Result<(SimReport, f64)>;

/// Which truth model the simulator advances jobs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Perf {
    /// Each job's trace throughput, whatever CPU and memory it holds.
    Trace,
    /// Synergy's sensitivity tables (1/2/4-GPU tables by GPU count); jobs are profiled on
    /// arrival (optimistic profiling) so that Synergy policies see estimates.
    Synergy,
}

/// How runs are simulated: truth model and engine semantics.
#[derive(Debug, Clone)]
pub struct Engine {
    /// Truth model.
    pub perf: Perf,
    /// The Synergy reference simulator's round semantics instead of the exact engine.
    pub reference_semantics: bool,
    /// Engine settings (with the profiler set when `perf` is Synergy).
    pub config: SimConfig,
}

impl Engine {
    /// The exact engine with the trace's throughput (what `tessera simulate` does by default).
    pub fn trace(config: SimConfig) -> Engine {
        Engine {
            perf: Perf::Trace,
            reference_semantics: false,
            config,
        }
    }
}

/// True for Synergy registry names (`ORDER+MECH` or `synergy`).
pub fn is_synergy_policy(name: &str) -> bool {
    name.contains('+') || name.eq_ignore_ascii_case("synergy")
}

/// One policy to run: its registry name and options.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    pub name: String,
    pub options: PolicyOptions,
}

/// What `tessera simulate` computed: the `summary.json` document, the reports behind it, and
/// the reader's remarks (detected format, skipped rows) that `run` prints on stderr.
pub struct Simulated {
    pub doc: SummaryDoc,
    pub reports: Vec<SimReport>,
    pub notes: Vec<String>,
    /// Jobs in the (possibly re-timed) workload.
    pub jobs: usize,
    /// Nodes of the cluster.
    pub nodes: usize,
}

pub fn run(args: &SimulateArgs) -> Result<()> {
    let Simulated {
        doc,
        reports,
        notes,
        jobs,
        nodes,
    } = execute(args)?;
    for note in &notes {
        eprintln!("{note}");
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        writeln!(
            out,
            "{jobs} jobs from {} ({}) on {} ({nodes} nodes, {} GPUs){}",
            args.trace,
            doc.trace_format,
            args.cluster,
            doc.gpus,
            doc.round_s
                .map(|r| format!(", {r} s rounds"))
                .unwrap_or_default()
        )?;
        if let Some(e) = &doc.engine {
            let profiling = match (e.profile_cost_s, e.profile_error) {
                (Some(c), Some(err)) => {
                    format!(", optimistic profiling {c} s of one GPU per job, error {err}")
                }
                _ => String::new(),
            };
            writeln!(
                out,
                "truth: {} tables, {} semantics{profiling}",
                e.perf, e.semantics
            )?;
        }
        writeln!(out)?;
        write!(out, "{}", comparison_table(&doc.policies))?;
        for p in &doc.policies {
            if !p.policy_stats.is_empty() {
                let stats: Vec<String> = p
                    .policy_stats
                    .iter()
                    .map(|(k, v)| format!("{k}={v:.4}"))
                    .collect();
                writeln!(out, "{}: {}", p.policy, stats.join(" "))?;
            }
        }
    }
    if let Some(dir) = &args.out {
        write_outputs(dir, &doc, &reports)?;
        eprintln!(
            "wrote {}/{{summary.json,jobs.csv,timeseries.csv}}",
            dir.display()
        );
    }
    Ok(())
}

/// Loads the inputs named by `args`, runs every policy and returns the results without
/// printing or writing anything: the entry point `tessera sweep` calls once per run.
pub fn execute(args: &SimulateArgs) -> Result<Simulated> {
    let mut notes = Vec::new();
    let catalog = load_catalog(args.gpu_catalog.as_deref())?;
    let cluster = load_cluster(&args.cluster, &catalog)?;
    let format = parse_format(&args.trace_format)?;
    let mut trace = load_trace(&args.trace, format, &catalog, args.skip_invalid, args.seed)?;
    let arrivals: Arrivals = args.arrivals.parse().context("--arrivals")?;
    trace.workload = with_arrivals(&trace.workload, arrivals, args.seed);
    let arrivals_label = (arrivals != Arrivals::Trace).then(|| arrivals.to_string());
    if trace.detected {
        notes.push(format!(
            "{}: detected trace format {}",
            args.trace, trace.format
        ));
    }
    if trace.skipped > 0 {
        notes.push(format!(
            "{}: skipped {} malformed rows",
            args.trace, trace.skipped
        ));
    }
    if trace.dropped > 0 {
        notes.push(format!(
            "{}: dropped {} jobs that did not finish or have no run time or GPUs",
            args.trace, trace.dropped
        ));
    }
    let unfit = check_fit(&args.trace, &trace, &cluster, args.reject_unfit)?;
    if unfit > 0 {
        notes.push(format!(
            "{}: {unfit} jobs can never fit this cluster and are reported as rejected",
            args.trace
        ));
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
    let perf = match args.perf {
        PerfArg::Trace => Perf::Trace,
        PerfArg::Synergy => Perf::Synergy,
        PerfArg::Auto if runs.iter().any(|r| is_synergy_policy(&r.name)) => Perf::Synergy,
        PerfArg::Auto => Perf::Trace,
    };
    if !(args.profile_cost.is_finite() && args.profile_cost >= 0.0) {
        anyhow::bail!(
            "--profile-cost must be a non-negative number of seconds, got {}",
            args.profile_cost
        );
    }
    if !(args.profile_error.is_finite() && (0.0..1.0).contains(&args.profile_error)) {
        anyhow::bail!(
            "--profile-error must be a fraction in [0, 1), got {}",
            args.profile_error
        );
    }
    let reference_semantics = args.semantics == SemanticsArg::Synergy;
    let config = SimConfig {
        restart_costs: if args.no_restart_cost || reference_semantics {
            RestartCosts::free()
        } else {
            RestartCosts::default()
        },
        profiler: match (perf, reference_semantics) {
            (Perf::Trace, _) => None,
            (Perf::Synergy, false) => Some(Arc::new(OptimisticProfiler {
                cost: SimDuration::from_secs_f64(args.profile_cost),
                rel_error: args.profile_error,
                ..OptimisticProfiler::default()
            })),
            (Perf::Synergy, true) => Some(Arc::new(ReferenceProfiler)),
        },
        profile_seed: args.seed,
        ..SimConfig::default()
    };
    let engine = Engine {
        perf,
        reference_semantics,
        config,
    };
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let results = run_policies_with(&cluster, &trace.workload, &runs, &engine, threads)?;

    let summaries: Vec<PolicySummary> = results
        .iter()
        .map(|(r, wall)| PolicySummary::new(r, *wall))
        .collect();
    let synergy_info = (perf == Perf::Synergy || reference_semantics).then(|| EngineInfo {
        perf: match perf {
            Perf::Trace => "trace",
            Perf::Synergy => "synergy",
        }
        .to_string(),
        semantics: if reference_semantics {
            "synergy"
        } else {
            "exact"
        }
        .to_string(),
        profile_cost_s: (perf == Perf::Synergy && !reference_semantics)
            .then_some(args.profile_cost),
        profile_error: (perf == Perf::Synergy && !reference_semantics)
            .then_some(args.profile_error),
    });
    let doc = SummaryDoc {
        cluster: format!("{} ({})", args.cluster, cluster.name),
        gpus: cluster.totals().0,
        trace: args.trace.clone(),
        trace_format: format_label(&args.trace, &trace),
        seed: args.seed,
        round_s: round.map(|r| r.as_secs_f64()),
        engine: synergy_info,
        arrivals: arrivals_label,
        trace_skipped: (trace.skipped > 0).then_some(trace.skipped),
        trace_dropped: (trace.dropped > 0).then_some(trace.dropped),
        policies: summaries,
    };
    let reports = results.into_iter().map(|(r, _)| r).collect();
    Ok(Simulated {
        doc,
        reports,
        notes,
        jobs: trace.workload.len(),
        nodes: cluster.nodes.len(),
    })
}

/// Runs each policy on its own thread (at most `threads` at once) with the trace's
/// throughput on the exact engine; results in input order with their wall time in seconds.
pub fn run_policies(
    cluster: &Cluster,
    workload: &Workload,
    runs: &[PolicyRun],
    config: &SimConfig,
    threads: usize,
) -> Result<Vec<(SimReport, f64)>> {
    run_policies_with(
        cluster,
        workload,
        runs,
        &Engine::trace(config.clone()),
        threads,
    )
}

/// Runs each policy on its own thread (at most `threads` at once) under `engine`; results in
/// input order with their wall time in seconds.
pub fn run_policies_with(
    cluster: &Cluster,
    workload: &Workload,
    runs: &[PolicyRun],
    engine: &Engine,
    threads: usize,
) -> Result<Vec<(SimReport, f64)>> {
    let synergy_truth = SynergyThroughput::new(TableMode::PerGpuCount);
    let reference_truth = ReferenceSpeedup::default();
    let truth: &dyn ThroughputModel = match (engine.perf, engine.reference_semantics) {
        (Perf::Trace, _) => &TraceThroughput,
        (Perf::Synergy, false) => &synergy_truth,
        (Perf::Synergy, true) => &reference_truth,
    };
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
                    let started = Instant::now();
                    let report = if engine.reference_semantics {
                        run_reference(cluster, workload, truth, policy, &engine.config)
                    } else {
                        let mut bar = bars.bar(&spec.name, workload.len());
                        let sim = Simulation::new(
                            cluster,
                            workload,
                            truth,
                            policy,
                            engine.config.clone(),
                        );
                        sim.run(&mut bar)
                    }
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
