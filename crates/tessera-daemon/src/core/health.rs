//! Inventory and node health: nodes going down, draining and coming back; fail-over.

use super::*;

impl Core {
    /// A fresh inventory: applies node health changes (a node going down or draining stops
    /// receiving jobs; one coming back is schedulable again). Nodes added or removed since
    /// start-up need a restart and are only logged.
    pub fn handle_inventory(&mut self, now: SimTime, nodes: &[InventoryNode]) {
        for (i, l) in self.map.logical.iter().enumerate() {
            self.reported_health[i] = match nodes.iter().find(|n| n.name == l.node) {
                Some(n) => n.health,
                None => NodeHealth::Down,
            };
        }
        if nodes
            .iter()
            .any(|n| !self.map.logical.iter().any(|l| l.node == n.name))
        {
            tracing::warn!(
                "the backend reports nodes added since start-up; restart the daemon to use them"
            );
        }
        self.apply_health(now);
        self.release_awaiting_inventory();
    }

    pub(super) fn release_awaiting_inventory(&mut self) {
        for idx in std::mem::take(&mut self.awaiting_inventory) {
            self.jobs[idx].held = false;
            self.touch(idx);
            self.trigger.completion = true;
        }
    }

    /// Sets (or, with `None`, clears) an administrator's health for a backend node, which
    /// wins over what the backend reports: `down` stops and requeues the node's jobs,
    /// `draining` lets them finish but places nothing new there.
    pub fn set_node_health(
        &mut self,
        now: SimTime,
        node: &str,
        health: Option<NodeHealth>,
    ) -> Result<(), ApiError> {
        if !self.map.logical.iter().any(|l| l.node == node) {
            return Err(ApiError::not_found(format!(
                "no node {:?}",
                node.chars().take(64).collect::<String>()
            )));
        }
        match health {
            Some(h) => self.health_overrides.insert(node.to_string(), h),
            None => self.health_overrides.remove(node),
        };
        self.apply_health(now);
        Ok(())
    }

    /// Applies health changes (backend or administrator) to capacity, and fails over the jobs
    /// of nodes that went down.
    pub(super) fn apply_health(&mut self, now: SimTime) {
        let mut changed = false;
        let mut went_down = Vec::new();
        // (logical node, now up): applied to the device state once the loop is done.
        let mut masks: Vec<(usize, bool)> = Vec::new();
        for (i, l) in self.map.logical.iter_mut().enumerate() {
            let health = self
                .health_overrides
                .get(&l.node)
                .copied()
                .unwrap_or(self.reported_health[i]);
            if health == l.health {
                continue;
            }
            if health == NodeHealth::Down {
                went_down.push(l.node.clone());
            }
            tracing::info!(node = %l.node, ?health, "node health changed");
            let was_up = l.health == NodeHealth::Up;
            l.health = health;
            changed = true;
            if was_up != (health == NodeHealth::Up) {
                masks.push((i, !was_up));
            }
            let full = self.map.cluster.capacity(tessera_model::NodeId(i as u32));
            let cap = if health == NodeHealth::Up {
                full
            } else {
                Resources::default()
            };
            // What jobs hold stays held; only the schedulable remainder changes.
            let held = Resources {
                gpus: self.capacity[i].gpus.saturating_sub(self.free[i].gpus),
                cpu: MilliCpu(self.capacity[i].cpu.0.saturating_sub(self.free[i].cpu.0)),
                memory: Bytes(
                    self.capacity[i]
                        .memory
                        .0
                        .saturating_sub(self.free[i].memory.0),
                ),
            };
            let mut free = cap;
            sub(&mut free, &held);
            self.capacity[i] = if health == NodeHealth::Up { full } else { held };
            self.free[i] = if health == NodeHealth::Up {
                free
            } else {
                Resources::default()
            };
        }
        for (i, up) in masks {
            self.mask_node(i, !up);
        }
        if changed {
            self.trigger.completion = true;
        }
        if went_down.is_empty() {
            return;
        }
        let victims: Vec<usize> = self
            .active
            .iter()
            .copied()
            .filter(|&i| {
                let r = &self.jobs[i].row;
                r.state == JobState::Running
                    && r.placement.iter().any(|s| went_down.contains(&s.node))
            })
            .collect();
        self.fail_over(now, &victims);
    }

    /// Stops the runs of jobs whose node went down and requeues the jobs, held out of the
    /// policy's view until the backend has told whether each stopped run had completed.
    pub(super) fn fail_over(&mut self, now: SimTime, victims: &[usize]) {
        let now_us = now.as_micros();
        let mut stopped = Vec::new();
        for &idx in victims {
            *self.metrics.preemptions.entry("node_down").or_default() += 1;
            let run = self.detach_to_verify(idx, "its node went down right after", true);
            self.release(idx);
            let job = &mut self.jobs[idx];
            job.row.preemptions += 1;
            job.row.backend_state = None;
            job.held = run.is_some();
            self.transition(
                idx,
                JobState::Pending,
                now_us,
                "a node it ran on went down; requeued",
            );
            stopped.extend(run);
        }
        let handles: Vec<Handle> = stopped.iter().map(|r| Handle(r.handle.clone())).collect();
        for run in stopped {
            self.act(Command::Stop {
                run,
                preempt: false,
            });
        }
        if !handles.is_empty() {
            self.act(Command::Verify(handles));
        }
        self.trigger.completion = true;
    }

    /// The inventory could not be read; the next refresh tries again.
    pub fn handle_inventory_failed(&mut self, error: &BackendError) {
        self.metrics.backend_errors += 1;
        tracing::warn!("inventory refresh failed: {error}");
        self.release_awaiting_inventory();
    }
}
