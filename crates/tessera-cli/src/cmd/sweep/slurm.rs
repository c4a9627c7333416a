//! Slurm execution: `submit` writes the plan into the sweep directory and submits one job
//! array whose tasks call `tessera sweep run-one`; `status` reads the run directories and asks
//! `squeue`/`sacct` about the submissions. Slurm schedules; we only split runs into tasks.
//!
//! Every Slurm command is an argument vector (no shell, no user text in a script): the task
//! script is a fixed text that receives the binary, the directory and the submission number
//! as its arguments.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::exec::{execute_run, read_plan, run_dir, run_state, write_atomic, RunError, RunState};
use super::{plan_spec, prepare_dir, RunOneArgs, StatusArgs, SubmitArgs};

/// `DIR/slurm/submission-K.json`: which plan runs each array task runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Submission {
    pub number: usize,
    pub job_id: Option<String>,
    /// Plan indices per array task.
    pub tasks: Vec<Vec<usize>>,
}

const TASK_SCRIPT: &str = "#!/bin/sh
# Written by `tessera sweep submit`. One array task runs its share of the sweep's runs.
# Arguments: the tessera binary, the sweep directory, the submission number.
exec \"$1\" sweep run-one \"$2\" --submission \"$3\" --index \"$SLURM_ARRAY_TASK_ID\"
";

fn slurm_dir(dir: &Path) -> PathBuf {
    dir.join("slurm")
}

fn submission_path(dir: &Path, k: usize) -> PathBuf {
    slurm_dir(dir).join(format!("submission-{k}.json"))
}

pub fn read_submissions(dir: &Path) -> Result<Vec<Submission>> {
    let mut subs = Vec::new();
    for k in 0.. {
        let path = submission_path(dir, k);
        if !path.exists() {
            break;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        subs.push(
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?,
        );
    }
    Ok(subs)
}

/// The error a failed run recorded.
pub fn read_error(dir: &Path, id: &str) -> String {
    std::fs::read_to_string(run_dir(dir, id).join("error.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<RunError>(&t).ok())
        .map(|e| format!("{} [on {}]", e.error, e.host))
        .unwrap_or_else(|| "(unreadable error.json)".into())
}

pub fn run_one(args: &RunOneArgs) -> Result<()> {
    let plan = read_plan(&args.dir)?;
    let indices: Vec<usize> = match args.submission {
        None => vec![args.index],
        Some(k) => {
            let subs = read_submissions(&args.dir)?;
            let sub = subs
                .get(k)
                .with_context(|| format!("no submission {k} in {}", args.dir.display()))?;
            sub.tasks
                .get(args.index)
                .with_context(|| {
                    format!(
                        "submission {k} has {} tasks; no task {}",
                        sub.tasks.len(),
                        args.index
                    )
                })?
                .clone()
        }
    };
    crate::progress::hide_run_bars();
    let mut failed = Vec::new();
    for i in indices {
        let run = plan
            .runs
            .get(i)
            .with_context(|| format!("the plan has {} runs; no run {i}", plan.runs.len()))?;
        if run_state(&args.dir, &run.id) == RunState::Done {
            eprintln!("run {} ({i}) is already done", run.id);
            continue;
        }
        if execute_run(&args.dir, &plan.spec, run)? {
            eprintln!("run {} ({i}) done", run.id);
        } else {
            eprintln!(
                "run {} ({i}) failed: {}",
                run.id,
                tessera_trace::printable(&read_error(&args.dir, &run.id))
            );
            failed.push(run.id.clone());
        }
    }
    if !failed.is_empty() {
        bail!("runs failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Array tasks of earlier submissions still queued or running: (job_task, state, node).
fn live_tasks(subs: &[Submission]) -> Result<Vec<(String, String, String)>> {
    let ids: Vec<&str> = subs.iter().filter_map(|s| s.job_id.as_deref()).collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let out = Command::new("squeue")
        .args(["-h", "-r", "-o", "%i %T %N", "-j", &ids.join(",")])
        .output()
        .context("running squeue")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        // squeue fails for job ids it has forgotten; that means none of them is live.
        if err.contains("Invalid job id") {
            return Ok(Vec::new());
        }
        bail!("squeue failed: {}", err.trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.to_string(),
                f.next()?.to_string(),
                f.next().unwrap_or("").to_string(),
            ))
        })
        // A completing task's process is being killed; its run, if unfinished, left nothing.
        .filter(|(_, state, _)| state != "COMPLETING")
        .collect())
}

fn safe_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect()
}

pub fn submit(args: &SubmitArgs) -> Result<()> {
    if !args.slurm {
        bail!("say where to submit: --slurm (the only backend for now; `tessera sweep run` runs locally)");
    }
    if args.runs_per_task == 0 {
        bail!("--runs-per-task must be at least 1");
    }
    if args.max_parallel == Some(0) {
        bail!("--max-parallel must be at least 1");
    }
    let dir = &args.out;
    let plan = match (&args.spec, args.resume) {
        (Some(spec), _) => {
            let (plan, text) = plan_spec(spec)?;
            if args.resume {
                let old = read_plan(dir)?;
                if old
                    .runs
                    .iter()
                    .map(|r| &r.id)
                    .ne(plan.runs.iter().map(|r| &r.id))
                {
                    eprintln!(
                        "note: the spec differs from the plan in {}; using the spec",
                        dir.display()
                    );
                }
            }
            prepare_dir(dir, &plan, &text)?;
            plan
        }
        (None, true) => read_plan(dir)?,
        (None, false) => bail!("give a sweep spec (or --resume to resubmit DIR's plan)"),
    };
    std::fs::create_dir_all(slurm_dir(dir))?;
    let subs = read_submissions(dir)?;
    let live = live_tasks(&subs)?;
    if !live.is_empty() {
        bail!(
            "{} array tasks of earlier submissions are still queued or running (e.g. {} {}); wait for them or scancel them, then resubmit",
            live.len(),
            live[0].0,
            live[0].1
        );
    }
    let todo: Vec<usize> = plan
        .runs
        .iter()
        .filter(|r| run_state(dir, &r.id) != RunState::Done)
        .map(|r| r.index)
        .collect();
    if todo.is_empty() {
        writeln!(
            crate::output::stdout(),
            "all {} runs are done; nothing to submit",
            plan.runs.len()
        )?;
        return Ok(());
    }
    let tasks: Vec<Vec<usize>> = todo
        .chunks(args.runs_per_task)
        .map(<[usize]>::to_vec)
        .collect();
    let number = subs.len();
    let mut sub = Submission {
        number,
        job_id: None,
        tasks,
    };
    write_atomic(
        &submission_path(dir, number),
        &serde_json::to_vec_pretty(&sub)?,
    )?;
    let script = slurm_dir(dir).join("task.sh");
    write_atomic(&script, TASK_SCRIPT.as_bytes())?;

    let abs_dir =
        std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    let exe = std::env::current_exe().context("locating the tessera binary")?;
    let mut array = format!("0-{}", sub.tasks.len() - 1);
    if let Some(k) = args.max_parallel {
        array.push_str(&format!("%{k}"));
    }
    let mut cmd = Command::new("sbatch");
    cmd.arg("--parsable")
        .arg(format!(
            "--job-name=tessera-sweep-{}",
            safe_name(&plan.spec.name)
        ))
        .arg(format!("--array={array}"))
        .arg(format!("--cpus-per-task={}", args.cpus_per_task))
        .arg("--output")
        .arg(abs_dir.join("slurm").join(format!("{number}-%a.out")))
        .arg("--chdir")
        .arg(&abs_dir);
    if let Some(p) = &args.partition {
        cmd.arg(format!("--partition={p}"));
    }
    cmd.arg(abs_dir.join("slurm").join("task.sh"))
        .arg(&exe)
        .arg(&abs_dir)
        .arg(number.to_string());
    let out = cmd
        .output()
        .context("running sbatch (is Slurm installed and SLURM_CONF set?)")?;
    if !out.status.success() {
        let _ = std::fs::remove_file(submission_path(dir, number));
        bail!(
            "sbatch failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let job_id = stdout
        .trim()
        .split(';')
        .next()
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
        .with_context(|| format!("sbatch printed no job id: {stdout:?}"))?
        .to_string();
    sub.job_id = Some(job_id.clone());
    write_atomic(
        &submission_path(dir, number),
        &serde_json::to_vec_pretty(&sub)?,
    )?;
    eprintln!(
        "submitted {} runs of {} as {} array tasks (submission {number}); follow with `tessera sweep status {}`",
        todo.len(),
        plan.runs.len(),
        sub.tasks.len(),
        dir.display()
    );
    writeln!(crate::output::stdout(), "{job_id}")?;
    Ok(())
}

/// `tessera sweep status --json`.
#[derive(Debug, Serialize)]
struct StatusDoc {
    total: usize,
    done: usize,
    failed: usize,
    running: usize,
    queued: usize,
    missing: usize,
    failures: Vec<(String, String)>,
    tasks: Vec<(String, String, String)>,
    /// `sacct`'s view (empty when accounting is not configured).
    accounting: Vec<String>,
}

pub fn status(args: &StatusArgs) -> Result<()> {
    let dir = &args.dir;
    let plan = read_plan(dir)?;
    let subs = read_submissions(dir)?;
    // Without Slurm at hand (another machine, a local sweep) the files still tell the story.
    let live = if subs.is_empty() {
        Vec::new()
    } else {
        live_tasks(&subs).unwrap_or_else(|e| {
            eprintln!(
                "warning: {}; showing what the files say",
                tessera_trace::printable(&format!("{e:#}"))
            );
            Vec::new()
        })
    };
    // Plan index → state of the live task that holds it.
    let mut live_state: BTreeMap<usize, &str> = BTreeMap::new();
    for (task, state, _) in &live {
        let Some((job, idx)) = task.split_once('_') else {
            continue;
        };
        let Ok(idx) = idx.parse::<usize>() else {
            continue;
        };
        if let Some(sub) = subs.iter().find(|s| s.job_id.as_deref() == Some(job)) {
            for &run in sub.tasks.get(idx).map(Vec::as_slice).unwrap_or(&[]) {
                live_state.insert(run, state);
            }
        }
    }
    let mut doc = StatusDoc {
        total: plan.runs.len(),
        done: 0,
        failed: 0,
        running: 0,
        queued: 0,
        missing: 0,
        failures: Vec::new(),
        tasks: live.clone(),
        accounting: accounting(&subs),
    };
    for r in &plan.runs {
        match (run_state(dir, &r.id), live_state.get(&r.index)) {
            (RunState::Done, _) => doc.done += 1,
            (_, Some(&"RUNNING")) => doc.running += 1,
            (_, Some(_)) => doc.queued += 1,
            (RunState::Failed, None) => {
                doc.failed += 1;
                doc.failures.push((r.id.clone(), read_error(dir, &r.id)));
            }
            (RunState::Missing, None) => doc.missing += 1,
        }
    }
    let mut out = crate::output::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{}: {} runs: {} done, {} failed, {} running, {} queued, {} missing (not done, not queued)",
        plan.spec.name, doc.total, doc.done, doc.failed, doc.running, doc.queued, doc.missing
    )?;
    for sub in &subs {
        writeln!(
            out,
            "submission {}: Slurm job {}, {} tasks",
            sub.number,
            sub.job_id.as_deref().unwrap_or("(not submitted)"),
            sub.tasks.len()
        )?;
    }
    for (task, state, node) in &doc.tasks {
        writeln!(out, "  task {task}: {state} {node}")?;
    }
    for line in &doc.accounting {
        writeln!(out, "  sacct: {line}")?;
    }
    for (id, err) in &doc.failures {
        writeln!(out, "failed {id}: {err}")?;
    }
    if doc.missing + doc.failed > 0 && doc.running + doc.queued == 0 {
        writeln!(
            out,
            "resubmit what is missing with `tessera sweep submit --resume --slurm --out {}`",
            dir.display()
        )?;
    }
    Ok(())
}

/// Finished tasks as `sacct` reports them; nothing when accounting is off (a plain Slurm
/// without slurmdbd), since the files already say what finished.
fn accounting(subs: &[Submission]) -> Vec<String> {
    let ids: Vec<&str> = subs.iter().filter_map(|s| s.job_id.as_deref()).collect();
    if ids.is_empty() {
        return Vec::new();
    }
    let Ok(out) = Command::new("sacct")
        .args([
            "-n",
            "-P",
            "-X",
            "-o",
            "JobID,State,NodeList",
            "-j",
            &ids.join(","),
        ])
        .output()
    else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.replace('|', " "))
        .collect()
}
