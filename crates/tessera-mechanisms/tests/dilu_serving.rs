//! Dilu's serving half on the request-level simulator: the vertical controller driving shares
//! (hand-checked), the in-place instance retune, the part (b) ordering and invariants, and bad
//! input.

use std::sync::{Arc, Mutex};

use tessera_mechanisms::dilu::series::RateSeries;
use tessera_mechanisms::dilu::serve_repro::{
    profiled_service, run_serving, scenario_cluster, scenario_workload, ScenarioError,
};
use tessera_mechanisms::dilu::serving::{DiluController, DiluServingModel, DiluTruth};
use tessera_mechanisms::dilu::table::DiluModel;
use tessera_model::{
    Allocation, ArrivalProcess, Bytes, Cluster, DeviceAlloc, GpuDemand, GpuMask, GpuPart,
    InferenceService, MilliCpu, NodeId, NodeShare, SimDuration, SimTime, TrainingJob, Workload,
};
use tessera_sched::{Action, ClusterView, Policy};
use tessera_sim::serving::ShareController;
use tessera_sim::{ServingConfig, SimConfig, Simulation};

fn quota(req: u16, lim: u16, mem_gib: u64) -> Allocation {
    Allocation::new(vec![NodeShare {
        node: NodeId(0),
        gpus: 0,
        cpu: MilliCpu::from_cores(1),
        memory: Bytes::from_gib(4),
        devices: Some(DeviceAlloc {
            gpus: GpuMask::one(0),
            part: GpuPart::Quota {
                sm_request: req,
                sm_limit: lim,
                memory: Bytes::from_gib(mem_gib),
            },
        }),
    }])
}

/// What the probe policy saw at each tick: (time s, remaining iterations of the job, the
/// instance's effective share, its id, its ready time).
type Seen = Arc<Mutex<Vec<(f64, f64, u16, u32, SimTime)>>>;

/// Starts the job and one instance on GPU 0 at the first call; optionally retunes the
/// instance at `retune_at`; records what it sees.
struct Probe {
    started: bool,
    seen: Seen,
    retune_at: Option<SimTime>,
}

impl Policy for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn round_length(&self) -> Option<SimDuration> {
        Some(SimDuration::from_secs(1))
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        if !self.started {
            self.started = true;
            actions.push(Action::Start {
                job: tessera_model::JobId(0),
                allocation: quota(500, 700, 10),
            });
            actions.push(Action::ScaleOut {
                service: tessera_model::ServiceId(0),
                allocation: quota(300, 500, 2),
            });
            return;
        }
        let svc = &view.services[0];
        if let Some(i) = svc.instances.first() {
            let left = view.active.first().map_or(0.0, |j| j.remaining_iters);
            self.seen.lock().unwrap().push((
                view.now.as_secs_f64(),
                left,
                i.effective_sm,
                i.id.0,
                i.ready_at,
            ));
            if self.retune_at == Some(view.now) {
                actions.push(Action::RetuneInstance {
                    service: svc.spec.id,
                    instance: i.id,
                    allocation: quota(450, 500, 2),
                });
            }
        }
    }
}

fn one_gpu() -> Cluster {
    Cluster::homogeneous(
        "A100-40GB",
        1,
        1,
        MilliCpu::from_cores(16),
        Bytes::from_gib(64),
    )
    .unwrap()
}

/// BERT-base beside a ResNet152 training job on one GPU: three lone requests at 0.5–0.7 s,
/// a burst of 8 requests every 70 ms over 1–3 s (about what one instance serves), then
/// nothing until 6 s.
fn burst_workload() -> Workload {
    let mut offsets = vec![500_000u64, 600_000, 700_000];
    let mut t = 1_000_000u64;
    while t < 3_000_000 {
        offsets.extend(std::iter::repeat_n(t, 8));
        t += 70_000;
    }
    let mut s = InferenceService::simple("bert", SimTime::ZERO, SimTime::from_secs(6), 0.0);
    s.model = "bert-base".into();
    s.max_batch = 8;
    s.slo = SimDuration::from_micros(50_000);
    s.cold_start = SimDuration::ZERO;
    s.instance.gpu = GpuDemand::Quota {
        sm_request: 300,
        sm_limit: 500,
    };
    s.instance.gpu_memory = Bytes::from_gib(2);
    s.arrivals = ArrivalProcess::Timestamps {
        offsets: offsets.into_iter().map(SimDuration::from_micros).collect(),
    };
    let mut j = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(1000));
    j.model = "resnet152".into();
    j.iterations = 1000;
    Workload::with_services(vec![j], vec![s])
}

fn run_probe(controller: bool, retune_at: Option<SimTime>) -> Vec<(f64, f64, u16, u32, SimTime)> {
    let cluster = one_gpu();
    let w = burst_workload();
    let seen: Seen = Arc::default();
    let policy = Probe {
        started: false,
        seen: seen.clone(),
        retune_at,
    };
    let config = SimConfig {
        time_limit: Some(SimTime::from_secs(6)),
        serving: ServingConfig {
            controller: controller.then(|| Arc::new(DiluController) as Arc<dyn ShareController>),
            model: Arc::new(DiluServingModel::shipped().unwrap()),
            ..ServingConfig::default()
        },
        ..SimConfig::default()
    };
    let mut sim = Simulation::new(&cluster, &w, &DiluTruth, Box::new(policy), config);
    while sim.step().unwrap() {
        sim.check_invariants().unwrap();
    }
    let report = sim.into_report();
    let s = &report.summary.services[0];
    assert_eq!(s.requests, s.served + s.dropped);
    let out = seen.lock().unwrap().clone();
    out
}

/// Iterations the job did between ticks `a` and `b` (seconds).
fn done_between(seen: &[(f64, f64, u16, u32, SimTime)], a: f64, b: f64) -> f64 {
    let at = |t: f64| {
        seen.iter()
            .find(|x| (x.0 - t).abs() < 1e-9)
            .map(|x| x.1)
            .unwrap()
    };
    at(a) - at(b)
}

#[test]
fn a_burst_cuts_trainings_share_and_idle_gives_it_back() {
    let seen = run_probe(true, None);
    // Before the burst the instance ran at its request (training takes the rest: 1000 −
    // 300 = 700 = training's limit... its budget is whole) ...
    let at = |t: f64| seen.iter().find(|x| (x.0 - t).abs() < 1e-9).unwrap();
    assert_eq!(at(1.0).2, 300, "{seen:?}");
    // ... during it batches of 8 take ~3.6x the lone batch: the controller cuts training's
    // budget and the instance bursts to its limit (500).
    assert_eq!(at(2.0).2, 500, "{seen:?}");
    // Training's rate follows one second behind (sampled each second): over 2–3 s it is a
    // fraction of what it gets once inference has been idle > 0.6 s (5–6 s: the whole GPU,
    // the reference speed of 1 iteration/s).
    let burst = done_between(&seen, 2.0, 3.0);
    let idle = done_between(&seen, 5.0, 6.0);
    assert!((idle - 1.0).abs() < 1e-6, "idle second: {idle}");
    assert!(burst < 0.5 * idle, "burst second {burst} vs idle {idle}");
    // Without the controller shares are static: the instance never exceeds what the
    // requests leave (300 + its headroom's part of the 200 idle ‰ = 300 + 200·200/400).
    let stat = run_probe(false, None);
    assert!(stat.iter().all(|x| x.2 == 400), "{stat:?}");
    let burst_static = done_between(&stat, 2.0, 3.0);
    assert!(burst_static > burst, "{burst_static} vs {burst}");
}

#[test]
fn an_instance_retunes_in_place_without_a_cold_start() {
    let seen = run_probe(false, Some(SimTime::from_secs(2)));
    let before = seen.iter().find(|x| x.0 == 2.0).unwrap();
    let after = seen.iter().find(|x| x.0 == 3.0).unwrap();
    // Same instance, same readiness (no cold start); its static share now from 450/500:
    // 450 + 50 idle ‰ split by headroom (50 of 250) = 460.
    assert_eq!(before.3, after.3);
    assert_eq!(before.4, after.4);
    assert_eq!(before.2, 400);
    assert_eq!(after.2, 460, "{seen:?}");
}

#[test]
fn part_b_orders_as_dilu_claims_where_it_holds_and_keeps_invariants() {
    let c = scenario_cluster().unwrap();
    let w = scenario_workload().unwrap();
    let run = |p: &str| run_serving(&c, &w, p, 1, true).unwrap();
    let excl = run("dilu-exclusive");
    let stat = run("static-shares");
    let novert = run("dilu-no-vertical");
    let dilu = run("dilu");
    let served =
        |r: &tessera_sim::SimReport| -> u64 { r.summary.services.iter().map(|s| s.served).sum() };
    let missed = |r: &tessera_sim::SimReport| -> u64 {
        r.summary
            .services
            .iter()
            .map(|s| s.slo_violations + s.dropped)
            .sum()
    };
    assert!(served(&dilu) >= served(&stat));
    assert!(dilu.summary.peak_active_gpus < excl.summary.peak_active_gpus);
    assert!(dilu.summary.peak_active_gpus <= stat.summary.peak_active_gpus);
    // Vertical scaling is what the ablation removes: fewer misses with it.
    assert!(
        missed(&dilu) < missed(&novert),
        "{} vs {}",
        missed(&dilu),
        missed(&novert)
    );
    for r in [&excl, &stat, &novert, &dilu] {
        for (s, spec) in r.summary.services.iter().zip(w.services()) {
            assert_eq!(s.requests, s.served + s.dropped, "{}", s.service);
            assert!(s.requests > 0);
            // Never below one instance while requests arrive: once the first instance
            // exists, the count stays ≥ 1 until the service ends.
            let series = r
                .service_instances
                .iter()
                .find(|x| x.service == s.service)
                .unwrap();
            let first = series.points.iter().position(|p| p.1 > 0).unwrap();
            assert!(
                series.points[first..]
                    .iter()
                    .filter(|p| p.0 < spec.end)
                    .all(|p| p.1 >= 1),
                "{}: {:?}",
                s.service,
                series.points
            );
        }
    }
}

#[test]
fn bad_input_is_an_error_or_unschedulable_never_a_panic() {
    // Rate series with a negative or non-numeric value.
    let e = RateSeries::parse("1\n-2\n").unwrap_err();
    assert_eq!(e.line, 2);
    let e = RateSeries::parse("1\nmany\n").unwrap_err();
    assert!(e.to_string().contains("not a number"), "{e}");
    // An SLO no share meets: profiling says unschedulable.
    let e = profiled_service(
        "llama",
        DiluModel::Llama2_7b,
        0.001,
        ArrivalProcess::Poisson { rate: 1.0 },
        Bytes::from_gib(16),
        SimDuration::ZERO,
    )
    .unwrap_err();
    assert!(matches!(e, ScenarioError::Profile { .. }));
    assert!(e.to_string().contains("unschedulable"), "{e}");
    // A service whose memory exceeds every GPU: explicit unschedulable with its reason, all
    // its requests dropped; the training job still runs.
    let mut w = scenario_workload().unwrap();
    let mut services = w.services().to_vec();
    services[2].instance.gpu_memory = Bytes::from_gib(60);
    w = Workload::with_services(w.jobs().to_vec(), services);
    let r = run_serving(&scenario_cluster().unwrap(), &w, "dilu", 1, true).unwrap();
    let s = &r.summary.services[2];
    assert!(s.unschedulable.is_some(), "{s:?}");
    assert_eq!(s.dropped, s.requests);
    assert!(r.jobs.iter().all(|j| j.iterations_done > 0.0));
}
