//! `tessera bench tessera`: issue 37's speed targets for the `tessera` policy.
//!
//! - a whole run: the mixed world scaled up (`builtin:mixed`'s node groups × `scale`, 10,080
//!   GPUs by default), [`MixedWorkload`] of 100,000 training jobs at the same load per GPU
//!   and its services copied up to 10, simulated as `tessera simulate` runs it (< 10 s);
//! - one decision: 100,000 queued jobs (the mixed workload's, each with what the policy's
//!   profiler teaches) on 10,000 nodes of the mixed node shapes, a round's `schedule` on the
//!   empty cluster (every start) and the next round's on the cluster those starts filled
//!   (< 100 ms each).

use std::time::Instant;

use tessera_model::{Cluster, GpuCatalog, JobId, SimDuration, SimRng, SimTime, Workload};
use tessera_sched::{
    Action, ActiveJob, ClusterState, ClusterView, JobState, Policy, PolicyOptions, Trigger,
};

use super::world::cluster_yaml;
use super::world_run::{run_policy, truth_options};
use super::world_workload::MixedWorkload;
use crate::experiment::{
    bench_output, BenchRow, Experiment, ExperimentArgs, ExperimentError, Param, ReproOutput,
    RunContext,
};

const PARAMS: &[Param] = &[
    Param {
        name: "policy",
        default: "tessera",
        help: "The policy (tessera or one of its ablations)",
    },
    Param {
        name: "parts",
        default: "run,decision",
        help: "run: the whole simulation; decision: one scheduling call at 100,000 queued",
    },
    Param {
        name: "scale",
        default: "105",
        help: "Copies of builtin:mixed's node groups in the whole run (105: 10,080 GPUs)",
    },
    Param {
        name: "jobs",
        default: "100000",
        help: "Training jobs of the whole run, and queued jobs of the decision",
    },
    Param {
        name: "services",
        default: "10",
        help: "Inference services of the whole run (builtin:mixed's three, copied round)",
    },
    Param {
        name: "nodes",
        default: "10000",
        help: "Nodes of the decision's cluster (builtin:mixed's four shapes, 2:1:2:2)",
    },
    Param {
        name: "seed",
        default: "1",
        help: "Workload seed",
    },
];

/// Training arrivals per hour per GPU of the default run (60 jobs/h on 96 GPUs).
const JOBS_PER_HOUR_PER_GPU: f64 = 60.0 / 96.0;

/// `tessera bench tessera`.
#[derive(Clone, Copy, Debug)]
pub struct TesseraBench;

/// builtin:mixed's cluster with every node group's count replaced by `counts` (in its order:
/// A100, H100, V100, A10).
fn cluster_of(counts: [u64; 4]) -> Result<Cluster, ExperimentError> {
    let base = cluster_yaml();
    let mut out = String::with_capacity(base.len());
    let mut group = 0;
    for line in base.lines() {
        if line.trim_start().starts_with("count:") {
            let c = counts.get(group).copied().unwrap_or(1);
            group += 1;
            out.push_str(&format!("      count: {c}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    Cluster::from_yaml(&out, &GpuCatalog::builtin())
        .map_err(|e| ExperimentError::Other(format!("the scaled mixed cluster: {e}")))
}

/// The mixed workload of `jobs` at the default load per GPU of `cluster`, its services
/// copied round to `services`.
fn workload(
    cluster: &Cluster,
    jobs: usize,
    services: usize,
    seed: u64,
) -> Result<Workload, ExperimentError> {
    let gpus: u64 = cluster.nodes.iter().map(|n| u64::from(n.gpus)).sum();
    let w = MixedWorkload {
        jobs,
        jobs_per_hour: JOBS_PER_HOUR_PER_GPU * gpus as f64,
        seed,
        ..MixedWorkload::default()
    }
    .generate()
    .map_err(ExperimentError::Other)?;
    let base = w.services().to_vec();
    let mut all = Vec::with_capacity(services);
    for i in 0..services {
        let Some(s) = base.get(i % base.len().max(1)) else {
            break;
        };
        let mut s = s.clone();
        if i >= base.len() {
            s.name = format!("{}-{}", s.name, i / base.len() + 1);
        }
        all.push(s);
    }
    let out = Workload::with_services(w.jobs().to_vec(), all);
    out.check_services()
        .map_err(|e| ExperimentError::Other(e.to_string()))?;
    Ok(out)
}

/// CPU time this thread has run, seconds (Linux's `/proc/thread-self/schedstat`, in ns;
/// `None` elsewhere). On the shared machine a wall time is several times the CPU time the
/// process got, so the decision's rows give both.
fn thread_cpu_s() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// Seconds between two [`thread_cpu_s`] readings, shown as "CPU x.xxx s" (empty if unknown).
fn cpu_note(before: Option<f64>, after: Option<f64>) -> String {
    match (before, after) {
        (Some(b), Some(a)) => format!(", CPU {:.3} s", a - b),
        _ => String::new(),
    }
}

/// One `schedule` call on `active` over `state`: wall seconds, its actions and a note of
/// the CPU time it took.
fn one_call(
    policy: &mut dyn Policy,
    cluster: &Cluster,
    workload: &Workload,
    state: &ClusterState,
    active: &[ActiveJob],
    now: SimTime,
) -> (f64, Vec<Action>, String) {
    let view = ClusterView {
        now,
        trigger: Trigger {
            round: true,
            arrival: true,
            ..Trigger::default()
        },
        cluster,
        free: state.free(),
        state,
        jobs: workload.jobs(),
        active,
        services: &[],
    };
    let mut actions = Vec::new();
    let cpu = thread_cpu_s();
    let started = Instant::now();
    policy.schedule(&view, &mut actions);
    let wall = started.elapsed().as_secs_f64();
    (wall, actions, cpu_note(cpu, thread_cpu_s()))
}

impl Experiment for TesseraBench {
    fn name(&self) -> &'static str {
        "tessera"
    }

    fn about(&self) -> &'static str {
        "the tessera policy on 100,000 jobs and 10 services on 10,080 GPUs; one decision at 100,000 queued on 10,000 nodes"
    }

    fn params(&self) -> &'static [Param] {
        PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let policy: String = args.parse("policy")?;
        let parts: Vec<String> = args.list("parts")?;
        let scale: u64 = args.parse("scale")?;
        let jobs: usize = args.parse("jobs")?;
        let services: usize = args.parse("services")?;
        let nodes: u64 = args.parse("nodes")?;
        let seed: u64 = args.parse("seed")?;
        if jobs == 0 || jobs > super::repro::MAX_JOBS {
            return Err(ExperimentError::Other(format!(
                "--jobs {jobs}: must be 1 to {}",
                super::repro::MAX_JOBS
            )));
        }
        let mut rows = Vec::new();
        if parts.iter().any(|p| p == "run") {
            let cluster = cluster_of([4, 2, 4, 4].map(|c| c * scale.max(1)))?;
            let gpus: u64 = cluster.nodes.iter().map(|n| u64::from(n.gpus)).sum();
            let w = workload(&cluster, jobs, services, seed)?;
            let truth =
                crate::build_truth(super::truth::NAME, &truth_options()).ok_or_else(|| {
                    ExperimentError::Other("the composed truth does not build".into())
                })?;
            let cpu = thread_cpu_s();
            let started = Instant::now();
            let run = run_policy(&cluster, &w, Some(&truth), &policy, seed)?;
            let wall_s = started.elapsed().as_secs_f64();
            let cpu = cpu_note(cpu, thread_cpu_s());
            let s = &run.report.summary;
            let requests: u64 = s.services.iter().map(|x| x.requests).sum();
            rows.push(BenchRow {
                case: format!(
                    "{policy}, {jobs} jobs + {} services on {gpus} GPUs (builtin:mixed x {scale})",
                    w.services().len()
                ),
                wall_s,
                target_s: 10.0,
                events_per_s: None,
                detail: format!(
                    "{} finished, {} rejected, avg JCT {:.2} h, {requests} requests, SLO goodput {:.1}%{cpu}",
                    s.finished,
                    s.rejected,
                    s.avg_jct_s / 3600.0,
                    100.0 * s.slo_goodput().unwrap_or(0.0)
                ),
                command: format!(
                    "tessera bench tessera --parts run --policy {policy} --scale {scale} --jobs {jobs} --services {services} --seed {seed}"
                ),
            });
        }
        if parts.iter().any(|p| p == "decision") {
            // Node shapes 2:1:2:2 as builtin:mixed's 4:2:4:4.
            let unit = nodes / 7;
            let counts = [2 * unit + nodes % 7, unit, 2 * unit, 2 * unit];
            let cluster = cluster_of(counts)?;
            let gpus: u64 = cluster.nodes.iter().map(|n| u64::from(n.gpus)).sum();
            let w = MixedWorkload {
                jobs,
                services: false,
                seed,
                ..MixedWorkload::default()
            }
            .generate()
            .map_err(ExperimentError::Other)?;
            let truth =
                crate::build_truth(super::truth::NAME, &truth_options()).ok_or_else(|| {
                    ExperimentError::Other("the composed truth does not build".into())
                })?;
            let profiler = crate::run_profiler(&policy, &truth, &truth_options());
            let mut rng = SimRng::seed_from_u64(seed);
            let mut active: Vec<ActiveJob> = w
                .jobs()
                .iter()
                .map(|j| ActiveJob {
                    knowledge: profiler
                        .as_ref()
                        .map(|p| p.profile(j, &cluster, &mut rng))
                        .unwrap_or_default(),
                    ..ActiveJob::arrived(j)
                })
                .collect();
            let mut built = crate::build_policy(&policy, &PolicyOptions::default())?;
            let mut state = ClusterState::new(&cluster);
            let now = w
                .jobs()
                .iter()
                .map(|j| j.submit)
                .max()
                .unwrap_or(SimTime::ZERO);
            let (first_s, actions, first_cpu) =
                one_call(built.as_mut(), &cluster, &w, &state, &active, now);
            // The starts taken, for the next round.
            let mut started = 0usize;
            for a in &actions {
                let Action::Start { job, allocation } = a else {
                    continue;
                };
                let JobId(i) = *job;
                // `active` is in job order.
                let Some(x) = active.get_mut(i as usize).filter(|x| x.id.0 == i) else {
                    continue;
                };
                state.take(&cluster, allocation);
                x.state = JobState::Running;
                x.allocation = Some(allocation.clone());
                x.first_start = Some(now);
                started += 1;
            }
            let queued = active
                .iter()
                .filter(|a| a.state == JobState::Queued)
                .count();
            let round = built.round_length().unwrap_or(SimDuration::from_secs(300));
            let (next_s, next, next_cpu) =
                one_call(built.as_mut(), &cluster, &w, &state, &active, now + round);
            let command = format!(
                "tessera bench tessera --parts decision --policy {policy} --jobs {jobs} --nodes {nodes} --seed {seed}"
            );
            rows.push(BenchRow {
                case: format!(
                    "{policy} decision, {jobs} queued on {} nodes ({gpus} GPUs), empty cluster",
                    cluster.nodes.len()
                ),
                wall_s: first_s,
                target_s: 0.1,
                events_per_s: None,
                detail: format!("{} actions, {started} starts{first_cpu}", actions.len()),
                command: command.clone(),
            });
            rows.push(BenchRow {
                case: format!("{policy} decision, next round: {queued} queued, {started} running"),
                wall_s: next_s,
                target_s: 0.1,
                events_per_s: None,
                detail: format!("{} actions{next_cpu}", next.len()),
                command,
            });
        }
        Ok(bench_output("tessera", rows))
    }
}
