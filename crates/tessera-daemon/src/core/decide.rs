//! Scheduling, the decision: the policy called, its actions validated in order.

use super::*;

impl Core {
    /// One scheduling point: [`decide`](Self::decide), then [`apply`](Self::apply).
    pub fn schedule(&mut self, now: SimTime) {
        let decisions = self.decide(now);
        self.apply(now, decisions);
    }

    /// The decision half of a scheduling point: builds the view, calls the policy and
    /// validates its actions against free capacity (what `tessera_scheduling_latency_seconds`
    /// measures). Nothing changes until [`apply`](Self::apply).
    pub fn decide(&mut self, now: SimTime) -> Decisions {
        self.last_schedule = Some(now);
        let mut trigger = std::mem::take(&mut self.trigger);
        if self.retry_at.is_some_and(|r| now >= r) {
            self.retry_at = None;
            trigger.completion = true;
        }
        if self.wakeup.is_some_and(|w| now >= w) {
            self.wakeup = None;
            trigger.wakeup = true;
        }
        if let (Some(r), Some(len)) = (self.next_round, self.policy.round_length()) {
            if now >= r {
                trigger.round = true;
                let mut next = r;
                while next <= now {
                    next += len.max(SimDuration::from_micros(1));
                }
                self.next_round = Some(next);
            }
        }
        if self.services.timer.is_some_and(|t| now >= t) {
            trigger.wakeup = true;
        }
        self.accrue(now);
        self.sync_active(now);
        self.compact_finished();
        #[cfg(test)]
        if self.view_mismatch.is_none() {
            let (kept, full) = (self.kept_active(), self.full_active());
            if kept != full {
                self.view_mismatch = Some(format!("at {now:?}: kept {kept:?}, rebuilt {full:?}"));
            }
            for (i, job) in self.jobs.iter().enumerate() {
                let n = self.verifying.values().filter(|v| v.idx == i).count();
                if n != job.unverified_runs as usize {
                    self.view_mismatch = Some(format!(
                        "at {now:?}: job {i} counts {} runs being verified, {n} are",
                        job.unverified_runs
                    ));
                    break;
                }
            }
        }
        self.build_service_views(now);
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        // As the simulator: the policy is called only while it has something to place (a
        // job or a service); an idle cluster's layout stays as the last job left it.
        if self.active_buf.is_empty() && self.services.views.is_empty() {
            self.actions = actions;
            self.refused.clear();
            return Decisions(Vec::new());
        }
        // What the policy sees as free: the device-level state, nothing on nodes that are
        // not up.
        let view_free: Vec<Resources> = self
            .devices
            .free()
            .iter()
            .zip(&self.map.logical)
            .map(|(f, l)| {
                if l.health == NodeHealth::Up {
                    *f
                } else {
                    Resources::default()
                }
            })
            .collect();
        {
            let view = ClusterView {
                now,
                trigger,
                cluster: &self.map.cluster,
                free: &view_free,
                state: &self.devices,
                jobs: &self.specs,
                active: &self.active_buf,
                services: &self.services.views,
            };
            self.policy.schedule(&view, &mut actions);
        }
        // As the simulator: a later wake-up replaces the pending one; none keeps it.
        if let Some(at) = self.policy.wakeup().filter(|&at| at > now) {
            self.wakeup = Some(at);
        }
        // Validate in order against a scratch copy of the device state, as the simulator
        // does: an action sees the effect of the earlier ones of its batch.
        let mut scratch = self.devices.clone();
        let mut holding: BTreeMap<usize, Option<Allocation>> = BTreeMap::new();
        let mut instances: BTreeMap<i64, Option<Allocation>> = BTreeMap::new();
        let mut plans = Vec::new();
        self.refused.clear();
        for action in actions.drain(..) {
            let checked = if action.service().is_some() {
                self.check_service(&mut scratch, &mut instances, &action, now)
            } else {
                self.check(&mut scratch, &mut holding, &action, now)
            };
            match checked {
                Ok(p) => plans.push(p),
                Err(e) => {
                    self.metrics.rejected_actions += 1;
                    tracing::warn!(
                        policy = self.policy.name(),
                        action = action.kind(),
                        job = ?action.job(),
                        "refused: {e}"
                    );
                    self.refused.push((action, e));
                }
            }
        }
        self.actions = actions;
        Decisions(plans)
    }

    /// The actions refused at the last scheduling point, with the reasons.
    pub fn refused(&self) -> &[(Action, Refusal)] {
        &self.refused
    }

    /// Checks one action against `scratch` (the device state after the batch's earlier
    /// actions) and applies it there: [`tessera_sched::validate`], then the daemon's own
    /// checks (node health, GPU health).
    pub(super) fn check(
        &self,
        scratch: &mut ClusterState,
        holding: &mut BTreeMap<usize, Option<Allocation>>,
        action: &Action,
        now: SimTime,
    ) -> Result<Plan, Refusal> {
        if let Action::Reconfigure { node, gpu, layout } = action {
            self.check_node_up(*node)?;
            self.check_gpu_healthy(*node, *gpu)?;
            scratch.check_reconfigure(&self.map.cluster, *node, *gpu, layout.as_deref())?;
            // Unavailable until the backend has answered (then ready at once, or unhealthy).
            scratch.reconfigure(*node, *gpu, layout.clone(), SimTime::MAX);
            return Ok(Plan::Reconfigure(*node, *gpu, layout.clone()));
        }
        let Some(job) = action.job() else {
            return Err(Refusal::Unsupported(action.kind()));
        };
        let idx = job.index();
        // The daemon's own checks first: what the simulator has no notion of.
        if let Action::Start { allocation, .. }
        | Action::Resize { allocation, .. }
        | Action::Retune { allocation, .. } = action
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
        let current = match holding.get(&idx) {
            Some(h) => h.clone(),
            None => {
                let j = self
                    .jobs
                    .get(idx)
                    .filter(|j| !j.held && !j.row.state.is_terminal())
                    .ok_or(Refusal::NotActive(idx))?;
                if j.row.state == JobState::Pending {
                    None
                } else {
                    j.alloc.clone()
                }
            }
        };
        let new = validate(
            scratch,
            &self.map.cluster,
            &self.specs[idx],
            current.as_ref(),
            action,
            now,
        )?;
        let plan = match (action, new.clone()) {
            (Action::Start { .. }, Some(a)) => Plan::Start(idx, a),
            (Action::Preempt { .. }, None) => Plan::Preempt(idx),
            (Action::Resize { .. }, Some(a)) => Plan::Resize(idx, a),
            (Action::Retune { .. }, Some(a)) => Plan::Retune(idx, a),
            // Variants the daemon does not carry out (yet): refused, never half-applied.
            (other, _) => return Err(Refusal::Unsupported(other.kind())),
        };
        if let Some(old) = &current {
            scratch.release(&self.map.cluster, old);
        }
        if let Some(a) = &new {
            scratch.take(&self.map.cluster, a);
        }
        holding.insert(idx, new);
        Ok(plan)
    }

    pub(super) fn check_node_up(&self, node: NodeId) -> Result<(), Refusal> {
        match self.map.logical.get(node.index()) {
            Some(l) if l.health == NodeHealth::Up => Ok(()),
            Some(l) => Err(Refusal::NodeNotUp(l.node.clone())),
            None => Err(Refusal::NodeNotUp(format!("#{}", node.0))),
        }
    }

    pub(super) fn check_gpu_healthy(&self, node: NodeId, gpu: u32) -> Result<(), Refusal> {
        match self.unhealthy_gpus.get(&(node.0, gpu)) {
            None => Ok(()),
            Some(reason) => Err(Refusal::GpuUnhealthy {
                node: self
                    .map
                    .logical
                    .get(node.index())
                    .map_or_else(String::new, |l| l.node.clone()),
                gpu,
                reason: reason.clone(),
            }),
        }
    }
}
