//! `tessera plan`: a sharding plan for one training step on mixed GPUs (HAP, DESIGN §5.5).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use tessera_plan::{builtin, synth, Devices, GraphSpec, PlanClusterSpec};

/// Options of `tessera plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The model: a built-in name (vgg19, vit, bert-base, bert-moe, gpt-LAYERSxWIDTH such as
    /// gpt-48x1024) sized by --batch-per-gpu, or a graph file (JSON or YAML; see
    /// docs/plan-format.md).
    #[arg(long)]
    pub model: String,
    /// The devices: the simulator's `kind: Cluster` file or built-in cluster (one machine per
    /// node, default speeds and links), a `kind: PlanCluster` file for calibrated speeds and
    /// links (YAML or JSON; see docs/plan-format.md), or `builtin:hap-K` for HAP's 2K V100 +
    /// 6K P100 cluster with K GPUs per machine. Speeds not given are the catalog's FP32 peak
    /// times 0.25 (the listing's TFLOP/s).
    #[arg(long)]
    pub cluster: String,
    /// Samples per GPU of a built-in model (the global batch is this times the GPUs).
    #[arg(long, default_value_t = builtin::BATCH_PER_DEVICE)]
    pub batch_per_gpu: u64,
    /// GPU catalog (YAML, `kind: GpuCatalog`, the shape of the built-in one) that the cluster
    /// file's GPU names and default speeds come from; default: the built-in catalog.
    #[arg(long, value_name = "FILE")]
    pub gpu_catalog: Option<PathBuf>,
    /// Print the plan as JSON instead of the per-rank listing.
    #[arg(long)]
    pub json: bool,
    /// Most states each search may create (bounds time and memory on wide graphs). A full
    /// search that reaches it keeps the best plan found so far (data parallelism at worst)
    /// and says so; a data-parallel search that reaches it is an error.
    #[arg(long, default_value_t = tessera_plan::MAX_SEARCH_STATES, value_name = "N")]
    pub max_search_states: u64,
}

fn load_cluster(source: &str, catalog_path: Option<&Path>) -> Result<Devices> {
    let catalog = crate::inputs::load_catalog(catalog_path)?;
    if let Some(name) = source.strip_prefix("builtin:") {
        let k = name
            .strip_prefix("hap-")
            .and_then(|k| k.parse::<usize>().ok())
            .filter(|k| (1..=64).contains(k));
        if let Some(k) = k {
            return Ok(builtin::mixed_cluster(k, 2, 6));
        }
        if crate::builtin::cluster_yaml(name).is_none() {
            bail!(
                "unknown built-in cluster {:?} (known: builtin:hap-1, builtin:hap-2, \
                 builtin:hap-4, builtin:hap-8, and the simulator's: {})",
                tessera_trace::printable(name),
                crate::builtin::cluster_names().join(", ")
            );
        }
        let cluster = crate::inputs::load_cluster(source, &catalog)?;
        return devices_of(&cluster, &catalog).with_context(|| format!("in cluster {source}"));
    }
    let text =
        std::fs::read_to_string(source).with_context(|| format!("reading cluster {source}"))?;
    // The simulator's cluster file serves here too: one file for both commands.
    if document_kind(&text).as_deref() == Some("Cluster") {
        let cluster = crate::inputs::load_cluster(source, &catalog)?;
        return devices_of(&cluster, &catalog).with_context(|| format!("in cluster {source}"));
    }
    let spec =
        PlanClusterSpec::from_text(&text).with_context(|| format!("parsing cluster {source}"))?;
    spec.validate(&catalog)
        .with_context(|| format!("in cluster {source}"))
}

/// What the listing's TFLOP/s are (issue 41: an A10 at 7.80 and an A100-40GB at 4.88 puzzled
/// readers who know the datasheets).
fn speed_note() -> String {
    format!(
        "TFLOP/s: each GPU's attained speed for training: its FP32 peak from the GPU catalog \
         times {} (the fraction dense training attains), unless a kind: PlanCluster file gives \
         `flops`; plans depend on the ratios between GPUs, not on the absolute figures.",
        tessera_perf::roofline::DEFAULT_ATTAINED_FRACTION
    )
}

/// The `kind:` of a YAML or JSON document, if it has one.
fn document_kind(text: &str) -> Option<String> {
    let v: serde_norway::Value = serde_norway::from_str(text).ok()?;
    v.get("kind")?.as_str().map(str::to_string)
}

/// The plan's devices of a simulator cluster: each node group a group of machines, speeds
/// and links the catalog's defaults (as a `kind: PlanCluster` file without `flops` or links).
fn devices_of(
    cluster: &tessera_model::Cluster,
    catalog: &tessera_model::GpuCatalog,
) -> Result<Devices> {
    let spec = PlanClusterSpec {
        api_version: "tessera/v1".into(),
        kind: "PlanCluster".into(),
        spec: tessera_plan::cluster::PlanClusterBody {
            machines: cluster
                .groups
                .iter()
                .filter(|g| g.count > 0 && g.gpus_per_node > 0)
                .map(|g| tessera_plan::cluster::MachineSpec {
                    gpu: cluster.catalog.get(g.gpu).name.clone(),
                    count: g.count as usize,
                    gpus_per_machine: g.gpus_per_node as usize,
                    flops: None,
                    memory: None, // the catalog's
                })
                .collect(),
            intra_node: Default::default(),
            inter_node: Default::default(),
        },
    };
    Ok(spec.validate(catalog)?)
}

pub fn run(args: &PlanArgs) -> Result<()> {
    let devices = load_cluster(&args.cluster, args.gpu_catalog.as_deref())?;
    let spec = if Path::new(&args.model).is_file() {
        let text = std::fs::read_to_string(&args.model)
            .with_context(|| format!("reading graph {}", args.model))?;
        GraphSpec::from_text(&text).with_context(|| format!("parsing graph {}", args.model))?
    } else {
        builtin::by_name_with_batch(&args.model, devices.len(), args.batch_per_gpu)
            .with_context(|| format!("{:?} is neither a file nor a built-in model", args.model))?
    };
    let graph = spec
        .validate()
        .with_context(|| format!("in graph {}", args.model))?;
    let start = Instant::now();
    let plan = synth::plan_within(&graph, &devices, args.max_search_states)?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut out = crate::output::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&plan)?)?;
    } else {
        write!(
            out,
            "{}",
            crate::output::printable_lines(&synth::listing(&plan))
        )?;
        writeln!(out, "\n{}", speed_note())?;
        writeln!(out, "synthesis and baselines took {elapsed:.3} s")?;
    }
    Ok(())
}
