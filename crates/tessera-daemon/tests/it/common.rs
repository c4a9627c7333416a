use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_daemon::backend::{GresCount, InventoryNode, NodeHealth, NullBackend};
use tessera_daemon::config::{LocalConfig, LocalNodeConfig, TenantConfig};
use tessera_daemon::{hash_token, BackendConfig, Client, DaemonConfig, DaemonHandle, SystemClock};
use tessera_model::{Bytes, MilliCpu};

pub const ALICE: &str = "alice-secret-token";
pub const BOB: &str = "bob-secret-token";
pub const ADMIN: &str = "admin-secret-token";

pub fn tenants() -> Vec<TenantConfig> {
    vec![
        TenantConfig {
            name: "alice".into(),
            token_sha256: hash_token(ALICE),
            admin: false,
        },
        TenantConfig {
            name: "bob".into(),
            token_sha256: hash_token(BOB),
            admin: false,
        },
        TenantConfig {
            name: "ops".into(),
            token_sha256: hash_token(ADMIN),
            admin: true,
        },
    ]
}

pub fn config(dir: &Path, backend: BackendConfig) -> DaemonConfig {
    let text = format!(
        "store: {}\nbackend: {{kind: local, workDir: {}}}\n",
        dir.join("t.db").display(),
        dir.display()
    );
    let mut c = DaemonConfig::from_yaml(&text).unwrap();
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.poll_interval_ms = 100;
    c.tenants = tenants();
    c.backend = backend;
    c
}

pub fn local_backend(dir: &Path, gpus: u32) -> BackendConfig {
    BackendConfig::Local(LocalConfig {
        work_dir: dir.join("runs"),
        nodes: vec![LocalNodeConfig {
            name: "box".into(),
            gpu: "A100-80GB".into(),
            gpus,
            cpus: MilliCpu::from_cores(8),
            memory: Bytes::from_gib(64),
        }],
        run_as: Default::default(),
        tool_path: None,
    })
}

pub fn null_nodes() -> Vec<InventoryNode> {
    let node = |name: &str, kind: &str, gpus: u32| InventoryNode {
        name: name.into(),
        cpu: MilliCpu::from_cores(64),
        memory: Bytes::from_gib(512),
        gres: vec![GresCount {
            kind: Some(kind.into()),
            count: gpus,
        }],
        health: NodeHealth::Up,
    };
    vec![node("n1", "a100", 8), node("n2", "v100", 4)]
}

/// A daemon with a backend that runs nothing.
pub fn null_daemon(dir: &Path, tweak: impl FnOnce(&mut DaemonConfig)) -> DaemonHandle {
    let mut c = config(dir, local_backend(dir, 1));
    tweak(&mut c);
    tessera_daemon::spawn(
        c,
        Box::new(NullBackend::new(null_nodes())),
        Arc::new(SystemClock::new()),
    )
    .unwrap()
}

pub fn client(d: &DaemonHandle, token: &str) -> Client {
    Client::new(&d.url(), Some(token.to_string()))
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

pub fn job(name: &str, gpus: u32, command: &str) -> String {
    let argv: Vec<String> = command
        .split_whitespace()
        .map(|w| format!("{w:?}"))
        .collect();
    format!(
        "name: {name}\ncommand: [{}]\ngpus: {gpus}\n",
        argv.join(", ")
    )
}
