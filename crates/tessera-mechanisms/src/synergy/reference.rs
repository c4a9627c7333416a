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

use tessera_model::GpuPart;
use tessera_model::{Cluster, JobId, Knowledge, SimDuration, SimRng, SimTime, Workload};
use tessera_perf::ThroughputModel;
use tessera_sched::{
    validate, Action, ActiveJob, ClusterState, ClusterView, JobState, Policy, Trigger,
};

use tessera_sim::metrics::{JobOutcome, JobRecord, RunTotals, SimReport, Summary};
use tessera_sim::{SimConfig, SimError};

/// Default round of the reference semantics when the policy has none.
pub const REFERENCE_ROUND: SimDuration = SimDuration::from_secs(300);

#[derive(Clone, Debug, Default)]
struct JobState2 {
    done: u64,
    gpu_secs: f64,
    first_start: Option<SimTime>,
    finish: Option<SimTime>,
    outcome: Option<JobOutcome>,
    preemptions: u32,
    last_round_ran: bool,
    held_secs: f64,
    integ: (f64, f64, f64),
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
    let round = policy
        .round_length()
        .filter(|d| !d.is_zero())
        .unwrap_or(REFERENCE_ROUND);
    let round_s = round.as_secs_f64();
    // Every round starts from an empty cluster.
    let empty = ClusterState::new(cluster);
    let totals = cluster.totals();
    let mut st: Vec<JobState2> = vec![JobState2::default(); jobs.len()];
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
    let mut devices = empty.clone();
    let mut placed: Vec<usize> = Vec::new();
    let mut ran: Vec<bool> = Vec::new();
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
            active.push(ActiveJob {
                knowledge,
                ..ActiveJob::arrived(job)
            });
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
        // Every lease ended: offer every job as queued on an empty cluster.
        for a in active.iter_mut() {
            a.state = JobState::Queued;
            a.allocation = None;
        }
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
        devices.clone_from(&empty);
        placed.clear();
        // Position of each active job, by job id (rebuilt: jobs arrived and ended since).
        for (i, a) in active.iter().enumerate() {
            pos_of[a.id.index()] = i as u32;
        }
        for action in actions.drain(..) {
            let invalid = |reason: &str| SimError::InvalidAction {
                policy: policy.name().to_string(),
                now: t,
                action: format!("{action:?}"),
                reason: reason.to_string(),
            };
            let (job, allocation) = match &action {
                Action::Start { job, allocation } => (*job, allocation),
                // Nothing runs between rounds, so preemptions are no-ops.
                Action::Preempt { .. } => continue,
                // The reference has no resize, in-place retune or reconfiguration: refuse
                // rather than silently drop what it cannot model.
                other => {
                    return Err(invalid(&format!(
                        "the synergy engine does not model {} actions",
                        other.kind()
                    )))
                }
            };
            if allocation
                .shares
                .iter()
                .any(|s| s.devices.is_some_and(|d| d.part != GpuPart::Whole))
            {
                return Err(invalid(
                    "the synergy engine models whole GPUs only (no MIG instances or quotas)",
                ));
            }
            let pos = match pos_of.get(job.index()) {
                Some(&p) if active.get(p as usize).is_some_and(|a| a.id == job) => p as usize,
                _ => return Err(invalid("job is not active")),
            };
            if active[pos].allocation.is_some() {
                return Err(invalid("started twice in one round"));
            }
            let resolved = validate(&devices, cluster, &jobs[job.index()], None, &action, t)
                .map_err(|e| invalid(&e.reason))?
                .unwrap_or_default();
            devices.take(cluster, &resolved);
            active[pos].allocation = Some(resolved);
            active[pos].state = JobState::Running;
            placed.push(pos);
        }
        // Credit the round.
        let end = t + round;
        let mut used = (0u64, 0u64, 0u64);
        ran.clear();
        ran.resize(active.len(), false);
        for &pos in &placed {
            let a = &mut active[pos];
            let Some(alloc) = a.allocation.as_ref() else {
                continue;
            };
            let spec = &jobs[a.id.index()];
            let rate = truth.throughput(spec, alloc, cluster);
            if !(rate.is_finite() && rate >= 0.0) {
                return Err(SimError::BadThroughput {
                    job: spec.name.clone(),
                    rate,
                    now: t,
                });
            }
            let s = &mut st[a.id.index()];
            let credit = (round_s * rate + 1e-9).floor() as u64;
            s.done = (s.done + credit).min(spec.iterations);
            let g = alloc.gpus() as f64;
            s.gpu_secs += g * round_s;
            s.first_start.get_or_insert(t);
            a.first_start.get_or_insert(t);
            let prop = spec.reference_throughput() * g / spec.gpus.max(1) as f64;
            s.held_secs += round_s;
            s.integ.0 += alloc.cpu().as_cores() / g * round_s;
            s.integ.1 += alloc.memory().as_gib() / g * round_s;
            s.integ.2 += if prop > 0.0 { rate / prop } else { 1.0 } * round_s;
            a.attained_gpu_secs += g * round_s;
            a.remaining_iters = (spec.iterations - s.done) as f64;
            used.0 += alloc.gpus() as u64;
            used.1 += alloc.cpu().0;
            used.2 += alloc.memory().0;
            ran[pos] = true;
        }
        for (i, a) in active.iter().enumerate() {
            let s = &mut st[a.id.index()];
            if s.last_round_ran && !ran[i] {
                s.preemptions += 1;
            }
            s.last_round_ran = ran[i];
        }
        util.0 += used.0 as f64 * round_s;
        util.1 += used.1 as f64 * round_s;
        util.2 += used.2 as f64 * round_s;
        // Jobs that reached their total end with the lease (one pass, order kept).
        active.retain(|a| {
            let id = a.id;
            let s = &mut st[id.index()];
            if s.done >= jobs[id.index()].iterations {
                s.finish = Some(end);
                s.outcome = Some(JobOutcome::Finished);
                last_completion = end;
                events += 1;
                if in_window(id) {
                    window_left = window_left.saturating_sub(1);
                }
                false
            } else {
                true
            }
        });
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
        timeseries: Vec::new(),
        policy_stats: policy.stats(),
        service_instances: Vec::new(),
    })
}
