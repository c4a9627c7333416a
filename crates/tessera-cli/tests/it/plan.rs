//! `tessera plan` and `tessera repro hap`: output contracts and bad input.

use super::{data, stderr, stdout, tessera};

#[test]
fn plan_json_has_the_plan_and_both_baselines() {
    let o = tessera(&[
        "plan",
        "--model",
        &data("plan_mlp.yaml"),
        "--cluster",
        &data("plan_cluster.yaml"),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let f = |k: &str| v[k].as_f64().unwrap();
    assert!(f("iteration_s") <= f("dp_proportional_s") * (1.0 + 1e-12));
    assert!(f("dp_proportional_s") <= f("dp_equal_s") * (1.0 + 1e-12));
    assert_eq!(v["ranks"].as_array().unwrap().len(), 4);
    let ratios: f64 = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ratio"].as_f64().unwrap())
        .sum();
    assert!((ratios - 1.0).abs() < 1e-9);
    for s in v["shards"].as_array().unwrap() {
        let total: u64 = s["per_rank"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .sum();
        assert_eq!(total, s["length"].as_u64().unwrap());
    }
    let w1 = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "w1")
        .unwrap();
    assert!(!w1["sharding"].as_array().unwrap().is_empty());
    assert!(v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["kind"] == "compute" && s["op"] == "fc2"));
}

#[test]
fn plan_json_is_deterministic() {
    let run = || {
        let o = tessera(&[
            "plan",
            "--model",
            "bert-moe",
            "--cluster",
            "builtin:hap-1",
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    assert_eq!(run(), run());
}

#[test]
fn plan_listing_shows_ranks_and_program() {
    let o = tessera(&["plan", "--model", "vgg19", "--cluster", "builtin:hap-1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for needle in [
        "DP equal split",
        "DP speed-proportional split",
        "states expanded",
        "per rank",
        "V100-16GB",
        "compute   conv1",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn plan_rejects_bad_input_with_context() {
    let o = tessera(&[
        "plan",
        "--model",
        "resnet9000",
        "--cluster",
        "builtin:hap-1",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("resnet9000") && e.contains("bert-moe"), "{e}");

    let o = tessera(&["plan", "--model", "vgg19", "--cluster", "builtin:nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("builtin:hap-1"));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(data("plan_mlp.yaml"))
        .unwrap()
        .replace("nh,hd->nd", "nh,hd->n");
    std::fs::write(&bad, text).unwrap();
    let o = tessera(&[
        "plan",
        "--model",
        bad.to_str().unwrap(),
        "--cluster",
        &data("plan_cluster.yaml"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("ops[2].dims") && e.contains("bad.yaml"), "{e}");
}

#[test]
fn repro_hap_writes_the_cases_contract() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hap");
    let o = tessera(&[
        "repro",
        "hap",
        "--models",
        "vgg19",
        "--ks",
        "1,2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("2.41x"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for c in cases {
        for k in [
            "model",
            "k",
            "dp_equal_s",
            "dp_proportional_s",
            "synthesized_s",
            "speedup",
            "synthesis_s",
        ] {
            assert!(!c[k].is_null(), "{k} missing in {c}");
        }
        let speedup = c["dp_equal_s"].as_f64().unwrap() / c["synthesized_s"].as_f64().unwrap();
        assert!((c["speedup"].as_f64().unwrap() - speedup).abs() < 1e-9);
    }
    assert_eq!(v["published"]["max_speedup"].as_f64(), Some(2.41));
}
