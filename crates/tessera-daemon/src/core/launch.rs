//! Launches: the backend's answers, and what a run is given.

use super::*;

impl Core {
    /// The answer to a [`Command::Launch`]: the job runs, or it goes back to the queue (and
    /// fails after 3 refusals in a row, not counting resource exhaustion).
    pub fn handle_launched(
        &mut self,
        now: SimTime,
        job_id: i64,
        attempt: u32,
        result: Result<Handle, BackendError>,
    ) {
        if services::Services::is_instance(job_id) {
            let placeholder = launch_placeholder(&self.settings.instance, job_id, attempt);
            let run = result.as_ref().ok().map(|h| h.0.as_str());
            self.launch_answered_draining(&placeholder, run);
            return self.instance_launched(now, -job_id, attempt, result);
        }
        let now_us = now.as_micros();
        let placeholder = launch_placeholder(&self.settings.instance, job_id, attempt);
        self.launch_answered_draining(&placeholder, result.as_ref().ok().map(|h| h.0.as_str()));
        if self.launching_rows.remove(&placeholder) {
            // The answer to a launch given up in flight: its `launching` row is closed in the
            // batch that records the run (if any) `stop`, so a crash leaves one or the other.
            self.pending.runs.push(RunRow {
                handle: placeholder.clone(),
                job_id,
                attempt,
                state: RunState::Gone,
            });
        }
        if let Some(v) = self.verifying.remove(&placeholder) {
            return self.superseded_launched(now_us, placeholder, v, result);
        }
        let idx = self.by_id.get(&job_id).copied().filter(|&i| {
            let r = &self.jobs[i].row;
            r.state == JobState::Starting && r.attempt == attempt
        });
        let Some(idx) = idx else {
            // The job was cancelled while its launch was in flight (or the attempt was given
            // up, and the job has finished and been archived since): the run belongs to
            // nobody and must go.
            if let Ok(h) = result {
                let run = RunRow {
                    handle: h.0,
                    job_id,
                    attempt,
                    state: RunState::Stop,
                };
                self.pending.runs.push(run.clone());
                self.act(Command::Stop {
                    run,
                    preempt: false,
                });
            }
            return;
        };
        match result {
            Ok(h) => {
                self.by_handle.insert(h.0.clone(), idx);
                self.pending.runs.push(RunRow {
                    handle: h.0.clone(),
                    job_id,
                    attempt,
                    state: RunState::Live,
                });
                let job = &mut self.jobs[idx];
                job.row.handle = Some(h.0);
                job.submit_failures = 0;
                self.transition(idx, JobState::Running, now_us, "submitted to the backend");
                // Its node went down while the launch was in flight.
                let down = self.jobs[idx].row.placement.iter().any(|s| {
                    self.map
                        .logical
                        .iter()
                        .any(|l| l.node == s.node && l.health == NodeHealth::Down)
                });
                if down {
                    self.fail_over(now, &[idx]);
                }
            }
            Err(e) => {
                self.metrics.backend_errors += 1;
                tracing::warn!(job = job_id, "backend submit failed: {e}");
                self.retry_at = Some(now + SimDuration::from_secs(SUBMIT_RETRY_SECS));
                self.release(idx);
                let job = &mut self.jobs[idx];
                // Running out of descriptors or processes says nothing about the job.
                if !e.is_transient() {
                    job.submit_failures += 1;
                }
                job.row.start_us = None;
                let (to, detail) = if job.submit_failures >= MAX_SUBMIT_FAILURES {
                    (
                        JobState::Failed,
                        format!("backend refused the job {MAX_SUBMIT_FAILURES} times: {e}"),
                    )
                } else {
                    (
                        JobState::Pending,
                        format!("backend submit failed, will retry: {e}"),
                    )
                };
                self.transition(idx, to, now_us, &detail);
            }
        }
    }

    /// The answer to a launch given up while in flight (see [`Core::supersede_launch`]), its
    /// entry `v` taken out of `verifying` under `placeholder`. A run it started is stopped and
    /// verified as any stopped run, in `verifying` under its own handle now (the job's count
    /// unchanged): the job's later attempt stays parked until then, and is dropped if the run
    /// turns out to have completed. A launch that failed started nothing: the job's parked
    /// attempt may go (unless another stopped run is still unverified).
    pub(super) fn superseded_launched(
        &mut self,
        now_us: u64,
        placeholder: String,
        v: Verifying,
        result: Result<Handle, BackendError>,
    ) {
        match result {
            Ok(h) => {
                let run = RunRow {
                    handle: h.0,
                    job_id: self.jobs[v.idx].row.id,
                    attempt: v.attempt,
                    state: RunState::Stop,
                };
                self.pending.runs.push(run.clone());
                let handle = Handle(run.handle.clone());
                self.verifying.insert(run.handle.clone(), v);
                self.act(Command::Stop { run, preempt: true });
                self.act(Command::Verify(vec![handle]));
            }
            Err(e) => {
                // Withdrawn before the backend took it: no failure, nothing ran.
                if !matches!(e, BackendError::Withdrawn) {
                    self.metrics.backend_errors += 1;
                    tracing::warn!(
                        job = self.jobs[v.idx].row.id,
                        attempt = v.attempt,
                        "backend submit of an attempt given up meanwhile failed: {e}"
                    );
                }
                if let Some(job) = self.jobs.get_mut(v.idx) {
                    job.unverified_runs = job.unverified_runs.saturating_sub(1);
                }
                // Settled as a run that never ran (records the placeholder gone again: harmless).
                self.verified(placeholder, v, &RunStatus::Unknown, now_us);
            }
        }
    }

    /// The launch of job `idx`'s current attempt, with its secret `token`.
    pub(super) fn launch(&self, idx: usize, token: &str) -> Launch {
        let job = &self.jobs[idx];
        // The device-level decision, as the job sees it.
        let devices = job
            .alloc
            .as_ref()
            .map_or(job.spec.gpus, Allocation::devices);
        let plan = job
            .alloc
            .as_ref()
            .and_then(|a| a.plan)
            .unwrap_or(ParallelPlan::data_parallel(devices.max(1)));
        let (payload, env, gpu_type) = self.run_setup(RunSetup {
            command: job.spec.command.as_deref(),
            script: job.spec.script.as_deref(),
            user_env: &job.spec.env,
            identity: vec![
                ("TESSERA_JOB_ID", job.row.id.to_string()),
                ("TESSERA_ATTEMPT", job.row.attempt.to_string()),
                // The run's own token: TESSERA_JOB_TOKEN, and TESSERA_TOKEN for SDKs that
                // predate it (the CLI never takes TESSERA_TOKEN for a tenant's inside a run).
                ("TESSERA_JOB_TOKEN", token.to_string()),
                ("TESSERA_TOKEN", token.to_string()),
            ],
            gpus: job.spec.gpus,
            after_gpus: vec![(
                "TESSERA_START_ITERATION",
                job.row.progress_iters.to_string(),
            )],
            plan: Some(plan),
            placement: &job.row.placement,
            alloc: job.alloc.as_ref(),
        });
        Launch {
            name: Launch::run_name(&self.settings.instance, job.row.id, job.row.attempt),
            job_id: job.row.id,
            attempt: job.row.attempt,
            tenant: job.row.tenant.clone(),
            payload,
            env,
            placement: job.row.placement.clone(),
            plan,
            gpu_type,
        }
    }

    /// What every run is given, a job's attempt or a service instance's (the one place its
    /// environment is built): its program; the environment (the user's variables, then
    /// `identity`, `TESSERA_CPU_WORKERS`, `TESSERA_GPUS`, `after_gpus`, `TESSERA_URL`, the
    /// plan as `TESSERA_PLAN_{DP,TP,PP}` when given, `TESSERA_GPU_TYPE`, and for a quota the
    /// MPS limits); and the GPU model's name.
    pub(super) fn run_setup(&self, run: RunSetup<'_>) -> (Payload, Vec<(String, String)>, String) {
        let payload = match (run.command, run.script) {
            (Some(argv), _) => Payload::Command(argv.to_vec()),
            (None, Some(s)) => Payload::Script(s.to_string()),
            (None, None) => Payload::Command(vec!["true".into()]),
        };
        let workers = run
            .placement
            .first()
            .map(|s| (s.cpu.0 / 1000).max(1))
            .unwrap_or(1);
        let mut env: Vec<(String, String)> = run
            .user_env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let named =
            |list: Vec<(&'static str, String)>| list.into_iter().map(|(k, v)| (k.to_string(), v));
        env.extend(named(run.identity));
        env.push(("TESSERA_CPU_WORKERS".into(), workers.to_string()));
        env.push(("TESSERA_GPUS".into(), run.gpus.to_string()));
        env.extend(named(run.after_gpus));
        if let Some(url) = &self.callback_url {
            env.push(("TESSERA_URL".into(), url.clone()));
        }
        let gpu_type = run
            .alloc
            .and_then(|a| a.shares.first())
            .and_then(|s| self.map.cluster.nodes.get(s.node.index()))
            .map(|n| self.map.cluster.catalog.get(n.gpu).name.clone())
            .unwrap_or_default();
        if let Some(plan) = run.plan {
            env.push(("TESSERA_PLAN_DP".into(), plan.data.to_string()));
            env.push(("TESSERA_PLAN_TP".into(), plan.tensor.to_string()));
            env.push(("TESSERA_PLAN_PP".into(), plan.pipeline.to_string()));
        }
        env.push(("TESSERA_GPU_TYPE".into(), gpu_type.clone()));
        if let Some(GpuPart::Quota {
            sm_limit, memory, ..
        }) = run.alloc.and_then(Allocation::part)
        {
            let per_node = run
                .alloc
                .and_then(|a| a.shares.first())
                .map_or(1, |s| s.device_count() as usize);
            env.push((
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(),
                mps_thread_percentage(sm_limit),
            ));
            env.push((
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(),
                mps_pinned_mem_limit(per_node, memory),
            ));
        }
        (payload, env, gpu_type)
    }
}

/// What [`Core::run_setup`] builds a run's program and environment from.
pub(super) struct RunSetup<'a> {
    pub(super) command: Option<&'a [String]>,
    pub(super) script: Option<&'a str>,
    pub(super) user_env: &'a BTreeMap<String, String>,
    /// The variables naming the run (job or instance, attempt, token).
    pub(super) identity: Vec<(&'static str, String)>,
    /// `TESSERA_GPUS`.
    pub(super) gpus: u32,
    /// Variables after `TESSERA_GPUS` (a job's `TESSERA_START_ITERATION`).
    pub(super) after_gpus: Vec<(&'static str, String)>,
    /// Exported as `TESSERA_PLAN_*` when given.
    pub(super) plan: Option<ParallelPlan>,
    pub(super) placement: &'a [crate::core::runs::PlacedShare],
    pub(super) alloc: Option<&'a Allocation>,
}
