//! The daemon under hostile input and faults (issue 9): slow and idle connections, a cap on
//! connections, running out of file descriptors, oversized and deeply nested input, numbers
//! out of range, transient backend failures.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tessera_daemon::types::JobState;
use tessera_daemon::DaemonHandle;

use crate::common::*;

fn addr(d: &DaemonHandle) -> SocketAddr {
    d.addr()
}

/// Reads until the server closes the connection (or `limit` passes: then `None`).
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> Option<String> {
    s.set_read_timeout(Some(limit)).unwrap();
    let start = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(String::from_utf8_lossy(&out).into_owned()),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(String::from_utf8_lossy(&out).into_owned())
            }
            Err(_) => return None,
        }
        if start.elapsed() > limit {
            return None;
        }
    }
}

#[test]
fn idle_and_slow_clients_are_disconnected() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| {
        c.limits.header_timeout_ms = 500;
        c.limits.body_timeout_ms = 500;
    });
    let a = addr(&d);
    // Connected, silent.
    let mut idle = TcpStream::connect(a).unwrap();
    // Headers started, never finished.
    let mut slow_head = TcpStream::connect(a).unwrap();
    slow_head
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // Headers complete, body announced but only partly sent.
    let mut slow_body = TcpStream::connect(a).unwrap();
    slow_body
        .write_all(
            format!(
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\nContent-Length: 100\r\n\r\nname: a\n"
            )
            .as_bytes(),
        )
        .unwrap();
    // A finished request on a keep-alive connection, then nothing.
    let mut kept = TcpStream::connect(a).unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    for (what, s) in [
        ("idle", &mut idle),
        ("slow headers", &mut slow_head),
        ("slow body", &mut slow_body),
        ("idle keep-alive", &mut kept),
    ] {
        let got = read_until_closed(s, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{what}: still open after 5 s"));
        if what == "slow body" {
            assert!(got.starts_with("HTTP/1.1 408"), "{what}: {got}");
        }
        if what == "idle keep-alive" {
            assert!(got.starts_with("HTTP/1.1 200"), "{what}: {got}");
        }
    }
    // Still serving.
    assert!(client(&d, ALICE).list().is_ok());
}

#[test]
fn connections_beyond_the_cap_get_a_503_and_the_daemon_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| {
        c.limits.max_connections = 4;
        c.limits.header_timeout_ms = 60_000;
    });
    let a = addr(&d);
    let held: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(a).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = TcpStream::connect(a).unwrap();
    let got = read_until_closed(&mut extra, Duration::from_secs(5)).expect("refused and closed");
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains("at most 4 connections"), "{got}");
    drop(held);
    wait_until("a slot is free again", Duration::from_secs(5), || {
        client(&d, ALICE).list().is_ok()
    });
}

#[test]
fn errors_do_not_echo_large_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| c.limits.max_body_bytes = 256 * 1024);
    let long_key = "k".repeat(60_000);
    let alice = client(&d, ALICE);
    for body in [
        format!("name: a\ncommand: [x]\ngpus: 1\n{long_key}: 1\n"),
        format!("{{\"name\": \"a\", \"{long_key}\": 1}}"),
    ] {
        match alice.submit(&body) {
            Err(tessera_daemon::ClientError::Api {
                status, message, ..
            }) => {
                assert_eq!(status, 400);
                assert!(message.len() < 1024, "{} bytes echoed", message.len());
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn deeply_nested_specs_are_refused_and_others_keep_being_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |_| {});
    let deep = format!(
        "name: a\ncommand: [x]\ngpus: 1\nhints: {}",
        "[".repeat(60_000)
    );
    let url = d.url();
    let attackers: Vec<_> = (0..4)
        .map(|_| {
            let (url, deep) = (url.clone(), deep.clone());
            std::thread::spawn(move || {
                tessera_daemon::Client::new(&url, Some(ALICE.into())).submit(&deep)
            })
        })
        .collect();
    let bob = client(&d, BOB);
    let ok = bob.submit(&job("fine", 1, "true")).unwrap();
    for a in attackers {
        match a.join().unwrap() {
            Err(tessera_daemon::ClientError::Api {
                status, message, ..
            }) => {
                assert_eq!(status, 400);
                assert!(message.contains("levels deep"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(bob.describe(ok.id).unwrap().job.name, "fine");
}

#[test]
fn out_of_range_numbers_are_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |_| {});
    let alice = client(&d, ALICE);
    let e = alice
        .submit(&format!(
            "{}memory: 18446744073709551615\n",
            job("big", 1, "true")
        ))
        .unwrap_err();
    assert!(e.to_string().contains("memory"), "{e}");
    // Progress beyond what the store can hold is refused (it used to read back as 0): with a
    // tenant's token the token is refused first (403; bodies are parsed only once the caller
    // is authorised); the bound itself is checked with the job's token in
    // core::tests::progress_beyond_what_the_store_holds_is_refused.
    let j = alice.submit(&job("small", 1, "true")).unwrap();
    let report = tessera_daemon::types::ProgressReport {
        iterations: 1u64 << 63,
        samples_per_second: None,
        iterations_per_second: None,
        point: None,
    };
    let e = alice.report_progress(j.id, &report).unwrap_err();
    assert!(
        matches!(e, tessera_daemon::ClientError::Api { status: 403, .. }),
        "{e}"
    );
}

/// A backend whose submissions fail for lack of file descriptors a number of times.
struct Exhausted {
    inner: tessera_daemon::backend::NullBackend,
    fail_submits: u32,
}

impl tessera_daemon::Backend for Exhausted {
    fn kind(&self) -> &'static str {
        "exhausted"
    }
    fn inventory(
        &mut self,
    ) -> Result<Vec<tessera_daemon::backend::InventoryNode>, tessera_daemon::BackendError> {
        Ok(null_nodes())
    }
    fn submit(
        &mut self,
        l: &tessera_daemon::backend::Launch,
    ) -> Result<tessera_daemon::backend::Handle, tessera_daemon::BackendError> {
        if self.fail_submits > 0 {
            self.fail_submits -= 1;
            return Err(tessera_daemon::BackendError::from_io(
                "/bin/sh",
                &std::io::Error::from_raw_os_error(libc::EMFILE),
            ));
        }
        self.inner.submit(l)
    }
    fn cancel(
        &mut self,
        h: &tessera_daemon::backend::Handle,
    ) -> Result<(), tessera_daemon::BackendError> {
        self.inner.cancel(h)
    }
    fn preempt(
        &mut self,
        h: &tessera_daemon::backend::Handle,
    ) -> Result<(), tessera_daemon::BackendError> {
        self.inner.preempt(h)
    }
    fn poll(
        &mut self,
        h: &[tessera_daemon::backend::Handle],
    ) -> Result<
        Vec<(
            tessera_daemon::backend::Handle,
            tessera_daemon::backend::RunStatus,
        )>,
        tessera_daemon::BackendError,
    > {
        self.inner.poll(h)
    }
    fn find(
        &mut self,
        n: &str,
    ) -> Result<Option<tessera_daemon::backend::Handle>, tessera_daemon::BackendError> {
        self.inner.find(n)
    }
}

#[test]
fn running_out_of_descriptors_never_fails_a_pending_job() {
    use std::sync::Arc;
    use tessera_model::{SimDuration, SimTime};
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), local_backend(dir.path(), 1));
    let clock = Arc::new(tessera_daemon::ManualClock::new(SimTime::from_secs(1_000)));
    let backend = Exhausted {
        inner: tessera_daemon::backend::NullBackend::new(vec![]),
        fail_submits: 10,
    };
    let mut e = tessera_daemon::Engine::open(&c, Box::new(backend), clock.clone()).unwrap();
    e.submit_many(ALICE, &[job("patient", 1, "true")])
        .remove(0)
        .unwrap();
    for _ in 0..11 {
        e.schedule();
        clock.advance(SimDuration::from_secs(6));
    }
    let counts = e.count_by_state();
    assert_eq!(counts.get(&JobState::Failed), None, "{counts:?}");
    assert_eq!(counts.get(&JobState::Running), Some(&1), "{counts:?}");
}

#[test]
fn progress_is_accepted_only_with_the_jobs_own_token() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), local_backend(dir.path(), 4));
    let backend = tessera_daemon::build_backend(&c.backend).unwrap();
    let d =
        tessera_daemon::spawn(c, backend, Arc::new(tessera_daemon::SystemClock::new())).unwrap();
    let (alice, bob) = (client(&d, ALICE), client(&d, BOB));
    let show = "name: t\ngpus: 1\nscript: |\n  echo \"$TESSERA_TOKEN\"\n  sleep 30\n";
    let mine = alice.submit(show).unwrap();
    let theirs = bob.submit(show).unwrap();
    let token_of = |id: i64| -> String {
        let mut token = String::new();
        wait_until("the job printed its token", Duration::from_secs(20), || {
            let runs = std::fs::read_dir(dir.path().join("runs")).unwrap();
            for r in runs.flatten() {
                if r.file_name()
                    .to_string_lossy()
                    .ends_with(&format!("-{id}-1"))
                {
                    token = std::fs::read_to_string(r.path().join("output.log"))
                        .unwrap_or_default()
                        .trim()
                        .to_string();
                }
            }
            !token.is_empty()
        });
        token
    };
    let (my_token, their_token) = (token_of(mine.id), token_of(theirs.id));
    let report = tessera_daemon::types::ProgressReport {
        iterations: 10,
        samples_per_second: Some(5.0),
        iterations_per_second: None,
        point: None,
    };
    let code = |r: Result<_, tessera_daemon::ClientError>| match r {
        Ok(_) => 200,
        Err(tessera_daemon::ClientError::Api { status, .. }) => status,
        Err(e) => panic!("{e}"),
    };
    // The tenant's own token, and another job's token, are refused.
    assert_eq!(code(alice.report_progress(mine.id, &report)), 403);
    let other = tessera_daemon::Client::new(&d.url(), Some(their_token));
    assert!(matches!(
        code(other.report_progress(mine.id, &report)),
        403 | 404
    ));
    let own = tessera_daemon::Client::new(&d.url(), Some(my_token));
    assert_eq!(code(own.report_progress(mine.id, &report)), 200);
    let p = alice.describe(mine.id).unwrap().job.progress.unwrap();
    assert_eq!(p.iterations, 10);
    alice.cancel(mine.id).unwrap();
    bob.cancel(theirs.id).unwrap();
}

/// The status of a `POST path` with `body` (and `token` as bearer, if any).
fn post_status(d: &DaemonHandle, path: &str, token: Option<&str>, body: &str) -> u16 {
    let mut s = TcpStream::connect(addr(d)).unwrap();
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: x\r\n{auth}content-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let answer = read_until_closed(&mut s, Duration::from_secs(10)).expect("an answer");
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[test]
fn report_bodies_are_parsed_only_after_the_token_is_checked() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path(), local_backend(dir.path(), 4));
    let backend = tessera_daemon::build_backend(&c.backend).unwrap();
    let d =
        tessera_daemon::spawn(c, backend, Arc::new(tessera_daemon::SystemClock::new())).unwrap();
    let job = client(&d, ALICE)
        .submit("name: t\ngpus: 1\ncommand: [sleep, '30']\n")
        .unwrap();
    let garbage = "{\"queueLength\": [[[[ not json";
    for path in [
        format!("/v1/jobs/{}/progress", job.id),
        "/v1/services/1/instances/1/load".to_string(),
    ] {
        for token in [None, Some("not-a-token")] {
            // 401, not a 400 that tells the guesser its body was read as JSON.
            assert_eq!(
                post_status(&d, &path, token, garbage),
                401,
                "{path} {token:?}"
            );
        }
    }
    client(&d, ALICE).cancel(job.id).unwrap();
}

/// A tmpfs of a few MB mounted for one test (needs root and permission to mount; the test
/// skips otherwise), unmounted when dropped.
struct SmallDisk {
    path: std::path::PathBuf,
}

impl SmallDisk {
    fn mount(path: &std::path::Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(path).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

/// Fills the file system of `dir` with one file until it is full.
fn fill(path: &std::path::Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5au8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

#[test]
fn a_full_disk_keeps_reads_and_running_jobs_and_loses_nothing_acknowledged() {
    use crate::restart::{free_port, start_tesserad};
    use tessera_daemon::{Client, ClientError};
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&dir.path().join("small"), "4m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let mut config = config(dir.path(), local_backend(dir.path(), 4));
    config.store = disk.path.join("t.db");
    config.poll_interval_ms = 100;
    let d = start_tesserad(dir.path(), config.clone(), free_port());
    let alice = Client::new(&d.url, Some(ALICE.into()));
    let first = alice.submit(&job("first", 1, "sleep 4")).unwrap();
    wait_until("first runs", Duration::from_secs(20), || {
        alice.describe(first.id).unwrap().job.state == JobState::Running
    });
    let filler = disk.path.join("filler");
    fill(&filler);
    // Write until the store refuses: padded specs fill what the WAL had left.
    let padding = format!("# {}\n", "p".repeat(120)).repeat(100);
    let padded = |i: usize| {
        format!(
            "name: pad-{i}\ngpus: 1\nscript: |\n  sleep 1\n  {}\n",
            padding.replace('\n', "\n  ")
        )
    };
    let mut acknowledged = vec![first.id];
    let mut refusal = None;
    for i in 0..2000 {
        match alice.submit(&padded(i)) {
            Ok(j) => acknowledged.push(j.id),
            Err(ClientError::Api {
                status: 503,
                message,
                ..
            }) => {
                refusal = Some(message);
                break;
            }
            Err(e) => panic!("submission {i}: {e}"),
        }
    }
    let refusal = refusal.expect("the store never ran out of space");
    assert!(refusal.contains("store"), "{refusal}");
    // Reads are served; the running job is still tracked, and its end is seen.
    assert!(alice.list().unwrap().len() >= acknowledged.len());
    wait_until(
        "first completes while the disk is full",
        Duration::from_secs(20),
        || alice.describe(first.id).unwrap().job.state == JobState::Completed,
    );
    assert!(matches!(
        alice.submit(&job("still-full", 1, "true")),
        Err(ClientError::Api { status: 503, .. })
    ));
    // Space comes back: writes resume by themselves.
    std::fs::remove_file(&filler).unwrap();
    let mut after = None;
    wait_until("writes resume", Duration::from_secs(20), || {
        match alice.submit(&job("after", 1, "true")) {
            Ok(j) => {
                after = Some(j.id);
                true
            }
            Err(_) => false,
        }
    });
    acknowledged.push(after.unwrap());
    wait_until("every job ends", Duration::from_secs(60), || {
        alice.list().unwrap().iter().all(|j| j.state.is_terminal())
    });
    drop(d);
    let store = tessera_daemon::store::Store::open(&config.store, Default::default()).unwrap();
    let rows = store.load_jobs().unwrap();
    for id in &acknowledged {
        assert!(
            rows.iter().any(|r| r.id == *id),
            "acknowledged job {id} lost"
        );
    }
    let f = rows.iter().find(|r| r.id == first.id).unwrap();
    assert_eq!((f.state, f.exit_code), (JobState::Completed, Some(0)));
    drop(store);
}

#[test]
fn running_out_of_descriptors_changes_no_jobs_outcome() {
    use crate::restart::free_port;
    use tessera_daemon::Client;
    /// Our child (`sh` exec'ed into `tesserad`, same pid), killed and reaped when dropped.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), local_backend(dir.path(), 4));
    config.poll_interval_ms = 100;
    config.limits.max_connections = 10_000; // let the descriptors run out
    config.limits.max_connections_per_client = 10_000; // all from one address
    config.limits.header_timeout_ms = 120_000; // and stay out until the test ends it
    let port = free_port();
    config.listen = format!("127.0.0.1:{port}").parse().unwrap();
    let path = dir.path().join("tesserad.yaml");
    std::fs::write(&path, serde_norway::to_string(&config).unwrap()).unwrap();
    let log = std::fs::File::create(dir.path().join("tesserad.log")).unwrap();
    // The daemon gets a small descriptor limit of its own.
    let child = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" --config \"$1\"")
        .arg(env!("CARGO_BIN_EXE_tesserad"))
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let pid = child.id();
    let url = format!("http://127.0.0.1:{port}");
    let _daemon = Child(child);
    let alice = Client::new(&url, Some(ALICE.into()));
    wait_until("tesserad answers", Duration::from_secs(30), || {
        alice.list().is_ok()
    });
    let first = alice.submit(&job("first", 1, "sleep 3")).unwrap();
    wait_until("first runs", Duration::from_secs(20), || {
        alice.describe(first.id).unwrap().job.state == JobState::Running
    });
    // One connection opened before the flood, to submit through while it lasts.
    let mut spare = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let open_fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let mut flood = Vec::new();
    while open_fds() < 63 && flood.len() < 500 {
        flood.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(open_fds() >= 63, "the daemon's descriptors did not run out");
    // More waiting in the listen backlog: any descriptor freed is taken by the next accept.
    for _ in 0..64 {
        flood.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    let body = job("second", 1, "true");
    spare
        .write_all(
            format!(
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
    let answer = read_until_closed(&mut spare, Duration::from_secs(10)).expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    // Out of descriptors for longer than `first` runs and than three submission retries.
    std::thread::sleep(Duration::from_secs(12));
    drop(flood);
    wait_until("both jobs end", Duration::from_secs(30), || {
        alice
            .list()
            .is_ok_and(|l| l.len() == 2 && l.iter().all(|j| j.state.is_terminal()))
    });
    for j in alice.list().unwrap() {
        assert_eq!(
            (j.state, j.exit_code),
            (JobState::Completed, Some(0)),
            "{}: {:?}",
            j.name,
            j.message
        );
    }
}

#[test]
fn a_client_that_never_reads_its_answers_loses_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| {
        c.limits.max_connections = 1;
        c.limits.send_timeout_ms = 500;
    });
    let alice = client(&d, ALICE);
    for i in 0..100 {
        alice.submit(&job(&format!("j{i}"), 1, "true")).unwrap();
    }
    drop(alice);
    wait_until("the slot is free", Duration::from_secs(5), || {
        client(&d, ALICE).list().is_ok()
    });
    // Pipelined requests whose answers (tens of MB) it never reads: the daemon's writes stall.
    let mut stalled = TcpStream::connect(addr(&d)).unwrap();
    let request =
        format!("GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n\r\n");
    stalled
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    for _ in 0..500 {
        if stalled.write_all(request.as_bytes()).is_err() {
            break;
        }
    }
    // The only slot is taken until the daemon gives up on that client.
    wait_until("another client is served", Duration::from_secs(20), || {
        client(&d, ALICE).list().is_ok()
    });
    drop(stalled);
}
