//! What `simulate --out` tells a newcomer about where jobs ran and how busy the GPUs were
//! (issue 41): node and GPU-type columns in `jobs.csv`, GPU-equivalents beside whole GPUs.

use super::{data, stderr, stdout, tessera};

fn csv_rows(path: &std::path::Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let header = r.headers().unwrap().iter().map(str::to_string).collect();
    let rows = r
        .records()
        .map(|rec| rec.unwrap().iter().map(str::to_string).collect())
        .collect();
    (header, rows)
}

fn col(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

/// On a mixed cluster every job that started names the nodes it ran on (the cluster's
/// `GROUP-i` names) and their GPU types, and the two agree with the cluster file; under the
/// exact engine and under Synergy's reference semantics alike (its engine left them empty).
#[test]
fn jobs_csv_says_where_each_job_ran() {
    for extra in [&[][..], &["--semantics", "synergy"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let (cluster, trace) = (data("mixed_cluster.yaml"), data("small.csv"));
        let mut args = vec![
            "simulate",
            "--cluster",
            &cluster,
            "--trace",
            &trace,
            "--policy",
            "fifo,las",
            "--no-plots",
        ];
        args.extend_from_slice(extra);
        args.extend(["--out", out.to_str().unwrap()]);
        let o = tessera(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        assert_nodes_match_types(&out);
    }
}

fn assert_nodes_match_types(out: &std::path::Path) {
    let (header, rows) = csv_rows(&out.join("jobs.csv"));
    let (nodes, types, start) = (
        col(&header, "nodes"),
        col(&header, "gpu_types"),
        col(&header, "start_s"),
    );
    // mixed_cluster.yaml: groups a100 (A100-80GB), h100, v100, a10.
    let gpu_of = |node: &str| match node.rsplit_once('-').map(|(g, _)| g) {
        Some("a100") => "A100-80GB",
        Some("h100") => "H100-80GB",
        Some("v100") => "V100-32GB",
        Some("a10") => "A10",
        _ => panic!("node {node} is not one of the cluster's"),
    };
    assert!(!rows.is_empty());
    for row in &rows {
        if row[start].is_empty() {
            assert!(row[nodes].is_empty(), "{row:?}");
            continue;
        }
        assert!(
            !row[nodes].is_empty(),
            "a started job names no node: {row:?}"
        );
        let mut want: Vec<&str> = Vec::new();
        for n in row[nodes].split(';') {
            let t = gpu_of(n);
            if !want.contains(&t) {
                want.push(t);
            }
        }
        assert_eq!(row[types], want.join(";"), "{row:?}");
    }
}

/// MPS shares GPUs without holding any whole: its utilisation is not 0 in GPU-equivalents,
/// and the whole-GPU figure beside it is; the time series' busy GPUs count the shares too.
#[test]
fn utilisation_counts_shares_beside_whole_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = tessera(&[
        "simulate",
        "--cluster",
        "builtin:miso-a100x8",
        "--trace",
        "builtin:miso-100",
        "--policy",
        "mps,nopart",
        "--no-plots",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    assert!(table.contains("whole-GPU util"), "{table}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let p = &summary["policies"];
    assert_eq!(p[0]["policy"], "mps");
    let (util, whole) = (
        p[0]["gpu_util"].as_f64().unwrap(),
        p[0]["whole_gpu_util"].as_f64().unwrap(),
    );
    assert!(util > 0.1 && whole == 0.0, "mps: {util} {whole}");
    // nopart holds whole GPUs only: both figures agree.
    let (util, whole) = (
        p[1]["gpu_util"].as_f64().unwrap(),
        p[1]["whole_gpu_util"].as_f64().unwrap(),
    );
    assert!(
        util > 0.1 && (util - whole).abs() < 1e-12,
        "nopart: {util} {whole}"
    );
    let (header, rows) = csv_rows(&out.join("timeseries.csv"));
    let (policy, gpus, equiv) = (
        col(&header, "policy"),
        col(&header, "gpus"),
        col(&header, "gpu_equiv"),
    );
    let mps: Vec<&Vec<String>> = rows.iter().filter(|r| r[policy] == "mps").collect();
    assert!(mps.iter().all(|r| r[gpus] == "0"));
    let peak = mps
        .iter()
        .map(|r| r[equiv].parse::<f64>().unwrap())
        .fold(0.0, f64::max);
    assert!(peak >= 1.0, "mps's busy GPU-equivalents peak at {peak}");
}
