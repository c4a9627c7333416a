//! What a newcomer meets (issue 41): one cluster file for `plan` and `simulate`, quiet exits
//! on a closed pipe, no option silently ignored.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use super::{data, stderr, stdout, tessera};

#[test]
fn plan_reads_the_simulators_cluster_file_and_builtins() {
    let o = tessera(&[
        "plan",
        "--model",
        "bert-base",
        "--cluster",
        &data("mixed_cluster.yaml"),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    // mixed_cluster.yaml: 2 x 8 A100 + 1 x 8 H100 + 2 x 8 V100 + 2 x 4 A10.
    assert_eq!(v["ranks"].as_array().unwrap().len(), 48);
    let o = tessera(&["plan", "--model", "vit", "--cluster", "builtin:mixed"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("model vit: 96 ranks"),
        "{}",
        stdout(&o)
    );
    let o = tessera(&["plan", "--model", "vit", "--cluster", "builtin:nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("builtin:hap-1") && stderr(&o).contains("mixed"));
}

/// Reads one line of the command's stdout, closes the pipe and returns its exit status and
/// stderr.
fn head_one(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(!line.is_empty());
    // The reader is dropped here: the pipe is closed while the command still writes.
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_closed_pipe_ends_plan_and_generate_quietly() {
    for args in [
        &["plan", "--model", "bert-moe", "--cluster", "builtin:hap-2"][..],
        &[
            "plan",
            "--model",
            "bert-moe",
            "--cluster",
            "builtin:hap-2",
            "--json",
        ][..],
        &["trace", "generate", "--jobs", "200000"][..],
        &["trace", "generate", "--jobs", "200000", "-o", "/dev/stdout"][..],
    ] {
        let (code, err) = head_one(args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("error") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_generator_variant_is_never_silently_ignored() {
    for (generator, needle) in [
        ("philly", "the philly generator has no variants"),
        ("miso-synthetic", "generator miso-synthetic has no variants"),
    ] {
        let o = tessera(&[
            "trace",
            "generate",
            "--generator",
            generator,
            "--trace",
            "multi",
            "--jobs",
            "5",
        ]);
        assert_eq!(o.status.code(), Some(1), "{generator}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
    }
    let o = tessera(&[
        "trace",
        "generate",
        "--generator",
        "synergy-reference",
        "--trace",
        "mult",
        "--jobs",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--trace must be single or multi for generator synergy-reference"),
        "{}",
        stderr(&o)
    );
    let o = tessera(&[
        "trace",
        "generate",
        "--generator",
        "synergy-reference",
        "--trace",
        "multi",
        "--jobs",
        "5",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// docs/failures.md's example (the sim's fixture, which the sim's tests check the page
/// shows) runs on the default cluster as written; on another cluster an unknown node is
/// refused with the cluster's node names.
#[test]
fn the_documented_failures_example_runs_on_the_default_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("failures.yaml");
    std::fs::write(
        &path,
        include_str!("../../../tessera-sim/tests/data/failures.yaml"),
    )
    .unwrap();
    let f = path.to_str().unwrap();
    let o = tessera(&[
        "simulate",
        "--policy",
        "fifo,crius",
        "--ignore-unsupported",
        "--failures",
        f,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("GPU-h down"), "{}", stdout(&o));
    let o = tessera(&[
        "simulate",
        "--cluster",
        "builtin:synergy-128",
        "--trace",
        "builtin:synergy-mix-600",
        "--policy",
        "fifo",
        "--failures",
        f,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no node `dgx-a100-1` in cluster synergy-128; its nodes are named GROUP-INDEX: v100-0 to v100-15"),
        "{}",
        stderr(&o)
    );
}

/// docs/byod.md's cluster and trace examples run as written, and jobs.csv names the nodes
/// the page says the cluster has.
#[test]
fn the_bring_your_own_data_examples_run() {
    let page = include_str!("../../../../docs/byod.md");
    let block = |fence: &str| {
        let start = page.find(fence).unwrap() + fence.len();
        let end = start + page[start..].find("```").unwrap();
        page[start..end].to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("lab.yaml");
    std::fs::write(&cluster, block("```yaml\n")).unwrap();
    let trace = dir.path().join("jobs.csv");
    std::fs::write(&trace, block("```text\n")).unwrap();
    let out = dir.path().join("out");
    let o = tessera(&[
        "simulate",
        "--cluster",
        cluster.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "fifo,las,crius",
        "--no-plots",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    assert!(jobs.contains(",a100-0,A100-80GB"), "{jobs}");
    for n in ["a100-0", "a100-3", "a10-0", "a10-1"] {
        assert!(page.contains(&format!("`{n}`")), "byod.md names {n}");
    }
    let o = tessera(&[
        "plan",
        "--model",
        "bert-base",
        "--cluster",
        cluster.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("model bert-base: 40 ranks"));
}

/// Every duration flag takes units (issue 41: `--round 5m` was refused while `--mtbf 500h`
/// took them): `--round 5m` is `--round 300`, `--profile-cost 1m` is 60 s.
#[test]
fn duration_flags_take_units() {
    let summary = |extra: &[&str]| {
        let (c, t) = (data("four_gpus.yaml"), data("small.csv"));
        let mut args = vec![
            "simulate",
            "--cluster",
            &c,
            "--trace",
            &t,
            "--policy",
            "las",
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = tessera(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        let mut v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        for p in v["policies"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("wall_s");
        }
        v
    };
    let minutes = summary(&["--round", "5m"]);
    assert_eq!(minutes["round_s"], 300.0);
    assert_eq!(minutes, summary(&["--round", "300"]));
    assert_eq!(summary(&["--round", "0.5h"])["round_s"], 1800.0);
    let o = tessera(&["simulate", "--round", "0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--round: `0`: must be more than 0"),
        "{}",
        stderr(&o)
    );
    let o = tessera(&["simulate", "--round", "5 minutes"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("s/m/h/d"), "{}", stderr(&o));
}

/// `--trace-format`'s help lists every registered format, the mechanisms' replay formats
/// too (issue 41: alibaba-gpu-2023 and dilu-instances were missing).
#[test]
fn trace_format_help_lists_every_format() {
    let o = tessera(&["builtins"]);
    let listed = stdout(&o);
    let formats: Vec<&str> = listed
        .split("Trace formats (--trace-format NAME): auto\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(formats.contains(&"alibaba-gpu-2023") && formats.contains(&"dilu-instances"));
    let o = tessera(&["simulate", "--help"]);
    let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
    for f in formats {
        assert!(
            help.contains(&format!("{f},")) || help.contains(&format!("{f} (")),
            "{f}"
        );
    }
}

/// Numbers explained (issue 41): plan says what its TFLOP/s are; trace inspect prints
/// device memory as written (6G, not 5859375Ki) and run times without sentinels; one job is
/// `1 job`.
#[test]
fn numbers_come_with_their_meaning() {
    let o = tessera(&["plan", "--model", "vgg19", "--cluster", "builtin:hap-1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("FP32 peak") && text.contains("times 0.25"),
        "{text}"
    );
    let o = tessera(&["trace", "inspect", "builtin:dilu-serving"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("6G GPU memory") && text.contains(", 5G GPU memory"),
        "{text}"
    );
    assert!(
        text.contains("max 2.00 h") && text.contains("GPU-hours:      24.0"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.csv");
    std::fs::write(&one, "job_id,submit_s,gpus,duration_s\na,0,1,60\n").unwrap();
    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        one.to_str().unwrap(),
        "--policy",
        "fifo",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("1 job from "), "{}", stdout(&o));
    assert!(stdout(&o).contains("(1 node, 4 GPUs)"), "{}", stdout(&o));
}
