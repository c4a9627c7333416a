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

use tessera_model::{SimDuration, TrainingJob};

use crate::placement::Ledger;
use crate::policy::{Policy, PolicyInfo, PolicyOptions};
use crate::view::{Action, ActiveJob, ClusterView, JobState};

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
}

/// A baseline policy: one [`JobOrder`] over the shared start/preempt mechanism.
#[derive(Debug)]
pub struct OrderedPolicy {
    order: JobOrder,
    round: Option<SimDuration>,
    /// Reused between calls so that scheduling allocates nothing in the steady state.
    ranked: Vec<(f64, u64, u32, usize)>,
}

impl OrderedPolicy {
    /// A policy ranking by `order`, re-planning every `round` (or every event if `None`).
    pub fn new(order: JobOrder, round: Option<SimDuration>) -> OrderedPolicy {
        OrderedPolicy {
            order,
            round,
            ranked: Vec::new(),
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
        if replan_now {
            self.replan(view, actions);
        } else {
            self.fill(view, actions);
        }
    }
}
