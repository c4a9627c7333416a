//! The serving simulator at scale, without the CLI (a small release build):
//! `cargo run --release -p tessera-sim --example serving_bench -- [SERVICES RATE SECS INSTANCES]`
//! (default 10 services x 10,000 req/s x 100 s = 10 million requests, 8 whole-GPU instances
//! each, half Poisson and half Gamma with CV 2). `tessera bench serving` runs the same case.

use std::time::Instant;

use tessera_model::{
    Allocation, ArrivalProcess, Bytes, Cluster, InferenceService, MilliCpu, NodeShare, SimDuration,
    SimTime, Workload,
};
use tessera_perf::TraceThroughput;
use tessera_sched::{Action, ClusterView, Ledger, Policy, ServicePhase};
use tessera_sim::{SimConfig, Simulation};

struct StaticInstances(usize);

impl Policy for StaticInstances {
    fn name(&self) -> &str {
        "static-instances"
    }
    fn round_length(&self) -> Option<SimDuration> {
        None
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let mut ledger = Ledger::new(view.cluster, view.free);
        for s in view.services {
            match s.phase {
                ServicePhase::Active if s.instances.is_empty() => {
                    for _ in 0..self.0 {
                        let placed = view.cluster.nodes.iter().find_map(|n| {
                            let a = Allocation::new(vec![NodeShare::whole(
                                n.id,
                                1,
                                s.spec.instance.cpu,
                                s.spec.instance.memory,
                            )]);
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

fn main() {
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let arg = |i: usize, d: f64| args.get(i).copied().unwrap_or(d);
    let (services, rate, secs, instances) = (
        arg(0, 10.0) as u32,
        arg(1, 10_000.0),
        arg(2, 100.0) as u64,
        arg(3, 8.0) as usize,
    );
    let nodes = (services as usize * instances).div_ceil(8).max(1) as u32;
    let cluster = Cluster::homogeneous(
        "A100-80GB",
        nodes,
        8,
        MilliCpu::from_cores(128),
        Bytes::from_gib(1024),
    )
    .expect("a valid cluster");
    let specs = (0..services)
        .map(|i| {
            let mut s = InferenceService::simple(
                &format!("svc-{i}"),
                SimTime::ZERO,
                SimTime::from_secs(secs),
                rate,
            );
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
        Box::new(StaticInstances(instances)),
        config,
    )
    .run(&mut ())
    .expect("the run");
    let wall = started.elapsed().as_secs_f64();
    let requests: u64 = report.summary.services.iter().map(|s| s.requests).sum();
    let served: u64 = report.summary.services.iter().map(|s| s.served).sum();
    println!(
        "{requests} requests ({served} served) in {wall:.3} s: {:.2} M requests/s",
        requests as f64 / wall / 1e6
    );
}
