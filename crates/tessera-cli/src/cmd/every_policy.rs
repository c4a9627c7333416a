//! Every registered policy on clusters and workloads nobody designed it for (issue 36).
//!
//! Random clusters (1–4 GPU types, MIG-capable and not, 1–16 GPUs per node) and random
//! workloads (typed and untyped jobs, multi-node jobs, MIG and quota requests, CPU and memory
//! demands, models of every mechanism and unknown ones, inference services with whole-GPU and
//! quota instances) go through `tessera simulate` exactly as a user's files would. Each run
//! must either be refused before its first event, with a message naming the policy, or
//! finish every job it accepted and account for every request, within a time bound (a hang is
//! a failure, not a slow test).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use clap::Parser;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use super::simulate::{execute, Simulated};

/// GPU models a random cluster draws from: MIG-capable and not, old and new.
const GPU_MODELS: &[&str] = &[
    "A100-80GB",
    "H100-80GB",
    "A100-40GB",
    "V100-32GB",
    "A10",
    "T4",
];
const MIG_CAPABLE: &[&str] = &["A100-80GB", "H100-80GB", "A100-40GB"];

/// Model names of every mechanism's tables (Crius's `FAMILY-SIZEb` included: a workload of
/// only those picks Crius's truth, under which MIG slices and quotas are rated by their
/// share), and one nobody knows.
const MODELS: &[&str] = &[
    "resnet50",
    "transformer",
    "gnmt",
    "resnet18",
    "bert-base",
    "roberta-large",
    "gpt2-large",
    "llama2-7b",
    "bert-1.3b",
    "wrn-2b",
    "mystery-net",
];

/// How long one policy may take on one small case before it counts as a hang.
const HANG: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
struct Group {
    gpu: &'static str,
    count: u32,
    gpus_per_node: u32,
}

#[derive(Clone, Debug)]
enum Part {
    Whole,
    /// `nvidia.com/mig-any`.
    MigAny,
    /// A quota of this many permille.
    Share(u16),
}

#[derive(Clone, Debug)]
struct Job {
    submit: u32,
    gpus: u32,
    duration: u32,
    model: &'static str,
    types: Vec<&'static str>,
    part: Part,
    cpu_milli: Option<u32>,
    memory_gi: Option<u32>,
}

#[derive(Clone, Debug)]
struct Service {
    start: u32,
    length: u32,
    rate: f64,
    quota: Option<(u16, u16)>,
    model: &'static str,
}

#[derive(Clone, Debug)]
struct Case {
    groups: Vec<Group>,
    jobs: Vec<Job>,
    services: Vec<Service>,
    seed: u64,
}

fn group() -> impl Strategy<Value = Group> {
    (
        prop::sample::select(GPU_MODELS),
        1u32..=3,
        prop::sample::select(&[1u32, 2, 4, 8, 16][..]),
    )
        .prop_map(|(gpu, count, gpus_per_node)| Group {
            gpu,
            count,
            gpus_per_node,
        })
}

fn job(types: Vec<&'static str>) -> impl Strategy<Value = Job> {
    let most = types.len().min(2);
    let typed = prop::sample::subsequence(types, 0..=most);
    (
        0u32..3600,
        prop::sample::select(&[1u32, 1, 1, 2, 4, 8, 16][..]),
        60u32..7200,
        prop::sample::select(MODELS),
        typed,
        0u8..10,
        prop::option::of(500u32..16_000),
        prop::option::of(1u32..128),
    )
        .prop_map(
            |(submit, gpus, duration, model, types, part, cpu_milli, memory_gi)| {
                // One job in five asks for part of a GPU; such a request is for one GPU.
                let part = match part {
                    0 => Part::MigAny,
                    1 => Part::Share(300),
                    _ => Part::Whole,
                };
                let gpus = if matches!(part, Part::Whole) { gpus } else { 1 };
                Job {
                    submit,
                    gpus,
                    duration,
                    model,
                    types,
                    part,
                    cpu_milli,
                    memory_gi,
                }
            },
        )
}

fn service() -> impl Strategy<Value = Service> {
    (
        0u32..1800,
        60u32..900,
        1.0f64..30.0,
        prop::option::of((200u16..=500, 500u16..=1000)),
        prop::sample::select(&["bert-base", "roberta-large", "resnet50", "mystery-net"][..]),
    )
        .prop_map(|(start, length, rate, quota, model)| Service {
            start,
            length,
            rate,
            quota,
            model,
        })
}

fn case() -> impl Strategy<Value = Case> {
    prop::collection::vec(group(), 1..=4).prop_flat_map(|groups| {
        let types: Vec<&'static str> = {
            let mut t: Vec<&'static str> = groups.iter().map(|g| g.gpu).collect();
            t.sort_unstable();
            t.dedup();
            t
        };
        (
            Just(groups),
            prop::collection::vec(job(types), 1..=12),
            prop::collection::vec(service(), 0..=2),
            0u64..1000,
        )
            .prop_map(|(groups, jobs, services, seed)| Case {
                groups,
                jobs,
                services,
                seed,
            })
    })
}

impl Case {
    fn cluster_yaml(&self) -> String {
        let mut s = String::from("apiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: random\nspec:\n  nodeGroups:\n");
        for (i, g) in self.groups.iter().enumerate() {
            let _ = write!(
                s,
                "    - name: g{i}\n      count: {}\n      gpu: {}\n      gpusPerNode: {}\n      cpus: {}\n      memory: {}Gi\n",
                g.count,
                g.gpu,
                g.gpus_per_node,
                8 * g.gpus_per_node,
                64 * g.gpus_per_node
            );
        }
        s
    }

    /// The workload as a `kind: Workload` spec: jobs with every per-job dimension, and
    /// services.
    fn workload_yaml(&self) -> String {
        let mut s = String::from("apiVersion: tessera/v1\nkind: Workload\nspec:\n  jobs:\n");
        for (i, j) in self.jobs.iter().enumerate() {
            // A MIG request must name MIG-capable types only.
            let types: Vec<&str> = match j.part {
                Part::MigAny => j
                    .types
                    .iter()
                    .copied()
                    .filter(|t| MIG_CAPABLE.contains(t))
                    .collect(),
                _ => j.types.clone(),
            };
            let _ = write!(
                s,
                "    - name: j{i}\n      submitSeconds: {}\n      gpus: {}\n      durationSeconds: {}\n      model: {}\n      tenant: t{}\n",
                j.submit,
                j.gpus,
                j.duration,
                j.model,
                i % 3
            );
            if !types.is_empty() {
                let _ = writeln!(s, "      gpuTypes: [{}]", types.join(", "));
            }
            let mut resources = Vec::new();
            if let Some(c) = j.cpu_milli {
                resources.push(format!("cpu: {c}m"));
            }
            if let Some(m) = j.memory_gi {
                resources.push(format!("memory: {m}Gi"));
            }
            match j.part {
                Part::Whole => {}
                Part::MigAny => resources.push("limits: {nvidia.com/mig-any: 1}".into()),
                Part::Share(p) => resources.push(format!("smRequest: {}", f64::from(p) / 1000.0)),
            }
            if !resources.is_empty() {
                let _ = writeln!(s, "      resources: {{{}}}", resources.join(", "));
            }
        }
        if !self.services.is_empty() {
            s.push_str("  services:\n");
        }
        for (i, v) in self.services.iter().enumerate() {
            let quota = v
                .quota
                .map(|(r, l)| {
                    format!(
                        ", smRequest: {}, smLimit: {}",
                        f64::from(r) / 1000.0,
                        f64::from(l) / 1000.0
                    )
                })
                .unwrap_or_default();
            let _ = write!(
                s,
                "    - name: s{i}\n      model: {}\n      startSeconds: {}\n      endSeconds: {}\n      sloMilliseconds: 200\n      maxBatch: 8\n      coldStartSeconds: 2\n      resources: {{cpu: '1', memory: 4Gi, gpuMemory: 4Gi{quota}}}\n      arrivals: {{poisson: {{rate: {:.2}}}}}\n",
                v.model,
                v.start,
                v.start + v.length,
                v.rate
            );
        }
        s
    }
}

fn simulate_args(
    cluster: &Path,
    trace: &Path,
    seed: u64,
    policies: &[&str],
) -> crate::args::SimulateArgs {
    let mut argv: Vec<String> = vec![
        "tessera".into(),
        "simulate".into(),
        "--cluster".into(),
        cluster.display().to_string(),
        "--trace".into(),
        trace.display().to_string(),
        "--seed".into(),
        seed.to_string(),
        "--threads".into(),
        "1".into(),
        // As a user with a trace from elsewhere: jobs no node group can ever hold are
        // reported rejected, not an input error.
        "--reject-unfit".into(),
    ];
    for p in policies {
        argv.push("--policy".into());
        argv.push((*p).into());
    }
    match crate::args::Cli::try_parse_from(argv).map(|c| c.command) {
        Ok(crate::args::Command::Simulate(a)) => *a,
        other => panic!("bad test arguments: {other:?}"),
    }
}

/// Runs `execute` on another thread; `None` when it did not return within [`HANG`].
fn execute_bounded(args: crate::args::SimulateArgs) -> Option<anyhow::Result<Simulated>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(execute(&args));
    });
    rx.recv_timeout(HANG).ok()
}

/// Runs that completed (not refused), over the whole property test: a test whose every run
/// is refused would check nothing.
static COMPLETED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static REFUSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// What one policy did on one case, or why that breaks the contract.
/// With `relaxed` (`--ignore-unsupported`) the policy must run, on what it honours.
fn check_policy(case: &Case, dir: &Path, policy: &str, relaxed: bool) -> Result<(), String> {
    let mut args = simulate_args(
        &dir.join("cluster.yaml"),
        &dir.join("workload.yaml"),
        case.seed,
        &[policy],
    );
    args.ignore_unsupported = relaxed;
    let Some(result) = execute_bounded(args) else {
        return Err(format!("{policy}: no answer within {HANG:?} (a hang)"));
    };
    match result {
        Err(e) => {
            let msg = format!("{e:#}");
            if relaxed {
                Err(format!(
                    "{policy}: refused under --ignore-unsupported: {msg}"
                ))
            } else if msg.contains(policy) {
                // Refused up front, naming the policy.
                REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            } else {
                Err(format!("{policy}: failed without naming the policy: {msg}"))
            }
        }
        Ok(sim) => {
            if let Some(e) = &sim.doc.policies[0].error {
                // Includes the engine's stall: a policy that accepted a job and never
                // places it breaks the contract as much as a crash does.
                return Err(format!("{policy}: its run failed: {e}"));
            }
            let report = &sim.reports[0];
            let s = &report.summary;
            if s.finished + s.rejected != s.jobs || s.unfinished != 0 {
                return Err(format!(
                    "{policy}: {} of {} jobs finished, {} rejected, {} unfinished",
                    s.finished, s.jobs, s.rejected, s.unfinished
                ));
            }
            for svc in &s.services {
                if svc.served + svc.dropped != svc.requests {
                    return Err(format!(
                        "{policy}: service {}: {} served + {} dropped != {} requests",
                        svc.service, svc.served, svc.dropped, svc.requests
                    ));
                }
            }
            COMPLETED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    }
}

fn write_case(case: &Case, dir: &Path) {
    std::fs::write(dir.join("cluster.yaml"), case.cluster_yaml()).unwrap();
    std::fs::write(dir.join("workload.yaml"), case.workload_yaml()).unwrap();
}

fn every_policy_on(case: &Case) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    write_case(case, dir.path());
    let mut failures = Vec::new();
    for (_, info) in tessera_mechanisms::policies() {
        for relaxed in [false, true] {
            if let Err(e) = check_policy(case, dir.path(), info.name, relaxed) {
                failures.push(e);
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{}\ncluster:\n{}\nworkload:\n{}",
            failures.join("\n"),
            case.cluster_yaml(),
            case.workload_yaml()
        )))
    }
}

#[test]
fn every_registered_policy_refuses_up_front_or_finishes_everything() {
    // A fixed stream of cases: the same cases on every machine and every run. CI runs 12;
    // `TESSERA_EVERY_POLICY_CASES=100` goes deeper by hand (the same first 12, then more).
    let cases = std::env::var("TESSERA_EVERY_POLICY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            max_shrink_iters: 16,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let result = runner.run(&case(), |c| every_policy_on(&c));
    if let Err(e) = result {
        panic!("{e}");
    }
    let (done, refused) = (
        COMPLETED.load(std::sync::atomic::Ordering::Relaxed),
        REFUSED.load(std::sync::atomic::Ordering::Relaxed),
    );
    eprintln!("{done} runs completed, {refused} refused up front");
    assert!(
        done > 0,
        "every run was refused: the property checked nothing"
    );
}

/// FIFO's figures do not depend on the company it runs in (the truth comes from the inputs).
#[test]
fn fifo_alone_and_in_company_agree() {
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 2,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let result = runner.run(&case(), |c| {
        let dir = tempfile::tempdir().unwrap();
        write_case(&c, dir.path());
        let (cluster, trace) = (
            dir.path().join("cluster.yaml"),
            dir.path().join("workload.yaml"),
        );
        let mut alone = simulate_args(&cluster, &trace, c.seed, &["fifo"]);
        alone.ignore_unsupported = true;
        let mut company = simulate_args(
            &cluster,
            &trace,
            c.seed,
            &["fifo", "las+tune", "miso", "crius"],
        );
        company.ignore_unsupported = true;
        let (Some(Ok(a)), Some(Ok(b))) = (execute_bounded(alone), execute_bounded(company)) else {
            return Err(TestCaseError::fail("a run failed or hung"));
        };
        let summary = |s: &Simulated| serde_json::to_value(&s.reports[0].summary).unwrap();
        prop_assert_eq!(summary(&a), summary(&b));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
