//! `tessera simulate` with failure injection (issue 9): the options, the printed table, the
//! summary.json fields, and bad input.

use crate::{data, stderr, stdout, tessera};

/// FIFO on one 4-GPU node (small.csv: a 2 GPUs 100 s, b 4 GPUs 50 s, c 2 GPUs 30 s at 10 s):
/// GPU 0 fails at 50 s for 20 s. a (GPUs 0-1) keeps its 30 s checkpoint, loses 20 s on 2 GPUs
/// and restarts at once on GPUs 1-2 (70 s left: 120 s); b needs all four: 120 + 50 = 170 s.
#[test]
fn simulate_with_a_failures_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.csv");
    std::fs::write(&file, "time,node,gpu,event,duration\n50,box-0,0,down,20\n").unwrap();
    let args = [
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("small.csv"),
        "--policy",
        "fifo",
        "--no-restart-cost",
        "--failures",
        file.to_str().unwrap(),
        "--checkpoint-interval",
        "30s",
    ];
    let o = tessera(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("GPU-h lost") && text.contains("restarts/job"),
        "{text}"
    );
    let out = tempfile::tempdir().unwrap();
    let o = tessera(
        &[
            &args[..],
            &["--out", out.path().to_str().unwrap(), "--no-plots"],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let jobs = std::fs::read_to_string(out.path().join("jobs.csv")).unwrap();
    let mut lines = jobs.lines();
    assert!(
        lines.next().unwrap().ends_with(",restarts,lost_gpu_secs"),
        "{jobs}"
    );
    // Job a (the first) restarted once and lost 20 s on 2 GPUs.
    let a = lines.find(|l| l.starts_with("fifo,0,a,")).unwrap();
    assert!(a.ends_with(",1,40.000"), "{a}");
    let o = tessera(&[&args[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let p = &doc["policies"][0];
    assert_eq!(p["failures"], 1);
    assert_eq!(p["finished"], 3);
    assert_eq!(p["failed"], 0);
    assert!(
        (p["lost_gpu_hours"].as_f64().unwrap() - 40.0 / 3600.0).abs() < 1e-12,
        "{p}"
    );
    assert!((p["avg_jct_s"].as_f64().unwrap() - (120.0 + 170.0 + 30.0) / 3.0).abs() < 1e-9);
    assert_eq!(p["restarts_per_job"]["max"], 1);
}

#[test]
fn simulate_with_drawn_failures_is_seeded() {
    let run = |seed: &str| {
        let o = tessera(&[
            "simulate",
            "--cluster",
            &data("four_gpus.yaml"),
            "--trace",
            &data("small.csv"),
            "--policy",
            "fifo",
            "--mtbf",
            "box=60s",
            "--mttr",
            "10s",
            "--max-restarts",
            "1",
            "--seed",
            seed,
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let mut doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let p = doc["policies"][0].take();
        assert!(p["failures"].as_u64().unwrap() > 0, "{p}");
        // Every job ends one way or another.
        let ended = p["finished"].as_u64().unwrap()
            + p["failed"].as_u64().unwrap()
            + p["unfinished"].as_u64().unwrap();
        assert_eq!(ended, 3, "{p}");
        (
            p["failures"].clone(),
            p["lost_gpu_hours"].clone(),
            p["avg_jct_s"].clone(),
        )
    };
    assert_eq!(run("7"), run("7"));
}

#[test]
fn simulate_refuses_bad_failure_options() {
    let base = [
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("small.csv"),
        "--policy",
        "fifo",
    ];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.csv");
    std::fs::write(&file, "time,node,event\n5,box-0,up\n").unwrap();
    let f = file.to_str().unwrap();
    for (extra, want) in [
        (vec!["--failures", f], "without going down"),
        (
            vec!["--failures", "/nonexistent/f.yaml"],
            "reading failures file",
        ),
        (vec!["--mtbf", "10h"], "needs an --mttr"),
        (vec!["--mttr", "1h"], "--mttr needs --mtbf"),
        (
            vec!["--mtbf", "gpu=10h", "--mttr", "1h"],
            "no node group \"gpu\"",
        ),
        (vec!["--mtbf", "-3h", "--mttr", "1h"], ">= 0"),
        (vec!["--mtbf", "0", "--mttr", "1h"], "must be > 0"),
        (
            vec!["--checkpoint-interval", "1h"],
            "need --failures or --mtbf",
        ),
        (
            vec!["--mtbf", "10h", "--mttr", "1h", "--semantics", "synergy"],
            "exact engine only",
        ),
    ] {
        let o = tessera(&[&base[..], &extra[..]].concat());
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra:?}: {}", stderr(&o));
    }
}

#[test]
fn without_failures_the_summary_has_no_failure_fields() {
    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("small.csv"),
        "--policy",
        "fifo",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(doc["policies"][0].get("lost_gpu_hours").is_none());
    assert!(!stdout(&o).contains("GPU-h lost"));
}
