//! Value types of Tessera, shared by every other crate.
//!
//! - [`time`]: [`SimTime`] and [`SimDuration`], integer microseconds.
//! - [`quantity`]: Kubernetes quantities, [`MilliCpu`] and [`Bytes`].
//! - [`catalog`]: the [`GpuCatalog`] of GPU models and MIG geometry (built-in YAML data).
//! - [`cluster`]: `kind: Cluster` specs and the validated [`Cluster`].
//! - [`job`]: [`TrainingJob`] and [`Workload`] (jobs and services).
//! - [`service`]: [`InferenceService`]s, their instances' demand and arrival processes.
//! - [`knowledge`]: [`Knowledge`], typed facts a profiler learned about a job.
//! - [`models`]: the model catalogue, one namespace of model names for every mechanism's
//!   tables (built-in YAML data, docs/models.md).
//! - [`alloc`]: [`Allocation`]s of GPUs, CPU and memory on nodes.
//! - [`rng`]: [`SimRng`], a seeded generator with stable draws.
//! - [`hint`]: [`prefetch`](hint::prefetch), a cache hint for hot loops over per-job state.
//! - [`pyrandom`]: [`PyRandom`], CPython's `random` draw for draw (for published Python simulators' workloads).
//!
//! ```
//! use tessera_model::{Cluster, GpuCatalog};
//! let yaml = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: a, count: 2, gpu: A100-80GB, gpusPerNode: 8, cpus: 96, memory: 1Ti}\n";
//! let cluster = Cluster::from_yaml(yaml, &GpuCatalog::builtin()).unwrap();
//! assert_eq!(cluster.totals().0, 16);
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod alloc;
pub mod catalog;
pub mod cluster;
pub mod error;
pub mod hint;
pub mod job;
pub mod knowledge;
pub mod models;
pub mod pyrandom;
pub mod quantity;
pub mod rng;
pub mod service;
pub mod time;

pub use alloc::{
    Allocation, DeviceAlloc, GpuMask, GpuPart, MigInstance, NodeShare, ParallelPlan, Shares,
};
pub use catalog::{GpuCatalog, GpuModel, GpuModelId, MigGeometry, MigProfile};
pub use cluster::{
    Cluster, ClusterSpec, Dimension, Node, NodeGroup, NodeId, Resources, Unfit, UnfitJob,
};
pub use error::SpecError;
pub use job::{
    sort_stably_by_key, GpuShareRequest, JobId, MigRequest, TrainingJob, Workload,
    MIG_RESOURCE_PREFIX,
};
pub use knowledge::Knowledge;
pub use pyrandom::PyRandom;
pub use quantity::{Bytes, MilliCpu, QuantityError};
pub use rng::SimRng;
pub use service::{
    ArrivalProcess, GpuDemand, InferenceService, InstanceDemand, ServiceId, MAX_ARRIVAL_CV,
    MAX_EXPECTED_REQUESTS, MAX_REQUEST_RATE,
};
pub use time::{SimDuration, SimTime, TimeRangeError, MAX_INPUT_SECS};
