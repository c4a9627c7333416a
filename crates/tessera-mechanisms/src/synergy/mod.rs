//! Synergy (Mohan et al., OSDI'22): resource-sensitive CPU and memory allocation.
//!
//! Jobs differ in how much CPU and host memory they need per GPU; Synergy profiles that
//! cheaply on arrival and hands CPU and memory out by sensitivity rather than in proportion
//! to GPUs. Everything of the mechanism is here:
//!
//! - [`perf`]: the sensitivity tables (truth), the reference simulator's scalar rule, and
//!   optimistic profiling; what a policy learns is a [`perf::SensitivityEstimate`] in the
//!   job's knowledge.
//! - [`policy`] and [`opt`]: every ordering composed with an allocator
//!   (`fifo+proportional`, `fifo+tune`, `las+opt`, ...; `synergy` = `fifo+tune`).
//! - [`workload`]: the paper's workload generator; [`reference_cluster`]: its cluster;
//!   [`reference_workload`]: the reference simulator's own workload, job for job.
//! - `reference`, `experiment`, `repro`, `bench` (feature `experiments`): the reference
//!   simulator's round semantics as an engine, and `tessera repro synergy` /
//!   `tessera bench synergy`.

use std::sync::Arc;

use tessera_model::{Cluster, GpuCatalog, SimDuration};
use tessera_sched::baselines::JobOrder;
use tessera_sched::{Capabilities, Capability, Policy, PolicyInfo, PolicyOptions};

use crate::{
    BuiltinCluster, BuiltinSweep, BuiltinWorkload, GeneratorOptions, Mechanism, Truth, TruthInfo,
    TruthOptions, WorkloadGenerator,
};

pub mod opt;
pub mod perf;
pub mod policy;
pub mod reference_workload;
pub mod workload;

#[cfg(feature = "experiments")]
pub mod bench;
#[cfg(feature = "experiments")]
pub mod experiment;
#[cfg(feature = "experiments")]
pub mod reference;
#[cfg(feature = "experiments")]
pub mod repro;

use perf::{OptimisticProfiler, ReferenceProfiler, ReferenceSpeedup, SynergyThroughput, TableMode};
use policy::{Allocator, SynergyPolicy};

/// Round length of Synergy policies when none is given: the reference's 300 s leases.
pub const SYNERGY_ROUND: SimDuration = SimDuration::from_secs(300);

macro_rules! synergy_policies {
    ($($name:literal => $about:literal),* $(,)?) => {
        &[$(PolicyInfo { name: $name, about: $about, capabilities: CAPABILITIES }),*]
    };
}

/// What Synergy's policies honour. Explicit CPU/memory demands are not: the allocators hand
/// CPU and memory out by sensitivity (or in proportion to GPUs), whatever a job states.
pub const CAPABILITIES: Capabilities = Capabilities::TRAINING
    .without(Capability::CpuMemory)
    .with(Capability::Failures);

/// Every ordering composed with every allocator, re-planning every round.
pub const POLICIES: &[PolicyInfo] = synergy_policies![
    "fifo+proportional" => "Synergy: FIFO, CPU/memory in proportion to GPUs",
    "fifo+greedy" => "Synergy: FIFO, best-case CPU/memory demand or skip",
    "fifo+tune" => "Synergy: FIFO, best case, else proportional, else demote peers (alias: synergy)",
    "fifo+opt" => "Synergy: FIFO, per-round LP over the sensitivity grid",
    "srtf+proportional" => "Synergy: SRTF, CPU/memory in proportion to GPUs",
    "srtf+greedy" => "Synergy: SRTF, best-case demand or skip",
    "srtf+tune" => "Synergy: SRTF with TUNE",
    "srtf+opt" => "Synergy: SRTF with OPT",
    "las+proportional" => "Synergy: LAS, CPU/memory in proportion to GPUs",
    "las+greedy" => "Synergy: LAS, best-case demand or skip",
    "las+tune" => "Synergy: LAS with TUNE",
    "las+opt" => "Synergy: LAS with OPT",
    "ftf+proportional" => "Synergy: FTF, CPU/memory in proportion to GPUs",
    "ftf+greedy" => "Synergy: FTF, best-case demand or skip",
    "ftf+tune" => "Synergy: FTF with TUNE",
    "ftf+opt" => "Synergy: FTF with OPT",
];

/// Servers' CPU cores in the reference cluster.
pub const SERVER_CPUS: u32 = 24;
/// Servers' memory in the reference cluster, GiB: 62.5 per GPU, the proportional share the
/// sensitivity tables are expressed against (their "GB" per GPU are GiB here throughout).
pub const SERVER_MEMORY_GIB: u32 = 500;

/// The reference cluster as a `kind: Cluster` spec: `servers` × 8 V100 GPUs with
/// [`SERVER_CPUS`] cores and [`SERVER_MEMORY_GIB`] GiB each (16 servers in the paper). The
/// one definition behind `builtin:synergy-128` and every Synergy experiment.
pub fn reference_cluster_yaml(servers: u32) -> String {
    format!(
        "# Synergy's reference cluster (OSDI'22 artifact defaults): {servers} servers x 8 GPUs,\n\
         # {SERVER_CPUS} CPUs and {SERVER_MEMORY_GIB} GiB per server (62.5 GiB per GPU, the tables' proportional share).\n\
         apiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: synergy-{gpus}\nspec:\n  nodeGroups:\n    - name: v100\n      count: {servers}\n      gpu: V100-32GB\n      gpusPerNode: 8\n      cpus: {SERVER_CPUS}\n      memory: {SERVER_MEMORY_GIB}Gi\n",
        gpus = servers * 8
    )
}

/// The reference cluster with `servers` servers (at least one).
pub fn reference_cluster(servers: u32) -> Cluster {
    let yaml = reference_cluster_yaml(servers.max(1));
    // The spec is ours and valid by construction (a unit test parses it); the fallback
    // keeps library code panic-free.
    Cluster::from_yaml(&yaml, &GpuCatalog::builtin()).unwrap_or_else(|_| Cluster {
        name: "empty".into(),
        catalog: GpuCatalog::builtin(),
        groups: Vec::new(),
        nodes: Vec::new(),
    })
}

fn synergy_128_yaml() -> String {
    reference_cluster_yaml(16)
}

/// Arrival rate of `builtin:synergy-mix-600` (jobs per hour): keeps 128 GPUs loaded.
const MIX_600_LOAD: f64 = 8.0;

fn mix_600(seed: u64) -> Result<tessera_model::Workload, String> {
    Ok(workload::SynergyWorkload {
        jobs: 600,
        jobs_per_hour: MIX_600_LOAD,
        multi_gpu: true,
        split: [20.0, 70.0, 10.0],
        seed,
    }
    .generate())
}

fn reference_trace(name: &str) -> Result<tessera_model::Workload, String> {
    match reference_workload::builtin_trace(name) {
        Some(generated) => generated.map_err(|e| e.to_string()),
        None => Err(format!("no reference trace {name}")),
    }
}

fn reference_single_9(_: u64) -> Result<tessera_model::Workload, String> {
    reference_trace("synergy-reference-single-9")
}
fn reference_multi_3(_: u64) -> Result<tessera_model::Workload, String> {
    reference_trace("synergy-reference-multi-3")
}
fn reference_multi_4(_: u64) -> Result<tessera_model::Workload, String> {
    reference_trace("synergy-reference-multi-4")
}

/// `--generator synergy-reference`: the reference simulator's own workload, job for job.
fn generate_reference(o: &GeneratorOptions) -> Result<tessera_model::Workload, String> {
    use reference_workload::{ReferenceTrace, ReferenceWorkload, REFERENCE_SEED};
    crate::check_generator_options(o)?;
    if o.gpus.is_some() {
        return Err("--gpus does not apply to synergy-reference (use --trace single|multi)".into());
    }
    if !(o.load.is_finite() && o.load > 0.0) {
        return Err(format!("--load must be positive, got {}", o.load));
    }
    let variant = o.variant.as_deref().unwrap_or("single");
    let Some(trace) = ReferenceTrace::parse(variant) else {
        return Err(format!("--trace must be single or multi, got {variant:?}"));
    };
    ReferenceWorkload {
        jobs: o.jobs,
        seed: o.seed.unwrap_or(REFERENCE_SEED),
        ..ReferenceWorkload::new(trace, o.load)
    }
    .generate()
    .map_err(|e| e.to_string())
}

/// The (ordering, allocator) of a Synergy policy name (`las+tune`; `synergy` = `fifo+tune`).
fn parse_policy(name: &str) -> Option<(JobOrder, Allocator)> {
    let lower = name.to_ascii_lowercase();
    let lower = if lower == "synergy" {
        "fifo+tune"
    } else {
        lower.as_str()
    };
    let (order, allocator) = lower.split_once('+')?;
    Some((JobOrder::parse(order)?, Allocator::parse(allocator)?))
}

/// The Synergy mechanism.
#[derive(Clone, Copy, Debug, Default)]
pub struct Synergy;

impl Mechanism for Synergy {
    fn name(&self) -> &'static str {
        "synergy"
    }

    fn about(&self) -> &'static str {
        "Synergy (OSDI'22): CPU/memory allocated by profiled sensitivity, not in proportion to GPUs"
    }

    fn policies(&self) -> &'static [PolicyInfo] {
        POLICIES
    }

    fn build_policy(&self, name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>> {
        let (order, allocator) = parse_policy(name)?;
        let round = options.round.or(Some(SYNERGY_ROUND));
        Some(Box::new(SynergyPolicy::new(order, allocator, round)))
    }

    /// TUNE, GREEDY and OPT place by the jobs' sensitivity estimates; proportional shares
    /// read none.
    fn policy_profiler(
        &self,
        policy: &str,
        options: &TruthOptions,
    ) -> Option<Arc<dyn tessera_perf::Profiler>> {
        let (_, allocator) = parse_policy(policy)?;
        (allocator != Allocator::Proportional).then(|| {
            Arc::new(OptimisticProfiler {
                cost: options.profile_cost.unwrap_or(perf::DEFAULT_PROFILE_COST),
                rel_error: options.profile_error,
                ..OptimisticProfiler::default()
            }) as Arc<dyn tessera_perf::Profiler>
        })
    }

    /// Every job's model has a sensitivity profile under its own name (a workload in
    /// Synergy's own names; aliases apply within the truth, not to choose it) and every GPU
    /// is a V100 (the tables were measured on V100 servers).
    fn covers(&self, cluster: &Cluster, workload: &tessera_model::Workload) -> bool {
        let profiles = perf::SynergyProfiles::builtin();
        !workload.jobs().is_empty()
            && workload
                .jobs()
                .iter()
                .all(|j| profiles.exact(&j.model, 1).is_some())
            && !cluster.groups.is_empty()
            && cluster.groups.iter().all(|g| {
                cluster
                    .catalog
                    .get(g.gpu)
                    .name
                    .to_ascii_uppercase()
                    .starts_with("V100")
            })
    }

    fn truths(&self) -> &'static [TruthInfo] {
        &[TruthInfo {
            name: "synergy",
            about: "Synergy's per-model CPU/memory sensitivity tables; jobs are profiled on arrival (optimistic profiling); models without a table run at their trace throughput",
        }]
    }

    fn build_truth(&self, name: &str, options: &TruthOptions) -> Option<Truth> {
        if !name.eq_ignore_ascii_case("synergy") {
            return None;
        }
        // The reference simulator's semantics come with its own view of truth: scalar
        // speed-ups and exact, free profiles.
        Some(if options.engine == "synergy" {
            Truth {
                name: "synergy",
                model: Arc::new(ReferenceSpeedup::default()),
                profiler: Some(Arc::new(ReferenceProfiler)),
            }
        } else {
            Truth {
                name: "synergy",
                model: Arc::new(SynergyThroughput::new(TableMode::PerGpuCount)),
                profiler: Some(Arc::new(OptimisticProfiler {
                    cost: options.profile_cost.unwrap_or(perf::DEFAULT_PROFILE_COST),
                    rel_error: options.profile_error,
                    ..OptimisticProfiler::default()
                })),
            }
        })
    }

    fn model_key(&self, canonical: &str) -> Option<String> {
        perf::table_key(canonical).map(str::to_string)
    }

    fn preferred_truth(&self) -> Option<&'static str> {
        Some("synergy")
    }

    fn clusters(&self) -> &'static [BuiltinCluster] {
        &[BuiltinCluster {
            name: "synergy-128",
            about: "Synergy's cluster: 16 x 8 V100 GPUs, 24 CPUs, 500 GiB per server",
            yaml: synergy_128_yaml,
        }]
    }

    fn workloads(&self) -> &'static [BuiltinWorkload] {
        &[
            BuiltinWorkload {
                name: "synergy-mix-600",
                about: "600 jobs, Poisson 8 jobs/h, Synergy's model mix (image/language/speech 20/70/10) and run times, Philly GPU counts; seeded. With builtin:synergy-128 it keeps the cluster loaded",
                generate: mix_600,
            },
            BuiltinWorkload {
                name: "synergy-reference-single-9",
                about: "the Synergy simulator's own single-GPU workload at 9 jobs/h, seed 42 (24,000 jobs)",
                generate: reference_single_9,
            },
            BuiltinWorkload {
                name: "synergy-reference-multi-3",
                about: "the Synergy simulator's own multi-GPU workload at 3 jobs/h, seed 42 (24,000 jobs)",
                generate: reference_multi_3,
            },
            BuiltinWorkload {
                name: "synergy-reference-multi-4",
                about: "the Synergy simulator's own multi-GPU workload at 4 jobs/h, seed 42 (24,000 jobs)",
                generate: reference_multi_4,
            },
        ]
    }

    fn generators(&self) -> &'static [WorkloadGenerator] {
        &[WorkloadGenerator {
            name: "synergy-reference",
            about: "the Synergy simulator's own workload, job for job as its generator makes it at random.seed(42) (--trace single|multi)",
            variants: &["single", "multi"],
            generate: generate_reference,
        }]
    }

    fn sweeps(&self) -> &'static [BuiltinSweep] {
        &[BuiltinSweep {
            name: "synergy-c",
            about: "the Synergy reproduction's load sweep (repro synergy --parts c): 12 policies x 8 loads x 2 semantics",
            yaml: include_str!("sweep-c.yaml"),
        }]
    }

    #[cfg(feature = "experiments")]
    fn engines(&self) -> &'static [crate::experiment::EngineInfo] {
        &[crate::experiment::EngineInfo {
            name: "synergy",
            about: "the Synergy reference simulator's rounds: 300 s leases, credit at placement, completion at the end of the round, scalar speed-ups, exact free profiles, no restart costs",
            run: reference::run_reference,
        }]
    }

    #[cfg(feature = "experiments")]
    fn experiments(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&repro::SynergyRepro]
    }

    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn crate::experiment::Experiment] {
        &[&bench::SynergyBench]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_cluster_is_one_definition() {
        let c = reference_cluster(16);
        let (gpus, cpu, mem) = c.totals();
        assert_eq!(gpus, 128);
        assert_eq!(cpu, 16 * 24 * 1000);
        assert_eq!(mem, 16 * 500 * tessera_model::Bytes::GIB);
        let builtin = Cluster::from_yaml(&synergy_128_yaml(), &GpuCatalog::builtin()).unwrap();
        assert_eq!(builtin.totals(), c.totals());
    }

    #[test]
    fn synergy_alias_is_fifo_tune_with_the_reference_round() {
        let p = Synergy
            .build_policy("Synergy", &PolicyOptions::default())
            .unwrap();
        assert_eq!(p.name(), "fifo+tune");
        assert_eq!(p.round_length(), Some(SYNERGY_ROUND));
        assert!(Synergy
            .build_policy("fifo+magic", &PolicyOptions::default())
            .is_none());
        assert!(Synergy
            .build_policy("fifo", &PolicyOptions::default())
            .is_none());
    }
}
