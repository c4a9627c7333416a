//! Acme job traces (Shanghai AI Lab, NSDI'24; `AcmeTrace` `data/job_trace/trace_seren.csv`
//! and `trace_kalos.csv`): CSV with a header naming at least
//! `job_id,gpu_num,state,submit_time,duration`; `user`, `node_num`, `cpu_num` and (Kalos)
//! `mem_per_pod_GB` are used when present, the other columns (`type`, `start_time`,
//! `end_time`, `fail_time`, `stop_time`, `queue`, `gpu_time`, ...) are ignored.
//!
//! `submit_time` is a date-time with an offset (`2023-03-01 00:18:22+08:00`); submit times
//! become relative to the earliest job. `duration` is the run time in seconds; `user` becomes
//! the tenant; `cpu_num` is the job's CPU request and `mem_per_pod_GB` × `node_num` (pods, one
//! per node) its memory request in GB (10^9 bytes). CPU-only jobs (`gpu_num` 0) and jobs that
//! never ran (`duration` 0) are dropped and counted in [`crate::LoadedTrace::dropped`].

use tessera_model::{Bytes, MilliCpu, SimTime, TrainingJob};

use crate::error::{TraceError, TraceErrorKind};
use crate::fields::{
    default_iterations, parse_count, parse_micros, parse_number, read_rows_dropping, Ctx, Layout,
    Parsed, Row,
};
use crate::formats::pollux_philly::parse_datetime;

/// Columns an Acme trace must have.
pub const REQUIRED: [&str; 5] = ["job_id", "gpu_num", "state", "submit_time", "duration"];

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Parsed, TraceError> {
    read_rows_dropping(ctx, text, &Layout::csv_with_header(&REQUIRED), job)
}

fn job(row: &Row<'_>) -> Result<Option<TrainingJob>, TraceError> {
    let name = row.nonempty("job_id")?.to_string();
    let stamp = row.nonempty("submit_time")?;
    let submit = parse_datetime(stamp)
        .map(SimTime::from_micros)
        .ok_or_else(|| {
            row.err(
                "submit_time",
                TraceErrorKind::BadTimestamp(stamp.to_string()),
            )
        })?;
    row.nonempty("state")?;
    let gpus = parse_count(row.nonempty("gpu_num")?).map_err(|k| row.err("gpu_num", k))?;
    let run = parse_micros(row.nonempty("duration")?).map_err(|k| row.err("duration", k))?;
    let pods = match row.opt("node_num")? {
        Some(v) => parse_count(v).map_err(|k| row.err("node_num", k))?,
        None => 1,
    };
    let cpus = match row.opt("cpu_num")? {
        Some(v) => parse_count(v).map_err(|k| row.err("cpu_num", k))?,
        None => 0,
    };
    let mem_gb = match row.opt("mem_per_pod_gb")? {
        Some(v) => {
            let gb = parse_number(v).map_err(|k| row.err("mem_per_pod_GB", k))?;
            if gb < 0.0 {
                return Err(row.err("mem_per_pod_GB", TraceErrorKind::Negative(v.to_string())));
            }
            gb
        }
        None => 0.0,
    };
    if gpus == 0 || run == 0 {
        return Ok(None);
    }
    if pods == 0 {
        return Err(row.err("node_num", TraceErrorKind::NotPositive("0".into())));
    }
    let gpus = row.gpus("gpu_num")?;
    let duration = row.duration("duration")?;
    let mut job = TrainingJob::simple(0, submit, gpus, duration);
    job.name = name.into();
    job.tenant = row.text("user")?.to_string();
    job.iterations = default_iterations(duration);
    if cpus > 0 {
        let milli = cpus
            .checked_mul(1000)
            .ok_or_else(|| row.err("cpu_num", TraceErrorKind::OutOfRange(cpus.to_string())))?;
        job.cpu = Some(MilliCpu(milli));
    }
    if mem_gb > 0.0 {
        let bytes = mem_gb * 1e9 * pods as f64;
        if bytes >= u64::MAX as f64 {
            return Err(row.err(
                "mem_per_pod_GB",
                TraceErrorKind::OutOfRange(format!("{mem_gb} GB x {pods} pods")),
            ));
        }
        job.memory = Some(Bytes(bytes.ceil() as u64));
    }
    Ok(Some(job))
}
