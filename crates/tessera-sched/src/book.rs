//! The job book both drivers keep, the simulator (`tessera-sim`) and the daemon core
//! (`tessera-daemon`), sans I/O, so that what a policy sees and is told means the same in
//! both (issue 38):
//!
//! - the active set (`ClusterView::active`): [`enter`] and [`leave`], each job's position kept
//!   by the driver where it keeps the job's other hot state;
//! - notifications to a policy that tracks jobs ([`Tracker`]): which change, and from when a
//!   started job's service grows;
//! - attained service with restore accounting ([`service_between`], [`restore_time`],
//!   [`show_service`]);
//! - knowledge: a job's catalogue estimates calibrated by the rates it was observed at
//!   ([`calibrated`]), and the profiles learned from earlier jobs of the same model and batch
//!   ([`ProfileCache`]).
//!
//! Validation of actions is [`crate::validate`], which both drivers call in batch order against
//! their [`crate::ClusterState`].
//!
//! Attained service is GPU time held while the job makes progress, and a
//! restart (after a preemption or a resize) holds its GPUs for the model's checkpoint +
//! restore time (plus re-tuning) before progress resumes, during which no service is
//! attained. Otherwise a preemptive policy with rounds shorter than the restore time
//! livelocks (each job preempted before it ever resumes), and LAS ranks jobs differently in
//! the two drivers.

use std::collections::BTreeMap;
use tessera_model::{GpuModelId, JobId, Knowledge, SimDuration, SimTime, TrainingJob};

use tessera_perf::{ConfigEstimate, ConfigEstimates, RestartCosts};

use crate::{ActiveJob, JobChange, Policy, ProgressLine};

/// The position of a job that is not in the active set.
pub const ABSENT: u32 = u32::MAX;

/// Appends `entry` to the active set and returns its position, after telling `place` (the
/// driver's record of each job's position) where it went.
pub fn enter(
    active: &mut Vec<ActiveJob>,
    entry: ActiveJob,
    mut place: impl FnMut(JobId, u32),
) -> usize {
    let pos = active.len();
    place(entry.id, pos as u32);
    active.push(entry);
    pos
}

/// Removes the entry at `pos` from the active set (the last entry takes its place) and returns
/// it, after telling `place` the moved job's new position and the removed job's [`ABSENT`].
/// `None` when `pos` is out of range.
pub fn leave(
    active: &mut Vec<ActiveJob>,
    pos: usize,
    mut place: impl FnMut(JobId, u32),
) -> Option<ActiveJob> {
    if pos >= active.len() {
        return None;
    }
    let gone = active.swap_remove(pos);
    if let Some(moved) = active.get(pos) {
        place(moved.id, pos as u32);
    }
    place(gone.id, ABSENT);
    Some(gone)
}

/// Sets an active entry's attained service (GPU·µs, and the seconds policies read) and, when
/// given, its remaining iterations.
#[inline]
pub fn show_service(entry: &mut ActiveJob, attained_gpu_us: u64, remaining: Option<f64>) {
    entry.attained_gpu_us = attained_gpu_us;
    entry.attained_gpu_secs = attained_gpu_us as f64 / 1e6;
    if let Some(r) = remaining {
        entry.remaining_iters = r;
    }
}

/// What a policy that keeps its own queue ([`Policy::track_jobs`]) is told, and when: one
/// rule for both drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracker {
    tracking: bool,
    follows_progress: bool,
}

impl Tracker {
    /// Asks `policy` once whether it tracks jobs (and follows progress).
    pub fn of(policy: &mut dyn Policy) -> Tracker {
        let tracking = policy.track_jobs();
        Tracker {
            tracking,
            follows_progress: tracking && policy.follows_progress(),
        }
    }

    /// Whether the policy is told anything.
    #[inline]
    pub fn tracking(&self) -> bool {
        self.tracking
    }

    /// Whether the policy is told running jobs' [`ProgressLine`]s.
    #[inline]
    pub fn follows_progress(&self) -> bool {
        self.follows_progress
    }

    /// `entry` became visible, queued.
    pub fn arrived(&self, policy: &mut dyn Policy, entry: &ActiveJob, spec: &TrainingJob) {
        if self.tracking {
            policy.observe(JobChange::Arrived(entry, spec));
        }
    }

    /// `entry` runs (it started, or its progress moved while running). `Started` says service
    /// grows from `resumes_at` on top of the attained service as of `now`: for a job told
    /// again that is from now, or from the end of its restore if still restoring. The entry
    /// keeps the instant it resumed (what a lease counts from).
    pub fn started(
        &self,
        policy: &mut dyn Policy,
        entry: &mut ActiveJob,
        spec: &TrainingJob,
        now: SimTime,
    ) {
        if !self.tracking {
            return;
        }
        let resumed = entry.resumes_at;
        entry.resumes_at = resumed.map(|r| r.max(now));
        policy.observe(JobChange::Started(entry, spec));
        entry.resumes_at = resumed;
    }

    /// `entry` is queued again (preempted, or its progress moved while queued).
    pub fn preempted(&self, policy: &mut dyn Policy, entry: &ActiveJob, spec: &TrainingJob) {
        if self.tracking {
            policy.observe(JobChange::Preempted(entry, spec));
        }
    }

    /// `job` left the active set.
    pub fn ended(&self, policy: &mut dyn Policy, job: JobId) {
        if self.tracking {
            policy.observe(JobChange::Ended(job));
        }
    }

    /// A running job's progress changed course (only a driver that counts it exactly sends
    /// this: the simulator).
    pub fn progress(&self, policy: &mut dyn Policy, job: JobId, line: ProgressLine) {
        if self.follows_progress {
            policy.observe(JobChange::Progress(job, line));
        }
    }
}

/// GPU·µs of service a job holding `gpus` whole GPUs attains from `from` to `to`, counting
/// only the time after it resumes at `resumes_at` (past a restart's restore).
#[inline]
pub fn service_between(gpus: u32, from: SimTime, resumes_at: SimTime, to: SimTime) -> u64 {
    u64::from(gpus).saturating_mul(to.saturating_since(from.max(resumes_at)).as_micros())
}

/// How long a start holds `gpus` GPUs of a job of `model` before it makes progress: nothing
/// for a first start, the model's checkpoint + restore and the re-tuning of `gpus` GPUs for a
/// restart.
pub fn restore_time(costs: &RestartCosts, model: &str, gpus: u32, restart: bool) -> SimDuration {
    if restart {
        restart_cost(costs, costs.checkpoint_restore(model), gpus)
    } else {
        SimDuration::ZERO
    }
}

/// A restart's cost on `gpus` GPUs given the model's checkpoint + restore time (looked up once
/// by a driver that restarts the same job often): that time plus the re-tuning of `gpus` GPUs.
#[inline]
pub fn restart_cost(
    costs: &RestartCosts,
    checkpoint_restore: SimDuration,
    gpus: u32,
) -> SimDuration {
    checkpoint_restore + costs.tuning(gpus)
}

/// A rate a job was observed at: iterations per second on `count` whole GPUs of `gpu`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observed {
    /// GPU type.
    pub gpu: GpuModelId,
    /// Whole GPUs of that type.
    pub count: u32,
    /// Iterations per second.
    pub rate: f64,
}

/// Records `seen` among a job's (or a profile's) observations, the latest last, and returns
/// `base`'s catalogue estimates (`ConfigEstimates`, what Gavel, Sia, Crius and elastic
/// scaling read) calibrated by them: every observed configuration takes its observed rate,
/// every other one the catalogue's estimate scaled by observed / estimated of the latest
/// observation (the catalogue gives the shape across GPU types and counts, the job's own
/// report the level). `base` is the catalogue's profile as given, never a calibrated one (no
/// compounding). `None`, and nothing recorded, when the catalogue has no positive estimate
/// of `seen`'s configuration or `seen`'s rate is not a positive number.
pub fn calibrated(
    base: &Knowledge,
    observed: &mut Vec<Observed>,
    seen: Observed,
) -> Option<Knowledge> {
    if !(seen.rate.is_finite() && seen.rate > 0.0) {
        return None;
    }
    let catalogue = base.get::<ConfigEstimates>()?;
    let estimated = catalogue
        .get(seen.gpu, seen.count)
        .map(|e| e.throughput)
        .filter(|t| *t > 0.0)?;
    observed.retain(|o| (o.gpu, o.count) != (seen.gpu, seen.count));
    observed.push(seen);
    let scale = seen.rate / estimated;
    let entries = catalogue
        .entries()
        .iter()
        .map(|e| {
            let rate = observed
                .iter()
                .find(|o| (o.gpu, o.count) == (e.gpu, e.count))
                .map(|o| o.rate);
            ConfigEstimate {
                throughput: rate.unwrap_or(e.throughput * scale),
                ..*e
            }
        })
        .collect();
    let mut knowledge = base.clone();
    knowledge.insert(ConfigEstimates::new(entries));
    Some(knowledge)
}

/// What a job is profiled by: its model and batch size (when given).
pub type ProfileKey = (String, Option<u32>);

/// Rates observed of earlier jobs, by (model, batch size): a later job of the same key starts
/// with its catalogue estimates calibrated by them ([`ProfileCache::knowledge`]) instead of
/// the catalogue's alone. Deterministic (ordered by key, observations in order).
#[derive(Debug, Clone, Default)]
pub struct ProfileCache {
    profiles: BTreeMap<ProfileKey, Vec<Observed>>,
}

impl ProfileCache {
    /// The key `job` is profiled by.
    pub fn key(job: &TrainingJob) -> ProfileKey {
        (job.model.clone(), job.batch_size)
    }

    /// Records a rate a job of `key` was observed at, if the catalogue profile `base` of that
    /// key can use it (see [`calibrated`]); returns whether it was recorded.
    pub fn record(&mut self, key: ProfileKey, base: &Knowledge, seen: Observed) -> bool {
        if key.0.is_empty() {
            return false; // a job without a model hint says nothing of another one
        }
        let mut observed = self.profiles.get(&key).cloned().unwrap_or_default();
        if calibrated(base, &mut observed, seen).is_none() {
            return false;
        }
        self.profiles.insert(key, observed);
        true
    }

    /// The observations of `key`, oldest first (empty when none).
    pub fn observed(&self, key: &ProfileKey) -> &[Observed] {
        self.profiles.get(key).map_or(&[], Vec::as_slice)
    }

    /// `base` (the catalogue's profile of a job of `key`) calibrated by the observations of
    /// earlier jobs of `key`, with those observations (to continue from); `None` when there
    /// are none or none applies.
    pub fn knowledge(
        &self,
        key: &ProfileKey,
        base: &Knowledge,
    ) -> Option<(Knowledge, Vec<Observed>)> {
        let seen = self.profiles.get(key)?;
        let mut observed = Vec::new();
        let mut knowledge = None;
        for &o in seen {
            knowledge = calibrated(base, &mut observed, o).or(knowledge);
        }
        knowledge.map(|k| (k, observed))
    }

    /// Number of keys with observations.
    pub fn len(&self) -> usize {
        self.profiles.len()
    }

    /// Whether nothing was observed.
    pub fn is_empty(&self) -> bool {
        self.profiles.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_counts_only_after_the_restore() {
        let s = SimTime::from_secs;
        assert_eq!(service_between(2, s(10), s(10), s(40)), 60_000_000);
        assert_eq!(service_between(2, s(10), s(25), s(40)), 30_000_000);
        assert_eq!(
            service_between(2, s(10), s(50), s(40)),
            0,
            "still restoring"
        );
        assert_eq!(service_between(3, s(30), s(25), s(40)), 30_000_000);
    }

    #[test]
    fn only_a_restart_costs() {
        let costs = RestartCosts::default();
        assert_eq!(
            restore_time(&costs, "resnet50", 4, false),
            SimDuration::ZERO
        );
        assert_eq!(
            restore_time(&costs, "resnet50", 4, true),
            costs.checkpoint_restore("resnet50") + costs.tuning(4)
        );
        assert!(restore_time(&costs, "resnet50", 4, true) > SimDuration::ZERO);
    }

    fn entry(id: u32) -> ActiveJob {
        let job = TrainingJob::simple(id, SimTime::ZERO, 1, SimDuration::from_secs(10));
        ActiveJob::arrived(&job)
    }

    #[test]
    fn the_active_set_keeps_every_position_right() {
        let mut active = Vec::new();
        let mut pos = vec![ABSENT; 4];
        for id in 0..4 {
            enter(&mut active, entry(id), |j, p| pos[j.index()] = p);
        }
        let gone = leave(&mut active, 1, |j, p| pos[j.index()] = p).map(|a| a.id);
        assert_eq!(gone, Some(JobId(1)));
        assert_eq!(
            pos,
            vec![0, ABSENT, 2, 1],
            "the last entry took the removed one's place"
        );
        for (p, a) in active.iter().enumerate() {
            assert_eq!(pos[a.id.index()], p as u32);
        }
        assert!(leave(&mut active, 9, |_, _| unreachable!()).is_none());
    }

    fn catalogue() -> Knowledge {
        let gpu = GpuModelId(0);
        let mut k = Knowledge::new();
        k.insert(ConfigEstimates::new(vec![
            ConfigEstimate {
                gpu,
                count: 1,
                throughput: 10.0,
                plan: None,
            },
            ConfigEstimate {
                gpu,
                count: 2,
                throughput: 18.0,
                plan: None,
            },
            ConfigEstimate {
                gpu: GpuModelId(1),
                count: 1,
                throughput: 5.0,
                plan: None,
            },
        ]));
        k
    }

    fn rate(k: &Knowledge, gpu: u16, count: u32) -> f64 {
        k.get::<ConfigEstimates>()
            .and_then(|c| c.get(GpuModelId(gpu), count))
            .map_or(f64::NAN, |e| e.throughput)
    }

    #[test]
    fn an_observed_rate_sets_the_level_and_the_catalogue_the_shape() {
        let base = catalogue();
        let mut seen = Vec::new();
        let at = |gpu, count, rate| Observed {
            gpu: GpuModelId(gpu),
            count,
            rate,
        };
        let k = calibrated(&base, &mut seen, at(0, 1, 5.0)).expect("known configuration");
        assert_eq!(
            (rate(&k, 0, 1), rate(&k, 0, 2), rate(&k, 1, 1)),
            (5.0, 9.0, 2.5)
        );
        // A second observation: both keep their rates, the rest scales by the latest.
        let k = calibrated(&base, &mut seen, at(0, 2, 36.0)).expect("known configuration");
        assert_eq!(
            (rate(&k, 0, 1), rate(&k, 0, 2), rate(&k, 1, 1)),
            (5.0, 36.0, 10.0)
        );
        assert_eq!(seen.len(), 2);
        // Unknown configurations and junk rates change nothing.
        assert!(calibrated(&base, &mut seen, at(0, 8, 1.0)).is_none());
        assert!(calibrated(&base, &mut seen, at(0, 1, f64::NAN)).is_none());
        assert!(calibrated(&base, &mut seen, at(0, 1, 0.0)).is_none());
        assert!(calibrated(&Knowledge::new(), &mut seen, at(0, 1, 1.0)).is_none());
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn the_profile_cache_calibrates_later_jobs_of_the_same_model_and_batch() {
        let base = catalogue();
        let mut cache = ProfileCache::default();
        let key = ("resnet50".to_string(), Some(64));
        let seen = Observed {
            gpu: GpuModelId(0),
            count: 1,
            rate: 20.0,
        };
        assert!(cache.knowledge(&key, &base).is_none());
        assert!(cache.record(key.clone(), &base, seen));
        assert!(
            !cache.record(("".into(), None), &base, seen),
            "no model hint: no key"
        );
        let (k, observed) = cache.knowledge(&key, &base).expect("observed");
        assert_eq!((rate(&k, 0, 1), rate(&k, 0, 2)), (20.0, 36.0));
        assert_eq!(observed, vec![seen]);
        assert!(cache
            .knowledge(&("resnet50".into(), Some(32)), &base)
            .is_none());
        assert_eq!(cache.len(), 1);
    }
}
