//! The mixed workload's generator ([`MixedWorkload`]); see [`super::world`] for what it
//! holds and where its figures come from.

use tessera_model::{
    ArrivalProcess, Bytes, GpuCatalog, GpuDemand, GpuModelId, GpuShareRequest, InferenceService,
    MigRequest, MilliCpu, SimDuration, SimRng, SimTime, TrainingJob, Workload,
};
use tessera_trace::synthetic::{philly_runtimes, PHILLY_GPU_MIX};

use crate::dilu::profile::hybrid_growth_search;
use crate::dilu::table::DiluModel;

/// Image models of regular jobs (catalogue names), drawn uniformly.
const IMAGE: &[&str] = &[
    "resnet50",
    "resnet18",
    "mobilenet-v2",
    "shufflenet-v2",
    "alexnet",
    "vae",
    "cyclegan",
];
/// Language models of regular jobs.
const LANGUAGE: &[&str] = &[
    "transformer",
    "gnmt",
    "lstm",
    "bert-base",
    "bert-large",
    "roberta-large",
    "gpt2-large",
];
/// Speech, recommendation, graph and RL models of regular jobs.
const OTHER: &[&str] = &["deepspeech2", "m5", "recommendation", "a3c", "gnn"];
/// Large models of jobs of 4 GPUs or more (Crius's and HAP's kind).
const LARGE: &[&str] = &[
    "bert-1.3b",
    "bert-2.6b",
    "wrn-1b",
    "wrn-2b",
    "moe-1.3b",
    "moe-2.4b",
    "llama2-7b",
];
/// Models of multi-node jobs; the 80 GB-only ones are the first three.
const HUGE: &[&str] = &["bert-6.7b", "moe-10b", "llama2-7b", "wrn-4b", "bert-4b"];
const HUGE_80GB_ONLY: usize = 3;
/// Models of small jobs (notebooks, trials, fine-tunes) with the batch size they train at
/// and the smallest MIG profile they fit in (MISO's measurements, `miso_mig_latency.json`:
/// the smallest slice with a time for that model and batch). A job asking for a fixed profile
/// asks for one it fits in, as a user who tried it would.
const SMALL: &[(&str, u32, usize)] = &[
    ("resnet50", 128, 0),
    ("mobilenet-v2", 128, 0),
    ("embedding", 128, 0),
    ("gnn", 128, 0),
    ("deepspeech2", 4, 0),
    ("transformer", 32, 0),
    ("bert-base", 4, 1),
    ("cyclegan", 2, 1),
];
/// MIG profiles small jobs ask for by name, smallest first: they exist on both A100-80GB and
/// H100-80GB.
const MIG_PROFILES: &[&str] = &["1g.10gb", "2g.20gb", "3g.40gb"];

/// Parameters of the mixed workload.
#[derive(Clone, Debug, PartialEq)]
pub struct MixedWorkload {
    /// Training jobs.
    pub jobs: usize,
    /// Their arrival rate, jobs per hour (Poisson).
    pub jobs_per_hour: f64,
    /// Longest run time drawn, seconds: Philly's run times are truncated here (see
    /// [`MixedWorkload::default`]).
    pub max_duration_s: f64,
    /// Share of small jobs (one MIG instance or a fraction of a GPU).
    pub small_share: f64,
    /// Share of multi-node jobs (16 or 32 GPUs).
    pub multi_node_share: f64,
    /// Include the three inference services.
    pub services: bool,
    /// Services' lifetime from time 0, seconds: one day's diurnal shape, compressed into it.
    pub service_secs: u64,
    /// Scale of the services' request rates (1 = the defaults below).
    pub service_load: f64,
    /// Seed of every draw.
    pub seed: u64,
}

impl Default for MixedWorkload {
    fn default() -> Self {
        // Philly's run times truncated at 8 h (their 94th percentile: the mean drops from
        // 4.1 h to 1.15 h), arrivals over 4 h and services of 4 h at a few requests per
        // second keep every policy's run (Dilu's one-second rounds, Sia's ILP and the
        // request-level serving included) well under a second; 60 jobs/h offer the 96 GPUs
        // about as much work as they hold while jobs arrive, so that jobs queue.
        MixedWorkload {
            jobs: 240,
            jobs_per_hour: 60.0,
            max_duration_s: 8.0 * 3600.0,
            small_share: 0.25,
            multi_node_share: 0.02,
            services: true,
            service_secs: 4 * 3600,
            service_load: 1.0,
            seed: 1,
        }
    }
}

/// The catalogue's id of a GPU model the mixed cluster has.
fn gpu(catalog: &GpuCatalog, name: &str) -> Result<GpuModelId, String> {
    catalog
        .find(name)
        .ok_or_else(|| format!("GPU model {name} is not in the built-in catalog"))
}

fn pick<'a>(rng: &mut SimRng, items: &[&'a str]) -> &'a str {
    items[rng.below(items.len() as u64) as usize]
}

impl MixedWorkload {
    /// Generates the workload: jobs in arrival order (ids 0, 1, …), then the services.
    pub fn generate(&self) -> Result<Workload, String> {
        if !(self.jobs_per_hour.is_finite() && self.jobs_per_hour > 0.0) {
            return Err(format!(
                "load {}: must be a positive number of jobs per hour",
                self.jobs_per_hour
            ));
        }
        for (name, v) in [
            ("small share", self.small_share),
            ("multi-node share", self.multi_node_share),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} {v}: must be a fraction in [0, 1]"));
            }
        }
        if !(self.max_duration_s.is_finite() && self.max_duration_s >= 1.0) {
            return Err(format!(
                "longest run time {} s: must be at least 1 s",
                self.max_duration_s
            ));
        }
        if self.small_share + self.multi_node_share > 1.0 {
            return Err("small and multi-node shares add up to more than 1".into());
        }
        let catalog = GpuCatalog::builtin();
        let a100 = gpu(&catalog, "A100-80GB")?;
        let h100 = gpu(&catalog, "H100-80GB")?;
        let v100 = gpu(&catalog, "V100-32GB")?;
        let big_memory = vec![a100, h100];
        let runtimes = philly_runtimes();
        if runtimes.is_empty() {
            return Err("the embedded Philly run times are empty".into());
        }
        let mix_weights: Vec<f64> = PHILLY_GPU_MIX.iter().map(|m| m.1).collect();
        let mut rng = SimRng::seed_from_u64(self.seed);
        let mut t_us: u64 = 0;
        let mut jobs = Vec::with_capacity(self.jobs);
        for i in 0..self.jobs {
            // Per job, in this order: gap, kind, run time, then the kind's own draws.
            let gap = rng.exponential(self.jobs_per_hour / 3600.0);
            t_us = t_us.saturating_add((gap * 1e6).round() as u64);
            let kind = rng.uniform();
            let runtime =
                runtimes[rng.below(runtimes.len() as u64) as usize].clamp(1.0, self.max_duration_s);
            let duration = SimDuration::from_secs_f64(runtime);
            let mut job = TrainingJob::simple(i as u32, SimTime::from_micros(t_us), 1, duration);
            if kind < self.small_share {
                // A notebook, a trial or a fine-tune: one MIG instance or part of a GPU.
                job.name = format!("small-{i}").into();
                let (model, batch, smallest) = SMALL[rng.below(SMALL.len() as u64) as usize];
                job.model = model.to_string();
                job.batch_size = Some(batch);
                let how = rng.uniform();
                if how < 0.4 {
                    let fits = &MIG_PROFILES[smallest..];
                    job.mig = Some(MigRequest::Profile(pick(&mut rng, fits).into()));
                } else if how < 0.7 {
                    job.mig = Some(MigRequest::Any);
                } else {
                    let permille = [250u16, 500][rng.below(2) as usize];
                    job.gpu_share = Some(GpuShareRequest {
                        sm_permille: permille,
                        memory: Some(Bytes::from_gib(if permille == 250 { 6 } else { 12 })),
                    });
                }
            } else if kind < self.small_share + self.multi_node_share {
                // Pre-training across nodes.
                let m = rng.below(HUGE.len() as u64) as usize;
                job.name = format!("multi-{i}").into();
                job.model = HUGE[m].to_string();
                job.gpus = if rng.uniform() < 0.75 { 16 } else { 32 };
                if m < HUGE_80GB_ONLY {
                    job.gpu_types = big_memory.clone();
                }
            } else {
                job.name = format!("train-{i}").into();
                job.gpus = PHILLY_GPU_MIX[rng.weighted_index(&mix_weights)].0;
                let class = rng.uniform();
                job.model = if job.gpus >= 4 && class < 0.4 {
                    pick(&mut rng, LARGE)
                } else if class < 0.55 {
                    pick(&mut rng, IMAGE)
                } else if class < 0.85 {
                    pick(&mut rng, LANGUAGE)
                } else {
                    pick(&mut rng, OTHER)
                }
                .to_string();
                // GPU types: LLM-sized models need 80 GB; some teams pin an old image to V100.
                let types = rng.uniform();
                if job.model == "llama2-7b" || types < 0.10 {
                    job.gpu_types = big_memory.clone();
                } else if types < 0.15 {
                    job.gpu_types = vec![v100];
                }
                // CPU and memory: image pipelines decode on the host (Synergy's point): some
                // want more than a GPU's share of the smallest nodes; others state a modest
                // demand every node meets.
                let host = rng.uniform();
                let g = u64::from(job.gpus);
                if host < 0.15 && job.gpu_types != [v100] {
                    job.cpu = Some(MilliCpu::from_cores(16 * g));
                    job.memory = Some(Bytes::from_gib(64 * g));
                } else if host < 0.35 {
                    job.cpu = Some(MilliCpu::from_cores(4 * g));
                    job.memory = Some(Bytes::from_gib(32 * g));
                }
            }
            job.iterations = (runtime.ceil() as u64).max(1);
            jobs.push(job);
        }
        let services = if self.services {
            self.services(&mut rng, a100, h100)?
        } else {
            Vec::new()
        };
        let workload = Workload::with_services(jobs, services);
        workload.check_services().map_err(|e| e.to_string())?;
        Ok(workload)
    }

    /// The three services, all live from 0 to [`MixedWorkload::service_secs`].
    fn services(
        &self,
        rng: &mut SimRng,
        a100: GpuModelId,
        h100: GpuModelId,
    ) -> Result<Vec<InferenceService>, String> {
        let k = self.service_load;
        if !(k.is_finite() && k >= 0.0) {
            return Err(format!("service load {k}: must be a non-negative number"));
        }
        let secs = self.service_secs.max(1);
        let end = SimTime::from_secs(secs);
        // One compressed day: the rate follows a sinusoid from a night trough (a quarter of
        // the peak) to a midday peak over the services' lifetime.
        let diurnal = |peak: f64, t: u64| {
            let phase = t as f64 / secs as f64;
            let day = 0.5 - 0.5 * (2.0 * std::f64::consts::PI * phase).cos();
            peak * (0.25 + 0.75 * day)
        };
        let quota = |model: DiluModel| -> Result<(u32, u16), String> {
            let table = model.table().map_err(|e| e.to_string())?;
            let p = hybrid_growth_search(&table, model.slo_s()).map_err(|e| e.to_string())?;
            Ok((p.batch, (p.share_pct * 10).min(1000) as u16))
        };
        let quota_service =
            |name: &str, model: DiluModel, arrivals: ArrivalProcess, mem_gib: u64| {
                let (batch, req) = quota(model)?;
                let mut s = InferenceService::simple(name, SimTime::ZERO, end, 0.0);
                s.model = model.name().to_string();
                s.tenant = "serving".into();
                s.slo = SimDuration::from_secs_f64_ceil(model.slo_s());
                s.max_batch = batch;
                s.cold_start = SimDuration::from_secs(2);
                s.instance.gpu_memory = Bytes::from_gib(mem_gib);
                s.instance.cpu = MilliCpu::from_cores(2);
                s.instance.memory = Bytes::from_gib(8);
                s.instance.gpu = GpuDemand::Quota {
                    sm_request: req,
                    sm_limit: (u32::from(req) + crate::dilu::policy::TRAINING_HEADROOM).min(1000)
                        as u16,
                };
                s.arrivals = arrivals;
                Ok::<_, String>(s)
            };
        // Search: BERT-base, diurnal.
        let bert_rates: Vec<f64> = (0..secs).map(|t| diurnal(6.0 * k, t)).collect();
        let bert = quota_service(
            "search-bert",
            DiluModel::BertBase,
            ArrivalProcess::RateSeries { rates: bert_rates },
            4,
        )?;
        // Moderation: RoBERTa-large, bursty Gamma arrivals.
        let roberta = quota_service(
            "moderation-roberta",
            DiluModel::RobertaLarge,
            ArrivalProcess::Gamma {
                rate: 1.5 * k,
                cv: 3.0,
            },
            6,
        )?;
        // Chat: LLaMA2-7B on whole 80 GB GPUs, diurnal with bursts (a few minutes at 3x).
        let mut chat_rates: Vec<f64> = (0..secs).map(|t| diurnal(1.2 * k, t)).collect();
        let bursts = (secs / 3600).max(1) * 2;
        for _ in 0..bursts {
            let at = rng.below(secs) as usize;
            let len = 120 + rng.below(480) as usize;
            for r in chat_rates.iter_mut().skip(at).take(len) {
                *r *= 3.0;
            }
        }
        let mut chat = InferenceService::simple("chat-llama2", SimTime::ZERO, end, 0.0);
        chat.model = DiluModel::Llama2_7b.name().to_string();
        chat.tenant = "serving".into();
        chat.slo = SimDuration::from_secs_f64_ceil(DiluModel::Llama2_7b.slo_s());
        chat.max_batch = 8;
        chat.cold_start = SimDuration::from_secs(10);
        chat.instance.gpu_memory = Bytes::from_gib(16);
        chat.instance.cpu = MilliCpu::from_cores(4);
        chat.instance.memory = Bytes::from_gib(32);
        chat.gpu_types = vec![a100, h100];
        chat.arrivals = ArrivalProcess::RateSeries { rates: chat_rates };
        Ok(vec![bert, roberta, chat])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_model::models::ModelCatalog;
    use tessera_model::{Cluster, GpuDemand};

    fn cluster() -> Cluster {
        Cluster::from_yaml(&super::super::world::cluster_yaml(), &GpuCatalog::builtin()).unwrap()
    }

    #[test]
    fn the_cluster_has_four_types_half_of_them_mig() {
        let c = cluster();
        assert_eq!(c.totals().0, 96);
        let mut types: Vec<&str> = c
            .groups
            .iter()
            .map(|g| c.catalog.get(g.gpu).name.as_str())
            .collect();
        types.dedup();
        assert_eq!(types, ["A100-80GB", "H100-80GB", "V100-32GB", "A10"]);
        let mig: u64 = c
            .groups
            .iter()
            .filter(|g| c.catalog.mig_geometry(g.gpu).is_some())
            .map(|g| g.total_gpus())
            .sum();
        assert_eq!(mig, 48);
    }

    #[test]
    fn seeded_and_every_job_can_run_as_asked() {
        let w = MixedWorkload::default().generate().unwrap();
        assert_eq!(w, MixedWorkload::default().generate().unwrap());
        let other = MixedWorkload {
            seed: 2,
            ..MixedWorkload::default()
        }
        .generate()
        .unwrap();
        assert_ne!(w.jobs()[..20], other.jobs()[..20]);
        let c = cluster();
        let models = ModelCatalog::builtin();
        let (mut small, mut multi, mut typed, mut host) = (0, 0, 0, 0);
        for j in w.jobs() {
            assert!(models.get(&j.model).is_some(), "{}: {}", j.name, j.model);
            let allowed: Vec<_> = c
                .nodes
                .iter()
                .filter(|n| j.gpu_types.is_empty() || j.gpu_types.contains(&n.gpu))
                .collect();
            let gpus: u64 = allowed.iter().map(|n| u64::from(n.gpus)).sum();
            assert!(gpus >= u64::from(j.gpus), "{}", j.name);
            if j.gpus <= 8 {
                // One node of its types holds it, CPU and memory included.
                assert!(
                    allowed.iter().any(|n| n.gpus >= j.gpus
                        && j.cpu.is_none_or(|x| x <= n.cpu)
                        && j.memory.is_none_or(|x| x <= n.memory)),
                    "{}",
                    j.name
                );
            } else {
                multi += 1;
            }
            if let Some(m) = &j.mig {
                let types: Vec<_> = c.groups.iter().map(|g| g.gpu).collect();
                let mig_types: Vec<_> = types
                    .into_iter()
                    .filter(|t| c.catalog.mig_geometry(*t).is_some())
                    .collect();
                c.catalog.check_mig_request(m, &mig_types).unwrap();
            }
            small += usize::from(j.mig.is_some() || j.gpu_share.is_some());
            typed += usize::from(!j.gpu_types.is_empty());
            host += usize::from(j.cpu.is_some());
            assert!(j.duration.as_secs_f64() <= 8.0 * 3600.0);
        }
        let n = w.len();
        assert_eq!(n, 240);
        assert!((0.18..0.32).contains(&(small as f64 / n as f64)), "{small}");
        assert!(multi >= 2, "{multi}");
        assert!(typed > n / 20 && host > n / 10, "{typed} {host}");
        // Three services: two quotas (one diurnal series, one Gamma), one whole-GPU series.
        let s = w.services();
        assert_eq!(s.len(), 3);
        let quotas = s
            .iter()
            .filter(|s| matches!(s.instance.gpu, GpuDemand::Quota { .. }))
            .count();
        assert_eq!(quotas, 2);
        assert!(s.iter().all(|s| s.unschedulable_on(&c).is_none()));
        // The diurnal series peaks mid-life at four times its start.
        let ArrivalProcess::RateSeries { rates } = &s[0].arrivals else {
            panic!("{:?}", s[0].arrivals)
        };
        let (first, mid) = (rates[0], rates[rates.len() / 2]);
        assert!((mid / first - 4.0).abs() < 0.01, "{first} {mid}");
        // A few hundred thousand requests at most: the default run stays fast.
        let expected: f64 = s.iter().map(|s| s.expected_requests()).sum();
        assert!(expected < 150_000.0, "{expected}");
    }

    #[test]
    fn bad_parameters_are_errors() {
        for w in [
            MixedWorkload {
                jobs_per_hour: 0.0,
                ..MixedWorkload::default()
            },
            MixedWorkload {
                small_share: 0.9,
                multi_node_share: 0.2,
                ..MixedWorkload::default()
            },
            MixedWorkload {
                max_duration_s: f64::NAN,
                ..MixedWorkload::default()
            },
            MixedWorkload {
                service_load: -1.0,
                ..MixedWorkload::default()
            },
        ] {
            assert!(w.generate().is_err(), "{w:?}");
        }
    }
}
