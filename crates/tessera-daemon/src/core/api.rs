//! API requests answered by the core: authentication, submission, cancellation, progress
//! reports and the read-only views. Nothing here does I/O; writes go to the pending batch,
//! which the driver persists before it answers.

use std::collections::{BTreeMap, HashMap};

use tessera_model::{Bytes, MilliCpu, Resources, SimTime};
use tessera_sched::Ledger;

use super::{Command, Core};
use crate::config::hash_token;
use crate::core::records::{JobQuery, JobRow, RunState, TransitionRow};
use crate::core::runs::NodeHealth;
use crate::error::ApiError;
use crate::metrics::Gauges;
use crate::spec::JobSpec;
use crate::types::{
    GpuView, JobDetail, JobList, JobState, JobView, NodeList, NodeView, Progress, ProgressAck,
    ProgressReport, QueueSummary, QueueView,
};

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// A tenant token.
    Tenant { name: String, admin: bool },
    /// A job's own token (SDK): may report progress and read the job.
    Job { id: i64 },
}

/// One API request for the core.
#[derive(Clone, Debug)]
pub(crate) enum Request {
    Submit {
        body: String,
    },
    List {
        state: Option<JobState>,
        queue: Option<String>,
        /// Only jobs with a larger id (the previous page's `nextAfter`).
        after: Option<i64>,
        limit: usize,
    },
    Get {
        id: i64,
    },
    Cancel {
        id: i64,
    },
    Nodes,
    Queue,
    Progress {
        id: i64,
        report: Report<ProgressReport>,
    },
    Metrics,
    /// The live state a forecast forks from (`GET /v1/snapshot`, administrators only),
    /// answered by the engine.
    Snapshot,
    /// An administrator sets a node's health (`None`: back to what the backend reports).
    SetNodeHealth {
        node: String,
        health: Option<NodeHealth>,
    },
    /// `POST /v1/services` (the body as sent), parsed on the scheduling thread: tests only (the API parses off it, see
    /// `SubmitParsedService`).
    #[cfg_attr(not(test), allow(dead_code))]
    SubmitService {
        body: String,
    },
    /// `POST /v1/services` as the API sends it: parsed off the scheduling thread against the
    /// GPU catalogue `catalog`; parsed again here only if the cluster's catalogue is no longer
    /// that one (a comparison of a few dozen models: cheap).
    SubmitParsedService {
        parsed: Box<crate::services::ServiceSubmission>,
        body: String,
        catalog: std::sync::Arc<tessera_model::GpuCatalog>,
    },
    /// `GET /v1/services`.
    ListServices,
    /// `GET /v1/services/{id}`.
    GetService {
        id: i64,
    },
    /// `DELETE /v1/services/{id}`.
    RetireService {
        id: i64,
    },
    /// `GET /v1/events`: recent events after `after` (a `seq`), at most `limit`.
    Events {
        after: Option<u64>,
        limit: usize,
    },
    /// `POST /v1/services/{id}/instances/{instance}/load` (the instance's own token).
    InstanceLoad {
        service: i64,
        instance: i64,
        report: Report<crate::services::LoadReport>,
    },
}

/// A report's body: parsed already, or the JSON text as sent, which the core parses only once
/// the caller is authenticated (an unauthenticated client must not get its body parsed).
#[derive(Clone, Debug)]
pub(crate) enum Report<T> {
    /// Already parsed (in-process callers).
    Parsed(T),
    /// The request body, JSON.
    Json(String),
}

impl<T> From<T> for Report<T> {
    fn from(v: T) -> Self {
        Report::Parsed(v)
    }
}

impl<T: serde::de::DeserializeOwned> Report<T> {
    /// The report, parsing the body if needed.
    pub(crate) fn parse(self) -> Result<T, ApiError> {
        match self {
            Report::Parsed(v) => Ok(v),
            Report::Json(text) => serde_json::from_str(&text)
                .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}"))),
        }
    }
}

/// The core's answer.
#[derive(Debug)]
pub(crate) enum Response {
    Job(Box<JobView>),
    Detail(Box<JobDetail>),
    Jobs(JobList),
    Nodes(NodeList),
    Queue(QueueView),
    Ack(ProgressAck),
    Events(crate::events::EventList),
    Text(String),
    Service(Box<crate::services::ServiceView>),
    Services(crate::services::ServiceList),
    Snapshot(Box<crate::forecast_snapshot::LiveSnapshot>),
}

fn secs(us: u64) -> f64 {
    us as f64 / 1e6
}

impl Core {
    pub(super) fn authenticate(&self, token: Option<&str>) -> Result<Caller, ApiError> {
        let token = token
            .filter(|t| !t.is_empty() && t.len() <= 512)
            .ok_or_else(ApiError::unauthorized)?;
        let hash = hash_token(token);
        if let Some((name, admin)) = self.tokens.get(&hash) {
            return Ok(Caller::Tenant {
                name: name.clone(),
                admin: *admin,
            });
        }
        if let Some(&idx) = self.job_tokens.get(&hash) {
            return Ok(Caller::Job {
                id: self.jobs[idx].row.id,
            });
        }
        Err(ApiError::unauthorized())
    }

    /// Checks that `token` is an administrator's (what only they may read).
    pub(crate) fn authorize_admin(&self, token: Option<&str>) -> Result<(), ApiError> {
        match self.authenticate(token)? {
            Caller::Tenant { admin: true, .. } => Ok(()),
            _ => Err(ApiError::forbidden(
                "only an administrator reads the whole cluster's state",
            )),
        }
    }

    pub(super) fn can_see(caller: &Caller, row: &JobRow) -> bool {
        match caller {
            Caller::Tenant { admin: true, .. } => true,
            Caller::Tenant { name, .. } => &row.tenant == name,
            Caller::Job { id } => *id == row.id,
        }
    }

    fn lookup(&self, caller: &Caller, id: i64) -> Result<usize, ApiError> {
        // Another tenant's job answers exactly like a missing one: existence does not leak.
        match self.by_id.get(&id) {
            Some(&idx) if Self::can_see(caller, &self.jobs[idx].row) => Ok(idx),
            _ => Err(ApiError::not_found(format!("no job {id}"))),
        }
    }

    /// Pending jobs in queue order: priority (high first), then submission, then id.
    fn pending_order(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .active
            .iter()
            .copied()
            .filter(|&i| self.jobs[i].row.state == JobState::Pending)
            .collect();
        v.sort_by_key(|&i| {
            let r = &self.jobs[i].row;
            (-r.priority, r.submit_us, r.id)
        });
        v
    }

    fn pending_reason(&self, idx: usize, exact: bool) -> Option<String> {
        let job = &self.jobs[idx];
        match job.row.state {
            JobState::Pending => {
                if let Some(m) = job
                    .row
                    .message
                    .as_deref()
                    .filter(|m| m.starts_with("backend submit failed"))
                {
                    return Some(m.to_string());
                }
                let spec = &self.specs[idx];
                let fits = if exact {
                    Ledger::new(&self.map.cluster, &self.free)
                        .place(spec)
                        .is_some()
                } else {
                    let free: u64 = self
                        .map
                        .cluster
                        .nodes
                        .iter()
                        .filter(|n| spec.gpu_types.is_empty() || spec.gpu_types.contains(&n.gpu))
                        .map(|n| self.free[n.id.index()].gpus as u64)
                        .sum();
                    free >= spec.gpus as u64
                };
                Some(if fits { "Priority" } else { "Resources" }.to_string())
            }
            JobState::Starting => Some("Starting".into()),
            JobState::Running => job
                .row
                .backend_state
                .as_deref()
                .filter(|s| s.starts_with("PENDING"))
                .map(|s| format!("Backend: {s}")),
            _ => None,
        }
    }

    fn view(&self, idx: usize, position: Option<u32>, exact: bool) -> JobView {
        let job = &self.jobs[idx];
        let mut view = self.render(
            &job.row,
            &job.spec,
            job.alloc.as_ref(),
            self.pending_reason(idx, exact),
            position,
        );
        view.knowledge = Some(self.knowledge_source(idx));
        view
    }

    /// The view of a job from its row, its spec and what it holds.
    fn render(
        &self,
        r: &JobRow,
        spec: &JobSpec,
        alloc: Option<&tessera_model::Allocation>,
        pending_reason: Option<String>,
        position: Option<u32>,
    ) -> JobView {
        JobView {
            id: r.id,
            name: r.name.clone(),
            tenant: r.tenant.clone(),
            queue: r.queue.clone(),
            state: r.state,
            gpus: spec.gpus,
            gpu_type: spec.gpu_type.clone(),
            priority: r.priority,
            submitted_at: secs(r.submit_us),
            started_at: r.start_us.map(secs),
            finished_at: r.end_us.map(secs),
            attempt: r.attempt,
            preemptions: r.preemptions,
            allocation: r.placement.clone(),
            gpu_model: alloc
                .and_then(|a| a.shares.first())
                .and_then(|s| self.map.cluster.nodes.get(s.node.index()))
                .map(|n| self.map.cluster.catalog.get(n.gpu).name.clone()),
            plan: alloc.map(|a| {
                a.plan.unwrap_or(tessera_model::ParallelPlan::data_parallel(
                    a.devices().max(1),
                ))
            }),
            pending_reason,
            reason: None,
            queue_position: position,
            backend_id: r.handle.clone(),
            backend_state: r.backend_state.clone(),
            exit_code: r.exit_code,
            message: r.message.clone(),
            progress: (r.progress_us.is_some()).then(|| Progress {
                iterations: r.progress_iters,
                samples_per_second: r.samples_per_sec,
                iterations_per_second: r.iters_per_sec,
                updated_at: r.progress_us.map(secs),
            }),
            knowledge: None,
            expected_start: None,
        }
    }

    /// One pending job's place in the queue (a scan, no sort).
    pub(super) fn position(&self, idx: usize) -> Option<u32> {
        let key = |i: usize| {
            let r = &self.jobs[i].row;
            (-r.priority, r.submit_us, r.id)
        };
        if self.jobs[idx].row.state != JobState::Pending {
            return None;
        }
        let mine = key(idx);
        let ahead = self
            .active
            .iter()
            .filter(|&&i| self.jobs[i].row.state == JobState::Pending && key(i) < mine)
            .count();
        Some(ahead as u32 + 1)
    }

    /// The queue positions of the pending jobs among `idxs` (a page of a listing), in one
    /// pass over the active jobs and no sort of the queue: each pending job counts once for
    /// every listed job it is ahead of (a difference array over the listed keys).
    pub(super) fn positions_of(&self, idxs: &[usize]) -> HashMap<usize, u32> {
        let key = |i: usize| {
            let r = &self.jobs[i].row;
            (-r.priority, r.submit_us, r.id)
        };
        let mut listed: Vec<((i32, u64, i64), usize)> = idxs
            .iter()
            .copied()
            .filter(|&i| self.jobs[i].row.state == JobState::Pending)
            .map(|i| (key(i), i))
            .collect();
        if listed.is_empty() {
            return HashMap::new();
        }
        listed.sort_unstable();
        listed.dedup();
        let mut ahead = vec![0u32; listed.len() + 1];
        for &i in &self.active {
            if self.jobs[i].row.state != JobState::Pending {
                continue;
            }
            let k = key(i);
            // Listed jobs from this index on have job `i` ahead of them.
            let from = listed.partition_point(|(l, _)| *l <= k);
            ahead[from] += 1;
        }
        let mut acc = 0u32;
        listed
            .iter()
            .zip(&ahead)
            .map(|((_, i), n)| {
                acc += n;
                (*i, acc + 1)
            })
            .collect()
    }

    /// Every pending job's position, by sorting the queue (tests compare with it).
    #[cfg(test)]
    pub(super) fn positions(&self) -> HashMap<usize, u32> {
        self.pending_order()
            .into_iter()
            .enumerate()
            .map(|(p, i)| (i, p as u32 + 1))
            .collect()
    }

    /// Accepts a batch of submissions `(token, body)`. Accepted jobs are written to the
    /// pending batch: the driver must persist it (drain [`Core::poll_command`]) before it
    /// acknowledges any of them (one group commit for the whole batch).
    pub fn submit(
        &mut self,
        now: SimTime,
        items: Vec<(Option<String>, String)>,
    ) -> Vec<Result<JobView, ApiError>> {
        let now_us = now.as_micros();
        let results: Vec<Result<usize, ApiError>> = items
            .into_iter()
            .map(|(token, body)| self.submit_one(token.as_deref(), &body, now_us))
            .collect();
        if results.iter().any(|r| r.is_ok()) {
            self.trigger.arrival = true;
        }
        // A new job queues behind every pending job of its priority or higher except its own
        // batch-mates accepted after it (same submission time, larger id): no sort needed.
        let mut later_in_batch: BTreeMap<i32, u32> = BTreeMap::new();
        let mut positions = vec![0u32; results.len()];
        for (i, r) in results.iter().enumerate().rev() {
            if let Ok(idx) = r {
                let p = self.jobs[*idx].row.priority;
                let ahead: usize = self.pending_per_priority.range(p..).map(|(_, n)| n).sum();
                let later = later_in_batch.entry(p).or_default();
                positions[i] = (ahead as u32).saturating_sub(*later);
                *later += 1;
            }
        }
        results
            .into_iter()
            .zip(positions)
            .map(|(r, pos)| r.map(|idx| self.view(idx, Some(pos), false)))
            .collect()
    }

    /// Why the daemon's policy would not honour `demands` (the simulator's check and words:
    /// docs/capabilities.md), or `None`. A policy outside the registry declares nothing and
    /// is not checked.
    pub(super) fn unsupported(
        &self,
        demands: Vec<tessera_mechanisms::capabilities::Demand>,
    ) -> Option<String> {
        use tessera_mechanisms::capabilities::{policy_info, refusal, unsupported};
        let info = policy_info(self.policy.name()).ok()?;
        let missing = unsupported(info.capabilities, demands);
        (!missing.is_empty()).then(|| refusal(info.name, &missing, 3))
    }

    fn submit_one(
        &mut self,
        token: Option<&str>,
        body: &str,
        now_us: u64,
    ) -> Result<usize, ApiError> {
        let caller = self.authenticate(token)?;
        let Caller::Tenant { name, admin } = caller else {
            return Err(ApiError::forbidden("a job token cannot submit jobs"));
        };
        let mut spec = JobSpec::parse(body)?;
        let tenant = match spec.tenant.take() {
            Some(t) if t != name && !admin => {
                return Err(ApiError::forbidden(format!(
                    "cannot submit as tenant {t:?}"
                )));
            }
            Some(t) => t,
            None => name,
        };
        spec.tenant = Some(tenant.clone());
        let limits = &self.settings.limits;
        if spec.gpus > limits.max_gpus_per_job {
            return Err(ApiError::bad_request(format!(
                "gpus: more than the limit of {}",
                limits.max_gpus_per_job
            )));
        }
        if self.active.len() >= limits.max_active_jobs {
            return Err(ApiError::too_many(format!(
                "the daemon holds its limit of {} active jobs",
                limits.max_active_jobs
            )));
        }
        if self.active_per_tenant.get(&tenant).copied().unwrap_or(0)
            >= limits.max_active_jobs_per_tenant
        {
            return Err(ApiError::too_many(format!(
                "tenant {tenant} holds its limit of {} active jobs",
                limits.max_active_jobs_per_tenant
            )));
        }
        if self.settings.whole_cpus {
            spec.cpu = spec.cpu.map(|c| MilliCpu(c.0.div_ceil(1000) * 1000));
        }
        spec.memory = spec.memory.map(|m| Bytes(m.0.div_ceil(1 << 20) << 20));
        let idx = self.jobs.len();
        let tj = self.training_job(idx, &spec, now_us)?;
        let asks = tessera_mechanisms::capabilities::job_demands(&self.map.cluster, &tj, None);
        if let Some(reason) = self.unsupported(asks) {
            return Err(ApiError::new(400, "unsupported", reason));
        }
        // What the policy itself says it will never start (the simulator rejects the same
        // job at arrival with the same words).
        if let Some(reason) = self.policy.refuses(&tj, &self.map.cluster) {
            return Err(ApiError::new(400, "refused", reason));
        }
        let full: Vec<Resources> = self
            .map
            .cluster
            .nodes
            .iter()
            .map(|n| self.map.cluster.capacity(n.id))
            .collect();
        if Ledger::new(&self.map.cluster, &full).place(&tj).is_none() {
            return Err(ApiError::new(
                400,
                "unsatisfiable",
                format!(
                    "no placement on this cluster can hold {} GPU(s){}{}{}{}",
                    spec.gpus,
                    spec.gpu_type
                        .as_deref()
                        .map(|t| format!(" of type {t}"))
                        .unwrap_or_default(),
                    spec.cpu.map(|c| format!(", cpu {c}")).unwrap_or_default(),
                    spec.memory
                        .map(|m| format!(", memory {m}"))
                        .unwrap_or_default(),
                    spec.gpu_type
                        .as_deref()
                        .and_then(|t| self.map.absent_type_hint(t))
                        .map(|h| format!(": {h}"))
                        .unwrap_or_default(),
                ),
            ));
        }
        let spec_json =
            serde_json::to_string(&spec).map_err(|e| ApiError::internal(e.to_string()))?;
        let id = self.next_id;
        let row = JobRow {
            id,
            tenant: tenant.clone(),
            queue: spec.queue.clone().unwrap_or_else(|| tenant.clone()),
            name: spec.name.clone(),
            spec_json,
            state: JobState::Pending,
            priority: spec.priority,
            submit_us: now_us,
            start_us: None,
            end_us: None,
            attempt: 0,
            placement: Vec::new(),
            plan: None,
            handle: None,
            exit_code: None,
            message: Some("submitted".into()),
            progress_iters: 0,
            samples_per_sec: None,
            iters_per_sec: None,
            progress_us: None,
            attained_gpu_secs: 0.0,
            preemptions: 0,
            job_token_sha256: None,
            backend_state: None,
        };
        self.pending.jobs.push(row.clone());
        self.pending.transitions.push(TransitionRow {
            job_id: id,
            at_us: now_us,
            from: None,
            to: JobState::Pending,
            detail: "submitted".into(),
        });
        self.metrics.submissions += 1;
        Ok(self.push_job(row, spec, tj))
    }

    /// Answers one request. A [`Response::Detail`] comes without the job's history, which
    /// only the store holds: the driver adds it.
    pub(crate) fn handle_request(
        &mut self,
        now: SimTime,
        token: Option<&str>,
        req: Request,
    ) -> Result<Response, ApiError> {
        if let Request::Metrics = req {
            if !self.settings.public_metrics {
                self.authenticate(token)?;
            }
            return Ok(Response::Text(self.render_metrics(now)));
        }
        if let Request::Submit { body } = req {
            let mut r = self.submit(now, vec![(token.map(String::from), body)]);
            return r
                .pop()
                .unwrap_or_else(|| Err(ApiError::internal("no result")))
                .map(|j| Response::Job(Box::new(j)));
        }
        if let Request::InstanceLoad {
            service,
            instance,
            report,
        } = req
        {
            return self.instance_load(now, token, service, instance, report);
        }
        let caller = self.authenticate(token)?;
        match req {
            Request::InstanceLoad { .. } => Err(ApiError::internal("unreachable request")),
            Request::SubmitService { .. }
            | Request::SubmitParsedService { .. }
            | Request::ListServices
            | Request::GetService { .. }
            | Request::RetireService { .. } => self.service_request(now, &caller, req),
            Request::List {
                state,
                queue,
                after,
                limit,
            } => {
                // Jobs are held in id order: a page starts with a binary search, not a scan.
                let start = after.map_or(0, |a| self.jobs.partition_point(|j| j.row.id <= a));
                let mut page: Vec<usize> = (start..self.jobs.len())
                    .filter(|&i| {
                        let r = &self.jobs[i].row;
                        Self::can_see(&caller, r)
                            && state.is_none_or(|s| r.state == s)
                            && queue.as_ref().is_none_or(|q| &r.queue == q)
                    })
                    .take(limit.saturating_add(1))
                    .collect();
                let more = page.len() > limit;
                page.truncate(limit);
                let next_after = if more {
                    page.last().map(|&i| self.jobs[i].row.id)
                } else {
                    None
                };
                let positions = self.positions_of(&page);
                let mut why = self.explainer(now, &caller);
                let jobs = page
                    .into_iter()
                    .map(|i| {
                        let position = positions.get(&i).copied();
                        let mut v = self.view(i, position, false);
                        v.reason = position.and_then(|p| why.explain(i, Some(p)));
                        v
                    })
                    .collect();
                Ok(Response::Jobs(JobList { jobs, next_after }))
            }
            Request::Get { id } => {
                let idx = self.lookup(&caller, id)?;
                let position = self.position(idx);
                let mut job = self.view(idx, position, true);
                job.reason = self.wait_reason(idx, now, &caller);
                Ok(Response::Detail(Box::new(JobDetail {
                    job,
                    spec: self.jobs[idx].spec.clone(),
                    transitions: Vec::new(),
                })))
            }
            Request::Cancel { id } => {
                if matches!(caller, Caller::Job { .. }) {
                    return Err(ApiError::forbidden("a job token cannot cancel jobs"));
                }
                let idx = self.lookup(&caller, id)?;
                self.cancel(now, idx)?;
                Ok(Response::Job(Box::new(self.view(idx, None, false))))
            }
            Request::Nodes => Ok(Response::Nodes(self.nodes())),
            Request::SetNodeHealth { node, health } => {
                if !matches!(caller, Caller::Tenant { admin: true, .. }) {
                    return Err(ApiError::forbidden(
                        "only an administrator sets node health",
                    ));
                }
                self.set_node_health(now, &node, health)?;
                Ok(Response::Nodes(self.nodes()))
            }
            Request::Queue => Ok(Response::Queue(self.queue(&caller, now))),
            Request::Events { after, limit } => {
                Ok(Response::Events(self.events(&caller, after, limit)))
            }
            Request::Progress { id, report } => {
                // Only the job itself reports progress: a tenant token (or another job's)
                // could otherwise feed the policy made-up throughput.
                if !matches!(caller, Caller::Job { id: own } if own == id) {
                    return Err(ApiError::forbidden(
                        "progress is accepted only with the job's own token (TESSERA_TOKEN)",
                    ));
                }
                let idx = self.lookup(&caller, id)?;
                let report = report.parse()?;
                self.progress(now, idx, report)
            }
            Request::Metrics | Request::Submit { .. } | Request::Snapshot => {
                Err(ApiError::internal("unreachable request"))
            }
        }
    }

    /// A stored job's view when the core no longer holds it (finished and archived).
    fn stored_view(&self, row: &JobRow) -> Result<(JobView, JobSpec), ApiError> {
        let spec: JobSpec = serde_json::from_str(&row.spec_json)
            .map_err(|e| ApiError::internal(format!("job {}: stored spec: {e}", row.id)))?;
        Ok((self.render(row, &spec, None, None, None), spec))
    }

    /// Answers a request about a job the core has archived, from its stored `row`: exactly
    /// what the core answered while it held the finished job.
    pub(crate) fn answer_archived(
        &self,
        token: Option<&str>,
        req: Request,
        row: &JobRow,
    ) -> Result<Response, ApiError> {
        let caller = self.authenticate(token)?;
        if !Self::can_see(&caller, row) {
            return Err(ApiError::not_found(format!("no job {}", row.id)));
        }
        let finished =
            || ApiError::conflict(format!("job {} is already {}", row.id, row.state.as_str()));
        match req {
            Request::Get { .. } => {
                let (job, spec) = self.stored_view(row)?;
                Ok(Response::Detail(Box::new(JobDetail {
                    job,
                    spec,
                    transitions: Vec::new(),
                })))
            }
            Request::Cancel { .. } => {
                if matches!(caller, Caller::Job { .. }) {
                    return Err(ApiError::forbidden("a job token cannot cancel jobs"));
                }
                Err(finished())
            }
            Request::Progress { id, .. } => {
                if !matches!(caller, Caller::Job { id: own } if own == id) {
                    return Err(ApiError::forbidden(
                        "progress is accepted only with the job's own token (TESSERA_TOKEN)",
                    ));
                }
                Err(finished())
            }
            _ => Err(ApiError::internal("not a request about one job")),
        }
    }

    /// `GET /v1/jobs` served from the store: `fetch` runs the query (the caller's visibility
    /// included); jobs the core still holds are shown as it sees them (queue position,
    /// pending reason, allocation), the others from their stored rows.
    pub(crate) fn list_stored(
        &self,
        token: Option<&str>,
        req: Request,
        fetch: impl FnOnce(&JobQuery) -> Result<Vec<JobRow>, String>,
    ) -> Result<Response, ApiError> {
        let caller = self.authenticate(token)?;
        let Request::List {
            state,
            queue,
            after,
            limit,
        } = req
        else {
            return Err(ApiError::internal("not a listing"));
        };
        let mut query = JobQuery {
            state,
            queue,
            after,
            limit: limit.saturating_add(1),
            ..JobQuery::default()
        };
        match &caller {
            Caller::Tenant { admin: true, .. } => {}
            Caller::Tenant { name, .. } => query.tenant = Some(name.clone()),
            Caller::Job { id } => query.id = Some(*id),
        }
        let mut rows = fetch(&query).map_err(ApiError::internal)?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next_after = if more {
            rows.last().map(|r| r.id)
        } else {
            None
        };
        let held: Vec<Option<usize>> = rows
            .iter()
            .map(|r| self.by_id.get(&r.id).copied())
            .collect();
        let listed: Vec<usize> = held.iter().flatten().copied().collect();
        let positions = self.positions_of(&listed);
        let mut jobs = Vec::with_capacity(rows.len());
        for (row, idx) in rows.iter().zip(held) {
            jobs.push(match idx {
                Some(i) => self.view(i, positions.get(&i).copied(), false),
                None => self.stored_view(row)?.0,
            });
        }
        Ok(Response::Jobs(JobList { jobs, next_after }))
    }

    /// Cancels a job by daemon id as an administrator would (embedding, tests).
    pub fn cancel_job(&mut self, now: SimTime, id: i64) -> Result<(), ApiError> {
        let idx = *self
            .by_id
            .get(&id)
            .ok_or_else(|| ApiError::not_found(format!("no job {id}")))?;
        self.cancel(now, idx)
    }

    fn cancel(&mut self, now: SimTime, idx: usize) -> Result<(), ApiError> {
        let state = self.jobs[idx].row.state;
        if state.is_terminal() {
            return Err(ApiError::conflict(format!(
                "job {} is already {}",
                self.jobs[idx].row.id,
                state.as_str()
            )));
        }
        let run = self.detach_handle(idx, RunState::Stop);
        let mut stopping = run.as_ref().map(|r| r.handle.clone());
        if run.is_none() {
            // A launch in flight: its run is stopped when it answers, or found by name and
            // stopped by a restart before that (nothing to verify: the job is cancelled).
            stopping = self.record_launch_in_flight(idx);
        }
        // Its GPUs drain until the backend reports the run gone.
        self.drain_job_run(idx, stopping);
        self.release(idx);
        self.jobs[idx].row.backend_state = None;
        self.transition(
            idx,
            JobState::Cancelled,
            now.as_micros(),
            "cancelled by a client",
        );
        if let Some(run) = run {
            self.act(Command::Stop {
                run,
                preempt: false,
            });
        }
        self.trigger.completion = true;
        Ok(())
    }

    /// Records a progress report for a job by daemon id (the SDK's call, for embedding and
    /// tests; the API authenticates the job's token first).
    pub fn report_progress(
        &mut self,
        now: SimTime,
        id: i64,
        report: ProgressReport,
    ) -> Result<ProgressAck, ApiError> {
        let idx = *self
            .by_id
            .get(&id)
            .ok_or_else(|| ApiError::not_found(format!("no job {id}")))?;
        match self.progress(now, idx, report)? {
            Response::Ack(a) => Ok(a),
            _ => Err(ApiError::internal("unexpected answer")),
        }
    }

    fn progress(
        &mut self,
        now: SimTime,
        idx: usize,
        report: ProgressReport,
    ) -> Result<Response, ApiError> {
        // The store keeps integers as signed 64-bit (beyond, it read back as 0).
        if report.iterations > i64::MAX as u64 {
            return Err(ApiError::bad_request(format!(
                "iterations: must be at most {}",
                i64::MAX
            )));
        }
        let valid = |v: Option<f64>| v.is_none_or(|x| (0.0..1e12).contains(&x));
        if !valid(report.samples_per_second) || !valid(report.iterations_per_second) {
            return Err(ApiError::bad_request(
                "rates must be finite and non-negative",
            ));
        }
        self.touch(idx);
        let job = &mut self.jobs[idx];
        if job.row.state.is_terminal() {
            return Err(ApiError::conflict(format!(
                "job {} is already {}",
                job.row.id,
                job.row.state.as_str()
            )));
        }
        job.row.progress_iters = job.row.progress_iters.max(report.iterations);
        job.row.samples_per_sec = report.samples_per_second.or(job.row.samples_per_sec);
        job.row.iters_per_sec = report.iterations_per_second.or(job.row.iters_per_sec);
        job.row.progress_us = Some(now.as_micros());
        let ack = ProgressAck {
            state: job.row.state,
            cpu_workers: job
                .row
                .placement
                .first()
                .map(|s| (s.cpu.0 / 1000).max(1) as u32)
                .unwrap_or(1),
            gpus: job.row.placement.iter().map(|s| s.gpus).sum(),
            memory_bytes: job.row.placement.iter().map(|s| s.memory.0).sum(),
            point: resource_point(&job.row.placement),
        };
        // A rate measured at the point the job holds now: one point of its CPU/memory
        // profile (a report measured before a retune names the old point and is not one).
        if let (Some(rate), Some(at)) = (report.iterations_per_second, report.point) {
            if at == ack.point && job.row.state == JobState::Running && rate > 0.0 {
                job.points.retain(|(p, _)| *p != at);
                job.points.push((at, rate));
            }
        }
        self.pending.jobs.push(job.row.clone());
        if let Some(rate) = report.iterations_per_second {
            self.calibrate(idx, rate);
        }
        Ok(Response::Ack(ack))
    }

    /// Each GPU of a node as the API shows it.
    fn gpu_views(&self, node: tessera_model::NodeId) -> Vec<GpuView> {
        self.devices
            .gpus(node)
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let i = i as u32;
                let reason = self.unhealthy_gpus.get(&(node.0, i)).cloned();
                let mode = if reason.is_some() {
                    "unhealthy"
                } else if self.reconfiguring.contains_key(&(node.0, i)) {
                    "reconfiguring"
                } else if g.mig.is_some() {
                    "mig"
                } else if g.whole {
                    "whole"
                } else if g.quota_holders > 0 {
                    "shared"
                } else {
                    "free"
                };
                GpuView {
                    index: i,
                    mode: mode.to_string(),
                    layout: g
                        .mig
                        .as_ref()
                        .filter(|_| reason.is_none())
                        .and_then(|l| self.map.placed_layout(node, l)),
                    holders: g.mig_busy.count_ones() + g.quota_holders,
                    sm_requested_permille: g.sm_requested,
                    reason,
                }
            })
            .collect()
    }

    fn nodes(&self) -> NodeList {
        let c = &self.map.cluster;
        let nodes = c
            .nodes
            .iter()
            .zip(&self.map.logical)
            .map(|(n, l)| {
                let cap = self.capacity[n.id.index()];
                let free = self.free[n.id.index()];
                NodeView {
                    name: l.node.clone(),
                    gres_type: l.gres_type.clone(),
                    gpu_model: c.catalog.get(n.gpu).name.clone(),
                    health: l.health,
                    gpus: n.gpus,
                    gpus_allocated: cap.gpus.saturating_sub(free.gpus),
                    cpu: n.cpu,
                    cpu_allocated: MilliCpu(cap.cpu.0.saturating_sub(free.cpu.0)),
                    memory: n.memory,
                    memory_allocated: Bytes(cap.memory.0.saturating_sub(free.memory.0)),
                    devices: self.gpu_views(n.id),
                }
            })
            .collect();
        NodeList { nodes }
    }

    fn queue(&self, caller: &Caller, now: SimTime) -> QueueView {
        let mut queues: BTreeMap<String, QueueSummary> = BTreeMap::new();
        for &idx in &self.active {
            let job = &self.jobs[idx];
            if !Self::can_see(caller, &job.row) {
                continue;
            }
            let q = queues
                .entry(job.row.queue.clone())
                .or_insert_with(|| QueueSummary {
                    name: job.row.queue.clone(),
                    pending: 0,
                    running: 0,
                    pending_gpus: 0,
                    running_gpus: 0,
                });
            if job.row.state == JobState::Pending {
                q.pending += 1;
                q.pending_gpus += job.spec.gpus as u64;
            } else {
                q.running += 1;
                q.running_gpus += job.spec.gpus as u64;
            }
        }
        let mut why = self.explainer(now, caller);
        let pending = self
            .pending_order()
            .into_iter()
            .enumerate()
            .filter(|(_, i)| Self::can_see(caller, &self.jobs[*i].row))
            .map(|(p, i)| {
                let mut v = self.view(i, Some(p as u32 + 1), false);
                v.reason = why.explain(i, Some(p as u32 + 1));
                v
            })
            .collect();
        QueueView {
            policy: self.policy.name().to_string(),
            queues: queues.into_values().collect(),
            pending,
        }
    }

    fn render_metrics(&self, now: SimTime) -> String {
        // Finished jobs archived (and, after a restart, never loaded) count too.
        let counts = self.count_by_state();
        let mut pending_per_queue: BTreeMap<String, u64> = BTreeMap::new();
        for &idx in &self.active {
            let r = &self.jobs[idx].row;
            let e = pending_per_queue.entry(r.queue.clone()).or_default();
            if r.state == JobState::Pending {
                *e += 1;
            }
        }
        let (mut cap, mut free) = ((0u64, 0u64, 0u64), (0u64, 0u64, 0u64));
        for (c, f) in self.capacity.iter().zip(&self.free) {
            cap = (cap.0 + c.gpus as u64, cap.1 + c.cpu.0, cap.2 + c.memory.0);
            free = (
                free.0 + f.gpus as u64,
                free.1 + f.cpu.0,
                free.2 + f.memory.0,
            );
        }
        let gauges = Gauges {
            jobs: JobState::ALL
                .iter()
                .map(|s| (s.as_str(), counts.get(s).copied().unwrap_or(0) as u64))
                .collect(),
            pending_per_queue,
            resources: vec![
                ("gpus", cap.0.saturating_sub(free.0) as f64, cap.0 as f64),
                (
                    "cpu_cores",
                    cap.1.saturating_sub(free.1) as f64 / 1000.0,
                    cap.1 as f64 / 1000.0,
                ),
                (
                    "memory_bytes",
                    cap.2.saturating_sub(free.2) as f64,
                    cap.2 as f64,
                ),
            ],
        };
        let mut text = self.metrics.render(&gauges);
        text.push_str(&self.service_metrics(now));
        text
    }
}

/// The CPU/memory point of a placement (see [`crate::types::ResourcePoint`]).
pub(super) fn resource_point(
    placement: &[super::runs::PlacedShare],
) -> crate::types::ResourcePoint {
    crate::types::ResourcePoint {
        cpu_milli: placement.iter().map(|s| s.cpu.0).sum(),
        memory_bytes: placement.iter().map(|s| s.memory.0).sum(),
    }
}
