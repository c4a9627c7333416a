//! Workload specs with inference services (`kind: Workload`, YAML or JSON), as documented in
//! `docs/trace-format.md` ("Workload specs with services").
//!
//! ```
//! use tessera_model::GpuCatalog;
//! let yaml = "apiVersion: tessera/v1\nkind: Workload\nspec:\n  services:\n    - name: bert\n      endSeconds: 60\n      sloMilliseconds: 50\n      resources: {cpu: '1', memory: 4Gi, gpuMemory: 2Gi, smRequest: 0.3}\n      arrivals: {poisson: {rate: 3}}\n";
//! let w = tessera_trace::parse_workload_spec(yaml, &GpuCatalog::builtin()).unwrap();
//! assert_eq!(w.services()[0].instance.sm_request(), 300);
//! ```

use serde::Deserialize;
use tessera_model::{
    error::locate_field, ArrivalProcess, Bytes, GpuCatalog, GpuDemand, InferenceService,
    InstanceDemand, MigRequest, MilliCpu, ServiceId, SimDuration, SimTime, SpecError, TrainingJob,
    Workload, MIG_RESOURCE_PREFIX,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Doc {
    #[allow(dead_code)]
    api_version: Option<String>,
    kind: String,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_norway::Value>,
    spec: Spec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    jobs: Vec<JobSpec>,
    #[serde(default)]
    services: Vec<ServiceSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JobSpec {
    name: String,
    #[serde(default)]
    submit_seconds: f64,
    gpus: u32,
    duration_seconds: f64,
    #[serde(default)]
    model: String,
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    gpu_types: Vec<String>,
    #[serde(default)]
    resources: Option<JobResourcesSpec>,
}

/// Kubernetes-style extended resources of a training job: `limits: {nvidia.com/mig-3g.20gb:
/// 1}` (or `nvidia.com/mig-any: 1`, the scheduler chooses the slice).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobResourcesSpec {
    #[serde(default)]
    limits: std::collections::BTreeMap<String, u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceSpec {
    name: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    start_seconds: f64,
    end_seconds: Option<f64>,
    slo_milliseconds: f64,
    #[serde(default = "one")]
    max_batch: u32,
    #[serde(default)]
    cold_start_seconds: f64,
    #[serde(default)]
    gpu_types: Vec<String>,
    resources: ResourcesSpec,
    arrivals: ArrivalsSpec,
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResourcesSpec {
    cpu: String,
    memory: String,
    gpu_memory: String,
    sm_request: Option<f64>,
    sm_limit: Option<f64>,
}

/// Exactly one of the four processes (a struct rather than an enum: YAML readers want tags
/// for enums, and a spec writer should not need them).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ArrivalsSpec {
    poisson: Option<RateSpec>,
    gamma: Option<GammaSpec>,
    rate_series: Option<Vec<f64>>,
    timestamps: Option<Vec<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateSpec {
    rate: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GammaSpec {
    rate: f64,
    cv: f64,
}

fn invalid(field: String, reason: impl Into<String>) -> SpecError {
    SpecError::Invalid {
        line: None,
        field,
        reason: reason.into(),
    }
}

fn seconds(field: String, s: f64) -> Result<SimTime, SpecError> {
    SimDuration::checked_from_secs_f64(s)
        .map(|d| SimTime::ZERO + d)
        .map_err(|e| invalid(field, e.to_string()))
}

fn duration(field: String, s: f64) -> Result<SimDuration, SpecError> {
    SimDuration::checked_from_secs_f64(s).map_err(|e| invalid(field, e.to_string()))
}

fn permille(field: String, f: f64) -> Result<u16, SpecError> {
    if !(f.is_finite() && f > 0.0 && f <= 1.0) {
        return Err(invalid(field, format!("{f} is not a fraction in (0, 1]")));
    }
    Ok(((f * 1000.0).round() as u16).max(1))
}

/// Parses a `kind: Workload` spec (YAML, or JSON, which YAML reads too): training jobs with
/// the canonical fields and inference services with Kubernetes quantities. Errors name the
/// field and, where it can be found, its line; nothing panics on any input.
pub fn parse_workload_spec(text: &str, catalog: &GpuCatalog) -> Result<Workload, SpecError> {
    parse_inner(text, catalog).map_err(|e| match e {
        SpecError::Invalid {
            line: None,
            field,
            reason,
        } => SpecError::Invalid {
            line: locate(text, &field),
            field,
            reason,
        },
        other => other,
    })
}

/// The line of `field`, or of its nearest enclosing field that can be found (an item of a
/// flow-style list has no line of its own).
fn locate(text: &str, field: &str) -> Option<usize> {
    let mut path = field;
    loop {
        if let Some(line) = locate_field(text, path) {
            return Some(line);
        }
        let cut = path.rfind(['.', '['])?;
        path = &path[..cut];
    }
}

fn parse_inner(text: &str, catalog: &GpuCatalog) -> Result<Workload, SpecError> {
    let doc: Doc = serde_norway::from_str(text).map_err(|e| {
        let loc = e.location();
        SpecError::Syntax {
            line: loc.as_ref().map(|l| l.line()),
            column: loc.as_ref().map(|l| l.column()),
            message: e.to_string(),
        }
    })?;
    if doc.kind != "Workload" {
        return Err(invalid(
            "kind".into(),
            format!("expected Workload, got {:?}", doc.kind),
        ));
    }
    let mut jobs = Vec::with_capacity(doc.spec.jobs.len());
    for (i, j) in doc.spec.jobs.into_iter().enumerate() {
        let f = |name: &str| format!("spec.jobs[{i}].{name}");
        if j.gpus == 0 {
            return Err(invalid(f("gpus"), "must be at least 1"));
        }
        let submit = seconds(f("submitSeconds"), j.submit_seconds)?;
        let dur = duration(f("durationSeconds"), j.duration_seconds)?;
        if dur.is_zero() {
            return Err(invalid(f("durationSeconds"), "must be positive"));
        }
        let mut job = TrainingJob::simple(i as u32, submit, j.gpus, dur);
        job.gpu_types = gpu_types(&j.gpu_types, catalog, &f)?;
        job.mig = job_mig(&j, &job.gpu_types, catalog, &f)?;
        job.name = j.name.into();
        job.model = j.model;
        job.tenant = j.tenant;
        jobs.push(job);
    }
    let mut services = Vec::with_capacity(doc.spec.services.len());
    for (i, s) in doc.spec.services.into_iter().enumerate() {
        services.push(service(i, s, catalog)?);
    }
    Ok(Workload::with_services(jobs, services))
}

fn gpu_types(
    names: &[String],
    catalog: &GpuCatalog,
    f: &dyn Fn(&str) -> String,
) -> Result<Vec<tessera_model::GpuModelId>, SpecError> {
    let mut ids = Vec::with_capacity(names.len());
    for (k, name) in names.iter().enumerate() {
        let id = catalog.find(name).ok_or_else(|| {
            invalid(
                f(&format!("gpuTypes[{k}]")),
                format!("unknown GPU model {name:?}"),
            )
        })?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// The job's MIG request from `resources.limits`: at most one `nvidia.com/mig-…` key, count
/// 1, on a one-GPU job, valid for the catalog and the job's GPU types.
fn job_mig(
    j: &JobSpec,
    types: &[tessera_model::GpuModelId],
    catalog: &GpuCatalog,
    f: &dyn Fn(&str) -> String,
) -> Result<Option<MigRequest>, SpecError> {
    let Some(r) = &j.resources else {
        return Ok(None);
    };
    let mut found: Option<MigRequest> = None;
    for (key, &count) in &r.limits {
        let field = f(&format!("resources.limits.{key}"));
        if !key.to_ascii_lowercase().starts_with(MIG_RESOURCE_PREFIX) {
            return Err(invalid(
                field,
                format!(
                    "unknown resource {key:?} (accepted: {MIG_RESOURCE_PREFIX}<profile>, \
                     {MIG_RESOURCE_PREFIX}any)"
                ),
            ));
        }
        let req = MigRequest::parse(key).map_err(|e| invalid(field.clone(), e))?;
        if count != 1 {
            return Err(invalid(
                field,
                format!("a job runs on one MIG instance: the count must be 1, got {count}"),
            ));
        }
        if found.is_some() {
            return Err(invalid(field, "give one MIG request per job"));
        }
        if j.gpus != 1 {
            return Err(invalid(
                f("gpus"),
                format!(
                    "a MIG instance is part of one GPU: needs gpus 1, got {}",
                    j.gpus
                ),
            ));
        }
        catalog
            .check_mig_request(&req, types)
            .map_err(|e| invalid(field, e))?;
        found = Some(req);
    }
    Ok(found)
}

fn service(i: usize, s: ServiceSpec, catalog: &GpuCatalog) -> Result<InferenceService, SpecError> {
    let f = |name: &str| format!("spec.services[{i}].{name}");
    let start = seconds(f("startSeconds"), s.start_seconds)?;
    let a = s.arrivals;
    let given = [
        a.poisson.is_some(),
        a.gamma.is_some(),
        a.rate_series.is_some(),
        a.timestamps.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(invalid(
            f("arrivals"),
            "give exactly one of poisson, gamma, rateSeries, timestamps",
        ));
    }
    let arrivals = if let Some(p) = a.poisson {
        ArrivalProcess::Poisson { rate: p.rate }
    } else if let Some(g) = a.gamma {
        ArrivalProcess::Gamma {
            rate: g.rate,
            cv: g.cv,
        }
    } else if let Some(rates) = a.rate_series {
        ArrivalProcess::RateSeries { rates }
    } else {
        let ts = a.timestamps.unwrap_or_default();
        let mut offsets = Vec::with_capacity(ts.len());
        for (k, t) in ts.into_iter().enumerate() {
            offsets.push(duration(f(&format!("arrivals.timestamps[{k}]")), t)?);
        }
        ArrivalProcess::Timestamps { offsets }
    };
    // Without an explicit end, series and timestamp lists end with their data; a rate needs it.
    let end = match (s.end_seconds, &arrivals) {
        (Some(e), _) => seconds(f("endSeconds"), e)?,
        (None, ArrivalProcess::RateSeries { rates }) => {
            start + SimDuration::from_secs(rates.len() as u64)
        }
        (None, ArrivalProcess::Timestamps { offsets }) => {
            start + offsets.last().copied().unwrap_or_default() + SimDuration::from_micros(1)
        }
        (None, _) => {
            return Err(invalid(
                f("endSeconds"),
                "required for poisson and gamma arrivals",
            ))
        }
    };
    let r = &s.resources;
    let quantity = |name: &str, v: &str| -> Result<u64, SpecError> {
        let parsed = if name == "cpu" {
            v.parse::<MilliCpu>().map(|c| c.0)
        } else {
            v.parse::<Bytes>().map(|b| b.0)
        };
        parsed.map_err(|e| invalid(f(&format!("resources.{name}")), e.to_string()))
    };
    let gpu = match (r.sm_request, r.sm_limit) {
        (None, None) => GpuDemand::Whole,
        (None, Some(_)) => {
            return Err(invalid(f("resources.smLimit"), "needs smRequest beside it"))
        }
        (Some(req), lim) => {
            let sm_request = permille(f("resources.smRequest"), req)?;
            let sm_limit = permille(f("resources.smLimit"), lim.unwrap_or(req))?;
            GpuDemand::Quota {
                sm_request,
                sm_limit,
            }
        }
    };
    let gpu_types = self::gpu_types(&s.gpu_types, catalog, &f)?;
    if !(s.slo_milliseconds.is_finite() && s.slo_milliseconds > 0.0) {
        return Err(invalid(f("sloMilliseconds"), "must be a positive number"));
    }
    let svc = InferenceService {
        id: ServiceId(i as u32),
        name: s.name,
        model: s.model,
        tenant: s.tenant,
        start,
        end,
        slo: duration(f("sloMilliseconds"), s.slo_milliseconds / 1000.0)?,
        max_batch: s.max_batch,
        instance: InstanceDemand {
            cpu: MilliCpu(quantity("cpu", &r.cpu)?),
            memory: Bytes(quantity("memory", &r.memory)?),
            gpu,
            gpu_memory: Bytes(quantity("gpuMemory", &r.gpu_memory)?),
        },
        cold_start: duration(f("coldStartSeconds"), s.cold_start_seconds)?,
        gpu_types,
        arrivals,
    };
    // The model's checks use its own field names; map the ones a spec user sees.
    svc.check(&format!("spec.services[{i}]"))
        .map_err(|e| match e {
            SpecError::Invalid {
                line,
                field,
                reason,
            } => SpecError::Invalid {
                line,
                field: field
                    .replace(".rate_series", ".rateSeries")
                    .replace(".max_batch", ".maxBatch")
                    .replace(".end", ".endSeconds")
                    .replace(".instance.gpu", ".resources.smRequest"),
                reason,
            },
            other => other,
        })?;
    Ok(svc)
}
