//! `tessera bench baselines`: the engine on a Philly-sized synthetic trace (DESIGN §7).

use std::time::Instant;

use tessera_model::{Bytes, Cluster, MilliCpu, SimDuration};
use tessera_perf::TraceThroughput;
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, Simulation};
use tessera_trace::synthetic::{DurationDist, PoissonWorkload, PHILLY_GPU_MIX};

use crate::experiment::{
    bench_output, peak_rss_mib, BenchRow, Experiment, ExperimentArgs, ExperimentError, Param,
    ReproOutput, RunContext,
};

/// Offered load of the synthetic Philly-sized trace: 80% of 2,048 GPUs given the Philly
/// runtime sample's mean (4.06 h) and the Philly GPU mix's mean (2.125 GPUs).
const PHILLY_BENCH_JOBS_PER_HOUR: f64 = 190.0;

/// 82,247 Philly-shaped jobs on 2,048 GPUs under fifo and las with 300 s rounds.
#[derive(Clone, Copy, Debug)]
pub struct PhillyBench;

const PARAMS: &[Param] = &[Param {
    name: "jobs",
    default: "82247",
    help: "jobs of the synthetic Philly-sized trace",
}];

impl Experiment for PhillyBench {
    fn name(&self) -> &'static str {
        "philly"
    }

    fn about(&self) -> &'static str {
        "82,247 Philly-shaped jobs on 2,048 GPUs: fifo, and las with 300 s rounds"
    }

    fn params(&self) -> &'static [Param] {
        PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let jobs: usize = args.parse("jobs")?;
        let cluster = Cluster::homogeneous(
            "V100-32GB",
            256,
            8,
            MilliCpu::from_cores(48),
            Bytes::from_gib(512),
        )
        .map_err(|e| ExperimentError::Other(e.to_string()))?;
        let started = Instant::now();
        let workload = PoissonWorkload {
            jobs,
            jobs_per_hour: PHILLY_BENCH_JOBS_PER_HOUR,
            gpu_mix: PHILLY_GPU_MIX.to_vec(),
            durations: DurationDist::PhillyRuntimes,
            seed: 1,
        }
        .generate();
        let generate_s = started.elapsed().as_secs_f64();
        let mut rows = Vec::new();
        for (policy, round, target_s) in [
            ("fifo", None, 10.0),
            ("las", Some(SimDuration::from_secs(300)), 30.0),
        ] {
            let options = PolicyOptions {
                round,
                ..PolicyOptions::default()
            };
            let built = crate::build_policy(policy, &options)?;
            let config = SimConfig {
                record_timeseries: false,
                ..SimConfig::default()
            };
            let started = Instant::now();
            let report = Simulation::new(&cluster, &workload, &TraceThroughput, built, config)
                .run(&mut ())
                .map_err(|source| ExperimentError::Sim {
                    context: format!("bench philly, {policy}"),
                    source,
                })?;
            let wall_s = started.elapsed().as_secs_f64();
            let s = &report.summary;
            rows.push(BenchRow {
                case: match round {
                    Some(r) => format!("{policy}, {} s rounds", r.as_secs_f64()),
                    None => policy.to_string(),
                },
                wall_s,
                target_s,
                events_per_s: Some(s.events as f64 / wall_s.max(1e-9)),
                detail: format!(
                    "{}/{} finished, {} events, {} scheduling points, peak RSS {}",
                    s.finished,
                    s.jobs,
                    s.events,
                    s.scheduling_points,
                    peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"))
                ),
                command: format!("tessera bench philly --jobs {jobs}"),
            });
        }
        Ok(bench_output(
            &format!(
                "Philly-sized synthetic trace: {} jobs, Poisson {PHILLY_BENCH_JOBS_PER_HOUR} jobs/h, on 2,048 GPUs (256 x 8); generated in {generate_s:.2} s",
                workload.len()
            ),
            rows,
        ))
    }
}

/// The request-level serving simulator at scale: `services` services of `rate` requests/s
/// for `secs` seconds (10 million requests by default; half Poisson, half Gamma with CV 2),
/// each on a fixed set of whole-GPU instances placed at its start (so the figure measures
/// serving, not an autoscaler).
#[derive(Clone, Copy, Debug)]
pub struct ServingBench;

const SERVING_PARAMS: &[Param] = &[
    Param {
        name: "services",
        default: "10",
        help: "inference services",
    },
    Param {
        name: "rate",
        default: "10000",
        help: "requests per second of each service",
    },
    Param {
        name: "secs",
        default: "100",
        help: "seconds each service receives requests",
    },
    Param {
        name: "instances",
        default: "8",
        help: "whole-GPU instances per service",
    },
];

/// Places `instances` whole-GPU instances per service when it starts (first free GPUs),
/// removes them when it ends; nothing else.
struct StaticInstances {
    instances: usize,
}

impl tessera_sched::Policy for StaticInstances {
    fn name(&self) -> &str {
        "static-instances"
    }
    fn round_length(&self) -> Option<SimDuration> {
        None
    }
    fn schedule(
        &mut self,
        view: &tessera_sched::ClusterView<'_>,
        actions: &mut Vec<tessera_sched::Action>,
    ) {
        use tessera_sched::{Action, ServicePhase};
        let mut ledger = tessera_sched::Ledger::new(view.cluster, view.free);
        for s in view.services {
            match s.phase {
                ServicePhase::Active if s.instances.is_empty() => {
                    for _ in 0..self.instances {
                        let placed = view.cluster.nodes.iter().find_map(|n| {
                            let a = tessera_model::Allocation::new(vec![
                                tessera_model::NodeShare::whole(
                                    n.id,
                                    1,
                                    s.spec.instance.cpu,
                                    s.spec.instance.memory,
                                ),
                            ]);
                            ledger.reserve(&a).then_some(a)
                        });
                        if let Some(allocation) = placed {
                            actions.push(Action::ScaleOut {
                                service: s.spec.id,
                                allocation,
                            });
                        }
                    }
                }
                ServicePhase::Ended => {
                    // Idle ones only: a backlog is served before the instance goes.
                    for i in s.instances.iter().filter(|i| i.queue_len == 0) {
                        actions.push(Action::ScaleIn {
                            service: s.spec.id,
                            instance: i.id,
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

impl Experiment for ServingBench {
    fn name(&self) -> &'static str {
        "serving"
    }

    fn about(&self) -> &'static str {
        "10 million requests through the request-level serving simulator (10 services x 10,000 req/s x 100 s)"
    }

    fn params(&self) -> &'static [Param] {
        SERVING_PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        use tessera_model::{ArrivalProcess, InferenceService, SimTime, Workload};
        let services: u32 = args.parse("services")?;
        let rate: f64 = args.parse("rate")?;
        let secs: u64 = args.parse("secs")?;
        let instances: usize = args.parse("instances")?;
        let per_node = 8u32;
        let nodes = (services as usize * instances)
            .div_ceil(per_node as usize)
            .max(1) as u32;
        let cluster = Cluster::homogeneous(
            "A100-80GB",
            nodes,
            per_node,
            MilliCpu::from_cores(128),
            Bytes::from_gib(1024),
        )
        .map_err(|e| ExperimentError::Other(e.to_string()))?;
        let specs: Vec<InferenceService> = (0..services)
            .map(|i| {
                let mut s = InferenceService::simple(
                    &format!("svc-{i}"),
                    SimTime::ZERO,
                    SimTime::from_secs(secs),
                    rate,
                );
                // 2 ms for a batch of one on a whole GPU under the default serving model.
                s.slo = SimDuration::from_micros(8_000);
                s.max_batch = 32;
                s.cold_start = SimDuration::ZERO;
                if i % 2 == 1 {
                    s.arrivals = ArrivalProcess::Gamma { rate, cv: 2.0 };
                }
                s
            })
            .collect();
        let workload = Workload::with_services(Vec::new(), specs);
        let config = SimConfig {
            record_timeseries: false,
            ..SimConfig::default()
        };
        let started = Instant::now();
        let report = Simulation::new(
            &cluster,
            &workload,
            &TraceThroughput,
            Box::new(StaticInstances { instances }),
            config,
        )
        .run(&mut ())
        .map_err(|source| ExperimentError::Sim {
            context: "bench serving".into(),
            source,
        })?;
        let wall_s = started.elapsed().as_secs_f64();
        let s = &report.summary;
        let requests: u64 = s.services.iter().map(|v| v.requests).sum();
        let served: u64 = s.services.iter().map(|v| v.served).sum();
        let violations: u64 = s.services.iter().map(|v| v.slo_violations).sum();
        let worst_p99 = s
            .services
            .iter()
            .map(|v| v.p99_latency_s)
            .fold(0.0, f64::max);
        let rows = vec![BenchRow {
            case: format!("{requests} requests, {services} services, {instances} instances each"),
            wall_s,
            target_s: 10.0 * requests as f64 / 1e7,
            events_per_s: Some(requests as f64 / wall_s.max(1e-9)),
            detail: format!(
                "{served} served, {violations} over the SLO, worst p99 {:.1} ms, peak RSS {}",
                worst_p99 * 1e3,
                peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"))
            ),
            command: format!(
                "tessera bench serving --services {services} --rate {rate} --secs {secs} --instances {instances}"
            ),
        }];
        Ok(bench_output(
            "request-level serving: arrivals, per-instance queues, batching, round robin (requests/s in the events column)",
            rows,
        ))
    }
}
