//! MISO's truth: how fast a job runs on each MIG slice (a table of per-iteration times, MISO's
//! A100-40GB measurements by default), and how fast it runs sharing a whole GPU under MPS.
//!
//! Speeds are *normalised* to the whole GPU (7g = 1.0) and keyed by compute slices (1, 2, 3,
//! 4, 7): a job's trace runtime is its whole-GPU runtime, and a slice scales it. A profile
//! missing from the table means the job runs out of memory there.

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_model::{Allocation, Cluster, GpuPart, TrainingJob};
use tessera_perf::ThroughputModel;
use thiserror::Error;

/// The MISO measurements (per-iteration seconds per `<model>_train<batch>` and profile).
pub const MISO_LATENCY_JSON: &str = include_str!("data/miso_mig_latency.json");

/// Slice sizes (compute slices) a table may name.
pub const SLICES: [u8; 5] = [1, 2, 3, 4, 7];

/// Normalised speed per compute-slice count (index = slices, 0..=7); `None` = out of memory
/// (or a size no profile has).
pub type SliceSpeeds = [Option<f64>; 8];

/// Co-location penalty of MPS sharing: each job of a shared GPU runs this much slower than
/// on a slice of the same size (MISO measured about 15%).
pub const MPS_PENALTY: f64 = 0.15;

/// A table that cannot be read.
#[derive(Debug, Error, PartialEq)]
pub enum TableError {
    /// Not the expected JSON shape.
    #[error("slice table: {0}")]
    Json(String),
    /// A profile name without a leading `<N>g`.
    #[error("slice table: entry {key}: profile {profile:?} does not start with <N>g")]
    Profile {
        /// The entry.
        key: String,
        /// The profile as written.
        profile: String,
    },
    /// A time that is not a positive number.
    #[error("slice table: entry {key}, {profile}: iteration time {secs} is not positive")]
    Time {
        /// The entry.
        key: String,
        /// The profile.
        profile: String,
        /// The value.
        secs: f64,
    },
    /// An entry without a whole-GPU (7g) time, which every speed is relative to.
    #[error("slice table: entry {0} has no 7g time")]
    NoWhole(String),
}

/// Per-iteration times per job kind and slice size.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceTable {
    entries: BTreeMap<String, SliceSpeeds>,
}

impl SliceTable {
    /// MISO's A100-40GB table (the fixture in `data/`).
    pub fn miso() -> Result<SliceTable, TableError> {
        Self::from_json(MISO_LATENCY_JSON)
    }

    /// Parses `{ "<model>_train<batch>": { "<N>g.<M>gb": seconds, ... }, ... }`.
    pub fn from_json(text: &str) -> Result<SliceTable, TableError> {
        let raw: BTreeMap<String, BTreeMap<String, f64>> =
            serde_json::from_str(text).map_err(|e| TableError::Json(e.to_string()))?;
        let mut entries = BTreeMap::new();
        for (key, profiles) in raw {
            let mut secs: [Option<f64>; 8] = [None; 8];
            for (profile, t) in profiles {
                let slices = profile
                    .split_once('g')
                    .and_then(|(n, _)| n.parse::<usize>().ok())
                    .filter(|n| SLICES.contains(&(*n as u8)))
                    .ok_or_else(|| TableError::Profile {
                        key: key.clone(),
                        profile: profile.clone(),
                    })?;
                if !(t.is_finite() && t > 0.0) {
                    return Err(TableError::Time {
                        key,
                        profile,
                        secs: t,
                    });
                }
                secs[slices] = Some(t);
            }
            let whole = secs[7].ok_or_else(|| TableError::NoWhole(key.clone()))?;
            let mut speeds: SliceSpeeds = [None; 8];
            for c in SLICES {
                speeds[c as usize] = secs[c as usize].map(|t| whole / t);
            }
            entries.insert(key, speeds);
        }
        Ok(SliceTable { entries })
    }

    /// The normalised speeds of a job kind.
    pub fn get(&self, key: &str) -> Option<&SliceSpeeds> {
        self.entries.get(key)
    }

    /// Every entry, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &SliceSpeeds)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The speeds of a job: its table entry (`<model>_train<batch>`, or the model name as
    /// is), else [`resolve`](Self::resolve)'s, else linear in compute slices and fitting
    /// everywhere (nothing better is known).
    pub fn speeds_of(&self, job: &TrainingJob) -> SliceSpeeds {
        if let Some(s) = self.entries.get(&job_key(job)) {
            return *s;
        }
        self.resolve(job).unwrap_or_else(linear_speeds)
    }

    /// The entry for a job whose key is not in the table: its model (as named, else through
    /// the model catalogue, [`table_key`], then its family default) at the measured batch
    /// closest to the job's (in ratio; ties to the smaller), or at the middle measured batch
    /// when the job names none. `None` when the table has no such model.
    pub fn resolve(&self, job: &TrainingJob) -> Option<SliceSpeeds> {
        let (name, suffix) = tessera_model::models::split_batch_suffix(&job.model);
        let batch = suffix.or(job.batch_size);
        tessera_model::models::lookup(name, |m| self.nearest(m, batch), table_key)
    }

    /// The entry of `model` at the batch closest to `batch`.
    fn nearest(&self, model: &str, batch: Option<u32>) -> Option<SliceSpeeds> {
        let prefix = format!("{}_train", model.to_ascii_lowercase());
        let mut measured: Vec<(u32, &SliceSpeeds)> = self
            .entries
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, v)| Some((k[prefix.len()..].parse::<u32>().ok()?, v)))
            .collect();
        measured.sort_by_key(|(b, _)| *b);
        let pick = match batch {
            None => measured.get(measured.len().checked_sub(1)? / 2),
            Some(b) => {
                let distance = |m: u32| (f64::from(m.max(1)) / f64::from(b.max(1))).ln().abs();
                measured
                    .iter()
                    .min_by(|x, y| distance(x.0).total_cmp(&distance(y.0)))
            }
        };
        pick.map(|(_, v)| **v)
    }
}

/// The slice table's model name for a model of the catalogue (canonical name), listed in
/// docs/models.md.
pub fn table_key(canonical: &str) -> Option<&'static str> {
    Some(match canonical {
        "resnet50" => "resnet",
        "mobilenet-v2" => "mobilenet",
        "transformer" => "transformer",
        "bert-base" => "bert",
        "deepspeech2" => "deepspeech2",
        "cyclegan" => "cyclegan",
        "embedding" => "embedding",
        "gnn" => "gnn",
        _ => return None,
    })
}

/// The table key of a job: `<model>_train<batch>` when the batch is known, else the model.
pub fn job_key(job: &TrainingJob) -> String {
    match job.batch_size {
        Some(b) if !job.model.contains("_train") => format!("{}_train{b}", job.model),
        _ => job.model.clone(),
    }
}

/// Speeds proportional to compute slices, fitting on every slice.
pub fn linear_speeds() -> SliceSpeeds {
    let mut s: SliceSpeeds = [None; 8];
    for c in SLICES {
        s[c as usize] = Some(c as f64 / 7.0);
    }
    s
}

/// The smallest slice a job fits on.
pub fn smallest_fit(speeds: &SliceSpeeds) -> Option<u8> {
    SLICES.into_iter().find(|&c| speeds[c as usize].is_some())
}

/// Speed at a fractional number of compute slices (an MPS share of `x / 7` of the SMs):
/// piecewise linear through (0, 0) and the known slices, flat past the largest. Memory does
/// not limit MPS sharing, so slices where the job is out of memory are interpolated over.
pub fn interpolate(speeds: &SliceSpeeds, x: f64) -> f64 {
    let mut prev = (0.0, 0.0);
    for c in SLICES {
        let Some(s) = speeds[c as usize] else {
            continue;
        };
        let c = c as f64;
        if x <= c {
            let (x0, y0) = prev;
            return y0 + (s - y0) * (x - x0) / (c - x0);
        }
        prev = (c, s);
    }
    prev.1
}

/// MISO's truth as a [`ThroughputModel`]: a whole GPU runs at the trace's rate, a MIG
/// instance at the table's normalised speed for its compute slices (zero when out of memory),
/// and a quota share (MPS) at the speed interpolated at its SM share, less
/// [`MPS_PENALTY`] when it has neighbours. The share of `n` sharers is `1000 / n` permille,
/// or the job's request if larger: MPS without an active-thread cap lets a job use SMs its
/// neighbours leave idle, so limits are not modelled.
#[derive(Clone, Debug)]
pub struct MisoTruth {
    /// The slice speeds.
    pub table: Arc<SliceTable>,
    /// Co-location penalty under MPS.
    pub mps_penalty: f64,
}

impl MisoTruth {
    /// MISO's table and penalty.
    pub fn new(table: Arc<SliceTable>) -> MisoTruth {
        MisoTruth {
            table,
            mps_penalty: MPS_PENALTY,
        }
    }
}

impl ThroughputModel for MisoTruth {
    fn throughput(&self, job: &TrainingJob, alloc: &Allocation, cluster: &Cluster) -> f64 {
        self.throughput_among(job, alloc, cluster, &[])
    }

    fn depends_on_neighbours(&self) -> bool {
        true
    }

    fn throughput_among(
        &self,
        job: &TrainingJob,
        alloc: &Allocation,
        cluster: &Cluster,
        neighbours: &[(&TrainingJob, &Allocation)],
    ) -> f64 {
        let reference = job.reference_throughput();
        let Some(share) = alloc.shares.first() else {
            return 0.0;
        };
        match share.devices.map(|d| d.part) {
            None | Some(GpuPart::Whole) => reference * alloc.gpus() as f64 / job.gpus.max(1) as f64,
            Some(GpuPart::Mig(inst)) => {
                let Some(node) = cluster.nodes.get(share.node.index()) else {
                    return 0.0;
                };
                let slices = cluster
                    .catalog
                    .mig_geometry(node.gpu)
                    .and_then(|g| g.profile(inst))
                    .map_or(0, |p| p.compute_slices as usize);
                let speeds = self.table.speeds_of(job);
                speeds
                    .get(slices)
                    .copied()
                    .flatten()
                    .map_or(0.0, |s| reference * s)
            }
            Some(GpuPart::Quota { sm_request, .. }) => {
                let n = 1 + neighbours.len() as u32;
                let share = (1000 / n).max(sm_request as u32).min(1000);
                let x = 7.0 * share as f64 / 1000.0;
                let penalty = if neighbours.is_empty() {
                    1.0
                } else {
                    1.0 - self.mps_penalty
                };
                reference * interpolate(&self.table.speeds_of(job), x) * penalty
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miso_table_loads_with_ooms() {
        let t = SliceTable::miso().unwrap();
        assert_eq!(t.entries().count(), 32);
        let bert = t.get("bert_train8").unwrap();
        assert_eq!(bert[7], Some(1.0));
        assert!(bert[1].is_none() && bert[2].is_none());
        assert!((bert[3].unwrap() - 0.12069 / 0.23347).abs() < 1e-12);
        assert_eq!(smallest_fit(bert), Some(3));
        // Every entry runs on the whole GPU.
        assert!(t.entries().all(|(_, s)| s[7] == Some(1.0)));
    }

    #[test]
    fn bad_tables_are_errors() {
        assert!(matches!(
            SliceTable::from_json("[1]"),
            Err(TableError::Json(_))
        ));
        assert!(matches!(
            SliceTable::from_json(r#"{"a": {"9g.1gb": 1.0, "7g.40gb": 1.0}}"#),
            Err(TableError::Profile { .. })
        ));
        assert!(matches!(
            SliceTable::from_json(r#"{"a": {"1g.5gb": -1.0, "7g.40gb": 1.0}}"#),
            Err(TableError::Time { .. })
        ));
        assert!(matches!(
            SliceTable::from_json(r#"{"a": {"1g.5gb": 1.0}}"#),
            Err(TableError::NoWhole(_))
        ));
    }

    #[test]
    fn interpolation_passes_through_the_table() {
        let mut s: SliceSpeeds = [None; 8];
        s[3] = Some(0.6);
        s[7] = Some(1.0);
        assert!((interpolate(&s, 3.0) - 0.6).abs() < 1e-12);
        assert!((interpolate(&s, 1.5) - 0.3).abs() < 1e-12);
        assert!((interpolate(&s, 5.0) - 0.8).abs() < 1e-12);
        assert!((interpolate(&s, 7.0) - 1.0).abs() < 1e-12);
        assert_eq!(interpolate(&linear_speeds(), 3.5), 0.5);
    }
}
