//! `tessera repro miso` (MISO's 8-GPU, 100-job comparison over seeds) and `tessera bench
//! miso` (the optimizer on 7 jobs; 10,000 jobs on 1,024 A100s).

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tessera_model::{Cluster, GpuCatalog, MigGeometry, SimDuration, Workload};

use super::layouts::LayoutSet;
use tessera_perf::RestartCosts;
use tessera_sched::Policy;
use tessera_sim::{SimConfig, SimReport, Simulation, Summary};

use super::opt::{optimize, Candidates, Objective};
use super::policy::{Miso as MisoPolicy, MpsOnly, NoPart, StaticPartition};
use super::predict::{
    mean_abs_error, EmulatedError, LearnedRegression, SlicePredictor, MPS_MEASUREMENT_NOISE,
};
use super::truth::{MisoTruth, SliceSpeeds, SliceTable};
use super::workload::ArrivalOrder;
use super::{miso_config, miso_table, workload};
use crate::experiment::{
    bench_output, run_parallel, text_table, BenchRow, Experiment, ExperimentArgs, ExperimentError,
    Figure, Param, ReproOutput, RunContext, Series, Spread,
};

/// Restore seconds MISO measured per model family (its simulator charges these on every
/// re-partition).
pub const MISO_RESTORE_SECS: [(&str, u64); 8] = [
    ("embedding", 4),
    ("gnn", 5),
    ("transformer", 5),
    ("mobilenet", 7),
    ("resnet", 9),
    ("deepspeech2", 14),
    ("bert", 18),
    ("cyclegan", 44),
];

/// Restart costs of the MISO runs: each model's restore time.
pub fn miso_restart_costs() -> RestartCosts {
    RestartCosts::per_model(
        MISO_RESTORE_SECS
            .iter()
            .map(|(m, s)| (m.to_string(), SimDuration::from_secs(*s))),
        SimDuration::from_secs(10),
    )
}

/// A cluster of `nodes` × `per_node` A100-40GB.
pub fn a100_cluster(nodes: u32, per_node: u32) -> Result<Cluster, ExperimentError> {
    let yaml = format!(
        "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {{name: a100, count: {nodes}, gpu: A100-40GB, gpusPerNode: {per_node}, cpus: 64, memory: 512Gi}}\n"
    );
    Cluster::from_yaml(&yaml, &GpuCatalog::builtin())
        .map_err(|e| ExperimentError::Other(e.to_string()))
}

/// Which policy a run uses.
#[derive(Clone, Debug, PartialEq)]
pub enum Which {
    /// One job per GPU.
    NoPart,
    /// A static layout (compute slices).
    Static(Vec<u8>),
    /// MISO or its oracle.
    Miso {
        /// True speeds, no MPS phase.
        oracle: bool,
    },
    /// MPS sharing.
    Mps,
}

/// Knobs of the reproduction.
#[derive(Clone, Debug)]
pub struct ReproSpec {
    /// Arrival seeds.
    pub seeds: Vec<u64>,
    /// GPUs (one node).
    pub gpus: u32,
    /// Mean inter-arrival (s), and for the first third of the jobs.
    pub mean_s: f64,
    /// Mean inter-arrival of the first third (s).
    pub early_mean_s: f64,
    /// Which trace job takes which arrival.
    pub order: ArrivalOrder,
    /// Layouts MISO and the static search choose from.
    pub layouts: LayoutSet,
    /// Use the learned predictor instead of the emulated error.
    pub learned: bool,
    /// MISO profiles under MPS even a job arriving at an empty GPU.
    pub mps_every_placement: bool,
    /// Static layouts do not hold the queue behind a job no idle slice fits.
    pub static_non_blocking: bool,
}

/// Default seeds: 40, enough for the means of the ratios to MISO to settle (their standard
/// error is under 2% of the mean; the repro takes about 2.5 s per 40 seeds in release).
pub const DEFAULT_SEEDS: &str = "1-40";

impl Default for ReproSpec {
    fn default() -> Self {
        ReproSpec {
            seeds: (1..=40).collect(),
            gpus: 8,
            mean_s: 60.0,
            early_mean_s: 30.0,
            order: ArrivalOrder::Shuffled,
            layouts: LayoutSet::Generated,
            learned: false,
            mps_every_placement: false,
            static_non_blocking: false,
        }
    }
}

/// One run's figures.
#[derive(Clone, Debug, Serialize)]
pub struct RunRow {
    /// Policy name.
    pub policy: String,
    /// Arrival seed.
    pub seed: u64,
    /// The simulator's summary.
    #[serde(flatten)]
    pub summary: Summary,
    /// Wall seconds.
    pub wall_s: f64,
    /// Policy counters.
    pub policy_stats: Vec<(String, f64)>,
}

/// Means over seeds for one policy.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyMeans {
    /// Policy name.
    pub policy: String,
    /// Mean average JCT, s.
    pub avg_jct_s: f64,
    /// Mean makespan, s.
    pub makespan_s: f64,
    /// Mean queueing, s.
    pub avg_queue_s: f64,
    /// Re-partitions (layout changes with restarts) per job.
    pub repartitions_per_job: f64,
    /// Restarts (checkpoint + restore) per job.
    pub restarts_per_job: f64,
    /// Jobs unfinished over all seeds.
    pub unfinished: usize,
    /// Average JCT over seeds: mean, standard deviation, range.
    pub avg_jct: Spread,
    /// Per seed, average JCT / MISO's on the same seed.
    pub vs_miso: Spread,
    /// Per seed, re-partitions per job.
    pub repartitions: Spread,
}

/// What the reproduction measured.
#[derive(Clone, Debug, Serialize)]
pub struct ReproResult {
    /// Every run.
    pub runs: Vec<RunRow>,
    /// nopart, best static, miso, miso-oracle, mps (means over seeds).
    pub means: Vec<PolicyMeans>,
    /// Every static layout tried (means over seeds), best first.
    pub statics: Vec<PolicyMeans>,
    /// Predictor used by `miso`.
    pub predictor: String,
    /// Its mean absolute error on normalised slice speeds (over the table).
    pub predictor_mae: f64,
    /// The learned regression's leave-one-out error.
    pub learned_loo_mae: f64,
}

impl ReproResult {
    /// The means of a policy by name (`static` = the best static layout).
    pub fn get(&self, name: &str) -> Option<&PolicyMeans> {
        if name == "static" {
            return self.statics.first();
        }
        self.means.iter().find(|m| m.policy == name)
    }
}

/// The static layouts to search: every maximal layout of the set (no instance can be added)
/// on which every job of the workload fits some slice, one per multiset of slice sizes.
pub fn static_candidates(geo: &MigGeometry, set: LayoutSet, jobs: &[SliceSpeeds]) -> Vec<Vec<u8>> {
    let all = super::layouts::layouts(geo, set);
    let mut out: Vec<Vec<u8>> = Vec::new();
    for l in &all {
        let maximal = set == LayoutSet::Miso18
            || !all
                .iter()
                .any(|m| m.len() > l.len() && l.iter().all(|i| m.contains(i)));
        if !maximal {
            continue;
        }
        let mut sizes = geo.compute_slices_of(l);
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        if out.contains(&sizes) {
            continue;
        }
        if jobs
            .iter()
            .all(|s| sizes.iter().any(|&z| s[z as usize].is_some()))
        {
            out.push(sizes);
        }
    }
    out
}

fn build(
    which: &Which,
    spec: &ReproSpec,
    seed: u64,
    learned: &Arc<LearnedRegression>,
) -> Box<dyn Policy> {
    match which {
        Which::NoPart => Box::new(NoPart),
        Which::Static(code) => {
            let mut p = StaticPartition::new(code, miso_table());
            p.blocking = !spec.static_non_blocking;
            Box::new(p)
        }
        Which::Miso { oracle } => {
            let mut c = miso_config(*oracle, seed);
            c.layouts = spec.layouts;
            c.profile_alone = spec.mps_every_placement;
            if spec.learned {
                c.predictor = learned.clone();
            }
            Box::new(MisoPolicy::new(c))
        }
        Which::Mps => Box::new(MpsOnly::new(miso_table())),
    }
}

/// Runs one policy on one workload with MISO's costs.
pub fn run_policy(
    cluster: &Cluster,
    workload: &Workload,
    policy: Box<dyn Policy>,
) -> Result<SimReport, tessera_sim::SimError> {
    let truth = MisoTruth::new(miso_table());
    let config = SimConfig {
        restart_costs: miso_restart_costs(),
        record_timeseries: false,
        ..SimConfig::default()
    };
    Simulation::new(cluster, workload, &truth, policy, config).run(&mut ())
}

fn stat(report: &SimReport, name: &str) -> f64 {
    report
        .policy_stats
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0.0, |(_, v)| *v)
}

fn means(policy: &str, rows: &[&RunRow]) -> PolicyMeans {
    let n = rows.len().max(1) as f64;
    let mean = |f: &dyn Fn(&RunRow) -> f64| rows.iter().map(|r| f(r)).sum::<f64>() / n;
    let per_job = |r: &RunRow, v: f64| v / r.summary.jobs.max(1) as f64;
    PolicyMeans {
        policy: policy.to_string(),
        avg_jct_s: mean(&|r| r.summary.avg_jct_s),
        makespan_s: mean(&|r| r.summary.makespan_s),
        avg_queue_s: mean(&|r| r.summary.avg_queue_s),
        repartitions_per_job: mean(&|r| {
            let v = r
                .policy_stats
                .iter()
                .find(|(k, _)| k == "repartitions")
                .map_or(0.0, |(_, v)| *v);
            per_job(r, v)
        }),
        restarts_per_job: mean(&|r| per_job(r, r.summary.preemptions as f64)),
        unfinished: rows.iter().map(|r| r.summary.unfinished).sum(),
        avg_jct: Spread::of(&rows.iter().map(|r| r.summary.avg_jct_s).collect::<Vec<_>>()),
        vs_miso: Spread::default(),
        repartitions: Spread::of(
            &rows
                .iter()
                .map(|r| per_job(r, stat_of(r, "repartitions")))
                .collect::<Vec<_>>(),
        ),
    }
}

fn stat_of(r: &RunRow, name: &str) -> f64 {
    r.policy_stats
        .iter()
        .find(|(k, _)| k == name)
        .map_or(0.0, |(_, v)| *v)
}

/// Per seed, `rows`' average JCT over MISO's on the same seed.
fn ratio_to(rows: &[&RunRow], miso: &[&RunRow]) -> Spread {
    let v: Vec<f64> = rows
        .iter()
        .filter_map(|r| {
            miso.iter()
                .find(|m| m.seed == r.seed && m.summary.avg_jct_s > 0.0)
                .map(|m| r.summary.avg_jct_s / m.summary.avg_jct_s)
        })
        .collect();
    Spread::of(&v)
}

/// Runs the reproduction.
pub fn run_repro(spec: &ReproSpec, ctx: &RunContext<'_>) -> Result<ReproResult, ExperimentError> {
    let cluster = a100_cluster(1, spec.gpus)?;
    let table = miso_table();
    let geo = cluster
        .nodes
        .first()
        .and_then(|n| cluster.catalog.mig_geometry(n.gpu))
        .ok_or_else(|| ExperimentError::Other("the cluster has no MIG geometry".into()))?
        .clone();
    let trace = workload::miso_trace().map_err(ExperimentError::Other)?;
    let job_speeds: Vec<SliceSpeeds> = trace
        .iter()
        .map(|j| {
            table
                .get(&j.key)
                .copied()
                .unwrap_or_else(super::truth::linear_speeds)
        })
        .collect();
    let statics = static_candidates(&geo, spec.layouts, &job_speeds);
    let mut kinds = vec![
        Which::NoPart,
        Which::Miso { oracle: false },
        Which::Miso { oracle: true },
        Which::Mps,
    ];
    kinds.extend(statics.iter().cloned().map(Which::Static));
    let workloads: Vec<(u64, Workload)> = spec
        .seeds
        .iter()
        .map(|&s| {
            workload::miso_workload(s, spec.mean_s, spec.early_mean_s, spec.order)
                .map(|w| (s, w))
                .map_err(ExperimentError::Other)
        })
        .collect::<Result<_, _>>()?;
    let learned = Arc::new(LearnedRegression::fit(&table, MPS_MEASUREMENT_NOISE, 1));
    let items: Vec<(usize, usize)> = (0..workloads.len())
        .flat_map(|w| (0..kinds.len()).map(move |k| (w, k)))
        .collect();
    let results = run_parallel(
        &items,
        ctx.threads,
        |&(_, k)| {
            if matches!(kinds[k], Which::Miso { .. }) {
                2.0
            } else {
                1.0
            }
        },
        |&(w, k)| {
            let (seed, workload) = &workloads[w];
            let policy = build(&kinds[k], spec, *seed, &learned);
            let started = Instant::now();
            run_policy(&cluster, workload, policy)
                .map(|report| RunRow {
                    policy: report.policy.clone(),
                    seed: *seed,
                    summary: report.summary.clone(),
                    wall_s: started.elapsed().as_secs_f64(),
                    policy_stats: report.policy_stats.clone(),
                })
                .map_err(|e| (report_name(&kinds[k]), *seed, e))
        },
        ctx.progress,
    )?;
    let mut runs = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok(row) => runs.push(row),
            Err((name, seed, source)) => {
                return Err(ExperimentError::Sim {
                    context: format!("{name}, seed {seed}"),
                    source,
                })
            }
        }
    }
    let of = |name: &str| -> Vec<&RunRow> { runs.iter().filter(|r| r.policy == name).collect() };
    let mut static_means: Vec<PolicyMeans> = kinds
        .iter()
        .filter(|k| matches!(k, Which::Static(_)))
        .map(|k| {
            let name = report_name(k);
            means(&name, &of(&name))
        })
        .collect();
    static_means.sort_by(|a, b| a.avg_jct_s.total_cmp(&b.avg_jct_s));
    let miso_rows = of("miso");
    for m in &mut static_means {
        m.vs_miso = ratio_to(&of(&m.policy), &miso_rows);
    }
    let mut main: Vec<PolicyMeans> = ["nopart", "miso", "miso-oracle", "mps"]
        .iter()
        .map(|n| {
            let mut m = means(n, &of(n));
            m.vs_miso = ratio_to(&of(n), &miso_rows);
            m
        })
        .collect();
    if let Some(best) = static_means.first() {
        main.insert(1, best.clone());
    }
    let predictor: &dyn SlicePredictor = if spec.learned {
        learned.as_ref()
    } else {
        &EmulatedError::default()
    };
    Ok(ReproResult {
        runs,
        means: main,
        statics: static_means,
        predictor: predictor.name().to_string(),
        predictor_mae: mean_abs_error(predictor, &table, 1),
        learned_loo_mae: LearnedRegression::leave_one_out_mae(&table, MPS_MEASUREMENT_NOISE, 1),
    })
}

fn report_name(which: &Which) -> String {
    match which {
        Which::NoPart => "nopart".into(),
        Which::Static(code) => StaticPartition::new(code, Arc::new(empty_table()))
            .name()
            .to_string(),
        Which::Miso { oracle: true } => "miso-oracle".into(),
        Which::Miso { oracle: false } => "miso".into(),
        Which::Mps => "mps".into(),
    }
}

fn empty_table() -> SliceTable {
    SliceTable::from_json("{}").unwrap_or_else(|_| unreachable!("an empty table parses"))
}

/// `tessera repro miso`.
#[derive(Clone, Copy, Debug)]
pub struct MisoRepro;

const REPRO_PARAMS: &[Param] = &[
    Param { name: "seeds", default: DEFAULT_SEEDS, help: "Arrival seeds, a list with ranges (default 1-40, so that the means settle; the MISO paper's simulator used 1-5, whose streams differ from ours)." },
    Param { name: "gpus", default: "8", help: "A100-40GB GPUs (one node)." },
    Param { name: "mean", default: "60", help: "Mean inter-arrival time, seconds." },
    Param { name: "early-mean", default: "30", help: "Mean inter-arrival of the first third of the jobs, seconds." },
    Param { name: "order", default: "shuffled", help: "Arrival order of the trace's jobs: shuffled (a seeded permutation, as the artifact's driver) or index (trace order)." },
    Param { name: "layouts", default: "generated", help: "Layouts MISO and the static search use: generated (placement rules, with 4g+3g) or miso18 (MISO's table)." },
    Param { name: "predictor", default: "emulated", help: "Slice-speed predictor of miso: emulated (the artifact's N(0.016, 0.0032) error) or learned (regression from MPS speeds)." },
    Param { name: "semantics", default: "tessera", help: "tessera (a job at an empty GPU starts whole at once; static is strict FIFO), artifact (both of the next two), mps-every-placement (miso profiles every placement under MPS, even alone on an empty GPU), non-blocking-static (static lets later jobs past one no idle slice fits, as the artifact's exp_static.py)." },
];

/// Published figures (MISO paper; the authors' simulator on this setup, seeds 1–5).
fn published() -> serde_json::Value {
    serde_json::json!({
        "source": "MISO (Li et al., SoCC'22, arXiv 2207.11428) and its authors' simulator on 8 A100s, the 100-job trace, seeds 1-5",
        "paper": { "jct_vs_nopart": -0.49, "jct_vs_best_static": -0.16 },
        "simulator_avg_jct_s": { "miso": 1101.0, "nopart": 2514.0, "static_3_2_2": 1238.0, "miso_oracle": 1042.0 },
        "ratios_to_miso": { "nopart": 2.28, "best_static": [1.09, 1.12], "miso_oracle": 0.947 },
        "migrations_per_job": 4.0,
        "arrivals": "artifact driver (exp_full.py @39b1ee69): a seeded random permutation of the 100 jobs, gaps drawn as np.random.poisson(30) for the first 34 jobs and poisson(60) after"
    })
}

impl Experiment for MisoRepro {
    fn name(&self) -> &'static str {
        "miso"
    }

    fn about(&self) -> &'static str {
        "MISO (SoCC'22): 8 A100s, the 100-job trace, seeds 1-5: nopart, best static, miso, miso-oracle, mps"
    }

    fn params(&self) -> &'static [Param] {
        REPRO_PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let layouts: LayoutSet = args.parse("layouts")?;
        let predictor = args.get("predictor").unwrap_or("emulated");
        let learned = match predictor {
            "emulated" => false,
            "learned" => true,
            other => {
                return Err(ExperimentError::param(
                    "predictor",
                    other,
                    "emulated or learned",
                ))
            }
        };
        let semantics = args.get("semantics").unwrap_or("tessera");
        let (mps_every_placement, static_non_blocking) = match semantics {
            "tessera" => (false, false),
            "artifact" => (true, true),
            "mps-every-placement" => (true, false),
            "non-blocking-static" => (false, true),
            other => {
                return Err(ExperimentError::param(
                    "semantics",
                    other,
                    "tessera, artifact, mps-every-placement or non-blocking-static",
                ))
            }
        };
        let spec = ReproSpec {
            seeds: args.seeds("seeds")?,
            gpus: args.parse("gpus")?,
            mean_s: args.parse("mean")?,
            early_mean_s: args.parse("early-mean")?,
            order: args.parse("order")?,
            layouts,
            learned,
            mps_every_placement,
            static_non_blocking,
        };
        if spec.seeds.is_empty() {
            return Err(ExperimentError::param("seeds", "", "at least one seed"));
        }
        if spec.gpus == 0 || spec.gpus > 64 {
            return Err(ExperimentError::param(
                "gpus",
                &spec.gpus.to_string(),
                "1 to 64",
            ));
        }
        // The trace's 100 arrivals must stay well within the clock's input range: past it
        // they saturated and the run failed as a policy error ("job is not active").
        let max_mean_s = tessera_model::MAX_INPUT_SECS as f64 / 1000.0;
        for (name, v) in [("mean", spec.mean_s), ("early-mean", spec.early_mean_s)] {
            if v > max_mean_s {
                return Err(ExperimentError::param(
                    name,
                    &v.to_string(),
                    &format!("at most {max_mean_s} s, so that the trace's jobs arrive within the clock's range"),
                ));
            }
        }
        if !(spec.mean_s > 0.0 && spec.early_mean_s > 0.0) {
            return Err(ExperimentError::param(
                "mean",
                &spec.mean_s.to_string(),
                "positive",
            ));
        }
        let r = run_repro(&spec, ctx)?;
        Ok(render(&spec, &r))
    }
}

fn render(spec: &ReproSpec, r: &ReproResult) -> ReproOutput {
    let published_ratio = |name: &str| match name {
        "nopart" => "2.28x",
        "miso" => "1.00x",
        "miso-oracle" => "0.95x",
        n if n.starts_with("static") => "1.09-1.12x",
        _ => "",
    };
    let rows: Vec<Vec<String>> = r
        .means
        .iter()
        .map(|m| {
            vec![
                m.policy.clone(),
                format!("{} s", m.avg_jct.show(0)),
                if m.policy == "miso" {
                    "1.00x".into()
                } else {
                    format!("{:.2}x ± {:.2}", m.vs_miso.mean, m.vs_miso.sd)
                },
                published_ratio(&m.policy).to_string(),
                format!("{:.0} s", m.makespan_s),
                format!("{:.0} s", m.avg_queue_s),
                format!("{:.2} ± {:.2}", m.repartitions.mean, m.repartitions.sd),
                format!("{:.2}", m.restarts_per_job),
                m.unfinished.to_string(),
            ]
        })
        .collect();
    let semantics = match (spec.mps_every_placement, spec.static_non_blocking) {
        (false, false) => "tessera",
        (true, true) => "artifact",
        (true, false) => "mps-every-placement",
        (false, true) => "non-blocking-static",
    };
    let mut text = format!(
        "MISO reproduction: {} A100-40GB, MISO's 100-job trace, Poisson arrivals (mean {} s, {} s for the first third, {} order), {} seeds ({}–{}); layouts {:?}; semantics {semantics}\nmean ± standard deviation [min–max] over seeds; ratios are per seed, then averaged\n\n",
        spec.gpus,
        spec.mean_s,
        spec.early_mean_s,
        spec.order,
        spec.seeds.len(),
        spec.seeds.iter().min().copied().unwrap_or(0),
        spec.seeds.iter().max().copied().unwrap_or(0),
        spec.layouts
    );
    text.push_str(&text_table(
        &[
            "policy",
            "avg JCT",
            "vs miso",
            "published",
            "makespan",
            "queue",
            "repart/job",
            "restarts/job",
            "unfinished",
        ],
        &rows,
    ));
    text.push_str(&format!(
        "\nstatic layouts tried: {} (best {}, worst {})\n",
        r.statics.len(),
        r.statics.first().map_or("-", |m| m.policy.as_str()),
        r.statics.last().map_or("-", |m| m.policy.as_str()),
    ));
    text.push_str(&format!(
        "predictor ({}): mean absolute error {:.4} of normalised slice speed; learned regression (leave-one-out): {:.4}\n",
        r.predictor, r.predictor_mae, r.learned_loo_mae
    ));
    text.push_str(
        "published: MISO -49% avg JCT vs NoPart, -16% vs best static (paper); authors' simulator, seeds 1-5: MISO 1,101 s, NoPart 2,514 s (2.28x), static [3,2,2] 1,238 s, best static 1.09-1.12x, oracle 1,042 s (0.95x), about 4 migrations per job\n",
    );
    text.push_str(if spec.mps_every_placement {
        "semantics here: every placement of miso goes through the 30 s MPS phase, even a job alone on an empty GPU (then checkpointed and restored onto its slice); a re-partition checkpoints every job of the GPU, switches it to MPS (5 s reconfiguration when it was partitioned), runs 30 s under MPS, then applies the layout (5 s) and restarts each job (its model's restore time)\n"
    } else {
        "semantics here: a job at an empty GPU starts at once on the whole GPU; a re-partition checkpoints every job of the GPU, switches it to MPS (5 s reconfiguration when it was partitioned), runs 30 s under MPS, then applies the layout (5 s) and restarts each job (its model's restore time)\n"
    });
    text.push_str(if spec.static_non_blocking {
        "static: a job no idle slice fits lets later jobs past (non-blocking, as the artifact's exp_static.py)\n"
    } else {
        "static: strict FIFO (a job no idle slice fits holds the queue)\n"
    });
    // Per seed, each policy's average JCT; and the running mean over seeds with its
    // standard error, which shows whether the seed count is enough.
    let mut seeds = spec.seeds.clone();
    seeds.sort_unstable();
    let per_seed = |name: &str| -> Vec<(f64, f64)> {
        seeds
            .iter()
            .filter_map(|&sd| {
                r.runs
                    .iter()
                    .find(|x| x.policy == name && x.seed == sd)
                    .map(|x| (sd as f64, x.summary.avg_jct_s))
            })
            .collect()
    };
    let names: Vec<String> = r.means.iter().map(|m| m.policy.clone()).collect();
    let by_seed = Figure {
        file_stem: "avg_jct_by_seed".into(),
        title: "MISO repro: average JCT per arrival seed".into(),
        x_label: "seed".into(),
        y_label: "average JCT (s)".into(),
        series: names
            .iter()
            .map(|n| Series {
                label: n.clone(),
                points: per_seed(n),
                spread: None,
            })
            .collect(),
    };
    let running = Figure {
        file_stem: "avg_jct_running_mean".into(),
        title: "MISO repro: mean average JCT over the first n seeds (band: ± standard error)"
            .into(),
        x_label: "seeds".into(),
        y_label: "mean average JCT (s)".into(),
        series: names
            .iter()
            .map(|n| {
                let v: Vec<f64> = per_seed(n).iter().map(|p| p.1).collect();
                let stats: Vec<Spread> = (1..=v.len()).map(|k| Spread::of(&v[..k])).collect();
                Series {
                    label: n.clone(),
                    points: stats
                        .iter()
                        .enumerate()
                        .map(|(i, s)| ((i + 1) as f64, s.mean))
                        .collect(),
                    spread: Some(
                        stats
                            .iter()
                            .map(|s| (s.mean - s.sem(), s.mean + s.sem()))
                            .collect(),
                    ),
                }
            })
            .collect(),
    };
    let summary = serde_json::json!({
        "experiment": "miso",
        "cluster": format!("{} x A100-40GB", spec.gpus),
        "gpus": spec.gpus,
        "trace": "miso-100",
        "seeds": spec.seeds,
        "arrival_order": spec.order.to_string(),
        "layouts": spec.layouts,
        "semantics": semantics,
        "policies": r.runs,
        "means": r.means,
        "statics": r.statics,
        "predictor": { "name": r.predictor, "mae": r.predictor_mae, "learned_loo_mae": r.learned_loo_mae },
        "published": published(),
    });
    ReproOutput {
        text,
        summary,
        figures: vec![by_seed, running],
    }
}

/// `tessera bench miso`.
#[derive(Clone, Copy, Debug)]
pub struct MisoBench;

const BENCH_PARAMS: &[Param] = &[
    Param {
        name: "jobs",
        default: "10000",
        help: "jobs of the synthetic MIG workload",
    },
    Param {
        name: "gpus",
        default: "1024",
        help: "A100-40GB GPUs (8 per node)",
    },
    Param {
        name: "load",
        default: "9000",
        help: "arrival rate, jobs per hour",
    },
];

/// Seven jobs that all fit a 1g slice, from the table (the optimizer's largest case).
fn seven_jobs(table: &SliceTable) -> Vec<SliceSpeeds> {
    table
        .entries()
        .map(|(_, s)| *s)
        .filter(|s| s[1].is_some())
        .take(7)
        .collect()
}

impl Experiment for MisoBench {
    fn name(&self) -> &'static str {
        "miso"
    }

    fn about(&self) -> &'static str {
        "MISO's optimizer on a GPU with 7 jobs (< 5 ms) and 10,000 MIG jobs on 1,024 A100s under miso (< 10 s)"
    }

    fn params(&self) -> &'static [Param] {
        BENCH_PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let jobs: usize = args.parse("jobs")?;
        let gpus: u32 = args.parse("gpus")?;
        let load: f64 = args.parse("load")?;
        let table = miso_table();
        let catalog = GpuCatalog::builtin();
        let geo = catalog
            .resolve("A100-40GB")
            .ok()
            .and_then(|id| catalog.mig_geometry(id))
            .ok_or_else(|| ExperimentError::Other("no A100 MIG geometry".into()))?;
        let cands = Candidates::new(geo, LayoutSet::Generated);
        let mut rows = Vec::new();
        for k in [7usize, 5, 4, 3] {
            let set: Vec<SliceSpeeds> = seven_jobs(&table).into_iter().take(k).collect();
            let reps = 200;
            let started = Instant::now();
            let mut found = 0;
            for _ in 0..reps {
                found += usize::from(
                    std::hint::black_box(optimize(&set, &cands, Objective::MeanSlowdown)).is_some(),
                );
            }
            let per = started.elapsed().as_secs_f64() / reps as f64;
            rows.push(BenchRow {
                case: format!("optimizer, {k} jobs"),
                wall_s: per,
                target_s: 0.005,
                events_per_s: None,
                detail: format!(
                    "{:.1} µs per call; {} candidate layouts; {found}/{reps} feasible",
                    per * 1e6,
                    cands.with(k).len()
                ),
                command: "tessera bench miso".into(),
            });
        }
        let cluster = a100_cluster(gpus.div_ceil(8).max(1), 8)?;
        let workload = workload::synthetic(jobs, load, 1).map_err(ExperimentError::Other)?;
        let policy = Box::new(MisoPolicy::new(miso_config(false, 1)));
        let started = Instant::now();
        let report =
            run_policy(&cluster, &workload, policy).map_err(|source| ExperimentError::Sim {
                context: "miso bench".into(),
                source,
            })?;
        let wall = started.elapsed().as_secs_f64();
        rows.push(BenchRow {
            case: format!("{jobs} jobs on {} A100s, miso", cluster.totals().0),
            wall_s: wall,
            target_s: 10.0,
            events_per_s: Some(report.summary.events as f64 / wall.max(1e-9)),
            detail: format!(
                "{} finished, {} events, {} re-partitions, avg JCT {:.0} s",
                report.summary.finished,
                report.summary.events,
                stat(&report, "repartitions"),
                report.summary.avg_jct_s
            ),
            command: format!("tessera bench miso --jobs {jobs} --gpus {gpus} --load {load}"),
        });
        Ok(bench_output("MISO speed", rows))
    }
}
