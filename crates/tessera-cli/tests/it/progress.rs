//! Issue 36: one policy's failure never loses the others' results (error rows, `--out`
//! written, exit status 3); runs end when the workload is done or at `--horizon`; the
//! reproducers that hung stop with a clear error.

use super::{stderr, stdout, tessera};

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const ONE_NODE: &str = "apiVersion: tessera/v1
kind: Cluster
spec:
  nodeGroups:
    - name: node
      count: 1
      gpu: V100-32GB
      gpusPerNode: 4
      cpus: 24
      memory: 256Gi
";

/// FIFO needs a handful of events for this job; dilu ticks a round every second of its
/// 1,000 s: under `--max-events 100` dilu fails and FIFO's results stand.
#[test]
fn a_failed_policy_is_its_row_and_the_others_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = write(dir.path(), "c.yaml", ONE_NODE);
    let trace = write(
        dir.path(),
        "t.csv",
        "job_id,submit_s,gpus,duration_s\na,0,1,1000\nb,10,2,500\n",
    );
    let out = dir.path().join("out");
    let o = tessera(&[
        "simulate",
        "--cluster",
        &cluster,
        "--trace",
        &trace,
        "--policy",
        "fifo",
        "--policy",
        "dilu",
        "--max-events",
        "100",
        "--no-plots",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("FAILED"), "{text}");
    assert!(
        text.contains("dilu: failed:") && text.contains("--max-events"),
        "{text}"
    );
    assert!(
        stderr(&o).contains("1 of 2 policies failed (dilu)"),
        "{}",
        stderr(&o)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let rows = doc["policies"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["policy"], "fifo");
    assert_eq!(rows[0]["finished"], 2);
    assert!(rows[0].get("error").is_none());
    assert_eq!(rows[1]["policy"], "dilu");
    assert!(rows[1]["error"].as_str().unwrap().contains("event budget"));
    assert!(rows[1].get("finished").is_none());
    let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    assert_eq!(jobs.lines().filter(|l| l.starts_with("fifo,")).count(), 2);
    assert!(!jobs.lines().any(|l| l.starts_with("dilu,")), "{jobs}");
    // --help documents the status.
    let help = stdout(&tessera(&["simulate", "--help"]));
    assert!(
        help.contains("3 when at") && help.contains("--horizon"),
        "{help}"
    );
}

/// `--horizon` ends every run there (jobs still active are unfinished); without it the run
/// goes on until the workload is done.
#[test]
fn horizon_ends_the_run_and_takes_units() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = write(dir.path(), "c.yaml", ONE_NODE);
    let trace = write(
        dir.path(),
        "t.csv",
        "job_id,submit_s,gpus,duration_s\na,0,1,600\nb,0,1,7200\n",
    );
    let run = |extra: &[&str]| {
        let mut argv = vec![
            "simulate",
            "--cluster",
            &cluster,
            "--trace",
            &trace,
            "--policy",
            "fifo",
            "--json",
        ];
        argv.extend_from_slice(extra);
        let o = tessera(&argv);
        assert!(o.status.success(), "{}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let p = doc["policies"][0].clone();
        (p["finished"].as_u64(), p["unfinished"].as_u64())
    };
    assert_eq!(run(&[]), (Some(2), Some(0)));
    assert_eq!(run(&["--horizon", "30m"]), (Some(1), Some(1)));
    assert_eq!(run(&["--horizon", "2h"]), (Some(2), Some(0)));
    for bad in ["0", "-5", "soon"] {
        let flag = format!("--horizon={bad}");
        let o = tessera(&["simulate", "--cluster", &cluster, "--trace", &trace, &flag]);
        assert_eq!(o.status.code(), Some(1), "{bad}");
        assert!(stderr(&o).contains("--horizon"), "{bad}: {}", stderr(&o));
    }
}

/// Every node down for good under 300 s rounds ticked forever; now each policy's row says
/// the run cannot progress, naming the jobs.
#[test]
fn every_node_down_forever_is_a_stalled_row() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = write(dir.path(), "c.yaml", ONE_NODE);
    let trace = write(
        dir.path(),
        "t.csv",
        "job_id,submit_s,gpus,duration_s\na,0,4,100\nb,20,2,100\n",
    );
    let failures = write(
        dir.path(),
        "f.csv",
        "time,node,gpu,event,duration\n10,node-0,,down,\n",
    );
    let o = tessera(&[
        "simulate",
        "--cluster",
        &cluster,
        "--trace",
        &trace,
        "--failures",
        &failures,
        "--round",
        "300",
        "--policy",
        "fifo",
        "--policy",
        "las",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = stdout(&o);
    for p in ["fifo", "las"] {
        assert!(
            text.contains(&format!("{p}: failed:")) && text.contains("cannot progress"),
            "{text}"
        );
    }
    assert!(text.contains("a (4 GPUs), b (2 GPUs)") && text.contains("4 of 4 GPUs are down"));
}
