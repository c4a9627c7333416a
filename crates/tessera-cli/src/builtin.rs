//! Built-in clusters, embedded so that `tessera simulate` works with no input files.

/// (name, description, YAML).
pub const CLUSTERS: &[(&str, &str, &str)] = &[
    (
        "default",
        "32 servers x 8 V100-32GB (256 GPUs), 48 CPUs, 512 GiB",
        include_str!("../data/clusters/default.yaml"),
    ),
    (
        "philly-2048",
        "256 servers x 8 V100-32GB (2,048 GPUs)",
        include_str!("../data/clusters/philly-2048.yaml"),
    ),
    (
        "tiresias-n32g4",
        "Tiresias' n32g4: 32 servers x 4 P100",
        include_str!("../data/clusters/tiresias-n32g4.yaml"),
    ),
    (
        "hetero-gavel-108",
        "Gavel's 36 K80 + 36 P100 + 36 V100",
        include_str!("../data/clusters/hetero-gavel-108.yaml"),
    ),
];

/// Built-in workloads the CLI adds to `tessera-trace`'s own (they need a mechanism's
/// generator): (name, description).
pub const TRACES: &[(&str, &str)] = &[(
    "synergy-mix-600",
    "600 jobs, Poisson 8 jobs/h, Synergy's model mix (image/language/speech 20/70/10) and \
     run times, Philly GPU counts; seeded. With builtin:synergy-128 it keeps the cluster loaded",
)];

/// A CLI built-in workload by name, generated with `seed`.
pub fn trace(name: &str, seed: u64) -> Option<tessera_model::Workload> {
    use tessera_mechanisms::synergy::workload::SynergyWorkload;
    match name {
        "synergy-mix-600" => Some(
            SynergyWorkload {
                jobs: 600,
                jobs_per_hour: TRACE_LOAD,
                multi_gpu: true,
                split: [20.0, 70.0, 10.0],
                seed,
            }
            .generate(),
        ),
        _ => None,
    }
}

/// Arrival rate of `synergy-mix-600` (jobs per hour).
const TRACE_LOAD: f64 = 8.0;

/// The YAML of a built-in cluster: the CLI's own, or one a mechanism ships.
pub fn cluster_yaml(name: &str) -> Option<String> {
    CLUSTERS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, _, y)| y.to_string())
        .or_else(|| {
            tessera_mechanisms::clusters()
                .find(|(_, c)| c.name == name)
                .map(|(_, c)| (c.yaml)())
        })
}

/// Every built-in cluster name.
pub fn cluster_names() -> Vec<&'static str> {
    CLUSTERS
        .iter()
        .map(|(n, _, _)| *n)
        .chain(tessera_mechanisms::clusters().map(|(_, c)| c.name))
        .collect()
}

#[cfg(test)]
mod tests {
    use tessera_model::{Cluster, GpuCatalog};

    #[test]
    fn every_builtin_cluster_is_valid() {
        for (name, _, yaml) in super::CLUSTERS {
            Cluster::from_yaml(yaml, &GpuCatalog::builtin())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}
