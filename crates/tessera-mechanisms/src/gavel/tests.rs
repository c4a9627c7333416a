//! Policies on the Gavel matrix, driven by the simulator: invariants after every step, and
//! JCT against FIFO on a Philly-derived Gavel-format fixture.

use tessera_model::{Cluster, GpuCatalog, GpuModelId, Workload};
use tessera_sched::PolicyOptions;

use super::*;

/// The first 80 jobs of Gavel's `traces/msr/seed=0/0e4a51.trace` (see data/README.md).
const FIXTURE: &str = include_str!("data/philly_0e4a51_first80.trace");

fn cluster() -> Cluster {
    Cluster::from_yaml(&gavel_108_yaml(), &GpuCatalog::builtin()).unwrap()
}

#[test]
fn builtin_cluster_has_36_gpus_of_each_type() {
    let c = cluster();
    let types = matrix::gpu_types(&c);
    assert_eq!(types.len(), 3);
    assert!(types.iter().all(|t| t.1 == 36), "{types:?}");
    let names: Vec<&str> = types
        .iter()
        .map(|t| c.catalog.get(t.0).name.as_str())
        .collect();
    assert_eq!(names, ["K80", "P100", "V100-16GB"]);
}

#[test]
fn every_policy_builds_and_reports_its_name() {
    for p in POLICIES {
        let built = Gavel
            .build_policy(p.name, &PolicyOptions::default())
            .unwrap();
        assert_eq!(built.name(), p.name);
    }
    assert!(Gavel
        .build_policy("fifo", &PolicyOptions::default())
        .is_none());
    assert!(Gavel
        .build_truth("gavel", &TruthOptions::default())
        .is_some());
}

#[cfg(feature = "experiments")]
mod sim {
    use super::*;
    use tessera_sim::{SimConfig, SimReport, Simulation};
    use tessera_trace::{parse_trace, with_arrivals, Arrivals, ReadOptions, TraceFormat};

    pub(super) fn fixture() -> Workload {
        parse_trace(
            FIXTURE,
            "fixture.trace",
            Some(TraceFormat::Gavel),
            &GpuCatalog::builtin(),
            &ReadOptions::default(),
        )
        .unwrap()
        .workload
    }

    /// Runs `policy` under the gavel truth, checking the engine's invariants and that every
    /// running job holds GPUs of one type it may use, after every step.
    pub(super) fn run(cluster: &Cluster, workload: &Workload, policy: &str) -> SimReport {
        let truth = Gavel
            .build_truth("gavel", &TruthOptions::default())
            .unwrap();
        let config = SimConfig {
            profiler: truth.profiler.clone(),
            record_timeseries: false,
            ..SimConfig::default()
        };
        let built = crate::build_policy(policy, &PolicyOptions::default()).unwrap();
        let mut sim = Simulation::new(cluster, workload, truth.model.as_ref(), built, config);
        while sim.step().unwrap() {
            sim.check_invariants().unwrap();
            for job in sim.active() {
                let Some(a) = &job.allocation else { continue };
                let gpus: Vec<GpuModelId> = a
                    .shares
                    .iter()
                    .map(|s| cluster.nodes[s.node.index()].gpu)
                    .collect();
                assert!(
                    gpus.windows(2).all(|w| w[0] == w[1]),
                    "{policy}: mixed types"
                );
                let spec = &workload.jobs()[job.id.index()];
                assert!(
                    spec.gpu_types.is_empty() || spec.gpu_types.contains(&gpus[0]),
                    "{policy}: type not allowed"
                );
            }
        }
        sim.into_report()
    }

    #[test]
    fn policies_keep_invariants_and_finish_every_job() {
        let c = cluster();
        // Compressed arrivals so that jobs compete; a few jobs restricted to one type.
        let mut w = with_arrivals(&fixture(), Arrivals::Poisson { jobs_per_hour: 4.0 }, 3);
        let p100 = c.groups[1].gpu;
        let mut jobs = w.jobs().to_vec();
        for j in jobs.iter_mut().step_by(7) {
            j.gpu_types = vec![p100];
        }
        w = Workload::new(jobs);
        for policy in ["gavel", "gavel-max-sum", "sia", "elastic", "fifo"] {
            let r = run(&c, &w, policy);
            assert_eq!(r.summary.finished, w.len(), "{policy}");
            if policy.starts_with("gavel") {
                let solves = r
                    .policy_stats
                    .iter()
                    .find(|(k, _)| k == "lp_solves")
                    .map(|x| x.1);
                assert!(solves.is_some_and(|s| s > 0.0), "{policy}");
            }
            if policy == "sia" {
                assert!(r
                    .policy_stats
                    .iter()
                    .any(|(k, _)| k == "ilp_time_limit_hits"));
            }
        }
    }

    /// Gavel places jobs on the types they run fastest on; FIFO takes GPUs in cluster order
    /// (K80 first). On the fixture with Poisson arrivals, Gavel's average JCT is no worse.
    #[test]
    fn gavel_jct_is_at_most_fifos() {
        let c = cluster();
        for seed in 1..=3 {
            let w = with_arrivals(&fixture(), Arrivals::Poisson { jobs_per_hour: 4.0 }, seed);
            let fifo = run(&c, &w, "fifo").summary;
            let gavel = run(&c, &w, "gavel").summary;
            assert_eq!(fifo.finished, w.len());
            assert_eq!(gavel.finished, w.len());
            assert!(
                gavel.avg_jct_s <= fifo.avg_jct_s,
                "seed {seed}: gavel {} s > fifo {} s",
                gavel.avg_jct_s,
                fifo.avg_jct_s
            );
        }
    }
}

#[cfg(feature = "experiments")]
mod lp {
    use super::*;
    use crate::gavel::bench::{one_round, queued_jobs, scaled_cluster};
    use tessera_sched::Action;

    fn starts(policy: &str, jobs: usize) -> (Vec<Action>, Vec<(String, f64)>) {
        let c = scaled_cluster(1).unwrap();
        let (w, active) = queued_jobs(&c, jobs, 7);
        let mut p = crate::build_policy(policy, &PolicyOptions::default()).unwrap();
        let (_, n, stats) = one_round(p.as_mut(), &c, &w, &active);
        // Replay to get the actions themselves.
        let state = tessera_sched::ClusterState::new(&c);
        let free: Vec<_> = (0..c.nodes.len())
            .map(|i| c.capacity(tessera_model::NodeId(i as u32)))
            .collect();
        let view = tessera_sched::ClusterView {
            now: tessera_model::SimTime::ZERO,
            trigger: tessera_sched::Trigger {
                round: true,
                ..Default::default()
            },
            cluster: &c,
            free: &free,
            state: &state,
            jobs: w.jobs(),
            active: &active,
            services: &[],
        };
        let mut p = crate::build_policy(policy, &PolicyOptions::default()).unwrap();
        let mut actions = Vec::new();
        p.schedule(&view, &mut actions);
        assert_eq!(actions.len(), n, "{policy}: deterministic");
        (actions, stats)
    }

    #[test]
    fn a_round_never_over_allocates_and_uses_the_cluster() {
        for policy in ["gavel", "gavel-max-sum", "sia", "elastic"] {
            for jobs in [10, 200] {
                let (actions, _) = starts(policy, jobs);
                let c = scaled_cluster(1).unwrap();
                let mut used = vec![0u32; c.nodes.len()];
                for a in &actions {
                    let Action::Start { allocation, .. } = a else {
                        panic!("{policy}: only starts on an idle cluster, got {a:?}");
                    };
                    for s in &allocation.shares {
                        used[s.node.index()] += s.gpus;
                    }
                }
                for (n, u) in used.iter().enumerate() {
                    assert!(*u <= c.nodes[n].gpus, "{policy}: node {n} over-allocated");
                }
                let total: u32 = used.iter().sum();
                // 200 jobs want far more than 108 GPUs: nearly all must be busy.
                if jobs == 200 {
                    assert!(total >= 100, "{policy}: only {total} GPUs used");
                }
            }
        }
    }
}

/// The Crius repro at reduced scale (one seed, 300 jobs at 90 jobs/h): Crius's average JCT
/// is below Gavel's and Sia's, and the report compares Crius with each baseline.
#[cfg(feature = "experiments")]
#[test]
fn crius_repro_at_reduced_scale_orders_crius_before_gavel_and_sia() {
    use crate::crius::repro::CriusRepro;
    use crate::experiment::{Experiment, ExperimentArgs, RunContext};

    let args = ExperimentArgs::new(
        CriusRepro.params(),
        [
            ("seeds", "1"),
            ("jobs", "300"),
            ("load", "90"),
            ("policies", "fcfs,crius,gavel,sia"),
        ],
    )
    .unwrap();
    let out = CriusRepro.run(&args, &RunContext::quiet(2)).unwrap();
    let p = &out.summary["policies"];
    let jct = |i: usize| p[i]["avg_jct_h"].as_f64().unwrap();
    assert_eq!(p[2]["policy"], "gavel");
    assert_eq!(p[3]["policy"], "sia");
    assert!(jct(1) < jct(2), "crius {} h vs gavel {} h", jct(1), jct(2));
    assert!(jct(1) < jct(3), "crius {} h vs sia {} h", jct(1), jct(3));
    assert_eq!(out.summary["crius_vs"].as_array().map(Vec::len), Some(3));
    assert!(out.text.contains("crius vs gavel: avg throughput"));
    // Solve times are reported per run.
    let runs = out.summary["runs"].as_array().unwrap();
    assert!(runs
        .iter()
        .any(|r| r["policy_stats"]["lp_solve_ms_p99"].is_number()));
    assert!(runs
        .iter()
        .any(|r| r["policy_stats"]["ilp_solve_ms_max"].is_number()));
}
