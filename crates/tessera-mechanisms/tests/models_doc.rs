//! docs/models.md lists the model catalogue and each mechanism's keys as the code has them.

#[test]
fn docs_models_md_matches_the_catalogue() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/models.md");
    let doc = std::fs::read_to_string(path).expect("docs/models.md");
    let table = tessera_mechanisms::models_markdown();
    assert!(
        doc.contains(&table),
        "docs/models.md is out of date; its table should read:\n{table}"
    );
}

/// Every model of the catalogue resolves to itself, and every alias to its model.
#[test]
fn every_name_of_the_catalogue_resolves() {
    let c = tessera_model::models::ModelCatalog::builtin();
    for m in c.models() {
        assert_eq!(c.canonical(&m.name), Some(m.name.as_str()));
        for a in &m.aliases {
            assert_eq!(c.canonical(a), Some(m.name.as_str()), "{a}");
        }
    }
}

/// Issue 36: a model a truth's tables lack runs at its documented default, never at 0 (the
/// Synergy truth stopped `fifo+proportional` with "throughput 0" on a mixed cluster). Every
/// registered truth, jobs of unknown models and of every non-large catalogue model, their
/// requested GPUs with the node's proportional CPU and memory, on every GPU type.
#[test]
fn no_truth_gives_a_model_it_lacks_a_throughput_of_zero() {
    use tessera_model::{Allocation, Cluster, GpuCatalog, NodeShare, SimDuration, SimTime};
    let yaml = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: a100, count: 1, gpu: A100-80GB, gpusPerNode: 8, cpus: 64, memory: 512Gi}\n    - {name: h100, count: 1, gpu: H100-80GB, gpusPerNode: 8, cpus: 96, memory: 1Ti}\n    - {name: v100, count: 1, gpu: V100-32GB, gpusPerNode: 8, cpus: 48, memory: 256Gi}\n    - {name: a10, count: 1, gpu: A10, gpusPerNode: 4, cpus: 16, memory: 64Gi}\n";
    let cluster = Cluster::from_yaml(yaml, &GpuCatalog::builtin()).unwrap();
    let catalog = tessera_model::models::ModelCatalog::builtin();
    let mut models: Vec<String> = ["", "vgg19", "mystery-net", "resnet_train100"]
        .iter()
        .map(|m| m.to_string())
        .collect();
    models.extend(
        catalog
            .models()
            .iter()
            .filter(|m| tessera_mechanisms::crius::cells::LargeModel::from_name(&m.name).is_none())
            .map(|m| m.name.clone()),
    );
    for (_, info) in tessera_mechanisms::truths() {
        let truth = tessera_mechanisms::build_truth(info.name, &Default::default()).unwrap();
        for model in &models {
            for node in &cluster.nodes {
                for gpus in [1, 2, 4] {
                    if gpus > node.gpus {
                        continue;
                    }
                    let mut job = tessera_model::TrainingJob::simple(
                        0,
                        SimTime::ZERO,
                        gpus,
                        SimDuration::from_secs(600),
                    );
                    job.model = model.clone();
                    let share = NodeShare {
                        node: node.id,
                        gpus,
                        cpu: tessera_model::MilliCpu(
                            node.cpu.0 * u64::from(gpus) / u64::from(node.gpus),
                        ),
                        memory: tessera_model::Bytes(
                            node.memory.0 * u64::from(gpus) / u64::from(node.gpus),
                        ),
                        devices: None,
                    };
                    let rate = truth
                        .model
                        .throughput(&job, &Allocation::single(share), &cluster);
                    assert!(
                        rate.is_finite() && rate > 0.0,
                        "truth {} model {model:?} on {gpus} GPUs of {}: {rate}",
                        info.name,
                        node.name
                    );
                }
            }
        }
    }
}
