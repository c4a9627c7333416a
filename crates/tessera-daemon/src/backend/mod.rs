//! Resource-manager backends: the [`Backend`] trait and what crosses it.
//!
//! A backend starts, watches and stops the processes of jobs the daemon has placed; it takes no
//! scheduling decision. Implementations: [`slurm::SlurmBackend`] (Slurm's command-line tools,
//! argument vectors only) and [`local::LocalBackend`] (child processes on this machine).

pub mod local;
pub mod slurm;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::BackendError;

// The run, placement and inventory types are the core's (`crate::core::runs`); re-exported
// here so that backends and their callers name them as before.
pub use crate::core::runs::{
    mps_pinned_mem_limit, mps_thread_percentage, quota_json, GresCount, Handle, InventoryNode,
    Launch, NodeHealth, Payload, PlacedDevices, PlacedMig, PlacedPart, PlacedShare, Reconfigure,
    Retune, RunStatus,
};

/// A resource manager.
///
/// Calls are blocking and made from the daemon's engine thread. Every method must be safe to
/// repeat (the daemon retries after a crash): cancelling a finished run is not an error.
pub trait Backend: Send {
    /// Short name (`slurm`, `local`).
    fn kind(&self) -> &'static str;
    /// The nodes and their capacities.
    fn inventory(&mut self) -> Result<Vec<InventoryNode>, BackendError>;
    /// True when CPU requests must be whole cores (Slurm's `--cpus-per-task`).
    fn whole_cpus(&self) -> bool {
        false
    }
    /// Starts a run on exactly the given placement.
    fn submit(&mut self, launch: &Launch) -> Result<Handle, BackendError>;
    /// Stops a run for good.
    fn cancel(&mut self, handle: &Handle) -> Result<(), BackendError>;
    /// Stops a run so that the daemon can requeue the job (the job gets SIGTERM first and
    /// may checkpoint); the daemon starts a new attempt later.
    fn preempt(&mut self, handle: &Handle) -> Result<(), BackendError>;
    /// The status of each watched run.
    fn poll(&mut self, handles: &[Handle]) -> Result<Vec<(Handle, RunStatus)>, BackendError>;
    /// Finds a run by its [`Launch::name`] (after a crash between submitting and recording).
    fn find(&mut self, run_name: &str) -> Result<Option<Handle>, BackendError>;
    /// Changes a running job's quota (or CPU/memory) in place, without a restart. A backend
    /// that cannot declines with [`BackendError::Declined`]; the daemon then checkpoints and
    /// restarts the job on its new allocation.
    fn retune(&mut self, retune: &Retune) -> Result<(), BackendError> {
        let _ = retune;
        Err(BackendError::Declined {
            action: "retune",
            backend: self.kind(),
        })
    }
    /// Changes a GPU's MIG layout (nobody holds it). A backend that cannot declines with
    /// [`BackendError::Declined`] and the GPU keeps its layout; any other error leaves the GPU
    /// in an unknown state (the daemon marks it unhealthy).
    fn reconfigure(&mut self, reconfigure: &Reconfigure) -> Result<(), BackendError> {
        let _ = reconfigure;
        Err(BackendError::Declined {
            action: "reconfigure",
            backend: self.kind(),
        })
    }
}

/// A backend that runs nothing: every submission "runs" until cancelled. For benchmarks and
/// tests of the API and scheduling loop without processes.
#[derive(Debug, Default)]
pub struct NullBackend {
    /// Nodes it reports.
    pub nodes: Vec<InventoryNode>,
    next: u64,
    finished: std::collections::HashSet<String>,
}

impl NullBackend {
    /// A backend reporting `nodes`.
    pub fn new(nodes: Vec<InventoryNode>) -> NullBackend {
        NullBackend {
            nodes,
            next: 0,
            finished: Default::default(),
        }
    }
}

impl Backend for NullBackend {
    fn kind(&self) -> &'static str {
        "null"
    }
    fn inventory(&mut self) -> Result<Vec<InventoryNode>, BackendError> {
        Ok(self.nodes.clone())
    }
    fn submit(&mut self, _launch: &Launch) -> Result<Handle, BackendError> {
        self.next += 1;
        Ok(Handle(format!("null-{}", self.next)))
    }
    fn cancel(&mut self, handle: &Handle) -> Result<(), BackendError> {
        self.finished.insert(handle.0.clone());
        Ok(())
    }
    fn preempt(&mut self, handle: &Handle) -> Result<(), BackendError> {
        self.cancel(handle)
    }
    fn poll(&mut self, handles: &[Handle]) -> Result<Vec<(Handle, RunStatus)>, BackendError> {
        Ok(handles
            .iter()
            .map(|h| {
                let s = if self.finished.contains(&h.0) {
                    RunStatus::Cancelled
                } else {
                    RunStatus::Running
                };
                (h.clone(), s)
            })
            .collect())
    }
    fn find(&mut self, _run_name: &str) -> Result<Option<Handle>, BackendError> {
        Ok(None)
    }
}

/// Quotes a string for a POSIX shell script (single quotes; `'` becomes `'\''`).
pub fn sh_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Where a run's plan file is (`TESSERA_PLAN_FILE`).
pub(crate) fn plan_file(dir: &Path, run_name: &str) -> std::path::PathBuf {
    dir.join(format!("{run_name}.plan.json"))
}

/// Where a run's quota file is (`TESSERA_QUOTA_FILE`).
pub(crate) fn quota_file(dir: &Path, run_name: &str) -> std::path::PathBuf {
    dir.join(format!("{run_name}.quota.json"))
}

/// Replaces a file atomically (write a temporary file next to it, then rename), so that a
/// reader sees the old or the new contents, never a mix.
pub(crate) fn replace_file(path: &Path, text: &str) -> Result<(), BackendError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| BackendError::file(&tmp, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| BackendError::file(&tmp, e))?;
    // Keep the owner of the file it replaces (a job run as another user must read it).
    if let Ok(meta) = std::fs::metadata(path) {
        use std::os::unix::fs::MetadataExt;
        let _ = std::os::unix::fs::chown(&tmp, Some(meta.uid()), Some(meta.gid()));
    }
    std::fs::rename(&tmp, path).map_err(|e| BackendError::file(path, e))
}

/// Writes the job's files into `dir` and returns the path of the wrapper script to run.
///
/// User text only ever goes into files: a command vector becomes `exec 'a' 'b'` (each word
/// quoted), a script is written as `<name>.user` and run by path; environment values are
/// quoted. File names are built from the run name, which the daemon generates.
pub(crate) fn write_job_files(
    dir: &Path,
    launch: &Launch,
    extra_env: &[(String, String)],
) -> Result<std::path::PathBuf, BackendError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir).map_err(|e| BackendError::file(dir, e))?;
    let write = |path: &Path, text: &str, mode: u32| -> Result<(), BackendError> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
            .map_err(|e| BackendError::file(path, e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| BackendError::file(path, e))
    };
    let mut script = String::from("#!/bin/sh\n");
    script.push_str(&format!(
        "# Generated by tessera for job {} attempt {}.\n",
        launch.job_id, launch.attempt
    ));
    for (k, v) in launch.env.iter().chain(extra_env) {
        script.push_str(&format!("export {k}={}\n", sh_quote(v)));
    }
    // The device-level decision as files the job (the SDK) reads: the plan, and the quota,
    // which a retune rewrites while the job runs.
    let plan = plan_file(dir, &launch.name);
    write(&plan, &launch.plan_json().to_string(), 0o600)?;
    script.push_str(&format!(
        "export TESSERA_PLAN_FILE={}\n",
        sh_quote(&plan.display().to_string())
    ));
    if let Some(q) = launch.quota_json() {
        let quota = quota_file(dir, &launch.name);
        write(&quota, &q.to_string(), 0o600)?;
        script.push_str(&format!(
            "export TESSERA_QUOTA_FILE={}\n",
            sh_quote(&quota.display().to_string())
        ));
    }
    match &launch.payload {
        Payload::Command(argv) => {
            script.push_str("exec");
            for a in argv {
                script.push(' ');
                script.push_str(&sh_quote(a));
            }
            script.push('\n');
        }
        Payload::Script(text) => {
            let user = dir.join(format!("{}.user", launch.name));
            write(&user, text, 0o700)?;
            let run = if text.starts_with("#!") {
                "exec"
            } else {
                "exec /bin/sh"
            };
            script.push_str(&format!(
                "{run} {}\n",
                sh_quote(&user.display().to_string())
            ));
        }
    }
    let path = dir.join(format!("{}.sh", launch.name));
    write(&path, &script, 0o700)?;
    Ok(path)
}

/// Runs a program with an argument vector (never through a shell), with a time limit.
pub(crate) fn run_command(
    mut cmd: Command,
    timeout: Duration,
) -> Result<std::process::Output, BackendError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| BackendError::from_io(&program, &e))?;
    // Drain the pipes on threads so that a chatty command cannot block on a full pipe.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut buf);
        }
        buf
    });
    let t_err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut buf);
        }
        buf
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BackendError::Timeout {
                    program,
                    seconds: timeout.as_secs(),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => {
                return Err(BackendError::Spawn {
                    program,
                    message: e.to_string(),
                })
            }
        }
    };
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_hostile_strings() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        let hostile = "$(touch /tmp/pwned); `id` 'x' \"y\" \n; rm -rf /";
        let out = Command::new("/bin/sh")
            .args(["-c", &format!("printf %s {}", sh_quote(hostile))])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), hostile);
    }

    #[test]
    fn job_files_run_commands_verbatim() {
        let dir = tempfile::tempdir().unwrap();
        let launch = Launch {
            name: Launch::run_name("ab12", 7, 1),
            job_id: 7,
            attempt: 1,
            tenant: "alice".into(),
            payload: Payload::Command(vec![
                "printf".into(),
                "%s|%s".into(),
                "$HOME;x".into(),
                "a'b".into(),
            ]),
            env: vec![("FOO".into(), "$(id)".into())],
            placement: vec![],
            plan: tessera_model::ParallelPlan::data_parallel(1),
            gpu_type: String::new(),
        };
        let path = write_job_files(dir.path(), &launch, &[]).unwrap();
        assert!(path.ends_with("tessera-ab12-7-1.sh"));
        let out = Command::new(&path).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "$HOME;x|a'b");
        let launch = Launch {
            payload: Payload::Script("echo \"$FOO\"\nexit 3\n".into()),
            ..launch
        };
        let path = write_job_files(dir.path(), &launch, &[]).unwrap();
        let out = Command::new(&path).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "$(id)\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn run_command_times_out() {
        let mut c = Command::new("sleep");
        c.arg("5");
        let err = run_command(c, Duration::from_millis(100)).unwrap_err();
        assert!(matches!(err, BackendError::Timeout { .. }), "{err}");
        let mut c = Command::new("sh");
        c.args(["-c", "echo out; echo err >&2; exit 2"]);
        let o = run_command(c, Duration::from_secs(5)).unwrap();
        assert_eq!(o.status.code(), Some(2));
        assert_eq!(o.stdout, b"out\n");
    }
}
