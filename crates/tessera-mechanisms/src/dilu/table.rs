//! Inference latency of one batch as a function of (batch size, GPU compute share), from the
//! Dilu authors' measurement tables (`data/dilu/bs_sm_<model>.csv`, see data/README.md).
//!
//! [`LatencyTable::point`] returns a measured grid point as is (what a profiler observes);
//! [`LatencyTable::latency`] interpolates for the serving truth over a monotone envelope of
//! the measurements (more share never slows a batch, a larger batch never runs faster), since
//! the raw points carry a few percent of measurement noise that would otherwise make latency
//! jump back and forth as a controller moves the share.

use thiserror::Error;

/// Why a table could not be read or asked.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum TableError {
    /// A line of the CSV is malformed.
    #[error("{model} table line {line}: {reason}")]
    Csv {
        /// Model the table is for.
        model: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The points do not form a full (batch × share) grid.
    #[error("{model} table: {reason}")]
    Grid {
        /// Model the table is for.
        model: String,
        /// What is missing or repeated.
        reason: String,
    },
    /// A query outside the measured range.
    #[error("{model}: {what} {value} outside the table ({lo}..={hi})")]
    OutOfRange {
        /// Model the table is for.
        model: String,
        /// `batch` or `share`.
        what: &'static str,
        /// The value asked for.
        value: f64,
        /// Smallest measured value.
        lo: f64,
        /// Largest measured value.
        hi: f64,
    },
    /// No built-in table of that name.
    #[error("no latency table for model {0:?} (known: bert-base, roberta-large, gpt2-large, llama2-7b, resnet152)")]
    UnknownModel(String),
}

/// One measured point: a batch at a share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Batch size.
    pub batch: u32,
    /// Share of the GPU's SMs, percent.
    pub share_pct: u32,
    /// Seconds to run one batch.
    pub latency_s: f64,
    /// Throughput as the authors recorded it (requests per second).
    pub throughput: f64,
}

/// A full (batch × share) grid of measurements for one model.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyTable {
    model: String,
    /// Ascending batch sizes.
    batches: Vec<u32>,
    /// Ascending shares, percent.
    shares: Vec<u32>,
    /// Raw points, row-major: `[batch index * shares.len() + share index]`.
    raw: Vec<Measured>,
    /// Monotone envelope of the latencies, same layout.
    envelope: Vec<f64>,
}

impl LatencyTable {
    /// Parses `batch,share_pct,latency_s,throughput` lines (an optional header line whose
    /// first field is not a number; `#` comments and blank lines skipped). The points must
    /// form a full grid with positive, finite values.
    pub fn parse(model: &str, text: &str) -> Result<LatencyTable, TableError> {
        let csv = |line: usize, reason: String| TableError::Csv {
            model: model.to_string(),
            line,
            reason,
        };
        let mut points: Vec<Measured> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            if points.is_empty() && fields[0].parse::<f64>().is_err() {
                continue; // header
            }
            if fields.len() != 4 {
                return Err(csv(line_no, format!("{} fields, want 4", fields.len())));
            }
            let mut v = [0.0f64; 4];
            for (slot, (field, name)) in
                v.iter_mut().zip(
                    fields
                        .iter()
                        .zip(["batch", "share", "latency", "throughput"]),
                )
            {
                let x: f64 = field
                    .parse()
                    .map_err(|_| csv(line_no, format!("{name} {field:?} is not a number")))?;
                if !x.is_finite() || x <= 0.0 {
                    return Err(csv(line_no, format!("{name} {field} must be positive")));
                }
                *slot = x;
            }
            let whole = |x: f64, name: &str, max: f64| {
                if x.fract() != 0.0 || x > max {
                    Err(csv(
                        line_no,
                        format!("{name} {x} must be a whole number ≤ {max}"),
                    ))
                } else {
                    Ok(x as u32)
                }
            };
            points.push(Measured {
                batch: whole(v[0], "batch", 65_536.0)?,
                share_pct: whole(v[1], "share", 100.0)?,
                latency_s: v[2],
                throughput: v[3],
            });
        }
        Self::from_points(model, points)
    }

    fn from_points(model: &str, points: Vec<Measured>) -> Result<LatencyTable, TableError> {
        let grid = |reason: String| TableError::Grid {
            model: model.to_string(),
            reason,
        };
        let mut batches: Vec<u32> = points.iter().map(|p| p.batch).collect();
        batches.sort_unstable();
        batches.dedup();
        let mut shares: Vec<u32> = points.iter().map(|p| p.share_pct).collect();
        shares.sort_unstable();
        shares.dedup();
        if batches.is_empty() {
            return Err(grid("no points".into()));
        }
        let n = shares.len();
        let mut slots: Vec<Option<Measured>> = vec![None; batches.len() * n];
        for p in points {
            let (Ok(b), Ok(s)) = (
                batches.binary_search(&p.batch),
                shares.binary_search(&p.share_pct),
            ) else {
                return Err(grid("internal: point off its own grid".into()));
            };
            if slots[b * n + s].replace(p).is_some() {
                return Err(grid(format!(
                    "batch {} at {}% measured twice",
                    p.batch, p.share_pct
                )));
            }
        }
        let mut raw = Vec::with_capacity(slots.len());
        for (i, slot) in slots.into_iter().enumerate() {
            match slot {
                Some(p) => raw.push(p),
                None => {
                    return Err(grid(format!(
                        "batch {} at {}% missing",
                        batches[i / n],
                        shares[i % n]
                    )))
                }
            }
        }
        // Non-increasing in share (a batch given more SMs may use only the ones it had),
        // then non-decreasing in batch (padding a smaller batch would not make it slower).
        let mut envelope: Vec<f64> = raw.iter().map(|p| p.latency_s).collect();
        for b in 0..batches.len() {
            for s in 1..n {
                envelope[b * n + s] = envelope[b * n + s].min(envelope[b * n + s - 1]);
            }
        }
        for b in 1..batches.len() {
            for s in 0..n {
                envelope[b * n + s] = envelope[b * n + s].max(envelope[(b - 1) * n + s]);
            }
        }
        Ok(LatencyTable {
            model: model.to_string(),
            batches,
            shares,
            raw,
            envelope,
        })
    }

    /// The model this table measures.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Measured batch sizes, ascending.
    pub fn batches(&self) -> &[u32] {
        &self.batches
    }

    /// Measured shares in percent, ascending.
    pub fn shares_pct(&self) -> &[u32] {
        &self.shares
    }

    /// The measured point at exactly (batch, share %), if it is on the grid.
    pub fn point(&self, batch: u32, share_pct: u32) -> Option<Measured> {
        let b = self.batches.binary_search(&batch).ok()?;
        let s = self.shares.binary_search(&share_pct).ok()?;
        self.raw.get(b * self.shares.len() + s).copied()
    }

    /// Seconds one batch of `batch` requests takes at `share` of the GPU (a fraction,
    /// 0.1 = 10%): bilinear interpolation over the monotone envelope of the grid. Errors
    /// outside the measured ranges (no extrapolation) and on non-finite input.
    pub fn latency(&self, batch: f64, share: f64) -> Result<f64, TableError> {
        let pct = share * 100.0;
        let (b0, b1, tb) = self.bracket("batch", batch, &self.batches)?;
        let (s0, s1, ts) = self.bracket("share", pct, &self.shares)?;
        let n = self.shares.len();
        let at = |b: usize, s: usize| self.envelope[b * n + s];
        let lo = at(b0, s0) + (at(b0, s1) - at(b0, s0)) * ts;
        let hi = at(b1, s0) + (at(b1, s1) - at(b1, s0)) * ts;
        Ok(lo + (hi - lo) * tb)
    }

    /// Indices around `x` in `axis` and the weight of the upper one.
    fn bracket(
        &self,
        what: &'static str,
        x: f64,
        axis: &[u32],
    ) -> Result<(usize, usize, f64), TableError> {
        let lo = f64::from(axis[0]);
        let hi = f64::from(axis[axis.len() - 1]);
        // A share given as a fraction carries rounding (0.3 * 100 = 30.000000000000004).
        let eps = 1e-9 * hi.max(1.0);
        if !x.is_finite() || x < lo - eps || x > hi + eps {
            return Err(TableError::OutOfRange {
                model: self.model.clone(),
                what,
                value: if what == "share" { x / 100.0 } else { x },
                lo: if what == "share" { lo / 100.0 } else { lo },
                hi: if what == "share" { hi / 100.0 } else { hi },
            });
        }
        let x = x.clamp(lo, hi);
        let upper = axis.partition_point(|&a| f64::from(a) < x);
        // On a grid line, no interpolation (so a grid point returns its value exactly).
        if upper == 0 || f64::from(axis[upper]) == x {
            return Ok((upper, upper, 0.0));
        }
        let (a, b) = (f64::from(axis[upper - 1]), f64::from(axis[upper]));
        Ok((upper - 1, upper, (x - a) / (b - a)))
    }
}

/// The five models the Dilu authors measured, with the SLOs their experiments use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DiluModel {
    /// BERT-base (SLO 50 ms in the golden test).
    BertBase,
    /// RoBERTa-large (SLO 60 ms).
    RobertaLarge,
    /// GPT2-large (SLO 60 ms).
    Gpt2Large,
    /// LLaMA2-7B (SLO 42 ms).
    Llama2_7b,
    /// ResNet152 (SLO 40 ms).
    Resnet152,
}

impl DiluModel {
    /// All five, in listing order.
    pub const ALL: [DiluModel; 5] = [
        DiluModel::BertBase,
        DiluModel::RobertaLarge,
        DiluModel::Gpt2Large,
        DiluModel::Llama2_7b,
        DiluModel::Resnet152,
    ];

    /// Short name (`bert-base`).
    pub fn name(self) -> &'static str {
        match self {
            DiluModel::BertBase => "bert-base",
            DiluModel::RobertaLarge => "roberta-large",
            DiluModel::Gpt2Large => "gpt2-large",
            DiluModel::Llama2_7b => "llama2-7b",
            DiluModel::Resnet152 => "resnet152",
        }
    }

    /// The model of a name (case-insensitive; `_` and `-` alike; `llama2` accepted).
    pub fn from_name(name: &str) -> Result<DiluModel, TableError> {
        let key = name.trim().to_ascii_lowercase().replace('_', "-");
        let key = if key == "llama2" { "llama2-7b" } else { &key };
        DiluModel::ALL
            .into_iter()
            .find(|m| m.name() == key)
            .ok_or_else(|| TableError::UnknownModel(name.to_string()))
    }

    /// Batch-latency SLO in seconds used by the Dilu experiments (DESIGN §5.4; BERT-base's
    /// 50 ms is the issue's).
    pub fn slo_s(self) -> f64 {
        match self {
            DiluModel::BertBase => 0.050,
            DiluModel::RobertaLarge | DiluModel::Gpt2Large => 0.060,
            DiluModel::Llama2_7b => 0.042,
            DiluModel::Resnet152 => 0.040,
        }
    }

    fn csv(self) -> &'static str {
        match self {
            DiluModel::BertBase => include_str!("../../data/dilu/bs_sm_bert_base.csv"),
            DiluModel::RobertaLarge => include_str!("../../data/dilu/bs_sm_roberta_large.csv"),
            DiluModel::Gpt2Large => include_str!("../../data/dilu/bs_sm_gpt2_large.csv"),
            DiluModel::Llama2_7b => include_str!("../../data/dilu/bs_sm_llama2.csv"),
            DiluModel::Resnet152 => include_str!("../../data/dilu/bs_sm_resnet152.csv"),
        }
    }

    /// Its shipped latency table.
    pub fn table(self) -> Result<LatencyTable, TableError> {
        LatencyTable::parse(self.name(), self.csv())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_tables_are_full_grids() {
        for m in DiluModel::ALL {
            let t = m.table().unwrap();
            assert_eq!(t.batches(), &[1, 2, 4, 8, 16, 32], "{}", m.name());
            assert_eq!(
                t.shares_pct(),
                &[10, 20, 30, 40, 50, 60, 70, 80, 90, 100],
                "{}",
                m.name()
            );
        }
        // A value copied from the source table.
        let r = DiluModel::Resnet152.table().unwrap();
        assert_eq!(r.point(16, 10).map(|p| p.latency_s), Some(0.104160));
        assert_eq!(r.point(3, 10), None);
    }

    #[test]
    fn interpolation_hits_grid_points_and_stays_between_them() {
        let t = DiluModel::Gpt2Large.table().unwrap();
        // On the grid: max over smaller batches of the min over smaller shares, by brute force.
        for &b in t.batches() {
            for &s in t.shares_pct() {
                let want = t
                    .batches()
                    .iter()
                    .filter(|&&b2| b2 <= b)
                    .map(|&b2| {
                        t.shares_pct()
                            .iter()
                            .filter(|&&s2| s2 <= s)
                            .map(|&s2| t.point(b2, s2).unwrap().latency_s)
                            .fold(f64::INFINITY, f64::min)
                    })
                    .fold(0.0, f64::max);
                let l = t.latency(f64::from(b), f64::from(s) / 100.0).unwrap();
                assert_eq!(l, want, "batch {b} at {s}%");
            }
        }
        let a = t.latency(4.0, 0.30).unwrap();
        let b = t.latency(8.0, 0.30).unwrap();
        let mid = t.latency(6.0, 0.30).unwrap();
        assert!((mid - (a + b) / 2.0).abs() < 1e-12, "{a} {mid} {b}");
        let c = t.latency(4.0, 0.40).unwrap();
        let mid = t.latency(4.0, 0.35).unwrap();
        assert!((mid - (a + c) / 2.0).abs() < 1e-12);
    }

    #[test]
    fn envelope_is_monotone() {
        for m in DiluModel::ALL {
            let t = m.table().unwrap();
            let mut prev_batch: Option<Vec<f64>> = None;
            for b in [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0] {
                let row: Vec<f64> = (10..=100)
                    .step_by(5)
                    .map(|p| t.latency(b, f64::from(p) / 100.0).unwrap())
                    .collect();
                assert!(row.windows(2).all(|w| w[1] <= w[0] + 1e-15), "{}", m.name());
                if let Some(prev) = &prev_batch {
                    assert!(row.iter().zip(prev).all(|(x, y)| x >= &(y - 1e-15)));
                }
                prev_batch = Some(row);
            }
        }
    }

    #[test]
    fn out_of_range_and_bad_csv_are_errors() {
        let t = DiluModel::BertBase.table().unwrap();
        for (b, s) in [
            (0.5, 0.5),
            (33.0, 0.5),
            (4.0, 0.05),
            (4.0, 1.2),
            (f64::NAN, 0.5),
            (4.0, f64::INFINITY),
        ] {
            assert!(
                matches!(t.latency(b, s), Err(TableError::OutOfRange { .. })),
                "{b} {s}"
            );
        }
        assert!(t.latency(32.0, 1.0).is_ok() && t.latency(1.0, 0.1).is_ok());
        for bad in [
            "1,10,0.1\n",
            "1,10,x,3\n",
            "1,10,-0.1,3\n",
            "1.5,10,0.1,3\n",
            "1,110,0.1,3\n",
            "1,10,0.1,3\n1,10,0.2,3\n",
            "1,10,0.1,3\n2,20,0.1,3\n",
            "",
            "1,10,NaN,3\n",
        ] {
            assert!(LatencyTable::parse("m", bad).is_err(), "{bad:?}");
        }
        assert!(matches!(
            DiluModel::from_name("vgg19"),
            Err(TableError::UnknownModel(_))
        ));
        assert_eq!(DiluModel::from_name("LLaMA2"), Ok(DiluModel::Llama2_7b));
    }
}
