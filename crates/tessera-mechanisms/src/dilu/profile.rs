//! Dilu's introspective, pruned profiling (DESIGN §5.4), both searches counting probes.
//!
//! - Training: binary search over shares in 5% steps for the smallest share giving ≥ 98% of
//!   the full-GPU throughput (that becomes the job's `sm_request`). Assumes throughput does
//!   not fall as the share grows.
//! - Inference: the Hybrid Growth Search on the grid share 10–100% × batch 1, 2, 4, …, 32.
//!   Throughput efficiency is TE = throughput / share in percent, the unit of the Dilu
//!   artifact's `HGSS_simulation.sh`, in which the 0.2 drop threshold is expressed.

use thiserror::Error;

use super::table::{LatencyTable, Measured};

/// Why a search found nothing.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProfileError {
    /// No share on the grid meets the SLO even at batch 1: the service is unschedulable.
    #[error("unschedulable: {model} misses its {slo_ms} ms SLO at batch 1 even with the whole GPU ({best_ms:.1} ms)")]
    SloUnreachable {
        /// Model.
        model: String,
        /// SLO, milliseconds.
        slo_ms: f64,
        /// Batch-1 latency at the largest share, milliseconds.
        best_ms: f64,
    },
    /// The SLO is not a positive finite number.
    #[error("SLO {0} s must be positive and finite")]
    BadSlo(f64),
    /// A probe returned an impossible value.
    #[error("probe at {share_pct}% returned {value}, want a finite non-negative throughput")]
    BadProbe {
        /// Share probed, percent.
        share_pct: u32,
        /// What it returned.
        value: f64,
    },
    /// A probe point the grid should hold is missing.
    #[error("{model}: no measurement at batch {batch}, {share_pct}%")]
    MissingPoint {
        /// Model.
        model: String,
        /// Batch.
        batch: u32,
        /// Share, percent.
        share_pct: u32,
    },
}

/// The training search's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainingPick {
    /// Smallest share (percent, a multiple of 5) with ≥ 98% of full throughput.
    pub share_pct: u32,
    /// Throughput there relative to the full GPU.
    pub relative: f64,
    /// Measurements taken, the full-GPU one included.
    pub probes: u32,
}

/// Fraction of the full-GPU throughput the training search must keep.
pub const TRAINING_TARGET: f64 = 0.98;

/// Binary search over shares 5, 10, …, 100% for the smallest one whose throughput is at
/// least [`TRAINING_TARGET`] of the throughput at 100%. `measure(share_pct)` runs the job at
/// that share and reports its throughput (any unit).
pub fn training_search(mut measure: impl FnMut(u32) -> f64) -> Result<TrainingPick, ProfileError> {
    let mut probes = 0u32;
    let mut probe = |pct: u32| {
        probes += 1;
        let v = measure(pct);
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(ProfileError::BadProbe {
                share_pct: pct,
                value: v,
            })
        }
    };
    let full = probe(100)?;
    // Invariant: step `hi` meets the target (step 20 = 100% does by definition), step `lo`
    // is known not to (step 0 = no share) or untested below.
    let (mut lo, mut hi) = (0u32, 20u32);
    let mut hi_value = full;
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let v = probe(mid * 5)?;
        if v >= TRAINING_TARGET * full {
            hi = mid;
            hi_value = v;
        } else {
            lo = mid;
        }
    }
    Ok(TrainingPick {
        share_pct: hi * 5,
        relative: if full > 0.0 { hi_value / full } else { 1.0 },
        probes,
    })
}

/// Why the Hybrid Growth Search stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum HgsStop {
    /// Still over the SLO after raising the share by 10.
    SloViolated,
    /// Throughput efficiency dropped by more than 0.2 from the last accepted point.
    EfficiencyDrop,
    /// The next point is off the grid (batch 32 accepted, or share 100% exceeded).
    GridEnd,
}

/// The inference search's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InferencePick {
    /// Share, percent.
    pub share_pct: u32,
    /// Batch size.
    pub batch: u32,
    /// Batch latency there, seconds.
    pub latency_s: f64,
    /// Throughput there (requests per second, as measured).
    pub throughput: f64,
    /// Grid points measured.
    pub probes: u32,
    /// Why it stopped.
    pub stop: HgsStop,
}

/// Drop of throughput efficiency (throughput per share percent) that stops the search.
pub const TE_DROP: f64 = 0.2;

/// The Hybrid Growth Search over `table`'s measured points for a batch-latency `slo_s`:
/// start at (10%, batch 1); raise the share by 10 until the SLO holds; then double the batch;
/// on a violation try share + 10 at that batch; stop when still violating or when TE drops by
/// more than [`TE_DROP`] from the last accepted point; return the last accepted point.
pub fn hybrid_growth_search(
    table: &LatencyTable,
    slo_s: f64,
) -> Result<InferencePick, ProfileError> {
    if !(slo_s.is_finite() && slo_s > 0.0) {
        return Err(ProfileError::BadSlo(slo_s));
    }
    let max_share = table.shares_pct().last().copied().unwrap_or(0);
    let max_batch = table.batches().last().copied().unwrap_or(0);
    let mut probes = 0u32;
    let mut probe = |batch: u32, share: u32| -> Result<Measured, ProfileError> {
        probes += 1;
        table.point(batch, share).ok_or(ProfileError::MissingPoint {
            model: table.model().to_string(),
            batch,
            share_pct: share,
        })
    };
    let te = |m: &Measured| m.throughput / f64::from(m.share_pct);

    // Phase 1: smallest share meeting the SLO at batch 1.
    let mut share = 10u32;
    let mut accepted = loop {
        if share > max_share {
            let best = table.point(1, max_share).map_or(f64::NAN, |p| p.latency_s);
            return Err(ProfileError::SloUnreachable {
                model: table.model().to_string(),
                slo_ms: slo_s * 1e3,
                best_ms: best * 1e3,
            });
        }
        let m = probe(1, share)?;
        if m.latency_s <= slo_s {
            break m;
        }
        share += 10;
    };

    // Phase 2: grow the batch, buying one share step at a time when the SLO breaks.
    let stop = loop {
        let batch = accepted.batch * 2;
        if batch > max_batch {
            break HgsStop::GridEnd;
        }
        let mut m = probe(batch, share)?;
        if m.latency_s > slo_s {
            share += 10;
            if share > max_share {
                break HgsStop::GridEnd;
            }
            m = probe(batch, share)?;
            if m.latency_s > slo_s {
                break HgsStop::SloViolated;
            }
        }
        if te(&m) < te(&accepted) - TE_DROP {
            break HgsStop::EfficiencyDrop;
        }
        accepted = m;
    };
    Ok(InferencePick {
        share_pct: accepted.share_pct,
        batch: accepted.batch,
        latency_s: accepted.latency_s,
        throughput: accepted.throughput,
        probes,
        stop,
    })
}

#[cfg(test)]
mod tests {
    use super::super::table::DiluModel;
    use super::super::truth::TrainingCurve;
    use super::*;

    /// The published picks (issue 13 item 4; Dilu paper, ASPLOS'25).
    #[test]
    fn hgs_reproduces_the_published_picks() {
        for (model, slo, share, batch) in [
            (DiluModel::Resnet152, 0.040, 30, 16),
            (DiluModel::Gpt2Large, 0.060, 30, 4),
            (DiluModel::Llama2_7b, 0.042, 50, 8),
            (DiluModel::BertBase, 0.050, 10, 4),
        ] {
            let t = model.table().unwrap();
            let pick = hybrid_growth_search(&t, slo).unwrap();
            assert_eq!(
                (pick.share_pct, pick.batch),
                (share, batch),
                "{}: {pick:?}",
                model.name()
            );
            assert!(pick.latency_s <= slo);
            // Pruned: far fewer probes than the 60-point grid.
            assert!(
                pick.probes <= 12,
                "{}: {} probes",
                model.name(),
                pick.probes
            );
        }
    }

    #[test]
    fn hgs_probe_counts_and_stops_are_pinned() {
        let got: Vec<(u32, HgsStop)> = DiluModel::ALL
            .into_iter()
            .map(|m| {
                let p = hybrid_growth_search(&m.table().unwrap(), m.slo_s()).unwrap();
                (p.probes, p.stop)
            })
            .collect();
        // bert-base, roberta-large, gpt2-large, llama2-7b, resnet152 at their SLOs.
        assert_eq!(
            got,
            vec![
                (5, HgsStop::SloViolated),
                (6, HgsStop::SloViolated),
                (7, HgsStop::SloViolated),
                (10, HgsStop::SloViolated),
                (9, HgsStop::SloViolated),
            ]
        );
    }

    #[test]
    fn hgs_edges() {
        let t = DiluModel::BertBase.table().unwrap();
        // A generous SLO runs off the grid at batch 32.
        let p = hybrid_growth_search(&t, 10.0).unwrap();
        assert_eq!((p.share_pct, p.batch, p.stop), (10, 32, HgsStop::GridEnd));
        assert_eq!(p.probes, 6);
        // An SLO no share can meet is an explicit unschedulable state.
        let e = hybrid_growth_search(&t, 0.001).unwrap_err();
        assert!(matches!(e, ProfileError::SloUnreachable { .. }), "{e}");
        assert!(e.to_string().contains("unschedulable"));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                hybrid_growth_search(&t, bad),
                Err(ProfileError::BadSlo(_))
            ));
        }
    }

    #[test]
    fn hgs_stops_on_an_efficiency_drop() {
        // Batch 2 meets the SLO only with much more share and barely more throughput.
        let csv = "1,10,0.010,100\n2,10,0.100,20\n1,20,0.010,100\n2,20,0.015,130\n";
        let t = LatencyTable::parse("synthetic", csv).unwrap();
        let p = hybrid_growth_search(&t, 0.05).unwrap();
        assert_eq!(
            (p.share_pct, p.batch, p.stop),
            (10, 1, HgsStop::EfficiencyDrop)
        );
        assert_eq!(p.probes, 3);
    }

    #[test]
    fn training_search_finds_the_smallest_share_brute_force_agrees() {
        for knee in [0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 1.0] {
            let c = TrainingCurve::new(knee, 10.0).unwrap();
            let rel = |pct: u32| c.relative(f64::from(pct) / 100.0).unwrap_or(f64::NAN);
            let pick = training_search(rel).unwrap();
            let brute = (1..=20)
                .map(|k| k * 5)
                .find(|&p| rel(p) >= TRAINING_TARGET)
                .unwrap();
            assert_eq!(pick.share_pct, brute, "knee {knee}");
            assert!(pick.relative >= TRAINING_TARGET);
            // 1 full-GPU probe + ceil(log2 20) = 5 halvings at most.
            assert!(pick.probes <= 6, "{}", pick.probes);
        }
        // The shipped curves put the 98% point inside the artifact's 40–80% request range.
        for m in DiluModel::ALL {
            let c = TrainingCurve::for_model(m);
            let pick = training_search(|p| c.relative(f64::from(p) / 100.0).unwrap()).unwrap();
            assert!(
                (40..=80).contains(&pick.share_pct),
                "{}: {pick:?}",
                m.name()
            );
        }
    }

    #[test]
    fn training_search_rejects_bad_probes() {
        assert!(matches!(
            training_search(|_| f64::NAN),
            Err(ProfileError::BadProbe { .. })
        ));
        assert!(training_search(|p| if p == 50 { -1.0 } else { 1.0 }).is_err());
        // A job that does not care about its share needs only the smallest step.
        let p = training_search(|_| 7.0).unwrap();
        assert_eq!(p.share_pct, 5);
    }
}
