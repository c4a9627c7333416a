//! A read-only copy of the live state for the forecaster ([`crate::forecast`]): what the
//! simulator needs to fork from now. Nothing here changes the core.

use super::*;
use crate::forecast::ForecastInput;
use tessera_sim::{RunningAt, Snapshot, SnapshotGpu, SnapshotJob};

impl Core {
    /// The live state at `now` as a simulator [`Snapshot`] with its workload: every job not
    /// finished (pending ones with the service they attained, running ones with their
    /// allocation and remaining work), every GPU's MIG layout and health, and what service
    /// instances hold. O(active jobs + GPUs); the driver calls it on the scheduling thread
    /// and hands the copy to the forecaster's thread.
    ///
    /// Work done by a running job: its last progress report, carried on at its reported
    /// rate to `now`; without reports, its attained GPU-time at its declared speed (the
    /// spec's iterations over its declared duration, the daemon's default duration when it
    /// declares none). A reported rate also becomes the job's speed in the forked run.
    pub fn forecast_input(&self, now: SimTime) -> ForecastInput {
        let mut entries: Vec<(usize, TrainingJob, SimDuration)> =
            Vec::with_capacity(self.active.len());
        for &idx in &self.active {
            let (Some(job), Some(spec)) = (self.jobs.get(idx), self.specs.get(idx)) else {
                continue;
            };
            if job.archived || job.row.state.is_terminal() {
                continue;
            }
            let mut tj = spec.clone();
            tj.submit = tj.submit.min(now);
            let declared = tj.duration;
            if let Some(rate) = job.row.iters_per_sec.filter(|r| r.is_finite() && *r > 0.0) {
                tj.duration = SimDuration::from_secs_f64(tj.iterations as f64 / rate);
            }
            entries.push((idx, tj, declared));
        }
        // The forked run numbers jobs by submission, as the simulator's workloads are.
        entries.sort_by_key(|(idx, tj, _)| (tj.submit, *idx));
        let mut ids = Vec::with_capacity(entries.len());
        let mut jobs = Vec::with_capacity(entries.len());
        let mut declared = Vec::with_capacity(entries.len());
        let mut snap_jobs = Vec::new();
        for (n, (idx, mut tj, limit)) in entries.into_iter().enumerate() {
            let job = &self.jobs[idx];
            tj.id = tessera_model::JobId(n as u32);
            let held = job.alloc.as_ref().filter(|_| !job.held);
            let resumes = SimTime::from_micros(job.resumes_us);
            let attained = job.attained_us.saturating_add(held.map_or(0, |a| {
                tessera_sched::book::service_between(a.gpus(), self.last_accrual, resumes, now)
            }));
            let rate = tj.reference_throughput();
            let done = match (job.row.progress_us, held) {
                (Some(at), Some(_)) => {
                    let from = SimTime::from_micros(at).max(resumes);
                    job.row.progress_iters as f64 + rate * now.saturating_since(from).as_secs_f64()
                }
                (Some(_), None) => job.row.progress_iters as f64,
                (None, _) => attained as f64 / 1e6 * rate / f64::from(tj.gpus.max(1)),
            };
            let running = held.map(|a| RunningAt {
                allocation: a.clone(),
                resumes_at: resumes,
            });
            if running.is_some() || done > 0.0 || attained > 0 {
                snap_jobs.push(SnapshotJob {
                    job: tj.id,
                    done_iters: done.min(tj.iterations as f64),
                    attained_gpu_us: attained,
                    preemptions: job.row.preemptions,
                    running,
                });
            }
            ids.push(job.row.id);
            declared.push(limit);
            jobs.push(tj);
        }
        let mut gpus = Vec::new();
        for node in &self.map.cluster.nodes {
            for (g, state) in self.devices.gpus(node.id).iter().enumerate() {
                let unhealthy = self.unhealthy_gpus.contains_key(&(node.id.0, g as u32));
                if state.mig.is_some() || state.ready_at > now || state.down || unhealthy {
                    gpus.push(SnapshotGpu {
                        node: node.id,
                        gpu: g as u32,
                        layout: state.mig.clone(),
                        ready_at: state.ready_at,
                        down: state.down || unhealthy,
                    });
                }
            }
        }
        let (reserved_by, reserved) = self
            .instance_holders()
            .map(|(by, a)| (by, a.clone()))
            .unzip();
        ForecastInput {
            cluster: self.map.cluster.clone(),
            node_names: self.map.logical.iter().map(|l| l.node.clone()).collect(),
            jobs,
            ids,
            declared,
            snapshot: Snapshot {
                now,
                jobs: snap_jobs,
                gpus,
                reserved,
            },
            reserved_by,
            restart_costs: self.settings.restart_costs.clone(),
        }
    }
}
