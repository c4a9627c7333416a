//! The Synergy reference simulator's workload (DESIGN §5.1, issue 3 item 6).
//!
//! Lives here rather than in `tessera-trace` because it needs the models' iteration times from
//! `tessera-perf` (and `tessera-trace` depends on the model crate only).
//!
//! - durations at proportional speed: with probability 0.2, 60·10^U(3,4) s, else
//!   60·10^U(1.5,3) s (mean ≈ 16.8 h);
//! - GPUs: all 1 (single-GPU traces) or 1/2/4/8 with probabilities 0.771/0.019/0.091/0.119
//!   (the Philly mix, multi-GPU traces);
//! - inter-arrival gaps ceil(3600·Exp(λ)) s for λ jobs per hour;
//! - models by class balancing: the next job goes to the class (image, language, speech)
//!   furthest below its target share (ties to the first), round-robin within the class;
//! - iterations = duration / the model's iteration time at the proportional share.

use super::perf::SynergyProfiles;
use tessera_model::{SimDuration, SimRng, SimTime, TrainingJob, Workload};

/// Image models, in round-robin order.
pub const IMAGE_MODELS: &[&str] = &["alexnet", "res18", "res50", "mobilenet", "shufflenet"];
/// Language models, in round-robin order.
pub const LANGUAGE_MODELS: &[&str] = &["gnmt", "transformer", "lstm"];
/// Speech models, in round-robin order.
pub const SPEECH_MODELS: &[&str] = &["m5", "deepspeech"];
/// The Philly GPU-count mix of multi-GPU traces: (GPUs, probability).
pub const PHILLY_MULTI_GPU_MIX: [(u32, f64); 4] = [(1, 0.771), (2, 0.019), (4, 0.091), (8, 0.119)];
/// Measurement window of the reference: jobs with ids 4000..5000.
pub const MEASURE_WINDOW: (u32, u32) = (4000, 5000);

/// Parameters of a Synergy-style workload.
#[derive(Clone, Debug, PartialEq)]
pub struct SynergyWorkload {
    /// Jobs to generate (enough that the measurement window drains before arrivals stop).
    pub jobs: usize,
    /// Arrival rate λ, jobs per hour.
    pub jobs_per_hour: f64,
    /// GPU counts from the Philly mix instead of all 1.
    pub multi_gpu: bool,
    /// Target shares of image, language and speech jobs (percent or fractions).
    pub split: [f64; 3],
    /// Seed.
    pub seed: u64,
}

impl Default for SynergyWorkload {
    fn default() -> Self {
        SynergyWorkload {
            jobs: 12_000,
            jobs_per_hour: 9.0,
            multi_gpu: false,
            split: [20.0, 70.0, 10.0],
            seed: 1,
        }
    }
}

impl SynergyWorkload {
    /// Generates the jobs (ids = arrival order). Models without an iteration time in the
    /// profiles use 1 s.
    pub fn generate(&self) -> Workload {
        let mut rng = SimRng::seed_from_u64(self.seed);
        let profiles = SynergyProfiles::builtin();
        let classes: [&[&str]; 3] = [IMAGE_MODELS, LANGUAGE_MODELS, SPEECH_MODELS];
        let total_split: f64 = self.split.iter().sum::<f64>().max(1e-12);
        let target: Vec<f64> = self.split.iter().map(|s| s / total_split).collect();
        let mut counts = [0usize; 3];
        let mut next_model = [0usize; 3];
        let mut t = 0u64;
        let rate = if self.jobs_per_hour > 0.0 {
            self.jobs_per_hour
        } else {
            1.0
        };
        let mut jobs = Vec::with_capacity(self.jobs);
        for i in 0..self.jobs {
            // Saturating: callers hold jobs / rate to the clock's range (repro synergy --loads).
            t = t.saturating_add((3600.0 * rng.exponential(rate)).ceil() as u64);
            let minutes = if rng.uniform() >= 0.8 {
                10f64.powf(rng.uniform_range(3.0, 4.0))
            } else {
                10f64.powf(rng.uniform_range(1.5, 3.0))
            };
            let duration_s = 60.0 * minutes;
            let gpus = if self.multi_gpu {
                let w: Vec<f64> = PHILLY_MULTI_GPU_MIX.iter().map(|p| p.1).collect();
                PHILLY_MULTI_GPU_MIX[rng.weighted_index(&w)].0
            } else {
                1
            };
            // Class furthest below its target share; before any job all priorities are 0 and
            // the first class wins, as in the reference.
            let n: usize = counts.iter().sum();
            let mut class = 0;
            let mut best = f64::NEG_INFINITY;
            for c in 0..3 {
                let p = if n == 0 {
                    0.0
                } else {
                    target[c] - counts[c] as f64 / n as f64
                };
                if p > best {
                    best = p;
                    class = c;
                }
            }
            counts[class] += 1;
            let models = classes[class];
            let model = models[next_model[class] % models.len()];
            next_model[class] += 1;
            let iter = profiles
                .iter_time(model)
                .filter(|t| *t > 0.0)
                .unwrap_or(1.0);
            let iterations = ((duration_s / iter).floor() as u64).max(1);
            let mut job = TrainingJob::simple(
                i as u32,
                SimTime::from_secs(t),
                gpus,
                SimDuration::from_secs_f64(iterations as f64 * iter),
            );
            job.name = i.to_string().into();
            job.model = model.to_string();
            job.iterations = iterations;
            jobs.push(job);
        }
        Workload::new(jobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_balancing_and_mixture_follow_the_reference() {
        let w = SynergyWorkload {
            jobs: 2000,
            ..SynergyWorkload::default()
        }
        .generate();
        let jobs = w.jobs();
        assert_eq!(jobs[0].model, "alexnet", "first job: all tied, image first");
        assert_eq!(jobs[1].model, "gnmt");
        let share = |ms: &[&str]| {
            jobs.iter()
                .filter(|j| ms.contains(&j.model.as_str()))
                .count() as f64
                / 2000.0
        };
        assert!((share(IMAGE_MODELS) - 0.2).abs() < 0.01);
        assert!((share(LANGUAGE_MODELS) - 0.7).abs() < 0.01);
        assert!((share(SPEECH_MODELS) - 0.1).abs() < 0.01);
        let mean_h = jobs.iter().map(|j| j.duration.as_secs_f64()).sum::<f64>() / 2000.0 / 3600.0;
        assert!((10.0..25.0).contains(&mean_h), "mean duration {mean_h} h");
        let span_h = jobs[1999].submit.as_secs_f64() / 3600.0;
        assert!((span_h - 2000.0 / 9.0).abs() < 20.0, "span {span_h} h");
        assert!(jobs.iter().all(|j| j.gpus == 1));
        let multi = SynergyWorkload {
            jobs: 2000,
            multi_gpu: true,
            ..SynergyWorkload::default()
        }
        .generate();
        let eight = multi.jobs().iter().filter(|j| j.gpus == 8).count() as f64 / 2000.0;
        assert!((eight - 0.119).abs() < 0.03, "{eight}");
    }
}
