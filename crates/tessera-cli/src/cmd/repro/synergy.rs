//! `tessera repro synergy` (issue 3): the Synergy paper's simulated setup — 16 servers × 8 GPUs
//! with 24 CPUs and 500 GB each, 300 s rounds, a 20/70/10 image/language/speech mix — under
//! both our exact engine and the reference's round semantics, printed beside the reference
//! simulator's figures (DESIGN §5.1).
//!
//! (a) single-GPU trace at 9 jobs/h: fifo × proportional/greedy/tune/opt, srtf ×
//!     proportional/tune; (b) multi-GPU trace, las × proportional/tune at 3 and 4 jobs/h;
//! (c) a load sweep of fifo/srtf/las/ftf × proportional/tune/opt.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use tessera_model::{SimDuration, Workload};
use tessera_sim::synergy_experiment::{
    reference_cluster, run_one, RunSpec, Semantics, WindowStats,
};
use tessera_sim::synergy_reference::{ReferenceTrace, ReferenceWorkload};
use tessera_sim::synergy_workload::SynergyWorkload;

/// Options of `tessera repro synergy`.
#[derive(Debug, Args)]
pub struct SynergyArgs {
    /// Workload: `synthetic` (our generator, several seeds) or `reference` (the Synergy
    /// simulator's own job sequence at its seed 42, job for job; its published figures are then
    /// directly comparable).
    #[arg(long, default_value = "synthetic", value_name = "synthetic|reference")]
    pub workload: String,
    /// Seeds of the workloads (and of profiling noise), comma-separated; every figure is
    /// reported as the mean and min–max over them. Default: 1,2,3,4,5 (synthetic), 42
    /// (reference).
    #[arg(long, value_name = "LIST", conflicts_with = "seed")]
    pub seeds: Option<String>,
    /// One seed (same as `--seeds N`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Parts to run: any of a, b, c (comma-separated).
    #[arg(long, default_value = "a,b")]
    pub parts: String,
    /// Engine semantics: exact (ours), synergy (the reference's rounds), or both.
    #[arg(long, default_value = "both")]
    pub semantics: String,
    /// Loads of the sweep (c), jobs per hour.
    #[arg(long, default_value = "5,6,7,8,9,10,11,12")]
    pub loads: String,
    /// Policies of the sweep (c).
    #[arg(
        long,
        default_value = "fifo+proportional,fifo+tune,fifo+opt,srtf+proportional,srtf+tune,srtf+opt,las+proportional,las+tune,las+opt,ftf+proportional,ftf+tune,ftf+opt"
    )]
    pub sweep_policies: String,
    /// Trace of the sweep (c): single or multi (GPU counts).
    #[arg(long, default_value = "single")]
    pub sweep_trace: String,
    /// Servers (8 GPUs each); the paper uses 16.
    #[arg(long, default_value_t = 16)]
    pub servers: u32,
    /// Jobs generated per workload (arrivals continue until the window drains).
    #[arg(long, default_value_t = 16_000)]
    pub jobs: usize,
    /// First job id of the measurement window.
    #[arg(long, default_value_t = 4000)]
    pub window_start: u32,
    /// Jobs in the measurement window.
    #[arg(long, default_value_t = 1000)]
    pub window_len: u32,
    /// Profiling cost in seconds (exact semantics).
    #[arg(long, default_value_t = 60.0)]
    pub profile_cost: f64,
    /// Profiling relative error (exact semantics).
    #[arg(long, default_value_t = 0.0)]
    pub profile_error: f64,
    /// Charge checkpoint/restore costs when allocations change (exact semantics).
    #[arg(long)]
    pub restart_costs: bool,
    /// Worker threads (default: available cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write summary.json and JCT-vs-load plots (SVG) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
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

pub fn run(args: &SynergyArgs) -> Result<()> {
    let semantics: Vec<Semantics> = match args.semantics.as_str() {
        "both" => vec![Semantics::Exact, Semantics::Synergy],
        "exact" => vec![Semantics::Exact],
        "synergy" => vec![Semantics::Synergy],
        s => bail!("--semantics must be exact, synergy or both, got {s:?}"),
    };
    let parts: Vec<&str> = args
        .parts
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(p) = parts.iter().find(|p| !matches!(**p, "a" | "b" | "c")) {
        bail!("unknown part {p:?} (known: a, b, c)");
    }
    if !(args.profile_cost.is_finite() && args.profile_cost >= 0.0) {
        bail!("--profile-cost must be a non-negative number of seconds");
    }
    let loads: Vec<f64> = args
        .loads
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<f64>()
                .with_context(|| format!("--loads: {s:?}"))
        })
        .collect::<Result<_>>()?;
    if loads.iter().any(|l| !(l.is_finite() && *l > 0.0)) {
        bail!("--loads must be positive");
    }
    let reference_workload = match args.workload.as_str() {
        "synthetic" => false,
        "reference" => true,
        w => bail!("--workload must be synthetic or reference, got {w:?}"),
    };
    let seeds: Vec<u64> = match (&args.seeds, args.seed) {
        (Some(list), _) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<u64>()
                    .with_context(|| format!("--seeds: {s:?} is not a seed"))
            })
            .collect::<Result<_>>()?,
        (None, Some(seed)) => vec![seed],
        (None, None) if reference_workload => {
            vec![tessera_sim::synergy_reference::REFERENCE_SEED]
        }
        (None, None) => vec![1, 2, 3, 4, 5],
    };
    if seeds.is_empty() {
        bail!("--seeds: give at least one seed");
    }
    let sweep_trace: &'static str = match args.sweep_trace.as_str() {
        "single" => "single",
        "multi" => "multi",
        s => bail!("--sweep-trace must be single or multi, got {s:?}"),
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
                for p in args
                    .sweep_policies
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                {
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
        tessera_sched::build_policy(&t.policy, &tessera_sched::PolicyOptions::default())
            .with_context(|| format!("policy {}", t.policy))?;
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
                jobs: args.jobs,
                seed: t.seed,
                ..ReferenceWorkload::new(trace, t.load)
            }
            .generate()
            .context("the reference's workload")?
        } else {
            SynergyWorkload {
                jobs: args.jobs,
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
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, tasks.len().max(1));
    let started = Instant::now();
    // Heaviest first (higher loads run longer), so that no core idles at the end of a sweep
    // while another finishes a long run; results keep their task order.
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    order.sort_by(|&a, &b| tasks[b].load.total_cmp(&tasks[a].load));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<WindowStats>>>> =
        Mutex::new((0..tasks.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let Some(t) = tasks.get(i) else { break };
                    let key = (t.trace.to_string(), t.load.to_bits(), t.seed);
                    let Some(w) = workloads.get(&key) else {
                        break;
                    };
                    let spec = RunSpec {
                        policy: t.policy.clone(),
                        semantics: t.semantics,
                        window,
                        profile_cost: SimDuration::from_secs_f64(args.profile_cost),
                        profile_error: args.profile_error,
                        seed: t.seed,
                        restart_costs: args.restart_costs,
                    };
                    let r = run_one(&cluster, w, &spec)
                        .with_context(|| format!("{} at {} jobs/h", t.policy, t.load));
                    if let Ok(mut slots) = results.lock() {
                        slots[i] = Some(r);
                    }
                }
            });
        }
    });
    let wall = started.elapsed().as_secs_f64();
    let slots = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a run panicked"))?;
    let mut stats: Vec<WindowStats> = Vec::with_capacity(tasks.len());
    for s in slots {
        stats.push(s.unwrap_or_else(|| Err(anyhow::anyhow!("a run did not happen")))?);
    }

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
    writeln!(
        out,
        "{} runs in {wall:.2} s on {threads} threads",
        tasks.len()
    )?;
    print!("{out}");

    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let doc = serde_json::json!({
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
        let path = dir.join("summary.json");
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        let mut written = vec![path.display().to_string()];
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
                let svg = svg_plot(
                    &format!(
                        "Synergy ({part}), {} engine: average JCT vs load{}",
                        sem.name(),
                        if n_seeds > 1 {
                            format!(" (mean, bars min–max over {n_seeds} seeds)")
                        } else {
                            String::new()
                        }
                    ),
                    "load (jobs/hour)",
                    "average JCT (hours)",
                    &series,
                );
                let path = dir.join(format!("jct_vs_load_{part}_{}.svg", sem.name()));
                std::fs::write(&path, svg)
                    .with_context(|| format!("writing {}", path.display()))?;
                written.push(path.display().to_string());
            }
        }
        eprintln!("wrote {}", written.join(", "));
    }
    Ok(())
}

/// A small self-contained SVG line chart (no fonts needed: text is rendered by the viewer).
fn svg_plot(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &BTreeMap<String, Vec<(f64, Spread)>>,
) -> String {
    const W: f64 = 760.0;
    const H: f64 = 480.0;
    const L: f64 = 70.0;
    const R: f64 = 190.0;
    const T: f64 = 40.0;
    const B: f64 = 50.0;
    let pts = series.values().flatten();
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y.max);
    }
    if !x0.is_finite() {
        x0 = 0.0;
        x1 = 1.0;
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    let sx = |x: f64| L + (x - x0) / (x1 - x0) * (W - L - R);
    let sy = |y: f64| H - B - y / y1 * (H - T - B);
    let colors = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
        "#bcbd22", "#17becf", "#000000", "#aec7e8",
    ];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    let _ = writeln!(
        s,
        r#"<line x1="{L}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{L}" y1="{T}" x2="{L}" y2="{}" stroke="black"/>"#,
        H - B,
        W - R,
        H - B,
        H - B
    );
    for k in 0..=5 {
        let y = y1 * k as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{L}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" text-anchor="end">{4:.1}</text>"##,
            sy(y),
            W - R,
            L - 6.0,
            sy(y) + 4.0,
            y
        );
    }
    let mut xs: Vec<f64> = series.values().flatten().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in xs {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{x}</text>"#,
            sx(x),
            H - B + 18.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (L + W - R) / 2.0,
        H - 12.0,
        esc(xlabel)
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{0}" text-anchor="middle" transform="rotate(-90 18 {0})">{1}</text>"#,
        (T + H - B) / 2.0,
        esc(ylabel)
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        let mut pts = pts.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y.mean)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for &(x, y) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                sx(x),
                sy(y.mean)
            );
            if y.max > y.min {
                // The spread over seeds: a vertical bar from min to max with end ticks.
                let _ = writeln!(
                    s,
                    r#"<path d="M{0:.1},{1:.1}V{2:.1}M{3:.1},{1:.1}H{4:.1}M{3:.1},{2:.1}H{4:.1}" stroke="{c}" fill="none"/>"#,
                    sx(x),
                    sy(y.min),
                    sy(y.max),
                    sx(x) - 4.0,
                    sx(x) + 4.0
                );
            }
        }
        let ly = T + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{0}" y1="{ly}" x2="{1}" y2="{ly}" stroke="{c}" stroke-width="2"/><text x="{2}" y="{3}">{4}</text>"#,
            W - R + 12.0,
            W - R + 32.0,
            W - R + 38.0,
            ly + 4.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
