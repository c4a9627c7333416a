//! Inference services in real mode: the submission format, the API views and the store rows.
//!
//! A service is submitted as a `kind: Workload` document holding exactly one service, read by
//! [`tessera_trace::parse_workload_spec`] (the schema the simulator reads, unchanged); what the
//! daemon runs for each instance (`command` or `script`, `env`) sits in the document's
//! `metadata`, which that parser leaves alone. The scheduling logic is in
//! `core/services.rs`.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use tessera_model::{GpuCatalog, InferenceService};

use crate::backend::PlacedShare;
use crate::error::{ApiError, DaemonError};
use crate::spec::{check_shape, JobSpec, MAX_SPEC_BYTES};

/// The store's service tables (created beside the job tables; an older store gains them).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS services (
    id INTEGER PRIMARY KEY,
    tenant TEXT NOT NULL, name TEXT NOT NULL,
    body TEXT NOT NULL,
    submit_us INTEGER NOT NULL,
    state TEXT NOT NULL,
    retired_us INTEGER,
    restarts INTEGER NOT NULL DEFAULT 0,
    message TEXT);
CREATE TABLE IF NOT EXISTS instances (
    id INTEGER PRIMARY KEY,
    service_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    placement TEXT NOT NULL,
    handle TEXT,
    state TEXT NOT NULL,
    created_us INTEGER NOT NULL,
    restarts INTEGER NOT NULL DEFAULT 0,
    token_sha256 TEXT);
CREATE INDEX IF NOT EXISTS instances_state ON instances(state);
";

/// What the daemon runs for each instance: the document's `metadata`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunSpec {
    /// Optional label (the service's name is what counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Argument vector to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Script to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// The rest of the document, read only for `metadata` (the trace parser checks the rest).
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    metadata: Option<serde_norway::Value>,
}

/// A parsed service submission.
#[derive(Clone, Debug)]
pub struct ServiceSubmission {
    /// The service as the simulator reads it (times relative to the submission).
    pub spec: InferenceService,
    /// What each instance runs.
    pub run: RunSpec,
}

/// The threads service documents were parsed on (tests: never the engine's).
#[cfg(test)]
pub(crate) static PARSE_THREADS: std::sync::Mutex<Vec<Option<String>>> =
    std::sync::Mutex::new(Vec::new());

/// Parses a service submission (YAML or JSON): size and shape limits first (as for job
/// specs), then the trace schema, then `metadata`. Errors name the field.
pub fn parse_service(text: &str, catalog: &GpuCatalog) -> Result<ServiceSubmission, ApiError> {
    #[cfg(test)]
    if let Ok(mut t) = PARSE_THREADS.lock() {
        t.push(std::thread::current().name().map(str::to_string));
    }
    if text.len() > MAX_SPEC_BYTES {
        return Err(ApiError::new(
            413,
            "body_too_large",
            format!("a service spec may be at most {MAX_SPEC_BYTES} bytes"),
        ));
    }
    check_shape(text)?;
    let workload = tessera_trace::parse_workload_spec(text, catalog)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if !workload.jobs().is_empty() {
        return Err(ApiError::bad_request(
            "spec.jobs: submit training jobs to /v1/jobs, not with a service",
        ));
    }
    let [spec] = workload.services() else {
        return Err(ApiError::bad_request(format!(
            "spec.services: exactly one service per request, got {}",
            workload.services().len()
        )));
    };
    if !crate::config::is_safe_name(&spec.name) {
        return Err(ApiError::bad_request(format!(
            "field spec.services[0].name: {:?} must be 1-63 letters, digits, '-', '_' or '.', starting with a letter or digit",
            spec.name.chars().take(80).collect::<String>()
        )));
    }
    let envelope: Envelope = serde_norway::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("malformed document: {e}")))?;
    let run: RunSpec = match envelope.metadata {
        None => RunSpec::default(),
        Some(v) => serde_norway::from_value(v)
            .map_err(|e| ApiError::bad_request(format!("field metadata: {e}")))?,
    };
    // The run part follows the job spec's rules (command or script, environment names).
    JobSpec {
        name: spec.name.clone(),
        command: run.command.clone(),
        script: run.script.clone(),
        env: run.env.clone(),
        gpus: 1,
        ..JobSpec::default()
    }
    .validate()
    .map_err(|e| ApiError::bad_request(format!("field metadata.{}", e.message)))?;
    Ok(ServiceSubmission {
        spec: spec.clone(),
        run,
    })
}

/// A service's state in the API and the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceState {
    /// Before its start (`startSeconds` after submission).
    Pending,
    /// Between its start and end; the policy keeps instances.
    Active,
    /// Past its end (`endSeconds` after submission); the policy retires its instances.
    Ended,
    /// Retired through the API: every instance stopped.
    Retired,
}

impl ServiceState {
    fn as_str(self) -> &'static str {
        match self {
            ServiceState::Pending => "pending",
            ServiceState::Active => "active",
            ServiceState::Ended => "ended",
            ServiceState::Retired => "retired",
        }
    }
}

/// An instance's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    /// Its start is decided (and durable); the backend has not answered yet.
    Starting,
    /// Running under the backend.
    Running,
    /// Scaled in or retired: stopped, or being stopped.
    Gone,
}

impl InstanceState {
    fn as_str(self) -> &'static str {
        match self {
            InstanceState::Starting => "starting",
            InstanceState::Running => "running",
            InstanceState::Gone => "gone",
        }
    }
    fn parse(s: &str) -> InstanceState {
        match s {
            "starting" => InstanceState::Starting,
            "running" => InstanceState::Running,
            _ => InstanceState::Gone,
        }
    }
}

/// A service as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceRow {
    /// Daemon service id (1, 2, …).
    pub id: i64,
    /// Owner.
    pub tenant: String,
    /// The service's name.
    pub name: String,
    /// The submitted document, as sent (parsed again at restart).
    pub body: String,
    /// Submission time, µs since the Unix epoch.
    pub submit_us: u64,
    /// Retired through the API (else its state follows the clock).
    pub retired_us: Option<u64>,
    /// Instances restarted after their process ended on its own.
    pub restarts: u32,
    /// Last noteworthy event.
    pub message: Option<String>,
}

/// An instance as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceRow {
    /// Instance id (unique in the store, never reused).
    pub id: i64,
    /// Its service.
    pub service_id: i64,
    /// Attempt (+1 at each restart).
    pub attempt: u32,
    /// What it holds.
    pub placement: Vec<PlacedShare>,
    /// The backend's run, once started.
    pub handle: Option<String>,
    /// State.
    pub state: InstanceState,
    /// When it was created (scale-out), µs since the Unix epoch.
    pub created_us: u64,
    /// Restarts after its process ended on its own.
    pub restarts: u32,
    /// SHA-256 of the current attempt's token (`TESSERA_TOKEN`: it may report its load).
    pub token_sha256: Option<String>,
}

/// What an instance reports about its requests (`POST
/// /v1/services/{id}/instances/{instance}/load`, with the instance's own `TESSERA_TOKEN`): the
/// load the policy sees in `ClusterView.services`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadReport {
    /// Requests waiting in its queue (not counting the batch it runs).
    pub queue_length: u32,
    /// Requests in the batch it runs.
    #[serde(default)]
    pub in_flight: u32,
    /// Arrivals per second over its recent window.
    #[serde(default)]
    pub requests_per_second: f64,
    /// Median latency of requests it completed recently, seconds.
    #[serde(default)]
    pub p50_latency_seconds: f64,
    /// 99th-percentile latency of requests it completed recently, seconds.
    #[serde(default)]
    pub p99_latency_seconds: f64,
    /// Requests it completed in its recent window.
    #[serde(default)]
    pub completed: u64,
    /// Of those, requests over the SLO.
    #[serde(default)]
    pub violations: u64,
}

/// Largest arrival rate an instance may report, requests per second: far above what one
/// instance serves, low enough that sums over instances and the scaling arithmetic built on
/// them stay finite and meaningful (a report of 1e308/s would leave its service never
/// scaling out).
pub const MAX_REPORTED_REQUESTS_PER_SECOND: f64 = 1e7;
/// Largest latency an instance may report, seconds (a day).
pub const MAX_REPORTED_LATENCY_SECONDS: f64 = 86_400.0;
/// Largest queue, batch or window count an instance may report.
pub const MAX_REPORTED_COUNT: u64 = 1 << 40;

impl LoadReport {
    /// Checks the numbers: finite, not negative, within the bounds above (refused, not
    /// clamped, so a broken reporter is told), violations within completions.
    pub fn validate(&self) -> Result<(), ApiError> {
        for (field, v, max) in [
            (
                "requestsPerSecond",
                self.requests_per_second,
                MAX_REPORTED_REQUESTS_PER_SECOND,
            ),
            (
                "p50LatencySeconds",
                self.p50_latency_seconds,
                MAX_REPORTED_LATENCY_SECONDS,
            ),
            (
                "p99LatencySeconds",
                self.p99_latency_seconds,
                MAX_REPORTED_LATENCY_SECONDS,
            ),
        ] {
            if !(v.is_finite() && (0.0..=max).contains(&v)) {
                return Err(ApiError::bad_request(format!(
                    "{field}: must be a finite number between 0 and {max}"
                )));
            }
        }
        for (field, v) in [
            ("completed", self.completed),
            ("violations", self.violations),
        ] {
            if v > MAX_REPORTED_COUNT {
                return Err(ApiError::bad_request(format!(
                    "{field}: must be at most {MAX_REPORTED_COUNT}"
                )));
            }
        }
        if self.violations > self.completed {
            return Err(ApiError::bad_request(
                "violations: more than the requests completed",
            ));
        }
        Ok(())
    }
}

/// The quota part of an instance's GPUs, in API terms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    /// Instance id.
    pub id: i64,
    /// `starting` or `running`.
    pub state: InstanceState,
    /// Attempt (+1 at each restart).
    pub attempt: u32,
    /// Restarts after its process ended on its own.
    pub restarts: u32,
    /// When it was created (Unix seconds).
    pub created_at: f64,
    /// What it holds, down to the device (`devices.part` is `whole`, `mig` or `quota`).
    pub allocation: Vec<PlacedShare>,
    /// The backend's run (Slurm job id, local run name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_id: Option<String>,
    /// Its last load report, if any (this attempt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadReport>,
}

/// A service in the API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceView {
    /// Daemon service id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Owner.
    pub tenant: String,
    /// `pending`, `active`, `ended` or `retired`.
    pub state: ServiceState,
    /// Submission (Unix seconds).
    pub submitted_at: f64,
    /// When requests start (submission + `startSeconds`).
    pub start_at: f64,
    /// When the service ends (submission + `endSeconds`).
    pub end_at: f64,
    /// When it was retired through the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<f64>,
    /// Instance restarts after a crash.
    pub restarts: u32,
    /// Live instances, by id.
    pub instances: Vec<InstanceView>,
    /// What each instance runs.
    pub run: RunSpec,
    /// Last noteworthy event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `GET /v1/services`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceList {
    /// Visible services, by id.
    pub services: Vec<ServiceView>,
}

fn bad(e: impl std::fmt::Display) -> DaemonError {
    DaemonError::StoreFormat(e.to_string())
}

/// Writes service and instance rows (inside the store's transaction for one batch).
pub(crate) fn write(
    tx: &Connection,
    services: &[ServiceRow],
    instances: &[InstanceRow],
) -> Result<(), DaemonError> {
    let mut st = tx.prepare_cached(
        "INSERT OR REPLACE INTO services (id, tenant, name, body, submit_us, state, retired_us,
         restarts, message) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)",
    )?;
    for s in services {
        let state = if s.retired_us.is_some() {
            ServiceState::Retired
        } else {
            ServiceState::Active
        };
        st.execute(params![
            s.id,
            s.tenant,
            s.name,
            s.body,
            s.submit_us as i64,
            state.as_str(),
            s.retired_us.map(|v| v as i64),
            s.restarts,
            s.message,
        ])?;
    }
    let mut st = tx.prepare_cached(
        "INSERT OR REPLACE INTO instances (id, service_id, attempt, placement, handle, state,
         created_us, restarts, token_sha256) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)",
    )?;
    for i in instances {
        st.execute(params![
            i.id,
            i.service_id,
            i.attempt,
            serde_json::to_string(&i.placement).map_err(bad)?,
            i.handle,
            i.state.as_str(),
            i.created_us as i64,
            i.restarts,
            i.token_sha256,
        ])?;
    }
    Ok(())
}

/// Every service, by id, and every instance not gone.
pub(crate) fn load(conn: &Connection) -> Result<(Vec<ServiceRow>, Vec<InstanceRow>), DaemonError> {
    let mut st = conn.prepare(
        "SELECT id, tenant, name, body, submit_us, retired_us, restarts, message
         FROM services ORDER BY id",
    )?;
    let services = st
        .query_map([], |r| {
            Ok(ServiceRow {
                id: r.get(0)?,
                tenant: r.get(1)?,
                name: r.get(2)?,
                body: r.get(3)?,
                submit_us: r.get::<_, i64>(4)?.max(0) as u64,
                retired_us: r.get::<_, Option<i64>>(5)?.map(|v| v.max(0) as u64),
                restarts: r.get(6)?,
                message: r.get(7)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut st = conn.prepare(
        "SELECT id, service_id, attempt, placement, handle, state, created_us, restarts,
         token_sha256 FROM instances WHERE state != 'gone' ORDER BY id",
    )?;
    let raw = st
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, u32>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, u32>(7)?,
                r.get::<_, Option<String>>(8)?,
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut instances = Vec::with_capacity(raw.len());
    for (id, service_id, attempt, placement, handle, state, created, restarts, token) in raw {
        instances.push(InstanceRow {
            id,
            service_id,
            attempt,
            placement: serde_json::from_str(&placement)
                .map_err(|e| bad(format!("instance {id}: placement: {e}")))?,
            handle,
            state: InstanceState::parse(&state),
            created_us: created.max(0) as u64,
            restarts,
            token_sha256: token,
        });
    }
    Ok((services, instances))
}

/// The largest instance id ever used (ids are never reused, even after a restart).
pub(crate) fn max_instance_id(conn: &Connection) -> Result<i64, DaemonError> {
    Ok(conn
        .query_row("SELECT MAX(id) FROM instances", [], |r| {
            r.get::<_, Option<i64>>(0)
        })
        .optional()?
        .flatten()
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_numbers_beyond_their_bounds_are_refused() {
        let ok = LoadReport {
            queue_length: 3,
            requests_per_second: 250.0,
            p50_latency_seconds: 0.05,
            p99_latency_seconds: 0.2,
            completed: 100,
            violations: 2,
            ..LoadReport::default()
        };
        ok.validate().unwrap();
        for (field, bad) in [
            (
                "requestsPerSecond",
                LoadReport {
                    requests_per_second: 1e308,
                    ..ok.clone()
                },
            ),
            (
                "p99LatencySeconds",
                LoadReport {
                    p99_latency_seconds: 1e300,
                    ..ok.clone()
                },
            ),
            (
                "completed",
                LoadReport {
                    completed: u64::MAX,
                    violations: 0,
                    ..ok.clone()
                },
            ),
        ] {
            let e = bad.validate().unwrap_err();
            assert!(e.message.starts_with(field), "{}", e.message);
        }
    }
}
