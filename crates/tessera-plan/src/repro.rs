//! HAP's heterogeneous-cluster experiment (EuroSys'24 §7): clusters of 2k V100 + 6k P100 for
//! k ∈ {1, 2, 4, 8} GPUs per machine, 10.4 Gb/s between machines, the four models at 32
//! samples per GPU; per case the estimated iteration time of data parallelism with an equal
//! and a speed-proportional split and of the synthesized plan, and the synthesis time.

use std::time::Instant;

use serde::Serialize;

use crate::builtin;
use crate::error::PlanError;
use crate::synth::{data_parallel, equal, proportional, synthesize};

/// GPUs per machine in the paper's sweep.
pub const KS: [usize; 4] = [1, 2, 4, 8];
/// Models in the paper's sweep.
pub const MODELS: [&str; 4] = ["vgg19", "vit", "bert-base", "bert-moe"];
/// The published claim.
pub const PUBLISHED_CLAIM: &str =
    "up to 2.41x speed-up over data-parallel baselines on heterogeneous clusters (HAP, EuroSys'24)";
/// The published best speed-up.
pub const PUBLISHED_MAX_SPEEDUP: f64 = 2.41;

/// One (model, k) case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Case {
    /// Model name.
    pub model: String,
    /// GPUs per machine.
    pub k: usize,
    /// Devices in all.
    pub devices: usize,
    /// Data parallelism, equal split (s per iteration).
    pub dp_equal_s: f64,
    /// Data parallelism, speed-proportional split.
    pub dp_proportional_s: f64,
    /// The synthesized plan.
    pub synthesized_s: f64,
    /// `dp_equal_s / synthesized_s`.
    pub speedup: f64,
    /// Wall-clock seconds of the synthesis (search + LP rounds).
    pub synthesis_s: f64,
    /// Search states expanded.
    pub states_expanded: u64,
}

/// Runs one case.
pub fn run_case(model: &str, k: usize) -> Result<Case, PlanError> {
    let devices = builtin::mixed_cluster(k, 2, 6);
    let graph = builtin::by_name(model, devices.len())?.validate()?;
    let (_, dp_equal_s) = data_parallel(&graph, &devices, &equal(&devices))?;
    let (_, dp_proportional_s) = data_parallel(&graph, &devices, &proportional(&devices))?;
    let start = Instant::now();
    let syn = synthesize(&graph, &devices)?;
    let synthesis_s = start.elapsed().as_secs_f64();
    Ok(Case {
        model: model.into(),
        k,
        devices: devices.len(),
        dp_equal_s,
        dp_proportional_s,
        synthesized_s: syn.seconds,
        speedup: dp_equal_s / syn.seconds,
        synthesis_s,
        states_expanded: syn.expanded,
    })
}

/// Runs every (model, k) case of `models` × `ks`.
pub fn run(models: &[&str], ks: &[usize]) -> Result<Vec<Case>, PlanError> {
    let mut out = Vec::new();
    for m in models {
        for &k in ks {
            out.push(run_case(m, k)?);
        }
    }
    Ok(out)
}
