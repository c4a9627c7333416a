//! Experiments (`tessera repro NAME`), benchmarks (`tessera bench NAME`) and alternative
//! engines, in a shape the CLI can drive without knowing any of them.
//!
//! An [`Experiment`] declares its parameters ([`Param`]: name, default, help), which the CLI
//! turns into `--flags`; it runs on a [`RunContext`] (threads, progress) and returns a
//! [`ReproOutput`]: the text to print, the `summary.json` document and the [`Figure`]s to
//! draw. Rendering (tables to the terminal, SVG/PNG) stays in the CLI.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera_model::{Cluster, Workload};
use tessera_perf::ThroughputModel;
use tessera_sched::{Policy, PolicyError};
use tessera_sim::{SimConfig, SimError, SimReport};
use thiserror::Error;

/// One parameter of an experiment: `--NAME VALUE`.
#[derive(Clone, Copy, Debug)]
pub struct Param {
    /// Flag name without dashes (`seed`, `parts`).
    pub name: &'static str,
    /// Default value as text; empty = not set by default.
    pub default: &'static str,
    /// Help text.
    pub help: &'static str,
}

/// Parameter values as the user gave them (defaults filled in by [`ExperimentArgs::new`]).
#[derive(Clone, Debug, Default)]
pub struct ExperimentArgs {
    values: BTreeMap<String, String>,
}

impl ExperimentArgs {
    /// Defaults of `params`, overridden by `given` (name, value) pairs. An unknown name is
    /// an error.
    pub fn new<'a>(
        params: &[Param],
        given: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<ExperimentArgs, ExperimentError> {
        let mut values: BTreeMap<String, String> = params
            .iter()
            .filter(|p| !p.default.is_empty())
            .map(|p| (p.name.to_string(), p.default.to_string()))
            .collect();
        for (name, value) in given {
            if !params.iter().any(|p| p.name == name) {
                return Err(ExperimentError::param(name, value, "unknown parameter"));
            }
            values.insert(name.to_string(), value.to_string());
        }
        Ok(ExperimentArgs { values })
    }

    /// The raw value, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// A value parsed as `T`.
    pub fn parse<T: std::str::FromStr>(&self, name: &str) -> Result<T, ExperimentError>
    where
        T::Err: std::fmt::Display,
    {
        let raw = self
            .get(name)
            .ok_or_else(|| ExperimentError::param(name, "", "missing"))?;
        raw.trim()
            .parse::<T>()
            .map_err(|e| ExperimentError::param(name, raw, &e.to_string()))
    }

    /// An optional value parsed as `T`.
    pub fn parse_opt<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, ExperimentError>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(name) {
            None => Ok(None),
            Some(_) => self.parse(name).map(Some),
        }
    }

    /// A comma-separated list, each item parsed as `T` (empty items skipped).
    pub fn list<T: std::str::FromStr>(&self, name: &str) -> Result<Vec<T>, ExperimentError>
    where
        T::Err: std::fmt::Display,
    {
        let raw = self.get(name).unwrap_or("");
        raw.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<T>()
                    .map_err(|e| ExperimentError::param(name, s, &e.to_string()))
            })
            .collect()
    }

    /// Seeds as a comma-separated list whose items may be ranges (`1-40`, `1,2,7-9`). An
    /// empty list, a reversed range or more than 100,000 seeds is an error naming `name`.
    pub fn seeds(&self, name: &str) -> Result<Vec<u64>, ExperimentError> {
        let raw = self.get(name).unwrap_or("");
        let mut out = Vec::new();
        for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = |why: &str| ExperimentError::param(name, item, why);
            match item.split_once('-') {
                Some((a, b)) => {
                    let a: u64 = a.trim().parse().map_err(|_| bad("not a seed range A-B"))?;
                    let b: u64 = b.trim().parse().map_err(|_| bad("not a seed range A-B"))?;
                    if a > b {
                        return Err(bad("a range must not run backwards"));
                    }
                    if b - a >= 100_000 {
                        return Err(bad("at most 100000 seeds"));
                    }
                    out.extend(a..=b);
                }
                None => out.push(
                    item.parse()
                        .map_err(|e: std::num::ParseIntError| bad(&e.to_string()))?,
                ),
            }
            if out.len() > 100_000 {
                return Err(ExperimentError::param(name, raw, "at most 100000 seeds"));
            }
        }
        if out.is_empty() {
            return Err(ExperimentError::param(name, raw, "names no seed"));
        }
        Ok(out)
    }

    /// A boolean flag (`true`/`false`).
    pub fn flag(&self, name: &str) -> Result<bool, ExperimentError> {
        Ok(self.parse_opt::<bool>(name)?.unwrap_or(false))
    }
}

/// Why an experiment could not run.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ExperimentError {
    /// A parameter value is invalid.
    #[error("--{name} {value:?}: {reason}")]
    Param {
        /// Parameter.
        name: String,
        /// Value given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A policy name is unknown or cannot take the options.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A simulation failed: a policy or model bug.
    #[error("{context}: {source}")]
    Sim {
        /// Which run.
        context: String,
        /// The engine's error.
        #[source]
        source: SimError,
    },
    /// Anything else (a worker pool that could not start, a bad built-in).
    #[error("{0}")]
    Other(String),
    /// Writing the report text failed.
    #[error("formatting the report")]
    Format(#[from] std::fmt::Error),
}

impl ExperimentError {
    /// A bad parameter value.
    pub fn param(name: &str, value: &str, reason: &str) -> ExperimentError {
        ExperimentError::Param {
            name: name.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }

    /// True when the error is a bug in a policy or model (exit code 2 at the CLI) rather
    /// than bad input.
    pub fn is_internal(&self) -> bool {
        matches!(self, ExperimentError::Sim { .. })
    }
}

/// What an experiment needs from its caller.
pub struct RunContext<'a> {
    /// Worker threads for independent runs.
    pub threads: usize,
    /// Called with (runs done, runs total) as runs finish.
    pub progress: &'a (dyn Fn(usize, usize) + Sync),
}

impl RunContext<'_> {
    /// A context with `threads` workers and no progress reporting.
    pub fn quiet(threads: usize) -> RunContext<'static> {
        RunContext {
            threads,
            progress: &|_, _| {},
        }
    }
}

/// One line (or band) of a figure.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// (x, y) points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Optional (low, high) spread per point (e.g. min–max over seeds), same length.
    pub spread: Option<Vec<(f64, f64)>>,
}

/// A figure an experiment wants drawn.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Figure {
    /// File name without extension (`jct_vs_load_a_exact`).
    pub file_stem: String,
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Lines, in legend order.
    pub series: Vec<Series>,
}

/// What an experiment produced.
#[derive(Clone, Debug)]
pub struct ReproOutput {
    /// Human-readable report (tables), printed as is.
    pub text: String,
    /// The `summary.json` document.
    pub summary: serde_json::Value,
    /// Figures to draw next to `summary.json`.
    pub figures: Vec<Figure>,
}

/// A reproducible experiment or a benchmark.
pub trait Experiment: Sync {
    /// Name after `tessera repro` / `tessera bench`.
    fn name(&self) -> &'static str;
    /// One line for `--help` and listings.
    fn about(&self) -> &'static str;
    /// Its parameters.
    fn params(&self) -> &'static [Param];
    /// Runs it.
    fn run(
        &self,
        args: &ExperimentArgs,
        ctx: &RunContext<'_>,
    ) -> Result<ReproOutput, ExperimentError>;
}

/// An alternative engine semantics (`--semantics NAME`).
#[derive(Clone, Copy, Debug)]
pub struct EngineInfo {
    /// Name on the command line.
    pub name: &'static str,
    /// One line for listings.
    pub about: &'static str,
    /// Runs a policy under these semantics.
    pub run: EngineFn,
}

/// The signature of an engine: like [`tessera_sim::Simulation`], one policy over a workload.
pub type EngineFn = fn(
    &Cluster,
    &Workload,
    &dyn ThroughputModel,
    Box<dyn Policy>,
    &SimConfig,
) -> Result<SimReport, SimError>;

/// A workload format a mechanism replays with an engine of its own (`tessera simulate
/// --trace-format NAME --trace FILE --policy P ...`), for workloads the core's job model does
/// not describe (e.g. quota-packing start/stop events).
#[derive(Clone, Copy, Debug)]
pub struct ReplayFormat {
    /// `--trace-format` name.
    pub name: &'static str,
    /// One line for listings.
    pub about: &'static str,
    /// The policies it replays; the default when `--policy` is not given.
    pub policies: &'static [&'static str],
    /// Parses the trace text and replays it under the named policies (empty = all).
    pub run: ReplayFn,
}

/// The signature of a [`ReplayFormat`]'s replay: trace text, policy names, context.
pub type ReplayFn = fn(&str, &[String], &RunContext<'_>) -> Result<ReproOutput, ExperimentError>;

/// Every registered replay format.
pub fn replay_formats() -> impl Iterator<Item = &'static ReplayFormat> {
    crate::MECHANISMS
        .iter()
        .flat_map(|m| m.replay_formats().iter())
}

/// Every registered engine.
pub fn engines() -> impl Iterator<Item = &'static EngineInfo> {
    crate::MECHANISMS.iter().flat_map(|m| m.engines().iter())
}

/// Every registered experiment (`tessera repro`).
pub fn experiments() -> impl Iterator<Item = &'static dyn Experiment> {
    crate::MECHANISMS
        .iter()
        .flat_map(|m| m.experiments().iter().copied())
}

/// Every registered benchmark (`tessera bench`).
pub fn benches() -> impl Iterator<Item = &'static dyn Experiment> {
    crate::MECHANISMS
        .iter()
        .flat_map(|m| m.benches().iter().copied())
}

/// Runs `f` over `items` on `threads` workers and returns the results in item order; the
/// one parallel runner of the project (simulate's policies, experiments' runs, sweeps).
/// `cost` orders the work, heaviest first, so that no worker idles at the end while another
/// finishes a long run. Each finished item reports through `progress`.
///
/// Plain scoped threads pulling from a shared counter: a worker that waits never picks up
/// other work, so runners nest safely (a sweep of simulations that each run policies in
/// parallel); a work-stealing pool would nest further runs on the waiting worker's stack.
pub fn run_parallel<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    cost: impl Fn(&T) -> f64,
    f: impl Fn(&T) -> R + Sync,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<R>, ExperimentError> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| cost(&items[b]).total_cmp(&cost(&items[a])));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let total = items.len();
    let slots: Vec<std::sync::Mutex<Option<R>>> =
        (0..total).map(|_| std::sync::Mutex::new(None)).collect();
    let workers = threads.clamp(1, total.max(1));
    std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(workers);
        for _ in 0..workers {
            handles.push(scope.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let r = f(&items[i]);
                    if let Ok(mut slot) = slots[i].lock() {
                        *slot = Some(r);
                    }
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                }
            }));
        }
        for h in handles {
            if h.join().is_err() {
                return Err(ExperimentError::Other("a worker thread panicked".into()));
            }
        }
        Ok(())
    })?;
    slots
        .into_iter()
        .map(|s| {
            s.into_inner()
                .ok()
                .flatten()
                .ok_or_else(|| ExperimentError::Other("a run did not happen".into()))
        })
        .collect()
}

/// Default worker count: the machine's cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_print_as_written() {
        assert_eq!(target_secs(1.0), "1");
        assert_eq!(target_secs(200.0), "200");
        assert_eq!(target_secs(0.2), "0.2");
        assert_eq!(target_secs(1_099.8 / 1_000.0), "1.0998");
        assert_eq!(target_secs(708.6 / 1_000.0), "0.7086");
    }

    const PARAMS: &[Param] = &[
        Param {
            name: "seed",
            default: "1",
            help: "seed",
        },
        Param {
            name: "loads",
            default: "3,4",
            help: "loads",
        },
        Param {
            name: "out",
            default: "",
            help: "dir",
        },
    ];

    #[test]
    fn args_fill_defaults_and_refuse_unknown_names() {
        let a = ExperimentArgs::new(PARAMS, [("seed", "7")]).unwrap();
        assert_eq!(a.parse::<u64>("seed").unwrap(), 7);
        assert_eq!(a.list::<f64>("loads").unwrap(), vec![3.0, 4.0]);
        assert_eq!(a.get("out"), None);
        assert!(ExperimentArgs::new(PARAMS, [("sed", "7")]).is_err());
        let bad = ExperimentArgs::new(PARAMS, [("loads", "3,x")]).unwrap();
        let err = bad.list::<f64>("loads").unwrap_err().to_string();
        assert!(err.contains("--loads") && err.contains("\"x\""), "{err}");
    }

    #[test]
    fn parallel_runner_keeps_item_order() {
        let items: Vec<u64> = (0..50).collect();
        let count = AtomicUsize::new(0);
        let out = run_parallel(&items, 3, |x| (*x % 7) as f64, |x| x * 2, &|_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(out, items.iter().map(|x| x * 2).collect::<Vec<_>>());
        assert_eq!(count.load(Ordering::Relaxed), 50);
    }
}

/// A plain-text table: the first column left-aligned, the others right-aligned, a dashed
/// rule under the header.
pub fn text_table(header: &[&str], rows: &[Vec<String>]) -> String {
    use std::fmt::Write as _;
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(out, "{cell:<w$}");
            } else {
                let _ = write!(out, "  {cell:>w$}");
            }
        }
        out.push('\n');
    };
    line(
        &mut out,
        &header.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    line(
        &mut out,
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    );
    for row in rows {
        line(&mut out, row);
    }
    out
}

/// One figure of a speed benchmark.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRow {
    /// What was measured.
    pub case: String,
    /// Wall seconds.
    pub wall_s: f64,
    /// What it must stay under, seconds.
    pub target_s: f64,
    /// Events per second, for engine benchmarks.
    pub events_per_s: Option<f64>,
    /// Extra facts (jobs, events, rounds, variables, ...).
    pub detail: String,
    /// How to reproduce it.
    pub command: String,
}

/// A target in seconds as written: derived ones (1,099.8 / 1,000) print as 1.0998, not as
/// their nearest binary fraction.
fn target_secs(t: f64) -> String {
    let fixed = format!("{t:.4}");
    fixed
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_string()
}

/// Renders benchmark rows as a [`ReproOutput`] (a table with met/NOT MET, and the rows as
/// JSON under `rows`).
pub fn bench_output(title: &str, rows: Vec<BenchRow>) -> ReproOutput {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.case.clone(),
                format!("{:.3} s", r.wall_s),
                format!("< {} s", target_secs(r.target_s)),
                if r.wall_s < r.target_s {
                    "met"
                } else {
                    "NOT MET"
                }
                .into(),
                r.events_per_s.map_or(String::new(), |e| format!("{e:.0}")),
                r.detail.clone(),
            ]
        })
        .collect();
    let mut text = format!("{title}\n\n");
    text.push_str(&text_table(
        &["case", "wall", "target", "", "events/s", "detail"],
        &cells,
    ));
    text.push_str("\ncommands:\n");
    for r in &rows {
        text.push_str(&format!("  {}: {}\n", r.case, r.command));
    }
    ReproOutput {
        text,
        summary: serde_json::json!({ "title": title, "rows": rows }),
        figures: Vec::new(),
    }
}

/// Peak resident memory of this process so far (Linux), in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Mean, sample standard deviation, minimum and maximum of a set of figures (one per seed).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (0 for one value).
    pub sd: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Values.
    pub n: usize,
}

impl Spread {
    /// The spread of `values` (all zero when empty).
    pub fn of(values: &[f64]) -> Spread {
        let n = values.len();
        if n == 0 {
            return Spread::default();
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Spread {
            mean,
            sd: var.sqrt(),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n,
        }
    }

    /// Standard error of the mean.
    pub fn sem(&self) -> f64 {
        if self.n > 1 {
            self.sd / (self.n as f64).sqrt()
        } else {
            0.0
        }
    }

    /// `mean ± sd [min–max]` with `decimals` decimals.
    pub fn show(&self, decimals: usize) -> String {
        format!(
            "{:.d$} ± {:.d$} [{:.d$}–{:.d$}]",
            self.mean,
            self.sd,
            self.min,
            self.max,
            d = decimals
        )
    }
}
