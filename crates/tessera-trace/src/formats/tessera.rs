//! The canonical Tessera trace: CSV with a header, columns in any order (see
//! `docs/trace-format.md`). The writer emits every column; reading what it wrote gives back an
//! equal workload.

use std::io::Write;

use tessera_model::{
    GpuCatalog, GpuModelId, GpuShareRequest, JobId, MigRequest, TrainingJob, Workload,
};

use crate::error::{TraceError, TraceErrorKind};
use crate::fields::{default_iterations, read_rows, Ctx, Layout, Parsed, Row};

/// Every column, in the order the writer emits them.
pub const COLUMNS: [&str; 14] = [
    "job_id",
    "submit_s",
    "gpus",
    "duration_s",
    "iterations",
    "model",
    "batch_size",
    "gpu_types",
    "tenant",
    "priority",
    "cpu",
    "memory",
    "gpu_share",
    "mig",
];

/// Columns a Tessera trace must have.
pub const REQUIRED: [&str; 4] = ["job_id", "submit_s", "gpus", "duration_s"];

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Parsed, TraceError> {
    read_rows(ctx, text, &Layout::csv_with_header(&REQUIRED), job)
}

fn job(row: &Row<'_>) -> Result<TrainingJob, TraceError> {
    let duration = row.duration("duration_s")?;
    let iterations = match row.opt("iterations")? {
        Some(_) => row.count("iterations")?,
        None => default_iterations(duration),
    };
    let gpus = row.gpus("gpus")?;
    let share = gpu_share(row, "gpu_share")?;
    if share.is_some() && gpus != 1 {
        return Err(row.err(
            "gpu_share",
            TraceErrorKind::Invalid(format!(
                "a share of one GPU needs gpus 1, this job asks for {gpus}"
            )),
        ));
    }
    let gpu_types = row.gpu_types("gpu_types")?;
    let mig = mig_request(row, "mig", gpus, share.is_some(), &gpu_types)?;
    Ok(TrainingJob {
        id: JobId(0),
        name: row.text("job_id")?.into(),
        submit: row.time("submit_s")?,
        tenant: row.text("tenant")?.to_string(),
        priority: row.opt_i32("priority", 0)?,
        model: row.text("model")?.to_string(),
        batch_size: row.opt_u32("batch_size")?,
        gpus,
        gpu_types,
        iterations,
        duration,
        cpu: row.opt_cpu("cpu")?,
        memory: row.opt_memory("memory")?,
        gpu_share: share,
        mig,
    })
}

/// One MIG instance (`nvidia.com/mig-3g.20gb`, `3g.20gb`, `any`), only for one-GPU jobs
/// without a `gpu_share`, checked against the catalog and the job's GPU types; empty = none.
pub(crate) fn mig_request(
    row: &Row<'_>,
    name: &str,
    gpus: u32,
    shared: bool,
    gpu_types: &[GpuModelId],
) -> Result<Option<MigRequest>, TraceError> {
    let Some(value) = row.opt(name)? else {
        return Ok(None);
    };
    let invalid = |m: String| row.err(name, TraceErrorKind::Invalid(m));
    let req = MigRequest::parse(value).map_err(invalid)?;
    if gpus != 1 {
        return Err(invalid(format!(
            "a MIG instance is part of one GPU: needs gpus 1, this job asks for {gpus}"
        )));
    }
    if shared {
        return Err(invalid("give either gpu_share or mig, not both".into()));
    }
    row.catalog()
        .check_mig_request(&req, gpu_types)
        .map_err(invalid)?;
    Ok(Some(req))
}

/// A fraction of one GPU in permille (1..=999), only for one-GPU jobs; empty = whole GPUs.
pub(crate) fn gpu_share(row: &Row<'_>, name: &str) -> Result<Option<GpuShareRequest>, TraceError> {
    let Some(value) = row.opt(name)? else {
        return Ok(None);
    };
    let permille = crate::fields::parse_count(value).map_err(|k| row.err(name, k))?;
    if !(1..=999).contains(&permille) {
        return Err(row.err(
            name,
            TraceErrorKind::OutOfRange(format!("{value} (a share is 1..=999 permille of one GPU)")),
        ));
    }
    Ok(Some(GpuShareRequest {
        sm_permille: permille as u16,
        memory: None,
    }))
}

/// Seconds with up to six decimals, exactly representing whole microseconds.
pub(crate) fn format_secs(micros: u64) -> String {
    let (whole, frac) = (micros / 1_000_000, micros % 1_000_000);
    if frac == 0 {
        whole.to_string()
    } else {
        let frac = format!("{frac:06}");
        format!("{whole}.{}", frac.trim_end_matches('0'))
    }
}

/// Writes `workload` as a canonical Tessera CSV (header and every column).
///
/// Text fields are written as they are (quoted where CSV needs it); the reader trims
/// surrounding whitespace, so names with leading or trailing blanks do not round-trip.
pub fn write_tessera_csv<W: Write>(
    w: W,
    workload: &Workload,
    catalog: &GpuCatalog,
) -> Result<(), TraceError> {
    let mut out = TesseraCsvWriter::new(w, catalog)?;
    for j in workload.jobs() {
        out.write(j)?;
    }
    out.finish()
}

/// A canonical Tessera CSV written one job at a time (for streams too large to hold).
pub struct TesseraCsvWriter<'c, W: Write> {
    out: csv::Writer<W>,
    catalog: &'c GpuCatalog,
}

fn io_error(e: impl std::fmt::Display) -> TraceError {
    TraceError::whole("<output>", TraceErrorKind::Io(e.to_string()))
}

impl<'c, W: Write> TesseraCsvWriter<'c, W> {
    /// Writes the header.
    pub fn new(w: W, catalog: &'c GpuCatalog) -> Result<Self, TraceError> {
        let mut out = csv::WriterBuilder::new().from_writer(w);
        out.write_record(COLUMNS).map_err(io_error)?;
        Ok(TesseraCsvWriter { out, catalog })
    }

    /// Writes one job as a row.
    pub fn write(&mut self, j: &TrainingJob) -> Result<(), TraceError> {
        let gpu_types: Vec<&str> = j
            .gpu_types
            .iter()
            .map(|id| self.catalog.get(*id).name.as_str())
            .collect();
        self.out
            .write_record([
                &*j.name,
                &format_secs(j.submit.as_micros()),
                &j.gpus.to_string(),
                &format_secs(j.duration.as_micros()),
                &j.iterations.to_string(),
                &j.model,
                &j.batch_size.map(|b| b.to_string()).unwrap_or_default(),
                &gpu_types.join("|"),
                &j.tenant,
                &j.priority.to_string(),
                &j.cpu.map(|c| c.to_string()).unwrap_or_default(),
                &j.memory.map(|m| m.to_string()).unwrap_or_default(),
                &j.gpu_share
                    .map(|s| s.sm_permille.to_string())
                    .unwrap_or_default(),
                &j.mig.as_ref().map(|m| m.to_string()).unwrap_or_default(),
            ])
            .map_err(io_error)
    }

    /// Flushes what is buffered.
    pub fn finish(mut self) -> Result<(), TraceError> {
        self.out.flush().map_err(io_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_format_exactly() {
        assert_eq!(format_secs(0), "0");
        assert_eq!(format_secs(1_500_000), "1.5");
        assert_eq!(format_secs(1), "0.000001");
        assert_eq!(format_secs(u64::MAX), "18446744073709.551615");
    }
}
