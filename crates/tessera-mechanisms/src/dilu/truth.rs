//! Training throughput as a function of the GPU compute share: a saturation knee.
//!
//! Training kernels stop speeding up once they have enough SMs to keep busy (the Dilu paper's
//! motivation: many jobs reach their full-GPU throughput well below 100% of the SMs). We model
//! the relative throughput as a soft-minimum of linear growth and saturation,
//!
//! ```text
//! g(x) = x / (1 + x^n)^(1/n),  x = share / knee;   r(share) = g(share / knee) / g(1 / knee)
//! ```
//!
//! so `r(1) = 1`, `r` rises almost linearly below `knee` and flattens above it, `n` setting
//! how sharp the bend is. Parameters: the Dilu artifact publishes no training curves, only the
//! training `sm_requests` its packing workloads draw (uniform in 0.4–0.8,
//! `scheduling/simulations/workload/service_generator.py`), which by its own definition are the
//! 98%-throughput shares its profiler found. The per-model knees below are our assumption
//! such that their 98% points fall inside that range (larger models, larger knees); with
//! `n = 10` the 98% point lies about 15% above the knee. They are inputs to the simulator, not measured figures.

use thiserror::Error;

use super::table::DiluModel;

/// A bad curve parameter or query.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum CurveError {
    /// A parameter or share outside its range.
    #[error("{what} = {value}: {reason}")]
    Invalid {
        /// Which value.
        what: &'static str,
        /// The value given.
        value: f64,
        /// The rule it breaks.
        reason: &'static str,
    },
}

/// Relative training throughput vs compute share, with a saturation knee.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainingCurve {
    knee: f64,
    sharpness: f64,
}

impl TrainingCurve {
    /// A curve saturating around `knee` (a share in (0, 1]) with bend `sharpness` (≥ 1).
    pub fn new(knee: f64, sharpness: f64) -> Result<TrainingCurve, CurveError> {
        if !(knee.is_finite() && knee > 0.0 && knee <= 1.0) {
            return Err(CurveError::Invalid {
                what: "knee",
                value: knee,
                reason: "must be in (0, 1]",
            });
        }
        if !(sharpness.is_finite() && (1.0..=64.0).contains(&sharpness)) {
            return Err(CurveError::Invalid {
                what: "sharpness",
                value: sharpness,
                reason: "must be in [1, 64]",
            });
        }
        Ok(TrainingCurve { knee, sharpness })
    }

    /// Our assumed curve for a model's training job (see the module docs).
    pub fn for_model(model: DiluModel) -> TrainingCurve {
        let knee = match model {
            DiluModel::Resnet152 => 0.35,
            DiluModel::BertBase => 0.40,
            DiluModel::RobertaLarge => 0.50,
            DiluModel::Gpt2Large => 0.55,
            DiluModel::Llama2_7b => 0.65,
        };
        TrainingCurve {
            knee,
            sharpness: 10.0,
        }
    }

    /// The knee share.
    pub fn knee(&self) -> f64 {
        self.knee
    }

    fn g(&self, x: f64) -> f64 {
        x / (1.0 + x.powf(self.sharpness)).powf(1.0 / self.sharpness)
    }

    /// Throughput at `share` (0–1] relative to the full GPU; 0 at share 0.
    pub fn relative(&self, share: f64) -> Result<f64, CurveError> {
        if !(share.is_finite() && (0.0..=1.0).contains(&share)) {
            return Err(CurveError::Invalid {
                what: "share",
                value: share,
                reason: "must be in [0, 1]",
            });
        }
        Ok(self.g(share / self.knee) / self.g(1.0 / self.knee))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_rises_then_saturates() {
        let c = TrainingCurve::new(0.5, 6.0).unwrap();
        assert_eq!(c.relative(0.0).unwrap(), 0.0);
        assert!((c.relative(1.0).unwrap() - 1.0).abs() < 1e-12);
        let pts: Vec<f64> = (0..=100)
            .map(|p| c.relative(f64::from(p) / 100.0).unwrap())
            .collect();
        assert!(pts.windows(2).all(|w| w[1] > w[0]), "strictly increasing");
        // Near-linear well below the knee, near-flat above it.
        let low = pts[20] / pts[10];
        assert!((low - 2.0).abs() < 0.01, "{low}");
        assert!(pts[70] > 0.97 && pts[40] < 0.85, "{} {}", pts[70], pts[40]);
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(TrainingCurve::new(0.0, 6.0).is_err());
        assert!(TrainingCurve::new(1.5, 6.0).is_err());
        assert!(TrainingCurve::new(f64::NAN, 6.0).is_err());
        assert!(TrainingCurve::new(0.5, 0.5).is_err());
        let c = TrainingCurve::new(0.5, 6.0).unwrap();
        assert!(c.relative(-0.1).is_err() && c.relative(1.1).is_err());
        assert!(c.relative(f64::NAN).is_err());
    }
}
