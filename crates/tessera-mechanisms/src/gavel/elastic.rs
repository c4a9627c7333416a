//! The `elastic` policy: ElasticFlow-style elastic scaling (Gu et al., ASPLOS'23), without
//! deadlines and blind to GPU types.
//!
//! The cluster is one pool of GPUs. A job's speed at `c` GPUs is the mean, over the cluster's
//! GPU types, of its estimated throughput at `c` (the policy does not tell types apart). At
//! every round (default 300 s): admit jobs first come, first served at their smallest feasible
//! count while the pool has GPUs; then hand the remaining GPUs out one step at a time (to the
//! job's next feasible count, at most twice its request) to the job with the largest
//! normalised speed-up per extra GPU, while that gain is positive. Each job then goes on the
//! first GPU type (in cluster order) with room, a running job staying where it is when its
//! count does not change. Between rounds, arriving jobs take free GPUs at their smallest
//! count.

use tessera_model::{JobId, SimDuration};
use tessera_sched::{Action, ClusterView, Policy};

use super::common::{cluster_types, counts_on, throughput_on, GpuType};
use super::policy::apply_configs;
use super::sia::{arrival_order, holdings};

/// Default round length.
pub const ELASTIC_ROUND: SimDuration = SimDuration::from_secs(300);

/// The elastic policy.
#[derive(Debug)]
pub struct ElasticPolicy {
    round: SimDuration,
}

impl ElasticPolicy {
    /// Elastic scaling with `round` (default 300 s).
    pub fn new(round: Option<SimDuration>) -> ElasticPolicy {
        ElasticPolicy {
            round: round.unwrap_or(ELASTIC_ROUND),
        }
    }
}

/// Type-blind speed curve of one job: (count, mean throughput over types), by count.
fn curve(view: &ClusterView<'_>, types: &[GpuType], pos: usize) -> Vec<(u32, f64)> {
    let job = &view.active[pos];
    let Some(spec) = view.spec(job) else {
        return Vec::new();
    };
    let cap = spec.gpus.max(1).saturating_mul(2);
    let mut counts: Vec<u32> = types
        .iter()
        .flat_map(|t| counts_on(view.cluster, job, spec, t.id))
        .filter(|&c| c <= cap)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    counts
        .into_iter()
        .filter_map(|c| {
            let usable: Vec<f64> = types
                .iter()
                .filter(|t| u64::from(c) <= t.capacity)
                .map(|t| throughput_on(view.cluster, job, spec, t.id, c))
                .filter(|&v| v > 0.0)
                .collect();
            (!usable.is_empty()).then(|| (c, usable.iter().sum::<f64>() / usable.len() as f64))
        })
        .collect()
}

impl Policy for ElasticPolicy {
    fn name(&self) -> &str {
        "elastic"
    }

    fn round_length(&self) -> Option<SimDuration> {
        Some(self.round)
    }

    /// Nothing is kept per job between calls: every call works from the view.
    fn renumber_jobs(&mut self, _map: &[Option<JobId>]) -> bool {
        true
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let types = cluster_types(view.cluster);
        let held = holdings(view, &types);
        let order = arrival_order(view);
        let n = view.active.len();
        let curves: Vec<Vec<(u32, f64)>> = (0..n).map(|p| curve(view, &types, p)).collect();
        let total: i64 = types.iter().map(|t| t.capacity as i64).sum();
        // Step index into each job's curve; None = not admitted.
        let mut step: Vec<Option<usize>> = vec![None; n];
        let replan = view.trigger.round;
        let mut pool = total;
        if !replan {
            for (pos, h) in held.iter().enumerate() {
                if let Some((_, count)) = h {
                    pool -= i64::from(*count);
                    step[pos] = curves[pos].iter().position(|(c, _)| c == count);
                }
            }
        }
        for &pos in &order {
            if held[pos].is_some() && !replan {
                continue;
            }
            if let Some((c, _)) = curves[pos].first() {
                if i64::from(*c) <= pool {
                    pool -= i64::from(*c);
                    step[pos] = Some(0);
                }
            }
        }
        if replan {
            // Spare GPUs to the best marginal speed-up per GPU (ties: first come).
            loop {
                let mut best: Option<(f64, usize)> = None;
                for &pos in &order {
                    let Some(s) = step[pos] else { continue };
                    let (Some(&(c0, v0)), Some(&(c1, v1))) =
                        (curves[pos].get(s), curves[pos].get(s + 1))
                    else {
                        continue;
                    };
                    let base = curves[pos].first().map_or(1.0, |x| x.1).max(1e-12);
                    let extra = i64::from(c1 - c0);
                    if extra > pool {
                        continue;
                    }
                    let gain = (v1 - v0) / base / extra as f64;
                    if gain > 1e-9 && best.is_none_or(|(b, _)| gain > b) {
                        best = Some((gain, pos));
                    }
                }
                let Some((_, pos)) = best else { break };
                if let Some(s) = step[pos] {
                    let grow = curves[pos][s + 1].0 - curves[pos][s].0;
                    pool -= i64::from(grow);
                    step[pos] = Some(s + 1);
                }
            }
        }
        // Types: running jobs keeping their count stay; others go where there is room, the
        // largest first (fewer strandings).
        let mut left: Vec<i64> = types.iter().map(|t| t.capacity as i64).collect();
        let mut target: Vec<Option<(usize, u32)>> = vec![None; n];
        let want: Vec<Option<u32>> = (0..n)
            .map(|p| step[p].and_then(|s| curves[p].get(s)).map(|x| x.0))
            .collect();
        for pos in 0..n {
            if let Some((t, c)) = held[pos] {
                // Between rounds nothing running moves.
                if !replan || want[pos] == Some(c) {
                    target[pos] = Some((t, c));
                    left[t] -= i64::from(c);
                }
            }
        }
        let mut rest: Vec<usize> = (0..n)
            .filter(|&p| want[p].is_some() && target[p].is_none())
            .collect();
        rest.sort_by_key(|&p| (std::cmp::Reverse(want[p]), view.active[p].id));
        for pos in rest {
            let Some(w) = want[pos] else { continue };
            let job = &view.active[pos];
            let Some(spec) = view.spec(job) else { continue };
            let fit = types.iter().enumerate().position(|(t, ty)| {
                left[t] >= i64::from(w) && throughput_on(view.cluster, job, spec, ty.id, w) > 0.0
            });
            if let Some(t) = fit {
                target[pos] = Some((t, w));
                left[t] -= i64::from(w);
            }
        }
        apply_configs(view, &types, &target, &held, actions);
    }
}

#[cfg(all(test, feature = "experiments"))]
mod tests {
    use super::*;
    use crate::gavel::bench::{queued_jobs, scaled_cluster};
    use tessera_sched::{ClusterState, Trigger};

    #[test]
    fn a_lone_job_scales_up_and_a_crowd_gets_one_gpu_each() {
        let c = scaled_cluster(1).unwrap();
        let state = ClusterState::new(&c);
        let free: Vec<_> = (0..c.nodes.len())
            .map(|i| c.capacity(tessera_model::NodeId(i as u32)))
            .collect();
        for (jobs, check) in [(1usize, 0u8), (108, 1)] {
            let (w, active) = queued_jobs(&c, jobs, 5);
            let view = ClusterView {
                now: tessera_model::SimTime::ZERO,
                trigger: Trigger {
                    round: true,
                    ..Trigger::default()
                },
                cluster: &c,
                free: &free,
                state: &state,
                jobs: w.jobs(),
                active: &active,
                services: &[],
            };
            let mut actions = Vec::new();
            ElasticPolicy::new(None).schedule(&view, &mut actions);
            let held: Vec<u32> = actions
                .iter()
                .map(|a| match a {
                    Action::Start { allocation, .. } => allocation.gpus(),
                    _ => 0,
                })
                .collect();
            if check == 0 {
                // More GPUs than its request (up to twice) when they speed it up.
                let asked = w.jobs()[0].gpus;
                assert_eq!(held.len(), 1);
                assert!(
                    held[0] > asked && held[0] <= 2 * asked.max(1),
                    "{held:?} vs {asked}"
                );
            } else {
                // 108 jobs on 108 GPUs: everyone admitted at one GPU.
                assert_eq!(held, vec![1; 108]);
            }
        }
    }
}
