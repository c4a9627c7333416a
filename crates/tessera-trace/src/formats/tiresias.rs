//! Tiresias simulator traces (SymbioticLab/Tiresias, `simulator/*.csv`): CSV with header
//! `job_id,num_gpu,submit_time,iterations,model_name,duration,interval`. Times are seconds
//! from the start of the trace; `interval` (the gap to the next arrival) is ignored.

use tessera_model::{JobId, TrainingJob};

use crate::error::TraceError;
use crate::fields::{default_iterations, read_rows, Ctx, Layout, Parsed, Row};

/// Columns a Tiresias trace must have (`job_id`, `iterations` and `model_name` are optional).
pub const REQUIRED: [&str; 3] = ["num_gpu", "submit_time", "duration"];

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Parsed, TraceError> {
    read_rows(ctx, text, &Layout::csv_with_header(&REQUIRED), job)
}

fn job(row: &Row<'_>) -> Result<TrainingJob, TraceError> {
    let name = match row.opt("job_id")? {
        Some(id) => id.to_string(),
        None => row.index.to_string(),
    };
    let gpus = row.gpus("num_gpu")?;
    let submit = row.time("submit_time")?;
    let duration = row.duration("duration")?;
    let iterations = match row.opt("iterations")? {
        Some(_) => row.count("iterations")?,
        None => default_iterations(duration),
    };
    let mut job = TrainingJob::simple(0, submit, gpus, duration);
    job.id = JobId(0);
    job.name = name.into();
    job.iterations = iterations;
    job.model = row.text("model_name")?.to_string();
    Ok(job)
}
