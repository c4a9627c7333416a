//! `tessera repro synergy` (issue 3): the Synergy paper's simulated setup — 16 servers × 8 GPUs
//! with 24 CPUs and 500 GiB each, 300 s rounds, a 20/70/10 image/language/speech mix — under
//! both our exact engine and the reference's round semantics, printed beside the reference
//! simulator's figures (DESIGN §5.1).
//!
//! (a) single-GPU trace at 9 jobs/h: fifo × proportional/greedy/tune/opt, srtf ×
//!     proportional/tune; (b) multi-GPU trace, las × proportional/tune at 3 and 4 jobs/h;
//! (c) a load sweep of fifo/srtf/las/ftf × proportional/tune/opt.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use serde::Serialize;
use tessera_model::{SimDuration, Workload};

use super::experiment::{reference_cluster, run_one, RunSpec, Semantics, WindowStats};
use super::reference_workload::{ReferenceTrace, ReferenceWorkload, REFERENCE_JOBS};
use super::workload::SynergyWorkload;
use crate::experiment::{
    run_parallel, Experiment, ExperimentArgs, ExperimentError, Figure, Param, ReproOutput,
    RunContext, Series,
};

/// `tessera repro synergy`.
#[derive(Clone, Copy, Debug)]
pub struct SynergyRepro;

const PARAMS: &[Param] = &[
    Param { name: "workload", default: "reference", help: "Workload: reference (default: the Synergy simulator's own job sequence at its seed 42, job for job, so its published figures are directly comparable) or synthetic (our generator; the seed study, several seeds)." },
    Param { name: "seeds", default: "", help: "Seeds of the workloads (and of profiling noise), comma-separated; every figure and ratio is reported as the mean and min–max over them. Default: 1,2,3,4,5 (synthetic), 42 (reference)." },
    Param { name: "seed", default: "", help: "One seed (same as --seeds N)." },
    Param { name: "parts", default: "a,b", help: "Parts to run: any of a, b, c (comma-separated)." },
    Param { name: "semantics", default: "synergy", help: "Engine semantics: synergy (default: the reference's rounds, what reproduces the paper), exact (ours), or both." },
    Param { name: "loads", default: "5,6,7,8,9,10,11,12", help: "Loads of the sweep (c), jobs per hour." },
    Param {
        name: "sweep-policies",
        default: "fifo+proportional,fifo+tune,fifo+opt,srtf+proportional,srtf+tune,srtf+opt,las+proportional,las+tune,las+opt,ftf+proportional,ftf+tune,ftf+opt",
        help: "Policies of the sweep (c).",
    },
    Param { name: "sweep-trace", default: "single", help: "Trace of the sweep (c): single or multi (GPU counts)." },
    Param { name: "servers", default: "16", help: "Servers (8 GPUs each); the paper uses 16." },
    Param { name: "jobs", default: "", help: "Jobs generated per workload (arrivals must continue until the window drains). Default: 16000 (synthetic), 24000 (reference)." },
    Param { name: "window-start", default: "4000", help: "First job id of the measurement window." },
    Param { name: "window-len", default: "1000", help: "Jobs in the measurement window." },
    Param { name: "profile-cost", default: "60", help: "Profiling cost in seconds (exact semantics)." },
    Param { name: "profile-error", default: "0", help: "Profiling relative error (exact semantics)." },
    Param { name: "restart-costs", default: "false", help: "Charge checkpoint/restore costs when allocations change (exact semantics)." },
];

/// Most servers of `--servers` (8 GPUs each).
const MAX_SERVERS: u32 = 4096;

/// Parsed parameters.
struct SynergyArgs {
    workload: String,
    seeds: Vec<u64>,
    seed: Option<u64>,
    parts: String,
    semantics: String,
    loads: Vec<f64>,
    sweep_policies: Vec<String>,
    sweep_trace: String,
    servers: u32,
    jobs: Option<usize>,
    window_start: u32,
    window_len: u32,
    profile_cost: f64,
    profile_error: f64,
    restart_costs: bool,
}

impl SynergyArgs {
    fn parse(a: &ExperimentArgs) -> Result<SynergyArgs, ExperimentError> {
        Ok(SynergyArgs {
            workload: a.parse("workload")?,
            seeds: a.list("seeds")?,
            seed: a.parse_opt("seed")?,
            parts: a.parse("parts")?,
            semantics: a.parse("semantics")?,
            loads: a.list("loads")?,
            sweep_policies: a.list("sweep-policies")?,
            sweep_trace: a.parse("sweep-trace")?,
            servers: a.parse("servers")?,
            jobs: a.parse_opt("jobs")?,
            window_start: a.parse("window-start")?,
            window_len: a.parse("window-len")?,
            profile_cost: a.parse("profile-cost")?,
            profile_error: a.parse("profile-error")?,
            restart_costs: a.flag("restart-costs")?,
        })
    }
}

impl Experiment for SynergyRepro {
    fn name(&self) -> &'static str {
        "synergy"
    }

    fn about(&self) -> &'static str {
        "Synergy (OSDI'22): resource-sensitive CPU/memory allocation on 128 GPUs"
    }

    fn params(&self) -> &'static [Param] {
        PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        run(&SynergyArgs::parse(args)?, ctx)
    }
}

/// Reference simulator figures (DESIGN §5.1): (part, policy, load) → (avg JCT h, p99 h).
const REFERENCE: &[(&str, &str, f64, f64, Option<f64>)] = &[
    ("a", "fifo+proportional", 9.0, 81.09, Some(214.6)),
    ("a", "fifo+greedy", 9.0, 24.98, Some(159.7)),
    ("a", "fifo+tune", 9.0, 21.88, Some(156.9)),
    ("a", "srtf+proportional", 9.0, 38.03, Some(1157.6)),
    ("a", "srtf+tune", 9.0, 16.60, Some(182.2)),
    ("b", "las+proportional", 3.0, 17.51, None),
    ("b", "las+tune", 3.0, 15.55, None),
    ("b", "las+proportional", 4.0, 30.73, None),
    ("b", "las+tune", 4.0, 18.90, None),
];

fn reference(part: &str, policy: &str, load: f64) -> Option<(f64, Option<f64>)> {
    REFERENCE
        .iter()
        .find(|r| r.0 == part && r.1 == policy && (r.2 - load).abs() < 1e-9)
        .map(|r| (r.3, r.4))
}

#[derive(Debug, Clone)]
struct Task {
    part: &'static str,
    trace: &'static str,
    load: f64,
    policy: String,
    semantics: Semantics,
    seed: u64,
}

/// Mean and range of one figure over seeds.
#[derive(Debug, Clone, Copy, Serialize)]
struct Spread {
    mean: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: impl Iterator<Item = f64>) -> Option<Spread> {
        let v: Vec<f64> = values.collect();
        if v.is_empty() {
            return None;
        }
        Some(Spread {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }

    /// `mean` alone for one seed, else `mean [min–max]`.
    fn show(&self, seeds: usize, decimals: usize, suffix: &str) -> String {
        if seeds <= 1 {
            format!("{:.*}{suffix}", decimals, self.mean)
        } else {
            format!(
                "{:.*}{suffix} [{:.*}–{:.*}]",
                decimals, self.mean, decimals, self.min, decimals, self.max
            )
        }
    }
}

/// One configuration over all seeds (summary.json `aggregated`).
#[derive(Debug, Serialize)]
struct Aggregate {
    part: String,
    trace: String,
    policy: String,
    load: f64,
    semantics: Semantics,
    seeds: Vec<u64>,
    avg_jct_h: Spread,
    p99_jct_h: Spread,
    makespan_h: Spread,
    speedup_over_proportional: Option<Spread>,
    reference_avg_jct_h: Option<f64>,
    reference_p99_jct_h: Option<f64>,
    wall_s: f64,
}

/// One row of summary.json.
#[derive(Debug, Serialize)]
struct Entry {
    part: String,
    trace: String,
    policy: String,
    load: f64,
    semantics: Semantics,
    seed: u64,
    avg_jct_s: f64,
    p99_jct_s: f64,
    makespan_s: f64,
    avg_jct_h: f64,
    speedup_over_proportional: Option<f64>,
    reference_avg_jct_h: Option<f64>,
    reference_p99_jct_h: Option<f64>,
    stats: WindowStats,
}

fn run(args: &SynergyArgs, ctx: &RunContext<'_>) -> Result<ReproOutput, ExperimentError> {
    let bad = |name: &str, value: &str, reason: &str| ExperimentError::param(name, value, reason);
    let semantics: Vec<Semantics> = match args.semantics.as_str() {
        "both" => vec![Semantics::Exact, Semantics::Synergy],
        "exact" => vec![Semantics::Exact],
        "synergy" => vec![Semantics::Synergy],
        s => return Err(bad("semantics", s, "must be exact, synergy or both")),
    };
    let parts: Vec<&str> = args
        .parts
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(p) = parts.iter().find(|p| !matches!(**p, "a" | "b" | "c")) {
        return Err(bad("parts", p, "unknown part (known: a, b, c)"));
    }
    if !(args.profile_cost.is_finite() && args.profile_cost >= 0.0) {
        return Err(bad(
            "profile-cost",
            &args.profile_cost.to_string(),
            "must be a non-negative number of seconds",
        ));
    }
    if args.profile_cost > tessera_model::MAX_INPUT_SECS as f64 {
        return Err(bad(
            "profile-cost",
            &args.profile_cost.to_string(),
            &format!("must be at most {} s", tessera_model::MAX_INPUT_SECS),
        ));
    }
    if !(args.profile_error.is_finite() && (0.0..=1.0).contains(&args.profile_error)) {
        return Err(bad(
            "profile-error",
            &args.profile_error.to_string(),
            "must be a relative error in 0..=1",
        ));
    }
    // Zero servers is a cluster no job fits (runs never end); past the limit the cluster
    // alone would fill memory.
    if !(1..=MAX_SERVERS).contains(&args.servers) {
        return Err(bad(
            "servers",
            &args.servers.to_string(),
            &format!("must be 1..={MAX_SERVERS}"),
        ));
    }
    if let Some(jobs) = args.jobs {
        if jobs > crate::MAX_GENERATOR_JOBS {
            return Err(bad(
                "jobs",
                &jobs.to_string(),
                &format!(
                    "more than the limit of {} jobs (tessera_mechanisms::MAX_GENERATOR_JOBS)",
                    crate::MAX_GENERATOR_JOBS
                ),
            ));
        }
    }
    let loads = args.loads.clone();
    if let Some(l) = loads.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
        return Err(bad("loads", &l.to_string(), "loads must be positive"));
    }
    // The arrivals of the most jobs either workload generates must stay well within the
    // clock's input range (half of it, as for every generator).
    let jobs = args.jobs.unwrap_or(REFERENCE_JOBS.max(16_000)) as f64;
    let max_span = tessera_model::MAX_INPUT_SECS as f64 / 2.0;
    if let Some(l) = loads.iter().find(|l| jobs * 3600.0 / **l > max_span) {
        return Err(bad(
            "loads",
            &l.to_string(),
            &format!("{jobs} jobs at this rate arrive over more than {max_span} s"),
        ));
    }
    let reference_workload = match args.workload.as_str() {
        "synthetic" => false,
        "reference" => true,
        w => return Err(bad("workload", w, "must be synthetic or reference")),
    };
    let seeds: Vec<u64> = if !args.seeds.is_empty() {
        args.seeds.clone()
    } else if let Some(seed) = args.seed {
        vec![seed]
    } else if reference_workload {
        vec![super::reference_workload::REFERENCE_SEED]
    } else {
        vec![1, 2, 3, 4, 5]
    };
    let sweep_trace: &'static str = match args.sweep_trace.as_str() {
        "single" => "single",
        "multi" => "multi",
        s => return Err(bad("sweep-trace", s, "must be single or multi")),
    };

    let mut tasks: Vec<Task> = Vec::new();
    for (&sem, &seed) in semantics
        .iter()
        .flat_map(|s| seeds.iter().map(move |seed| (s, seed)))
    {
        if parts.contains(&"a") {
            for p in [
                "fifo+proportional",
                "fifo+greedy",
                "fifo+tune",
                "fifo+opt",
                "srtf+proportional",
                "srtf+tune",
            ] {
                tasks.push(Task {
                    part: "a",
                    trace: "single",
                    load: 9.0,
                    policy: p.into(),
                    semantics: sem,
                    seed,
                });
            }
        }
        if parts.contains(&"b") {
            for load in [3.0, 4.0] {
                for p in ["las+proportional", "las+tune"] {
                    tasks.push(Task {
                        part: "b",
                        trace: "multi",
                        load,
                        policy: p.into(),
                        semantics: sem,
                        seed,
                    });
                }
            }
        }
        if parts.contains(&"c") {
            for &load in &loads {
                for p in &args.sweep_policies {
                    tasks.push(Task {
                        part: "c",
                        trace: sweep_trace,
                        load,
                        policy: p.into(),
                        semantics: sem,
                        seed,
                    });
                }
            }
        }
    }
    // Fail on unknown policy names before running anything.
    for t in &tasks {
        crate::build_policy(&t.policy, &tessera_sched::PolicyOptions::default())?;
    }

    // One workload per (trace, load, seed), shared by all policies.
    let mut workloads: BTreeMap<(String, u64, u64), Workload> = BTreeMap::new();
    for t in &tasks {
        let key = (t.trace.to_string(), t.load.to_bits(), t.seed);
        if workloads.contains_key(&key) {
            continue;
        }
        let w = if reference_workload {
            let trace = if t.trace == "multi" {
                ReferenceTrace::Multi
            } else {
                ReferenceTrace::Single
            };
            ReferenceWorkload {
                jobs: args.jobs.unwrap_or(REFERENCE_JOBS),
                seed: t.seed,
                ..ReferenceWorkload::new(trace, t.load)
            }
            .generate()
            .map_err(|e| ExperimentError::Other(format!("the reference's workload: {e}")))?
        } else {
            SynergyWorkload {
                jobs: args.jobs.unwrap_or(16_000),
                jobs_per_hour: t.load,
                multi_gpu: t.trace == "multi",
                split: [20.0, 70.0, 10.0],
                seed: t.seed,
            }
            .generate()
        };
        workloads.insert(key, w);
    }
    let cluster = reference_cluster(args.servers);
    let window = (
        args.window_start,
        args.window_start.saturating_add(args.window_len),
    );
    let started = Instant::now();
    let spec = |t: &Task| RunSpec {
        policy: t.policy.clone(),
        semantics: t.semantics,
        window,
        profile_cost: SimDuration::from_secs_f64(args.profile_cost),
        profile_error: args.profile_error,
        seed: t.seed,
        restart_costs: args.restart_costs,
    };
    // Heaviest first (higher loads run longer), so that no core idles at the end.
    let results = run_parallel(
        &tasks,
        ctx.threads,
        |t| t.load,
        |t| match workloads.get(&(t.trace.to_string(), t.load.to_bits(), t.seed)) {
            Some(w) => run_one(&cluster, w, &spec(t)),
            None => Err(ExperimentError::Other(format!(
                "no workload for {} at {}",
                t.trace, t.load
            ))),
        },
        ctx.progress,
    )?;
    let wall = started.elapsed().as_secs_f64();
    let threads = ctx.threads.clamp(1, tasks.len().max(1));
    let stats: Vec<WindowStats> = results.into_iter().collect::<Result<_, _>>()?;

    // Entries with speed-ups over the same ordering's proportional run.
    let mut entries: Vec<Entry> = Vec::new();
    for (t, s) in tasks.iter().zip(&stats) {
        let order = t.policy.split('+').next().unwrap_or("");
        let base = tasks.iter().zip(&stats).find(|(u, _)| {
            u.part == t.part
                && u.semantics == t.semantics
                && u.seed == t.seed
                && u.load == t.load
                && u.policy == format!("{order}+proportional")
        });
        let reference = reference(t.part, &t.policy, t.load);
        entries.push(Entry {
            part: t.part.into(),
            trace: t.trace.into(),
            policy: t.policy.clone(),
            load: t.load,
            semantics: t.semantics,
            seed: t.seed,
            avg_jct_s: s.avg_jct_s,
            p99_jct_s: s.p99_jct_s,
            makespan_s: s.makespan_s,
            avg_jct_h: s.avg_jct_s / 3600.0,
            speedup_over_proportional: base.map(|(_, b)| b.avg_jct_s / s.avg_jct_s.max(1e-9)),
            reference_avg_jct_h: reference.map(|r| r.0),
            reference_p99_jct_h: reference.and_then(|r| r.1),
            stats: s.clone(),
        });
    }

    // One row per configuration: mean and range over seeds, in task order.
    let mut aggregates: Vec<Aggregate> = Vec::new();
    for e in &entries {
        let same = |x: &Entry| {
            x.part == e.part
                && x.trace == e.trace
                && x.policy == e.policy
                && x.load == e.load
                && x.semantics == e.semantics
        };
        if aggregates.iter().any(|a| {
            a.part == e.part
                && a.trace == e.trace
                && a.policy == e.policy
                && a.load == e.load
                && a.semantics == e.semantics
        }) {
            continue;
        }
        let group: Vec<&Entry> = entries.iter().filter(|x| same(x)).collect();
        let spread = |f: &dyn Fn(&Entry) -> f64| {
            Spread::of(group.iter().map(|x| f(x))).unwrap_or(Spread {
                mean: 0.0,
                min: 0.0,
                max: 0.0,
            })
        };
        aggregates.push(Aggregate {
            part: e.part.clone(),
            trace: e.trace.clone(),
            policy: e.policy.clone(),
            load: e.load,
            semantics: e.semantics,
            seeds: group.iter().map(|x| x.seed).collect(),
            avg_jct_h: spread(&|x| x.avg_jct_h),
            p99_jct_h: spread(&|x| x.p99_jct_s / 3600.0),
            makespan_h: spread(&|x| x.makespan_s / 3600.0),
            speedup_over_proportional: Spread::of(
                group.iter().filter_map(|x| x.speedup_over_proportional),
            ),
            reference_avg_jct_h: e.reference_avg_jct_h,
            reference_p99_jct_h: e.reference_p99_jct_h,
            wall_s: group.iter().map(|x| x.stats.wall_s).sum(),
        });
    }

    let n_seeds = seeds.len();
    let seed_list: Vec<String> = seeds.iter().map(u64::to_string).collect();
    let mut out = String::new();
    writeln!(
        out,
        "Synergy reproduction: {} servers × 8 GPUs (24 CPUs, 500 GiB = 62.5 per GPU each), 300 s \
         rounds, 20/70/10 image/language/speech, window jobs {}..{}",
        args.servers, window.0, window.1
    )?;
    if reference_workload {
        writeln!(
            out,
            "workload: the reference simulator's own job sequence (msr-fiddle/synergy's generator, \
             seed {}); ref = its published figures for exactly this workload",
            seed_list.join(",")
        )?;
    } else {
        writeln!(
            out,
            "workload: our generator, seeds {} (mean [min–max] over seeds); ref = the reference's \
             figures on its own draw, for orientation (`--workload reference` compares like for like)",
            seed_list.join(",")
        )?;
    }
    writeln!(
        out,
        "exact = our engine (table truth per GPU count, optimistic profiling {} s, error {}); \
         synergy = the reference's round semantics (scalar speed-ups)",
        args.profile_cost, args.profile_error
    )?;
    writeln!(
        out,
        "published: up to 1.5x lower avg JCT on a 32-GPU physical cluster, up to 3.4x in simulation"
    )?;
    let wide = n_seeds > 1;
    let (wj, wp, wm, wv) = if wide {
        (22, 24, 22, 20)
    } else {
        (9, 9, 10, 8)
    };
    for part in ["a", "b", "c"] {
        let rows: Vec<&Aggregate> = aggregates.iter().filter(|e| e.part == part).collect();
        if rows.is_empty() {
            continue;
        }
        writeln!(out)?;
        writeln!(
            out,
            "({part}) {}",
            match part {
                "a" => "single-GPU trace, 9 jobs/h",
                "b" => "multi-GPU trace, LAS",
                _ => "load sweep",
            }
        )?;
        writeln!(
            out,
            "  {:<20} {:>5} {:<8} {:>wj$} {:>wp$} {:>wm$} {:>wv$} {:>9} {:>7} {:>9} {:>7}",
            "policy",
            "load",
            "engine",
            "avg JCT h",
            "p99 h",
            "makespan h",
            "vs prop",
            "ref avg h",
            "Δ ref",
            "ref p99 h",
            "wall s"
        )?;
        for e in rows {
            let delta = match (reference_workload, e.reference_avg_jct_h) {
                (true, Some(r)) if r > 0.0 => {
                    format!("{:+.2}%", (e.avg_jct_h.mean / r - 1.0) * 100.0)
                }
                _ => "-".into(),
            };
            writeln!(
                out,
                "  {:<20} {:>5} {:<8} {:>wj$} {:>wp$} {:>wm$} {:>wv$} {:>9} {:>7} {:>9} {:>7.2}",
                e.policy,
                e.load,
                e.semantics.name(),
                e.avg_jct_h.show(n_seeds, 2, ""),
                e.p99_jct_h.show(n_seeds, 1, ""),
                e.makespan_h.show(n_seeds, 1, ""),
                e.speedup_over_proportional
                    .map_or("-".into(), |s| s.show(n_seeds, 2, "x")),
                e.reference_avg_jct_h
                    .map_or("-".into(), |r| format!("{r:.2}")),
                delta,
                e.reference_p99_jct_h
                    .map_or("-".into(), |r| format!("{r:.1}")),
                e.wall_s,
            )?;
        }
    }
    writeln!(out)?;
    let ran_out: Vec<String> = entries
        .iter()
        .filter(|e| e.stats.arrivals_ran_out)
        .map(|e| {
            format!(
                "{} ({}, {}/h, seed {})",
                e.policy,
                e.semantics.name(),
                e.load,
                e.seed
            )
        })
        .collect();
    if !ran_out.is_empty() {
        // Not an error (a short --jobs is legitimate), but these figures are not comparable.
        writeln!(
            out,
            "warning: every job had arrived before the window drained in {}: raise --jobs",
            ran_out.join(", ")
        )?;
    }
    writeln!(
        out,
        "{} runs in {wall:.2} s on {threads} threads",
        tasks.len()
    )?;

    let summary = serde_json::json!({
        "experiment": "synergy",
        "workload": args.workload,
        "seeds": seeds,
        "servers": args.servers,
        "window": [window.0, window.1],
        "profile_cost_s": args.profile_cost,
        "profile_error": args.profile_error,
        "wall_s": wall,
        "aggregated": aggregates,
        "entries": entries,
    });
    let mut figures = Vec::new();
    for &sem in &semantics {
        for part in ["a", "b", "c"] {
            let rows: Vec<&Aggregate> = aggregates
                .iter()
                .filter(|e| e.part == part && e.semantics == sem)
                .collect();
            let loads: Vec<f64> = {
                let mut l: Vec<f64> = rows.iter().map(|e| e.load).collect();
                l.sort_by(f64::total_cmp);
                l.dedup();
                l
            };
            if rows.is_empty() || (part != "c" && loads.len() < 2) {
                continue;
            }
            let mut series: BTreeMap<String, Vec<(f64, Spread)>> = BTreeMap::new();
            for e in rows {
                series
                    .entry(e.policy.clone())
                    .or_default()
                    .push((e.load, e.avg_jct_h));
            }
            figures.push(Figure {
                file_stem: format!("jct_vs_load_{part}_{}", sem.name()),
                title: format!(
                    "Synergy ({part}), {} engine: average JCT vs load{}",
                    sem.name(),
                    if n_seeds > 1 {
                        format!(" (mean, bars min–max over {n_seeds} seeds)")
                    } else {
                        String::new()
                    }
                ),
                x_label: "load (jobs/hour)".into(),
                y_label: "average JCT (hours)".into(),
                series: series
                    .into_iter()
                    .map(|(label, mut points)| {
                        points.sort_by(|a, b| a.0.total_cmp(&b.0));
                        Series {
                            label,
                            points: points.iter().map(|(x, y)| (*x, y.mean)).collect(),
                            spread: (n_seeds > 1)
                                .then(|| points.iter().map(|(_, y)| (y.min, y.max)).collect()),
                        }
                    })
                    .collect(),
            });
        }
    }
    Ok(ReproOutput {
        text: out,
        summary,
        figures,
    })
}
