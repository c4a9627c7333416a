//! The Slurm backend: `sbatch`, `squeue`, `scontrol`, `scancel`, each run with an argument
//! vector (no shell), and parsers for their output.
//!
//! A placement becomes `sbatch --parsable --job-name=tessera-<id>-<attempt> --nodelist=NODE
//! --gres=gpu:TYPE:N --cpus-per-task=C --mem=MM ...`; a placement over several nodes with
//! different shares becomes a heterogeneous job (components separated by `:`), so each node gets
//! exactly what the policy chose. The job script is written to a file named after the run.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use tessera_model::{Bytes, MilliCpu};

use super::{
    run_command, write_job_files, Backend, GresCount, Handle, InventoryNode, Launch, NodeHealth,
    RunStatus,
};
use crate::config::SlurmConfig;
use crate::error::BackendError;

const MIB: u64 = 1 << 20;
/// Longest a cancel waits for Slurm to end the job (its KillWait, with a margin).
const CANCEL_SETTLE: Duration = Duration::from_secs(15);

/// Splits one `scontrol -o show ...` record (`Key=Value Key=Value ...`) into pairs. A word that
/// does not start a new `Key=` continues the previous value (values such as `OS=Linux 6.1 #1`
/// contain spaces).
pub fn parse_key_values(record: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for word in record.split_whitespace() {
        let key_end = word.find('=').filter(|&i| {
            i > 0
                && word.as_bytes()[0].is_ascii_alphabetic()
                && word[..i]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_:/".contains(&b))
        });
        match key_end {
            Some(i) => out.push((word[..i].to_string(), word[i + 1..].to_string())),
            None => {
                if let Some(last) = out.last_mut() {
                    last.1.push(' ');
                    last.1.push_str(word);
                }
            }
        }
    }
    out
}

/// Splits `scontrol show` output into records: one per line with `-o`, or blocks that start
/// with `first_key=` in the multi-line format.
fn records(text: &str, first_key: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with(first_key) && t[first_key.len()..].starts_with('=') {
            out.push(t.to_string());
        } else if let Some(last) = out.last_mut() {
            if !t.is_empty() {
                last.push(' ');
                last.push_str(t);
            }
        }
    }
    out
}

/// Parses a GRES string such as `gpu:a100:8`, `gpu:a100_1g.10gb:7,gpu:a100_3g.40gb:2`,
/// `gpu:4(S:0-1)`, `gpu:tesla:2(S:0),mps:100` or `(null)`; only `gpu` entries are kept.
pub fn parse_gres(text: &str) -> Vec<GresCount> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    for item in items {
        let item = item.trim();
        let item = item.find('(').map_or(item, |i| &item[..i]);
        let parts: Vec<&str> = item.split(':').filter(|p| *p != "no_consume").collect();
        if parts.first() != Some(&"gpu") {
            continue;
        }
        let (kind, count) = match parts.as_slice() {
            [_, n] => (None, *n),
            [_, t, n] => (Some(t.to_string()), *n),
            _ => continue,
        };
        if let Ok(count) = count.parse::<u32>() {
            if count > 0 {
                out.push(GresCount { kind, count });
            }
        }
    }
    out
}

fn node_health(state: &str) -> NodeHealth {
    let s = state.to_ascii_uppercase();
    if [
        "DOWN",
        "FAIL",
        "INVAL",
        "FUTURE",
        "NOT_RESPONDING",
        "POWER",
        "UNKNOWN",
    ]
    .iter()
    .any(|k| s.contains(k))
        || s.ends_with('*')
    {
        NodeHealth::Down
    } else if s.contains("DRAIN") || s.contains("MAINT") || s.contains("RESERVED") {
        NodeHealth::Draining
    } else {
        NodeHealth::Up
    }
}

/// Parses `scontrol -o show node` (or its multi-line form) into inventory nodes.
pub fn parse_nodes(text: &str) -> Result<Vec<InventoryNode>, BackendError> {
    let mut nodes = Vec::new();
    for rec in records(text, "NodeName") {
        let kv: HashMap<String, String> = parse_key_values(&rec).into_iter().collect();
        let get = |k: &str| kv.get(k).map(String::as_str);
        let name = get("NodeName").unwrap_or_default().to_string();
        let cpus = get("CPUEfctv")
            .or(get("CPUTot"))
            .and_then(|c| c.parse::<u64>().ok())
            .ok_or_else(|| BackendError::Parse {
                what: "node CPUs",
                detail: rec.clone(),
            })?;
        let mem_mb = get("RealMemory")
            .and_then(|c| c.parse::<u64>().ok())
            .ok_or_else(|| BackendError::Parse {
                what: "node RealMemory",
                detail: rec.clone(),
            })?;
        nodes.push(InventoryNode {
            name,
            cpu: MilliCpu::from_cores(cpus),
            memory: Bytes(mem_mb.saturating_mul(MIB)),
            gres: parse_gres(get("Gres").unwrap_or("(null)")),
            health: node_health(get("State").unwrap_or("UNKNOWN")),
        });
    }
    Ok(nodes)
}

/// One line of `squeue -o '%i|%T|%r|%N|%j'`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRow {
    /// Job id without a heterogeneous-job offset (`3` for `3+1`).
    pub job_id: String,
    /// Heterogeneous-job component (0 for plain jobs).
    pub offset: u32,
    /// Slurm state (`RUNNING`, `PENDING`, ...).
    pub state: String,
    /// Pending reason (`Resources`, `None`, ...).
    pub reason: String,
    /// Allocated nodes.
    pub nodes: String,
    /// Job name.
    pub name: String,
}

/// The `squeue` format string [`parse_squeue`] reads.
pub const SQUEUE_FORMAT: &str = "%i|%T|%r|%N|%j";

/// Parses `squeue -h -o '%i|%T|%r|%N|%j'`; malformed lines are skipped.
pub fn parse_squeue(text: &str) -> Vec<QueueRow> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.trim().splitn(5, '|');
            let id = it.next()?.trim();
            let state = it.next()?.trim().to_string();
            let reason = it.next()?.trim().to_string();
            let nodes = it.next()?.trim().to_string();
            let name = it.next()?.trim().to_string();
            let (job_id, offset) = match id.split_once('+') {
                Some((j, o)) => (j, o.parse().ok()?),
                None => (id, 0),
            };
            if job_id.is_empty() || !job_id.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(QueueRow {
                job_id: job_id.to_string(),
                offset,
                state,
                reason,
                nodes,
                name,
            })
        })
        .collect()
}

/// Maps a Slurm job state (and reason, exit code) to a [`RunStatus`].
pub fn run_status(state: &str, reason: &str, exit_code: Option<i32>) -> RunStatus {
    let s = state.trim().to_ascii_uppercase();
    let s = s.split(['+', ' ']).next().unwrap_or("");
    match s {
        "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESIZING"
        | "SPECIAL_EXIT" => RunStatus::Pending {
            reason: reason.to_string(),
        },
        "RUNNING" | "COMPLETING" | "SUSPENDED" | "SIGNALING" | "STAGE_OUT" | "STOPPED" => {
            RunStatus::Running
        }
        "COMPLETED" => RunStatus::Completed,
        "CANCELLED" | "REVOKED" => RunStatus::Cancelled,
        "PREEMPTED" => RunStatus::Preempted,
        "NODE_FAIL" | "BOOT_FAIL" => RunStatus::NodeFailed {
            reason: format!("{s} ({reason})"),
        },
        // The job never started: its node could not launch it.
        "FAILED" if reason.contains("LaunchFailure") => RunStatus::NodeFailed {
            reason: format!("{s} ({reason})"),
        },
        "FAILED" | "OUT_OF_MEMORY" | "TIMEOUT" | "DEADLINE" => RunStatus::Failed {
            reason: format!("{s} ({reason})"),
            exit_code,
        },
        _ => RunStatus::Unknown,
    }
}

/// Parses `scontrol -o show job ID` into (state, reason, exit code).
pub fn parse_show_job(text: &str) -> Option<(String, String, Option<i32>)> {
    let rec = records(text, "JobId").into_iter().next()?;
    let kv: HashMap<String, String> = parse_key_values(&rec).into_iter().collect();
    let state = kv.get("JobState")?.clone();
    let reason = kv.get("Reason").cloned().unwrap_or_default();
    let exit = kv
        .get("ExitCode")
        .and_then(|e| e.split(':').next()?.parse::<i32>().ok());
    Some((state, reason, exit))
}

/// The `--gres` request of one share: `gpu:TYPE:N` for whole GPUs, the MIG profile as the GRES
/// type (`gpu:3g.20gb:1`, as Slurm's `gres.conf` names MIG devices) for a MIG instance.
/// Quotas (MPS-style SM and memory limits) have no Slurm GRES the daemon can express.
fn gres_arg(share: &super::PlacedShare) -> Result<Option<String>, BackendError> {
    use super::PlacedPart;
    match share.devices.as_ref().map(|d| &d.part) {
        Some(PlacedPart::Mig { profile, .. }) => {
            let n = share.devices.as_ref().map_or(1, |d| d.indices.len().max(1));
            Ok(Some(format!("--gres=gpu:{profile}:{n}")))
        }
        Some(PlacedPart::Quota { .. }) => Err(BackendError::Unsupported(
            "the Slurm backend cannot run a job under GPU quotas (SM and memory limits)".into(),
        )),
        Some(PlacedPart::Whole) | None if share.gpus > 0 => Ok(Some(match &share.gres_type {
            Some(t) => format!("--gres=gpu:{t}:{}", share.gpus),
            None => format!("--gres=gpu:{}", share.gpus),
        })),
        Some(PlacedPart::Whole) | None => Ok(None),
    }
}

/// The `sbatch` options for one placement share (one heterogeneous-job component).
fn share_args(
    share: &super::PlacedShare,
    partition: Option<&str>,
) -> Result<Vec<String>, BackendError> {
    let mut a = vec![
        format!("--nodelist={}", share.node),
        "--nodes=1".to_string(),
        "--ntasks=1".to_string(),
        format!("--cpus-per-task={}", share.cpu.0.div_ceil(1000).max(1)),
        format!("--mem={}M", (share.memory.0 / MIB).max(1)),
    ];
    a.extend(gres_arg(share)?);
    if let Some(p) = partition {
        a.push(format!("--partition={p}"));
    }
    Ok(a)
}

/// The full `sbatch` argument vector for a launch whose script is at `script`.
pub fn sbatch_args(
    launch: &Launch,
    script: &std::path::Path,
    output: &std::path::Path,
    partition: Option<&str>,
) -> Result<Vec<String>, BackendError> {
    if launch.placement.is_empty() {
        return Err(BackendError::Unsupported("empty placement".into()));
    }
    for s in &launch.placement {
        let safe = |x: &str| {
            !x.is_empty()
                && x.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        let profile_safe = match s.devices.as_ref().map(|d| &d.part) {
            Some(super::PlacedPart::Mig { profile, .. }) => safe(profile),
            _ => true,
        };
        if !safe(&s.node) || !s.gres_type.as_deref().is_none_or(safe) || !profile_safe {
            return Err(BackendError::Unsupported(format!(
                "unsafe node or GRES name {:?}",
                s.node
            )));
        }
    }
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name={}", launch.name),
        format!("--output={}", output.display()),
        "--export=PATH,LANG".to_string(),
        "--no-requeue".to_string(),
    ];
    for (i, share) in launch.placement.iter().enumerate() {
        if i > 0 {
            args.push(":".to_string());
        }
        args.extend(share_args(share, partition)?);
    }
    args.push(script.display().to_string());
    Ok(args)
}

/// Slurm through its command-line tools.
#[derive(Debug)]
pub struct SlurmBackend {
    config: SlurmConfig,
    timeout: Duration,
}

impl SlurmBackend {
    /// A backend with these settings; creates the work directory.
    pub fn new(config: SlurmConfig) -> Result<SlurmBackend, BackendError> {
        std::fs::create_dir_all(&config.work_dir)
            .map_err(|e| BackendError::file(&config.work_dir, e))?;
        let timeout = Duration::from_secs(config.command_timeout_seconds.max(1));
        Ok(SlurmBackend { config, timeout })
    }

    fn command(&self, program: &str) -> Command {
        let path: PathBuf = match &self.config.bin_dir {
            Some(d) => d.join(program),
            None => PathBuf::from(program),
        };
        let mut c = Command::new(path);
        if let Some(conf) = &self.config.slurm_conf {
            c.env("SLURM_CONF", conf);
        }
        c
    }

    fn run(&self, program: &str, args: &[String]) -> Result<String, BackendError> {
        let mut c = self.command(program);
        c.args(args);
        let out = run_command(c, self.timeout)?;
        if !out.status.success() {
            return Err(BackendError::Command {
                program: program.to_string(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .chars()
                    .take(500)
                    .collect(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `scancel ID`; a job Slurm no longer knows is already gone (idempotent).
    fn scancel(&mut self, handle: &Handle) -> Result<(), BackendError> {
        match self.run("scancel", std::slice::from_ref(&handle.0)) {
            Ok(_) => Ok(()),
            Err(BackendError::Command { stderr, .. }) if stderr.contains("Invalid job id") => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn show_job(&self, id: &str) -> Result<Option<(String, String, Option<i32>)>, BackendError> {
        match self.run(
            "scontrol",
            &["-o".into(), "show".into(), "job".into(), id.into()],
        ) {
            Ok(text) => Ok(parse_show_job(&text)),
            Err(BackendError::Command { stderr, .. }) if stderr.contains("Invalid job id") => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

impl Backend for SlurmBackend {
    fn kind(&self) -> &'static str {
        "slurm"
    }

    fn whole_cpus(&self) -> bool {
        true
    }

    fn inventory(&mut self) -> Result<Vec<InventoryNode>, BackendError> {
        let text = self.run("scontrol", &["-o".into(), "show".into(), "node".into()])?;
        let mut nodes = parse_nodes(&text)?;
        if let Some(p) = &self.config.partition {
            let text = self.run(
                "sinfo",
                &[
                    "-h".into(),
                    "-N".into(),
                    "-p".into(),
                    p.clone(),
                    "-o".into(),
                    "%N".into(),
                ],
            )?;
            let keep: std::collections::HashSet<&str> = text.lines().map(str::trim).collect();
            nodes.retain(|n| keep.contains(n.name.as_str()));
        }
        Ok(nodes)
    }

    fn submit(&mut self, launch: &Launch) -> Result<Handle, BackendError> {
        let dir = self.config.work_dir.clone();
        let script = write_job_files(&dir, launch, &[])?;
        let output = dir.join(format!("{}.out", launch.name));
        let args = sbatch_args(launch, &script, &output, self.config.partition.as_deref())?;
        let mut c = self.command("sbatch");
        c.args(&args).current_dir(&dir);
        let out = run_command(c, self.timeout)?;
        if !out.status.success() {
            return Err(BackendError::Command {
                program: "sbatch".into(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .chars()
                    .take(500)
                    .collect(),
            });
        }
        let text = String::from_utf8_lossy(&out.stdout);
        // `--parsable` prints `ID` or `ID;CLUSTER`.
        let id = text.trim().split(';').next().unwrap_or("").trim();
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(BackendError::Parse {
                what: "sbatch job id",
                detail: text.into_owned(),
            });
        }
        Ok(Handle(id.to_string()))
    }

    /// `scancel`, then waits until Slurm says the job is over (not pending, starting, running
    /// or completing), for at most [`CANCEL_SETTLE`]: `scancel` only asks, and a job Slurm was
    /// launching at that moment still starts its script afterwards (seen: 95 ms after the
    /// daemon acknowledged the cancel). The daemon acknowledges a cancel once this returns.
    fn cancel(&mut self, handle: &Handle) -> Result<(), BackendError> {
        self.scancel(handle)?;
        let deadline = Instant::now() + CANCEL_SETTLE;
        loop {
            let over = match self.show_job(&handle.0)? {
                None => true, // purged: long over
                Some((state, reason, code)) => !matches!(
                    run_status(&state, &reason, code),
                    RunStatus::Pending { .. } | RunStatus::Running
                ),
            };
            if over {
                return Ok(());
            }
            if Instant::now() >= deadline {
                tracing::warn!(job = %handle.0, "Slurm has not ended the cancelled job yet");
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn preempt(&mut self, handle: &Handle) -> Result<(), BackendError> {
        // scancel sends SIGTERM, waits KillWait, then SIGKILL: the job's checkpoint window.
        // The daemon requeues the job itself, so that the policy chooses its next placement
        // (Slurm gives its GPUs to nobody before the job is over).
        self.scancel(handle)
    }

    fn poll(&mut self, handles: &[Handle]) -> Result<Vec<(Handle, RunStatus)>, BackendError> {
        if handles.is_empty() {
            return Ok(Vec::new());
        }
        let text = self.run(
            "squeue",
            &[
                "-h".into(),
                "-t".into(),
                "all".into(),
                "-o".into(),
                SQUEUE_FORMAT.into(),
            ],
        )?;
        let mut rows: HashMap<String, QueueRow> = HashMap::new();
        for row in parse_squeue(&text) {
            if row.offset == 0 || !rows.contains_key(&row.job_id) {
                rows.insert(row.job_id.clone(), row);
            }
        }
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            let status = match rows.get(&h.0) {
                Some(r) => {
                    let st = run_status(&r.state, &r.reason, None);
                    if matches!(st, RunStatus::Failed { .. }) {
                        // The exit code is only in scontrol.
                        match self.show_job(&h.0)? {
                            Some((s, reason, code)) => run_status(&s, &reason, code),
                            None => st,
                        }
                    } else {
                        st
                    }
                }
                None => match self.show_job(&h.0)? {
                    Some((s, reason, code)) => run_status(&s, &reason, code),
                    None => RunStatus::Unknown,
                },
            };
            out.push((h.clone(), status));
        }
        Ok(out)
    }

    fn find(&mut self, run_name: &str) -> Result<Option<Handle>, BackendError> {
        let text = self.run(
            "squeue",
            &[
                "-h".into(),
                "-t".into(),
                "all".into(),
                "-n".into(),
                run_name.into(),
                "-o".into(),
                SQUEUE_FORMAT.into(),
            ],
        )?;
        Ok(parse_squeue(&text)
            .into_iter()
            .find(|r| r.name == run_name)
            .map(|r| Handle(r.job_id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from Debian's Slurm 22.05 (scripts/slurm/up.sh).
    const NODES_ONELINE: &str = "NodeName=n1 Arch=x86_64 CoresPerSocket=32  CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.29 AvailableFeatures=a100 ActiveFeatures=a100 Gres=gpu:a100:8 NodeAddr=127.0.0.1 NodeHostName=vm Port=17001 Version=22.05.8 OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=512000 AllocMem=0 FreeMem=23769 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-22T04:03:28 SlurmdStartTime=2026-11-22T05:21:57 LastBusyTime=2026-11-22T05:21:57 CfgTRES=cpu=64,mem=500G,billing=64 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
NodeName=n3 Arch=x86_64 CoresPerSocket=16  CPUAlloc=0 CPUEfctv=32 CPUTot=32 CPULoad=0.29 Gres=gpu:v100:4 RealMemory=256000 State=DOWN* ThreadsPerCore=1
";

    const NODE_MULTILINE: &str = "NodeName=n4 Arch=x86_64 CoresPerSocket=32 
   CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.29
   AvailableFeatures=mig
   ActiveFeatures=mig
   Gres=gpu:a100_1g.10gb:7,gpu:a100_3g.40gb:2
   NodeAddr=127.0.0.1 NodeHostName=vm Port=17004 Version=22.05.8
   OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0 
   RealMemory=512000 AllocMem=0 FreeMem=23768 Sockets=2 Boards=1
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu 

";

    const SQUEUE: &str = "2|PENDING|Resources||tessera-2-1
1|RUNNING|None|n1|tessera-1-1
3+0|RUNNING|None|n1|tessera-3-1
3+1|RUNNING|None|n2|tessera-3-1
5|FAILED|NonZeroExitCode|n3|tessera-5-1
garbage line
x|RUNNING|None|n1|bad
";

    const SHOW_JOB: &str = "JobId=5 JobName=tessera-5-1 UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901755 Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00 TimeLimit=UNLIMITED NodeList=n3 BatchHost=n3 TRES=cpu=1,mem=1G,node=1,billing=1 Command=(null) WorkDir=/work/main StdErr=/dev/null StdIn=/dev/null StdOut=/dev/null Power= \n";

    #[test]
    fn parses_nodes_in_both_formats() {
        let nodes = parse_nodes(NODES_ONELINE).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].name, "n1");
        assert_eq!(nodes[0].cpu, MilliCpu::from_cores(64));
        assert_eq!(nodes[0].memory, Bytes(512_000 * MIB));
        assert_eq!(
            nodes[0].gres,
            vec![GresCount {
                kind: Some("a100".into()),
                count: 8
            }]
        );
        assert_eq!(nodes[0].health, NodeHealth::Up);
        assert_eq!(nodes[1].health, NodeHealth::Down);
        let n4 = parse_nodes(NODE_MULTILINE).unwrap();
        assert_eq!(n4.len(), 1);
        assert_eq!(
            n4[0].gres,
            vec![
                GresCount {
                    kind: Some("a100_1g.10gb".into()),
                    count: 7
                },
                GresCount {
                    kind: Some("a100_3g.40gb".into()),
                    count: 2
                }
            ]
        );
        assert_eq!(n4[0].health, NodeHealth::Draining);
        assert!(parse_nodes("NodeName=x State=IDLE\n").is_err());
    }

    #[test]
    fn parses_gres_variants() {
        assert_eq!(parse_gres("(null)"), vec![]);
        assert_eq!(
            parse_gres("gpu:4(S:0-1)"),
            vec![GresCount {
                kind: None,
                count: 4
            }]
        );
        assert_eq!(
            parse_gres("gpu:tesla:2(S:0,1),mps:100,gpu:a100:no_consume:1"),
            vec![
                GresCount {
                    kind: Some("tesla".into()),
                    count: 2
                },
                GresCount {
                    kind: Some("a100".into()),
                    count: 1
                }
            ]
        );
        assert_eq!(parse_gres("gpu:a100:lots"), vec![]);
    }

    #[test]
    fn key_values_keep_spaced_values() {
        let kv = parse_key_values("A=1 OS=Linux 6.1 #1 SMP B=x=y AllocNode:Sid=h:1");
        assert_eq!(kv[1], ("OS".into(), "Linux 6.1 #1 SMP".into()));
        assert_eq!(kv[2], ("B".into(), "x=y".into()));
        assert_eq!(kv[3], ("AllocNode:Sid".into(), "h:1".into()));
    }

    #[test]
    fn parses_squeue_and_states() {
        let rows = parse_squeue(SQUEUE);
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0].nodes, "");
        assert_eq!(rows[2].job_id, "3");
        assert_eq!(rows[3].offset, 1);
        assert_eq!(
            run_status(&rows[0].state, &rows[0].reason, None),
            RunStatus::Pending {
                reason: "Resources".into()
            }
        );
        assert_eq!(run_status("RUNNING", "None", None), RunStatus::Running);
        assert_eq!(
            run_status("COMPLETED", "None", Some(0)),
            RunStatus::Completed
        );
        assert_eq!(
            run_status("CANCELLED by 0", "None", None),
            RunStatus::Cancelled
        );
        assert_eq!(run_status("weird", "", None), RunStatus::Unknown);
        assert_eq!(
            run_status("NODE_FAIL", "None", None),
            RunStatus::NodeFailed {
                reason: "NODE_FAIL (None)".into()
            },
            "a node failure is not the job's fault: the daemon requeues it"
        );
        assert!(matches!(
            run_status("FAILED", "JobLaunchFailure", None),
            RunStatus::NodeFailed { .. }
        ));
        let (state, reason, code) = parse_show_job(SHOW_JOB).unwrap();
        assert_eq!(
            (state.as_str(), reason.as_str(), code),
            ("FAILED", "NonZeroExitCode", Some(3))
        );
        assert!(matches!(
            run_status(&state, &reason, code),
            RunStatus::Failed {
                exit_code: Some(3),
                ..
            }
        ));
        assert!(parse_show_job("").is_none());
    }

    #[test]
    fn sbatch_arguments_for_single_and_heterogeneous_placements() {
        use super::super::{Payload, PlacedShare};
        let share = |node: &str, t: Option<&str>, gpus, cores| PlacedShare {
            node: node.into(),
            gres_type: t.map(String::from),
            gpus,
            cpu: MilliCpu::from_cores(cores),
            memory: Bytes(16_000 * MIB),
            devices: None,
        };
        let mut launch = Launch {
            name: "tessera-9-2".into(),
            job_id: 9,
            attempt: 2,
            tenant: "alice".into(),
            payload: Payload::Command(vec!["true".into()]),
            env: vec![],
            placement: vec![share("n4", Some("a100_3g.40gb"), 1, 8)],
            plan: tessera_model::ParallelPlan::data_parallel(1),
            gpu_type: "A100-80GB-MIG-3g.40gb".into(),
        };
        let p = std::path::Path::new;
        let args = sbatch_args(
            &launch,
            p("/w/tessera-9-2.sh"),
            p("/w/tessera-9-2.out"),
            Some("gpu"),
        )
        .unwrap();
        assert_eq!(
            args,
            [
                "--parsable",
                "--job-name=tessera-9-2",
                "--output=/w/tessera-9-2.out",
                "--export=PATH,LANG",
                "--no-requeue",
                "--nodelist=n4",
                "--nodes=1",
                "--ntasks=1",
                "--cpus-per-task=8",
                "--mem=16000M",
                "--gres=gpu:a100_3g.40gb:1",
                "--partition=gpu",
                "/w/tessera-9-2.sh"
            ]
        );
        launch.placement = vec![
            share("n1", Some("a100"), 6, 48),
            share("n2", Some("a100"), 2, 16),
        ];
        let args = sbatch_args(&launch, p("/w/s.sh"), p("/w/o"), None).unwrap();
        let colon = args.iter().position(|a| a == ":").unwrap();
        assert!(args[..colon].contains(&"--gres=gpu:a100:6".to_string()));
        assert!(args[colon..].contains(&"--nodelist=n2".to_string()));
        assert_eq!(args.last().unwrap(), "/w/s.sh");
        launch.placement = vec![share("n1;rm -rf", None, 1, 1)];
        assert!(sbatch_args(&launch, p("/w/s.sh"), p("/w/o"), None).is_err());
        // Named whole GPUs keep the typed GRES; a MIG instance asks for its profile.
        use super::super::{PlacedDevices, PlacedPart};
        let mut whole = share("n1", Some("a100"), 2, 4);
        whole.devices = Some(PlacedDevices {
            indices: vec![1, 3],
            part: PlacedPart::Whole,
        });
        let mut mig = share("n2", Some("a100"), 0, 4);
        mig.devices = Some(PlacedDevices {
            indices: vec![0],
            part: PlacedPart::Mig {
                profile: "3g.20gb".into(),
                start: 4,
            },
        });
        launch.placement = vec![whole, mig.clone()];
        let args = sbatch_args(&launch, p("/w/s.sh"), p("/w/o"), None).unwrap();
        let gres: Vec<&String> = args.iter().filter(|a| a.starts_with("--gres")).collect();
        assert_eq!(gres, ["--gres=gpu:a100:2", "--gres=gpu:3g.20gb:1"]);
        // Quotas cannot be expressed; hostile profile names never reach sbatch.
        let mut quota = share("n1", Some("a100"), 0, 4);
        quota.devices = Some(PlacedDevices {
            indices: vec![0],
            part: PlacedPart::Quota {
                sm_request: 300,
                sm_limit: 500,
                memory: Bytes(1 << 30),
            },
        });
        launch.placement = vec![quota];
        assert!(matches!(
            sbatch_args(&launch, p("/w/s.sh"), p("/w/o"), None),
            Err(BackendError::Unsupported(_))
        ));
        mig.devices = Some(PlacedDevices {
            indices: vec![0],
            part: PlacedPart::Mig {
                profile: "3g;id".into(),
                start: 0,
            },
        });
        launch.placement = vec![mig];
        assert!(sbatch_args(&launch, p("/w/s.sh"), p("/w/o"), None).is_err());
    }

    #[test]
    fn slurm_declines_retune_and_reconfigure_with_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = SlurmBackend::new(crate::config::SlurmConfig {
            work_dir: dir.path().to_path_buf(),
            partition: None,
            slurm_conf: None,
            bin_dir: None,
            gres_map: Default::default(),
            default_gpu: None,
            command_timeout_seconds: 1,
        })
        .unwrap();
        let r = super::super::Retune {
            handle: Handle("41".into()),
            job_id: 1,
            attempt: 1,
            placement: vec![],
        };
        assert_eq!(
            b.retune(&r),
            Err(BackendError::Declined {
                action: "retune",
                backend: "slurm"
            })
        );
        let c = super::super::Reconfigure {
            node: "n1".into(),
            gpu: 0,
            from: None,
            to: Some(vec![]),
        };
        assert_eq!(
            b.reconfigure(&c),
            Err(BackendError::Declined {
                action: "reconfigure",
                backend: "slurm"
            })
        );
    }
}
