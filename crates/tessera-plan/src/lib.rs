//! Parallelism planning: sharding plans for training on GPUs of different speeds, after HAP
//! (Zhang et al., EuroSys'24, "HAP: SPMD DNN Training on Heterogeneous GPU Clusters with
//! Automated Program Synthesis").
//!
//! - [`graph`]: the operator-graph format ([`GraphSpec`] → validated [`Graph`]) with each
//!   operator's sharding rules; [`builtin`] graphs (VGG19, ViT, BERT, BERT-MoE, GPT).
//! - [`cluster`]: heterogeneous devices ([`PlanClusterSpec`] → [`Devices`]).
//! - [`cost`]: the cost model under per-device ratios, with deterministic rounding.
//! - [`search`]: best-first program synthesis, evaluation and validation.
//! - [`lp`]: the ratio LP.
//! - [`synth`]: the alternation of search and LP, baselines, and the [`Plan`] output.
//! - [`repro`]: the paper's heterogeneous-cluster experiment.
//!
//! ```
//! use tessera_plan::{builtin, synth};
//! let graph = builtin::mlp(64, 1024, 4096, 2).validate().unwrap();
//! let devices = builtin::mixed_cluster(1, 1, 1);
//! let plan = synth::plan(&graph, &devices).unwrap();
//! assert!(plan.iteration_s <= plan.dp_proportional_s);
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod builtin;
pub mod cluster;
pub mod cost;
pub mod error;
pub mod graph;
pub mod lp;
pub mod repro;
pub mod search;
pub mod synth;

pub use cluster::{Devices, PlanClusterSpec};
pub use error::PlanError;
pub use graph::{Graph, GraphSpec, Prop};
pub use search::MAX_SEARCH_STATES;
pub use synth::Plan;
