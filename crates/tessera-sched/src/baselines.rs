//! The classic baselines (DESIGN §5.6): FIFO, SRTF, LAS and FTF job orderings over one shared
//! mechanism, with GPU-proportional CPU/memory and consolidated first-fit placement.
//!
//! FIFO never preempts: at each scheduling point it starts queued jobs in arrival order,
//! skipping those that do not fit and continuing down the list (backfill).
//!
//! The preemptive orders (SRTF, LAS, FTF) re-plan at every round boundary, or at every event
//! when no round length is set:
//! 1. walk all active jobs in priority order and select those whose GPUs fit in the cluster's
//!    GPU capacity (skipping any that do not, and continuing);
//! 2. release the allocations of running jobs that were not selected;
//! 3. start the selected queued jobs in priority order where a placement exists;
//! 4. let unselected running jobs keep their GPUs if these are still free (no needless
//!    preemption); preempt the rest;
//! 5. backfill what is left with unselected queued jobs, in priority order.
//!
//! Between rounds they only fill free resources, as FIFO does.
//!
//! Under a driver that reports changes of the active set ([`Policy::track_jobs`]), FIFO, SRTF
//! and LAS keep their queued jobs in an ordered queue between calls: a queued job's key
//! (arrival, remaining work, attained service) does not change while it waits, so it is
//! ranked once when it enters the queue, not at every scheduling point. The queue is split by
//! GPU count, so that filling visits only jobs that can fit in what is free. The decisions
//! are the same as ranking `view.active` from scratch (FTF, whose key moves with time, always
//! does).

use std::collections::{BTreeMap, BTreeSet};

use tessera_model::{JobId, SimDuration, TrainingJob};

use crate::placement::Ledger;
use crate::policy::{JobChange, Policy, PolicyInfo, PolicyOptions};
use crate::view::{Action, ActiveJob, ClusterView, JobState, Trigger};

/// The baseline policies, one per [`JobOrder`].
pub const POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "fifo",
        about: "first in, first out; non-preemptive, with backfill",
    },
    PolicyInfo {
        name: "srtf",
        about: "shortest remaining time first; preemptive",
    },
    PolicyInfo {
        name: "las",
        about: "least attained GPU-service first (Tiresias-style); preemptive",
    },
    PolicyInfo {
        name: "ftf",
        about: "finish-time fairness (Themis): largest rho first; preemptive",
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
            JobOrder::Ftf => {
                let isolated = spec.duration.as_secs_f64().max(1e-9);
                let in_system = view.now.saturating_since(spec.submit).as_secs_f64();
                -((in_system + job.remaining_secs_estimate()) / isolated)
            }
        }
    }

    /// The key of a queued job when it does not change while the job waits (everything but
    /// FTF); equal to [`key`](Self::key) at any later instant until the job starts.
    fn queued_key(self, job: &ActiveJob) -> Option<f64> {
        match self {
            JobOrder::Fifo => Some(0.0),
            JobOrder::Srtf => Some(job.remaining_secs_estimate()),
            JobOrder::Las => Some(job.attained_gpu_secs),
            JobOrder::Ftf => None,
        }
    }
}

/// An `f64` ordered by `total_cmp`, as the ranking sorts.
#[derive(Clone, Copy, Debug)]
struct Key(f64);

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A queued job's rank: (key, submit µs, id), smallest first, as [`OrderedPolicy`] sorts.
type Rank = (Key, u64, u32);

/// Queued jobs by GPU count, each bucket in rank order.
#[derive(Debug, Default)]
struct Queue {
    buckets: BTreeMap<u32, BTreeSet<Rank>>,
    /// Each queued job's (GPU count, rank), by job index.
    entries: Vec<Option<(u32, Rank)>>,
}

impl Queue {
    fn insert(&mut self, order: JobOrder, job: &ActiveJob, spec: &TrainingJob) {
        let Some(key) = order.queued_key(job) else {
            return;
        };
        self.remove(job.id);
        let rank = (Key(key), spec.submit.as_micros(), job.id.0);
        self.buckets.entry(spec.gpus).or_default().insert(rank);
        let i = job.id.index();
        if self.entries.len() <= i {
            self.entries.resize(i + 1, None);
        }
        self.entries[i] = Some((spec.gpus, rank));
    }

    fn remove(&mut self, job: JobId) {
        let Some((gpus, rank)) = self.entries.get_mut(job.index()).and_then(Option::take) else {
            return;
        };
        if let Some(bucket) = self.buckets.get_mut(&gpus) {
            bucket.remove(&rank);
            if bucket.is_empty() {
                self.buckets.remove(&gpus);
            }
        }
    }

    /// GPUs of the smallest queued job, if any.
    fn smallest(&self) -> Option<u64> {
        self.buckets.keys().next().map(|&g| g as u64)
    }
}

/// A cursor over one queue bucket: (GPU count, the rest, the head).
type Head<'q> = (
    u64,
    std::collections::btree_set::Iter<'q, Rank>,
    Option<Rank>,
);

/// Cursors over the buckets of jobs asking at most `limit` GPUs.
fn bucket_heads(queue: &Queue, limit: u64) -> Vec<Head<'_>> {
    queue
        .buckets
        .range(..=u32::try_from(limit).unwrap_or(u32::MAX))
        .map(|(&g, bucket)| {
            let mut it = bucket.iter();
            let head = it.next().copied();
            (g as u64, it, head)
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

/// Takes a cursor's head and moves it on.
fn advance(head: &mut Head<'_>) -> Option<Rank> {
    let taken = head.2;
    head.2 = head.1.next().copied();
    taken
}

/// A baseline policy: one [`JobOrder`] over the shared start/preempt mechanism.
#[derive(Debug)]
pub struct OrderedPolicy {
    order: JobOrder,
    round: Option<SimDuration>,
    /// Reused between calls so that scheduling allocates nothing in the steady state.
    ranked: Vec<(f64, u64, u32, usize)>,
    /// The queued jobs, kept between calls when the driver reports changes.
    queue: Option<Queue>,
    /// Re-plan scratch, by job index: selected this round (cleared after each re-plan).
    picked: Vec<bool>,
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
        }
    }

    /// Fills free GPUs from the tracked queue: the same starts as [`fill`](Self::fill), visiting
    /// only buckets of jobs that fit in the free GPU count (which only shrinks as jobs start,
    /// and `place` refuses a job asking more GPUs than are free).
    fn fill_tracked(&self, queue: &Queue, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let free = view.state.free_gpus();
        if free == 0 || queue.smallest().is_none_or(|g| g > free) {
            return;
        }
        let mut ledger = Ledger::from_state(view.cluster, view.state);
        let mut free = ledger.free_gpus();
        let mut heads = bucket_heads(queue, free);
        while free > 0 {
            let Some(b) = best_head(&heads, free) else {
                break;
            };
            let Some((_, _, id)) = advance(&mut heads[b]) else {
                break;
            };
            let job = JobId(id);
            let Some(spec) = view.jobs.get(job.index()) else {
                continue;
            };
            if let Some(allocation) = ledger.place(spec) {
                actions.push(Action::Start { job, allocation });
                free = ledger.free_gpus();
            }
        }
    }

    /// Ranks `view.active` into `self.ranked` as (key, submit, id, index), best first.
    fn rank(&mut self, view: &ClusterView<'_>, only_queued: bool) {
        self.ranked.clear();
        for (i, job) in view.active.iter().enumerate() {
            if only_queued && job.state != JobState::Queued {
                continue;
            }
            let Some(spec) = view.spec(job) else { continue };
            let key = self.order.key(view, job, spec);
            self.ranked
                .push((key, spec.submit.as_micros(), job.id.0, i));
        }
        self.ranked
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    }

    fn fill(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let mut ledger = Ledger::new(view.cluster, view.free);
        if ledger.free_gpus() == 0 {
            return;
        }
        self.rank(view, true);
        for &(_, _, _, i) in &self.ranked {
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
            let key = self.order.key(view, job, spec);
            self.ranked
                .push((key, spec.submit.as_micros(), job.id.0, i));
        }
        self.ranked
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        if self.picked.len() < view.jobs.len() {
            self.picked.resize(view.jobs.len(), false);
        }

        // 1. Select by priority within the GPU capacity: merge running and queued in rank
        //    order, skipping what exceeds the remaining budget.
        let (mut budget, _, _) = view.cluster.totals();
        let mut picked_queued: Vec<u32> = Vec::new();
        let mut heads = bucket_heads(&queue, budget);
        let mut next_running = 0;
        loop {
            while let Some(&(_, _, id, _)) = self.ranked.get(next_running) {
                let g = view
                    .jobs
                    .get(id as usize)
                    .map_or(u64::MAX, |s| s.gpus as u64);
                if g <= budget {
                    break;
                }
                next_running += 1;
            }
            let running_head = self
                .ranked
                .get(next_running)
                .map(|&(k, sub, id, _)| (Key(k), sub, id));
            let queued = best_head(&heads, budget);
            let take_running = match (running_head, queued) {
                (Some(r), Some(q)) => r < heads[q].2.unwrap_or(r),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let id = if take_running {
                next_running += 1;
                running_head.map(|r| r.2)
            } else {
                queued.and_then(|q| advance(&mut heads[q])).map(|r| r.2)
            };
            let Some(id) = id else { break };
            let Some(spec) = view.jobs.get(id as usize) else {
                continue;
            };
            budget -= spec.gpus as u64;
            self.picked[id as usize] = true;
            if !take_running {
                picked_queued.push(id);
            }
        }

        // 2. Release what unselected running jobs hold.
        let mut ledger = Ledger::from_state(view.cluster, view.state);
        for &(_, _, id, i) in &self.ranked {
            if let (false, Some(a)) = (self.picked[id as usize], &view.active[i].allocation) {
                ledger.release(a);
            }
        }
        // 3. Start the selected queued jobs in priority order.
        for &id in &picked_queued {
            let job = JobId(id);
            if let Some(allocation) = view.jobs.get(job.index()).and_then(|s| ledger.place(s)) {
                actions.push(Action::Start { job, allocation });
            }
        }
        // 4. Unselected running jobs keep their GPUs where still free; the rest are preempted.
        let mut preempt = Vec::new();
        for &(_, _, id, i) in &self.ranked {
            let job = &view.active[i];
            if let (false, Some(a)) = (self.picked[id as usize], &job.allocation) {
                if !ledger.reserve(a) {
                    preempt.push(Action::Preempt { job: job.id });
                }
            }
        }
        actions.splice(0..0, preempt);
        // 5. Backfill with unselected queued jobs in priority order.
        let mut free = ledger.free_gpus();
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
            if let Some(allocation) = view.jobs.get(job.index()).and_then(|s| ledger.place(s)) {
                actions.push(Action::Start { job, allocation });
                free = ledger.free_gpus();
            }
        }

        for &(_, _, id, _) in &self.ranked {
            self.picked[id as usize] = false;
        }
        for id in picked_queued {
            self.picked[id as usize] = false;
        }
        self.queue = Some(queue);
    }

    fn replan(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        self.rank(view, false);
        let (total_gpus, _, _) = view.cluster.totals();
        let mut budget = total_gpus;
        let mut selected = vec![false; self.ranked.len()];
        for (r, &(_, _, _, i)) in self.ranked.iter().enumerate() {
            let Some(spec) = view.spec(&view.active[i]) else {
                continue;
            };
            if spec.gpus as u64 <= budget {
                budget -= spec.gpus as u64;
                selected[r] = true;
            }
        }

        let mut ledger = Ledger::new(view.cluster, view.free);
        for (r, &(_, _, _, i)) in self.ranked.iter().enumerate() {
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
        for (r, &(_, _, _, i)) in self.ranked.iter().enumerate() {
            if selected[r] && view.active[i].state == JobState::Queued {
                start(&mut ledger, i, actions);
            }
        }
        for (r, &(_, _, _, i)) in self.ranked.iter().enumerate() {
            let job = &view.active[i];
            if let (false, Some(a)) = (selected[r], &job.allocation) {
                if !ledger.reserve(a) {
                    preempt.push(Action::Preempt { job: job.id });
                }
            }
        }
        // Preemptions go first so that the starts that needed their resources are valid.
        actions.splice(0..0, preempt);
        for (r, &(_, _, _, i)) in self.ranked.iter().enumerate() {
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

    fn round_length(&self) -> Option<SimDuration> {
        self.round
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let replan_now = self.order.preemptive() && (self.round.is_none() || view.trigger.round);
        if replan_now && self.queue.is_some() {
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
        if self.order == JobOrder::Ftf {
            return false;
        }
        self.queue = Some(Queue::default());
        true
    }

    fn observe(&mut self, change: JobChange<'_>) {
        let Some(queue) = &mut self.queue else { return };
        match change {
            JobChange::Arrived(job, spec) | JobChange::Preempted(job, spec) => {
                queue.insert(self.order, job, spec)
            }
            JobChange::Started(job) | JobChange::Ended(job) => queue.remove(job),
        }
    }

    /// FIFO never reads progress. The preemptive orders read running jobs' progress only
    /// when they re-plan, but keep it synced at every scheduling point: attained service and
    /// remaining work are floating-point sums over the intervals between syncs, and summing
    /// over other intervals would break exact ties differently (pinned by
    /// `tessera-mechanisms/tests/engine_pin.rs`).
    fn reads_running_progress(&self, _trigger: &Trigger) -> bool {
        self.order.preemptive()
    }
}
