//! The factors of the composed truth, each read from one mechanism's tables (docs/truth.md).
//!
//! Everything a factor needs about a job's model is looked up once per (model, batch, GPU
//! count) into a [`ModelFacts`]; the factors themselves are arithmetic on it.

use std::sync::Arc;

use crate::crius::cells::LargeModel;
use tessera_model::models::{lookup, split_batch_suffix, ModelCatalog};
use tessera_model::{GpuModel, TrainingJob};
use tessera_perf::roofline::{Precision, Roofline, DEFAULT_ATTAINED_FRACTION};

use crate::dilu::table::DiluModel;
use crate::dilu::truth::TrainingCurve;
use crate::gavel::matrix::{GavelMatrix, JobTypeKey};
use crate::miso::truth::{interpolate, SliceSpeeds, SliceTable};
use crate::synergy::perf::{SensitivityTable, SynergyProfiles};

/// Arithmetic intensity (FLOP per byte of device-memory traffic) of a model class's training
/// step, for the roofline speed of models no measured table covers. Assumed figures: dense
/// convolutions and attention reuse what they load (image, language); speech mixes recurrent
/// and convolutional layers; embedding-heavy recommendation, sparse graph and small RL
/// networks are bound by memory bandwidth.
pub fn class_intensity(class: &str) -> f64 {
    match class {
        "image" => 40.0,
        "language" => 60.0,
        "speech" => 30.0,
        "recommendation" => 5.0,
        "graph" => 5.0,
        "reinforcement-learning" => 10.0,
        _ => DEFAULT_INTENSITY,
    }
}

/// Arithmetic intensity of a model the catalogue does not know (or a job naming none).
pub const DEFAULT_INTENSITY: f64 = 30.0;

/// Data-parallel efficiency kept per doubling of the GPU count, for models without a table
/// of rates per count (all-reduce cost grows with the ring; 0.97 per doubling is 0.86 at 32
/// GPUs). An assumption, not a measurement.
pub const EFFICIENCY_PER_DOUBLING: f64 = 0.97;

/// Efficiency kept when an allocation spans more nodes than the job's compact placement on
/// its reference type (gradients cross the slower inter-node network). An assumption.
pub const CROSS_NODE_EFFICIENCY: f64 = 0.92;

/// Speed kept on a MIG slice whose memory MISO measured as too small for the job (the run
/// falls back to smaller micro-batches with gradient accumulation). Out of memory is not a
/// throughput of 0 here: the composed truth never stops a job a policy placed.
pub const OUT_OF_MEMORY_PENALTY: f64 = 0.5;

/// Per-GPU efficiency of `n` devices over `nodes` nodes, relative to one GPU, when
/// `extra_nodes` > 0 the allocation spans more nodes than a compact one would.
pub fn default_efficiency(n: u32, extra_nodes: bool) -> f64 {
    let doublings = f64::from(n.max(1)).log2();
    let e = EFFICIENCY_PER_DOUBLING.powf(doublings);
    if extra_nodes {
        e * CROSS_NODE_EFFICIENCY
    } else {
        e
    }
}

/// A GPU's roofline speed on work of `intensity` FLOP/byte: the catalog's FP16/BF16 peak
/// (tensor cores where present) at [`DEFAULT_ATTAINED_FRACTION`], capped by what its memory
/// bandwidth feeds. Never 0 for a catalog GPU; 1.0 for a GPU with no figures.
pub fn roofline_speed(gpu: &GpuModel, intensity: f64) -> f64 {
    let r = Roofline::from_gpu(gpu, Precision::Fp16, DEFAULT_ATTAINED_FRACTION);
    let s = r.attainable(intensity);
    if s.is_finite() && s > 0.0 {
        s
    } else {
        1.0
    }
}

/// How a quota (a share of a GPU's SMs) slows a job.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QuotaCurve {
    /// Dilu's training curve of the model (one of the five it names).
    Dilu(TrainingCurve),
    /// MISO's slice speeds interpolated at the share (MISO's MPS model).
    Miso(SliceSpeeds),
}

impl QuotaCurve {
    /// Relative speed at `share` of the SMs (clamped into (0, 1]), in (0, 1].
    pub fn relative(&self, share: f64) -> f64 {
        let share = if share.is_finite() {
            share.clamp(1e-3, 1.0)
        } else {
            1.0
        };
        let r = match self {
            QuotaCurve::Dilu(c) => c.relative(share).unwrap_or(share),
            QuotaCurve::Miso(s) => interpolate(s, 7.0 * share),
        };
        clamp_unit(r)
    }
}

/// A value in (0, 1]: NaN and non-positive values become a thousandth.
fn clamp_unit(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x.clamp(1e-3, 1.0)
    } else {
        1e-3
    }
}

/// What the tables say about one (model, batch, GPU count), looked up once.
#[derive(Debug)]
pub struct ModelFacts {
    /// Serial number (memo keys).
    pub id: u32,
    /// The job's model as written.
    pub model: String,
    /// Its batch size.
    pub batch: Option<u32>,
    /// GPUs it asks for.
    pub gpus: u32,
    /// Roofline intensity of its class.
    pub intensity: f64,
    /// Crius's large model, when it is one.
    pub large: Option<LargeModel>,
    /// Its job type in Gavel's matrix, when the matrix knows the model.
    pub gavel: Option<JobTypeKey>,
    /// Synergy's sensitivity table, when profiled.
    pub synergy: Option<&'static SensitivityTable>,
    /// MISO's slice speeds (linear in slices when the table lacks the model).
    pub slices: SliceSpeeds,
    /// How a quota slows it.
    pub quota: QuotaCurve,
}

impl ModelFacts {
    /// Looks everything up for `job`.
    pub fn of(
        id: u32,
        job: &TrainingJob,
        matrix: &GavelMatrix,
        gavel_types: &[JobTypeKey],
        slices: &SliceTable,
    ) -> ModelFacts {
        let catalog = ModelCatalog::builtin();
        let intensity = catalog
            .get(&job.model)
            .map_or(DEFAULT_INTENSITY, |e| class_intensity(&e.class));
        let miso_known = slices.get(&crate::miso::truth::job_key(job)).is_some()
            || slices.resolve(job).is_some();
        let speeds = slices.speeds_of(job);
        let quota = match crate::dilu::serving::model_of(&job.model) {
            Some(m) => QuotaCurve::Dilu(TrainingCurve::for_model(m)),
            None if miso_known => QuotaCurve::Miso(speeds),
            // Dilu's stand-in for other models: RoBERTa-large's curve, knee at half the GPU.
            None => QuotaCurve::Dilu(TrainingCurve::for_model(DiluModel::RobertaLarge)),
        };
        ModelFacts {
            id,
            model: job.model.clone(),
            batch: job.batch_size,
            gpus: job.gpus,
            intensity,
            large: crate::crius::perf::large_model(&job.model),
            gavel: gavel_key(matrix, gavel_types, job),
            synergy: SynergyProfiles::builtin()
                .for_gpus(&job.model, job.gpus)
                .map(|p| &p.table),
            slices: speeds,
            quota,
        }
    }

    /// True when these facts are `job`'s.
    pub fn is_for(&self, job: &TrainingJob) -> bool {
        self.model == job.model && self.batch == job.batch_size && self.gpus == job.gpus
    }

    /// Relative speed on a MIG instance of `compute` slices (of 7), in (0, 1]: MISO's
    /// measured speed, interpolated for sizes it did not measure, halved where it measured the
    /// job out of memory ([`OUT_OF_MEMORY_PENALTY`]).
    pub fn slice_speed(&self, compute: u8) -> f64 {
        if compute >= 7 {
            return 1.0;
        }
        if compute == 0 {
            return 1e-3;
        }
        match self.slices.get(usize::from(compute)).copied().flatten() {
            Some(s) => clamp_unit(s),
            None => {
                let measured_size = crate::miso::truth::SLICES.contains(&compute);
                let s = clamp_unit(interpolate(&self.slices, f64::from(compute)));
                if measured_size {
                    clamp_unit(s * OUT_OF_MEMORY_PENALTY)
                } else {
                    s
                }
            }
        }
    }
}

/// Gavel's job type for `job`: its own key or its model through the catalogue at its batch
/// ([`GavelMatrix::key_of`]), else the same model at the measured batch closest in ratio (the
/// middle one when the job names none). Only ratios of the matrix's rates are used, so a
/// nearby batch stands in where Gavel's own truth (absolute rates) would not guess.
fn gavel_key(matrix: &GavelMatrix, types: &[JobTypeKey], job: &TrainingJob) -> Option<JobTypeKey> {
    let own = matrix.key_of(job);
    if matrix.knows(&own) {
        return Some(own);
    }
    let (name, suffix) = split_batch_suffix(&job.model);
    let batch = suffix.or(job.batch_size);
    lookup(
        name,
        |n| {
            let model = alnum_lower(n);
            let measured: Vec<&JobTypeKey> = types
                .iter()
                .filter(|k| k.model == model && k.batch.is_some())
                .collect();
            let pick = match batch {
                None => measured.get(measured.len().checked_sub(1)? / 2).copied(),
                Some(b) => {
                    let distance = |k: &JobTypeKey| {
                        (f64::from(k.batch.unwrap_or(1).max(1)) / f64::from(b.max(1)))
                            .ln()
                            .abs()
                    };
                    measured
                        .iter()
                        .copied()
                        .min_by(|x, y| distance(x).total_cmp(&distance(y)))
                }
            };
            pick.or_else(|| types.iter().find(|k| k.model == model))
                .cloned()
        },
        crate::gavel::matrix::table_key,
    )
}

/// Gavel's normalisation of model names: ASCII letters and digits, lower case.
fn alnum_lower(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The compute slices a MIG profile name gives (`3g.20gb` → 3); `None` when unreadable.
pub fn profile_slices(profile: &str) -> Option<u8> {
    let lower = profile.trim().to_ascii_lowercase();
    let bare = lower
        .strip_prefix(tessera_model::MIG_RESOURCE_PREFIX)
        .unwrap_or(&lower);
    bare.split_once('g')
        .and_then(|(c, _)| c.parse::<u8>().ok())
        .filter(|c| (1..=7).contains(c))
}

/// The relative speed a job asked for: 1 for whole GPUs (and a MIG request of any slice,
/// whose trace time is the whole GPU's, as MISO reads its traces), the slice's speed for a
/// fixed MIG profile, the quota curve at the share for a GPU-share request.
pub fn asked_sub_gpu(job: &TrainingJob, facts: &ModelFacts) -> f64 {
    if let Some(share) = job.gpu_share {
        return facts.quota.relative(f64::from(share.sm_permille) / 1000.0);
    }
    match job.mig.as_ref().and_then(|m| m.profile()) {
        Some(p) => profile_slices(p).map_or(1.0, |c| facts.slice_speed(c)),
        None => 1.0,
    }
}

/// Shared handle type for facts.
pub type Facts = Arc<ModelFacts>;
