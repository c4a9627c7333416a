//! Helios job logs (SenseTime, SC'21; `HeliosData` `<cluster>/cluster_log.csv`): CSV with a
//! header naming at least `job_id,vc,gpu_num,cpu_num,state,submit_time,duration` (the full log
//! also has `user`, `jobname`, `node_num`, `start_time`, `end_time`, `queue`, which are
//! ignored).
//!
//! `submit_time` is a date-time (`YYYY-MM-DD HH:MM:SS`; submit times become relative to the
//! earliest job); `duration` is the run time in seconds; `vc` (the virtual cluster) becomes the
//! tenant; `cpu_num` becomes the job's CPU request. CPU-only jobs (`gpu_num` 0) and jobs that
//! never ran (`duration` 0) are well-formed but cannot be replayed on GPUs: they are dropped
//! and counted in [`crate::LoadedTrace::dropped`]. Jobs of every final state are replayed with
//! the run time they had (a failed job held its GPUs that long too).

use tessera_model::{MilliCpu, SimTime, TrainingJob};

use crate::error::{TraceError, TraceErrorKind};
use crate::fields::{default_iterations, read_rows_dropping, Ctx, Layout, Parsed, Row};
use crate::formats::pollux_philly::parse_datetime;

/// Columns a Helios log must have.
pub const REQUIRED: [&str; 7] = [
    "job_id",
    "vc",
    "gpu_num",
    "cpu_num",
    "state",
    "submit_time",
    "duration",
];

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
    let gpus =
        crate::fields::parse_count(row.nonempty("gpu_num")?).map_err(|k| row.err("gpu_num", k))?;
    let cpus =
        crate::fields::parse_count(row.nonempty("cpu_num")?).map_err(|k| row.err("cpu_num", k))?;
    let run = crate::fields::parse_micros(row.nonempty("duration")?)
        .map_err(|k| row.err("duration", k))?;
    if gpus == 0 || run == 0 {
        return Ok(None);
    }
    let gpus = row.gpus("gpu_num")?;
    let duration = row.duration("duration")?;
    let mut job = TrainingJob::simple(0, submit, gpus, duration);
    job.name = name.into();
    job.tenant = row.text("vc")?.to_string();
    job.iterations = default_iterations(duration);
    job.cpu = (cpus > 0)
        .then(|| cpus.checked_mul(1000).map(MilliCpu))
        .flatten();
    if cpus > 0 && job.cpu.is_none() {
        return Err(row.err("cpu_num", TraceErrorKind::OutOfRange(cpus.to_string())));
    }
    Ok(Some(job))
}
