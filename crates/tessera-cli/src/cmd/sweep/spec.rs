//! The sweep spec (`apiVersion: tessera/v1`, `kind: Sweep`), its expansion into runs, and the
//! runs' stable ids.
//!
//! A run is a set of parameters: the spec's fixed options plus one value of every axis. Its id
//! is a hash of those parameters alone, so adding a value to an axis adds runs and leaves the
//! ids (and the result directories) of the existing runs as they were.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What each run executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    /// `tessera simulate` with the run's parameters as its options.
    #[default]
    Simulate,
    /// `tessera repro EXPERIMENT` (any experiment of the mechanism registry) with the run's
    /// parameters; `experiment` names it.
    Repro,
}

impl fmt::Display for RunKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunKind::Simulate => "simulate",
            RunKind::Repro => "repro",
        })
    }
}

/// Options the sweep sets itself; a spec may not.
const RESERVED: &[&str] = &["out", "json", "jobs", "threads", "help"];

/// Most runs one sweep spec may expand to (the product of its axes' lengths). The plan is
/// built in memory and every run gets a directory, so the limit is checked before anything is
/// expanded; split a larger sweep into several specs, or raise this constant.
pub const MAX_SWEEP_RUNS: usize = 100_000;

/// One swept parameter and its values, in the spec's order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Axis {
    pub name: String,
    pub values: Vec<Value>,
}

/// What `collect` draws.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Outputs {
    /// Files each run keeps besides summary.json: `jobs` (jobs.csv, needed for JCT CDFs) and
    /// `timeseries` (timeseries.csv). Default: jobs.
    pub files: Option<Vec<String>>,
    /// The axis on the x axis of metric plots (default: the first axis other than policy and
    /// seed).
    pub x: Option<String>,
    /// Metrics to plot against `x` (default: avg_jct_s, p99_jct_s, makespan_s).
    pub metrics: Option<Vec<String>>,
    /// The point at which JCT CDFs are drawn: axis name → value (default: the last value of
    /// `x` and the first of every other axis).
    pub cdf_at: Option<BTreeMap<String, Value>>,
}

impl Outputs {
    pub fn keeps(&self, file: &str) -> bool {
        match &self.files {
            Some(files) => files.iter().any(|f| f == file),
            None => file == "jobs",
        }
    }
}

/// A parsed, validated-in-shape spec.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    pub name: String,
    pub run: RunKind,
    /// Options every run gets, in the spec's order.
    pub fixed: Vec<(String, Value)>,
    pub axes: Vec<Axis>,
    pub outputs: Outputs,
}

/// One run of the expanded plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PlannedRun {
    /// Position in the plan (the Slurm array index when one run per task).
    pub index: usize,
    /// Stable id: hash of `kind` and `params`.
    pub id: String,
    /// Axis values of this run only, in axis order.
    pub point: Vec<(String, Value)>,
    /// Every parameter (fixed and axis), sorted by name.
    pub params: BTreeMap<String, Value>,
}

/// The expanded plan, as `plan.json` in the sweep directory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Plan {
    pub spec: Spec,
    pub runs: Vec<PlannedRun>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSpec {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: RawMetadata,
    spec: RawBody,
}

#[derive(Deserialize, Default)]
struct RawMetadata {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBody {
    #[serde(default)]
    run: RunKind,
    #[serde(default)]
    fixed: serde_norway::Mapping,
    #[serde(default)]
    axes: serde_norway::Mapping,
    #[serde(default)]
    outputs: Outputs,
}

/// An option name as on the command line: lower case, `-` between words.
pub fn option_name(key: &str) -> String {
    key.trim().trim_start_matches("--").replace('_', "-")
}

fn to_json(key: &str, v: &serde_norway::Value) -> Result<Value> {
    let json: Value = serde_json::to_value(v).with_context(|| format!("option {key}"))?;
    match &json {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => Ok(json),
        Value::Array(items) if items.iter().all(|i| i.is_string() || i.is_number()) => Ok(json),
        _ => bail!("option {key}: expected a string, number, boolean or list of strings"),
    }
}

impl Spec {
    /// Parses a spec's YAML; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Spec> {
        let raw: RawSpec =
            serde_norway::from_str(text).with_context(|| format!("parsing sweep spec {origin}"))?;
        if raw.api_version != "tessera/v1" {
            bail!(
                "{origin}: apiVersion must be tessera/v1, got {:?}",
                raw.api_version
            );
        }
        if raw.kind != "Sweep" {
            bail!("{origin}: kind must be Sweep, got {:?}", raw.kind);
        }
        let key_of = |k: &serde_norway::Value, what: &str| -> Result<String> {
            k.as_str()
                .map(option_name)
                .with_context(|| format!("{origin}: spec.{what}: keys must be option names"))
        };
        let mut fixed = Vec::new();
        for (k, v) in &raw.spec.fixed {
            let name = key_of(k, "fixed")?;
            let value = to_json(&name, v).with_context(|| format!("{origin}: spec.fixed"))?;
            fixed.push((name, value));
        }
        let mut axes = Vec::new();
        for (k, v) in &raw.spec.axes {
            let name = key_of(k, "axes")?;
            let serde_norway::Value::Sequence(items) = v else {
                bail!("{origin}: spec.axes.{name}: expected a list of values");
            };
            if items.is_empty() {
                bail!("{origin}: spec.axes.{name}: an axis needs at least one value");
            }
            if items.len() > MAX_SWEEP_RUNS {
                bail!(
                    "{origin}: spec.axes.{name}: {} values, more than the limit of \
                     {MAX_SWEEP_RUNS} runs per sweep (split the sweep into several specs)",
                    items.len()
                );
            }
            let values = items
                .iter()
                .map(|i| to_json(&name, i))
                .collect::<Result<Vec<_>>>()
                .with_context(|| format!("{origin}: spec.axes"))?;
            // By their canonical JSON text: linear, where comparing every pair was quadratic.
            let mut seen_values = std::collections::HashSet::with_capacity(values.len());
            for a in &values {
                if !seen_values.insert(a.to_string()) {
                    bail!("{origin}: spec.axes.{name}: value {a} appears twice");
                }
            }
            axes.push(Axis { name, values });
        }
        let runs = axes
            .iter()
            .try_fold(1usize, |n, a| n.checked_mul(a.values.len()))
            .filter(|n| *n <= MAX_SWEEP_RUNS);
        if runs.is_none() {
            let sizes: Vec<String> = axes
                .iter()
                .map(|a| format!("{} {}", a.values.len(), a.name))
                .collect();
            bail!(
                "{origin}: spec.axes: {} expand to more than the limit of {MAX_SWEEP_RUNS} runs \
                 per sweep (split the sweep into several specs)",
                sizes.join(" x ")
            );
        }
        let mut seen: Vec<&str> = Vec::new();
        for name in fixed
            .iter()
            .map(|(k, _)| k)
            .chain(axes.iter().map(|a| &a.name))
        {
            if raw.spec.run == RunKind::Simulate && RESERVED.contains(&name.as_str()) {
                bail!("{origin}: option {name} is set by the sweep itself and may not be given");
            }
            if seen.contains(&name.as_str()) {
                bail!("{origin}: option {name} is given twice (fixed and axis, or two axes)");
            }
            seen.push(name);
        }
        if seen.contains(&"load") && seen.contains(&"arrivals") {
            bail!("{origin}: give either load (jobs/h) or arrivals, not both");
        }
        let outputs = raw.spec.outputs;
        if let Some(x) = &outputs.x {
            if !axes.iter().any(|a| &a.name == x) {
                bail!("{origin}: spec.outputs.x: {x} is not an axis");
            }
        }
        Ok(Spec {
            name: raw.metadata.name.unwrap_or_else(|| "sweep".to_string()),
            run: raw.spec.run,
            fixed,
            axes,
            outputs,
        })
    }

    /// Runs in axis order (the first axis varies slowest).
    pub fn expand(&self) -> Vec<PlannedRun> {
        let total: usize = self.axes.iter().map(|a| a.values.len()).product();
        let mut runs = Vec::with_capacity(total);
        for index in 0..total {
            let mut rest = index;
            let mut point = Vec::with_capacity(self.axes.len());
            for axis in self.axes.iter().rev() {
                let n = axis.values.len();
                point.push((axis.name.clone(), axis.values[rest % n].clone()));
                rest /= n;
            }
            point.reverse();
            let mut params: BTreeMap<String, Value> = self.fixed.iter().cloned().collect();
            params.extend(point.iter().cloned());
            let id = run_id(self.run, &params);
            runs.push(PlannedRun {
                index,
                id,
                point,
                params,
            });
        }
        runs
    }
}

/// 16 hex digits of SHA-256 over the run kind and the canonical JSON of the parameters
/// (sorted keys): independent of axis order, of other runs and of the process.
pub fn run_id(kind: RunKind, params: &BTreeMap<String, Value>) -> String {
    let mut h = Sha256::new();
    h.update(kind.to_string().as_bytes());
    h.update([0]);
    // serde_json writes a BTreeMap's keys in order; this cannot fail for these values.
    h.update(serde_json::to_vec(params).unwrap_or_default());
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A value as it appears on a command line: strings bare, numbers as written.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// `tessera simulate` arguments for these parameters (an argument vector; nothing passes
/// through a shell). `load: R` is `--arrivals poisson:R`.
pub fn simulate_argv(params: &BTreeMap<String, Value>) -> Vec<String> {
    let mut argv = vec!["simulate".to_string()];
    for (key, value) in params {
        let (key, value) = if key == "load" {
            (
                "arrivals".to_string(),
                Value::String(format!("poisson:{}", value_text(value))),
            )
        } else {
            (key.clone(), value.clone())
        };
        match value {
            Value::Bool(true) => argv.push(format!("--{key}")),
            Value::Bool(false) | Value::Null => {}
            Value::Array(items) => {
                for item in items {
                    argv.push(format!("--{key}"));
                    argv.push(value_text(&item));
                }
            }
            other => {
                argv.push(format!("--{key}"));
                argv.push(value_text(&other));
            }
        }
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "apiVersion: tessera/v1
kind: Sweep
metadata: {name: t}
spec:
  fixed:
    cluster: builtin:default
    no_restart_cost: true
  axes:
    policy: [fifo, las]
    seed: [1, 2, 3]
";

    #[test]
    fn expands_the_cartesian_product_first_axis_slowest() {
        let spec = Spec::from_yaml(SPEC, "t.yaml").unwrap();
        let runs = spec.expand();
        assert_eq!(runs.len(), 6);
        let points: Vec<String> = runs
            .iter()
            .map(|r| {
                r.point
                    .iter()
                    .map(|(_, v)| value_text(v))
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        assert_eq!(
            points,
            ["fifo/1", "fifo/2", "fifo/3", "las/1", "las/2", "las/3"]
        );
        let ids: std::collections::BTreeSet<_> = runs.iter().map(|r| &r.id).collect();
        assert_eq!(ids.len(), 6, "ids are distinct");
        assert_eq!(
            simulate_argv(&runs[0].params),
            [
                "simulate",
                "--cluster",
                "builtin:default",
                "--no-restart-cost",
                "--policy",
                "fifo",
                "--seed",
                "1"
            ]
        );
    }

    #[test]
    fn adding_an_axis_value_keeps_existing_ids() {
        let before = Spec::from_yaml(SPEC, "t").unwrap().expand();
        let grown = SPEC.replace("[fifo, las]", "[fifo, srtf, las]");
        let after = Spec::from_yaml(&grown, "t").unwrap().expand();
        assert_eq!(after.len(), 9);
        for run in &before {
            let same = after.iter().find(|r| r.params == run.params).unwrap();
            assert_eq!(same.id, run.id);
        }
        // Axis order does not matter either.
        let swapped = "apiVersion: tessera/v1\nkind: Sweep\nspec:\n  fixed: {no-restart-cost: true, cluster: builtin:default}\n  axes:\n    seed: [3, 2, 1]\n    policy: [las, fifo]\n";
        let swapped = Spec::from_yaml(swapped, "t").unwrap().expand();
        for run in &before {
            assert!(swapped.iter().any(|r| r.id == run.id));
        }
    }

    #[test]
    fn a_run_id_is_pinned() {
        // Ids name directories on disk; a change here would orphan every existing result.
        let mut params = BTreeMap::new();
        params.insert("policy".to_string(), Value::String("fifo".into()));
        params.insert("seed".to_string(), Value::from(1));
        assert_eq!(run_id(RunKind::Simulate, &params), "6a48c59f9ce9f460");
    }

    #[test]
    fn bad_specs_are_refused_with_the_reason() {
        let cases = [
            (SPEC.replace("tessera/v1", "v2"), "apiVersion"),
            (
                SPEC.replace("kind: Sweep", "kind: Job"),
                "kind must be Sweep",
            ),
            (
                SPEC.replace("seed: [1, 2, 3]", "seed: []"),
                "at least one value",
            ),
            (
                SPEC.replace("seed: [1, 2, 3]", "seed: 4"),
                "expected a list",
            ),
            (
                SPEC.replace("seed: [1, 2, 3]", "seed: [1, 1]"),
                "appears twice",
            ),
            (
                SPEC.replace("seed: [1, 2, 3]", "out: [a]"),
                "set by the sweep",
            ),
            (
                SPEC.replace("seed: [1, 2, 3]", "cluster: [a]"),
                "given twice",
            ),
            (SPEC.replace("spec:", "spec:\n  bogus: 1"), "bogus"),
            ("not: [valid".to_string(), "parsing sweep spec"),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", Spec::from_yaml(&text, "t.yaml").unwrap_err());
            assert!(err.contains(want), "{want:?} not in {err:?}");
        }
    }

    /// Issue 36: three 1,000-value axes (10^9 runs) tried to allocate 80 GB in `expand`.
    #[test]
    fn a_sweep_past_the_run_limit_is_refused_before_expanding() {
        let axis = |name: &str| {
            let values: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
            format!("    {name}: [{}]\n", values.join(", "))
        };
        let text = format!(
            "apiVersion: tessera/v1\nkind: Sweep\nspec:\n  axes:\n{}{}{}",
            axis("seed"),
            axis("round"),
            axis("max-restarts")
        );
        let err = format!("{:#}", Spec::from_yaml(&text, "t.yaml").unwrap_err());
        assert!(
            err.contains("1000 seed x 1000 round x 1000 max-restarts")
                && err.contains(&format!("limit of {MAX_SWEEP_RUNS} runs")),
            "{err}"
        );
        // At the limit's scale, two axes still plan.
        let text = format!(
            "apiVersion: tessera/v1\nkind: Sweep\nspec:\n  axes:\n{}",
            axis("seed")
        );
        assert_eq!(
            Spec::from_yaml(&text, "t.yaml").unwrap().axes[0]
                .values
                .len(),
            1000
        );
    }
}
