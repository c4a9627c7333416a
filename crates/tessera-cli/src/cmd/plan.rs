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
    /// The devices: a `kind: PlanCluster` file (YAML or JSON; see docs/plan-format.md), or
    /// `builtin:hap-K` for HAP's 2K V100 + 6K P100 cluster with K GPUs per machine.
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
    if let Some(name) = source.strip_prefix("builtin:") {
        let k = name
            .strip_prefix("hap-")
            .and_then(|k| k.parse::<usize>().ok())
            .filter(|k| (1..=64).contains(k));
        return match k {
            Some(k) => Ok(builtin::mixed_cluster(k, 2, 6)),
            None => bail!("unknown built-in plan cluster {source:?} (known: builtin:hap-1, builtin:hap-2, builtin:hap-4, builtin:hap-8)"),
        };
    }
    let text =
        std::fs::read_to_string(source).with_context(|| format!("reading cluster {source}"))?;
    let spec =
        PlanClusterSpec::from_text(&text).with_context(|| format!("parsing cluster {source}"))?;
    let catalog = crate::inputs::load_catalog(catalog_path)?;
    spec.validate(&catalog)
        .with_context(|| format!("in cluster {source}"))
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
        writeln!(out, "\nsynthesis and baselines took {elapsed:.3} s")?;
    }
    Ok(())
}
