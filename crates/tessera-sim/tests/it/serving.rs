//! Request-level serving: hand-computed latencies, drops, fragmentation, and invariants after
//! every event over random services, arrivals and co-located training jobs under quotas.

use std::sync::Arc;

use proptest::prelude::*;
use tessera_model::{
    Allocation, ArrivalProcess, Bytes, Cluster, DeviceAlloc, GpuDemand, GpuMask, GpuPart,
    InferenceService, MilliCpu, NodeShare, SimDuration, SimTime, TrainingJob, Workload,
};
use tessera_perf::ThroughputModel;
use tessera_sched::{Action, ClusterView, JobState, Policy, ServicePhase};
use tessera_sim::{ServingConfig, ServingModel, SimConfig, SimReport, Simulation};

/// A fixed batch time: `per_batch` plus `per_request` per request of the batch, divided by
/// the share (so shares matter).
#[derive(Debug)]
struct Fixed {
    per_batch: f64,
    per_request: f64,
}

impl ServingModel for Fixed {
    fn batch_latency(&self, _: &InferenceService, batch: u32, sm: u16) -> f64 {
        (self.per_batch + self.per_request * batch as f64) * 1000.0 / sm as f64
    }
}

/// Reference speed scaled by the SM request, slowed 10% per neighbour (jobs and service
/// instances alike), so that re-rating on neighbours' arrivals and departures is exercised.
struct Crowded;

impl ThroughputModel for Crowded {
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
        _: &Cluster,
        neighbours: &[(&TrainingJob, &Allocation)],
    ) -> f64 {
        let share = match alloc.part() {
            Some(GpuPart::Quota { sm_request, .. }) => sm_request as f64 / 1000.0,
            _ => 1.0,
        };
        job.reference_throughput() * share * (1.0 - 0.1 * neighbours.len().min(5) as f64)
    }
}

fn a100s(nodes: u32, gpus: u32) -> Cluster {
    Cluster::homogeneous(
        "A100-40GB",
        nodes,
        gpus,
        MilliCpu::from_cores(64),
        Bytes::from_gib(512),
    )
    .unwrap()
}

/// Scales every active service to `target` instances (quota or whole as the service asks),
/// placing each on the GPU with the most SM headroom that fits; starts training jobs as
/// quotas of `job_sm` permille (whole GPUs when `job_sm` is 1000); at the end removes
/// instances. Ticks every `tick`.
struct TestScaler {
    target: usize,
    job_sm: u16,
    tick: SimDuration,
    next: Option<SimTime>,
}

fn quota_alloc(
    node: tessera_model::NodeId,
    gpu: u32,
    part: GpuPart,
    cpu: MilliCpu,
    mem: Bytes,
) -> Allocation {
    Allocation::new(vec![NodeShare {
        node,
        gpus: if part == GpuPart::Whole { 1 } else { 0 },
        cpu,
        memory: mem,
        devices: Some(DeviceAlloc {
            gpus: GpuMask::one(gpu),
            part,
        }),
    }])
}

/// What this batch of actions already took on a GPU: (node, gpu, Σ requests, Σ limits,
/// Σ device memory, taken whole).
type Tentative = Vec<(usize, u32, u32, u32, u64, bool)>;

/// A GPU of the view (with the batch's tentative use) where `part` fits, if any.
fn find_gpu(
    view: &ClusterView<'_>,
    used: &mut Tentative,
    part: GpuPart,
    cpu: MilliCpu,
    mem: Bytes,
) -> Option<Allocation> {
    let cap = Bytes::from_gib_f64(
        view.cluster
            .catalog
            .get(view.cluster.nodes[0].gpu)
            .memory_gib,
    )
    .0;
    let (req, lim, dev_mem, whole) = match part {
        GpuPart::Quota {
            sm_request,
            sm_limit,
            memory,
        } => (sm_request as u32, sm_limit as u32, memory.0, false),
        _ => (0, 0, 0, true),
    };
    // Host CPU and memory: keep well inside what is free (the batch's own use is small).
    let mut node_cpu = vec![0u64; view.cluster.nodes.len()];
    for node in &view.cluster.nodes {
        let free = view.free[node.id.index()];
        let taken = node_cpu[node.id.index()];
        if free.cpu.0 < cpu.0 * 8 + taken || free.memory.0 < mem.0 * 8 {
            continue;
        }
        for (i, g) in view.state.gpus(node.id).iter().enumerate() {
            let i = i as u32;
            let mut t = (0u32, 0u32, 0u64, false, false);
            for u in used.iter().filter(|u| u.0 == node.id.index() && u.1 == i) {
                t = (t.0 + u.2, t.1 + u.3, t.2 + u.4, t.3 || u.5, true);
            }
            if g.whole || t.3 || g.mig.is_some() || g.ready_at > view.now {
                continue;
            }
            let ok = if whole {
                g.is_whole_free() && !t.4
            } else {
                g.sm_requested + t.0 + req <= 1000
                    && g.sm_limits + t.1 + lim <= 1500
                    && g.memory_used.0 + t.2 + dev_mem <= cap
            };
            if ok {
                used.push((node.id.index(), i, req, lim, dev_mem, whole));
                node_cpu[node.id.index()] += cpu.0;
                return Some(quota_alloc(node.id, i, part, cpu, mem));
            }
        }
    }
    None
}

impl Policy for TestScaler {
    fn name(&self) -> &str {
        "test-scaler"
    }
    fn round_length(&self) -> Option<SimDuration> {
        None
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let mut used = Vec::new();
        for svc in view.services {
            let n = svc.instances.len();
            match svc.phase {
                ServicePhase::Active if n < self.target => {
                    let d = svc.spec.instance;
                    if let Some(a) = find_gpu(view, &mut used, d.part(), d.cpu, d.memory) {
                        actions.push(Action::ScaleOut {
                            service: svc.spec.id,
                            allocation: a,
                        });
                    }
                }
                ServicePhase::Active if n > self.target => {
                    actions.push(Action::ScaleIn {
                        service: svc.spec.id,
                        instance: svc.instances[0].id,
                    });
                }
                ServicePhase::Ended => {
                    for i in &svc.instances {
                        actions.push(Action::ScaleIn {
                            service: svc.spec.id,
                            instance: i.id,
                        });
                    }
                }
                _ => {}
            }
        }
        for j in view.active.iter().filter(|j| j.state == JobState::Queued) {
            let part = if self.job_sm >= 1000 {
                GpuPart::Whole
            } else {
                GpuPart::Quota {
                    sm_request: self.job_sm,
                    sm_limit: self.job_sm,
                    memory: Bytes::from_gib(4),
                }
            };
            if let Some(a) = find_gpu(
                view,
                &mut used,
                part,
                MilliCpu::from_cores(1),
                Bytes::from_gib(4),
            ) {
                actions.push(Action::Start {
                    job: j.id,
                    allocation: a,
                });
            }
        }
        let live = view
            .services
            .iter()
            .any(|s| matches!(s.phase, ServicePhase::Active) || !s.instances.is_empty());
        self.next = live.then(|| view.now + self.tick);
    }
    fn wakeup(&self) -> Option<SimTime> {
        self.next
    }
}

fn scaler(target: usize) -> Box<TestScaler> {
    Box::new(TestScaler {
        target,
        job_sm: 1000,
        tick: SimDuration::from_secs(1),
        next: None,
    })
}

fn config(model: Fixed, seed: u64) -> SimConfig {
    SimConfig {
        serving: ServingConfig {
            model: Arc::new(model),
            seed,
            ..ServingConfig::default()
        },
        ..SimConfig::default()
    }
}

fn run_checked(
    cluster: &Cluster,
    w: &Workload,
    policy: Box<dyn Policy>,
    cfg: SimConfig,
) -> SimReport {
    let mut sim = Simulation::new(cluster, w, &Crowded, policy, cfg);
    while sim.step().unwrap() {
        sim.check_invariants().unwrap();
    }
    sim.check_invariants().unwrap();
    sim.into_report()
}

fn timestamps(name: &str, ts_ms: &[u64], slo_ms: u64, batch: u32) -> InferenceService {
    let mut s = InferenceService::simple(name, SimTime::ZERO, SimTime::from_secs(10), 0.0);
    s.cold_start = SimDuration::ZERO;
    s.slo = SimDuration::from_micros(slo_ms * 1000);
    s.max_batch = batch;
    s.arrivals = ArrivalProcess::Timestamps {
        offsets: ts_ms
            .iter()
            .map(|&m| SimDuration::from_micros(m * 1000))
            .collect(),
    };
    s
}

#[test]
fn batches_form_from_the_queue_and_latency_is_exact() {
    // 10 ms per batch on a whole GPU. Requests at 0, 0, 1 ms, batch ≤ 2: the two at 0 run
    // together (0–10 ms), the third waits for them (10–20 ms): latencies 10, 10, 19 ms.
    let s = timestamps("s", &[0, 0, 1], 15, 2);
    let w = Workload::with_services(vec![], vec![s]);
    let r = run_checked(
        &a100s(1, 1),
        &w,
        scaler(1),
        config(
            Fixed {
                per_batch: 0.01,
                per_request: 0.0,
            },
            0,
        ),
    );
    let sv = &r.summary.services[0];
    assert_eq!(
        (sv.requests, sv.served, sv.dropped, sv.slo_violations),
        (3, 3, 0, 1)
    );
    assert!(
        (sv.p50_latency_s - 0.010).abs() < 1e-4,
        "{}",
        sv.p50_latency_s
    );
    assert!(
        (sv.p99_latency_s - 0.019).abs() < 2e-4,
        "{}",
        sv.p99_latency_s
    );
    assert!((sv.slo_violation_rate - 1.0 / 3.0).abs() < 1e-12);
    assert!((sv.served_rps - 0.3).abs() < 1e-12, "3 requests over 10 s");
    assert_eq!(sv.peak_instances, 1);
    assert_eq!(r.summary.peak_active_gpus, 1);
    assert_eq!(r.summary.mean_sm_frag, 0.0, "a whole GPU is not fragmented");
}

#[test]
fn cold_start_delays_service_and_round_robin_spreads() {
    // Two instances, 1 s cold start: requests at 0.5 s wait; at 1 s both become ready and the
    // four waiting requests alternate between them (two batches of two in parallel).
    let mut s = timestamps("s", &[500, 500, 500, 500], 5_000, 2);
    s.cold_start = SimDuration::from_secs(1);
    let w = Workload::with_services(vec![], vec![s]);
    let r = run_checked(
        &a100s(1, 2),
        &w,
        scaler(2),
        config(
            Fixed {
                per_batch: 0.1,
                per_request: 0.0,
            },
            0,
        ),
    );
    let sv = &r.summary.services[0];
    assert_eq!(sv.served, 4);
    // The first instance is created at 0 (ready at 1 s); the second a second later (ready
    // at 2 s), so the first takes all four at 1 s: batches 1.0–1.1 and 1.1–1.2 s.
    assert!(
        (sv.p99_latency_s - 0.7).abs() < 0.01,
        "{}",
        sv.p99_latency_s
    );
    assert!(
        (sv.p50_latency_s - 0.6).abs() < 0.01,
        "{}",
        sv.p50_latency_s
    );
}

#[test]
fn unschedulable_and_uninstanced_services_drop_every_request() {
    let mut big = timestamps("big", &[1, 2, 3], 100, 1);
    big.instance.gpu_memory = Bytes::from_gib(100);
    let w = Workload::with_services(vec![], vec![big]);
    let r = run_checked(
        &a100s(1, 1),
        &w,
        scaler(1),
        config(
            Fixed {
                per_batch: 0.01,
                per_request: 0.0,
            },
            0,
        ),
    );
    let sv = &r.summary.services[0];
    assert_eq!((sv.requests, sv.served, sv.dropped), (3, 0, 3));
    assert!(sv
        .unschedulable
        .as_deref()
        .unwrap()
        .contains("device memory"));
    // A policy that never scales out: every request dropped at the end, counted.
    let s = timestamps("s", &[1, 2, 3], 100, 1);
    let w = Workload::with_services(vec![], vec![s]);
    let r = run_checked(
        &a100s(1, 1),
        &w,
        scaler(0),
        config(
            Fixed {
                per_batch: 0.01,
                per_request: 0.0,
            },
            0,
        ),
    );
    assert_eq!(r.summary.services[0].dropped, 3);
    assert_eq!(r.summary.services[0].slo_violation_rate, 1.0);
}

#[test]
fn quota_instances_report_fragmentation() {
    // One 300‰ / 10 GiB instance alone on a 40 GB GPU for the whole run: SM fragmentation
    // 0.7, memory fragmentation 1 − 10/40 (GB of the catalog, in GiB).
    let mut s = timestamps("s", &[100, 200], 1_000, 1);
    s.instance.gpu = GpuDemand::Quota {
        sm_request: 300,
        sm_limit: 300,
    };
    s.instance.gpu_memory = Bytes::from_gib(10);
    let w = Workload::with_services(vec![], vec![s]);
    let r = run_checked(
        &a100s(1, 2),
        &w,
        scaler(1),
        config(
            Fixed {
                per_batch: 0.01,
                per_request: 0.0,
            },
            0,
        ),
    );
    assert_eq!(r.summary.peak_active_gpus, 1);
    assert!(
        (r.summary.mean_sm_frag - 0.7).abs() < 1e-9,
        "{}",
        r.summary.mean_sm_frag
    );
    let cap = tessera_model::GpuCatalog::builtin();
    let a100 = cap.get(cap.resolve("A100-40GB").unwrap()).memory_gib;
    assert!((r.summary.mean_mem_frag - (1.0 - 10.0 / a100)).abs() < 1e-6);
    // Served at its quota: 10 ms at full share takes 33.4 ms at 300‰.
    assert!((r.summary.services[0].p50_latency_s - 0.01 / 0.3).abs() < 5e-4);
}

#[test]
fn poisson_arrivals_have_their_rate_and_are_seeded() {
    let mut s = InferenceService::simple("p", SimTime::ZERO, SimTime::from_secs(100), 50.0);
    s.cold_start = SimDuration::ZERO;
    let w = Workload::with_services(vec![], vec![s]);
    let go = |seed| {
        run_checked(
            &a100s(1, 2),
            &w,
            scaler(2),
            config(
                Fixed {
                    per_batch: 0.001,
                    per_request: 0.0,
                },
                seed,
            ),
        )
    };
    let a = go(1);
    let n = a.summary.services[0].requests as f64;
    // 5000 expected, σ ≈ 71.
    assert!((n - 5000.0).abs() < 300.0, "{n}");
    assert_eq!(a, go(1), "same seed, same report");
    assert_ne!(
        a.summary.services[0].requests,
        go(2).summary.services[0].requests
    );
}

fn arrivals() -> impl Strategy<Value = ArrivalProcess> {
    prop_oneof![
        (0.0f64..200.0).prop_map(|rate| ArrivalProcess::Poisson { rate }),
        (0.0f64..200.0, 0.2f64..4.0).prop_map(|(rate, cv)| ArrivalProcess::Gamma { rate, cv }),
        prop::collection::vec(0.0f64..300.0, 1..30)
            .prop_map(|rates| ArrivalProcess::RateSeries { rates }),
        prop::collection::vec(0u64..20_000_000, 0..200).prop_map(|mut v| {
            v.sort_unstable();
            ArrivalProcess::Timestamps {
                offsets: v.into_iter().map(SimDuration::from_micros).collect(),
            }
        }),
    ]
}

fn service() -> impl Strategy<Value = InferenceService> {
    (
        arrivals(),
        0u64..10,
        1u64..30,
        1u32..16,
        0u64..3,
        0u16..4,
        1u64..20,
        5u64..500,
    )
        .prop_map(|(arr, start, len, batch, cold, quota, mem, slo)| {
            let mut s = InferenceService::simple(
                "s",
                SimTime::from_secs(start),
                SimTime::from_secs(start + len),
                0.0,
            );
            s.arrivals = arr;
            s.max_batch = batch;
            s.cold_start = SimDuration::from_secs(cold);
            s.slo = SimDuration::from_micros(slo * 1000);
            s.instance.gpu_memory = Bytes::from_gib(mem);
            if quota > 0 {
                s.instance.gpu = GpuDemand::Quota {
                    sm_request: 200 * quota,
                    sm_limit: 250 * quota,
                };
            }
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn every_request_ends_served_or_dropped_and_no_gpu_is_overcommitted(
        services in prop::collection::vec(service(), 1..4),
        jobs in prop::collection::vec((0u64..20, 1u64..40), 0..6),
        target in 1usize..4,
        job_sm in prop_oneof![Just(1000u16), 100u16..600],
        seed in 0u64..1000,
    ) {
        let jobs: Vec<TrainingJob> = jobs
            .iter()
            .enumerate()
            .map(|(i, &(t, d))| TrainingJob::simple(i as u32, SimTime::from_secs(t), 1, SimDuration::from_secs(d)))
            .collect();
        let w = Workload::with_services(jobs, services);
        let mut policy = scaler(target);
        policy.job_sm = job_sm;
        let cfg = config(Fixed { per_batch: 0.004, per_request: 0.001 }, seed);
        let r = run_checked(&a100s(2, 2), &w, policy, cfg);
        for s in &r.summary.services {
            prop_assert_eq!(s.requests, s.served + s.dropped, "{:?}", s);
            prop_assert!(s.slo_violations <= s.served);
        }
        // The requests a driver counts for services it did not give a policy are the run's.
        let counted = tessera_sim::serving::arrivals_per_service(&w, seed);
        let requests: Vec<u64> = r.summary.services.iter().map(|s| s.requests).collect();
        prop_assert_eq!(counted, requests);
        prop_assert_eq!(r.summary.services.len(), w.services().len());
        for series in &r.service_instances {
            prop_assert!(series.points.windows(2).all(|p| p[0].0 <= p[1].0));
        }
    }
}

#[test]
fn training_beside_an_instance_is_rerated_when_it_comes_and_goes() {
    // A 100 s job at 500‰ alone runs at half speed; an instance beside it from 50 s to 150 s
    // slows it by 10% (the Crowded truth): 25 + 45 iterations by 150 s, the last 30 at 0.5/s,
    // so it ends at 210 s.
    let job = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(100));
    let mut s = InferenceService::simple("s", SimTime::from_secs(50), SimTime::from_secs(150), 1.0);
    s.cold_start = SimDuration::ZERO;
    s.instance.gpu = GpuDemand::Quota {
        sm_request: 300,
        sm_limit: 300,
    };
    let w = Workload::with_services(vec![job], vec![s]);
    let mut policy = scaler(1);
    policy.job_sm = 500;
    let r = run_checked(
        &a100s(1, 1),
        &w,
        policy,
        config(
            Fixed {
                per_batch: 0.01,
                per_request: 0.0,
            },
            0,
        ),
    );
    assert_eq!(r.jobs[0].finish, Some(SimTime::from_secs(210)));
    assert_eq!(r.summary.peak_active_gpus, 1);
    // 500‰ + 300‰ requested for 100 s, 500‰ for the other 110 s of activity.
    let expected = (0.2 * 100.0 + 0.5 * 110.0) / 210.0;
    assert!(
        (r.summary.mean_sm_frag - expected).abs() < 1e-9,
        "{}",
        r.summary.mean_sm_frag
    );
}
