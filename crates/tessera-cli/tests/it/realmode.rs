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
