//! Workload specs with inference services (`kind: Workload`, YAML or JSON), as documented in
//! `docs/trace-format.md` ("Workload specs with services").
//!
//! ```
//! use tessera_model::GpuCatalog;
//! let yaml = "apiVersion: tessera/v1\nkind: Workload\nspec:\n  services:\n    - name: bert\n      endSeconds: 60\n      sloMilliseconds: 50\n      resources: {cpu: '1', memory: 4Gi, gpuMemory: 2Gi, smRequest: 0.3}\n      arrivals: {poisson: {rate: 3}}\n";
//! let w = tessera_trace::parse_workload_spec(yaml, &GpuCatalog::builtin()).unwrap();
//! assert_eq!(w.services()[0].instance.sm_request(), 300);
//! ```

use serde::{Deserialize, Serialize};
use tessera_model::{
    error::locate_field, ArrivalProcess, Bytes, GpuCatalog, GpuDemand, GpuShareRequest,
    InferenceService, InstanceDemand, MigRequest, MilliCpu, ServiceId, SimDuration, SimTime,
    SpecError, TrainingJob, Workload, MIG_RESOURCE_PREFIX,
};

// The same structs read and write a spec, so that what the writer emits is what the reader
// takes (`write_workload_spec`, checked by a round-trip test).

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Doc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metadata: Option<serde_norway::Value>,
    spec: Spec,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    jobs: Vec<JobSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    services: Vec<ServiceSpec>,
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_i32(x: &i32) -> bool {
    *x == 0
}

/// A training job: the canonical CSV's columns, camel-cased (`batch_size` → `batchSize`),
/// with CPU, memory, a GPU share and a MIG instance under `resources` as services say them.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JobSpec {
    name: String,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    submit_seconds: f64,
    gpus: u64,
    duration_seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iterations: Option<u64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    batch_size: Option<u64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    tenant: String,
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    priority: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    gpu_types: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resources: Option<JobResourcesSpec>,
}

/// A training job's resources, all optional: `cpu` and `memory` for the whole job (Kubernetes
/// quantities, as the CSV's columns; absent = a share in proportion to GPUs), `smRequest` a
/// fraction of one GPU (the CSV's `gpu_share` / 1000) with `gpuMemory` the device memory it
/// needs, and `limits` with one MIG instance (`nvidia.com/mig-3g.20gb: 1`, or
/// `nvidia.com/mig-any: 1`, the scheduler chooses the slice).
#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct JobResourcesSpec {
    #[serde(
        default,
        deserialize_with = "opt_quantity",
        skip_serializing_if = "Option::is_none"
    )]
    cpu: Option<String>,
    #[serde(
        default,
        deserialize_with = "opt_quantity",
        skip_serializing_if = "Option::is_none"
    )]
    memory: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sm_request: Option<f64>,
    #[serde(
        default,
        deserialize_with = "opt_quantity",
        skip_serializing_if = "Option::is_none"
    )]
    gpu_memory: Option<String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    limits: std::collections::BTreeMap<String, u64>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceSpec {
    name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    model: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    tenant: String,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    start_seconds: f64,
    end_seconds: Option<f64>,
    slo_milliseconds: f64,
    #[serde(default = "one")]
    max_batch: u32,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    cold_start_seconds: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    gpu_types: Vec<String>,
    resources: ResourcesSpec,
    arrivals: ArrivalsSpec,
}

fn one() -> u32 {
    1
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResourcesSpec {
    #[serde(deserialize_with = "quantity")]
    cpu: String,
    #[serde(deserialize_with = "quantity")]
    memory: String,
    #[serde(deserialize_with = "quantity")]
    gpu_memory: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sm_request: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sm_limit: Option<f64>,
}

/// A Kubernetes quantity as text, from a YAML string or number (`cpu: 8`, `cpu: 500m`,
/// `memory: 16Gi`); parsed and checked where its field is known.
fn quantity<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a quantity such as 8, 500m or 16Gi")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(V)
}

fn opt_quantity<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    quantity(d).map(Some)
}

/// Exactly one of the four processes (a struct rather than an enum: YAML readers want tags
/// for enums, and a spec writer should not need them).
#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ArrivalsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    poisson: Option<RateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gamma: Option<GammaSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate_series: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timestamps: Option<Vec<f64>>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RateSpec {
    rate: f64,
}

#[derive(Deserialize, Serialize)]
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
    parse_workload_spec_with_lines(text, catalog).map(|(w, _)| w)
}

/// [`parse_workload_spec`], with the 1-based line of each job (aligned with
/// `workload.jobs()`, found as error messages find fields: best effort, 0 when not found), for
/// messages about a job after parsing (`FILE:LINE: …`).
pub fn parse_workload_spec_with_lines(
    text: &str,
    catalog: &GpuCatalog,
) -> Result<(Workload, Vec<u64>), SpecError> {
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

fn parse_inner(text: &str, catalog: &GpuCatalog) -> Result<(Workload, Vec<u64>), SpecError> {
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
        let line = locate_field(text, &format!("spec.jobs[{i}]")).unwrap_or(0) as u64;
        jobs.push((job(i, j, catalog)?, line));
    }
    // Sorted as `Workload::new` sorts them (stably by submit time), lines alongside.
    let jobs = tessera_model::sort_stably_by_key(jobs, |(j, _)| j.submit.as_micros());
    let lines = jobs.iter().map(|(_, l)| *l).collect();
    let jobs = jobs.into_iter().map(|(j, _)| j).collect();
    let mut services = Vec::with_capacity(doc.spec.services.len());
    for (i, s) in doc.spec.services.into_iter().enumerate() {
        services.push(service(i, s, catalog)?);
    }
    Ok((Workload::with_services(jobs, services), lines))
}

/// Most GPUs one job may ask for (as the CSV readers).
const MAX_JOB_GPUS: u64 = crate::MAX_GPUS_PER_JOB;

fn job(i: usize, j: JobSpec, catalog: &GpuCatalog) -> Result<TrainingJob, SpecError> {
    let f = |name: &str| format!("spec.jobs[{i}].{name}");
    if !(1..=MAX_JOB_GPUS).contains(&j.gpus) {
        return Err(invalid(
            f("gpus"),
            format!("{} is not a GPU count in 1..={MAX_JOB_GPUS}", j.gpus),
        ));
    }
    let gpus = j.gpus as u32;
    let submit = seconds(f("submitSeconds"), j.submit_seconds)?;
    let dur = duration(f("durationSeconds"), j.duration_seconds)?;
    if dur.is_zero() {
        return Err(invalid(f("durationSeconds"), "must be positive"));
    }
    let mut job = TrainingJob::simple(i as u32, submit, gpus, dur);
    job.iterations = match j.iterations {
        Some(0) => return Err(invalid(f("iterations"), "must be at least 1")),
        Some(n) => n,
        // One per second of run time, rounded up, as the CSV's empty column.
        None => dur.as_micros().div_ceil(1_000_000).max(1),
    };
    job.batch_size = match j.batch_size {
        None => None,
        Some(b) if (1..=u64::from(u32::MAX)).contains(&b) => Some(b as u32),
        Some(b) => {
            return Err(invalid(
                f("batchSize"),
                format!("{b} is not a batch size in 1..={}", u32::MAX),
            ))
        }
    };
    job.gpu_types = gpu_types(&j.gpu_types, catalog, &f)?;
    job.mig = job_mig(&j, &job.gpu_types, catalog, &f)?;
    if let Some(r) = &j.resources {
        let quantity_field = |name: &str| f(&format!("resources.{name}"));
        job.cpu = r
            .cpu
            .as_deref()
            .map(|v| parse_cpu(v).map_err(|e| invalid(quantity_field("cpu"), e)))
            .transpose()?;
        job.memory = r
            .memory
            .as_deref()
            .map(|v| parse_bytes(v).map_err(|e| invalid(quantity_field("memory"), e)))
            .transpose()?;
        job.gpu_share = job_share(r, gpus, job.mig.is_some(), &f)?;
    }
    job.name = j.name.into();
    job.model = j.model;
    job.tenant = j.tenant;
    job.priority = j.priority;
    Ok(job)
}

/// CPU as a Kubernetes quantity; whole cores and millicores exactly (the general parser goes
/// through f64).
fn parse_cpu(v: &str) -> Result<MilliCpu, String> {
    let t = v.trim();
    let plain = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    let exact = match t.strip_suffix('m') {
        Some(milli) => plain(milli),
        None => plain(t).and_then(|c| c.checked_mul(1000)),
    };
    match exact {
        Some(m) => Ok(MilliCpu(m)),
        None => t.parse::<MilliCpu>().map_err(|e| e.to_string()),
    }
}

/// Memory as a Kubernetes quantity; plain bytes exactly.
fn parse_bytes(v: &str) -> Result<Bytes, String> {
    let t = v.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(b) = t.parse::<u64>() {
            return Ok(Bytes(b));
        }
    }
    t.parse::<Bytes>().map_err(|e| e.to_string())
}

/// A job's share of one GPU: `smRequest` in (0, 1) as permille 1..=999 (the CSV's
/// `gpu_share`), with `gpuMemory` beside it; only for one-GPU jobs without a MIG instance.
fn job_share(
    r: &JobResourcesSpec,
    gpus: u32,
    mig: bool,
    f: &dyn Fn(&str) -> String,
) -> Result<Option<GpuShareRequest>, SpecError> {
    let Some(req) = r.sm_request else {
        if r.gpu_memory.is_some() {
            return Err(invalid(
                f("resources.gpuMemory"),
                "a job's gpuMemory goes with smRequest (a share of one GPU)",
            ));
        }
        return Ok(None);
    };
    let field = f("resources.smRequest");
    if !(req.is_finite() && req > 0.0 && req < 1.0) {
        return Err(invalid(
            field,
            format!("{req} is not a fraction of one GPU in (0, 1) (a whole GPU: leave it out)"),
        ));
    }
    let permille = ((req * 1000.0).round() as u16).clamp(1, 999);
    if gpus != 1 {
        return Err(invalid(
            field,
            format!("a share of one GPU needs gpus 1, this job asks for {gpus}"),
        ));
    }
    if mig {
        return Err(invalid(
            field,
            "give either smRequest or a MIG limit, not both",
        ));
    }
    let memory = r
        .gpu_memory
        .as_deref()
        .map(|v| parse_bytes(v).map_err(|e| invalid(f("resources.gpuMemory"), e)))
        .transpose()?;
    Ok(Some(GpuShareRequest {
        sm_permille: permille,
        memory,
    }))
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

/// How [`write_workload_spec`] writes a spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecFormat {
    /// YAML.
    Yaml,
    /// JSON (pretty-printed).
    Json,
}

/// Problems writing a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("writing the workload spec: {0}")]
pub struct SpecWriteError(String);

fn secs(micros: u64) -> f64 {
    micros as f64 / 1e6
}

/// Writes `workload` (training jobs and inference services) as a `kind: Workload` spec that
/// [`parse_workload_spec`] reads back into an equal workload: every job field the canonical
/// CSV has, and every service field.
pub fn write_workload_spec(
    workload: &Workload,
    catalog: &GpuCatalog,
    format: SpecFormat,
) -> Result<String, SpecWriteError> {
    let names = |ids: &[tessera_model::GpuModelId]| -> Vec<String> {
        ids.iter().map(|id| catalog.get(*id).name.clone()).collect()
    };
    let jobs = workload
        .jobs()
        .iter()
        .map(|j| {
            let mut r = JobResourcesSpec {
                cpu: j.cpu.map(|c| c.to_string()),
                memory: j.memory.map(|m| m.to_string()),
                ..JobResourcesSpec::default()
            };
            if let Some(s) = j.gpu_share {
                r.sm_request = Some(f64::from(s.sm_permille) / 1000.0);
                r.gpu_memory = s.memory.map(|m| m.to_string());
            }
            if let Some(m) = &j.mig {
                r.limits.insert(m.to_string(), 1);
            }
            let empty = r.cpu.is_none()
                && r.memory.is_none()
                && r.sm_request.is_none()
                && r.limits.is_empty();
            JobSpec {
                name: j.name.to_string(),
                submit_seconds: secs(j.submit.as_micros()),
                gpus: u64::from(j.gpus),
                duration_seconds: secs(j.duration.as_micros()),
                iterations: Some(j.iterations),
                model: j.model.clone(),
                batch_size: j.batch_size.map(u64::from),
                tenant: j.tenant.clone(),
                priority: j.priority,
                gpu_types: names(&j.gpu_types),
                resources: (!empty).then_some(r),
            }
        })
        .collect();
    let services = workload
        .services()
        .iter()
        .map(|s| {
            let (sm_request, sm_limit) = match s.instance.gpu {
                GpuDemand::Whole => (None, None),
                GpuDemand::Quota {
                    sm_request,
                    sm_limit,
                } => (
                    Some(f64::from(sm_request) / 1000.0),
                    Some(f64::from(sm_limit) / 1000.0),
                ),
            };
            let mut arrivals = ArrivalsSpec::default();
            match &s.arrivals {
                ArrivalProcess::Poisson { rate } => {
                    arrivals.poisson = Some(RateSpec { rate: *rate })
                }
                ArrivalProcess::Gamma { rate, cv } => {
                    arrivals.gamma = Some(GammaSpec {
                        rate: *rate,
                        cv: *cv,
                    })
                }
                ArrivalProcess::RateSeries { rates } => arrivals.rate_series = Some(rates.clone()),
                ArrivalProcess::Timestamps { offsets } => {
                    arrivals.timestamps =
                        Some(offsets.iter().map(|o| secs(o.as_micros())).collect())
                }
            }
            ServiceSpec {
                name: s.name.clone(),
                model: s.model.clone(),
                tenant: s.tenant.clone(),
                start_seconds: secs(s.start.as_micros()),
                end_seconds: Some(secs(s.end.as_micros())),
                slo_milliseconds: s.slo.as_micros() as f64 / 1000.0,
                max_batch: s.max_batch,
                cold_start_seconds: secs(s.cold_start.as_micros()),
                gpu_types: names(&s.gpu_types),
                resources: ResourcesSpec {
                    cpu: s.instance.cpu.to_string(),
                    memory: s.instance.memory.to_string(),
                    gpu_memory: s.instance.gpu_memory.to_string(),
                    sm_request,
                    sm_limit,
                },
                arrivals,
            }
        })
        .collect();
    let doc = Doc {
        api_version: Some("tessera/v1".into()),
        kind: "Workload".into(),
        metadata: None,
        spec: Spec { jobs, services },
    };
    match format {
        SpecFormat::Yaml => {
            serde_norway::to_string(&doc).map_err(|e| SpecWriteError(e.to_string()))
        }
        SpecFormat::Json => {
            serde_json::to_string_pretty(&doc).map_err(|e| SpecWriteError(e.to_string()))
        }
    }
}
