//! Alibaba GPU 2023 node lists (`cluster-trace-gpu-v2023`, `openb_node_list_gpu_node.csv` and
//! `openb_node_list_all_node.csv`; Weng et al., USENIX ATC'23) as a cluster: a header
//! `sn,cpu_milli,memory_mib,gpu,model`, one row per node, CPU in millicores and memory in MiB.
//!
//! Nodes of the same shape become one node group, in order of first appearance (so the result
//! does not depend on hashing). GPU models map to catalog models: `P100`, `T4`, `A10`,
//! `V100M16` (V100 16 GB) and `V100M32` (V100 32 GB). CPU-only nodes (`gpu` 0) and nodes of
//! the models the trace does not disclose (`G2`, `G3`) cannot be modelled: they are counted,
//! not kept.

use tessera_model::cluster::{ClusterBody, Metadata, NodeGroupSpec};
use tessera_model::{Bytes, ClusterSpec, MilliCpu};

use crate::error::{TraceError, TraceErrorKind as K};
use crate::fields::parse_count;

/// Column names of the node list, in file order.
const COLUMNS: [&str; 5] = ["sn", "cpu_milli", "memory_mib", "gpu", "model"];

/// Models the trace names without saying what they are.
const UNDISCLOSED: [&str; 2] = ["G2", "G3"];

/// A node list read as a cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Alibaba2023Cluster {
    /// The cluster spec (validate it with `Cluster::from_spec`).
    pub spec: ClusterSpec,
    /// GPU nodes kept.
    pub nodes: usize,
    /// CPU-only nodes left out.
    pub cpu_only: usize,
    /// Nodes of an undisclosed GPU model (`G2`, `G3`) left out.
    pub undisclosed: usize,
}

/// Whether `text` starts with the node list's header.
pub fn looks_like_alibaba_2023_node_list(text: &str) -> bool {
    let Some(first) = text
        .lines()
        .map(|l| l.trim_start_matches('\u{feff}').trim())
        .find(|l| !l.is_empty())
    else {
        return false;
    };
    let fields: Vec<&str> = first.split(',').map(str::trim).collect();
    fields.len() == COLUMNS.len()
        && fields
            .iter()
            .zip(COLUMNS)
            .all(|(f, c)| f.eq_ignore_ascii_case(c))
}

fn model_for(model: &str) -> Option<&'static str> {
    match model {
        "P100" => Some("P100"),
        "T4" => Some("T4"),
        "A10" => Some("A10"),
        "V100M16" => Some("V100-16GB"),
        "V100M32" => Some("V100-32GB"),
        _ => None,
    }
}

/// Reads a node list; `source` names it in errors (`FILE:LINE: field F: reason`).
pub fn read_alibaba_2023_node_list(
    text: &str,
    source: &str,
) -> Result<Alibaba2023Cluster, TraceError> {
    let mut groups: Vec<NodeGroupSpec> = Vec::new();
    let (mut nodes, mut cpu_only, mut undisclosed) = (0, 0, 0);
    let mut header_seen = false;
    for (i, raw) in text.lines().enumerate() {
        let line = i as u64 + 1;
        let row = raw.trim_start_matches('\u{feff}').trim();
        if row.is_empty() {
            continue;
        }
        if !header_seen {
            header_seen = true;
            if !looks_like_alibaba_2023_node_list(row) {
                return Err(TraceError::at(
                    source,
                    line,
                    None,
                    K::MissingColumn(format!(
                        "{:?}, expected {}",
                        crate::printable(row),
                        COLUMNS.join(",")
                    )),
                ));
            }
            continue;
        }
        let fields: Vec<&str> = row.split(',').map(str::trim).collect();
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
        let err = |field: &str, kind: K| TraceError::at(source, line, Some(field), kind);
        if fields[0].is_empty() {
            return Err(err("sn", K::EmptyValue));
        }
        let cpu_milli = parse_count(fields[1]).map_err(|k| err("cpu_milli", k))?;
        let memory_mib = parse_count(fields[2]).map_err(|k| err("memory_mib", k))?;
        let gpus = parse_count(fields[3]).map_err(|k| err("gpu", k))?;
        let model_name = fields[4];
        if gpus == 0 {
            cpu_only += 1;
            continue;
        }
        if UNDISCLOSED.contains(&model_name) {
            undisclosed += 1;
            continue;
        }
        let Some(model) = model_for(model_name) else {
            return Err(err(
                "model",
                K::Invalid(format!(
                    "unknown GPU model {:?} (known: A10, P100, T4, V100M16, V100M32; \
                     G2 and G3 are left out as undisclosed)",
                    crate::printable(model_name)
                )),
            ));
        };
        if cpu_milli == 0 {
            return Err(err("cpu_milli", K::NotPositive(fields[1].into())));
        }
        if memory_mib == 0 {
            return Err(err("memory_mib", K::NotPositive(fields[2].into())));
        }
        let gpus = u32::try_from(gpus)
            .ok()
            .filter(|g| *g <= 64)
            .ok_or_else(|| err("gpu", K::OutOfRange(fields[3].into())))?;
        let memory = memory_mib
            .checked_mul(1 << 20)
            .map(Bytes)
            .ok_or_else(|| err("memory_mib", K::OutOfRange(fields[2].into())))?;
        let cpus = MilliCpu(cpu_milli);
        nodes += 1;
        let same = |g: &&mut NodeGroupSpec| {
            g.gpu == model && g.gpus_per_node == gpus && g.cpus == cpus && g.memory == memory
        };
        if let Some(g) = groups.iter_mut().find(|g| same(g)) {
            g.count += 1;
        } else {
            groups.push(NodeGroupSpec {
                name: format!(
                    "{}-{gpus}g-{cpu_milli}m-{memory_mib}mi",
                    model_name.to_ascii_lowercase()
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
            K::Empty("no GPU node of a known model"),
        ));
    }
    Ok(Alibaba2023Cluster {
        spec: ClusterSpec {
            api_version: "tessera/v1".into(),
            kind: "Cluster".into(),
            metadata: Some(Metadata {
                name: Some("alibaba-gpu-2023".into()),
            }),
            spec: ClusterBody {
                node_groups: groups,
            },
        },
        nodes,
        cpu_only,
        undisclosed,
    })
}
