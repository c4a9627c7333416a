//! Transitions: a job's state changes, allocations released, runs detached and verified.

use super::*;

impl Core {
    pub(super) fn transition(&mut self, idx: usize, to: JobState, now_us: u64, detail: &str) {
        self.touch(idx);
        let holds = self.holding.contains(&idx);
        let job = &mut self.jobs[idx];
        if !holds {
            // While it holds an allocation the row keeps the service of its attempt's start
            // (set by `start_attempt`), from which a restart computes the rest.
            job.row.attained_gpu_secs = job.attained_us as f64 / 1e6;
        }
        let from = job.row.state;
        if (from == JobState::Pending) != (to == JobState::Pending) {
            let n = self
                .pending_per_priority
                .entry(job.row.priority)
                .or_default();
            if to == JobState::Pending {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
            }
        }
        self.events.record_transition(
            now_us,
            job.row.id,
            &job.row.name,
            &job.row.tenant,
            &job.row.placement,
            from,
            to,
            detail,
        );
        job.row.state = to;
        job.row.message = Some(detail.to_string());
        if to.is_terminal() {
            self.to_archive.push(idx);
            job.row.end_us = Some(now_us);
            if let Some(t) = job.row.job_token_sha256.take() {
                self.job_tokens.remove(&t);
            }
            if self.active.remove(&idx) {
                if let Some(n) = self.active_per_tenant.get_mut(&job.row.tenant) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        self.pending.transitions.push(TransitionRow {
            job_id: job.row.id,
            at_us: now_us,
            from: Some(from),
            to,
            detail: detail.to_string(),
        });
        self.pending.jobs.push(job.row.clone());
    }

    /// Returns a job's allocation to the free pool.
    pub(super) fn release(&mut self, idx: usize) {
        self.touch(idx);
        self.holding.remove(&idx);
        if let Some(a) = self.jobs[idx].alloc.take() {
            self.devices.release(&self.map.cluster, &a);
            for s in &a.shares {
                let i = s.node.index();
                let up = self
                    .map
                    .logical
                    .get(i)
                    .is_some_and(|l| l.health == NodeHealth::Up);
                if !up {
                    // A node that is down or draining keeps no free capacity: what the job
                    // held leaves the node's (held-only) capacity instead.
                    if let Some(c) = self.capacity.get_mut(i) {
                        sub(c, &s.resources());
                    }
                } else if let (Some(f), Some(c)) = (self.free.get_mut(i), self.capacity.get(i)) {
                    add(f, &s.resources(), c);
                }
            }
        }
        self.jobs[idx].row.placement.clear();
        self.jobs[idx].row.plan = None;
    }

    /// Detaches the job's run, recording it in `state` in the pending batch.
    pub(super) fn detach_handle(&mut self, idx: usize, state: RunState) -> Option<RunRow> {
        let job = &mut self.jobs[idx];
        let h = job.row.handle.take()?;
        self.by_handle.remove(&h);
        let run = RunRow {
            handle: h,
            job_id: job.row.id,
            attempt: job.row.attempt,
            state,
        };
        self.pending.runs.push(run.clone());
        Some(run)
    }

    /// Detaches job `idx`'s run to stop it, as [`Core::detach_handle`], and keeps it in
    /// `verifying`: the daemon hears of completions only at poll ticks, so the run may have
    /// completed just before the stop, and no attempt of the job is launched until the
    /// backend has said how it ended (see [`Core::launch_when_verified`]). `cause` (what
    /// stopped it) goes into the job's message should it turn out to have ended on its own.
    /// The caller queues the run's [`Command::Stop`], then a [`Command::Verify`] of it.
    ///
    /// A job still starting has no run to detach yet; if its launch is in flight, the run
    /// that launch starts is given up the same way (see [`Core::supersede_launch`]).
    ///
    /// `preempted`: the caller counts the stop as a preemption of the job (see
    /// [`Verifying::preempted`]).
    pub(super) fn detach_to_verify(
        &mut self,
        idx: usize,
        cause: &'static str,
        preempted: bool,
    ) -> Option<RunRow> {
        let Some(run) = self.detach_handle(idx, RunState::Stop) else {
            self.supersede_launch(idx, cause, preempted);
            return None;
        };
        let started = self.jobs[idx].row.start_us;
        self.drain_job_run(idx, Some(run.handle.clone()));
        let v = Verifying::new(idx, run.attempt, started, cause, preempted);
        self.start_verifying(run.handle.clone(), v);
        Some(run)
    }

    /// Job `idx`'s current attempt is given up (preempted, resized, restarted) while its launch
    /// is in flight. The run that launch may start is as much a stopped run as any: it may
    /// even have completed by the time the launch answers (a slow backend), so it is counted
    /// in `verifying` under a placeholder handle at once — no later attempt of the job is
    /// launched before it is stopped and verified (see [`Core::handle_launched`]) — and
    /// recorded `launching` in the store, so that a restart looks it up by name. Nothing to
    /// do when the attempt's launch was parked (never sent) or the job is not starting.
    pub(super) fn supersede_launch(&mut self, idx: usize, cause: &'static str, preempted: bool) {
        let job = &self.jobs[idx];
        let v = Verifying::new(idx, job.row.attempt, job.row.start_us, cause, preempted);
        if let Some(handle) = self.record_launch_in_flight(idx) {
            self.drain_job_run(idx, Some(handle.clone()));
            self.start_verifying(handle, v);
        }
    }

    /// Records job `idx`'s launch as given up while in flight (`launching`, under its
    /// placeholder handle), if it is starting and its launch was sent (not parked): the
    /// run it may start has no handle yet, and a restart must still find and stop it.
    /// Returns the placeholder.
    pub(super) fn record_launch_in_flight(&mut self, idx: usize) -> Option<String> {
        let job = &self.jobs[idx];
        let never_sent = job
            .parked
            .as_ref()
            .is_some_and(|l| l.attempt == job.row.attempt);
        if job.row.state != JobState::Starting || never_sent {
            return None;
        }
        let (job_id, attempt) = (job.row.id, job.row.attempt);
        let handle = launch_placeholder(&self.settings.instance, job_id, attempt);
        self.pending.runs.push(RunRow {
            handle: handle.clone(),
            job_id,
            attempt,
            state: RunState::Launching,
        });
        self.launching_rows.insert(handle.clone());
        Some(handle)
    }

    /// Puts a stopped run in `verifying`, counted on its job.
    pub(super) fn start_verifying(&mut self, handle: String, v: Verifying) {
        let idx = v.idx;
        if self.verifying.insert(handle, v).is_none() {
            if let Some(job) = self.jobs.get_mut(idx) {
                job.unverified_runs += 1;
            }
        }
    }

    /// The answer to a [`Command::Stop`].
    pub fn handle_stopped(&mut self, run: RunRow, result: Result<(), BackendError>) {
        match result {
            // A run being verified stays `stop` in the store until the backend has said how
            // it ended: a restart in between verifies it again instead of running its job a
            // second time (it may have completed just before the stop). A Verify answered
            // before this stop was carried out is asked again now.
            Ok(()) if self.verifying.contains_key(&run.handle) => {
                if let Some(v) = self.verifying.get_mut(&run.handle) {
                    v.stopped = true;
                    if std::mem::take(&mut v.ask_again) {
                        self.act(Command::Verify(vec![Handle(run.handle)]));
                    }
                }
            }
            Ok(()) => {
                let handle = run.handle.clone();
                self.pending.runs.push(RunRow {
                    state: RunState::Gone,
                    ..run
                });
                // An instance's next attempt may have waited for this stop.
                self.instance_unblocked(&handle);
            }
            Err(e) => {
                self.metrics.backend_errors += 1;
                tracing::warn!(handle = %run.handle, "stopping run failed, will retry: {e}");
                self.to_stop.push(run);
            }
        }
    }
}
