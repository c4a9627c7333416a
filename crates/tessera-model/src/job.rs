//! Training jobs and workloads.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::catalog::GpuModelId;
use crate::quantity::{Bytes, MilliCpu};
use crate::service::{InferenceService, ServiceId};
use crate::time::{SimDuration, SimTime};

/// Index of a job in its [`Workload`] (dense, in submit order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u32);

impl JobId {
    /// The index as `usize`, for slices indexed by job.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A deep-learning training job as a trace describes it.
///
/// Work is `iterations`; the trace also fixes how long the job takes on the allocation it
/// requested (`duration`), which gives its reference throughput `iterations / duration`.
/// Performance models scale that reference to other allocations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainingJob {
    /// Dense id, assigned by [`Workload::new`].
    pub id: JobId,
    /// The job's name or id in its trace (shared: every report record of the job holds it).
    pub name: Arc<str>,
    /// Submission time.
    pub submit: SimTime,
    /// Tenant, queue or virtual cluster.
    pub tenant: String,
    /// Larger runs first under priority-aware policies.
    pub priority: i32,
    /// Model name, a key into performance tables (`resnet50`); empty when unknown.
    pub model: String,
    /// Global batch size, when known.
    pub batch_size: Option<u32>,
    /// Whole GPUs requested.
    pub gpus: u32,
    /// GPU models the job may run on; empty means any.
    pub gpu_types: Vec<GpuModelId>,
    /// Total training iterations (at least 1).
    pub iterations: u64,
    /// Run time on the requested allocation.
    pub duration: SimDuration,
    /// Explicit CPU request for the whole job; `None` = GPU-proportional share.
    pub cpu: Option<MilliCpu>,
    /// Explicit memory request for the whole job; `None` = GPU-proportional share.
    pub memory: Option<Bytes>,
    /// A fraction of one GPU instead of `gpus` whole ones (`gpus` is then 1); policies that
    /// do not place quotas give the job a whole GPU. `None` = whole GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_share: Option<GpuShareRequest>,
    /// One MIG instance instead of a whole GPU (`gpus` is then 1): a fixed profile or "the
    /// scheduler chooses". `None` = a whole GPU, or whatever slice a MIG policy picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigRequest>,
}

/// A request for one MIG instance, as `nvidia.com/mig-3g.20gb` (a fixed profile) or
/// `nvidia.com/mig-any` (the scheduler chooses the slice) spell it in specs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigRequest {
    /// Any instance the scheduler chooses (or a whole GPU, as MIG policies decide).
    Any,
    /// Exactly this profile (`3g.20gb`, lower case as the catalog names it).
    Profile(String),
}

/// The Kubernetes extended-resource prefix of MIG requests (NVIDIA's device plugin, mixed
/// strategy).
pub const MIG_RESOURCE_PREFIX: &str = "nvidia.com/mig-";

impl MigRequest {
    /// Parses `nvidia.com/mig-3g.20gb`, `nvidia.com/mig-any`, or the bare `3g.20gb` / `any`
    /// (case-insensitive). Only the shape is checked here; whether a profile exists is the
    /// catalog's question ([`GpuCatalog::check_mig_request`](crate::GpuCatalog::check_mig_request)).
    pub fn parse(text: &str) -> Result<MigRequest, String> {
        let t = text.trim();
        let lower = t.to_ascii_lowercase();
        let bare = lower.strip_prefix(MIG_RESOURCE_PREFIX).unwrap_or(&lower);
        if bare == "any" {
            return Ok(MigRequest::Any);
        }
        // `<c>g.<m>gb`: digits, `g.`, digits, `gb` (optionally with a `+me` media extension).
        let ok = bare.split_once("g.").is_some_and(|(c, rest)| {
            !c.is_empty()
                && c.bytes().all(|b| b.is_ascii_digit())
                && rest.len() > 2
                && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+')
                && rest.bytes().next().is_some_and(|b| b.is_ascii_digit())
        });
        if !ok {
            return Err(format!(
                "{t:?} is not a MIG request (expected {MIG_RESOURCE_PREFIX}<profile> such as \
                 {MIG_RESOURCE_PREFIX}3g.20gb, or {MIG_RESOURCE_PREFIX}any)"
            ));
        }
        Ok(MigRequest::Profile(bare.to_string()))
    }

    /// The fixed profile's name, if any.
    pub fn profile(&self) -> Option<&str> {
        match self {
            MigRequest::Any => None,
            MigRequest::Profile(p) => Some(p),
        }
    }
}

impl std::fmt::Display for MigRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MigRequest::Any => write!(f, "{MIG_RESOURCE_PREFIX}any"),
            MigRequest::Profile(p) => write!(f, "{MIG_RESOURCE_PREFIX}{p}"),
        }
    }
}

/// A request for part of one GPU, as GPU-sharing traces (Alibaba GPU 2023) give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuShareRequest {
    /// Share of the GPU's compute (SMs) in permille, 1..=999.
    pub sm_permille: u16,
    /// Device memory the job needs on that GPU, when the trace says.
    pub memory: Option<Bytes>,
}

impl TrainingJob {
    /// Iterations per second on the requested allocation.
    pub fn reference_throughput(&self) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            self.iterations as f64 / secs
        } else {
            self.iterations as f64
        }
    }

    /// A job with neutral defaults, for generators and tests: one iteration per second of
    /// `duration`, no tenant, model or explicit CPU/memory.
    pub fn simple(id: u32, submit: SimTime, gpus: u32, duration: SimDuration) -> TrainingJob {
        TrainingJob {
            id: JobId(id),
            name: id.to_string().into(),
            submit,
            tenant: String::new(),
            priority: 0,
            model: String::new(),
            batch_size: None,
            gpus,
            gpu_types: Vec::new(),
            iterations: (duration.as_secs_f64().ceil() as u64).max(1),
            duration,
            cpu: None,
            memory: None,
            gpu_share: None,
            mig: None,
        }
    }
}

/// `items` sorted by `key`, stably, each item moved once. A stable sort of the items
/// themselves moves each of them several times, and a job is a few hundred bytes: for a
/// trace of 82k jobs that was a seventh of loading it. Here the (key, position) pairs are
/// sorted (unique, so an unstable sort gives the stable order) and the items placed after.
pub fn sort_stably_by_key<T>(items: Vec<T>, key: impl Fn(&T) -> u64) -> Vec<T> {
    if items.is_sorted_by_key(&key) {
        return items;
    }
    let mut order: Vec<(u64, usize)> = items.iter().map(&key).zip(0..).collect();
    order.sort_unstable();
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|(_, i)| slots.get_mut(i).and_then(Option::take))
        .collect()
}

/// Training jobs sorted by submit time (stable: ties keep trace order), with ids equal to
/// positions, and inference services sorted by start time, numbered the same way.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    jobs: Vec<TrainingJob>,
    services: Vec<InferenceService>,
}

impl Workload {
    /// Sorts jobs by submit time (stably) and renumbers their ids densely. No services.
    pub fn new(jobs: Vec<TrainingJob>) -> Workload {
        let mut jobs = sort_stably_by_key(jobs, |j| j.submit.as_micros());
        for (i, j) in jobs.iter_mut().enumerate() {
            j.id = JobId(i as u32);
        }
        Workload {
            jobs,
            services: Vec::new(),
        }
    }

    /// Jobs as [`new`](Self::new) orders them, and services sorted by start time (stably),
    /// renumbered densely.
    pub fn with_services(jobs: Vec<TrainingJob>, mut services: Vec<InferenceService>) -> Workload {
        let mut w = Workload::new(jobs);
        services.sort_by_key(|s| s.start);
        for (i, s) in services.iter_mut().enumerate() {
            s.id = ServiceId(i as u32);
        }
        w.services = services;
        w
    }

    /// Checks every service ([`InferenceService::check`]: rates, burstiness, SLO, batch) and
    /// that all of them together are expected to receive at most
    /// [`MAX_EXPECTED_REQUESTS`](crate::service::MAX_EXPECTED_REQUESTS) requests, so that a run's
    /// serving work is bounded before it starts. Fields are named `services[i]` (by start
    /// order) and the service.
    pub fn check_services(&self) -> Result<(), crate::SpecError> {
        use crate::service::MAX_EXPECTED_REQUESTS;
        let mut total = 0.0;
        for (i, s) in self.services.iter().enumerate() {
            s.check(&format!("services[{i}]"))?;
            total += s.expected_requests();
        }
        if total > MAX_EXPECTED_REQUESTS {
            let busiest = self
                .services
                .iter()
                .max_by(|a, b| a.expected_requests().total_cmp(&b.expected_requests()));
            return Err(crate::SpecError::Invalid {
                line: None,
                field: "services".to_string(),
                reason: format!(
                    "the services are expected to receive {total:.3e} requests, more than the \
                     limit of {MAX_EXPECTED_REQUESTS:e} (tessera_model::MAX_EXPECTED_REQUESTS); \
                     the busiest is {:?} with {:.3e}: lower its rate or shorten it",
                    busiest.map_or("", |s| s.name.as_str()),
                    busiest.map_or(0.0, |s| s.expected_requests())
                ),
            });
        }
        Ok(())
    }

    /// The inference services, in start order.
    pub fn services(&self) -> &[InferenceService] {
        &self.services
    }

    /// A service by id.
    pub fn service(&self, id: ServiceId) -> Option<&InferenceService> {
        self.services.get(id.index())
    }

    /// The jobs, in submit order.
    pub fn jobs(&self) -> &[TrainingJob] {
        &self.jobs
    }

    /// Number of training jobs (services are counted by [`services`](Self::services)).
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// True when there are no training jobs.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// A job by id.
    pub fn get(&self, id: JobId) -> Option<&TrainingJob> {
        self.jobs.get(id.index())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The same order as the standard library's stable sort, ties (few distinct keys)
        /// and already sorted input included.
        #[test]
        fn sorting_by_key_is_the_stable_sort(keys in prop::collection::vec(0u64..8, 0..200), sorted in any::<bool>()) {
            let mut items: Vec<(u64, usize)> = keys.into_iter().zip(0..).collect();
            if sorted {
                items.sort_by_key(|&(k, _)| k);
            }
            let mut expected = items.clone();
            expected.sort_by_key(|&(k, _)| k);
            prop_assert_eq!(sort_stably_by_key(items, |&(k, _)| k), expected);
        }
    }

    #[test]
    fn workload_sorts_stably_and_renumbers() {
        let mk = |name: &str, t: u64| {
            let mut j =
                TrainingJob::simple(99, SimTime::from_secs(t), 1, SimDuration::from_secs(10));
            j.name = name.into();
            j
        };
        let w = Workload::new(vec![mk("c", 5), mk("a", 1), mk("b", 5)]);
        let names: Vec<_> = w.jobs().iter().map(|j| j.name.as_ref()).collect();
        assert_eq!(names, ["a", "c", "b"]);
        assert!(w
            .jobs()
            .iter()
            .enumerate()
            .all(|(i, j)| j.id == JobId(i as u32)));
        assert_eq!(w.jobs()[0].reference_throughput(), 1.0);
    }

    #[test]
    fn mig_requests_parse_in_both_spellings() {
        let p = |s: &str| MigRequest::parse(s);
        assert_eq!(
            p("nvidia.com/mig-3g.20gb"),
            Ok(MigRequest::Profile("3g.20gb".into()))
        );
        assert_eq!(p(" 3G.20GB "), Ok(MigRequest::Profile("3g.20gb".into())));
        assert_eq!(p("nvidia.com/mig-any"), Ok(MigRequest::Any));
        assert_eq!(p("ANY"), Ok(MigRequest::Any));
        for bad in [
            "",
            "nvidia.com/mig-",
            "3g",
            "g.20gb",
            "3g.",
            "a100",
            "nvidia.com/gpu",
        ] {
            assert!(p(bad).is_err(), "{bad:?} accepted");
        }
        for r in [MigRequest::Any, MigRequest::Profile("1g.5gb".into())] {
            assert_eq!(p(&r.to_string()), Ok(r));
        }
    }
}
