//! Issue 39 item 1: a pending job says why it waits (`describe`, listings, the queue), one kind
//! of a closed set with its details, the same as the simulator says of the same world.

use super::api::{Request, Response};
use super::testkit::{node, policy, typed_node, Harness, TOKEN};
use crate::core::runs::NodeHealth;
use crate::types::{JobView, WaitReason};

fn describe(h: &mut Harness, id: i64) -> JobView {
    match h
        .core
        .handle_request(h.now, Some(TOKEN), Request::Get { id })
    {
        Ok(Response::Detail(d)) => d.job,
        other => panic!("describe: {other:?}"),
    }
}

fn reason(h: &mut Harness, id: i64) -> WaitReason {
    describe(h, id).reason.expect("a pending job has a reason")
}

/// The queue's reasons, by job id.
fn queued(h: &mut Harness) -> Vec<(i64, WaitReason)> {
    match h.core.handle_request(h.now, Some(TOKEN), Request::Queue) {
        Ok(Response::Queue(q)) => q
            .pending
            .into_iter()
            .map(|j| (j.id, j.reason.expect("a reason in the queue")))
            .collect(),
        other => panic!("queue: {other:?}"),
    }
}

#[test]
fn gpus_names_what_is_free_and_who_holds_it() {
    let mut h = Harness::new(vec![node("n1", 4)], policy("fifo", None));
    let a = h.submit("a", 3, 600);
    h.schedule();
    let b = h.submit("b", 2, 600);
    h.schedule();
    let r = reason(&mut h, b);
    assert_eq!(r.kind, "gpus", "{r:?}");
    assert_eq!(r.needs, "2 GPUs");
    assert_eq!(r.free.len(), 1);
    assert_eq!((r.free[0].free_gpus, r.free[0].total_gpus), (1, 4));
    assert_eq!(r.holders.len(), 1);
    assert_eq!((r.holders[0].id, r.holders[0].gpus), (a, 3));
    assert!(
        r.text.starts_with("no fitting GPUs") && r.text.contains("held by a (3)"),
        "{}",
        r.text
    );
    // A running job has none.
    assert!(describe(&mut h, a).reason.is_none());
    // The queue says the same.
    assert_eq!(queued(&mut h), vec![(b, r)]);
}

#[test]
fn order_for_a_job_that_fits_before_the_next_decision() {
    let mut h = Harness::new(vec![node("n1", 4)], policy("fifo", None));
    let a = h.submit("a", 1, 600);
    let b = h.submit("b", 1, 600);
    let r = reason(&mut h, b);
    assert_eq!(r.kind, "order", "{r:?}");
    // FIFO's own order: a was submitted first.
    assert_eq!(r.ahead, Some(1));
    assert_eq!(r.note.as_deref(), Some("fifo order"));
    let q = queued(&mut h);
    assert_eq!(q[0].0, a);
    assert_eq!((q[0].1.kind.as_str(), q[0].1.ahead), ("order", Some(0)));
    assert_eq!((q[1].1.kind.as_str(), q[1].1.ahead), ("order", Some(1)));
    h.schedule();
    assert!(describe(&mut h, b).reason.is_none(), "started");
}

#[test]
fn unavailable_when_the_gpus_it_needs_are_on_a_drained_node() {
    let mut h = Harness::new(vec![node("n1", 4), node("n2", 4)], policy("fifo", None));
    h.submit("a", 4, 600);
    h.schedule();
    h.core
        .set_node_health(h.now, "n2", Some(NodeHealth::Draining))
        .unwrap();
    let b = h.submit("b", 4, 600);
    h.schedule();
    let r = reason(&mut h, b);
    assert_eq!(r.kind, "unavailable", "{r:?}");
    assert_eq!(r.free[0].unavailable_gpus, 4);
    // Back up: it starts.
    h.core.set_node_health(h.now, "n2", None).unwrap();
    h.schedule();
    assert!(describe(&mut h, b).reason.is_none());
}

#[test]
fn cpu_memory_when_the_free_gpus_lack_cores() {
    let mut h = Harness::new(vec![node("n1", 4)], policy("fifo", None));
    h.submit_spec("name: a\ncommand: [sleep, \"600\"]\ngpus: 1\ncpu: \"60\"\n");
    h.schedule();
    let b = h.submit_spec("name: b\ncommand: [sleep, \"600\"]\ngpus: 1\ncpu: \"8\"\n");
    h.schedule();
    let r = reason(&mut h, b);
    assert_eq!(r.kind, "cpu_memory", "{r:?}");
    assert!(r.needs.contains("8 CPU"), "{}", r.needs);
}

#[test]
fn gang_when_free_gpus_are_of_two_types() {
    let mut h = Harness::new(
        vec![typed_node("a", "a100", 2), typed_node("v", "v100", 2)],
        policy("fifo", None),
    );
    h.submit_spec("name: x\ncommand: [sleep, \"600\"]\ngpus: 1\ngpuType: a100\n");
    h.submit_spec("name: y\ncommand: [sleep, \"600\"]\ngpus: 1\ngpuType: v100\n");
    h.schedule();
    let z = h.submit("z", 2, 600);
    h.schedule();
    let r = reason(&mut h, z);
    assert_eq!(r.kind, "gang", "{r:?}");
    assert_eq!(r.free.len(), 2);
    assert!(r.free.iter().all(|g| g.free_gpus == 1), "{r:?}");
}

/// The same world in both drivers: one node of 4 GPUs, `a` (3 GPUs) running, `b` (2 GPUs)
/// waiting under FIFO. The daemon's reason and the simulator's are the same, down to the
/// text (job names and node groups alike).
#[test]
fn the_simulator_gives_the_same_reason_for_the_same_world() {
    use tessera_model::{SimDuration, SimTime, TrainingJob, Workload};
    let mut h = Harness::new(vec![node("n1", 4)], policy("fifo", None));
    h.submit("a", 3, 600);
    h.schedule();
    let b = h.submit("b", 2, 600);
    h.schedule();
    let daemon = reason(&mut h, b);

    let cluster = h.core.map.cluster.clone();
    let job = |id: u32, name: &str, gpus: u32| {
        let mut j = TrainingJob::simple(id, SimTime::ZERO, gpus, SimDuration::from_secs(600));
        j.name = name.into();
        j
    };
    let workload = Workload::new(vec![job(0, "a", 3), job(1, "b", 2)]);
    let mut sim = tessera_sim::Simulation::new(
        &cluster,
        &workload,
        &tessera_perf::TraceThroughput,
        policy("fifo", None),
        tessera_sim::SimConfig::default(),
    );
    assert!(sim.step().unwrap());
    let simulated = sim
        .pending_reason(tessera_model::JobId(1))
        .expect("b waits in the simulator");
    assert_eq!(daemon.kind, simulated.kind.key());
    assert_eq!(daemon.needs, simulated.need.to_string());
    assert_eq!(daemon.text, simulated.to_string());
    // And it counts b's wait under that kind: a's 600 s.
    while sim.step().unwrap() {}
    let report = sim.into_report();
    let gpus = tessera_sched::WaitKind::Gpus.index();
    assert_eq!(report.waits[1][gpus], 600.0, "{:?}", report.waits[1]);
}
