//! Per-client protections of the request path, keyed by the client's address: a cap on its
//! open connections and a limit on its failed authentications (token guessing).
//!
//! Tokens are checked by the engine, so the limiter watches answers: a `401` to a request
//! that carried a token spends one unit of that address's allowance; with none left, every
//! request from the address is answered `429` here, before it reaches the engine.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Most addresses whose failures are remembered: the map cannot grow without bound however
/// many addresses a client uses. When full, the least suspicious entry gives way.
const MAX_TRACKED_CLIENTS: usize = 4096;
/// Least time between two log lines about the same limited client.
const LOG_WINDOW: Duration = Duration::from_secs(60);

/// The key a client is counted under: its IP address, IPv6 by its /64 (one host usually
/// holds a whole /64, so counting single addresses would let it multiply its allowance).
/// IPv4-mapped IPv6 addresses count as the IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ClientKey(IpAddr);

impl ClientKey {
    pub(crate) fn of(ip: IpAddr) -> ClientKey {
        match ip {
            IpAddr::V4(_) => ClientKey(ip),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey(IpAddr::V4(v4)),
                None => {
                    let mut seg = v6.segments();
                    seg[4..].fill(0);
                    ClientKey(IpAddr::V6(seg.into()))
                }
            },
        }
    }
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}"),
            IpAddr::V6(a) => write!(f, "{a}/64"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Open connections per client, under a cap.
pub(crate) struct ConnectionCounts {
    cap: usize,
    open: Mutex<HashMap<ClientKey, usize>>,
}

/// One open connection of a client; dropping it frees the slot.
pub(crate) struct ConnectionSlot {
    counts: Arc<ConnectionCounts>,
    key: ClientKey,
}

impl ConnectionCounts {
    pub(crate) fn new(cap: usize) -> Arc<ConnectionCounts> {
        Arc::new(ConnectionCounts {
            cap,
            open: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// A slot for one more connection of `key`, or None when it already holds `cap`. The map
    /// holds only clients with an open connection, so it is bounded by the global cap.
    pub(crate) fn acquire(self: &Arc<Self>, key: ClientKey) -> Option<ConnectionSlot> {
        let mut open = lock(&self.open);
        let n = open.entry(key).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(ConnectionSlot {
            counts: Arc::clone(self),
            key,
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.counts.open);
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// A client's allowance of failed authentications: a token bucket.
struct Bucket {
    /// Failures it may still make (fractional while refilling).
    tokens: f64,
    refilled: Instant,
    /// Requests refused since the last log line about it.
    refused: u64,
    logged: Option<Instant>,
}

/// Failed authentications per client, as token buckets.
pub(crate) struct AuthLimiter {
    burst: f64,
    refill: Duration,
    buckets: Mutex<HashMap<ClientKey, Bucket>>,
    /// Times a client was limited and logged (the `tessera_auth_limited_total` metric).
    limited: std::sync::atomic::AtomicU64,
}

impl AuthLimiter {
    pub(crate) fn new(burst: u32, refill: Duration) -> AuthLimiter {
        AuthLimiter {
            burst: f64::from(burst.max(1)),
            refill: refill.max(Duration::from_millis(1)),
            buckets: Mutex::new(HashMap::new()),
            limited: Default::default(),
        }
    }

    fn refill(&self, b: &mut Bucket, now: Instant) {
        let gained =
            now.saturating_duration_since(b.refilled).as_secs_f64() / self.refill.as_secs_f64();
        b.tokens = (b.tokens + gained).min(self.burst);
        b.refilled = now;
    }

    /// None when `key` may be served; else how long until it may try again. A refused
    /// request logs one line per client per [`LOG_WINDOW`], not one per request.
    pub(crate) fn check(&self, key: ClientKey, now: Instant) -> Option<Duration> {
        let mut buckets = lock(&self.buckets);
        let b = buckets.get_mut(&key)?;
        self.refill(b, now);
        if b.tokens >= 1.0 {
            return None;
        }
        b.refused += 1;
        if b.logged
            .is_none_or(|t| now.saturating_duration_since(t) >= LOG_WINDOW)
        {
            tracing::warn!(
                client = %key,
                refused = b.refused,
                "too many failed authentications from {key}: its requests get 429 until its allowance refills"
            );
            b.logged = Some(now);
            b.refused = 0;
            self.limited
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let wait = (1.0 - b.tokens) * self.refill.as_secs_f64();
        Some(Duration::from_secs_f64(wait.max(0.001)))
    }

    /// Spends one of `key`'s failures.
    pub(crate) fn failed(&self, key: ClientKey, now: Instant) {
        let mut buckets = lock(&self.buckets);
        if !buckets.contains_key(&key) && buckets.len() >= MAX_TRACKED_CLIENTS {
            // Make room: forget the client closest to a full allowance (the least suspicious).
            for b in buckets.values_mut() {
                self.refill(b, now);
            }
            if let Some(k) = buckets
                .iter()
                .max_by(|a, b| a.1.tokens.total_cmp(&b.1.tokens))
                .map(|(k, _)| *k)
            {
                buckets.remove(&k);
            }
        }
        let burst = self.burst;
        let b = buckets.entry(key).or_insert(Bucket {
            tokens: burst,
            refilled: now,
            refused: 0,
            logged: None,
        });
        self.refill(b, now);
        b.tokens = (b.tokens - 1.0).max(0.0);
    }

    /// How many times a client was found limited (one count per log line).
    pub(crate) fn limited_total(&self) -> u64 {
        self.limited.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        lock(&self.buckets).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(last: u8) -> ClientKey {
        ClientKey::of(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)))
    }

    #[test]
    fn a_client_is_limited_after_its_burst_and_served_again_after_the_refill() {
        let l = AuthLimiter::new(3, Duration::from_millis(100));
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.check(v4(1), t0), None);
            l.failed(v4(1), t0);
        }
        let wait = l.check(v4(1), t0).expect("limited");
        assert!(wait <= Duration::from_millis(100) && wait > Duration::ZERO);
        assert_eq!(l.check(v4(2), t0), None, "another client is not");
        // Many refusals, one log line (one count) in the window.
        for _ in 0..100 {
            assert!(l.check(v4(1), t0).is_some());
        }
        assert_eq!(l.limited_total(), 1);
        assert_eq!(l.check(v4(1), t0 + Duration::from_millis(100)), None);
    }

    #[test]
    fn the_map_of_clients_is_bounded() {
        let l = AuthLimiter::new(2, Duration::from_secs(60));
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED_CLIENTS as u32 + 500) {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            l.failed(ClientKey::of(ip), t0);
        }
        assert_eq!(l.tracked(), MAX_TRACKED_CLIENTS);
    }

    #[test]
    fn ipv6_clients_count_by_their_64_and_mapped_v4_as_v4() {
        let a: Ipv6Addr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        assert_eq!(ClientKey::of(a.into()), ClientKey::of(b.into()));
        let mapped: Ipv6Addr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(ClientKey::of(mapped.into()), v4(1));
    }

    #[test]
    fn connection_slots_are_capped_per_client_and_freed_on_drop() {
        let c = ConnectionCounts::new(2);
        let a = c.acquire(v4(1)).unwrap();
        let _b = c.acquire(v4(1)).unwrap();
        assert!(c.acquire(v4(1)).is_none());
        assert!(
            c.acquire(v4(2)).is_some(),
            "another client has its own slots"
        );
        drop(a);
        assert!(c.acquire(v4(1)).is_some());
    }
}
