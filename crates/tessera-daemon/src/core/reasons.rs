//! Why pending jobs wait: the policy's statement, else the generic analysis
//! ([`tessera_sched::reasons`]), against the view the policy decided on (what is free on
//! nodes that are up, `view.active` as of the last scheduling point). The simulator asks the
//! same functions with the same view, so both drivers give the same reasons.

use super::api::Caller;
use super::*;
use crate::types::{GroupCapacity, Holder, WaitReason};
use tessera_sched::reasons::{self, Detail, PendingReason, RequestShape, WaitKind, Waiting};

/// Explains pending jobs one after another on one view: the free resources the policy sees
/// are computed once; in listings, reasons are shared by jobs of one request shape (as the
/// simulator charges them) and only a job asked about alone gets the policy's details.
pub(crate) struct Explainer<'c> {
    core: &'c Core,
    /// Holders the caller may not see (another tenant's jobs) are counted, not named.
    caller: &'c Caller,
    now: SimTime,
    free: Vec<Resources>,
    by_shape: HashMap<RequestShape, PendingReason>,
}

impl Core {
    /// The free resources the policy sees: nothing on nodes that are not up (as `decide`).
    pub(super) fn policy_free(&self) -> Vec<Resources> {
        self.devices
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
            .collect()
    }

    /// An [`Explainer`] of pending jobs at `now`, for `caller`.
    pub(crate) fn explainer<'c>(&'c self, now: SimTime, caller: &'c Caller) -> Explainer<'c> {
        Explainer {
            core: self,
            caller,
            now,
            free: self.policy_free(),
            by_shape: HashMap::new(),
        }
    }

    /// The reason pending job `idx` waits, in full (for `describe`).
    pub(crate) fn wait_reason(
        &self,
        idx: usize,
        now: SimTime,
        caller: &Caller,
    ) -> Option<WaitReason> {
        self.explainer(now, caller).explain(idx, None)
    }
}

impl Explainer<'_> {
    /// Why job `idx` waits, `None` unless it is pending. `position`: its 1-based place in a
    /// listing (the jobs ahead of it there, shown for a job that fits now); `None` asks the
    /// policy for its full statement (its own order, its note).
    pub(crate) fn explain(&mut self, idx: usize, position: Option<u32>) -> Option<WaitReason> {
        let core = self.core;
        let job = core.jobs.get(idx)?;
        if job.row.state != JobState::Pending {
            return None;
        }
        let spec = core.specs.get(idx)?;
        let view = ClusterView {
            now: self.now,
            trigger: Trigger::default(),
            cluster: &core.map.cluster,
            free: &self.free,
            state: &core.devices,
            jobs: &core.specs,
            active: &core.active_buf,
            services: &core.services.views,
        };
        let mut reason = if job.held {
            // Its run failed with its node: held until a fresh inventory says which nodes
            // are down, so the policy does not place it there again.
            let mut r = reasons::explain(&view, spec, Some(Waiting::new(WaitKind::Unavailable)));
            r.note = Some("its node failed: held until the next inventory".to_string());
            r
        } else if let Some(pos) = position {
            let shape = RequestShape::of(spec);
            let mut r = match self.by_shape.get(&shape) {
                Some(r) => r.clone(),
                None => {
                    let stated = core.policy.pending_reason(&view, spec, Detail::Kind);
                    let r = reasons::explain(&view, spec, stated);
                    self.by_shape.insert(shape, r.clone());
                    r
                }
            };
            r.ahead = Some(pos.saturating_sub(1));
            r
        } else {
            let stated = core.policy.pending_reason(&view, spec, Detail::Full);
            let policy_counted = stated.as_ref().is_some_and(|w| w.ahead.is_some());
            let mut r = reasons::explain(&view, spec, stated);
            if !policy_counted {
                // The daemon's queue position counts jobs the policy has not seen yet
                // (submitted since its last decision); the view does not.
                r.ahead = core.position(idx).map(|p| p.saturating_sub(1));
            }
            r
        };
        if reason.kind == WaitKind::Unavailable && reason.note.is_none() {
            // GPUs of stopped runs still on their way out (drain.rs) are down meanwhile.
            reason.note = core.draining_note();
        }
        // Another tenant's jobs stay unnamed (as on the dashboard's nodes page): counted in
        // `holders_total`, left out of the names and the text.
        reason.holders.retain(|h| {
            core.jobs
                .get(h.job.index())
                .is_some_and(|j| Core::can_see(self.caller, &j.row))
        });
        Some(self.render(&reason))
    }

    /// The API's form of a reason: job ids for holders.
    fn render(&self, r: &PendingReason) -> WaitReason {
        let core = self.core;
        WaitReason {
            kind: r.kind.key().to_string(),
            text: r.to_string(),
            needs: r.need.to_string(),
            free: r
                .free
                .iter()
                .map(|g| GroupCapacity {
                    group: g.group.clone(),
                    gpu: g.gpu.clone(),
                    total_gpus: g.total_gpus,
                    free_gpus: g.free_gpus,
                    most_on_one_node: g.most_on_one_node,
                    unavailable_gpus: g.unavailable_gpus,
                    partitioned_gpus: g.partitioned_gpus,
                    free_mig_instances: g.free_mig_instances,
                    reconfiguring_gpus: g.reconfiguring_gpus,
                })
                .collect(),
            holders: r
                .holders
                .iter()
                .filter_map(|h| {
                    let row = &core.jobs.get(h.job.index())?.row;
                    Some(Holder {
                        id: row.id,
                        name: row.name.clone(),
                        gpus: h.gpus,
                    })
                })
                .collect(),
            holders_total: r.holders_total,
            ahead: r.ahead,
            note: r.note.clone(),
        }
    }
}
