//! Executing runs: one run into its directory (atomically), and a local worker pool.
//!
//! Layout of a sweep directory:
//! - `plan.json`: the spec and its expanded runs (written by `run` and `submit`);
//! - `runs/ID/summary.json` (+ `jobs.csv`, `params.json`): a finished run. The directory is
//!   assembled under `runs/.tmp/` and renamed into place, so a run killed at any moment leaves
//!   either no `runs/ID/summary.json` or a complete one;
//! - `runs/ID/error.json` (+ `params.json`): a run that failed, with its error.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tessera_mechanisms::experiment::{
    experiments, run_parallel, Experiment, ExperimentArgs, RunContext,
};

use super::spec::{simulate_argv, value_text, Plan, PlannedRun, RunKind, Spec};
use crate::args::SimulateArgs;
use crate::cmd::simulate;
use crate::report::write_outputs;

/// `tessera simulate`'s options, parsed from a run's argument vector.
#[derive(Debug, Parser)]
#[command(name = "simulate", no_binary_name = false)]
pub struct SimulateLine {
    #[command(flatten)]
    pub args: SimulateArgs,
}

/// Parses a run's parameters as `tessera simulate` options.
pub fn simulate_args(params: &BTreeMap<String, Value>) -> Result<SimulateArgs> {
    let argv = simulate_argv(params);
    let line = SimulateLine::try_parse_from(&argv).map_err(|e| {
        // clap's rendering starts with "error: "; the caller adds its own.
        let text = e.to_string();
        let first = text
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ");
        anyhow::anyhow!("{first}")
    })?;
    let mut args = line.args;
    // One core per run: the sweep's pool is what runs in parallel.
    args.threads = Some(1);
    Ok(args)
}

/// The registry experiment a `run: repro` run names, and its parameters as the experiment's
/// own flags (everything but `experiment`).
pub fn repro_args(
    params: &BTreeMap<String, Value>,
) -> Result<(&'static dyn Experiment, ExperimentArgs)> {
    let known = || {
        experiments()
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(name) = params.get("experiment").map(value_text) else {
        bail!(
            "run: repro needs an `experiment` option (one of: {})",
            known()
        );
    };
    let Some(exp) = experiments().find(|e| e.name() == name) else {
        bail!("unknown experiment {name:?} (known: {})", known());
    };
    let given: Vec<(&str, String)> = params
        .iter()
        .filter(|(k, _)| k.as_str() != "experiment")
        .map(|(k, v)| (k.as_str(), value_text(v)))
        .collect();
    let args = ExperimentArgs::new(exp.params(), given.iter().map(|(k, v)| (*k, v.as_str())))?;
    Ok((exp, args))
}

/// What a finished run left in its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Done,
    Failed,
    Missing,
}

pub fn runs_dir(dir: &Path) -> PathBuf {
    dir.join("runs")
}

pub fn run_dir(dir: &Path, id: &str) -> PathBuf {
    runs_dir(dir).join(id)
}

pub fn run_state(dir: &Path, id: &str) -> RunState {
    let d = run_dir(dir, id);
    if d.join("summary.json").is_file() {
        RunState::Done
    } else if d.join("error.json").is_file() {
        RunState::Failed
    } else {
        RunState::Missing
    }
}

/// `runs/ID/error.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunError {
    pub id: String,
    pub error: String,
    /// Where it ran (host, and the Slurm job and task when under Slurm).
    pub host: String,
}

pub fn where_am_i() -> String {
    let host = std::env::var("SLURMD_NODENAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "local".into());
    match (
        std::env::var("SLURM_ARRAY_JOB_ID"),
        std::env::var("SLURM_ARRAY_TASK_ID"),
    ) {
        (Ok(job), Ok(task)) => format!("{host} (slurm {job}_{task})"),
        _ => host,
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))
}

static TMP_SEQ: AtomicUsize = AtomicUsize::new(0);

/// Runs one planned run and leaves its result (or its error) in `DIR/runs/ID/`. Returns
/// whether it succeeded; an `Err` means the result could not be written at all.
pub fn execute_run(dir: &Path, spec: &Spec, run: &PlannedRun) -> Result<bool> {
    let tmp_root = runs_dir(dir).join(".tmp");
    std::fs::create_dir_all(&tmp_root)
        .with_context(|| format!("creating {}", tmp_root.display()))?;
    let tmp = tmp_root.join(format!(
        "{}.{}.{}.{}",
        run.id,
        host_name(),
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let started = Instant::now();
    // A panic is a bug, but one run's bug must not stop the sweep: it is recorded as its error.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match spec.run {
        RunKind::Simulate => run_simulate(&tmp, spec, run),
        RunKind::Repro => run_repro(&tmp, run),
    }))
    .unwrap_or_else(|payload| {
        let text = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(anyhow::anyhow!("the run panicked (a bug): {text}"))
    });
    // Where and how long (the whole run in its worker: inputs, simulation, files), so that a
    // sweep's parallel efficiency can be measured from its runs.
    let params = serde_json::to_vec_pretty(&serde_json::json!({
        "id": run.id,
        "run": spec.run.to_string(),
        "params": run.params,
        "host": where_am_i(),
        "wall_s": started.elapsed().as_secs_f64(),
    }))?;
    if outcome.is_ok() {
        std::fs::write(tmp.join("params.json"), &params)?;
    }
    let target = run_dir(dir, &run.id);
    match outcome {
        // Another process (a local run beside a Slurm task) finished it first: keep theirs.
        Ok(()) if run_state(dir, &run.id) == RunState::Done => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(true)
        }
        Ok(()) => {
            // Replace an earlier failure's directory; the rename makes the result appear whole.
            if target.exists() {
                std::fs::remove_dir_all(&target)
                    .with_context(|| format!("removing {}", target.display()))?;
            }
            std::fs::rename(&tmp, &target)
                .with_context(|| format!("moving the result into {}", target.display()))?;
            Ok(true)
        }
        Err(err) => {
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir_all(&target)
                .with_context(|| format!("creating {}", target.display()))?;
            let _ = std::fs::remove_file(target.join("summary.json"));
            write_atomic(&target.join("params.json"), &params)?;
            let record = RunError {
                id: run.id.clone(),
                error: format!("{err:#}"),
                host: where_am_i(),
            };
            write_atomic(
                &target.join("error.json"),
                &serde_json::to_vec_pretty(&record)?,
            )?;
            Ok(false)
        }
    }
}

fn run_simulate(tmp: &Path, spec: &Spec, run: &PlannedRun) -> Result<()> {
    let args = simulate_args(&run.params)?;
    let sim = simulate::execute(&args)?;
    write_outputs(tmp, &sim.doc, &sim.reports, &sim.node_labels)?;
    for (file, name) in [("jobs", "jobs.csv"), ("timeseries", "timeseries.csv")] {
        if !spec.outputs.keeps(file) {
            let _ = std::fs::remove_file(tmp.join(name));
        }
    }
    Ok(())
}

fn run_repro(tmp: &Path, run: &PlannedRun) -> Result<()> {
    let (exp, args) = repro_args(&run.params)?;
    // One thread per run: the sweep's pool is what runs in parallel.
    let output = exp
        .run(&args, &RunContext::quiet(1))
        .with_context(|| format!("repro {}", exp.name()))?;
    std::fs::write(
        tmp.join("summary.json"),
        serde_json::to_vec_pretty(&output.summary)?,
    )?;
    Ok(())
}

/// This machine's name as the kernel has it (names temporary directories so that a cleanup
/// here never touches those of a run in progress on another node).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().replace(['.', '/'], "_"))
        .unwrap_or_else(|_| "unknown".into())
}

/// Removes the temporary directories of runs killed mid-way (Ctrl-C) on this machine: they are
/// incomplete by construction. Those of live processes, or of other machines, stay.
fn remove_dead_leftovers(dir: &Path) {
    let host = host_name();
    let Ok(entries) = std::fs::read_dir(runs_dir(dir).join(".tmp")) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut parts = name.split('.');
        let (Some(_id), Some(h), Some(pid)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if h == host && host != "unknown" && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Reads `DIR/plan.json`.
pub fn read_plan(dir: &Path) -> Result<Plan> {
    let path = dir.join("plan.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (is {} a sweep directory?)",
            path.display(),
            dir.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Writes `DIR/plan.json` (atomically), creating `DIR/runs`.
pub fn write_plan(dir: &Path, plan: &Plan) -> Result<()> {
    std::fs::create_dir_all(runs_dir(dir))
        .with_context(|| format!("creating {}", runs_dir(dir).display()))?;
    write_atomic(&dir.join("plan.json"), &serde_json::to_vec_pretty(plan)?)
}

/// Counts of a local execution.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub total: usize,
    pub already: usize,
    pub done: usize,
    pub failed: usize,
}

/// Runs every run of the plan that has no result yet on `threads` worker threads, with a
/// progress bar on a terminal.
pub fn run_local(dir: &Path, plan: &Plan, threads: usize) -> Result<Tally> {
    remove_dead_leftovers(dir);
    let todo: Vec<&PlannedRun> = plan
        .runs
        .iter()
        .filter(|r| run_state(dir, &r.id) != RunState::Done)
        .collect();
    let mut tally = Tally {
        total: plan.runs.len(),
        already: plan.runs.len() - todo.len(),
        ..Tally::default()
    };
    let bar = ProgressBar::with_draw_target(
        Some(todo.len() as u64),
        if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix} [{bar:30}] {pos}/{len} runs  {msg}  elapsed {elapsed}  ETA {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(plan.spec.name.clone());
    bar.set_message("0 failed");
    bar.enable_steady_tick(Duration::from_millis(500));
    let failed = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let fatal: std::sync::Mutex<Option<anyhow::Error>> = std::sync::Mutex::new(None);
    // The project's one parallel runner; runs cost alike as far as we know, so plan order.
    run_parallel(
        &todo,
        threads,
        |_| 0.0,
        |run| {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match execute_run(dir, &plan.spec, run) {
                Ok(true) => {}
                Ok(false) => {
                    let n = failed.fetch_add(1, Ordering::Relaxed) + 1;
                    bar.set_message(format!("{n} failed"));
                }
                Err(e) => {
                    // Results can no longer be written: start no further runs.
                    stop.store(true, Ordering::Relaxed);
                    if let Ok(mut slot) = fatal.lock() {
                        slot.get_or_insert(e);
                    }
                }
            }
        },
        &|done, _| bar.set_position(done as u64),
    )?;
    bar.finish_and_clear();
    if let Some(e) = fatal.into_inner().ok().flatten() {
        return Err(e);
    }
    tally.failed = failed.into_inner();
    tally.done = todo.len() - tally.failed;
    Ok(tally)
}

/// Wall seconds since `t`, for messages.
pub fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}
