//! Issue 36, "no hang, ever", the cases the every-policy property test found: a policy that
//! accepted a job aimed it at GPUs that could never hold it and stopped with the engine's
//! stall. Each shape here stalled before its fix; now every job finishes or, where the
//! policy declares it cannot place it, is rejected up front with the reason.

use std::path::Path;

use super::{stderr, tessera};

/// One small node of a cheap type (8 CPUs, 64 GiB), then roomy nodes of two other types.
const CLUSTER: &str = "apiVersion: tessera/v1
kind: Cluster
metadata: {name: lopsided}
spec:
  nodeGroups:
    - {name: small, count: 1, gpu: A10, gpusPerNode: 1, cpus: 8, memory: 64Gi}
    - {name: h100, count: 2, gpu: H100-80GB, gpusPerNode: 8, cpus: 64, memory: 512Gi}
    - {name: v100, count: 1, gpu: V100-32GB, gpusPerNode: 16, cpus: 128, memory: 1024Gi}
";

/// Jobs whose first allowed type cannot hold them: too many CPUs, too much memory, too
/// many GPUs for the A10's single GPU.
const WORKLOAD: &str = "apiVersion: tessera/v1
kind: Workload
spec:
  jobs:
    - {name: cpu-heavy, submitSeconds: 0, gpus: 1, durationSeconds: 600, model: resnet50, gpuTypes: [A10, V100-32GB], resources: {cpu: 12}}
    - {name: memory-heavy, submitSeconds: 10, gpus: 1, durationSeconds: 600, model: resnet50, resources: {memory: 98Gi}}
    - {name: wide, submitSeconds: 20, gpus: 8, durationSeconds: 600, model: gnmt, gpuTypes: [A10, H100-80GB]}
    - {name: plain, submitSeconds: 30, gpus: 1, durationSeconds: 600, model: resnet50}
";

/// One node of two A100-80GB GPUs (MIG-capable).
const TWO_A100: &str = "apiVersion: tessera/v1
kind: Cluster
metadata: {name: two-a100}
spec:
  nodeGroups:
    - {name: a100, count: 1, gpu: A100-80GB, gpusPerNode: 2, cpus: 64, memory: 512Gi}
";

fn write(dir: &Path) -> (String, String) {
    let (c, w) = (dir.join("cluster.yaml"), dir.join("workload.yaml"));
    std::fs::write(&c, CLUSTER).unwrap();
    std::fs::write(&w, WORKLOAD).unwrap();
    (c.display().to_string(), w.display().to_string())
}

/// Gavel's LP, Sia, the elastic policy and Crius's FCFS choose a job's GPU type: each
/// finishes every job (Gavel aimed `cpu-heavy` and `memory-heavy` at the A10 node, FCFS
/// aimed `wide` at the one A10 GPU, and waited for ever).
#[test]
fn type_choosing_policies_aim_only_at_types_that_can_hold_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, trace) = write(dir.path());
    for policy in ["gavel", "gavel-max-sum", "sia", "elastic", "fcfs"] {
        let out = dir.path().join(policy);
        let summary = super::simulate_summary(
            &[
                "--cluster",
                &cluster,
                "--trace",
                &trace,
                "--policy",
                policy,
                "--ignore-unsupported",
            ],
            &out,
        );
        let s = &summary["policies"][0];
        assert_eq!(s["finished"], 4, "{policy}: {s}");
        assert_eq!(s["unfinished"], 0, "{policy}: {s}");
    }
}

/// Dilu's packing sees every node as the smallest one: on a cluster whose nodes differ, a
/// job asking more CPU or memory than the smallest node has is a mixed-nodes demand. Strict:
/// refused up front, naming it; relaxed: rejected with the reason, the rest finish.
#[test]
fn dilu_refuses_or_rejects_what_only_a_larger_node_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, trace) = write(dir.path());
    let strict = tessera(&[
        "simulate",
        "--cluster",
        &cluster,
        "--trace",
        &trace,
        "--policy",
        "dilu",
    ]);
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    let err = stderr(&strict);
    // One capability per line, the line breaks printed as such (they were escaped to `\n`).
    assert!(!err.contains("\\n"), "{err}");
    assert!(err.lines().any(|l| l.starts_with("  mixed-nodes")), "{err}");
    assert!(err.contains("policy dilu does not honour"), "{err}");
    assert!(
        err.contains("job memory-heavy (line 6) asks for 98Gi of memory, more than the smallest node has (64Gi)"),
        "{err}"
    );
    let out = dir.path().join("dilu");
    let summary = super::simulate_summary(
        &[
            "--cluster",
            &cluster,
            "--trace",
            &trace,
            "--policy",
            "dilu",
            "--ignore-unsupported",
        ],
        &out,
    );
    let s = &summary["policies"][0];
    assert_eq!(s["unfinished"], 0, "{s}");
    assert_eq!(s["rejected"], 3, "cpu-heavy, memory-heavy and wide: {s}");
    assert_eq!(s["finished"], 1, "{s}");
}

/// Synergy's GREEDY skips a job whose best-case demand no placement has this round; on
/// one-GPU nodes of 8 CPUs a best case of more CPUs than that was skipped at every round for
/// ever. A best case no node could ever give now falls back to the proportional share.
#[test]
fn greedy_takes_the_fair_share_when_no_node_could_ever_give_the_best_case() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(
        &cluster,
        "apiVersion: tessera/v1
kind: Cluster
metadata: {name: small-nodes}
spec:
  nodeGroups:
    - {name: a, count: 1, gpu: A10, gpusPerNode: 1, cpus: 8, memory: 64Gi}
    - {name: t, count: 1, gpu: T4, gpusPerNode: 1, cpus: 8, memory: 64Gi}
",
    )
    .unwrap();
    let trace = dir.path().join("workload.yaml");
    std::fs::write(
        &trace,
        "apiVersion: tessera/v1
kind: Workload
spec:
  jobs:
    - {name: j0, submitSeconds: 13, gpus: 1, durationSeconds: 2924, model: resnet18, gpuTypes: [A10], resources: {cpu: 7685m}}
",
    )
    .unwrap();
    for policy in ["fifo+greedy", "srtf+greedy", "las+greedy", "ftf+greedy"] {
        let out = dir.path().join(policy);
        let summary = super::simulate_summary(
            &[
                "--cluster",
                cluster.to_str().unwrap(),
                "--trace",
                trace.to_str().unwrap(),
                "--policy",
                policy,
                "--ignore-unsupported",
                "--seed",
                "903",
            ],
            &out,
        );
        let s = &summary["policies"][0];
        assert_eq!(s["finished"], 1, "{policy}: {s}");
    }
}

/// Every registered truth rates every allocation any policy hands out: under a paper's
/// truth, whose tables know whole GPUs of their own models only, MISO's slices, MPS shares,
/// Dilu's quotas and a GPU the tables find too small for the model stopped the run with
/// "throughput 0".
#[test]
fn every_truth_rates_what_every_policy_hands_out() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, trace) = (
        super::data("mixed_cluster.yaml"),
        super::data("mixed_workload.yaml"),
    );
    for truth in ["crius", "synergy", "gavel", "miso"] {
        let out = dir.path().join(truth);
        let summary = super::simulate_summary(
            &[
                "--cluster",
                &cluster,
                "--trace",
                &trace,
                "--perf",
                truth,
                "--policy",
                "miso",
                "--policy",
                "static",
                "--policy",
                "mps",
                "--policy",
                "dilu",
                "--policy",
                "crius",
                "--ignore-unsupported",
            ],
            &out,
        );
        for p in summary["policies"].as_array().unwrap() {
            assert_eq!(p["unfinished"], 0, "{truth}: {p}");
            assert!(p["error"].is_null(), "{truth}: {p}");
        }
    }
}

/// MISO and `static` place a job asking for one fixed MIG profile only where their slice
/// table finds its model fits: cyclegan fits no 1g slice, so a job pinned to 1g.10gb waited
/// for ever and the run stalled; `static` also waited for ever on a profile its kept layout
/// (3g+2g+2g) does not have. Each is now rejected at arrival with the reason; the other
/// jobs finish. `tessera` runs the too-large job on a whole GPU (issue 37: it refuses
/// nothing the other policies run).
#[test]
fn mig_policies_reject_a_fixed_profile_they_could_never_place() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(&cluster, TWO_A100).unwrap();
    let trace = dir.path().join("workload.yaml");
    std::fs::write(
        &trace,
        "apiVersion: tessera/v1
kind: Workload
spec:
  jobs:
    - {name: too-large, submitSeconds: 0, gpus: 1, durationSeconds: 600, model: cyclegan, resources: {limits: {nvidia.com/mig-1g.10gb: 1}}}
    - {name: fits, submitSeconds: 10, gpus: 1, durationSeconds: 600, model: resnet50, resources: {limits: {nvidia.com/mig-3g.40gb: 1}}}
    - {name: plain, submitSeconds: 20, gpus: 1, durationSeconds: 600, model: resnet50}
",
    )
    .unwrap();
    let too_large = "MISO's slice table finds model cyclegan too large for MIG profile 1g.10gb";
    let not_kept =
        "MIG profile 1g.10gb is not in the layout this policy keeps every MIG GPU in (3g+2g+2g)";
    for (policy, reason) in [
        ("miso", too_large),
        ("miso-oracle", too_large),
        ("static", not_kept),
    ] {
        let out = dir.path().join(policy);
        let summary = super::simulate_summary(
            &[
                "--cluster",
                cluster.to_str().unwrap(),
                "--trace",
                trace.to_str().unwrap(),
                "--perf",
                "trace",
                "--policy",
                policy,
            ],
            &out,
        );
        let s = &summary["policies"][0];
        assert_eq!(s["unfinished"], 0, "{policy}: {s}");
        assert_eq!(s["rejected"], 1, "{policy}: {s}");
        assert_eq!(s["finished"], 2, "{policy}: {s}");
        let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
        assert!(jobs.contains(reason), "{policy}: {jobs}");
    }
    // `tessera` refuses nothing another policy runs: the composed truth runs cyclegan on a
    // 1g slice (at its out-of-memory penalty) and FIFO runs it on a whole GPU, so tessera
    // runs it too, on a whole GPU from its training piece, instead of rejecting it as MISO.
    for policy in ["tessera", "tessera-no-hap"] {
        let out = dir.path().join(policy);
        let summary = super::simulate_summary(
            &[
                "--cluster",
                cluster.to_str().unwrap(),
                "--trace",
                trace.to_str().unwrap(),
                "--perf",
                "trace",
                "--policy",
                policy,
            ],
            &out,
        );
        let s = &summary["policies"][0];
        assert_eq!(s["rejected"], 0, "{policy}: {s}");
        assert_eq!(s["unfinished"], 0, "{policy}: {s}");
        assert_eq!(s["finished"], 3, "{policy}: {s}");
        let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
        assert!(!jobs.contains(too_large), "{policy}: {jobs}");
    }
}

/// One truth per run for services: every policy in a run is offered the same requests,
/// whether its mechanism brings a serving setup (Dilu, tessera), serves without one
/// (`serve-exclusive`) or serves nothing (FIFO under `--ignore-unsupported`: every request
/// counted dropped). Before, a policy without a setup drew its arrivals from seed 0 and
/// the others from `--seed`: 143,374 against 144,534 requests of one service in one run.
/// And a service that asks for no GPU share (a whole GPU) is served by Dilu's policies
/// too: they used to leave it without an instance, every request dropped, no word why.
#[test]
fn every_policy_in_a_run_is_offered_the_same_requests() {
    let dir = tempfile::tempdir().unwrap();
    let policies = [
        "fifo",
        "serve-exclusive",
        "dilu",
        "static-shares",
        "tessera",
    ];
    let mut args = vec![
        "--cluster".to_string(),
        super::data("four_gpus.yaml"),
        "--trace".to_string(),
        super::data("services.yaml"),
        "--seed".to_string(),
        "7".to_string(),
        "--ignore-unsupported".to_string(),
    ];
    for p in policies {
        args.push("--policy".into());
        args.push(p.into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let summary = super::simulate_summary(&args, &dir.path().join("out"));
    let runs = summary["policies"].as_array().unwrap();
    assert_eq!(runs.len(), policies.len());
    let offered = |run: &serde_json::Value| -> Vec<(String, u64)> {
        run["services"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["service"].as_str().unwrap().to_string(),
                    s["requests"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let first = offered(&runs[0]);
    assert_eq!(first.len(), 2, "{}", runs[0]);
    assert!(first[0].1 > 0, "{first:?}");
    for run in runs {
        assert_eq!(offered(run), first, "{}", run["policy"]);
        let web = &run["services"][0];
        let served = web["served"].as_u64().unwrap();
        let dropped = web["dropped"].as_u64().unwrap();
        assert_eq!(served + dropped, first[0].1, "{}: {web}", run["policy"]);
        if run["policy"] != "fifo" {
            assert!(
                served > 0,
                "{} served nothing of `web`: {web}",
                run["policy"]
            );
        }
    }
}

/// A service that asks for a whole GPU, starting while training fills every GPU with
/// quota-packed jobs, gets its instance under Dilu's policies: new training parts stay off
/// one GPU until the instance fits there. Before, every share a finishing job freed went to
/// the next queued job and the service dropped every request (on a lead-made mixed workload:
/// 48,127 of 48,127) with no word why.
#[test]
fn dilu_serves_a_whole_gpu_service_behind_packed_training() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(&cluster, TWO_A100).unwrap();
    let trace = dir.path().join("workload.yaml");
    std::fs::write(
        &trace,
        "apiVersion: tessera/v1
kind: Workload
spec:
  jobs:
    - {name: t0, submitSeconds: 0, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t1, submitSeconds: 60, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t2, submitSeconds: 120, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t3, submitSeconds: 180, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t4, submitSeconds: 240, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t5, submitSeconds: 300, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t6, submitSeconds: 360, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t7, submitSeconds: 420, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t8, submitSeconds: 480, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t9, submitSeconds: 540, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t10, submitSeconds: 600, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t11, submitSeconds: 660, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t12, submitSeconds: 720, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t13, submitSeconds: 780, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t14, submitSeconds: 840, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t15, submitSeconds: 900, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t16, submitSeconds: 960, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t17, submitSeconds: 1020, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t18, submitSeconds: 1080, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t19, submitSeconds: 1140, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t20, submitSeconds: 1200, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t21, submitSeconds: 1260, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t22, submitSeconds: 1320, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t23, submitSeconds: 1380, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t24, submitSeconds: 1440, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t25, submitSeconds: 1500, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t26, submitSeconds: 1560, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t27, submitSeconds: 1620, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t28, submitSeconds: 1680, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t29, submitSeconds: 1740, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t30, submitSeconds: 1800, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t31, submitSeconds: 1860, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t32, submitSeconds: 1920, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t33, submitSeconds: 1980, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t34, submitSeconds: 2040, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t35, submitSeconds: 2100, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t36, submitSeconds: 2160, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t37, submitSeconds: 2220, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t38, submitSeconds: 2280, gpus: 1, durationSeconds: 900, model: resnet50}
    - {name: t39, submitSeconds: 2340, gpus: 1, durationSeconds: 900, model: resnet50}
  services:
    - name: embed
      startSeconds: 600
      endSeconds: 3000
      sloMilliseconds: 100
      maxBatch: 16
      resources: {cpu: 1, memory: 4Gi, gpuMemory: 4Gi}
      arrivals: {poisson: {rate: 5}}
",
    )
    .unwrap();
    for policy in ["dilu", "dilu-no-vertical", "static-shares"] {
        let summary = super::simulate_summary(
            &[
                "--cluster",
                cluster.to_str().unwrap(),
                "--trace",
                trace.to_str().unwrap(),
                "--policy",
                policy,
            ],
            &dir.path().join(policy),
        );
        let run = &summary["policies"][0];
        assert_eq!(run["unfinished"], 0, "{policy}: {run}");
        let embed = &run["services"][0];
        let (requests, served) = (
            embed["requests"].as_u64().unwrap(),
            embed["served"].as_u64().unwrap(),
        );
        assert!(requests > 10_000, "{policy}: {embed}");
        // The instance waits for one GPU to drain (its jobs run 900 s at most).
        assert!(served * 2 > requests, "{policy}: {embed}");
    }
}
