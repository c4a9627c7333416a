//! Helpers the heterogeneity-aware policies share: the cluster's GPU types, a job's
//! per-configuration throughput as its knowledge states it, and placement on one GPU type.

use tessera_model::{Allocation, Cluster, GpuModelId, ParallelPlan, TrainingJob};
use tessera_perf::ConfigEstimates;
use tessera_sched::{ActiveJob, Ledger};

/// One GPU type of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GpuType {
    pub(crate) id: GpuModelId,
    /// GPUs of that type in the whole cluster.
    pub(crate) capacity: u64,
}

/// The cluster's GPU types, by type id (deterministic order).
pub(crate) fn cluster_types(cluster: &Cluster) -> Vec<GpuType> {
    super::matrix::gpu_types(cluster)
        .into_iter()
        .map(|(id, capacity, _)| GpuType { id, capacity })
        .collect()
}

/// The GPU type an allocation holds (its first node's).
pub(crate) fn type_of(cluster: &Cluster, alloc: &Allocation) -> Option<GpuModelId> {
    alloc
        .shares
        .first()
        .and_then(|s| cluster.nodes.get(s.node.index()))
        .map(|n| n.gpu)
}

/// Estimated throughput of `job` on `count` GPUs of `gpu`: its [`ConfigEstimates`] when a
/// profiler attached them, else (a type-blind driver) the trace's figure scaled linearly.
/// Zero when the job may not use that type, the type's nodes could never hold it (CPU or
/// memory included: aiming at them, it would wait for ever) or the estimate says infeasible.
pub(crate) fn throughput_on(
    cluster: &Cluster,
    job: &ActiveJob,
    spec: &TrainingJob,
    gpu: GpuModelId,
    count: u32,
) -> f64 {
    if !may_use(cluster, spec, gpu, count) {
        return 0.0;
    }
    match job.knowledge.get::<ConfigEstimates>() {
        Some(e) => e.get(gpu, count).map_or(0.0, |c| c.throughput.max(0.0)),
        None => job.throughput_estimate.max(0.0) * f64::from(count) / f64::from(spec.gpus.max(1)),
    }
}

/// The counts a job may run at on `gpu`: those its estimates list as feasible, else its
/// requested count; only counts the type's nodes could hold.
pub(crate) fn counts_on(
    cluster: &Cluster,
    job: &ActiveJob,
    spec: &TrainingJob,
    gpu: GpuModelId,
) -> Vec<u32> {
    if !spec.gpu_types.is_empty() && !spec.gpu_types.contains(&gpu) {
        return Vec::new();
    }
    let mut counts: Vec<u32> = match job.knowledge.get::<ConfigEstimates>() {
        Some(e) => e.on_type(gpu).map(|c| c.count).collect(),
        None => vec![spec.gpus],
    };
    counts.retain(|&c| cluster.can_hold_on(spec, gpu, c));
    counts
}

/// Whether `job` may run on `count` GPUs of `gpu`: its types allow it and the type's nodes
/// could hold it.
fn may_use(cluster: &Cluster, spec: &TrainingJob, gpu: GpuModelId, count: u32) -> bool {
    (spec.gpu_types.is_empty() || spec.gpu_types.contains(&gpu))
        && cluster.can_hold_on(spec, gpu, count)
}

/// The plan the estimates attach to (gpu, count), else plain data parallelism.
fn plan_for(job: &ActiveJob, gpu: GpuModelId, count: u32) -> ParallelPlan {
    job.knowledge
        .get::<ConfigEstimates>()
        .and_then(|e| e.get(gpu, count))
        .and_then(|c| c.plan)
        .unwrap_or(ParallelPlan::data_parallel(count))
}

/// Places `count` GPUs of type `gpu` for `job` (consolidated first fit, GPU-proportional CPU
/// and memory) and reserves them in `ledger`.
pub(crate) fn place_on(
    ledger: &mut Ledger<'_>,
    job: &ActiveJob,
    spec: &TrainingJob,
    gpu: GpuModelId,
    count: u32,
) -> Option<Allocation> {
    if count == 0 {
        return None;
    }
    // The ledger places a job's own request: ask for this configuration instead. Explicit
    // CPU/memory requests are for the requested count and stay proportional to it.
    let mut want = spec.clone();
    want.gpus = count;
    want.gpu_types = vec![gpu];
    let mut alloc = ledger.place(&want)?;
    alloc.plan = Some(plan_for(job, gpu, count));
    Some(alloc)
}
