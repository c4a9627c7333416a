//! Pollux workloads (petuum/adaptdl, branch `osdi21-artifact`, `benchmark/workloads*/*.csv`;
//! also Sia's workloads): CSV with header `name,time,application,num_replicas,batch_size`.
//!
//! These files give no run time: Pollux's simulator trains each application to a fixed number
//! of epochs. We derive the run time on the requested allocation from facts of Pollux's
//! artifact, embedded in `data/pollux_applications.csv` (epochs, samples per epoch) and
//! `data/pollux_step_times.csv` (measured single-GPU step time by local batch size):
//!
//! - iterations = ⌈epochs × samples_per_epoch / batch_size⌉;
//! - local batch = ⌈batch_size / num_replicas⌉; when it exceeds the largest profiled local
//!   batch, it is split into ⌈local / max⌉ gradient-accumulation steps of equal size;
//! - step time = single-GPU step time at that size (linear interpolation between profiled
//!   points, clamped at the ends) × accumulation steps;
//! - duration = iterations × step time.
//!
//! This assumes ideal data-parallel scaling across replicas (synchronisation is not charged);
//! performance models refine the rate on other allocations.

use std::sync::OnceLock;

use tessera_model::TrainingJob;

use crate::error::{TraceError, TraceErrorKind};
use crate::fields::{computed_duration, read_rows, Ctx, Layout, Parsed, Row};

/// Columns a Pollux workload must have.
pub const REQUIRED: [&str; 5] = ["name", "time", "application", "num_replicas", "batch_size"];

const APPLICATIONS: &str = include_str!("../../data/pollux_applications.csv");
const STEP_TIMES: &str = include_str!("../../data/pollux_step_times.csv");

/// Facts about one Pollux application.
#[derive(Debug, Clone, PartialEq)]
pub struct Application {
    /// Name as used in workload files (`cifar10`).
    pub name: String,
    /// Epochs trained.
    pub epochs: u64,
    /// Training samples per epoch.
    pub samples_per_epoch: u64,
    /// Profiled (local batch size, single-GPU step time in seconds), by batch size.
    pub step_times: Vec<(u32, f64)>,
}

impl Application {
    /// Iterations and seconds to train at global `batch_size` over `replicas` GPUs.
    pub fn work(&self, replicas: u32, batch_size: u32) -> (u64, f64) {
        let batch = u64::from(batch_size.max(1));
        let iterations = (self.epochs * self.samples_per_epoch)
            .div_ceil(batch)
            .max(1);
        let local = batch.div_ceil(u64::from(replicas.max(1))) as f64;
        let max_local = self.step_times.last().map_or(1.0, |(b, _)| f64::from(*b));
        let accumulation = (local / max_local).ceil().max(1.0);
        let step = self.step_time(local / accumulation) * accumulation;
        (iterations, iterations as f64 * step)
    }

    /// Single-GPU step time at a local batch size, interpolated linearly and clamped.
    fn step_time(&self, local: f64) -> f64 {
        let points = &self.step_times;
        let (Some(first), Some(last)) = (points.first(), points.last()) else {
            return 1.0;
        };
        if local <= f64::from(first.0) {
            return first.1;
        }
        if local >= f64::from(last.0) {
            return last.1;
        }
        for pair in points.windows(2) {
            let [(b0, t0), (b1, t1)] = pair else { continue };
            let (b0, b1) = (f64::from(*b0), f64::from(*b1));
            if local <= b1 && b1 > b0 {
                return t0 + (t1 - t0) * (local - b0) / (b1 - b0);
            }
        }
        last.1
    }
}

/// The embedded application table.
pub fn applications() -> &'static [Application] {
    static TABLE: OnceLock<Vec<Application>> = OnceLock::new();
    TABLE.get_or_init(|| {
        // Embedded files are checked by tests; a malformed line would simply be absent.
        let mut apps: Vec<Application> = APPLICATIONS
            .lines()
            .skip(1)
            .filter_map(|line| {
                let f: Vec<&str> = line.split(',').collect();
                Some(Application {
                    name: f.first()?.to_string(),
                    epochs: f.get(1)?.parse().ok()?,
                    samples_per_epoch: f.get(2)?.parse().ok()?,
                    step_times: Vec::new(),
                })
            })
            .collect();
        for line in STEP_TIMES.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let (Some(name), Some(bsz), Some(t)) = (f.first(), f.get(1), f.get(2)) else {
                continue;
            };
            let (Ok(bsz), Ok(t)) = (bsz.parse::<u32>(), t.parse::<f64>()) else {
                continue;
            };
            if let Some(app) = apps.iter_mut().find(|a| a.name == *name) {
                app.step_times.push((bsz, t));
            }
        }
        for app in &mut apps {
            app.step_times.sort_by_key(|(b, _)| *b);
        }
        apps
    })
}

/// An application by name.
pub fn application(name: &str) -> Option<&'static Application> {
    applications().iter().find(|a| a.name == name)
}

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Parsed, TraceError> {
    read_rows(ctx, text, &Layout::csv_with_header(&REQUIRED), job)
}

fn job(row: &Row<'_>) -> Result<TrainingJob, TraceError> {
    let submit = row.time("time")?;
    let name = row.nonempty("application")?;
    let Some(app) = application(name) else {
        let known: Vec<&str> = applications().iter().map(|a| a.name.as_str()).collect();
        return Err(row.err(
            "application",
            TraceErrorKind::UnknownApplication {
                name: name.to_string(),
                known: known.join(", "),
            },
        ));
    };
    let gpus = row.gpus("num_replicas")?;
    let batch_size = row
        .opt_u32("batch_size")?
        .ok_or_else(|| row.err("batch_size", TraceErrorKind::EmptyValue))?;
    let (iterations, secs) = app.work(gpus, batch_size);
    let duration = computed_duration(secs).map_err(|k| row.err("num_replicas", k))?;
    let mut job = TrainingJob::simple(0, submit, gpus, duration);
    job.name = row.text("name")?.to_string().into();
    job.model = app.name.clone();
    job.batch_size = Some(batch_size);
    job.iterations = iterations;
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applications_are_complete() {
        let names: Vec<&str> = applications().iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "bert",
                "cifar10",
                "deepspeech2",
                "imagenet",
                "ncf",
                "yolov3"
            ]
        );
        assert!(applications().iter().all(|a| a.step_times.len() >= 5));
    }

    #[test]
    fn work_follows_the_documented_rule() {
        let c = application("cifar10").unwrap();
        // 100 epochs x 50,000 samples / 128 = 39,062.5 -> 39,063 steps at local batch 128:
        // between the profiled 91 (0.07591 s) and 129 (0.10385 s).
        let (it, secs) = c.work(1, 128);
        assert_eq!(it, 39_063);
        let step = 0.07591350078582763 + (0.10385050773620605 - 0.07591350078582763) * 37.0 / 38.0;
        assert!((secs - it as f64 * step).abs() < 1e-6, "{secs}");
        // BERT at local batch 24 > profiled max 12: two accumulation steps of 12.
        let b = application("bert").unwrap();
        let (it, secs) = b.work(1, 24);
        assert_eq!(it, (2 * 88_644u64).div_ceil(24));
        assert!((secs - it as f64 * 2.0 * 0.9215156733989716).abs() < 1e-6);
    }
}
