//! Restart reconciliation: stored jobs and open runs loaded, runs found, adopted or stopped.

use super::*;

impl Core {
    /// Loads the stored jobs and open runs after a (re)start. Jobs caught between `starting`
    /// and `running` get a [`Command::Find`] each; once the driver has answered them all it
    /// calls [`finish_restore`](Self::finish_restore).
    pub fn restore(
        &mut self,
        now: SimTime,
        rows: Vec<JobRow>,
        open_runs: Vec<RunRow>,
    ) -> Result<(), DaemonError> {
        let _ = now;
        for row in rows {
            let spec: JobSpec = serde_json::from_str(&row.spec_json)
                .map_err(|e| DaemonError::StoreFormat(format!("job {}: spec: {e}", row.id)))?;
            let idx = self.jobs.len();
            let tj = match self.training_job(idx, &spec, row.submit_us) {
                Ok(tj) => tj,
                Err(e) => {
                    // The inventory changed and the job's GPU type is gone: keep the record.
                    tracing::warn!(job = row.id, "{}", e.message);
                    let mut tj = TrainingJob::simple(
                        idx as u32,
                        SimTime::from_micros(row.submit_us),
                        spec.gpus,
                        SimDuration::from_secs(3600),
                    );
                    tj.gpu_types = vec![tessera_model::GpuModelId(u16::MAX)];
                    tj
                }
            };
            self.push_job(row, spec, tj);
        }
        for idx in self.active.clone() {
            let row = &self.jobs[idx].row;
            if row.state == JobState::Starting {
                let (job_id, attempt) = (row.id, row.attempt);
                self.commands.push_back(Command::Find {
                    job_id,
                    attempt,
                    run_name: Launch::run_name(&self.settings.instance, job_id, attempt),
                });
            }
        }
        // Launches given up while in flight when the daemon stopped: did the run start?
        for run in open_runs.iter().filter(|r| r.state == RunState::Launching) {
            self.commands.push_back(Command::Find {
                job_id: run.job_id,
                attempt: run.attempt,
                run_name: run_name_of(&self.settings.instance, run.job_id, run.attempt),
            });
        }
        self.restoring = open_runs;
        Ok(())
    }

    /// The answer to a [`Command::Find`]: adopt the run, or requeue the job when the start
    /// never happened.
    pub fn handle_found(&mut self, now: SimTime, job_id: i64, attempt: u32, run: Option<Handle>) {
        let launching = self.restoring.iter().position(|r| {
            r.state == RunState::Launching && r.job_id == job_id && r.attempt == attempt
        });
        if let Some(i) = launching {
            // A launch given up in flight: the run it started (if any) is a stopped run like
            // any other, stopped and (its job not run since) verified by `finish_restore`.
            let placeholder = self.restoring.swap_remove(i);
            self.pending.runs.push(RunRow {
                state: RunState::Gone,
                ..placeholder
            });
            if let Some(h) = run {
                let run = RunRow {
                    handle: h.0,
                    job_id,
                    attempt,
                    state: RunState::Stop,
                };
                self.pending.runs.push(run.clone());
                self.restoring.push(run);
            }
            return;
        }
        if services::Services::is_instance(job_id) {
            return self.instance_found(now, -job_id, attempt, run);
        }
        let now_us = now.as_micros();
        let Some(&idx) = self.by_id.get(&job_id) else {
            return;
        };
        if self.jobs[idx].row.state != JobState::Starting || self.jobs[idx].row.attempt != attempt {
            return;
        }
        match run {
            Some(h) => {
                tracing::info!(job = job_id, handle = %h.0, "adopting a run started before the restart");
                self.by_handle.insert(h.0.clone(), idx);
                self.pending.runs.push(RunRow {
                    handle: h.0.clone(),
                    job_id,
                    attempt,
                    state: RunState::Live,
                });
                self.jobs[idx].row.handle = Some(h.0);
                self.transition(
                    idx,
                    JobState::Running,
                    now_us,
                    "adopted after daemon restart",
                );
            }
            None => {
                let job = &mut self.jobs[idx];
                job.row.placement.clear();
                job.row.start_us = None;
                self.transition(
                    idx,
                    JobState::Pending,
                    now_us,
                    "start interrupted by a daemon restart; requeued",
                );
            }
        }
    }

    /// Ends restart reconciliation: reserves what running jobs hold and stops runs that must
    /// be stopped (a cancel or preemption decided before a crash) or that no job claims.
    pub fn finish_restore(&mut self, now: SimTime) {
        // MIG layouts are not stored: a partitioned GPU comes back with the instances its
        // running jobs hold (a valid part of its real layout), so nothing else is placed on
        // it; the policy may re-partition it once it is idle.
        let mut layouts: BTreeMap<(NodeId, u32), Vec<MigInstance>> = BTreeMap::new();
        for &idx in &self.active {
            let row = &self.jobs[idx].row;
            if row.state != JobState::Running {
                continue;
            }
            if let Some(a) = self.map.allocation(&row.placement) {
                for s in &a.shares {
                    if let Some(d) = s.devices {
                        if let GpuPart::Mig(inst) = d.part {
                            for g in d.gpus.iter() {
                                layouts.entry((s.node, g)).or_default().push(inst);
                            }
                        }
                    }
                }
            }
        }
        for ((node, gpu), mut layout) in layouts {
            layout.sort();
            layout.dedup();
            self.devices
                .reconfigure(node, gpu, Some(layout), SimTime::ZERO);
        }
        for idx in self.active.clone() {
            let job = &mut self.jobs[idx];
            if job.row.state == JobState::Running {
                job.alloc = self.map.allocation(&job.row.placement).map(|mut a| {
                    a.plan = job.row.plan;
                    a
                });
                match &mut job.alloc {
                    Some(a) => {
                        // Its run went on while the daemon was down: the service of its
                        // attempt's start (what the row holds) and the GPUs held since, up to
                        // the instant accruals continue from, as a daemon that never stopped
                        // would have counted.
                        if let Some(start) = job.row.start_us {
                            let resumes = start.saturating_add(
                                tessera_sched::book::restore_time(
                                    &self.settings.restart_costs,
                                    &self.specs[idx].model,
                                    a.gpus(),
                                    job.row.attempt > 1,
                                )
                                .as_micros(),
                            );
                            job.resumes_us = resumes;
                            job.attained_us = job.attained_us.saturating_add(
                                tessera_sched::book::service_between(
                                    a.gpus(),
                                    SimTime::from_micros(start),
                                    SimTime::from_micros(resumes),
                                    self.last_accrual,
                                ),
                            );
                        }
                        self.holding.insert(idx);
                        for s in &a.shares {
                            sub(&mut self.free[s.node.index()], &s.resources());
                        }
                        // Name the devices of records written before devices were named (the
                        // lowest free ones, as the backend picked them then).
                        if let Ok(named) = self.devices.resolve(
                            &self.map.cluster,
                            &self.specs[idx],
                            a,
                            SimTime::ZERO,
                        ) {
                            *a = named;
                        }
                        self.devices.take(&self.map.cluster, a);
                    }
                    None => tracing::warn!(
                        job = job.row.id,
                        "running on nodes no longer in the inventory"
                    ),
                }
            }
        }
        let mut unverified = Vec::new();
        for run in std::mem::take(&mut self.restoring) {
            let claimed = self.by_handle.get(&run.handle).is_some_and(|&i| {
                self.jobs[i].row.state == JobState::Running
                    && self.jobs[i].row.handle.as_deref() == Some(run.handle.as_str())
            });
            if run.state == RunState::Stop || (run.state == RunState::Live && !claimed) {
                // A stopped run of a job requeued since and not run again (its attempt, or an
                // earlier one when a start the policy decided while the run was being verified
                // was never launched): it may have completed before the stop, so the job
                // waits, held, for the backend to say how the run ended (as after a node
                // failure; the policy is new, so hiding the job confuses nothing).
                if let Some(&idx) = self.by_id.get(&run.job_id) {
                    let job = &mut self.jobs[idx];
                    if job.row.state == JobState::Pending && run.attempt <= job.row.attempt {
                        job.held = true;
                        // A stop that left the job queued at the run's own attempt was a
                        // preemption (policy or node failure: counted); a resize or restart
                        // started a later attempt (not counted). A preemption followed by a
                        // start never launched looks like the latter: its count stays.
                        let preempted = run.attempt == job.row.attempt;
                        self.start_verifying(
                            run.handle.clone(),
                            Verifying::new(
                                idx,
                                run.attempt,
                                None,
                                "stopped right after",
                                preempted,
                            ),
                        );
                        unverified.push(Handle(run.handle.clone()));
                    }
                }
                if services::Services::is_instance(run.job_id) {
                    // As before the restart, the instance's next attempt waits for the stop.
                    self.block_instance(&run.handle, -run.job_id);
                }
                let run = RunRow {
                    state: RunState::Stop,
                    ..run
                };
                self.act(Command::Stop {
                    run,
                    preempt: false,
                });
            }
        }
        if !unverified.is_empty() {
            self.act(Command::Verify(unverified));
        }
        // Record what finished while the daemon was down.
        self.poll_runs(now);
    }
}
