//! The daemon's YAML config file (see `docs/daemon.md` for a commented example).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tessera_model::{Bytes, MilliCpu};

use crate::error::DaemonError;

/// Everything `tessera serve --config FILE` reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DaemonConfig {
    /// Address of the HTTP API (default `127.0.0.1:8765`).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// SQLite database file (created if absent).
    pub store: PathBuf,
    /// Policy name for `tessera_sched::build_policy` (default `fifo`).
    #[serde(default = "default_policy")]
    pub policy: String,
    /// Periodic scheduling round in seconds; absent = schedule on events only.
    #[serde(default)]
    pub round_seconds: Option<f64>,
    /// A registered truth (`tessera list truths`) whose catalogue profiles each job at
    /// submission, as the simulator's profilers do, so that knowledge-driven policies get
    /// estimates; absent = policies see no profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<String>,
    /// What a restart costs before the job makes progress again, for the attained service
    /// policies see: `none` (default: every GPU-second held counts) or `table` (the
    /// simulator's default restart costs: the model's checkpoint + restore time, during which
    /// no service is attained, as `tessera simulate` charges it).
    #[serde(default)]
    pub restart_costs: RestartCostMode,
    /// How often the backend is polled for job state changes, in milliseconds (default 500).
    #[serde(default = "default_poll_ms")]
    pub poll_interval_ms: u64,
    /// `full` (default): every commit is fsynced; `normal`: WAL fsynced at checkpoints only.
    #[serde(default)]
    pub sync: SyncMode,
    /// API clients: one bearer token per tenant, stored as its SHA-256.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// Request and queue limits.
    #[serde(default)]
    pub limits: Limits,
    /// When true, `GET /metrics` needs no token (default false: any valid token).
    #[serde(default)]
    pub public_metrics: bool,
    /// The resource manager that runs jobs.
    pub backend: BackendConfig,
}

/// SQLite durability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// `synchronous=FULL`: a commit survives power loss.
    #[default]
    Full,
    /// `synchronous=NORMAL`: a commit survives a daemon crash, not a power loss.
    Normal,
}

/// One API tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantConfig {
    /// Tenant name (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Lower-case hex SHA-256 of the bearer token (`tessera-daemon::hash_token`,
    /// or `printf %s TOKEN | sha256sum`).
    pub token_sha256: String,
    /// An admin sees and cancels every tenant's jobs.
    #[serde(default)]
    pub admin: bool,
}

/// Limits on requests and queues.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request body in bytes (default 65536).
    pub max_body_bytes: usize,
    /// Most pending + running jobs per tenant (default 10000).
    pub max_active_jobs_per_tenant: usize,
    /// Most pending + running jobs in total (default 100000).
    pub max_active_jobs: usize,
    /// Most GPUs one job may request (default 1024).
    pub max_gpus_per_job: u32,
    /// Most open client connections (default 1024); beyond it a new connection gets a 503
    /// and is closed, so idle or slow clients cannot exhaust the daemon's file descriptors.
    pub max_connections: usize,
    /// Milliseconds a client has to send a request's headers, and how long an idle
    /// keep-alive connection stays open (default 10000).
    pub header_timeout_ms: u64,
    /// Milliseconds a client has to send a request's body (default 30000).
    pub body_timeout_ms: u64,
    /// Milliseconds an answer may wait for a client that does not read it before the
    /// connection is closed (default 30000).
    pub send_timeout_ms: u64,
    /// Most open connections from one client address (default 128; IPv6 addresses count by
    /// their /64): beyond it a new connection from that address gets a 429 and is closed, so
    /// one client cannot take every slot under `maxConnections`. Loopback is one address.
    pub max_connections_per_client: usize,
    /// Failed authentications (a wrong bearer token) one client address may make in a burst
    /// (default 20); then every request from it gets a 429 until its allowance refills.
    pub auth_failure_burst: u32,
    /// Milliseconds for one failed authentication of the burst to be forgiven (default 1000).
    pub auth_failure_refill_ms: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_body_bytes: 64 * 1024,
            max_active_jobs_per_tenant: 10_000,
            max_active_jobs: 100_000,
            max_gpus_per_job: 1024,
            max_connections: 1024,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            send_timeout_ms: 30_000,
            max_connections_per_client: 128,
            auth_failure_burst: 20,
            auth_failure_refill_ms: 1000,
        }
    }
}

/// Which backend runs the jobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BackendConfig {
    /// Slurm, through its command-line tools.
    Slurm(SlurmConfig),
    /// Child processes on this machine.
    Local(LocalConfig),
}

/// Slurm backend settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlurmConfig {
    /// Directory for job scripts and output files (created; must be visible to the nodes).
    pub work_dir: PathBuf,
    /// Partition to submit to and take nodes from (default: all nodes, default partition).
    #[serde(default)]
    pub partition: Option<String>,
    /// `SLURM_CONF` for every Slurm command (default: inherited environment).
    #[serde(default)]
    pub slurm_conf: Option<PathBuf>,
    /// Directory of `sbatch`, `squeue`, `scontrol`, `scancel` (default: `PATH`).
    #[serde(default)]
    pub bin_dir: Option<PathBuf>,
    /// Slurm GRES type -> catalog GPU name, on top of the defaults (`a100` -> `A100-80GB`,
    /// `v100` -> `V100-32GB`, ...). MIG types `BASE_PROFILE` (`a100_3g.40gb`) are derived.
    #[serde(default)]
    pub gres_map: BTreeMap<String, String>,
    /// Catalog GPU for untyped GRES (`gpu:8`; default `A100-80GB`).
    #[serde(default)]
    pub default_gpu: Option<String>,
    /// Seconds before a Slurm command is killed (default 30).
    #[serde(default = "default_cmd_timeout")]
    pub command_timeout_seconds: u64,
}

/// One machine of the local backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalNodeConfig {
    /// Node name.
    pub name: String,
    /// Catalog GPU model name.
    pub gpu: String,
    /// GPUs (device indices `0..gpus` go into `CUDA_VISIBLE_DEVICES`).
    pub gpus: u32,
    /// CPU capacity.
    pub cpus: MilliCpu,
    /// Memory capacity.
    pub memory: Bytes,
}

/// Local backend settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalConfig {
    /// Directory for job scripts, output and exit-status files (created).
    pub work_dir: PathBuf,
    /// The logical nodes (default: one node `local` with 4 `A100-80GB`, 8 CPUs, 32Gi).
    #[serde(default = "default_local_nodes")]
    pub nodes: Vec<LocalNodeConfig>,
    /// Tenant -> Unix user its jobs run as (the daemon must run as root). Tenants not listed
    /// run as the daemon's user; only jobs of different users are isolated from each other.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub run_as: BTreeMap<String, String>,
    /// `PATH` used to find `nvidia-smi` (MIG reconfiguration); default the daemon's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_path: Option<String>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8765))
}
fn default_policy() -> String {
    "fifo".to_string()
}
fn default_poll_ms() -> u64 {
    500
}
fn default_cmd_timeout() -> u64 {
    30
}
fn default_local_nodes() -> Vec<LocalNodeConfig> {
    vec![LocalNodeConfig {
        name: "local".into(),
        gpu: "A100-80GB".into(),
        gpus: 4,
        cpus: MilliCpu::from_cores(8),
        memory: Bytes::from_gib(32),
    }]
}

/// Lower-case hex SHA-256 of a bearer token, as stored in the config and the store.
pub fn hash_token(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Random bytes from the OS (`/dev/urandom`), or a hash of the time and an address when it
/// cannot be read (job tokens only guard progress reports).
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    use std::io::Read;
    let mut buf = [0u8; N];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !ok {
        use sha2::{Digest, Sha256};
        let seed = Sha256::digest(
            format!(
                "{:?}{:p}{}",
                std::time::Instant::now(),
                &buf,
                std::process::id()
            )
            .as_bytes(),
        );
        for (b, s) in buf.iter_mut().zip(seed.iter().cycle()) {
            *b = *s;
        }
    }
    buf
}

/// Most memory one node or one job may declare (1 PiB): larger values are typos or attacks,
/// and would overflow the store's signed 64-bit integers and the MiB rounding.
pub const MAX_MEMORY: Bytes = Bytes(1 << 50);
/// Most CPU one node or one job may declare (one million cores).
pub const MAX_CPU: MilliCpu = MilliCpu(1_000_000_000);
/// Most GPUs one local node may declare: the core names a node's GPUs in a 64-bit mask.
pub const MAX_NODE_GPUS: u32 = tessera_model::GpuMask::MAX_GPUS;
/// Shortest scheduling round: below it the engine would do nothing but schedule.
pub const MIN_ROUND_SECONDS: f64 = 1.0;
/// Longest scheduling round (30 days).
pub const MAX_ROUND_SECONDS: f64 = 30.0 * 86_400.0;

/// True for 1..=63 characters of ASCII letters, digits, `-`, `_`, `.`, starting with a letter
/// or digit: the only names the daemon accepts (tenants, queues, jobs, nodes it shows).
pub fn is_safe_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

impl DaemonConfig {
    /// Reads and validates a YAML config file.
    pub fn from_file(path: &Path) -> Result<DaemonConfig, DaemonError> {
        let text = std::fs::read_to_string(path).map_err(|source| DaemonError::ConfigRead {
            path: path.to_path_buf(),
            source,
        })?;
        DaemonConfig::from_yaml(&text)
    }

    /// Parses and validates YAML config text.
    pub fn from_yaml(text: &str) -> Result<DaemonConfig, DaemonError> {
        let config: DaemonConfig =
            serde_norway::from_str(text).map_err(|e| DaemonError::Config(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Things that are valid but probably not what the operator meant; `tessera serve` and
    /// `tesserad` print them at start.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.tenants.is_empty() {
            w.push(
                "no tenant is configured: every API request except /healthz will be refused \
                 (401) until `tenants:` lists at least one (name + tokenSha256)"
                    .to_string(),
            );
        }
        w
    }

    /// Checks values serde cannot.
    pub fn validate(&self) -> Result<(), DaemonError> {
        let bad = |m: String| Err(DaemonError::Config(m));
        if let Some(t) = &self.truth {
            let options = tessera_mechanisms::TruthOptions::default();
            if tessera_mechanisms::build_truth(t, &options).is_none() {
                let known: Vec<&str> = tessera_mechanisms::truths().map(|(_, t)| t.name).collect();
                return bad(format!(
                    "truth: unknown truth {t:?} (known: {})",
                    known.join(", ")
                ));
            }
        }
        let mut names = std::collections::BTreeSet::new();
        // A token hash shared by two tenants would authenticate as whichever wins a lookup.
        let mut hashes: BTreeMap<String, &str> = BTreeMap::new();
        for t in &self.tenants {
            if !is_safe_name(&t.name) {
                return bad(format!("tenant name {:?} is not a safe name", t.name));
            }
            if !names.insert(t.name.as_str()) {
                return bad(format!("duplicate tenant {:?}", t.name));
            }
            if t.token_sha256.len() != 64 || !t.token_sha256.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return bad(format!(
                    "tenant {:?}: tokenSha256 must be 64 hex digits",
                    t.name
                ));
            }
            if let Some(other) = hashes.insert(t.token_sha256.to_ascii_lowercase(), &t.name) {
                return bad(format!(
                    "tenants {other:?} and {:?} have the same token (tokenSha256); give each tenant its own",
                    t.name
                ));
            }
        }
        if let Some(r) = self.round_seconds {
            if !(r.is_finite() && (MIN_ROUND_SECONDS..=MAX_ROUND_SECONDS).contains(&r)) {
                return bad(format!(
                    "roundSeconds must be between {MIN_ROUND_SECONDS} and {MAX_ROUND_SECONDS}, got {r}"
                ));
            }
        }
        let catalog = tessera_model::GpuCatalog::builtin();
        let known_gpus = || {
            catalog
                .models()
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        // A relative workDir would be resolved against whatever directory each job's wrapper
        // (or each Slurm node) starts in: every job would then fail, looking killed.
        let work_dir = match &self.backend {
            BackendConfig::Local(l) => &l.work_dir,
            BackendConfig::Slurm(s) => &s.work_dir,
        };
        if !work_dir.is_absolute() {
            return bad(format!(
                "backend.workDir must be an absolute path, got {:?}",
                work_dir.display().to_string()
            ));
        }
        if self.poll_interval_ms == 0 {
            return bad("pollIntervalMs must be positive".into());
        }
        if self.limits.max_body_bytes < 256 {
            return bad("limits.maxBodyBytes must be at least 256".into());
        }
        if self.limits.max_connections == 0 {
            return bad("limits.maxConnections must be positive".into());
        }
        if self.limits.max_connections_per_client == 0 {
            return bad("limits.maxConnectionsPerClient must be positive".into());
        }
        if self.limits.auth_failure_burst == 0 {
            return bad("limits.authFailureBurst must be positive".into());
        }
        if !(1..=3_600_000).contains(&self.limits.auth_failure_refill_ms) {
            return bad(format!(
                "limits.authFailureRefillMs must be between 1 and 3600000, got {}",
                self.limits.auth_failure_refill_ms
            ));
        }
        for (field, ms) in [
            ("headerTimeoutMs", self.limits.header_timeout_ms),
            ("bodyTimeoutMs", self.limits.body_timeout_ms),
            ("sendTimeoutMs", self.limits.send_timeout_ms),
        ] {
            if !(100..=3_600_000).contains(&ms) {
                return bad(format!(
                    "limits.{field} must be between 100 and 3600000, got {ms}"
                ));
            }
        }
        if let BackendConfig::Local(l) = &self.backend {
            if l.nodes.is_empty() {
                return bad("backend.nodes must not be empty".into());
            }
            for (tenant, user) in &l.run_as {
                if !is_safe_name(tenant) || !is_safe_name(user) {
                    return bad(format!(
                        "runAs: {tenant:?} -> {user:?}: tenant and user must be safe names"
                    ));
                }
            }
            let mut node_names = std::collections::BTreeSet::new();
            for n in &l.nodes {
                if !is_safe_name(&n.name) {
                    return bad(format!("local node name {:?} is not a safe name", n.name));
                }
                if !node_names.insert(n.name.as_str()) {
                    return bad(format!("duplicate local node {:?}", n.name));
                }
                if !crate::inventory::known_gpu_type(&n.gpu, &catalog) {
                    return bad(format!(
                        "local node {:?}: unknown GPU model {:?} (known: {})",
                        n.name,
                        n.gpu,
                        known_gpus()
                    ));
                }
                if n.gpus > MAX_NODE_GPUS {
                    return bad(format!(
                        "local node {:?}: gpus {} is more than {MAX_NODE_GPUS}",
                        n.name, n.gpus
                    ));
                }
                if n.memory > MAX_MEMORY {
                    return bad(format!(
                        "local node {:?}: memory {} is more than {MAX_MEMORY}",
                        n.name, n.memory.0
                    ));
                }
                if n.cpus > MAX_CPU {
                    return bad(format!(
                        "local node {:?}: cpus {} is more than {MAX_CPU}",
                        n.name, n.cpus
                    ));
                }
            }
        }
        if let BackendConfig::Slurm(s) = &self.backend {
            if let Some(p) = &s.partition {
                if !is_safe_name(p) {
                    return bad(format!("partition {p:?} is not a safe name"));
                }
            }
            for (gres, gpu) in s
                .gres_map
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain(s.default_gpu.as_deref().map(|g| ("defaultGpu", g)))
            {
                if catalog.find(gpu).is_none() {
                    return bad(format!(
                        "{gres}: unknown GPU model {gpu:?} (known: {})",
                        known_gpus()
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_config() {
        let text = format!(
            "listen: 127.0.0.1:9000\nstore: /tmp/x.db\npolicy: las\nroundSeconds: 30\n\
             tenants:\n  - {{name: alice, tokenSha256: {}}}\n  - {{name: ops, tokenSha256: {}, admin: true}}\n\
             limits: {{maxBodyBytes: 4096}}\n\
             backend:\n  kind: slurm\n  workDir: /tmp/jobs\n  gresMap: {{a100: A100-40GB}}\n",
            hash_token("a"),
            hash_token("b")
        );
        let c = DaemonConfig::from_yaml(&text).unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.limits.max_body_bytes, 4096);
        assert_eq!(c.limits.max_active_jobs, 100_000);
        assert!(c.tenants[1].admin);
        let BackendConfig::Slurm(s) = &c.backend else {
            panic!("slurm expected")
        };
        assert_eq!(s.gres_map["a100"], "A100-40GB");
    }

    #[test]
    fn defaults_and_rejections() {
        let c = DaemonConfig::from_yaml("store: x.db\nbackend: {kind: local, workDir: /tmp/w}\n")
            .unwrap();
        assert_eq!(c.listen, default_listen());
        assert!(c.listen.ip().is_loopback());
        assert_eq!(c.policy, "fifo");
        for bad in [
            "store: x\nbackend: {kind: k8s}\n",
            "store: x\nbogus: 1\nbackend: {kind: local, workDir: /w}\n",
            "store: x\ntenants: [{name: 'a b', tokenSha256: x}]\nbackend: {kind: local, workDir: /w}\n",
            "store: x\nroundSeconds: -1\nbackend: {kind: local, workDir: /w}\n",
        ] {
            assert!(DaemonConfig::from_yaml(bad).is_err(), "{bad}");
        }
    }

    fn rejection(text: &str) -> String {
        match DaemonConfig::from_yaml(text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn two_tenants_with_one_token_are_refused() {
        let h = hash_token("shared");
        let text = format!(
            "store: x\ntenants:\n  - {{name: alice, tokenSha256: {h}}}\n  - {{name: root, tokenSha256: {}, admin: true}}\nbackend: {{kind: local, workDir: /w}}\n",
            h.to_ascii_uppercase()
        );
        let e = rejection(&text);
        assert!(
            e.contains("alice") && e.contains("root") && e.contains("same token"),
            "{e}"
        );
    }

    #[test]
    fn restart_costs_are_none_or_table() {
        let base = "store: x\nbackend: {kind: local, workDir: /w}\n";
        let c = DaemonConfig::from_yaml(base).unwrap();
        assert_eq!(c.restart_costs, RestartCostMode::None);
        let c = DaemonConfig::from_yaml(&format!("restartCosts: table\n{base}")).unwrap();
        assert_eq!(c.restart_costs, RestartCostMode::Table);
        assert!(
            c.restart_costs.costs().checkpoint_restore("resnet50")
                > tessera_model::SimDuration::ZERO
        );
        rejection(&format!("restartCosts: sometimes\n{base}"));
    }

    #[test]
    fn a_truth_must_be_registered() {
        let base = "store: x\nbackend: {kind: local, workDir: /w}\n";
        let e = rejection(&format!("truth: nonsuch\n{base}"));
        assert!(e.contains("nonsuch") && e.contains("gavel"), "{e}");
        let c = DaemonConfig::from_yaml(&format!("truth: gavel\n{base}")).unwrap();
        assert_eq!(c.truth.as_deref(), Some("gavel"));
    }

    #[test]
    fn bad_local_nodes_and_rounds_are_refused() {
        let node = |name: &str, gpu: &str| {
            format!("{{name: {name}, gpu: {gpu}, gpus: 2, cpus: '8', memory: 16Gi}}")
        };
        let local = |nodes: &[String]| {
            format!(
                "store: x\nbackend: {{kind: local, workDir: /w, nodes: [{}]}}\n",
                nodes.join(", ")
            )
        };
        let e = rejection(&local(&[node("a", "A100-80GB"), node("a", "V100-32GB")]));
        assert!(e.contains("duplicate local node \"a\""), "{e}");
        let e = rejection(&local(&[node("a", "Z9000")]));
        assert!(e.contains("Z9000") && e.contains("A100-80GB"), "{e}");
        let ok = local(&[node("a", "A100-80GB"), node("b", "v100")]);
        DaemonConfig::from_yaml(&ok).unwrap();
        for r in ["0.000001", "1e-300", "0.5"] {
            let e = rejection(&format!("roundSeconds: {r}\n{ok}"));
            assert!(e.contains("roundSeconds"), "{e}");
        }
        DaemonConfig::from_yaml(&format!("roundSeconds: 1\n{ok}")).unwrap();
        let e = rejection(&format!("roundSeconds: 1e300\n{ok}"));
        assert!(e.contains("roundSeconds"), "{e}");
        let e = rejection(
            "store: x\nbackend: {kind: local, workDir: /w, nodes: [{name: a, gpu: A100-80GB, gpus: 2, cpus: '8', memory: 18446744073709551615}]}\n",
        );
        assert!(e.contains("memory"), "{e}");
        let e = rejection(
            "store: x\nbackend: {kind: slurm, workDir: /w, gresMap: {tesla: NoSuchGpu}}\n",
        );
        assert!(e.contains("NoSuchGpu"), "{e}");
        let e = rejection("store: x\nbackend: {kind: slurm, workDir: /w, defaultGpu: Nope}\n");
        assert!(e.contains("Nope"), "{e}");
    }

    #[test]
    fn warns_when_no_tenant_is_configured() {
        let c = DaemonConfig::from_yaml("store: x.db\nbackend: {kind: local, workDir: /tmp/w}\n")
            .unwrap();
        assert!(c.warnings().iter().any(|w| w.contains("no tenant")));
        let with = format!(
            "store: x.db\ntenants: [{{name: a, tokenSha256: {}}}]\nbackend: {{kind: local, workDir: /tmp/w}}\n",
            hash_token("t")
        );
        assert!(DaemonConfig::from_yaml(&with)
            .unwrap()
            .warnings()
            .is_empty());
    }

    #[test]
    fn safe_names() {
        for ok in ["a", "job-1", "A.b_c", "0x"] {
            assert!(is_safe_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a b", "a;rm", "é", "a/b", &"x".repeat(64)] {
            assert!(!is_safe_name(bad), "{bad}");
        }
        assert_eq!(hash_token("abc").len(), 64);
    }

    #[test]
    fn a_relative_work_dir_is_refused_naming_the_field() {
        for text in [
            "store: x\nbackend: {kind: slurm, workDir: ./jobs}\n",
            "store: x\nbackend: {kind: slurm, workDir: jobs}\n",
        ] {
            let e = DaemonConfig::from_yaml(text).unwrap_err().to_string();
            assert!(
                e.contains("backend.workDir") && e.contains("absolute"),
                "{e}"
            );
        }
        assert!(
            DaemonConfig::from_yaml("store: x\nbackend: {kind: slurm, workDir: /jobs}\n").is_ok()
        );
    }
}

/// `restartCosts:` in the config (see [`DaemonConfig::restart_costs`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RestartCostMode {
    /// Restarts cost nothing: service is every GPU-second held.
    #[default]
    None,
    /// The simulator's default table (`tessera_perf::RestartCosts::default()`).
    Table,
}

impl RestartCostMode {
    /// The costs this mode charges.
    pub fn costs(self) -> tessera_perf::RestartCosts {
        match self {
            RestartCostMode::None => tessera_perf::RestartCosts::free(),
            RestartCostMode::Table => tessera_perf::RestartCosts::default(),
        }
    }
}
