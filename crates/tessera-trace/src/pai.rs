//! Alibaba PAI machine specs (`cluster-trace-gpu-v2020`, `pai_machine_spec.csv`; Weng et al.,
//! NSDI'22) as a cluster: one row per machine, `machine,gpu_type,cap_cpu,cap_mem,cap_gpu`
//! (no header in the published file; a header row with these names is accepted), with
//! `cap_cpu` in cores and `cap_mem` in GB.
//!
//! Machines of the same shape become one node group, in order of first appearance (so the
//! result does not depend on hashing). GPU types map to catalog models: `P100`, `T4`,
//! `V100` (16 GB) and `V100M32` (32 GB). CPU-only machines (`CPU`, or no GPUs) and `MISC`
//! machines (GPU model not published) cannot be modelled and are counted, not kept.

use tessera_model::cluster::{ClusterBody, Metadata, NodeGroupSpec};
use tessera_model::{Bytes, ClusterSpec, MilliCpu};

use crate::error::{TraceError, TraceErrorKind as K};
use crate::fields::parse_count;

/// Column names of the machine spec, in file order.
pub(crate) const COLUMNS: [&str; 5] = ["machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"];

/// A machine spec read as a cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct PaiCluster {
    /// The cluster spec (validate it with `Cluster::from_spec`).
    pub spec: ClusterSpec,
    /// GPU machines kept.
    pub machines: usize,
    /// CPU-only machines left out.
    pub cpu_only: usize,
    /// `MISC` machines left out (their GPU model is not published).
    pub misc: usize,
}

/// Whether `text` looks like a PAI machine spec: its first line has five fields, and the
/// second is a PAI GPU type (or the header names the columns).
pub fn looks_like_pai_machine_spec(text: &str) -> bool {
    let Some(first) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return false;
    };
    let fields: Vec<&str> = first.split(',').map(str::trim).collect();
    fields.len() == COLUMNS.len()
        && (fields
            .iter()
            .zip(COLUMNS)
            .all(|(f, c)| f.eq_ignore_ascii_case(c))
            || ["CPU", "P100", "T4", "MISC", "V100", "V100M32"].contains(&fields[1]))
}

fn model_for(gpu_type: &str) -> Option<&'static str> {
    match gpu_type {
        "P100" => Some("P100"),
        "T4" => Some("T4"),
        "V100" => Some("V100-16GB"),
        "V100M32" => Some("V100-32GB"),
        _ => None,
    }
}

/// Reads a machine spec; `source` names it in errors (`FILE:LINE: field F: reason`).
pub fn read_pai_machine_spec(text: &str, source: &str) -> Result<PaiCluster, TraceError> {
    let mut groups: Vec<NodeGroupSpec> = Vec::new();
    let (mut machines, mut cpu_only, mut misc) = (0, 0, 0);
    for (i, raw) in text.lines().enumerate() {
        let line = i as u64 + 1;
        let row = raw.trim().trim_start_matches('\u{feff}');
        if row.is_empty() {
            continue;
        }
        let fields: Vec<&str> = row.split(',').map(str::trim).collect();
        if line == 1
            && fields
                .first()
                .is_some_and(|f| f.eq_ignore_ascii_case("machine"))
        {
            continue;
        }
        let err = |field: &str, kind: K| TraceError::at(source, line, Some(field), kind);
        if fields.len() != COLUMNS.len() {
            return Err(TraceError::at(
                source,
                line,
                None,
                K::Invalid(format!(
                    "expected {} fields ({}), got {}",
                    COLUMNS.len(),
                    COLUMNS.join(","),
                    fields.len()
                )),
            ));
        }
        if fields[0].is_empty() {
            return Err(err("machine", K::EmptyValue));
        }
        let gpu_type = fields[1];
        let cpu = parse_count(fields[2]).map_err(|k| err("cap_cpu", k))?;
        let mem_gb = parse_count(fields[3]).map_err(|k| err("cap_mem", k))?;
        let gpus = parse_count(fields[4]).map_err(|k| err("cap_gpu", k))?;
        if gpu_type == "CPU" || gpus == 0 {
            cpu_only += 1;
            continue;
        }
        if gpu_type == "MISC" {
            misc += 1;
            continue;
        }
        let Some(model) = model_for(gpu_type) else {
            return Err(err(
                "gpu_type",
                K::Invalid(format!(
                    "unknown PAI GPU type {:?} (known: CPU, MISC, P100, T4, V100, V100M32)",
                    crate::printable(gpu_type)
                )),
            ));
        };
        if cpu == 0 {
            return Err(err("cap_cpu", K::NotPositive(fields[2].into())));
        }
        if mem_gb == 0 {
            return Err(err("cap_mem", K::NotPositive(fields[3].into())));
        }
        let too_big = |f: &str, v: &str| err(f, K::OutOfRange(v.into()));
        let gpus = u32::try_from(gpus)
            .ok()
            .filter(|g| *g <= 64)
            .ok_or_else(|| too_big("cap_gpu", fields[4]))?;
        let cpus = cpu
            .checked_mul(1000)
            .map(MilliCpu)
            .ok_or_else(|| too_big("cap_cpu", fields[2]))?;
        let memory = mem_gb
            .checked_mul(1_000_000_000)
            .map(Bytes)
            .ok_or_else(|| too_big("cap_mem", fields[3]))?;
        machines += 1;
        let same = |g: &&mut NodeGroupSpec| {
            g.gpu == model && g.gpus_per_node == gpus && g.cpus == cpus && g.memory == memory
        };
        if let Some(g) = groups.iter_mut().find(|g| same(g)) {
            g.count += 1;
        } else {
            groups.push(NodeGroupSpec {
                name: format!(
                    "{}-{gpus}g-{cpu}c-{mem_gb}gb",
                    gpu_type.to_ascii_lowercase()
                ),
                count: 1,
                gpu: model.to_string(),
                gpus_per_node: gpus,
                cpus,
                memory,
                rack: None,
            });
        }
    }
    if groups.is_empty() {
        return Err(TraceError::whole(
            source,
            K::Empty("no GPU machine of a known type"),
        ));
    }
    Ok(PaiCluster {
        spec: ClusterSpec {
            api_version: "tessera/v1".into(),
            kind: "Cluster".into(),
            metadata: Some(Metadata {
                name: Some("pai-2020".into()),
            }),
            spec: ClusterBody {
                node_groups: groups,
            },
        },
        machines,
        cpu_only,
        misc,
    })
}
