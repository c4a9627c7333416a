//! The classic baselines (DESIGN §5.6): FIFO, SRTF, LAS and FTF job orderings over one shared
//! mechanism, with GPU-proportional CPU/memory and consolidated first-fit placement.
//!
//! FIFO never preempts: at each scheduling point it starts queued jobs in arrival order,
//! skipping those that do not fit and continuing down the list (backfill).
//!
//! The preemptive orders (SRTF, LAS, FTF) re-plan at every round boundary, or at every event
//! when no round length is set:
//! 1. walk all active jobs in priority order and select those whose GPUs fit in the cluster's
//!    GPU capacity of the models they can use (skipping any that do not, and continuing; see
//!    `TypeBudget`);
//! 2. release the allocations of running jobs that were not selected;
//! 3. start the selected queued jobs in priority order where a placement exists;
//! 4. let unselected running jobs keep their GPUs if these are still free (no needless
//!    preemption); preempt the rest;
//! 5. backfill what is left with unselected queued jobs, in priority order.
//!
//! Between rounds they only fill free resources, as FIFO does.
//!
//! Under a driver that reports changes of the active set ([`Policy::track_jobs`]), the
//! baselines keep their queued jobs in an ordered queue between calls: a queued job's key
//! under FIFO, SRTF and LAS (arrival, remaining work, attained service) does not change while
//! it waits, so it is ranked once when it enters the queue, not at every scheduling point.
//! FTF's moves with time at a rate of its own: its queued jobs are also kept in a kinetic
//! tournament per bucket (see `Fairness` and `kinetic`). The queue is split by GPU count, so that filling
//! visits only jobs that can fit in what is free. The decisions are the same as ranking
//! `view.active` from scratch. LAS, SRTF and FTF also keep their running jobs (see
//! `RunningJobs`): LAS's attained service is computed from when a job started, SRTF's and
//! FTF's remaining work from the progress line the driver sends, so the driver need not bring
//! them up to date, and a re-plan ranks only the running jobs a queued job might displace.

use smallvec::SmallVec;
use std::collections::BTreeMap;

use tessera_model::hint::prefetch;
use tessera_model::{
    Allocation, Bytes, GpuModelId, JobId, MilliCpu, SimDuration, SimTime, TrainingJob,
};

// A job's rank, `Rank`: (key, submit µs, id), smallest first, as [`OrderedPolicy`] sorts.
use crate::kinetic::{fairness_key, ordered_bits, FairLine, InOrder, Rank, Tournament};
use crate::placement::{fit_in, Demand, IndexedLedger, Ledger};
use crate::policy::{Capabilities, Capability, JobChange, Policy, PolicyInfo, PolicyOptions};
use crate::rank_set::RankSet;
use crate::reasons::{self, Detail, Waiting};
use crate::view::{
    remaining_secs, Action, ActiveJob, ClusterView, JobState, ProgressLine, Trigger,
};

/// What the baselines honour: every training request a whole-GPU scheduler can (GPU types,
/// jobs of several GPUs and nodes, explicit CPU/memory through the ledger) and failures; MIG
/// and quota requests get a whole GPU, services are not placed.
pub const CAPABILITIES: Capabilities = Capabilities::TRAINING.with(Capability::Failures);

/// The baseline policies, one per [`JobOrder`].
pub const POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "fifo",
        about: "first in, first out; non-preemptive, with backfill",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "srtf",
        about: "shortest remaining time first; preemptive",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "las",
        about: "least attained GPU-service first (Tiresias-style); preemptive",
        capabilities: CAPABILITIES,
    },
    PolicyInfo {
        name: "ftf",
        about: "finish-time fairness (Themis): largest rho first; preemptive",
        capabilities: CAPABILITIES,
    },
];

/// Builds the baseline policy of a registry name (case-insensitive), if it is one.
pub fn build(name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>> {
    let order = JobOrder::parse(name)?;
    Some(Box::new(OrderedPolicy::new(order, options.round)))
}

/// How a baseline ranks jobs; the highest priority comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobOrder {
    /// Earliest submission.
    Fifo,
    /// Least estimated remaining time.
    Srtf,
    /// Least attained GPU-service (GPU-seconds).
    Las,
    /// Largest finish-time-fairness ratio rho = (time in system + remaining) / isolated time.
    Ftf,
}

impl JobOrder {
    /// Every ordering, in the order listings show them.
    pub const ALL: [JobOrder; 4] = [JobOrder::Fifo, JobOrder::Srtf, JobOrder::Las, JobOrder::Ftf];

    /// The ordering of a registry name (`fifo`, `srtf`, `las`, `ftf`), case-insensitive.
    pub fn parse(name: &str) -> Option<JobOrder> {
        JobOrder::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(name))
    }

    /// Registry name.
    pub fn name(self) -> &'static str {
        match self {
            JobOrder::Fifo => "fifo",
            JobOrder::Srtf => "srtf",
            JobOrder::Las => "las",
            JobOrder::Ftf => "ftf",
        }
    }

    /// Whether policies of this ordering preempt.
    pub fn preemptive(self) -> bool {
        !matches!(self, JobOrder::Fifo)
    }

    /// Sort key, smaller first. Ties fall back to submission time, then id, so the order is
    /// total and never depends on the order of `view.active`.
    pub fn key(self, view: &ClusterView<'_>, job: &ActiveJob, spec: &TrainingJob) -> f64 {
        match self {
            JobOrder::Fifo => 0.0,
            JobOrder::Srtf => job.remaining_secs_estimate(),
            JobOrder::Las => job.attained_gpu_secs,
            JobOrder::Ftf => fairness_key(
                view.now,
                spec.submit,
                job.remaining_secs_estimate(),
                isolated_secs(spec),
            ),
        }
    }

    /// What breaks ties of [`key`](Self::key) before submission time: LAS's exact attained
    /// service (GPU·µs; `key` is the same service in seconds, which it orders the same way
    /// but may round two values together), 0 for the others.
    pub fn exact_key(self, job: &ActiveJob) -> u64 {
        match self {
            JobOrder::Las => job.attained_gpu_us,
            _ => 0,
        }
    }

    /// The key of a queued job when it does not change while the job waits (everything but
    /// FTF), as an integer ordered as (`key`, `exact_key`) are; equal at any later instant
    /// until the job starts. FTF's moves with time: a placeholder, until the queue is
    /// ranked by its [`Tournament`].
    fn queued_key(self, job: &ActiveJob) -> Option<u64> {
        Some(self.live_key(job))
    }

    /// [`queued_key`](Self::queued_key) of a job as of the view it is read from (running or
    /// not; FTF's moves with time and is not ranked this way).
    fn live_key(self, job: &ActiveJob) -> u64 {
        match self {
            JobOrder::Fifo | JobOrder::Ftf => ordered_bits(0.0),
            JobOrder::Srtf => ordered_bits(job.remaining_secs_estimate()),
            // Exact, and in the simulator `attained_gpu_secs` is this divided by 10⁶.
            JobOrder::Las => job.attained_gpu_us,
        }
    }
}

/// A job's isolated time under FTF: its trace duration, in seconds (never zero).
fn isolated_secs(spec: &TrainingJob) -> f64 {
    spec.duration.as_secs_f64().max(1e-9)
}

/// What the tracked policy keeps of one job, by job index. The queue's and the running
/// list's entries for a job sit side by side: a preemption files the job and forgets its
/// run, a start does the reverse, and each visits one place in this table instead of one in
/// each of two (a cache miss apiece on a deep queue). A slot fills half a cache line and
/// never straddles two (the rank's id is the slot's index, not kept).
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
struct JobSlot {
    /// Queued and filed: its rank's key and submission, and its GPU count.
    key: u64,
    submit: u64,
    gpus: u32,
    filed: bool,
    /// Running, under LAS, SRTF or FTF: its place in `RunningJobs::running`, else [`NOT_RUNNING`].
    running: u32,
    /// Its demand in `Queue::demands`, or [`NO_DEMAND`] before the policy has seen it.
    demand: u32,
}

/// `JobSlot::demand` of a job not seen yet.
const NO_DEMAND: u32 = u32::MAX;

/// `JobSlot::running` of a job not tracked as running.
const NOT_RUNNING: u32 = u32::MAX;

impl Default for JobSlot {
    fn default() -> Self {
        JobSlot {
            key: 0,
            submit: 0,
            gpus: 0,
            filed: false,
            running: NOT_RUNNING,
            demand: NO_DEMAND,
        }
    }
}

impl JobSlot {
    /// (GPU count, rank) of job `id`, this slot's, while it is filed.
    fn queued(&self, id: u32) -> Option<(u32, Rank)> {
        self.filed
            .then_some((self.gpus, (self.key, self.submit, id)))
    }

    /// Notes the job filed with `gpus` at `rank` (its id is the slot's).
    fn file(&mut self, gpus: u32, rank: Rank) {
        (self.key, self.submit, self.gpus, self.filed) = (rank.0, rank.1, gpus, true);
    }

    /// Unfiles job `id`, this slot's: its (GPU count, rank) if it was filed.
    fn take_queued(&mut self, id: u32) -> Option<(u32, Rank)> {
        let queued = self.queued(id);
        self.filed = false;
        queued
    }

    /// Sets (or with `None` clears) the job's place among the tracked running jobs.
    fn set_running(&mut self, place: Option<u32>) {
        self.running = place.unwrap_or(NOT_RUNNING);
    }

    /// The job's place among the tracked running jobs, if it runs.
    fn running_place(&self) -> Option<u32> {
        (self.running != NOT_RUNNING).then_some(self.running)
    }

    /// Clears the job's place among the tracked running jobs, returning it.
    fn take_running(&mut self) -> Option<u32> {
        let place = std::mem::replace(&mut self.running, NOT_RUNNING);
        (place != NOT_RUNNING).then_some(place)
    }
}

/// A [`Demand`] owned by the policy: the distinct demands of the jobs seen, each kept once.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct OwnedDemand {
    gpus: u32,
    gpu_types: Box<[GpuModelId]>,
    cpu: Option<MilliCpu>,
    memory: Option<Bytes>,
}

impl OwnedDemand {
    fn of(spec: &TrainingJob) -> OwnedDemand {
        OwnedDemand {
            gpus: spec.gpus,
            gpu_types: spec.gpu_types.as_slice().into(),
            cpu: spec.cpu,
            memory: spec.memory,
        }
    }

    fn as_demand(&self) -> Demand<'_> {
        Demand {
            gpus: self.gpus,
            gpu_types: &self.gpu_types,
            cpu: self.cpu,
            memory: self.memory,
        }
    }
}

/// The slot of job index `i`, the table grown to hold it (ids arrive in order: by
/// doubling, not by one per job).
fn slot_mut(slots: &mut Vec<JobSlot>, i: usize) -> &mut JobSlot {
    if slots.len() <= i {
        slots.resize((i + 1).next_power_of_two(), JobSlot::default());
    }
    &mut slots[i]
}

/// Queued jobs by GPU count, each bucket in rank order.
#[derive(Debug, Default)]
struct Queue {
    /// (GPU count, its jobs), by GPU count. Jobs ask for few distinct counts, so a bucket
    /// stays once made, empty or not.
    buckets: Vec<(u32, RankSet<Rank>)>,
    /// Each job's slot, by job index: its (GPU count, rank) while filed here.
    slots: Vec<JobSlot>,
    /// The distinct demands of the jobs seen (jobs ask for few), named by their slots: a
    /// placement reads a job's demand here rather than in its spec, which a deep queue's
    /// placements would otherwise visit at a few cache misses per job.
    demands: Vec<OwnedDemand>,
    /// Each demand's index in `demands`.
    demand_index: BTreeMap<OwnedDemand, u32>,
    /// (GPUs, index in `demands`) of the demands of GPUs alone.
    plain: Vec<(u32, u32)>,
    /// An arrival at an empty queue since the last scheduling point, not filed yet: (GPU
    /// count, rank). Most arrivals on a cluster with room start at once, and such a job is
    /// placed without filing it (a filing and a removal per job otherwise). Any other
    /// arrival files it first (a driver reporting thousands of arrivals before a decision
    /// leaves the decision nothing to file).
    fresh: Option<(u32, Rank)>,
    /// FTF's: what its keys follow from, and when they were computed. (Boxed: the queue
    /// moves in and out of the policy at each re-plan, and the other orders' stays small.)
    fair: Option<Box<Fairness>>,
}

/// What FTF keeps to rank its jobs at any instant: a queued job's key, −(t − submit +
/// remaining) / isolated, moves with time at a rate of its own, so the order of the queue
/// changes between scheduling points. Each bucket's jobs are also filed in a kinetic
/// [`Tournament`], brought to the instant of each scheduling point that reads the bucket and
/// walked in rank order from there: the work is proportional to the changes of order among
/// the best-ranked, not to the queue. (The bucket's `RankSet` still keeps its members, in
/// submission order, for everything but the order.)
#[derive(Debug, Default)]
struct Fairness {
    /// By job index: (estimated seconds of work left when it was filed, isolated seconds).
    /// Kept while the job runs (its isolated time ranks it there too).
    params: Vec<(f64, f64)>,
    /// (GPU count, its jobs), by GPU count.
    trees: Vec<(u32, Tournament)>,
    /// By job index: its leaf in its bucket's tree while it is filed.
    leaves: Vec<u32>,
}

/// `Fairness::leaves` of a job not filed.
const NO_LEAF: u32 = u32::MAX;

impl Fairness {
    /// Files job `id` (submitted at `submit` µs) in the tree of `gpus`.
    #[inline(never)]
    fn file(&mut self, gpus: u32, submit: u64, id: u32) {
        let (remaining, isolated) = self
            .params
            .get(id as usize)
            .copied()
            .unwrap_or((f64::INFINITY, 1.0));
        let t = match self.trees.binary_search_by_key(&gpus, |t| t.0) {
            Ok(t) => t,
            Err(t) => {
                self.trees.insert(t, (gpus, Tournament::default()));
                t
            }
        };
        let leaf = self.trees[t].1.insert(FairLine {
            submit,
            id,
            remaining,
            isolated,
        });
        let i = id as usize;
        if self.leaves.len() <= i {
            self.leaves.resize((i + 1).next_power_of_two(), NO_LEAF);
        }
        self.leaves[i] = leaf;
    }

    /// Takes job `id` out of the tree of `gpus`.
    #[inline(never)]
    fn unfile(&mut self, gpus: u32, id: u32) {
        let Some(leaf) = self.leaves.get_mut(id as usize) else {
            return;
        };
        let leaf = std::mem::replace(leaf, NO_LEAF);
        if let Ok(t) = self.trees.binary_search_by_key(&gpus, |t| t.0) {
            self.trees[t].1.remove(leaf);
        }
    }

    /// The jobs asking `gpus` GPUs in rank order, as of the instant their tree was last
    /// brought to.
    fn in_order(&self, gpus: u32) -> Option<InOrder<'_>> {
        let t = self.trees.binary_search_by_key(&gpus, |t| t.0).ok()?;
        Some(self.trees[t].1.in_order())
    }

    /// Notes what `job`'s key follows from while it waits: its remaining work as the view
    /// shows it now (the driver brought it up to date when it stopped) and its isolated
    /// time. (Out of line: the other orders' `observe` stays as it was.)
    #[inline(never)]
    fn note(&mut self, job: &ActiveJob, spec: &TrainingJob) {
        let i = job.id.index();
        if self.params.len() <= i {
            self.params
                .resize((i + 1).next_power_of_two(), (f64::INFINITY, 1.0));
        }
        self.params[i] = (job.remaining_secs_estimate(), isolated_secs(spec));
    }

    /// Job `id`'s isolated seconds (1 for a job never noted).
    fn isolated(&self, id: u32) -> f64 {
        self.params.get(id as usize).map_or(1.0, |p| p.1)
    }
}

impl Queue {
    /// Notes job `id`'s demand, once, when it waits (filed on arrival, or preempted): the
    /// placements that then try it read the demand here. Jobs that start on arrival and
    /// never wait are not noted (a cost per job on a cluster with room).
    fn note_demand(&mut self, id: JobId, spec: &TrainingJob) {
        let slot = slot_mut(&mut self.slots, id.index());
        if slot.demand != NO_DEMAND {
            return;
        }
        // Most jobs ask only for GPUs (any model, CPU and memory in proportion), and for
        // one of a few counts: found by their count before the index is searched (which
        // builds a key to look up).
        let plain = spec.gpu_types.is_empty() && spec.cpu.is_none() && spec.memory.is_none();
        if let Some(&(_, d)) = self.plain.iter().find(|&&(g, _)| plain && g == spec.gpus) {
            slot.demand = d;
            return;
        }
        let next = self.demands.len() as u32;
        let d = *self
            .demand_index
            .entry(OwnedDemand::of(spec))
            .or_insert_with_key(|owned| {
                self.demands.push(owned.clone());
                next
            });
        slot.demand = d;
        if plain {
            self.plain.push((spec.gpus, d));
        }
    }

    /// Asks for job `id`'s slot (see [`prefetch`]).
    fn prefetch_slot(&self, id: u32) {
        if let Some(slot) = self.slots.get(id as usize) {
            prefetch(slot);
        }
    }

    /// Job `id`'s demand: as noted, else (a job the policy has not seen) from its spec.
    fn demand<'s>(&'s self, id: u32, jobs: &'s [TrainingJob]) -> Option<Demand<'s>> {
        match self.slots.get(id as usize).map(|s| s.demand) {
            Some(d) if d != NO_DEMAND => self.demands.get(d as usize).map(OwnedDemand::as_demand),
            _ => jobs.get(id as usize).map(Demand::from),
        }
    }

    fn insert(&mut self, order: JobOrder, job: &ActiveJob, spec: &TrainingJob) {
        self.note_demand(job.id, spec);
        if let Some(rank) = Self::rank_of(order, job, spec) {
            self.remove(job.id);
            self.file(spec.gpus, rank);
        }
    }

    /// [`insert`](Self::insert) of a job whose GPU count and submission (µs) are known.
    fn insert_known(&mut self, order: JobOrder, job: &ActiveJob, gpus: u32, submit: u64) {
        if let Some(key) = order.queued_key(job) {
            self.remove(job.id);
            self.file(gpus, (key, submit, job.id.0));
        }
    }

    fn rank_of(order: JobOrder, job: &ActiveJob, spec: &TrainingJob) -> Option<Rank> {
        Some((order.queued_key(job)?, spec.submit.as_micros(), job.id.0))
    }

    /// Files a rank into its bucket. (Inlined always, as [`RunningJobs::stop`].)
    #[inline(always)]
    fn file(&mut self, gpus: u32, rank: Rank) {
        let b = match self.buckets.binary_search_by_key(&gpus, |(g, _)| *g) {
            Ok(b) => b,
            Err(b) => {
                self.buckets.insert(b, (gpus, RankSet::default()));
                b
            }
        };
        self.buckets[b].1.insert(rank);
        slot_mut(&mut self.slots, rank.2 as usize).file(gpus, rank);
        if let Some(fair) = &mut self.fair {
            fair.file(gpus, rank.1, rank.2);
        }
    }

    /// FTF: notes what job's key follows from while it waits (see [`Fairness::note`]);
    /// nothing for the other orders.
    #[inline(always)]
    fn note_fairness(&mut self, job: &ActiveJob, spec: &TrainingJob) {
        if let Some(fair) = &mut self.fair {
            fair.note(job, spec);
        }
    }

    /// FTF: brings the ranks of the filed jobs asking at most `limit` GPUs to `now` (nothing
    /// for the other orders, whose keys stay put).
    fn advance(&mut self, now: SimTime, limit: u64) {
        let Some(fair) = &mut self.fair else { return };
        for (gpus, tree) in &mut fair.trees {
            if *gpus as u64 > limit {
                break;
            }
            if !tree.is_empty() {
                tree.advance(now);
            }
        }
    }

    /// Notes an arrival: filed, or kept aside when the queue is empty (see `fresh`).
    fn arrive(&mut self, order: JobOrder, job: &ActiveJob, spec: &TrainingJob) {
        let Some(rank) = Self::rank_of(order, job, spec) else {
            return;
        };
        self.remove(job.id);
        if self.fresh.is_none() && self.is_empty() {
            self.fresh = Some((spec.gpus, rank));
        } else {
            self.file_fresh();
            self.note_demand(job.id, spec);
            self.file(spec.gpus, rank);
        }
    }

    /// Files the arrival kept aside, if any.
    fn file_fresh(&mut self) {
        if let Some((gpus, rank)) = self.fresh.take() {
            self.file(gpus, rank);
        }
    }

    /// Whether no job waits, filed or kept aside.
    fn nothing_waiting(&self) -> bool {
        self.fresh.is_none() && self.is_empty()
    }

    /// Whether no job is filed.
    fn is_empty(&self) -> bool {
        self.buckets.iter().all(|(_, b)| b.is_empty())
    }

    /// The one job waiting, when it has just arrived. It stays noted until the driver reports
    /// it started (a start the driver refuses leaves it waiting, as a filed job would).
    fn lone_arrival(&self) -> Option<Rank> {
        match self.fresh {
            Some((_, rank)) if self.is_empty() => Some(rank),
            _ => None,
        }
    }

    /// Takes `job` out of the queue; its (GPU count, submit µs) if it was waiting. (Inlined
    /// always: the check for FTF's trees made it a call of its own, +0.9% instructions on
    /// `bench philly`.)
    #[inline(always)]
    fn remove(&mut self, job: JobId) -> Option<(u32, u64)> {
        if let Some((gpus, rank)) = self.fresh.filter(|(_, rank)| rank.2 == job.0) {
            self.fresh = None;
            return Some((gpus, rank.1));
        }
        let (gpus, rank) = self
            .slots
            .get_mut(job.index())
            .and_then(|s| s.take_queued(job.0))?;
        if let Ok(b) = self.buckets.binary_search_by_key(&gpus, |(g, _)| *g) {
            self.buckets[b].1.remove(&rank);
        }
        if let Some(fair) = &mut self.fair {
            fair.unfile(gpus, job.0);
        }
        Some((gpus, rank.1))
    }

    /// Renumbers by `map` (see [`Policy::renumber_jobs`]); unmapped jobs leave the queue.
    /// The slots' running places are dropped: [`RunningJobs::renumber`] sets them again.
    fn renumber(&mut self, map: &[Option<JobId>]) {
        self.file_fresh();
        let new_id = |id: u32| map.get(id as usize).copied().flatten();
        for (_, bucket) in &mut self.buckets {
            *bucket = bucket
                .iter()
                .filter_map(|&(key, submit, id)| Some((key, submit, new_id(id)?.0)))
                .collect();
        }
        self.buckets.retain(|(_, b)| !b.is_empty());
        let mut slots = Vec::new();
        for (old, e) in self.slots.iter().enumerate() {
            let Some(n) = new_id(old as u32) else {
                continue;
            };
            let slot = slot_mut(&mut slots, n.index());
            slot.demand = e.demand;
            if let Some((gpus, (key, submit, _))) = e.queued(old as u32) {
                slot.file(gpus, (key, submit, n.0));
            }
        }
        self.slots = slots;
        if let Some(fair) = &mut self.fair {
            let mut params = Vec::new();
            for (old, &p) in fair.params.iter().enumerate() {
                if let Some(n) = new_id(old as u32) {
                    if params.len() <= n.index() {
                        params.resize(n.index() + 1, (f64::INFINITY, 1.0));
                    }
                    params[n.index()] = p;
                }
            }
            fair.params = params;
            fair.trees.clear();
            fair.leaves.clear();
            for (gpus, bucket) in &self.buckets {
                for &(_, submit, id) in bucket.iter() {
                    fair.file(*gpus, submit, id);
                }
            }
        }
    }

    /// GPUs of the smallest queued job, if any.
    fn smallest(&self) -> Option<u64> {
        self.buckets
            .iter()
            .find(|(_, b)| !b.is_empty())
            .map(|&(g, _)| g as u64)
    }
}

/// LAS's, SRTF's and FTF's running jobs, kept between calls so that a re-plan brings no job's
/// progress up to date. Under LAS, a running job's attained service at an instant t is
/// a + g·(t − r) once it resumes at r (past any checkpoint restore), and a before: a its
/// service when it started, g the GPUs it holds. Under SRTF and FTF, its remaining work
/// follows from the [`ProgressLine`] the driver sends after each start or change of rate (a
/// driver that sends none, the daemon, leaves them ranking from the view). A re-plan that
/// must rank running jobs computes the key of each and sorts the ones it needs; between
/// re-plans, a start or a stop is O(1). (An ordered set per GPU count, tried before, paid a B-tree insert and remove per preemption to save a scan of at most
/// one entry per GPU at each exact re-plan: more than it saved on a loaded cluster.)
#[derive(Debug, Default)]
struct RunningJobs {
    /// The running jobs, in no particular order.
    running: Vec<LasJob>,
    /// Each running job's allocation, at its place in `running`.
    held: Vec<Allocation>,
    /// Σ GPUs the running jobs ask for (their specs), as the selection budgets them.
    asked: u64,
    /// SRTF's and FTF's: each running job's progress line (`None` until the driver tells it) and
    /// throughput estimate, at its place in `running`; LAS keeps none.
    lines: Option<Vec<(Option<ProgressLine>, f64)>>,
    /// Running jobs whose line is not known: while any is, SRTF and FTF rank from the view.
    unknown_lines: usize,
}

#[derive(Clone, Copy, Debug)]
struct LasJob {
    id: u32,
    /// GPUs its spec asks for.
    asked: u32,
    /// GPUs held (the rate its service grows at, per µs).
    held: u32,
    /// Attained service when it started, GPU·µs.
    attained: u64,
    /// When its service starts growing, µs.
    resumes: u64,
    submit: u64,
}

impl LasJob {
    /// Attained service at `t` µs.
    fn key(&self, t: u64) -> u64 {
        let grown = self.held as u64 * t.saturating_sub(self.resumes);
        self.attained.saturating_add(grown)
    }
}

impl RunningJobs {
    /// Running jobs ranked by remaining work (SRTF, FTF) rather than attained service.
    fn by_remaining_work() -> RunningJobs {
        RunningJobs {
            lines: Some(Vec::new()),
            ..RunningJobs::default()
        }
    }

    /// Whether every running job's key can be computed at any instant.
    fn keys_known(&self) -> bool {
        self.unknown_lines == 0
    }

    /// Notes how `job`'s progress goes (SRTF, FTF); nothing for a job not tracked as running.
    /// (Out of line: inlined, it made `observe` too large to inline LAS's stop and filing.)
    #[inline(never)]
    fn set_line(&mut self, slots: &[JobSlot], job: JobId, line: ProgressLine) {
        let Some(lines) = &mut self.lines else { return };
        let Some(place) = slots.get(job.index()).and_then(JobSlot::running_place) else {
            return;
        };
        if let Some(entry) = lines.get_mut(place as usize) {
            if entry.0.is_none() {
                self.unknown_lines -= 1;
            }
            entry.0 = Some(line);
        }
    }

    /// Tracks `job`, started; its place is kept in `slots` (the queue's).
    /// (`asked`, `submit`: its spec's GPUs and submission, known from its queue entry.)
    fn start(&mut self, slots: &mut Vec<JobSlot>, job: &ActiveJob, asked: u32, submit: u64) {
        self.stop(slots, job.id);
        let Some(allocation) = &job.allocation else {
            return;
        };
        self.asked += asked as u64;
        slot_mut(slots, job.id.index()).set_running(u32::try_from(self.running.len()).ok());
        self.running.push(LasJob {
            id: job.id.0,
            asked,
            held: allocation.gpus(),
            attained: job.attained_gpu_us,
            resumes: job.resumes_at.map_or(0, |r| r.as_micros()),
            submit,
        });
        self.held.push(allocation.clone());
        if self.lines.is_some() {
            self.add_line(job.throughput_estimate);
        }
    }

    /// SRTF, FTF: a place for the line of the job just started, unknown until the driver tells it.
    /// (Out of line, as is [`drop_line`](Self::drop_line): LAS's start and stop, the
    /// per-preemption path of a loaded run, stay as they were.)
    #[inline(never)]
    fn add_line(&mut self, estimate: f64) {
        if let Some(lines) = &mut self.lines {
            lines.push((None, estimate));
            self.unknown_lines += 1;
        }
    }

    /// SRTF, FTF: forgets the line at `place`, as `running` forgets the job there.
    #[inline(never)]
    fn drop_line(&mut self, place: usize) {
        if let Some(lines) = &mut self.lines {
            if lines.swap_remove(place).0.is_none() {
                self.unknown_lines -= 1;
            }
        }
    }

    /// Stops tracking `job`; what was kept of it, if it was running. (Inlined into `observe`
    /// always: a call of its own per preemption measured 1% more instructions on a loaded
    /// LAS run.)
    #[inline(always)]
    fn stop(&mut self, slots: &mut [JobSlot], job: JobId) -> Option<LasJob> {
        let slot = slots.get_mut(job.index()).and_then(JobSlot::take_running)? as usize;
        if slot >= self.running.len() {
            return None;
        }
        let e = self.running.swap_remove(slot);
        self.held.swap_remove(slot);
        if self.lines.is_some() {
            self.drop_line(slot);
        }
        self.asked -= e.asked as u64;
        if let Some(moved) = self.running.get(slot) {
            if let Some(s) = slots.get_mut(moved.id as usize) {
                s.set_running(Some(slot as u32));
            }
        }
        Some(e)
    }

    /// Renumbers by `map` (see [`Policy::renumber_jobs`]); unmapped jobs stop being tracked.
    /// `slots` are the queue's, renumbered already (no running places set).
    fn renumber(&mut self, slots: &mut Vec<JobSlot>, map: &[Option<JobId>]) {
        let new_id = |id: u32| map.get(id as usize).copied().flatten();
        let running = std::mem::take(&mut self.running);
        let held = std::mem::take(&mut self.held);
        let mut lines = self.lines.as_mut().map(std::mem::take).map(Vec::into_iter);
        self.asked = 0;
        self.unknown_lines = 0;
        for (mut e, allocation) in running.into_iter().zip(held) {
            let line = lines.as_mut().and_then(Iterator::next);
            let Some(n) = new_id(e.id) else {
                continue;
            };
            e.id = n.0;
            slot_mut(slots, n.index()).set_running(u32::try_from(self.running.len()).ok());
            self.asked += e.asked as u64;
            self.running.push(e);
            self.held.push(allocation);
            if let (Some(kept), Some(line)) = (&mut self.lines, line) {
                self.unknown_lines += usize::from(line.0.is_none());
                kept.push(line);
            }
        }
    }

    /// The running jobs ranked after `after` (all of them for `None`) at `t` µs, as (rank,
    /// GPUs asked, place in `running`), in rank order, into `out`; by finish-time fairness
    /// when `fair` is given (FTF). (Most of them are walked: sorting them costs less than a
    /// heap's pops, measured.)
    fn ranked_after(
        &self,
        after: Option<Rank>,
        t: SimTime,
        fair: Option<&Fairness>,
        out: &mut Vec<(Rank, u32, u32)>,
    ) {
        out.clear();
        if let (Some(lines), Some(fair)) = (&self.lines, fair) {
            // FTF: remaining work from the line, as SRTF's, over the isolated time.
            out.extend(
                self.running
                    .iter()
                    .zip(lines)
                    .zip(0u32..)
                    .map(|((e, &(line, estimate)), place)| {
                        let remaining = line.map_or(f64::INFINITY, |l| l.remaining_at(t));
                        let key = fairness_key(
                            t,
                            SimTime::from_micros(e.submit),
                            remaining_secs(remaining, estimate),
                            fair.isolated(e.id),
                        );
                        ((ordered_bits(key), e.submit, e.id), e.asked, place)
                    })
                    .filter(|&(rank, _, _)| after.is_none_or(|a| rank > a)),
            );
        } else if let Some(lines) = &self.lines {
            // SRTF: remaining work as the driver would show it now, over the estimate.
            out.extend(
                self.running
                    .iter()
                    .zip(lines)
                    .zip(0u32..)
                    .map(|((e, &(line, estimate)), place)| {
                        let remaining = line.map_or(f64::INFINITY, |l| l.remaining_at(t));
                        let key = ordered_bits(remaining_secs(remaining, estimate));
                        ((key, e.submit, e.id), e.asked, place)
                    })
                    .filter(|&(rank, _, _)| after.is_none_or(|a| rank > a)),
            );
        } else {
            let t = t.as_micros();
            out.extend(
                self.running
                    .iter()
                    .zip(0u32..)
                    .map(|(e, place)| ((e.key(t), e.submit, e.id), e.asked, place))
                    .filter(|&(rank, _, _)| after.is_none_or(|a| rank > a)),
            );
        }
        // Ranks are distinct (ids are), so the unstable sort is deterministic. (Sorting by a
        // packed 128-bit key instead measured slower.)
        out.sort_unstable();
    }
}

/// A cursor over one queue bucket: (GPU count, the rest, the head).
type Head<'q> = (u64, BucketIter<'q>, Option<Rank>);

/// The ranks of one bucket in order: its `RankSet`'s, or FTF's tournament's.
enum BucketIter<'q> {
    Ranks(crate::rank_set::Iter<'q, Rank>),
    Fair(InOrder<'q>),
}

impl Iterator for BucketIter<'_> {
    type Item = Rank;

    #[inline]
    fn next(&mut self) -> Option<Rank> {
        match self {
            BucketIter::Ranks(it) => it.next().copied(),
            BucketIter::Fair(it) => it.next(),
        }
    }
}

/// Cursors over the buckets of jobs asking at most `limit` GPUs (inline: made at every
/// scheduling point, and jobs ask for few distinct GPU counts).
fn bucket_heads(queue: &Queue, limit: u64) -> SmallVec<[Head<'_>; 8]> {
    queue
        .buckets
        .iter()
        .take_while(|&&(g, _)| g as u64 <= limit)
        .filter(|(_, bucket)| !bucket.is_empty())
        .map(|(g, bucket)| {
            let mut it = match queue.fair.as_ref().and_then(|f| f.in_order(*g)) {
                Some(fair) => BucketIter::Fair(fair),
                None => BucketIter::Ranks(bucket.iter()),
            };
            let head = it.next();
            (*g as u64, it, head)
        })
        .collect()
}

/// The cursor whose head ranks first among buckets asking at most `limit` GPUs.
fn best_head(heads: &[Head<'_>], limit: u64) -> Option<usize> {
    let mut best: Option<(usize, Rank)> = None;
    for (h, (g, _, head)) in heads.iter().enumerate() {
        if let (true, Some(rank)) = (*g <= limit, head) {
            if best.is_none_or(|(_, r)| *rank < r) {
                best = Some((h, *rank));
            }
        }
    }
    best.map(|(h, _)| h)
}

/// [`best_head`] remembered through a walk in which the budget only shrinks and heads only
/// advance: the best stays the best (among fewer candidates, it still being one) until its
/// head is taken or the budget drops below its GPUs; none fitting stays so. A walk asks at
/// every step and changes the answer at few.
#[derive(Default)]
struct BestHead(Option<Option<usize>>);

impl BestHead {
    fn get(&mut self, heads: &[Head<'_>], budget: u64) -> Option<usize> {
        match self.0 {
            Some(Some(q)) if heads.get(q).is_some_and(|h| h.0 <= budget) => Some(q),
            Some(None) => None,
            _ => {
                let q = best_head(heads, budget);
                self.0 = Some(q);
                q
            }
        }
    }

    /// A head was taken: the next ask looks again.
    fn taken(&mut self) {
        self.0 = None;
    }
}

/// Takes a cursor's head and moves it on.
fn advance(head: &mut Head<'_>) -> Option<Rank> {
    let taken = head.2;
    head.2 = head.1.next();
    taken
}

/// The GPUs left to select jobs into, per GPU model of the cluster (step 1 of a re-plan).
///
/// A job stays within one node group, so only GPUs of a model it accepts can hold it: a
/// running job is charged to the model it holds, a queued one to the first model (in group
/// order, as placement tries them) it accepts with enough left. Budgeting against the whole
/// cluster's count instead selected a queued job restricted to one model whenever other
/// models had room, so the job it should displace kept running and it waited for ever
/// (issue 38: LAS in real mode, 2 A100 + 2 V100). On a cluster of one model this is the
/// whole count, as it was.
#[derive(Clone, Debug)]
pub struct TypeBudget {
    /// (model, GPUs left), in the order the models first appear among the groups.
    left: SmallVec<[(GpuModelId, u64); 4]>,
}

impl TypeBudget {
    /// The whole cluster's GPUs, per model.
    pub fn new(cluster: &tessera_model::Cluster) -> TypeBudget {
        let mut left: SmallVec<[(GpuModelId, u64); 4]> = SmallVec::new();
        for g in &cluster.groups {
            match left.iter_mut().find(|(m, _)| *m == g.gpu) {
                Some(e) => e.1 += g.total_gpus(),
                None => left.push((g.gpu, g.total_gpus())),
            }
        }
        TypeBudget { left }
    }

    /// The GPUs free per model, from each node's free resources (`free`, by node index): what
    /// a policy that released its running jobs' allocations into a ledger selects into.
    pub fn of_free(
        cluster: &tessera_model::Cluster,
        free: &[tessera_model::Resources],
    ) -> TypeBudget {
        let mut budget = TypeBudget::new(cluster);
        for e in budget.left.iter_mut() {
            e.1 = 0;
        }
        for (node, f) in cluster.nodes.iter().zip(free) {
            if let Some(e) = budget.left.iter_mut().find(|(m, _)| *m == node.gpu) {
                e.1 += u64::from(f.gpus);
            }
        }
        budget
    }

    /// Whether the cluster has GPUs of a single model (the budget is then one count).
    pub fn single(&self) -> bool {
        self.left.len() <= 1
    }

    /// The most GPUs left of any model: no job asking more can be selected.
    pub fn most(&self) -> u64 {
        self.left.iter().map(|&(_, n)| n).max().unwrap_or(0)
    }

    /// Charges a running job's `gpus` to the model of the node it holds first; false (and
    /// nothing charged) when that model has fewer left.
    pub fn take_held(
        &mut self,
        cluster: &tessera_model::Cluster,
        held: &Allocation,
        gpus: u32,
    ) -> bool {
        let model = held
            .shares
            .first()
            .and_then(|s| cluster.nodes.get(s.node.index()))
            .map(|n| n.gpu);
        // A holding that names no node of the cluster (none does) is charged as a queued job.
        let Some(e) = model.and_then(|m| self.left.iter_mut().find(|(x, _)| *x == m)) else {
            return self.take_queued(&[], gpus);
        };
        if e.1 < gpus as u64 {
            return false;
        }
        e.1 -= gpus as u64;
        true
    }

    /// Charges `job` (`spec` its spec) as [`take_held`](Self::take_held) or
    /// [`take_queued`](Self::take_queued) does, as it holds GPUs or not.
    pub fn take(
        &mut self,
        cluster: &tessera_model::Cluster,
        job: &ActiveJob,
        spec: &TrainingJob,
    ) -> bool {
        match &job.allocation {
            Some(held) => self.take_held(cluster, held, spec.gpus),
            None => self.take_queued(&spec.gpu_types, spec.gpus),
        }
    }

    /// Charges a queued job's `gpus` to the first model it accepts (`allowed` empty: any)
    /// with enough left; false when none has.
    pub fn take_queued(&mut self, allowed: &[GpuModelId], gpus: u32) -> bool {
        match self
            .left
            .iter_mut()
            .find(|(m, n)| *n >= gpus as u64 && (allowed.is_empty() || allowed.contains(m)))
        {
            Some(e) => {
                e.1 -= gpus as u64;
                true
            }
            None => false,
        }
    }
}

/// Failed shapes remembered per fill (the list is scanned per job: kept short).
const MAX_FAILED_SHAPES: usize = 16;

/// Places jobs in a pass where the ledger only takes (a fill, a re-plan's backfill): what is
/// free only shrinks and a placement depends on nothing but the shape, so a job of a shape
/// that found no placement earlier in the pass fails too. Skipping it decides the same and
/// costs a comparison instead of a placement attempt (a deep queue of jobs that cannot fit
/// yet, or a loaded cluster's scans across every node for a job that spans several).
///
/// The fill owns the pass's ledger and takes a start's allocation from it only when another
/// placement is tried: most fills start one job, and the ledger is dropped after the fill.
/// (Borrowing the ledger instead cost LAS's re-plan 0.9% more instructions on the loaded case,
/// in code generated around it.)
struct ShrinkingFill<'a, 'c> {
    ledger: IndexedLedger<'c>,
    failed: SmallVec<[Demand<'a>; 4]>,
    /// Where in the actions the last start is, its allocation not taken from the ledger yet.
    untaken: Option<usize>,
    /// Free GPUs once every start so far is taken.
    free: u64,
}

impl<'a, 'c> ShrinkingFill<'a, 'c> {
    fn new(ledger: IndexedLedger<'c>) -> ShrinkingFill<'a, 'c> {
        ShrinkingFill {
            free: ledger.free_gpus(),
            ledger,
            failed: SmallVec::new(),
            untaken: None,
        }
    }

    fn free_gpus(&self) -> u64 {
        self.free
    }

    /// Appends `job`'s start where it fits first; false if it fits nowhere.
    fn start(&mut self, job: JobId, demand: Demand<'a>, actions: &mut Vec<Action>) -> bool {
        if self.failed.contains(&demand) {
            return false;
        }
        if let Some(Action::Start { allocation, .. }) =
            self.untaken.take().and_then(|i| actions.get(i))
        {
            self.ledger.take(allocation);
        }
        match self.ledger.fit(demand) {
            Some(allocation) => {
                self.free = self.free.saturating_sub(allocation.gpus() as u64);
                self.untaken = Some(actions.len());
                actions.push(Action::Start { job, allocation });
                true
            }
            None => {
                if self.failed.len() < MAX_FAILED_SHAPES {
                    self.failed.push(demand);
                }
                false
            }
        }
    }
}

/// [`OrderedPolicy::fill_tracked`] for a queue of one job: its start where it fits first, if
/// anywhere; false otherwise.
fn start_lone(view: &ClusterView<'_>, job: JobId, actions: &mut Vec<Action>) -> bool {
    let Some(spec) = view.jobs.get(job.index()) else {
        return false;
    };
    match fit_in(view.cluster, view.state, spec) {
        Some(allocation) => {
            actions.push(Action::Start { job, allocation });
            true
        }
        None => false,
    }
}

/// A baseline policy: one [`JobOrder`] over the shared start/preempt mechanism.
#[derive(Debug)]
pub struct OrderedPolicy {
    order: JobOrder,
    round: Option<SimDuration>,
    /// Reused between calls so that scheduling allocates nothing in the steady state.
    ranked: Vec<(f64, u64, u64, u32, usize)>,
    /// The queued jobs, kept between calls when the driver reports changes.
    queue: Option<Queue>,
    /// Re-plan scratch, by job index: selected this round (cleared after each re-plan).
    picked: Vec<bool>,
    /// LAS's, SRTF's and FTF's running jobs, kept between calls when the driver reports changes.
    running: Option<RunningJobs>,
    /// Re-plan scratch: running jobs ranked after the first queued job that may displace one.
    tail: Vec<(Rank, u32, u32)>,
    /// Re-plan scratch: the starts of selected queued jobs, decided before the preemptions
    /// that must precede them.
    starts: Vec<Action>,
    /// Re-plan scratch: the queued jobs selected, and the places in `RunningJobs::running` of
    /// the running ones not selected.
    picked_queued: Vec<u32>,
    unpicked: Vec<u32>,
}

impl OrderedPolicy {
    /// A policy ranking by `order`, re-planning every `round` (or every event if `None`).
    pub fn new(order: JobOrder, round: Option<SimDuration>) -> OrderedPolicy {
        OrderedPolicy {
            order,
            round,
            ranked: Vec::new(),
            queue: None,
            picked: Vec::new(),
            running: None,
            tail: Vec::new(),
            starts: Vec::new(),
            picked_queued: Vec::new(),
            unpicked: Vec::new(),
        }
    }

    /// Whether the scheduling point re-plans who runs (preemptive orders, at every point or
    /// at their rounds) rather than only starting waiting jobs.
    fn replans_at(&self, trigger: &Trigger) -> bool {
        self.order.preemptive() && (self.round.is_none() || trigger.round)
    }

    /// Fills free GPUs from the tracked queue: the same starts as [`fill`](Self::fill), visiting
    /// only buckets of jobs that fit in the free GPU count (which only shrinks as jobs start,
    /// and `place` refuses a job asking more GPUs than are free).
    fn fill_tracked(&self, queue: &Queue, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let free = view.state.free_gpus();
        if free == 0 || queue.smallest().is_none_or(|g| g > free) {
            return;
        }
        let mut fill = ShrinkingFill::new(IndexedLedger::new(view.cluster, view.state));
        let mut free = fill.free_gpus();
        let mut heads = bucket_heads(queue, free);
        while free > 0 {
            let Some(b) = best_head(&heads, free) else {
                break;
            };
            let Some((_, _, id)) = advance(&mut heads[b]) else {
                break;
            };
            let job = JobId(id);
            let Some(demand) = queue.demand(id, view.jobs) else {
                continue;
            };
            if fill.start(job, demand, actions) {
                free = fill.free_gpus();
            }
        }
    }

    /// Ranks `view.active` into `self.ranked` as (key, exact key, submit, id, index), best
    /// first.
    fn rank(&mut self, view: &ClusterView<'_>, only_queued: bool) {
        self.ranked.clear();
        for (i, job) in view.active.iter().enumerate() {
            if only_queued && job.state != JobState::Queued {
                continue;
            }
            let Some(spec) = view.spec(job) else { continue };
            let key = self.order.key(view, job, spec);
            self.ranked.push((
                key,
                self.order.exact_key(job),
                spec.submit.as_micros(),
                job.id.0,
                i,
            ));
        }
        self.ranked.sort_unstable_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
        });
    }

    fn fill(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let mut ledger = Ledger::new(view.cluster, view.free);
        if ledger.free_gpus() == 0 {
            return;
        }
        self.rank(view, true);
        for &(_, _, _, _, i) in &self.ranked {
            if ledger.free_gpus() == 0 {
                break;
            }
            let job = &view.active[i];
            let Some(spec) = view.spec(job) else { continue };
            if let Some(allocation) = ledger.place(spec) {
                actions.push(Action::Start {
                    job: job.id,
                    allocation,
                });
            }
        }
    }

    /// [`replan`](Self::replan) over the tracked queue: only running jobs are ranked now (their
    /// keys moved while they ran); queued ones are already in order. The same five steps, in
    /// the same order, visiting queued jobs only while they can fit in the GPU budget (which
    /// only shrinks), so the decisions are those of ranking everything.
    fn replan_tracked(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let Some(queue) = self.queue.take() else {
            return;
        };
        // Running jobs, ranked by their current keys: (key, submit, id, index in active).
        self.ranked.clear();
        for (i, job) in view.active.iter().enumerate() {
            if job.state != JobState::Running {
                continue;
            }
            let Some(spec) = view.spec(job) else { continue };
            let key = match self.order {
                JobOrder::Ftf => ordered_bits(self.order.key(view, job, spec)),
                _ => self.order.live_key(job),
            };
            self.ranked
                .push((0.0, key, spec.submit.as_micros(), job.id.0, i));
        }
        self.ranked
            .sort_unstable_by_key(|&(_, key, submit, id, _)| (key, submit, id));
        if self.picked.len() < view.jobs.len() {
            self.picked.resize(view.jobs.len(), false);
        }

        // 1. Select by priority within the GPU capacity: merge running and queued in rank
        //    order, skipping what exceeds the remaining budget.
        //    (Each job is taken or passed over in rank order, so a running job that does not
        //    fit is passed over where it ranks.)
        let mut budget = TypeBudget::new(view.cluster);
        let mut picked_queued: Vec<u32> = Vec::new();
        let mut heads = bucket_heads(&queue, budget.most());
        let mut best = BestHead::default();
        let mut next_running = 0;
        loop {
            let running_head = self
                .ranked
                .get(next_running)
                .map(|&(_, k, sub, id, i)| ((k, sub, id), i));
            let queued = best.get(&heads, budget.most());
            let take_running = match (running_head, queued) {
                (Some((r, _)), Some(q)) => r < heads[q].2.unwrap_or(r),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let fits = if take_running {
                next_running += 1;
                let Some((r, i)) = running_head else { break };
                let job = &view.active[i];
                view.spec(job)
                    .filter(|spec| budget.take(view.cluster, job, spec))
                    .map(|_| r.2)
            } else {
                best.taken();
                let Some(id) = queued.and_then(|q| advance(&mut heads[q])).map(|r| r.2) else {
                    break;
                };
                queue
                    .demand(id, view.jobs)
                    .filter(|d| budget.take_queued(d.gpu_types, d.gpus))
                    .map(|_| id)
            };
            let Some(id) = fits else { continue };
            self.picked[id as usize] = true;
            if !take_running {
                picked_queued.push(id);
            }
        }

        // 2. Release what unselected running jobs hold.
        let mut ledger = IndexedLedger::new(view.cluster, view.state);
        for &(_, _, _, id, i) in &self.ranked {
            if let (false, Some(a)) = (self.picked[id as usize], &view.active[i].allocation) {
                ledger.release(a);
            }
        }
        // 3. Start the selected queued jobs in priority order.
        for &id in &picked_queued {
            let job = JobId(id);
            if let Some(allocation) = queue.demand(id, view.jobs).and_then(|d| ledger.place(d)) {
                actions.push(Action::Start { job, allocation });
            }
        }
        // 4. Unselected running jobs keep their GPUs where still free; the rest are preempted.
        let mut preempt = Vec::new();
        for &(_, _, _, id, i) in &self.ranked {
            let job = &view.active[i];
            if let (false, Some(a)) = (self.picked[id as usize], &job.allocation) {
                if !ledger.reserve(a) {
                    preempt.push(Action::Preempt { job: job.id });
                }
            }
        }
        actions.splice(0..0, preempt);
        // 5. Backfill with unselected queued jobs in priority order.
        let mut backfill = ShrinkingFill::new(ledger);
        let mut free = backfill.free_gpus();
        drop(heads); // borrows `queue`
        let mut heads = bucket_heads(&queue, free);
        while free > 0 {
            let Some(q) = best_head(&heads, free) else {
                break;
            };
            let Some((_, _, id)) = advance(&mut heads[q]) else {
                break;
            };
            if self.picked[id as usize] {
                continue;
            }
            let job = JobId(id);
            let Some(demand) = queue.demand(id, view.jobs) else {
                continue;
            };
            if backfill.start(job, demand, actions) {
                free = backfill.free_gpus();
            }
        }

        for &(_, _, _, id, _) in &self.ranked {
            self.picked[id as usize] = false;
        }
        for id in picked_queued {
            self.picked[id as usize] = false;
        }
        drop((heads, backfill)); // borrow `queue`
        self.queue = Some(queue);
    }

    /// LAS's, SRTF's and FTF's re-plan over the tracked queue and running jobs: the same five steps
    /// and the same decisions as [`replan_tracked`](Self::replan_tracked), without bringing
    /// any running job up to date or ranking all of them (each running job's key at any
    /// instant follows from what was kept at its start: see [`RunningJobs`]).
    ///
    /// Selection walks running and queued jobs in rank order, taking each that fits in what
    /// is left of the GPU capacity. While the queued jobs taken so far fit in the capacity the
    /// running ones leave (the slack), every running job is sure to be taken wherever it
    /// ranks, so only queued jobs are visited. From the first queued job that does not fit the
    /// slack on, the walk is done exactly, over the running jobs ranked after it.
    fn replan_running(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let (Some(queue), Some(run)) = (self.queue.take(), self.running.take()) else {
            return;
        };
        if self.picked.len() < view.jobs.len() {
            self.picked.resize(view.jobs.len(), false);
        }
        let capacity = view.cluster.total_gpus();
        let asked = run.asked as i128;
        let mut slack = capacity as i128 - asked;
        let mut picked_queued = std::mem::take(&mut self.picked_queued);
        let mut unpicked = std::mem::take(&mut self.unpicked);
        picked_queued.clear();
        unpicked.clear();
        let budget = TypeBudget::new(view.cluster);
        let typed = !budget.single();
        let mut heads = bucket_heads(&queue, if typed { 0 } else { capacity });
        // Where the exact walk starts: after this rank (from the top for `Some(None)`).
        let mut exact_after: Option<Option<Rank>> = None;
        if typed {
            // Several GPU models: the selection below, by model, from the top.
            self.select_typed(
                view,
                &queue,
                &run,
                budget,
                &mut picked_queued,
                &mut unpicked,
            );
        } else if slack < 0 {
            exact_after = Some(None);
        } else {
            // The capacity left by what was taken so far bounds every later budget.
            while let Some(q) = best_head(&heads, u64::try_from(slack + asked).unwrap_or(0)) {
                let (g, _, head) = heads[q];
                if g as i128 > slack {
                    exact_after = Some(head);
                    break;
                }
                let Some((_, _, id)) = advance(&mut heads[q]) else {
                    break;
                };
                slack -= g as i128;
                self.picked[id as usize] = true;
                picked_queued.push(id);
            }
        }
        if let Some(after) = exact_after {
            let mut tail = std::mem::take(&mut self.tail);
            run.ranked_after(after, view.now, queue.fair.as_deref(), &mut tail);
            let tail_asked: i128 = tail.iter().map(|&(_, g, _)| g as i128).sum();
            let mut left = tail_asked;
            let mut budget = u64::try_from(slack + tail_asked).unwrap_or(0);
            let mut next = 0;
            let mut best = BestHead::default();
            loop {
                while let Some(&(_, g, place)) = tail.get(next) {
                    if g as u64 <= budget {
                        break;
                    }
                    unpicked.push(place);
                    left -= g as i128;
                    next += 1;
                }
                let queued = best.get(&heads, budget);
                let running = tail.get(next).copied();
                if queued.is_none() && left <= budget as i128 {
                    break; // every running job left fits: all are taken
                }
                let take_running = match (running, queued) {
                    (Some((r, _, _)), Some(q)) => heads[q].2.is_none_or(|h| r < h),
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (None, None) => break,
                };
                if take_running {
                    let g = running.map_or(0, |(_, g, _)| g as u64);
                    budget -= g;
                    left -= g as i128;
                    next += 1;
                } else {
                    best.taken();
                    let Some(q) = queued else { break };
                    // The bucket's GPU count is the job's: its spec, a cache miss per job
                    // on a deep queue, is not read.
                    let g = heads[q].0;
                    let Some((_, _, id)) = advance(&mut heads[q]) else {
                        break;
                    };
                    budget -= g;
                    self.picked[id as usize] = true;
                    picked_queued.push(id);
                }
            }
            self.tail = tail;
        }

        if picked_queued.is_empty() && unpicked.is_empty() {
            // Nothing selected changes hands: what is left is the backfill, a plain fill.
            self.fill_tracked(&queue, view, actions);
        } else {
            // 2. Release what unselected running jobs hold.
            let mut ledger = IndexedLedger::new(view.cluster, view.state);
            for a in unpicked.iter().filter_map(|&p| run.held.get(p as usize)) {
                ledger.release(a);
            }
            // 3. Start the selected queued jobs in priority order (kept aside: they follow
            //    the preemptions).
            let mut starts = std::mem::take(&mut self.starts);
            starts.clear();
            for (k, &id) in picked_queued.iter().enumerate() {
                // Each job's demand is named in its slot, scattered on a deep queue: asked
                // for a few placements ahead.
                if let Some(later) = picked_queued.get(k + 4) {
                    queue.prefetch_slot(*later);
                }
                let job = JobId(id);
                if let Some(allocation) = queue.demand(id, view.jobs).and_then(|d| ledger.place(d))
                {
                    starts.push(Action::Start { job, allocation });
                }
            }
            // 4. Unselected running jobs keep their GPUs where still free; the rest are
            //    preempted (first, so that the starts that needed their GPUs are valid).
            let first_preempt = actions.len();
            for &p in &unpicked {
                if let (Some(e), Some(a)) = (run.running.get(p as usize), run.held.get(p as usize))
                {
                    if !ledger.reserve(a) {
                        actions.push(Action::Preempt { job: JobId(e.id) });
                    }
                }
            }
            // Before anything already decided (nothing, as the drivers call).
            let preempted = actions.len() - first_preempt;
            actions.rotate_right(preempted);
            actions.append(&mut starts);
            self.starts = starts;
            // 5. Backfill with unselected queued jobs in priority order.
            let mut backfill = ShrinkingFill::new(ledger);
            let mut free = backfill.free_gpus();
            let mut heads = bucket_heads(&queue, free);
            while free > 0 {
                let Some(q) = best_head(&heads, free) else {
                    break;
                };
                let Some((_, _, id)) = advance(&mut heads[q]) else {
                    break;
                };
                if self.picked[id as usize] {
                    continue;
                }
                let job = JobId(id);
                let Some(demand) = queue.demand(id, view.jobs) else {
                    continue;
                };
                if backfill.start(job, demand, actions) {
                    free = backfill.free_gpus();
                }
            }
        }
        for &id in &picked_queued {
            self.picked[id as usize] = false;
        }
        self.picked_queued = picked_queued;
        self.unpicked = unpicked;
        drop(heads); // borrows `queue`
        self.queue = Some(queue);
        self.running = Some(run);
    }

    /// Step 1 of [`replan_running`](Self::replan_running) on a cluster of several GPU models:
    /// every running and queued job in rank order, each taken when the models it can use
    /// have its GPUs left ([`TypeBudget`]). Queued jobs selected go to `picked_queued` (and
    /// are marked in `picked`), the places of running jobs not selected to `unpicked`.
    fn select_typed(
        &mut self,
        view: &ClusterView<'_>,
        queue: &Queue,
        run: &RunningJobs,
        mut budget: TypeBudget,
        picked_queued: &mut Vec<u32>,
        unpicked: &mut Vec<u32>,
    ) {
        let mut tail = std::mem::take(&mut self.tail);
        run.ranked_after(None, view.now, queue.fair.as_deref(), &mut tail);
        let mut heads = bucket_heads(queue, budget.most());
        let mut best = BestHead::default();
        let mut next = 0;
        loop {
            let queued = best.get(&heads, budget.most());
            let running = tail.get(next).copied();
            let take_running = match (running, queued) {
                (Some((r, _, _)), Some(q)) => heads[q].2.is_none_or(|h| r < h),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_running {
                let Some((_, g, place)) = running else { break };
                next += 1;
                let held = run.held.get(place as usize);
                if !held.is_some_and(|a| budget.take_held(view.cluster, a, g)) {
                    unpicked.push(place);
                }
            } else {
                best.taken();
                let Some(q) = queued else { break };
                let Some((_, _, id)) = advance(&mut heads[q]) else {
                    break;
                };
                let fits = queue
                    .demand(id, view.jobs)
                    .is_some_and(|d| budget.take_queued(d.gpu_types, d.gpus));
                if fits {
                    self.picked[id as usize] = true;
                    picked_queued.push(id);
                }
            }
        }
        self.tail = tail;
    }

    fn replan(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        self.rank(view, false);
        let mut budget = TypeBudget::new(view.cluster);
        let mut selected = vec![false; self.ranked.len()];
        for (r, &(_, _, _, _, i)) in self.ranked.iter().enumerate() {
            let job = &view.active[i];
            let Some(spec) = view.spec(job) else {
                continue;
            };
            selected[r] = budget.take(view.cluster, job, spec);
        }

        let mut ledger = Ledger::new(view.cluster, view.free);
        for (r, &(_, _, _, _, i)) in self.ranked.iter().enumerate() {
            if let (false, Some(a)) = (selected[r], &view.active[i].allocation) {
                ledger.release(a);
            }
        }
        let mut preempt = Vec::new();
        let start = |ledger: &mut Ledger<'_>, i: usize, actions: &mut Vec<Action>| {
            let job = &view.active[i];
            if let Some(allocation) = view.spec(job).and_then(|s| ledger.place(s)) {
                actions.push(Action::Start {
                    job: job.id,
                    allocation,
                });
            }
        };
        for (r, &(_, _, _, _, i)) in self.ranked.iter().enumerate() {
            if selected[r] && view.active[i].state == JobState::Queued {
                start(&mut ledger, i, actions);
            }
        }
        for (r, &(_, _, _, _, i)) in self.ranked.iter().enumerate() {
            let job = &view.active[i];
            if let (false, Some(a)) = (selected[r], &job.allocation) {
                if !ledger.reserve(a) {
                    preempt.push(Action::Preempt { job: job.id });
                }
            }
        }
        // Preemptions go first so that the starts that needed their resources are valid.
        actions.splice(0..0, preempt);
        for (r, &(_, _, _, _, i)) in self.ranked.iter().enumerate() {
            if !selected[r] && view.active[i].state == JobState::Queued {
                if ledger.free_gpus() == 0 {
                    break;
                }
                start(&mut ledger, i, actions);
            }
        }
    }
}

impl Policy for OrderedPolicy {
    fn name(&self) -> &str {
        self.order.name()
    }

    /// MIG and share requests get a whole GPU here, so they wait as whole GPUs do; the jobs
    /// ahead are those before it in this policy's order (key, then submission, then id).
    fn pending_reason(
        &self,
        view: &ClusterView<'_>,
        job: &TrainingJob,
        detail: Detail,
    ) -> Option<Waiting> {
        let waiting = Waiting::new(reasons::classify_whole(view, job));
        if detail == Detail::Kind {
            return Some(waiting);
        }
        let key = |a: &ActiveJob, s: &TrainingJob| {
            (
                self.order.key(view, a, s),
                self.order.exact_key(a),
                s.submit,
                a.id,
            )
        };
        let order = self.order.name();
        let mut waiting = if waiting.kind == reasons::WaitKind::Order {
            waiting.note(detail, || format!("{order} order"))
        } else {
            waiting
        };
        // A job the view does not show yet (a driver that has not made a decision since it
        // was submitted) has no place in the order to count.
        if let Some(mine) = view
            .active
            .iter()
            .find(|a| a.id == job.id)
            .map(|a| key(a, job))
        {
            let ahead = view
                .active
                .iter()
                .filter(|a| a.state == JobState::Queued && a.id != job.id)
                .filter_map(|a| view.spec(a).map(|s| key(a, s)))
                .filter(|k| k.partial_cmp(&mine) == Some(std::cmp::Ordering::Less))
                .count() as u32;
            waiting = waiting.ahead(ahead);
        }
        Some(waiting)
    }

    fn round_length(&self) -> Option<SimDuration> {
        self.round
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let replan_now = self.replans_at(&view.trigger);
        if let Some(queue) = &mut self.queue {
            if !replan_now {
                if let Some(rank) = queue.lone_arrival() {
                    // The only job waiting: the fill would start it where it fits first.
                    if !start_lone(view, JobId(rank.2), actions) {
                        queue.file_fresh();
                    }
                    return;
                }
            }
            queue.file_fresh();
            // A re-plan reads every bucket; a fill only those that fit in what is free.
            let limit = if replan_now {
                u64::MAX
            } else {
                view.state.free_gpus()
            };
            queue.advance(view.now, limit);
        }
        if replan_now && self.running.as_ref().is_some_and(RunningJobs::keys_known) {
            self.replan_running(view, actions);
        } else if replan_now && self.queue.is_some() {
            self.replan_tracked(view, actions);
        } else if replan_now {
            self.replan(view, actions);
        } else if let Some(queue) = &self.queue {
            self.fill_tracked(queue, view, actions);
        } else {
            self.fill(view, actions);
        }
    }

    fn track_jobs(&mut self) -> bool {
        let mut queue = Queue::default();
        match self.order {
            JobOrder::Las => self.running = Some(RunningJobs::default()),
            JobOrder::Srtf => self.running = Some(RunningJobs::by_remaining_work()),
            JobOrder::Ftf => {
                queue.fair = Some(Box::default());
                self.running = Some(RunningJobs::by_remaining_work());
            }
            JobOrder::Fifo => {}
        }
        self.queue = Some(queue);
        true
    }

    fn observe(&mut self, change: JobChange<'_>) {
        let Some(queue) = &mut self.queue else { return };
        match change {
            JobChange::Arrived(job, spec) => {
                queue.note_fairness(job, spec);
                queue.arrive(self.order, job, spec)
            }
            JobChange::Preempted(job, spec) => {
                queue.note_fairness(job, spec);
                // LAS, SRTF and FTF know the job's GPUs and submission from when it started:
                // its spec is read only to note its demand (once per job) and FTF's times.
                match self
                    .running
                    .as_mut()
                    .and_then(|run| run.stop(&mut queue.slots, job.id))
                {
                    Some(e) => {
                        queue.note_demand(job.id, spec);
                        queue.insert_known(self.order, job, e.asked, e.submit)
                    }
                    None => queue.insert(self.order, job, spec),
                }
            }
            JobChange::Started(job, spec) => {
                // A job started from the queue: its entry knows its GPUs and submission, and
                // its spec (a cold line on a loaded cluster) is not read, but by FTF, for a
                // job a driver shows running before it was seen waiting (the daemon's
                // recovery), whose isolated time ranks it.
                queue.note_fairness(job, spec);
                let known = queue.remove(job.id);
                debug_assert!(
                    known.is_none_or(|k| k == (spec.gpus, spec.submit.as_micros())),
                    "a queue entry keeps its job's GPUs and submission"
                );
                if let Some(run) = &mut self.running {
                    let (asked, submit) =
                        known.unwrap_or_else(|| (spec.gpus, spec.submit.as_micros()));
                    run.start(&mut queue.slots, job, asked, submit);
                }
            }
            JobChange::Ended(job) => {
                queue.remove(job);
                if let Some(run) = &mut self.running {
                    run.stop(&mut queue.slots, job);
                }
            }
            JobChange::Progress(job, line) => {
                if let Some(run) = &mut self.running {
                    run.set_line(&queue.slots, job, line);
                }
            }
        }
    }

    /// SRTF and FTF rank running jobs by the remaining work their progress lines give.
    fn follows_progress(&self) -> bool {
        matches!(self.order, JobOrder::Srtf | JobOrder::Ftf)
    }

    fn expect_change(&self, job: JobId) {
        let Some(queue) = &self.queue else { return };
        queue.prefetch_slot(job.0);
        // A stop moves LAS's last running job into the freed place, and updates its slot.
        if let Some(last) = self.running.as_ref().and_then(|run| run.running.last()) {
            queue.prefetch_slot(last.id);
        }
    }

    /// Everything kept between calls is keyed by job id in order-keeping structures (the
    /// map keeps the order of ids, so every rank keeps its place); the rest is scratch.
    fn renumber_jobs(&mut self, map: &[Option<JobId>]) -> bool {
        if let Some(queue) = &mut self.queue {
            queue.renumber(map);
            if let Some(run) = &mut self.running {
                run.renumber(&mut queue.slots, map);
            }
        }
        self.ranked.clear();
        self.picked.clear();
        self.tail.clear();
        self.picked_queued.clear();
        self.unpicked.clear();
        true
    }

    /// FIFO never reads progress, nor do LAS, SRTF and FTF over their tracked running jobs
    /// once they can compute every running job's key themselves (LAS's attained service,
    /// SRTF's and FTF's remaining work from progress lines). The others read it when they
    /// re-plan.
    fn reads_running_progress(&self, trigger: &Trigger) -> bool {
        self.order.preemptive()
            && self.running.as_ref().is_none_or(|run| !run.keys_known())
            && (self.round.is_none() || trigger.round)
    }

    /// Between re-plans only waiting jobs can start: a tracked queue with none decides
    /// nothing (the untracked path cannot tell without the view).
    fn may_act(&self, trigger: &Trigger) -> bool {
        self.replans_at(trigger) || self.queue.as_ref().is_none_or(|q| !q.nothing_waiting())
    }
}
