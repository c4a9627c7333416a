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
    fn print<T: Serialize + ?Sized>(value: &T) -> Result<()> {
        let text = serde_json::to_string_pretty(value)?;
        writeln!(std::io::stdout().lock(), "{text}")?;
        Ok(())
    }
    /// `bench all --format json`: one document.
    #[derive(Serialize)]
    struct All {
        philly: Vec<BenchRow>,
        synergy: Vec<SynergyBenchRow>,
    }
    match (args.which.as_str(), args.format) {
        ("philly", Format::Table) => run_philly(args).map(drop),
        ("philly", Format::Json) => print(&run_philly(args)?),
        ("synergy", Format::Table) => run_synergy(args).map(drop),
        ("synergy", Format::Json) => print(&run_synergy(args)?),
        ("all", Format::Table) => {
            run_philly(args)?;
            println!();
            run_synergy(args).map(drop)
        }
        ("all", Format::Json) => {
            let philly = run_philly(args)?;
            let synergy = run_synergy(args)?;
            print(&All { philly, synergy })
        }
        (other, _) => bail!("unknown benchmark {other:?} (known: philly, synergy, all)"),
    }
}

/// Runs the Philly-sized benchmark; prints its table (table format) and returns its rows.
fn run_philly(args: &BenchArgs) -> Result<Vec<BenchRow>> {
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
        Format::Json => {}
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
    Ok(rows)
}

/// One figure of `tessera bench synergy`.
#[derive(Debug, Serialize)]
struct SynergyBenchRow {
    case: String,
    /// Seconds (wall).
    wall_s: f64,
    /// What the figure must stay under, seconds.
    target_s: f64,
    /// Extra facts (rounds, variables, ...).
    detail: String,
    /// How to reproduce it.
    command: String,
}

/// Synergy's speed targets (issue 3 item 9, DESIGN §7): one policy on the standard
/// experiment (< 1 s), the 16-policy × 8-load sweep on the available cores (< 10 s), and
/// OPT's LP for 500 runnable jobs with distinct tables (< 1 s).
fn run_synergy(args: &BenchArgs) -> Result<Vec<SynergyBenchRow>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use tessera_sim::synergy_experiment::{reference_cluster, run_one, RunSpec, Semantics};
    use tessera_sim::synergy_workload::SynergyWorkload;

    let cluster = reference_cluster(16);
    let spec = |policy: &str, semantics: Semantics| RunSpec {
        policy: policy.to_string(),
        semantics,
        window: (4000, 5000),
        profile_cost: tessera_perf::synergy::DEFAULT_PROFILE_COST,
        profile_error: 0.0,
        seed: 1,
        restart_costs: false,
    };
    let workload = |load: f64| {
        SynergyWorkload {
            jobs: 16_000,
            jobs_per_hour: load,
            multi_gpu: false,
            split: [20.0, 70.0, 10.0],
            seed: 1,
        }
        .generate()
    };
    let mut rows = Vec::new();

    // One policy on the standard experiment: single-GPU trace, 9 jobs/h, window 4000-4999.
    let standard = workload(9.0);
    for semantics in [Semantics::Exact, Semantics::Synergy] {
        for policy in [
            "fifo+proportional",
            "fifo+tune",
            "srtf+proportional",
            "las+tune",
        ] {
            let stats = run_one(&cluster, &standard, &spec(policy, semantics))?;
            rows.push(SynergyBenchRow {
                case: format!("{policy}, {} engine", semantics.name()),
                wall_s: stats.wall_s,
                target_s: 1.0,
                detail: format!(
                    "{} jobs arrived, {} scheduling points",
                    stats.jobs_arrived, stats.scheduling_points
                ),
                command: format!(
                    "tessera repro synergy --parts c --loads 9 --semantics {} --sweep-policies {policy} --threads 1",
                    semantics.name()
                ),
            });
        }
    }

    // The sweep: 4 orderings x 4 mechanisms x loads 2..9, exact engine, all cores.
    let policies: Vec<String> = tessera_sched::SYNERGY_POLICIES
        .iter()
        .map(|p| p.to_string())
        .collect();
    let loads: Vec<f64> = (2..=9).map(f64::from).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = Instant::now();
    let workloads: Vec<_> = loads.iter().map(|&l| workload(l)).collect();
    // Heaviest (highest load) first so that no core idles at the end.
    let mut tasks: Vec<(usize, &String)> = (0..loads.len())
        .rev()
        .flat_map(|l| policies.iter().map(move |p| (l, p)))
        .collect();
    tasks.sort_by(|a, b| loads[b.0].total_cmp(&loads[a.0]));
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, tasks.len()) {
            scope.spawn(|| {
                while let Some(&(l, policy)) = tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if let Err(e) =
                        run_one(&cluster, &workloads[l], &spec(policy, Semantics::Exact))
                    {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e.into());
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e.context("synergy sweep"));
    }
    let sweep_s = started.elapsed().as_secs_f64();
    rows.push(SynergyBenchRow {
        case: format!(
            "sweep: {} policies x {} loads, exact engine",
            policies.len(),
            loads.len()
        ),
        wall_s: sweep_s,
        target_s: 10.0,
        detail: format!("{} runs on {threads} threads, workload generation included", tasks.len()),
        command: format!(
            "tessera repro synergy --parts c --semantics exact --loads 2,3,4,5,6,7,8,9 --sweep-policies {}",
            policies.join(",")
        ),
    });

    // OPT's LP for 500 runnable jobs, 10% profiling error so that no two tables are equal.
    let (lp_s, variables, status) = opt_lp_500(0.1);
    rows.push(SynergyBenchRow {
        case: "OPT LP, 500 runnable jobs, distinct tables".into(),
        wall_s: lp_s,
        target_s: 1.0,
        detail: format!("{variables} LP variables, status {status}"),
        command: "tessera bench synergy".into(),
    });

    let mut out = std::io::stdout().lock();
    match args.format {
        Format::Json => {}
        Format::Table => {
            writeln!(
                out,
                "Synergy: 16 servers x 8 GPUs (24 CPUs, 500 GB each), 300 s rounds, single-GPU trace, window jobs 4000-4999, seed 1\n"
            )?;
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.case.clone(),
                        format!("{:.3} s", r.wall_s),
                        format!("< {} s", r.target_s),
                        if r.wall_s < r.target_s {
                            "met"
                        } else {
                            "NOT MET"
                        }
                        .into(),
                        r.detail.clone(),
                    ]
                })
                .collect();
            write!(
                out,
                "{}",
                table(&["case", "wall", "target", "", "detail"], &cells)
            )?;
            writeln!(out, "\ncommands:")?;
            for r in &rows {
                writeln!(out, "  {}: {}", r.case, r.command)?;
            }
        }
    }
    Ok(rows)
}

/// Solves OPT's LP once for 500 runnable jobs (GPU counts 1,1,1,2,4 repeating, the ten
/// Synergy models) on a cluster exactly large enough for their GPUs, with tables estimated
/// under `error`: (seconds, LP variables, status).
fn opt_lp_500(error: f64) -> (f64, usize, String) {
    use tessera_model::SimRng;
    use tessera_perf::synergy::{
        OptimisticProfiler, SensitivityEstimate, ServerShape, SynergyProfiles,
    };
    use tessera_sched::synergy_opt::{solve_round, OptJob};
    const MODELS: [&str; 10] = [
        "alexnet",
        "res18",
        "res50",
        "mobilenet",
        "shufflenet",
        "gnmt",
        "transformer",
        "lstm",
        "m5",
        "deepspeech",
    ];
    let shape = ServerShape {
        gpus: 8.0,
        cpus: 24.0,
        mem: 500.0,
    };
    let prof = OptimisticProfiler {
        rel_error: error,
        ..OptimisticProfiler::default()
    };
    let mut rng = SimRng::seed_from_u64(3);
    let gpus_of = |i: usize| [1u32, 1, 1, 2, 4][i % 5];
    let ests: Vec<(u32, SensitivityEstimate)> = (0..500)
        .filter_map(|i| {
            let p = SynergyProfiles::builtin().for_gpus(MODELS[i % 10], gpus_of(i))?;
            let table = prof.estimate_table(p, gpus_of(i), shape, &mut rng);
            Some((gpus_of(i), SensitivityEstimate::from_table(table)))
        })
        .collect();
    let jobs: Vec<OptJob<'_>> = ests
        .iter()
        .map(|(g, e)| OptJob {
            gpus: *g,
            estimate: Some(e),
            class: None,
        })
        .collect();
    let gpus: u32 = jobs.iter().map(|j| j.gpus).sum();
    let (cpu, mem) = (gpus as f64 * 3.0, gpus as f64 * 62.5);
    let started = Instant::now();
    let r = solve_round(&jobs, cpu, mem, 3.0, 62.5, 10.0);
    (
        started.elapsed().as_secs_f64(),
        r.variables,
        format!("{:?}", r.status),
    )
}
