//! Command-line arguments. Doc comments here are the `--help` text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Tessera: a GPU-cluster scheduler for multi-tenant deep learning, and its simulator.
///
/// Start with `tessera simulate`: it runs a built-in cluster and workload under the baseline
/// policies and prints a comparison. `tessera serve` runs the same policies on real jobs;
/// `submit`, `list`, `describe`, `cancel`, `nodes` and `queue` talk to it.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about, long_about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a workload trace on a cluster under one or more policies and compare them.
    Simulate(SimulateArgs),
    /// Inspect, convert or generate workload traces.
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Run the speed benchmarks and print their figures (see BENCHMARKS.md).
    Bench(BenchArgs),
    /// Reproduce a paper's setup and print our figures beside the published ones.
    #[command(subcommand)]
    Repro(ReproCommand),
    /// List built-in clusters, traces, policies and trace formats.
    Builtins,
    /// Run many simulations from one spec (axes x fixed options) on local cores or as a
    /// Slurm job array; resumable; merged and plotted by `sweep collect` (docs/sweep.md).
    #[command(subcommand)]
    Sweep(crate::cmd::sweep::SweepCommand),
    /// Run the scheduler daemon (real mode): HTTP API, durable store, Slurm or local backend.
    Serve(crate::cmd::daemon::ServeArgs),
    /// Submit a job spec (YAML or JSON) to the daemon.
    Submit(crate::cmd::daemon::SubmitArgs),
    /// List your jobs (all jobs with an admin token).
    List(crate::cmd::daemon::ListArgs),
    /// Show one job: state, allocation, pending reason, queue position, history.
    Describe(crate::cmd::daemon::IdArgs),
    /// Cancel a job.
    Cancel(crate::cmd::daemon::IdArgs),
    /// Show the cluster's nodes with allocated and total resources.
    Nodes(crate::cmd::daemon::ClientArgs),
    /// Show queues and the pending jobs in scheduling order.
    Queue(crate::cmd::daemon::ClientArgs),
}

#[derive(Debug, Subcommand)]
pub enum ReproCommand {
    /// Synergy (OSDI'22): resource-sensitive CPU/memory allocation on 128 GPUs.
    Synergy(crate::cmd::repro::synergy::SynergyArgs),
}

/// Where a cluster or trace comes from: a file path, or `builtin:NAME`.
pub type Source = String;

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// GPU catalog (YAML, `kind: GpuCatalog`, the shape of the built-in
    /// crates/tessera-model/data/gpus.yaml) to use instead of the built-in one.
    #[arg(long, value_name = "PATH")]
    pub gpu_catalog: Option<PathBuf>,

    /// Cluster spec: a YAML file (`kind: Cluster`) or `builtin:NAME` (see `tessera builtins`).
    #[arg(
        long,
        default_value = "builtin:default",
        value_name = "PATH|builtin:NAME"
    )]
    pub cluster: Source,

    /// Workload trace: a file or `builtin:NAME` (see `tessera builtins`).
    #[arg(
        long,
        default_value = "builtin:philly-synthetic-2k",
        value_name = "PATH|builtin:NAME"
    )]
    pub trace: Source,

    /// Trace format: auto (detect from header or extension), tessera, pollux-philly, gavel,
    /// pollux, tiresias, philly-json.
    #[arg(long, default_value = "auto", value_name = "NAME")]
    pub trace_format: String,

    /// Policy to run; repeat to compare several. Default: every baseline (fifo, srtf, las, ftf).
    #[arg(long = "policy", value_name = "NAME")]
    pub policies: Vec<String>,

    /// Round length in seconds for preemptive policies (leases end and jobs are re-planned
    /// every round). Without it, they re-plan at every arrival and completion.
    #[arg(long, value_name = "SECS")]
    pub round: Option<f64>,

    /// Seed for generated workloads and anything stochastic.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Report jobs that can never fit the cluster as rejected instead of failing.
    #[arg(long)]
    pub reject_unfit: bool,

    /// Skip malformed trace rows (counting them) instead of failing on the first.
    #[arg(long)]
    pub skip_invalid: bool,

    /// Charge no checkpoint/restore cost on preemption.
    #[arg(long)]
    pub no_restart_cost: bool,

    /// Write jobs.csv, summary.json and timeseries.csv into this directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Print the comparison as JSON (the summary.json document) instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Worker threads for running policies in parallel (default: available cores).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,

    /// Engine semantics: exact (completions inside rounds, progress at the true rate) or
    /// synergy (the Synergy reference simulator's rounds: 300 s leases, credit at placement,
    /// completion at the end of the round, scalar speed-ups, exact free profiles).
    #[arg(long, value_enum, default_value_t = SemanticsArg::Exact)]
    pub semantics: SemanticsArg,

    /// Truth model: trace (each job's trace throughput, CPU/memory do not matter), synergy
    /// (Synergy's per-model CPU/memory sensitivity tables; jobs of models without a table run
    /// at their trace throughput; jobs are profiled on arrival), or auto: synergy when any
    /// ORDER+MECH policy (or `synergy`) is requested, else trace.
    #[arg(long, value_enum, default_value_t = PerfArg::Auto)]
    pub perf: PerfArg,

    /// Profiling cost in seconds of one GPU per job (synergy truth, exact semantics).
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub profile_cost: f64,

    /// Profiling relative error: each measurement is scaled by 1 + e·U(-1, 1) (synergy
    /// truth, exact semantics).
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION")]
    pub profile_error: f64,

    /// Arrival times: `trace` (as the trace has them) or `poisson:JOBS_PER_HOUR` (re-drawn
    /// as a Poisson process at that rate, seeded by --seed; job order is kept).
    #[arg(long, default_value = "trace", value_name = "trace|poisson:RATE")]
    pub arrivals: String,
}

/// `--semantics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SemanticsArg {
    /// Our engine.
    Exact,
    /// The Synergy reference simulator's rounds.
    Synergy,
}

/// `--perf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PerfArg {
    /// synergy if a Synergy policy is requested, else trace.
    Auto,
    /// The trace's throughput.
    Trace,
    /// Synergy's sensitivity tables with optimistic profiling.
    Synergy,
}

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Print a trace's job count, time span, GPU-count histogram and duration percentiles.
    Inspect(InspectArgs),
    /// Convert a trace to Tessera's canonical CSV format.
    Convert(ConvertArgs),
    /// Generate a synthetic trace: Poisson arrivals, Philly job runtimes and GPU counts.
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
    /// Trace format (default: detect).
    #[arg(long, default_value = "auto")]
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
    /// Output CSV (canonical Tessera format); `-` for stdout.
    #[arg(long, short, default_value = "-")]
    pub output: String,
    /// Input format (default: detect).
    #[arg(long, default_value = "auto")]
    pub trace_format: String,
    /// Arrival times: `trace` or `poisson:JOBS_PER_HOUR` (re-drawn, seeded by --seed).
    #[arg(long, default_value = "trace", value_name = "trace|poisson:RATE")]
    pub arrivals: String,
    /// Seed of re-drawn arrivals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Number of jobs.
    #[arg(long, default_value_t = 1000)]
    pub jobs: usize,
    /// Arrival rate in jobs per hour (Poisson).
    #[arg(long, default_value_t = 30.0)]
    pub load: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// GPU count of every job (default: the Philly mix 1/2/4/8 GPUs).
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Output CSV; `-` for stdout.
    #[arg(long, short, default_value = "-")]
    pub output: String,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Which benchmark: `philly` (82,247 jobs on 2,048 GPUs, fifo and las with 5-minute
    /// rounds), `synergy` (one Synergy policy on the standard experiment, the 16-policy x
    /// 8-load sweep, OPT's LP for 500 jobs) or `all`.
    #[arg(default_value = "philly")]
    pub which: String,
    /// Number of jobs of the synthetic Philly-sized trace.
    #[arg(long, default_value_t = 82_247)]
    pub jobs: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A human-readable table.
    Table,
    /// One JSON document.
    Json,
}
