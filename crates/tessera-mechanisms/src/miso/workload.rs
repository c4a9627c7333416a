//! MISO's workloads: the 100-job trace of its artifact with seeded Poisson arrivals, and a
//! synthetic MIG workload of any size drawn from the same models and run times.

use std::collections::BTreeMap;

use tessera_model::{SimDuration, SimRng, SimTime, TrainingJob, Workload};

const TRACE_JSON: &str = include_str!("data/scheduler_trace_trace_100.json");
const MODELS_JSON: &str = include_str!("data/scheduler_simulator_job_models.json");
const ITERS_JSON: &str = include_str!("data/workloads_num_iters.json");

/// One job of the trace: table key, whole-GPU runtime in seconds, iterations.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    /// `<model>_train<batch>`.
    pub key: String,
    /// Runtime on a whole A100 (7g), seconds.
    pub runtime_s: f64,
    /// Training iterations.
    pub iterations: u64,
}

fn by_index<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<Vec<T>, String> {
    let map: BTreeMap<String, T> =
        serde_json::from_str(text).map_err(|e| format!("MISO {what}: {e}"))?;
    let mut rows: Vec<(usize, T)> = map
        .into_iter()
        .map(|(k, v)| {
            k.parse::<usize>()
                .map(|i| (i, v))
                .map_err(|_| format!("MISO {what}: job index {k:?} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    rows.sort_by_key(|(i, _)| *i);
    if rows.iter().enumerate().any(|(n, (i, _))| n != *i) {
        return Err(format!("MISO {what}: job indices are not 0..n"));
    }
    Ok(rows.into_iter().map(|(_, v)| v).collect())
}

/// The artifact's 100 jobs, in index order.
pub fn miso_trace() -> Result<Vec<TraceJob>, String> {
    let runtimes: Vec<f64> = by_index(TRACE_JSON, "trace")?;
    let models: Vec<String> = by_index(MODELS_JSON, "job models")?;
    let iters: Vec<u64> = by_index(ITERS_JSON, "iterations")?;
    if runtimes.len() != models.len() || runtimes.len() != iters.len() {
        return Err("MISO trace files disagree on the number of jobs".into());
    }
    runtimes
        .into_iter()
        .zip(models)
        .zip(iters)
        .map(|((r, key), it)| {
            if !(r.is_finite() && r > 0.0) {
                return Err(format!("MISO trace: runtime {r} of {key} is not positive"));
            }
            Ok(TraceJob {
                key,
                runtime_s: r,
                iterations: it.max(1),
            })
        })
        .collect()
}

/// A training job of a table key (`resnet_train128` → model `resnet`, batch 128).
pub fn job_of(id: u32, key: &str, submit: SimTime, runtime_s: f64, iterations: u64) -> TrainingJob {
    let (model, batch) = match key.rsplit_once("_train") {
        Some((m, b)) => (m.to_string(), b.parse::<u32>().ok()),
        None => (key.to_string(), None),
    };
    let mut job = TrainingJob::simple(id, submit, 1, SimDuration::from_secs_f64(runtime_s));
    job.name = format!("{id}:{key}");
    job.model = model;
    job.batch_size = batch;
    job.iterations = iterations.max(1);
    job
}

/// Poisson arrivals: the first at 0, then exponential gaps of mean `mean_s`, except for the
/// first third of the jobs whose mean is `early_mean_s` (MISO: 60 s, and 30 s early on).
pub fn arrivals(n: usize, mean_s: f64, early_mean_s: f64, rng: &mut SimRng) -> Vec<SimTime> {
    let mut t = 0.0;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if i > 0 {
            let mean = if i < n / 3 { early_mean_s } else { mean_s };
            t += rng.exponential(1.0 / mean.max(1e-6));
        }
        out.push(SimTime::from_secs_f64(t));
    }
    out
}

/// The 100-job trace with arrivals drawn from `seed`.
pub fn miso_workload(seed: u64, mean_s: f64, early_mean_s: f64) -> Result<Workload, String> {
    let trace = miso_trace()?;
    let mut rng = SimRng::seed_from_u64(seed);
    let times = arrivals(trace.len(), mean_s, early_mean_s, &mut rng);
    Ok(Workload::new(
        trace
            .iter()
            .zip(times)
            .enumerate()
            .map(|(i, (j, t))| job_of(i as u32, &j.key, t, j.runtime_s, j.iterations))
            .collect(),
    ))
}

/// `jobs` jobs drawn from the trace's (model, runtime, iterations) rows at random, arriving
/// as a Poisson process of `jobs_per_hour`.
pub fn synthetic(jobs: usize, jobs_per_hour: f64, seed: u64) -> Result<Workload, String> {
    if !(jobs_per_hour.is_finite() && jobs_per_hour > 0.0) {
        return Err(format!("load {jobs_per_hour} jobs/h must be positive"));
    }
    let trace = miso_trace()?;
    let mut rng = SimRng::seed_from_u64(seed);
    let mean = 3600.0 / jobs_per_hour;
    let times = arrivals(jobs, mean, mean, &mut rng);
    Ok(Workload::new(
        times
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let row = &trace[rng.below(trace.len() as u64) as usize];
                job_of(i as u32, &row.key, t, row.runtime_s, row.iterations)
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_reads_and_arrivals_follow_the_means() {
        let t = miso_trace().unwrap();
        assert_eq!(t.len(), 100);
        assert_eq!(t[1].key, "resnet_train128");
        let w = miso_workload(1, 60.0, 30.0).unwrap();
        assert_eq!(w.len(), 100);
        let j = &w.jobs()[0];
        assert_eq!(j.submit, SimTime::ZERO);
        assert_eq!(j.model, "transformer");
        assert_eq!(j.batch_size, Some(32));
        // Mean gaps over many draws: 30 s for the first third, 60 s after.
        let mut rng = SimRng::seed_from_u64(7);
        let n = 30_000;
        let a = arrivals(n, 60.0, 30.0, &mut rng);
        let early = a[n / 3 - 1].as_secs_f64() / (n / 3 - 1) as f64;
        let late = (a[n - 1].as_secs_f64() - a[n / 3 - 1].as_secs_f64()) / (n - n / 3) as f64;
        assert!(
            (early - 30.0).abs() < 1.5 && (late - 60.0).abs() < 2.0,
            "{early} {late}"
        );
        assert_ne!(
            miso_workload(2, 60.0, 30.0).unwrap().jobs()[5].submit,
            w.jobs()[5].submit
        );
        assert!(synthetic(10, 0.0, 1).is_err());
        assert_eq!(synthetic(500, 3600.0, 1).unwrap().len(), 500);
    }
}
