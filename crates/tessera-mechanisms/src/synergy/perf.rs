//! CPU and memory sensitivity (Synergy, OSDI'22): the truth tables, the scalar rule of the
//! reference simulator, and optimistic profiling (the estimates a policy sees).
//!
//! A table gives a job's throughput relative to the GPU-proportional share (3 CPU cores and
//! 62.5 GB per GPU on the reference 8-GPU / 24-core / 500 GB server) for CPU cores per GPU
//! [`CPU_LEVELS`] × memory GB per GPU [`MEM_LEVELS`]; 0 means infeasible. Memory "GB" in the
//! tables is read as GiB throughout Tessera, so a 500 GiB server's proportional share is exactly
//! 62.5.
//!
//! - [`SynergyThroughput`]: the truth. The job's base throughput (its trace throughput at the
//!   proportional share) times the table value at the allocation's CPU and memory per GPU,
//!   interpolated bilinearly. The table for 1, 2 or 4 GPUs is used by the job's GPU count
//!   ([`TableMode::PerGpuCount`]), or the 1-GPU table for all ([`TableMode::SingleGpu`]).
//! - [`ReferenceSpeedup`]: the reference simulator's rule: a job holding at least its
//!   best-case demand (capped at one server) runs at its scalar speed-up, otherwise at the
//!   1-GPU table's value.
//! - [`OptimisticProfiler`]: what a policy learns when a job arrives: the CPU curve measured
//!   at full memory with the reference's step rule, memory sensitivity from a dataset-cache
//!   model, and the best-case demand.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;
use tessera_model::{Allocation, Bytes, Cluster, Knowledge, SimDuration, SimRng, TrainingJob};
use thiserror::Error;

use tessera_perf::{Profiler, ThroughputModel};

/// CPU cores per GPU of the table rows.
pub const CPU_LEVELS: [f64; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 12.0, 24.0];
/// Memory GB per GPU of the 5-column (1-GPU) tables; the 4-column tables drop the first.
pub const MEM_LEVELS: [f64; 5] = [20.83, 62.5, 125.0, 187.5, 250.0];
/// CPU cores per GPU of the proportional share on the reference server (24 cores / 8 GPUs).
pub const FAIR_CPU_PER_GPU: f64 = 3.0;
/// Memory GB per GPU of the proportional share on the reference server (500 GB / 8 GPUs).
pub const FAIR_MEM_PER_GPU: f64 = 62.5;

/// Relative tolerance for snapping an allocation onto a grid level: allocations are integer
/// millicores and bytes, so 20.83 GB comes back as 20.829999…
const SNAP: f64 = 1e-4;

/// Problems with sensitivity data.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum SynergyError {
    /// The profile JSON does not parse.
    #[error("sensitivity profiles: {0}")]
    Json(String),
    /// A table of the wrong shape or with bad values.
    #[error("sensitivity table {key}: {reason}")]
    Table {
        /// Profile key, e.g. `alexnet_2`.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// Throughput relative to the proportional share over the CPU × memory grid.
#[derive(Clone, Debug, PartialEq)]
pub struct SensitivityTable {
    mem: Vec<f64>,
    /// Row-major: `values[i * mem.len() + j]` for CPU level i, memory level j.
    values: Vec<f64>,
}

impl SensitivityTable {
    /// A table from rows (one per CPU level, each with one value per memory level).
    pub fn new(mem_levels: Vec<f64>, rows: &[Vec<f64>]) -> Result<SensitivityTable, String> {
        if mem_levels.is_empty() || mem_levels.windows(2).any(|w| w[0] >= w[1]) {
            return Err("memory levels must be increasing".into());
        }
        if rows.len() != CPU_LEVELS.len() {
            return Err(format!("{} rows, want {}", rows.len(), CPU_LEVELS.len()));
        }
        let mut values = Vec::with_capacity(rows.len() * mem_levels.len());
        for r in rows {
            if r.len() != mem_levels.len() {
                return Err(format!(
                    "a row has {} values, want {}",
                    r.len(),
                    mem_levels.len()
                ));
            }
            if r.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err("values must be finite and non-negative".into());
            }
            values.extend_from_slice(r);
        }
        Ok(SensitivityTable {
            mem: mem_levels,
            values,
        })
    }

    /// A table from a function of (CPU level, memory level).
    pub fn from_fn(mem_levels: Vec<f64>, f: impl Fn(f64, f64) -> f64) -> SensitivityTable {
        let mut values = Vec::with_capacity(CPU_LEVELS.len() * mem_levels.len());
        for &c in &CPU_LEVELS {
            for &m in &mem_levels {
                let v = f(c, m);
                values.push(if v.is_finite() && v > 0.0 { v } else { 0.0 });
            }
        }
        SensitivityTable {
            mem: mem_levels,
            values,
        }
    }

    /// Memory levels of the columns (GB per GPU).
    pub fn mem_levels(&self) -> &[f64] {
        &self.mem
    }

    /// The value at grid point (CPU level `i`, memory level `j`); 0 outside the grid.
    pub fn at(&self, i: usize, j: usize) -> f64 {
        if j >= self.mem.len() {
            return 0.0;
        }
        self.values
            .get(i * self.mem.len() + j)
            .copied()
            .unwrap_or(0.0)
    }

    /// Every grid point as (CPU cores per GPU, memory GB per GPU, value), CPU-major.
    pub fn grid(&self) -> impl Iterator<Item = (f64, f64, f64)> + '_ {
        CPU_LEVELS.iter().enumerate().flat_map(move |(i, &c)| {
            self.mem
                .iter()
                .enumerate()
                .map(move |(j, &m)| (c, m, self.at(i, j)))
        })
    }

    /// Relative throughput at `cpu` cores and `mem` GB per GPU, bilinear between grid points.
    /// Outside the grid the nearest edge applies. If any grid point that carries weight is
    /// infeasible (0), the result is 0: interpolating towards an infeasible point would invent
    /// a throughput nobody measured.
    pub fn relative(&self, cpu: f64, mem: f64) -> f64 {
        let (i0, i1, wi) = bracket(&CPU_LEVELS, cpu);
        let (j0, j1, wj) = bracket(&self.mem, mem);
        let mut acc = 0.0;
        for (i, a) in [(i0, 1.0 - wi), (i1, wi)] {
            for (j, b) in [(j0, 1.0 - wj), (j1, wj)] {
                let w = a * b;
                if w <= 0.0 {
                    continue;
                }
                let v = self.at(i, j);
                if v <= 0.0 {
                    return 0.0;
                }
                acc += w * v;
            }
        }
        acc
    }

    /// [`relative`](Self::relative), never 0: where the table has no measurement (its 0s
    /// are points Synergy could not measure, e.g. 9+ CPUs per GPU for a 4-GPU job on its
    /// 24-core servers, or memory below its first column), the best measured point using no
    /// more CPU and memory per GPU (more of either never slows a job), else the slowest
    /// measured speed (an allocation below every measured point), else 1.
    pub fn relative_measured(&self, cpu: f64, mem: f64) -> f64 {
        let r = self.relative(cpu, mem);
        if r > 0.0 {
            return r;
        }
        let within = |c: f64, m: f64| c <= cpu * (1.0 + SNAP) && m <= mem * (1.0 + SNAP);
        let best = self
            .grid()
            .filter(|&(c, m, v)| v > 0.0 && within(c, m))
            .fold(0.0, |acc, (_, _, v)| f64::max(acc, v));
        if best > 0.0 {
            return best;
        }
        let slowest = self
            .values
            .iter()
            .copied()
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        if slowest.is_finite() {
            slowest
        } else {
            1.0
        }
    }

    /// The largest value in the table.
    pub fn max_value(&self) -> f64 {
        self.values.iter().copied().fold(0.0, f64::max)
    }

    /// The smallest (CPU, memory) reaching the table's maximum: fewest CPUs first, then least
    /// memory. Returns (CPU cores per GPU, memory GB per GPU, value).
    pub fn best_case(&self) -> (f64, f64, f64) {
        let max = self.max_value();
        self.grid()
            .find(|&(_, _, v)| v > 0.0 && v >= max * (1.0 - 1e-9))
            .unwrap_or((FAIR_CPU_PER_GPU, FAIR_MEM_PER_GPU, 1.0))
    }
}

/// Indices of the grid levels around `x` and the weight of the upper one.
fn bracket(levels: &[f64], x: f64) -> (usize, usize, f64) {
    let last = levels.len() - 1;
    if !x.is_finite() || x <= levels[0] * (1.0 + SNAP) {
        return (0, 0, 0.0);
    }
    if x >= levels[last] * (1.0 - SNAP) {
        return (last, last, 0.0);
    }
    for i in 0..last {
        let (lo, hi) = (levels[i], levels[i + 1]);
        if (x - lo).abs() <= lo * SNAP {
            return (i, i, 0.0);
        }
        if (x - hi).abs() <= hi * SNAP {
            return (i + 1, i + 1, 0.0);
        }
        if x > lo && x < hi {
            return (i, i + 1, (x - lo) / (hi - lo));
        }
    }
    (last, last, 0.0)
}

/// One model's profile for one GPU count.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelProfile {
    /// Model name, e.g. `alexnet`.
    pub model: String,
    /// GPU count the table was measured with.
    pub gpus: u32,
    /// Declared best-case CPU cores per GPU.
    pub cpus_per_gpu: f64,
    /// Declared best-case memory GB per GPU.
    pub mem_per_gpu: f64,
    /// Throughput at the best case relative to the proportional share.
    pub speedup: f64,
    /// Seconds per iteration at the proportional share.
    pub iter_time_s: f64,
    /// Samples per iteration per GPU.
    pub batch: f64,
    /// The sensitivity table.
    pub table: SensitivityTable,
}

#[derive(Deserialize)]
struct RawProfile {
    cpus: f64,
    mem: f64,
    speedup: f64,
    iter_time: f64,
    batch: f64,
    tput: Vec<Vec<f64>>,
}

/// Sensitivity profiles by model and GPU count.
#[derive(Clone, Debug, PartialEq)]
pub struct SynergyProfiles {
    /// Sorted by (lower-case model, GPUs).
    by_key: Vec<((String, u32), ModelProfile)>,
    /// Open-addressed index into `by_key` by a hash of (lower-case model, GPUs): truth models
    /// look a profile up for every placement, and a binary search over names costs a string
    /// comparison per step. `u32::MAX` = empty slot; the length is a power of two.
    slots: Vec<u32>,
}

/// The Synergy simulator's tables (MIT, Microsoft), embedded.
const BUILTIN_JSON: &str = include_str!("../../data/synergy_model_profiles.json");

impl SynergyProfiles {
    /// The embedded Synergy tables (parsed once).
    pub fn builtin() -> &'static SynergyProfiles {
        static CELL: OnceLock<SynergyProfiles> = OnceLock::new();
        CELL.get_or_init(|| {
            // The embedded file is checked by a unit test; an empty set is the safe fallback.
            SynergyProfiles::from_json(BUILTIN_JSON)
                .unwrap_or_else(|_| SynergyProfiles::indexed(Vec::new()))
        })
    }

    /// Parses profiles in the `model_profiles.json` shape (key `<model>_<gpus>`).
    pub fn from_json(text: &str) -> Result<SynergyProfiles, SynergyError> {
        let raw: BTreeMap<String, RawProfile> =
            serde_json::from_str(text).map_err(|e| SynergyError::Json(e.to_string()))?;
        let mut by_key = BTreeMap::new();
        for (key, r) in raw {
            let Some((model, gpus)) = key.rsplit_once('_') else {
                continue;
            };
            let Ok(gpus) = gpus.parse::<u32>() else {
                continue;
            };
            // `shufflenet_12` in the reference data is a stray variant, not a 12-GPU table.
            if !matches!(gpus, 1 | 2 | 4) {
                continue;
            }
            let cols = r.tput.first().map_or(0, Vec::len);
            let mem = match cols {
                5 => MEM_LEVELS.to_vec(),
                4 => MEM_LEVELS[1..].to_vec(),
                n => {
                    return Err(SynergyError::Table {
                        key,
                        reason: format!("{n} memory columns, want 4 or 5"),
                    })
                }
            };
            let table =
                SensitivityTable::new(mem, &r.tput).map_err(|reason| SynergyError::Table {
                    key: key.clone(),
                    reason,
                })?;
            by_key.insert(
                (model.to_ascii_lowercase(), gpus),
                ModelProfile {
                    model: model.to_ascii_lowercase(),
                    gpus,
                    cpus_per_gpu: r.cpus,
                    mem_per_gpu: r.mem,
                    speedup: r.speedup,
                    iter_time_s: r.iter_time,
                    batch: r.batch,
                    table,
                },
            );
        }
        Ok(SynergyProfiles::indexed(by_key.into_iter().collect()))
    }

    fn indexed(by_key: Vec<((String, u32), ModelProfile)>) -> SynergyProfiles {
        // At most half full, so probes stay short and always end at an empty slot.
        let len = (by_key.len() * 2).next_power_of_two().max(8);
        let mut slots = vec![u32::MAX; len];
        for (i, ((model, gpus), _)) in by_key.iter().enumerate() {
            let mut h = Self::hash(model, *gpus) & (len - 1);
            while slots[h] != u32::MAX {
                h = (h + 1) & (len - 1);
            }
            slots[h] = i as u32;
        }
        SynergyProfiles { by_key, slots }
    }

    /// FNV-1a over the ASCII-lower-cased name, then the GPU count.
    fn hash(model: &str, gpus: u32) -> usize {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in model.bytes().chain(gpus.to_le_bytes()) {
            h ^= b.to_ascii_lowercase() as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        (h ^ (h >> 32)) as usize
    }

    /// The profile measured with exactly `gpus` GPUs.
    pub fn exact(&self, model: &str, gpus: u32) -> Option<&ModelProfile> {
        let mask = self.slots.len().checked_sub(1)?;
        let mut h = Self::hash(model, gpus) & mask;
        // Names are stored lower-cased; the query matches case-insensitively.
        loop {
            let i = *self.slots.get(h)?;
            let ((m, g), p) = self.by_key.get(i as usize)?;
            if *g == gpus && m.eq_ignore_ascii_case(model) {
                return Some(p);
            }
            h = (h + 1) & mask;
        }
    }

    /// The profile for a job of `gpus` GPUs: the 1-, 2- or 4-GPU table (4 for larger jobs,
    /// per GPU), falling back to the 1-GPU table when the model has no multi-GPU one. A name
    /// the tables lack is looked up through the model catalogue ([`SynergyProfiles::resolve`]).
    pub fn for_gpus(&self, model: &str, gpus: u32) -> Option<&ModelProfile> {
        let want = match gpus {
            0 | 1 => 1,
            2 | 3 => 2,
            _ => 4,
        };
        if let Some(p) = self.exact(model, want).or_else(|| self.exact(model, 1)) {
            return Some(p);
        }
        let key = &self.resolve(model)?.model;
        self.exact(key, want).or_else(|| self.exact(key, 1))
    }

    /// The 1-GPU profile of `model`: its own name in the tables, else its canonical name in
    /// the model catalogue mapped by [`table_key`] (then its family default's, e.g.
    /// `resnet152` → `res50`); `None` = not profiled (the truth runs it at its trace
    /// throughput).
    pub fn resolve(&self, model: &str) -> Option<&ModelProfile> {
        tessera_model::models::lookup(model, |k| self.exact(k, 1), table_key)
    }

    /// Seconds per iteration at the proportional share (from the 1-GPU profile).
    pub fn iter_time(&self, model: &str) -> Option<f64> {
        self.exact(model, 1).map(|p| p.iter_time_s)
    }

    /// Model names with a 1-GPU profile.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.by_key
            .iter()
            .filter(|((_, g), _)| *g == 1)
            .map(|((m, _), _)| m.as_str())
    }
}

/// The sensitivity table's name for a model of the catalogue (canonical name), listed in
/// docs/models.md.
pub fn table_key(canonical: &str) -> Option<&'static str> {
    Some(match canonical {
        "alexnet" => "alexnet",
        "resnet18" => "res18",
        "resnet50" => "res50",
        "mobilenet-v2" => "mobilenet",
        "shufflenet-v2" => "shufflenet",
        "vae" => "vae",
        "gnmt" => "gnmt",
        "transformer" => "transformer",
        "lstm" => "lstm",
        "bert-base" => "bert",
        "m5" => "m5",
        "deepspeech2" => "deepspeech",
        _ => return None,
    })
}

/// Which table the truth uses for a job of `n` GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableMode {
    /// The 1-, 2- or 4-GPU table by the job's GPU count (larger jobs use the 4-GPU table).
    PerGpuCount,
    /// The 1-GPU table for every job, as the reference simulator does.
    SingleGpu,
}

/// CPU cores and memory GB per GPU of an allocation.
pub fn per_gpu(alloc: &Allocation) -> Option<(f64, f64)> {
    let g = alloc.gpus();
    (g > 0).then(|| {
        (
            alloc.cpu().as_cores() / g as f64,
            alloc.memory().as_gib() / g as f64,
        )
    })
}

/// A job's base throughput scaled by the GPUs it holds (as [`tessera_perf::TraceThroughput`]).
fn base_throughput(job: &TrainingJob, alloc: &Allocation) -> f64 {
    let held = alloc.gpus();
    if held == 0 || job.gpus == 0 {
        return 0.0;
    }
    job.reference_throughput() * held as f64 / job.gpus as f64
}

/// The truth of the Synergy experiments: base throughput × table value at the allocation's
/// CPU and memory per GPU. Jobs of models without a profile run at their base throughput.
#[derive(Clone, Copy, Debug)]
pub struct SynergyThroughput {
    profiles: &'static SynergyProfiles,
    mode: TableMode,
}

impl SynergyThroughput {
    /// The embedded Synergy tables under `mode`.
    pub fn new(mode: TableMode) -> SynergyThroughput {
        SynergyThroughput {
            profiles: SynergyProfiles::builtin(),
            mode,
        }
    }

    /// The table the truth uses for `job`, if its model is profiled.
    pub fn table_for(&self, job: &TrainingJob) -> Option<&'static SensitivityTable> {
        let p = match self.mode {
            TableMode::PerGpuCount => self.profiles.for_gpus(&job.model, job.gpus),
            TableMode::SingleGpu => self.profiles.resolve(&job.model),
        };
        p.map(|p| &p.table)
    }
}

impl ThroughputModel for SynergyThroughput {
    fn throughput(&self, job: &TrainingJob, alloc: &Allocation, _cluster: &Cluster) -> f64 {
        let base = base_throughput(job, alloc);
        match (self.table_for(job), per_gpu(alloc)) {
            // `relative_measured`, not `relative`: an allocation the table never measured
            // (another cluster's CPU or memory per GPU) is not one the job cannot run on.
            (Some(t), Some((c, m))) => base * t.relative_measured(c, m),
            _ => base,
        }
    }
}

/// Node shape used to cap demands: (GPUs, CPU cores, memory GB) of one server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerShape {
    /// GPUs per server.
    pub gpus: f64,
    /// CPU cores per server.
    pub cpus: f64,
    /// Memory GB (GiB) per server.
    pub mem: f64,
}

impl ServerShape {
    /// The shape of the first node group of `cluster` (the reference cluster is homogeneous).
    pub fn of(cluster: &Cluster) -> ServerShape {
        cluster
            .groups
            .first()
            .map(|g| ServerShape {
                gpus: g.gpus_per_node as f64,
                cpus: g.cpu.as_cores(),
                mem: g.memory.as_gib(),
            })
            .unwrap_or(ServerShape {
                gpus: 8.0,
                cpus: 24.0,
                mem: 500.0,
            })
    }

    /// Proportional CPU cores per GPU.
    pub fn fair_cpu(&self) -> f64 {
        self.cpus / self.gpus.max(1.0)
    }

    /// Proportional memory GB per GPU.
    pub fn fair_mem(&self) -> f64 {
        self.mem / self.gpus.max(1.0)
    }
}

/// The reference simulator's best-case demand for a job: the 1-GPU profile's per-GPU demand
/// times the GPU count, capped at one server with the speed-up interpolated linearly (in CPU)
/// between the proportional share (1.0) and the ideal point; jobs larger than a server get the
/// proportional share. Returns (CPU per GPU, memory GB per GPU, speed-up).
pub fn reference_demand(p: &ModelProfile, gpus: u32, server: ServerShape) -> (f64, f64, f64) {
    let g = gpus.max(1) as f64;
    let mut cpu = g * p.cpus_per_gpu;
    let mut mem = g * p.mem_per_gpu;
    let mut speedup = p.speedup;
    let mut interpolate = false;
    if cpu > server.cpus {
        cpu = server.cpus;
        interpolate = true;
        if g > server.gpus {
            cpu = g * server.fair_cpu();
            speedup = 1.0;
            interpolate = false;
        }
    }
    if mem > server.mem {
        mem = server.mem;
        interpolate = true;
        if g > server.gpus {
            mem = g * server.fair_mem();
            speedup = 1.0;
            interpolate = false;
        }
    }
    if interpolate {
        let ideal = g * p.cpus_per_gpu;
        let fair = g * server.fair_cpu();
        if (ideal - fair).abs() > 1e-9 {
            speedup = 1.0 + (p.speedup - 1.0) / (ideal - fair) * (cpu - fair);
        }
    }
    (cpu / g, mem / g, speedup)
}

/// The reference simulator's rule as a truth: a job holding at least its best-case demand
/// ([`reference_demand`]) runs at that demand's speed-up, otherwise at its 1-GPU table's value
/// (1.0 at the proportional share). This reproduces the reference's GREEDY/TUNE accounting,
/// which only ever knows the scalar speed-up.
#[derive(Clone, Copy, Debug)]
pub struct ReferenceSpeedup {
    profiles: &'static SynergyProfiles,
}

impl Default for ReferenceSpeedup {
    fn default() -> Self {
        ReferenceSpeedup {
            profiles: SynergyProfiles::builtin(),
        }
    }
}

impl ThroughputModel for ReferenceSpeedup {
    fn throughput(&self, job: &TrainingJob, alloc: &Allocation, cluster: &Cluster) -> f64 {
        let base = base_throughput(job, alloc);
        let (Some(p), Some((c, m))) = (self.profiles.exact(&job.model, 1), per_gpu(alloc)) else {
            return base;
        };
        let (dc, dm, s) = reference_demand(p, job.gpus, ServerShape::of(cluster));
        if c >= dc * (1.0 - SNAP) && m >= dm * (1.0 - SNAP) {
            base * s
        } else {
            base * p.table.relative(c, m)
        }
    }
}

/// What a policy knows about a job's sensitivity.
#[derive(Clone, Debug, PartialEq)]
pub struct SensitivityEstimate {
    /// Estimated throughput relative to the proportional share.
    pub table: SensitivityTable,
    /// Best-case CPU cores per GPU.
    pub best_cpu_per_gpu: f64,
    /// Best-case memory GB per GPU.
    pub best_mem_per_gpu: f64,
    /// Estimated throughput at the best case relative to the proportional share.
    pub speedup: f64,
}

impl SensitivityEstimate {
    /// The estimate a table implies directly: its best case and the value there.
    pub fn from_table(table: SensitivityTable) -> SensitivityEstimate {
        let (c, m, v) = table.best_case();
        SensitivityEstimate {
            table,
            best_cpu_per_gpu: c,
            best_mem_per_gpu: m,
            speedup: v,
        }
    }

    /// Estimated throughput relative to the proportional share at `cpu` cores and `mem` GB
    /// per GPU.
    pub fn relative(&self, cpu: f64, mem: f64) -> f64 {
        self.table.relative(cpu, mem)
    }
}

/// The reference simulator's "profile": the 1-GPU table and its capped scalar best case,
/// known for free and exactly.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceProfiler;

impl Profiler for ReferenceProfiler {
    fn cost(&self) -> SimDuration {
        SimDuration::ZERO
    }

    fn gpus(&self) -> u32 {
        0
    }

    fn profile(&self, job: &TrainingJob, cluster: &Cluster, _: &mut SimRng) -> Knowledge {
        let Some(p) = SynergyProfiles::builtin().exact(&job.model, 1) else {
            return Knowledge::new();
        };
        let (c, m, s) = reference_demand(p, job.gpus, ServerShape::of(cluster));
        Knowledge::of(SensitivityEstimate {
            table: p.table.clone(),
            best_cpu_per_gpu: c,
            best_mem_per_gpu: m,
            speedup: s,
        })
    }
}

/// The dataset-cache model of one model's input pipeline (assumed figures, not measured by
/// the reference; see docs/synergy.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DatasetModel {
    /// Dataset size in GB.
    pub dataset_gb: f64,
    /// Average stored bytes per sample, in KB (10^3 bytes).
    pub sample_kb: f64,
    /// Resident memory the training process needs besides the cache, GB per GPU: below it the
    /// job cannot run (the profiler observes it as the peak RSS at full memory).
    pub working_set_gb: f64,
}

/// Dataset figures per model: ImageNet-1k (147 GB, ~115 KB/image) for the image models, a
/// 250 GB raw-audio set for M5, LibriSpeech (60 GB) for DeepSpeech, small text corpora for the
/// language models.
pub fn dataset_model(model: &str) -> DatasetModel {
    match model {
        "alexnet" | "res18" | "res50" | "mobilenet" | "shufflenet" => DatasetModel {
            dataset_gb: 147.0,
            sample_kb: 114.8,
            working_set_gb: 24.0,
        },
        "m5" => DatasetModel {
            dataset_gb: 250.0,
            sample_kb: 88.0,
            working_set_gb: 24.0,
        },
        "deepspeech" => DatasetModel {
            dataset_gb: 60.0,
            sample_kb: 210.0,
            working_set_gb: 24.0,
        },
        _ => DatasetModel {
            dataset_gb: 2.0,
            sample_kb: 4.0,
            working_set_gb: 8.0,
        },
    }
}

/// Optimistic profiling (Synergy §4.1): the CPU curve is measured at full memory, starting
/// at all of a server's CPUs and walking down (halve while the curve is flat within 10%, else
/// step down by the job's GPU count), linear between measured points; memory sensitivity is
/// derived analytically from the dataset-cache model: the input pipeline's rate with `m` GB
/// per GPU of cache is storage bandwidth / uncached fraction, and the estimate at (c, m) is the
/// smaller of the CPU curve at c and that rate (relative to the proportional-share rate).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptimisticProfiler {
    /// Profiling time (default 60 s).
    pub cost: SimDuration,
    /// Relative error of each measurement: a measured value is scaled by 1 + e·U(−1, 1).
    pub rel_error: f64,
    /// Storage bandwidth per GPU in MB/s (default 62.5: a 500 MB/s server split over 8 GPUs,
    /// the reference cluster's storage share).
    pub storage_mb_s_per_gpu: f64,
}

/// Default profiling cost: 60 s of one GPU.
pub const DEFAULT_PROFILE_COST: SimDuration = SimDuration::from_secs(60);

impl Default for OptimisticProfiler {
    fn default() -> Self {
        OptimisticProfiler {
            cost: DEFAULT_PROFILE_COST,
            rel_error: 0.0,
            storage_mb_s_per_gpu: 62.5,
        }
    }
}

impl OptimisticProfiler {
    /// The estimated table for a job whose true table is `truth`, measured on servers of
    /// `server` shape. Exposed for tests.
    pub fn estimate_table(
        &self,
        profile: &ModelProfile,
        gpus: u32,
        server: ServerShape,
        rng: &mut SimRng,
    ) -> SensitivityTable {
        let truth = &profile.table;
        let full_mem = *truth.mem_levels().last().unwrap_or(&FAIR_MEM_PER_GPU);
        let g = gpus.max(1) as f64;
        let mut noise = |v: f64| {
            if self.rel_error > 0.0 {
                (v * (1.0 + self.rel_error * rng.uniform_range(-1.0, 1.0))).max(0.0)
            } else {
                v
            }
        };
        // Measured points (CPU per GPU, relative throughput at full memory), walking down from
        // all of a server's CPUs.
        let mut points: Vec<(f64, f64)> = Vec::new();
        let mut total = server.cpus.max(g);
        let mut last: Option<f64> = None;
        let mut flat = true;
        while total >= g - 1e-9 {
            let c = total / g;
            let v = noise(truth.relative(c, full_mem));
            points.push((c, v));
            if let Some(prev) = last {
                flat = prev > 0.0 && (prev - v).abs() <= 0.1 * prev;
            }
            last = Some(v);
            let next = if flat { total / 2.0 } else { total - g };
            // Never skip the 1-CPU-per-GPU point.
            total = if next < g && total > g { g } else { next };
            if points.len() > 64 {
                break;
            }
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let cpu_curve = |c: f64| -> f64 {
            match points.iter().position(|p| p.0 >= c - 1e-9) {
                None => points.last().map_or(0.0, |p| p.1),
                Some(0) => points[0].1,
                Some(k) => {
                    let (a, b) = (points[k - 1], points[k]);
                    if (b.0 - c).abs() < 1e-9 {
                        b.1
                    } else if a.1 <= 0.0 || b.1 <= 0.0 {
                        0.0
                    } else {
                        a.1 + (b.1 - a.1) * (c - a.0) / (b.0 - a.0)
                    }
                }
            }
        };
        let ds = dataset_model(&profile.model);
        // Samples per second per GPU at the proportional share, in MB/s of input.
        let fair_mb_s = if profile.iter_time_s > 0.0 {
            profile.batch / profile.iter_time_s * ds.sample_kb / 1000.0
        } else {
            0.0
        };
        let storage = self.storage_mb_s_per_gpu;
        let io_cap = |m: f64| -> f64 {
            if m < ds.working_set_gb {
                return 0.0;
            }
            let cached = (m * g / ds.dataset_gb.max(1e-9)).min(1.0);
            if cached >= 1.0 || fair_mb_s <= 0.0 {
                f64::INFINITY
            } else {
                storage / (1.0 - cached) / fair_mb_s
            }
        };
        SensitivityTable::from_fn(truth.mem_levels().to_vec(), |c, m| {
            cpu_curve(c).min(io_cap(m))
        })
    }
}

impl Profiler for OptimisticProfiler {
    fn cost(&self) -> SimDuration {
        self.cost
    }

    fn profile(&self, job: &TrainingJob, cluster: &Cluster, rng: &mut SimRng) -> Knowledge {
        let Some(p) = SynergyProfiles::builtin().for_gpus(&job.model, job.gpus) else {
            return Knowledge::new();
        };
        let table = self.estimate_table(p, job.gpus, ServerShape::of(cluster), rng);
        Knowledge::of(SensitivityEstimate::from_table(table))
    }
}

/// Converts GB (GiB) per GPU to bytes.
pub fn gb_to_bytes(gb: f64) -> Bytes {
    Bytes((gb.max(0.0) * Bytes::GIB as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::{MilliCpu, NodeId, NodeShare, SimTime};

    fn profiles() -> &'static SynergyProfiles {
        SynergyProfiles::builtin()
    }

    #[test]
    fn builtin_tables_parse_and_fair_point_is_one() {
        let p = profiles();
        assert!(
            p.models().count() >= 10,
            "{:?}",
            p.models().collect::<Vec<_>>()
        );
        for m in ["alexnet", "res18", "gnmt", "m5", "deepspeech"] {
            for g in [1, 2, 4] {
                let t = &p.for_gpus(m, g).unwrap().table;
                assert_eq!(t.relative(3.0, 62.5), 1.0, "{m}_{g}");
            }
        }
        assert_eq!(p.iter_time("alexnet"), Some(0.6));
    }

    #[test]
    fn hashed_lookup_finds_every_profile_and_nothing_else() {
        let p = profiles();
        for ((m, g), want) in &p.by_key {
            assert_eq!(p.exact(m, *g), Some(want), "{m}_{g}");
            assert_eq!(p.exact(&m.to_ascii_uppercase(), *g), Some(want), "{m}_{g}");
            assert_eq!(p.exact(m, g + 100), None, "{m}_{}", g + 100);
            assert_eq!(p.exact(&format!("{m}x"), *g), None);
        }
        assert_eq!(p.exact("", 1), None);
        let empty = SynergyProfiles::indexed(Vec::new());
        assert_eq!(empty.exact("alexnet", 1), None);
        assert_eq!(empty.models().count(), 0);
    }

    #[test]
    fn interpolation_is_bilinear_and_respects_infeasible_points() {
        let t = &profiles().exact("alexnet", 1).unwrap().table;
        assert_eq!(t.relative(12.0, 125.0), 2.94);
        // Halfway between 9 (2.0) and 12 (2.94) CPUs at 125 GB.
        assert!((t.relative(10.5, 125.0) - 2.47).abs() < 1e-12);
        // Towards the 20.83 GB column every point is 0.1 (feasible, just slow).
        assert!((t.relative(3.0, 20.83) - 0.1).abs() < 1e-12);
        let t2 = &profiles().exact("alexnet", 2).unwrap().table;
        assert_eq!(t2.relative(9.0, 62.5), 2.33);
        assert_eq!(
            t2.relative(10.0, 62.5),
            0.0,
            "12 CPUs/GPU is infeasible for 2 GPUs"
        );
        // Outside the grid: nearest edge.
        assert_eq!(t2.relative(3.0, 20.0), 1.0);
    }

    /// Issue 36: `fifo+proportional` stopped with "throughput 0" on servers with more CPUs
    /// per GPU than Synergy's (64 cores / 8 GPUs = 8 per GPU, between the 4-GPU tables'
    /// measured 6 and unmeasured 9): the truth uses the best measured point within the
    /// allocation instead, and is never 0.
    #[test]
    fn unmeasured_allocations_run_at_the_best_measured_point_within_them() {
        let t4 = &profiles().exact("alexnet", 4).unwrap().table;
        assert_eq!(
            t4.relative(8.0, 64.0),
            0.0,
            "interpolates towards 9 CPUs, unmeasured"
        );
        assert_eq!(t4.relative_measured(8.0, 64.0), 1.75, "6 CPUs, 62.5 GB");
        assert_eq!(t4.relative_measured(12.0, 128.0), 1.75);
        assert_eq!(t4.relative_measured(4.0, 62.5), t4.relative(4.0, 62.5));
        // Below every measured memory: the slowest measured speed.
        assert_eq!(t4.relative_measured(1.0, 16.0), t4.relative(1.0, 62.5));
        let truth = SynergyThroughput::new(TableMode::PerGpuCount);
        for model in truth.profiles.models().collect::<Vec<_>>() {
            for gpus in [1, 2, 4, 8] {
                let t = &truth.profiles.for_gpus(model, gpus).unwrap().table;
                for cpu in [0.5, 1.0, 2.5, 4.0, 8.0, 12.0, 16.0, 30.0] {
                    for mem in [4.0, 16.0, 40.0, 64.0, 128.0, 300.0] {
                        let r = t.relative_measured(cpu, mem);
                        assert!(r.is_finite() && r > 0.0, "{model}_{gpus} {cpu} {mem}: {r}");
                    }
                }
            }
        }
    }

    #[test]
    fn best_case_is_the_smallest_point_at_the_maximum() {
        let p = profiles();
        let best = |m: &str| p.exact(m, 1).unwrap().table.best_case();
        assert_eq!(best("alexnet"), (12.0, 125.0, 2.94));
        assert_eq!(best("m5"), (6.0, 187.5, 2.5));
        assert_eq!(best("res18"), (9.0, 62.5, 2.4));
        assert_eq!(best("gnmt"), (1.0, 20.83, 1.0));
    }

    #[test]
    fn truth_scales_base_throughput_by_the_table() {
        let cluster = Cluster::homogeneous(
            "V100-32GB",
            1,
            8,
            MilliCpu::from_cores(24),
            Bytes::from_gib(500),
        )
        .unwrap();
        let mut job = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(600));
        job.model = "alexnet".into();
        let alloc = |cores: u64, gb: f64| {
            Allocation::single(NodeShare {
                node: NodeId(0),
                gpus: 1,
                cpu: MilliCpu::from_cores(cores),
                memory: gb_to_bytes(gb),
                devices: None,
            })
        };
        let truth = SynergyThroughput::new(TableMode::PerGpuCount);
        let base = job.reference_throughput();
        assert_eq!(truth.throughput(&job, &alloc(3, 62.5), &cluster), base);
        assert!((truth.throughput(&job, &alloc(12, 125.0), &cluster) - 2.94 * base).abs() < 1e-9);
        assert!((truth.throughput(&job, &alloc(3, 20.83), &cluster) - 0.1 * base).abs() < 1e-9);
        let r = ReferenceSpeedup::default();
        assert!((r.throughput(&job, &alloc(12, 125.0), &cluster) - 2.94 * base).abs() < 1e-9);
        assert!((r.throughput(&job, &alloc(3, 62.5), &cluster) - base).abs() < 1e-9);
    }

    #[test]
    fn reference_demand_caps_at_one_server() {
        let p = profiles().exact("alexnet", 1).unwrap();
        let s = ServerShape {
            gpus: 8.0,
            cpus: 24.0,
            mem: 500.0,
        };
        assert_eq!(reference_demand(p, 1, s), (12.0, 125.0, 2.94));
        assert_eq!(reference_demand(p, 2, s), (12.0, 125.0, 2.94));
        // 4 GPUs: 48 CPUs capped at 24 → speed-up 1 + 1.94 · (24 − 12) / (48 − 12).
        let (c, m, sp) = reference_demand(p, 4, s);
        assert_eq!((c, m), (6.0, 125.0));
        assert!((sp - (1.0 + 1.94 * 12.0 / 36.0)).abs() < 1e-12);
        // 16 GPUs: more than a server, proportional share.
        assert_eq!(reference_demand(p, 16, s), (3.0, 62.5, 1.0));
    }

    #[test]
    fn optimistic_profile_finds_the_reference_best_case_for_image_and_language() {
        let prof = OptimisticProfiler::default();
        let s = ServerShape {
            gpus: 8.0,
            cpus: 24.0,
            mem: 500.0,
        };
        let mut rng = SimRng::seed_from_u64(1);
        let est = |m: &str, rng: &mut SimRng| {
            SensitivityEstimate::from_table(prof.estimate_table(
                profiles().exact(m, 1).unwrap(),
                1,
                s,
                rng,
            ))
        };
        let a = est("alexnet", &mut rng);
        assert_eq!((a.best_cpu_per_gpu, a.best_mem_per_gpu), (12.0, 125.0));
        assert!((a.speedup - 2.94).abs() < 1e-9);
        assert_eq!(a.relative(3.0, 62.5), 1.0);
        assert_eq!(a.relative(3.0, 20.83), 0.0, "below the working set");
        let g = est("gnmt", &mut rng);
        assert_eq!(
            (g.best_cpu_per_gpu, g.best_mem_per_gpu, g.speedup),
            (1.0, 20.83, 1.0)
        );
        let m5 = est("m5", &mut rng);
        assert_eq!((m5.best_cpu_per_gpu, m5.best_mem_per_gpu), (6.0, 187.5));
    }
}
