//! The hardware catalog: GPU models and their MIG geometry, loaded from a YAML data file.
//!
//! The built-in catalog (`data/gpus.yaml`) ships with the crate; users may load their own in the
//! same shape. GPU models are referred to by [`GpuModelId`], an index into the catalog, so hot
//! paths compare integers rather than strings.

use serde::{Deserialize, Serialize};

use crate::error::SpecError;

const BUILTIN_CATALOG: &str = include_str!("../data/gpus.yaml");

/// Index of a GPU model in its [`GpuCatalog`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GpuModelId(pub u16);

/// One GPU model: the datasheet figures performance models start from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuModel {
    /// Canonical name, e.g. `V100-32GB`.
    pub name: String,
    /// Other accepted spellings.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Device memory in GiB.
    #[serde(rename = "memoryGiB")]
    pub memory_gib: f64,
    /// Peak dense FP16/BF16 TFLOP/s (tensor cores where present).
    pub fp16_tflops: f64,
    /// Peak FP32 TFLOP/s.
    pub fp32_tflops: f64,
    /// Memory bandwidth in GB/s.
    #[serde(rename = "memoryBandwidthGBs")]
    pub memory_bandwidth_g_bs: f64,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// NVLink bandwidth per GPU in GB/s (0 when PCIe only).
    #[serde(default, rename = "nvlinkGBs")]
    pub nvlink_g_bs: f64,
    /// Name of the MIG geometry, for MIG-capable parts.
    #[serde(default)]
    pub mig: Option<String>,
}

/// A MIG GPU-instance profile (one row of NVIDIA's placement table).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigProfile {
    /// Profile name, e.g. `3g.20gb`.
    pub name: String,
    /// Compute slices (of 7).
    pub compute_slices: u8,
    /// Memory slices (of 8).
    pub memory_slices: u8,
    /// Memory of the instance in GiB.
    #[serde(rename = "memoryGiB")]
    pub memory_gib: f64,
    /// Memory-slice positions the instance may start at.
    pub starts: Vec<u8>,
    /// Most instances of this profile on one GPU.
    pub max_count: u8,
    /// SMs of the instance.
    pub sms: u32,
}

/// The MIG placement rules of one GPU family.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigGeometry {
    /// Geometry name referenced by [`GpuModel::mig`].
    pub name: String,
    /// Its instance profiles, smallest first.
    pub profiles: Vec<MigProfile>,
}

impl MigGeometry {
    /// Compute slices of a MIG-capable GPU.
    pub const COMPUTE_SLICES: u32 = 7;
    /// Memory slices of a MIG-capable GPU.
    pub const MEMORY_SLICES: u32 = 8;

    /// The profile of an instance.
    pub fn profile(&self, instance: crate::MigInstance) -> Option<&MigProfile> {
        self.profiles.get(instance.profile as usize)
    }

    /// Checks a layout against NVIDIA's placement rules: every profile known and started at
    /// one of its allowed positions, memory-slice runs inside the GPU and disjoint, at most
    /// seven compute slices in all, no profile more often than its maximum.
    pub fn check_layout(&self, layout: &[crate::MigInstance]) -> Result<(), String> {
        let mut memory: u32 = 0;
        let mut compute: u32 = 0;
        let mut counts = vec![0u8; self.profiles.len()];
        for inst in layout {
            let Some(p) = self.profile(*inst) else {
                return Err(format!(
                    "no profile #{} in geometry {}",
                    inst.profile, self.name
                ));
            };
            if !p.starts.contains(&inst.start) {
                return Err(format!(
                    "{} cannot start at memory slice {} (allowed: {:?})",
                    p.name, inst.start, p.starts
                ));
            }
            let end = inst.start as u32 + p.memory_slices as u32;
            if end > Self::MEMORY_SLICES {
                return Err(format!(
                    "{} at {} runs past the last memory slice",
                    p.name, inst.start
                ));
            }
            let run = ((1u32 << p.memory_slices) - 1) << inst.start;
            if memory & run != 0 {
                return Err(format!(
                    "{} at {} overlaps another instance",
                    p.name, inst.start
                ));
            }
            memory |= run;
            compute += p.compute_slices as u32;
            counts[inst.profile as usize] += 1;
            if counts[inst.profile as usize] > p.max_count {
                return Err(format!("more than {} instances of {}", p.max_count, p.name));
            }
        }
        if compute > Self::COMPUTE_SLICES {
            return Err(format!(
                "{compute} compute slices (at most {})",
                Self::COMPUTE_SLICES
            ));
        }
        Ok(())
    }

    /// Every valid layout the placement rules allow (see [`check_layout`](Self::check_layout)),
    /// non-empty, each listed by ascending memory-slice start, in a deterministic order.
    ///
    /// Generated by a depth-first walk over memory slices: at each free slice either leave it
    /// empty or start any profile allowed there, so every set of instances appears once.
    pub fn valid_layouts(&self) -> Vec<Vec<crate::MigInstance>> {
        let mut out = Vec::new();
        let mut cur = Vec::new();
        let mut counts = vec![0u8; self.profiles.len()];
        self.walk(0, 0, &mut counts, &mut cur, &mut out);
        out
    }

    fn walk(
        &self,
        slice: u32,
        compute: u32,
        counts: &mut [u8],
        cur: &mut Vec<crate::MigInstance>,
        out: &mut Vec<Vec<crate::MigInstance>>,
    ) {
        if slice >= Self::MEMORY_SLICES {
            if !cur.is_empty() {
                out.push(cur.clone());
            }
            return;
        }
        for (i, p) in self.profiles.iter().enumerate() {
            let end = slice + p.memory_slices as u32;
            if !p.starts.contains(&(slice as u8))
                || end > Self::MEMORY_SLICES
                || compute + p.compute_slices as u32 > Self::COMPUTE_SLICES
                || counts[i] >= p.max_count
            {
                continue;
            }
            counts[i] += 1;
            cur.push(crate::MigInstance {
                profile: i as u8,
                start: slice as u8,
            });
            self.walk(end, compute + p.compute_slices as u32, counts, cur, out);
            cur.pop();
            counts[i] -= 1;
        }
        // Or leave this memory slice unused.
        self.walk(slice + 1, compute, counts, cur, out);
    }

    /// The sorted compute slices of a layout's instances (its multiset of `Ng` sizes).
    pub fn compute_slices_of(&self, layout: &[crate::MigInstance]) -> Vec<u8> {
        let mut v: Vec<u8> = layout
            .iter()
            .filter_map(|i| self.profile(*i).map(|p| p.compute_slices))
            .collect();
        v.sort_unstable();
        v
    }

    /// The profile with `compute` compute slices and the fewest memory slices.
    pub fn smallest_of(&self, compute: u8) -> Option<u8> {
        self.profiles
            .iter()
            .enumerate()
            .filter(|(_, p)| p.compute_slices == compute)
            .min_by_key(|(_, p)| p.memory_slices)
            .map(|(i, _)| i as u8)
    }

    /// The index of a profile by name (`3g.20gb`).
    pub fn find_profile(&self, name: &str) -> Option<u8> {
        self.profiles
            .iter()
            .position(|p| p.name.eq_ignore_ascii_case(name))
            .map(|i| i as u8)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CatalogFile {
    #[allow(dead_code)]
    api_version: String,
    kind: String,
    gpus: Vec<GpuModel>,
    #[serde(default)]
    mig_geometries: Vec<MigGeometry>,
}

/// GPU models and MIG geometries, looked up by name (case-insensitive, aliases allowed).
#[derive(Clone, Debug, PartialEq)]
pub struct GpuCatalog {
    gpus: Vec<GpuModel>,
    mig: Vec<MigGeometry>,
}

impl GpuCatalog {
    /// The catalog shipped with Tessera.
    pub fn builtin() -> GpuCatalog {
        // The embedded file is checked by a unit test, so this cannot fail at run time.
        match Self::from_yaml(BUILTIN_CATALOG) {
            Ok(c) => c,
            Err(e) => unreachable!("built-in GPU catalog is invalid: {e}"),
        }
    }

    /// Parses a catalog in the `kind: GpuCatalog` YAML shape.
    pub fn from_yaml(text: &str) -> Result<GpuCatalog, SpecError> {
        let file: CatalogFile = serde_norway::from_str(text).map_err(SpecError::from_yaml)?;
        if file.kind != "GpuCatalog" {
            return Err(SpecError::invalid(
                "kind",
                format!("expected GpuCatalog, got {}", file.kind),
            ));
        }
        let catalog = GpuCatalog {
            gpus: file.gpus,
            mig: file.mig_geometries,
        };
        catalog.validate()?;
        Ok(catalog)
    }

    /// A catalog of these models and geometries, checked as a catalog file is (a copy sent
    /// over the wire, e.g. a daemon's catalogue with its derived MIG models).
    pub fn from_parts(gpus: Vec<GpuModel>, mig: Vec<MigGeometry>) -> Result<GpuCatalog, SpecError> {
        let catalog = GpuCatalog { gpus, mig };
        catalog.validate()?;
        Ok(catalog)
    }

    /// The MIG geometries, in catalog order.
    pub fn mig_geometries(&self) -> &[MigGeometry] {
        &self.mig
    }

    fn validate(&self) -> Result<(), SpecError> {
        if self.gpus.is_empty() {
            return Err(SpecError::invalid(
                "gpus",
                "the catalog lists no GPU model".to_string(),
            ));
        }
        if self.gpus.len() > u16::MAX as usize {
            return Err(SpecError::invalid(
                "gpus",
                "too many GPU models".to_string(),
            ));
        }
        let mut seen: Vec<String> = Vec::new();
        for (i, g) in self.gpus.iter().enumerate() {
            let field = |f: &str| format!("gpus[{i}].{f}");
            for name in std::iter::once(&g.name).chain(&g.aliases) {
                if name.trim().is_empty() {
                    return Err(SpecError::invalid(
                        &field("name"),
                        "GPU names and aliases must not be empty".to_string(),
                    ));
                }
                let key = name.to_ascii_lowercase();
                if seen.contains(&key) {
                    return Err(SpecError::invalid(
                        &field("name"),
                        format!("duplicate GPU name {name}"),
                    ));
                }
                seen.push(key);
            }
            for (what, v) in [
                ("memoryGiB", g.memory_gib),
                ("fp16Tflops", g.fp16_tflops),
                ("fp32Tflops", g.fp32_tflops),
                ("memoryBandwidthGBs", g.memory_bandwidth_g_bs),
            ] {
                if !(v.is_finite() && v > 0.0) {
                    return Err(SpecError::invalid(
                        &field(what),
                        format!("must be positive, got {v}"),
                    ));
                }
            }
            if g.sms == 0 {
                return Err(SpecError::invalid(
                    &field("sms"),
                    "must be at least 1".to_string(),
                ));
            }
            if let Some(m) = &g.mig {
                if !self.mig.iter().any(|geo| &geo.name == m) {
                    return Err(SpecError::invalid(
                        &field("mig"),
                        format!("unknown MIG geometry {m}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Looks a model up by name or alias, ignoring case.
    pub fn find(&self, name: &str) -> Option<GpuModelId> {
        self.gpus
            .iter()
            .position(|g| {
                g.name.eq_ignore_ascii_case(name)
                    || g.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
            })
            .map(|i| GpuModelId(i as u16))
    }

    /// Like [`find`](Self::find), but an unknown name is an error listing the known ones.
    pub fn resolve(&self, name: &str) -> Result<GpuModelId, SpecError> {
        self.find(name).ok_or_else(|| SpecError::UnknownGpu {
            name: name.to_string(),
            known: self
                .gpus
                .iter()
                .map(|g| g.name.clone())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The model behind an id from this catalog.
    ///
    /// Ids are only minted by this catalog, so an out-of-range id is a caller bug; it falls
    /// back to the first model rather than panicking.
    pub fn get(&self, id: GpuModelId) -> &GpuModel {
        self.gpus.get(id.0 as usize).unwrap_or(&self.gpus[0])
    }

    /// All models, in catalog order.
    pub fn models(&self) -> &[GpuModel] {
        &self.gpus
    }

    /// The MIG geometry of a model, if it is MIG-capable.
    pub fn mig_geometry(&self, id: GpuModelId) -> Option<&MigGeometry> {
        let name = self.get(id).mig.as_ref()?;
        self.mig.iter().find(|g| &g.name == name)
    }

    /// Checks a job's MIG request against the GPU types it may run on (empty = any): every
    /// listed type must be MIG-capable and, for a fixed profile, have that profile; with no
    /// list, some MIG-capable model must have it. The error says why, naming the profiles.
    pub fn check_mig_request(
        &self,
        request: &crate::MigRequest,
        gpu_types: &[GpuModelId],
    ) -> Result<(), String> {
        let profile = request.profile();
        for &id in gpu_types {
            let name = &self.get(id).name;
            let Some(geo) = self.mig_geometry(id) else {
                return Err(format!("{request} asks for MIG, but {name} has no MIG"));
            };
            if let Some(p) = profile {
                if geo.find_profile(p).is_none() {
                    return Err(format!(
                        "{name} has no MIG profile {p} (it has {})",
                        geo.profiles
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
        let Some(p) = profile else { return Ok(()) };
        if !gpu_types.is_empty() {
            return Ok(());
        }
        if self.mig.iter().any(|g| g.find_profile(p).is_some()) {
            return Ok(());
        }
        let mut known: Vec<&str> = self
            .mig
            .iter()
            .flat_map(|g| g.profiles.iter().map(|p| p.name.as_str()))
            .collect();
        known.sort_unstable();
        known.dedup();
        Err(format!(
            "unknown MIG profile {p} (known: {})",
            known.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_requests_are_checked_against_gpu_types() {
        let c = GpuCatalog::builtin();
        let id = |n: &str| c.find(n).unwrap();
        let fixed = |p: &str| crate::MigRequest::Profile(p.into());
        assert_eq!(c.check_mig_request(&fixed("3g.20gb"), &[]), Ok(()));
        assert_eq!(
            c.check_mig_request(&fixed("3g.20gb"), &[id("A100-40GB")]),
            Ok(())
        );
        assert_eq!(
            c.check_mig_request(&crate::MigRequest::Any, &[id("H100-80GB")]),
            Ok(())
        );
        let e = c
            .check_mig_request(&fixed("3g.20gb"), &[id("A100-80GB")])
            .unwrap_err();
        assert!(
            e.contains("A100-80GB has no MIG profile 3g.20gb") && e.contains("3g.40gb"),
            "{e}"
        );
        let e = c.check_mig_request(&fixed("5g.30gb"), &[]).unwrap_err();
        assert!(
            e.contains("unknown MIG profile 5g.30gb") && e.contains("1g.5gb"),
            "{e}"
        );
        let e = c
            .check_mig_request(&crate::MigRequest::Any, &[id("V100-32GB")])
            .unwrap_err();
        assert!(e.contains("V100-32GB has no MIG"), "{e}");
    }

    #[test]
    fn builtin_catalog_has_required_models() {
        let c = GpuCatalog::from_yaml(BUILTIN_CATALOG).unwrap();
        for name in [
            "K80",
            "P100",
            "V100-16GB",
            "V100-32GB",
            "T4",
            "A10",
            "A40",
            "A100-40GB",
            "A100-80GB",
            "H100-80GB",
            "H200",
            "h200-141gb",
        ] {
            assert!(c.find(name).is_some(), "{name} missing");
        }
        let a100 = c.resolve("a100-40gb").unwrap();
        let mig = c.mig_geometry(a100).unwrap();
        assert_eq!(mig.profiles.len(), 6);
        assert_eq!(mig.profiles.iter().map(|p| p.sms).max(), Some(98));
        assert!(c.mig_geometry(c.resolve("V100-32GB").unwrap()).is_none());
    }

    #[test]
    fn mig_layout_rules() {
        let c = GpuCatalog::builtin();
        let geo = c.mig_geometry(c.resolve("A100-40GB").unwrap()).unwrap();
        let at = |name: &str, start: u8| crate::MigInstance {
            profile: geo.find_profile(name).unwrap(),
            start,
        };
        assert!(geo
            .check_layout(&[at("4g.20gb", 0), at("3g.20gb", 4)])
            .is_ok());
        assert!(geo.check_layout(&[at("7g.40gb", 0)]).is_ok());
        assert!(geo
            .check_layout(&[
                at("3g.20gb", 0),
                at("2g.10gb", 4),
                at("1g.5gb", 6),
                at("1g.5gb", 7 - 1)
            ])
            .is_err()); // 1g at 6 twice overlaps
        assert!(geo
            .check_layout(&[at("4g.20gb", 0), at("4g.20gb", 0)])
            .is_err());
        assert!(geo.check_layout(&[at("3g.20gb", 2)]).is_err()); // 3g may start at 0 or 4 only
        let seven: Vec<_> = (0..7).map(|i| at("1g.5gb", i)).collect();
        assert!(geo.check_layout(&seven).is_ok());
        let mut eight = seven.clone();
        eight.push(at("1g.5gb", 0));
        assert!(geo.check_layout(&eight).is_err());
    }

    #[test]
    fn generated_layouts_obey_the_placement_rules() {
        let c = GpuCatalog::builtin();
        for gpu in ["A100-40GB", "A100-80GB", "H100-80GB", "H200"] {
            let geo = c.mig_geometry(c.resolve(gpu).unwrap()).unwrap();
            let all = geo.valid_layouts();
            for l in &all {
                assert!(geo.check_layout(l).is_ok(), "{gpu}: {l:?}");
            }
            let mut dedup = all.clone();
            dedup.sort();
            dedup.dedup();
            assert_eq!(dedup.len(), all.len(), "{gpu}: a layout listed twice");
            let shapes: Vec<Vec<u8>> = all.iter().map(|l| geo.compute_slices_of(l)).collect();
            assert!(shapes.contains(&vec![3, 4]), "{gpu}: 4g+3g missing");
            assert!(!shapes.contains(&vec![4, 4]), "{gpu}: two 4g");
            assert!(shapes
                .iter()
                .all(|s| s.iter().map(|&x| x as u32).sum::<u32>() <= 7));
        }
        // Hand-counted on A100-40GB: a lone 3g may sit at 0 or 4; 4g only at 0.
        let geo = c.mig_geometry(c.resolve("A100-40GB").unwrap()).unwrap();
        let g3 = geo.find_profile("3g.20gb").unwrap();
        let lone3: Vec<_> = geo
            .valid_layouts()
            .into_iter()
            .filter(|l| l.len() == 1 && l[0].profile == g3)
            .collect();
        assert_eq!(lone3.len(), 2);
        let at = |name: &str, start: u8| crate::MigInstance {
            profile: geo.find_profile(name).unwrap(),
            start,
        };
        assert!(geo
            .check_layout(&[at("4g.20gb", 0), at("4g.20gb", 4)])
            .is_err());
        assert!(geo.check_layout(&[at("3g.20gb", 2)]).is_err());
    }

    #[test]
    fn unknown_gpu_lists_known_names() {
        let err = GpuCatalog::builtin()
            .resolve("V200")
            .unwrap_err()
            .to_string();
        assert!(err.contains("V200") && err.contains("V100-32GB"), "{err}");
    }

    #[test]
    fn rejects_bad_catalogs() {
        let dup = "apiVersion: tessera/v1\nkind: GpuCatalog\ngpus:\n- {name: X, memoryGiB: 1, fp16Tflops: 1, fp32Tflops: 1, memoryBandwidthGBs: 1, sms: 1}\n- {name: x, memoryGiB: 1, fp16Tflops: 1, fp32Tflops: 1, memoryBandwidthGBs: 1, sms: 1}\n";
        assert!(GpuCatalog::from_yaml(dup).is_err());
        let neg = "apiVersion: tessera/v1\nkind: GpuCatalog\ngpus:\n- {name: X, memoryGiB: -1, fp16Tflops: 1, fp32Tflops: 1, memoryBandwidthGBs: 1, sms: 1}\n";
        assert!(GpuCatalog::from_yaml(neg).is_err());
        let ok = "apiVersion: tessera/v1\nkind: GpuCatalog\ngpus:\n- {name: X, memoryGiB: 1, fp16Tflops: 1, fp32Tflops: 1, memoryBandwidthGBs: 1, sms: 1}\n";
        assert!(GpuCatalog::from_yaml(ok).is_ok());
        for (bad, field) in [
            (ok.replace("name: X", "name: ''"), "gpus[0].name"),
            (ok.replace("sms: 1", "sms: 0"), "gpus[0].sms"),
            (
                ok.replace("name: X,", "name: X, aliases: [' '],"),
                "gpus[0].name",
            ),
        ] {
            let err = GpuCatalog::from_yaml(&bad).unwrap_err().to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
        assert!(GpuCatalog::from_yaml("kind: [").is_err());
        assert!(
            GpuCatalog::from_yaml("apiVersion: tessera/v1\nkind: GpuCatalog\ngpus: []\n").is_err()
        );
    }
}
