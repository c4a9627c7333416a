//! Packing workloads: start/stop events of training and inference instances with SM quotas
//! and per-GPU memory, as in the Dilu artifact's `instances-N.txt`.
//!
//! Two readers:
//! - [`parse_csv`]: our compact fixture format (`data/dilu/instances-N.csv`), one event a
//!   line: `t_s,action,name,kind,gpus,sm_request,sm_limit,memory_gb` with `action` `start` or
//!   `stop`, `kind` `training`, `inference` or `llm-inference`, shares as fractions of a GPU and
//!   `memory_gb` one value per GPU separated by `;`. `t_s` is whole seconds from the start.
//! - [`parse_dict_lines`]: the artifact's own lines, Python-dict literals
//!   (`{'Time': '2024-06-19 15:46:09', 'Action': 'start', 'Instance': {...}}`).
//!
//! Both check every value (shares in [0, 1] with request ≤ limit, memory finite and
//! non-negative, one memory entry per GPU, times in order, every stop naming a running
//! instance) and report the line of the first problem. Memory larger than a GPU is not a
//! format error: the replay reports such an instance as unschedulable.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use tessera_model::{SimRng, SimTime};
use thiserror::Error;

/// A malformed packing workload.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("instances line {line}: {reason}")]
pub struct InstancesError {
    /// 1-based line number (0 = the workload as a whole).
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

fn err(line: usize, reason: impl Into<String>) -> InstancesError {
    InstancesError {
        line,
        reason: reason.into(),
    }
}

/// What an instance runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum InstanceKind {
    /// A training job (low priority; one memory entry per GPU, all on one node).
    Training,
    /// An ordinary inference instance (one GPU).
    Inference,
    /// An LLM inference instance (one GPU's quota; Dilu may split its memory).
    LlmInference,
}

impl InstanceKind {
    /// Its name in the files.
    pub fn name(self) -> &'static str {
        match self {
            InstanceKind::Training => "training",
            InstanceKind::Inference => "inference",
            InstanceKind::LlmInference => "llm-inference",
        }
    }

    fn parse(s: &str) -> Option<InstanceKind> {
        match s {
            "training" => Some(InstanceKind::Training),
            "inference" => Some(InstanceKind::Inference),
            "llm-inference" | "llm_inference" | "llm" => Some(InstanceKind::LlmInference),
            _ => None,
        }
    }
}

/// One instance's demand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceSpec {
    /// Unique name while it runs.
    pub name: String,
    /// The service it serves (instances of one service spread over a training job's GPUs);
    /// the artifact's files give every instance its own service.
    pub service: String,
    /// Training or inference.
    pub kind: InstanceKind,
    /// Guaranteed SM share per GPU, permille.
    pub sm_request: u32,
    /// SM burst ceiling per GPU, permille (≥ `sm_request`).
    pub sm_limit: u32,
    /// Device memory per GPU in MB (1 GB = 1000 MB); its length is the GPU count.
    pub memory_mb: Vec<u32>,
}

impl InstanceSpec {
    /// GPUs it asks for.
    pub fn gpus(&self) -> usize {
        self.memory_mb.len()
    }
}

/// Start or stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventAction {
    /// The instance arrives and must be placed.
    Start,
    /// The instance leaves.
    Stop,
}

/// One event of a packing workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackingEvent {
    /// When.
    pub at: SimTime,
    /// Start or stop.
    pub action: EventAction,
    /// The instance (on a stop, only its name matters).
    pub instance: InstanceSpec,
}

/// A packing workload: events in time order (ties in file order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackingWorkload {
    /// The events.
    pub events: Vec<PackingEvent>,
}

impl PackingWorkload {
    /// Instances started.
    pub fn instances(&self) -> usize {
        self.events
            .iter()
            .filter(|e| e.action == EventAction::Start)
            .count()
    }

    /// Checks order and names: times never go back, a start never reuses a running name, a
    /// stop names a running instance. `lines[i]` is the source line of event `i` for errors.
    fn check(&self, lines: &[usize]) -> Result<(), InstancesError> {
        let mut running: BTreeSet<&str> = BTreeSet::new();
        let mut last = SimTime::ZERO;
        for (i, e) in self.events.iter().enumerate() {
            let line = lines.get(i).copied().unwrap_or(0);
            if e.at < last {
                return Err(err(line, format!("time {} goes back (after {last})", e.at)));
            }
            last = e.at;
            match e.action {
                EventAction::Start => {
                    if !running.insert(e.instance.name.as_str()) {
                        return Err(err(line, format!("{} started twice", e.instance.name)));
                    }
                }
                EventAction::Stop => {
                    if !running.remove(e.instance.name.as_str()) {
                        return Err(err(
                            line,
                            format!("stop of {}, which is not running", e.instance.name),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the compact CSV format [`parse_csv`] reads.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("t_s,action,name,kind,gpus,sm_request,sm_limit,memory_gb\n");
        for e in &self.events {
            let i = &e.instance;
            let mem: Vec<String> = i.memory_mb.iter().map(|m| fmt_thousandths(*m)).collect();
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{}",
                e.at.as_micros() / 1_000_000,
                match e.action {
                    EventAction::Start => "start",
                    EventAction::Stop => "stop",
                },
                i.name,
                i.kind.name(),
                i.gpus(),
                fmt_thousandths(i.sm_request),
                fmt_thousandths(i.sm_limit),
                mem.join(";")
            );
        }
        out
    }
}

/// `1234` → `1.234`, `500` → `0.5`, `3000` → `3`.
fn fmt_thousandths(x: u32) -> String {
    let s = format!("{}.{:03}", x / 1000, x % 1000);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A share (fraction of a GPU) as permille; errors on non-numbers and values outside [0, 1].
fn share_permille(line: usize, what: &str, x: f64) -> Result<u32, InstancesError> {
    if !x.is_finite() || !(0.0..=1.0).contains(&x) {
        return Err(err(line, format!("{what} {x} must be a share in [0, 1]")));
    }
    Ok((x * 1000.0).round() as u32)
}

/// Memory in GB as MB; errors on non-numbers, negatives and absurd sizes.
fn memory_mb(line: usize, x: f64) -> Result<u32, InstancesError> {
    if !x.is_finite() || !(0.0..=1_000_000.0).contains(&x) {
        return Err(err(
            line,
            format!("memory {x} GB must be a finite non-negative size (≤ 1e6 GB)"),
        ));
    }
    Ok((x * 1000.0).round() as u32)
}

struct RawInstance<'a> {
    name: &'a str,
    kind: &'a str,
    gpus: f64,
    request: f64,
    limit: f64,
    memory: Vec<f64>,
}

fn build_spec(line: usize, raw: RawInstance<'_>) -> Result<InstanceSpec, InstancesError> {
    let kind = InstanceKind::parse(raw.kind).ok_or_else(|| {
        err(
            line,
            format!(
                "unknown instance type {:?} (training, inference, llm-inference)",
                raw.kind
            ),
        )
    })?;
    if raw.name.is_empty() {
        return Err(err(line, "empty instance name"));
    }
    if !(raw.gpus.is_finite() && raw.gpus >= 1.0 && raw.gpus.fract() == 0.0 && raw.gpus <= 64.0) {
        return Err(err(
            line,
            format!("gpu_num {} must be a whole number in 1..=64", raw.gpus),
        ));
    }
    if raw.memory.len() != raw.gpus as usize {
        return Err(err(
            line,
            format!("{} memory entries for {} GPUs", raw.memory.len(), raw.gpus),
        ));
    }
    if kind != InstanceKind::Training && raw.gpus != 1.0 {
        return Err(err(line, "an inference instance takes one GPU"));
    }
    let sm_request = share_permille(line, "sm_request", raw.request)?;
    let sm_limit = share_permille(line, "sm_limit", raw.limit)?;
    if sm_request == 0 {
        return Err(err(line, "sm_request must be positive"));
    }
    if sm_limit < sm_request {
        return Err(err(
            line,
            format!("sm_limit {} below sm_request {}", raw.limit, raw.request),
        ));
    }
    let memory_mb = raw
        .memory
        .iter()
        .map(|&m| memory_mb(line, m))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(InstanceSpec {
        name: raw.name.to_string(),
        service: raw.name.to_string(),
        kind,
        sm_request,
        sm_limit,
        memory_mb,
    })
}

fn number(line: usize, what: &str, s: &str) -> Result<f64, InstancesError> {
    s.trim()
        .parse::<f64>()
        .map_err(|_| err(line, format!("{what} {s:?} is not a number")))
}

/// Reads the compact CSV format (see the module docs).
pub fn parse_csv(text: &str) -> Result<PackingWorkload, InstancesError> {
    let mut events = Vec::new();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("t_s,") {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 8 {
            return Err(err(n, format!("{} fields, want 8", f.len())));
        }
        let t = number(n, "t_s", f[0])?;
        if !(t.is_finite() && t >= 0.0 && t <= tessera_model::MAX_INPUT_SECS as f64) {
            return Err(err(n, format!("time {t} must be non-negative seconds")));
        }
        let action = match f[1] {
            "start" => EventAction::Start,
            "stop" | "delete" => EventAction::Stop,
            other => return Err(err(n, format!("action {other:?} is not start or stop"))),
        };
        let memory = f[7]
            .split(';')
            .map(|m| number(n, "memory", m))
            .collect::<Result<Vec<_>, _>>()?;
        let instance = build_spec(
            n,
            RawInstance {
                name: f[2],
                kind: f[3],
                gpus: number(n, "gpus", f[4])?,
                request: number(n, "sm_request", f[5])?,
                limit: number(n, "sm_limit", f[6])?,
                memory,
            },
        )?;
        events.push(PackingEvent {
            at: SimTime::from_secs_f64(t),
            action,
            instance,
        });
        lines.push(n);
    }
    let w = PackingWorkload { events };
    w.check(&lines)?;
    Ok(w)
}

/// A Python literal: the subset the artifact's lines use.
#[derive(Debug, Clone, PartialEq)]
enum Py {
    Str(String),
    Num(f64),
    List(Vec<Py>),
    Dict(Vec<(String, Py)>),
}

impl Py {
    fn get(&self, key: &str) -> Option<&Py> {
        match self {
            Py::Dict(items) => items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

struct PyParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl PyParser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.s.get(self.pos) == Some(&c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!(
                "expected {:?} at column {}",
                c as char,
                self.pos + 1
            ))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Py, String> {
        if depth > 8 {
            return Err("nested too deeply".into());
        }
        self.ws();
        match self.s.get(self.pos) {
            Some(b'{') => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.ws();
                    if self.s.get(self.pos) == Some(&b'}') {
                        self.pos += 1;
                        return Ok(Py::Dict(items));
                    }
                    let Py::Str(key) = self.value(depth + 1)? else {
                        return Err(format!("dict key at column {} is not a string", self.pos));
                    };
                    self.expect(b':')?;
                    let v = self.value(depth + 1)?;
                    items.push((key, v));
                    self.ws();
                    if self.s.get(self.pos) == Some(&b',') {
                        self.pos += 1;
                    } else {
                        self.expect(b'}')?;
                        return Ok(Py::Dict(items));
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.ws();
                    if self.s.get(self.pos) == Some(&b']') {
                        self.pos += 1;
                        return Ok(Py::List(items));
                    }
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    if self.s.get(self.pos) == Some(&b',') {
                        self.pos += 1;
                    } else {
                        self.expect(b']')?;
                        return Ok(Py::List(items));
                    }
                }
            }
            Some(&q @ (b'\'' | b'"')) => {
                self.pos += 1;
                let start = self.pos;
                while let Some(&c) = self.s.get(self.pos) {
                    if c == q {
                        let text = std::str::from_utf8(&self.s[start..self.pos])
                            .map_err(|_| "string is not UTF-8".to_string())?;
                        self.pos += 1;
                        return Ok(Py::Str(text.to_string()));
                    }
                    if c == b'\\' {
                        return Err("escapes in strings are not supported".into());
                    }
                    self.pos += 1;
                }
                Err("unterminated string".into())
            }
            Some(_) => {
                let start = self.pos;
                while self
                    .s
                    .get(self.pos)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || b"+-.".contains(c))
                {
                    self.pos += 1;
                }
                let tok = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
                if tok.is_empty() {
                    return Err(format!("unexpected character at column {}", start + 1));
                }
                tok.parse::<f64>()
                    .map(Py::Num)
                    .map_err(|_| format!("{tok:?} is not a number"))
            }
            None => Err("unexpected end of line".into()),
        }
    }
}

fn parse_py(line: &str) -> Result<Py, String> {
    let mut p = PyParser {
        s: line.as_bytes(),
        pos: 0,
    };
    let v = p.value(0)?;
    p.ws();
    if p.pos != line.len() {
        return Err(format!("trailing text at column {}", p.pos + 1));
    }
    Ok(v)
}

/// `YYYY-MM-DD HH:MM:SS` as seconds since 1970 (proleptic Gregorian, no time zone).
fn civil_seconds(s: &str) -> Option<i64> {
    let (date, time) = s.trim().split_once(' ')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let t: Vec<i64> = time
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let ([y, m, day], [hh, mm, ss]) = (d.as_slice(), t.as_slice()) else {
        return None;
    };
    if !(1..=12).contains(m)
        || !(1..=31).contains(day)
        || !(0..24).contains(hh)
        || !(0..60).contains(mm)
        || !(0..=60).contains(ss)
        || !(1..=9999).contains(y)
    {
        return None;
    }
    // Days from civil (H. Hinnant's algorithm).
    let y = if *m <= 2 { y - 1 } else { *y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Reads the artifact's `instances-N.txt` lines (Python-dict literals); times become seconds
/// from the first event.
pub fn parse_dict_lines(text: &str) -> Result<PackingWorkload, InstancesError> {
    let mut events = Vec::new();
    let mut lines = Vec::new();
    let mut t0: Option<i64> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let v = parse_py(line).map_err(|e| err(n, e))?;
        let s = |v: Option<&Py>, what: &str| -> Result<String, InstancesError> {
            match v {
                Some(Py::Str(s)) => Ok(s.clone()),
                _ => Err(err(n, format!("{what} missing or not a string"))),
            }
        };
        let num = |v: Option<&Py>, what: &str| -> Result<f64, InstancesError> {
            match v {
                Some(Py::Num(x)) => Ok(*x),
                _ => Err(err(n, format!("{what} missing or not a number"))),
            }
        };
        let time = s(v.get("Time"), "Time")?;
        let secs =
            civil_seconds(&time).ok_or_else(|| err(n, format!("Time {time:?} is not a date")))?;
        let base = *t0.get_or_insert(secs);
        if secs < base {
            return Err(err(n, format!("Time {time:?} is before the first event")));
        }
        // The same limit as every span read elsewhere (years 1 to 9999 would overflow it).
        if (secs - base) as u64 > tessera_model::MAX_INPUT_SECS {
            return Err(err(
                n,
                format!(
                    "Time {time:?} is {} s after the first event, beyond the limit of {} s",
                    secs - base,
                    tessera_model::MAX_INPUT_SECS
                ),
            ));
        }
        let action = match s(v.get("Action"), "Action")?.as_str() {
            "start" => EventAction::Start,
            "delete" | "stop" => EventAction::Stop,
            other => return Err(err(n, format!("Action {other:?} is not start or delete"))),
        };
        let inst = v
            .get("Instance")
            .ok_or_else(|| err(n, "Instance missing"))?;
        let name = s(inst.get("service_name"), "service_name")?;
        let kind = s(inst.get("type"), "type")?;
        let memory = match inst.get("memory") {
            Some(Py::List(items)) => items
                .iter()
                .map(|m| num(Some(m), "memory entry"))
                .collect::<Result<Vec<_>, _>>()?,
            Some(Py::Num(x)) => vec![*x],
            _ => return Err(err(n, "memory missing or not a list")),
        };
        let instance = build_spec(
            n,
            RawInstance {
                name: &name,
                kind: &kind,
                gpus: num(inst.get("gpu_num"), "gpu_num")?,
                request: num(inst.get("sm_requests"), "sm_requests")?,
                limit: num(inst.get("sm_limits"), "sm_limits")?,
                memory,
            },
        )?;
        events.push(PackingEvent {
            at: SimTime::from_secs((secs - base) as u64),
            action,
            instance,
        });
        lines.push(n);
    }
    let w = PackingWorkload { events };
    w.check(&lines)?;
    Ok(w)
}

/// Reads either format, telling them apart by the first non-blank character (`{` = dict
/// lines).
pub fn parse_any(text: &str) -> Result<PackingWorkload, InstancesError> {
    if text.trim_start().starts_with('{') {
        parse_dict_lines(text)
    } else {
        parse_csv(text)
    }
}

/// The shipped workloads: `instances-N.csv` for N = 100, 200, 400, 800 (converted from the
/// Dilu artifact's `instances-N.txt`, see data/README.md).
pub fn builtin(n: usize) -> Option<PackingWorkload> {
    let text = match n {
        100 => include_str!("../../data/dilu/instances-100.csv"),
        200 => include_str!("../../data/dilu/instances-200.csv"),
        400 => include_str!("../../data/dilu/instances-400.csv"),
        800 => include_str!("../../data/dilu/instances-800.csv"),
        _ => return None,
    };
    parse_csv(text).ok()
}

/// Sizes [`builtin`] ships.
pub const BUILTIN_SIZES: [usize; 4] = [100, 200, 400, 800];

/// A seeded workload of `n` instances in the shape of the artifact's: 20% training (2 or 4
/// GPUs, 25/30/35/40 GB each, request U(0.4, 0.8), limit max(request + 0.2, U(0.6, 1.0))),
/// 20% LLM inference (20–30 GB, request U(0.4, 0.6), limit U(request + 0.2, 0.8)), 60%
/// inference (3–10 GB, request U(0.2, 0.4), limit max(request + 0.2, U(0.3, 0.6))), shares
/// rounded to 0.01 and capped at 1; shuffled and started 1 s apart; 0.6·n of the inference
/// instances (LLM included) stop 1–3 whole minutes after their start and 0.1·n of the
/// training jobs 10–15 minutes after. (Distribution parameters from the artifact's
/// `service_generator.py`; our own generator and seed, so not the same draws.)
pub fn generate(n: usize, seed: u64) -> PackingWorkload {
    let mut rng = SimRng::seed_from_u64(seed);
    let r2 = |x: f64| ((x * 100.0).round() / 100.0).min(1.0);
    let training = n * 2 / 10;
    let llm = n * 2 / 10;
    let inference = n - training - llm;
    let mut specs: Vec<InstanceSpec> = Vec::with_capacity(n);
    let mut push = |kind: InstanceKind, i: usize, req: f64, lim: f64, mem: Vec<f64>| {
        let name = format!("{}-{i}", kind.name());
        specs.push(InstanceSpec {
            service: name.clone(),
            name,
            kind,
            sm_request: (req * 1000.0).round() as u32,
            sm_limit: (lim.max(req) * 1000.0).round() as u32,
            memory_mb: mem.iter().map(|m| (m * 1000.0).round() as u32).collect(),
        });
    };
    for i in 0..training {
        let gpus = if rng.below(2) == 0 { 2 } else { 4 };
        let mem = [25.0, 30.0, 35.0, 40.0][rng.below(4) as usize];
        let req = r2(rng.uniform_range(0.4, 0.8));
        let lim = r2((req + 0.2).max(rng.uniform_range(0.6, 1.0)));
        push(InstanceKind::Training, i, req, lim, vec![mem; gpus]);
    }
    for i in 0..inference {
        let mem = (3 + rng.below(8)) as f64;
        let req = r2(rng.uniform_range(0.2, 0.4));
        let lim = r2((req + 0.2).max(rng.uniform_range(0.3, 0.6)));
        push(InstanceKind::Inference, i, req, lim, vec![mem]);
    }
    for i in 0..llm {
        let mem = (20 + rng.below(11)) as f64;
        let req = r2(rng.uniform_range(0.4, 0.6));
        let lim = r2(rng.uniform_range(req + 0.2, 0.8_f64.max(req + 0.2)));
        push(InstanceKind::LlmInference, i, req, lim, vec![mem]);
    }
    // Fisher-Yates shuffle.
    for i in (1..specs.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        specs.swap(i, j);
    }
    // (time s, creation order, action, spec index)
    let mut timeline: Vec<(u64, usize, EventAction, usize)> = Vec::with_capacity(n * 2);
    for i in 0..specs.len() {
        timeline.push((i as u64, timeline.len(), EventAction::Start, i));
    }
    let mut pick_stops = |want: usize, pool: Vec<usize>, lo: u64, hi: u64| {
        let mut pool = pool;
        for k in 0..want.min(pool.len()) {
            let j = k + rng.below((pool.len() - k) as u64) as usize;
            pool.swap(k, j);
            let minutes = lo + rng.below(hi - lo + 1);
            let idx = pool[k];
            timeline.push((
                idx as u64 + minutes * 60,
                timeline.len(),
                EventAction::Stop,
                idx,
            ));
        }
    };
    let served: Vec<usize> = (0..specs.len())
        .filter(|&i| specs[i].kind != InstanceKind::Training)
        .collect();
    let trained: Vec<usize> = (0..specs.len())
        .filter(|&i| specs[i].kind == InstanceKind::Training)
        .collect();
    pick_stops(n * 6 / 10, served, 1, 3);
    pick_stops(n / 10, trained, 10, 15);
    timeline.sort_by_key(|&(t, order, _, _)| (t, order));
    PackingWorkload {
        events: timeline
            .into_iter()
            .map(|(t, _, action, i)| PackingEvent {
                at: SimTime::from_secs(t),
                action,
                instance: specs[i].clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_with_the_artifact_counts() {
        for n in BUILTIN_SIZES {
            let w = builtin(n).unwrap();
            assert_eq!(w.instances(), n);
            // 0.6 n inference stops + 0.1 n training stops (ORIGIN.md).
            assert_eq!(w.events.len(), n + n * 6 / 10 + n / 10, "{n}");
            let training = w
                .events
                .iter()
                .filter(|e| {
                    e.action == EventAction::Start && e.instance.kind == InstanceKind::Training
                })
                .count();
            assert_eq!(training, n * 2 / 10);
        }
        assert!(builtin(300).is_none());
    }

    #[test]
    fn dict_lines_and_csv_agree() {
        let dict = "{'Time': '2024-06-19 15:46:09', 'Action': 'start', 'Instance': {'service_name': 'training-8bfjn3', 'type': 'training', 'gpu_num': 2, 'sm_requests': 0.55, 'sm_limits': 0.81, 'memory': [30, 30]}}\n\
{'Time': '2024-06-19 15:46:10', 'Action': 'start', 'Instance': {'service_name': 'inference-yzk5aq', 'type': 'inference', 'gpu_num': 1, 'sm_requests': 0.39, 'sm_limits': 0.5900000000000001, 'memory': [4]}}\n\
{'Time': '2024-06-19 15:46:14', 'Action': 'start', 'Instance': {'service_name': 'llm-inference-184hed', 'type': 'llm-inference', 'gpu_num': 1, 'sm_requests': 0.43, 'sm_limits': 0.64, 'memory': [28]}}\n\
{'Time': '2024-06-20 00:00:10', 'Action': 'delete', 'Instance': {'service_name': 'inference-yzk5aq', 'type': 'inference', 'gpu_num': 1, 'sm_requests': 0.39, 'sm_limits': 0.59, 'memory': [4]}}\n";
        let a = parse_dict_lines(dict).unwrap();
        let b = parse_csv(&a.to_csv()).unwrap();
        assert_eq!(a, b);
        assert_eq!(parse_any(dict).unwrap(), a);
        assert_eq!(a.events[1].instance.sm_limit, 590);
        assert_eq!(a.events[0].instance.memory_mb, vec![30_000, 30_000]);
        assert_eq!(a.events[2].instance.kind, InstanceKind::LlmInference);
        // Across midnight: 8 h 14 min 1 s after the first event.
        assert_eq!(a.events[3].at, SimTime::from_secs(8 * 3600 + 14 * 60 + 1));
    }

    #[test]
    fn bad_values_are_typed_errors_with_lines() {
        let ok = "0,start,a,inference,1,0.3,0.5,4\n";
        assert!(parse_csv(ok).is_ok());
        for (bad, needle) in [
            ("0,start,a,inference,1,-0.3,0.5,4\n", "sm_request"),
            ("0,start,a,inference,1,abc,0.5,4\n", "not a number"),
            ("0,start,a,inference,1,0.3,1.5,4\n", "sm_limit"),
            ("0,start,a,inference,1,0.5,0.3,4\n", "below"),
            ("0,start,a,inference,1,0.3,0.5,-4\n", "memory"),
            ("0,start,a,inference,1,0.3,0.5,NaN\n", "memory"),
            ("0,start,a,inference,1,0.3,0.5,inf\n", "memory"),
            ("0,start,a,training,2,0.3,0.5,4\n", "memory entries"),
            ("0,start,a,training,0,0.3,0.5,4\n", "gpu_num"),
            ("0,start,a,inference,2,0.3,0.5,4;4\n", "one GPU"),
            ("0,start,a,quantum,1,0.3,0.5,4\n", "unknown instance type"),
            ("0,launch,a,inference,1,0.3,0.5,4\n", "action"),
            ("-1,start,a,inference,1,0.3,0.5,4\n", "time"),
            ("0,start,a,inference,1,0.3,0.5\n", "fields"),
            ("0,stop,a,inference,1,0.3,0.5,4\n", "not running"),
            (
                "5,start,a,inference,1,0.3,0.5,4\n3,start,b,inference,1,0.3,0.5,4\n",
                "goes back",
            ),
            (
                "0,start,a,inference,1,0.3,0.5,4\n1,start,a,inference,1,0.3,0.5,4\n",
                "twice",
            ),
        ] {
            let e = parse_csv(bad).unwrap_err();
            assert!(e.to_string().contains(needle), "{bad:?}: {e}");
        }
        for bad in [
            "{'Time': '2024-06-19 15:46:09', 'Action': 'start'}",
            "{'Time': 'yesterday', 'Action': 'start', 'Instance': {}}",
            "{'Time': '2024-13-19 15:46:09', 'Action': 'start', 'Instance': {}}",
            "{'Time': '2024-06-19 15:46:09', 'Action': 'start', 'Instance': {'service_name': 'x', 'type': 'inference', 'gpu_num': 1, 'sm_requests': 'lots', 'sm_limits': 0.5, 'memory': [4]}}",
            "{'Time': '2024-06-19 15:46:09', 'Action': 'start', 'Instance': {'service_name': 'x', 'type': 'inference', 'gpu_num': 1, 'sm_requests': 0.3, 'sm_limits': 0.5, 'memory': [4]}",
            "{'Time': '2024-06-19 15:46:09' 'Action': 'start'}",
            "[1, 2, 3]",
            "{'a': [[[[[[[[[[[1]]]]]]]]]]]}",
            "{'Time': '2024-06-19 15:46:09\\n'}",
        ] {
            assert!(parse_dict_lines(bad).is_err(), "{bad}");
        }
    }

    /// Issue 36: years 0001-9999 were accepted, spans far past the input limit.
    #[test]
    fn dict_line_times_are_held_to_the_input_limit() {
        let line = |time: &str, name: &str| {
            format!(
                "{{'Time': '{time}', 'Action': 'start', 'Instance': {{'service_name': '{name}', \
                 'type': 'inference', 'gpu_num': 1, 'sm_requests': 0.3, 'sm_limits': 0.5, \
                 'memory': [4]}}}}\n"
            )
        };
        let far = line("0001-01-01 00:00:00", "a") + &line("9999-12-31 23:59:59", "b");
        let e = parse_dict_lines(&far).unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("beyond the limit"),
            "{e}"
        );
        // 31 years later is within it.
        let near = line("2000-01-01 00:00:00", "a") + &line("2031-01-01 00:00:00", "b");
        assert!(parse_dict_lines(&near).is_ok());
    }

    #[test]
    fn generator_is_seeded_and_well_formed() {
        let a = generate(3200, 7);
        assert_eq!(a, generate(3200, 7));
        assert_ne!(a, generate(3200, 8));
        assert_eq!(a.instances(), 3200);
        assert_eq!(a.events.len(), 3200 + 1920 + 320);
        // It round-trips through the checked reader: valid shares, names and order.
        assert_eq!(parse_csv(&a.to_csv()).unwrap(), a);
        for e in &a.events {
            let i = &e.instance;
            assert!(i.sm_request <= i.sm_limit && i.sm_limit <= 1000, "{i:?}");
            let want = match i.kind {
                InstanceKind::Training => 400..=800,
                InstanceKind::Inference => 200..=400,
                InstanceKind::LlmInference => 400..=600,
            };
            assert!(want.contains(&i.sm_request), "{i:?}");
        }
    }
}
