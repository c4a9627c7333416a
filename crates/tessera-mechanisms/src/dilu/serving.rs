//! Dilu's truth for the request-level serving simulator: inference batch latency from the
//! authors' tables, training throughput vs compute share with a knee, and the vertical
//! scaler (the overflow controller) behind the simulator's `ShareController` hook.

use std::collections::BTreeMap;

#[cfg(feature = "experiments")]
use tessera_model::InferenceService;
use tessera_model::{Allocation, Cluster, GpuPart, TrainingJob};
use tessera_perf::ThroughputModel;
#[cfg(feature = "experiments")]
use tessera_sched::InstanceId;
#[cfg(feature = "experiments")]
use tessera_sim::serving::{GpuShareController, ShareController};
#[cfg(feature = "experiments")]
use tessera_sim::{DefaultServingModel, ServingModel};

use super::table::{DiluModel, LatencyTable};
use super::truth::TrainingCurve;
#[cfg(feature = "experiments")]
use super::vertical::GpuOverflow;

/// The model a service or job names, if it is one of the five measured: by its own name,
/// else through the model catalogue (`bert` → `bert-base`), then its family default.
pub fn model_of(name: &str) -> Option<DiluModel> {
    tessera_model::models::lookup(name, |n| DiluModel::from_name(n).ok(), table_key)
}

/// The latency tables' model for a model of the catalogue (canonical name), listed in
/// docs/models.md.
pub fn table_key(canonical: &str) -> Option<&'static str> {
    Some(match canonical {
        "bert-base" => "bert-base",
        "roberta-large" => "roberta-large",
        "gpt2-large" => "gpt2-large",
        "llama2-7b" => "llama2-7b",
        "resnet152" => "resnet152",
        _ => return None,
    })
}

/// True for the model Dilu treats as LLM inference (LLaMA2-7B).
pub fn is_llm(name: &str) -> bool {
    model_of(name) == Some(DiluModel::Llama2_7b)
}

/// Batch latency from the shipped `bs_sm_<model>.csv` tables (bilinear interpolation over
/// their monotone envelope, `table.rs`). Outside the grid: below the smallest measured share
/// the latency grows inversely with the share, past the largest batch linearly with the
/// batch; a service whose model has no table falls back to [`DefaultServingModel`].
#[derive(Clone, Debug)]
pub struct DiluServingModel {
    tables: BTreeMap<DiluModel, LatencyTable>,
}

impl DiluServingModel {
    /// The five shipped tables.
    pub fn shipped() -> Result<DiluServingModel, super::table::TableError> {
        let mut tables = BTreeMap::new();
        for m in DiluModel::ALL {
            tables.insert(m, m.table()?);
        }
        Ok(DiluServingModel { tables })
    }

    /// Seconds for a batch of `batch` of `model` at `share` (0–1]; `None` without a table.
    pub fn latency(&self, model: DiluModel, batch: u32, share: f64) -> Option<f64> {
        let t = self.tables.get(&model)?;
        let lo_share = f64::from(*t.shares_pct().first()?) / 100.0;
        let hi_share = f64::from(*t.shares_pct().last()?) / 100.0;
        let lo_batch = *t.batches().first()?;
        let hi_batch = *t.batches().last()?;
        let s = share.clamp(lo_share, hi_share);
        let b = batch.clamp(lo_batch, hi_batch);
        let base = t.latency(f64::from(b), s).ok()?;
        let share_factor = if share < lo_share && share > 0.0 {
            lo_share / share
        } else {
            1.0
        };
        let batch_factor = if batch > hi_batch {
            f64::from(batch) / f64::from(hi_batch)
        } else {
            1.0
        };
        Some(base * share_factor * batch_factor)
    }
}

#[cfg(feature = "experiments")]
impl ServingModel for DiluServingModel {
    fn batch_latency(&self, service: &InferenceService, batch: u32, sm_permille: u16) -> f64 {
        let share = f64::from(sm_permille.clamp(1, 1000)) / 1000.0;
        model_of(&service.model)
            .and_then(|m| self.latency(m, batch.max(1), share))
            .filter(|l| l.is_finite() && *l > 0.0)
            .unwrap_or_else(|| DefaultServingModel.batch_latency(service, batch, sm_permille))
    }
}

/// Training throughput under quotas: the reference speed (iterations / duration on the
/// requested GPUs) × the GPUs held / requested × the relative throughput of the job's model
/// at its effective share ([`TrainingCurve::for_model`]; knee 0.5 for other models) on its
/// slowest GPU. A quota's effective share without a controller: its request plus its part
/// of what the GPU's requests leave idle, split by headroom (limit − request) among the
/// quota holders there (jobs and service instances), capped at its limit, the simulator's
/// rule for instances. Whole GPUs (and MIG instances) count as the full device.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiluTruth;

fn curve_of(job: &TrainingJob) -> TrainingCurve {
    match model_of(&job.model) {
        Some(m) => TrainingCurve::for_model(m),
        // RoBERTa-large's curve has the knee at 0.5: our stand-in for unknown models.
        None => TrainingCurve::for_model(DiluModel::RobertaLarge),
    }
}

/// Static effective share (permille) of a quota (req, lim) on `gpu` of `node`, among
/// `others`' quota holdings (also the composed truth's, `tessera::truth`).
pub(crate) fn static_share(
    req: u32,
    lim: u32,
    node: tessera_model::NodeId,
    gpu: u32,
    others: &[(&TrainingJob, &Allocation)],
) -> u32 {
    let (mut sum_req, mut sum_head) = (req, lim.saturating_sub(req));
    for (_, a) in others {
        for s in &a.shares {
            let Some(d) = s.devices else { continue };
            if s.node != node || !d.gpus.contains(gpu) {
                continue;
            }
            if let GpuPart::Quota {
                sm_request,
                sm_limit,
                ..
            } = d.part
            {
                sum_req += u32::from(sm_request);
                sum_head += u32::from(sm_limit).saturating_sub(u32::from(sm_request));
            }
        }
    }
    let idle = 1000u32.saturating_sub(sum_req);
    let extra = if sum_head > 0 {
        (u64::from(idle) * u64::from(lim.saturating_sub(req)) / u64::from(sum_head)) as u32
    } else {
        0
    };
    (req + extra).min(lim.max(req)).min(1000)
}

impl ThroughputModel for DiluTruth {
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
        _cluster: &Cluster,
        neighbours: &[(&TrainingJob, &Allocation)],
    ) -> f64 {
        let curve = curve_of(job);
        let mut devices = 0u32;
        let mut slowest = 1.0f64;
        for s in &alloc.shares {
            match s.devices {
                None => devices += s.gpus,
                Some(d) => {
                    devices += d.gpus.count();
                    if let GpuPart::Quota {
                        sm_request,
                        sm_limit,
                        ..
                    } = d.part
                    {
                        for g in d.gpus.iter() {
                            let share = static_share(
                                u32::from(sm_request),
                                u32::from(sm_limit),
                                s.node,
                                g,
                                neighbours,
                            );
                            let r = curve.relative(f64::from(share) / 1000.0).unwrap_or(0.0);
                            slowest = slowest.min(r);
                        }
                    }
                }
            }
        }
        if devices == 0 || job.gpus == 0 {
            return 0.0;
        }
        job.reference_throughput() * f64::from(devices) / f64::from(job.gpus) * slowest
    }
}

/// Dilu's vertical scaling for the simulator: one [`GpuOverflow`] per shared GPU (an LLM
/// instance cuts from 1.3× overflow, others from 1.6×).
#[cfg(feature = "experiments")]
#[derive(Clone, Copy, Debug, Default)]
pub struct DiluController;

#[cfg(feature = "experiments")]
#[derive(Debug, Default)]
struct GpuState(GpuOverflow);

#[cfg(feature = "experiments")]
impl ShareController for DiluController {
    fn for_gpu(&self) -> Box<dyn GpuShareController> {
        Box::new(GpuState(GpuOverflow::new()))
    }
}

#[cfg(feature = "experiments")]
impl GpuShareController for GpuState {
    fn batch_done(&mut self, service: &InferenceService, instance: InstanceId, period_us: u64) {
        self.0
            .observe_batch(instance.0, is_llm(&service.model), period_us as f64 / 1e6);
    }

    fn inference_idle(&mut self, idle_us: u64) {
        self.0.inference_idle(idle_us as f64 / 1e6);
    }

    fn training_budget(&self) -> u16 {
        (self.0.budget() * 1000.0).round().clamp(0.0, 1000.0) as u16
    }
}

#[cfg(all(test, feature = "experiments"))]
mod tests {
    use super::*;
    use tessera_model::{DeviceAlloc, GpuMask, NodeId, NodeShare, SimDuration, SimTime};

    fn quota(req: u16, lim: u16) -> Allocation {
        Allocation::new(vec![NodeShare {
            node: NodeId(0),
            gpus: 0,
            cpu: tessera_model::MilliCpu::from_cores(1),
            memory: tessera_model::Bytes::from_gib(1),
            devices: Some(DeviceAlloc {
                gpus: GpuMask::one(0),
                part: GpuPart::Quota {
                    sm_request: req,
                    sm_limit: lim,
                    memory: tessera_model::Bytes::from_gib(1),
                },
            }),
        }])
    }

    #[test]
    fn latency_follows_the_table_and_extends_it() {
        let m = DiluServingModel::shipped().unwrap();
        let t = DiluModel::BertBase.table().unwrap();
        let p = t.point(4, 10).unwrap();
        let l = m.latency(DiluModel::BertBase, 4, 0.10).unwrap();
        assert!((l - t.latency(4.0, 0.10).unwrap()).abs() < 1e-12);
        assert!(
            l >= p.latency_s - 1e-12,
            "envelope never below a faster point"
        );
        // Half the smallest share: twice as slow; twice the largest batch: twice as slow.
        assert!((m.latency(DiluModel::BertBase, 4, 0.05).unwrap() - 2.0 * l).abs() < 1e-12);
        let hi = *t.batches().last().unwrap();
        let at_hi = m.latency(DiluModel::BertBase, hi, 1.0).unwrap();
        assert!((m.latency(DiluModel::BertBase, 2 * hi, 1.0).unwrap() - 2.0 * at_hi).abs() < 1e-9);
        // Through the trait: an unknown model falls back to the default model.
        let mut s = InferenceService::simple("x", SimTime::ZERO, SimTime::from_secs(1), 1.0);
        s.model = "bert-base".into();
        assert!((m.batch_latency(&s, 4, 100) - l).abs() < 1e-12);
        s.model = "unknown".into();
        assert_eq!(
            m.batch_latency(&s, 4, 100),
            DefaultServingModel.batch_latency(&s, 4, 100)
        );
    }

    #[test]
    fn training_slows_below_its_knee_and_shares_idle_compute() {
        let mut job = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(100));
        job.model = "resnet152".into();
        job.iterations = 100;
        let c = Cluster::homogeneous(
            "A100-40GB",
            1,
            1,
            tessera_model::MilliCpu::from_cores(8),
            tessera_model::Bytes::from_gib(64),
        )
        .unwrap();
        // Alone at request 300 / limit 300 (no headroom): 30% share, below the 0.35 knee.
        let alone = DiluTruth.throughput(&job, &quota(300, 300), &c);
        let want = TrainingCurve::for_model(DiluModel::Resnet152)
            .relative(0.3)
            .unwrap();
        assert!((alone - want).abs() < 1e-9, "{alone} vs {want}");
        // With headroom it bursts into idle compute up to its limit: faster.
        let burst = DiluTruth.throughput(&job, &quota(300, 600), &c);
        assert!(burst > alone);
        // A neighbour with headroom takes part of the idle compute: slower than alone.
        let other = TrainingJob::simple(1, SimTime::ZERO, 1, SimDuration::from_secs(1));
        let n = quota(300, 600);
        let shared = DiluTruth.throughput_among(&job, &quota(300, 600), &c, &[(&other, &n)]);
        assert!(shared < burst && shared > alone, "{shared} {burst} {alone}");
        // A whole GPU runs at the reference speed.
        let whole = Allocation::new(vec![NodeShare::whole(
            NodeId(0),
            1,
            tessera_model::MilliCpu::from_cores(1),
            tessera_model::Bytes::from_gib(1),
        )]);
        assert!((DiluTruth.throughput(&job, &whole, &c) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn controller_budget_is_cut_by_slow_batches_and_released_when_idle() {
        let mut g = DiluController.for_gpu();
        assert_eq!(g.training_budget(), 1000);
        let mut s = InferenceService::simple("x", SimTime::ZERO, SimTime::from_secs(1), 1.0);
        s.model = "bert-base".into();
        g.batch_done(&s, InstanceId(0), 10_000);
        g.batch_done(&s, InstanceId(0), 20_000);
        assert_eq!(g.training_budget(), 500);
        // Another instance's first batch is its own baseline: no cut.
        g.batch_done(&s, InstanceId(1), 40_000);
        assert_eq!(g.training_budget(), 500);
        g.inference_idle(500_000);
        assert_eq!(g.training_budget(), 500);
        g.inference_idle(700_000);
        assert_eq!(g.training_budget(), 1000);
        // An LLM cuts from 1.3x.
        s.model = "llama2-7b".into();
        g.batch_done(&s, InstanceId(2), 10_000);
        g.batch_done(&s, InstanceId(2), 14_000);
        assert_eq!(g.training_budget(), 714);
    }
}
