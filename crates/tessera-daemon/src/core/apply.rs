//! Scheduling, the record: decisions written, then stops, reconfigurations, retunes and launches queued.

use super::*;

impl Core {
    /// The recording half of a scheduling point: writes the transitions and queues the stops,
    /// reconfigurations, retunes and launches, in that order (after a [`Command::Persist`] of
    /// those transitions): holders of a GPU are stopped before it is reconfigured.
    pub fn apply(&mut self, now: SimTime, decisions: Decisions) {
        let plans = decisions.0;
        if plans.is_empty() {
            return;
        }
        // Record every decision; `act` persists them before the first stop or launch.
        let now_us = now.as_micros();
        let mut to_preempt: Vec<RunRow> = Vec::new();
        let mut to_start: Vec<Launch> = Vec::new();
        let mut to_retune: Vec<Retune> = Vec::new();
        let mut to_restart: Vec<i64> = Vec::new();
        let mut to_reconfigure: Vec<Command> = Vec::new();
        let mut to_restart_instances: Vec<i64> = Vec::new();
        for plan in plans {
            match plan {
                Plan::ScaleOut(idx, alloc) => {
                    let launch = self.scale_out(idx, alloc, now_us);
                    self.note_scaled(now_us, true, -launch.job_id);
                    to_start.push(launch);
                }
                Plan::ScaleIn(id) => {
                    self.note_scaled(now_us, false, id);
                    to_preempt.extend(self.scale_in(id));
                }
                Plan::RetuneInstance(id, alloc) => match self.retune_instance(id, alloc) {
                    Some(r) => to_retune.push(r),
                    None => to_restart_instances.push(id),
                },
                Plan::Preempt(idx) => {
                    *self.metrics.preemptions.entry("policy").or_default() += 1;
                    // The run may have completed since the last poll. The job stays visible to
                    // the policy, queued (hiding it would tell a tracking policy it ended, and
                    // policies that re-place what they preempt, as MISO, lose track), but
                    // none of its starts is launched until the backend has said how the run
                    // ended: if it had completed, the job is finished instead (a start the
                    // policy decided meanwhile is dropped, which it sees as the job ending).
                    // Refusing those starts instead would break re-placements decided in
                    // the same batch as the preemption.
                    to_preempt.extend(self.detach_to_verify(
                        idx,
                        "preempted by the policy right after",
                        true,
                    ));
                    self.release(idx);
                    let job = &mut self.jobs[idx];
                    job.row.preemptions += 1;
                    job.row.backend_state = None;
                    self.transition(
                        idx,
                        JobState::Pending,
                        now_us,
                        "preempted by the policy; requeued",
                    );
                }
                Plan::Retune(idx, alloc) => {
                    if let Some(old) = self.jobs[idx].alloc.take() {
                        self.devices.release(&self.map.cluster, &old);
                        for s in &old.shares {
                            let i = s.node.index();
                            add(&mut self.free[i], &s.resources(), &self.capacity[i]);
                        }
                    }
                    self.hold(idx, alloc);
                    let job = &self.jobs[idx];
                    let (id, attempt, state) = (job.row.id, job.row.attempt, job.row.state);
                    let handle = job.row.handle.clone();
                    self.transition(idx, state, now_us, "retuned by the policy");
                    match handle {
                        Some(h) => to_retune.push(Retune {
                            handle: Handle(h),
                            job_id: id,
                            attempt,
                            placement: self.jobs[idx].row.placement.clone(),
                        }),
                        // Still starting: the launch in flight carries the old quota, so a
                        // new attempt replaces it, launched once the run the old launch
                        // starts has been stopped and verified (see `supersede_launch`).
                        None => to_restart.push(id),
                    }
                }
                Plan::Reconfigure(node, gpu, layout) => {
                    let before = self
                        .devices
                        .gpus(node)
                        .get(gpu as usize)
                        .and_then(|g| g.mig.clone());
                    self.devices
                        .reconfigure(node, gpu, layout.clone(), SimTime::MAX);
                    self.reconfiguring.insert((node.0, gpu), before.clone());
                    let name = self
                        .map
                        .logical
                        .get(node.index())
                        .map_or_else(String::new, |l| l.node.clone());
                    let placed = |l: &Option<Vec<MigInstance>>| {
                        l.as_ref()
                            .map(|l| self.map.placed_layout(node, l).unwrap_or_default())
                    };
                    to_reconfigure.push(Command::Reconfigure {
                        node,
                        request: Reconfigure {
                            node: name,
                            gpu,
                            from: placed(&before),
                            to: placed(&layout),
                        },
                    });
                }
                Plan::Start(idx, alloc) | Plan::Resize(idx, alloc) => {
                    let resize = self.jobs[idx].row.state != JobState::Pending;
                    if resize {
                        // As a preemption: the stopped run may have completed since the last
                        // poll, so the resized attempt is launched only once the backend has
                        // said it did not (it is dropped, and the job finished, if it did).
                        *self.metrics.preemptions.entry("resize").or_default() += 1;
                        to_preempt.extend(self.detach_to_verify(
                            idx,
                            "resized by the policy right after",
                            true,
                        ));
                        self.release(idx);
                        // Counted on the job's record as the simulator counts it (a resize
                        // stops the run as a preemption does), and shown so to policies.
                        self.jobs[idx].row.preemptions += 1;
                    }
                    let detail = if resize {
                        "resized by the policy"
                    } else {
                        "started by the policy"
                    };
                    let launch = self.start_attempt(idx, alloc, now_us, detail);
                    if self.awaits_verification(idx) {
                        self.jobs[idx].parked = Some(launch);
                    } else {
                        to_start.push(launch);
                    }
                }
            }
        }
        // The runs stopped here that may have completed (all but scaled-in instances').
        let to_verify: Vec<Handle> = to_preempt
            .iter()
            .filter(|r| self.verifying.contains_key(&r.handle))
            .map(|r| Handle(r.handle.clone()))
            .collect();
        for run in to_preempt {
            self.act(Command::Stop { run, preempt: true });
        }
        for c in to_reconfigure {
            self.act(c);
        }
        for r in to_retune {
            self.act(Command::Retune(r));
        }
        for id in to_restart {
            self.restart_in_place(now, id, "retuned while starting");
        }
        for id in to_restart_instances {
            self.restart_instance(id, "retuned while starting");
        }
        for launch in to_start {
            self.act(Command::Launch(launch));
        }
        // Last: only the launches parked behind it wait for its answer.
        if !to_verify.is_empty() {
            self.act(Command::Verify(to_verify));
        }
    }

    /// Records that job `idx` holds `alloc` (resolved: devices named).
    pub(super) fn hold(&mut self, idx: usize, alloc: Allocation) {
        self.touch(idx);
        self.holding.insert(idx);
        self.take_devices(&alloc);
        for s in &alloc.shares {
            sub(&mut self.free[s.node.index()], &s.resources());
        }
        let job = &mut self.jobs[idx];
        job.row.placement = self.map.placement(&alloc);
        job.row.plan = alloc.plan;
        job.alloc = Some(alloc);
    }

    /// A new attempt of job `idx` on `alloc`: recorded as starting, with a fresh token.
    pub(super) fn start_attempt(
        &mut self,
        idx: usize,
        alloc: Allocation,
        now_us: u64,
        detail: &str,
    ) -> Launch {
        // The service attained at this instant, stored with the attempt's start: what it has
        // accrued up to the last scheduling point (a restart in place decided between points
        // accrues from its start, or once restored, as every attempt does).
        let at_start = self.jobs[idx].attained_us;
        let restart = self.jobs[idx].row.attempt > 0;
        let restore = self.resume_delay(idx, alloc.gpus(), restart);
        self.jobs[idx].resumes_us = now_us.saturating_add(restore.as_micros());
        self.hold(idx, alloc);
        let token = (self.new_token)();
        let token_hash = hash_token(&token);
        let job = &mut self.jobs[idx];
        job.row.attained_gpu_secs = at_start as f64 / 1e6;
        job.row.attempt += 1;
        job.row.start_us = Some(now_us);
        job.row.backend_state = None;
        if let Some(old) = job.row.job_token_sha256.replace(token_hash.clone()) {
            self.job_tokens.remove(&old);
        }
        self.job_tokens.insert(token_hash, idx);
        self.transition(idx, JobState::Starting, now_us, detail);
        self.launch(idx, &token)
    }

    /// How long attempt of job `idx` on `gpus` GPUs restores before its service grows: nothing
    /// for a first start, the configured restart cost for a restart (the simulator's rule,
    /// `tessera_sched::book::restore_time`).
    pub(super) fn resume_delay(&self, idx: usize, gpus: u32, restart: bool) -> SimDuration {
        let model = self.specs.get(idx).map_or("", |s| s.model.as_str());
        tessera_sched::book::restore_time(&self.settings.restart_costs, model, gpus, restart)
    }

    /// Checkpoints and restarts a running job on the allocation it holds (a retune the
    /// backend could not carry out in place).
    pub(super) fn restart_in_place(&mut self, now: SimTime, job_id: i64, why: &str) {
        let Some(&idx) = self.by_id.get(&job_id) else {
            return;
        };
        if !matches!(
            self.jobs[idx].row.state,
            JobState::Running | JobState::Starting
        ) {
            return;
        }
        let Some(alloc) = self.jobs[idx].alloc.clone() else {
            return;
        };
        *self.metrics.preemptions.entry("resize").or_default() += 1;
        *self.metrics.retunes.entry("restart").or_default() += 1;
        // The run may have completed since the last poll: the new attempt is launched only
        // once the backend has said it did not.
        let run = self.detach_to_verify(idx, "restarted with a new quota right after", false);
        self.release(idx);
        let detail = format!("{why}; restarted with the new quota");
        let launch = self.start_attempt(idx, alloc, now.as_micros(), &detail);
        if let Some(run) = run {
            let handle = Handle(run.handle.clone());
            self.act(Command::Stop { run, preempt: true });
            self.act(Command::Verify(vec![handle]));
        }
        // Parked behind that verification, or one still pending.
        self.launch_when_verified(idx, launch);
    }

    /// The answer to a [`Command::Retune`]: done in place, or (the backend declined or
    /// failed) the job is checkpointed and restarted with its new quota.
    pub fn handle_retuned(
        &mut self,
        now: SimTime,
        job_id: i64,
        attempt: u32,
        result: Result<(), BackendError>,
    ) {
        if services::Services::is_instance(job_id) {
            return self.instance_retuned(-job_id, attempt, result);
        }
        let Err(e) = result else {
            *self.metrics.retunes.entry("in_place").or_default() += 1;
            return;
        };
        let current = self
            .by_id
            .get(&job_id)
            .is_some_and(|&i| self.jobs[i].row.attempt == attempt);
        if !current {
            return;
        }
        if !matches!(e, BackendError::Declined { .. }) {
            self.metrics.backend_errors += 1;
        }
        tracing::info!(
            job = job_id,
            "retune not carried out in place ({e}); restarting"
        );
        self.restart_in_place(now, job_id, &format!("retune not in place ({e})"));
    }

    /// The answer to a [`Command::Reconfigure`]: the GPU is ready with its new layout; or
    /// the backend declined (it keeps its old layout); or it failed, and the GPU is marked
    /// unhealthy (its state is unknown). Either way no job is lost: the jobs the policy
    /// stopped for it are queued.
    pub fn handle_reconfigured(
        &mut self,
        now: SimTime,
        node: NodeId,
        gpu: u32,
        result: Result<(), BackendError>,
    ) {
        let Some(before) = self.reconfiguring.remove(&(node.0, gpu)) else {
            return;
        };
        let layout = self
            .devices
            .gpus(node)
            .get(gpu as usize)
            .and_then(|g| g.mig.clone());
        match result {
            Ok(()) => {
                *self.metrics.reconfigurations.entry("done").or_default() += 1;
                self.devices.reconfigure(node, gpu, layout, now);
                self.note_reconfigured(now, node, gpu, "reconfigured");
            }
            Err(e @ BackendError::Declined { .. }) => {
                self.metrics.rejected_actions += 1;
                *self.metrics.reconfigurations.entry("declined").or_default() += 1;
                tracing::warn!(?node, gpu, "reconfiguration declined: {e}");
                self.devices.reconfigure(node, gpu, before, now);
                self.note_reconfigured(now, node, gpu, &format!("declined ({e})"));
            }
            Err(e) => {
                self.metrics.backend_errors += 1;
                *self.metrics.reconfigurations.entry("failed").or_default() += 1;
                let name = self
                    .map
                    .logical
                    .get(node.index())
                    .map_or_else(String::new, |l| l.node.clone());
                tracing::error!(node = %name, gpu, "reconfiguration failed, GPU marked unhealthy: {e}");
                let mut reason = format!("reconfiguration failed: {e}");
                reason.truncate(512);
                self.unhealthy_gpus.insert((node.0, gpu), reason);
                // Out of every pool, whatever its real state: partitioned into nothing,
                // never ready.
                self.devices
                    .reconfigure(node, gpu, Some(Vec::new()), SimTime::MAX);
                self.note_reconfigured(now, node, gpu, "failed; GPU marked unhealthy");
            }
        }
        self.trigger.reconfigured = true;
    }
}
