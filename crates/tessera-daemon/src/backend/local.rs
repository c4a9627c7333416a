//! The local backend: each run is a child process on this machine.
//!
//! A run lives in `WORK_DIR/<run name>/` (mode 0700): the generated script, `output.log`
//! (stdout and stderr, mode 0600), `pid` (written by the wrapper before the job starts), `exit`
//! (written when it ends) and `devices` (the GPU indices it got). The wrapper is a fixed
//! `/bin/sh -c` string; the run directory is passed to it as a positional argument, so no user
//! text reaches a shell command line. Because the state is in files, a restarted daemon finds
//! and adopts the runs of the previous one. GPUs are exposed through `CUDA_VISIBLE_DEVICES`;
//! CPU and memory are not enforced.
//!
//! A run's processes are its own process group (led by the wrapper) plus every process
//! carrying `TESSERA_RUN=<run directory>` in its environment, which also finds those that left the
//! group (`setsid`). A run is over, and its GPUs free, only when none of them is left: when the
//! wrapper ends (or is killed from outside) the rest is killed first.
//!
//! With `runAs`, a tenant's jobs run as a configured Unix user (the daemon must be root), and
//! the run directory, with the job's token in its script, belongs to that user alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{
    quota_file, quota_json, replace_file, run_command, write_job_files, Backend, GresCount, Handle,
    InventoryNode, Launch, NodeHealth, PlacedMig, PlacedPart, Reconfigure, Retune, RunStatus,
};
use crate::config::LocalConfig;
use crate::error::BackendError;

/// The wrapper records its pid and the job's exit status in files, each with one short
/// `write` ending in a newline: a reader takes a record only once its newline is there
/// ([`read_record`]), so no rename is needed (an `mv` would cost two processes per run).
const WRAPPER: &str = r#"d="$1"; echo $$ > "$d/pid"
"$d/job.sh"; rc=$?
echo "$rc" > "$d/exit"; exit "$rc""#;

/// Environment variable holding the run's directory in every process of it (inherited by
/// descendants; the path is unique to the run and to this daemon's work directory).
pub const RUN_MARKER: &str = "TESSERA_RUN";
/// Time a stopped run gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Longest wait for the last process of a stopped run on a GPU about to be reconfigured.
const RECONFIGURE_WAIT: Duration = Duration::from_secs(10);
/// File in the work directory keeping the MIG device ids across daemon restarts.
const MIG_IDS_FILE: &str = "mig-devices.json";
/// Time limit of one `nvidia-smi` call.
const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(120);

/// Child processes on this machine.
#[derive(Debug)]
pub struct LocalBackend {
    config: LocalConfig,
    children: HashMap<String, Child>,
    /// GPU indices in use per node, by run; kept until nothing of the run is left.
    devices: HashMap<String, Vec<(String, Vec<u32>)>>,
    /// Runs stopped (SIGTERM sent) whose processes may not all be gone yet.
    stopping: BTreeSet<String>,
    /// Tenant -> (uid, gid) to run its jobs as.
    users: BTreeMap<String, (u32, u32)>,
    /// MIG device ids (`MIG-<uuid>`, as `nvidia-smi -L` prints them) of the instances of each
    /// (node, GPU) this backend partitioned.
    mig_ids: BTreeMap<(String, u32), Vec<(PlacedMig, String)>>,
}

/// One GPU's MIG device ids as stored in [`MIG_IDS_FILE`].
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredMigIds {
    node: String,
    gpu: u32,
    instances: Vec<(PlacedMig, String)>,
}

/// The MIG device ids a previous daemon stored; none when the file is absent or unreadable
/// (MIG launches then wait for the policy to reconfigure the GPU).
fn load_mig_ids(path: &Path) -> BTreeMap<(String, u32), Vec<(PlacedMig, String)>> {
    let Ok(Some(text)) = read_file(path) else {
        return BTreeMap::new();
    };
    match serde_json::from_str::<Vec<StoredMigIds>>(&text) {
        Ok(v) => v
            .into_iter()
            .map(|g| ((g.node, g.gpu), g.instances))
            .collect(),
        Err(e) => {
            tracing::warn!("{}: {e}; MIG device ids forgotten", path.display());
            BTreeMap::new()
        }
    }
}

/// The compute slices of a MIG profile name (`3g.20gb` -> 3), for ordering.
fn compute_slices(profile: &str) -> u32 {
    profile
        .split('g')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// MIG profile names reach `nvidia-smi` only as `[0-9a-z.+]` words (`1g.10gb+me` exists).
fn safe_profile(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 32
        && p.bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'.' || b == b'+')
}

/// The MIG devices of GPU `gpu` in `nvidia-smi -L` output, as (profile, device id) in the
/// order listed:
///
/// ```text
/// GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5b…)
///   MIG 3g.20gb     Device  0: (UUID: MIG-c6d4…)
/// ```
pub fn parse_mig_list(text: &str, gpu: u32) -> Vec<(String, String)> {
    let mut current: Option<u32> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("GPU ") {
            current = rest.split(':').next().and_then(|n| n.trim().parse().ok());
            continue;
        }
        if current != Some(gpu) {
            continue;
        }
        let Some(rest) = t.strip_prefix("MIG ") else {
            continue;
        };
        let Some(profile) = rest.split_whitespace().next() else {
            continue;
        };
        let Some((_, uuid)) = rest.split_once("UUID: ") else {
            continue;
        };
        let id = uuid.trim_end_matches(')').trim();
        if !id.is_empty() {
            out.push((profile.to_string(), id.to_string()));
        }
    }
    out
}

fn safe_run_name(name: &str) -> bool {
    name.starts_with("tessera-") && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// True for errors that mean "no such process (any more)".
fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// State letter and process group of a process; `Ok(None)` when it does not exist.
fn stat_of(pid: i32) -> std::io::Result<Option<(char, i32)>> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Ok(None);
    };
    let mut f = rest.split_whitespace();
    let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
    let pgrp = f.nth(1).and_then(|g| g.parse().ok()).unwrap_or(0);
    Ok(Some((state, pgrp)))
}

/// True when `pid` is alive and leads its own process group (as our wrappers do).
fn leads_group(pid: i32) -> bool {
    matches!(stat_of(pid), Ok(Some((state, pgrp))) if pgrp == pid && state != 'Z')
}

fn signal_group(pid: i32, sig: i32) {
    if pid > 1 && leads_group(pid) {
        // SAFETY: kill(2) with a negative pid signals a process group; it has no memory effects.
        unsafe {
            libc::kill(-pid, sig);
        }
    }
}

fn signal(pid: i32, sig: i32) {
    if pid > 1 {
        // SAFETY: kill(2) has no memory effects; callers pass only processes of our runs.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The trimmed contents of a file, `Ok(None)` when it does not exist. Other errors (out of
/// descriptors, unreadable) are errors: they say nothing about the run.
fn read_file(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A record the wrapper writes (pid, exit status): `None` while the file is missing, or not
/// yet complete (no final newline: created but not yet written).
fn read_record(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(s.ends_with('\n').then(|| s.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn read_trim(path: &Path) -> Option<String> {
    read_file(path).ok().flatten()
}

/// Whether a live process's command line mentions `dir` (our wrapper for that run); `None`
/// when that cannot be known (e.g. out of descriptors).
fn process_alive_for(pid: i32, dir: &Path) -> Option<bool> {
    let cmdline = match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(c) => c,
        Err(e) if gone(&e) => return Some(false),
        Err(_) => return None,
    };
    let needle = dir.as_os_str().as_encoded_bytes();
    let alive = cmdline.windows(needle.len().max(1)).any(|w| w == needle);
    // A zombie (exited, not reaped) has an empty cmdline, so it is not alive.
    Some(alive && !cmdline.is_empty())
}

/// Live (not zombie) processes of the run in `dir`: members of process group `group` (pass it
/// only while its leader, our wrapper, is verified alive: a group id can be reused once empty),
/// and every process whose environment carries the run's marker.
fn run_processes(dir: &Path, group: Option<i32>) -> std::io::Result<Vec<i32>> {
    Ok(runs_processes(&[(dir.to_path_buf(), group)])?
        .pop()
        .unwrap_or_default())
}

/// [`run_processes`] of several runs in one pass over `/proc` (a pass reads two files per
/// process on the machine, so a poll that sees several runs end makes one pass, not one each).
fn runs_processes(runs: &[(PathBuf, Option<i32>)]) -> std::io::Result<Vec<Vec<i32>>> {
    let mut found = vec![Vec::new(); runs.len()];
    if runs.is_empty() {
        return Ok(found);
    }
    let by_dir: BTreeMap<&[u8], usize> = runs
        .iter()
        .enumerate()
        .map(|(i, (dir, _))| (dir.as_os_str().as_encoded_bytes(), i))
        .collect();
    let marker = format!("{RUN_MARKER}=").into_bytes();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Some((state, pgrp)) = stat_of(pid)? else {
            continue;
        };
        if state == 'Z' || state == 'X' {
            continue;
        }
        let mut in_group = 0;
        for (i, (_, group)) in runs.iter().enumerate() {
            if *group == Some(pgrp) {
                found[i].push(pid);
                in_group += 1;
            }
        }
        if in_group == runs.len() {
            continue;
        }
        let environ = match std::fs::read(format!("/proc/{pid}/environ")) {
            Ok(e) => e,
            // Gone, or another user's process (not ours to see, not ours).
            Err(e) if gone(&e) || e.kind() == std::io::ErrorKind::PermissionDenied => continue,
            Err(e) => return Err(e),
        };
        let run = environ
            .split(|&b| b == 0)
            .find_map(|kv| kv.strip_prefix(marker.as_slice()))
            .and_then(|dir| by_dir.get(dir));
        if let Some(&i) = run {
            if runs[i].1 != Some(pgrp) {
                found[i].push(pid);
            }
        }
    }
    Ok(found)
}

/// Resolves a Unix user name to (uid, gid).
fn lookup_user(name: &str) -> Result<(u32, u32), BackendError> {
    let bad = |m: String| BackendError::Unsupported(format!("runAs user {name:?}: {m}"));
    let cname = std::ffi::CString::new(name).map_err(|_| bad("contains a NUL byte".into()))?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwnam_r writes into `pwd` and `buf`, both owned here and large enough (the
    // call reports ERANGE otherwise); `result` points to `pwd` or is null.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(bad(std::io::Error::from_raw_os_error(rc).to_string()));
    }
    if result.is_null() {
        return Err(bad("no such user".into()));
    }
    if pwd.pw_uid == 0 {
        return Err(bad("jobs must not run as root".into()));
    }
    Ok((pwd.pw_uid, pwd.pw_gid))
}

fn chown(path: &Path, (uid, gid): (u32, u32)) -> Result<(), BackendError> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|e| BackendError::file(path, e))
}

impl LocalBackend {
    /// A backend with these settings; creates the work directory (mode 0711: jobs reach their
    /// own directory but cannot list the others).
    pub fn new(config: LocalConfig) -> Result<LocalBackend, BackendError> {
        std::fs::create_dir_all(&config.work_dir)
            .map_err(|e| BackendError::file(&config.work_dir, e))?;
        std::fs::set_permissions(&config.work_dir, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| BackendError::file(&config.work_dir, e))?;
        let mut users = BTreeMap::new();
        if !config.run_as.is_empty() {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Err(BackendError::Unsupported(
                    "runAs needs the daemon to run as root (to start jobs as other users)".into(),
                ));
            }
            for (tenant, user) in &config.run_as {
                users.insert(tenant.clone(), lookup_user(user)?);
            }
        }
        Ok(LocalBackend {
            children: HashMap::new(),
            devices: HashMap::new(),
            stopping: BTreeSet::new(),
            users,
            mig_ids: load_mig_ids(&config.work_dir.join(MIG_IDS_FILE)),
            config,
        })
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.config.work_dir.join(name)
    }

    fn pid(&self, name: &str) -> std::io::Result<Option<i32>> {
        Ok(read_record(&self.dir(name).join("pid"))?.and_then(|p| p.parse().ok()))
    }

    /// The wrapper's pid when it is verified alive (then it leads the run's process group).
    fn live_wrapper(&self, name: &str) -> Option<i32> {
        let pid = self.pid(name).ok().flatten()?;
        (process_alive_for(pid, &self.dir(name)) == Some(true) && leads_group(pid)).then_some(pid)
    }

    /// Frees the devices of stopped runs that have nothing left running.
    fn reap_stopping(&mut self) {
        if self.stopping.is_empty() {
            return;
        }
        let names: Vec<String> = self.stopping.iter().cloned().collect();
        for name in &names {
            if let Some(c) = self.children.get_mut(name) {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    self.children.remove(name);
                }
            }
        }
        let runs: Vec<(PathBuf, Option<i32>)> = names
            .iter()
            .map(|name| (self.dir(name), self.live_wrapper(name)))
            .collect();
        let Ok(left) = runs_processes(&runs) else {
            return;
        };
        for (name, left) in names.iter().zip(left) {
            if left.is_empty() {
                self.stopping.remove(name);
                self.devices.remove(name);
                self.children.remove(name);
            }
        }
    }

    /// True when a stopped run whose processes are not all gone holds GPU `index` of `node`.
    fn stopping_holds(&mut self, node: &str, index: u32) -> bool {
        self.reap_stopping();
        self.stopping.iter().any(|name| {
            self.devices
                .get(name)
                .is_some_and(|d| d.iter().any(|(n, i)| n == node && i.contains(&index)))
        })
    }

    /// The run (other than `name`) still holding GPU `index` of `node`: a live run, or a
    /// stopped one whose processes are not all gone. A run's devices are given back only once
    /// nothing of it is left (a poll that sees it over, or [`reap_stopping`]), so a launch
    /// that the daemon placed on GPUs it already counts free while their previous run is still
    /// on its way out (or, after a cancel raced its launch, has only just started) is refused
    /// rather than run beside it.
    ///
    /// [`reap_stopping`]: Self::reap_stopping
    fn holder_of(&mut self, name: &str, node: &str, index: u32) -> Option<String> {
        self.reap_stopping();
        self.devices
            .iter()
            .find(|(run, d)| {
                run.as_str() != name && d.iter().any(|(n, i)| n == node && i.contains(&index))
            })
            .map(|(run, _)| run.clone())
    }

    /// The device id of a MIG instance this backend created.
    pub(crate) fn mig_id(
        &self,
        node: &str,
        gpu: u32,
        profile: &str,
        start: u8,
    ) -> Result<String, BackendError> {
        self.mig_ids
            .get(&(node.to_string(), gpu))
            .and_then(|l| {
                l.iter()
                    .find(|(m, _)| m.profile == profile && m.start == start)
                    .map(|(_, id)| id.clone())
            })
            .ok_or_else(|| {
                BackendError::Unsupported(format!(
                    "no MIG instance {profile} at {start} known on GPU {gpu} of {node} \
                     (GPUs are partitioned through the daemon's reconfigurations)"
                ))
            })
    }

    /// Writes the MIG device ids for a restarted daemon.
    fn store_mig_ids(&self) -> Result<(), BackendError> {
        let doc: Vec<StoredMigIds> = self
            .mig_ids
            .iter()
            .map(|((node, gpu), instances)| StoredMigIds {
                node: node.clone(),
                gpu: *gpu,
                instances: instances.clone(),
            })
            .collect();
        let text = serde_json::to_string(&doc).map_err(|e| BackendError::Parse {
            what: "MIG device ids",
            detail: e.to_string(),
        })?;
        replace_file(&self.config.work_dir.join(MIG_IDS_FILE), &text)
    }

    /// `nvidia-smi ARGS` as an argument vector (never a shell), with the configured `PATH`.
    fn nvidia_smi(&self, args: &[String]) -> Result<std::process::Output, BackendError> {
        let mut cmd = Command::new("nvidia-smi");
        cmd.args(args);
        if let Some(path) = &self.config.tool_path {
            // Only the child's environment: std looks the program up in this PATH too.
            cmd.env("PATH", path);
        }
        run_command(cmd, NVIDIA_SMI_TIMEOUT)
    }

    /// Like [`nvidia_smi`](Self::nvidia_smi), failing on a non-zero exit status.
    fn nvidia_smi_ok(&self, args: &[String]) -> Result<String, BackendError> {
        let out = self.nvidia_smi(args)?;
        if !out.status.success() {
            let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            if stderr.is_empty() {
                stderr = String::from_utf8_lossy(&out.stdout).trim().to_string();
            }
            stderr.truncate(512);
            return Err(BackendError::Command {
                program: format!("nvidia-smi {}", args.join(" ")),
                status: out.status.to_string(),
                stderr,
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `count` free device indices of `node`, or `None` when the node has fewer free.
    fn pick_devices(&self, node: &str, count: u32) -> Option<Vec<u32>> {
        let total = self
            .config
            .nodes
            .iter()
            .find(|n| n.name == node)
            .map_or(0, |n| n.gpus);
        let used: BTreeSet<u32> = self
            .devices
            .values()
            .flatten()
            .filter(|(n, _)| n == node)
            .flat_map(|(_, d)| d.iter().copied())
            .collect();
        let free: Vec<u32> = (0..total)
            .filter(|i| !used.contains(i))
            .take(count as usize)
            .collect();
        (free.len() == count as usize).then_some(free)
    }

    fn load_devices(&mut self, name: &str) {
        if self.devices.contains_key(name) {
            return;
        }
        let Some(text) = read_trim(&self.dir(name).join("devices")) else {
            return;
        };
        let mut v = Vec::new();
        for line in text.lines() {
            if let Some((node, list)) = line.split_once(' ') {
                v.push((
                    node.to_string(),
                    list.split(',').filter_map(|x| x.parse().ok()).collect(),
                ));
            }
        }
        self.devices.insert(name.to_string(), v);
    }

    /// SIGTERM to every process of the run now, SIGKILL to what is left after the grace
    /// period (on a thread, which also reaps our child). The devices stay held until
    /// [`reap_stopping`](Self::reap_stopping) finds nothing left.
    fn stop(&mut self, handle: &Handle) {
        let name = handle.0.clone();
        if !safe_run_name(&name) {
            return;
        }
        self.load_devices(&name);
        let wrapper = self.live_wrapper(&name);
        if let Some(pid) = wrapper {
            signal_group(pid, libc::SIGTERM);
        }
        let dir = self.dir(&name);
        for pid in run_processes(&dir, None).unwrap_or_default() {
            signal(pid, libc::SIGTERM);
        }
        self.stopping.insert(name.clone());
        let child = self.children.remove(&name);
        std::thread::spawn(move || {
            let deadline = Instant::now() + STOP_GRACE;
            let mut child = child;
            loop {
                if let Some(c) = child.as_mut() {
                    if matches!(c.try_wait(), Ok(Some(_))) {
                        child = None;
                    }
                }
                // Still our wrapper (a pid can be reused once it is reaped).
                let group =
                    wrapper.filter(|&p| leads_group(p) && process_alive_for(p, &dir) == Some(true));
                let left = run_processes(&dir, group).unwrap_or_default();
                if left.is_empty() && child.is_none() {
                    return;
                }
                if Instant::now() >= deadline {
                    if let Some(g) = group {
                        signal_group(g, libc::SIGKILL);
                    }
                    for pid in left {
                        signal(pid, libc::SIGKILL);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        self.reap_stopping();
    }

    /// What is known of a run, before checking that none of its processes is left.
    fn raw_status(&mut self, name: &str, exited: bool) -> RunStatus {
        let dir = self.dir(name);
        // Any doubt (a file or /proc that cannot be read right now, as when the daemon is
        // out of descriptors) keeps the run as it was: never a made-up ending.
        let exit = match read_record(&dir.join("exit")) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(run = name, "cannot read the exit status yet: {e}");
                return RunStatus::Running;
            }
        };
        if let Some(code) = exit {
            return match code.parse::<i32>() {
                Ok(0) => RunStatus::Completed,
                Ok(c) => RunStatus::Failed {
                    reason: format!("exit status {c}"),
                    exit_code: Some(c),
                },
                Err(_) => RunStatus::Failed {
                    reason: "unreadable exit status".into(),
                    exit_code: None,
                },
            };
        }
        let alive = match self.pid(name) {
            Ok(Some(p)) => process_alive_for(p, &dir),
            Ok(None) => Some(false),
            Err(_) => None,
        };
        match alive {
            Some(true) | None if !exited => {
                self.load_devices(name);
                RunStatus::Running
            }
            None => RunStatus::Running,
            _ if !dir.exists() => RunStatus::Unknown,
            _ if !exited && self.children.contains_key(name) => RunStatus::Pending {
                // Our child, wrapper not yet at its pid write.
                reason: "starting".into(),
            },
            _ => RunStatus::Failed {
                reason: "process ended without an exit status (killed)".into(),
                exit_code: None,
            },
        }
    }
}

impl Backend for LocalBackend {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn inventory(&mut self) -> Result<Vec<InventoryNode>, BackendError> {
        Ok(self
            .config
            .nodes
            .iter()
            .map(|n| InventoryNode {
                name: n.name.clone(),
                cpu: n.cpus,
                memory: n.memory,
                gres: if n.gpus > 0 {
                    vec![GresCount {
                        kind: Some(n.gpu.clone()),
                        count: n.gpus,
                    }]
                } else {
                    vec![]
                },
                health: NodeHealth::Up,
            })
            .collect())
    }

    fn submit(&mut self, launch: &Launch) -> Result<Handle, BackendError> {
        if !safe_run_name(&launch.name) {
            return Err(BackendError::Unsupported(format!(
                "unsafe run name {:?}",
                launch.name
            )));
        }
        self.reap_stopping();
        let dir = self.dir(&launch.name);
        let mut devs = Vec::new();
        for s in &launch.placement {
            if let Some(named) = &s.devices {
                // The daemon chose them; only a run still on its way out can be in the way
                // (the daemon already counts its devices free).
                // A MIG instance or a quota share is placed beside live runs on the same GPU
                // by design (the daemon accounts slices and shares); only a stopped run still
                // on its way out can be in its way. A whole GPU must have no other holder.
                let shared = !matches!(named.part, PlacedPart::Whole);
                for &i in &named.indices {
                    if shared {
                        if self.stopping_holds(&s.node, i) {
                            return Err(BackendError::Exhausted {
                                what: format!("GPU {i} of node {}", s.node),
                                message: "still held by a stopped run whose processes are not all \
                                          gone"
                                    .into(),
                            });
                        }
                        continue;
                    }
                    if let Some(run) = self.holder_of(&launch.name, &s.node, i) {
                        return Err(BackendError::Exhausted {
                            what: format!("GPU {i} of node {}", s.node),
                            message: format!(
                                "still held by run {run}, whose processes are not all gone"
                            ),
                        });
                    }
                }
                devs.push((s.node.clone(), named.indices.clone()));
                continue;
            }
            let Some(d) = self.pick_devices(&s.node, s.gpus) else {
                // The daemon already counts them free: a stopped run is still on its way out.
                return Err(BackendError::Exhausted {
                    what: format!("GPUs of node {}", s.node),
                    message: "still held by a stopped run whose processes are not all gone".into(),
                });
            };
            devs.push((s.node.clone(), d));
        }
        let cvd = match launch.placement.first().and_then(|s| s.devices.as_ref()) {
            Some(d) => match &d.part {
                PlacedPart::Mig { profile, start } => {
                    let node = &launch.placement[0].node;
                    let gpu = d.indices.first().copied().unwrap_or(0);
                    Some(self.mig_id(node, gpu, profile, *start)?)
                }
                _ => Some(
                    d.indices
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            },
            None => devs
                .first()
                .map(|(_, d)| d.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
        };
        let nodes = launch
            .placement
            .iter()
            .map(|s| s.node.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let extra = vec![
            (
                "CUDA_VISIBLE_DEVICES".to_string(),
                cvd.clone().unwrap_or_default(),
            ),
            ("TESSERA_NODES".to_string(), nodes),
        ];
        let script = write_job_files(&dir, launch, &extra)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| BackendError::file(&dir, e))?;
        std::fs::rename(&script, dir.join("job.sh")).map_err(|e| BackendError::file(&script, e))?;
        let dev_text: String = devs
            .iter()
            .map(|(n, d)| {
                format!(
                    "{n} {}\n",
                    d.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                )
            })
            .collect();
        let dev_path = dir.join("devices");
        std::fs::write(&dev_path, dev_text).map_err(|e| BackendError::file(&dev_path, e))?;
        let log_path = dir.join("output.log");
        let log = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| BackendError::file(&log_path, e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| BackendError::file(&log_path, e))?;
        let user = self.users.get(&launch.tenant).copied();
        if let Some(owner) = user {
            let entries = std::fs::read_dir(&dir).map_err(|e| BackendError::file(&dir, e))?;
            for e in entries {
                let e = e.map_err(|e| BackendError::file(&dir, e))?;
                chown(&e.path(), owner)?;
            }
            chown(&dir, owner)?;
        }
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(WRAPPER)
            .arg("tessera-local")
            .arg(&dir)
            .current_dir(&dir)
            .env("CUDA_VISIBLE_DEVICES", cvd.unwrap_or_default())
            .env(RUN_MARKER, &dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        if let Some((uid, gid)) = user {
            // std drops supplementary groups too when a root parent sets the uid.
            cmd.uid(uid).gid(gid);
        }
        let child = cmd
            .spawn()
            .map_err(|e| BackendError::from_io("/bin/sh", &e))?;
        self.children.insert(launch.name.clone(), child);
        self.devices.insert(launch.name.clone(), devs);
        Ok(Handle(launch.name.clone()))
    }

    fn cancel(&mut self, handle: &Handle) -> Result<(), BackendError> {
        self.stop(handle);
        Ok(())
    }

    fn preempt(&mut self, handle: &Handle) -> Result<(), BackendError> {
        self.stop(handle);
        Ok(())
    }

    fn poll(&mut self, handles: &[Handle]) -> Result<Vec<(Handle, RunStatus)>, BackendError> {
        self.reap_stopping();
        let mut out = Vec::with_capacity(handles.len());
        // Indices in `out` of the runs that ended, as far as their wrapper tells.
        let mut ended = Vec::new();
        for h in handles {
            let name = h.0.as_str();
            if !safe_run_name(name) {
                out.push((h.clone(), RunStatus::Unknown));
                continue;
            }
            // Reap our own child first so that it does not linger as a zombie.
            let exited = match self.children.get_mut(name) {
                Some(c) => matches!(c.try_wait(), Ok(Some(_))),
                None => false,
            };
            if exited {
                self.children.remove(name);
            }
            let status = self.raw_status(name, exited);
            if status.is_terminal() && status != RunStatus::Unknown {
                ended.push(out.len());
            }
            out.push((h.clone(), status));
        }
        // Over only once nothing of it is left: kill what an ended run left behind, and report
        // it running (holding its devices) until it is gone.
        let runs: Vec<(PathBuf, Option<i32>)> = ended
            .iter()
            .map(|&i| {
                let name = out[i].0 .0.as_str();
                (self.dir(name), self.live_wrapper(name))
            })
            .collect();
        match runs_processes(&runs) {
            Ok(left) => {
                for ((&i, (_, group)), left) in ended.iter().zip(&runs).zip(left) {
                    if left.is_empty() {
                        continue;
                    }
                    if self.stopping.contains(out[i].0 .0.as_str()) {
                        // Stopped by the daemon: its processes keep their SIGTERM grace (the
                        // checkpoint window; the stop's own thread sends SIGKILL after it),
                        // even though the wrapper died at the SIGTERM. Running until gone.
                        out[i].1 = RunStatus::Running;
                        continue;
                    }
                    tracing::info!(
                        run = out[i].0 .0.as_str(),
                        processes = left.len(),
                        "killing what is left of an ended run"
                    );
                    if let Some(g) = *group {
                        signal_group(g, libc::SIGKILL);
                    }
                    for pid in left {
                        signal(pid, libc::SIGKILL);
                    }
                    out[i].1 = RunStatus::Running;
                }
            }
            Err(e) => {
                for &i in &ended {
                    tracing::warn!(
                        run = out[i].0 .0.as_str(),
                        "cannot list the run's processes yet: {e}"
                    );
                    out[i].1 = RunStatus::Running;
                }
            }
        }
        for (h, status) in &out {
            if status.is_terminal() {
                self.devices.remove(h.0.as_str());
            }
        }
        Ok(out)
    }

    /// Rewrites the run's quota file (`TESSERA_QUOTA_FILE`; the SDK's throttle reads it), in
    /// place: the job keeps running. CPU and memory are not enforced locally, so a retune of
    /// those alone changes nothing here.
    fn retune(&mut self, retune: &Retune) -> Result<(), BackendError> {
        let name = retune.handle.0.as_str();
        if !safe_run_name(name) {
            return Err(BackendError::Unsupported(format!(
                "unsafe run name {name:?}"
            )));
        }
        let dir = self.dir(name);
        let path = quota_file(&dir, name);
        let Some(doc) = quota_json(&retune.placement, 0) else {
            return Ok(());
        };
        let old: u64 = read_file(&path)
            .map_err(|e| BackendError::file(&path, e))?
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("version").and_then(serde_json::Value::as_u64))
            // Started without a quota file: the job could not notice a new one.
            .ok_or(BackendError::Declined {
                action: "retune",
                backend: "local",
            })?;
        let doc = quota_json(&retune.placement, old + 1).unwrap_or(doc);
        replace_file(&path, &doc.to_string())
    }

    /// Re-partitions a GPU with `nvidia-smi mig` (argument vectors only): destroys its compute
    /// and GPU instances, switches MIG mode when the GPU goes from or to whole mode, creates
    /// the layout's GPU instances (largest first) with their default compute instances, and
    /// reads the new MIG device ids from `nvidia-smi -L`, which must list exactly the
    /// layout's profiles. The GPU's holders were stopped just before: this waits until their
    /// last process is gone.
    fn reconfigure(&mut self, r: &Reconfigure) -> Result<(), BackendError> {
        let Some(node) = self.config.nodes.iter().find(|n| n.name == r.node) else {
            return Err(BackendError::Unsupported(format!(
                "no local node {:?}",
                r.node
            )));
        };
        if r.gpu >= node.gpus {
            return Err(BackendError::Unsupported(format!(
                "node {} has no GPU {}",
                r.node, r.gpu
            )));
        }
        let layout = r.to.clone().unwrap_or_default();
        if let Some(bad) = layout.iter().find(|m| !safe_profile(&m.profile)) {
            return Err(BackendError::Unsupported(format!(
                "MIG profile {:?}",
                bad.profile
            )));
        }
        let deadline = Instant::now() + RECONFIGURE_WAIT;
        while self.stopping_holds(&r.node, r.gpu) {
            if Instant::now() >= deadline {
                return Err(BackendError::Exhausted {
                    what: format!("GPU {} of node {}", r.gpu, r.node),
                    message: "a stopped run's processes are still on it".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let gpu = r.gpu.to_string();
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        if self.mig_ids.remove(&(r.node.clone(), r.gpu)).is_some() {
            self.store_mig_ids()?;
        }
        if r.from.is_none() && r.to.is_some() {
            self.nvidia_smi_ok(&args(&["-i", &gpu, "-mig", "1"]))?;
        }
        if r.from.is_some() || r.to.is_some() {
            // Nothing to destroy is not an error: only what follows is checked.
            for what in ["-dci", "-dgi"] {
                let out = self.nvidia_smi(&args(&["mig", "-i", &gpu, what]))?;
                if !out.status.success() {
                    tracing::info!(gpu = r.gpu, node = %r.node, "nvidia-smi mig {what}: {}",
                        String::from_utf8_lossy(&out.stdout).trim());
                }
            }
        }
        if r.from.is_some() && r.to.is_none() {
            self.nvidia_smi_ok(&args(&["-i", &gpu, "-mig", "0"]))?;
        }
        if layout.is_empty() {
            return Ok(());
        }
        let mut ordered = layout.clone();
        ordered.sort_by(|a, b| {
            compute_slices(&b.profile)
                .cmp(&compute_slices(&a.profile))
                .then(a.start.cmp(&b.start))
        });
        let profiles = ordered
            .iter()
            .map(|m| m.profile.as_str())
            .collect::<Vec<_>>()
            .join(",");
        self.nvidia_smi_ok(&args(&["mig", "-i", &gpu, "-cgi", &profiles, "-C"]))?;
        let listed = parse_mig_list(&self.nvidia_smi_ok(&args(&["-L"]))?, r.gpu);
        // Instances of one profile are interchangeable for a job: the n-th listed device of
        // a profile goes to the n-th instance of that profile by start.
        let mut ids = Vec::with_capacity(ordered.len());
        let mut left = listed.clone();
        for m in &ordered {
            let Some(pos) = left.iter().position(|(p, _)| *p == m.profile) else {
                return Err(BackendError::Parse {
                    what: "nvidia-smi -L",
                    detail: format!(
                        "GPU {} lists {:?} after creating {profiles}",
                        r.gpu,
                        listed.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>()
                    ),
                });
            };
            ids.push((m.clone(), left.remove(pos).1));
        }
        if !left.is_empty() {
            return Err(BackendError::Parse {
                what: "nvidia-smi -L",
                detail: format!("GPU {} lists more instances than {profiles}", r.gpu),
            });
        }
        self.mig_ids.insert((r.node.clone(), r.gpu), ids);
        self.store_mig_ids()
    }

    fn find(&mut self, run_name: &str) -> Result<Option<Handle>, BackendError> {
        if !safe_run_name(run_name) {
            return Ok(None);
        }
        let dir = self.dir(run_name);
        if dir.join("pid").exists() || dir.join("exit").exists() {
            return Ok(Some(Handle(run_name.to_string())));
        }
        if !dir.exists() {
            return Ok(None);
        }
        // Started but the wrapper has not written its pid yet: look for it.
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
                    if process_alive_for(pid, &dir) == Some(true) {
                        return Ok(Some(Handle(run_name.to_string())));
                    }
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Payload, PlacedShare};
    use crate::config::LocalNodeConfig;
    use tessera_model::{Bytes, MilliCpu};

    fn backend(dir: &Path) -> LocalBackend {
        LocalBackend::new(LocalConfig {
            work_dir: dir.to_path_buf(),
            nodes: vec![LocalNodeConfig {
                name: "local".into(),
                gpu: "A100-80GB".into(),
                gpus: 4,
                cpus: MilliCpu::from_cores(4),
                memory: Bytes::from_gib(8),
            }],
            run_as: Default::default(),
            tool_path: None,
        })
        .unwrap()
    }

    fn launch(id: i64, gpus: u32, payload: Payload) -> Launch {
        Launch {
            name: Launch::run_name("x1", id, 1),
            job_id: id,
            attempt: 1,
            tenant: "alice".into(),
            payload,
            env: vec![],
            placement: vec![PlacedShare {
                node: "local".into(),
                gres_type: Some("A100-80GB".into()),
                gpus,
                cpu: MilliCpu::from_cores(1),
                memory: Bytes::from_gib(1),
                devices: None,
            }],
            plan: tessera_model::ParallelPlan::data_parallel(gpus),
            gpu_type: "A100-80GB".into(),
        }
    }

    fn wait_terminal(b: &mut LocalBackend, h: &Handle) -> RunStatus {
        for _ in 0..500 {
            let s = b.poll(std::slice::from_ref(h)).unwrap().remove(0).1;
            if s.is_terminal() {
                return s;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("run did not end");
    }

    #[test]
    fn runs_with_devices_and_reports_exit_status() {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = backend(tmp.path());
        let long = b
            .submit(&launch(
                1,
                2,
                Payload::Command(vec!["sleep".into(), "30".into()]),
            ))
            .unwrap();
        let h = b
            .submit(&launch(
                2,
                1,
                Payload::Script("echo \"cvd=$CUDA_VISIBLE_DEVICES\"\nexit 4\n".into()),
            ))
            .unwrap();
        assert!(matches!(
            wait_terminal(&mut b, &h),
            RunStatus::Failed {
                exit_code: Some(4),
                ..
            }
        ));
        let log = std::fs::read_to_string(tmp.path().join("tessera-x1-2-1/output.log")).unwrap();
        assert_eq!(log, "cvd=2\n", "second job gets the next free device");
        let ok = b
            .submit(&launch(3, 1, Payload::Command(vec!["true".into()])))
            .unwrap();
        assert_eq!(wait_terminal(&mut b, &ok), RunStatus::Completed);
        // A second backend (a restarted daemon) adopts the running one and can cancel it.
        let mut again = backend(tmp.path());
        assert_eq!(again.find("tessera-x1-1-1").unwrap(), Some(long.clone()));
        assert_eq!(again.find("tessera-x1-9-1").unwrap(), None);
        assert_eq!(
            again.poll(std::slice::from_ref(&long)).unwrap()[0].1,
            RunStatus::Running
        );
        again.cancel(&long).unwrap();
        assert!(wait_terminal(&mut b, &long).is_terminal());
    }

    fn poll_one(b: &mut LocalBackend, h: &Handle) -> RunStatus {
        b.poll(std::slice::from_ref(h)).unwrap().remove(0).1
    }

    fn pid_in(path: &Path) -> i32 {
        for _ in 0..500 {
            if let Some(p) = read_trim(path).and_then(|t| t.parse().ok()) {
                return p;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("no pid in {}", path.display());
    }

    /// Alive and not a zombie.
    fn running(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                !s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    }

    #[test]
    fn an_exit_file_that_cannot_be_read_is_not_a_failure() {
        // In the trial the daemon ran out of descriptors and recorded a job that exited 0 as
        // killed. Here the exit file exists but cannot be read (a directory: EISDIR).
        let tmp = tempfile::tempdir().unwrap();
        let mut b = backend(tmp.path());
        let l = launch(1, 1, Payload::Command(vec!["sleep".into(), "0.3".into()]));
        let dir = tmp.path().join(&l.name);
        let h = b.submit(&l).unwrap();
        std::fs::create_dir_all(dir.join("exit")).unwrap();
        let wrapper = pid_in(&dir.join("pid"));
        wait_for("the wrapper ends", || !running(wrapper));
        for _ in 0..5 {
            let s = poll_one(&mut b, &h);
            assert!(
                !s.is_terminal(),
                "decided {s:?} without reading the exit status"
            );
        }
        std::fs::remove_dir_all(dir.join("exit")).unwrap();
        std::fs::write(dir.join("exit"), "0\n").unwrap();
        assert_eq!(wait_terminal(&mut b, &h), RunStatus::Completed);
    }

    fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if f() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}");
    }

    #[test]
    fn a_killed_wrapper_leaves_nothing_of_the_job_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = backend(tmp.path());
        // The payload starts a child in its process group and one that escapes it (setsid).
        let l = launch(
            1,
            4,
            Payload::Script(
                "sleep 300 &\necho $! > in_group\nsetsid sleep 300 &\necho $! > escaped\nwait\n"
                    .into(),
            ),
        );
        let dir = tmp.path().join(&l.name);
        let h = b.submit(&l).unwrap();
        let (in_group, escaped) = (pid_in(&dir.join("in_group")), pid_in(&dir.join("escaped")));
        let wrapper = pid_in(&dir.join("pid"));
        // Killed from outside: only the wrapper, which this test started and verified by its
        // pid file and command line.
        assert!(process_alive_for(wrapper, &dir) == Some(true));
        // SAFETY: signals one process this test started.
        unsafe {
            libc::kill(wrapper, libc::SIGKILL);
        }
        let status = wait_terminal(&mut b, &h);
        assert!(matches!(status, RunStatus::Failed { .. }), "{status:?}");
        assert!(!running(in_group), "a process of the job's group survived");
        assert!(!running(escaped), "a process that left the group survived");
        // Its 4 GPUs are free again only now.
        let again = b
            .submit(&launch(2, 4, Payload::Command(vec!["true".into()])))
            .unwrap();
        assert_eq!(wait_terminal(&mut b, &again), RunStatus::Completed);
    }

    #[test]
    fn a_record_counts_only_once_its_newline_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("exit");
        assert_eq!(read_record(&path).unwrap(), None, "missing");
        for torn in ["", "1", "12"] {
            std::fs::write(&path, torn).unwrap();
            assert_eq!(
                read_record(&path).unwrap(),
                None,
                "{torn:?} is not written yet"
            );
        }
        std::fs::write(&path, "12\n").unwrap();
        assert_eq!(read_record(&path).unwrap().as_deref(), Some("12"));
    }

    #[test]
    fn one_poll_cleans_up_after_several_ended_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = backend(tmp.path());
        // Two runs end at once, each leaving a process that escaped its group; a third runs on.
        let leaves = |id| {
            launch(
                id,
                1,
                Payload::Script("setsid sleep 300 &\necho $! > escaped\n".into()),
            )
        };
        let (l1, l2) = (leaves(1), leaves(2));
        let l3 = launch(3, 1, Payload::Command(vec!["sleep".into(), "300".into()]));
        let handles: Vec<Handle> = [&l1, &l2, &l3]
            .iter()
            .map(|l| b.submit(l).unwrap())
            .collect();
        let escaped: Vec<i32> = [&l1, &l2]
            .iter()
            .map(|l| pid_in(&tmp.path().join(&l.name).join("escaped")))
            .collect();
        for l in [&l1, &l2] {
            let exit = tmp.path().join(&l.name).join("exit");
            wait_for("the run's wrapper ends", || {
                read_record(&exit).ok().flatten().is_some()
            });
        }
        // The first poll that sees them end finds what they left: still running until gone.
        let first = b.poll(&handles).unwrap();
        assert!(first.iter().all(|(_, s)| !s.is_terminal()), "{first:?}");
        let mut last = first;
        wait_for("both ended runs are over", || {
            last = b.poll(&handles).unwrap();
            last[0].1.is_terminal() && last[1].1.is_terminal()
        });
        assert_eq!(last[0].1, RunStatus::Completed);
        assert_eq!(last[1].1, RunStatus::Completed);
        assert_eq!(last[2].1, RunStatus::Running, "the third run was touched");
        for pid in escaped {
            assert!(!running(pid), "what an ended run left behind survived");
        }
        b.cancel(&handles[2]).unwrap();
        wait_terminal(&mut b, &handles[2]);
    }

    #[test]
    fn named_devices_of_a_stopping_run_are_not_handed_out() {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = backend(tmp.path());
        let named = |mut l: Launch| {
            l.placement[0].devices = Some(crate::backend::PlacedDevices {
                indices: vec![0],
                part: PlacedPart::Whole,
            });
            l
        };
        let l = named(launch(
            1,
            1,
            Payload::Script(
                "trap 'sleep 1; exit 0' TERM\necho up > started\nwhile :; do sleep 0.05; done\n"
                    .into(),
            ),
        ));
        let dir = tmp.path().join(&l.name);
        let h = b.submit(&l).unwrap();
        wait_for("the job to start", || dir.join("started").exists());
        b.preempt(&h).unwrap();
        let next = named(launch(2, 1, Payload::Command(vec!["true".into()])));
        match b.submit(&next) {
            Err(e) => assert!(e.is_transient(), "{e}"),
            Ok(_) => panic!("GPU 0 of a run still stopping was handed out"),
        }
        let _ = wait_terminal(&mut b, &h);
    }

    #[test]
    fn two_quota_shares_of_one_gpu_run_side_by_side() {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = backend(tmp.path());
        let share = |mut l: Launch| {
            l.placement[0].devices = Some(crate::backend::PlacedDevices {
                indices: vec![0],
                part: PlacedPart::Quota {
                    sm_request: 400,
                    sm_limit: 500,
                    memory: Bytes(1 << 30),
                },
            });
            l
        };
        let script = || Payload::Script("echo up > started\nwhile :; do sleep 0.05; done\n".into());
        let first = share(launch(1, 1, script()));
        let second = share(launch(2, 1, script()));
        let h1 = b.submit(&first).unwrap();
        // Refused before: the first share counted as the GPU's holder.
        let h2 = b
            .submit(&second)
            .expect("a second quota share of a GPU is refused while the first runs");
        for l in [&first, &second] {
            let dir = tmp.path().join(&l.name);
            wait_for("both shares to start", || dir.join("started").exists());
        }
        b.cancel(&h1).unwrap();
        b.cancel(&h2).unwrap();
        let _ = wait_terminal(&mut b, &h1);
        let _ = wait_terminal(&mut b, &h2);
    }

    #[test]
    fn a_stopped_run_keeps_its_sigterm_grace_while_polled() {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = backend(tmp.path());
        // Checkpoints for a second on SIGTERM (the wrapper itself dies at the SIGTERM).
        let l = launch(
            1,
            1,
            Payload::Script(
                "trap 'sleep 1; echo saved > checkpoint; exit 0' TERM\n\
                 echo up > started\nwhile :; do sleep 0.05; done\n"
                    .into(),
            ),
        );
        let dir = tmp.path().join(&l.name);
        let h = b.submit(&l).unwrap();
        wait_for("the job to start", || dir.join("started").exists());
        b.cancel(&h).unwrap();
        // Polled as the daemon polls a stopped run until it is gone: that must not cut the
        // grace short (it did: the wrapper gone, what was left was killed at once).
        let status = wait_terminal(&mut b, &h);
        assert!(status.is_terminal(), "{status:?}");
        assert_eq!(
            std::fs::read_to_string(dir.join("checkpoint"))
                .ok()
                .as_deref(),
            Some("saved\n"),
            "the job was killed before its SIGTERM handler finished"
        );
    }

    #[test]
    fn devices_of_a_stopping_run_are_not_handed_out() {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = backend(tmp.path());
        // Ignores SIGTERM (the disposition is inherited by its child), so stopping takes the
        // SIGKILL after the grace period.
        let l = launch(
            1,
            4,
            Payload::Script("trap '' TERM\nsleep 300 &\necho $! > child\nwait\n".into()),
        );
        let dir = tmp.path().join(&l.name);
        let h = b.submit(&l).unwrap();
        let child = pid_in(&dir.join("child"));
        b.cancel(&h).unwrap();
        let next = launch(2, 1, Payload::Command(vec!["true".into()]));
        match b.submit(&next) {
            Err(e) => assert!(e.is_transient(), "{e}"),
            Ok(_) => panic!("a GPU of a run still stopping was handed out"),
        }
        assert!(running(child));
        let mut started = None;
        wait_for("the stopped run's devices are free", || {
            match b.submit(&next) {
                Ok(h) => {
                    started = Some(h);
                    true
                }
                Err(e) => {
                    assert!(e.is_transient(), "{e}");
                    false
                }
            }
        });
        assert!(!running(child), "devices freed while the job still runs");
        let started = started.unwrap();
        assert_eq!(wait_terminal(&mut b, &started), RunStatus::Completed);
    }

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().mode() & 0o777
    }

    #[test]
    fn run_directories_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let mut b = backend(tmp.path());
        let l = launch(1, 1, Payload::Script("echo hi\n".into()));
        let dir = tmp.path().join(&l.name);
        let h = b.submit(&l).unwrap();
        assert_eq!(wait_terminal(&mut b, &h), RunStatus::Completed);
        assert_eq!(mode(tmp.path()), 0o711, "work dir: no listing");
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("output.log")), 0o600);
        assert_eq!(
            mode(&dir.join("job.sh")) & 0o077,
            0,
            "the script holds the job token"
        );
    }

    #[test]
    fn tenants_run_as_their_own_users_and_cannot_read_each_other() {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let (Ok(nobody), Ok(daemon)) = (lookup_user("nobody"), lookup_user("daemon")) else {
            eprintln!("skipped: users nobody and daemon are needed");
            return;
        };
        if !root {
            eprintln!("skipped: needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        // The users must be able to reach the work directory.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let mut config = backend(tmp.path()).config;
        config.run_as = [
            ("alice".to_string(), "nobody".to_string()),
            ("bob".to_string(), "daemon".to_string()),
        ]
        .into();
        let mut b = LocalBackend::new(config).unwrap();
        let mut victim = launch(1, 1, Payload::Command(vec!["sleep".into(), "30".into()]));
        victim.tenant = "bob".into();
        victim.env = vec![("TESSERA_TOKEN".into(), "bobs-secret".into())];
        let victim_dir = tmp.path().join(&victim.name);
        let vh = b.submit(&victim).unwrap();
        let spy = launch(
            2,
            1,
            Payload::Script(format!(
                "id -u\ncat {0}/job.sh {0}/output.log 2>&1\ncat /proc/$(cat {0}/pid)/environ 2>&1\nls {1} 2>&1\nexit 0\n",
                victim_dir.display(),
                tmp.path().display()
            )),
        );
        let spy_dir = tmp.path().join(&spy.name);
        let sh = b.submit(&spy).unwrap();
        assert_eq!(wait_terminal(&mut b, &sh), RunStatus::Completed);
        let out = std::fs::read_to_string(spy_dir.join("output.log")).unwrap();
        assert!(out.starts_with(&format!("{}\n", nobody.0)), "{out}");
        assert!(!out.contains("bobs-secret"), "{out}");
        assert!(out.matches("Permission denied").count() >= 3, "{out}");
        let meta = std::fs::metadata(&victim_dir).unwrap();
        assert_eq!((meta.uid(), meta.gid()), daemon);
        b.cancel(&vh).unwrap();
        assert!(wait_terminal(&mut b, &vh).is_terminal());
    }
}
