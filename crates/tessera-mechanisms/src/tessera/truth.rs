//! The composed truth (`--perf tessera`): a job's rate on an allocation is its trace's rate on
//! what it asked for, times one factor per mechanism, each exactly 1.0 at the job's requested
//! allocation (docs/truth.md):
//!
//! ```text
//! rate = reference (iterations / duration, on the GPUs asked for)
//!      × type & count  rate(held types, count, nodes, plan) / rate(reference type, asked count)
//!                      — Crius's cells for large models, else Gavel's matrix for its job types
//!                        on its GPU types, else the catalog roofline × a sublinear
//!                        data-parallel efficiency; across GPU types, HAP's uneven shards
//!      × sub-GPU       MISO's slice speeds (MIG), Dilu's training curves (quotas), relative
//!                      to the slice or share the job asked for
//!      × CPU/memory    Synergy's sensitivity tables, relative to the CPU and memory asked for
//!                      (or the reference type's GPU-proportional share)
//!      × interference  MISO's MPS co-location penalty when a neighbour shares a quota's GPU
//! ```
//!
//! Lookups are memoised per (model, batch, GPU count) and per table rate, so a job start costs
//! a hash lookup and a few multiplications.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::crius::cells::{Device, HwOptions};
use tessera_model::{
    Allocation, Cluster, GpuModelId, GpuPart, Knowledge, ParallelPlan, SimDuration, SimRng,
    TrainingJob,
};
use tessera_perf::{ConfigEstimate, ConfigEstimates, Profiler, Profilers, ThroughputModel};
use tessera_sched::PolicyOptions;

#[path = "truth_factors.rs"]
pub mod factors;

use crate::crius::perf::CellThroughput;
use crate::gavel::matrix::{GavelMatrix, JobTypeKey};
use crate::miso::truth::{SliceTable, MPS_PENALTY};
use crate::{Mechanism, Truth, TruthInfo, TruthOptions};
use factors::{asked_sub_gpu, default_efficiency, roofline_speed, Facts, ModelFacts};

/// The composed truth's registry name.
pub const NAME: &str = "tessera";

/// The truths this module registers.
pub const TRUTHS: &[TruthInfo] = &[TruthInfo {
    name: NAME,
    about: "composed: the trace's rate × GPU type and count (Crius cells, Gavel matrix, roofline; HAP across types) × MIG slice (MISO) or quota (Dilu) × CPU/memory (Synergy) × MPS interference, each 1.0 at the job's request (docs/truth.md)",
}];

/// Builds one of [`TRUTHS`] by name. The composed truth profiles nothing itself: a policy
/// that reads knowledge gets its mechanism's profiler ([`crate::run_profiler`]), so that each
/// policy pays for the profiling it needs and FIFO beside it pays none.
pub fn build(name: &str, _options: &TruthOptions) -> Option<Truth> {
    name.eq_ignore_ascii_case(NAME).then(|| Truth {
        name: NAME,
        model: ComposedTruth::shared() as Arc<dyn ThroughputModel>,
        profiler: None,
    })
}

/// The factors of one job's rate on one allocation (each 1.0 at its requested allocation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Factors {
    /// GPU type, count, nodes and plan (one table gives them together where it can).
    pub type_and_count: f64,
    /// MIG slice or quota share held, relative to what the job asked for.
    pub sub_gpu: f64,
    /// CPU and memory held, relative to what the job asked for.
    pub cpu_memory: f64,
    /// Neighbours sharing its GPUs.
    pub interference: f64,
}

impl Factors {
    /// Every factor 1.
    pub const ONE: Factors = Factors {
        type_and_count: 1.0,
        sub_gpu: 1.0,
        cpu_memory: 1.0,
        interference: 1.0,
    };

    /// Their product, within [1e-4, 1e4] (a finite, positive speed-up whatever the inputs).
    pub fn product(&self) -> f64 {
        let p = sane(self.type_and_count)
            * sane(self.sub_gpu)
            * sane(self.cpu_memory)
            * sane(self.interference);
        p.clamp(MIN_SPEEDUP, MAX_SPEEDUP)
    }
}

/// Bounds of the composed speed-up: no allocation makes a job more than 10^4 times slower or
/// faster than its trace says (the tables' ratios stay far inside).
pub const MIN_SPEEDUP: f64 = 1e-4;
/// See [`MIN_SPEEDUP`].
pub const MAX_SPEEDUP: f64 = 1e4;

fn sane(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        1.0
    }
}

/// The GPU type a job's trace duration is read on, and its GPU-proportional share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reference {
    /// The type: among those the job may use (all when untyped), the one the cluster has the
    /// most GPUs of; ties to the catalog name first in byte order, then the lower id.
    pub gpu: GpuModelId,
    /// GPUs per node of that type's largest group (its compact placement).
    pub per_node: u32,
    /// CPU cores per GPU of that group (the proportional share a job without a CPU request
    /// was traced with).
    pub cpu_per_gpu: f64,
    /// Memory GiB per GPU of that group.
    pub mem_per_gpu: f64,
}

/// The reference type of `job` on `cluster` ([`Reference`]); `None` for a cluster without
/// GPUs. A job typed only with types the cluster lacks is read on the cluster's own choice.
pub fn reference(job: &TrainingJob, cluster: &Cluster) -> Option<Reference> {
    let pick = |typed: bool| -> Option<GpuModelId> {
        let mut totals: Vec<(GpuModelId, u64)> = Vec::new();
        for g in &cluster.groups {
            if typed && !job.gpu_types.contains(&g.gpu) {
                continue;
            }
            if g.total_gpus() == 0 {
                continue;
            }
            match totals.iter_mut().find(|(t, _)| *t == g.gpu) {
                Some(e) => e.1 += g.total_gpus(),
                None => totals.push((g.gpu, g.total_gpus())),
            }
        }
        totals
            .into_iter()
            .max_by(|a, b| {
                a.1.cmp(&b.1).then_with(|| {
                    // Fewer GPUs lose; at equal counts the first name in byte order wins.
                    let (na, nb) = (
                        &cluster.catalog.get(a.0).name,
                        &cluster.catalog.get(b.0).name,
                    );
                    nb.cmp(na).then(b.0.cmp(&a.0))
                })
            })
            .map(|(t, _)| t)
    };
    let gpu = (!job.gpu_types.is_empty())
        .then(|| pick(true))
        .flatten()
        .or_else(|| pick(false))?;
    let group = cluster
        .groups
        .iter()
        .filter(|g| g.gpu == gpu && g.gpus_per_node > 0)
        .fold(
            None,
            |best: Option<&tessera_model::NodeGroup>, g| match best {
                Some(b) if b.total_gpus() >= g.total_gpus() => Some(b),
                _ => Some(g),
            },
        )?;
    let per_node = group.gpus_per_node.max(1);
    Some(Reference {
        gpu,
        per_node,
        cpu_per_gpu: group.cpu.as_cores() / f64::from(per_node),
        mem_per_gpu: group.memory.as_gib() / f64::from(per_node),
    })
}

/// Most distinct GPU types of one allocation the truth tells apart (more are folded into the
/// last; no scheduler builds such allocations).
const MAX_TYPES: usize = 4;

/// What an allocation holds, summarised for the factors.
#[derive(Clone, Copy, Debug)]
struct Held {
    /// (type, GPUs per node of its group, devices) per distinct type.
    types: [(GpuModelId, u32, u32); MAX_TYPES],
    distinct: usize,
    /// Devices in all (whole GPUs, MIG instances' and quotas' GPUs).
    devices: u32,
    /// Nodes holding any device.
    nodes: u32,
    /// Every device is a whole GPU.
    whole: bool,
    /// The slowest part's relative speed (1 for whole GPUs).
    sub: f64,
    /// Neighbour interference.
    interference: f64,
    plan: Option<ParallelPlan>,
}

impl Held {
    fn add(&mut self, gpu: GpuModelId, per_node: u32, n: u32) {
        if let Some(e) = self.types[..self.distinct].iter_mut().find(|e| e.0 == gpu) {
            e.2 += n;
        } else if self.distinct < MAX_TYPES {
            self.types[self.distinct] = (gpu, per_node, n);
            self.distinct += 1;
        } else {
            self.types[MAX_TYPES - 1].2 += n;
        }
        self.devices += n;
    }

    fn whole(gpu: GpuModelId, per_node: u32, count: u32) -> Held {
        let per_node = per_node.max(1);
        let mut h = Held::empty();
        h.add(gpu, per_node, count);
        h.nodes = count.div_ceil(per_node);
        h
    }

    fn empty() -> Held {
        Held {
            types: [(GpuModelId(0), 1, 0); MAX_TYPES],
            distinct: 0,
            devices: 0,
            nodes: 0,
            whole: true,
            sub: 1.0,
            interference: 1.0,
            plan: None,
        }
    }
}

/// Which table gives a model's rates per (type, count, nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Source {
    Cells,
    Gavel,
}

/// Memo key of a table rate: facts, source, GPU name hash, GPUs per node, count, nodes, plan.
type RateKey = (u32, Source, u64, u32, u32, u32, Option<ParallelPlan>);

/// The composed truth. Share one ([`ComposedTruth::shared`]): its memo is its speed.
#[derive(Debug)]
pub struct ComposedTruth {
    matrix: Arc<GavelMatrix>,
    gavel_types: Vec<JobTypeKey>,
    /// The matrix's GPU types (lower case), longest first: a catalog name's type is the first
    /// that prefixes it (as `GavelMatrix::matrix_type`, without allocating per call).
    matrix_gpus: Vec<String>,
    slices: Arc<SliceTable>,
    hw: HwOptions,
    facts: RwLock<HashMap<u64, Vec<Facts>>>,
    next_id: AtomicU32,
    rates: RwLock<HashMap<RateKey, f64>>,
}

impl Default for ComposedTruth {
    fn default() -> Self {
        let matrix = GavelMatrix::builtin();
        let mut matrix_gpus: Vec<String> = matrix.gpu_types().map(str::to_string).collect();
        matrix_gpus.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        ComposedTruth {
            gavel_types: matrix.job_types(),
            matrix_gpus,
            matrix,
            slices: crate::miso::miso_table(),
            hw: HwOptions::default(),
            facts: RwLock::new(HashMap::new()),
            next_id: AtomicU32::new(0),
            rates: RwLock::new(HashMap::new()),
        }
    }
}

/// FNV-1a over bytes.
fn fnv(bytes: impl IntoIterator<Item = u8>, mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

impl ComposedTruth {
    /// The process's composed truth (one memo for the simulator's truth, profilers and
    /// policies).
    pub fn shared() -> Arc<ComposedTruth> {
        static SHARED: OnceLock<Arc<ComposedTruth>> = OnceLock::new();
        SHARED
            .get_or_init(|| Arc::new(ComposedTruth::default()))
            .clone()
    }

    /// The matrix's GPU type of a catalog GPU (`V100-16GB` → `v100`).
    fn matrix_gpu(&self, catalog_name: &str) -> Option<&str> {
        self.matrix_gpus
            .iter()
            .find(|t| {
                catalog_name
                    .get(..t.len())
                    .is_some_and(|p| p.eq_ignore_ascii_case(t))
            })
            .map(String::as_str)
    }

    /// The tables' facts about `job`'s model, looked up once per (model, batch, GPU count).
    pub fn facts(&self, job: &TrainingJob) -> Facts {
        let h = fnv(
            job.model
                .bytes()
                .chain(job.batch_size.map_or([0xff; 4], u32::to_le_bytes))
                .chain(job.gpus.to_le_bytes()),
            FNV_OFFSET,
        );
        if let Ok(m) = self.facts.read() {
            if let Some(f) = m.get(&h).and_then(|v| v.iter().find(|f| f.is_for(job))) {
                return Arc::clone(f);
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let f = Arc::new(ModelFacts::of(
            id,
            job,
            &self.matrix,
            &self.gavel_types,
            &self.slices,
        ));
        if let Ok(mut m) = self.facts.write() {
            let bucket = m.entry(h).or_default();
            if let Some(old) = bucket.iter().find(|g| g.is_for(job)) {
                return Arc::clone(old);
            }
            bucket.push(Arc::clone(&f));
        }
        f
    }

    /// The rate of a table source for `count` GPUs of `gpu` over `nodes` nodes (0 = the table
    /// says it does not run there).
    #[allow(clippy::too_many_arguments)]
    fn table_rate(
        &self,
        facts: &ModelFacts,
        source: Source,
        cluster: &Cluster,
        gpu: GpuModelId,
        per_node: u32,
        count: u32,
        nodes: u32,
        plan: Option<ParallelPlan>,
    ) -> f64 {
        let model = cluster.catalog.get(gpu);
        let key: RateKey = (
            facts.id,
            source,
            fnv(model.name.bytes(), FNV_OFFSET),
            per_node,
            count,
            nodes,
            plan,
        );
        if let Some(r) = self.rates.read().ok().and_then(|m| m.get(&key).copied()) {
            return r;
        }
        let r = match source {
            Source::Cells => facts.large.as_ref().map_or(0.0, |large| {
                let device = Device::from_gpu(model, per_node.max(1), &self.hw);
                let batch = facts
                    .batch
                    .filter(|&b| b > 0)
                    .unwrap_or(crate::crius::perf::DEFAULT_BATCH);
                CellThroughput::rate(large, batch, &device, count, nodes.max(1), plan)
            }),
            Source::Gavel => match (&facts.gavel, self.matrix_gpu(&model.name)) {
                (Some(k), Some(t)) => self
                    .matrix
                    .throughput(k, t, count, nodes > 1)
                    .unwrap_or(0.0),
                _ => 0.0,
            },
        };
        let r = if r.is_finite() && r > 0.0 { r } else { 0.0 };
        if let Ok(mut m) = self.rates.write() {
            m.insert(key, r);
        }
        r
    }

    /// The type-and-count factor: held rate over the rate on the reference type at the asked
    /// count, from the first source that covers both (cells, the matrix, the roofline).
    fn type_and_count(
        &self,
        facts: &ModelFacts,
        job: &TrainingJob,
        cluster: &Cluster,
        r: &Reference,
        held: &Held,
    ) -> f64 {
        let asked = job.gpus.max(1);
        let asked_nodes = asked.div_ceil(r.per_node);
        let n = held.devices.max(1);
        let types = &held.types[..held.distinct];
        let mut sources: [Option<Source>; 2] = [None, None];
        if facts.large.is_some() && held.whole {
            sources[0] = Some(Source::Cells);
        }
        let matrix_knows = |g: GpuModelId| self.matrix_gpu(&cluster.catalog.get(g).name).is_some();
        if facts.gavel.is_some()
            && matrix_knows(r.gpu)
            && types.iter().all(|&(g, _, _)| matrix_knows(g))
        {
            sources[1] = Some(Source::Gavel);
        }
        let mut out_of_memory = false;
        for source in sources.into_iter().flatten() {
            let ask = self.table_rate(
                facts,
                source,
                cluster,
                r.gpu,
                r.per_node,
                asked,
                asked_nodes,
                None,
            );
            if ask <= 0.0 {
                continue;
            }
            // HAP's uneven shards: each type works in proportion to its speed, so the rate is
            // the device-weighted mean of each type's rate at the whole count.
            let mut rate = 0.0;
            let mut fits = true;
            for &(g, per_node, k) in types {
                let t = self.table_rate(
                    facts, source, cluster, g, per_node, n, held.nodes, held.plan,
                );
                fits &= t > 0.0;
                rate += f64::from(k) / f64::from(n) * t;
            }
            if fits && rate > 0.0 {
                return rate / ask;
            }
            out_of_memory = true;
        }
        // The roofline: each type's speed on work of the model's intensity, summed (HAP),
        // times the data-parallel efficiency of the count.
        let intensity = facts.intensity;
        let speed_of = |g: GpuModelId| roofline_speed(cluster.catalog.get(g), intensity);
        let sum: f64 = types
            .iter()
            .map(|&(g, _, k)| f64::from(k) * speed_of(g))
            .sum();
        let widest = types.iter().map(|e| e.1).max().unwrap_or(1).max(1);
        let spread = held.nodes > n.div_ceil(widest);
        let held_rate = sum * default_efficiency(n, spread);
        let ask_rate = f64::from(asked) * speed_of(r.gpu) * default_efficiency(asked, false);
        let f = held_rate / ask_rate;
        if out_of_memory {
            f * factors::OUT_OF_MEMORY_PENALTY
        } else {
            f
        }
    }

    /// The CPU/memory factor: Synergy's table at the CPU and memory per device held over its
    /// value at what the job asked (its request, else the reference's proportional share).
    fn cpu_memory(
        facts: &ModelFacts,
        job: &TrainingJob,
        r: &Reference,
        held_cpu: f64,
        held_mem: f64,
    ) -> f64 {
        let Some(table) = facts.synergy else {
            return 1.0;
        };
        // An allocation naming no CPU and no memory comes from a policy that does not manage
        // them (MISO's): the job gets the node's default, taken as what it asked, not zero.
        if held_cpu <= 0.0 && held_mem <= 0.0 {
            return 1.0;
        }
        let g = f64::from(job.gpus.max(1));
        let ask_cpu = job.cpu.map_or(r.cpu_per_gpu, |c| c.as_cores() / g);
        let ask_mem = job.memory.map_or(r.mem_per_gpu, |m| m.as_gib() / g);
        // Integer millicores and bytes of a proportional split land a hair off the request.
        let snap = |held: f64, ask: f64| {
            if (held - ask).abs() <= 1e-3 * ask.abs() {
                ask
            } else {
                held
            }
        };
        let held = table.relative_measured(snap(held_cpu, ask_cpu), snap(held_mem, ask_mem));
        let ask = table.relative_measured(ask_cpu, ask_mem);
        held / ask
    }

    /// The factors of `job` on `alloc` beside `neighbours` (jobs and service instances holding
    /// quotas); `None` when the allocation holds no GPU of `cluster`.
    pub fn factors(
        &self,
        job: &TrainingJob,
        alloc: &Allocation,
        cluster: &Cluster,
        neighbours: &[(&TrainingJob, &Allocation)],
    ) -> Option<Factors> {
        let facts = self.facts(job);
        let mut held = Held::empty();
        held.plan = alloc.plan;
        for s in &alloc.shares {
            let Some(node) = cluster.nodes.get(s.node.index()) else {
                continue;
            };
            let d = s.device_count();
            if d == 0 {
                continue;
            }
            let per_node = cluster
                .groups
                .get(usize::from(node.group))
                .map_or(node.gpus, |g| g.gpus_per_node)
                .max(1);
            held.add(node.gpu, per_node, d);
            held.nodes += 1;
            let Some(dev) = s.devices else { continue };
            match dev.part {
                GpuPart::Whole => {}
                GpuPart::Mig(inst) => {
                    held.whole = false;
                    let slices = cluster
                        .catalog
                        .mig_geometry(node.gpu)
                        .and_then(|g| g.profile(inst))
                        .map_or(1, |p| p.compute_slices);
                    held.sub = held.sub.min(facts.slice_speed(slices));
                }
                GpuPart::Quota {
                    sm_request,
                    sm_limit,
                    ..
                } => {
                    held.whole = false;
                    for g in dev.gpus.iter() {
                        let share = crate::dilu::serving::static_share(
                            u32::from(sm_request),
                            u32::from(sm_limit),
                            s.node,
                            g,
                            neighbours,
                        );
                        held.sub = held
                            .sub
                            .min(facts.quota.relative(f64::from(share) / 1000.0));
                        if shares_quota_gpu(neighbours, s.node, g) {
                            held.interference = 1.0 - MPS_PENALTY;
                        }
                    }
                }
            }
        }
        if held.devices == 0 {
            return None;
        }
        let Some(r) = reference(job, cluster) else {
            return Some(Factors::ONE);
        };
        let devices = f64::from(held.devices);
        Some(Factors {
            type_and_count: self.type_and_count(&facts, job, cluster, &r, &held),
            sub_gpu: held.sub / asked_sub_gpu(job, &facts),
            cpu_memory: Self::cpu_memory(
                &facts,
                job,
                &r,
                alloc.cpu().as_cores() / devices,
                alloc.memory().as_gib() / devices,
            ),
            interference: held.interference,
        })
    }

    /// The composed rate (iterations per second) of `job` on `count` whole GPUs of type `gpu`
    /// of `cluster`, placed compactly, with the CPU and memory it asks for per GPU (else the
    /// type's GPU-proportional share) and no neighbours: the estimate a policy can score cells with. 0 when `count` is 0.
    pub fn rate_on(
        &self,
        job: &TrainingJob,
        cluster: &Cluster,
        gpu: GpuModelId,
        count: u32,
    ) -> f64 {
        if count == 0 {
            return 0.0;
        }
        let facts = self.facts(job);
        let Some(r) = reference(job, cluster) else {
            return job.reference_throughput() * f64::from(count) / f64::from(job.gpus.max(1));
        };
        let group = cluster
            .groups
            .iter()
            .filter(|g| g.gpu == gpu && g.gpus_per_node > 0)
            .fold(
                None,
                |best: Option<&tessera_model::NodeGroup>, g| match best {
                    Some(b) if b.total_gpus() >= g.total_gpus() => Some(b),
                    _ => Some(g),
                },
            );
        let per_node = group.map_or(r.per_node, |g| g.gpus_per_node).max(1);
        let held = Held::whole(gpu, per_node, count);
        let (fair_cpu, fair_mem) = group.map_or((r.cpu_per_gpu, r.mem_per_gpu), |g| {
            (
                g.cpu.as_cores() / f64::from(per_node),
                g.memory.as_gib() / f64::from(per_node),
            )
        });
        // What the job asks for per GPU where it asks, else the type's proportional share.
        let g = f64::from(job.gpus.max(1));
        let cpu = job.cpu.map_or(fair_cpu, |c| c.as_cores() / g);
        let mem = job.memory.map_or(fair_mem, |m| m.as_gib() / g);
        let f = Factors {
            type_and_count: self.type_and_count(&facts, job, cluster, &r, &held),
            sub_gpu: 1.0 / asked_sub_gpu(job, &facts),
            cpu_memory: Self::cpu_memory(&facts, job, &r, cpu, mem),
            interference: 1.0,
        };
        job.reference_throughput() * f.product()
    }

    /// [`rate_on`](Self::rate_on) of every GPU type of `cluster` the job may use, at every
    /// power-of-two count up to the type's GPUs and at the count it asks for.
    pub fn config_estimates(&self, job: &TrainingJob, cluster: &Cluster) -> ConfigEstimates {
        let mut totals: Vec<(GpuModelId, u64)> = Vec::new();
        for g in &cluster.groups {
            if !job.gpu_types.is_empty() && !job.gpu_types.contains(&g.gpu) {
                continue;
            }
            match totals.iter_mut().find(|(t, _)| *t == g.gpu) {
                Some(e) => e.1 += g.total_gpus(),
                None => totals.push((g.gpu, g.total_gpus())),
            }
        }
        let mut entries = Vec::new();
        for (gpu, total) in totals {
            let mut counts: Vec<u32> = (0..16)
                .map(|p| 1u32 << p)
                .filter(|&c| u64::from(c) <= total)
                .collect();
            if job.gpus > 0 && u64::from(job.gpus) <= total {
                counts.push(job.gpus);
            }
            for count in counts {
                entries.push(ConfigEstimate {
                    gpu,
                    count,
                    throughput: self.rate_on(job, cluster, gpu, count),
                    plan: None,
                });
            }
        }
        ConfigEstimates::new(entries)
    }
}

/// True when a neighbour holds a quota on GPU `gpu` of `node`.
fn shares_quota_gpu(
    neighbours: &[(&TrainingJob, &Allocation)],
    node: tessera_model::NodeId,
    gpu: u32,
) -> bool {
    neighbours.iter().any(|(_, a)| {
        a.shares.iter().any(|s| {
            s.node == node
                && s.devices.is_some_and(|d| {
                    matches!(d.part, GpuPart::Quota { .. }) && d.gpus.contains(gpu)
                })
        })
    })
}

impl ThroughputModel for ComposedTruth {
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
        match self.factors(job, alloc, cluster, neighbours) {
            Some(f) => {
                let rate = job.reference_throughput() * f.product();
                if rate.is_finite() && rate > 0.0 {
                    rate
                } else {
                    0.0
                }
            }
            None => 0.0,
        }
    }
}

/// What the composed truth estimates for a job on every (GPU type, count) of the cluster
/// ([`ComposedTruth::config_estimates`]), as knowledge for the `tessera` policy. Its own type,
/// so that it sits beside Crius's [`ConfigEstimates`] without replacing them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComposedEstimates(pub ConfigEstimates);

/// Attaches [`ComposedEstimates`], free: the estimate is analytic (as Crius's and Gavel's).
#[derive(Clone, Debug, Default)]
pub struct ComposedEstimator;

impl Profiler for ComposedEstimator {
    fn cost(&self) -> SimDuration {
        SimDuration::ZERO
    }

    fn gpus(&self) -> u32 {
        0
    }

    /// Also as plain [`ConfigEstimates`], which Crius's pass reads: without them a job of a
    /// model with no Crius cells (most of a mixed workload) was placed blind, on the
    /// cluster's first type only, and never upgraded. Crius's own estimator, composed after
    /// this one, replaces them where it has cells or a matrix.
    fn profile(&self, job: &TrainingJob, cluster: &Cluster, _rng: &mut SimRng) -> Knowledge {
        let est = ComposedTruth::shared().config_estimates(job, cluster);
        let mut k = Knowledge::of(est.clone());
        k.insert(ComposedEstimates(est));
        k
    }
}

/// The profiler of a `tessera` policy (any name [`super::policy::build`] accepts): the
/// composed estimates, Synergy's optimistic profiling (its sensitivity estimates, at its
/// cost) unless the name ablates `synergy`, and Crius's cell estimator (its proxy
/// [`ConfigEstimates`] and cells) unless it ablates `crius`. The other mechanisms' own
/// profilers, composed, never copied.
pub fn policy_profiler(policy: &str, options: &TruthOptions) -> Option<Arc<dyn Profiler>> {
    super::policy::build(policy, &PolicyOptions::default())?;
    let lower = policy.to_ascii_lowercase();
    let mut parts: Vec<Arc<dyn Profiler>> = vec![Arc::new(ComposedEstimator)];
    if !lower.contains("no-synergy") {
        parts.extend(crate::synergy::Synergy.policy_profiler("las+tune", options));
    }
    if !lower.contains("no-crius") {
        parts.extend(crate::crius::Crius.policy_profiler("crius", options));
    }
    Some(Arc::new(Profilers::new(parts)))
}

#[cfg(test)]
#[path = "truth_tests.rs"]
mod tests;
