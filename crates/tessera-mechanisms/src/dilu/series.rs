//! Per-second request-rate series (one non-negative number a line), as the Dilu and INFless
//! experiments replay them: `bursty`, `periodic` and `sporadic` ship in `data/dilu/`
//! (derived from the Azure Functions 2019 trace, CC-BY-4.0; see data/README.md).

use thiserror::Error;

/// A malformed rate series.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("rate series line {line}: {reason}")]
pub struct SeriesError {
    /// 1-based line (0 = the series as a whole).
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// Requests per second, one value per second.
#[derive(Clone, Debug, PartialEq)]
pub struct RateSeries {
    /// The rates.
    pub rps: Vec<f64>,
}

impl RateSeries {
    /// Parses one rate a line (blank lines and `#` comments skipped). Every value must be a
    /// finite, non-negative number; an empty series is an error.
    pub fn parse(text: &str) -> Result<RateSeries, SeriesError> {
        let mut rps = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let x: f64 = line.parse().map_err(|_| SeriesError {
                line: i + 1,
                reason: format!("{line:?} is not a number"),
            })?;
            if !x.is_finite() || x < 0.0 {
                return Err(SeriesError {
                    line: i + 1,
                    reason: format!("rate {x} must be finite and non-negative"),
                });
            }
            rps.push(x);
        }
        if rps.is_empty() {
            return Err(SeriesError {
                line: 0,
                reason: "no rates".into(),
            });
        }
        Ok(RateSeries { rps })
    }

    /// A shipped series: `bursty`, `periodic` or `sporadic`.
    pub fn builtin(name: &str) -> Option<RateSeries> {
        let text = match name {
            "bursty" => include_str!("../../data/dilu/rate_bursty.txt"),
            "periodic" => include_str!("../../data/dilu/rate_periodic.txt"),
            "sporadic" => include_str!("../../data/dilu/rate_sporadic.txt"),
            _ => return None,
        };
        RateSeries::parse(text).ok()
    }

    /// The series with every rate multiplied by `factor` (Dilu replays ×10 for NLP models);
    /// errors on a negative or non-finite factor.
    pub fn scaled(&self, factor: f64) -> Result<RateSeries, SeriesError> {
        if !factor.is_finite() || factor < 0.0 {
            return Err(SeriesError {
                line: 0,
                reason: format!("scale {factor} must be finite and non-negative"),
            });
        }
        Ok(RateSeries {
            rps: self.rps.iter().map(|r| r * factor).collect(),
        })
    }

    /// Seconds covered.
    pub fn len_s(&self) -> usize {
        self.rps.len()
    }

    /// Expected requests over the whole series.
    pub fn total_requests(&self) -> f64 {
        self.rps.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_series_have_the_documented_lengths() {
        for (name, len) in [("bursty", 858), ("periodic", 1007), ("sporadic", 1007)] {
            let s = RateSeries::builtin(name).unwrap();
            assert_eq!(s.len_s(), len, "{name}");
            assert!(s.rps.iter().all(|r| *r >= 0.0) && s.total_requests() > 0.0);
        }
        assert!(RateSeries::builtin("steady").is_none());
        let b = RateSeries::builtin("bursty").unwrap();
        assert_eq!(b.rps[..3], [0.8, 1.5, 2.5]);
        let x10 = b.scaled(10.0).unwrap();
        assert!((x10.total_requests() - 10.0 * b.total_requests()).abs() < 1e-6);
    }

    #[test]
    fn bad_values_are_typed_errors() {
        for (bad, line) in [
            ("1\n-2\n3\n", 2),
            ("1\nabc\n", 2),
            ("1\n\n# c\nNaN\n", 4),
            ("inf\n", 1),
            ("1,2\n", 1),
            ("", 0),
            ("# only a comment\n", 0),
        ] {
            let e = RateSeries::parse(bad).unwrap_err();
            assert_eq!(e.line, line, "{bad:?}: {e}");
        }
        let s = RateSeries::parse("1\n2 \n").unwrap();
        assert_eq!(s.rps, vec![1.0, 2.0]);
        assert!(s.scaled(-1.0).is_err() && s.scaled(f64::NAN).is_err());
    }
}
