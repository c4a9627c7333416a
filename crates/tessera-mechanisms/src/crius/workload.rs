//! Crius's simulated cluster and a seeded, Philly-derived workload of large models.
//!
//! - Cluster (DESIGN §5.2): 80 nodes × 4 A100-40GB, 20 × 16 V100-32GB, 160 × 2 A40,
//!   160 × 2 A10: 1,280 GPUs, 320 of each type.
//! - Jobs: a third each of WideResNet (0.5–6.8 B parameters), BERT (0.76–6.7 B) and MoE
//!   (0.7–27 B); global batch 256; a requested GPU type (uniform over the four) and count
//!   (1–16, raised to the smallest count on which the model fits that type); Poisson
//!   arrivals; durations on the requested configuration drawn from the runtimes of Philly
//!   jobs that ran at least one 300 s round (quantiles below; source: Alibaba's
//!   `cluster-trace-gpu-v2020/analysis/philly_runtime.csv`, 83,154 Philly runtimes,
//!   CC-BY-4.0; see `data/README.md` of this module's crate docs). Iterations = duration ×
//!   the truth's throughput there.
//! - `gpu_types` lists every type the job may run on, the requested one first: Crius may
//!   move a job to another type, FCFS honours the first.

use crate::crius::cells::{HwOptions, LargeModel, CELL_COUNTS};
use tessera_model::{Cluster, GpuCatalog, SimDuration, SimRng, SimTime, TrainingJob, Workload};

use super::perf::{cluster_types, CellThroughput, DEFAULT_BATCH};

/// The 1,280-GPU cluster of Crius's simulations.
pub const CLUSTER_YAML: &str = "\
# Crius's simulated cluster (arXiv 2403.16125 / Arena): 1,280 GPUs, 320 of each type.
apiVersion: tessera/v1
kind: Cluster
metadata:
  name: crius-1280
spec:
  nodeGroups:
    - { name: a100, count: 80, gpu: A100-40GB, gpusPerNode: 4, cpus: 64, memory: 512Gi }
    - { name: v100, count: 20, gpu: V100-32GB, gpusPerNode: 16, cpus: 96, memory: 1536Gi }
    - { name: a40, count: 160, gpu: A40, gpusPerNode: 2, cpus: 32, memory: 256Gi }
    - { name: a10, count: 160, gpu: A10, gpusPerNode: 2, cpus: 32, memory: 256Gi }
";

/// The cluster, parsed.
pub fn cluster() -> Result<Cluster, String> {
    Cluster::from_yaml(CLUSTER_YAML, &GpuCatalog::builtin()).map_err(|e| e.to_string())
}

/// Runtimes (s) of Philly jobs of at least 300 s at the 0, 5, ..., 100th percentiles
/// (56,612 of the 83,154 runtimes). The top is capped at two days: longer jobs would
/// outlast any simulated window.
pub const PHILLY_RUNTIME_QUANTILES: [f64; 21] = [
    300.0, 450.0, 579.0, 733.0, 907.0, 1117.0, 1359.0, 1533.0, 1812.0, 2037.0, 2349.0, 2562.0,
    2765.0, 3568.0, 4493.0, 5704.0, 8229.0, 12613.0, 24884.0, 88811.0, 172800.0,
];

/// Model sizes per family (billions of parameters), spanning Crius's ranges.
pub const MODELS: [&str; 15] = [
    "wrn-0.5b",
    "wrn-1b",
    "wrn-2b",
    "wrn-4b",
    "wrn-6.8b",
    "bert-0.76b",
    "bert-1.3b",
    "bert-2.6b",
    "bert-4b",
    "bert-6.7b",
    "moe-0.7b",
    "moe-1.3b",
    "moe-2.4b",
    "moe-10b",
    "moe-27b",
];

/// Requested GPU counts and their weights (most Philly jobs ask for few GPUs; large models
/// are raised to a count they fit on).
pub const COUNT_WEIGHTS: [(u32, f64); 5] = [(1, 0.35), (2, 0.2), (4, 0.2), (8, 0.15), (16, 0.1)];

/// Default number of jobs (the paper's trace has about 1,900).
pub const DEFAULT_JOBS: usize = 1900;
/// Default arrival rate, jobs per hour: the load at which FCFS starts to queue (average
/// queueing about 0.8 h on seed 1; at 60 jobs/h hardly anything waits).
pub const DEFAULT_LOAD: f64 = 150.0;

/// Draws a runtime from the quantile table (linear between quantiles).
pub fn philly_runtime(rng: &mut SimRng) -> f64 {
    let u = rng.uniform() * 20.0;
    let i = (u.floor() as usize).min(19);
    let f = u - i as f64;
    let (a, b) = (PHILLY_RUNTIME_QUANTILES[i], PHILLY_RUNTIME_QUANTILES[i + 1]);
    a + f * (b - a)
}

/// `jobs` jobs arriving at `load` per hour, seeded.
pub fn generate(jobs: usize, load: f64, seed: u64) -> Result<Workload, String> {
    if !(load.is_finite() && load > 0.0) {
        return Err(format!(
            "load {load}: must be a positive number of jobs per hour"
        ));
    }
    let cluster = cluster()?;
    let hw = HwOptions::default();
    let types = cluster_types(&cluster, &hw);
    let models: Vec<LargeModel> = MODELS
        .iter()
        .map(|n| LargeModel::from_name(n).ok_or_else(|| format!("model {n}")))
        .collect::<Result<_, _>>()?;
    let weights: Vec<f64> = COUNT_WEIGHTS.iter().map(|c| c.1).collect();
    let mut rng = SimRng::seed_from_u64(seed);
    let mut now = 0.0f64;
    let mut out = Vec::with_capacity(jobs);
    let mut attempts = 0usize;
    while out.len() < jobs {
        attempts += 1;
        if attempts > jobs * 100 + 1000 {
            return Err("no model fits any requested configuration".into());
        }
        let mi = rng.below(models.len() as u64) as usize;
        let ti = rng.below(types.len() as u64) as usize;
        let want = COUNT_WEIGHTS[rng.weighted_index(&weights)].0;
        let (model, ty) = (&models[mi], &types[ti]);
        // The smallest count ≥ the wish on which the model fits this type, packed.
        let Some((count, rate)) = CELL_COUNTS
            .iter()
            .filter(|&&c| c >= want && c as u64 <= ty.total)
            .map(|&c| {
                let nodes = c.div_ceil(ty.device.gpus_per_node);
                (
                    c,
                    CellThroughput::rate(model, DEFAULT_BATCH, &ty.device, c, nodes, None),
                )
            })
            .find(|&(_, r)| r > 0.0)
        else {
            continue;
        };
        let duration = philly_runtime(&mut rng);
        now += rng.exponential(load / 3600.0);
        let id = out.len() as u32;
        let mut job = TrainingJob::simple(
            id,
            SimTime::from_secs_f64(now),
            count,
            SimDuration::from_secs_f64(duration),
        );
        job.name = format!("crius-{id}").into();
        job.model = model.name.clone();
        job.batch_size = Some(DEFAULT_BATCH);
        job.iterations = ((duration * rate).round() as u64).max(1);
        let mut allowed = vec![ty.gpu];
        allowed.extend(types.iter().map(|t| t.gpu).filter(|g| *g != ty.gpu));
        job.gpu_types = allowed;
        out.push(job);
    }
    Ok(Workload::new(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_has_1280_gpus_320_per_type() {
        let c = cluster().unwrap();
        assert_eq!(c.totals().0, 1280);
        let types = cluster_types(&c, &HwOptions::default());
        assert_eq!(types.len(), 4);
        assert!(types.iter().all(|t| t.total == 320));
    }

    #[test]
    fn generator_is_seeded_and_requests_feasible_configurations() {
        let a = generate(200, 60.0, 3).unwrap();
        let b = generate(200, 60.0, 3).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, generate(200, 60.0, 4).unwrap());
        let c = cluster().unwrap();
        let types = cluster_types(&c, &HwOptions::default());
        for j in a.jobs() {
            assert!(CELL_COUNTS.contains(&j.gpus));
            assert_eq!(j.gpu_types.len(), 4);
            assert_eq!(j.batch_size, Some(256));
            let d = j.duration.as_secs_f64();
            assert!((300.0..=172_800.0).contains(&d), "{d}");
            let t = types.iter().find(|t| t.gpu == j.gpu_types[0]).unwrap();
            let m = LargeModel::from_name(&j.model).unwrap();
            let nodes = j.gpus.div_ceil(t.device.gpus_per_node);
            let r = CellThroughput::rate(&m, 256, &t.device, j.gpus, nodes, None);
            // The trace's own throughput is the truth on the request.
            assert!((j.iterations as f64 - (d * r).max(1.0)).abs() <= 0.5 + 1e-6);
        }
        // Every family appears.
        for fam in ["wrn-", "bert-", "moe-"] {
            assert!(a.jobs().iter().any(|j| j.model.starts_with(fam)));
        }
        assert!(generate(10, 0.0, 1).is_err());
    }
}
