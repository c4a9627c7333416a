//! A scripted backend, a store kept in memory, and virtual time around a [`Core`]: the
//! harness of the core's unit tests and of the simulator conformance test (no SQLite, no
//! processes, no clock).

use std::collections::BTreeMap;

use tessera_mechanisms::build_policy;
use tessera_model::{Bytes, GpuCatalog, MilliCpu, SimDuration, SimTime};
use tessera_sched::{Policy, PolicyOptions};

use super::{Command, Core, CoreSettings};
use crate::config::{hash_token, Limits};
use crate::core::records::{JobRow, RunRow, RunState, WriteBatch};
use crate::core::runs::{GresCount, Handle, InventoryNode, NodeHealth, RunStatus};
use crate::error::BackendError;
use crate::inventory::ClusterMap;
use crate::types::JobState;

pub(crate) const TOKEN: &str = "alice-token";

/// One node with `gpus` A100s, 64 cores, 512 GiB.
pub(crate) fn node(name: &str, gpus: u32) -> InventoryNode {
    InventoryNode {
        name: name.into(),
        cpu: MilliCpu::from_cores(64),
        memory: Bytes::from_gib(512),
        gres: vec![GresCount {
            kind: Some("a100".into()),
            count: gpus,
        }],
        health: NodeHealth::Up,
    }
}

/// One node with `gpus` GPUs of GRES type (or catalog name) `kind`, 64 cores, 512 GiB.
pub(crate) fn typed_node(name: &str, kind: &str, gpus: u32) -> InventoryNode {
    InventoryNode {
        gres: vec![GresCount {
            kind: Some(kind.into()),
            count: gpus,
        }],
        ..node(name, gpus)
    }
}

/// What the driver did, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A batch was made durable: (job id, new state) of each transition in it.
    Persist(Vec<(i64, JobState)>),
    /// A run was started: job id, attempt, placement (node, GPUs).
    Launch(i64, u32, Vec<(String, u32)>),
    /// A run was stopped: job id, attempt, preemption.
    Stop(i64, u32, bool),
    /// The backend was polled.
    Poll(usize),
    /// Stopped runs (node failure, preemption, resize, restart) were asked how they ended.
    Verify(usize),
    /// The inventory was read again.
    Inventory,
    /// A run was looked up by name.
    Find(i64, u32),
    /// A run was asked to retune in place: job id, attempt.
    Retune(i64, u32),
    /// A GPU was reconfigured: node, GPU, new layout (profile names).
    Reconfigure(String, u32, Option<Vec<String>>),
}

/// A run the scripted backend holds.
#[derive(Clone, Debug)]
pub(crate) struct ScriptedRun {
    pub(crate) job_id: i64,
    pub(crate) name: String,
    pub(crate) status: RunStatus,
}

/// The core with a scripted backend, a store in memory and a virtual clock.
pub(crate) struct Harness {
    pub(crate) core: Core,
    pub(crate) now: SimTime,
    pub(crate) events: Vec<Event>,
    /// The durable state: the last persisted row of each job, every run row.
    pub(crate) store_jobs: BTreeMap<i64, JobRow>,
    pub(crate) store_runs: BTreeMap<String, RunRow>,
    /// The durable services and instances: the last persisted row of each.
    pub(crate) store_services: BTreeMap<i64, crate::services::ServiceRow>,
    pub(crate) store_instances: BTreeMap<i64, crate::services::InstanceRow>,
    pub(crate) runs: BTreeMap<String, ScriptedRun>,
    /// Launches to refuse before accepting again.
    pub(crate) refuse_launches: u32,
    /// Stops to refuse before accepting again.
    pub(crate) refuse_stops: u32,
    /// Job launches are kept in `held_launches` instead of carried out: in flight until the
    /// test answers them ([`Harness::answer_launch`]).
    pub(crate) hold_launches: bool,
    pub(crate) held_launches: Vec<crate::core::runs::Launch>,
    /// Run lookups by name also find runs that have ended (as `squeue -t all` and the local
    /// backend's exit file do); by default only live ones.
    pub(crate) find_ended: bool,
    /// How the backend answers retunes (`None`: carried out).
    pub(crate) retune_error: Option<BackendError>,
    /// How the backend answers reconfigurations (`None`: carried out).
    pub(crate) reconfigure_error: Option<BackendError>,
    /// How long a reconfiguration takes before the backend answers it (zero: at once); the
    /// answers due are given by [`Harness::answer_reconfigurations`].
    pub(crate) reconfigure_delay: SimDuration,
    /// Reconfigurations under way: (when the backend answers, logical node, GPU).
    pub(crate) reconfigurations: Vec<(SimTime, tessera_model::NodeId, u32)>,
    next_handle: u64,
    pub(crate) nodes: Vec<InventoryNode>,
    /// Every launch sent, in order: job id, attempt, placement down to the devices, CPU and
    /// memory.
    pub(crate) placements: Vec<(i64, u32, Vec<crate::core::runs::PlacedShare>)>,
}

fn settings() -> CoreSettings {
    CoreSettings {
        instance: "test".into(),
        limits: Limits::default(),
        public_metrics: false,
        whole_cpus: false,
        arrival_coalescing: SimDuration::ZERO,
        restart_costs: tessera_perf::RestartCosts::free(),
    }
}

pub(crate) fn core_with(nodes: &[InventoryNode], policy: Box<dyn Policy>, now: SimTime) -> Core {
    let map = ClusterMap::build(nodes, &BTreeMap::new(), None, &GpuCatalog::builtin())
        .expect("test inventory maps");
    let mut n = 0u64;
    Core::new(
        settings(),
        map,
        policy,
        vec![("alice".into(), hash_token(TOKEN), false)],
        Box::new(move || {
            n += 1;
            format!("job-token-{n}")
        }),
        now,
    )
}

pub(crate) fn policy(name: &str, round_secs: Option<u64>) -> Box<dyn Policy> {
    build_policy(
        name,
        &PolicyOptions {
            round: round_secs.map(SimDuration::from_secs),
            ..PolicyOptions::default()
        },
    )
    .expect("known policy")
}

impl Harness {
    pub(crate) fn new(nodes: Vec<InventoryNode>, policy: Box<dyn Policy>) -> Harness {
        Harness::new_at(nodes, policy, SimTime::from_secs(1_000))
    }

    /// A harness whose virtual clock starts at `now`.
    pub(crate) fn new_at(
        nodes: Vec<InventoryNode>,
        policy: Box<dyn Policy>,
        now: SimTime,
    ) -> Harness {
        Harness {
            core: core_with(&nodes, policy, now),
            now,
            events: Vec::new(),
            store_jobs: BTreeMap::new(),
            store_runs: BTreeMap::new(),
            store_services: BTreeMap::new(),
            store_instances: BTreeMap::new(),
            runs: BTreeMap::new(),
            refuse_launches: 0,
            refuse_stops: 0,
            hold_launches: false,
            held_launches: Vec::new(),
            find_ended: false,
            retune_error: None,
            reconfigure_error: None,
            reconfigure_delay: SimDuration::ZERO,
            reconfigurations: Vec::new(),
            next_handle: 0,
            nodes,
            placements: Vec::new(),
        }
    }

    /// A daemon restart: a fresh core over the same store and backend, reconciled.
    pub(crate) fn restart(&mut self, policy: Box<dyn Policy>) {
        self.restart_with(policy, |_| {});
    }

    /// A restart whose fresh core is set up by `setup` (as the engine does: a truth's
    /// profiler) before it loads the store.
    pub(crate) fn restart_with(&mut self, policy: Box<dyn Policy>, setup: impl FnOnce(&mut Core)) {
        self.core = core_with(&self.nodes, policy, self.now);
        setup(&mut self.core);
        let rows: Vec<JobRow> = self.store_jobs.values().cloned().collect();
        let open: Vec<RunRow> = self
            .store_runs
            .values()
            .filter(|r| r.state != RunState::Gone)
            .cloned()
            .collect();
        self.core.restore(self.now, rows, open).expect("restore");
        let services = self.store_services.values().cloned().collect();
        let instances = self
            .store_instances
            .values()
            .filter(|i| i.state != crate::services::InstanceState::Gone)
            .cloned()
            .collect();
        let max = self.store_instances.keys().max().copied().unwrap_or(0);
        self.core
            .restore_services(self.now, services, instances, max)
            .expect("restore services");
        self.drain();
        self.core.finish_restore(self.now);
        self.drain();
    }

    pub(crate) fn advance(&mut self, secs: u64) {
        self.now += SimDuration::from_secs(secs);
    }

    /// Submits a job of `gpus` GPUs running for `secs` seconds; returns its id.
    pub(crate) fn submit(&mut self, name: &str, gpus: u32, secs: u64) -> i64 {
        let body = format!(
            "name: {name}\ncommand: [sleep, \"{secs}\"]\ngpus: {gpus}\nhints: {{durationSeconds: {secs}}}\n"
        );
        let mut r = self.core.submit(self.now, vec![(Some(TOKEN.into()), body)]);
        let job = r.pop().expect("one result").expect("accepted");
        self.drain();
        assert!(
            self.store_jobs.contains_key(&job.id),
            "job {} acknowledged before it was durable",
            job.id
        );
        job.id
    }

    /// Submits a job from its spec (YAML); returns its id.
    pub(crate) fn submit_spec(&mut self, body: &str) -> i64 {
        let mut r = self
            .core
            .submit(self.now, vec![(Some(TOKEN.into()), body.into())]);
        let job = r.pop().expect("one result").expect("accepted");
        self.drain();
        job.id
    }

    pub(crate) fn schedule(&mut self) {
        self.core.schedule(self.now);
        self.drain();
    }

    pub(crate) fn poll(&mut self) {
        self.core.poll_runs(self.now);
        self.drain();
    }

    pub(crate) fn state(&self, id: i64) -> JobState {
        self.core.job_row(id).expect("known job").state
    }

    pub(crate) fn stored_state(&self, id: i64) -> Option<JobState> {
        self.store_jobs.get(&id).map(|r| r.state)
    }

    /// The live run of a job, if any.
    pub(crate) fn run_of(&self, id: i64) -> Option<&ScriptedRun> {
        self.runs
            .values()
            .find(|r| r.job_id == id && r.status == RunStatus::Running)
    }

    /// Ends the live run of a job with `status` (seen at the next poll).
    pub(crate) fn end_run(&mut self, id: i64, status: RunStatus) {
        let h = self
            .runs
            .iter()
            .find(|(_, r)| r.job_id == id && r.status == RunStatus::Running)
            .map(|(h, _)| h.clone())
            .expect("a live run");
        if let Some(r) = self.runs.get_mut(&h) {
            r.status = status;
        }
    }

    pub(crate) fn persist(&mut self, batch: WriteBatch) {
        let summary = batch.transitions.iter().map(|t| (t.job_id, t.to)).collect();
        self.events.push(Event::Persist(summary));
        for j in batch.jobs {
            self.store_jobs.insert(j.id, j);
        }
        for r in batch.runs {
            self.store_runs.insert(r.handle.clone(), r);
        }
        for s in batch.services {
            self.store_services.insert(s.id, s);
        }
        for i in batch.instances {
            self.store_instances.insert(i.id, i);
        }
    }

    /// Carries out a launch (after its persist-before-act check).
    fn launched(&mut self, l: crate::core::runs::Launch) {
        self.events.push(Event::Launch(
            l.job_id,
            l.attempt,
            l.placement
                .iter()
                .map(|s| (s.node.clone(), s.gpus))
                .collect(),
        ));
        let r = if self.refuse_launches > 0 {
            self.refuse_launches -= 1;
            Err(BackendError::Unsupported("scripted refusal".into()))
        } else {
            Ok(self.start_run(&l, RunStatus::Running))
        };
        self.core.handle_launched(self.now, l.job_id, l.attempt, r);
    }

    /// The backend starts the run of a launch (its answer not yet given), now in `status`.
    pub(crate) fn start_run(&mut self, l: &crate::core::runs::Launch, status: RunStatus) -> Handle {
        self.next_handle += 1;
        let h = format!("run-{}", self.next_handle);
        self.runs.insert(
            h.clone(),
            ScriptedRun {
                job_id: l.job_id,
                name: l.name.clone(),
                status,
            },
        );
        Handle(h)
    }

    /// Answers a held launch (see `hold_launches`): the backend started its run, now in
    /// `status` (`Some`), or refused it (`None`); then carries out what follows.
    pub(crate) fn answer_launch(
        &mut self,
        l: crate::core::runs::Launch,
        status: Option<RunStatus>,
    ) {
        let r = match status {
            Some(status) => Ok(self.start_run(&l, status)),
            None => Err(BackendError::Unsupported("scripted refusal".into())),
        };
        self.core.handle_launched(self.now, l.job_id, l.attempt, r);
        self.drain();
    }

    /// Carries out every queued command, checking persist-before-act on each launch and stop.
    pub(crate) fn drain(&mut self) {
        while let Some(c) = self.core.poll_command() {
            let verify = matches!(c, Command::Verify(_));
            match c {
                Command::Persist(b) => self.persist(b),
                Command::Launch(l) if l.job_id < 0 => {
                    let stored = self.store_instances.get(&-l.job_id);
                    assert!(
                        stored.is_some_and(|r| r.state
                            == crate::services::InstanceState::Starting
                            && r.attempt == l.attempt
                            && r.placement == l.placement),
                        "launch of instance {} attempt {} before its start was persisted: {stored:?}",
                        -l.job_id,
                        l.attempt
                    );
                    if self.hold_launches {
                        self.held_launches.push(l);
                    } else {
                        self.launched(l);
                    }
                }
                Command::Launch(l) => {
                    let stored = self.store_jobs.get(&l.job_id);
                    assert!(
                        stored.is_some_and(|r| r.state == JobState::Starting
                            && r.attempt == l.attempt
                            && r.placement == l.placement),
                        "launch of job {} attempt {} before its start was persisted: {stored:?}",
                        l.job_id,
                        l.attempt
                    );
                    self.placements
                        .push((l.job_id, l.attempt, l.placement.clone()));
                    if self.hold_launches {
                        // Sent (the event), its answer to come.
                        self.events.push(Event::Launch(
                            l.job_id,
                            l.attempt,
                            l.placement
                                .iter()
                                .map(|s| (s.node.clone(), s.gpus))
                                .collect(),
                        ));
                        self.held_launches.push(l);
                    } else {
                        self.launched(l);
                    }
                }
                Command::Stop { run, preempt } => {
                    let stored = self.store_runs.get(&run.handle);
                    assert!(
                        stored.is_some_and(|r| r.state == RunState::Stop),
                        "stop of run {} before the decision was persisted: {stored:?}",
                        run.handle
                    );
                    self.events
                        .push(Event::Stop(run.job_id, run.attempt, preempt));
                    let r = if self.refuse_stops > 0 {
                        self.refuse_stops -= 1;
                        Err(BackendError::Unsupported("scripted refusal".into()))
                    } else {
                        if let Some(s) = self.runs.get_mut(&run.handle) {
                            if !s.status.is_terminal() {
                                s.status = if preempt {
                                    RunStatus::Preempted
                                } else {
                                    RunStatus::Cancelled
                                };
                            }
                        }
                        Ok(())
                    };
                    self.core.handle_stopped(run, r);
                }
                Command::Poll(handles) | Command::Verify(handles) => {
                    self.events.push(if verify {
                        Event::Verify(handles.len())
                    } else {
                        Event::Poll(handles.len())
                    });
                    let statuses = handles
                        .into_iter()
                        .map(|h| {
                            let s = self
                                .runs
                                .get(&h.0)
                                .map_or(RunStatus::Unknown, |r| r.status.clone());
                            (h, s)
                        })
                        .collect();
                    if verify {
                        self.core.handle_verified(self.now, statuses);
                    } else {
                        self.core.handle_statuses(self.now, statuses);
                    }
                }
                Command::Retune(r) => {
                    let stored = self.store_jobs.get(&r.job_id);
                    let instance = self.store_instances.get(&-r.job_id);
                    assert!(
                        stored.is_some_and(|j| j.placement == r.placement)
                            || instance.is_some_and(|i| i.placement == r.placement),
                        "retune of job {} before its new allocation was persisted",
                        r.job_id
                    );
                    self.events.push(Event::Retune(r.job_id, r.attempt));
                    let result = match &self.retune_error {
                        Some(e) => Err(e.clone()),
                        None => Ok(()),
                    };
                    self.core
                        .handle_retuned(self.now, r.job_id, r.attempt, result);
                }
                Command::Reconfigure { node, request } => {
                    self.events.push(Event::Reconfigure(
                        request.node.clone(),
                        request.gpu,
                        request
                            .to
                            .as_ref()
                            .map(|l| l.iter().map(|m| m.profile.clone()).collect()),
                    ));
                    if self.reconfigure_delay > SimDuration::ZERO {
                        let due = self.now + self.reconfigure_delay;
                        self.reconfigurations.push((due, node, request.gpu));
                        continue;
                    }
                    let result = match &self.reconfigure_error {
                        Some(e) => Err(e.clone()),
                        None => Ok(()),
                    };
                    self.core
                        .handle_reconfigured(self.now, node, request.gpu, result);
                }
                Command::Inventory => {
                    self.events.push(Event::Inventory);
                    let nodes = self.nodes.clone();
                    self.core.handle_inventory(self.now, &nodes);
                }
                Command::Find {
                    job_id,
                    attempt,
                    run_name,
                } => {
                    self.events.push(Event::Find(job_id, attempt));
                    let found = self
                        .runs
                        .iter()
                        .find(|(_, r)| {
                            r.name == run_name && (self.find_ended || !r.status.is_terminal())
                        })
                        .map(|(h, _)| Handle(h.clone()));
                    self.core.handle_found(self.now, job_id, attempt, found);
                }
            }
        }
    }

    /// Answers the reconfigurations due by now (see `reconfigure_delay`), in the order they
    /// were asked, then carries out what follows.
    pub(crate) fn answer_reconfigurations(&mut self) {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.reconfigurations)
            .into_iter()
            .partition(|&(at, _, _)| at <= now);
        self.reconfigurations = later;
        for (_, node, gpu) in due {
            let result = match &self.reconfigure_error {
                Some(e) => Err(e.clone()),
                None => Ok(()),
            };
            self.core.handle_reconfigured(now, node, gpu, result);
        }
        self.drain();
    }

    /// When the next reconfiguration under way is answered.
    pub(crate) fn next_reconfiguration(&self) -> Option<SimTime> {
        self.reconfigurations.iter().map(|&(at, _, _)| at).min()
    }

    /// Events since the last call (and forgets them).
    pub(crate) fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// GPUs held per node by jobs the core thinks are starting or running.
    pub(crate) fn held_gpus(&self) -> BTreeMap<String, u32> {
        let mut m = BTreeMap::new();
        for row in self
            .store_jobs
            .keys()
            .filter_map(|&id| self.core.job_row(id))
        {
            if matches!(row.state, JobState::Starting | JobState::Running) {
                for s in &row.placement {
                    *m.entry(s.node.clone()).or_default() += s.gpus;
                }
            }
        }
        m
    }
}
