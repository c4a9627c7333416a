//! Time waited per reason ([`WaitKind`]), for `jobs.csv`.
//!
//! A reason's kind follows from a job's request and the view (see
//! [`tessera_sched::reasons`]), so jobs are grouped by request shape: at each decision point
//! the engine asks the reason once per shape with jobs waiting, and each shape keeps a clock
//! per kind (µs spent in it since the run began). A job waiting in the queue notes its shape's
//! clocks; leaving, it is charged the difference. Per decision point this costs O(shapes with
//! jobs waiting), not O(jobs waiting).
//!
//! Most jobs leave the queue at the instant they enter it (an arrival on a cluster with
//! room): they are charged nothing, so they get no shape and no clocks. A job entering the
//! queue is only listed as *fresh*, with the instant; the next decision point (at the same
//! instant: every arrival, preemption or interruption is followed by one) gives the fresh
//! jobs still waiting their shape and the clocks their shape had at that instant. No kind
//! changes between the two (only a decision point changes a shape's kind), so each job is
//! charged exactly what it would have been had it noted its clocks on entering. Only jobs that
//! waited past an instant (or were profiled) have a record.

use std::collections::HashMap;

use tessera_model::{JobId, SimTime, TrainingJob};
use tessera_sched::reasons::RequestShape;
use tessera_sched::{ClusterView, Detail, Policy, WaitKind};

const KINDS: usize = WaitKind::COUNT;

/// One request shape's clocks.
#[derive(Clone, Debug)]
struct ShapeClock {
    /// The shape.
    shape: RequestShape,
    /// A job of the shape (whose spec the policy is asked about).
    example: JobId,
    /// Its jobs waiting now.
    waiting: u32,
    /// Position in [`WaitClocks::live`] while `waiting > 0`.
    live_pos: u32,
    /// The kind since `since`.
    kind: WaitKind,
    since: SimTime,
    /// µs spent per kind up to `since`.
    spent: [u64; KINDS],
}

impl ShapeClock {
    /// µs spent per kind up to `now`.
    fn at(&self, now: SimTime) -> [u64; KINDS] {
        let mut s = self.spent;
        s[self.kind.index()] += now.saturating_since(self.since).as_micros();
        s
    }
}

/// [`JobWaits::shape`] before the job is given one (a record made by profiling).
const NO_SHAPE: u32 = u32::MAX;

/// A job that waited past an instant, or was profiled.
#[derive(Clone, Debug)]
struct JobWaits {
    job: JobId,
    /// Its shape (looked up once per job), or [`NO_SHAPE`].
    shape: u32,
    /// The clocks it noted on entering the queue, while it waits.
    entered: Option<[u64; KINDS]>,
    /// µs waited per kind, up to its last departure.
    waited: [u64; KINDS],
}

/// [`WaitClocks::record_of`]: no record and not waiting.
const NO_RECORD: u32 = 0;
/// [`WaitClocks::record_of`]: waiting, listed in [`WaitClocks::fresh`], no record yet.
const FRESH: u32 = u32::MAX;

/// How many of the latest fresh entries a departure looks through to drop its own (the job
/// that just arrived is the last one); an entry not found stays, and is skipped later.
const FRESH_SCAN: usize = 8;

/// The engine's record of time waited per reason.
#[derive(Debug, Default)]
pub(crate) struct WaitClocks {
    /// Jobs in the run.
    jobs: usize,
    shapes: Vec<ShapeClock>,
    /// Shapes by [`RequestShape::fingerprint`] (those sharing one are told apart by
    /// [`RequestShape::matches`]): a lookup allocates nothing.
    by_fingerprint: HashMap<u64, Vec<u32>>,
    /// Shapes with jobs waiting.
    live: Vec<u32>,
    /// Jobs that entered the queue since the last decision point with no record, and when
    /// (entries of jobs that left since are skipped: their `record_of` is not [`FRESH`]).
    fresh: Vec<(JobId, SimTime)>,
    /// Per job index: 1 + its position in `records`, [`FRESH`] or [`NO_RECORD`]. Four bytes
    /// a job, zero-filled (pages the run never touches are never mapped).
    record_of: Vec<u32>,
    records: Vec<JobWaits>,
    /// Jobs being profiled, since when.
    profiling: HashMap<u32, SimTime>,
}

impl WaitClocks {
    pub(crate) fn new(jobs: usize) -> WaitClocks {
        WaitClocks {
            jobs,
            record_of: vec![NO_RECORD; jobs],
            ..WaitClocks::default()
        }
    }

    /// `job`'s shape, added (at `now`) if new.
    fn shape_of(&mut self, job: &TrainingJob, now: SimTime) -> u32 {
        let candidates = self
            .by_fingerprint
            .entry(RequestShape::fingerprint(job))
            .or_default();
        if let Some(found) = candidates
            .iter()
            .copied()
            .find(|&c| self.shapes[c as usize].shape.matches(job))
        {
            return found;
        }
        let next = self.shapes.len() as u32;
        candidates.push(next);
        self.shapes.push(ShapeClock {
            shape: RequestShape::of(job),
            example: job.id,
            waiting: 0,
            live_pos: 0,
            // Reclassified at the decision point of this instant, before any time passes.
            kind: WaitKind::Order,
            since: now,
            spent: [0; KINDS],
        });
        next
    }

    /// The record of `job` (made if it has none), by position.
    fn record(&mut self, job: JobId) -> usize {
        let i = job.index();
        match self.record_of[i] {
            NO_RECORD | FRESH => {
                self.records.push(JobWaits {
                    job,
                    shape: NO_SHAPE,
                    entered: None,
                    waited: [0; KINDS],
                });
                self.record_of[i] = self.records.len() as u32;
                self.records.len() - 1
            }
            r => r as usize - 1,
        }
    }

    /// Record `r`'s job waits from `since`: it notes its shape's clocks then.
    fn start_waiting(&mut self, r: usize, spec: &TrainingJob, since: SimTime) {
        let shape = match self.records[r].shape {
            NO_SHAPE => {
                let s = self.shape_of(spec, since);
                self.records[r].shape = s;
                s
            }
            s => s,
        };
        let clock = &mut self.shapes[shape as usize];
        if clock.waiting == 0 {
            clock.live_pos = self.live.len() as u32;
            self.live.push(shape);
        }
        clock.waiting += 1;
        self.records[r].entered = Some(clock.at(since));
    }

    /// `job` enters the queue at `now` (arrived, preempted, interrupted).
    pub(crate) fn enqueue(&mut self, job: &TrainingJob, now: SimTime) {
        let i = job.id.index();
        let Some(&state) = self.record_of.get(i) else {
            return;
        };
        match state {
            NO_RECORD => {
                self.record_of[i] = FRESH;
                self.fresh.push((job.id, now));
            }
            FRESH => {}
            r => {
                let r = r as usize - 1;
                if self.records[r].entered.is_none() {
                    self.start_waiting(r, job, now);
                }
            }
        }
    }

    /// Gives the fresh jobs still waiting their record and clocks (see the module docs).
    fn settle_fresh(&mut self, jobs: &[TrainingJob]) {
        if self.fresh.is_empty() {
            return;
        }
        let fresh = std::mem::take(&mut self.fresh);
        for &(job, since) in &fresh {
            if self.record_of.get(job.index()) != Some(&FRESH) {
                continue;
            }
            let Some(spec) = jobs.get(job.index()) else {
                continue;
            };
            let r = self.record(job);
            self.start_waiting(r, spec, since);
        }
        // The allocation is kept for the next instant's arrivals.
        self.fresh = fresh;
        self.fresh.clear();
    }

    /// `job` leaves the queue at `now` (started, or the run ended): it is charged what its
    /// shape's clocks moved since it entered.
    pub(crate) fn dequeue(&mut self, job: JobId, now: SimTime, jobs: &[TrainingJob]) {
        let i = job.index();
        let Some(&state) = self.record_of.get(i) else {
            return;
        };
        let state = if state == FRESH {
            if self.fresh.first().is_none_or(|&(_, since)| since == now) {
                // Left at the instant it entered: charged nothing.
                self.record_of[i] = NO_RECORD;
                let tail = self.fresh.len().saturating_sub(FRESH_SCAN);
                if let Some(p) = self.fresh[tail..].iter().rposition(|&(j, _)| j == job) {
                    self.fresh.remove(tail + p);
                }
                return;
            }
            // Not reached by the engine (a decision point follows every instant a job
            // enters at); kept exact all the same.
            self.settle_fresh(jobs);
            self.record_of[i]
        } else {
            state
        };
        if state == NO_RECORD {
            return;
        }
        let r = state as usize - 1;
        let Some(noted) = self.records[r].entered.take() else {
            return;
        };
        let clock = &mut self.shapes[self.records[r].shape as usize];
        let at = clock.at(now);
        let waited = &mut self.records[r].waited;
        for k in 0..KINDS {
            waited[k] += at[k].saturating_sub(noted[k]);
        }
        clock.waiting -= 1;
        if clock.waiting == 0 {
            let pos = clock.live_pos as usize;
            self.live.swap_remove(pos);
            if let Some(&moved) = self.live.get(pos) {
                self.shapes[moved as usize].live_pos = pos as u32;
            }
        }
    }

    /// `job` starts being profiled at `now`.
    pub(crate) fn profiling(&mut self, job: JobId, now: SimTime) {
        self.profiling.insert(job.0, now);
    }

    /// `job`'s profiling ends at `now`.
    pub(crate) fn profiled(&mut self, job: JobId, now: SimTime) {
        if job.index() >= self.jobs {
            return;
        }
        if let Some(since) = self.profiling.remove(&job.0) {
            let r = self.record(job);
            self.records[r].waited[WaitKind::Profiling.index()] +=
                now.saturating_since(since).as_micros();
        }
    }

    /// Whether any job waits (or entered the queue since the last decision point).
    pub(crate) fn any_waiting(&self) -> bool {
        !self.live.is_empty() || !self.fresh.is_empty()
    }

    /// A decision point: the fresh jobs still waiting are given their clocks, then each shape
    /// with jobs waiting takes the reason the policy states for it, else the generic one.
    pub(crate) fn decide(&mut self, view: &ClusterView<'_>, policy: &dyn Policy) {
        self.settle_fresh(view.jobs);
        for &s in &self.live {
            let clock = &mut self.shapes[s as usize];
            let Some(job) = view.jobs.get(clock.example.index()) else {
                continue;
            };
            let kind = policy
                .pending_reason(view, job, Detail::Kind)
                .map_or_else(|| tessera_sched::reasons::classify(view, job), |w| w.kind);
            if kind != clock.kind {
                clock.spent = clock.at(view.now);
                clock.kind = kind;
                clock.since = view.now;
            }
        }
    }

    /// The run ended at `now`: jobs still waiting or being profiled are charged up to it.
    /// Returns seconds waited per kind, per job index.
    pub(crate) fn finish(mut self, now: SimTime, jobs: &[TrainingJob]) -> Vec<[f64; KINDS]> {
        self.settle_fresh(jobs);
        let open: Vec<JobId> = self
            .records
            .iter()
            .filter(|r| r.entered.is_some())
            .map(|r| r.job)
            .collect();
        for j in open {
            self.dequeue(j, now, jobs);
        }
        let mut profiling: Vec<u32> = self.profiling.keys().copied().collect();
        profiling.sort_unstable();
        for j in profiling {
            self.profiled(JobId(j), now);
        }
        // Zero-filled: only the entries of jobs that waited are written.
        let mut out = vec![[0.0; KINDS]; self.jobs];
        for r in &self.records {
            if let Some(o) = out.get_mut(r.job.index()) {
                *o = r.waited.map(|us| us as f64 / 1e6);
            }
        }
        out
    }
}
