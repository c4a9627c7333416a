//! `tessera repro dilu` (part a, packing) and `tessera bench dilu`.

use std::fmt::Write as _;
use std::time::Instant;

use super::instances::{self, PackingWorkload};
use super::packing::{replay, PackingPolicy, PoolSpec, ReplayReport};
use super::profile;
use super::table::DiluModel;
use super::truth::TrainingCurve;
use crate::experiment::{
    bench_output, run_parallel, text_table, BenchRow, Experiment, ExperimentArgs, ExperimentError,
    Figure, Param, ReplayFormat, ReproOutput, RunContext, Series,
};

/// Peak active GPUs for N = 400 in a replay of the artifact's simulator (DESIGN §5.4).
pub const PUBLISHED_PEAK_400: [(&str, usize); 4] = [
    ("exclusive", 386),
    ("infless-l", 347),
    ("infless-r", 272),
    ("dilu", 263),
];

/// The paper's claim on fragmentation.
pub const PUBLISHED_CLAIM: &str = "Dilu (ASPLOS'25): 10-46% less GPU fragmentation; replay of the artifact's packing simulator, N=400 peak active GPUs: exclusive 386, infless-l 347, infless-r 272, dilu 263 (about 30% fewer than exclusive, 23% fewer than infless-l)";

/// `tessera repro dilu`: the packing replay.
#[derive(Clone, Copy, Debug)]
pub struct DiluRepro;

const REPRO_PARAMS: &[Param] = &[
    Param {
        name: "sizes",
        default: "100,200,400,800",
        help: "Shipped packing workloads to replay (instances-N, N in 100, 200, 400, 800)",
    },
    Param {
        name: "trace",
        default: "",
        help: "Replay this instances file instead (the artifact's dict lines or our CSV)",
    },
    Param {
        name: "generate",
        default: "",
        help: "Replay a generated workload of this many instances instead (seeded by --seed)",
    },
    Param {
        name: "seed",
        default: "1",
        help: "Seed of --generate",
    },
    Param {
        name: "policies",
        default: "exclusive,infless-l,infless-r,dilu",
        help: "Packing policies: exclusive, infless-l, infless-r, dilu",
    },
    Param {
        name: "gpu-memory-gb",
        default: "40",
        help: "Memory of every GPU, GB (A100-40GB class)",
    },
    Param {
        name: "gpus-per-node",
        default: "4",
        help: "GPUs per node (training jobs and LLM memory splits stay on one node)",
    },
    Param {
        name: "nodes",
        default: "",
        help: "Nodes in the pool (default: unbounded)",
    },
    Param {
        name: "no-check",
        default: "false",
        help: "Skip the per-GPU invariant checks after every event (faster; `--check false` is the old spelling)",
    },
    Param {
        name: "parts",
        default: "a,b",
        help: "Parts to run: a (packing replay), b (serving beside training)",
    },
    Param {
        name: "serving-seeds",
        default: "1,2,3",
        help: "Part b: arrival seeds (mean and [min-max] over them)",
    },
    Param {
        name: "serving-policies",
        default: "dilu-exclusive,static-shares,dilu-no-vertical,dilu",
        help: "Part b: serving policies (dilu-exclusive is the training reference)",
    },
    Param {
        name: "load-scale",
        default: "1,2,4",
        help: "Part b: multiply every arrival rate by each of these (1 = the paper's load); one table per scale",
    },
    Param {
        name: "serving-memory",
        default: "artifact",
        help: "Part b: device memory of instances and training: artifact (the authors' deployment scripts) or small (our earlier assumption, never binding)",
    },
    Param {
        name: "serving-check",
        default: "false",
        help: "Part b: check the simulator's invariants after every step",
    },
];

/// Parses the policy list.
fn policies(args: &ExperimentArgs) -> Result<Vec<PackingPolicy>, ExperimentError> {
    let names: Vec<String> = args.list("policies")?;
    let mut out = Vec::new();
    for n in &names {
        let p = PackingPolicy::from_name(n).ok_or_else(|| {
            ExperimentError::param(
                "policies",
                n,
                "unknown packing policy (exclusive, infless-l, infless-r, dilu)",
            )
        })?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err(ExperimentError::param("policies", "", "no policy"));
    }
    Ok(out)
}

fn pool_spec(args: &ExperimentArgs) -> Result<PoolSpec, ExperimentError> {
    let mem: f64 = args.parse("gpu-memory-gb")?;
    if !(mem.is_finite() && mem > 0.0 && mem <= 1e6) {
        return Err(ExperimentError::param(
            "gpu-memory-gb",
            &mem.to_string(),
            "must be positive",
        ));
    }
    let per_node: u32 = args.parse("gpus-per-node")?;
    if !(1..=64).contains(&per_node) {
        return Err(ExperimentError::param(
            "gpus-per-node",
            &per_node.to_string(),
            "must be 1..=64",
        ));
    }
    let nodes: Option<u32> = args.parse_opt("nodes")?;
    if nodes == Some(0) {
        return Err(ExperimentError::param("nodes", "0", "must be positive"));
    }
    Ok(PoolSpec {
        gpu_memory_mb: (mem * 1000.0).round() as u32,
        gpus_per_node: per_node,
        max_nodes: nodes,
    })
}

/// The workloads to replay: (label, N or None, workload).
fn workloads(
    args: &ExperimentArgs,
) -> Result<Vec<(String, Option<usize>, PackingWorkload)>, ExperimentError> {
    if let Some(path) = args.get("trace") {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ExperimentError::param("trace", path, &e.to_string()))?;
        let w = instances::parse_any(&text)
            .map_err(|e| ExperimentError::param("trace", path, &e.to_string()))?;
        return Ok(vec![(path.to_string(), None, w)]);
    }
    if let Some(n) = args.parse_opt::<usize>("generate")? {
        if !(1..=1_000_000).contains(&n) {
            return Err(ExperimentError::param(
                "generate",
                &n.to_string(),
                "must be 1..=1000000",
            ));
        }
        let seed: u64 = args.parse("seed")?;
        return Ok(vec![(
            format!("generated-{n} (seed {seed})"),
            None,
            instances::generate(n, seed),
        )]);
    }
    let mut out = Vec::new();
    for n in args.list::<usize>("sizes")? {
        let w = instances::builtin(n).ok_or_else(|| {
            ExperimentError::param("sizes", &n.to_string(), "shipped: 100, 200, 400, 800")
        })?;
        out.push((format!("instances-{n}"), Some(n), w));
    }
    if out.is_empty() {
        return Err(ExperimentError::param("sizes", "", "no workload"));
    }
    Ok(out)
}

/// Runs every (workload, policy) replay; results in workload-major order.
pub fn run_packing(
    loads: &[(String, Option<usize>, PackingWorkload)],
    policies: &[PackingPolicy],
    pool: PoolSpec,
    check: bool,
    ctx: &RunContext<'_>,
) -> Result<Vec<ReplayReport>, ExperimentError> {
    let cases: Vec<(usize, PackingPolicy)> = (0..loads.len())
        .flat_map(|w| policies.iter().map(move |&p| (w, p)))
        .collect();
    let results = run_parallel(
        &cases,
        ctx.threads,
        |&(w, _)| loads[w].2.events.len() as f64,
        |&(w, p)| replay(&loads[w].2, p, pool, check),
        ctx.progress,
    )?;
    results
        .into_iter()
        .map(|r| r.map_err(|e| ExperimentError::Other(e.to_string())))
        .collect()
}

impl Experiment for DiluRepro {
    fn name(&self) -> &'static str {
        "dilu"
    }

    fn about(&self) -> &'static str {
        "Dilu (ASPLOS'25), packing: replay instances-N under exclusive, infless-l, infless-r, dilu; profiling picks"
    }

    fn params(&self) -> &'static [Param] {
        REPRO_PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let parts: Vec<String> = args.list("parts")?;
        for p in &parts {
            if p != "a" && p != "b" {
                return Err(ExperimentError::param("parts", p, "a or b"));
            }
        }
        // Part (a)'s parameters are checked before part (b) runs (it takes seconds).
        let part_a = if parts.iter().any(|p| p == "a") {
            Some((policies(args)?, pool_spec(args)?, workloads(args)?))
        } else {
            None
        };
        let serving = if parts.iter().any(|p| p == "b") {
            Some(super::serve_report::run(args, ctx)?)
        } else {
            None
        };
        let Some((policies, pool, loads)) = part_a else {
            let (text, summary, figures) = serving.unwrap_or_default();
            return Ok(ReproOutput {
                text,
                summary: serde_json::json!({ "experiment": "dilu", "serving": summary }),
                figures,
            });
        };
        let check = !args.flag("no-check")?;
        let reports = run_packing(&loads, &policies, pool, check, ctx)?;

        let mut text = String::new();
        writeln!(
            text,
            "Dilu (ASPLOS'25) packing replay: {} GPUs of {} GB, {} per node, {}.\nFragmentation per active GPU on what is booked (1 - sum requests, 1 - sum memory / capacity), time-weighted.\nMean GPUs two ways: time-weighted over the replay (ours), and one sample after each event (the artifact's average).\n",
            if pool.max_nodes.is_some() { "a bounded pool of" } else { "an unbounded pool of" },
            f64::from(pool.gpu_memory_mb) / 1000.0,
            pool.gpus_per_node,
            pool.max_nodes.map_or("nodes as needed".to_string(), |n| format!("{n} nodes")),
        )?;
        let mut workloads_json = Vec::new();
        let mut figures = Vec::new();
        for (w, (label, n, load)) in loads.iter().enumerate() {
            let rs = &reports[w * policies.len()..(w + 1) * policies.len()];
            writeln!(
                text,
                "{label}: {} instances, {} events",
                load.instances(),
                load.events.len()
            )?;
            let published = |p: &str| -> Option<usize> {
                (*n == Some(400))
                    .then(|| {
                        PUBLISHED_PEAK_400
                            .iter()
                            .find(|(q, _)| *q == p)
                            .map(|x| x.1)
                    })
                    .flatten()
            };
            text.push_str(&packing_table(rs, |p| published(p))?);
            text.push('\n');
            figures.push(Figure {
                file_stem: format!(
                    "active_gpus_{}",
                    n.map_or("trace".to_string(), |n| n.to_string())
                ),
                title: format!("Dilu packing: active GPUs over time ({label})"),
                x_label: "time (min)".into(),
                y_label: "active GPUs".into(),
                series: rs
                    .iter()
                    .map(|r| Series {
                        label: r.policy.to_string(),
                        points: step_points(r),
                        spread: None,
                    })
                    .collect(),
            });
            workloads_json.push(serde_json::json!({
                "workload": label,
                "instances": load.instances(),
                "events": load.events.len(),
                "policies": rs,
            }));
        }
        writeln!(text, "published: {PUBLISHED_CLAIM}")?;

        // The profiling picks on the shipped tables (issue 13 item 4).
        let mut picks = Vec::new();
        let mut rows = Vec::new();
        for m in DiluModel::ALL {
            let table = m
                .table()
                .map_err(|e| ExperimentError::Other(e.to_string()))?;
            match profile::hybrid_growth_search(&table, m.slo_s()) {
                Ok(p) => {
                    rows.push(vec![
                        m.name().to_string(),
                        format!("{:.0}", m.slo_s() * 1e3),
                        format!("{}%", p.share_pct),
                        p.batch.to_string(),
                        format!("{:.1}", p.latency_s * 1e3),
                        p.probes.to_string(),
                        format!("{:?}", p.stop),
                    ]);
                    picks.push(serde_json::json!({
                        "model": m.name(), "slo_s": m.slo_s(), "share_pct": p.share_pct,
                        "batch": p.batch, "latency_s": p.latency_s, "probes": p.probes,
                        "stop": p.stop,
                    }));
                }
                Err(e) => rows.push(vec![m.name().to_string(), e.to_string()]),
            }
        }
        writeln!(
            text,
            "\nHybrid Growth Search on the shipped tables (published: ResNet152 30%/16, GPT2-large 30%/4, LLaMA2-7B 50%/8, BERT-base at 50 ms 10%/4):"
        )?;
        text.push_str(&text_table(
            &[
                "model",
                "SLO ms",
                "share",
                "batch",
                "latency ms",
                "probes",
                "stop",
            ],
            &rows,
        ));

        // The training search on our assumed curves (truth.rs), to show its probe count.
        let mut training = Vec::new();
        let mut rows = Vec::new();
        for m in DiluModel::ALL {
            let curve = TrainingCurve::for_model(m);
            let pick = profile::training_search(|pct| {
                curve.relative(f64::from(pct) / 100.0).unwrap_or(0.0)
            })
            .map_err(|e| ExperimentError::Other(e.to_string()))?;
            rows.push(vec![
                m.name().to_string(),
                format!("{:.2}", curve.knee()),
                format!("{}%", pick.share_pct),
                format!("{:.3}", pick.relative),
                pick.probes.to_string(),
            ]);
            training.push(serde_json::json!({
                "model": m.name(), "knee": curve.knee(), "share_pct": pick.share_pct,
                "relative": pick.relative, "probes": pick.probes,
            }));
        }
        writeln!(
            text,
            "\nTraining binary search (>= 98% of full throughput, 5% steps) on our assumed saturation curves (not measurements):"
        )?;
        text.push_str(&text_table(
            &["model", "knee", "share", "relative", "probes"],
            &rows,
        ));

        let serving_summary = match serving {
            Some((t, j, f)) => {
                text.push('\n');
                text.push_str(&t);
                figures.extend(f);
                j
            }
            None => serde_json::Value::Null,
        };
        let summary = serde_json::json!({
            "experiment": "dilu",
            "part": "packing",
            "serving": serving_summary,
            "published": {
                "claim": PUBLISHED_CLAIM,
                "peak_active_gpus_400": PUBLISHED_PEAK_400
                    .iter()
                    .map(|(p, g)| (p.to_string(), serde_json::json!(g)))
                    .collect::<serde_json::Map<_, _>>(),
                "hgs_picks": {
                    "resnet152": [30, 16], "gpt2-large": [30, 4],
                    "llama2-7b": [50, 8], "bert-base@50ms": [10, 4],
                },
            },
            "pool": pool,
            "workloads": workloads_json,
            "hgs_picks": picks,
            "training_picks_assumed_curves": training,
        });
        Ok(ReproOutput {
            text,
            summary,
            figures,
        })
    }
}

/// The per-policy table of one workload's replays, with the dilu-vs-baseline reductions and
/// the first refusals; `published(policy)` is the published peak, if any.
fn packing_table(
    rs: &[ReplayReport],
    published: impl Fn(&str) -> Option<usize>,
) -> Result<String, ExperimentError> {
    let mut text = String::new();
    let rows: Vec<Vec<String>> = rs
        .iter()
        .map(|r| {
            vec![
                r.policy.to_string(),
                r.peak_active_gpus.to_string(),
                published(r.policy).map_or("-".into(), |p| p.to_string()),
                format!("{:.1}", r.mean_active_gpus),
                format!("{:.1}", r.mean_active_gpus_per_event),
                format!("{:.3}", r.mean_sm_frag),
                format!("{:.3}", r.mean_mem_frag),
                format!("{:.3}", r.sm_frag_at_peak),
                format!("{:.3}", r.mem_frag_at_peak),
                r.split_llm.to_string(),
                r.refused.len().to_string(),
            ]
        })
        .collect();
    text.push_str(&text_table(
        &[
            "policy",
            "peak GPUs",
            "published",
            "mean GPUs (time)",
            "mean GPUs (per event)",
            "SM frag",
            "mem frag",
            "SM frag@peak",
            "mem frag@peak",
            "LLM splits",
            "refused",
        ],
        &rows,
    ));
    let peak = |p: PackingPolicy| {
        rs.iter()
            .find(|r| r.policy == p.name())
            .map(|r| r.peak_active_gpus as f64)
    };
    if let Some(d) = peak(PackingPolicy::Dilu) {
        for base in [PackingPolicy::Exclusive, PackingPolicy::InflessL] {
            if let Some(b) = peak(base) {
                if b > 0.0 {
                    writeln!(
                        text,
                        "dilu vs {}: {:.1}% fewer peak GPUs",
                        base.name(),
                        100.0 * (1.0 - d / b)
                    )?;
                }
            }
        }
    }
    for r in rs {
        for refused in r.refused.iter().take(3) {
            writeln!(
                text,
                "{}: {} unschedulable: {}",
                r.policy, refused.name, refused.reason
            )?;
        }
    }
    Ok(text)
}

/// `tessera simulate --trace-format dilu-instances`: the packing replay of one instances
/// file (the artifact's dict lines or our CSV) under the named packing policies (empty =
/// all four) on an unbounded pool of 40 GB GPUs, 4 per node, invariants checked.
pub const INSTANCES_FORMAT: ReplayFormat = ReplayFormat {
    name: "dilu-instances",
    about: "Dilu packing workload (instances-N.txt dict lines or its CSV): start/stop of instances with SM request/limit and memory; replayed on an unbounded A100-40GB pool",
    policies: &["exclusive", "infless-l", "infless-r", "dilu"],
    run: replay_instances,
};

fn replay_instances(
    text: &str,
    names: &[String],
    ctx: &RunContext<'_>,
) -> Result<ReproOutput, ExperimentError> {
    let load = instances::parse_any(text).map_err(|e| ExperimentError::Other(e.to_string()))?;
    let mut policies = Vec::new();
    for n in names {
        let p = PackingPolicy::from_name(n).ok_or_else(|| {
            ExperimentError::Other(format!(
                "policy {n:?} does not replay packing workloads (known: {})",
                INSTANCES_FORMAT.policies.join(", ")
            ))
        })?;
        if !policies.contains(&p) {
            policies.push(p);
        }
    }
    if policies.is_empty() {
        policies = PackingPolicy::ALL.to_vec();
    }
    let pool = PoolSpec::default();
    let loads = vec![("trace".to_string(), None, load)];
    let rs = run_packing(&loads, &policies, pool, true, ctx)?;
    let mut text = format!(
        "{} instances, {} events, unbounded pool of 40 GB GPUs, 4 per node\n",
        loads[0].2.instances(),
        loads[0].2.events.len()
    );
    text.push_str(&packing_table(&rs, |_| None)?);
    let summary = serde_json::json!({
        "trace_format": INSTANCES_FORMAT.name,
        "instances": loads[0].2.instances(),
        "events": loads[0].2.events.len(),
        "pool": pool,
        "policies": rs,
    });
    let figures = vec![Figure {
        file_stem: "active_gpus".into(),
        title: "Packing replay: active GPUs over time".into(),
        x_label: "time (min)".into(),
        y_label: "active GPUs".into(),
        series: rs
            .iter()
            .map(|r| Series {
                label: r.policy.to_string(),
                points: step_points(r),
                spread: None,
            })
            .collect(),
    }];
    Ok(ReproOutput {
        text,
        summary,
        figures,
    })
}

/// Active GPUs as a step line in minutes, thinned to at most ~2,000 points.
fn step_points(r: &ReplayReport) -> Vec<(f64, f64)> {
    let stride = r.samples.len().div_ceil(2000).max(1);
    let mut pts: Vec<(f64, f64)> = r
        .samples
        .iter()
        .step_by(stride)
        .map(|s| (s.t_s / 60.0, s.active_gpus as f64))
        .collect();
    if let Some(last) = r.samples.last() {
        if pts.last().map(|p| p.0) != Some(last.t_s / 60.0) {
            pts.push((last.t_s / 60.0, last.active_gpus as f64));
        }
    }
    pts
}

/// `tessera bench dilu`: the N = 3200 packing replay.
#[derive(Clone, Copy, Debug)]
pub struct DiluBench;

const BENCH_PARAMS: &[Param] = &[
    Param {
        name: "instances",
        default: "3200",
        help: "Instances in the generated packing workload",
    },
    Param {
        name: "seed",
        default: "1",
        help: "Seed of the generated workload",
    },
];

impl Experiment for DiluBench {
    fn name(&self) -> &'static str {
        "dilu"
    }

    fn about(&self) -> &'static str {
        "Dilu packing replay of a generated N=3200 workload under each policy (< 1 s each)"
    }

    fn params(&self) -> &'static [Param] {
        BENCH_PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let n: usize = args.parse("instances")?;
        if !(1..=1_000_000).contains(&n) {
            return Err(ExperimentError::param(
                "instances",
                &n.to_string(),
                "must be 1..=1000000",
            ));
        }
        let seed: u64 = args.parse("seed")?;
        let load = instances::generate(n, seed);
        let mut rows = Vec::new();
        // Serial on purpose: wall time is the figure.
        for policy in PackingPolicy::ALL {
            let start = Instant::now();
            let r = replay(&load, policy, PoolSpec::default(), false)
                .map_err(|e| ExperimentError::Other(e.to_string()))?;
            let wall_s = start.elapsed().as_secs_f64();
            rows.push(BenchRow {
                case: format!("packing N={n} {}", policy.name()),
                wall_s,
                target_s: 1.0,
                events_per_s: Some(load.events.len() as f64 / wall_s.max(1e-9)),
                detail: format!(
                    "{} events, peak {} GPUs, mean {:.1}",
                    load.events.len(),
                    r.peak_active_gpus,
                    r.mean_active_gpus
                ),
                command: format!("tessera bench dilu --instances {n} --seed {seed}"),
            });
        }
        Ok(bench_output(
            "Dilu packing replay speed (generated workload, unbounded A100-40GB pool)",
            rows,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repro_rejects_bad_parameters() {
        let ctx = RunContext::quiet(1);
        for (name, value) in [
            ("policies", "exclusive,fastest"),
            ("sizes", "300"),
            ("gpus-per-node", "0"),
            ("gpu-memory-gb", "-40"),
            ("nodes", "0"),
            ("generate", "0"),
            ("trace", "/nonexistent/instances.txt"),
        ] {
            let args = ExperimentArgs::new(REPRO_PARAMS, [(name, value)]).unwrap();
            let e = DiluRepro.run(&args, &ctx).err();
            assert!(
                matches!(e, Some(ExperimentError::Param { .. })),
                "{name} {value}: {e:?}"
            );
        }
        for (name, value) in [
            ("load-scale", "0"),
            ("load-scale", "-2"),
            ("serving-memory", "huge"),
            ("serving-seeds", ""),
        ] {
            let args = ExperimentArgs::new(REPRO_PARAMS, [("parts", "b"), (name, value)]).unwrap();
            let e = DiluRepro.run(&args, &ctx).err();
            assert!(
                matches!(e, Some(ExperimentError::Param { .. })),
                "{name} {value}: {e:?}"
            );
        }
    }
}
