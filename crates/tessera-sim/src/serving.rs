//! Request-level serving: arrivals, per-instance FIFO queues, batching, round-robin routing,
//! latency and SLO accounting for the inference services of a workload.
//!
//! The engine owns the clock and calls [`Serving::run_until`] before it applies the events of
//! each instant, so serving work happens between the engine's events without an event of its
//! own per request: each service draws its arrivals in order from its own seeded stream,
//! routes each to the next ready instance (round robin), and each instance runs batches
//! lazily, up to the arrival being routed. A batch is formed when the instance is idle and has
//! requests queued: all queued requests up to the service's max batch, started at once (no
//! batching delay). Its duration comes from the [`ServingModel`] at the instance's effective
//! SM share, which the engine refreshes whenever the GPUs' holders change.
//!
//! Requests that arrive while no instance is ready wait at the service (bounded by
//! [`ServingConfig::service_queue`]; beyond it they are dropped) and go to instances as they
//! become ready. At the end of the run every queued request is either served by a live
//! instance or counted dropped, so `arrived = served + dropped` always holds.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use tessera_model::{
    Allocation, Cluster, GpuPart, InferenceService, NodeId, ServiceId, SimDuration, SimRng,
    SimTime, Workload,
};
use tessera_sched::{ClusterState, InstanceId, InstanceView, ServicePhase, ServiceView};

/// Batch latency as a function of batch size and compute share: the truth serving runs by.
pub trait ServingModel: Send + Sync + fmt::Debug {
    /// Seconds one batch of `batch` requests of `service` takes with `sm_permille` of a GPU's
    /// SMs (1..=1000). Must be finite and positive.
    fn batch_latency(&self, service: &InferenceService, batch: u32, sm_permille: u16) -> f64;
}

/// A simple default: a batch of one on a whole GPU takes a quarter of the SLO, each further
/// request of the batch adds 15% of that (batching amortises fixed costs), and time scales
/// inversely with the SM share (compute-bound kernels). Mechanisms with measured tables
/// provide their own model.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultServingModel;

impl ServingModel for DefaultServingModel {
    fn batch_latency(&self, service: &InferenceService, batch: u32, sm_permille: u16) -> f64 {
        let base = service.slo.as_secs_f64() / 4.0;
        let share = sm_permille.clamp(1, 1000) as f64 / 1000.0;
        base * (1.0 + 0.15 * batch.saturating_sub(1) as f64) / share
    }
}

/// Vertical scaling of GPUs shared under quotas (a mechanism supplies one; without it shares
/// are static). The simulator keeps one [`GpuShareController`] per GPU that hosts a quota
/// instance, tells it about every inference batch there, and asks it how much of the GPU
/// co-located training may use:
///
/// - a batch of a quota instance runs at its request plus its part (by headroom, limit −
///   request) of what neither the GPU's instances' requests nor training use, capped at its
///   limit, where training uses `min(budget, 1000 − Σ instance requests)` while it is present;
/// - training on the GPU shares, in proportion to its requests, `min(budget, 1000 − Σ
///   requests of busy instances)`, averaged over the last second; the engine re-rates
///   training jobs with it.
///
/// Services are advanced one after the other between engine instants, so on a GPU shared by
/// instances of several services the controller sees their batches in time order per
/// service, not across services (within one engine instant: at most a second under a policy
/// with 1 s ticks).
pub trait ShareController: Send + Sync + fmt::Debug {
    /// A fresh controller for one GPU (training may use all of it).
    fn for_gpu(&self) -> Box<dyn GpuShareController>;
}

/// One GPU's vertical-scaling state (see [`ShareController`]).
pub trait GpuShareController: Send + fmt::Debug {
    /// A batch of `instance` of `service` ran `period_us` µs on this GPU.
    fn batch_done(&mut self, service: &InferenceService, instance: InstanceId, period_us: u64);
    /// Every inference instance on this GPU has been idle for `idle_us` µs.
    fn inference_idle(&mut self, idle_us: u64);
    /// Permille of the GPU training may use now (0..=1000).
    fn training_budget(&self) -> u16;
}

/// Serving settings of a run.
#[derive(Clone, Debug)]
pub struct ServingConfig {
    /// Vertical scaling of quota-shared GPUs; `None` = static shares.
    pub controller: Option<Arc<dyn ShareController>>,
    /// Batch latency truth.
    pub model: Arc<dyn ServingModel>,
    /// Seed of arrival streams (each service draws from its own stream derived from it).
    pub seed: u64,
    /// Requests a service holds while no instance is ready; more are dropped.
    pub service_queue: usize,
    /// The window of the recent load and latency figures policies see (whole seconds).
    pub window: SimDuration,
}

impl Default for ServingConfig {
    fn default() -> Self {
        ServingConfig {
            controller: None,
            model: Arc::new(DefaultServingModel),
            seed: 0,
            service_queue: 100_000,
            window: SimDuration::from_secs(10),
        }
    }
}

/// Latency histogram with `2^sub` sub-buckets per power of two of microseconds (`sub = 7`:
/// < 0.8% error), so percentiles over millions of requests cost no per-request memory.
#[derive(Clone)]
struct LatencyHist {
    sub: u32,
    counts: Vec<u64>,
    total: u64,
}

impl LatencyHist {
    fn new(sub: u32) -> Self {
        LatencyHist {
            sub,
            counts: vec![0; (64 << sub) as usize],
            total: 0,
        }
    }

    #[inline]
    fn bucket(sub: u32, us: u64) -> usize {
        if us < (1 << sub) {
            return us as usize;
        }
        let e = 63 - us.leading_zeros();
        let mant = (us >> (e - sub)) & ((1 << sub) - 1);
        (((e - sub + 1) << sub) as u64 + mant) as usize
    }

    /// The middle of bucket `b`, in microseconds.
    fn value(sub: u32, b: usize) -> f64 {
        let b = b as u64;
        if b < (1 << sub) {
            return b as f64;
        }
        let e = (b >> sub) as u32 + sub - 1;
        let mant = b & ((1 << sub) - 1);
        let lo = (1u64 << e) + (mant << (e - sub));
        lo as f64 + (1u64 << (e - sub)) as f64 / 2.0
    }

    #[inline]
    fn add(&mut self, us: u64) {
        if let Some(c) = self.counts.get_mut(Self::bucket(self.sub, us)) {
            *c += 1;
            self.total += 1;
        }
    }

    fn clear(&mut self) {
        if self.total > 0 {
            self.counts.fill(0);
            self.total = 0;
        }
    }

    /// The `p`-th percentile in seconds of the merged histograms (0 when empty).
    fn percentile_of<'h>(hists: impl Iterator<Item = &'h LatencyHist> + Clone, p: f64) -> f64 {
        let total: u64 = hists.clone().map(|h| h.total).sum();
        let Some(sub) = hists.clone().next().map(|h| h.sub) else {
            return 0.0;
        };
        if total == 0 {
            return 0.0;
        }
        let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for b in 0..(64usize << sub) {
            seen += hists
                .clone()
                .filter(|h| h.total > 0)
                .map(|h| h.counts[b])
                .sum::<u64>();
            if seen >= rank {
                return Self::value(sub, b) / 1e6;
            }
        }
        0.0
    }

    fn percentile(&self, p: f64) -> f64 {
        Self::percentile_of(std::iter::once(self), p)
    }
}

/// Sub-bucket bits of the run's histogram and of the recent window's (coarser, ~3%).
const SUB: u32 = 7;
const SUB_WINDOW: u32 = 4;

/// Per-second counters of the recent window, kept in a ring.
#[derive(Clone)]
struct SecondBucket {
    sec: u64,
    arrivals: u64,
    completed: u64,
    violations: u64,
    hist: LatencyHist,
}

impl Default for SecondBucket {
    fn default() -> Self {
        SecondBucket {
            sec: u64::MAX,
            arrivals: 0,
            completed: 0,
            violations: 0,
            hist: LatencyHist::new(SUB_WINDOW),
        }
    }
}

/// Where a service's arrival stream is.
#[derive(Clone)]
struct ArrivalCursor {
    rng: SimRng,
    /// Next arrival, µs; `None` when the stream is exhausted.
    next: Option<u64>,
    /// Rate series: current second and the unit-rate "time" left to the next arrival.
    series_sec: usize,
    /// Timestamps: index of the next one.
    index: usize,
}

struct Instance {
    id: InstanceId,
    alloc: Allocation,
    created: SimTime,
    ready_at: u64,
    queue: VecDeque<u64>,
    /// Arrival times of the batch in flight (empty when idle).
    batch: Vec<u64>,
    /// When the batch in flight ends, or when the instance became idle.
    busy_until: u64,
    effective_sm: u16,
    /// When the batch in flight started.
    batch_start: u64,
    /// Quota request and limit per GPU, permille (0 for whole GPUs and MIG instances).
    req: u32,
    lim: u32,
    /// Its GPUs' entries in [`Serving::gpu_ctl`] (empty without a controller).
    ctl: Vec<u32>,
}

/// One quota-shared GPU under a [`ShareController`].
struct GpuCtl {
    ctl: Box<dyn GpuShareController>,
    node: NodeId,
    gpu: u32,
    /// Σ requests and Σ headroom (limit − request) of its instances, permille.
    inst_req: u32,
    inst_headroom: u32,
    /// Σ requests of the training jobs on it, permille.
    train_req: u32,
    /// When the last batch started on it ends (µs).
    last_busy_end: u64,
    /// Integrals since `since` of training's budget and of busy instances' requests
    /// (permille·µs), integrated up to `clock`.
    clock: u64,
    since: u64,
    budget_int: f64,
    busy_int: f64,
    /// Training's pool over the last sample, permille.
    pool: u32,
}

impl GpuCtl {
    fn advance(&mut self, t: u64) {
        if t > self.clock {
            self.budget_int +=
                f64::from(self.ctl.training_budget().min(1000)) * (t - self.clock) as f64;
            self.clock = t;
        }
    }
}

/// How often training's share under a controller is re-measured (and training re-rated).
const SAMPLE_US: u64 = 1_000_000;

/// A quota instance's share for a batch starting at `start` under the controllers of its GPUs
/// (see [`ShareController`]).
fn controlled_share(req: u32, lim: u32, gpus: &[u32], ctl: &mut [GpuCtl], start: u64) -> u16 {
    let mut share = 1000u32;
    for &g in gpus {
        let Some(c) = ctl.get_mut(g as usize) else {
            continue;
        };
        if start > c.last_busy_end {
            c.advance(start);
            c.ctl.inference_idle(start - c.last_busy_end);
        }
        let budget = u32::from(c.ctl.training_budget()).min(1000);
        let free = 1000u32.saturating_sub(c.inst_req);
        let train = if c.train_req > 0 { budget.min(free) } else { 0 };
        let spare = free - train;
        let extra = if c.inst_headroom > 0 {
            (u64::from(spare) * u64::from(lim.saturating_sub(req)) / u64::from(c.inst_headroom))
                as u32
        } else {
            0
        };
        share = share.min((req + extra).min(lim.max(req)));
    }
    share.clamp(1, 1000) as u16
}

struct ServiceRun {
    cursor: ArrivalCursor,
    start: u64,
    end: u64,
    slo: u64,
    /// Live instances in creation order; the first `ready` take traffic (ready times are
    /// non-decreasing in creation order: one cold start per service).
    instances: Vec<Instance>,
    ready: usize,
    /// Scaled-in instances finishing their batch in flight.
    retiring: Vec<Instance>,
    rr: usize,
    pending: VecDeque<u64>,
    unschedulable: Option<String>,
    arrived: u64,
    served: u64,
    dropped: u64,
    violations: u64,
    hist: LatencyHist,
    ring: Vec<SecondBucket>,
    instance_series: Vec<(SimTime, u32)>,
    instance_secs: f64,
    instances_synced: u64,
    peak_instances: u32,
}

/// Outcome of one service over a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServiceSummary {
    /// The service's name.
    pub service: String,
    /// Requests that arrived.
    pub requests: u64,
    /// Requests served (their latency counted).
    pub served: u64,
    /// Requests dropped (service queue full, no instance at the end, unschedulable).
    pub dropped: u64,
    /// Served requests whose latency exceeded the SLO.
    pub slo_violations: u64,
    /// (violations + dropped) / requests: a dropped request misses its SLO too.
    pub slo_violation_rate: f64,
    /// Served requests per second of the service's lifetime (start to end).
    pub served_rps: f64,
    /// Median latency of served requests, seconds.
    pub p50_latency_s: f64,
    /// 99th-percentile latency of served requests, seconds.
    pub p99_latency_s: f64,
    /// Time-averaged live instances over the service's lifetime.
    pub mean_instances: f64,
    /// Most instances alive at once.
    pub peak_instances: u32,
    /// Why no instance could ever be placed, when so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<String>,
}

/// A service's instance count over time (one point per change).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InstanceSeries {
    /// The service's name.
    pub service: String,
    /// (time, live instances) at every change.
    pub points: Vec<(SimTime, u32)>,
}

/// The serving state of a run.
pub(crate) struct Serving<'a> {
    specs: &'a [InferenceService],
    runs: Vec<ServiceRun>,
    views: Vec<ServiceView>,
    config: ServingConfig,
    next_instance: u32,
    /// Service starts and ends not yet passed, for the engine's next instant.
    boundaries: Vec<u64>,
    next_boundary: usize,
    /// Controlled GPUs (with a [`ShareController`]), and their index by (node, GPU).
    gpu_ctl: Vec<GpuCtl>,
    gpu_index: BTreeMap<(u32, u32), u32>,
    last_sample: u64,
}

impl<'a> Serving<'a> {
    pub(crate) fn new(workload: &'a Workload, cluster: &Cluster, config: ServingConfig) -> Self {
        let specs = workload.services();
        let ring_len = config.window.as_micros().div_ceil(1_000_000).max(1) as usize;
        let mut runs = Vec::with_capacity(specs.len());
        let mut boundaries = Vec::new();
        for s in specs {
            let cursor = arrival_stream(s, config.seed);
            let start = s.start.as_micros();
            let end = s.end.as_micros();
            boundaries.push(start);
            boundaries.push(end);
            runs.push(ServiceRun {
                cursor,
                start,
                end,
                slo: s.slo.as_micros(),
                instances: Vec::new(),
                ready: 0,
                retiring: Vec::new(),
                rr: 0,
                pending: VecDeque::new(),
                unschedulable: s.unschedulable_on(cluster),
                arrived: 0,
                served: 0,
                dropped: 0,
                violations: 0,
                hist: LatencyHist::new(SUB),
                ring: vec![SecondBucket::default(); ring_len],
                instance_series: vec![(SimTime::ZERO, 0)],
                instance_secs: 0.0,
                instances_synced: start,
                peak_instances: 0,
            });
        }
        boundaries.sort_unstable();
        boundaries.dedup();
        let views = specs
            .iter()
            .zip(&runs)
            .map(|(s, r)| ServiceView {
                spec: s.clone(),
                phase: match &r.unschedulable {
                    Some(reason) => ServicePhase::Unschedulable {
                        reason: reason.clone(),
                    },
                    None => ServicePhase::Pending,
                },
                instances: Vec::new(),
                pending: 0,
                window: config.window,
                load_rps: 0.0,
                p50_latency_s: 0.0,
                p99_latency_s: 0.0,
                completed_in_window: 0,
                violations_in_window: 0,
            })
            .collect();
        Serving {
            specs,
            runs,
            views,
            config,
            next_instance: 0,
            boundaries,
            next_boundary: 0,
            gpu_ctl: Vec::new(),
            gpu_index: BTreeMap::new(),
            last_sample: 0,
        }
    }

    /// A service's spec.
    pub(crate) fn spec(&self, id: ServiceId) -> Option<&'a InferenceService> {
        self.specs.get(id.index())
    }

    /// True when the workload has services.
    pub(crate) fn any(&self) -> bool {
        !self.specs.is_empty()
    }

    /// The next service start or end not yet passed: the engine calls the policy then.
    pub(crate) fn peek_boundary(&self) -> Option<SimTime> {
        self.boundaries
            .get(self.next_boundary)
            .map(|&b| SimTime::from_micros(b))
    }

    /// Passes the boundaries at or before `t`; true when one is exactly at `t`.
    pub(crate) fn pass_boundaries(&mut self, t: SimTime) -> bool {
        let mut hit = false;
        while let Some(&b) = self.boundaries.get(self.next_boundary) {
            if b > t.as_micros() {
                break;
            }
            hit |= b == t.as_micros();
            self.next_boundary += 1;
        }
        hit
    }

    /// True while some service has not ended (an unschedulable one too: its requests are
    /// counted as they arrive): the policy keeps being called. Requests still queued at the
    /// end are served when the run finishes.
    pub(crate) fn live(&self, now: SimTime) -> bool {
        let t = now.as_micros();
        self.runs.iter().any(|r| t < r.end)
    }

    /// True while the policy has serving work to look at: a service not ended, or live
    /// instances (to scale in after the end).
    pub(crate) fn wants_policy(&self, now: SimTime) -> bool {
        self.live(now) || self.runs.iter().any(|r| !r.instances.is_empty())
    }

    /// The first service start, if any.
    pub(crate) fn first_start(&self) -> Option<SimTime> {
        self.boundaries.first().map(|&b| SimTime::from_micros(b))
    }

    /// Processes every arrival and batch completion at or before `t`.
    pub(crate) fn run_until(&mut self, t: SimTime) {
        let t = t.as_micros();
        let model = &*self.config.model;
        for (spec, run) in self.specs.iter().zip(self.runs.iter_mut()) {
            run.advance(spec, model, t, self.config.service_queue, &mut self.gpu_ctl);
        }
    }

    /// With a controller, once a second: re-measures training's pool on every controlled
    /// GPU over the last second; true when one changed (the engine re-rates training then).
    pub(crate) fn sample_controllers(&mut self, now: SimTime) -> bool {
        let t = now.as_micros();
        if self.gpu_ctl.is_empty() || t < self.last_sample + SAMPLE_US {
            return false;
        }
        self.last_sample = t;
        let mut changed = false;
        for c in &mut self.gpu_ctl {
            c.advance(t);
            if t > c.last_busy_end {
                c.ctl.inference_idle(t - c.last_busy_end);
            }
            let dt = t.saturating_sub(c.since);
            if dt == 0 {
                continue;
            }
            let budget = c.budget_int / dt as f64;
            let busy = c.busy_int / dt as f64;
            let pool = budget.min(1000.0 - busy).clamp(0.0, 1000.0).round() as u32;
            changed |= pool != c.pool;
            c.pool = pool;
            c.budget_int = 0.0;
            c.busy_int = 0.0;
            c.since = t;
        }
        changed
    }

    /// Under a controller, the SM share (permille) a training job holding the quota `alloc`
    /// gets: on each of its GPUs its part, in proportion to requests, of training's pool
    /// there (the whole GPU where no instance is); the smallest over its GPUs (the slowest
    /// device paces it). `None` without a controller or for an allocation with no quota.
    pub(crate) fn training_share(&self, alloc: &Allocation, state: &ClusterState) -> Option<u16> {
        self.config.controller.as_ref()?;
        let mut share: Option<u32> = None;
        for s in &alloc.shares {
            let Some(d) = s.devices else { continue };
            let GpuPart::Quota { sm_request, .. } = d.part else {
                continue;
            };
            let req = u32::from(sm_request);
            for i in d.gpus.iter() {
                let (pool, train_req) = match self.gpu_index.get(&(s.node.0, i)) {
                    Some(&k) => {
                        let c = &self.gpu_ctl[k as usize];
                        (c.pool, c.train_req)
                    }
                    None => (
                        1000,
                        state
                            .gpus(s.node)
                            .get(i as usize)
                            .map_or(req, |g| g.sm_requested),
                    ),
                };
                let here = (u64::from(pool) * u64::from(req) / u64::from(train_req.max(req).max(1)))
                    as u32;
                share = Some(share.map_or(here, |x| x.min(here)));
            }
        }
        share.map(|x| x.clamp(1, 1000) as u16)
    }

    /// Instance holdings, for the invariants and for neighbours of training jobs.
    pub(crate) fn holdings(&self) -> impl Iterator<Item = (ServiceId, InstanceId, &Allocation)> {
        self.runs.iter().enumerate().flat_map(|(s, r)| {
            r.instances
                .iter()
                .chain(&r.retiring)
                .map(move |i| (ServiceId(s as u32), i.id, &i.alloc))
        })
    }

    /// The allocation of a live (not retiring) instance.
    pub(crate) fn instance_alloc(&self, service: ServiceId, id: InstanceId) -> Option<&Allocation> {
        self.runs
            .get(service.index())?
            .instances
            .iter()
            .find(|i| i.id == id)
            .map(|i| &i.alloc)
    }

    /// Adds an instance on a taken (validated, resolved) allocation; returns its id.
    pub(crate) fn scale_out(
        &mut self,
        service: ServiceId,
        alloc: Allocation,
        now: SimTime,
        state: &ClusterState,
        cluster: &Cluster,
    ) -> InstanceId {
        let id = InstanceId(self.next_instance);
        self.next_instance += 1;
        let Some(run) = self.runs.get_mut(service.index()) else {
            return id;
        };
        let cold = self
            .specs
            .get(service.index())
            .map_or(SimDuration::ZERO, |s| s.cold_start);
        let ready_at = (now + cold).as_micros();
        let effective_sm = effective_sm(&alloc, state, cluster);
        run.sync_instance_time(now.as_micros());
        run.instances.push(Instance {
            id,
            alloc,
            created: now,
            ready_at,
            queue: VecDeque::new(),
            batch: Vec::new(),
            busy_until: ready_at,
            effective_sm,
            batch_start: ready_at,
            req: 0,
            lim: 0,
            ctl: Vec::new(),
        });
        run.record_count(now);
        if let Some(factory) = self.config.controller.clone() {
            self.refresh_controlled(&*factory, state);
        }
        id
    }

    /// Removes an instance: its queue goes back to the service's queue (in arrival order,
    /// ahead of later arrivals) and a batch in flight completes first. Returns what it held
    /// and whether it is still finishing a batch (then its GPUs are released by
    /// [`take_retired`](Self::take_retired)).
    pub(crate) fn scale_in(
        &mut self,
        service: ServiceId,
        id: InstanceId,
        now: SimTime,
    ) -> Option<(Allocation, bool)> {
        let run = self.runs.get_mut(service.index())?;
        let pos = run.instances.iter().position(|i| i.id == id)?;
        run.sync_instance_time(now.as_micros());
        let mut inst = run.instances.remove(pos);
        if pos < run.ready {
            run.ready -= 1;
            if run.ready > 0 && run.rr >= pos {
                run.rr = run.rr.saturating_sub(1);
            }
        }
        if run.ready > 0 {
            run.rr %= run.ready;
        } else {
            run.rr = 0;
        }
        // Merge its queue back at the front: its requests arrived before any still pending
        // at the service only if no instance was ready, so a sorted merge keeps FIFO.
        let mut merged: VecDeque<u64> =
            VecDeque::with_capacity(inst.queue.len() + run.pending.len());
        let (mut a, mut b) = (
            std::mem::take(&mut inst.queue),
            std::mem::take(&mut run.pending),
        );
        while let (Some(&x), Some(&y)) = (a.front(), b.front()) {
            if x <= y {
                merged.push_back(x);
                a.pop_front();
            } else {
                merged.push_back(y);
                b.pop_front();
            }
        }
        merged.extend(a);
        merged.extend(b);
        run.pending = merged;
        // With other instances ready they take it now (they are up to date: the engine ran
        // serving up to `now` before applying actions).
        run.spread_pending();
        let alloc = inst.alloc.clone();
        let retiring = !inst.batch.is_empty();
        if retiring {
            run.retiring.push(inst);
        }
        run.record_count(now);
        Some((alloc, retiring))
    }

    /// Gives a live instance a new allocation in place (validated: same node and GPUs): it
    /// keeps its queue, its batch in flight and its readiness. False when no such instance.
    pub(crate) fn retune(&mut self, service: ServiceId, id: InstanceId, alloc: Allocation) -> bool {
        let Some(inst) = self
            .runs
            .get_mut(service.index())
            .and_then(|r| r.instances.iter_mut().find(|i| i.id == id))
        else {
            return false;
        };
        inst.alloc = alloc;
        true
    }

    /// Recomputes every instance's effective SM share after the GPUs' holders changed.
    pub(crate) fn refresh_shares(&mut self, state: &ClusterState, cluster: &Cluster) {
        for run in &mut self.runs {
            for i in run.instances.iter_mut().chain(run.retiring.iter_mut()) {
                i.effective_sm = effective_sm(&i.alloc, state, cluster);
            }
        }
        if let Some(factory) = self.config.controller.clone() {
            self.refresh_controlled(&*factory, state);
        }
    }

    /// Re-counts what instances and training hold on every controlled GPU, bringing GPUs
    /// that newly host a quota instance under control.
    fn refresh_controlled(&mut self, factory: &dyn ShareController, state: &ClusterState) {
        for c in &mut self.gpu_ctl {
            c.inst_req = 0;
            c.inst_headroom = 0;
        }
        let since = self.last_sample;
        for run in &mut self.runs {
            for i in run.instances.iter_mut().chain(run.retiring.iter_mut()) {
                i.ctl.clear();
                i.req = 0;
                i.lim = 0;
                for s in &i.alloc.shares {
                    let Some(d) = s.devices else { continue };
                    let GpuPart::Quota {
                        sm_request,
                        sm_limit,
                        ..
                    } = d.part
                    else {
                        continue;
                    };
                    let (req, lim) = (
                        u32::from(sm_request),
                        u32::from(sm_limit).max(u32::from(sm_request)),
                    );
                    i.req = req;
                    i.lim = lim;
                    for g in d.gpus.iter() {
                        let k = *self.gpu_index.entry((s.node.0, g)).or_insert_with(|| {
                            self.gpu_ctl.push(GpuCtl {
                                ctl: factory.for_gpu(),
                                node: s.node,
                                gpu: g,
                                inst_req: 0,
                                inst_headroom: 0,
                                train_req: 0,
                                last_busy_end: since,
                                clock: since,
                                since,
                                budget_int: 0.0,
                                busy_int: 0.0,
                                pool: 1000,
                            });
                            (self.gpu_ctl.len() - 1) as u32
                        });
                        let c = &mut self.gpu_ctl[k as usize];
                        c.inst_req += req;
                        c.inst_headroom += lim - req;
                        i.ctl.push(k);
                    }
                }
            }
        }
        for c in &mut self.gpu_ctl {
            let total = state
                .gpus(c.node)
                .get(c.gpu as usize)
                .map_or(0, |g| g.sm_requested);
            c.train_req = total.saturating_sub(c.inst_req);
        }
    }

    /// Allocations of retired instances whose last batch has completed by now (to release).
    pub(crate) fn take_retired(&mut self, now: SimTime, out: &mut Vec<Allocation>) {
        let t = now.as_micros();
        for run in &mut self.runs {
            let mut k = 0;
            while k < run.retiring.len() {
                if run.retiring[k].batch.is_empty() && run.retiring[k].busy_until <= t {
                    out.push(run.retiring.swap_remove(k).alloc);
                } else {
                    k += 1;
                }
            }
        }
    }

    /// The earliest instant a retiring instance's last batch ends (to release its GPU then).
    pub(crate) fn next_retirement(&self) -> Option<SimTime> {
        self.runs
            .iter()
            .flat_map(|r| r.retiring.iter().map(|i| i.busy_until))
            .min()
            .map(SimTime::from_micros)
    }

    /// Refreshes and returns what policies see.
    pub(crate) fn views(&mut self, now: SimTime) -> &[ServiceView] {
        let t = now.as_micros();
        let sec = t / 1_000_000;
        for (view, run) in self.views.iter_mut().zip(&self.runs) {
            if run.unschedulable.is_none() {
                view.phase = if t < run.start {
                    ServicePhase::Pending
                } else if t < run.end {
                    ServicePhase::Active
                } else {
                    ServicePhase::Ended
                };
            }
            view.instances.clear();
            for i in &run.instances {
                view.instances.push(InstanceView {
                    id: i.id,
                    allocation: i.alloc.clone(),
                    created: i.created,
                    ready_at: SimTime::from_micros(i.ready_at),
                    queue_len: i.queue.len() as u32,
                    in_flight: i.batch.len() as u32,
                    effective_sm: i.effective_sm,
                });
            }
            view.pending = run.pending.len() as u32;
            // The window: the last `ring.len()` whole seconds before now's second, plus it.
            let n = run.ring.len() as u64;
            let lo = sec.saturating_sub(n - 1);
            let in_window = |b: &&SecondBucket| b.sec >= lo && b.sec <= sec;
            let (mut arr, mut done, mut viol) = (0, 0, 0);
            for b in run.ring.iter().filter(in_window) {
                arr += b.arrivals;
                done += b.completed;
                viol += b.violations;
            }
            let span = (t.saturating_sub(run.start).min(n * 1_000_000)).max(1) as f64 / 1e6;
            view.load_rps = arr as f64 / span.max(1.0);
            view.completed_in_window = done;
            view.violations_in_window = viol;
            let window = run.ring.iter().filter(in_window).map(|b| &b.hist);
            view.p50_latency_s = LatencyHist::percentile_of(window.clone(), 50.0);
            view.p99_latency_s = LatencyHist::percentile_of(window, 99.0);
        }
        &self.views
    }

    /// Ends the run at `now`: live instances serve everything queued (the run's clock does
    /// not move: their work completes after `now` and is counted), requests waiting at a
    /// service without instances are dropped. Returns the summaries and instance series.
    pub(crate) fn finish(&mut self, now: SimTime) -> (Vec<ServiceSummary>, Vec<InstanceSeries>) {
        let model = &*self.config.model;
        let t = now.as_micros();
        let mut summaries = Vec::with_capacity(self.runs.len());
        let mut series = Vec::with_capacity(self.runs.len());
        for (spec, run) in self.specs.iter().zip(self.runs.iter_mut()) {
            run.advance(spec, model, t, self.config.service_queue, &mut self.gpu_ctl);
            run.sync_instance_time(t.max(run.start).min(run.end.max(run.start)));
            // Hand what waits at the service to ready instances, then drain them all.
            run.spread_pending();
            run.dropped += run.pending.len() as u64;
            run.pending.clear();
            for k in 0..run.instances.len() {
                run.drain(k, spec, model, u64::MAX, &mut self.gpu_ctl);
            }
            for inst in &mut run.retiring {
                ServiceRun::drain_one(
                    inst,
                    spec,
                    model,
                    u64::MAX,
                    run.slo,
                    &mut run.ring,
                    &mut run.hist,
                    &mut run.served,
                    &mut run.violations,
                    &mut self.gpu_ctl,
                );
            }
            let life = run.end.saturating_sub(run.start) as f64 / 1e6;
            let rate = |x: u64| {
                if run.arrived > 0 {
                    x as f64 / run.arrived as f64
                } else {
                    0.0
                }
            };
            summaries.push(ServiceSummary {
                service: spec.name.clone(),
                requests: run.arrived,
                served: run.served,
                dropped: run.dropped,
                slo_violations: run.violations,
                slo_violation_rate: rate(run.violations + run.dropped),
                served_rps: if life > 0.0 {
                    run.served as f64 / life
                } else {
                    0.0
                },
                p50_latency_s: run.hist.percentile(50.0),
                p99_latency_s: run.hist.percentile(99.0),
                mean_instances: if life > 0.0 {
                    run.instance_secs / life
                } else {
                    0.0
                },
                peak_instances: run.peak_instances,
                unschedulable: run.unschedulable.clone(),
            });
            series.push(InstanceSeries {
                service: spec.name.clone(),
                points: std::mem::take(&mut run.instance_series),
            });
        }
        (summaries, series)
    }

    /// Checks serving invariants: request conservation per service (arrived = served +
    /// dropped + queued + in flight) and unique instance ids.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let mut ids: Vec<u32> = self.holdings().map(|(_, i, _)| i.0).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err("two instances share an id".into());
        }
        for (spec, r) in self.specs.iter().zip(&self.runs) {
            let queued: u64 = r.pending.len() as u64
                + r.instances
                    .iter()
                    .chain(&r.retiring)
                    .map(|i| (i.queue.len() + i.batch.len()) as u64)
                    .sum::<u64>();
            if r.arrived != r.served + r.dropped + queued {
                return Err(format!(
                    "service {}: {} arrived but {} served + {} dropped + {queued} queued",
                    spec.name, r.arrived, r.served, r.dropped
                ));
            }
            if r.ready > r.instances.len() {
                return Err(format!(
                    "service {}: more ready than live instances",
                    spec.name
                ));
            }
        }
        Ok(())
    }
}

/// First arrival at or after `start` (and before `end`).
/// A service's arrival stream under the run's serving `seed`, at its first arrival. One
/// stream per service: a service's arrivals do not change when another is added or removed.
fn arrival_stream(s: &InferenceService, seed: u64) -> ArrivalCursor {
    let mut seeds = SimRng::seed_from_u64(seed ^ 0x5e7c_1ce5);
    for _ in 0..=s.id.0 % 64 {
        seeds.next_u64();
    }
    let rng = SimRng::seed_from_u64(seeds.next_u64().wrapping_add(s.id.0 as u64));
    let mut cursor = ArrivalCursor {
        rng,
        next: None,
        series_sec: 0,
        index: 0,
    };
    cursor.next = first_arrival(s, &mut cursor, s.start.as_micros(), s.end.as_micros());
    cursor
}

/// The requests each service of `workload` receives over its whole lifetime in a run whose
/// serving seed is `seed` ([`ServingConfig::seed`]), in service order: the same draws a run
/// makes, whatever the policy. Drivers use it to count the requests of services a policy was
/// not given (they were all dropped, as far as the service's users are concerned).
pub fn arrivals_per_service(workload: &Workload, seed: u64) -> Vec<u64> {
    workload
        .services()
        .iter()
        .map(|s| {
            let mut c = arrival_stream(s, seed);
            let (start, end) = (s.start.as_micros(), s.end.as_micros());
            let mut n = 0u64;
            while let Some(a) = c.next {
                n += 1;
                c.next = next_arrival(s, &mut c, a, start, end);
            }
            n
        })
        .collect()
}

fn first_arrival(s: &InferenceService, c: &mut ArrivalCursor, start: u64, end: u64) -> Option<u64> {
    next_arrival(s, c, start, start, end)
}

/// The arrival after `prev` (µs), drawn from the service's process; `None` past the end.
fn next_arrival(
    s: &InferenceService,
    c: &mut ArrivalCursor,
    prev: u64,
    start: u64,
    end: u64,
) -> Option<u64> {
    use tessera_model::ArrivalProcess as P;
    let secs_to_us = |x: f64| (x * 1e6).round().min(u64::MAX as f64 / 2.0) as u64;
    let at = match &s.arrivals {
        P::Poisson { rate } => {
            if *rate <= 0.0 {
                return None;
            }
            prev.saturating_add(secs_to_us(c.rng.exponential(*rate)))
        }
        P::Gamma { rate, cv } => {
            if *rate <= 0.0 || *cv <= 0.0 {
                return None;
            }
            let shape = 1.0 / (cv * cv);
            prev.saturating_add(secs_to_us(c.rng.gamma(shape, 1.0 / (rate * shape))))
        }
        P::RateSeries { rates } => {
            // Piecewise-constant Poisson: spend a unit-rate exponential across seconds.
            let mut e = c.rng.exponential(1.0);
            let mut pos = prev;
            loop {
                let sec = c.series_sec;
                let r = *rates.get(sec)?;
                let sec_end = start + (sec as u64 + 1) * 1_000_000;
                let left = sec_end.saturating_sub(pos) as f64 / 1e6;
                if r > 0.0 && e <= r * left {
                    break pos + secs_to_us(e / r).min(sec_end - pos);
                }
                e -= r * left;
                pos = sec_end;
                c.series_sec += 1;
            }
        }
        P::Timestamps { offsets } => {
            let o = offsets.get(c.index)?;
            c.index += 1;
            start + o.as_micros()
        }
    };
    (at < end).then_some(at)
}

/// An instance's effective SM share now, permille: a whole GPU gives 1000; a MIG instance
/// its compute slices out of 7; a quota its request plus its part of what requests leave
/// idle, split in proportion to the headroom (limit − request) of the GPU's quota holders,
/// capped at its limit. On several GPUs, the smallest share (the slowest device paces it).
fn effective_sm(alloc: &Allocation, state: &ClusterState, cluster: &Cluster) -> u16 {
    let mut share = 1000u32;
    for s in &alloc.shares {
        let Some(d) = s.devices else { continue };
        let gpus = state.gpus(s.node);
        for i in d.gpus.iter() {
            let here = match d.part {
                GpuPart::Whole => 1000,
                GpuPart::Mig(inst) => mig_share(cluster, s.node, inst),
                GpuPart::Quota {
                    sm_request,
                    sm_limit,
                    ..
                } => {
                    let (req, lim) = (sm_request as u32, sm_limit as u32);
                    let g = gpus.get(i as usize);
                    let idle = 1000u32.saturating_sub(g.map_or(req, |g| g.sm_requested));
                    let headroom = g.map_or(0, |g| g.sm_limits.saturating_sub(g.sm_requested));
                    let extra = if headroom > 0 {
                        (idle as u64 * lim.saturating_sub(req) as u64 / headroom as u64) as u32
                    } else {
                        0
                    };
                    (req + extra).min(lim)
                }
            };
            share = share.min(here);
        }
    }
    share.clamp(1, 1000) as u16
}

fn mig_share(cluster: &Cluster, node: NodeId, inst: tessera_model::MigInstance) -> u32 {
    cluster
        .nodes
        .get(node.index())
        .and_then(|n| cluster.catalog.mig_geometry(n.gpu))
        .and_then(|g| g.profile(inst))
        .map_or(1000, |p| (p.compute_slices as u32 * 1000 / 7).min(1000))
}

impl ServiceRun {
    /// Hands requests waiting at the service to the ready instances, round robin.
    fn spread_pending(&mut self) {
        if self.ready == 0 {
            return;
        }
        while let Some(a) = self.pending.pop_front() {
            let j = self.rr % self.ready;
            self.rr = (j + 1) % self.ready;
            self.instances[j].queue.push_back(a);
        }
    }

    fn record_count(&mut self, now: SimTime) {
        let n = self.instances.len() as u32;
        self.peak_instances = self.peak_instances.max(n);
        match self.instance_series.last_mut() {
            Some(last) if last.0 == now => last.1 = n,
            _ => self.instance_series.push((now, n)),
        }
    }

    /// Integrates live instances over the service's lifetime up to `t`.
    fn sync_instance_time(&mut self, t: u64) {
        let t = t.clamp(self.start, self.end.max(self.start));
        if t > self.instances_synced {
            self.instance_secs +=
                self.instances.len() as f64 * (t - self.instances_synced) as f64 / 1e6;
            self.instances_synced = t;
        }
    }

    fn bucket(ring: &mut [SecondBucket], at: u64) -> &mut SecondBucket {
        let sec = at / 1_000_000;
        let n = ring.len();
        let b = &mut ring[(sec % n as u64) as usize];
        if b.sec != sec {
            b.sec = sec;
            b.arrivals = 0;
            b.completed = 0;
            b.violations = 0;
            b.hist.clear();
        }
        b
    }

    /// Serves arrivals and batches up to `t` (inclusive).
    fn advance(
        &mut self,
        spec: &InferenceService,
        model: &dyn ServingModel,
        t: u64,
        cap: usize,
        ctl: &mut [GpuCtl],
    ) {
        loop {
            let arrival = self.cursor.next.filter(|&a| a <= t);
            // An instance becoming ready before the next arrival takes what waits first.
            let ready_next = self
                .instances
                .get(self.ready)
                .map(|i| i.ready_at)
                .filter(|&r| r <= t && arrival.is_none_or(|a| r <= a));
            if let Some(r) = ready_next {
                self.ready += 1;
                // Bring every ready instance to `r`, then spread what waits over them; all of
                // it arrived by `r`, so batches form from it at once.
                for k in 0..self.ready {
                    self.drain(k, spec, model, r, ctl);
                }
                self.spread_pending();
                continue;
            }
            let Some(a) = arrival else { break };
            self.cursor.next = next_arrival(spec, &mut self.cursor, a, self.start, self.end);
            self.arrived += 1;
            Self::bucket(&mut self.ring, a).arrivals += 1;
            if self.unschedulable.is_some() {
                self.dropped += 1;
                continue;
            }
            if self.ready == 0 {
                if self.pending.len() >= cap {
                    self.dropped += 1;
                } else {
                    self.pending.push_back(a);
                }
                continue;
            }
            let k = self.rr % self.ready;
            self.rr = (k + 1) % self.ready;
            self.drain(k, spec, model, a, ctl);
            self.instances[k].queue.push_back(a);
        }
        for k in 0..self.instances.len() {
            self.drain(k, spec, model, t, ctl);
        }
        for inst in &mut self.retiring {
            Self::drain_one(
                inst,
                spec,
                model,
                t,
                self.slo,
                &mut self.ring,
                &mut self.hist,
                &mut self.served,
                &mut self.violations,
                ctl,
            );
        }
    }

    fn drain(
        &mut self,
        k: usize,
        spec: &InferenceService,
        model: &dyn ServingModel,
        upto: u64,
        ctl: &mut [GpuCtl],
    ) {
        let Some(inst) = self.instances.get_mut(k) else {
            return;
        };
        Self::drain_one(
            inst,
            spec,
            model,
            upto,
            self.slo,
            &mut self.ring,
            &mut self.hist,
            &mut self.served,
            &mut self.violations,
            ctl,
        );
    }

    /// Completes the instance's batches ending by `upto` and starts the next ones from its
    /// queue, as long as they start by `upto`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn drain_one(
        inst: &mut Instance,
        spec: &InferenceService,
        model: &dyn ServingModel,
        upto: u64,
        slo: u64,
        ring: &mut [SecondBucket],
        hist: &mut LatencyHist,
        served: &mut u64,
        violations: &mut u64,
        ctl: &mut [GpuCtl],
    ) {
        loop {
            if !inst.batch.is_empty() {
                if inst.busy_until > upto {
                    return;
                }
                let done = inst.busy_until;
                let mut late = 0;
                let b = Self::bucket(ring, done);
                for &a in &inst.batch {
                    let lat = done - a;
                    hist.add(lat);
                    b.hist.add(lat);
                    late += (lat > slo) as u64;
                }
                let n = inst.batch.len() as u64;
                *served += n;
                *violations += late;
                b.completed += n;
                b.violations += late;
                inst.batch.clear();
                let period = done.saturating_sub(inst.batch_start);
                for &g in &inst.ctl {
                    if let Some(c) = ctl.get_mut(g as usize) {
                        c.advance(done);
                        c.busy_int += f64::from(inst.req) * period as f64;
                        c.ctl.batch_done(spec, inst.id, period);
                    }
                }
            }
            let Some(&first) = inst.queue.front() else {
                return;
            };
            let start = inst.busy_until.max(first);
            if start > upto {
                return;
            }
            while inst.batch.len() < spec.max_batch as usize {
                match inst.queue.front() {
                    Some(&a) if a <= start => {
                        inst.batch.push(a);
                        inst.queue.pop_front();
                    }
                    _ => break,
                }
            }
            if !inst.ctl.is_empty() {
                inst.effective_sm = controlled_share(inst.req, inst.lim, &inst.ctl, ctl, start);
            }
            let secs = model.batch_latency(spec, inst.batch.len() as u32, inst.effective_sm);
            let us = if secs.is_finite() && secs > 0.0 {
                ((secs * 1e6).ceil() as u64).max(1)
            } else {
                1
            };
            inst.busy_until = start + us;
            inst.batch_start = start;
            for &g in &inst.ctl {
                if let Some(c) = ctl.get_mut(g as usize) {
                    c.last_busy_end = c.last_busy_end.max(inst.busy_until);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_percentiles_are_close() {
        let mut h = LatencyHist::new(SUB);
        for us in 1..=100_000u64 {
            h.add(us * 10);
        }
        let p50 = h.percentile(50.0);
        let p99 = h.percentile(99.0);
        assert!((p50 - 0.5).abs() / 0.5 < 0.01, "{p50}");
        assert!((p99 - 0.99).abs() / 0.99 < 0.01, "{p99}");
        for us in [0u64, 1, 127, 128, 129, 1 << 20, u64::MAX / 4] {
            let b = LatencyHist::bucket(SUB, us);
            let v = LatencyHist::value(SUB, b);
            assert!(
                us == 0 || (v - us as f64).abs() / us as f64 <= 0.01,
                "{us} -> {v}"
            );
        }
    }
}
