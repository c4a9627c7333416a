//! MISO (Li et al., SoCC'22): MIG partitioning chosen from a cheap shared-GPU (MPS) profile.
//!
//! - [`truth`]: slice speeds from MISO's A100 table ([`truth::SliceTable`]) and the MPS
//!   co-location model ([`truth::MisoTruth`], `--perf miso`).
//! - [`predict`]: the [`predict::SlicePredictor`] trait, the artifact's error emulation and a
//!   learned regression from MPS-level speeds.
//! - [`opt`]: the per-GPU layout optimizer (exhaustive over layouts and assignments, with
//!   branch-and-bound pruning).
//! - [`policy`]: `nopart`, `static` (`static:4-3` for another layout), `miso`,
//!   `miso-oracle`, `mps`.
//! - [`workload`]: the artifact's 100-job trace and a synthetic MIG workload.
//! - `tessera repro miso` and `tessera bench miso` (feature `experiments`).

use std::sync::{Arc, OnceLock};

use layouts::LayoutSet;
use tessera_sched::{Capabilities, Capability, Policy, PolicyInfo, PolicyOptions};

use crate::{
    BuiltinCluster, BuiltinWorkload, GeneratorOptions, Mechanism, Truth, TruthInfo, TruthOptions,
    WorkloadGenerator,
};

#[cfg(feature = "experiments")]
pub mod experiment;
pub mod layouts;
pub mod opt;
pub mod policy;
pub mod predict;
pub mod truth;
pub mod workload;

use policy::{Miso as MisoPolicy, MisoConfig, MpsOnly, NoPart, StaticPartition};
use predict::EmulatedError;
use truth::{MisoTruth, SliceTable};

/// MISO's slice table, parsed once. The fixture is checked by a unit test; should it ever
/// fail to parse, the table is empty and every job falls back to linear speeds.
pub fn miso_table() -> Arc<SliceTable> {
    static TABLE: OnceLock<Arc<SliceTable>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            Arc::new(SliceTable::miso().unwrap_or_else(|_| {
                SliceTable::from_json("{}").unwrap_or_else(|_| unreachable!("empty table parses"))
            }))
        })
        .clone()
}

/// MISO's policy settings with the defaults (emulated prediction error, generated layouts).
pub fn miso_config(oracle: bool, seed: u64) -> MisoConfig {
    MisoConfig {
        oracle,
        layouts: LayoutSet::Generated,
        objective: opt::Objective::MeanSlowdown,
        mps_phase: policy::MPS_PHASE,
        profile_alone: false,
        checkpoint_gap: policy::CHECKPOINT_GAP,
        predictor: Arc::new(EmulatedError::default()),
        table: miso_table(),
        seed,
    }
}

/// Parses a layout code `3-2-2` (compute slices, `-` or `,` separated).
pub fn parse_code(code: &str) -> Option<Vec<u8>> {
    let v: Vec<u8> = code
        .split(['-', ',', '+'])
        .map(|s| s.trim().trim_end_matches('g').parse::<u8>().ok())
        .collect::<Option<_>>()?;
    let total: u32 = v.iter().map(|&c| c as u32).sum();
    (!v.is_empty() && total <= 7 && v.iter().all(|c| [1, 2, 3, 4, 7].contains(c))).then_some(v)
}

/// The MISO mechanism.
#[derive(Clone, Copy, Debug)]
pub struct Miso;

/// What every MISO policy honours: GPU types, any cluster (per-GPU placement), jobs of several
/// GPUs (whole GPUs, on one node or spread) and failures. None of them books CPU/memory or
/// places quota shares.
const MISO_BASE: Capabilities = Capabilities::NONE
    .with(Capability::GpuTypes)
    .with(Capability::MixedNodes)
    .with(Capability::MultiGpu)
    .with(Capability::MultiNode)
    .with(Capability::Failures);

/// MIG policies: fixed profiles and slices of their choice.
const MIG: Capabilities = MISO_BASE
    .with(Capability::MigProfile)
    .with(Capability::MigAny);

const POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "nopart",
        about: "one job per whole GPU, strict FIFO (MISO's NoPart baseline)",
        capabilities: MISO_BASE.with(Capability::NonMigGpus),
    },
    PolicyInfo {
        name: "static",
        about: "every MIG GPU pre-split as 3g+2g+2g (static:4-3 etc. for another layout); largest idle slice that fits; promotion when the queue is empty",
        // A GPU without MIG is one 7-slice place.
        capabilities: MIG.with(Capability::NonMigGpus),
    },
    PolicyInfo {
        name: "miso",
        about: "MISO (SoCC'22): 30 s MPS profile, predicted slice speeds, per-GPU optimal MIG layout, strict FIFO",
        capabilities: MIG.with(Capability::NonMigGpus),
    },
    PolicyInfo {
        name: "miso-oracle",
        about: "MISO with true slice speeds and no MPS phase",
        capabilities: MIG.with(Capability::NonMigGpus),
    },
    PolicyInfo {
        name: "mps",
        about: "up to 3 jobs share a GPU under MPS (no partitioning)",
        // Every job gets a third of a GPU, whatever share it asks for.
        capabilities: MISO_BASE.with(Capability::NonMigGpus),
    },
];

fn cluster_a100x8() -> String {
    "# MISO's testbed: 8 A100-40GB GPUs (MIG-capable).\napiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: miso-a100x8\nspec:\n  nodeGroups:\n    - name: a100\n      count: 1\n      gpu: A100-40GB\n      gpusPerNode: 8\n      cpus: 64\n      memory: 512Gi\n".to_string()
}

fn trace_100(seed: u64) -> Result<tessera_model::Workload, String> {
    workload::miso_workload(seed, 60.0, 30.0, workload::ArrivalOrder::Shuffled)
}

fn generate_synthetic(o: &GeneratorOptions) -> Result<tessera_model::Workload, String> {
    crate::check_generator_options(o)?;
    workload::synthetic(o.jobs, o.load, o.seed.unwrap_or(1))
}

impl Mechanism for Miso {
    fn name(&self) -> &'static str {
        "miso"
    }

    fn about(&self) -> &'static str {
        "MISO (SoCC'22): MIG partitioning chosen from a cheap MPS profile; MIG slice speeds, MPS sharing, static and dynamic partitioning"
    }

    fn policies(&self) -> &'static [PolicyInfo] {
        POLICIES
    }

    fn build_policy(&self, name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>> {
        let lower = name.to_ascii_lowercase();
        let p: Box<dyn Policy> = match lower.as_str() {
            "nopart" => Box::new(NoPart),
            "static" => Box::new(StaticPartition::new(&[3, 2, 2], miso_table())),
            "miso" => Box::new(MisoPolicy::new(miso_config(false, options.seed))),
            "miso-oracle" => Box::new(MisoPolicy::new(miso_config(true, options.seed))),
            "mps" => Box::new(MpsOnly::new(miso_table())),
            other => {
                let code = parse_code(other.strip_prefix("static:")?)?;
                Box::new(StaticPartition::new(&code, miso_table()))
            }
        };
        Some(p)
    }

    fn truths(&self) -> &'static [TruthInfo] {
        &[TruthInfo {
            name: "miso",
            about: "MISO's A100 MIG slice speeds (missing = out of memory) and MPS sharing at the interpolated SM share less 15%",
        }]
    }

    fn build_truth(&self, name: &str, _options: &TruthOptions) -> Option<Truth> {
        name.eq_ignore_ascii_case("miso").then(|| Truth {
            name: "miso",
            model: Arc::new(MisoTruth::new(miso_table())),
            profiler: None,
        })
    }

    fn model_key(&self, canonical: &str) -> Option<String> {
        truth::table_key(canonical).map(|k| format!("{k}_train<batch>"))
    }

    fn preferred_truth(&self) -> Option<&'static str> {
        Some("miso")
    }

    /// Every job's model (and batch) is in the slice table and every GPU type of the cluster
    /// has MIG (the table was measured on A100 slices).
    fn covers(&self, cluster: &tessera_model::Cluster, workload: &tessera_model::Workload) -> bool {
        let table = miso_table();
        !workload.jobs().is_empty()
            && workload
                .jobs()
                .iter()
                .all(|j| table.get(&truth::job_key(j)).is_some())
            && !cluster.groups.is_empty()
            && cluster
                .groups
                .iter()
                .all(|g| cluster.catalog.mig_geometry(g.gpu).is_some())
    }

    fn clusters(&self) -> &'static [BuiltinCluster] {
        &[BuiltinCluster {
            name: "miso-a100x8",
            about: "MISO's testbed: one node of 8 A100-40GB GPUs",
            yaml: cluster_a100x8,
        }]
    }

    fn workloads(&self) -> &'static [BuiltinWorkload] {
        &[BuiltinWorkload {
            name: "miso-100",
            about: "MISO's 100-job trace (models, whole-GPU run times, iterations), Poisson arrivals of mean 60 s (30 s for the first third); seeded",
            generate: trace_100,
        }]
    }

    fn generators(&self) -> &'static [WorkloadGenerator] {
        &[WorkloadGenerator {
            name: "miso-synthetic",
            about: "single-GPU jobs drawn from MISO's trace (model, run time, iterations), Poisson arrivals at --load jobs/h",
            variants: &[],
            generate: generate_synthetic,
        }]
    }

    #[cfg(feature = "experiments")]
    fn experiments(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&experiment::MisoRepro]
    }

    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&experiment::MisoBench]
    }
}

#[cfg(all(test, feature = "experiments"))]
mod tests;
