//! The built-in mixed cluster and workload (`--cluster builtin:mixed --trace builtin:mixed`,
//! the default of `tessera simulate`): every mechanism's dimension at once, at a size a
//! laptop simulates in well under a second per policy.
//!
//! **Cluster** (96 GPUs, four GPU types, half of them MIG-capable), node shapes from the
//! vendors' published specifications:
//!
//! | group | nodes | GPUs per node | CPUs (threads) | memory | shape of |
//! |---|---|---|---|---|---|
//! | `dgx-a100` | 4 | 8 × A100-80GB (MIG) | 256 | 2 TiB | NVIDIA DGX A100 640GB: 2 × AMD EPYC 7742 (128 cores, 256 threads), 2 TB |
//! | `dgx-h100` | 2 | 8 × H100-80GB (MIG) | 224 | 2 TiB | NVIDIA DGX H100: 2 × Xeon Platinum 8480C (112 cores, 224 threads), 2 TB |
//! | `dgx1-v100` | 4 | 8 × V100-32GB | 80 | 512 GiB | NVIDIA DGX-1 (V100): 2 × Xeon E5-2698 v4 (40 cores, 80 threads), 512 GB |
//! | `g5-a10` | 4 | 4 × A10 | 48 | 192 GiB | AWS g5.12xlarge: 4 × A10G, 48 vCPUs, 192 GiB |
//!
//! **Workload** ([`MixedWorkload`], seeded): training jobs arriving as a Poisson process, with
//! Philly's GPU counts and run times (as `philly-synthetic-2k` draws them:
//! [`tessera_trace::synthetic::PHILLY_GPU_MIX`] 1/2/4/8 GPUs at 77.1/1.9/9.1/11.9%, run times
//! uniformly from the 83,154 Philly run times, median 20 min, mean 4.1 h); a share of small
//! jobs (one MIG instance or a fraction of a GPU); a few multi-node jobs (16 or 32 GPUs, which
//! Philly has too: 0.35% of the 82,247 jobs of `pollux-philly-82k` ask for more than 8 GPUs,
//! over-represented here so that a few hundred jobs hold some); some jobs restricted to GPU
//! types, some with explicit CPU and memory demands; models from the one catalogue
//! ([`tessera_model::models`]); and three inference services beside training: a quota
//! service (`smRequest` from Dilu's profiling search for its SLO) with a diurnal load, a
//! second quota service with bursty (Gamma, CV 3) arrivals, and a whole-GPU LLM service with a
//! diurnal load and bursts.

use crate::BuiltinCluster;
#[cfg(feature = "experiments")]
use crate::{BuiltinWorkload, GeneratorOptions, WorkloadGenerator};

#[cfg(feature = "experiments")]
pub use super::world_workload::MixedWorkload;

/// Name of the mixed cluster and workload (`builtin:mixed`).
pub const NAME: &str = "mixed";

/// The policies the mixed world compares (`tessera simulate` without `--policy`, `tessera
/// repro tessera`): FIFO and LAS, one policy of each mechanism (Synergy's `las+tune`, MISO,
/// Crius, Sia, Dilu) and `tessera`, which composes them. Drivers look each name up in the
/// registry and leave out (with a note) one not registered.
pub const DEFAULT_POLICIES: &[&str] = &[
    "fifo", "las", "las+tune", "miso", "crius", "sia", "dilu", "tessera",
];

/// Built-in clusters (`--cluster builtin:NAME`).
pub const CLUSTERS: &[BuiltinCluster] = &[BuiltinCluster {
    name: NAME,
    about: "96 GPUs of four types: 4 DGX A100-80GB + 2 DGX H100 (MIG-capable), 4 DGX-1 V100-32GB, 4 x 4 A10; vendors' CPU and memory shapes",
    yaml: cluster_yaml,
}];

/// Built-in workloads (`--trace builtin:NAME`); the generator draws Philly's run times from
/// `tessera-trace`, which comes with the `experiments` feature.
#[cfg(feature = "experiments")]
pub const WORKLOADS: &[BuiltinWorkload] = &[BuiltinWorkload {
    name: NAME,
    about: "the default run's mixed workload: training jobs with Philly GPU counts and run times, MIG and GPU-share jobs, gpuTypes, CPU/memory demands, multi-node jobs; a diurnal quota service, a bursty quota service, a whole-GPU LLM service; seeded (--seed)",
    generate: |seed| {
        MixedWorkload {
            seed,
            ..MixedWorkload::default()
        }
        .generate()
    },
}];

/// Without the `experiments` feature: none.
#[cfg(not(feature = "experiments"))]
pub const WORKLOADS: &[crate::BuiltinWorkload] = &[];

/// Workload generators (`tessera trace generate --generator NAME`).
#[cfg(feature = "experiments")]
pub const GENERATORS: &[WorkloadGenerator] = &[WorkloadGenerator {
    name: NAME,
    about: "the mixed workload of builtin:mixed (--jobs, --load jobs/h, --seed); training jobs only in CSV, services too in a Workload spec",
    variants: &[],
    generate: generate_with,
}];

/// Without the `experiments` feature: none.
#[cfg(not(feature = "experiments"))]
pub const GENERATORS: &[crate::WorkloadGenerator] = &[];

#[cfg(feature = "experiments")]
fn generate_with(o: &GeneratorOptions) -> Result<tessera_model::Workload, String> {
    crate::check_generator_options(o)?;
    let d = MixedWorkload::default();
    MixedWorkload {
        jobs: if o.jobs == 0 { d.jobs } else { o.jobs },
        jobs_per_hour: if o.load > 0.0 {
            o.load
        } else {
            d.jobs_per_hour
        },
        seed: o.seed.unwrap_or(d.seed),
        ..d
    }
    .generate()
}

/// The mixed cluster's `kind: Cluster` YAML (see the module's table for the node shapes).
pub fn cluster_yaml() -> String {
    "apiVersion: tessera/v1
kind: Cluster
metadata:
  name: mixed
spec:
  nodeGroups:
    # NVIDIA DGX A100 640GB: 8 x A100-80GB, 2 x AMD EPYC 7742 (128 cores, 256 threads), 2 TB
    - name: dgx-a100
      count: 4
      gpu: A100-80GB
      gpusPerNode: 8
      cpus: 256
      memory: 2048Gi
      rack: rack-a
    # NVIDIA DGX H100: 8 x H100-80GB, 2 x Xeon Platinum 8480C (112 cores, 224 threads), 2 TB
    - name: dgx-h100
      count: 2
      gpu: H100-80GB
      gpusPerNode: 8
      cpus: 224
      memory: 2048Gi
      rack: rack-a
    # NVIDIA DGX-1 (V100): 8 x V100-32GB, 2 x Xeon E5-2698 v4 (40 cores, 80 threads), 512 GB
    - name: dgx1-v100
      count: 4
      gpu: V100-32GB
      gpusPerNode: 8
      cpus: 80
      memory: 512Gi
      rack: rack-b
    # AWS g5.12xlarge: 4 x A10G (24 GB), 48 vCPUs, 192 GiB
    - name: g5-a10
      count: 4
      gpu: A10
      gpusPerNode: 4
      cpus: 48
      memory: 192Gi
      rack: rack-c
"
    .to_string()
}
