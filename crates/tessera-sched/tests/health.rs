//! GPU health (issue 9): a down GPU leaves the free pool, validation refuses it with a reason,
//! and the invariants account for it.

use tessera_model::{
    Allocation, Bytes, Cluster, DeviceAlloc, GpuMask, GpuPart, JobId, MilliCpu, NodeId, NodeShare,
    SimDuration, SimTime, TrainingJob,
};
use tessera_sched::{validate, Action, ClusterState};

fn cluster() -> Cluster {
    Cluster::homogeneous(
        "A100-40GB",
        2,
        2,
        MilliCpu::from_cores(16),
        Bytes::from_gib(128),
    )
    .unwrap()
}

fn start(node: u32, gpus: u32, devices: Option<GpuMask>) -> Action {
    Action::Start {
        job: JobId(0),
        allocation: Allocation::new(vec![NodeShare {
            node: NodeId(node),
            gpus,
            cpu: MilliCpu::from_cores(1),
            memory: Bytes::from_gib(1),
            devices: devices.map(|gpus| DeviceAlloc {
                gpus,
                part: GpuPart::Whole,
            }),
        }]),
    }
}

#[test]
fn a_down_gpu_leaves_the_pool_and_is_refused_by_name() {
    let c = cluster();
    let job = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(10));
    let mut s = ClusterState::new(&c);
    assert!(s.set_down(NodeId(0), 1, true));
    assert!(!s.set_down(NodeId(0), 1, true), "already down: no change");
    assert_eq!(s.free()[0].gpus, 1);
    assert_eq!(s.free_gpus(), 3);
    assert_eq!(s.down_gpus(), 1);
    let err = validate(
        &s,
        &c,
        &job,
        None,
        &start(0, 1, Some(GpuMask::one(1))),
        SimTime::ZERO,
    )
    .unwrap_err();
    assert!(
        err.reason.contains("GPU 1 of") && err.reason.contains("down"),
        "{}",
        err.reason
    );
    // Left to the driver, the healthy GPU is picked.
    let got = validate(&s, &c, &job, None, &start(0, 1, None), SimTime::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(got.shares[0].devices.unwrap().gpus, GpuMask::one(0));
    // Two whole GPUs no longer fit on node 0.
    assert!(validate(&s, &c, &job, None, &start(0, 2, None), SimTime::ZERO).is_err());
    s.check_invariants(&c, std::iter::empty::<(u32, &Allocation)>())
        .unwrap();
    assert!(s.set_down(NodeId(0), 1, false));
    assert_eq!(s.free_gpus(), 4);
    s.check_invariants(&c, std::iter::empty::<(u32, &Allocation)>())
        .unwrap();
}

#[test]
fn a_down_node_refuses_even_a_share_without_gpus() {
    let c = cluster();
    let job = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(10));
    let mut s = ClusterState::new(&c);
    s.set_down(NodeId(1), 0, true);
    s.set_down(NodeId(1), 1, true);
    let two = Action::Start {
        job: JobId(0),
        allocation: Allocation::new(vec![
            NodeShare::whole(NodeId(0), 1, MilliCpu::from_cores(1), Bytes::from_gib(1)),
            NodeShare::whole(NodeId(1), 0, MilliCpu::from_cores(1), Bytes::from_gib(1)),
        ]),
    };
    let err = validate(&s, &c, &job, None, &two, SimTime::ZERO).unwrap_err();
    assert!(err.reason.contains("is down"), "{}", err.reason);
}

#[test]
fn a_holder_released_from_a_down_gpu_does_not_return_it_to_the_pool() {
    let c = cluster();
    let job = TrainingJob::simple(0, SimTime::ZERO, 2, SimDuration::from_secs(10));
    let mut s = ClusterState::new(&c);
    let alloc = validate(&s, &c, &job, None, &start(0, 2, None), SimTime::ZERO)
        .unwrap()
        .unwrap();
    s.take(&c, &alloc);
    // Marked down while still held (a batch in flight): the holder keeps it until release.
    s.set_down(NodeId(0), 0, true);
    s.check_invariants(&c, [(0u32, &alloc)]).unwrap();
    s.release(&c, &alloc);
    assert_eq!(s.free()[0].gpus, 1, "GPU 0 is down, GPU 1 is back");
    s.check_invariants(&c, std::iter::empty::<(u32, &Allocation)>())
        .unwrap();
    // A reconfiguration of a down GPU is refused too.
    let err = s.check_reconfigure(&c, NodeId(0), 0, None).unwrap_err();
    assert!(err.reason.contains("down"), "{}", err.reason);
}
