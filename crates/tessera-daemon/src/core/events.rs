//! Hooks of the event log ([`crate::events`]): called where the core applies a decision or a
//! backend's answer. They only record; nothing here changes what the core decides.

use super::*;

impl Core {
    /// A service instance added (`out`) or about to be removed, by instance id.
    pub(super) fn note_scaled(&mut self, now_us: u64, out: bool, instance: i64) {
        let Some((service, name, tenant, nodes)) = self.instance_event_info(instance) else {
            return;
        };
        let detail = if out {
            format!("instance {instance} added on {}", nodes.join(","))
        } else {
            format!("instance {instance} removed")
        };
        self.events.record_scaled(
            now_us, out, service, &name, &tenant, instance, nodes, detail,
        );
    }

    /// A GPU's reconfiguration answered: `outcome` is what became of it.
    pub(super) fn note_reconfigured(
        &mut self,
        now: SimTime,
        node: NodeId,
        gpu: u32,
        outcome: &str,
    ) {
        let name = self
            .map
            .logical
            .get(node.index())
            .map_or_else(String::new, |l| l.node.clone());
        let layout = self
            .devices
            .gpus(node)
            .get(gpu as usize)
            .and_then(|g| g.mig.clone())
            .map(|l| {
                let placed = self.map.placed_layout(node, &l).unwrap_or_default();
                if placed.is_empty() {
                    "no MIG instance".to_string()
                } else {
                    placed
                        .iter()
                        .map(|m| format!("{}@{}", m.profile, m.start))
                        .collect::<Vec<_>>()
                        .join(" ")
                }
            })
            .unwrap_or_else(|| "whole (MIG off)".to_string());
        self.events.record_reconfigured(
            now.as_micros(),
            &name,
            gpu,
            format!("{outcome}; layout: {layout}"),
        );
    }

    /// The recent events a caller may see: an administrator every event, a tenant its own
    /// jobs' and services' and every GPU's (nodes are visible to every tenant), a job token
    /// its own job's.
    pub(crate) fn events(
        &self,
        caller: &super::api::Caller,
        after: Option<u64>,
        limit: usize,
    ) -> crate::events::EventList {
        let events = self.events.list(after, limit, |e| match caller {
            super::api::Caller::Tenant { admin: true, .. } => true,
            super::api::Caller::Tenant { name, .. } => {
                e.tenant.is_none() || e.tenant.as_deref() == Some(name.as_str())
            }
            super::api::Caller::Job { id } => e.job == Some(*id),
        });
        crate::events::EventList { events }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{node, policy, Harness};
    use crate::core::runs::RunStatus;
    use crate::events::EventKind;

    fn admin() -> super::super::api::Caller {
        super::super::api::Caller::Tenant {
            name: "ops".into(),
            admin: true,
        }
    }

    /// Issue 39 item 4: what the core applies is in the event log, a preemption with its
    /// reason: LAS on one GPU gives it to a new job at the next round.
    #[test]
    fn starts_preemptions_and_ends_are_events() {
        let mut h = Harness::new(vec![node("n1", 1)], policy("las", Some(60)));
        let x = h.submit("x", 1, 10_000);
        h.schedule();
        h.advance(90);
        let b = h.submit("b", 1, 10_000);
        h.schedule();
        h.now = h.core.poll_timeout().expect("a round is due");
        h.poll();
        h.schedule();
        h.advance(5);
        h.end_run(b, RunStatus::Completed);
        h.poll();
        let events = h.core.events(&admin(), None, 100).events;
        let seen: Vec<(EventKind, Option<i64>)> = events.iter().map(|e| (e.kind, e.job)).collect();
        assert_eq!(
            seen,
            [
                (EventKind::Started, Some(x)),
                (EventKind::Preempted, Some(x)),
                (EventKind::Started, Some(b)),
                (EventKind::Finished, Some(b)),
            ],
            "{events:?}"
        );
        assert_eq!(events[1].detail, "preempted by the policy; requeued");
        assert_eq!(events[2].nodes, ["n1"]);
        assert_eq!(events[1].nodes, ["n1"], "preempted from where it ran");
        assert_eq!(events[3].nodes, ["n1"], "finished where it ran");
        // Another tenant sees none of these jobs' events.
        let other = super::super::api::Caller::Tenant {
            name: "nobody".into(),
            admin: false,
        };
        assert!(h.core.events(&other, None, 100).events.is_empty());
    }
}
