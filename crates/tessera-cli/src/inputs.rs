//! Loading clusters and traces named on the command line, with errors that say where.

use std::path::Path;

use anyhow::{bail, Context, Result};
use tessera_model::{Cluster, GpuCatalog};
use tessera_trace::{LoadedTrace, ReadOptions, TraceFormat};

use crate::builtin;

/// The built-in GPU catalog, or the one in `path`.
pub fn load_catalog(path: Option<&Path>) -> Result<GpuCatalog> {
    let Some(path) = path else {
        return Ok(GpuCatalog::builtin());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading GPU catalog {}", path.display()))?;
    GpuCatalog::from_yaml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Reads `builtin:NAME` or a YAML file.
pub fn load_cluster(source: &str, catalog: &GpuCatalog) -> Result<Cluster> {
    if let Some(name) = source.strip_prefix("builtin:") {
        let Some(yaml) = builtin::cluster_yaml(name) else {
            let known = builtin::cluster_names();
            let hint = tessera_mechanisms::did_you_mean(name, known.iter().copied())
                .map(|k| format!("; did you mean {k:?}?"))
                .unwrap_or_default();
            bail!(
                "unknown built-in cluster {name:?}{hint} (known: {})",
                known.join(", ")
            );
        };
        return Cluster::from_yaml(&yaml, catalog)
            .with_context(|| format!("built-in cluster {name}"));
    }
    let text =
        std::fs::read_to_string(source).with_context(|| format!("reading cluster {source}"))?;
    // The error names the line (when known) and the field: `FILE: line 9: field spec...`.
    Cluster::from_yaml(&text, catalog).map_err(|e| anyhow::anyhow!("{source}: {e}"))
}

/// Parses `--trace-format`: `auto` is `None`.
pub fn parse_format(name: &str) -> Result<Option<TraceFormat>> {
    if name.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    name.parse::<TraceFormat>().map(Some).map_err(|_| {
        let known: Vec<String> = TraceFormat::ALL.iter().map(|f| f.to_string()).collect();
        anyhow::anyhow!(
            "unknown trace format {name:?} (known: auto, {})",
            known.join(", ")
        )
    })
}

/// Reads `builtin:NAME` (generated with `seed`) or a trace file.
pub fn load_trace(
    source: &str,
    format: Option<TraceFormat>,
    catalog: &GpuCatalog,
    skip_invalid: bool,
    seed: u64,
) -> Result<LoadedTrace> {
    if let Some(name) = source.strip_prefix("builtin:") {
        let Some(workload) = tessera_trace::builtin_trace(name, seed) else {
            let known: Vec<_> = tessera_trace::BUILTIN_TRACES
                .iter()
                .map(|(n, _)| *n)
                .collect();
            bail!(
                "unknown built-in trace {name:?} (known: {})",
                known.join(", ")
            );
        };
        let lines = (1..=workload.len() as u64).collect();
        return Ok(LoadedTrace {
            format: TraceFormat::Tessera,
            detected: false,
            workload,
            lines,
            skipped: 0,
            dropped: 0,
        });
    }
    let opts = ReadOptions { skip_invalid };
    Ok(tessera_trace::read_trace(
        Path::new(source),
        format,
        catalog,
        &opts,
    )?)
}

/// How to name a trace's format to the user: built-in workloads are generated, not parsed.
pub fn format_label(source: &str, trace: &LoadedTrace) -> String {
    if source.starts_with("builtin:") {
        "built-in".to_string()
    } else {
        trace.format.to_string()
    }
}

/// Fails on the first job that can never fit the cluster, naming the trace line, unless the
/// user asked for such jobs to be reported as rejected.
pub fn check_fit(
    source: &str,
    trace: &LoadedTrace,
    cluster: &Cluster,
    reject_unfit: bool,
) -> Result<usize> {
    let mut unfit = 0;
    for (job, line) in trace.workload.jobs().iter().zip(&trace.lines) {
        let max = cluster.max_gpus_for(&job.gpu_types);
        if job.gpus as u64 > max {
            if !reject_unfit {
                bail!(
                    "{source}:{line}: field gpus: job {:?} asks for {} GPUs but the largest eligible node group has {max} (use --reject-unfit to report such jobs as rejected)",
                    job.name,
                    job.gpus
                );
            }
            unfit += 1;
        }
    }
    Ok(unfit)
}
