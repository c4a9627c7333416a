//! `tessera whatif`: what a change to the cluster or the policy would do to the queue, before
//! making it. The state is read from the daemon's store (read-only; a running daemon may hold
//! it) or from the live daemon (`--daemon`: `GET /v1/snapshot`, an administrator's token), the
//! simulator is forked from it twice, as it is and as changed (nodes added or drained, a
//! GPU's MIG layout, a service's GPU quota, the policy), and the two runs are compared per
//! tenant: expected waits of the jobs pending now, JCT of every job not finished, and the
//! queue over time. What each change simulates, and what not: `tessera_daemon::forecast_whatif`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use tessera_daemon::backend::{GresCount, InventoryNode, NodeHealth};
use tessera_daemon::forecast::{
    self, ClusterChange, ForecastInput, ForecastRun, ForecastSettings, JobForecast,
};
use tessera_daemon::forecast_whatif::{self, QuotaChange};
use tessera_daemon::DaemonConfig;
use tessera_model::{Bytes, MilliCpu, SimDuration, SimTime};

use crate::plot::{line_figure, LineChart, PlotFormat, Series};

pub const WHATIF_EXAMPLES: &str = "Examples:
  tessera whatif --config tessera.yaml --add-nodes 2xa100:8
      two more 8-GPU A100 nodes: how much sooner each tenant's pending jobs start
  tessera whatif --config tessera.yaml --drain n3 --drain n4
      draining two nodes for maintenance: who waits longer, and by how much
  tessera whatif --config tessera.yaml --policy las --round 300 --out whatif/
      the same queue under LAS; whatif/ gets jobs.csv and plots of waits and queue length
  tessera whatif --config tessera.yaml --mig n0:0=3g.40gb+3g.40gb
      GPU 0 of n0 split into two MIG instances (it must be idle)
  tessera whatif --daemon http://127.0.0.1:8765 --token $ADMIN --service-quota chat=30%
      the live daemon's state; service chat's instances hold 30% of their GPUs' SMs:
      how much sooner the shared jobs beside them start

The store named by the config (or --store) is opened read-only; the cluster comes from the
config's backend inventory (a local backend's nodes, or Slurm's). With --daemon the running
daemon's state is read instead (its cluster, drains, MIG layouts, progress and policy), at
its current instant. The forecast assumes no new submissions and jobs running at their
reported rate, else their declared duration. A service's quota changes the capacity its
instances hold, not how it serves (its latency and autoscaling are not simulated); tenants'
admission limits apply only to new submissions, so a what-if has nothing to change there.";

/// `tessera whatif` arguments.
#[derive(Debug, Args)]
pub struct WhatifArgs {
    /// The daemon's config (`tessera serve --config`): its store, backend and policy.
    #[arg(long, value_name = "FILE", required_unless_present = "daemon")]
    pub config: Option<PathBuf>,
    /// Read the live state of the daemon at this URL instead of a store.
    #[arg(long, value_name = "URL", conflicts_with_all = ["config", "store", "at"])]
    pub daemon: Option<String>,
    /// An administrator's API token for --daemon (default: $TESSERA_TOKEN).
    #[arg(long, value_name = "TOKEN", requires = "daemon")]
    pub token: Option<String>,
    /// Read this store instead of the config's.
    #[arg(long, value_name = "FILE")]
    pub store: Option<PathBuf>,
    /// Compare under this policy instead of the daemon's.
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,
    /// The round of the what-if's policy, seconds (default: the config's `roundSeconds`).
    #[arg(long, value_name = "SECS")]
    pub round: Option<f64>,
    /// Add nodes: COUNTxGPU[:GPUS] (GPU: a GRES type or catalogue name; GPUS per node,
    /// default 8), with the CPU and memory of an existing node of that type (else 64 cores,
    /// 512 GiB). Repeatable.
    #[arg(long = "add-nodes", value_name = "COUNTxGPU[:GPUS]")]
    pub add_nodes: Vec<String>,
    /// Drain a node (backend name): its running jobs finish, nothing new starts. Repeatable.
    #[arg(long, value_name = "NODE")]
    pub drain: Vec<String>,
    /// Set a GPU's MIG layout: NODE:GPU=PROFILE+PROFILE… or NODE:GPU=whole. Repeatable.
    #[arg(long, value_name = "NODE:GPU=LAYOUT")]
    pub mig: Vec<String>,
    /// Set the GPU quota a service's instances hold on each of their GPUs: SERVICE (id or
    /// name) = guaranteed SM share in percent, optionally :upper share, optionally ,memory
    /// per GPU (`chat=30%`, `7=25%:50%,20Gi`). Repeatable.
    #[arg(long = "service-quota", value_name = "SERVICE=SM%[:LIMIT%][,MEMORY]")]
    pub service_quota: Vec<String>,
    /// The instant to forecast from, Unix seconds (default: now).
    #[arg(long, value_name = "SECS")]
    pub at: Option<f64>,
    /// How far ahead to simulate, in days.
    #[arg(long, default_value_t = 30.0, value_name = "DAYS")]
    pub horizon_days: f64,
    /// Write jobs.csv and plots (wait CDF, queue length over time) here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Plot format.
    #[arg(long, value_enum, default_value_t = PlotFormat::Svg)]
    pub format: PlotFormat,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

// The CLI is an edge where reading the wall clock is right: "now" is the default instant.
#[allow(clippy::disallowed_methods)]
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `COUNTxGPU[:GPUS]` → nodes named `whatif-N`, sized like an existing node of the type.
fn parse_add(text: &str, existing: &[InventoryNode], first: usize) -> Result<Vec<InventoryNode>> {
    let bad = || anyhow!("--add-nodes {text:?}: expected COUNTxGPU[:GPUS], e.g. 2xa100:8");
    let (count, rest) = text.split_once('x').ok_or_else(bad)?;
    let count: usize = count.trim().parse().map_err(|_| bad())?;
    if count == 0 || count > 100_000 {
        bail!("--add-nodes {text:?}: between 1 and 100000 nodes");
    }
    let (gpu, gpus) = match rest.split_once(':') {
        Some((g, n)) => (g.trim(), n.trim().parse::<u32>().map_err(|_| bad())?),
        None => (rest.trim(), 8),
    };
    if gpu.is_empty() || gpus == 0 || gpus > 64 {
        return Err(bad());
    }
    // The type as written, or the catalogue model a default GRES type stands for.
    let model = tessera_daemon::inventory::DEFAULT_GRES_MAP
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(gpu))
        .map(|(_, v)| *v);
    let like = existing.iter().find(|n| {
        n.gres.iter().any(|g| {
            g.kind.as_deref().is_some_and(|k| {
                k.eq_ignore_ascii_case(gpu) || model.is_some_and(|m| k.eq_ignore_ascii_case(m))
            })
        })
    });
    Ok((0..count)
        .map(|i| InventoryNode {
            name: format!("whatif-{}", first + i),
            cpu: like.map_or(MilliCpu::from_cores(64), |n| n.cpu),
            memory: like.map_or(Bytes::from_gib(512), |n| n.memory),
            gres: vec![GresCount {
                kind: Some(gpu.to_string()),
                count: gpus,
            }],
            health: NodeHealth::Up,
        })
        .collect())
}

/// `NODE:GPU=P+P…` → (node, GPU, profiles).
fn parse_mig(text: &str) -> Result<(String, u32, Vec<String>)> {
    let bad = || anyhow!("--mig {text:?}: expected NODE:GPU=PROFILE+PROFILE or NODE:GPU=whole");
    let (at, layout) = text.split_once('=').ok_or_else(bad)?;
    let (node, gpu) = at.rsplit_once(':').ok_or_else(bad)?;
    let gpu: u32 = gpu.parse().map_err(|_| bad())?;
    let profiles = layout
        .split('+')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    Ok((node.to_string(), gpu, profiles))
}

/// `SERVICE=SM%[:LIMIT%][,MEMORY]` → a quota change.
fn parse_quota(text: &str) -> Result<QuotaChange> {
    let bad = || {
        anyhow!(
            "--service-quota {text:?}: expected SERVICE=SM%[:LIMIT%][,MEMORY], e.g. chat=30% or \
             7=25%:50%,20Gi"
        )
    };
    let (service, rest) = text.split_once('=').ok_or_else(bad)?;
    let (shares, memory) = match rest.split_once(',') {
        Some((s, m)) => (s, Some(m.trim())),
        None => (rest, None),
    };
    let permille = |p: &str| -> Result<u16> {
        let v: f64 = p
            .trim()
            .trim_end_matches('%')
            .trim()
            .parse()
            .map_err(|_| bad())?;
        if !(v > 0.0 && v <= 100.0) {
            bail!("--service-quota {text:?}: shares between 0% and 100%");
        }
        Ok((v * 10.0).round().max(1.0) as u16)
    };
    let (request, limit) = match shares.split_once(':') {
        Some((r, l)) => (permille(r)?, Some(permille(l)?)),
        None => (permille(shares)?, None),
    };
    let memory = match memory {
        Some(m) => Some(
            m.parse::<Bytes>()
                .map_err(|e| anyhow!("--service-quota {text:?}: memory: {e}"))?,
        ),
        None => None,
    };
    if service.trim().is_empty() {
        return Err(bad());
    }
    Ok(QuotaChange {
        service: service.trim().to_string(),
        sm_request: request,
        sm_limit: limit,
        memory,
    })
}

/// The nodes of a forecast input, as an inventory lists them (for sizing added nodes):
/// GRES type the catalogue's model name.
fn input_nodes(input: &ForecastInput) -> Vec<InventoryNode> {
    input
        .cluster
        .nodes
        .iter()
        .zip(&input.node_names)
        .map(|(n, name)| InventoryNode {
            name: name.clone(),
            cpu: n.cpu,
            memory: n.memory,
            gres: vec![GresCount {
                kind: Some(input.cluster.catalog.get(n.gpu).name.clone()),
                count: n.gpus,
            }],
            health: NodeHealth::Up,
        })
        .collect()
}

/// The nodes the config's local backend lists (for sizing added nodes); none for Slurm.
fn local_nodes(config: &DaemonConfig) -> Vec<InventoryNode> {
    match &config.backend {
        tessera_daemon::BackendConfig::Local(l) => l
            .nodes
            .iter()
            .map(|n| InventoryNode {
                name: n.name.clone(),
                cpu: n.cpus,
                memory: n.memory,
                gres: vec![GresCount {
                    kind: Some(n.gpu.clone()),
                    count: n.gpus,
                }],
                health: NodeHealth::Up,
            })
            .collect(),
        tessera_daemon::BackendConfig::Slurm(_) => Vec::new(),
    }
}

/// Per-tenant figures of one run.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct TenantFigures {
    pending: usize,
    running: usize,
    /// Mean and p95 wait of jobs pending at the instant (expected start − instant), s.
    mean_wait_s: f64,
    p95_wait_s: f64,
    /// Pending jobs not started within the horizon.
    beyond_horizon: usize,
    /// Mean JCT (finish − submit) of the jobs that finish within the horizon, s.
    mean_jct_s: f64,
    /// Time-average of pending jobs over the window, jobs.
    mean_queue: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn secs(t: SimTime) -> f64 {
    t.as_micros() as f64 / 1e6
}

/// Per-tenant figures over `window` seconds after the instant (the queue's average).
fn figures(run: &ForecastRun, window: f64) -> BTreeMap<String, TenantFigures> {
    let at = secs(run.at);
    let end = secs(run.horizon_end);
    let mut by: BTreeMap<String, (TenantFigures, Vec<f64>, Vec<f64>, f64)> = BTreeMap::new();
    for j in &run.jobs {
        let e = by.entry(j.tenant.clone()).or_default();
        if j.pending {
            e.0.pending += 1;
            match j.start {
                Some(s) => e.1.push(secs(s) - at),
                None => e.0.beyond_horizon += 1,
            }
            let until = j.start.map_or(end, secs).min(at + window);
            e.3 += (until - at).max(0.0);
        } else {
            e.0.running += 1;
        }
        if let Some(f) = j.finish {
            e.2.push(secs(f) - secs(j.submit));
        }
    }
    by.into_iter()
        .map(|(tenant, (mut f, mut waits, jcts, queued))| {
            waits.sort_by(f64::total_cmp);
            f.mean_wait_s = mean(&waits);
            f.p95_wait_s = percentile(&waits, 0.95);
            f.mean_jct_s = mean(&jcts);
            f.mean_queue = if window > 0.0 { queued / window } else { 0.0 };
            (tenant, f)
        })
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn hours(s: f64) -> String {
    format!("{:.2}", s / 3600.0)
}

/// Pending jobs over time (hours after the instant), a step series.
fn queue_series(run: &ForecastRun, label: &str) -> Series {
    let at = secs(run.at);
    let end = secs(run.horizon_end);
    let mut changes: Vec<(f64, i64)> = Vec::new();
    let mut pending = 0i64;
    for j in run.jobs.iter().filter(|j| j.pending) {
        pending += 1;
        changes.push((j.start.map_or(end, secs), -1));
    }
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut points = vec![(0.0, pending as f64)];
    for (t, d) in changes {
        pending += d;
        points.push(((t - at) / 3600.0, pending as f64));
    }
    Series {
        label: label.to_string(),
        points,
        ..Series::default()
    }
}

/// CDF of pending jobs' expected waits, hours.
fn wait_cdf(run: &ForecastRun, label: &str) -> Series {
    let at = secs(run.at);
    let mut w: Vec<f64> = run
        .jobs
        .iter()
        .filter(|j| j.pending)
        .filter_map(|j| j.start.map(|s| (secs(s) - at) / 3600.0))
        .collect();
    w.sort_by(f64::total_cmp);
    let n = run.jobs.iter().filter(|j| j.pending).count().max(1) as f64;
    Series {
        label: label.to_string(),
        points: w
            .iter()
            .enumerate()
            .map(|(i, &x)| (x, (i + 1) as f64 / n))
            .collect(),
        ..Series::default()
    }
}

/// The state a what-if forks from: its input, the daemon's policy and round, where it came
/// from, and how the daemon maps GRES types (for added nodes).
struct Source {
    input: ForecastInput,
    policy: String,
    round: Option<SimDuration>,
    from: String,
    existing: Vec<InventoryNode>,
    gres_map: BTreeMap<String, String>,
    default_gpu: Option<String>,
}

/// The live daemon's state (`GET /v1/snapshot`).
fn from_daemon(url: &str, token: Option<String>) -> Result<Source> {
    let token = token
        .or_else(|| std::env::var("TESSERA_TOKEN").ok())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            anyhow!("--daemon needs an administrator's token: --token or $TESSERA_TOKEN")
        })?;
    let client = tessera_daemon::Client::new(url, Some(token));
    let snap = client
        .snapshot()
        .with_context(|| format!("reading the live state of the daemon at {url}"))?;
    let (policy, round) = (snap.policy.clone(), snap.round);
    let input = snap.into_input().map_err(|e| {
        anyhow!("the daemon at {url} answered a snapshot this tessera cannot use: {e}")
    })?;
    Ok(Source {
        existing: input_nodes(&input),
        input,
        policy,
        round,
        from: format!("the daemon at {url}"),
        gres_map: BTreeMap::new(),
        default_gpu: None,
    })
}

/// The state a store holds at `--at` (default now).
fn from_store(args: &WhatifArgs, config_path: &std::path::Path) -> Result<Source> {
    let mut config = DaemonConfig::from_file(config_path)
        .with_context(|| format!("reading {}", config_path.display()))?;
    if let Some(s) = &args.store {
        config.store = s.clone();
    }
    if !config.store.exists() {
        bail!("no store at {}", config.store.display());
    }
    let now = match args.at {
        Some(at) if at.is_finite() && at >= 0.0 => SimTime::from_micros((at * 1e6) as u64),
        Some(at) => bail!("--at {at}: Unix seconds, not negative"),
        None => SimTime::from_micros((unix_now() * 1e6) as u64),
    };
    let input = forecast::input_from_store(&config, now, &ClusterChange::default())
        .with_context(|| format!("reading the store {}", config.store.display()))?;
    let mut existing = local_nodes(&config);
    if existing.is_empty() {
        existing = input_nodes(&input);
    }
    let (gres_map, default_gpu) = match &config.backend {
        tessera_daemon::BackendConfig::Slurm(s) => (s.gres_map.clone(), s.default_gpu.clone()),
        tessera_daemon::BackendConfig::Local(_) => (BTreeMap::new(), None),
    };
    Ok(Source {
        input,
        policy: config.policy.clone(),
        round: config.round_seconds.map(SimDuration::from_secs_f64),
        from: format!("the store {}", config.store.display()),
        existing,
        gres_map,
        default_gpu,
    })
}

pub fn run(args: &WhatifArgs) -> Result<()> {
    let t0 = std::time::Instant::now();
    if !(args.horizon_days.is_finite() && args.horizon_days > 0.0 && args.horizon_days <= 3650.0) {
        bail!("--horizon-days: between 0 and 3650 days");
    }
    let source = match (&args.daemon, &args.config) {
        (Some(url), _) => from_daemon(url, args.token.clone())?,
        (None, Some(config)) => from_store(args, config)?,
        (None, None) => bail!("--config FILE (a store) or --daemon URL (the live state)"),
    };
    let now = source.input.snapshot.now;
    let mut change = ClusterChange {
        drain: args.drain.clone(),
        ..ClusterChange::default()
    };
    for text in &args.add_nodes {
        let first = change.add.len();
        change.add.extend(parse_add(text, &source.existing, first)?);
    }
    let horizon = SimDuration::from_secs_f64(args.horizon_days * 86_400.0);
    let base_settings = ForecastSettings {
        horizon,
        ..ForecastSettings::new(&source.policy, source.round)
    };
    let what_settings = ForecastSettings {
        policy: args.policy.clone().unwrap_or_else(|| source.policy.clone()),
        round: match args.round {
            Some(r) if r.is_finite() && r > 0.0 && r <= 86_400.0 => {
                Some(SimDuration::from_secs_f64(r))
            }
            Some(r) => bail!("--round {r}: seconds, more than 0 and at most a day"),
            None => source.round,
        },
        ..base_settings.clone()
    };
    let base_input = source.input;
    let mut what_input = base_input.clone();
    forecast_whatif::apply_change(
        &mut what_input,
        &change,
        &source.gres_map,
        source.default_gpu.as_deref(),
    )
    .map_err(|e| anyhow!("applying the change to {}: {e}", source.from))?;
    for text in &args.mig {
        let (node, gpu, profiles) = parse_mig(text)?;
        forecast::set_layout(&mut what_input, &node, gpu, &profiles)
            .map_err(|e| anyhow!("--mig {text:?}: {e}"))?;
    }
    for text in &args.service_quota {
        let quota = parse_quota(text)?;
        forecast_whatif::set_service_quota(&mut what_input, &quota)
            .map_err(|e| anyhow!("--service-quota {text:?}: {e}"))?;
    }
    // The two runs are independent: side by side on two threads.
    let (base, what) = std::thread::scope(|s| {
        let changed = s.spawn(|| forecast::run(&what_input, &what_settings));
        let base = forecast::run(&base_input, &base_settings);
        (base, changed.join())
    });
    let base = base.context("forecasting as it is")?;
    let what = what
        .map_err(|_| anyhow!("the forecast of the change panicked"))?
        .context("forecasting the change")?;
    let last_start = |r: &ForecastRun| {
        r.jobs
            .iter()
            .filter_map(|j| j.start)
            .map(secs)
            .fold(secs(r.at), f64::max)
    };
    let window = (last_start(&base).max(last_start(&what)) - secs(now)).max(1.0);
    let before = figures(&base, window);
    let after = figures(&what, window);
    let elapsed = t0.elapsed().as_secs_f64();
    let mut described = Vec::new();
    if !args.add_nodes.is_empty() {
        described.push(format!("add {}", args.add_nodes.join(", ")));
    }
    if !args.drain.is_empty() {
        described.push(format!("drain {}", args.drain.join(", ")));
    }
    if !args.mig.is_empty() {
        described.push(format!("MIG {}", args.mig.join(", ")));
    }
    if !args.service_quota.is_empty() {
        described.push(format!("service quota {}", args.service_quota.join(", ")));
    }
    if what_settings.policy != base_settings.policy {
        described.push(format!("policy {}", what_settings.policy));
    }
    let change_text = if described.is_empty() {
        "no change".to_string()
    } else {
        described.join("; ")
    };
    // Jobs whose start moved the most.
    let by_id: BTreeMap<i64, &JobForecast> = base.jobs.iter().map(|j| (j.id, j)).collect();
    let mut moved: Vec<(i64, String, Option<f64>, Option<f64>)> = what
        .jobs
        .iter()
        .filter(|j| j.pending)
        .filter_map(|j| {
            let b = by_id.get(&j.id)?;
            let w = |s: Option<SimTime>| s.map(|s| secs(s) - secs(now));
            (w(b.start) != w(j.start)).then(|| (j.id, j.tenant.clone(), w(b.start), w(j.start)))
        })
        .collect();
    let delta = |m: &(i64, String, Option<f64>, Option<f64>)| match (m.2, m.3) {
        (Some(a), Some(b)) => (b - a).abs(),
        _ => f64::INFINITY,
    };
    moved.sort_by(|a, b| delta(b).total_cmp(&delta(a)).then(a.0.cmp(&b.0)));
    if args.json {
        let doc = serde_json::json!({
            "change": change_text,
            "from": source.from,
            "at": secs(now),
            "policy": {"before": base_settings.policy, "after": what_settings.policy},
            "tenants": before.keys().chain(after.keys()).collect::<std::collections::BTreeSet<_>>()
                .into_iter().map(|t| serde_json::json!({
                    "tenant": t,
                    "before": before.get(t),
                    "after": after.get(t),
                })).collect::<Vec<_>>(),
            "moved": moved.iter().map(|m| serde_json::json!({
                "id": m.0, "tenant": m.1, "waitBeforeS": m.2, "waitAfterS": m.3,
            })).collect::<Vec<_>>(),
            "stopped": {"before": base.stopped, "after": what.stopped},
            "wallSecs": elapsed,
        });
        let mut out = crate::output::stdout();
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        let mut out = crate::output::stdout();
        let pending: usize = base.jobs.iter().filter(|j| j.pending).count();
        writeln!(
            out,
            "what if: {change_text}\nfrom {} at {} ({} pending, {} running); \
             policy {} -> {}",
            source.from,
            crate::cmd::daemon::rfc3339(secs(now)),
            pending,
            base.jobs.len() - pending,
            base_settings.policy,
            what_settings.policy
        )?;
        writeln!(out)?;
        let rows: Vec<Vec<String>> = before
            .keys()
            .chain(after.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|t| {
                let b = before.get(t).cloned().unwrap_or_default();
                let a = after.get(t).cloned().unwrap_or_default();
                vec![
                    if t.is_empty() { "-".into() } else { t.clone() },
                    b.pending.to_string(),
                    format!("{} -> {}", hours(b.mean_wait_s), hours(a.mean_wait_s)),
                    format!("{:+.2}", (a.mean_wait_s - b.mean_wait_s) / 3600.0),
                    format!("{} -> {}", hours(b.p95_wait_s), hours(a.p95_wait_s)),
                    format!("{} -> {}", hours(b.mean_jct_s), hours(a.mean_jct_s)),
                    format!("{:.1} -> {:.1}", b.mean_queue, a.mean_queue),
                    format!("{} -> {}", b.beyond_horizon, a.beyond_horizon),
                ]
            })
            .collect();
        write!(
            out,
            "{}",
            crate::report::table(
                &[
                    "tenant",
                    "pending",
                    "mean wait h",
                    "change h",
                    "p95 wait h",
                    "mean JCT h",
                    "mean queue",
                    "beyond horizon",
                ],
                &rows
            )
        )?;
        if !moved.is_empty() {
            writeln!(out, "\nstarts that move most (wait from now, h):")?;
            let rows: Vec<Vec<String>> = moved
                .iter()
                .take(10)
                .map(|m| {
                    let h = |w: Option<f64>| w.map_or_else(|| "beyond".into(), hours);
                    vec![m.0.to_string(), m.1.clone(), h(m.2), h(m.3)]
                })
                .collect();
            write!(
                out,
                "{}",
                crate::report::table(&["job", "tenant", "before", "after"], &rows)
            )?;
        }
        for (name, r) in [("as it is", &base), ("changed", &what)] {
            if let Some(why) = &r.stopped {
                writeln!(out, "\n{name}: the run stopped early: {why}")?;
            }
        }
        writeln!(out, "\n(two forked runs in {elapsed:.2} s)")?;
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("jobs.csv");
        let mut w =
            csv::Writer::from_path(&path).with_context(|| format!("writing {}", path.display()))?;
        w.write_record([
            "id",
            "tenant",
            "gpus",
            "pending",
            "start_before_s",
            "start_after_s",
            "finish_before_s",
            "finish_after_s",
        ])?;
        let after_by: BTreeMap<i64, &JobForecast> = what.jobs.iter().map(|j| (j.id, j)).collect();
        let opt = |t: Option<SimTime>| t.map_or(String::new(), |t| format!("{:.0}", secs(t)));
        for b in &base.jobs {
            let a = after_by.get(&b.id);
            w.write_record([
                b.id.to_string(),
                b.tenant.clone(),
                b.gpus.to_string(),
                b.pending.to_string(),
                opt(b.start),
                opt(a.and_then(|a| a.start)),
                opt(b.finish),
                opt(a.and_then(|a| a.finish)),
            ])?;
        }
        w.flush()?;
        let panels = [
            LineChart {
                title: "Expected wait of the jobs pending now".into(),
                x_label: "hours from now".into(),
                y_label: "share of pending jobs".into(),
                series: vec![wait_cdf(&base, "as it is"), wait_cdf(&what, "changed")],
                ..LineChart::default()
            },
            LineChart {
                title: "Jobs pending (no new submissions)".into(),
                x_label: "hours from now".into(),
                y_label: "jobs".into(),
                step: true,
                series: vec![
                    queue_series(&base, "as it is"),
                    queue_series(&what, "changed"),
                ],
                ..LineChart::default()
            },
        ];
        line_figure(
            &dir.join("whatif"),
            args.format,
            &format!("What if: {change_text}"),
            &panels,
            2,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_nodes_and_layouts_parse_and_bad_ones_say_why() {
        let nodes = parse_add("2xa100:4", &[], 0).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].name, "whatif-1");
        assert_eq!(nodes[0].gres[0].count, 4);
        assert_eq!(parse_add("1xh100", &[], 2).unwrap()[0].gres[0].count, 8);
        for bad in ["a100", "0xa100", "2x", "2xa100:0", "zxa100"] {
            assert!(parse_add(bad, &[], 0).is_err(), "{bad}");
        }
        let (node, gpu, profiles) = parse_mig("n0:1=3g.40gb+4g.40gb").unwrap();
        assert_eq!((node.as_str(), gpu), ("n0", 1));
        assert_eq!(profiles, ["3g.40gb", "4g.40gb"]);
        assert!(parse_mig("n0=whole").is_err());
    }
}
