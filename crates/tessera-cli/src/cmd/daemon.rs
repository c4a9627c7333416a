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
    #[arg(allow_negative_numbers = true)]
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
    // Colour codes only on a terminal: a log file or a pipe gets plain text.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_max_level(level)
        .init();
    let config = DaemonConfig::from_file(&args.config)
        .with_context(|| format!("reading daemon config {}", args.config.display()))?;
    for w in config.warnings() {
        eprintln!(
            "warning: {}: {}",
            args.config.display(),
            tessera_trace::printable(&w.to_string())
        );
    }
    tessera_daemon::run(config).context("daemon stopped")?;
    Ok(())
}

// The CLI is an edge where reading the wall clock is right: ages are relative to now.
#[allow(clippy::disallowed_methods)]
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A Unix time as RFC 3339 in UTC with its age: `2026-11-23T10:50:42Z (3m 5s ago)`.
fn when(unix: f64, now: f64) -> String {
    format!("{} ({})", rfc3339(unix), age(now - unix))
}

/// RFC 3339, UTC, whole seconds; out-of-range or non-finite times as the raw number.
pub fn rfc3339(unix: f64) -> String {
    if !(unix.is_finite() && (0.0..253_402_300_800.0).contains(&unix)) {
        return format!("{unix}");
    }
    let secs = unix.floor() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date, counting from 0000-03-01 so that leap days
    // fall at the end of each 400-year era's years.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `5s ago`, `3m 5s ago`, `2h 10m ago`, `4d 1h ago`; `in 5s` for the future.
fn age(secs: f64) -> String {
    if !secs.is_finite() {
        return "unknown age".into();
    }
    let s = secs.abs().round() as u64;
    let text = match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    };
    if secs < 0.0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

fn client(args: &ClientArgs) -> Client {
    Client::new(&args.server, args.token.clone())
}

fn print_json<T: Serialize>(value: &T) -> Result<()> {
    let mut out = crate::output::stdout();
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
        crate::output::stdout(),
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
    write!(crate::output::stdout(), "{}", job_rows(&jobs))?;
    Ok(())
}

/// The device-level part of a share, as `describe` prints it after the share.
fn devices_text(d: Option<&tessera_daemon::backend::PlacedDevices>) -> String {
    use tessera_daemon::backend::PlacedPart;
    let Some(d) = d else {
        return String::new();
    };
    let list = d
        .indices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    match &d.part {
        PlacedPart::Whole => format!(" devices=[{list}] whole"),
        PlacedPart::Mig { profile, start } => {
            format!(" devices=[{list}] mig={profile}@{start}")
        }
        PlacedPart::Quota {
            sm_request,
            sm_limit,
            memory,
        } => format!(
            " devices=[{list}] quota sm={sm_request}-{sm_limit}permille gpu-memory={memory}"
        ),
    }
}

pub fn describe(args: &IdArgs) -> Result<()> {
    let detail = client(&args.client)
        .describe(args.id)
        .with_context(|| format!("describing job {}", args.id))?;
    if args.client.json {
        return print_json(&detail);
    }
    let j = &detail.job;
    let mut out = crate::output::stdout();
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
            "allocation:     {} gpus={} cpu={} memory={}{}",
            s.node,
            s.gpus,
            s.cpu,
            s.memory,
            devices_text(s.devices.as_ref())
        )?;
    }
    if let (Some(model), Some(plan)) = (&j.gpu_model, j.plan) {
        writeln!(
            out,
            "cell:           {} x {}, plan data={} tensor={} pipeline={}",
            plan.devices(),
            model,
            plan.data,
            plan.tensor,
            plan.pipeline
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
    let now = unix_now();
    writeln!(out, "submitted:      {}", when(j.submitted_at, now))?;
    if let Some(t) = j.started_at {
        writeln!(out, "started:        {}", when(t, now))?;
    }
    if let Some(t) = j.finished_at {
        writeln!(out, "finished:       {}", when(t, now))?;
    }
    writeln!(out, "history:")?;
    for t in &detail.transitions {
        let from = t.from.map(|s| s.as_str()).unwrap_or("-");
        writeln!(
            out,
            "  {}  {from:>9} -> {:<9} {}",
            when(t.at, now),
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
        crate::output::stdout(),
        "job {} ({}): {}",
        job.id,
        job.name,
        job.state.as_str()
    )?;
    Ok(())
}

/// GPUs per mode (`2 free, 1 mig, 1 unhealthy`), in the order modes first appear.
fn device_modes(devices: &[tessera_daemon::types::GpuView]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for d in devices {
        match counts.iter_mut().find(|(m, _)| *m == d.mode) {
            Some((_, n)) => *n += 1,
            None => counts.push((d.mode.as_str(), 1)),
        }
    }
    if counts.is_empty() {
        return "-".into();
    }
    counts
        .iter()
        .map(|(m, n)| format!("{n} {m}"))
        .collect::<Vec<_>>()
        .join(", ")
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
                device_modes(&n.devices),
            ]
        })
        .collect();
    write!(
        crate::output::stdout(),
        "{}",
        table(
            &["node", "gpu", "health", "gpus", "cpu", "memory", "devices"],
            &rows
        )
    )?;
    Ok(())
}

pub fn queue(args: &ClientArgs) -> Result<()> {
    let q = client(args).queue().context("reading the queue")?;
    if args.json {
        return print_json(&q);
    }
    let mut out = crate::output::stdout();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_with_age() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400.0), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_431_042.9), "2026-11-23T10:50:42Z");
        assert_eq!(rfc3339(f64::NAN), "NaN");
        assert_eq!(age(5.2), "5s ago");
        assert_eq!(age(185.0), "3m 5s ago");
        assert_eq!(age(7800.0), "2h 10m ago");
        assert_eq!(age(90_000.0), "1d 1h ago");
        assert_eq!(age(-5.0), "in 5s");
        assert_eq!(when(100.0, 160.0), "1970-01-01T00:01:40Z (1m 0s ago)");
    }
}
