//! Why a queued job waits: a closed set of reasons ([`WaitKind`]), what a policy states about
//! a job it leaves waiting ([`Waiting`], through [`Policy::pending_reason`]), and the generic
//! analysis against the cluster's state that answers when the policy says nothing
//! ([`classify`], [`explain`]).
//!
//! Both drivers ask the same functions with the same view, so a reason means the same in the
//! simulator (`jobs.csv`'s time waited per reason) and in the daemon (`describe`, `queue`, the
//! API and the dashboard).
//!
//! A reason's *kind* is judged from the job's request (GPUs, GPU types, CPU, memory, MIG
//! profile, GPU share, model, tenant) and the view, never from the job's own history: the
//! simulator asks once per request shape at each decision point and charges every waiting
//! job of that shape alike. Details (jobs ahead, who holds the GPUs) are per job and asked
//! only when shown ([`Detail::Full`]).
//!
//! [`Policy::pending_reason`]: crate::Policy::pending_reason

use std::fmt;

use tessera_model::{Bytes, Cluster, GpuModelId, JobId, MigRequest, MilliCpu, NodeId, TrainingJob};

use crate::placement::{IndexedLedger, Ledger};
use crate::state::SM_REQUEST_CAPACITY;
use crate::view::{ClusterView, JobState};

/// Why a queued job waits. A closed set: drivers count time waited per kind, and operators
/// read one of these and its details. (No policy or driver limits what one tenant runs, so
/// there is no tenant-limit kind: the daemon's per-tenant limits refuse submissions.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WaitKind {
    /// Fewer free GPUs of the allowed types than the job needs.
    Gpus,
    /// Its GPUs are free in one node group, but not with the CPU or memory it needs beside
    /// them on the same nodes.
    CpuMemory,
    /// No free MIG instance fits it: a GPU must take another layout, or is taking one.
    MigLayout,
    /// No GPU has the SM share or device memory left for its GPU quota, or the policy's quota
    /// rules keep it out.
    Quota,
    /// It fits now: the policy starts other jobs first (behind N jobs in its order).
    Order,
    /// Enough GPUs of its types are free in all, but not together where one placement (one
    /// node group, one cell) can hold them.
    Gang,
    /// It would fit on GPUs that are down, drained or unhealthy.
    Unavailable,
    /// It is being profiled before the policy sees it.
    Profiling,
}

impl WaitKind {
    /// How many kinds there are.
    pub const COUNT: usize = 8;

    /// Every kind, in the order listings and `jobs.csv`'s columns show them.
    pub const ALL: [WaitKind; WaitKind::COUNT] = [
        WaitKind::Gpus,
        WaitKind::CpuMemory,
        WaitKind::MigLayout,
        WaitKind::Quota,
        WaitKind::Order,
        WaitKind::Gang,
        WaitKind::Unavailable,
        WaitKind::Profiling,
    ];

    /// A stable key (`gpus`, `cpu_memory`...): the API's `kind`, `jobs.csv`'s `wait_KEY_s`.
    pub const fn key(self) -> &'static str {
        match self {
            WaitKind::Gpus => "gpus",
            WaitKind::CpuMemory => "cpu_memory",
            WaitKind::MigLayout => "mig_layout",
            WaitKind::Quota => "quota",
            WaitKind::Order => "order",
            WaitKind::Gang => "gang",
            WaitKind::Unavailable => "unavailable",
            WaitKind::Profiling => "profiling",
        }
    }

    /// What it means, in a few words (the start of a reason's text).
    pub const fn about(self) -> &'static str {
        match self {
            WaitKind::Gpus => "no fitting GPUs of the allowed types",
            WaitKind::CpuMemory => "GPUs free but not the CPU or memory beside them",
            WaitKind::MigLayout => {
                "no free MIG instance fits: layout change or reconfiguration pending"
            }
            WaitKind::Quota => "no GPU quota left for its share",
            WaitKind::Order => "fits now, behind other jobs in the policy's order",
            WaitKind::Gang => "GPUs free in all but not together where one placement can hold them",
            WaitKind::Unavailable => {
                "would fit on nodes or GPUs that are down, drained or unhealthy"
            }
            WaitKind::Profiling => "being profiled",
        }
    }

    /// Its position in [`ALL`](Self::ALL).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The kind of a [`key`](Self::key).
    pub fn from_key(key: &str) -> Option<WaitKind> {
        WaitKind::ALL.into_iter().find(|k| k.key() == key.trim())
    }
}

impl fmt::Display for WaitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// What a reason's kind may depend on (see [`Policy::pending_reason`]): two queued jobs of
/// the same shape wait for the same kind of reason at the same instant. Drivers ask once per
/// shape.
///
/// [`Policy::pending_reason`]: crate::Policy::pending_reason
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RequestShape {
    gpus: u32,
    gpu_types: Vec<GpuModelId>,
    cpu: Option<MilliCpu>,
    memory: Option<Bytes>,
    share: Option<(u16, Option<Bytes>)>,
    mig: Option<MigRequest>,
    model: String,
    tenant: String,
}

impl RequestShape {
    /// Whether `job`'s request has this shape (no allocation: drivers look shapes up once
    /// per arrival).
    pub fn matches(&self, job: &TrainingJob) -> bool {
        self.gpus == job.gpus
            && self.gpu_types == job.gpu_types
            && self.cpu == job.cpu
            && self.memory == job.memory
            && self.share == job.gpu_share.map(|s| (s.sm_permille, s.memory))
            && self.mig == job.mig
            && self.model == job.model
            && self.tenant == job.tenant
    }

    /// A hash of `job`'s request shape, equal for requests of equal shape (no allocation).
    pub fn fingerprint(job: &TrainingJob) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        job.gpus.hash(&mut h);
        job.gpu_types.hash(&mut h);
        job.cpu.hash(&mut h);
        job.memory.hash(&mut h);
        job.gpu_share
            .map(|s| (s.sm_permille, s.memory))
            .hash(&mut h);
        job.mig.hash(&mut h);
        job.model.hash(&mut h);
        job.tenant.hash(&mut h);
        h.finish()
    }

    /// The shape of `job`'s request.
    pub fn of(job: &TrainingJob) -> RequestShape {
        RequestShape {
            gpus: job.gpus,
            gpu_types: job.gpu_types.clone(),
            cpu: job.cpu,
            memory: job.memory,
            share: job.gpu_share.map(|s| (s.sm_permille, s.memory)),
            mig: job.mig.clone(),
            model: job.model.clone(),
            tenant: job.tenant.clone(),
        }
    }
}

/// How much a driver will read of a [`Waiting`]: the simulator counts kinds only; the daemon
/// shows the details.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Only `kind` is read: leave `ahead` and `note` empty, spend nothing on them.
    Kind,
    /// Everything is shown.
    Full,
}

/// What a policy states about a job it leaves waiting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// Why.
    pub kind: WaitKind,
    /// Jobs ahead of it in the policy's order, when the policy says.
    pub ahead: Option<u32>,
    /// A policy's own words (`no Crius cell of 4 A100s is free`), when it has some.
    pub note: Option<String>,
}

impl Waiting {
    /// A reason of `kind` with no details.
    pub fn new(kind: WaitKind) -> Waiting {
        Waiting {
            kind,
            ahead: None,
            note: None,
        }
    }

    /// With the number of jobs ahead.
    pub fn ahead(mut self, n: u32) -> Waiting {
        self.ahead = Some(n);
        self
    }

    /// With a note (only built when `detail` is [`Detail::Full`]).
    pub fn note(mut self, detail: Detail, note: impl FnOnce() -> String) -> Waiting {
        if detail == Detail::Full {
            self.note = Some(note());
        }
        self
    }
}

/// What a job asks for, as a reason shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    /// GPUs (or GPU parts: one MIG instance or one quota counts one).
    pub gpus: u32,
    /// Allowed GPU models by catalog name; empty: any.
    pub gpu_types: Vec<String>,
    /// Explicit CPU request, millicores.
    pub cpu_millis: Option<u64>,
    /// Explicit memory request, bytes.
    pub memory_bytes: Option<u64>,
    /// A MIG request (`nvidia.com/mig-3g.40gb`, `nvidia.com/mig-any`).
    pub mig: Option<String>,
    /// A GPU share, SM permille.
    pub gpu_share_permille: Option<u16>,
}

/// One node group's capacity as a reason shows it (only groups of the job's allowed types).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupFree {
    /// The group's name.
    pub group: String,
    /// Its GPU model's catalog name.
    pub gpu: String,
    /// GPUs in the group.
    pub total_gpus: u64,
    /// Whole-free GPUs the policy may use.
    pub free_gpus: u64,
    /// Most whole-free GPUs on one node.
    pub most_on_one_node: u32,
    /// GPUs idle but unusable: down, unhealthy, or on a node that is drained or down.
    pub unavailable_gpus: u64,
    /// GPUs partitioned into MIG instances.
    pub partitioned_gpus: u64,
    /// Free MIG instances (of any profile) on its partitioned GPUs.
    pub free_mig_instances: u64,
    /// GPUs being reconfigured (not ready yet).
    pub reconfiguring_gpus: u64,
}

/// A running job holding GPUs the waiting job could use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderInfo {
    /// The job.
    pub job: JobId,
    /// Its name.
    pub name: String,
    /// GPUs (or parts) it holds in the allowed groups.
    pub gpus: u32,
}

/// Most holders a reason names (the largest first).
pub const HOLDERS_SHOWN: usize = 5;

/// A queued job's reason with its details: what it needs, what is free per node group and
/// which jobs hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingReason {
    /// Why.
    pub kind: WaitKind,
    /// What it asks for.
    pub need: Need,
    /// The allowed node groups' capacity, in cluster order.
    pub free: Vec<GroupFree>,
    /// Running jobs holding GPUs of the allowed groups, most GPUs first (at most
    /// [`HOLDERS_SHOWN`]).
    pub holders: Vec<HolderInfo>,
    /// Running jobs holding GPUs of the allowed groups, in all.
    pub holders_total: usize,
    /// Queued jobs ahead of it: the policy's count, else by priority then submission.
    pub ahead: Option<u32>,
    /// The policy's own words.
    pub note: Option<String>,
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind.about())?;
        if let (WaitKind::Order, Some(n)) = (self.kind, self.ahead) {
            write!(f, " ({n} ahead)")?;
        }
        if let Some(note) = &self.note {
            write!(f, ": {}", escape(note))?;
        }
        write!(f, "; needs {}", self.need)?;
        if !self.free.is_empty() {
            f.write_str("; free:")?;
            for (i, g) in self.free.iter().enumerate() {
                let sep = if i == 0 { " " } else { ", " };
                write!(
                    f,
                    "{sep}{} {}/{} {} (≤{} on a node",
                    escape(&g.group),
                    g.free_gpus,
                    g.total_gpus,
                    escape(&g.gpu),
                    g.most_on_one_node
                )?;
                if g.unavailable_gpus > 0 {
                    write!(f, ", {} unavailable", g.unavailable_gpus)?;
                }
                if g.partitioned_gpus > 0 {
                    write!(
                        f,
                        ", {} partitioned with {} free instances",
                        g.partitioned_gpus, g.free_mig_instances
                    )?;
                }
                if g.reconfiguring_gpus > 0 {
                    write!(f, ", {} reconfiguring", g.reconfiguring_gpus)?;
                }
                f.write_str(")")?;
            }
        }
        if self.holders_total > 0 {
            write!(f, "; held by")?;
            for (i, h) in self.holders.iter().enumerate() {
                let sep = if i == 0 { " " } else { ", " };
                write!(f, "{sep}{} ({})", escape(&h.name), h.gpus)?;
            }
            if self.holders_total > self.holders.len() {
                write!(f, " and {} more", self.holders_total - self.holders.len())?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.mig, self.gpu_share_permille) {
            (Some(m), _) => write!(f, "1 MIG instance {}", escape(m))?,
            (None, Some(p)) => write!(f, "{}.{}% of a GPU", p / 10, p % 10)?,
            (None, None) => write!(
                f,
                "{} GPU{}",
                self.gpus,
                if self.gpus == 1 { "" } else { "s" }
            )?,
        }
        if !self.gpu_types.is_empty() {
            write!(f, " of {}", escape(&self.gpu_types.join("|")))?;
        }
        if let Some(c) = self.cpu_millis {
            write!(f, ", {} CPU", c as f64 / 1000.0)?;
        }
        if let Some(m) = self.memory_bytes {
            write!(f, ", {:.1} GiB", m as f64 / (1u64 << 30) as f64)?;
        }
        Ok(())
    }
}

/// Text from inputs (names, notes) with control characters escaped.
fn escape(s: &str) -> String {
    if s.chars().any(char::is_control) {
        s.escape_default().to_string()
    } else {
        s.to_string()
    }
}

/// Whether `group` holds a model `job` may run on.
fn allowed(types: &[GpuModelId], gpu: GpuModelId) -> bool {
    types.is_empty() || types.contains(&gpu)
}

/// Whole-free GPUs per node group that the policy may use: the state's sums when the view's
/// free resources are the state's (the simulator), else summed from the view (the daemon
/// hides nodes that are not up).
fn group_free(view: &ClusterView<'_>) -> Vec<u64> {
    if std::ptr::eq(view.free, view.state.free()) {
        return view.state.group_free_gpus().to_vec();
    }
    let mut sums = vec![0u64; view.cluster.groups.len()];
    for (n, f) in view.cluster.nodes.iter().zip(view.free) {
        if let Some(s) = sums.get_mut(n.group as usize) {
            *s += f.gpus as u64;
        }
    }
    sums
}

/// Whether `job` (whole GPUs) has a placement in what the view shows free.
fn fits_whole(view: &ClusterView<'_>, job: &TrainingJob) -> bool {
    if std::ptr::eq(view.free, view.state.free()) {
        IndexedLedger::new(view.cluster, view.state)
            .fit(job)
            .is_some()
    } else {
        Ledger::new(view.cluster, view.free).fit(job).is_some()
    }
}

/// GPUs of node `node` the policy cannot use although nobody holds them: down, or on a node
/// the view shows nothing free on while the state has GPUs free there (a node not up).
fn unusable_idle(view: &ClusterView<'_>, node: NodeId) -> u64 {
    let n = node.index();
    let hidden = match (view.free.get(n), view.state.free().get(n)) {
        (Some(v), Some(s)) if !std::ptr::eq(view.free, view.state.free()) => {
            s.gpus.saturating_sub(v.gpus) as u64
        }
        _ => 0,
    };
    let down = view
        .state
        .gpus(node)
        .iter()
        .filter(|g| g.down && g.is_idle())
        .count() as u64;
    hidden + down
}

/// Whether a node is usable for new work as the view shows it.
fn node_usable(view: &ClusterView<'_>, node: NodeId) -> bool {
    // A node the daemon hides shows no free resources at all although its state has some.
    if std::ptr::eq(view.free, view.state.free()) {
        return true;
    }
    let n = node.index();
    match (view.free.get(n), view.state.free().get(n)) {
        (Some(v), Some(s)) => !(v.gpus == 0 && v.cpu.0 == 0 && v.memory.0 == 0 && s.gpus > 0),
        _ => false,
    }
}

/// The generic reason a queued `job` waits, judged from its request and what the view shows
/// free (used when the policy states none). Cheap: O(node groups) and one placement search
/// for a whole-GPU job that the free counts cannot rule out; GPUs are visited only for MIG
/// and share requests, and for GPUs down or partitioned in the allowed groups.
pub fn classify(view: &ClusterView<'_>, job: &TrainingJob) -> WaitKind {
    if let Some(mig) = &job.mig {
        return classify_mig(view, job, mig);
    }
    if let Some(share) = job.gpu_share {
        return classify_share(view, job, share.sm_permille);
    }
    classify_whole(view, job)
}

/// [`classify`] of a job as whole GPUs (for policies that give MIG and share requests a
/// whole GPU).
pub fn classify_whole(view: &ClusterView<'_>, job: &TrainingJob) -> WaitKind {
    let free = group_free(view);
    let groups = &view.cluster.groups;
    let need = job.gpus as u64;
    let mut free_allowed = 0u64;
    let mut most_in_group = 0u64;
    for (g, f) in groups.iter().zip(&free) {
        if allowed(&job.gpu_types, g.gpu) {
            free_allowed += f;
            most_in_group = most_in_group.max(*f);
        }
    }
    if most_in_group >= need {
        if fits_whole(view, job) {
            return WaitKind::Order;
        }
        return WaitKind::CpuMemory;
    }
    if free_allowed >= need {
        return WaitKind::Gang;
    }
    // Short of free GPUs: would the idle GPUs that cannot be used now (down, drained) or
    // that a layout change would free (partitioned, nobody on them) make up the difference?
    let mut unusable = 0u64;
    let mut partitioned_idle = 0u64;
    let hides = !std::ptr::eq(view.free, view.state.free());
    for g in groups.iter().filter(|g| allowed(&job.gpu_types, g.gpu)) {
        let (down, parts) = (
            view.state.group_down_gpus(g_index(view.cluster, g)),
            view.state.group_partitioned_gpus(g_index(view.cluster, g)),
        );
        if down == 0 && parts == 0 && !hides {
            continue;
        }
        for n in g.first_node..g.first_node + g.count {
            let node = NodeId(n);
            unusable += unusable_idle(view, node);
            if parts > 0 && node_usable(view, node) {
                partitioned_idle += view
                    .state
                    .gpus(node)
                    .iter()
                    .filter(|s| s.mig.is_some() && s.is_idle() && !s.down)
                    .count() as u64;
            }
        }
    }
    if free_allowed + unusable >= need && unusable > 0 {
        return WaitKind::Unavailable;
    }
    if free_allowed + unusable + partitioned_idle >= need && partitioned_idle > 0 {
        return WaitKind::MigLayout;
    }
    WaitKind::Gpus
}

fn g_index(cluster: &Cluster, g: &tessera_model::NodeGroup) -> usize {
    cluster
        .nodes
        .get(g.first_node as usize)
        .map_or(0, |n| n.group as usize)
}

/// A MIG request: a free instance of a matching profile, or an idle GPU that a new layout
/// would serve, or a reconfiguration that will.
fn classify_mig(view: &ClusterView<'_>, job: &TrainingJob, mig: &MigRequest) -> WaitKind {
    let mut reconfiguring = false;
    let mut idle_gpu = false;
    let mut unusable = false;
    for g in view
        .cluster
        .groups
        .iter()
        .filter(|g| allowed(&job.gpu_types, g.gpu))
    {
        let Some(geo) = view.cluster.catalog.mig_geometry(g.gpu) else {
            continue;
        };
        let want = mig.profile().map(|p| geo.find_profile(p));
        if want == Some(None) {
            continue; // this model has no such profile
        }
        for n in g.first_node..g.first_node + g.count {
            let node = NodeId(n);
            let usable = node_usable(view, node);
            for s in view.state.gpus(node) {
                if s.down || !usable {
                    unusable |= s.is_idle();
                    continue;
                }
                if s.ready_at > view.now {
                    reconfiguring = true;
                    continue;
                }
                match &s.mig {
                    Some(layout) => {
                        let free_match = layout.iter().enumerate().any(|(i, inst)| {
                            s.mig_busy & (1 << i) == 0
                                && want.is_none_or(|w| w == Some(inst.profile))
                        });
                        if free_match {
                            return WaitKind::Order;
                        }
                        idle_gpu |= s.is_idle();
                    }
                    None => idle_gpu |= s.is_whole_free(),
                }
            }
        }
    }
    if reconfiguring || idle_gpu {
        WaitKind::MigLayout
    } else if unusable {
        WaitKind::Unavailable
    } else {
        WaitKind::Gpus
    }
}

/// A GPU-share request: a GPU (not partitioned, not held whole) with the SM share left, or
/// an idle one.
fn classify_share(view: &ClusterView<'_>, job: &TrainingJob, sm: u16) -> WaitKind {
    let mut unusable = false;
    let mut partitioned = false;
    for g in view
        .cluster
        .groups
        .iter()
        .filter(|g| allowed(&job.gpu_types, g.gpu))
    {
        for n in g.first_node..g.first_node + g.count {
            let node = NodeId(n);
            let usable = node_usable(view, node);
            for s in view.state.gpus(node) {
                if s.down || !usable {
                    unusable |= s.is_idle();
                    continue;
                }
                if s.ready_at > view.now || s.whole {
                    continue;
                }
                if s.mig.is_some() {
                    partitioned |= s.is_idle();
                    continue;
                }
                if s.sm_requested + u32::from(sm) <= SM_REQUEST_CAPACITY {
                    return WaitKind::Order;
                }
            }
        }
    }
    if unusable {
        WaitKind::Unavailable
    } else if partitioned {
        WaitKind::MigLayout
    } else {
        WaitKind::Quota
    }
}

/// What `job` asks for, with catalog names.
pub fn need_of(cluster: &Cluster, job: &TrainingJob) -> Need {
    Need {
        gpus: job.gpus,
        gpu_types: job
            .gpu_types
            .iter()
            .map(|&t| cluster.catalog.get(t).name.clone())
            .collect(),
        cpu_millis: job.cpu.map(|c| c.0),
        memory_bytes: job.memory.map(|m| m.0),
        mig: job.mig.as_ref().map(|m| m.to_string()),
        gpu_share_permille: job.gpu_share.map(|s| s.sm_permille),
    }
}

/// The allowed node groups' capacity now.
pub fn supply_of(view: &ClusterView<'_>, job: &TrainingJob) -> Vec<GroupFree> {
    let cluster = view.cluster;
    let mut out = Vec::new();
    for (gi, g) in cluster.groups.iter().enumerate() {
        if !allowed(&job.gpu_types, g.gpu) {
            continue;
        }
        let mut row = GroupFree {
            group: g.name.clone(),
            gpu: cluster.catalog.get(g.gpu).name.clone(),
            total_gpus: g.total_gpus(),
            free_gpus: 0,
            most_on_one_node: 0,
            unavailable_gpus: 0,
            partitioned_gpus: 0,
            free_mig_instances: 0,
            reconfiguring_gpus: 0,
        };
        for n in g.first_node..g.first_node + g.count {
            let node = NodeId(n);
            let f = view.free.get(node.index()).map_or(0, |f| f.gpus);
            row.free_gpus += f as u64;
            row.most_on_one_node = row.most_on_one_node.max(f);
            row.unavailable_gpus += unusable_idle(view, node);
            for s in view.state.gpus(node) {
                if let Some(layout) = &s.mig {
                    row.partitioned_gpus += 1;
                    row.free_mig_instances += (0..layout.len())
                        .filter(|i| s.mig_busy & (1 << i) == 0)
                        .count() as u64;
                }
                if s.ready_at > view.now {
                    row.reconfiguring_gpus += 1;
                }
            }
        }
        debug_assert_eq!(gi, g_index(cluster, g));
        out.push(row);
    }
    out
}

/// Running jobs holding GPUs of the job's allowed groups: (the largest few, how many).
pub fn holders_of(view: &ClusterView<'_>, job: &TrainingJob) -> (Vec<HolderInfo>, usize) {
    let mut all: Vec<HolderInfo> = view
        .active
        .iter()
        .filter(|a| a.state == JobState::Running)
        .filter_map(|a| {
            let alloc = a.allocation.as_ref()?;
            let gpus: u32 = alloc
                .shares
                .iter()
                .filter(|s| {
                    view.cluster
                        .nodes
                        .get(s.node.index())
                        .is_some_and(|n| allowed(&job.gpu_types, n.gpu))
                })
                .map(|s| s.devices.map_or(s.gpus, |d| d.gpus.count()))
                .sum();
            (gpus > 0).then(|| HolderInfo {
                job: a.id,
                name: view
                    .jobs
                    .get(a.id.index())
                    .map_or_else(|| format!("#{}", a.id.0), |j| j.name.to_string()),
                gpus,
            })
        })
        .collect();
    all.sort_by(|a, b| b.gpus.cmp(&a.gpus).then(a.job.cmp(&b.job)));
    let total = all.len();
    all.truncate(HOLDERS_SHOWN);
    (all, total)
}

/// Queued jobs ahead of `job` by priority (high first), then submission, then id: the
/// count shown when the policy states no order of its own.
pub fn ahead_by_priority(view: &ClusterView<'_>, job: &TrainingJob) -> u32 {
    let key = |j: &TrainingJob| (-(j.priority as i64), j.submit, j.id);
    let mine = key(job);
    view.active
        .iter()
        .filter(|a| a.state == JobState::Queued && a.id != job.id)
        .filter_map(|a| view.jobs.get(a.id.index()))
        .filter(|j| key(j) < mine)
        .count() as u32
}

/// The full reason `job` waits: the policy's statement (else [`classify`]) with what it
/// needs, what is free per allowed node group, who holds it and the jobs ahead.
pub fn explain(
    view: &ClusterView<'_>,
    job: &TrainingJob,
    stated: Option<Waiting>,
) -> PendingReason {
    let stated = stated.unwrap_or_else(|| Waiting::new(classify(view, job)));
    let (holders, holders_total) = holders_of(view, job);
    let ahead = stated.ahead.or_else(|| Some(ahead_by_priority(view, job)));
    PendingReason {
        kind: stated.kind,
        need: need_of(view.cluster, job),
        free: supply_of(view, job),
        holders,
        holders_total,
        ahead,
        note: stated.note,
    }
}

/// The reason a job being profiled waits (it is not in the view yet).
pub fn profiling(cluster: &Cluster, job: &TrainingJob) -> PendingReason {
    PendingReason {
        kind: WaitKind::Profiling,
        need: need_of(cluster, job),
        free: Vec::new(),
        holders: Vec::new(),
        holders_total: 0,
        ahead: None,
        note: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ClusterState;
    use crate::view::{ActiveJob, Trigger};
    use proptest::prelude::*;
    use tessera_model::{Bytes, GpuCatalog, MilliCpu, SimDuration, SimTime};

    /// Two groups: 2 × 4 A100-80GB (MIG-capable), 1 × 4 V100-32GB.
    fn cluster() -> Cluster {
        let yaml = "apiVersion: tessera/v1\nkind: Cluster\nspec:\n  nodeGroups:\n    \
            - {name: a100, count: 2, gpu: A100-80GB, gpusPerNode: 4, cpus: 32, memory: 256Gi}\n    \
            - {name: v100, count: 1, gpu: V100-32GB, gpusPerNode: 4, cpus: 16, memory: 128Gi}\n";
        Cluster::from_yaml(yaml, &GpuCatalog::builtin()).unwrap()
    }

    fn job(id: u32, gpus: u32) -> TrainingJob {
        TrainingJob::simple(id, SimTime::ZERO, gpus, SimDuration::from_secs(60))
    }

    fn kind_of(cluster: &Cluster, state: &ClusterState, job: &TrainingJob) -> WaitKind {
        let jobs = [job.clone()];
        let active = [ActiveJob::arrived(job)];
        let view = ClusterView {
            now: SimTime::ZERO,
            trigger: Trigger::default(),
            cluster,
            free: state.free(),
            state,
            jobs: &jobs,
            active: &active,
            services: &[],
        };
        classify(&view, job)
    }

    /// Takes `gpus` whole GPUs on node `node` for someone else.
    fn hold(cluster: &Cluster, state: &mut ClusterState, node: u32, gpus: u32) {
        let mut j = job(99, gpus);
        j.gpu_types.clear();
        let alloc = tessera_model::Allocation::single(crate::placement::proportional_share(
            &j,
            &cluster.groups[cluster.nodes[node as usize].group as usize],
            NodeId(node),
            gpus,
        ));
        let alloc = state.resolve(cluster, &j, &alloc, SimTime::ZERO).unwrap();
        state.take(cluster, &alloc);
    }

    #[test]
    fn each_generic_kind_from_the_state_that_causes_it() {
        let c = cluster();
        let a100 = c.catalog.find("A100-80GB").unwrap();
        let v100 = c.catalog.find("V100-32GB").unwrap();
        let mut s = ClusterState::new(&c);
        // Everything free: fits.
        assert_eq!(kind_of(&c, &s, &job(0, 4)), WaitKind::Order);
        // 3 free A100s on node 0, 4 on node 1, 4 V100s: 12 GPUs of any type do not fit in one
        // group (A100s: 7), but 11 are free in all.
        hold(&c, &mut s, 0, 1);
        assert_eq!(kind_of(&c, &s, &job(0, 11)), WaitKind::Gang);
        assert_eq!(kind_of(&c, &s, &job(0, 12)), WaitKind::Gpus);
        let mut typed = job(0, 5);
        typed.gpu_types = vec![v100];
        assert_eq!(kind_of(&c, &s, &typed), WaitKind::Gpus);
        // CPU: 70 cores on 2 GPUs; no two nodes have that.
        let mut cpu = job(0, 2);
        cpu.cpu = Some(MilliCpu::from_cores(70));
        cpu.gpu_types = vec![a100];
        assert_eq!(kind_of(&c, &s, &cpu), WaitKind::CpuMemory);
        cpu.memory = Some(Bytes::from_gib(1));
        cpu.cpu = Some(MilliCpu::from_cores(8));
        assert_eq!(kind_of(&c, &s, &cpu), WaitKind::Order);
        // A V100 down: 4 V100s would fit but for it.
        let v_node = NodeId(2);
        assert!(s.set_down(v_node, 0, true));
        typed.gpus = 4;
        assert_eq!(kind_of(&c, &s, &typed), WaitKind::Unavailable);
        // MIG: A100 GPUs whole: a MIG request needs a layout; after partitioning one GPU with
        // a free 3g.40gb instance it fits.
        let mut mig = job(0, 1);
        mig.mig = Some(MigRequest::Profile("3g.40gb".into()));
        assert_eq!(kind_of(&c, &s, &mig), WaitKind::MigLayout);
        let geo = c.catalog.mig_geometry(a100).unwrap();
        let p = geo.find_profile("3g.40gb").unwrap();
        let layout = vec![tessera_model::MigInstance {
            profile: p,
            start: 4,
        }];
        s.reconfigure(NodeId(1), 0, Some(layout.clone()), SimTime::from_secs(10));
        // Being reconfigured (ready at 10 s): still the layout.
        assert_eq!(kind_of(&c, &s, &mig), WaitKind::MigLayout);
        s.reconfigure(NodeId(1), 0, Some(layout), SimTime::ZERO);
        assert_eq!(kind_of(&c, &s, &mig), WaitKind::Order);
        // Share of a V100 when every V100 is held or down.
        let mut share = job(0, 1);
        share.gpu_types = vec![v100];
        share.gpu_share = Some(tessera_model::GpuShareRequest {
            sm_permille: 500,
            memory: None,
        });
        assert_eq!(kind_of(&c, &s, &share), WaitKind::Order);
        hold(&c, &mut s, 2, 3);
        assert_eq!(kind_of(&c, &s, &share), WaitKind::Unavailable);
        assert!(s.set_down(v_node, 0, false));
        hold(&c, &mut s, 2, 1);
        assert_eq!(kind_of(&c, &s, &share), WaitKind::Quota);
    }

    proptest! {
        /// A job told it waits for GPUs (or their CPU and memory, or a gang) really cannot be
        /// placed now; one told it fits can.
        #[test]
        fn no_fitting_gpus_means_no_placement(
            holds in prop::collection::vec((0u32..3, 1u32..5), 0..8),
            gpus in 1u32..13,
            typed in 0usize..3,
            cpu in prop::option::of(1u64..64),
        ) {
            let c = cluster();
            let mut s = ClusterState::new(&c);
            for (node, g) in holds {
                let free = s.free()[node as usize].gpus;
                if free >= g {
                    hold(&c, &mut s, node, g);
                }
            }
            let mut j = job(0, gpus);
            j.gpu_types = match typed {
                0 => vec![],
                1 => vec![c.catalog.find("A100-80GB").unwrap()],
                _ => vec![c.catalog.find("V100-32GB").unwrap()],
            };
            j.cpu = cpu.map(MilliCpu::from_cores);
            let fits = Ledger::new(&c, s.free()).fit(&j).is_some();
            let kind = kind_of(&c, &s, &j);
            let free_allowed: u64 = c
                .nodes
                .iter()
                .filter(|n| allowed(&j.gpu_types, n.gpu))
                .map(|n| s.free()[n.id.index()].gpus as u64)
                .sum();
            match kind {
                WaitKind::Order => prop_assert!(fits),
                WaitKind::Gpus => {
                    prop_assert!(!fits);
                    prop_assert!(free_allowed < gpus as u64);
                }
                WaitKind::Gang | WaitKind::CpuMemory => prop_assert!(!fits),
                other => prop_assert!(false, "unexpected {other:?}"),
            }
        }
    }
}
