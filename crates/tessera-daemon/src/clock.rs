//! Wall-clock time enters the daemon only here, as a [`SimTime`] of microseconds since the Unix
//! epoch, so that the policies (which read no clock) see the same integer time type as in the
//! simulator, and tests can inject a [`ManualClock`].

use std::sync::atomic::{AtomicU64, Ordering};

use tessera_model::{SimDuration, SimTime};

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// Now, in microseconds since the Unix epoch; never decreases between calls.
    fn now(&self) -> SimTime;
}

/// The system clock, made monotone (a clock step backwards repeats the last instant).
#[derive(Debug, Default)]
pub struct SystemClock {
    last: AtomicU64,
}

impl SystemClock {
    /// A new system clock.
    pub fn new() -> SystemClock {
        SystemClock::default()
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // The daemon is where wall-clock time enters.
    fn now(&self) -> SimTime {
        let us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros().min(u64::MAX as u128) as u64)
            .unwrap_or(0);
        let prev = self.last.fetch_max(us, Ordering::Relaxed);
        SimTime::from_micros(us.max(prev))
    }
}

/// A clock that moves only when told (tests).
#[derive(Debug, Default)]
pub struct ManualClock {
    us: AtomicU64,
}

impl ManualClock {
    /// A clock at `start`.
    pub fn new(start: SimTime) -> ManualClock {
        ManualClock {
            us: AtomicU64::new(start.as_micros()),
        }
    }
    /// Moves the clock forward.
    pub fn advance(&self, d: SimDuration) {
        self.us.fetch_add(d.as_micros(), Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SimTime {
        SimTime::from_micros(self.us.load(Ordering::Relaxed))
    }
}
