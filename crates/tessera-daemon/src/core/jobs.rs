//! Jobs: a spec as the policy sees it, and the job table.

use super::*;

impl Core {
    pub(super) fn training_job(
        &self,
        idx: usize,
        spec: &JobSpec,
        submit_us: u64,
    ) -> Result<TrainingJob, ApiError> {
        let gpu_types = match &spec.gpu_type {
            Some(t) => vec![self.map.resolve_gpu(t).ok_or_else(|| {
                let known = self.map.gpu_type_names();
                ApiError::new(
                    400,
                    "unknown_gpu_type",
                    format!(
                        "unknown GPU type {t:?} (this cluster has: {})",
                        known.join(", ")
                    ),
                )
            })?],
            None => Vec::new(),
        };
        let mig = match &spec.mig {
            Some(text) => Some(self.mig_request(text, &gpu_types)?),
            None => None,
        };
        let duration = spec.hints.duration_seconds.unwrap_or(DEFAULT_DURATION_SECS);
        Ok(TrainingJob {
            id: tessera_model::JobId(idx as u32),
            name: spec.name.as_str().into(),
            submit: SimTime::from_micros(submit_us),
            tenant: spec.tenant.clone().unwrap_or_default(),
            priority: spec.priority,
            model: spec.hints.model.clone().unwrap_or_default(),
            batch_size: spec.hints.batch_size,
            gpus: spec.gpus,
            gpu_types,
            iterations: spec
                .hints
                .iterations
                .unwrap_or_else(|| duration.ceil().max(1.0) as u64),
            duration: SimDuration::from_secs_f64(duration),
            cpu: spec.cpu,
            memory: spec.memory,
            gpu_share: None,
            mig,
        })
    }

    /// A job's `mig` field, checked against this cluster: the GPU type it names (if any)
    /// must be MIG-capable with that profile, and some node must have such GPUs.
    pub(super) fn mig_request(
        &self,
        text: &str,
        gpu_types: &[tessera_model::GpuModelId],
    ) -> Result<tessera_model::MigRequest, ApiError> {
        let bad = |m: String| ApiError::new(400, "invalid_mig", format!("mig: {m}"));
        let req = tessera_model::MigRequest::parse(text).map_err(bad)?;
        let catalog = &self.map.cluster.catalog;
        catalog.check_mig_request(&req, gpu_types).map_err(bad)?;
        let on_some_node = self.map.cluster.nodes.iter().any(|n| {
            (gpu_types.is_empty() || gpu_types.contains(&n.gpu))
                && catalog
                    .mig_geometry(n.gpu)
                    .is_some_and(|g| req.profile().is_none_or(|p| g.find_profile(p).is_some()))
        });
        if !on_some_node {
            let mut have: Vec<&str> = Vec::new();
            for n in &self.map.cluster.nodes {
                for p in catalog.mig_geometry(n.gpu).iter().flat_map(|g| &g.profiles) {
                    if !have.contains(&p.name.as_str()) {
                        have.push(&p.name);
                    }
                }
            }
            return Err(bad(format!(
                "no GPU of this cluster offers {req} (its MIG profiles: {})",
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            )));
        }
        Ok(req)
    }

    pub(super) fn push_job(&mut self, row: JobRow, spec: JobSpec, tj: TrainingJob) -> usize {
        let idx = self.jobs.len();
        self.by_id.insert(row.id, idx);
        self.next_id = self.next_id.max(row.id + 1);
        if !row.state.is_terminal() {
            self.active.insert(idx);
            *self
                .active_per_tenant
                .entry(row.tenant.clone())
                .or_default() += 1;
        }
        if row.state == JobState::Pending {
            *self.pending_per_priority.entry(row.priority).or_default() += 1;
        }
        if let Some(h) = &row.handle {
            self.by_handle.insert(h.clone(), idx);
        }
        if let Some(t) = &row.job_token_sha256 {
            self.job_tokens.insert(t.clone(), idx);
        }
        // Service already attained, as recorded (exact to the µs it was written from).
        let attained_us = (row.attained_gpu_secs.max(0.0) * 1e6).round() as u64;
        let mut knowledge = self.profile(row.id, &tj);
        // What earlier jobs of its model and batch size were observed at, when any.
        let mut observed = Vec::new();
        let key = tessera_sched::book::ProfileCache::key(&tj);
        if let Some((k, seen)) = self.profile_cache.knowledge(&key, &knowledge) {
            knowledge = k;
            observed = seen;
        }
        let inherited = observed.len();
        self.jobs.push(Job {
            row,
            spec,
            alloc: None,
            submit_failures: 0,
            lost_runs: 0,
            held: false,
            parked: None,
            unverified_runs: 0,
            archived: false,
            knowledge,
            observed,
            inherited,
            reported: None,
            points: Vec::new(),
            attained_us,
            resumes_us: 0,
        });
        self.specs.push(tj);
        self.touch(idx);
        idx
    }

    /// Profiles the jobs of this core from the catalogue of `truth` (a registered truth's
    /// name), with `profiler` ([`tessera_mechanisms::run_profiler`] for the policy): each job
    /// then carries, from its submission (or a restart), the knowledge the simulator's
    /// profiling gives a job of its model and batch size, without the profiling run (real mode
    /// measures nothing before a job starts; the profile's cost is not paid).
    pub fn set_profiler(
        &mut self,
        truth: &str,
        profiler: Option<std::sync::Arc<dyn tessera_perf::Profiler>>,
    ) {
        self.profiler = Some(KnowledgeSource {
            truth: truth.to_string(),
            profiler,
        });
    }

    /// What the configured truth's catalogue knows of `job` (daemon id `id`): nothing without
    /// one. The noise of a profile with errors is drawn from a stream seeded by the job's id,
    /// so a restart gives a job the same knowledge.
    pub(super) fn profile(&self, id: i64, job: &TrainingJob) -> tessera_model::Knowledge {
        match self.profiler.as_ref().and_then(|s| s.profiler.as_ref()) {
            Some(p) => {
                let mut rng = tessera_model::SimRng::seed_from_u64(id as u64);
                p.profile(job, &self.map.cluster, &mut rng)
            }
            None => tessera_model::Knowledge::new(),
        }
    }

    /// Calibrates job `idx`'s catalogue estimates (`ConfigEstimates`, what Gavel, Sia, Crius
    /// and elastic scaling read) with the rate it reports running on whole GPUs of one type:
    /// the configuration it runs on takes the observed rate, every other one the catalogue's
    /// estimate scaled by observed / estimated there (the catalogue gives the shape across
    /// GPU types and counts, the job's own report the level); configurations observed before
    /// keep their observed rates. Nothing changes for a job the catalogue knows nothing of
    /// (its reported rate is already its `throughput_estimate`), on MIG slices or quotas, or
    /// across GPU types.
    pub(super) fn calibrate(&mut self, idx: usize, observed: f64) {
        let Some(job) = self.jobs.get(idx) else {
            return;
        };
        let (Some(alloc), Some(spec)) = (job.alloc.as_ref(), self.specs.get(idx)) else {
            return;
        };
        if job.row.state != JobState::Running
            || alloc.part().is_some_and(|p| !matches!(p, GpuPart::Whole))
        {
            return;
        }
        let mut types = alloc
            .shares
            .iter()
            .filter_map(|s| self.map.cluster.nodes.get(s.node.index()).map(|n| n.gpu));
        let Some(gpu) = types.next() else {
            return;
        };
        if types.any(|t| t != gpu) {
            return;
        }
        let seen = tessera_sched::book::Observed {
            gpu,
            count: alloc.gpus(),
            rate: observed,
        };
        // The catalogue's estimates as profiled, never the calibrated ones (no compounding).
        let base = self.profile(job.row.id, spec);
        let key = tessera_sched::book::ProfileCache::key(spec);
        let job = &mut self.jobs[idx];
        if let Some(knowledge) = tessera_sched::book::calibrated(&base, &mut job.observed, seen) {
            job.knowledge = knowledge;
            job.reported = Some(seen);
            self.profile_cache.record(key, &base, seen);
            self.touch(idx);
        }
    }

    /// Where job `idx`'s knowledge comes from, for `describe`.
    pub(super) fn knowledge_source(&self, idx: usize) -> String {
        let (Some(job), Some(spec)) = (self.jobs.get(idx), self.specs.get(idx)) else {
            return String::new();
        };
        let what = if spec.model.is_empty() {
            "a job without a model hint".to_string()
        } else {
            format!("model {:?}", spec.model)
        };
        let mut text = match &self.profiler {
            None => "none: no truth configured, policies see no profile".to_string(),
            Some(source) => self.knowledge_text(idx, source, &what),
        };
        if !job.points.is_empty() {
            let points: Vec<String> = job
                .points
                .iter()
                .map(|(p, rate)| {
                    format!(
                        "{} CPUs, {} GiB: {rate} it/s",
                        p.cpu_milli as f64 / 1000.0,
                        p.memory_bytes as f64 / f64::from(1u32 << 30)
                    )
                })
                .collect();
            text += &format!(
                "; rates reported at its CPU/memory points: {}",
                points.join("; ")
            );
        }
        text
    }

    fn knowledge_text(&self, idx: usize, source: &KnowledgeSource, what: &str) -> String {
        let (Some(job), Some(spec)) = (self.jobs.get(idx), self.specs.get(idx)) else {
            return String::new();
        };
        if !job.knowledge.is_empty() {
            let mut text = format!("catalogue of truth {}: its profile of {what}", source.truth);
            if job.inherited > 0 {
                let batch = spec.batch_size.map_or_else(
                    || "no batch size".to_string(),
                    |b| format!("batch size {b}"),
                );
                text += &format!(
                    ", calibrated by {} rate(s) observed of earlier jobs of this model and {batch} \
                     (profile cache)",
                    job.inherited
                );
            }
            if let Some(tessera_sched::book::Observed { gpu, count, rate }) = job.reported {
                let name = &self.map.cluster.catalog.get(gpu).name;
                text += &format!(
                    ", calibrated by the job's reported rate ({rate} it/s on {count} x {name})"
                );
            }
            text
        } else if source.profiler.is_none() {
            format!(
                "none: truth {} profiles nothing for policy {}",
                source.truth,
                self.policy.name()
            )
        } else {
            format!("none: truth {} knows nothing of {what}", source.truth)
        }
    }
}
