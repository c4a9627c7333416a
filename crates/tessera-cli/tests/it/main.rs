//! End-to-end tests of the `tessera` binary: output contracts and bad-input handling.

mod realmode;

use std::path::PathBuf;
use std::process::{Command, Output};

fn data(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
        .display()
        .to_string()
}

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("run tessera")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn simulate_writes_the_summary_contract() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("small.csv"),
        "--policy",
        "fifo",
        "--policy",
        "srtf",
        "--no-restart-cost",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let policies = summary["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 2);
    for key in [
        "policy",
        "jobs",
        "finished",
        "avg_jct_s",
        "p50_jct_s",
        "p99_jct_s",
        "makespan_s",
        "avg_queue_s",
        "gpu_util",
        "wall_s",
    ] {
        assert!(
            policies.iter().all(|p| p.get(key).is_some()),
            "summary.json lacks {key}"
        );
    }
    // FIFO backfills c beside a: JCTs a 100, b 150, c 30 (see the sim scenarios).
    assert_eq!(policies[0]["policy"], "fifo");
    assert_eq!(policies[0]["finished"], 3);
    let avg = policies[0]["avg_jct_s"].as_f64().unwrap();
    assert!((avg - (100.0 + 150.0 + 30.0) / 3.0).abs() < 1e-9, "{avg}");
    let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    assert_eq!(jobs.lines().count(), 1 + 2 * 3, "{jobs}");
    assert!(jobs.starts_with("policy,job_id,name,gpus,submit_s,start_s,finish_s,jct_s"));
    assert!(out.join("timeseries.csv").exists());
    let table = stdout(&o);
    assert!(
        table.contains("fifo") && table.contains("srtf") && table.contains("avg JCT"),
        "{table}"
    );
}

#[test]
fn malformed_row_names_file_line_and_field() {
    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("bad_row.csv"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("bad_row.csv:3") && err.contains("gpus"),
        "{err}"
    );
    assert_eq!(
        err.trim()
            .lines()
            .filter(|l| l.starts_with("error:"))
            .count(),
        1,
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn skip_invalid_counts_bad_rows() {
    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("bad_row.csv"),
        "--skip-invalid",
        "--policy",
        "fifo",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("skipped 1"), "{}", stderr(&o));
}

#[test]
fn job_larger_than_the_cluster_is_an_error_or_a_rejection() {
    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("too_big.csv"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("too_big.csv:3") && err.contains("field gpus") && err.contains("64 GPUs"),
        "{err}"
    );

    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("too_big.csv"),
        "--reject-unfit",
        "--json",
        "--policy",
        "fifo",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["policies"][0]["rejected"], 1);
    assert_eq!(doc["policies"][0]["finished"], 1);
}

#[test]
fn unknown_policy_gpu_model_and_format_are_clear_errors() {
    let o = tessera(&[
        "simulate",
        "--trace",
        &data("small.csv"),
        "--policy",
        "lottery",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown policy \"lottery\""),
        "{}",
        stderr(&o)
    );

    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("bad_gpu.yaml"),
        "--trace",
        &data("small.csv"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("bad_gpu.yaml: line 7: field spec.nodeGroups[0].gpu") && err.contains("V200"),
        "{err}"
    );

    let o = tessera(&[
        "simulate",
        "--trace",
        &data("small.csv"),
        "--trace-format",
        "yaml",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown trace format"),
        "{}",
        stderr(&o)
    );

    let o = tessera(&["simulate", "--trace", "/nonexistent/trace.csv"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/trace.csv"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn trace_inspect_reports_counts_and_histogram() {
    let o = tessera(&["trace", "inspect", &data("small.csv")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("tessera") && text.contains('3'), "{text}");
}

#[test]
fn same_seed_same_output() {
    let run = || {
        let o = tessera(&[
            "simulate",
            "--trace",
            "builtin:tiresias-60",
            "--cluster",
            "builtin:tiresias-n32g4",
            "--json",
            "--seed",
            "7",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let mut doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        for p in doc["policies"].as_array_mut().unwrap() {
            p["wall_s"] = serde_json::Value::Null;
        }
        doc
    };
    assert_eq!(run(), run());
}
