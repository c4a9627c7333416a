//! Simulation time: integer microseconds, so that event order never depends on float rounding.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use serde::{Deserialize, Serialize};

const MICROS_PER_SEC: u64 = 1_000_000;

/// The largest time or duration, in seconds, that inputs (trace times, durations, round
/// lengths, costs) may state: about 31.7 years. The engine's clock holds 584,000 years of
/// microseconds, so sums of many such values still fit; a value past this limit is refused
/// with its field named rather than silently saturated.
pub const MAX_INPUT_SECS: u64 = 1_000_000_000;

/// Why seconds from an input cannot become a [`SimDuration`].
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum TimeRangeError {
    /// NaN, infinite or negative.
    #[error("{} is not a non-negative number of seconds", short(*.0))]
    NotNonNegative(f64),
    /// Positive but below one microsecond, the clock's resolution.
    #[error("{} s is below the clock's resolution of 1 microsecond", short(*.0))]
    BelowResolution(f64),
    /// Above [`MAX_INPUT_SECS`].
    #[error("{} s is beyond the limit of {MAX_INPUT_SECS} s (about 31.7 years)", short(*.0))]
    TooLarge(f64),
}

/// A number as a user would write it: `1e300`, `1e-7`, `1.5`.
fn short(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-3..1e9).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// An instant on the simulation (or daemon) clock, in microseconds since the epoch of the run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SimTime(u64);

/// A span of simulated time, in microseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SimDuration(u64);

impl SimTime {
    /// The start of the run.
    pub const ZERO: SimTime = SimTime(0);
    /// The last representable instant; used as "never".
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// From whole microseconds.
    pub const fn from_micros(us: u64) -> Self {
        SimTime(us)
    }
    /// From whole seconds.
    pub const fn from_secs(s: u64) -> Self {
        SimTime(s.saturating_mul(MICROS_PER_SEC))
    }
    /// From seconds, rounded to the nearest microsecond; negative and NaN become zero.
    pub fn from_secs_f64(s: f64) -> Self {
        SimTime(secs_to_micros(s))
    }
    /// Microseconds since the start.
    pub const fn as_micros(self) -> u64 {
        self.0
    }
    /// Seconds since the start (for reports only).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / MICROS_PER_SEC as f64
    }
    /// Time elapsed since `earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl SimDuration {
    /// No time at all.
    pub const ZERO: SimDuration = SimDuration(0);

    /// From whole microseconds.
    pub const fn from_micros(us: u64) -> Self {
        SimDuration(us)
    }
    /// From whole seconds.
    pub const fn from_secs(s: u64) -> Self {
        SimDuration(s.saturating_mul(MICROS_PER_SEC))
    }
    /// From seconds, rounded to the nearest microsecond; negative and NaN become zero.
    pub fn from_secs_f64(s: f64) -> Self {
        SimDuration(secs_to_micros(s))
    }
    /// From seconds, rounded *up* to the next microsecond, so that work finishes no earlier than
    /// its rate allows (used for completion times).
    pub fn from_secs_f64_ceil(s: f64) -> Self {
        if s.is_nan() || s <= 0.0 {
            return SimDuration(0);
        }
        let exact = s * MICROS_PER_SEC as f64;
        // Snap float noise (164.00000000000003 s) to the whole microsecond it stands for,
        // rather than charging an extra microsecond for it.
        let nearest = exact.round();
        let us = if (exact - nearest).abs() <= nearest * 1e-12 {
            nearest
        } else {
            exact.ceil()
        };
        SimDuration(if us >= u64::MAX as f64 {
            u64::MAX
        } else {
            us as u64
        })
    }
    /// Seconds from an input value, checked against the clock's range: at most
    /// [`MAX_INPUT_SECS`], and a positive value must be at least one microsecond (so that a
    /// tiny round length is not silently zero). Zero is allowed.
    pub fn checked_from_secs_f64(s: f64) -> Result<Self, TimeRangeError> {
        if !(s.is_finite() && s >= 0.0) {
            return Err(TimeRangeError::NotNonNegative(s));
        }
        if s > MAX_INPUT_SECS as f64 {
            return Err(TimeRangeError::TooLarge(s));
        }
        let d = SimDuration(secs_to_micros(s));
        if s > 0.0 && d.is_zero() {
            return Err(TimeRangeError::BelowResolution(s));
        }
        Ok(d)
    }
    /// Whole microseconds.
    pub const fn as_micros(self) -> u64 {
        self.0
    }
    /// Seconds (for reports and rate arithmetic).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / MICROS_PER_SEC as f64
    }
    /// True for a zero-length span.
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
}

fn secs_to_micros(s: f64) -> u64 {
    if s.is_nan() || s <= 0.0 {
        return 0;
    }
    let us = (s * MICROS_PER_SEC as f64).round();
    if us >= u64::MAX as f64 {
        u64::MAX
    } else {
        us as u64
    }
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, d: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(d.0))
    }
}

impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, d: SimDuration) {
        self.0 = self.0.saturating_add(d.0);
    }
}

impl Sub<SimTime> for SimTime {
    type Output = SimDuration;
    /// Saturating: a later instant minus an earlier one; zero otherwise.
    fn sub(self, earlier: SimTime) -> SimDuration {
        self.saturating_since(earlier)
    }
}

impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, d: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(d.0))
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.as_secs_f64())
    }
}

impl fmt::Display for SimDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_and_saturate() {
        assert_eq!(SimTime::from_secs_f64(1.5).as_micros(), 1_500_000);
        assert_eq!(SimTime::from_secs_f64(-3.0), SimTime::ZERO);
        assert_eq!(SimTime::from_secs_f64(f64::NAN), SimTime::ZERO);
        assert_eq!(SimDuration::from_secs_f64_ceil(0.000_000_1).as_micros(), 1);
        assert_eq!(
            SimDuration::from_secs_f64_ceil(606.0 / (606.0 / 164.0)).as_micros(),
            164_000_000
        );
        assert_eq!(
            SimDuration::from_secs_f64_ceil(1.000_000_4).as_micros(),
            1_000_001
        );
        assert_eq!(SimTime::MAX + SimDuration::from_secs(1), SimTime::MAX);
        let checked = SimDuration::checked_from_secs_f64;
        assert_eq!(checked(1.5), Ok(SimDuration::from_micros(1_500_000)));
        assert_eq!(checked(0.0), Ok(SimDuration::ZERO));
        assert_eq!(checked(1e-7), Err(TimeRangeError::BelowResolution(1e-7)));
        assert_eq!(checked(1e300), Err(TimeRangeError::TooLarge(1e300)));
        assert_eq!(checked(-1.0), Err(TimeRangeError::NotNonNegative(-1.0)));
        assert!(checked(f64::NAN).is_err());
        assert_eq!(
            checked(1e300).unwrap_err().to_string(),
            "1e300 s is beyond the limit of 1000000000 s (about 31.7 years)"
        );
        assert!(checked(1e-7).unwrap_err().to_string().starts_with("1e-7 s"));
        assert_eq!(
            checked(MAX_INPUT_SECS as f64),
            Ok(SimDuration::from_secs(MAX_INPUT_SECS))
        );
        assert_eq!(
            SimTime::from_secs(1) - SimTime::from_secs(2),
            SimDuration::ZERO
        );
    }
}
