//! Workload spec jobs carry every dimension the canonical CSV has (CPU, memory, GPU share,
//! MIG, iterations, batch, tenant, priority); bad values are errors naming line and field;
//! the spec writer keeps jobs and services (round trip), and agrees with the CSV on jobs.

use tessera_model::{Bytes, GpuShareRequest, MigRequest, MilliCpu};
use tessera_trace::{
    parse_workload_spec, parse_workload_spec_with_lines, write_tessera_csv, write_workload_spec,
    SpecFormat,
};

use crate::common::{catalog, data_path, parse};

fn fixture() -> String {
    std::fs::read_to_string(data_path("every_dimension.yaml")).unwrap()
}

#[test]
fn jobs_take_every_dimension_of_the_csv() {
    let (w, lines) =
        parse_workload_spec_with_lines(&fixture(), &catalog()).unwrap_or_else(|e| panic!("{e}"));
    let j = w.jobs();
    let names: Vec<&str> = j.iter().map(|j| &*j.name).collect();
    assert_eq!(
        names,
        ["notebook", "tuned", "slice"],
        "sorted by submit time"
    );
    assert_eq!(lines, [17, 6, 22], "each job's line in the file");
    let tuned = &j[1];
    assert_eq!(tuned.iterations, 5000);
    assert_eq!(tuned.batch_size, Some(256));
    assert_eq!(tuned.tenant, "team-a");
    assert_eq!(tuned.priority, 2);
    assert_eq!(tuned.cpu, Some(MilliCpu(16_000)));
    assert_eq!(tuned.memory, Some(Bytes::from_gib(64)));
    assert_eq!(tuned.gpu_types.len(), 2);
    let nb = &j[0];
    assert_eq!(nb.iterations, 600, "one per second by default, as the CSV");
    assert_eq!(nb.cpu, Some(MilliCpu(500)));
    assert_eq!(
        nb.gpu_share,
        Some(GpuShareRequest {
            sm_permille: 250,
            memory: Some(Bytes::from_gib(10))
        })
    );
    let slice = &j[2];
    assert_eq!(slice.priority, -1);
    assert_eq!(slice.mig, Some(MigRequest::Profile("3g.20gb".into())));
    assert_eq!(slice.cpu, Some(MilliCpu(2000)));
    assert_eq!(slice.memory, None);
    // A number is a quantity too (`cpu: 1` on a service).
    assert_eq!(w.services()[0].instance.cpu, MilliCpu(1000));
}

#[test]
fn the_spec_writer_round_trips_jobs_and_services() {
    let w = parse_workload_spec(&fixture(), &catalog()).unwrap();
    for format in [SpecFormat::Yaml, SpecFormat::Json] {
        let text = write_workload_spec(&w, &catalog(), format).unwrap();
        let back = parse_workload_spec(&text, &catalog()).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, w, "{format:?}:\n{text}");
    }
    // The jobs agree with the canonical CSV's reading of them (which has no column for a
    // share's device memory).
    let mut csv = Vec::new();
    write_tessera_csv(&mut csv, &w, &catalog()).unwrap();
    let from_csv = parse(std::str::from_utf8(&csv).unwrap(), None).unwrap();
    let mut jobs = w.jobs().to_vec();
    for j in &mut jobs {
        if let Some(s) = &mut j.gpu_share {
            s.memory = None;
        }
    }
    assert_eq!(from_csv.workload.jobs(), jobs);
}

#[test]
fn bad_job_values_name_the_line_and_field() {
    let base = fixture();
    for (from, to, field, line) in [
        ("cpu: 16,", "cpu: 16x,", "spec.jobs[0].resources.cpu", 16),
        (
            "memory: 64Gi",
            "memory: lots",
            "spec.jobs[0].resources.memory",
            16,
        ),
        (
            "iterations: 5000",
            "iterations: 0",
            "spec.jobs[0].iterations",
            10,
        ),
        (
            "batchSize: 256",
            "batchSize: 0",
            "spec.jobs[0].batchSize",
            12,
        ),
        (
            "smRequest: 0.25",
            "smRequest: 1.5",
            "spec.jobs[1].resources.smRequest",
            21,
        ),
        ("gpus: 4", "gpus: 0", "spec.jobs[0].gpus", 8),
        ("gpus: 4", "gpus: 2000000", "spec.jobs[0].gpus", 8),
    ] {
        let bad = base.replacen(from, to, 1);
        assert_ne!(bad, base, "{from}");
        let e = parse_workload_spec(&bad, &catalog())
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{from} -> {to}: {e}");
        assert!(e.contains(&format!("line {line}")), "{from} -> {to}: {e}");
    }
    // A share needs one GPU and no MIG instance; gpuMemory needs a share.
    let two = base.replacen(
        "      gpus: 1\n      durationSeconds: 600\n      model: bert",
        "      gpus: 2\n      durationSeconds: 600\n      model: bert",
        1,
    );
    let e = parse_workload_spec(&two, &catalog())
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs gpus 1"), "{e}");
    let both = base.replacen("cpu: \"2\"", "cpu: \"2\"\n        smRequest: 0.5", 1);
    let e = parse_workload_spec(&both, &catalog())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not both"), "{e}");
    let lone = base.replacen("smRequest: 0.25, ", "", 1);
    let e = parse_workload_spec(&lone, &catalog())
        .unwrap_err()
        .to_string();
    assert!(e.contains("gpuMemory goes with smRequest"), "{e}");
    let unknown = base.replacen("priority: 2", "priority: 2\n      gpuShare: 250", 1);
    let e = parse_workload_spec(&unknown, &catalog())
        .unwrap_err()
        .to_string();
    assert!(e.contains("gpuShare"), "{e}");
}
