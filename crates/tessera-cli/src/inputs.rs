//! Loading clusters and traces named on the command line, with errors that say where.

use std::path::Path;

use anyhow::{bail, Context, Result};
use tessera_model::{Cluster, Dimension, GpuCatalog};
use tessera_trace::{LoadedTrace, ReadOptions, TraceFormat};

use crate::builtin;
use tessera_trace::printable;

/// `; did you mean "x"?` when a known name is close to `name`, else nothing.
fn hint(name: &str, known: &[&str]) -> String {
    tessera_mechanisms::did_you_mean(name, known.iter().copied())
        .map(|k| format!("; did you mean {k:?}?"))
        .unwrap_or_default()
}

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
                "unknown built-in cluster {:?}{hint} (known: {})",
                printable(name),
                known.join(", ")
            );
        };
        return Cluster::from_yaml(&yaml, catalog)
            .with_context(|| format!("built-in cluster {name}"));
    }
    let text =
        std::fs::read_to_string(source).with_context(|| format!("reading cluster {source}"))?;
    if tessera_trace::looks_like_pai_machine_spec(&text) {
        let pai = tessera_trace::read_pai_machine_spec(&text, source)?;
        eprintln!(
            "{source}: read as an Alibaba PAI 2020 machine spec: {} GPU machines in {} groups; \
             left out {} CPU-only and {} MISC machines (GPU model not published)",
            pai.machines,
            pai.spec.spec.node_groups.len(),
            pai.cpu_only,
            pai.misc
        );
        return Cluster::from_spec(&pai.spec, catalog)
            .map_err(|e| anyhow::anyhow!("{source}: {e}"));
    }
    if tessera_trace::looks_like_alibaba_2023_node_list(&text) {
        let ali = tessera_trace::read_alibaba_2023_node_list(&text, source)?;
        eprintln!(
            "{source}: read as an Alibaba GPU 2023 node list: {} GPU nodes in {} groups; \
             left out {} CPU-only and {} G2/G3 nodes (GPU model not disclosed)",
            ali.nodes,
            ali.spec.spec.node_groups.len(),
            ali.cpu_only,
            ali.undisclosed
        );
        return Cluster::from_spec(&ali.spec, catalog)
            .map_err(|e| anyhow::anyhow!("{source}: {e}"));
    }
    // The error names the line (when known) and the field: `FILE: line 9: field spec...`.
    Cluster::from_yaml(&text, catalog).map_err(|e| anyhow::anyhow!("{source}: {e}"))
}

/// Parses `--trace-format`: `auto` is `None`.
pub fn parse_format(name: &str) -> Result<Option<TraceFormat>> {
    if name.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    name.parse::<TraceFormat>().map(Some).map_err(|_| {
        let known: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.name()).collect();
        anyhow::anyhow!(
            "unknown trace format {:?}{} (known: auto, {})",
            printable(name),
            hint(name, &known),
            known.join(", ")
        )
    })
}

/// Reads `builtin:NAME` (generated with `seed`) or a trace file, and checks its services'
/// bounds (rates, burstiness, requests in all) before anything runs.
pub fn load_trace(
    source: &str,
    format: Option<TraceFormat>,
    catalog: &GpuCatalog,
    skip_invalid: bool,
    seed: u64,
) -> Result<LoadedTrace> {
    let trace = read_trace_or_builtin(source, format, catalog, skip_invalid, seed)?;
    trace
        .workload
        .check_services()
        .map_err(|e| anyhow::anyhow!("{}: {e}", printable(source)))?;
    Ok(trace)
}

fn read_trace_or_builtin(
    source: &str,
    format: Option<TraceFormat>,
    catalog: &GpuCatalog,
    skip_invalid: bool,
    seed: u64,
) -> Result<LoadedTrace> {
    if let Some(name) = source.strip_prefix("builtin:") {
        let registered = tessera_mechanisms::workloads()
            .find(|w| w.name == name)
            .map(|w| (w.generate)(seed))
            .transpose()
            .map_err(|e| anyhow::anyhow!("built-in trace {name}: {e}"))?;
        let Some(workload) = registered.or_else(|| tessera_trace::builtin_trace(name, seed)) else {
            let known: Vec<_> = tessera_trace::BUILTIN_TRACES
                .iter()
                .map(|(n, _)| *n)
                .chain(tessera_mechanisms::workloads().map(|w| w.name))
                .collect();
            bail!(
                "unknown built-in trace {:?}{} (known: {})",
                printable(name),
                hint(name, &known),
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
            skipped_examples: Vec::new(),
            dropped: 0,
        });
    }
    if is_workload_spec(source) {
        let text = std::fs::read_to_string(source).with_context(|| format!("reading {source}"))?;
        let (workload, lines) = tessera_trace::parse_workload_spec_with_lines(&text, catalog)
            .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
        return Ok(LoadedTrace {
            format: TraceFormat::Tessera,
            detected: false,
            workload,
            lines,
            skipped: 0,
            skipped_examples: Vec::new(),
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

/// Tells the user what the reader skipped and dropped, naming the first skipped rows.
pub fn report_skips(source: &str, trace: &LoadedTrace) {
    if trace.skipped > 0 {
        eprintln!("{source}: skipped {} malformed rows, first:", trace.skipped);
        for e in &trace.skipped_examples {
            eprintln!("  {}", printable(&e.to_string()));
        }
        if trace.skipped > trace.skipped_examples.len() {
            eprintln!(
                "  ... and {} more",
                trace.skipped - trace.skipped_examples.len()
            );
        }
    }
    if trace.dropped > 0 {
        eprintln!(
            "{source}: dropped {} jobs the trace marks as not replayable (unfinished, CPU-only, or no run time)",
            trace.dropped
        );
    }
}

/// A `kind: Workload` spec (with services): a `.yaml`/`.yml` file, or a `.json` file holding
/// one object with a `kind` (Philly's JSON traces are lists).
pub fn is_workload_spec(source: &str) -> bool {
    use std::io::Read;
    let lower = source.to_ascii_lowercase();
    if source.starts_with("builtin:") {
        return false;
    }
    if lower.ends_with(".yaml") || lower.ends_with(".yml") {
        return true;
    }
    if !lower.ends_with(".json") {
        return false;
    }
    let mut head = [0u8; 4096];
    let n = std::fs::File::open(source)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&head[..n]);
    text.trim_start().starts_with('{') && text.contains("\"kind\"")
}

/// How to name a trace's format to the user: built-in workloads are generated, not parsed.
pub fn format_label(source: &str, trace: &LoadedTrace) -> String {
    if is_workload_spec(source) {
        "workload spec".to_string()
    } else if source.starts_with("builtin:") {
        "built-in".to_string()
    } else {
        trace.format.to_string()
    }
}

/// Fails on the first job that can never fit the cluster (on any dimension: GPU type, GPU
/// count, CPU, memory), naming the trace line and the dimension, unless the user asked for
/// such jobs to be reported as rejected; then returns how many there are.
pub fn check_fit(
    source: &str,
    trace: &LoadedTrace,
    cluster: &Cluster,
    reject_unfit: bool,
) -> Result<usize> {
    let mut unfit = 0;
    for (job, line) in trace.workload.jobs().iter().zip(&trace.lines) {
        if let Err(e) = cluster.can_ever_fit(job) {
            if !reject_unfit {
                let field = match e.reason.dimension() {
                    Dimension::Gpus => "gpus",
                    Dimension::GpuType => "gpu_type",
                    Dimension::Cpu => "cpu",
                    Dimension::Memory => "memory",
                    _ => "resources",
                };
                bail!(
                    "{source}:{line}: field {field}: {e} (use --reject-unfit to report such jobs as rejected)"
                );
            }
            unfit += 1;
        }
    }
    Ok(unfit)
}
