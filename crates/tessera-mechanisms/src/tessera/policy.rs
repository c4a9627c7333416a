//! The `tessera` policy and its ablations `tessera-no-<mechanism>`: the five mechanisms'
//! pieces on one cluster, each called from its own module (none is copied here).
//!
//! Every active job and service belongs to one piece, by what it asks:
//! - jobs asking for a MIG instance (`nvidia.com/mig-<profile>`, `mig-any`): MISO's policy
//!   (layouts on MIG-capable GPUs, MPS profiling, reconfiguration);
//! - inference services and jobs asking for a GPU share (`gpu_share`): Dilu's (quota
//!   packing, lazy horizontal and per-second vertical scaling), one Dilu per set of GPU
//!   models its holders may use, so that each plans only on GPUs its holders accept;
//! - every other training job: the training piece ([`policy_train`]): Crius's cells
//!   and plans in least-attained-service order with preemption at rounds, HAP's spanning of
//!   GPU models, Synergy's CPU and memory by sensitivity.
//!
//! At each scheduling point the pieces decide one after the other — MISO, then Dilu, then
//! training — on one scratch copy of the cluster (`policy_scratch`): each sees the
//! view filtered to its own jobs and services, with free resources and GPU states after the
//! earlier pieces' actions; each action is checked with the one validator and applied to
//! the copy before the next piece decides, so that no piece over-allocates another's GPUs.
//! MISO goes first because its jobs are waiting on GPUs it reconfigured for them (a start
//! after a reconfiguration must not find its GPU taken); Dilu next, so that services scale
//! out before training fills the rest; training last, on what is left. Dilu's mirror of the
//! cluster books every GPU another piece holds (or that its holders may not use) as taken,
//! so it neither plans on them nor adopts their holders. A piece never preempts,
//! reconfigures or retunes anything another owns: it only sees its own.
//!
//! Ablations: `tessera-no-synergy` (CPU and memory proportional to GPUs, explicit requests
//! still honoured), `tessera-no-crius` (the asked count on the first model that fits, no
//! plan), `tessera-no-miso` (MIG jobs get whole GPUs from the training piece),
//! `tessera-no-dilu` (a whole GPU per service instance, by Dilu's exclusive mode, and per
//! share job, from the training piece), `tessera-no-hap` (no job spans GPU models).
//! `tessera-las` orders training by least attained service even where the run gives
//! remaining-time estimates (`tessera` orders by them then, [`policy_train::Order::Auto`]).

use std::collections::BTreeMap;

use tessera_model::{
    Bytes, GpuModelId, JobId, MigRequest, MilliCpu, SimDuration, SimTime, TrainingJob,
};
use tessera_sched::{
    Action, ActiveJob, Capabilities, Capability, ClusterView, JobState, Policy, PolicyInfo,
    PolicyOptions, ServicePhase, ServiceView,
};

#[path = "policy_scratch.rs"]
mod policy_scratch;
#[path = "policy_train.rs"]
pub mod policy_train;

use tessera_sched::placement::proportional_share;

use crate::crius::policy::ROUND;
use crate::dilu::policy::DiluServe;
use crate::miso::policy::Miso;
use policy_scratch::Scratch;
use policy_train::{Order, TrainOptions, Training};

/// Every capability.
const ALL: Capabilities = Capabilities::TRAINING
    .with(Capability::MigProfile)
    .with(Capability::MigAny)
    .with(Capability::GpuShare)
    .with(Capability::Services)
    .with(Capability::ServiceQuotas)
    .with(Capability::Failures);

/// The policies this module registers.
pub const POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "tessera",
        about: "Tessera: Crius cells in LAS order with preemption, HAP across GPU types, MISO for MIG jobs, Dilu quota packing and scaling for services and shares, Synergy CPU/memory",
        capabilities: ALL,
    },
    PolicyInfo {
        name: "tessera-no-synergy",
        about: "tessera with CPU and memory proportional to GPUs (explicit requests honoured)",
        capabilities: ALL,
    },
    PolicyInfo {
        name: "tessera-no-crius",
        about: "tessera without Crius: the asked GPU count on the first type that fits, no plan choice",
        capabilities: ALL,
    },
    PolicyInfo {
        name: "tessera-no-miso",
        about: "tessera without MISO: MIG jobs get whole GPUs",
        capabilities: ALL
            .without(Capability::MigProfile)
            .without(Capability::MigAny),
    },
    PolicyInfo {
        name: "tessera-no-dilu",
        about: "tessera without Dilu's packing: a whole GPU per service instance and per share job",
        capabilities: ALL
            .without(Capability::GpuShare)
            .without(Capability::ServiceQuotas),
    },
    PolicyInfo {
        name: "tessera-no-hap",
        about: "tessera without HAP: no job spans GPU types (one too large for any type waits)",
        capabilities: ALL,
    },
    PolicyInfo {
        name: "tessera-las",
        about: "tessera ordering training by least attained service even where the run gives remaining-time estimates",
        capabilities: ALL,
    },
];

/// Which pieces a variant uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pieces {
    name: &'static str,
    synergy: bool,
    crius: bool,
    miso: bool,
    dilu: bool,
    hap: bool,
    order: Order,
}

fn pieces(name: &str) -> Option<Pieces> {
    let key = name.trim().to_ascii_lowercase();
    let info = POLICIES.iter().find(|p| p.name == key)?;
    let off = key.strip_prefix("tessera-no-").unwrap_or("");
    Some(Pieces {
        name: info.name,
        synergy: off != "synergy",
        crius: off != "crius",
        miso: off != "miso",
        dilu: off != "dilu",
        hap: off != "hap",
        order: if key == "tessera-las" {
            Order::Las
        } else {
            Order::Auto
        },
    })
}

/// Builds one of [`POLICIES`] by name (case-insensitive).
pub fn build(name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>> {
    let p = pieces(name)?;
    Some(Box::new(TesseraPolicy::new(p, options)))
}

/// What the simulator needs to run one of [`POLICIES`]: Dilu's serving latency tables and
/// 2 s load window, and Dilu's per-batch quota controller where Dilu packs quotas (not for
/// `tessera-no-dilu`, whose instances hold whole GPUs). The training truth is the run's
/// (`--perf`, or the one the inputs choose), not Dilu's. `None` when the name is not one of
/// them.
#[cfg(feature = "experiments")]
pub fn serving_setup(policy: &str) -> Option<Result<crate::ServingSetup, String>> {
    let p = pieces(policy)?;
    let base = if p.dilu { "dilu" } else { "dilu-exclusive" };
    let setup = crate::dilu::setup::serving_setup(base)?;
    Some(
        setup
            .map(|mut s| {
                s.about = if p.dilu {
                    "Dilu latency tables and vertical scaling for services; the run's training truth"
                } else {
                    "Dilu latency tables for services (whole-GPU instances); the run's training truth"
                };
                s.truth = None;
                s
            })
            .map_err(|e| e.to_string()),
    )
}

/// Which piece a job belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Mig,
    Share,
    Train,
}

/// The composed policy (see the module docs).
#[derive(Debug)]
pub struct TesseraPolicy {
    pieces: Pieces,
    round: SimDuration,
    miso: Miso,
    miso_used: bool,
    /// One Dilu per set of GPU models its holders may use (empty: any).
    dilu: BTreeMap<Vec<GpuModelId>, DiluServe>,
    training: Training,
    wakeup: Option<SimTime>,
    refused: u64,
    /// Per (model, profile, allowed GPU models) of a fixed-profile MIG request: whether
    /// MISO's slice table refuses it (see [`Self::miso_refuses`]).
    miso_refusals: BTreeMap<(String, String, Vec<GpuModelId>), bool>,
    /// Training jobs preempted to free a GPU for a service without an instance.
    service_preemptions: u64,
}

impl TesseraPolicy {
    fn new(pieces: Pieces, options: &PolicyOptions) -> TesseraPolicy {
        let round = options.round.unwrap_or(ROUND);
        TesseraPolicy {
            pieces,
            round,
            miso: Miso::new(crate::miso::miso_config(false, options.seed)),
            miso_used: false,
            dilu: BTreeMap::new(),
            training: Training::new(
                TrainOptions {
                    crius: pieces.crius,
                    synergy: pieces.synergy,
                    hap: pieces.hap,
                    order: pieces.order,
                },
                round,
            ),
            wakeup: None,
            refused: 0,
            miso_refusals: BTreeMap::new(),
            service_preemptions: 0,
        }
    }

    /// Whether MISO's piece would never start `spec`, a fixed MIG profile its slice table
    /// finds too small for the model (or that no allowed GPU offers). The composed truth runs
    /// such a job all the same (at the out-of-memory penalty on the slice, at full speed on a
    /// whole GPU), and every other policy runs it on a whole GPU: so does `tessera`, from the
    /// training piece, rather than refusing it. Memoised per request shape.
    fn miso_refuses(&mut self, spec: &TrainingJob, cluster: &tessera_model::Cluster) -> bool {
        let Some(MigRequest::Profile(profile)) = &spec.mig else {
            return false;
        };
        if !self.pieces.miso {
            return false;
        }
        let key = (spec.model.clone(), profile.clone(), spec.gpu_types.clone());
        if let Some(&r) = self.miso_refusals.get(&key) {
            return r;
        }
        let r = self.miso.refuses(spec, cluster).is_some();
        self.miso_refusals.insert(key, r);
        r
    }

    /// Jobs asking for a MIG instance go to MISO, GPU shares to Dilu, every other job to the
    /// training piece; a sub-GPU job `whole` (see [`Self::sub_gpu_whole`]) to the training
    /// piece too.
    fn class(&self, spec: &TrainingJob, whole: bool) -> Class {
        if whole && spec.mig.is_some() {
            Class::Train
        } else if self.pieces.miso && spec.mig.is_some() {
            Class::Mig
        } else if self.pieces.dilu && spec.gpu_share.is_some() {
            Class::Share
        } else {
            Class::Train
        }
    }

    /// The `mig-any` jobs the training piece runs on whole GPUs at this call rather than MISO
    /// on its slices, sorted. A job asking for "any MIG slice" takes what serves it best: by
    /// the composed truth a slice is never faster than the whole GPU its trace time is for
    /// (measured on the default run: MISO's slices ran them 2-3 times slower, 45 h of JCT
    /// against 18 h on whole GPUs), so slices pay only when GPUs are short. A fixed profile or
    /// a share is held as asked (the capability `tessera` declares, which capabilities_sim
    /// checks), even though the whole GPU would be faster: going whole for them too (tried)
    /// broke that contract. A job MISO holds (running on its GPU, or promised one) stays
    /// MISO's; one the training piece runs stays the training piece's; the queued others all
    /// go whole when the idle whole MIG-capable GPUs outnumber them (one is left for MISO,
    /// which starts a job alone on a GPU whole and packs the next ones beside it) and every
    /// GPU queued training jobs that could start now ask for is free beside them, else all
    /// to MISO.
    fn sub_gpu_whole(&self, view: &ClusterView<'_>) -> Vec<JobId> {
        let mut whole = Vec::new();
        if !self.pieces.miso {
            return whole;
        }
        let (mut mig_capable, mut free) = (0u64, 0u64);
        for node in &view.cluster.nodes {
            let capable = view.cluster.catalog.mig_geometry(node.gpu).is_some();
            for g in view.state.gpus(node.id) {
                if g.is_whole_free() && g.ready_at <= view.now {
                    free += 1;
                    mig_capable += u64::from(capable);
                }
            }
        }
        let mut waiting: Vec<JobId> = Vec::new();
        let mut waiting_mig: u64 = 0;
        // GPUs of queued training jobs that could start on what is free (one waiting for
        // more GPUs than are free does not keep small jobs off whole GPUs).
        let mut train_asks: u64 = 0;
        for a in view.active {
            let Some(spec) = view.spec(a) else { continue };
            let mig = self.pieces.miso && matches!(spec.mig, Some(MigRequest::Any));
            if !mig {
                if a.state == JobState::Queued && u64::from(spec.gpus) <= free {
                    train_asks += u64::from(spec.gpus);
                }
                continue;
            }
            if mig && self.miso.holds(a.id) {
                continue;
            }
            match a.state {
                JobState::Running => {
                    let part = a.allocation.as_ref().and_then(|x| x.part());
                    if matches!(part, Some(tessera_model::GpuPart::Whole)) {
                        whole.push(a.id);
                    }
                }
                JobState::Queued => {
                    waiting.push(a.id);
                    waiting_mig += u64::from(mig);
                }
            }
        }
        if !waiting.is_empty() {
            let n = waiting.len() as u64;
            if (waiting_mig == 0 || mig_capable > waiting_mig) && free >= n + train_asks {
                whole.extend(waiting);
            }
        }
        whole.sort_unstable();
        whole
    }

    /// Preempts, for each active service left without an instance after this call, one
    /// running training job (fewest GPUs, then most remaining work) on a GPU model the
    /// service may use, so that Dilu (which decides before training at every call) places
    /// the instance on the GPU it frees at the next one. Without it a whole-GPU service that
    /// starts while training holds every GPU waited for a training job to end (measured: a
    /// 100 ms-SLO service without an instance for 8% of its life, p99 of 357 s, on a loaded
    /// 24-GPU cluster): Dilu's reservation keeps only its own placements off a GPU, and the
    /// training piece took every GPU a job freed.
    fn free_gpu_for_services(
        &mut self,
        view: &ClusterView<'_>,
        train: &[ActiveJob],
        scratch: &mut Scratch<'_>,
        actions: &mut Vec<Action>,
    ) {
        let mut taken: Vec<JobId> = Vec::new();
        for svc in view.services {
            if !matches!(svc.phase, ServicePhase::Active) || !svc.instances.is_empty() {
                continue;
            }
            let placed = actions
                .iter()
                .any(|a| matches!(a, Action::ScaleOut { service, .. } if *service == svc.spec.id));
            if placed {
                continue;
            }
            let allowed = |alloc: &tessera_model::Allocation| {
                alloc.shares.iter().all(|s| {
                    view.cluster.nodes.get(s.node.index()).is_some_and(|n| {
                        svc.spec.gpu_types.is_empty() || svc.spec.gpu_types.contains(&n.gpu)
                    })
                })
            };
            let victim = train
                .iter()
                .filter(|a| a.state == JobState::Running && !taken.contains(&a.id))
                .filter(|a| !actions.iter().any(|x| x.job() == Some(a.id)))
                .filter_map(|a| {
                    let alloc = a.allocation.as_ref()?;
                    let whole = matches!(alloc.part(), Some(tessera_model::GpuPart::Whole));
                    (whole && alloc.gpus() > 0 && allowed(alloc)).then(|| {
                        let rest = policy_train::remaining_us(a).unwrap_or(u64::MAX);
                        ((alloc.gpus(), std::cmp::Reverse(rest), a.id), a.id)
                    })
                })
                .min()
                .map(|(_, id)| id);
            if let Some(job) = victim {
                let act = Action::Preempt { job };
                if scratch.apply(view, &act) {
                    actions.push(act);
                    taken.push(job);
                    self.service_preemptions += 1;
                }
            }
        }
    }

    /// The Dilu a holder allowed on `types` belongs to: its models sorted, none when they
    /// include every model of the cluster.
    fn dilu_key(view: &ClusterView<'_>, types: &[GpuModelId]) -> Vec<GpuModelId> {
        let mut k: Vec<GpuModelId> = types.to_vec();
        k.sort_unstable();
        k.dedup();
        if view.cluster.groups.iter().all(|g| k.contains(&g.gpu)) {
            k.clear();
        }
        k
    }

    fn new_dilu(&self) -> DiluServe {
        let name = if self.pieces.dilu {
            "dilu"
        } else {
            "dilu-exclusive"
        };
        let mut d = DiluServe::by_name(name).unwrap_or_else(|| {
            DiluServe::new("dilu-exclusive", crate::dilu::policy::ServeMode::Exclusive)
        });
        d.host_fit = true;
        d.slo_scaling = true;
        d
    }

    fn run_dilu(
        &mut self,
        view: &ClusterView<'_>,
        shares: &[ActiveJob],
        scratch: &mut Scratch<'_>,
        actions: &mut Vec<Action>,
    ) {
        // Per key: its share jobs and services.
        let mut jobs_of: BTreeMap<Vec<GpuModelId>, Vec<ActiveJob>> = BTreeMap::new();
        for a in shares {
            if let Some(spec) = view.spec(a) {
                jobs_of
                    .entry(Self::dilu_key(view, &spec.gpu_types))
                    .or_default()
                    .push(a.clone());
            }
        }
        let service_keys: Vec<Vec<GpuModelId>> = view
            .services
            .iter()
            .map(|s| Self::dilu_key(view, &s.spec.gpu_types))
            .collect();
        for k in jobs_of.keys().chain(service_keys.iter()) {
            if !self.dilu.contains_key(k) {
                let d = self.new_dilu();
                self.dilu.insert(k.clone(), d);
            }
        }
        let keys: Vec<Vec<GpuModelId>> = self.dilu.keys().cloned().collect();
        for key in keys {
            let jobs = jobs_of.remove(&key).unwrap_or_default();
            // Every service this Dilu's (the usual case): the view's own, not a copy (a
            // service's spec carries its whole arrival series; copying it at every
            // decision was a quarter of the default run's time).
            let all_ours = service_keys.iter().all(|k| *k == key);
            let copied: Vec<ServiceView> = if all_ours {
                Vec::new()
            } else {
                view.services
                    .iter()
                    .zip(&service_keys)
                    .map(|(s, k)| {
                        if *k == key {
                            s.clone()
                        } else {
                            // Another Dilu's: this one leaves it alone.
                            ServiceView {
                                phase: ServicePhase::Pending,
                                instances: Vec::new(),
                                pending: 0,
                                ..s.clone()
                            }
                        }
                    })
                    .collect()
            };
            let services: &[ServiceView] = if all_ours { view.services } else { &copied };
            // GPUs this Dilu's holders are on.
            let mut own: Vec<(u32, u32)> = Vec::new();
            let allocs = jobs.iter().filter_map(|a| a.allocation.as_ref()).chain(
                view.services
                    .iter()
                    .zip(&service_keys)
                    .filter(|(_, k)| **k == key)
                    .flat_map(|(s, _)| s.instances.iter().map(|i| &i.allocation)),
            );
            for alloc in allocs {
                for s in &alloc.shares {
                    if let Some(d) = s.devices {
                        own.extend(d.gpus.iter().map(|g| (s.node.0, g)));
                    }
                }
            }
            own.sort_unstable();
            let mut acts = Vec::new();
            {
                let v = ClusterView {
                    free: scratch.state.free(),
                    state: &scratch.state,
                    active: &jobs,
                    services,
                    ..*view
                };
                let Some(dilu) = self.dilu.get_mut(&key) else {
                    continue;
                };
                let allowed = |gpu: GpuModelId| key.is_empty() || key.contains(&gpu);
                dilu.shape_on(&v, |n| allowed(n.gpu));
                let state = &scratch.state;
                dilu.set_blocked(&v, |node, g| {
                    let Some(n) = view.cluster.nodes.get(node.index()) else {
                        return false;
                    };
                    if !allowed(n.gpu) {
                        return false;
                    }
                    if own.binary_search(&(node.0, g)).is_ok() {
                        return true;
                    }
                    state
                        .gpus(node)
                        .get(g as usize)
                        .is_some_and(|s| s.is_whole_free() && s.ready_at <= view.now)
                });
                dilu.schedule(&v, &mut acts);
            }
            for i in 0..acts.len() {
                let (done, later) = acts.split_at_mut(i + 1);
                let Some(a) = done.last_mut() else { continue };
                host_share(view, scratch, a, later);
                let a = a.clone();
                if scratch.apply(view, &a) {
                    actions.push(a);
                }
            }
        }
    }
}

/// Gives a share job Dilu starts the host CPU and memory of a whole GPU's proportional share
/// of its node, as far as the node has them free (never less than Dilu gave). Dilu sizes a
/// share job's host part at 2 cores per GPU, its serving instances' shape; an image model
/// that decodes on the host then ran 10-15 times slower than its trace (Synergy's tables),
/// which the composed truth reads against the proportional share the job implicitly asked.
/// What Dilu's `later` actions of the same batch take on a node is left to them (Dilu
/// planned them beside the job's 2 cores), and so is the proportional share of the node's
/// whole-free GPUs (the training piece plans on it).
fn host_share(view: &ClusterView<'_>, scratch: &Scratch<'_>, act: &mut Action, later: &[Action]) {
    let Action::Start { job, allocation } = act else {
        return;
    };
    let Some(spec) = view.jobs.get(job.index()) else {
        return;
    };
    let free = scratch.state.free();
    for s in &mut allocation.shares {
        let Some(node) = view.cluster.nodes.get(s.node.index()) else {
            continue;
        };
        let Some(group) = view.cluster.groups.get(node.group as usize) else {
            continue;
        };
        let Some(avail) = free.get(s.node.index()) else {
            continue;
        };
        // The node's whole-free GPUs keep their proportional host share for training.
        let per = u64::from(group.gpus_per_node.max(1));
        let keep = u64::from(avail.gpus);
        let (mut cpu, mut memory) = (
            avail.cpu.0.saturating_sub(group.cpu.0 / per * keep),
            avail.memory.0.saturating_sub(group.memory.0 / per * keep),
        );
        for l in later {
            let (Action::Start { allocation: x, .. }
            | Action::ScaleOut { allocation: x, .. }
            | Action::Resize { allocation: x, .. }
            | Action::Retune { allocation: x, .. }
            | Action::RetuneInstance { allocation: x, .. }) = l
            else {
                continue;
            };
            for o in x.shares.iter().filter(|o| o.node == s.node) {
                cpu = cpu.saturating_sub(o.cpu.0);
                memory = memory.saturating_sub(o.memory.0);
            }
        }
        let want = proportional_share(spec, group, s.node, spec.gpus.max(1));
        s.cpu = s.cpu.max(want.cpu.min(MilliCpu(cpu)));
        s.memory = s.memory.max(want.memory.min(Bytes(memory)));
    }
}

impl Policy for TesseraPolicy {
    fn name(&self) -> &str {
        self.pieces.name
    }

    fn round_length(&self) -> Option<SimDuration> {
        Some(self.round)
    }

    fn wakeup(&self) -> Option<SimTime> {
        self.wakeup
    }

    /// Nothing: a fixed MIG profile MISO's slice table refuses runs on a whole GPU from the
    /// training piece ([`Self::miso_refuses`]), as every other policy runs it.
    fn refuses(&self, _job: &TrainingJob, _cluster: &tessera_model::Cluster) -> Option<String> {
        None
    }

    /// The piece that would place the job states why it waits: MISO for MIG jobs (a
    /// repartition under way), Dilu for GPU shares (no SM quota and memory left on a GPU of
    /// its types), Crius for training jobs (its cells and rounds); else the generic analysis.
    /// A `mig-any` job counts as MISO's here, as it is unless GPUs are plentiful.
    fn pending_reason(
        &self,
        view: &ClusterView<'_>,
        job: &TrainingJob,
        detail: tessera_sched::Detail,
    ) -> Option<tessera_sched::Waiting> {
        match self.class(job, false) {
            Class::Mig => self.miso.pending_reason(view, job, detail),
            Class::Share => self
                .dilu
                .get(&job.gpu_types)
                .or_else(|| self.dilu.values().next())
                .and_then(|d| d.pending_reason(view, job, detail)),
            Class::Train if self.pieces.crius => {
                self.training.crius().pending_reason(view, job, detail)
            }
            Class::Train => None,
        }
    }

    /// Delegated to the pieces, each of which renumbers what it keeps per job; the
    /// composition keeps nothing per job id.
    fn renumber_jobs(&mut self, map: &[Option<tessera_model::JobId>]) -> bool {
        let mut ok = self.miso.renumber_jobs(map);
        for d in self.dilu.values_mut() {
            ok &= d.renumber_jobs(map);
        }
        ok &= self.training.crius_mut().renumber_jobs(map);
        ok
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        let mut scratch = Scratch::new(view);
        let mut mig: Vec<ActiveJob> = Vec::new();
        let mut shares: Vec<ActiveJob> = Vec::new();
        let mut train: Vec<ActiveJob> = Vec::new();
        let whole = self.sub_gpu_whole(view);
        for a in view.active {
            let Some(spec) = view.spec(a) else { continue };
            let whole = whole.binary_search(&a.id).is_ok() || self.miso_refuses(spec, view.cluster);
            match self.class(spec, whole) {
                Class::Mig => mig.push(a.clone()),
                Class::Share => shares.push(a.clone()),
                Class::Train => train.push(a.clone()),
            }
        }
        // 1. MISO: MIG jobs (it keeps its own state per GPU; called while it has any).
        if !mig.is_empty() || self.miso_used {
            self.miso_used = true;
            let mut acts = Vec::new();
            {
                let v = ClusterView {
                    free: scratch.state.free(),
                    state: &scratch.state,
                    active: &mig,
                    services: &[],
                    ..*view
                };
                self.miso.schedule(&v, &mut acts);
            }
            for a in acts {
                if scratch.apply(view, &a) {
                    actions.push(a);
                }
            }
        }
        // 2. Dilu: services and share jobs.
        if !shares.is_empty() || !view.services.is_empty() || !self.dilu.is_empty() {
            self.run_dilu(view, &shares, &mut scratch, actions);
        }
        // 3. Training.
        self.training
            .schedule(view, &train, view.trigger.round, &mut scratch, actions);
        // 4. A service with no instance that Dilu could not place: a GPU from training.
        if self.pieces.dilu || !view.services.is_empty() {
            self.free_gpu_for_services(view, &train, &mut scratch, actions);
        }
        self.refused += scratch.refused;
        // Wake-ups: MISO's, and Dilu's second-by-second scaling while a service is live.
        let mut wake = if self.miso_used {
            self.miso.wakeup()
        } else {
            None
        };
        let mut earliest = |t: SimTime| {
            if t > view.now {
                wake = Some(wake.map_or(t, |w: SimTime| w.min(t)));
            }
        };
        for s in view.services {
            match s.phase {
                ServicePhase::Active => earliest(view.now + SimDuration::from_secs(1)),
                ServicePhase::Pending => earliest(s.spec.start),
                ServicePhase::Ended if !s.instances.is_empty() => {
                    earliest(view.now + SimDuration::from_secs(1))
                }
                _ => {}
            }
        }
        self.wakeup = wake;
    }

    fn stats(&self) -> Vec<(String, f64)> {
        let mut s = vec![
            ("preemptions".into(), self.training.preemptions as f64),
            ("spanning_starts".into(), self.training.spans as f64),
            ("synergy_tuned".into(), self.training.tuned as f64),
            (
                "multi_resource_starts".into(),
                self.training.backfills as f64,
            ),
            ("refused_actions".into(), self.refused as f64),
            (
                "service_preemptions".into(),
                self.service_preemptions as f64,
            ),
        ];
        s.extend(
            self.training
                .crius()
                .stats()
                .into_iter()
                .map(|(k, v)| (format!("crius_{k}"), v)),
        );
        if self.miso_used {
            s.extend(
                self.miso
                    .stats()
                    .into_iter()
                    .map(|(k, v)| (format!("miso_{k}"), v)),
            );
        }
        let mut dilu: BTreeMap<String, f64> = BTreeMap::new();
        for d in self.dilu.values() {
            for (k, v) in d.stats() {
                *dilu.entry(format!("dilu_{k}")).or_default() += v;
            }
        }
        s.extend(dilu);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::MigRequest;

    #[test]
    fn every_name_builds_with_its_pieces() {
        for p in POLICIES {
            let built = build(p.name, &PolicyOptions::default()).expect("builds");
            assert_eq!(built.name(), p.name);
        }
        assert!(build("tessera-no-nothing", &PolicyOptions::default()).is_none());
        let p = pieces("TESSERA-NO-MISO").unwrap();
        assert!(!p.miso && p.crius && p.dilu && p.synergy && p.hap);
    }

    /// Queued `mig-any` jobs take whole GPUs while idle MIG-capable GPUs outnumber them, and
    /// go to MISO together otherwise.
    #[test]
    fn mig_any_jobs_go_whole_only_while_idle_gpus_outnumber_them() {
        let cluster = tessera_model::Cluster::from_yaml(
            "apiVersion: tessera/v1\nkind: Cluster\nmetadata:\n  name: t\nspec:\n  nodeGroups:\n    - {name: a, count: 1, gpu: A100-80GB, gpusPerNode: 2, cpus: 64, memory: 512Gi}\n",
            &tessera_model::GpuCatalog::builtin(),
        )
        .unwrap();
        let state = tessera_sched::ClusterState::new(&cluster);
        let jobs: Vec<TrainingJob> = (0..3)
            .map(|i| {
                let mut j = TrainingJob::simple(i, SimTime::ZERO, 1, SimDuration::from_secs(60));
                j.mig = Some(MigRequest::Any);
                j
            })
            .collect();
        let t = TesseraPolicy::new(pieces("tessera").unwrap(), &PolicyOptions::default());
        let whole = |n: usize| {
            let active: Vec<ActiveJob> = jobs[..n].iter().map(ActiveJob::arrived).collect();
            let view = ClusterView {
                now: SimTime::ZERO,
                trigger: tessera_sched::Trigger::default(),
                cluster: &cluster,
                free: state.free(),
                state: &state,
                jobs: &jobs,
                active: &active,
                services: &[],
            };
            t.sub_gpu_whole(&view).len()
        };
        assert_eq!(whole(1), 1);
        assert_eq!(whole(2), 0, "two jobs on two GPUs: one kept for MISO");
        assert_eq!(whole(3), 0, "three jobs on two GPUs: MISO packs them");
    }

    /// MIG jobs go to MISO, shares to Dilu (and to the training piece in the ablations
    /// without them).
    #[test]
    fn jobs_go_to_the_piece_of_what_they_ask() {
        let t = TesseraPolicy::new(pieces("tessera").unwrap(), &PolicyOptions::default());
        let mut j = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(60));
        assert_eq!(t.class(&j, false), Class::Train);
        j.mig = Some(MigRequest::Any);
        assert_eq!(t.class(&j, false), Class::Mig);
        j.mig = Some(MigRequest::Profile("1g.10gb".into()));
        assert_eq!(t.class(&j, false), Class::Mig);
        let no_miso = TesseraPolicy::new(
            pieces("tessera-no-miso").unwrap(),
            &PolicyOptions::default(),
        );
        assert_eq!(no_miso.class(&j, false), Class::Train);
        j.mig = None;
        j.gpu_share = Some(tessera_model::GpuShareRequest {
            sm_permille: 250,
            memory: None,
        });
        assert_eq!(t.class(&j, false), Class::Share);
    }
}
