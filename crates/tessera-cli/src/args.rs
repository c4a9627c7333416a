//! Command-line arguments. Doc comments here are the `--help` text.

use std::path::PathBuf;

use anyhow::anyhow;
use clap::{Args, Parser, Subcommand};
use tessera_model::SimDuration;

/// Tessera: a GPU-cluster scheduler for multi-tenant deep learning, and its simulator.
///
/// Start with `tessera simulate`: it runs a built-in mixed cluster and workload (four GPU
/// types, MIG, training jobs of every size, inference services) under the baselines, each
/// mechanism's policy and `tessera`, and prints a comparison. `tessera serve` runs the same policies on real jobs;
/// `submit`, `list`, `describe`, `cancel`, `nodes`, `queue` and `services` talk to it.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about, long_about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a workload trace on a cluster under one or more policies and compare them.
    #[command(after_help = SIMULATE_EXAMPLES)]
    Simulate(Box<SimulateArgs>),
    /// Inspect, convert or generate workload traces.
    #[command(subcommand, after_help = TRACE_EXAMPLES)]
    Trace(TraceCommand),
    /// Run a speed benchmark and print its figures (see BENCHMARKS.md); `all` runs every one.
    /// The benchmarks come from the mechanism registry (`tessera builtins`).
    #[command(
        subcommand_required = true,
        arg_required_else_help = true,
        after_help = BENCH_EXAMPLES
    )]
    Bench(ExperimentCommand),
    /// Reproduce a paper's setup and print our figures beside the published ones. The
    /// experiments come from the mechanism registry (`tessera builtins`).
    #[command(
        subcommand_required = true,
        arg_required_else_help = true,
        after_help = REPRO_EXAMPLES
    )]
    Repro(ExperimentCommand),
    /// List built-in clusters, traces, policies (with the capability matrix: what each
    /// honours) and trace formats.
    #[command(after_help = BUILTINS_EXAMPLES)]
    Builtins(BuiltinsArgs),
    /// Run many simulations from one spec (axes x fixed options) on local cores or as a
    /// Slurm job array; resumable; merged and plotted by `sweep collect` (docs/sweep.md).
    #[command(subcommand, after_help = crate::cmd::sweep::SWEEP_EXAMPLES)]
    Sweep(crate::cmd::sweep::SweepCommand),
    /// Plan how to shard one model's training across GPUs of different speeds (HAP).
    #[command(after_help = PLAN_EXAMPLES)]
    Plan(crate::cmd::plan::PlanArgs),
    /// Run the scheduler daemon (real mode): HTTP API, durable store, Slurm or local backend.
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(crate::cmd::daemon::ServeArgs),
    /// Submit a job spec (YAML or JSON) to the daemon.
    #[command(after_help = SUBMIT_EXAMPLES)]
    Submit(crate::cmd::daemon::SubmitArgs),
    /// List your jobs (all jobs with an admin token).
    #[command(after_help = LIST_EXAMPLES)]
    List(crate::cmd::daemon::ListArgs),
    /// Show one job: state, allocation, pending reason, queue position, history.
    #[command(after_help = DESCRIBE_EXAMPLES)]
    Describe(crate::cmd::daemon::IdArgs),
    /// Cancel a job.
    #[command(after_help = CANCEL_EXAMPLES)]
    Cancel(crate::cmd::daemon::IdArgs),
    /// The cluster's nodes: list (default), drain, undrain, health.
    #[command(after_help = crate::cmd::daemon::NODES_EXAMPLES)]
    Nodes(crate::cmd::daemon::NodesArgs),
    /// Inference services on the daemon: submit, list, describe, retire.
    #[command(after_help = crate::cmd::daemon::SERVICES_EXAMPLES)]
    Services(crate::cmd::daemon::ServicesArgs),
    /// Show queues and the pending jobs in scheduling order.
    #[command(after_help = QUEUE_EXAMPLES)]
    Queue(crate::cmd::daemon::ClientArgs),
    /// What a change to the cluster or the policy would do to the daemon's queue, per tenant.
    #[command(after_help = crate::cmd::whatif::WHATIF_EXAMPLES)]
    Whatif(Box<crate::cmd::whatif::WhatifArgs>),
}

const SIMULATE_EXAMPLES: &str = "Examples:
  tessera simulate
      the built-in mixed cluster and workload under fifo, las, las+tune, miso, crius, sia,
      dilu and tessera, each on what it honours
  tessera simulate --cluster builtin:synergy-128 --trace builtin:synergy-mix-600 \\
      --policy fifo,srtf,las,ftf,las+proportional,las+tune
      Synergy's setup: 128 V100s, its workload and sensitivity tables
  tessera simulate --cluster c.yaml --trace jobs.csv --policy fifo --policy las --out out/
      compare two policies on your files; out/ gets CSVs, summary.json and plots
  tessera simulate --cluster pai_machine_spec.csv --trace cluster_log.csv --reject-unfit
      a Helios log on Alibaba PAI's 2020 machines; jobs that never fit are reported, not fatal

Exit status: 0 when every policy ran; 1 for bad input; 2 for an internal error; 3 when at
least one policy failed (its row shows the error, the others' results are printed and --out
is written).";

const SERVE_EXAMPLES: &str = "Examples:
  tessera serve --config tessera.yaml
      start the daemon (see docs/daemon.md for the config: store, backend, tenants)
  tessera serve --config tessera.yaml --log-level debug 2> daemon.log
      the same, logging plain text (no colour) to a file";

const SUBMIT_EXAMPLES: &str = "Examples:
  tessera submit job.yaml --token $TOKEN
      submit a job spec; prints its id
  tessera describe 12 --token $TOKEN
      its state, pending reason, queue position and history (RFC 3339 times)";

const TRACE_EXAMPLES: &str = "Examples:
  tessera trace generate --jobs 10000 --load 120 --seed 7 -o jobs.csv
  tessera trace inspect cluster_log.csv
  tessera trace convert trace_seren.csv -o seren.csv";

const INSPECT_EXAMPLES: &str = "Examples:
  tessera trace inspect jobs.csv
      jobs, time span, arrival rate, GPU-count histogram, run-time percentiles
  tessera trace inspect builtin:mixed
      a built-in workload as generated (services too)
  tessera trace inspect philly.csv --trace-format pollux-philly --skip-invalid";

const CONVERT_EXAMPLES: &str = "Examples:
  tessera trace convert trace_seren.csv -o seren.csv
      a public trace (format detected) to the canonical CSV
  tessera trace convert jobs.csv --arrivals poisson:60 --seed 2 -o jobs-60.csv
      the same jobs with arrivals re-drawn at 60 jobs/h
  tessera trace convert builtin:mixed -o mixed.yaml
      a built-in workload with its services, as a kind: Workload YAML";

const GENERATE_EXAMPLES: &str = "Examples:
  tessera trace generate --jobs 2000 --load 40 --seed 7 -o jobs.csv
      Poisson arrivals at 40 jobs/h, Philly's GPU counts and run times
  tessera trace generate --generator mixed --jobs 500 --load 60 -o mixed.yaml
      the default run's mixed workload (services too, in YAML)
  tessera trace generate --generator synergy-reference --trace multi --load 4 -o s.csv
      the Synergy simulator's own multi-GPU jobs";

const BENCH_EXAMPLES: &str = "Examples:
  tessera bench all
      every benchmark of BENCHMARKS.md, one after the other
  tessera bench synergy --json
      one benchmark's figures as JSON";

const REPRO_EXAMPLES: &str = "Examples:
  tessera repro synergy --out out/synergy
      Synergy's experiments, our figures beside the paper's, plots in out/synergy
  tessera repro tessera --json
      the mixed world over seeds and loads, as JSON";

const BUILTINS_EXAMPLES: &str = "Examples:
  tessera builtins
      every built-in cluster, trace, generator, policy (with what it honours) and format
  tessera builtins --capabilities-markdown
      the capability matrix as docs/capabilities.md has it";

const PLAN_EXAMPLES: &str = "Examples:
  tessera plan --model bert-moe --cluster builtin:hap-2
      HAP's cluster (2 x 2 V100 + 6 x 2 P100): the plan against data parallelism
  tessera plan --model gpt-48x1024 --cluster lab.yaml --json
      a simulator cluster file (kind: Cluster) works too; the plan as JSON
  tessera plan --model graph.yaml --cluster devices.yaml
      your own graph on calibrated devices (docs/plan-format.md)

TFLOP/s per rank: a GPU's FP32 peak from the catalog times 0.25 (the fraction dense
training attains), unless a kind: PlanCluster file gives `flops`.";

const LIST_EXAMPLES: &str = "Examples:
  tessera list --token $TOKEN
      your jobs: id, name, state, GPUs, age
  tessera list --state pending --token $TOKEN";

const DESCRIBE_EXAMPLES: &str = "Examples:
  tessera describe 12 --token $TOKEN
      its state, allocation, pending reason, queue position and history";

const CANCEL_EXAMPLES: &str = "Examples:
  tessera cancel 12 --token $TOKEN";

const QUEUE_EXAMPLES: &str = "Examples:
  tessera queue --token $TOKEN
      each queue and its pending jobs in scheduling order";

/// `repro` and `bench`: one subcommand per registered experiment, added at run time
/// ([`with_registry`]), whose flags are the experiment's parameters.
#[derive(Debug, Args)]
pub struct ExperimentCommand {}

fn experiment_subcommand(e: &dyn tessera_mechanisms::experiment::Experiment) -> clap::Command {
    use clap::{Arg, ArgAction};
    let mut cmd = clap::Command::new(e.name()).about(e.about());
    for p in e.params() {
        let mut arg = Arg::new(p.name).long(p.name).help(p.help);
        // One spelling for the arrival rate across repros, the other kept as a hidden alias.
        match p.name {
            "load" => arg = arg.alias("loads"),
            "loads" => arg = arg.alias("load"),
            _ => {}
        }
        // A negative flag `--no-X` keeps its old spelling `--X true|false`, hidden.
        if let Some(positive) = p.name.strip_prefix("no-").filter(|_| p.default == "false") {
            cmd = cmd.arg(
                Arg::new(positive)
                    .long(positive)
                    .value_name("BOOL")
                    .value_parser(clap::value_parser!(bool))
                    .conflicts_with(p.name)
                    .hide(true),
            );
        }
        arg = if p.default == "false" {
            arg.action(ArgAction::SetTrue)
        } else {
            let arg = arg.value_name("VALUE").allow_negative_numbers(true);
            if p.default.is_empty() {
                arg
            } else {
                arg.default_value(p.default)
            }
        };
        cmd = cmd.arg(arg);
    }
    cmd.arg(
        Arg::new("threads")
            .long("threads")
            .value_name("N")
            .value_parser(clap::value_parser!(usize))
            .help("Worker threads for independent runs (default: available cores)."),
    )
    .arg(
        Arg::new("out")
            .long("out")
            .value_name("DIR")
            .value_parser(clap::value_parser!(PathBuf))
            .help("Write summary.json and the figures (SVG and PNG) into this directory."),
    )
    .arg(
        Arg::new("json")
            .long("json")
            .action(ArgAction::SetTrue)
            .help("Print the summary.json document instead of the report."),
    )
}

/// The CLI with `repro` and `bench` subcommands for every registered experiment.
pub fn with_registry(cmd: clap::Command) -> clap::Command {
    use tessera_mechanisms::experiment::{benches, experiments};
    // Every experiment takes --out, --threads and --json; its own flags are in its help.
    let examples = |verb: &str, name: &str| {
        format!(
            "Examples:\n  tessera {verb} {name}\n      with its defaults, the report on the \
             terminal\n  tessera {verb} {name} --out out/{name} --threads 2\n      also \
             summary.json and the figures in out/{name}, on two worker threads"
        )
    };
    cmd.mut_subcommand("repro", |c| {
        c.subcommands(
            experiments().map(|e| experiment_subcommand(e).after_help(examples("repro", e.name()))),
        )
    })
    .mut_subcommand("bench", |c| {
        c.subcommands(
            benches().map(|e| experiment_subcommand(e).after_help(examples("bench", e.name()))),
        )
        .subcommand(
            clap::Command::new("all")
                .about("Every benchmark, one after the other.")
                .after_help(
                    "Examples:\n  tessera bench all\n  tessera bench all --json\n      \
                         one JSON document with every benchmark's figures",
                )
                .arg(
                    clap::Arg::new("json")
                        .long("json")
                        .action(clap::ArgAction::SetTrue)
                        .help("Print one JSON document."),
                ),
        )
    })
}

/// Where a cluster or trace comes from: a file path, or `builtin:NAME`.
pub type Source = String;

#[derive(Debug, Args)]
pub struct BuiltinsArgs {
    /// Print only the capability matrix (policies x what they honour) as the Markdown of
    /// docs/capabilities.md, generated from the registry.
    #[arg(long)]
    pub capabilities_markdown: bool,
}

/// `--trace-format`'s help, listing the formats from their registries (the readers', and
/// with `replays` the mechanisms' replay formats `simulate` also takes), so that it never
/// misses one.
pub fn trace_format_help(replays: bool) -> String {
    let mut names: Vec<&str> = vec!["auto (detect from header or extension)"];
    names.extend(tessera_trace::TraceFormat::ALL.iter().map(|f| f.name()));
    if replays {
        names.extend(tessera_mechanisms::experiment::replay_formats().map(|f| f.name));
    }
    format!(
        "Trace format: {} (each described by `tessera builtins`; docs/trace-format.md)",
        names.join(", ")
    )
}

/// A duration on the command line: seconds, or a number with s/m/h/d (`300`, `5m`, `2h`,
/// `1.5d`). Every flag that takes a duration parses it here (the failures file's parser),
/// so that all accept the same forms.
pub fn duration(text: &str) -> Result<SimDuration, String> {
    tessera_sim::failures::parse_duration(text)
}

/// A [`duration`] that must be more than 0.
pub fn positive_duration(text: &str) -> Result<SimDuration, String> {
    let d = duration(text)?;
    if d.is_zero() {
        return Err(format!("`{text}`: must be more than 0"));
    }
    Ok(d)
}

/// The [`duration`] of `--FLAG`, the flag named in its error (a bad value is bad input,
/// exit 1, as every other).
pub fn flag_duration(flag: &str, text: &str, positive: bool) -> anyhow::Result<SimDuration> {
    let parse = if positive {
        positive_duration
    } else {
        duration
    };
    parse(text).map_err(|e| anyhow!("--{flag}: {e}"))
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// GPU catalog (YAML, `kind: GpuCatalog`, the shape of the built-in
    /// crates/tessera-model/data/gpus.yaml) to use instead of the built-in one.
    #[arg(long, value_name = "PATH")]
    pub gpu_catalog: Option<PathBuf>,

    /// Cluster spec: a YAML file (`kind: Cluster`) or `builtin:NAME` (see `tessera builtins`).
    #[arg(
        long,
        default_value = "builtin:mixed",
        value_name = "PATH|builtin:NAME"
    )]
    pub cluster: Source,

    /// Workload trace: a file or `builtin:NAME` (see `tessera builtins`).
    #[arg(
        long,
        default_value = "builtin:mixed",
        value_name = "PATH|builtin:NAME"
    )]
    pub trace: Source,

    // Its help lists the registered formats (`trace_format_help`).
    #[arg(long, default_value = "auto", value_name = "NAME", help = trace_format_help(true))]
    pub trace_format: String,

    /// Policy to run; repeat (or separate by commas) to compare several. Default: fifo, las,
    /// Synergy's las+tune, miso, crius, sia, dilu and tessera, each run on the part of the
    /// inputs it honours (as with --ignore-unsupported; the table says what each ignored).
    /// Every registered policy is listed by `tessera builtins`.
    #[arg(long = "policy", value_name = "NAME", value_delimiter = ',')]
    pub policies: Vec<String>,

    /// Round length for preemptive policies (leases end and jobs are re-planned every
    /// round): seconds, or a number with s/m/h/d (`300`, `5m`). Without it, they re-plan at
    /// every arrival and completion.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub round: Option<String>,

    /// Seed for generated workloads and anything stochastic.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,

    /// Report jobs that can never fit the cluster as rejected instead of failing.
    #[arg(long)]
    pub reject_unfit: bool,

    /// Run a policy even when the inputs ask for something it does not honour (its declared
    /// capabilities: `tessera builtins`, docs/capabilities.md). Without this flag such a run
    /// is refused before it starts, naming the policy, what it would not honour and the
    /// policies that would. With it, each such policy runs on a copy of the workload with
    /// those requests relaxed: gpuTypes cleared, services it cannot serve removed, failures
    /// not injected; MIG, gpu_share, quota and CPU/memory requests left to the policy (it
    /// gives a whole GPU, its own CPU/memory); jobs it can never run (too many GPUs for it,
    /// or only non-MIG GPUs for a MIG-only policy) are reported rejected. The table and
    /// summary.json (`ignored`) say, per policy, how many requests were ignored and how.
    #[arg(long)]
    pub ignore_unsupported: bool,

    /// Skip malformed trace rows (counting them) instead of failing on the first.
    #[arg(long)]
    pub skip_invalid: bool,

    /// Charge no checkpoint/restore cost on preemption.
    #[arg(long)]
    pub no_restart_cost: bool,

    /// Write jobs.csv (one row per job and policy, with the nodes and GPU types it ran on),
    /// summary.json and timeseries.csv into this directory, and plots: jct_cdf (JCT CDF per
    /// policy, log x), timeline (busy GPUs in GPU-equivalents and queue length over time) and
    /// jct_bars (average and p99 JCT speed-ups over the first policy, as the table's `vs
    /// first`). docs/byod.md explains every file.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Image format of the plots written with --out.
    #[arg(long, value_enum, default_value_t = crate::plot::PlotFormat::Svg)]
    pub plot_format: crate::plot::PlotFormat,

    /// Write no plots with --out (only the CSV and JSON files).
    #[arg(long)]
    pub no_plots: bool,

    /// Print the comparison as JSON (the summary.json document) instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Worker threads for running policies in parallel (default: available cores).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub threads: Option<usize>,

    /// Not an option of simulate: `--jobs` once meant worker threads here; it is refused so
    /// that `--jobs 10000` is not mistaken for a job count.
    #[arg(long, hide = true, value_name = "N", allow_negative_numbers = true)]
    pub jobs: Option<String>,

    /// Engine semantics: exact (ours: completions inside rounds, progress at the true rate),
    /// or a mechanism's engine, e.g. synergy (the Synergy reference simulator's rounds: 300 s
    /// leases, credit at placement, completion at the end of the round, scalar speed-ups).
    #[arg(long, default_value = "exact", value_name = "NAME")]
    pub semantics: String,

    /// Truth model: trace (each job's trace throughput), a mechanism's model (e.g. synergy:
    /// per-model CPU/memory sensitivity tables, jobs profiled on arrival), tessera (the
    /// composed truth: every mechanism's tables at once, docs/truth.md), or auto, chosen from
    /// the inputs, never the policies: a mechanism's built-in workload or inputs only one
    /// paper's tables cover keep that paper's truth, everything else gets tessera.
    #[arg(long, default_value = "auto", value_name = "NAME")]
    pub perf: String,

    /// Profiling cost of one GPU per job (synergy truth, exact semantics): seconds, or a
    /// number with s/m/h/d (`60`, `2m`).
    #[arg(
        long,
        default_value = "60",
        value_name = "DURATION",
        allow_hyphen_values = true
    )]
    pub profile_cost: String,

    /// Profiling relative error: each measurement is scaled by 1 + e·U(-1, 1) (synergy
    /// truth, exact semantics).
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "FRACTION",
        allow_negative_numbers = true
    )]
    pub profile_error: f64,

    /// Arrival times: `trace` (as the trace has them) or `poisson:JOBS_PER_HOUR` (re-drawn
    /// as a Poisson process at that rate, seeded by --seed; job order is kept).
    #[arg(long, default_value = "trace", value_name = "trace|poisson:RATE")]
    pub arrivals: String,

    /// Inject failures listed in FILE: nodes and single GPUs going down and coming back
    /// (YAML `kind: Failures` with events, MTBF per node group, checkpoint intervals per job
    /// and max restarts; or CSV `time,node,gpu,event,duration`). Jobs on a failed GPU lose
    /// the work since their last checkpoint and are requeued. Format: docs/failures.md.
    #[arg(long, value_name = "FILE")]
    pub failures: Option<PathBuf>,

    /// Draw node failures with this mean time between failures, for every node (`500h`) or
    /// one node group (`GROUP=500h`; repeat per group). Durations: seconds or s/m/h/d.
    /// Seeded by --seed, independently of arrivals. Needs --mttr.
    #[arg(long, value_name = "[GROUP=]DURATION", allow_hyphen_values = true)]
    pub mtbf: Vec<String>,

    /// Mean time to repair of drawn node failures, for every node (`2h`) or one node group
    /// (`GROUP=2h`).
    #[arg(long, value_name = "[GROUP=]DURATION", allow_hyphen_values = true)]
    pub mttr: Vec<String>,

    /// Default checkpoint interval of every job under failures (a failure loses the work
    /// since the last one); overrides the failures file's default. Without any, jobs
    /// checkpoint only when a run (re)starts.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub checkpoint_interval: Option<String>,

    /// A job interrupted by failures more often than this fails (reported with the reason);
    /// overrides the failures file. Default: always requeued.
    #[arg(long, value_name = "N")]
    pub max_restarts: Option<u32>,

    /// Stop every run at this simulated time (seconds, or a number with s/m/h/d: `30m`,
    /// `2h`); jobs still queued or running then are reported unfinished. Default: a run ends
    /// when its workload is done (every job ended, every service over).
    #[arg(long, value_name = "DURATION")]
    pub horizon: Option<String>,

    /// Most events one run may process before it stops with an error (a guard against runs
    /// that would take hours: failures that never let jobs finish, years of short rounds).
    /// Default: 10 million + 10,000 per job and per service (+ one per round over the
    /// services' lifetime).
    #[arg(long, value_name = "N")]
    pub max_events: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Print a trace's job count, time span, GPU-count histogram and duration percentiles.
    #[command(after_help = INSPECT_EXAMPLES)]
    Inspect(InspectArgs),
    /// Convert a trace to Tessera's canonical CSV format.
    #[command(after_help = CONVERT_EXAMPLES)]
    Convert(ConvertArgs),
    /// Generate a synthetic trace: Poisson arrivals, Philly job runtimes and GPU counts.
    #[command(after_help = GENERATE_EXAMPLES)]
    Generate(GenerateArgs),
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// GPU catalog (YAML, `kind: GpuCatalog`, the shape of the built-in
    /// crates/tessera-model/data/gpus.yaml) to use instead of the built-in one.
    #[arg(long, value_name = "PATH")]
    pub gpu_catalog: Option<PathBuf>,

    /// Trace file or `builtin:NAME`.
    pub path: Source,
    #[arg(long, default_value = "auto", value_name = "NAME", help = trace_format_help(false))]
    pub trace_format: String,
    /// Skip malformed rows instead of failing.
    #[arg(long)]
    pub skip_invalid: bool,
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// GPU catalog (YAML, `kind: GpuCatalog`, the shape of the built-in
    /// crates/tessera-model/data/gpus.yaml) to use instead of the built-in one.
    #[arg(long, value_name = "PATH")]
    pub gpu_catalog: Option<PathBuf>,

    /// Input trace file or `builtin:NAME`.
    pub input: Source,
    /// Output file; `-` for stdout.
    #[arg(long, short, default_value = "-")]
    pub output: String,
    /// Output format: `csv` (canonical Tessera CSV: training jobs only), `yaml` or `json` (a
    /// `kind: Workload` spec: jobs and inference services); `auto` = from the output's
    /// extension (`.yaml`/`.yml`, `.json`), else csv.
    #[arg(long, default_value = "auto", value_name = "auto|csv|yaml|json")]
    pub output_format: String,
    #[arg(long, default_value = "auto", value_name = "NAME", help = trace_format_help(false))]
    pub trace_format: String,
    /// Arrival times: `trace` or `poisson:JOBS_PER_HOUR` (re-drawn, seeded by --seed).
    #[arg(long, default_value = "trace", value_name = "trace|poisson:RATE")]
    pub arrivals: String,
    /// Seed of re-drawn arrivals.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Generator: `philly` (Poisson arrivals, Philly runtimes and GPU counts) or one a
    /// mechanism ships (listed by `tessera builtins`), e.g. `synergy-reference`: the Synergy
    /// simulator's own workload, job for job as its generator makes it at `random.seed(42)`.
    #[arg(long, default_value = "philly", value_name = "philly|NAME")]
    pub generator: String,
    /// Variant of a mechanism's generator, e.g. for `synergy-reference`: `single` (every job
    /// 1 GPU, the paper's Fig. 8; its default) or `multi` (GPU counts from the Philly log,
    /// Fig. 7). Refused by generators without variants (`philly` among them).
    #[arg(long, value_name = "single|multi")]
    pub trace: Option<String>,
    /// Number of jobs.
    #[arg(long, default_value_t = 1000, allow_negative_numbers = true)]
    pub jobs: usize,
    /// Arrival rate in jobs per hour (Poisson).
    #[arg(long, default_value_t = 30.0, allow_negative_numbers = true)]
    pub load: f64,
    /// Seed (default 1 for `philly`; a mechanism's generator has its own default, e.g. 42,
    /// the Synergy reference's own).
    #[arg(long, allow_negative_numbers = true)]
    pub seed: Option<u64>,
    /// GPU count of every job (default: the Philly mix 1/2/4/8 GPUs).
    #[arg(long, allow_negative_numbers = true)]
    pub gpus: Option<u32>,
    /// Output CSV; `-` for stdout.
    #[arg(long, short, default_value = "-")]
    pub output: String,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every subcommand's `--help` ends with an Examples section (issue 41), and every
    /// example parses with the flags the command has: the examples cannot go stale.
    #[test]
    fn every_subcommand_has_examples_that_parse() {
        let root = super::with_registry(super::Cli::command());
        let mut missing = Vec::new();
        let mut checked = 0;
        let mut stack: Vec<(Vec<String>, &clap::Command)> = root
            .get_subcommands()
            .map(|c| (vec![c.get_name().to_string()], c))
            .collect();
        while let Some((path, cmd)) = stack.pop() {
            if cmd.get_name() == "help" {
                continue;
            }
            for sub in cmd.get_subcommands() {
                let mut p = path.clone();
                p.push(sub.get_name().to_string());
                stack.push((p, sub));
            }
            // The text as written (the rendering wraps long lines).
            let help = cmd
                .get_after_long_help()
                .or(cmd.get_after_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let Some(examples) = help.split("Examples:\n").nth(1) else {
                missing.push(path.join(" "));
                continue;
            };
            // Example lines (a trailing `\` continues one), up to the first blank line.
            let mut lines: Vec<String> = Vec::new();
            let mut joined = String::new();
            for line in examples.lines().take_while(|l| !l.trim().is_empty()) {
                if !line.starts_with("  tessera ") && joined.is_empty() {
                    continue;
                }
                joined.push_str(line.trim().trim_end_matches('\\'));
                joined.push(' ');
                if !line.trim_end().ends_with('\\') {
                    lines.push(std::mem::take(&mut joined));
                }
            }
            let own = format!("tessera {}", path.join(" "));
            assert!(
                lines.iter().any(|l| l.starts_with(&own)),
                "{own}: no example of the command itself: {lines:?}"
            );
            for line in &lines {
                // Shell redirections end the arguments.
                let argv: Vec<&str> = line
                    .split_whitespace()
                    .take_while(|w| !w.contains('>') && *w != "|")
                    .collect();
                if let Err(e) = root.clone().try_get_matches_from(&argv) {
                    panic!("example `{line}` does not parse: {e}");
                }
                checked += 1;
            }
        }
        assert!(missing.is_empty(), "no Examples section: {missing:?}");
        assert!(checked > 40, "{checked} examples");
    }
}
