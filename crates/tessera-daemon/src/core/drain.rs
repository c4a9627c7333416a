//! Draining GPUs: a stopped run's GPUs stay out of the pool until the backend reports the run
//! gone.
//!
//! A cancel, a preemption, a resize, a restart, a node failure or a scale-in stops a run, but
//! the backend holds its GPUs until none of its processes is left (the local backend refuses a
//! launch onto them; Slurm keeps a completing job's resources). Counting them free at once let
//! the policy place a job there that the backend then refused and the core re-queued. Instead
//! each stopped run (or launch given up in flight, under its placeholder handle until it
//! answers) keeps its GPUs *draining*: marked down in the device state the policy reads (so
//! no policy places there and `validate` refuses it; a waiting job's reason is
//! [`WaitKind::Unavailable`](tessera_sched::reasons::WaitKind)), polled at every tick, and
//! given back when the backend reports the run over (any terminal status). A start decided in
//! the same batch as the stop that frees its GPUs (a preemption to make room) is recorded at
//! once but its launch waits (parked, as behind a verification) until those GPUs have
//! drained.

use super::*;

/// A stopped run whose GPUs are held until the backend reports it gone.
#[derive(Debug)]
pub(super) struct Drain {
    /// Daemon job id (an instance's is negative), for reasons and logs.
    job_id: i64,
    /// The GPUs it held: (logical node, index).
    gpus: Vec<(u32, u32)>,
}

impl Core {
    /// Job `idx`'s run `handle` (or its launch's placeholder) is being stopped: the GPUs of
    /// the allocation it still holds drain. Call before the allocation is released.
    pub(super) fn drain_job_run(&mut self, idx: usize, handle: Option<String>) {
        let (Some(handle), Some(job)) = (handle, self.jobs.get(idx)) else {
            return;
        };
        let Some(alloc) = job.alloc.clone() else {
            return;
        };
        self.start_draining(handle, job.row.id, &alloc);
    }

    /// Run `handle` of `job_id` (a job's, or an instance's by negative id) is being stopped:
    /// the GPUs of `alloc` drain until the backend reports it gone.
    pub(super) fn start_draining(&mut self, handle: String, job_id: i64, alloc: &Allocation) {
        let mut gpus = Vec::new();
        for s in &alloc.shares {
            let Some(d) = s.devices else { continue };
            for g in d.gpus.iter() {
                gpus.push((s.node.0, g));
                self.devices.set_down(s.node, g, true);
            }
        }
        if gpus.is_empty() {
            return;
        }
        if let Some(old) = self.draining.insert(handle, Drain { job_id, gpus }) {
            // The same run stopped twice (a retried stop): its GPUs are the union.
            self.undrain(&old.gpus);
        }
    }

    /// The launch given up in flight under `placeholder` answered: the run it started (`Some`)
    /// drains in its place; nothing started (`None`), so its GPUs are free.
    pub(super) fn launch_answered_draining(&mut self, placeholder: &str, run: Option<&str>) {
        let Some(d) = self.draining.remove(placeholder) else {
            return;
        };
        match run {
            Some(h) => {
                self.draining.insert(h.to_string(), d);
            }
            None => self.end_drain(d),
        }
    }

    /// Backend statuses (of a poll or a verification): the drained runs reported over give
    /// their GPUs back.
    pub(super) fn drain_statuses(&mut self, statuses: &[(Handle, RunStatus)]) {
        if self.draining.is_empty() {
            return;
        }
        for (h, status) in statuses {
            if !status.is_terminal() {
                continue;
            }
            if let Some(d) = self.draining.remove(&h.0) {
                self.end_drain(d);
            }
        }
    }

    /// Stopped runs to poll until they are gone (placeholders have no backend handle yet).
    pub(super) fn draining_handles(&self) -> impl Iterator<Item = Handle> + '_ {
        self.draining
            .keys()
            .filter(|h| !h.starts_with("launching:"))
            .map(|h| Handle(h.clone()))
    }

    /// A drain is over: its GPUs are up again (unless another drain or the node's health
    /// keeps them down), and launches held for them may go.
    fn end_drain(&mut self, d: Drain) {
        tracing::debug!(job = d.job_id, gpus = d.gpus.len(), "stopped run gone");
        self.undrain(&d.gpus);
        self.trigger.completion = true;
        self.release_drain_holds();
    }

    /// Marks `gpus` up again where nothing else keeps them down.
    fn undrain(&mut self, gpus: &[(u32, u32)]) {
        for &(n, g) in gpus {
            let node_up = self
                .map
                .logical
                .get(n as usize)
                .is_some_and(|l| l.health == NodeHealth::Up);
            if node_up && !self.gpu_draining(n, g) {
                self.devices.set_down(NodeId(n), g, false);
            }
        }
    }

    /// Takes `alloc` in the device state, also where it lies on draining GPUs (a start decided
    /// with the stop that makes room for it): [`ClusterState::take`] counts what it takes out
    /// of the free pool, which a GPU marked down is not in, so each such GPU is brought up for
    /// the take and marked down again after it.
    pub(super) fn take_devices(&mut self, alloc: &Allocation) {
        let mut draining = Vec::new();
        if !self.draining.is_empty() {
            for s in &alloc.shares {
                let Some(d) = s.devices else { continue };
                for g in d.gpus.iter() {
                    if self.gpu_draining(s.node.0, g) {
                        self.devices.set_down(s.node, g, false);
                        draining.push((s.node, g));
                    }
                }
            }
        }
        self.devices.take(&self.map.cluster, alloc);
        for (n, g) in draining {
            self.devices.set_down(n, g, true);
        }
    }

    /// Whether a stopped run still holds GPU `gpu` of logical node `node`.
    pub(super) fn gpu_draining(&self, node: u32, gpu: u32) -> bool {
        self.draining
            .values()
            .any(|d| d.gpus.iter().any(|&(n, g)| n == node && g == gpu))
    }

    /// Whether `launch` would start on a GPU a stopped run still holds.
    fn launch_drains(&self, launch: &Launch) -> bool {
        if self.draining.is_empty() {
            return false;
        }
        launch.placement.iter().any(|s| {
            let Some(n) = self
                .map
                .logical
                .iter()
                .position(|l| l.node == s.node && l.gres_type == s.gres_type)
            else {
                return false;
            };
            s.devices
                .as_ref()
                .is_some_and(|d| d.indices.iter().any(|&g| self.gpu_draining(n as u32, g)))
        })
    }

    /// Holds back a launch whose GPUs are still draining (see the [module docs](self)): a
    /// job's is parked (never sent, so a cancel records nothing in flight), an instance's is
    /// kept until [`release_drain_holds`](Self::release_drain_holds). `None` when held.
    pub(super) fn hold_for_drain(&mut self, launch: Launch) -> Option<Launch> {
        if !self.launch_drains(&launch) {
            return Some(launch);
        }
        tracing::debug!(
            job = launch.job_id,
            attempt = launch.attempt,
            "launch waits for GPUs still draining"
        );
        if services::Services::is_instance(launch.job_id) {
            let id = -launch.job_id;
            self.instance_launch_held(id);
            self.drain_held_instances.insert(id, launch);
        } else if let Some(&idx) = self.by_id.get(&launch.job_id) {
            // By daemon id: compaction renumbers job indices.
            self.drain_held_jobs.insert(launch.job_id);
            self.jobs[idx].parked = Some(launch);
        }
        None
    }

    /// Launches held for draining GPUs that may go now. A job's goes if it is still that
    /// attempt's start and no stopped run of its own is unverified (else the verification
    /// releases it); an instance's if it still waits for that attempt's launch.
    fn release_drain_holds(&mut self) {
        for id in std::mem::take(&mut self.drain_held_jobs) {
            let Some(&idx) = self.by_id.get(&id) else {
                continue;
            };
            let job = &self.jobs[idx];
            let current = job.row.state == JobState::Starting
                && job
                    .parked
                    .as_ref()
                    .is_some_and(|l| l.attempt == job.row.attempt);
            if !current || self.awaits_verification(idx) {
                continue;
            }
            if let Some(launch) = self.jobs[idx].parked.take() {
                // Held again (by `act`) if other GPUs of it still drain.
                self.act(Command::Launch(launch));
            }
        }
        for (id, launch) in std::mem::take(&mut self.drain_held_instances) {
            if self.instance_awaits_launch(id, launch.attempt) {
                self.instance_launch_sent(id);
                self.act(Command::Launch(launch));
            }
        }
    }

    /// GPUs held by stopped runs not yet gone: (backend node, GPU index, job id; an
    /// instance's is negative), for `describe` and tests.
    pub fn draining_gpus(&self) -> Vec<(String, u32, i64)> {
        let mut out: Vec<(String, u32, i64)> = self
            .draining
            .values()
            .flat_map(|d| {
                d.gpus.iter().map(|&(n, g)| {
                    let node = self
                        .map
                        .logical
                        .get(n as usize)
                        .map_or_else(String::new, |l| l.node.clone());
                    (node, g, d.job_id)
                })
            })
            .collect();
        out.sort();
        out
    }

    /// What a job told [`WaitKind::Unavailable`](tessera_sched::reasons::WaitKind) should
    /// know when GPUs are draining: how many, and that they come back once their runs end.
    pub(super) fn draining_note(&self) -> Option<String> {
        let gpus = self.draining_gpus();
        if gpus.is_empty() {
            return None;
        }
        let shown: Vec<String> = gpus
            .iter()
            .take(4)
            .map(|(n, g, _)| format!("GPU {g} of {n}"))
            .collect();
        let more = gpus.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        Some(format!(
            "{}{more} draining: stopped runs still on their way out, free once the backend \
             reports them gone",
            shown.join(", ")
        ))
    }
}
