//! Kubernetes-style resource quantities: `500m`, `2`, `1.5`, `16Gi`, `512M`, `1e3`.
//!
//! CPU is kept as integer millicores and memory as integer bytes, so sums and comparisons
//! are exact.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid quantity {input:?}: {reason}")]
pub struct QuantityError {
    /// The text as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a quantity into a non-negative value scaled by `unit` (1000 for millicores, 1 for
/// bytes), rounding up as Kubernetes does, so that a request is never silently shrunk.
fn parse_scaled(input: &str, unit: u64) -> Result<u64, QuantityError> {
    let err = |reason| QuantityError {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let suffix_start = s
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(suffix_start);
    // The suffix as an exact fraction num/den.
    let (mul, den): (u128, u128) = match suffix {
        "" => (1, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        _ => {
            return Err(err(
                "unknown suffix (use m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei)",
            ))
        }
    };
    if num.is_empty() {
        return Err(err("missing number"));
    }
    if num.starts_with('-') {
        return Err(err("must not be negative"));
    }
    let too_large = || err("too large");
    // Plain integers are scaled exactly; decimals and exponents go through f64.
    let scaled: u128 = if num.bytes().all(|b| b.is_ascii_digit()) {
        let value: u128 = num.parse().map_err(|_| too_large())?;
        let product = value
            .checked_mul(mul)
            .and_then(|v| v.checked_mul(unit as u128))
            .ok_or_else(too_large)?;
        product.div_ceil(den)
    } else {
        let value: f64 = num.parse().map_err(|_| err("not a number"))?;
        if !value.is_finite() {
            return Err(err("not a finite number"));
        }
        // Scale the unit first: `0.5` cores is then exactly 500 millicores.
        let x = (value * (mul as f64 * unit as f64 / den as f64)).ceil();
        if x >= u64::MAX as f64 {
            return Err(too_large());
        }
        x as u128
    };
    u64::try_from(scaled).map_err(|_| too_large())
}

/// CPU in millicores (`1` = 1000, `500m` = 500).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MilliCpu(pub u64);

/// Memory in bytes (`16Gi` = 17179869184).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl MilliCpu {
    /// Whole cores.
    pub const fn from_cores(cores: u64) -> Self {
        MilliCpu(cores.saturating_mul(1000))
    }
    /// Cores as a float (reports, ratios).
    pub fn as_cores(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

impl Bytes {
    /// One gibibyte.
    pub const GIB: u64 = 1 << 30;
    /// Whole gibibytes.
    pub const fn from_gib(gib: u64) -> Self {
        Bytes(gib.saturating_mul(Self::GIB))
    }
    /// Gibibytes given as a float (catalog figures such as 4.75 GiB), rounded to the byte;
    /// negative or non-finite values give zero.
    pub fn from_gib_f64(gib: f64) -> Self {
        let b = gib * Self::GIB as f64;
        if b.is_finite() && b > 0.0 {
            Bytes(b.round().min(u64::MAX as f64) as u64)
        } else {
            Bytes(0)
        }
    }
    /// Gibibytes as a float (reports, ratios).
    pub fn as_gib(self) -> f64 {
        self.0 as f64 / Self::GIB as f64
    }
}

impl FromStr for MilliCpu {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_scaled(s, 1000).map(MilliCpu)
    }
}

impl FromStr for Bytes {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_scaled(s, 1).map(Bytes)
    }
}

impl fmt::Display for MilliCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("Ti", 1 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ];
        for (suffix, size) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{}", self.0 / size, suffix);
            }
        }
        write!(f, "{}", self.0)
    }
}

macro_rules! quantity_arith {
    ($ty:ident) => {
        impl std::ops::Add for $ty {
            type Output = $ty;
            fn add(self, o: $ty) -> $ty {
                $ty(self.0.saturating_add(o.0))
            }
        }
        impl std::ops::AddAssign for $ty {
            fn add_assign(&mut self, o: $ty) {
                self.0 = self.0.saturating_add(o.0);
            }
        }
        impl std::ops::Sub for $ty {
            type Output = $ty;
            /// Saturating at zero; callers check [`PartialOrd`] first where it matters.
            fn sub(self, o: $ty) -> $ty {
                $ty(self.0.saturating_sub(o.0))
            }
        }
        impl std::ops::SubAssign for $ty {
            fn sub_assign(&mut self, o: $ty) {
                self.0 = self.0.saturating_sub(o.0);
            }
        }
    };
}
quantity_arith!(MilliCpu);
quantity_arith!(Bytes);

/// Serde glue: quantities are written as strings and read from strings or plain numbers
/// (YAML `cpus: 48` and `cpus: "500m"` both work).
macro_rules! quantity_serde {
    ($ty:ty) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Raw {
                    Int(u64),
                    Float(f64),
                    Text(String),
                }
                let text = match Raw::deserialize(d)? {
                    Raw::Int(n) => n.to_string(),
                    Raw::Float(x) => x.to_string(),
                    Raw::Text(t) => t,
                };
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
quantity_serde!(MilliCpu);
quantity_serde!(Bytes);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_kubernetes_forms() {
        assert_eq!("500m".parse::<MilliCpu>().unwrap(), MilliCpu(500));
        assert_eq!("2".parse::<MilliCpu>().unwrap(), MilliCpu(2000));
        assert_eq!("1.5".parse::<MilliCpu>().unwrap(), MilliCpu(1500));
        assert_eq!("16Gi".parse::<Bytes>().unwrap(), Bytes(16 << 30));
        assert_eq!("512M".parse::<Bytes>().unwrap(), Bytes(512_000_000));
        assert_eq!("1e3".parse::<Bytes>().unwrap(), Bytes(1000));
        assert_eq!("1.5Ki".parse::<Bytes>().unwrap(), Bytes(1536));
    }

    #[test]
    fn integers_are_exact_beyond_f64_precision() {
        assert_eq!(
            "9007199254740993".parse::<Bytes>().unwrap(),
            Bytes(9_007_199_254_740_993)
        );
        assert_eq!(
            "9007199254740993m".parse::<MilliCpu>().unwrap(),
            MilliCpu(9_007_199_254_740_993)
        );
        assert_eq!(
            "1500m".parse::<Bytes>().unwrap(),
            Bytes(2),
            "fractional bytes round up"
        );
        assert!("99999999999999999999Ei".parse::<Bytes>().is_err());
    }

    #[test]
    fn rejects_bad_forms() {
        for bad in ["", "-1", "12Q", "Gi", "abc", "1..2", "inf", "NaN"] {
            assert!(bad.parse::<MilliCpu>().is_err(), "{bad:?} accepted");
            assert!(bad.parse::<Bytes>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn display_round_trips() {
        for q in ["500m", "48", "16Gi", "3Ti", "1000"] {
            let cpu_or_mem = if q.ends_with('i') || q == "1000" {
                q.parse::<Bytes>().unwrap().to_string()
            } else {
                q.parse::<MilliCpu>().unwrap().to_string()
            };
            assert_eq!(cpu_or_mem, q);
        }
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,24}") {
            let _ = s.parse::<MilliCpu>();
            let _ = s.parse::<Bytes>();
        }

        #[test]
        fn bytes_display_parse_identity(n in any::<u64>()) {
            let b = Bytes(n);
            prop_assert_eq!(b.to_string().parse::<Bytes>().unwrap(), b);
        }

        #[test]
        fn cpu_display_parse_identity(n in any::<u64>()) {
            let c = MilliCpu(n);
            prop_assert_eq!(c.to_string().parse::<MilliCpu>().unwrap(), c);
        }
    }
}
