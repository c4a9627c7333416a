//! Performance models: how fast a job runs on an allocation, and what restarting it costs.
//!
//! The simulator advances jobs by a [`ThroughputModel`] (the *truth*); policies see estimates.
//! Later mechanisms plug in here: CPU/memory sensitivity (Synergy), GPU types and parallel
//! plans (Crius), MIG slices (MISO), GPU shares (Dilu). Mechanism-specific models live with
//! their mechanism in `tessera-mechanisms`; this crate holds the generic traits and models.
//!
//! - [`TraceThroughput`]: the foundation model. A job runs at the reference throughput its
//!   trace implies (`iterations / duration`) on the GPUs it asked for, scaled linearly when it
//!   holds a different number.
//! - [`RestartCosts`]: checkpoint + restore seconds per model, charged on every restart.
//! - [`Profiler`]: what a driver learns about a job when it arrives, as typed
//!   [`Knowledge`] (mechanisms bring their own profilers; see `tessera-mechanisms`).
//! - [`roofline`]: a device's compute roof and memory slope (kernel time from FLOPs and bytes).
//! - [`collective`]: α–β costs of all-reduce, all-gather, reduce-scatter, all-to-all and
//!   rooted collectives, inside a node and across nodes.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

use std::collections::BTreeMap;
use std::fmt;

pub mod collective;
pub mod config;
pub mod roofline;

pub use config::{ConfigEstimate, ConfigEstimates};

use tessera_model::{Allocation, Cluster, Knowledge, SimDuration, SimRng, TrainingJob};

/// Iterations per second of a job on an allocation.
///
/// Implementations must be pure (same inputs, same answer) and return a finite, non-negative
/// rate; zero means the allocation cannot run the job.
pub trait ThroughputModel: Send + Sync {
    /// Throughput of `job` on `alloc` in `cluster`, in iterations per second.
    fn throughput(&self, job: &TrainingJob, alloc: &Allocation, cluster: &Cluster) -> f64;

    /// True when a job's speed depends on who shares its GPUs (quotas, MPS): drivers then
    /// call [`throughput_among`](Self::throughput_among) and re-rate a job whenever a
    /// neighbour arrives, leaves or is retuned.
    fn depends_on_neighbours(&self) -> bool {
        false
    }

    /// True when [`throughput`](Self::throughput) is always [`proportional_throughput`] of the
    /// job's reference throughput, the GPUs its allocation holds and the GPUs it asks for,
    /// whatever else the allocation or the cluster say: a driver may then compute it from
    /// those three numbers, kept where it keeps the job's progress, without reading the job.
    fn proportional_to_gpus(&self) -> bool {
        false
    }

    /// Throughput of `job` on `alloc` while `neighbours` (job, allocation) hold quota shares
    /// of the same GPUs. Default: neighbours do not matter.
    fn throughput_among(
        &self,
        job: &TrainingJob,
        alloc: &Allocation,
        cluster: &Cluster,
        _neighbours: &[(&TrainingJob, &Allocation)],
    ) -> f64 {
        self.throughput(job, alloc, cluster)
    }
}

/// Learns about a job when it arrives (e.g. Synergy's optimistic profiling, MISO's MPS
/// phase). A driver calls [`profile`](Profiler::profile) once per job and makes the job
/// visible to the policy after [`cost`](Profiler::cost), carrying what was learned in its
/// knowledge.
pub trait Profiler: Send + Sync + fmt::Debug {
    /// How long profiling takes (the job waits, holding no cluster resources).
    fn cost(&self) -> SimDuration;
    /// GPUs profiling occupies while it runs (reported, not taken from the cluster).
    fn gpus(&self) -> u32 {
        1
    }
    /// What profiling `job` teaches; empty when nothing can be learned (unknown model).
    fn profile(&self, job: &TrainingJob, cluster: &Cluster, rng: &mut SimRng) -> Knowledge;
}

/// Several profilers run one after the other on each arriving job (e.g. the truth's own and
/// the one a policy of another mechanism reads): their knowledge merged, their costs added,
/// the most GPUs any of them occupies.
#[derive(Debug, Clone)]
pub struct Profilers(Vec<std::sync::Arc<dyn Profiler>>);

impl Profilers {
    /// The profilers, run in this order (each draws its noise from the run's seeded stream
    /// in turn).
    pub fn new(profilers: Vec<std::sync::Arc<dyn Profiler>>) -> Profilers {
        Profilers(profilers)
    }
}

impl Profiler for Profilers {
    fn cost(&self) -> SimDuration {
        self.0
            .iter()
            .fold(SimDuration::ZERO, |acc, p| acc + p.cost())
    }

    fn gpus(&self) -> u32 {
        self.0.iter().map(|p| p.gpus()).max().unwrap_or(0)
    }

    fn profile(&self, job: &TrainingJob, cluster: &Cluster, rng: &mut SimRng) -> Knowledge {
        let mut k = Knowledge::new();
        for p in &self.0 {
            k.merge(p.profile(job, cluster, rng));
        }
        k
    }
}

/// The trace is the truth: reference throughput on the requested GPU count, scaled linearly
/// with the GPUs actually held (the usual assumption of trace-driven simulators when nothing
/// better is known).
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceThroughput;

impl ThroughputModel for TraceThroughput {
    fn throughput(&self, job: &TrainingJob, alloc: &Allocation, cluster: &Cluster) -> f64 {
        held_throughput(job.reference_throughput(), alloc, cluster, job.gpus)
    }

    fn proportional_to_gpus(&self) -> bool {
        true
    }
}

/// The throughput of a job whose speed is its reference throughput (on the GPUs it asks for)
/// scaled by the GPUs it holds: `reference` × `held` / `asked`, 0 when either count is 0.
pub fn proportional_throughput(reference: f64, held: u32, asked: u32) -> f64 {
    if held == 0 || asked == 0 {
        return 0.0;
    }
    reference * held as f64 / asked as f64
}

/// [`proportional_throughput`] of what `alloc` holds, GPUs held in parts counted by their
/// share ([`gpu_equivalents`]): a trace gives no speed per MIG slice or quota, so compute is
/// taken as linear in it (a 3g slice of 7 runs a one-GPU job at 3/7 of its speed). An
/// allocation of whole GPUs only gives exactly `proportional_throughput` of its GPUs.
#[inline]
pub fn held_throughput(reference: f64, alloc: &Allocation, cluster: &Cluster, asked: u32) -> f64 {
    if alloc
        .part()
        .is_none_or(|p| matches!(p, tessera_model::GpuPart::Whole))
    {
        return proportional_throughput(reference, alloc.gpus(), asked);
    }
    if asked == 0 {
        return 0.0;
    }
    reference * gpu_equivalents(alloc, cluster) / f64::from(asked)
}

/// The GPUs an allocation holds, parts counted by their share of a GPU: a MIG instance by
/// its compute slices out of 7, a quota by its SM request (permille); an instance of a
/// profile the catalog does not know counts nothing.
pub fn gpu_equivalents(alloc: &Allocation, cluster: &Cluster) -> f64 {
    use tessera_model::GpuPart;
    let mut held = f64::from(alloc.gpus());
    for s in &alloc.shares {
        let Some(d) = s.devices else { continue };
        let per_gpu = match d.part {
            GpuPart::Whole => 0.0,
            GpuPart::Mig(inst) => cluster
                .nodes
                .get(s.node.index())
                .and_then(|n| cluster.catalog.mig_geometry(n.gpu))
                .and_then(|geo| geo.profile(inst))
                .map_or(0.0, |p| f64::from(p.compute_slices) / 7.0),
            GpuPart::Quota { sm_request, .. } => f64::from(sm_request) / 1000.0,
        };
        held += per_gpu * f64::from(d.gpus.count());
    }
    held
}

/// A paper's truth made total, so that any policy runs under it: its tables rate whole GPUs
/// of the models they know (Synergy's, Crius's, Gavel's), and a policy of another mechanism
/// may hand a job a MIG instance, a quota, or a GPU the tables find too small for the model.
/// Where the inner truth rates an allocation 0:
/// - held in parts (MIG instances, quotas): the inner truth's speed on the same GPUs taken
///   whole, scaled by the share of them it holds ([`gpu_equivalents`]), as the trace's truth
///   does;
/// - otherwise (or when even the whole GPUs rate 0: the tables' estimator finds the model
///   does not fit them): the trace's rate for what it holds ([`TraceThroughput`]) — the job
///   ran in its trace — rather than stopping the run.
///
/// An allocation the inner truth rates itself keeps its rate, so every figure a paper's
/// truth gave stays as it was.
pub struct FallbackRates(pub std::sync::Arc<dyn ThroughputModel>);

impl FallbackRates {
    /// `own` when the inner truth gave a speed, else the share-scaled or the trace's rate.
    fn or_fallback(
        &self,
        own: f64,
        job: &TrainingJob,
        alloc: &Allocation,
        cluster: &Cluster,
    ) -> f64 {
        if own > 0.0 && own.is_finite() {
            own
        } else if holds_parts(alloc) {
            self.by_share(job, alloc, cluster)
        } else {
            TraceThroughput.throughput(job, alloc, cluster)
        }
    }

    fn by_share(&self, job: &TrainingJob, alloc: &Allocation, cluster: &Cluster) -> f64 {
        let whole = whole_gpus_of(alloc);
        let held = whole.gpus();
        if held == 0 {
            return 0.0;
        }
        let rate = self.0.throughput(job, &whole, cluster) * gpu_equivalents(alloc, cluster)
            / f64::from(held);
        if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            // The tables rate even the whole GPUs 0 (their estimator finds the model does
            // not fit them): the trace's own rate for the share, as the job ran in its trace.
            TraceThroughput.throughput(job, alloc, cluster)
        }
    }
}

/// Whether `alloc` holds some GPU in parts.
fn holds_parts(alloc: &Allocation) -> bool {
    alloc.shares.iter().any(|s| {
        s.devices
            .is_some_and(|d| !matches!(d.part, tessera_model::GpuPart::Whole))
    })
}

/// `alloc` with every GPU it holds a part of taken whole.
fn whole_gpus_of(alloc: &Allocation) -> Allocation {
    let mut whole = alloc.clone();
    for s in &mut whole.shares {
        if let Some(d) = s.devices.as_mut() {
            if !matches!(d.part, tessera_model::GpuPart::Whole) {
                s.gpus += d.gpus.count();
                d.part = tessera_model::GpuPart::Whole;
            }
        }
    }
    whole
}

impl ThroughputModel for FallbackRates {
    fn throughput(&self, job: &TrainingJob, alloc: &Allocation, cluster: &Cluster) -> f64 {
        let own = self.0.throughput(job, alloc, cluster);
        self.or_fallback(own, job, alloc, cluster)
    }

    fn depends_on_neighbours(&self) -> bool {
        self.0.depends_on_neighbours()
    }

    fn proportional_to_gpus(&self) -> bool {
        self.0.proportional_to_gpus()
    }

    fn throughput_among(
        &self,
        job: &TrainingJob,
        alloc: &Allocation,
        cluster: &Cluster,
        neighbours: &[(&TrainingJob, &Allocation)],
    ) -> f64 {
        let own = self.0.throughput_among(job, alloc, cluster, neighbours);
        self.or_fallback(own, job, alloc, cluster)
    }
}

/// Seconds lost when a job is stopped and started again (checkpoint plus restore), per model.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RestartCosts {
    per_model: BTreeMap<String, SimDuration>,
    default: SimDuration,
    /// Plan (re-)tuning on top: (seconds per GPU of the new allocation, cap).
    per_gpu: Option<(SimDuration, SimDuration)>,
}

/// Restart cost for models the table does not name.
pub const DEFAULT_RESTART_COST: SimDuration = SimDuration::from_secs(30);

impl Default for RestartCosts {
    /// Restore times measured by MISO (SoCC'22) per model family, doubled to cover the
    /// checkpoint as well; other models cost [`DEFAULT_RESTART_COST`].
    fn default() -> Self {
        let restore_secs = [
            ("embedding", 4),
            ("gnn", 5),
            ("transformer", 5),
            ("mobilenet", 7),
            ("resnet", 9),
            ("deepspeech2", 14),
            ("bert", 18),
            ("cyclegan", 44),
        ];
        RestartCosts {
            per_model: restore_secs
                .iter()
                .map(|(m, s)| (m.to_string(), SimDuration::from_secs(2 * s)))
                .collect(),
            default: DEFAULT_RESTART_COST,
            per_gpu: None,
        }
    }
}

impl RestartCosts {
    /// Every model costs the same.
    pub fn uniform(cost: SimDuration) -> RestartCosts {
        RestartCosts {
            per_model: BTreeMap::new(),
            default: cost,
            per_gpu: None,
        }
    }

    /// A table of costs per model family (matched as [`for_model`](Self::for_model) does),
    /// `default` for the rest.
    pub fn per_model(
        table: impl IntoIterator<Item = (String, SimDuration)>,
        default: SimDuration,
    ) -> RestartCosts {
        RestartCosts {
            per_model: table
                .into_iter()
                .map(|(m, c)| (m.to_ascii_lowercase(), c))
                .collect(),
            default,
            per_gpu: None,
        }
    }

    /// Adds plan tuning to every restart: `per_gpu` for each GPU of the new allocation, at
    /// most `cap` (Crius: 10 s/GPU up to 40 s; a full search: 150 s/GPU up to 600 s).
    pub fn with_per_gpu(mut self, per_gpu: SimDuration, cap: SimDuration) -> RestartCosts {
        self.per_gpu = Some((per_gpu, cap));
        self
    }

    /// The cost of restarting `model` on `gpus` GPUs: [`for_model`](Self::for_model)'s
    /// checkpoint + restore plus the per-GPU tuning up to its cap.
    pub fn for_restart(&self, model: &str, gpus: u32) -> SimDuration {
        self.checkpoint_restore(model) + self.tuning(gpus)
    }

    /// The part of [`for_restart`](Self::for_restart) that depends on the model only
    /// (checkpoint + restore): a driver restarting the same job often may look it up once.
    pub fn checkpoint_restore(&self, model: &str) -> SimDuration {
        self.base_for_model(model)
    }

    /// The part of [`for_restart`](Self::for_restart) that depends on the GPU count only
    /// (plan tuning, zero unless [`with_per_gpu`](Self::with_per_gpu)).
    pub fn tuning(&self, gpus: u32) -> SimDuration {
        self.per_gpu.map_or(SimDuration::ZERO, |(rate, cap)| {
            SimDuration::from_micros(rate.as_micros().saturating_mul(u64::from(gpus))).min(cap)
        })
    }

    /// No restart costs at all (for hand-checked scenarios).
    pub fn free() -> RestartCosts {
        RestartCosts::uniform(SimDuration::ZERO)
    }

    /// The cost of restarting `model` when the GPU count is not known: checkpoint + restore,
    /// plus the per-GPU tuning (if any) at its cap.
    pub fn for_model(&self, model: &str) -> SimDuration {
        self.base_for_model(model) + self.per_gpu.map_or(SimDuration::ZERO, |(_, cap)| cap)
    }

    /// Checkpoint + restore for a model: an exact match, else the longest table key that
    /// prefixes the model name (`resnet50` → `resnet`), else the default.
    fn base_for_model(&self, model: &str) -> SimDuration {
        // Asked at every restart: no table, or a name already in lower case, costs no copy.
        if self.per_model.is_empty() {
            return self.default;
        }
        let model: std::borrow::Cow<'_, str> = if model.bytes().any(|b| b.is_ascii_uppercase()) {
            model.to_ascii_lowercase().into()
        } else {
            model.into()
        };
        if let Some(c) = self.per_model.get(model.as_ref()) {
            return *c;
        }
        self.per_model
            .iter()
            .filter(|(k, _)| model.starts_with(k.as_str()))
            .max_by_key(|(k, _)| k.len())
            .map(|(_, c)| *c)
            .unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::{Bytes, MilliCpu, NodeId, NodeShare, SimTime};

    #[test]
    fn trace_throughput_scales_with_gpus() {
        let cluster = Cluster::homogeneous(
            "V100-32GB",
            2,
            8,
            MilliCpu::from_cores(48),
            Bytes::from_gib(512),
        )
        .unwrap();
        let job = TrainingJob::simple(0, SimTime::ZERO, 4, SimDuration::from_secs(100));
        let share = |gpus| NodeShare {
            node: NodeId(0),
            gpus,
            cpu: MilliCpu(0),
            memory: Bytes(0),
            devices: None,
        };
        let at =
            |gpus| TraceThroughput.throughput(&job, &Allocation::single(share(gpus)), &cluster);
        assert_eq!(at(4), 1.0);
        assert_eq!(at(2), 0.5);
        assert_eq!(at(0), 0.0);
    }

    #[test]
    fn restart_cost_by_prefix() {
        let c = RestartCosts::default();
        assert_eq!(c.for_model("resnet50"), SimDuration::from_secs(18));
        assert_eq!(c.for_model("BERT-large"), SimDuration::from_secs(36));
        assert_eq!(c.for_model("unknown"), DEFAULT_RESTART_COST);
        assert_eq!(RestartCosts::free().for_model("bert"), SimDuration::ZERO);
        let t = RestartCosts::per_model(
            [("ResNet".to_string(), SimDuration::from_secs(9))],
            SimDuration::from_secs(1),
        );
        assert_eq!(t.for_model("resnet50"), SimDuration::from_secs(9));
        assert_eq!(t.checkpoint_restore("ResNet50"), SimDuration::from_secs(9));
        assert_eq!(
            c.checkpoint_restore("BERT-large"),
            SimDuration::from_secs(36)
        );
        assert_eq!(t.for_model("gnn"), SimDuration::from_secs(1));
    }

    /// Crius's re-tuning: 30 s checkpoint + 10 s per GPU up to 40 s; a full search: 150 s
    /// per GPU up to 600 s. Without a GPU count, the cap is charged.
    #[test]
    fn per_gpu_tuning_is_charged_up_to_its_cap() {
        let s = SimDuration::from_secs;
        let crius = RestartCosts::uniform(s(30)).with_per_gpu(s(10), s(40));
        let full = RestartCosts::uniform(s(30)).with_per_gpu(s(150), s(600));
        for (gpus, c, f) in [
            (0, 30, 30),
            (1, 40, 180),
            (2, 50, 330),
            (4, 70, 630),
            (16, 70, 630),
        ] {
            assert_eq!(crius.for_restart("bert-1.3b", gpus), s(c), "{gpus}");
            assert_eq!(full.for_restart("bert-1.3b", gpus), s(f), "{gpus}");
            // The two parts a driver may look up separately.
            assert_eq!(crius.checkpoint_restore("bert-1.3b"), s(30));
            assert_eq!(crius.tuning(gpus), s(c - 30), "{gpus}");
            assert_eq!(full.tuning(gpus), s(f - 30), "{gpus}");
        }
        assert_eq!(crius.for_model("x"), s(70));
        assert_eq!(full.for_model("x"), s(630));
        assert_eq!(RestartCosts::uniform(s(30)).for_restart("x", 8), s(30));
    }
}
