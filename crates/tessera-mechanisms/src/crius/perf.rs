//! Crius's truth and estimator over the analytic cell model of `crate::crius::cells`.
//!
//! - [`CellThroughput`] (truth): a job runs at the optimal view of the cell its allocation
//!   forms (GPU type, GPU count, nodes spanned). When the allocation carries a plan, the
//!   plan's degrees are fixed and only its micro-batch count and stage boundaries are tuned
//!   (a plan that does not fit is re-planned); without one, the full search picks the plan
//!   (what the baselines' 150 s/GPU search buys).
//! - [`CellEstimator`] (profiler): attaches, per (GPU type of the cluster, count ∈ {1, 2, 4,
//!   8, 16}), the proxy view's best packed cell as a shared [`ConfigEstimates`] and a
//!   [`CriusCells`] with the proxy and DP-only views, which the Crius policies read.
//!
//! Jobs whose model is not a large model of `cells` (`bert-1.3b`, `wrn-2b`, `moe-27b`, ...)
//! fall back to the trace's throughput, scaled linearly with GPUs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::crius::cells::{
    estimate_plan, Cell, CellPlanner, Device, HwOptions, LargeModel, View, CELL_COUNTS,
};
use tessera_model::{
    Allocation, Cluster, GpuModelId, Knowledge, ParallelPlan, SimDuration, SimRng, TrainingJob,
};
use tessera_perf::{ConfigEstimate, ConfigEstimates, Profiler, ThroughputModel, TraceThroughput};

/// Global batch size of jobs that do not name one (Crius's workload: 256).
pub const DEFAULT_BATCH: u32 = 256;
/// Seconds of a scheduling round: a cell whose iteration is longer is infeasible.
pub const ROUND_SECS: f64 = 300.0;

/// The proxy and DP-only views of one job's cells, per (GPU type, count).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CriusCells {
    /// Crius's restricted estimator (best packed cell per configuration).
    pub proxy: ConfigEstimates,
    /// Data parallelism only.
    pub dp_only: ConfigEstimates,
}

/// One GPU type of a cluster: its id, the device model and how many GPUs it has.
#[derive(Clone, Copy, Debug)]
pub struct TypeInfo {
    /// Catalog id.
    pub gpu: GpuModelId,
    /// The estimator's device.
    pub device: Device,
    /// GPUs of this type in the cluster.
    pub total: u64,
}

/// The distinct GPU types of `cluster` (in group order; the first group of a type sets its
/// node shape).
pub fn cluster_types(cluster: &Cluster, hw: &HwOptions) -> Vec<TypeInfo> {
    let mut out: Vec<TypeInfo> = Vec::new();
    for g in &cluster.groups {
        if let Some(t) = out.iter_mut().find(|t| t.gpu == g.gpu) {
            t.total += g.total_gpus();
            continue;
        }
        out.push(TypeInfo {
            gpu: g.gpu,
            device: Device::from_gpu(cluster.catalog.get(g.gpu), g.gpus_per_node, hw),
            total: g.total_gpus(),
        });
    }
    out
}

/// The large model a job names: `FAMILY-SIZEb` as the cell model reads it (`bert-1.3b`), or
/// a name the model catalogue resolves to one (`BERT_1.3B`). Other models (`resnet50`,
/// `bert-base`) are not large models: they run at their trace throughput.
pub fn large_model(name: &str) -> Option<LargeModel> {
    LargeModel::from_name(name).or_else(|| {
        tessera_model::models::canonical(name)
            .filter(|c| !c.eq_ignore_ascii_case(name))
            .and_then(LargeModel::from_name)
    })
}

fn batch_of(job: &TrainingJob) -> u32 {
    job.batch_size.filter(|&b| b > 0).unwrap_or(DEFAULT_BATCH)
}

/// Key of a truth evaluation: model, batch, GPU type, GPUs per node, count, nodes, plan.
type RateKey = (String, u32, GpuModelId, u32, u32, u32, Option<ParallelPlan>);

/// The truth: the optimal view of the allocation's cell. Results are memoised (the model is
/// pure), which makes replaying thousands of jobs of a few models cheap.
#[derive(Debug, Default)]
pub struct CellThroughput {
    /// Hardware knobs.
    pub hw: HwOptions,
    memo: Mutex<BTreeMap<RateKey, f64>>,
}

impl CellThroughput {
    /// Iterations per second of `model` (global `batch`) on `count` GPUs of `device` over
    /// `nodes` nodes with `plan` (or the best plan). No round limit: the truth says how fast
    /// a job runs, not whether a scheduler would accept it; 0 only when it does not fit.
    pub fn rate(
        model: &LargeModel,
        batch: u32,
        device: &Device,
        count: u32,
        nodes: u32,
        plan: Option<ParallelPlan>,
    ) -> f64 {
        // GPUs beyond the largest power of two are left idle (cells use powers of two).
        let usable = if count == 0 {
            return 0.0;
        } else {
            1u32 << (31 - count.leading_zeros())
        };
        // A plan whose uniform degrees do not fit (the proxy may give stages different
        // splits; an allocation carries stage 0's) is re-planned by the runtime's search.
        let planned = plan
            .filter(|p| p.devices() == usable)
            .map(|p| estimate_plan(model, batch, device, nodes, p, f64::INFINITY).throughput)
            .filter(|&r| r > 0.0);
        match planned {
            Some(r) => r,
            None => {
                let planner = CellPlanner::new(model, batch, device);
                (0..=usable.trailing_zeros())
                    .map(|k| {
                        let cell = Cell {
                            count: usable,
                            nodes: nodes.max(1),
                            stages: 1 << k,
                        };
                        planner
                            .estimate(cell, View::Optimal, f64::INFINITY)
                            .throughput
                    })
                    .fold(0.0, f64::max)
            }
        }
    }
}

impl ThroughputModel for CellThroughput {
    fn throughput(&self, job: &TrainingJob, alloc: &Allocation, cluster: &Cluster) -> f64 {
        let Some(model) = large_model(&job.model) else {
            return TraceThroughput.throughput(job, alloc, cluster);
        };
        let model = &model;
        // A synchronous job runs at the pace of its slowest GPU type: estimate on each type
        // it holds and keep the slowest.
        let count = alloc.gpus();
        let nodes = alloc.shares.len() as u32;
        let mut rate = f64::INFINITY;
        let mut seen: Vec<(GpuModelId, u32)> = Vec::with_capacity(1);
        for s in &alloc.shares {
            let Some(node) = cluster.nodes.get(s.node.index()) else {
                return 0.0;
            };
            let Some(group) = cluster.groups.get(node.group as usize) else {
                return 0.0;
            };
            if seen.contains(&(node.gpu, group.gpus_per_node)) {
                continue;
            }
            seen.push((node.gpu, group.gpus_per_node));
            let key: RateKey = (
                job.model.clone(),
                batch_of(job),
                node.gpu,
                group.gpus_per_node,
                count,
                nodes,
                alloc.plan,
            );
            let memo = self.memo.lock().ok().and_then(|m| m.get(&key).copied());
            let r = match memo {
                Some(r) => r,
                None => {
                    let dev = Device::from_gpu(
                        cluster.catalog.get(node.gpu),
                        group.gpus_per_node,
                        &self.hw,
                    );
                    let r = Self::rate(model, batch_of(job), &dev, count, nodes, alloc.plan);
                    if let Ok(mut m) = self.memo.lock() {
                        m.insert(key, r);
                    }
                    r
                }
            };
            rate = rate.min(r);
        }
        if rate.is_finite() {
            rate
        } else {
            0.0
        }
    }
}

/// Key of an estimate: model, batch, and the cluster's (GPU type, GPUs per node, total).
type EstimateKey = (String, u32, Vec<(GpuModelId, u32, u64)>);

/// Crius's estimator: the proxy (and DP-only) view of every configuration, at no cost (the
/// estimate is analytic; the cell is tuned when the job starts, at the re-tuning cost).
/// Memoised per model and cluster shape.
#[derive(Debug, Default)]
pub struct CellEstimator {
    /// Hardware knobs.
    pub hw: HwOptions,
    memo: Mutex<BTreeMap<EstimateKey, Arc<CriusCells>>>,
}

/// Estimates of one job on every GPU type of a cluster in one view.
pub fn estimates(
    model: &LargeModel,
    batch: u32,
    types: &[TypeInfo],
    view: View,
) -> ConfigEstimates {
    let mut v = Vec::with_capacity(types.len() * CELL_COUNTS.len());
    for t in types {
        let planner = CellPlanner::new(model, batch, &t.device);
        for count in CELL_COUNTS {
            if count as u64 > t.total {
                continue;
            }
            let e = planner.best_packed(count, view, ROUND_SECS);
            v.push(ConfigEstimate {
                gpu: t.gpu,
                count,
                throughput: e.throughput,
                plan: e.plan,
            });
        }
    }
    ConfigEstimates::new(v)
}

impl Profiler for CellEstimator {
    fn cost(&self) -> SimDuration {
        SimDuration::ZERO
    }

    fn gpus(&self) -> u32 {
        0
    }

    fn profile(&self, job: &TrainingJob, cluster: &Cluster, _rng: &mut SimRng) -> Knowledge {
        let Some(model) = large_model(&job.model) else {
            return Knowledge::new();
        };
        let types = cluster_types(cluster, &self.hw);
        let batch = batch_of(job);
        let key: EstimateKey = (
            job.model.clone(),
            batch,
            types
                .iter()
                .map(|t| (t.gpu, t.device.gpus_per_node, t.total))
                .collect(),
        );
        let memo = self.memo.lock().ok().and_then(|m| m.get(&key).cloned());
        let cells = match memo {
            Some(c) => c,
            None => {
                let c = Arc::new(CriusCells {
                    proxy: estimates(&model, batch, &types, View::Proxy),
                    dp_only: estimates(&model, batch, &types, View::DpOnly),
                });
                if let Ok(mut m) = self.memo.lock() {
                    m.insert(key, Arc::clone(&c));
                }
                c
            }
        };
        let mut k = Knowledge::of(cells.proxy.clone());
        k.insert_arc(cells);
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tessera_model::{Bytes, MilliCpu, NodeId, NodeShare, SimTime};

    fn job(model: &str) -> TrainingJob {
        let mut j = TrainingJob::simple(0, SimTime::ZERO, 4, SimDuration::from_secs(100));
        j.model = model.into();
        j.batch_size = Some(256);
        j
    }

    fn alloc(nodes: &[(u32, u32)], plan: Option<ParallelPlan>) -> Allocation {
        Allocation {
            shares: nodes
                .iter()
                .map(|&(n, g)| NodeShare::whole(NodeId(n), g, MilliCpu(0), Bytes(0)))
                .collect(),
            plan,
        }
    }

    fn cluster() -> Cluster {
        Cluster::from_yaml(
            crate::crius::workload::CLUSTER_YAML,
            &tessera_model::GpuCatalog::builtin(),
        )
        .unwrap()
    }

    #[test]
    fn truth_prefers_a100_and_packing_and_honours_plans() {
        let c = cluster();
        let j = job("bert-1.3b");
        let truth = CellThroughput::default();
        // Nodes 0.. are A100 x4; A10 nodes come last.
        let a100 = truth.throughput(&j, &alloc(&[(0, 4)], None), &c);
        let a100_spread = truth.throughput(&j, &alloc(&[(0, 2), (1, 2)], None), &c);
        let last = c.nodes.len() as u32 - 1;
        let a10 = truth.throughput(&j, &alloc(&[(last, 2), (last - 1, 2)], None), &c);
        assert!(
            a100 > a100_spread && a100_spread > a10 && a10 > 0.0,
            "{a100} {a100_spread} {a10}"
        );
        // A fixed plan is never faster than the full search.
        let dp = truth.throughput(
            &j,
            &alloc(&[(0, 4)], Some(ParallelPlan::data_parallel(4))),
            &c,
        );
        assert!(dp > 0.0 && dp <= a100);
        // Mixed types run at the slower type's pace.
        let mixed = truth.throughput(&j, &alloc(&[(0, 2), (last, 2)], None), &c);
        let a10_spread = truth.throughput(&j, &alloc(&[(last, 2), (last - 1, 2)], None), &c);
        assert!(mixed <= a10_spread * 1.0001, "{mixed} {a10_spread}");
        // Unknown models fall back to the trace.
        let plain = job("resnet50");
        assert_eq!(
            truth.throughput(&plain, &alloc(&[(0, 4)], None), &c),
            plain.reference_throughput()
        );
    }

    #[test]
    fn estimator_attaches_proxy_and_dp_only_for_every_type() {
        let c = cluster();
        let k =
            CellEstimator::default().profile(&job("moe-2.4b"), &c, &mut SimRng::seed_from_u64(1));
        let cells = k.get::<CriusCells>().expect("cells");
        assert_eq!(cells.proxy.entries().len(), 4 * 5);
        assert_eq!(k.get::<ConfigEstimates>(), Some(&cells.proxy));
        for (p, d) in cells.proxy.entries().iter().zip(cells.dp_only.entries()) {
            assert_eq!((p.gpu, p.count), (d.gpu, d.count));
        }
        assert!(CellEstimator::default()
            .profile(&job("resnet50"), &c, &mut SimRng::seed_from_u64(1))
            .is_empty());
    }
}
