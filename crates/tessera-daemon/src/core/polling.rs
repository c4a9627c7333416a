//! Backend polling: run statuses, runs lost, stopped runs verified.

use super::*;

impl Core {
    /// A poll tick: retries failed stops and asks for the status of every run (a
    /// [`Command::Poll`] unless nothing runs).
    pub fn poll_runs(&mut self, now: SimTime) {
        for run in std::mem::take(&mut self.to_stop) {
            self.act(Command::Stop {
                run,
                preempt: false,
            });
        }
        let mut watched: Vec<Handle> = self
            .holding
            .iter()
            .filter_map(|&idx| self.jobs[idx].row.handle.clone().map(Handle))
            .collect();
        watched.extend(self.instance_poll(now));
        // Stopped runs until they are gone (their GPUs drain meanwhile).
        watched.extend(self.draining_handles());
        if !watched.is_empty() {
            self.commands.push_back(Command::Poll(watched));
        }
    }

    /// The backend could not be polled; the next tick tries again.
    pub fn handle_poll_failed(&mut self, error: &BackendError) {
        self.metrics.backend_errors += 1;
        tracing::warn!("backend poll failed: {error}");
    }

    /// The answer to a [`Command::Poll`]: records finished, failed and preempted runs.
    pub fn handle_statuses(&mut self, now: SimTime, statuses: Vec<(Handle, RunStatus)>) {
        self.drain_statuses(&statuses);
        let statuses = self.instance_statuses(now, statuses);
        let now = now.as_micros();
        for (h, status) in statuses {
            if self.verifying.contains_key(&h.0) {
                // A poll issued before the stop: only an ending is news; otherwise wait for
                // the answer to the Verify that follows the stop.
                self.verifying_status(h.0, &status, now, false);
                continue;
            }
            let Some(&idx) = self.by_handle.get(&h.0) else {
                continue;
            };
            match status {
                RunStatus::Pending { reason } => {
                    self.jobs[idx].row.backend_state = Some(format!("PENDING ({reason})"));
                }
                RunStatus::Running => {
                    self.jobs[idx].row.backend_state = Some("RUNNING".into());
                }
                RunStatus::Completed => {
                    self.finish(idx, JobState::Completed, Some(0), "completed", now);
                }
                RunStatus::Failed { reason, exit_code } => {
                    self.finish(
                        idx,
                        JobState::Failed,
                        exit_code,
                        &format!("failed: {reason}"),
                        now,
                    );
                }
                RunStatus::Cancelled => {
                    self.finish(
                        idx,
                        JobState::Failed,
                        None,
                        "cancelled outside tessera",
                        now,
                    );
                }
                RunStatus::Unknown => {
                    self.lost(idx, "the backend no longer knows the run", now);
                }
                RunStatus::NodeFailed { reason } => {
                    self.lost(idx, &format!("its node failed: {reason}"), now);
                    if self.jobs[idx].row.state == JobState::Pending {
                        self.jobs[idx].held = true;
                        self.touch(idx);
                        if self.awaiting_inventory.is_empty() {
                            self.commands.push_back(Command::Inventory);
                        }
                        self.awaiting_inventory.push(idx);
                    }
                }
                RunStatus::Preempted => {
                    *self.metrics.preemptions.entry("backend").or_default() += 1;
                    self.detach_handle(idx, RunState::Gone);
                    self.release(idx);
                    let job = &mut self.jobs[idx];
                    job.row.preemptions += 1;
                    job.row.backend_state = None;
                    self.transition(
                        idx,
                        JobState::Pending,
                        now,
                        "preempted by the backend; requeued",
                    );
                    self.trigger.completion = true;
                }
            }
        }
    }

    /// A run ended through no fault of its job (node failure, vanished from the backend): the
    /// job goes back to the queue for a new attempt, up to [`MAX_LOST_RUNS`] times.
    pub(super) fn lost(&mut self, idx: usize, why: &str, now: u64) {
        *self.metrics.preemptions.entry("lost").or_default() += 1;
        self.jobs[idx].lost_runs += 1;
        if self.jobs[idx].lost_runs >= MAX_LOST_RUNS {
            let detail = format!("{why}; {MAX_LOST_RUNS} runs lost, giving up");
            self.finish(idx, JobState::Failed, None, &detail, now);
            return;
        }
        self.detach_handle(idx, RunState::Gone);
        self.release(idx);
        let job = &mut self.jobs[idx];
        job.row.preemptions += 1;
        job.row.backend_state = None;
        self.transition(idx, JobState::Pending, now, &format!("{why}; requeued"));
        self.trigger.completion = true;
    }

    /// The answer to a [`Command::Verify`]: how each stopped run (one stopped while its job
    /// goes on) ended. Once the stop has been carried out, whatever the status, it is the last
    /// word: the job is finished if its run had completed or failed on its own, else it may
    /// run again.
    pub fn handle_verified(&mut self, now: SimTime, statuses: Vec<(Handle, RunStatus)>) {
        self.drain_statuses(&statuses);
        let now = now.as_micros();
        for (h, status) in statuses {
            self.verifying_status(h.0, &status, now, true);
        }
    }

    /// A status of a run in `verifying`, from a [`Command::Verify`] (`verify`) or from a poll
    /// issued before the stop. An ending (anything but "running", "pending" or "unknown")
    /// settles it; so does any answer to a Verify made after the stop was carried out. A
    /// Verify answered before that is asked again once the stop is done.
    pub(super) fn verifying_status(
        &mut self,
        handle: String,
        status: &RunStatus,
        now: u64,
        verify: bool,
    ) {
        let Some(v) = self.verifying.get_mut(&handle) else {
            return;
        };
        let ended = status.is_terminal() && *status != RunStatus::Unknown;
        let settled = ended || (verify && v.stopped);
        if !settled {
            v.ask_again |= verify;
            return;
        }
        if let Some(v) = self.verifying.remove(&handle) {
            if let Some(job) = self.jobs.get_mut(v.idx) {
                job.unverified_runs = job.unverified_runs.saturating_sub(1);
            }
            self.verified(handle, v, status, now);
        }
    }

    /// A stopped run's ending is known: it is recorded over (under its own attempt), and its
    /// job, if it has not run since (queued, or started by the policy with its launch parked),
    /// is finished when the run had completed or failed on its own, else released: shown to
    /// the policy again, its parked launch carried out.
    pub(super) fn verified(&mut self, handle: String, v: Verifying, status: &RunStatus, now: u64) {
        let idx = v.idx;
        self.pending.runs.push(RunRow {
            handle,
            job_id: self.jobs[idx].row.id,
            attempt: v.attempt,
            state: RunState::Gone,
        });
        let job = &self.jobs[idx];
        let unstarted = match job.row.state {
            JobState::Pending => true,
            JobState::Starting => job
                .parked
                .as_ref()
                .is_some_and(|l| l.attempt == job.row.attempt),
            _ => false,
        };
        let own_end = match status {
            // It finished before the stop: record that rather than run it again.
            RunStatus::Completed => Some((
                JobState::Completed,
                Some(0),
                format!("completed ({})", v.cause),
            )),
            RunStatus::Failed {
                exit_code: Some(code),
                reason,
            } => Some((
                JobState::Failed,
                Some(*code),
                format!("failed: {reason} ({})", v.cause),
            )),
            _ => None,
        };
        self.touch(idx);
        self.trigger.completion = true;
        if let (true, Some((to, exit, detail))) = (unstarted, own_end) {
            // A parked start is dropped with the allocation it held.
            self.jobs[idx].parked = None;
            self.release(idx);
            let job = &mut self.jobs[idx];
            // The record is that of the run that ended, not of an attempt started since and
            // never launched (its parked start was just dropped).
            job.row.attempt = v.attempt;
            if v.start_us.is_some() {
                job.row.start_us = v.start_us;
            }
            job.held = false;
            job.row.exit_code = exit;
            job.row.backend_state = None;
            // It ended before the stop: not a preemption (the metric, a counter of stops the
            // daemon made, keeps it).
            if v.preempted {
                job.row.preemptions = job.row.preemptions.saturating_sub(1);
            }
            self.transition(idx, to, now, &detail);
            return;
        }
        if self.awaits_verification(idx) {
            return; // another stopped run of the job is still unverified
        }
        let job = &mut self.jobs[idx];
        job.held = false;
        if let Some(launch) = job.parked.take() {
            // Unless the attempt was given up meanwhile (cancelled, preempted, restarted).
            if job.row.state == JobState::Starting && job.row.attempt == launch.attempt {
                self.act(Command::Launch(launch));
            }
        }
    }

    /// Whether a stopped run of job `idx` is still being verified: a start decided now is
    /// recorded, but its launch waits (see [`Job::parked`]).
    pub(super) fn awaits_verification(&self, idx: usize) -> bool {
        self.jobs.get(idx).is_some_and(|j| j.unverified_runs > 0)
    }

    /// Launches an attempt of job `idx` now, or parks it until the job's stopped runs are
    /// verified.
    pub(super) fn launch_when_verified(&mut self, idx: usize, launch: Launch) {
        if self.awaits_verification(idx) {
            self.jobs[idx].parked = Some(launch);
        } else {
            self.act(Command::Launch(launch));
        }
    }

    pub(super) fn finish(
        &mut self,
        idx: usize,
        to: JobState,
        exit: Option<i32>,
        detail: &str,
        now: u64,
    ) {
        self.detach_handle(idx, RunState::Gone);
        self.release(idx);
        let job = &mut self.jobs[idx];
        job.row.exit_code = exit;
        job.row.backend_state = None;
        self.transition(idx, to, now, detail);
        self.trigger.completion = true;
    }
}
