//! A run forked from a live state instead of an empty cluster.
//!
//! A driver that schedules real jobs (the daemon) describes what it holds now as a
//! [`Snapshot`]: the instant, each job's progress and attained service, the allocations of
//! the jobs running, the GPUs' MIG layouts, GPUs out of service, and capacity held by
//! things the run does not model (service instances). [`Simulation::fork`] builds a run that
//! starts there: jobs submitted by then have arrived (with the service they attained, so a
//! LAS queue orders them as the driver's does), running jobs hold their allocations and
//! finish when their remaining work is done, and the policy is called once at the snapshot's
//! instant, as after an arrival. The rest of the run is the ordinary engine: the report's
//! `first_start` of a job queued in the snapshot is when the policy would next start it.

use super::*;

/// One job's state at the snapshot's instant. Jobs of the workload not listed are untouched:
/// they arrive at their submit time with no progress (a job submitted after the instant is
/// a future arrival).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotJob {
    /// The job, as numbered in the forked run's workload.
    pub job: JobId,
    /// Iterations done (capped at the job's total).
    pub done_iters: f64,
    /// GPU·µs of service attained (what LAS ranks by).
    pub attained_gpu_us: u64,
    /// Preemptions so far.
    pub preemptions: u32,
    /// Running: where, and when its progress resumes (after a restart's checkpoint restore;
    /// at or before the instant when it is already working). `None`: queued.
    pub running: Option<RunningAt>,
}

/// A running job's holding in a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunningAt {
    /// What it holds, devices named.
    pub allocation: Allocation,
    /// When its progress (re)starts; before the instant counts as the instant.
    pub resumes_at: SimTime,
}

/// One GPU's state at the snapshot's instant, listed only when it differs from a fresh
/// cluster's (whole mode, up, ready).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotGpu {
    /// Its node.
    pub node: NodeId,
    /// Its index on the node.
    pub gpu: u32,
    /// Its MIG layout (`None`: whole mode).
    pub layout: Option<Vec<tessera_model::MigInstance>>,
    /// Until when it takes no placement (a reconfiguration in progress): the policy is
    /// called again then, as after a reconfiguration.
    pub ready_at: SimTime,
    /// Out of service (node down or draining, GPU unhealthy): takes no new holder. A job
    /// running on it keeps it until it ends.
    pub down: bool,
}

/// What a run forked from a live state starts from (see the [module docs](self)).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    /// The instant the run starts at; every job submitted by then has arrived.
    pub now: SimTime,
    /// Jobs with progress, service or a holding.
    pub jobs: Vec<SnapshotJob>,
    /// GPUs not in a fresh cluster's state.
    pub gpus: Vec<SnapshotGpu>,
    /// Capacity held for the whole run by holders the run does not model (service
    /// instances): taken before the jobs' allocations, never released.
    pub reserved: Vec<Allocation>,
}

impl<'a> Simulation<'a> {
    /// A run of `policy` starting from `snapshot` instead of an empty cluster at time zero.
    /// Fails with [`SimError::InvalidSnapshot`] when the snapshot does not fit the cluster
    /// or the workload (a job listed twice or not in it, a layout the GPU cannot take, an
    /// allocation that does not fit what is free).
    pub fn fork(
        cluster: &'a Cluster,
        workload: &'a Workload,
        truth: &'a dyn ThroughputModel,
        policy: Box<dyn Policy>,
        config: SimConfig,
        snapshot: &Snapshot,
    ) -> Result<Simulation<'a>, SimError> {
        let mut sim = Simulation::new(cluster, workload, truth, policy, config);
        let now = snapshot.now;
        let bad = |reason: String| SimError::InvalidSnapshot { now, reason };
        for g in &snapshot.gpus {
            if g.layout.is_some() {
                sim.devices
                    .check_reconfigure(cluster, g.node, g.gpu, g.layout.as_deref())
                    .map_err(|e| bad(e.reason))?;
                sim.devices
                    .reconfigure(g.node, g.gpu, g.layout.clone(), g.ready_at);
            } else if g.ready_at > now {
                sim.devices.reconfigure(g.node, g.gpu, None, g.ready_at);
            }
            if g.ready_at > now {
                sim.seq += 1;
                sim.heap
                    .push(Reverse((g.ready_at, sim.seq, Event::ReconfigDone)));
            }
        }
        sim.now = now;
        sim.util_synced_at = now;
        let mut seen = vec![false; sim.jobs.len()];
        for j in &snapshot.jobs {
            match seen.get_mut(j.job.index()) {
                Some(s) if !*s => *s = true,
                Some(_) => return Err(bad(format!("job {} is listed twice", j.job.0))),
                None => return Err(bad(format!("job {} is not in the workload", j.job.0))),
            }
            if sim.jobs[j.job.index()].submit > now {
                return Err(bad(format!(
                    "job {} has progress but is submitted after the snapshot",
                    j.job.0
                )));
            }
            let st = &mut sim.state[j.job.index()];
            st.done = j.done_iters.clamp(0.0, st.total);
            st.served_gpu_us = j.attained_gpu_us;
            st.preemptions = j.preemptions;
            // A job that ran before restarts at a cost, as after a preemption.
            st.ever_started = j.running.is_some() || j.attained_gpu_us > 0 || j.done_iters > 0.0;
        }
        for alloc in &snapshot.reserved {
            let mut alloc = alloc.clone();
            sim.devices
                .resolve_in_place(cluster, &[], &mut alloc, now)
                .map_err(|e| bad(format!("reserved capacity: {}", e.reason)))?;
            sim.take(&alloc);
        }
        // Every job submitted by the instant arrives (in submit order, as the engine would
        // have had them arrive), carrying its progress and service.
        while let Some(job) = sim.jobs.get(sim.next_arrival) {
            if job.submit > now {
                break;
            }
            sim.next_arrival += 1;
            sim.events += 1;
            sim.arrive(job);
        }
        for j in &snapshot.jobs {
            let Some(run) = &j.running else { continue };
            let job = j.job;
            let pos = match sim.state[job.index()].active_pos {
                NOT_ACTIVE => {
                    return Err(bad(format!(
                        "running job {} did not arrive (refused, or still being profiled)",
                        job.0
                    )))
                }
                p => p as usize,
            };
            let action = Action::Start {
                job,
                allocation: run.allocation.clone(),
            };
            let alloc = validate(
                &sim.devices,
                cluster,
                &sim.jobs[job.index()],
                None,
                &action,
                now,
            )
            .map_err(|e| bad(format!("running job {}: {}", job.0, e.reason)))?
            .ok_or_else(|| bad(format!("running job {}: validated to nothing", job.0)))?;
            sim.take(&alloc);
            let restoring = run.resumes_at.saturating_since(now);
            sim.begin_after(job, pos, alloc, restoring)?;
        }
        for g in snapshot.gpus.iter().filter(|g| g.down) {
            sim.devices.set_down(g.node, g.gpu, true);
        }
        // The policy's first call, at the instant, as after the arrivals it was just told of.
        sim.seq += 1;
        sim.heap.push(Reverse((now, sim.seq, Event::Forked)));
        sim.record_sample();
        Ok(sim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::{MilliCpu, NodeShare};
    use tessera_perf::TraceThroughput;
    use tessera_sched::baselines::{JobOrder, OrderedPolicy};

    fn cluster(nodes: u32, gpus: u32) -> Cluster {
        Cluster::homogeneous(
            "A100-80GB",
            nodes,
            gpus,
            MilliCpu::from_cores(32),
            Bytes::from_gib(256),
        )
        .unwrap()
    }

    fn job(id: u32, submit: u64, gpus: u32, secs: u64) -> TrainingJob {
        TrainingJob::simple(
            id,
            SimTime::from_secs(submit),
            gpus,
            SimDuration::from_secs(secs),
        )
    }

    fn on(node: u32, gpus: u32) -> Allocation {
        Allocation::new(vec![NodeShare::whole(
            NodeId(node),
            gpus,
            MilliCpu::from_cores(8 * gpus as u64),
            Bytes::from_gib(64 * gpus as u64),
        )])
    }

    fn config() -> SimConfig {
        SimConfig {
            restart_costs: RestartCosts::free(),
            ..SimConfig::default()
        }
    }

    fn starts(
        c: &Cluster,
        w: &Workload,
        order: JobOrder,
        round: Option<SimDuration>,
        snap: &Snapshot,
    ) -> Vec<Option<u64>> {
        let policy = Box::new(OrderedPolicy::new(order, round));
        let sim = Simulation::fork(c, w, &TraceThroughput, policy, config(), snap).unwrap();
        let report = sim.run(&mut ()).unwrap();
        report
            .jobs
            .iter()
            .map(|r| r.first_start.map(|t| t.as_micros() / 1_000_000))
            .collect()
    }

    fn running(id: u32, done: f64, alloc: Allocation, resumes: u64) -> SnapshotJob {
        SnapshotJob {
            job: JobId(id),
            done_iters: done,
            attained_gpu_us: (done * 1e6) as u64 * alloc.gpus() as u64,
            preemptions: 0,
            running: Some(RunningAt {
                allocation: alloc,
                resumes_at: SimTime::from_secs(resumes),
            }),
        }
    }

    #[test]
    fn an_empty_snapshot_at_zero_is_a_fresh_run() {
        let c = cluster(2, 4);
        let w = Workload::new(vec![job(0, 0, 4, 100), job(1, 5, 8, 50), job(2, 7, 2, 30)]);
        let policy = Box::new(OrderedPolicy::new(JobOrder::Fifo, None));
        let fresh = Simulation::new(&c, &w, &TraceThroughput, policy, config())
            .run(&mut ())
            .unwrap();
        let forked = starts(&c, &w, JobOrder::Fifo, None, &Snapshot::default());
        let fresh: Vec<_> = fresh
            .jobs
            .iter()
            .map(|r| r.first_start.map(|t| t.as_micros() / 1_000_000))
            .collect();
        assert_eq!(forked, fresh);
    }

    #[test]
    fn a_queued_job_starts_when_the_running_one_has_done_its_remaining_work() {
        let c = cluster(1, 4);
        let w = Workload::new(vec![job(0, 0, 4, 100), job(1, 10, 4, 50)]);
        // Job 0 has done 40 of its 100 iterations at t = 40: 60 s left.
        let snap = Snapshot {
            now: SimTime::from_secs(40),
            jobs: vec![running(0, 40.0, on(0, 4), 0)],
            ..Snapshot::default()
        };
        assert_eq!(
            starts(&c, &w, JobOrder::Fifo, None, &snap),
            [Some(40), Some(100)]
        );
        // Measured slower: only 10 done by then, so 90 s left.
        let snap = Snapshot {
            jobs: vec![running(0, 10.0, on(0, 4), 0)],
            ..snap
        };
        assert_eq!(
            starts(&c, &w, JobOrder::Fifo, None, &snap),
            [Some(40), Some(130)]
        );
        // Still restoring from a checkpoint until t = 55: progress resumes then.
        let snap = Snapshot {
            jobs: vec![running(0, 10.0, on(0, 4), 55)],
            ..snap
        };
        assert_eq!(
            starts(&c, &w, JobOrder::Fifo, None, &snap),
            [Some(40), Some(145)]
        );
    }

    #[test]
    fn drained_gpus_keep_their_running_job_but_take_no_new_one() {
        let c = cluster(2, 4);
        let w = Workload::new(vec![
            job(0, 0, 4, 100),
            job(1, 10, 4, 50),
            job(2, 20, 4, 50),
        ]);
        let drained: Vec<SnapshotGpu> = (0..4)
            .map(|gpu| SnapshotGpu {
                node: NodeId(1),
                gpu,
                layout: None,
                ready_at: SimTime::ZERO,
                down: true,
            })
            .collect();
        // Node 1 drains with job 0 on it; job 1 runs on node 0; job 2 waits for node 0.
        let snap = Snapshot {
            now: SimTime::from_secs(30),
            jobs: vec![running(0, 30.0, on(1, 4), 0), running(1, 20.0, on(0, 4), 0)],
            gpus: drained,
            reserved: Vec::new(),
        };
        assert_eq!(
            starts(&c, &w, JobOrder::Fifo, None, &snap),
            [Some(30), Some(30), Some(60)]
        );
    }

    #[test]
    fn reserved_capacity_and_mig_layouts_hold_gpus_for_the_whole_run() {
        let c = cluster(1, 2);
        let w = Workload::new(vec![job(0, 0, 1, 100), job(1, 10, 1, 50)]);
        let layout = c
            .catalog
            .mig_geometry(c.nodes[0].gpu)
            .and_then(|g| g.valid_layouts().into_iter().find(|l| !l.is_empty()));
        let Some(layout) = layout else {
            panic!("A100 has MIG layouts")
        };
        // GPU 1 is partitioned (no whole-GPU job fits it): job 1 waits for GPU 0.
        let snap = Snapshot {
            now: SimTime::from_secs(20),
            jobs: vec![running(0, 20.0, on(0, 1), 0)],
            gpus: vec![SnapshotGpu {
                node: NodeId(0),
                gpu: 1,
                layout: Some(layout),
                ready_at: SimTime::ZERO,
                down: false,
            }],
            reserved: Vec::new(),
        };
        assert_eq!(
            starts(&c, &w, JobOrder::Fifo, None, &snap),
            [Some(20), Some(100)]
        );
        // Whole mode, but a service instance holds GPU 1 for good.
        let snap = Snapshot {
            gpus: Vec::new(),
            reserved: vec![on(0, 1)],
            ..snap
        };
        assert_eq!(
            starts(&c, &w, JobOrder::Fifo, None, &snap),
            [Some(20), Some(100)]
        );
    }

    #[test]
    fn las_ranks_queued_jobs_by_the_service_they_attained_before_the_fork() {
        let c = cluster(1, 1);
        let w = Workload::new(vec![
            job(0, 0, 1, 100),
            job(1, 1, 1, 100),
            job(2, 2, 1, 100),
        ]);
        let queued = |id: u32, attained_secs: u64| SnapshotJob {
            job: JobId(id),
            done_iters: attained_secs as f64,
            attained_gpu_us: attained_secs * 1_000_000,
            preemptions: 1,
            running: None,
        };
        // Job 2 holds the GPU; job 0 has had 60 s of service, job 1 only 10 s.
        let snap = Snapshot {
            now: SimTime::from_secs(100),
            jobs: vec![queued(0, 60), queued(1, 10), running(2, 30.0, on(0, 1), 0)],
            ..Snapshot::default()
        };
        let s = starts(
            &c,
            &w,
            JobOrder::Las,
            Some(SimDuration::from_secs(1000)),
            &snap,
        );
        let (s0, s1) = (s[0].unwrap(), s[1].unwrap());
        assert!(s1 < s0, "the least-served job starts first: {s:?}");
    }

    #[test]
    fn a_snapshot_that_does_not_fit_is_refused_not_run() {
        let c = cluster(1, 4);
        let w = Workload::new(vec![job(0, 0, 4, 100), job(1, 0, 4, 100)]);
        let policy = || Box::new(OrderedPolicy::new(JobOrder::Fifo, None));
        // Both hold the same four GPUs.
        let snap = Snapshot {
            now: SimTime::from_secs(10),
            jobs: vec![running(0, 1.0, on(0, 4), 0), running(1, 1.0, on(0, 4), 0)],
            ..Snapshot::default()
        };
        let err = Simulation::fork(&c, &w, &TraceThroughput, policy(), config(), &snap);
        assert!(matches!(err, Err(SimError::InvalidSnapshot { .. })));
        let snap = Snapshot {
            jobs: vec![running(7, 1.0, on(0, 4), 0)],
            ..snap
        };
        let err = Simulation::fork(&c, &w, &TraceThroughput, policy(), config(), &snap);
        assert!(matches!(err, Err(SimError::InvalidSnapshot { .. })));
    }
}
