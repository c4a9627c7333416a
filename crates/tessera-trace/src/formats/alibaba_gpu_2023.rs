//! Alibaba GPU 2023 pod lists (`cluster-trace-gpu-v2023`, `openb_pod_list_*.csv`; Weng et al.,
//! "Beware of Fragmentation", USENIX ATC'23): CSV with the header
//! `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
//! deletion_time,scheduled_time`, times in seconds from the trace start.
//!
//! One job per pod asking for GPUs: submit = `creation_time`, run time = `deletion_time` −
//! `scheduled_time`; `cpu_milli` and `memory_mib` become explicit CPU and memory requests.
//! `gpu_milli` below 1000 on a one-GPU pod becomes a [`GpuShareRequest`] (a fraction of one
//! GPU); `gpu_spec` lists the allowed GPU models (`|`-separated, resolved through the catalog;
//! Alibaba's `V100M16`/`V100M32` are aliases of `V100-16GB`/`V100-32GB`, while `G2`/`G3` are
//! models the trace does not disclose and so are unknown). `qos` (`LS`, `BE`, `Burstable`,
//! `Guaranteed`) becomes the tenant, so per-tenant policies keep the classes apart; the trace
//! gives no ordering between them, so priority stays 0. CPU-only pods (`num_gpu` 0), pods never
//! scheduled (`scheduled_time` empty) and pods with no run time are dropped and counted in
//! [`crate::LoadedTrace::dropped`].

use tessera_model::{Bytes, GpuShareRequest, MilliCpu, SimTime, TrainingJob};

use crate::error::{TraceError, TraceErrorKind as K};
use crate::fields::{
    default_iterations, parse_count, parse_micros, positive_duration, read_rows_dropping, Ctx,
    Layout, Parsed, Row,
};

/// Columns an Alibaba GPU 2023 pod list must have.
pub const REQUIRED: [&str; 11] = [
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Parsed, TraceError> {
    read_rows_dropping(ctx, text, &Layout::csv_with_header(&REQUIRED), job)
}

fn count(row: &Row<'_>, field: &str) -> Result<u64, TraceError> {
    parse_count(row.nonempty(field)?).map_err(|k| row.err(field, k))
}

fn seconds(row: &Row<'_>, field: &str) -> Result<Option<u64>, TraceError> {
    row.opt(field)?
        .map(|v| parse_micros(v).map_err(|k| row.err(field, k)))
        .transpose()
}

fn job(row: &Row<'_>) -> Result<Option<TrainingJob>, TraceError> {
    let name = row.nonempty("name")?.to_string();
    let cpu_milli = count(row, "cpu_milli")?;
    let memory_mib = count(row, "memory_mib")?;
    let num_gpu = count(row, "num_gpu")?;
    let gpu_milli = count(row, "gpu_milli")?;
    if gpu_milli > 1000 {
        return Err(row.err(
            "gpu_milli",
            K::OutOfRange(format!("{gpu_milli} (at most 1000 = one whole GPU)")),
        ));
    }
    let gpu_types = row.gpu_types("gpu_spec")?;
    let tenant = row.nonempty("qos")?.to_string();
    row.nonempty("pod_phase")?;
    let Some(created) = seconds(row, "creation_time")? else {
        return Err(row.err("creation_time", K::EmptyValue));
    };
    let deleted = seconds(row, "deletion_time")?;
    let scheduled = seconds(row, "scheduled_time")?;
    if let (Some(d), Some(s)) = (deleted, scheduled) {
        if d < s {
            return Err(row.err(
                "deletion_time",
                K::Invalid(format!(
                    "deleted at {} s, before it was scheduled at {} s",
                    d as f64 / 1e6,
                    s as f64 / 1e6
                )),
            ));
        }
    }
    if let Some(s) = scheduled {
        if s < created {
            return Err(row.err(
                "scheduled_time",
                K::Invalid(format!(
                    "scheduled at {} s, before it was created at {} s",
                    s as f64 / 1e6,
                    created as f64 / 1e6
                )),
            ));
        }
    }
    let (Some(deleted), Some(scheduled)) = (deleted, scheduled) else {
        return Ok(None);
    };
    if num_gpu == 0 || deleted == scheduled {
        return Ok(None);
    }
    if gpu_milli == 0 {
        return Err(row.err("gpu_milli", K::NotPositive("0".into())));
    }
    let gpus = row.gpus("num_gpu")?;
    let duration = positive_duration(deleted - scheduled, row.text("deletion_time")?)
        .map_err(|k| row.err("deletion_time", k))?;
    let mut job = TrainingJob::simple(0, SimTime::from_micros(created), gpus, duration);
    job.name = name.into();
    job.tenant = tenant;
    job.gpu_types = gpu_types;
    job.iterations = default_iterations(duration);
    job.cpu = (cpu_milli > 0).then_some(MilliCpu(cpu_milli));
    if memory_mib > 0 {
        let bytes = memory_mib
            .checked_mul(1 << 20)
            .ok_or_else(|| row.err("memory_mib", K::OutOfRange(memory_mib.to_string())))?;
        job.memory = Some(Bytes(bytes));
    }
    if gpu_milli < 1000 {
        if gpus != 1 {
            return Err(row.err(
                "gpu_milli",
                K::Invalid(format!(
                    "a share of {gpu_milli}/1000 GPU is only meaningful with num_gpu 1, got {gpus}"
                )),
            ));
        }
        // Fits u16: checked to be below 1000 above.
        job.gpu_share = Some(GpuShareRequest {
            sm_permille: gpu_milli as u16,
            memory: None,
        });
    }
    Ok(Some(job))
}
