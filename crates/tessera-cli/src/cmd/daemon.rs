//! Real mode: `tessera serve` runs the daemon; `submit`, `list`, `describe`, `cancel`,
//! `nodes` and `queue` are its clients (address and token from flags or the environment).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use tessera_daemon::types::{JobState, JobView};
use tessera_daemon::{Client, DaemonConfig};

use crate::report::table;

/// `tessera serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Daemon config file (YAML; see docs/daemon.md): listen address, store path, backend
    /// (slurm or local), policy, round length, tenants and their token hashes.
    #[arg(long, value_name = "PATH")]
    pub config: PathBuf,
    /// Log level on stderr: error, warn, info, debug, trace.
    #[arg(long, default_value = "info", value_name = "LEVEL")]
    pub log_level: String,
}

/// Where the daemon is and who is asking.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// Daemon URL.
    #[arg(
        long,
        env = "TESSERA_SERVER",
        default_value = "http://127.0.0.1:8765",
        global = true
    )]
    pub server: String,
    /// Bearer token of your tenant (or an admin token).
    #[arg(long, env = "TESSERA_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `tessera submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Job spec file (YAML or JSON); `-` for stdin.
    pub file: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `tessera list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only jobs in this state: pending, starting, running, completed, failed, cancelled.
    #[arg(long)]
    pub state: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `tessera describe` / `tessera cancel`.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// Job id.
    pub id: i64,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub fn serve(args: &ServeArgs) -> Result<()> {
    let level: tracing_subscriber::filter::LevelFilter = args.log_level.parse().map_err(|_| {
        anyhow::anyhow!(
            "--log-level: unknown level {:?} (error, warn, info, debug, trace)",
            args.log_level
        )
    })?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .init();
    let config = DaemonConfig::from_file(&args.config)
        .with_context(|| format!("reading daemon config {}", args.config.display()))?;
    for w in config.warnings() {
        eprintln!("warning: {}: {w}", args.config.display());
    }
    tessera_daemon::run(config).context("daemon stopped")?;
    Ok(())
}

fn client(args: &ClientArgs) -> Client {
    Client::new(&args.server, args.token.clone())
}

fn print_json<T: Serialize>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".to_string())
}

fn job_rows(jobs: &[JobView]) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let nodes: Vec<String> = j
                .allocation
                .iter()
                .map(|s| format!("{}:{}", s.node, s.gpus))
                .collect();
            vec![
                j.id.to_string(),
                j.name.clone(),
                j.tenant.clone(),
                j.state.as_str().to_string(),
                format!(
                    "{}{}",
                    j.gpus,
                    j.gpu_type
                        .as_ref()
                        .map(|t| format!(" {t}"))
                        .unwrap_or_default()
                ),
                if nodes.is_empty() {
                    "-".into()
                } else {
                    nodes.join(",")
                },
                match (&j.pending_reason, j.queue_position) {
                    (Some(r), Some(p)) => format!("#{p} {r}"),
                    (Some(r), None) => r.clone(),
                    _ => "-".into(),
                },
            ]
        })
        .collect();
    table(
        &["id", "name", "tenant", "state", "gpus", "nodes", "pending"],
        &rows,
    )
}

pub fn submit(args: &SubmitArgs) -> Result<()> {
    let text = if args.file == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the spec from stdin")?
    } else {
        std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file))?
    };
    let job = client(&args.client)
        .submit(&text)
        .with_context(|| format!("submitting {}", args.file))?;
    if args.client.json {
        return print_json(&job);
    }
    writeln!(
        std::io::stdout(),
        "submitted job {} ({}), {}",
        job.id,
        job.name,
        job.state.as_str()
    )?;
    Ok(())
}

pub fn list(args: &ListArgs) -> Result<()> {
    let c = client(&args.client);
    let jobs = match &args.state {
        Some(s) => {
            let Some(state) = JobState::ALL
                .into_iter()
                .find(|st| st.as_str().eq_ignore_ascii_case(s))
            else {
                let known: Vec<_> = JobState::ALL.iter().map(|s| s.as_str()).collect();
                bail!("unknown state {s:?} (known: {})", known.join(", "));
            };
            c.list_state(state)
        }
        None => c.list(),
    }
    .context("listing jobs")?;
    if args.client.json {
        return print_json(&jobs);
    }
    write!(std::io::stdout(), "{}", job_rows(&jobs))?;
    Ok(())
}

pub fn describe(args: &IdArgs) -> Result<()> {
    let detail = client(&args.client)
        .describe(args.id)
        .with_context(|| format!("describing job {}", args.id))?;
    if args.client.json {
        return print_json(&detail);
    }
    let j = &detail.job;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "job {} ({}), tenant {}, queue {}",
        j.id, j.name, j.tenant, j.queue
    )?;
    writeln!(out, "state:          {}", j.state.as_str())?;
    writeln!(
        out,
        "gpus:           {} {}",
        j.gpus,
        j.gpu_type.clone().unwrap_or_default()
    )?;
    writeln!(out, "priority:       {}", j.priority)?;
    if let Some(reason) = &j.pending_reason {
        writeln!(out, "pending reason: {reason}")?;
    }
    if let Some(pos) = j.queue_position {
        writeln!(out, "queue position: {pos}")?;
    }
    for s in &j.allocation {
        writeln!(
            out,
            "allocation:     {} gpus={} cpu={} memory={}",
            s.node, s.gpus, s.cpu, s.memory
        )?;
    }
    writeln!(
        out,
        "attempt:        {} (preempted {} times)",
        j.attempt, j.preemptions
    )?;
    writeln!(out, "backend id:     {}", opt(j.backend_id.clone()))?;
    writeln!(out, "exit code:      {}", opt(j.exit_code))?;
    if let Some(p) = &j.progress {
        writeln!(out, "progress:       {} iterations", p.iterations)?;
    }
    writeln!(out, "history:")?;
    for t in &detail.transitions {
        let from = t.from.map(|s| s.as_str()).unwrap_or("-");
        writeln!(
            out,
            "  {:>14.3}  {from:>9} -> {:<9} {}",
            t.at,
            t.to.as_str(),
            t.detail
        )?;
    }
    Ok(())
}

pub fn cancel(args: &IdArgs) -> Result<()> {
    let job = client(&args.client)
        .cancel(args.id)
        .with_context(|| format!("cancelling job {}", args.id))?;
    if args.client.json {
        return print_json(&job);
    }
    writeln!(
        std::io::stdout(),
        "job {} ({}): {}",
        job.id,
        job.name,
        job.state.as_str()
    )?;
    Ok(())
}

pub fn nodes(args: &ClientArgs) -> Result<()> {
    let list = client(args).nodes().context("listing nodes")?;
    if args.json {
        return print_json(&list);
    }
    let rows: Vec<Vec<String>> = list
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.name.clone(),
                n.gpu_model.clone(),
                format!("{:?}", n.health).to_lowercase(),
                format!("{}/{}", n.gpus_allocated, n.gpus),
                format!("{}/{}", n.cpu_allocated, n.cpu),
                format!("{}/{}", n.memory_allocated, n.memory),
            ]
        })
        .collect();
    write!(
        std::io::stdout(),
        "{}",
        table(&["node", "gpu", "health", "gpus", "cpu", "memory"], &rows)
    )?;
    Ok(())
}

pub fn queue(args: &ClientArgs) -> Result<()> {
    let q = client(args).queue().context("reading the queue")?;
    if args.json {
        return print_json(&q);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "policy: {}\n", q.policy)?;
    let rows: Vec<Vec<String>> = q
        .queues
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.pending.to_string(),
                s.running.to_string(),
                s.pending_gpus.to_string(),
                s.running_gpus.to_string(),
            ]
        })
        .collect();
    write!(
        out,
        "{}",
        table(
            &[
                "queue",
                "pending",
                "running",
                "pending gpus",
                "running gpus"
            ],
            &rows
        )
    )?;
    if !q.pending.is_empty() {
        writeln!(out, "\npending, in scheduling order:")?;
        write!(out, "{}", job_rows(&q.pending))?;
    }
    Ok(())
}
