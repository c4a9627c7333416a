//! MISO's choice of MIG layouts: every layout the GPU's placement rules allow, or the 18 A100
//! layouts of MISO's artifact (`--layouts miso18`). The geometry (profiles and placement rules)
//! is a fact of the GPU and lives in `tessera-model`; which layouts a scheduler picks from is
//! MISO's.

use serde::{Deserialize, Serialize};
use tessera_model::{MigGeometry, MigInstance};

/// Which MIG layouts a scheduler may choose from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LayoutSet {
    /// Every layout the placement rules allow ([`MigGeometry::valid_layouts`]), 4g+3g included.
    #[default]
    Generated,
    /// MISO's hand-written table of 18 A100 layouts (no 4g+3g).
    Miso18,
}

impl std::str::FromStr for LayoutSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "generated" | "all" => Ok(LayoutSet::Generated),
            "miso18" | "miso" => Ok(LayoutSet::Miso18),
            _ => Err(format!("unknown layout set {s:?} (generated, miso18)")),
        }
    }
}

/// MISO's 18 A100 layouts as compute-slice codes (SoCC'22 artifact,
/// `scheduler/partition_code.json`, MIT; facts copied as numbers).
pub const MISO_LAYOUTS: [&[u8]; 18] = [
    &[7],
    &[2, 1, 4],
    &[1, 1, 1, 4],
    &[3, 3],
    &[2, 1, 3],
    &[1, 1, 1, 3],
    &[3, 2, 2],
    &[3, 2, 1, 1],
    &[3, 1, 1, 2],
    &[3, 1, 1, 1, 1],
    &[2, 1, 2, 2],
    &[2, 1, 2, 1, 1],
    &[2, 1, 1, 1, 2],
    &[1, 1, 1, 2, 1, 1],
    &[1, 1, 1, 1, 1, 2],
    &[2, 1, 1, 1, 1, 1],
    &[1, 2, 1, 1, 1, 1],
    &[1, 1, 1, 1, 1, 1, 1],
];

/// The layouts of one [`LayoutSet`] under a geometry: all valid ones, or a placement of each of
/// MISO's 18 (a code whose compute slices cannot be placed under this geometry is skipped).
pub fn layouts(geo: &MigGeometry, set: LayoutSet) -> Vec<Vec<MigInstance>> {
    let all = geo.valid_layouts();
    match set {
        LayoutSet::Generated => all,
        LayoutSet::Miso18 => MISO_LAYOUTS
            .iter()
            .filter_map(|code| {
                let mut want: Vec<u8> = code.to_vec();
                want.sort_unstable();
                // The first generated layout with exactly these compute slices, preferring
                // the smallest-memory profile of each size (generation order does).
                all.iter()
                    .find(|l| {
                        geo.compute_slices_of(l) == want
                            && l.iter().all(|inst| {
                                geo.profile(*inst).is_some_and(|p| {
                                    geo.smallest_of(p.compute_slices) == Some(inst.profile)
                                })
                            })
                    })
                    .cloned()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::GpuCatalog;

    #[test]
    fn miso18_layouts_are_valid_placements_of_generated_shapes() {
        let c = GpuCatalog::builtin();
        for gpu in ["A100-40GB", "A100-80GB", "H100-80GB", "H200"] {
            let geo = c.mig_geometry(c.resolve(gpu).unwrap()).unwrap();
            let shapes: Vec<Vec<u8>> = geo
                .valid_layouts()
                .iter()
                .map(|l| geo.compute_slices_of(l))
                .collect();
            for code in MISO_LAYOUTS {
                let mut want = code.to_vec();
                want.sort_unstable();
                assert!(
                    shapes.contains(&want),
                    "{gpu}: MISO layout {code:?} missing"
                );
            }
            let miso = layouts(geo, LayoutSet::Miso18);
            assert_eq!(miso.len(), 18, "{gpu}");
            assert!(!miso.iter().any(|l| geo.compute_slices_of(l) == vec![3, 4]));
            for l in &miso {
                assert!(geo.check_layout(l).is_ok(), "{gpu}: {l:?}");
            }
            assert_eq!(layouts(geo, LayoutSet::Generated), geo.valid_layouts());
        }
        assert_eq!("miso18".parse::<LayoutSet>(), Ok(LayoutSet::Miso18));
        assert!("nine".parse::<LayoutSet>().is_err());
    }
}
