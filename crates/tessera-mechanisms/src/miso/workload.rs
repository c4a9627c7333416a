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
    job.name = format!("{id}:{key}").into();
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

/// Which trace job takes which arrival slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ArrivalOrder {
    /// A seeded random permutation of the trace, as the artifact's driver does
    /// (`random.sample` over the job list before drawing gaps). The trace's index order is
    /// not an arrival order: its first third is mostly 120 s jobs, which would put every
    /// short job into the busy early period.
    #[default]
    Shuffled,
    /// Trace index order (job 0 first).
    Index,
}

impl std::str::FromStr for ArrivalOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "shuffled" | "random" => Ok(ArrivalOrder::Shuffled),
            "index" => Ok(ArrivalOrder::Index),
            _ => Err(format!("unknown arrival order {s:?} (shuffled, index)")),
        }
    }
}

impl std::fmt::Display for ArrivalOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ArrivalOrder::Shuffled => "shuffled",
            ArrivalOrder::Index => "index",
        })
    }
}

/// Trace indices in arrival order: Fisher-Yates with `rng` for `Shuffled`.
pub fn arrival_order(n: usize, order: ArrivalOrder, rng: &mut SimRng) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    if order == ArrivalOrder::Shuffled {
        for i in (1..n).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            idx.swap(i, j);
        }
    }
    idx
}

/// The 100-job trace with arrival order and times drawn from `seed`.
pub fn miso_workload(
    seed: u64,
    mean_s: f64,
    early_mean_s: f64,
    order: ArrivalOrder,
) -> Result<Workload, String> {
    let trace = miso_trace()?;
    let mut rng = SimRng::seed_from_u64(seed);
    let perm = arrival_order(trace.len(), order, &mut rng);
    let times = arrivals(trace.len(), mean_s, early_mean_s, &mut rng);
    Ok(Workload::new(
        perm.into_iter()
            .zip(times)
            .map(|(i, t)| {
                let j = &trace[i];
                // The id is renumbered in submit order by `Workload::new`; the name keeps the
                // trace index.
                job_of(i as u32, &j.key, t, j.runtime_s, j.iterations)
            })
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
        let w = miso_workload(1, 60.0, 30.0, ArrivalOrder::Index).unwrap();
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
            miso_workload(2, 60.0, 30.0, ArrivalOrder::Index)
                .unwrap()
                .jobs()[5]
                .submit,
            w.jobs()[5].submit
        );
        assert!(synthetic(10, 0.0, 1).is_err());
        assert_eq!(synthetic(500, 3600.0, 1).unwrap().len(), 500);
    }

    #[test]
    fn shuffled_order_is_a_seeded_permutation_of_the_trace() {
        let trace = miso_trace().unwrap();
        let a = miso_workload(3, 60.0, 30.0, ArrivalOrder::Shuffled).unwrap();
        let b = miso_workload(3, 60.0, 30.0, ArrivalOrder::Shuffled).unwrap();
        let c = miso_workload(4, 60.0, 30.0, ArrivalOrder::Shuffled).unwrap();
        let names = |w: &Workload| w.jobs().iter().map(|j| j.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&a), names(&b), "same seed, same order");
        assert_ne!(names(&a), names(&c), "another seed, another order");
        let index = miso_workload(3, 60.0, 30.0, ArrivalOrder::Index).unwrap();
        assert_ne!(names(&a), names(&index));
        // Every trace job exactly once, with its own key and whole-GPU run time.
        let mut seen: Vec<usize> = a
            .jobs()
            .iter()
            .map(|j| {
                let (i, key) = j.name.split_once(':').unwrap();
                let i: usize = i.parse().unwrap();
                assert_eq!(key, trace[i].key);
                assert_eq!(j.duration, SimDuration::from_secs_f64(trace[i].runtime_s));
                i
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..trace.len()).collect::<Vec<_>>());
        // Jobs come in submit order.
        assert!(a.jobs().windows(2).all(|w| w[0].submit <= w[1].submit));
        assert_eq!("index".parse::<ArrivalOrder>(), Ok(ArrivalOrder::Index));
        assert!("sorted".parse::<ArrivalOrder>().is_err());
    }
}
