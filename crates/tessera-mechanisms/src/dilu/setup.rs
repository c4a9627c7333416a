//! What Dilu's serving policies need from every driver, in one place: the serving truth
//! (batch latency from the tables), the training truth under quotas, the vertical scaler for
//! `dilu`, the 2 s load window; and part (b)'s cluster and workload as built-ins
//! (`builtin:dilu-4x4`, `builtin:dilu-serving`). `tessera simulate --policy dilu` and
//! `tessera repro dilu --parts b` both go through [`serving_setup`], so they run the same
//! code on the same settings.

#[cfg(feature = "experiments")]
use std::sync::Arc;

#[cfg(feature = "experiments")]
use tessera_model::SimDuration;
#[cfg(feature = "experiments")]
use tessera_sched::Policy;

#[cfg(feature = "experiments")]
use super::policy::DiluServe;
#[cfg(feature = "experiments")]
use super::serving::{DiluController, DiluServingModel, DiluTruth};
#[cfg(feature = "experiments")]
use super::table::TableError;
#[cfg(feature = "experiments")]
use crate::ServingSetup;
use crate::{BuiltinCluster, BuiltinWorkload};

/// Part (b)'s cluster: 4 nodes × 4 A100-40GB, host CPU and memory ample (they never bind);
/// the same as [`super::serve_repro::scenario_cluster`].
pub const CLUSTER: BuiltinCluster = BuiltinCluster {
    name: "dilu-4x4",
    about: "Dilu's serving testbed (repro dilu part b): 4 nodes x 4 A100-40GB",
    yaml: cluster_yaml,
};

fn cluster_yaml() -> String {
    "apiVersion: tessera/v1
kind: Cluster
metadata:
  name: dilu-4x4
spec:
  nodeGroups:
    - name: node
      count: 4
      gpu: A100-40GB
      gpusPerNode: 4
      cpus: 128
      memory: 1024Gi
"
    .to_string()
}

/// Part (b)'s workload: three services and four training jobs
/// ([`super::serve_repro::scenario_workload`]); the seed goes to the arrivals, through the
/// run's serving seed (`--seed`), not here.
#[cfg(feature = "experiments")]
pub const WORKLOAD: BuiltinWorkload = BuiltinWorkload {
    name: "dilu-serving",
    about: "Dilu's serving scenario (repro dilu part b): RoBERTa-large bursty, BERT-base periodic, LLaMA2-7B Poisson, four training jobs of two hours' work; on builtin:dilu-4x4 with the dilu policies and --horizon 1007 (the services' lifetime)",
    generate: serving_workload,
};

#[cfg(feature = "experiments")]
fn serving_workload(_seed: u64) -> Result<tessera_model::Workload, String> {
    super::serve_repro::scenario_workload().map_err(|e| e.to_string())
}

/// The built-in workloads (part (b)'s needs the simulator's profiling of services).
pub fn workloads() -> &'static [BuiltinWorkload] {
    #[cfg(feature = "experiments")]
    {
        &[WORKLOAD]
    }
    #[cfg(not(feature = "experiments"))]
    {
        &[]
    }
}

/// Dilu's setup for one of its serving policies (`dilu`, `dilu-no-vertical`,
/// `static-shares`, `dilu-exclusive`; case-insensitive); `None` for any other name.
///
/// All four run on the tables ([`DiluServingModel`]) and [`DiluTruth`] with a 2 s window (at
/// each 1 s tick the horizontal scaler reads the last whole second); only `dilu` gets the
/// overflow controller ([`DiluController`]). A run ends when its workload is done, training
/// included; part (b) measures the services' lifetime with an explicit horizon
/// ([`super::serve_repro::run_serving`]).
#[cfg(feature = "experiments")]
pub fn serving_setup(policy: &str) -> Option<Result<ServingSetup, TableError>> {
    let p = DiluServe::by_name(policy)?;
    let vertical = p.name() == "dilu";
    Some(DiluServingModel::shipped().map(|model| {
        ServingSetup {
            about: if vertical {
                "Dilu latency tables, quota training truth, vertical scaling"
            } else {
                "Dilu latency tables, quota training truth, static shares"
            },
            model: Arc::new(model),
            controller: vertical.then(|| {
                Arc::new(DiluController) as Arc<dyn tessera_sim::serving::ShareController>
            }),
            truth: Some(Arc::new(DiluTruth)),
            window: Some(SimDuration::from_secs(2)),
        }
    }))
}

#[cfg(all(test, feature = "experiments"))]
mod tests {
    use super::*;
    use tessera_model::GpuCatalog;

    #[test]
    fn builtin_cluster_is_the_scenario_cluster() {
        let c = tessera_model::Cluster::from_yaml(&cluster_yaml(), &GpuCatalog::builtin()).unwrap();
        let s = super::super::serve_repro::scenario_cluster().unwrap();
        assert_eq!(c.nodes.len(), s.nodes.len());
        assert_eq!(c.totals(), s.totals());
        for (a, b) in c.nodes.iter().zip(&s.nodes) {
            assert_eq!((a.gpus, a.gpu, &a.name), (b.gpus, b.gpu, &b.name));
        }
    }

    #[test]
    fn only_dilu_policies_have_a_setup_and_only_dilu_scales_vertically() {
        for (name, vertical) in [
            ("dilu", true),
            ("DILU", true),
            ("dilu-no-vertical", false),
            ("static-shares", false),
            ("dilu-exclusive", false),
        ] {
            let s = serving_setup(name).unwrap().unwrap();
            assert_eq!(s.controller.is_some(), vertical, "{name}");
            assert!(s.truth.is_some(), "{name}");
            assert_eq!(s.window, Some(SimDuration::from_secs(2)));
        }
        for name in ["las", "serve-exclusive", "exclusive", "dilu-"] {
            assert!(serving_setup(name).is_none(), "{name}");
            assert!(crate::serving_setup(name).is_none(), "{name}");
        }
        // The registry finds it through the mechanism.
        assert!(crate::serving_setup("dilu").is_some_and(|s| s.is_ok()));
    }

    #[test]
    fn apply_sets_the_serving_config_and_leaves_the_horizon_to_the_driver() {
        let w = super::super::serve_repro::scenario_workload().unwrap();
        let s = serving_setup("dilu").unwrap().unwrap();
        let mut c = tessera_sim::SimConfig::default();
        s.apply(&mut c, &w, 7);
        assert_eq!(c.serving.seed, 7);
        assert_eq!(c.serving.window, SimDuration::from_secs(2));
        assert!(c.serving.controller.is_some());
        // Training does not end with the services (issue 36): no limit unless the driver
        // sets one, and the driver's stays.
        assert_eq!(c.time_limit, None);
        let mut c = tessera_sim::SimConfig {
            time_limit: Some(tessera_model::SimTime::from_secs(10)),
            ..Default::default()
        };
        s.apply(&mut c, &w, 7);
        assert_eq!(c.time_limit, Some(tessera_model::SimTime::from_secs(10)));
    }
}
