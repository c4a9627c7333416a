//! Tessera's mechanisms, each one module behind one line of [`MECHANISMS`].
//!
//! A mechanism bundles everything one idea needs: its truth model and profiler
//! ([`Mechanism::truths`]), its policies ([`Mechanism::policies`]), its built-in clusters and
//! workloads, its alternative engines and its experiments (`tessera repro NAME`) and
//! benchmarks (`tessera bench NAME`). The CLI and the daemon are generic over this registry:
//! they never branch on a paper's name.
//!
//! - [`baselines`]: FIFO, SRTF, LAS, FTF on the trace's throughput; the default cluster and
//!   workload; the Philly-scale benchmark.
//! - [`synergy`]: CPU/memory sensitivity (Synergy, OSDI'22).
//! - [`hap`]: sharding plans for mixed GPUs (HAP, EuroSys'24): `repro hap`, `bench hap`.
//! - [`miso`]: MIG partitioning from an MPS profile (MISO, SoCC'22): `repro miso`, `bench miso`.
//! - [`dilu`]: GPU quotas and complementary packing (Dilu, ASPLOS'25): latency tables,
//!   profiling searches, the packing replay (`repro dilu`, `bench dilu`).
//! - [`crius`]: cells on heterogeneous GPUs (Crius): `crius` and ablations, `fcfs`, `repro crius`.
//! - [`capabilities`]: what each policy honours (its registry entry's
//!   [`PolicyInfo::capabilities`]), checked against a run's inputs by every driver.
//! - [`gavel`]: heterogeneity-aware baselines on Gavel's throughput matrix: `gavel`,
//!   `gavel-max-sum`, `sia`, `elastic`; `bench gavel`.
//!
//! Adding a mechanism: write `src/NAME/mod.rs` with a unit struct implementing
//! [`Mechanism`], and add one line to [`MECHANISMS`] (see docs/architecture.md).
//!
//! The `experiments` feature (on by default) brings the simulator in for experiments and
//! engines; the daemon uses the registry without it.
//!
//! ```
//! use tessera_mechanisms::{build_policy, policies};
//! use tessera_sched::PolicyOptions;
//! let las = build_policy("las", &PolicyOptions::default()).unwrap();
//! assert_eq!(las.name(), "las");
//! assert!(policies().any(|(_, p)| p.name == "fifo+tune"));
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

use std::sync::Arc;

use tessera_perf::{Profiler, ThroughputModel};
use tessera_sched::{Policy, PolicyError, PolicyInfo, PolicyOptions};

pub mod baselines;
pub mod capabilities;
pub mod crius;
pub mod dilu;
#[cfg(feature = "experiments")]
pub mod experiment;
pub mod gavel;
pub mod hap;
pub mod miso;
pub mod synergy;

/// Every mechanism, in the order listings show them. One line per mechanism.
pub static MECHANISMS: &[&dyn Mechanism] = &[
    &baselines::Baselines,
    &synergy::Synergy,
    &hap::Hap,
    &miso::Miso,
    &dilu::Dilu,
    &crius::Crius,
    &gavel::Gavel,
];

/// A truth model (and the profiler that goes with it) that `--perf NAME` selects.
#[derive(Clone, Copy, Debug)]
pub struct TruthInfo {
    /// Name on the command line.
    pub name: &'static str,
    /// One line for listings.
    pub about: &'static str,
}

/// A truth model ready to run, with the profiler whose estimates the policies see.
#[derive(Clone)]
pub struct Truth {
    /// Registry name.
    pub name: &'static str,
    /// How fast jobs really run.
    pub model: Arc<dyn ThroughputModel>,
    /// What drivers learn about arriving jobs (and at what cost); `None` = nothing.
    pub profiler: Option<Arc<dyn Profiler>>,
}

impl std::fmt::Debug for Truth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Truth")
            .field("name", &self.name)
            .field("profiler", &self.profiler)
            .finish_non_exhaustive()
    }
}

/// Knobs of a truth model's profiler.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TruthOptions {
    /// Seconds a profiling phase takes (`None` = the mechanism's default).
    pub profile_cost: Option<tessera_model::SimDuration>,
    /// Relative measurement error of profiling (0 = exact).
    pub profile_error: f64,
    /// The engine semantics the truth will run under (`exact`, or a registered engine's
    /// name): a paper's own simulator may model truth differently (e.g. scalar speed-ups).
    pub engine: &'static str,
}

impl Default for TruthOptions {
    fn default() -> Self {
        TruthOptions {
            profile_cost: None,
            profile_error: 0.0,
            engine: EXACT_ENGINE,
        }
    }
}

/// Name of Tessera's own (exact) engine semantics.
pub const EXACT_ENGINE: &str = "exact";

/// A cluster a mechanism ships (`--cluster builtin:NAME`).
#[derive(Clone, Copy, Debug)]
pub struct BuiltinCluster {
    /// Name after `builtin:`.
    pub name: &'static str,
    /// One line for listings.
    pub about: &'static str,
    /// Its `kind: Cluster` YAML.
    pub yaml: fn() -> String,
}

/// A workload a mechanism ships (`--trace builtin:NAME`), generated on demand.
#[derive(Clone, Copy, Debug)]
pub struct BuiltinWorkload {
    /// Name after `builtin:`.
    pub name: &'static str,
    /// One line for listings.
    pub about: &'static str,
    /// Generates it (`seed` is ignored by fixed workloads).
    pub generate: fn(seed: u64) -> Result<tessera_model::Workload, String>,
}

/// Knobs of a workload generator (`tessera trace generate --generator NAME`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GeneratorOptions {
    /// Jobs to generate.
    pub jobs: usize,
    /// Arrival rate, jobs per hour.
    pub load: f64,
    /// Seed; `None` = the generator's own default.
    pub seed: Option<u64>,
    /// A generator-specific variant (e.g. a trace kind); `None` = its default.
    pub variant: Option<String>,
    /// GPUs of every job, for generators that take it.
    pub gpus: Option<u32>,
}

/// A workload generator a mechanism ships.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadGenerator {
    /// `--generator NAME`.
    pub name: &'static str,
    /// One line for listings, naming its variants.
    pub about: &'static str,
    /// Generates a workload; the error says which option is wrong.
    pub generate: fn(&GeneratorOptions) -> Result<tessera_model::Workload, String>,
}

/// A sweep spec a mechanism ships (`tessera sweep run builtin:NAME`).
#[derive(Clone, Copy, Debug)]
pub struct BuiltinSweep {
    /// Name after `builtin:`.
    pub name: &'static str,
    /// One line for listings.
    pub about: &'static str,
    /// The `kind: Sweep` YAML.
    pub yaml: &'static str,
}

/// One mechanism: its policies, truth, built-ins, engines and experiments.
pub trait Mechanism: Sync {
    /// Short name (`synergy`).
    fn name(&self) -> &'static str;
    /// One line: what it is, with its paper.
    fn about(&self) -> &'static str;
    /// The policies it builds, for listings and `--help`.
    fn policies(&self) -> &'static [PolicyInfo];
    /// Builds one of its policies by name (case-insensitive); `None` when the name is not
    /// one of its own. Aliases (e.g. `synergy` = `fifo+tune`) are accepted here.
    fn build_policy(&self, name: &str, options: &PolicyOptions) -> Option<Box<dyn Policy>>;
    /// Truth models it provides (`--perf NAME`).
    fn truths(&self) -> &'static [TruthInfo] {
        &[]
    }
    /// Builds one of its truth models by name.
    fn build_truth(&self, _name: &str, _options: &TruthOptions) -> Option<Truth> {
        None
    }
    /// The truth its policies need when the user asks for `--perf auto`; `None` = the
    /// trace's throughput is fine.
    fn preferred_truth(&self) -> Option<&'static str> {
        None
    }
    /// Built-in clusters.
    fn clusters(&self) -> &'static [BuiltinCluster] {
        &[]
    }
    /// Built-in workloads.
    fn workloads(&self) -> &'static [BuiltinWorkload] {
        &[]
    }
    /// Workload generators.
    fn generators(&self) -> &'static [WorkloadGenerator] {
        &[]
    }
    /// Built-in sweep specs (the heavy parts of its reproductions).
    fn sweeps(&self) -> &'static [BuiltinSweep] {
        &[]
    }
    /// Alternative engine semantics (`--semantics NAME`), e.g. a paper's own simulator's.
    #[cfg(feature = "experiments")]
    fn engines(&self) -> &'static [experiment::EngineInfo] {
        &[]
    }
    /// Experiments: `tessera repro NAME`.
    #[cfg(feature = "experiments")]
    fn experiments(&self) -> &'static [&'static dyn experiment::Experiment] {
        &[]
    }
    /// Benchmarks: `tessera bench NAME`.
    #[cfg(feature = "experiments")]
    fn benches(&self) -> &'static [&'static dyn experiment::Experiment] {
        &[]
    }
    /// Workload formats it replays with its own engine (`tessera simulate --trace-format`).
    #[cfg(feature = "experiments")]
    fn replay_formats(&self) -> &'static [experiment::ReplayFormat] {
        &[]
    }
    /// What the simulator needs to run its policy `policy` (serving truth, share controller,
    /// training truth), so that every driver (`simulate`, `repro`, sweeps) runs it alike;
    /// `None` when the name is not one of its policies or it needs nothing beyond the run's
    /// settings; `Some(Err)` when its setup cannot be built (e.g. a bad shipped table).
    #[cfg(feature = "experiments")]
    fn serving_setup(&self, _policy: &str) -> Option<Result<ServingSetup, String>> {
        None
    }
}

/// What a mechanism plugs into the simulator for one of its policies
/// ([`Mechanism::serving_setup`]).
#[cfg(feature = "experiments")]
#[derive(Clone)]
pub struct ServingSetup {
    /// One line saying what it sets, for reports.
    pub about: &'static str,
    /// Batch latency truth of the services.
    pub model: Arc<dyn tessera_sim::ServingModel>,
    /// Vertical scaling of quota-shared GPUs; `None` = static shares.
    pub controller: Option<Arc<dyn tessera_sim::serving::ShareController>>,
    /// Training truth under the policy's placements (e.g. neighbour-aware quotas); a driver
    /// uses it unless the user named a truth model; `None` = the run's.
    pub truth: Option<Arc<dyn ThroughputModel>>,
    /// Window of the recent load figures the policy reads; `None` = the simulator's.
    pub window: Option<tessera_model::SimDuration>,
    /// The run measures the services' lifetime: it stops when the last service ends
    /// (training still running then is reported unfinished). Ignored without services.
    pub until_services_end: bool,
}

#[cfg(feature = "experiments")]
impl std::fmt::Debug for ServingSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingSetup")
            .field("about", &self.about)
            .field("model", &self.model)
            .field("controller", &self.controller)
            .field("truth", &self.truth.is_some())
            .field("window", &self.window)
            .field("until_services_end", &self.until_services_end)
            .finish()
    }
}

#[cfg(feature = "experiments")]
impl ServingSetup {
    /// Sets a run's serving settings (arrivals seeded by `seed`) and, for a workload with
    /// services and `until_services_end`, its time limit (the earlier of the given one and
    /// the last service's end). The truth is the caller's to pick ([`ServingSetup::truth`]).
    pub fn apply(
        &self,
        config: &mut tessera_sim::SimConfig,
        workload: &tessera_model::Workload,
        seed: u64,
    ) {
        config.serving.model = Arc::clone(&self.model);
        config.serving.controller = self.controller.clone();
        config.serving.seed = seed;
        if let Some(w) = self.window {
            config.serving.window = w;
        }
        let end = workload.services().iter().map(|s| s.end).max();
        if let (true, Some(end)) = (self.until_services_end, end) {
            config.time_limit = Some(config.time_limit.map_or(end, |t| t.min(end)));
        }
    }
}

/// The setup the mechanism owning `policy` gives it ([`Mechanism::serving_setup`]); `None`
/// for a policy without one (or an unknown name).
#[cfg(feature = "experiments")]
pub fn serving_setup(policy: &str) -> Option<Result<ServingSetup, String>> {
    MECHANISMS.iter().find_map(|m| m.serving_setup(policy))
}

/// A job's new id under a renumbering map (see [`Policy::renumber_jobs`]); `None` for a
/// finished job (or an id the map does not cover).
pub(crate) fn renumbered(
    map: &[Option<tessera_model::JobId>],
    job: tessera_model::JobId,
) -> Option<tessera_model::JobId> {
    map.get(job.index()).copied().flatten()
}

/// A map keyed by job id, renumbered: finished jobs' entries are dropped (the order of the
/// keys is kept, as ids keep their order).
pub(crate) fn renumber_map<V>(
    m: std::collections::BTreeMap<tessera_model::JobId, V>,
    map: &[Option<tessera_model::JobId>],
) -> std::collections::BTreeMap<tessera_model::JobId, V> {
    m.into_iter()
        .filter_map(|(j, v)| Some((renumbered(map, j)?, v)))
        .collect()
}

/// A vector indexed by job id, renumbered: each entry moves to its job's new id, finished
/// jobs' entries are dropped, and gaps (none while ids stay dense) take `fill`.
pub(crate) fn renumber_vec<T: Clone>(
    v: Vec<T>,
    map: &[Option<tessera_model::JobId>],
    fill: T,
) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for (old, x) in v.into_iter().enumerate() {
        let Some(new) = map.get(old).copied().flatten() else {
            continue;
        };
        if out.len() <= new.index() {
            out.resize(new.index() + 1, fill.clone());
        }
        out[new.index()] = x;
    }
    out
}

/// Every policy of every mechanism, with the mechanism that owns it.
pub fn policies() -> impl Iterator<Item = (&'static dyn Mechanism, &'static PolicyInfo)> {
    MECHANISMS
        .iter()
        .flat_map(|m| m.policies().iter().map(move |p| (*m, p)))
}

/// The mechanism that builds `name`, if any.
pub fn mechanism_of_policy(name: &str) -> Option<&'static dyn Mechanism> {
    let probe = PolicyOptions::default();
    MECHANISMS
        .iter()
        .copied()
        .find(|m| m.build_policy(name, &probe).is_some())
}

/// Builds any registered policy by name (case-insensitive).
pub fn build_policy(name: &str, options: &PolicyOptions) -> Result<Box<dyn Policy>, PolicyError> {
    MECHANISMS
        .iter()
        .find_map(|m| m.build_policy(name, options))
        .ok_or_else(|| {
            let known: Vec<&str> = policies().map(|(_, p)| p.name).collect();
            PolicyError::Unknown {
                name: name.to_string(),
                hint: did_you_mean(name, known.iter().copied())
                    .map(|k| format!("; did you mean {k:?}?"))
                    .unwrap_or_default(),
                known: known.join(", "),
            }
        })
}

/// Every truth model of every mechanism.
pub fn truths() -> impl Iterator<Item = (&'static dyn Mechanism, &'static TruthInfo)> {
    MECHANISMS
        .iter()
        .flat_map(|m| m.truths().iter().map(move |t| (*m, t)))
}

/// Builds a registered truth model by name; `None` for an unknown name.
pub fn build_truth(name: &str, options: &TruthOptions) -> Option<Truth> {
    MECHANISMS.iter().find_map(|m| m.build_truth(name, options))
}

/// Every built-in cluster of every mechanism.
pub fn clusters() -> impl Iterator<Item = (&'static dyn Mechanism, &'static BuiltinCluster)> {
    MECHANISMS
        .iter()
        .flat_map(|m| m.clusters().iter().map(move |c| (*m, c)))
}

/// Every built-in workload of every mechanism.
pub fn workloads() -> impl Iterator<Item = &'static BuiltinWorkload> {
    MECHANISMS.iter().flat_map(|m| m.workloads().iter())
}

/// Every workload generator of every mechanism.
pub fn generators() -> impl Iterator<Item = &'static WorkloadGenerator> {
    MECHANISMS.iter().flat_map(|m| m.generators().iter())
}

/// Every built-in sweep spec of every mechanism.
pub fn sweeps() -> impl Iterator<Item = &'static BuiltinSweep> {
    MECHANISMS.iter().flat_map(|m| m.sweeps().iter())
}

/// The known name closest to `name` (edit distance at most a third of its length rounded up,
/// and at most 3), for "did you mean" hints.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    let limit = name.chars().count().div_ceil(3).clamp(1, 3);
    known
        .into_iter()
        .map(|k| (edit_distance(&name, &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over chars (names are short; O(n·m) is fine).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_policy_builds_under_its_own_name() {
        let mut seen: Vec<&str> = Vec::new();
        for (m, p) in policies() {
            let built = m
                .build_policy(p.name, &PolicyOptions::default())
                .unwrap_or_else(|| panic!("{} lists {} but cannot build it", m.name(), p.name));
            assert_eq!(built.name(), p.name);
            assert!(!seen.contains(&p.name), "{} listed twice", p.name);
            seen.push(p.name);
            // Exactly one mechanism claims each name.
            assert_eq!(
                MECHANISMS
                    .iter()
                    .filter(|m| m.build_policy(p.name, &PolicyOptions::default()).is_some())
                    .count(),
                1,
                "{}",
                p.name
            );
        }
        // The four baselines and Synergy's sixteen ORDER+MECH names.
        assert!(seen.len() >= 20, "{seen:?}");
    }

    #[test]
    fn unknown_policy_names_the_closest() {
        let err = build_policy("fifo+tun", &PolicyOptions::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("did you mean \"fifo+tune\""), "{err}");
        let err = build_policy("lottery", &PolicyOptions::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("lottery") && err.contains("fifo") && !err.contains("did you mean"),
            "{err}"
        );
        assert_eq!(
            build_policy("LAS", &PolicyOptions::default()).map(|p| p.name().to_string()),
            Ok("las".to_string())
        );
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("las", "las"), 0);
        assert_eq!(edit_distance("lsa", "las"), 2);
        assert_eq!(edit_distance("fifo", "fif"), 1);
        assert_eq!(did_you_mean("srft", ["srtf", "fifo"]), Some("srtf"));
        assert_eq!(did_you_mean("zzzzzz", ["srtf", "fifo"]), None);
    }
}
