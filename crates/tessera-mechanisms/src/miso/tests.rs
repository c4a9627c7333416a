//! MISO policies against the engine: per-GPU invariants after every event, every job done,
//! determinism; the reproduction's ordering.

use tessera_model::{GpuPart, SimTime};
use tessera_sched::{JobState, PolicyOptions};
use tessera_sim::{SimConfig, Simulation};

use super::experiment::{a100_cluster, miso_restart_costs, run_repro, ReproSpec};
use super::truth::MisoTruth;
use super::{miso_table, workload, Miso};
use crate::experiment::RunContext;
use crate::Mechanism;

/// Runs `policy` over the 100-job trace, checking after every event: the engine's device
/// invariants (valid layout, one holder per instance, memory within the GPU), and that every
/// job on a MIG instance fits it in memory (the table has a speed there).
fn run_checked(policy: &str, seed: u64, gpus: u32) -> tessera_sim::SimReport {
    let workload =
        workload::miso_workload(seed, 60.0, 30.0, workload::ArrivalOrder::Shuffled).unwrap();
    run_checked_on(policy, seed, gpus, &workload)
}

fn run_checked_on(
    policy: &str,
    seed: u64,
    gpus: u32,
    workload: &tessera_model::Workload,
) -> tessera_sim::SimReport {
    let cluster = a100_cluster(1, gpus).unwrap();
    let truth = MisoTruth::new(miso_table());
    let built = Miso
        .build_policy(
            policy,
            &PolicyOptions {
                seed,
                ..PolicyOptions::default()
            },
        )
        .unwrap();
    let config = SimConfig {
        restart_costs: miso_restart_costs(),
        ..SimConfig::default()
    };
    let mut sim = Simulation::new(&cluster, workload, &truth, built, config);
    let table = miso_table();
    let geo = cluster
        .catalog
        .mig_geometry(cluster.nodes[0].gpu)
        .unwrap()
        .clone();
    let mut steps = 0;
    while sim.step().unwrap_or_else(|e| panic!("{policy}: {e}")) {
        steps += 1;
        sim.check_invariants()
            .unwrap_or_else(|e| panic!("{policy} at {}: {e}", sim.now()));
        for a in sim.active() {
            if a.state != JobState::Running {
                continue;
            }
            let spec = &workload.jobs()[a.id.index()];
            if let Some(GpuPart::Mig(inst)) = a.allocation.as_ref().and_then(|x| x.part()) {
                let p = geo.profile(inst).unwrap();
                assert!(
                    table.speeds_of(spec)[p.compute_slices as usize].is_some(),
                    "{policy}: {} out of memory on {}",
                    spec.name,
                    p.name
                );
            }
        }
        assert!(steps < 1_000_000, "{policy}: no end");
    }
    let report = sim.into_report();
    assert_eq!(
        report.summary.finished,
        workload.len(),
        "{policy}: {:?}",
        report.summary
    );
    report
}

#[test]
fn every_policy_keeps_gpu_invariants_after_every_event() {
    for policy in [
        "nopart",
        "static",
        "static:4-3",
        "static:4-2-1",
        "miso",
        "miso-oracle",
        "mps",
    ] {
        let r = run_checked(policy, 1, 8);
        assert!(r.summary.avg_jct_s > 0.0);
        if policy.starts_with("miso") {
            let reparts = r
                .policy_stats
                .iter()
                .find(|(k, _)| k == "repartitions")
                .map(|(_, v)| *v)
                .unwrap();
            assert!(reparts > 0.0, "{policy} never re-partitioned");
        }
    }
    // A small cluster forces deep sharing and head-of-line blocking.
    for policy in ["miso", "miso-oracle", "static"] {
        run_checked(policy, 3, 2);
    }
}

#[test]
fn invariants_hold_on_random_heavy_workloads() {
    // Bursty arrivals (one a second on average) of random trace jobs on 1-3 GPUs: deep
    // sharing, many re-partitions, MPS phases ending while jobs finish.
    for seed in 1..=4u64 {
        let w = workload::synthetic(60, 3600.0, seed).unwrap();
        for policy in ["miso", "miso-oracle", "static", "mps"] {
            run_checked_on(policy, seed, 1 + (seed % 3) as u32, &w);
        }
    }
}

#[test]
fn runs_are_deterministic() {
    let a = run_checked("miso", 2, 8);
    let b = run_checked("miso", 2, 8);
    assert_eq!(a.summary, b.summary);
    assert_eq!(a.jobs, b.jobs);
}

#[test]
fn nopart_never_shares_a_gpu_and_queues_in_fifo_order() {
    let r = run_checked("nopart", 1, 8);
    // Strict FIFO on identical GPUs: start times follow submit order.
    let mut starts: Vec<(SimTime, SimTime)> = r
        .jobs
        .iter()
        .map(|j| (j.submit, j.first_start.unwrap()))
        .collect();
    starts.sort();
    assert!(starts.windows(2).all(|w| w[0].1 <= w[1].1));
    assert_eq!(r.summary.preemptions, 0);
}

#[test]
fn repro_ordering_holds_over_five_seeds() {
    let r = run_repro(&ReproSpec::default(), &RunContext::quiet(2)).unwrap();
    let jct = |n: &str| r.get(n).unwrap().avg_jct_s;
    let (oracle, miso, best_static, nopart) = (
        jct("miso-oracle"),
        jct("miso"),
        jct("static"),
        jct("nopart"),
    );
    eprintln!(
        "oracle {oracle:.0} miso {miso:.0} static {best_static:.0} nopart {nopart:.0} mps {:.0}",
        jct("mps")
    );
    assert!(r.means.iter().all(|m| m.unfinished == 0));
    assert!(oracle <= miso, "oracle {oracle} > miso {miso}");
    assert!(
        miso < best_static,
        "miso {miso} >= best static {best_static}"
    );
    assert!(
        best_static < nopart,
        "best static {best_static} >= nopart {nopart}"
    );
    assert!(
        r.predictor_mae > 0.0 && r.predictor_mae < 0.05,
        "{}",
        r.predictor_mae
    );
    // With the jobs in a random order the cluster queues (total work ≈ twice the arrival
    // span), so nopart is far behind: a tie here would mean the order is lost again.
    assert!(nopart > 1.5 * miso, "nopart {nopart} vs miso {miso}");
}

#[test]
fn index_order_leaves_the_cluster_lightly_loaded() {
    // The trace's index order puts the short jobs first: much less queueing than shuffled.
    let one = |order| ReproSpec {
        seeds: vec![1],
        order,
        ..ReproSpec::default()
    };
    let index = run_repro(&one(workload::ArrivalOrder::Index), &RunContext::quiet(2)).unwrap();
    let shuffled = run_repro(
        &one(workload::ArrivalOrder::Shuffled),
        &RunContext::quiet(2),
    )
    .unwrap();
    let q = |r: &super::experiment::ReproResult| r.get("nopart").unwrap().avg_queue_s;
    assert!(
        q(&index) * 2.0 < q(&shuffled),
        "index {} shuffled {}",
        q(&index),
        q(&shuffled)
    );
}

/// The 100-job trace with some jobs asking for a fixed MIG profile (`every`-th job that fits
/// the profile in memory, per profile) and some for `any`.
fn with_mig_requests(profiles: &[(&str, u8, usize)]) -> tessera_model::Workload {
    use tessera_model::MigRequest;
    let w = workload::miso_workload(1, 60.0, 30.0, workload::ArrivalOrder::Shuffled).unwrap();
    let table = miso_table();
    let mut jobs = w.jobs().to_vec();
    for (i, j) in jobs.iter_mut().enumerate() {
        for &(name, size, every) in profiles {
            if j.mig.is_none() && i % every == 0 && table.speeds_of(j)[size as usize].is_some() {
                j.mig = Some(MigRequest::Profile(name.into()));
            }
        }
        if j.mig.is_none() && i % 7 == 3 {
            j.mig = Some(MigRequest::Any);
        }
    }
    tessera_model::Workload::new(jobs)
}

#[test]
fn fixed_profile_jobs_run_only_on_exactly_that_profile() {
    use tessera_model::MigRequest;
    type Requests = Vec<(&'static str, u8, usize)>;
    let cases: [(&str, Requests); 4] = [
        // 1g.10gb is not the profile the optimizer picks for a 1g slice by default.
        ("miso", vec![("3g.20gb", 3, 3), ("1g.10gb", 1, 5)]),
        ("miso-oracle", vec![("3g.20gb", 3, 3), ("1g.10gb", 1, 5)]),
        ("static", vec![("3g.20gb", 3, 4)]),
        ("static:4-3", vec![("4g.20gb", 4, 6), ("3g.20gb", 3, 4)]),
    ];
    let cluster = a100_cluster(1, 4).unwrap();
    let geo = cluster
        .catalog
        .mig_geometry(cluster.nodes[0].gpu)
        .unwrap()
        .clone();
    for (policy, profiles) in cases {
        let w = with_mig_requests(&profiles);
        let fixed = w
            .jobs()
            .iter()
            .filter(|j| matches!(j.mig, Some(MigRequest::Profile(_))))
            .count();
        assert!(fixed >= 10, "{policy}: only {fixed} fixed jobs");
        // Re-run with a per-event check of the fixed jobs' parts.
        let truth = MisoTruth::new(miso_table());
        let built = Miso
            .build_policy(policy, &PolicyOptions::default())
            .unwrap();
        let config = SimConfig {
            restart_costs: miso_restart_costs(),
            ..SimConfig::default()
        };
        let mut sim = Simulation::new(&cluster, &w, &truth, built, config);
        let mut seen_on_profile = std::collections::BTreeSet::new();
        while sim.step().unwrap_or_else(|e| panic!("{policy}: {e}")) {
            sim.check_invariants()
                .unwrap_or_else(|e| panic!("{policy} at {}: {e}", sim.now()));
            for a in sim.active() {
                let spec = &w.jobs()[a.id.index()];
                let (Some(MigRequest::Profile(want)), Some(alloc)) = (&spec.mig, &a.allocation)
                else {
                    continue;
                };
                match alloc.part() {
                    Some(GpuPart::Mig(inst)) => {
                        let got = &geo.profile(inst).unwrap().name;
                        assert_eq!(got, want, "{policy}: job {} on {got}", spec.name);
                        seen_on_profile.insert(a.id);
                    }
                    other => panic!("{policy}: job {} asked {want}, holds {other:?}", spec.name),
                }
            }
        }
        let report = sim.into_report();
        assert_eq!(report.summary.finished, w.len(), "{policy}");
        assert_eq!(
            seen_on_profile.len(),
            fixed,
            "{policy}: some fixed job never seen running"
        );
    }
    // nopart gives a fixed request a whole GPU and still finishes everything.
    let w = with_mig_requests(&[("3g.20gb", 3, 3)]);
    run_checked_on("nopart", 1, 4, &w);
}

#[test]
fn a_profile_no_gpu_has_is_rejected_at_arrival_and_blocks_nothing() {
    // A100-80GB profile names do not exist on the A100-40GB geometry: the job could never be
    // placed (strict FIFO would then hold the queue for ever and the run stall, issue 36).
    // The policy refuses it at arrival with the reason; every other job finishes.
    use tessera_model::MigRequest;
    let w = workload::miso_workload(1, 60.0, 30.0, workload::ArrivalOrder::Shuffled).unwrap();
    let mut jobs = w.jobs().to_vec();
    jobs[50].mig = Some(MigRequest::Profile("3g.40gb".into()));
    let w = tessera_model::Workload::new(jobs);
    let cluster = a100_cluster(1, 4).unwrap();
    for policy in ["miso", "miso-oracle", "static"] {
        let truth = MisoTruth::new(miso_table());
        let built = Miso
            .build_policy(policy, &PolicyOptions::default())
            .unwrap();
        let sim = Simulation::new(
            &cluster,
            &w,
            &truth,
            built,
            SimConfig {
                restart_costs: miso_restart_costs(),
                ..SimConfig::default()
            },
        );
        let r = sim.run(&mut ()).unwrap_or_else(|e| panic!("{policy}: {e}"));
        assert_eq!(r.summary.finished, w.len() - 1, "{policy}: {:?}", r.summary);
        assert_eq!(r.summary.rejected, 1, "{policy}: {:?}", r.summary);
        let reason = r
            .jobs
            .iter()
            .find_map(|j| match &j.outcome {
                tessera_sim::JobOutcome::Rejected { reason } => Some(reason.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            reason, "no GPU of the types it allows has MIG profile 3g.40gb",
            "{policy}"
        );
    }
}

/// Every MIG policy copes with failed GPUs: with GPUs of the node failing and coming back
/// mid-run, the engine refuses nothing, invariants hold after every event and every job
/// finishes. (Before the fixes `static` and `mps` proposed slices on the down GPU, and `miso`
/// and `miso-oracle` re-partitioned it and kept its evicted jobs promised to it: the run
/// stopped.)
#[test]
fn mig_policies_skip_failed_gpus() {
    let cluster = a100_cluster(1, 4).unwrap();
    let node = &cluster.nodes[0].name;
    let spec = tessera_sim::FailureSpec::parse_yaml(
        &format!(
            "kind: Failures\ncheckpoint_interval: 5m\nevents:\n  - {{ time: 600, node: {node}, gpu: 0, duration: 40m }}\n  - {{ time: 1200, node: {node}, gpu: 2, duration: 1h }}\n  - {{ time: 5000, node: {node}, duration: 10m }}\n"
        ),
        &cluster,
    )
    .unwrap();
    let spec = std::sync::Arc::new(spec);
    let workload =
        workload::miso_workload(1, 60.0, 30.0, workload::ArrivalOrder::Shuffled).unwrap();
    let truth = MisoTruth::new(miso_table());
    for policy in ["static", "mps", "miso", "miso-oracle"] {
        let built = Miso
            .build_policy(policy, &PolicyOptions::default())
            .unwrap();
        let config = SimConfig {
            restart_costs: miso_restart_costs(),
            failures: Some(spec.clone()),
            ..SimConfig::default()
        };
        let mut sim = Simulation::new(&cluster, &workload, &truth, built, config);
        let mut steps = 0;
        while sim.step().unwrap_or_else(|e| panic!("{policy}: {e}")) {
            steps += 1;
            sim.check_invariants()
                .unwrap_or_else(|e| panic!("{policy} at {}: {e}", sim.now()));
            assert!(steps < 1_000_000, "{policy}: no end");
        }
        let report = sim.into_report();
        assert_eq!(report.summary.finished, workload.len(), "{policy}");
        let failures = report.summary.failures.as_ref().expect("failures reported");
        assert!(failures.failures >= 3, "{policy}: {failures:?}");
    }
}

/// Seed 20 of the 100-job trace: the cluster empties (the completion's call is skipped with
/// nothing active), MISO kept the finished job on its GPU, planned it beside the next
/// arrival and started it again: the run stopped with "job is not active".
#[test]
fn a_finished_job_is_never_planned_again_seed_20() {
    for policy in ["miso", "miso-oracle"] {
        let r = run_checked(policy, 20, 8);
        assert_eq!(r.summary.unfinished, 0, "{policy}");
    }
}

const MIXED_CLUSTER: &str = include_str!("data/mixed_cluster.yaml");
const MIXED_WORKLOAD: &str = include_str!("data/mixed_workload.yaml");

const ALL_POLICIES: [&str; 7] = [
    "nopart",
    "static",
    "static:4-3",
    "miso",
    "miso-oracle",
    "mps",
    "static:7",
];

fn cluster_of(yaml: &str) -> tessera_model::Cluster {
    tessera_model::Cluster::from_yaml(yaml, &tessera_model::GpuCatalog::builtin()).unwrap()
}

/// Runs `policy` checking the engine's invariants after every event and, for every running
/// job: a GPU model it allows; as many whole GPUs as it asks for when it asks for several
/// (never one GPU for longer); exactly its profile when it asks for a fixed one (under the
/// policies that partition). Returns the report; every job must have finished.
fn run_mixed(
    policy: &str,
    cluster: &tessera_model::Cluster,
    workload: &tessera_model::Workload,
) -> tessera_sim::SimReport {
    use tessera_model::MigRequest;
    let truth = MisoTruth::new(miso_table());
    let built = Miso
        .build_policy(policy, &PolicyOptions::default())
        .unwrap();
    let config = SimConfig {
        restart_costs: miso_restart_costs(),
        ..SimConfig::default()
    };
    let mut sim = Simulation::new(cluster, workload, &truth, built, config);
    let partitions = !matches!(policy, "nopart" | "mps");
    let mut steps = 0;
    while sim.step().unwrap_or_else(|e| panic!("{policy}: {e}")) {
        steps += 1;
        assert!(steps < 1_000_000, "{policy}: no end");
        sim.check_invariants()
            .unwrap_or_else(|e| panic!("{policy} at {}: {e}", sim.now()));
        for a in sim.active() {
            let Some(alloc) = &a.allocation else { continue };
            let spec = &workload.jobs()[a.id.index()];
            for s in &alloc.shares {
                let model = cluster.nodes[s.node.index()].gpu;
                assert!(
                    spec.gpu_types.is_empty() || spec.gpu_types.contains(&model),
                    "{policy}: job {} on {}",
                    spec.name,
                    cluster.catalog.get(model).name
                );
            }
            if spec.gpus > 1 {
                assert_eq!(alloc.gpus(), spec.gpus, "{policy}: job {}", spec.name);
                assert_eq!(
                    alloc.part(),
                    Some(GpuPart::Whole),
                    "{policy}: {}",
                    spec.name
                );
            }
            if let (true, Some(MigRequest::Profile(want))) = (partitions, &spec.mig) {
                let share = &alloc.shares[0];
                let geo = cluster
                    .catalog
                    .mig_geometry(cluster.nodes[share.node.index()].gpu)
                    .unwrap();
                match alloc.part() {
                    Some(GpuPart::Mig(inst)) => {
                        assert_eq!(&geo.profile(inst).unwrap().name, want, "{policy}")
                    }
                    other => panic!("{policy}: job {} asked {want}, holds {other:?}", spec.name),
                }
            }
        }
    }
    let report = sim.into_report();
    assert_eq!(
        report.summary.finished,
        workload.len(),
        "{policy}: {:?}",
        report.summary
    );
    report
}

/// Every MIG policy on a cluster of MIG-capable A100-80GB and H100-80GB beside V100-32GB
/// and A10 GPUs, with jobs restricted to GPU models, multi-GPU jobs (one spanning two
/// nodes) and MIG requests: every job finishes, on GPUs it allows, multi-GPU jobs on as
/// many whole GPUs, fixed profiles honoured where the policy partitions. (Before, every
/// policy started jobs on GPU models they exclude and the engine refused the action.)
#[test]
fn every_policy_finishes_a_mixed_cluster_honouring_gpu_types_and_gpu_counts() {
    let cluster = cluster_of(MIXED_CLUSTER);
    let workload = tessera_trace::parse_workload_spec(MIXED_WORKLOAD, &cluster.catalog).unwrap();
    assert!(workload.jobs().iter().any(|j| j.gpus == 8));
    // A static layout has no slice of some profiles (3-2-2 and 4-3 have no 1g): jobs asking
    // for one can never run under it, so they ask for a 3g slice there.
    let mut jobs = workload.jobs().to_vec();
    for j in &mut jobs {
        if j.mig == Some(tessera_model::MigRequest::Profile("1g.10gb".into())) {
            j.mig = Some(tessera_model::MigRequest::Profile("3g.40gb".into()));
        }
    }
    let for_static = tessera_model::Workload::new(jobs);
    for policy in [
        "nopart",
        "static",
        "static:4-3",
        "miso",
        "miso-oracle",
        "mps",
    ] {
        let workload = if policy.starts_with("static") {
            &for_static
        } else {
            &workload
        };
        let r = run_mixed(policy, &cluster, workload);
        // A k-GPU job holds k GPUs for its whole run (no restarts on this workload's
        // multi-GPU jobs under these policies, which never preempt them).
        for (rec, spec) in r.jobs.iter().zip(workload.jobs()) {
            if spec.gpus > 1 && rec.preemptions == 0 {
                let run = rec
                    .finish
                    .unwrap()
                    .saturating_since(rec.first_start.unwrap());
                assert!(
                    (rec.gpu_secs - spec.gpus as f64 * run.as_secs_f64()).abs() < 1e-3,
                    "{policy}: {} {} GPU-s over {run}",
                    spec.name,
                    rec.gpu_secs
                );
                assert!(run.as_secs_f64() <= spec.duration.as_secs_f64() + 1e-3);
            }
            assert!(rec.gpu_secs > 0.0, "{policy}: {} no GPU-s", spec.name);
        }
    }
}

/// `nopart` gives a 2-GPU job two whole GPUs for its run time, not one GPU for twice as
/// long (what it did, while jobs.csv said 2 GPUs); so do the other policies.
#[test]
fn a_multi_gpu_job_gets_that_many_whole_gpus() {
    let w = workload::miso_workload(1, 60.0, 30.0, workload::ArrivalOrder::Shuffled).unwrap();
    let mut jobs = w.jobs().to_vec();
    for j in jobs.iter_mut().step_by(9) {
        j.gpus = 2;
    }
    jobs[5].gpus = 8; // the whole node
    let w = tessera_model::Workload::new(jobs);
    let cluster = a100_cluster(1, 8).unwrap();
    for policy in ALL_POLICIES {
        let r = run_mixed(policy, &cluster, &w);
        for (rec, spec) in r.jobs.iter().zip(w.jobs()) {
            if spec.gpus > 1 && rec.preemptions == 0 {
                let run = rec
                    .finish
                    .unwrap()
                    .saturating_since(rec.first_start.unwrap());
                assert!(
                    (run.as_secs_f64() - spec.duration.as_secs_f64()).abs() < 1e-3,
                    "{policy}: {} ran {run} for {}",
                    spec.name,
                    spec.duration
                );
            }
        }
    }
}

/// Without MIG GPUs every policy runs jobs on whole GPUs (MISO and `static` with nothing to
/// partition degenerate to one job per GPU; `mps` still shares). Before, `static` started
/// nothing and left every job unfinished with exit 0.
#[test]
fn without_mig_every_policy_runs_jobs_whole() {
    let cluster = cluster_of(
        "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: v100, count: 2, gpu: V100-32GB, gpusPerNode: 4, cpus: 32, memory: 256Gi}\n",
    );
    let w = workload::miso_workload(3, 60.0, 30.0, workload::ArrivalOrder::Shuffled).unwrap();
    let nopart = run_mixed("nopart", &cluster, &w);
    for policy in ALL_POLICIES {
        let r = run_mixed(policy, &cluster, &w);
        if policy != "mps" {
            // One job per whole GPU, FIFO: the same schedule as nopart.
            assert_eq!(r.jobs, nopart.jobs, "{policy}");
        }
    }
}

/// GPU-equivalents: jobs on MIG instances and MPS quotas account GPU-seconds by their share
/// (before: 0 GPU-s, and a series of 0 busy GPUs while every GPU held slices); the series'
/// integral of busy GPU-equivalents is the jobs' GPU-seconds.
#[test]
fn parts_count_as_gpu_equivalents() {
    let cluster = a100_cluster(1, 4).unwrap();
    let w = workload::miso_workload(1, 60.0, 30.0, workload::ArrivalOrder::Shuffled).unwrap();
    for policy in ["static", "miso", "mps"] {
        let r = run_mixed(policy, &cluster, &w);
        assert!(r.jobs.iter().all(|j| j.gpu_secs > 0.0), "{policy}");
        let series = &r.timeseries;
        assert!(series.iter().any(|s| s.part_units > 0), "{policy}");
        let integral: f64 = series
            .windows(2)
            .map(|w| w[0].gpu_equiv() * w[1].time.saturating_since(w[0].time).as_secs_f64())
            .sum();
        let gpu_secs: f64 = r.jobs.iter().map(|j| j.gpu_secs).sum();
        assert!(
            (integral - gpu_secs).abs() <= 1e-6 * gpu_secs,
            "{policy}: series {integral} vs jobs {gpu_secs}"
        );
        // While jobs run, some GPU-equivalents are busy.
        for s in series.iter().filter(|s| s.running > 0) {
            assert!(s.gpu_equiv() > 0.0, "{policy} at {}: {s:?}", s.time);
        }
        assert!(r.summary.gpu_util > 0.0 && r.summary.gpu_util <= 1.0 + 1e-9);
        let mean = integral / (r.summary.makespan_s * 4.0);
        assert!(
            (r.summary.gpu_util - mean).abs() < 1e-9,
            "{policy}: {} vs {mean}",
            r.summary.gpu_util
        );
    }
}
