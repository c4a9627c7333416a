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
    /// Daemon URL. Default: $TESSERA_URL (what jobs are given), else $TESSERA_SERVER (the
    /// older name), else http://127.0.0.1:8765.
    #[arg(long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// Bearer token of your tenant (or an admin token). Default: $TESSERA_API_TOKEN, else
    /// $TESSERA_TOKEN outside a job (inside one, TESSERA_TOKEN is the job's own token, which
    /// may only report progress).
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// The daemon address when neither `--server` nor the environment names one.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8765";

/// Where a client's token came from (said in the hint of a 401).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokenFrom {
    Flag,
    ApiTokenEnv,
    LegacyEnv,
    None,
    /// None given, and TESSERA_TOKEN was set but is a run's own token (inside a job).
    NoneInsideRun,
}

/// The daemon URL and tenant token from the flags, else the environment (`env`).
fn resolve(
    server: Option<&str>,
    token: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> (String, Option<String>, TokenFrom) {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let url = server
        .map(String::from)
        .or_else(|| var("TESSERA_URL"))
        .or_else(|| var("TESSERA_SERVER"))
        .unwrap_or_else(|| DEFAULT_SERVER.to_string());
    // Inside a job or service instance, TESSERA_TOKEN is the run's own token.
    let in_run = ["TESSERA_JOB_TOKEN", "TESSERA_JOB_ID", "TESSERA_INSTANCE"]
        .iter()
        .any(|n| var(n).is_some());
    let (token, from) = match (token, var("TESSERA_API_TOKEN"), var("TESSERA_TOKEN")) {
        (Some(t), _, _) => (Some(t.to_string()), TokenFrom::Flag),
        (None, Some(t), _) => (Some(t), TokenFrom::ApiTokenEnv),
        (None, None, Some(_)) if in_run => (None, TokenFrom::NoneInsideRun),
        (None, None, Some(t)) => (Some(t), TokenFrom::LegacyEnv),
        (None, None, None) => (None, TokenFrom::None),
    };
    (url, token, from)
}

/// A client of the daemon, and how to explain its refusals.
struct Api {
    client: Client,
    from: TokenFrom,
}

impl Api {
    /// An error of a call, with a hint when the daemon refused the token.
    fn explain(&self, e: tessera_daemon::ClientError) -> anyhow::Error {
        if e.status() != Some(401) {
            return e.into();
        }
        let hint = match self.from {
            TokenFrom::Flag => "the token given with --token is not one of the daemon's tenants'",
            TokenFrom::ApiTokenEnv => {
                "the token in TESSERA_API_TOKEN is not one of the daemon's tenants'"
            }
            TokenFrom::LegacyEnv => {
                "the token in TESSERA_TOKEN is not one of the daemon's tenants' (set \
                 TESSERA_API_TOKEN or pass --token)"
            }
            TokenFrom::None => "no token given: pass --token TOKEN or set TESSERA_API_TOKEN",
            TokenFrom::NoneInsideRun => {
                "no tenant token given (inside a job, TESSERA_TOKEN is the job's own token and \
                 is not used): pass --token TOKEN or set TESSERA_API_TOKEN"
            }
        };
        anyhow::Error::new(e).context(hint.to_string())
    }
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
    match tessera_daemon::run(config) {
        Ok(()) => Ok(()),
        // It never ran: saying it "stopped" would send the reader looking for a crash.
        Err(e @ tessera_daemon::DaemonError::NotStarted(_)) => Err(e.into()),
        Err(e) => Err(anyhow::Error::new(e).context("daemon stopped")),
    }
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

/// A pending job's expected start for a table: `in 1h 5m`, `now`, or `after 30d 0h`.
fn expected_start_short(e: &tessera_daemon::types::ExpectedStart, now: f64) -> String {
    match (e.at, e.not_before) {
        (Some(at), _) if at <= now => "now".into(),
        (Some(at), _) => age(now - at),
        (None, Some(nb)) => format!("after {}", age(now - nb).trim_start_matches("in ")),
        (None, None) => "-".into(),
    }
}

/// A pending job's expected start in full, with when it was forecast.
fn expected_start_long(e: &tessera_daemon::types::ExpectedStart, now: f64) -> String {
    let start = match (e.at, e.not_before) {
        (Some(at), _) => when(at.max(now), now),
        (None, Some(nb)) => format!("not before {}", when(nb, now)),
        (None, None) => "unknown".into(),
    };
    format!(
        "{start}, forecast {} by simulating the queue from the live state",
        age(now - e.computed_at)
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

fn client(args: &ClientArgs) -> Api {
    let (url, token, from) = resolve(args.server.as_deref(), args.token.as_deref(), |n| {
        std::env::var(n).ok()
    });
    Api {
        client: Client::new(&url, token),
        from,
    }
}

/// A byte quantity for people: an exact unit of GiB or more (binary or decimal: `32Gi`,
/// `10G`, not `9765625Ki`); else, from 1 GiB, GiB (or TiB, PiB) with up to two decimals
/// (`9.31Gi`); below, exact MiB or MB, else MiB with decimals.
pub fn human_bytes(b: tessera_model::Bytes) -> String {
    let n = b.0;
    const EXACT: [(&str, u64); 8] = [
        ("Pi", 1 << 50),
        ("P", 1_000_000_000_000_000),
        ("Ti", 1 << 40),
        ("T", 1_000_000_000_000),
        ("Gi", 1 << 30),
        ("G", 1_000_000_000),
        ("Mi", 1 << 20),
        ("M", 1_000_000),
    ];
    if n == 0 {
        return "0".into();
    }
    let approx = |unit: &str, f: u64| {
        let text = format!("{:.2}", n as f64 / f as f64);
        format!("{}{unit}", text.trim_end_matches('0').trim_end_matches('.'))
    };
    for (unit, f) in EXACT {
        if n.is_multiple_of(f) && (f >= 1_000_000_000 || n < 1 << 30) {
            return format!("{}{unit}", n / f);
        }
    }
    match [
        ("Pi", 1u64 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
    ]
    .into_iter()
    .find(|(_, f)| n >= *f)
    {
        Some((unit, f)) => approx(unit, f),
        None => format!("{n}"),
    }
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
    let now = unix_now();
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
                j.reason
                    .as_ref()
                    .map_or_else(|| "-".into(), |r| r.text.clone()),
                j.expected_start
                    .as_ref()
                    .map_or_else(|| "-".into(), |e| expected_start_short(e, now)),
            ]
        })
        .collect();
    table(
        &[
            "id",
            "name",
            "tenant",
            "state",
            "gpus",
            "nodes",
            "pending",
            "why",
            "expected start",
        ],
        &rows,
    )
}

pub fn submit(args: &SubmitArgs) -> Result<()> {
    let text = if args.file == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the spec from stdin")?
    } else {
        std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file))?
    };
    let api = client(&args.client);
    let job = api
        .client
        .submit(&text)
        .map_err(|e| api.explain(e))
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
    let api = client(&args.client);
    let c = &api.client;
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
    .map_err(|e| api.explain(e))
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
            " devices=[{list}] quota sm={sm_request}-{sm_limit}permille gpu-memory={}",
            human_bytes(*memory)
        ),
    }
}

pub fn describe(args: &IdArgs) -> Result<()> {
    let api = client(&args.client);
    let detail = api
        .client
        .describe(args.id)
        .map_err(|e| api.explain(e))
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
    if let Some(e) = &j.expected_start {
        writeln!(
            out,
            "expected start: {}",
            expected_start_long(e, unix_now())
        )?;
    }
    if let Some(r) = &j.reason {
        writeln!(out, "waiting for:    {} ({})", r.kind, r.text)?;
        writeln!(out, "  needs:        {}", r.needs)?;
        for g in &r.free {
            writeln!(
                out,
                "  free in {}:  {} of {} {} GPUs (at most {} on one node){}{}",
                g.group,
                g.free_gpus,
                g.total_gpus,
                g.gpu,
                g.most_on_one_node,
                if g.unavailable_gpus > 0 {
                    format!(", {} unavailable", g.unavailable_gpus)
                } else {
                    String::new()
                },
                if g.partitioned_gpus > 0 {
                    format!(
                        ", {} partitioned ({} free instances)",
                        g.partitioned_gpus, g.free_mig_instances
                    )
                } else {
                    String::new()
                },
            )?;
        }
        if r.holders_total > 0 {
            let named: Vec<String> = r
                .holders
                .iter()
                .map(|h| format!("{} ({}, {} GPUs)", h.id, h.name, h.gpus))
                .collect();
            let more = r.holders_total.saturating_sub(r.holders.len());
            writeln!(
                out,
                "  held by:      {}{}",
                named.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            )?;
        }
        if let Some(n) = r.ahead {
            writeln!(out, "  jobs ahead:   {n}")?;
        }
        if let Some(note) = &r.note {
            writeln!(out, "  policy says:  {note}")?;
        }
    }
    for s in &j.allocation {
        writeln!(
            out,
            "allocation:     {} gpus={} cpu={} memory={}{}",
            s.node,
            s.gpus,
            s.cpu,
            human_bytes(s.memory),
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
    let api = client(&args.client);
    let job = api
        .client
        .cancel(args.id)
        .map_err(|e| api.explain(e))
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

/// `tessera nodes`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct NodesArgs {
    #[command(subcommand)]
    pub command: Option<NodesCommand>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// What `tessera nodes` does (default: list).
#[derive(Debug, clap::Subcommand)]
pub enum NodesCommand {
    /// The nodes with allocated and total GPUs, CPU and memory, and their GPUs' modes.
    #[command(after_help = "Examples:\n  tessera nodes list --token $TOKEN")]
    List,
    /// Place nothing new on a node; its jobs run on (admins).
    #[command(after_help = "Examples:\n  tessera nodes drain n3 --token $ADMIN_TOKEN")]
    Drain(NodeNameArgs),
    /// Hand a node's health back to the backend's view, after drain or `health --set down`
    /// (admins).
    #[command(after_help = "Examples:\n  tessera nodes undrain n3 --token $ADMIN_TOKEN")]
    Undrain(NodeNameArgs),
    /// Each node's health and its unhealthy GPUs with the reason; with --set, set a node's
    /// health (admins; `down` stops and requeues its jobs).
    #[command(after_help = "Examples:\n  tessera nodes health n3 --set down --token $ADMIN_TOKEN")]
    Health(NodeHealthArgs),
}

/// A node name.
#[derive(Debug, Args)]
pub struct NodeNameArgs {
    /// Backend node name (as `tessera nodes` shows it).
    pub node: String,
}

/// `tessera nodes health`.
#[derive(Debug, Args)]
pub struct NodeHealthArgs {
    /// Only this node.
    pub node: Option<String>,
    /// Set the node's health: up (back to the backend's view), draining or down.
    #[arg(long, value_name = "HEALTH", requires = "node")]
    pub set: Option<String>,
}

pub const NODES_EXAMPLES: &str = "Examples:
  tessera nodes
      every node: health, GPUs, CPU and memory in use, GPU modes (free, whole, mig, shared)
  tessera nodes drain n3 --token $ADMIN_TOKEN
      place nothing new on n3; its jobs run on
  tessera nodes undrain n3 --token $ADMIN_TOKEN
      n3 back in service (its health as the backend reports it)
  tessera nodes health
      each node's health and unhealthy GPUs with the reason
  tessera nodes health n3 --set down --token $ADMIN_TOKEN
      take n3 out now: its jobs are stopped and requeued";

fn health_text(h: tessera_daemon::backend::NodeHealth) -> String {
    format!("{h:?}").to_lowercase()
}

fn print_nodes(list: &tessera_daemon::types::NodeList) -> Result<()> {
    let rows: Vec<Vec<String>> = list
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.name.clone(),
                n.gpu_model.clone(),
                health_text(n.health),
                format!("{}/{}", n.gpus_allocated, n.gpus),
                format!("{}/{}", n.cpu_allocated, n.cpu),
                format!(
                    "{}/{}",
                    human_bytes(n.memory_allocated),
                    human_bytes(n.memory)
                ),
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

pub fn nodes(args: &NodesArgs) -> Result<()> {
    use tessera_daemon::backend::NodeHealth;
    let api = client(&args.client);
    let set = |node: &str, health: NodeHealth, what: &str| -> Result<()> {
        let list = api
            .client
            .set_node_health(node, health)
            .map_err(|e| api.explain(e))
            .with_context(|| format!("{what} node {node}"))?;
        if args.client.json {
            return print_json(&list);
        }
        let now = list
            .nodes
            .iter()
            .filter(|n| n.name == node)
            .map(|n| health_text(n.health))
            .collect::<Vec<_>>();
        writeln!(
            crate::output::stdout(),
            "node {node}: {}",
            if now.is_empty() {
                "-".to_string()
            } else {
                now.join(", ")
            }
        )?;
        Ok(())
    };
    match &args.command {
        None | Some(NodesCommand::List) => {
            let list = api
                .client
                .nodes()
                .map_err(|e| api.explain(e))
                .context("listing nodes")?;
            if args.client.json {
                return print_json(&list);
            }
            print_nodes(&list)
        }
        Some(NodesCommand::Drain(n)) => set(&n.node, NodeHealth::Draining, "draining"),
        Some(NodesCommand::Undrain(n)) => set(&n.node, NodeHealth::Up, "undraining"),
        Some(NodesCommand::Health(h)) => {
            if let (Some(node), Some(value)) = (&h.node, &h.set) {
                let health = match value.to_ascii_lowercase().as_str() {
                    "up" => NodeHealth::Up,
                    "draining" | "drain" => NodeHealth::Draining,
                    "down" => NodeHealth::Down,
                    other => bail!("--set: unknown health {other:?} (up, draining, down)"),
                };
                return set(node, health, "setting the health of");
            }
            let list = api
                .client
                .nodes()
                .map_err(|e| api.explain(e))
                .context("listing nodes")?;
            let nodes: Vec<_> = list
                .nodes
                .iter()
                .filter(|n| h.node.as_ref().is_none_or(|want| &n.name == want))
                .collect();
            if let Some(want) = &h.node {
                if nodes.is_empty() {
                    let names: Vec<&str> = list.nodes.iter().map(|n| n.name.as_str()).collect();
                    bail!("no node {want:?} (nodes: {})", names.join(", "));
                }
            }
            if args.client.json {
                return print_json(&nodes);
            }
            let rows: Vec<Vec<String>> = nodes
                .iter()
                .map(|n| {
                    let bad: Vec<String> = n
                        .devices
                        .iter()
                        .filter(|d| d.mode == "unhealthy" || d.reason.is_some())
                        .map(|d| {
                            format!(
                                "gpu {}: {}",
                                d.index,
                                tessera_trace::printable(d.reason.as_deref().unwrap_or(&d.mode))
                            )
                        })
                        .collect();
                    vec![
                        n.name.clone(),
                        n.gres_type.clone().unwrap_or_else(|| "-".into()),
                        health_text(n.health),
                        if bad.is_empty() {
                            "-".into()
                        } else {
                            bad.join("; ")
                        },
                    ]
                })
                .collect();
            write!(
                crate::output::stdout(),
                "{}",
                table(&["node", "gres", "health", "unhealthy gpus"], &rows)
            )?;
            Ok(())
        }
    }
}

/// `tessera services`.
#[derive(Debug, Args)]
pub struct ServicesArgs {
    #[command(subcommand)]
    pub command: ServicesCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// What `tessera services` does.
#[derive(Debug, clap::Subcommand)]
pub enum ServicesCommand {
    /// Submit an inference service: a `kind: Workload` document with one service
    /// (docs/daemon.md, "Inference services"); `-` for stdin.
    #[command(after_help = "Examples:\n  tessera services submit bert.yaml --token $TOKEN")]
    Submit(SpecFileArgs),
    /// Your services (every tenant's with an admin token).
    #[command(after_help = "Examples:\n  tessera services list --token $TOKEN")]
    List,
    /// One service: state, instances, where they run, their load and SLO attainment.
    #[command(after_help = "Examples:\n  tessera services describe 3 --token $TOKEN")]
    Describe(ServiceIdArgs),
    /// Retire a service: every instance is stopped.
    #[command(after_help = "Examples:\n  tessera services retire 3 --token $TOKEN")]
    Retire(ServiceIdArgs),
}

/// A spec file.
#[derive(Debug, Args)]
pub struct SpecFileArgs {
    /// The document (YAML or JSON); `-` for stdin.
    pub file: String,
}

/// A service id.
#[derive(Debug, Args)]
pub struct ServiceIdArgs {
    /// Service id.
    #[arg(allow_negative_numbers = true)]
    pub id: i64,
}

pub const SERVICES_EXAMPLES: &str = "Examples:
  tessera services submit bert.yaml --token $TOKEN
      submit a service (kind: Workload, one service); prints its id
  tessera services list
      your services: state, instances, SLO attainment
  tessera services describe 3
      one service: each instance's placement, load and latency
  tessera services retire 3
      stop every instance of service 3";

fn read_spec(file: &str) -> Result<String> {
    if file == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the document from stdin")
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {file}"))
    }
}

fn service_state(v: &tessera_daemon::services::ServiceView) -> String {
    serde_json::to_value(v.state)
        .ok()
        .and_then(|s| s.as_str().map(String::from))
        .unwrap_or_else(|| format!("{:?}", v.state).to_lowercase())
}

/// Requests within the SLO over requests completed, over the instances' latest reports.
fn slo_attainment(v: &tessera_daemon::services::ServiceView) -> String {
    let (done, late) = v
        .instances
        .iter()
        .filter_map(|i| i.load.as_ref())
        .fold((0u64, 0u64), |(d, l), r| {
            (d + r.completed, l + r.violations)
        });
    if done == 0 {
        "-".into()
    } else {
        format!(
            "{:.1}% of {done}",
            100.0 * (done - late.min(done)) as f64 / done as f64
        )
    }
}

fn share_text(s: &tessera_daemon::backend::PlacedShare) -> String {
    format!(
        "{} gpus={}{}",
        s.node,
        s.gpus,
        devices_text(s.devices.as_ref())
    )
}

pub fn services(args: &ServicesArgs) -> Result<()> {
    let api = client(&args.client);
    let c = &api.client;
    let mut out = crate::output::stdout();
    match &args.command {
        ServicesCommand::Submit(f) => {
            let text = read_spec(&f.file)?;
            let v = c
                .submit_service(&text)
                .map_err(|e| api.explain(e))
                .with_context(|| format!("submitting {}", f.file))?;
            if args.client.json {
                return print_json(&v);
            }
            writeln!(
                out,
                "submitted service {} ({}), {}",
                v.id,
                v.name,
                service_state(&v)
            )?;
        }
        ServicesCommand::List => {
            let list = c
                .services()
                .map_err(|e| api.explain(e))
                .context("listing services")?;
            if args.client.json {
                return print_json(&list);
            }
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|v| {
                    vec![
                        v.id.to_string(),
                        v.name.clone(),
                        v.tenant.clone(),
                        service_state(v),
                        v.instances.len().to_string(),
                        slo_attainment(v),
                        v.restarts.to_string(),
                    ]
                })
                .collect();
            write!(
                out,
                "{}",
                table(
                    &[
                        "id",
                        "name",
                        "tenant",
                        "state",
                        "instances",
                        "slo attainment",
                        "restarts"
                    ],
                    &rows
                )
            )?;
        }
        ServicesCommand::Describe(id) => {
            let v = c
                .service(id.id)
                .map_err(|e| api.explain(e))
                .with_context(|| format!("describing service {}", id.id))?;
            if args.client.json {
                return print_json(&v);
            }
            let now = unix_now();
            writeln!(out, "service {} ({}), tenant {}", v.id, v.name, v.tenant)?;
            writeln!(out, "state:          {}", service_state(&v))?;
            writeln!(out, "submitted:      {}", when(v.submitted_at, now))?;
            writeln!(out, "ends:           {}", when(v.end_at, now))?;
            if let Some(t) = v.retired_at {
                writeln!(out, "retired:        {}", when(t, now))?;
            }
            writeln!(out, "slo attainment: {}", slo_attainment(&v))?;
            writeln!(out, "restarts:       {}", v.restarts)?;
            if let Some(m) = &v.message {
                writeln!(out, "message:        {}", tessera_trace::printable(m))?;
            }
            writeln!(out, "instances:      {}", v.instances.len())?;
            for i in &v.instances {
                let state = serde_json::to_value(i.state)
                    .ok()
                    .and_then(|s| s.as_str().map(String::from))
                    .unwrap_or_default();
                let place: Vec<String> = i.allocation.iter().map(share_text).collect();
                writeln!(
                    out,
                    "  #{} {state} attempt {} on {}",
                    i.id,
                    i.attempt,
                    place.join(", ")
                )?;
                if let Some(l) = &i.load {
                    writeln!(
                        out,
                        "     load: {:.1} req/s, queue {}, in flight {}, p50 {:.1} ms, p99 {:.1} ms, {} completed, {} over the SLO",
                        l.requests_per_second,
                        l.queue_length,
                        l.in_flight,
                        l.p50_latency_seconds * 1e3,
                        l.p99_latency_seconds * 1e3,
                        l.completed,
                        l.violations
                    )?;
                }
            }
        }
        ServicesCommand::Retire(id) => {
            let v = c
                .retire_service(id.id)
                .map_err(|e| api.explain(e))
                .with_context(|| format!("retiring service {}", id.id))?;
            if args.client.json {
                return print_json(&v);
            }
            writeln!(out, "service {} ({}): {}", v.id, v.name, service_state(&v))?;
        }
    }
    Ok(())
}

pub fn queue(args: &ClientArgs) -> Result<()> {
    let api = client(args);
    let q = api
        .client
        .queue()
        .map_err(|e| api.explain(e))
        .context("reading the queue")?;
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

    /// Issue 41: `describe` printed `gpu-memory=9765625Ki` for 10 GB.
    #[test]
    fn byte_quantities_are_human() {
        use tessera_model::Bytes;
        assert_eq!(human_bytes(Bytes(10_000_000_000)), "10G");
        assert_eq!(human_bytes(Bytes(32 << 30)), "32Gi");
        assert_eq!(human_bytes(Bytes(9537 << 20)), "9.31Gi");
        assert_eq!(human_bytes(Bytes(512 << 20)), "512Mi");
        assert_eq!(human_bytes(Bytes(1_500_000)), "1.43Mi");
        assert_eq!(human_bytes(Bytes(3 << 40)), "3Ti");
        assert_eq!(human_bytes(Bytes(0)), "0");
        assert_eq!(human_bytes(Bytes(1000)), "1000");
    }

    /// Issue 41: the CLI read TESSERA_SERVER while jobs get TESSERA_URL, and took
    /// TESSERA_TOKEN, inside a job the job's own token, as the tenant's.
    #[test]
    fn server_and_token_come_from_flags_then_the_environment() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let none: &[(&str, &str)] = &[];
        assert_eq!(
            resolve(None, None, env(none)),
            (DEFAULT_SERVER.to_string(), None, TokenFrom::None)
        );
        let both = &[
            ("TESSERA_URL", "http://url"),
            ("TESSERA_SERVER", "http://server"),
            ("TESSERA_API_TOKEN", "api"),
            ("TESSERA_TOKEN", "legacy"),
        ];
        assert_eq!(
            resolve(None, None, env(both)),
            (
                "http://url".into(),
                Some("api".into()),
                TokenFrom::ApiTokenEnv
            )
        );
        assert_eq!(
            resolve(Some("http://flag"), Some("t"), env(both)),
            ("http://flag".into(), Some("t".into()), TokenFrom::Flag)
        );
        let old = &[
            ("TESSERA_SERVER", "http://server"),
            ("TESSERA_TOKEN", "legacy"),
        ];
        assert_eq!(
            resolve(None, None, env(old)),
            (
                "http://server".into(),
                Some("legacy".into()),
                TokenFrom::LegacyEnv
            )
        );
        let in_job = &[
            ("TESSERA_URL", "http://url"),
            ("TESSERA_TOKEN", "job-token"),
            ("TESSERA_JOB_ID", "4"),
        ];
        assert_eq!(
            resolve(None, None, env(in_job)),
            ("http://url".into(), None, TokenFrom::NoneInsideRun)
        );
    }

    /// Issue 41: `--help` showed `[env: TESSERA_SERVER=]` when it was unset.
    #[test]
    fn help_shows_no_empty_env_value() {
        use clap::CommandFactory;
        let mut cmd = crate::args::Cli::command();
        for verb in ["submit", "list", "nodes", "services", "queue"] {
            let help = cmd
                .find_subcommand_mut(verb)
                .expect(verb)
                .render_long_help()
                .to_string();
            assert!(!help.contains("[env:"), "{verb}: {help}");
            assert!(help.contains("TESSERA_URL"), "{verb}: {help}");
        }
    }

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
