//! Synthetic workloads: Poisson arrivals, a GPU-count mix and a run-time distribution.
//!
//! Draws come from [`SimRng`], so a seed gives the same workload on every platform and
//! version. Per job, in order: the inter-arrival gap, the GPU count, the run time.

use std::sync::OnceLock;

use tessera_model::{SimDuration, SimRng, SimTime, TrainingJob, Workload};

/// GPUs per job in Microsoft's Philly trace (1/2/4/8 GPUs), as used by Synergy and Tiresias.
pub const PHILLY_GPU_MIX: [(u32, f64); 4] = [(1, 0.771), (2, 0.019), (4, 0.091), (8, 0.119)];

/// Shortest run time a generator emits. The Philly sample holds zero-second jobs (and other
/// distributions can draw values near zero); they are clamped up to this.
pub const MIN_DURATION: SimDuration = SimDuration::from_secs(1);

const PHILLY_RUNTIMES: &str = include_str!("../data/philly_runtimes.csv");

/// The 83,154 Philly job run times (seconds) of Alibaba's `philly_runtime.csv` (CC-BY-4.0),
/// in ascending order, parsed once from the embedded `runtime_s,count` table. Raw values: the
/// two zero-second jobs are included here and clamped by the generator.
pub fn philly_runtimes() -> &'static [f64] {
    static RUNTIMES: OnceLock<Vec<f64>> = OnceLock::new();
    RUNTIMES.get_or_init(|| {
        let mut out = Vec::new();
        for line in PHILLY_RUNTIMES.lines().skip(1) {
            let Some((value, count)) = line.split_once(',') else {
                continue;
            };
            let (Ok(value), Ok(count)) = (value.parse::<f64>(), count.parse::<usize>()) else {
                continue;
            };
            out.extend(std::iter::repeat_n(value, count));
        }
        out
    })
}

/// How run times are drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum DurationDist {
    /// Uniformly from the embedded Philly sample ([`philly_runtimes`]).
    PhillyRuntimes,
    /// Always this long.
    Fixed(SimDuration),
    /// Exponential with this mean, in seconds.
    Exponential {
        /// Mean run time in seconds.
        mean_s: f64,
    },
}

impl DurationDist {
    /// One run time, at least [`MIN_DURATION`].
    pub fn sample(&self, rng: &mut SimRng) -> SimDuration {
        let d = match self {
            DurationDist::PhillyRuntimes => {
                let sample = philly_runtimes();
                let i = rng.below(sample.len() as u64) as usize;
                SimDuration::from_secs_f64(sample.get(i).copied().unwrap_or(0.0))
            }
            DurationDist::Fixed(d) => *d,
            DurationDist::Exponential { mean_s } => {
                if mean_s.is_finite() && *mean_s > 0.0 {
                    SimDuration::from_secs_f64(rng.exponential(1.0 / mean_s))
                } else {
                    SimDuration::ZERO
                }
            }
        };
        d.max(MIN_DURATION)
    }
}

/// Jobs arriving as a Poisson process.
#[derive(Debug, Clone, PartialEq)]
pub struct PoissonWorkload {
    /// Number of jobs.
    pub jobs: usize,
    /// Arrival rate; the mean gap is 3600 / `jobs_per_hour` seconds. A rate that is not
    /// positive and finite submits every job at time zero.
    pub jobs_per_hour: f64,
    /// (GPUs, weight) pairs; the GPU count of each job is drawn by weight. Empty = 1 GPU.
    pub gpu_mix: Vec<(u32, f64)>,
    /// Run-time distribution.
    pub durations: DurationDist,
    /// Seed of the draws.
    pub seed: u64,
}

/// Most jobs one generator run may produce (job ids are 32-bit).
pub const MAX_GENERATED_JOBS: usize = 100_000_000;

/// Why a generator's parameters cannot produce a trace that reads back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// More jobs than [`MAX_GENERATED_JOBS`].
    #[error("{0} jobs is more than the limit of {MAX_GENERATED_JOBS}")]
    TooManyJobs(usize),
    /// A GPU count outside 1..=[`crate::MAX_GPUS_PER_JOB`].
    #[error("GPU count {0} is outside 1..={max}", max = crate::MAX_GPUS_PER_JOB)]
    BadGpus(u32),
    /// A rate that is not positive and finite.
    #[error("the arrival rate must be positive (jobs per hour), got {0}")]
    BadRate(f64),
    /// The arrivals would run past the clock's input range.
    #[error(
        "{jobs} jobs at {jobs_per_hour:?} jobs/h arrive over about {span_s:e} s, past the limit of \
         {max} s: raise the rate or lower the job count",
        max = tessera_model::MAX_INPUT_SECS
    )]
    SpanTooLong {
        /// Jobs asked for.
        jobs: usize,
        /// The rate.
        jobs_per_hour: f64,
        /// Expected (or drawn) span of the arrivals in seconds.
        span_s: f64,
    },
}

impl PoissonWorkload {
    /// Checks that the parameters give a trace every reader accepts: a bounded job count,
    /// GPU counts in range, a positive rate, and arrivals expected well within the clock's
    /// input range (half of it, so that random gaps stay inside).
    pub fn check(&self) -> Result<(), GenerateError> {
        if self.jobs > MAX_GENERATED_JOBS {
            return Err(GenerateError::TooManyJobs(self.jobs));
        }
        if let Some(&(g, _)) = self
            .gpu_mix
            .iter()
            .find(|(g, _)| *g == 0 || u64::from(*g) > crate::MAX_GPUS_PER_JOB)
        {
            return Err(GenerateError::BadGpus(g));
        }
        if !(self.jobs_per_hour.is_finite() && self.jobs_per_hour > 0.0) {
            return Err(GenerateError::BadRate(self.jobs_per_hour));
        }
        let span_s = self.jobs.saturating_sub(1) as f64 * 3600.0 / self.jobs_per_hour;
        if span_s.is_nan() || span_s > tessera_model::MAX_INPUT_SECS as f64 / 2.0 {
            return Err(GenerateError::SpanTooLong {
                jobs: self.jobs,
                jobs_per_hour: self.jobs_per_hour,
                span_s,
            });
        }
        Ok(())
    }

    /// The jobs one by one, in submit order, without holding them all (for writing large
    /// traces). A drawn arrival past the clock's input range ends the stream with an error
    /// rather than a clamped time. Same draws as [`generate`](Self::generate).
    pub fn stream(&self) -> impl Iterator<Item = Result<TrainingJob, GenerateError>> + '_ {
        let mut rng = SimRng::seed_from_u64(self.seed);
        let rate_per_s = self.jobs_per_hour / 3600.0;
        let weights: Vec<f64> = self.gpu_mix.iter().map(|(_, w)| *w).collect();
        let limit = tessera_model::MAX_INPUT_SECS as f64;
        let mut now_s = 0.0f64;
        let mut now = SimTime::ZERO;
        let mut failed = false;
        (0..self.jobs).map_while(move |i| {
            if failed {
                return None;
            }
            if i > 0 && rate_per_s.is_finite() && rate_per_s > 0.0 {
                let gap = rng.exponential(rate_per_s);
                now_s += gap;
                if now_s.is_nan() || now_s > limit {
                    failed = true;
                    return Some(Err(GenerateError::SpanTooLong {
                        jobs: self.jobs,
                        jobs_per_hour: self.jobs_per_hour,
                        span_s: now_s,
                    }));
                }
                now += SimDuration::from_secs_f64(gap);
            }
            let gpus = match self.gpu_mix.get(rng.weighted_index(&weights)) {
                Some((g, _)) => (*g).max(1),
                None => 1,
            };
            let duration = self.durations.sample(&mut rng);
            let id = u32::try_from(i).unwrap_or(u32::MAX);
            Some(Ok(TrainingJob::simple(id, now, gpus, duration)))
        })
    }

    /// Draws the workload. The first job arrives at time zero; jobs are named `0`, `1`, ….
    /// Built-in workloads use parameters that pass [`check`](Self::check); with others, the
    /// jobs drawn before an arrival ran past the clock's input range are kept.
    pub fn generate(&self) -> Workload {
        Workload::new(self.stream().map_while(Result::ok).collect())
    }
}

/// Where arrival times come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// As the trace has them.
    Trace,
    /// Re-drawn as a Poisson process at this many jobs per hour (seeded); the trace's job
    /// order is kept, the first job arrives at time zero.
    Poisson {
        /// Jobs per hour, finite and positive.
        jobs_per_hour: f64,
    },
}

/// An `--arrivals` value that is neither `trace` nor `poisson:RATE` with a positive rate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad arrivals {0:?}: expected `trace` or `poisson:JOBS_PER_HOUR` with a positive rate")]
pub struct BadArrivals(pub String);

impl std::str::FromStr for Arrivals {
    type Err = BadArrivals;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        if t == "trace" {
            return Ok(Arrivals::Trace);
        }
        let rate = t
            .strip_prefix("poisson:")
            .and_then(|r| r.trim().parse::<f64>().ok())
            .filter(|r| r.is_finite() && *r > 0.0)
            .ok_or_else(|| BadArrivals(s.to_string()))?;
        Ok(Arrivals::Poisson {
            jobs_per_hour: rate,
        })
    }
}

impl std::fmt::Display for Arrivals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arrivals::Trace => f.write_str("trace"),
            Arrivals::Poisson { jobs_per_hour } => write!(f, "poisson:{jobs_per_hour}"),
        }
    }
}

/// [`with_arrivals`] held to the clock's input range: the expected span of the redrawn
/// arrivals must be within half of [`tessera_model::MAX_INPUT_SECS`] (checked before any
/// draw), and a drawn arrival past the whole of it is an error too, never a saturated time
/// (`--arrivals poisson:1e-300` overflowed the engine's clock).
pub fn with_arrivals_checked(
    workload: &Workload,
    arrivals: Arrivals,
    seed: u64,
) -> Result<Workload, GenerateError> {
    let Arrivals::Poisson { jobs_per_hour } = arrivals else {
        return Ok(workload.clone());
    };
    let jobs = workload.len();
    let too_long = |span_s: f64| GenerateError::SpanTooLong {
        jobs,
        jobs_per_hour,
        span_s,
    };
    let expected_s = jobs.saturating_sub(1) as f64 * 3600.0 / jobs_per_hour;
    if expected_s.is_nan() || expected_s > tessera_model::MAX_INPUT_SECS as f64 / 2.0 {
        return Err(too_long(expected_s));
    }
    let w = with_arrivals(workload, arrivals, seed);
    let last = w.jobs().last().map_or(SimTime::ZERO, |j| j.submit);
    if last > SimTime::from_secs(tessera_model::MAX_INPUT_SECS) {
        return Err(too_long(last.as_secs_f64()));
    }
    Ok(w)
}

/// Applies `arrivals` to `workload`: unchanged for [`Arrivals::Trace`]; for
/// [`Arrivals::Poisson`], the jobs keep their order (by the trace's submit time) and get
/// submit times 0, then cumulative exponential gaps of mean 3600 / rate seconds drawn from
/// `seed` (this is how Synergy's experiments replay Philly at a chosen load).
pub fn with_arrivals(workload: &Workload, arrivals: Arrivals, seed: u64) -> Workload {
    let Arrivals::Poisson { jobs_per_hour } = arrivals else {
        return workload.clone();
    };
    let rate_per_s = jobs_per_hour / 3600.0;
    let mut rng = SimRng::seed_from_u64(seed);
    let mut now = SimTime::ZERO;
    let mut jobs = Vec::with_capacity(workload.len());
    for (i, job) in workload.jobs().iter().enumerate() {
        if i > 0 && rate_per_s.is_finite() && rate_per_s > 0.0 {
            now += SimDuration::from_secs_f64(rng.exponential(rate_per_s));
        }
        let mut j = job.clone();
        j.submit = now;
        jobs.push(j);
    }
    // Services keep their own arrival processes.
    Workload::with_services(jobs, workload.services().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_parse_and_redraw() {
        assert_eq!("trace".parse::<Arrivals>(), Ok(Arrivals::Trace));
        assert_eq!(
            "Poisson:9".parse::<Arrivals>(),
            Ok(Arrivals::Poisson { jobs_per_hour: 9.0 })
        );
        for bad in [
            "",
            "poisson",
            "poisson:",
            "poisson:0",
            "poisson:-1",
            "poisson:nan",
            "x",
        ] {
            assert!(bad.parse::<Arrivals>().is_err(), "{bad}");
        }
        let w = PoissonWorkload {
            jobs: 2000,
            jobs_per_hour: 100.0,
            gpu_mix: PHILLY_GPU_MIX.to_vec(),
            durations: DurationDist::PhillyRuntimes,
            seed: 3,
        }
        .generate();
        assert_eq!(with_arrivals(&w, Arrivals::Trace, 1), w);
        // Issue 36: poisson:1e-300 saturated the submit times and overflowed the engine.
        let slow = Arrivals::Poisson {
            jobs_per_hour: 1e-300,
        };
        assert!(matches!(
            with_arrivals_checked(&w, slow, 1),
            Err(GenerateError::SpanTooLong { .. })
        ));
        let ten = Arrivals::Poisson {
            jobs_per_hour: 10.0,
        };
        assert_eq!(
            with_arrivals_checked(&w, ten, 7),
            Ok(with_arrivals(&w, ten, 7))
        );
        let a = with_arrivals(
            &w,
            Arrivals::Poisson {
                jobs_per_hour: 10.0,
            },
            7,
        );
        assert_eq!(
            a,
            with_arrivals(
                &w,
                Arrivals::Poisson {
                    jobs_per_hour: 10.0
                },
                7
            )
        );
        assert_ne!(
            a,
            with_arrivals(
                &w,
                Arrivals::Poisson {
                    jobs_per_hour: 10.0
                },
                8
            )
        );
        assert_eq!(a.len(), w.len());
        // Order and everything but the submit time are kept.
        for (x, y) in a.jobs().iter().zip(w.jobs()) {
            assert_eq!(
                (x.name.as_ref(), x.gpus, x.duration),
                (y.name.as_ref(), y.gpus, y.duration)
            );
        }
        assert_eq!(a.jobs()[0].submit, SimTime::ZERO);
        // About 10 jobs per hour over 2,000 jobs.
        let span_h = a.jobs()[w.len() - 1].submit.as_secs_f64() / 3600.0;
        let rate = (w.len() - 1) as f64 / span_h;
        assert!((rate - 10.0).abs() < 1.0, "{rate}");
    }

    #[test]
    fn philly_sample_is_complete() {
        let r = philly_runtimes();
        assert_eq!(r.len(), 83_154);
        assert_eq!(r.iter().filter(|x| **x == 0.0).count(), 2);
        assert_eq!(r.last().copied(), Some(4_628_239.0));
        let mean = r.iter().sum::<f64>() / r.len() as f64;
        assert!((mean - 14_613.33).abs() < 0.01, "{mean}");
    }
}
