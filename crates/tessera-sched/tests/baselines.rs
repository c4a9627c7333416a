//! The baseline orderings on their own (issue 10: they had no tests in this crate): on one
//! 4-GPU server where only one of the waiting jobs fits, each policy starts the job its order
//! ranks first; the preemptive ones preempt at a round boundary and FIFO never does; FIFO
//! backfills past a job that does not fit.

use tessera_model::{
    Allocation, Bytes, Cluster, JobId, MilliCpu, NodeId, NodeShare, SimDuration, SimTime,
    TrainingJob, Workload,
};
use tessera_sched::baselines::build;
use tessera_sched::{
    Action, ActiveJob, ClusterState, ClusterView, JobState, PolicyOptions, Trigger,
};

fn server() -> Cluster {
    Cluster::homogeneous(
        "V100-32GB",
        1,
        4,
        MilliCpu::from_cores(24),
        Bytes::from_gib(256),
    )
    .unwrap()
}

/// (submit s, GPUs, duration s) per job, in submit order.
fn workload(specs: &[(u64, u32, u64)]) -> Workload {
    Workload::new(
        specs
            .iter()
            .enumerate()
            .map(|(i, &(t, g, d))| {
                TrainingJob::simple(
                    i as u32,
                    SimTime::from_secs(t),
                    g,
                    SimDuration::from_secs(d),
                )
            })
            .collect(),
    )
}

/// The whole server's share for `gpus` GPUs of a job, GPU-proportional.
fn share(gpus: u32) -> Allocation {
    Allocation::single(NodeShare::whole(
        NodeId(0),
        gpus,
        MilliCpu::from_cores(6 * gpus as u64),
        Bytes::from_gib(64 * gpus as u64),
    ))
}

/// Runs `policy` once at `now` and returns its actions.
fn decide(
    policy: &str,
    now: u64,
    trigger: Trigger,
    w: &Workload,
    active: &[ActiveJob],
) -> Vec<Action> {
    let cluster = server();
    let mut state = ClusterState::new(&cluster);
    for a in active {
        if let Some(alloc) = &a.allocation {
            state.take(&cluster, alloc);
        }
    }
    let view = ClusterView {
        now: SimTime::from_secs(now),
        trigger,
        cluster: &cluster,
        free: state.free(),
        state: &state,
        jobs: w.jobs(),
        active,
        services: &[],
    };
    let mut p = build(policy, &PolicyOptions::default()).expect("a baseline");
    let mut actions = Vec::new();
    p.schedule(&view, &mut actions);
    actions
}

fn started(actions: &[Action]) -> Vec<u32> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Start { job, .. } => Some(job.0),
            _ => None,
        })
        .collect()
}

fn preempted(actions: &[Action]) -> Vec<u32> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Preempt { job } => Some(job.0),
            _ => None,
        })
        .collect()
}

fn queued(w: &Workload) -> Vec<ActiveJob> {
    w.jobs().iter().map(ActiveJob::arrived).collect()
}

const ARRIVAL: Trigger = Trigger {
    round: false,
    arrival: true,
    completion: false,
    wakeup: false,
    reconfigured: false,
};

#[test]
fn each_order_starts_the_job_it_ranks_first() {
    // Job 0: early and long; job 1: later and short. Both want the whole server.
    let w = workload(&[(0, 4, 1000), (5, 4, 100)]);
    assert_eq!(started(&decide("fifo", 10, ARRIVAL, &w, &queued(&w))), [0]);
    assert_eq!(started(&decide("srtf", 10, ARRIVAL, &w, &queued(&w))), [1]);

    // LAS: job 0 has had 500 GPU-seconds of service, job 1 none, though job 0 has less left.
    let w = workload(&[(0, 4, 100), (5, 4, 1000)]);
    let mut active = queued(&w);
    active[0].attained_gpu_secs = 500.0;
    assert_eq!(started(&decide("srtf", 10, ARRIVAL, &w, &active)), [0]);
    assert_eq!(started(&decide("las", 10, ARRIVAL, &w, &active)), [1]);

    // FTF: at t=1000 job 0 (in the system 1000 s for 100 s of work, rho 11) goes before job 1
    // (10 s waited for 50 s of work, rho 1.2), although job 1 is shorter.
    let w = workload(&[(0, 4, 100), (990, 4, 50)]);
    assert_eq!(
        started(&decide("srtf", 1000, ARRIVAL, &w, &queued(&w))),
        [1]
    );
    assert_eq!(started(&decide("ftf", 1000, ARRIVAL, &w, &queued(&w))), [0]);
}

#[test]
fn preemptive_orders_preempt_at_a_round_fifo_never_does() {
    // Job 0 runs on the whole server with 1000 s left; job 1 (100 s) waits.
    let w = workload(&[(0, 4, 1000), (5, 4, 100)]);
    let mut active = queued(&w);
    active[0].state = JobState::Running;
    active[0].allocation = Some(share(4));
    active[0].first_start = Some(SimTime::ZERO);
    active[0].attained_gpu_secs = 40.0;
    let round = Trigger {
        round: true,
        ..Trigger::default()
    };
    let srtf = decide("srtf", 10, round, &w, &active);
    assert_eq!((preempted(&srtf), started(&srtf)), (vec![0], vec![1]));
    let las = decide("las", 10, round, &w, &active);
    assert_eq!((preempted(&las), started(&las)), (vec![0], vec![1]));
    let fifo = decide("fifo", 10, round, &w, &active);
    assert!(
        fifo.is_empty(),
        "FIFO neither preempts nor overbooks: {fifo:?}"
    );
}

#[test]
fn fifo_backfills_past_a_job_that_does_not_fit() {
    // Job 0 holds 2 GPUs; job 1 (4 GPUs) cannot start, job 2 (2 GPUs) can.
    let w = workload(&[(0, 2, 1000), (1, 4, 100), (2, 2, 100)]);
    let mut active = queued(&w);
    active[0].state = JobState::Running;
    active[0].allocation = Some(share(2));
    let actions = decide("fifo", 10, ARRIVAL, &w, &active);
    assert_eq!(started(&actions), [2]);
    let Some(Action::Start { allocation, .. }) = actions.first() else {
        panic!("{actions:?}")
    };
    // GPU-proportional CPU and memory: 2 of 4 GPUs get half the server.
    assert_eq!(
        (allocation.gpus(), allocation.cpu(), allocation.memory()),
        (2, MilliCpu::from_cores(12), Bytes::from_gib(128))
    );
    assert_eq!(JobId(2), w.jobs()[2].id);
}

/// A tracked queue (the simulator's and the daemon's path): a job arriving at an empty queue is
/// started at once, and when the driver never reports that start (it refused it) the job is
/// still waiting at the next scheduling point, ahead of a later arrival.
#[test]
fn a_start_the_driver_refuses_leaves_the_job_waiting() {
    use tessera_sched::JobChange;
    let w = workload(&[(0, 4, 1000), (5, 2, 100)]);
    let cluster = server();
    let state = ClusterState::new(&cluster);
    // LAS with rounds: between rounds it only fills, as FIFO does.
    let rounds = PolicyOptions {
        round: Some(SimDuration::from_secs(300)),
        ..PolicyOptions::default()
    };
    for policy in ["fifo", "las"] {
        let mut p = build(policy, &rounds).expect("a baseline");
        assert!(p.track_jobs(), "{policy} tracks its queue");
        let active = queued(&w);
        let decide_at = |p: &mut Box<dyn tessera_sched::Policy>, now: u64, active: &[ActiveJob]| {
            let view = ClusterView {
                now: SimTime::from_secs(now),
                trigger: ARRIVAL,
                cluster: &cluster,
                free: state.free(),
                state: &state,
                jobs: w.jobs(),
                active,
                services: &[],
            };
            let mut actions = Vec::new();
            p.schedule(&view, &mut actions);
            actions
        };
        p.observe(JobChange::Arrived(&active[0], &w.jobs()[0]));
        assert_eq!(
            started(&decide_at(&mut p, 0, &active[..1])),
            vec![0],
            "{policy}"
        );
        // Refused: no Started. Job 1 arrives; job 0 is still first.
        p.observe(JobChange::Arrived(&active[1], &w.jobs()[1]));
        assert_eq!(started(&decide_at(&mut p, 5, &active)), vec![0], "{policy}");
        // Now reported started: job 1 waits for its GPUs (the server's 4 are taken).
        let mut running = active.clone();
        running[0].state = JobState::Running;
        running[0].allocation = Some(share(4));
        p.observe(JobChange::Started(&running[0], &w.jobs()[0]));
        let mut taken = ClusterState::new(&cluster);
        taken.take(&cluster, &share(4));
        let view = ClusterView {
            now: SimTime::from_secs(6),
            trigger: ARRIVAL,
            cluster: &cluster,
            free: taken.free(),
            state: &taken,
            jobs: w.jobs(),
            active: &running,
            services: &[],
        };
        let mut actions = Vec::new();
        p.schedule(&view, &mut actions);
        assert!(started(&actions).is_empty(), "{policy}: {actions:?}");
    }
}

#[test]
fn a_tracked_queue_with_nothing_waiting_decides_nothing_between_replans() {
    use tessera_sched::{JobChange, Trigger};
    let w = workload(&[(0, 4, 1000)]);
    let completion = Trigger {
        completion: true,
        ..Trigger::default()
    };
    let round = Trigger {
        round: true,
        ..Trigger::default()
    };
    let rounds = PolicyOptions {
        round: Some(SimDuration::from_secs(300)),
        ..PolicyOptions::default()
    };
    for (policy, options) in [
        ("fifo", PolicyOptions::default()),
        ("las", rounds),
        ("srtf", PolicyOptions::default()),
    ] {
        let mut p = build(policy, &options).expect("a baseline");
        assert!(p.track_jobs(), "{policy} tracks its queue");
        let event_driven_replans = policy == "srtf";
        assert_eq!(
            p.may_act(&completion),
            event_driven_replans,
            "{policy}, empty"
        );
        // A preemptive order re-plans at its rounds, queue or not.
        assert_eq!(p.may_act(&round), policy != "fifo", "{policy}, round");
        let active = queued(&w);
        p.observe(JobChange::Arrived(&active[0], &w.jobs()[0]));
        assert!(p.may_act(&completion), "{policy}: a job waits");
        let mut running = active.clone();
        running[0].state = JobState::Running;
        running[0].allocation = Some(share(4));
        p.observe(JobChange::Started(&running[0], &w.jobs()[0]));
        assert_eq!(
            p.may_act(&completion),
            event_driven_replans,
            "{policy}, started"
        );
    }
    // A policy that is not told the changes cannot tell: it is always called.
    let untracked = build("fifo", &PolicyOptions::default()).expect("a baseline");
    assert!(untracked.may_act(&completion));
}
