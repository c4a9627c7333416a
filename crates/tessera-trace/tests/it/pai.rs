//! The Alibaba PAI 2020 machine spec as a cluster: grouping, type mapping, what is left out,
//! and bad rows located by line and field.

use tessera_model::{Bytes, Cluster, MilliCpu};
use tessera_trace::{looks_like_pai_machine_spec, read_pai_machine_spec};

use crate::common::{catalog, data_path};

#[test]
fn machines_group_by_shape_in_order_of_appearance() {
    let text = std::fs::read_to_string(data_path("pai_machine_spec_small.csv")).unwrap();
    assert!(looks_like_pai_machine_spec(&text));
    let pai = read_pai_machine_spec(&text, "pai.csv").unwrap();
    assert_eq!((pai.machines, pai.cpu_only, pai.misc), (8, 1, 1));
    let groups: Vec<(&str, u32, &str, u32, MilliCpu, Bytes)> = pai
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
    let gb = |n: u64| Bytes(n * 1_000_000_000);
    let cores = MilliCpu::from_cores;
    assert_eq!(
        groups,
        [
            (
                "v100m32-8g-96c-384gb",
                2,
                "V100-32GB",
                8,
                cores(96),
                gb(384)
            ),
            ("p100-2g-64c-512gb", 3, "P100", 2, cores(64), gb(512)),
            ("t4-2g-96c-512gb", 1, "T4", 2, cores(96), gb(512)),
            ("v100-8g-96c-512gb", 1, "V100-16GB", 8, cores(96), gb(512)),
            ("v100-8g-96c-384gb", 1, "V100-16GB", 8, cores(96), gb(384)),
        ]
    );
    let cluster = Cluster::from_spec(&pai.spec, &catalog()).unwrap();
    assert_eq!(cluster.totals().0, 2 * 8 + 3 * 2 + 2 + 8 + 8);
    // A header row is accepted too.
    let with_header = format!("machine,gpu_type,cap_cpu,cap_mem,cap_gpu\n{text}");
    assert!(looks_like_pai_machine_spec(&with_header));
    assert_eq!(read_pai_machine_spec(&with_header, "p").unwrap(), pai);
    assert!(!looks_like_pai_machine_spec("apiVersion: tessera/v1\n"));
}

#[test]
fn bad_machine_rows_name_line_and_field() {
    let good = "m1,V100,96,512,8\n";
    for (row, field) in [
        ("m2,V100,-1,512,8", Some("cap_cpu")),
        ("m2,V100,0,512,8", Some("cap_cpu")),
        ("m2,V100,96,lots,8", Some("cap_mem")),
        ("m2,V100,96,0,8", Some("cap_mem")),
        ("m2,V100,96,512,65", Some("cap_gpu")),
        ("m2,V100,96,512,1.5", Some("cap_gpu")),
        ("m2,A900,96,512,8", Some("gpu_type")),
        (",V100,96,512,8", Some("machine")),
        ("m2,V100,96,512", None),
        ("m2,V100,96,512,8,9", None),
    ] {
        let err = read_pai_machine_spec(&format!("{good}{row}\n"), "pai.csv").unwrap_err();
        assert_eq!(
            (err.line, err.field.as_deref()),
            (Some(2), field),
            "{row}: {err}"
        );
        assert!(err.to_string().starts_with("pai.csv:2: "), "{err}");
    }
    let err = read_pai_machine_spec("m1,CPU,96,512,0\nm2,MISC,96,512,8\n", "p").unwrap_err();
    assert!(err.to_string().contains("no GPU machine"), "{err}");
    let binary = read_pai_machine_spec("m1,\u{1b}[2J,96,512,8\n", "p").unwrap_err();
    assert!(!binary.to_string().contains('\u{1b}'), "{binary}");
}
