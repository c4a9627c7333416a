//! The local backend: each run is a child process on this machine.
//!
//! A run lives in `WORK_DIR/<run name>/`: the generated script, `output.log` (stdout and
//! stderr), `pid` (written by the wrapper before the job starts), `exit` (written when it ends)
//! and `devices` (the GPU indices it got). The wrapper is a fixed `/bin/sh -c` string; the run
//! directory is passed to it as a positional argument, so no user text reaches a shell command
//! line. Because the state is in files, a restarted daemon finds and adopts the runs of the
//! previous one. GPUs are exposed through `CUDA_VISIBLE_DEVICES`; CPU and memory are not
//! enforced.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{
    write_job_files, Backend, GresCount, Handle, InventoryNode, Launch, NodeHealth, RunStatus,
};
use crate::config::LocalConfig;
use crate::error::BackendError;

const WRAPPER: &str = r#"d="$1"; echo $$ > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"
"$d/job.sh"; rc=$?
echo "$rc" > "$d/exit.tmp" && mv "$d/exit.tmp" "$d/exit"; exit "$rc""#;

/// Child processes on this machine.
#[derive(Debug)]
pub struct LocalBackend {
    config: LocalConfig,
    children: HashMap<String, Child>,
    /// GPU indices in use per node, by run.
    devices: HashMap<String, Vec<(String, Vec<u32>)>>,
}

fn safe_run_name(name: &str) -> bool {
    name.starts_with("tessera-") && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// True when `pid` is alive and leads its own process group (as our wrappers do).
fn leads_group(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return false;
    };
    rest.split_whitespace()
        .nth(2)
        .and_then(|g| g.parse::<i32>().ok())
        == Some(pid)
}

fn signal_group(pid: i32, sig: i32) {
    if pid > 1 && leads_group(pid) {
        // SAFETY: kill(2) with a negative pid signals a process group; it has no memory effects.
        unsafe {
            libc::kill(-pid, sig);
        }
    }
}

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// True when a live process's command line mentions `dir` (our wrapper for that run).
fn process_alive_for(pid: i32, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let needle = dir.as_os_str().as_encoded_bytes();
    let alive = cmdline.windows(needle.len().max(1)).any(|w| w == needle);
    // A zombie (exited, not reaped) has an empty cmdline, so it is not alive.
    alive && !cmdline.is_empty()
}

impl LocalBackend {
    /// A backend with these settings; creates the work directory.
    pub fn new(config: LocalConfig) -> Result<LocalBackend, BackendError> {
        std::fs::create_dir_all(&config.work_dir)
            .map_err(|e| BackendError::file(&config.work_dir, e))?;
        Ok(LocalBackend {
            config,
            children: HashMap::new(),
            devices: HashMap::new(),
        })
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.config.work_dir.join(name)
    }

    fn pid(&self, name: &str) -> Option<i32> {
        read_trim(&self.dir(name).join("pid"))?.parse().ok()
    }

    fn alive(&self, name: &str) -> bool {
        self.pid(name)
            .is_some_and(|p| process_alive_for(p, &self.dir(name)))
    }

    fn pick_devices(&self, node: &str, count: u32) -> Vec<u32> {
        let used: BTreeSet<u32> = self
            .devices
            .values()
            .flatten()
            .filter(|(n, _)| n == node)
            .flat_map(|(_, d)| d.iter().copied())
            .collect();
        (0u32..)
            .filter(|i| !used.contains(i))
            .take(count as usize)
            .collect()
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

    fn stop(&mut self, handle: &Handle) {
        let name = handle.0.clone();
        if !safe_run_name(&name) {
            return;
        }
        if let Some(pid) = self.pid(&name) {
            if process_alive_for(pid, &self.dir(&name)) {
                signal_group(pid, libc::SIGTERM);
                let dir = self.dir(&name);
                let child = self.children.remove(&name);
                // Escalate after a grace period, and reap our own child.
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_secs(3));
                    if process_alive_for(pid, &dir) {
                        signal_group(pid, libc::SIGKILL);
                    }
                    if let Some(mut c) = child {
                        let _ = c.wait();
                    }
                });
            }
        }
        self.devices.remove(&name);
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
        let dir = self.dir(&launch.name);
        let mut devs = Vec::new();
        for s in &launch.placement {
            devs.push((s.node.clone(), self.pick_devices(&s.node, s.gpus)));
        }
        let cvd = devs
            .first()
            .map(|(_, d)| d.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
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
        let log = std::fs::File::create(&log_path).map_err(|e| BackendError::file(&log_path, e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| BackendError::file(&log_path, e))?;
        let child = Command::new("/bin/sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("tessera-local")
            .arg(&dir)
            .current_dir(&dir)
            .env("CUDA_VISIBLE_DEVICES", cvd.unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
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
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            let name = h.0.as_str();
            if !safe_run_name(name) {
                out.push((h.clone(), RunStatus::Unknown));
                continue;
            }
            let dir = self.dir(name);
            // Reap our own child first so that it does not linger as a zombie.
            let exited = match self.children.get_mut(name) {
                Some(c) => matches!(c.try_wait(), Ok(Some(_))),
                None => false,
            };
            if exited {
                self.children.remove(name);
            }
            let status = if let Some(code) = read_trim(&dir.join("exit")) {
                match code.parse::<i32>() {
                    Ok(0) => RunStatus::Completed,
                    Ok(c) => RunStatus::Failed {
                        reason: format!("exit status {c}"),
                        exit_code: Some(c),
                    },
                    Err(_) => RunStatus::Failed {
                        reason: "unreadable exit status".into(),
                        exit_code: None,
                    },
                }
            } else if !exited && self.alive(name) {
                self.load_devices(name);
                RunStatus::Running
            } else if !dir.exists() {
                RunStatus::Unknown
            } else if !exited && self.children.contains_key(name) {
                // Our child, wrapper not yet at its pid write.
                RunStatus::Pending {
                    reason: "starting".into(),
                }
            } else {
                RunStatus::Failed {
                    reason: "process ended without an exit status (killed)".into(),
                    exit_code: None,
                }
            };
            if status.is_terminal() {
                self.devices.remove(name);
            }
            out.push((h.clone(), status));
        }
        Ok(out)
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
                    if process_alive_for(pid, &dir) {
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
        })
        .unwrap()
    }

    fn launch(id: i64, gpus: u32, payload: Payload) -> Launch {
        Launch {
            name: Launch::run_name("x1", id, 1),
            job_id: id,
            attempt: 1,
            payload,
            env: vec![],
            placement: vec![PlacedShare {
                node: "local".into(),
                gres_type: Some("A100-80GB".into()),
                gpus,
                cpu: MilliCpu::from_cores(1),
                memory: Bytes::from_gib(1),
            }],
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
}
