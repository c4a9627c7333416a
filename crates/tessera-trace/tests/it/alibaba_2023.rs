//! Alibaba GPU 2023: the pod list as a trace and the node list as a cluster, on fixtures of
//! our own in the published schema (the trace itself is research-use only).

use tessera_model::{Bytes, Cluster, GpuShareRequest, MilliCpu, SimDuration, SimTime};
use tessera_trace::{
    looks_like_alibaba_2023_node_list, parse_trace, read_alibaba_2023_node_list, read_trace,
    ReadOptions, TraceFormat,
};

use crate::common::{assert_golden, canonical, catalog, data_path};

const HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

#[test]
fn pod_list_fixture() {
    let c = catalog();
    let t = read_trace(
        &data_path("alibaba_gpu_2023_pods_small.csv"),
        None,
        &c,
        &ReadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (t.format, t.detected, t.skipped, t.dropped),
        (TraceFormat::AlibabaGpu2023, true, 0, 2)
    );
    let jobs = t.workload.jobs();
    let names: Vec<&str> = jobs.iter().map(|j| &*j.name).collect();
    assert_eq!(names, ["ali-a", "ali-d", "ali-c", "ali-b", "ali-e"]);
    assert_eq!(t.lines, [2, 7, 4, 3, 8]);

    let a = &jobs[0];
    assert_eq!(
        (a.submit, a.gpus, a.duration, a.gpu_share),
        (SimTime::ZERO, 1, SimDuration::from_secs(4990), None)
    );
    assert_eq!(
        (a.cpu, a.memory, a.tenant.as_str(), a.priority),
        (Some(MilliCpu(8000)), Some(Bytes(16 << 30)), "LS", 0)
    );
    assert!(a.gpu_types.is_empty());

    let b = &jobs[3];
    assert_eq!(
        b.gpu_share,
        Some(GpuShareRequest {
            sm_permille: 250,
            memory: None
        })
    );
    assert_eq!(b.duration, SimDuration::from_secs(580));
    assert_eq!(b.gpu_types, [c.find("T4").unwrap()]);

    let cj = &jobs[2];
    assert_eq!((cj.gpus, cj.gpu_share), (4, None));
    assert_eq!(
        cj.gpu_types,
        [c.find("V100-16GB").unwrap(), c.find("V100-32GB").unwrap()]
    );
    assert_eq!(jobs[1].gpu_share.map(|s| s.sm_permille), Some(500));
    assert_eq!(jobs[4].tenant, "Guaranteed");

    assert_golden("alibaba_gpu_2023_small", &t.workload);
}

#[test]
fn fractional_requests_survive_the_canonical_format() {
    let c = catalog();
    let text = format!("{HEADER}p,1000,1024,1,125,,BE,Running,0,60,0\n");
    let t = parse_trace(&text, "p.csv", None, &c, &ReadOptions::default()).unwrap();
    let written = canonical(&t.workload);
    assert!(written.lines().next().unwrap().ends_with(",gpu_share,mig"));
    let back = parse_trace(&written, "w.csv", None, &c, &ReadOptions::default()).unwrap();
    assert_eq!(back.workload, t.workload);
    assert_eq!(back.workload.jobs()[0].gpu_share.unwrap().sm_permille, 125);
}

#[test]
fn canonical_gpu_share_is_checked() {
    let head = "job_id,submit_s,gpus,duration_s,gpu_share\n";
    for (row, want) in [
        ("a,0,2,60,500", "needs gpus 1"),
        ("a,0,1,60,1000", "out of range"),
        ("a,0,1,60,0", "out of range"),
        ("a,0,1,60,half", "not a number"),
    ] {
        let msg = parse_trace(
            &format!("{head}{row}\n"),
            "t.csv",
            None,
            &catalog(),
            &ReadOptions::default(),
        )
        .map(|t| format!("accepted: {:?}", t.workload.jobs()))
        .unwrap_or_else(|e| e.to_string());
        assert!(
            msg.starts_with("t.csv:2: field gpu_share") && msg.contains(want),
            "{row} -> {msg}"
        );
    }
}

fn error_of(row: &str) -> String {
    let text = format!("{HEADER}{row}\n");
    parse_trace(
        &text,
        "pods.csv",
        Some(TraceFormat::AlibabaGpu2023),
        &catalog(),
        &ReadOptions::default(),
    )
    .map(|t| format!("accepted: {:?}", t.workload.jobs()))
    .unwrap_or_else(|e| e.to_string())
}

#[test]
fn bad_pod_rows_name_line_and_field() {
    let cases = [
        (
            "p,abc,1024,1,1000,,LS,Running,0,60,0",
            "field cpu_milli",
            "not a number",
        ),
        (
            "p,1000,1024,x,1000,,LS,Running,0,60,0",
            "field num_gpu",
            "not a number",
        ),
        (
            "p,1000,1024,1,1500,,LS,Running,0,60,0",
            "field gpu_milli",
            "out of range",
        ),
        (
            "p,1000,1024,1,0,,LS,Running,0,60,0",
            "field gpu_milli",
            "positive",
        ),
        (
            "p,1000,1024,2,500,,LS,Running,0,60,0",
            "field gpu_milli",
            "num_gpu 1",
        ),
        (
            "p,1000,1024,1,1000,,LS,Running,-5,60,0",
            "field creation_time",
            "negative",
        ),
        (
            "p,1000,1024,1,1000,,LS,Running,0,60,-1",
            "field scheduled_time",
            "negative",
        ),
        (
            "p,1000,1024,1,1000,,LS,Running,0,50,60",
            "field deletion_time",
            "before it was scheduled",
        ),
        (
            "p,1000,1024,1,1000,,LS,Running,70,80,60",
            "field scheduled_time",
            "before it was created",
        ),
        (
            "p,1000,1024,1,1000,G2,LS,Running,0,60,0",
            "field gpu_spec",
            "G2",
        ),
        (
            "p,1000,1024,1,1000,T4|H800,LS,Running,0,60,0",
            "field gpu_spec",
            "H800",
        ),
        (
            "p,1000,1024,1,1000,,LS,Running,,60,0",
            "field creation_time",
            "empty",
        ),
        (
            "p,1000,1024,1,1000,,LS,Running,0,60,0,extra",
            "pods.csv:2",
            "fields",
        ),
    ];
    for (row, field, reason) in cases {
        let msg = error_of(row);
        assert!(
            msg.starts_with("pods.csv:2") && msg.contains(field) && msg.contains(reason),
            "{row} -> {msg}"
        );
    }
}

#[test]
fn node_list_groups_by_shape() {
    let text = std::fs::read_to_string(data_path("alibaba_gpu_2023_nodes_small.csv")).unwrap();
    assert!(looks_like_alibaba_2023_node_list(&text));
    let ali = read_alibaba_2023_node_list(&text, "nodes.csv").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((ali.nodes, ali.cpu_only, ali.undisclosed), (7, 1, 1));
    let groups: Vec<(&str, u32, &str, u32, MilliCpu, Bytes)> = ali
        .spec
        .spec
        .node_groups
        .iter()
        .map(|g| {
            (
                g.name.as_str(),
                g.count,
                g.gpu.as_str(),
                g.gpus_per_node,
                g.cpus,
                g.memory,
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            (
                "v100m16-8g-96000m-393216mi",
                2,
                "V100-16GB",
                8,
                MilliCpu(96_000),
                Bytes(384 << 30)
            ),
            (
                "p100-2g-64000m-262144mi",
                2,
                "P100",
                2,
                MilliCpu(64_000),
                Bytes(256 << 30)
            ),
            (
                "v100m32-8g-96000m-786432mi",
                1,
                "V100-32GB",
                8,
                MilliCpu(96_000),
                Bytes(768 << 30)
            ),
            (
                "t4-4g-64000m-262144mi",
                1,
                "T4",
                4,
                MilliCpu(64_000),
                Bytes(256 << 30)
            ),
            (
                "a10-2g-64000m-262144mi",
                1,
                "A10",
                2,
                MilliCpu(64_000),
                Bytes(256 << 30)
            ),
        ]
    );
    let cluster = Cluster::from_spec(&ali.spec, &catalog()).unwrap();
    assert_eq!(cluster.totals().0, 16 + 4 + 8 + 4 + 2);
}

#[test]
fn bad_node_rows_name_line_and_field() {
    let head = "sn,cpu_milli,memory_mib,gpu,model\n";
    let cases = [
        ("n,abc,1024,8,T4", "field cpu_milli"),
        ("n,1000,-1,8,T4", "field memory_mib"),
        ("n,1000,1024,x,T4", "field gpu"),
        ("n,1000,1024,8,H800", "field model"),
        ("n,0,1024,8,T4", "field cpu_milli"),
        ("n,1000,1024,8", "expected 5 fields"),
    ];
    for (row, want) in cases {
        let text = format!("{head}{row}\n");
        let msg = read_alibaba_2023_node_list(&text, "nodes.csv")
            .map(|c| format!("accepted: {c:?}"))
            .unwrap_or_else(|e| e.to_string());
        assert!(
            msg.starts_with("nodes.csv:2") && msg.contains(want),
            "{row} -> {msg}"
        );
    }
    assert!(read_alibaba_2023_node_list(&format!("{head}c,1000,1024,0,\n"), "n").is_err());
    assert!(!looks_like_alibaba_2023_node_list(
        "machine,gpu_type,cap_cpu,cap_mem,cap_gpu"
    ));
}
