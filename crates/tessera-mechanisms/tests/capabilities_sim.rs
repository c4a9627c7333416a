//! Every registered policy's declared capabilities against running it: on a tiny input per
//! capability, a policy the check lets through runs to the end with every job finished as it
//! asked (seen on the allocations the policy hands out) and every service request served; a
//! policy declaring a capability is run on some input that asks for it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tessera_mechanisms::capabilities::{check_support, demands, CheckOptions};
use tessera_mechanisms::{
    build_policy, build_truth, mechanism_of_policy, policies, serving_setup, TruthOptions,
};
use tessera_model::{
    Allocation, Bytes, Cluster, GpuCatalog, GpuDemand, GpuPart, GpuShareRequest, InferenceService,
    JobId, MigRequest, MilliCpu, ServiceId, SimDuration, SimTime, TrainingJob, Workload,
};
use tessera_perf::TraceThroughput;
use tessera_sched::{Action, Capability, ClusterView, JobChange, Policy, PolicyOptions, Trigger};
use tessera_sim::{FailureSpec, SimConfig, Simulation};

/// What a policy handed out: job and instance allocations, in order.
#[derive(Default)]
struct Seen {
    jobs: BTreeMap<JobId, Vec<Allocation>>,
    instances: BTreeMap<ServiceId, Vec<Allocation>>,
}

/// A policy recording every allocation the inner one hands out.
struct Recorder {
    inner: Box<dyn Policy>,
    seen: Arc<Mutex<Seen>>,
}

impl Policy for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn round_length(&self) -> Option<SimDuration> {
        self.inner.round_length()
    }
    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        self.inner.schedule(view, actions);
        let mut seen = self.seen.lock().unwrap();
        for a in actions.iter() {
            match a {
                Action::Start { job, allocation }
                | Action::Resize { job, allocation }
                | Action::Retune { job, allocation } => {
                    seen.jobs.entry(*job).or_default().push(allocation.clone())
                }
                Action::ScaleOut {
                    service,
                    allocation,
                }
                | Action::RetuneInstance {
                    service,
                    allocation,
                    ..
                } => seen
                    .instances
                    .entry(*service)
                    .or_default()
                    .push(allocation.clone()),
                _ => {}
            }
        }
    }
    fn wakeup(&self) -> Option<SimTime> {
        self.inner.wakeup()
    }
    fn stats(&self) -> Vec<(String, f64)> {
        self.inner.stats()
    }
    fn track_jobs(&mut self) -> bool {
        self.inner.track_jobs()
    }
    fn observe(&mut self, change: JobChange<'_>) {
        self.inner.observe(change)
    }
    fn follows_progress(&self) -> bool {
        self.inner.follows_progress()
    }
    fn reads_running_progress(&self, trigger: &Trigger) -> bool {
        self.inner.reads_running_progress(trigger)
    }
    fn may_act(&self, trigger: &Trigger) -> bool {
        self.inner.may_act(trigger)
    }
}

fn cluster(groups: &[(&str, u32, &str, u32)]) -> Cluster {
    let mut yaml = String::from(
        "apiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: t\nspec:\n  nodeGroups:\n",
    );
    for (name, count, gpu, per) in groups {
        yaml.push_str(&format!(
            "    - {{name: {name}, count: {count}, gpu: {gpu}, gpusPerNode: {per}, cpus: 64, memory: 512Gi}}\n"
        ));
    }
    Cluster::from_yaml(&yaml, &GpuCatalog::builtin()).unwrap()
}

fn job(name: &str, submit: u64, gpus: u32, secs: u64) -> TrainingJob {
    let mut j = TrainingJob::simple(
        0,
        SimTime::from_secs(submit),
        gpus,
        SimDuration::from_secs(secs),
    );
    j.name = name.into();
    j
}

fn service(quota: bool) -> InferenceService {
    let mut s = InferenceService::simple("svc", SimTime::ZERO, SimTime::from_secs(60), 5.0);
    s.model = "bert-base".into();
    if quota {
        s.instance.gpu = GpuDemand::Quota {
            sm_request: 300,
            sm_limit: 600,
        };
    }
    s
}

/// A model MISO's slice table knows (jobs of other models do not fit its slices).
const MIG_MODEL: &str = "resnet_train128";

/// A tiny input asking for `capability` (and what it cannot go without).
struct Case {
    capability: Capability,
    cluster: Cluster,
    workload: Workload,
    failures: bool,
}

fn cases() -> Vec<Case> {
    let a100 = || cluster(&[("a100", 2, "A100-80GB", 4)]);
    let mixed = || {
        cluster(&[
            ("a100", 1, "A100-80GB", 4),
            ("v100", 1, "V100-32GB", 4),
            ("a10", 1, "A10", 2),
        ])
    };
    let model = |c: &Cluster, n: &str| c.catalog.find(n).unwrap();
    let plain = || {
        Workload::new(vec![
            job("p0", 0, 1, 300),
            job("p1", 10, 1, 200),
            job("p2", 20, 1, 100),
        ])
    };
    let mut out = Vec::new();
    let c = mixed();
    let mut typed = vec![
        job("t0", 0, 1, 300),
        job("t1", 10, 1, 200),
        job("t2", 20, 1, 100),
    ];
    typed[0].gpu_types = vec![model(&c, "V100-32GB")];
    typed[1].gpu_types = vec![model(&c, "A100-80GB")];
    typed[2].gpu_types = vec![model(&c, "A10"), model(&c, "V100-32GB")];
    out.push(Case {
        capability: Capability::GpuTypes,
        cluster: c,
        workload: Workload::new(typed),
        failures: false,
    });
    out.push(Case {
        capability: Capability::MixedNodes,
        cluster: mixed(),
        workload: plain(),
        failures: false,
    });
    out.push(Case {
        capability: Capability::MultiGpu,
        cluster: a100(),
        workload: Workload::new(vec![job("m0", 0, 2, 300), job("m1", 10, 4, 200)]),
        failures: false,
    });
    out.push(Case {
        capability: Capability::MultiNode,
        cluster: a100(),
        workload: Workload::new(vec![job("n0", 0, 8, 300), job("n1", 400, 6, 200)]),
        failures: false,
    });
    let mut fixed = vec![
        job("f0", 0, 1, 300),
        job("f1", 10, 1, 200),
        job("f2", 20, 1, 100),
    ];
    for j in &mut fixed {
        j.model = MIG_MODEL.into();
    }
    fixed[0].mig = Some(MigRequest::Profile("3g.40gb".into()));
    fixed[1].mig = Some(MigRequest::Profile("3g.40gb".into()));
    out.push(Case {
        capability: Capability::MigProfile,
        cluster: cluster(&[("a100", 1, "A100-80GB", 2)]),
        workload: Workload::new(fixed),
        failures: false,
    });
    // More jobs than GPUs, arriving one by one: a MIG policy partitions to hold them.
    let any: Vec<TrainingJob> = (0..4)
        .map(|i| {
            let mut j = job(&format!("a{i}"), 10 * i, 1, 300);
            j.mig = Some(MigRequest::Any);
            j.model = MIG_MODEL.into();
            j
        })
        .collect();
    out.push(Case {
        capability: Capability::MigAny,
        cluster: cluster(&[("a100", 1, "A100-80GB", 1)]),
        workload: Workload::new(any),
        failures: false,
    });
    let mut shares = vec![job("s0", 0, 1, 300), job("s1", 10, 1, 200)];
    for (j, p) in shares.iter_mut().zip([300u16, 500]) {
        j.gpu_share = Some(GpuShareRequest {
            sm_permille: p,
            memory: Some(Bytes::from_gib(8)),
        });
    }
    out.push(Case {
        capability: Capability::GpuShare,
        cluster: a100(),
        workload: Workload::new(shares),
        failures: false,
    });
    let mut heavy = vec![job("c0", 0, 1, 300), job("c1", 10, 2, 200)];
    heavy[0].cpu = Some(MilliCpu::from_cores(40));
    heavy[0].memory = Some(Bytes::from_gib(300));
    heavy[1].cpu = Some(MilliCpu::from_cores(30));
    out.push(Case {
        capability: Capability::CpuMemory,
        cluster: a100(),
        workload: Workload::new(heavy),
        failures: false,
    });
    out.push(Case {
        capability: Capability::Services,
        cluster: a100(),
        workload: Workload::with_services(Vec::new(), vec![service(false)]),
        failures: false,
    });
    out.push(Case {
        capability: Capability::ServiceQuotas,
        cluster: a100(),
        workload: Workload::with_services(Vec::new(), vec![service(true)]),
        failures: false,
    });
    out.push(Case {
        capability: Capability::Failures,
        cluster: a100(),
        workload: plain(),
        failures: true,
    });
    out.push(Case {
        capability: Capability::NonMigGpus,
        cluster: cluster(&[("v100", 2, "V100-32GB", 4)]),
        workload: plain(),
        failures: false,
    });
    out
}

/// Runs `policy` on `case` and checks every request was honoured; the error says which not.
fn run_checked(policy: &str, case: &Case) -> Result<(), String> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let inner = build_policy(policy, &PolicyOptions::default()).map_err(|e| e.to_string())?;
    let recorder = Box::new(Recorder {
        inner,
        seen: Arc::clone(&seen),
    });
    let mut config = SimConfig::default();
    // The truth `--perf auto` gives the policy alone (its mechanism's), as the CLI runs it.
    let preferred = mechanism_of_policy(policy)
        .and_then(|m| m.preferred_truth())
        .and_then(|n| build_truth(n, &TruthOptions::default()));
    let trace: Arc<dyn tessera_perf::ThroughputModel> = match &preferred {
        Some(t) => {
            config.profiler = t.profiler.clone();
            Arc::clone(&t.model)
        }
        None => Arc::new(TraceThroughput),
    };
    let mut truth: &dyn tessera_perf::ThroughputModel = trace.as_ref();
    let setup = serving_setup(policy)
        .transpose()
        .map_err(|e| e.to_string())?;
    if let Some(s) = &setup {
        s.apply(&mut config, &case.workload, 1);
        if let Some(t) = &s.truth {
            config.profiler = None;
            truth = t.as_ref();
        }
    }
    if case.failures {
        let text = "kind: Failures\nevents:\n  - { time: 50, node: a100-0, duration: 200 }\n  - { time: 60, node: a100-1, gpu: 1, duration: 100 }\n";
        config.failures = Some(Arc::new(
            FailureSpec::parse(text, &case.cluster).map_err(|e| e.to_string())?,
        ));
    }
    let mut sim = Simulation::new(&case.cluster, &case.workload, truth, recorder, config);
    let mut steps = 0u64;
    while sim.step().map_err(|e| e.to_string())? {
        steps += 1;
        if steps > 2_000_000 {
            return Err("no end after 2,000,000 events".into());
        }
    }
    let report = sim.into_report();
    if report.summary.finished != case.workload.len() {
        return Err(format!(
            "{} of {} jobs finished ({:?})",
            report.summary.finished,
            case.workload.len(),
            report.jobs.iter().map(|j| &j.outcome).collect::<Vec<_>>()
        ));
    }
    for s in &report.summary.services {
        if s.dropped > 0 || s.served < s.requests || s.requests == 0 {
            return Err(format!(
                "service {}: {} of {} requests served, {} dropped",
                s.service, s.served, s.requests, s.dropped
            ));
        }
    }
    let seen = seen.lock().unwrap();
    for j in case.workload.jobs() {
        let allocs = seen.jobs.get(&j.id).map(Vec::as_slice).unwrap_or(&[]);
        let name = &j.name;
        if j.gpus > 1 && allocs.iter().map(Allocation::devices).max().unwrap_or(0) < 2 {
            return Err(format!("job {name} of {} GPUs never held two", j.gpus));
        }
        let largest = case.cluster.nodes.iter().map(|n| n.gpus).max().unwrap_or(0);
        if j.gpus > largest && !allocs.iter().any(|a| a.shares.len() > 1) {
            return Err(format!("job {name} of {} GPUs never spanned nodes", j.gpus));
        }
        for a in allocs {
            if let Some(MigRequest::Profile(p)) = &j.mig {
                let ok = a.shares.iter().all(|s| {
                    let Some(GpuPart::Mig(inst)) = s.devices.map(|d| d.part) else {
                        return false;
                    };
                    let node = &case.cluster.nodes[s.node.index()];
                    case.cluster
                        .catalog
                        .mig_geometry(node.gpu)
                        .and_then(|g| g.profile(inst))
                        .is_some_and(|q| &q.name == p)
                });
                if !ok {
                    return Err(format!("job {name} asking for {p} held {a:?}"));
                }
            }
            if let Some(share) = j.gpu_share {
                match a.part() {
                    Some(GpuPart::Quota { sm_request, .. }) if sm_request >= share.sm_permille => {}
                    other => {
                        return Err(format!(
                            "job {name} asking for {} permille held {other:?}",
                            share.sm_permille
                        ))
                    }
                }
            }
            if j.cpu.is_some_and(|c| a.cpu() < c) || j.memory.is_some_and(|m| a.memory() < m) {
                return Err(format!(
                    "job {name} asking for {:?} CPU, {:?} memory held {:?} and {:?}",
                    j.cpu,
                    j.memory,
                    a.cpu(),
                    a.memory()
                ));
            }
        }
    }
    for s in case.workload.services() {
        if let GpuDemand::Quota { sm_request, .. } = s.instance.gpu {
            let allocs = seen.instances.get(&s.id).map(Vec::as_slice).unwrap_or(&[]);
            for a in allocs {
                if !matches!(a.part(), Some(GpuPart::Quota { sm_request: r, .. }) if r >= sm_request)
                {
                    return Err(format!("an instance of {} held {:?}", s.name, a.part()));
                }
            }
        }
    }
    if case.capability == Capability::MigAny
        && !seen
            .jobs
            .values()
            .flatten()
            .any(|a| matches!(a.part(), Some(GpuPart::Mig(_))))
    {
        return Err("no mig-any job ever ran on a MIG instance".into());
    }
    Ok(())
}

#[test]
fn every_policy_does_what_it_declares() {
    let cases = cases();
    let mut failures = Vec::new();
    let mut exercised: BTreeSet<(&str, Capability)> = BTreeSet::new();
    for (_, info) in policies() {
        for case in &cases {
            let options = CheckOptions {
                lines: None,
                failures: case.failures,
            };
            let asked: BTreeSet<Capability> = demands(&case.cluster, &case.workload, &options)
                .into_iter()
                .map(|d| d.capability)
                .collect();
            assert!(
                asked.contains(&case.capability),
                "the {} case does not ask for it: {asked:?}",
                case.capability
            );
            let missing =
                check_support(info.name, &case.cluster, &case.workload, &options).unwrap();
            for d in &missing {
                assert!(!info.capabilities.honours(d.capability));
            }
            if !missing.is_empty() {
                assert!(!asked.iter().all(|&c| info.capabilities.honours(c)));
                continue;
            }
            match run_checked(info.name, case) {
                Ok(()) => exercised.extend(asked.iter().map(|&c| (info.name, c))),
                Err(e) => failures.push(format!("{} on {}: {e}", info.name, case.capability)),
            }
        }
    }
    for (_, info) in policies() {
        for c in info.capabilities.iter() {
            if !exercised.contains(&(info.name, c)) {
                failures.push(format!("{} declares {c} but no case ran it", info.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
