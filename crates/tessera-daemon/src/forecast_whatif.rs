//! Changes a what-if forecasts under (`tessera whatif`), applied to a [`ForecastInput`]
//! whether it was read from a store or from a live daemon (`GET /v1/snapshot`), so the two
//! give the same answer for the same state.
//!
//! What is simulated: nodes added (after the existing ones, so every holding keeps its
//! node), nodes drained (running jobs finish, nothing new is placed), a GPU's MIG layout, and
//! the GPU quota (SM share and device memory) a service's instances hold, which is capacity
//! the forked run never releases: a smaller quota leaves room for shared jobs beside the
//! instances, a larger one takes it. What is not: how the service itself serves under the new
//! quota (the forecast does not model its traffic or latency, nor its autoscaling), and
//! tenants' admission limits (`maxActiveJobsPerTenant`, `maxActiveJobs`), which apply only
//! to new submissions, and a forecast assumes none.

use std::collections::BTreeMap;

use tessera_model::{Bytes, GpuPart, Node, NodeGroup, NodeId};
use tessera_sim::SnapshotGpu;

use crate::backend::InventoryNode;
use crate::forecast::{ClusterChange, ForecastInput};
use crate::inventory::ClusterMap;

/// Adds `change.add` and drains `change.drain` in `input` (see the [module docs](self)).
/// Added nodes' GRES types map to GPU models as the daemon's inventory maps them
/// (`gres_map`, `default_gpu` as in its config; the defaults when empty).
pub fn apply_change(
    input: &mut ForecastInput,
    change: &ClusterChange,
    gres_map: &BTreeMap<String, String>,
    default_gpu: Option<&str>,
) -> Result<(), String> {
    if !change.add.is_empty() {
        add_nodes(input, &change.add, gres_map, default_gpu)?;
    }
    for name in &change.drain {
        drain(input, name)?;
    }
    Ok(())
}

fn add_nodes(
    input: &mut ForecastInput,
    add: &[InventoryNode],
    gres_map: &BTreeMap<String, String>,
    default_gpu: Option<&str>,
) -> Result<(), String> {
    for n in add {
        if input.node_names.iter().any(|name| name == &n.name) {
            return Err(format!("a node {:?} exists already", n.name));
        }
    }
    let map = ClusterMap::build(add, gres_map, default_gpu, &input.cluster.catalog)
        .map_err(|e| e.to_string())?;
    let cluster = &mut input.cluster;
    let first = cluster.nodes.len() as u32;
    let first_group = cluster.groups.len();
    if first_group + map.cluster.groups.len() > usize::from(u16::MAX) {
        return Err("too many node groups".into());
    }
    // Models by name: the added nodes' map numbers its catalogue on its own.
    let model = |id| {
        let name = &map.cluster.catalog.get(id).name;
        cluster
            .catalog
            .find(name)
            .ok_or_else(|| format!("GPU model {name} is not in the cluster's catalogue"))
    };
    let mut groups = Vec::new();
    for g in &map.cluster.groups {
        let mut name = format!("whatif-{}", g.name);
        while cluster.groups.iter().any(|x| x.name == name) {
            name.push('+');
        }
        groups.push(NodeGroup {
            name,
            gpu: model(g.gpu)?,
            first_node: first + g.first_node,
            ..g.clone()
        });
    }
    let mut nodes = Vec::new();
    for n in &map.cluster.nodes {
        nodes.push(Node {
            id: NodeId(first + n.id.0),
            name: format!("whatif-{}", n.name),
            group: first_group as u16 + n.group,
            gpu: model(n.gpu)?,
            ..n.clone()
        });
    }
    cluster.groups.extend(groups);
    cluster.nodes.extend(nodes);
    input
        .node_names
        .extend(map.logical.iter().map(|l| l.node.clone()));
    Ok(())
}

/// Every GPU of backend node `name` out of service: its holders keep theirs until they end.
fn drain(input: &mut ForecastInput, name: &str) -> Result<(), String> {
    let nodes: Vec<NodeId> = input
        .node_names
        .iter()
        .enumerate()
        .filter(|(_, n)| n.as_str() == name)
        .map(|(i, _)| NodeId(i as u32))
        .collect();
    if nodes.is_empty() {
        return Err(format!("no node {:?}", name.escape_debug().to_string()));
    }
    for node in nodes {
        let gpus = input.cluster.nodes.get(node.index()).map_or(0, |n| n.gpus);
        for gpu in 0..gpus {
            let list = &mut input.snapshot.gpus;
            match list.iter_mut().find(|g| g.node == node && g.gpu == gpu) {
                Some(g) => g.down = true,
                None => list.push(SnapshotGpu {
                    node,
                    gpu,
                    layout: None,
                    ready_at: input.snapshot.now,
                    down: true,
                }),
            }
        }
    }
    Ok(())
}

/// A new GPU quota for a service's instances (`--service-quota`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaChange {
    /// The service: its daemon id or name.
    pub service: String,
    /// Guaranteed SM share, permille (1..=1000).
    pub sm_request: u16,
    /// Upper SM share, permille (default: as before, at least the request).
    pub sm_limit: Option<u16>,
    /// Device memory per GPU (default: as before).
    pub memory: Option<Bytes>,
}

/// Sets the quota every instance of `change.service` holds on each of its GPUs; returns how
/// many instances changed. Refused for a service that holds whole GPUs or MIG instances (no
/// quota to change) or none at all; a larger quota that no longer fits beside the GPU's
/// other holders is refused when the run forks from the input.
pub fn set_service_quota(input: &mut ForecastInput, change: &QuotaChange) -> Result<usize, String> {
    if !(1..=1000).contains(&change.sm_request) {
        return Err(format!(
            "SM share {}‰: between 1 and 1000 permille",
            change.sm_request
        ));
    }
    if let Some(limit) = change.sm_limit {
        if limit < change.sm_request || limit > 1000 {
            return Err(format!(
                "SM limit {limit}‰: between the request ({}‰) and 1000",
                change.sm_request
            ));
        }
    }
    let ours: Vec<usize> = input
        .reserved_by
        .iter()
        .enumerate()
        .filter(|(_, r)| r.service.to_string() == change.service || r.name == change.service)
        .map(|(i, _)| i)
        .collect();
    let shown = change.service.escape_debug().to_string();
    if ours.is_empty() {
        return Err(format!(
            "no service {shown:?} with instances holding GPUs (services by id or name: {})",
            known_services(input)
        ));
    }
    for &i in &ours {
        let Some(alloc) = input.snapshot.reserved.get_mut(i) else {
            return Err(format!("service {shown:?}: a holding is missing"));
        };
        for share in alloc.shares.iter_mut() {
            let Some(dev) = share.devices.as_mut() else {
                return Err(format!(
                    "service {shown:?} holds whole GPUs, not a quota: nothing to change"
                ));
            };
            match &mut dev.part {
                GpuPart::Quota {
                    sm_request,
                    sm_limit,
                    memory,
                } => {
                    *sm_request = change.sm_request;
                    *sm_limit = change
                        .sm_limit
                        .unwrap_or((*sm_limit).max(change.sm_request));
                    if let Some(m) = change.memory {
                        *memory = m;
                    }
                }
                GpuPart::Whole => {
                    return Err(format!(
                        "service {shown:?} holds whole GPUs, not a quota: nothing to change"
                    ))
                }
                GpuPart::Mig(_) => {
                    return Err(format!(
                        "service {shown:?} holds MIG instances, not a quota (change the layout \
                         with --mig instead)"
                    ))
                }
            }
        }
    }
    Ok(ours.len())
}

fn known_services(input: &ForecastInput) -> String {
    let mut names: Vec<String> = input
        .reserved_by
        .iter()
        .map(|r| format!("{} {}", r.service, r.name.escape_debug()))
        .collect();
    names.dedup();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forecast::{run, ForecastSettings, ReservedBy};
    use tessera_model::{
        Allocation, Cluster, DeviceAlloc, GpuCatalog, GpuMask, GpuShareRequest, JobId, MilliCpu,
        NodeShare, SimDuration, SimTime, TrainingJob,
    };
    use tessera_perf::RestartCosts;
    use tessera_sim::Snapshot;

    const AT: SimTime = SimTime::from_secs(1000);

    /// One A100 node of 2 GPUs; a service instance holds a quota of `sm`‰ and 40 GiB on GPU
    /// 0, and a whole-GPU job runs on GPU 1 for another hour; a shared job asking 500‰ and
    /// 20 GiB waits.
    fn input(sm: u16) -> ForecastInput {
        let cluster = Cluster::from_yaml(
            "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: a, count: 1, gpu: A100-80GB, gpusPerNode: 2, cpus: 64, memory: 512Gi}\n",
            &GpuCatalog::builtin(),
        )
        .unwrap();
        let node = NodeId(0);
        let quota = Allocation::single(NodeShare {
            node,
            gpus: 0,
            cpu: MilliCpu::from_cores(4),
            memory: Bytes::from_gib(32),
            devices: Some(DeviceAlloc {
                gpus: GpuMask::one(0),
                part: GpuPart::Quota {
                    sm_request: sm,
                    sm_limit: sm,
                    memory: Bytes::from_gib(40),
                },
            }),
        });
        let mut busy =
            TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(1000 + 3600));
        busy.id = JobId(0);
        let mut shared =
            TrainingJob::simple(1, SimTime::from_secs(900), 1, SimDuration::from_secs(600));
        shared.id = JobId(1);
        shared.gpu_share = Some(GpuShareRequest {
            sm_permille: 500,
            memory: Some(Bytes::from_gib(20)),
        });
        let running = tessera_sim::SnapshotJob {
            job: JobId(0),
            done_iters: busy.iterations as f64 * 1000.0 / 4600.0,
            attained_gpu_us: 1_000_000_000,
            preemptions: 0,
            running: Some(tessera_sim::RunningAt {
                allocation: Allocation::single(NodeShare::whole(
                    node,
                    1,
                    MilliCpu::from_cores(8),
                    Bytes::from_gib(64),
                )),
                resumes_at: SimTime::ZERO,
            }),
        };
        ForecastInput {
            cluster,
            node_names: vec!["n0".into()],
            declared: vec![busy.duration, shared.duration],
            jobs: vec![busy, shared],
            ids: vec![1, 2],
            snapshot: Snapshot {
                now: AT,
                jobs: vec![running],
                gpus: Vec::new(),
                reserved: vec![quota],
            },
            reserved_by: vec![ReservedBy {
                service: 7,
                name: "chat".into(),
                instance: 3,
            }],
            restart_costs: RestartCosts::free(),
        }
    }

    fn start_of_shared(input: &ForecastInput, policy: &str) -> Option<SimTime> {
        let r = run(input, &ForecastSettings::new(policy, None)).unwrap();
        r.jobs.iter().find(|j| j.id == 2).unwrap().start
    }

    /// The shared job fits beside the service only once its quota is cut: 600‰ + 500‰ is
    /// more than a GPU, 400‰ + 500‰ is not. Under a policy that packs quotas (Dilu) the job
    /// then starts at once instead of waiting for the whole-GPU job to end.
    #[test]
    fn a_smaller_service_quota_lets_a_shared_job_start_beside_it() {
        let before = input(600);
        let waits = start_of_shared(&before, "dilu");
        let mut after = before.clone();
        let changed = set_service_quota(
            &mut after,
            &QuotaChange {
                service: "chat".into(),
                sm_request: 400,
                sm_limit: Some(400),
                memory: None,
            },
        )
        .unwrap();
        assert_eq!(changed, 1);
        assert_eq!(after, input(400), "the quota and nothing else changed");
        let starts = start_of_shared(&after, "dilu");
        assert_eq!(
            starts,
            Some(AT),
            "starts at once beside the service: {waits:?}"
        );
        assert!(waits.is_none_or(|w| w > AT), "{waits:?}");
    }

    /// The live snapshot's JSON gives back the very input (what `whatif --daemon` forks
    /// from is what the daemon copied), and a wrong one is refused with a reason.
    #[test]
    fn a_snapshot_round_trips_through_json() {
        use crate::forecast_snapshot::LiveSnapshot;
        let i = input(600);
        let settings = ForecastSettings::new("las", Some(SimDuration::from_secs(300)));
        let text = serde_json::to_string(&LiveSnapshot::of(i.clone(), &settings)).unwrap();
        let back: LiveSnapshot = serde_json::from_str(&text).unwrap();
        assert_eq!((back.policy.as_str(), back.round), ("las", settings.round));
        assert_eq!(back.clone().into_input().unwrap(), i);
        let mut bad = back.clone();
        bad.ids.pop();
        assert!(bad.into_input().unwrap_err().contains("2 jobs but 1 ids"));
        let mut bad = back;
        bad.format = "tessera-snapshot/9".into();
        assert!(bad.into_input().unwrap_err().contains("format"));
    }

    #[test]
    fn quota_changes_say_why_they_cannot_apply() {
        let mut i = input(600);
        let q = |service: &str, sm: u16, limit: Option<u16>| QuotaChange {
            service: service.into(),
            sm_request: sm,
            sm_limit: limit,
            memory: None,
        };
        let err = set_service_quota(&mut i, &q("web", 300, None)).unwrap_err();
        assert!(
            err.contains("no service \"web\"") && err.contains("7 chat"),
            "{err}"
        );
        assert!(set_service_quota(&mut i, &q("7", 0, None)).is_err());
        assert!(set_service_quota(&mut i, &q("7", 300, Some(200))).is_err());
        assert_eq!(set_service_quota(&mut i, &q("7", 300, Some(500))), Ok(1));
        // Whole GPUs held: no quota to change.
        let mut whole = input(600);
        whole.snapshot.reserved[0] = Allocation::single(NodeShare::whole(
            NodeId(0),
            1,
            MilliCpu::from_cores(4),
            Bytes::from_gib(32),
        ));
        let err = set_service_quota(&mut whole, &q("chat", 300, None)).unwrap_err();
        assert!(err.contains("whole GPUs"), "{err}");
    }

    /// Drains and added nodes change the input as a drained inventory would: the drained
    /// node's GPUs out of service, added nodes after the existing ones.
    #[test]
    fn drains_and_added_nodes_apply_to_the_input() {
        let mut i = input(600);
        let change = ClusterChange {
            add: vec![InventoryNode {
                name: "x1".into(),
                cpu: MilliCpu::from_cores(32),
                memory: Bytes::from_gib(256),
                gres: vec![crate::backend::GresCount {
                    kind: Some("a100".into()),
                    count: 4,
                }],
                health: crate::backend::NodeHealth::Up,
            }],
            drain: vec!["n0".into()],
        };
        apply_change(&mut i, &change, &BTreeMap::new(), None).unwrap();
        assert_eq!(i.node_names, ["n0", "x1"]);
        assert_eq!(i.cluster.nodes.len(), 2);
        assert_eq!(i.cluster.nodes[1].gpus, 4);
        assert_eq!(i.cluster.nodes[1].gpu, i.cluster.nodes[0].gpu);
        assert_eq!(i.cluster.groups[1].first_node, 1);
        assert!(i
            .snapshot
            .gpus
            .iter()
            .filter(|g| g.node == NodeId(0))
            .all(|g| g.down));
        assert_eq!(i.snapshot.gpus.len(), 2);
        // The shared job now starts on the added node at once.
        assert_eq!(start_of_shared(&i, "fifo"), Some(AT));
        let err = apply_change(
            &mut input(600),
            &ClusterChange {
                drain: vec!["nx".into()],
                ..ClusterChange::default()
            },
            &BTreeMap::new(),
            None,
        )
        .unwrap_err();
        assert!(err.contains("no node"), "{err}");
    }
}
