//! `tessera repro dilu`, part (b): inference services co-located with training on 4 nodes ×
//! 4 A100-40GB GPUs (DESIGN §5.4), under dilu-exclusive, static-shares, dilu-no-vertical and
//! dilu, on the request-level simulator.
//!
//! Inputs and where they come from:
//! - services: RoBERTa-large on the bursty series, BERT-base on the periodic series (both
//!   ×10, as the artifact replays NLP models), LLaMA2-7B Poisson at 3 req/s; SLOs of DESIGN
//!   §5.4 (BERT-base 50 ms, the issue's); each instance's request and max batch from the
//!   Hybrid Growth Search on the shipped tables, limit = request + 0.2 (the artifact's
//!   generator's smallest headroom);
//! - training: BERT 4 GPUs, RoBERTa-large 2, ResNet152 2, LLaMA2-7B 4 (pipeline, modelled
//!   as paced by its slowest GPU), requests from the training binary search on our assumed
//!   curves (`truth.rs`), limit = request + 0.2;
//! - our assumptions (not from the paper): device memory per instance (BERT 2 GB, RoBERTa 4
//!   GB, LLaMA2-7B 16 GB) and per training GPU (BERT 8, RoBERTa 16, ResNet152 12, LLaMA2 20
//!   GB), cold starts (2 s; 10 s for LLaMA2-7B).

use std::sync::Arc;

use tessera_model::{
    ArrivalProcess, Bytes, Cluster, GpuDemand, GpuShareRequest, InferenceService, MilliCpu,
    SimDuration, SimTime, TrainingJob, Workload,
};
use tessera_sim::{SimConfig, SimReport, Simulation};
use thiserror::Error;

use super::policy::{training_request, DiluServe, TRAINING_HEADROOM};
use super::profile::{self, ProfileError};
use super::series::{RateSeries, SeriesError};
use super::serving::DiluTruth;
use super::table::{DiluModel, TableError};

/// The policies of part (b), in report order.
pub const SERVING_POLICIES: [&str; 4] = [
    "dilu-exclusive",
    "static-shares",
    "dilu-no-vertical",
    "dilu",
];

/// The paper's claims for part (b).
pub const SERVING_CLAIM: &str = "Dilu (ASPLOS'25): up to 1.8x inference throughput, 1.1x training throughput, 11-71% fewer QoS (SLO) violations and 10-46% less GPU fragmentation than the state of the art";

/// Why the scenario cannot be built.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// A rate series is bad.
    #[error("rate series {name}: {source}")]
    Series {
        /// Which.
        name: String,
        /// Why.
        source: SeriesError,
    },
    /// A latency table is missing or bad.
    #[error(transparent)]
    Table(#[from] TableError),
    /// Profiling found no (share, batch) meeting the SLO: the service is unschedulable.
    #[error("service {service}: {source}")]
    Profile {
        /// Which.
        service: String,
        /// Why.
        source: ProfileError,
    },
    /// The simulator refused an action or a truth value (a policy bug).
    #[error("{policy}: {reason}")]
    Sim {
        /// Policy.
        policy: String,
        /// Why.
        reason: String,
    },
    /// No such policy.
    #[error(
        "unknown serving policy {0:?} (dilu-exclusive, static-shares, dilu-no-vertical, dilu)"
    )]
    UnknownPolicy(String),
}

/// One service of the scenario: a Dilu model, its SLO, its arrivals, device memory, cold
/// start. Its quota and max batch come from the Hybrid Growth Search.
pub fn profiled_service(
    name: &str,
    model: DiluModel,
    slo_s: f64,
    arrivals: ArrivalProcess,
    gpu_memory: Bytes,
    cold_start: SimDuration,
) -> Result<InferenceService, ScenarioError> {
    let table = model.table()?;
    let pick =
        profile::hybrid_growth_search(&table, slo_s).map_err(|source| ScenarioError::Profile {
            service: name.to_string(),
            source,
        })?;
    let len_s = match &arrivals {
        ArrivalProcess::RateSeries { rates } => rates.len() as u64,
        _ => 1000,
    };
    let mut s = InferenceService::simple(name, SimTime::ZERO, SimTime::from_secs(len_s), 0.0);
    s.model = model.name().to_string();
    s.slo = SimDuration::from_secs_f64_ceil(slo_s);
    s.max_batch = pick.batch;
    s.cold_start = cold_start;
    s.arrivals = arrivals;
    s.instance.gpu_memory = gpu_memory;
    let req = (pick.share_pct * 10).min(1000) as u16;
    s.instance.gpu = GpuDemand::Quota {
        sm_request: req,
        sm_limit: (u32::from(req) + TRAINING_HEADROOM).min(1000) as u16,
    };
    Ok(s)
}

fn series(name: &str, factor: f64) -> Result<Vec<f64>, ScenarioError> {
    let s = RateSeries::builtin(name).ok_or_else(|| ScenarioError::Series {
        name: name.to_string(),
        source: SeriesError {
            line: 0,
            reason: "no such built-in series".into(),
        },
    })?;
    let s = s.scaled(factor).map_err(|source| ScenarioError::Series {
        name: name.to_string(),
        source,
    })?;
    Ok(s.rps)
}

fn training(id: u32, name: &str, model: DiluModel, gpus: u32, memory_gb: u64) -> TrainingJob {
    // Never finishes within the run: throughput = iterations done by the end / its length.
    let mut j = TrainingJob::simple(
        id,
        SimTime::ZERO,
        gpus,
        SimDuration::from_secs(1_000_000_000),
    );
    j.name = name.to_string();
    j.model = model.name().to_string();
    j.iterations = 1_000_000_000;
    let req = training_request(&j);
    j.gpu_share = Some(GpuShareRequest {
        sm_permille: req.clamp(1, 999) as u16,
        memory: Some(Bytes(memory_gb * 1_000_000_000)),
    });
    j.cpu = Some(MilliCpu::from_cores(2 * u64::from(gpus)));
    j.memory = Some(Bytes::from_gib(8 * u64::from(gpus)));
    j
}

/// The cluster: 4 nodes × 4 A100-40GB (host CPU and memory ample: they never bind).
pub fn scenario_cluster() -> Result<Cluster, ScenarioError> {
    Cluster::homogeneous(
        "A100-40GB",
        4,
        4,
        MilliCpu::from_cores(128),
        Bytes::from_gib(1024),
    )
    .map_err(|e| ScenarioError::Sim {
        policy: String::new(),
        reason: e.to_string(),
    })
}

/// The workload of part (b) (see the module docs).
pub fn scenario_workload() -> Result<Workload, ScenarioError> {
    let gb = |g: u64| Bytes(g * 1_000_000_000);
    let services = vec![
        profiled_service(
            "roberta-bursty",
            DiluModel::RobertaLarge,
            DiluModel::RobertaLarge.slo_s(),
            ArrivalProcess::RateSeries {
                rates: series("bursty", 10.0)?,
            },
            gb(4),
            SimDuration::from_secs(2),
        )?,
        profiled_service(
            "bert-periodic",
            DiluModel::BertBase,
            DiluModel::BertBase.slo_s(),
            ArrivalProcess::RateSeries {
                rates: series("periodic", 10.0)?,
            },
            gb(2),
            SimDuration::from_secs(2),
        )?,
        profiled_service(
            "llama2-poisson",
            DiluModel::Llama2_7b,
            DiluModel::Llama2_7b.slo_s(),
            ArrivalProcess::Poisson { rate: 3.0 },
            gb(16),
            SimDuration::from_secs(10),
        )?,
    ];
    let jobs = vec![
        training(0, "bert-train", DiluModel::BertBase, 4, 8),
        training(1, "roberta-train", DiluModel::RobertaLarge, 2, 16),
        training(2, "resnet152-train", DiluModel::Resnet152, 2, 12),
        training(3, "llama2-train", DiluModel::Llama2_7b, 4, 20),
    ];
    Ok(Workload::with_services(jobs, services))
}

/// Runs one policy of part (b) with `seed` (arrivals) on the policy's serving setup
/// ([`super::setup::serving_setup`]: Dilu's controller for `dilu`); `check` checks the simulator's invariants after every step.
pub fn run_serving(
    cluster: &Cluster,
    workload: &Workload,
    policy: &str,
    seed: u64,
    check: bool,
) -> Result<SimReport, ScenarioError> {
    let p = DiluServe::by_name(policy)
        .ok_or_else(|| ScenarioError::UnknownPolicy(policy.to_string()))?;
    // The setup `tessera simulate` uses too: one code path for both drivers.
    let setup = super::setup::serving_setup(policy)
        .ok_or_else(|| ScenarioError::UnknownPolicy(policy.to_string()))??;
    let mut config = SimConfig {
        record_timeseries: false,
        ..SimConfig::default()
    };
    setup.apply(&mut config, workload, seed);
    let truth = setup.truth.clone().unwrap_or_else(|| Arc::new(DiluTruth));
    let sim_err = |reason: String| ScenarioError::Sim {
        policy: policy.to_string(),
        reason,
    };
    let mut sim = Simulation::new(cluster, workload, truth.as_ref(), Box::new(p), config);
    if check {
        while sim.step().map_err(|e| sim_err(e.to_string()))? {
            sim.check_invariants().map_err(sim_err)?;
        }
        sim.check_invariants().map_err(sim_err)?;
        Ok(sim.into_report())
    } else {
        sim.run(&mut ()).map_err(|e| sim_err(e.to_string()))
    }
}
