//! `serve-exclusive` end to end: invariants after every event, every request served or
//! dropped, never fewer than one instance while requests arrive, and it scales with load.

use proptest::prelude::*;
use tessera_mechanisms::{build_policy, workloads};
use tessera_model::{
    ArrivalProcess, Bytes, Cluster, InferenceService, MilliCpu, SimDuration, SimTime, TrainingJob,
    Workload,
};
use tessera_perf::TraceThroughput;
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, SimReport, Simulation};

fn run(cluster: &Cluster, w: &Workload, seed: u64) -> SimReport {
    let policy = build_policy("serve-exclusive", &PolicyOptions::default()).unwrap();
    let mut config = SimConfig::default();
    config.serving.seed = seed;
    let mut sim = Simulation::new(cluster, w, &TraceThroughput, policy, config);
    while sim.step().unwrap() {
        sim.check_invariants().unwrap();
    }
    sim.into_report()
}

fn cluster(gpus: u32) -> Cluster {
    Cluster::homogeneous(
        "A100-40GB",
        1,
        gpus,
        MilliCpu::from_cores(64),
        Bytes::from_gib(512),
    )
    .unwrap()
}

/// From its first instance to its end, a service's instance count never drops to zero.
fn never_empty(points: &[(SimTime, u32)], end: SimTime) -> bool {
    let first = points.iter().position(|p| p.1 > 0);
    first.is_none_or(|f| points[f..].iter().all(|p| p.1 > 0 || p.0 >= end))
}

fn never_empty_while_active(r: &SimReport, end: SimTime) -> bool {
    r.service_instances
        .iter()
        .all(|s| never_empty(&s.points, end))
}

#[test]
fn builtin_serving_small_runs_clean() {
    let w = (workloads()
        .find(|w| w.name == "serving-small")
        .unwrap()
        .generate)(0)
    .unwrap();
    let c = cluster(16);
    let r = run(&c, &w, 0);
    assert_eq!(r.summary.finished, 4);
    let s = &r.summary.services[0];
    assert_eq!(s.requests, s.served + s.dropped);
    assert_eq!(s.dropped, 0);
    assert!(
        s.peak_instances >= 2,
        "a bursty 40 req/s load needs a second instance"
    );
    assert!(never_empty_while_active(&r, SimTime::from_secs(600)));
    assert!(r.summary.peak_active_gpus as u64 >= 4 + s.peak_instances as u64);
}

#[test]
fn it_scales_out_under_load_and_back_in() {
    // 200 req/s for 60 s, then 5 req/s for 240 s (two services back to back would need two
    // names; one rate series does it).
    let mut rates = vec![200.0; 60];
    rates.extend(vec![5.0; 240]);
    let mut s = InferenceService::simple("s", SimTime::ZERO, SimTime::from_secs(300), 0.0);
    s.arrivals = ArrivalProcess::RateSeries { rates };
    s.slo = SimDuration::from_micros(100_000);
    let w = Workload::with_services(vec![], vec![s]);
    let r = run(&cluster(8), &w, 1);
    let series = &r.service_instances[0].points;
    let peak = series.iter().map(|p| p.1).max().unwrap();
    let at_end = series
        .iter()
        .rfind(|p| p.0 < SimTime::from_secs(300))
        .unwrap()
        .1;
    assert!(peak >= 3, "{series:?}");
    assert!(at_end < peak, "scaled back in: {series:?}");
    assert!(never_empty_while_active(&r, SimTime::from_secs(300)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn random_services_and_jobs(
        rates in prop::collection::vec(prop::collection::vec(0.0f64..150.0, 1..40), 1..3),
        jobs in prop::collection::vec((0u64..30, 1u32..3, 10u64..100), 0..4),
        gpus in 2u32..8,
        seed in 0u64..100,
    ) {
        let services: Vec<InferenceService> = rates
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let mut s = InferenceService::simple(&format!("s{i}"), SimTime::from_secs(i as u64 * 3), SimTime::from_secs(i as u64 * 3 + r.len() as u64), 0.0);
                s.arrivals = ArrivalProcess::RateSeries { rates: r };
                s
            })
            .collect();
        let ends: Vec<SimTime> = services.iter().map(|s| s.end).collect();
        let jobs: Vec<TrainingJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, &(t, g, d))| TrainingJob::simple(i as u32, SimTime::from_secs(t), g, SimDuration::from_secs(d)))
            .collect();
        let w = Workload::with_services(jobs, services);
        let r = run(&cluster(gpus), &w, seed);
        for ((s, series), end) in r.summary.services.iter().zip(&r.service_instances).zip(&ends) {
            prop_assert_eq!(s.requests, s.served + s.dropped);
            prop_assert!(never_empty(&series.points, *end), "{:?}", series);
        }
    }
}
