//! Roofline model of one device: a kernel runs at the lower of the device's compute peak and
//! what its memory bandwidth can feed.
//!
//! time(flops, bytes) = max(flops / F, bytes / B), where F is the attained FLOP/s and B the
//! memory bandwidth. The *attained* rate is a fraction of the datasheet peak; planners that
//! calibrate their own figure (e.g. by timing a matmul) pass it in directly.

use tessera_model::GpuModel;

/// Fraction of the datasheet FP32 peak that dense training kernels attain when nothing better
/// is known. HAP's calibration (EuroSys'24 artifact) measured 3.86e12 FLOP/s on a V100
/// (15.7 T peak: 0.25) and 2.15e12 on a P100 (10.6 T peak: 0.20); 0.25 is the round figure.
pub const DEFAULT_ATTAINED_FRACTION: f64 = 0.25;

/// Numeric precision a kernel runs in (selects the catalog peak).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// FP32 (no tensor cores).
    Fp32,
    /// FP16/BF16 with tensor cores where present.
    Fp16,
}

/// A device's compute roof and memory slope.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Roofline {
    /// Attained FLOP/s on compute-bound kernels.
    pub flops_per_s: f64,
    /// Memory bandwidth in bytes/s.
    pub memory_bytes_per_s: f64,
}

impl Roofline {
    /// The roofline of a catalog GPU at `precision`, with the compute roof scaled by
    /// `attained_fraction` of the datasheet peak.
    pub fn from_gpu(gpu: &GpuModel, precision: Precision, attained_fraction: f64) -> Roofline {
        let peak_tflops = match precision {
            Precision::Fp32 => gpu.fp32_tflops,
            Precision::Fp16 => gpu.fp16_tflops,
        };
        Roofline {
            flops_per_s: peak_tflops * 1e12 * attained_fraction,
            memory_bytes_per_s: gpu.memory_bandwidth_g_bs * 1e9,
        }
    }

    /// Arithmetic intensity (FLOP per byte) at which the kernel stops being memory-bound.
    pub fn ridge_point(&self) -> f64 {
        self.flops_per_s / self.memory_bytes_per_s
    }

    /// Attainable FLOP/s at arithmetic intensity `flops_per_byte`.
    pub fn attainable(&self, flops_per_byte: f64) -> f64 {
        (flops_per_byte * self.memory_bytes_per_s).min(self.flops_per_s)
    }

    /// Seconds for a kernel doing `flops` and moving `bytes` of device memory.
    pub fn time(&self, flops: f64, bytes: f64) -> f64 {
        (flops / self.flops_per_s).max(bytes / self.memory_bytes_per_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::GpuCatalog;

    #[test]
    fn compute_and_memory_bound_regions() {
        let r = Roofline {
            flops_per_s: 10e12,
            memory_bytes_per_s: 1e12,
        };
        assert_eq!(r.ridge_point(), 10.0);
        assert_eq!(r.attainable(2.0), 2e12);
        assert_eq!(r.attainable(100.0), 10e12);
        // 1 GFLOP over 1 MB is compute-bound; 1 MFLOP over 1 GB is memory-bound.
        assert!((r.time(1e9, 1e6) - 1e-4).abs() < 1e-15);
        assert!((r.time(1e6, 1e9) - 1e-3).abs() < 1e-15);
    }

    #[test]
    fn catalog_defaults_near_hap_calibration() {
        let cat = GpuCatalog::builtin();
        let v100 = cat.get(cat.resolve("V100-16GB").unwrap());
        let r = Roofline::from_gpu(v100, Precision::Fp32, DEFAULT_ATTAINED_FRACTION);
        // HAP calibrated 3.86e12 on a V100; the default lands within 2%.
        assert!((r.flops_per_s - 3.86e12).abs() / 3.86e12 < 0.02);
    }
}
