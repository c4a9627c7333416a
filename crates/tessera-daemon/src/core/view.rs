//! Scheduling, the view: attained service, and `view.active` kept between scheduling points.

use super::*;
use tessera_sched::book;

impl Core {
    /// True when a scheduling call is due (an event happened or a timeout passed).
    pub fn wants_schedule(&self, now: SimTime) -> bool {
        let t = self.trigger;
        (t.arrival && self.deferred_arrivals().is_none_or(|due| now >= due))
            || t.completion
            || t.round
            || t.reconfigured
            || self.next_round.is_some_and(|r| now >= r)
            || self.retry_at.is_some_and(|r| now >= r)
            || self.wakeup.is_some_and(|w| now >= w)
            || self.services.timer.is_some_and(|t| now >= t)
    }

    /// Brings the attained service of every job holding an allocation up to `now` (exact
    /// GPU·µs), and its `view.active` entry with it. O(jobs holding), never O(pending).
    pub(super) fn accrue(&mut self, now: SimTime) {
        let from = self.last_accrual;
        self.last_accrual = now;
        for &idx in &self.holding {
            let job = &mut self.jobs[idx];
            let resumes = SimTime::from_micros(job.resumes_us);
            if let Some(a) = &job.alloc {
                job.attained_us = job.attained_us.saturating_add(book::service_between(
                    a.gpus(),
                    from,
                    resumes,
                    now,
                ));
            }
            if let Some(e) = self
                .active_pos
                .get(idx)
                .and_then(|&p| self.active_buf.get_mut(p as usize))
            {
                book::show_service(e, job.attained_us, None);
                // When its progress resumed, as in the simulator (a lease counts from it):
                // a tracking policy is told service grows from now (see `sync_active`).
                e.resumes_at = Some(resumes);
            }
        }
    }

    /// What the policy sees of job `idx` now, `None` when it sees nothing (finished,
    /// archived, or held after a node failure).
    pub(super) fn active_entry(&self, idx: usize) -> Option<ActiveJob> {
        let job = self.jobs.get(idx)?;
        if job.held || job.archived || job.row.state.is_terminal() {
            return None;
        }
        let spec = self.specs.get(idx)?;
        let running = job.row.state != JobState::Pending;
        let done = job.row.progress_iters as f64;
        let throughput = job
            .row
            .iters_per_sec
            .filter(|v| *v > 0.0)
            .unwrap_or_else(|| spec.reference_throughput());
        Some(ActiveJob {
            state: if running {
                tessera_sched::JobState::Running
            } else {
                tessera_sched::JobState::Queued
            },
            allocation: if running { job.alloc.clone() } else { None },
            attained_gpu_secs: job.attained_us as f64 / 1e6,
            attained_gpu_us: job.attained_us,
            resumes_at: running.then_some(SimTime::from_micros(job.resumes_us)),
            remaining_iters: (spec.iterations as f64 - done).max(0.0),
            throughput_estimate: throughput,
            first_start: job.row.start_us.map(SimTime::from_micros),
            preemptions: job.row.preemptions,
            knowledge: job.knowledge.clone(),
            ..ActiveJob::arrived(spec)
        })
    }

    /// Removes job `idx` from `view.active` (if there), reporting it to a tracking policy.
    pub(super) fn hide(&mut self, idx: usize) {
        let Some(pos) = self
            .active_pos
            .get(idx)
            .copied()
            .filter(|&p| p != NOT_VISIBLE)
        else {
            return;
        };
        let positions = &mut self.active_pos;
        let gone = book::leave(&mut self.active_buf, pos as usize, |j, p| {
            if let Some(at) = positions.get_mut(j.index()) {
                *at = p;
            }
        });
        if let Some(gone) = gone {
            self.tracker.ended(self.policy.as_mut(), gone.id);
        }
    }

    /// Brings `view.active` up to date with the jobs changed since the last scheduling point
    /// and tells a tracking policy what changed, in the order the jobs first changed.
    pub(super) fn sync_active(&mut self, now: SimTime) {
        let dirty = std::mem::take(&mut self.dirty);
        self.last_synced = dirty.len();
        for &idx in &dirty {
            if let Some(d) = self.is_dirty.get_mut(idx) {
                *d = false;
            }
            let Some(entry) = self.active_entry(idx) else {
                self.hide(idx);
                continue;
            };
            if self.active_pos.len() <= idx {
                self.active_pos.resize(idx + 1, NOT_VISIBLE);
            }
            let pos = self.active_pos[idx];
            let change = if pos == NOT_VISIBLE {
                let positions = &mut self.active_pos;
                Some(book::enter(&mut self.active_buf, entry, |j, p| {
                    if let Some(at) = positions.get_mut(j.index()) {
                        *at = p;
                    }
                }))
            } else {
                let old = &mut self.active_buf[pos as usize];
                let before = (old.state, old.allocation.clone(), old.remaining_iters);
                let moved = before
                    != (entry.state, entry.allocation.clone(), entry.remaining_iters)
                    || old.throughput_estimate != entry.throughput_estimate
                    || old.attained_gpu_us != entry.attained_gpu_us;
                *old = entry;
                moved.then_some(pos as usize)
            };
            if let (true, Some(p)) = (self.tracker.tracking(), change) {
                let (job, spec) = (&mut self.active_buf[p], &self.specs[idx]);
                let policy = self.policy.as_mut();
                match job.state {
                    tessera_sched::JobState::Running => {
                        self.tracker.started(policy, job, spec, now)
                    }
                    // A queued job seen for the first time arrives; one seen before (it was
                    // running, or its progress moved its key) goes back in the queue.
                    tessera_sched::JobState::Queued if pos == NOT_VISIBLE => {
                        self.tracker.arrived(policy, job, spec)
                    }
                    tessera_sched::JobState::Queued => self.tracker.preempted(policy, job, spec),
                }
            }
        }
        self.dirty = dirty;
        self.dirty.clear();
    }

    /// `view.active` rebuilt from scratch (the reference the incremental one is tested
    /// against), sorted by job id.
    #[cfg(test)]
    pub(crate) fn full_active(&self) -> Vec<ActiveJob> {
        (0..self.jobs.len())
            .filter_map(|i| self.active_entry(i))
            .collect()
    }

    /// The incremental `view.active` as of the last scheduling point, sorted by job id.
    #[cfg(test)]
    pub(crate) fn kept_active(&self) -> Vec<ActiveJob> {
        let mut v = self.active_buf.clone();
        v.sort_by_key(|j| j.id);
        v
    }
}
