//! `GET /v1/snapshot`: the live state a forecast forks from, for `tessera whatif --daemon`.
//!
//! The answer is a [`LiveSnapshot`]: the [`ForecastInput`] the forecaster copies from the core
//! (cluster with its catalogue, jobs not finished with their progress and holdings, GPUs'
//! layouts and health, what service instances hold) and the daemon's policy and round, in
//! JSON. [`LiveSnapshot::into_input`] gives back the same `ForecastInput`, so a what-if on it
//! is the what-if on the live state (one on the store reads the store instead, which lacks
//! MIG layouts, drains and health).
//!
//! Read-only and for administrators only: it lists every tenant's jobs. The engine thread
//! copies the state (O(active jobs + GPUs), the forecaster's copy) and moves it into the
//! answer; the JSON is written on a blocking worker thread, not on the engine's or the
//! server's event loop.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use tessera_model::{
    Bytes, Cluster, GpuCatalog, GpuModel, MigGeometry, MilliCpu, Node, NodeGroup, NodeId,
    SimDuration, TrainingJob,
};
use tessera_perf::RestartCosts;
use tessera_sim::Snapshot;

use crate::core::{Request, Response};
use crate::error::ApiError;
use crate::forecast::{ForecastInput, ForecastSettings, ReservedBy};
use crate::server::AppState;

/// [`LiveSnapshot::format`] of this version.
pub const SNAPSHOT_FORMAT: &str = "tessera-snapshot/1";

/// The live state as `GET /v1/snapshot` answers it (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LiveSnapshot {
    /// [`SNAPSHOT_FORMAT`].
    pub format: String,
    /// The daemon's policy, as its config names it.
    pub policy: String,
    /// Its round, if configured.
    pub round: Option<SimDuration>,
    /// The cluster the policy sees.
    pub cluster: ClusterDoc,
    /// Backend node name of each node of `cluster`.
    pub node_names: Vec<String>,
    /// Jobs not finished, numbered by submission.
    pub jobs: Vec<TrainingJob>,
    /// The daemon id of each of `jobs`.
    pub ids: Vec<i64>,
    /// Each job's declared duration.
    pub declared: Vec<SimDuration>,
    /// Progress, holdings and GPU states at the instant.
    pub snapshot: Snapshot,
    /// Which service instance holds each of `snapshot.reserved`.
    pub reserved_by: Vec<ReservedBy>,
    /// What a restart costs.
    pub restart_costs: RestartCosts,
}

/// A [`Cluster`] in JSON: its catalogue (derived MIG models included), groups and nodes,
/// GPU models by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterDoc {
    /// Its name.
    pub name: String,
    /// The catalogue's GPU models.
    pub gpus: Vec<GpuModel>,
    /// The catalogue's MIG geometries.
    pub mig_geometries: Vec<MigGeometry>,
    /// Node groups.
    pub groups: Vec<GroupDoc>,
    /// Nodes, by id.
    pub nodes: Vec<NodeDoc>,
}

/// One [`NodeGroup`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupDoc {
    /// Name.
    pub name: String,
    /// GPU model (catalogue name).
    pub gpu: String,
    /// First node id.
    pub first_node: u32,
    /// Nodes.
    pub count: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// CPU per node.
    pub cpu: MilliCpu,
    /// Memory per node.
    pub memory: Bytes,
    /// Rack label.
    pub rack: Option<String>,
}

/// One [`Node`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeDoc {
    /// Name.
    pub name: String,
    /// Group index.
    pub group: u16,
    /// GPU model (catalogue name).
    pub gpu: String,
    /// GPUs.
    pub gpus: u32,
    /// CPU.
    pub cpu: MilliCpu,
    /// Memory.
    pub memory: Bytes,
}

impl ClusterDoc {
    /// `cluster` as a document.
    pub fn of(cluster: &Cluster) -> ClusterDoc {
        let name = |id| cluster.catalog.get(id).name.clone();
        ClusterDoc {
            name: cluster.name.clone(),
            gpus: cluster.catalog.models().to_vec(),
            mig_geometries: cluster.catalog.mig_geometries().to_vec(),
            groups: cluster
                .groups
                .iter()
                .map(|g| GroupDoc {
                    name: g.name.clone(),
                    gpu: name(g.gpu),
                    first_node: g.first_node,
                    count: g.count,
                    gpus_per_node: g.gpus_per_node,
                    cpu: g.cpu,
                    memory: g.memory,
                    rack: g.rack.clone(),
                })
                .collect(),
            nodes: cluster
                .nodes
                .iter()
                .map(|n| NodeDoc {
                    name: n.name.clone(),
                    group: n.group,
                    gpu: name(n.gpu),
                    gpus: n.gpus,
                    cpu: n.cpu,
                    memory: n.memory,
                })
                .collect(),
        }
    }

    /// The cluster back, checked: known GPU models, groups covering the nodes in order.
    pub fn to_cluster(&self) -> Result<Cluster, String> {
        let catalog = GpuCatalog::from_parts(self.gpus.clone(), self.mig_geometries.clone())
            .map_err(|e| format!("catalogue: {e}"))?;
        let model = |name: &str| {
            catalog
                .find(name)
                .ok_or_else(|| format!("unknown GPU model {:?}", name.escape_debug().to_string()))
        };
        let mut groups = Vec::with_capacity(self.groups.len());
        let mut next = 0u64;
        for (i, g) in self.groups.iter().enumerate() {
            if u64::from(g.first_node) != next {
                return Err(format!(
                    "group {i} does not start where group {} ends",
                    i.max(1) - 1
                ));
            }
            next += u64::from(g.count);
            groups.push(NodeGroup {
                name: g.name.clone(),
                gpu: model(&g.gpu)?,
                first_node: g.first_node,
                count: g.count,
                gpus_per_node: g.gpus_per_node,
                cpu: g.cpu,
                memory: g.memory,
                rack: g.rack.clone(),
            });
        }
        if next != self.nodes.len() as u64 {
            return Err(format!(
                "the groups hold {next} nodes, the list {}",
                self.nodes.len()
            ));
        }
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            let Some(g) = groups.get(n.group as usize) else {
                return Err(format!("node {i}: no group {}", n.group));
            };
            if !(g.first_node as usize..(g.first_node + g.count) as usize).contains(&i) {
                return Err(format!("node {i} is not within its group {}", n.group));
            }
            if n.gpus > 64 {
                return Err(format!("node {i}: {} GPUs", n.gpus));
            }
            nodes.push(Node {
                id: NodeId(i as u32),
                name: n.name.clone(),
                group: n.group,
                gpu: model(&n.gpu)?,
                gpus: n.gpus,
                cpu: n.cpu,
                memory: n.memory,
            });
        }
        Ok(Cluster {
            name: self.name.clone(),
            catalog,
            groups,
            nodes,
        })
    }
}

impl LiveSnapshot {
    /// The answer for `input`, forecast under `settings`.
    pub fn of(input: ForecastInput, settings: &ForecastSettings) -> LiveSnapshot {
        LiveSnapshot {
            format: SNAPSHOT_FORMAT.to_string(),
            policy: settings.policy.clone(),
            round: settings.round,
            cluster: ClusterDoc::of(&input.cluster),
            node_names: input.node_names,
            jobs: input.jobs,
            ids: input.ids,
            declared: input.declared,
            snapshot: input.snapshot,
            reserved_by: input.reserved_by,
            restart_costs: input.restart_costs,
        }
    }

    /// The forecast input back, checked for what would make a forked run fail obscurely
    /// (the fork checks the rest: holdings that do not fit, unknown jobs).
    pub fn into_input(self) -> Result<ForecastInput, String> {
        if self.format != SNAPSHOT_FORMAT {
            return Err(format!(
                "snapshot format {:?}, this tessera reads {SNAPSHOT_FORMAT}",
                self.format.escape_debug().to_string()
            ));
        }
        let cluster = self.cluster.to_cluster()?;
        let n = self.jobs.len();
        if self.ids.len() != n || self.declared.len() != n {
            return Err(format!(
                "{n} jobs but {} ids and {} declared durations",
                self.ids.len(),
                self.declared.len()
            ));
        }
        if self.node_names.len() != cluster.nodes.len() {
            return Err(format!(
                "{} nodes but {} node names",
                cluster.nodes.len(),
                self.node_names.len()
            ));
        }
        if self.reserved_by.len() != self.snapshot.reserved.len() {
            return Err(format!(
                "{} reserved holdings but {} holders",
                self.snapshot.reserved.len(),
                self.reserved_by.len()
            ));
        }
        if let Some((i, _)) = self
            .jobs
            .iter()
            .enumerate()
            .find(|(i, j)| j.id.index() != *i)
        {
            return Err(format!("job {i} is numbered {}", self.jobs[i].id.0));
        }
        Ok(ForecastInput {
            cluster,
            node_names: self.node_names,
            jobs: self.jobs,
            ids: self.ids,
            declared: self.declared,
            snapshot: self.snapshot,
            reserved_by: self.reserved_by,
            restart_costs: self.restart_costs,
        })
    }
}

/// `GET /v1/snapshot`: an administrator's token; the JSON is written off the event loop.
async fn snapshot(State(s): State<AppState>, headers: HeaderMap) -> HttpResponse {
    match crate::server::call(&s, &headers, Request::Snapshot).await {
        Ok(Response::Snapshot(snap)) => {
            let written = tokio::task::spawn_blocking(move || serde_json::to_vec(&*snap)).await;
            match written {
                Ok(Ok(body)) => (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    body,
                )
                    .into_response(),
                Ok(Err(e)) => crate::server::error_response(&ApiError::internal(e.to_string())),
                Err(e) => crate::server::error_response(&ApiError::internal(e.to_string())),
            }
        }
        Ok(_) => crate::server::error_response(&ApiError::internal("unexpected answer")),
        Err(e) => crate::server::error_response(&e),
    }
}

/// The snapshot route, merged into the API's router.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/v1/snapshot", get(snapshot))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster survives the document: groups, nodes, catalogue (derived models included).
    #[test]
    fn a_cluster_round_trips_and_a_bad_one_says_why() {
        let catalog = GpuCatalog::builtin();
        let spec = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    - {name: a, count: 2, gpu: A100-80GB, gpusPerNode: 8, cpus: 64, memory: 512Gi}\n    - {name: v, count: 1, gpu: V100-32GB, gpusPerNode: 4, cpus: 32, memory: 256Gi, rack: r1}\n";
        let cluster = Cluster::from_yaml(spec, &catalog).unwrap();
        let doc = ClusterDoc::of(&cluster);
        let text = serde_json::to_string(&doc).unwrap();
        let back: ClusterDoc = serde_json::from_str(&text).unwrap();
        assert_eq!(back.to_cluster().unwrap(), cluster);

        let mut bad = doc.clone();
        bad.nodes[2].gpu = "Z9000".into();
        assert!(bad.to_cluster().unwrap_err().contains("Z9000"));
        let mut bad = doc.clone();
        bad.nodes.pop();
        assert!(bad
            .to_cluster()
            .unwrap_err()
            .contains("the groups hold 3 nodes"));
        let mut bad = doc;
        bad.nodes[0].group = 1;
        assert!(bad
            .to_cluster()
            .unwrap_err()
            .contains("not within its group"));
    }
}
