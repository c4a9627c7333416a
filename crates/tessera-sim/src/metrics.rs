//! What a run produces: per-job records, a summary, and a utilization time series.

use std::sync::Arc;

use serde::Serialize;
use tessera_model::{Allocation, Cluster, GpuPart, JobId, MigGeometry, SimDuration, SimTime};

use crate::serving::{InstanceSeries, ServiceSummary};

/// Parts of a GPU are counted in units of 1/7000 of one (its GPU-equivalent): a MIG instance
/// of `c` compute slices is `c/7` of its GPU (1000·c units), a quota of `p` permille of SMs is
/// `p/1000` (7·p units), both exact integers, so that sums over a run do not drift.
pub const PART_UNITS_PER_GPU: u64 = 7000;

/// Units of a MIG compute slice and of an SM permille.
const UNITS_PER_SLICE: u64 = PART_UNITS_PER_GPU / MigGeometry::COMPUTE_SLICES as u64;
const UNITS_PER_PERMILLE: u64 = PART_UNITS_PER_GPU / 1000;

/// The GPU-equivalents an allocation holds in parts (MIG instances by compute slices, quotas
/// by SM request on each GPU), in [`PART_UNITS_PER_GPU`]ths; GPUs held whole count nothing
/// here (they are counted as whole GPUs). An instance of a profile the catalog does not
/// know counts nothing.
pub fn part_units(alloc: &Allocation, cluster: &Cluster) -> u64 {
    let mut units = 0;
    for s in &alloc.shares {
        let Some(d) = s.devices else { continue };
        match d.part {
            GpuPart::Whole => {}
            GpuPart::Mig(inst) => {
                let slices = cluster
                    .nodes
                    .get(s.node.index())
                    .and_then(|n| cluster.catalog.mig_geometry(n.gpu))
                    .and_then(|geo| geo.profile(inst))
                    .map_or(0, |p| u64::from(p.compute_slices));
                units += slices * UNITS_PER_SLICE * u64::from(d.gpus.count());
            }
            GpuPart::Quota { sm_request, .. } => {
                units += u64::from(sm_request) * UNITS_PER_PERMILLE * u64::from(d.gpus.count());
            }
        }
    }
    units
}

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobOutcome {
    /// Did all its iterations.
    Finished,
    /// Could never run on this cluster; the reason says why.
    Rejected {
        /// Why.
        reason: String,
    },
    /// Still queued or running when the run stopped.
    Unfinished {
        /// Why the run stopped with it unfinished.
        reason: String,
    },
    /// Given up on (interrupted by failures more often than allowed); the reason says why.
    Failed {
        /// Why.
        reason: String,
    },
}

/// One job's history. (Aligned as the engine's per-job run state, over whose memory the
/// records of a run are collected.)
#[derive(Clone, Debug, PartialEq, Serialize)]
#[repr(align(64))]
pub struct JobRecord {
    /// Dense id.
    pub job: JobId,
    /// Name in the trace.
    pub name: Arc<str>,
    /// GPUs requested.
    pub gpus: u32,
    /// Submission.
    pub submit: SimTime,
    /// First start, if any.
    pub first_start: Option<SimTime>,
    /// Completion, if finished.
    pub finish: Option<SimTime>,
    /// How it ended.
    pub outcome: JobOutcome,
    /// Times it was preempted or resized.
    pub preemptions: u32,
    /// GPU-seconds it held GPUs for, in GPU-equivalents: a whole GPU counts 1, a MIG
    /// instance its compute slices / 7, a quota its SM request / 1000 (see [`part_units`]).
    pub gpu_secs: f64,
    /// Iterations done (equals the total for finished jobs).
    pub iterations_done: f64,
    /// CPU cores per GPU it held, averaged over the time it held GPUs.
    pub cpu_per_gpu: Option<f64>,
    /// Memory GiB per GPU it held, averaged over the time it held GPUs.
    pub mem_gib_per_gpu: Option<f64>,
    /// Its throughput relative to the GPU-proportional share's, averaged over the time it
    /// held GPUs (1.0 under proportional allocation).
    pub speedup: Option<f64>,
}

impl JobRecord {
    /// Job completion time in seconds (finish − submit), for finished jobs.
    pub fn jct_secs(&self) -> Option<f64> {
        self.finish
            .map(|f| f.saturating_since(self.submit).as_secs_f64())
    }

    /// Queueing delay in seconds (first start − submit), for jobs that started.
    pub fn queue_secs(&self) -> Option<f64> {
        self.first_start
            .map(|s| s.saturating_since(self.submit).as_secs_f64())
    }
}

/// Allocated resources at one instant (recorded when they change).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct UtilSample {
    /// When.
    pub time: SimTime,
    /// Whole GPUs allocated.
    pub gpus: u64,
    /// GPU parts allocated (MIG instances, quotas; jobs and service instances) in
    /// [`PART_UNITS_PER_GPU`]ths of a GPU; 0 (and absent from JSON) when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub part_units: u64,
    /// Millicores allocated.
    pub cpu_milli: u64,
    /// Bytes of memory allocated.
    pub memory_bytes: u64,
    /// Jobs running.
    pub running: u32,
    /// Jobs queued.
    pub queued: u32,
    /// GPUs with any holder (whole, MIG instance, quota; jobs and service instances).
    pub active_gpus: u32,
    /// Mean SM fragmentation over active GPUs (1 − Σ SM requests), 0 when none is active.
    pub sm_frag: f64,
    /// Mean device-memory fragmentation over active GPUs (1 − Σ memory / capacity).
    pub mem_frag: f64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl UtilSample {
    /// Busy GPUs in GPU-equivalents: whole GPUs plus parts by their share.
    pub fn gpu_equiv(&self) -> f64 {
        if self.part_units == 0 {
            return self.gpus as f64;
        }
        self.gpus as f64 + self.part_units as f64 / PART_UNITS_PER_GPU as f64
    }
}

/// Aggregate figures of one run. Times are seconds, utilizations fractions of capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Jobs in the workload.
    pub jobs: usize,
    /// Jobs that finished.
    pub finished: usize,
    /// Jobs rejected as never able to run.
    pub rejected: usize,
    /// Jobs unfinished when the run stopped.
    pub unfinished: usize,
    /// Mean job completion time of finished jobs.
    pub avg_jct_s: f64,
    /// Median JCT.
    pub p50_jct_s: f64,
    /// 95th-percentile JCT.
    pub p95_jct_s: f64,
    /// 99th-percentile JCT.
    pub p99_jct_s: f64,
    /// Last completion minus first submission.
    pub makespan_s: f64,
    /// Mean of first start − submit over started jobs.
    pub avg_queue_s: f64,
    /// Time-averaged GPU allocation over the makespan; a GPU held in parts (quotas, MIG
    /// instances) counts by the SM share its holders take (GPU-equivalents).
    pub gpu_util: f64,
    /// The same counting only GPUs held whole (MIG instances and quotas count nothing):
    /// beside `gpu_util`, how much of the use was in parts.
    pub whole_gpu_util: f64,
    /// Time-averaged CPU allocation over the makespan.
    pub cpu_util: f64,
    /// Time-averaged memory allocation over the makespan.
    pub mem_util: f64,
    /// Preemptions and resizes, all jobs.
    pub preemptions: u64,
    /// Events processed.
    pub events: u64,
    /// Scheduling points (policy calls).
    pub scheduling_points: u64,
    /// GPU-seconds spent profiling arriving jobs (outside the cluster's GPUs).
    pub profiling_gpu_secs: f64,
    /// Most GPUs active at once (any holder: job or service instance, whole or part).
    pub peak_active_gpus: u32,
    /// Time-averaged active GPUs, from the first arrival (job or service start) to the end.
    pub mean_active_gpus: f64,
    /// SM fragmentation (1 − Σ SM requests of the GPU's holders; 0 for a GPU held whole)
    /// averaged over active GPUs and time (weighted by active GPU-seconds).
    pub mean_sm_frag: f64,
    /// Device-memory fragmentation (1 − Σ memory / capacity; 0 for a GPU held whole),
    /// averaged like `mean_sm_frag`.
    pub mean_mem_frag: f64,
    /// Per inference service: requests, SLO violations, latency, served RPS; empty without
    /// services.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceSummary>,
    /// Failures injected and what they cost; `None` (and absent from JSON) without
    /// failure injection.
    #[serde(flatten)]
    pub failures: Option<FailureSummary>,
}

/// What injected failures cost a run ([`crate::failures`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FailureSummary {
    /// Down events applied (a node or a single GPU going down counts once).
    pub failures: u64,
    /// GPU-hours of capacity down (∫ down GPUs dt).
    pub down_gpu_hours: f64,
    /// GPU-hours held since the last checkpoint by jobs interrupted by a failure (whole
    /// GPUs, as `gpu_secs`): work done and thrown away, restore time included.
    pub lost_gpu_hours: f64,
    /// Iterations thrown away, all jobs.
    pub lost_iterations: f64,
    /// Restarts after a failure per job, over all jobs of the workload.
    pub restarts_per_job: RestartStats,
    /// Jobs given up on.
    pub failed: usize,
    /// Each failed job and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_jobs: Vec<FailedJob>,
    /// Per job, by id (not written to JSON: one line per job is in the job records).
    #[serde(skip)]
    pub per_job: Vec<JobFailures>,
}

/// Mean and maximum of restarts per job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct RestartStats {
    /// Mean over all jobs.
    pub mean: f64,
    /// Most restarts of one job.
    pub max: u32,
}

/// A job given up on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailedJob {
    /// Name in the trace.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// What failures did to one job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct JobFailures {
    /// Times a failure interrupted it (it was requeued, or failed on the last).
    pub restarts: u32,
    /// Iterations thrown away.
    pub lost_iterations: f64,
    /// GPU-seconds held since its last checkpoint at each interruption.
    pub lost_gpu_secs: f64,
}

/// Time integrals of GPU activity over a run (DESIGN §5.4 fragmentation).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuActivity {
    /// Start of the averaging span.
    pub since: Option<SimTime>,
    /// ∫ active GPUs dt (GPU-seconds).
    pub active_secs: f64,
    /// ∫ Σ_active SM fragmentation dt.
    pub sm_frag_secs: f64,
    /// ∫ Σ_active memory fragmentation dt.
    pub mem_frag_secs: f64,
    /// Most GPUs active at once.
    pub peak: u32,
}

/// What an engine measured over a run, besides the per-job records.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunTotals {
    /// First arrival (the start of the makespan).
    pub first_arrival: Option<SimTime>,
    /// Last completion (the end of the makespan).
    pub last_completion: SimTime,
    /// When the run stopped (utilization is averaged up to here if later than the last
    /// completion, i.e. when jobs were left unfinished).
    pub stopped_at: SimTime,
    /// Time integrals of allocated GPUs (GPU-equivalents: parts by their share), millicores
    /// and bytes (unit × seconds).
    pub util_integral: (f64, f64, f64),
    /// The part of `util_integral.0` held in parts (MIG instances, quotas), GPU-seconds.
    pub part_gpu_secs: f64,
    /// Cluster capacity: GPUs, millicores, bytes.
    pub capacity: (u64, u64, u64),
    /// Events processed.
    pub events: u64,
    /// Policy calls.
    pub scheduling_points: u64,
    /// GPU-seconds spent profiling arriving jobs.
    pub profiling_gpu_secs: f64,
    /// GPU activity and fragmentation integrals.
    pub activity: GpuActivity,
}

impl Summary {
    /// Requests of all services served within their SLO over all requests that arrived (a
    /// dropped request misses its SLO too); `None` without requests.
    pub fn slo_goodput(&self) -> Option<f64> {
        let requests: u64 = self.services.iter().map(|v| v.requests).sum();
        let good: u64 = self
            .services
            .iter()
            .map(|v| v.served.saturating_sub(v.slo_violations))
            .sum();
        (requests > 0).then(|| good as f64 / requests as f64)
    }

    /// Requests dropped, all services.
    pub fn requests_dropped(&self) -> u64 {
        self.services.iter().map(|v| v.dropped).sum()
    }

    /// Aggregates per-job records and run totals (shared by both engines).
    pub fn of(jobs: &[JobRecord], totals: &RunTotals) -> Summary {
        // One pass over the records (a million-job run has a million of them); sums in job
        // order, as summing the collected values would.
        // JCTs in µs: their mean is summed exactly (in any order) and their percentiles are
        // selected, not sorted (sorting a run's JCTs was a twentieth of its wall time).
        let mut jct_us: Vec<u64> = Vec::with_capacity(jobs.len());
        let mut jct_sum_us = 0u128;
        let (mut queue_sum, mut queued) = (0.0f64, 0usize);
        let (mut finished, mut rejected, mut unfinished) = (0, 0, 0);
        let mut preemptions = 0u64;
        for j in jobs {
            if let Some(f) = j.finish {
                let us = f.saturating_since(j.submit).as_micros();
                jct_us.push(us);
                jct_sum_us += u128::from(us);
            }
            if let Some(q) = j.queue_secs() {
                queue_sum += q;
                queued += 1;
            }
            match j.outcome {
                JobOutcome::Finished => finished += 1,
                JobOutcome::Rejected { .. } => rejected += 1,
                JobOutcome::Unfinished { .. } => unfinished += 1,
                // Counted apart, in the failure summary.
                JobOutcome::Failed { .. } => {}
            }
            preemptions += j.preemptions as u64;
        }
        let [p50_jct_s, p95_jct_s, p99_jct_s] = nearest_rank_secs(&mut jct_us, [50.0, 95.0, 99.0]);
        let avg_jct_s = if jct_us.is_empty() {
            0.0
        } else {
            jct_sum_us as f64 / MICROS_PER_SEC / jct_us.len() as f64
        };
        let start = totals.first_arrival.unwrap_or(SimTime::ZERO);
        let span = totals
            .last_completion
            .max(start)
            .saturating_since(start)
            .as_secs_f64();
        // Past the last completion nothing is held unless jobs were left unfinished, so
        // dividing by the makespan is exact for completed runs.
        let span_all = totals
            .stopped_at
            .saturating_since(start)
            .as_secs_f64()
            .max(span);
        let util = |integral: f64, cap: u64| {
            let denom = span_all * cap as f64;
            if denom > 0.0 {
                integral / denom
            } else {
                0.0
            }
        };
        Summary {
            jobs: jobs.len(),
            finished,
            rejected,
            unfinished,
            avg_jct_s,
            p50_jct_s,
            p95_jct_s,
            p99_jct_s,
            makespan_s: span,
            avg_queue_s: if queued == 0 {
                0.0
            } else {
                queue_sum / queued as f64
            },
            gpu_util: util(totals.util_integral.0, totals.capacity.0),
            whole_gpu_util: util(
                (totals.util_integral.0 - totals.part_gpu_secs).max(0.0),
                totals.capacity.0,
            ),
            cpu_util: util(totals.util_integral.1, totals.capacity.1),
            mem_util: util(totals.util_integral.2, totals.capacity.2),
            preemptions,
            events: totals.events,
            scheduling_points: totals.scheduling_points,
            profiling_gpu_secs: totals.profiling_gpu_secs,
            peak_active_gpus: totals.activity.peak,
            mean_active_gpus: {
                let since = totals.activity.since.unwrap_or(start);
                let span = totals.stopped_at.saturating_since(since).as_secs_f64();
                if span > 0.0 {
                    totals.activity.active_secs / span
                } else {
                    0.0
                }
            },
            mean_sm_frag: per_active(totals.activity.sm_frag_secs, totals.activity.active_secs),
            mean_mem_frag: per_active(totals.activity.mem_frag_secs, totals.activity.active_secs),
            services: Vec::new(),
            failures: None,
        }
    }
}

fn per_active(integral: f64, active_secs: f64) -> f64 {
    if active_secs > 0.0 {
        integral / active_secs
    } else {
        0.0
    }
}

const MICROS_PER_SEC: f64 = 1e6;

/// The nearest-rank percentiles `ps` of durations in µs, in seconds: what [`percentile`]
/// gives on the sorted values, by selection (O(n)) instead of a sort. Reorders `values`.
fn nearest_rank_secs<const N: usize>(values: &mut [u64], ps: [f64; N]) -> [f64; N] {
    let mut out = [0.0; N];
    let n = values.len();
    if n == 0 {
        return out;
    }
    let rank = |p: f64| (((p / 100.0) * n as f64).ceil() as usize).clamp(1, n) - 1;
    // Largest rank first: after selecting rank k, `values[..k]` hold the k smallest, so each
    // smaller rank is selected within that prefix.
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    order.sort_by_key(|&i| std::cmp::Reverse(rank(ps[i])));
    let mut end = n;
    for i in order {
        let k = rank(ps[i]);
        if k < end {
            values[..end].select_nth_unstable(k);
            end = k;
        }
        out[i] = SimDuration::from_micros(values[k]).as_secs_f64();
    }
    out
}

/// Nearest-rank percentile of sorted values (0 for an empty slice).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Everything a run produces.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    /// Policy name.
    pub policy: String,
    /// Aggregates.
    pub summary: Summary,
    /// One record per job, by id.
    pub jobs: Vec<JobRecord>,
    /// Per job (by id), seconds waited per reason, indexed by
    /// [`WaitKind::index`](tessera_sched::WaitKind::index); empty when the driver did not count
    /// them (the Synergy reference engine).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<[f64; tessera_sched::WaitKind::COUNT]>,
    /// Allocation over time.
    pub timeseries: Vec<UtilSample>,
    /// Policy-specific counters ([`tessera_sched::Policy::stats`]).
    pub policy_stats: Vec<(String, f64)>,
    /// Each service's instance count over time (empty without services).
    pub service_instances: Vec<InstanceSeries>,
    /// Per job (by id), the nodes it ran on in order of first use; empty when the run did
    /// not record them (`SimConfig::record_timeseries` off).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<Vec<tessera_model::NodeId>>,
}

#[cfg(test)]
mod tests {
    use super::{nearest_rank_secs, percentile, JobOutcome, JobRecord, RunTotals, Summary};
    use proptest::prelude::*;
    use tessera_model::{JobId, SimTime};

    proptest! {
        /// Selection gives the sorted slice's nearest-rank percentiles, bit for bit, ties and
        /// tiny slices (where ranks coincide) included; the requested order does not matter.
        #[test]
        fn selected_percentiles_are_the_sorted_ones(
            mut us in prop::collection::vec(prop_oneof![0u64..20, any::<u64>()], 0..300),
            ps in prop::collection::vec(0.0f64..=100.0, 1..5),
        ) {
            let mut sorted: Vec<f64> = us.iter().map(|&u| u as f64 / 1e6).collect();
            sorted.sort_by(f64::total_cmp);
            let expected: Vec<f64> = ps.iter().map(|&p| percentile(&sorted, p)).collect();
            let got: Vec<f64> = match ps.as_slice() {
                [a] => nearest_rank_secs(&mut us, [*a]).to_vec(),
                [a, b] => nearest_rank_secs(&mut us, [*a, *b]).to_vec(),
                [a, b, c] => nearest_rank_secs(&mut us, [*a, *b, *c]).to_vec(),
                [a, b, c, d] => nearest_rank_secs(&mut us, [*a, *b, *c, *d]).to_vec(),
                _ => unreachable!("1..5 percentiles"),
            };
            prop_assert_eq!(got, expected);
        }
    }

    fn finished(submit_us: u64, jct_us: u64) -> JobRecord {
        JobRecord {
            job: JobId(0),
            name: "j".into(),
            gpus: 1,
            submit: SimTime::from_micros(submit_us),
            first_start: Some(SimTime::from_micros(submit_us)),
            finish: Some(SimTime::from_micros(submit_us + jct_us)),
            outcome: JobOutcome::Finished,
            preemptions: 0,
            gpu_secs: 0.0,
            iterations_done: 0.0,
            cpu_per_gpu: None,
            mem_gib_per_gpu: None,
            speedup: None,
        }
    }

    /// One JCT of 2^53 µs beside many of 1 µs: summed in floating point (in any order that
    /// starts with the large one) the small ones vanish; the mean is exact.
    #[test]
    fn mean_jct_is_exact_whatever_the_magnitudes() {
        let mut jobs = vec![finished(0, 1 << 53)];
        jobs.extend((0..1023).map(|i| finished(i, 1)));
        let s = Summary::of(&jobs, &RunTotals::default());
        let exact = ((1u128 << 53) + 1023) as f64 / 1e6 / 1024.0;
        assert_eq!(s.avg_jct_s.to_bits(), exact.to_bits());
        assert_eq!(s.p50_jct_s, 1e-6);
        assert_eq!(s.p99_jct_s, 1e-6);
        assert_eq!(Summary::of(&[], &RunTotals::default()).avg_jct_s, 0.0);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
