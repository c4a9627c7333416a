//! Failure injection (issue 9): nodes and single GPUs go down and come back, at times listed
//! in a failures file or drawn from an MTBF/MTTR per node group, and jobs lose the work done
//! since their last checkpoint.
//!
//! A [`FailureSpec`] is parsed against a cluster ([`FailureSpec::parse`]: YAML or CSV, format
//! in `docs/failures.md`) or built in code, and given to the engine through
//! [`SimConfig::failures`](crate::SimConfig::failures). The engine asks the [`Injector`] for
//! the next failure instant and the GPUs whose health changes then.
//!
//! **Health.** A GPU is down while its node is down or it is down itself (both may overlap:
//! each is counted separately). A listed `up` must follow a `down` of the same node (or GPU).
//! At one instant `up`s apply before `down`s, so `down` for 1 h at 0 and `down` again at 1 h
//! is valid.
//!
//! **Drawn failures.** Each node of a group with an MTBF alternates up times drawn from an
//! exponential of mean MTBF and down times from an exponential of mean MTTR, from its own
//! random stream derived from [`FailureSpec::seed`] and the node's index, so failures do not
//! depend on arrivals, policies or the other nodes' draws.
//!
//! **Checkpoints.** A run (a start or restart of a job) restores from the state it starts
//! with; its first checkpoint is written one interval of *working* time after the restore
//! ends (`resume` = start + restart cost), then every interval: at `resume + k·interval`,
//! `k ≥ 1`. A job on a GPU that goes down at `t` keeps the progress of its latest checkpoint
//! `≤ t` (or of its run's start if none was written yet) and loses the rest; the GPU-seconds
//! it held since that point are lost (`lost_gpu_hours`, whole GPUs as in `gpu_secs`).
//! Checkpoints cost no time. Without an interval a job checkpoints only when a run starts
//! (a preemption writes one, as the restart cost models), so a failure loses all its run.
//! Per-job intervals override the default by job name.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use serde::{Deserialize, Serialize};
use tessera_model::{Cluster, NodeId, SimDuration, SimRng, SimTime};
use thiserror::Error;

/// What happens to a node or GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Comes back (sorted first: at one instant ups apply before downs).
    Up,
    /// Fails.
    Down,
}

/// One listed health change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FailureEvent {
    /// When.
    pub time: SimTime,
    /// Which change.
    pub health: Health,
    /// The node.
    pub node: NodeId,
    /// One GPU of the node (its index), or the whole node.
    pub gpu: Option<u32>,
}

/// Failures drawn for the nodes of one group (or of every group).
#[derive(Clone, Debug, PartialEq)]
pub struct GroupMtbf {
    /// Index of the node group in `Cluster::groups`, or `None` for every node.
    pub group: Option<usize>,
    /// Mean time between failures of one node.
    pub mtbf: SimDuration,
    /// Mean time to repair.
    pub mttr: SimDuration,
}

/// Everything about failures in one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FailureSpec {
    /// Listed health changes, sorted by (time, up before down, node, GPU) and checked (every
    /// up follows a down of the same node or GPU).
    pub events: Vec<FailureEvent>,
    /// Drawn failures per node group (a node matched by several entries uses the first).
    pub mtbf: Vec<GroupMtbf>,
    /// Default checkpoint interval of every job; `None`: only at the start of each run.
    pub checkpoint_interval: Option<SimDuration>,
    /// Per-job intervals by job name (`None`: this job checkpoints only when a run starts).
    pub checkpoints: BTreeMap<String, Option<SimDuration>>,
    /// A job interrupted by failures more often than this fails (with the reason); `None`:
    /// jobs are always requeued.
    pub max_restarts: Option<u32>,
    /// Seed of the drawn failures (each node's stream derives from it).
    pub seed: u64,
}

/// A failures file the parser refuses, with the line (1-based, when known) and why.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{}{reason}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct FailureSpecError {
    /// Line of the input, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

fn err<T>(line: Option<usize>, reason: impl Into<String>) -> Result<T, FailureSpecError> {
    Err(FailureSpecError {
        line,
        reason: reason.into(),
    })
}

/// Parses a duration: a number of seconds, or a number with a unit `s`, `m`, `h` or `d`
/// (`90`, `30m`, `1.5h`, `500h`). Negative, non-finite or empty values are refused.
pub fn parse_duration(text: &str) -> Result<SimDuration, String> {
    let t = text.trim();
    let (num, scale) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1.0),
        Some((i, 'm')) => (&t[..i], 60.0),
        Some((i, 'h')) => (&t[..i], 3600.0),
        Some((i, 'd')) => (&t[..i], 86400.0),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (seconds, or a number with s/m/h/d)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("`{text}`: a duration is a finite number >= 0"));
    }
    SimDuration::checked_from_secs_f64(v * scale).map_err(|e| format!("`{text}`: {e}"))
}

/// A YAML scalar that is a number of seconds or a duration string.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Num(f64),
    Text(String),
}

impl RawDuration {
    fn get(&self) -> Result<SimDuration, String> {
        match self {
            RawDuration::Num(v) => parse_duration(&v.to_string()),
            RawDuration::Text(t) => parse_duration(t),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    checkpoint_interval: Option<RawDuration>,
    #[serde(default)]
    checkpoints: BTreeMap<String, RawDuration>,
    #[serde(default)]
    max_restarts: Option<u32>,
    #[serde(default)]
    events: Vec<RawEvent>,
    #[serde(default)]
    mtbf: Vec<RawMtbf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    time: RawDuration,
    node: String,
    #[serde(default)]
    gpu: Option<u32>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    duration: Option<RawDuration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMtbf {
    #[serde(default)]
    group: Option<String>,
    mtbf: RawDuration,
    mttr: RawDuration,
}

/// One event as read, before expansion and checks.
struct Row {
    line: Option<usize>,
    time: SimTime,
    node: NodeId,
    gpu: Option<u32>,
    /// `Down` with a duration (down, then up after it), `Down`, or `Up`.
    health: Health,
    duration: Option<SimDuration>,
}

/// The cluster's node names, group by group (`dgx-a100-0 to dgx-a100-3, a10-0`): what an
/// unknown node's error lists.
fn node_names(cluster: &Cluster) -> String {
    cluster
        .groups
        .iter()
        .filter(|g| g.count > 0)
        .map(|g| {
            let name = |i: u32| {
                cluster
                    .nodes
                    .get((g.first_node + i) as usize)
                    .map_or_else(|| format!("{}-{i}", g.name), |n| n.name.clone())
            };
            if g.count == 1 {
                name(0)
            } else {
                format!("{} to {}", name(0), name(g.count - 1))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn resolve_row(
    cluster: &Cluster,
    line: Option<usize>,
    time: Result<SimDuration, String>,
    node: &str,
    gpu: Option<u32>,
    event: Option<&str>,
    duration: Option<Result<SimDuration, String>>,
) -> Result<Row, FailureSpecError> {
    let time = time.map_err(|reason| FailureSpecError { line, reason })?;
    let Some(n) = cluster.nodes.iter().find(|n| n.name == node) else {
        return err(
            line,
            format!(
                "no node `{}` in cluster {}; its nodes are named GROUP-INDEX: {}",
                node,
                cluster.name,
                node_names(cluster)
            ),
        );
    };
    if let Some(g) = gpu {
        if g >= n.gpus {
            return err(
                line,
                format!("node {} has {} GPUs, no GPU {g}", n.name, n.gpus),
            );
        }
    }
    let duration = duration
        .transpose()
        .map_err(|reason| FailureSpecError { line, reason })?;
    let health = match (event.map(str::trim), duration) {
        (Some("down") | None, Some(d)) if !d.is_zero() => Health::Down,
        (_, Some(_)) => return err(line, "a duration goes with `down` and is > 0"),
        (Some("down"), None) => Health::Down,
        (Some("up"), None) => Health::Up,
        (None, None) => return err(line, "an event needs `event: down|up` or a `duration`"),
        (Some(other), None) => {
            return err(line, format!("unknown event `{other}` (down or up)"));
        }
    };
    Ok(Row {
        line,
        time: SimTime::ZERO + time,
        node: n.id,
        gpu,
        health,
        duration,
    })
}

impl FailureSpec {
    /// Parses a failures file for `cluster`: CSV when its first line (not blank or a `#`
    /// comment) starts with `time,`, YAML otherwise. A file with no events and no MTBF is
    /// refused.
    pub fn parse(text: &str, cluster: &Cluster) -> Result<FailureSpec, FailureSpecError> {
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'));
        let spec = if first.is_some_and(|l| l.starts_with("time,")) {
            Self::parse_csv(text, cluster)?
        } else {
            Self::parse_yaml(text, cluster)?
        };
        if spec.events.is_empty() && spec.mtbf.is_empty() {
            // Most likely the wrong file: a run "with failures" would inject none.
            return err(None, "the failures file lists no events and no mtbf");
        }
        Ok(spec)
    }

    /// Parses the YAML form (`kind: Failures`, optional): `events`, `mtbf`,
    /// `checkpoint_interval`, `checkpoints` (job name → interval or `never`), `max_restarts`.
    pub fn parse_yaml(text: &str, cluster: &Cluster) -> Result<FailureSpec, FailureSpecError> {
        let raw: RawSpec = serde_norway::from_str(text).map_err(|e| FailureSpecError {
            line: e.location().map(|l| l.line()),
            reason: e.to_string(),
        })?;
        if let Some(kind) = raw.kind.as_deref() {
            if kind != "Failures" {
                return err(None, format!("kind is `{kind}`, expected `Failures`"));
            }
        }
        let mut rows = Vec::with_capacity(raw.events.len());
        for (i, e) in raw.events.iter().enumerate() {
            let at = i + 1;
            rows.push(
                resolve_row(
                    cluster,
                    None,
                    e.time.get(),
                    &e.node,
                    e.gpu,
                    e.event.as_deref(),
                    e.duration.as_ref().map(RawDuration::get),
                )
                .map_err(|mut x| {
                    x.reason = format!("event {at}: {}", x.reason);
                    x
                })?,
            );
        }
        let events = check_events(rows)?;
        let mut mtbf = Vec::new();
        for m in &raw.mtbf {
            let group = match &m.group {
                None => None,
                Some(name) => Some(
                    cluster
                        .groups
                        .iter()
                        .position(|g| &g.name == name)
                        .ok_or_else(|| FailureSpecError {
                            line: None,
                            reason: format!("mtbf: no node group `{name}`"),
                        })?,
                ),
            };
            let get = |d: &RawDuration, what: &str| {
                d.get()
                    .and_then(|v| {
                        if v.is_zero() {
                            Err(format!("{what} must be > 0"))
                        } else {
                            Ok(v)
                        }
                    })
                    .map_err(|reason| FailureSpecError {
                        line: None,
                        reason: format!("mtbf: {reason}"),
                    })
            };
            mtbf.push(GroupMtbf {
                group,
                mtbf: get(&m.mtbf, "mtbf")?,
                mttr: get(&m.mttr, "mttr")?,
            });
        }
        let interval = |d: &RawDuration| -> Result<Option<SimDuration>, FailureSpecError> {
            if matches!(d, RawDuration::Text(t) if t.trim() == "never") {
                return Ok(None);
            }
            let v = d.get().map_err(|reason| FailureSpecError {
                line: None,
                reason: format!("checkpoint interval: {reason}"),
            })?;
            if v.is_zero() {
                return err(None, "a checkpoint interval is > 0 (or `never`)");
            }
            Ok(Some(v))
        };
        let checkpoint_interval = match &raw.checkpoint_interval {
            Some(d) => interval(d)?,
            None => None,
        };
        let mut checkpoints = BTreeMap::new();
        for (name, d) in &raw.checkpoints {
            checkpoints.insert(name.clone(), interval(d)?);
        }
        Ok(FailureSpec {
            events,
            mtbf,
            checkpoint_interval,
            checkpoints,
            max_restarts: raw.max_restarts,
            seed: 0,
        })
    }

    /// Parses the CSV form: a header naming `time`, `node` and `event` columns, optionally
    /// `gpu` and `duration`; blank lines and `#` comments are skipped. Only events: intervals
    /// and MTBF come from the YAML form or the command line.
    pub fn parse_csv(text: &str, cluster: &Cluster) -> Result<FailureSpec, FailureSpecError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let Some((hline, header)) = lines.next() else {
            return err(None, "empty failures file");
        };
        let cols: Vec<&str> = header.split(',').map(str::trim).collect();
        let col = |name: &str| cols.iter().position(|c| *c == name);
        for c in &cols {
            if !["time", "node", "gpu", "event", "duration"].contains(c) {
                return err(
                    Some(hline),
                    format!("unknown column `{c}` (time,node,gpu,event,duration)"),
                );
            }
        }
        let (Some(tc), Some(nc)) = (col("time"), col("node")) else {
            return err(Some(hline), "the header needs `time` and `node` columns");
        };
        let (gc, ec, dc) = (col("gpu"), col("event"), col("duration"));
        let mut rows = Vec::new();
        for (line, l) in lines {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            if f.len() != cols.len() {
                return err(
                    Some(line),
                    format!("{} fields, the header has {}", f.len(), cols.len()),
                );
            }
            let opt = |c: Option<usize>| c.map(|c| f[c]).filter(|s| !s.is_empty());
            let gpu = match opt(gc) {
                Some(g) => Some(g.parse::<u32>().map_err(|_| FailureSpecError {
                    line: Some(line),
                    reason: format!("gpu `{g}` is not an index"),
                })?),
                None => None,
            };
            rows.push(resolve_row(
                cluster,
                Some(line),
                parse_duration(f[tc]),
                f[nc],
                gpu,
                opt(ec),
                opt(dc).map(parse_duration),
            )?);
        }
        Ok(FailureSpec {
            events: check_events(rows)?,
            ..FailureSpec::default()
        })
    }

    /// The checkpoint interval of a job (its override, else the default).
    pub fn interval_of(&self, job_name: &str) -> Option<SimDuration> {
        match self.checkpoints.get(job_name) {
            Some(v) => *v,
            None => self.checkpoint_interval,
        }
    }
}

/// Expands durations, sorts, and checks that every up follows a down and that nothing goes
/// down twice.
fn check_events(rows: Vec<Row>) -> Result<Vec<FailureEvent>, FailureSpecError> {
    let mut out: Vec<(FailureEvent, Option<usize>)> = Vec::with_capacity(rows.len());
    for r in rows {
        out.push((
            FailureEvent {
                time: r.time,
                health: r.health,
                node: r.node,
                gpu: r.gpu,
            },
            r.line,
        ));
        if let Some(d) = r.duration {
            out.push((
                FailureEvent {
                    time: r.time + d,
                    health: Health::Up,
                    node: r.node,
                    gpu: r.gpu,
                },
                r.line,
            ));
        }
    }
    out.sort();
    let mut down: BTreeMap<(NodeId, Option<u32>), bool> = BTreeMap::new();
    for (e, line) in &out {
        let what = match e.gpu {
            Some(g) => format!("GPU {g} of node {}", e.node.0),
            None => format!("node {}", e.node.0),
        };
        let d = down.entry((e.node, e.gpu)).or_default();
        match (e.health, *d) {
            (Health::Down, true) => {
                return err(*line, format!("{what} goes down at {} while down", e.time))
            }
            (Health::Up, false) => {
                return err(
                    *line,
                    format!("{what} comes up at {} without going down", e.time),
                )
            }
            (h, _) => *d = h == Health::Down,
        }
    }
    Ok(out.into_iter().map(|(e, _)| e).collect())
}

/// A GPU whose health changed: node, GPU index, and whether it is down now.
pub(crate) type Transition = (NodeId, u32, bool);

/// The run-time side: listed and drawn events in time order, and each GPU's health.
pub(crate) struct Injector {
    listed: Vec<FailureEvent>,
    next_listed: usize,
    /// Drawn node events: (time, node index); a node's next event alternates down/up.
    drawn: BinaryHeap<Reverse<(SimTime, u32)>>,
    /// Per node: its random stream and (MTBF, MTTR) in seconds, when drawn; down if drawn.
    streams: Vec<Option<(SimRng, f64, f64, bool)>>,
    /// Down reasons per node (listed node-level downs + a drawn down).
    node_down: Vec<u32>,
    /// Listed single-GPU downs, by (node, GPU).
    gpu_down: BTreeMap<(u32, u32), u32>,
    gpus_per_node: Vec<u32>,
    /// GPUs down now, and ∫ down GPUs dt up to `accounted_at` (GPU-seconds).
    down_now: u64,
    down_gpu_secs: f64,
    accounted_at: SimTime,
    /// Down events applied (node or single GPU).
    pub(crate) failures: u64,
    /// When nothing but failures is left: stop after this instant (every GPU down then
    /// has come back at least once by it).
    pub(crate) stall_horizon: Option<SimTime>,
}

/// SplitMix64: spreads the run seed and a node index into independent stream seeds.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Draws an exponential of mean `mean` seconds, at least 1 µs.
fn draw(rng: &mut SimRng, mean: f64) -> SimDuration {
    SimDuration::from_secs_f64(rng.exponential(1.0 / mean)).max(SimDuration::from_micros(1))
}

impl Injector {
    pub(crate) fn new(spec: &FailureSpec, cluster: &Cluster) -> Injector {
        // Its own stream family: "fail" in the high bits keeps it apart from other uses of
        // the run seed.
        let base = mix(spec.seed ^ 0x6661_696C_0000_0000);
        let mut drawn = BinaryHeap::new();
        let streams = cluster
            .nodes
            .iter()
            .map(|n| {
                let m = spec
                    .mtbf
                    .iter()
                    .find(|m| m.group.is_none_or(|g| g == n.group as usize))?;
                let mut rng = SimRng::seed_from_u64(mix(base ^ u64::from(n.id.0)));
                let (mtbf, mttr) = (m.mtbf.as_secs_f64(), m.mttr.as_secs_f64());
                drawn.push(Reverse((SimTime::ZERO + draw(&mut rng, mtbf), n.id.0)));
                Some((rng, mtbf, mttr, false))
            })
            .collect();
        Injector {
            listed: spec.events.clone(),
            next_listed: 0,
            drawn,
            streams,
            node_down: vec![0; cluster.nodes.len()],
            gpu_down: BTreeMap::new(),
            gpus_per_node: cluster.nodes.iter().map(|n| n.gpus).collect(),
            down_now: 0,
            down_gpu_secs: 0.0,
            accounted_at: SimTime::ZERO,
            failures: 0,
            stall_horizon: None,
        }
    }

    /// The next instant with a health change.
    pub(crate) fn peek(&self) -> Option<SimTime> {
        let listed = self.listed.get(self.next_listed).map(|e| e.time);
        let drawn = self.drawn.peek().map(|Reverse((t, _))| *t);
        listed.into_iter().chain(drawn).min()
    }

    /// True while any GPU is down.
    pub(crate) fn any_down(&self) -> bool {
        self.down_now > 0
    }

    /// GPUs down now.
    pub(crate) fn down_gpus(&self) -> u64 {
        self.down_now
    }

    /// An instant by which every GPU down now has come back at least once (listed ups are
    /// bounded by the last listed event; drawn nodes by their scheduled repair).
    pub(crate) fn all_up_by(&self) -> Option<SimTime> {
        let listed = self
            .listed
            .iter()
            .skip(self.next_listed)
            .filter(|e| e.health == Health::Up)
            .map(|e| e.time)
            .max();
        let drawn = self
            .drawn
            .iter()
            .filter(|Reverse((_, n))| {
                self.streams
                    .get(*n as usize)
                    .is_some_and(|s| s.as_ref().is_some_and(|s| s.3))
            })
            .map(|Reverse((t, _))| *t)
            .max();
        listed.into_iter().chain(drawn).max()
    }

    fn gpu_is_down(&self, node: u32, gpu: u32) -> bool {
        self.node_down.get(node as usize).is_some_and(|&c| c > 0)
            || self.gpu_down.get(&(node, gpu)).is_some_and(|&c| c > 0)
    }

    /// Applies every change due at `t` and returns the GPUs whose health changed, downs
    /// after ups.
    pub(crate) fn pop_due(&mut self, t: SimTime, out: &mut Vec<Transition>) {
        self.account(t);
        let mut changes: Vec<(NodeId, Option<u32>, Health)> = Vec::new();
        while let Some(e) = self.listed.get(self.next_listed) {
            if e.time != t {
                break;
            }
            changes.push((e.node, e.gpu, e.health));
            self.next_listed += 1;
        }
        while let Some(&Reverse((when, node))) = self.drawn.peek() {
            if when != t {
                break;
            }
            self.drawn.pop();
            let Some(Some((rng, mtbf, mttr, down))) = self.streams.get_mut(node as usize) else {
                continue;
            };
            *down = !*down;
            let next = t + draw(rng, if *down { *mttr } else { *mtbf });
            changes.push((
                NodeId(node),
                None,
                if *down { Health::Down } else { Health::Up },
            ));
            self.drawn.push(Reverse((next, node)));
        }
        changes.sort_by_key(|c| c.2);
        // Each touched GPU's health before this instant; only net changes are reported (a
        // GPU that comes up and goes down again at `t` stays down).
        let mut initial: BTreeMap<(u32, u32), bool> = BTreeMap::new();
        for (node, gpu, health) in changes {
            let count = self.gpus_per_node.get(node.index()).copied().unwrap_or(0);
            let gpus = match gpu {
                Some(g) => g..g + 1,
                None => 0..count,
            };
            for g in gpus {
                let was = self.gpu_is_down(node.0, g);
                initial.entry((node.0, g)).or_insert(was);
            }
            let counter = match gpu {
                Some(g) => self.gpu_down.entry((node.0, g)).or_default(),
                None => match self.node_down.get_mut(node.index()) {
                    Some(c) => c,
                    None => continue,
                },
            };
            match health {
                Health::Down => {
                    *counter += 1;
                    self.failures += 1;
                }
                Health::Up => *counter = counter.saturating_sub(1),
            }
        }
        let mut net: Vec<Transition> = initial
            .into_iter()
            .filter_map(|((n, g), was)| {
                let is = self.gpu_is_down(n, g);
                (is != was).then_some((NodeId(n), g, is))
            })
            .collect();
        for &(_, _, is) in &net {
            if is {
                self.down_now += 1;
            } else {
                self.down_now = self.down_now.saturating_sub(1);
            }
        }
        // Ups first, so that capacity returns before the evictions of new downs are handled.
        net.sort_by_key(|&(n, g, is)| (is, n, g));
        out.extend(net);
    }

    /// Integrates down GPUs up to `t`.
    pub(crate) fn account(&mut self, t: SimTime) {
        if t > self.accounted_at {
            self.down_gpu_secs +=
                self.down_now as f64 * t.saturating_since(self.accounted_at).as_secs_f64();
            self.accounted_at = t;
        }
    }

    pub(crate) fn down_gpu_secs(&self) -> f64 {
        self.down_gpu_secs
    }
}
