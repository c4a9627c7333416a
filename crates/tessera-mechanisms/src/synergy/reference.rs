//! `--semantics synergy`: the Synergy reference simulator's round semantics, for like-for-like
//! comparison with its published figures. Our default engine ([`tessera_sim::Simulation`]) is exact
//! (completions inside rounds, progress at the true rate); this one quantises as the
//! reference does:
//!
//! - rounds of the policy's length (300 s leases); at every boundary all resources are
//!   released and the policy re-plans from scratch (every job is offered as queued);
//! - a placed job is credited floor(round / iteration time at its allocation) iterations at
//!   placement;
//! - a job completes, and its JCT is counted, at the end of the round in which it reaches its
//!   total (JCTs are multiples of the round after arrival rounding);
//! - at equal times: arrivals, then job ends, then lease ends, then scheduling;
//! - no restart costs.
//!
//! The cap of jobs demanding more than one server is a property of the demand, applied by
//! [`tessera_perf::synergy::ReferenceProfiler`] and [`tessera_perf::synergy::ReferenceSpeedup`].

use tessera_model::{Allocation, DeviceAlloc, GpuMask, GpuPart, Resources, TrainingJob};
use tessera_model::{Cluster, JobId, Knowledge, SimDuration, SimRng, SimTime, Workload};
use tessera_perf::ThroughputModel;
use tessera_sched::{
    Action, ActiveJob, ClusterState, ClusterView, JobChange, JobState, Policy, Trigger,
};

use tessera_sim::metrics::{JobOutcome, JobRecord, RunTotals, SimReport, Summary};
use tessera_sim::{SimConfig, SimError};

/// Default round of the reference semantics when the policy has none.
pub const REFERENCE_ROUND: SimDuration = SimDuration::from_secs(300);

#[derive(Clone, Debug, Default)]
struct JobState2 {
    done: u64,
    /// The job's total iterations, copied at arrival: the per-round loops then read only
    /// this record, not the job's spec.
    total: u64,
    gpu_secs: f64,
    first_start: Option<SimTime>,
    finish: Option<SimTime>,
    outcome: Option<JobOutcome>,
    preemptions: u32,
    /// The last round (1-based count) in which the job ran; 0 = never.
    ran_round: u64,
    held_secs: f64,
    integ: (f64, f64, f64),
    /// The shares the job was last rated on and its rate there: a truth model is a pure
    /// function of the job and its allocation, and most jobs hold the same allocation round
    /// after round (300 s leases), so the engine rates it once per change.
    rated_on: Option<Allocation>,
    rate: f64,
    /// What one round on `rated_on` adds, computed when it was rated (the same products, so
    /// the sums are bit for bit those of computing them every round).
    per_round: RoundCredit,
}

/// One round's credit on one allocation.
#[derive(Clone, Copy, Debug, Default)]
struct RoundCredit {
    iterations: u64,
    gpu_secs: f64,
    /// CPU cores and memory GiB per GPU, and the speed-up over the proportional share,
    /// each times the round.
    integ: (f64, f64, f64),
    /// GPUs, milli-CPUs and bytes held.
    used: (u64, u64, u64),
}

impl RoundCredit {
    fn of(spec: &TrainingJob, alloc: &Allocation, rate: f64, round_s: f64) -> RoundCredit {
        let g = alloc.gpus() as f64;
        let prop = spec.reference_throughput() * g / spec.gpus.max(1) as f64;
        RoundCredit {
            iterations: (round_s * rate + 1e-9).floor() as u64,
            gpu_secs: g * round_s,
            integ: (
                alloc.cpu().as_cores() / g * round_s,
                alloc.memory().as_gib() / g * round_s,
                if prop > 0.0 { rate / prop } else { 1.0 } * round_s,
            ),
            used: (alloc.gpus() as u64, alloc.cpu().0, alloc.memory().0),
        }
    }
}

/// Free resources and whole GPUs per node while a round's placements are checked. This
/// engine models whole GPUs that never fail or reconfigure and starts every round from an
/// empty cluster, so this is all [`tessera_sched::validate`] checks of a start here, with the
/// same outcome (a share without devices gets the lowest-numbered free GPUs), at a fraction
/// of its cost: no free-node index kept up to date at every take, no copy of it per round.
struct RoundLedger {
    free: Vec<Resources>,
    /// Per node: the free GPUs.
    mask: Vec<u64>,
    empty_free: Vec<Resources>,
    empty_mask: Vec<u64>,
    /// The devices named for the allocation being taken, per share.
    named: Vec<DeviceAlloc>,
}

impl RoundLedger {
    fn new(cluster: &Cluster, empty: &ClusterState) -> RoundLedger {
        let empty_free = empty.free().to_vec();
        let empty_mask: Vec<u64> = cluster
            .nodes
            .iter()
            .map(|n| match n.gpus {
                0 => 0,
                g if g >= 64 => u64::MAX,
                g => (1u64 << g) - 1,
            })
            .collect();
        RoundLedger {
            free: empty_free.clone(),
            mask: empty_mask.clone(),
            empty_free,
            empty_mask,
            named: Vec::new(),
        }
    }

    fn reset(&mut self) {
        self.free.copy_from_slice(&self.empty_free);
        self.mask.copy_from_slice(&self.empty_mask);
    }

    /// Checks that `job` can take `alloc` now (whole GPUs), takes it and returns it with
    /// its devices named; the reason otherwise (nothing taken).
    fn take(
        &mut self,
        cluster: &Cluster,
        job: &TrainingJob,
        resolved: &mut Allocation,
    ) -> Result<(), String> {
        if resolved.shares.is_empty() || resolved.devices() == 0 {
            return Err("allocation holds no GPUs".into());
        }
        if !resolved.nodes_distinct() {
            return Err("a node appears twice".into());
        }
        // Devices are named into a buffer and written back only once every share passed,
        // so that a refused allocation is reported as the policy sent it.
        self.named.clear();
        for s in &resolved.shares {
            let n = s.node.index();
            let Some(node) = cluster.nodes.get(n) else {
                return Err(format!("no node {}", s.node.0));
            };
            if !job.gpu_types.is_empty() && !job.gpu_types.contains(&node.gpu) {
                return Err(format!(
                    "node {} has a GPU model the holder does not allow",
                    node.name
                ));
            }
            let (Some(free), Some(&mask)) = (self.free.get(n), self.mask.get(n)) else {
                return Err(format!("no node {}", s.node.0));
            };
            if !free.fits(&s.resources()) {
                return Err(format!("over-allocates node {}", node.name));
            }
            let gpus = match s.devices {
                None => {
                    // The lowest-numbered free GPUs.
                    let (mut left, mut picked) = (mask, 0u64);
                    for _ in 0..s.gpus {
                        let low = left & left.wrapping_neg();
                        picked |= low;
                        left ^= low;
                    }
                    if picked.count_ones() < s.gpus {
                        return Err(format!(
                            "node {}: {} whole GPUs asked, {} free and ready",
                            node.name,
                            s.gpus,
                            picked.count_ones()
                        ));
                    }
                    picked
                }
                Some(d) => {
                    if d.gpus.count() != s.gpus {
                        return Err(format!(
                            "{} whole GPUs counted but {} named",
                            s.gpus,
                            d.gpus.count()
                        ));
                    }
                    if d.gpus.0 & !mask != 0 {
                        return Err(format!(
                            "GPU {:?} of {} is not free or does not exist",
                            d.gpus, node.name
                        ));
                    }
                    d.gpus.0
                }
            };
            self.named.push(DeviceAlloc {
                gpus: GpuMask(gpus),
                part: GpuPart::Whole,
            });
        }
        // Nodes are distinct: taking share by share after checking them all is one take.
        for (s, d) in resolved.shares.iter_mut().zip(&self.named) {
            s.devices = Some(*d);
            let n = s.node.index();
            self.free[n].sub(&s.resources());
            if let Some(d) = s.devices {
                self.mask[n] &= !d.gpus.0;
            }
        }
        Ok(())
    }
}

/// Whether two allocations hold the same on every node, whichever GPUs of it: whole GPUs of
/// one node are interchangeable to a truth model (none reads device indices), and a job
/// placed on the same node round after round gets other GPUs of it as its peers change.
fn same_but_devices(a: &Allocation, b: &Allocation) -> bool {
    a.plan == b.plan
        && a.shares.len() == b.shares.len()
        && a.shares
            .iter()
            .zip(&b.shares)
            .all(|(x, y)| (x.node, x.gpus, x.cpu, x.memory) == (y.node, y.gpus, y.cpu, y.memory))
}

/// Runs `policy` under the reference's round semantics.
pub fn run_reference(
    cluster: &Cluster,
    workload: &Workload,
    truth: &dyn ThroughputModel,
    mut policy: Box<dyn Policy>,
    config: &SimConfig,
) -> Result<SimReport, SimError> {
    let jobs = workload.jobs();
    if !workload.services().is_empty() {
        // Refused rather than silently ignored: the reference has no serving.
        return Err(SimError::InvalidAction {
            policy: policy.name().to_string(),
            now: SimTime::ZERO,
            action: "serve".to_string(),
            reason: "the synergy engine does not model inference services".to_string(),
        });
    }
    policy.use_reference_semantics();
    // A policy that keeps its own ranking is told every change of the active set, so that
    // a round costs what changed rather than the length of the queue.
    let tracking = policy.track_jobs();
    let round = policy
        .round_length()
        .filter(|d| !d.is_zero())
        .unwrap_or(REFERENCE_ROUND);
    let round_s = round.as_secs_f64();
    // Every round starts from an empty cluster.
    let empty = ClusterState::new(cluster);
    let totals = cluster.totals();
    let mut st: Vec<JobState2> = vec![JobState2::default(); jobs.len()];
    // Per job, the nodes it ran on in order of first use (jobs.csv's `nodes`, `gpu_types`),
    // as the exact engine records them.
    let mut placements: Vec<Vec<tessera_model::NodeId>> = vec![Vec::new(); jobs.len()];
    let mut active: Vec<ActiveJob> = Vec::new();
    let mut rng = SimRng::seed_from_u64(config.profile_seed);
    let cost = config
        .profiler
        .as_ref()
        .map_or(SimDuration::ZERO, |p| p.cost());
    let mut profiling_gpu_secs = 0.0;
    let mut next = 0usize;
    let mut t = SimTime::ZERO;
    let mut actions: Vec<Action> = Vec::new();
    let mut window_left = config.stop_after_window.map_or(usize::MAX, |(lo, hi)| {
        jobs.iter().filter(|j| (lo..hi).contains(&j.id.0)).count()
    });
    let in_window = |id: JobId| {
        config
            .stop_after_window
            .is_some_and(|(lo, hi)| (lo..hi).contains(&id.0))
    };
    let first_arrival = jobs.first().map(|j| j.submit);
    let mut last_completion = SimTime::ZERO;
    let mut util = (0.0f64, 0.0f64, 0.0f64);
    let mut events = 0u64;
    let mut points = 0u64;
    let mut stop_reason: Option<&str> = None;
    // Buffers reused every round.
    let mut ledger = RoundLedger::new(cluster, &empty);
    let mut placed: Vec<usize> = Vec::new();
    // Jobs placed in the previous round that are still active (their leases just ended).
    let mut ran_last: Vec<JobId> = Vec::new();
    let mut ran_now: Vec<JobId> = Vec::new();
    let mut round_no = 0u64;
    // Position of each active job in `active`, by job id. `active` is in no particular order
    // (as `ClusterView::active` allows): a finished job is swap-removed, so that a round costs
    // in proportion to the jobs placed, not to the whole queue.
    let mut pos_of: Vec<u32> = vec![u32::MAX; jobs.len()];

    loop {
        // Arrivals visible by now (after profiling).
        while let Some(job) = jobs.get(next) {
            if job.submit + cost > t {
                break;
            }
            next += 1;
            events += 1;
            if let Err(unfit) = cluster.can_ever_fit(job) {
                st[job.id.index()].outcome = Some(JobOutcome::Rejected {
                    reason: unfit.to_string(),
                });
                if in_window(job.id) {
                    window_left = window_left.saturating_sub(1);
                }
                continue;
            }
            let knowledge = config.profiler.as_ref().map_or_else(Knowledge::new, |p| {
                profiling_gpu_secs += p.gpus() as f64 * p.cost().as_secs_f64();
                p.profile(job, cluster, &mut rng)
            });
            st[job.id.index()].total = job.iterations;
            pos_of[job.id.index()] = active.len() as u32;
            active.push(ActiveJob {
                knowledge,
                ..ActiveJob::arrived(job)
            });
            if tracking {
                if let Some(a) = active.last() {
                    policy.observe(JobChange::Arrived(a, job));
                }
            }
        }
        if window_left == 0 {
            stop_reason = Some("measurement window drained");
            break;
        }
        if active.is_empty() {
            let Some(job) = jobs.get(next) else { break };
            // Jump to the first round boundary at or after the next arrival.
            let at = (job.submit + cost).as_micros();
            let len = round.as_micros().max(1);
            t = SimTime::from_micros(at.div_ceil(len) * len);
            continue;
        }
        if let Some(limit) = config.time_limit {
            if t > limit {
                stop_reason = Some("time limit reached");
                break;
            }
        }
        // Every lease ended (the previous round's jobs were reset to queued when it was
        // credited): offer every job as queued on an empty cluster.
        round_no += 1;
        actions.clear();
        let view = ClusterView {
            now: t,
            trigger: Trigger {
                round: true,
                ..Trigger::default()
            },
            cluster,
            free: empty.free(),
            state: &empty,
            jobs,
            active: &active,
            services: &[],
        };
        policy.schedule(&view, &mut actions);
        points += 1;
        events += 1;
        ledger.reset();
        placed.clear();
        for action in actions.drain(..) {
            let invalid = |action: &Action, reason: &str| SimError::InvalidAction {
                policy: policy.name().to_string(),
                now: t,
                action: format!("{action:?}"),
                reason: reason.to_string(),
            };
            let (job, mut allocation) = match action {
                Action::Start { job, allocation } => (job, allocation),
                // Nothing runs between rounds, so preemptions are no-ops.
                Action::Preempt { .. } => continue,
                // The reference has no resize, in-place retune or reconfiguration: refuse
                // rather than silently drop what it cannot model.
                other => {
                    return Err(invalid(
                        &other,
                        &format!("the synergy engine does not model {} actions", other.kind()),
                    ))
                }
            };
            let invalid = |allocation: Allocation, reason: &str| {
                invalid(&Action::Start { job, allocation }, reason)
            };
            if allocation
                .shares
                .iter()
                .any(|s| s.devices.is_some_and(|d| d.part != GpuPart::Whole))
            {
                return Err(invalid(
                    allocation,
                    "the synergy engine models whole GPUs only (no MIG instances or quotas)",
                ));
            }
            let pos = match pos_of.get(job.index()) {
                Some(&p) if active.get(p as usize).is_some_and(|a| a.id == job) => p as usize,
                _ => return Err(invalid(allocation, "job is not active")),
            };
            if active[pos].allocation.is_some() {
                return Err(invalid(allocation, "started twice in one round"));
            }
            if let Err(reason) = ledger.take(cluster, &jobs[job.index()], &mut allocation) {
                return Err(invalid(allocation, &reason));
            }
            if let Some(nodes) = placements.get_mut(job.index()) {
                for share in &allocation.shares {
                    if !nodes.contains(&share.node) {
                        nodes.push(share.node);
                    }
                }
            }
            let resolved = allocation;
            active[pos].allocation = Some(resolved);
            active[pos].state = JobState::Running;
            placed.push(pos);
            if tracking {
                policy.observe(JobChange::Started(&active[pos], &jobs[job.index()]));
            }
        }
        // Credit the round.
        let end = t + round;
        let mut used = (0u64, 0u64, 0u64);
        ran_now.clear();
        for &pos in &placed {
            let a = &mut active[pos];
            let Some(alloc) = a.allocation.as_ref() else {
                continue;
            };
            let s = &mut st[a.id.index()];
            if !s
                .rated_on
                .as_ref()
                .is_some_and(|r| same_but_devices(r, alloc))
            {
                let spec = &jobs[a.id.index()];
                let rate = truth.throughput(spec, alloc, cluster);
                if !(rate.is_finite() && rate >= 0.0) {
                    return Err(SimError::BadThroughput {
                        job: spec.name.to_string(),
                        rate,
                        now: t,
                    });
                }
                match s.rated_on.as_mut() {
                    Some(r) => r.clone_from(alloc),
                    None => s.rated_on = Some(alloc.clone()),
                }
                s.rate = rate;
                s.per_round = RoundCredit::of(spec, alloc, rate, round_s);
            }
            let c = s.per_round;
            s.done = (s.done + c.iterations).min(s.total);
            s.gpu_secs += c.gpu_secs;
            s.first_start.get_or_insert(t);
            a.first_start.get_or_insert(t);
            s.held_secs += round_s;
            s.integ.0 += c.integ.0;
            s.integ.1 += c.integ.1;
            s.integ.2 += c.integ.2;
            a.attained_gpu_secs += c.gpu_secs;
            a.remaining_iters = (s.total - s.done) as f64;
            used.0 += c.used.0;
            used.1 += c.used.1;
            used.2 += c.used.2;
            s.ran_round = round_no;
            ran_now.push(a.id);
        }
        // A job that ran last round and not in this one was preempted (only those can be).
        for id in &ran_last {
            let s = &mut st[id.index()];
            if s.ran_round != round_no {
                s.preemptions += 1;
            }
        }
        util.0 += used.0 as f64 * round_s;
        util.1 += used.1 as f64 * round_s;
        util.2 += used.2 as f64 * round_s;
        // Only jobs that ran can have reached their total: they end with the lease; the
        // others' leases end too (queued again for the next round).
        ran_last.clear();
        for &id in &ran_now {
            let s = &mut st[id.index()];
            let pos = pos_of[id.index()] as usize;
            if s.done >= s.total {
                s.finish = Some(end);
                s.outcome = Some(JobOutcome::Finished);
                last_completion = end;
                events += 1;
                if in_window(id) {
                    window_left = window_left.saturating_sub(1);
                }
                pos_of[id.index()] = u32::MAX;
                active.swap_remove(pos);
                if let Some(moved) = active.get(pos) {
                    pos_of[moved.id.index()] = pos as u32;
                }
                if tracking {
                    policy.observe(JobChange::Ended(id));
                }
            } else {
                let a = &mut active[pos];
                a.state = JobState::Queued;
                a.allocation = None;
                ran_last.push(id);
                if tracking {
                    policy.observe(JobChange::Preempted(a, &jobs[id.index()]));
                }
            }
        }
        t = end;
    }
    let reason = stop_reason.unwrap_or("no further events");
    for a in &active {
        st[a.id.index()]
            .outcome
            .get_or_insert(JobOutcome::Unfinished {
                reason: reason.to_string(),
            });
    }
    let records: Vec<JobRecord> = jobs
        .iter()
        .zip(&st)
        .map(|(job, s)| JobRecord {
            job: job.id,
            name: job.name.clone(),
            gpus: job.gpus,
            submit: job.submit,
            first_start: s.first_start,
            finish: s.finish,
            outcome: s.outcome.clone().unwrap_or(JobOutcome::Unfinished {
                reason: "never arrived before the run stopped".to_string(),
            }),
            preemptions: s.preemptions,
            gpu_secs: s.gpu_secs,
            iterations_done: s.done as f64,
            cpu_per_gpu: (s.held_secs > 0.0).then(|| s.integ.0 / s.held_secs),
            mem_gib_per_gpu: (s.held_secs > 0.0).then(|| s.integ.1 / s.held_secs),
            speedup: (s.held_secs > 0.0).then(|| s.integ.2 / s.held_secs),
        })
        .collect();
    let summary = Summary::of(
        &records,
        &RunTotals {
            first_arrival,
            last_completion,
            stopped_at: t,
            util_integral: util,
            capacity: totals,
            events,
            scheduling_points: points,
            profiling_gpu_secs,
            ..RunTotals::default()
        },
    );
    Ok(SimReport {
        policy: policy.name().to_string(),
        summary,
        jobs: records,
        waits: Vec::new(),
        timeseries: Vec::new(),
        policy_stats: policy.stats(),
        service_instances: Vec::new(),
        placements,
    })
}
