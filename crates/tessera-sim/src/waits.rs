//! Time waited per reason ([`WaitKind`]), for `jobs.csv`.
//!
//! A reason's kind follows from a job's request and the view (see
//! [`tessera_sched::reasons`]), so jobs are grouped by request shape: at each decision point
//! the engine asks the reason once per shape with jobs waiting, and each shape keeps a clock
//! per kind (µs spent in it since the run began). A job entering the queue notes its shape's
//! clocks; leaving, it is charged the difference. Per decision point this costs O(shapes with
//! jobs waiting), not O(jobs waiting).

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

const NO_SHAPE: u32 = u32::MAX;

/// The engine's record of time waited per reason.
#[derive(Debug, Default)]
pub(crate) struct WaitClocks {
    shapes: Vec<ShapeClock>,
    /// Shapes by [`RequestShape::fingerprint`] (those sharing one are told apart by
    /// [`RequestShape::matches`]): an arrival's lookup allocates nothing.
    by_fingerprint: HashMap<u64, Vec<u32>>,
    /// Each job's shape, by job index (`NO_SHAPE` before it first waits).
    shape_of: Vec<u32>,
    /// Shapes with jobs waiting.
    live: Vec<u32>,
    /// The clocks each waiting job noted on entering the queue, by job index (`None`: not
    /// waiting).
    entered: Vec<Option<[u64; KINDS]>>,
    /// Jobs being profiled, since when.
    profiling: HashMap<u32, SimTime>,
    /// µs waited per kind, per job index.
    waited: Vec<[u64; KINDS]>,
}

impl WaitClocks {
    pub(crate) fn new(jobs: usize) -> WaitClocks {
        WaitClocks {
            shape_of: vec![NO_SHAPE; jobs],
            entered: vec![None; jobs],
            waited: vec![[0; KINDS]; jobs],
            ..WaitClocks::default()
        }
    }

    /// `job` enters the queue at `now` (arrived, preempted, interrupted).
    pub(crate) fn enqueue(&mut self, job: &TrainingJob, now: SimTime) {
        let i = job.id.index();
        let Some(&known) = self.shape_of.get(i) else {
            return;
        };
        let shape = if known == NO_SHAPE {
            let candidates = self
                .by_fingerprint
                .entry(RequestShape::fingerprint(job))
                .or_default();
            let found = candidates
                .iter()
                .copied()
                .find(|&c| self.shapes[c as usize].shape.matches(job));
            let s = match found {
                Some(s) => s,
                None => {
                    let next = self.shapes.len() as u32;
                    candidates.push(next);
                    next
                }
            };
            if s as usize == self.shapes.len() {
                self.shapes.push(ShapeClock {
                    shape: RequestShape::of(job),
                    example: job.id,
                    waiting: 0,
                    live_pos: 0,
                    // Reclassified at the decision point of this instant, before any time
                    // passes.
                    kind: WaitKind::Order,
                    since: now,
                    spent: [0; KINDS],
                });
            }
            self.shape_of[i] = s;
            s
        } else {
            known
        };
        if self.entered.get(i).is_none_or(Option::is_some) {
            return;
        }
        let clock = &mut self.shapes[shape as usize];
        if clock.waiting == 0 {
            clock.live_pos = self.live.len() as u32;
            self.live.push(shape);
        }
        clock.waiting += 1;
        self.entered[i] = Some(clock.at(now));
    }

    /// `job` leaves the queue at `now` (started, or the run ended): it is charged what its
    /// shape's clocks moved since it entered.
    pub(crate) fn dequeue(&mut self, job: JobId, now: SimTime) {
        let Some(noted) = self.entered.get_mut(job.index()).and_then(Option::take) else {
            return;
        };
        let Some(&shape) = self.shape_of.get(job.index()) else {
            return;
        };
        let clock = &mut self.shapes[shape as usize];
        let at = clock.at(now);
        if let Some(w) = self.waited.get_mut(job.index()) {
            for k in 0..KINDS {
                w[k] += at[k].saturating_sub(noted[k]);
            }
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
        if let (Some(since), Some(w)) = (
            self.profiling.remove(&job.0),
            self.waited.get_mut(job.index()),
        ) {
            w[WaitKind::Profiling.index()] += now.saturating_since(since).as_micros();
        }
    }

    /// Whether any job waits.
    pub(crate) fn any_waiting(&self) -> bool {
        !self.live.is_empty()
    }

    /// A decision point: each shape with jobs waiting takes the reason the policy states for
    /// it, else the generic one.
    pub(crate) fn decide(&mut self, view: &ClusterView<'_>, policy: &dyn Policy) {
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
    pub(crate) fn finish(mut self, now: SimTime) -> Vec<[f64; KINDS]> {
        let open: Vec<u32> = (0..self.entered.len() as u32)
            .filter(|&j| self.entered[j as usize].is_some())
            .collect();
        for j in open {
            self.dequeue(JobId(j), now);
        }
        let mut profiling: Vec<u32> = self.profiling.keys().copied().collect();
        profiling.sort_unstable();
        for j in profiling {
            self.profiled(JobId(j), now);
        }
        self.waited
            .iter()
            .map(|w| w.map(|us| us as f64 / 1e6))
            .collect()
    }
}
