//! Per-client protections (issue 42): a client guessing tokens is answered 429 after a few
//! failures, with one log line; one client cannot take every connection slot.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tessera_daemon::ClientError;

use crate::common::*;

/// Warnings and errors logged by this test process (a global `tracing` subscriber: the
/// daemon's server runs on its own runtime's threads).
static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        *meta.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut m = Message(String::new());
        event.record(&mut m);
        LOGGED.lock().unwrap().push(m.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn capture_logs() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        tracing::subscriber::set_global_default(Capture).expect("no other global subscriber");
    });
}

fn logged(needle: &str) -> usize {
    LOGGED
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.contains(needle))
        .count()
}

/// A connection to `to` from the loopback address `from` (any of 127/8 reaches the daemon on
/// 127.0.0.1, and counts as another client).
pub(crate) fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).unwrap();
        socket.connect(to).await.unwrap()
    });
    let s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

/// One request on `s` (closing after it); the whole answer.
pub(crate) fn request(mut s: TcpStream, path: &str, token: &str) -> String {
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

pub(crate) fn status(answer: &str) -> u16 {
    answer
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[test]
fn token_guessing_is_limited_per_client_with_one_log_line() {
    capture_logs();
    let dir = tempfile::tempdir().unwrap();
    let refill = Duration::from_millis(400);
    let d = null_daemon(dir.path(), |c| {
        c.limits.auth_failure_burst = 5;
        c.limits.auth_failure_refill_ms = refill.as_millis() as u64;
    });
    let needle = "too many failed authentications from 127.0.0.1";
    let guesser = client(&d, "wrong-token");
    let start = Instant::now();
    let (mut unauthorized, mut limited) = (0, 0);
    for _ in 0..200 {
        match guesser.list() {
            Err(ClientError::Api { status: 401, .. }) => unauthorized += 1,
            Err(ClientError::Api { status: 429, .. }) => limited += 1,
            other => panic!("{other:?}"),
        }
    }
    // The burst, plus what refilled while the loop ran.
    let allowed = 5 + (start.elapsed().as_millis() / refill.as_millis()) as usize;
    assert!(
        (5..=allowed).contains(&unauthorized),
        "{unauthorized} guesses answered in {:?}",
        start.elapsed()
    );
    assert!(limited >= 200 - allowed, "{limited} limited");
    // The refusal says when to come back; every request from the address is refused,
    // the right token too, while another address is served.
    let a = d.addr();
    let refused = request(connect_from(Ipv4Addr::LOCALHOST, a), "/v1/jobs", ALICE);
    assert_eq!(status(&refused), 429, "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("retry-after: 1"),
        "{refused}"
    );
    let other = request(
        connect_from(Ipv4Addr::new(127, 0, 0, 2), a),
        "/v1/jobs",
        ALICE,
    );
    assert_eq!(status(&other), 200, "{other}");
    // After the window, the right token works from the guesser's address.
    std::thread::sleep(refill + Duration::from_millis(100));
    assert!(client(&d, ALICE).list().is_ok());
    // One log line for the many refusals, and the metric agrees.
    assert_eq!(logged(needle), 1, "{:?}", LOGGED.lock().unwrap());
    let metrics = client(&d, ADMIN).metrics().unwrap();
    assert!(
        metrics.contains("tessera_auth_limited_total 1\n"),
        "{metrics}"
    );
}

#[test]
fn requests_without_a_token_do_not_count_as_guesses() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| c.limits.auth_failure_burst = 2);
    let anonymous = tessera_daemon::Client::new(&format!("http://{}", d.addr()), None);
    for _ in 0..20 {
        assert!(matches!(
            anonymous.list(),
            Err(ClientError::Api { status: 401, .. })
        ));
    }
    assert!(client(&d, ALICE).list().is_ok());
}

#[test]
fn one_client_cannot_take_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let d = null_daemon(dir.path(), |c| {
        c.limits.max_connections = 16;
        c.limits.max_connections_per_client = 3;
        c.limits.header_timeout_ms = 60_000;
    });
    let a = d.addr();
    let held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(a).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let over = request(TcpStream::connect(a).unwrap(), "/v1/jobs", ALICE);
    assert_eq!(status(&over), 429, "{over}");
    assert!(over.contains("holds 3 connections"), "{over}");
    // Another client is served meanwhile, on several connections at once.
    let others: Vec<TcpStream> = (0..3)
        .map(|_| connect_from(Ipv4Addr::new(127, 0, 0, 3), a))
        .collect();
    for s in others {
        let answer = request(s, "/v1/jobs", ALICE);
        assert_eq!(status(&answer), 200, "{answer}");
    }
    drop(held);
    wait_until(
        "the capped client is served again",
        Duration::from_secs(5),
        || client(&d, ALICE).list().is_ok(),
    );
}
