//! `tessera simulate`: one workload, one cluster, several policies, one comparison.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use tessera_mechanisms::experiment::{engines, run_parallel, EngineInfo};
use tessera_mechanisms::{
    build_policy, build_truth, did_you_mean, mechanism_of_policy, truths, Truth, TruthOptions,
    EXACT_ENGINE,
};
use tessera_model::{Cluster, SimDuration, Workload};
use tessera_perf::{RestartCosts, TraceThroughput};
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, SimReport, Simulation};
use tessera_trace::{with_arrivals, Arrivals};

use crate::args::SimulateArgs;
use crate::inputs::{
    check_fit, format_label, load_catalog, load_cluster, load_trace, parse_format,
};
use crate::progress::Bars;
use crate::report::{comparison_table, write_outputs, EngineSummary, PolicySummary, SummaryDoc};

/// How runs are simulated: truth model, engine semantics and settings.
#[derive(Debug, Clone)]
pub struct Engine {
    /// Truth (and the profiler whose estimates policies see).
    pub truth: Truth,
    /// An alternative engine of the registry, or `None` for the exact engine.
    pub semantics: Option<&'static EngineInfo>,
    /// Engine settings (the profiler is taken from `truth`).
    pub config: SimConfig,
}

fn trace_truth() -> Truth {
    Truth {
        name: "trace",
        model: std::sync::Arc::new(TraceThroughput),
        profiler: None,
    }
}

/// One policy to run: its registry name and options.
#[derive(Debug, Clone)]
pub struct PolicyRun {
    pub name: String,
    pub options: PolicyOptions,
}

/// Resolves `--semantics`: `exact` or a registered engine.
fn resolve_semantics(name: &str) -> Result<Option<&'static EngineInfo>> {
    if name.eq_ignore_ascii_case(EXACT_ENGINE) {
        return Ok(None);
    }
    if let Some(e) = engines().find(|e| e.name.eq_ignore_ascii_case(name)) {
        return Ok(Some(e));
    }
    let known: Vec<&str> = std::iter::once(EXACT_ENGINE)
        .chain(engines().map(|e| e.name))
        .collect();
    let hint = did_you_mean(name, known.iter().copied())
        .map(|k| format!("; did you mean {k:?}?"))
        .unwrap_or_default();
    bail!(
        "--semantics: unknown engine {name:?}{hint} (known: {})",
        known.join(", ")
    )
}

/// Resolves `--perf`: `trace`, a registered truth, or `auto` (the truth the requested
/// policies' mechanism prefers, else trace).
fn resolve_truth(name: &str, runs: &[PolicyRun], options: &TruthOptions) -> Result<Truth> {
    let wanted = if name.eq_ignore_ascii_case("auto") {
        runs.iter()
            .filter_map(|r| mechanism_of_policy(&r.name))
            .find_map(|m| m.preferred_truth())
            .unwrap_or("trace")
    } else {
        name
    };
    if wanted.eq_ignore_ascii_case("trace") {
        return Ok(trace_truth());
    }
    if let Some(t) = build_truth(wanted, options) {
        return Ok(t);
    }
    let known: Vec<&str> = ["auto", "trace"]
        .into_iter()
        .chain(truths().map(|(_, t)| t.name))
        .collect();
    let hint = did_you_mean(wanted, known.iter().copied())
        .map(|k| format!("; did you mean {k:?}?"))
        .unwrap_or_default();
    bail!(
        "--perf: unknown truth model {wanted:?}{hint} (known: {})",
        known.join(", ")
    )
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
        tessera_sched::baselines::POLICIES
            .iter()
            .map(|p| p.name.to_string())
            .collect()
    } else {
        args.policies.clone()
    };
    let runs: Vec<PolicyRun> = names
        .into_iter()
        .map(|name| PolicyRun {
            name,
            options: PolicyOptions {
                round,
                seed: args.seed,
            },
        })
        .collect();
    // Fail on an unknown name before any run starts.
    for r in &runs {
        build_policy(&r.name, &r.options).with_context(|| "--policy".to_string())?;
    }
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
    let semantics = resolve_semantics(&args.semantics)?;
    let truth = resolve_truth(
        &args.perf,
        &runs,
        &TruthOptions {
            profile_cost: Some(SimDuration::from_secs_f64(args.profile_cost)),
            profile_error: args.profile_error,
            engine: semantics.map_or(EXACT_ENGINE, |e| e.name),
        },
    )?;
    let config = SimConfig {
        restart_costs: if args.no_restart_cost || semantics.is_some() {
            RestartCosts::free()
        } else {
            RestartCosts::default()
        },
        profiler: truth.profiler.clone(),
        profile_seed: args.seed,
        ..SimConfig::default()
    };
    let engine = Engine {
        truth,
        semantics,
        config,
    };
    let threads = args
        .jobs
        .unwrap_or_else(tessera_mechanisms::experiment::default_threads);
    let results = run_policies_with(&cluster, &trace.workload, &runs, &engine, threads)?;

    let summaries: Vec<PolicySummary> = results
        .iter()
        .map(|(r, wall)| PolicySummary::new(r, *wall))
        .collect();
    // Reported when it is not the default (trace truth, exact engine), so the default
    // summary stays free of fields no one asked for.
    let profiled = engine.semantics.is_none() && engine.truth.profiler.is_some();
    let engine_info =
        (engine.truth.name != "trace" || engine.semantics.is_some()).then(|| EngineSummary {
            perf: engine.truth.name.to_string(),
            semantics: engine
                .semantics
                .map_or(EXACT_ENGINE, |e| e.name)
                .to_string(),
            profile_cost_s: profiled.then_some(args.profile_cost),
            profile_error: profiled.then_some(args.profile_error),
        });
    let doc = SummaryDoc {
        cluster: format!("{} ({})", args.cluster, cluster.name),
        gpus: cluster.totals().0,
        trace: args.trace.clone(),
        trace_format: format_label(&args.trace, &trace),
        seed: args.seed,
        round_s: round.map(|r| r.as_secs_f64()),
        engine: engine_info,
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

/// Runs each policy (at most `threads` at once) under `engine`; results in input order with
/// their wall time in seconds.
pub fn run_policies_with(
    cluster: &Cluster,
    workload: &Workload,
    runs: &[PolicyRun],
    engine: &Engine,
    threads: usize,
) -> Result<Vec<(SimReport, f64)>> {
    let truth = engine.truth.model.as_ref();
    let bars = Bars::new();
    let results = run_parallel(
        runs,
        threads,
        |_| 1.0,
        |spec| -> Result<(SimReport, f64)> {
            let policy = build_policy(&spec.name, &spec.options)?;
            let started = Instant::now();
            let report = match engine.semantics {
                Some(e) => (e.run)(cluster, workload, truth, policy, &engine.config),
                None => {
                    let mut bar = bars.bar(&spec.name, workload.len());
                    Simulation::new(cluster, workload, truth, policy, engine.config.clone())
                        .run(&mut bar)
                }
            }
            .with_context(|| format!("simulating policy {}", spec.name))?;
            Ok((report, started.elapsed().as_secs_f64()))
        },
        &|_, _| {},
    )?;
    results.into_iter().collect()
}
