//! The one validator on service instances: the same capacity rules as jobs.

use tessera_model::{
    Allocation, Bytes, Cluster, DeviceAlloc, GpuDemand, GpuMask, GpuPart, InferenceService,
    MilliCpu, NodeId, NodeShare, ServiceId, SimTime, TrainingJob,
};
use tessera_sched::{validate, Action, ClusterState, InstanceId};

fn cluster() -> Cluster {
    Cluster::homogeneous(
        "A100-40GB",
        1,
        2,
        MilliCpu::from_cores(16),
        Bytes::from_gib(128),
    )
    .unwrap()
}

fn quota_service(req: u16, lim: u16, mem_gib: u64) -> InferenceService {
    let mut s = InferenceService::simple("s", SimTime::ZERO, SimTime::from_secs(10), 1.0);
    s.instance.gpu = GpuDemand::Quota {
        sm_request: req,
        sm_limit: lim,
    };
    s.instance.gpu_memory = Bytes::from_gib(mem_gib);
    s
}

fn quota_alloc(s: &InferenceService, gpu: u32) -> Allocation {
    Allocation::new(vec![NodeShare {
        node: NodeId(0),
        gpus: 0,
        cpu: s.instance.cpu,
        memory: s.instance.memory,
        devices: Some(DeviceAlloc {
            gpus: GpuMask::one(gpu),
            part: s.instance.part(),
        }),
    }])
}

fn scale_out(s: &InferenceService, allocation: Allocation) -> Action {
    Action::ScaleOut {
        service: s.id,
        allocation,
    }
}

#[test]
fn quotas_of_instances_and_jobs_add_up_on_a_gpu() {
    let c = cluster();
    let mut st = ClusterState::new(&c);
    let s = quota_service(400, 600, 10);
    let t = SimTime::ZERO;
    for _ in 0..2 {
        let a = validate(&st, &c, &s, None, &scale_out(&s, quota_alloc(&s, 0)), t)
            .unwrap()
            .unwrap();
        st.take(&c, &a);
    }
    assert_eq!(st.gpus(NodeId(0))[0].sm_requested, 800);
    assert_eq!(st.free()[0].gpus, 1, "a shared GPU leaves the whole pool");
    // A third would over-commit requests (1200‰): refused.
    let e = validate(&st, &c, &s, None, &scale_out(&s, quota_alloc(&s, 0)), t).unwrap_err();
    assert!(e.reason.contains("1000"), "{}", e.reason);
    // A training job's quota counts the same way.
    let mut job = TrainingJob::simple(0, t, 1, tessera_model::SimDuration::from_secs(10));
    job.gpu_share = None;
    let job_alloc = Allocation::new(vec![NodeShare {
        node: NodeId(0),
        gpus: 0,
        cpu: MilliCpu::from_cores(1),
        memory: Bytes::from_gib(1),
        devices: Some(DeviceAlloc {
            gpus: GpuMask::one(0),
            part: GpuPart::Quota {
                sm_request: 300,
                sm_limit: 300,
                memory: Bytes::from_gib(1),
            },
        }),
    }]);
    let start = Action::Start {
        job: job.id,
        allocation: job_alloc,
    };
    assert!(validate(&st, &c, &job, None, &start, t).is_err());
    // A whole GPU for an instance of a quota service is fine (the exclusive baseline).
    let whole = Allocation::new(vec![NodeShare::whole(
        NodeId(0),
        1,
        s.instance.cpu,
        s.instance.memory,
    )]);
    let a = validate(&st, &c, &s, None, &scale_out(&s, whole), t)
        .unwrap()
        .unwrap();
    assert_eq!(a.shares[0].devices.unwrap().gpus, GpuMask::one(1));
}

#[test]
fn device_memory_is_checked() {
    let c = cluster();
    let st = ClusterState::new(&c);
    // 30 GiB quota twice on a 40 GB GPU: the second is refused.
    let s = quota_service(100, 100, 30);
    let mut st2 = st.clone();
    let a = validate(
        &st2,
        &c,
        &s,
        None,
        &scale_out(&s, quota_alloc(&s, 0)),
        SimTime::ZERO,
    )
    .unwrap()
    .unwrap();
    st2.take(&c, &a);
    let e = validate(
        &st2,
        &c,
        &s,
        None,
        &scale_out(&s, quota_alloc(&s, 0)),
        SimTime::ZERO,
    )
    .unwrap_err();
    assert!(e.reason.contains("memory"), "{}", e.reason);
    // An allocation holding less device memory than an instance needs is refused.
    let mut small = quota_alloc(&s, 1);
    small.shares[0].devices = Some(DeviceAlloc {
        gpus: GpuMask::one(1),
        part: GpuPart::Quota {
            sm_request: 100,
            sm_limit: 100,
            memory: Bytes::from_gib(1),
        },
    });
    assert!(validate(&st, &c, &s, None, &scale_out(&s, small), SimTime::ZERO).is_err());
}

#[test]
fn actions_must_match_the_holder() {
    let c = cluster();
    let st = ClusterState::new(&c);
    let s = quota_service(100, 100, 1);
    let a = quota_alloc(&s, 0);
    let scale_in = Action::ScaleIn {
        service: ServiceId(0),
        instance: InstanceId(3),
    };
    assert_eq!(
        validate(&st, &c, &s, Some(&a), &scale_in, SimTime::ZERO),
        Ok(None)
    );
    assert!(validate(&st, &c, &s, None, &scale_in, SimTime::ZERO).is_err());
    let start = Action::Start {
        job: tessera_model::JobId(0),
        allocation: a.clone(),
    };
    assert!(validate(&st, &c, &s, None, &start, SimTime::ZERO).is_err());
    let job = TrainingJob::simple(
        0,
        SimTime::ZERO,
        1,
        tessera_model::SimDuration::from_secs(1),
    );
    assert!(validate(
        &st,
        &c,
        &job,
        None,
        &scale_out(&s, a.clone()),
        SimTime::ZERO
    )
    .is_err());
    // Two nodes for one instance, or too little CPU: refused.
    let mut two = a.clone();
    two.shares.push(two.shares[0]);
    assert!(validate(&st, &c, &s, None, &scale_out(&s, two), SimTime::ZERO).is_err());
    let mut thin = a;
    thin.shares[0].cpu = MilliCpu(1);
    assert!(validate(&st, &c, &s, None, &scale_out(&s, thin), SimTime::ZERO).is_err());
}

fn with_quota(a: &Allocation, gpu: u32, req: u16, lim: u16, mem_gib: u64) -> Allocation {
    let mut b = a.clone();
    b.shares[0].devices = Some(DeviceAlloc {
        gpus: GpuMask::one(gpu),
        part: GpuPart::Quota {
            sm_request: req,
            sm_limit: lim,
            memory: Bytes::from_gib(mem_gib),
        },
    });
    b
}

#[test]
fn an_instance_retunes_in_place_within_capacity() {
    let c = cluster();
    let mut st = ClusterState::new(&c);
    let s = quota_service(300, 500, 10);
    let t = SimTime::ZERO;
    let mut held = Vec::new();
    for _ in 0..2 {
        let a = validate(&st, &c, &s, None, &scale_out(&s, quota_alloc(&s, 0)), t)
            .unwrap()
            .unwrap();
        st.take(&c, &a);
        held.push(a);
    }
    let retune = |allocation: Allocation| Action::RetuneInstance {
        service: s.id,
        instance: InstanceId(0),
        allocation,
    };
    // 300 -> 700 beside the other's 300: Σ requests 1000 ‰, allowed (its own old quota is
    // released first).
    let up = retune(with_quota(&held[0], 0, 700, 700, 10));
    let new = validate(&st, &c, &s, Some(&held[0]), &up, t)
        .unwrap()
        .unwrap();
    let mut after = st.clone();
    after.release(&c, &held[0]);
    after.take(&c, &new);
    assert_eq!(after.gpus(NodeId(0))[0].sm_requested, 1000);
    // 750 would make 1050 ‰ of requests: refused.
    let over = retune(with_quota(&held[0], 0, 750, 750, 10));
    let e = validate(&st, &c, &s, Some(&held[0]), &over, t).unwrap_err();
    assert!(e.reason.contains("1000"), "{}", e.reason);
    // Limits may reach 1500 ‰ (1000 + the other's 500), no more.
    let limits = retune(with_quota(&held[0], 0, 300, 1000, 10));
    assert!(validate(&st, &c, &s, Some(&held[0]), &limits, t).is_ok());
    let mut third_st = st.clone();
    third_st.take(&c, &with_quota(&held[1], 1, 100, 100, 1));
    let e = validate(&third_st, &c, &s, Some(&held[0]), &limits, t);
    assert!(e.is_ok(), "another GPU's quota does not count: {e:?}");
    // Another GPU is a move, not a retune.
    let moved = retune(with_quota(&held[0], 1, 300, 500, 10));
    let e = validate(&st, &c, &s, Some(&held[0]), &moved, t).unwrap_err();
    assert!(e.reason.contains("keeps"), "{}", e.reason);
    // Less device memory than an instance needs, or memory over the GPU: refused.
    let thin = retune(with_quota(&held[0], 0, 300, 500, 5));
    assert!(validate(&st, &c, &s, Some(&held[0]), &thin, t).is_err());
    let fat = retune(with_quota(&held[0], 0, 300, 500, 35));
    assert!(validate(&st, &c, &s, Some(&held[0]), &fat, t).is_err());
    // No such instance, or a job retuned as an instance: refused.
    assert!(validate(&st, &c, &s, None, &up, t).is_err());
    let job = TrainingJob::simple(0, t, 1, tessera_model::SimDuration::from_secs(1));
    assert!(validate(&st, &c, &job, Some(&held[0]), &up, t).is_err());
}
