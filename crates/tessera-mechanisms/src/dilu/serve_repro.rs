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
//! - device memory ([`MemorySetup`]): by default the artifact's deployment scripts
//!   (`scheduling/scripts_deploy/deploy_{inference,train}_funcs.py` of
//!   github.com/sigserverless/Dilu: instances RoBERTa-large 6 GB, BERT-base 5, LLaMA2-7B 28;
//!   training per GPU BERT 33, RoBERTa-large 29, ResNet152 28, LLaMA2-7B up to 39), so
//!   training fills most of each 40 GB GPU as in the paper's testbed; `small` is our earlier
//!   assumption (4/2/16 and 8/16/12/20 GB), under which memory never binds;
//! - the load scale ([`Scenario::load_scale`]) multiplies every rate: at 1 the offered load
//!   stays below what one instance per service serves on a whole GPU, so capacity binds only
//!   at larger scales;
//! - our assumptions (not from the paper): cold starts (2 s; 10 s for LLaMA2-7B).
//!
//! Where we still differ from the artifact's deployment: its quotas are RoBERTa 0.3/0.6,
//! BERT 0.1/0.2, LLaMA2 0.5/0.6 for instances (we take the Hybrid Growth Search's requests,
//! DESIGN §5.4, and limit + 0.2) and training limits 0.6–0.9 (the policy gives request +
//! 0.2); its scaler counts 48/48/10 req/s per instance (ours: max batch / latency at the
//! request, from the tables); its training jobs run a fixed number of iterations.

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
    /// The scaled services are past the simulator's bounds (rates, requests in all).
    #[error("load scale {scale}: {source}")]
    Bounds {
        /// The load scale.
        scale: f64,
        /// Which bound.
        source: tessera_model::SpecError,
    },
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

/// Work of each part (b) training job (at one iteration per second): longer than the services'
/// lifetime (1,007 s) even on whole GPUs.
const TRAINING_WORK: SimDuration = SimDuration::from_secs(7200);

fn training(id: u32, name: &str, model: DiluModel, gpus: u32, memory_gb: u64) -> TrainingJob {
    // Does not finish within the services' lifetime (the horizon part (b) measures; training
    // throughput = iterations done by then / its length): two hours of work at one iteration
    // per second on its whole GPUs, so a run without a horizon ends when training does.
    let mut j = TrainingJob::simple(id, SimTime::ZERO, gpus, TRAINING_WORK);
    j.name = name.into();
    j.model = model.name().to_string();
    j.iterations = TRAINING_WORK.as_secs_f64() as u64;
    let req = training_request(&j);
    j.gpu_share = Some(GpuShareRequest {
        sm_permille: req.clamp(1, 999) as u16,
        memory: Some(Bytes(memory_gb * 1_000_000_000)),
    });
    j.cpu = Some(MilliCpu::from_cores(2 * u64::from(gpus)));
    j.memory = Some(Bytes::from_gib(8 * u64::from(gpus)));
    j
}

/// Device memory of part (b)'s instances and training jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemorySetup {
    /// The artifact's deployment scripts (`scheduling/scripts_deploy/deploy_*_funcs.py`):
    /// instances RoBERTa-large 6 GB, BERT-base 5, LLaMA2-7B 28; training per GPU BERT 33,
    /// RoBERTa-large 29, ResNet152 28, LLaMA2-7B 35/39/39/35 (we book its largest, 39, on
    /// each GPU: one memory figure per job). Training fills most of a 40 GB GPU, so only
    /// small instances fit beside it and the LLaMA2 instance never does.
    #[default]
    Artifact,
    /// Our earlier assumption (instances 4/2/16 GB, training 8/16/12/20 GB per GPU): memory
    /// never binds, every instance fits beside training.
    Small,
}

impl MemorySetup {
    /// By name (`artifact`, `small`).
    pub fn from_name(name: &str) -> Option<MemorySetup> {
        match name.trim().to_ascii_lowercase().as_str() {
            "artifact" => Some(MemorySetup::Artifact),
            "small" => Some(MemorySetup::Small),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            MemorySetup::Artifact => "artifact",
            MemorySetup::Small => "small",
        }
    }

    /// GB per instance: (RoBERTa-large, BERT-base, LLaMA2-7B).
    fn instances_gb(self) -> [u64; 3] {
        match self {
            MemorySetup::Artifact => [6, 5, 28],
            MemorySetup::Small => [4, 2, 16],
        }
    }

    /// GB per GPU of training: (BERT, RoBERTa-large, ResNet152, LLaMA2-7B).
    fn training_gb(self) -> [u64; 4] {
        match self {
            MemorySetup::Artifact => [33, 29, 28, 39],
            MemorySetup::Small => [8, 16, 12, 20],
        }
    }
}

/// What part (b) runs: how much the offered load is scaled and whose memory figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scenario {
    /// Multiplies every arrival rate (1 = the paper's: the series ×10, LLaMA2 3 req/s).
    pub load_scale: f64,
    /// Device memory of instances and training.
    pub memory: MemorySetup,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            load_scale: 1.0,
            memory: MemorySetup::Artifact,
        }
    }
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

/// The workload of part (b) with the default [`Scenario`] (see the module docs).
pub fn scenario_workload() -> Result<Workload, ScenarioError> {
    scenario_workload_with(&Scenario::default())
}

/// The workload of part (b) at `scenario`'s load scale and memory figures.
pub fn scenario_workload_with(scenario: &Scenario) -> Result<Workload, ScenarioError> {
    let k = scenario.load_scale;
    if !(k.is_finite() && k > 0.0) {
        return Err(ScenarioError::Series {
            name: "load scale".into(),
            source: SeriesError {
                line: 0,
                reason: format!("{k} is not a positive number"),
            },
        });
    }
    let gb = |g: u64| Bytes(g * 1_000_000_000);
    let [m_roberta, m_bert, m_llama] = scenario.memory.instances_gb();
    let [t_bert, t_roberta, t_resnet, t_llama] = scenario.memory.training_gb();
    let services = vec![
        profiled_service(
            "roberta-bursty",
            DiluModel::RobertaLarge,
            DiluModel::RobertaLarge.slo_s(),
            ArrivalProcess::RateSeries {
                rates: series("bursty", 10.0 * k)?,
            },
            gb(m_roberta),
            SimDuration::from_secs(2),
        )?,
        profiled_service(
            "bert-periodic",
            DiluModel::BertBase,
            DiluModel::BertBase.slo_s(),
            ArrivalProcess::RateSeries {
                rates: series("periodic", 10.0 * k)?,
            },
            gb(m_bert),
            SimDuration::from_secs(2),
        )?,
        profiled_service(
            "llama2-poisson",
            DiluModel::Llama2_7b,
            DiluModel::Llama2_7b.slo_s(),
            ArrivalProcess::Poisson { rate: 3.0 * k },
            gb(m_llama),
            SimDuration::from_secs(10),
        )?,
    ];
    let jobs = vec![
        training(0, "bert-train", DiluModel::BertBase, 4, t_bert),
        training(1, "roberta-train", DiluModel::RobertaLarge, 2, t_roberta),
        training(2, "resnet152-train", DiluModel::Resnet152, 2, t_resnet),
        training(3, "llama2-train", DiluModel::Llama2_7b, 4, t_llama),
    ];
    let workload = Workload::with_services(jobs, services);
    workload
        .check_services()
        .map_err(|source| ScenarioError::Bounds { scale: k, source })?;
    Ok(workload)
}

/// The end of the last service of `workload`: part (b)'s horizon.
pub fn services_end(workload: &Workload) -> Option<tessera_model::SimTime> {
    workload.services().iter().map(|s| s.end).max()
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
    // Part (b) measures the services' lifetime: its horizon is the last service's end
    // (training still running then is reported unfinished). `tessera simulate --horizon`
    // gives the same runs.
    let mut config = SimConfig {
        record_timeseries: false,
        time_limit: services_end(workload),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(r: &SimReport) -> (u64, u64, f64) {
        let s = &r.summary.services;
        let served = s.iter().map(|x| x.served).sum::<u64>();
        let good = s
            .iter()
            .map(|x| x.served.saturating_sub(x.slo_violations))
            .sum::<u64>();
        let iters = r.jobs.iter().map(|j| j.iterations_done).sum::<f64>();
        (served, good, iters)
    }

    /// The orderings that hold on every seed of `repro dilu --parts b` (RESULTS.md), pinned
    /// on one seed: at the paper's load exclusive serves more within SLO than dilu (its
    /// instances own whole GPUs and capacity does not bind); at 4x the load exclusive runs
    /// out of GPUs (training holds 12 of 16) and dilu serves more within SLO; every request
    /// is served in the end under both; training never beats exclusive in our truth.
    #[test]
    fn capacity_binds_for_exclusive_only_at_higher_load() {
        let c = scenario_cluster().unwrap();
        let mut out = Vec::new();
        for k in [1.0, 4.0] {
            let w = scenario_workload_with(&Scenario {
                load_scale: k,
                memory: MemorySetup::Artifact,
            })
            .unwrap();
            let excl = figures(&run_serving(&c, &w, "dilu-exclusive", 1, false).unwrap());
            let dilu = figures(&run_serving(&c, &w, "dilu", 1, false).unwrap());
            assert_eq!(
                excl.0, dilu.0,
                "load {k}: every request is served in the end"
            );
            assert!(
                dilu.2 <= excl.2 + 1e-6,
                "load {k}: training {dilu:?} vs {excl:?}"
            );
            out.push((excl, dilu));
        }
        let ((e1, d1), (e4, d4)) = (out[0], out[1]);
        assert!(e1.1 > d1.1, "load 1: exclusive {e1:?} vs dilu {d1:?}");
        // 4x the load: more than twice exclusive's within-SLO requests (measured 2.7-3.0x).
        assert!(d4.1 > 2 * e4.1, "load 4: exclusive {e4:?} vs dilu {d4:?}");
    }

    #[test]
    fn the_artifact_memory_binds_where_small_memory_does_not() {
        let c = scenario_cluster().unwrap();
        let r = run_serving(&c, &scenario_workload().unwrap(), "dilu", 1, true).unwrap();
        let small = scenario_workload_with(&Scenario {
            load_scale: 1.0,
            memory: MemorySetup::Small,
        })
        .unwrap();
        let rs = run_serving(&c, &small, "dilu", 1, false).unwrap();
        // With 28-39 GB of training per GPU, training jobs no longer share GPUs with each
        // other (measured 12 vs 10 peak GPUs) and little memory is left idle.
        let (a, b) = (&r.summary, &rs.summary);
        assert!(
            a.peak_active_gpus > b.peak_active_gpus,
            "{} vs {}",
            a.peak_active_gpus,
            b.peak_active_gpus
        );
        assert!(
            a.mean_mem_frag < b.mean_mem_frag,
            "{} vs {}",
            a.mean_mem_frag,
            b.mean_mem_frag
        );
    }

    #[test]
    fn a_bad_load_scale_is_an_error() {
        for k in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = scenario_workload_with(&Scenario {
                load_scale: k,
                memory: MemorySetup::Artifact,
            });
            assert!(e.is_err(), "{k}");
        }
        assert_eq!(
            MemorySetup::from_name("Artifact"),
            Some(MemorySetup::Artifact)
        );
        assert_eq!(MemorySetup::from_name("big"), None);
    }
}
