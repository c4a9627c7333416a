//! Gavel's throughput matrix (`simulation_throughputs.json`): isolated throughput of each job
//! type on each GPU type and scale factor, the truth model built on it, and the profiler that
//! hands policies every (GPU type, count) configuration as [`ConfigEstimates`].
//!
//! The file maps a GPU type (`k80`, `p100`, `v100`, and `*_unconsolidated` for GPUs spread over
//! servers) to keys `"('<job type>', <scale factor>)"`, each holding `"null"`: the isolated
//! throughput (iterations/s) and, under other keys, the pair of throughputs when co-located
//! with another job on the same GPU (space sharing). Tessera does not model space sharing:
//! co-location entries are read past and ignored.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde_json::Value;
use tessera_model::{
    Allocation, Cluster, GpuModelId, Knowledge, ParallelPlan, SimDuration, SimRng, TrainingJob,
};
use tessera_perf::{ConfigEstimate, ConfigEstimates, Profiler, ThroughputModel, TraceThroughput};
use thiserror::Error;

/// The matrix Tessera ships: Gavel's file with only the isolated (`"null"`) entries kept
/// (see `data/README.md`).
const BUILTIN_JSON: &str = include_str!("data/simulation_throughputs_isolated.json");

/// Suffix of the GPU-type keys measured with GPUs spread over servers.
const UNCONSOLIDATED: &str = "_unconsolidated";

/// Why a throughput matrix could not be read.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum MatrixError {
    /// Not JSON at all.
    #[error("throughput matrix is not valid JSON: {0}")]
    Json(String),
    /// A level of the document is not an object.
    #[error("throughput matrix: {at} must be an object")]
    NotObject {
        /// Where (`top level`, a GPU type, a key).
        at: String,
    },
    /// A job key is not `('<job type>', <scale factor>)`.
    #[error("throughput matrix: {gpu}: bad job key {key:?} (expected \"('<job type>', <scale factor>)\")")]
    BadKey {
        /// GPU type.
        gpu: String,
        /// The key.
        key: String,
    },
    /// An isolated throughput is missing, negative or not finite.
    #[error("throughput matrix: {gpu}: {key}: isolated throughput (\"null\") must be a finite number ≥ 0")]
    BadThroughput {
        /// GPU type.
        gpu: String,
        /// The key.
        key: String,
    },
    /// No entry at all.
    #[error("throughput matrix has no entries")]
    Empty,
}

/// A job type as the matrix and the trace reader agree on it: the model name lowercased to
/// letters and digits, and the batch size (`ResNet-50 (batch size 128)` → `resnet50`, 128).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobTypeKey {
    /// Normalised model name.
    pub model: String,
    /// Batch size, when the job type names one.
    pub batch: Option<u32>,
}

impl JobTypeKey {
    /// From Gavel's job-type text.
    pub fn parse(job_type: &str) -> JobTypeKey {
        let (name, rest) = job_type.split_once('(').unwrap_or((job_type, ""));
        let batch = rest
            .trim()
            .strip_prefix("batch size")
            .and_then(|b| b.trim().trim_end_matches(')').trim().parse().ok());
        JobTypeKey {
            model: normalise(name),
            batch,
        }
    }

    /// The key of a trace job (its model and batch size, as the Gavel reader sets them).
    pub fn of_job(job: &TrainingJob) -> JobTypeKey {
        JobTypeKey {
            model: normalise(&job.model),
            batch: job.batch_size,
        }
    }
}

fn normalise(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Isolated throughputs by GPU type, job type and scale factor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GavelMatrix {
    /// GPU type (lowercase, e.g. `v100`, `v100_unconsolidated`) → (job type, scale) → it/s.
    types: BTreeMap<String, BTreeMap<(JobTypeKey, u32), f64>>,
}

impl GavelMatrix {
    /// Parses Gavel's `simulation_throughputs.json`; co-location entries are ignored.
    pub fn from_json(text: &str) -> Result<GavelMatrix, MatrixError> {
        let doc: Value =
            serde_json::from_str(text).map_err(|e| MatrixError::Json(e.to_string()))?;
        let top = doc.as_object().ok_or_else(|| MatrixError::NotObject {
            at: "top level".into(),
        })?;
        let mut types = BTreeMap::new();
        let mut entries = 0usize;
        for (gpu, jobs) in top {
            let jobs = jobs
                .as_object()
                .ok_or_else(|| MatrixError::NotObject { at: gpu.clone() })?;
            let mut table = BTreeMap::new();
            for (key, value) in jobs {
                let (job_type, scale) = parse_key(key).ok_or_else(|| MatrixError::BadKey {
                    gpu: gpu.clone(),
                    key: key.clone(),
                })?;
                let bad = || MatrixError::BadThroughput {
                    gpu: gpu.clone(),
                    key: key.clone(),
                };
                let isolated = value
                    .as_object()
                    .ok_or_else(|| MatrixError::NotObject {
                        at: format!("{gpu}: {key}"),
                    })?
                    .get("null")
                    .and_then(Value::as_f64)
                    .ok_or_else(bad)?;
                if !(isolated.is_finite() && isolated >= 0.0) {
                    return Err(bad());
                }
                table.insert((JobTypeKey::parse(job_type), scale), isolated);
                entries += 1;
            }
            types.insert(gpu.to_ascii_lowercase(), table);
        }
        if entries == 0 {
            return Err(MatrixError::Empty);
        }
        Ok(GavelMatrix { types })
    }

    /// The matrix Tessera ships (Gavel's, isolated entries), parsed once.
    pub fn builtin() -> Arc<GavelMatrix> {
        static MATRIX: OnceLock<Arc<GavelMatrix>> = OnceLock::new();
        MATRIX
            .get_or_init(|| {
                // The embedded file is checked by a unit test; an empty matrix (every job at
                // its trace throughput) keeps library code panic-free.
                Arc::new(GavelMatrix::from_json(BUILTIN_JSON).unwrap_or_default())
            })
            .clone()
    }

    /// GPU types named in the matrix (consolidated ones, without the suffix).
    pub fn gpu_types(&self) -> impl Iterator<Item = &str> {
        self.types
            .keys()
            .filter(|k| !k.ends_with(UNCONSOLIDATED))
            .map(String::as_str)
    }

    /// Number of isolated entries.
    pub fn len(&self) -> usize {
        self.types.values().map(BTreeMap::len).sum()
    }

    /// True when the matrix has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The matrix's GPU type for a catalog model: the longest matrix type that prefixes the
    /// model's lowercase name (`V100-16GB` → `v100`).
    pub fn matrix_type(&self, catalog_name: &str) -> Option<&str> {
        let name = catalog_name.to_ascii_lowercase();
        self.gpu_types()
            .filter(|t| name.starts_with(t))
            .max_by_key(|t| t.len())
    }

    /// Every job type of the matrix, sorted.
    pub fn job_types(&self) -> Vec<JobTypeKey> {
        let mut keys: Vec<JobTypeKey> = self
            .types
            .values()
            .flat_map(|t| t.keys().map(|(k, _)| k.clone()))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// The job type of `job` in this matrix: its model and batch as they are
    /// ([`JobTypeKey::of_job`]), else its model through the model catalogue ([`table_key`];
    /// `res50` and `ResNet-50` are `resnet50`) at the same batch size. The batch is never
    /// guessed: the matrix's rates are absolute (iterations per second of that job type), so
    /// a job whose batch the matrix lacks runs at its trace throughput.
    pub fn key_of(&self, job: &TrainingJob) -> JobTypeKey {
        let own = JobTypeKey::of_job(job);
        if self.knows(&own) {
            return own;
        }
        let aliased = tessera_model::models::lookup(
            &job.model,
            |name| {
                let key = JobTypeKey {
                    model: normalise(name),
                    batch: job.batch_size,
                };
                self.knows(&key).then_some(key)
            },
            table_key,
        );
        aliased.unwrap_or(own)
    }

    /// Whether the matrix knows this job type on any GPU type.
    pub fn knows(&self, key: &JobTypeKey) -> bool {
        self.types.values().any(|t| {
            t.range((key.clone(), 0)..=(key.clone(), u32::MAX))
                .next()
                .is_some()
        })
    }

    /// Isolated throughput of `key` on `count` GPUs of matrix type `gpu`, spread over servers
    /// or not. A count the matrix lacks uses the largest tabulated count below it, scaled
    /// linearly (ideal data parallelism, as the Gavel trace reader does); so does a count
    /// whose entry is zero (three K80 entries, ResNet-50 at batch 128 on 2, 4 and 8 GPUs, are
    /// 0 while the 1-GPU run works: failed measurements, not memory limits); spread
    /// placements fall back to the consolidated figure when the matrix has none. `None` =
    /// unknown.
    pub fn throughput(&self, key: &JobTypeKey, gpu: &str, count: u32, spread: bool) -> Option<f64> {
        if count == 0 {
            return Some(0.0);
        }
        let lookup = |table: &str| {
            self.types.get(table).and_then(|t| {
                t.range((key.clone(), 0)..=(key.clone(), count))
                    .rev()
                    .find(|(_, v)| **v > 0.0)
                    .map(|((_, scale), v)| v * f64::from(count) / f64::from((*scale).max(1)))
            })
        };
        if spread {
            if let Some(v) = lookup(&format!("{gpu}{UNCONSOLIDATED}")) {
                return Some(v);
            }
        }
        lookup(gpu)
    }
}

/// The matrix's model name for a model of the catalogue (canonical name), listed in
/// docs/models.md.
pub fn table_key(canonical: &str) -> Option<&'static str> {
    Some(match canonical {
        "resnet18" => "resnet18",
        "resnet50" => "resnet50",
        "transformer" => "transformer",
        "lstm" => "lm",
        "recommendation" => "recommendation",
        "cyclegan" => "cyclegan",
        "a3c" => "a3c",
        _ => return None,
    })
}

/// `('ResNet-50 (batch size 128)', 4)` → (`ResNet-50 (batch size 128)`, 4).
fn parse_key(key: &str) -> Option<(&str, u32)> {
    let inner = key.trim().strip_prefix('(')?.strip_suffix(')')?;
    let (name, scale) = inner.rsplit_once(',')?;
    let name = name.trim();
    let name = name
        .strip_prefix('\'')
        .and_then(|n| n.strip_suffix('\''))
        .or_else(|| name.strip_prefix('"').and_then(|n| n.strip_suffix('"')))?;
    let scale: u32 = scale.trim().parse().ok()?;
    (!name.is_empty() && scale > 0).then_some((name, scale))
}

/// Truth from the matrix: a job of a known type runs at the matrix's throughput for its GPU
/// type and count (GPUs on several nodes use the `_unconsolidated` figures). Jobs of unknown
/// types, or on GPU types the matrix lacks, run at their trace throughput.
#[derive(Clone, Debug)]
pub struct GavelThroughput {
    matrix: Arc<GavelMatrix>,
}

impl GavelThroughput {
    /// Truth from `matrix`.
    pub fn new(matrix: Arc<GavelMatrix>) -> GavelThroughput {
        GavelThroughput { matrix }
    }
}

impl ThroughputModel for GavelThroughput {
    fn throughput(&self, job: &TrainingJob, alloc: &Allocation, cluster: &Cluster) -> f64 {
        let count = alloc.gpus();
        let gpu = alloc
            .shares
            .first()
            .and_then(|s| cluster.nodes.get(s.node.index()))
            .map(|n| cluster.catalog.get(n.gpu).name.as_str());
        let key = self.matrix.key_of(job);
        gpu.and_then(|g| self.matrix.matrix_type(g))
            .and_then(|t| {
                self.matrix
                    .throughput(&key, t, count, alloc.node_count() > 1)
            })
            .unwrap_or_else(|| TraceThroughput.throughput(job, alloc, cluster))
    }
}

/// What Gavel assumes a scheduler knows: the matrix row of each arriving job, for every GPU
/// type of the cluster and every count (powers of two up to the type's capacity, plus the
/// requested count). Gavel's simulator reads the matrix directly, so profiling is free and
/// exact unless an error is asked for.
#[derive(Clone, Debug)]
pub struct MatrixProfiler {
    matrix: Arc<GavelMatrix>,
    /// Relative error: each figure is scaled by 1 + e·U(-1, 1).
    pub rel_error: f64,
    /// Profiling time.
    pub cost: SimDuration,
}

impl MatrixProfiler {
    /// An exact, free profiler of `matrix`.
    pub fn new(matrix: Arc<GavelMatrix>) -> MatrixProfiler {
        MatrixProfiler {
            matrix,
            rel_error: 0.0,
            cost: SimDuration::ZERO,
        }
    }

    /// Every configuration of `job` on `cluster`, as the policies will see it (exact).
    pub fn estimates(&self, job: &TrainingJob, cluster: &Cluster) -> ConfigEstimates {
        self.estimates_with(job, cluster, &mut |v| v)
    }

    fn estimates_with(
        &self,
        job: &TrainingJob,
        cluster: &Cluster,
        noise: &mut dyn FnMut(f64) -> f64,
    ) -> ConfigEstimates {
        let key = self.matrix.key_of(job);
        let known = self.matrix.knows(&key);
        let mut entries = Vec::new();
        for (gpu, capacity, per_node) in gpu_types(cluster) {
            if !job.gpu_types.is_empty() && !job.gpu_types.contains(&gpu) {
                continue;
            }
            let mtype = self.matrix.matrix_type(&cluster.catalog.get(gpu).name);
            let mut counts: Vec<u32> = (0..8)
                .map(|p| 1u32 << p)
                .filter(|&c| u64::from(c) <= capacity)
                .collect();
            if u64::from(job.gpus) <= capacity && job.gpus > 0 {
                counts.push(job.gpus);
            }
            for count in counts {
                let spread = count > per_node;
                let throughput = match (known, mtype) {
                    (true, Some(t)) => self.matrix.throughput(&key, t, count, spread),
                    _ => None,
                }
                // Unknown job or GPU type: the trace's own figure, as the truth does.
                .unwrap_or_else(|| {
                    job.reference_throughput() * f64::from(count) / f64::from(job.gpus.max(1))
                });
                entries.push(ConfigEstimate {
                    gpu,
                    count,
                    throughput: noise(throughput),
                    plan: Some(ParallelPlan::data_parallel(count)),
                });
            }
        }
        ConfigEstimates::new(entries)
    }
}

impl Profiler for MatrixProfiler {
    fn cost(&self) -> SimDuration {
        self.cost
    }

    fn gpus(&self) -> u32 {
        0
    }

    fn profile(&self, job: &TrainingJob, cluster: &Cluster, rng: &mut SimRng) -> Knowledge {
        let e = self.rel_error;
        let estimates = if e > 0.0 {
            self.estimates_with(job, cluster, &mut |v| {
                (v * (1.0 + e * rng.uniform_range(-1.0, 1.0))).max(0.0)
            })
        } else {
            self.estimates(job, cluster)
        };
        Knowledge::of(estimates)
    }
}

/// The cluster's GPU types with their total GPUs and GPUs per node (the largest node), by
/// type id.
pub fn gpu_types(cluster: &Cluster) -> Vec<(GpuModelId, u64, u32)> {
    let mut types: BTreeMap<GpuModelId, (u64, u32)> = BTreeMap::new();
    for g in &cluster.groups {
        let e = types.entry(g.gpu).or_insert((0, 0));
        e.0 += g.total_gpus();
        e.1 = e.1.max(g.gpus_per_node);
    }
    types.into_iter().map(|(t, (c, p))| (t, c, p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::{Bytes, GpuCatalog, MilliCpu, NodeId, NodeShare, SimTime};

    #[test]
    fn builtin_matrix_is_gavels() {
        let m = GavelMatrix::builtin();
        // 6 GPU-type tables: 83 keys each, 77 for k80_unconsolidated.
        assert_eq!(m.len(), 5 * 83 + 77);
        assert_eq!(m.gpu_types().collect::<Vec<_>>(), ["k80", "p100", "v100"]);
        let r50 = JobTypeKey::parse("ResNet-50 (batch size 128)");
        // Figures from the JSON file.
        let v = m.throughput(&r50, "v100", 1, false).unwrap();
        assert!((v - 2.4967655780898292).abs() < 1e-12);
        // 16 GPUs: twice the 8-GPU figure.
        let v16 = m.throughput(&r50, "v100", 16, false).unwrap();
        let v8 = m.throughput(&r50, "v100", 8, false).unwrap();
        assert!((v16 - 2.0 * v8).abs() < 1e-9);
        // Heterogeneity: V100 faster than P100 faster than K80 for ResNet-50.
        let p = m.throughput(&r50, "p100", 1, false).unwrap();
        let k = m.throughput(&r50, "k80", 1, false).unwrap();
        assert!(v > p && p > k, "{v} {p} {k}");
        assert_eq!(
            m.throughput(&JobTypeKey::parse("ResNet-51"), "v100", 1, false),
            None
        );
        assert_eq!(m.matrix_type("V100-16GB"), Some("v100"));
        assert_eq!(m.matrix_type("A100-40GB"), None);
        // Zero entries count as missing: K80, ResNet-50 (batch 128) at 4 GPUs = 4 × 1 GPU.
        let k1 = m.throughput(&r50, "k80", 1, false).unwrap();
        let k4 = m.throughput(&r50, "k80", 4, false).unwrap();
        assert!(k1 > 0.0 && (k4 - 4.0 * k1).abs() < 1e-9);
    }

    #[test]
    fn spread_placements_use_unconsolidated_figures() {
        let m = GavelMatrix::builtin();
        let r50 = JobTypeKey::parse("ResNet-50 (batch size 64)");
        let c = m.throughput(&r50, "v100", 4, false).unwrap();
        let u = m.throughput(&r50, "v100", 4, true).unwrap();
        assert_ne!(c, u);
    }

    #[test]
    fn keys_parse_and_colocation_entries_are_ignored() {
        let text = r#"{"v100": {
            "('LM (batch size 20)', 2)": {"null": 3.5, "('A3C', 1)": [1.0, 2.0]},
            "('A3C', 1)": {"null": 7.0}
        }}"#;
        let m = GavelMatrix::from_json(text).unwrap();
        assert_eq!(m.len(), 2);
        let lm = JobTypeKey::parse("LM (batch size 20)");
        assert_eq!(lm.model, "lm");
        assert_eq!(lm.batch, Some(20));
        // Below the smallest tabulated count: unknown.
        assert_eq!(m.throughput(&lm, "v100", 1, false), None);
        assert_eq!(m.throughput(&lm, "v100", 4, false), Some(7.0));
        assert_eq!(parse_key("('A3C', 1)"), Some(("A3C", 1)));
        assert_eq!(parse_key("(\"A3C\", 3)"), Some(("A3C", 3)));
    }

    #[test]
    fn bad_matrices_are_typed_errors() {
        let cases = [
            ("not json", "not valid JSON"),
            ("[1]", "top level must be an object"),
            (r#"{"v100": 3}"#, "v100 must be an object"),
            (r#"{"v100": {"A3C": {"null": 1}}}"#, "bad job key"),
            (r#"{"v100": {"('A3C', 0)": {"null": 1}}}"#, "bad job key"),
            (r#"{"v100": {"('A3C', x)": {"null": 1}}}"#, "bad job key"),
            (r#"{"v100": {"('A3C', 1)": {"null": -1}}}"#, "finite number"),
            (
                r#"{"v100": {"('A3C', 1)": {"null": "fast"}}}"#,
                "finite number",
            ),
            (r#"{"v100": {"('A3C', 1)": {}}}"#, "finite number"),
            (r#"{"v100": {"('A3C', 1)": 4}}"#, "must be an object"),
            (r#"{"v100": {}}"#, "no entries"),
        ];
        for (text, want) in cases {
            let err = GavelMatrix::from_json(text).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains(want)),
                "{text}: {err:?}"
            );
        }
    }

    fn cluster() -> Cluster {
        Cluster::from_yaml(&super::super::gavel_108_yaml(), &GpuCatalog::builtin()).unwrap()
    }

    fn job(model: &str, batch: Option<u32>, gpus: u32) -> TrainingJob {
        let mut j = TrainingJob::simple(0, SimTime::ZERO, gpus, SimDuration::from_secs(100));
        j.model = model.into();
        j.batch_size = batch;
        j
    }

    #[test]
    fn truth_follows_gpu_type_and_falls_back_to_the_trace() {
        let c = cluster();
        let truth = GavelThroughput::new(GavelMatrix::builtin());
        let on = |node: u32, gpus: u32, j: &TrainingJob| {
            truth.throughput(
                j,
                &Allocation::new(vec![NodeShare::whole(
                    NodeId(node),
                    gpus,
                    MilliCpu(0),
                    Bytes(0),
                )]),
                &c,
            )
        };
        let r50 = job("resnet50", Some(128), 1);
        let k80 = on(0, 1, &r50);
        let v100 = on(c.nodes.len() as u32 - 1, 1, &r50);
        assert!(v100 > 2.0 * k80, "{k80} {v100}");
        // Unknown model: trace throughput (1 it/s at 1 GPU).
        assert_eq!(on(0, 2, &job("mystery", None, 1)), 2.0);
    }

    #[test]
    fn profiler_lists_every_type_and_count() {
        let c = cluster();
        let p = MatrixProfiler::new(GavelMatrix::builtin());
        let e = p.estimates(&job("transformer", Some(64), 3), &c);
        // 3 types × (1, 2, 4, 8, 16, 32 ≤ 36 GPUs, and the requested 3).
        assert_eq!(e.entries().len(), 3 * 7);
        let types = gpu_types(&c);
        let v100 = types[2].0;
        let t3 = e.get(v100, 3).map(|x| x.throughput).unwrap();
        let t2 = e.get(v100, 2).map(|x| x.throughput).unwrap();
        assert!((t3 - 1.5 * t2).abs() < 1e-9, "{t3} {t2} {e:?}");
        assert!(e.entries().iter().all(|x| x.throughput > 0.0));
        // Allowed types are respected.
        let mut only = job("transformer", Some(64), 2);
        only.gpu_types = vec![v100];
        assert!(p
            .estimates(&only, &c)
            .entries()
            .iter()
            .all(|x| x.gpu == v100));
    }
}
