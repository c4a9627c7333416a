//! Inference services in the core: their table, what the policy sees of them
//! ([`ClusterView::services`](tessera_sched::ClusterView)), validation of `ScaleOut`, `ScaleIn`
//! and `RetuneInstance`, and carrying them out through the same commands as jobs.
//!
//! An instance's launch, retune and stop travel as [`Command::Launch`], [`Command::Retune`] and
//! [`Command::Stop`] with the *negated* instance id in the job-id slot (jobs have positive
//! ids), so the driver and the backends need no second path; the `handle_*` inputs route them
//! back here. An instance's run is recorded in the `instances` table (never as a live row in
//! `runs`, which restart reconciliation would stop as unclaimed); a run being stopped is a
//! `stop` row in `runs` like a job's, so a stop decided before a crash is carried out after it.
//!
//! The daemon sees no request itself: an instance reports its load with its own token
//! (`TESSERA_TOKEN`, per attempt, like a job's progress), and the view carries the last report
//! of each instance (queue length, requests in flight; the service's rate, completions and
//! violations summed, latencies the worst instance's). Without reports they are zero, and a
//! policy that scales on load keeps the count it starts with (serve-exclusive: one instance).

use std::collections::BTreeMap;

use tessera_model::{Allocation, GpuPart, ParallelPlan, SimDuration, SimTime};
use tessera_sched::{validate, Action, InstanceId, ServicePhase};

use super::api::{Caller, Request, Response};
use super::{add, launch_placeholder, sub, Command, Core, Plan, Refusal};
use crate::core::records::{RunRow, RunState};
use crate::core::runs::{Handle, Launch, Payload, Retune, RunStatus};
use crate::error::{ApiError, BackendError, DaemonError};
use crate::services::{
    parse_service, InstanceRow, InstanceState, InstanceView, LoadReport, RunSpec, ServiceList,
    ServiceRow, ServiceState, ServiceView,
};

/// Launch failures in a row (not counting transient ones) before an instance is given up.
const MAX_INSTANCE_FAILURES: u32 = 3;
/// A run that ends sooner than this after its start is a quick crash.
const QUICK_CRASH: SimDuration = SimDuration::from_secs(10);
/// Longest wait before restarting a crash-looping instance.
const MAX_BACKOFF_SECS: u64 = 300;

/// One service.
struct Svc {
    row: ServiceRow,
    /// Times made absolute: submission + the spec's start and end.
    spec: tessera_model::InferenceService,
    run: RunSpec,
}

/// One live instance.
struct Inst {
    row: InstanceRow,
    alloc: Allocation,
    /// Index of its service.
    svc: usize,
    /// A launch of the current attempt is queued or in flight (not while it waits for an
    /// earlier attempt's run, see [`Services::blockers`]).
    launching: bool,
    failures: u32,
    /// When its current run was seen started.
    started: Option<SimTime>,
    /// Quick crashes in a row.
    quick_crashes: u32,
    /// Not launched again before this (back-off after quick crashes).
    not_before: SimTime,
    /// The current attempt's token (empty after a daemon restart: only its hash is kept).
    token: String,
    /// Its last load report (this attempt).
    load: Option<LoadReport>,
}

/// The services the core holds.
#[derive(Default)]
pub(crate) struct Services {
    list: Vec<Svc>,
    by_id: BTreeMap<i64, usize>,
    live: BTreeMap<i64, Inst>,
    by_handle: BTreeMap<String, i64>,
    /// Instance tokens by SHA-256.
    tokens: BTreeMap<String, i64>,
    /// Runs of earlier attempts not yet stopped, by handle (the placeholder of a launch given
    /// up while in flight, until it answers), with their instance: an instance's next attempt
    /// is launched only once the backend has carried out their stops, so two attempts of one
    /// instance never run together (a stop that fails is retried at the next poll).
    blockers: BTreeMap<String, i64>,
    next_instance: i64,
    /// What the policy sees, rebuilt at each scheduling point.
    pub(super) views: Vec<tessera_sched::ServiceView>,
    /// The next start or end of a service, a scheduling point.
    pub(super) timer: Option<SimTime>,
}

impl Services {
    /// Whether a job-id slot holds an instance (see the module docs).
    pub(super) fn is_instance(job_id: i64) -> bool {
        job_id < 0
    }
}

/// The run name of an instance attempt (`tessera-<store>-i<instance>-<attempt>`).
pub fn instance_run_name(store: &str, instance: i64, attempt: u32) -> String {
    format!("tessera-{store}-i{instance}-{attempt}")
}

fn secs(us: u64) -> f64 {
    us as f64 / 1e6
}

fn state_of(s: &Svc, now: SimTime) -> ServiceState {
    if s.row.retired_us.is_some() {
        ServiceState::Retired
    } else if now < s.spec.start {
        ServiceState::Pending
    } else if now >= s.spec.end {
        ServiceState::Ended
    } else {
        ServiceState::Active
    }
}

impl Core {
    // ---------------------------------------------------------------------------------------
    // API

    /// Answers a service request (the caller is authenticated).
    pub(super) fn service_request(
        &mut self,
        now: SimTime,
        caller: &Caller,
        req: Request,
    ) -> Result<Response, ApiError> {
        match req {
            Request::SubmitService { body } => {
                if let Caller::Job { .. } = caller {
                    return Err(ApiError::forbidden("a job token cannot submit services"));
                }
                let parsed = parse_service(&body, &self.map.cluster.catalog)?;
                let idx = self.submit_service(now, caller, &body, parsed)?;
                Ok(Response::Service(Box::new(self.service_view(idx, now))))
            }
            Request::SubmitParsedService {
                parsed,
                body,
                catalog,
            } => {
                let parsed = if *catalog == self.map.cluster.catalog {
                    *parsed
                } else {
                    parse_service(&body, &self.map.cluster.catalog)?
                };
                let idx = self.submit_service(now, caller, &body, parsed)?;
                Ok(Response::Service(Box::new(self.service_view(idx, now))))
            }
            Request::ListServices => {
                let services = (0..self.services.list.len())
                    .filter(|&i| Self::can_see_service(caller, &self.services.list[i].row))
                    .map(|i| self.service_view(i, now))
                    .collect();
                Ok(Response::Services(ServiceList { services }))
            }
            Request::GetService { id } => {
                let idx = self.lookup_service(caller, id)?;
                Ok(Response::Service(Box::new(self.service_view(idx, now))))
            }
            Request::RetireService { id } => {
                let idx = self.lookup_service(caller, id)?;
                self.retire_service(now, idx)?;
                Ok(Response::Service(Box::new(self.service_view(idx, now))))
            }
            _ => Err(ApiError::internal("not a service request")),
        }
    }

    fn can_see_service(caller: &Caller, row: &ServiceRow) -> bool {
        match caller {
            Caller::Tenant { admin: true, .. } => true,
            Caller::Tenant { name, .. } => &row.tenant == name,
            Caller::Job { .. } => false,
        }
    }

    fn lookup_service(&self, caller: &Caller, id: i64) -> Result<usize, ApiError> {
        // Another tenant's service answers exactly like a missing one.
        match self.services.by_id.get(&id) {
            Some(&i) if Self::can_see_service(caller, &self.services.list[i].row) => Ok(i),
            _ => Err(ApiError::not_found(format!("no service {id}"))),
        }
    }

    /// Instance `id`'s service (id, name, tenant) and nodes, for the event log.
    pub(super) fn instance_event_info(
        &self,
        id: i64,
    ) -> Option<(i64, String, String, Vec<String>)> {
        let inst = self.services.live.get(&id)?;
        let svc = &self.services.list.get(inst.svc)?.row;
        let nodes = inst.row.placement.iter().map(|s| s.node.clone()).collect();
        Some((svc.id, svc.name.clone(), svc.tenant.clone(), nodes))
    }

    fn service_view(&self, idx: usize, now: SimTime) -> ServiceView {
        let s = &self.services.list[idx];
        let instances = self
            .services
            .live
            .values()
            .filter(|i| i.svc == idx)
            .map(|i| InstanceView {
                id: i.row.id,
                state: i.row.state,
                attempt: i.row.attempt,
                restarts: i.row.restarts,
                created_at: secs(i.row.created_us),
                allocation: i.row.placement.clone(),
                backend_id: i.row.handle.clone(),
                load: i.load.clone(),
            })
            .collect();
        ServiceView {
            id: s.row.id,
            name: s.row.name.clone(),
            tenant: s.row.tenant.clone(),
            state: state_of(s, now),
            submitted_at: secs(s.row.submit_us),
            start_at: secs(s.spec.start.as_micros()),
            end_at: secs(s.spec.end.as_micros()),
            retired_at: s.row.retired_us.map(secs),
            restarts: s.row.restarts,
            instances,
            run: s.run.clone(),
            message: s.row.message.clone(),
        }
    }

    /// Why no instance of `spec` fits on any node of this cluster, if none does.
    fn service_unsatisfiable(&self, spec: &tessera_model::InferenceService) -> Option<String> {
        let cluster = &self.map.cluster;
        let demand = &spec.instance;
        let mut largest = tessera_model::Bytes(0);
        for node in &cluster.nodes {
            if !spec.gpu_types.is_empty() && !spec.gpu_types.contains(&node.gpu) {
                continue;
            }
            let cap = cluster.capacity(node.id);
            let gpu_memory =
                tessera_model::Bytes::from_gib_f64(cluster.catalog.get(node.gpu).memory_gib);
            largest = largest.max(gpu_memory);
            if cap.gpus >= 1
                && demand.gpu_memory <= gpu_memory
                && demand.cpu <= cap.cpu
                && demand.memory <= cap.memory
            {
                return None;
            }
        }
        Some(if demand.gpu_memory > largest {
            format!(
                "unschedulable: an instance of {} needs {} of GPU memory, more than any GPU of \
                 this cluster it may use has (largest: {largest})",
                spec.name, demand.gpu_memory
            )
        } else {
            format!(
                "unschedulable: no node of this cluster it may use has a GPU with {} CPU and {} \
                 memory beside it for an instance of {}",
                demand.cpu, demand.memory, spec.name
            )
        })
    }

    fn submit_service(
        &mut self,
        now: SimTime,
        caller: &Caller,
        body: &str,
        parsed: crate::services::ServiceSubmission,
    ) -> Result<usize, ApiError> {
        let Caller::Tenant { name, admin } = caller else {
            return Err(ApiError::forbidden("a job token cannot submit services"));
        };
        let mut spec = parsed.spec;
        let tenant = if spec.tenant.is_empty() {
            name.clone()
        } else if &spec.tenant != name && !admin {
            return Err(ApiError::forbidden(format!(
                "cannot submit as tenant {:?}",
                spec.tenant.chars().take(64).collect::<String>()
            )));
        } else {
            spec.tenant.clone()
        };
        let limit = self.settings.limits.max_active_jobs_per_tenant;
        let active = self
            .services
            .list
            .iter()
            .filter(|s| s.row.tenant == tenant && s.row.retired_us.is_none() && now < s.spec.end)
            .count();
        if active >= limit {
            return Err(ApiError::too_many(format!(
                "tenant {tenant} holds its limit of {limit} active services"
            )));
        }
        if let Some(reason) = self.service_unsatisfiable(&spec) {
            return Err(ApiError::new(400, "unsatisfiable", reason));
        }
        let asks = tessera_mechanisms::capabilities::service_demands(&self.map.cluster, &spec);
        if let Some(reason) = self.unsupported(asks) {
            return Err(ApiError::new(400, "unsupported", reason));
        }
        let idx = self.services.list.len();
        let id = self.services.list.last().map_or(1, |s| s.row.id + 1);
        let row = ServiceRow {
            id,
            tenant: tenant.clone(),
            name: spec.name.clone(),
            body: body.to_string(),
            submit_us: now.as_micros(),
            retired_us: None,
            restarts: 0,
            message: Some("submitted".into()),
        };
        // The spec's times are relative to the submission.
        spec.start = now + spec.start.saturating_since(SimTime::ZERO);
        spec.end = now + spec.end.saturating_since(SimTime::ZERO);
        spec.tenant = tenant;
        spec.id = tessera_model::ServiceId(idx as u32);
        self.pending.services.push(row.clone());
        self.services.by_id.insert(id, idx);
        self.services.list.push(Svc {
            row,
            spec,
            run: parsed.run,
        });
        self.trigger.arrival = true;
        self.service_timer(now);
        Ok(idx)
    }

    fn retire_service(&mut self, now: SimTime, idx: usize) -> Result<(), ApiError> {
        if self.services.list[idx].row.retired_us.is_some() {
            return Err(ApiError::conflict(format!(
                "service {} is already retired",
                self.services.list[idx].row.id
            )));
        }
        // Recorded retired in the same write as its instances' stops, before any of them.
        let s = &mut self.services.list[idx];
        s.row.retired_us = Some(now.as_micros());
        s.row.message = Some("retired".into());
        self.pending.services.push(s.row.clone());
        let ids: Vec<i64> = self
            .services
            .live
            .values()
            .filter(|i| i.svc == idx)
            .map(|i| i.row.id)
            .collect();
        let stops: Vec<RunRow> = ids.into_iter().filter_map(|id| self.scale_in(id)).collect();
        for run in stops {
            self.act(Command::Stop { run, preempt: true });
        }
        self.trigger.completion = true;
        self.service_timer(now);
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Restart

    /// Loads the stored services and their instances after a (re)start: instances keep what
    /// they hold; one caught between its start decision and the backend's answer is looked
    /// up by run name ([`Command::Find`]) and adopted, or started again as a new attempt, so
    /// an instance never runs twice. `max_instance` is the largest instance id ever used.
    pub fn restore_services(
        &mut self,
        now: SimTime,
        rows: Vec<ServiceRow>,
        instances: Vec<InstanceRow>,
        max_instance: i64,
    ) -> Result<(), DaemonError> {
        for row in rows {
            let idx = self.services.list.len();
            let (mut spec, run) = match parse_service(&row.body, &self.map.cluster.catalog) {
                Ok(p) => (p.spec, p.run),
                Err(e) => {
                    // The inventory changed (a GPU type is gone): keep the record, ended.
                    tracing::warn!(service = row.id, "{}", e.message);
                    let mut s = tessera_model::InferenceService::simple(
                        &row.name,
                        SimTime::ZERO,
                        SimTime::ZERO,
                        0.0,
                    );
                    s.gpu_types = vec![tessera_model::GpuModelId(u16::MAX)];
                    (s, RunSpec::default())
                }
            };
            let at = SimTime::from_micros(row.submit_us);
            spec.start = at + spec.start.saturating_since(SimTime::ZERO);
            spec.end = at + spec.end.saturating_since(SimTime::ZERO);
            spec.tenant = row.tenant.clone();
            spec.id = tessera_model::ServiceId(idx as u32);
            self.services.by_id.insert(row.id, idx);
            self.services.list.push(Svc { row, spec, run });
        }
        self.services.next_instance = max_instance + 1;
        for row in instances {
            let Some(&svc) = self.services.by_id.get(&row.service_id) else {
                tracing::warn!(instance = row.id, "instance of an unknown service");
                continue;
            };
            let Some(alloc) = self.map.allocation(&row.placement) else {
                tracing::warn!(
                    instance = row.id,
                    "instance on nodes no longer in the inventory"
                );
                continue;
            };
            self.devices.take(&self.map.cluster, &alloc);
            for s in &alloc.shares {
                sub(&mut self.free[s.node.index()], &s.resources());
            }
            if let Some(h) = &row.handle {
                self.services.by_handle.insert(h.clone(), row.id);
            }
            if let Some(t) = &row.token_sha256 {
                self.services.tokens.insert(t.clone(), row.id);
            }
            if row.state == InstanceState::Starting {
                self.commands.push_back(Command::Find {
                    job_id: -row.id,
                    attempt: row.attempt,
                    run_name: instance_run_name(&self.settings.instance, row.id, row.attempt),
                });
            }
            let started = (row.state == InstanceState::Running).then_some(now);
            self.services.live.insert(
                row.id,
                Inst {
                    row,
                    alloc,
                    svc,
                    launching: false,
                    failures: 0,
                    started,
                    quick_crashes: 0,
                    not_before: SimTime::ZERO,
                    token: String::new(),
                    load: None,
                },
            );
        }
        self.service_timer(now);
        Ok(())
    }

    /// The answer to a [`Command::Find`] for an instance.
    pub(super) fn instance_found(
        &mut self,
        _now: SimTime,
        id: i64,
        attempt: u32,
        run: Option<Handle>,
    ) {
        let Some(inst) = self.services.live.get_mut(&id) else {
            return;
        };
        if inst.row.state != InstanceState::Starting || inst.row.attempt != attempt {
            return;
        }
        match run {
            Some(h) => {
                tracing::info!(instance = id, handle = %h.0, "adopting an instance started before the restart");
                self.services.by_handle.insert(h.0.clone(), id);
                inst.row.handle = Some(h.0);
                inst.row.state = InstanceState::Running;
                self.pending.instances.push(inst.row.clone());
            }
            // Never started: a new attempt (the next poll launches it).
            None => {
                inst.row.attempt += 1;
                self.pending.instances.push(inst.row.clone());
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // What the policy sees

    /// The next start or end of a service still to come.
    fn service_timer(&mut self, now: SimTime) {
        self.services.timer = self
            .services
            .list
            .iter()
            .filter(|s| s.row.retired_us.is_none())
            .flat_map(|s| [s.spec.start, s.spec.end])
            .filter(|&t| t > now)
            .min();
    }

    /// Rebuilds [`Services::views`] for a scheduling point.
    pub(super) fn build_service_views(&mut self, now: SimTime) {
        let mut by_svc: Vec<Vec<tessera_sched::InstanceView>> =
            (0..self.services.list.len()).map(|_| Vec::new()).collect();
        for i in self.services.live.values() {
            let created = SimTime::from_micros(i.row.created_us);
            let cold = self
                .services
                .list
                .get(i.svc)
                .map_or(SimDuration::ZERO, |s| s.spec.cold_start);
            let sm = match i.alloc.part() {
                Some(GpuPart::Quota { sm_request, .. }) => sm_request,
                _ => 1000,
            };
            if let Some(v) = by_svc.get_mut(i.svc) {
                v.push(tessera_sched::InstanceView {
                    id: InstanceId(i.row.id as u32),
                    allocation: i.alloc.clone(),
                    created,
                    ready_at: created + cold,
                    queue_len: i.load.as_ref().map_or(0, |l| l.queue_length),
                    in_flight: i.load.as_ref().map_or(0, |l| l.in_flight),
                    effective_sm: sm,
                });
            }
        }
        self.services.views = self
            .services
            .list
            .iter()
            .zip(by_svc)
            .enumerate()
            .map(|(idx, (s, instances))| {
                let loads: Vec<&LoadReport> = self
                    .services
                    .live
                    .values()
                    .filter(|i| i.svc == idx)
                    .filter_map(|i| i.load.as_ref())
                    .collect();
                let max =
                    |f: fn(&LoadReport) -> f64| loads.iter().map(|l| f(l)).fold(0.0, f64::max);
                tessera_sched::ServiceView {
                    spec: s.spec.clone(),
                    phase: match state_of(s, now) {
                        ServiceState::Pending => ServicePhase::Pending,
                        ServiceState::Active => ServicePhase::Active,
                        ServiceState::Ended | ServiceState::Retired => ServicePhase::Ended,
                    },
                    instances,
                    // What instances report (module docs); the daemon sees no request itself.
                    pending: 0,
                    window: SimDuration::from_secs(1),
                    load_rps: loads.iter().map(|l| l.requests_per_second).sum(),
                    p50_latency_s: max(|l| l.p50_latency_seconds),
                    p99_latency_s: max(|l| l.p99_latency_seconds),
                    completed_in_window: loads.iter().map(|l| l.completed).sum(),
                    violations_in_window: loads.iter().map(|l| l.violations).sum(),
                }
            })
            .collect();
        self.service_timer(now);
    }

    // ---------------------------------------------------------------------------------------
    // Validation

    /// Checks a service action against `scratch` and applies it there:
    /// [`tessera_sched::validate`], then the daemon's own checks (node and GPU health).
    pub(super) fn check_service(
        &self,
        scratch: &mut tessera_sched::ClusterState,
        holding: &mut BTreeMap<i64, Option<Allocation>>,
        action: &Action,
        now: SimTime,
    ) -> Result<Plan, Refusal> {
        let Some(service) = action.service() else {
            return Err(Refusal::Unsupported(action.kind()));
        };
        let idx = service.index();
        let svc = self
            .services
            .list
            .get(idx)
            .filter(|s| s.row.retired_us.is_none())
            .ok_or(Refusal::ServiceNotActive(service.0))?;
        if let Action::ScaleOut { allocation, .. } | Action::RetuneInstance { allocation, .. } =
            action
        {
            for s in &allocation.shares {
                self.check_node_up(s.node)?;
                if let Some(d) = s.devices {
                    for g in d.gpus.iter() {
                        self.check_gpu_healthy(s.node, g)?;
                    }
                }
            }
        }
        let instance = match action {
            Action::ScaleIn { instance, .. } | Action::RetuneInstance { instance, .. } => {
                Some(instance.0 as i64)
            }
            _ => None,
        };
        let current = match instance {
            None => None,
            Some(id) => match holding.get(&id) {
                Some(h) => h.clone(),
                None => self
                    .services
                    .live
                    .get(&id)
                    .filter(|i| i.svc == idx)
                    .map(|i| i.alloc.clone()),
            },
        };
        let new = validate(
            scratch,
            &self.map.cluster,
            &svc.spec,
            current.as_ref(),
            action,
            now,
        )?;
        let plan = match (action, new.clone(), instance) {
            (Action::ScaleOut { .. }, Some(a), _) => Plan::ScaleOut(idx, a),
            (Action::ScaleIn { .. }, None, Some(id)) => Plan::ScaleIn(id),
            (Action::RetuneInstance { .. }, Some(a), Some(id)) => Plan::RetuneInstance(id, a),
            (other, _, _) => return Err(Refusal::Unsupported(other.kind())),
        };
        if let Some(old) = &current {
            scratch.release(&self.map.cluster, old);
        }
        if let Some(a) = &new {
            scratch.take(&self.map.cluster, a);
        }
        if let Some(id) = instance {
            holding.insert(id, new);
        }
        Ok(plan)
    }

    // ---------------------------------------------------------------------------------------
    // Carrying out

    /// A new instance of service `idx` on `alloc` (resolved): recorded as starting.
    pub(super) fn scale_out(&mut self, idx: usize, alloc: Allocation, now_us: u64) -> Launch {
        self.take_devices(&alloc);
        for s in &alloc.shares {
            sub(&mut self.free[s.node.index()], &s.resources());
        }
        let id = self.services.next_instance.max(1);
        self.services.next_instance = id + 1;
        let row = InstanceRow {
            id,
            service_id: self.services.list[idx].row.id,
            attempt: 1,
            placement: self.map.placement(&alloc),
            handle: None,
            state: InstanceState::Starting,
            created_us: now_us,
            restarts: 0,
            token_sha256: None,
        };
        self.pending.instances.push(row.clone());
        self.services.live.insert(
            id,
            Inst {
                row,
                alloc,
                svc: idx,
                launching: true,
                failures: 0,
                started: None,
                quick_crashes: 0,
                not_before: SimTime::ZERO,
                token: String::new(),
                load: None,
            },
        );
        self.issue_token(id);
        self.instance_launch(id)
    }

    /// A fresh token for instance `id`'s next attempt (the old one stops working), recorded
    /// in the pending batch; its load report is forgotten.
    fn issue_token(&mut self, id: i64) {
        let token = (self.new_token)();
        let hash = crate::config::hash_token(&token);
        let Some(inst) = self.services.live.get_mut(&id) else {
            return;
        };
        if let Some(old) = inst.row.token_sha256.replace(hash.clone()) {
            self.services.tokens.remove(&old);
        }
        self.services.tokens.insert(hash, id);
        inst.token = token;
        inst.load = None;
        self.pending.instances.push(inst.row.clone());
    }

    /// A load report from an instance, with its own token.
    pub(super) fn instance_load(
        &mut self,
        now: SimTime,
        token: Option<&str>,
        service: i64,
        instance: i64,
        report: super::api::Report<LoadReport>,
    ) -> Result<Response, ApiError> {
        let token = token
            .filter(|t| !t.is_empty() && t.len() <= 512)
            .ok_or_else(ApiError::unauthorized)?;
        let hash = crate::config::hash_token(token);
        let Some(&owner) = self.services.tokens.get(&hash) else {
            // A tenant's (or a job's) token is valid but not for this.
            self.authenticate(Some(token))?;
            return Err(ApiError::forbidden(
                "load is accepted only with the instance's own token (TESSERA_TOKEN)",
            ));
        };
        let idx = self.services.live.get(&owner).map(|i| i.svc);
        let matches = owner == instance
            && idx.is_some_and(|i| {
                self.services
                    .list
                    .get(i)
                    .is_some_and(|s| s.row.id == service)
            });
        if !matches {
            return Err(ApiError::forbidden(
                "load is accepted only with the instance's own token (TESSERA_TOKEN)",
            ));
        }
        let report = report.parse()?;
        report.validate()?;
        if let Some(inst) = self.services.live.get_mut(&owner) {
            inst.load = Some(report);
        }
        let idx = idx.unwrap_or_default();
        Ok(Response::Service(Box::new(self.service_view(idx, now))))
    }

    /// Removes instance `id`: recorded gone, its devices free again (the local backend hands
    /// them out only once no process of the run is left); the run to stop, if it has one.
    pub(super) fn scale_in(&mut self, id: i64) -> Option<RunRow> {
        let placeholder = self.record_instance_launch_in_flight(id);
        let mut inst = self.services.live.remove(&id)?;
        // Its earlier runs are still stopped as they answer; nothing waits for them now.
        self.services.blockers.retain(|_, i| *i != id);
        // The GPUs of the run it stops drain until the backend reports it gone (drain.rs).
        if let Some(h) = inst.row.handle.clone().or(placeholder) {
            self.start_draining(h, -id, &inst.alloc);
        }
        self.devices.release(&self.map.cluster, &inst.alloc);
        for s in &inst.alloc.shares {
            let i = s.node.index();
            if let (Some(f), Some(c)) = (self.free.get_mut(i), self.capacity.get(i)) {
                add(f, &s.resources(), c);
            }
        }
        inst.row.state = InstanceState::Gone;
        if let Some(t) = inst.row.token_sha256.take() {
            self.services.tokens.remove(&t);
        }
        let handle = inst.row.handle.take();
        self.pending.instances.push(inst.row.clone());
        let h = handle?;
        self.services.by_handle.remove(&h);
        let run = RunRow {
            handle: h,
            job_id: -id,
            attempt: inst.row.attempt,
            state: RunState::Stop,
        };
        self.pending.runs.push(run.clone());
        Some(run)
    }

    /// Records instance `id`'s new allocation; the retune to ask the backend for, or `None`
    /// when the instance is still starting (its launch carries the old quota: restart it).
    pub(super) fn retune_instance(&mut self, id: i64, alloc: Allocation) -> Option<Retune> {
        let inst = self.services.live.get_mut(&id)?;
        self.devices.release(&self.map.cluster, &inst.alloc);
        for s in &inst.alloc.shares {
            let i = s.node.index();
            add(&mut self.free[i], &s.resources(), &self.capacity[i]);
        }
        self.devices.take(&self.map.cluster, &alloc);
        for s in &alloc.shares {
            sub(&mut self.free[s.node.index()], &s.resources());
        }
        inst.row.placement = self.map.placement(&alloc);
        inst.alloc = alloc;
        self.pending.instances.push(inst.row.clone());
        Some(Retune {
            handle: Handle(inst.row.handle.clone()?),
            job_id: -id,
            attempt: inst.row.attempt,
            placement: inst.row.placement.clone(),
        })
    }

    /// Instance `id`'s attempt is given up (scaled in, restarted) while its launch is in
    /// flight: the run that launch may start has no handle yet, so it is recorded `launching`
    /// under a placeholder (as a job's, see `Core::record_launch_in_flight`). Its answer stops
    /// the run and closes the record; a restart before that finds the run by name and stops
    /// it, where nothing recorded it before (it ran on, beside the instance's next attempt).
    /// Returns the placeholder.
    fn record_instance_launch_in_flight(&mut self, id: i64) -> Option<String> {
        let inst = self.services.live.get(&id)?;
        if inst.row.state != InstanceState::Starting || !inst.launching {
            return None;
        }
        let (job_id, attempt) = (-id, inst.row.attempt);
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

    /// The run `handle` of instance `id`, found `stop` at a restart, blocks the instance's
    /// next attempt until it is stopped (as before the restart).
    pub(super) fn block_instance(&mut self, handle: &str, id: i64) {
        if self.services.live.contains_key(&id) {
            self.services.blockers.insert(handle.to_string(), id);
        }
    }

    /// Whether an earlier attempt of instance `id` may still run (see [`Services::blockers`]).
    fn instance_blocked(&self, id: i64) -> bool {
        self.services.blockers.values().any(|&i| i == id)
    }

    /// The run `handle` of an earlier attempt of an instance is stopped (or the launch under
    /// that placeholder started nothing): the instance's current attempt is launched if
    /// nothing else blocks it.
    pub(super) fn instance_unblocked(&mut self, handle: &str) {
        let Some(id) = self.services.blockers.remove(handle) else {
            return;
        };
        let waiting = self
            .services
            .live
            .get(&id)
            .is_some_and(|i| i.row.state == InstanceState::Starting && !i.launching);
        if waiting && !self.instance_blocked(id) {
            self.issue_token(id);
            self.send_instance_launch(id);
        }
    }

    /// Launches instance `id`'s current attempt (the caller has issued its token).
    fn send_instance_launch(&mut self, id: i64) {
        if let Some(i) = self.services.live.get_mut(&id) {
            i.launching = true;
        }
        let launch = self.instance_launch(id);
        self.act(Command::Launch(launch));
    }

    /// Stops instance `id`'s run (if any) and starts a new attempt on what it holds now.
    /// The new attempt is launched once the old run's stop is carried out (and, while the old
    /// attempt's launch is in flight, once it has answered): launched at once, it would run
    /// beside the old run until then.
    pub(super) fn restart_instance(&mut self, id: i64, why: &str) {
        let placeholder = self.record_instance_launch_in_flight(id);
        if let Some(placeholder) = &placeholder {
            self.services.blockers.insert(placeholder.clone(), id);
        }
        // The old run's GPUs (the new attempt's too) drain until it is gone (drain.rs).
        if let Some(inst) = self.services.live.get(&id) {
            if let Some(h) = inst.row.handle.clone().or(placeholder) {
                let alloc = inst.alloc.clone();
                self.start_draining(h, -id, &alloc);
            }
        }
        let Some(inst) = self.services.live.get_mut(&id) else {
            return;
        };
        let old = inst.row.handle.take().map(|h| RunRow {
            handle: h,
            job_id: -id,
            attempt: inst.row.attempt,
            state: RunState::Stop,
        });
        inst.row.attempt += 1;
        inst.row.state = InstanceState::Starting;
        inst.launching = false;
        self.pending.instances.push(inst.row.clone());
        let svc = inst.svc;
        tracing::info!(instance = id, "restarting: {why}");
        if let Some(s) = self.services.list.get_mut(svc) {
            s.row.message = Some(format!("instance {id}: {why}"));
            self.pending.services.push(s.row.clone());
        }
        if let Some(run) = old {
            // The stop goes first in the queue, but may fail (retried at the next poll): the
            // new attempt waits until it is carried out.
            self.services.by_handle.remove(&run.handle);
            self.services.blockers.insert(run.handle.clone(), id);
            self.pending.runs.push(run.clone());
            self.act(Command::Stop { run, preempt: true });
        }
        self.issue_token(id);
        if !self.instance_blocked(id) {
            self.send_instance_launch(id);
        }
    }

    /// The launch of instance `id`'s current attempt.
    fn instance_launch(&self, id: i64) -> Launch {
        let Some(inst) = self.services.live.get(&id) else {
            // Unreachable by construction; a launch of nothing fails harmlessly.
            return Launch {
                name: String::new(),
                job_id: -id,
                attempt: 0,
                tenant: String::new(),
                payload: Payload::Command(vec!["true".into()]),
                env: Vec::new(),
                placement: Vec::new(),
                plan: ParallelPlan::data_parallel(1),
                gpu_type: String::new(),
            };
        };
        let svc = &self.services.list[inst.svc];
        let devices = inst.alloc.devices();
        let mut identity = vec![
            ("TESSERA_SERVICE", svc.row.id.to_string()),
            ("TESSERA_SERVICE_NAME", svc.row.name.clone()),
            ("TESSERA_INSTANCE", id.to_string()),
            ("TESSERA_ATTEMPT", inst.row.attempt.to_string()),
        ];
        if !inst.token.is_empty() {
            identity.push(("TESSERA_JOB_TOKEN", inst.token.clone()));
            identity.push(("TESSERA_TOKEN", inst.token.clone()));
        }
        let (payload, env, gpu_type) = self.run_setup(super::launch::RunSetup {
            command: svc.run.command.as_deref(),
            script: svc.run.script.as_deref(),
            user_env: &svc.run.env,
            identity,
            gpus: devices,
            after_gpus: Vec::new(),
            plan: None,
            placement: &inst.row.placement,
            alloc: Some(&inst.alloc),
        });
        Launch {
            name: instance_run_name(&self.settings.instance, id, inst.row.attempt),
            job_id: -id,
            attempt: inst.row.attempt,
            tenant: svc.row.tenant.clone(),
            payload,
            env,
            placement: inst.row.placement.clone(),
            plan: ParallelPlan::data_parallel(devices.max(1)),
            gpu_type,
        }
    }

    // ---------------------------------------------------------------------------------------
    // Backend answers

    /// The answer to an instance's [`Command::Launch`].
    pub(super) fn instance_launched(
        &mut self,
        now: SimTime,
        id: i64,
        attempt: u32,
        result: Result<Handle, BackendError>,
    ) {
        let placeholder = launch_placeholder(&self.settings.instance, -id, attempt);
        if self.launching_rows.remove(&placeholder) {
            // Given up while in flight: the record closes with the run's `stop`, if any.
            self.pending.runs.push(RunRow {
                handle: placeholder.clone(),
                job_id: -id,
                attempt,
                state: RunState::Gone,
            });
        }
        let current =
            self.services.live.get(&id).is_some_and(|i| {
                i.row.attempt == attempt && i.row.state == InstanceState::Starting
            });
        if !current {
            // Scaled in (or restarted) while its launch was in flight: the run must go.
            match result {
                Ok(h) => {
                    let run = RunRow {
                        handle: h.0,
                        job_id: -id,
                        attempt,
                        state: RunState::Stop,
                    };
                    // A restarted attempt waiting for this answer now waits for the stop.
                    if let Some(i) = self.services.blockers.remove(&placeholder) {
                        self.services.blockers.insert(run.handle.clone(), i);
                    }
                    self.pending.runs.push(run.clone());
                    self.act(Command::Stop {
                        run,
                        preempt: false,
                    });
                }
                // It started nothing: the restarted attempt may go.
                Err(_) => self.instance_unblocked(&placeholder),
            }
            return;
        }
        let Some(inst) = self.services.live.get_mut(&id) else {
            return;
        };
        inst.launching = false;
        match result {
            Ok(h) => {
                self.services.by_handle.insert(h.0.clone(), id);
                inst.row.handle = Some(h.0);
                inst.row.state = InstanceState::Running;
                inst.failures = 0;
                inst.started = Some(now);
                self.pending.instances.push(inst.row.clone());
            }
            Err(e) => {
                self.metrics.backend_errors += 1;
                tracing::warn!(instance = id, "instance launch failed: {e}");
                if !e.is_transient() {
                    inst.failures += 1;
                }
                if inst.failures >= MAX_INSTANCE_FAILURES {
                    let svc = inst.svc;
                    self.scale_in(id);
                    if let Some(s) = self.services.list.get_mut(svc) {
                        s.row.message = Some(format!(
                            "instance {id}: the backend refused it {MAX_INSTANCE_FAILURES} times: {e}"
                        ));
                        self.pending.services.push(s.row.clone());
                    }
                    self.trigger.completion = true;
                } else {
                    // Launched again at the next poll.
                    self.retry_at = Some(now + SimDuration::from_secs(1));
                }
            }
        }
    }

    /// The answer to an instance's [`Command::Retune`]: in place, or a restart with the new
    /// quota.
    pub(super) fn instance_retuned(
        &mut self,
        id: i64,
        attempt: u32,
        result: Result<(), BackendError>,
    ) {
        let Err(e) = result else {
            *self.metrics.retunes.entry("in_place").or_default() += 1;
            return;
        };
        if self
            .services
            .live
            .get(&id)
            .is_none_or(|i| i.row.attempt != attempt)
        {
            return;
        }
        if !matches!(e, BackendError::Declined { .. }) {
            self.metrics.backend_errors += 1;
        }
        *self.metrics.retunes.entry("restart").or_default() += 1;
        self.restart_instance(
            id,
            &format!("retune not in place ({e}); restarted with the new quota"),
        );
    }

    /// Takes the statuses of instance runs out of a poll's answer: an instance whose run
    /// ended on its own is restarted (the service keeps its instance count) and counted,
    /// unless its service has ended. Returns the statuses of other runs.
    pub(super) fn instance_statuses(
        &mut self,
        now: SimTime,
        statuses: Vec<(Handle, RunStatus)>,
    ) -> Vec<(Handle, RunStatus)> {
        if self.services.by_handle.is_empty() {
            return statuses;
        }
        let mut rest = Vec::with_capacity(statuses.len());
        for (h, status) in statuses {
            let Some(&id) = self.services.by_handle.get(&h.0) else {
                rest.push((h, status));
                continue;
            };
            if !status.is_terminal() {
                continue;
            }
            self.services.by_handle.remove(&h.0);
            let Some(inst) = self.services.live.get_mut(&id) else {
                continue;
            };
            if inst.row.handle.as_deref() != Some(h.0.as_str()) {
                continue;
            }
            inst.row.handle = None;
            let svc = inst.svc;
            let ended = self
                .services
                .list
                .get(svc)
                .is_none_or(|s| state_of(s, now) != ServiceState::Active);
            if ended {
                self.scale_in(id);
                self.trigger.completion = true;
                continue;
            }
            let lived = inst
                .started
                .map_or(SimDuration::ZERO, |t| now.saturating_since(t));
            inst.quick_crashes = if lived < QUICK_CRASH {
                inst.quick_crashes + 1
            } else {
                0
            };
            inst.row.restarts += 1;
            let quick = inst.quick_crashes;
            if let Some(s) = self.services.list.get_mut(svc) {
                s.row.restarts += 1;
            }
            if quick < 2 {
                self.restart_instance(id, &format!("its run ended ({status:?}); restarted"));
                continue;
            }
            // Crash-looping: the next attempt waits 1 s, 2 s, 4 s, ... (at most 5 min), so a
            // broken command costs neither a process nor a run directory per poll.
            let delay = 1u64 << (quick - 2).min(9);
            let delay = SimDuration::from_secs(delay.min(MAX_BACKOFF_SECS));
            if let Some(inst) = self.services.live.get_mut(&id) {
                inst.row.attempt += 1;
                inst.row.state = InstanceState::Starting;
                inst.launching = false;
                inst.not_before = now + delay;
                self.pending.instances.push(inst.row.clone());
            }
            if let Some(s) = self.services.list.get_mut(svc) {
                s.row.message = Some(format!(
                    "instance {id}: its run ended ({status:?}) {quick} times in a row within \
                     {} s of its start; restarting in {} s",
                    QUICK_CRASH.as_secs_f64(),
                    delay.as_secs_f64()
                ));
                self.pending.services.push(s.row.clone());
            }
        }
        rest
    }

    /// At a poll: launches instances whose last launch failed, and returns the runs of the
    /// running ones to watch.
    pub(super) fn instance_poll(&mut self, now: SimTime) -> Vec<Handle> {
        let retry: Vec<i64> = self
            .services
            .live
            .values()
            .filter(|i| {
                i.row.state == InstanceState::Starting && !i.launching && now >= i.not_before
            })
            .map(|i| i.row.id)
            .collect();
        for id in retry {
            if !self.instance_blocked(id) {
                self.issue_token(id);
                self.send_instance_launch(id);
            }
        }
        self.services
            .live
            .values()
            .filter_map(|i| i.row.handle.clone().map(Handle))
            .collect()
    }

    /// Whether instance `id` waits for its next attempt (a failed launch, a crash-loop
    /// back-off, or an earlier attempt's run still to be stopped): it has no run now.
    pub fn instance_waiting(&self, id: i64) -> bool {
        self.services
            .live
            .get(&id)
            .is_some_and(|i| i.row.state == InstanceState::Starting && !i.launching)
    }

    /// What instances hold, for the device invariants.
    /// Each live instance's (service id, service name, instance id) and holding.
    pub(super) fn instance_holders(
        &self,
    ) -> impl Iterator<Item = (crate::forecast::ReservedBy, &Allocation)> {
        self.services.live.values().map(|i| {
            let name = self
                .services
                .list
                .get(i.svc)
                .map_or_else(String::new, |s| s.row.name.clone());
            (
                crate::forecast::ReservedBy {
                    service: i.row.service_id,
                    name,
                    instance: i.row.id,
                },
                &i.alloc,
            )
        })
    }

    pub(super) fn instance_holdings(&self) -> impl Iterator<Item = (String, &Allocation)> {
        self.services
            .live
            .values()
            .map(|i| (format!("instance {}", i.row.id), &i.alloc))
    }

    /// The service lines of `GET /metrics`.
    pub(super) fn service_metrics(&self, now: SimTime) -> String {
        use std::fmt::Write;
        let mut by_state: BTreeMap<&'static str, u64> = BTreeMap::new();
        for s in &self.services.list {
            let name = match state_of(s, now) {
                ServiceState::Pending => "pending",
                ServiceState::Active => "active",
                ServiceState::Ended => "ended",
                ServiceState::Retired => "retired",
            };
            *by_state.entry(name).or_default() += 1;
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP tessera_services Inference services by state.\n# TYPE tessera_services gauge"
        );
        for state in ["pending", "active", "ended", "retired"] {
            let n = by_state.get(state).copied().unwrap_or(0);
            let _ = writeln!(out, "tessera_services{{state=\"{state}\"}} {n}");
        }
        let _ = writeln!(out, "# HELP tessera_service_instances Live service instances (starting or running).\n# TYPE tessera_service_instances gauge\ntessera_service_instances {}", self.services.live.len());
        let _ = writeln!(out, "# HELP tessera_instance_restarts_total Service instances restarted after their process ended on its own.\n# TYPE tessera_instance_restarts_total counter\ntessera_instance_restarts_total {}", self.instance_restarts());
        out
    }

    /// Instances restarted after a crash, over every service (metrics).
    pub fn instance_restarts(&self) -> u64 {
        self.services
            .list
            .iter()
            .map(|s| s.row.restarts as u64)
            .sum()
    }

    /// The live instances as (service id, instance id, attempt, handle) (tests).
    pub fn instances(&self) -> Vec<(i64, i64, u32, Option<String>)> {
        self.services
            .live
            .values()
            .map(|i| {
                (
                    self.services.list[i.svc].row.id,
                    i.row.id,
                    i.row.attempt,
                    i.row.handle.clone(),
                )
            })
            .collect()
    }
}

/// Instance launches held for draining GPUs (see `drain.rs`).
impl Core {
    /// Instance `id`'s launch is held, not sent: nothing of it is in flight.
    pub(super) fn instance_launch_held(&mut self, id: i64) {
        if let Some(i) = self.services.live.get_mut(&id) {
            i.launching = false;
        }
    }

    /// Whether instance `id` still waits for the launch of `attempt` (held, not sent since).
    pub(super) fn instance_awaits_launch(&self, id: i64, attempt: u32) -> bool {
        self.services.live.get(&id).is_some_and(|i| {
            i.row.attempt == attempt && i.row.state == InstanceState::Starting && !i.launching
        }) && !self.instance_blocked(id)
    }

    /// Instance `id`'s held launch is sent now.
    pub(super) fn instance_launch_sent(&mut self, id: i64) {
        if let Some(i) = self.services.live.get_mut(&id) {
            i.launching = true;
        }
    }
}
