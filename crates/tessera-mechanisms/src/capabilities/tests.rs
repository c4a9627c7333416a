//! The check, dimension by dimension, on a mixed cluster (A100-80GB and H100 with MIG,
//! V100-32GB, A10).

use super::*;
use tessera_model::{
    Bytes, GpuCatalog, GpuShareRequest, MilliCpu, SimDuration, SimTime, TrainingJob,
};

pub(crate) const MIXED: &str = "apiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: mixed\nspec:\n  nodeGroups:\n    - {name: a100, count: 2, gpu: A100-80GB, gpusPerNode: 4, cpus: 64, memory: 512Gi}\n    - {name: h100, count: 1, gpu: H100-80GB, gpusPerNode: 4, cpus: 64, memory: 512Gi}\n    - {name: v100, count: 2, gpu: V100-32GB, gpusPerNode: 4, cpus: 32, memory: 256Gi}\n    - {name: a10, count: 2, gpu: A10, gpusPerNode: 2, cpus: 16, memory: 128Gi}\n";

fn cluster(yaml: &str) -> Cluster {
    Cluster::from_yaml(yaml, &GpuCatalog::builtin()).unwrap()
}

fn uniform(gpu: &str) -> Cluster {
    cluster(&format!(
        "apiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: u\nspec:\n  nodeGroups:\n    - {{name: n, count: 2, gpu: {gpu}, gpusPerNode: 4, cpus: 64, memory: 512Gi}}\n"
    ))
}

fn job(name: &str, gpus: u32) -> TrainingJob {
    let mut j = TrainingJob::simple(0, SimTime::ZERO, gpus, SimDuration::from_secs(60));
    j.name = name.into();
    j
}

fn model(c: &Cluster, name: &str) -> GpuModelId {
    c.catalog.find(name).unwrap()
}

fn caps_of(demands: &[Demand]) -> Vec<Capability> {
    demands.iter().map(|d| d.capability).collect()
}

#[test]
fn a_plain_job_on_a_uniform_cluster_asks_nothing() {
    let c = uniform("A100-80GB");
    let w = Workload::new(vec![job("a", 1)]);
    assert!(demands(&c, &w, &CheckOptions::default()).is_empty());
    assert!(check_support("nopart", &c, &w, &CheckOptions::default())
        .unwrap()
        .is_empty());
}

#[test]
fn gpu_types_count_only_when_they_exclude_a_model_present() {
    let c = cluster(MIXED);
    let mut j = job("j5", 1);
    j.gpu_types = vec![model(&c, "H100-80GB")];
    let d = job_demands(&c, &j, Some(12));
    assert_eq!(caps_of(&d), [Capability::GpuTypes]);
    assert_eq!(
        d[0].to_string(),
        "job j5 (line 12) asks for gpuTypes [H100-80GB]"
    );
    // Every model of a uniform cluster allowed: nothing is restricted.
    let u = uniform("H100-80GB");
    j.gpu_types = vec![model(&u, "H100-80GB")];
    assert!(job_demands(&u, &j, None).is_empty());
}

#[test]
fn several_gpus_several_nodes_and_mixed_nodes() {
    let c = cluster(MIXED);
    // 4 GPUs: one A100 node holds them, the A10 nodes (2 GPUs) do not.
    let four = job_demands(&c, &job("four", 4), None);
    assert_eq!(
        caps_of(&four),
        [Capability::MultiGpu, Capability::MixedNodes]
    );
    // 8 GPUs: more than any node.
    let eight = job_demands(&c, &job("eight", 8), None);
    assert_eq!(
        caps_of(&eight),
        [Capability::MultiGpu, Capability::MultiNode]
    );
    assert!(eight[1]
        .detail
        .contains("more than any node of its GPU types has (4)"));
    // On its types: 3 GPUs of A10 (2 per node) need two nodes.
    let mut a10 = job("a10", 3);
    a10.gpu_types = vec![model(&c, "A10")];
    let d = job_demands(&c, &a10, None);
    assert!(caps_of(&d).contains(&Capability::MultiNode), "{d:?}");
    // The cluster itself.
    let cd = cluster_demands(&c);
    assert_eq!(caps_of(&cd), [Capability::MixedNodes]);
    assert_eq!(
        cd[0].to_string(),
        "cluster mixed has several GPU models (A100-80GB, H100-80GB, V100-32GB, A10)"
    );
}

#[test]
fn mig_share_and_cpu_memory_requests() {
    let c = uniform("A100-80GB");
    let mut p = job("p", 1);
    p.mig = Some(MigRequest::Profile("3g.40gb".into()));
    assert_eq!(
        caps_of(&job_demands(&c, &p, None)),
        [Capability::MigProfile]
    );
    let mut a = job("a", 1);
    a.mig = Some(MigRequest::Any);
    assert_eq!(caps_of(&job_demands(&c, &a, None)), [Capability::MigAny]);
    let mut s = job("s", 1);
    s.gpu_share = Some(GpuShareRequest {
        sm_permille: 300,
        memory: None,
    });
    let d = job_demands(&c, &s, None);
    assert_eq!(caps_of(&d), [Capability::GpuShare]);
    assert_eq!(d[0].detail, "asks for 30.0% of one GPU (gpu_share 300)");
    let mut m = job("m", 1);
    m.cpu = Some(MilliCpu::from_cores(12));
    m.memory = Some(Bytes::from_gib(96));
    let d = job_demands(&c, &m, None);
    assert_eq!(caps_of(&d), [Capability::CpuMemory]);
    assert_eq!(d[0].detail, "asks for 12 CPUs and 96.0 GiB of memory");
}

#[test]
fn services_quotas_and_their_types() {
    let c = cluster(MIXED);
    let mut s = InferenceService::simple("bert", SimTime::ZERO, SimTime::from_secs(60), 5.0);
    assert_eq!(caps_of(&service_demands(&c, &s)), [Capability::Services]);
    s.instance.gpu = GpuDemand::Quota {
        sm_request: 300,
        sm_limit: 600,
    };
    s.gpu_types = vec![model(&c, "A10")];
    let d = service_demands(&c, &s);
    assert_eq!(
        caps_of(&d),
        [
            Capability::Services,
            Capability::ServiceQuotas,
            Capability::GpuTypes
        ]
    );
    assert_eq!(
        d[1].to_string(),
        "service bert asks for a GPU quota per instance (30.0% request, 60.0% limit)"
    );
}

#[test]
fn failures_and_clusters_without_mig() {
    let v = uniform("V100-32GB");
    let w = Workload::new(vec![job("a", 1)]);
    let opts = CheckOptions {
        lines: None,
        failures: true,
    };
    let d = demands(&v, &w, &opts);
    assert_eq!(caps_of(&d), [Capability::NonMigGpus, Capability::Failures]);
    assert_eq!(d[0].to_string(), "cluster u has no MIG-capable GPU");
    // `static` takes a GPU without MIG as one 7-slice place: it runs there.
    let s = check_support("static", &v, &w, &CheckOptions::default()).unwrap();
    assert!(s.is_empty(), "{s:?}");
    // On a mixed cluster, a job that may use only GPUs without MIG.
    let c = cluster(MIXED);
    let mut j = job("old", 1);
    j.gpu_types = vec![model(&c, "V100-32GB")];
    let d = job_demands(&c, &j, None);
    assert_eq!(caps_of(&d), [Capability::GpuTypes, Capability::NonMigGpus]);
}

#[test]
fn check_names_the_policy_element_and_who_honours_it() {
    let c = cluster(MIXED);
    let mut jobs: Vec<TrainingJob> = (0..6)
        .map(|i| {
            let mut j = job(&format!("j{i}"), 1);
            j.gpu_types = vec![model(&c, "H100-80GB")];
            j
        })
        .collect();
    jobs.push(job("plain", 1));
    let w = Workload::new(jobs);
    let lines: Vec<u64> = (2..=8).collect();
    let opts = CheckOptions {
        lines: Some(&lines),
        failures: false,
    };
    assert!(check_support("fifo", &c, &w, &opts).unwrap().is_empty());
    let missing = check_support("dilu", &c, &w, &opts).unwrap();
    let text = refusal("dilu", &missing, 3);
    assert!(text.starts_with("policy dilu does not honour "), "{text}");
    assert!(
        text.contains("job j0 (line 2) asks for gpuTypes [H100-80GB]; job j1 (line 3)"),
        "{text}"
    );
    assert!(
        text.contains("; and 3 more; honoured by every registered policy but: dilu, dilu-no-vertical, static-shares, dilu-exclusive"),
        "{text}"
    );
    let svc = InferenceService::simple("bert", SimTime::ZERO, SimTime::from_secs(60), 5.0);
    let w = Workload::with_services(Vec::new(), vec![svc]);
    let missing = check_support("fifo", &c, &w, &opts).unwrap();
    let text = refusal("fifo", &missing, 3);
    assert!(
        text.ends_with(
            "service bert is an inference service (0 s to 60 s); honoured by: serve-exclusive, \
             dilu, dilu-no-vertical, static-shares, dilu-exclusive, tessera, tessera-no-synergy, \
             tessera-no-crius, tessera-no-miso, tessera-no-dilu, tessera-no-hap, tessera-las"
        ),
        "{text}"
    );
    // Aliases and variants resolve to their entries; unknown names are errors.
    assert_eq!(policy_info("Synergy").unwrap().name, "fifo+tune");
    assert_eq!(policy_info("static:4-3").unwrap().name, "static");
    assert!(policy_info("nope").is_err());
}

#[test]
fn names_with_control_characters_are_escaped() {
    let c = uniform("A100-80GB");
    let mut j = job("a\u{1b}[31mred", 2);
    j.gpus = 2;
    let d = job_demands(&c, &j, None);
    let text = d[0].to_string();
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(text.starts_with("job \"a\\u{1b}[31mred\""), "{text}");
}

#[test]
fn relaxing_keeps_ids_and_says_how() {
    let c = cluster(MIXED);
    let mut typed = job("typed", 1);
    typed.gpu_types = vec![model(&c, "H100-80GB")];
    let mut share = job("share", 1);
    share.gpu_share = Some(GpuShareRequest {
        sm_permille: 500,
        memory: None,
    });
    let big = job("big", 8);
    let mut quota = InferenceService::simple("q", SimTime::ZERO, SimTime::from_secs(60), 5.0);
    quota.instance.gpu = GpuDemand::Quota {
        sm_request: 300,
        sm_limit: 300,
    };
    let w = Workload::with_services(vec![typed, share, big], vec![quota]);
    // nopart: no share, no services (it takes types and several GPUs, on several nodes).
    let r = relax("nopart", &c, &w, &CheckOptions::default()).unwrap();
    assert_eq!(r.workload.jobs()[0].gpu_types, w.jobs()[0].gpu_types);
    // The share stays as asked: nopart gives a whole GPU by itself.
    assert!(r.workload.jobs()[1].gpu_share.is_some());
    assert!(r.workload.services().is_empty());
    assert_eq!(r.workload.len(), 3);
    assert!(r.rejected.is_empty());
    let got: Vec<(&str, usize)> = r
        .ignored
        .iter()
        .map(|i| (i.capability.key(), i.count))
        .collect();
    assert_eq!(got, [("gpu-share", 1), ("services", 1)]);
    // dilu: no types, nodes alike, one node per job: types cleared, the 8-GPU job rejected.
    let r = relax("dilu", &c, &w, &CheckOptions::default()).unwrap();
    assert!(r.workload.jobs()[0].gpu_types.is_empty());
    assert_eq!(r.workload.len(), 3);
    assert_eq!(r.rejected.len(), 1);
    assert_eq!(r.rejected[0].0, JobId(2));
    assert!(
        r.rejected[0]
            .1
            .starts_with("dilu cannot run it: it asks for 8 GPUs"),
        "{:?}",
        r.rejected
    );
    let got: Vec<&str> = r.ignored.iter().map(|i| i.capability.key()).collect();
    assert!(
        got.contains(&"gpu-types") && got.contains(&"multi-node"),
        "{got:?}"
    );
    // dilu-exclusive keeps the service (and places it on whole GPUs by itself).
    let r = relax("dilu-exclusive", &c, &w, &CheckOptions::default()).unwrap();
    assert_eq!(r.workload.services().len(), 1);
    let quota = r
        .ignored
        .iter()
        .find(|i| i.capability == Capability::ServiceQuotas)
        .unwrap();
    assert_eq!(quota.how, "left to the policy: a whole GPU per instance");
    // A policy honouring everything asked gets the workload back unchanged.
    let plain = Workload::new(vec![job("a", 2)]);
    let r = relax("fifo", &c, &plain, &CheckOptions::default()).unwrap();
    assert_eq!(r.workload, plain);
    assert!(r.ignored.is_empty() && r.rejected.is_empty());
}

#[test]
fn every_registered_policy_declares_and_is_found() {
    for (_, p) in crate::policies() {
        assert_eq!(policy_info(p.name).unwrap().name, p.name);
    }
    // Every capability is honoured by some policy.
    for c in Capability::ALL {
        assert!(!honoured_by(c).is_empty(), "{c}");
    }
}
