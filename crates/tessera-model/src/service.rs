//! Inference services: long-running model servers whose instances a policy scales out and in,
//! fed by a stream of requests.
//!
//! A service declares what **one instance** needs ([`InstanceDemand`]: CPU, memory, a whole GPU
//! or a quota of one, device memory), how requests arrive ([`ArrivalProcess`]), its latency SLO,
//! the largest batch an instance serves at once and the cold start a new instance pays before it
//! takes traffic. Instances themselves exist only at run time (drivers give them ids).

use serde::{Deserialize, Serialize};

use crate::alloc::GpuPart;
use crate::catalog::GpuModelId;
use crate::cluster::Cluster;
use crate::error::SpecError;
use crate::quantity::{Bytes, MilliCpu};
use crate::time::{SimDuration, SimTime};

/// Index of a service in its [`Workload`](crate::Workload) (dense, in start order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ServiceId(pub u32);

impl ServiceId {
    /// The index as `usize`, for slices indexed by service.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Highest request rate a service may ask for, per second: one request per microsecond, the
/// clock's resolution (faster streams would arrive many to an instant, without end).
pub const MAX_REQUEST_RATE: f64 = 1e6;

/// Largest coefficient of variation of Gamma inter-arrival times. Far beyond it the gaps
/// round to zero microseconds almost always (the shape `1/cv²` underflows the sampler), so
/// requests would pile up at one instant without end.
pub const MAX_ARRIVAL_CV: f64 = 100.0;

/// Most requests a workload's services may be expected to receive in all (mean rate × span,
/// summed): each request is a few events, so this bounds a run's serving work (about a
/// quarter of an hour at the limit). Checked by [`Workload::check_services`](crate::Workload::check_services);
/// raise it here for longer runs.
pub const MAX_EXPECTED_REQUESTS: f64 = 1e9;

/// How requests arrive, from the service's start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalProcess {
    /// Exponential inter-arrival times at `rate` requests per second.
    Poisson {
        /// Requests per second (≥ 0).
        rate: f64,
    },
    /// Gamma-distributed inter-arrival times with mean `1/rate` and coefficient of variation
    /// `cv` (burstier than Poisson when `cv > 1`; `cv = 1` is Poisson).
    Gamma {
        /// Requests per second (≥ 0).
        rate: f64,
        /// Coefficient of variation of inter-arrival times (> 0).
        cv: f64,
    },
    /// A piecewise-constant rate: `rates[i]` requests per second during second `i` after the
    /// start (Poisson within each second); zero after the series ends.
    RateSeries {
        /// Requests per second, one value per second (each ≥ 0).
        rates: Vec<f64>,
    },
    /// Exactly these requests, as offsets from the service's start (non-decreasing).
    Timestamps {
        /// Offsets from the start.
        offsets: Vec<SimDuration>,
    },
}

impl ArrivalProcess {
    /// Mean requests per second over `span` (the expected load; exact for timestamps).
    pub fn mean_rate(&self, span: SimDuration) -> f64 {
        let secs = span.as_secs_f64();
        match self {
            ArrivalProcess::Poisson { rate } | ArrivalProcess::Gamma { rate, .. } => *rate,
            ArrivalProcess::RateSeries { rates } => {
                let n = (secs.ceil() as usize).min(rates.len());
                if secs > 0.0 {
                    rates[..n].iter().sum::<f64>() / secs
                } else {
                    0.0
                }
            }
            ArrivalProcess::Timestamps { offsets } => {
                if secs > 0.0 {
                    offsets.iter().filter(|o| **o < span).count() as f64 / secs
                } else {
                    0.0
                }
            }
        }
    }

    /// Requests expected over `span` from the start (exact for timestamps).
    pub fn expected_requests(&self, span: SimDuration) -> f64 {
        match self {
            ArrivalProcess::Poisson { rate } | ArrivalProcess::Gamma { rate, .. } => {
                rate * span.as_secs_f64()
            }
            ArrivalProcess::RateSeries { rates } => {
                let n = (span.as_secs_f64().ceil() as usize).min(rates.len());
                rates[..n].iter().sum()
            }
            ArrivalProcess::Timestamps { offsets } => {
                offsets.iter().filter(|o| **o < span).count() as f64
            }
        }
    }

    fn check(&self, field: &str) -> Result<(), SpecError> {
        let rate_error = |f: String, r: f64| -> Result<(), SpecError> {
            if !(r.is_finite() && r >= 0.0) {
                Err(SpecError::invalid(
                    &f,
                    format!("{r} is not a non-negative rate"),
                ))
            } else if r > MAX_REQUEST_RATE {
                Err(SpecError::invalid(
                    &f,
                    format!(
                        "{r} requests/s is more than the limit of {MAX_REQUEST_RATE:e} \
                         (one per microsecond, the clock's resolution; \
                         tessera_model::MAX_REQUEST_RATE)"
                    ),
                ))
            } else {
                Ok(())
            }
        };
        match self {
            ArrivalProcess::Poisson { rate } => rate_error(format!("{field}.poisson.rate"), *rate),
            ArrivalProcess::Gamma { rate, cv } => {
                rate_error(format!("{field}.gamma.rate"), *rate)?;
                if !(cv.is_finite() && *cv > 0.0) {
                    return Err(SpecError::invalid(
                        &format!("{field}.gamma.cv"),
                        format!("{cv} is not a positive coefficient of variation"),
                    ));
                }
                if *cv > MAX_ARRIVAL_CV {
                    return Err(SpecError::invalid(
                        &format!("{field}.gamma.cv"),
                        format!(
                            "{cv} is more than the limit of {MAX_ARRIVAL_CV} \
                             (tessera_model::MAX_ARRIVAL_CV): gaps that bursty round to zero"
                        ),
                    ));
                }
                Ok(())
            }
            ArrivalProcess::RateSeries { rates } => {
                for (i, r) in rates.iter().enumerate() {
                    rate_error(format!("{field}.rate_series[{i}]"), *r)?;
                }
                Ok(())
            }
            ArrivalProcess::Timestamps { offsets } => {
                match offsets.windows(2).position(|w| w[1] < w[0]) {
                    Some(i) => Err(SpecError::invalid(
                        &format!("{field}.timestamps[{}]", i + 1),
                        "timestamps must not decrease".to_string(),
                    )),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The GPU part one instance holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuDemand {
    /// A whole GPU, exclusively.
    Whole,
    /// A quota of one GPU shared with others: guaranteed `sm_request`, up to `sm_limit`
    /// (permille of the GPU's SMs).
    Quota {
        /// Guaranteed SM share, permille (1..=1000).
        sm_request: u16,
        /// Upper SM share, permille (`sm_request..=1000`).
        sm_limit: u16,
    },
}

/// What one instance of a service holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceDemand {
    /// Host CPU.
    pub cpu: MilliCpu,
    /// Host memory.
    pub memory: Bytes,
    /// The GPU part.
    pub gpu: GpuDemand,
    /// Device memory the instance pins on its GPU (the model's weights and activations).
    pub gpu_memory: Bytes,
}

impl InstanceDemand {
    /// The [`GpuPart`] an allocation of one instance holds on its GPU.
    pub fn part(&self) -> GpuPart {
        match self.gpu {
            GpuDemand::Whole => GpuPart::Whole,
            GpuDemand::Quota {
                sm_request,
                sm_limit,
            } => GpuPart::Quota {
                sm_request,
                sm_limit,
                memory: self.gpu_memory,
            },
        }
    }

    /// SM share the instance is guaranteed, permille.
    pub fn sm_request(&self) -> u16 {
        match self.gpu {
            GpuDemand::Whole => 1000,
            GpuDemand::Quota { sm_request, .. } => sm_request,
        }
    }
}

/// An inference service as a workload describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InferenceService {
    /// Dense id, assigned by [`Workload::with_services`](crate::Workload::with_services).
    pub id: ServiceId,
    /// The service's name.
    pub name: String,
    /// Model name, a key into latency tables (`bert-base`); empty when unknown.
    pub model: String,
    /// Tenant or queue.
    pub tenant: String,
    /// Requests start arriving at this instant.
    pub start: SimTime,
    /// No request arrives at or after this instant; the service ends here.
    pub end: SimTime,
    /// Latency objective per request (queueing + batch execution).
    pub slo: SimDuration,
    /// Largest batch an instance executes at once (≥ 1).
    pub max_batch: u32,
    /// What each instance holds.
    pub instance: InstanceDemand,
    /// Time from an instance's creation until it takes traffic.
    pub cold_start: SimDuration,
    /// GPU models instances may run on; empty means any.
    pub gpu_types: Vec<GpuModelId>,
    /// How requests arrive.
    pub arrivals: ArrivalProcess,
}

impl InferenceService {
    /// A service with neutral defaults, for generators and tests: one CPU, 4 GiB of host and
    /// 4 GiB of device memory, a whole GPU per instance, a 100 ms SLO, batches of up to 8, a
    /// one-second cold start, Poisson arrivals at `rate`.
    pub fn simple(name: &str, start: SimTime, end: SimTime, rate: f64) -> InferenceService {
        InferenceService {
            id: ServiceId(0),
            name: name.to_string(),
            model: String::new(),
            tenant: String::new(),
            start,
            end,
            slo: SimDuration::from_micros(100_000),
            max_batch: 8,
            instance: InstanceDemand {
                cpu: MilliCpu::from_cores(1),
                memory: Bytes::from_gib(4),
                gpu: GpuDemand::Whole,
                gpu_memory: Bytes::from_gib(4),
            },
            cold_start: SimDuration::from_secs(1),
            gpu_types: Vec::new(),
            arrivals: ArrivalProcess::Poisson { rate },
        }
    }

    /// Checks the values a spec or generator could get wrong; `field` prefixes error paths
    /// (e.g. `spec.services[2]`).
    pub fn check(&self, field: &str) -> Result<(), SpecError> {
        let bad =
            |f: &str, reason: String| Err(SpecError::invalid(&format!("{field}.{f}"), reason));
        if self.name.is_empty() {
            return bad("name", "must not be empty".into());
        }
        if self.end < self.start {
            return bad(
                "end",
                format!("ends at {} before it starts at {}", self.end, self.start),
            );
        }
        if self.slo.is_zero() {
            return bad("slo", "must be positive".into());
        }
        if self.max_batch == 0 {
            return bad("max_batch", "must be at least 1".into());
        }
        if let GpuDemand::Quota {
            sm_request,
            sm_limit,
        } = self.instance.gpu
        {
            if sm_request == 0 || sm_request > sm_limit || sm_limit > 1000 {
                return bad(
                    "instance.gpu",
                    format!(
                        "quota needs 0 < request {sm_request} <= limit {sm_limit} <= 1000 permille"
                    ),
                );
            }
        }
        self.arrivals.check(&format!("{field}.arrivals"))
    }

    /// Requests this service is expected to receive from start to end.
    pub fn expected_requests(&self) -> f64 {
        self.arrivals
            .expected_requests(self.end.saturating_since(self.start))
    }

    /// Why no instance of this service could ever be placed on `cluster` (no GPU model it may
    /// use, device memory larger than every allowed GPU, host CPU or memory larger than every
    /// node), or `None` when one instance fits on an empty cluster.
    pub fn unschedulable_on(&self, cluster: &Cluster) -> Option<String> {
        let allowed: Vec<_> = cluster
            .nodes
            .iter()
            .filter(|n| {
                n.gpus > 0 && (self.gpu_types.is_empty() || self.gpu_types.contains(&n.gpu))
            })
            .collect();
        if allowed.is_empty() {
            return Some("no node has a GPU model the service may use".to_string());
        }
        let max_gpu_mem = allowed
            .iter()
            .map(|n| Bytes::from_gib_f64(cluster.catalog.get(n.gpu).memory_gib))
            .max()
            .unwrap_or(Bytes(0));
        if self.instance.gpu_memory > max_gpu_mem {
            return Some(format!(
                "an instance needs {:.1} GiB of device memory, more than any GPU has ({:.1} GiB)",
                self.instance.gpu_memory.as_gib(),
                max_gpu_mem.as_gib()
            ));
        }
        let host_fits = allowed.iter().any(|n| {
            let cap = cluster.capacity(n.id);
            cap.cpu >= self.instance.cpu && cap.memory >= self.instance.memory
        });
        if !host_fits {
            return Some(format!(
                "an instance needs {} CPU and {:.1} GiB of memory, more than any node has",
                self.instance.cpu.as_cores(),
                self.instance.memory.as_gib()
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> InferenceService {
        InferenceService::simple("s", SimTime::ZERO, SimTime::from_secs(10), 5.0)
    }

    #[test]
    fn check_refuses_bad_values() {
        assert!(svc().check("s").is_ok());
        let mut s = svc();
        s.arrivals = ArrivalProcess::RateSeries {
            rates: vec![1.0, -2.0],
        };
        let e = s.check("spec.services[0]").unwrap_err().to_string();
        assert!(
            e.contains("spec.services[0].arrivals.rate_series[1]"),
            "{e}"
        );
        s.arrivals = ArrivalProcess::Gamma { rate: 1.0, cv: 0.0 };
        assert!(s.check("s").is_err());
        s.arrivals = ArrivalProcess::Poisson { rate: f64::NAN };
        assert!(s.check("s").is_err());
        let mut s = svc();
        s.instance.gpu = GpuDemand::Quota {
            sm_request: 600,
            sm_limit: 500,
        };
        assert!(s.check("s").is_err());
        let mut s = svc();
        s.max_batch = 0;
        assert!(s.check("s").is_err());
        let mut s = svc();
        s.end = SimTime::ZERO;
        s.start = SimTime::from_secs(1);
        assert!(s.check("s").is_err());
    }

    /// Issue 36: a Gamma CV of 10^6 drew zero gaps forever; 10^9 requests/s (or a series of
    /// 10^12) arrived many to a microsecond without end.
    #[test]
    fn rates_burstiness_and_totals_are_bounded() {
        let with = |arrivals: ArrivalProcess| {
            let mut s = svc();
            s.arrivals = arrivals;
            s.check("s").map_err(|e| e.to_string())
        };
        let e = with(ArrivalProcess::Gamma {
            rate: 20.0,
            cv: 1e6,
        })
        .unwrap_err();
        assert!(
            e.contains("s.arrivals.gamma.cv") && e.contains("limit of 100"),
            "{e}"
        );
        assert!(with(ArrivalProcess::Gamma {
            rate: 20.0,
            cv: MAX_ARRIVAL_CV
        })
        .is_ok());
        let e = with(ArrivalProcess::Poisson { rate: 1e9 }).unwrap_err();
        assert!(
            e.contains("s.arrivals.poisson.rate") && e.contains("limit of 1e6"),
            "{e}"
        );
        let e = with(ArrivalProcess::RateSeries {
            rates: vec![1.0, 1e12],
        })
        .unwrap_err();
        assert!(
            e.contains("rate_series[1]") && e.contains("limit of 1e6"),
            "{e}"
        );
        assert!(with(ArrivalProcess::Poisson { rate: f64::NAN }).is_err());
        assert!(with(ArrivalProcess::Poisson {
            rate: MAX_REQUEST_RATE
        })
        .is_ok());

        // 10 s at 5/s is 50 requests; ten services of 10^8 s at 2/s are past the total.
        assert_eq!(svc().expected_requests(), 50.0);
        let long: Vec<InferenceService> = (0..10)
            .map(|i| {
                InferenceService::simple(
                    &format!("s{i}"),
                    SimTime::ZERO,
                    SimTime::from_secs(100_000_000),
                    2.0,
                )
            })
            .collect();
        let w = crate::Workload::with_services(Vec::new(), long);
        let e = w.check_services().unwrap_err().to_string();
        assert!(
            e.contains("2.000e9 requests") && e.contains("MAX_EXPECTED_REQUESTS"),
            "{e}"
        );
        let w = crate::Workload::with_services(Vec::new(), vec![svc()]);
        assert!(w.check_services().is_ok());
    }

    #[test]
    fn mean_rate_of_series_and_timestamps() {
        let r = ArrivalProcess::RateSeries {
            rates: vec![2.0, 4.0],
        };
        assert_eq!(r.mean_rate(SimDuration::from_secs(2)), 3.0);
        assert_eq!(r.mean_rate(SimDuration::from_secs(4)), 1.5);
        let t = ArrivalProcess::Timestamps {
            offsets: vec![SimDuration::from_secs(1), SimDuration::from_secs(3)],
        };
        assert_eq!(t.mean_rate(SimDuration::from_secs(2)), 0.5);
    }

    #[test]
    fn memory_larger_than_every_gpu_is_unschedulable() {
        let cluster = Cluster::homogeneous(
            "V100-16GB",
            1,
            4,
            MilliCpu::from_cores(32),
            Bytes::from_gib(256),
        )
        .unwrap();
        let mut s = svc();
        assert_eq!(s.unschedulable_on(&cluster), None);
        s.instance.gpu_memory = Bytes::from_gib(40);
        let why = s.unschedulable_on(&cluster).unwrap();
        assert!(why.contains("device memory"), "{why}");
    }
}
