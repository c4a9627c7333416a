//! `tessera simulate`: one workload, one cluster, several policies, one comparison.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use tessera_mechanisms::capabilities::{
    check_support, dropped_services, refusal, relax, CheckOptions, Relaxed,
};
use tessera_mechanisms::experiment::{engines, run_parallel, EngineInfo};
use tessera_mechanisms::{
    build_policy, build_truth, did_you_mean, serving_setup, truths, ServingSetup, Truth,
    TruthOptions, EXACT_ENGINE,
};
use tessera_model::{Cluster, SimDuration, SimTime, Workload};
use tessera_perf::{RestartCosts, TraceThroughput};
use tessera_sched::PolicyOptions;
use tessera_sim::{
    failures::parse_duration, FailureSpec, GroupMtbf, SimConfig, SimReport, Simulation,
};
use tessera_trace::Arrivals;

use crate::args::SimulateArgs;
use crate::inputs::{
    check_fit, format_label, load_catalog, load_cluster, load_trace, parse_format, report_skips,
};
use crate::progress::Bars;
use crate::report::{
    comparison_table, failures_table, serving_table, write_outputs, EngineSummary, IgnoredSummary,
    PolicySummary, SummaryDoc, TruthSummary,
};

/// How runs are simulated: truth model, engine semantics and settings.
#[derive(Debug, Clone)]
pub struct Engine {
    /// Truth (and the profiler whose estimates policies see).
    pub truth: Truth,
    /// Why this truth (`auto: …` or `given by --perf`), for the header and `summary.json`.
    pub truth_why: String,
    /// The profilers' knobs, for the profiler a policy's mechanism attaches to its runs.
    pub truth_options: TruthOptions,
    /// An alternative engine of the registry, or `None` for the exact engine.
    pub semantics: Option<&'static EngineInfo>,
    /// Engine settings (the profiler is taken from `truth`).
    pub config: SimConfig,
    /// The user named the truth model (`--perf` other than `auto`): it wins over a
    /// policy's serving setup's.
    pub truth_given: bool,
    /// Seed of a serving setup's arrivals (`--seed`).
    pub seed: u64,
}

fn trace_truth() -> Truth {
    Truth {
        name: "trace",
        model: std::sync::Arc::new(TraceThroughput),
        profiler: None,
    }
}

/// What `tessera simulate` compares when no `--policy` is given (issue 37): the mixed
/// world's policies ([`tessera_mechanisms::tessera::world::DEFAULT_POLICIES`]: FIFO, LAS, one
/// policy of each mechanism and `tessera`), each looked up by name in the registry.
pub use tessera_mechanisms::tessera::world::DEFAULT_POLICIES;

/// The header line of a run without `--policy`: every policy runs on what it honours.
pub const DEFAULT_COMPARISON: &str = "default comparison: each policy runs on the part of the \
     workload it honours (as with --ignore-unsupported; what it ignored is listed under the \
     table); requests of services it does not serve count as dropped, against its SLO goodput";

/// [`DEFAULT_POLICIES`] that are registered, and the names left out.
pub fn default_policies() -> (Vec<String>, Vec<&'static str>) {
    let (known, missing): (Vec<&str>, Vec<&str>) = DEFAULT_POLICIES
        .iter()
        .partition(|p| tessera_mechanisms::mechanism_of_policy(p).is_some());
    (known.into_iter().map(str::to_string).collect(), missing)
}

/// Rounds beyond which a run is worth a warning: each round costs a scheduling pass (a few
/// microseconds when idle), so 100 million of them take minutes to hours.
const MANY_ROUNDS: f64 = 1e8;

/// Warns when the trace spans so many rounds that the run will be slow: the last arrival plus
/// the total work done back to back bounds the simulated time.
fn warn_many_rounds(workload: &Workload, round: SimDuration) -> bool {
    let last_submit = workload
        .jobs()
        .last()
        .map_or(0.0, |j| j.submit.as_secs_f64());
    let work: f64 = workload
        .jobs()
        .iter()
        .map(|j| j.duration.as_secs_f64())
        .sum();
    let rounds = (last_submit + work) / round.as_secs_f64().max(1e-6);
    if rounds > MANY_ROUNDS {
        eprintln!(
            "warning: up to {rounds:.1e} rounds of {} s (the trace's span plus its jobs' work back \
             to back); the run may take long: consider a longer --round",
            round.as_secs_f64()
        );
    }
    rounds > MANY_ROUNDS
}

/// One policy to run: its registry name and options, and what its mechanism plugs into the
/// simulator for it ([`tessera_mechanisms::serving_setup`]; `None`: the run's settings).
#[derive(Debug, Clone)]
pub struct PolicyRun {
    pub name: String,
    pub options: PolicyOptions,
    pub setup: Option<ServingSetup>,
    /// The workload relaxed to what the policy honours (`--ignore-unsupported`); `None`:
    /// it honours the run's own.
    pub relaxed: Option<std::sync::Arc<Relaxed>>,
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

/// Resolves `--perf`: `trace`, a registered truth, or `auto`: chosen from the inputs (the
/// trace's source, the cluster, the workload), never from the policies asked for, so that a
/// policy's figures do not depend on its company. Returns the truth and why it was chosen.
fn resolve_truth(
    name: &str,
    trace_source: &str,
    cluster: &Cluster,
    workload: &Workload,
    options: &TruthOptions,
) -> Result<(Truth, String)> {
    let (wanted, why) = if name.eq_ignore_ascii_case("auto") {
        let auto = tessera_mechanisms::auto_truth(trace_source, cluster, workload);
        (auto.truth.unwrap_or("trace"), format!("auto: {}", auto.why))
    } else {
        (name, "given by --perf".to_string())
    };
    if wanted.eq_ignore_ascii_case("trace") {
        return Ok((trace_truth(), why));
    }
    if let Some(t) = build_truth(wanted, options) {
        return Ok((t, why));
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
/// the reader's remarks (detected format, unfit jobs) that `run` prints on stderr.
pub struct Simulated {
    /// Every policy's row, failed ones with their error.
    pub doc: SummaryDoc,
    /// The reports of the policies that ran (failed ones have none).
    pub reports: Vec<SimReport>,
    pub notes: Vec<String>,
    /// Jobs in the (possibly re-timed) workload.
    pub jobs: usize,
    /// Nodes of the cluster.
    pub nodes: usize,
    /// Their names and GPU models (where `jobs.csv` says each job ran).
    pub node_labels: crate::report::NodeLabels,
}

/// Some policies' runs failed; the others' results were printed and written. `tessera`
/// exits with [`PoliciesFailed::EXIT_CODE`].
#[derive(Debug)]
pub struct PoliciesFailed {
    /// The failed policies, in input order.
    pub failed: Vec<String>,
    /// Policies run in all.
    pub total: usize,
}

impl PoliciesFailed {
    /// The exit status of `tessera simulate` when any policy failed (documented in --help).
    pub const EXIT_CODE: u8 = 3;

    fn of(doc: &SummaryDoc) -> Option<PoliciesFailed> {
        let failed: Vec<String> = doc
            .policies
            .iter()
            .filter(|p| p.error.is_some())
            .map(|p| p.policy.clone())
            .collect();
        (!failed.is_empty()).then_some(PoliciesFailed {
            failed,
            total: doc.policies.len(),
        })
    }
}

impl std::fmt::Display for PoliciesFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} policies failed ({}){}",
            self.failed.len(),
            self.total,
            self.failed.join(", "),
            if self.failed.len() < self.total {
                "; the others' results stand"
            } else {
                ""
            }
        )
    }
}

impl std::error::Error for PoliciesFailed {}

pub fn run(args: &SimulateArgs) -> Result<()> {
    if let Some(format) = tessera_mechanisms::experiment::replay_formats()
        .find(|f| f.name.eq_ignore_ascii_case(args.trace_format.trim()))
    {
        return run_replay(args, format);
    }
    let Simulated {
        doc,
        reports,
        notes,
        jobs,
        nodes,
        node_labels,
    } = execute(args)?;
    for note in &notes {
        eprintln!("{note}");
    }
    let mut out = crate::output::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        let services = trace_services(&doc);
        writeln!(
            out,
            "{}{services} from {} ({}) on {} ({}, {}){}",
            crate::output::count(jobs as u64, "job"),
            args.trace,
            doc.trace_format,
            args.cluster,
            crate::output::count(nodes as u64, "node"),
            crate::output::count(doc.gpus, "GPU"),
            doc.round_s
                .map(|r| format!(", {r} s rounds"))
                .unwrap_or_default()
        )?;
        match &doc.engine {
            Some(e) => {
                let profiling = match (e.profile_cost_s, e.profile_error) {
                    (Some(c), Some(err)) => {
                        format!(", optimistic profiling {c} s of one GPU per job, error {err}")
                    }
                    _ => String::new(),
                };
                writeln!(
                    out,
                    "truth: {} tables ({}), {} semantics{profiling}",
                    e.perf, doc.truth.why, e.semantics
                )?;
            }
            None => writeln!(out, "truth: {} ({})", doc.truth.name, doc.truth.why)?,
        }
        for p in &doc.policies {
            if let Some(setup) = &p.setup {
                writeln!(out, "{}: {setup}", p.policy)?;
            }
        }
        if let Some(c) = &doc.comparison {
            writeln!(out, "{c}")?;
        }
        writeln!(out)?;
        write!(out, "{}", comparison_table(&doc.policies))?;
        for p in &doc.policies {
            if !p.ignored.is_empty() {
                let what: Vec<String> = p
                    .ignored
                    .iter()
                    .map(|i| format!("{} {}: {}", i.count, i.what, i.how))
                    .collect();
                writeln!(
                    out,
                    "{} ignored (--ignore-unsupported): {}",
                    p.policy,
                    what.join("; ")
                )?;
            }
        }
        write!(out, "{}", serving_table(&doc.policies))?;
        write!(out, "{}", failures_table(&doc.policies))?;
        for p in &doc.policies {
            if !p.policy_stats.is_empty() {
                let stats: Vec<String> = p
                    .policy_stats
                    .iter()
                    .map(|(k, v)| format!("{k}={}", stat_value(*v)))
                    .collect();
                writeln!(out, "{}: {}", p.policy, stats.join(" "))?;
            }
        }
    }
    if let Some(dir) = &args.out {
        write_outputs(dir, &doc, &reports, &node_labels)?;
        let mut written: Vec<String> = ["summary.json", "jobs.csv", "timeseries.csv"]
            .iter()
            .map(|f| dir.join(f).display().to_string())
            .collect();
        if reports.iter().any(|r| !r.service_instances.is_empty()) {
            written.push(dir.join("instances.csv").display().to_string());
        }
        if !args.no_plots {
            for p in crate::plot::simulate_plots(dir, args.plot_format, &reports)? {
                written.push(p.display().to_string());
            }
        }
        eprintln!("wrote {}", written.join(", "));
    }
    match PoliciesFailed::of(&doc) {
        Some(failed) => Err(failed.into()),
        None => Ok(()),
    }
}

/// `, N services` when the runs' summaries have services (the workload's, counted ones
/// included), for the header.
fn trace_services(doc: &SummaryDoc) -> String {
    let n = doc
        .policies
        .iter()
        .filter_map(|p| p.summary.as_ref())
        .map(|s| s.services.len())
        .max()
        .unwrap_or(0);
    match n {
        0 => String::new(),
        1 => " and 1 service".into(),
        n => format!(" and {n} services"),
    }
}

/// A workload format a mechanism replays with its own engine (e.g. a packing workload):
/// the trace file and `--policy` go to the mechanism; `--json` and `--out` work as usual.
fn run_replay(
    args: &SimulateArgs,
    format: &tessera_mechanisms::experiment::ReplayFormat,
) -> Result<()> {
    let text = std::fs::read_to_string(&args.trace)
        .with_context(|| format!("reading {} (--trace-format {})", args.trace, format.name))?;
    let threads = args
        .threads
        .unwrap_or_else(tessera_mechanisms::experiment::default_threads);
    let ctx = tessera_mechanisms::experiment::RunContext::quiet(threads);
    let output = (format.run)(&text, &args.policies, &ctx)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.trace))?;
    let mut out = crate::output::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&output.summary)?)?;
    } else {
        write!(out, "{} ({}): {}", args.trace, format.name, output.text)?;
    }
    if let Some(dir) = &args.out {
        crate::cmd::experiment::write_outputs(dir, &output)?;
    }
    Ok(())
}

/// Loads the inputs named by `args`, runs every policy and returns the results without
/// printing them or writing files: the entry point `tessera sweep` calls once per run.
pub fn execute(args: &SimulateArgs) -> Result<Simulated> {
    let mut notes = Vec::new();
    if let Some(n) = &args.jobs {
        bail!(
            "simulate has no --jobs (got {n}): use --threads N for worker threads; the number of \
             jobs comes from the trace (e.g. `tessera trace generate --jobs N -o t.csv`)"
        );
    }
    let catalog = load_catalog(args.gpu_catalog.as_deref())?;
    let cluster = load_cluster(&args.cluster, &catalog)?;
    let format = parse_format(&args.trace_format)?;
    let mut trace = load_trace(&args.trace, format, &catalog, args.skip_invalid, args.seed)?;
    let arrivals: Arrivals = args.arrivals.parse().context("--arrivals")?;
    trace.workload = tessera_trace::with_arrivals_checked(&trace.workload, arrivals, args.seed)
        .context("--arrivals")?;
    let arrivals_label = (arrivals != Arrivals::Trace).then(|| arrivals.to_string());
    if trace.detected {
        notes.push(format!(
            "{}: detected trace format {}",
            args.trace, trace.format
        ));
    }
    report_skips(&args.trace, &trace);
    if trace.workload.is_empty() && trace.workload.services().is_empty() {
        bail!(
            "{}: no jobs to simulate (the trace has no job rows{})",
            args.trace,
            if trace.skipped + trace.dropped > 0 {
                ", after skipped and dropped ones"
            } else {
                ""
            }
        );
    }
    let unfit = check_fit(&args.trace, &trace, &cluster, args.reject_unfit)?;
    if unfit > 0 {
        notes.push(format!(
            "{}: {} never fit this cluster and are reported as rejected",
            args.trace,
            crate::output::count(unfit as u64, "job")
        ));
    }

    let round = args
        .round
        .as_deref()
        .map(|r| crate::args::flag_duration("round", r, true))
        .transpose()?;
    if let Some(r) = round {
        let _ = warn_many_rounds(&trace.workload, r);
    }
    // Without --policy: the default comparison, each policy on what it honours.
    let default_run = args.policies.is_empty();
    let names: Vec<String> = if default_run {
        let (known, missing) = default_policies();
        if !missing.is_empty() {
            notes.push(format!(
                "default policies not registered in this build, left out: {}",
                missing.join(", ")
            ));
        }
        known
    } else {
        args.policies.clone()
    };
    let mut runs: Vec<PolicyRun> = names
        .into_iter()
        .map(|name| PolicyRun {
            name,
            options: PolicyOptions {
                round,
                seed: args.seed,
            },
            setup: None,
            relaxed: None,
        })
        .collect();
    // Fail on an unknown name (or a setup that cannot be built) before any run starts.
    for r in &mut runs {
        build_policy(&r.name, &r.options).with_context(|| "--policy".to_string())?;
        r.setup = serving_setup(&r.name)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--policy {}: its serving setup: {e}", r.name))?;
    }
    let profile_cost = crate::args::flag_duration("profile-cost", &args.profile_cost, false)?;
    if !(args.profile_error.is_finite() && (0.0..1.0).contains(&args.profile_error)) {
        anyhow::bail!(
            "--profile-error must be a fraction in [0, 1), got {}",
            args.profile_error
        );
    }
    let semantics = resolve_semantics(&args.semantics)?;
    let truth_options = TruthOptions {
        profile_cost: Some(profile_cost),
        profile_error: args.profile_error,
        engine: semantics.map_or(EXACT_ENGINE, |e| e.name),
    };
    let (truth, truth_why) = resolve_truth(
        &args.perf,
        &args.trace,
        &cluster,
        &trace.workload,
        &truth_options,
    )?;
    let horizon = args
        .horizon
        .as_deref()
        .map(|h| {
            let d = parse_duration(h).map_err(|e| anyhow::anyhow!("--horizon: {e}"))?;
            if d.is_zero() {
                bail!("--horizon must be > 0");
            }
            Ok(SimTime::ZERO + d)
        })
        .transpose()?;
    if args.max_events == Some(0) {
        bail!("--max-events must be at least 1");
    }
    let config = SimConfig {
        time_limit: horizon,
        max_events: args.max_events,
        restart_costs: if args.no_restart_cost || semantics.is_some() {
            RestartCosts::free()
        } else {
            RestartCosts::default()
        },
        profiler: truth.profiler.clone(),
        profile_seed: args.seed,
        failures: failure_spec(args, &cluster)?.map(std::sync::Arc::new),
        // One truth per run: every policy is offered the same requests (`--seed` draws them),
        // whether or not its mechanism brings a serving setup of its own.
        serving: tessera_sim::ServingConfig {
            seed: args.seed,
            ..tessera_sim::ServingConfig::default()
        },
        ..SimConfig::default()
    };
    if config.failures.is_some() && semantics.is_some() {
        bail!("failure injection (--failures, --mtbf) runs on the exact engine only: drop --semantics");
    }
    if let (Some(e), Some(r)) = (semantics, runs.iter().find(|r| r.setup.is_some())) {
        bail!(
            "--policy {} runs on the request-level serving simulator of the exact engine, not \
             --semantics {}: drop --semantics or the policy",
            r.name,
            e.name
        );
    }
    check_capabilities(
        args,
        &cluster,
        &trace,
        &mut runs,
        config.failures.is_some(),
        args.ignore_unsupported || default_run,
    )?;
    if let (Some(e), Some(r)) = (
        semantics,
        runs.iter()
            .find(|r| r.relaxed.as_ref().is_some_and(|x| !x.rejected.is_empty())),
    ) {
        bail!(
            "--ignore-unsupported: policy {} can never run some jobs, which only the exact \
             engine reports rejected, not --semantics {}",
            r.name,
            e.name
        );
    }
    let engine = Engine {
        truth,
        truth_why,
        truth_options,
        semantics,
        config,
        truth_given: !args.perf.eq_ignore_ascii_case("auto"),
        seed: args.seed,
    };
    let threads = args
        .threads
        .unwrap_or_else(tessera_mechanisms::experiment::default_threads);
    let mut results = run_policies_with(&cluster, &trace.workload, &runs, &engine, threads)?;
    count_removed_services(&trace.workload, &runs, &engine, &mut results);

    let summaries: Vec<PolicySummary> = results
        .iter()
        .zip(&runs)
        .map(|((r, wall), run)| match r {
            Ok(r) => PolicySummary {
                setup: run.setup.as_ref().map(|s| s.about.to_string()),
                ignored: run.relaxed.as_ref().map_or_else(Vec::new, |x| {
                    x.ignored.iter().map(IgnoredSummary::from).collect()
                }),
                ..PolicySummary::new(r, *wall)
            },
            Err(e) => PolicySummary::failed(&run.name, format!("{e:#}"), *wall),
        })
        .collect();
    // Reported when it is not the default (the trace's or the composed truth, exact engine),
    // so the default summary stays free of fields no one asked for (`truth` names it).
    let profiled = engine.semantics.is_none() && engine.truth.profiler.is_some();
    let default_truth =
        engine.truth.name == "trace" || engine.truth.name == tessera_mechanisms::DEFAULT_TRUTH;
    let engine_info = (!default_truth || engine.semantics.is_some()).then(|| EngineSummary {
        perf: engine.truth.name.to_string(),
        semantics: engine
            .semantics
            .map_or(EXACT_ENGINE, |e| e.name)
            .to_string(),
        profile_cost_s: profiled.then_some(profile_cost.as_secs_f64()),
        profile_error: profiled.then_some(args.profile_error),
    });
    let doc = SummaryDoc {
        comparison: default_run.then(|| DEFAULT_COMPARISON.to_string()),
        cluster: format!("{} ({})", args.cluster, cluster.name),
        gpus: cluster.totals().0,
        trace: args.trace.clone(),
        trace_format: format_label(&args.trace, &trace),
        seed: args.seed,
        round_s: round.map(|r| r.as_secs_f64()),
        engine: engine_info,
        truth: TruthSummary {
            name: engine.truth.name.to_string(),
            why: engine.truth_why.clone(),
        },
        arrivals: arrivals_label,
        trace_skipped: (trace.skipped > 0).then_some(trace.skipped),
        trace_dropped: (trace.dropped > 0).then_some(trace.dropped),
        policies: summaries,
    };
    let reports = results.into_iter().filter_map(|(r, _)| r.ok()).collect();
    Ok(Simulated {
        doc,
        reports,
        notes,
        jobs: trace.workload.len(),
        nodes: cluster.nodes.len(),
        node_labels: crate::report::NodeLabels::of(&cluster),
    })
}

/// A policy run on a workload relaxed of its services (it does not serve any) did not see
/// their requests; their users did. Each such run gets the services back in its summary,
/// every request dropped (counted with the arrivals the run's serving seed draws, the same
/// as a policy serving them is offered), so that its SLO goodput is honest.
fn count_removed_services(
    workload: &Workload,
    runs: &[PolicyRun],
    engine: &Engine,
    results: &mut [PolicyResult],
) {
    if workload.services().is_empty() {
        return;
    }
    for (run, (result, _)) in runs.iter().zip(results.iter_mut()) {
        let (Some(relaxed), Ok(report)) = (&run.relaxed, result) else {
            continue;
        };
        if !relaxed.workload.services().is_empty() || !report.summary.services.is_empty() {
            continue;
        }
        report.summary.services = dropped_services(workload, &run.name, engine.seed);
    }
}

/// Requests at most this many elements per capability in a refusal (then a count).
const REFUSAL_EXAMPLES: usize = 3;

/// A policy counter as a person reads it: counts as integers (`lp_solves=739`), other
/// figures with four significant decimals at most (`opt_gap=0.0088`, `lp_solve_ms_max=20.13`).
fn stat_value(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.is_finite() && v.abs() >= 1.0 {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Checks every policy against what the inputs ask (its declared capabilities) before any
/// run: refuses the run naming each policy, what it would not honour and who would, or,
/// with `--ignore-unsupported`, gives each such policy its relaxed copy of the workload.
fn check_capabilities(
    args: &SimulateArgs,
    cluster: &Cluster,
    trace: &tessera_trace::LoadedTrace,
    runs: &mut [PolicyRun],
    failures: bool,
    relax_unsupported: bool,
) -> Result<()> {
    // Trace files and workload specs give each job's line; a built-in only numbers its jobs.
    let numbered = !args.trace.starts_with("builtin:");
    let options = CheckOptions {
        lines: numbered.then_some(trace.lines.as_slice()),
        failures,
    };
    let mut refusals = Vec::new();
    for r in runs.iter_mut() {
        let missing = check_support(&r.name, cluster, &trace.workload, &options)
            .with_context(|| format!("--policy {}", r.name))?;
        if missing.is_empty() {
            continue;
        }
        if relax_unsupported {
            let relaxed = relax(&r.name, cluster, &trace.workload, &options)
                .with_context(|| format!("--policy {}", r.name))?;
            r.relaxed = Some(std::sync::Arc::new(relaxed));
        } else {
            refusals.push(refusal(&r.name, &missing, REFUSAL_EXAMPLES));
        }
    }
    if !refusals.is_empty() {
        bail!(
            "{}\nrun another policy, or pass --ignore-unsupported to run these on a copy of the \
             workload relaxed to what they honour (docs/capabilities.md)",
            refusals.join("\n")
        );
    }
    Ok(())
}

/// Builds the failures of a run from `--failures`, `--mtbf`/`--mttr`, `--checkpoint-interval`
/// and `--max-restarts`; `None` when nothing fails.
fn failure_spec(args: &SimulateArgs, cluster: &Cluster) -> Result<Option<FailureSpec>> {
    let mut spec = match &args.failures {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading failures file {}", path.display()))?;
            FailureSpec::parse(&text, cluster)
                .with_context(|| format!("failures file {}", path.display()))?
        }
        None => FailureSpec::default(),
    };
    // `[GROUP=]DURATION`: the group's index (None: every node) and the duration.
    let split = |flag: &str, v: &str| -> Result<(Option<usize>, SimDuration)> {
        let (group, dur) = match v.split_once('=') {
            Some((g, d)) => {
                let g = g.trim();
                let idx = cluster
                    .groups
                    .iter()
                    .position(|x| x.name == g)
                    .with_context(|| {
                        let names: Vec<&str> =
                            cluster.groups.iter().map(|x| x.name.as_str()).collect();
                        format!(
                            "{flag} {v}: no node group {g:?} (groups: {})",
                            names.join(", ")
                        )
                    })?;
                (Some(idx), d)
            }
            None => (None, v),
        };
        let d = parse_duration(dur).map_err(|e| anyhow::anyhow!("{flag} {v}: {e}"))?;
        if d.is_zero() {
            bail!("{flag} {v}: must be > 0");
        }
        Ok((group, d))
    };
    let mttrs: Vec<(Option<usize>, SimDuration)> = args
        .mttr
        .iter()
        .map(|v| split("--mttr", v))
        .collect::<Result<_>>()?;
    // Command-line entries come first, so they win over the file's for the same nodes.
    let mut drawn = Vec::new();
    for v in &args.mtbf {
        let (group, mtbf) = split("--mtbf", v)?;
        let mttr = mttrs
            .iter()
            .find(|(g, _)| *g == group)
            .or_else(|| mttrs.iter().find(|(g, _)| g.is_none()))
            .map(|(_, d)| *d)
            .with_context(|| format!("--mtbf {v} needs an --mttr for the same nodes"))?;
        drawn.push(GroupMtbf { group, mtbf, mttr });
    }
    if args.mtbf.is_empty() && !args.mttr.is_empty() {
        bail!("--mttr needs --mtbf");
    }
    drawn.append(&mut spec.mtbf);
    spec.mtbf = drawn;
    if spec.events.is_empty() && spec.mtbf.is_empty() {
        if args.checkpoint_interval.is_some() || args.max_restarts.is_some() {
            bail!("--checkpoint-interval and --max-restarts need --failures or --mtbf");
        }
        return Ok(None);
    }
    if let Some(v) = &args.checkpoint_interval {
        let d = parse_duration(v).map_err(|e| anyhow::anyhow!("--checkpoint-interval: {e}"))?;
        if d.is_zero() {
            bail!("--checkpoint-interval must be > 0");
        }
        spec.checkpoint_interval = Some(d);
    }
    if let Some(m) = args.max_restarts {
        spec.max_restarts = Some(m);
    }
    spec.seed = args.seed;
    Ok(Some(spec))
}

/// The settings of one policy's run: the engine's, with the profiler that policy gets
/// under the run's truth ([`tessera_mechanisms::run_profiler`]).
fn run_config(run: &PolicyRun, engine: &Engine) -> SimConfig {
    let mut config = engine.config.clone();
    if engine.semantics.is_none() {
        config.profiler =
            tessera_mechanisms::run_profiler(&run.name, &engine.truth, &engine.truth_options);
    }
    config
}

/// One policy's result: its report, or why its run failed; and its wall time in seconds.
pub type PolicyResult = (Result<SimReport>, f64);

/// Runs each policy (at most `threads` at once) under `engine`; results in input order with
/// their wall time in seconds. One policy's failure (an error, or a panic: a bug) is its own
/// result: the others run to the end.
pub fn run_policies_with(
    cluster: &Cluster,
    workload: &Workload,
    runs: &[PolicyRun],
    engine: &Engine,
    threads: usize,
) -> Result<Vec<PolicyResult>> {
    let truth = engine.truth.model.as_ref();
    let bars = Bars::new();
    let one = |spec: &PolicyRun| -> Result<SimReport> {
        let policy = build_policy(&spec.name, &spec.options)?;
        // A policy run on a relaxed workload (`--ignore-unsupported`): its own copy, its
        // rejections, and no failures if it cannot take them.
        let relaxed_engine;
        let (workload, engine) = match &spec.relaxed {
            Some(r) => {
                let mut e = engine.clone();
                e.config.rejected = std::sync::Arc::new(r.rejected.iter().cloned().collect());
                if r.drop_failures {
                    e.config.failures = None;
                }
                relaxed_engine = e;
                (&r.workload, &relaxed_engine)
            }
            None => (workload, engine),
        };
        let report = match (engine.semantics, &spec.setup) {
            (Some(e), _) => (e.run)(cluster, workload, truth, policy, &engine.config),
            (None, Some(setup)) => {
                // The policy's own serving truth and settings: the same as its
                // mechanism's experiments use.
                let mut config = run_config(spec, engine);
                setup.apply(&mut config, workload, engine.seed);
                let truth = match (&setup.truth, engine.truth_given) {
                    (Some(t), false) => {
                        config.profiler = None;
                        t.as_ref()
                    }
                    _ => truth,
                };
                let mut bar = bars.bar(&spec.name, workload.len());
                Simulation::new(cluster, workload, truth, policy, config).run(&mut bar)
            }
            (None, None) => {
                let mut bar = bars.bar(&spec.name, workload.len());
                Simulation::new(cluster, workload, truth, policy, run_config(spec, engine))
                    .run(&mut bar)
            }
        }
        .with_context(|| format!("simulating policy {}", spec.name))?;
        Ok(report)
    };
    let results = run_parallel(
        runs,
        threads,
        |_| 1.0,
        |spec| -> PolicyResult {
            let started = Instant::now();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one(spec)))
                .unwrap_or_else(|payload| {
                    let text = payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Err(anyhow::anyhow!(
                        "simulating policy {}: it panicked (a bug): {text}",
                        spec.name
                    ))
                });
            (result, started.elapsed().as_secs_f64())
        },
        &|_, _| {},
    )?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tessera_model::{SimTime, TrainingJob};

    fn args(extra: &[&str]) -> SimulateArgs {
        let argv = ["tessera", "simulate"].iter().chain(extra).copied();
        match crate::args::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::args::Command::Simulate(a)) => *a,
            other => panic!("{other:?}"),
        }
    }

    fn data(name: &str) -> String {
        format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    fn json<T: serde::Serialize>(v: &T) -> serde_json::Value {
        serde_json::to_value(v).unwrap()
    }

    /// A mixed cluster and a trace of typed, multi-node and MIG jobs, in a fresh directory.
    fn mixed_inputs(tag: &str) -> (std::path::PathBuf, String, String) {
        let dir = std::env::temp_dir().join(format!("tessera-caps-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cluster = dir.join("mixed.yaml");
        std::fs::write(
            &cluster,
            "apiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: mixed\nspec:\n  nodeGroups:\n    - {name: a100, count: 2, gpu: A100-80GB, gpusPerNode: 4, cpus: 64, memory: 512Gi}\n    - {name: h100, count: 1, gpu: H100-80GB, gpusPerNode: 4, cpus: 64, memory: 512Gi}\n    - {name: v100, count: 2, gpu: V100-32GB, gpusPerNode: 4, cpus: 32, memory: 256Gi}\n    - {name: a10, count: 2, gpu: A10, gpusPerNode: 2, cpus: 16, memory: 128Gi}\n",
        )
        .unwrap();
        let trace = dir.join("jobs.csv");
        std::fs::write(
            &trace,
            "job_id,submit_s,gpus,duration_s,gpu_types,mig\n\
             j0,0,1,300,,\n\
             j1,5,2,300,V100-32GB,\n\
             j2,10,8,300,A100-80GB,\n\
             j3,15,1,300,A100-80GB,nvidia.com/mig-3g.40gb\n\
             j4,20,1,300,H100-80GB,\n\
             j5,25,1,300,H100-80GB,\n\
             j6,30,1,300,H100-80GB,\n",
        )
        .unwrap();
        (
            dir,
            cluster.display().to_string(),
            trace.display().to_string(),
        )
    }

    #[test]
    fn unsupported_requests_are_refused_before_any_run() {
        let (dir, cluster, trace) = mixed_inputs("refuse");
        let run = |policies: &[&str]| {
            let mut a = vec!["--cluster", &cluster, "--trace", &trace];
            for p in policies {
                a.extend(["--policy", p]);
            }
            execute(&args(&a))
        };
        // fifo honours everything asked but the MIG profile.
        let e = format!("{:#}", run(&["fifo", "dilu"]).err().expect("refused"));
        assert!(
            e.contains("policy fifo does not honour 1 of what this run asks:"),
            "{e}"
        );
        assert!(
            e.contains("job j3 (line 5) asks for MIG profile 3g.40gb; honoured by: static, miso, miso-oracle"),
            "{e}"
        );
        // Every refused policy is named, each element at most three times, then a count.
        assert!(e.contains("policy dilu does not honour"), "{e}");
        assert!(
            e.contains(
                "job j1 (line 3) asks for gpuTypes [V100-32GB]; job j2 (line 4) asks for gpuTypes \
                 [A100-80GB]; job j3 (line 5) asks for gpuTypes [A100-80GB]; and 3 more; honoured \
                 by every registered policy but: dilu, dilu-no-vertical, static-shares, \
                 dilu-exclusive"
            ),
            "{e}"
        );
        assert!(e.contains("--ignore-unsupported"), "{e}");
        // A policy honouring it all runs.
        assert!(run(&["crius"]).is_err(), "crius ignores MIG profiles too");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn ignore_unsupported_runs_relaxed_and_reports_what_was_ignored() {
        let (dir, cluster, trace) = mixed_inputs("relax");
        let a = args(&[
            "--cluster",
            &cluster,
            "--trace",
            &trace,
            "--policy",
            "fifo",
            "--policy",
            "nopart",
            "--ignore-unsupported",
            "--threads",
            "1",
        ]);
        let sim = execute(&a).unwrap();
        let doc = json(&sim.doc);
        let fifo = &doc["policies"][0];
        assert_eq!(fifo["finished"], 7);
        assert_eq!(
            fifo["ignored"],
            serde_json::json!([{"what": "mig-profile", "count": 1, "how": "left to the policy: a whole GPU"}])
        );
        // nopart takes types and several GPUs (on several nodes): only the profile is left.
        let nopart = &doc["policies"][1];
        assert_eq!(nopart["rejected"], 0, "{nopart}");
        assert_eq!(nopart["finished"], 7, "{nopart}");
        assert_eq!(
            nopart["ignored"],
            serde_json::json!([{"what": "mig-profile", "count": 1, "how": "left to the policy: a whole GPU"}])
        );
        // dilu packs one node per job and ignores types: the 8-GPU job is rejected.
        let sim = execute(&args(&[
            "--cluster",
            &cluster,
            "--trace",
            &trace,
            "--policy",
            "dilu",
            "--ignore-unsupported",
        ]))
        .unwrap();
        let dilu = &json(&sim.doc)["policies"][0];
        assert_eq!(dilu["error"], serde_json::Value::Null, "{dilu}");
        let what: Vec<(&str, u64)> = dilu["ignored"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| (i["what"].as_str().unwrap(), i["count"].as_u64().unwrap()))
            .collect();
        assert!(what.contains(&("gpu-types", 6)), "{what:?}");
        let rejected: Vec<&str> = sim.reports[0]
            .jobs
            .iter()
            .filter_map(|j| match &j.outcome {
                tessera_sim::JobOutcome::Rejected { reason } => Some(reason.as_str()),
                _ => None,
            })
            .collect();
        assert!(
            rejected.contains(&"dilu cannot run it: it asks for 8 GPUs, more than any node of its GPU types has (4)")
                || rejected.iter().any(|r| r.starts_with("dilu cannot run it: it asks for 8 GPUs")),
            "{rejected:?}"
        );
        let finished = dilu["finished"].as_u64().unwrap();
        assert_eq!(finished + rejected.len() as u64, 7, "{dilu}");
        // Without the flag, the same inputs are refused.
        let mut b = a;
        b.ignore_unsupported = false;
        assert!(execute(&b).is_err());
        std::fs::remove_dir_all(dir).ok();
    }

    /// "Same policy code in every driver": `simulate` on part (b)'s built-ins, given the
    /// horizon part (b) measures (the services' lifetime), gives exactly the figures
    /// `repro dilu --parts b` computes for the same seed, every field of the summary (device
    /// activity, per-service violations, served RPS, p99) and the policy's counters.
    #[test]
    fn dilu_policies_in_simulate_match_the_repro_exactly() {
        use tessera_mechanisms::dilu::serve_repro::{
            run_serving, scenario_cluster, scenario_workload, services_end,
        };
        let policies = [
            "dilu-exclusive",
            "static-shares",
            "dilu-no-vertical",
            "dilu",
        ];
        let (cluster, workload) = (scenario_cluster().unwrap(), scenario_workload().unwrap());
        let horizon = format!("{}", services_end(&workload).unwrap().as_secs_f64());
        let mut argv = vec![
            "--cluster",
            "builtin:dilu-4x4",
            "--trace",
            "builtin:dilu-serving",
            "--seed",
            "2",
            "--horizon",
            &horizon,
            // The baselines give quota jobs and instances whole GPUs (or fixed shares), as
            // the repro runs them: the requests stay as asked.
            "--ignore-unsupported",
        ];
        for p in policies {
            argv.extend(["--policy", p]);
        }
        let got = execute(&args(&argv)).unwrap();
        assert_eq!(got.reports.len(), 4);
        for ((p, report), summary) in policies.iter().zip(&got.reports).zip(&got.doc.policies) {
            let want = run_serving(&cluster, &workload, p, 2, false).unwrap();
            assert_eq!(report.policy, *p);
            assert_eq!(json(&report.summary), json(&want.summary), "{p}");
            assert_eq!(report.policy_stats, want.policy_stats, "{p}");
            assert!(summary.setup.is_some(), "{p}");
            // The run served requests and stopped with the services (training unfinished).
            assert!(report.summary.services.iter().all(|s| s.served > 0), "{p}");
            assert_eq!(report.summary.unfinished, 4, "{p}");
        }
        // Vertical scaling is what separates dilu from dilu-no-vertical.
        assert_ne!(json(&got.reports[2].summary), json(&got.reports[3].summary));
        // Another seed draws other arrivals (LLaMA2's Poisson stream).
        let other = execute(&args(&[
            "--cluster",
            "builtin:dilu-4x4",
            "--trace",
            "builtin:dilu-serving",
            "--seed",
            "3",
            "--horizon",
            &horizon,
            "--policy",
            "dilu",
        ]))
        .unwrap();
        assert_ne!(
            json(&other.reports[0].summary),
            json(&got.reports[3].summary)
        );
    }

    /// A policy without a serving setup runs as before: trace truth, the default serving
    /// model, no controller, no time limit, arrivals drawn from `--seed` (default 1) like every
    /// policy's in the run; a Dilu policy in the same run changes nothing for it, and runs its
    /// training to the end too.
    #[test]
    fn policies_without_a_setup_are_unchanged() {
        let catalog = tessera_model::GpuCatalog::builtin();
        let cluster = load_cluster(&data("four_gpus.yaml"), &catalog).unwrap();
        let trace = load_trace(&data("services.yaml"), None, &catalog, false, 1).unwrap();
        let policy = build_policy("serve-exclusive", &PolicyOptions::default()).unwrap();
        let config = SimConfig {
            profile_seed: 1,
            serving: tessera_sim::ServingConfig {
                seed: 1,
                ..tessera_sim::ServingConfig::default()
            },
            ..SimConfig::default()
        };
        let want = Simulation::new(&cluster, &trace.workload, &TraceThroughput, policy, config)
            .run(&mut ())
            .unwrap();
        let alone = execute(&args(&[
            "--cluster",
            &data("four_gpus.yaml"),
            "--trace",
            &data("services.yaml"),
            "--policy",
            "serve-exclusive",
        ]))
        .unwrap();
        let mixed = execute(&args(&[
            "--cluster",
            &data("four_gpus.yaml"),
            "--trace",
            &data("services.yaml"),
            "--policy",
            "serve-exclusive",
            "--policy",
            "dilu",
        ]))
        .unwrap();
        for got in [&alone, &mixed] {
            assert_eq!(json(&got.reports[0].summary), json(&want.summary));
            assert_eq!(got.doc.policies[0].setup, None);
            assert!(json(&got.doc.policies[0]).get("setup").is_none());
        }
        // The training job (120 s) outlives the services (60 s): no policy's run ends with
        // the services (issue 36: it did under dilu's setup, leaving the job unfinished).
        assert_eq!(mixed.reports[0].summary.unfinished, 0);
        assert_eq!(mixed.reports[1].summary.unfinished, 0);
        assert_eq!(mixed.reports[1].summary.finished, 1);
        assert!(mixed.doc.policies[1].setup.is_some());
    }

    /// Issue 36: `--perf auto` follows the inputs, never the policy list, so FIFO's
    /// figures are the same alone and beside policies of other mechanisms (before, a
    /// Synergy, MISO or Crius policy in the list changed the whole run's truth).
    #[test]
    fn fifo_figures_do_not_depend_on_the_company() {
        for (cluster, trace, truth) in [
            (
                data("synergy_server.yaml"),
                data("synergy_mix.csv"),
                "synergy",
            ),
            (
                data("mixed_cluster.yaml"),
                data("mixed_workload.yaml"),
                "tessera",
            ),
        ] {
            let run = |policies: &[&str]| {
                // The mixed workload has a quota service the training policies do not serve.
                let mut a = vec![
                    "--cluster",
                    &cluster,
                    "--trace",
                    &trace,
                    "--ignore-unsupported",
                ];
                for p in policies {
                    a.extend(["--policy", p]);
                }
                execute(&args(&a)).unwrap_or_else(|e| panic!("{trace} {policies:?}: {e:#}"))
            };
            let alone = run(&["fifo"]);
            assert_eq!(
                alone.doc.truth.name, truth,
                "{trace}: {}",
                alone.doc.truth.why
            );
            for company in [
                &["fifo", "las+tune"][..],
                &["fifo", "crius"],
                &["fifo", "las+tune", "crius", "gavel"],
            ] {
                let with = run(company);
                assert_eq!(with.doc.truth.name, truth);
                assert_eq!(
                    json(&with.reports[0].summary),
                    json(&alone.reports[0].summary),
                    "{trace}: fifo beside {company:?}"
                );
            }
        }
    }

    /// The header names the truth and why; `summary.json` too.
    #[test]
    fn policy_counters_print_as_people_read_them() {
        assert_eq!(stat_value(739.0), "739");
        assert_eq!(stat_value(0.0), "0");
        assert_eq!(stat_value(0.0088), "0.0088");
        assert_eq!(stat_value(20.1289), "20.13");
        assert_eq!(stat_value(131251.38), "131251.38");
        assert_eq!(stat_value(0.5), "0.5");
        assert_eq!(stat_value(f64::NAN), "NaN");
    }

    #[test]
    fn auto_truth_is_chosen_by_the_inputs_and_explained() {
        // The mixed workload has a quota service the training policies leave out.
        let doc = |extra: &[&str]| {
            let mut a = args(extra);
            a.ignore_unsupported = true;
            execute(&a).unwrap().doc
        };
        let mixed = doc(&[
            "--cluster",
            &data("mixed_cluster.yaml"),
            "--trace",
            &data("mixed_workload.yaml"),
            "--policy",
            "las+tune",
        ]);
        // Models of several papers and of none, on GPUs of several types: the composed truth.
        assert_eq!(mixed.truth.name, "tessera");
        assert!(mixed.truth.why.starts_with("auto: "), "{}", mixed.truth.why);
        assert!(
            mixed.truth.why.ends_with("the composed truth"),
            "{}",
            mixed.truth.why
        );
        assert_eq!(json(&mixed)["truth"]["name"], "tessera");
        // The Synergy fixture: every model in Synergy's tables, V100 servers.
        let synergy = doc(&[
            "--cluster",
            &data("synergy_server.yaml"),
            "--trace",
            &data("synergy_mix.csv"),
            "--policy",
            "fifo",
        ]);
        assert_eq!(synergy.truth.name, "synergy");
        assert!(
            synergy.truth.why.contains("synergy"),
            "{}",
            synergy.truth.why
        );
        // No model names at all: the composed truth (the trace's rate on each job's request).
        let (four, services) = (data("four_gpus.yaml"), data("services.yaml"));
        let plain = doc(&["--cluster", &four, "--trace", &services, "--policy", "fifo"]);
        assert_eq!(plain.truth.name, "tessera");
        assert_eq!(
            plain.truth.why,
            "auto: the jobs name no models: the composed truth"
        );
        // Models Synergy's tables know only through the catalogue (`resnet50` is its
        // `res50`): not Synergy's own workload, so not Synergy's truth but the composed one
        // (which reads Synergy's tables through the catalogue).
        let aliased = doc(&[
            "--cluster",
            "builtin:synergy-128",
            "--trace",
            &data("small.csv"),
            "--policy",
            "fifo",
        ]);
        assert_eq!(aliased.truth.name, "tessera", "{}", aliased.truth.why);
        // A mechanism's built-in workload keeps its mechanism's truth; one of a mechanism
        // without a truth of its own (Dilu's serving workload) keeps the trace's.
        let dilu = doc(&[
            "--cluster",
            "builtin:dilu-4x4",
            "--trace",
            "builtin:dilu-serving",
            "--policy",
            "fifo",
        ]);
        assert_eq!(dilu.truth.name, "trace", "{}", dilu.truth.why);
        assert!(
            dilu.truth.why.contains("dilu's workload"),
            "{}",
            dilu.truth.why
        );
        // Given: said so.
        let given = doc(&[
            "--cluster",
            &four,
            "--trace",
            &services,
            "--perf",
            "crius",
            "--policy",
            "fifo",
        ]);
        assert_eq!(given.truth.name, "crius");
        assert_eq!(given.truth.why, "given by --perf");
    }

    /// The composed truth is exactly the trace's rate on each job's requested allocation: under
    /// FIFO, which gives every job what it asks for, `--perf tessera` and `--perf trace` give
    /// the same jobs the same times, for a trace without models and for traces whose models
    /// are in Synergy's, Gavel's and MISO's tables.
    #[test]
    fn composed_truth_keeps_a_plain_trace_durations() {
        let dir = std::env::temp_dir().join(format!("tessera-truth-plain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let no_models = dir.join("no_models.csv");
        std::fs::write(
            &no_models,
            "job_id,submit_s,gpus,duration_s\na,0,2,100\nb,0,4,50\nc,10,2,30\nd,12,1,70\ne,13,1,20\n",
        )
        .unwrap();
        let no_models = no_models.display().to_string();
        for (cluster, trace) in [
            (data("four_gpus.yaml"), no_models.as_str()),
            (data("four_gpus.yaml"), &data("small.csv")),
            (data("synergy_server.yaml"), &data("synergy_mix.csv")),
        ] {
            let run = |perf: &str| {
                let got = execute(&args(&[
                    "--cluster",
                    &cluster,
                    "--trace",
                    trace,
                    "--perf",
                    perf,
                    "--policy",
                    "fifo",
                ]))
                .unwrap_or_else(|e| panic!("{trace} --perf {perf}: {e:#}"));
                assert_eq!(got.doc.truth.name, perf);
                got
            };
            let (composed, plain) = (run("tessera"), run("trace"));
            assert_eq!(
                json(&composed.reports[0].jobs),
                json(&plain.reports[0].jobs),
                "{trace}"
            );
            assert_eq!(composed.reports[0].summary.unfinished, 0);
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// `--perf tessera` on the mixed fixtures (four GPU types, models of every mechanism and
    /// of none): every job of every training policy finishes.
    #[test]
    fn composed_truth_finishes_every_job_of_the_mixed_workload() {
        let mut a = args(&[
            "--cluster",
            &data("mixed_cluster.yaml"),
            "--trace",
            &data("mixed_workload.yaml"),
            "--perf",
            "tessera",
            "--policy",
            "fifo",
            "--policy",
            "las",
            "--policy",
            "las+tune",
            "--policy",
            "crius",
            "--policy",
            "gavel",
            "--policy",
            "sia",
            "--policy",
            "miso",
        ]);
        a.ignore_unsupported = true;
        let got = execute(&a).unwrap();
        assert_eq!(got.doc.truth.name, "tessera");
        for r in &got.reports {
            let s = &r.summary;
            assert_eq!(
                (s.finished, s.rejected, s.unfinished),
                (got.jobs, 0, 0),
                "{}",
                r.policy
            );
        }
        // The composed truth differs from the trace's where the GPUs do: FIFO's first job
        // on a type other than its reference runs at another speed.
        let trace = {
            let mut a = args(&[
                "--cluster",
                &data("mixed_cluster.yaml"),
                "--trace",
                &data("mixed_workload.yaml"),
                "--perf",
                "trace",
                "--policy",
                "fifo",
            ]);
            a.ignore_unsupported = true;
            execute(&a).unwrap()
        };
        assert_ne!(json(&trace.reports[0].jobs), json(&got.reports[0].jobs));
    }

    /// A policy that reads sensitivity estimates gets Synergy's profiler under the trace's
    /// truth too; FIFO beside it is not profiled.
    #[test]
    fn policies_that_need_knowledge_are_profiled_under_any_truth() {
        let got = execute(&args(&[
            "--cluster",
            &data("mixed_cluster.yaml"),
            "--trace",
            &data("mixed_workload.yaml"),
            "--ignore-unsupported",
            "--policy",
            "fifo",
            "--policy",
            "las+tune",
            "--policy",
            "las+proportional",
        ]))
        .unwrap();
        // The composed truth profiles nothing itself.
        assert_eq!(got.doc.truth.name, "tessera");
        let profiled: Vec<f64> = got
            .reports
            .iter()
            .map(|r| r.summary.profiling_gpu_secs)
            .collect();
        // 60 s of one GPU for each of the 40 jobs, only for TUNE.
        assert_eq!(profiled, [0.0, 2400.0, 0.0]);
    }

    #[test]
    fn a_setup_refuses_another_engine_and_names_the_policy() {
        let err = execute(&args(&[
            "--cluster",
            "builtin:dilu-4x4",
            "--trace",
            "builtin:dilu-serving",
            "--policy",
            "dilu",
            "--semantics",
            "synergy",
        ]))
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
        assert!(
            err.contains("--policy dilu") && err.contains("drop --semantics"),
            "{err}"
        );
        let err = execute(&args(&[
            "--cluster",
            "builtin:dilu-4x4",
            "--trace",
            "builtin:dilu-serving",
            "--policy",
            "dilu-no-vertcal",
        ]))
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
        assert!(err.contains("did you mean \"dilu-no-vertical\""), "{err}");
    }

    /// "Same policy code in every driver": `repro tessera` runs each policy as the default
    /// `simulate` does (relaxed inputs, serving setup, dropped services counted), so its
    /// figures for a seed are the default run's, field for field.
    #[test]
    fn the_default_run_and_repro_tessera_agree() {
        use tessera_mechanisms::tessera::world::{cluster_yaml, MixedWorkload};
        use tessera_mechanisms::tessera::world_run::{auto_truth, run_policy};
        let policies = ["fifo", "miso", "dilu"];
        let mut a = args(&["--seed", "3", "--threads", "1"]);
        a.policies = policies.iter().map(|p| p.to_string()).collect();
        a.ignore_unsupported = true;
        let got = execute(&a).unwrap();
        let cluster =
            Cluster::from_yaml(&cluster_yaml(), &tessera_model::GpuCatalog::builtin()).unwrap();
        let workload = MixedWorkload {
            seed: 3,
            ..MixedWorkload::default()
        }
        .generate()
        .unwrap();
        let (truth, _) = auto_truth("builtin:mixed", &cluster, &workload).unwrap();
        for (p, report) in policies.iter().zip(&got.reports) {
            let want = run_policy(&cluster, &workload, truth.as_ref(), p, 3).unwrap();
            assert_eq!(json(&report.summary), json(&want.report.summary), "{p}");
            assert_eq!(report.summary.services.len(), 3, "{p}");
        }
        // The default run is the same comparison, relaxed without asking.
        let mut d = args(&["--seed", "3", "--threads", "1"]);
        d.policies = Vec::new();
        let default = execute(&d).unwrap();
        for (p, want) in policies.iter().zip(&got.reports) {
            let i = default
                .doc
                .policies
                .iter()
                .position(|x| x.policy == *p)
                .unwrap();
            assert_eq!(
                json(&default.reports[i].summary),
                json(&want.summary),
                "{p}"
            );
        }
        assert!(default.doc.comparison.is_some());
        assert!(got.doc.comparison.is_none());
    }

    #[test]
    fn many_rounds_are_warned_about() {
        let long = |secs: u64| {
            Workload::new(vec![TrainingJob::simple(
                0,
                SimTime::ZERO,
                1,
                SimDuration::from_secs(secs),
            )])
        };
        assert!(warn_many_rounds(
            &long(900_000_000),
            SimDuration::from_secs(1)
        ));
        assert!(!warn_many_rounds(
            &long(900_000_000),
            SimDuration::from_secs(300)
        ));
        assert!(!warn_many_rounds(
            &long(3600),
            SimDuration::from_micros(1000)
        ));
    }
}
