//! What crosses between the daemon core and a backend: runs, placements, node inventory and
//! run statuses. The core owns these types (it decides with them and records them); the
//! backends (`crate::backend`) and the store convert from and to them, so the core imports
//! neither (issue 38 item 5).

use serde::{Deserialize, Serialize};
use tessera_model::{Bytes, MilliCpu};

/// A backend's name for a job it runs (a Slurm job id, a local run directory name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Handle(pub String);

/// Health of a node as the resource manager reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeHealth {
    /// Accepting jobs.
    Up,
    /// Running jobs but accepting no new ones.
    Draining,
    /// Not usable.
    Down,
}

/// GPUs of one type on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GresCount {
    /// The type (`a100`, `a100_3g.40gb`), `None` for untyped `gpu:N`.
    pub kind: Option<String>,
    /// How many.
    pub count: u32,
}

/// One machine as the resource manager describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryNode {
    /// Node name.
    pub name: String,
    /// CPU capacity.
    pub cpu: MilliCpu,
    /// Memory capacity.
    pub memory: Bytes,
    /// GPUs by type.
    pub gres: Vec<GresCount>,
    /// Health.
    pub health: NodeHealth,
}

/// What one node of a placement gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacedShare {
    /// Backend node name.
    pub node: String,
    /// GRES type on that node (`None` = untyped GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gres_type: Option<String>,
    /// GPUs.
    pub gpus: u32,
    /// CPU.
    pub cpu: MilliCpu,
    /// Memory.
    pub memory: Bytes,
    /// Which GPUs of the node and what part of each, as the policy (or the daemon, for a
    /// share that left it open) chose them; `None` only in records written before devices
    /// were named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<PlacedDevices>,
}

impl PlacedShare {
    /// The quota this share holds on each of its GPUs, if it is a quota share.
    pub fn quota(&self) -> Option<(u16, u16, Bytes)> {
        match self.devices.as_ref().map(|d| &d.part) {
            Some(PlacedPart::Quota {
                sm_request,
                sm_limit,
                memory,
            }) => Some((*sm_request, *sm_limit, *memory)),
            _ => None,
        }
    }
}

/// The GPUs of one node a share holds, down to the device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacedDevices {
    /// GPU indices on the node (as the node numbers them: `nvidia-smi -i`, `CUDA_VISIBLE_DEVICES`).
    pub indices: Vec<u32>,
    /// What part of each.
    pub part: PlacedPart,
}

/// What part of each GPU a share holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum PlacedPart {
    /// The whole GPU.
    Whole,
    /// One MIG instance of the GPU's layout.
    #[serde(rename_all = "camelCase")]
    Mig {
        /// Profile name (`3g.20gb`).
        profile: String,
        /// Memory slice it starts at.
        start: u8,
    },
    /// A share under MPS-style quotas.
    #[serde(rename_all = "camelCase")]
    Quota {
        /// Guaranteed SM share, permille.
        sm_request: u16,
        /// Upper SM share, permille.
        sm_limit: u16,
        /// Device memory pinned on each GPU.
        memory: Bytes,
    },
}

/// One MIG instance of a layout, in backend terms.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacedMig {
    /// Profile name (`3g.20gb`).
    pub profile: String,
    /// Memory slice it starts at.
    pub start: u8,
}

/// A change of a running job's quota or CPU/memory on the same devices
/// (a backend's `retune`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retune {
    /// The run.
    pub handle: Handle,
    /// Daemon job id.
    pub job_id: i64,
    /// The run's attempt.
    pub attempt: u32,
    /// The new placement (same nodes and GPUs).
    pub placement: Vec<PlacedShare>,
}

/// A change of one GPU's MIG layout (a backend's `reconfigure`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconfigure {
    /// Backend node name.
    pub node: String,
    /// GPU index on the node.
    pub gpu: u32,
    /// The layout it had (`None` = whole-GPU mode).
    pub from: Option<Vec<PlacedMig>>,
    /// The layout it gets (`None` = whole-GPU mode).
    pub to: Option<Vec<PlacedMig>>,
}

/// What the job runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// An argument vector, run with `exec`.
    Command(Vec<String>),
    /// A script; run directly when it starts with `#!`, else with `/bin/sh`.
    Script(String),
}

/// Everything a backend needs to start one attempt of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Unique, safe run name `tessera-<store instance>-<job id>-<attempt>`; also how a run is
    /// found again after a crash.
    pub name: String,
    /// Daemon job id.
    pub job_id: i64,
    /// Attempt number (1 for the first start, +1 after each preemption).
    pub attempt: u32,
    /// The job's tenant (the local backend may run it as that tenant's Unix user).
    pub tenant: String,
    /// What to run.
    pub payload: Payload,
    /// Environment for the job (validated names; values written quoted into a file).
    pub env: Vec<(String, String)>,
    /// Where, one share per node.
    pub placement: Vec<PlacedShare>,
    /// How the job splits its work (the policy's plan, or data-parallel over its devices).
    pub plan: tessera_model::ParallelPlan,
    /// Catalog name of the GPUs it runs on (`A100-80GB`).
    pub gpu_type: String,
}

impl Launch {
    /// The run name for a job attempt of the store `instance` (so that several daemons can
    /// share one resource manager without confusing each other's runs).
    pub fn run_name(instance: &str, job_id: i64, attempt: u32) -> String {
        format!("tessera-{instance}-{job_id}-{attempt}")
    }

    /// The document behind `TESSERA_PLAN_FILE`.
    pub fn plan_json(&self) -> serde_json::Value {
        serde_json::json!({
            "data": self.plan.data,
            "tensor": self.plan.tensor,
            "pipeline": self.plan.pipeline,
            "gpuType": self.gpu_type,
            "attempt": self.attempt,
            "placement": self.placement,
        })
    }

    /// The document behind `TESSERA_QUOTA_FILE`, when the job holds a quota.
    pub fn quota_json(&self) -> Option<serde_json::Value> {
        quota_json(&self.placement, 1)
    }
}

/// The quota document of a placement (`version` counts the changes: 1 at the start, +1 per
/// retune), `None` when no share holds a quota.
pub fn quota_json(placement: &[PlacedShare], version: u64) -> Option<serde_json::Value> {
    let share = placement.iter().find(|s| s.quota().is_some())?;
    let (sm_request, sm_limit, memory) = share.quota()?;
    let indices = share
        .devices
        .as_ref()
        .map(|d| d.indices.clone())
        .unwrap_or_default();
    Some(serde_json::json!({
        "version": version,
        "smRequestPermille": sm_request,
        "smLimitPermille": sm_limit,
        "memoryBytes": memory.0,
        "gpus": indices,
    }))
}

/// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` for an SM limit in permille (`333` -> `33.3`).
pub fn mps_thread_percentage(sm_limit: u16) -> String {
    if sm_limit.is_multiple_of(10) {
        (sm_limit / 10).to_string()
    } else {
        format!("{}.{}", sm_limit / 10, sm_limit % 10)
    }
}

/// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` for `gpus` devices with `memory` each: one
/// `<ordinal>=<MiB>M` entry per device, ordinals as the job sees them (0, 1, … in
/// `CUDA_VISIBLE_DEVICES` order).
pub fn mps_pinned_mem_limit(gpus: usize, memory: Bytes) -> String {
    let mib = memory.0 >> 20;
    (0..gpus)
        .map(|i| format!("{i}={mib}M"))
        .collect::<Vec<_>>()
        .join(",")
}

/// What a backend reports about a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "status")]
pub enum RunStatus {
    /// Accepted, not yet running (the resource manager's reason).
    Pending {
        /// Why it waits.
        reason: String,
    },
    /// Running.
    Running,
    /// Exited with status 0.
    Completed,
    /// Exited non-zero or was killed.
    Failed {
        /// What happened.
        reason: String,
        /// Exit code, when known.
        exit_code: Option<i32>,
    },
    /// Cancelled (by us or by someone else).
    Cancelled,
    /// Preempted by the resource manager itself.
    Preempted,
    /// Ended because its node failed (Slurm's `NODE_FAIL`, `BOOT_FAIL`): not the job's fault,
    /// so the daemon requeues it.
    NodeFailed {
        /// What the resource manager said.
        reason: String,
    },
    /// The backend does not know the run (any more).
    Unknown,
}

impl RunStatus {
    /// True when the run is over.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, RunStatus::Pending { .. } | RunStatus::Running)
    }
}
