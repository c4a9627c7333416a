//! HAP's heterogeneous-cluster experiment (EuroSys'24 §7): clusters of 2k V100 + 6k P100 for
//! k ∈ {1, 2, 4, 8} GPUs per machine, the four models at 32 samples per GPU; per case the
//! estimated iteration time of data parallelism with an equal and a speed-proportional split
//! (expert-parallel in expert layers, as MoE systems run it) and of the synthesized plan,
//! and the synthesis time.
//!
//! The devices come from a [`Calibration`]: by default HAP's own calibrated constants
//! (`data/hap-calibrated.yaml`, read from the artifact as its code reads them).

use std::time::Instant;

use serde::Serialize;
use tessera_model::GpuCatalog;

use crate::builtin;
use crate::cluster::{Devices, PlanClusterSpec, GIB};
use crate::cost::CostModel;
use crate::error::PlanError;
use crate::search::evaluate;
use crate::synth::{data_parallel_if_it_fits, equal, proportional, synthesize};

/// GPUs per machine in the paper's sweep.
pub const KS: [usize; 4] = [1, 2, 4, 8];
/// Models in the paper's sweep.
pub const MODELS: [&str; 4] = ["vgg19", "vit", "bert-base", "bert-moe"];
/// The published claim.
pub const PUBLISHED_CLAIM: &str =
    "up to 2.41x speed-up over data-parallel baselines on heterogeneous clusters (HAP, EuroSys'24)";
/// The published best speed-up.
pub const PUBLISHED_MAX_SPEEDUP: f64 = 2.41;

/// HAP's calibrated cluster (see the file's header for the source and the units).
pub const HAP_CALIBRATED_YAML: &str = include_str!("../data/hap-calibrated.yaml");

/// Which device file a case runs on.
#[derive(Clone, Debug, PartialEq)]
pub enum Calibration {
    /// HAP's calibrated constants read as HAP's code reads them (bandwidths per element).
    Hap,
    /// The same constants read as bytes per second (4x the communication time).
    HapBytes,
    /// Ring collectives at a per-rank 10.4 Gb/s between machines, PCIe inside (the model
    /// before HAP's constants were read).
    Ring,
    /// A `PlanCluster` file; every machine group gets k GPUs.
    File(Box<PlanClusterSpec>),
}

impl Calibration {
    /// Parses `hap`, `hap-bytes` or `ring`.
    pub fn named(name: &str) -> Option<Calibration> {
        match name {
            "hap" => Some(Calibration::Hap),
            "hap-bytes" => Some(Calibration::HapBytes),
            "ring" => Some(Calibration::Ring),
            _ => None,
        }
    }

    /// Short label for reports.
    pub fn label(&self) -> &'static str {
        match self {
            Calibration::Hap => "hap",
            Calibration::HapBytes => "hap-bytes",
            Calibration::Ring => "ring",
            Calibration::File(_) => "file",
        }
    }

    /// The devices for `k` GPUs per machine.
    pub fn devices(&self, k: usize) -> Result<Devices, PlanError> {
        let with_k = |spec: &PlanClusterSpec| {
            let mut spec = spec.clone();
            for m in &mut spec.spec.machines {
                m.gpus_per_machine = k;
            }
            spec.validate(&GpuCatalog::builtin())
        };
        match self {
            Calibration::Hap => with_k(&PlanClusterSpec::from_text(HAP_CALIBRATED_YAML)?),
            Calibration::HapBytes => {
                let mut d = with_k(&PlanClusterSpec::from_text(HAP_CALIBRATED_YAML)?)?;
                for links in [&mut d.fabric.intra_node, &mut d.fabric.inter_node] {
                    for kind in tessera_perf::collective::Collective::ALL {
                        links.get_mut(kind).bytes_per_s /= 4.0;
                    }
                }
                Ok(d)
            }
            Calibration::Ring => Ok(builtin::mixed_cluster(k, 2, 6)),
            Calibration::File(spec) => with_k(spec),
        }
    }
}

/// One (model, k) case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Case {
    /// Model name.
    pub model: String,
    /// GPUs per machine.
    pub k: usize,
    /// Devices in all.
    pub devices: usize,
    /// Data parallelism, equal split (s per iteration); `None`: does not fit in memory.
    pub dp_equal_s: Option<f64>,
    /// Data parallelism, speed-proportional split; `None`: does not fit.
    pub dp_proportional_s: Option<f64>,
    /// The synthesized plan.
    pub synthesized_s: f64,
    /// Of which communication.
    pub synthesized_comm_s: f64,
    /// GiB the synthesized plan holds on its fullest device.
    pub synthesized_gib: f64,
    /// `dp_equal_s / synthesized_s`.
    pub speedup: Option<f64>,
    /// Wall-clock seconds of the synthesis (search + LP rounds).
    pub synthesis_s: f64,
    /// Search states expanded.
    pub states_expanded: u64,
}

/// Runs one case on HAP's calibrated devices.
pub fn run_case(model: &str, k: usize) -> Result<Case, PlanError> {
    run_case_on(model, k, &Calibration::Hap)
}

/// Runs one case on the devices of `calibration`.
pub fn run_case_on(model: &str, k: usize, calibration: &Calibration) -> Result<Case, PlanError> {
    let devices = calibration.devices(k)?;
    let graph = builtin::by_name(model, devices.len())?.validate()?;
    let budget = crate::search::MAX_SEARCH_STATES;
    let dp_equal_s = data_parallel_if_it_fits(&graph, &devices, &equal(&devices), budget)?;
    let dp_proportional_s =
        data_parallel_if_it_fits(&graph, &devices, &proportional(&devices), budget)?;
    let start = Instant::now();
    let syn = synthesize(&graph, &devices)?;
    let synthesis_s = start.elapsed().as_secs_f64();
    let ev = evaluate(
        &graph,
        &syn.program,
        &CostModel::new(&graph, &devices, &syn.ratios),
    );
    Ok(Case {
        model: model.into(),
        k,
        devices: devices.len(),
        dp_equal_s,
        dp_proportional_s,
        synthesized_s: syn.seconds,
        synthesized_comm_s: ev.comm_seconds,
        synthesized_gib: ev.memory_bytes / GIB,
        speedup: dp_equal_s.map(|d| d / syn.seconds),
        synthesis_s,
        states_expanded: syn.expanded,
    })
}

/// Runs every (model, k) case of `models` × `ks` on HAP's calibrated devices.
pub fn run(models: &[&str], ks: &[usize]) -> Result<Vec<Case>, PlanError> {
    let mut out = Vec::new();
    for m in models {
        for &k in ks {
            out.push(run_case(m, k)?);
        }
    }
    Ok(out)
}
