//! One validator: the same batch of actions, one of them invalid, is refused for the same
//! reason by the simulator (which stops the run) and by the daemon core (which refuses that
//! action, counts it and carries out the others). Both call [`tessera_sched::validate`]; the
//! daemon adds only its own checks (node and GPU health), tested at the end.

use std::sync::{Arc, Mutex};

use tessera_model::{
    Allocation, Bytes, DeviceAlloc, GpuMask, GpuPart, JobId, MigInstance, MilliCpu, NodeId,
    NodeShare, SimTime, Workload,
};
use tessera_perf::{RestartCosts, ThroughputModel};
use tessera_sched::{Action, ClusterView, Policy};
use tessera_sim::{SimConfig, SimError, Simulation};

use super::testkit::{node, Event, Harness};
use super::Refusal;
use crate::core::runs::{NodeHealth, RunStatus};
use crate::error::BackendError;
use crate::types::JobState;

/// One iteration per second on any allocation (the trace's own truth has no speed for quota
/// or MIG parts; these tests are about validation, not speed).
struct Steady;

impl ThroughputModel for Steady {
    fn throughput(
        &self,
        _job: &tessera_model::TrainingJob,
        _alloc: &Allocation,
        _cluster: &tessera_model::Cluster,
    ) -> f64 {
        1.0
    }
}

/// Returns one scripted batch at its first call, nothing afterwards.
struct Scripted(Arc<Mutex<Option<Vec<Action>>>>);

impl Policy for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn round_length(&self) -> Option<tessera_model::SimDuration> {
        None
    }
    fn schedule(&mut self, _view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        if let Some(batch) = self.0.lock().ok().and_then(|mut b| b.take()) {
            actions.extend(batch);
        }
    }
}

type Batch = Arc<Mutex<Option<Vec<Action>>>>;

fn scripted(batch: Vec<Action>) -> Box<dyn Policy> {
    Box::new(Scripted(Arc::new(Mutex::new(Some(batch)))))
}

/// A scripted policy and the handle that gives it its next batch.
fn scripted_shared() -> (Box<dyn Policy>, Batch) {
    let b = Batch::default();
    (Box::new(Scripted(b.clone())), b)
}

fn next_batch(b: &Batch, batch: Vec<Action>) {
    if let Ok(mut slot) = b.lock() {
        *slot = Some(batch);
    }
}

fn share(gpus: u32, mask: u64, part: GpuPart) -> Allocation {
    Allocation::new(vec![NodeShare {
        node: NodeId(0),
        gpus,
        cpu: MilliCpu::from_cores(1),
        memory: Bytes::from_gib(1),
        devices: Some(DeviceAlloc {
            gpus: GpuMask(mask),
            part,
        }),
    }])
}

fn whole(mask: u64) -> Allocation {
    share(GpuMask(mask).count(), mask, GpuPart::Whole)
}

fn quota(mask: u64, sm_request: u16, sm_limit: u16, gib: u64) -> Allocation {
    share(
        0,
        mask,
        GpuPart::Quota {
            sm_request,
            sm_limit,
            memory: Bytes::from_gib(gib),
        },
    )
}

/// A100-80GB `3g.40gb` (profile index in the catalog's geometry) at `start`.
fn mig3g(start: u8) -> MigInstance {
    let catalog = tessera_model::GpuCatalog::builtin();
    let id = catalog.find("A100-80GB").expect("A100-80GB");
    let geo = catalog.mig_geometry(id).expect("MIG-capable");
    MigInstance {
        profile: geo.find_profile("3g.40gb").expect("3g.40gb"),
        start,
    }
}

fn start(job: u32, allocation: Allocation) -> Action {
    Action::Start {
        job: JobId(job),
        allocation,
    }
}

/// Four 1-GPU jobs submitted at once on one node of 4 A100-80GB; the daemon core schedules
/// `batch`. Returns the harness.
fn daemon(batch: Vec<Action>) -> Harness {
    let mut h = Harness::new_at(vec![node("n1", 4)], scripted(batch), SimTime::ZERO);
    for i in 0..4 {
        h.submit(&format!("j{i}"), 1, 100);
    }
    h.schedule();
    h
}

/// The same through the simulator: the reason it stops with, if any.
fn simulate(h: &Harness, batch: Vec<Action>) -> Option<String> {
    let cluster = h.core.cluster_map().cluster.clone();
    let workload = Workload::new(h.core.training_jobs().to_vec());
    let config = SimConfig {
        record_timeseries: false,
        restart_costs: RestartCosts::free(),
        ..SimConfig::default()
    };
    match Simulation::new(&cluster, &workload, &Steady, scripted(batch), config).run(&mut ()) {
        // A batch that leaves a job queued for good ends the run as stalled: no refusal.
        Ok(_) | Err(SimError::Stalled { .. }) => None,
        Err(SimError::InvalidAction { reason, .. }) => Some(reason),
        Err(e) => panic!("the simulator failed otherwise: {e}"),
    }
}

/// Checks one batch whose last action is invalid: the daemon carries out the others and
/// refuses that one for the reason the simulator gives.
fn same_refusal(batch: Vec<Action>, expected: &str) {
    let h = daemon(batch.clone());
    let refused = h.core.refused();
    assert_eq!(refused.len(), 1, "exactly the invalid action: {refused:?}");
    let (action, why) = &refused[0];
    assert_eq!(action, batch.last().expect("a batch"));
    assert!(matches!(why, Refusal::Invalid(_)), "{why:?}");
    let sim = simulate(&h, batch.clone()).expect("the simulator refuses it too");
    assert_eq!(why.to_string(), sim, "same reason in both drivers");
    assert!(
        sim.contains(expected),
        "reason {sim:?} should mention {expected:?}"
    );
    assert_eq!(h.core.metrics().rejected_actions, 1);
    // Everything before it was carried out.
    let starts = batch[..batch.len() - 1]
        .iter()
        .filter(|a| matches!(a, Action::Start { .. }))
        .count();
    let running = (1..=4)
        .filter(|&id| h.state(id) == JobState::Running)
        .count();
    assert_eq!(running, starts);
}

#[test]
fn a_whole_gpu_taken_twice_is_refused_by_both() {
    same_refusal(
        vec![start(0, whole(0b0001)), start(1, whole(0b0011))],
        "GPU 0 of",
    );
}

#[test]
fn a_gpu_the_node_does_not_have_is_refused_by_both() {
    same_refusal(vec![start(0, whole(1 << 5))], "has no GPU");
}

#[test]
fn over_allocating_the_node_is_refused_by_both() {
    let any = |gpus| {
        Allocation::new(vec![NodeShare::whole(
            NodeId(0),
            gpus,
            MilliCpu::from_cores(1),
            Bytes::from_gib(1),
        )])
    };
    same_refusal(vec![start(0, any(2)), start(1, any(3))], "over-allocates");
}

#[test]
fn quotas_beyond_the_gpu_are_refused_by_both() {
    same_refusal(
        vec![
            start(0, quota(0b1, 600, 800, 10)),
            start(1, quota(0b1, 500, 500, 10)),
        ],
        "SM requests exceed",
    );
    same_refusal(
        vec![start(0, quota(0b1, 600, 500, 10))],
        "request 600 <= limit 500",
    );
    same_refusal(
        vec![
            start(0, quota(0b1, 300, 300, 60)),
            start(1, quota(0b1, 300, 300, 30)),
        ],
        "device memory",
    );
}

#[test]
fn mig_instances_of_an_unpartitioned_gpu_are_refused_by_both() {
    same_refusal(
        vec![start(0, share(0, 0b1, GpuPart::Mig(mig3g(0))))],
        "not partitioned",
    );
}

#[test]
fn reconfiguring_a_held_gpu_is_refused_by_both() {
    same_refusal(
        vec![
            start(0, whole(0b1)),
            Action::Reconfigure {
                node: NodeId(0),
                gpu: 0,
                layout: Some(vec![mig3g(0), mig3g(4)]),
            },
        ],
        "in use",
    );
    // An invalid layout (two 3g instances at the same start).
    same_refusal(
        vec![Action::Reconfigure {
            node: NodeId(0),
            gpu: 1,
            layout: Some(vec![mig3g(0), mig3g(0)]),
        }],
        "overlaps",
    );
}

#[test]
fn job_actions_in_the_wrong_state_are_refused_by_both() {
    same_refusal(vec![Action::Preempt { job: JobId(2) }], "queued");
    same_refusal(
        vec![
            start(0, quota(0b1, 300, 500, 10)),
            Action::Retune {
                job: JobId(0),
                allocation: quota(0b10, 300, 500, 10),
            },
        ],
        "a retune keeps",
    );
}

#[test]
fn a_valid_device_level_batch_is_carried_out_by_both() {
    let batch = vec![
        start(0, whole(0b0100)),
        start(1, quota(0b0001, 400, 600, 20)),
        start(2, quota(0b0001, 500, 900, 20)),
        Action::Reconfigure {
            node: NodeId(0),
            gpu: 3,
            layout: Some(vec![mig3g(0), mig3g(4)]),
        },
    ];
    let h = daemon(batch.clone());
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    assert_eq!(simulate(&h, batch), None);
    let gpus = h.core.device_state().gpus(NodeId(0));
    assert!(gpus[2].whole);
    assert_eq!((gpus[0].quota_holders, gpus[0].sm_requested), (2, 900));
    assert_eq!(gpus[3].mig.as_ref().map(Vec::len), Some(2), "reconfigured");
}

#[test]
fn the_daemon_adds_node_health() {
    // A node drained by an administrator takes nothing new; the simulator has no such state.
    let mut core = super::testkit::core_with(
        &[node("n1", 4)],
        scripted(vec![start(0, whole(0b1))]),
        SimTime::ZERO,
    );
    core.set_node_health(SimTime::ZERO, "n1", Some(NodeHealth::Draining))
        .expect("known node");
    let accepted = core.submit(
        SimTime::ZERO,
        vec![(
            Some(super::testkit::TOKEN.into()),
            "name: j0\ncommand: [\"true\"]\ngpus: 1\n".into(),
        )],
    );
    assert!(accepted.iter().all(Result::is_ok));
    while core.poll_command().is_some() {}
    core.schedule(SimTime::ZERO);
    assert_eq!(core.refused().len(), 1);
    assert_eq!(core.refused()[0].1, Refusal::NodeNotUp("n1".into()));
}

#[test]
fn a_failed_reconfiguration_leaves_the_gpu_unhealthy_and_the_jobs_queued() {
    let (policy, batch) = scripted_shared();
    let mut h = Harness::new_at(vec![node("n1", 1)], policy, SimTime::ZERO);
    next_batch(&batch, vec![start(0, whole(0b1))]);
    let j0 = h.submit("j0", 1, 100);
    h.schedule();
    assert_eq!(h.state(j0), JobState::Running);
    h.reconfigure_error = Some(BackendError::Command {
        program: "nvidia-smi".into(),
        status: "exit status: 6".into(),
        stderr: "In use by another client".into(),
    });
    next_batch(
        &batch,
        vec![
            Action::Preempt { job: JobId(0) },
            Action::Reconfigure {
                node: NodeId(0),
                gpu: 0,
                layout: Some(vec![mig3g(0), mig3g(4)]),
            },
        ],
    );
    h.take_events();
    h.schedule();
    assert!(h.core.refused().is_empty(), "{:?}", h.core.refused());
    // The holder is stopped before the GPU is reconfigured.
    let events = h.take_events();
    let stop = events
        .iter()
        .position(|e| matches!(e, Event::Stop(_, _, true)));
    let reconf = events
        .iter()
        .position(|e| matches!(e, Event::Reconfigure(..)));
    assert!(stop.is_some() && stop < reconf, "{events:?}");
    assert!(events.contains(&Event::Reconfigure(
        "n1".into(),
        0,
        Some(vec!["3g.40gb".into(), "3g.40gb".into()])
    )));
    assert_eq!(h.state(j0), JobState::Pending, "queued, not lost");
    let unhealthy = h.core.unhealthy_gpus();
    assert_eq!(unhealthy.len(), 1);
    assert_eq!((unhealthy[0].0.as_str(), unhealthy[0].1), ("n1", 0));
    assert!(unhealthy[0].2.contains("In use by another client"));
    assert_eq!(h.core.device_state().free()[0].gpus, 0, "out of the pool");
    // `GET /v1/nodes` shows it.
    let nodes = h
        .core
        .handle_request(h.now, Some(super::testkit::TOKEN), super::Request::Nodes)
        .expect("nodes");
    let super::Response::Nodes(list) = nodes else {
        panic!("not a node list")
    };
    let gpu = &list.nodes[0].devices[0];
    assert_eq!(gpu.mode, "unhealthy");
    assert!(gpu
        .reason
        .as_deref()
        .is_some_and(|r| r.contains("In use by another client")));
    next_batch(&batch, vec![start(0, whole(0b1))]);
    h.schedule();
    assert!(matches!(
        h.core.refused(),
        [(_, Refusal::GpuUnhealthy { gpu: 0, .. })]
    ));
    assert_eq!(h.state(j0), JobState::Pending);
}

#[test]
fn a_declined_reconfiguration_keeps_the_layout_and_the_gpu_healthy() {
    let (policy, batch) = scripted_shared();
    let mut h = Harness::new_at(vec![node("n1", 1)], policy, SimTime::ZERO);
    h.reconfigure_error = Some(BackendError::Declined {
        action: "reconfigure",
        backend: "slurm",
    });
    next_batch(
        &batch,
        vec![Action::Reconfigure {
            node: NodeId(0),
            gpu: 0,
            layout: Some(vec![mig3g(0), mig3g(4)]),
        }],
    );
    let j0 = h.submit("j0", 1, 100);
    h.schedule();
    assert!(h.core.unhealthy_gpus().is_empty());
    let g = &h.core.device_state().gpus(NodeId(0))[0];
    assert!(g.is_whole_free() && g.ready_at <= h.now, "{g:?}");
    next_batch(&batch, vec![start(0, whole(0b1))]);
    h.schedule();
    assert_eq!(h.state(j0), JobState::Running);
    let _ = RunStatus::Running;
}
