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
    // Progress beyond what the store can hold is refused (it used to read back as 0).
    let j = alice.submit(&job("small", 1, "true")).unwrap();
    let report = tessera_daemon::types::ProgressReport {
        iterations: 1u64 << 63,
        samples_per_second: None,
        iterations_per_second: None,
    };
    let e = alice.report_progress(j.id, &report).unwrap_err();
    assert!(
        matches!(e, tessera_daemon::ClientError::Api { status: 400, .. }),
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
