//! Dilu's serving policies on the request-level simulator (DESIGN §5.4): placement of
//! service instances and training jobs under quotas by the packing rules of [`packing`]
//! (reused through a mirror [`Pool`] of what the policy placed), and lazy horizontal scaling.
//!
//! - `dilu`: Dilu's packing (admission Σ requests ≤ 1.0, Σ limits ≤ 1.5, memory; 0.6/0.4
//!   best fit; three-tier candidates; LLM memory split; training on one node). Vertical
//!   scaling has two parts: per batch, the simulator's `ShareController`
//!   ([`super::serving::DiluController`]); per second, in the policy itself and so in every
//!   driver (the daemon has no per-batch events), an instance under sustained overload gets
//!   a larger SM request by `RetuneInstance` and gives it back when idle
//!   ([`super::vertical::QuotaScaler`]). `dilu-no-vertical` is the same policy without
//!   either (static shares).
//! - `static-shares`: fixed quotas (each instance books its request as request and limit: no
//!   burst), training on whole GPUs, so inference never shares a GPU with training (no
//!   complementary packing); horizontal scaling only.
//! - `dilu-exclusive`: a whole GPU per instance and per training GPU, the same scaler.
//!
//! Every policy scales horizontally the same lazy way ([`HorizontalScaler`]) and never goes
//! below one instance while a service is active.
//!
//! The policy mirrors what it placed in a packing [`Pool`]; at each call it reconciles the
//! mirror with the view, so it also works where services arrive over time, instances go
//! without its asking (a retired service, a failed GPU, a launch the backend refused) or it
//! starts with holders it did not place (a daemon restart): those are adopted from their
//! allocations.

use std::collections::{BTreeMap, VecDeque};

use tessera_model::{
    Allocation, Bytes, DeviceAlloc, GpuDemand, GpuMask, GpuPart, InferenceService, JobId, MilliCpu,
    NodeId, NodeShare, ServiceId, SimDuration, SimTime, TrainingJob,
};
use tessera_sched::{
    validate, Action, Capabilities, Capability, ClusterState, ClusterView, Detail, InstanceId,
    JobState, Policy, PolicyInfo, ServicePhase, ServiceView, WaitKind, Waiting,
};

use super::instances::{InstanceKind, InstanceSpec};
use super::packing::{plan, PackingPolicy, Part, Pool, PoolSpec};
use super::profile;
use super::serving::{is_llm, model_of, DiluServingModel};
use super::truth::TrainingCurve;
use super::vertical::{quota_sample, raised_request, QuotaMove, QuotaSample, QuotaScaler};

/// Samples kept by the horizontal scaler (one a second).
pub const SAMPLES: usize = 40;
/// Samples over capacity that trigger a scale-out.
pub const OUT_AT: usize = 20;
/// Samples under the capacity of one instance fewer that trigger a scale-in.
pub const IN_AT: usize = 30;
/// Headroom a training quota gets over its request (the artifact's workload generator draws
/// training limits of at least request + 0.2).
pub const TRAINING_HEADROOM: u32 = 200;
/// Device memory per GPU of a training job that states none (our assumption).
pub const TRAINING_MEMORY_GB: u32 = 10;

/// What Dilu's packing honours: jobs within one node (it sees every node as the smallest
/// one of the cluster, so not mixed nodes), quotas of jobs and instances, explicit CPU and
/// memory, services and failures. It places without reading GPU types.
const DILU: Capabilities = Capabilities::NONE
    .with(Capability::MultiGpu)
    .with(Capability::GpuShare)
    .with(Capability::CpuMemory)
    .with(Capability::Services)
    .with(Capability::ServiceQuotas)
    .with(Capability::Failures)
    .with(Capability::NonMigGpus);

/// The registered serving policies.
pub const POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        name: "dilu",
        about: "Dilu serving: complementary quota packing of instances and training, lazy horizontal scaling (vertical scaling when the run has Dilu's controller, as in `repro dilu`)",
        capabilities: DILU,
    },
    PolicyInfo {
        name: "dilu-no-vertical",
        about: "Dilu serving without vertical scaling: the same packing and horizontal scaling on static request shares",
        capabilities: DILU,
    },
    PolicyInfo {
        name: "static-shares",
        about: "fixed quotas (request = limit) for instances, whole GPUs for training (no complementary packing), lazy horizontal scaling",
        capabilities: DILU.without(Capability::GpuShare),
    },
    PolicyInfo {
        name: "dilu-exclusive",
        about: "a whole GPU per inference instance and per training GPU, lazy horizontal scaling",
        capabilities: DILU
            .without(Capability::GpuShare)
            .without(Capability::ServiceQuotas),
    },
];

/// Which placement a serving policy uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServeMode {
    /// Dilu's quota packing (with or without the vertical controller in the run).
    Dilu,
    /// Fixed request quotas, training on whole GPUs.
    StaticShares,
    /// Whole GPUs for everything.
    Exclusive,
}

impl ServeMode {
    fn booking(self, kind: InstanceKind) -> PackingPolicy {
        match (self, kind) {
            (ServeMode::Dilu, _) => PackingPolicy::Dilu,
            (ServeMode::StaticShares, InstanceKind::Training) | (ServeMode::Exclusive, _) => {
                PackingPolicy::Exclusive
            }
            (ServeMode::StaticShares, _) => PackingPolicy::InflessR,
        }
    }
}

/// What the lazy scaler decides after a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Add an instance.
    Out,
    /// Remove one.
    In,
    /// Keep the count.
    Stay,
}

/// Dilu's lazy horizontal scaler for one service: a sample a second of the request rate,
/// the last [`SAMPLES`] kept; out when at least [`OUT_AT`] exceed `n × capacity`, in when at
/// least [`IN_AT`] are below `(n − 1) × capacity` and `n > 1`; the history is cleared after
/// each decision to scale.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HorizontalScaler {
    samples: VecDeque<f64>,
}

impl HorizontalScaler {
    /// Records a sample (requests per second) with `n` instances of `capacity` requests per
    /// second each and decides. A non-finite or negative sample counts as 0.
    pub fn sample(&mut self, rate: f64, n: usize, capacity: f64) -> Scale {
        let rate = if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            0.0
        };
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(rate);
        let n_f = n as f64;
        let over = self.samples.iter().filter(|&&r| r > n_f * capacity).count();
        if over >= OUT_AT {
            self.samples.clear();
            return Scale::Out;
        }
        let under = self
            .samples
            .iter()
            .filter(|&&r| r < (n_f - 1.0) * capacity)
            .count();
        if n > 1 && under >= IN_AT {
            self.samples.clear();
            return Scale::In;
        }
        Scale::Stay
    }

    /// Forgets the history (after an action taken for another reason).
    pub fn clear(&mut self) {
        self.samples.clear();
    }
}

/// Samples (of the last [`SAMPLES`]) with a request over the SLO that scale a service out
/// when [`DiluServe::slo_scaling`] is on. A request over the SLO stays in the view's window
/// (2 s in Dilu's setup) for about two samples, so this is two bursts of misses in 40 s.
pub const SLO_OUT_AT: usize = 4;
/// After an SLO-driven scale-out, the service is not scaled in for this long (its misses
/// come in bursts: scaling in at the first calm minute would bring them back).
pub const SLO_HOLD: SimDuration = SimDuration::from_secs(900);
/// At most this many instances per service are added for its SLO (beyond what its rate
/// asks).
pub const SLO_MAX_EXTRA: usize = 3;

/// The SLO watch of one service: which recent samples saw a request over the SLO, and when
/// the last SLO-driven scale-out was.
#[derive(Clone, Debug, Default, PartialEq)]
struct SloWatch {
    missed: VecDeque<bool>,
    last_out: Option<SimTime>,
    extra: usize,
}

impl SloWatch {
    fn sample(&mut self, missed: bool) {
        if self.missed.len() == SAMPLES {
            self.missed.pop_front();
        }
        self.missed.push_back(missed);
    }

    fn misses(&self) -> usize {
        self.missed.iter().filter(|&&m| m).count()
    }

    /// Whether the service may be scaled in at `now` (no recent miss, no recent SLO-driven
    /// scale-out).
    fn may_scale_in(&self, now: SimTime) -> bool {
        self.misses() == 0 && self.last_out.is_none_or(|t| now >= t + SLO_HOLD)
    }
}

/// A Dilu-family serving policy.
#[derive(Debug)]
pub struct DiluServe {
    name: &'static str,
    mode: ServeMode,
    latency: Option<DiluServingModel>,
    pool: Option<Pool>,
    per_node: u32,
    next_name: u64,
    /// Pool names of live instances and running jobs.
    instances: BTreeMap<InstanceId, String>,
    awaiting: BTreeMap<ServiceId, VecDeque<String>>,
    jobs: BTreeMap<JobId, String>,
    scalers: Vec<HorizontalScaler>,
    capacity: Vec<f64>,
    last_sample: Option<SimTime>,
    scale_outs: u64,
    scale_ins: u64,
    /// Retunes instance quotas from their load (`dilu`).
    vertical: bool,
    quota: BTreeMap<InstanceId, QuotaScaler>,
    raises: u64,
    lowers: u64,
    /// Mirror GPUs booked as unusable by a composition ([`DiluServe::set_blocked`]).
    blocked: std::collections::BTreeSet<u32>,
    /// Per active service still without an instance after a try: one mirror GPU that new
    /// training parts stay off until the instance fits there. Without it a whole-GPU (or
    /// large-quota) instance waits for ever behind packed training: every share a finishing
    /// job frees goes to the next queued job, so no GPU ever has room for it.
    reserved: BTreeMap<ServiceId, u32>,
    /// A job whose placement the validator refuses for want of host CPU or memory is
    /// planned again away from nodes that cannot hold it (a composition's; off for Dilu's
    /// own policies, which keep their published behaviour).
    pub(crate) host_fit: bool,
    /// Scaling also reads the SLO (a composition's; off for Dilu's own policies, which keep
    /// their published behaviour): Dilu's scalers read throughput only (the rate against
    /// what an instance serves at full batches, one second of overload), so a service whose
    /// misses come from bursts and batch latency at a low mean rate (RoBERTa at 1.5 req/s
    /// on an instance serving ~100) never scaled. With it on, an instance that missed the
    /// SLO in the last second counts as overloaded for vertical scaling (and is not lowered
    /// while misses are recent), and [`SLO_OUT_AT`] samples with misses scale the service
    /// out (up to [`SLO_MAX_EXTRA`] instances beyond what its rate asks), held for
    /// [`SLO_HOLD`].
    pub(crate) slo_scaling: bool,
    slo: Vec<SloWatch>,
}

impl DiluServe {
    /// A policy named `name` placing by `mode`.
    pub fn new(name: &'static str, mode: ServeMode) -> DiluServe {
        DiluServe {
            name,
            mode,
            latency: DiluServingModel::shipped().ok(),
            pool: None,
            per_node: 1,
            next_name: 0,
            instances: BTreeMap::new(),
            awaiting: BTreeMap::new(),
            jobs: BTreeMap::new(),
            scalers: Vec::new(),
            capacity: Vec::new(),
            last_sample: None,
            scale_outs: 0,
            scale_ins: 0,
            vertical: false,
            quota: BTreeMap::new(),
            raises: 0,
            lowers: 0,
            blocked: std::collections::BTreeSet::new(),
            reserved: BTreeMap::new(),
            host_fit: false,
            slo_scaling: false,
            slo: Vec::new(),
        }
    }

    /// The policy of a registered name.
    pub fn by_name(name: &str) -> Option<DiluServe> {
        let key = name.trim().to_ascii_lowercase();
        let (n, mode) = match key.as_str() {
            "dilu" => ("dilu", ServeMode::Dilu),
            "dilu-no-vertical" => ("dilu-no-vertical", ServeMode::Dilu),
            "static-shares" => ("static-shares", ServeMode::StaticShares),
            "dilu-exclusive" => ("dilu-exclusive", ServeMode::Exclusive),
            _ => return None,
        };
        let mut p = DiluServe::new(n, mode);
        p.vertical = n == "dilu";
        Some(p)
    }

    /// Requests per second one instance of `service` serves at full batches on its request.
    fn instance_capacity(&self, s: &InferenceService) -> f64 {
        let share = match (self.mode, s.instance.gpu) {
            (ServeMode::Exclusive, _) | (_, GpuDemand::Whole) => 1000,
            (_, GpuDemand::Quota { sm_request, .. }) => u32::from(sm_request),
        };
        self.served_at(s, share)
    }

    /// Requests per second one instance of `s` serves at full batches on `permille` of a
    /// GPU.
    fn served_at(&self, s: &InferenceService, permille: u32) -> f64 {
        let batch = s.max_batch.max(1);
        let share = f64::from(permille.clamp(1, 1000)) / 1000.0;
        let latency = model_of(&s.model)
            .and_then(|m| self.latency.as_ref()?.latency(m, batch, share))
            .unwrap_or_else(|| {
                s.slo.as_secs_f64() / 4.0 * (1.0 + 0.15 * f64::from(batch - 1)) / share
            });
        if latency > 0.0 && latency.is_finite() {
            f64::from(batch) / latency
        } else {
            f64::INFINITY
        }
    }

    fn fresh_name(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        format!("{prefix}-{}", self.next_name)
    }

    fn init(&mut self, view: &ClusterView<'_>) {
        if self.pool.is_some() {
            return;
        }
        let nodes: Vec<&tessera_model::Node> = view.cluster.nodes.iter().collect();
        let per_node = nodes.iter().map(|n| n.gpus).min().unwrap_or(1).max(1);
        self.set_pool(view, &nodes, per_node);
    }

    /// The mirror over `nodes`' GPUs: `per_node` GPUs per node, the least device memory of
    /// their GPUs, as many nodes as the cluster has.
    fn set_pool(&mut self, view: &ClusterView<'_>, nodes: &[&tessera_model::Node], per_node: u32) {
        let mem_gib = nodes
            .iter()
            .map(|n| view.cluster.catalog.get(n.gpu).memory_gib)
            .fold(f64::INFINITY, f64::min);
        let mem_mb = if mem_gib.is_finite() {
            (Bytes::from_gib_f64(mem_gib).0 / 1_000_000) as u32
        } else {
            0
        };
        self.per_node = per_node;
        self.pool = Some(Pool::new(PoolSpec {
            gpu_memory_mb: mem_mb,
            gpus_per_node: per_node,
            max_nodes: Some(view.cluster.nodes.len() as u32),
        }));
    }

    /// A scaler and a capacity for every service in the view (services may arrive after the
    /// first call, as in the daemon).
    fn track_services(&mut self, view: &ClusterView<'_>) {
        while self.scalers.len() < view.services.len() {
            let cap = self.instance_capacity(&view.services[self.scalers.len()].spec);
            self.capacity.push(cap);
            self.scalers.push(HorizontalScaler::default());
            self.slo.push(SloWatch::default());
        }
    }

    /// The pool parts of what `alloc` holds (GPUs numbered node × GPUs per node + index).
    fn parts_of(&self, alloc: &Allocation) -> Vec<Part> {
        let mut parts = Vec::new();
        for s in &alloc.shares {
            let Some(d) = s.devices else { continue };
            for g in d.gpus.iter().filter(|&g| g < self.per_node) {
                let gpu = s.node.0 * self.per_node + g;
                parts.push(match d.part {
                    GpuPart::Quota {
                        sm_request,
                        sm_limit,
                        memory,
                    } => Part {
                        gpu,
                        request: u32::from(sm_request),
                        limit: u32::from(sm_limit),
                        memory_mb: mb_ceil(memory),
                        whole: false,
                    },
                    // Whole GPUs and MIG instances: nobody else joins.
                    _ => Part {
                        gpu,
                        request: 1000,
                        limit: 1000,
                        memory_mb: 0,
                        whole: true,
                    },
                });
            }
        }
        parts
    }

    /// Books a holder the policy did not place (a daemon restart) under a fresh name;
    /// `None` when it does not fit the mirror.
    fn adopt(&mut self, service: &str, kind: InstanceKind, alloc: &Allocation) -> Option<String> {
        let parts = self.parts_of(alloc);
        let first = parts.first()?;
        let name = self.fresh_name("adopted");
        let spec = InstanceSpec {
            name: name.clone(),
            service: service.to_string(),
            kind,
            sm_request: first.request,
            sm_limit: first.limit,
            memory_mb: parts.iter().map(|p| p.memory_mb).collect(),
        };
        self.pool.as_mut()?.apply(&spec, &parts).ok()?;
        Some(name)
    }

    fn service_spec(&self, s: &InferenceService, name: String) -> InstanceSpec {
        let (req, lim) = match s.instance.gpu {
            GpuDemand::Quota {
                sm_request,
                sm_limit,
            } => (u32::from(sm_request), u32::from(sm_limit.max(sm_request))),
            _ => (1000, 1000),
        };
        InstanceSpec {
            name,
            service: s.name.clone(),
            kind: if is_llm(&s.model) {
                InstanceKind::LlmInference
            } else {
                InstanceKind::Inference
            },
            sm_request: req,
            sm_limit: lim,
            memory_mb: vec![mb_ceil(s.instance.gpu_memory)],
        }
    }

    fn job_spec(job: &TrainingJob, name: String) -> InstanceSpec {
        let req = match job.gpu_share {
            Some(g) => u32::from(g.sm_permille).clamp(1, 1000),
            None => training_request(job),
        };
        let mem = job
            .gpu_share
            .and_then(|g| g.memory)
            .map_or(TRAINING_MEMORY_GB * 1000, mb_ceil);
        InstanceSpec {
            name,
            service: job.name.to_string(),
            kind: InstanceKind::Training,
            sm_request: req,
            sm_limit: (req + TRAINING_HEADROOM).min(1000),
            memory_mb: vec![mem; job.gpus.max(1) as usize],
        }
    }

    /// The allocation of `parts` (one node), or `None` when they span nodes.
    fn allocation(&self, parts: &[Part], cpu: MilliCpu, memory: Bytes) -> Option<Allocation> {
        let first = parts.first()?;
        let node = first.gpu / self.per_node;
        let mut mask = GpuMask::default();
        for p in parts {
            if p.gpu / self.per_node != node {
                return None;
            }
            mask = GpuMask(mask.0 | GpuMask::one(p.gpu % self.per_node).0);
        }
        let whole = parts.iter().all(|p| p.whole);
        let part = if whole {
            GpuPart::Whole
        } else {
            let mem = parts.iter().map(|p| p.memory_mb).max().unwrap_or(0);
            GpuPart::Quota {
                sm_request: first.request.min(1000) as u16,
                sm_limit: first.limit.min(1000) as u16,
                memory: Bytes(u64::from(mem) * 1_000_000),
            }
        };
        Some(Allocation::new(vec![NodeShare {
            node: NodeId(node),
            gpus: if whole { mask.count() } else { 0 },
            cpu,
            memory,
            devices: Some(DeviceAlloc { gpus: mask, part }),
        }]))
    }

    /// Plans `spec`, builds its allocation and checks it against `state` with the one
    /// validator; on success books it in the pool and in `state`.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &mut self,
        view: &ClusterView<'_>,
        state: &mut ClusterState,
        spec: &InstanceSpec,
        cpu: MilliCpu,
        memory: Bytes,
        action: impl Fn(Allocation) -> Action,
        holder: tessera_sched::Holder<'_>,
    ) -> Option<Action> {
        let pool = self.pool.as_ref()?;
        let parts = plan(pool, self.mode.booking(spec.kind), spec).ok()?;
        let alloc = self.allocation(&parts, cpu, memory)?;
        let a = action(alloc);
        let resolved = validate(state, view.cluster, holder, None, &a, view.now).ok()??;
        self.pool.as_mut()?.apply(spec, &parts).ok()?;
        state.take(view.cluster, &resolved);
        Some(a)
    }

    /// Keeps this pass's training placements off the GPUs reserved for services waiting
    /// for their first instance ([`DiluServe::reserved`]): an empty one is booked whole, a
    /// loaded one closed to new parts. Returns what [`DiluServe::unhold_reserved`] undoes.
    fn hold_reserved(&mut self) -> Vec<(u32, bool)> {
        let mut undo = Vec::new();
        let Some(pool) = self.pool.as_mut() else {
            return undo;
        };
        for &gpu in self.reserved.values() {
            match pool.load(gpu) {
                Some(l) if l.whole => {}
                Some(l) if l.holders > 0 => {
                    pool.close(gpu);
                    undo.push((gpu, false));
                }
                _ => {
                    let name = format!("reserved-{gpu}");
                    if pool
                        .book_whole(name, "reserved", InstanceKind::Inference, gpu)
                        .is_ok()
                    {
                        undo.push((gpu, true));
                    }
                }
            }
        }
        undo
    }

    /// Undoes [`DiluServe::hold_reserved`].
    fn unhold_reserved(&mut self, undo: Vec<(u32, bool)>) {
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        for (gpu, booked) in undo {
            if booked {
                pool.release(&format!("reserved-{gpu}"));
            } else {
                pool.reopen(gpu);
            }
        }
    }

    /// After a service's first instance could not be placed: reserves the mirror GPU with
    /// the least booked SM request (lowest number on ties) among those holding training only
    /// (which drain: an instance of another service may never leave), unless the service has
    /// one already or no GPU of the mirror could ever hold the instance.
    fn reserve_for(&mut self, svc: &ServiceView) {
        if self.reserved.contains_key(&svc.spec.id) {
            return;
        }
        let spec = self.service_spec(&svc.spec, String::from("probe"));
        let Some(pool) = self.pool.as_ref() else {
            return;
        };
        let booking = self.mode.booking(spec.kind);
        if plan(&Pool::new(*pool.spec()), booking, &spec).is_err() {
            return;
        }
        let taken: std::collections::BTreeSet<u32> = self.reserved.values().copied().collect();
        let best = (0..pool.gpus())
            .filter(|g| !taken.contains(g) && !self.blocked.contains(g))
            .filter(|&g| pool.holds_only_training(g))
            .filter_map(|g| pool.load(g).map(|l| (l.request, g)))
            .min();
        if let Some((_, gpu)) = best {
            self.reserved.insert(svc.spec.id, gpu);
        }
    }

    /// For a composition sharing the cluster with other policies (Tessera's): shapes the
    /// mirror on the nodes `on` accepts (GPUs per node: the most of those nodes; device
    /// memory: the least of their GPUs) instead of every node, before the first call. A
    /// later call changes nothing.
    pub(crate) fn shape_on(
        &mut self,
        view: &ClusterView<'_>,
        on: impl Fn(&tessera_model::Node) -> bool,
    ) {
        if self.pool.is_some() {
            return;
        }
        let nodes: Vec<&tessera_model::Node> =
            view.cluster.nodes.iter().filter(|n| on(n)).collect();
        if nodes.is_empty() {
            return self.init(view);
        }
        let per_node = nodes.iter().map(|n| n.gpus).max().unwrap_or(1).max(1);
        self.set_pool(view, &nodes, per_node);
    }

    /// For a composition: books in the mirror, as whole holders, the GPUs this policy must
    /// leave alone (`usable` false: held by another policy, of a model its holders may not
    /// use, or missing on a node with fewer GPUs than the mirror's), and frees those booked
    /// at the previous call that are usable again. A GPU the policy holds itself stays as
    /// it is.
    pub(crate) fn set_blocked(
        &mut self,
        view: &ClusterView<'_>,
        usable: impl Fn(NodeId, u32) -> bool,
    ) {
        self.init(view);
        let per_node = self.per_node;
        let Some(pool) = self.pool.as_mut() else {
            return;
        };
        let mut now_blocked = std::collections::BTreeSet::new();
        for n in &view.cluster.nodes {
            for g in 0..per_node {
                if g >= n.gpus || !usable(n.id, g) {
                    now_blocked.insert(n.id.0 * per_node + g);
                }
            }
        }
        let name = |gpu: u32| format!("blocked-{gpu}");
        for &gpu in self.blocked.difference(&now_blocked) {
            pool.release(&name(gpu));
        }
        let mut kept = std::collections::BTreeSet::new();
        for &gpu in &now_blocked {
            if self.blocked.contains(&gpu) {
                kept.insert(gpu);
                continue;
            }
            // A GPU the mirror still books for a holder of ours is left to that holder.
            if pool
                .book_whole(name(gpu), "blocked", InstanceKind::Training, gpu)
                .is_ok()
            {
                kept.insert(gpu);
            }
        }
        self.blocked = kept;
    }

    /// For a composition ([`DiluServe::host_fit`]): plans `spec` again with the GPUs of every
    /// node whose free CPU or memory cannot hold the job booked as taken for this one
    /// placement (the packing rules plan on GPUs only, and the validator refuses a node short
    /// of host resources, so the job would wait for ever on a node it cannot use).
    #[allow(clippy::too_many_arguments)]
    fn place_where_host_fits(
        &mut self,
        view: &ClusterView<'_>,
        state: &mut ClusterState,
        spec: &InstanceSpec,
        cpu: MilliCpu,
        memory: Bytes,
        action: impl Fn(Allocation) -> Action,
        job: &TrainingJob,
    ) -> Option<Action> {
        let per_node = self.per_node;
        let mut trial = self.pool.clone()?;
        let mut closed = false;
        for (n, f) in state.free().iter().enumerate() {
            if f.cpu >= cpu && f.memory >= memory {
                continue;
            }
            for g in 0..per_node {
                let gpu = n as u32 * per_node + g;
                if self.blocked.contains(&gpu) {
                    continue;
                }
                closed = true;
                if trial.load(gpu).is_some_and(|l| l.holders > 0) {
                    trial.close(gpu);
                    continue;
                }
                let _ =
                    trial.book_whole(format!("host-{gpu}"), "host", InstanceKind::Training, gpu);
            }
        }
        if !closed {
            return None;
        }
        // As `place`, planned on the trial copy, booked in the mirror.
        let parts = plan(&trial, self.mode.booking(spec.kind), spec).ok()?;
        let alloc = self.allocation(&parts, cpu, memory)?;
        let a = action(alloc);
        let resolved = validate(state, view.cluster, job, None, &a, view.now).ok()??;
        self.pool.as_mut()?.apply(spec, &parts).ok()?;
        state.take(view.cluster, &resolved);
        Some(a)
    }

    /// Forgets jobs that ended and maps new instance ids to their pool names.
    fn sync(&mut self, view: &ClusterView<'_>) {
        let running: Vec<JobId> = self.jobs.keys().copied().collect();
        for j in running {
            let still = view
                .active
                .iter()
                .any(|a| a.id == j && a.state == JobState::Running);
            if !still {
                if let (Some(name), Some(pool)) = (self.jobs.remove(&j), self.pool.as_mut()) {
                    pool.release(&name);
                }
            }
        }
        for svc in view.services {
            let Some(queue) = self.awaiting.get_mut(&svc.spec.id) else {
                continue;
            };
            for i in &svc.instances {
                if queue.is_empty() {
                    break;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = self.instances.entry(i.id) {
                    if let Some(name) = queue.pop_front() {
                        e.insert(name);
                    }
                }
            }
        }
        // Scale-outs the driver did not carry out (refused): their bookings go.
        let refused: Vec<String> = std::mem::take(&mut self.awaiting)
            .into_values()
            .flatten()
            .collect();
        for name in refused {
            if let Some(pool) = self.pool.as_mut() {
                pool.release(&name);
            }
        }
        // Instances gone without a scale-in of ours (a retired service, a failed GPU, a
        // launch the backend gave up on): free their bookings.
        let live: std::collections::BTreeSet<InstanceId> = view
            .services
            .iter()
            .flat_map(|s| s.instances.iter().map(|i| i.id))
            .collect();
        let gone: Vec<InstanceId> = self
            .instances
            .keys()
            .filter(|id| !live.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.quota.remove(&id);
            if let (Some(name), Some(pool)) = (self.instances.remove(&id), self.pool.as_mut()) {
                pool.release(&name);
            }
        }
        self.quota.retain(|id, _| live.contains(id));
        // Holders we did not place (a daemon restart): adopted from their allocations.
        for svc in view.services {
            for i in &svc.instances {
                if self.instances.contains_key(&i.id) {
                    continue;
                }
                let kind = if is_llm(&svc.spec.model) {
                    InstanceKind::LlmInference
                } else {
                    InstanceKind::Inference
                };
                if let Some(name) = self.adopt(&svc.spec.name, kind, &i.allocation) {
                    self.instances.insert(i.id, name);
                }
            }
        }
        for a in view.active {
            if a.state != JobState::Running || self.jobs.contains_key(&a.id) {
                continue;
            }
            let (Some(alloc), Some(job)) = (&a.allocation, view.spec(a)) else {
                continue;
            };
            if let Some(name) = self.adopt(&job.name, InstanceKind::Training, alloc) {
                self.jobs.insert(a.id, name);
            }
        }
    }

    /// Vertical scaling at a sample: each single-GPU quota instance of an active service
    /// reads one second of its load (the service's rate split over its instances, its own
    /// queue); sustained overload raises its SM request toward its limit within what the
    /// GPU's other requests leave, sustained idleness gives it back to the service's request.
    /// Each retune is checked with the one validator and booked in `state` and the mirror.
    fn vertical_scaling(
        &mut self,
        view: &ClusterView<'_>,
        state: &mut ClusterState,
        actions: &mut Vec<Action>,
    ) {
        for svc in view.services {
            if !matches!(svc.phase, ServicePhase::Active) || svc.instances.is_empty() {
                continue;
            }
            let GpuDemand::Quota { sm_request, .. } = svc.spec.instance.gpu else {
                continue;
            };
            let base = u32::from(sm_request);
            let rate = last_seconds_rate(svc, view.now) / svc.instances.len() as f64;
            let served_base = self.served_at(&svc.spec, base);
            for inst in &svc.instances {
                // Scaled in at this call, or not ours to move.
                if !self.instances.contains_key(&inst.id) {
                    continue;
                }
                let Some(GpuPart::Quota {
                    sm_request: cur,
                    sm_limit,
                    ..
                }) = inst.allocation.part()
                else {
                    continue;
                };
                let (cur, limit) = (u32::from(cur), u32::from(sm_limit));
                // One GPU only: an LLM's memory split keeps its packing-time quota.
                let Some(share) = inst.allocation.shares.first() else {
                    continue;
                };
                let Some(gpu) = share.devices.filter(|d| d.gpus.count() == 1) else {
                    continue;
                };
                if inst.allocation.shares.len() != 1 {
                    continue;
                }
                let served_now = self.served_at(&svc.spec, cur);
                let mut sample = quota_sample(
                    rate,
                    served_now,
                    served_base,
                    inst.queue_len,
                    svc.spec.max_batch,
                );
                if self.slo_scaling {
                    let watch = self.slo.get(svc.spec.id.index());
                    if svc.violations_in_window > 0 {
                        sample = QuotaSample::Overloaded;
                    } else if sample == QuotaSample::Idle && watch.is_some_and(|w| w.misses() > 0) {
                        sample = QuotaSample::Steady;
                    }
                }
                let decision = self
                    .quota
                    .entry(inst.id)
                    .or_default()
                    .sample(sample, cur > base);
                let to = match decision {
                    QuotaMove::Raise => {
                        let others = gpu
                            .gpus
                            .iter()
                            .next()
                            .and_then(|g| state.gpus(share.node).get(g as usize))
                            .map_or(1000, |g| g.sm_requested.saturating_sub(cur));
                        let overflow = if served_now > 0.0 {
                            rate / served_now
                        } else {
                            f64::INFINITY
                        };
                        raised_request(cur, limit, overflow, 1000u32.saturating_sub(others))
                    }
                    QuotaMove::Lower => (cur > base).then_some(base),
                    QuotaMove::Stay => None,
                };
                let Some(to) = to else { continue };
                if self.retune(view, state, svc, inst, to, actions) {
                    if to > cur {
                        self.raises += 1;
                    } else {
                        self.lowers += 1;
                    }
                }
            }
        }
    }

    /// Retunes `inst` to SM request `to` (same GPU, limit and memory) if the validator
    /// accepts it on `state`; books it there and in the mirror.
    fn retune(
        &mut self,
        view: &ClusterView<'_>,
        state: &mut ClusterState,
        svc: &ServiceView,
        inst: &tessera_sched::InstanceView,
        to: u32,
        actions: &mut Vec<Action>,
    ) -> bool {
        let mut alloc = inst.allocation.clone();
        for s in &mut alloc.shares {
            if let Some(d) = s.devices.as_mut() {
                if let GpuPart::Quota { sm_request, .. } = &mut d.part {
                    *sm_request = to.min(1000) as u16;
                }
            }
        }
        let a = Action::RetuneInstance {
            service: svc.spec.id,
            instance: inst.id,
            allocation: alloc,
        };
        let holder: tessera_sched::Holder<'_> = (&svc.spec).into();
        let Ok(Some(resolved)) = validate(
            state,
            view.cluster,
            holder,
            Some(&inst.allocation),
            &a,
            view.now,
        ) else {
            return false;
        };
        // The mirror follows: the old booking out, the new one in (the old one back if the
        // mirror disagrees, which leaves the action unissued).
        let Some(name) = self.instances.get(&inst.id).cloned() else {
            return false;
        };
        let new_parts = self.parts_of(&resolved);
        let old_parts = self.parts_of(&inst.allocation);
        let spec = self.service_spec(&svc.spec, name.clone());
        let Some(pool) = self.pool.as_mut() else {
            return false;
        };
        pool.release(&name);
        let with = |parts: &[Part]| InstanceSpec {
            sm_request: parts.first().map_or(spec.sm_request, |p| p.request),
            ..spec.clone()
        };
        if pool.apply(&with(&new_parts), &new_parts).is_err() {
            let _ = pool.apply(&with(&old_parts), &old_parts);
            return false;
        }
        state.release(view.cluster, &inst.allocation);
        state.take(view.cluster, &resolved);
        actions.push(a);
        true
    }

    fn scale_in(&mut self, svc: &ServiceView, id: InstanceId, actions: &mut Vec<Action>) {
        actions.push(Action::ScaleIn {
            service: svc.spec.id,
            instance: id,
        });
        if let (Some(name), Some(pool)) = (self.instances.remove(&id), self.pool.as_mut()) {
            pool.release(&name);
        }
        self.scale_ins += 1;
    }

    fn scale_out(
        &mut self,
        view: &ClusterView<'_>,
        state: &mut ClusterState,
        svc: &ServiceView,
        actions: &mut Vec<Action>,
    ) -> bool {
        let name = self.fresh_name(&svc.spec.name);
        let spec = self.service_spec(&svc.spec, name.clone());
        let id = svc.spec.id;
        let placed = self.place(
            view,
            state,
            &spec,
            svc.spec.instance.cpu,
            svc.spec.instance.memory,
            |allocation| Action::ScaleOut {
                service: id,
                allocation,
            },
            (&svc.spec).into(),
        );
        match placed {
            Some(a) => {
                actions.push(a);
                self.awaiting.entry(id).or_default().push_back(name);
                self.scale_outs += 1;
                true
            }
            None => false,
        }
    }
}

/// Device memory in MB (1 MB = 10^6 bytes), rounded up.
fn mb_ceil(b: Bytes) -> u32 {
    b.0.div_ceil(1_000_000).min(u64::from(u32::MAX)) as u32
}

/// A training job's request when it states none: the training binary search on its model's
/// curve (the smallest 5% step with ≥ 98% of full throughput), a whole GPU if that fails.
pub fn training_request(job: &TrainingJob) -> u32 {
    let Some(m) = model_of(&job.model) else {
        return 1000;
    };
    let curve = TrainingCurve::for_model(m);
    profile::training_search(|pct| curve.relative(f64::from(pct) / 100.0).unwrap_or(0.0))
        .map_or(1000, |p| p.share_pct * 10)
}

/// Requests per second over the service's recent window, counting only whole seconds: at a
/// tick on a second boundary the current second has (almost) no arrivals yet, so a window of
/// `w` seconds covers `w − 1` full ones (with a 2 s window, the last second: Dilu's 1 s
/// sample).
pub fn last_seconds_rate(svc: &ServiceView, now: SimTime) -> f64 {
    let w = (svc.window.as_micros().div_ceil(1_000_000)).max(1) as f64;
    let since = now.saturating_since(svc.spec.start).as_secs_f64();
    let span = since.min(w).max(1.0);
    let arrivals = svc.load_rps * span;
    let full = if span >= 2.0 { span - 1.0 } else { span };
    arrivals / full
}

impl Policy for DiluServe {
    fn name(&self) -> &str {
        self.name
    }

    /// Dilu places a training job as an SM quota with its pool booking, never a whole GPU:
    /// a job the generic analysis finds room for but Dilu left queued found no GPU with quota
    /// left for it.
    fn pending_reason(
        &self,
        view: &ClusterView<'_>,
        job: &TrainingJob,
        detail: Detail,
    ) -> Option<Waiting> {
        match tessera_sched::reasons::classify(view, job) {
            WaitKind::Order => Some(Waiting::new(WaitKind::Quota).note(detail, || {
                "Dilu found no GPU with SM quota and memory left for it".to_string()
            })),
            other => Some(Waiting::new(other)),
        }
    }

    /// Its only state per job is the pool name of each running job; a job that finished
    /// gives its booking back, as [`DiluServe::sync`] does when a job leaves the view.
    fn renumber_jobs(&mut self, map: &[Option<JobId>]) -> bool {
        for (old, name) in std::mem::take(&mut self.jobs) {
            match map.get(old.index()).copied().flatten() {
                Some(new) => {
                    self.jobs.insert(new, name);
                }
                None => {
                    if let Some(pool) = self.pool.as_mut() {
                        pool.release(&name);
                    }
                }
            }
        }
        true
    }

    fn round_length(&self) -> Option<SimDuration> {
        Some(SimDuration::from_secs(1))
    }

    fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
        self.init(view);
        self.track_services(view);
        self.sync(view);
        let mut state = view.state.clone();

        // Training jobs, FIFO by submission.
        let mut queued: Vec<(SimTime, JobId)> = view
            .active
            .iter()
            .filter(|a| a.state == JobState::Queued)
            .filter_map(|a| view.spec(a).map(|j| (j.submit, a.id)))
            .collect();
        queued.sort_unstable();
        let held = self.hold_reserved();
        for (_, jid) in queued {
            let Some(job) = view.jobs.get(jid.index()) else {
                continue;
            };
            let name = self.fresh_name("job");
            let spec = Self::job_spec(job, name.clone());
            let gpus = job.gpus.max(1);
            let cpu = job.cpu.unwrap_or(MilliCpu::from_cores(2 * u64::from(gpus)));
            let memory = job.memory.unwrap_or(Bytes::from_gib(8 * u64::from(gpus)));
            let start = |allocation| Action::Start {
                job: jid,
                allocation,
            };
            let mut placed = self.place(view, &mut state, &spec, cpu, memory, start, job.into());
            if placed.is_none() && self.host_fit {
                placed =
                    self.place_where_host_fits(view, &mut state, &spec, cpu, memory, start, job);
            }
            if let Some(a) = placed {
                actions.push(a);
                self.jobs.insert(jid, name);
            }
        }
        self.unhold_reserved(held);

        // Services: at least one instance while active; the lazy scaler once a second.
        let sample = self
            .last_sample
            .is_none_or(|t| view.now >= t + SimDuration::from_secs(1));
        if sample {
            self.last_sample = Some(view.now);
        }
        for svc in view.services {
            let k = svc.spec.id.index();
            match &svc.phase {
                ServicePhase::Pending | ServicePhase::Unschedulable { .. } => {
                    self.reserved.remove(&svc.spec.id);
                }
                ServicePhase::Ended => {
                    self.reserved.remove(&svc.spec.id);
                    let n = svc.instances.len();
                    let ids: Vec<InstanceId> = svc
                        .instances
                        .iter()
                        .filter(|i| i.queue_len == 0)
                        .map(|i| i.id)
                        .collect();
                    for (removed, id) in ids.into_iter().enumerate() {
                        if svc.pending > 0 && removed + 1 >= n {
                            break;
                        }
                        self.scale_in(svc, id, actions);
                    }
                }
                ServicePhase::Active => {
                    let n = svc.instances.len();
                    if n == 0 {
                        if self.scale_out(view, &mut state, svc, actions) {
                            self.reserved.remove(&svc.spec.id);
                            if let Some(s) = self.scalers.get_mut(k) {
                                s.clear();
                            }
                        } else {
                            self.reserve_for(svc);
                        }
                        continue;
                    }
                    self.reserved.remove(&svc.spec.id);
                    if !sample {
                        continue;
                    }
                    let cap = self.capacity.get(k).copied().unwrap_or(f64::INFINITY);
                    let rate = last_seconds_rate(svc, view.now);
                    let Some(scaler) = self.scalers.get_mut(k) else {
                        continue;
                    };
                    let mut decision = scaler.sample(rate, n, cap);
                    if self.slo_scaling {
                        if let Some(w) = self.slo.get_mut(k) {
                            w.sample(svc.violations_in_window > 0);
                            // Every instance ready: one still cold-starting will take its
                            // share of the misses.
                            let all_ready = svc.ready_instances(view.now) == n;
                            if decision == Scale::Stay
                                && all_ready
                                && w.misses() >= SLO_OUT_AT
                                && w.extra < SLO_MAX_EXTRA
                            {
                                decision = Scale::Out;
                                w.extra += 1;
                                w.last_out = Some(view.now);
                                w.missed.clear();
                            } else if decision == Scale::In {
                                if w.may_scale_in(view.now) {
                                    w.extra = w.extra.saturating_sub(1);
                                } else {
                                    decision = Scale::Stay;
                                }
                            }
                        }
                    }
                    match decision {
                        Scale::Out => {
                            self.scale_out(view, &mut state, svc, actions);
                        }
                        Scale::In if n > 1 => {
                            if let Some(last) = svc.instances.last() {
                                self.scale_in(svc, last.id, actions);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        if sample && self.vertical {
            self.vertical_scaling(view, &mut state, actions);
        }
    }

    fn stats(&self) -> Vec<(String, f64)> {
        let mut s = vec![
            ("scale_outs".into(), self.scale_outs as f64),
            ("scale_ins".into(), self.scale_ins as f64),
        ];
        if self.vertical {
            s.push(("quota_raises".into(), self.raises as f64));
            s.push(("quota_lowers".into(), self.lowers as f64));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_rule_scales_out_at_20_of_40_and_in_at_30_of_40() {
        let mut s = HorizontalScaler::default();
        // 19 samples over 2 × 10: no decision; the 20th scales out and clears.
        for _ in 0..19 {
            assert_eq!(s.sample(25.0, 2, 10.0), Scale::Stay);
        }
        assert_eq!(s.sample(25.0, 2, 10.0), Scale::Out);
        // Interleaved over and under: 19 over among 38 samples stay, the 20th over scales out.
        for i in 0..38 {
            let r = if i % 2 == 0 { 35.0 } else { 15.0 };
            assert_eq!(s.sample(r, 3, 10.0), Scale::Stay, "sample {i}");
        }
        assert_eq!(s.sample(35.0, 3, 10.0), Scale::Out, "20 over of 39");
        // Scale in needs 30 samples under (n − 1) × capacity.
        for _ in 0..29 {
            assert_eq!(s.sample(5.0, 2, 10.0), Scale::Stay);
        }
        assert_eq!(s.sample(5.0, 2, 10.0), Scale::In);
        // Never below one instance: with n = 1 nothing is ever under 0 × capacity.
        for _ in 0..100 {
            assert_eq!(s.sample(0.0, 1, 10.0), Scale::Stay);
        }
        // Old samples fall out of the window: 10 over, then 40 calm, then 19 over: stay.
        let mut s = HorizontalScaler::default();
        for _ in 0..10 {
            s.sample(50.0, 1, 10.0);
        }
        for _ in 0..40 {
            s.sample(5.0, 1, 10.0);
        }
        for _ in 0..19 {
            assert_eq!(s.sample(50.0, 1, 10.0), Scale::Stay);
        }
        assert_eq!(s.sample(f64::NAN, 1, 10.0), Scale::Stay);
    }

    #[test]
    fn training_requests_come_from_the_search() {
        let mut job = TrainingJob::simple(0, SimTime::ZERO, 2, SimDuration::from_secs(10));
        job.model = "resnet152".into();
        let r = training_request(&job);
        let c = TrainingCurve::for_model(super::super::table::DiluModel::Resnet152);
        assert!(c.relative(f64::from(r) / 1000.0).unwrap() >= 0.98);
        assert!(c.relative(f64::from(r - 50) / 1000.0).unwrap() < 0.98);
        job.model = "unknown".into();
        assert_eq!(training_request(&job), 1000);
    }

    /// Delegates to `dilu` and records the quotas of its `RetuneInstance` actions.
    #[cfg(feature = "experiments")]
    struct Recorder {
        inner: DiluServe,
        retunes: std::sync::Arc<std::sync::Mutex<Vec<(SimTime, u16)>>>,
    }

    #[cfg(feature = "experiments")]
    impl Policy for Recorder {
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn round_length(&self) -> Option<SimDuration> {
            self.inner.round_length()
        }
        fn schedule(&mut self, view: &ClusterView<'_>, actions: &mut Vec<Action>) {
            let from = actions.len();
            self.inner.schedule(view, actions);
            for a in &actions[from..] {
                if let Action::RetuneInstance { allocation, .. } = a {
                    if let Some(GpuPart::Quota { sm_request, .. }) = allocation.part() {
                        self.retunes.lock().unwrap().push((view.now, sm_request));
                    }
                }
            }
            self.inner
                .pool
                .as_ref()
                .unwrap()
                .check_invariants()
                .unwrap();
        }
        fn stats(&self) -> Vec<(String, f64)> {
            self.inner.stats()
        }
    }

    /// BERT-base (300/500‰, batch 4) beside a training job of request 600‰ on one GPU:
    /// 8 s at twice what 300‰ serves, then nothing. The instance is raised once, to 400‰:
    /// 300 × 2 = 600 wants more than its limit 500, and the training job's 600‰ leave 400
    /// (co-located requests stay guaranteed); after 5 idle seconds it gets 300‰ back.
    /// Device invariants hold after every event, the mirror's after every call.
    #[cfg(feature = "experiments")]
    #[test]
    fn dilu_raises_an_overloaded_instance_within_the_gpu_and_gives_it_back() {
        use std::sync::Arc;
        use tessera_model::{ArrivalProcess, Cluster, GpuShareRequest, Workload};
        use tessera_sim::{ServingConfig, SimConfig, Simulation};

        let mut svc = InferenceService::simple("bert", SimTime::ZERO, SimTime::from_secs(30), 0.0);
        svc.model = "bert-base".into();
        svc.max_batch = 4;
        svc.slo = SimDuration::from_micros(50_000);
        svc.cold_start = SimDuration::ZERO;
        svc.instance.gpu = GpuDemand::Quota {
            sm_request: 300,
            sm_limit: 500,
        };
        svc.instance.gpu_memory = Bytes::from_gib(2);
        let p = DiluServe::by_name("dilu").unwrap();
        let rate = 2.0 * p.served_at(&svc, 300);
        assert!(rate.is_finite() && rate > 10.0, "{rate}");
        let mut rates = vec![rate; 8];
        rates.extend(vec![0.0; 22]);
        svc.arrivals = ArrivalProcess::RateSeries { rates };
        let mut job = TrainingJob::simple(0, SimTime::ZERO, 1, SimDuration::from_secs(1000));
        job.model = "resnet152".into();
        job.gpu_share = Some(GpuShareRequest {
            sm_permille: 600,
            memory: Some(Bytes::from_gib(10)),
        });
        let w = Workload::with_services(vec![job], vec![svc]);
        let cluster = Cluster::homogeneous(
            "A100-40GB",
            1,
            1,
            MilliCpu::from_cores(16),
            Bytes::from_gib(64),
        )
        .unwrap();
        let retunes = Arc::default();
        let policy = Recorder {
            inner: p,
            retunes: Arc::clone(&retunes),
        };
        let config = SimConfig {
            time_limit: Some(SimTime::from_secs(30)),
            serving: ServingConfig {
                model: Arc::new(DiluServingModel::shipped().unwrap()),
                window: SimDuration::from_secs(2),
                ..ServingConfig::default()
            },
            ..SimConfig::default()
        };
        let truth = super::super::serving::DiluTruth;
        let mut sim = Simulation::new(&cluster, &w, &truth, Box::new(policy), config);
        while sim.step().unwrap() {
            sim.check_invariants().unwrap();
        }
        let report = sim.into_report();
        let seen = retunes.lock().unwrap().clone();
        let quotas: Vec<u16> = seen.iter().map(|r| r.1).collect();
        assert_eq!(quotas, vec![400, 300], "{seen:?}");
        assert!(
            seen[0].0 <= SimTime::from_secs(8),
            "raised during the load: {seen:?}"
        );
        assert!(
            seen[1].0 > SimTime::from_secs(12),
            "given back after 5 idle s: {seen:?}"
        );
        let stat = |k: &str| report.policy_stats.iter().find(|s| s.0 == k).map(|s| s.1);
        assert_eq!(
            (stat("quota_raises"), stat("quota_lowers")),
            (Some(1.0), Some(1.0))
        );
        let s = &report.summary.services[0];
        assert_eq!(s.requests, s.served + s.dropped);
    }

    /// With `slo_scaling` (the `tessera` composition's), a service that misses its SLO at a
    /// rate far below what one instance serves scales out; without it (Dilu's own policies)
    /// the rate rule never fires and the service keeps one instance.
    #[test]
    fn slo_misses_scale_out_only_with_slo_scaling() {
        use std::sync::Arc;
        use tessera_model::{ArrivalProcess, Cluster, Workload};
        use tessera_sim::{ServingConfig, SimConfig, Simulation};

        let mut svc = InferenceService::simple("bert", SimTime::ZERO, SimTime::from_secs(120), 0.0);
        svc.model = "bert-base".into();
        svc.max_batch = 4;
        // Below any batch's latency: every request misses.
        svc.slo = SimDuration::from_micros(1_000);
        svc.cold_start = SimDuration::ZERO;
        svc.instance.gpu_memory = Bytes::from_gib(2);
        svc.arrivals = ArrivalProcess::RateSeries {
            rates: vec![5.0; 120],
        };
        let w = Workload::with_services(Vec::new(), vec![svc]);
        let cluster = Cluster::homogeneous(
            "A100-40GB",
            1,
            4,
            MilliCpu::from_cores(32),
            Bytes::from_gib(128),
        )
        .unwrap();
        let run = |slo_scaling: bool| {
            let mut p = DiluServe::by_name("dilu-exclusive").unwrap();
            p.slo_scaling = slo_scaling;
            let config = SimConfig {
                time_limit: Some(SimTime::from_secs(120)),
                serving: ServingConfig {
                    model: Arc::new(DiluServingModel::shipped().unwrap()),
                    window: SimDuration::from_secs(2),
                    ..ServingConfig::default()
                },
                ..SimConfig::default()
            };
            let truth = super::super::serving::DiluTruth;
            let mut sim = Simulation::new(&cluster, &w, &truth, Box::new(p), config);
            while sim.step().unwrap() {
                sim.check_invariants().unwrap();
            }
            let report = sim.into_report();
            let stat = |k: &str| report.policy_stats.iter().find(|s| s.0 == k).map(|s| s.1);
            (
                stat("scale_outs").unwrap_or(0.0),
                report.summary.services[0].peak_instances,
            )
        };
        assert_eq!(run(false), (1.0, 1), "rate rule alone: one instance");
        let (outs, peak) = run(true);
        assert!(
            outs >= 2.0 && peak >= 2,
            "SLO misses scale out: {outs} {peak}"
        );
        assert!(
            peak as usize <= 1 + SLO_MAX_EXTRA,
            "at most {SLO_MAX_EXTRA} extra: {peak}"
        );
    }

    #[test]
    fn only_dilu_retunes_quotas() {
        for (name, vertical) in [
            ("dilu", true),
            ("dilu-no-vertical", false),
            ("static-shares", false),
            ("dilu-exclusive", false),
        ] {
            assert_eq!(
                DiluServe::by_name(name).unwrap().vertical,
                vertical,
                "{name}"
            );
        }
    }
}
