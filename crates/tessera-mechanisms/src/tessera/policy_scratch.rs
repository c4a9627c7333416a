//! The scratch copy of the cluster the `tessera` policy's pieces decide on, one after the
//! other within one scheduling point: every action a piece returns is checked with the one
//! validator (`tessera_sched::validate`) against what the earlier pieces already took, and
//! applied to the copy, so that no piece over-allocates another's GPUs.

use std::borrow::Cow;
use std::collections::BTreeMap;

use tessera_model::{Allocation, JobId, SimDuration};
use tessera_sched::{validate, Action, ClusterState, ClusterView};

/// The cluster as the batch so far leaves it.
pub(crate) struct Scratch<'v> {
    /// Free resources and every GPU's state after the actions accepted so far: the view's
    /// own until the first accepted action changes it (copy on write: most scheduling
    /// points change nothing, and a copy is O(cluster)).
    pub(crate) state: Cow<'v, ClusterState>,
    /// Jobs whose holding an accepted action changed: what they hold now.
    held: BTreeMap<JobId, Option<Allocation>>,
    /// Positions of the view's active jobs by id, built on first need.
    index: Option<Vec<(JobId, u32)>>,
    /// Actions a piece returned that the validator refused (dropped; the piece notices at
    /// its next call, as after a refusal by a driver).
    pub(crate) refused: u64,
}

impl<'v> Scratch<'v> {
    /// The view's cluster state, copied at the first change.
    pub(crate) fn new(view: &ClusterView<'v>) -> Scratch<'v> {
        Scratch {
            state: Cow::Borrowed(view.state),
            held: BTreeMap::new(),
            index: None,
            refused: 0,
        }
    }

    /// What `job` holds after the actions accepted so far.
    pub(crate) fn holding(&mut self, view: &ClusterView<'_>, job: JobId) -> Option<Allocation> {
        if let Some(h) = self.held.get(&job) {
            return h.clone();
        }
        let index = self.index.get_or_insert_with(|| {
            let mut v: Vec<(JobId, u32)> = view
                .active
                .iter()
                .enumerate()
                .map(|(i, a)| (a.id, i as u32))
                .collect();
            v.sort_unstable();
            v
        });
        let pos = index.binary_search_by_key(&job, |&(j, _)| j).ok()?;
        let (_, i) = index[pos];
        view.active.get(i as usize)?.allocation.clone()
    }

    /// Checks `action` against the copy and applies it; false (and no change) when the
    /// validator refuses it.
    pub(crate) fn apply(&mut self, view: &ClusterView<'_>, action: &Action) -> bool {
        let ok = self.try_apply(view, action);
        if !ok {
            self.refused += 1;
        }
        ok
    }

    fn try_apply(&mut self, view: &ClusterView<'_>, action: &Action) -> bool {
        let cluster = view.cluster;
        match action {
            Action::Start { job, .. }
            | Action::Preempt { job }
            | Action::Resize { job, .. }
            | Action::Retune { job, .. } => {
                let Some(spec) = view.jobs.get(job.index()) else {
                    return false;
                };
                let holding = self.holding(view, *job);
                match validate(
                    &self.state,
                    cluster,
                    spec,
                    holding.as_ref(),
                    action,
                    view.now,
                ) {
                    Ok(after) => {
                        if let Some(old) = &holding {
                            self.state.to_mut().release(cluster, old);
                        }
                        if let Some(new) = &after {
                            self.state.to_mut().take(cluster, new);
                        }
                        self.held.insert(*job, after);
                        true
                    }
                    Err(_) => false,
                }
            }
            Action::Reconfigure { node, gpu, layout } => {
                if self
                    .state
                    .check_reconfigure(cluster, *node, *gpu, layout.as_deref())
                    .is_err()
                {
                    return false;
                }
                // Not ready within this batch: no other piece may take it now.
                self.state.to_mut().reconfigure(
                    *node,
                    *gpu,
                    layout.clone(),
                    view.now + SimDuration::from_micros(1),
                );
                true
            }
            Action::ScaleOut { service, .. } => {
                let Some(svc) = view.services.get(service.index()) else {
                    return false;
                };
                match validate(&self.state, cluster, &svc.spec, None, action, view.now) {
                    Ok(Some(new)) => {
                        self.state.to_mut().take(cluster, &new);
                        true
                    }
                    _ => false,
                }
            }
            // The instance's GPU is released once its batch in flight completes, later than
            // this batch: nothing is freed here.
            Action::ScaleIn { service, instance } => view
                .services
                .get(service.index())
                .is_some_and(|s| s.instances.iter().any(|i| i.id == *instance)),
            Action::RetuneInstance {
                service, instance, ..
            } => {
                let Some(svc) = view.services.get(service.index()) else {
                    return false;
                };
                let Some(old) = svc.instances.iter().find(|i| i.id == *instance) else {
                    return false;
                };
                match validate(
                    &self.state,
                    cluster,
                    &svc.spec,
                    Some(&old.allocation),
                    action,
                    view.now,
                ) {
                    Ok(Some(new)) => {
                        self.state.to_mut().release(cluster, &old.allocation);
                        self.state.to_mut().take(cluster, &new);
                        true
                    }
                    _ => false,
                }
            }
        }
    }
}
