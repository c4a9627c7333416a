//! The baselines' engine benchmarks (DESIGN §7): `tessera bench philly`, a Philly-sized
//! synthetic trace where nothing queues, and `tessera bench engine` (issue 11), the cases
//! where the engine used to degrade: a loaded cluster, a large one, and a cluster-size sweep.

use std::rc::Rc;
use std::time::Instant;

use tessera_model::{Bytes, Cluster, MilliCpu, SimDuration, Workload};
use tessera_perf::TraceThroughput;
use tessera_sched::PolicyOptions;
use tessera_sim::{SimConfig, Simulation};
use tessera_trace::synthetic::{DurationDist, PoissonWorkload, PHILLY_GPU_MIX};

use crate::experiment::{
    bench_output, peak_rss_mib, BenchRow, Experiment, ExperimentArgs, ExperimentError, Param,
    ReproOutput, RunContext,
};

/// Offered load of the synthetic Philly-sized trace: 80% of 2,048 GPUs given the Philly
/// runtime sample's mean (4.06 h) and the Philly GPU mix's mean (2.125 GPUs).
const PHILLY_BENCH_JOBS_PER_HOUR: f64 = 190.0;

/// 82,247 Philly-shaped jobs on 2,048 GPUs under fifo and las with 300 s rounds.
#[derive(Clone, Copy, Debug)]
pub struct PhillyBench;

const PARAMS: &[Param] = &[Param {
    name: "jobs",
    default: "82247",
    help: "jobs of the synthetic Philly-sized trace",
}];

impl Experiment for PhillyBench {
    fn name(&self) -> &'static str {
        "philly"
    }

    fn about(&self) -> &'static str {
        "82,247 Philly-shaped jobs on 2,048 GPUs: fifo, and las with 300 s rounds"
    }

    fn params(&self) -> &'static [Param] {
        PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let jobs: usize = args.parse("jobs")?;
        let cluster = Cluster::homogeneous(
            "V100-32GB",
            256,
            8,
            MilliCpu::from_cores(48),
            Bytes::from_gib(512),
        )
        .map_err(|e| ExperimentError::Other(e.to_string()))?;
        let started = Instant::now();
        let workload = PoissonWorkload {
            jobs,
            jobs_per_hour: PHILLY_BENCH_JOBS_PER_HOUR,
            gpu_mix: PHILLY_GPU_MIX.to_vec(),
            durations: DurationDist::PhillyRuntimes,
            seed: 1,
        }
        .generate();
        let generate_s = started.elapsed().as_secs_f64();
        let mut rows = Vec::new();
        for (policy, round, target_s) in [
            ("fifo", None, 10.0),
            ("las", Some(SimDuration::from_secs(300)), 30.0),
        ] {
            let options = PolicyOptions {
                round,
                ..PolicyOptions::default()
            };
            let built = crate::build_policy(policy, &options)?;
            let config = SimConfig {
                record_timeseries: false,
                ..SimConfig::default()
            };
            let started = Instant::now();
            let report = Simulation::new(&cluster, &workload, &TraceThroughput, built, config)
                .run(&mut ())
                .map_err(|source| ExperimentError::Sim {
                    context: format!("bench philly, {policy}"),
                    source,
                })?;
            let wall_s = started.elapsed().as_secs_f64();
            let s = &report.summary;
            rows.push(BenchRow {
                case: match round {
                    Some(r) => format!("{policy}, {} s rounds", r.as_secs_f64()),
                    None => policy.to_string(),
                },
                wall_s,
                target_s,
                events_per_s: Some(s.events as f64 / wall_s.max(1e-9)),
                detail: format!(
                    "{}/{} finished, {} events, {} scheduling points, peak RSS {}",
                    s.finished,
                    s.jobs,
                    s.events,
                    s.scheduling_points,
                    peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"))
                ),
                command: format!("tessera bench philly --jobs {jobs}"),
            });
        }
        Ok(bench_output(
            &format!(
                "Philly-sized synthetic trace: {} jobs, Poisson {PHILLY_BENCH_JOBS_PER_HOUR} jobs/h, on 2,048 GPUs (256 x 8); generated in {generate_s:.2} s",
                workload.len()
            ),
            rows,
        ))
    }
}

/// The request-level serving simulator at scale: `services` services of `rate` requests/s
/// for `secs` seconds (10 million requests by default; half Poisson, half Gamma with CV 2),
/// each on a fixed set of whole-GPU instances placed at its start (so the figure measures
/// serving, not an autoscaler).
#[derive(Clone, Copy, Debug)]
pub struct ServingBench;

const SERVING_PARAMS: &[Param] = &[
    Param {
        name: "services",
        default: "10",
        help: "inference services",
    },
    Param {
        name: "rate",
        default: "10000",
        help: "requests per second of each service",
    },
    Param {
        name: "secs",
        default: "100",
        help: "seconds each service receives requests",
    },
    Param {
        name: "instances",
        default: "8",
        help: "whole-GPU instances per service",
    },
];

/// Most services `bench serving` simulates.
const MAX_SERVING_BENCH_SERVICES: u32 = 10_000;
/// Most instances per service of `bench serving` (the cluster has one node per 8).
const MAX_SERVING_BENCH_INSTANCES: usize = 1_000;

/// Places `instances` whole-GPU instances per service when it starts (first free GPUs),
/// removes them when it ends; nothing else.
struct StaticInstances {
    instances: usize,
}

impl tessera_sched::Policy for StaticInstances {
    fn name(&self) -> &str {
        "static-instances"
    }
    fn round_length(&self) -> Option<SimDuration> {
        None
    }
    fn schedule(
        &mut self,
        view: &tessera_sched::ClusterView<'_>,
        actions: &mut Vec<tessera_sched::Action>,
    ) {
        use tessera_sched::{Action, ServicePhase};
        let mut ledger = tessera_sched::Ledger::new(view.cluster, view.free);
        for s in view.services {
            match s.phase {
                ServicePhase::Active if s.instances.is_empty() => {
                    for _ in 0..self.instances {
                        let placed = view.cluster.nodes.iter().find_map(|n| {
                            let a = tessera_model::Allocation::new(vec![
                                tessera_model::NodeShare::whole(
                                    n.id,
                                    1,
                                    s.spec.instance.cpu,
                                    s.spec.instance.memory,
                                ),
                            ]);
                            ledger.reserve(&a).then_some(a)
                        });
                        if let Some(allocation) = placed {
                            actions.push(Action::ScaleOut {
                                service: s.spec.id,
                                allocation,
                            });
                        }
                    }
                }
                ServicePhase::Ended => {
                    // Idle ones only: a backlog is served before the instance goes.
                    for i in s.instances.iter().filter(|i| i.queue_len == 0) {
                        actions.push(Action::ScaleIn {
                            service: s.spec.id,
                            instance: i.id,
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

impl Experiment for ServingBench {
    fn name(&self) -> &'static str {
        "serving"
    }

    fn about(&self) -> &'static str {
        "10 million requests through the request-level serving simulator (10 services x 10,000 req/s x 100 s)"
    }

    fn params(&self) -> &'static [Param] {
        SERVING_PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        use tessera_model::{ArrivalProcess, InferenceService, SimTime, Workload};
        let services: u32 = args.parse("services")?;
        let rate: f64 = args.parse("rate")?;
        let secs: u64 = args.parse("secs")?;
        let instances: usize = args.parse("instances")?;
        // The cluster is built up front (one node per 8 instances): bound it before that.
        if !(1..=MAX_SERVING_BENCH_SERVICES).contains(&services) {
            return Err(ExperimentError::param(
                "services",
                &services.to_string(),
                &format!("must be 1..={MAX_SERVING_BENCH_SERVICES}"),
            ));
        }
        if !(1..=MAX_SERVING_BENCH_INSTANCES).contains(&instances) {
            return Err(ExperimentError::param(
                "instances",
                &instances.to_string(),
                &format!("must be 1..={MAX_SERVING_BENCH_INSTANCES} per service"),
            ));
        }
        if secs == 0 || secs > tessera_model::MAX_INPUT_SECS {
            return Err(ExperimentError::param(
                "secs",
                &secs.to_string(),
                &format!("must be 1..={}", tessera_model::MAX_INPUT_SECS),
            ));
        }
        let per_node = 8u32;
        let nodes = (services as usize * instances)
            .div_ceil(per_node as usize)
            .max(1) as u32;
        let cluster = Cluster::homogeneous(
            "A100-80GB",
            nodes,
            per_node,
            MilliCpu::from_cores(128),
            Bytes::from_gib(1024),
        )
        .map_err(|e| ExperimentError::Other(e.to_string()))?;
        let specs: Vec<InferenceService> = (0..services)
            .map(|i| {
                let mut s = InferenceService::simple(
                    &format!("svc-{i}"),
                    SimTime::ZERO,
                    SimTime::from_secs(secs),
                    rate,
                );
                // 2 ms for a batch of one on a whole GPU under the default serving model.
                s.slo = SimDuration::from_micros(8_000);
                s.max_batch = 32;
                s.cold_start = SimDuration::ZERO;
                if i % 2 == 1 {
                    s.arrivals = ArrivalProcess::Gamma { rate, cv: 2.0 };
                }
                s
            })
            .collect();
        let workload = Workload::with_services(Vec::new(), specs);
        // Rates (NaN, past one per microsecond) and the requests in all, before the run.
        workload.check_services().map_err(|e| {
            ExperimentError::param(
                "rate",
                &rate.to_string(),
                &format!("with --secs {secs}: {e}"),
            )
        })?;
        let config = SimConfig {
            record_timeseries: false,
            ..SimConfig::default()
        };
        let started = Instant::now();
        let report = Simulation::new(
            &cluster,
            &workload,
            &TraceThroughput,
            Box::new(StaticInstances { instances }),
            config,
        )
        .run(&mut ())
        .map_err(|source| ExperimentError::Sim {
            context: "bench serving".into(),
            source,
        })?;
        let wall_s = started.elapsed().as_secs_f64();
        let s = &report.summary;
        let requests: u64 = s.services.iter().map(|v| v.requests).sum();
        let served: u64 = s.services.iter().map(|v| v.served).sum();
        let violations: u64 = s.services.iter().map(|v| v.slo_violations).sum();
        let worst_p99 = s
            .services
            .iter()
            .map(|v| v.p99_latency_s)
            .fold(0.0, f64::max);
        let rows = vec![BenchRow {
            case: format!("{requests} requests, {services} services, {instances} instances each"),
            wall_s,
            target_s: 10.0 * requests as f64 / 1e7,
            events_per_s: Some(requests as f64 / wall_s.max(1e-9)),
            detail: format!(
                "{served} served, {violations} over the SLO, worst p99 {:.1} ms, peak RSS {}",
                worst_p99 * 1e3,
                peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"))
            ),
            command: format!(
                "tessera bench serving --services {services} --rate {rate} --secs {secs} --instances {instances}"
            ),
        }];
        Ok(bench_output(
            "request-level serving: arrivals, per-instance queues, batching, round robin (requests/s in the events column)",
            rows,
        ))
    }
}

/// Jobs per hour per GPU of the Philly bench (190 jobs/h on 2,048 GPUs, 80% load): the sweep
/// keeps this load per GPU as the cluster grows.
const PHILLY_JOBS_PER_HOUR_PER_GPU: f64 = PHILLY_BENCH_JOBS_PER_HOUR / 2048.0;

/// `tessera bench engine`: per-event cost of the engine with the baselines where it used to
/// grow with the queue and the cluster (issue 11).
#[derive(Clone, Copy, Debug)]
pub struct EngineBench;

const ENGINE_PARAMS: &[Param] = &[
    Param {
        name: "case",
        default: "loaded,trace,sweep",
        help:
            "comma-separated cases: loaded (82,247 Philly-shaped jobs on 512 GPUs at 190 jobs/h, \
               3.2x what the cluster can serve), trace (the 82,247 jobs of the Pollux artifact's \
               Philly trace, Sep-Dec 2017, on 512 GPUs), \
               sweep (80,000 jobs on 512 / 2,048 / 8,192 GPUs at 190 jobs/h per 2,048 GPUs), \
               large (1,000,000 jobs on 16,384 GPUs at the same load per GPU)",
    },
    Param {
        name: "policies",
        default: "fifo,las",
        help: "comma-separated baselines to run (las runs with 300 s rounds)",
    },
    Param {
        name: "scale",
        default: "1",
        help: "divide every case's job count by this (quick looks; the figures use 1)",
    },
    Param {
        name: "repeat",
        default: "1",
        help: "run each case this many times and report the median wall time with the range \
               (a shared machine's noise), a case's sizes and policies taking turns so that \
               they see the same minutes; every repeat must report the same results",
    },
];

/// Where an engine case's jobs come from.
#[derive(Clone, Copy, Debug)]
enum EngineJobs {
    /// This many Philly-shaped jobs arriving at this rate (jobs per hour).
    Poisson(usize, f64),
    /// The 82,247-job Philly trace of the Pollux artifact (`builtin:pollux-philly-82k`).
    PolluxPhilly,
}

/// One run of the engine bench: (label, jobs, nodes of 8 GPUs, target s).
type EngineCase = (&'static str, EngineJobs, u32, f64);

fn engine_cases(name: &str) -> Result<Vec<EngineCase>, ExperimentError> {
    let per_gpu = PHILLY_JOBS_PER_HOUR_PER_GPU;
    Ok(match name {
        "loaded" => vec![(
            "loaded",
            EngineJobs::Poisson(82_247, PHILLY_BENCH_JOBS_PER_HOUR),
            64,
            1.0,
        )],
        "trace" => vec![("trace", EngineJobs::PolluxPhilly, 64, 1.0)],
        "sweep" => [512u32, 2048, 8192]
            .into_iter()
            .map(|g| {
                (
                    "sweep",
                    EngineJobs::Poisson(80_000, per_gpu * g as f64),
                    g / 8,
                    1.0,
                )
            })
            .collect(),
        "large" => vec![(
            "large",
            EngineJobs::Poisson(1_000_000, per_gpu * 16_384.0),
            2048,
            10.0,
        )],
        other => {
            return Err(ExperimentError::Param {
                name: "case".into(),
                value: other.into(),
                reason: "unknown case (known: loaded, trace, sweep, large)".into(),
            })
        }
    })
}

/// One (case, cluster size, policy) of `bench engine` and its measurements so far.
struct EngineRun<'a> {
    label: &'static str,
    policy: &'a str,
    round: Option<SimDuration>,
    nodes: u32,
    target_s: f64,
    cluster: Rc<Cluster>,
    workload: Rc<Workload>,
    walls: Vec<f64>,
    /// The first run's summary and a digest of its job records: every repeat must match
    /// them. (Holding whole reports while a case's runs take turns would count several
    /// million-job reports in the peak RSS the large case reports.)
    first: Option<(tessera_sim::Summary, u64)>,
}

impl EngineRun<'_> {
    /// Runs the simulation once more and records its wall time.
    fn once(&mut self) -> Result<(), ExperimentError> {
        let (label, policy) = (self.label, self.policy);
        let options = PolicyOptions {
            round: self.round,
            ..PolicyOptions::default()
        };
        let built = crate::build_policy(policy, &options)?;
        let config = SimConfig {
            record_timeseries: false,
            ..SimConfig::default()
        };
        let started = Instant::now();
        let report = Simulation::new(
            &self.cluster,
            &self.workload,
            &TraceThroughput,
            built,
            config,
        )
        .run(&mut ())
        .map_err(|source| ExperimentError::Sim {
            context: format!("bench engine, {label}, {policy}"),
            source,
        })?;
        self.walls.push(started.elapsed().as_secs_f64());
        let digest = records_digest(&report.jobs);
        match &self.first {
            Some((summary, d)) if *summary != report.summary || *d != digest => {
                Err(ExperimentError::Other(format!(
                    "bench engine, {label}, {policy}: a repeat reported other results than \
                     the first (the engine must be deterministic)"
                )))
            }
            Some(_) => Ok(()),
            None => {
                self.first = Some((report.summary, digest));
                Ok(())
            }
        }
    }

    /// The benchmark row: the median wall time, with the range over repeats.
    fn row(mut self, scale: usize, repeat: usize) -> Option<BenchRow> {
        let (summary, _) = self.first.take()?;
        let (label, policy) = (self.label, self.policy);
        let walls = &mut self.walls;
        walls.sort_by(f64::total_cmp);
        let wall_s = walls[walls.len() / 2];
        let spread = if repeat > 1 {
            format!(
                "median of {repeat} runs ({:.3}–{:.3} s), ",
                walls[0],
                walls[walls.len() - 1]
            )
        } else {
            String::new()
        };
        let s = &summary;
        let gpus = self.nodes * 8;
        Some(BenchRow {
            case: match self.round {
                Some(r) => format!(
                    "{label}: {} jobs on {gpus} GPUs, {policy} ({} s rounds)",
                    s.jobs,
                    r.as_secs_f64()
                ),
                None => format!("{label}: {} jobs on {gpus} GPUs, {policy}", s.jobs),
            },
            wall_s,
            target_s: self.target_s,
            events_per_s: Some(s.events as f64 / wall_s.max(1e-9)),
            detail: format!(
                "{spread}{:.0} ns/event, {} events, {} scheduling points, {} preemptions, \
                 avg queue {:.0} s, {}/{} finished, peak RSS {}",
                wall_s * 1e9 / (s.events.max(1) as f64),
                s.events,
                s.scheduling_points,
                s.preemptions,
                s.avg_queue_s,
                s.finished,
                s.jobs,
                peak_rss_mib().map_or("n/a".into(), |m| format!("{m:.0} MiB"))
            ),
            command: format!(
                "tessera bench engine --case {label} --policies {policy}{}{}",
                if scale > 1 {
                    format!(" --scale {scale}")
                } else {
                    String::new()
                },
                if repeat > 1 {
                    format!(" --repeat {repeat}")
                } else {
                    String::new()
                }
            ),
        })
    }
}

/// A digest of every field of every job record (a fixed hasher: equal records, equal
/// digests, on any run of any build).
fn records_digest(jobs: &[tessera_sim::JobRecord]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    for j in jobs {
        (
            j.job.0,
            &*j.name,
            j.gpus,
            j.submit.as_micros(),
            j.preemptions,
        )
            .hash(&mut h);
        (
            j.first_start.map(|t| t.as_micros()),
            j.finish.map(|t| t.as_micros()),
        )
            .hash(&mut h);
        std::mem::discriminant(&j.outcome).hash(&mut h);
        if j.outcome != tessera_sim::JobOutcome::Finished {
            format!("{:?}", j.outcome).hash(&mut h);
        }
        let floats = [j.gpu_secs, j.iterations_done];
        let optional = [j.cpu_per_gpu, j.mem_gib_per_gpu, j.speedup];
        floats.map(f64::to_bits).hash(&mut h);
        optional.map(|x| x.map(f64::to_bits)).hash(&mut h);
    }
    h.finish()
}

/// The jobs of a case, the first 1/`scale` of them.
fn engine_workload(jobs: EngineJobs, scale: usize) -> Result<Workload, ExperimentError> {
    Ok(match jobs {
        EngineJobs::Poisson(n, jobs_per_hour) => PoissonWorkload {
            jobs: n / scale,
            jobs_per_hour,
            gpu_mix: PHILLY_GPU_MIX.to_vec(),
            durations: DurationDist::PhillyRuntimes,
            seed: 1,
        }
        .generate(),
        EngineJobs::PolluxPhilly => {
            let all = tessera_trace::builtin_trace("pollux-philly-82k", 1).ok_or_else(|| {
                ExperimentError::Other("the embedded Pollux Philly trace did not parse".into())
            })?;
            let keep = all.len() / scale;
            Workload::new(all.jobs()[..keep].to_vec())
        }
    })
}

impl Experiment for EngineBench {
    fn name(&self) -> &'static str {
        "engine"
    }

    fn about(&self) -> &'static str {
        "the engine loaded (82k jobs on 512 GPUs), large (1M jobs on 16,384 GPUs) and across \
         cluster sizes (80k jobs on 512 / 2,048 / 8,192 GPUs): events/s and ns per event"
    }

    fn params(&self) -> &'static [Param] {
        ENGINE_PARAMS
    }

    fn run(
        &self,
        args: &ExperimentArgs,
        _ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError> {
        let case_arg = args.get("case").unwrap_or("loaded,trace,sweep").to_string();
        let policies_arg = args.get("policies").unwrap_or("fifo,las").to_string();
        let scale: usize = args.parse("scale")?;
        let repeat: usize = args.parse("repeat")?;
        for (name, value) in [("scale", scale), ("repeat", repeat)] {
            if value == 0 {
                return Err(ExperimentError::Param {
                    name: name.into(),
                    value: "0".into(),
                    reason: "must be at least 1".into(),
                });
            }
        }
        let policies: Vec<&str> = policies_arg
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let mut rows = Vec::new();
        for name in case_arg.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            // A case's runs (its cluster sizes × the policies) go round by round, so that a
            // shared machine's slow and fast minutes fall on all of them alike and the
            // comparison across sizes holds (repeats of one run back to back did not).
            let mut runs = Vec::new();
            for (label, jobs, nodes, target_s) in engine_cases(name)? {
                let cluster = Cluster::homogeneous(
                    "V100-32GB",
                    nodes,
                    8,
                    MilliCpu::from_cores(48),
                    Bytes::from_gib(512),
                )
                .map_err(|e| ExperimentError::Other(e.to_string()))?;
                let workload = Rc::new(engine_workload(jobs, scale)?);
                let cluster = Rc::new(cluster);
                for &policy in &policies {
                    let round = (policy != "fifo").then(|| SimDuration::from_secs(300));
                    runs.push(EngineRun {
                        label,
                        policy,
                        round,
                        nodes,
                        target_s,
                        cluster: Rc::clone(&cluster),
                        workload: Rc::clone(&workload),
                        walls: Vec::with_capacity(repeat),
                        first: None,
                    });
                }
            }
            for _ in 0..repeat {
                for run in &mut runs {
                    run.once()?;
                }
            }
            for run in runs {
                rows.extend(run.row(scale, repeat));
            }
        }
        Ok(bench_output(
            "Engine at scale: Philly-shaped synthetic traces (Poisson arrivals, Philly GPU mix and \
             run times, seed 1) and the Pollux artifact's Philly trace (trace) on 8-GPU V100 nodes",
            rows,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(values: &[(&str, &str)]) -> Result<ReproOutput, ExperimentError> {
        let args = ExperimentArgs::new(EngineBench.params(), values.iter().copied())?;
        EngineBench.run(&args, &RunContext::quiet(1))
    }

    /// The repeat check's digest tells equal job records from records that differ in any
    /// one field.
    #[test]
    fn the_records_digest_sees_every_field() {
        let cluster = Cluster::homogeneous(
            "V100-32GB",
            4,
            8,
            MilliCpu::from_cores(48),
            Bytes::from_gib(512),
        )
        .unwrap();
        let workload = engine_workload(EngineJobs::Poisson(80_000, 10.0), 400).unwrap();
        let policy = crate::build_policy("fifo", &PolicyOptions::default()).unwrap();
        let report = Simulation::new(
            &cluster,
            &workload,
            &TraceThroughput,
            policy,
            SimConfig::default(),
        )
        .run(&mut ())
        .unwrap();
        let jobs = report.jobs;
        assert!(jobs.len() >= 100);
        let digest = records_digest(&jobs);
        assert_eq!(records_digest(&jobs.clone()), digest);
        let changes: [fn(&mut tessera_sim::JobRecord); 6] = [
            |j| j.preemptions += 1,
            |j| j.gpu_secs = f64::from_bits(j.gpu_secs.to_bits() ^ 1),
            |j| j.finish = None,
            |j| j.speedup = Some(j.speedup.unwrap_or(1.0) + 0.5),
            |j| j.name = "other".into(),
            |j| j.outcome = tessera_sim::JobOutcome::Rejected { reason: "x".into() },
        ];
        for change in changes {
            let mut other = jobs.clone();
            change(&mut other[57]);
            assert_ne!(records_digest(&other), digest);
        }
    }

    #[test]
    fn bad_case_scale_and_repeat_are_errors() {
        let err = run(&[("case", "huge")]).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("unknown case")));
        for name in ["scale", "repeat"] {
            let err = run(&[(name, "0")]).err().map(|e| e.to_string());
            assert!(err.is_some_and(|e| e.contains("at least 1")), "{name}");
        }
    }

    /// Repeats report the median and the range of their wall times, and the command line
    /// names the repeat count.
    #[test]
    fn repeats_report_median_and_range() {
        let out = run(&[
            ("case", "loaded"),
            ("policies", "las"),
            ("scale", "500"),
            ("repeat", "3"),
        ])
        .unwrap();
        let rows = out.summary["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 1);
        let detail = rows[0]["detail"].as_str().unwrap();
        assert!(detail.starts_with("median of 3 runs ("), "{detail}");
        assert!(rows[0]["command"].as_str().unwrap().ends_with("--repeat 3"));
    }

    /// The trace case replays the embedded Pollux Philly trace (its first 1/scale here) on
    /// 512 GPUs, every job to completion.
    #[test]
    fn the_trace_case_replays_the_pollux_trace() {
        let out = run(&[
            ("case", "trace"),
            ("policies", "fifo,las"),
            ("scale", "200"),
        ])
        .unwrap();
        let rows = out.summary["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        for row in rows {
            let case = row["case"].as_str().unwrap();
            assert!(case.starts_with("trace: 411 jobs on 512 GPUs"), "{case}");
            let detail = row["detail"].as_str().unwrap();
            assert!(detail.contains("411/411 finished"), "{detail}");
        }
    }

    /// The sweep at 1/1000 of its jobs: one row per cluster size, every job finished.
    #[test]
    fn scaled_sweep_reports_every_size() {
        let out = run(&[("case", "sweep"), ("policies", "fifo"), ("scale", "1000")]).unwrap();
        let rows = out.summary["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 3);
        for (row, gpus) in rows.iter().zip(["512", "2048", "8192"]) {
            let case = row["case"].as_str().unwrap();
            assert!(case.contains(&format!("80 jobs on {gpus} GPUs")), "{case}");
            assert!(row["detail"].as_str().unwrap().contains("80/80 finished"));
        }
    }
}
