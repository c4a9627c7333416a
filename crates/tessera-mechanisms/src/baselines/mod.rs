//! The baselines every comparison needs (DESIGN §5.6): FIFO, SRTF, LAS and FTF with
//! GPU-proportional CPU/memory and consolidated first-fit placement, on the trace's own
//! throughput. The policies themselves are generic building blocks in
//! [`tessera_sched::baselines`] (other mechanisms reuse their orderings).
//!
//! For inference services, [`serving::ServeExclusive`] (`serve-exclusive`): a whole GPU per
//! instance and horizontal autoscaling on queue length, with FIFO for training jobs; and a
//! small built-in workload with services (`builtin:serving-small`).

use tessera_model::{
    ArrivalProcess, Bytes, InferenceService, MilliCpu, SimDuration, SimTime, TrainingJob, Workload,
};
use tessera_sched::{Capability, Policy, PolicyInfo, PolicyOptions};

use crate::{BuiltinWorkload, Mechanism};

pub mod serving;

const SCHED: &[PolicyInfo] = tessera_sched::baselines::POLICIES;

/// The job baselines of `tessera-sched` and the service-aware one.
pub const POLICIES: &[PolicyInfo] = &[
    SCHED[0],
    SCHED[1],
    SCHED[2],
    SCHED[3],
    PolicyInfo {
        name: "serve-exclusive",
        about: "inference services on a whole GPU per instance, horizontal autoscaling on queue length; FIFO for training jobs",
        // Instances always take a whole GPU: a quota request is not honoured.
        capabilities: tessera_sched::baselines::CAPABILITIES.with(Capability::Services),
    },
];

/// `builtin:serving-small`: one bursty service (Gamma arrivals, 40 requests/s, CV 2, for
/// 10 minutes) beside four training jobs of 1–4 GPUs.
fn serving_small(_seed: u64) -> Result<Workload, String> {
    let mut svc =
        InferenceService::simple("chat", SimTime::from_secs(0), SimTime::from_secs(600), 40.0);
    svc.model = "bert-base".into();
    svc.slo = SimDuration::from_micros(100_000);
    svc.max_batch = 8;
    svc.cold_start = SimDuration::from_secs(5);
    svc.instance.cpu = MilliCpu::from_cores(4);
    svc.instance.memory = Bytes::from_gib(16);
    svc.instance.gpu_memory = Bytes::from_gib(8);
    svc.arrivals = ArrivalProcess::Gamma {
        rate: 40.0,
        cv: 2.0,
    };
    let jobs = [(0, 4, 900), (30, 2, 300), (60, 1, 1200), (120, 4, 600)]
        .iter()
        .enumerate()
        .map(|(i, &(t, g, d))| {
            let mut j = TrainingJob::simple(
                i as u32,
                SimTime::from_secs(t),
                g,
                SimDuration::from_secs(d),
            );
            j.name = format!("train-{i}").into();
            j
        })
        .collect();
    Ok(Workload::with_services(jobs, vec![svc]))
}

/// The baselines mechanism.
#[derive(Clone, Copy, Debug, Default)]
pub struct Baselines;

impl Mechanism for Baselines {
    fn name(&self) -> &'static str {
        "baselines"
    }

    fn about(&self) -> &'static str {
        "FIFO, SRTF, LAS (Tiresias), FTF (Themis) with GPU-proportional CPU/memory"
    }

    fn policies(&self) -> &'static [PolicyInfo] {
        POLICIES
    }

    fn build_policy(&self, name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>> {
        if name.eq_ignore_ascii_case("serve-exclusive") {
            return Some(Box::new(serving::ServeExclusive::new(options.round)));
        }
        tessera_sched::baselines::build(name, options)
    }

    fn workloads(&self) -> &'static [BuiltinWorkload] {
        &[BuiltinWorkload {
            name: "serving-small",
            about: "one bursty inference service (Gamma 40 req/s, CV 2, 10 min) beside four training jobs of 1-4 GPUs; run it with --policy serve-exclusive",
            generate: serving_small,
        }]
    }

    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[
            &bench::PhillyBench,
            &bench::ServingBench,
            &bench::EngineBench,
        ]
    }
}

#[cfg(feature = "experiments")]
pub mod bench;

#[cfg(test)]
mod tests {
    #[test]
    fn every_job_baseline_is_listed() {
        assert_eq!(super::POLICIES.len(), super::SCHED.len() + 1);
        for p in super::SCHED {
            assert!(
                super::POLICIES.iter().any(|q| q.name == p.name),
                "{}",
                p.name
            );
        }
    }
}
