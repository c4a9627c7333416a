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
];
// Gavel's 108-GPU cluster is the gavel mechanism's `builtin:gavel-108` (one definition: the
// CLI's own copy, `hetero-gavel-108`, had 256Gi per server where Gavel's p3.8xlarge-shaped
// servers have 244Gi).

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
