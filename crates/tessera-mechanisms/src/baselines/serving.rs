//! `serve-exclusive`: the generic service-aware baseline. Training jobs go through FIFO
//! (with backfill); each inference instance gets a whole GPU (and the service's CPU and
//! memory), and services scale horizontally on queue length, checked every second:
//!
//! - a service that is active with no instance gets one;
//! - out by one when requests queued exceed `OUT_FACTOR × max batch` per ready instance and
//!   no instance is still cold-starting (one step per cold start, so a burst does not buy a
//!   GPU per tick before the first new instance could help);
//! - in by one after `CALM_TICKS` consecutive ticks with nothing queued and a recent p99
//!   under half the SLO, never below one instance while the service is active;
//! - after the service's end, every instance with an empty queue is removed.
//!
//! Deterministic: services are visited in id order, nodes in index order.

use tessera_model::{JobId, NodeShare, ServiceId, SimDuration, SimTime};
use tessera_sched::baselines::{JobOrder, OrderedPolicy};
use tessera_sched::{Action, ClusterView, Ledger, Policy, ServicePhase, ServiceView};

/// Queued requests per ready instance, in units of the max batch, beyond which it scales out.
pub const OUT_FACTOR: u64 = 2;
/// Calm one-second ticks before it scales in by one.
pub const CALM_TICKS: u32 = 30;
/// Autoscaler tick.
pub const TICK: SimDuration = SimDuration::from_secs(1);

/// The policy.
pub struct ServeExclusive {
    jobs: OrderedPolicy,
    calm: Vec<u32>,
    next_tick: Option<SimTime>,
}

impl ServeExclusive {
    /// FIFO for training jobs, exclusive instances for services.
    pub fn new(round: Option<SimDuration>) -> Self {
        ServeExclusive {
            jobs: OrderedPolicy::new(JobOrder::Fifo, round),
            calm: Vec::new(),
            next_tick: None,
        }
    }

    fn scale(
        &mut self,
        view: &ClusterView<'_>,
        svc: &ServiceView,
        ledger: &mut Ledger<'_>,
        actions: &mut Vec<Action>,
    ) {
        let id = svc.spec.id;
        let calm = &mut self.calm[id.index()];
        let n = svc.instances.len();
        match svc.phase {
            ServicePhase::Active => {}
            ServicePhase::Ended => {
                for i in svc.instances.iter().filter(|i| i.queue_len == 0) {
                    if svc.pending == 0 || n > 1 {
                        actions.push(Action::ScaleIn {
                            service: id,
                            instance: i.id,
                        });
                    }
                }
                return;
            }
            ServicePhase::Pending | ServicePhase::Unschedulable { .. } => return,
        }
        let ready = svc.ready_instances(view.now) as u64;
        let cold = n as u64 - ready;
        let queued = svc.queued();
        let per_ready = OUT_FACTOR * svc.spec.max_batch as u64 * ready.max(1);
        if n == 0 || (cold == 0 && queued > per_ready) {
            if scale_out(view, id, svc, ledger, actions) {
                *calm = 0;
            }
            return;
        }
        let quiet = queued == 0 && svc.p99_latency_s < svc.spec.slo.as_secs_f64() / 2.0;
        *calm = if quiet { *calm + 1 } else { 0 };
        if *calm >= CALM_TICKS && n > 1 {
            // The newest instance goes: it is the one most recently added for a burst.
            if let Some(last) = svc.instances.last() {
                actions.push(Action::ScaleIn {
                    service: id,
                    instance: last.id,
                });
            }
            *calm = 0;
        }
    }
}

/// Reserves a whole GPU with the service's CPU and memory on the first node that has one.
fn scale_out(
    view: &ClusterView<'_>,
    id: ServiceId,
    svc: &ServiceView,
    ledger: &mut Ledger<'_>,
    actions: &mut Vec<Action>,
) -> bool {
    let demand = &svc.spec.instance;
    for node in &view.cluster.nodes {
        if !svc.spec.gpu_types.is_empty() && !svc.spec.gpu_types.contains(&node.gpu) {
            continue;
        }
        let alloc = tessera_model::Allocation::new(vec![NodeShare::whole(
            node.id,
            1,
            demand.cpu,
            demand.memory,
        )]);
        if ledger.reserve(&alloc) {
            actions.push(Action::ScaleOut {
                service: id,
                allocation: alloc,
            });
            return true;
        }
    }
    false
}

impl Policy for ServeExclusive {
    fn name(&self) -> &str {
        "serve-exclusive"
    }

    fn round_length(&self) -> Option<SimDuration> {
        self.jobs.round_length()
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        // Jobs first (FIFO sees the free pool as it is), then instances on what is left.
        if !view.active.is_empty() {
            self.jobs.schedule(view, actions);
        }
        let mut ledger = Ledger::new(view.cluster, view.free);
        for a in actions.iter() {
            match a {
                Action::Start { allocation, .. } => {
                    ledger.reserve(allocation);
                }
                Action::Preempt { job } => {
                    if let Some(alloc) = view
                        .active
                        .iter()
                        .find(|j| j.id == *job)
                        .and_then(|j| j.allocation.as_ref())
                    {
                        ledger.release(alloc);
                    }
                }
                _ => {}
            }
        }
        self.calm.resize(view.services.len(), 0);
        for svc in view.services {
            self.scale(view, svc, &mut ledger, actions);
        }
        let ticking = view.services.iter().any(|s| {
            matches!(s.phase, ServicePhase::Active)
                || (matches!(s.phase, ServicePhase::Ended) && !s.instances.is_empty())
        });
        self.next_tick = ticking.then(|| view.now + TICK);
    }

    fn wakeup(&self) -> Option<SimTime> {
        self.next_tick
    }

    /// Per job only FIFO's queue; the autoscaler's state is per service (services are not
    /// renumbered).
    fn renumber_jobs(&mut self, map: &[Option<JobId>]) -> bool {
        self.jobs.renumber_jobs(map)
    }
}
