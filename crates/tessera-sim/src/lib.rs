//! Tessera's discrete-event simulator.
//!
//! A [`Simulation`] replays a [`Workload`](tessera_model::Workload) on a
//! [`Cluster`](tessera_model::Cluster) under one [`Policy`](tessera_sched::Policy), advancing
//! jobs by a [`ThroughputModel`](tessera_perf::ThroughputModel) (the truth), and produces a
//! [`SimReport`]: per-job records, a [`Summary`] and a utilization time series. Inference
//! services of the workload are simulated request by request ([`serving`]): per-service
//! latency, SLO violations and instance counts, and active GPUs and fragmentation. Nodes and
//! GPUs may fail and come back ([`failures`]): jobs on them lose the work since their last
//! checkpoint and are requeued.
//!
//! Determinism is a contract: time is integer microseconds, ties between events are broken by
//! a sequence number, policies see jobs in an order they must not rely on, and nothing reads a
//! clock or an unseeded random source. The same inputs give the same report, bit for bit.
//!
//! ```
//! use tessera_model::{Bytes, Cluster, MilliCpu, SimDuration, SimTime, TrainingJob, Workload};
//! use tessera_sched::{baselines::{JobOrder, OrderedPolicy}};
//! use tessera_sim::{SimConfig, Simulation};
//!
//! let cluster = Cluster::homogeneous("V100-32GB", 1, 4, MilliCpu::from_cores(24), Bytes::from_gib(256)).unwrap();
//! let jobs = Workload::new(vec![TrainingJob::simple(0, SimTime::ZERO, 4, SimDuration::from_secs(100))]);
//! let policy = Box::new(OrderedPolicy::new(JobOrder::Fifo, None));
//! let report = Simulation::new(&cluster, &jobs, &tessera_perf::TraceThroughput, policy, SimConfig::default())
//!     .run(&mut ())
//!     .unwrap();
//! assert_eq!(report.summary.avg_jct_s, 100.0);
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod completions;
mod engine;
pub mod failures;
pub mod metrics;
pub mod serving;
mod waits;

pub use engine::{
    default_event_budget, Progress, RunningAt, SimConfig, SimError, Simulation, Snapshot,
    SnapshotGpu, SnapshotJob, BASE_EVENT_BUDGET, DEFAULT_RECONFIGURE_TIME, EVENTS_PER_JOB,
};
pub use failures::{FailureEvent, FailureSpec, FailureSpecError, GroupMtbf, Health};
pub use metrics::{
    FailedJob, FailureSummary, GpuActivity, JobFailures, JobOutcome, JobRecord, RestartStats,
    SimReport, Summary, UtilSample,
};
pub use serving::{
    DefaultServingModel, InstanceSeries, ServiceSummary, ServingConfig, ServingModel,
};
