//! End-to-end tests of the `tessera` binary: output contracts and bad-input handling.

mod plan;
mod realmode;
mod sweep;

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

/// Runs `simulate --json` on the one-server Synergy fixture; returns the summary document.
fn synergy_summary(extra: &[&str]) -> serde_json::Value {
    let (cluster, trace) = (data("synergy_server.yaml"), data("synergy_mix.csv"));
    let mut args = vec![
        "simulate",
        "--cluster",
        &cluster,
        "--trace",
        &trace,
        "--policy",
        "fifo+proportional",
        "--policy",
        "fifo+tune",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = tessera(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

fn avg_jcts(doc: &serde_json::Value) -> Vec<f64> {
    doc["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["avg_jct_s"].as_f64().unwrap())
        .collect()
}

#[test]
fn simulate_runs_synergy_policies_on_sensitivity_tables() {
    // Image/speech jobs beside language jobs on one 8-GPU, 24-CPU server: TUNE moves CPU
    // from the language models (which need 1 core) to the image models.
    let doc = synergy_summary(&[]);
    assert_eq!(doc["engine"]["perf"], "synergy");
    assert_eq!(doc["engine"]["semantics"], "exact");
    assert_eq!(doc["engine"]["profile_cost_s"], 60.0);
    let [prop, tune] = avg_jcts(&doc)[..] else {
        panic!("{doc}")
    };
    assert!(tune < 0.9 * prop, "tune {tune} vs proportional {prop}");
    for p in doc["policies"].as_array().unwrap() {
        assert_eq!(p["finished"], 9);
        // 60 s of one GPU per job.
        assert_eq!(p["profiling_gpu_secs"], 540.0);
    }

    // With the trace's throughput CPU does not matter: TUNE is proportional, no profiling.
    let flat = synergy_summary(&["--perf", "trace"]);
    assert_eq!(flat["engine"], serde_json::Value::Null);
    let [prop_t, tune_t] = avg_jcts(&flat)[..] else {
        panic!("{flat}")
    };
    assert_eq!(prop_t, tune_t);

    // The reference's rounds: completions at 300 s boundaries, JCTs whole rounds.
    let rounds = synergy_summary(&["--semantics", "synergy"]);
    assert_eq!(rounds["engine"]["semantics"], "synergy");
    assert_eq!(rounds["engine"].get("profile_cost_s"), None);
    let [prop_r, tune_r] = avg_jcts(&rounds)[..] else {
        panic!("{rounds}")
    };
    assert!(
        tune_r < 0.9 * prop_r,
        "tune {tune_r} vs proportional {prop_r}"
    );
    for p in rounds["policies"].as_array().unwrap() {
        let makespan = p["makespan_s"].as_f64().unwrap();
        assert_eq!(makespan % 300.0, 0.0, "{p}");
    }

    // Profiling error is seeded: same seed, same figures; bad values are refused.
    let noisy = synergy_summary(&["--profile-error", "0.2", "--seed", "4"]);
    assert_eq!(
        avg_jcts(&noisy),
        avg_jcts(&synergy_summary(&["--profile-error", "0.2", "--seed", "4"]))
    );
    for (bad, names) in [
        ("--profile-error=1.5", "--profile-error"),
        ("--profile-cost=-1", "--profile-cost"),
        ("--profile-cost=inf", "--profile-cost"),
        ("--arrivals=poisson:0", "--arrivals"),
        ("--semantics=quantum", "--semantics"),
    ] {
        let o = tessera(&["simulate", bad]);
        assert!(!o.status.success(), "{bad}");
        assert!(stderr(&o).contains(names), "{bad}: {}", stderr(&o));
    }
}

#[test]
fn default_simulate_summary_has_no_synergy_fields() {
    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("small.csv"),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    for key in ["engine", "arrivals", "trace_dropped", "trace_skipped"] {
        assert!(doc.get(key).is_none(), "{key} in {doc}");
    }
    assert!(doc["policies"][0].get("policy_stats").is_none());
}

#[test]
fn philly_json_with_poisson_arrivals() {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tessera-trace/tests/data/philly_small.json")
        .display()
        .to_string();
    let o = tessera(&[
        "simulate",
        "--trace",
        &trace,
        "--policy",
        "fifo",
        "--arrivals",
        "poisson:2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("dropped 4 jobs"), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["trace_format"], "philly-json");
    assert_eq!(doc["trace_dropped"], 4);
    assert_eq!(doc["arrivals"], "poisson:2");
    assert_eq!(doc["policies"][0]["finished"], 3);

    // trace convert re-draws the same arrivals for the same seed.
    let convert = |seed: &str| {
        let o = tessera(&[
            "trace",
            "convert",
            &trace,
            "--arrivals",
            "poisson:2",
            "--seed",
            seed,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    assert_eq!(convert("5"), convert("5"));
    assert_ne!(convert("5"), convert("6"));
    assert_eq!(convert("5").lines().count(), 4);
}

#[test]
fn a_user_gpu_catalog_replaces_the_builtin_one() {
    let with = tessera(&[
        "simulate",
        "--gpu-catalog",
        &data("catalog_x100.yaml"),
        "--cluster",
        &data("x100_cluster.yaml"),
        "--trace",
        &data("small.csv"),
        "--policy",
        "fifo",
        "--json",
    ]);
    assert!(with.status.success(), "{}", stderr(&with));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&with)).unwrap();
    assert_eq!(doc["policies"][0]["finished"], 3);
    // Without it, X100 is unknown.
    let without = tessera(&[
        "simulate",
        "--cluster",
        &data("x100_cluster.yaml"),
        "--trace",
        &data("small.csv"),
    ]);
    assert_eq!(without.status.code(), Some(1));
    assert!(stderr(&without).contains("X100"), "{}", stderr(&without));
    // A broken catalog names its file.
    let bad = tessera(&[
        "simulate",
        "--gpu-catalog",
        &data("small.csv"),
        "--trace",
        &data("small.csv"),
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("small.csv"), "{}", stderr(&bad));
}
