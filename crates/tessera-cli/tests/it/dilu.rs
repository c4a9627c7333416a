//! `tessera repro dilu` (packing) and `tessera bench dilu`: output contracts and bad input.

use super::{stderr, stdout, tessera};

#[test]
fn repro_dilu_writes_the_packing_contract() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dilu");
    let o = tessera(&[
        "repro",
        "dilu",
        "--sizes",
        "100,400",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("instances-400") && text.contains("386"),
        "{text}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        v["published"]["peak_active_gpus_400"]["dilu"].as_u64(),
        Some(263)
    );
    let workloads = v["workloads"].as_array().unwrap();
    assert_eq!(workloads.len(), 2);
    for w in workloads {
        let policies = w["policies"].as_array().unwrap();
        assert_eq!(policies.len(), 4);
        for p in policies {
            for k in [
                "peak_active_gpus",
                "mean_active_gpus",
                "mean_sm_frag",
                "mean_mem_frag",
            ] {
                assert!(p[k].is_number(), "{k} missing in {p}");
            }
        }
        let peak = |name: &str| {
            policies
                .iter()
                .find(|p| p["policy"] == name)
                .and_then(|p| p["peak_active_gpus"].as_u64())
                .unwrap()
        };
        assert!(peak("dilu") < peak("exclusive") && peak("dilu") < peak("infless-l"));
    }
    // The profiling picks ride along.
    let picks = v["hgs_picks"].as_array().unwrap();
    assert!(picks
        .iter()
        .any(|p| p["model"] == "resnet152" && p["share_pct"] == 30 && p["batch"] == 16));
    assert!(out.join("active_gpus_400.svg").exists());
}

#[test]
fn repro_dilu_reads_the_artifact_format_and_refuses_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("instances.txt");
    std::fs::write(
        &good,
        "{'Time': '2024-06-19 15:46:09', 'Action': 'start', 'Instance': {'service_name': 't', 'type': 'training', 'gpu_num': 2, 'sm_requests': 0.5, 'sm_limits': 0.8, 'memory': [30, 30]}}\n\
         {'Time': '2024-06-19 15:46:10', 'Action': 'start', 'Instance': {'service_name': 'i', 'type': 'inference', 'gpu_num': 1, 'sm_requests': 0.3, 'sm_limits': 0.5, 'memory': [9]}}\n\
         {'Time': '2024-06-19 15:46:11', 'Action': 'start', 'Instance': {'service_name': 'big', 'type': 'inference', 'gpu_num': 1, 'sm_requests': 0.3, 'sm_limits': 0.5, 'memory': [90]}}\n",
    )
    .unwrap();
    let o = tessera(&["repro", "dilu", "--trace", good.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let policies = v["workloads"][0]["policies"].as_array().unwrap();
    let dilu = policies.iter().find(|p| p["policy"] == "dilu").unwrap();
    // The inference instance joins the training job's GPU; the 90 GB one is refused.
    assert_eq!(dilu["peak_active_gpus"].as_u64(), Some(2));
    assert_eq!(dilu["refused"].as_array().unwrap().len(), 1);

    let bad = dir.path().join("bad.txt");
    std::fs::write(
        &bad,
        "{'Time': '2024-06-19 15:46:09', 'Action': 'start', 'Instance': {'service_name': 'x', 'type': 'inference', 'gpu_num': 1, 'sm_requests': -0.3, 'sm_limits': 0.5, 'memory': [9]}}\n",
    )
    .unwrap();
    let o = tessera(&["repro", "dilu", "--trace", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("sm_request"), "{}", stderr(&o));
}

#[test]
fn simulate_replays_a_packing_workload_through_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("instances.txt");
    std::fs::write(
        &trace,
        "{'Time': '2024-06-19 15:46:09', 'Action': 'start', 'Instance': {'service_name': 'a', 'type': 'inference', 'gpu_num': 1, 'sm_requests': 0.3, 'sm_limits': 0.5, 'memory': [9]}}\n\
         {'Time': '2024-06-19 15:46:10', 'Action': 'start', 'Instance': {'service_name': 'b', 'type': 'inference', 'gpu_num': 1, 'sm_requests': 0.3, 'sm_limits': 0.5, 'memory': [9]}}\n\
         {'Time': '2024-06-19 15:46:20', 'Action': 'delete', 'Instance': {'service_name': 'a', 'type': 'inference', 'gpu_num': 1, 'sm_requests': 0.3, 'sm_limits': 0.5, 'memory': [9]}}\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = tessera(&[
        "simulate",
        "--trace-format",
        "dilu-instances",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "exclusive",
        "--policy",
        "dilu",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 2);
    assert_eq!(policies[0]["policy"], "exclusive");
    assert_eq!(policies[0]["peak_active_gpus"].as_u64(), Some(2));
    assert_eq!(policies[1]["peak_active_gpus"].as_u64(), Some(1));
    for p in policies {
        for k in ["mean_active_gpus", "mean_sm_frag", "mean_mem_frag"] {
            assert!(p[k].is_number(), "{k} missing in {p}");
        }
    }
    // Dilu, one GPU: 0.3 booked for 1 s, then 0.6 for 10 s (time-weighted).
    let want = (0.7 + 10.0 * 0.4) / 11.0;
    assert!((policies[1]["mean_sm_frag"].as_f64().unwrap() - want).abs() < 1e-9);
    let o = tessera(&[
        "simulate",
        "--trace-format",
        "dilu-instances",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "fifo",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("does not replay packing"),
        "{}",
        stderr(&o)
    );
}

/// Issue 13 item 8 for serving: part (b)'s built-ins under the four serving policies print
/// the serving table and write the per-policy and per-service contract; each Dilu policy
/// names its serving setup.
#[test]
fn simulate_runs_dilu_serving_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let policies = [
        "dilu-exclusive",
        "static-shares",
        "dilu-no-vertical",
        "dilu",
    ];
    // Part (b) measures the services' lifetime (1,007 s); its training jobs never end
    // within it, and a run no longer ends with the services by itself (issue 36).
    let mut argv = vec![
        "simulate",
        "--cluster",
        "builtin:dilu-4x4",
        "--trace",
        "builtin:dilu-serving",
        "--horizon",
        "1007",
        "--no-plots",
        // The baselines give quota jobs and instances whole GPUs (or fixed shares).
        "--ignore-unsupported",
        "--out",
        out.to_str().unwrap(),
    ];
    for p in policies {
        argv.extend(["--policy", p]);
    }
    let o = tessera(&argv);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("SLO viol.")
            && text.contains("llama2-poisson")
            && text.contains("vertical scaling"),
        "{text}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let entries = v["policies"].as_array().unwrap();
    assert_eq!(entries.len(), 4);
    for (p, e) in policies.iter().zip(entries) {
        assert_eq!(e["policy"], *p);
        assert!(e["setup"].is_string(), "{e}");
        for k in [
            "peak_active_gpus",
            "mean_active_gpus",
            "mean_sm_frag",
            "mean_mem_frag",
        ] {
            assert!(e[k].is_number(), "{p}: {k} missing");
        }
        let services = e["services"].as_array().unwrap();
        assert_eq!(services.len(), 3, "{p}");
        for s in services {
            for k in ["slo_violation_rate", "served_rps", "p99_latency_s"] {
                assert!(s[k].is_number(), "{p}: {k} missing in {s}");
            }
            assert!(s["served"].as_u64().unwrap() > 0, "{p}: {s}");
        }
        // At most the 16 GPUs of the cluster.
        assert!(e["peak_active_gpus"].as_u64().unwrap() <= 16, "{p}");
    }
    // Exclusive holds a whole GPU per instance and per training GPU: never fragmented.
    assert_eq!(entries[0]["mean_sm_frag"].as_f64(), Some(0.0));
    assert!(out.join("instances.csv").exists());
}

/// Bad combinations fail with the reason: a serving setup under another engine, a serving
/// policy name that does not exist.
#[test]
fn simulate_dilu_rejects_bad_combinations_clearly() {
    let o = tessera(&[
        "simulate",
        "--cluster",
        "builtin:dilu-4x4",
        "--trace",
        "builtin:dilu-serving",
        "--policy",
        "dilu",
        "--semantics",
        "synergy",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("drop --semantics"), "{}", stderr(&o));
    let o = tessera(&[
        "simulate",
        "--cluster",
        "builtin:dilu-4x4",
        "--trace",
        "builtin:dilu-serving",
        "--policy",
        "dilu-vertical",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("dilu-vertical"), "{}", stderr(&o));
}

/// Issue 13 item 8 on a shipped packing workload: `simulate --trace-format dilu-instances`
/// gives the packing replay's peaks (N=400: exclusive 386, dilu 263, as `repro dilu`).
#[test]
fn simulate_replays_the_shipped_instances_400() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tessera-mechanisms/data/dilu/instances-400.csv");
    let o = tessera(&[
        "simulate",
        "--trace-format",
        "dilu-instances",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "exclusive",
        "--policy",
        "dilu",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let peaks: Vec<(String, u64)> = v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["policy"].as_str().unwrap().to_string(),
                p["peak_active_gpus"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        peaks,
        [("exclusive".to_string(), 386), ("dilu".to_string(), 263)]
    );
}
