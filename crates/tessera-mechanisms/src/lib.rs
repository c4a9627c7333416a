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
pub mod tessera;

/// Every mechanism, in the order listings show them. One line per mechanism.
pub static MECHANISMS: &[&dyn Mechanism] = &[
    &baselines::Baselines,
    &synergy::Synergy,
    &hap::Hap,
    &miso::Miso,
    &dilu::Dilu,
    &crius::Crius,
    &gavel::Gavel,
    &tessera::Tessera,
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
    /// The variants it takes (`--trace`), its default first; empty when it takes none (a
    /// `--trace` given to it is then refused, not ignored).
    pub variants: &'static [&'static str],
    /// Generates a workload; the error says which option is wrong. Call it through
    /// [`WorkloadGenerator::run`], which checks the options' bounds first.
    pub generate: fn(&GeneratorOptions) -> Result<tessera_model::Workload, String>,
}

/// Most jobs a registered generator may build. They are built in memory before anything is
/// written (some 250 bytes each, so about 2.5 GB at the limit); `--generator philly` streams
/// and goes further. Raise it here if you have the memory.
pub const MAX_GENERATOR_JOBS: usize = 10_000_000;

/// Checks what every generator needs before it allocates or draws anything: at most
/// [`MAX_GENERATOR_JOBS`] jobs, and (for a positive rate) arrivals expected well within the
/// clock's input range (half of it, so that random gaps stay inside).
pub fn check_generator_options(o: &GeneratorOptions) -> Result<(), String> {
    if o.jobs > MAX_GENERATOR_JOBS {
        return Err(format!(
            "--jobs {} is more than the limit of {MAX_GENERATOR_JOBS} jobs for a generator that \
             builds its workload in memory (tessera_mechanisms::MAX_GENERATOR_JOBS; \
             --generator philly streams larger traces)",
            o.jobs
        ));
    }
    if o.load.is_nan() || o.load.is_infinite() {
        return Err(format!(
            "--load must be a finite number of jobs per hour, got {}",
            o.load
        ));
    }
    if o.load > 0.0 {
        let span_s = o.jobs as f64 * 3600.0 / o.load;
        let max = tessera_model::MAX_INPUT_SECS as f64 / 2.0;
        if span_s > max {
            return Err(format!(
                "{} jobs at {} jobs/h arrive over about {span_s:e} s, past the limit of {max} s \
                 (half the clock's input range): raise --load or lower --jobs",
                o.jobs, o.load
            ));
        }
    }
    Ok(())
}

impl WorkloadGenerator {
    /// Checks the options' bounds ([`check_generator_options`]), then generates.
    pub fn run(&self, o: &GeneratorOptions) -> Result<tessera_model::Workload, String> {
        check_generator_options(o)?;
        (self.generate)(o)
    }
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
    /// Its own truth (the one `--perf auto` picks for its built-in workloads and for inputs
    /// it [covers](Self::covers)); `None` = the trace's throughput.
    fn preferred_truth(&self) -> Option<&'static str> {
        None
    }
    /// Whether its preferred truth models these inputs: every job's model is in its tables
    /// and the cluster's GPUs are ones its tables describe. `--perf auto` picks a truth from
    /// the inputs only (never from the policies asked for): the one mechanism that covers
    /// them, else the trace's throughput. Default: never.
    fn covers(
        &self,
        _cluster: &tessera_model::Cluster,
        _workload: &tessera_model::Workload,
    ) -> bool {
        false
    }
    /// Its tables' name for a model of the catalogue (canonical name, see
    /// [`tessera_model::models`]); `None` when its tables lack it (its documented fallback
    /// applies). Listed in docs/models.md.
    fn model_key(&self, _canonical: &str) -> Option<String> {
        None
    }
    /// The profiler its policy `policy` needs (what the policy reads from a job's
    /// knowledge), attached by drivers to that policy's run whatever the truth; `None` when
    /// the policy reads no knowledge (or is not one of its own).
    fn policy_profiler(&self, _policy: &str, _options: &TruthOptions) -> Option<Arc<dyn Profiler>> {
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
    /// (A setup never ends a run: a run ends when its workload is done, or at a horizon its
    /// driver sets, e.g. an experiment measuring the services' lifetime.)
    pub window: Option<tessera_model::SimDuration>,
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
            .finish()
    }
}

#[cfg(feature = "experiments")]
impl ServingSetup {
    /// Sets a run's serving settings (arrivals seeded by `seed`); the time limit stays the
    /// driver's. The truth is the caller's to pick ([`ServingSetup::truth`]).
    pub fn apply(
        &self,
        config: &mut tessera_sim::SimConfig,
        _workload: &tessera_model::Workload,
        seed: u64,
    ) {
        config.serving.model = Arc::clone(&self.model);
        config.serving.controller = self.controller.clone();
        config.serving.seed = seed;
        if let Some(w) = self.window {
            config.serving.window = w;
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

/// Builds a registered truth model by name; `None` for an unknown name. Where its tables
/// give an allocation no speed (a MIG instance or a quota for tables of whole GPUs, a GPU
/// they find too small for the model), the rate falls back as
/// [`tessera_perf::FallbackRates`] documents, so that any policy runs under any truth.
pub fn build_truth(name: &str, options: &TruthOptions) -> Option<Truth> {
    MECHANISMS
        .iter()
        .find_map(|m| m.build_truth(name, options))
        .map(|mut t| {
            t.model = Arc::new(tessera_perf::FallbackRates(t.model));
            t
        })
}

/// The mechanism whose truth is named `truth`, if any.
pub fn mechanism_of_truth(truth: &str) -> Option<&'static dyn Mechanism> {
    truths()
        .find(|(_, t)| t.name.eq_ignore_ascii_case(truth))
        .map(|(m, _)| m)
}

/// The profiler a run of `policy` uses under `truth`: the truth's own (every policy's jobs
/// go through it, as they always have), plus the profiler the policy's mechanism declares
/// for it ([`Mechanism::policy_profiler`]) when the truth is another mechanism's, or its own
/// but without a profiler (the composed truth profiles nothing itself), so that a policy
/// that reads knowledge gets it under any truth.
pub fn run_profiler(
    policy: &str,
    truth: &Truth,
    options: &TruthOptions,
) -> Option<Arc<dyn Profiler>> {
    let own = mechanism_of_policy(policy).and_then(|m| {
        let same = mechanism_of_truth(truth.name).is_some_and(|t| t.name() == m.name());
        (!same || truth.profiler.is_none())
            .then(|| m.policy_profiler(policy, options))
            .flatten()
    });
    match (truth.profiler.clone(), own) {
        (None, own) => own,
        (Some(t), None) => Some(t),
        (Some(t), Some(o)) => Some(Arc::new(tessera_perf::Profilers::new(vec![t, o]))),
    }
}

/// The truth `--perf auto` picks for a run's inputs, and why (for the report's header).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoTruth {
    /// A registered truth's name; `None` = the trace's throughput.
    pub truth: Option<&'static str>,
    /// Why, in a few words (`builtin:crius-1900 is crius's workload`).
    pub why: String,
}

/// The truth `--perf auto` picks when no paper's setup is asked for: Tessera's composed truth
/// ([`tessera::truth`], docs/truth.md), which reads every mechanism's tables at once and is
/// exactly the trace's rate on each job's requested allocation.
pub const DEFAULT_TRUTH: &str = tessera::truth::NAME;

/// The truth for `--perf auto`, chosen from the inputs only, never from the policies asked
/// for (so that each policy's figures do not depend on its company):
///
/// 1. a mechanism's built-in workload (`trace_source` = `builtin:NAME`) runs under that
///    mechanism's truth (a paper's setup keeps its paper's truth);
/// 2. inputs that exactly one mechanism [covers](Mechanism::covers) (every job's model in its
///    own tables, the cluster's GPUs ones its tables describe) run under its truth;
/// 3. a built-in workload of a mechanism without a truth of its own (the baselines') keeps
///    the trace's throughput, as its benchmarks always ran;
/// 4. everything else (models of several papers, of none, no models at all, several papers
///    covering the inputs) runs under [`DEFAULT_TRUTH`], the composed truth.
pub fn auto_truth(
    trace_source: &str,
    cluster: &tessera_model::Cluster,
    workload: &tessera_model::Workload,
) -> AutoTruth {
    let mut builtin_of: Option<&dyn Mechanism> = None;
    if let Some(name) = trace_source.strip_prefix("builtin:") {
        builtin_of = MECHANISMS
            .iter()
            .copied()
            .find(|m| m.workloads().iter().any(|w| w.name == name));
        if let Some(m) = builtin_of {
            if let Some(t) = m.preferred_truth() {
                return AutoTruth {
                    truth: Some(t),
                    why: format!("{trace_source} is {}'s workload", m.name()),
                };
            }
        }
    }
    let covering: Vec<&dyn Mechanism> = MECHANISMS
        .iter()
        .copied()
        .filter(|m| m.preferred_truth().is_some() && m.covers(cluster, workload))
        .collect();
    if let [m] = covering.as_slice() {
        return AutoTruth {
            truth: m.preferred_truth(),
            why: format!(
                "every job's model is in {}'s tables, for this cluster's GPUs",
                m.name()
            ),
        };
    }
    if let Some(m) = builtin_of {
        return AutoTruth {
            truth: None,
            why: format!(
                "{trace_source} is {}'s workload, run at the trace's throughput",
                m.name()
            ),
        };
    }
    let why = match covering.as_slice() {
        [] if workload.jobs().iter().all(|j| j.model.is_empty()) => {
            "the jobs name no models".to_string()
        }
        [] => "no single paper's tables cover every job's model on this cluster's GPUs".into(),
        many => format!(
            "the inputs fit the tables of several mechanisms ({})",
            many.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
        ),
    };
    AutoTruth {
        truth: Some(DEFAULT_TRUTH),
        why: format!("{why}: the composed truth"),
    }
}

/// The model catalogue as a Markdown table: each model, its aliases, family, class and
/// parameters, and its key in each mechanism's tables (docs/models.md holds it, checked by a
/// test).
pub fn models_markdown() -> String {
    let catalog = tessera_model::models::ModelCatalog::builtin();
    let mechs: Vec<&dyn Mechanism> = MECHANISMS
        .iter()
        .copied()
        .filter(|m| {
            catalog
                .models()
                .iter()
                .any(|e| m.model_key(&e.name).is_some())
        })
        .collect();
    let mut out = String::from("| model | aliases | family | class | parameters |");
    for m in &mechs {
        out.push_str(&format!(" {} |", m.name()));
    }
    out.push_str("\n|---|---|---|---|---|");
    for _ in &mechs {
        out.push_str("---|");
    }
    out.push('\n');
    for e in catalog.models() {
        let params = match e.params {
            Some(p) if p >= 1e9 => format!("{}B", p / 1e9),
            Some(p) => format!("{}M", p / 1e6),
            None => "—".into(),
        };
        let aliases = if e.aliases.is_empty() {
            "—".to_string()
        } else {
            e.aliases
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "| `{}` | {aliases} | {} | {} | {params} |",
            e.name, e.family, e.class
        ));
        for m in &mechs {
            match m.model_key(&e.name) {
                Some(k) => out.push_str(&format!(" `{k}` |")),
                None => out.push_str(" — |"),
            }
        }
        out.push('\n');
    }
    out
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

    /// `--perf auto`: a paper's built-in workload keeps its paper's truth, a built-in of a
    /// mechanism without one keeps the trace's, inputs one paper covers keep its truth, and
    /// everything else gets the composed truth, which is registered.
    #[test]
    fn auto_truth_keeps_paper_setups_and_composes_the_rest() {
        assert!(build_truth(DEFAULT_TRUTH, &TruthOptions::default()).is_some());
        let v100 = tessera_model::Cluster::homogeneous(
            "V100-32GB",
            1,
            8,
            tessera_model::MilliCpu::from_cores(24),
            tessera_model::Bytes::from_gib(500),
        )
        .unwrap();
        let empty = tessera_model::Workload::new(Vec::new());
        for m in MECHANISMS {
            for w in m.workloads() {
                let got = auto_truth(&format!("builtin:{}", w.name), &v100, &empty);
                assert_eq!(got.truth, m.preferred_truth(), "{}: {}", w.name, got.why);
            }
        }
        let workload = |models: &[&str]| {
            tessera_model::Workload::new(
                models
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let mut j = tessera_model::TrainingJob::simple(
                            i as u32,
                            tessera_model::SimTime::ZERO,
                            1,
                            tessera_model::SimDuration::from_secs(60),
                        );
                        j.model = m.to_string();
                        j
                    })
                    .collect(),
            )
        };
        // Synergy's own names on V100s: Synergy's.
        let own = auto_truth("jobs.csv", &v100, &workload(&["alexnet", "res50"]));
        assert_eq!(own.truth, Some("synergy"), "{}", own.why);
        // Crius's large models alone: Crius's.
        let large = auto_truth("jobs.csv", &v100, &workload(&["bert-1.3b"]));
        assert_eq!(large.truth, Some("crius"), "{}", large.why);
        // Several papers' models, none, or no names at all: the composed truth.
        for models in [
            &["alexnet", "bert-1.3b"][..],
            &["vgg19"],
            &[""],
            &["resnet50"],
        ] {
            let got = auto_truth("jobs.csv", &v100, &workload(models));
            assert_eq!(got.truth, Some(DEFAULT_TRUTH), "{models:?}: {}", got.why);
        }
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("las", "las"), 0);
        assert_eq!(edit_distance("lsa", "las"), 2);
        assert_eq!(edit_distance("fifo", "fif"), 1);
        assert_eq!(did_you_mean("srft", ["srtf", "fifo"]), Some("srtf"));
        assert_eq!(did_you_mean("zzzzzz", ["srtf", "fifo"]), None);
    }

    /// Issue 36: `--jobs 18446744073709551615` overflowed a capacity, 100,000,001 asked for
    /// 21.6 GB: every registered generator refuses past the limit before allocating.
    #[test]
    fn every_generator_checks_its_bounds_first() {
        for g in generators() {
            for jobs in [usize::MAX, MAX_GENERATOR_JOBS + 1] {
                let o = GeneratorOptions {
                    jobs,
                    load: 10.0,
                    ..GeneratorOptions::default()
                };
                let e = (g.generate)(&o).unwrap_err();
                assert!(e.contains("MAX_GENERATOR_JOBS"), "{}: {e}", g.name);
                assert_eq!(g.run(&o).unwrap_err(), e);
            }
            for load in [f64::NAN, f64::INFINITY] {
                let o = GeneratorOptions {
                    jobs: 10,
                    load,
                    ..GeneratorOptions::default()
                };
                assert!((g.generate)(&o).is_err(), "{}: load {load}", g.name);
            }
            let o = GeneratorOptions {
                jobs: 100,
                load: 1e-300,
                ..GeneratorOptions::default()
            };
            assert!(
                g.run(&o).unwrap_err().contains("past the limit"),
                "{}",
                g.name
            );
        }
    }
}
