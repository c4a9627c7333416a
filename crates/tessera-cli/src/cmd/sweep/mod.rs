//! `tessera sweep`: many simulations from one spec, on local cores or as a Slurm job array,
//! resumable, merged and plotted (docs/sweep.md).

mod collect;
mod exec;
mod slurm;
pub mod spec;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;
use tessera_trace::printable;

use exec::{run_local, run_state, write_plan, RunState};
use spec::{value_text, Plan, RunKind, Spec};

/// Built-in specs: (name, description, YAML).
pub const BUILTIN_SPECS: &[(&str, &str, &str)] = &[(
    "baselines-load",
    "fifo/srtf/las/ftf on the default cluster, 4 loads x 3 seeds of a 300-job Philly-like trace",
    include_str!("builtin/baselines-load.yaml"),
)];

/// Every built-in spec: the CLI's own and those the mechanisms ship.
pub fn builtin_specs() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    BUILTIN_SPECS
        .iter()
        .copied()
        .chain(tessera_mechanisms::sweeps().map(|s| (s.name, s.about, s.yaml)))
}

pub const SWEEP_EXAMPLES: &str = "Examples:
  tessera sweep run builtin:baselines-load --out out/sweep
  tessera sweep collect out/sweep
      results.csv, results.json and plots in out/sweep";

#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// Expand a spec into its runs and print them with their ids, checking every axis value
    /// (unknown policies, unreadable traces) before anything runs.
    #[command(after_help = "Examples:
  tessera sweep plan builtin:baselines-load
      its runs with their ids, every axis value checked
  tessera sweep plan my-sweep.yaml --json")]
    Plan(PlanArgs),
    /// Run every run of a spec that has no result yet in DIR on local cores.
    #[command(after_help = "Examples:
  tessera sweep run builtin:baselines-load --out out/sweep
      every run on local cores; run again to resume after a stop
  tessera sweep run my-sweep.yaml --out out/mine --threads 2")]
    Run(RunArgs),
    /// Run one run (or one Slurm task's runs) of the plan in DIR; what Slurm tasks call.
    #[command(after_help = "Examples:
  tessera sweep run-one out/sweep --index 3
      run 3 of the plan in out/sweep (as a Slurm array task does)")]
    RunOne(RunOneArgs),
    /// Submit the runs that have no result yet as one Slurm job array.
    #[command(after_help = "Examples:
  tessera sweep submit my-sweep.yaml --out /shared/sweep --slurm --partition batch
  tessera sweep submit --resume --slurm --out /shared/sweep
      resubmit only the runs without a result")]
    Submit(SubmitArgs),
    /// Show done/failed/pending runs of DIR, and its Slurm jobs' states.
    #[command(after_help = "Examples:
  tessera sweep status out/sweep
  tessera sweep status out/sweep --json")]
    Status(StatusArgs),
    /// Merge DIR's results into results.csv and results.json and draw the plots.
    #[command(after_help = "Examples:
  tessera sweep collect out/sweep
      results.csv, results.json and one plot per metric against the first axis
  tessera sweep collect out/sweep --plot-format png --cdf-at load=60")]
    Collect(CollectArgs),
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Sweep spec (YAML, `kind: Sweep`) or `builtin:NAME` (synergy-c, baselines-load).
    pub spec: String,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Sweep spec (YAML, `kind: Sweep`) or `builtin:NAME`.
    pub spec: String,
    /// Sweep directory: plan.json, runs/ID/, results. Runs already done there are skipped.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Runs in parallel (default: available cores).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
}

#[derive(Debug, Args)]
pub struct RunOneArgs {
    /// Sweep directory holding plan.json.
    pub dir: PathBuf,
    /// Run index in the plan, or task index of `--submission`.
    #[arg(long)]
    pub index: usize,
    /// Submission number (DIR/slurm/submission-K.json): `--index` is then a task of it.
    #[arg(long, value_name = "K")]
    pub submission: Option<usize>,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Sweep spec or `builtin:NAME`; with --resume, the plan already in DIR is used.
    pub spec: Option<String>,
    /// Sweep directory; it must be on a filesystem every node sees.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Submit to Slurm (the only cluster backend for now).
    #[arg(long)]
    pub slurm: bool,
    /// Slurm partition.
    #[arg(long, value_name = "P")]
    pub partition: Option<String>,
    /// At most K array tasks running at once (`--array=0-N%K`).
    #[arg(long, value_name = "K")]
    pub max_parallel: Option<usize>,
    /// Runs per array task (fewer, longer tasks for many short runs).
    #[arg(long, default_value_t = 1, value_name = "M")]
    pub runs_per_task: usize,
    /// CPUs per array task.
    #[arg(long, default_value_t = 1, value_name = "C")]
    pub cpus_per_task: u32,
    /// Resubmit only the runs of DIR's plan that have no result (none running).
    #[arg(long)]
    pub resume: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Sweep directory.
    pub dir: PathBuf,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CollectArgs {
    /// Sweep directory.
    pub dir: PathBuf,
    /// Plot format.
    #[arg(long, value_enum, default_value_t = PlotFormat::Svg)]
    pub plot_format: PlotFormat,
    /// Write no plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Where to draw the JCT CDFs: AXIS=VALUE, repeatable (default: the spec's
    /// `outputs.cdfAt`, else the last value of the x axis and the first of the others).
    #[arg(long, value_name = "AXIS=VALUE")]
    pub cdf_at: Vec<String>,
}

pub use crate::plot::PlotFormat;

pub fn run(cmd: &SweepCommand) -> Result<()> {
    match cmd {
        SweepCommand::Plan(a) => plan_cmd(a),
        SweepCommand::Run(a) => run_cmd(a),
        SweepCommand::RunOne(a) => slurm::run_one(a),
        SweepCommand::Submit(a) => slurm::submit(a),
        SweepCommand::Status(a) => slurm::status(a),
        SweepCommand::Collect(a) => collect::collect(a),
    }
}

/// Reads a spec file or `builtin:NAME`.
pub fn load_spec(source: &str) -> Result<(Spec, String)> {
    let text = if let Some(name) = source.strip_prefix("builtin:") {
        let Some((_, _, yaml)) = builtin_specs().find(|(n, _, _)| *n == name) else {
            let known: Vec<_> = builtin_specs().map(|(n, _, _)| n).collect();
            bail!(
                "unknown built-in sweep {name:?} (known: {})",
                known.join(", ")
            );
        };
        yaml.to_string()
    } else {
        std::fs::read_to_string(source).with_context(|| format!("reading sweep spec {source}"))?
    };
    Ok((Spec::from_yaml(&text, source)?, text))
}

/// Parses, expands and checks a spec: every fixed option and axis value is checked on its
/// own, so that an error names the axis and the value.
pub fn plan_spec(source: &str) -> Result<(Plan, String)> {
    let (mut spec, text) = load_spec(source)?;
    if spec.run == RunKind::Simulate {
        absolutize_paths(&mut spec)?;
    }
    for (name, value) in &spec.fixed {
        check_value(&spec, name, value)
            .with_context(|| format!("fixed option {name} = {}", value_text(value)))?;
    }
    for axis in &spec.axes {
        for value in &axis.values {
            check_value(&spec, &axis.name, value)
                .with_context(|| format!("axis {}, value {}", axis.name, value_text(value)))?;
        }
    }
    let runs = spec.expand();
    // Whole runs too: combinations the single values cannot show (a missing required option).
    if let Some(first) = runs.first() {
        check_run(&spec, &first.params).context("the first run of the plan")?;
    }
    Ok((Plan { spec, runs }, text))
}

/// Options of `simulate` that name files.
const PATH_OPTIONS: &[&str] = &["cluster", "trace", "gpu-catalog"];

/// Makes relative file paths absolute (from the current directory, as `tessera simulate` would
/// read them), so that a run reads the same file wherever it runs: Slurm tasks start in the
/// sweep directory, and `--resume` may be given from elsewhere.
fn absolutize_paths(spec: &mut Spec) -> Result<()> {
    let fix = |v: &mut Value| -> Result<()> {
        if let Value::String(s) = v {
            if !s.starts_with("builtin:") && Path::new(s.as_str()).is_relative() {
                let abs =
                    std::path::absolute(s.as_str()).with_context(|| format!("resolving {s}"))?;
                *s = abs.display().to_string();
            }
        }
        Ok(())
    };
    for (name, value) in &mut spec.fixed {
        if PATH_OPTIONS.contains(&name.as_str()) {
            fix(value)?;
        }
    }
    for axis in &mut spec.axes {
        if PATH_OPTIONS.contains(&axis.name.as_str()) {
            for v in &mut axis.values {
                fix(v)?;
            }
        }
    }
    Ok(())
}

fn check_run(spec: &Spec, params: &BTreeMap<String, Value>) -> Result<()> {
    match spec.run {
        RunKind::Simulate => exec::simulate_args(params).map(|_| ()),
        RunKind::Repro => exec::repro_args(params).map(|_| ()),
    }
}

/// Checks one option value in the context of the spec's fixed options.
fn check_value(spec: &Spec, name: &str, value: &Value) -> Result<()> {
    if spec.run == RunKind::Repro {
        return check_repro_value(spec, name, value);
    }
    let mut one = BTreeMap::new();
    one.insert(name.to_string(), value.clone());
    exec::simulate_args(&one)?;
    let fixed_text = |key: &str| {
        spec.fixed
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| value_text(v))
    };
    let catalog = crate::inputs::load_catalog(fixed_text("gpu-catalog").as_deref().map(Path::new))?;
    let texts: Vec<String> = match value {
        Value::Array(items) => items.iter().map(value_text).collect(),
        v => vec![value_text(v)],
    };
    for text in &texts {
        match name {
            "policy" => {
                tessera_mechanisms::build_policy(text, &tessera_sched::PolicyOptions::default())?;
            }
            "cluster" => {
                crate::inputs::load_cluster(text, &catalog)?;
            }
            "trace" => {
                if text.starts_with("builtin:") {
                    crate::inputs::load_trace(text, None, &catalog, false, 1)?;
                } else {
                    std::fs::File::open(text).with_context(|| format!("reading trace {text}"))?;
                }
            }
            "trace-format" => {
                crate::inputs::parse_format(text)?;
            }
            "arrivals" => {
                text.parse::<tessera_trace::Arrivals>()?;
            }
            "load" => {
                format!("poisson:{text}").parse::<tessera_trace::Arrivals>()?;
            }
            "round" => {
                crate::args::positive_duration(text).map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks a `run: repro` value: the experiment exists and has this parameter, and policy
/// lists (parameters named like `policies`) name registered policies.
fn check_repro_value(spec: &Spec, name: &str, value: &Value) -> Result<()> {
    let mut params: BTreeMap<String, Value> = BTreeMap::new();
    if name != "experiment" {
        let experiment = spec
            .fixed
            .iter()
            .find(|(k, _)| k == "experiment")
            .map(|(_, v)| v.clone())
            .or_else(|| {
                spec.axes
                    .iter()
                    .find(|a| a.name == "experiment")
                    .and_then(|a| a.values.first().cloned())
            });
        if let Some(e) = experiment {
            params.insert("experiment".into(), e);
        }
    }
    params.insert(name.to_string(), value.clone());
    exec::repro_args(&params)?;
    if name.contains("polic") {
        for policy in value_text(value)
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            tessera_mechanisms::build_policy(policy, &tessera_sched::PolicyOptions::default())?;
        }
    }
    Ok(())
}

fn plan_cmd(args: &PlanArgs) -> Result<()> {
    let (plan, _) = plan_spec(&args.spec)?;
    let mut out = crate::output::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&plan)?)?;
        return Ok(());
    }
    let spec = &plan.spec;
    let axes = spec
        .axes
        .iter()
        .map(|a| format!("{} {}", a.values.len(), a.name))
        .collect::<Vec<_>>()
        .join(" x ");
    writeln!(
        out,
        "sweep {}: {} runs of {} ({})",
        printable(&spec.name),
        plan.runs.len(),
        spec.run,
        printable(&axes)
    )?;
    for (k, v) in &spec.fixed {
        writeln!(
            out,
            "  fixed {} = {}",
            printable(k),
            printable(&value_text(v))
        )?;
    }
    let header: Vec<&str> = ["index", "id"]
        .into_iter()
        .chain(spec.axes.iter().map(|a| a.name.as_str()))
        .collect();
    let rows: Vec<Vec<String>> = plan
        .runs
        .iter()
        .map(|r| {
            [r.index.to_string(), r.id.clone()]
                .into_iter()
                .chain(r.point.iter().map(|(_, v)| value_text(v)))
                .collect()
        })
        .collect();
    write!(out, "{}", crate::report::table(&header, &rows))?;
    Ok(())
}

/// Writes the plan (and the spec's text) into DIR. An existing DIR may hold results of an
/// earlier version of the spec: runs with the same parameters keep their ids and results.
fn prepare_dir(dir: &Path, plan: &Plan, text: &str) -> Result<()> {
    write_plan(dir, plan)?;
    exec::write_atomic(&dir.join("spec.yaml"), text.as_bytes())
}

fn run_cmd(args: &RunArgs) -> Result<()> {
    let (plan, text) = plan_spec(&args.spec)?;
    prepare_dir(&args.out, &plan, &text)?;
    crate::progress::hide_run_bars();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let started = Instant::now();
    let tally = run_local(&args.out, &plan, threads)?;
    eprintln!(
        "sweep {}: {}: {} ran now, {} already done, {} failed ({:.1} s on {})",
        printable(&plan.spec.name),
        crate::output::count(tally.total as u64, "run"),
        tally.done,
        tally.already,
        tally.failed,
        exec::secs(started),
        crate::output::count(threads as u64, "thread")
    );
    if tally.failed > 0 {
        for r in &plan.runs {
            if run_state(&args.out, &r.id) == RunState::Failed {
                let err = slurm::read_error(&args.out, &r.id);
                eprintln!("  failed {} (index {}): {}", r.id, r.index, printable(&err));
            }
        }
        bail!(
            "{} of {} runs failed; their errors are in {}/runs/ID/error.json (run again to retry them)",
            tally.failed,
            tally.total,
            args.out.display()
        );
    }
    Ok(())
}
