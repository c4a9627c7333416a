//! `tessera sweep`: plan checks, local execution, failures, resume, interruption, collect.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{data, stderr, stdout, tessera};

fn write_spec(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

/// A small sweep over the four-GPU cluster: `trace` values × policies × seeds.
fn small_spec(traces: &[String], seeds: &str) -> String {
    format!(
        "apiVersion: tessera/v1
kind: Sweep
metadata: {{name: small}}
spec:
  fixed:
    cluster: {cluster}
    no-restart-cost: true
  axes:
    trace: [{traces}]
    policy: [fifo, srtf]
    seed: [{seeds}]
",
        cluster = data("four_gpus.yaml"),
        traces = traces.join(", ")
    )
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    v.sort();
    v
}

#[test]
fn plan_names_the_axis_and_value_of_a_bad_input_before_running() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = small_spec(&[data("small.csv")], "1, 2").replace("[fifo, srtf]", "[fifo, nosuch]");
    let spec = write_spec(tmp.path(), "bad-policy.yaml", &spec);
    let out = tmp.path().join("out");
    let o = tessera(&["sweep", "run", &spec, "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("axis policy, value nosuch"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "nothing may run or be written");

    let missing = tmp.path().join("missing.csv").display().to_string();
    let spec = small_spec(&[data("small.csv"), missing.clone()], "1");
    let spec = write_spec(tmp.path(), "bad-trace.yaml", &spec);
    let o = tessera(&["sweep", "plan", &spec]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("axis trace, value {missing}")),
        "{}",
        stderr(&o)
    );

    let spec = small_spec(&[data("small.csv")], "1").replace("seed:", "rounds:");
    let spec = write_spec(tmp.path(), "bad-option.yaml", &spec);
    let o = tessera(&["sweep", "plan", &spec]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("axis rounds, value 1"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("--rounds"), "{}", stderr(&o));
}

#[test]
fn plan_lists_every_run_with_a_stable_id() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "s.yaml",
        &small_spec(&[data("small.csv")], "1, 2"),
    );
    let o = tessera(&["sweep", "plan", &spec, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let plan: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let runs = plan["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let o = tessera(&["sweep", "plan", &spec]);
    let text = stdout(&o);
    assert!(text.contains("4 runs"), "{text}");
    for r in runs {
        assert!(text.contains(r["id"].as_str().unwrap()));
    }
}

#[test]
fn a_run_gives_what_simulate_gives() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(tmp.path(), "s.yaml", &small_spec(&[data("small.csv")], "1"));
    let out = tmp.path().join("out");
    let o = tessera(&[
        "sweep",
        "run",
        &spec,
        "--out",
        out.to_str().unwrap(),
        "--threads",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let plan = json(&out.join("plan.json"));
    let first = &plan["runs"][0];
    assert_eq!(first["params"]["policy"], "fifo");
    let summary = json(
        &out.join("runs")
            .join(first["id"].as_str().unwrap())
            .join("summary.json"),
    );
    let o = tessera(&[
        "simulate",
        "--cluster",
        &data("four_gpus.yaml"),
        "--trace",
        &data("small.csv"),
        "--no-restart-cost",
        "--policy",
        "fifo",
        "--seed",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut direct: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let mut swept = summary.clone();
    for doc in [&mut direct, &mut swept] {
        for p in doc["policies"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("wall_s");
        }
    }
    assert_eq!(swept, direct);
}

#[test]
fn failed_runs_are_recorded_and_retried_and_done_runs_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    // Readable, so `plan` accepts it, but malformed, so its runs fail.
    let broken = tmp.path().join("broken.csv");
    std::fs::write(&broken, "job_id,submit_s,gpus,duration_s\nx,0,two,10\n").unwrap();
    let traces = [data("small.csv"), broken.display().to_string()];
    let spec = write_spec(tmp.path(), "s.yaml", &small_spec(&traces, "1, 2"));
    let out = tmp.path().join("out");
    let out_s = out.to_str().unwrap();
    let o = tessera(&["sweep", "run", &spec, "--out", out_s, "--threads", "2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("4 ran now, 0 already done, 4 failed"),
        "{}",
        stderr(&o)
    );
    let dirs = run_dirs(&out);
    assert_eq!(dirs.len(), 8);
    let failed: Vec<&PathBuf> = dirs
        .iter()
        .filter(|d| d.join("error.json").exists())
        .collect();
    assert_eq!(failed.len(), 4);
    for d in &failed {
        assert!(!d.join("summary.json").exists());
        let err = json(&d.join("error.json"));
        assert!(err["error"].as_str().unwrap().contains("gpus"), "{err}");
    }

    // status and collect list the failures.
    let o = tessera(&["sweep", "status", out_s]);
    assert!(stdout(&o).contains("4 done, 4 failed"), "{}", stdout(&o));
    let o = tessera(&["sweep", "collect", out_s, "--no-plots"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("4 failed"), "{}", stderr(&o));
    assert_eq!(
        json(&out.join("results.json"))["failed"]
            .as_array()
            .unwrap()
            .len(),
        4
    );

    // Fixed input: only the failed runs run again; the others keep their files.
    let kept = dirs
        .iter()
        .find(|d| d.join("summary.json").exists())
        .unwrap();
    let before = std::fs::metadata(kept.join("summary.json"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::write(&broken, "job_id,submit_s,gpus,duration_s\nx,0,2,10\n").unwrap();
    let o = tessera(&["sweep", "run", &spec, "--out", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("4 ran now, 4 already done, 0 failed"),
        "{}",
        stderr(&o)
    );
    let after = std::fs::metadata(kept.join("summary.json"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after);
    assert!(run_dirs(&out)
        .iter()
        .all(|d| d.join("summary.json").exists() && !d.join("error.json").exists()));

    // A new axis value adds runs; the existing ones are not renamed or rerun.
    let grown = small_spec(&traces, "1, 2, 3");
    let spec = write_spec(tmp.path(), "s.yaml", &grown);
    let o = tessera(&["sweep", "run", &spec, "--out", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("12 runs: 4 ran now, 8 already done"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn collect_writes_one_row_per_run_and_policy_and_plots() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = format!(
        "apiVersion: tessera/v1
kind: Sweep
metadata: {{name: loads}}
spec:
  fixed:
    cluster: {}
    trace: {}
    policy: [fifo, las]
  axes:
    load: [60, 120, 240]
    seed: [1, 2]
",
        data("four_gpus.yaml"),
        data("small.csv")
    );
    let spec = write_spec(tmp.path(), "s.yaml", &spec);
    let out = tmp.path().join("out");
    let out_s = out.to_str().unwrap();
    let o = tessera(&["sweep", "run", &spec, "--out", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tessera(&["sweep", "collect", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut r = csv::Reader::from_path(out.join("results.csv")).unwrap();
    let headers: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(&headers[..4], ["run_id", "load", "seed", "policy"]);
    assert!(headers.iter().any(|h| h == "avg_jct_s"));
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    // 6 runs, each with two policies.
    assert_eq!(rows.len(), 12);
    let loads: std::collections::BTreeSet<&str> = rows.iter().map(|r| &r[1]).collect();
    assert_eq!(loads.into_iter().collect::<Vec<_>>(), ["120", "240", "60"]);
    let (texts, strokes) = crate::plots::svg_parts(&out.join("plots/avg_jct_s-vs-load.svg"));
    assert!(
        texts.iter().any(|t| t == "fifo") && texts.iter().any(|t| t == "las"),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("mean ± sd over seeds")),
        "{texts:?}"
    );
    assert!(strokes.len() >= 2, "one line per policy: {strokes:?}");
    // Issue 41: axes in words and units, not field names and seconds.
    for label in ["average JCT (hours)", "load (jobs/h)"] {
        assert!(texts.iter().any(|t| t == label), "no {label:?}: {texts:?}");
    }
    assert!(!texts.iter().any(|t| t.contains("avg_jct_s")), "{texts:?}");
    let cdf = std::fs::read_to_string(out.join("plots/jct-cdf.svg")).unwrap();
    assert!(cdf.contains("job completion time (hours)"));
    assert!(
        cdf.contains("at load 240"),
        "the CDF is drawn at the last load by default"
    );
    let o = tessera(&["sweep", "collect", out_s, "--cdf-at", "load=60"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cdf = std::fs::read_to_string(out.join("plots/jct-cdf.svg")).unwrap();
    assert!(cdf.contains("at load 60"));
    let o = tessera(&["sweep", "collect", out_s, "--cdf-at", "load=61"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("axis load has no value 61"),
        "{}",
        stderr(&o)
    );
    let o = tessera(&["sweep", "collect", out_s, "--plot-format", "png"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for name in ["avg_jct_s-vs-load.png", "jct-cdf.png"] {
        let png = std::fs::read(out.join("plots").join(name)).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}");
        // IHDR: a non-empty image.
        let width = u32::from_be_bytes([png[16], png[17], png[18], png[19]]);
        let height = u32::from_be_bytes([png[20], png[21], png[22], png[23]]);
        assert!(width >= 800 && height >= 400, "{name}: {width}x{height}");
    }
}

/// SIGINT mid-sweep: every run directory is whole or absent, and running again finishes the
/// sweep with the same results as an uninterrupted one.
#[test]
fn ctrl_c_leaves_no_half_written_result() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = "apiVersion: tessera/v1
kind: Sweep
metadata: {name: interrupt}
spec:
  fixed: {cluster: builtin:default, trace: builtin:philly-synthetic-2k, round: 300}
  axes:
    seed: [1, 2, 3, 4, 5, 6, 7, 8]
    policy: [fifo, las]
";
    let spec = write_spec(tmp.path(), "s.yaml", spec);
    let out = tmp.path().join("out");
    let out_s = out.to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["sweep", "run", &spec, "--out", out_s, "--threads", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let done = || {
        std::fs::read_dir(out.join("runs"))
            .map(|d| {
                d.filter(|e| e.as_ref().unwrap().path().join("summary.json").exists())
                    .count()
            })
            .unwrap_or(0)
    };
    while done() < 2 && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Our own child, by its pid.
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(!status.success(), "the sweep was interrupted");
    let partial = done();
    assert!(partial < 16, "interrupted before the end ({partial} done)");
    for d in run_dirs(&out) {
        if d.join("summary.json").exists() {
            let s = json(&d.join("summary.json"));
            assert_eq!(s["policies"].as_array().unwrap().len(), 1);
            assert!(d.join("jobs.csv").exists() && d.join("params.json").exists());
        }
    }
    let o = tessera(&["sweep", "run", &spec, "--out", out_s, "--threads", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("{} ran now, {partial} already done", 16 - partial)),
        "{}",
        stderr(&o)
    );
    assert!(
        !out.join("runs/.tmp").exists()
            || std::fs::read_dir(out.join("runs/.tmp")).unwrap().count() == 0
    );

    let fresh = tmp.path().join("fresh");
    let o = tessera(&["sweep", "run", &spec, "--out", fresh.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    for dir in [&out, &fresh] {
        let o = tessera(&["sweep", "collect", dir.to_str().unwrap(), "--no-plots"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let strip = |p: PathBuf| -> Vec<Value> {
        let mut rows = json(&p)["rows"].as_array().unwrap().clone();
        for r in &mut rows {
            r["metrics"].as_object_mut().unwrap().remove("wall_s");
        }
        rows
    };
    assert_eq!(
        strip(out.join("results.json")),
        strip(fresh.join("results.json"))
    );
}

/// `run: repro` runs of the Synergy experiment, one (semantics, load, policy) each, give what
/// one `tessera repro synergy --parts c` gives for the same knobs (a small cluster and workload
/// keep it quick), and the built-in spec plans.
#[test]
fn repro_runs_match_the_reproduction() {
    let tmp = tempfile::tempdir().unwrap();
    let text = "apiVersion: tessera/v1
kind: Sweep
metadata: {name: synergy-small}
spec:
  run: repro
  fixed: {experiment: synergy, workload: synthetic, parts: c, seeds: '1', servers: 2, jobs: 300, window-start: 50, window-len: 100}
  axes:
    semantics: [exact, synergy]
    loads: [2, 3]
    sweep-policies: [fifo+proportional, fifo+tune]
";
    let spec = write_spec(tmp.path(), "s.yaml", text);
    let out = tmp.path().join("out");
    let out_s = out.to_str().unwrap();
    let o = tessera(&["sweep", "run", &spec, "--out", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tessera(&["sweep", "collect", out_s, "--no-plots"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = json(&out.join("results.json"))["rows"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rows.len(), 8);

    let repro = tmp.path().join("repro");
    let o = tessera(&[
        "repro",
        "synergy",
        // The synthetic study on both engines (the default is the reference workload under
        // its semantics since issue 40).
        "--workload",
        "synthetic",
        "--semantics",
        "both",
        "--parts",
        "c",
        "--seeds",
        "1",
        "--servers",
        "2",
        "--jobs",
        "300",
        "--window-start",
        "50",
        "--window-len",
        "100",
        "--loads",
        "2,3",
        "--sweep-policies",
        "fifo+proportional,fifo+tune",
        "--out",
        repro.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let entries = json(&repro.join("summary.json"))["entries"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(entries.len(), 8);
    for e in &entries {
        let row = rows
            .iter()
            .find(|r| {
                r["policy"] == e["policy"]
                    && r["point"]["semantics"] == e["semantics"]
                    && r["point"]["loads"]
                        .as_str()
                        .unwrap()
                        .parse::<f64>()
                        .unwrap()
                        == e["load"].as_f64().unwrap()
            })
            .unwrap_or_else(|| panic!("no sweep row for {e}"));
        for m in ["avg_jct_s", "p99_jct_s", "makespan_s"] {
            assert_eq!(row["metrics"][m], e[m], "{m} of {e}");
        }
    }

    let o = tessera(&["sweep", "plan", "builtin:synergy-c"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("192 runs of repro"), "{}", stdout(&o));

    // Bad values are named before anything runs.
    for (bad, want) in [
        ("fifo+tune]", "fifo+nosuch]"),
        ("experiment: synergy", "experiment: nosuch"),
        ("servers: 2", "srevers: 2"),
    ]
    .map(|(from, to)| (text.replace(from, to), to))
    {
        let path = write_spec(tmp.path(), "bad.yaml", &bad);
        let o = tessera(&["sweep", "plan", &path]);
        assert_eq!(o.status.code(), Some(1), "{want}");
        let key = want.split(':').next().unwrap().trim_end_matches(']');
        assert!(stderr(&o).contains(key), "{want}: {}", stderr(&o));
    }
}

/// Relative trace and cluster paths mean what they mean to `tessera simulate` in the same
/// directory, and are stored absolute, so runs started elsewhere (Slurm tasks start in the
/// sweep directory) read the same files.
#[test]
fn relative_paths_are_resolved_from_the_current_directory() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(data("small.csv"), tmp.path().join("t.csv")).unwrap();
    std::fs::copy(data("four_gpus.yaml"), tmp.path().join("c.yaml")).unwrap();
    let spec = "apiVersion: tessera/v1
kind: Sweep
spec:
  fixed: {cluster: c.yaml, policy: fifo}
  axes:
    trace: [t.csv, builtin:tiresias-60]
";
    std::fs::write(tmp.path().join("s.yaml"), spec).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(tmp.path())
        .args(["sweep", "plan", "s.yaml", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let plan: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let first = &plan["runs"][0]["params"];
    let cluster = PathBuf::from(first["cluster"].as_str().unwrap());
    assert!(cluster.is_absolute());
    assert_eq!(std::fs::canonicalize(cluster).unwrap(), dir.join("c.yaml"));
    assert!(PathBuf::from(first["trace"].as_str().unwrap()).is_absolute());
    assert_eq!(plan["runs"][1]["params"]["trace"], "builtin:tiresias-60");
}
