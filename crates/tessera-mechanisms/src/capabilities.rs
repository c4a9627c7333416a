//! What a run asks of a policy, checked against what the policy declares it honours
//! ([`PolicyInfo::capabilities`]) before the first event, by every driver (the simulator and
//! the daemon alike): docs/capabilities.md.
//!
//! - [`demands`] lists what a cluster, a workload and the run's failures ask, element by
//!   element ([`job_demands`] and [`service_demands`] for one submission);
//! - [`check_support`] keeps what a policy would not honour, [`honoured_by`] names the policies
//!   that would, [`refusal`] words the refusal;
//! - [`relax`] is the explicit way past a refusal: a copy of the workload with what the
//!   policy would not honour removed or relaxed, the jobs it could never run, and a count of
//!   what was ignored and how.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use tessera_model::{
    Bytes, Cluster, GpuDemand, GpuModelId, InferenceService, JobId, MigRequest, MilliCpu,
    ServiceId, TrainingJob, Workload,
};
use tessera_sched::{Capabilities, Capability, PolicyError, PolicyInfo, PolicyOptions};

/// What a run brings besides its cluster and workload.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckOptions<'a> {
    /// Each job's line in its trace, by job id (`LoadedTrace::lines`), for messages.
    pub lines: Option<&'a [u64]>,
    /// Nodes or GPUs fail during the run.
    pub failures: bool,
}

/// The part of the inputs a demand comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Element {
    /// A training job.
    Job {
        /// Its id in the workload.
        id: JobId,
        /// Its name in the trace.
        name: Arc<str>,
        /// Its line in the trace, when known.
        line: Option<u64>,
    },
    /// An inference service.
    Service {
        /// Its id in the workload.
        id: ServiceId,
        /// Its name.
        name: String,
    },
    /// The cluster.
    Cluster {
        /// Its name.
        name: String,
    },
    /// The run's failure injection.
    Failures,
}

/// A name as messages show it: bare when it is a plain word, quoted and escaped otherwise (no
/// raw control character from an input reaches a terminal).
pub(crate) fn shown(name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && c != '"');
    if plain {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}

impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Element::Job { name, line, .. } => {
                write!(f, "job {}", shown(name))?;
                if let Some(l) = line {
                    write!(f, " (line {l})")?;
                }
                Ok(())
            }
            Element::Service { name, .. } => write!(f, "service {}", shown(name)),
            Element::Cluster { name } => write!(f, "cluster {}", shown(name)),
            Element::Failures => f.write_str("the run"),
        }
    }
}

/// One thing an element of the inputs asks of a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    /// The capability it needs.
    pub capability: Capability,
    /// Where it comes from.
    pub element: Element,
    /// What it asks, reading after the element: `asks for gpuTypes [H100-80GB]`.
    pub detail: String,
}

impl fmt::Display for Demand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.element, self.detail)
    }
}

/// Whether a GPU model can be partitioned with MIG.
fn is_mig(cluster: &Cluster, gpu: GpuModelId) -> bool {
    cluster.catalog.mig_geometry(gpu).is_some()
}

/// The GPU models of the cluster's nodes with GPUs, in group order, without repeats.
fn models(cluster: &Cluster) -> Vec<GpuModelId> {
    let mut out: Vec<GpuModelId> = Vec::new();
    for g in &cluster.groups {
        if g.gpus_per_node > 0 && g.count > 0 && !out.contains(&g.gpu) {
            out.push(g.gpu);
        }
    }
    out
}

/// Whether the cluster's nodes differ: several GPU models, or different GPUs per node.
fn mixed(cluster: &Cluster) -> Option<String> {
    let models = models(cluster);
    if models.len() > 1 {
        let names: Vec<&str> = models
            .iter()
            .map(|&m| cluster.catalog.get(m).name.as_str())
            .collect();
        return Some(format!("has several GPU models ({})", names.join(", ")));
    }
    let mut sizes: Vec<u32> = cluster
        .groups
        .iter()
        .filter(|g| g.count > 0 && g.gpus_per_node > 0)
        .map(|g| g.gpus_per_node)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.len() > 1 {
        let s: Vec<String> = sizes.iter().map(u32::to_string).collect();
        return Some(format!(
            "has nodes of different sizes ({} GPUs)",
            s.join(", ")
        ));
    }
    // Same GPUs everywhere but not the same CPUs or memory: a policy that sees every node as
    // the smallest one would aim a large request at a node that can never hold it.
    let (cpu, memory) = smallest_host(cluster);
    cluster
        .groups
        .iter()
        .filter(|g| g.count > 0 && g.gpus_per_node > 0)
        .any(|g| Some(g.cpu) != cpu || Some(g.memory) != memory)
        .then(|| "has nodes of different CPUs or memory".to_string())
}

/// The least CPU and the least memory a node of the cluster has (`None` without nodes).
fn smallest_host(cluster: &Cluster) -> (Option<MilliCpu>, Option<Bytes>) {
    let groups = || {
        cluster
            .groups
            .iter()
            .filter(|g| g.count > 0 && g.gpus_per_node > 0)
    };
    (
        groups().map(|g| g.cpu).min(),
        groups().map(|g| g.memory).min(),
    )
}

fn type_names(cluster: &Cluster, ids: &[GpuModelId]) -> String {
    let names: Vec<&str> = ids
        .iter()
        .map(|&m| cluster.catalog.get(m).name.as_str())
        .collect();
    format!("[{}]", names.join(", "))
}

/// What one training job asks beyond a single whole GPU, on this cluster. GPU types count
/// only when they exclude a model the cluster has; the node size only against nodes of the
/// job's types.
pub fn job_demands(cluster: &Cluster, job: &TrainingJob, line: Option<u64>) -> Vec<Demand> {
    let element = || Element::Job {
        id: job.id,
        name: job.name.clone(),
        line,
    };
    let mut out = Vec::new();
    let mut push = |capability, detail: String| {
        out.push(Demand {
            capability,
            element: element(),
            detail,
        })
    };
    let present = models(cluster);
    let allowed = |m: &GpuModelId| job.gpu_types.is_empty() || job.gpu_types.contains(m);
    if !job.gpu_types.is_empty() && present.iter().any(|m| !allowed(m)) {
        push(
            Capability::GpuTypes,
            format!("asks for gpuTypes {}", type_names(cluster, &job.gpu_types)),
        );
    }
    let nodes: Vec<u32> = cluster
        .groups
        .iter()
        .filter(|g| g.count > 0 && g.gpus_per_node > 0 && allowed(&g.gpu))
        .map(|g| g.gpus_per_node)
        .collect();
    let largest = nodes.iter().copied().max().unwrap_or(0);
    let smallest = cluster
        .groups
        .iter()
        .filter(|g| g.count > 0 && g.gpus_per_node > 0)
        .map(|g| g.gpus_per_node)
        .min()
        .unwrap_or(0);
    if job.gpus > 1 {
        push(Capability::MultiGpu, format!("asks for {} GPUs", job.gpus));
        if largest > 0 && job.gpus > largest {
            push(
                Capability::MultiNode,
                format!(
                    "asks for {} GPUs, more than any node of its GPU types has ({largest})",
                    job.gpus
                ),
            );
        }
        if mixed(cluster).is_some() && job.gpus > smallest && job.gpus <= largest {
            push(
                Capability::MixedNodes,
                format!(
                    "asks for {} GPUs, more than the smallest node has ({smallest})",
                    job.gpus
                ),
            );
        }
    }
    // CPU or memory beyond the smallest node's, on a cluster whose nodes differ: only a policy
    // that tells nodes apart finds the nodes that hold it.
    if mixed(cluster).is_some() && job.gpus <= smallest {
        let (cpu, memory) = smallest_host(cluster);
        let over_cpu = job.cpu.zip(cpu).filter(|(asked, least)| asked > least);
        let over_memory = job
            .memory
            .zip(memory)
            .filter(|(asked, least)| asked > least);
        if let Some((asked, least)) = over_cpu {
            push(
                Capability::MixedNodes,
                format!("asks for {asked} CPU, more than the smallest node has ({least})"),
            );
        } else if let Some((asked, least)) = over_memory {
            push(
                Capability::MixedNodes,
                format!("asks for {asked} of memory, more than the smallest node has ({least})"),
            );
        }
    }
    match &job.mig {
        Some(MigRequest::Profile(p)) => {
            push(Capability::MigProfile, format!("asks for MIG profile {p}"))
        }
        Some(MigRequest::Any) => push(
            Capability::MigAny,
            "asks for a MIG instance (nvidia.com/mig-any)".to_string(),
        ),
        None => {}
    }
    if let Some(share) = job.gpu_share {
        push(
            Capability::GpuShare,
            format!(
                "asks for {:.1}% of one GPU (gpu_share {})",
                f64::from(share.sm_permille) / 10.0,
                share.sm_permille
            ),
        );
    }
    if job.cpu.is_some() || job.memory.is_some() {
        let mut parts = Vec::new();
        if let Some(c) = job.cpu {
            parts.push(format!("{} CPUs", c.as_cores()));
        }
        if let Some(m) = job.memory {
            parts.push(format!("{:.1} GiB of memory", m.as_gib()));
        }
        push(
            Capability::CpuMemory,
            format!("asks for {}", parts.join(" and ")),
        );
    }
    let mig_models: Vec<GpuModelId> = present
        .iter()
        .copied()
        .filter(|&m| is_mig(cluster, m))
        .collect();
    if !mig_models.is_empty() && !mig_models.iter().any(allowed) {
        push(
            Capability::NonMigGpus,
            format!(
                "may run only on GPUs without MIG ({})",
                type_names(cluster, &job.gpu_types)
            ),
        );
    }
    out
}

/// What one inference service asks, on this cluster.
pub fn service_demands(cluster: &Cluster, service: &InferenceService) -> Vec<Demand> {
    let element = || Element::Service {
        id: service.id,
        name: service.name.clone(),
    };
    let mut out = vec![Demand {
        capability: Capability::Services,
        element: element(),
        detail: format!(
            "is an inference service ({} s to {} s)",
            service.start.as_secs_f64(),
            service.end.as_secs_f64()
        ),
    }];
    if let GpuDemand::Quota {
        sm_request,
        sm_limit,
    } = service.instance.gpu
    {
        out.push(Demand {
            capability: Capability::ServiceQuotas,
            element: element(),
            detail: format!(
                "asks for a GPU quota per instance ({:.1}% request, {:.1}% limit)",
                f64::from(sm_request) / 10.0,
                f64::from(sm_limit) / 10.0
            ),
        });
    }
    let present = models(cluster);
    if !service.gpu_types.is_empty() && present.iter().any(|m| !service.gpu_types.contains(m)) {
        out.push(Demand {
            capability: Capability::GpuTypes,
            element: element(),
            detail: format!(
                "asks for gpuTypes {}",
                type_names(cluster, &service.gpu_types)
            ),
        });
    }
    out
}

/// What the cluster itself asks: mixed nodes, and MIG-capable GPUs for a policy placing only
/// on MIG instances.
pub fn cluster_demands(cluster: &Cluster) -> Vec<Demand> {
    let element = || Element::Cluster {
        name: cluster.name.clone(),
    };
    let mut out = Vec::new();
    if let Some(detail) = mixed(cluster) {
        out.push(Demand {
            capability: Capability::MixedNodes,
            element: element(),
            detail,
        });
    }
    let present = models(cluster);
    if !present.is_empty() && !present.iter().any(|&m| is_mig(cluster, m)) {
        out.push(Demand {
            capability: Capability::NonMigGpus,
            element: element(),
            detail: "has no MIG-capable GPU".to_string(),
        });
    }
    out
}

/// Everything the inputs ask, in order: the cluster, the run, the jobs (by id), the services.
pub fn demands(cluster: &Cluster, workload: &Workload, options: &CheckOptions<'_>) -> Vec<Demand> {
    let mut out = cluster_demands(cluster);
    if options.failures {
        out.push(Demand {
            capability: Capability::Failures,
            element: Element::Failures,
            detail: "injects node and GPU failures".to_string(),
        });
    }
    for job in workload.jobs() {
        let line = options.lines.and_then(|l| l.get(job.id.index())).copied();
        out.extend(job_demands(cluster, job, line));
    }
    for s in workload.services() {
        out.extend(service_demands(cluster, s));
    }
    out
}

/// The registry entry of a policy name (case-insensitive; aliases such as `synergy` and
/// variants such as `static:4-3` resolve to the entry of the policy they build).
pub fn policy_info(name: &str) -> Result<&'static PolicyInfo, PolicyError> {
    let find = |n: &str| {
        crate::policies()
            .map(|(_, p)| p)
            .find(|p| p.name.eq_ignore_ascii_case(n.trim()))
    };
    if let Some(p) = find(name) {
        return Ok(p);
    }
    let built = crate::build_policy(name, &PolicyOptions::default())?;
    find(built.name())
        .or_else(|| {
            built
                .name()
                .split_once(':')
                .and_then(|(base, _)| find(base))
        })
        .ok_or_else(|| PolicyError::BadOptions {
            name: name.to_string(),
            reason: "has no registry entry declaring its capabilities".to_string(),
        })
}

/// What `capabilities` would not honour of `demands`.
pub fn unsupported(capabilities: Capabilities, demands: Vec<Demand>) -> Vec<Demand> {
    demands
        .into_iter()
        .filter(|d| !capabilities.honours(d.capability))
        .collect()
}

/// What policy `policy` would not honour of this cluster, workload and run, element by
/// element (empty: it honours everything asked).
pub fn check_support(
    policy: &str,
    cluster: &Cluster,
    workload: &Workload,
    options: &CheckOptions<'_>,
) -> Result<Vec<Demand>, PolicyError> {
    let info = policy_info(policy)?;
    Ok(unsupported(
        info.capabilities,
        demands(cluster, workload, options),
    ))
}

/// The registered policies that honour `capability`, in registry order.
pub fn honoured_by(capability: Capability) -> Vec<&'static str> {
    crate::policies()
        .filter(|(_, p)| p.capabilities.honours(capability))
        .map(|(_, p)| p.name)
        .collect()
}

/// The reason a driver gives for refusing `policy` on these `unsupported` demands: per
/// capability, the `first` elements (and how many more), and the registered policies
/// that honour it. One line per capability, each starting with two spaces.
pub fn refusal(policy: &str, unsupported: &[Demand], first: usize) -> String {
    let mut by_cap: BTreeMap<Capability, Vec<&Demand>> = BTreeMap::new();
    for d in unsupported {
        by_cap.entry(d.capability).or_default().push(d);
    }
    let mut out = format!(
        "policy {} does not honour {} of what this run asks:",
        shown(policy),
        unsupported.len()
    );
    for (cap, ds) in by_cap {
        let listed: Vec<String> = ds
            .iter()
            .take(first.max(1))
            .map(|d| d.to_string())
            .collect();
        let more = ds.len().saturating_sub(listed.len());
        out.push_str(&format!(
            "\n  {} ({}): {}{}; {}",
            cap.key(),
            cap.about(),
            listed.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            },
            who_honours(cap)
        ));
    }
    out
}

/// `honoured by: a, b` or, when most policies do, `honoured by every policy but: c, d`.
fn who_honours(cap: Capability) -> String {
    let honouring = honoured_by(cap);
    let others: Vec<&str> = crate::policies()
        .map(|(_, p)| p.name)
        .filter(|n| !honouring.contains(n))
        .collect();
    if honouring.is_empty() {
        "honoured by no registered policy".to_string()
    } else if honouring.len() > 8 && others.len() < honouring.len() {
        format!(
            "honoured by every registered policy but: {}",
            others.join(", ")
        )
    } else {
        format!("honoured by: {}", honouring.join(", "))
    }
}

/// How a relaxed run dealt with what its policy would not honour, per capability.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignored {
    /// The capability.
    pub capability: Capability,
    /// How many elements asked for it.
    pub count: usize,
    /// What was done with them.
    pub how: &'static str,
}

/// A workload relaxed for a policy ([`relax`]).
#[derive(Clone, Debug)]
pub struct Relaxed {
    /// The workload with unsupported requests removed or relaxed (jobs keep their ids).
    pub workload: Workload,
    /// Jobs the policy can never run, with the reason: a driver reports them rejected.
    pub rejected: Vec<(JobId, String)>,
    /// Whether the run's failures should be left out.
    pub drop_failures: bool,
    /// Per capability, in [`Capability::ALL`] order: how many elements and how.
    pub ignored: Vec<Ignored>,
}

/// What a relaxed run does with elements asking for `c`.
pub fn relaxation(c: Capability) -> &'static str {
    match c {
        Capability::GpuTypes => "gpuTypes cleared (any GPU model)",
        Capability::MixedNodes => {
            "ran on the cluster as it is; jobs larger than its smallest node rejected"
        }
        Capability::MultiGpu => "jobs of several GPUs rejected",
        Capability::MultiNode => "jobs larger than any node rejected",
        Capability::MigProfile | Capability::MigAny => "left to the policy: a whole GPU",
        Capability::GpuShare => "left to the policy: a whole GPU",
        Capability::CpuMemory => "left to the policy: CPU/memory its own way",
        Capability::Services => "services removed (their requests counted as dropped)",
        Capability::ServiceQuotas => "left to the policy: a whole GPU per instance",
        Capability::Failures => "failures not injected",
        Capability::NonMigGpus => "jobs that can run only without MIG rejected",
    }
}

/// A copy of `workload` that `policy` honours entirely: what it would not honour is
/// relaxed ([`relaxation`] says how), jobs it could never run are listed to be rejected.
pub fn relax(
    policy: &str,
    cluster: &Cluster,
    workload: &Workload,
    options: &CheckOptions<'_>,
) -> Result<Relaxed, PolicyError> {
    let info = policy_info(policy)?;
    let caps = info.capabilities;
    let mut missing = unsupported(caps, demands(cluster, workload, options));
    // A service the policy cannot serve is removed whole: its quota and types do not count.
    if !caps.honours(Capability::Services) {
        missing.retain(|d| {
            !matches!(d.element, Element::Service { .. }) || d.capability == Capability::Services
        });
    }
    let mut counts: BTreeMap<Capability, usize> = BTreeMap::new();
    for d in &missing {
        *counts.entry(d.capability).or_default() += 1;
    }
    let mut rejected: BTreeMap<JobId, String> = BTreeMap::new();
    let mut reject = |id: JobId, why: String| {
        rejected.entry(id).or_insert(why);
    };
    let name = shown(info.name);
    let no_mig_cluster = missing.iter().any(|d| {
        d.capability == Capability::NonMigGpus && matches!(d.element, Element::Cluster { .. })
    });
    let mut jobs: Vec<TrainingJob> = workload.jobs().to_vec();
    for d in &missing {
        let Element::Job { id, .. } = d.element else {
            continue;
        };
        let Some(job) = jobs.get_mut(id.index()) else {
            continue;
        };
        // MIG, share, quota and CPU/memory requests stay as asked: the policy gives a whole
        // GPU or its own CPU/memory, and the truth still sees what the job asked for (a run
        // the same as without the check).
        match d.capability {
            Capability::GpuTypes => job.gpu_types.clear(),
            Capability::MigProfile
            | Capability::MigAny
            | Capability::GpuShare
            | Capability::CpuMemory => {}
            Capability::MultiGpu
            | Capability::MultiNode
            | Capability::MixedNodes
            | Capability::NonMigGpus => {
                reject(id, format!("{name} cannot run it: it {}", d.detail))
            }
            Capability::Services | Capability::ServiceQuotas | Capability::Failures => {}
        }
    }
    if no_mig_cluster {
        for j in &jobs {
            reject(
                j.id,
                format!("{name} runs jobs only on MIG instances and the cluster has none"),
            );
        }
    }
    let drop_services = !caps.honours(Capability::Services);
    let services: Vec<InferenceService> = if drop_services {
        Vec::new()
    } else {
        workload
            .services()
            .iter()
            .cloned()
            .map(|mut s| {
                if !caps.honours(Capability::GpuTypes) {
                    s.gpu_types.clear();
                }
                s
            })
            .collect()
    };
    // Jobs keep their order and submit times, so their ids are unchanged.
    let relaxed = Workload::with_services(jobs, services);
    Ok(Relaxed {
        workload: relaxed,
        rejected: rejected.into_iter().collect(),
        drop_failures: !caps.honours(Capability::Failures) && options.failures,
        ignored: counts
            .into_iter()
            .map(|(capability, count)| Ignored {
                capability,
                count,
                how: relaxation(capability),
            })
            .collect(),
    })
}

/// How the reason of a service a policy was not given starts ([`dropped_services`]).
pub const NOT_GIVEN: &str = "not given to ";

/// The services of `workload` as a run of `policy` on its relaxed copy without them would
/// report them if it had: every request dropped, counted with the arrivals the run's serving
/// seed draws (the requests a policy serving them is offered), so that a relaxed run's SLO
/// goodput counts what its policy left unserved. Drivers put them in the run's summary.
#[cfg(feature = "experiments")]
pub fn dropped_services(
    workload: &Workload,
    policy: &str,
    serving_seed: u64,
) -> Vec<tessera_sim::ServiceSummary> {
    let arrivals = tessera_sim::serving::arrivals_per_service(workload, serving_seed);
    workload
        .services()
        .iter()
        .zip(arrivals)
        .map(|(s, requests)| tessera_sim::ServiceSummary {
            service: s.name.clone(),
            requests,
            served: 0,
            dropped: requests,
            slo_violations: 0,
            slo_violation_rate: if requests > 0 { 1.0 } else { 0.0 },
            served_rps: 0.0,
            p50_latency_s: 0.0,
            p99_latency_s: 0.0,
            mean_instances: 0.0,
            peak_instances: 0,
            unschedulable: Some(format!(
                "{NOT_GIVEN}{}: it serves no services (--ignore-unsupported)",
                shown(policy)
            )),
        })
        .collect()
}

/// The capability matrix as Markdown (the generated part of docs/capabilities.md): one row
/// per registered policy, one column per capability, then the legend.
pub fn matrix_markdown() -> String {
    let mut out = String::from("| policy |");
    for c in Capability::ALL {
        out.push_str(&format!(" {} |", c.key()));
    }
    out.push_str("\n|---|");
    for _ in Capability::ALL {
        out.push_str(":-:|");
    }
    out.push('\n');
    for (_, p) in crate::policies() {
        out.push_str(&format!("| `{}` |", p.name));
        for c in Capability::ALL {
            out.push_str(if p.capabilities.honours(c) {
                " ✓ |"
            } else {
                " – |"
            });
        }
        out.push('\n');
    }
    out.push('\n');
    for c in Capability::ALL {
        out.push_str(&format!("- `{}`: {}\n", c.key(), c.about()));
    }
    out
}

/// The capability matrix as aligned text, for `tessera builtins`.
pub fn matrix_text() -> String {
    let width = crate::policies()
        .map(|(_, p)| p.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!("  {:<width$}", "policy");
    for c in Capability::ALL {
        out.push_str(&format!(" {}", c.key()));
    }
    out.push('\n');
    for (_, p) in crate::policies() {
        out.push_str(&format!("  {:<width$}", p.name));
        for c in Capability::ALL {
            let mark = if p.capabilities.honours(c) {
                "yes"
            } else {
                "-"
            };
            out.push_str(&format!(" {mark:^w$}", w = c.key().len()));
        }
        out.push('\n');
    }
    for c in Capability::ALL {
        out.push_str(&format!("  {:<16} {}\n", c.key(), c.about()));
    }
    out
}

#[cfg(test)]
mod tests;
