//! The real-mode verbs against a live `tessera serve` (local backend, child processes).

use std::net::TcpListener;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::{stderr, stdout, tessera};

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const TOKEN: &str = "alice-secret";
// sha256("alice-secret")
fn token_hash() -> String {
    tessera_daemon::hash_token(TOKEN)
}

#[test]
fn submit_list_describe_queue_nodes_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("tessera.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:{port}\nstore: {store}\npolicy: fifo\ntenants:\n  - name: alice\n    tokenSha256: {hash}\nbackend:\n  kind: local\n  workDir: {work}\n  nodes:\n    - {{name: box, gpu: A100-80GB, gpus: 2, cpus: 8, memory: 16Gi}}\n",
            store = dir.path().join("store.db").display(),
            hash = token_hash(),
            work = dir.path().join("runs").display(),
        ),
    )
    .unwrap();
    let _daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .spawn()
            .unwrap(),
    );
    let server = format!("http://127.0.0.1:{port}");
    let verb = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--server", &server, "--token", TOKEN]);
        tessera(&all)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = verb(&["nodes"]);
        if o.status.success() {
            assert!(
                stdout(&o).contains("box")
                    && stdout(&o).contains("0/2")
                    && stdout(&o).contains("2 free"),
                "{}",
                stdout(&o)
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "daemon did not come up: {}",
            stderr(&o)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let spec = dir.path().join("job.yaml");
    std::fs::write(&spec, "name: sleeper\ncommand: [sleep, \"30\"]\ngpus: 2\n").unwrap();
    let o = verb(&["submit", spec.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("submitted job 1 (sleeper)"),
        "{}",
        stdout(&o)
    );
    // A second job must wait behind the first: both want both GPUs.
    std::fs::write(&spec, "name: waiter\ncommand: [\"true\"]\ngpus: 2\n").unwrap();
    assert!(verb(&["submit", spec.to_str().unwrap()]).status.success());

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = verb(&["list", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let jobs: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        if jobs[0]["state"] == "running" {
            assert_eq!(jobs[1]["state"], "pending");
            break;
        }
        assert!(Instant::now() < deadline, "job 1 did not start: {jobs}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The running job's device-level allocation and its cell.
    let o = verb(&["describe", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(" gpus=2 ")
            && stdout(&o).contains("devices=[0,1] whole")
            && stdout(&o)
                .contains("cell:           2 x A100-80GB, plan data=2 tensor=1 pipeline=1"),
        "{}",
        stdout(&o)
    );
    let o = verb(&["describe", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("pending reason") && stdout(&o).contains("queue position: 1"),
        "{}",
        stdout(&o)
    );
    let o = verb(&["queue"]);
    assert!(
        o.status.success() && stdout(&o).contains("waiter"),
        "{}",
        stdout(&o)
    );

    let o = verb(&["cancel", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("cancelled"), "{}", stdout(&o));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = verb(&["list", "--state", "completed", "--json"]);
        let jobs: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        if jobs
            .as_array()
            .is_some_and(|a| a.iter().any(|j| j["name"] == "waiter"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "job 2 did not run after the cancel"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Wrong token and an unreachable daemon are clear errors.
    let o = tessera(&["list", "--server", &server, "--token", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("401") || stderr(&o).to_lowercase().contains("unauthorized"),
        "{}",
        stderr(&o)
    );
    let o = tessera(&["list", "--server", "http://127.0.0.1:1", "--token", TOKEN]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("listing jobs"), "{}", stderr(&o));
}

const ADMIN: &str = "ops-secret";

/// `tessera` with a clean environment but for `vars` (no TESSERA_* of the caller's).
fn tessera_env(args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("TESSERA_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(vars.iter().copied());
    cmd.output().expect("run tessera")
}

/// Issues 39 (services and nodes verbs) and 41 (environment names, hints, quantities, a
/// service document given to `submit`, a daemon that never started).
#[test]
fn services_and_nodes_verbs_env_names_and_hints() {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("tessera.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:{port}\nstore: {store}\npolicy: tessera\npollIntervalMs: 100\ntenants:\n  - {{name: alice, tokenSha256: {hash}}}\n  - {{name: ops, tokenSha256: {admin}, admin: true}}\nbackend:\n  kind: local\n  workDir: {work}\n  nodes:\n    - {{name: box, gpu: A100-80GB, gpus: 2, cpus: 8, memory: 32Gi}}\n",
            store = dir.path().join("store.db").display(),
            hash = token_hash(),
            admin = tessera_daemon::hash_token(ADMIN),
            work = dir.path().join("runs").display(),
        ),
    )
    .unwrap();
    let _daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let server = format!("http://127.0.0.1:{port}");
    // The environment names the daemon and the token: TESSERA_URL and TESSERA_API_TOKEN.
    let env = [
        ("TESSERA_URL", server.as_str()),
        ("TESSERA_API_TOKEN", TOKEN),
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = tessera_env(&["nodes"], &env);
        if o.status.success() {
            assert!(stdout(&o).contains("0/32Gi"), "{}", stdout(&o));
            break;
        }
        assert!(Instant::now() < deadline, "no daemon: {}", stderr(&o));
        std::thread::sleep(Duration::from_millis(100));
    }
    // The older names still work outside a job.
    let old = [
        ("TESSERA_SERVER", server.as_str()),
        ("TESSERA_TOKEN", TOKEN),
    ];
    let o = tessera_env(&["list"], &old);
    assert!(o.status.success(), "{}", stderr(&o));
    // Inside a job TESSERA_TOKEN is the job's own: never taken as the tenant's.
    let in_job = [
        ("TESSERA_URL", server.as_str()),
        ("TESSERA_TOKEN", TOKEN),
        ("TESSERA_JOB_ID", "7"),
    ];
    let o = tessera_env(&["list"], &in_job);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("inside a job") && stderr(&o).contains("TESSERA_API_TOKEN"),
        "{}",
        stderr(&o)
    );
    // A 401 says what to do.
    let o = tessera_env(&["list", "--server", &server], &[]);
    assert!(
        stderr(&o).contains("pass --token TOKEN or set TESSERA_API_TOKEN"),
        "{}",
        stderr(&o)
    );
    let o = tessera_env(&["list", "--server", &server, "--token", "nope"], &[]);
    assert!(
        stderr(&o).contains("--token is not one of"),
        "{}",
        stderr(&o)
    );

    // A job asking 10 GB is described in those units, not 9765625Ki.
    let spec = dir.path().join("job.yaml");
    std::fs::write(
        &spec,
        "name: tenner\ncommand: [sleep, \"600\"]\ngpus: 1\nmemory: 10G\n",
    )
    .unwrap();
    let o = tessera_env(&["submit", spec.to_str().unwrap()], &env);
    assert!(o.status.success(), "{}", stderr(&o));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = tessera_env(&["describe", "1"], &env);
        if stdout(&o).contains("allocation:") {
            // The daemon holds 10 GB rounded up to whole MiB: 9537Mi, shown as GiB.
            assert!(stdout(&o).contains("memory=9.31Gi "), "{}", stdout(&o));
            assert!(!stdout(&o).contains("Ki"), "{}", stdout(&o));
            break;
        }
        assert!(Instant::now() < deadline, "{}", stdout(&o));
        std::thread::sleep(Duration::from_millis(100));
    }
    // A type this cluster lacks: refused with the cluster's types.
    std::fs::write(
        &spec,
        "name: h\ncommand: [\"true\"]\ngpus: 1\ngpuType: H100\n",
    )
    .unwrap();
    let o = tessera_env(&["submit", spec.to_str().unwrap()], &env);
    assert!(
        stderr(&o).contains("this cluster has: A100-80GB"),
        "{}",
        stderr(&o)
    );

    // Services: a service document given to `submit` is named, then submitted as one.
    let svc = dir.path().join("svc.yaml");
    std::fs::write(
        &svc,
        "apiVersion: tessera/v1\nkind: Workload\nmetadata:\n  command: [sleep, \"600\"]\nspec:\n  services:\n    - name: bert\n      startSeconds: 0\n      endSeconds: 86400\n      sloMilliseconds: 50\n      maxBatch: 8\n      coldStartSeconds: 5\n      resources: {cpu: '1', memory: 4Gi, gpuMemory: 10G, smRequest: 0.3, smLimit: 0.5}\n      arrivals: {poisson: {rate: 50}}\n",
    )
    .unwrap();
    let o = tessera_env(&["submit", svc.to_str().unwrap()], &env);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("tessera services submit"),
        "{}",
        stderr(&o)
    );
    let o = tessera_env(&["services", "submit", svc.to_str().unwrap()], &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("submitted service 1 (bert)"),
        "{}",
        stdout(&o)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = tessera_env(&["services", "describe", "1"], &env);
        assert!(o.status.success(), "{}", stderr(&o));
        if stdout(&o).contains(" running attempt 1 on box gpus=") {
            assert!(stdout(&o).contains("gpu-memory=10G"), "{}", stdout(&o));
            break;
        }
        assert!(Instant::now() < deadline, "{}", stdout(&o));
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = tessera_env(&["services", "list"], &env);
    assert!(
        stdout(&o).contains("bert") && stdout(&o).contains("active"),
        "{}",
        stdout(&o)
    );
    let o = tessera_env(&["services", "retire", "1"], &env);
    assert!(
        o.status.success() && stdout(&o).contains("retired"),
        "{} {}",
        stdout(&o),
        stderr(&o)
    );

    // Nodes: drain and undrain are for admins; health shows the result.
    let o = tessera_env(&["nodes", "drain", "box"], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("administrator"), "{}", stderr(&o));
    let admin = [
        ("TESSERA_URL", server.as_str()),
        ("TESSERA_API_TOKEN", ADMIN),
    ];
    let o = tessera_env(&["nodes", "drain", "box"], &admin);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("node box: draining"), "{}", stdout(&o));
    let o = tessera_env(&["nodes", "health", "box"], &admin);
    assert!(stdout(&o).contains("draining"), "{}", stdout(&o));
    let o = tessera_env(&["nodes", "health", "nowhere"], &admin);
    assert!(stderr(&o).contains("nodes: box"), "{}", stderr(&o));
    let o = tessera_env(&["nodes", "undrain", "box"], &admin);
    assert!(stdout(&o).contains("node box: up"), "{}", stdout(&o));
    let o = tessera_env(&["nodes", "health", "box", "--set", "down"], &admin);
    assert!(stdout(&o).contains("node box: down"), "{}", stdout(&o));
    let o = tessera_env(&["nodes", "health", "box", "--set", "up"], &admin);
    assert!(stdout(&o).contains("node box: up"), "{}", stdout(&o));
    let o = tessera_env(&["cancel", "1"], &env);
    assert!(o.status.success(), "{}", stderr(&o));

    // A second daemon on the same address never starts: it does not say it "stopped".
    let second = dir.path().join("second.yaml");
    std::fs::write(
        &second,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("store.db", "other.db"),
    )
    .unwrap();
    let o = tessera_env(&["serve", "--config", second.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("could not start") && !stderr(&o).contains("daemon stopped"),
        "{}",
        stderr(&o)
    );
}
