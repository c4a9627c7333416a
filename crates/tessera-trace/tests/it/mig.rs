//! MIG requests in job specs: the canonical CSV's `mig` column and `resources.limits` in
//! workload specs (golden fixtures, round trip, bad input naming line and field).

use tessera_model::MigRequest;
use tessera_trace::{parse_workload_spec, read_trace, ReadOptions};

use crate::common::{assert_golden, catalog, data_path, parse};

fn fixed(p: &str) -> Option<MigRequest> {
    Some(MigRequest::Profile(p.into()))
}

#[test]
fn canonical_mig_column_matches_golden_and_round_trips() {
    let c = catalog();
    let t = read_trace(
        &data_path("mig_small.csv"),
        None,
        &c,
        &ReadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let migs: Vec<Option<MigRequest>> = t.workload.jobs().iter().map(|j| j.mig.clone()).collect();
    assert_eq!(
        migs,
        [
            None,
            fixed("3g.20gb"),
            fixed("1g.5gb"),
            Some(MigRequest::Any)
        ]
    );
    assert_golden("mig_small", &t.workload);
    let back = parse(&crate::common::canonical(&t.workload), None).unwrap();
    assert_eq!(back.workload, t.workload);
}

#[test]
fn canonical_mig_errors_name_line_and_field() {
    let head = "job_id,submit_s,gpus,duration_s,gpu_types,gpu_share,mig\n";
    for (row, want) in [
        ("a,0,1,60,,,5g.30gb", "unknown MIG profile 5g.30gb"),
        ("a,0,1,60,,,nvidia.com/gpu", "is not a MIG request"),
        ("a,0,2,60,,,3g.20gb", "needs gpus 1, this job asks for 2"),
        ("a,0,1,60,,500,any", "either gpu_share or mig"),
        ("a,0,1,60,V100-32GB,,3g.20gb", "V100-32GB has no MIG"),
        ("a,0,1,60,T4,,any", "T4 has no MIG"),
        (
            "a,0,1,60,A100-80GB,,3g.20gb",
            "A100-80GB has no MIG profile 3g.20gb",
        ),
    ] {
        let msg = parse(&format!("{head}{row}\n"), None)
            .map(|t| format!("accepted: {:?}", t.workload.jobs()))
            .unwrap_or_else(|e| e.to_string());
        assert!(
            msg.starts_with("t.csv:2: field mig") && msg.contains(want),
            "{row} -> {msg}"
        );
    }
}

#[test]
fn workload_spec_accepts_kubernetes_mig_limits() {
    let text = std::fs::read_to_string(data_path("mig_workload.yaml")).unwrap();
    let w = parse_workload_spec(&text, &catalog()).unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<(&str, Option<MigRequest>, usize)> = w
        .jobs()
        .iter()
        .map(|j| (&*j.name, j.mig.clone(), j.gpu_types.len()))
        .collect();
    assert_eq!(
        got,
        [
            ("fixed", fixed("3g.20gb"), 1),
            ("chooser", Some(MigRequest::Any), 0),
            ("whole", None, 0),
        ]
    );
}

#[test]
fn workload_spec_mig_errors_name_line_and_field() {
    let spec = |job: &str| {
        format!("apiVersion: tessera/v1\nkind: Workload\nspec:\n  jobs:\n    - name: a\n      durationSeconds: 60\n{job}")
    };
    for (job, field, want) in [
        (
            "      gpus: 1\n      resources:\n        limits: {nvidia.com/mig-9g.90gb: 1}\n",
            "spec.jobs[0].resources.limits.nvidia.com/mig-9g.90gb",
            "unknown MIG profile 9g.90gb",
        ),
        (
            "      gpus: 1\n      resources:\n        limits: {nvidia.com/mig-3g.20gb: 2}\n",
            "spec.jobs[0].resources.limits.nvidia.com/mig-3g.20gb",
            "the count must be 1, got 2",
        ),
        (
            "      gpus: 1\n      resources:\n        limits: {nvidia.com/mig-3g.20gb: 0}\n",
            "spec.jobs[0].resources.limits.nvidia.com/mig-3g.20gb",
            "the count must be 1, got 0",
        ),
        (
            "      gpus: 2\n      resources:\n        limits: {nvidia.com/mig-any: 1}\n",
            "spec.jobs[0].gpus",
            "needs gpus 1, got 2",
        ),
        (
            "      gpus: 1\n      gpuTypes: [V100-32GB]\n      resources:\n        limits: {nvidia.com/mig-3g.20gb: 1}\n",
            "spec.jobs[0].resources.limits.nvidia.com/mig-3g.20gb",
            "V100-32GB has no MIG",
        ),
        (
            "      gpus: 1\n      resources:\n        limits: {nvidia.com/gpu: 1}\n",
            "spec.jobs[0].resources.limits.nvidia.com/gpu",
            "unknown resource",
        ),
        (
            "      gpus: 1\n      resources:\n        limits: {nvidia.com/mig-any: 1, nvidia.com/mig-1g.5gb: 1}\n",
            "spec.jobs[0].resources.limits.",
            "one MIG request per job",
        ),
    ] {
        let msg = parse_workload_spec(&spec(job), &catalog())
            .map(|w| format!("accepted: {:?}", w.jobs()))
            .unwrap_or_else(|e| e.to_string());
        assert!(
            msg.contains(field) && msg.contains(want) && msg.contains("line "),
            "{job} -> {msg}"
        );
    }
}
